/* auto's trial: which host-sync path is faster is a property of the GPU,
 * the driver and MPS, not of a rule (one H200 under MPS: memory operations
 * won both host rows at 2 ranks; one H100: kernels did; without MPS
 * kernels of two processes time-slice). So every node rank measures both,
 * once per comm, in its first window's pool step (coll/pool.c), where a
 * window call may load code and wait for the context anyway.
 *
 * Two windows of the pool's own, slices 0 and 1 (one per path: the two
 * barriers count differently in the same slots), run the real calls on a
 * private stream with the path forced:
 *   signal + wait  a token ring over the node ranks (node rank 0 signals
 *                  first), rounds x n hops; the figure is ns per hop;
 *   barrier        back to back; the figure is ns per barrier.
 * A warm-up round of each, then one timed round each; where one path is
 * ORDERS_APART times slower (kernels time-slicing without MPS), it is out;
 * else more rounds of each: about 1 ms of the slowest figure (12 to 128
 * rounds), no more than fit a quarter of the comm's timeout by the first
 * figures, timed in two passes of opposite order. After each stage the
 * node's ranks allgather their figures and take the slowest rank's, so
 * all pick alike: kernels where at least 5% faster (memory operations
 * take no SM). A path that failed on any rank (a launch refused) is out:
 * that rank writes the failure value over the path's slice at every peer,
 * which releases their waits for it, and the node goes on with the other
 * path.
 *
 * Bounded: the stream is polled against the call's deadline; a node rank
 * that does not take part, an abort, or a node peer's abort, hang-up or
 * exit ends the wait (the allgathers watch for the same), and this rank
 * then writes the failure value into its part of both slices, which
 * releases its own waits (all of them read its own part), before it
 * returns. After the last allgather no rank writes into the slices (each
 * synchronised its stream before it); both are handed back owed a
 * zeroing, which the next take of them does. */
#include <sched.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>

#include "common/testhooks.h"
#include "sync/sync.h"

#define WARM 1
#define ROUNDS_MIN 12
#define ROUNDS_MAX 128 /* 64 a pass: the stream's queue stays short, so no enqueue blocks behind waits */
#define TARGET_NS 1000000 /* stage 2 times about 1 ms of the slowest figure, where the budget allows */
#define ORDERS_APART 8
enum { SIG_MEMOPS, SIG_KERNELS, BAR_MEMOPS, BAR_KERNELS, FIGS };

/* The path (VMMIPC__PATH_*) a figure times. */
static int path_of(int fig) {
  return fig == SIG_KERNELS || fig == BAR_KERNELS ? VMMIPC__PATH_KERNELS : VMMIPC__PATH_MEMOPS;
}

/* What each node rank tells after a stage (MPI_BYTE). */
struct trial_rec {
  int32_t ready;  /* 1: reached the trial with nothing failed so far */
  int32_t failed; /* bit per path (VMMIPC__PATH_*) that failed here */
  uint64_t ns[FIGS];
  int64_t left_ms; /* of the call's bound, after the stage */
};

typedef struct {
  struct vmmipc_comm *c;
  struct vmmipc_win w[2]; /* memory operations, kernels */
  CUstream st;
  uint64_t value[2];      /* each window's ring value: grows by every round asked for, enqueued or not */
  const vmmipc__cu_t *cu;
  const char *op;
} trial_t;

/* `rounds` of `fig` enqueued on t->st. The ring's values move on by
 * `rounds` even when a call is refused, so that they stay those of the
 * peers for the window's next figure. */
