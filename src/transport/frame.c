/* Framing: the frame header, sendmsg/recvmsg with SCM_RIGHTS batches, and
 * the per-message progress of sends and receives (with every check a
 * receiver makes before it trusts a frame). */
#include "transport/tp_internal.h"

#include "common/host.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/uio.h>
#include <unistd.h>

/* ---- header ---------------------------------------------------------------- */

static void put16(unsigned char *p, uint16_t v) {
  p[0] = (unsigned char)v;
  p[1] = (unsigned char)(v >> 8);
}
static void put32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static void put64(unsigned char *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint16_t get16(const unsigned char *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static uint32_t get32(const unsigned char *p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}
static uint64_t get64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}

void vmmipc__tp_hdr_encode(const vmmipc__tp_hdr_t *h, unsigned char out[VMMIPC__TP_HEADER_BYTES]) {
  put32(out + 0, h->magic);
  put16(out + 4, h->version);
  put16(out + 6, h->kind);
  put32(out + 8, h->sender);
  put32(out + 12, h->receiver);
  put64(out + 16, h->seq);
  put64(out + 24, h->total_bytes);
  put32(out + 32, h->total_fds);
  put32(out + 36, h->index);
  put32(out + 40, h->frame_bytes);
  put32(out + 44, h->frame_fds);
}

void vmmipc__tp_hdr_decode(const unsigned char in[VMMIPC__TP_HEADER_BYTES], vmmipc__tp_hdr_t *h) {
  h->magic = get32(in + 0);
  h->version = get16(in + 4);
  h->kind = get16(in + 6);
  h->sender = get32(in + 8);
  h->receiver = get32(in + 12);
  h->seq = get64(in + 16);
  h->total_bytes = get64(in + 24);
  h->total_fds = get32(in + 32);
  h->index = get32(in + 36);
  h->frame_bytes = get32(in + 40);
  h->frame_fds = get32(in + 44);
}

/* ---- one frame ---------------------------------------------------------------- */

typedef union {
  struct cmsghdr align;
  char buf[CMSG_SPACE(sizeof(int) * VMMIPC__TP_MAX_FDS_PER_MSG)];
} tp_cmsg_buf_t;

void vmmipc__tp_close_fds(const int *fds, int n) {
  int saved = errno;
  for (int i = 0; i < n; i++)
    if (fds[i] >= 0) close(fds[i]);
  errno = saved;
}

int vmmipc__tp_frame_send(int sock, const vmmipc__tp_hdr_t *h, const void *payload, const int *fds) {
  if (h->frame_fds > VMMIPC__TP_MAX_FDS_PER_MSG || h->frame_bytes > VMMIPC__TP_FRAME_MAX_BYTES ||
      (h->frame_bytes && !payload) || (h->frame_fds && !fds))
    return EINVAL;
  unsigned char head[VMMIPC__TP_HEADER_BYTES];
  vmmipc__tp_hdr_encode(h, head);
  struct iovec iov[2];
  iov[0].iov_base = head;
  iov[0].iov_len = sizeof head;
  iov[1].iov_base = (void *)payload;
  iov[1].iov_len = h->frame_bytes;
  struct msghdr m;
  memset(&m, 0, sizeof m);
  m.msg_iov = iov;
  m.msg_iovlen = h->frame_bytes ? 2 : 1;
  tp_cmsg_buf_t cm;
  if (h->frame_fds) {
    memset(&cm, 0, sizeof cm);
    m.msg_control = cm.buf;
    m.msg_controllen = CMSG_SPACE(sizeof(int) * h->frame_fds);
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * h->frame_fds);
    memcpy(CMSG_DATA(c), fds, sizeof(int) * h->frame_fds);
  }
  for (;;) {
    /* SOCK_SEQPACKET: the whole record goes, or nothing (EAGAIN). */
    ssize_t r = sendmsg(sock, &m, MSG_NOSIGNAL);
    if (r >= 0) return (size_t)r == sizeof head + h->frame_bytes ? 0 : EMSGSIZE;
    if (errno != EINTR) return errno;
  }
}

