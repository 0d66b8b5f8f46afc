/* The descriptor exchange of one collective, and helpers every collective
 * uses (coll.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "coll/coll.h"
#include "coll/msg.h"
#include "common/host.h"
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

/* Freed-identity notices: c->freed_told[p] is the cursor (vmm/freed.h) up
 * to which node rank p was told and the collective agreed, so p got it;
 * freed_told[n + p] the cursor sent in the current collective. */
static vmmipc_result_t freed_cursors(struct vmmipc_comm *c) {
  if (c->freed_told) return VMMIPC_SUCCESS;
  size_t n = (size_t)c->node_size;
  c->freed_told = malloc(2 * n * sizeof *c->freed_told);
  if (!c->freed_told) return vmmipc__error(VMMIPC_ERR_NO_MEMORY, "a collective's notice cursors");
  /* Nothing freed before this comm's first collective can be cached by its
   * peers: its mapping cache is filled only by its collectives. */
  uint64_t h = vmmipc__freed_head();
  for (size_t i = 0; i < 2 * n; i++) c->freed_told[i] = h;
  return VMMIPC_SUCCESS;
}

void vmmipc__coll_done(struct vmmipc_comm *c, vmmipc_result_t r) {
  int n = c->node_size;
  for (int p = 0; c->freed_told && p < n; p++) {
    if (r) c->freed_told[n + p] = c->freed_told[p];
    else c->freed_told[p] = c->freed_told[n + p];
  }
}

/* One round of a collective: to every p with to[p] a message (coll/msg.h)
 * with the freed notices p has not had, have[p] (may be NULL) and desc[p]
 * (without fds where omit[p]); from every p with from[p] one message, whose
 * notices are applied before `on_msg` takes it. */
typedef vmmipc_result_t (*round_msg_t)(void *arg, int p, vmmipc__cmsg_in_t *m);

typedef struct round {
  struct vmmipc_comm *c;
  uint64_t epoch; /* the frames' epoch */
  const char *to, *from;
  const vmmipc_desc_t *desc; /* [n] or NULL */
  const char *omit;          /* [n] or NULL */
  vmmipc__freed_id_t *const *have;
  const int *num_have;
  round_msg_t on_msg;
  void *arg;
  double in_msg_s; /* time spent in on_msg (importing), kept out of transfer_s */
  char *told_all;  /* [n] or NULL, out: p was told to drop every mapping of this rank's buffers */
} round_t;

static vmmipc_result_t on_recv(void *arg, vmmipc__tp_recv_t *m) {
  round_t *g = arg;
  struct vmmipc_comm *c = g->c;
  double t0 = vmmipc__now();
  vmmipc__cmsg_in_t in;
  vmmipc_result_t r = vmmipc__cmsg_decode(m->bytes, m->num_bytes, m->fds, m->num_fds, &in); /* takes the fds */
  if (r) vmmipc__error_prefix("descriptor from rank %d: ", c->rank_of[m->peer]);
  if (r == VMMIPC_ERR_INVALID_DESC) vmmipc__error_rank(c->rank_of[m->peer]);
  free(m->bytes);
  free(m->fds);
  m->bytes = NULL;
  m->fds = NULL;
  m->num_fds = 0;
  if (!r && (in.num_freed || (in.flags & VMMIPC__CMSG_FREED_ALL))) {
    /* Only the owner's own buffers: its pid is the one SO_PEERCRED gave. */
    uint32_t pid = (uint32_t)vmmipc__conn_pid(vmmipc__tp_conn(c->tp), m->peer);
    vmmipc__mapcache_drop(c->cache, pid, in.nonce, in.freed, (int)in.num_freed,
                          (in.flags & VMMIPC__CMSG_FREED_ALL) != 0);
  }
  if (!r) r = g->on_msg(g->arg, m->peer, &in);
  vmmipc__cmsg_in_free(&in);
  g->in_msg_s += vmmipc__now() - t0;
  return r;
}

