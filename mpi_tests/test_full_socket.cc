// A root whose sockets are full for a while (EAGAIN): the collective waits
// for them and succeeds with the data, and nothing overruns the exchange's
// poll set (found by test_chaos: a bcast_map root with two node peers wrote
// past it once its sends had to wait, seed 2027 on layout 0,1,0,0,1). This
// program defines sendmsg, which the library (linked in statically) calls,
// to report EAGAIN for 150 ms on this thread's writes of descriptors.
#include <dlfcn.h>
#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <chrono>

#include "harness/bufs.h"

namespace {

std::atomic<bool> g_full{false};
thread_local bool t_armed = false;
std::chrono::steady_clock::time_point g_until;

// The library's mesh is of Unix sockets; only this thread's writes inside
// the armed call come here, and MPI's shared-memory transport writes none.
bool UnixSocket(int fd) {
  int domain = 0;
  socklen_t len = sizeof domain;
  return getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) == 0 && domain == AF_UNIX;
}

}  // namespace

extern "C" ssize_t sendmsg(int fd, const struct msghdr *m, int flags) {
  using Fn = ssize_t (*)(int, const struct msghdr *, int);
  static Fn real = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, "sendmsg"));
  // Full for the frames that carry fds (the descriptors, the collective's
  // second round, where the root only sends), from the first one on.
  if (t_armed && g_full.load() && m && m->msg_controllen && UnixSocket(fd)) {
    auto now = std::chrono::steady_clock::now();
    if (g_until == std::chrono::steady_clock::time_point()) g_until = now + std::chrono::milliseconds(150);
    if (now < g_until) {
      errno = EAGAIN;
      return -1;
    }
  }
  return real(fd, m, flags);
}

namespace {

class FullSocket : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_GE(vt::UseRankDevice(), 0); }
};

// The root sends to two or more node peers and its sockets report full for
// 150 ms (well within the 10 s timeout): every rank succeeds, every node
// peer reads the root's bytes, and nothing is left behind.
TEST_F(FullSocket, ARootWhoseSocketsAreFullWaitsAndSucceeds) {
  vmmipc_comm_t c = vt::CountedComm(10000);
  ASSERT_NE(c, nullptr);
  int peers = 0, most = 0;  // rank 0's node peers, known everywhere
  for (int r = 1; r < vt::Size(); r++) peers += vt::Rank() == 0 && vt::SameNode(c, r);
  MPI_Allreduce(&peers, &most, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (most < 2) {
    ASSERT_VMM_OK(vmmipc_comm_destroy(c));
    GTEST_SKIP() << "needs a root with two node peers";
  }
  vt::Baseline base;
  const int me = vt::Rank();
  for (int round = 0; round < 3; round++) {
    vmmipc_buf_t b = me == 0 ? vt::PatternBuf(1, 50 + round) : nullptr;
    vmmipc_buf_t got = nullptr;
    if (me == 0) {
      g_until = std::chrono::steady_clock::time_point();
      g_full = true;
      t_armed = true;
    }
    vmmipc_result_t r = vmmipc_bcast_map(c, b, 0, nullptr, &got);
    t_armed = false;
    g_full = false;
    EXPECT_VMM_OK(r);
    EXPECT_TRUE(vt::SameEverywhere(r));
    if (me != 0 && vt::SameNode(c, 0)) {
      ASSERT_NE(got, nullptr);
      void *p = nullptr;
      size_t n = 0;
      ASSERT_VMM_OK(vmmipc_buf_ptr(got, &p, &n));
      EXPECT_TRUE(vt::CheckPattern(p, n, 50 + round)) << "round " << round;
    }
    EXPECT_VMM_OK(vmmipc_buf_free(got));
    EXPECT_VMM_OK(vmmipc_buf_free(b));
  }
  base.Expect("after the full sockets");
  ASSERT_VMM_OK(vmmipc_comm_destroy(c));
}

}  // namespace
