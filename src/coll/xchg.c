/* The descriptor exchange of one collective, and helpers every collective
 * uses (coll.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "coll/coll.h"
#include "common/testhooks.h"
#include "vmm/mapcache.h"
#include "vmm/vmm.h"

vmmipc_result_t vmmipc__desc_dup(vmmipc_desc_t d, vmmipc_desc_t *out) {
  *out = NULL;
  return d ? vmmipc__desc_copy(d, out) : VMMIPC_SUCCESS; /* identity included: the copy can hit a cache */
}

vmmipc_result_t vmmipc__check_rooted(struct vmmipc_comm *c, const void *out, int root, const char *op) {
  if (!out) return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "%s: out is NULL", op);
  if (root < 0 || root >= c->size)
    return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "%s: root %d is out of range 0..%d", op, root, c->size - 1);
  return VMMIPC_SUCCESS;
}

vmmipc_result_t vmmipc__check_access(const vmmipc_access_t *a, const char *op) {
  const vmmipc__cu_t *cu;
  vmmipc_result_t r = vmmipc__cu_load(&cu);
  if (r) return r;
  CUmemAccessDesc tmp[VMMIPC__MAX_ACCESS];
  int n;
  return vmmipc__access_resolve(cu, a, op, tmp, &n);
}

vmmipc_result_t vmmipc__export_opt(struct vmmipc_comm *c, vmmipc_buf_t b, vmmipc_desc_t *d) {
  *d = NULL;
  if (!b || b->size == 0) return VMMIPC_SUCCESS;
  double t0 = vmmipc__now();
  vmmipc_result_t r = vmmipc_export(b, d);
  c->timing.export_s += vmmipc__now() - t0;
  return r;
}

vmmipc_result_t vmmipc__coll_import(struct vmmipc_comm *c, vmmipc_desc_t d, const vmmipc_access_t *a,
                                    vmmipc_buf_t *out, int from_rank) {
  *out = NULL;
  if (!d) return VMMIPC_SUCCESS;
  /* The cache trusts a buffer identity only when the rank that sent it is
   * its owner (its pid checked by SO_PEERCRED): in a collective a rank shares
   * only its own buffers, and no rank can name another process's. */
  int from = c->node_of[from_rank];
  int owner = vmmipc__desc_has_identity(d) && (pid_t)d->pid == vmmipc__conn_pid(vmmipc__tp_conn(c->tp), from);
  vmmipc_result_t r = c->cache && owner ? vmmipc__mapcache_import(c->cache, d, a, &c->timing, out, NULL)
                                        : vmmipc__import_timed(d, a, out, &c->timing);
  if (r) vmmipc__error_prefix("buffer of rank %d: ", from_rank);
  if (r == VMMIPC_ERR_INVALID_DESC) vmmipc__error_rank(from_rank); /* it sent a bad one; else the failure is here */
  return r;
}

void vmmipc__free_descs(vmmipc_desc_t *d, int n) {
  for (int i = 0; d && i < n; i++) {
    vmmipc_desc_free(d[i]);
    d[i] = NULL;
  }
}

/* ---- the exchange ---------------------------------------------------------- */

typedef struct got_ctx {
  struct vmmipc_comm *c;
  vmmipc__coll_got_t got;
  void *arg;
  double in_got_s; /* time spent importing, kept out of transfer_s */
} got_ctx_t;

static vmmipc_result_t on_recv(void *arg, vmmipc__tp_recv_t *m) {
  got_ctx_t *g = arg;
  double t0 = vmmipc__now();
  vmmipc_desc_t d = NULL;
  vmmipc_result_t r = VMMIPC_SUCCESS;
  if (m->num_bytes > 0 || m->num_fds > 0) {
    r = vmmipc__desc_adopt(m->bytes, m->num_bytes, m->fds, m->num_fds, &d); /* takes the fds, closed on error */
    if (r) vmmipc__error_prefix("descriptor from rank %d: ", g->c->rank_of[m->peer]);
    if (r == VMMIPC_ERR_INVALID_DESC) vmmipc__error_rank(g->c->rank_of[m->peer]);
  }
  free(m->bytes);
  free(m->fds);
  m->bytes = NULL;
  m->fds = NULL;
  m->num_fds = 0;
  if (!r) r = g->got(g->arg, m->peer, d);
  g->in_got_s += vmmipc__now() - t0;
  return r;
}

vmmipc_result_t vmmipc__coll_exchange(struct vmmipc_comm *c, const vmmipc_desc_t *send_desc, const char *to,
                                      const char *from, vmmipc__coll_got_t got, void *arg, vmmipc_result_t local,
                                      int *secondary) {
  *secondary = 0;
  int n = c->node_size;
  if (n <= 1) return local;
  double t0 = vmmipc__now();
  vmmipc__tp_send_t *s = calloc((size_t)n, sizeof *s);
  vmmipc__tp_recv_t *m = calloc((size_t)n, sizeof *m);
  unsigned char **bytes = calloc((size_t)n, sizeof *bytes);
  vmmipc_result_t r = VMMIPC_SUCCESS;
  int ns = 0, nr = 0;
  if (!s || !m || !bytes) r = vmmipc__error(VMMIPC_ERR_NO_MEMORY, "a collective's message slots");
  for (int p = 0; !r && p < n; p++) {
    if (p == c->node_rank) continue;
    if (from && from[p]) m[nr++].peer = p;
    if (!to || !to[p]) continue;
    vmmipc_desc_t d = send_desc ? send_desc[p] : NULL;
    s[ns].peer = p;
    if (d && !local) {
      size_t nb = vmmipc__desc_wire_bytes(d);
      bytes[ns] = malloc(nb);
      if (!bytes[ns]) {
        r = vmmipc__error(VMMIPC_ERR_NO_MEMORY, "encoding a descriptor of %zu bytes", nb);
        break;
      }
      vmmipc__desc_encode(d, bytes[ns]);
      s[ns].bytes = bytes[ns];
      s[ns].num_bytes = nb;
      s[ns].fds = d->fds;
      s[ns].num_fds = d->num_chunks;
    }
    ns++;
  }
  if (!local) local = r;
  got_ctx_t g = {c, got, arg, 0};
  vmmipc__tp_xchg_t x = {VMMIPC__CTX_COLL, c->epoch, s, ns, m, nr, on_recv, &g, local, -1};
  /* Tests act here: one rank made late inside the exchange; another
   * thread tried on this comm while this call holds it. */
  if (!local && VMMIPC__INJECT("late")) VMMIPC__LATE(c->timeout_ms);
  VMMIPC__INSIDE();
  if (s && m) {
    r = vmmipc__tp_exchange(c->tp, &x);
  } else {
    r = local;
  }
  if (!local && !r && VMMIPC__INJECT("transfer")) r = vmmipc__error(VMMIPC_ERR_PEER, "injected failure at transfer");
  *secondary = x.aborted_by >= 0;
  for (int i = 0; m && i < nr; i++) { /* what the callback did not take */
    if (m[i].fds) vmmipc__close_fds(m[i].fds, m[i].num_fds);
    free(m[i].fds);
    free(m[i].bytes);
  }
  for (int i = 0; bytes && i < n; i++) free(bytes[i]);
  free(bytes);
  free(s);
  free(m);
  c->timing.transfer_s += vmmipc__now() - t0 - g.in_got_s;
  return r;
}
