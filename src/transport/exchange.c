/* The progress loop (tp.h): sends and receives messages over the mesh of
 * conn.c, matched by context and epoch through the codec, every wait
 * bounded, peers told (ABORT) when this rank gives up. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/host.h"
#include "common/le.h"
#include "common/testhooks.h"
#include "transport/tp.h"
#include "transport/tp_priv.h"

/* Longest single poll(): liveness of pending peers is checked this often. */
#define TP_SLICE_MS 100
/* Poll slice while waiting for what poll() cannot report (ETOOMANYREFS). */
#define TP_RETRY_MS 2
/* Total time one exchange may spend telling peers it gave up. */
#define TP_ABORT_BUDGET_MS 200

static int tp_rank(const vmmipc__tp_t *tp, int p) { return vmmipc__conn_rank(tp->conn, p); }

/* One exchange's operations (the transport keeps their tables, tp_priv.h). */
typedef struct vmmipc__tp_sop {
  const vmmipc__tp_send_t *msg;
  uint64_t seq;
  uint32_t index;  /* next frame */
  uint64_t frames;
  int backoff;     /* ETOOMANYREFS: retry after a short wait, not on POLLOUT */
  int done;
} sop_t;

typedef struct vmmipc__tp_rop {
  vmmipc__tp_recv_t *slot; /* NULL: only watched (COLL: a peer we send to but do not hear from) */
  int peer;
  uint64_t lo, hi;
  int done;
} rop_t;

vmmipc_result_t vmmipc__tp_open(const vmmipc__tp_opts_t *o, vmmipc__tp_t **out) {
  *out = NULL;
  vmmipc__tp_t *tp = calloc(1, sizeof *tp);
  if (!tp) return vmmipc__error(VMMIPC_ERR_NO_MEMORY, "opening the transport");
  size_t n = o->node_size > 0 ? (size_t)o->node_size : 1;
  tp->timeout_ms = o->timeout_ms;
  tp->aborted_by = -1;
  tp->rx[0] = calloc(n, sizeof(vmmipc__asm_t));
  tp->rx[1] = calloc(n, sizeof(vmmipc__asm_t));
  tp->p2p_next_out = calloc(n, sizeof(uint64_t));
  tp->p2p_next_in = calloc(n, sizeof(uint64_t));
  tp->rbuf_cap = VMMIPC__FRAME_HEADER_BYTES + VMMIPC__FRAME_MAX_BYTES + 1;
  tp->rbuf = malloc(tp->rbuf_cap);
  tp->tell_todo = calloc(n, 1);
  tp->tell_seq = calloc(n, sizeof *tp->tell_seq);
  tp->tell_pfd = calloc(n, sizeof *tp->tell_pfd);
  tp->x_seen = calloc(2 * n, 1);
  tp->x_sops = calloc(n, sizeof *tp->x_sops);
  tp->x_rops = calloc(2 * n, sizeof *tp->x_rops);
  tp->x_pfd = calloc(4 * n, sizeof *tp->x_pfd);
  tp->x_hears = calloc(n, 1);
  tp->x_ends = calloc(n, 1);
  if (!tp->rx[0] || !tp->rx[1] || !tp->p2p_next_out || !tp->p2p_next_in || !tp->rbuf || !tp->tell_todo ||
      !tp->tell_seq || !tp->tell_pfd || !tp->x_seen || !tp->x_sops || !tp->x_rops || !tp->x_pfd || !tp->x_hears ||
      !tp->x_ends) {
    vmmipc__tp_close(tp);
    return vmmipc__error(VMMIPC_ERR_NO_MEMORY, "opening the transport: tables for %d ranks", o->node_size);
  }
  vmmipc__conn_opts_t co = {o->socket_namespace, o->socket_dir, o->node_rank, o->node_size, o->ranks, o->comm_id};
  vmmipc_result_t rc = vmmipc__conn_open(&co, &tp->conn);
  if (rc) {
    vmmipc__tp_close(tp);
    return rc;
  }
  *out = tp;
  return VMMIPC_SUCCESS;
}

const unsigned char *vmmipc__tp_addr(const vmmipc__tp_t *tp) { return tp->conn->addr; }

vmmipc_result_t vmmipc__tp_connect(vmmipc__tp_t *tp, const unsigned char *addrs, const pid_t *pids,
                                   const uid_t *uids) {
  return vmmipc__tp_connect_until(tp, addrs, pids, uids, NULL, NULL);
}

vmmipc_result_t vmmipc__tp_connect_until(vmmipc__tp_t *tp, const unsigned char *addrs, const pid_t *pids,
                                         const uid_t *uids, vmmipc__mesh_stop_fn stop, void *arg) {
  return vmmipc__conn_mesh(tp->conn, addrs, pids, uids, vmmipc__now_ms() + tp->timeout_ms, stop, arg);
}

