// A collective whose own host tables cannot be allocated on one rank: that
// rank fails the call with VMMIPC_ERR_NO_MEMORY and tells its node peers,
// which fail at once. Part of test_faults (suites.cmake).
#include <gtest/gtest.h>
#include <mpi.h>

#include <chrono>
#include <ostream>
#include <string>
#include <vector>

#include "harness/bufs.h"
#include "common/testhooks.h"
#include "harness/helpers.h"
#include "vmmipc.h"

namespace {

constexpr int kTimeoutMs = 10000;

enum class Call { kFirstWindow, kAllgatherMap, kAllgatherDesc, kScatterDesc, kBcastMap, kScatterMap };

struct Case {
  const char *hook;  // the step that fails on rank f (common/testhooks.h)
  Call call;
  const char *op;
  int nth = 1;  // which occurrence of the step fails
};

void PrintTo(const Case &k, std::ostream *os) { *os << k.hook << " (occurrence " << k.nth << ") in " << k.op; }

// The call on every rank, with f as the root of scatters and f's first
// node peer as the root of broadcasts (f then waits on the root).
vmmipc_result_t RunCall(vmmipc_comm_t c, Call call, int f, int peer, vmmipc_buf_t b) {
  const int n = vt::Size();
  vmmipc_win_t w = nullptr;
  vmmipc_buf_t got = nullptr;
  vmmipc_result_t r = VMMIPC_SUCCESS;
  switch (call) {
    case Call::kFirstWindow:
    case Call::kAllgatherMap:
      r = vmmipc_allgather_map(c, b, nullptr, &w);
      if (w) EXPECT_VMM_OK(vmmipc_win_free(w));
      return r;
    case Call::kAllgatherDesc: {
      vmmipc_desc_t d = nullptr;
      EXPECT_VMM_OK(vmmipc_export(b, &d));
      std::vector<vmmipc_desc_t> all(n, nullptr);
      r = vmmipc_allgather_desc(c, d, all.data());
      for (auto &x : all) vmmipc_desc_free(x);
      vmmipc_desc_free(d);
      return r;
    }
    case Call::kScatterDesc: {
      std::vector<vmmipc_desc_t> ds(n, nullptr);
      vmmipc_desc_t d = nullptr;
      if (vt::Rank() == f) EXPECT_VMM_OK(vmmipc_export(b, &d));
      for (auto &x : ds) x = d;
      vmmipc_desc_t out = nullptr;
      r = vmmipc_scatter_desc(c, ds.data(), f, &out);
      vmmipc_desc_free(out);
      vmmipc_desc_free(d);
      return r;
    }
    case Call::kBcastMap:
      r = vmmipc_bcast_map(c, vt::Rank() == peer ? b : nullptr, peer, nullptr, &got);
      break;
    case Call::kScatterMap: {
      std::vector<vmmipc_buf_t> bufs(n, b);
      r = vmmipc_scatter_map(c, bufs.data(), f, nullptr, &got);
      break;
    }
  }
  if (got) vmmipc_buf_free(got);
  return r;
}

// The first rank on rank f's node other than f (-1 without f).
int NodePeerOf(const std::vector<int> &ids, int f) {
  for (int r = 0; f >= 0 && r < static_cast<int>(ids.size()); r++)
    if (r != f && ids[r] == ids[f]) return r;
  return -1;
}

// An allgather_map of b (each rank's pattern seed0 + rank) after a failure
// carries every node peer's bytes.
void WindowGoesOn(vmmipc_comm_t c, const std::vector<int> &ids, vmmipc_buf_t b, int seed0, const std::string &how) {
  const int me = vt::Rank();
  vmmipc_win_t w = nullptr;
  ASSERT_VMM_OK(vmmipc_allgather_map(c, b, nullptr, &w));
  for (int q = 0; q < vt::Size(); q++) {
    if (ids[q] != ids[me]) continue;
    void *p = nullptr;
    size_t sz = 0;
    ASSERT_VMM_OK(vmmipc_win_query(w, q, &p, &sz));
    EXPECT_TRUE(vt::CheckPattern(p, sz, seed0 + q)) << how << ": rank " << q << "'s window after the failure";
  }
  ASSERT_VMM_OK(vmmipc_win_free(w));
}

class FaultsTables : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override { ASSERT_GE(vt::UseRankDevice(), 0); }
  void TearDown() override { vmmipc__test_fail_at(nullptr, 0); }
};

