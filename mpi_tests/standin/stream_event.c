/* Streams and events. Every operation completes before it returns, so a
 * stream is only a handle to validate, and an event records the
 * CLOCK_MONOTONIC time at cuEventRecord. */
#include <stdlib.h>
#include <time.h>

#include "stream_event.h"

struct CUstream_st {
  struct CUstream_st *next;
};

struct CUevent_st {
  struct CUevent_st *next;
  unsigned int flags;
  int recorded;
  struct timespec when;
};

/* Live streams and events (lock held). */
static struct CUstream_st *sti_streams;
static struct CUevent_st *sti_events;

int sti_stream_valid(CUstream s) {
  if (s == NULL || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD) return 1;
  for (struct CUstream_st *x = sti_streams; x; x = x->next)
    if (x == s) return 1;
  return 0;
}

static int sti_event_valid(CUevent e) {
  for (struct CUevent_st *x = sti_events; x; x = x->next)
    if (x == e) return 1;
  return 0;
}

CUresult cuStreamCreate(CUstream *phStream, unsigned int flags) {
  if (!phStream) return CUDA_ERROR_INVALID_VALUE;
  CUresult rc = sti_enter_ctx();
  if (rc) return rc;
  struct CUstream_st *s = NULL;
  if (flags & ~(unsigned)CU_STREAM_NON_BLOCKING)
    rc = CUDA_ERROR_INVALID_VALUE;
  else if (!(s = calloc(1, sizeof *s)))
    rc = CUDA_ERROR_OUT_OF_MEMORY;
  if (s) {
    s->next = sti_streams;
    sti_streams = s;
    *phStream = s;
  }
  sti_leave();
  return rc;
}

CUresult cuStreamDestroy(CUstream hStream) {
  CUresult rc = sti_enter();
  if (rc) return rc;
  struct CUstream_st **pp = &sti_streams;
  while (*pp && *pp != hStream) pp = &(*pp)->next;
  if (hStream && *pp) {
    *pp = hStream->next;
    free(hStream);
  } else {
    rc = CUDA_ERROR_INVALID_HANDLE;
  }
  sti_leave();
  return rc;
}

CUresult cuStreamSynchronize(CUstream hStream) {
  CUresult rc = sti_enter_ctx();
  if (rc) return rc;
  if (!sti_stream_valid(hStream)) rc = CUDA_ERROR_INVALID_HANDLE;
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
    e->flags = flags;
    e->next = sti_events;
    sti_events = e;
    *phEvent = e;
  }
  sti_leave();
  return rc;
}

CUresult cuEventDestroy(CUevent hEvent) {
  CUresult rc = sti_enter();
  if (rc) return rc;
  struct CUevent_st **pp = &sti_events;
  while (*pp && *pp != hEvent) pp = &(*pp)->next;
  if (hEvent && *pp) {
    *pp = hEvent->next;
    free(hEvent);
  } else {
    rc = CUDA_ERROR_INVALID_HANDLE;
  }
  sti_leave();
  return rc;
}

CUresult cuEventRecord(CUevent hEvent, CUstream hStream) {
  CUresult rc = sti_enter();
  if (rc) return rc;
  if (!sti_event_valid(hEvent) || !sti_stream_valid(hStream)) {
    rc = CUDA_ERROR_INVALID_HANDLE;
  } else {
    clock_gettime(CLOCK_MONOTONIC, &hEvent->when);
    hEvent->recorded = 1;
  }
  sti_leave();
  return rc;
}

/* Work completes before its call returns: a recorded event is reached. */
CUresult cuEventQuery(CUevent hEvent) {
  CUresult rc = sti_enter();
  if (rc) return rc;
  if (!sti_event_valid(hEvent)) rc = CUDA_ERROR_INVALID_HANDLE;
  sti_leave();
  return rc;
}

CUresult cuEventSynchronize(CUevent hEvent) {
  CUresult rc = sti_enter();
  if (rc) return rc;
  if (!sti_event_valid(hEvent)) rc = CUDA_ERROR_INVALID_HANDLE;
  sti_leave();
  return rc;
}

/* Both events must exist, keep timing, and have been recorded. */
CUresult cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd) {
  if (!pMilliseconds) return CUDA_ERROR_INVALID_VALUE;
  CUresult rc = sti_enter();
  if (rc) return rc;
  if (!sti_event_valid(hStart) || !sti_event_valid(hEnd) || !hStart->recorded || !hEnd->recorded ||
      ((hStart->flags | hEnd->flags) & CU_EVENT_DISABLE_TIMING)) {
    rc = CUDA_ERROR_INVALID_HANDLE;
  } else {
    double ms = (double)(hEnd->when.tv_sec - hStart->when.tv_sec) * 1e3 +
                (double)(hEnd->when.tv_nsec - hStart->when.tv_nsec) / 1e6;
    *pMilliseconds = (float)ms;
  }
  sti_leave();
  return rc;
}
