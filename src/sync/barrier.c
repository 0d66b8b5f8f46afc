/* The host-API barrier on the memory-operation path (the kernel path's is
 * vmmipc_k_barrier: it counts its barriers in device memory, so a captured
 * launch replays correctly). Each barrier is cuStreamBatchMemOp calls whose
 * first operation is an explicit system-scope memory barrier, as the
 * signal's is: the stream's earlier work is complete and visible system-wide
 * before any of the barrier's writes lands.
 *
 * Counted (the stream is not being captured): barrier k of this window on
 * this rank, k in call order, which is why the caller must order a
 * window's barriers on the GPU (vmmipc.h): they pair by k, not by stream.
 * The counters only grow, so it repeats without resets, and a
 * wait for "at least k" is also satisfied by a peer already at k + 1 (which
 * it reaches only after this barrier's arrivals). The writes carry
 * CU_STREAM_WRITE_VALUE_DEFAULT, the only value the driver's v2 memory
 * operations take (CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER is refused with
 * CUDA_ERROR_INVALID_VALUE on an H200, driver 580). Shapes
 * (VMMIPC_SYNC_BARRIER, the same on every node rank; slot n + q of a rank's
 * pad is written only by node rank q in all of them):
 *   flat    (default) write k into my slot at every peer, then wait until
 *           every peer's slot here is at least k: one hop, n - 1 waits;
 *   gather  node rank 0 waits for every peer, then writes k to each; the
 *           others write to rank 0 and wait for its answer: two hops, one
 *           wait each except rank 0's n - 1;
 *   dissem  dissemination: in round r (distance d = 2^r < n) write k to
 *           node rank me + d and wait for me - d (mod n): ceil(log2 n) hops
 *           and waits each.
 * A wait that blocks on the GPU's front end costs a poll; the shapes trade
 * hops against waits, and the benchmark measures them all.
 *
 * Captured into a CUDA graph: a launch replays the values it was captured
 * with, so nothing may change from one barrier to the next. Two phases on
 * slots of their own, each pair (q, me) with one slot per phase here,
 * written only by q: write 1 into my slot at every peer, wait until every
 * peer's slot here holds 1 (or the failure value), then reset those slots
 * to 0; then the same on the second phase's slots. The first phase is the
 * barrier; the second makes the reset safe: q writes my phase-1 slot for
 * the next barrier only after its phase-2 wait saw my phase-2 write, which
 * I make after my phase-1 reset (stream order, behind the fence of that
 * write: these writes keep the driver's own fence); and q's next phase-2
 * write follows its next phase-1 wait, which needs my next phase-1 write,
 * made after my phase-2 reset. So no reset erases a peer's arrival. Markers
 * and resets are 32-bit writes to the low half of a slot and the waits test
 * bit 0 or bit 63 (CU_STREAM_WAIT_VALUE_AND): the failure value (bit 63,
 * written whole by the release) is never cleared by them, so it keeps
 * releasing the waits whatever late writes land. It costs two round trips,
 * so only captures take it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/testhooks.h"
#include "sync/sync.h"

/* cuStreamBatchMemOp takes at most this many operations per call. */
#define BATCH_MAX 256
/* Operations planned on the stack (any form up to 16 node ranks); more are
 * allocated. */
#define PLAN_STACK 96

CUdeviceptr vmmipc__slot_addr(const struct vmmipc_win *w, int q, int slot) {
  const struct vmmipc__pool *p = w->comm->pool;
  return p->base[q] + ((CUdeviceptr)w->slice * (CUdeviceptr)p->per_win + (CUdeviceptr)slot) * 8;
}

static CUstreamBatchMemOpParams *next(CUstreamBatchMemOpParams *ops, int *m) {
  CUstreamBatchMemOpParams *o = &ops[(*m)++];
  memset(o, 0, sizeof *o);
  return o;
}

static void fence(CUstreamBatchMemOpParams *ops, int *m) {
  CUstreamBatchMemOpParams *o = next(ops, m);
  o->memoryBarrier.operation = CU_STREAM_MEM_OP_BARRIER;
  o->memoryBarrier.flags = CU_STREAM_MEMORY_BARRIER_TYPE_SYS;
}

static void write64(CUstreamBatchMemOpParams *ops, int *m, CUdeviceptr at, uint64_t v) {
  CUstreamBatchMemOpParams *o = next(ops, m);
  o->writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_64;
  o->writeValue.address = at;
  o->writeValue.value64 = v;
  o->writeValue.flags = CU_STREAM_WRITE_VALUE_DEFAULT; /* v2: no other value is taken */
}

static void write32(CUstreamBatchMemOpParams *ops, int *m, CUdeviceptr at, uint32_t v) {
  CUstreamBatchMemOpParams *o = next(ops, m);
  o->writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
  o->writeValue.address = at;
  o->writeValue.value = v;
  o->writeValue.flags = CU_STREAM_WRITE_VALUE_DEFAULT; /* fenced: a marker must follow the reset before it */
}

static void wait64(CUstreamBatchMemOpParams *ops, int *m, CUdeviceptr at, uint64_t v, unsigned flags) {
  CUstreamBatchMemOpParams *o = next(ops, m);
  o->waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_64;
  o->waitValue.address = at;
  o->waitValue.value64 = v;
  o->waitValue.flags = flags;
}

int vmmipc__memops_barrier_max(int n) { return 1 + 6 * (n > 1 ? n - 1 : 0); }

