// One-shot all-reduce with the device API (docs/device-api.md): every rank
// owns a buffer of an allgather_map window; one kernel
// (allreduce_oneshot.cuh) copies the input into this rank's buffer, tells
// every peer with a flag per block and waits for theirs, then sums every
// rank's part. The result is checked against MPI_Allreduce, for sizes of
// 8 B to 64 KiB, several rounds each (the window is reused without any
// reset).
// --graph: the kernel of each size is captured once in a CUDA graph and the
// graph is replayed every round, with new input and the result checked
// after each replay (the kernel counts its calls in device memory, so
// nothing of them is baked into the capture).
// Then, for each size, N calls (or replays) run back to back (--timed N,
// default 1000), timed and printed in us per call, and the last one's
// result is checked. Kernels are launched with programmatic serialization
// on devices that take it (oneshot::launch); --no-pdl launches them plainly.
//   mpirun -np 2 ./allreduce_oneshot [rounds] [--graph] [--timed N] [--no-pdl]
// All ranks must be on one node (a one-shot all-reduce reads every peer).
#include <cuda_runtime.h>
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "allreduce_oneshot.cuh"
#include "vmmipc.h"

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

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int rounds = 0, timed = 1000;
  bool graph = false, pdl = true;
  for (int i = 1; i < argc; i++) {
    if (std::strcmp(argv[i], "--graph") == 0)
      graph = true;
    else if (std::strcmp(argv[i], "--no-pdl") == 0)
      pdl = false;
    else if (std::strcmp(argv[i], "--timed") == 0 && i + 1 < argc)
      timed = std::atoi(argv[++i]);
    else
      rounds = std::atoi(argv[i]);
  }
  if (rounds <= 0) rounds = graph ? 100 : 3;
  if (timed <= 0) timed = 1;
  pdl = pdl && oneshot::pdl_supported();
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

  const int max_n = oneshot::kMaxFloats;
  if (size > oneshot::kThreads) {
    if (rank == 0) std::fprintf(stderr, "allreduce_oneshot: at most %d ranks\n", oneshot::kThreads);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  vmmipc_comm_t comm;
  VMM(vmmipc_comm_create(MPI_COMM_WORLD, nullptr, &comm));
  vmmipc_buf_t slice;
  VMM(vmmipc_alloc(oneshot::buffer_bytes(size), &slice));
  vmmipc_win_t win;
  VMM(vmmipc_allgather_map(comm, slice, nullptr, &win));
  vmmipc_win_device_t dw;
  VMM(vmmipc_win_device(win, &dw));
  // The flags and call counts start at 0 on every rank before any kernel runs.
  void *mine = nullptr;
  VMM(vmmipc_win_query(win, rank, &mine, nullptr));
  CUDA(cudaMemset(static_cast<char *>(mine) + oneshot::kDataBytes, 0, oneshot::sync_bytes(size)));
  CUDA(cudaDeviceSynchronize());
  MPI_Barrier(MPI_COMM_WORLD);

  float *in = nullptr, *out = nullptr;
  int *status = nullptr;
  CUDA(cudaMalloc(&in, max_n * sizeof(float)));
  CUDA(cudaMalloc(&out, max_n * sizeof(float)));
  CUDA(cudaMalloc(&status, oneshot::kMaxBlocks * sizeof(int)));
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
      oneshot::allreduce<<<oneshot::blocks(count), oneshot::kThreads, 0, stream>>>(dw, in, out, count, status);
      CUDA(cudaStreamEndCapture(stream, &g));
      CUDA(cudaGraphInstantiate(&exec, g, 0));
    }
    for (int round = 0; round < rounds; round++) {
      // Small integers: the float sums are exact in any order.
      for (int i = 0; i < count; i++) h_in[i] = (float)((rank + 1) * (i % 97 + 1) + round);
      // On the kernel's stream: a non-blocking stream is not ordered after the legacy default stream.
      CUDA(cudaMemcpyAsync(in, h_in.data(), count * sizeof(float), cudaMemcpyHostToDevice, stream));
      CUDA(cudaMemsetAsync(out, 0, count * sizeof(float), stream)); // each call must write the result anew
      CUDA(cudaMemsetAsync(status, 0, oneshot::kMaxBlocks * sizeof(int), stream));
      if (graph)
        CUDA(cudaGraphLaunch(exec, stream));
      else
        CUDA(oneshot::launch(stream, pdl, dw, in, out, count, status));
      CUDA(cudaStreamSynchronize(stream));
      int st[oneshot::kMaxBlocks];
      CUDA(cudaMemcpy(st, status, sizeof st, cudaMemcpyDeviceToHost));
      CUDA(cudaMemcpy(h_out.data(), out, count * sizeof(float), cudaMemcpyDeviceToHost));
      MPI_Allreduce(h_in.data(), want.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      for (int b = 0; b < oneshot::blocks(count); b++)
        if (st[b] != VMMIPC_DEV_OK) {
          std::fprintf(stderr, "rank %d: block %d's flag wait returned %d at %d floats\n", rank, b, st[b], count);
          bad++;
        }
      for (int i = 0; i < count; i++) bad += h_out[i] != want[i];
      checked += count;
    }
    { // back-to-back calls or replays, GPU time; the slowest rank's; checked after the last
      CUDA(cudaMemsetAsync(out, 0, count * sizeof(float), stream));
      CUDA(cudaMemsetAsync(status, 0, oneshot::kMaxBlocks * sizeof(int), stream));
      CUDA(cudaStreamSynchronize(stream));
      MPI_Barrier(MPI_COMM_WORLD);
      CUDA(cudaEventRecord(e0, stream));
      for (int i = 0; i < timed; i++)
        CUDA(graph ? cudaGraphLaunch(exec, stream) : oneshot::launch(stream, pdl, dw, in, out, count, status));
      CUDA(cudaEventRecord(e1, stream));
      CUDA(cudaEventSynchronize(e1));
      int st[oneshot::kMaxBlocks];
      CUDA(cudaMemcpy(st, status, sizeof st, cudaMemcpyDeviceToHost));
      CUDA(cudaMemcpy(h_out.data(), out, count * sizeof(float), cudaMemcpyDeviceToHost));
      for (int b = 0; b < oneshot::blocks(count); b++) bad += st[b] != VMMIPC_DEV_OK; // any replay's
      for (int i = 0; i < count; i++) bad += h_out[i] != want[i]; // the input of the last round, still in place
      checked += count;
      float ms = 0, worst = 0;
      CUDA(cudaEventElapsedTime(&ms, e0, e1));
      MPI_Reduce(&ms, &worst, 1, MPI_FLOAT, MPI_MAX, 0, MPI_COMM_WORLD);
      if (rank == 0)
        std::printf("allreduce_oneshot: %s, %6d B: %8.3f us per %s (%d back to back)\n",
                    graph ? "graph replay" : pdl ? "call (PDL launch)" : "call (plain launch)",
                    count * (int)sizeof(float), 1e3 * worst / timed, graph ? "replay" : "call", timed);
      if (graph) {
        CUDA(cudaGraphExecDestroy(exec));
        CUDA(cudaGraphDestroy(g));
      }
    }
  }
  long all_bad = 0;
  MPI_Allreduce(&bad, &all_bad, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0)
    std::printf("allreduce_oneshot: %d ranks, 8 B to 64 KiB, %d %s and %d back to back each (%s launch): %s (%ld "
                "elements per rank checked against MPI_Allreduce)\n",
                size, rounds, graph ? "graph replays (captured once per size)" : "rounds", timed,
                pdl ? "PDL" : "plain", all_bad ? "MISMATCH" : "ok", checked);
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