void vmmipc__tp_close(vmmipc__tp_t *tp) {
  if (!tp) return;
  int n = tp->conn ? tp->conn->node_size : 0;
  for (int k = 0; k < 2; k++)
    for (int p = 0; tp->rx[k] && p < n; p++) vmmipc__asm_reset(&tp->rx[k][p]);
  vmmipc__conn_close(tp->conn);
  free(tp->rx[0]);
  free(tp->rx[1]);
  free(tp->p2p_next_out);
  free(tp->p2p_next_in);
  free(tp->rbuf);
  free(tp->tell_todo);
  free(tp->tell_seq);
  free(tp->tell_pfd);
  free(tp->x_seen);
  free(tp->x_sops);
  free(tp->x_rops);
  free(tp->x_pfd);
  free(tp->x_hears);
  free(tp->x_ends);
  free(tp);
}

vmmipc__conn_t *vmmipc__tp_conn(vmmipc__tp_t *tp) { return tp->conn; }

void vmmipc__tp_drop_peer(vmmipc__tp_t *tp, int p, const char *why) {
  vmmipc__conn_drop(tp->conn, p, why);
  for (int k = 0; k < 2; k++) vmmipc__asm_drop(&tp->rx[k][p], 0, &tp->stale_fds);
}

void vmmipc__tp_stats(const vmmipc__tp_t *tp, vmmipc__tp_stats_t *s) {
  s->stale_frames = tp->stale_frames;
  s->stale_fds = tp->stale_fds;
  s->refused = tp->conn->refused;
}

/* ---- one exchange ------------------------------------------------------------ */

typedef struct xstate {
  vmmipc__tp_t *tp;
  vmmipc__tp_xchg_t *x;
  sop_t *sops;
  rop_t *rops;
  int nrops;
  int retry_soon;
  uint64_t records; /* read so far */
  int64_t deadline; /* the exchange's */
} xstate_t;

static vmmipc_result_t closed_error(vmmipc__tp_t *tp, int p) {
  int R = tp_rank(tp, p);
  vmmipc__error(VMMIPC_ERR_PEER,
                "the connection with rank %d is closed (%s); hint: rank %d failed, exited or destroyed its "
                "communicator; this comm cannot talk to it any more",
                R, tp->conn->closed[p] ? tp->conn->closed[p] : "unknown reason", R);
  vmmipc__error_rank(R);
  return VMMIPC_ERR_PEER;
}


static vmmipc_result_t hung_up(vmmipc__tp_t *tp, int p, int e) {
  int R = tp_rank(tp, p);
  char why[160];
  snprintf(why, sizeof why, "rank %d hung up (%s)", R, e ? vmmipc__errno_name(e) : "end of file");
  vmmipc__tp_drop_peer(tp, p, why);
  vmmipc__error(VMMIPC_ERR_PEER, "%s; hint: rank %d has probably failed or destroyed its communicator; check its output",
                why, R);
  vmmipc__error_os(e);
  vmmipc__error_rank(R);
  return VMMIPC_ERR_PEER;
}

static vmmipc_result_t recv_progress(xstate_t *s, rop_t *op);

/* Whether the comm was aborted on this rank (vmmipc__tp_watch_abort). */
static int aborted_here(const vmmipc__tp_t *tp) {
  return tp->aborted && __atomic_load_n(tp->aborted, __ATOMIC_ACQUIRE);
}

static vmmipc_result_t progress(xstate_t *s, int *pending);

/* Reads on until nothing more that is queued moves (a read stops after
 * VMMIPC__TP_RECORDS_PER_TURN records), for the checks that decide on what
 * comes after it (a refused send, an END seen first, a peer that exited):
 * `op`'s receive only, or every operation (progress). Bounded by the
 * deadline and an abort (a peer that keeps sending). */
static vmmipc_result_t read_on(xstate_t *s, rop_t *op, int *pending) {
  uint64_t seen;
  int more;
  do {
    seen = s->records;
    vmmipc_result_t rc = op ? recv_progress(s, op) : progress(s, pending);
    if (rc) return rc;
    more = op ? !op->done : *pending;
  } while (more && s->records != seen && vmmipc__now_ms() < s->deadline && !aborted_here(s->tp));
  return VMMIPC_SUCCESS;
}

/* Records a sealed peer queued can only be finitely many: it sends nothing
 * after its END frame. A bound all the same, against a peer that breaks
 * the protocol. */
#define TP_END_SCAN_MAX 4096

/* The END frame p queued on its connection of context ctx, after a refusal
 * or a hang-up: taken, and its error returned; else VMMIPC_SUCCESS. What p
 * queued before it (messages nobody will receive now: the comm fails here
 * either way, and a hang-up drops the connections) is dropped on the way,
 * its fds closed and counted as stale. */
