/* Bounded waits on MPI requests, and giving up on the ones that will not
 * complete (a rank that died or never entered the call, under an MPI that
 * does not end the job). */
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "comm/comm.h"

vmmipc_result_t vmmipc__mpi_error(int mpi_rc, const char *fmt, ...) {
  char call[512], text[MPI_MAX_ERROR_STRING] = "";
  int len = 0;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(call, sizeof call, fmt, ap);
  va_end(ap);
  if (MPI_Error_string(mpi_rc, text, &len) != MPI_SUCCESS) snprintf(text, sizeof text, "MPI error %d", mpi_rc);
  return vmmipc__error(VMMIPC_ERR_MPI, "%s failed: %s", call, text);
}

/* One MPI_Test per request (not MPI_Testall): completed requests become
 * MPI_REQUEST_NULL as they finish, so after a timeout the caller can tell
 * which ones did. Returns how many are left, or -1 on an MPI error. */
static int test_each(MPI_Request *reqs, int n, int *mpi_rc) {
  int left = 0;
  for (int i = 0; i < n; i++) {
    if (reqs[i] == MPI_REQUEST_NULL) continue;
    int done = 0;
    int rc = MPI_Test(&reqs[i], &done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) {
      *mpi_rc = rc;
      return -1;
    }
    left += !done;
  }
  return left;
}

/* Sleeps in poll() on the watched sockets (or none): a few yields first
 * (latency when the answer is close), then a pause that doubles to 1 ms
 * (little CPU on an oversubscribed node when it is not). */
static void pause_on(struct pollfd *pfd, nfds_t k, unsigned spin, long *pause_ns) {
  if (spin < 64) {
    /* The sockets only tell of hang-ups and aborts (answers come over MPI):
     * a look every 8th test keeps a system call off the quick answers. */
    if (k && (spin & 7) == 7) poll(pfd, k, 0);
    else if (spin > 16) sched_yield();
    return;
  }
  struct timespec ts = {0, *pause_ns};
  ppoll(pfd, k, &ts, NULL);
  if (*pause_ns < 1000000) *pause_ns *= 2;
}

int vmmipc__mpi_wait(MPI_Request *reqs, int n, int64_t deadline_ms, int *mpi_rc) {
  long pause_ns = 2000;
  for (unsigned spin = 0;; spin++) {
    int left = test_each(reqs, n, mpi_rc);
    if (left <= 0) return left < 0 ? -1 : 0;
    /* The clock is cheap (vDSO). */
    if (vmmipc__now_ms() >= deadline_ms) return 1;
    pause_on(NULL, 0, spin, &pause_ns);
  }
}

