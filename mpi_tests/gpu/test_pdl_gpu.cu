// A user's PDL kernel after a host wait or barrier (issue 30, docs/sync.md
// "Paths"; ctest label "gpu", real driver only, on each VMMIPC_SYNC path).
// Rank 0 queues vmmipc_win_wait for rank 1 (or vmmipc_win_barrier) on a
// stream, then a kernel of its own launched with programmatic stream
// serialization, with as many blocks of 1,024 threads as the GPU holds at
// once. The docs promise that it launches only once the wait for peers is
// over. The host of rank 0 watches, for a bounded while, whether any of its
// blocks starts before rank 1 has even been told to signal (or to enter the
// barrier): none may. Then rank 1 writes a payload into rank 0's buffer with
// a kernel and signals (or enters the barrier), on its own stream; the
// kernel checks the payload after griddepcontrol.wait. The watch is an
// observation window, not synchronisation: nothing waits on it. Before
// c119118 the library's wait kernel let dependents launch at its top: on an
// H200 the blocks started at once and, under MPS, the wait ran to its
// timeout (as read, rank 1's kernels found no SM free). The barrier rounds
// hold the barrier kernel to the same rule; since 8468485 `auto` takes that
// kernel for 2 ranks sharing a GPU under MPS. Only the kernel path tells the
// placements apart (on memops no library kernel precedes the user's). Needs
// two or more ranks on one node; in the wait rounds ranks past 1 only take
// part in the collectives. Prints one line per round; exits non-zero if any
// check failed on any rank.
#include <cuda_runtime.h>
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "gpu_test.h"
#include "vmmipc.h"

static const int kRounds = 3;
static const double kWatchS = 0.5; // ample: an early launch shows within microseconds
static const int kThreads = 1024;

__host__ __device__ inline uint64_t payload(int round) { return 0x5eed0000ull + (uint64_t)round * 0x9e3779b9ull; }

// Every block says it started, then waits for the stream's previous work
// (the host wait) as a PDL kernel must; block 0 checks the payload.
__global__ void dependent(volatile int *started, const uint64_t *data, uint64_t want, int *bad) {
  if (threadIdx.x == 0) {
    *started = 1;
    __threadfence_system();
  }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
  if (blockIdx.x == 0 && threadIdx.x == 0 && *reinterpret_cast<const volatile uint64_t *>(data) != want) *bad = 1;
}

__global__ void put(uint64_t *to, uint64_t v) { *to = v; }