static vmmipc_result_t take_end(xstate_t *s, int p, int ctx, int max) {
  vmmipc__tp_t *tp = s->tp;
  int fd = tp->conn->fd[ctx - 1][p];
  vmmipc__frame_expect_t want = {(uint32_t)p, (uint32_t)tp->conn->node_rank, tp->conn->comm_id, (uint16_t)ctx};
  for (int k = 0; fd >= 0 && k < max; k++) {
    vmmipc__rec_t rec;
    if (vmmipc__conn_recv(fd, tp->rbuf, tp->rbuf_cap, &rec)) return VMMIPC_SUCCESS; /* nothing more queued */
    vmmipc__close_fds(rec.fds, rec.nfds);
    if (vmmipc__rec_eof(&rec)) return VMMIPC_SUCCESS;
    vmmipc__frame_t f;
    char why[400];
    if (!rec.truncated && !rec.odd_cmsg && !rec.ctrunc &&
        vmmipc__frame_decode(tp->rbuf, rec.len, rec.nfds, &want, &f, why, sizeof why) == 0 &&
        f.kind == VMMIPC__KIND_END) {
      s->x->aborted_by = p;
      return vmmipc__tp_end_error(tp, p, &f, tp->rbuf + VMMIPC__FRAME_HEADER_BYTES);
    }
    tp->stale_frames++;
    tp->stale_fds += (uint64_t)rec.nfds;
  }
  return VMMIPC_SUCCESS;
}

/* p's END frame, when p is gone from this exchange's connection: on that
 * connection, or, for point to point, on p's collective one, where an END
 * also goes and gets through when the point-to-point socket was full (the
 * END is best effort: transport/verdict.c). Else a hang-up. */
static vmmipc_result_t gone(xstate_t *s, int p, int e) {
  vmmipc_result_t rc = take_end(s, p, s->x->ctx, TP_END_SCAN_MAX);
  if (!rc && s->x->ctx == VMMIPC__CTX_P2P) rc = take_end(s, p, VMMIPC__CTX_COLL, TP_END_SCAN_MAX);
  return rc ? rc : hung_up(s->tp, p, e);
}

/* A send that found p gone. A rank whose comm failed refuses what comes
 * after its END frame, when it sent one (comm/guard.c, transport/seal.c):
 * that frame, queued here, says why (an abort, or why the comm broke), so
 * it is read first, with whatever of this call came ahead of it. */
static vmmipc_result_t send_refused(xstate_t *s, int p, int e) {
  for (int i = 0; i < s->nrops; i++)
    if (s->rops[i].peer == p && !s->rops[i].done) {
      vmmipc_result_t rc = read_on(s, &s->rops[i], NULL);
      if (rc) return rc;
      break;
    }
  return gone(s, p, e);
}


/* A point-to-point exchange also watches the collective connection of
 * every node peer (ends[p]): the END frame of a peer that aborted the comm,
 * or whose comm broke and who said so, ends this call at once, as
 * vmmipc_comm_abort promises the node's peers, whoever this call talks to.
 * Only an END that comes first there is seen: a peer with other frames
 * queued ahead of it (it went on to a later collective; an ABORT of a
 * failed one) is watched no longer in this call, nor one that hung up (the
 * partner's own connection shows that). A peer sends its END frames after
 * all it sent before, so once one is seen, what the call waits for is
 * taken first if it came (*pending: what is left). */
static vmmipc_result_t end_from_peers(xstate_t *s, char *ends, int *pending) {
  vmmipc__tp_t *tp = s->tp;
  for (int p = 0; ends && p < tp->conn->node_size && *pending; p++) {
    if (!ends[p]) continue;
    int fd = tp->conn->fd[VMMIPC__CTX_COLL - 1][p];
    int kind = fd >= 0 ? vmmipc__conn_peek(fd, NULL, NULL) : -2;
    if (kind == -1) continue; /* nothing yet: watched on */
    if (kind == VMMIPC__KIND_END) {
      vmmipc_result_t rc = read_on(s, NULL, pending);
      if (rc || !*pending) return rc;
      if ((rc = take_end(s, p, VMMIPC__CTX_COLL, 1))) return rc;
    }
    ends[p] = 0;
  }
  return VMMIPC_SUCCESS;
}

static vmmipc_result_t send_progress(xstate_t *s, sop_t *op) {
  vmmipc__tp_t *tp = s->tp;
  const vmmipc__tp_send_t *m = op->msg;
  int p = m->peer, fd = tp->conn->fd[s->x->ctx - 1][p];
  if (fd < 0) return closed_error(tp, p);
  while (!op->done) {
    vmmipc__frame_t f;
    memset(&f, 0, sizeof f);
    f.kind = VMMIPC__KIND_DATA;
    f.ctx = (uint16_t)s->x->ctx;
    f.sender = (uint32_t)tp->conn->node_rank;
    f.receiver = (uint32_t)p;
    f.comm_id = tp->conn->comm_id;
    f.seq = op->seq;
    f.total_bytes = m->num_bytes;
    f.total_fds = (uint32_t)m->num_fds;
    f.index = op->index;
    vmmipc__frame_cut(f.total_bytes, f.total_fds, f.index, &f.frame_bytes, &f.frame_fds);
    unsigned char head[VMMIPC__FRAME_HEADER_BYTES];
    vmmipc__frame_encode(&f, head);
    size_t off_b = (size_t)op->index * VMMIPC__FRAME_MAX_BYTES, off_f = (size_t)op->index * VMMIPC__FRAME_MAX_FDS;
    int e = vmmipc__conn_send(fd, head, sizeof head, f.frame_bytes ? (const char *)m->bytes + off_b : NULL,
                              f.frame_bytes, f.frame_fds ? m->fds + off_f : NULL, (int)f.frame_fds);
    if (e == EAGAIN || e == EWOULDBLOCK) return VMMIPC_SUCCESS; /* wait for POLLOUT */
    if (e == ETOOMANYREFS) { /* too many fds in flight for this user: wait for the receiver */
      op->backoff = 1;
      s->retry_soon = 1;
      return VMMIPC_SUCCESS;
    }
    if (e && vmmipc__errno_peer_gone(e)) return send_refused(s, p, e);
    if (e)
      return vmmipc__os_error(VMMIPC_ERR_SYSTEM, e,
                              e == EBADF ? "one of the fds to send was closed while the call ran" : NULL,
                              "sending to rank %d (frame %u of %llu)", tp_rank(tp, p), (unsigned)op->index,
                              (unsigned long long)op->frames);
    if (++op->index == op->frames) op->done = 1;
  }
  return VMMIPC_SUCCESS;
}

