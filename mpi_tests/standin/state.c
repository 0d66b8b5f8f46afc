/* The global state, its lock, and the live-object counters for tests. */
#include <stdlib.h>
#include <time.h>

#include "async.h"

sti_state sti = {.mu = PTHREAD_MUTEX_INITIALIZER};
_Thread_local struct CUctx_st *sti_current;

/* Tests fork children that touch stand-in memory through the driver's copy
 * functions; holding the lock across fork keeps a child from inheriting it
 * locked by a thread that does not exist there. */
static void sti_prefork(void) { pthread_mutex_lock(&sti.mu); }
static void sti_postfork(void) { pthread_mutex_unlock(&sti.mu); }
/* The child has no stream workers, and the parent's queued work is not its
 * own: it is dropped (async.c). */
static void sti_postfork_child(void) {
  sti_async_after_fork_child();
  pthread_mutex_unlock(&sti.mu);
}

__attribute__((constructor)) static void sti_register_atfork(void) {
  pthread_atfork(sti_prefork, sti_postfork, sti_postfork_child);
}

CUresult sti_enter(void) {
  pthread_mutex_lock(&sti.mu);
  if (!sti.init_done || sti.init_rc != CUDA_SUCCESS) {
    /* Like the real driver: nothing works before a successful cuInit. */
    pthread_mutex_unlock(&sti.mu);
    return CUDA_ERROR_NOT_INITIALIZED;
  }
  return CUDA_SUCCESS;
}

CUresult sti_enter_ctx(void) {
  CUresult rc = sti_enter();
  if (rc != CUDA_SUCCESS) return rc;
  if (!sti_current) {
    pthread_mutex_unlock(&sti.mu);
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  return CUDA_SUCCESS;
}

void sti_leave(void) { pthread_mutex_unlock(&sti.mu); }

/* Live records, so tests can prove that rollback leaves nothing behind.
 * cuMemAlloc buffers are not counted. */
STI_EXPORT void vmmipc_standin_counts(long *allocations, long *mappings, long *reservations) {
  long a = 0, m = 0, r = 0;
  pthread_mutex_lock(&sti.mu);
  for (sti_alloc *x = sti.allocs; x; x = x->next) a++;
  for (sti_map *x = sti.maps; x; x = x->next) m++;
  for (sti_resv *x = sti.resvs; x; x = x->next) r++;
  pthread_mutex_unlock(&sti.mu);
  if (allocations) *allocations = a;
  if (mappings) *mappings = m;
  if (reservations) *reservations = r;
}

void sti_pause_env(const char *name) {
  const char *e = getenv(name);
  long us = e && *e ? strtol(e, NULL, 10) : 0;
  if (us <= 0) return;
  struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
  while (nanosleep(&ts, &ts) != 0) {
  }
}
