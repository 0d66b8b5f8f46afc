// Faults, armed on the rank the plan names just before its call and
// disarmed after it, so that each fires inside that call or not at all
// (Finish says which):
// - the library's test hooks (src/common/testhooks.h): an injected driver
//   or OS failure ("export", "import", ...), a rank asleep in its exchange
//   ("late"), a collector late into or stalled in the agreement
//   ("agree_late", "verdict"), a rank that never enters the agreement
//   ("agree"), one that withdraws while the verdict is on its way
//   ("withdraw"); the hooks are per thread and count occurrences;
// - socket writes: this program defines sendmsg, which the library (linked
//   in statically) calls; armed on this thread and for the comm's own
//   sockets only, it fails one write (ENOBUFS), stalls it, or reports the
//   socket full (EAGAIN) for 150 ms;
// - a rank that leaves early: its connections are shut down (both ways),
//   inside the call where the call has an exchange, else just before it;
// - vmmipc_comm_abort from another thread while the call is inside
//   (inside the exchange, or once the call holds the comm, or, for host
//   waits and comm_destroy, after a quarter of the timeout);
// - SIGKILL from a thread of the victim, at a random time in the step.
#include <dlfcn.h>
#include <signal.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <thread>

#include "comm/comm.h"
#include "common/testhooks.h"
#include "test_chaos.h"