int vmmipc__mpi_wait_watch(struct vmmipc_comm *c, MPI_Request *reqs, int n, int64_t deadline_ms, int *mpi_rc,
                           char *watch, int *gone, vmmipc_result_t *gone_code) {
  int ns = c->tp ? c->node_size : 0;
  struct pollfd *pfd = ns ? calloc((size_t)ns, sizeof *pfd) : NULL;
  int *who = ns ? calloc((size_t)ns, sizeof *who) : NULL;
  *gone = -1;
  *gone_code = VMMIPC_ERR_PEER;
  long pause_ns = 2000;
  /* The first pid check after 20 ms, or as the wait ends: fast agreements
   * do not pay for it, and callers that wait in short slices still get
   * one per slice. */
  int64_t next_liveness = vmmipc__now_ms() + 20;
  int rc = VMMIPC__WAIT_TIMEOUT;
  for (unsigned spin = 0;; spin++) {
    int left = test_each(reqs, n, mpi_rc);
    if (left < 0) {
      rc = VMMIPC__WAIT_MPI;
      break;
    }
    if (!left) {
      rc = VMMIPC__WAIT_DONE;
      break;
    }
    if (__atomic_load_n(&c->aborted, __ATOMIC_ACQUIRE)) {
      vmmipc__error(VMMIPC_ERR_ABORTED, "rank %d aborted the communicator (vmmipc_comm_abort)", c->rank);
      vmmipc__error_rank(c->rank);
      rc = VMMIPC__WAIT_ABORTED;
      break;
    }
    int64_t now = vmmipc__now_ms();
    nfds_t k = 0;
    int check_pids = now >= next_liveness || now >= deadline_ms; /* once a slice, however short */
    if (check_pids) next_liveness = now + 100;
    for (int p = 0; watch && pfd && p < ns; p++) {
      if (!watch[p]) continue;
      int fd = vmmipc__tp_coll_fd(c->tp, p);
      /* A connection never made (a failed mesh, vmmipc_comm_create's
       * agreement) cannot hang up: its pid only, not a closed socket. */
      if (watch[p] == 2 || (fd < 0 && !vmmipc__tp_hung_up(c->tp, p))) {
        if (check_pids && vmmipc__pid_gone(vmmipc__conn_pid(vmmipc__tp_conn(c->tp), p))) {
          vmmipc__error(VMMIPC_ERR_PEER, "rank %d (pid %d) exited", vmmipc__conn_rank(vmmipc__tp_conn(c->tp), p),
                        (int)vmmipc__conn_pid(vmmipc__tp_conn(c->tp), p));
          *gone = p;
          rc = VMMIPC__WAIT_GONE;
          goto out;
        }
        continue;
      }
      if (watch[p] >= 3) { /* hang-ups, and (4) an END frame queued first */
        pid_t pid = vmmipc__conn_pid(vmmipc__tp_conn(c->tp), p);
        if (check_pids && vmmipc__pid_gone(pid)) {
          vmmipc__error(VMMIPC_ERR_PEER, "rank %d (pid %d) exited", vmmipc__conn_rank(vmmipc__tp_conn(c->tp), p),
                        (int)pid);
          *gone = p;
          rc = VMMIPC__WAIT_GONE;
          goto out;
        }
        if (fd >= 0) {
          pfd[k].fd = fd;
          pfd[k].events = watch[p] == 4 ? POLLIN : 0; /* POLLHUP and POLLERR come anyway */
          pfd[k].revents = 0;
          who[k++] = p;
        }
        continue;
      }
      if (fd < 0 || (check_pids && vmmipc__pid_gone(vmmipc__conn_pid(vmmipc__tp_conn(c->tp), p)))) {
        /* What it sent before it went is taken first, all of it: with more
         * queued, it is watched on below and read at the next turns. */
        vmmipc__tp_read_t r = fd < 0 ? VMMIPC__TP_READ_GONE : vmmipc__tp_read_coll(c->tp, p, c->epoch);
        if (r != VMMIPC__TP_READ_MORE) {
          if (r == VMMIPC__TP_READ_NOTHING || r == VMMIPC__TP_READ_AHEAD)
            vmmipc__error(VMMIPC_ERR_PEER, "rank %d (pid %d) exited", vmmipc__conn_rank(vmmipc__tp_conn(c->tp), p),
                          (int)vmmipc__conn_pid(vmmipc__tp_conn(c->tp), p));
          else if (fd < 0)
            vmmipc__tp_read_coll(c->tp, p, c->epoch); /* sets the error naming it */
          *gone = p;
          /* Closed by its END frame (an abort) in the exchange: an abort still. */
          int aborted = r == VMMIPC__TP_READ_ABORTED || (fd < 0 && vmmipc__tp_aborted_by(c->tp) == p);
          *gone_code = aborted ? VMMIPC_ERR_ABORTED : VMMIPC_ERR_PEER;
          rc = VMMIPC__WAIT_GONE;
          goto out;
        }
      }
      pfd[k].fd = fd;
      pfd[k].events = POLLIN;
      pfd[k].revents = 0;
      who[k++] = p;
    }
    if (now >= deadline_ms) break;
    pause_on(pfd, k, spin, &pause_ns);
    for (nfds_t i = 0; i < k; i++) {
      if (!pfd[i].revents) continue;
      if (watch[who[i]] == 4 && (pfd[i].revents & POLLIN)) {
        /* Its END frame, queued first, is only peeked at: left queued, it
         * fails this rank's next calls that read the connection too, as the
         * abort promises, whatever this agreement's verdict. An abort ends
         * the wait; anything else first (a told break, a later call's
         * frames) leaves hang-ups to watch; an end of file is one. */
        int end = vmmipc__tp_end_first(c->tp, who[i]);
        if (end == VMMIPC_ERR_ABORTED) {
          int R = vmmipc__conn_rank(vmmipc__tp_conn(c->tp), who[i]);
          vmmipc__error(VMMIPC_ERR_ABORTED, "rank %d aborted the communicator (vmmipc_comm_abort)", R);
          vmmipc__error_rank(R);
          *gone = who[i];
          *gone_code = VMMIPC_ERR_ABORTED;
          rc = VMMIPC__WAIT_GONE;
          goto out;
        }
        if (end >= 0) watch[who[i]] = 3;
        if (end == -2) pfd[i].revents |= POLLHUP;
      }
      if (watch[who[i]] >= 3) {
        /* Hung up: a death once its pid is gone (a peer that freed its
         * comm after its verdict is not one). */
        if (pfd[i].revents & (POLLHUP | POLLERR)) {
          watch[who[i]] = 2;
          next_liveness = vmmipc__now_ms() + 5;
        }
        continue;
      }
      vmmipc__tp_read_t r = vmmipc__tp_read_coll(c->tp, who[i], c->epoch);
      if (r == VMMIPC__TP_READ_AHEAD) { /* past this agreement: only its hang-up matters now */
        watch[who[i]] = 3;
        continue;
      }
      if (r == VMMIPC__TP_READ_GONE || r == VMMIPC__TP_READ_ABORTED) {
        *gone = who[i];
        *gone_code = r == VMMIPC__TP_READ_ABORTED ? VMMIPC_ERR_ABORTED : VMMIPC_ERR_PEER;
        rc = VMMIPC__WAIT_GONE;
        goto out;
      }
      pause_ns = 2000; /* something moved: look again soon */
    }
  }
out:
  free(pfd);
  free(who);
  return rc;
}