static vmmipc_result_t round_run(round_t *g, vmmipc_result_t local, int *secondary) {
  struct vmmipc_comm *c = g->c;
  *secondary = 0;
  int n = c->node_size;
  double t0 = vmmipc__now();
  /* The comm's slots (a failure is always told), its notices' copy this call's. */
  vmmipc__tp_send_t *s = c->coll_sends;
  vmmipc__tp_recv_t *m = c->coll_recvs;
  unsigned char **bytes = c->coll_bytes;
  memset(s, 0, (size_t)n * sizeof *s);
  memset(m, 0, (size_t)n * sizeof *m);
  memset(bytes, 0, (size_t)n * sizeof *bytes);
  vmmipc__freed_id_t *freed = malloc(VMMIPC__FREED_RING * sizeof *freed);
  if (VMMIPC__INJECT("round_tables")) { /* tests: no host memory for the round's own tables */
    free(freed);
    freed = NULL;
  }
  vmmipc_result_t r = VMMIPC_SUCCESS;
  int ns = 0, nr = 0;
  /* A rank that failed already keeps its own record: nothing is encoded. */
  if (!freed && !local) r = vmmipc__error(VMMIPC_ERR_NO_MEMORY, "a collective's notices");
  if (!r && !local) r = freed_cursors(c);
  uint64_t nonce = vmmipc__process_nonce();
  /* Every peer is listed even after a failure: the exchange tells them. */
  for (int p = 0; p < n; p++) {
    if (p == c->node_rank) continue;
    if (g->from && g->from[p]) m[nr++].peer = p;
    if (!g->to || !g->to[p]) continue;
    s[ns].peer = p;
    if (!local && !r) {
      vmmipc_desc_t d = g->desc ? g->desc[p] : NULL;
      int overflow = 0;
      uint64_t next = 0;
      int nf = vmmipc__freed_since(c->freed_told[n + p], freed, VMMIPC__FREED_RING, &next, &overflow);
      int omit = d && g->omit && g->omit[p];
      if (overflow && omit) {
        /* "Drop everything of mine" would also drop the mapping this
         * descriptor needs: told next time (round 1 never has one). */
        overflow = 0;
        nf = 0;
        next = c->freed_told[n + p];
      }
      if (overflow && g->told_all) g->told_all[p] = 1;
      vmmipc__cmsg_t msg = {(omit ? VMMIPC__CMSG_NO_FDS : 0u) | (overflow ? VMMIPC__CMSG_FREED_ALL : 0u),
                            nonce,
                            freed,
                            (uint32_t)nf,
                            g->have ? g->have[p] : NULL,
                            g->have ? (uint32_t)g->num_have[p] : 0u,
                            d};
      size_t nb = vmmipc__cmsg_bytes(&msg);
      bytes[ns] = malloc(nb);
      if (!bytes[ns]) {
        r = vmmipc__error(VMMIPC_ERR_NO_MEMORY, "encoding a collective message of %zu bytes", nb);
        ns++;
        continue;
      }
      vmmipc__cmsg_encode(&msg, bytes[ns]);
      c->freed_told[n + p] = next;
      s[ns].bytes = bytes[ns];
      s[ns].num_bytes = nb;
      s[ns].fds = d && !omit ? d->fds : NULL;
      s[ns].num_fds = d && !omit ? d->num_chunks : 0;
    }
    ns++;
  }
  free(freed);
  if (!local) local = r;
  /* Two slacks before the call's bound: this rank's outcome, blaming the
   * peer it waited for, reaches the collector before it gives up. */
  vmmipc__tp_xchg_t x = {VMMIPC__CTX_COLL, g->epoch, s, ns, m, nr, on_recv, g, local, -1, vmmipc__step_deadline(c)};
  /* Tests act here: one rank made late inside the exchange; another
   * thread tried on this comm while this call holds it. */
  if (!local && VMMIPC__INJECT("late")) VMMIPC__LATE(c->timeout_ms);
  VMMIPC__INSIDE();
  /* A rank that reaches a round with fds past its step's bound (it was
   * late) sends none: its peers, bound alike, have given up on it, and fds
   * landing in their sockets now would hold its device memory until their
   * next collective or their destroy (an H200 saw 12 MiB so after a late
   * scatter_map root). Its exchange would time out at once anyway; it tells
   * the peers that it failed instead. */
  int with_fds = 0;
  for (int i = 0; i < ns; i++) with_fds |= s[i].num_fds > 0;
  if (!local && with_fds && vmmipc__now_ms() >= x.deadline_ms) {
    local = vmmipc__error(VMMIPC_ERR_TIMEOUT,
                          "rank %d reached the exchange after its bound (the timeout, %d ms, from the call's entry); "
                          "its descriptors were not sent",
                          c->rank, c->timeout_ms);
    vmmipc__error_rank(c->rank);
    x.local = local;
  }
  r = vmmipc__tp_exchange(c->tp, &x);
  if (!local && !r && VMMIPC__INJECT("transfer")) r = vmmipc__error(VMMIPC_ERR_PEER, "injected failure at transfer");
  *secondary = x.aborted_by >= 0;
  for (int i = 0; i < nr; i++) { /* what the callback did not take */
    if (m[i].fds) vmmipc__close_fds(m[i].fds, m[i].num_fds);
    free(m[i].fds);
    free(m[i].bytes);
    m[i].fds = NULL;
    m[i].bytes = NULL;
  }
  for (int i = 0; i < n; i++) {
    free(bytes[i]);
    bytes[i] = NULL;
  }
  c->timing.transfer_s += vmmipc__now() - t0 - g->in_msg_s;
  g->in_msg_s = 0;
  return r;
}

