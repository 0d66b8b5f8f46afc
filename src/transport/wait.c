/* Bounded waiting: the exchange loop (one deadline, poll() in slices, the
 * liveness of pending peers checked in every slice) and the bounded ABORT. */
#include "transport/tp_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int64_t vmmipc__tp_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int vmmipc__tp_pid_gone(pid_t pid) {
  if (pid <= 0) return 0;
  if (kill(pid, 0) != 0 && errno == ESRCH) return 1;
  /* kill() succeeds on a zombie (dead, not yet reaped by its parent): look at
   * the state in /proc/<pid>/stat, the field after the last ')'. */
  char path[64], buf[512];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT || errno == ESRCH;
  ssize_t n;
  do n = read(fd, buf, sizeof buf - 1);
  while (n < 0 && errno == EINTR);
  close(fd);
  if (n <= 0) return n == 0; /* an empty stat: the process is being torn down */
  buf[n] = '\0';
  const char *rp = strrchr(buf, ')');
  if (!rp || rp[1] != ' ') return 0;
  return rp[2] == 'Z' || rp[2] == 'X' || rp[2] == 'x';
}

/* ---- the exchange ------------------------------------------------------------ */

static vmmipc_result_t tp_progress(vmmipc__tp_t *tp, vmmipc__tp_sop_t *sops, int ns, vmmipc__tp_rop_t *rops, int nr,
                                   int *pending) {
  vmmipc_result_t rc = vmmipc__tp_accept_all(tp);
  if (rc != VMMIPC_SUCCESS) return rc;
  int left = 0;
  for (int i = 0; i < ns; i++) {
    if (sops[i].done) continue;
    sops[i].backoff = 0;
    if ((rc = vmmipc__tp_send_progress(tp, &sops[i])) != VMMIPC_SUCCESS) return rc;
    if (!sops[i].done) left++;
  }
  for (int i = 0; i < nr; i++) {
    if (rops[i].done) continue;
    if ((rc = vmmipc__tp_recv_progress(tp, &rops[i])) != VMMIPC_SUCCESS) return rc;
    if (!rops[i].done) left++;
  }
  *pending = left;
  return VMMIPC_SUCCESS;
}

/* Appends to buf (cap bytes, NUL-terminated) what each pending op waits for. */
static void tp_describe_pending(const vmmipc__tp_t *tp, const vmmipc__tp_sop_t *sops, int ns,
                                const vmmipc__tp_rop_t *rops, int nr, char *buf, size_t cap) {
  size_t len = strlen(buf);
  int shown = 0;
#define TP_APPEND(...)                                                  \
  do {                                                                  \
    if (len < cap) {                                                    \
      int w_ = snprintf(buf + len, cap - len, __VA_ARGS__);             \
      if (w_ > 0) len += (size_t)w_ < cap - len ? (size_t)w_ : cap - len - 1; \
    }                                                                   \
  } while (0)
  for (int i = 0; i < nr; i++) {
    const vmmipc__tp_rop_t *o = &rops[i];
    if (o->done) continue;
    int p = o->slot->peer, R = vmmipc__tp_rank(tp, p);
    if (shown++ == 8) { TP_APPEND(", ..."); break; }
    if (tp->in[p].fd < 0)
      TP_APPEND("%srank %d (receive: it has not connected to this rank)", shown > 1 ? ", " : "", R);
    else if (!o->started)
      TP_APPEND("%srank %d (receive: nothing of the message arrived)", shown > 1 ? ", " : "", R);
    else
      TP_APPEND("%srank %d (receive: %zu of %llu bytes and %d of %u fds arrived)", shown > 1 ? ", " : "", R,
                o->bytes_done, (unsigned long long)o->total_bytes, o->fds_done, (unsigned)o->total_fds);
  }
  for (int i = 0; i < ns && shown <= 8; i++) {
    const vmmipc__tp_sop_t *o = &sops[i];
    if (o->done) continue;
    int p = o->msg->peer, R = vmmipc__tp_rank(tp, p);
    if (shown++ == 8) { TP_APPEND(", ..."); break; }
    if (tp->out[p].fd < 0 || tp->out[p].connecting)
      TP_APPEND("%srank %d (send: could not connect yet)", shown > 1 ? ", " : "", R);
    else
      TP_APPEND("%srank %d (send: %zu of %zu bytes and %d of %d fds taken)", shown > 1 ? ", " : "", R,
                o->bytes_done, o->msg->num_bytes, o->fds_done, o->msg->num_fds);
  }
#undef TP_APPEND
}

