/* A minimal stream capture, so that suites can check on the CPU that what
 * vmmipc enqueues replays correctly from a CUDA graph (docs/sync.md, "CUDA
 * graphs"). vmmipc_standin_capture_begin(s) makes s capturing:
 * cuStreamIsCapturing reports CU_STREAM_CAPTURE_STATUS_ACTIVE, and stream
 * memory operations and the library's kernel launches on s are recorded,
 * with copies of their values and arguments, instead of run.
 * vmmipc_standin_capture_end(s) stops recording; vmmipc_standin_replay(s)
 * runs the recording in order on s, as a graph launch would, as often as
 * asked, and returns once it ran (with asynchronous stream work, async.h,
 * it is queued on s and waited for). Anything else on a capturing stream (copies)
 * still runs at once. cuThreadExchangeStreamCaptureMode keeps the thread's
 * mode; nothing here refuses calls by mode. */
#include <stdlib.h>
#include <string.h>

#include "capture.h"

typedef struct sti_item {
  struct sti_item *next;
  int launch;                       /* 1: a kernel launch; 0: a batch of memory operations */
  unsigned count;                   /* operations in the batch */
  CUstreamBatchMemOpParams *ops;
  CUfunction f;                     /* the launch: its function and argument copies */
  void *blob;
  void *params[STI_MAX_KERNEL_ARGS];
} sti_item;

typedef struct sti_rec {
  struct sti_rec *next;
  CUstream s;
  int active;
  sti_item *head, *tail;
} sti_rec;

static sti_rec *sti_recs; /* lock held */
static _Thread_local CUstreamCaptureMode sti_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

static sti_rec *sti_rec_of(CUstream s) {
  for (sti_rec *r = sti_recs; r; r = r->next)
    if (r->s == s) return r;
  return NULL;
}

static void sti_items_free(sti_item *x) {
  while (x) {
    sti_item *next = x->next;
    free(x->ops);
    free(x->blob);
    free(x);
    x = next;
  }
}

int sti_capturing(CUstream s) {
  if (!s || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD) return 0;
  pthread_mutex_lock(&sti.mu);
  sti_rec *r = sti_rec_of(s);
  int on = r && r->active;
  pthread_mutex_unlock(&sti.mu);
  return on;
}

static CUresult sti_append(CUstream s, sti_item *x) {
  pthread_mutex_lock(&sti.mu);
  sti_rec *r = sti_rec_of(s);
  if (!r || !r->active) {
    pthread_mutex_unlock(&sti.mu);
    sti_items_free(x);
    return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  }
  if (r->tail)
    r->tail->next = x;
  else
    r->head = x;
  r->tail = x;
  pthread_mutex_unlock(&sti.mu);
  return CUDA_SUCCESS;
}

CUresult sti_capture_batch(CUstream s, unsigned count, const CUstreamBatchMemOpParams *ops) {
  sti_item *x = calloc(1, sizeof *x);
  if (x) x->ops = malloc(count * sizeof *ops);
  if (!x || !x->ops) {
    sti_items_free(x);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  memcpy(x->ops, ops, count * sizeof *ops);
  x->count = count;
  return sti_append(s, x);
}

CUresult sti_capture_launch(CUstream s, CUfunction f, void **params, const size_t *sizes, int nargs) {
  size_t total = 0;
  for (int i = 0; i < nargs; i++) total += (sizes[i] + 15) / 16 * 16;
  sti_item *x = calloc(1, sizeof *x);
  if (x) x->blob = malloc(total ? total : 1);
  if (!x || !x->blob || nargs > STI_MAX_KERNEL_ARGS) {
    sti_items_free(x);
    return x ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_OUT_OF_MEMORY;
  }
  size_t at = 0;
  for (int i = 0; i < nargs; i++) { /* the values now, as a graph node keeps them */
    memcpy((char *)x->blob + at, params[i], sizes[i]);
    x->params[i] = (char *)x->blob + at;
    at += (sizes[i] + 15) / 16 * 16;
  }
  x->launch = 1;
  x->f = f;
  return sti_append(s, x);
}

CUresult cuStreamIsCapturing(CUstream s, CUstreamCaptureStatus *status) {
  if (!status) return CUDA_ERROR_INVALID_VALUE;
  CUresult rc = sti_enter();
  if (rc) return rc;
  if (!sti_stream_valid(s)) {
    sti_leave();
    return CUDA_ERROR_INVALID_HANDLE;
  }
  sti_leave();
  *status = sti_capturing(s) ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
  return CUDA_SUCCESS;
}

CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode) {
  if (!mode || *mode > CU_STREAM_CAPTURE_MODE_RELAXED) return CUDA_ERROR_INVALID_VALUE;
  CUstreamCaptureMode was = sti_mode;
  sti_mode = *mode;
  *mode = was;
  return CUDA_SUCCESS;
}

/* Starts recording on s (a stream made with cuStreamCreate), dropping an
 * earlier recording. */
STI_EXPORT CUresult vmmipc_standin_capture_begin(CUstream s) {
  CUresult rc = sti_enter();
  if (rc) return rc;
  sti_rec *r = NULL;
  if (!s || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD || !sti_stream_valid(s)) {
    rc = CUDA_ERROR_INVALID_HANDLE;
  } else if ((r = sti_rec_of(s))) {
    sti_items_free(r->head);
    r->head = r->tail = NULL;
  } else if ((r = calloc(1, sizeof *r))) {
    r->s = s;
    r->next = sti_recs;
    sti_recs = r;
  } else {
    rc = CUDA_ERROR_OUT_OF_MEMORY;
  }
  if (r) r->active = 1;
  sti_leave();
  return rc;
}

STI_EXPORT CUresult vmmipc_standin_capture_end(CUstream s) {
  pthread_mutex_lock(&sti.mu);
  sti_rec *r = sti_rec_of(s);
  CUresult rc = r && r->active ? CUDA_SUCCESS : CUDA_ERROR_ILLEGAL_STATE;
  if (r) r->active = 0;
  pthread_mutex_unlock(&sti.mu);
  return rc;
}

/* Runs s's recording once, in order; the first failure ends it. The
 * recording is not changed by running it, so replays are independent. */
STI_EXPORT CUresult vmmipc_standin_replay(CUstream s) {
  pthread_mutex_lock(&sti.mu);
  sti_rec *r = sti_rec_of(s);
  sti_item *head = r && !r->active ? r->head : NULL;
  CUresult rc = r && !r->active ? CUDA_SUCCESS : CUDA_ERROR_ILLEGAL_STATE;
  pthread_mutex_unlock(&sti.mu);
  /* Items are only freed by a new capture of the same stream, which the
   * test does not start during a replay. */
  for (sti_item *x = head; x && !rc; x = x->next)
    rc = x->launch ? cuLaunchKernel(x->f, 1, 1, 1, 1, 1, 1, 0, s, x->params, NULL)
                   : cuStreamBatchMemOp(s, x->count, x->ops, 0);
  if (!rc && sti_async_on()) rc = cuStreamSynchronize(s);
  return rc;
}
