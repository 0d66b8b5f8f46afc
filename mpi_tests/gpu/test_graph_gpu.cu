// Host sync and the device API in CUDA graphs (issue 30, docs/sync.md "CUDA
// graphs"; ctest label "gpu", real driver only, run on each VMMIPC_SYNC
// path at 2 and 4 ranks). Each graph is captured once and replayed
// VMMIPC_GPU_REPLAYS (default 1,000) times; the data are checked after
// every replay. Kernels count replays in device memory, so every replay
// writes new values and a replay that does not synchronise is caught.
//   barrier  store the replay number into the own word, host barrier, check
//            every node rank's word, host barrier
//   signal   write into the right neighbour's buffer, signal it 2, wait for
//            the left's 2, check the own buffer, barrier, lower the right's
//            slot to 1, barrier (docs/sync.md's pattern)
//   device   one kernel: store, vmmipc_dev_barrier, check, vmmipc_dev_barrier
// Prints one line per check; exits non-zero if any failed on any rank.
#include <cuda_runtime.h>
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "gpu_test.h"
#include "vmmipc.h"
#include "vmmipc_device.cuh"

static const int kWords = 1024; // per buffer

__device__ uint64_t word(uint64_t replay, int from, int i) {
  return replay << 32 ^ (uint64_t)from << 20 ^ (uint64_t)i * 0x9e3779b9u;
}

// The replay number, counted in device memory by the graph's first kernel.
__global__ void next_replay(uint64_t *replay) { ++*replay; }

// Fills `to` (a node peer's buffer or one's own) with this replay's words.
__global__ void fill(uint64_t *to, const uint64_t *replay, int from) {
  for (int i = threadIdx.x; i < kWords; i += blockDim.x) to[i] = word(*replay, from, i);
}

// Counts the words of `at` that are not this replay's from `from`.
__global__ void check(const uint64_t *at, const uint64_t *replay, int from, int *bad) {
  int n = 0;
  for (int i = threadIdx.x; i < kWords; i += blockDim.x) n += at[i] != word(*replay, from, i);
  if (n) atomicAdd(bad, n);
}

// The device API: every rank fills its own buffer, barrier, checks every
// node rank's, barrier (so that nobody refills before all have checked).
__global__ void device_round(vmmipc_win_device_t w, const uint64_t *replay, int *bad, int *code) {
  uint64_t *mine = static_cast<uint64_t *>(vmmipc_dev_ptr(&w, w.rank));
  for (int i = threadIdx.x; i < kWords; i += blockDim.x) mine[i] = word(*replay, w.rank, i);
  int r = vmmipc_dev_barrier(&w, 0);
  if (r == VMMIPC_DEV_OK) {
    int n = 0;
    for (int q = 0; q < w.nranks; q++) {
      const uint64_t *p = static_cast<const uint64_t *>(vmmipc_dev_ptr(&w, q));
      for (int i = threadIdx.x; p && i < kWords; i += blockDim.x) n += p[i] != word(*replay, q, i);
    }
    if (n) atomicAdd(bad, n);
    r = vmmipc_dev_barrier(&w, 0);
  }
  if (r != VMMIPC_DEV_OK && threadIdx.x == 0) *code = r;
}

struct Run {
  cudaStream_t s;
  cudaGraph_t g;
  cudaGraphExec_t x;
};

static void end_capture(Run &run) {
  CUDA(cudaStreamEndCapture(run.s, &run.g));
  CUDA(cudaGraphInstantiate(&run.x, run.g, 0));
}

// Replays, checking *bad (and *code) after each; returns the replays done.
static int replay_all(Run &run, int replays, volatile int *bad, volatile int *code, const char *what) {
  for (int i = 1; i <= replays; i++) {
    CUDA(cudaGraphLaunch(run.x, run.s));
    SyncBounded(run.s, what);
    if (*bad || *code) {
      CHECK(false, "%s: replay %d: %d words wrong, code %d", what, i, *bad, *code);
      return i;
    }
  }
  return replays;
}

