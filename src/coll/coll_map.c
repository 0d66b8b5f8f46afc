/* Mapping collectives: allgather_map (the GPU counterpart of
 * MPI_Win_allocate_shared + MPI_Win_shared_query), bcast_map, scatter_map.
 * Phases: check and export, agree, move descriptors, import and map, agree. */
#include <stdlib.h>
#include <string.h>

#include "coll/coll.h"
#include "common/error.h"
#include "vmm/vmm.h"

struct vmmipc_win {
  vmmipc_comm_t comm;
  vmmipc_buf_t own;    /* the caller's buffer (not owned) */
  vmmipc_buf_t *peers; /* [node_size]: imported mappings, NULL for self or none */
};

/* Resolve the access early so that an invisible UUID fails before export. */
static vmmipc_result_t vmmipc__check_access(const vmmipc_access_t *a, const char *op) {
  const vmmipc__cu_t *cu;
  vmmipc_result_t r = vmmipc__cu_load(&cu);
  if (r) return r;
  CUmemAccessDesc tmp[VMMIPC__MAX_ACCESS];
  int n;
  return vmmipc__access_resolve(cu, a, op, tmp, &n);
}

/* Export `b` unless it is NULL or empty (then *d stays NULL). */
static vmmipc_result_t vmmipc__export_opt(vmmipc_comm_t c, vmmipc_buf_t b, vmmipc_desc_t *d) {
  *d = NULL;
  if (!b || b->size == 0) return VMMIPC_SUCCESS;
  double t0 = vmmipc__now();
  vmmipc_result_t r = vmmipc_export(b, d);
  c->timing.export_s += vmmipc__now() - t0;
  return r;
}

static vmmipc_result_t vmmipc__import_opt(vmmipc_comm_t c, vmmipc_desc_t d, const vmmipc_access_t *a,
                                          vmmipc_buf_t *out, int from) {
  *out = NULL;
  if (!d) return VMMIPC_SUCCESS;
  vmmipc_result_t r = vmmipc__import_timed(d, a, out, &c->timing);
  if (r) vmmipc__error_prefix("buffer of rank %d: ", from);
  return r;
}

static void vmmipc__free_descs(vmmipc_desc_t *d, int n) {
  for (int i = 0; d && i < n; i++)
    if (d[i]) {
      vmmipc_desc_free(d[i]);
      d[i] = NULL;
    }
}

vmmipc_result_t vmmipc_allgather_map(vmmipc_comm_t c, vmmipc_buf_t buf, const vmmipc_access_t *access,
                                     vmmipc_win_t *out) {
  const char *op = "vmmipc_allgather_map";
  if (!c) return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "%s: comm is NULL", op);
  double t0 = vmmipc__coll_begin(c);
  vmmipc_result_t local = VMMIPC_SUCCESS;
  vmmipc_desc_t mine = NULL;
  struct vmmipc_win *w = calloc(1, sizeof *w);
  vmmipc_desc_t *got = calloc((size_t)c->node_size, sizeof *got);
  if (w) w->peers = calloc((size_t)c->node_size, sizeof *w->peers);
  if (!out) local = vmmipc__error(VMMIPC_ERR_INVALID_ARG, "%s: out is NULL", op);
  else *out = NULL;
  if (!local && (!w || !w->peers || !got)) local = vmmipc__error(VMMIPC_ERR_NO_MEMORY, "%s: window tables", op);
  if (!local && c->node_size > 1) local = vmmipc__check_access(access, op);
  if (!local && c->node_size > 1) local = vmmipc__export_opt(c, buf, &mine);
  vmmipc_result_t r = vmmipc__agree(c, local, op);
  if (!r) {
    double tt = vmmipc__now();
    local = vmmipc__coll_allgather(c, mine, got);
    c->timing.transfer_s = vmmipc__now() - tt;
    for (int i = 0; !local && i < c->node_size; i++)
      local = vmmipc__import_opt(c, got[i], access, &w->peers[i], c->rank_of[i]);
    vmmipc__free_descs(got, c->node_size);
    r = vmmipc__agree(c, local, op);
  }
  if (mine) vmmipc_desc_free(mine);
  vmmipc__free_descs(got, c->node_size);
  free(got);
  if (r) {
    for (int i = 0; w && w->peers && i < c->node_size; i++)
      if (w->peers[i]) vmmipc_buf_free(w->peers[i]);
    if (w) free(w->peers);
    free(w);
  } else {
    w->comm = c;
    w->own = buf;
    *out = w;
  }
  c->timing.total_s = vmmipc__now() - t0;
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
  vmmipc_comm_t c = w->comm;
  for (int i = 0; i < c->node_size; i++)
    if (w->peers[i]) vmmipc_buf_free(w->peers[i]);
  free(w->peers);
  free(w);
  return vmmipc__agree(c, VMMIPC_SUCCESS, "vmmipc_win_free");
}

