/* Growth steps: every rank backs the same range of every segment. This
 * rank creates one allocation for the step, maps it into its own segment,
 * exports it once and sends the fd to each node peer, which imports it
 * once and maps it into this rank's segment there, with one set-access
 * call over the whole step. Then one agreement: a step exists on every
 * rank or on none. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/host.h"
#include "common/le.h"
#include "common/testhooks.h"
#include "heap/heap.h"

#define STEP_MSG 16 /* offset, size */

typedef struct {
  struct vmmipc_heap *h;
  struct vmmipc__heap_step *s;
  const vmmipc__cu_t *cu;
  const char *op;
  unsigned char *mapped; /* [node_size]: whose allocation is mapped here */
} grow_ctx_t;

/* Maps node rank q's allocation of the step into q's segment here. */
static vmmipc_result_t map_step(grow_ctx_t *g, int q, const CUmemAccessDesc *a, int na) {
  struct vmmipc_heap *h = g->h;
  CUdeviceptr at = vmmipc__heap_seg(h, q) + g->s->off;
  double t0 = vmmipc__now();
  CUresult rc = VMMIPC__INJECT("map") ? CUDA_ERROR_INVALID_VALUE : g->cu->cuMemMap(at, g->s->size, 0, g->s->handle[q], 0);
  if (rc) return vmmipc__cu_error(rc, NULL, "%s: cuMemMap of a growth step (offset %zu, size %zu)", g->op, g->s->off, g->s->size);
  g->mapped[q] = 1;
  double t1 = vmmipc__now();
  vmmipc_result_t r = vmmipc__set_access(g->cu, at, g->s->size, a, na, g->op);
  h->c->timing.map_s += t1 - t0;
  h->c->timing.access_s += vmmipc__now() - t1;
  return r;
}

