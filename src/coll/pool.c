/* The signal pool of a comm (coll.h): made once, with the first window, so
 * that a window costs no extra export, import or mapping; each window takes
 * a slice.
 *
 * A taken slice reads zero on this rank, and no peer writes into a slice
 * after the agreement of its window's free (every stream operation on the
 * window is complete by then). So a freed slice is zeroed between that
 * agreement and its next take. A copy per free is a driver call of a few
 * microseconds on the free's path; instead frees only mark their slices
 * owed (state 3), and the zeroings owed are queued together, a copy per
 * contiguous run (next-fit takes slices in order, so frees come in runs),
 * once VMMIPC__POOL_ZERO_BATCH are owed or when a take reaches an owed
 * slice; a take waits for the private stream only if its slice's zeroing
 * may still be queued (next-fit takes a freed slice again last). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll/coll.h"
#include "common/testhooks.h"
#include "driver/device.h"
#include "sync/release.h"
#include "sync/sync.h"
#include "vmm/vmm.h"

typedef struct {
  struct vmmipc_comm *c;
  struct vmmipc__pool *p;
} pool_ctx_t;

static vmmipc_result_t pool_zero(struct vmmipc__pool *p, int me, int k, const char *op);
static CUresult queue_owed(const vmmipc__cu_t *cu, struct vmmipc__pool *p, int me);

/* The whole local pool, once, in one copy (a fresh allocation is not
 * promised to be zero). Synchronous: a pageable copy may return before the
 * data lands. */
static vmmipc_result_t zero_all(const vmmipc__cu_t *cu, struct vmmipc__pool *p, const char *op) {
  size_t bytes = (size_t)p->slices * (size_t)p->per_win * 8;
  void *zeros = calloc(1, bytes);
  if (!zeros) return vmmipc__error(VMMIPC_ERR_NO_MEMORY, "%s: zeroing the signal pool (%zu bytes)", op, bytes);
  CUresult rc = cu->cuMemcpyHtoDAsync(p->local->base, zeros, bytes, p->stream);
  if (!rc) rc = cu->cuStreamSynchronize(p->stream);
  free(zeros);
  if (rc) return vmmipc__cu_error(rc, NULL, "%s: zeroing the signal pool", op);
  memset(p->used, 2, (size_t)p->slices);
  p->owed_lo = p->slices;
  p->owed_hi = -1;
  return VMMIPC_SUCCESS;
}

static vmmipc_result_t import_pool(void *arg, int q, vmmipc_desc_t d) {
  pool_ctx_t *m = arg;
  vmmipc_result_t r = VMMIPC_SUCCESS;
  if (!d) {
    r = vmmipc__error(VMMIPC_ERR_INVALID_DESC, "rank %d sent no signal pool", m->c->rank_of[q]);
    vmmipc__error_rank(m->c->rank_of[q]);
  } else {
    r = vmmipc_import(d, NULL, &m->p->peer[q]);
    if (r) vmmipc__error_prefix("signal pool of rank %d: ", m->c->rank_of[q]);
    if (r == VMMIPC_ERR_INVALID_DESC) vmmipc__error_rank(m->c->rank_of[q]); /* it sent a bad one */
  }
  /* Every window's slots are addressed in a peer's pool as in this rank's
   * own: a smaller one (a descriptor of no chunks maps at address 0) would
   * take every later signal toward that rank out of bounds. */
  size_t need = (size_t)m->p->slices * (size_t)m->p->per_win * 8;
  if (!r && m->p->peer[q]->mapped < need) {
    r = vmmipc__error(VMMIPC_ERR_INVALID_DESC, "rank %d sent a signal pool of %zu bytes; its windows' slots need %zu",
                      m->c->rank_of[q], m->p->peer[q]->mapped, need);
    vmmipc__error_rank(m->c->rank_of[q]);
  }
  vmmipc_desc_free(d);
  return r;
}

