/*
 * vmmipc device API: signal, wait and barrier inside kernels, on the slots
 * that vmmipc_win_signal / vmmipc_win_wait / vmmipc_win_wait_host use
 * (docs/device-api.md). Header-only CUDA C++ (sm_70 and later); no CUDA
 * runtime calls. Fill the struct on the host with vmmipc_win_device and
 * pass it to the kernel by value; `w` below points at that copy.
 *
 * Memory ordering (PTX memory model, system scope: other GPUs, other
 * processes and the host):
 * - vmmipc_dev_signal is a release: every write the calling thread made
 *   before it (and every write of its block, if the block passed
 *   __syncthreads() first) is visible to whoever observes the value through
 *   an acquire: vmmipc_dev_wait, vmmipc_win_wait's stream, vmmipc_win_wait_host.
 * - vmmipc_dev_wait is an acquire: once it returns VMMIPC_DEV_OK the calling
 *   thread sees every write the signaller made before its signal; other
 *   threads of the block see them after a __syncthreads() that follows.
 *   On VMMIPC_DEV_TIMEOUT or VMMIPC_DEV_FAILED nothing is promised.
 * - vmmipc_dev_barrier orders whole blocks: every write any thread of the
 *   calling block made before the barrier, on every node rank, is visible
 *   to every thread of every rank's block after it returns VMMIPC_DEV_OK.
 *
 * Timeouts are in nanoseconds of %globaltimer; 0 means the comm's timeout.
 * A wait that gives up records itself in the window's status (the first one
 * only): the host sees it in vmmipc_win_device_status, and the next host
 * sync call on the window fails naming the rank. A slot with the top bit
 * set holds a failure value (the comm detected a failure): waits on it
 * return VMMIPC_DEV_FAILED at once. A rank out of range or not on the
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

__device__ __forceinline__ uint64_t vmmipc__dev_load_acquire(const uint64_t *p) {
  uint64_t v;
  asm volatile("ld.acquire.sys.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

/* A fence first, so that the release is cumulative over what the block
 * ordered before it with __syncthreads(). */