// Rank f (the last with a node peer) lacks the tables; every rank reports
// NO_MEMORY naming f well before the timeout (10 s), nothing is left
// behind, and the comm goes on. The first window's case fails the signal
// pool made in that call. Before, a collective without its peer tables
// sent nobody anything: f's node peers waited for it until the timeout.
TEST_P(FaultsTables, ACollectiveWithoutItsTablesTellsItsPeers) {
  const Case k = GetParam();
  const int me = vt::Rank();
  vmmipc_comm_t c = nullptr;
  if (k.call == Call::kFirstWindow) {  // no window yet: the call makes the signal pool
    vmmipc_config_t cfg = VMMIPC_CONFIG_INIT;
    cfg.timeout_ms = kTimeoutMs;
    cfg.map_cache_entries = 0;
    ASSERT_VMM_OK(vmmipc_comm_create(MPI_COMM_WORLD, &cfg, &c));
  } else {
    c = vt::CountedComm(kTimeoutMs);
  }
  ASSERT_NE(c, nullptr);
  const std::vector<int> ids = vt::NodeIds(c);
  const int f = vt::LastWithPeers(ids), peer = NodePeerOf(ids, f);
  if (f < 0) {
    ASSERT_VMM_OK(vmmipc_comm_destroy(c));
    GTEST_SKIP() << "no rank has a node peer";
  }
  const std::string how = std::string(k.hook) + " (occurrence " + std::to_string(k.nth) + ") in " + k.op;
  vmmipc_buf_t b = vt::PatternBuf(1, 900 + me);
  {
    vt::Baseline base;
    MPI_Barrier(MPI_COMM_WORLD);
    if (me == f) vmmipc__test_fail_at(k.hook, k.nth);
    const auto t0 = std::chrono::steady_clock::now();
    const vmmipc_result_t r = RunCall(c, k.call, f, peer, b);
    const double s = vt::Since(t0);
    const bool fired = !vmmipc__test_fail_pending();
    vmmipc__test_fail_at(nullptr, 0);
    if (me == f) {
      EXPECT_TRUE(fired) << how << ": the hook was not reached";
    }
    const std::string msg = vt::ExpectVerdict(r, VMMIPC_ERR_NO_MEMORY, f, k.op, how);
    EXPECT_LT(s, 5.0) << how << ": rank " << me << " waited for rank " << f << ": " << msg;
    base.Expect(how.c_str());
  }
  WindowGoesOn(c, ids, b, 900, how);  // the comm goes on
  vmmipc_buf_t got = nullptr;  // and a rooted call (the comm's roles tables) from f's node peer
  ASSERT_VMM_OK(vmmipc_bcast_map(c, me == peer ? b : nullptr, peer, nullptr, &got));
  if (ids[me] == ids[peer] && me != peer) {
    ASSERT_NE(got, nullptr);
    void *p = nullptr;
    size_t sz = 0;
    ASSERT_VMM_OK(vmmipc_buf_ptr(got, &p, &sz));
    EXPECT_TRUE(vt::CheckPattern(p, sz, 900 + peer)) << how << ": rank " << peer << "'s broadcast after the failure";
  }
  if (got) vmmipc_buf_free(got);
  vmmipc_buf_free(b);
  ASSERT_VMM_OK(vmmipc_comm_destroy(c));
}