void vmmipc__pool_destroy(struct vmmipc__pool *p, int node_size) {
  if (!p) return;
  vmmipc__error_saved_t keep; /* a release that fails here is not the caller's error */
  vmmipc__error_save(&keep);
  vmmipc__sync_free(p); /* its keeper first: it writes into the pool */
  for (int q = 0; p->peer && q < node_size; q++) vmmipc_buf_free(p->peer[q]);
  const vmmipc__cu_t *cu = NULL;
  if (p->stream && vmmipc__cu_load(&cu) == VMMIPC_SUCCESS) cu->cuStreamDestroy(p->stream);
  vmmipc_buf_free(p->local);
  pthread_mutex_destroy(&p->mu);
  free(p->peer);
  free(p->base);
  free(p->used);
  free(p->zgen);
  free(p);
  vmmipc__error_restore(&keep);
}

vmmipc_result_t vmmipc__pool_setup(struct vmmipc_comm *c, const char *op) {
  int n = c->node_size;
  struct vmmipc__pool *p = calloc(1, sizeof *p);
  vmmipc_result_t local = VMMIPC_SUCCESS;
  if (!p) local = vmmipc__error(VMMIPC_ERR_NO_MEMORY, "%s: signal pool", op);
  if (p) {
    pthread_mutex_init(&p->mu, NULL);
    p->peer = calloc((size_t)n, sizeof *p->peer);
    p->base = calloc((size_t)n, sizeof *p->base);
    if (!p->peer || !p->base) local = vmmipc__error(VMMIPC_ERR_NO_MEMORY, "%s: signal pool", op);
  }
  const vmmipc__cu_t *cu = NULL;
  if (!local) local = vmmipc__cu_load(&cu);
  if (!local) { /* a node of one has a pool too: signal and wait to itself */
    /* One granule; the stream is non-blocking so that host waits never
     * queue behind the user's work on the legacy stream. */
    vmmipc_alloc_props_t props = VMMIPC_ALLOC_PROPS_INIT;
    props.export_cache = 0; /* exported once: a cached fd would only sit open */
    local = vmmipc_alloc_ex(1, &props, &p->local);
    if (!local) {
      p->per_win = VMMIPC__POOL_SLOTS_PER_RANK * n;
      p->slices = (int)(p->local->mapped / 8 / (size_t)p->per_win);
      int cap = VMMIPC__POOL_CAP(); /* tests: a pool small enough to walk */
      if (cap > 0 && cap < p->slices) p->slices = cap;
      p->used = calloc((size_t)p->slices, 1);
      p->zgen = calloc((size_t)p->slices, sizeof *p->zgen);
      if (!p->used || !p->zgen) local = vmmipc__error(VMMIPC_ERR_NO_MEMORY, "%s: signal pool", op);
    }
    if (!local) {
      CUresult rc = cu->cuCtxGetCurrent(&p->ctx);
      if (!rc) rc = cu->cuStreamCreate(&p->stream, CU_STREAM_NON_BLOCKING);
      if (rc) local = vmmipc__cu_error(rc, NULL, "%s: cuStreamCreate for the signal pool", op);
    }
    if (!local) local = zero_all(cu, p, op); /* before any peer can write: no window takes a zeroing */
  }
  /* The host-sync path, the same on every node rank (every rank takes part). */
  int trial = 0;
  vmmipc_result_t t = vmmipc__sync_setup(c, p, local, &trial, op);
  if (!local) local = t;
  vmmipc_desc_t mine = NULL;
  if (!local && n > 1) local = vmmipc_export(p->local, &mine);
  vmmipc_desc_t *send = calloc((size_t)n, sizeof *send);
  if (VMMIPC__INJECT("coll_tables")) { /* tests: no host memory for the call's own tables */
    free(send);
    send = NULL;
  }
  if (!local && !send) local = vmmipc__error(VMMIPC_ERR_NO_MEMORY, "%s: signal pool", op);
  for (int q = 0; send && q < n; q++) send[q] = mine;
  pool_ctx_t m = {c, p};
  int secondary = 0;
  vmmipc_result_t x = vmmipc__coll_exchange(c, send, c->coll_all, c->coll_all, import_pool, &m, local, &secondary);
  if (!local) local = x;
  vmmipc_desc_free(mine);
  free(send);
  /* auto's measurement of the host-sync paths (sync/trial.c), on the
   * imported pool; its failure is this step's. */
  for (int q = 0; !local && q < n; q++) p->base[q] = q == c->node_rank ? p->local->base : p->peer[q]->base;
  if (trial) local = vmmipc__sync_trial(c, p, local, op);
  /* Its failures are the user's call's ("<op> failed on rank R ..."), with
   * no prefix of their own: the pool is an internal step of that call, and
   * a rank missing from it is missing from the call. Flagged (pool): a
   * rank in another call did not make its MPI step on the node. */
  vmmipc__agree_io_t io = {0, 0, NULL, 0, NULL, 1};
  vmmipc_result_t r = vmmipc__agree_io(c, local, secondary, op, &io);
  vmmipc__coll_done(c, r);
  if (r) {
    vmmipc__pool_destroy(p, n);
    return r;
  }
  c->pool = p;
  /* What the stats report of the paths, now that they hold. */
  c->sync_path = p->sync->path;
  c->sync_barrier_path = p->sync->barrier_path;
  c->sync_by = p->sync->by;
  memcpy(c->sync_trial_ns, p->sync->trial_ns, sizeof c->sync_trial_ns);
  c->pool_free = vmmipc__pool_destroy;
  c->release = vmmipc__sync_release;
  c->check = vmmipc__sync_check;
  return VMMIPC_SUCCESS;
}