/* The fds of a frame were cut short: almost always RLIMIT_NOFILE. */
static vmmipc_result_t fd_limit_error(vmmipc__tp_t *tp, int p, int got, unsigned want) {
  struct rlimit rl;
  long lim = getrlimit(RLIMIT_NOFILE, &rl) == 0 ? (long)rl.rlim_cur : -1;
  vmmipc__error(VMMIPC_ERR_RESOURCE,
                "receiving from rank %d: the file descriptors of a frame were cut short (MSG_CTRUNC: %d of %u "
                "arrived and were closed): this process has %d fds open with a limit of %ld (RLIMIT_NOFILE); "
                "hint: raise the open-file limit (ulimit -n)%s",
                tp_rank(tp, p), got, want, vmmipc__fd_count(), lim, vmmipc__fd_limit_note());
  vmmipc__error_os(EMFILE); /* what the kernel met installing them, though it reports only MSG_CTRUNC */
  return VMMIPC_ERR_RESOURCE;
}

static vmmipc_result_t bad_stream(vmmipc__tp_t *tp, int p, const char *why) {
  int R = tp_rank(tp, p);
  char reason[400];
  snprintf(reason, sizeof reason, "rank %d broke the protocol: %s", R, why);
  vmmipc__tp_drop_peer(tp, p, reason);
  vmmipc__error(VMMIPC_ERR_INVALID_DESC,
                "receiving from rank %d: %s; the connection was closed; hint: every rank must run the same "
                "vmmipc build",
                R, why);
  vmmipc__error_rank(R);
  return VMMIPC_ERR_INVALID_DESC;
}

