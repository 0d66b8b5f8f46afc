/* What the agreement (comm/agree.c) needs of the node's sockets: reading a
 * peer's collective connection while MPI is waited on (hang-ups, aborts and
 * breaks seen at once), and the END frames that vmmipc_comm_abort and a
 * rank that breaks the comm send. (Verdicts travel over MPI: a VERDICT
 * frame, which earlier versions sent, is dropped as stale.) */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/le.h"
#include "common/testhooks.h"
#include "transport/tp.h"
#include "transport/tp_priv.h"

/* Total time the END frames of one vmmipc__tp_abort_all may wait for room
 * in full sockets, all connections together (as an exchange's ABORTs). */
#define TP_END_BUDGET_MS 200
/* Records vmmipc__tp_drop_stale reads per peer, in turns
 * (VMMIPC__TP_RECORDS_PER_TURN): a failed call's leftovers fit many times
 * over, and a peer that keeps sending cannot hold this rank in it. */
#define DROP_TURNS 16

static int coll_fd(const vmmipc__tp_t *tp, int p) {
  if (!tp || !tp->conn || p < 0 || p >= tp->conn->node_size || p == tp->conn->node_rank) return -1;
  return tp->conn->fd[VMMIPC__CTX_COLL - 1][p];
}

int vmmipc__tp_coll_fd(const vmmipc__tp_t *tp, int p) { return coll_fd(tp, p); }

int vmmipc__tp_hung_up(const vmmipc__tp_t *tp, int p) {
  if (!tp || !tp->conn || p < 0 || p >= tp->conn->node_size || p == tp->conn->node_rank) return 0;
  return tp->conn->meshed && coll_fd(tp, p) < 0;
}

vmmipc__tp_read_t vmmipc__tp_read_coll(vmmipc__tp_t *tp, int p, uint64_t epoch) {
  int fd = coll_fd(tp, p);
  int R = vmmipc__conn_rank(tp->conn, p);
  if (fd < 0) {
    vmmipc__error(VMMIPC_ERR_PEER, "the connection with rank %d is closed (%s)", R,
                  tp->conn->closed[p] ? tp->conn->closed[p] : "unknown reason");
    vmmipc__error_rank(R);
    return VMMIPC__TP_READ_GONE;
  }
  vmmipc__asm_t *a = &tp->rx[VMMIPC__CTX_COLL - 1][p];
  for (int turn = 0;; turn++) {
    if (turn == VMMIPC__TP_RECORDS_PER_TURN) return VMMIPC__TP_READ_MORE;
    /* A frame of the next collective: p had the verdict before this rank
     * (both come over MPI, apart from the socket). It stays queued for it.
     * Only what the peek saw is read: a frame that comes after a peek that
     * saw nothing may be such a frame. */
    uint64_t seq = 0;
    int kind = vmmipc__conn_peek(fd, &seq, NULL);
    VMMIPC__PEEKED(); /* tests send p's frame here */
    if (kind == -1) return VMMIPC__TP_READ_NOTHING;
    if ((kind == VMMIPC__KIND_DATA || kind == VMMIPC__KIND_ABORT) && seq > epoch) return VMMIPC__TP_READ_AHEAD;
    VMMIPC__RECORD_PAUSE();
    vmmipc__rec_t rec;
    int e = vmmipc__conn_recv(fd, tp->rbuf, tp->rbuf_cap, &rec);
    if (e == EAGAIN || e == EWOULDBLOCK) return VMMIPC__TP_READ_NOTHING;
    char why[400];
    if (e || vmmipc__rec_eof(&rec)) {
      snprintf(why, sizeof why, "rank %d hung up (%s)", R, e ? vmmipc__errno_name(e) : "end of file");
      vmmipc__tp_drop_peer(tp, p, why);
      vmmipc__error(VMMIPC_ERR_PEER, "%s; hint: rank %d has probably failed or destroyed its communicator", why, R);
      vmmipc__error_os(e);
      vmmipc__error_rank(R);
      return VMMIPC__TP_READ_GONE;
    }
    if (rec.ctrunc) {
      /* Fds cut short (RLIMIT_NOFILE) are this rank's shortage, not p's
       * fault: dropped with the rest of their message, as the exchange and
       * vmmipc__tp_drop_stale do; the connection stays. */
      uint64_t s = rec.len >= VMMIPC__FRAME_HEADER_BYTES ? vmmipc__get64(tp->rbuf + 32) : 0;
      tp->stale_fds += (uint64_t)rec.nfds;
      vmmipc__close_fds(rec.fds, rec.nfds);
      vmmipc__asm_skip(a, s, &tp->stale_fds);
      tp->stale_frames++;
      continue;
    }
    vmmipc__frame_expect_t want = {(uint32_t)p, (uint32_t)tp->conn->node_rank, tp->conn->comm_id,
                                   (uint16_t)VMMIPC__CTX_COLL};
    vmmipc__frame_t f;
    int bad = rec.truncated || rec.odd_cmsg;
    if (bad) snprintf(why, sizeof why, "a malformed record while this rank waited for the agreement");
    if (!bad && vmmipc__frame_decode(tp->rbuf, rec.len, rec.nfds, &want, &f, why, sizeof why) != 0) bad = 1;
    if (!bad && f.kind == VMMIPC__KIND_END) {
      vmmipc__close_fds(rec.fds, rec.nfds);
      vmmipc_result_t code = vmmipc__tp_end_error(tp, p, &f, tp->rbuf + VMMIPC__FRAME_HEADER_BYTES);
      return code == VMMIPC_ERR_ABORTED ? VMMIPC__TP_READ_ABORTED : VMMIPC__TP_READ_GONE;
    }
    if (!bad && f.kind == VMMIPC__KIND_VERDICT) { /* verdicts travel over MPI now: nothing to take */
      vmmipc__close_fds(rec.fds, rec.nfds);
      tp->stale_frames++;
      continue;
    }
    if (!bad && f.kind == VMMIPC__KIND_HELLO) {
      bad = 1;
      snprintf(why, sizeof why, "a HELLO frame after the connection was set up");
    }
    if (!bad) { /* what is left of this call or an earlier one: dropped with its fds */
      vmmipc__asm_rc_t rc = vmmipc__asm_feed(a, epoch + 1, epoch + 1, &f, tp->rbuf + VMMIPC__FRAME_HEADER_BYTES,
                                             rec.fds, rec.nfds, &tp->stale_fds, why, sizeof why);
      rec.nfds = 0; /* the assembler owns them now */
      if (rc == VMMIPC__ASM_STALE) {
        tp->stale_frames++;
        continue;
      }
      if (rc != VMMIPC__ASM_BAD) {
        vmmipc__asm_reset(a);
        snprintf(why, sizeof why, "a frame of the next collective before this agreement ended");
      }
      bad = 1;
    }
    vmmipc__close_fds(rec.fds, rec.nfds);
    char reason[480];
    snprintf(reason, sizeof reason, "rank %d broke the protocol: %s", R, why);
    vmmipc__tp_drop_peer(tp, p, reason);
    vmmipc__error(VMMIPC_ERR_INVALID_DESC, "receiving from rank %d: %s; the connection was closed", R, why);
    vmmipc__error_rank(R);
    return VMMIPC__TP_READ_GONE;
  }
}

