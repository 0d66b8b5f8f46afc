/* The agreement that makes collectives all-or-nothing, bounded by the
 * timeout, with one verdict on every rank (docs/sync.md, "One verdict").
 *
 * Every rank sends its outcome to rank 0 of the comm (the collector) over
 * MPI; the collector picks the verdict and announces it: to its node peers
 * as a VERDICT frame on their socket, to the others over MPI. Point-to-point
 * (not MPI_Allreduce), so that a silent rank cannot hold the others beyond
 * the timeout and can be named.
 *
 * Deciding once: a rank whose wait for the verdict times out withdraws (an
 * MPI message to the collector), then waits a grace for a verdict already
 * on its way. A node peer of the collector then cuts its socket's reading
 * side (shutdown): the kernel orders the cut and the collector's VERDICT
 * write, so the verdict was either queued before (and is obeyed) or the
 * write fails (EPIPE) and the collector knows. The collector never decides
 * SUCCESS once it has seen a withdrawal: it looks for them after deciding
 * and again just before announcing. While it waits, the collector watches
 * its node peers' sockets, and they watch its: a node rank that dies ends
 * the wait at once. */
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "common/le.h"
#include "common/testhooks.h"
#include "transport/codec.h"

/* Tags on the private duplicate (MPI guarantees >= 32767): outcomes and
 * verdicts 0x2000..0x3fff, withdrawals 0x4000..0x5fff. */
#define AGREE_TAG_BASE 0x2000
#define AGREE_WITHDRAW_BASE 0x4000
#define AGREE_TAG_SPAN 0x2000
#define AGREE_TEXT_MAX 1024
/* Outcome: code, secondary, keyed, 0, key (8); then the message when failing. */
#define OUTCOME_HEAD 36
#define OUTCOME_MAX (OUTCOME_HEAD + AGREE_TEXT_MAX)
/* Verdict: code, failing rank, broken, 0; then the message. */
#define VERDICT_HEAD 24
#define VERDICT_MAX (VERDICT_HEAD + VMMIPC__ERRMSG_MAX)
_Static_assert(VERDICT_MAX <= VMMIPC__VERDICT_MAX_BYTES, "a verdict fits one VERDICT frame");

/* What one agreement is about. */
typedef struct agree_call {
  struct vmmipc_comm *c;
  const char *op;
  uint64_t k;        /* agreement number, equal on every rank */
  int tag, wtag;
  int keyed;
  uint64_t key;      /* keyed: every rank must bring the same key */
} agree_call_t;

/* Node rank of comm rank r, or -1 (off-node, or before the node split). */
static int node_of(const struct vmmipc_comm *c, int r) { return c->node_of && c->tp ? c->node_of[r] : -1; }

static int grace_ms(const struct vmmipc_comm *c) {
  int g = c->timeout_ms / 10;
  return g < 20 ? 20 : g > 1000 ? 1000 : g;
}

static int pack_outcome(unsigned char *b, const agree_call_t *a, vmmipc_result_t local, int secondary) {
  vmmipc__put32(b, (uint32_t)local);
  vmmipc__put32(b + 4, (uint32_t)(secondary != 0));
  vmmipc__put32(b + 8, (uint32_t)a->keyed);
  vmmipc__put32(b + 12, 0);
  vmmipc__put64(b + 16, a->key);
  /* The failing rank's record (vmmipc_last_error_info): the rank it blames
   * (-1: itself), the driver error, errno. */
  vmmipc__error_state_t st = {VMMIPC_SUCCESS, -1, 0, 0};
  if (local) vmmipc__error_get(&st);
  vmmipc__put32(b + 24, (uint32_t)st.rank);
  vmmipc__put32(b + 28, (uint32_t)st.driver_error);
  vmmipc__put32(b + 32, (uint32_t)st.os_error);
  if (!local) return OUTCOME_HEAD;
  int n = snprintf((char *)b + OUTCOME_HEAD, AGREE_TEXT_MAX, "%s", vmmipc_last_error());
  if (n < 0) n = 0;
  if (n >= AGREE_TEXT_MAX) n = AGREE_TEXT_MAX - 1;
  return OUTCOME_HEAD + n + 1;
}

