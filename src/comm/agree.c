/* The agreement that makes collectives all-or-nothing, bounded by the
 * timeout. Every rank sends its outcome to rank 0 of the comm, which picks
 * the verdict and sends it back to all; point-to-point messages (not
 * MPI_Allreduce) so that a rank that never answers cannot hold the others
 * beyond the timeout, and so that the ranks that did not answer can be
 * named. Costs two small messages per rank; the root's work grows with the
 * comm size (docs/transport.md, "Agreement"). */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "common/le.h"
#include "common/testhooks.h"

/* Tags 0x2000..0x5fff on the private duplicate; MPI guarantees >= 32767. */
#define AGREE_TAG_BASE 0x2000
#define AGREE_TAG_SPAN 0x4000
#define AGREE_TEXT_MAX 1024
/* Outcome: code, secondary, the rank to blame (-1: this one), driver error,
 * errno; then the message when failing. */
#define OUTCOME_HEAD 20
#define OUTCOME_MAX (OUTCOME_HEAD + AGREE_TEXT_MAX)
/* Verdict: code, the rank picked, broken, the rank to blame, driver error,
 * errno; then the message. */
#define VERDICT_HEAD 24
#define VERDICT_MAX (VERDICT_HEAD + VMMIPC__ERRMSG_MAX)

static int pack_outcome(unsigned char *b, vmmipc_result_t local, int secondary) {
  vmmipc__put32(b, (uint32_t)local);
  vmmipc__put32(b + 4, (uint32_t)(secondary != 0));
  vmmipc__error_state_t st = {VMMIPC_SUCCESS, -1, 0, 0};
  if (local) vmmipc__error_get(&st);
  vmmipc__put32(b + 8, (uint32_t)st.rank);
  vmmipc__put32(b + 12, (uint32_t)st.driver_error);
  vmmipc__put32(b + 16, (uint32_t)st.os_error);
  if (!local) return OUTCOME_HEAD;
  int n = snprintf((char *)b + OUTCOME_HEAD, AGREE_TEXT_MAX, "%s", vmmipc_last_error());
  if (n < 0) n = 0;
  if (n >= AGREE_TEXT_MAX) n = AGREE_TEXT_MAX - 1;
  return OUTCOME_HEAD + n + 1;
}

/* The message the whole comm sees, built by the root. */
static int pack_verdict(unsigned char *v, const char *op, const unsigned char *outcomes, const int *arrived, int size,
                        int timeout_ms) {
  int pick = -1, pick_secondary = 1;
  for (int r = 0; r < size; r++) {
    if (!arrived[r]) continue;
    const unsigned char *o = outcomes + (size_t)r * OUTCOME_MAX;
    uint32_t code = vmmipc__get32(o), sec = vmmipc__get32(o + 4);
    if (code == 0) continue;
    if (pick < 0 || (pick_secondary && !sec)) {
      pick = r;
      pick_secondary = (int)sec;
    }
  }
  char *text = (char *)v + VERDICT_HEAD;
  size_t cap = VMMIPC__ERRMSG_MAX;
  size_t len = 0;
  int missing = 0;
  for (int r = 0; r < size; r++) missing += !arrived[r];
  uint32_t code = 0, blame = UINT32_MAX, drv = 0, os = 0;
  if (pick >= 0) {
    const unsigned char *o = outcomes + (size_t)pick * OUTCOME_MAX;
    code = vmmipc__get32(o);
    int32_t named = (int32_t)vmmipc__get32(o + 8);
    blame = (uint32_t)(named >= 0 && named < size ? named : pick);
    drv = vmmipc__get32(o + 12);
    os = vmmipc__get32(o + 16);
    if (code > VMMIPC__RESULT_MAX) code = VMMIPC_ERR_PEER;
    int w = snprintf(text, cap, "%s failed on rank %d (%s): %.*s", op, pick, vmmipc_strerror((vmmipc_result_t)code),
                     AGREE_TEXT_MAX - 1, (const char *)o + OUTCOME_HEAD);
    len = w > 0 ? ((size_t)w < cap ? (size_t)w : cap - 1) : 0;
  }
  if (missing) {
    code = VMMIPC_ERR_TIMEOUT;
    int w = snprintf(text + len, cap - len, "%s%s: the agreement timed out after %d ms: rank(s) ", len ? "; then " : "",
                     op, timeout_ms);
    len += w > 0 ? ((size_t)w < cap - len ? (size_t)w : cap - len - 1) : 0;
    int shown = 0;
    for (int r = 0; r < size && len + 1 < cap; r++) {
      if (arrived[r]) continue;
      if (blame == UINT32_MAX) blame = (uint32_t)r;
      if (shown++ == 16) {
        w = snprintf(text + len, cap - len, ", ... (%d in all)", missing);
      } else {
        w = snprintf(text + len, cap - len, "%s%d", shown > 1 ? ", " : "", r);
      }
      len += w > 0 ? ((size_t)w < cap - len ? (size_t)w : cap - len - 1) : 0;
      if (shown > 16) break;
    }
    w = snprintf(text + len, cap - len,
                 " did not answer (dead, or not in this call); the communicator is broken: every later call on it "
                 "fails, and vmmipc_comm_destroy frees it locally");
    len += w > 0 ? ((size_t)w < cap - len ? (size_t)w : cap - len - 1) : 0;
  }
  vmmipc__put32(v, code);
  vmmipc__put32(v + 4, (uint32_t)pick);
  vmmipc__put32(v + 8, (uint32_t)(missing != 0));
  vmmipc__put32(v + 12, blame);
  vmmipc__put32(v + 16, drv);
  vmmipc__put32(v + 20, os);
  text[len] = '\0';
  return VERDICT_HEAD + (int)len + 1;
}