int vmmipc__memops_barrier_plan(const struct vmmipc_win *w, int shape, uint64_t k, int captured, unsigned wait_flags,
                                CUstreamBatchMemOpParams *ops) {
  const int n = w->comm->node_size, me = w->comm->node_rank;
  int m = 0;
  fence(ops, &m);
  if (captured) {
    const unsigned and_flags = CU_STREAM_WAIT_VALUE_AND | (wait_flags & CU_STREAM_WAIT_VALUE_FLUSH);
    for (int phase = 0; phase < 2; phase++) {
      const int base = (3 + phase) * n;
      for (int q = 0; q < n; q++)
        if (q != me) write32(ops, &m, vmmipc__slot_addr(w, q, base + me), 1);
      for (int q = 0; q < n; q++)
        if (q != me) wait64(ops, &m, vmmipc__slot_addr(w, me, base + q), 1 | VMMIPC_SIGNAL_FAILED, and_flags);
      for (int q = 0; q < n; q++)
        if (q != me) write32(ops, &m, vmmipc__slot_addr(w, me, base + q), 0);
    }
    return m;
  }
  if (shape == VMMIPC__BAR_GATHER && me != 0) {
    write64(ops, &m, vmmipc__slot_addr(w, 0, n + me), k);
    wait64(ops, &m, vmmipc__slot_addr(w, me, n), k, wait_flags);
  } else if (shape == VMMIPC__BAR_GATHER) {
    for (int q = 1; q < n; q++) wait64(ops, &m, vmmipc__slot_addr(w, 0, n + q), k, wait_flags);
    for (int q = 1; q < n; q++) write64(ops, &m, vmmipc__slot_addr(w, q, n), k);
  } else if (shape == VMMIPC__BAR_DISSEM) {
    for (int d = 1; d < n; d *= 2) {
      write64(ops, &m, vmmipc__slot_addr(w, (me + d) % n, n + me), k);
      wait64(ops, &m, vmmipc__slot_addr(w, me, n + (me - d + n) % n), k, wait_flags);
    }
  } else {
    for (int q = 0; q < n; q++)
      if (q != me) write64(ops, &m, vmmipc__slot_addr(w, q, n + me), k);
    for (int q = 0; q < n; q++)
      if (q != me) wait64(ops, &m, vmmipc__slot_addr(w, me, n + q), k, wait_flags);
  }
  return m;
}

vmmipc_result_t vmmipc__memops_barrier(struct vmmipc_win *w, void *stream, unsigned wait_flags, const char *op) {
  const vmmipc__cu_t *cu;
  vmmipc_result_t r = vmmipc__cu_load(&cu);
  if (r) return r;
  const int max = vmmipc__memops_barrier_max(w->comm->node_size);
  CUstreamBatchMemOpParams stack[PLAN_STACK], *ops = max <= PLAN_STACK ? stack : malloc((size_t)max * sizeof *ops);
  if (!ops) return vmmipc__error(VMMIPC_ERR_NO_MEMORY, "%s: %d stream memory operations", op, max);
  const int captured = vmmipc__capturing(cu, stream);
  /* The count moves only once every batch was accepted: a call refused
   * before any of its operations were enqueued leaves it as it was. (Had it
   * moved, this rank's next barrier would write k + 1, which satisfies the
   * peers' barrier k, and every later barrier of theirs would pass one
   * early.) Barriers of a window come from one thread at a time. */
  const uint64_t k = captured ? 0 : __atomic_load_n(&w->barriers, __ATOMIC_RELAXED) + 1;
  const int m = vmmipc__memops_barrier_plan(w, w->comm->pool->sync->shape, k, captured, wait_flags, ops);
  const int batch = VMMIPC__BATCH_CAP() > 0 ? VMMIPC__BATCH_CAP() : BATCH_MAX; /* tests: several batches */
  int torn = 0;
  for (int at = 0; at < m && !r; at += batch) {
    const unsigned count = (unsigned)(m - at < batch ? m - at : batch);
    CUresult rc = VMMIPC__INJECT("barrier_batch") ? CUDA_ERROR_INVALID_HANDLE
                                                  : cu->cuStreamBatchMemOp((CUstream)stream, count, ops + at, 0);
    if (!rc) continue;
    torn = at > 0;
    if (!torn) {
      r = vmmipc__cu_error(rc, NULL, "%s: cuStreamBatchMemOp (%u operations)", op, count);
      continue;
    }
    /* Earlier batches were accepted: arrivals may have landed, and no
     * operation takes them back. */
    r = vmmipc__cu_error(rc, NULL, "%s: cuStreamBatchMemOp (operations %d to %d of %d, after the first %d were enqueued)",
                         op, at + 1, at + (int)count, m, at);
    char msg[VMMIPC__ERRMSG_MAX];
    snprintf(msg, sizeof msg,
             "%s; rank %d's arrivals at this barrier may have reached some peers and cannot be taken back, so the "
             "communicator is broken",
             vmmipc_last_error(), w->comm->rank);
    vmmipc__error_set_raw(msg);
    vmmipc__error_rank(w->comm->rank);
    /* Releases this rank's stream waits; every later call fails naming this rank. A host sync call holds
     * no comm and makes no MPI call: the next call that does tells the others. */
    vmmipc__break_untold(w->comm, VMMIPC_ERR_PEER);
  }
  if (!captured && (!r || torn)) __atomic_store_n(&w->barriers, k, __ATOMIC_RELAXED);
  if (ops != stack) free(ops);
  return r;
}