int vmmipc__tp_end_first(const vmmipc__tp_t *tp, int p) {
  int fd = coll_fd(tp, p);
  uint32_t code = 0;
  int kind = fd >= 0 ? vmmipc__conn_peek(fd, NULL, &code) : -2;
  if (kind < 0) return kind;
  if (kind != VMMIPC__KIND_END) return 0;
  return code == VMMIPC_ERR_ABORTED ? VMMIPC_ERR_ABORTED : VMMIPC_ERR_PEER; /* a break's code may be any */
}

void vmmipc__tp_drop_stale(vmmipc__tp_t *tp, uint64_t epoch) {
  if (!tp || !tp->conn) return;
  vmmipc__error_saved_t keep;
  vmmipc__error_save(&keep);
  for (int p = 0; p < tp->conn->node_size; p++) {
    int fd = coll_fd(tp, p);
    if (fd < 0) continue;
    vmmipc__asm_t *a = &tp->rx[VMMIPC__CTX_COLL - 1][p];
    for (int k = 0; k < DROP_TURNS * VMMIPC__TP_RECORDS_PER_TURN; k++) {
      /* Only DATA and ABORT frames of this call or an earlier one. */
      uint64_t seq = 0;
      int kind = vmmipc__conn_peek(fd, &seq, NULL);
      if ((kind != VMMIPC__KIND_DATA && kind != VMMIPC__KIND_ABORT) || seq > epoch) break;
      VMMIPC__RECORD_PAUSE();
      vmmipc__rec_t rec;
      if (vmmipc__conn_recv(fd, tp->rbuf, tp->rbuf_cap, &rec) || vmmipc__rec_eof(&rec)) break;
      vmmipc__frame_expect_t want = {(uint32_t)p, (uint32_t)tp->conn->node_rank, tp->conn->comm_id,
                                     (uint16_t)VMMIPC__CTX_COLL};
      vmmipc__frame_t f;
      char why[400];
      if (rec.truncated || rec.odd_cmsg || rec.ctrunc ||
          vmmipc__frame_decode(tp->rbuf, rec.len, rec.nfds, &want, &f, why, sizeof why) != 0) {
        /* Dropped all the same: the next call would drop it as stale. */
        tp->stale_fds += (uint64_t)rec.nfds;
        vmmipc__close_fds(rec.fds, rec.nfds);
        tp->stale_frames++;
        continue;
      }
      /* Below lo: stale, its fds closed and counted (the assembler's own
       * half message of an earlier call goes too). */
      vmmipc__asm_rc_t rc = vmmipc__asm_feed(a, epoch + 1, epoch + 1, &f, tp->rbuf + VMMIPC__FRAME_HEADER_BYTES,
                                             rec.fds, rec.nfds, &tp->stale_fds, why, sizeof why);
      if (rc == VMMIPC__ASM_STALE) tp->stale_frames++;
    }
    /* A message of this call cut short (the rank failed while it arrived). */
    if (a->active && a->seq <= epoch) vmmipc__asm_drop(a, 0, &tp->stale_fds);
  }
  vmmipc__error_restore(&keep);
}