// Two ranks of one node (f and its node peer) lack their tables in the
// same call: every rank fails NO_MEMORY within the bound, all naming the
// same one of the two, nothing is left behind, and the comm goes on.
TEST(FaultsTablesTwo, TwoRanksWithoutTheirTablesGiveOneVerdict) {
  ASSERT_GE(vt::UseRankDevice(), 0);
  const int me = vt::Rank();
  vmmipc_comm_t c = vt::CountedComm(kTimeoutMs);
  ASSERT_NE(c, nullptr);
  const std::vector<int> ids = vt::NodeIds(c);
  const int f = vt::LastWithPeers(ids), peer = NodePeerOf(ids, f);
  if (f < 0) {
    ASSERT_VMM_OK(vmmipc_comm_destroy(c));
    GTEST_SKIP() << "no rank has a node peer";
  }
  vmmipc_buf_t b = vt::PatternBuf(1, 960 + me);
  for (const char *hook : {"coll_tables", "round_tables", "map_tables"}) {
    vt::Baseline base;
    MPI_Barrier(MPI_COMM_WORLD);
    if (me == f || me == peer) vmmipc__test_fail_at(hook, 1);
    const auto t0 = std::chrono::steady_clock::now();
    vmmipc_win_t w = nullptr;
    const vmmipc_result_t r = vmmipc_allgather_map(c, b, nullptr, &w);
    const double s = vt::Since(t0);
    const bool fired = !vmmipc__test_fail_pending();
    vmmipc__test_fail_at(nullptr, 0);
    if (me == f || me == peer) {
      EXPECT_TRUE(fired) << hook << ": the hook was not reached on rank " << me;
    }
    vmmipc_error_info_t info = VMMIPC_ERROR_INFO_INIT;
    EXPECT_EQ(vmmipc_last_error_info(&info), VMMIPC_SUCCESS);
    const std::string at = std::string(hook) + ": " + info.message;
    EXPECT_EQ(r, VMMIPC_ERR_NO_MEMORY) << at;
    EXPECT_EQ(w, nullptr) << at;
    if (w) vmmipc_win_free(w);
    EXPECT_TRUE(info.rank == f || info.rank == peer) << at;
    int lo = 0, hi = 0;  // the same rank named everywhere
    MPI_Allreduce(&info.rank, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&info.rank, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    EXPECT_EQ(lo, hi) << at;
    EXPECT_LT(s, 5.0) << at;
    base.Expect(hook);
  }
  WindowGoesOn(c, ids, b, 960, "after two ranks' failures");  // the comm goes on
  vmmipc_buf_free(b);
  ASSERT_VMM_OK(vmmipc_comm_destroy(c));
}

// A rank that failed already (a bad argument) and then lacks the tables of
// the collective's rounds keeps its own failure: every rank reports the
// argument error, naming it, not the tables it never needed. Before, the
// code stayed INVALID_ARG while the message (and so the verdict's text)
// became the tables'.
TEST(FaultsTablesTwo, AnArgumentErrorOutlivesTheTablesItsRankLacksThen) {
  ASSERT_GE(vt::UseRankDevice(), 0);
  const int me = vt::Rank();
  vmmipc_comm_t c = vt::CountedComm(kTimeoutMs);
  ASSERT_NE(c, nullptr);
  const std::vector<int> ids = vt::NodeIds(c);
  const int f = vt::LastWithPeers(ids);
  if (f < 0) {
    ASSERT_VMM_OK(vmmipc_comm_destroy(c));
    GTEST_SKIP() << "no rank has a node peer";
  }
  vmmipc_buf_t b = vt::PatternBuf(1, 970 + me);
  for (const char *hook : {"round_tables", "map_tables"}) {
    vt::Baseline base;
    MPI_Barrier(MPI_COMM_WORLD);
    if (me == f) vmmipc__test_fail_at(hook, 1);
    vmmipc_result_t r;
    std::vector<vmmipc_desc_t> descs(static_cast<size_t>(vt::Size()), nullptr);
    vmmipc_win_t w = nullptr;
    if (std::string(hook) == "round_tables") {
      r = vmmipc_allgather_desc(c, nullptr, me == f ? nullptr : descs.data());
    } else {
      r = vmmipc_allgather_map(c, b, nullptr, me == f ? nullptr : &w);
    }
    const bool fired = !vmmipc__test_fail_pending();
    vmmipc__test_fail_at(nullptr, 0);
    if (me == f) {
      EXPECT_TRUE(fired) << hook << ": the hook was not reached";
    }
    vmmipc_error_info_t info = VMMIPC_ERROR_INFO_INIT;
    EXPECT_EQ(vmmipc_last_error_info(&info), VMMIPC_SUCCESS);
    const std::string msg = info.message;
    EXPECT_EQ(r, VMMIPC_ERR_INVALID_ARG) << hook << ": " << msg;
    EXPECT_EQ(info.rank, f) << hook << ": " << msg;
    EXPECT_NE(msg.find("is NULL"), std::string::npos) << hook << ": " << msg;
    EXPECT_EQ(msg.find("notices"), std::string::npos) << hook << ": " << msg;
    EXPECT_EQ(msg.find("tables"), std::string::npos) << hook << ": " << msg;
    EXPECT_EQ(w, nullptr);
    if (w) vmmipc_win_free(w);
    for (auto d : descs) vmmipc_desc_free(d);
    base.Expect(hook);
  }
  WindowGoesOn(c, ids, b, 970, "after the argument errors");
  vmmipc_buf_free(b);
  ASSERT_VMM_OK(vmmipc_comm_destroy(c));
}

// "CollTables_AllgatherMap": the hook in CamelCase, then the call.
std::string CaseName(const ::testing::TestParamInfo<Case> &i) {
  static const char *const names[] = {"FirstWindow", "AllgatherMap", "AllgatherDesc",
                                      "ScatterDesc", "BcastMap",     "ScatterMap"};
  std::string out;
  bool up = true;
  for (const char *h = i.param.hook; *h; h++) {
    if (*h == '_') {
      up = true;
      continue;
    }
    out += up ? static_cast<char>(*h - 'a' + 'A') : *h;
    up = false;
  }
  out += std::string("_") + names[static_cast<int>(i.param.call)];
  return i.param.nth > 1 ? out + "_" + std::to_string(i.param.nth) : out;
}

INSTANTIATE_TEST_SUITE_P(
    Hooks, FaultsTables,
    ::testing::Values(Case{"coll_tables", Call::kFirstWindow, "vmmipc_allgather_map"},
                      Case{"coll_tables", Call::kAllgatherMap, "vmmipc_allgather_map"},
                      Case{"coll_tables", Call::kAllgatherDesc, "vmmipc_allgather_desc"},
                      Case{"coll_tables", Call::kScatterDesc, "vmmipc_scatter_desc"},
                      Case{"coll_tables", Call::kBcastMap, "vmmipc_bcast_map"},
                      Case{"coll_tables", Call::kScatterMap, "vmmipc_scatter_map"},
                      Case{"round_tables", Call::kAllgatherDesc, "vmmipc_allgather_desc"},
                      Case{"round_tables", Call::kAllgatherMap, "vmmipc_allgather_map"},
                      Case{"map_tables", Call::kAllgatherMap, "vmmipc_allgather_map"},
                      Case{"map_tables", Call::kBcastMap, "vmmipc_bcast_map"},
                      Case{"round_tables", Call::kAllgatherMap, "vmmipc_allgather_map", 2},  // the map's second round
                      Case{"round_tables", Call::kScatterMap, "vmmipc_scatter_map"}),
    CaseName);

}  // namespace
