// Deferred frees and pins (issue 31): vmmipc_win_release and
// vmmipc_heap_release give an object up locally, from any thread; it is
// freed in step on every rank at the first collective that starts after
// every rank released it. Pins make vmmipc_win_free refuse on every rank.
// Every check is on counts (open windows, released, freed), result codes,
// the rank a message names, data, and fds.
#include <mpi.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "comm/comm.h"
#include "common/testhooks.h"
#include "harness/bufs.h"

namespace {

using vt::Has;
using vt::kGran;

vmmipc_comm_stats_t Stats(vmmipc_comm_t c) {
  vmmipc_comm_stats_t st = VMMIPC_COMM_STATS_INIT;
  EXPECT_VMM_OK(vmmipc_comm_stats(c, &st));
  return st;
}

// The same value on every rank (collective).
bool Everywhere(int v) {
  int lo = 0, hi = 0;
  MPI_Allreduce(&v, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&v, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return lo == hi;
}

class Release : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_GE(vt::UseRankDevice(), 0); }
  // Two collective calls (a scratch window made and freed): each carries
  // the released sets.
  static void Collective(vmmipc_comm_t c) {
    vmmipc_win_t w = nullptr;
    ASSERT_VMM_OK(vmmipc_allgather_map(c, nullptr, nullptr, &w));
    ASSERT_VMM_OK(vmmipc_win_free(w));
  }
  // A window of a pattern buffer per rank; every node peer's bytes checked.
  static vmmipc_win_t Mapped(vmmipc_comm_t c, vmmipc_buf_t b, unsigned seed) {
    vmmipc_win_t w = nullptr;
    EXPECT_VMM_OK(vmmipc_allgather_map(c, b, nullptr, &w));
    for (int q = 0; w && q < vt::Size(); q++) {
      if (!vt::SameNode(c, q)) continue;
      void *p = nullptr;
      size_t sz = 0;
      EXPECT_VMM_OK(vmmipc_win_query(w, q, &p, &sz));
      EXPECT_TRUE(vt::CheckPattern(p, sz, seed + static_cast<unsigned>(q))) << "rank " << q;
    }
    return w;
  }
};

// Rank r releases the window just before its r-th collective: it stays
// open (its buffer still exposed) until the collective that starts after
// the last rank released it, and goes in that one on every rank.
TEST_F(Release, ReleasedAtDifferentTimesIsFreedInStepOnce) {
  int before = vt::FdCount();
  vmmipc_comm_t c = vt::CountedComm(20000);
  ASSERT_NE(c, nullptr);
  int me = vt::Rank(), n = vt::Size();
  vmmipc_buf_t b = vt::PatternBuf(1, 10 + me);
  vmmipc_win_t w = Mapped(c, b, 10);
  ASSERT_NE(w, nullptr);
  int open0 = Stats(c).open_windows;
  for (int call = 0; call < n; call++) {
    if (call == me) ASSERT_VMM_OK(vmmipc_win_release(w));
    Collective(c);
    vmmipc_comm_stats_t st = Stats(c);
    int gone = call == n - 1;
    EXPECT_EQ(st.open_windows, open0 - gone) << "after collective " << call;
    EXPECT_EQ(st.released_freed, static_cast<uint64_t>(gone)) << "after collective " << call;
    EXPECT_EQ(st.released, call >= me && !gone ? 1 : 0) << "after collective " << call;
    EXPECT_TRUE(Everywhere(st.open_windows)) << "the window went on some ranks only, after collective " << call;
    // The buffer stays exposed exactly while the window is open.
    if (!gone) {
      EXPECT_EQ(vmmipc_buf_free(b), VMMIPC_ERR_BUSY);
    }
  }
  EXPECT_VMM_OK(vmmipc_buf_free(b));
  vt::DestroyInStep(c, before);
}

