/* Host sync's state per comm, made with its first window: everything that
 * could wait for the context (loading the library's kernels, allocating
 * device or mapped host memory) happens here or at window creation, never
 * in a host sync call (DESIGN.md section 8).
 *
 * The path is decided once per comm, the same on every node rank, from
 * what every node rank tells (one bounded MPI_Iallgather on the node):
 *   memops  VMMIPC_SYNC=memops;
 *   kernels VMMIPC_SYNC=kernel;
 *   auto    where both are usable on every node rank (64-bit stream memory
 *           operations, the kernels loaded), a trial measures them next
 *           (trial.c); else the one that is. The faster path depends on
 *           the GPU and on MPS: on one H200 under MPS memory operations won
 *           both host rows at 2 ranks, on one H100 kernels did; without MPS
 *           kernels of two processes time-slice (2.2 ms a hop).
 * Node ranks with different VMMIPC_SYNC settings fail the window. From the
 * same records, also the same on every node rank:
 *   the scope of the device API (vmmipc_win_device_t.scope): GPU where
 *           every node rank's pool is on one GPU (same UUID) and none set
 *           VMMIPC_DEV_SCOPE=sys, else system;
 *   the shape of the counted memory-operation barrier (VMMIPC_SYNC_BARRIER:
 *           flat, the default, gather or dissem; barrier.c), which must be
 *           the same on every node rank. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/testhooks.h"
#include "driver/device.h"
#include "sync/release.h"
#include "sync/sync.h"

/* What each node rank tells the others (MPI_BYTE). */
struct path_info {
  int32_t mode;      /* VMMIPC__MODE_* */
  int32_t kernels;   /* 1: the kernels loaded into its current context */
  int32_t memops;    /* 1: its device has 64-bit stream memory operations */
  uint8_t shape;     /* VMMIPC__BAR_* (VMMIPC_SYNC_BARRIER) */
  uint8_t scope;     /* VMMIPC__SCOPE_* (VMMIPC_DEV_SCOPE) */
  uint8_t pad[2];
  unsigned char gpu[16]; /* its device's UUID (0: unknown) */
};

static const char *mode_name(int m) {
  return m == VMMIPC__MODE_KERNEL ? "kernel" : m == VMMIPC__MODE_MEMOPS ? "memops" : m == VMMIPC__MODE_AUTO ? "auto" : "?";
}

static const char *shape_name(int m) {
  return m == VMMIPC__BAR_FLAT ? "flat" : m == VMMIPC__BAR_GATHER ? "gather" : m == VMMIPC__BAR_DISSEM ? "dissem" : "?";
}

/* VMMIPC_SYNC_BARRIER and VMMIPC_DEV_SCOPE, read at each comm's setup. */
static int barrier_shape(void) {
  const char *e = getenv("VMMIPC_SYNC_BARRIER");
  if (!e || !*e || strcmp(e, "flat") == 0) return VMMIPC__BAR_FLAT;
  if (strcmp(e, "gather") == 0) return VMMIPC__BAR_GATHER;
  if (strcmp(e, "dissem") == 0) return VMMIPC__BAR_DISSEM;
  return VMMIPC__BAR_BAD;
}

static int dev_scope(void) {
  const char *e = getenv("VMMIPC_DEV_SCOPE");
  if (!e || !*e || strcmp(e, "auto") == 0) return VMMIPC__SCOPE_AUTO;
  if (strcmp(e, "sys") == 0) return VMMIPC__SCOPE_SYS;
  return VMMIPC__SCOPE_BAD;
}

/* This rank's part: loads the kernels unless memory operations are forced. */
static void describe(const vmmipc__cu_t *cu, int mode, const char *op, struct path_info *me) {
  const int shape = me->shape, scope = me->scope;
  memset(me, 0, sizeof *me);
  me->mode = mode;
  me->shape = (uint8_t)shape;
  me->scope = (uint8_t)scope;
  int dev = 0, ok = 0;
  if (vmmipc__current_device(cu, op, &dev)) return;
  CUuuid u;
  if (cu->cuDeviceGetUuid(&u, dev) == CUDA_SUCCESS) memcpy(me->gpu, u.bytes, sizeof me->gpu);
  if (cu->cuDeviceGetAttribute(&ok, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, dev) == CUDA_SUCCESS)
    me->memops = ok != 0;
  vmmipc__kernels_t k;
  if (mode != VMMIPC__MODE_MEMOPS) me->kernels = vmmipc__kernels_load(cu, op, &k) == VMMIPC_SUCCESS;
}

