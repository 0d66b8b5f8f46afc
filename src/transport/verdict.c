/* What the agreement (comm/agree.c) needs of the node's sockets: the
 * verdict sent to a node peer as one VERDICT frame, the kernel-atomic cut
 * that decides whether a verdict came before a peer gave up, reading a
 * peer's collective connection while MPI is waited on (hang-ups and aborts
 * seen at once), and the END frames of vmmipc_comm_abort. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/le.h"
#include "transport/tp.h"
#include "transport/tp_priv.h"

/* Total time a verdict or an END frame may wait for room in a socket. */
#define TP_SEND_BUDGET_MS 100

static int coll_fd(const vmmipc__tp_t *tp, int p) {
  if (!tp || !tp->conn || p < 0 || p >= tp->conn->node_size || p == tp->conn->node_rank) return -1;
  return tp->conn->fd[VMMIPC__CTX_COLL - 1][p];
}

int vmmipc__tp_coll_fd(const vmmipc__tp_t *tp, int p) { return coll_fd(tp, p); }

void vmmipc__tp_keep_verdict(struct vmmipc__tp *tp, int p, const vmmipc__frame_t *f, const unsigned char *payload) {
  tp->verdict_have = 1;
  tp->verdict_from = p;
  tp->verdict_seq = f->seq;
  tp->verdict_len = f->frame_bytes;
  memcpy(tp->verdict, payload, f->frame_bytes);
}

int vmmipc__tp_has_verdict(const vmmipc__tp_t *tp, int p) { return tp && tp->verdict_have && tp->verdict_from == p; }

int vmmipc__tp_take_verdict(vmmipc__tp_t *tp, int p, uint64_t seq, void *buf, size_t cap, size_t *len) {
  if (!tp || !tp->verdict_have || tp->verdict_from != p) return 0;
  if (tp->verdict_seq != seq) { /* of an earlier agreement that this rank gave up */
    if (tp->verdict_seq < seq) tp->verdict_have = 0;
    return 0;
  }
  tp->verdict_have = 0;
  size_t n = tp->verdict_len < cap ? tp->verdict_len : cap;
  memcpy(buf, tp->verdict, n);
  *len = n;
  return 1;
}

/* One record sent within the budget: 0, or an errno value. */
static int send_bounded(int fd, const unsigned char *head, const void *payload, size_t len) {
  int64_t until = vmmipc__now_ms() + TP_SEND_BUDGET_MS;
  for (;;) {
    int e = vmmipc__conn_send(fd, head, VMMIPC__FRAME_HEADER_BYTES, payload, len, NULL, 0);
    if (e != EAGAIN && e != EWOULDBLOCK) return e;
    int64_t left = until - vmmipc__now_ms();
    if (left <= 0) return e;
    struct pollfd pfd = {fd, POLLOUT, 0};
    poll(&pfd, 1, (int)left);
  }
}

int vmmipc__tp_send_verdict(vmmipc__tp_t *tp, int p, uint64_t seq, uint32_t code, const void *bytes, size_t len) {
  int fd = coll_fd(tp, p);
  if (fd < 0) return ENOTCONN;
  if (len > VMMIPC__VERDICT_MAX_BYTES) return EMSGSIZE;
  vmmipc__frame_t f;
  memset(&f, 0, sizeof f);
  f.kind = VMMIPC__KIND_VERDICT;
  f.ctx = VMMIPC__CTX_COLL;
  f.code = code;
  f.sender = (uint32_t)tp->conn->node_rank;
  f.receiver = (uint32_t)p;
  f.comm_id = tp->conn->comm_id;
  f.seq = seq;
  f.total_bytes = f.frame_bytes = (uint32_t)len;
  unsigned char head[VMMIPC__FRAME_HEADER_BYTES];
  vmmipc__frame_encode(&f, head);
  return send_bounded(fd, head, bytes, len);
}

void vmmipc__tp_cut(vmmipc__tp_t *tp, int p) {
  int fd = coll_fd(tp, p);
  if (fd >= 0) shutdown(fd, SHUT_RD);
}

static vmmipc__tp_read_t read_coll(vmmipc__tp_t *tp, int p, uint64_t epoch, int after_cut);

vmmipc__tp_read_t vmmipc__tp_read_coll(vmmipc__tp_t *tp, int p, uint64_t epoch) { return read_coll(tp, p, epoch, 0); }