int vmmipc__tp_frame_recv(int sock, void *buf, size_t cap, vmmipc__tp_rframe_t *rf) {
  rf->len = 0;
  rf->flags = 0;
  rf->odd_cmsg = 0;
  rf->nfds = 0;
  tp_cmsg_buf_t cm;
  struct iovec iov;
  iov.iov_base = buf;
  iov.iov_len = cap;
  struct msghdr m;
  memset(&m, 0, sizeof m);
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  m.msg_control = cm.buf;
  m.msg_controllen = sizeof cm.buf;
  ssize_t r;
  do r = recvmsg(sock, &m, MSG_CMSG_CLOEXEC);
  while (r < 0 && errno == EINTR);
  if (r < 0) return errno;
  /* Take ownership of every fd that arrived, whatever else is wrong. */
  for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS && c->cmsg_len >= CMSG_LEN(0)) {
      size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      const unsigned char *data = CMSG_DATA(c);
      for (size_t i = 0; i < n; i++) {
        int fd;
        memcpy(&fd, data + i * sizeof(int), sizeof fd);
        if (rf->nfds < VMMIPC__TP_MAX_FDS_PER_MSG) {
          rf->fds[rf->nfds++] = fd;
        } else {
          close(fd);
          rf->odd_cmsg = 1;
        }
      }
    } else {
      rf->odd_cmsg = 1;
    }
  }
  rf->len = (size_t)r;
  rf->flags = m.msg_flags;
  return 0;
}

/* ---- sending a message -------------------------------------------------------- */

static int tp_peer_gone_errno(int e) {
  return e == EPIPE || e == ECONNRESET || e == ENOTCONN || e == ECONNREFUSED;
}

