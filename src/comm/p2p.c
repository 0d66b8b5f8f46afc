/* vmmipc_send / vmmipc_recv: one descriptor between two ranks of a node, in
 * the point-to-point context (never matched with a collective's traffic). */
#include <stdlib.h>

#include "comm/comm.h"
#include "desc/desc.h"

/* A peer that aborted the comm, or a connection now closed (the partner's,
 * or that of the node peer whose END frame ended the call: it broke the
 * comm there), fails the comm (its stream waits are released); a slow peer
 * (a timeout, or its ABORT of one message) does not. A node peer's abort
 * read here is told to the ranks of other nodes, as an agreement's wait
 * would tell it: this rank's next collective is refused at entry. */
static void fail_if_gone(vmmipc_comm_t c, int peer, const vmmipc__tp_xchg_t *x, vmmipc_result_t r) {
  vmmipc__conn_t *conn = vmmipc__tp_conn(c->tp);
  int ended = x->aborted_by >= 0 && conn->fd[VMMIPC__CTX_COLL - 1][x->aborted_by] < 0;
  if (r == VMMIPC_ERR_ABORTED || conn->fd[VMMIPC__CTX_P2P - 1][peer] < 0 || ended) vmmipc__break_code(c, r);
  int aborter = x->aborted_by >= 0 ? x->aborted_by : peer;
  if (r == VMMIPC_ERR_ABORTED && !__atomic_load_n(&c->aborted, __ATOMIC_ACQUIRE))
    vmmipc__agree_tell_peer_aborted(c, c->rank_of[aborter]);
}

vmmipc_result_t vmmipc_send(vmmipc_comm_t c, vmmipc_desc_t d, int dest) {
  const char *op = "vmmipc_send";
  if (!c || !d) return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "%s: comm or desc is NULL", op);
  vmmipc_result_t r = vmmipc__enter(c, op, 0);
  if (r) return r;
  int peer;
  if ((r = vmmipc__peer_node_rank(c, dest, op, &peer))) goto out;
  size_t nb = vmmipc__desc_wire_bytes(d);
  unsigned char *bytes = malloc(nb);
  if (!bytes) {
    r = vmmipc__error(VMMIPC_ERR_NO_MEMORY, "%s: %zu bytes", op, nb);
    goto out;
  }
  vmmipc__desc_encode(d, bytes);
  vmmipc__tp_send_t s = {peer, bytes, nb, d->fds, d->num_chunks};
  vmmipc__tp_xchg_t x = {VMMIPC__CTX_P2P, 0, &s, 1, NULL, 0, NULL, NULL, VMMIPC_SUCCESS, -1, 0};
  r = vmmipc__tp_exchange(c->tp, &x);
  free(bytes);
  if (r) vmmipc__error_prefix("%s to rank %d: ", op, dest);
  if (r) fail_if_gone(c, peer, &x, r);
out:
  vmmipc__leave(c);
  return r;
}

vmmipc_result_t vmmipc_recv(vmmipc_comm_t c, int source, vmmipc_desc_t *out) {
  const char *op = "vmmipc_recv";
  if (!c || !out) return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "%s: comm or out is NULL", op);
  *out = NULL;
  vmmipc_result_t r = vmmipc__enter(c, op, 0);
  if (r) return r;
  int peer;
  if ((r = vmmipc__peer_node_rank(c, source, op, &peer))) goto out;
  vmmipc__tp_recv_t m = {peer, NULL, 0, NULL, 0, 0};
  vmmipc__tp_xchg_t x = {VMMIPC__CTX_P2P, 0, NULL, 0, &m, 1, NULL, NULL, VMMIPC_SUCCESS, -1, 0};
  r = vmmipc__tp_exchange(c->tp, &x);
  if (!r) {
    r = vmmipc__desc_adopt(m.bytes, m.num_bytes, m.fds, m.num_fds, out);
    if (r == VMMIPC_ERR_INVALID_DESC) vmmipc__error_rank(source); /* the sender's fault, as in the collectives */
  }
  if (r) vmmipc__error_prefix("%s from rank %d: ", op, source);
  if (r) fail_if_gone(c, peer, &x, r);
  free(m.bytes);
  free(m.fds);
out:
  vmmipc__leave(c);
  return r;
}