typedef struct desc_round {
  vmmipc__coll_got_t got;
  void *arg;
  struct vmmipc_comm *c;
  int fds_may_be_left_out; /* the map collectives' second round only */
} desc_round_t;

static vmmipc_result_t got_desc(void *arg, int p, vmmipc__cmsg_in_t *in) {
  desc_round_t *d = arg;
  if (in->desc && (in->flags & VMMIPC__CMSG_NO_FDS) && !d->fds_may_be_left_out) {
    /* Only a map collective's first round tells a sender what the receiver
     * holds; anywhere else a descriptor without fds cannot be used. */
    int from = d->c->rank_of[p];
    vmmipc_result_t r = vmmipc__error(VMMIPC_ERR_INVALID_DESC, "rank %d sent a descriptor without its fds", from);
    vmmipc__error_rank(from);
    return r;
  }
  vmmipc_desc_t desc = in->desc;
  in->desc = NULL; /* `got` owns it */
  return d->got(d->arg, p, desc);
}

vmmipc_result_t vmmipc__coll_exchange(struct vmmipc_comm *c, const vmmipc_desc_t *send_desc, const char *to,
                                      const char *from, vmmipc__coll_got_t got, void *arg, vmmipc_result_t local,
                                      int *secondary) {
  *secondary = 0;
  if (c->node_size <= 1) return local;
  desc_round_t d = {got, arg, c, 0};
  round_t g = {c, c->epoch, to, from, send_desc, NULL, NULL, NULL, got_desc, &d, 0, NULL};
  return round_run(&g, local, secondary);
}

/* ---- the map collectives: "have" first, then descriptors ------------------ */

typedef struct have_round {
  vmmipc__freed_id_t **have; /* [n]: what each peer holds of this rank's buffers */
  int *num_have;
  struct vmmipc_comm *c;
} have_round_t;

static vmmipc_result_t got_have(void *arg, int p, vmmipc__cmsg_in_t *in) {
  have_round_t *h = arg;
  if (in->desc) { /* the sender's fault: named, so that every rank's verdict blames it */
    int from = h->c->rank_of[p];
    vmmipc_result_t r =
        vmmipc__error(VMMIPC_ERR_INVALID_DESC, "rank %d sent a descriptor in the first round of a map collective", from);
    vmmipc__error_rank(from);
    return r;
  }
  h->have[p] = in->have;
  h->num_have[p] = (int)in->num_have;
  in->have = NULL;
  return VMMIPC_SUCCESS;
}

static int holds(const vmmipc__freed_id_t *ids, int n, const struct vmmipc_buf *b) {
  for (int i = 0; i < n; i++)
    if (ids[i].serial == b->serial && ids[i].generation == b->generation) return 1;
  return 0;
}

/* The descriptors of round 2: one export per distinct buffer, with fds only
 * when some peer it goes to does not hold it (so a hit costs no dup, no
 * send and no close of fds either). */
static vmmipc_result_t export_for_peers(struct vmmipc_comm *c, const vmmipc_buf_t *bufs, const char *to,
                                        vmmipc__freed_id_t *const *theirs, const int *num_theirs, int per_peer,
                                        const char *told_all, vmmipc_desc_t *made, vmmipc_desc_t *descs,
                                        char *omit) {
  int n = c->node_size;
  for (int p = 0; bufs && to && p < n; p++) {
    vmmipc_buf_t b = to[p] && p != c->node_rank ? bufs[p] : NULL;
    /* A peer told in round 1 to drop every mapping of this rank's holds
     * none any more, whatever its list said. */
    omit[p] = b && b->size && b->serial && !told_all[p] && holds(theirs[p], num_theirs[p], b);
  }
  for (int p = 0; bufs && to && p < n; p++) {
    vmmipc_buf_t b = to[p] && p != c->node_rank ? bufs[p] : NULL;
    if (!b || b->size == 0) continue;
    int q = 0;
    while (q < p && !(to[q] && q != c->node_rank && bufs[q] == b)) q++;
    if (q < p) { /* that export serves this peer too */
      descs[p] = descs[q];
      continue;
    }
    int need_fds = 0;
    for (int k = p; k < n && !need_fds; k++)
      need_fds = to[k] && k != c->node_rank && bufs[k] == b && !omit[k];
    double t0 = vmmipc__now();
    vmmipc_result_t r = vmmipc__export_ex(b, need_fds, &made[p]);
    c->timing.export_s += vmmipc__now() - t0;
    if (r) {
      if (per_peer) vmmipc__error_prefix("buffer for rank %d: ", c->rank_of[p]);
      return r;
    }
    descs[p] = made[p];
  }
  return VMMIPC_SUCCESS;
}