/* The verdict becomes this rank's result and message. */
static vmmipc_result_t apply_verdict(struct vmmipc_comm *c, const unsigned char *v) {
  uint32_t code = vmmipc__get32(v), broken = vmmipc__get32(v + 8);
  if (code == 0) return VMMIPC_SUCCESS;
  char text[VMMIPC__ERRMSG_MAX];
  snprintf(text, sizeof text, "%.*s", VMMIPC__ERRMSG_MAX - 1, (const char *)v + VERDICT_HEAD);
  if (code > VMMIPC__RESULT_MAX) code = VMMIPC_ERR_PEER;
  /* The failing rank's record, as the message: the same on every rank. */
  vmmipc__error_set_raw(text);
  vmmipc__error_state_t st = {(vmmipc_result_t)code, (int)vmmipc__get32(v + 12), (int)vmmipc__get32(v + 16),
                              (int)vmmipc__get32(v + 20)};
  vmmipc__error_put(&st);
  if (broken) vmmipc__break(c);
  return (vmmipc_result_t)code;
}

static vmmipc_result_t agree_root(struct vmmipc_comm *c, vmmipc_result_t local, int secondary, const char *op,
                                  int tag) {
  int n = c->size;
  /* The root gives up a little before the others, so that its verdict (a
   * timeout naming the silent ranks) reaches them within their own bound. */
  int slack = c->timeout_ms / 10 < 1000 ? c->timeout_ms / 10 : 1000;
  int64_t deadline = vmmipc__now_ms() + c->timeout_ms - slack;
  unsigned char *outcomes = calloc((size_t)n, OUTCOME_MAX);
  unsigned char *verdict = malloc(VERDICT_MAX); /* handed to MPI: may outlive this call */
  int *arrived = calloc((size_t)n, sizeof *arrived);
  MPI_Request *reqs = malloc(2 * (size_t)n * sizeof *reqs);
  if (!outcomes || !verdict || !arrived || !reqs) {
    free(outcomes);
    free(verdict);
    free(arrived);
    free(reqs);
    vmmipc__error(VMMIPC_ERR_NO_MEMORY, "%s: the agreement's tables for %d ranks", op, n);
    vmmipc__break(c);
    return VMMIPC_ERR_NO_MEMORY;
  }
  MPI_Request *recvs = reqs, *sends = reqs + n;
  pack_outcome(outcomes, local, secondary);
  arrived[0] = 1;
  for (int r = 0; r < 2 * n; r++) reqs[r] = MPI_REQUEST_NULL;
  int mrc = MPI_SUCCESS;
  for (int r = 1; r < n && mrc == MPI_SUCCESS; r++)
    mrc = MPI_Irecv(outcomes + (size_t)r * OUTCOME_MAX, OUTCOME_MAX, MPI_BYTE, r, tag, c->dup, &recvs[r]);
  int w = mrc == MPI_SUCCESS ? vmmipc__mpi_wait(recvs + 1, n - 1, deadline, &mrc) : -1;
  vmmipc_result_t rc = VMMIPC_SUCCESS;
  if (w < 0) {
    rc = vmmipc__mpi_error(mrc, "%s: agreement (receiving the outcomes)", op);
    vmmipc__break(c);
  } else {
    for (int r = 1; r < n; r++) arrived[r] = recvs[r] == MPI_REQUEST_NULL; /* completed ones are NULL */
    int len = pack_verdict(verdict, op, outcomes, arrived, n, c->timeout_ms);
    /* To the silent ranks as well: one that comes late learns the verdict at once. */
    for (int r = 1; r < n && mrc == MPI_SUCCESS; r++) mrc = MPI_Isend(verdict, len, MPI_BYTE, r, tag, c->dup, &sends[r]);
    int sw = -1;
    if (mrc == MPI_SUCCESS) {
      int64_t now = vmmipc__now_ms();
      sw = vmmipc__mpi_wait(sends + 1, n - 1, deadline > now + 100 ? deadline : now + 100, &mrc);
    }
    rc = apply_verdict(c, verdict);
    if (sw != 0) {
      if (!rc) rc = vmmipc__mpi_error(mrc, "%s: agreement (sending the verdict)", op);
      vmmipc__break(c);
      vmmipc__mpi_abandon(sends + 1, n - 1, 0, verdict); /* MPI keeps the message; we keep its buffer */
      verdict = NULL;
    }
  }
  if (w != 0) { /* receives that will not complete */
    vmmipc__mpi_abandon(recvs + 1, n - 1, 1, outcomes);
    outcomes = NULL;
  }
  free(outcomes);
  free(verdict);
  free(arrived);
  free(reqs);
  return rc;
}