static vmmipc_result_t enqueue(trial_t *t, int fig, int rounds) {
  struct vmmipc_comm *c = t->c;
  const int k = path_of(fig) == VMMIPC__PATH_KERNELS;
  struct vmmipc_win *w = &t->w[k];
  const int n = c->node_size, q = c->node_rank;
  const int right = c->rank_of[(q + 1) % n], left = c->rank_of[(q + n - 1) % n];
  const int ring = fig == SIG_MEMOPS || fig == SIG_KERNELS;
  const uint64_t base = t->value[k];
  if (ring) t->value[k] += (uint64_t)rounds;
  vmmipc_result_t r = VMMIPC_SUCCESS;
  for (int i = 0; i < rounds && !r; i++) {
    for (int call = 0; call < (ring ? 2 : 1) && !r; call++) {
      if (VMMIPC__INJECT("trial_call")) { /* tests: the driver refuses this call */
        r = vmmipc__error(VMMIPC_ERR_CUDA, "%s: auto's trial: a call refused (injected)", t->op);
      } else if (!ring) {
        r = vmmipc_win_barrier(w, t->st);
      } else { /* node rank 0 signals first, the others pass the token on */
        const uint64_t v = base + (uint64_t)i + 1;
        const int signal = (call == 0) == (q == 0);
        r = signal ? vmmipc_win_signal(w, right, v, t->st) : vmmipc_win_wait(w, left, v, t->st);
      }
    }
  }
  return r;
}

/* The failure value over `slices` slices from `first` of node rank q's
 * part, through the pool's private stream. */
static void fill_failed(trial_t *t, int q, int first, int slices) {
  struct vmmipc__pool *p = t->c->pool;
  uint64_t v[512]; /* copied from synchronously, chunk by chunk: no allocation to fail */
  for (size_t i = 0; i < sizeof v / sizeof *v; i++) v[i] = VMMIPC_SIGNAL_FAILED;
  size_t words = (size_t)slices * (size_t)p->per_win;
  CUdeviceptr at = p->base[q] + (CUdeviceptr)first * (CUdeviceptr)p->per_win * 8;
  pthread_mutex_lock(&p->mu);
  for (size_t w = 0; w < words; w += sizeof v / sizeof *v) {
    size_t n = words - w < sizeof v / sizeof *v ? words - w : sizeof v / sizeof *v;
    if (t->cu->cuMemcpyHtoDAsync(at + w * 8, v, n * 8, p->stream) || t->cu->cuStreamSynchronize(p->stream)) break;
  }
  pthread_mutex_unlock(&p->mu);
}

/* Into this rank's part of both slices: every wait of the trial reads
 * this rank's part, so all of its own are released. */
static void release(trial_t *t) { fill_failed(t, t->c->node_rank, 0, 2); }

/* This rank could not enqueue a call of `fig` (a launch or a batch
 * refused): the path is out here, and the failure value over the path's
 * slice at every peer releases their waits for this rank's signals and
 * arrivals, so that they finish the stage and learn at its allgather that
 * the path is out everywhere. Their figures for it are void; nobody picks
 * it. */
static void fill_peers(trial_t *t, int path) {
  for (int q = 0; q < t->c->node_size; q++)
    if (q != t->c->node_rank) fill_failed(t, q, path == VMMIPC__PATH_KERNELS, 1);
}

static void refused(trial_t *t, int fig, struct trial_rec *mine) {
  mine->failed |= path_of(fig);
  fill_peers(t, path_of(fig));
}

/* A node peer that aborted, broke the comm or left (its END frame queued
 * first on its connection, a hang-up, or its pid gone): its node rank, the
 * error set naming it; else -1. Reads nothing: an END frame stays queued
 * for the calls after. */
static int peer_gone(trial_t *t, vmmipc_result_t *code) {
  struct vmmipc_comm *c = t->c;
  for (int q = 0; c->tp && q < c->node_size; q++) {
    if (q == c->node_rank) continue;
    const int end = vmmipc__tp_end_first(c->tp, q), rank = c->rank_of[q];
    const pid_t pid = vmmipc__conn_pid(vmmipc__tp_conn(c->tp), q);
    if (end == VMMIPC_ERR_ABORTED || vmmipc__tp_aborted_by(c->tp) == q)
      *code = vmmipc__error(VMMIPC_ERR_ABORTED,
                            "%s: auto's trial of the host-sync paths: rank %d aborted the communicator "
                            "(vmmipc_comm_abort)",
                            t->op, rank);
    else if (end == VMMIPC_ERR_PEER || end == -2 || vmmipc__pid_gone(pid))
      *code = vmmipc__error(VMMIPC_ERR_PEER,
                            "%s: auto's trial of the host-sync paths: rank %d (pid %d) broke the communicator, hung "
                            "up or exited",
                            t->op, rank, (int)pid);
    else
      continue;
    vmmipc__error_rank(rank);
    return q;
  }
  return -1;
}

