/* The agreement that makes collectives all-or-nothing, bounded by the
 * timeout, with one verdict on every rank (docs/dev/agreement.md).
 *
 * Every rank sends its outcome to rank 0 of the comm (the collector) over
 * MPI; the collector decides once and sends the same verdict to every
 * other rank over MPI. Point-to-point (not MPI_Allreduce), so that a silent
 * rank cannot hold the others beyond the timeout and can be named.
 *
 * An outcome names its call and key (a window, heap or root), so that ranks
 * in calls that do not match fail instead of matching (docs/dev/agreement.md,
 * "Calls that do not match"). It also carries a fixed-size input of the
 * call (the heap's sizes and digest), which the verdict hands to every
 * rank, and the ids of the
 * objects this rank released (vmmipc_win_release); the verdict names those
 * every rank released, freed in step when the call ends (deferred.c).
 *
 * Deciding once: a rank whose wait for the verdict times out withdraws (an
 * MPI message to the collector) and keeps waiting for two graces; a
 * verdict that comes meanwhile is obeyed. The collector never decides
 * SUCCESS once it has seen a withdrawal: it looks for them after deciding
 * and again just before announcing. Only a collector that stalls for longer
 * than the graces between that look and its sends, or dies, can leave a
 * rank with a TIMEOUT the others do not share; that rank then breaks the
 * comm and tells the others (END frames to its node, a notice to the
 * collector), so every rank's next call fails at once.
 *
 * A rank that breaks the comm on its own tells likewise: the collector by
 * sending every rank the verdict of the next agreement (failed, broken),
 * a member by sending the collector its outcome of it. While it waits, the
 * collector watches its node peers' sockets, and they watch its: a node rank
 * that dies, aborts or breaks ends the wait at once. */
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "comm/comm.h"
#include "common/le.h"
#include "common/testhooks.h"

/* Tags on the private duplicate (MPI guarantees >= 32767): the mesh
 * outcomes of vmmipc_comm_create 0x1000 (mesh_news.c), outcomes and
 * verdicts 0x2000..0x3fff, withdrawals 0x4000..0x5fff, the flush before
 * the communicators are freed 0x6000 (a member's last message) and 0x6001
 * (the collector's answer). */
#define AGREE_TAG_BASE 0x2000
#define AGREE_WITHDRAW_BASE 0x4000
#define AGREE_TAG_SPAN 0x2000
#define AGREE_BYE_TAG 0x6000
#define AGREE_FIN_TAG 0x6001
#define AGREE_TEXT_MAX 1024

/* Outcome: code, flags, key (8), agreement (8), blamed rank, driver error,
 * errno, number of released ids, input bytes, the call (k_calls), the
 * comm's epoch (8); then the input, the ids (8 each), and the message when
 * failing. */
#define OUTCOME_HEAD 56
#define OF_SECONDARY 1u /* failed because a peer gave up */
#define OF_KEYED 2u
#define OF_BROKEN 4u    /* this rank broke the comm (a notice: it takes no verdict) */
#define OF_MORE 8u      /* it released more ids >= the cursor than it sends */
#define OF_POOL 16u     /* the signal pool's agreement (its call made an MPI step on the node) */
/* Verdict: code, failing rank, broken, blamed rank, driver error, errno,
 * agreement (8), number of freed ids, input bytes per rank (0 unless
 * SUCCESS), next cursor (8); then every rank's input, the freed ids, the
 * message. */
#define VERDICT_HEAD 48
/* In the broken word: the text names no call (rank 0 did not know it, as
 * after its abort): each rank puts its own call first. */
#define VERDICT_NAME_CALL 2u
/* A notice to the collector (24 bytes): agreement, comm id, a dead node
 * peer + 1 (0: none), kind. */
#define NOTICE_ABORT 1u

/* What one agreement is about. */
typedef struct agree_call {
  struct vmmipc_comm *c;
  const char *op;
  uint64_t k;        /* agreement number, equal on every rank */
  int tag, wtag;
  int keyed;
  uint64_t key;      /* keyed: every rank must bring the same key */
  const unsigned char *mine;
  uint32_t len;      /* input bytes per rank */
  unsigned char *all; /* out: every rank's input */
  uint32_t call;     /* op's code (k_calls) */
  int pool;          /* the signal pool's agreement */
} agree_call_t;

/* The public calls that agree, by code: every outcome names its call, so
 * that ranks in different calls (or passing different keys) fail instead
 * of matching, and the collector names both. The key's kind, for the
 * message. 0: no call (a notice; a call missing here is compared as 0). */
enum { KEY_NONE, KEY_WINDOW, KEY_ROOT, KEY_HEAP };
static const struct {
  const char *op;
  int key;
} k_calls[] = {
    {"an unnamed call", KEY_NONE},
    {"vmmipc_comm_create", KEY_NONE},
    {"vmmipc_comm_destroy", KEY_NONE},
    {"vmmipc_allgather_desc", KEY_NONE},
    {"vmmipc_scatter_desc", KEY_ROOT},
    {"vmmipc_allgather_map", KEY_NONE},
    {"vmmipc_bcast_map", KEY_ROOT},
    {"vmmipc_scatter_map", KEY_ROOT},
    {"vmmipc_win_free", KEY_WINDOW},
    {"vmmipc_heap_create", KEY_NONE},
    {"vmmipc_heap_alloc", KEY_HEAP},
    {"vmmipc_heap_trim", KEY_HEAP},
    {"vmmipc_heap_destroy", KEY_HEAP},
};
#define NUM_CALLS (sizeof k_calls / sizeof k_calls[0])

static uint32_t call_code(const char *op) {
  for (uint32_t i = 1; op && i < NUM_CALLS; i++)
    if (!strcmp(op, k_calls[i].op)) return i;
  return 0;
}

static const char *call_name(uint32_t code) { return k_calls[code < NUM_CALLS ? code : 0].op; }

static size_t outcome_max(uint32_t len) { return OUTCOME_HEAD + len + 8u * VMMIPC__DEFERRED_MAX + AGREE_TEXT_MAX; }
static size_t verdict_max(const struct vmmipc_comm *c, uint32_t len) {
  return VERDICT_HEAD + (size_t)c->size * len + 8u * VMMIPC__DEFERRED_MAX + VMMIPC__ERRMSG_MAX;
}

/* Node rank of comm rank r, or -1 (off-node, or before the node split). */
static int node_of(const struct vmmipc_comm *c, int r) { return c->node_of && c->tp ? c->node_of[r] : -1; }

static int grace_ms(const struct vmmipc_comm *c) {
  int g = c->timeout_ms / 10;
  return g < 20 ? 20 : g > 1000 ? 1000 : g;
}

static vmmipc_result_t known_code(uint32_t code) {
  return code > VMMIPC__RESULT_MAX ? VMMIPC_ERR_PEER : (vmmipc_result_t)code;
}

