/* The queue behind every stream and the worker that drains it, in order,
 * after a delay (async.h). VMMIPC_STANDIN_ASYNC:
 *   off          every call does its work before it returns;
 *   random:SEED  each operation waits a random delay from a seeded
 *                generator: mostly tens to hundreds of microseconds,
 *                sometimes milliseconds (also the default, seed 0);
 *   late[:MS]    each operation completes MS (default 20) ms after it was
 *                queued.
 * Work that something waits for (a synchronising call, or work that must
 * follow it: the legacy stream's rule, cuStreamWaitEvent) runs without its
 * delay: work nobody waits for is seen unfinished by whatever does not wait,
 * while waiting costs (almost) nothing, so the suites do not slow down.
 * A delay counts from the enqueue, so a burst of work is late once, not once
 * per operation; a stream still completes its work in order, and makes
 * progress on its own, so that waits across processes complete. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "async.h"

#define STI_LATE_DEFAULT_MS 20
#define STI_WORKER_STACK ((size_t)1 << 20)

struct CUstream_st *sti_streams;

/* -1 until cuInit: 0 off, 1 random, 2 late. Set under the lock by cuInit,
 * read without it by entry points that pick their path before locking. */
static int sti_mode = -1;
static uint64_t sti_late_ns, sti_rng, sti_order;
/* Signalled whenever work is queued or completes, or a stream loses its
 * handle; CLOCK_MONOTONIC for the delays. */
static pthread_cond_t sti_cv;

__attribute__((constructor)) static void sti_async_init_cv(void) {
  pthread_condattr_t a;
  pthread_condattr_init(&a);
  pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
  pthread_cond_init(&sti_cv, &a);
  pthread_condattr_destroy(&a);
}

