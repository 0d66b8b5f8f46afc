// One-shot all-reduce with the device API (docs/device-api.md): every rank
// owns a slice of an allgather_map window; one kernel copies the input into
// its slice, passes a device barrier, reads every node peer's slice and
// sums, and passes a second barrier before the slices may be written again.
// The result is checked against MPI_Allreduce, for sizes of 8 B to 64 KiB,
// several rounds each (the window is reused without any reset).
//   mpirun -np 2 ./allreduce_oneshot [rounds]
// All ranks must be on one node (a one-shot all-reduce reads every peer).
#include <cuda_runtime.h>
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "vmmipc.h"
#include "vmmipc_device.cuh"

#define VMM(call)                                                                 \
  do {                                                                            \
    vmmipc_result_t r_ = (call);                                                  \
    if (r_ != VMMIPC_SUCCESS) {                                                   \
      std::fprintf(stderr, "rank %d: %s: %s\n", rank, #call, vmmipc_last_error()); \
      MPI_Abort(MPI_COMM_WORLD, 1);                                               \
    }                                                                             \
  } while (0)
#define CUDA(call)                                                                     \
  do {                                                                                 \
    cudaError_t e_ = (call);                                                           \
    if (e_ != cudaSuccess) {                                                           \
      std::fprintf(stderr, "rank %d: %s: %s\n", rank, #call, cudaGetErrorString(e_)); \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                    \
    }                                                                                  \
  } while (0)

// One block: in -> my slice; barrier; out = sum of every slice; barrier.
// *status gets the first barrier result that was not VMMIPC_DEV_OK.
__global__ void allreduce_oneshot(vmmipc_win_device_t w, const float *in, float *out, int n, int *status) {
  float *mine = static_cast<float *>(vmmipc_dev_ptr(&w, w.rank));
  for (int i = threadIdx.x; i < n; i += blockDim.x) mine[i] = in[i];
  int r = vmmipc_dev_barrier(&w, 0); // every slice is written
  for (int i = threadIdx.x; r == VMMIPC_DEV_OK && i < n; i += blockDim.x) {
    float s = 0;
    for (int q = 0; q < w.nranks; q++) s += static_cast<const float *>(vmmipc_dev_ptr(&w, q))[i];
    out[i] = s;
  }
  int r2 = vmmipc_dev_barrier(&w, 0); // nobody reads a slice any more
  if (threadIdx.x == 0) *status = r ? r : r2;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 3;
  MPI_Comm local;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local);
  int lrank = 0, lsize = 0, ndev = 0;
  MPI_Comm_rank(local, &lrank);
  MPI_Comm_size(local, &lsize);
  if (lsize != size) {
    if (rank == 0) std::fprintf(stderr, "allreduce_oneshot: every rank must be on one node\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  CUDA(cudaGetDeviceCount(&ndev));
  CUDA(cudaSetDevice(lrank % ndev));
  CUDA(cudaFree(nullptr)); // the primary context, current now

  const int max_n = 64 * 1024 / (int)sizeof(float);
  vmmipc_comm_t comm;
  VMM(vmmipc_comm_create(MPI_COMM_WORLD, nullptr, &comm));
  vmmipc_buf_t slice;
  VMM(vmmipc_alloc(max_n * sizeof(float), &slice));
  vmmipc_win_t win;
  VMM(vmmipc_allgather_map(comm, slice, nullptr, &win));
  vmmipc_win_device_t dw;
  VMM(vmmipc_win_device(win, &dw));

  float *in = nullptr, *out = nullptr;
  int *status = nullptr;
  CUDA(cudaMalloc(&in, max_n * sizeof(float)));
  CUDA(cudaMalloc(&out, max_n * sizeof(float)));
  CUDA(cudaMalloc(&status, sizeof(int)));
  std::vector<float> h_in(max_n), h_out(max_n), want(max_n);
  long bad = 0, checked = 0;
  for (int count = 2; count <= max_n; count *= 2) { // 8 B to 64 KiB
    for (int round = 0; round < rounds; round++) {
      // Small integers: the float sums are exact in any order.
      for (int i = 0; i < count; i++) h_in[i] = (float)((rank + 1) * (i % 97 + 1) + round);
      CUDA(cudaMemcpy(in, h_in.data(), count * sizeof(float), cudaMemcpyHostToDevice));
      allreduce_oneshot<<<1, 512>>>(dw, in, out, count, status);
      CUDA(cudaGetLastError());
      int st = -1;
      CUDA(cudaMemcpy(&st, status, sizeof st, cudaMemcpyDeviceToHost));
      CUDA(cudaMemcpy(h_out.data(), out, count * sizeof(float), cudaMemcpyDeviceToHost));
      MPI_Allreduce(h_in.data(), want.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      if (st != VMMIPC_DEV_OK) {
        std::fprintf(stderr, "rank %d: device barrier returned %d at %d floats\n", rank, st, count);
        bad++;
      }
      for (int i = 0; i < count; i++) bad += h_out[i] != want[i];
      checked += count;
    }
  }
  long all_bad = 0;
  MPI_Allreduce(&bad, &all_bad, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0)
    std::printf("allreduce_oneshot: %d ranks, 8 B to 64 KiB, %d rounds each: %s (%ld elements per rank checked "
                "against MPI_Allreduce)\n",
                size, rounds, all_bad ? "MISMATCH" : "ok", checked);
  CUDA(cudaFree(in));
  CUDA(cudaFree(out));
  CUDA(cudaFree(status));
  VMM(vmmipc_win_free(win));
  VMM(vmmipc_buf_free(slice));
  VMM(vmmipc_comm_destroy(comm));
  MPI_Finalize();
  return all_bad ? 1 : 0;
}
