// A user's persistent kernel next to host sync (issue 30, DESIGN.md section
// 8; ctest label "gpu", real driver only, run on each VMMIPC_SYNC path). Each
// rank launches a kernel that spins in vmmipc_dev_wait, on a non-blocking
// stream, for a host signal of its own process, then for its left
// neighbour's; only then does the host send them, on another non-blocking
// stream. No host sync call may load code or wait for the context, so every
// kernel sees its signals. While the kernels run, the host also calls
// vmmipc_win_device, a barrier, and vmmipc_win_wait_host for the kernel's
// own signal. Also: a device wait for a rank out of range or of another
// node returns VMMIPC_DEV_INVALID. Needs two or more ranks on one node;
// prints one line per check, exits non-zero if any failed on any rank.
#include <cuda_runtime.h>
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "gpu_test.h"
#include "vmmipc.h"
#include "vmmipc_device.cuh"

// Long enough for ranks time-slicing one GPU without MPS, short enough that
// a deadlock (the old module load) fails the test in seconds.
static const uint64_t kTimeout = 20ull * 1000000000ull;

// res: [0] the wait for the own process's signal, [1] for the left
// neighbour's, [2] 1 once started. Then it signals the right neighbour, for
// the host's wait_host there.
__global__ void persistent(vmmipc_win_device_t w, int self, int left, int right, volatile int *res) {
  res[2] = 1;
  __threadfence_system();
  res[0] = vmmipc_dev_wait(&w, self, 1, kTimeout);
  res[1] = vmmipc_dev_wait(&w, left, 2, kTimeout);
  vmmipc_dev_signal(&w, right, 3);
}

__global__ void invalid_ranks(vmmipc_win_device_t w, int off_node, int *res) {
  res[0] = vmmipc_dev_wait(&w, -1, 1, 1000);
  res[1] = vmmipc_dev_wait(&w, w.nranks, 1, 1000);
  res[2] = off_node >= 0 ? vmmipc_dev_wait(&w, off_node, 1, 1000) : VMMIPC_DEV_INVALID;
  res[3] = vmmipc_dev_wait(&w, w.rank, 0, 1000); // a wait for 0: at once
}

int main(int argc, char **argv) {
  int size = 0;
  if (!GpuTestStart(&argc, &argv, "test_persistent_gpu", &size)) return 77;
  const int rank = rank_;
  const char *path = std::getenv("VMMIPC_SYNC");

  vmmipc_comm_t comm;
  vmmipc_config_t cfg = VMMIPC_CONFIG_INIT;
  cfg.timeout_ms = 60000;
  VMM(vmmipc_comm_create(MPI_COMM_WORLD, &cfg, &comm));
  vmmipc_win_t win; // made before any kernel runs: a window may load code
  VMM(vmmipc_allgather_map(comm, nullptr, nullptr, &win));
  vmmipc_win_device_t dw;
  VMM(vmmipc_win_device(win, &dw));
  int *res = nullptr;
  CUDA(cudaHostAlloc(&res, 8 * sizeof(int), cudaHostAllocMapped));
  std::memset(res, 0xff, 8 * sizeof(int));
  res[2] = 0;
  cudaStream_t ks, hs;
  CUDA(cudaStreamCreateWithFlags(&ks, cudaStreamNonBlocking));
  CUDA(cudaStreamCreateWithFlags(&hs, cudaStreamNonBlocking));
  const int right = (rank + 1) % size, left = (rank + size - 1) % size;
  MPI_Barrier(MPI_COMM_WORLD);

  persistent<<<1, 1, 0, ks>>>(dw, rank, left, right, res);
  CUDA(cudaGetLastError());
  while (!*(volatile int *)&res[2]) {
  } // it runs: from now on nothing may wait for the context
  double t0 = MPI_Wtime();
  vmmipc_win_device_t again;
  VMM(vmmipc_win_device(win, &again));
  // The right neighbour's kernel waits for 2; this rank's kernel later writes
  // 3 to the same slot. Stream order puts the 2 before the own signal 1
  // that the kernel waits for first, so the 3 always lands after the 2
  // (the other order let a late 2 overwrite the 3: seen on an H200).
  VMM(vmmipc_win_signal(win, right, 2, hs));
  VMM(vmmipc_win_signal(win, rank, 1, hs)); // the kernel's own process's signal
  VMM(vmmipc_win_barrier(win, hs));
  VMM(vmmipc_win_wait_host(win, left, 3, 30000)); // the left kernel's own signal
  SyncBounded(hs, "the host's signals and barrier");
  SyncBounded(ks, "the persistent kernel");
  double s = MPI_Wtime() - t0;
  CHECK(res[0] == VMMIPC_DEV_OK, "the kernel's wait for its own host's signal returned %d", res[0]);
  CHECK(res[1] == VMMIPC_DEV_OK, "the kernel's wait for rank %d's host signal returned %d", left, res[1]);
  CHECK(s < 10.0, "the kernels waited %.1f s", s);
  vmmipc_win_device_status_t st = VMMIPC_WIN_DEVICE_STATUS_INIT;
  VMM(vmmipc_win_device_status(win, &st));
  CHECK(st.state == VMMIPC_DEV_OK, "a record: state %d rank %d", st.state, st.rank);
  if (rank == 0)
    std::printf("persistent: kernels saw their host signals in %.3f ms (VMMIPC_SYNC=%s, host sync path: %s)\n",
                s * 1e3, path ? path : "auto", SyncPathName(st));
  MPI_Barrier(MPI_COMM_WORLD);

  // Ranks out of range, and (each rank a node of its own) of another node.
  int off = -1;
  vmmipc_comm_t split = nullptr;
  vmmipc_win_t swin = nullptr;
  char node[32];
  std::snprintf(node, sizeof node, "persistent-%d", rank);
  setenv("VMMIPC_NODE_ID", node, 1);
  VMM(vmmipc_comm_create(MPI_COMM_WORLD, &cfg, &split));
  unsetenv("VMMIPC_NODE_ID");
  VMM(vmmipc_allgather_map(split, nullptr, nullptr, &swin));
  vmmipc_win_device_t sdw;
  VMM(vmmipc_win_device(swin, &sdw));
  off = right;
  invalid_ranks<<<1, 1, 0, ks>>>(sdw, off, res);
  SyncBounded(ks, "the invalid-rank kernel");
  CHECK(res[0] == VMMIPC_DEV_INVALID && res[1] == VMMIPC_DEV_INVALID, "out of range: %d, %d", res[0], res[1]);
  CHECK(res[2] == VMMIPC_DEV_INVALID, "rank %d of another node: %d", off, res[2]);
  CHECK(res[3] == VMMIPC_DEV_OK, "a wait for 0: %d", res[3]);
  CHECK(vmmipc_win_wait(swin, off, 1, hs) == VMMIPC_ERR_INVALID_ARG, "the host's wait for another node's rank");
  VMM(vmmipc_win_device_status(swin, &st));
  CHECK(st.state == VMMIPC_DEV_OK, "an invalid rank left a record (state %d)", st.state);
  if (rank == 0) std::printf("invalid ranks: VMMIPC_DEV_INVALID, nothing recorded\n");
  MPI_Barrier(MPI_COMM_WORLD);
  VMM(vmmipc_win_free(swin));
  VMM(vmmipc_comm_destroy(split));

  CUDA(cudaStreamDestroy(ks));
  CUDA(cudaStreamDestroy(hs));
  CUDA(cudaFreeHost(res));
  VMM(vmmipc_win_free(win));
  VMM(vmmipc_comm_destroy(comm));
  return GpuTestEnd("test_persistent_gpu");
}
