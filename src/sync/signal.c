/* Stream-ordered synchronisation on windows: signal, wait, barrier, and the
 * host wait, with the driver's stream memory operations, or with kernels
 * where the comm's path is kernels (sync/path.c, sync/kernels.c). The
 * slots live in the comm's signal pool (coll/pool.c); docs/sync.md states
 * what becomes visible to whom, and when. A wait for 0 is satisfied at
 * once and enqueues nothing: the failure value is not at or above 0 in the
 * cyclic comparison, so such a wait could never be released.
 *
 * Ordering: the signal is one cuStreamBatchMemOp of an explicit system-scope
 * barrier (CU_STREAM_MEM_OP_BARRIER, CU_STREAM_MEMORY_BARRIER_TYPE_SYS) then
 * the 64-bit write: the stream's earlier writes, the previous signal's among
 * them, are visible system-wide before the flag lands. The write's flags are
 * CU_STREAM_WRITE_VALUE_DEFAULT: the driver's v2 memory operations (what the
 * loader takes) refuse CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER with
 * CUDA_ERROR_INVALID_VALUE (seen on an H200, driver 580). cuStreamWaitValue64
 * holds later work on the stream until the flag is set.
 * CU_STREAM_WAIT_VALUE_FLUSH is used where the device reports
 * CAN_FLUSH_REMOTE_WRITES (it concerns writes from NICs; H200 reports 0). */
#include <sched.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "coll/coll.h"
#include "driver/device.h"
#include "sync/sync.h"
#include "vmm/vmm.h"

/* The node rank of `rank`, which must share the caller's node. */
static vmmipc_result_t sync_peer(vmmipc_win_t w, int rank, const char *op, int *p) {
  vmmipc_comm_t c = w->comm;
  if (rank < 0 || rank >= c->size)
    return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "%s: rank %d is out of range 0..%d", op, rank, c->size - 1);
  if (c->node_of[rank] < 0)
    return vmmipc__error(VMMIPC_ERR_INVALID_ARG,
                         "%s: rank %d is not on the node of rank %d: windows synchronise node peers only", op, rank,
                         c->rank);
  *p = c->node_of[rank];
  return VMMIPC_SUCCESS;
}

/* Checks once per window that the current device has 64-bit stream
 * memory operations; what the flush flag adds, if anything. */
static vmmipc_result_t sync_ready(vmmipc_win_t w, const char *op, const vmmipc__cu_t **cu, unsigned *wait_flags) {
  vmmipc_result_t r = vmmipc__cu_load(cu);
  if (r) return r;
  *wait_flags = CU_STREAM_WAIT_VALUE_GEQ;
  int state = __atomic_load_n(&w->memops, __ATOMIC_RELAXED);
  if (state == 0) {
    int dev, ok = 0, flush = 0;
    if ((r = vmmipc__current_device(*cu, op, &dev))) return r;
    CUresult rc = (*cu)->cuDeviceGetAttribute(&ok, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, dev);
    if (!rc) rc = (*cu)->cuDeviceGetAttribute(&flush, CU_DEVICE_ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES, dev);
    if (rc) return vmmipc__cu_error(rc, NULL, "%s: cuDeviceGetAttribute(device %d)", op, dev);
    state = ok ? (flush ? 2 : 1) : -1;
    __atomic_store_n(&w->memops, state, __ATOMIC_RELAXED);
  }
  if (state < 0)
    return vmmipc__error(VMMIPC_ERR_UNSUPPORTED,
                         "%s: the current device has no 64-bit stream memory operations "
                         "(CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS is 0); hint: synchronise on the host "
                         "(cuStreamSynchronize + MPI_Barrier) instead",
                         op);
  if (state == 2) *wait_flags |= CU_STREAM_WAIT_VALUE_FLUSH;
  return VMMIPC_SUCCESS;
}

/* The window given, and its comm not failed: after a failure the stream
 * waits were released (release.c) and nothing more is enqueued. */
