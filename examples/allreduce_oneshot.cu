// One-shot all-reduce with the device API (docs/device-api.md): every rank
// owns a slice of an allgather_map window; one kernel copies the input into
// its slice, passes a device barrier, reads every node peer's slice and
// sums, and passes a second barrier before the slices may be written again.
// The result is checked against MPI_Allreduce, for sizes of 8 B to 64 KiB,
// several rounds each (the window is reused without any reset).
// --graph: the kernel of each size is captured once in a CUDA graph and the
// graph is replayed every round, with new input and the result checked
// after each replay (the device barrier's epochs live in device memory, so
// nothing of them is baked into the capture); then the replays are timed
// back to back (--timed N, default 1000) and printed in us per replay.
//   mpirun -np 2 ./allreduce_oneshot [rounds] [--graph] [--timed N]
// All ranks must be on one node (a one-shot all-reduce reads every peer).
#include <cuda_runtime.h>
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
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
  int rounds = 0, timed = 1000;
  bool graph = false;
  for (int i = 1; i < argc; i++) {
    if (std::strcmp(argv[i], "--graph") == 0)
      graph = true;
    else if (std::strcmp(argv[i], "--timed") == 0 && i + 1 < argc)
      timed = std::atoi(argv[++i]);
    else
      rounds = std::atoi(argv[i]);
  }
  if (rounds <= 0) rounds = graph ? 100 : 3;
  if (timed <= 0) timed = 1;
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
  cudaStream_t stream;
  CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaEvent_t e0, e1;
  CUDA(cudaEventCreate(&e0));
  CUDA(cudaEventCreate(&e1));
  long bad = 0, checked = 0;
  for (int count = 2; count <= max_n; count *= 2) { // 8 B to 64 KiB
    cudaGraph_t g = nullptr;
    cudaGraphExec_t exec = nullptr;
    if (graph) { // captured once; only the input changes between replays
      CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
      allreduce_oneshot<<<1, 512, 0, stream>>>(dw, in, out, count, status);
      CUDA(cudaStreamEndCapture(stream, &g));
      CUDA(cudaGraphInstantiate(&exec, g, 0));
    }
    for (int round = 0; round < rounds; round++) {
      // Small integers: the float sums are exact in any order.
      for (int i = 0; i < count; i++) h_in[i] = (float)((rank + 1) * (i % 97 + 1) + round);
      // On the kernel's stream: a non-blocking stream is not ordered after the legacy default stream.
      CUDA(cudaMemcpyAsync(in, h_in.data(), count * sizeof(float), cudaMemcpyHostToDevice, stream));
      CUDA(cudaMemsetAsync(out, 0, count * sizeof(float), stream)); // each call must write the result anew
      if (graph)
        CUDA(cudaGraphLaunch(exec, stream));
      else
        allreduce_oneshot<<<1, 512, 0, stream>>>(dw, in, out, count, status);
      CUDA(cudaGetLastError());
      CUDA(cudaStreamSynchronize(stream));
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
    if (graph) { // back-to-back replays, GPU time; the slowest rank's
      MPI_Barrier(MPI_COMM_WORLD);
      CUDA(cudaEventRecord(e0, stream));
      for (int i = 0; i < timed; i++) CUDA(cudaGraphLaunch(exec, stream));
      CUDA(cudaEventRecord(e1, stream));
      CUDA(cudaEventSynchronize(e1));
      float ms = 0, worst = 0;
      CUDA(cudaEventElapsedTime(&ms, e0, e1));
      MPI_Reduce(&ms, &worst, 1, MPI_FLOAT, MPI_MAX, 0, MPI_COMM_WORLD);
      if (rank == 0)
        std::printf("allreduce_oneshot: graph replay, %6d B: %8.3f us per replay (%d back to back)\n",
                    count * (int)sizeof(float), 1e3 * worst / timed, timed);
      CUDA(cudaGraphExecDestroy(exec));
      CUDA(cudaGraphDestroy(g));
    }
  }
  long all_bad = 0;
  MPI_Allreduce(&bad, &all_bad, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0)
    std::printf("allreduce_oneshot: %d ranks, 8 B to 64 KiB, %d %s each: %s (%ld elements per rank checked "
                "against MPI_Allreduce)\n",
                size, rounds, graph ? "graph replays (captured once per size)" : "rounds", all_bad ? "MISMATCH" : "ok",
                checked);
  CUDA(cudaEventDestroy(e0));
  CUDA(cudaEventDestroy(e1));
  CUDA(cudaStreamDestroy(stream));
  CUDA(cudaFree(in));
  CUDA(cudaFree(out));
  CUDA(cudaFree(status));
  VMM(vmmipc_win_free(win));
  VMM(vmmipc_buf_free(slice));
  VMM(vmmipc_comm_destroy(comm));
  MPI_Finalize();
  return all_bad ? 1 : 0;
}