/* This rank's outcome of agreement k (with `flags`); returns its length. */
static int pack_outcome(unsigned char *b, const agree_call_t *a, uint64_t k, vmmipc_result_t local, uint32_t flags) {
  struct vmmipc_comm *c = a->c;
  uint64_t ids[VMMIPC__DEFERRED_MAX];
  int more = 0, nrel = 0;
  if (vmmipc__failed(c)) flags |= OF_BROKEN; /* aborted here (or broken): the verdict breaks the comm everywhere */
  if (!(flags & OF_BROKEN)) nrel = vmmipc__deferred_collect(c, c->def_cursor, ids, VMMIPC__DEFERRED_MAX, &more);
  /* Room to note what the verdict may free, made now: after the verdict,
   * which the other ranks obey, nothing may fail. Without it, this rank
   * names none, so that no rank frees them (a later agreement will). */
  if (nrel && vmmipc__deferred_room(c, nrel)) nrel = more = 0;
  if (more) flags |= OF_MORE;
  if (a->keyed) flags |= OF_KEYED;
  if (a->pool) flags |= OF_POOL;
  vmmipc__put32(b, (uint32_t)local);
  vmmipc__put32(b + 4, flags);
  vmmipc__put64(b + 8, a->key);
  vmmipc__put64(b + 16, k);
  /* The failing rank's record (vmmipc_last_error_info): the rank it blames
   * (-1: itself), the driver error, errno. */
  vmmipc__error_state_t st = {VMMIPC_SUCCESS, -1, 0, 0};
  if (local) vmmipc__error_get(&st);
  vmmipc__put32(b + 24, (uint32_t)st.rank);
  vmmipc__put32(b + 28, (uint32_t)st.driver_error);
  vmmipc__put32(b + 32, (uint32_t)st.os_error);
  vmmipc__put32(b + 36, (uint32_t)nrel);
  vmmipc__put32(b + 40, a->len);
  vmmipc__put32(b + 44, a->call);
  vmmipc__put64(b + 48, c->epoch);
  size_t at = OUTCOME_HEAD;
  if (a->len) memcpy(b + at, a->mine, a->len);
  at += a->len;
  for (int i = 0; i < nrel; i++, at += 8) vmmipc__put64(b + at, ids[i]);
  if (!local) return (int)at;
  int n = snprintf((char *)b + at, AGREE_TEXT_MAX, "%s", vmmipc_last_error());
  if (n < 0) n = 0;
  if (n >= AGREE_TEXT_MAX) n = AGREE_TEXT_MAX - 1;
  return (int)at + n + 1;
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

/* The verdict's head; returns where its variable part starts. */
static size_t put_head(unsigned char *v, uint64_t k, uint32_t code, int failing, int broken, int blame, uint32_t drv,
                       uint32_t os) {
  vmmipc__put32(v, code);
  vmmipc__put32(v + 4, (uint32_t)failing);
  vmmipc__put32(v + 8, (uint32_t)broken);
  vmmipc__put32(v + 12, (uint32_t)blame);
  vmmipc__put32(v + 16, drv);
  vmmipc__put32(v + 20, os);
  vmmipc__put64(v + 24, k);
  vmmipc__put32(v + 32, 0);
  vmmipc__put32(v + 36, 0);
  vmmipc__put64(v + 40, 0);
  return VERDICT_HEAD;
}

/* A failed, broken verdict of agreement k naming `rank`, with `text`
 * (`broken`: 1, with VERDICT_NAME_CALL when the text names no call);
 * returns its length. */
static int pack_failure_text(unsigned char *v, uint64_t k, vmmipc_result_t code, int rank, uint32_t broken,
                             const char *text) {
  size_t at = put_head(v, k, (uint32_t)code, rank, (int)broken, rank, 0, 0);
  int n = snprintf((char *)v + at, VMMIPC__ERRMSG_MAX, "%s", text);
  if (n < 0) n = 0;
  if (n >= VMMIPC__ERRMSG_MAX) n = VMMIPC__ERRMSG_MAX - 1;
  return (int)at + n + 1;
}

/* The same with the current message, as the collector tells a failure of
 * its own. */
static int pack_failure(unsigned char *v, uint64_t k, vmmipc_result_t code, int rank) {
  return pack_failure_text(v, k, code, rank, 1, vmmipc_last_error());
}

/* The released ids every rank named (see agree.c's header): exact within
 * [cursor, M), where M is past the last id of every rank that had more
 * than it could send. Returns how many, and the next cursor. */
static int intersect_released(const struct vmmipc_comm *c, const unsigned char *outcomes, size_t omax,
                              uint64_t *freed, uint64_t *next) {
  uint64_t m = UINT64_MAX;
  for (int r = 0; r < c->size; r++) {
    const unsigned char *o = outcomes + (size_t)r * omax;
    uint32_t nrel = vmmipc__get32(o + 36), len = vmmipc__get32(o + 40);
    if (nrel > VMMIPC__DEFERRED_MAX) return 0;
    if ((vmmipc__get32(o + 4) & OF_MORE) && nrel) {
      uint64_t last = vmmipc__get64(o + OUTCOME_HEAD + len + 8u * (nrel - 1));
      if (last + 1 < m) m = last + 1;
    }
  }
  const unsigned char *o0 = outcomes;
  uint32_t n0 = vmmipc__get32(o0 + 36), len0 = vmmipc__get32(o0 + 40);
  int n = 0;
  for (uint32_t i = 0; i < n0; i++) {
    uint64_t id = vmmipc__get64(o0 + OUTCOME_HEAD + len0 + 8u * i);
    if (id >= m) break;
    int everyone = 1;
    for (int r = 1; r < c->size && everyone; r++) {
      const unsigned char *o = outcomes + (size_t)r * omax;
      uint32_t nr = vmmipc__get32(o + 36), lr = vmmipc__get32(o + 40);
      int has = 0;
      for (uint32_t j = 0; j < nr && !has; j++) has = vmmipc__get64(o + OUTCOME_HEAD + lr + 8u * j) == id;
      everyone = has;
    }
    if (everyone) freed[n++] = id;
  }
  *next = m == UINT64_MAX ? 0 : m;
  return n;
}

/* The verdict the whole comm sees, built by the collector. arrived[r]: its
 * outcome came; withdrew[r]: it gave up waiting; gone: a rank that hung
 * up, aborted, broke the comm or died (its error is the current message),
 * or -1; early: decided on a told break without waiting for the missing
 * ranks (they are not late). */
static int pack_verdict(unsigned char *v, const agree_call_t *a, const unsigned char *outcomes, size_t omax,
                        const char *arrived, const char *withdrew, int gone, vmmipc_result_t gone_code,
                        int fresh_withdrawals, int early) {
  struct vmmipc_comm *c = a->c;
  int size = c->size;
  int pick = -1, pick_secondary = 1, missing = 0, withdrawn = 0, told_broken = 0, other = -1;
  /* Identity: the first rank in another call than rank 0's, the first
   * whose key differs from the first keyed rank's (key_ref: a rank that
   * failed on a root that is no rank brings none), and whether the ranks
   * are out of step (below). */
  int call_mm = -1, key_mm = -1, key_ref = -1, out_of_step = 0;
  uint64_t key_val = 0;
  for (int r = 0; r < size; r++) {
    missing += !arrived[r];
    withdrawn += withdrew[r] != 0;
    if (!arrived[r]) continue;
    const unsigned char *o = outcomes + (size_t)r * omax;
    uint32_t code = vmmipc__get32(o), flags = vmmipc__get32(o + 4);
    int same_call = vmmipc__get32(o + 44) == a->call;
    if (vmmipc__get64(o + 16) != a->k || (same_call && vmmipc__get32(o + 40) != a->len)) {
      if (other < 0) other = r; /* a notice of a rank that broke, or another agreement */
      if (!(flags & OF_BROKEN)) continue;
    }
    told_broken |= (flags & OF_BROKEN) != 0;
    if (!(flags & OF_BROKEN)) {
      /* Out of step: after this verdict the ranks' epochs, or the MPI steps
       * they made on the node (the signal pool's), differ; they cannot be
       * matched again. */
      if (vmmipc__get64(o + 48) != c->epoch || ((flags & OF_POOL) != 0) != (a->pool != 0)) out_of_step = 1;
      if (!same_call) {
        if (call_mm < 0) call_mm = r;
        continue; /* its failure belongs to another call */
      }
      if (flags & OF_KEYED) {
        if (key_ref < 0) {
          key_ref = r;
          key_val = vmmipc__get64(o + 8);
        } else if (key_mm < 0 && vmmipc__get64(o + 8) != key_val) {
          key_mm = r;
        }
      }
    }
    if (code == 0) continue;
    int sec = (flags & OF_SECONDARY) != 0;
    if (pick < 0 || (pick_secondary && !sec)) {
      pick = r;
      pick_secondary = sec;
    }
  }
  /* Withdrawals the collector saw come, with ranks missing, while it kept
   * up (fresh): those ranks still wait for this verdict, and gave up
   * because of the missing ones, which are named (not rank 0). */
  if (withdrawn && missing && fresh_withdrawals) withdrawn = 0;
  char *text = NULL;
  size_t len = 0;
  uint32_t code = 0, drv = 0, os = 0, name_call = 0;
  int failing = -1, broken = 0, blame = -1;
  char body[VMMIPC__ERRMSG_MAX];
  text = body;
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
  } else if (call_mm >= 0 || key_mm >= 0) {
    /* Calls that do not match, before what failed in them (a rank that
     * waited for a root that thought itself none, or got data nobody owed
     * it: their consequences). Nothing of the calls remains; the comm stays
     * usable unless the ranks are out of step or a node peer is gone. */
    code = VMMIPC_ERR_INVALID_ARG;
    failing = call_mm >= 0 ? call_mm : key_mm;
    broken = out_of_step || told_broken || gone >= 0;
    const unsigned char *o = outcomes + (size_t)failing * omax;
    if (call_mm >= 0) { /* each rank's message starts with its own call */
      name_call = VERDICT_NAME_CALL;
      vappend(text, &len,
              "rank %d called %s and rank 0 %s; hint: every rank must make the same collective calls in the same "
              "order",
              call_mm, call_name(vmmipc__get32(o + 44)), call_name(a->call));
    } else if (k_calls[a->call].key == KEY_ROOT) {
      vappend(text, &len, "%s: rank %d passed root %d and rank %d root %d; hint: every rank must pass the same root",
              a->op, key_mm, (int)vmmipc__get64(o + 8), key_ref, (int)key_val);
    } else if (k_calls[a->call].key == KEY_HEAP) {
      vappend(text, &len,
              "%s: rank %d passed heap #%llu and rank %d heap #%llu; hint: every rank must pass the same heap",
              a->op, key_mm, (unsigned long long)vmmipc__get64(o + 8), key_ref, (unsigned long long)key_val);
    } else {
      vappend(text, &len,
              "%s: rank %d passed window #%llu and rank %d window #%llu; nothing was freed; hint: every rank must "
              "free its windows in the same order",
              a->op, key_mm, (unsigned long long)vmmipc__get64(o + 8), key_ref, (unsigned long long)key_val);
    }
    if (gone >= 0) vappend(text, &len, "; then %s", vmmipc_last_error());
    if (out_of_step) vappend(text, &len, "; the ranks are out of step after it");
  } else if (gone >= 0) { /* the others' failures are most likely its consequence */
    code = gone_code;
    failing = gone;
    broken = 1;
    vappend(text, &len, "%s: %s", a->op, vmmipc_last_error());
  } else if (pick >= 0) {
    const unsigned char *o = outcomes + (size_t)pick * omax;
    code = known_code(vmmipc__get32(o));
    failing = pick;
    int32_t named = (int32_t)vmmipc__get32(o + 24);
    blame = named >= 0 && named < size ? named : pick;
    drv = vmmipc__get32(o + 28);
    os = vmmipc__get32(o + 32);
    broken = told_broken;
    uint32_t lo = vmmipc__get32(o + 40), no = vmmipc__get32(o + 36);
    size_t at = OUTCOME_HEAD + lo + 8u * (no <= VMMIPC__DEFERRED_MAX ? no : 0);
    if (at >= omax) at = omax - 1;
    vappend(text, &len, "%s failed on rank %d (%s): %.*s", a->op, pick, vmmipc_strerror((vmmipc_result_t)code),
            (int)(omax - at - 1), (const char *)o + at);
  } else if (other >= 0) {
    code = VMMIPC_ERR_INVALID_ARG;
    failing = other;
    broken = 1; /* the ranks are out of step: nothing can be matched any more */
    vappend(text, &len,
            "%s: rank %d is in another collective call than rank 0 (its agreement carries %u bytes of input, rank "
            "0's %u); hint: every rank must make the same collective calls in the same order",
            a->op, other, (unsigned)vmmipc__get32(outcomes + (size_t)other * omax + 40), (unsigned)a->len);
  }
  if (missing && early && gone < 0 && !withdrawn && code) { /* early: a failure came flagged broken */
    vappend(text, &len, "; rank 0 decided without waiting for %s ", missing == 1 ? "rank" : "ranks");
    char *miss = calloc((size_t)size, 1);
    if (miss) {
      for (int r = 0; r < size; r++) miss[r] = !arrived[r];
      append_ranks(text, &len, miss, size);
      free(miss);
    }
    broken = 1;
    vappend(text, &len, "%s", k_broken_tail);
  } else if (missing && gone < 0 && !withdrawn) {
    /* A rank that did not come is the cause of the others' timeouts: it is
     * the one named (vmmipc_last_error_info). */
    if (!code || code == VMMIPC_ERR_TIMEOUT) {
      code = VMMIPC_ERR_TIMEOUT;
      failing = blame = -1;
      drv = os = 0;
    }
    for (int r = 0; r < size && failing < 0; r++)
      if (!arrived[r]) failing = r;
    broken = 1;
    vappend(text, &len, "%s%s: the agreement timed out after %d ms: %s ", len ? "; then " : "", a->op,
            c->timeout_ms, missing == 1 ? "rank" : "ranks");
    char *miss = calloc((size_t)size, 1);
    if (miss) {
      for (int r = 0; r < size; r++) miss[r] = !arrived[r];
      append_ranks(text, &len, miss, size);
      free(miss);
    }
    vappend(text, &len,
            " did not answer (dead, or not in this call); the communicator is broken: every later call on it fails, "
            "and vmmipc_comm_destroy frees it locally");
  } else if (broken && (withdrawn || gone >= 0 || other >= 0 || call_mm >= 0 || key_mm >= 0)) {
    vappend(text, &len, "%s", k_broken_tail);
  }
  size_t at = put_head(v, a->k, code, failing, broken | (int)name_call, blame >= 0 ? blame : failing, drv, os);
  uint64_t next = c->def_cursor;
  int nfreed = 0;
  uint64_t freed[VMMIPC__DEFERRED_MAX];
  if (!broken && !missing) nfreed = intersect_released(c, outcomes, omax, freed, &next);
  vmmipc__put32(v + 32, (uint32_t)nfreed);
  vmmipc__put64(v + 40, next);
  if (!code && a->len) { /* every rank's input */
    vmmipc__put32(v + 36, a->len);
    for (int r = 0; r < size; r++, at += a->len) memcpy(v + at, outcomes + (size_t)r * omax + OUTCOME_HEAD, a->len);
  }
  for (int i = 0; i < nfreed; i++, at += 8) vmmipc__put64(v + at, freed[i]);
  memcpy(v + at, text, len + 1);
  return (int)(at + len + 1);
}