static vmmipc_result_t import_step(void *arg, vmmipc__tp_recv_t *m) {
  grow_ctx_t *g = arg;
  struct vmmipc_heap *h = g->h;
  int q = m->peer, from = h->c->rank_of[q];
  vmmipc_result_t r = VMMIPC_SUCCESS;
  if (m->num_bytes != STEP_MSG || m->num_fds != 1 || vmmipc__get64(m->bytes) != g->s->off ||
      vmmipc__get64(m->bytes + 8) != g->s->size) {
    r = vmmipc__error(VMMIPC_ERR_INVALID_DESC,
                      "%s: rank %d sent a growth step that is not this one (%zu bytes, %d fds; expected offset %zu, "
                      "size %zu): the ranks' heaps differ",
                      g->op, from, m->num_bytes, m->num_fds, g->s->off, g->s->size);
  } else {
    double t0 = vmmipc__now();
    CUresult rc = VMMIPC__INJECT("import") ? CUDA_ERROR_INVALID_VALUE
                                           : g->cu->cuMemImportFromShareableHandle(
                                                 &g->s->handle[q], (void *)(uintptr_t)m->fds[0],
                                                 CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    h->c->timing.import_s += vmmipc__now() - t0;
    if (rc) {
      g->s->handle[q] = 0;
      long lim = 0;
      if (vmmipc__fd_limit_reached(&lim))
        r = vmmipc__error(VMMIPC_ERR_RESOURCE,
                          "%s: importing rank %d's growth step: the process is at its file descriptor limit "
                          "(RLIMIT_NOFILE %ld); hint: raise the limit (ulimit -n)%s",
                          g->op, from, lim, vmmipc__fd_limit_note());
      else
        r = vmmipc__cu_error(rc, NULL, "%s: cuMemImportFromShareableHandle of rank %d's growth step", g->op, from);
    }
    if (!r) r = map_step(g, q, h->peer_access, h->num_peer_access);
    if (r) vmmipc__error_prefix("segment of rank %d: ", from);
  }
  if (m->fds) vmmipc__close_fds(m->fds, m->num_fds);
  free(m->fds);
  free(m->bytes);
  m->fds = NULL;
  m->bytes = NULL;
  m->num_fds = 0;
  return r;
}

/* Creates, maps and exports this rank's allocation of the step. */
static vmmipc_result_t own_step(grow_ctx_t *g, int *fd) {
  struct vmmipc_heap *h = g->h;
  int me = h->c->node_rank;
  vmmipc_result_t r;
  double t0 = vmmipc__now();
  if (VMMIPC__INJECT("heap_oom")) /* tests: the device is out of memory */
    r = vmmipc__cu_error(CUDA_ERROR_OUT_OF_MEMORY, "free device memory, or give the heap a smaller grow step",
                         "%s: cuMemCreate(size %zu) for a growth step (injected)", g->op, g->s->size);
  else
    r = vmmipc__chunk_create(g->cu, h->device, g->s->size, 0, g->op, &g->s->handle[me]);
  h->c->timing.export_s += vmmipc__now() - t0;
  if (r) return r;
  if ((r = map_step(g, me, h->own_access, 1))) return r;
  if (h->c->node_size == 1) return VMMIPC_SUCCESS;
  t0 = vmmipc__now();
  long lim = 0;
  if (VMMIPC__INJECT("heap_fds")) { /* tests: the process is at its fd limit */
    r = vmmipc__error(VMMIPC_ERR_RESOURCE,
                      "%s: exporting a growth step of %zu bytes: the process is at its file descriptor limit "
                      "(injected); hint: raise the limit (ulimit -n)",
                      g->op, g->s->size);
  } else {
    CUresult rc = g->cu->cuMemExportToShareableHandle(fd, g->s->handle[me], CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    if (rc && vmmipc__fd_limit_reached(&lim))
      r = vmmipc__error(VMMIPC_ERR_RESOURCE,
                        "%s: exporting a growth step of %zu bytes: the process is at its file descriptor limit "
                        "(RLIMIT_NOFILE %ld); hint: raise the limit (ulimit -n)%s",
                        g->op, g->s->size, lim, vmmipc__fd_limit_note());
    else if (rc)
      r = vmmipc__cu_error(rc, NULL, "%s: cuMemExportToShareableHandle of a growth step (size %zu)", g->op,
                           g->s->size);
  }
  h->c->timing.export_s += vmmipc__now() - t0;
  return r;
}

/* Undoes what `mapped` and the handles say, keeping the current message. */
static vmmipc_result_t undo_step(struct vmmipc_heap *h, struct vmmipc__heap_step *s, const unsigned char *mapped,
                                 const char *op) {
  const vmmipc__cu_t *cu = NULL;
  vmmipc_result_t first = vmmipc__cu_load(&cu);
  if (first) return first;
  for (int q = 0; q < h->c->node_size; q++) {
    if (!s->handle[q]) continue;
    if (!mapped || mapped[q]) {
      CUresult rc = cu->cuMemUnmap(vmmipc__heap_seg(h, q) + s->off, s->size);
      if (rc && !first) first = vmmipc__cu_error(rc, NULL, "%s: cuMemUnmap of a growth step (offset %zu)", op, s->off);
    }
    CUresult rc = cu->cuMemRelease(s->handle[q]);
    if (rc && !first) first = vmmipc__cu_error(rc, NULL, "%s: cuMemRelease of a growth step (offset %zu)", op, s->off);
    s->handle[q] = 0;
  }
  return first;
}

vmmipc_result_t vmmipc__heap_step_release(struct vmmipc_heap *h, struct vmmipc__heap_step *s, const char *op) {
  vmmipc_result_t r = undo_step(h, s, s->mapped, op); /* a range a failed remap left unmapped is not unmapped again */
  free(s->handle);
  free(s->mapped);
  s->handle = NULL;
  s->mapped = NULL;
  return r;
}

/* Maps node rank q's allocation of the step into q's segment here again,
 * with the access the heap gives it. */
static vmmipc_result_t remap_one(const vmmipc__cu_t *cu, struct vmmipc_heap *h, struct vmmipc__heap_step *s, int q,
                                 const char *op) {
  CUdeviceptr at = vmmipc__heap_seg(h, q) + s->off;
  CUresult rc = VMMIPC__INJECT("map") ? CUDA_ERROR_INVALID_VALUE : cu->cuMemMap(at, s->size, 0, s->handle[q], 0);
  if (rc)
    return vmmipc__cu_error(rc, NULL, "%s: cuMemMap of a growth step again (offset %zu, segment of rank %d)", op,
                            s->off, h->c->rank_of[q]);
  s->mapped[q] = 1;
  int own = q == h->c->node_rank;
  return vmmipc__set_access(cu, at, s->size, own ? h->own_access : h->peer_access, own ? 1 : h->num_peer_access,
                            op);
}

/* Maps again the segments below `upto` (node ranks) that hold the step. */
static vmmipc_result_t remap_below(const vmmipc__cu_t *cu, struct vmmipc_heap *h, struct vmmipc__heap_step *s,
                                   int upto, const char *op) {
  vmmipc_result_t first = VMMIPC_SUCCESS;
  for (int q = 0; q < upto; q++) {
    if (!s->handle[q]) continue;
    vmmipc_result_t r = remap_one(cu, h, s, q, op);
    if (r && !first) first = r;
  }
  return first;
}

vmmipc_result_t vmmipc__heap_step_unmap(struct vmmipc_heap *h, struct vmmipc__heap_step *s, const char *op) {
  const vmmipc__cu_t *cu = NULL;
  vmmipc_result_t r = vmmipc__cu_load(&cu);
  if (r) return r;
  for (int q = 0; q < h->c->node_size; q++) {
    if (!s->handle[q]) continue;
    CUresult rc = VMMIPC__INJECT("trim_unmap") ? CUDA_ERROR_INVALID_VALUE
                                               : cu->cuMemUnmap(vmmipc__heap_seg(h, q) + s->off, s->size);
    if (!rc) {
      s->mapped[q] = 0;
      continue;
    }
    r = vmmipc__cu_error(rc, NULL, "%s: cuMemUnmap of a growth step (offset %zu, segment of rank %d)", op, s->off,
                         h->c->rank_of[q]);
    vmmipc__error_saved_t keep; /* the unmap's error, whole: a failed remap would replace it */
    vmmipc__error_save(&keep);
    if (remap_below(cu, h, s, q, op)) h->broken = 1; /* half mapped here: out of step */
    vmmipc__error_restore(&keep);
    return r;
  }
  return VMMIPC_SUCCESS;
}

vmmipc_result_t vmmipc__heap_step_remap(struct vmmipc_heap *h, struct vmmipc__heap_step *s, const char *op) {
  const vmmipc__cu_t *cu = NULL;
  vmmipc_result_t r = vmmipc__cu_load(&cu);
  if (!r) r = remap_below(cu, h, s, h->c->node_size, op);
  if (r) h->broken = 1;
  return r;
}

void vmmipc__heap_step_drop(struct vmmipc_heap *h, struct vmmipc__heap_step *s) {
  const vmmipc__cu_t *cu = NULL;
  if (vmmipc__cu_load(&cu) == VMMIPC_SUCCESS)
    for (int q = 0; q < h->c->node_size; q++)
      if (s->handle[q]) cu->cuMemRelease(s->handle[q]); /* unmapped: the memory goes back with the last handle */
  free(s->handle);
  free(s->mapped);
  s->handle = NULL;
  s->mapped = NULL;
}

vmmipc_result_t vmmipc__heap_grow(struct vmmipc_heap *h, size_t bytes, const char *op) {
  struct vmmipc_comm *c = h->c;
  int n = c->node_size, me = c->node_rank;
  double t0 = vmmipc__now();
  struct vmmipc__heap_step *s = &h->steps[h->num_steps]; /* room made by vmmipc__heap_room */
  s->off = h->mapped;
  s->size = bytes;
  s->handle = calloc((size_t)n, sizeof *s->handle);
  s->mapped = NULL; /* set once the step is whole */
  unsigned char *mapped = calloc((size_t)n, 1);
  vmmipc__tp_send_t *sends = h->step_sends; /* the heap's: the exchange below always takes place */
  vmmipc__tp_recv_t *recvs = h->step_recvs;
  memset(sends, 0, (size_t)n * sizeof *sends);
  memset(recvs, 0, (size_t)n * sizeof *recvs);
  if (VMMIPC__INJECT("heap_step_tables")) { /* tests: no host memory for the step's own tables */
    free(s->handle);
    s->handle = NULL;
    free(mapped);
    mapped = NULL;
  }
  grow_ctx_t g = {h, s, NULL, op, mapped};
  vmmipc_result_t local = VMMIPC_SUCCESS;
  if (!s->handle || !mapped)
    local = vmmipc__error(VMMIPC_ERR_NO_MEMORY, "%s: the tables of a growth step", op);
  if (!local) local = vmmipc__cu_load(&g.cu);
  int fd = -1;
  if (!local) local = own_step(&g, &fd);
  unsigned char msg[STEP_MSG];
  vmmipc__put64(msg, s->off);
  vmmipc__put64(msg + 8, s->size);
  int ns = 0;
  for (int q = 0; q < n; q++) {
    if (q == me) continue;
    sends[ns].peer = q;
    if (!local) {
      sends[ns].bytes = msg;
      sends[ns].num_bytes = STEP_MSG;
      sends[ns].fds = &fd;
      sends[ns].num_fds = 1;
    }
    recvs[ns++].peer = q;
  }
  int secondary = 0;
  /* A step of its own (every rank grows alike, from the same verdict): a
   * peer still in the call's agreement leaves these frames queued, as
   * frames of a later epoch, instead of dropping them as leftovers. */
  c->epoch++;
  if (n > 1) {
    /* Its bound is shared with its agreement (comm/deadline.c). */
    vmmipc__tp_xchg_t x = {VMMIPC__CTX_COLL, c->epoch, sends, ns, recvs, ns, import_step, &g, local, -1,
                           vmmipc__step_deadline(c)};
    double tx = vmmipc__now();
    vmmipc_result_t xr = vmmipc__tp_exchange(c->tp, &x);
    c->timing.transfer_s += vmmipc__now() - tx;
    if (!local) local = xr;
    secondary = x.aborted_by >= 0;
    for (int i = 0; i < ns; i++) { /* what the callback did not take */
      if (recvs[i].fds) vmmipc__close_fds(recvs[i].fds, recvs[i].num_fds);
      free(recvs[i].fds);
      free(recvs[i].bytes);
    }
  }
  if (fd >= 0) close(fd); /* the peers hold their own now: nothing stays open */
  vmmipc_result_t r = vmmipc__agree_key(c, local, secondary, op, 1, h->id);
  if (r) {
    vmmipc__error_saved_t keep; /* the verdict, whole: a failed undo would replace it */
    vmmipc__error_save(&keep);
    if (s->handle) undo_step(h, s, mapped, op); /* every rank undoes its part: no half-mapped step */
    vmmipc__error_restore(&keep);
    free(s->handle);
    s->handle = NULL;
    free(mapped);
    return r;
  }
  s->mapped = mapped; /* every segment's range: mapped (map_step, import_step) */
  h->num_steps++;
  vmmipc__heap_give(h, s->off, s->size);
  h->mapped += bytes;
  h->growth_steps += bytes / h->grow;
  vmmipc__heap_mix(h, 3, s->off, s->size);
  h->grow_s += vmmipc__now() - t0;
  return VMMIPC_SUCCESS;
}
