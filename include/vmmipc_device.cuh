/*
 * vmmipc device API: signal, wait and barrier inside kernels, on the slots
 * that vmmipc_win_signal / vmmipc_win_wait / vmmipc_win_wait_host use
 * (docs/device-api.md), and flags of your own in window memory. Header-only
 * CUDA C++ (sm_70 and later); no CUDA runtime calls. Fill the struct on the
 * host with vmmipc_win_device and pass it to the kernel by value; `w` below
 * points at that copy. Use this header with the library of the same release
 * (vmmipc_win_device_t changes between releases).
 *
 * Memory ordering (PTX memory model), at the window's scope w->scope: GPU
 * when every node rank uses one GPU, else system (other GPUs, other
 * processes, the host):
 * - vmmipc_dev_signal is a release: every write the calling thread made
 *   before it (and every write of its block, if the block passed
 *   __syncthreads() first) is visible to whoever observes the value through
 *   an acquire: vmmipc_dev_wait, vmmipc_win_wait's stream,
 *   vmmipc_win_wait_host. At GPU scope, what a host or stream wait is
 *   promised is the GPU's own memory; writes to host memory or to another
 *   GPU's memory need __threadfence_system() before the signal for them
 *   (docs/dev/sync-design.md, "Scope").
 * - vmmipc_dev_wait is an acquire: once it returns VMMIPC_DEV_OK the calling
 *   thread sees every write the signaller made before its signal; other
 *   threads of the block see them after a __syncthreads() that follows.
 *   On VMMIPC_DEV_TIMEOUT or VMMIPC_DEV_FAILED nothing is promised.
 * - vmmipc_dev_barrier orders whole blocks: every write any thread of the
 *   calling block made before the barrier, on every node rank, is visible
 *   to every thread of every rank's block after it returns VMMIPC_DEV_OK.
 * - vmmipc_dev_flag_set / vmmipc_dev_flag_wait are the same release and
 *   acquire on a 64-bit word of window memory of your choosing.
 * None of them needs a fence of its own: the release is cumulative over
 * what the block ordered before it with __syncthreads() (base causality
 * order is transitive; docs/dev/sync-design.md, "Why no fence").
 *
 * Timeouts are in nanoseconds of %globaltimer; 0 means the comm's timeout.
 * A wait on a slot that gives up records itself in the window's status (the
 * first one only): the host sees it in vmmipc_win_device_status, and the
 * next host sync call on the window fails naming the rank. A slot with the
 * top bit set holds a failure value (the comm detected a failure): waits on
 * it return VMMIPC_DEV_FAILED at once. A rank out of range or not on the
 * caller's node: signal does nothing, wait returns VMMIPC_DEV_INVALID (the
 * host calls' VMMIPC_ERR_INVALID_ARG).
 */
#ifndef VMMIPC_DEVICE_CUH
#define VMMIPC_DEVICE_CUH

#include <stdint.h>

#include "vmmipc_win_device.h"

#if !defined(__CUDACC__)
#error "vmmipc_device.cuh is CUDA C++: compile it with nvcc (or clang -x cuda)"
#endif

/* ---- internals (vmmipc__dev_*): not part of the API -------------------- */

