/* Host sync and CUDA graphs: whether a stream is being captured (the
 * memory-operation barrier then takes its replay-safe form, barrier.c),
 * and the library's own work on its private stream done in the relaxed
 * capture mode, so that it never invalidates a capture the user has open
 * on this or another thread. */
#include "sync/sync.h"

void vmmipc__capture_relax(const vmmipc__cu_t *cu, vmmipc__relaxed_t *r) {
  r->was = CU_STREAM_CAPTURE_MODE_RELAXED;
  r->set = cu->cuThreadExchangeStreamCaptureMode(&r->was) == CUDA_SUCCESS;
}

void vmmipc__capture_restore(const vmmipc__cu_t *cu, const vmmipc__relaxed_t *r) {
  CUstreamCaptureMode m = r->was;
  if (r->set) cu->cuThreadExchangeStreamCaptureMode(&m);
}

int vmmipc__capturing(const vmmipc__cu_t *cu, void *stream) {
  CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
  if (cu->cuStreamIsCapturing((CUstream)stream, &st) != CUDA_SUCCESS) return 0;
  return st != CU_STREAM_CAPTURE_STATUS_NONE;
}
