/* Stream memory operations: 64-bit write and wait on device memory, and
 * batches of them. A write is an atomic store that is visible to every
 * process mapping the page once it ran, and a wait polls the shared page
 * until the condition holds. Both run on the stream's worker (async.h), or
 * on the calling thread before the call returns with
 * VMMIPC_STANDIN_ASYNC=off. A GPU would wait forever; the stand-in gives up
 * after VMMIPC_STANDIN_WAIT_MS (default 120000) with
 * CUDA_ERROR_LAUNCH_TIMEOUT (the call's result, or the stream's sticky
 * error), so that a test bug ends instead of hanging.
 * CU_STREAM_MEM_OP_BARRIER in a batch is a full fence. A 32-bit write
 * (CU_STREAM_MEM_OP_WRITE_VALUE_32) stores the 4 bytes at its address. On
 * a capturing stream (capture.c) the operations are recorded instead. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "capture.h"

/* Checks the stream, the aligned device address of `size` bytes and the
 * capability. */
static CUresult sti_memop_check(CUstream s, CUdeviceptr addr, size_t size) {
  CUresult rc = sti_enter_ctx();
  if (rc) return rc;
  if (!sti.cap_memops)
    rc = CUDA_ERROR_NOT_SUPPORTED;
  else if (!sti_stream_valid(s))
    rc = CUDA_ERROR_INVALID_HANDLE;
  else if (!addr || (addr & (size - 1)) || !sti_is_device_range((uintptr_t)addr, size))
    rc = CUDA_ERROR_INVALID_VALUE;
  sti_leave();
  return rc;
}

/* What a write or wait's flags allow: checked when it runs, and also when it
 * is queued, so that a bad flag fails the call. */