vmmipc_result_t vmmipc__sync_allgather(struct vmmipc_comm *c, const void *mine, size_t len, void **all,
                                       const char *what, const char *op) {
  int n = c->node_size;
  *all = calloc((size_t)n, len);
  void *send = malloc(len); /* MPI may keep both after a timeout */
  if (!*all || !send) {
    free(*all);
    free(send);
    *all = NULL;
    return vmmipc__error(VMMIPC_ERR_NO_MEMORY, "%s: %d %s", op, n, what);
  }
  memcpy(send, mine, len);
  /* Watched (4): a node peer's hang-up, exit or abort (its END frame)
   * ends the wait at once, as this rank's own abort does. */
  char *watch = c->tp ? calloc((size_t)n, 1) : NULL;
  for (int q = 0; watch && q < n; q++) watch[q] = q != c->node_rank ? 4 : 0;
  MPI_Request req = MPI_REQUEST_NULL;
  int mrc = MPI_Iallgather(send, (int)len, MPI_BYTE, *all, (int)len, MPI_BYTE, c->node, &req);
  int64_t started = vmmipc__now_ms();
  int gone = -1;
  vmmipc_result_t gone_code = VMMIPC_ERR_PEER;
  /* A step of the call: its bound is the call's, two slacks early (comm/deadline.c). */
  int w = mrc == MPI_SUCCESS
              ? vmmipc__mpi_wait_watch(c, &req, 1, vmmipc__step_deadline(c), &mrc, watch, &gone, &gone_code)
              : VMMIPC__WAIT_MPI;
  free(watch);
  if (w > 0) { /* pending on the node comm: MPI keeps the buffers and the comms */
    char why[VMMIPC__ERRMSG_MAX];
    snprintf(why, sizeof why, "%s", vmmipc_last_error());
    vmmipc__mpi_abandon(&req, 1, 0, *all);
    vmmipc__mpi_keep(send);
    *all = NULL;
    c->mpi_dirty = 1;
    if (w == VMMIPC__WAIT_GONE) {
      vmmipc__error(gone_code, "%s: gathering the node's %s: %s", op, what, why);
      vmmipc__error_rank(c->rank_of[gone]);
      return gone_code;
    }
    if (w == VMMIPC__WAIT_ABORTED) return vmmipc__error(VMMIPC_ERR_ABORTED, "%s: %s", op, why);
    return vmmipc__error(VMMIPC_ERR_TIMEOUT,
                         "%s: gathering the node's %s timed out after %d ms: a rank of this node is not in the call",
                         op, what, (int)(vmmipc__now_ms() - started));
  }
  free(send);
  if (w < 0) {
    free(*all);
    *all = NULL;
    return vmmipc__mpi_error(mrc, "%s: MPI_Iallgather of the %s", op, what);
  }
  return VMMIPC_SUCCESS;
}

