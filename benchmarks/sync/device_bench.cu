// Device-API latencies (issue 23), one JSON line per figure on rank 0:
//   dev_barrier      in-kernel barrier, us per barrier over N barriers
//   dev_signal_wait  in-kernel signal -> wait, one way (ping-pong / 2)
//   host_barrier     vmmipc_win_barrier on a stream, GPU us per barrier
//   host_signal_wait vmmipc_win_signal + vmmipc_win_wait ping-pong, one way
// The host rows run on the path VMMIPC_SYNC picks (the "path" field says
// which). Two ranks; on one GPU kernels of the ranks time-slice, so the
// in-kernel rows measure the scheduler, not the interconnect.
//   mpirun -np 2 vmmipc_device_bench [iterations]
#include <cuda_runtime.h>
#include <mpi.h>

#include <cstdio>
#include <cstdlib>

#include "vmmipc.h"
#include "vmmipc_device.cuh"

#define VMM(call)                                                                  \
  do {                                                                             \
    if ((call) != VMMIPC_SUCCESS) {                                                \
      std::fprintf(stderr, "rank %d: %s: %s\n", rank, #call, vmmipc_last_error()); \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                \
    }                                                                              \
  } while (0)

__global__ void k_barriers(vmmipc_win_device_t w, int n, int *bad) {
  for (int i = 0; i < n; i++)
    if (vmmipc_dev_barrier(&w, 0) && threadIdx.x == 0) atomicAdd(bad, 1);
}

// Rank 0 signals 2i+1 and waits for 2i+2; rank 1 answers.
__global__ void k_pingpong(vmmipc_win_device_t w, int peer, int n, int *bad) {
  for (int i = 0; i < n; i++) {
    uint64_t v = 2 * (uint64_t)i + 1;
    if (w.rank == 0) {
      vmmipc_dev_signal(&w, peer, v);
      if (vmmipc_dev_wait(&w, peer, v + 1, 0)) atomicAdd(bad, 1);
    } else {
      if (vmmipc_dev_wait(&w, peer, v, 0)) atomicAdd(bad, 1);
      vmmipc_dev_signal(&w, peer, v + 1);
    }
  }
}

static void row(const char *what, const char *path, int n, double us) {
  std::printf("{\"bench\": \"device\", \"row\": \"%s\", \"path\": \"%s\", \"iterations\": %d, \"us\": %.3f}\n", what,
              path, n, us);
  std::fflush(stdout);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0, ndev = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size != 2) {
    if (rank == 0) std::fprintf(stderr, "vmmipc_device_bench: run with two ranks\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  const int n = argc > 1 ? std::atoi(argv[1]) : 10000;
  cudaGetDeviceCount(&ndev);
  cudaSetDevice(rank % ndev);
  cudaFree(nullptr);
  vmmipc_comm_t comm;
  VMM(vmmipc_comm_create(MPI_COMM_WORLD, nullptr, &comm));
  vmmipc_win_t win;
  VMM(vmmipc_allgather_map(comm, nullptr, nullptr, &win));
  vmmipc_win_device_t dw;
  VMM(vmmipc_win_device(win, &dw));
  int *bad = nullptr;
  cudaMallocManaged(&bad, sizeof(int));
  *bad = 0;
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  const int peer = 1 - rank;
  float ms = 0;
  // In-kernel rows: one warm-up launch, then timed by events around the kernel.
  for (int pass = 0; pass < 2; pass++) {
    MPI_Barrier(MPI_COMM_WORLD);
    cudaEventRecord(e0, s);
    k_barriers<<<1, 32, 0, s>>>(dw, pass ? n : 10, bad);
    cudaEventRecord(e1, s);
    cudaEventSynchronize(e1);
  }
  cudaEventElapsedTime(&ms, e0, e1);
  if (rank == 0) row("dev_barrier", "device", n, 1e3 * ms / n);
  for (int pass = 0; pass < 2; pass++) {
    MPI_Barrier(MPI_COMM_WORLD);
    cudaEventRecord(e0, s);
    k_pingpong<<<1, 1, 0, s>>>(dw, peer, pass ? n : 10, bad);
    cudaEventRecord(e1, s);
    cudaEventSynchronize(e1);
    // The next pass starts its values again at 1: fresh window slots.
    if (!pass) {
      VMM(vmmipc_win_free(win));
      VMM(vmmipc_allgather_map(comm, nullptr, nullptr, &win));
      VMM(vmmipc_win_device(win, &dw));
    }
  }
  cudaEventElapsedTime(&ms, e0, e1);
  if (rank == 0) row("dev_signal_wait", "device", n, 1e3 * ms / n / 2);
  // Host-API rows, on the path VMMIPC_SYNC picks.
  const int hn = n < 2000 ? n : 2000;
  MPI_Barrier(MPI_COMM_WORLD);
  for (int i = 0; i < 10; i++) VMM(vmmipc_win_barrier(win, s));
  cudaStreamSynchronize(s);
  MPI_Barrier(MPI_COMM_WORLD);
  cudaEventRecord(e0, s);
  for (int i = 0; i < hn; i++) VMM(vmmipc_win_barrier(win, s));
  cudaEventRecord(e1, s);
  cudaEventSynchronize(e1);
  cudaEventElapsedTime(&ms, e0, e1);
  vmmipc_win_device_status_t st = VMMIPC_WIN_DEVICE_STATUS_INIT;
  VMM(vmmipc_win_device_status(win, &st));
  const char *path = st.kernel_calls ? "kernel" : "memops";
  if (rank == 0) row("host_barrier", path, hn, 1e3 * ms / hn);
  MPI_Barrier(MPI_COMM_WORLD);
  cudaEventRecord(e0, s);
  for (int i = 0; i < hn; i++) {
    uint64_t v = 2 * (uint64_t)i + 1;
    if (rank == 0) {
      VMM(vmmipc_win_signal(win, peer, v, s));
      VMM(vmmipc_win_wait(win, peer, v + 1, s));
    } else {
      VMM(vmmipc_win_wait(win, peer, v, s));
      VMM(vmmipc_win_signal(win, peer, v + 1, s));
    }
  }
  cudaEventRecord(e1, s);
  cudaEventSynchronize(e1);
  cudaEventElapsedTime(&ms, e0, e1);
  if (rank == 0) row("host_signal_wait", path, hn, 1e3 * ms / hn / 2);
  VMM(vmmipc_win_device_status(win, &st));
  int all = 0;
  MPI_Allreduce(bad, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (all || st.state) std::fprintf(stderr, "rank %d: %d device waits failed, record %d\n", rank, all, st.state);
  VMM(vmmipc_win_free(win));
  VMM(vmmipc_comm_destroy(comm));
  MPI_Finalize();
  return all ? 1 : 0;
}