static vmmipc_result_t sync_args(vmmipc_win_t w, const char *op) {
  if (!w) return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "%s: win is NULL", op);
  vmmipc_comm_t c = w->comm;
  if (__atomic_load_n(&c->aborted, __ATOMIC_ACQUIRE)) return vmmipc__aborted_here(c, op, "");
  if (__atomic_load_n(&c->broken, __ATOMIC_ACQUIRE)) {
    vmmipc_result_t r = vmmipc__error(c->broken_code ? c->broken_code : VMMIPC_ERR_PEER,
                                      "%s: the communicator is broken: %s", op, c->broken_msg);
    vmmipc__error_rank(c->broken_rank); /* as vmmipc__enter names it */
    return r;
  }
  return VMMIPC_SUCCESS;
}

/* Values with the top bit set are reserved for VMMIPC_SIGNAL_FAILED. */
static vmmipc_result_t sync_value(uint64_t value, const char *op) {
  if (value & VMMIPC_SIGNAL_FAILED)
    return vmmipc__error(VMMIPC_ERR_INVALID_ARG,
                         "%s: value 0x%llx has the top bit set, which is reserved for VMMIPC_SIGNAL_FAILED", op,
                         (unsigned long long)value);
  return VMMIPC_SUCCESS;
}

/* The checks every per-rank call makes: the window, the rank (its node rank
 * in *p), the path (*kernel: kernels, sync/path.c), and for stream memory
 * operations the device's support. */
static vmmipc_result_t sync_begin(vmmipc_win_t w, int rank, const char *op, int *p, const vmmipc__cu_t **cu,
                                  unsigned *wait_flags, int *kernel) {
  vmmipc_result_t r = sync_args(w, op);
  if (!r) r = sync_peer(w, rank, op, p);
  if (!r) r = vmmipc__sync_path(w, op, 0, kernel);
  if (!r && !*kernel) r = sync_ready(w, op, cu, wait_flags);
  return r;
}

vmmipc_result_t vmmipc_win_signal(vmmipc_win_t w, int rank, uint64_t value, void *stream) {
  const char *op = "vmmipc_win_signal";
  const vmmipc__cu_t *cu;
  unsigned wf;
  int p = 0, kernel = 0;
  vmmipc_result_t r = sync_value(value, op);
  if (!r) r = sync_begin(w, rank, op, &p, &cu, &wf, &kernel);
  if (r || w->slice < 0) return r;
  if (kernel) return vmmipc__kern_signal(w, rank, value, stream, op);
  /* The caller's slot in rank's part, after an explicit system-scope barrier
   * (which also keeps it behind this slot's earlier signals). */
  CUstreamBatchMemOpParams ops[2];
  memset(ops, 0, sizeof ops);
  ops[0].memoryBarrier.operation = CU_STREAM_MEM_OP_BARRIER;
  ops[0].memoryBarrier.flags = CU_STREAM_MEMORY_BARRIER_TYPE_SYS;
  ops[1].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_64;
  ops[1].writeValue.address = vmmipc__slot_addr(w, p, w->comm->node_rank);
  ops[1].writeValue.value64 = value;
  ops[1].writeValue.flags = CU_STREAM_WRITE_VALUE_DEFAULT; /* v2: no other value is taken */
  CUresult rc = cu->cuStreamBatchMemOp((CUstream)stream, 2, ops, 0);
  if (rc) return vmmipc__cu_error(rc, NULL, "%s: cuStreamBatchMemOp (barrier, write) to rank %d", op, rank);
  return VMMIPC_SUCCESS;
}

vmmipc_result_t vmmipc_win_wait(vmmipc_win_t w, int rank, uint64_t value, void *stream) {
  const char *op = "vmmipc_win_wait";
  const vmmipc__cu_t *cu;
  unsigned wf;
  int p = 0, kernel = 0;
  vmmipc_result_t r = sync_value(value, op);
  if (!r) r = sync_begin(w, rank, op, &p, &cu, &wf, &kernel);
  if (r || w->slice < 0 || !value) return r;
  if (kernel) return vmmipc__kern_wait(w, rank, value, stream, op);
  CUresult rc = cu->cuStreamWaitValue64((CUstream)stream, vmmipc__slot_addr(w, w->comm->node_rank, p), value, wf);
  if (rc) return vmmipc__cu_error(rc, NULL, "%s: cuStreamWaitValue64 for rank %d", op, rank);
  return VMMIPC_SUCCESS;
}