static vmmipc_result_t tp_timeout_error(const vmmipc__tp_t *tp, const vmmipc__tp_sop_t *sops, int ns,
                                        const vmmipc__tp_rop_t *rops, int nr) {
  char pending[600] = "";
  tp_describe_pending(tp, sops, ns, rops, nr, pending, sizeof pending);
  char refused[240] = "";
  if (tp->refused)
    snprintf(refused, sizeof refused, "; %d connection(s) were refused by their credentials or contents (last: %s)",
             tp->refused, tp->last_refusal);
  return vmmipc__error(VMMIPC_ERR_TIMEOUT,
                       "transport exchange on rank %d timed out after %d ms waiting for %s%s; hint: raise "
                       "vmmipc_config_t.timeout_ms or VMMIPC_TIMEOUT_MS if the peers are just slow, or check that "
                       "rank: is it alive, and in the matching call?",
                       vmmipc__tp_rank(tp, tp->node_rank), tp->timeout_ms, pending, refused);
}

static int tp_pending_peer(const vmmipc__tp_sop_t *sops, int ns, const vmmipc__tp_rop_t *rops, int nr, int p,
                           const char **what) {
  for (int i = 0; i < nr; i++)
    if (!rops[i].done && rops[i].slot->peer == p) {
      *what = rops[i].started ? "receiving a message from it (part of it had arrived)"
                              : "receiving a message from it";
      return 1;
    }
  for (int i = 0; i < ns; i++)
    if (!sops[i].done && sops[i].msg->peer == p) {
      *what = "sending a message to it";
      return 1;
    }
  return 0;
}

/* Checks that the arguments describe an exchange this tp can carry out. */
static vmmipc_result_t tp_check_args(vmmipc__tp_t *tp, const vmmipc__tp_send_t *sends, int num_sends,
                                     const vmmipc__tp_recv_t *recvs, int num_recvs) {
  if (!tp->have_peers)
    return vmmipc__error(VMMIPC_ERR_INVALID_ARG,
                         "vmmipc__tp_exchange: vmmipc__tp_set_peers was not called: the peers' pids are unknown");
  char *seen = calloc((size_t)tp->node_size * 2, 1);
  if (!seen) return vmmipc__error(VMMIPC_ERR_NO_MEMORY, "vmmipc__tp_exchange: out of host memory");
  vmmipc_result_t rc = VMMIPC_SUCCESS;
  for (int i = 0; i < num_sends && rc == VMMIPC_SUCCESS; i++) {
    const vmmipc__tp_send_t *s = &sends[i];
    if (s->peer < 0 || s->peer >= tp->node_size)
      rc = vmmipc__error(VMMIPC_ERR_INVALID_ARG, "vmmipc__tp_exchange: send %d goes to node rank %d, not in [0, %d)",
                         i, s->peer, tp->node_size);
    else if (seen[s->peer]++)
      rc = vmmipc__error(VMMIPC_ERR_INVALID_ARG,
                         "vmmipc__tp_exchange: two sends to rank %d in one exchange (at most one per peer)",
                         vmmipc__tp_rank(tp, s->peer));
    else if ((s->num_bytes && !s->bytes) || s->num_fds < 0 || (s->num_fds && !s->fds))
      rc = vmmipc__error(VMMIPC_ERR_INVALID_ARG, "vmmipc__tp_exchange: send %d to rank %d has NULL bytes or fds",
                         i, vmmipc__tp_rank(tp, s->peer));
    else if ((uint64_t)s->num_bytes > VMMIPC__TP_MAX_MSG_BYTES || s->num_fds > VMMIPC__TP_MAX_MSG_FDS)
      rc = vmmipc__error(VMMIPC_ERR_INVALID_ARG,
                         "vmmipc__tp_exchange: the message to rank %d (%zu bytes, %d fds) exceeds the transport's "
                         "limits (%llu bytes, %d fds)",
                         vmmipc__tp_rank(tp, s->peer), s->num_bytes, s->num_fds,
                         (unsigned long long)VMMIPC__TP_MAX_MSG_BYTES, VMMIPC__TP_MAX_MSG_FDS);
    else
      for (int f = 0; f < s->num_fds; f++)
        if (s->fds[f] < 0 || fcntl(s->fds[f], F_GETFD) < 0) {
          rc = vmmipc__error(VMMIPC_ERR_INVALID_ARG,
                             "vmmipc__tp_exchange: fd %d (number %d of %d) of the message to rank %d is not open",
                             s->fds[f], f, s->num_fds, vmmipc__tp_rank(tp, s->peer));
          break;
        }
  }
  for (int i = 0; i < num_recvs && rc == VMMIPC_SUCCESS; i++) {
    int p = recvs[i].peer;
    if (p < 0 || p >= tp->node_size)
      rc = vmmipc__error(VMMIPC_ERR_INVALID_ARG,
                         "vmmipc__tp_exchange: receive %d comes from node rank %d, not in [0, %d)", i, p,
                         tp->node_size);
    else if (seen[tp->node_size + p]++)
      rc = vmmipc__error(VMMIPC_ERR_INVALID_ARG,
                         "vmmipc__tp_exchange: two receives from rank %d in one exchange (at most one per peer)",
                         vmmipc__tp_rank(tp, p));
  }
  free(seen);
  return rc;
}

