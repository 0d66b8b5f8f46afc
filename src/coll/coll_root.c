/* vmmipc_bcast_map and vmmipc_scatter_map: the root exports one buffer per
 * rank of its node (bcast: one export, fds duplicated), every other rank of
 * that node imports its own. One exchange, one agreement. */
#include <stdlib.h>
#include <string.h>

#include "coll/coll.h"
#include "common/testhooks.h"
#include "vmm/vmm.h"

typedef struct {
  struct vmmipc_comm *c;
  const vmmipc_access_t *access;
  vmmipc_buf_t *out;
  int root;
} root_ctx_t;

static vmmipc_result_t import_from_root(void *arg, int p, vmmipc_desc_t d) {
  (void)p;
  root_ctx_t *m = arg;
  vmmipc_result_t r = vmmipc__coll_import(m->c, d, m->access, m->out, m->root);
  vmmipc_desc_free(d);
  return r;
}

static vmmipc_result_t map_from_root(vmmipc_comm_t c, int scatter, const vmmipc_buf_t *bufs, vmmipc_buf_t single,
                                     int root, const vmmipc_access_t *access, vmmipc_buf_t *out, const char *op) {
  if (!c) return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "%s: comm is NULL", op);
  vmmipc_result_t r = vmmipc__enter(c, op, 1);
  if (r) return r;
  double t0 = vmmipc__now();
  int n = c->node_size;
  vmmipc_result_t local = vmmipc__check_rooted(c, out, root, op);
  if (out) *out = NULL;
  int root_node = (root >= 0 && root < c->size) ? c->node_of[root] : -1;
  int is_root = c->rank == root;
  if (!local && is_root && scatter && !bufs)
    local = vmmipc__error(VMMIPC_ERR_INVALID_ARG, "%s: bufs is NULL at the root", op);
  if (!local && root_node >= 0 && !is_root) local = vmmipc__check_access(access, op);
  vmmipc_buf_t *send = calloc((size_t)n, sizeof *send);
  char *to = c->coll_to, *from = c->coll_from;
  memset(to, 0, (size_t)n);
  memset(from, 0, (size_t)n);
  if (VMMIPC__INJECT("coll_tables")) { /* tests: no host memory for the call's own tables */
    free(send);
    send = NULL;
  }
  if (!local && !send) local = vmmipc__error(VMMIPC_ERR_NO_MEMORY, "%s: %d slots", op, n);
  if (root_node >= 0) {
    /* Roles are set even after a local failure: the peers must be told. */
    if (!is_root) from[root_node] = 1;
    for (int p = 0; is_root && p < n; p++) to[p] = p != c->node_rank;
  } else if (root < 0 || root >= c->size) {
    /* No root here: whom this rank would hear from is unknown, so it tells
     * every node peer that it failed; a peer waiting on it as its root
     * then fails at once, not at the timeout. */
    for (int p = 0; p < n; p++) to[p] = p != c->node_rank;
  }
  /* bcast: one buffer for all (exported once); scatter: one per rank. */
  for (int p = 0; !local && is_root && send && p < n; p++)
    if (c->rank_of[p] != root) send[p] = scatter ? bufs[c->rank_of[p]] : single;
  root_ctx_t m = {c, access, out, root};
  int secondary = 0;
  vmmipc_result_t x =
      vmmipc__coll_map_exchange(c, send, scatter, to, from, access, import_from_root, &m, local, &secondary);
  if (!local) local = x;
  free(send);
  /* Keyed by the root (a root that is no rank failed here, and brings none). */
  r = vmmipc__agree_key(c, local, secondary, op, root >= 0 && root < c->size, (uint64_t)(int64_t)root);
  vmmipc__coll_done(c, r);
  if (r && out && *out) {
    vmmipc__error_saved_t keep; /* the verdict stays the error: a failed release is not the caller's */
    vmmipc__error_save(&keep);
    vmmipc_buf_free(*out);
    vmmipc__error_restore(&keep);
    *out = NULL;
  }
  c->timing.total_s = vmmipc__now() - t0;
  vmmipc__leave(c);
  return r;
}

vmmipc_result_t vmmipc_bcast_map(vmmipc_comm_t c, vmmipc_buf_t buf, int root, const vmmipc_access_t *access,
                                 vmmipc_buf_t *out) {
  return map_from_root(c, 0, NULL, buf, root, access, out, "vmmipc_bcast_map");
}

vmmipc_result_t vmmipc_scatter_map(vmmipc_comm_t c, const vmmipc_buf_t *bufs, int root,
                                   const vmmipc_access_t *access, vmmipc_buf_t *out) {
  return map_from_root(c, 1, bufs, NULL, root, access, out, "vmmipc_scatter_map");
}