/* Buffers MPI may still write or read: kept for the life of the process
 * (reachable, so leak checkers stay quiet), as are nonblocking collective
 * requests, which MPI lets nobody cancel or free. */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static void **g_keep;
static size_t g_nkeep, g_capkeep;

void vmmipc__mpi_keep(void *keep) {
  if (!keep) return;
  pthread_mutex_lock(&g_mu);
  if (g_nkeep == g_capkeep) {
    size_t cap = g_capkeep ? 2 * g_capkeep : 16;
    void **k = realloc(g_keep, cap * sizeof *k);
    if (k) {
      g_keep = k;
      g_capkeep = cap;
    }
  }
  if (g_nkeep < g_capkeep) g_keep[g_nkeep++] = keep;
  pthread_mutex_unlock(&g_mu);
}

void vmmipc__mpi_abandon(MPI_Request *reqs, int n, int cancel, void *keep) {
  for (int i = 0; i < n; i++) {
    if (reqs[i] == MPI_REQUEST_NULL) continue;
    int flag = 0;
    MPI_Test(&reqs[i], &flag, MPI_STATUS_IGNORE);
    if (flag || reqs[i] == MPI_REQUEST_NULL || !cancel) continue;
    /* Cancelling works for receives; a request that still does not
     * complete is left to MPI. (Nonblocking collectives cannot be
     * cancelled at all.) */
    MPI_Cancel(&reqs[i]);
    int64_t until = vmmipc__now_ms() + 50;
    while (!flag && vmmipc__now_ms() < until) MPI_Test(&reqs[i], &flag, MPI_STATUS_IGNORE);
  }
  vmmipc__mpi_keep(keep);
}

void vmmipc__mpi_send_unwaited(MPI_Comm comm, const void *b, int count, MPI_Datatype type, int to, int tag) {
  MPI_Request req = MPI_REQUEST_NULL;
  if (MPI_Isend(b, count, type, to, tag, comm, &req) == MPI_SUCCESS) MPI_Request_free(&req);
}