namespace chaos {
namespace {

// ---- the socket fault ----
std::atomic<int> g_mode{kSockOff};
std::atomic<int> g_fired{0};
int g_nth = 1, g_seen = 0, g_stall_ms = 0;
std::vector<int> g_fds;  // written only while disarmed
std::chrono::steady_clock::time_point g_full_until;
thread_local bool t_armed = false;

bool Ours(int fd) { return std::binary_search(g_fds.begin(), g_fds.end(), fd); }

void SleepMs(int ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

// Whether the hook armed as (step, nth) fired: asks it as many times as it
// could still be pending; a pending one answers "fail" exactly once.
bool HookFired(const char *step, int nth) {
  bool pending = false;
  for (int i = 0; i < nth; i++) pending = vmmipc__test_should_fail(step) || pending;
  vmmipc__test_fail_at(nullptr, 0);
  return !pending;
}

thread_local FaultScope *t_scope = nullptr;
thread_local std::vector<int> t_sockets;
thread_local vmmipc_comm_t t_comm = nullptr;
thread_local std::atomic<int> *t_fired = nullptr;

void ShutSockets(const std::vector<int> &fds) {
  for (int fd : fds) shutdown(fd, SHUT_RDWR);
}

// Inside the call (test hook): the connections go, as when a rank leaves.
void LeaveInside(void *) {
  ShutSockets(t_sockets);
  if (t_fired && !t_sockets.empty()) t_fired->store(1);
}

// Inside the call: another thread aborts the comm, then this one goes on.
void AbortInside(void *) {
  vmmipc_comm_t c = t_comm;
  std::thread t([c] { vmmipc_comm_abort(c); });
  t.join();
  if (t_fired) t_fired->store(1);
}

bool HasExchange(int op) { return op == kAllgatherMap || op == kBcastMap || op == kScatterMap || op == kWrap; }

}  // namespace

void SockArm(int mode, int nth, int stall_ms, const std::vector<int> &fds) {
  g_fds = fds;
  std::sort(g_fds.begin(), g_fds.end());
  g_nth = nth;
  g_seen = 0;
  g_stall_ms = stall_ms;
  g_fired = 0;
  g_mode = mode;
  t_armed = true;
}

bool SockDisarm() {
  t_armed = false;
  g_mode = kSockOff;
  return g_fired.load() != 0;
}

void ArmKill(int delay_ms) {
  std::thread([delay_ms] {
    SleepMs(delay_ms);
    kill(getpid(), SIGKILL);
  }).detach();
}

struct FaultScope::Helper {
  std::thread t;
  std::atomic<int> done{0}, fired{0};
};

FaultScope::FaultScope(const Step &st, const Options &o, vmmipc_comm_t c, const std::vector<int> &sockets,
                       bool inside_call)
    : st_(st), o_(o), c_(c), sockets_(sockets) {
  int me = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  armed_ = st.fault != kNone && st.fault != kKill && st.target == me;
  inside_ = inside_call && HasExchange(st.op);
  if (!armed_) return;
  helper_ = new Helper;
  t_scope = this;
  t_sockets = sockets_;
  t_comm = c_;
  t_fired = &helper_->fired;
  switch (st.fault) {
    case kDriver:
      vmmipc__test_fail_at(st.hook.c_str(), st.nth);
      break;
    case kLate:
      own_delay_s_ = st.delay_ms / 1000.0;
      if (st.how == 0) vmmipc__test_fail_at("late", 1);
      break;
    case kCollectorLate:
      own_delay_s_ = o.timeout_ms * 1.5 / 1000.0;
      vmmipc__test_fail_at(st.how == 0 ? "agree_late" : "verdict", 1);
      break;
    case kSilent:
      vmmipc__test_fail_at("agree", 1);
      break;
    case kWithdraw:
      vmmipc__test_fail_at("withdraw", 1);
      break;
    case kSockFail:
    case kSockStall:
    case kSockFull:
      if (st.fault == kSockStall) own_delay_s_ = st.delay_ms / 1000.0;
      if (st.fault == kSockFull) own_delay_s_ = 0.15;
      SockArm(st.fault == kSockFail ? kSockModeFail : st.fault == kSockStall ? kSockModeStall : kSockModeFull, st.nth,
              st.delay_ms, sockets_);
      break;
    case kLeave:
      if (inside_) vmmipc__test_on_inside(LeaveInside, nullptr);
      break;
    case kAbort:
      if (inside_) {
        vmmipc__test_on_inside(AbortInside, nullptr);
      } else if (st.op == kWaitHost || st.op == kCommDestroy) {
        // A host wait holds nothing; a destroy frees the comm as it returns,
        // so nothing may look at it then: a quarter of the timeout into the
        // call, which a late rank (Step::late2) holds that long.
        Helper *h = helper_;
        int ms = st.delay_ms;
        h->t = std::thread([h, c, ms] {
          SleepMs(ms);  // the wait it ends is bounded either way: the result is defined whenever this lands
          vmmipc_comm_abort(c);
          h->fired = 1;
        });
      } else {
        // Once the call holds the comm (its busy flag), never before.
        Helper *h = helper_;
        h->t = std::thread([h, c] {
          while (!__atomic_load_n(&c->busy, __ATOMIC_ACQUIRE))
            if (h->done.load()) return;
          vmmipc_comm_abort(c);
          h->fired = 1;
        });
      }
      break;
    default:
      break;
  }
}

void FaultScope::Before() {
  int me = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  if (st_.late2 == me) SleepMs(o_.timeout_ms * 3 / 2);
  if (!armed_) return;
  if (st_.fault == kLate && st_.how == 1) {
    SleepMs(st_.delay_ms);
    helper_->fired = 1;
  }
  if (st_.fault == kLeave && !inside_) {
    ShutSockets(sockets_);
    helper_->fired = !sockets_.empty();  // a rank alone on its node has no connection to drop
  }
}

bool FaultScope::Finish() {
  if (!armed_ || finished_) return fired_;
  finished_ = true;
  switch (st_.fault) {
    case kDriver:
      fired_ = HookFired(st_.hook.c_str(), st_.nth);
      break;
    case kLate:
      fired_ = st_.how == 0 ? HookFired("late", 1) : true;
      break;
    case kCollectorLate:
      fired_ = HookFired(st_.how == 0 ? "agree_late" : "verdict", 1);
      break;
    case kSilent:
      fired_ = HookFired("agree", 1);
      break;
    case kWithdraw:
      fired_ = HookFired("withdraw", 1);
      break;
    case kSockFail:
    case kSockStall:
    case kSockFull:
      fired_ = SockDisarm();
      break;
    default:
      helper_->done = 1;
      if (helper_->t.joinable()) helper_->t.join();
      vmmipc__test_on_inside(nullptr, nullptr);
      fired_ = helper_->fired.load() != 0;
      break;
  }
  return fired_;
}

FaultScope::~FaultScope() {
  Finish();
  if (t_scope == this) {
    t_scope = nullptr;
    t_fired = nullptr;
    t_comm = nullptr;
    t_sockets.clear();
  }
  delete helper_;
}

}  // namespace chaos

// The library's socket writes (one sendmsg per record, src/transport/conn.c)
// come here first, as this executable defines the symbol.
extern "C" ssize_t sendmsg(int fd, const struct msghdr *m, int flags) {
  using Fn = ssize_t (*)(int, const struct msghdr *, int);
  static Fn real = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, "sendmsg"));
  using namespace chaos;
  int mode = t_armed ? g_mode.load() : kSockOff;
  if (mode != kSockOff && Ours(fd)) {
    if (mode == kSockModeFull && g_fired.load()) {
      if (std::chrono::steady_clock::now() < g_full_until) {
        errno = EAGAIN;
        return -1;
      }
    } else if (!g_fired.load() && ++g_seen == g_nth) {
      g_fired = 1;
      if (mode == kSockModeFail) {
        errno = ENOBUFS;
        return -1;
      }
      if (mode == kSockModeStall) SleepMs(g_stall_ms);
      if (mode == kSockModeFull) {
        g_full_until = std::chrono::steady_clock::now() + std::chrono::milliseconds(150);
        errno = EAGAIN;
        return -1;
      }
    }
  }
  return real(fd, m, flags);
}