// Every rank releases the window from another thread while its main
// thread is inside a collective on the comm (blocked until rank 0, which
// comes last, enters): the release does not disturb that call, and the
// window goes at the end of it, in step.
TEST_F(Release, ReleaseFromAnotherThreadWhileTheCommIsBusy) {
  int provided = 0;
  MPI_Query_thread(&provided);
  if (provided < MPI_THREAD_MULTIPLE) GTEST_SKIP() << "MPI does not provide MPI_THREAD_MULTIPLE";
  if (vt::Size() < 2) GTEST_SKIP() << "needs two ranks";
  int before = vt::FdCount();
  vmmipc_comm_t c = vt::CountedComm(20000);
  ASSERT_NE(c, nullptr);
  int me = vt::Rank();
  vmmipc_buf_t b = vt::PatternBuf(2, 20 + me);
  vmmipc_win_t w = Mapped(c, b, 20);
  ASSERT_NE(w, nullptr);
  int open0 = Stats(c).open_windows;
  vmmipc_result_t rrc = VMMIPC_ERR_PEER;
  std::thread t;
  if (me != 0) {
    t = std::thread([&] {
      while (!__atomic_load_n(&c->busy, __ATOMIC_ACQUIRE)) std::this_thread::yield();
      rrc = vmmipc_win_release(w);  // while the main thread is inside the collective
      int token = 1;
      MPI_Send(&token, 1, MPI_INT, 0, 91, MPI_COMM_WORLD);
    });
  } else {
    for (int q = 1; q < vt::Size(); q++) {
      int token = 0;
      MPI_Recv(&token, 1, MPI_INT, q, 91, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
    rrc = vmmipc_win_release(w);
  }
  vmmipc_buf_t other = vt::PatternBuf(1, 30 + me);
  vmmipc_win_t w2 = Mapped(c, other, 30);  // the busy call: its data is checked inside
  if (t.joinable()) t.join();
  EXPECT_VMM_OK(rrc);
  // On one node every release came before the busy call's agreement (rank
  // 0 entered last), so w went at its end; a rank of another node may
  // reach its agreement first, and w goes with the next call instead:
  // either way on every rank alike.
  vmmipc_comm_stats_t st = Stats(c);
  EXPECT_TRUE(Everywhere(st.open_windows)) << "w went on some ranks only";
  if (st.open_windows != open0) Collective(c);
  st = Stats(c);
  EXPECT_EQ(st.open_windows, open0) << "w went (-1) and w2 came (+1)";
  EXPECT_EQ(st.released_freed, 1u);
  EXPECT_EQ(st.released, 0);
  EXPECT_VMM_OK(vmmipc_buf_free(b));  // w no longer exposes it
  ASSERT_VMM_OK(vmmipc_win_free(w2));
  EXPECT_VMM_OK(vmmipc_buf_free(other));
  vt::DestroyInStep(c, before);
}

// A window pinned on one rank: vmmipc_win_free is BUSY on every rank,
// naming that rank and its pins, and the window stays open everywhere with
// its data; a released window that is pinned waits for its last unpin.
TEST_F(Release, PinsRefuseOnEveryRank) {
  if (vt::Size() < 2) GTEST_SKIP() << "needs two ranks";
  int before = vt::FdCount();
  vmmipc_comm_t c = vt::CountedComm(20000);
  ASSERT_NE(c, nullptr);
  int me = vt::Rank(), pinner = vt::Size() - 1;
  vmmipc_buf_t b = vt::PatternBuf(1, 40 + me);
  vmmipc_win_t w = Mapped(c, b, 40);
  ASSERT_NE(w, nullptr);
  if (me == pinner) {
    ASSERT_VMM_OK(vmmipc_win_pin(w));
    ASSERT_VMM_OK(vmmipc_win_pin(w));
  }
  vmmipc_result_t r = vmmipc_win_free(w);
  std::string msg = vmmipc_last_error();
  EXPECT_EQ(r, VMMIPC_ERR_BUSY) << msg;
  EXPECT_TRUE(vt::SameEverywhere(r)) << msg;
  EXPECT_TRUE(Has(msg, "pinned 2 time(s) on rank " + std::to_string(pinner))) << msg;
  vmmipc_error_info_t info = VMMIPC_ERROR_INFO_INIT;
  ASSERT_VMM_OK(vmmipc_last_error_info(&info));
  EXPECT_EQ(info.rank, pinner);
  EXPECT_EQ(Stats(c).broken, 0);
  for (int q = 0; q < vt::Size(); q++) {  // still open, with its data, on every rank
    if (!vt::SameNode(c, q)) continue;
    void *p = nullptr;
    size_t sz = 0;
    ASSERT_VMM_OK(vmmipc_win_query(w, q, &p, &sz));
    EXPECT_TRUE(vt::CheckPattern(p, sz, 40 + static_cast<unsigned>(q))) << "rank " << q;
  }
  // Released everywhere while still pinned once: it stays.
  if (me == pinner) ASSERT_VMM_OK(vmmipc_win_unpin(w));
  int open0 = Stats(c).open_windows;
  ASSERT_VMM_OK(vmmipc_win_release(w));
  Collective(c);
  EXPECT_EQ(Stats(c).open_windows, open0) << "a pinned window went";
  EXPECT_EQ(Stats(c).released, 1);
  if (me == pinner) ASSERT_VMM_OK(vmmipc_win_unpin(w));  // the last pin: its view is gone
  Collective(c);
  EXPECT_EQ(Stats(c).open_windows, open0 - 1);
  EXPECT_EQ(Stats(c).released, 0);
  EXPECT_VMM_OK(vmmipc_buf_free(b));
  vmmipc_win_t x = nullptr;
  ASSERT_VMM_OK(vmmipc_allgather_map(c, nullptr, nullptr, &x));
  EXPECT_EQ(vmmipc_win_unpin(x), VMMIPC_ERR_INVALID_ARG) << "not pinned";
  EXPECT_EQ(vmmipc_win_pin(nullptr), VMMIPC_ERR_INVALID_ARG);
  EXPECT_EQ(vmmipc_win_release(nullptr), VMMIPC_ERR_INVALID_ARG);
  ASSERT_VMM_OK(vmmipc_win_free(x));
  vt::DestroyInStep(c, before);
}

// A heap released with windows: it waits until its windows are gone (one
// freed, one released by every rank at different times), then goes; the
// comm is then destroyed with nothing left behind.
TEST_F(Release, AReleasedHeapGoesAfterItsWindows) {
  vt::Baseline base;
  vmmipc_comm_t c = vt::CountedComm(20000);
  ASSERT_NE(c, nullptr);
  int me = vt::Rank(), last = vt::Size() - 1;
  vmmipc_heap_config_t hc = VMMIPC_HEAP_CONFIG_INIT;
  hc.grow = kGran;
  hc.reserve = 8 * kGran;
  vmmipc_heap_t h = nullptr;
  ASSERT_VMM_OK(vmmipc_heap_create(c, &hc, &h));
  vmmipc_win_t w1 = nullptr, w2 = nullptr;
  ASSERT_VMM_OK(vmmipc_heap_alloc(h, 4096, &w1));
  ASSERT_VMM_OK(vmmipc_heap_alloc(h, 8192, &w2));
  ASSERT_VMM_OK(vmmipc_heap_release(h));
  ASSERT_VMM_OK(vmmipc_win_release(w1));
  Collective(c);
  EXPECT_EQ(Stats(c).released, 1) << "w1 went; the heap waits for w2";
  EXPECT_EQ(vmmipc_comm_destroy(c), VMMIPC_ERR_BUSY) << "w2 is open and not released";
  EXPECT_TRUE(Has(vmmipc_last_error(), "window(s)")) << vmmipc_last_error();
  if (me != last) ASSERT_VMM_OK(vmmipc_win_release(w2));
  Collective(c);
  EXPECT_EQ(Stats(c).released, me != last ? 2 : 1) << "released on some ranks only: nothing goes";
  if (me == last) ASSERT_VMM_OK(vmmipc_win_release(w2));
  vmmipc_win_t x = nullptr;
  ASSERT_VMM_OK(vmmipc_allgather_map(c, nullptr, nullptr, &x));  // w2 goes at its end
  EXPECT_EQ(Stats(c).released, 1);
  ASSERT_VMM_OK(vmmipc_win_free(x));  // then the heap, its windows gone
  EXPECT_EQ(Stats(c).released, 0);
  EXPECT_EQ(Stats(c).released_freed, 3u);
  MPI_Barrier(MPI_COMM_WORLD);
  ASSERT_VMM_OK(vmmipc_comm_destroy(c));
  base.Expect("after the heap went");
  MPI_Barrier(MPI_COMM_WORLD);
}

// More released windows than one agreement carries, released in different
// orders on different ranks, go with vmmipc_comm_destroy's rounds; one
// released on some ranks only makes it BUSY on every rank first. And one
// window every rank released among many that one rank alone released is
// found (no starvation behind the 32 an outcome carries).
TEST_F(Release, CommDestroyFreesWhatEveryRankReleased) {
  vt::Baseline base;
  vmmipc_comm_t c = vt::CountedComm(20000);
  ASSERT_NE(c, nullptr);
  int me = vt::Rank();
  const int kWins = 70;
  std::vector<vmmipc_win_t> w(kWins, nullptr);
  for (auto &x : w) ASSERT_VMM_OK(vmmipc_allgather_map(c, nullptr, nullptr, &x));
  // Rank 0 releases all but the last; the others only the last one: that
  // one is released everywhere, and must go although rank 0 names 69
  // others first.
  if (me == 0) {
    for (int i = 0; i < kWins - 1; i++) ASSERT_VMM_OK(vmmipc_win_release(w[i]));
  }
  ASSERT_VMM_OK(vmmipc_win_release(w[kWins - 1]));
  if (vt::Size() == 1) {  // every window is released everywhere: they go, 32 per agreement
    for (int k = 0; k < 2; k++) Collective(c);
    EXPECT_EQ(Stats(c).released_freed, static_cast<uint64_t>(kWins));
    ASSERT_VMM_OK(vmmipc_comm_destroy(c));
    base.Expect("after the comm went");
    return;
  }
  for (int k = 0; k < 4 && Stats(c).released_freed == 0; k++) Collective(c);
  EXPECT_EQ(Stats(c).released_freed, 1u) << "the window every rank released was not found";
  EXPECT_TRUE(Everywhere(static_cast<int>(Stats(c).released_freed)));
  vmmipc_result_t r = vmmipc_comm_destroy(c);
  if (vt::Size() > 1) {
    EXPECT_EQ(r, VMMIPC_ERR_BUSY) << vmmipc_last_error();
    EXPECT_TRUE(vt::SameEverywhere(r));
    // The others release the rest, in the reverse order.
    if (me != 0) {
      for (int i = kWins - 2; i >= 0; i--) ASSERT_VMM_OK(vmmipc_win_release(w[i]));
    }
    MPI_Barrier(MPI_COMM_WORLD);
    r = vmmipc_comm_destroy(c);
  }
  EXPECT_VMM_OK(r);
  base.Expect("after the comm went with its released windows");
  MPI_Barrier(MPI_COMM_WORLD);
}

// A rank without host memory for the ids an agreement may free (hook
// "due_room", on the last rank) frees none of them, and neither does any
// other rank: the window stays released and open on every rank, and goes
// at the next collective (here the destroy's). One agreement (allgather_desc),
// so that no later one frees it within the call.
TEST_F(Release, NoRoomForTheFreedIdsFreesNothingAnywhere) {
  if (vt::Size() < 2) GTEST_SKIP() << "needs two ranks";
  int before = vt::FdCount();
  vmmipc_comm_t c = vt::CountedComm(20000);
  ASSERT_NE(c, nullptr);
  int me = vt::Rank(), n = vt::Size();
  vmmipc_buf_t b = vt::PatternBuf(1, 60 + me);
  vmmipc_win_t w = Mapped(c, b, 60);
  ASSERT_NE(w, nullptr);
  const int open0 = Stats(c).open_windows;
  ASSERT_VMM_OK(vmmipc_win_release(w));
  if (me == n - 1) vmmipc__test_fail_at("due_room", 1);
  std::vector<vmmipc_desc_t> descs(static_cast<size_t>(n), nullptr);
  EXPECT_VMM_OK(vmmipc_allgather_desc(c, nullptr, descs.data()));
  vmmipc__test_fail_at(nullptr, 0);
  vmmipc_comm_stats_t st = Stats(c);
  EXPECT_TRUE(Everywhere(st.open_windows)) << "the window went on some ranks only: " << st.open_windows << " open here";
  EXPECT_TRUE(Everywhere(st.released)) << st.released << " released here";
  EXPECT_TRUE(Everywhere(static_cast<int>(st.released_freed))) << st.released_freed << " freed here";
  EXPECT_EQ(st.open_windows, open0);
  EXPECT_EQ(st.released, 1);
  MPI_Barrier(MPI_COMM_WORLD);
  vmmipc_result_t r = vmmipc_comm_destroy(c);  // its drain frees the window everywhere
  EXPECT_EQ(r, VMMIPC_SUCCESS) << vmmipc_last_error();
  EXPECT_TRUE(Everywhere(r));
  EXPECT_VMM_OK(vmmipc_buf_free(b));
  EXPECT_EQ(vt::FdCount(), before);
  MPI_Barrier(MPI_COMM_WORLD);
}

// On a broken comm, released windows go locally: at the next call on the
// comm, or at vmmipc_comm_destroy.
TEST_F(Release, OnABrokenCommReleasedWindowsGoLocally) {
  if (vt::Size() < 2) GTEST_SKIP() << "needs two ranks";
  int before = vt::FdCount();
  vmmipc_comm_t c = vt::CountedComm(1000);
  ASSERT_NE(c, nullptr);
  vmmipc_buf_t b = vt::PatternBuf(1, 50 + vt::Rank());
  vmmipc_win_t w = Mapped(c, b, 50);
  ASSERT_NE(w, nullptr);
  ASSERT_VMM_OK(vmmipc_comm_abort(c));
  ASSERT_VMM_OK(vmmipc_win_release(w));
  EXPECT_EQ(vmmipc_buf_free(b), VMMIPC_ERR_BUSY);
  MPI_Barrier(MPI_COMM_WORLD);
  EXPECT_VMM_OK(vmmipc_comm_destroy(c));  // local: frees the released window first
  EXPECT_VMM_OK(vmmipc_buf_free(b));
  EXPECT_EQ(vt::FdCount(), before);
  MPI_Barrier(MPI_COMM_WORLD);
}

}  // namespace