vmmipc_result_t vmmipc__tp_send_progress(vmmipc__tp_t *tp, vmmipc__tp_sop_t *op) {
  const vmmipc__tp_send_t *m = op->msg;
  int p = m->peer, R = vmmipc__tp_rank(tp, p);
  vmmipc__tp_out_t *o = &tp->out[p];
  if (op->done) return VMMIPC_SUCCESS;
  if (o->broken)
    return vmmipc__error(VMMIPC_ERR_PEER,
                         "sending to rank %d: the connection to rank %d was given up after an earlier failure (a "
                         "message to it was cut short, or this rank sent it an ABORT); hint: look at the first "
                         "error this rank reported: the communicator cannot be used after it",
                         R, R);
  if (o->fd < 0 || o->connecting) {
    vmmipc_result_t rc = vmmipc__tp_connect(tp, p);
    if (rc != VMMIPC_SUCCESS) return rc;
    if (o->fd < 0 || o->connecting) return VMMIPC_SUCCESS;
  }
  for (;;) {
    size_t left_bytes = m->num_bytes - op->bytes_done;
    int left_fds = m->num_fds - op->fds_done;
    vmmipc__tp_hdr_t h;
    memset(&h, 0, sizeof h);
    h.magic = VMMIPC__TP_MAGIC;
    h.version = VMMIPC__TP_VERSION;
    h.kind = VMMIPC__TP_KIND_DATA;
    h.sender = (uint32_t)tp->node_rank;
    h.receiver = (uint32_t)p;
    h.seq = o->seq;
    h.total_bytes = m->num_bytes;
    h.total_fds = (uint32_t)m->num_fds;
    h.index = op->frame;
    h.frame_bytes = (uint32_t)(left_bytes < VMMIPC__TP_FRAME_MAX_BYTES ? left_bytes : VMMIPC__TP_FRAME_MAX_BYTES);
    h.frame_fds = (uint32_t)(left_fds < VMMIPC__TP_MAX_FDS_PER_MSG ? left_fds : VMMIPC__TP_MAX_FDS_PER_MSG);
    int e = vmmipc__tp_frame_send(o->fd, &h, h.frame_bytes ? (const unsigned char *)m->bytes + op->bytes_done : NULL,
                                  h.frame_fds ? m->fds + op->fds_done : NULL);
    if (e == EAGAIN || e == EWOULDBLOCK) return VMMIPC_SUCCESS; /* wait for POLLOUT */
    if (e == ETOOMANYREFS) { /* too many fds in flight for this user: wait for the receiver */
      op->backoff = 1;
      tp->retry_soon = 1;
      return VMMIPC_SUCCESS;
    }
    if (e) {
      if (op->frame > 0) o->broken = 1; /* the receiver holds half a message */
      if (tp_peer_gone_errno(e)) {
        char hint[200];
        snprintf(hint, sizeof hint,
                 "rank %d closed its connection: it has probably failed or destroyed its communicator; check its "
                 "output",
                 R);
        return vmmipc__tp_os_error(VMMIPC_ERR_PEER, e, hint,
                                   "sending to rank %d (message %llu, frame %u; %zu bytes and %d fds in all)", R,
                                   (unsigned long long)o->seq, op->frame, m->num_bytes, m->num_fds);
      }
      const char *hint = NULL;
      if (e == EBADF) hint = "one of the fds to send was closed while the exchange ran";
      else if (e == ENOBUFS || e == ENOMEM) hint = "the kernel is short of socket memory; retry later";
      else if (e == EMSGSIZE) hint = "the socket send buffer is smaller than one frame (net.core.wmem_default)";
      return vmmipc__tp_os_error(VMMIPC_ERR_SYSTEM, e, hint,
                                 "sending to rank %d (message %llu, frame %u; %zu bytes and %d fds in all)", R,
                                 (unsigned long long)o->seq, op->frame, m->num_bytes, m->num_fds);
    }
    op->bytes_done += h.frame_bytes;
    op->fds_done += (int)h.frame_fds;
    op->frame++;
    if (op->bytes_done == m->num_bytes && op->fds_done == m->num_fds) {
      op->done = 1;
      o->seq++;
      return VMMIPC_SUCCESS;
    }
  }
}

int vmmipc__tp_send_abort_frame(vmmipc__tp_t *tp, int p, const char *msg) {
  size_t n = strlen(msg);
  if (n > VMMIPC__TP_ABORT_MAX_BYTES) n = VMMIPC__TP_ABORT_MAX_BYTES;
  vmmipc__tp_hdr_t h;
  memset(&h, 0, sizeof h);
  h.magic = VMMIPC__TP_MAGIC;
  h.version = VMMIPC__TP_VERSION;
  h.kind = VMMIPC__TP_KIND_ABORT;
  h.sender = (uint32_t)tp->node_rank;
  h.receiver = (uint32_t)p;
  h.seq = tp->out[p].seq;
  h.total_bytes = n;
  h.frame_bytes = (uint32_t)n;
  return vmmipc__tp_frame_send(tp->out[p].fd, &h, n ? msg : NULL, NULL);
}

/* ---- receiving a message ------------------------------------------------------ */

/* Rejects the frame just read for op: releases its fds, drops the
 * connection (its position in the stream is lost) and reports
 * VMMIPC_ERR_INVALID_DESC naming the peer. The fds already gathered in op
 * are closed by the exchange's failure path. */
static vmmipc_result_t tp_bad_frame(vmmipc__tp_t *tp, vmmipc__tp_rop_t *op, vmmipc__tp_rframe_t *rf,
                                    const char *hint, const char *fmt, ...) VMMIPC__PRINTF(5, 6);
