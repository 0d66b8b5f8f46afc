// The kernels behind the host sync calls (src/sync/kernels.c launches them
// when VMMIPC_SYNC allows): one thread signals, one thread waits, one block
// runs the host-API barrier. They are the device API's own functions, so
// host and device sync share slots, ordering and the timeout record.
// Built to PTX by nvcc when present; else the committed sync.ptx is used
// (src/sync/kern/CMakeLists.txt).
#include "vmmipc_device.cuh"

extern "C" __global__ void vmmipc_k_signal(vmmipc_win_device_t w, int rank, uint64_t value) {
  vmmipc_dev_signal(&w, rank, value);
}

extern "C" __global__ void vmmipc_k_wait(vmmipc_win_device_t w, int rank, uint64_t value, uint64_t timeout_ns) {
  (void)vmmipc_dev_wait(&w, rank, value, timeout_ns);
}

// Barrier k of the host API, on its own slots (not the device barrier's).
extern "C" __global__ void vmmipc_k_barrier(vmmipc_win_device_t w, uint64_t *const *out, const uint64_t *in,
                                            uint64_t k, uint64_t timeout_ns) {
  (void)vmmipc__dev_barrier_on(&w, out, in, k, timeout_ns);
}