/* The verdict becomes this rank's result and message: its inputs, its
 * freed objects (noted for the end of the call), and the broken state. */
static vmmipc_result_t apply_verdict(const agree_call_t *a, const unsigned char *v, size_t len) {
  struct vmmipc_comm *c = a->c;
  uint32_t nfreed = len >= VERDICT_HEAD ? vmmipc__get32(v + 32) : 0, plen = len >= VERDICT_HEAD ? vmmipc__get32(v + 36) : 0;
  size_t at = VERDICT_HEAD + (size_t)c->size * plen;
  if (len < VERDICT_HEAD || vmmipc__get64(v + 24) != a->k || nfreed > VMMIPC__DEFERRED_MAX ||
      (plen && plen != a->len) || at + 8u * nfreed > len) {
    vmmipc_result_t r = vmmipc__error(
        VMMIPC_ERR_INVALID_DESC, "%s: rank %d got a malformed verdict from rank 0 (%zu bytes, agreement #%llu)",
        a->op, c->rank, len, len >= VERDICT_HEAD ? (unsigned long long)vmmipc__get64(v + 24) : 0ull);
    vmmipc__error_rank(0);
    vmmipc__break(c);
    return r;
  }
  uint32_t code = vmmipc__get32(v), broken = vmmipc__get32(v + 8);
  c->def_cursor = vmmipc__get64(v + 40);
  uint64_t ids[VMMIPC__DEFERRED_MAX];
  for (uint32_t i = 0; i < nfreed; i++) ids[i] = vmmipc__get64(v + at + 8u * i);
  vmmipc__deferred_due(c, ids, (int)nfreed);
  if (code == 0) {
    if (a->len && a->all) memcpy(a->all, v + VERDICT_HEAD, (size_t)c->size * a->len);
    return VMMIPC_SUCCESS;
  }
  at += 8u * nfreed;
  char text[VMMIPC__ERRMSG_MAX];
  int n = (int)(len - at);
  snprintf(text, sizeof text, "%s%s%.*s", broken & VERDICT_NAME_CALL ? a->op : "", broken & VERDICT_NAME_CALL ? ": " : "",
           n < VMMIPC__ERRMSG_MAX ? n : VMMIPC__ERRMSG_MAX - 1, (const char *)v + at);
  vmmipc__error_set_raw(text);
  vmmipc_result_t rc = known_code(code);
  /* The failing rank's record, as the message: the same on every rank. */
  vmmipc__error_state_t st = {rc, (int)vmmipc__get32(v + 12), (int)vmmipc__get32(v + 16), (int)vmmipc__get32(v + 20)};
  vmmipc__error_put(&st);
  if (broken & 1u) vmmipc__break_code(c, rc);
  return rc;
}

