// The kernels behind the host sync calls (src/sync/kernels.c launches them
// when the comm's path is kernels): one thread signals, one thread waits,
// one block runs the host-API barrier. They are the device API's own
// functions, so host and device sync share slots, ordering and the timeout
// record; a wait that times out also sets the comm's alarm, which fails the
// comm (docs/sync.md). Nothing that changes between calls is an argument of
// the barrier: it reads and advances its number in device memory, so a
// launch captured in a CUDA graph replays correctly.
// Built to PTX by nvcc when present; else the committed sync.ptx and
// sync90.ptx are used (src/CMakeLists.txt).
#include "vmmipc_device.cuh"

// In the compute_90 build, kernels.c launches these with programmatic
// serialization, so that back to back (barrier after barrier, or signal
// after wait) the next launch overlaps this one's end instead of following
// it. Each waits for the stream's previous kernel and its writes before any
// access, as a plain launch would. The next kernel may be launched only once
// this one's wait for other processes is over (vmmipc_k_trigger): a kernel
// of the user's made resident earlier could take the SMs that the kernel we
// wait for needs. On one H200 under MPS the two placements differed by
// less than the spread between runs (docs/dev/sync-design.md, PDL).
__device__ __forceinline__ void vmmipc_k_stream_order() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void vmmipc_k_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

extern "C" __global__ void vmmipc_k_signal(vmmipc_win_device_t w, int rank, uint64_t value) {
  vmmipc_k_stream_order();
  vmmipc_k_trigger();
  vmmipc_dev_signal(&w, rank, value);
}

extern "C" __global__ void vmmipc_k_wait(vmmipc_win_device_t w, int rank, uint64_t value, uint64_t timeout_ns,
                                         unsigned long long *alarm_claim, vmmipc_dev_record_t *alarm) {
  vmmipc_k_stream_order();
  if (rank < 0 || rank >= w.nranks || !w.signal_in[rank]) return;
  const vmmipc__dev_alarm_t a = {alarm_claim, alarm};
  const vmmipc__dev_whom_t whom = {rank, 0, -1, &a};
  (void)vmmipc__dev_wait_word(&w, w.signal_in[rank], value, timeout_ns, whom);
  vmmipc_k_trigger();
}

// A barrier of the host API, on its own slots (not the device barrier's);
// *epoch numbers them on this rank in the order they start. The caller
// orders a window's barriers on the GPU (vmmipc.h): barriers on two
// unordered streams could run at once and pair by that order, not by
// stream, which no counter can fix. The add is atomic all the same.
extern "C" __global__ void vmmipc_k_barrier(vmmipc_win_device_t w, uint64_t *const *out, const uint64_t *in,
                                            uint64_t *epoch, uint64_t timeout_ns, unsigned long long *alarm_claim,
                                            vmmipc_dev_record_t *alarm) {
  __shared__ uint64_t k;
  vmmipc_k_stream_order();
  uint64_t *first = vmmipc__dev_first_out(&w, out);
  if (threadIdx.x == 0) k = atomicAdd(reinterpret_cast<unsigned long long *>(epoch), 1ull) + 1;
  __syncthreads(); // also: the stream's earlier work precedes the kernel (stream order), the releases follow
  const vmmipc__dev_alarm_t a = {alarm_claim, alarm};
  (void)vmmipc__dev_barrier_k(&w, out, first, in, k, timeout_ns, &a);
  vmmipc_k_trigger();
}
