// The symmetric heap (issue 22): data both ways through heap windows of
// per-rank sizes (0 included), growth across steps with data intact, many
// alloc/free cycles with fds flat and mapped memory bounded, injected
// growth failures on one rank (all-or-nothing, the heap usable after), a
// rank that never comes, refusals, signal/wait/barrier on heap windows,
// and several heaps. Every check is on data, result codes, counts or the
// rank a message names.
#include <cuda.h>
#include <mpi.h>

#include <time.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/testhooks.h"
#include "harness/bufs.h"
#include "heap/heap.h"

namespace {

using vt::Has;
using vt::Since;
using vt::kGran;

uint64_t RoundUp(uint64_t v, uint64_t g) { return (v + g - 1) / g * g; }

vmmipc_heap_stats_t Stats(vmmipc_heap_t h) {
  vmmipc_heap_stats_t s = VMMIPC_HEAP_STATS_INIT;
  EXPECT_VMM_OK(vmmipc_heap_stats(h, &s));
  return s;
}

class Heap : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_GE(vt::UseRankDevice(), 0);
    c_ = Create(0);
    ASSERT_NE(c_, nullptr);
    MPI_Comm node;
    vmmipc_comm_node_comm(c_, &node);
    MPI_Comm_size(node, &n_);
    MPI_Comm_rank(node, &me_);
  }
  void TearDown() override {
    vmmipc__test_fail_at(nullptr, 0);
    if (c_) EXPECT_VMM_OK(vmmipc_comm_destroy(c_));
  }
  static vmmipc_comm_t Create(int timeout_ms) {
    vmmipc_config_t cfg = VMMIPC_CONFIG_INIT;
    cfg.timeout_ms = timeout_ms;
    vmmipc_comm_t c = nullptr;
    EXPECT_VMM_OK(vmmipc_comm_create(MPI_COMM_WORLD, &cfg, &c));
    // The first window makes the comm's signal pool, which lives as long
    // as the comm: made here, so that the tests' baselines exclude it.
    vmmipc_win_t w = nullptr;
    if (c) EXPECT_VMM_OK(vmmipc_allgather_map(c, nullptr, nullptr, &w));
    if (w) EXPECT_VMM_OK(vmmipc_win_free(w));
    return c;
  }
  static vmmipc_heap_t MakeHeap(vmmipc_comm_t c, size_t grow, size_t reserve) {
    vmmipc_heap_config_t hc = VMMIPC_HEAP_CONFIG_INIT;
    hc.grow = grow;
    hc.reserve = reserve;
    vmmipc_heap_t h = nullptr;
    EXPECT_VMM_OK(vmmipc_heap_create(c, &hc, &h));
    return h;
  }
  bool OnNode(int rank) {
    int same = 0;
    vmmipc_comm_same_node(c_, rank, &same);
    return same != 0;
  }
  // Every rank fills its own slice; every rank checks every node peer's.
  void FillOwn(vmmipc_win_t w, unsigned seed) {
    void *p = nullptr;
    size_t n = 0;
    ASSERT_VMM_OK(vmmipc_win_query(w, vt::Rank(), &p, &n));
    if (n) vt::FillPattern(p, n, seed + static_cast<unsigned>(vt::Rank()));
  }
  void CheckAll(vmmipc_win_t w, unsigned seed, const std::vector<size_t> &sizes) {
    for (int r = 0; r < vt::Size(); r++) {
      void *p = nullptr;
      size_t n = 1;
      ASSERT_VMM_OK(vmmipc_win_query(w, r, &p, &n));
      if (!OnNode(r) || sizes[r] == 0) {
        EXPECT_EQ(p, nullptr) << "rank " << r;
        EXPECT_EQ(n, 0u) << "rank " << r;
        continue;
      }
      ASSERT_EQ(n, sizes[r]) << "rank " << r;
      ASSERT_NE(p, nullptr);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 256, 0u) << "slices are aligned to 256 bytes at least";
      EXPECT_TRUE(vt::CheckPattern(p, n, seed + static_cast<unsigned>(r))) << "slice of rank " << r;
    }
  }
  vmmipc_comm_t c_ = nullptr;
  int n_ = 1, me_ = 0;
};

// Sizes differ per rank, 0 included; each rank writes its slice, then the
// next node peer's (data both ways); offsets agree on every rank.
TEST_F(Heap, DataBothWaysWithPerRankSizes) {
  vt::Baseline base;
  vmmipc_heap_t h = MakeHeap(c_, 0, 0);
  ASSERT_NE(h, nullptr);
  std::vector<size_t> sizes(vt::Size());
  for (int r = 0; r < vt::Size(); r++) sizes[r] = r == 1 ? 0 : static_cast<size_t>(r + 1) * 100000 + 13;
  vmmipc_win_t w = nullptr;
  ASSERT_VMM_OK(vmmipc_heap_alloc(h, sizes[vt::Rank()], &w));
  FillOwn(w, 7);
  MPI_Barrier(MPI_COMM_WORLD);
  CheckAll(w, 7, sizes);
  // The slice offset is the same in every segment: peers' slices lie a
  // whole number of segments apart.
  vmmipc_heap_stats_t st = Stats(h);
  void *mine = nullptr;
  vmmipc_win_query(w, vt::Rank(), &mine, nullptr);
  for (int r = 0; mine && r < vt::Size(); r++) {
    void *p = nullptr;
    vmmipc_win_query(w, r, &p, nullptr);
    if (!p) continue;
    intptr_t d = reinterpret_cast<intptr_t>(p) - reinterpret_cast<intptr_t>(mine);
    EXPECT_EQ(d % static_cast<intptr_t>(st.reserve), 0) << "rank " << r << "'s slice is at another offset";
  }
  // The other way: each rank writes the next node peer's slice.
  MPI_Barrier(MPI_COMM_WORLD);
  int next = -1;
  for (int k = 1; k < vt::Size() && next < 0; k++) {
    int r = (vt::Rank() + k) % vt::Size();
    if (OnNode(r)) next = r;
  }
  if (next >= 0 && sizes[next]) {
    void *p = nullptr;
    size_t n = 0;
    ASSERT_VMM_OK(vmmipc_win_query(w, next, &p, &n));
    vt::FillPattern(p, n, 100 + static_cast<unsigned>(next));
  }
  MPI_Barrier(MPI_COMM_WORLD);
  int prev_writes = 0;
  for (int k = 1; k < vt::Size(); k++) {
    int r = (vt::Rank() - k + vt::Size()) % vt::Size();
    if (OnNode(r)) {
      prev_writes = 1;
      break;
    }
  }
  if (prev_writes && sizes[vt::Rank()]) {
    void *p = nullptr;
    size_t n = 0;
    vmmipc_win_query(w, vt::Rank(), &p, &n);
    EXPECT_TRUE(vt::CheckPattern(p, n, 100 + static_cast<unsigned>(vt::Rank()))) << "written by a peer";
  }
  st = Stats(h);
  EXPECT_EQ(st.live_windows, 1);
  EXPECT_EQ(st.in_use, sizes[vt::Rank()]);
  size_t largest = 0;
  for (size_t v : sizes) largest = v > largest ? v : largest;
  EXPECT_GE(st.carved, largest) << "a slice is as large as the largest rank's";
  ASSERT_VMM_OK(vmmipc_win_free(w));
  // All of a rank's sizes 0: a window that maps nothing.
  ASSERT_VMM_OK(vmmipc_heap_alloc(h, 0, &w));
  std::vector<size_t> zeros(vt::Size(), 0);
  CheckAll(w, 0, zeros);
  ASSERT_VMM_OK(vmmipc_win_free(w));
  st = Stats(h);
  EXPECT_EQ(st.live_windows, 0);
  EXPECT_EQ(st.in_use, 0u);
  EXPECT_EQ(st.carved, 0u);
  ASSERT_VMM_OK(vmmipc_heap_destroy(h));
  base.Expect("after a heap's life");
}

