/* Bounded waits on MPI requests, and giving up on the ones that will not
 * complete (a rank that died or never entered the call, under an MPI that
 * does not end the job). */
#include <poll.h>
#include <pthread.h>
#include <time.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

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

int vmmipc__mpi_wait(MPI_Request *reqs, int n, int64_t deadline_ms, int *mpi_rc) {
  /* One MPI_Test per request (not MPI_Testall): completed requests become
   * MPI_REQUEST_NULL as they finish, so after a timeout the caller can tell
   * which ones did. */
  long pause_ns = 1000;
  for (unsigned spin = 0;; spin++) {
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
    if (!left) return 0;
    /* The clock is cheap (vDSO). */
    int64_t now = vmmipc__now_ms();
    if (now >= deadline_ms) return 1;
    /* Test at once for a while (an agreement among live ranks completes in
     * microseconds), then sleep in ppoll with a backoff that doubles up to
     * 1 ms: a rank that waits long on a late peer costs little CPU, and an
     * oversubscribed node's other ranks get the core. */
    if (spin < 64) continue;
    int64_t left_ms = deadline_ms - now;
    struct timespec ts = {0, pause_ns < left_ms * 1000000 ? pause_ns : left_ms * 1000000};
    ppoll(NULL, 0, &ts, NULL);
    if (pause_ns < 1000000) pause_ns *= 2;
  }
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