static vmmipc_result_t recv_progress(xstate_t *s, rop_t *op) {
  vmmipc__tp_t *tp = s->tp;
  vmmipc__tp_xchg_t *x = s->x;
  int p = op->peer, ctx = x->ctx, R = tp_rank(tp, p);
  vmmipc__asm_t *a = &tp->rx[ctx - 1][p];
  for (int turn = 0; !op->done; turn++) {
    int fd = tp->conn->fd[ctx - 1][p];
    if (fd < 0) return closed_error(tp, p);
    if (turn == VMMIPC__TP_RECORDS_PER_TURN) return VMMIPC_SUCCESS; /* the rest after the deadline's check */
    VMMIPC__RECORD_PAUSE();
    vmmipc__rec_t rec;
    int e = vmmipc__conn_recv(fd, tp->rbuf, tp->rbuf_cap, &rec);
    if (e == EAGAIN || e == EWOULDBLOCK) return VMMIPC_SUCCESS;
    s->records++;
    if (e && vmmipc__errno_peer_gone(e)) return gone(s, p, e);
    if (e) return vmmipc__os_error(VMMIPC_ERR_SYSTEM, e, NULL, "receiving from rank %d", R);
    if (vmmipc__rec_eof(&rec)) return gone(s, p, 0);
    vmmipc__frame_expect_t want = {(uint32_t)p, (uint32_t)tp->conn->node_rank, tp->conn->comm_id, (uint16_t)ctx};
    vmmipc__frame_t f;
    char why[400];
    if (rec.ctrunc) {
      /* Not the peer's fault: this message is lost here; skip its other frames. */
      int full = rec.len >= VMMIPC__FRAME_HEADER_BYTES;
      unsigned announced = full ? vmmipc__get32(tp->rbuf + 60) : 0;
      uint64_t seq = full ? vmmipc__get64(tp->rbuf + 32) : 0;
      int got = rec.nfds;
      vmmipc__close_fds(rec.fds, rec.nfds);
      tp->stale_fds += (uint64_t)got;
      vmmipc__asm_skip(a, seq, &tp->stale_fds);
      return fd_limit_error(tp, p, got, announced);
    }
    if (rec.truncated || rec.odd_cmsg) {
      vmmipc__close_fds(rec.fds, rec.nfds);
      return bad_stream(tp, p, rec.truncated ? "a frame longer than the largest legal frame (MSG_TRUNC)"
                                             : "a control message other than SCM_RIGHTS");
    }
    if (vmmipc__frame_decode(tp->rbuf, rec.len, rec.nfds, &want, &f, why, sizeof why) != 0) {
      vmmipc__close_fds(rec.fds, rec.nfds);
      return bad_stream(tp, p, why);
    }
    if (f.kind == VMMIPC__KIND_HELLO) {
      vmmipc__close_fds(rec.fds, rec.nfds);
      return bad_stream(tp, p, "a HELLO frame after the connection was set up");
    }
    if (f.kind == VMMIPC__KIND_VERDICT) { /* verdicts travel over MPI now: stale */
      vmmipc__close_fds(rec.fds, rec.nfds);
      tp->stale_frames++;
      continue;
    }
    if (f.kind == VMMIPC__KIND_END) { /* every call on the comm ends: aborted or broken there */
      vmmipc__close_fds(rec.fds, rec.nfds);
      x->aborted_by = p;
      return vmmipc__tp_end_error(tp, p, &f, tp->rbuf + VMMIPC__FRAME_HEADER_BYTES);
    }
    const unsigned char *payload = tp->rbuf + VMMIPC__FRAME_HEADER_BYTES;
    vmmipc__asm_rc_t rc = vmmipc__asm_feed(a, op->lo, op->hi, &f, payload, rec.fds, rec.nfds, &tp->stale_fds,
                                           why, sizeof why);
    switch (rc) {
      case VMMIPC__ASM_STALE:
        tp->stale_frames++;
        continue;
      case VMMIPC__ASM_MORE:
        continue;
      case VMMIPC__ASM_BAD:
        vmmipc__asm_reset(a);
        return bad_stream(tp, p, why);
      case VMMIPC__ASM_NOMEM:
        return vmmipc__error(VMMIPC_ERR_NO_MEMORY, "receiving from rank %d: %s", R, why);
      case VMMIPC__ASM_ABORT: {
        if (ctx == VMMIPC__CTX_P2P) tp->p2p_next_in[p] = f.seq + 1; /* that message is gone */
        x->aborted_by = p;
        vmmipc_result_t code = (vmmipc_result_t)f.code;
        if (code < VMMIPC_ERR_INVALID_ARG || code > VMMIPC__RESULT_MAX) code = VMMIPC_ERR_PEER;
        vmmipc__error(VMMIPC_ERR_PEER, "rank %d gave up (%s): %.*s", R, vmmipc_strerror(code), (int)f.frame_bytes,
                      (const char *)payload);
        vmmipc__error_rank(R);
        return VMMIPC_ERR_PEER;
      }
      case VMMIPC__ASM_DONE: {
        if (!op->slot) {
          /* A watched peer sent a whole message it owes nobody: it is in
           * another call, or took another root (the agreement names which).
           * Dropped; the stream is at a message boundary, so the connection
           * stays and the comm stays usable. */
          unsigned char *b;
          size_t nb;
          int *fds, nf;
          vmmipc__asm_take(a, &b, &nb, &fds, &nf, NULL);
          vmmipc__close_fds(fds, nf);
          tp->stale_frames++;
          tp->stale_fds += (uint64_t)(nf > 0 ? nf : 0);
          free(fds);
          free(b);
          vmmipc__error(VMMIPC_ERR_INVALID_ARG,
                        "receiving from rank %d: a message this rank does not expect from it in this collective "
                        "(dropped); hint: every rank must make the same collective calls, with the same root",
                        R);
          vmmipc__error_rank(R);
          return VMMIPC_ERR_INVALID_ARG;
        }
        uint64_t seq;
        vmmipc__asm_take(a, &op->slot->bytes, &op->slot->num_bytes, &op->slot->fds, &op->slot->num_fds, &seq);
        if (ctx == VMMIPC__CTX_P2P) tp->p2p_next_in[p] = seq + 1;
        op->done = op->slot->done = 1;
        if (x->on_recv) return x->on_recv(x->arg, op->slot);
        return VMMIPC_SUCCESS;
      }
    }
  }
  return VMMIPC_SUCCESS;
}