__device__ __forceinline__ uint64_t vmmipc__dev_now(void) {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

/* A pointer of the window's arrays, which never change while the window is
 * open (written before any kernel gets the struct): a plain load, but one
 * the compiler may hoist out of loops past the releases and acquires (no
 * "memory" clobber), and may also move above the caller's range check:
 * callers clamp the index first, so that a hoisted load stays in the array. */
template <typename T>
__device__ __forceinline__ T vmmipc__dev_fixed(const T *entry) {
  uint64_t v;
  asm("ld.global.u64 %0, [%1];" : "=l"(v) : "l"(entry));
  return (T)v;
}

__device__ __forceinline__ uint64_t vmmipc__dev_load_acquire(const vmmipc_win_device_t *w, const uint64_t *p) {
  uint64_t v;
  if (w->scope == VMMIPC_DEV_SCOPE_GPU)
    asm volatile("ld.acquire.gpu.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  else
    asm volatile("ld.acquire.sys.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

/* No fence first: the release is cumulative (see the top of this file). */
__device__ __forceinline__ void vmmipc__dev_store_release(const vmmipc_win_device_t *w, uint64_t *p, uint64_t v) {
  if (w->scope == VMMIPC_DEV_SCOPE_GPU)
    asm volatile("st.release.gpu.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
  else
    asm volatile("st.release.sys.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

/* The first wait to give up claims a record; later ones leave it. */
__device__ inline __noinline__ void vmmipc__dev_record_to(unsigned long long *claim, vmmipc_dev_record_t *record,
                                                          int state, int barrier, int rank, uint64_t value,
                                                          uint64_t seen) {
  if (!claim || !record) return;
  if (atomicCAS(claim, 0ull, 1ull) != 0ull) return;
  record->value = value;
  record->seen = seen;
  __threadfence_system();
  record->head = (unsigned long long)state | (unsigned long long)(barrier ? 1 : 0) << 8 |
                 (unsigned long long)(uint32_t)rank << 32;
  __threadfence_system();
}

/* Where else a timeout is recorded: the library's host-sync kernels pass
 * the comm's alarm (a timed-out stream wait fails the comm); NULL for the
 * API's own waits. */
typedef struct vmmipc__dev_alarm {
  unsigned long long *claim;
  vmmipc_dev_record_t *record;
} vmmipc__dev_alarm_t;

/* A wait's record: the window's (and the alarm) for a slot, none (claim
 * NULL) for a flag of the user's. `node_rank`: for a barrier, the rank is
 * looked up only when it gives up. */
typedef struct vmmipc__dev_whom {
  int rank, barrier, node_rank;
  const vmmipc__dev_alarm_t *alarm;
} vmmipc__dev_whom_t;

__device__ inline __noinline__ int vmmipc__dev_gave_up(const vmmipc_win_device_t *w, int state, uint64_t value,
                                                       uint64_t seen, vmmipc__dev_whom_t whom) {
  if (whom.rank < 0 && whom.node_rank < 0) return state; /* a flag: the caller reports it */
  const int rank = whom.node_rank >= 0 ? w->node_ranks[whom.node_rank] : whom.rank;
  vmmipc__dev_record_to(w->claim, w->record, state, whom.barrier, rank, value, seen);
  if (state == VMMIPC_DEV_TIMEOUT && whom.alarm)
    vmmipc__dev_record_to(whom.alarm->claim, whom.alarm->record, state, whom.barrier, rank, value, seen);
  return state;
}

/* Spins until *slot >= value (as CU_STREAM_WAIT_VALUE_GEQ compares), a
 * failure value, or the deadline (read from the clock only once a poll
 * missed). A wait for 0 holds at once, as the host calls' do: in that
 * comparison the failure value is not at or above 0, so a wait for 0 is
 * never made. */
__device__ __forceinline__ int vmmipc__dev_wait_word(const vmmipc_win_device_t *w, const uint64_t *slot,
                                                     uint64_t value, uint64_t timeout_ns, vmmipc__dev_whom_t whom) {
  if (!value) return VMMIPC_DEV_OK;
  uint64_t v = vmmipc__dev_load_acquire(w, slot);
  if (!(v & VMMIPC_DEV_FAILED_BIT) && (int64_t)(v - value) >= 0) return VMMIPC_DEV_OK;
  const uint64_t deadline = vmmipc__dev_now() + (timeout_ns ? timeout_ns : w->timeout_ns);
  for (;;) {
    if (v & VMMIPC_DEV_FAILED_BIT) return vmmipc__dev_gave_up(w, VMMIPC_DEV_FAILED, value, v, whom);
    if ((int64_t)(v - value) >= 0) return VMMIPC_DEV_OK;
    if (vmmipc__dev_now() >= deadline) return vmmipc__dev_gave_up(w, VMMIPC_DEV_TIMEOUT, value, v, whom);
    v = vmmipc__dev_load_acquire(w, slot);
  }
}

/* The barrier numbered k over one group of slots (out[q]: the caller's
 * slot at node rank q; in[q]: q's slot here), by the whole calling block,
 * after the block's __syncthreads() that follows its writes. `first`:
 * out[tid] for a thread below node_size that is not the caller's own,
 * loaded before that __syncthreads() (else NULL). Every thread of the block
 * gets the same result. Cost: one release per peer and one acquire poll per
 * peer, in parallel threads, and one bar.red. */
__device__ __forceinline__ int vmmipc__dev_barrier_k(const vmmipc_win_device_t *w, uint64_t *const *out,
                                                     uint64_t *first, const uint64_t *in, uint64_t k,
                                                     uint64_t timeout_ns, const vmmipc__dev_alarm_t *alarm) {
  const int nthreads = (int)(blockDim.x * blockDim.y * blockDim.z);
  const int tid = (int)(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z));
  const int n = w->node_size, me = w->node_rank;
  if (first) vmmipc__dev_store_release(w, first, k);
  for (int q = tid + nthreads; q < n; q += nthreads) { /* more node ranks than threads */
    uint64_t *to = q != me ? out[q] : nullptr;
    if (to) vmmipc__dev_store_release(w, to, k);
  }
  int r = VMMIPC_DEV_OK;
  for (int q = tid; q < n; q += nthreads) {
    if (q == me || !in) continue;
    const vmmipc__dev_whom_t whom = {-1, 1, q, alarm};
    const int x = vmmipc__dev_wait_word(w, &in[q], k, timeout_ns, whom);
    if (x > r) r = x; /* VMMIPC_DEV_FAILED over VMMIPC_DEV_TIMEOUT */
  }
  /* Every thread's acquire precedes the block's later reads; and whether
   * any wait gave up, told to all without shared memory. */
  if (!__syncthreads_or(r != VMMIPC_DEV_OK)) return VMMIPC_DEV_OK;
  return __syncthreads_or(r == VMMIPC_DEV_FAILED) ? VMMIPC_DEV_FAILED : VMMIPC_DEV_TIMEOUT;
}

/* out[tid] for the thread that tells node rank tid, if any (clamped). */
__device__ __forceinline__ uint64_t *vmmipc__dev_first_out(const vmmipc_win_device_t *w, uint64_t *const *out) {
  const int tid = (int)(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z));
  const bool peer = tid < w->node_size && tid != w->node_rank;
  uint64_t *to = vmmipc__dev_fixed(&out[peer ? tid : 0]);
  return peer ? to : nullptr;
}

/* ---- the API ----------------------------------------------------------- */

/* rank's buffer in the window as mapped here (the caller's own for itself);
 * NULL for a rank that gave none, of another node, or out of range. */
__device__ __forceinline__ void *vmmipc_dev_ptr(const vmmipc_win_device_t *w, int rank) {
  const bool ok = rank >= 0 && rank < w->nranks;
  void *p = vmmipc__dev_fixed(&w->ptrs[ok ? rank : 0]);
  return ok ? p : nullptr;
}

/* Sets the caller's slot in rank's pad to value: a release at the window's
 * scope. The same slot as vmmipc_win_signal(win, rank, ...): use growing
 * values and one signaller (device or host) per slot at a time. A rank out
 * of range or of another node: nothing. */
__device__ __forceinline__ void vmmipc_dev_signal(const vmmipc_win_device_t *w, int rank, uint64_t value) {
  const bool ok = rank >= 0 && rank < w->nranks;
  uint64_t *slot = vmmipc__dev_fixed(&w->signal_out[ok ? rank : 0]);
  if (ok && slot) vmmipc__dev_store_release(w, slot, value);
}

/* Waits until rank's slot in the caller's pad is at least value: an acquire
 * at the window's scope. One thread calls it (others of the block wait at
 * a __syncthreads() after). Returns VMMIPC_DEV_OK (at once for value 0),
 * VMMIPC_DEV_TIMEOUT after timeout_ns (0: the comm's timeout),
 * VMMIPC_DEV_FAILED (a failure value), or VMMIPC_DEV_INVALID (rank out of
 * range or not on the caller's node; nothing recorded). */
__device__ __forceinline__ int vmmipc_dev_wait(const vmmipc_win_device_t *w, int rank, uint64_t value,
                                               uint64_t timeout_ns) {
  const bool ok = rank >= 0 && rank < w->nranks;
  const uint64_t *slot = vmmipc__dev_fixed(&w->signal_in[ok ? rank : 0]);
  if (!ok || !slot) return VMMIPC_DEV_INVALID; /* out of range, or a rank of another node */
  const vmmipc__dev_whom_t whom = {rank, 0, -1, nullptr};
  return vmmipc__dev_wait_word(w, slot, value, timeout_ns, whom);
}

/* Barrier among the node ranks of the window: every thread of exactly one
 * block per rank calls it (it contains __syncthreads()), with the same
 * count of barriers on every rank. Epoch-based: repeats without resets,
 * across kernels and graph replays (the count lives in device memory). Its
 * slots are its own: host barriers do not count. Returns VMMIPC_DEV_OK,
 * VMMIPC_DEV_TIMEOUT or VMMIPC_DEV_FAILED, the same in every thread of the
 * block. One hop: each rank tells every peer, then waits for every peer. */
__device__ __forceinline__ int vmmipc_dev_barrier(const vmmipc_win_device_t *w, uint64_t timeout_ns) {
  if (w->node_size <= 1 || !w->epoch) return VMMIPC_DEV_OK;
  const int tid = (int)(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z));
  /* Loaded before the block barrier, so that their latency overlaps it:
   * this thread's peer slot, and the count (every thread reads it; only
   * thread 0 writes it, after the block barrier, and the next barrier's
   * reads come after this one's bar.red). */
  uint64_t *first = vmmipc__dev_first_out(w, w->barrier_out);
  const uint64_t k = *w->epoch + 1;
  __syncthreads(); /* the block's earlier writes precede every release */
  if (tid == 0) *w->epoch = k;
  return vmmipc__dev_barrier_k(w, w->barrier_out, first, w->barrier_in, k, timeout_ns, nullptr);
}

/* Sets a 64-bit word of window memory (any rank's buffer as mapped here,
 * 8-byte aligned) to value: a release at the window's scope, as
 * vmmipc_dev_signal's. For flags of your own, e.g. one per block: use
 * growing values, one writer per word at a time. */
__device__ __forceinline__ void vmmipc_dev_flag_set(const vmmipc_win_device_t *w, uint64_t *flag, uint64_t value) {
  vmmipc__dev_store_release(w, flag, value);
}

/* Waits until *flag is at least value (as vmmipc_dev_wait compares): an
 * acquire at the window's scope. Returns VMMIPC_DEV_OK (at once for value
 * 0), VMMIPC_DEV_TIMEOUT after timeout_ns (0: the comm's timeout), or
 * VMMIPC_DEV_FAILED if the word has the top bit set (the library never
 * writes your words: a way for you to pass a failure on). Nothing is
 * recorded: the caller reports it. */
__device__ __forceinline__ int vmmipc_dev_flag_wait(const vmmipc_win_device_t *w, const uint64_t *flag, uint64_t value,
                                                    uint64_t timeout_ns) {
  const vmmipc__dev_whom_t whom = {-1, 0, -1, nullptr};
  return vmmipc__dev_wait_word(w, flag, value, timeout_ns, whom);
}

#endif /* VMMIPC_DEVICE_CUH */