vmmipc_result_t vmmipc__coll_map_exchange(struct vmmipc_comm *c, const vmmipc_buf_t *bufs, int per_peer,
                                          const char *to, const char *from, const vmmipc_access_t *access,
                                          vmmipc__coll_got_t got, void *arg, vmmipc_result_t local,
                                          int *secondary) {
  *secondary = 0;
  /* Two epochs, one per round, taken here on every rank before anything
   * depends on the node's shape: a node of one exchanges nothing, but the
   * window ids made from the epoch are compared comm-wide. */
  const uint64_t epoch1 = c->epoch++;
  int n = c->node_size;
  if (n <= 1) return local;
  /* Round 1, importers to owners: which of the owner's buffers each holds
   * mapped with this access, pinned until the end of the call. */
  vmmipc__freed_id_t **mine = calloc((size_t)n, sizeof *mine), **theirs = calloc((size_t)n, sizeof *theirs);
  int *num_mine = calloc((size_t)n, sizeof *num_mine), *num_theirs = calloc((size_t)n, sizeof *num_theirs);
  struct vmmipc__mapent ***pins = calloc((size_t)n, sizeof *pins);
  vmmipc_desc_t *made = calloc((size_t)n, sizeof *made), *descs = calloc((size_t)n, sizeof *descs);
  char *omit = calloc((size_t)n, 1);
  int tables = mine && theirs && num_mine && num_theirs && pins && made && descs && omit;
  if (VMMIPC__INJECT("map_tables")) tables = 0; /* tests: no host memory for the exchange's tables */
  vmmipc_result_t r = VMMIPC_SUCCESS;
  if (!tables && !local) r = vmmipc__error(VMMIPC_ERR_NO_MEMORY, "a map collective's tables"); /* as round_run */
  vmmipc__mapcache_stats_t cs;
  vmmipc__mapcache_stats(c->cache, &cs);
  int cap = cs.entries < (int)VMMIPC__CMSG_MAX_IDS ? cs.entries : (int)VMMIPC__CMSG_MAX_IDS;
  for (int p = 0; !r && !local && cap > 0 && from && p < n; p++) {
    if (!from[p] || p == c->node_rank) continue;
    mine[p] = malloc((size_t)cap * sizeof **mine);
    pins[p] = malloc((size_t)cap * sizeof **pins);
    if (!mine[p] || !pins[p]) {
      r = vmmipc__error(VMMIPC_ERR_NO_MEMORY, "a map collective's tables");
      break;
    }
    uint32_t pid = (uint32_t)vmmipc__conn_pid(vmmipc__tp_conn(c->tp), p);
    num_mine[p] = vmmipc__mapcache_pin(c->cache, pid, access, mine[p], pins[p], cap);
  }
  if (!local) local = r;
  /* Every pair that exchanges anything talks both ways in round 1, so that
   * no rank is still reading round 1 from a peer that has moved on to round
   * 2 (a frame of the next epoch there would break the stream). */
  char *both = c->coll_both, *told_all = c->coll_told_all; /* the comm's: a failure is always told */
  memset(told_all, 0, (size_t)n);
  for (int p = 0; p < n; p++) both[p] = (to && to[p]) || (from && from[p]);
  have_round_t h = {theirs, num_theirs, c};
  round_t g1 = {c, epoch1, both, both, NULL, NULL, mine, num_mine, got_have, &h, 0, told_all};
  int sec1 = 0, sec2 = 0;
  vmmipc_result_t x1 = round_run(&g1, local, &sec1);
  if (!local && x1) {
    local = x1;
    *secondary = sec1;
  }
  /* Round 2, owners to importers: descriptors, without fds for the peers
   * that hold them. */
  if (!local) local = export_for_peers(c, bufs, to, theirs, num_theirs, per_peer, told_all, made, descs, omit);
  desc_round_t d = {got, arg, c, 1};
  round_t g2 = {c, c->epoch, to, from, descs, omit, NULL, NULL, got_desc, &d, 0, NULL}; /* its own epoch */
  vmmipc_result_t x2 = round_run(&g2, local, &sec2);
  if (!local) *secondary = sec2;
  for (int p = 0; p < n; p++) {
    if (pins && pins[p]) vmmipc__mapcache_unpin(pins[p], num_mine[p]); /* pinned only with every table */
    if (pins) free(pins[p]);
    if (mine) free(mine[p]);
    if (theirs) free(theirs[p]);
    if (made) vmmipc_desc_free(made[p]);
  }
  free(pins);
  free(mine);
  free(theirs);
  free(num_mine);
  free(num_theirs);
  free(made);
  free(descs);
  free(omit);
  return local ? local : x2;
}