vmmipc_result_t vmmipc__pool_ensure(struct vmmipc_comm *c, const char *op) {
  if (c->pool) return VMMIPC_SUCCESS;
  vmmipc_result_t r = vmmipc__pool_setup(c, op);
  if (!r) c->epoch++;
  return r;
}

vmmipc_result_t vmmipc__pool_take(struct vmmipc_comm *c, int *slice, const char *op) {
  struct vmmipc__pool *p = c->pool;
  *slice = -1;
  int k = -1;
  for (int i = 0; i < p->slices && k < 0; i++) {
    int j = (p->next + i) % p->slices;
    if (p->used[j] != 1) k = j;
  }
  if (k < 0) /* a limit reached (DESIGN.md section 7), as on every rank alike */
    return vmmipc__error(VMMIPC_ERR_RESOURCE,
                         "%s: %d windows are open on this comm, as many as its signal pool holds; hint: free windows "
                         "you no longer use",
                         op, p->slices);
  /* This rank's part is zero before the window exists anywhere: no peer
   * writes into it before the agreement. */
  vmmipc_result_t r = VMMIPC_SUCCESS;
  if (p->used[k] == 0) {
    r = pool_zero(p, c->node_rank, k, op);
  } else {
    const vmmipc__cu_t *cu;
    r = vmmipc__cu_load(&cu);
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&p->mu);
    if (!r && p->used[k] == 3) rc = queue_owed(cu, p, c->node_rank); /* its zeroing, and every other owed */
    if (!r && !rc && p->zgen[k] > p->synced) { /* its zeroing is still queued */
      uint64_t upto = p->gen;
      rc = cu->cuStreamSynchronize(p->stream);
      if (!rc) p->synced = upto;
    }
    pthread_mutex_unlock(&p->mu);
    if (rc) r = vmmipc__cu_error(rc, NULL, "%s: waiting for the zeroing of the window's signal slots", op);
  }
  if (r) return r;
  __atomic_store_n(&p->used[k], 1, __ATOMIC_RELAXED); /* the release reads it from any thread */
  p->next_before = p->next;
  p->next = (k + 1) % p->slices;
  *slice = k;
  return VMMIPC_SUCCESS;
}

/* Where zeroings copy from: never written, so a pageable copy that returns
 * before it lands is still right. */
static uint64_t zeros[8192];

/* Queues the zeroing of this rank's part of slices k .. k + count - 1 on
 * the private stream (p->mu held). */
static CUresult queue_zero(const vmmipc__cu_t *cu, struct vmmipc__pool *p, int me, int k, int count) {
  CUdeviceptr at = p->base[me] + (CUdeviceptr)k * (CUdeviceptr)p->per_win * 8;
  size_t left = (size_t)count * (size_t)p->per_win * 8;
  CUresult rc = CUDA_SUCCESS;
  for (size_t off = 0; !rc && off < left; off += sizeof zeros) {
    size_t len = left - off < sizeof zeros ? left - off : sizeof zeros;
    rc = cu->cuMemcpyHtoDAsync(at + off, zeros, len, p->stream);
  }
  return rc;
}