int main(int argc, char **argv) {
  int size = 0;
  if (!GpuTestStart(&argc, &argv, "test_graph_gpu", &size)) return 77;
  const int rank = rank_;
  const char *env = std::getenv("VMMIPC_GPU_REPLAYS");
  const int replays = env && *env ? std::atoi(env) : 1000;
  const char *path = std::getenv("VMMIPC_SYNC");

  vmmipc_comm_t comm;
  vmmipc_config_t cfg = VMMIPC_CONFIG_INIT;
  cfg.timeout_ms = 60000;
  VMM(vmmipc_comm_create(MPI_COMM_WORLD, &cfg, &comm));
  vmmipc_buf_t buf;
  VMM(vmmipc_alloc(kWords * sizeof(uint64_t), &buf));
  vmmipc_win_t win;
  VMM(vmmipc_allgather_map(comm, buf, nullptr, &win));
  uint64_t *ptr[64] = {nullptr};
  for (int q = 0; q < size && q < 64; q++) {
    void *p = nullptr;
    VMM(vmmipc_win_query(win, q, &p, nullptr));
    ptr[q] = static_cast<uint64_t *>(p);
  }
  uint64_t *replay = nullptr;
  int *bad = nullptr, *code = nullptr;
  CUDA(cudaMalloc(&replay, 3 * sizeof(uint64_t)));
  CUDA(cudaMemset(replay, 0, 3 * sizeof(uint64_t)));
  CUDA(cudaHostAlloc(&bad, sizeof(int), cudaHostAllocMapped));
  CUDA(cudaHostAlloc(&code, sizeof(int), cudaHostAllocMapped));
  *bad = *code = 0;
  const int right = (rank + 1) % size, left = (rank + size - 1) % size;
  Run run;
  CUDA(cudaStreamCreateWithFlags(&run.s, cudaStreamNonBlocking));
  MPI_Barrier(MPI_COMM_WORLD);

  // barrier: host-API barriers around kernels; the window's first host
  // sync call is inside the capture.
  CUDA(cudaStreamBeginCapture(run.s, cudaStreamCaptureModeGlobal));
  next_replay<<<1, 1, 0, run.s>>>(&replay[0]);
  fill<<<1, 256, 0, run.s>>>(ptr[rank], &replay[0], rank);
  VMM(vmmipc_win_barrier(win, run.s));
  for (int q = 0; q < size; q++) check<<<1, 256, 0, run.s>>>(ptr[q], &replay[0], q, bad);
  VMM(vmmipc_win_barrier(win, run.s));
  end_capture(run);
  int done = replay_all(run, replays, bad, code, "barrier");
  if (rank == 0) std::printf("barrier: %d replays checked (VMMIPC_SYNC=%s)\n", done, path ? path : "auto");
  CUDA(cudaGraphExecDestroy(run.x));
  CUDA(cudaGraphDestroy(run.g));
  MPI_Barrier(MPI_COMM_WORLD);

  // signal: the left neighbour's data, ordered by signal and wait; the
  // lowering between barriers makes the next replay's wait mean something.
  CUDA(cudaStreamBeginCapture(run.s, cudaStreamCaptureModeGlobal));
  next_replay<<<1, 1, 0, run.s>>>(&replay[1]);
  fill<<<1, 256, 0, run.s>>>(ptr[right], &replay[1], rank);
  VMM(vmmipc_win_signal(win, right, 2, run.s));
  VMM(vmmipc_win_wait(win, left, 2, run.s));
  check<<<1, 256, 0, run.s>>>(ptr[rank], &replay[1], left, bad);
  VMM(vmmipc_win_barrier(win, run.s));
  VMM(vmmipc_win_signal(win, right, 1, run.s));
  VMM(vmmipc_win_barrier(win, run.s));
  end_capture(run);
  done = replay_all(run, replays, bad, code, "signal");
  if (rank == 0) std::printf("signal: %d replays checked\n", done);
  CUDA(cudaGraphExecDestroy(run.x));
  CUDA(cudaGraphDestroy(run.g));
  MPI_Barrier(MPI_COMM_WORLD);

  // device: a kernel with two device barriers.
  vmmipc_win_device_t dw;
  VMM(vmmipc_win_device(win, &dw));
  CUDA(cudaStreamBeginCapture(run.s, cudaStreamCaptureModeGlobal));
  next_replay<<<1, 1, 0, run.s>>>(&replay[2]);
  device_round<<<1, 256, 0, run.s>>>(dw, &replay[2], bad, code);
  end_capture(run);
  done = replay_all(run, replays, bad, code, "device");
  if (rank == 0) std::printf("device: %d replays checked\n", done);
  CUDA(cudaGraphExecDestroy(run.x));
  CUDA(cudaGraphDestroy(run.g));

  vmmipc_win_device_status_t st = VMMIPC_WIN_DEVICE_STATUS_INIT;
  VMM(vmmipc_win_device_status(win, &st));
  CHECK(st.state == VMMIPC_DEV_OK, "a record: state %d rank %d", st.state, st.rank);
  MPI_Barrier(MPI_COMM_WORLD);
  CUDA(cudaStreamDestroy(run.s));
  CUDA(cudaFree(replay));
  CUDA(cudaFreeHost(bad));
  CUDA(cudaFreeHost(code));
  VMM(vmmipc_win_free(win));
  VMM(vmmipc_buf_free(buf));
  VMM(vmmipc_comm_destroy(comm));
  char extra[64];
  std::snprintf(extra, sizeof extra, " (host sync path: %s)", SyncPathName(st));
  return GpuTestEnd("test_graph_gpu", extra);
}
