/* Descriptor collectives: allgather and scatter over the node's sockets,
 * with an MPI agreement so that they are all-or-nothing. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "coll/coll.h"
#include "common/error.h"
#include "common/testhooks.h"

vmmipc_result_t vmmipc__desc_dup(vmmipc_desc_t d, vmmipc_desc_t *out) {
  *out = NULL;
  if (!d) return VMMIPC_SUCCESS;
  vmmipc_desc_t n = NULL;
  vmmipc_result_t r = vmmipc__desc_new(d->num_chunks, &n);
  if (r) return r;
  n->handle_type = d->handle_type;
  n->flags = d->flags;
  n->owner = d->owner;
  memcpy(n->host, d->host, sizeof n->host);
  n->size = d->size;
  n->granularity = d->granularity;
  for (int i = 0; i < d->num_chunks; i++) {
    n->sizes[i] = d->sizes[i];
    n->fds[i] = fcntl(d->fds[i], F_DUPFD_CLOEXEC, 0);
    if (n->fds[i] < 0) {
      int e = errno;
      vmmipc_desc_free(n);
      return vmmipc__error_errno(VMMIPC_ERR_SYSTEM, e, "duplicating the fd of chunk %d of %d", i + 1,
                                 d->num_chunks);
    }
  }
  *out = n;
  return VMMIPC_SUCCESS;
}

double vmmipc__coll_begin(struct vmmipc_comm *c) {
  memset(&c->timing, 0, sizeof c->timing);
  return vmmipc__now();
}

vmmipc_result_t vmmipc__check_rooted(struct vmmipc_comm *c, const void *out, int root, const char *op) {
  if (!out) return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "%s: out is NULL", op);
  if (root < 0 || root >= c->size)
    return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "%s: root %d is out of range 0..%d", op, root, c->size - 1);
  return VMMIPC_SUCCESS;
}

/* Adopt every received message as a descriptor; on failure free them all. */
static vmmipc_result_t vmmipc__adopt_all(struct vmmipc_comm *c, vmmipc__tp_recv_t *m, int n, vmmipc_desc_t *got) {
  vmmipc_result_t r = VMMIPC_SUCCESS;
  for (int i = 0; i < n; i++) {
    vmmipc_desc_t d = NULL;
    vmmipc_result_t ri = VMMIPC_SUCCESS;
    if (m[i].num_bytes > 0 || m[i].num_fds > 0) {
      ri = vmmipc__desc_adopt(m[i].bytes, m[i].num_bytes, m[i].fds, m[i].num_fds, &d);
      if (ri) vmmipc__error_prefix("descriptor from rank %d: ", c->rank_of[m[i].peer]);
    }
    free(m[i].bytes);
    free(m[i].fds);
    if (ri && !r) r = ri;
    got[m[i].peer] = d;
  }
  if (r)
    for (int i = 0; i < c->node_size; i++)
      if (got[i]) {
        vmmipc_desc_free(got[i]);
        got[i] = NULL;
      }
  return r;
}

/* Encode `d` (NULL: an empty message). */
static vmmipc_result_t vmmipc__encode(vmmipc_desc_t d, unsigned char **bytes, size_t *n) {
  *bytes = NULL;
  *n = 0;
  if (!d) return VMMIPC_SUCCESS;
  *n = vmmipc__desc_wire_bytes(d);
  *bytes = malloc(*n);
  if (!*bytes) return vmmipc__error(VMMIPC_ERR_NO_MEMORY, "encoding a descriptor of %zu bytes", *n);
  vmmipc__desc_encode(d, *bytes);
  return VMMIPC_SUCCESS;
}

vmmipc_result_t vmmipc__coll_allgather(struct vmmipc_comm *c, vmmipc_desc_t mine, vmmipc_desc_t *got) {
  int n = c->node_size - 1;
  for (int i = 0; i < c->node_size; i++) got[i] = NULL;
  if (n == 0) return VMMIPC_SUCCESS;
  unsigned char *bytes;
  size_t nb;
  vmmipc_result_t r = vmmipc__encode(mine, &bytes, &nb);
  if (r) return r;
  vmmipc__tp_send_t *s = calloc((size_t)n, sizeof *s);
  vmmipc__tp_recv_t *m = calloc((size_t)n, sizeof *m);
  if (!s || !m) {
    r = vmmipc__error(VMMIPC_ERR_NO_MEMORY, "allgather: %d message slots", n);
    goto out;
  }
  for (int k = 0, p = 0; p < c->node_size; p++) {
    if (p == c->node_rank) continue;
    s[k].peer = m[k].peer = p;
    s[k].bytes = bytes;
    s[k].num_bytes = nb;
    s[k].fds = mine ? mine->fds : NULL;
    s[k].num_fds = mine ? mine->num_chunks : 0;
    k++;
  }
  if ((r = vmmipc__tp_exchange(c->tp, s, n, m, n))) goto out;
  r = vmmipc__adopt_all(c, m, n, got);
  /* Injected after the exchange so the connections stay usable. */
  if (!r && VMMIPC__INJECT("transfer")) {
    for (int i = 0; i < c->node_size; i++)
      if (got[i]) {
        vmmipc_desc_free(got[i]);
        got[i] = NULL;
      }
    r = vmmipc__error(VMMIPC_ERR_PEER, "injected failure at transfer");
  }
out:
  free(bytes);
  free(s);
  free(m);
  return r;
}