/* Queues the zeroings owed (p->mu held): one copy per run of free slices
 * that holds an owed one (free slices between owed ones are zeroed again,
 * which joins runs). Every slice of a queued run is zeroed (state 2) with
 * the run's generation. On a driver error the slices stay owed. */
static CUresult queue_owed(const vmmipc__cu_t *cu, struct vmmipc__pool *p, int me) {
  CUresult rc = CUDA_SUCCESS;
  for (int k = p->owed_lo; k <= p->owed_hi && !rc;) {
    if (__atomic_load_n(&p->used[k], __ATOMIC_RELAXED) != 3) {
      k++;
      continue;
    }
    int end = k + 1, last = k; /* the run [k, end), its last owed slice */
    while (end <= p->owed_hi && __atomic_load_n(&p->used[end], __ATOMIC_RELAXED) != 1) {
      if (__atomic_load_n(&p->used[end], __ATOMIC_RELAXED) == 3) last = end;
      end++;
    }
    end = last + 1;
    rc = queue_zero(cu, p, me, k, end - k);
    if (!rc) {
      uint64_t g = ++p->gen;
      for (int j = k; j < end; j++) {
        if (__atomic_load_n(&p->used[j], __ATOMIC_RELAXED) == 3) p->owed--;
        p->zgen[j] = g;
        __atomic_store_n(&p->used[j], 2, __ATOMIC_RELAXED);
      }
    }
    k = end;
  }
  if (!rc) {
    p->owed_lo = p->slices;
    p->owed_hi = -1;
  }
  return rc;
}

static vmmipc_result_t pool_zero(struct vmmipc__pool *p, int me, int k, const char *op) {
  const vmmipc__cu_t *cu;
  vmmipc_result_t r = vmmipc__cu_load(&cu);
  if (r) return r;
  pthread_mutex_lock(&p->mu);
  CUresult rc = queue_zero(cu, p, me, k, 1);
  uint64_t upto = p->gen;
  if (!rc) rc = cu->cuStreamSynchronize(p->stream);
  if (!rc) p->synced = upto;
  pthread_mutex_unlock(&p->mu);
  if (rc) return vmmipc__cu_error(rc, NULL, "%s: zeroing the window's signal slots", op);
  return VMMIPC_SUCCESS;
}

void vmmipc__pool_undo(struct vmmipc_comm *c, int slice) {
  struct vmmipc__pool *p = c->pool;
  if (!p || slice < 0 || slice >= p->slices) return;
  __atomic_store_n(&p->used[slice], 2, __ATOMIC_RELAXED); /* nobody wrote to it */
  p->next = p->next_before; /* as on the ranks that failed before taking */
}

void vmmipc__pool_give(struct vmmipc_comm *c, int slice) {
  if (c->pool && slice >= 0 && slice < c->pool->slices) __atomic_store_n(&c->pool->used[slice], 0, __ATOMIC_RELAXED);
}

/* Owed, not queued: a batch is, every VMMIPC__POOL_ZERO_BATCH frees (a
 * failed queueing leaves them owed, for the take to try again). */
void vmmipc__pool_give_zeroed(struct vmmipc_comm *c, int slice) {
  struct vmmipc__pool *p = c->pool;
  if (!p || slice < 0 || slice >= p->slices) return;
  pthread_mutex_lock(&p->mu);
  __atomic_store_n(&p->used[slice], 3, __ATOMIC_RELAXED);
  p->owed++;
  if (slice < p->owed_lo) p->owed_lo = slice;
  if (slice > p->owed_hi) p->owed_hi = slice;
  const vmmipc__cu_t *cu;
  if (p->owed >= VMMIPC__POOL_ZERO_BATCH && vmmipc__cu_load(&cu) == VMMIPC_SUCCESS) (void)queue_owed(cu, p, c->node_rank);
  pthread_mutex_unlock(&p->mu);
}