vmmipc_result_t vmmipc_win_barrier(vmmipc_win_t w, void *stream) {
  const char *op = "vmmipc_win_barrier";
  vmmipc_result_t r = sync_args(w, op);
  if (r) return r;
  const vmmipc__cu_t *cu;
  unsigned wf = 0;
  int kernel = 0;
  if ((r = vmmipc__sync_path(w, op, 1, &kernel))) return r;
  if (!kernel && (r = sync_ready(w, op, &cu, &wf))) return r;
  if (w->slice < 0 || w->comm->node_size <= 1) return VMMIPC_SUCCESS;
  return kernel ? vmmipc__kern_barrier(w, stream, op) : vmmipc__memops_barrier(w, stream, wf, op);
}

/* Reads the word at `at` (`what` of `rank`) through the pool's private
 * stream (it never queues behind the user's streams). */
static vmmipc_result_t read_word(const vmmipc__cu_t *cu, vmmipc_win_t w, CUdeviceptr at, uint64_t *v, const char *op,
                                 const char *what, int rank) {
  struct vmmipc__pool *pool = w->comm->pool;
  vmmipc__aside_t aside; /* any thread; never spoils a capture the user has open */
  vmmipc__aside_begin(cu, pool->ctx, &aside);
  pthread_mutex_lock(&pool->mu);
  CUresult rc = cu->cuMemcpyDtoHAsync(v, at, sizeof *v, pool->stream);
  if (!rc) rc = cu->cuStreamSynchronize(pool->stream);
  pthread_mutex_unlock(&pool->mu);
  vmmipc__aside_end(cu, &aside);
  if (rc) return vmmipc__cu_error(rc, NULL, "%s: reading %s of rank %d", op, what, rank);
  return VMMIPC_SUCCESS;
}

/* Reads this rank's slot written by node rank p. */
static vmmipc_result_t read_slot(const vmmipc__cu_t *cu, vmmipc_win_t w, int p, uint64_t *v, const char *op) {
  return read_word(cu, w, vmmipc__slot_addr(w, w->comm->node_rank, p), v, op, "the signal slot",
                   w->comm->rank_of[p]);
}

/* Whether node rank p (another rank) aborted or broke the comm: its
 * release (release.c) wrote the failure value into every slot of its pad
 * that a window uses, and its keeper writes it again while the window is
 * open there; it tells this rank only by an END frame on the socket, which
 * no host sync call reads. Slot p of its pad is read: p alone writes it
 * (signals to itself), so no late signal of this rank's hides the value.
 * Which it was, its END frame says (peeked at: left queued for the calls
 * that read the connection); it follows the release by a few socket
 * writes (an abort's, or a call's leaving on another thread: within about
 * 100 ms), so it is waited for a little; without it, VMMIPC_ERR_PEER. */
