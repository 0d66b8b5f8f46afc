// Host sync next to the user's own waiting kernel (issue 30, DESIGN.md
// section 8): no host sync call loads code or otherwise waits for the
// context, because a kernel of the user's may be spinning on the very
// signal the call sends. On the stand-in the user's kernel is
// vmmipc_standin_spin, which cuModuleLoadData waits for, as the driver
// waits for a context's running kernels. A binary of its own, so that
// nothing in this process made a host sync call before (ctest runs it on
// each path). The GPU counterpart is mpi_tests/gpu/test_persistent_gpu.cu.
#include <cuda.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "harness/bufs.h"
#include "harness/syncdrv.h"

namespace {

using vt::Since;
using SpinFn = int (*)(const uint64_t *, uint64_t, long);
using RunningFn = long (*)(void);

// A user's kernel per rank waits for `from`'s signal in window w; once it
// spins, the rank sends its own host signal to `to` on another stream. Every
// kernel must see its signal at once, well before its 4 s deadline (a
// module load there waits for it: up to VMMIPC_STANDIN_WAIT_MS, 8 s).
void KernelWaitsWhileTheHostSignals(vmmipc_win_t w, int from, int to, uint64_t v, int dev, vt::SyncDrv &d,
                                    CUstream s, CUstream io) {
  auto spin = vt::StandinFn<SpinFn>("vmmipc_standin_spin");
  auto running = vt::StandinFn<RunningFn>("vmmipc_standin_kernels_running");
  ASSERT_NE(spin, nullptr);
  ASSERT_NE(running, nullptr);
  CUdeviceptr slot = vt::SlotIn(w, from, d, io);
  ASSERT_NE(slot, 0u);
  MPI_Barrier(MPI_COMM_WORLD);
  long before = running();
  std::atomic<int> result{-2};
  std::thread kernel([&] {
    vmmipc_set_device(dev);  // the kernel's context, current on its thread
    result = spin(reinterpret_cast<const uint64_t *>(slot), v, 4000);
  });
  while (running() == before && result == -2) std::this_thread::yield();  // started (or already done)
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_VMM_OK(vmmipc_win_signal(w, to, v, s));
  EXPECT_EQ(d.streamSync(s), CUDA_SUCCESS);
  kernel.join();
  EXPECT_EQ(result.load(), VMMIPC_DEV_OK) << "the kernel did not see rank " << from << "'s signal " << v;
  EXPECT_LT(Since(t0), 2.0) << "the host signal waited for the kernel";
}

TEST(UserKernel, AKernelWaitingForAHostSignalDoesNotBlockIt) {
  int dev = vt::UseRankDevice();  // loads the driver
  ASSERT_GE(dev, 0);
  if (!vt::StandinFn<SpinFn>("vmmipc_standin_spin")) GTEST_SKIP() << "needs the stand-in (GPU: test_persistent_gpu)";
  vt::SyncDrv d;
  ASSERT_TRUE(d.Load());
  CUstream s = nullptr, io = nullptr;
  ASSERT_EQ(d.streamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(d.streamCreate(&io, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  vmmipc_comm_t c = nullptr;
  ASSERT_VMM_OK(vmmipc_comm_create(MPI_COMM_WORLD, nullptr, &c));
  MPI_Comm node;
  vmmipc_comm_node_comm(c, &node);
  int n = 0, me = 0;
  MPI_Comm_size(node, &n);
  MPI_Comm_rank(node, &me);
  std::vector<int> ranks(n);
  int mine = vt::Rank();
  MPI_Allgather(&mine, 1, MPI_INT, ranks.data(), 1, MPI_INT, node);
  vmmipc_win_t w = nullptr;  // made before any kernel runs: a window may load code
  ASSERT_VMM_OK(vmmipc_allgather_map(c, nullptr, nullptr, &w));
  // The kernel waits for this process's own host signal, then for the left
  // neighbour's while the host signals the right one.
  KernelWaitsWhileTheHostSignals(w, mine, mine, 1, dev, d, s, io);
  KernelWaitsWhileTheHostSignals(w, ranks[(me + n - 1) % n], ranks[(me + 1) % n], 2, dev, d, s, io);
  vmmipc_win_device_status_t st = VMMIPC_WIN_DEVICE_STATUS_INIT;
  ASSERT_VMM_OK(vmmipc_win_device_status(w, &st));
  EXPECT_EQ(st.kernel_calls + st.memops_calls, 2u);
  MPI_Barrier(MPI_COMM_WORLD);
  EXPECT_VMM_OK(vmmipc_win_free(w));
  EXPECT_VMM_OK(vmmipc_comm_destroy(c));
  d.streamDestroy(s);
  d.streamDestroy(io);
}

}  // namespace
