// What the GPU test programs share (ctest label "gpu", real driver only):
// check macros that count failures instead of stopping, the start (every
// rank on one node, each on GPU rank % devices) and the end (one verdict
// over all ranks, printed by rank 0).
#pragma once
#include <cuda_runtime.h>
#include <mpi.h>

#include <cstdio>

#include "vmmipc.h"

inline int rank_ = 0, failures_ = 0;

#define CHECK(cond, ...)                                                               \
  do {                                                                                 \
    if (!(cond)) {                                                                     \
      std::fprintf(stderr, "rank %d: %s:%d: %s: ", rank_, __FILE__, __LINE__, #cond);  \
      std::fprintf(stderr, __VA_ARGS__);                                               \
      std::fprintf(stderr, "\n");                                                      \
      failures_++;                                                                     \
    }                                                                                  \
  } while (0)
#define VMM(call) CHECK((call) == VMMIPC_SUCCESS, "%s", vmmipc_last_error())
#define CUDA(call)                                                  \
  do {                                                              \
    cudaError_t e_ = (call);                                        \
    CHECK(e_ == cudaSuccess, "%s", cudaGetErrorString(e_));         \
    if (e_ != cudaSuccess) MPI_Abort(MPI_COMM_WORLD, 1);            \
  } while (0)

// MPI_Init, then the device. Returns false (after MPI_Finalize: exit 77,
// ctest's skip) unless there are two or more ranks, all on one node.
inline bool GpuTestStart(int *argc, char ***argv, const char *name, int *size) {
  MPI_Init(argc, argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, size);
  MPI_Comm local;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local);
  int lsize = 0, ndev = 0;
  MPI_Comm_size(local, &lsize);
  MPI_Comm_free(&local);
  if (lsize != *size || *size < 2) {
    if (rank_ == 0) std::fprintf(stderr, "%s: needs two or more ranks, all on one node\n", name);
    MPI_Finalize();
    return false;
  }
  CUDA(cudaGetDeviceCount(&ndev));
  CUDA(cudaSetDevice(rank_ % ndev));
  CUDA(cudaFree(nullptr));
  return true;
}

// cudaStreamSynchronize with a bound (stream 0: the legacy stream). A
// stream wait on the memory-operation path has no deadline of its own, so a
// signal that never comes would hang the program until ctest's timeout;
// this fails the job instead, naming the rank and the step.
inline void SyncBounded(cudaStream_t s, const char *what, double seconds = 60) {
  const double t0 = MPI_Wtime();
  cudaError_t e;
  while ((e = cudaStreamQuery(s)) == cudaErrorNotReady) {
    if (MPI_Wtime() - t0 > seconds) {
      std::fprintf(stderr, "rank %d: %s: the stream's work was not done after %.0f s\n", rank_, what, seconds);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  }
  CUDA(e);
}

// Which host-sync path a window's calls took, from its status counts:
// "mixed" where both ran (auto under MPS on one GPU: the barrier on kernels,
// signal and wait on memory operations).
inline const char *SyncPathName(const vmmipc_win_device_status_t &st) {
  return !st.kernel_calls ? "memops" : st.memops_calls ? "mixed" : "kernels";
}

// The failures of every rank, added; rank 0 prints "NAME: ok" or "NAME:
// FAILED" and `extra`. Returns main's exit status.
inline int GpuTestEnd(const char *name, const char *extra = "") {
  int all = 0;
  MPI_Allreduce(&failures_, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank_ == 0) std::printf("%s: %s%s\n", name, all ? "FAILED" : "ok", extra);
  MPI_Finalize();
  return all ? 1 : 0;
}
