// The kernels behind the host sync calls (src/sync/kernels.c launches them
// when the comm's path is kernels): one thread signals, one thread waits,
// one block runs the host-API barrier. They are the device API's own
// functions, so host and device sync share slots, ordering and the timeout
// record; a wait that times out also sets the comm's alarm, which fails the
// comm (docs/sync.md). Nothing that changes between calls is an argument of
// the barrier: it reads and advances its number in device memory, so a
// launch captured in a CUDA graph replays correctly.
// Built to PTX by nvcc when present; else the committed sync.ptx is used
// (src/CMakeLists.txt).
#include "vmmipc_device.cuh"

extern "C" __global__ void vmmipc_k_signal(vmmipc_win_device_t w, int rank, uint64_t value) {
  vmmipc_dev_signal(&w, rank, value);
}

extern "C" __global__ void vmmipc_k_wait(vmmipc_win_device_t w, int rank, uint64_t value, uint64_t timeout_ns,
                                         unsigned long long *alarm_claim, vmmipc_dev_record_t *alarm) {
  if (rank < 0 || rank >= w.nranks || !w.signal_in[rank]) return;
  const vmmipc__dev_alarm_t a = {alarm_claim, alarm};
  (void)vmmipc__dev_wait_slot(&w, w.signal_in[rank], value, vmmipc__dev_deadline(&w, timeout_ns), rank, 0, &a);
}

// A barrier of the host API, on its own slots (not the device barrier's);
// *epoch counts them on this rank.
extern "C" __global__ void vmmipc_k_barrier(vmmipc_win_device_t w, uint64_t *const *out, const uint64_t *in,
                                            uint64_t *epoch, uint64_t timeout_ns, unsigned long long *alarm_claim,
                                            vmmipc_dev_record_t *alarm) {
  __shared__ uint64_t k;
  if (threadIdx.x == 0) k = atomicAdd(reinterpret_cast<unsigned long long *>(epoch), 1ull) + 1;
  __syncthreads();
  const vmmipc__dev_alarm_t a = {alarm_claim, alarm};
  (void)vmmipc__dev_barrier_on(&w, out, in, k, timeout_ns, &a);
}
