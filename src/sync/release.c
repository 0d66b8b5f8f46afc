/* No stream left hanging (docs/sync.md, "Failure value"): once a comm fails
 * (a peer hung up, a timeout, an abort, teardown), every slot of this rank's
 * signal pool that a window uses is set to VMMIPC_SIGNAL_FAILED. Stream waits
 * (vmmipc_win_wait, vmmipc_win_barrier) enqueued on those slots compare
 * cyclically (CU_STREAM_WAIT_VALUE_GEQ), and the failure value is at least
 * every legal signal value (< 2^63) in that order, so they all complete;
 * the host calls that follow report the comm's failure. Kernels that read a
 * slot can tell by the top bit. One place, so that the device API's waits
 * use the same value. */
#include <stdint.h>

#include "coll/coll.h"
#include "sync/release.h"

void vmmipc__sync_release(struct vmmipc_comm *c) {
  struct vmmipc__pool *p = c->pool;
  const vmmipc__cu_t *cu = NULL;
  if (!p || !p->local || !p->stream || vmmipc__cu_load(&cu) != VMMIPC_SUCCESS) return;
  static const uint64_t failed[128] = {
#define F8 VMMIPC_SIGNAL_FAILED, VMMIPC_SIGNAL_FAILED, VMMIPC_SIGNAL_FAILED, VMMIPC_SIGNAL_FAILED, \
           VMMIPC_SIGNAL_FAILED, VMMIPC_SIGNAL_FAILED, VMMIPC_SIGNAL_FAILED, VMMIPC_SIGNAL_FAILED
      F8, F8, F8, F8, F8, F8, F8, F8, F8, F8, F8, F8, F8, F8, F8, F8
#undef F8
  };
  size_t bytes = (size_t)p->per_win * 8;
  /* Any thread (vmmipc_comm_abort's among them): the pool's context, for
   * the time of the copies. */
  CUcontext was = NULL;
  int switched = cu->cuCtxGetCurrent(&was) == CUDA_SUCCESS && was != p->ctx &&
                 cu->cuCtxSetCurrent(p->ctx) == CUDA_SUCCESS;
  pthread_mutex_lock(&p->mu);
  for (int k = 0; k < p->slices; k++) {
    if (p->used[k] != 1) continue; /* free slices: no window waits there */
    CUdeviceptr at = p->base[c->node_rank] + (CUdeviceptr)k * (CUdeviceptr)bytes;
    for (size_t off = 0; off < bytes; off += sizeof failed) {
      size_t len = bytes - off < sizeof failed ? bytes - off : sizeof failed;
      cu->cuMemcpyHtoDAsync(at + off, failed, len, p->stream); /* best effort: the comm is failing already */
    }
  }
  cu->cuStreamSynchronize(p->stream);
  pthread_mutex_unlock(&p->mu);
  if (switched) cu->cuCtxSetCurrent(was);
}