static vmmipc_result_t peer_failed(const vmmipc__cu_t *cu, vmmipc_win_t w, int p, int rank, const char *op) {
  vmmipc_comm_t c = w->comm;
  uint64_t v = 0;
  vmmipc_result_t r = read_word(cu, w, vmmipc__slot_addr(w, p, p), &v, op, "the signal pad", rank);
  if (r) return r;
  if (!(v & VMMIPC_SIGNAL_FAILED)) return VMMIPC_SUCCESS;
  int end = -1;
  for (int64_t until = vmmipc__now_ms() + 300; vmmipc__now_ms() < until;) {
    end = vmmipc__tp_end_first(c->tp, p);
    if (end != -1 || vmmipc__tp_aborted_by(c->tp) == p) break;
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
  if (end == VMMIPC_ERR_ABORTED || vmmipc__tp_aborted_by(c->tp) == p) {
    vmmipc__error(VMMIPC_ERR_ABORTED, "%s: rank %d aborted the communicator (vmmipc_comm_abort)", op, rank);
    vmmipc__error_rank(rank);
    return VMMIPC_ERR_ABORTED;
  }
  vmmipc__error(VMMIPC_ERR_PEER,
                "%s: the communicator failed on rank %d (its signal slots hold VMMIPC_SIGNAL_FAILED): it will not "
                "signal; hint: its output has the first error",
                op, rank);
  vmmipc__error_rank(rank);
  return VMMIPC_ERR_PEER;
}

vmmipc_result_t vmmipc_win_wait_host(vmmipc_win_t w, int rank, uint64_t value, int timeout_ms) {
  const char *op = "vmmipc_win_wait_host";
  vmmipc_result_t r = sync_value(value, op);
  if (!r) r = sync_args(w, op);
  int p = 0;
  if (r || (r = sync_peer(w, rank, op, &p)) || (r = vmmipc__sync_refusal(w, op))) return r;
  const vmmipc__cu_t *cu;
  if ((r = vmmipc__cu_load(&cu))) return r;
  if (w->slice < 0 || !value) return VMMIPC_SUCCESS;
  if (timeout_ms <= 0) timeout_ms = w->comm->timeout_ms;
  int64_t start = vmmipc__now_ms(), deadline = start + timeout_ms, next_liveness = start + 100;
  long pause_ns = 1000;
  for (unsigned polls = 0;; polls++) {
    uint64_t v = 0;
    if ((r = read_slot(cu, w, p, &v, op))) return r;
    if (v & VMMIPC_SIGNAL_FAILED) { /* released: the comm failed, maybe in a host wait on another thread */
      if ((r = sync_args(w, op)) || (r = vmmipc__sync_alarm(w->comm, op))) return r;
      vmmipc__error(VMMIPC_ERR_PEER, "%s: the slot of rank %d holds VMMIPC_SIGNAL_FAILED", op, rank);
      vmmipc__error_rank(rank);
      return VMMIPC_ERR_PEER;
    }
    if ((int64_t)(v - value) >= 0) return VMMIPC_SUCCESS; /* the same test as CU_STREAM_WAIT_VALUE_GEQ */
    int64_t now = vmmipc__now_ms();
    if (now >= next_liveness) {
      next_liveness = now + 100;
      pid_t pid = vmmipc__conn_pid(vmmipc__tp_conn(w->comm->tp), p);
      /* A failed peer never signals: this rank's sync calls fail from now
       * on, its stream waits are released, and its next call that holds
       * the comm breaks it (alarm.c). */
      if (vmmipc__pid_gone(pid)) {
        vmmipc__error(VMMIPC_ERR_PEER,
                      "%s: rank %d (pid %d) exited before its slot reached %llu (it holds %llu); hint: its "
                      "output has the first error",
                      op, rank, (int)pid, (unsigned long long)value, (unsigned long long)v);
        vmmipc__error_rank(rank);
        vmmipc__sync_note(w->comm, VMMIPC_ERR_PEER);
        return VMMIPC_ERR_PEER;
      }
      if (p != w->comm->node_rank && (r = peer_failed(cu, w, p, rank, op))) {
        if (r != VMMIPC_ERR_CUDA) vmmipc__sync_note(w->comm, r);
        return r;
      }
    }
    if (now >= deadline) {
      vmmipc__error(VMMIPC_ERR_TIMEOUT,
                    "%s: rank %d did not signal %llu within %d ms (its slot holds %llu); hint: is it alive and "
                    "does it call vmmipc_win_signal with that value?",
                    op, rank, (unsigned long long)value, timeout_ms, (unsigned long long)v);
      vmmipc__error_rank(rank);
      return VMMIPC_ERR_TIMEOUT;
    }
    /* Spin briefly, then back off to 1 ms: latency when it is close,
     * little CPU when it is not. */
    if (polls > 32) {
      struct timespec ts = {0, pause_ns};
      nanosleep(&ts, NULL);
      if (pause_ns < 1000000) pause_ns *= 2;
    } else {
      sched_yield();
    }
  }
}