/* Waits for t->st until the call's deadline; on a timeout, an abort or a
 * node peer gone (looked for every 10 ms), releases this rank's waits and
 * drains the stream. */
static vmmipc_result_t drain(trial_t *t) {
  struct vmmipc_comm *c = t->c;
  int64_t deadline = vmmipc__step_deadline(c), started = vmmipc__now_ms(), look = started + 10;
  int released = 0, gone = -1;
  vmmipc_result_t gone_code = VMMIPC_SUCCESS;
  vmmipc__error_saved_t why; /* peer_gone's message, kept over the release */
  for (;;) {
    CUresult rc = t->cu->cuStreamQuery(t->st);
    if (rc == CUDA_SUCCESS && !released) return VMMIPC_SUCCESS;
    if (rc != CUDA_SUCCESS && rc != CUDA_ERROR_NOT_READY)
      return vmmipc__cu_error(rc, NULL, "%s: auto's trial: cuStreamQuery", t->op);
    int aborted = __atomic_load_n(&c->aborted, __ATOMIC_ACQUIRE);
    int64_t now = vmmipc__now_ms();
    if (!released && gone < 0 && now >= look) {
      look = now + 10;
      gone = peer_gone(t, &gone_code);
      if (gone >= 0) vmmipc__error_save(&why);
    }
    if (released && (rc == CUDA_SUCCESS || now > deadline)) {
      if (aborted) return vmmipc__aborted_here(c, t->op, "");
      if (gone >= 0) {
        vmmipc__error_restore(&why);
        return gone_code;
      }
      const int n = c->node_size, left = c->rank_of[(c->node_rank + n - 1) % n];
      return vmmipc__error(VMMIPC_ERR_TIMEOUT,
                           "%s: auto's trial of the host-sync paths timed out: a rank of this node stopped taking "
                           "part (rank %d waited in the ring for rank %d, or in a barrier)%s",
                           t->op, c->rank, left, rc == CUDA_SUCCESS ? "" : "; its stream is still busy");
    }
    if (aborted || now > deadline || gone >= 0) { /* its own waits released; a late write may re-arm one: again */
      release(t);
      if (!released) deadline = now + c->timeout_ms;
      released = 1;
    }
    /* Back off once it takes long: a path that time-slices need not be timed to the microsecond. */
    if (now - started < 2) {
      sched_yield();
    } else {
      struct timespec ts = {0, 100000};
      nanosleep(&ts, NULL);
    }
  }
}

/* A call of `fig` that failed (e): on a comm that failed meanwhile (an
 * abort, a break), the call's error; else a refusal (above). */
static vmmipc_result_t failed_call(trial_t *t, vmmipc_result_t e, int fig, struct trial_rec *mine) {
  if (!e) return VMMIPC_SUCCESS;
  if (vmmipc__failed(t->c)) return e;
  refused(t, fig, mine);
  return VMMIPC_SUCCESS;
}

/* Once this rank's stream drained after a refusal: the failure value again
 * over the slices of the paths refused here, since its calls queued before
 * the refusal may have landed over it meanwhile (a peer may wait on that
 * slot now). */
static void refill(trial_t *t, const struct trial_rec *mine) {
  for (int path = VMMIPC__PATH_MEMOPS; path <= VMMIPC__PATH_KERNELS; path <<= 1)
    if (mine->failed & path) fill_peers(t, path);
}

/* After enqueueing `fig` (e: its error): a refusal taken (above), the
 * stream drained, and then a refusal's failure value written again. */
