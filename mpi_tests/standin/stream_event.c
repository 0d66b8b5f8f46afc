/* Streams and events. With queued work (async.h) an event is complete once
 * the work queued before its last record is over, and its time is when the
 * record ran; with VMMIPC_STANDIN_ASYNC=off every operation completes
 * before it returns, so an event records the CLOCK_MONOTONIC time at
 * cuEventRecord. */
#include <stdlib.h>
#include <time.h>

#include "stream_event.h"

struct CUevent_st {
  struct CUevent_st *next;
  struct CUctx_st *ctx; /* current at its creation: records on another context's stream are refused */
  unsigned flags;
  long refs; /* the handle and each queued record */
  int recorded;
  int timed; /* `when` is the last record's time */
  struct timespec when;
  struct CUstream_st *stream; /* the last record's stream (a reference) and order */
  uint64_t order;
};

/* Live events (lock held). */
static struct CUevent_st *sti_events;

/* The legacy default stream of each primary context, and this thread's
 * per-thread default streams (released when the thread exits). */
static struct CUstream_st sti_legacy[STI_MAX_DEVICES];
static pthread_key_t sti_ptds_key;
static _Thread_local struct CUstream_st **sti_ptds;

static void sti_ptds_exit(void *arg) {
  struct CUstream_st **mine = arg;
  pthread_mutex_lock(&sti.mu);
  for (int i = 0; i < STI_MAX_DEVICES; i++)
    if (mine[i]) sti_stream_drop_handle(mine[i]);
  pthread_mutex_unlock(&sti.mu);
  free(mine);
}

__attribute__((constructor)) static void sti_ptds_key_init(void) { pthread_key_create(&sti_ptds_key, sti_ptds_exit); }

static struct CUstream_st *sti_user_stream(CUstream s) {
  for (struct CUstream_st *x = sti_streams; x; x = x->next)
    if (x == s && x->kind == STI_STREAM_USER && x->handle) return x;
  return NULL;
}

int sti_stream_valid(CUstream s) {
  return s == NULL || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD || sti_user_stream(s);
}

static struct CUstream_st *sti_legacy_of(struct CUctx_st *c) {
  struct CUstream_st *s = &sti_legacy[c->phys];
  if (!s->ctx) { /* listed once, never freed */
    s->ctx = c;
    s->kind = STI_STREAM_LEGACY;
    s->handle = 1;
    s->refs = 1;
    s->next = sti_streams;
    sti_streams = s;
  }
  return s;
}

static struct CUstream_st *sti_per_thread_of(struct CUctx_st *c) {
  if (!sti_ptds) {
    sti_ptds = calloc(STI_MAX_DEVICES, sizeof *sti_ptds);
    if (!sti_ptds) return NULL;
    pthread_setspecific(sti_ptds_key, sti_ptds);
  }
  if (!sti_ptds[c->phys]) sti_ptds[c->phys] = sti_stream_new(c, 0, STI_STREAM_PER_THREAD);
  return sti_ptds[c->phys];
}

struct CUstream_st *sti_stream_of(CUstream s) {
  if (s == NULL || s == CU_STREAM_LEGACY) return sti_current ? sti_legacy_of(sti_current) : NULL;
  if (s == CU_STREAM_PER_THREAD) return sti_current ? sti_per_thread_of(sti_current) : NULL;
  return sti_user_stream(s);
}

static int sti_event_valid(CUevent e) {
  for (struct CUevent_st *x = sti_events; x; x = x->next)
    if (x == e) return 1;
  return 0;
}

static void sti_event_unref(struct CUevent_st *e) {
  if (--e->refs > 0) return;
  if (e->stream) sti_stream_unref(e->stream);
  free(e);
}

/* Complete: its last record's work is over (or it was never recorded). */
static int sti_event_done(const struct CUevent_st *e) { return !e->stream || sti_done_upto(e->stream, e->order); }

CUresult cuStreamCreate(CUstream *phStream, unsigned int flags) {
  if (!phStream) return CUDA_ERROR_INVALID_VALUE;
  CUresult rc = sti_enter_ctx();
  if (rc) return rc;
  struct CUstream_st *s = NULL;
  if (flags & ~(unsigned)CU_STREAM_NON_BLOCKING)
    rc = CUDA_ERROR_INVALID_VALUE;
  else if (!(s = sti_stream_new(sti_current, flags, STI_STREAM_USER)))
    rc = CUDA_ERROR_OUT_OF_MEMORY;
  if (s) *phStream = s;
  sti_leave();
  return rc;
}