/* Checks that the arguments describe an exchange this tp can carry out. */
static vmmipc_result_t check_args(vmmipc__tp_t *tp, const vmmipc__tp_xchg_t *x) {
  int n = tp->conn->node_size, me = tp->conn->node_rank;
  if ((x->ctx != VMMIPC__CTX_P2P && x->ctx != VMMIPC__CTX_COLL) || x->num_sends < 0 || x->num_recvs < 0 ||
      (x->num_sends && !x->sends) || (x->num_recvs && !x->recvs))
    return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "transport exchange: bad arguments");
  char *seen = tp->x_seen;
  memset(seen, 0, 2 * (size_t)n);
  vmmipc_result_t rc = VMMIPC_SUCCESS;
  for (int i = 0; i < x->num_sends && !rc; i++) {
    const vmmipc__tp_send_t *m = &x->sends[i];
    if (m->peer < 0 || m->peer >= n || m->peer == me || seen[m->peer]++)
      rc = vmmipc__error(VMMIPC_ERR_INVALID_ARG, "transport exchange: send %d to node rank %d", i, m->peer);
    else if ((m->num_bytes && !m->bytes) || m->num_fds < 0 || (m->num_fds && !m->fds) ||
             (uint64_t)m->num_bytes > VMMIPC__MSG_MAX_BYTES || (uint64_t)m->num_fds > VMMIPC__MSG_MAX_FDS)
      rc = vmmipc__error(VMMIPC_ERR_INVALID_ARG,
                         "transport exchange: the message to rank %d (%zu bytes, %d fds) is malformed or exceeds the "
                         "limits",
                         tp_rank(tp, m->peer), m->num_bytes, m->num_fds);
    for (int f = 0; !rc && f < m->num_fds; f++)
      if (m->fds[f] < 0 || fcntl(m->fds[f], F_GETFD) < 0)
        rc = vmmipc__error(VMMIPC_ERR_INVALID_ARG, "transport exchange: fd %d (%d of %d) of the message to rank %d "
                           "is not open",
                           m->fds[f], f + 1, m->num_fds, tp_rank(tp, m->peer));
  }
  for (int i = 0; i < x->num_recvs && !rc; i++) {
    int p = x->recvs[i].peer;
    if (p < 0 || p >= n || p == me || seen[n + p]++)
      rc = vmmipc__error(VMMIPC_ERR_INVALID_ARG, "transport exchange: receive %d from node rank %d", i, p);
  }
  return rc;
}

/* Appends what each pending operation waits for (timeout messages). */
static void describe_pending(const xstate_t *s, char *buf, size_t cap) {
  size_t len = strlen(buf);
  int shown = 0;
#define APPEND(...)                                                           \
  do {                                                                        \
    if (len + 1 < cap) {                                                      \
      int w_ = snprintf(buf + len, cap - len, __VA_ARGS__);                   \
      if (w_ > 0) len += (size_t)w_ < cap - len ? (size_t)w_ : cap - len - 1; \
    }                                                                         \
  } while (0)
  for (int i = 0; i < s->nrops; i++) {
    const rop_t *o = &s->rops[i];
    if (o->done || !o->slot) continue;
    if (shown++ == 8) {
      APPEND(", ...");
      return;
    }
    const vmmipc__asm_t *a = &s->tp->rx[s->x->ctx - 1][o->peer];
    if (a->active && a->seq >= o->lo)
      APPEND("%srank %d (receive: %llu of %llu bytes and %u of %u fds arrived)", shown > 1 ? ", " : "",
             tp_rank(s->tp, o->peer), (unsigned long long)a->bytes_done, (unsigned long long)a->total_bytes,
             (unsigned)a->fds_done, (unsigned)a->total_fds);
    else
      APPEND("%srank %d (receive: nothing arrived)", shown > 1 ? ", " : "", tp_rank(s->tp, o->peer));
  }
  for (int i = 0; i < s->x->num_sends; i++) {
    const sop_t *o = &s->sops[i];
    if (o->done) continue;
    if (shown++ == 8) {
      APPEND(", ...");
      return;
    }
    APPEND("%srank %d (send: %u of %llu frames taken)", shown > 1 ? ", " : "", tp_rank(s->tp, o->msg->peer),
           (unsigned)o->index, (unsigned long long)o->frames);
  }
#undef APPEND
}

/* The comm rank of the first peer that describe_pending names, or -1. */
static int first_pending_rank(const xstate_t *s) {
  for (int i = 0; i < s->nrops; i++)
    if (!s->rops[i].done && s->rops[i].slot) return tp_rank(s->tp, s->rops[i].peer);
  for (int i = 0; i < s->x->num_sends; i++)
    if (!s->sops[i].done) return tp_rank(s->tp, s->sops[i].msg->peer);
  return -1;
}

static int peer_pending(const xstate_t *s, int p) {
  for (int i = 0; i < s->nrops; i++)
    if (!s->rops[i].done && s->rops[i].slot && s->rops[i].peer == p) return 1;
  for (int i = 0; i < s->x->num_sends; i++)
    if (!s->sops[i].done && s->sops[i].msg->peer == p) return 1;
  return 0;
}

/* One pass over every pending operation; *pending counts what is left. */
static vmmipc_result_t progress(xstate_t *s, int *pending) {
  vmmipc_result_t rc;
  int left = 0;
  for (int i = 0; i < s->x->num_sends; i++) {
    sop_t *o = &s->sops[i];
    if (o->done) continue;
    o->backoff = 0;
    if ((rc = send_progress(s, o))) return rc;
    left += !o->done;
  }
  for (int i = 0; i < s->nrops; i++) {
    rop_t *o = &s->rops[i];
    if (o->done) continue;
    if ((rc = recv_progress(s, o))) return rc;
    left += !o->done && o->slot;
  }
  *pending = left;
  return VMMIPC_SUCCESS;
}

/* Best effort, bounded: ABORT (with the current error) to every peer that
 * still waits on this rank, and in a collective to every peer this rank
 * still waits on. */