vmmipc_result_t vmmipc__coll_scatter(struct vmmipc_comm *c, const vmmipc_desc_t *descs, int root,
                                     vmmipc_desc_t *got) {
  *got = NULL;
  int root_node = c->node_of[root];
  if (root_node < 0) return VMMIPC_SUCCESS; /* the root is on another node */
  if (c->rank != root) {
    vmmipc__tp_recv_t m = {root_node, NULL, 0, NULL, 0};
    vmmipc_result_t r = vmmipc__tp_exchange(c->tp, NULL, 0, &m, 1);
    if (r) return r;
    if (m.num_bytes > 0 || m.num_fds > 0) {
      r = vmmipc__desc_adopt(m.bytes, m.num_bytes, m.fds, m.num_fds, got);
      if (r) vmmipc__error_prefix("descriptor from rank %d: ", root);
    }
    free(m.bytes);
    free(m.fds);
    if (!r && VMMIPC__INJECT("transfer")) { /* after the exchange, as above */
      if (*got) vmmipc_desc_free(*got);
      *got = NULL;
      r = vmmipc__error(VMMIPC_ERR_PEER, "injected failure at transfer");
    }
    return r;
  }
  int n = c->node_size - 1;
  if (n == 0) return VMMIPC_SUCCESS;
  vmmipc__tp_send_t *s = calloc((size_t)n, sizeof *s);
  unsigned char **bytes = calloc((size_t)n, sizeof *bytes);
  vmmipc_result_t r = VMMIPC_SUCCESS;
  if (!s || !bytes) r = vmmipc__error(VMMIPC_ERR_NO_MEMORY, "scatter: %d message slots", n);
  for (int k = 0, p = 0; !r && p < c->node_size; p++) {
    if (p == c->node_rank) continue;
    vmmipc_desc_t d = descs[c->rank_of[p]];
    s[k].peer = p;
    r = vmmipc__encode(d, &bytes[k], &s[k].num_bytes);
    s[k].bytes = bytes[k];
    s[k].fds = d ? d->fds : NULL;
    s[k].num_fds = d ? d->num_chunks : 0;
    k++;
  }
  if (!r) r = vmmipc__tp_exchange(c->tp, s, n, NULL, 0);
  if (!r && VMMIPC__INJECT("transfer")) r = vmmipc__error(VMMIPC_ERR_PEER, "injected failure at transfer");
  for (int k = 0; bytes && k < n; k++) free(bytes[k]);
  free(bytes);
  free(s);
  return r;
}

vmmipc_result_t vmmipc_allgather_desc(vmmipc_comm_t c, vmmipc_desc_t desc, vmmipc_desc_t *descs_out) {
  const char *op = "vmmipc_allgather_desc";
  if (!c) return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "%s: comm is NULL", op);
  double t0 = vmmipc__coll_begin(c);
  vmmipc_result_t local = descs_out ? VMMIPC_SUCCESS : vmmipc__error(VMMIPC_ERR_INVALID_ARG, "%s: descs_out is NULL", op);
  if (descs_out)
    for (int i = 0; i < c->size; i++) descs_out[i] = NULL;
  vmmipc_result_t r = vmmipc__agree(c, local, op);
  if (r) return r;
  vmmipc_desc_t *got = calloc((size_t)c->node_size, sizeof *got);
  if (!got) local = vmmipc__error(VMMIPC_ERR_NO_MEMORY, "%s: %d slots", op, c->node_size);
  double tt = vmmipc__now();
  if (!local) local = vmmipc__coll_allgather(c, desc, got);
  c->timing.transfer_s = vmmipc__now() - tt;
  if (!local) local = vmmipc__desc_dup(desc, &descs_out[c->rank]);
  r = vmmipc__agree(c, local, op);
  for (int i = 0; got && i < c->node_size; i++) {
    if (r) {
      if (got[i]) vmmipc_desc_free(got[i]);
    } else if (i != c->node_rank) {
      descs_out[c->rank_of[i]] = got[i];
    }
  }
  if (r && descs_out[c->rank]) {
    vmmipc_desc_free(descs_out[c->rank]);
    descs_out[c->rank] = NULL;
  }
  free(got);
  c->timing.total_s = vmmipc__now() - t0;
  return r;
}

vmmipc_result_t vmmipc_scatter_desc(vmmipc_comm_t c, const vmmipc_desc_t *descs, int root, vmmipc_desc_t *out) {
  const char *op = "vmmipc_scatter_desc";
  if (!c) return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "%s: comm is NULL", op);
  double t0 = vmmipc__coll_begin(c);
  vmmipc_result_t local = vmmipc__check_rooted(c, out, root, op);
  if (out) *out = NULL;
  if (!local && c->rank == root && !descs)
    local = vmmipc__error(VMMIPC_ERR_INVALID_ARG, "%s: descs is NULL at the root", op);
  vmmipc_result_t r = vmmipc__agree(c, local, op);
  if (r) return r;
  double tt = vmmipc__now();
  vmmipc_desc_t got = NULL;
  local = vmmipc__coll_scatter(c, descs, root, &got);
  if (!local && c->rank == root) local = vmmipc__desc_dup(descs[root], &got);
  c->timing.transfer_s = vmmipc__now() - tt;
  r = vmmipc__agree(c, local, op);
  if (r && got) vmmipc_desc_free(got);
  else *out = got;
  c->timing.total_s = vmmipc__now() - t0;
  return r;
}
