/* No stream left hanging (docs/sync.md, "Failure value"): once a comm fails
 * (a peer hung up, a timeout, an abort, teardown), every slot of this
 * rank's signal pool that a window uses is set to VMMIPC_SIGNAL_FAILED.
 * Stream waits (vmmipc_win_wait, vmmipc_win_barrier) on those slots compare
 * cyclically (CU_STREAM_WAIT_VALUE_GEQ), and the failure value is at or
 * above every value a wait can be for (1 to 2^63 - 1: a wait for 0 is
 * never made), so they all complete; the host calls that follow report the
 * comm's failure. Kernels that read a slot can tell by the top bit.
 *
 * The value must also stay. A peer still alive may signal late (a write
 * queued on its stream before it learnt of the failure) and overwrite it,
 * which would re-arm a stream wait still queued here behind other work; on
 * the memory-operation path that wait has no deadline. So a keeper thread
 * writes the value again, after 1 ms and then backing off to 50 ms, for as
 * long as windows use the pool: until they are freed (which needs their
 * streams synchronised first) or the comm goes. The two-phase barrier's
 * markers are 32-bit writes below the top bit (barrier.c): for its slots
 * the first write holds on its own. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "sync/release.h"
#include "sync/sync.h"

static const uint64_t failed[128] = {
#define F8 VMMIPC_SIGNAL_FAILED, VMMIPC_SIGNAL_FAILED, VMMIPC_SIGNAL_FAILED, VMMIPC_SIGNAL_FAILED, \
           VMMIPC_SIGNAL_FAILED, VMMIPC_SIGNAL_FAILED, VMMIPC_SIGNAL_FAILED, VMMIPC_SIGNAL_FAILED
    F8, F8, F8, F8, F8, F8, F8, F8, F8, F8, F8, F8, F8, F8, F8, F8
#undef F8
};

/* Writes the value into this rank's part of every slice in use (p->mu,
 * the pool's context current). Returns the slices written; -1 on a driver
 * error. */
static int write_failed(const vmmipc__cu_t *cu, struct vmmipc__pool *p, int me) {
  size_t bytes = (size_t)p->per_win * 8;
  int n = 0;
  CUresult rc = CUDA_SUCCESS;
  pthread_mutex_lock(&p->mu);
  for (int k = 0; k < p->slices && !rc; k++) {
    if (__atomic_load_n(&p->used[k], __ATOMIC_RELAXED) != 1) continue; /* free slices: no window waits there */
    CUdeviceptr at = p->base[me] + (CUdeviceptr)k * (CUdeviceptr)bytes;
    for (size_t off = 0; off < bytes && !rc; off += sizeof failed) {
      size_t len = bytes - off < sizeof failed ? bytes - off : sizeof failed;
      rc = cu->cuMemcpyHtoDAsync(at + off, failed, len, p->stream); /* a static source: no wait needed */
    }
    n++;
  }
  if (!rc) rc = cu->cuStreamSynchronize(p->stream);
  pthread_mutex_unlock(&p->mu);
  return rc ? -1 : n;
}

struct keeper_arg {
  struct vmmipc__pool *p;
  int me;
};

static void *keeper_main(void *arg) {
  struct vmmipc__pool *p = ((struct keeper_arg *)arg)->p;
  int me = ((struct keeper_arg *)arg)->me;
  free(arg);
  struct vmmipc__sync *s = p->sync;
  const vmmipc__cu_t *cu = NULL;
  if (vmmipc__cu_load(&cu) || cu->cuCtxSetCurrent(p->ctx)) return NULL;
  vmmipc__relaxed_t relaxed; /* this thread never spoils a user's capture */
  vmmipc__capture_relax(cu, &relaxed);
  long pause_ns = 1000000;
  pthread_mutex_lock(&s->mu);
  while (!s->stop) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until); /* the condition variable's clock */
    until.tv_nsec += pause_ns;
    until.tv_sec += until.tv_nsec / 1000000000L;
    until.tv_nsec %= 1000000000L;
    while (!s->stop && pthread_cond_timedwait(&s->cv, &s->mu, &until) != ETIMEDOUT) {
    }
    if (s->stop) break;
    pthread_mutex_unlock(&s->mu);
    int n = write_failed(cu, p, me);
    pthread_mutex_lock(&s->mu);
    if (n <= 0) break; /* no window left (or the driver is gone): nothing can wait */
    if (pause_ns < 50000000) pause_ns *= 2;
  }
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

void vmmipc__sync_release(struct vmmipc_comm *c) {
  struct vmmipc__pool *p = c->pool;
  const vmmipc__cu_t *cu = NULL;
  if (!p || !p->local || !p->stream || vmmipc__cu_load(&cu) != VMMIPC_SUCCESS) return;
  vmmipc__aside_t aside; /* any thread, vmmipc_comm_abort's among them */
  vmmipc__aside_begin(cu, p->ctx, &aside);
  int used = write_failed(cu, p, c->node_rank); /* best effort: the comm is failing already */
  vmmipc__aside_end(cu, &aside);
  struct vmmipc__sync *s = p->sync;
  if (!s || used <= 0) return; /* no window: nothing to keep (teardown) */
  struct keeper_arg *a = malloc(sizeof *a);
  if (!a) return;
  a->p = p;
  a->me = c->node_rank;
  pthread_mutex_lock(&s->mu);
  if (!s->keeping && !s->stop && pthread_create(&s->keeper, NULL, keeper_main, a) == 0) {
    s->keeping = 1;
    a = NULL;
  }
  pthread_mutex_unlock(&s->mu);
  free(a);
}

void vmmipc__sync_keeper_stop(struct vmmipc__sync *s) {
  pthread_mutex_lock(&s->mu);
  s->stop = 1;
  int join = s->keeping;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
  if (join) pthread_join(s->keeper, NULL);
}