static vmmipc_result_t settle(trial_t *t, vmmipc_result_t e, int fig, struct trial_rec *mine) {
  vmmipc_result_t r = failed_call(t, e, fig, mine);
  if (!r) r = drain(t);
  if (!r && e) refill(t, mine);
  return r;
}

/* One stage: `rounds` of each figure not ruled out, timed here; then the
 * node's slowest rank's figures in all_ns. Many rounds are timed in two
 * passes, the second in the reverse order (a drift over the stage, as a
 * clock ramping up, weighs on both paths alike). After a failure (`r`)
 * the allgather only: the node's ranks stay in step. */
static vmmipc_result_t stage(trial_t *t, vmmipc_result_t r, int rounds, const int *skip, struct trial_rec *mine,
                             uint64_t *all_ns, int *failed, int64_t *left_ms) {
  struct vmmipc_comm *c = t->c;
  double spent[FIGS] = {0};
  int done[FIGS] = {0};
  const int passes = rounds >= 2 * ROUNDS_MIN ? 2 : 1;
  memset(mine->ns, 0, sizeof mine->ns);
  for (int pass = 0; pass < passes && !r; pass++) {
    const int chunk = pass ? rounds - rounds / 2 : passes == 2 ? rounds / 2 : rounds;
    for (int i = 0; i < FIGS && !r; i++) {
      const int f = pass ? FIGS - 1 - i : i;
      int path = path_of(f);
      if (skip[f] || (mine->failed & path) || (f >= BAR_MEMOPS && c->node_size < 2)) continue;
      /* An untimed round first: the ranks leave the allgather before it (or
       * the other figures) unevenly. A refused launch or operation takes
       * the path out (before the drain: peers may be waiting for this rank). */
      vmmipc_result_t e0 = enqueue(t, f, 1);
      r = settle(t, e0, f, mine);
      if (r || e0) continue;
      double t0 = vmmipc__now();
      vmmipc_result_t e = enqueue(t, f, chunk);
      r = settle(t, e, f, mine);
      if (!r && !e) {
        spent[f] += vmmipc__now() - t0;
        done[f] += chunk;
      }
    }
  }
  for (int f = 0; f < FIGS && !r; f++) { /* ns per hop or barrier; a path that failed here gives none */
    int path = path_of(f);
    double per = (double)done[f] * (f < BAR_MEMOPS ? c->node_size : 1);
    if (done[f] && !(mine->failed & path)) mine->ns[f] = (uint64_t)(spent[f] * 1e9 / per) + 1;
  }
  struct trial_rec *all = NULL;
  /* Aborted: no further call on the comm will match anything on the node. */
  if (__atomic_load_n(&c->aborted, __ATOMIC_ACQUIRE)) return r ? r : vmmipc__aborted_here(c, t->op, "");
  vmmipc__error_saved_t first; /* a failure here is what the call reports, not the allgather's after it */
  if (r) vmmipc__error_save(&first);
  mine->left_ms = vmmipc__step_deadline(c) - vmmipc__now_ms();
  vmmipc_result_t g = vmmipc__sync_allgather(c, mine, sizeof *mine, (void **)&all, "host-sync trial figures", t->op);
  if (r) vmmipc__error_restore(&first);
  if (!r) r = g;
  for (int q = 0; all && q < c->node_size; q++) {
    *failed |= all[q].failed;
    if (left_ms && (q == 0 || all[q].left_ms < *left_ms)) *left_ms = all[q].left_ms; /* the node's least */
    for (int f = 0; f < FIGS; f++)
      if (all[q].ns[f] > all_ns[f]) all_ns[f] = all[q].ns[f];
  }
  free(all);
  return r;
}