vmmipc_result_t vmmipc__tp_end_error(vmmipc__tp_t *tp, int p, const vmmipc__frame_t *f, const unsigned char *text) {
  int R = vmmipc__conn_rank(tp->conn, p);
  char why[VMMIPC__ABORT_MAX_BYTES + 160];
  vmmipc_result_t code = f->code == VMMIPC_ERR_ABORTED ? VMMIPC_ERR_ABORTED : VMMIPC_ERR_PEER;
  if (code == VMMIPC_ERR_ABORTED) {
    tp->aborted_by = p;
    snprintf(why, sizeof why, "rank %d aborted the communicator (vmmipc_comm_abort)", R);
  } else { /* it broke the comm on its own; its text says why, naming it */
    snprintf(why, sizeof why, "%.*s", (int)f->frame_bytes, (const char *)text);
  }
  vmmipc__tp_drop_peer(tp, p, why);
  vmmipc__error(code, "%s", why);
  vmmipc__error_rank(R);
  return code;
}

void vmmipc__tp_watch_abort(vmmipc__tp_t *tp, const int *flag) {
  if (tp) tp->aborted = flag;
}

int vmmipc__tp_aborted_by(const vmmipc__tp_t *tp) { return tp ? tp->aborted_by : -1; }

void vmmipc__tp_abort_all(vmmipc__tp_t *tp, uint32_t code, const char *text) {
  if (!tp || !tp->conn) return;
  vmmipc__conn_t *c = tp->conn;
  int n = c->node_size;
  size_t len = strnlen(text, VMMIPC__ABORT_MAX_BYTES);
  /* One budget for all: a wait per full connection added up to
   * 2 x (n - 1) x 100 ms. Without memory for the poll set, one try each. */
  char *todo = calloc(2 * (size_t)n, 1);
  struct pollfd *pfd = calloc(2 * (size_t)n, sizeof *pfd);
  if (!todo || !pfd) {
    free(todo);
    free(pfd);
    todo = NULL;
    pfd = NULL;
  }
  const int64_t deadline = vmmipc__now_ms() + (pfd ? TP_END_BUDGET_MS : 0);
  for (int i = 0; todo && i < 2 * n; i++) todo[i] = 1;
  for (;;) {
    nfds_t k = 0;
    for (int p = 0; p < n; p++)
      for (int ctx = VMMIPC__CTX_P2P; ctx <= VMMIPC__CTX_COLL; ctx++) {
        int fd = c->fd[ctx - 1][p];
        if (fd < 0 || (todo && !todo[2 * p + ctx - 1])) continue;
        vmmipc__frame_t f;
        memset(&f, 0, sizeof f);
        f.kind = VMMIPC__KIND_END;
        f.ctx = (uint16_t)ctx;
        f.code = code;
        f.sender = (uint32_t)c->node_rank;
        f.receiver = (uint32_t)p;
        f.comm_id = c->comm_id;
        f.total_bytes = f.frame_bytes = (uint32_t)len;
        unsigned char head[VMMIPC__FRAME_HEADER_BYTES];
        vmmipc__frame_encode(&f, head);
        int e = vmmipc__conn_send(fd, head, sizeof head, text, len, NULL, 0);
        if ((e == EAGAIN || e == EWOULDBLOCK) && pfd) {
          pfd[k].fd = fd;
          pfd[k].events = POLLOUT;
          pfd[k++].revents = 0;
          continue;
        }
        if (todo) todo[2 * p + ctx - 1] = 0; /* sent, or best effort: a peer that is gone needs no telling */
      }
    int64_t now = vmmipc__now_ms();
    if (!k || now >= deadline) break;
    poll(pfd, k, (int)(deadline - now));
  }
  free(todo);
  free(pfd);
}