vmmipc_result_t vmmipc__tp_exchange(vmmipc__tp_t *tp, const vmmipc__tp_send_t *sends, int num_sends,
                                    vmmipc__tp_recv_t *recvs, int num_recvs) {
  if (!tp) return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "vmmipc__tp_exchange: tp is NULL");
  if (num_sends < 0 || num_recvs < 0 || (num_sends && !sends) || (num_recvs && !recvs))
    return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "vmmipc__tp_exchange: bad send or receive list (%d sends, %d receives)",
                         num_sends, num_recvs);
  for (int i = 0; i < num_recvs; i++) {
    recvs[i].bytes = NULL;
    recvs[i].num_bytes = 0;
    recvs[i].fds = NULL;
    recvs[i].num_fds = 0;
  }
  vmmipc_result_t rc = tp_check_args(tp, sends, num_sends, recvs, num_recvs);
  if (rc != VMMIPC_SUCCESS || (num_sends == 0 && num_recvs == 0)) return rc;

  vmmipc__tp_sop_t *sops = calloc((size_t)num_sends + 1, sizeof *sops);
  vmmipc__tp_rop_t *rops = calloc((size_t)num_recvs + 1, sizeof *rops);
  struct pollfd *pfd = calloc((size_t)num_sends + (size_t)num_recvs + 1, sizeof *pfd);
  if (!sops || !rops || !pfd) {
    free(sops);
    free(rops);
    free(pfd);
    return vmmipc__error(VMMIPC_ERR_NO_MEMORY, "vmmipc__tp_exchange: out of host memory");
  }
  for (int i = 0; i < num_sends; i++) sops[i].msg = &sends[i];
  for (int i = 0; i < num_recvs; i++) rops[i].slot = &recvs[i];

  const int64_t deadline = vmmipc__tp_now_ms() + tp->timeout_ms;
  int64_t next_liveness = 0; /* the first wait checks at once */
  for (;;) {
    int pending = 0;
    tp->retry_soon = 0;
    if ((rc = tp_progress(tp, sops, num_sends, rops, num_recvs, &pending)) != VMMIPC_SUCCESS) goto fail;
    if (!pending) break;
    int64_t now = vmmipc__tp_now_ms();

    if (now >= next_liveness) {
      next_liveness = now + VMMIPC__TP_SLICE_MS;
      int dead = -1;
      for (int p = 0; p < tp->node_size && dead < 0; p++) {
        const char *what;
        if (p != tp->node_rank && tp_pending_peer(sops, num_sends, rops, num_recvs, p, &what) &&
            vmmipc__tp_pid_gone(tp->pids[p]))
          dead = p;
      }
      if (dead >= 0) {
        /* Whatever it sent before it died is queued already: take it, then
         * fail only if it still owes this rank something. */
        if ((rc = tp_progress(tp, sops, num_sends, rops, num_recvs, &pending)) != VMMIPC_SUCCESS) goto fail;
        const char *what;
        if (tp_pending_peer(sops, num_sends, rops, num_recvs, dead, &what)) {
          int R = vmmipc__tp_rank(tp, dead);
          rc = vmmipc__error(VMMIPC_ERR_PEER,
                             "rank %d (pid %d) exited during the transport exchange, while rank %d was %s; hint: "
                             "rank %d crashed or was killed: its output has the first error",
                             R, (int)tp->pids[dead], vmmipc__tp_rank(tp, tp->node_rank), what, R);
          goto fail;
        }
        if (!pending) break;
      }
    }
    if (now >= deadline) {
      rc = tp_timeout_error(tp, sops, num_sends, rops, num_recvs);
      goto fail;
    }

    nfds_t n = 0;
    pfd[n].fd = tp->listen_fd;
    pfd[n].events = POLLIN;
    n++;
    for (int i = 0; i < num_recvs; i++) {
      int p = rops[i].slot->peer;
      if (!rops[i].done && tp->in[p].fd >= 0) {
        pfd[n].fd = tp->in[p].fd;
        pfd[n].events = POLLIN;
        n++;
      }
    }
    for (int i = 0; i < num_sends; i++) {
      int p = sends[i].peer;
      if (!sops[i].done && !sops[i].backoff && tp->out[p].fd >= 0) {
        pfd[n].fd = tp->out[p].fd;
        pfd[n].events = POLLOUT;
        n++;
      }
    }
    int64_t wait = deadline - now;
    if (next_liveness - now < wait) wait = next_liveness - now;
    if (wait > VMMIPC__TP_SLICE_MS) wait = VMMIPC__TP_SLICE_MS;
    if (tp->retry_soon && wait > VMMIPC__TP_RETRY_MS) wait = VMMIPC__TP_RETRY_MS;
    if (wait < 0) wait = 0;
    if (poll(pfd, n, (int)wait) < 0 && errno != EINTR) {
      rc = vmmipc__tp_os_error(VMMIPC_ERR_SYSTEM, errno, NULL, "transport exchange on rank %d: poll",
                               vmmipc__tp_rank(tp, tp->node_rank));
      goto fail;
    }
    /* What poll() reported is found by trying every pending operation. */
  }

  for (int i = 0; i < num_recvs; i++) {
    recvs[i].bytes = rops[i].bytes;
    recvs[i].num_bytes = (size_t)rops[i].total_bytes;
    recvs[i].fds = rops[i].fds;
    recvs[i].num_fds = (int)rops[i].total_fds;
  }
  free(sops);
  free(rops);
  free(pfd);
  return VMMIPC_SUCCESS;