static void tell_peers(xstate_t *s) {
  vmmipc__tp_t *tp = s->tp;
  vmmipc__tp_xchg_t *x = s->x;
  int n = tp->conn->node_size;
  char msg[VMMIPC__ABORT_MAX_BYTES + 1];
  snprintf(msg, sizeof msg, "%s", vmmipc_last_error());
  vmmipc__error_state_t st;
  vmmipc__error_get(&st);
  char *todo = tp->tell_todo;
  uint64_t *seq = tp->tell_seq;
  struct pollfd *pfd = tp->tell_pfd;
  memset(todo, 0, (size_t)n);
  for (int i = 0; i < x->num_sends; i++)
    if (!s->sops[i].done) {
      todo[s->sops[i].msg->peer] = 1;
      seq[s->sops[i].msg->peer] = s->sops[i].seq;
    }
  if (x->ctx == VMMIPC__CTX_COLL)
    for (int i = 0; i < s->nrops; i++)
      if (!s->rops[i].done) {
        todo[s->rops[i].peer] = 1;
        seq[s->rops[i].peer] = x->epoch;
      }
  if (x->aborted_by >= 0) todo[x->aborted_by] = 0; /* it is done already */
  vmmipc__frame_t f;
  memset(&f, 0, sizeof f);
  f.kind = VMMIPC__KIND_ABORT;
  f.ctx = (uint16_t)x->ctx;
  f.sender = (uint32_t)tp->conn->node_rank;
  f.comm_id = tp->conn->comm_id;
  vmmipc_result_t code = x->local ? x->local : VMMIPC_ERR_PEER;
  f.code = (uint32_t)code;
  f.frame_bytes = (uint32_t)strlen(msg);
  f.total_bytes = f.frame_bytes;
  const int64_t deadline = vmmipc__now_ms() + TP_ABORT_BUDGET_MS;
  for (;;) {
    nfds_t k = 0;
    int left = 0;
    for (int p = 0; p < n; p++) {
      if (!todo[p]) continue;
      int fd = tp->conn->fd[x->ctx - 1][p];
      if (fd < 0) {
        todo[p] = 0;
        continue;
      }
      f.receiver = (uint32_t)p;
      f.seq = seq[p];
      unsigned char head[VMMIPC__FRAME_HEADER_BYTES];
      vmmipc__frame_encode(&f, head);
      int e = vmmipc__conn_send(fd, head, sizeof head, msg, f.frame_bytes, NULL, 0);
      if (e == EAGAIN || e == EWOULDBLOCK) {
        pfd[k].fd = fd;
        pfd[k++].events = POLLOUT;
        left++;
        continue;
      }
      todo[p] = 0; /* sent, or the peer is gone */
    }
    int64_t now = vmmipc__now_ms();
    if (!left || now >= deadline) break;
    poll(pfd, k, (int)(deadline - now));
  }
  vmmipc__error_set_raw(msg); /* the caller's error stays the current one */
  vmmipc__error_put(&st);
}

