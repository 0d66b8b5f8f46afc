/* The gate of the queued mode: a batch is enqueued behind a stream wait on
 * a local flag, and the host opens it once everything is enqueued, so that
 * CUDA events time what the GPU does, not how fast the host enqueues.
 *
 * If the host ever blocks while the stream is held (a full stream queue, a
 * library that synchronises inside an enqueue), nobody would open the gate;
 * a watchdog thread opens it after timeout_s and the batch is flagged. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/driver.h"
#include "sync/sync.h"

static int sy_env_on(const char *name) {
  const char *v = getenv(name);
  return v && strcmp(v, "1") == 0;
}

static void sy_gate_write(sy_gate_t *g, uint64_t epoch) {
  BD_CHECK(sy_drv.cuStreamWriteValue64(g->release, g->flag, epoch, CU_STREAM_WRITE_VALUE_DEFAULT));
}

static void *sy_gate_watch(void *arg) {
  sy_gate_t *g = arg;
  /* Driver calls from this thread need the same context. */
  if (sy_drv.cuCtxSetCurrent(g->ctx) != CUDA_SUCCESS) return NULL;
  pthread_mutex_lock(&g->mu);
  while (!g->stop) {
    if (g->opened >= g->armed) {
      pthread_cond_wait(&g->cv, &g->mu);
      continue;
    }
    double due = g->armed_at + g->timeout_s;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double left = due - bench_now();
    if (left <= 0) {
      sy_gate_write(g, g->armed);
      g->opened = g->armed;
      g->forced = 1;
      continue;
    }
    long long ns = (long long)ts.tv_nsec + (long long)(left * 1e9);
    ts.tv_sec += (time_t)(ns / 1000000000LL);
    ts.tv_nsec = (long)(ns % 1000000000LL);
    int rc = pthread_cond_timedwait(&g->cv, &g->mu, &ts);
    (void)rc; /* woken or timed out: the loop re-checks */
  }
  pthread_mutex_unlock(&g->mu);
  return NULL;
}

void sy_gate_init(sy_ctx_t *c, int wanted, double timeout_s) {
  sy_gate_t *g = &c->gate;
  memset(g, 0, sizeof *g);
  g->timeout_s = timeout_s;
  pthread_mutex_init(&g->mu, NULL);
  pthread_cond_init(&g->cv, NULL);
  if (!wanted) {
    snprintf(g->why, sizeof g->why, "queued mode not selected (--modes)");
  } else if (bd.is_standin && !sy_env_on("VMMIPC_BENCH_GATE_STANDIN")) {
    /* (The smoke test sets it: then every held batch waits for the
     * watchdog, which is how that path gets exercised.) */
    snprintf(g->why, sizeof g->why,
             "the CPU stand-in runs stream work synchronously: a held stream would hold the host too");
  } else if (c->vmm_skipped[0]) {
    snprintf(g->why, sizeof g->why, "the gate needs 64-bit stream memory operations: %s", c->vmm_skipped);
  }
  if (!g->why[0]) {
    void *p;
    size_t sz;
    vmmipc_result_t r = vmmipc_alloc(8, &g->buf);
    if (!r) r = vmmipc_buf_ptr(g->buf, &p, &sz);
    if (r) {
      snprintf(g->why, sizeof g->why, "allocating the gate flag: %s", vmmipc_last_error());
    } else {
      g->flag = (CUdeviceptr)(uintptr_t)p;
      BD_CHECK(bd.cuMemsetD8(g->flag, 0, 8));
      BD_CHECK(bd.cuCtxSynchronize());
      BD_CHECK(bd.cuStreamCreate(&g->release, CU_STREAM_NON_BLOCKING));
      BD_CHECK(sy_drv.cuCtxGetCurrent(&g->ctx));
      int e = pthread_create(&g->th, NULL, sy_gate_watch, g);
      if (e)
        snprintf(g->why, sizeof g->why, "starting the gate watchdog: %s", strerror(e));
      else
        g->have_thread = 1;
    }
  }
  bench_agree_skip(g->why, sizeof g->why);
  g->on = !g->why[0];
}

void sy_gate_close(sy_gate_t *g, CUstream s) {
  /* Armed before the wait is enqueued: even that enqueue may block. */
  pthread_mutex_lock(&g->mu);
  uint64_t epoch = ++g->armed;
  g->armed_at = bench_now();
  g->forced = 0;
  pthread_cond_signal(&g->cv);
  pthread_mutex_unlock(&g->mu);
  /* Epochs only grow: GEQ never needs the flag reset. */
  BD_CHECK(sy_drv.cuStreamWaitValue64(s, g->flag, epoch, CU_STREAM_WAIT_VALUE_GEQ));
}

int sy_gate_open(sy_gate_t *g) {
  pthread_mutex_lock(&g->mu);
  if (g->opened < g->armed) {
    sy_gate_write(g, g->armed);
    g->opened = g->armed;
  }
  int forced = g->forced;
  pthread_mutex_unlock(&g->mu);
  return forced;
}

void sy_gate_fini(sy_gate_t *g) {
  if (g->have_thread) {
    pthread_mutex_lock(&g->mu);
    g->stop = 1;
    pthread_cond_signal(&g->cv);
    pthread_mutex_unlock(&g->mu);
    pthread_join(g->th, NULL);
  }
  if (g->release) bd.cuStreamDestroy(g->release);
  if (g->buf) vmmipc_buf_free(g->buf);
  pthread_mutex_destroy(&g->mu);
  pthread_cond_destroy(&g->cv);
  memset(g, 0, sizeof *g);
}