/* Kernels where at least 5% faster. */
static int pick(uint64_t memops, uint64_t kernels, int failed) {
  if (failed & VMMIPC__PATH_KERNELS) return VMMIPC__PATH_MEMOPS;
  if (failed & VMMIPC__PATH_MEMOPS) return VMMIPC__PATH_KERNELS;
  return kernels && kernels * 100 <= memops * 95 ? VMMIPC__PATH_KERNELS : VMMIPC__PATH_MEMOPS;
}

/* Both stages (their allgathers even after a failure, `r`), then the
 * picks. */
static vmmipc_result_t measure(trial_t *t, vmmipc_result_t r, struct trial_rec *mine) {
  struct vmmipc_comm *c = t->c;
  uint64_t ns[FIGS] = {0};
  int failed = 0, skip[FIGS] = {0};
  for (int f = 0; f < FIGS && !r; f++) { /* first launches and loads: untimed */
    if (mine->failed & path_of(f)) continue;
    r = settle(t, enqueue(t, f, WARM), f, mine);
  }
  int64_t left_ms = 0;
  r = stage(t, r, 1, skip, mine, ns, &failed, &left_ms);
  for (int f = 0; !r && f < FIGS; f += 2) { /* orders of magnitude apart: no need for more */
    uint64_t m = ns[f], k = ns[f + 1];
    skip[f] = skip[f + 1] = (m && k && (m >= ORDERS_APART * k || k >= ORDERS_APART * m)) || (failed & 3);
  }
  /* Stage 2 takes at most a quarter of the comm's timeout and half of what
   * the slowest rank had left of the call, by stage 1's figures (all the
   * same on every node rank, so are the rounds). */
  /* Within that, as many rounds as time about TARGET_NS of the slowest
   * figure (a GPU's hops of a few µs: a few hundred), at least ROUNDS_MIN. */
  uint64_t per_round = 0, slowest = 0, budget = (uint64_t)c->timeout_ms * 250000u;
  if (left_ms < 0) left_ms = 0;
  if ((uint64_t)left_ms * 500000u < budget) budget = (uint64_t)left_ms * 500000u; /* half what is left */
  for (int f = 0; f < FIGS; f++) {
    if (skip[f]) continue;
    uint64_t one = ns[f] * (uint64_t)(f < BAR_MEMOPS ? c->node_size : 1);
    per_round += one;
    if (one > slowest) slowest = one;
  }
  uint64_t want = slowest ? TARGET_NS / slowest : ROUNDS_MIN;
  want = want < ROUNDS_MIN ? ROUNDS_MIN : want > ROUNDS_MAX ? ROUNDS_MAX : want;
  int rounds = per_round && budget / per_round < want ? (int)(budget / per_round) : (int)want;
  if (rounds < 2)
    for (int f = 0; f < FIGS; f++) skip[f] = 1;
  uint64_t more[FIGS] = {0};
  r = stage(t, r, rounds, skip, mine, more, &failed, NULL);
  if (r) return r;
  if ((failed & (VMMIPC__PATH_MEMOPS | VMMIPC__PATH_KERNELS)) == (VMMIPC__PATH_MEMOPS | VMMIPC__PATH_KERNELS))
    return vmmipc__error(VMMIPC_ERR_CUDA,
                         "%s: auto's trial: both host-sync paths were refused on this node (a kernel launch or a "
                         "stream memory operation failed on some rank; on rank %d: %s)",
                         t->op, c->rank,
                         mine->failed == 3 ? "both" : mine->failed == VMMIPC__PATH_MEMOPS ? "memory operations"
                                                  : mine->failed ? "kernels" : "neither");
  struct vmmipc__sync *s = c->pool->sync;
  for (int f = 0; f < FIGS; f++)
    if (!skip[f]) ns[f] = more[f];
  s->path = pick(ns[SIG_MEMOPS], ns[SIG_KERNELS], failed);
  s->barrier_path = c->node_size < 2 ? s->path : pick(ns[BAR_MEMOPS], ns[BAR_KERNELS], failed);
  s->by = failed ? VMMIPC_SYNC_BY_SUPPORT : VMMIPC_SYNC_BY_TRIAL;
  memcpy(s->trial_ns, ns, sizeof ns);
  return VMMIPC_SUCCESS;
}