int main(int argc, char **argv) {
  int size = 0;
  if (!GpuTestStart(&argc, &argv, "test_pdl_gpu", &size)) return 77;
  const int rank = rank_;
  const char *path = std::getenv("VMMIPC_SYNC");

  vmmipc_comm_t comm;
  vmmipc_config_t cfg = VMMIPC_CONFIG_INIT;
  cfg.timeout_ms = 10000; // a kernel-path wait gives up after this: the old hazard fails, never hangs
  VMM(vmmipc_comm_create(MPI_COMM_WORLD, &cfg, &comm));
  vmmipc_buf_t buf;
  VMM(vmmipc_alloc(4096, &buf));
  vmmipc_win_t win;
  VMM(vmmipc_allgather_map(comm, buf, nullptr, &win));
  void *at0 = nullptr;
  VMM(vmmipc_win_query(win, 0, &at0, nullptr));
  int *host = nullptr; // [0] started, [1] bad
  CUDA(cudaHostAlloc(&host, 2 * sizeof(int), cudaHostAllocMapped));
  cudaStream_t s;
  CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  int dev = 0, sms = 0, per_sm = 0;
  CUDA(cudaGetDevice(&dev));
  CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, dependent, kThreads, 0));
  const unsigned blocks = (unsigned)(sms * (per_sm > 0 ? per_sm : 1));
  cudaLaunchAttribute attr[1] = {};
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t lc = {};
  lc.gridDim = dim3(blocks);
  lc.blockDim = dim3(kThreads);
  lc.stream = s;
  lc.attrs = attr;
  lc.numAttrs = 1;
  MPI_Barrier(MPI_COMM_WORLD);

  // TEST_PDL_ROUNDS=wait or barrier runs only those rounds (scripts/gpu/pdl_hazard.sh runs each kind
  // alone against the old kernels: their timed-out waits would fail the comm for the barrier rounds).
  const char *only = std::getenv("TEST_PDL_ROUNDS");
  if (only && *only && std::strcmp(only, "wait") && std::strcmp(only, "barrier")) {
    if (rank == 0) std::fprintf(stderr, "test_pdl_gpu: TEST_PDL_ROUNDS=%s: want wait or barrier\n", only);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  const int first = only && !std::strcmp(only, "barrier") ? kRounds + 1 : 1;
  const int last = only && !std::strcmp(only, "wait") ? kRounds : 2 * kRounds;
  for (int round = first; round <= last; round++) {
    const bool barrier = round > kRounds; // the first rounds wait for rank 1's signal, the others barrier
    const char *what = barrier ? "barrier" : "wait";
    volatile int *started = host, *bad = host + 1;
    *started = 0;
    *bad = 0;
    int early = 0;
    double waited = 0;
    if (rank == 0) {
      VMM(barrier ? vmmipc_win_barrier(win, s) : vmmipc_win_wait(win, 1, (uint64_t)round, s));
      CUDA(cudaLaunchKernelEx(&lc, dependent, started, static_cast<const uint64_t *>(at0), payload(round),
                              const_cast<int *>(bad)));
      const double t0 = MPI_Wtime();
      while (!*started && MPI_Wtime() - t0 < kWatchS) {
      }
      early = *started;
    }
    MPI_Barrier(MPI_COMM_WORLD); // rank 1 may signal (or enter the barrier) now
    const double t1 = MPI_Wtime();
    if (rank == 1) {
      put<<<1, 1, 0, s>>>(static_cast<uint64_t *>(at0), payload(round));
      CUDA(cudaGetLastError());
      VMM(barrier ? vmmipc_win_barrier(win, s) : vmmipc_win_signal(win, 0, (uint64_t)round, s));
    } else if (rank > 1 && barrier) {
      VMM(vmmipc_win_barrier(win, s));
    }
    SyncBounded(s, barrier ? "the barrier round" : "the wait round");
    waited = MPI_Wtime() - t1;
    if (rank == 0) {
      CHECK(!early, "round %d: the PDL kernel (%u blocks) after a %s started before rank 1 was told to go on",
            round, blocks, what);
      CHECK(*started, "round %d: the PDL kernel never started", round);
      CHECK(!*bad, "round %d: the PDL kernel read a wrong payload after a %s", round, what);
      CHECK(waited < 5.0, "round %d: the %s took %.1f s", round, what, waited);
      std::printf("round %d (%s): %u blocks of %d threads, %s before rank 1 went on; %s and kernel %.3f ms\n",
                  round, what, blocks, kThreads, early ? "some started" : "none started", what, waited * 1e3);
    }
    vmmipc_win_device_status_t st = VMMIPC_WIN_DEVICE_STATUS_INIT;
    VMM(vmmipc_win_device_status(win, &st));
    CHECK(st.state == VMMIPC_DEV_OK, "round %d: a record: state %d rank %d", round, st.state, st.rank);
    MPI_Barrier(MPI_COMM_WORLD); // the payload word is rewritten next round only after rank 0's check
  }

  vmmipc_win_device_status_t st = VMMIPC_WIN_DEVICE_STATUS_INIT;
  VMM(vmmipc_win_device_status(win, &st));
  CUDA(cudaStreamDestroy(s));
  CUDA(cudaFreeHost(host));
  VMM(vmmipc_win_free(win));
  VMM(vmmipc_buf_free(buf));
  VMM(vmmipc_comm_destroy(comm));
  char extra[96];
  std::snprintf(extra, sizeof extra, " (VMMIPC_SYNC=%s, host sync path: %s)", path ? path : "auto",
                SyncPathName(st));
  return GpuTestEnd("test_pdl_gpu", extra);
}
