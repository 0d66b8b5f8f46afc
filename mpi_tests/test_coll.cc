// Collectives: allgather/scatter of descriptors, allgather_map, bcast_map,
// scatter_map; access per rank; all-or-nothing under injected failures.
#include <cuda.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "comm/comm.h"
#include "desc/desc.h"
#include "common/testhooks.h"
#include "harness/bufs.h"

namespace {

using vt::kGran;

class Coll : public ::testing::Test {
 protected:
  void SetUp() override {
    dev_ = vt::UseRankDevice();
    ASSERT_GE(dev_, 0);
    // The mapping cache would keep idle mappings past win_free; these tests
    // count objects, so they run without it (MappingCacheServes... runs with it).
    vmmipc_config_t cfg = VMMIPC_CONFIG_INIT;
    cfg.map_cache_entries = 0;
    ASSERT_VMM_OK(vmmipc_comm_create(MPI_COMM_WORLD, &cfg, &c_));
    vmmipc_comm_node_comm(c_, &node_);
    MPI_Comm_size(node_, &node_size_);
    // The comm's first window makes its signal pool (kept until the comm is
    // destroyed): make it now, so that the baselines the tests take count
    // only what a collective leaves behind.
    vmmipc_win_t w = nullptr;
    ASSERT_VMM_OK(vmmipc_allgather_map(c_, nullptr, nullptr, &w));
    ASSERT_VMM_OK(vmmipc_win_free(w));
  }
  void TearDown() override {
    vmmipc__test_fail_at(nullptr, 0);
    if (c_) {
      EXPECT_VMM_OK(vmmipc_comm_destroy(c_));
    }
  }
  bool Same(int r) {
    int s = 0;
    vmmipc_comm_same_node(c_, r, &s);
    return s != 0;
  }
  // Rank r's buffer size: differs between ranks.
  static size_t SizeOf(int r) { return (r % 3 + 1) * kGran - 4096 * r; }
  int dev_ = -1, node_size_ = 0;
  vmmipc_comm_t c_ = nullptr;
  MPI_Comm node_ = MPI_COMM_NULL;
};

TEST_F(Coll, AllgatherMapReadsEveryNodePeer) {
  vt::Baseline base;
  int me = vt::Rank(), n = vt::Size();
  const int none = n > 1 ? n - 1 : -1;  // this rank contributes NULL
  vmmipc_buf_t b = me == none ? nullptr : vt::PatternBuf(me % 2 + 1, 500 + me, SizeOf(me));
  vmmipc_win_t w = nullptr;
  ASSERT_VMM_OK(vmmipc_allgather_map(c_, b, nullptr, &w));
  for (int r = 0; r < n; r++) {
    void *p = reinterpret_cast<void *>(1);
    size_t sz = 1;
    ASSERT_VMM_OK(vmmipc_win_query(w, r, &p, &sz));
    if (!Same(r) || r == none) {
      EXPECT_EQ(p, nullptr) << "rank " << r;
      EXPECT_EQ(sz, 0u) << "rank " << r;
      continue;
    }
    ASSERT_NE(p, nullptr) << "rank " << r;
    EXPECT_EQ(sz, SizeOf(r));
    if (r == me) {
      void *own = nullptr;
      vmmipc_buf_ptr(b, &own, nullptr);
      EXPECT_EQ(p, own) << "own entry is the own buffer, not a second mapping";
    }
    EXPECT_TRUE(vt::CheckPattern(p, sz, 500 + r)) << "buffer of rank " << r;
  }
  vmmipc_timing_t t = VMMIPC_TIMING_INIT;
  ASSERT_VMM_OK(vmmipc_comm_last_timing(c_, &t));
  EXPECT_GT(t.total_s, 0.0);
  ASSERT_VMM_OK(vmmipc_win_free(w));
  if (b) vmmipc_buf_free(b);
  base.Expect("allgather_map");
}

TEST_F(Coll, ReadAndReadWriteMixAcrossRanks) {
  int me = vt::Rank(), n = vt::Size();
  vmmipc_buf_t b = vt::PatternBuf(1, 700 + me);
  vmmipc_access_t a = {sizeof(vmmipc_access_t), me % 2 ? VMMIPC_PROT_READ : VMMIPC_PROT_READWRITE, 0, nullptr};
  vmmipc_win_t w = nullptr;
  ASSERT_VMM_OK(vmmipc_allgather_map(c_, b, &a, &w));
  for (int r = 0; r < n; r++) {
    if (r == me || !Same(r)) continue;
    void *p = nullptr;
    size_t sz = 0;
    vmmipc_win_query(w, r, &p, &sz);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(vt::AccessFlags(p, dev_), me % 2 ? CU_MEM_ACCESS_FLAGS_PROT_READ : CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    EXPECT_TRUE(vt::CheckPattern(p, sz, 700 + r));
  }
  ASSERT_VMM_OK(vmmipc_win_free(w));
  vmmipc_buf_free(b);
}

TEST_F(Coll, BcastMapIsReadByAllAndWrittenInSlices) {
  vt::Baseline base;
  int me = vt::Rank(), n = vt::Size(), root = n - 1;
  const size_t slice = 64 * 1024;
  vmmipc_buf_t b = me == root ? vt::PatternBuf(2, 900) : nullptr;
  vmmipc_buf_t out = nullptr;
  ASSERT_VMM_OK(vmmipc_bcast_map(c_, b, root, nullptr, &out));
  void *p = nullptr;
  size_t sz = 0;
  if (me == root || !Same(root)) {
    EXPECT_EQ(out, nullptr);
  } else {
    ASSERT_NE(out, nullptr);
    vmmipc_buf_ptr(out, &p, &sz);
    EXPECT_EQ(sz, 2 * kGran);
    EXPECT_TRUE(vt::CheckPattern(p, sz, 900));
  }
  // Every rank has read the whole buffer before any rank writes its slice.
  MPI_Barrier(MPI_COMM_WORLD);
  if (p) {
    std::vector<unsigned char> h(slice, static_cast<unsigned char>(me + 1));
    vt::CopyToDevice(static_cast<char *>(p) + me * slice, h.data(), slice);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (me == root) {
    void *p = nullptr;
    vmmipc_buf_ptr(b, &p, nullptr);
    for (int r = 0; r < n; r++) {
      if (r == root || !Same(r)) continue;
      std::vector<unsigned char> h(slice);
      vt::CopyToHost(h.data(), static_cast<char *>(p) + r * slice, slice);
      size_t bad = 0;
      for (unsigned char x : h) bad += x != static_cast<unsigned char>(r + 1);
      EXPECT_EQ(bad, 0u) << "slice written by rank " << r;
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (out) vmmipc_buf_free(out);
  if (b) vmmipc_buf_free(b);
  base.Expect("bcast_map");
}

TEST_F(Coll, ScatterMapGivesEachRankItsOwnSlice) {
  vt::Baseline base;
  int me = vt::Rank(), n = vt::Size(), root = 0, empty = n > 2 ? 1 : -1;
  std::vector<vmmipc_buf_t> bufs(n, nullptr);
  if (me == root)
    for (int r = 0; r < n; r++)
      if (r != empty) bufs[r] = vt::PatternBuf(1, 1000 + r, kGran / 2 + r);
  vmmipc_buf_t out = nullptr;
  ASSERT_VMM_OK(vmmipc_scatter_map(c_, bufs.data(), root, nullptr, &out));
  if (me == root || me == empty || !Same(root)) {
    EXPECT_EQ(out, nullptr);
  } else {
    ASSERT_NE(out, nullptr);
    void *p = nullptr;
    size_t sz = 0;
    vmmipc_buf_ptr(out, &p, &sz);
    EXPECT_EQ(sz, kGran / 2 + me);
    EXPECT_TRUE(vt::CheckPattern(p, sz, 1000 + me));
    vmmipc_buf_free(out);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  for (auto b : bufs)
    if (b) vmmipc_buf_free(b);
  base.Expect("scatter_map");
}

TEST_F(Coll, DescriptorCollectivesCarryTheMetadata) {
  vt::Baseline base;
  int me = vt::Rank(), n = vt::Size();
  vmmipc_buf_t b = vt::PatternBuf(me % 3 + 1, 1200 + me);
  vmmipc_desc_t mine = nullptr;
  ASSERT_VMM_OK(vmmipc_export(b, &mine));
  std::vector<vmmipc_desc_t> all(n, nullptr);
  ASSERT_VMM_OK(vmmipc_allgather_desc(c_, mine, all.data()));
  vmmipc_uuid_t own_uuid;
  vmmipc_device_uuid(dev_, &own_uuid);
  for (int r = 0; r < n; r++) {
    if (!Same(r)) {
      EXPECT_EQ(all[r], nullptr);
      continue;
    }
    ASSERT_NE(all[r], nullptr) << "rank " << r;
    int chunks = 0;
    size_t sz = 0;
    vmmipc_desc_info(all[r], &sz, &chunks, nullptr);
    EXPECT_EQ(chunks, r % 3 + 1);
    EXPECT_EQ(sz, static_cast<size_t>(r % 3 + 1) * kGran);
    vmmipc_buf_t imp = nullptr;
    ASSERT_VMM_OK(vmmipc_import(all[r], nullptr, &imp));
    void *p = nullptr;
    vmmipc_buf_ptr(imp, &p, &sz);
    EXPECT_TRUE(vt::CheckPattern(p, sz, 1200 + r));
    vmmipc_buf_free(imp);
  }
  // Forwarding: scatter from rank 0 of the descriptors it received.
  vmmipc_desc_t got = nullptr;
  ASSERT_VMM_OK(vmmipc_scatter_desc(c_, all.data(), 0, &got));
  if (Same(0)) {
    ASSERT_NE(got, nullptr);
    vmmipc_buf_t imp = nullptr;
    ASSERT_VMM_OK(vmmipc_import(got, nullptr, &imp));
    void *p = nullptr;
    size_t sz = 0;
    vmmipc_buf_ptr(imp, &p, &sz);
    EXPECT_TRUE(vt::CheckPattern(p, sz, 1200 + me)) << "rank 0 forwarded this rank's own descriptor back";
    vmmipc_buf_free(imp);
    vmmipc_desc_free(got);
  } else {
    EXPECT_EQ(got, nullptr);
  }
  for (auto d : all)
    if (d) vmmipc_desc_free(d);
  vmmipc_desc_free(mine);
  MPI_Barrier(MPI_COMM_WORLD);
  vmmipc_buf_free(b);
  base.Expect("descriptor collectives");
}

// A window's id is the epoch of the call that made it, and its free agrees
// on it comm-wide: every collective must advance the epoch alike on every
// rank, whatever its node's shape (a node of one included: issue 29, where
// {2,1} failed the first win_free with "rank 2 passed window #2 and rank 0
// window #3").
TEST_F(Coll, EpochAdvancesAlikeOnEveryNodeShape) {
  int me = vt::Rank(), n = vt::Size();
  auto in_step = [&](const char *after) {
    uint64_t e = c_->epoch, lo = 0, hi = 0;
    MPI_Allreduce(&e, &lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&e, &hi, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
    EXPECT_EQ(lo, hi) << "the epochs differ between ranks after " << after;
  };
  in_step("the first window");
  vmmipc_buf_t b = vt::PatternBuf(1, 3000 + me);
  vmmipc_win_t w = nullptr, w2 = nullptr, hw = nullptr;
  ASSERT_VMM_OK(vmmipc_allgather_map(c_, b, nullptr, &w));
  in_step("allgather_map");
  vmmipc_buf_t out = nullptr;
  ASSERT_VMM_OK(vmmipc_bcast_map(c_, b, n - 1, nullptr, &out));
  in_step("bcast_map");
  if (out) vmmipc_buf_free(out);
  std::vector<vmmipc_buf_t> bufs(n, b);
  ASSERT_VMM_OK(vmmipc_scatter_map(c_, me == 0 ? bufs.data() : nullptr, 0, nullptr, &out));
  in_step("scatter_map");
  if (out) vmmipc_buf_free(out);
  vmmipc_heap_t h = nullptr;
  ASSERT_VMM_OK(vmmipc_heap_create(c_, nullptr, &h));
  ASSERT_VMM_OK(vmmipc_heap_alloc(h, 4096, &hw));
  in_step("heap_alloc");
  ASSERT_VMM_OK(vmmipc_allgather_map(c_, nullptr, nullptr, &w2));
  // Freed in another order than made: each free names its own window.
  EXPECT_VMM_OK(vmmipc_win_free(w2));
  EXPECT_VMM_OK(vmmipc_win_free(hw));
  EXPECT_VMM_OK(vmmipc_heap_destroy(h));
  EXPECT_VMM_OK(vmmipc_win_free(w));
  in_step("win_free");
  vmmipc_buf_free(b);
}

// A failure at any step on any rank fails every rank with the same code and
// a message naming that rank; nothing is left behind; the next call works.
TEST_F(Coll, AllOrNothingAtEveryStepAndRank) {
  int me = vt::Rank(), n = vt::Size();
  vmmipc_buf_t b = vt::PatternBuf(2, 1500 + me);
  vt::Baseline base;
  vmmipc_uuid_t bogus;
  std::memset(bogus.bytes, 0xcd, sizeof bogus.bytes);
  const char *steps[] = {"uuid", "export", "transfer", "import", "map", "access"};
  for (const char *step : steps) {
    // Every step but export needs node peers; with none, nothing moves.
    int any_peers = 0, has = node_size_ > 1;
    MPI_Allreduce(&has, &any_peers, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (!any_peers) continue;
    for (int f = 0; f < n; f++) {
      // The failing rank must have node peers for peer-side steps.
      int f_has_peers = node_size_ > 1;
      MPI_Bcast(&f_has_peers, 1, MPI_INT, f, MPI_COMM_WORLD);
      if (!f_has_peers) continue;
      vmmipc_access_t a = VMMIPC_ACCESS_DEFAULT;
      if (me == f) {
        if (!std::strcmp(step, "uuid")) {
          a.num_devices = 1;
          a.devices = &bogus;
        } else {
          vmmipc__test_fail_at(step, 1);
        }
      }
      vmmipc_win_t w = nullptr;
      vmmipc_result_t r = vmmipc_allgather_map(c_, b, &a, &w);
      vmmipc__test_fail_at(nullptr, 0);
      EXPECT_NE(r, VMMIPC_SUCCESS) << step << " on rank " << f;
      EXPECT_TRUE(vt::SameEverywhere(r)) << step << " on rank " << f;
      EXPECT_EQ(w, nullptr);
      std::string want = "failed on rank " + std::to_string(f);
      EXPECT_NE(std::string(vmmipc_last_error()).find(want), std::string::npos)
          << step << ": " << vmmipc_last_error();
      base.Expect(step);
      // The same collective succeeds right after.
      ASSERT_VMM_OK(vmmipc_allgather_map(c_, b, nullptr, &w));
      ASSERT_VMM_OK(vmmipc_win_free(w));
      base.Expect(step);
    }
  }
  // The root-based collectives fail as one too.
  // The root is rank 0; rank 0 decides for everyone which cases apply.
  int root_peers = node_size_ > 1, one_with_root = n > 1 && Same(1);
  MPI_Bcast(&root_peers, 1, MPI_INT, 0, MPI_COMM_WORLD);
  MPI_Bcast(&one_with_root, 1, MPI_INT, 0, MPI_COMM_WORLD);
  for (const char *step : {"export", "transfer", "import"}) {
    if (!root_peers) break;
    int f = !std::strcmp(step, "import") ? (one_with_root ? 1 : -1) : 0;
    if (f < 0) continue;
    if (me == f) vmmipc__test_fail_at(step, 1);
    vmmipc_buf_t out = nullptr;
    vmmipc_result_t r = vmmipc_bcast_map(c_, b, 0, nullptr, &out);
    vmmipc__test_fail_at(nullptr, 0);
    EXPECT_NE(r, VMMIPC_SUCCESS) << "bcast " << step;
    EXPECT_TRUE(vt::SameEverywhere(r));
    EXPECT_EQ(out, nullptr);
    base.Expect(step);
  }
  vmmipc_buf_free(b);
}

// A root that is no rank, on the one rank the others take for their root:
// that rank still takes part (it tells its node peers it failed), so every
// rank fails at once with its INVALID_ARG, not at the timeout, and the comm
// stays usable. For bcast_map, scatter_map and scatter_desc.
TEST(CollRoot, ARootThatIsNoRankFailsEveryRankAtOnce) {
  ASSERT_GE(vt::UseRankDevice(), 0);
  int me = vt::Rank(), n = vt::Size();
  if (n < 2) GTEST_SKIP() << "needs two ranks";
  const int timeout_ms = 20000;
  vmmipc_config_t cfg = VMMIPC_CONFIG_INIT;
  cfg.timeout_ms = timeout_ms;
  vmmipc_comm_t c = nullptr;
  ASSERT_VMM_OK(vmmipc_comm_create(MPI_COMM_WORLD, &cfg, &c));
  vmmipc_buf_t b = me == 0 ? vt::PatternBuf(1, 4100) : nullptr;
  std::vector<vmmipc_buf_t> bufs(n, b);
  vmmipc_desc_t d = nullptr;
  if (me == 0) ASSERT_VMM_OK(vmmipc_export(b, &d));
  std::vector<vmmipc_desc_t> descs(n, d);
  for (int bad : {-1, n}) {
    for (const char *call : {"bcast_map", "scatter_map", "scatter_desc"}) {
      int root = me == 0 ? bad : 0;  // rank 0 is everyone else's root
      MPI_Barrier(MPI_COMM_WORLD);
      auto t0 = std::chrono::steady_clock::now();
      vmmipc_buf_t out = nullptr;
      vmmipc_desc_t dout = nullptr;
      vmmipc_result_t r;
      if (!std::strcmp(call, "bcast_map"))
        r = vmmipc_bcast_map(c, b, root, nullptr, &out);
      else if (!std::strcmp(call, "scatter_map"))
        r = vmmipc_scatter_map(c, bufs.data(), root, nullptr, &out);
      else
        r = vmmipc_scatter_desc(c, descs.data(), root, &dout);
      double took = vt::Since(t0);
      vmmipc_error_info_t info = VMMIPC_ERROR_INFO_INIT;
      vmmipc_last_error_info(&info);
      std::string msg = vmmipc_last_error();
      EXPECT_EQ(r, VMMIPC_ERR_INVALID_ARG) << call << " root " << bad << ": " << msg;
      EXPECT_TRUE(vt::SameEverywhere(r)) << call;
      EXPECT_EQ(info.rank, 0) << call << ": " << msg;
      EXPECT_LT(took, timeout_ms / 2000.0) << call << " waited for the timeout: " << msg;
      EXPECT_EQ(out, nullptr);
      EXPECT_EQ(dout, nullptr);
    }
  }
  // Still usable: the same collective with a good root on every rank.
  vmmipc_buf_t out = nullptr;
  ASSERT_VMM_OK(vmmipc_bcast_map(c, b, 0, nullptr, &out));
  if (out) vmmipc_buf_free(out);
  vmmipc_desc_free(d);
  if (b) vmmipc_buf_free(b);
  EXPECT_VMM_OK(vmmipc_comm_destroy(c));
}

// The root of a descriptor scatter passes an entry for a node peer whose fd
// is not open (here: closed and -1, a misuse): the root checks every entry
// before anything is sent, so every rank fails at once with its
// INVALID_ARG, naming the root, not at the timeout; the comm goes on.
// Before, the root's transport refused the message without telling the
// peers, which waited for it until the timeout.
TEST(CollRoot, AScatterEntryWithoutAnOpenFdFailsEveryRankAtOnce) {
  ASSERT_GE(vt::UseRankDevice(), 0);
  const int me = vt::Rank(), n = vt::Size();
  const int timeout_ms = 8000;
  vt::Baseline base;
  vmmipc_config_t cfg = VMMIPC_CONFIG_INIT;
  cfg.timeout_ms = timeout_ms;
  vmmipc_comm_t c = nullptr;
  ASSERT_VMM_OK(vmmipc_comm_create(MPI_COMM_WORLD, &cfg, &c));
  const int root = n - 1;
  int victim = -1;  // the root's lowest node peer
  for (int r = 0; r < root && victim < 0; r++) {
    int same = 0;
    ASSERT_VMM_OK(vmmipc_comm_same_node(c, r, &same));
    if (same) victim = r;
  }
  MPI_Bcast(&victim, 1, MPI_INT, root, MPI_COMM_WORLD);
  if (victim < 0) {
    EXPECT_VMM_OK(vmmipc_comm_destroy(c));
    GTEST_SKIP() << "the root has no node peer";
  }
  vmmipc_buf_t b = me == root ? vt::PatternBuf(1, 4200) : nullptr;
  std::vector<vmmipc_desc_t> descs(static_cast<size_t>(n), nullptr);
  if (me == root) {
    for (auto &d : descs) ASSERT_VMM_OK(vmmipc_export(b, &d));
    close(descs[victim]->fds[0]);
    descs[victim]->fds[0] = -1;
  }
  MPI_Barrier(MPI_COMM_WORLD);
  auto t0 = std::chrono::steady_clock::now();
  vmmipc_desc_t got = nullptr;
  vmmipc_result_t r = vmmipc_scatter_desc(c, descs.data(), root, &got);
  const double took = vt::Since(t0);
  vmmipc_error_info_t info = VMMIPC_ERROR_INFO_INIT;
  vmmipc_last_error_info(&info);
  const std::string msg = vmmipc_last_error();
  EXPECT_EQ(r, VMMIPC_ERR_INVALID_ARG) << msg;
  EXPECT_TRUE(vt::SameEverywhere(r));
  EXPECT_EQ(info.rank, root) << msg;
  EXPECT_NE(msg.find("rank " + std::to_string(victim)), std::string::npos) << msg;
  EXPECT_LT(took, timeout_ms / 2000.0) << "waited for the timeout: " << msg;
  EXPECT_EQ(got, nullptr);
  for (auto &d : descs) vmmipc_desc_free(d);
  // The comm goes on: the same scatter with good entries.
  if (me == root)
    for (auto &d : descs) ASSERT_VMM_OK(vmmipc_export(b, &d));
  ASSERT_VMM_OK(vmmipc_scatter_desc(c, descs.data(), root, &got));
  vmmipc_desc_free(got);
  for (auto &d : descs) vmmipc_desc_free(d);
  if (b) vmmipc_buf_free(b);
  EXPECT_VMM_OK(vmmipc_comm_destroy(c));
  base.Expect("after the refused scatter");
}

// With the mapping cache on: mapping unchanged buffers again makes no new
// mapping (hits counted), a grown buffer or a new one is never served from a
// stale entry, and everything is released with the comm.
TEST(CollCache, MappingCacheServesUnchangedBuffersOnly) {
  ASSERT_GE(vt::UseRankDevice(), 0);
  int me = vt::Rank(), n = vt::Size();
  vt::Baseline base;
  vmmipc_comm_t c = nullptr;
  ASSERT_VMM_OK(vmmipc_comm_create(MPI_COMM_WORLD, nullptr, &c));
  auto same = [c](int r) {
    int s = 0;
    vmmipc_comm_same_node(c, r, &s);
    return s != 0;
  };
  int peers = 0;
  for (int r = 0; r < n; r++) peers += r != me && same(r);
  vmmipc_buf_t b = vt::PatternBuf(2, 7000 + me);
  auto map_and_check = [&](unsigned seed0, size_t size) {
    vmmipc_win_t w = nullptr;
    ASSERT_VMM_OK(vmmipc_allgather_map(c, b, nullptr, &w));
    for (int r = 0; r < n; r++) {
      if (!same(r)) continue;
      void *p = nullptr;
      size_t sz = 0;
      ASSERT_VMM_OK(vmmipc_win_query(w, r, &p, &sz));
      EXPECT_EQ(sz, size) << "rank " << r;
      EXPECT_TRUE(vt::CheckPattern(p, sz, seed0 + r)) << "rank " << r;
    }
    ASSERT_VMM_OK(vmmipc_win_free(w));
  };
  vmmipc_comm_stats_t s0 = VMMIPC_COMM_STATS_INIT, s1 = VMMIPC_COMM_STATS_INIT, s2 = VMMIPC_COMM_STATS_INIT;
  map_and_check(7000, 2 * kGran);
  ASSERT_VMM_OK(vmmipc_comm_stats(c, &s0));
  map_and_check(7000, 2 * kGran); // unchanged: every peer from the cache
  ASSERT_VMM_OK(vmmipc_comm_stats(c, &s1));
  EXPECT_EQ(s1.map_cache_hits - s0.map_cache_hits, static_cast<uint64_t>(peers));
  EXPECT_EQ(s1.map_cache_misses, s0.map_cache_misses);
  // Grown (new generation) and refilled: a miss, and the new bytes.
  ASSERT_VMM_OK(vmmipc_grow(b, 3 * kGran));
  void *p = nullptr;
  size_t sz = 0;
  vmmipc_buf_ptr(b, &p, &sz);
  vt::FillPattern(p, sz, 7100 + me);
  MPI_Barrier(MPI_COMM_WORLD);
  map_and_check(7100, 3 * kGran);
  ASSERT_VMM_OK(vmmipc_comm_stats(c, &s2));
  EXPECT_EQ(s2.map_cache_hits, s1.map_cache_hits) << "a grown buffer was served from its old entry";
  EXPECT_EQ(s2.map_cache_misses - s1.map_cache_misses, static_cast<uint64_t>(peers));
  // A new buffer (new serial) never hits either.
  vmmipc_buf_free(b);
  b = vt::PatternBuf(1, 7200 + me);
  MPI_Barrier(MPI_COMM_WORLD);
  map_and_check(7200, kGran);
  vmmipc_comm_stats_t s3 = VMMIPC_COMM_STATS_INIT;
  ASSERT_VMM_OK(vmmipc_comm_stats(c, &s3));
  EXPECT_EQ(s3.map_cache_hits, s2.map_cache_hits);
  EXPECT_GE(s3.map_cache_idle, peers > 0 ? 1 : 0);
  vmmipc_buf_free(b);
  ASSERT_VMM_OK(vmmipc_comm_destroy(c)); // releases the idle mappings
  base.Expect("mapping cache");
}

}  // namespace
