/* The one round of a heap call: every rank's input (its result so far
 * first) to every rank, with a bounded wait, so that each rank can decide
 * alone and all decide alike. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/le.h"
#include "common/testhooks.h"
#include "heap/heap.h"

/* A rank that came after another gave up (its wait is the timeout from its
 * own arrival) completes the gather for the ranks still waiting, but not for
 * those already gone: every rank that sees the gather decides alike from
 * the arrival times whether anyone may have given up, with a margin for
 * the message's flight and the clocks of other nodes. */
static vmmipc_result_t too_late(struct vmmipc_comm *c, const unsigned char *all, size_t len, const char *op) {
  int64_t first = INT64_MAX, last = 0;
  for (int q = 0; q < c->size; q++) {
    int64_t t = (int64_t)vmmipc__get64(all + (size_t)q * len + 8);
    if (t < first) first = t;
    if (t > last) last = t;
  }
  int64_t margin = c->timeout_ms / 10 < 1000 ? c->timeout_ms / 10 : 1000;
  int64_t bound = first + ((int64_t)c->timeout_ms - margin) * 1000;
  if (last <= bound) return VMMIPC_SUCCESS;
  char late[256] = "";
  size_t used = 0;
  for (int q = 0; q < c->size && used + 16 < sizeof late; q++)
    if ((int64_t)vmmipc__get64(all + (size_t)q * len + 8) > bound) {
      int k = snprintf(late + used, sizeof late - used, "%s%d", used ? ", " : "", q);
      if (k > 0) used += (size_t)k;
    }
  vmmipc__error(VMMIPC_ERR_TIMEOUT,
                "%s: rank(s) %s came %lld ms after the first, too late for the timeout of %d ms (ranks may have "
                "given up); the communicator is broken: every later call on it fails, and vmmipc_comm_destroy frees "
                "it locally",
                op, late, (long long)((last - first) / 1000), c->timeout_ms);
  /* Ranks that gave up wait in the agreement (below): join it, so that
   * every rank returns its one verdict, this explanation included. */
  vmmipc_result_t r = vmmipc__agree(c, VMMIPC_ERR_TIMEOUT, 0, op);
  vmmipc__break(c);
  return r ? r : VMMIPC_ERR_TIMEOUT;
}

/* Point-to-point below this many ranks: a nonblocking allgather costs
 * several times the blocking one in Open MPI (a schedule per call, progress
 * only in MPI_Test), while n-1 sends and receives over shared memory cost
 * about a blocking allgather. Above it, the O(n) messages per rank lose. */
#define HEAP_P2P_MAX_RANKS 16
/* On the comm's private duplicate, apart from the agreement's tags
 * (comm/agree.c: 0x2000..0x5fff). One tag: MPI keeps each pair's messages
 * in order, and a call that gives up breaks the comm. */
#define HEAP_P2P_TAG 0x6000

static int use_p2p(const struct vmmipc_comm *c) {
  static int mode = -1; /* VMMIPC_HEAP_XFER=coll|p2p: a design probe for the benchmark (docs/dev) */
  if (mode < 0) {
    const char *e = getenv("VMMIPC_HEAP_XFER");
    mode = e && !strcmp(e, "coll") ? 0 : e && !strcmp(e, "p2p") ? 2 : 1;
  }
  return mode == 2 || (mode == 1 && c->size <= HEAP_P2P_MAX_RANKS);
}

/* Posts the exchange: one request (the collective) or 2(n-1). */
static int post(struct vmmipc_comm *c, unsigned char *mine, unsigned char *all, size_t len, MPI_Request *reqs,
                int *nreq) {
  int p2p = use_p2p(c), total = p2p ? 2 * (c->size - 1) : 1;
  for (int i = 0; i < total; i++) reqs[i] = MPI_REQUEST_NULL; /* a failed post leaves NULL behind it */
  *nreq = total;
  if (!p2p) return MPI_Iallgather(mine, (int)len, MPI_BYTE, all, (int)len, MPI_BYTE, c->dup, &reqs[0]);
  memcpy(all + (size_t)c->rank * len, mine, len);
  int mrc = MPI_SUCCESS, k = 0;
  for (int q = 0; q < c->size && mrc == MPI_SUCCESS; q++)
    if (q != c->rank)
      mrc = MPI_Irecv(all + (size_t)q * len, (int)len, MPI_BYTE, q, HEAP_P2P_TAG, c->dup, &reqs[k++]);
  k = c->size - 1; /* sends after the receives, whatever was posted */
  for (int q = 0; q < c->size && mrc == MPI_SUCCESS; q++)
    if (q != c->rank) mrc = MPI_Isend(mine, (int)len, MPI_BYTE, q, HEAP_P2P_TAG, c->dup, &reqs[k++]);
  return mrc;
}