/* The same decision on every node rank, from the same records. */
static vmmipc_result_t decide(struct vmmipc_comm *c, const struct path_info *all, const char *raw,
                              struct vmmipc__sync *s, const char *op) {
  int n = c->node_size, kernels = 1, memops = 1, one_gpu = 1, sys = 0;
  static const unsigned char unknown[16];
  for (int q = 1; q < n; q++)
    if (all[q].mode != all[0].mode)
      return vmmipc__error(VMMIPC_ERR_INVALID_ARG,
                           "%s: the node's ranks disagree on VMMIPC_SYNC: rank %d uses %s and rank %d %s; hint: set "
                           "it alike on every rank",
                           op, c->rank_of[0], mode_name(all[0].mode), c->rank_of[q], mode_name(all[q].mode));
  if (all[0].mode == VMMIPC__MODE_BAD)
    return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "%s: VMMIPC_SYNC is \"%s\"; hint: use kernel, memops or auto", op,
                         raw ? raw : "");
  for (int q = 0; q < n; q++)
    if (all[q].shape == VMMIPC__BAR_BAD || all[q].scope == VMMIPC__SCOPE_BAD)
      return vmmipc__error(VMMIPC_ERR_INVALID_ARG,
                           "%s: rank %d sets VMMIPC_SYNC_BARRIER or VMMIPC_DEV_SCOPE to a value it does not know; "
                           "hint: VMMIPC_SYNC_BARRIER is flat (default), gather or dissem, VMMIPC_DEV_SCOPE auto "
                           "(default) or sys",
                           op, c->rank_of[q]);
  for (int q = 1; q < n; q++)
    if (all[q].shape != all[0].shape)
      return vmmipc__error(VMMIPC_ERR_INVALID_ARG,
                           "%s: the node's ranks disagree on VMMIPC_SYNC_BARRIER: rank %d uses %s and rank %d %s; "
                           "hint: set it alike on every rank",
                           op, c->rank_of[0], shape_name(all[0].shape), c->rank_of[q], shape_name(all[q].shape));
  for (int a = 0; a < n; a++) {
    kernels &= all[a].kernels;
    memops &= all[a].memops;
    sys |= all[a].scope == VMMIPC__SCOPE_SYS;
    one_gpu &= memcmp(all[a].gpu, all[0].gpu, sizeof all[a].gpu) == 0 &&
               memcmp(all[a].gpu, unknown, sizeof unknown) != 0;
  }
  /* kernel is obeyed (a rank whose kernels did not load fails its calls,
   * saying why); auto takes the one path usable everywhere, and where both
   * are, trial.c measures them next (memory operations until then). */
  s->by = all[0].mode != VMMIPC__MODE_AUTO ? VMMIPC_SYNC_BY_SETTING : VMMIPC_SYNC_BY_SUPPORT;
  int auto_kernels = all[0].mode == VMMIPC__MODE_AUTO && kernels && !memops;
  s->path = all[0].mode == VMMIPC__MODE_KERNEL || auto_kernels ? VMMIPC__PATH_KERNELS : VMMIPC__PATH_MEMOPS;
  s->barrier_path = s->path;
  s->shape = all[0].shape;
  s->scope = one_gpu && !sys ? VMMIPC_DEV_SCOPE_GPU : VMMIPC_DEV_SCOPE_SYS;
  return VMMIPC_SUCCESS;
}

/* The comm's alarm: a claim word in device memory (zeroed on the pool's
 * private stream) and a record in mapped host memory. */
static vmmipc_result_t make_alarm(const vmmipc__cu_t *cu, struct vmmipc__pool *p, struct vmmipc__sync *s,
                                  const char *op) {
  static const unsigned long long zero = 0;
  void *hp = NULL;
  CUresult rc = cu->cuMemAlloc(&s->alarm_claim, sizeof zero);
  if (!rc) rc = cu->cuMemcpyHtoDAsync(s->alarm_claim, &zero, sizeof zero, p->stream);
  if (!rc) rc = cu->cuStreamSynchronize(p->stream);
  if (!rc) rc = cu->cuMemHostAlloc(&hp, sizeof *s->alarm, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE);
  if (!rc) {
    s->alarm = hp;
    memset((void *)s->alarm, 0, sizeof *s->alarm);
    rc = cu->cuMemHostGetDevicePointer(&s->alarm_dev, hp, 0);
  }
  if (rc) return vmmipc__cu_error(rc, NULL, "%s: the comm's host-sync alarm", op);
  return VMMIPC_SUCCESS;
}