// Windows that need several growth steps: every earlier window's data stays.
TEST_F(Heap, GrowsAcrossStepsKeepingData) {
  vt::Baseline base;
  vmmipc_heap_t h = MakeHeap(c_, kGran, 64 * kGran);
  ASSERT_NE(h, nullptr);
  EXPECT_EQ(Stats(h).mapped, 0u) << "nothing is mapped before the first window";
  std::vector<vmmipc_win_t> wins;
  std::vector<std::vector<size_t>> sizes;
  const size_t want[] = {kGran / 2, kGran + 4096, 3 * kGran, 1000, 5 * kGran / 2, kGran};
  for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
    std::vector<size_t> s(vt::Size());
    for (int r = 0; r < vt::Size(); r++) s[r] = want[i] + static_cast<size_t>(r) * 4096;
    vmmipc_win_t w = nullptr;
    ASSERT_VMM_OK(vmmipc_heap_alloc(h, s[vt::Rank()], &w));
    FillOwn(w, 1000 * static_cast<unsigned>(i));
    wins.push_back(w);
    sizes.push_back(s);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  for (size_t i = 0; i < wins.size(); i++) CheckAll(wins[i], 1000 * static_cast<unsigned>(i), sizes[i]);
  vmmipc_heap_stats_t st = Stats(h);
  EXPECT_GE(st.growth_steps, 4u);
  EXPECT_EQ(st.mapped % kGran, 0u);
  EXPECT_LE(st.mapped, st.reserve);
  EXPECT_GT(st.grow_s, 0.0);
  // Large slices are aligned to the granularity.
  void *p = nullptr;
  vmmipc_win_query(wins[2], vt::Rank(), &p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % kGran, 0u);
  for (vmmipc_win_t w : wins) ASSERT_VMM_OK(vmmipc_win_free(w));
  // Freed everything: the same again does not grow.
  uint64_t steps = Stats(h).growth_steps;
  for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
    vmmipc_win_t w = nullptr;
    ASSERT_VMM_OK(vmmipc_heap_alloc(h, want[i] + static_cast<size_t>(vt::Rank()) * 4096, &w));
    wins[i] = w;
  }
  EXPECT_EQ(Stats(h).growth_steps, steps) << "space freed was not reused";
  for (vmmipc_win_t w : wins) ASSERT_VMM_OK(vmmipc_win_free(w));
  // Trim gives every step back, on every rank; the heap grows again after.
  ASSERT_VMM_OK(vmmipc_heap_trim(h));
  st = Stats(h);
  EXPECT_EQ(st.mapped, 0u);
  EXPECT_EQ(st.trimmed_steps, st.growth_steps);
  vmmipc_win_t w = nullptr;
  ASSERT_VMM_OK(vmmipc_heap_alloc(h, 4096, &w));
  FillOwn(w, 5);
  MPI_Barrier(MPI_COMM_WORLD);
  CheckAll(w, 5, std::vector<size_t>(vt::Size(), 4096));
  ASSERT_VMM_OK(vmmipc_win_free(w));
  ASSERT_VMM_OK(vmmipc_heap_destroy(h));
  base.Expect("after growth and trim");
}