/* Returns at once; queued work still runs, and the stream goes with it. */
CUresult cuStreamDestroy(CUstream hStream) {
  CUresult rc = sti_enter();
  if (rc) return rc;
  struct CUstream_st *s = hStream ? sti_user_stream(hStream) : NULL;
  if (s)
    sti_stream_drop_handle(s);
  else
    rc = CUDA_ERROR_INVALID_HANDLE;
  sti_leave();
  return rc;
}

CUresult cuStreamSynchronize(CUstream hStream) {
  CUresult rc = sti_enter_ctx();
  if (rc) return rc;
  struct CUstream_st *s = NULL;
  if (!sti_stream_valid(hStream))
    rc = CUDA_ERROR_INVALID_HANDLE;
  else if (sti_async_on())
    rc = (s = sti_stream_of(hStream)) ? sti_wait_upto(s, sti_last_order()) : CUDA_ERROR_OUT_OF_MEMORY;
  sti_leave();
  return rc;
}

CUresult cuStreamQuery(CUstream hStream) {
  CUresult rc = sti_enter_ctx();
  if (rc) return rc;
  struct CUstream_st *s = NULL;
  if (!sti_stream_valid(hStream))
    rc = CUDA_ERROR_INVALID_HANDLE;
  else if (!sti_async_on())
    rc = CUDA_SUCCESS;
  else if (!(s = sti_stream_of(hStream)))
    rc = CUDA_ERROR_OUT_OF_MEMORY;
  else
    rc = sti_done_upto(s, sti_last_order()) ? s->err : CUDA_ERROR_NOT_READY;
  sti_leave();
  return rc;
}

CUresult cuEventCreate(CUevent *phEvent, unsigned int flags) {
  if (!phEvent) return CUDA_ERROR_INVALID_VALUE;
  CUresult rc = sti_enter_ctx();
  if (rc) return rc;
  const unsigned known = CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
  struct CUevent_st *e = NULL;
  /* Interprocess events must also disable timing, as on the real driver. */
  if ((flags & ~known) || ((flags & CU_EVENT_INTERPROCESS) && !(flags & CU_EVENT_DISABLE_TIMING)))
    rc = CUDA_ERROR_INVALID_VALUE;
  else if (!(e = calloc(1, sizeof *e)))
    rc = CUDA_ERROR_OUT_OF_MEMORY;
  if (e) {
    e->ctx = sti_current;
    e->flags = flags;
    e->refs = 1;
    e->next = sti_events;
    sti_events = e;
    *phEvent = e;
  }
  sti_leave();
  return rc;
}

/* Returns at once; a queued record still completes. */
CUresult cuEventDestroy(CUevent hEvent) {
  CUresult rc = sti_enter();
  if (rc) return rc;
  struct CUevent_st **pp = &sti_events;
  while (*pp && *pp != hEvent) pp = &(*pp)->next;
  if (hEvent && *pp) {
    *pp = hEvent->next;
    sti_event_unref(hEvent);
  } else {
    rc = CUDA_ERROR_INVALID_HANDLE;
  }
  sti_leave();
  return rc;
}

typedef struct {
  sti_op op;
  struct CUevent_st *e;
  struct timespec when;
} sti_record_op;

static CUresult sti_record_run(sti_op *o) {
  clock_gettime(CLOCK_MONOTONIC, &((sti_record_op *)o)->when);
  return CUDA_SUCCESS;
}

/* Only the event's last record sets its time. */
static void sti_record_fini(sti_op *o) {
  sti_record_op *r = (sti_record_op *)o;
  if (r->e->stream == o->stream && r->e->order == o->order) {
    r->e->when = r->when;
    r->e->timed = 1;
  }
  sti_event_unref(r->e);
}

static CUresult sti_record_queue(struct CUevent_st *e, struct CUstream_st *s) {
  sti_record_op *r = sti_op_new(sizeof *r, sti_record_run);
  if (!r) return CUDA_ERROR_OUT_OF_MEMORY;
  r->op.fini = sti_record_fini;
  r->e = e;
  e->refs++;
  CUresult rc = sti_enqueue(s, &r->op);
  if (rc) return rc;
  if (e->stream) sti_stream_unref(e->stream);
  s->refs++;
  e->stream = s;
  e->order = r->op.order;
  e->timed = 0;
  e->recorded = 1;
  sti_run_if_first(s, &r->op);
  return CUDA_SUCCESS;
}

