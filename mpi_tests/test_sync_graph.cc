// Host sync inside CUDA graphs (docs/sync.md, "CUDA graphs"), on the
// stand-in's stream capture: what vmmipc_win_barrier, _signal and _wait
// enqueue on a capturing stream is recorded with its values and replayed
// as a graph launch replays it. Nothing that changes from one barrier to
// the next may be baked in: replayed 1,000 times, the barrier still orders
// every rank's write before every rank's read. Also: the memops barrier is
// fenced as the signal is. The GPU counterpart is mpi_tests/gpu/test_graph_gpu.cu.
#include <cuda.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "harness/bufs.h"
#include "harness/syncdrv.h"

namespace {

using CaptureFn = CUresult (*)(CUstream);

class Graph : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_GE(vt::UseRankDevice(), 0);
    ASSERT_TRUE(d_.Load());
    begin_ = vt::StandinFn<CaptureFn>("vmmipc_standin_capture_begin");
    end_ = vt::StandinFn<CaptureFn>("vmmipc_standin_capture_end");
    replay_ = vt::StandinFn<CaptureFn>("vmmipc_standin_replay");
    if (!begin_ || !end_ || !replay_) GTEST_SKIP() << "needs the stand-in's stream capture";
    setenv("VMMIPC_STANDIN_WAIT_MS", "20000", 1);  // a replay that deadlocks fails in 20 s
    ASSERT_EQ(d_.streamCreate(&g_, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    ASSERT_EQ(d_.streamCreate(&io_, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    ASSERT_VMM_OK(vmmipc_comm_create(MPI_COMM_WORLD, nullptr, &c_));
    MPI_Comm node;
    vmmipc_comm_node_comm(c_, &node);
    MPI_Comm_size(node, &n_);
    MPI_Comm_rank(node, &me_);
    ranks_.resize(n_);
    int mine = vt::Rank();
    MPI_Allgather(&mine, 1, MPI_INT, ranks_.data(), 1, MPI_INT, node);
  }
  void TearDown() override {
    if (g_) d_.streamDestroy(g_);
    if (io_) d_.streamDestroy(io_);
    if (c_) EXPECT_VMM_OK(vmmipc_comm_destroy(c_));
  }
  // Each node rank's word in window w, as mapped here.
  std::vector<CUdeviceptr> Words(vmmipc_win_t w) {
    std::vector<CUdeviceptr> at(n_);
    for (int q = 0; q < n_; q++) {
      void *p = nullptr;
      EXPECT_VMM_OK(vmmipc_win_query(w, ranks_[q], &p, nullptr));
      at[q] = reinterpret_cast<CUdeviceptr>(p);
    }
    return at;
  }
  vt::SyncDrv d_;
  CaptureFn begin_ = nullptr, end_ = nullptr, replay_ = nullptr;
  vmmipc_comm_t c_ = nullptr;
  CUstream g_ = nullptr, io_ = nullptr;
  int n_ = 0, me_ = 0;
  std::vector<int> ranks_;
};

// One barrier captured, replayed twice per iteration, 1,000 iterations:
// every rank stores the iteration into its window, replays (the barrier),
// reads every node peer's word and finds at least the iteration, then
// replays again so that nobody stores the next one before all have read.
// Node rank 0 is late to store now and then: a replay that only repeats a
// barrier already passed lets the others read too early. Uncaptured
// barriers on the same window still work afterwards.
TEST_F(Graph, ACapturedBarrierReplaysAThousandTimes) {
  if (!vt::AnyRank(n_ >= 2)) GTEST_SKIP() << "needs two ranks on a node";  // a node of one joins in
  vmmipc_buf_t b = nullptr;
  ASSERT_VMM_OK(vmmipc_alloc(vt::kGran, &b));
  vmmipc_win_t w = nullptr;
  ASSERT_VMM_OK(vmmipc_allgather_map(c_, b, nullptr, &w));
  std::vector<CUdeviceptr> at = Words(w);
  ASSERT_EQ(begin_(g_), CUDA_SUCCESS);
  ASSERT_VMM_OK(vmmipc_win_barrier(w, g_));
  ASSERT_EQ(end_(g_), CUDA_SUCCESS);
  int late = 0;
  for (uint64_t i = 1; i <= 1000; i++) {
    if (me_ == 0 && i % 50 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));  // late, not a sync
    d_.Write(at[me_], i, io_);
    ASSERT_EQ(replay_(g_), CUDA_SUCCESS) << "replay " << i;
    for (int q = 0; q < n_; q++) {
      uint64_t v = d_.Read(at[q], io_);
      if (v < i && late++ < 5) ADD_FAILURE() << "after replay " << i << " rank " << ranks_[q] << " holds " << v;
    }
    ASSERT_EQ(replay_(g_), CUDA_SUCCESS);
  }
  EXPECT_EQ(late, 0);
  for (uint64_t i = 2001; i <= 2010; i++) {  // uncaptured, after the graph
    d_.Write(at[me_], i, io_);
    ASSERT_VMM_OK(vmmipc_win_barrier(w, io_));
    for (int q = 0; q < n_; q++) EXPECT_GE(d_.Read(at[q], io_), i) << "rank " << ranks_[q];
    ASSERT_VMM_OK(vmmipc_win_barrier(w, io_));
  }
  ASSERT_EQ(d_.streamSync(io_), CUDA_SUCCESS);
  MPI_Barrier(MPI_COMM_WORLD);
  ASSERT_VMM_OK(vmmipc_win_free(w));
  vmmipc_buf_free(b);
}

// Signal and wait replay the values they were captured with, so a replay's
// wait means something only once the slot is lowered again: the graph
// signals 2 (data ready) and waits for the left neighbour's 2; a barrier
// (the right neighbour has seen the 2); it lowers the right neighbour's
// slot to 1; a barrier (the lowering lands before anyone's next replay).
// Each iteration a rank stores the iteration into its right neighbour's
// window first and checks its own after the replay.
TEST_F(Graph, CapturedSignalAndWaitReplayWithALowering) {
  if (!vt::AnyRank(n_ >= 2)) GTEST_SKIP() << "needs two ranks on a node";  // a node of one joins in
  vmmipc_buf_t b = nullptr;
  ASSERT_VMM_OK(vmmipc_alloc(vt::kGran, &b));
  vmmipc_win_t w = nullptr;
  ASSERT_VMM_OK(vmmipc_allgather_map(c_, b, nullptr, &w));
  std::vector<CUdeviceptr> at = Words(w);
  const int right = (me_ + 1) % n_, left = (me_ + n_ - 1) % n_;
  ASSERT_EQ(begin_(g_), CUDA_SUCCESS);
  ASSERT_VMM_OK(vmmipc_win_signal(w, ranks_[right], 2, g_));
  ASSERT_VMM_OK(vmmipc_win_wait(w, ranks_[left], 2, g_));
  ASSERT_VMM_OK(vmmipc_win_barrier(w, g_));
  ASSERT_VMM_OK(vmmipc_win_signal(w, ranks_[right], 1, g_));
  ASSERT_VMM_OK(vmmipc_win_barrier(w, g_));
  ASSERT_EQ(end_(g_), CUDA_SUCCESS);
  int bad = 0;
  // 200 replays, 4 of them with rank 0 late: each replay checks the same
  // lowering, and its world barrier costs seconds per thousand under MPICH.
  for (uint64_t i = 1; i <= 200; i++) {
    if (me_ == 0 && i % 50 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));  // late, not a sync
    d_.Write(at[right], i, io_);
    ASSERT_EQ(replay_(g_), CUDA_SUCCESS) << "replay " << i;
    uint64_t v = d_.Read(at[me_], io_);
    if (v != i && bad++ < 5) ADD_FAILURE() << "after replay " << i << " the left neighbour's word is " << v;
    MPI_Barrier(MPI_COMM_WORLD);  // nobody stores the next one before all have read
  }
  EXPECT_EQ(bad, 0);
  vmmipc_win_device_status_t st = VMMIPC_WIN_DEVICE_STATUS_INIT;
  ASSERT_VMM_OK(vmmipc_win_device_status(w, &st));
  EXPECT_EQ(st.state, VMMIPC_DEV_OK);
  MPI_Barrier(MPI_COMM_WORLD);
  ASSERT_VMM_OK(vmmipc_win_free(w));
  vmmipc_buf_free(b);
}

// The memory-operation barrier is fenced as the signal is
// (docs/dev/sync-design.md): its batch starts with a system-scope memory
// barrier, before the writes that tell the peers.
TEST_F(Graph, TheMemopsBarrierIsFencedAsTheSignalIs) {
  if (!vt::AnyRank(n_ >= 2)) GTEST_SKIP() << "needs two ranks on a node";  // a node of one joins in
  auto last = vt::StandinFn<unsigned (*)(int *, unsigned)>("vmmipc_standin_last_batch");
  ASSERT_NE(last, nullptr);
  vmmipc_win_t w = nullptr;
  ASSERT_VMM_OK(vmmipc_allgather_map(c_, nullptr, nullptr, &w));
  ASSERT_VMM_OK(vmmipc_win_barrier(w, io_));
  vmmipc_win_device_status_t st = VMMIPC_WIN_DEVICE_STATUS_INIT;
  ASSERT_VMM_OK(vmmipc_win_device_status(w, &st));
  if (n_ >= 2 && st.memops_calls > 0) {  // a node of one's barrier enqueues nothing
    int ops[16] = {0};
    ASSERT_GE(last(ops, 16), 2u);
    EXPECT_EQ(ops[0], CU_STREAM_MEM_OP_BARRIER) << "the barrier's fence comes first";
    EXPECT_NE(ops[1], CU_STREAM_MEM_OP_BARRIER);
  }
  ASSERT_EQ(d_.streamSync(io_), CUDA_SUCCESS);
  MPI_Barrier(MPI_COMM_WORLD);
  ASSERT_VMM_OK(vmmipc_win_free(w));
  if (!vt::AnyRank(n_ >= 2 && st.memops_calls > 0)) GTEST_SKIP() << "this run takes the kernel path";
}

}  // namespace