// 10,000 allocs and frees of mixed sizes (1,000 under the sanitizers:
// vt::StressCount; a fixed seed; frees interleaved, at most 8 live): fds
// flat, mapped within the carved high-water mark rounded up to one step.
TEST_F(Heap, TenThousandCyclesStayFlat) {
  vmmipc_heap_t h = MakeHeap(c_, 4 * kGran, 0);
  ASSERT_NE(h, nullptr);
  // Each live step holds fds on the stand-in (its memfds), none on the
  // real driver: counted after the heap gives its steps back.
  int fds = vt::FdCount();
  std::mt19937_64 rng(42); // the same on every rank: the frees are collective
  std::vector<vmmipc_win_t> live;
  uint64_t max_mapped = 0;
  for (int i = 0, cycles = vt::StressCount(10000); i < cycles; i++) {
    if (live.size() == 8 || (!live.empty() && rng() % 2)) {
      size_t k = rng() % live.size();
      ASSERT_VMM_OK(vmmipc_win_free(live[k]));
      live.erase(live.begin() + static_cast<long>(k));
      continue;
    }
    size_t size = (rng() % (kGran / 2)) + static_cast<size_t>(vt::Rank()) * 512;
    vmmipc_win_t w = nullptr;
    ASSERT_VMM_OK(vmmipc_heap_alloc(h, size, &w));
    live.push_back(w);
    vmmipc_heap_stats_t st = Stats(h);
    if (st.mapped > max_mapped) max_mapped = st.mapped;
  }
  for (vmmipc_win_t w : live) ASSERT_VMM_OK(vmmipc_win_free(w));
  vmmipc_heap_stats_t st = Stats(h);
  EXPECT_LE(st.growth_steps, 8u) << "freed space was not reused";
  ASSERT_VMM_OK(vmmipc_heap_trim(h));
  EXPECT_EQ(Stats(h).mapped, 0u);
  EXPECT_EQ(vt::FdCount(), fds) << "fds grew over the cycles";
  EXPECT_LE(max_mapped, RoundUp(st.carved_high_water, st.grow) + st.grow)
      << "mapped beyond the high-water mark of live slices";
  EXPECT_EQ(st.live_windows, 0);
  ASSERT_VMM_OK(vmmipc_heap_destroy(h));
}

// Rank f aborts the comm while every rank holds a heap of it with one
// window open; every rank then releases both (vmmipc_win_release,
// vmmipc_heap_release) and destroys the comm. On the other ranks the
// destroy's agreement fails (the comm is aborted there, or times out off
// f's node) and the comm is freed locally: what was released must go with
// it, as it goes when the comm failed before the destroy began. Before, it
// stayed on each of those ranks: the window's chunk and mapping, the
// heap's reservation, 3 fds (a helper's probe on the stand-in, every f).
TEST_F(Heap, ReleasedObjectsGoWithADestroyThatAPeersAbortFailed) {
  for (int f : {0, vt::Size() - 1}) {
    vt::Baseline base;  // before the comm: its destroy frees what it made
    vmmipc_comm_t c = vt::CountedComm(2000);
    ASSERT_NE(c, nullptr);
    vmmipc_heap_t h = MakeHeap(c, kGran, 16 * kGran);
    vmmipc_win_t w = nullptr;
    ASSERT_VMM_OK(vmmipc_heap_alloc(h, kGran / 2, &w));
    MPI_Barrier(MPI_COMM_WORLD);
    if (vt::Rank() == f) ASSERT_VMM_OK(vmmipc_comm_abort(c));
    MPI_Barrier(MPI_COMM_WORLD);
    EXPECT_VMM_OK(vmmipc_win_release(w));
    EXPECT_VMM_OK(vmmipc_heap_release(h));
    vmmipc_result_t r = vmmipc_comm_destroy(c);
    EXPECT_NE(r, VMMIPC_ERR_BUSY) << "rank " << vt::Rank() << ", rank " << f << " aborted: " << vmmipc_last_error();
    base.Expect(("the released heap and window, rank " + std::to_string(f) + " aborted").c_str());
    MPI_Barrier(MPI_COMM_WORLD);  // the next comm's short timeout: every rank enters its create together
  }
}

// One rank's growth fails (out of memory, or the fd limit): every rank
// gets the error naming it, nothing of the step is left, and the heap goes
// on with what it had.
TEST_F(Heap, FailedGrowthIsAllOrNothing) {
  struct Case {
    const char *hook;
    vmmipc_result_t code;
    const char *says;
  };
  const Case cases[] = {{"heap_oom", VMMIPC_ERR_NO_MEMORY, "OUT_OF_MEMORY"},
                        {"heap_fds", VMMIPC_ERR_RESOURCE, "file descriptor limit"},
                        {"heap_step_tables", VMMIPC_ERR_NO_MEMORY, "the tables of a growth step"}};
  for (const Case &k : cases)
    for (int f : {vt::Size() - 1, 0}) {
      vmmipc_heap_t h = MakeHeap(c_, kGran, 16 * kGran);
      ASSERT_NE(h, nullptr);
      vmmipc_win_t a = nullptr;
      ASSERT_VMM_OK(vmmipc_heap_alloc(h, kGran / 2, &a));
      FillOwn(a, 11);
      MPI_Barrier(MPI_COMM_WORLD);
      vmmipc_heap_stats_t before = Stats(h);
      vt::Baseline base;
      if (vt::Rank() == f) vmmipc__test_fail_at(k.hook, 1);
      vmmipc_win_t b = nullptr;
      vmmipc_result_t r = vmmipc_heap_alloc(h, 3 * kGran, &b);
      vmmipc__test_fail_at(nullptr, 0);
      int f_n = n_; // the failing rank's node size: every rank goes the same way
      MPI_Bcast(&f_n, 1, MPI_INT, f, MPI_COMM_WORLD);
      if (f_n == 1 && std::string(k.hook) == "heap_fds") { // no export on a node of one
        EXPECT_VMM_OK(r);
        EXPECT_VMM_OK(vmmipc_win_free(b));
        EXPECT_VMM_OK(vmmipc_win_free(a));
        EXPECT_VMM_OK(vmmipc_heap_destroy(h));
        continue;
      }
      EXPECT_EQ(r, k.code) << k.hook << ": " << vmmipc_last_error();
      EXPECT_TRUE(vt::SameEverywhere(r));
      EXPECT_EQ(b, nullptr);
      if (vt::Size() > 1) { // a comm of one reports its own message
        EXPECT_TRUE(Has(vmmipc_last_error(), "failed on rank " + std::to_string(f))) << vmmipc_last_error();
      }
      EXPECT_TRUE(Has(vmmipc_last_error(), k.says)) << vmmipc_last_error();
      vmmipc_heap_stats_t after = Stats(h);
      EXPECT_EQ(after.mapped, before.mapped) << "a half-made step was left";
      EXPECT_EQ(after.growth_steps, before.growth_steps);
      base.Expect(k.hook);
      // Still usable: the old window's data, a new window that fits, and growth.
      CheckAll(a, 11, std::vector<size_t>(vt::Size(), kGran / 2));
      ASSERT_VMM_OK(vmmipc_heap_alloc(h, 3 * kGran, &b));
      FillOwn(b, 12);
      MPI_Barrier(MPI_COMM_WORLD);
      CheckAll(b, 12, std::vector<size_t>(vt::Size(), 3 * kGran));
      ASSERT_VMM_OK(vmmipc_win_free(b));
      ASSERT_VMM_OK(vmmipc_win_free(a));
      ASSERT_VMM_OK(vmmipc_heap_destroy(h));
    }
}

