/* Descriptor collectives: vmmipc_allgather_desc and vmmipc_scatter_desc. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>

#include "coll/coll.h"
#include "common/testhooks.h"

typedef struct {
  vmmipc_desc_t *slot; /* [node_size] */
} keep_t;

static vmmipc_result_t keep_desc(void *arg, int p, vmmipc_desc_t d) {
  ((keep_t *)arg)->slot[p] = d;
  return VMMIPC_SUCCESS;
}

vmmipc_result_t vmmipc_allgather_desc(vmmipc_comm_t c, vmmipc_desc_t desc, vmmipc_desc_t *descs_out) {
  const char *op = "vmmipc_allgather_desc";
  if (!c) return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "%s: comm is NULL", op);
  vmmipc_result_t r = vmmipc__enter(c, op, 1);
  if (r) return r;
  double t0 = vmmipc__now();
  int n = c->node_size;
  vmmipc_result_t local = VMMIPC_SUCCESS;
  if (!descs_out) local = vmmipc__error(VMMIPC_ERR_INVALID_ARG, "%s: descs_out is NULL", op);
  for (int i = 0; descs_out && i < c->size; i++) descs_out[i] = NULL;
  vmmipc_desc_t *got = calloc((size_t)n, sizeof *got), *send = calloc((size_t)n, sizeof *send);
  if (VMMIPC__INJECT("coll_tables")) { /* tests: no host memory for the call's own tables */
    free(got);
    free(send);
    got = send = NULL;
  }
  if (!local && (!got || !send)) local = vmmipc__error(VMMIPC_ERR_NO_MEMORY, "%s: %d slots", op, n);
  for (int p = 0; send && p < n; p++) send[p] = desc;
  vmmipc_desc_t own = NULL;
  if (!local) local = vmmipc__desc_dup(desc, &own);
  keep_t k = {got};
  int secondary = 0;
  vmmipc_result_t x = vmmipc__coll_exchange(c, send, c->coll_all, c->coll_all, keep_desc, &k, local, &secondary);
  if (!local) local = x;
  r = vmmipc__agree(c, local, secondary && x == local, op);
  vmmipc__coll_done(c, r);
  if (r) {
    vmmipc__free_descs(got, got ? n : 0);
    vmmipc_desc_free(own);
  } else {
    for (int p = 0; p < n; p++)
      if (p != c->node_rank) descs_out[c->rank_of[p]] = got[p];
    descs_out[c->rank] = own;
  }
  free(got);
  free(send);
  c->timing.total_s = vmmipc__now() - t0;
  vmmipc__leave(c);
  return r;
}

/* The root's entry for rank R, checked before anything is sent: the
 * transport refuses an fd that is not open without telling the peers,
 * which would wait for it until the timeout. */
static vmmipc_result_t entry_sendable(const struct vmmipc_desc *d, int R, const char *op) {
  for (int i = 0; d && i < d->num_chunks; i++)
    if (d->fds[i] < 0 || fcntl(d->fds[i], F_GETFD) < 0) {
      vmmipc__error(VMMIPC_ERR_INVALID_ARG,
                    "%s: the descriptor for rank %d: the fd of chunk %d of %d (%d) is not open; hint: a "
                    "descriptor's fds are its own until vmmipc_desc_free (do not close them)",
                    op, R, i + 1, d->num_chunks, d->fds[i]);
      vmmipc__error_os(EBADF);
      return VMMIPC_ERR_INVALID_ARG;
    }
  return VMMIPC_SUCCESS;
}

vmmipc_result_t vmmipc_scatter_desc(vmmipc_comm_t c, const vmmipc_desc_t *descs, int root, vmmipc_desc_t *out) {
  const char *op = "vmmipc_scatter_desc";
  if (!c) return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "%s: comm is NULL", op);
  vmmipc_result_t r = vmmipc__enter(c, op, 1);
  if (r) return r;
  double t0 = vmmipc__now();
  int n = c->node_size;
  vmmipc_result_t local = vmmipc__check_rooted(c, out, root, op);
  if (out) *out = NULL;
  if (!local && c->rank == root && !descs)
    local = vmmipc__error(VMMIPC_ERR_INVALID_ARG, "%s: descs is NULL at the root", op);
  /* Even after a local failure the peers are told (ABORT), so the roles
   * are set whenever the root is a rank. */
  int root_node = (root >= 0 && root < c->size) ? c->node_of[root] : -1;
  vmmipc_desc_t *send = calloc((size_t)n, sizeof *send), *got = calloc((size_t)n, sizeof *got);
  char *to = c->coll_to, *from = c->coll_from;
  memset(to, 0, (size_t)n);
  memset(from, 0, (size_t)n);
  if (VMMIPC__INJECT("coll_tables")) { /* tests: no host memory for the call's own tables */
    free(send);
    free(got);
    send = got = NULL;
  }
  if (!local && (!send || !got)) local = vmmipc__error(VMMIPC_ERR_NO_MEMORY, "%s: %d slots", op, n);
  vmmipc_desc_t own = NULL;
  if (root_node >= 0) {
    if (c->rank == root) {
      for (int p = 0; p < n; p++)
        if (p != c->node_rank) {
          to[p] = 1;
          if (send) send[p] = local ? NULL : descs[c->rank_of[p]];
          if (send && !local) local = entry_sendable(send[p], c->rank_of[p], op);
        }
      if (!local) local = vmmipc__desc_dup(descs[root], &own);
    } else {
      from[root_node] = 1;
    }
  } else if (root < 0 || root >= c->size) {
    /* No root here: whom this rank would hear from is unknown, so it tells
     * every node peer that it failed; a peer waiting on it as its root
     * then fails at once, not at the timeout. */
    for (int p = 0; p < n; p++) to[p] = p != c->node_rank;
  }
  keep_t k = {got};
  int secondary = 0;
  /* Ranks off the root's node exchange nothing but still agree. */
  vmmipc_result_t x = vmmipc__coll_exchange(c, send, to, from, keep_desc, &k, local, &secondary);
  if (!local) local = x;
  r = vmmipc__agree_key(c, local, secondary && x == local, op, root >= 0 && root < c->size, (uint64_t)(int64_t)root);
  vmmipc__coll_done(c, r);
  if (r) {
    vmmipc__free_descs(got, got ? n : 0);
    vmmipc_desc_free(own);
  } else if (c->rank == root) {
    *out = own;
  } else if (root_node >= 0) {
    *out = got[root_node];
  }
  free(send);
  free(got);
  c->timing.total_s = vmmipc__now() - t0;
  vmmipc__leave(c);
  return r;
}