static vmmipc_result_t tp_bad_frame(vmmipc__tp_t *tp, vmmipc__tp_rop_t *op, vmmipc__tp_rframe_t *rf,
                                    const char *hint, const char *fmt, ...) {
  int p = op->slot->peer, R = vmmipc__tp_rank(tp, p);
  char why[700];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  vmmipc__tp_close_fds(rf->fds, rf->nfds);
  rf->nfds = 0;
  unsigned long long seq = (unsigned long long)tp->in[p].seq;
  vmmipc__tp_drop_in(tp, p);
  return vmmipc__error(VMMIPC_ERR_INVALID_DESC,
                       "receiving from rank %d (message %llu, frame %u): %s; the fds received for this message were "
                       "closed and the connection from rank %d dropped; hint: %s",
                       R, seq, op->frame, why, R,
                       hint ? hint
                            : "all ranks must run the same vmmipc build, and nothing else may write to these sockets");
}

vmmipc_result_t vmmipc__tp_recv_progress(vmmipc__tp_t *tp, vmmipc__tp_rop_t *op) {
  int p = op->slot->peer, R = vmmipc__tp_rank(tp, p);
  vmmipc__tp_in_t *in = &tp->in[p];
  if (op->done) return VMMIPC_SUCCESS;
  if (in->broken)
    return vmmipc__error(VMMIPC_ERR_PEER,
                         "receiving from rank %d: the connection from rank %d was dropped after an earlier failure "
                         "(a bad or cut-short message, or an ABORT); hint: look at the first error this rank "
                         "reported: the communicator cannot be used after it",
                         R, R);
  if (in->fd < 0) return VMMIPC_SUCCESS; /* not connected yet: wait on the listener */
  vmmipc__tp_rframe_t rf;
  while (!op->done) {
    int e = vmmipc__tp_frame_recv(in->fd, tp->rbuf, tp->rbuf_cap, &rf);
    if (e == EAGAIN || e == EWOULDBLOCK) return VMMIPC_SUCCESS;
    if (e) {
      unsigned long long seq = (unsigned long long)in->seq;
      vmmipc__tp_drop_in(tp, p);
      if (tp_peer_gone_errno(e)) {
        char hint[160];
        snprintf(hint, sizeof hint, "rank %d has probably failed; check its output", R);
        return vmmipc__tp_os_error(VMMIPC_ERR_PEER, e, hint,
                                   "receiving from rank %d (message %llu, frame %u): rank %d hung up", R, seq,
                                   op->frame, R);
      }
      return vmmipc__tp_os_error(VMMIPC_ERR_SYSTEM, e, NULL, "receiving from rank %d (message %llu, frame %u)", R,
                                 seq, op->frame);
    }
    if (rf.len == 0) {
      unsigned long long seq = (unsigned long long)in->seq;
      vmmipc__tp_close_fds(rf.fds, rf.nfds);
      vmmipc__tp_drop_in(tp, p);
      return vmmipc__error(VMMIPC_ERR_PEER,
                           "receiving from rank %d (message %llu): rank %d hung up (end of file after %u frame(s) of "
                           "the message); hint: rank %d has probably failed or destroyed its communicator; check its "
                           "output",
                           R, seq, R, op->frame, R);
    }
    vmmipc__tp_hdr_t h;
    memset(&h, 0, sizeof h);
    if (rf.len >= VMMIPC__TP_HEADER_BYTES) vmmipc__tp_hdr_decode(tp->rbuf, &h);
    if (rf.flags & MSG_CTRUNC) {
      struct rlimit rl;
      long lim = getrlimit(RLIMIT_NOFILE, &rl) == 0 ? (long)rl.rlim_cur : -1;
      int got = rf.nfds;
      vmmipc__tp_close_fds(rf.fds, rf.nfds);
      rf.nfds = 0;
      int open_now = vmmipc__fd_count();
      return tp_bad_frame(tp, op, &rf,
                          "raise the open-file limit (ulimit -n): every imported chunk holds one fd until it is "
                          "mapped",
                          "the fds of the frame were cut short (MSG_CTRUNC: %d of %u arrived, and were closed): this "
                          "process has %d fds open with a limit of %ld (RLIMIT_NOFILE)",
                          got, (unsigned)h.frame_fds, open_now, lim);
    }
    if (rf.flags & MSG_TRUNC)
      return tp_bad_frame(tp, op, &rf, NULL, "the frame is longer than %zu bytes (MSG_TRUNC)", tp->rbuf_cap - 1);
    if (rf.odd_cmsg) return tp_bad_frame(tp, op, &rf, NULL, "the frame carries a control message other than SCM_RIGHTS");
    if (rf.len < VMMIPC__TP_HEADER_BYTES)
      return tp_bad_frame(tp, op, &rf, NULL, "short frame: %zu bytes, less than the %d-byte header", rf.len,
                          VMMIPC__TP_HEADER_BYTES);
    if (h.magic != VMMIPC__TP_MAGIC)
      return tp_bad_frame(tp, op, &rf, NULL, "bad magic 0x%08x (expected 0x%08x)", (unsigned)h.magic,
                          (unsigned)VMMIPC__TP_MAGIC);
    if (h.version != VMMIPC__TP_VERSION)
      return tp_bad_frame(tp, op, &rf, NULL, "frame version %u, this build speaks version %u", (unsigned)h.version,
                          (unsigned)VMMIPC__TP_VERSION);
    if (h.sender != (uint32_t)p) {
      tp->refused++;
      snprintf(tp->last_refusal, sizeof tp->last_refusal,
               "the connection of rank %d (pid %d) sent a frame naming node rank %u as its sender", R,
               (int)tp->pids[p], (unsigned)h.sender);
      return tp_bad_frame(tp, op, &rf, NULL,
                          "the frame names node rank %u as its sender, but the connection belongs to pid %d (node "
                          "rank %d); connection refused",
                          (unsigned)h.sender, (int)tp->pids[p], p);
    }
    if (h.receiver != (uint32_t)tp->node_rank)
      return tp_bad_frame(tp, op, &rf, NULL, "the frame is addressed to node rank %u, not to this one (%d)",
                          (unsigned)h.receiver, tp->node_rank);
    if (h.kind == VMMIPC__TP_KIND_ABORT) {
      char text[VMMIPC__TP_ABORT_MAX_BYTES + 1];
      size_t n = rf.len - VMMIPC__TP_HEADER_BYTES;
      if (n > h.frame_bytes) n = h.frame_bytes;
      if (n > VMMIPC__TP_ABORT_MAX_BYTES) n = VMMIPC__TP_ABORT_MAX_BYTES;
      for (size_t i = 0; i < n; i++) {
        unsigned char c = tp->rbuf[VMMIPC__TP_HEADER_BYTES + i];
        text[i] = (c < 0x20 || c == 0x7f) ? '?' : (char)c;
      }
      text[n] = '\0';
      vmmipc__tp_close_fds(rf.fds, rf.nfds);
      vmmipc__tp_drop_in(tp, p);
      return vmmipc__error(VMMIPC_ERR_PEER, "rank %d gave up: %s", R, n ? text : "(no message)");
    }
    if (h.kind != VMMIPC__TP_KIND_DATA)
      return tp_bad_frame(tp, op, &rf, NULL, "unknown frame kind %u", (unsigned)h.kind);
    if (h.seq != in->seq)
      return tp_bad_frame(tp, op, &rf, NULL, "the frame belongs to message %llu, expected message %llu",
                          (unsigned long long)h.seq, (unsigned long long)in->seq);
    if (h.index != op->frame)
      return tp_bad_frame(tp, op, &rf, NULL, "frame %u arrived where frame %u was expected", (unsigned)h.index, op->frame);
    if ((size_t)h.frame_bytes != rf.len - VMMIPC__TP_HEADER_BYTES)
      return tp_bad_frame(tp, op, &rf, NULL, "the header announces %u payload bytes but the frame holds %zu",
                          (unsigned)h.frame_bytes, rf.len - VMMIPC__TP_HEADER_BYTES);
    if (h.frame_fds != (uint32_t)rf.nfds)
      return tp_bad_frame(tp, op, &rf, NULL, "the header announces %u fds but %d arrived", (unsigned)h.frame_fds, rf.nfds);
    if (h.frame_bytes > VMMIPC__TP_FRAME_MAX_BYTES)
      return tp_bad_frame(tp, op, &rf, NULL, "the frame holds %u payload bytes, more than the %d allowed",
                          (unsigned)h.frame_bytes, VMMIPC__TP_FRAME_MAX_BYTES);
    if (h.index == 0) {
      if (h.total_bytes > VMMIPC__TP_MAX_MSG_BYTES || h.total_fds > VMMIPC__TP_MAX_MSG_FDS)
        return tp_bad_frame(tp, op, &rf, NULL,
                            "the message announces %llu bytes and %u fds, more than the limits (%llu bytes, %d fds)",
                            (unsigned long long)h.total_bytes, (unsigned)h.total_fds,
                            (unsigned long long)VMMIPC__TP_MAX_MSG_BYTES, VMMIPC__TP_MAX_MSG_FDS);
      if (h.total_bytes) op->bytes = malloc((size_t)h.total_bytes);
      if (h.total_fds) op->fds = malloc(h.total_fds * sizeof(int));
      if ((h.total_bytes && !op->bytes) || (h.total_fds && !op->fds)) {
        vmmipc__tp_close_fds(rf.fds, rf.nfds);
        vmmipc__tp_drop_in(tp, p);
        return vmmipc__error(VMMIPC_ERR_NO_MEMORY,
                             "receiving from rank %d: out of host memory for a message of %llu bytes and %u fds", R,
                             (unsigned long long)h.total_bytes, (unsigned)h.total_fds);
      }
      op->total_bytes = h.total_bytes;
      op->total_fds = h.total_fds;
      op->started = 1;
    } else if (h.total_bytes != op->total_bytes || h.total_fds != op->total_fds) {
      return tp_bad_frame(tp, op, &rf, NULL,
                          "the frame announces %llu bytes and %u fds in all, frame 0 announced %llu bytes and %u fds",
                          (unsigned long long)h.total_bytes, (unsigned)h.total_fds,
                          (unsigned long long)op->total_bytes, (unsigned)op->total_fds);
    }
    if (h.frame_bytes > op->total_bytes - op->bytes_done || h.frame_fds > op->total_fds - (uint32_t)op->fds_done)
      return tp_bad_frame(tp, op, &rf, NULL,
                          "the frame (%u bytes, %u fds) overruns the message (%zu of %llu bytes and %d of %u fds "
                          "already received)",
                          (unsigned)h.frame_bytes, (unsigned)h.frame_fds, op->bytes_done,
                          (unsigned long long)op->total_bytes, op->fds_done, (unsigned)op->total_fds);
    if (h.frame_bytes == 0 && h.frame_fds == 0 && (op->total_bytes || op->total_fds))
      return tp_bad_frame(tp, op, &rf, NULL, "empty frame in a message that is not empty");
    if (h.frame_bytes) memcpy(op->bytes + op->bytes_done, tp->rbuf + VMMIPC__TP_HEADER_BYTES, h.frame_bytes);
    if (h.frame_fds) memcpy(op->fds + op->fds_done, rf.fds, h.frame_fds * sizeof(int));
    op->bytes_done += h.frame_bytes;
    op->fds_done += (int)h.frame_fds;
    op->frame++;
    if (op->bytes_done == op->total_bytes && (uint32_t)op->fds_done == op->total_fds) {
      op->done = 1;
      in->seq++;
    }
  }
  return VMMIPC_SUCCESS;
}
