// runtime_window: vmmipc in a CUDA-runtime application. Every rank fills a
// buffer with a kernel, maps its node peers' buffers with
// vmmipc_allgather_map, then, ordered on its own stream by
// vmmipc_win_signal/vmmipc_win_wait (no host round trip):
//   1. copies its right neighbour's buffer with cudaMemcpyAsync, and
//   2. runs a kernel that reads its left neighbour's buffer through the
//      window pointer and writes a sum into its own buffer,
// and checks every element on the host. docs/integration.md walks through it.
#include <cuda_runtime.h>
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "vmmipc.h"

#define VMM(call)                                                                 \
  do {                                                                            \
    vmmipc_result_t r_ = (call);                                                  \
    if (r_ != VMMIPC_SUCCESS) {                                                   \
      std::fprintf(stderr, "rank %d: %s: %s\n", rank, #call, vmmipc_last_error()); \
      MPI_Abort(MPI_COMM_WORLD, 1);                                               \
    }                                                                             \
  } while (0)
#define CUDA(call)                                                                         \
  do {                                                                                     \
    cudaError_t e_ = (call);                                                               \
    if (e_ != cudaSuccess) {                                                               \
      std::fprintf(stderr, "rank %d: %s: %s\n", rank, #call, cudaGetErrorString(e_));     \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                        \
    }                                                                                      \
  } while (0)

__global__ void fill(float *x, size_t n, float v) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    x[i] = v + (float)(i % 1000);
}

// out[i] = in_peer[i] + mine[i], reading the peer's memory over NVLink (or
// the same GPU) through the window pointer, like any device pointer.
__global__ void add_from_peer(float *out, const float *peer, const float *mine, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    out[i] = peer[i] + mine[i];
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);

  // Device selection: the node-local rank picks the GPU, with the runtime;
  // vmmipc uses whatever context is current on the calling thread (the
  // runtime's primary context after cudaSetDevice).
  MPI_Comm local;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local);
  int lrank = 0, lsize = 0, ndev = 0;
  MPI_Comm_rank(local, &lrank);
  MPI_Comm_size(local, &lsize);
  CUDA(cudaGetDeviceCount(&ndev));
  CUDA(cudaSetDevice(lrank % ndev));
  CUDA(cudaFree(nullptr)); // makes the primary context current now

  vmmipc_comm_t comm;
  VMM(vmmipc_comm_create(MPI_COMM_WORLD, nullptr, &comm));
  const size_t n = 4u << 20; // floats per rank: 16 MiB
  vmmipc_buf_t buf, sum;
  VMM(vmmipc_alloc(n * sizeof(float), &buf));
  VMM(vmmipc_alloc(n * sizeof(float), &sum));
  float *mine = nullptr, *out = nullptr;
  VMM(vmmipc_buf_ptr(buf, reinterpret_cast<void **>(&mine), nullptr));
  VMM(vmmipc_buf_ptr(sum, reinterpret_cast<void **>(&out), nullptr));

  cudaStream_t s;
  CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  fill<<<256, 256, 0, s>>>(mine, n, 1000.0f * (float)(rank + 1));
  CUDA(cudaGetLastError());

  vmmipc_win_t win;
  VMM(vmmipc_allgather_map(comm, buf, nullptr, &win));
  // Ring over the node's ranks (comm ranks of the node, in order).
  std::vector<int> node_ranks(lsize);
  MPI_Allgather(&rank, 1, MPI_INT, node_ranks.data(), 1, MPI_INT, local);
  int right = node_ranks[(lrank + 1) % lsize], left = node_ranks[(lrank + lsize - 1) % lsize];
  float *right_buf = nullptr, *left_buf = nullptr;
  VMM(vmmipc_win_query(win, right, reinterpret_cast<void **>(&right_buf), nullptr));
  VMM(vmmipc_win_query(win, left, reinterpret_cast<void **>(&left_buf), nullptr));

  // "My buffer is filled": once the fill kernel on s is done, tell both
  // neighbours; then wait until both of them have said the same.
  VMM(vmmipc_win_signal(win, right, 1, s));
  VMM(vmmipc_win_signal(win, left, 1, s));
  VMM(vmmipc_win_wait(win, right, 1, s));
  VMM(vmmipc_win_wait(win, left, 1, s));

  // 1. A copy-engine read of the right neighbour's buffer.
  float *copy = nullptr;
  CUDA(cudaMalloc(&copy, n * sizeof(float)));
  CUDA(cudaMemcpyAsync(copy, right_buf, n * sizeof(float), cudaMemcpyDeviceToDevice, s));
  // 2. A kernel reading the left neighbour's buffer through the window.
  add_from_peer<<<256, 256, 0, s>>>(out, left_buf, mine, n);
  CUDA(cudaGetLastError());
  // Nobody may overwrite or free its buffer before its neighbours are done.
  VMM(vmmipc_win_barrier(win, s));

  std::vector<float> h_copy(n), h_out(n);
  CUDA(cudaMemcpyAsync(h_copy.data(), copy, n * sizeof(float), cudaMemcpyDeviceToHost, s));
  CUDA(cudaMemcpyAsync(h_out.data(), out, n * sizeof(float), cudaMemcpyDeviceToHost, s));
  CUDA(cudaStreamSynchronize(s));
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) {
    float r = 1000.0f * (float)(right + 1) + (float)(i % 1000);
    float l = 1000.0f * (float)(left + 1) + (float)(i % 1000), m = 1000.0f * (float)(rank + 1) + (float)(i % 1000);
    bad += h_copy[i] != r;
    bad += h_out[i] != l + m;
  }
  std::printf("rank %d: copied rank %d's window and summed rank %d's through a kernel: %s\n", rank, right, left,
              bad ? "MISMATCH" : "every element checked");

  VMM(vmmipc_win_free(win)); // collective: after everyone's streams are done
  CUDA(cudaFree(copy));
  CUDA(cudaStreamDestroy(s));
  VMM(vmmipc_buf_free(sum));
  VMM(vmmipc_buf_free(buf));
  VMM(vmmipc_comm_destroy(comm));
  size_t any = 0;
  MPI_Allreduce(&bad, &any, 1, MPI_UNSIGNED_LONG, MPI_SUM, MPI_COMM_WORLD);
  MPI_Comm_free(&local);
  MPI_Finalize();
  return any ? 1 : 0;
}