__device__ __forceinline__ void vmmipc__dev_store_release(uint64_t *p, uint64_t v) {
  __threadfence_system();
  asm volatile("st.release.sys.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

__device__ __forceinline__ uint64_t vmmipc__dev_deadline(const vmmipc_win_device_t *w, uint64_t timeout_ns) {
  return vmmipc__dev_now() + (timeout_ns ? timeout_ns : w->timeout_ns);
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

/* Spins until *slot >= value (as CU_STREAM_WAIT_VALUE_GEQ compares), a
 * failure value, or the deadline. A wait for 0 holds at once, as the host
 * calls' do: in that comparison the failure value is not at or above 0,
 * so a wait for 0 is never made. */
__device__ __forceinline__ int vmmipc__dev_wait_slot(const vmmipc_win_device_t *w, const uint64_t *slot,
                                                     uint64_t value, uint64_t deadline, int rank, int barrier,
                                                     const vmmipc__dev_alarm_t *alarm) {
  if (!value) return VMMIPC_DEV_OK;
  for (;;) {
    uint64_t v = vmmipc__dev_load_acquire(slot);
    if (v & VMMIPC_DEV_FAILED_BIT) {
      vmmipc__dev_record_to(w->claim, w->record, VMMIPC_DEV_FAILED, barrier, rank, value, v);
      return VMMIPC_DEV_FAILED;
    }
    if ((int64_t)(v - value) >= 0) return VMMIPC_DEV_OK;
    if (vmmipc__dev_now() >= deadline) {
      vmmipc__dev_record_to(w->claim, w->record, VMMIPC_DEV_TIMEOUT, barrier, rank, value, v);
      if (alarm) vmmipc__dev_record_to(alarm->claim, alarm->record, VMMIPC_DEV_TIMEOUT, barrier, rank, value, v);
      return VMMIPC_DEV_TIMEOUT;
    }
  }
}

/* Barrier k over one group of slots (out[q]: the caller's slot at node rank
 * q; in[q]: q's slot here), by the whole calling block. */
__device__ __forceinline__ int vmmipc__dev_barrier_on(const vmmipc_win_device_t *w, uint64_t *const *out,
                                                      const uint64_t *in, uint64_t k, uint64_t timeout_ns,
                                                      const vmmipc__dev_alarm_t *alarm) {
  __shared__ int vmmipc__result;
  const int nthreads = (int)(blockDim.x * blockDim.y * blockDim.z);
  const int tid = (int)(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z));
  const int n = w->node_size, me = w->node_rank;
  if (tid == 0) vmmipc__result = VMMIPC_DEV_OK;
  __syncthreads(); /* the block's earlier writes precede every thread's release below */
  for (int q = tid; q < n; q += nthreads)
    if (q != me && out[q]) vmmipc__dev_store_release(out[q], k);
  uint64_t deadline = vmmipc__dev_deadline(w, timeout_ns);
  for (int q = tid; q < n; q += nthreads) {
    if (q == me || !in) continue;
    int r = vmmipc__dev_wait_slot(w, &in[q], k, deadline, w->node_ranks[q], 1, alarm);
    if (r) atomicMax(&vmmipc__result, r);
  }
  __syncthreads(); /* every thread's acquire precedes the block's later reads */
  int r = vmmipc__result;
  __syncthreads(); /* nobody resets the result before everyone read it */
  return r;
}

/* ---- the API ----------------------------------------------------------- */

/* rank's buffer in the window as mapped here (the caller's own for itself);
 * NULL for a rank that gave none, of another node, or out of range. */
__device__ __forceinline__ void *vmmipc_dev_ptr(const vmmipc_win_device_t *w, int rank) {
  return rank >= 0 && rank < w->nranks ? w->ptrs[rank] : nullptr;
}

/* Sets the caller's slot in rank's pad to value; release at system scope.
 * The same slot as vmmipc_win_signal(win, rank, ...): use growing values
 * and one signaller (device or host) per slot at a time. A rank out of
 * range or of another node: nothing. */
__device__ __forceinline__ void vmmipc_dev_signal(const vmmipc_win_device_t *w, int rank, uint64_t value) {
  if (rank < 0 || rank >= w->nranks) return;
  uint64_t *slot = w->signal_out[rank];
  if (slot) vmmipc__dev_store_release(slot, value);
}

/* Waits until rank's slot in the caller's pad is at least value; acquire
 * at system scope. One thread calls it (others of the block wait at a
 * __syncthreads() after). Returns VMMIPC_DEV_OK (at once for value 0),
 * VMMIPC_DEV_TIMEOUT after timeout_ns (0: the comm's timeout),
 * VMMIPC_DEV_FAILED (a failure value), or VMMIPC_DEV_INVALID (rank out of
 * range or not on the caller's node; nothing recorded). */
__device__ __forceinline__ int vmmipc_dev_wait(const vmmipc_win_device_t *w, int rank, uint64_t value,
                                               uint64_t timeout_ns) {
  if (rank < 0 || rank >= w->nranks) return VMMIPC_DEV_INVALID;
  const uint64_t *slot = w->signal_in[rank];
  if (!slot) return VMMIPC_DEV_INVALID; /* a rank of another node */
  return vmmipc__dev_wait_slot(w, slot, value, vmmipc__dev_deadline(w, timeout_ns), rank, 0, nullptr);
}

/* Barrier among the node ranks of the window: every thread of exactly one
 * block per rank calls it (it contains __syncthreads()), with the same
 * count of barriers on every rank. Epoch-based: repeats without resets,
 * across kernels. Its slots are its own: host barriers do not count.
 * Returns VMMIPC_DEV_OK, VMMIPC_DEV_TIMEOUT or VMMIPC_DEV_FAILED, the same
 * in every thread of the block. */
__device__ __forceinline__ int vmmipc_dev_barrier(const vmmipc_win_device_t *w, uint64_t timeout_ns) {
  __shared__ uint64_t vmmipc__epoch;
  const int tid = (int)(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z));
  if (w->node_size <= 1 || !w->epoch) return VMMIPC_DEV_OK;
  __syncthreads();
  if (tid == 0) vmmipc__epoch = ++*w->epoch; /* one block per rank: no other writer */
  __syncthreads();
  return vmmipc__dev_barrier_on(w, w->barrier_out, w->barrier_in, vmmipc__epoch, timeout_ns, nullptr);
}

#endif /* VMMIPC_DEVICE_CUH */
