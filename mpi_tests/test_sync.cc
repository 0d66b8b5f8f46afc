// Stream-ordered synchronisation on windows (issue 13): signal/wait around
// copies into a neighbour's window, the barrier, the bounded host wait, and
// several windows at once. Runs on the stand-in and on GPUs; the data a
// rank reads after a wait is checked byte for byte.
#include <cuda.h>
#include <dlfcn.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "coll/coll.h"
#include "comm/comm.h"
#include "common/testhooks.h"
#include "harness/bufs.h"
#include "sync/sync.h"

namespace {

using vt::kGran;

// The driver entry points the tests use, through the driver vmmipc loaded.
struct Drv {
  CUresult (*streamCreate)(CUstream *, unsigned) = nullptr;
  CUresult (*streamDestroy)(CUstream) = nullptr;
  CUresult (*streamSync)(CUstream) = nullptr;
  CUresult (*htod)(CUdeviceptr, const void *, size_t, CUstream) = nullptr;
  CUresult (*dtoh)(void *, CUdeviceptr, size_t, CUstream) = nullptr;
  CUresult (*dtod)(CUdeviceptr, CUdeviceptr, size_t, CUstream) = nullptr;
};

template <typename F>
void Get(const char *name, F *fn) {
  void *p = nullptr;
  ASSERT_VMM_OK(vmmipc_driver_proc(name, 0, &p));
  *fn = reinterpret_cast<F>(p);
}

bool NoMemops() {
  const char *caps = std::getenv("VMMIPC_STANDIN_CAPS");
  return vt::UsingStandin() && caps && std::strstr(caps, "nomemops");
}

// The expected bytes of iteration `it` from rank `from`: every 8-byte word
// is a hash of its index, the iteration and the rank, so that a stale or
// misplaced copy never passes (and 64 MiB are made in milliseconds).
void Expected(std::vector<unsigned char> &v, size_t n, int it, int from) {
  v.resize(n);
  uint64_t key = 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(it + 1) ^ static_cast<uint64_t>(from) << 48;
  for (size_t j = 0; j * 8 < n; j++) {
    uint64_t z = key + 0x9e3779b97f4a7c15ull * (j + 1); // splitmix64
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    size_t k = n - j * 8 < 8 ? n - j * 8 : 8;
    std::memcpy(v.data() + j * 8, &z, k);
  }
}

class Sync : public ::testing::Test {
 protected:
  // Where each node rank's memory of window w is mapped here, by node rank.
  void NodeAddrs(vmmipc_win_t w, std::vector<CUdeviceptr> *at) {
    at->assign(n_, 0);
    for (int q = 0; q < n_; q++) {
      void *p = nullptr;
      ASSERT_VMM_OK(vmmipc_win_query(w, ranks_[q], &p, nullptr));
      (*at)[q] = reinterpret_cast<CUdeviceptr>(p);
    }
  }
  void SetUp() override {
    ASSERT_GE(vt::UseRankDevice(), 0);
    Get("cuStreamCreate", &d_.streamCreate);
    Get("cuStreamDestroy", &d_.streamDestroy);
    Get("cuStreamSynchronize", &d_.streamSync);
    Get("cuMemcpyHtoDAsync", &d_.htod);
    Get("cuMemcpyDtoHAsync", &d_.dtoh);
    Get("cuMemcpyDtoDAsync", &d_.dtod);
    ASSERT_VMM_OK(vmmipc_comm_create(MPI_COMM_WORLD, nullptr, &c_));
    MPI_Comm node;
    vmmipc_comm_node_comm(c_, &node);
    MPI_Comm_size(node, &n_);
    MPI_Comm_rank(node, &me_);
    ranks_.resize(n_);
    int mine = vt::Rank();
    MPI_Allgather(&mine, 1, MPI_INT, ranks_.data(), 1, MPI_INT, node);
    ASSERT_EQ(d_.streamCreate(&s_, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  }
  void TearDown() override {
    if (s_) d_.streamDestroy(s_);
    if (c_) EXPECT_VMM_OK(vmmipc_comm_destroy(c_));
  }
  Drv d_;
  vmmipc_comm_t c_ = nullptr;
  CUstream s_ = nullptr;
  int n_ = 0, me_ = 0;
  std::vector<int> ranks_; // comm rank of each node rank
};

// Each rank copies a block into its right neighbour's window, signals, and
// the neighbour waits on its stream, then reads and checks every byte; the
// reader signals back when it is done, before the writer writes again.
TEST_F(Sync, RingOfCopiesSignalsAndWaits) {
  if (NoMemops()) GTEST_SKIP() << "stand-in without stream memory operations";
  // A node of one takes part in the collectives only, here and below.
  if (!vt::AnyRank(n_ >= 2)) GTEST_SKIP() << "needs two ranks on a node";
  const size_t max = 64u << 20;
  const int iters = 400;
  vmmipc_buf_t win_buf = nullptr, src = nullptr;
  ASSERT_VMM_OK(vmmipc_alloc(max, &win_buf));
  ASSERT_VMM_OK(vmmipc_alloc(max, &src));
  vmmipc_win_t w = nullptr;
  ASSERT_VMM_OK(vmmipc_allgather_map(c_, win_buf, nullptr, &w));
  int right = ranks_[(me_ + 1) % n_], left = ranks_[(me_ + n_ - 1) % n_];
  void *peer = nullptr, *mine = nullptr, *srcp = nullptr;
  ASSERT_VMM_OK(vmmipc_win_query(w, right, &peer, nullptr));
  ASSERT_VMM_OK(vmmipc_win_query(w, vt::Rank(), &mine, nullptr));
  ASSERT_VMM_OK(vmmipc_buf_ptr(src, &srcp, nullptr));
  std::vector<unsigned char> host, want, got;
  size_t bad_iters = 0;
  for (int it = 0; n_ >= 2 && it < iters; it++) {
    // 4 B to 1 MiB in turn (21 rounds of the 19 sizes); each size from
    // 2 MiB to 64 MiB once (at iterations 50, 100, ... 300), so that the
    // ring stays within a second on the stand-in, under sanitizers too.
    int shift = 2 + it % 19;
    if (it % 50 == 0 && it > 0 && it <= 300) shift = 20 + it / 50;
    size_t n = static_cast<size_t>(1) << shift;
    Expected(host, n, it, vt::Rank());
    // Writer: the reader is done with the previous block.
    if (it > 0) ASSERT_VMM_OK(vmmipc_win_wait(w, right, 2ull * it, s_));
    ASSERT_EQ(d_.htod(reinterpret_cast<CUdeviceptr>(srcp), host.data(), n, s_), CUDA_SUCCESS);
    ASSERT_EQ(d_.dtod(reinterpret_cast<CUdeviceptr>(peer), reinterpret_cast<CUdeviceptr>(srcp), n, s_),
              CUDA_SUCCESS);
    ASSERT_VMM_OK(vmmipc_win_signal(w, right, 2ull * it + 1, s_));
    // Reader: wait for the left neighbour's block, read it, say so.
    ASSERT_VMM_OK(vmmipc_win_wait(w, left, 2ull * it + 1, s_));
    got.assign(n, 0);
    ASSERT_EQ(d_.dtoh(got.data(), reinterpret_cast<CUdeviceptr>(mine), n, s_), CUDA_SUCCESS);
    ASSERT_EQ(d_.streamSync(s_), CUDA_SUCCESS);
    ASSERT_VMM_OK(vmmipc_win_signal(w, left, 2ull * it + 2, s_));
    Expected(want, n, it, left);
    if (std::memcmp(got.data(), want.data(), n) != 0) {
      size_t first = 0;
      while (got[first] == want[first]) first++;
      if (bad_iters++ < 5) ADD_FAILURE() << "iteration " << it << ", " << n << " bytes from rank " << left
                                         << ": first wrong byte at " << first;
    }
  }
  ASSERT_EQ(d_.streamSync(s_), CUDA_SUCCESS);
  EXPECT_EQ(bad_iters, 0u);
  MPI_Barrier(MPI_COMM_WORLD);
  ASSERT_VMM_OK(vmmipc_win_free(w));
  vmmipc_buf_free(win_buf);
  vmmipc_buf_free(src);
}

// 10,000 barriers (1,000 under the sanitizers: vt::StressCount): before
// barrier i every rank stores i into its window; after it, every rank
// reads every peer's value and finds at least i.
TEST_F(Sync, BarrierTenThousandTimes) {
  if (NoMemops()) GTEST_SKIP() << "stand-in without stream memory operations";
  vmmipc_buf_t b = nullptr;
  ASSERT_VMM_OK(vmmipc_alloc(kGran, &b));
  vmmipc_win_t w = nullptr;
  ASSERT_VMM_OK(vmmipc_allgather_map(c_, b, nullptr, &w));
  std::vector<CUdeviceptr> at;
  ASSERT_NO_FATAL_FAILURE(NodeAddrs(w, &at));
  std::vector<uint64_t> seen(n_);
  uint64_t mine = 0;
  int late = 0;
  const int count = vt::StressCount(10000);
  for (int i = 1; i <= count; i++) {
    mine = static_cast<uint64_t>(i);
    ASSERT_EQ(d_.htod(at[me_], &mine, sizeof mine, s_), CUDA_SUCCESS);
    ASSERT_VMM_OK(vmmipc_win_barrier(w, s_));
    for (int q = 0; q < n_; q++) ASSERT_EQ(d_.dtoh(&seen[q], at[q], sizeof seen[q], s_), CUDA_SUCCESS);
    ASSERT_EQ(d_.streamSync(s_), CUDA_SUCCESS);
    for (int q = 0; q < n_; q++)
      if (seen[q] < static_cast<uint64_t>(i) && late++ < 5)
        ADD_FAILURE() << "after barrier " << i << " rank " << ranks_[q] << "'s value is " << seen[q];
    // Nobody overwrites its value for barrier i+1 before all have read it.
    ASSERT_VMM_OK(vmmipc_win_barrier(w, s_));
  }
  EXPECT_EQ(late, 0);
  ASSERT_EQ(d_.streamSync(s_), CUDA_SUCCESS);
  ASSERT_VMM_OK(vmmipc_win_free(w));
  vmmipc_buf_free(b);
}

// A barrier call that fails counts for nothing. Before, a failed call on
// the memory-operation path had moved the caller's count: its next barrier
// wrote c + 1, which satisfies the peers' barrier c, so from then on every
// barrier of theirs passed one early, before the caller's work had landed
// (the kernel path counts in its kernel). Node rank 1 has one call refused
// (injected: as for a destroyed stream), then stores late in every round:
// node rank 0 lets it go (MPI) only after its own barrier and reads where
// that barrier can pass without node rank 1's next arrival, i.e. where the
// number node rank 1's last barrier wrote (told over MPI) is already node
// rank 0's; else at once, since node rank 0's barrier waits for that
// store. No clock decides: the stale read is certain under the old count
// and cannot happen under the right one.
TEST_F(Sync, AFailedBarrierCallDoesNotCount) {
  if (NoMemops()) GTEST_SKIP() << "stand-in without stream memory operations";
  if (!vt::AnyRank(n_ >= 2)) GTEST_SKIP() << "needs two ranks on a node";
  const bool plays = n_ >= 2; // a node of one takes part in the collectives only
  const int rounds = 4;
  vmmipc_buf_t b = nullptr;
  ASSERT_VMM_OK(vmmipc_alloc(kGran, &b));
  vmmipc_win_t w = nullptr;
  ASSERT_VMM_OK(vmmipc_allgather_map(c_, b, nullptr, &w));
  std::vector<CUdeviceptr> at;
  ASSERT_NO_FATAL_FAILURE(NodeAddrs(w, &at));
  MPI_Comm node;
  vmmipc_comm_node_comm(c_, &node);
  const bool memops = plays && c_->pool->sync->barrier_path == VMMIPC__PATH_MEMOPS;
  if (plays && me_ == 1) {
    vmmipc__test_fail_at("barrier_batch", 1);
    EXPECT_EQ(vmmipc_win_barrier(w, s_), VMMIPC_ERR_CUDA);
    vmmipc__test_fail_at(nullptr, 0);
    EXPECT_TRUE(vt::Has(vmmipc_last_error(), "CUDA_ERROR_INVALID_HANDLE")) << vmmipc_last_error();
  }
  uint64_t told = 0; // node rank 0: what node rank 1's last barrier wrote (memops; else 0)
  std::vector<uint64_t> seen(n_);
  int late = 0, go = 1;
  for (int i = 1; plays && i <= rounds; i++) {
    const uint64_t mine = static_cast<uint64_t>(i), k = 2ull * i - 1; // node rank 0's barrier number
    if (me_ == 0 && i > 1) MPI_Recv(&told, 1, MPI_UINT64_T, 1, 1, node, MPI_STATUS_IGNORE);
    const bool early = me_ == 0 && memops && told >= k;
    if (me_ == 0 && !early) MPI_Send(&go, 1, MPI_INT, 1, 0, node);
    if (me_ == 1) MPI_Recv(&go, 1, MPI_INT, 0, 0, node, MPI_STATUS_IGNORE);
    ASSERT_EQ(d_.htod(at[me_], &mine, sizeof mine, s_), CUDA_SUCCESS);
    ASSERT_VMM_OK(vmmipc_win_barrier(w, s_));
    // What node rank 1's next barrier will write, told now: under the old
    // count the one just enqueued waits for node rank 0's next.
    uint64_t next = memops ? __atomic_load_n(&w->barriers, __ATOMIC_RELAXED) + 1 : 0;
    if (me_ == 1) MPI_Send(&next, 1, MPI_UINT64_T, 0, 1, node);
    for (int q = 0; q < n_; q++) ASSERT_EQ(d_.dtoh(&seen[q], at[q], sizeof seen[q], s_), CUDA_SUCCESS);
    ASSERT_EQ(d_.streamSync(s_), CUDA_SUCCESS);
    for (int q = 0; q < n_; q++)
      if (seen[q] < mine && late++ < 5)
        ADD_FAILURE() << "after barrier " << k << " rank " << ranks_[q] << "'s value is " << seen[q] << ", not "
                      << mine;
    if (early) MPI_Send(&go, 1, MPI_INT, 1, 0, node);
    ASSERT_VMM_OK(vmmipc_win_barrier(w, s_));
  }
  if (plays && me_ == 0) MPI_Recv(&told, 1, MPI_UINT64_T, 1, 1, node, MPI_STATUS_IGNORE);
  // Under the old count node rank 1's last barrier waits for one more of
  // the others': they give it, so that every stream completes.
  int extra = me_ == 0 && told > 2ull * rounds;
  if (plays) MPI_Bcast(&extra, 1, MPI_INT, 0, node);
  if (extra && me_ != 1) ASSERT_VMM_OK(vmmipc_win_barrier(w, s_));
  ASSERT_EQ(d_.streamSync(s_), CUDA_SUCCESS);
  EXPECT_EQ(late, 0);
  EXPECT_EQ(extra, 0) << "node rank 1's barriers ran one ahead";
  MPI_Barrier(MPI_COMM_WORLD);
  ASSERT_VMM_OK(vmmipc_win_free(w));
  vmmipc_buf_free(b);
}

// A window's barriers pair by their number on each rank, not by stream, so
// they must be ordered on the GPU (vmmipc.h): here they alternate between
// two streams ordered by an event, with no host wait between rounds, and
// every rank's value of round i is what every rank copied after barrier i
// (checked once all is done).
TEST_F(Sync, BarriersOnTwoStreamsOrderedByAnEventPairInOrder) {
  if (NoMemops()) GTEST_SKIP() << "stand-in without stream memory operations";
  CUresult (*eventCreate)(CUevent *, unsigned) = nullptr;
  CUresult (*eventDestroy)(CUevent) = nullptr;
  CUresult (*eventRecord)(CUevent, CUstream) = nullptr;
  CUresult (*streamWaitEvent)(CUstream, CUevent, unsigned) = nullptr;
  Get("cuEventCreate", &eventCreate);
  Get("cuEventDestroy", &eventDestroy);
  Get("cuEventRecord", &eventRecord);
  Get("cuStreamWaitEvent", &streamWaitEvent);
  const int rounds = 20;
  vmmipc_buf_t b = nullptr;
  ASSERT_VMM_OK(vmmipc_alloc(kGran, &b));
  vmmipc_win_t w = nullptr;
  ASSERT_VMM_OK(vmmipc_allgather_map(c_, b, nullptr, &w));
  std::vector<CUdeviceptr> at;
  ASSERT_NO_FATAL_FAILURE(NodeAddrs(w, &at));
  const CUdeviceptr log = at[me_] + 4096; // what this rank copied in round i from node rank q: log[i * n + q]
  CUstream other = nullptr;
  CUevent ev = nullptr;
  ASSERT_EQ(d_.streamCreate(&other, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(eventCreate(&ev, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
  std::vector<uint64_t> vals(rounds + 1);
  CUstream s[2] = {s_, other};
  for (int i = 1; i <= rounds; i++) {
    CUstream x = s[i % 2], y = s[(i + 1) % 2];
    vals[i] = static_cast<uint64_t>(i);
    ASSERT_EQ(d_.htod(at[me_], &vals[i], sizeof vals[i], x), CUDA_SUCCESS);
    ASSERT_VMM_OK(vmmipc_win_barrier(w, x));
    for (int q = 0; q < n_; q++)
      ASSERT_EQ(d_.dtod(log + (static_cast<CUdeviceptr>(i) * n_ + q) * 8, at[q], 8, x), CUDA_SUCCESS);
    ASSERT_VMM_OK(vmmipc_win_barrier(w, x)); // all have copied before the next value
    // The next round's stream follows this one's (the rule): an event.
    ASSERT_EQ(eventRecord(ev, x), CUDA_SUCCESS);
    ASSERT_EQ(streamWaitEvent(y, ev, 0), CUDA_SUCCESS);
  }
  ASSERT_EQ(d_.streamSync(s_), CUDA_SUCCESS);
  ASSERT_EQ(d_.streamSync(other), CUDA_SUCCESS);
  std::vector<uint64_t> got(static_cast<size_t>(rounds + 1) * n_);
  ASSERT_EQ(d_.dtoh(got.data(), log, got.size() * 8, s_), CUDA_SUCCESS);
  ASSERT_EQ(d_.streamSync(s_), CUDA_SUCCESS);
  int bad = 0;
  for (int i = 1; i <= rounds; i++)
    for (int q = 0; q < n_; q++)
      if (got[static_cast<size_t>(i) * n_ + q] != static_cast<uint64_t>(i) && bad++ < 5)
        ADD_FAILURE() << "round " << i << ": rank " << ranks_[q] << "'s value was "
                      << got[static_cast<size_t>(i) * n_ + q];
  EXPECT_EQ(bad, 0);
  eventDestroy(ev);
  d_.streamDestroy(other);
  MPI_Barrier(MPI_COMM_WORLD);
  ASSERT_VMM_OK(vmmipc_win_free(w));
  vmmipc_buf_free(b);
}

// A memory-operation barrier of more operations than one batch takes (256:
// the counted form from 129 node ranks, the captured one from 44; capped
// here) cannot be undone once a batch was accepted: its arrivals may have
// landed. A later batch refused breaks the comm, naming the rank; the
// peers' barrier passes (every arrival was in the first batch here), and
// every rank's next collective fails: the broken rank frees locally, and
// its free tells the others (it keeps its comm until they are done here),
// whose agreement then fails at once naming it. Before, the break was told
// only when the torn rank destroyed its comm (a hang-up): until then the
// others waited out the timeout (2 s) and blamed the collector or the
// missing rank.
TEST_F(Sync, ABarrierTornBetweenItsBatchesBreaksTheComm) {
  if (NoMemops()) GTEST_SKIP() << "stand-in without stream memory operations";
  vmmipc_config_t cfg = VMMIPC_CONFIG_INIT;
  cfg.timeout_ms = 2000;
  vmmipc_comm_t c = nullptr;
  ASSERT_VMM_OK(vmmipc_comm_create(MPI_COMM_WORLD, &cfg, &c));
  vmmipc_win_t w = nullptr;
  ASSERT_VMM_OK(vmmipc_allgather_map(c, nullptr, nullptr, &w));
  // Nodes of two or more ranks on the counted flat barrier play (the
  // kernel path launches one kernel); the others join the collectives.
  const bool plays = n_ >= 2 && c->pool->sync->barrier_path == VMMIPC__PATH_MEMOPS &&
                     c->pool->sync->shape == VMMIPC__BAR_FLAT;
  if (!vt::AnyRank(plays)) {
    ASSERT_VMM_OK(vmmipc_win_free(w));
    ASSERT_VMM_OK(vmmipc_comm_destroy(c));
    GTEST_SKIP() << "needs two ranks on a node on the memory-operation path, flat barrier";
  }
  if (plays && me_ == 1) {
    vmmipc__test_barrier_batch(n_); // the fence and every arrival, then the waits
    vmmipc__test_fail_at("barrier_batch", 2);
    vmmipc_result_t r = vmmipc_win_barrier(w, s_);
    vmmipc__test_fail_at(nullptr, 0);
    vmmipc__test_barrier_batch(0);
    std::string msg = vmmipc_last_error();
    EXPECT_EQ(r, VMMIPC_ERR_CUDA) << msg;
    EXPECT_TRUE(vt::Has(msg, "CUDA_ERROR_INVALID_HANDLE")) << msg;
    EXPECT_TRUE(vt::Has(msg, "communicator is broken")) << msg;
    EXPECT_EQ(vmmipc_win_wait_host(w, vt::Rank(), 1, 10), VMMIPC_ERR_PEER) << "the comm stays broken: "
                                                                             << vmmipc_last_error();
    vmmipc_error_info_t info = VMMIPC_ERROR_INFO_INIT;
    ASSERT_VMM_OK(vmmipc_last_error_info(&info));
    EXPECT_EQ(info.rank, vt::Rank()) << info.message;
    EXPECT_TRUE(vt::Has(info.message, "rank " + std::to_string(vt::Rank()))) << info.message;
  } else if (plays) {
    EXPECT_VMM_OK(vmmipc_win_barrier(w, s_));
  }
  ASSERT_EQ(d_.streamSync(s_), CUDA_SUCCESS);
  const int torn = plays && me_ == 1;
  std::vector<int> torn_at(vt::Size());
  MPI_Allgather(&torn, 1, MPI_INT, torn_at.data(), 1, MPI_INT, MPI_COMM_WORLD);
  const auto t0 = std::chrono::steady_clock::now();
  const vmmipc_result_t r = vmmipc_win_free(w);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_NE(r, VMMIPC_SUCCESS) << "freed locally where broken; the agreement fails elsewhere";
  if (!torn) {  // EXPECTs only: the barrier below must be reached
    vmmipc_error_info_t info = VMMIPC_ERROR_INFO_INIT;
    EXPECT_VMM_OK(vmmipc_last_error_info(&info));
    EXPECT_EQ(r, VMMIPC_ERR_PEER) << info.message;
    EXPECT_LT(s, 1.0) << info.message;
    EXPECT_TRUE(info.rank >= 0 && info.rank < vt::Size() && torn_at[info.rank]) << info.message;
    EXPECT_TRUE(vt::Has(info.message, "broke the communicator")) << info.message;
  }
  MPI_Barrier(MPI_COMM_WORLD);
  vmmipc_comm_destroy(c); // local where the comm failed
  MPI_Barrier(MPI_COMM_WORLD);
}

// Every shape of the counted memory-operation barrier (VMMIPC_SYNC_BARRIER)
// orders work as BarrierTenThousandTimes checks, on whichever path this run
// takes; and its operations are one explicit system-scope memory barrier,
// then writes without a fence of their own (slot n + me at their target)
// and waits (slot n + q here) in the shape's pattern. The captured form
// keeps the driver's fence on its writes (a marker must follow a reset).
TEST_F(Sync, EveryBarrierShapeOrdersWorkBehindOneFence) {
  if (NoMemops()) GTEST_SKIP() << "stand-in without stream memory operations";
  const char *shapes[] = {"flat", "gather", "dissem"};
  const int kinds[] = {VMMIPC__BAR_FLAT, VMMIPC__BAR_GATHER, VMMIPC__BAR_DISSEM};
  for (int s = 0; s < 3; s++) {
    SCOPED_TRACE(shapes[s]);
    setenv("VMMIPC_SYNC_BARRIER", shapes[s], 1);
    vmmipc_comm_t c = nullptr;
    ASSERT_VMM_OK(vmmipc_comm_create(MPI_COMM_WORLD, nullptr, &c));
    vmmipc_buf_t b = nullptr;
    ASSERT_VMM_OK(vmmipc_alloc(kGran, &b));
    vmmipc_win_t w = nullptr;
    ASSERT_VMM_OK(vmmipc_allgather_map(c, b, nullptr, &w));
    unsetenv("VMMIPC_SYNC_BARRIER");
    ASSERT_EQ(c->pool->sync->shape, kinds[s]);
    // The plan, for every form.
    const int n = n_, me = me_;
    std::vector<CUstreamBatchMemOpParams> ops(vmmipc__memops_barrier_max(n));
    for (int captured = 0; captured < 2; captured++) {
      const int m = vmmipc__memops_barrier_plan(w, kinds[s], 7, captured, CU_STREAM_WAIT_VALUE_GEQ, ops.data());
      ASSERT_GE(m, 1);
      EXPECT_EQ(ops[0].operation, CU_STREAM_MEM_OP_BARRIER);
      EXPECT_EQ(ops[0].memoryBarrier.flags, CU_STREAM_MEMORY_BARRIER_TYPE_SYS);
      int writes = 0, waits = 0;
      for (int i = 1; i < m; i++) {
        const CUstreamBatchMemOpParams &o = ops[i];
        if (o.operation == CU_STREAM_MEM_OP_WAIT_VALUE_64) {
          waits++;
          if (!captured) {
            EXPECT_EQ(o.waitValue.value64, 7u);
            int from = -1;
            for (int q = 0; q < n; q++)
              if (o.waitValue.address == vmmipc__slot_addr(w, me, n + q)) from = q;
            EXPECT_TRUE(from >= 0 && from != me) << "wait " << i << " is not on a peer's slot here";
          }
        } else if (o.operation == CU_STREAM_MEM_OP_WRITE_VALUE_64) {
          writes++;
          EXPECT_FALSE(captured);
          EXPECT_EQ(o.writeValue.flags, CU_STREAM_WRITE_VALUE_DEFAULT) << "write " << i;
          EXPECT_EQ(o.writeValue.value64, 7u);
          int to = -1;
          for (int q = 0; q < n; q++)
            if (o.writeValue.address == vmmipc__slot_addr(w, q, n + me)) to = q;
          EXPECT_TRUE(to >= 0 && to != me) << "write " << i << " is not to my slot at a peer";
        } else {
          ASSERT_EQ(o.operation, CU_STREAM_MEM_OP_WRITE_VALUE_32) << "operation " << i;
          EXPECT_TRUE(captured);
          EXPECT_EQ(o.writeValue.flags, CU_STREAM_WRITE_VALUE_DEFAULT);
          writes++;
        }
      }
      int rounds = 0;
      for (int d = 1; d < n; d *= 2) rounds++;
      const int want_writes = captured ? 4 * (n - 1)
                              : kinds[s] == VMMIPC__BAR_GATHER ? (me == 0 ? n - 1 : (n > 1 ? 1 : 0))
                              : kinds[s] == VMMIPC__BAR_DISSEM ? rounds
                                                               : n - 1;
      const int want_waits = captured ? 2 * (n - 1) : want_writes;
      EXPECT_EQ(writes, want_writes) << (captured ? "captured" : "counted");
      EXPECT_EQ(waits, want_waits) << (captured ? "captured" : "counted");
    }
    // The work: every rank's value of round i is seen by all after barrier i.
    std::vector<CUdeviceptr> at;
    ASSERT_NO_FATAL_FAILURE(NodeAddrs(w, &at));
    std::vector<uint64_t> seen(n_);
    int late = 0;
    for (int i = 1; i <= 300; i++) {
      uint64_t mine = static_cast<uint64_t>(i);
      ASSERT_EQ(d_.htod(at[me_], &mine, sizeof mine, s_), CUDA_SUCCESS);
      ASSERT_VMM_OK(vmmipc_win_barrier(w, s_));
      for (int q = 0; q < n_; q++) ASSERT_EQ(d_.dtoh(&seen[q], at[q], sizeof seen[q], s_), CUDA_SUCCESS);
      ASSERT_EQ(d_.streamSync(s_), CUDA_SUCCESS);
      for (int q = 0; q < n_; q++)
        if (seen[q] < static_cast<uint64_t>(i) && late++ < 5)
          ADD_FAILURE() << "after barrier " << i << " rank " << ranks_[q] << "'s value is " << seen[q];
      ASSERT_VMM_OK(vmmipc_win_barrier(w, s_));
    }
    EXPECT_EQ(late, 0);
    ASSERT_EQ(d_.streamSync(s_), CUDA_SUCCESS);
    ASSERT_VMM_OK(vmmipc_win_free(w));
    vmmipc_buf_free(b);
    ASSERT_VMM_OK(vmmipc_comm_destroy(c));
  }
}

// A freed window's slice is not zeroed at its free (no driver call there:
// its zeroing is owed), and still reads zero when it is taken again, even
// when the next window takes it at once (the pool's next-fit position set
// back by hand, alike on every rank); after VMMIPC__POOL_ZERO_BATCH frees
// the zeroings owed are queued together, one copy per run of slices.
TEST_F(Sync, AFreedSliceReadsZeroWhenTakenAgainThoughItsFreeQueuedNothing) {
  if (NoMemops()) GTEST_SKIP() << "stand-in without stream memory operations";
  // The skip is alike on every rank; a node of one takes part in every
  // collective and checks its own pool, with no peer to signal.
  if (!vt::AnyRank(n_ >= 2)) GTEST_SKIP() << "needs two ranks on a node";
  const bool peers = n_ >= 2;
  int right = ranks_[(me_ + 1) % n_], left = ranks_[(me_ + n_ - 1) % n_];
  vmmipc_win_t a = nullptr;
  ASSERT_VMM_OK(vmmipc_allgather_map(c_, nullptr, nullptr, &a));
  struct vmmipc__pool *p = c_->pool;
  const int first = a->slice;
  const uint64_t gen = p->gen;
  if (peers) {
    ASSERT_VMM_OK(vmmipc_win_signal(a, right, 5, s_));
    ASSERT_EQ(d_.streamSync(s_), CUDA_SUCCESS);
    ASSERT_VMM_OK(vmmipc_win_wait_host(a, left, 5, 30000));
  }
  MPI_Barrier(MPI_COMM_WORLD);
  ASSERT_VMM_OK(vmmipc_win_free(a));
  EXPECT_EQ(p->used[first], 3) << "owed";
  EXPECT_EQ(p->gen, gen) << "the free queued a zeroing";
  p->next = first;  // every rank: the slice index stays in step
  vmmipc_win_t b = nullptr;
  ASSERT_VMM_OK(vmmipc_allgather_map(c_, nullptr, nullptr, &b));
  ASSERT_EQ(b->slice, first);
  EXPECT_EQ(p->owed, 0);
  if (peers) {
    EXPECT_EQ(vmmipc_win_wait_host(b, left, 1, 100), VMMIPC_ERR_TIMEOUT) << "the old signal is still there";
  }
  MPI_Barrier(MPI_COMM_WORLD);
  ASSERT_VMM_OK(vmmipc_win_free(b));
  // A batch: slices first .. first + batch - 1, freed in turn, owed until
  // the batch-th free queues them, as one run.
  const int batch = VMMIPC__POOL_ZERO_BATCH;
  std::vector<vmmipc_win_t> ws(batch);
  p->next = first;
  for (int i = 0; i < batch; i++) ASSERT_VMM_OK(vmmipc_allgather_map(c_, nullptr, nullptr, &ws[i]));
  for (int i = 0; peers && i < batch; i++) {
    ASSERT_VMM_OK(vmmipc_win_signal(ws[i], right, 9, s_));
    ASSERT_EQ(d_.streamSync(s_), CUDA_SUCCESS);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  const uint64_t before = p->gen;
  for (int i = 0; i < batch; i++) {
    ASSERT_VMM_OK(vmmipc_win_free(ws[i]));
    if (i < batch - 1) {
      EXPECT_EQ(p->gen, before) << "free " << i;
    }
  }
  EXPECT_EQ(p->owed, 0);
  EXPECT_EQ(p->gen, before + 1) << "one run, one zeroing";
  for (int i = 0; i < batch; i++) EXPECT_EQ(p->used[(first + i) % p->slices], 2) << "slice " << first + i;
  p->next = first;
  for (int i = 0; i < batch; i++) {
    ASSERT_VMM_OK(vmmipc_allgather_map(c_, nullptr, nullptr, &ws[i]));
    if (peers) {
      EXPECT_EQ(vmmipc_win_wait_host(ws[i], left, 1, 10), VMMIPC_ERR_TIMEOUT) << "window " << i;
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  for (int i = 0; i < batch; i++) ASSERT_VMM_OK(vmmipc_win_free(ws[i]));
}

// A host wait that nobody answers times out within its bound, naming the
// rank; two windows' slots are independent.
TEST_F(Sync, HostWaitIsBoundedAndWindowsAreIndependent) {
  if (NoMemops()) GTEST_SKIP() << "stand-in without stream memory operations";
  if (!vt::AnyRank(n_ >= 2)) GTEST_SKIP() << "needs two ranks on a node";
  vmmipc_win_t w1 = nullptr, w2 = nullptr;
  ASSERT_VMM_OK(vmmipc_allgather_map(c_, nullptr, nullptr, &w1));
  ASSERT_VMM_OK(vmmipc_allgather_map(c_, nullptr, nullptr, &w2));
  int right = ranks_[(me_ + 1) % n_], left = ranks_[(me_ + n_ - 1) % n_];
  if (n_ < 2) { // the collectives only
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    ASSERT_VMM_OK(vmmipc_win_free(w2));
    ASSERT_VMM_OK(vmmipc_win_free(w1));
    vmmipc_win_t w3 = nullptr;
    ASSERT_VMM_OK(vmmipc_allgather_map(c_, nullptr, nullptr, &w3));
    MPI_Barrier(MPI_COMM_WORLD);
    ASSERT_VMM_OK(vmmipc_win_free(w3));
    return;
  }
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(vmmipc_win_wait_host(w1, left, 1, 300), VMMIPC_ERR_TIMEOUT);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  vmmipc_error_info_t info = VMMIPC_ERROR_INFO_INIT;
  ASSERT_VMM_OK(vmmipc_last_error_info(&info));
  EXPECT_EQ(info.rank, left) << info.message;
  EXPECT_STREQ(info.operation, "vmmipc_win_wait_host");
  EXPECT_GE(s, 0.29);
  EXPECT_LT(s, 1.3);
  EXPECT_NE(std::string(vmmipc_last_error()).find("rank " + std::to_string(left)), std::string::npos)
      << vmmipc_last_error();
  MPI_Barrier(MPI_COMM_WORLD);
  // Signal 7 on window 1 only: window 2's slot stays at 0.
  ASSERT_VMM_OK(vmmipc_win_signal(w1, right, 7, s_));
  ASSERT_EQ(d_.streamSync(s_), CUDA_SUCCESS);
  ASSERT_VMM_OK(vmmipc_win_wait_host(w1, left, 7, 30000));
  EXPECT_EQ(vmmipc_win_wait_host(w2, left, 1, 100), VMMIPC_ERR_TIMEOUT);
  MPI_Barrier(MPI_COMM_WORLD);
  ASSERT_VMM_OK(vmmipc_win_free(w2));
  ASSERT_VMM_OK(vmmipc_win_free(w1));
  // A new window gets zeroed slots (the reuse of a signalled slice:
  // ASliceTakenAgainAfterEveryOtherOneIsZeroAndInStep).
  vmmipc_win_t w3 = nullptr;
  ASSERT_VMM_OK(vmmipc_allgather_map(c_, nullptr, nullptr, &w3));
  EXPECT_EQ(vmmipc_win_wait_host(w3, left, 1, 100), VMMIPC_ERR_TIMEOUT);
  MPI_Barrier(MPI_COMM_WORLD);
  ASSERT_VMM_OK(vmmipc_win_free(w3));
}

// Slices are taken next-fit: a freed window's slice comes back only after
// every other slice was taken, its slots zero by then (the zeroing queued at
// its free). A call that fails on one rank before it takes a slice is undone
// on the others, so that the ranks stay in step (the slice index is not
// exchanged: a peer's signal lands at the index it computes).
TEST_F(Sync, ASliceTakenAgainAfterEveryOtherOneIsZeroAndInStep) {
  if (NoMemops()) GTEST_SKIP() << "stand-in without stream memory operations";
  if (!vt::AnyRank(n_ >= 2)) GTEST_SKIP() << "needs two ranks on a node";
  int right = ranks_[(me_ + 1) % n_], left = ranks_[(me_ + n_ - 1) % n_];
  // A comm whose pool (made by its first window) holds 32 slices on every
  // node: the walk below proves next-fit reuse as a full pool's ~44,000
  // would, in 32 windows instead of seconds of them.
  vmmipc__test_pool_slices(32);
  vmmipc_comm_t c = nullptr;
  ASSERT_VMM_OK(vmmipc_comm_create(MPI_COMM_WORLD, nullptr, &c));
  vmmipc_win_t a = nullptr;
  vmmipc_result_t made = vmmipc_allgather_map(c, nullptr, nullptr, &a);
  vmmipc__test_pool_slices(0);
  ASSERT_VMM_OK(made);
  const int first = a->slice, slices = c->pool->slices;
  EXPECT_EQ(slices, 32);
  const bool checks = n_ >= 2;
  if (n_ >= 2) {
    ASSERT_VMM_OK(vmmipc_win_signal(a, right, 5, s_));
    ASSERT_EQ(d_.streamSync(s_), CUDA_SUCCESS);
    ASSERT_VMM_OK(vmmipc_win_wait_host(a, left, 5, 30000));
  }
  MPI_Barrier(MPI_COMM_WORLD);
  ASSERT_VMM_OK(vmmipc_win_free(a));
  // The last rank fails before taking (no out); the others took and undo.
  vmmipc_win_t x = nullptr;
  EXPECT_EQ(vmmipc_allgather_map(c, nullptr, nullptr, vt::Rank() == vt::Size() - 1 ? nullptr : &x),
            VMMIPC_ERR_INVALID_ARG);
  // Every other slice once, through the heap (its windows are the cheapest).
  vmmipc_heap_t h = nullptr;
  ASSERT_VMM_OK(vmmipc_heap_create(c, nullptr, &h));
  for (int i = 0; i < slices - 1; i++) {
    vmmipc_win_t w = nullptr;
    ASSERT_EQ(vmmipc_heap_alloc(h, 256, &w), VMMIPC_SUCCESS) << "window " << i << ": " << vmmipc_last_error();
    if (checks) {
      ASSERT_NE(w->slice, first) << "window " << i << " took the freed slice before the others";
    }
    ASSERT_VMM_OK(vmmipc_win_free(w));
  }
  vmmipc_win_t b = nullptr;
  ASSERT_VMM_OK(vmmipc_allgather_map(c, nullptr, nullptr, &b));
  if (checks) {
    EXPECT_EQ(b->slice, first);
    EXPECT_EQ(vmmipc_win_wait_host(b, left, 1, 100), VMMIPC_ERR_TIMEOUT) << "the old signal is still there";
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (n_ >= 2) {
    ASSERT_VMM_OK(vmmipc_win_signal(b, right, 1, s_));  // and it works where every rank computes it
    ASSERT_EQ(d_.streamSync(s_), CUDA_SUCCESS);
    ASSERT_VMM_OK(vmmipc_win_wait_host(b, left, 1, 30000));
  }
  MPI_Barrier(MPI_COMM_WORLD);
  ASSERT_VMM_OK(vmmipc_win_free(b));
  ASSERT_VMM_OK(vmmipc_heap_destroy(h));
  ASSERT_VMM_OK(vmmipc_comm_destroy(c));
}

// A full signal pool is a limit reached (DESIGN.md section 7): a window
// more than it holds, plain or of a heap, fails with VMMIPC_ERR_RESOURCE on
// every rank, and the comm goes on: once a window is freed, the next fits.
TEST_F(Sync, AFullSignalPoolIsALimitReached) {
  vmmipc__test_pool_slices(4);
  vmmipc_comm_t c = nullptr;
  ASSERT_VMM_OK(vmmipc_comm_create(MPI_COMM_WORLD, nullptr, &c));
  std::vector<vmmipc_win_t> wins(4, nullptr);
  vmmipc_result_t made = vmmipc_allgather_map(c, nullptr, nullptr, &wins[0]);
  vmmipc__test_pool_slices(0);
  ASSERT_VMM_OK(made);
  ASSERT_EQ(c->pool->slices, 4);
  for (size_t i = 1; i < wins.size(); i++) ASSERT_VMM_OK(vmmipc_allgather_map(c, nullptr, nullptr, &wins[i]));
  vmmipc_heap_t h = nullptr;
  ASSERT_VMM_OK(vmmipc_heap_create(c, nullptr, &h));
  for (bool heap : {false, true}) {
    vmmipc_win_t x = nullptr;
    vmmipc_result_t r = heap ? vmmipc_heap_alloc(h, 256, &x) : vmmipc_allgather_map(c, nullptr, nullptr, &x);
    EXPECT_EQ(r, VMMIPC_ERR_RESOURCE) << vmmipc_strerror(r) << ": " << vmmipc_last_error();
    EXPECT_TRUE(vt::SameEverywhere(r));
    EXPECT_TRUE(vt::Has(vmmipc_last_error(), "4 windows are open on this comm")) << vmmipc_last_error();
    EXPECT_EQ(x, nullptr);
    if (x) vmmipc_win_free(x);
  }
  vmmipc_comm_stats_t st = VMMIPC_COMM_STATS_INIT;
  ASSERT_VMM_OK(vmmipc_comm_stats(c, &st));
  EXPECT_EQ(st.broken, 0);
  EXPECT_EQ(st.open_windows, 4);
  ASSERT_VMM_OK(vmmipc_win_free(wins[3]));
  wins[3] = nullptr;
  vmmipc_win_t y = nullptr;
  ASSERT_VMM_OK(vmmipc_heap_alloc(h, 256, &y));
  EXPECT_VMM_OK(vmmipc_win_free(y));
  for (vmmipc_win_t w : wins)
    if (w) EXPECT_VMM_OK(vmmipc_win_free(w));
  EXPECT_VMM_OK(vmmipc_heap_destroy(h));
  EXPECT_VMM_OK(vmmipc_comm_destroy(c));
}

// The library keeps its kernels for at most 64 contexts (sync/kernels.c).
// A context past them (hook "kernels_full": the next lookup finds every
// entry another context's) is a limit reached: VMMIPC_ERR_RESOURCE naming
// it, from the load at a window and from a host sync call's lookup. Before,
// the load blamed the device ("cannot run the library's PTX",
// VMMIPC_ERR_CUDA), and the lookup told the caller to make a window first
// (VMMIPC_ERR_INVALID_ARG). Local (rank 0).
TEST_F(Sync, KernelsPastTheContextsTheLibraryKeepsAreALimitReached) {
  if (vt::Rank() != 0) GTEST_SKIP() << "rank 0 runs it";
  const vmmipc__cu_t *cu = nullptr;
  ASSERT_VMM_OK(vmmipc__cu_load(&cu));
  vmmipc__kernels_t k;
  const vmmipc_result_t own = vmmipc__kernels_load(cu, "test", &k);  // its entry (a stand-in may lack kernels)
  for (bool load : {true, false}) {
    vmmipc__test_fail_at("kernels_full", 1);
    const vmmipc_result_t r = load ? vmmipc__kernels_load(cu, "test", &k) : vmmipc__kernels_find(cu, "test", &k);
    vmmipc__test_fail_at(nullptr, 0);
    const std::string msg = vmmipc_last_error();
    EXPECT_EQ(r, VMMIPC_ERR_RESOURCE) << (load ? "load: " : "lookup: ") << msg;
    EXPECT_TRUE(vt::Has(msg, "64 contexts")) << msg;
  }
  EXPECT_EQ(vmmipc__kernels_load(cu, "test", &k), own) << vmmipc_last_error();  // its entry is still there
  EXPECT_EQ(vmmipc__kernels_find(cu, "test", &k), own) << vmmipc_last_error();
}

// Many separate writes into the right neighbour's window, one signal; the
// neighbour waits on its stream, copies its window out and checks every
// word. On the stand-in, the signal's batch is checked to hold the explicit
// system-scope barrier before its write (docs/sync.md, item 1).
TEST_F(Sync, ManyWritesThenASignal) {
  if (NoMemops()) GTEST_SKIP() << "stand-in without stream memory operations";
  if (!vt::AnyRank(n_ >= 2)) GTEST_SKIP() << "needs two ranks on a node";
  const size_t words = 4096;  // one 8-byte copy each: 4096 writes before the signal
  vmmipc_buf_t b = nullptr;
  ASSERT_VMM_OK(vmmipc_alloc(words * 8, &b));
  vmmipc_win_t w = nullptr;
  ASSERT_VMM_OK(vmmipc_allgather_map(c_, b, nullptr, &w));
  int right = ranks_[(me_ + 1) % n_], left = ranks_[(me_ + n_ - 1) % n_];
  void *peer = nullptr, *mine = nullptr;
  ASSERT_VMM_OK(vmmipc_win_query(w, right, &peer, nullptr));
  ASSERT_VMM_OK(vmmipc_win_query(w, vt::Rank(), &mine, nullptr));
  for (int round = 1; n_ >= 2 && round <= 3; round++) {
    std::vector<uint64_t> host(words), got(words, 0);
    for (size_t i = 0; i < words; i++) host[i] = (static_cast<uint64_t>(vt::Rank()) << 40) ^ (round * 1000003ull + i);
    for (size_t i = 0; i < words; i++)
      ASSERT_EQ(d_.htod(reinterpret_cast<CUdeviceptr>(peer) + i * 8, &host[i], 8, s_), CUDA_SUCCESS);
    ASSERT_VMM_OK(vmmipc_win_signal(w, right, 2ull * round - 1, s_));
    // The memory-operation path: its batch is a system-scope barrier, then
    // the write (the kernel path fences inside its kernel, sync/kern/sync.cu).
    vmmipc_win_device_status_t path = VMMIPC_WIN_DEVICE_STATUS_INIT;
    ASSERT_VMM_OK(vmmipc_win_device_status(w, &path));
    if (vt::UsingStandin() && path.memops_calls > 0) {
      void *lib = dlopen(std::getenv("VMMIPC_CUDA_DRIVER"), RTLD_NOW | RTLD_NOLOAD);
      auto last = lib ? reinterpret_cast<unsigned (*)(int *, unsigned)>(dlsym(lib, "vmmipc_standin_last_batch"))
                      : nullptr;
      ASSERT_NE(last, nullptr) << "the stand-in records its last batch";
      int ops[16] = {0};
      ASSERT_EQ(last(ops, 16), 2u);
      EXPECT_EQ(ops[0], CU_STREAM_MEM_OP_BARRIER) << "the signal's barrier comes first";
      EXPECT_EQ(ops[1], CU_STREAM_MEM_OP_WRITE_VALUE_64);
      dlclose(lib);
    }
    ASSERT_VMM_OK(vmmipc_win_wait(w, left, 2ull * round - 1, s_));
    ASSERT_EQ(d_.dtoh(got.data(), reinterpret_cast<CUdeviceptr>(mine), words * 8, s_), CUDA_SUCCESS);
    ASSERT_EQ(d_.streamSync(s_), CUDA_SUCCESS);
    size_t bad = 0;
    for (size_t i = 0; i < words; i++) {
      uint64_t want = (static_cast<uint64_t>(left) << 40) ^ (round * 1000003ull + i);
      if (got[i] != want && bad++ < 5) ADD_FAILURE() << "round " << round << " word " << i << ": " << got[i];
    }
    EXPECT_EQ(bad, 0u);
    // The reader is done before the writer writes again (values grow per
    // slot: with two ranks, left and right are one rank and one slot).
    ASSERT_VMM_OK(vmmipc_win_signal(w, left, 2ull * round, s_));
    ASSERT_VMM_OK(vmmipc_win_wait(w, right, 2ull * round, s_));
    ASSERT_EQ(d_.streamSync(s_), CUDA_SUCCESS);
  }
  ASSERT_VMM_OK(vmmipc_win_free(w));
  vmmipc_buf_free(b);
}

// Signal and wait to oneself use one's own slot, on any node (a node of one
// rank included); the barrier of a node of one completes at once. Values
// with the top bit set are reserved for VMMIPC_SIGNAL_FAILED.
TEST_F(Sync, SignalAndWaitToSelfAndANodeOfOne) {
  if (NoMemops()) GTEST_SKIP() << "stand-in without stream memory operations";
  vmmipc_win_t w = nullptr;
  ASSERT_VMM_OK(vmmipc_allgather_map(c_, nullptr, nullptr, &w));
  int self = vt::Rank();
  EXPECT_EQ(vmmipc_win_wait_host(w, self, 5, 50), VMMIPC_ERR_TIMEOUT) << "a fresh slot holds 0";
  ASSERT_VMM_OK(vmmipc_win_signal(w, self, 5, s_));
  ASSERT_VMM_OK(vmmipc_win_wait(w, self, 5, s_));
  ASSERT_EQ(d_.streamSync(s_), CUDA_SUCCESS);
  ASSERT_VMM_OK(vmmipc_win_wait_host(w, self, 5, 1000));
  EXPECT_EQ(vmmipc_win_wait_host(w, self, 6, 50), VMMIPC_ERR_TIMEOUT);
  EXPECT_EQ(vmmipc_win_signal(w, self, VMMIPC_SIGNAL_FAILED, s_), VMMIPC_ERR_INVALID_ARG);
  EXPECT_EQ(vmmipc_win_wait(w, self, VMMIPC_SIGNAL_FAILED | 1, s_), VMMIPC_ERR_INVALID_ARG);
  if (n_ == 1) {
    ASSERT_VMM_OK(vmmipc_win_barrier(w, s_));  // nobody to wait for
    ASSERT_VMM_OK(vmmipc_win_barrier(w, s_));
  }
  ASSERT_EQ(d_.streamSync(s_), CUDA_SUCCESS);
  MPI_Barrier(MPI_COMM_WORLD);
  ASSERT_VMM_OK(vmmipc_win_free(w));
}

// vmmipc_win_wait_host reads its slot through the signal pool's own stream,
// so it works on any thread, one with no current context among them (the
// header allows it from several threads). Before, such a thread got
// VMMIPC_ERR_CUDA: "reading the signal slot ... CUDA_ERROR_INVALID_CONTEXT".
TEST_F(Sync, AHostWaitWorksOnAThreadWithNoCurrentContext) {
  if (NoMemops()) GTEST_SKIP() << "stand-in without stream memory operations";
  vmmipc_win_t w = nullptr;
  ASSERT_VMM_OK(vmmipc_allgather_map(c_, nullptr, nullptr, &w));
  const int self = vt::Rank();
  ASSERT_VMM_OK(vmmipc_win_signal(w, self, 5, s_));
  ASSERT_EQ(d_.streamSync(s_), CUDA_SUCCESS);
  vmmipc_result_t r = VMMIPC_SUCCESS, late = VMMIPC_SUCCESS;
  std::string msg;
  std::thread t([&] {  // never sets a device
    r = vmmipc_win_wait_host(w, self, 5, 1000);
    msg = vmmipc_last_error();
    late = vmmipc_win_wait_host(w, self, 6, 50);
  });
  t.join();
  EXPECT_EQ(r, VMMIPC_SUCCESS) << msg;
  EXPECT_EQ(late, VMMIPC_ERR_TIMEOUT) << "the slot holds 5";
  MPI_Barrier(MPI_COMM_WORLD);
  ASSERT_VMM_OK(vmmipc_win_free(w));
}

TEST_F(Sync, RanksOffTheNodeOrOutOfRangeAreInvalid) {
  vmmipc_win_t w = nullptr;
  ASSERT_VMM_OK(vmmipc_allgather_map(c_, nullptr, nullptr, &w));
  EXPECT_EQ(vmmipc_win_signal(w, -1, 1, s_), VMMIPC_ERR_INVALID_ARG);
  EXPECT_EQ(vmmipc_win_wait(w, vt::Size(), 1, s_), VMMIPC_ERR_INVALID_ARG);
  EXPECT_EQ(vmmipc_win_wait_host(w, vt::Size(), 1, 10), VMMIPC_ERR_INVALID_ARG);
  EXPECT_EQ(vmmipc_win_signal(nullptr, 0, 1, s_), VMMIPC_ERR_INVALID_ARG);
  EXPECT_EQ(vmmipc_win_barrier(nullptr, s_), VMMIPC_ERR_INVALID_ARG);
  for (int r = 0; r < vt::Size(); r++) {
    int same = 0;
    vmmipc_comm_same_node(c_, r, &same);
    if (same) continue;
    EXPECT_EQ(vmmipc_win_signal(w, r, 1, s_), VMMIPC_ERR_INVALID_ARG) << "off-node rank " << r;
    EXPECT_NE(std::string(vmmipc_last_error()).find("not on the node"), std::string::npos) << vmmipc_last_error();
  }
  ASSERT_VMM_OK(vmmipc_win_free(w));
}

// Without 64-bit stream memory operations every stream-ordered call says
// so; the host wait, which needs none, still works.
TEST_F(Sync, WithoutStreamMemoryOperationsTheCallsAreUnsupported) {
  if (!NoMemops()) GTEST_SKIP() << "runs on the stand-in with VMMIPC_STANDIN_CAPS=nomemops";
  vmmipc_win_t w = nullptr;
  ASSERT_VMM_OK(vmmipc_allgather_map(c_, nullptr, nullptr, &w));
  int peer = ranks_[(me_ + 1) % n_];
  EXPECT_EQ(vmmipc_win_signal(w, peer, 1, s_), VMMIPC_ERR_UNSUPPORTED);
  EXPECT_NE(std::string(vmmipc_last_error()).find("CAN_USE_64_BIT_STREAM_MEM_OPS"), std::string::npos)
      << vmmipc_last_error();
  EXPECT_EQ(vmmipc_win_wait(w, peer, 1, s_), VMMIPC_ERR_UNSUPPORTED);
  EXPECT_EQ(vmmipc_win_barrier(w, s_), VMMIPC_ERR_UNSUPPORTED);
  ASSERT_VMM_OK(vmmipc_win_free(w));
}

}  // namespace