// Asking for more than the reserve fails on every rank with RESOURCE and
// names the rank that asked; the heap stays usable.
TEST_F(Heap, ReserveExhaustedNamesTheRank) {
  vmmipc_heap_t h = MakeHeap(c_, kGran, 4 * kGran);
  ASSERT_NE(h, nullptr);
  int big = vt::Size() - 1;
  vmmipc_win_t w = nullptr;
  vmmipc_result_t r = vmmipc_heap_alloc(h, vt::Rank() == big ? 3 * kGran + 1 : 0, &w);
  ASSERT_VMM_OK(r);
  vmmipc_win_t x = nullptr;
  r = vmmipc_heap_alloc(h, vt::Rank() == big ? 2 * kGran : 10, &x);
  EXPECT_EQ(r, VMMIPC_ERR_RESOURCE) << vmmipc_last_error();
  EXPECT_TRUE(vt::SameEverywhere(r));
  EXPECT_TRUE(Has(vmmipc_last_error(), "rank " + std::to_string(big) + " asked for")) << vmmipc_last_error();
  EXPECT_TRUE(Has(vmmipc_last_error(), "reserve")) << vmmipc_last_error();
  ASSERT_VMM_OK(vmmipc_win_free(w));
  ASSERT_VMM_OK(vmmipc_heap_alloc(h, vt::Rank() == big ? 2 * kGran : 10, &x));
  ASSERT_VMM_OK(vmmipc_win_free(x));
  ASSERT_VMM_OK(vmmipc_heap_destroy(h));
}

// A rank out of host memory for heap_create's exchange still takes part
// with its failure: every rank fails at once with its NO_MEMORY naming it,
// not at the timeout, and the comm stays sound (a heap is made right after).
TEST_F(Heap, CreateOutOfHostMemoryFailsEveryRankAtOnce) {
  if (vt::Size() < 2) GTEST_SKIP() << "needs two ranks";
  const int timeout_ms = 20000;
  vmmipc_comm_t c = Create(timeout_ms);
  ASSERT_NE(c, nullptr);
  for (int f : {vt::Size() - 1, 0}) {
    if (vt::Rank() == f) vmmipc__test_fail_at("heap_record", 1);
    MPI_Barrier(MPI_COMM_WORLD);
    auto t0 = std::chrono::steady_clock::now();
    vmmipc_heap_t h = nullptr;
    vmmipc_result_t r = vmmipc_heap_create(c, nullptr, &h);
    double s = Since(t0);
    vmmipc__test_fail_at(nullptr, 0);
    EXPECT_EQ(r, VMMIPC_ERR_NO_MEMORY) << vmmipc_last_error();
    EXPECT_TRUE(vt::SameEverywhere(r));
    EXPECT_EQ(h, nullptr);
    EXPECT_TRUE(Has(vmmipc_last_error(), "rank " + std::to_string(f))) << vmmipc_last_error();
    EXPECT_LT(s, timeout_ms / 2000.0) << "the peers waited for the timeout: " << vmmipc_last_error();
    vmmipc_comm_stats_t st = VMMIPC_COMM_STATS_INIT;
    ASSERT_VMM_OK(vmmipc_comm_stats(c, &st));
    EXPECT_EQ(st.broken, 0);
    h = MakeHeap(c, kGran, 4 * kGran);
    ASSERT_NE(h, nullptr);
    ASSERT_VMM_OK(vmmipc_heap_destroy(h));
  }
  ASSERT_VMM_OK(vmmipc_comm_destroy(c));
}

// A rank that never calls vmmipc_heap_alloc: the others fail with
// VMMIPC_ERR_TIMEOUT naming it, within the bound, and the comm breaks;
// the heap and the comm are still freed locally.
TEST_F(Heap, ARankThatNeverComesIsNamed) {
  if (vt::Size() < 2) GTEST_SKIP() << "needs two ranks";
  const int timeout_ms = 2000; // short, yet with room for a loaded CI machine
  for (int silent : {vt::Size() - 1, 0}) {
    int fds = vt::FdCount();
    vmmipc_comm_t c = Create(timeout_ms);
    ASSERT_NE(c, nullptr);
    vmmipc_heap_t h = MakeHeap(c, kGran, 8 * kGran);
    ASSERT_NE(h, nullptr);
    if (vt::Rank() == silent) vmmipc__test_fail_at("agree", 1);
    auto t0 = std::chrono::steady_clock::now();
    vmmipc_win_t w = nullptr;
    vmmipc_result_t r = vmmipc_heap_alloc(h, 4096, &w);
    double s = Since(t0);
    vmmipc__test_fail_at(nullptr, 0);
    EXPECT_EQ(r, VMMIPC_ERR_TIMEOUT) << vmmipc_last_error();
    if (vt::Rank() != silent) {
      // The collector silent: named as such, whether it never answered or
      // answered after the others gave up (which one depends on scheduling).
      std::string want = silent == 0 ? "rank 0, which collects it,"
                                     : "rank " + std::to_string(silent) + " did not answer";
      EXPECT_TRUE(Has(vmmipc_last_error(), want)) << vmmipc_last_error();
      // Once in the allgather, once in the agreement that names the rank;
      // the slack is for a loaded machine: this checks that it ends, not how fast.
      EXPECT_LT(s, 3 * timeout_ms / 1000.0 + 2.0) << "waited beyond the bound";
    }
    vmmipc_comm_stats_t st = VMMIPC_COMM_STATS_INIT;
    ASSERT_VMM_OK(vmmipc_comm_stats(c, &st));
    EXPECT_EQ(st.broken, 1);
    EXPECT_EQ(vmmipc_heap_alloc(h, 4096, &w), VMMIPC_ERR_PEER) << "a broken comm fails at once";
    // The silent rank stays alive until the others have timed out: its exit
    // would be a hang-up, reported at once (as PEER) instead.
    MPI_Barrier(MPI_COMM_WORLD);
    ASSERT_VMM_OK(vmmipc_heap_destroy(h));
    ASSERT_VMM_OK(vmmipc_comm_destroy(c));
    EXPECT_EQ(vt::FdCount(), fds);
    MPI_Barrier(MPI_COMM_WORLD);
  }
}