/* Receives every withdrawal and death notice queued at the collector;
 * those of this agreement mark their rank (earlier ones, of ranks that got
 * their verdict within the grace after all, are dropped). A notice names a
 * rank of the sender's node that died (*dead, the first one), or says that
 * the sender, or a rank of its node, aborted (*aborter, the first one;
 * *abort_seen_by: who told, when not the aborter). Returns whether a
 * withdrawal or an abort came. */
static int take_withdrawals(const agree_call_t *a, char *withdrew, int *dead, int *seen_by, int *aborter,
                            int *abort_seen_by) {
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
    if (vmmipc__get32(b + 20) == NOTICE_ABORT) { /* aborted while its verdict was due, or seen by a node peer */
      if (d > (uint32_t)a->c->size) continue;
      if (*aborter < 0) {
        *aborter = d ? (int)d - 1 : st.MPI_SOURCE;
        *abort_seen_by = d ? st.MPI_SOURCE : -1;
      }
      any = 1;
    } else if (d == 0) {
      withdrew[st.MPI_SOURCE] = 1;
      any = 1;
    } else if (d <= (uint32_t)a->c->size && *dead < 0) {
      *dead = (int)d - 1;
      *seen_by = st.MPI_SOURCE;
    }
  }
  return any;
}

/* Whether the withdrawals are fresh: the collector kept up with them, so
 * that a withdrawn rank, which waits two graces after it sent, still waits
 * for a verdict sent now. A probe that finds nothing lets MPI take in what
 * came before the previous probe: after two empty probes in a row, at t1
 * then t2, a withdrawal found later was sent after t1 (*quiet); a stall
 * between them moves t1 back with it. Fresh: found, and now < t1 + a grace.
 * Call after each probe with its time and what it found; now < 0 only asks. */
static int withdrawals_fresh(const struct vmmipc_comm *c, int any, int64_t *quiet, int64_t *prev, int *seen,
                             int64_t now) {
  if (now >= 0 && !*seen) {
    if (any) {
      *seen = 1;
    } else {
      if (*prev >= 0) *quiet = *prev;
      *prev = now;
    }
  }
  int64_t t = now >= 0 ? now : vmmipc__now_ms();
  return *seen && *quiet >= 0 && t - *quiet < grace_ms(c);
}

/* The verdict after rank r told that it was aborted during the call, or
 * rank `seen_by` (>= 0) of its node saw its abort: every rank fails naming
 * it (the error pack_verdict takes). Returns r. */
static int blame_abort(int r, int seen_by, vmmipc_result_t *code) {
  if (seen_by < 0)
    vmmipc__error(VMMIPC_ERR_ABORTED, "rank %d aborted the communicator (vmmipc_comm_abort) during the call", r);
  else if (seen_by == r) /* vmmipc__agree_tell_aborted */
    vmmipc__error(VMMIPC_ERR_ABORTED, "rank %d aborted the communicator (vmmipc_comm_abort; it told the other nodes)", r);
  else
    vmmipc__error(VMMIPC_ERR_ABORTED, "rank %d aborted the communicator (vmmipc_comm_abort; rank %d, on its node, saw it)",
                  r, seen_by);
  vmmipc__error_rank(r);
  *code = VMMIPC_ERR_ABORTED;
  return r;
}

static int tag_of(uint64_t k) { return AGREE_TAG_BASE + (int)(k % AGREE_TAG_SPAN); }
static int wtag_of(uint64_t k) { return AGREE_WITHDRAW_BASE + (int)(k % AGREE_TAG_SPAN); }

/* A message that may never be received, on the comm's duplicate: its
 * receiver's flush takes it (vmmipc__agree_flush), or the receiver keeps
 * its communicators (a flush that did not finish, a broken comm). */
static void send_kept(struct vmmipc_comm *c, unsigned char *b, int len, int to, int tag) {
  vmmipc__mpi_send_unwaited(c->dup, b, len, MPI_BYTE, to, tag);
}

/* After this rank broke the comm on its own: tells the others, so that
 * their next call fails at once with this reason (and not after a timeout).
 * The node's peers get an END frame; the collector, the outcome of
 * agreement `next` flagged broken (its verdict of it tells everyone); the
 * collector, every rank the verdict of agreement `next`, failed and broken. */
static void tell_break(struct vmmipc_comm *c, const char *op, uint64_t next) {
  char text[VMMIPC__ERRMSG_MAX];
  snprintf(text, sizeof text, "rank %d broke the communicator: %s", c->rank, c->broken_msg);
  vmmipc__tp_abort_all(c->tp, VMMIPC_ERR_PEER, text);
  if (c->size == 1) return;
  vmmipc__error(c->broken_code, "%s", text);
  vmmipc__error_rank(c->broken_rank >= 0 ? c->broken_rank : c->rank);
  if (c->rank == 0) {
    unsigned char *v = malloc(VERDICT_HEAD + VMMIPC__ERRMSG_MAX);
    if (v) {
      int len = pack_failure(v, next, c->broken_code, c->broken_rank >= 0 ? c->broken_rank : 0);
      for (int r = 1; r < c->size; r++) send_kept(c, v, len, r, tag_of(next));
      vmmipc__mpi_keep(v);
    }
  } else {
    agree_call_t a = {c, op, next, tag_of(next), 0, 0, 0, NULL, 0, NULL, call_code(op), 0};
    unsigned char *o = malloc(outcome_max(0));
    if (o) {
      int len = pack_outcome(o, &a, next, c->broken_code, OF_BROKEN);
      send_kept(c, o, len, 0, tag_of(next));
      vmmipc__mpi_keep(o);
    }
  }
  vmmipc__error_set_raw(text); /* the caller's message stays this rank's own reason */
}

/* Breaks the comm with the current error, naming `rank`, and tells. */
static vmmipc_result_t break_tell(const agree_call_t *a, vmmipc_result_t rc, int rank, uint64_t next) {
  char why[VMMIPC__ERRMSG_MAX];
  snprintf(why, sizeof why, "%s", vmmipc_last_error());
  vmmipc__error_rank(rank);
  vmmipc__break_code(a->c, rc);
  tell_break(a->c, a->op, next);
  vmmipc__error(rc, "%s", why);
  vmmipc__error_rank(rank);
  return rc;
}

/* Ranks whose requests did not complete, for a message. */
static void pending_ranks(const MPI_Request *reqs, int n, char *set) {
  for (int i = 0; i < n; i++) set[i + 1] = reqs[i] != MPI_REQUEST_NULL;
}

/* Whether a completed receive holds a told break: an outcome flagged
 * OF_BROKEN that carries a failure (tell_break's; a rank whose comm broke
 * during the call on another thread may bring one with none). */
static int told_break_came(const unsigned char *outcomes, size_t omax, const MPI_Request *recvs, int n) {
  for (int r = 1; r < n; r++) {
    const unsigned char *o = outcomes + (size_t)r * omax;
    if (recvs[r] == MPI_REQUEST_NULL && (vmmipc__get32(o + 4) & OF_BROKEN) && vmmipc__get32(o)) return 1;
  }
  return 0;
}

