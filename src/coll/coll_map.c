/* vmmipc_allgather_map: the GPU counterpart of MPI_Win_allocate_shared +
 * MPI_Win_shared_query. One exchange (each peer's chunks imported as soon
 * as its descriptor arrives) and one agreement. */
#include <stdlib.h>

#include "coll/coll.h"
#include "common/testhooks.h"
#include "sync/sync.h"
#include "vmm/vmm.h"

typedef struct {
  struct vmmipc_comm *c;
  struct vmmipc_win *w;
  const vmmipc_access_t *access;
} map_ctx_t;

static vmmipc_result_t import_peer(void *arg, int p, vmmipc_desc_t d) {
  map_ctx_t *m = arg;
  vmmipc_result_t r = vmmipc__coll_import(m->c, d, m->access, &m->w->peers[p], m->c->rank_of[p]);
  vmmipc_desc_free(d);
  return r;
}

static void win_drop(struct vmmipc_win *w, int n) {
  if (!w) return;
  vmmipc__error_saved_t keep; /* a release that fails here is not the caller's error */
  vmmipc__error_save(&keep);
  vmmipc__windev_free(w);
  for (int i = 0; w->peers && i < n; i++) vmmipc_buf_free(w->peers[i]);
  free(w->peers);
  free(w);
  vmmipc__error_restore(&keep);
}

/* Unmaps the peers here (cached mappings may stay idle) and gives the
 * slice back: zeroed for reuse in step, dirty after a failure. */
static void plain_reap(struct vmmipc_win *w, int in_step) {
  struct vmmipc_comm *c = w->comm;
  if (w->own) __atomic_fetch_sub(&w->own->exposed, 1, __ATOMIC_ACQ_REL);
  c->open_windows--;
  int slice = w->slice;
  win_drop(w, c->node_size);
  if (in_step)
    vmmipc__pool_give_zeroed(c, slice);
  else
    vmmipc__pool_give(c, slice);
}

vmmipc_result_t vmmipc_allgather_map(vmmipc_comm_t c, vmmipc_buf_t buf, const vmmipc_access_t *access,
                                     vmmipc_win_t *out) {
  const char *op = "vmmipc_allgather_map";
  if (!c) return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "%s: comm is NULL", op);
  vmmipc_result_t r = vmmipc__enter(c, op, 1);
  if (r) return r;
  double t0 = vmmipc__now();
  if (out) *out = NULL;
  if ((r = vmmipc__pool_ensure(c, op))) {
    vmmipc__leave(c);
    return r;
  }
  int n = c->node_size;
  vmmipc_result_t local = VMMIPC_SUCCESS;
  if (!out) local = vmmipc__error(VMMIPC_ERR_INVALID_ARG, "%s: out is NULL", op);
  struct vmmipc_win *w = calloc(1, sizeof *w);
  if (w) w->slice = -1;
  if (w) w->peers = calloc((size_t)n, sizeof *w->peers);
  vmmipc_buf_t *send = calloc((size_t)n, sizeof *send);
  if (VMMIPC__INJECT("coll_tables")) { /* tests: no host memory for the call's own tables */
    free(send);
    send = NULL;
  }
  if (!local && (!w || !w->peers || !send))
    local = vmmipc__error(VMMIPC_ERR_NO_MEMORY, "%s: window tables", op);
  if (!local && n > 1) local = vmmipc__check_access(access, op);
  if (!local && w) local = vmmipc__pool_take(c, &w->slice, op);
  if (!local && w) local = vmmipc__sync_win_ready(c, w->slice, op); /* what host sync may not do later */
  for (int p = 0; send && p < n; p++) send[p] = buf;
  map_ctx_t m = {c, w, access};
  int secondary = 0;
  vmmipc_result_t x =
      vmmipc__coll_map_exchange(c, send, 0, c->coll_all, c->coll_all, access, import_peer, &m, local, &secondary);
  if (!local) local = x;
  free(send);
  r = vmmipc__agree(c, local, secondary, op);
  vmmipc__coll_done(c, r);
  if (r) {
    if (w) vmmipc__pool_undo(c, w->slice);
    win_drop(w, n);
  } else {
    w->comm = c;
    w->id = c->epoch;
    w->reap = plain_reap;
    w->own = buf;
    if (buf) __atomic_fetch_add(&buf->exposed, 1, __ATOMIC_ACQ_REL);
    c->open_windows++;
    *out = w;
  }
  c->timing.total_s = vmmipc__now() - t0;
  vmmipc__leave(c);
  return r;
}

vmmipc_result_t vmmipc_win_query(vmmipc_win_t w, int rank, void **ptr, size_t *size) {
  if (!w) return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "vmmipc_win_query: win is NULL");
  vmmipc_comm_t c = w->comm;
  if (rank < 0 || rank >= c->size)
    return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "vmmipc_win_query: rank %d is out of range 0..%d", rank, c->size - 1);
  vmmipc_buf_t b = NULL;
  if (rank == c->rank) b = w->own;
  else if (c->node_of[rank] >= 0) b = w->peers[c->node_of[rank]];
  if (ptr) *ptr = (b && b->size) ? (void *)(uintptr_t)b->base : NULL;
  if (size) *size = b ? b->size : 0;
  return VMMIPC_SUCCESS;
}

vmmipc_result_t vmmipc_win_free(vmmipc_win_t w) {
  if (!w) return VMMIPC_SUCCESS; /* like free(NULL) */
  return vmmipc__win_free(w, VMMIPC_SUCCESS);
}