uint64_t sti_now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* splitmix64: small, and the same sequence for the same seed everywhere. */
static uint64_t sti_next_random(void) {
  uint64_t z = (sti_rng += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* The launcher's rank, so that ranks of one job draw different delays from
 * one seed (and the same ones again when the seed is replayed). */
static uint64_t sti_launcher_rank(void) {
  static const char *const names[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"};
  for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
    const char *v = getenv(names[i]);
    if (v && *v) return strtoull(v, NULL, 10);
  }
  return 0;
}

static int sti_parse_u64(const char *s, uint64_t *out) {
  char *end = NULL;
  errno = 0;
  if (!*s || *s == '-') return 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || *end) return 0;
  *out = v;
  return 1;
}

CUresult sti_async_configure(const char *env) {
  uint64_t v = 0;
  int mode;
  if (!env || !*env || strcmp(env, "random") == 0) {
    mode = 1;
  } else if (strcmp(env, "off") == 0) {
    mode = 0;
  } else if (strncmp(env, "random:", 7) == 0 && sti_parse_u64(env + 7, &v)) {
    mode = 1;
  } else if (strcmp(env, "late") == 0) {
    mode = 2;
    v = STI_LATE_DEFAULT_MS;
  } else if (strncmp(env, "late:", 5) == 0 && sti_parse_u64(env + 5, &v) && v >= 1 && v <= 60000) {
    mode = 2;
  } else {
    fprintf(stderr,
            "vmmipc stand-in driver: VMMIPC_STANDIN_ASYNC=\"%s\" is invalid: expected off, random:SEED, late or "
            "late:MS (1 to 60000); cuInit fails with CUDA_ERROR_INVALID_VALUE\n",
            env);
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (mode == 1) sti_rng = v ^ (sti_launcher_rank() * 0xd1342543de82ef95ull);
  if (mode == 2) sti_late_ns = v * 1000000u;
  __atomic_store_n(&sti_mode, mode, __ATOMIC_RELEASE);
  return CUDA_SUCCESS;
}

int sti_async_on(void) { return __atomic_load_n(&sti_mode, __ATOMIC_ACQUIRE) > 0; }

/* Mostly 10 to 300 us; one operation in 50 takes 1 to 5 ms. */
static uint64_t sti_delay_ns(void) {
  if (sti_mode == 2) return sti_late_ns;
  uint64_t r = sti_next_random();
  if (r % 50 == 0) return 1000000u + (r >> 16) % 4000000u;
  return 10000u + (r >> 16) % 290000u;
}

void *sti_op_new(size_t size, CUresult (*run)(sti_op *)) {
  sti_op *op = calloc(1, size);
  if (op) op->run = run;
  return op;
}

static void sti_op_free(sti_op *op) {
  if (op->after) sti_stream_unref(op->after);
  if (op->fini) op->fini(op);
  free(op);
}

struct CUstream_st *sti_stream_new(struct CUctx_st *ctx, unsigned flags, int kind) {
  struct CUstream_st *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->ctx = ctx;
  s->flags = flags;
  s->kind = kind;
  s->handle = 1;
  s->refs = 1;
  s->next = sti_streams;
  sti_streams = s;
  return s;
}

void sti_stream_drop_handle(struct CUstream_st *s) {
  s->handle = 0;
  pthread_cond_broadcast(&sti_cv); /* an idle worker leaves */
  sti_stream_unref(s);
}

void sti_stream_unref(struct CUstream_st *s) {
  if (--s->refs > 0 || s->kind == STI_STREAM_LEGACY) return;
  for (struct CUstream_st **pp = &sti_streams; *pp; pp = &(*pp)->next)
    if (*pp == s) {
      *pp = s->next;
      break;
    }
  free(s);
}

int sti_done_upto(const struct CUstream_st *s, uint64_t order) { return !s->head || s->head->order > order; }

uint64_t sti_last_order(void) { return sti_order; }

/* Work that something waits for runs without its delay: s's work up to
 * `order`. */
static void sti_hurry(struct CUstream_st *s, uint64_t order) {
  if (s->hurry >= order) return;
  s->hurry = order;
  pthread_cond_broadcast(&sti_cv);
}

/* Whether op, the oldest work of s, may start. The legacy stream's rule:
 * its work waits for all earlier work of the context's blocking streams,
 * and theirs for its earlier work; non-blocking streams are exempt. Work
 * that op waits for is hurried when op is. */
static int sti_may_start(struct CUstream_st *s, const sti_op *op) {
  int hurried = op->order <= s->hurry, ok = 1;
  if (op->after && !sti_done_upto(op->after, op->after_order)) {
    if (hurried) sti_hurry(op->after, op->after_order);
    ok = 0;
  }
  if (s->flags & CU_STREAM_NON_BLOCKING) return ok;
  for (struct CUstream_st *x = sti_streams; x; x = x->next) {
    if (x == s || x->ctx != s->ctx || (x->flags & CU_STREAM_NON_BLOCKING)) continue;
    if ((s->kind == STI_STREAM_LEGACY || x->kind == STI_STREAM_LEGACY) && !sti_done_upto(x, op->order)) {
      if (hurried) sti_hurry(x, op->order);
      ok = 0;
    }
  }
  return ok;
}

static void sti_wait_until(uint64_t ns) {
  struct timespec t = {(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};
  pthread_cond_timedwait(&sti_cv, &sti.mu, &t);
}

enum { STI_RAN = 1, STI_BLOCKED, STI_NOT_DUE };

/* Runs s's oldest operation if it may start now, outside the lock. Its
 * worker calls this, and so does a thread that waits for it: work that is
 * waited for then runs on the waiting thread, as with `off`, without a
 * handoff that a loaded machine makes slow. One at a time per stream. */
static int sti_run_head(struct CUstream_st *s) {
  sti_op *op = s->head;
  if (!op || s->busy || !sti_may_start(s, op)) return STI_BLOCKED;
  if (op->order > s->hurry && sti_now_ns() < op->not_before) return STI_NOT_DUE;
  int skip = s->err != CUDA_SUCCESS;
  s->busy = 1;
  s->refs++;
  pthread_mutex_unlock(&sti.mu);
  CUresult rc = skip ? CUDA_SUCCESS : op->run(op);
  pthread_mutex_lock(&sti.mu);
  s->busy = 0;
  if (rc && !s->err) s->err = rc;
  s->head = op->next;
  if (!s->head) s->tail = NULL;
  sti_op_free(op);
  pthread_cond_broadcast(&sti_cv);
  sti_stream_unref(s);
  return STI_RAN;
}

/* Serves one stream until it has neither work nor a handle (legacy streams:
 * for the life of the process). */
static void *sti_worker(void *arg) {
  struct CUstream_st *s = arg;
  pthread_mutex_lock(&sti.mu);
  for (;;) {
    sti_op *op = s->head;
    if (!op) {
      if (!s->handle && s->kind != STI_STREAM_LEGACY) break;
      pthread_cond_wait(&sti_cv, &sti.mu);
      continue;
    }
    int r = sti_run_head(s);
    if (r == STI_BLOCKED) pthread_cond_wait(&sti_cv, &sti.mu);
    if (r == STI_NOT_DUE) sti_wait_until(op->not_before);
  }
  s->worker = 0;
  sti_stream_unref(s);
  pthread_mutex_unlock(&sti.mu);
  return NULL;
}

static CUresult sti_start_worker(struct CUstream_st *s) {
  pthread_attr_t a;
  pthread_t t;
  pthread_attr_init(&a);
  pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&a, STI_WORKER_STACK);
  int e = pthread_create(&t, &a, sti_worker, s);
  pthread_attr_destroy(&a);
  if (e) return CUDA_ERROR_OUT_OF_MEMORY;
  s->worker = 1;
  s->refs++;
  return CUDA_SUCCESS;
}

CUresult sti_enqueue(struct CUstream_st *s, sti_op *op) {
  CUresult rc = s->err;
  if (!rc && !s->worker) rc = sti_start_worker(s);
  if (rc) {
    sti_op_free(op);
    return rc;
  }
  op->stream = s;
  op->order = ++sti_order;
  op->not_before = sti_now_ns() + sti_delay_ns();
  if (s->tail)
    s->tail->next = op;
  else
    s->head = op;
  s->tail = op;
  pthread_cond_broadcast(&sti_cv);
  return CUDA_SUCCESS;
}

void sti_run_if_first(struct CUstream_st *s, sti_op *op) {
  if (s->head != op || s->busy || !sti_may_start(s, op)) return;
  sti_hurry(s, op->order);
  (void)sti_run_head(s);
}

CUresult sti_wait_upto(struct CUstream_st *s, uint64_t order) {
  s->refs++;
  sti_hurry(s, order);
  while (!sti_done_upto(s, order))
    if (sti_run_head(s) != STI_RAN) pthread_cond_wait(&sti_cv, &sti.mu);
  CUresult rc = s->err;
  sti_stream_unref(s);
  return rc;
}

/* Runs one operation up to `order` of a stream of ctx (any, for NULL) that
 * may start: STI_RAN; STI_BLOCKED while such work is left; else 0. */
static int sti_run_any(struct CUctx_st *ctx, uint64_t order) {
  int left = 0;
  for (struct CUstream_st *x = sti_streams; x; x = x->next) {
    if ((ctx && x->ctx != ctx) || sti_done_upto(x, order)) continue;
    left = 1;
    if (sti_run_head(x) == STI_RAN) return STI_RAN; /* the list may have changed meanwhile */
  }
  return left ? STI_BLOCKED : 0;
}

static void sti_hurry_ctx(struct CUctx_st *ctx) {
  for (struct CUstream_st *x = sti_streams; x; x = x->next)
    if (!ctx || x->ctx == ctx) sti_hurry(x, sti_order);
}

void sti_hurry_launches(struct CUctx_st *ctx) {
  for (struct CUstream_st *x = sti_streams; x; x = x->next)
    if (x->ctx == ctx && x->launches > 0) sti_hurry(x, sti_order);
}

CUresult sti_wait_ctx(struct CUctx_st *ctx) {
  uint64_t order = sti_order;
  sti_hurry_ctx(ctx);
  for (int r; (r = sti_run_any(ctx, order));)
    if (r == STI_BLOCKED) pthread_cond_wait(&sti_cv, &sti.mu);
  for (struct CUstream_st *x = sti_streams; x; x = x->next)
    if ((!ctx || x->ctx == ctx) && x->err) return x->err;
  return CUDA_SUCCESS;
}

void sti_async_after_fork_child(void) {
  sti_async_init_cv();
  struct CUstream_st *next;
  for (struct CUstream_st *s = sti_streams; s; s = next) {
    next = s->next;
    s->refs++; /* s stays valid while its work and its worker's reference go */
    while (s->head) {
      sti_op *op = s->head;
      s->head = op->next;
      sti_op_free(op);
    }
    s->tail = NULL;
    s->busy = 0; /* a thread that was running its work is not in the child */
    if (s->worker) {
      s->worker = 0;
      s->refs--;
    }
    next = s->next;
    sti_stream_unref(s);
  }
}