static vmmipc_result_t agree_root(const agree_call_t *a, vmmipc_result_t local, int secondary) {
  struct vmmipc_comm *c = a->c;
  int n = c->size;
  /* The collector gives up a little before the others, so that its verdict
   * (a timeout naming the silent ranks) reaches them within their bound;
   * the call's steps gave up earlier still (deadline.c). */
  int64_t deadline = vmmipc__deadline(c) - vmmipc__slack_ms(c);
  size_t omax = outcome_max(a->len), vmax = verdict_max(c, a->len);
  unsigned char *outcomes = calloc((size_t)n, omax);
  unsigned char *verdict = malloc(vmax); /* handed to MPI: may outlive this call */
  char *flags = calloc(3 * (size_t)n + (size_t)c->node_size, 1);
  MPI_Request *reqs = malloc(2 * (size_t)n * sizeof *reqs);
  if (!outcomes || !verdict || !flags || !reqs) {
    free(outcomes);
    free(verdict);
    free(flags);
    free(reqs);
    vmmipc__error(VMMIPC_ERR_NO_MEMORY, "%s: rank 0: the agreement's tables for %d ranks", a->op, n);
    return break_tell(a, VMMIPC_ERR_NO_MEMORY, 0, a->k);
  }
  char *arrived = flags, *withdrew = flags + n, *watch = flags + 2 * n; /* watch: by node rank */
  MPI_Request *recvs = reqs, *sends = reqs + n;
  pack_outcome(outcomes, a, a->k, local, secondary ? OF_SECONDARY : 0);
  arrived[0] = 1;
  for (int r = 0; r < 2 * n; r++) reqs[r] = MPI_REQUEST_NULL;
  for (int r = 1; r < n; r++)
    if (node_of(c, r) >= 0) watch[node_of(c, r)] = 1;
  int mrc = MPI_SUCCESS;
  for (int r = 1; r < n && mrc == MPI_SUCCESS; r++)
    mrc = MPI_Irecv(outcomes + (size_t)r * omax, (int)omax, MPI_BYTE, r, a->tag, c->dup, &recvs[r]);
  int gone = -1;
  vmmipc_result_t gone_code = VMMIPC_ERR_PEER;
  int w = VMMIPC__WAIT_MPI, dead = -1, seen_by = -1, aborter = -1, abort_seen_by = -1;
  int64_t quiet = -1, prev = -1; /* withdrawals_fresh's record */
  int seen_w = 0, told = 0;
  /* In slices, so that a death another node's rank saw (a notice) ends the
   * wait too, and short enough (a fifth of a grace, at most 50 ms) that a
   * withdrawal is found fresh (withdrawals_fresh spans two slices). */
  int slice = grace_ms(c) / 5;
  slice = slice < 4 ? 4 : slice > 50 ? 50 : slice;
  while (mrc == MPI_SUCCESS) {
    int64_t now = vmmipc__now_ms(), until = deadline < now + slice ? deadline : now + slice;
    w = vmmipc__mpi_wait_watch(c, recvs + 1, n - 1, until, &mrc, watch, &gone, &gone_code);
    if (w != VMMIPC__WAIT_TIMEOUT) break;
    int64_t t = vmmipc__now_ms();
    int any_w = take_withdrawals(a, withdrew, &dead, &seen_by, &aborter, &abort_seen_by);
    withdrawals_fresh(c, any_w, &quiet, &prev, &seen_w, t);
    if (aborter >= 0) { /* decided at once: nothing it waits for can change that */
      w = VMMIPC__WAIT_GONE;
      break;
    }
    if (dead >= 0) {
      vmmipc__error(VMMIPC_ERR_PEER, "rank %d exited or hung up (rank %d, on its node, saw it go)", dead, seen_by);
      w = VMMIPC__WAIT_GONE;
      break;
    }
    /* A rank told that it broke the comm (its outcome, flagged, with its
     * failure): the verdict breaks it whatever else comes, and names that
     * failure; a rank still missing may never come (one that broke without
     * telling, on another node), so it is not waited for. */
    if ((told = told_break_came(outcomes, omax, recvs, n)) != 0) {
      w = VMMIPC__WAIT_GONE;
      break;
    }
    /* A rank gave up while outcomes are missing: decided now. It waits two
     * graces for this verdict, then blames the collector; waited out to this
     * rank's own deadline (later when it came late), the withdrawal would
     * turn stale and the verdict name the collector, not the missing rank
     * (chaos seed 11009 without MPS; 521 on the stand-in). Nothing that
     * comes later could make it a success. Outcomes that came since the
     * last test count as arrived. */
    if (seen_w) {
      w = vmmipc__mpi_wait(recvs + 1, n - 1, 0, &mrc) == VMMIPC__WAIT_DONE ? VMMIPC__WAIT_DONE : w;
      break;
    }
    if (vmmipc__now_ms() >= deadline) break;
  }
  if (VMMIPC__INJECT("agree_mpi")) { /* tests: MPI fails in the collector's wait */
    w = VMMIPC__WAIT_MPI;
    mrc = MPI_ERR_OTHER;
  }
  vmmipc_result_t rc = VMMIPC_SUCCESS;
  int len = 0;
  if (w == VMMIPC__WAIT_MPI || w == VMMIPC__WAIT_ABORTED) {
    /* No decision: everyone is told this failure as the verdict (best
     * effort: MPI itself may be what failed). */
    rc = w == VMMIPC__WAIT_MPI
             ? vmmipc__mpi_error(mrc, "%s: rank 0: agreement (receiving the outcomes)", a->op)
             : vmmipc__error(VMMIPC_ERR_ABORTED, "%s: rank 0 aborted the communicator (vmmipc_comm_abort)", a->op);
    vmmipc__error_rank(0);
    len = pack_failure(verdict, a->k, rc, 0);
    vmmipc__break_code(c, rc);
    for (int r = 1; r < n; r++) send_kept(c, verdict, len, r, a->tag);
    vmmipc__mpi_keep(verdict);
    verdict = NULL;
    if (w == VMMIPC__WAIT_MPI) {
      char text[VMMIPC__ERRMSG_MAX];
      snprintf(text, sizeof text, "rank 0 broke the communicator: %s", c->broken_msg);
      vmmipc__tp_abort_all(c->tp, VMMIPC_ERR_PEER, text);
      vmmipc__error(rc, "%s", c->broken_msg);
      vmmipc__error_rank(0);
    }
  } else {
    for (int r = 1; r < n; r++) arrived[r] = recvs[r] == MPI_REQUEST_NULL; /* completed ones are NULL */
    /* A node peer whose connection closed (it hung up, aborted, broke the
     * comm or the protocol during the exchange) is gone even though its
     * outcome came. */
    for (int r = 1; r < n && gone < 0 && dead < 0; r++) {
      int p = node_of(c, r);
      if (p >= 0 && vmmipc__tp_hung_up(c->tp, p)) {
        vmmipc__tp_read_coll(c->tp, p, c->epoch); /* the error naming it */
        gone = p;
        gone_code = vmmipc__tp_aborted_by(c->tp) == p ? VMMIPC_ERR_ABORTED : VMMIPC_ERR_PEER;
      }
    }
    int gone_rank = gone >= 0 ? c->rank_of[gone] : dead;
    if (w != VMMIPC__WAIT_DONE) {
      int64_t t = vmmipc__now_ms();
      int any_w = take_withdrawals(a, withdrew, &dead, &seen_by, &aborter, &abort_seen_by);
      withdrawals_fresh(c, any_w, &quiet, &prev, &seen_w, t);
    }
    if (gone_rank < 0 && aborter >= 0) gone_rank = blame_abort(aborter, abort_seen_by, &gone_code);
    int fresh = withdrawals_fresh(c, 0, &quiet, &prev, &seen_w, -1);
    len = pack_verdict(verdict, a, outcomes, omax, arrived, withdrew, gone_rank, gone_code, fresh, told);
    /* Tests act here: a collector that stalls between deciding and announcing. */
    if (VMMIPC__INJECT("verdict")) VMMIPC__LATE(c->timeout_ms);
    /* Withdrawals, once decided, just before announcing: a late collector
     * finds those of the ranks that gave up on it. A probe that finds
     * nothing lets MPI take in what came while this rank did not progress
     * (a stall before the call, or since deciding); a second one sees it.
     * Always twice: a collector cannot tell that it came late. */
    /* A failure too (chaos seed 515): a collector that comes after the
     * withdrawn ranks gave up (they name rank 0) must not name another
     * rank; unless the withdrawals are fresh (pack_verdict). */
    {
      int64_t t = vmmipc__now_ms();
      int any = take_withdrawals(a, withdrew, &dead, &seen_by, &aborter, &abort_seen_by);
      withdrawals_fresh(c, any, &quiet, &prev, &seen_w, t);
      if (!any) {
        t = vmmipc__now_ms();
        any = take_withdrawals(a, withdrew, &dead, &seen_by, &aborter, &abort_seen_by);
        withdrawals_fresh(c, any, &quiet, &prev, &seen_w, t);
      }
      if (gone_rank < 0 && aborter >= 0) gone_rank = blame_abort(aborter, abort_seen_by, &gone_code);
      int still = withdrawals_fresh(c, 0, &quiet, &prev, &seen_w, -1);
      if (any || still != fresh)
        len = pack_verdict(verdict, a, outcomes, omax, arrived, withdrew, gone_rank, gone_code, still, told);
    }
    /* Tests act here: the connection to a node peer breaks after deciding. */
    if (VMMIPC__INJECT("verdict_drop"))
      for (int r = 1; r < n; r++)
        if (node_of(c, r) >= 0 && vmmipc__tp_coll_fd(c->tp, node_of(c, r)) >= 0) {
          shutdown(vmmipc__tp_coll_fd(c->tp, node_of(c, r)), SHUT_RDWR);
          break;
        }
    /* Every rank, the silent ones included: one that comes late learns the
     * verdict at once. */
    for (int r = 1; r < n && mrc == MPI_SUCCESS; r++) {
      mrc = MPI_Isend(verdict, len, MPI_BYTE, r, a->tag, c->dup, &sends[r]);
      /* Tests act here: a collector that stalls after telling one rank. */
      if (r == 1 && VMMIPC__INJECT("verdict_slow")) VMMIPC__STALL(c->timeout_ms + grace_ms(c) * 5 / 4);
      if (r == 1 && VMMIPC__INJECT("verdict_stuck")) VMMIPC__STALL(c->timeout_ms * 2 + 4 * grace_ms(c));
    }
    /* A rank that is in the agreement has its receive posted: a send that
     * does not complete within the grace goes to a rank that is gone or
     * stuck. */
    int sw = VMMIPC__WAIT_MPI;
    if (mrc == MPI_SUCCESS) sw = vmmipc__mpi_wait(sends + 1, n - 1, vmmipc__now_ms() + grace_ms(c), &mrc);
    if (VMMIPC__INJECT("verdict_wait")) sw = VMMIPC__WAIT_TIMEOUT; /* tests: the send wait fails */
    rc = apply_verdict(a, verdict, (size_t)len);
    if (sw != VMMIPC__WAIT_DONE) {
      /* The verdict went out, or went to some: it stands. The comm cannot go
       * on (a rank may lack it), and everyone is told so. */
      vmmipc_result_t keep_rc = rc;
      char keep[VMMIPC__ERRMSG_MAX];
      snprintf(keep, sizeof keep, "%s", vmmipc_last_error());
      vmmipc__error_state_t keep_st = {VMMIPC_SUCCESS, -1, 0, 0};
      vmmipc__error_get(&keep_st);
      if (sw == VMMIPC__WAIT_MPI) {
        vmmipc__mpi_error(mrc, "%s: rank 0: sending the agreement's verdict", a->op);
      } else {
        char *late = calloc((size_t)n, 1);
        char list[256] = "";
        size_t ll = 0;
        if (late) {
          pending_ranks(sends + 1, n - 1, late);
          append_ranks(list, &ll, late, n);
          free(late);
        }
        vmmipc__error(VMMIPC_ERR_PEER,
                      "%s: rank 0 could not complete the send of the agreement's verdict%s%s within %d ms (a rank "
                      "gone or stuck)",
                      a->op, ll ? " to rank(s) " : "", list, grace_ms(c));
      }
      if (!c->broken) break_tell(a, VMMIPC_ERR_PEER, 0, a->k + 1);
      vmmipc__mpi_abandon(sends + 1, n - 1, 0, verdict); /* MPI keeps the message; we keep its buffer */
      verdict = NULL;
      if (keep_rc) {
        vmmipc__error_set_raw(keep);
        vmmipc__error_put(&keep_st);
      } else {
        vmmipc__error_clear();
      }
      rc = keep_rc;
    }
  }
  if (w != VMMIPC__WAIT_DONE) { /* receives that will not complete */
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
 * (dead < 0), or that rank `dead` of its node died (a notice), or (kind
 * NOTICE_ABORT) that this rank (dead < 0) or rank `dead` of its node
 * aborted. The comm's id goes too: an MPI
 * that reuses a freed communicator's context must not match it to another
 * comm. */
static void tell_collector_kind(const agree_call_t *a, int dead, uint32_t kind) {
  unsigned char *b = calloc(1, 24);
  if (!b) return;
  vmmipc__put64(b, a->k);
  vmmipc__put64(b + 8, a->c->id);
  vmmipc__put32(b + 16, dead < 0 ? 0u : (uint32_t)dead + 1);
  vmmipc__put32(b + 20, kind);
  send_kept(a->c, b, 24, 0, a->wtag); /* the collector may never receive it */
  vmmipc__mpi_keep(b);
}

static void tell_collector(const agree_call_t *a, int dead) { tell_collector_kind(a, dead, 0); }

/* Whether this rank may tell over MPI now: other ranks, and MPI still up
 * (a call after MPI_Finalize tells nobody). */
static int may_tell(const struct vmmipc_comm *c) {
  int finalized = 1;
  return c->size > 1 && c->dup != MPI_COMM_NULL && MPI_Finalized(&finalized) == MPI_SUCCESS && !finalized;
}

/* Tells the next agreement that rank `aborter` aborted, `how` said in the
 * verdict's text: rank 0 sends every rank that agreement's verdict, a
 * member sends rank 0 an "aborted" notice (its verdict names the member as
 * the one that saw it, or says the aborter told). */
static void tell_next_aborted(struct vmmipc_comm *c, int aborter, const char *how) {
  uint64_t next = c->agreements;
  if (c->rank != 0) {
    agree_call_t a = {c, "", next, tag_of(next), wtag_of(next), 0, 0, NULL, 0, NULL, 0, 0};
    tell_collector_kind(&a, aborter, NOTICE_ABORT); /* blame_abort words it */
    return;
  }
  unsigned char *v = malloc(VERDICT_HEAD + VMMIPC__ERRMSG_MAX);
  if (!v) return;
  char text[VMMIPC__ERRMSG_MAX];
  snprintf(text, sizeof text, "rank %d aborted the communicator (vmmipc_comm_abort; %s)%s", aborter, how,
           k_broken_tail);
  int len = pack_failure_text(v, next, VMMIPC_ERR_ABORTED, aborter, 1 | VERDICT_NAME_CALL, text);
  for (int r = 1; r < c->size; r++) send_kept(c, v, len, r, tag_of(next));
  vmmipc__mpi_keep(v);
}

/* An abort while this rank was idle, or after its outcome had gone out,
 * reaches its node's peers as END frames, and through them rank 0 (a
 * member's wait watches its node peers); the ranks of other nodes, when
 * this rank is rank 0 or alone on its node, would wait out the timeout.
 * So the abort itself (where MPI allows its thread a call), else its next
 * call, tells the agreement they are in, or will be in: the next one, whose
 * number every rank shares. */
void vmmipc__agree_tell_aborted(struct vmmipc_comm *c) {
  if (c->abort_agreed || !may_tell(c)) return;
  c->abort_agreed = 1;
  tell_next_aborted(c, c->rank, "it told the other nodes");
}

void vmmipc__agree_tell_peer_aborted(struct vmmipc_comm *c, int aborter) {
  if (c->peer_abort_told || aborter < 0 || aborter >= c->size || !may_tell(c)) return;
  c->peer_abort_told = 1;
  tell_next_aborted(c, aborter, "rank 0, on its node, saw it");
}

void vmmipc__agree_tell_break(struct vmmipc_comm *c, const char *op) {
  if (!c->broken || !may_tell(c)) return; /* after MPI_Finalize: its node peers see the seal's hang-up */
  vmmipc__error_saved_t keep;
  vmmipc__error_save(&keep);
  tell_break(c, op, c->agreements); /* the next agreement: every rank's, by number */
  vmmipc__error_restore(&keep);
}

static vmmipc_result_t agree_member(const agree_call_t *a, vmmipc_result_t local, int secondary) {
  struct vmmipc_comm *c = a->c;
  int64_t deadline = vmmipc__deadline(c); /* the call's (deadline.c) */
  size_t omax = outcome_max(a->len), vmax = verdict_max(c, a->len);
  unsigned char *bufs = malloc(omax + vmax);
  char *watch = calloc((size_t)c->node_size + 1, 1);
  if (!bufs || !watch) {
    free(bufs);
    free(watch);
    vmmipc__error(VMMIPC_ERR_NO_MEMORY, "%s: rank %d: the agreement's buffers", a->op, c->rank);
    return break_tell(a, VMMIPC_ERR_NO_MEMORY, c->rank, a->k);
  }
  unsigned char *outcome = bufs, *verdict = bufs + omax;
  int len = pack_outcome(outcome, a, a->k, local, secondary ? OF_SECONDARY : 0);
  int root_p = node_of(c, 0); /* the collector's node rank, or -1 off-node */
  /* The collector's socket is read (its END frame: an abort or a break);
   * 2: its pid only (the connection is closed). */
  if (root_p >= 0) watch[root_p] = vmmipc__tp_coll_fd(c->tp, root_p) >= 0 ? 1 : 2;
  /* The other node peers, for hang-ups and an END frame queued first (4):
   * a death or an abort here is told to the collector, which may be on
   * another node and not see it (an aborted rank's own later calls fail
   * before they reach it). */
  for (int q = 0; c->tp && q < c->node_size; q++)
    if (q != root_p && q != c->node_rank) watch[q] = 4;
  MPI_Request reqs[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL}; /* verdict, outcome */
  int mrc = MPI_Irecv(verdict, (int)vmax, MPI_BYTE, 0, a->tag, c->dup, &reqs[0]);
  if (mrc == MPI_SUCCESS) mrc = MPI_Isend(outcome, len, MPI_BYTE, 0, a->tag, c->dup, &reqs[1]);
  /* A node peer's abort that an exchange read (its END frame closed the
   * connection; in this call, or in an earlier one that had succeeded
   * already): told now, as the wait below would. It never sends an outcome
   * again, and its END is gone from the socket. */
  int ab = vmmipc__tp_aborted_by(c->tp);
  if (mrc == MPI_SUCCESS && ab >= 0 && ab != root_p && ab < c->node_size && watch[ab] &&
      vmmipc__tp_coll_fd(c->tp, ab) < 0) {
    watch[ab] = 0;
    tell_collector_kind(a, c->rank_of[ab], NOTICE_ABORT);
  }
  int got = 0, withdrawn = 0, gone = -1, told = 0;
  vmmipc_result_t gone_code = VMMIPC_ERR_PEER, ended = VMMIPC_SUCCESS;
  char ended_why[VMMIPC__ERRMSG_MAX] = "";
  vmmipc_result_t rc = VMMIPC_SUCCESS;
  int64_t until = deadline;
  if (root_p >= 0 && watch[root_p] == 2 && vmmipc__tp_aborted_by(c->tp) == root_p) {
    /* Its END frame (an abort while it was idle) came in this call's
     * exchange and closed the connection: as when it comes in the wait
     * below, not a wait for the timeout. */
    ended = VMMIPC_ERR_ABORTED;
    snprintf(ended_why, sizeof ended_why, "rank 0 aborted the communicator (vmmipc_comm_abort)");
    int64_t soon = vmmipc__now_ms() + grace_ms(c);
    if (soon < until) until = soon;
  }
  while (!got && !rc) {
    int w = mrc == MPI_SUCCESS ? vmmipc__mpi_wait_watch(c, reqs, 2, until, &mrc, watch, &gone, &gone_code)
                               : VMMIPC__WAIT_MPI;
    if (w == VMMIPC__WAIT_DONE) {
      got = 1;
    } else if (w == VMMIPC__WAIT_MPI) {
      rc = vmmipc__mpi_error(mrc, "%s: rank %d: agreement", a->op, c->rank);
      rc = break_tell(a, rc, c->rank, a->k + 1);
      told = 1;
    } else if (w == VMMIPC__WAIT_ABORTED) {
      /* Aborted while its verdict is due: the collector is told (unless it
       * decided already, it fails every rank naming this one), and its
       * verdict, on its way, is waited for two graces and obeyed, as after
       * a withdrawal: one verdict. */
      char why[VMMIPC__ERRMSG_MAX];
      snprintf(why, sizeof why, "%s", vmmipc_last_error());
      if (!withdrawn) tell_collector_kind(a, -1, NOTICE_ABORT);
      vmmipc__mpi_wait(reqs, 1, vmmipc__now_ms() + 2 * grace_ms(c), &mrc);
      if (reqs[0] == MPI_REQUEST_NULL) {
        got = 1;
      } else {
        rc = vmmipc__error(VMMIPC_ERR_ABORTED, "%s: %s", a->op, why);
        vmmipc__error_rank(c->rank);
      }
    } else if (w == VMMIPC__WAIT_GONE && gone != root_p) { /* a node peer died or aborted: tell the collector */
      watch[gone] = 0;
      tell_collector_kind(a, c->rank_of[gone], gone_code == VMMIPC_ERR_ABORTED ? NOTICE_ABORT : 0);
    } else if (w == VMMIPC__WAIT_GONE) {
      pid_t pid = vmmipc__conn_pid(vmmipc__tp_conn(c->tp), root_p);
      char why[VMMIPC__ERRMSG_MAX];
      snprintf(why, sizeof why, "%s", vmmipc_last_error());
      if (vmmipc__pid_gone(pid) || watch[root_p] == 2) {
        rc = vmmipc__error(VMMIPC_ERR_PEER,
                           "%s: rank 0, which collects the agreement, exited or hung up while rank %d waited for its "
                           "verdict: %s",
                           a->op, c->rank, why);
        vmmipc__error_rank(0);
      } else {
        /* It aborted, broke the comm, closed our connection or is exiting.
         * Its verdict, if it decided, was sent before, over MPI, and is
         * obeyed: it is waited for a grace more, its pid watched. */
        watch[root_p] = 2;
        ended = gone_code;
        snprintf(ended_why, sizeof ended_why, "%s", why);
        int64_t soon = vmmipc__now_ms() + grace_ms(c);
        if (soon < until) until = soon;
      }
    } else if (ended == VMMIPC_ERR_ABORTED) { /* no verdict came after its END: it failed this call */
      rc = vmmipc__error(ended, "%s: %s", a->op, ended_why);
      vmmipc__error_rank(0);
    } else if (ended) {
      /* It hung up or broke the comm, alive, and sent no verdict: the ranks
       * off its node, which cannot see that, time out on it; so does this
       * one (one verdict: TIMEOUT naming rank 0). */
      rc = vmmipc__error(VMMIPC_ERR_TIMEOUT,
                         "%s: the agreement failed: rank 0, which collects it, gave no verdict (%s); the "
                         "communicator is broken: every later call on it fails, and vmmipc_comm_destroy frees it "
                         "locally",
                         a->op, ended_why);
      vmmipc__error_rank(0);
    } else if (!withdrawn) { /* timed out: withdraw, then two graces for a verdict on its way */
      tell_collector(a, -1);
      withdrawn = 1;
      until = vmmipc__now_ms() + 2 * grace_ms(c);
    } else { /* the collector is dead or stuck */
      vmmipc__error(VMMIPC_ERR_TIMEOUT,
                    "%s: the agreement timed out after %d ms: rank 0, which collects it, did not answer (dead, stuck, "
                    "or not in this call); the communicator is broken: every later call on it fails, and "
                    "vmmipc_comm_destroy frees it locally",
                    a->op, c->timeout_ms);
      rc = break_tell(a, VMMIPC_ERR_TIMEOUT, 0, a->k + 1);
      told = 1;
    }
    /* Tests act here: a rank that gives up while the verdict is in flight. */
    if (got && !withdrawn && VMMIPC__INJECT("withdraw")) tell_collector(a, -1);
  }
  if (got) {
    rc = apply_verdict(a, verdict, vmax); /* the text ends at its NUL */
    if (rc && __atomic_load_n(&c->aborted, __ATOMIC_ACQUIRE)) { /* the aborted rank's own code, the verdict's rank */
      vmmipc__error_code(VMMIPC_ERR_ABORTED);
      rc = VMMIPC_ERR_ABORTED;
    }
    if (reqs[1] != MPI_REQUEST_NULL) { /* after an abort: the outcome may still be on its way */
      vmmipc__mpi_abandon(reqs + 1, 1, 0, bufs);
      bufs = NULL;
    }
    free(watch);
    free(bufs);
    return rc;
  }
  vmmipc__mpi_abandon(reqs, 1, 1, NULL);
  vmmipc__mpi_abandon(reqs + 1, 1, 0, bufs);
  free(watch);
  if (!told) vmmipc__break_code(c, rc);
  return rc;
}

vmmipc_result_t vmmipc__agree_io(struct vmmipc_comm *c, vmmipc_result_t local, int secondary, const char *op,
                                 vmmipc__agree_io_t *io) {
  double t0 = vmmipc__now();
  vmmipc_result_t r;
  if (VMMIPC__INJECT("agree")) { /* a rank that never enters the agreement */
    vmmipc__error(VMMIPC_ERR_TIMEOUT, "%s: injected: rank %d skipped the agreement", op, c->rank);
    vmmipc__break(c);
    return VMMIPC_ERR_TIMEOUT;
  }
  /* Tests act here: a rank that comes to the agreement after the others' timeout. */
  if (VMMIPC__INJECT("agree_late")) VMMIPC__LATE(c->timeout_ms);
  uint64_t k = c->agreements++;
  agree_call_t a = {c,
                    op,
                    k,
                    tag_of(k),
                    wtag_of(k),
                    io && io->keyed,
                    io && io->keyed ? io->key : 0,
                    io ? io->mine : NULL,
                    io ? (uint32_t)io->len : 0,
                    io ? io->all : NULL,
                    call_code(op),
                    io && io->pool};
  if (c->size == 1) {
    r = local;
    if (!r && a.len && a.all) memcpy(a.all, a.mine, a.len);
    uint64_t ids[VMMIPC__DEFERRED_MAX];
    int more = 0, n = vmmipc__deferred_collect(c, 0, ids, VMMIPC__DEFERRED_MAX, &more);
    if (n && vmmipc__deferred_room(c, n)) n = 0;
    vmmipc__deferred_due(c, ids, n);
  } else {
    /* Aborted here since its part of the call ended: the call fails naming
     * this rank rather than succeed on the others alone, even if every
     * outcome is in already at the collector. */
    if (!local && __atomic_load_n(&c->aborted, __ATOMIC_ACQUIRE)) {
      local = vmmipc__error(VMMIPC_ERR_ABORTED,
                            "%s: rank %d aborted the communicator (vmmipc_comm_abort) during the call", op, c->rank);
      vmmipc__error_rank(c->rank);
      secondary = 0;
      c->abort_agreed = 1; /* this agreement tells every rank: nothing to tell after it */
    }
    r = c->rank == 0 ? agree_root(&a, local, secondary) : agree_member(&a, local, secondary);
  }
  /* A failed call keeps nothing: what its peers sent this rank and it never
   * read (it failed first, or a peer's ABORT ended its exchange) holds the
   * senders' device memory through its fds. When every rank took part, all
   * of it is queued by now (each rank's exchange ended before its outcome
   * went out, and the verdict came after every outcome): dropped here (up
   * to a bound per peer), not by the comm's next collective, which still
   * drops what a rank that was given up on sends later. */
  if (r && c->tp) vmmipc__tp_drop_stale(c->tp, c->epoch);
  c->deadline_ms = 0; /* a step after this one starts a bound of its own */
  c->timing.agree_s += vmmipc__now() - t0;
  return r;
}

vmmipc_result_t vmmipc__agree_key(struct vmmipc_comm *c, vmmipc_result_t local, int secondary, const char *op,
                                  int keyed, uint64_t key) {
  vmmipc__agree_io_t io = {keyed, key, NULL, 0, NULL, 0};
  return vmmipc__agree_io(c, local, secondary, op, &io);
}

vmmipc_result_t vmmipc__agree(struct vmmipc_comm *c, vmmipc_result_t local, int secondary, const char *op) {
  return vmmipc__agree_io(c, local, secondary, op, NULL);
}

/* Receives one message queued for this rank on comm->dup from `source`
 * (any tag). Returns 1 and its source and tag, 0 if none is queued, -1 if
 * MPI fails (a message matched but not received stays MPI's). */
static int take_any(struct vmmipc_comm *c, int source, int *from, int *tag) {
  int flag = 0, count = 0;
  MPI_Message m = MPI_MESSAGE_NULL;
  MPI_Status st;
  if (MPI_Improbe(source, MPI_ANY_TAG, c->dup, &flag, &m, &st) != MPI_SUCCESS) return -1;
  if (!flag) return 0;
  if (MPI_Get_count(&st, MPI_BYTE, &count) != MPI_SUCCESS || count < 0) return -1;
  void *b = malloc(count ? (size_t)count : 1);
  if (!b) return -1;
  int rc = MPI_Mrecv(b, count, MPI_BYTE, &m, MPI_STATUS_IGNORE);
  free(b);
  *from = st.MPI_SOURCE;
  *tag = st.MPI_TAG;
  return rc == MPI_SUCCESS ? 1 : -1;
}

/* A message of no bytes, never waited for: it completes at once. */
static void send_empty(struct vmmipc_comm *c, int to, int tag) {
  static char none;
  MPI_Request req = MPI_REQUEST_NULL;
  if (MPI_Isend(&none, 0, MPI_BYTE, to, tag, c->dup, &req) == MPI_SUCCESS) MPI_Request_free(&req);
}

/* A member's withdrawal (or notice) may reach the collector after the
 * verdict it gave up on came (chaos seed 910: `withdraw` in the destroy's
 * agreement). The collector reads withdrawals only while it decides, so an
 * MPI that got the message after the collector freed its communicator kept
 * it for the next communicator with the same context: Open MPI matched it
 * there, or, when the sender's rank is past that communicator's size, died
 * in mca_pml_ob1_add_comm. MPI does not let one message overtake another
 * of the same sender that the same receive matches: a receive of any tag
 * that gets a member's last message got everything the member sent before
 * it. The collector's answer does the same for the member. */
void vmmipc__agree_flush(struct vmmipc_comm *c) {
  if (c->size < 2 || c->dup == MPI_COMM_NULL) return;
  int n = c->size, left;
  char *need = NULL;
  if (c->rank == 0) {
    need = malloc((size_t)n);
    if (!need) {
      c->mpi_dirty = 1;
      return;
    }
    memset(need, 1, (size_t)n);
    need[0] = 0;
    left = n - 1;
  } else {
    send_empty(c, 0, AGREE_BYE_TAG);
    left = 1;
  }
  int64_t until = vmmipc__now_ms() + 2 * grace_ms(c);
  long pause_ns = 2000;
  for (unsigned spin = 0; left > 0;) {
    int from = -1, tag = -1;
    int got = take_any(c, c->rank == 0 ? MPI_ANY_SOURCE : 0, &from, &tag);
    if (got < 0) break;
    if (got) {
      if (c->rank != 0 && tag == AGREE_FIN_TAG) {
        left = 0;
      } else if (c->rank == 0 && tag == AGREE_BYE_TAG && from > 0 && from < n && need[from]) {
        need[from] = 0;
        left--;
        send_empty(c, from, AGREE_FIN_TAG);
      }
      continue; /* anything else (a late withdrawal) is dropped, now received */
    }
    if (vmmipc__now_ms() >= until) break;
    if (spin < 64) { /* a few yields first: the answer is usually close */
      if (spin++ > 16) sched_yield();
      continue;
    }
    struct timespec ts = {0, pause_ns};
    nanosleep(&ts, NULL);
    if (pause_ns < 1000000) pause_ns *= 2;
  }
  free(need);
  if (left > 0) c->mpi_dirty = 1; /* a message may still come: MPI keeps the communicators */
}