/* Shared by bcast_map and scatter_map: the root exports `bufs[r]` for each
 * rank r of its node and every other rank imports its own. */
static vmmipc_result_t vmmipc__map_from_root(vmmipc_comm_t c, int scatter, const vmmipc_buf_t *bufs,
                                             vmmipc_buf_t single, int root, const vmmipc_access_t *access,
                                             vmmipc_buf_t *out, const char *op) {
  if (!c) return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "%s: comm is NULL", op);
  double t0 = vmmipc__coll_begin(c);
  vmmipc_result_t local = vmmipc__check_rooted(c, out, root, op);
  if (out) *out = NULL;
  int on_root_node = !local && c->node_of[root] >= 0;
  vmmipc_desc_t *descs = NULL;
  if (!local && c->rank == root && scatter && !bufs)
    local = vmmipc__error(VMMIPC_ERR_INVALID_ARG, "%s: bufs is NULL at the root", op);
  if (!local && on_root_node && c->rank != root) local = vmmipc__check_access(access, op);
  if (!local && c->rank == root && c->node_size > 1) {
    descs = calloc((size_t)c->size, sizeof *descs);
    if (!descs) local = vmmipc__error(VMMIPC_ERR_NO_MEMORY, "%s: %d descriptors", op, c->size);
    vmmipc_desc_t shared = NULL;
    if (!local && !scatter) local = vmmipc__export_opt(c, single, &shared);
    for (int p = 0; !local && p < c->node_size; p++) {
      int r = c->rank_of[p];
      if (r == root) continue;
      if (!scatter) local = vmmipc__desc_dup(shared, &descs[r]); /* bcast: one export, fds duplicated */
      else local = vmmipc__export_opt(c, bufs[r], &descs[r]);
      if (local) vmmipc__error_prefix("buffer for rank %d: ", r);
    }
    if (shared) vmmipc_desc_free(shared);
  }
  vmmipc_result_t r = vmmipc__agree(c, local, op);
  if (!r) {
    vmmipc_desc_t got = NULL;
    double tt = vmmipc__now();
    local = vmmipc__coll_scatter(c, descs, root, &got);
    c->timing.transfer_s = vmmipc__now() - tt;
    if (!local) local = vmmipc__import_opt(c, got, access, out, root);
    if (got) vmmipc_desc_free(got);
    r = vmmipc__agree(c, local, op);
    if (r && *out) {
      vmmipc_buf_free(*out);
      *out = NULL;
    }
  }
  vmmipc__free_descs(descs, descs ? c->size : 0);
  free(descs);
  c->timing.total_s = vmmipc__now() - t0;
  return r;
}

vmmipc_result_t vmmipc_bcast_map(vmmipc_comm_t c, vmmipc_buf_t buf, int root, const vmmipc_access_t *access,
                                 vmmipc_buf_t *out) {
  return vmmipc__map_from_root(c, 0, NULL, buf, root, access, out, "vmmipc_bcast_map");
}

vmmipc_result_t vmmipc_scatter_map(vmmipc_comm_t c, const vmmipc_buf_t *bufs, int root,
                                   const vmmipc_access_t *access, vmmipc_buf_t *out) {
  return vmmipc__map_from_root(c, 1, bufs, NULL, root, access, out, "vmmipc_scatter_map");
}