CUresult cuEventRecord(CUevent hEvent, CUstream hStream) {
  CUresult rc = sti_enter();
  if (rc) return rc;
  struct CUstream_st *s = NULL, *user = NULL;
  if (!sti_event_valid(hEvent) || !sti_stream_valid(hStream)) {
    rc = CUDA_ERROR_INVALID_HANDLE;
  } else if ((user = sti_user_stream(hStream)) ? user->ctx != hEvent->ctx : sti_current != hEvent->ctx) {
    /* As the driver: the event and the stream (for the default streams,
     * the current context's) must be of one context. */
    rc = sti_current || user ? CUDA_ERROR_INVALID_HANDLE : CUDA_ERROR_INVALID_CONTEXT;
  } else if (!sti_async_on()) {
    clock_gettime(CLOCK_MONOTONIC, &hEvent->when);
    hEvent->recorded = 1;
    hEvent->timed = 1;
  } else if (!(s = sti_stream_of(hStream))) {
    rc = sti_current ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_INVALID_CONTEXT;
  } else {
    rc = sti_record_queue(hEvent, s);
  }
  sti_leave();
  return rc;
}

CUresult cuEventSynchronize(CUevent hEvent) {
  CUresult rc = sti_enter();
  if (rc) return rc;
  if (!sti_event_valid(hEvent)) {
    rc = CUDA_ERROR_INVALID_HANDLE;
  } else if (hEvent->stream) {
    struct CUstream_st *s = hEvent->stream;
    s->refs++; /* the event may be recorded again or destroyed meanwhile */
    rc = sti_wait_upto(s, hEvent->order);
    sti_stream_unref(s);
  }
  sti_leave();
  return rc;
}

CUresult cuEventQuery(CUevent hEvent) {
  CUresult rc = sti_enter();
  if (rc) return rc;
  if (!sti_event_valid(hEvent))
    rc = CUDA_ERROR_INVALID_HANDLE;
  else if (!sti_event_done(hEvent))
    rc = CUDA_ERROR_NOT_READY;
  else if (hEvent->stream)
    rc = hEvent->stream->err;
  sti_leave();
  return rc;
}

static CUresult sti_nothing(sti_op *o) {
  (void)o;
  return CUDA_SUCCESS;
}

/* Later work on hStream waits for the work before hEvent's last record. */
CUresult cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int flags) {
  if (flags & ~(unsigned)CU_EVENT_WAIT_EXTERNAL) return CUDA_ERROR_INVALID_VALUE;
  CUresult rc = sti_enter_ctx();
  if (rc) return rc;
  struct CUstream_st *s = NULL;
  if (!sti_event_valid(hEvent) || !sti_stream_valid(hStream)) {
    rc = CUDA_ERROR_INVALID_HANDLE;
  } else if (sti_async_on() && !sti_event_done(hEvent)) {
    sti_op *op = (s = sti_stream_of(hStream)) ? sti_op_new(sizeof *op, sti_nothing) : NULL;
    if (!op) {
      rc = CUDA_ERROR_OUT_OF_MEMORY;
    } else {
      op->after = hEvent->stream;
      op->after_order = hEvent->order;
      op->after->refs++;
      rc = sti_enqueue(s, op);
    }
  }
  sti_leave();
  return rc;
}

/* Both events must exist, keep timing, and have been recorded; queued
 * records must be over. */
CUresult cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd) {
  if (!pMilliseconds) return CUDA_ERROR_INVALID_VALUE;
  CUresult rc = sti_enter();
  if (rc) return rc;
  if (!sti_event_valid(hStart) || !sti_event_valid(hEnd) || !hStart->recorded || !hEnd->recorded ||
      ((hStart->flags | hEnd->flags) & CU_EVENT_DISABLE_TIMING)) {
    rc = CUDA_ERROR_INVALID_HANDLE;
  } else if (!hStart->timed || !hEnd->timed) {
    rc = CUDA_ERROR_NOT_READY;
  } else {
    double ms = (double)(hEnd->when.tv_sec - hStart->when.tv_sec) * 1e3 +
                (double)(hEnd->when.tv_nsec - hStart->when.tv_nsec) / 1e6;
    *pMilliseconds = (float)ms;
  }
  sti_leave();
  return rc;
}
