/* Host sync and CUDA graphs: whether a stream is being captured (the
 * memory-operation barrier then takes its replay-safe form, barrier.c),
 * and the library's own work on its private stream done in the relaxed
 * capture mode, so that it never invalidates a capture the user has open
 * on this or another thread (and, from any thread, in the pool's context:
 * vmmipc__aside_begin). */
#include "sync/sync.h"

void vmmipc__capture_relax(const vmmipc__cu_t *cu, vmmipc__relaxed_t *r) {
  r->was = CU_STREAM_CAPTURE_MODE_RELAXED;
  r->set = cu->cuThreadExchangeStreamCaptureMode(&r->was) == CUDA_SUCCESS;
}

void vmmipc__capture_restore(const vmmipc__cu_t *cu, const vmmipc__relaxed_t *r) {
  CUstreamCaptureMode m = r->was;
  if (r->set) cu->cuThreadExchangeStreamCaptureMode(&m);
}

void vmmipc__aside_begin(const vmmipc__cu_t *cu, CUcontext ctx, vmmipc__aside_t *a) {
  a->was = NULL;
  a->switched =
      cu->cuCtxGetCurrent(&a->was) == CUDA_SUCCESS && a->was != ctx && cu->cuCtxSetCurrent(ctx) == CUDA_SUCCESS;
  vmmipc__capture_relax(cu, &a->relaxed);
}

void vmmipc__aside_end(const vmmipc__cu_t *cu, const vmmipc__aside_t *a) {
  vmmipc__capture_restore(cu, &a->relaxed);
  if (a->switched) cu->cuCtxSetCurrent(a->was);
}

int vmmipc__capturing(const vmmipc__cu_t *cu, void *stream) {
  CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
  if (cu->cuStreamIsCapturing((CUstream)stream, &st) != CUDA_SUCCESS) return 0;
  return st != CU_STREAM_CAPTURE_STATUS_NONE;
}