vmmipc_result_t vmmipc__tp_exchange(vmmipc__tp_t *tp, vmmipc__tp_xchg_t *x) {
  x->aborted_by = -1;
  for (int i = 0; x->recvs && i < x->num_recvs; i++) { /* a NULL list is refused below */
    x->recvs[i].bytes = NULL;
    x->recvs[i].fds = NULL;
    x->recvs[i].num_bytes = 0;
    x->recvs[i].num_fds = 0;
    x->recvs[i].done = 0;
  }
  xstate_t s;
  memset(&s, 0, sizeof s);
  s.tp = tp;
  s.x = x;
  vmmipc_result_t rc = check_args(tp, x); /* malformed: nothing was sent, nobody is told */
  if (rc) return rc;
  int n = tp->conn->node_size;
  /* The transport's tables (check_args bounds the counts: one send and one
   * receive per peer at most). */
  s.sops = tp->x_sops;
  s.rops = tp->x_rops;
  struct pollfd *pfd = tp->x_pfd;
  char *hears = tp->x_hears, *ends = x->ctx == VMMIPC__CTX_P2P ? tp->x_ends : NULL;
  memset(s.sops, 0, (size_t)x->num_sends * sizeof *s.sops);
  memset(s.rops, 0, ((size_t)x->num_recvs + (size_t)x->num_sends) * sizeof *s.rops);
  memset(hears, 0, (size_t)n);
  /* The operations first: a failure below tells the peers (tell_peers reads
   * each send's peer and sequence number). */
  for (int i = 0; i < x->num_sends; i++) {
    sop_t *o = &s.sops[i];
    o->msg = &x->sends[i];
    o->seq = x->ctx == VMMIPC__CTX_COLL ? x->epoch : tp->p2p_next_out[o->msg->peer]++;
    o->frames = vmmipc__frame_count(o->msg->num_bytes, (uint32_t)o->msg->num_fds);
  }
  for (int i = 0; i < x->num_recvs; i++) {
    rop_t *o = &s.rops[s.nrops++];
    o->slot = &x->recvs[i];
    o->peer = x->recvs[i].peer;
  }
  for (int i = 0; i < x->num_recvs; i++) hears[x->recvs[i].peer] = 1;
  for (int i = 0; x->ctx == VMMIPC__CTX_COLL && i < x->num_sends; i++) {
    /* Watch peers we only send to: their ABORT must end our wait. */
    int p = x->sends[i].peer;
    if (hears[p]) continue;
    rop_t *o = &s.rops[s.nrops++];
    o->peer = p;
  }
  for (int i = 0; i < s.nrops; i++) {
    rop_t *o = &s.rops[i];
    o->lo = x->ctx == VMMIPC__CTX_COLL ? x->epoch : tp->p2p_next_in[o->peer];
    o->hi = x->ctx == VMMIPC__CTX_COLL ? x->epoch : UINT64_MAX;
  }
  for (int p = 0; ends && p < n; p++) ends[p] = p != tp->conn->node_rank;
  if (x->local) {
    rc = x->local;
    goto fail;
  }
  const int64_t started = vmmipc__now_ms();
  const int64_t deadline = x->deadline_ms ? x->deadline_ms : started + tp->timeout_ms;
  s.deadline = deadline;
  int64_t next_liveness = 0;
  for (;;) {
    int pending = 0;
    s.retry_soon = 0;
    if ((rc = progress(&s, &pending))) goto fail;
    if (!pending) break;
    if ((rc = end_from_peers(&s, ends, &pending))) goto fail;
    if (!pending) break;
    if (aborted_here(tp)) {
      const int me = tp_rank(tp, tp->conn->node_rank); /* this rank aborted: named as its peers name it */
      rc = vmmipc__error(VMMIPC_ERR_ABORTED, "rank %d aborted the communicator (vmmipc_comm_abort)", me);
      vmmipc__error_rank(me);
      goto fail;
    }
    int64_t now = vmmipc__now_ms();
    if (now >= next_liveness) {
      next_liveness = now + TP_SLICE_MS;
      for (int p = 0; p < n; p++) {
        if (!peer_pending(&s, p) || !vmmipc__pid_gone(tp->conn->pids[p])) continue;
        /* What it sent before it died is queued already: take it first,
         * all of it (within the deadline: its socket may be shared). */
        if ((rc = read_on(&s, NULL, &pending))) goto fail;
        if (!peer_pending(&s, p)) continue;
        int R = tp_rank(tp, p);
        rc = vmmipc__error(VMMIPC_ERR_PEER,
                           "rank %d (pid %d) exited while rank %d waited on it; hint: rank %d crashed or was killed: "
                           "its output has the first error",
                           R, (int)tp->conn->pids[p], tp_rank(tp, tp->conn->node_rank), R);
        vmmipc__error_rank(R);
        goto fail;
      }
      if (!pending) break;
    }
    if (now >= deadline) {
      char what[700] = "";
      describe_pending(&s, what, sizeof what);
      /* With the call's deadline, what this step waited of it. */
      int waited = x->deadline_ms ? (int)(now - started) : tp->timeout_ms;
      rc = vmmipc__error(VMMIPC_ERR_TIMEOUT,
                         "rank %d timed out after %d ms waiting for %s; hint: is that rank alive and in the matching "
                         "call? raise vmmipc_config_t.timeout_ms or VMMIPC_TIMEOUT_MS if it is just slow",
                         tp_rank(tp, tp->conn->node_rank), waited, what);
      vmmipc__error_rank(first_pending_rank(&s));
      goto fail;
    }
    nfds_t k = 0;
    for (int i = 0; i < s.nrops; i++)
      if (!s.rops[i].done && tp->conn->fd[x->ctx - 1][s.rops[i].peer] >= 0) {
        pfd[k].fd = tp->conn->fd[x->ctx - 1][s.rops[i].peer];
        pfd[k++].events = POLLIN;
      }
    for (int i = 0; i < x->num_sends; i++)
      if (!s.sops[i].done && !s.sops[i].backoff && tp->conn->fd[x->ctx - 1][x->sends[i].peer] >= 0) {
        pfd[k].fd = tp->conn->fd[x->ctx - 1][x->sends[i].peer];
        pfd[k++].events = POLLOUT;
      }
    for (int p = 0; ends && p < n; p++)
      if (ends[p]) {
        pfd[k].fd = tp->conn->fd[VMMIPC__CTX_COLL - 1][p];
        pfd[k++].events = POLLIN;
      }
    int64_t wait = deadline - now;
    if (next_liveness - now < wait) wait = next_liveness - now;
    if (s.retry_soon && wait > TP_RETRY_MS) wait = TP_RETRY_MS;
    if (poll(pfd, k, (int)(wait < 0 ? 0 : wait)) < 0 && errno != EINTR) {
      rc = vmmipc__os_error(VMMIPC_ERR_SYSTEM, errno, NULL, "transport exchange: poll");
      goto fail;
    }
  }
  return VMMIPC_SUCCESS;

fail:
  tell_peers(&s);
  for (int i = 0; i < x->num_recvs; i++) {
    vmmipc__tp_recv_t *r = &x->recvs[i];
    if (r->fds) vmmipc__close_fds(r->fds, r->num_fds);
    free(r->fds);
    free(r->bytes);
    r->fds = NULL;
    r->bytes = NULL;
    r->num_fds = 0;
    r->num_bytes = 0;
    r->done = 0;
  }
  return rc;
}