static vmmipc_result_t known_code(uint32_t code) {
  return code > VMMIPC__RESULT_MAX ? VMMIPC_ERR_PEER : (vmmipc_result_t)code;
}

/* Appends to the verdict's text. */
static void vappend(char *text, size_t *len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void vappend(char *text, size_t *len, const char *fmt, ...) {
  size_t cap = VMMIPC__ERRMSG_MAX;
  if (*len + 1 >= cap) return;
  va_list ap;
  va_start(ap, fmt);
  int w = vsnprintf(text + *len, cap - *len, fmt, ap);
  va_end(ap);
  *len += w > 0 ? ((size_t)w < cap - *len ? (size_t)w : cap - *len - 1) : 0;
}

static void append_ranks(char *text, size_t *len, const char *set, int size) {
  int shown = 0, all = 0;
  for (int r = 0; r < size; r++) all += set[r] != 0;
  for (int r = 0; r < size; r++) {
    if (!set[r]) continue;
    if (shown++ == 16) {
      vappend(text, len, ", ... (%d in all)", all);
      break;
    }
    vappend(text, len, "%s%d", shown > 1 ? ", " : "", r);
  }
}

static const char k_broken_tail[] =
    "; the communicator is broken: every later call on it fails, and vmmipc_comm_destroy frees it locally";

/* The verdict the whole comm sees, built by the collector. arrived[r]: its
 * outcome came; withdrew[r]: it gave up waiting; gone: a node rank that hung
 * up or aborted (its error is the current message), or -1. */
static int pack_verdict(unsigned char *v, const agree_call_t *a, const unsigned char *outcomes, const char *arrived,
                        const char *withdrew, int gone, vmmipc_result_t gone_code) {
  struct vmmipc_comm *c = a->c;
  int size = c->size;
  int pick = -1, pick_secondary = 1, mismatch = -1, missing = 0, withdrawn = 0;
  for (int r = 0; r < size; r++) {
    missing += !arrived[r];
    withdrawn += withdrew[r] != 0;
    if (!arrived[r]) continue;
    const unsigned char *o = outcomes + (size_t)r * OUTCOME_MAX;
    uint32_t code = vmmipc__get32(o), sec = vmmipc__get32(o + 4);
    if (mismatch < 0 && (vmmipc__get32(o + 8) != (uint32_t)a->keyed || vmmipc__get64(o + 16) != a->key))
      mismatch = r;
    if (code == 0) continue;
    if (pick < 0 || (pick_secondary && !sec)) {
      pick = r;
      pick_secondary = (int)sec;
    }
  }
  char *text = (char *)v + VERDICT_HEAD;
  size_t len = 0;
  uint32_t code = 0, drv = 0, os = 0;
  int failing = -1, broken = 0, blame = -1;
  text[0] = '\0';
  if (withdrawn) {
    /* First: those ranks returned VMMIPC_ERR_TIMEOUT naming rank 0 already
     * (whatever came after, a hang-up of theirs included). The collector
     * came, or announced, after they gave up on it: it failed them. */
    code = VMMIPC_ERR_TIMEOUT;
    failing = 0;
    broken = 1;
    vappend(text, &len, "%s: the agreement timed out: rank 0, which collects it, answered after rank(s) ", a->op);
    append_ranks(text, &len, withdrew, size);
    vappend(text, &len, " had waited %d ms for it and given up", c->timeout_ms);
  } else if (gone >= 0) { /* the others' failures are most likely its consequence */
    code = gone_code;
    failing = gone;
    broken = 1;
    vappend(text, &len, "%s: %s", a->op, vmmipc_last_error());
  } else if (pick >= 0) {
    const unsigned char *o = outcomes + (size_t)pick * OUTCOME_MAX;
    code = known_code(vmmipc__get32(o));
    failing = pick;
    int32_t named = (int32_t)vmmipc__get32(o + 24);
    blame = named >= 0 && named < size ? named : pick;
    drv = vmmipc__get32(o + 28);
    os = vmmipc__get32(o + 32);
    vappend(text, &len, "%s failed on rank %d (%s): %.*s", a->op, pick, vmmipc_strerror((vmmipc_result_t)code),
            AGREE_TEXT_MAX - 1, (const char *)o + OUTCOME_HEAD);
  } else if (mismatch >= 0) {
    code = VMMIPC_ERR_INVALID_ARG;
    failing = mismatch;
    broken = 1; /* the ranks' windows (and their signal slots) no longer match */
    const unsigned char *o = outcomes + (size_t)mismatch * OUTCOME_MAX;
    vappend(text, &len,
            "%s: rank %d passed window #%llu and rank 0 window #%llu; hint: every rank must free its windows in the "
            "same order",
            a->op, mismatch, (unsigned long long)vmmipc__get64(o + 16), (unsigned long long)a->key);
  }
  if (missing && gone < 0 && !withdrawn) {
    if (!code) code = VMMIPC_ERR_TIMEOUT;
    if (failing < 0)
      for (int r = 0; r < size && failing < 0; r++)
        if (!arrived[r]) failing = r;
    broken = 1;
    vappend(text, &len, "%s%s: the agreement timed out after %d ms: rank(s) ", len ? "; then " : "", a->op,
            c->timeout_ms);
    char *miss = calloc((size_t)size, 1);
    if (miss) {
      for (int r = 0; r < size; r++) miss[r] = !arrived[r];
      append_ranks(text, &len, miss, size);
      free(miss);
    }
    vappend(text, &len,
            " did not answer (dead, or not in this call); the communicator is broken: every later call on it fails, "
            "and vmmipc_comm_destroy frees it locally");
  } else if (broken) {
    vappend(text, &len, "%s", k_broken_tail);
  }
  vmmipc__put32(v, code);
  vmmipc__put32(v + 4, (uint32_t)failing);
  vmmipc__put32(v + 8, (uint32_t)broken);
  vmmipc__put32(v + 12, (uint32_t)(blame >= 0 ? blame : failing));
  vmmipc__put32(v + 16, drv);
  vmmipc__put32(v + 20, os);
  return VERDICT_HEAD + (int)len + 1;
}

/* The verdict becomes this rank's result and message. */
static vmmipc_result_t apply_verdict(struct vmmipc_comm *c, const unsigned char *v, size_t len) {
  if (len < VERDICT_HEAD) {
    vmmipc__error(VMMIPC_ERR_INVALID_DESC, "the agreement's verdict is %zu bytes, shorter than its header", len);
    vmmipc__break(c);
    return VMMIPC_ERR_INVALID_DESC;
  }
  uint32_t code = vmmipc__get32(v), broken = vmmipc__get32(v + 8);
  if (code == 0) return VMMIPC_SUCCESS;
  char text[VMMIPC__ERRMSG_MAX];
  int n = (int)(len - VERDICT_HEAD);
  snprintf(text, sizeof text, "%.*s", n < VMMIPC__ERRMSG_MAX ? n : VMMIPC__ERRMSG_MAX - 1,
           (const char *)v + VERDICT_HEAD);
  vmmipc__error_set_raw(text);
  vmmipc_result_t rc = known_code(code);
  /* The failing rank's record, as the message: the same on every rank. */
  vmmipc__error_state_t st = {rc, (int)vmmipc__get32(v + 12), (int)vmmipc__get32(v + 16), (int)vmmipc__get32(v + 20)};
  vmmipc__error_put(&st);
  if (broken) vmmipc__break_code(c, rc);
  return rc;
}

/* Receives every withdrawal and death notice queued at the collector;
 * those of this agreement mark their rank (earlier ones, of ranks that got
 * their verdict within the grace after all, are dropped). A notice names a
 * rank of the sender's node that died (*dead, the first one). */
static int take_withdrawals(const agree_call_t *a, char *withdrew, int *dead, int *seen_by) {
  int any = 0;
  for (;;) {
    int flag = 0;
    MPI_Status st;
    if (MPI_Iprobe(MPI_ANY_SOURCE, a->wtag, a->c->dup, &flag, &st) != MPI_SUCCESS || !flag) break;
    unsigned char b[24] = {0};
    if (MPI_Recv(b, sizeof b, MPI_BYTE, st.MPI_SOURCE, a->wtag, a->c->dup, MPI_STATUS_IGNORE) != MPI_SUCCESS) break;
    if (vmmipc__get64(b) != a->k || vmmipc__get64(b + 8) != a->c->id || st.MPI_SOURCE <= 0 ||
        st.MPI_SOURCE >= a->c->size)
      continue;
    uint32_t d = vmmipc__get32(b + 16);
    if (d == 0) {
      withdrew[st.MPI_SOURCE] = 1;
      any = 1;
    } else if (d <= (uint32_t)a->c->size && *dead < 0) {
      *dead = (int)d - 1;
      *seen_by = st.MPI_SOURCE;
    }
  }
  return any;
}

static vmmipc_result_t agree_root(const agree_call_t *a, vmmipc_result_t local, int secondary) {
  struct vmmipc_comm *c = a->c;
  int n = c->size;
  /* The collector gives up a little before the others, so that its verdict
   * (a timeout naming the silent ranks) reaches them within their bound. */
  int slack = c->timeout_ms / 10 < 1000 ? c->timeout_ms / 10 : 1000;
  int64_t deadline = vmmipc__now_ms() + c->timeout_ms - slack;
  unsigned char *outcomes = calloc((size_t)n, OUTCOME_MAX);
  unsigned char *verdict = malloc(VERDICT_MAX); /* handed to MPI: may outlive this call */
  char *flags = calloc(3 * (size_t)n + (size_t)c->node_size, 1);
  MPI_Request *reqs = malloc(2 * (size_t)n * sizeof *reqs);
  if (!outcomes || !verdict || !flags || !reqs) {
    free(outcomes);
    free(verdict);
    free(flags);
    free(reqs);
    vmmipc__error(VMMIPC_ERR_NO_MEMORY, "%s: the agreement's tables for %d ranks", a->op, n);
    vmmipc__break(c);
    return VMMIPC_ERR_NO_MEMORY;
  }
  char *arrived = flags, *withdrew = flags + n, *watch = flags + 2 * n; /* watch: by node rank */
  MPI_Request *recvs = reqs, *sends = reqs + n;
  pack_outcome(outcomes, a, local, secondary);
  arrived[0] = 1;
  for (int r = 0; r < 2 * n; r++) reqs[r] = MPI_REQUEST_NULL;
  for (int r = 1; r < n; r++)
    if (node_of(c, r) >= 0) watch[node_of(c, r)] = 1;
  int mrc = MPI_SUCCESS;
  for (int r = 1; r < n && mrc == MPI_SUCCESS; r++)
    mrc = MPI_Irecv(outcomes + (size_t)r * OUTCOME_MAX, OUTCOME_MAX, MPI_BYTE, r, a->tag, c->dup, &recvs[r]);
  int gone = -1;
  vmmipc_result_t gone_code = VMMIPC_ERR_PEER;
  int w = VMMIPC__WAIT_MPI, dead = -1, seen_by = -1;
  /* In slices, so that a death another node's rank saw (a notice) ends the wait too. */
  while (mrc == MPI_SUCCESS) {
    int64_t now = vmmipc__now_ms(), until = deadline < now + 50 ? deadline : now + 50;
    w = vmmipc__mpi_wait_watch(c, recvs + 1, n - 1, until, &mrc, watch, -1, &gone, &gone_code);
    if (w != VMMIPC__WAIT_TIMEOUT) break;
    take_withdrawals(a, withdrew, &dead, &seen_by);
    if (dead >= 0) {
      vmmipc__error(VMMIPC_ERR_PEER, "rank %d exited or hung up (rank %d, on its node, saw it go)", dead, seen_by);
      w = VMMIPC__WAIT_GONE;
      break;
    }
    if (vmmipc__now_ms() >= deadline) break;
  }
  vmmipc_result_t rc = VMMIPC_SUCCESS;
  if (w == VMMIPC__WAIT_MPI || w == VMMIPC__WAIT_ABORTED) {
    rc = w == VMMIPC__WAIT_MPI ? vmmipc__mpi_error(mrc, "%s: agreement (receiving the outcomes)", a->op)
                               : vmmipc__error(VMMIPC_ERR_ABORTED, "%s: the communicator was aborted", a->op);
    vmmipc__break_code(c, rc);
  } else {
    for (int r = 1; r < n; r++) arrived[r] = recvs[r] == MPI_REQUEST_NULL; /* completed ones are NULL */
    /* A node peer whose connection closed (it hung up, aborted, or broke the
     * protocol during the exchange) is gone even though its outcome came. */
    for (int r = 1; r < n && gone < 0 && dead < 0; r++) {
      int p = node_of(c, r);
      if (p >= 0 && vmmipc__tp_coll_fd(c->tp, p) < 0) {
        vmmipc__tp_read_coll(c->tp, p, c->epoch); /* the error naming it */
        gone = p;
        gone_code = vmmipc__tp_aborted_by(c->tp) == p ? VMMIPC_ERR_ABORTED : VMMIPC_ERR_PEER;
      }
    }
    int gone_rank = gone >= 0 ? c->rank_of[gone] : dead;
    take_withdrawals(a, withdrew, &dead, &seen_by);
    int len = pack_verdict(verdict, a, outcomes, arrived, withdrew, gone_rank, gone_code);
    /* Tests act here: a collector that stalls between deciding and announcing. */
    if (VMMIPC__INJECT("verdict")) VMMIPC__LATE(c->timeout_ms);
    if (vmmipc__get32(verdict) == 0 && take_withdrawals(a, withdrew, &dead, &seen_by))
      len = pack_verdict(verdict, a, outcomes, arrived, withdrew, gone_rank, gone_code);
    /* Node peers first, each write ordered by the kernel against its cut. */
    int told = 0;
    for (int r = 1; r < n; r++) {
      int p = node_of(c, r);
      if (p < 0 || vmmipc__tp_coll_fd(c->tp, p) < 0) continue;
      int e = vmmipc__tp_send_verdict(c->tp, p, a->k, vmmipc__get32(verdict), verdict, (size_t)len);
      if (!e) {
        told += vmmipc__get32(verdict) == 0;
        continue;
      }
      /* It cut its side (gave up), or its connection broke: no rank has SUCCESS yet
       * unless `told`, and none will get it now. */
      withdrew[r] = 1;
      if (!told && vmmipc__get32(verdict) == 0)
        len = pack_verdict(verdict, a, outcomes, arrived, withdrew, gone_rank, gone_code);
      vmmipc__put32(verdict + 8, 1); /* broken, whatever was told */
      mrc = MPI_Isend(verdict, len, MPI_BYTE, r, a->tag, c->dup, &sends[r]); /* if it still listens there */
      if (mrc != MPI_SUCCESS) break;
    }
    /* The others over MPI, the silent ones included: one that comes late
     * learns the verdict at once. */
    for (int r = 1; r < n && mrc == MPI_SUCCESS; r++) {
      int p = node_of(c, r);
      if (sends[r] != MPI_REQUEST_NULL || (p >= 0 && vmmipc__tp_coll_fd(c->tp, p) >= 0 && !withdrew[r])) continue;
      mrc = MPI_Isend(verdict, len, MPI_BYTE, r, a->tag, c->dup, &sends[r]);
    }
    int sw = VMMIPC__WAIT_MPI;
    if (mrc == MPI_SUCCESS) {
      int64_t now = vmmipc__now_ms();
      sw = vmmipc__mpi_wait(sends + 1, n - 1, deadline > now + 100 ? deadline : now + 100, &mrc);
    }
    rc = apply_verdict(c, verdict, (size_t)len);
    if (vmmipc__get32(verdict + 8)) vmmipc__break_code(c, rc ? rc : VMMIPC_ERR_PEER);
    if (sw != 0) {
      if (!rc) rc = vmmipc__mpi_error(mrc, "%s: agreement (sending the verdict)", a->op);
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
  free(flags);
  free(reqs);
  return rc;
}

/* Tells the collector this rank gives up on agreement k of this comm
 * (dead < 0), or that rank `dead` of its node died (a notice). The comm's
 * id goes too: an MPI that reuses a freed communicator's context must not
 * match it to another comm. */
static void tell_collector(const agree_call_t *a, int dead) {
  unsigned char *b = calloc(1, 24);
  if (!b) return;
  vmmipc__put64(b, a->k);
  vmmipc__put64(b + 8, a->c->id);
  vmmipc__put32(b + 16, dead < 0 ? 0u : (uint32_t)dead + 1);
  a->c->mpi_dirty = 1; /* the collector may never receive it */
  MPI_Request req = MPI_REQUEST_NULL;
  if (MPI_Isend(b, 24, MPI_BYTE, 0, a->wtag, a->c->dup, &req) == MPI_SUCCESS) MPI_Request_free(&req);
  vmmipc__mpi_keep(b); /* MPI may still read it */
}

static void withdraw(const agree_call_t *a) { tell_collector(a, -1); }

static vmmipc_result_t agree_member(const agree_call_t *a, vmmipc_result_t local, int secondary) {
  struct vmmipc_comm *c = a->c;
  int64_t deadline = vmmipc__now_ms() + c->timeout_ms;
  unsigned char *bufs = malloc(OUTCOME_MAX + VERDICT_MAX);
  char *watch = calloc((size_t)c->node_size + 1, 1);
  if (!bufs || !watch) {
    free(bufs);
    free(watch);
    vmmipc__error(VMMIPC_ERR_NO_MEMORY, "%s: agreement", a->op);
    vmmipc__break(c);
    return VMMIPC_ERR_NO_MEMORY;
  }
  unsigned char *outcome = bufs, *verdict = bufs + OUTCOME_MAX;
  size_t vlen = 0;
  int len = pack_outcome(outcome, a, local, secondary);
  int root_p = node_of(c, 0); /* the collector's node rank, or -1 off-node */
  int by_socket = root_p >= 0 && vmmipc__tp_coll_fd(c->tp, root_p) >= 0;
  if (root_p >= 0) watch[root_p] = by_socket ? 1 : 2; /* 2: its pid only (the connection is closed) */
  /* The other node peers, for hang-ups only (3): a death here is told to
   * the collector, which may be on another node and not see it. */
  for (int q = 0; c->tp && q < c->node_size; q++)
    if (q != root_p && q != c->node_rank) watch[q] = 3;
  MPI_Request reqs[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL}; /* outcome sent, verdict (MPI) */
  int mrc = MPI_SUCCESS;
  if (!by_socket) mrc = MPI_Irecv(verdict, VERDICT_MAX, MPI_BYTE, 0, a->tag, c->dup, &reqs[1]);
  if (mrc == MPI_SUCCESS) mrc = MPI_Isend(outcome, len, MPI_BYTE, 0, a->tag, c->dup, &reqs[0]);
  int got = 0, withdrawn = 0, gone = -1;
  vmmipc_result_t gone_code = VMMIPC_ERR_PEER;
  vmmipc_result_t rc = VMMIPC_SUCCESS;
  int64_t until = deadline;
  while (!got && !rc) {
    int w = mrc == MPI_SUCCESS
                ? vmmipc__mpi_wait_watch(c, reqs, 2, until, &mrc, watch, by_socket ? root_p : -1, &gone, &gone_code)
                : VMMIPC__WAIT_MPI;
    if (by_socket && vmmipc__tp_take_verdict(c->tp, root_p, a->k, verdict, VERDICT_MAX, &vlen)) {
      got = 1;
    } else if (w == VMMIPC__WAIT_DONE && !by_socket) {
      vlen = VERDICT_MAX; /* its text ends at its NUL */
      got = 1;
    } else if (w == VMMIPC__WAIT_DONE || w == VMMIPC__WAIT_VERDICT) {
      continue; /* the outcome went; the verdict is still to come */
    } else if (w == VMMIPC__WAIT_MPI) {
      rc = vmmipc__mpi_error(mrc, "%s: agreement", a->op);
    } else if (w == VMMIPC__WAIT_ABORTED || (w == VMMIPC__WAIT_GONE && gone_code == VMMIPC_ERR_ABORTED)) {
      char why[VMMIPC__ERRMSG_MAX];
      snprintf(why, sizeof why, "%s", vmmipc_last_error());
      rc = vmmipc__error(VMMIPC_ERR_ABORTED, "%s: %s", a->op, why);
    } else if (w == VMMIPC__WAIT_GONE && gone != root_p) { /* a node peer died: tell the collector */
      watch[gone] = 0;
      tell_collector(a, c->rank_of[gone]);
    } else if (w == VMMIPC__WAIT_GONE) {
      pid_t pid = vmmipc__conn_pid(vmmipc__tp_conn(c->tp), root_p);
      char why[VMMIPC__ERRMSG_MAX];
      snprintf(why, sizeof why, "%s", vmmipc_last_error());
      if (vmmipc__pid_gone(pid) || withdrawn || !by_socket) {
        rc = vmmipc__error(VMMIPC_ERR_PEER,
                           "%s: rank 0, which collects the agreement, exited or hung up while rank %d waited for its "
                           "verdict: %s",
                           a->op, c->rank, why);
        vmmipc__error_rank(0);
      } else { /* it closed our connection (or is exiting): it announces over MPI; its pid is watched */
        by_socket = 0;
        watch[root_p] = 2;
        mrc = MPI_Irecv(verdict, VERDICT_MAX, MPI_BYTE, 0, a->tag, c->dup, &reqs[1]);
      }
    } else if (!withdrawn) { /* timed out: withdraw, then a grace for a verdict on its way */
      withdraw(a);
      withdrawn = 1;
      until = vmmipc__now_ms() + grace_ms(c);
    } else { /* the grace is over: the cut decides */
      if (by_socket) {
        vmmipc__tp_cut(c->tp, root_p);
        vmmipc__tp_drain_cut(c->tp, root_p, c->epoch);
        if (vmmipc__tp_take_verdict(c->tp, root_p, a->k, verdict, VERDICT_MAX, &vlen)) {
          got = 1;
          break;
        }
      }
      rc = vmmipc__error(VMMIPC_ERR_TIMEOUT,
                         "%s: the agreement timed out after %d ms: rank 0, which collects it, did not answer (dead, "
                         "or not in this call); the communicator is broken: every later call on it fails, and "
                         "vmmipc_comm_destroy frees it locally",
                         a->op, c->timeout_ms);
      vmmipc__error_rank(0);
    }
    /* Tests act here: a rank that gives up while the verdict is in flight. */
    if (got && !withdrawn && VMMIPC__INJECT("withdraw")) withdraw(a);
  }
  if (got) {
    /* The outcome reached the collector (it decided); its send ends soon. */
    int64_t now = vmmipc__now_ms();
    int sw = vmmipc__mpi_wait(reqs, 1, (deadline > now ? deadline : now) + grace_ms(c), &mrc);
    rc = apply_verdict(c, verdict, vlen);
    if (sw != 0) {
      vmmipc__break(c);
      vmmipc__mpi_abandon(reqs, 2, 1, bufs);
      free(watch);
      return rc ? rc : vmmipc__error(VMMIPC_ERR_MPI, "%s: agreement: the outcome's send did not complete", a->op);
    }
    free(watch);
    free(bufs);
    return rc;
  }
  if (by_socket) vmmipc__tp_cut(c->tp, root_p); /* a late verdict must fail at the collector, not be lost */
  vmmipc__mpi_abandon(reqs, 2, 1, bufs);
  free(watch);
  vmmipc__break_code(c, rc);
  return rc;
}

vmmipc_result_t vmmipc__agree_key(struct vmmipc_comm *c, vmmipc_result_t local, int secondary, const char *op,
                                  int keyed, uint64_t key) {
  double t0 = vmmipc__now();
  vmmipc_result_t r;
  if (VMMIPC__INJECT("agree")) { /* a rank that never enters the agreement */
    vmmipc__error(VMMIPC_ERR_TIMEOUT, "%s: injected: this rank skipped the agreement", op);
    vmmipc__break(c);
    return VMMIPC_ERR_TIMEOUT;
  }
  /* Tests act here: a rank that comes to the agreement after the others' timeout. */
  if (VMMIPC__INJECT("agree_late")) VMMIPC__LATE(c->timeout_ms);
  if (c->size == 1) {
    r = local;
  } else {
    uint64_t k = c->agreements++;
    agree_call_t a = {c, op, k, AGREE_TAG_BASE + (int)(k % AGREE_TAG_SPAN),
                      AGREE_WITHDRAW_BASE + (int)(k % AGREE_TAG_SPAN), keyed != 0, keyed ? key : 0};
    r = c->rank == 0 ? agree_root(&a, local, secondary) : agree_member(&a, local, secondary);
  }
  c->timing.agree_s += vmmipc__now() - t0;
  return r;
}

vmmipc_result_t vmmipc__agree(struct vmmipc_comm *c, vmmipc_result_t local, int secondary, const char *op) {
  return vmmipc__agree_key(c, local, secondary, op, 0, 0);
}