// A rank that comes after the others' timeout, a plain member (the last
// rank: on another node than rank 0 under VNODES) or the collector (rank
// 0): every rank fails alike (TIMEOUT naming it), never SUCCESS alone, and
// nothing compares clocks: the late rank learns the verdict that was
// decided without it.
TEST_F(Heap, ALateRankFailsLikeTheOthers) {
  if (vt::Size() < 2) GTEST_SKIP() << "needs two ranks";
  const int timeout_ms = 2000; // short, yet with room for a loaded CI machine
  for (int late : {vt::Size() - 1, 0}) {
    vmmipc_comm_t c = Create(timeout_ms);
    ASSERT_NE(c, nullptr);
    vmmipc_heap_t h = MakeHeap(c, kGran, 8 * kGran);
    ASSERT_NE(h, nullptr);
    vmmipc_win_t w = nullptr;
    ASSERT_VMM_OK(vmmipc_heap_alloc(h, 4096, &w)); // grown once: the late call needs no growth
    ASSERT_VMM_OK(vmmipc_win_free(w));
    // Late relative to the others' entry (a loaded machine may end the
    // free seconds apart on different ranks).
    MPI_Barrier(MPI_COMM_WORLD);
    if (vt::Rank() == late) vmmipc__test_late(timeout_ms); // the injected fault: 1.5 x the timeout late
    vmmipc_result_t r = vmmipc_heap_alloc(h, 4096, &w);
    EXPECT_EQ(r, VMMIPC_ERR_TIMEOUT) << vmmipc_last_error();
    EXPECT_EQ(w, nullptr);
    EXPECT_TRUE(vt::SameEverywhere(r)) << vmmipc_last_error();
    // One verdict: it names the late rank on every rank.
    std::string want = late == 0 ? "rank 0, which collects it" : "rank " + std::to_string(late) + " did not answer";
    EXPECT_TRUE(Has(vmmipc_last_error(), want)) << vmmipc_last_error();
    vmmipc_comm_stats_t st = VMMIPC_COMM_STATS_INIT;
    ASSERT_VMM_OK(vmmipc_comm_stats(c, &st));
    EXPECT_EQ(st.broken, 1);
    ASSERT_VMM_OK(vmmipc_heap_destroy(h));
    ASSERT_VMM_OK(vmmipc_comm_destroy(c));
    MPI_Barrier(MPI_COMM_WORLD);
  }
}

