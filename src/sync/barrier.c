/* The host-API barrier on the memory-operation path (the kernel path's is
 * vmmipc_k_barrier: it counts its barriers in device memory, so a captured
 * launch replays correctly). Two forms, each a cuStreamBatchMemOp that
 * starts with an explicit system-scope memory barrier, as the signal's
 * does, and whose writes keep the driver's own fence:
 *
 * Counted (the stream is not being captured): barrier k of this window on
 * this rank writes k into this rank's barrier slot at every peer, then
 * waits until every peer's slot here is at least k (cyclically). One round
 * trip; the counters only grow, so it repeats without resets.
 *
 * Captured into a CUDA graph: a launch replays the values it was captured
 * with, so nothing may change from one barrier to the next. Two phases on
 * slots of their own, each pair (q, me) with one slot per phase here,
 * written only by q: write 1 into my slot at every peer, wait until every
 * peer's slot here holds 1 (or the failure value), then reset those slots
 * to 0; then the same on the second phase's slots. The first phase is the
 * barrier; the second makes the reset safe: q writes my phase-1 slot for
 * the next barrier only after its phase-2 wait saw my phase-2 write, which
 * I make after my phase-1 reset (stream order, behind a fence); and q's
 * next phase-2 write follows its next phase-1 wait, which needs my next
 * phase-1 write, made after my phase-2 reset. So no reset erases a
 * peer's arrival. Markers and resets are 32-bit writes to the low half of
 * a slot and the waits test bit 0 or bit 63 (CU_STREAM_WAIT_VALUE_AND):
 * the failure value (bit 63, written whole by the release) is never
 * cleared by them, so it keeps releasing the waits whatever late writes
 * land. It costs two round trips, so only captures take it. */
#include <stdlib.h>
#include <string.h>

#include "sync/sync.h"

/* cuStreamBatchMemOp takes at most this many operations per call. */
#define BATCH_MAX 256

CUdeviceptr vmmipc__slot_addr(const struct vmmipc_win *w, int q, int slot) {
  const struct vmmipc__pool *p = w->comm->pool;
  return p->base[q] + ((CUdeviceptr)w->slice * (CUdeviceptr)p->per_win + (CUdeviceptr)slot) * 8;
}

typedef struct {
  const vmmipc__cu_t *cu;
  void *stream;
  const char *op;
  CUstreamBatchMemOpParams ops[BATCH_MAX];
  int m;
} batch_t;

static vmmipc_result_t flush(batch_t *b) {
  if (!b->m) return VMMIPC_SUCCESS;
  CUresult rc = b->cu->cuStreamBatchMemOp((CUstream)b->stream, (unsigned)b->m, b->ops, 0);
  if (rc) return vmmipc__cu_error(rc, NULL, "%s: cuStreamBatchMemOp (%d operations)", b->op, b->m);
  b->m = 0;
  return VMMIPC_SUCCESS;
}

static CUstreamBatchMemOpParams *next(batch_t *b, vmmipc_result_t *r) {
  if (b->m == BATCH_MAX) *r = flush(b);
  CUstreamBatchMemOpParams *o = &b->ops[b->m++];
  memset(o, 0, sizeof *o);
  return o;
}

static void fence(batch_t *b, vmmipc_result_t *r) {
  CUstreamBatchMemOpParams *o = next(b, r);
  o->memoryBarrier.operation = CU_STREAM_MEM_OP_BARRIER;
  o->memoryBarrier.flags = CU_STREAM_MEMORY_BARRIER_TYPE_SYS;
}

static void write64(batch_t *b, CUdeviceptr at, uint64_t v, vmmipc_result_t *r) {
  CUstreamBatchMemOpParams *o = next(b, r);
  o->writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_64;
  o->writeValue.address = at;
  o->writeValue.value64 = v;
  o->writeValue.flags = CU_STREAM_WRITE_VALUE_DEFAULT;
}

static void write32(batch_t *b, CUdeviceptr at, uint32_t v, vmmipc_result_t *r) {
  CUstreamBatchMemOpParams *o = next(b, r);
  o->writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
  o->writeValue.address = at;
  o->writeValue.value = v;
  o->writeValue.flags = CU_STREAM_WRITE_VALUE_DEFAULT;
}

static void wait64(batch_t *b, CUdeviceptr at, uint64_t v, unsigned flags, vmmipc_result_t *r) {
  CUstreamBatchMemOpParams *o = next(b, r);
  o->waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_64;
  o->waitValue.address = at;
  o->waitValue.value64 = v;
  o->waitValue.flags = flags;
}

vmmipc_result_t vmmipc__memops_barrier(struct vmmipc_win *w, void *stream, unsigned wait_flags, const char *op) {
  batch_t *b = calloc(1, sizeof *b); /* 10 KiB: not on the stack */
  if (!b) return vmmipc__error(VMMIPC_ERR_NO_MEMORY, "%s: a batch of stream memory operations", op);
  vmmipc_result_t r = vmmipc__cu_load(&b->cu);
  b->stream = stream;
  b->op = op;
  const int n = w->comm->node_size, me = w->comm->node_rank;
  if (!r) fence(b, &r);
  if (!r && !vmmipc__capturing(b->cu, stream)) {
    uint64_t k = __atomic_add_fetch(&w->barriers, 1, __ATOMIC_RELAXED);
    for (int q = 0; q < n && !r; q++)
      if (q != me) write64(b, vmmipc__slot_addr(w, q, n + me), k, &r);
    for (int q = 0; q < n && !r; q++)
      if (q != me) wait64(b, vmmipc__slot_addr(w, me, n + q), k, wait_flags, &r);
  } else if (!r) {
    const unsigned and_flags = CU_STREAM_WAIT_VALUE_AND | (wait_flags & CU_STREAM_WAIT_VALUE_FLUSH);
    for (int phase = 0; phase < 2 && !r; phase++) {
      const int base = (3 + phase) * n;
      for (int q = 0; q < n && !r; q++)
        if (q != me) write32(b, vmmipc__slot_addr(w, q, base + me), 1, &r);
      for (int q = 0; q < n && !r; q++)
        if (q != me) wait64(b, vmmipc__slot_addr(w, me, base + q), 1 | VMMIPC_SIGNAL_FAILED, and_flags, &r);
      for (int q = 0; q < n && !r; q++)
        if (q != me) write32(b, vmmipc__slot_addr(w, me, base + q), 0, &r);
    }
  }
  if (!r) r = flush(b);
  free(b);
  return r;
}