vmmipc_result_t vmmipc__sync_trial(struct vmmipc_comm *c, struct vmmipc__pool *p, vmmipc_result_t local,
                                   const char *op) {
  trial_t t;
  memset(&t, 0, sizeof t);
  t.c = c;
  t.op = op;
  struct vmmipc__pool *held = c->pool;
  vmmipc_buf_t *peers = NULL;
  vmmipc__relaxed_t relaxed;
  int relax = 0;
  /* What the trial needs, made before the node's ranks tell they are ready. */
  vmmipc_result_t prep = local;
  int able = !local && p->slices >= 2; /* a pool of one window (a test's cap) keeps memory operations */
  if (able) {
    c->pool = p; /* the calls find the pool through the comm; published for real after the agreement */
    peers = calloc((size_t)c->node_size * 2, sizeof *peers);
    if (!peers) prep = vmmipc__error(VMMIPC_ERR_NO_MEMORY, "%s: auto's trial", op);
  }
  if (able && !prep) prep = vmmipc__cu_load(&t.cu);
  for (int i = 0; able && i < 2 && !prep; i++) {
    t.w[i].comm = c;
    t.w[i].slice = i;
    t.w[i].peers = peers + (size_t)i * (size_t)c->node_size; /* none: vmmipc_win_query answers NULL */
    t.w[i].forced_path = i ? VMMIPC__PATH_KERNELS : VMMIPC__PATH_MEMOPS;
    prep = vmmipc__sync_win_ready(c, i, op);
  }
  if (able && !prep) {
    relax = 1;
    vmmipc__capture_relax(t.cu, &relaxed); /* a user's capture on another stream goes on */
    CUresult rc = t.cu->cuStreamCreate(&t.st, CU_STREAM_NON_BLOCKING);
    if (rc) prep = vmmipc__cu_error(rc, NULL, "%s: auto's trial: cuStreamCreate", op);
  }
  /* Whether every node rank is here and ready: else none measures. */
  struct trial_rec mine, *all = NULL;
  memset(&mine, 0, sizeof mine);
  mine.ready = able && !prep;
  vmmipc__error_saved_t first; /* this rank's failure is what the call reports */
  if (prep) vmmipc__error_save(&first);
  vmmipc_result_t r = vmmipc__sync_allgather(c, &mine, sizeof mine, (void **)&all, "host-sync trial records", op);
  if (prep) vmmipc__error_restore(&first);
  int ready = !r;
  for (int q = 0; all && q < c->node_size; q++) ready &= all[q].ready;
  free(all);
  /* Every node rank makes the same MPI steps, three allgathers, whatever
   * failed where: one that made fewer would leave the node comm's
   * collectives unmatched for every later call. A rank that does not
   * measure posts both stages' allgathers with nothing timed. */
  int injected = ready && VMMIPC__INJECT("trial"); /* a rank that stalls or dies mid-trial */
  if (ready && VMMIPC__INJECT("trial_abort")) vmmipc_comm_abort(c); /* as another thread's abort could */
  if (injected) r = vmmipc__error(VMMIPC_ERR_SYSTEM, "%s: auto's trial: left out (injected)", op);
  vmmipc_result_t m = measure(&t, ready && !injected ? VMMIPC_SUCCESS : r ? r : VMMIPC_ERR_PEER, &mine);
  if (ready && !injected) r = m;
  if (t.st) t.cu->cuStreamDestroy(t.st);
  if (relax) vmmipc__capture_restore(t.cu, &relaxed);
  for (int i = 0; i < 2; i++) vmmipc__windev_free(&t.w[i]);
  free(peers);
  if (c->pool == p) {
    vmmipc__pool_give_zeroed(c, 0);
    vmmipc__pool_give_zeroed(c, 1);
  }
  c->pool = held;
  /* A rank that was not ready fails the pool's agreement with its own error. */
  return local ? local : prep ? prep : r;
}