fail:
  for (int i = 0; i < num_recvs; i++) {
    vmmipc__tp_rop_t *o = &rops[i];
    /* Half a message is queued behind us: the stream cannot be resumed. */
    if (!o->done && o->started) vmmipc__tp_drop_in(tp, o->slot->peer);
    vmmipc__tp_close_fds(o->fds, o->fds_done);
    free(o->fds);
    free(o->bytes);
  }
  for (int i = 0; i < num_sends; i++)
    if (!sops[i].done && sops[i].frame > 0) tp->out[sends[i].peer].broken = 1; /* half a message was sent */
  free(sops);
  free(rops);
  free(pfd);
  return rc;
}

/* ---- abort ---------------------------------------------------------------------- */

void vmmipc__tp_abort(vmmipc__tp_t *tp, const int *peers, int num_peers) {
  if (!tp || !tp->have_peers || !peers || num_peers <= 0) return;
  char msg[VMMIPC__ERRMSG_MAX];
  snprintf(msg, sizeof msg, "%s", vmmipc_last_error());
  char *state = calloc((size_t)num_peers, 1); /* 1: done with this peer */
  struct pollfd *pfd = calloc((size_t)num_peers, sizeof *pfd);
  if (!state || !pfd) goto out;
  const int64_t deadline = vmmipc__tp_now_ms() + VMMIPC__TP_ABORT_BUDGET_MS;
  for (;;) {
    int left = 0, retry = 0;
    nfds_t n = 0;
    for (int i = 0; i < num_peers; i++) {
      if (state[i]) continue;
      int p = peers[i];
      if (p < 0 || p >= tp->node_size) {
        state[i] = 1;
        continue;
      }
      vmmipc__tp_out_t *o = &tp->out[p];
      if (o->fd < 0 && o->broken) { /* nothing to send it on */
        state[i] = 1;
        continue;
      }
      if (o->fd < 0 || o->connecting) {
        tp->retry_soon = 0;
        if (vmmipc__tp_connect(tp, p) != VMMIPC_SUCCESS) {
          state[i] = 1;
          continue;
        }
        if (o->fd < 0) {
          retry |= tp->retry_soon;
          left++;
          continue;
        }
        if (o->connecting) {
          pfd[n].fd = o->fd;
          pfd[n].events = POLLOUT;
          n++;
          left++;
          continue;
        }
      }
      int e = vmmipc__tp_send_abort_frame(tp, p, msg);
      if (e == ETOOMANYREFS) { /* poll() cannot tell when this clears */
        retry = 1;
        left++;
        continue;
      }
      if (e == EAGAIN || e == EWOULDBLOCK) {
        pfd[n].fd = o->fd;
        pfd[n].events = POLLOUT;
        n++;
        left++;
        continue;
      }
      state[i] = 1;
      o->broken = 1; /* no DATA after an ABORT */
    }
    int64_t now = vmmipc__tp_now_ms();
    if (!left || now >= deadline) break;
    int64_t wait = deadline - now;
    if (retry && wait > VMMIPC__TP_RETRY_MS) wait = VMMIPC__TP_RETRY_MS;
    poll(pfd, n, (int)wait); /* EINTR: just go round again */
  }
out:
  free(state);
  free(pfd);
  vmmipc__error_set_raw(msg); /* the caller's error stays the current one */
}