/* Receives are cancelled; sends (small: they completed eagerly, or never
 * will) and the collective (which nobody can cancel) are left to MPI. */
static void abandon(const struct vmmipc_comm *c, MPI_Request *reqs, int nreq, void *keep) {
  int recvs = use_p2p(c) ? c->size - 1 : 0;
  vmmipc__mpi_abandon(reqs, recvs, 1, NULL);
  vmmipc__mpi_abandon(reqs + recvs, nreq - recvs, 0, keep);
}

vmmipc_result_t vmmipc__heap_allgather(struct vmmipc_comm *c, unsigned char **bufs, size_t len, const char *op) {
  unsigned char *mine = *bufs, *all = *bufs + len;
  if (c->size == 1) {
    memcpy(all, mine, len);
    return VMMIPC_SUCCESS;
  }
  if (VMMIPC__INJECT("agree")) { /* a rank that never enters the call */
    vmmipc__error(VMMIPC_ERR_TIMEOUT, "%s: injected: this rank skipped the call", op);
    vmmipc__break(c);
    return VMMIPC_ERR_TIMEOUT;
  }
  double t0 = vmmipc__now();
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts); /* one clock for the node; NTP-close across nodes */
  vmmipc__put64(mine + 8, (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u);
  /* Small comms need no allocation here: a rank out of memory still takes part. */
  MPI_Request one = MPI_REQUEST_NULL, few[2 * HEAP_P2P_MAX_RANKS], *reqs = &one;
  if (use_p2p(c)) reqs = c->size <= HEAP_P2P_MAX_RANKS ? few : malloc(2 * (size_t)c->size * sizeof *reqs);
  if (!reqs) { /* the peers' wait is bounded */
    vmmipc__error(VMMIPC_ERR_NO_MEMORY, "%s: the exchange's %d requests", op, 2 * c->size);
    vmmipc__break(c);
    return VMMIPC_ERR_NO_MEMORY;
  }
  int nreq = 0;
  int mrc = post(c, mine, all, len, reqs, &nreq);
  int w = mrc == MPI_SUCCESS ? vmmipc__mpi_wait(reqs, nreq, vmmipc__now_ms() + c->timeout_ms, &mrc) : -1;
  c->timing.agree_s += vmmipc__now() - t0;
  if (w == 0) {
    if (reqs != &one && reqs != few) free(reqs);
    return too_late(c, all, len, op);
  }
  vmmipc_result_t r;
  abandon(c, reqs, nreq, *bufs); /* MPI may still write there */
  *bufs = NULL;
  if (reqs != &one && reqs != few) free(reqs);
  if (w < 0) {
    r = vmmipc__mpi_error(mrc, "%s: the exchange of the ranks' inputs", op);
  } else {
    /* Which ranks are missing: the agreement names them (and breaks the comm). */
    vmmipc__error(VMMIPC_ERR_TIMEOUT, "%s: not every rank came within %d ms", op, c->timeout_ms);
    /* Secondary: a late rank's own account (too_late) names who was late. */
    r = vmmipc__agree(c, VMMIPC_ERR_TIMEOUT, 1, op);
  }
  vmmipc__break(c);
  return r ? r : VMMIPC_ERR_TIMEOUT;
}

vmmipc_result_t vmmipc__heap_verdict(struct vmmipc_comm *c, const unsigned char *all, size_t len, const char *op) {
  for (int q = 0; q < c->size; q++) {
    vmmipc_result_t code = (vmmipc_result_t)vmmipc__get32(all + (size_t)q * len);
    if (!code) continue;
    if (q == c->rank) {
      vmmipc__error_prefix("%s failed on rank %d (%s): ", op, q, vmmipc_strerror(code));
    } else {
      vmmipc__error(code, "%s failed on rank %d (%s); that rank's vmmipc_last_error() says why", op, q,
                    vmmipc_strerror(code));
      vmmipc__error_rank(q);
    }
    return code;
  }
  return VMMIPC_SUCCESS;
}