static CUresult sti_write_flags(unsigned int flags) {
  /* The v2 memory operations (what a loader of CUDA 12+ gets) take no write
   * flag: NO_MEMORY_BARRIER is refused, as the real driver does. */
  return flags != CU_STREAM_WRITE_VALUE_DEFAULT ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

static CUresult sti_wait_flags(unsigned int flags) {
  if (flags & CU_STREAM_WAIT_VALUE_FLUSH) return CUDA_ERROR_NOT_SUPPORTED; /* as on H200 */
  return flags > CU_STREAM_WAIT_VALUE_NOR ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

static CUresult sti_write(CUdeviceptr addr, cuuint64_t value, unsigned int flags) {
  if (sti_write_flags(flags)) return CUDA_ERROR_INVALID_VALUE;
  /* Sequentially consistent: also the default's fence before the write. */
  __atomic_store_n((uint64_t *)(uintptr_t)addr, (uint64_t)value, __ATOMIC_SEQ_CST);
  return CUDA_SUCCESS;
}

static CUresult sti_write32(CUdeviceptr addr, cuuint32_t value, unsigned int flags) {
  if (sti_write_flags(flags)) return CUDA_ERROR_INVALID_VALUE;
  __atomic_store_n((uint32_t *)(uintptr_t)addr, (uint32_t)value, __ATOMIC_SEQ_CST);
  return CUDA_SUCCESS;
}

static int sti_holds(uint64_t have, uint64_t want, unsigned int op) {
  switch (op) {
    case CU_STREAM_WAIT_VALUE_GEQ: return (int64_t)(have - want) >= 0;
    case CU_STREAM_WAIT_VALUE_EQ: return have == want;
    case CU_STREAM_WAIT_VALUE_AND: return (have & want) != 0;
    case CU_STREAM_WAIT_VALUE_NOR: return ~(have | want) != 0;
  }
  return 0;
}

static long sti_wait_budget_ms(void) {
  const char *e = getenv("VMMIPC_STANDIN_WAIT_MS");
  long v = e && *e ? strtol(e, NULL, 10) : 0;
  return v > 0 ? v : 120000;
}

static CUresult sti_wait(CUdeviceptr addr, cuuint64_t value, unsigned int flags) {
  CUresult rc = sti_wait_flags(flags);
  if (rc) return rc;
  unsigned op = flags;
  struct timespec t0, now;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  long budget = sti_wait_budget_ms(), pause_ns = 1000;
  for (;;) {
    uint64_t have = __atomic_load_n((const uint64_t *)(uintptr_t)addr, __ATOMIC_SEQ_CST);
    if (sti_holds(have, (uint64_t)value, op)) return CUDA_SUCCESS;
    clock_gettime(CLOCK_MONOTONIC, &now);
    long ms = (now.tv_sec - t0.tv_sec) * 1000 + (now.tv_nsec - t0.tv_nsec) / 1000000;
    if (ms >= budget) return CUDA_ERROR_LAUNCH_TIMEOUT;
    struct timespec ts = {0, pause_ns};
    nanosleep(&ts, NULL);
    if (pause_ns < 1000000) pause_ns *= 2;
  }
}

/* Runs checked operations in order; the first failure ends them. */
static CUresult sti_memops_run(unsigned count, const CUstreamBatchMemOpParams *ops) {
  sti_pause_env("VMMIPC_STANDIN_MEMOPS_US");
  for (unsigned i = 0; i < count; i++) {
    CUresult rc = CUDA_SUCCESS;
    switch (ops[i].operation) {
      case CU_STREAM_MEM_OP_BARRIER: /* the stream's earlier writes are done: a full fence */
        __atomic_thread_fence(__ATOMIC_SEQ_CST);
        break;
      case CU_STREAM_MEM_OP_WRITE_VALUE_32:
        rc = sti_write32(ops[i].writeValue.address, ops[i].writeValue.value, ops[i].writeValue.flags);
        break;
      case CU_STREAM_MEM_OP_WRITE_VALUE_64:
        rc = sti_write(ops[i].writeValue.address, ops[i].writeValue.value64, ops[i].writeValue.flags);
        break;
      default:
        rc = sti_wait(ops[i].waitValue.address, ops[i].waitValue.value64, ops[i].waitValue.flags);
    }
    if (rc) return rc;
  }
  return CUDA_SUCCESS;
}

/* Queued operations: their own copy. */
typedef struct {
  sti_op op;
  unsigned count;
  CUstreamBatchMemOpParams ops[];
} sti_memop_op;

static CUresult sti_memop_run(sti_op *o) {
  sti_memop_op *m = (sti_memop_op *)o;
  return sti_memops_run(m->count, m->ops);
}

/* Where checked operations go: recorded on a capturing stream, queued with
 * asynchronous work, else run now. */
static CUresult sti_memops_submit(CUstream s, unsigned count, const CUstreamBatchMemOpParams *ops) {
  if (sti_capturing(s)) return sti_capture_batch(s, count, ops);
  if (!sti_async_on()) return sti_memops_run(count, ops);
  CUresult rc = sti_enter_ctx();
  if (rc) return rc;
  struct CUstream_st *q = sti_stream_valid(s) ? sti_stream_of(s) : NULL;
  sti_memop_op *m = q ? sti_op_new(sizeof *m + count * sizeof *ops, sti_memop_run) : NULL;
  if (!m) {
    rc = sti_stream_valid(s) ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_INVALID_HANDLE;
  } else {
    m->count = count;
    memcpy(m->ops, ops, count * sizeof *ops);
    rc = sti_enqueue(q, &m->op);
  }
  sti_leave();
  return rc;
}

/* A single write or wait: checked when it is queued, as a batch's
 * operations are, then queued as a batch of one. */
static CUresult sti_memop_one(CUstream s, CUstreamBatchMemOpType t, CUdeviceptr addr, cuuint64_t value,
                              unsigned int flags) {
  CUresult rc = sti_memop_check(s, addr, 8);
  if (!rc) rc = t == CU_STREAM_MEM_OP_WAIT_VALUE_64 ? sti_wait_flags(flags) : sti_write_flags(flags);
  if (rc) return rc;
  CUstreamBatchMemOpParams op;
  memset(&op, 0, sizeof op);
  op.operation = t; /* the first member of every kind */
  if (t == CU_STREAM_MEM_OP_WAIT_VALUE_64) {
    op.waitValue.address = addr;
    op.waitValue.value64 = value;
    op.waitValue.flags = flags;
  } else {
    op.writeValue.address = addr;
    op.writeValue.value64 = value;
    op.writeValue.flags = flags;
  }
  return sti_memops_submit(s, 1, &op);
}

CUresult cuStreamWriteValue64(CUstream s, CUdeviceptr addr, cuuint64_t value, unsigned int flags) {
  return sti_memop_one(s, CU_STREAM_MEM_OP_WRITE_VALUE_64, addr, value, flags);
}

CUresult cuStreamWaitValue64(CUstream s, CUdeviceptr addr, cuuint64_t value, unsigned int flags) {
  return sti_memop_one(s, CU_STREAM_MEM_OP_WAIT_VALUE_64, addr, value, flags);
}

/* The operation types of this thread's last batch, for tests
 * (vmmipc_standin_last_batch). */
static _Thread_local int sti_batch_ops[16];
static _Thread_local unsigned sti_batch_count;

STI_EXPORT unsigned vmmipc_standin_last_batch(int *ops, unsigned max) {
  unsigned n = sti_batch_count < 16 ? sti_batch_count : 16;
  for (unsigned i = 0; i < n && i < max; i++) ops[i] = sti_batch_ops[i];
  return sti_batch_count;
}

CUresult cuStreamBatchMemOp(CUstream s, unsigned int count, CUstreamBatchMemOpParams *ops, unsigned int flags) {
  if (!ops || count == 0 || flags) return CUDA_ERROR_INVALID_VALUE;
  sti_batch_count = count;
  for (unsigned i = 0; i < count && i < 16; i++) sti_batch_ops[i] = (int)ops[i].operation;
  /* Every operation is checked before any runs, as an enqueue would. */
  for (unsigned i = 0; i < count; i++) {
    CUstreamBatchMemOpType t = ops[i].operation;
    if (t == CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES) return CUDA_ERROR_NOT_SUPPORTED;
    if (t == CU_STREAM_MEM_OP_BARRIER) {
      if (ops[i].memoryBarrier.flags != CU_STREAM_MEMORY_BARRIER_TYPE_SYS &&
          ops[i].memoryBarrier.flags != CU_STREAM_MEMORY_BARRIER_TYPE_GPU)
        return CUDA_ERROR_INVALID_VALUE;
      if (!sti.cap_memops) return CUDA_ERROR_NOT_SUPPORTED;
      continue;
    }
    CUresult rc;
    if (t == CU_STREAM_MEM_OP_WRITE_VALUE_32)
      rc = sti_memop_check(s, ops[i].writeValue.address, 4);
    else if (t == CU_STREAM_MEM_OP_WRITE_VALUE_64 || t == CU_STREAM_MEM_OP_WAIT_VALUE_64)
      rc = sti_memop_check(s, t == CU_STREAM_MEM_OP_WAIT_VALUE_64 ? ops[i].waitValue.address
                                                                  : ops[i].writeValue.address, 8);
    else
      rc = CUDA_ERROR_INVALID_VALUE;
    if (!rc)
      rc = t == CU_STREAM_MEM_OP_WAIT_VALUE_64 ? sti_wait_flags(ops[i].waitValue.flags)
                                               : sti_write_flags(ops[i].writeValue.flags);
    if (rc) return rc;
  }
  return sti_memops_submit(s, count, ops);
}