// One rank's wall clock is minutes off (harness/skewclock.c, preloaded by
// the test_heap .skew entry; skipped without it): the heap decides by
// messages, so allocations succeed with their data, as on one clock.
TEST_F(Heap, AWallClockMinutesOffDecidesNothing) {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  double mine = static_cast<double>(ts.tv_sec), lo = 0, hi = 0;
  MPI_Allreduce(&mine, &lo, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&mine, &hi, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  if (hi - lo < 60) GTEST_SKIP() << "the ranks' wall clocks agree (no skew preloaded)";
  vmmipc_heap_t h = MakeHeap(c_, kGran, 8 * kGran);
  ASSERT_NE(h, nullptr);
  for (unsigned round = 0; round < 3; round++) {
    vmmipc_win_t w = nullptr;
    vmmipc_result_t r = vmmipc_heap_alloc(h, 1000 + 100 * round, &w);
    ASSERT_VMM_OK(r);
    FillOwn(w, 70 + round);
    MPI_Barrier(MPI_COMM_WORLD);
    CheckAll(w, 70 + round, std::vector<size_t>(vt::Size(), 1000 + 100 * round));
    MPI_Barrier(MPI_COMM_WORLD);
    ASSERT_VMM_OK(vmmipc_win_free(w));
  }
  ASSERT_VMM_OK(vmmipc_heap_destroy(h));
}

// Heaps out of step would come from windows freed in different orders:
// the free agrees first on the window, so it fails on every rank naming
// the rank, frees nothing anywhere, and the heap stays in step and usable.
TEST_F(Heap, WindowsFreedInDifferentOrdersAreFound) {
  if (vt::Size() < 2) GTEST_SKIP() << "needs two ranks";
  vmmipc_heap_t h = MakeHeap(c_, kGran, 8 * kGran);
  ASSERT_NE(h, nullptr);
  vmmipc_win_t a = nullptr, b = nullptr;
  ASSERT_VMM_OK(vmmipc_heap_alloc(h, 1000, &a));
  ASSERT_VMM_OK(vmmipc_heap_alloc(h, 1000, &b));
  vmmipc_result_t r = vmmipc_win_free(vt::Rank() == 0 ? a : b);
  EXPECT_EQ(r, VMMIPC_ERR_INVALID_ARG) << vmmipc_last_error();
  EXPECT_TRUE(vt::SameEverywhere(r));
  EXPECT_TRUE(Has(vmmipc_last_error(), "same order")) << vmmipc_last_error();
  vmmipc_comm_stats_t st = VMMIPC_COMM_STATS_INIT;
  ASSERT_VMM_OK(vmmipc_comm_stats(c_, &st));
  EXPECT_EQ(st.broken, 0);
  EXPECT_EQ(st.open_windows, 2);  // nothing was freed
  EXPECT_EQ(Stats(h).live_windows, 2);
  vmmipc_win_t x = nullptr;
  ASSERT_VMM_OK(vmmipc_heap_alloc(h, 1000, &x));  // still in step
  ASSERT_VMM_OK(vmmipc_win_free(x));
  ASSERT_VMM_OK(vmmipc_win_free(a));
  ASSERT_VMM_OK(vmmipc_win_free(b));
  ASSERT_VMM_OK(vmmipc_heap_destroy(h));
}

// Destroying a heap with open windows, or a comm with a live heap, is
// refused on every rank with VMMIPC_ERR_BUSY; both stay usable.
TEST_F(Heap, RefusesDestroyWhileInUse) {
  vmmipc_heap_t h = MakeHeap(c_, kGran, 8 * kGran);
  ASSERT_NE(h, nullptr);
  vmmipc_win_t w1 = nullptr, w2 = nullptr;
  ASSERT_VMM_OK(vmmipc_heap_alloc(h, 100, &w1));
  ASSERT_VMM_OK(vmmipc_heap_alloc(h, 200, &w2));
  vmmipc_result_t r = vmmipc_heap_destroy(h);
  EXPECT_EQ(r, VMMIPC_ERR_BUSY) << vmmipc_last_error();
  EXPECT_TRUE(vt::SameEverywhere(r));
  EXPECT_TRUE(Has(vmmipc_last_error(), "2 window(s) of this heap are open")) << vmmipc_last_error();
  r = vmmipc_comm_destroy(c_);
  EXPECT_EQ(r, VMMIPC_ERR_BUSY) << vmmipc_last_error();
  EXPECT_TRUE(vt::SameEverywhere(r));
  EXPECT_TRUE(Has(vmmipc_last_error(), "1 heap(s) of this comm are live")) << vmmipc_last_error();
  FillOwn(w2, 3);
  MPI_Barrier(MPI_COMM_WORLD);
  CheckAll(w2, 3, std::vector<size_t>(vt::Size(), 200));
  ASSERT_VMM_OK(vmmipc_win_free(w1));
  ASSERT_VMM_OK(vmmipc_win_free(w2));
  ASSERT_VMM_OK(vmmipc_heap_destroy(h));
  EXPECT_VMM_OK(vmmipc_heap_destroy(nullptr));
  EXPECT_EQ(vmmipc_heap_alloc(nullptr, 1, &w1), VMMIPC_ERR_INVALID_ARG);
}

// Signal, wait and barrier work on heap windows as on any window, next to
// an allgather_map window on the same comm.
TEST_F(Heap, SignalWaitAndBarrier) {
  // On a node of one the ring is the rank itself (a signal to oneself).
  if (!vt::AnyRank(n_ >= 2)) GTEST_SKIP() << "needs two ranks on a node";
  CUresult (*streamCreate)(CUstream *, unsigned) = nullptr;
  CUresult (*streamDestroy)(CUstream) = nullptr;
  CUresult (*streamSync)(CUstream) = nullptr;
  CUresult (*htod)(CUdeviceptr, const void *, size_t, CUstream) = nullptr;
  void *fn = nullptr;
  ASSERT_VMM_OK(vmmipc_driver_proc("cuStreamCreate", 0, &fn));
  streamCreate = reinterpret_cast<decltype(streamCreate)>(fn);
  ASSERT_VMM_OK(vmmipc_driver_proc("cuStreamDestroy", 0, &fn));
  streamDestroy = reinterpret_cast<decltype(streamDestroy)>(fn);
  ASSERT_VMM_OK(vmmipc_driver_proc("cuStreamSynchronize", 0, &fn));
  streamSync = reinterpret_cast<decltype(streamSync)>(fn);
  ASSERT_VMM_OK(vmmipc_driver_proc("cuMemcpyHtoDAsync", 0, &fn));
  htod = reinterpret_cast<decltype(htod)>(fn);
  CUstream s = nullptr;
  ASSERT_EQ(streamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  vmmipc_heap_t h = MakeHeap(c_, kGran, 8 * kGran);
  ASSERT_NE(h, nullptr);
  vmmipc_win_t other = nullptr;
  ASSERT_VMM_OK(vmmipc_allgather_map(c_, nullptr, nullptr, &other));
  const size_t n = 64 * 1024;
  // The node's ranks in a ring, by comm rank.
  std::vector<int> ring;
  for (int r = 0; r < vt::Size(); r++)
    if (OnNode(r)) ring.push_back(r);
  int at = 0;
  while (ring[at] != vt::Rank()) at++;
  int right = ring[(at + 1) % ring.size()], left = ring[(at + ring.size() - 1) % ring.size()];
  for (int round = 1; round <= 3; round++) {
    vmmipc_win_t w = nullptr;
    ASSERT_VMM_OK(vmmipc_heap_alloc(h, n, &w));
    // Write into the right neighbour's slice on the stream, then signal it.
    std::vector<unsigned char> data(n);
    for (size_t i = 0; i < n; i++) data[i] = vt::PatternByte(static_cast<unsigned>(round * 100 + vt::Rank()), i);
    void *p = nullptr;
    ASSERT_VMM_OK(vmmipc_win_query(w, right, &p, nullptr));
    ASSERT_EQ(htod(reinterpret_cast<CUdeviceptr>(p), data.data(), n, s), CUDA_SUCCESS);
    ASSERT_VMM_OK(vmmipc_win_signal(w, right, static_cast<uint64_t>(round), s));
    ASSERT_EQ(streamSync(s), CUDA_SUCCESS);
    ASSERT_VMM_OK(vmmipc_win_wait_host(w, left, static_cast<uint64_t>(round), 0));
    void *mine = nullptr;
    ASSERT_VMM_OK(vmmipc_win_query(w, vt::Rank(), &mine, nullptr));
    EXPECT_TRUE(vt::CheckPattern(mine, n, static_cast<unsigned>(round * 100 + left))) << "round " << round;
    // A barrier on the stream, then the window goes (its slots come back zeroed).
    ASSERT_VMM_OK(vmmipc_win_barrier(w, s));
    ASSERT_VMM_OK(vmmipc_win_barrier(w, s));
    ASSERT_EQ(streamSync(s), CUDA_SUCCESS);
    ASSERT_VMM_OK(vmmipc_win_free(w));
  }
  // A fresh window's slots start at zero: a wait for 1 must time out.
  vmmipc_win_t w = nullptr;
  ASSERT_VMM_OK(vmmipc_heap_alloc(h, n, &w));
  EXPECT_EQ(vmmipc_win_wait_host(w, left, 1, 50), VMMIPC_ERR_TIMEOUT);
  MPI_Barrier(MPI_COMM_WORLD);
  ASSERT_VMM_OK(vmmipc_win_free(w));
  ASSERT_VMM_OK(vmmipc_win_free(other));
  ASSERT_VMM_OK(vmmipc_heap_destroy(h));
  streamDestroy(s);
}

// Two heaps on one comm and a heap on a second comm, used interleaved.
TEST_F(Heap, SeveralHeapsAndComms) {
  vmmipc_comm_t c2 = Create(0);
  ASSERT_NE(c2, nullptr);
  vt::Baseline base;
  vmmipc_heap_t a = MakeHeap(c_, kGran, 8 * kGran), b = MakeHeap(c_, 2 * kGran, 0), z = MakeHeap(c2, 0, 0);
  ASSERT_TRUE(a && b && z);
  std::vector<vmmipc_win_t> wins;
  for (int i = 0; i < 6; i++) {
    vmmipc_heap_t h = i % 3 == 0 ? a : i % 3 == 1 ? b : z;
    vmmipc_win_t w = nullptr;
    ASSERT_VMM_OK(vmmipc_heap_alloc(h, 5000u * static_cast<unsigned>(i + 1) + static_cast<size_t>(vt::Rank()), &w));
    FillOwn(w, 50u * static_cast<unsigned>(i));
    wins.push_back(w);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  for (int i = 0; i < 6; i++) {
    std::vector<size_t> s(vt::Size());
    for (int r = 0; r < vt::Size(); r++) s[r] = 5000u * static_cast<unsigned>(i + 1) + static_cast<size_t>(r);
    CheckAll(wins[i], 50u * static_cast<unsigned>(i), s);
  }
  for (vmmipc_win_t w : wins) ASSERT_VMM_OK(vmmipc_win_free(w));
  ASSERT_VMM_OK(vmmipc_heap_destroy(a));
  ASSERT_VMM_OK(vmmipc_heap_destroy(b));
  ASSERT_VMM_OK(vmmipc_heap_destroy(z));
  base.Expect("after three heaps");
  ASSERT_VMM_OK(vmmipc_comm_destroy(c2));
}

// Arguments: a bad config, NULL outputs, stats of an older struct size.
TEST_F(Heap, Arguments) {
  vmmipc_heap_t h = nullptr;
  vmmipc_heap_config_t hc = VMMIPC_HEAP_CONFIG_INIT;
  hc.struct_size = 8;
  vmmipc_result_t r = vmmipc_heap_create(c_, &hc, &h);
  EXPECT_EQ(r, VMMIPC_ERR_INVALID_ARG);
  EXPECT_TRUE(vt::SameEverywhere(r));
  EXPECT_EQ(h, nullptr);
  EXPECT_EQ(vmmipc_heap_create(nullptr, nullptr, &h), VMMIPC_ERR_INVALID_ARG);
  ASSERT_VMM_OK(vmmipc_heap_create(c_, nullptr, &h));
  vmmipc_heap_stats_t st = Stats(h);
  EXPECT_GT(st.grow, 0u);
  EXPECT_EQ(st.reserve % st.grow, 0u);
  EXPECT_EQ(st.reserved, static_cast<uint64_t>(n_) * st.reserve);
  // An older caller's struct: only the fields it knows are written.
  vmmipc_heap_stats_t old;
  std::memset(&old, 0xab, sizeof old);
  old.struct_size = offsetof(vmmipc_heap_stats_t, carved);
  ASSERT_VMM_OK(vmmipc_heap_stats(h, &old));
  unsigned char tail[sizeof old - offsetof(vmmipc_heap_stats_t, carved)];
  std::memcpy(tail, reinterpret_cast<unsigned char *>(&old) + offsetof(vmmipc_heap_stats_t, carved), sizeof tail);
  for (unsigned char t : tail) EXPECT_EQ(t, 0xab);
  r = vmmipc_heap_alloc(h, 10, nullptr);
  EXPECT_EQ(r, VMMIPC_ERR_INVALID_ARG);
  EXPECT_TRUE(vt::SameEverywhere(r));
  EXPECT_TRUE(Has(vmmipc_last_error(), "out is NULL") || Has(vmmipc_last_error(), "failed on rank"));
  ASSERT_VMM_OK(vmmipc_heap_destroy(h));
}

// A trim whose unmap fails on one rank (the second unmap it makes: a step
// partly unmapped there when it fails, or on a node of one, the second of
// the two steps, after the first was unmapped whole): every rank gets the
// error naming that rank, and every rank keeps its steps: the same mapped
// size as before, the live window's data intact, and the heap goes on in
// step: an alloc that must grow past what is mapped, then a trim that
// gives every step back.
TEST_F(Heap, ATrimThatFailsOnOneRankKeepsTheHeapInStep) {
  for (int f : {vt::Size() - 1, 0}) {
    vmmipc_heap_t h = MakeHeap(c_, kGran, 16 * kGran);
    ASSERT_NE(h, nullptr);
    vmmipc_win_t a = nullptr, b1 = nullptr, b2 = nullptr;
    ASSERT_VMM_OK(vmmipc_heap_alloc(h, kGran / 2, &a));
    ASSERT_VMM_OK(vmmipc_heap_alloc(h, kGran, &b1));  // a step each
    ASSERT_VMM_OK(vmmipc_heap_alloc(h, kGran, &b2));
    ASSERT_VMM_OK(vmmipc_win_free(b2));  // the top two steps are free: a trim gives them back
    ASSERT_VMM_OK(vmmipc_win_free(b1));
    FillOwn(a, 21);
    MPI_Barrier(MPI_COMM_WORLD);
    vmmipc_heap_stats_t before = Stats(h);
    ASSERT_EQ(before.mapped, 3 * kGran);
    if (vt::Rank() == f) vmmipc__test_fail_at("trim_unmap", 2);
    vmmipc_result_t r = vmmipc_heap_trim(h);
    vmmipc__test_fail_at(nullptr, 0);
    std::string msg = vmmipc_last_error();
    EXPECT_EQ(r, VMMIPC_ERR_CUDA) << msg;
    EXPECT_TRUE(vt::SameEverywhere(r)) << msg;
    EXPECT_TRUE(Has(msg, "rank " + std::to_string(f))) << msg;
    vmmipc_heap_stats_t after = Stats(h);
    EXPECT_EQ(after.mapped, before.mapped) << "the trim was rolled back";
    EXPECT_EQ(after.trimmed_steps, before.trimmed_steps);
    std::vector<size_t> sizes(vt::Size(), kGran / 2);
    CheckAll(a, 21, sizes);
    // In step: a window that needs a new step past the kept ones.
    vmmipc_win_t c = nullptr;
    ASSERT_VMM_OK(vmmipc_heap_alloc(h, 4 * kGran, &c));
    EXPECT_GT(Stats(h).mapped, before.mapped);
    FillOwn(c, 22);
    MPI_Barrier(MPI_COMM_WORLD);
    CheckAll(c, 22, std::vector<size_t>(vt::Size(), 4 * kGran));
    MPI_Barrier(MPI_COMM_WORLD);
    ASSERT_VMM_OK(vmmipc_win_free(c));
    ASSERT_VMM_OK(vmmipc_win_free(a));
    ASSERT_VMM_OK(vmmipc_heap_trim(h));
    EXPECT_EQ(Stats(h).mapped, 0u);
    ASSERT_VMM_OK(vmmipc_heap_destroy(h));
  }
}

// Heaps out of step (made so here: one rank's digest takes an event the
// others did not see) give back nothing: the trim fails on every rank with
// INVALID_ARG, every rank keeps its steps, and only destroy works on the
// heap then, as after an alloc that finds it. Before, each rank gave back
// the free steps its own heap showed and returned SUCCESS.
TEST_F(Heap, ATrimFindsHeapsOutOfStep) {
  if (vt::Size() < 2) GTEST_SKIP() << "needs a second rank";
  vmmipc_heap_t h = MakeHeap(c_, kGran, 16 * kGran);
  ASSERT_NE(h, nullptr);
  vmmipc_win_t a = nullptr, b = nullptr;
  ASSERT_VMM_OK(vmmipc_heap_alloc(h, kGran / 2, &a));
  ASSERT_VMM_OK(vmmipc_heap_alloc(h, kGran, &b));
  ASSERT_VMM_OK(vmmipc_win_free(b));  // a free step at the top
  vmmipc_heap_stats_t before = Stats(h);
  if (vt::Rank() == vt::Size() - 1) vmmipc__heap_mix(h, 99, 1, 2);
  vmmipc_result_t r = vmmipc_heap_trim(h);
  std::string msg = vmmipc_last_error();
  EXPECT_EQ(r, VMMIPC_ERR_INVALID_ARG) << msg;
  EXPECT_TRUE(vt::SameEverywhere(r)) << msg;
  EXPECT_TRUE(Has(msg, "same order")) << msg;
  EXPECT_EQ(Stats(h).mapped, before.mapped) << "a step given back";
  EXPECT_EQ(Stats(h).trimmed_steps, before.trimmed_steps);
  vmmipc_win_t x = nullptr;
  r = vmmipc_heap_alloc(h, 100, &x);
  EXPECT_EQ(r, VMMIPC_ERR_INVALID_ARG) << vmmipc_last_error();
  EXPECT_TRUE(Has(vmmipc_last_error(), "out of step")) << vmmipc_last_error();
  EXPECT_VMM_OK(vmmipc_win_free(a));
  EXPECT_VMM_OK(vmmipc_heap_destroy(h));
}

// The same, where the rollback fails too on another rank, at its first
// remap after the verdict: its access (hook "access") or its map (hook
// "map", which leaves that range unmapped). Every rank still reports the
// trim's failure, code and rank, in vmmipc_last_error_info as in the
// message. Before, the rollback's error replaced the structured error there
// (rank -1), the message alone being kept. That rank's heap is out of step
// after it (docs/heap.md): its next alloc is refused, and its destroy still
// frees it, unmapping only what is mapped, so every rank's destroy succeeds.
// Before, after a failed map that rank's destroy failed unmapping the range
// (VMMIPC_ERR_CUDA) while its peers returned SUCCESS: two verdicts.
TEST_F(Heap, ATrimWhoseRollbackFailsStillNamesTheRankThatFailed) {
  if (vt::Size() < 2) GTEST_SKIP() << "needs a second rank";
  const int f = vt::Size() - 1, g = 0;
  for (const char *hook : {"access", "map"}) {
    vmmipc_heap_t h = MakeHeap(c_, kGran, 16 * kGran);
    ASSERT_NE(h, nullptr);
    vmmipc_win_t a = nullptr, b1 = nullptr, b2 = nullptr;
    ASSERT_VMM_OK(vmmipc_heap_alloc(h, kGran / 2, &a));
    ASSERT_VMM_OK(vmmipc_heap_alloc(h, kGran, &b1));
    ASSERT_VMM_OK(vmmipc_heap_alloc(h, kGran, &b2));
    ASSERT_VMM_OK(vmmipc_win_free(b2));
    ASSERT_VMM_OK(vmmipc_win_free(b1));
    MPI_Barrier(MPI_COMM_WORLD);
    if (vt::Rank() == f) vmmipc__test_fail_at("trim_unmap", 2);
    if (vt::Rank() == g) vmmipc__test_fail_at(hook, 1);
    vmmipc_result_t r = vmmipc_heap_trim(h);
    vmmipc__test_fail_at(nullptr, 0);
    const std::string msg = vt::ExpectVerdict(r, VMMIPC_ERR_CUDA, f, "vmmipc_heap_trim", hook);
    EXPECT_TRUE(Has(msg, "rank " + std::to_string(f))) << msg;
    ASSERT_VMM_OK(vmmipc_win_free(a));
    r = vmmipc_heap_destroy(h);
    EXPECT_EQ(r, VMMIPC_SUCCESS) << hook << ": " << vmmipc_last_error();
    EXPECT_TRUE(vt::SameEverywhere(r)) << hook << ": " << vmmipc_last_error();
  }
}

}  // namespace