void vmmipc__tp_drain_cut(vmmipc__tp_t *tp, int p, uint64_t epoch) { read_coll(tp, p, epoch, 1); }

/* after_cut: this rank shut its reading side, so the end of what is queued
 * reads as an end of file, and the connection stays as it is. */
static vmmipc__tp_read_t read_coll(vmmipc__tp_t *tp, int p, uint64_t epoch, int after_cut) {
  int fd = coll_fd(tp, p);
  int R = vmmipc__conn_rank(tp->conn, p);
  if (fd < 0) {
    vmmipc__error(VMMIPC_ERR_PEER, "the connection with rank %d is closed (%s)", R,
                  tp->conn->closed[p] ? tp->conn->closed[p] : "unknown reason");
    return VMMIPC__TP_READ_GONE;
  }
  vmmipc__asm_t *a = &tp->rx[VMMIPC__CTX_COLL - 1][p];
  for (;;) {
    if (tp->verdict_have && tp->verdict_from == p) return VMMIPC__TP_READ_VERDICT; /* read no further */
    vmmipc__rec_t rec;
    int e = vmmipc__conn_recv(fd, tp->rbuf, tp->rbuf_cap, &rec);
    if (e == EAGAIN || e == EWOULDBLOCK) return VMMIPC__TP_READ_NOTHING;
    char why[400];
    if (after_cut && !e && rec.len == 0) return VMMIPC__TP_READ_NOTHING;
    if (e || rec.len == 0) {
      vmmipc__close_fds(rec.fds, rec.nfds);
      snprintf(why, sizeof why, "rank %d hung up (%s)", R, e ? vmmipc__errno_name(e) : "end of file");
      vmmipc__conn_drop(tp->conn, p, why);
      vmmipc__error(VMMIPC_ERR_PEER, "%s; hint: rank %d has probably failed or destroyed its communicator", why, R);
      return VMMIPC__TP_READ_GONE;
    }
    vmmipc__frame_expect_t want = {(uint32_t)p, (uint32_t)tp->conn->node_rank, tp->conn->comm_id,
                                   (uint16_t)VMMIPC__CTX_COLL};
    vmmipc__frame_t f;
    int bad = rec.truncated || rec.odd_cmsg || rec.ctrunc;
    if (bad) snprintf(why, sizeof why, "a malformed record while this rank waited for the agreement");
    if (!bad && vmmipc__frame_decode(tp->rbuf, rec.len, rec.nfds, &want, &f, why, sizeof why) != 0) bad = 1;
    if (!bad && f.kind == VMMIPC__KIND_END) {
      vmmipc__close_fds(rec.fds, rec.nfds);
      tp->aborted_by = p;
      snprintf(why, sizeof why, "rank %d aborted the communicator (vmmipc_comm_abort)", R);
      vmmipc__conn_drop(tp->conn, p, why);
      vmmipc__error(VMMIPC_ERR_ABORTED, "%s", why);
      return VMMIPC__TP_READ_ABORTED;
    }
    if (!bad && f.kind == VMMIPC__KIND_VERDICT) {
      vmmipc__tp_keep_verdict(tp, p, &f, tp->rbuf + VMMIPC__FRAME_HEADER_BYTES);
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
    vmmipc__conn_drop(tp->conn, p, reason);
    vmmipc__error(VMMIPC_ERR_INVALID_DESC, "receiving from rank %d: %s; the connection was closed", R, why);
    return VMMIPC__TP_READ_GONE;
  }
}

void vmmipc__tp_watch_abort(vmmipc__tp_t *tp, const int *flag) {
  if (tp) tp->aborted = flag;
}

int vmmipc__tp_aborted_by(const vmmipc__tp_t *tp) { return tp ? tp->aborted_by : -1; }

void vmmipc__tp_abort_all(vmmipc__tp_t *tp, uint32_t code, const char *text) {
  if (!tp || !tp->conn) return;
  vmmipc__conn_t *c = tp->conn;
  size_t len = strnlen(text, VMMIPC__ABORT_MAX_BYTES);
  for (int p = 0; p < c->node_size; p++)
    for (int ctx = VMMIPC__CTX_P2P; ctx <= VMMIPC__CTX_COLL; ctx++) {
      int fd = c->fd[ctx - 1][p];
      if (fd < 0) continue;
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
      send_bounded(fd, head, text, len); /* best effort: a peer that is gone needs no telling */
    }
}