vmmipc_result_t vmmipc__sync_setup(struct vmmipc_comm *c, struct vmmipc__pool *p, vmmipc_result_t local,
                                   int *trial, const char *op) {
  const char *raw = NULL;
  int mode = vmmipc__sync_mode(&raw);
  const vmmipc__cu_t *cu = NULL;
  struct path_info mine;
  memset(&mine, 0, sizeof mine);
  mine.mode = mode;
  mine.shape = (uint8_t)barrier_shape();
  mine.scope = (uint8_t)dev_scope();
  if (!local) local = vmmipc__cu_load(&cu);
  if (!local) describe(cu, mode, op, &mine);
  struct vmmipc__sync *s = local ? NULL : calloc(1, sizeof *s);
  if (!local && !s) local = vmmipc__error(VMMIPC_ERR_NO_MEMORY, "%s: host-sync state", op);
  if (s) {
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    p->sync = s; /* freed with the pool, whatever follows */
    s->nchunks = (p->slices + VMMIPC__ARENA_SLICES - 1) / VMMIPC__ARENA_SLICES;
    size_t N = (size_t)c->size, n = (size_t)c->node_size;
    s->words = 4 + 4 * N + (n + 1) / 2 + 2 * n; /* device.c's layout */
    s->chunk = calloc((size_t)s->nchunks, sizeof *s->chunk);
    s->records = calloc((size_t)s->nchunks, sizeof *s->records);
    s->records_dev = calloc((size_t)s->nchunks, sizeof *s->records_dev);
    if (VMMIPC__INJECT("sync_tables")) { /* tests: no host memory for the records table */
      free(s->records);
      s->records = NULL;
    }
    if (!s->chunk || !s->records || !s->records_dev)
      local = vmmipc__error(VMMIPC_ERR_NO_MEMORY, "%s: host-sync tables", op);
    if (!local) local = make_alarm(cu, p, s, op);
  }
  /* Every node rank takes part, whatever failed here. */
  void *all = NULL;
  vmmipc_result_t g = c->node_size > 1 ? vmmipc__sync_allgather(c, &mine, sizeof mine, &all, "host-sync path records", op)
                                       : VMMIPC_SUCCESS;
  if (!local) local = g;
  const struct path_info *rec = c->node_size > 1 ? all : &mine;
  if (!local) local = decide(c, rec, raw, s, op);
  /* The trial, from the records alone (a rank that failed here still
   * takes part, to say so): auto everywhere, both paths usable everywhere. */
  *trial = !g;
  for (int q = 0; *trial && q < c->node_size; q++)
    *trial = rec[q].mode == VMMIPC__MODE_AUTO && rec[q].kernels && rec[q].memops;
  free(all);
  return local;
}

vmmipc_result_t vmmipc__sync_win_ready(struct vmmipc_comm *c, int slice, const char *op) {
  struct vmmipc__sync *s = c->pool ? c->pool->sync : NULL;
  if (!s || slice < 0) return VMMIPC_SUCCESS;
  const vmmipc__cu_t *cu = NULL;
  vmmipc_result_t r = vmmipc__cu_load(&cu);
  if (r) return r;
  if (s->path == VMMIPC__PATH_KERNELS || s->barrier_path == VMMIPC__PATH_KERNELS) {
    vmmipc__kernels_t k;
    (void)vmmipc__kernels_load(cu, op, &k); /* a context without them: its calls say why */
  }
  int k = slice / VMMIPC__ARENA_SLICES;
  if (s->chunk[k]) return VMMIPC_SUCCESS;
  void *hp = NULL;
  CUdeviceptr mem = 0;
  size_t bytes = (size_t)VMMIPC__ARENA_SLICES * s->words * 8;
  const char *what = "cuMemAlloc";
  CUresult rc = cu->cuMemAlloc(&mem, bytes);
  if (!rc) {
    what = "cuMemHostAlloc";
    rc = cu->cuMemHostAlloc(&hp, VMMIPC__ARENA_SLICES * sizeof(vmmipc_dev_record_t),
                            CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE);
  }
  CUdeviceptr dev = 0;
  if (!rc) {
    what = "cuMemHostGetDevicePointer";
    rc = cu->cuMemHostGetDevicePointer(&dev, hp, 0);
  }
  if (rc) {
    if (hp) cu->cuMemFreeHost(hp);
    if (mem) cu->cuMemFree(mem);
    return vmmipc__cu_error(rc, NULL, "%s: device arrays for %d windows (%zu bytes): %s", op, VMMIPC__ARENA_SLICES,
                            bytes, what);
  }
  s->chunk[k] = mem;
  s->records[k] = hp;
  s->records_dev[k] = dev;
  return VMMIPC_SUCCESS;
}

void vmmipc__sync_free(struct vmmipc__pool *p) {
  struct vmmipc__sync *s = p->sync;
  if (!s) return;
  vmmipc__sync_keeper_stop(s);
  const vmmipc__cu_t *cu = NULL;
  if (vmmipc__cu_load(&cu) == VMMIPC_SUCCESS) {
    for (int k = 0; s->chunk && k < s->nchunks; k++) {
      if (s->chunk[k]) cu->cuMemFree(s->chunk[k]);
      if (s->records && s->records[k]) cu->cuMemFreeHost(s->records[k]); /* NULL: its calloc failed */
    }
    if (s->alarm_claim) cu->cuMemFree(s->alarm_claim);
    if (s->alarm) cu->cuMemFreeHost((void *)s->alarm);
  }
  pthread_mutex_destroy(&s->mu);
  pthread_cond_destroy(&s->cv);
  free(s->chunk);
  free(s->records);
  free(s->records_dev);
  free(s);
  p->sync = NULL;
}