static vmmipc_result_t agree_member(struct vmmipc_comm *c, vmmipc_result_t local, int secondary, const char *op,
                                    int tag) {
  int64_t deadline = vmmipc__now_ms() + c->timeout_ms;
  unsigned char *bufs = malloc(OUTCOME_MAX + VERDICT_MAX);
  if (!bufs) {
    vmmipc__error(VMMIPC_ERR_NO_MEMORY, "%s: agreement", op);
    vmmipc__break(c);
    return VMMIPC_ERR_NO_MEMORY;
  }
  unsigned char *outcome = bufs, *verdict = bufs + OUTCOME_MAX;
  int len = pack_outcome(outcome, local, secondary);
  MPI_Request reqs[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  int mrc = MPI_Irecv(verdict, VERDICT_MAX, MPI_BYTE, 0, tag, c->dup, &reqs[1]);
  if (mrc == MPI_SUCCESS) mrc = MPI_Isend(outcome, len, MPI_BYTE, 0, tag, c->dup, &reqs[0]);
  int w = mrc == MPI_SUCCESS ? vmmipc__mpi_wait(reqs, 2, deadline, &mrc) : -1;
  vmmipc_result_t rc;
  if (w == 0) {
    rc = apply_verdict(c, verdict);
    free(bufs);
    return rc;
  }
  if (w < 0) {
    rc = vmmipc__mpi_error(mrc, "%s: agreement", op);
  } else {
    rc = vmmipc__error(VMMIPC_ERR_TIMEOUT,
                       "%s: the agreement timed out after %d ms: rank 0, which collects it, did not answer (dead, or "
                       "not in this call); the communicator is broken: every later call on it fails, and "
                       "vmmipc_comm_destroy frees it locally",
                       op, c->timeout_ms);
    vmmipc__error_rank(0);
  }
  vmmipc__mpi_abandon(reqs, 2, 1, bufs);
  vmmipc__break(c);
  return rc;
}

vmmipc_result_t vmmipc__agree(struct vmmipc_comm *c, vmmipc_result_t local, int secondary, const char *op) {
  double t0 = vmmipc__now();
  vmmipc_result_t r;
  if (VMMIPC__INJECT("agree")) { /* a rank that never enters the agreement */
    vmmipc__error(VMMIPC_ERR_TIMEOUT, "%s: injected: this rank skipped the agreement", op);
    vmmipc__break(c);
    return VMMIPC_ERR_TIMEOUT;
  }
  if (c->size == 1) {
    r = local;
  } else {
    int tag = AGREE_TAG_BASE + (int)(c->agreements++ % AGREE_TAG_SPAN);
    r = c->rank == 0 ? agree_root(c, local, secondary, op, tag) : agree_member(c, local, secondary, op, tag);
  }
  c->timing.agree_s += vmmipc__now() - t0;
  return r;
}
