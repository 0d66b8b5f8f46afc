// The plan: a random generator seeded from (seed, step) and the step
// generator. It reads only what every rank knows (the options, the layout,
// the state that the ranks' gathered outcomes built), so every rank draws
// the same step: collectives stay matched and faults land where planned.
#include <algorithm>
#include <cstdio>
#include <cstring>

#include "test_chaos.h"

namespace chaos {
namespace {

const char *const kOpNames[kOps] = {
    "comm_create", "comm_destroy", "allgather_map", "bcast_map", "scatter_map", "buf_wrap", "win_free",
    "heap_create", "heap_alloc", "heap_free", "heap_trim", "heap_destroy",
    "signal_wait", "barrier", "wait_host", "send_recv"};
const char *const kFaultNames[kFaults] = {"none", "driver", "late", "collector_late", "silent", "withdraw",
                                          "sock_fail", "sock_stall", "sock_full", "leave", "abort", "kill"};

uint64_t SplitMix(uint64_t *x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// xoshiro256**: small, fast, and the same on every platform.
class Rng {
 public:
  explicit Rng(uint64_t seed) {
    for (uint64_t &w : s_) w = SplitMix(&seed);
  }
  uint64_t Next() {
    uint64_t r = Rotl(s_[1] * 5, 7) * 9, t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = Rotl(s_[3], 45);
    return r;
  }
  int Below(int n) { return n <= 1 ? 0 : static_cast<int>(Next() % static_cast<uint64_t>(n)); }
  bool Chance(double p) { return static_cast<double>(Next() >> 11) * 0x1.0p-53 < p; }
  template <typename T>
  const T &Pick(const std::vector<T> &v) { return v[static_cast<size_t>(Below(static_cast<int>(v.size())))]; }

 private:
  static uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

constexpr size_t kGran = size_t(2) << 20;  // the stand-in's and H200's granularity

// A weighted choice among ops.
struct Menu {
  std::vector<std::pair<int, int>> items;  // op, weight
  void Add(int op, int w, const Options &o) {
    if (w > 0 && !o.skip_op[static_cast<size_t>(op)]) items.push_back({op, w});
  }
  int Draw(Rng &r) const {
    int total = 0;
    for (const auto &i : items) total += i.second;
    int x = r.Below(total);
    for (const auto &i : items) {
      if (x < i.second) return i.first;
      x -= i.second;
    }
    return items.empty() ? -1 : items.back().first;
  }
};

bool HasExchange(int op) {
  return op == kAllgatherMap || op == kBcastMap || op == kScatterMap || op == kWrap;
}
bool Collective(int op) { return op != kSignalWait && op != kBarrier && op != kWaitHost && op != kSendRecv; }

// The faults that mean something for op on a sound comm.
std::vector<int> Applicable(int op, const CommInfo &ci, bool node_pairs) {
  std::vector<int> f;
  int n = op == kCommCreate ? 0 : ci.Size();
  if (op == kCommCreate) return {kSilent, kCollectorLate, kSockFail, kSockStall, kSockFull};
  if (Collective(op)) {
    if (HasExchange(op) || op == kHeapAlloc || op == kHeapCreate || op == kWinFree || op == kHeapFree ||
        op == kHeapTrim)
      f.push_back(kDriver);
    // An abort during comm_destroy needs another rank to hold it in its
    // agreement (below): the comm is gone once it returns.
    if (op != kCommDestroy || n >= 2) f.push_back(kAbort);
    // Faults of timing and connections need someone to wait on the target.
    if (n >= 2) f.insert(f.end(), {kLate, kCollectorLate, kSilent, kWithdraw, kLeave, kSockFail, kSockStall, kSockFull});
    return f;
  }
  if (op == kSendRecv && node_pairs) return {kLate, kSockFail, kSockStall, kSockFull, kLeave, kAbort};
  if (op == kWaitHost) return {kLate, kAbort};
  return f;  // stream waits: no fault can be undone on a stream that waits without a bound
}

}  // namespace

const char *OpName(int op) { return op >= 0 && op < kOps ? kOpNames[op] : "?"; }
const char *FaultName(int f) { return f >= 0 && f < kFaults ? kFaultNames[f] : "?"; }
int OpByName(const std::string &n) {
  for (int i = 0; i < kOps; i++)
    if (n == kOpNames[i]) return i;
  return -1;
}
int FaultByName(const std::string &n) {
  for (int i = 0; i < kFaults; i++)
    if (n == kFaultNames[i]) return i;
  return -1;
}

int CommInfo::Rank(int w) const {
  for (size_t i = 0; i < world.size(); i++)
    if (world[i] == w) return static_cast<int>(i);
  return -1;
}

int Layout::Nodes() const { return node.empty() ? 0 : *std::max_element(node.begin(), node.end()) + 1; }

int Planner::KillStep(const Options &o) {
  if (!o.kill || o.skip_fault[kKill]) return -1;
  if (o.kill_step >= 0) return o.kill_step;
  if (o.steps < 2) return -1;
  Rng r(o.seed ^ 0x6b696c6cull);
  return o.steps / 2 + r.Below(o.steps - o.steps / 2);
}

Planner::Planner(const Options &o, const Layout &l) : o_(o), l_(l), kill_step_(KillStep(o)) {}

Step Planner::Next(const State &s, int index) const {
  uint64_t mix = o_.seed * 0x100000001b3ull + static_cast<uint64_t>(index);
  Rng r(SplitMix(&mix));
  Step st;
  st.index = index;
  const int world = static_cast<int>(l_.node.size());
  std::vector<int> live, free_slots;
  for (int i = 0; i < kSlots; i++) (s.comm[i].live ? live : free_slots).push_back(i);

  // A new comm: over MPI_COMM_WORLD, or over a part of it (MPI_Comm_split),
  // its ranks sometimes in reverse order.
  if (live.empty() || (!free_slots.empty() && r.Chance(0.05))) {
    st.op = kCommCreate;
    st.slot = r.Pick(free_slots);
    for (int w = 0; w < world; w++)
      if (r.Chance(0.65) || s.comm[0].live == false) st.members.push_back(w);
    if (st.members.empty()) st.members.push_back(r.Below(world));
    if (r.Chance(0.3)) std::reverse(st.members.begin(), st.members.end());
  } else {
    st.slot = r.Pick(live);
    const CommInfo &ci = s.comm[st.slot];
    const int n = ci.Size();
    bool pairs = false;  // two members share a node
    for (int a = 0; a < n; a++)
      for (int b = a + 1; b < n; b++) pairs = pairs || l_.node[ci.world[a]] == l_.node[ci.world[b]];
    Menu m;
    bool wins = !ci.wins.empty(), full = static_cast<int>(ci.wins.size()) >= kMaxWindows;
    if (ci.failed) {
      // Tear down what a failed comm holds, in order; sometimes another
      // call first, which must fail everywhere.
      if (wins) m.Add(kWinFree, 12, o_);
      else if (ci.heap) m.Add(kHeapDestroy, 12, o_);
      else m.Add(kCommDestroy, 12, o_);
      m.Add(kAllgatherMap, 1, o_);
      m.Add(kHeapAlloc, ci.heap ? 1 : 0, o_);
      m.Add(kWaitHost, wins ? 1 : 0, o_);
      m.Add(kSendRecv, pairs ? 1 : 0, o_);
    } else {
      m.Add(kCommDestroy, wins || ci.heap ? 1 : 3, o_);
      m.Add(kAllgatherMap, full ? 0 : 14, o_);
      m.Add(kBcastMap, 6, o_);
      m.Add(kScatterMap, 6, o_);
      m.Add(kWrap, full ? 0 : 4, o_);
      m.Add(kWinFree, wins ? (full ? 30 : 10) : 0, o_);
      m.Add(kHeapCreate, ci.heap ? 0 : 4, o_);
      m.Add(kHeapAlloc, ci.heap && !full ? 10 : 0, o_);
      m.Add(kHeapTrim, ci.heap ? 3 : 0, o_);
      m.Add(kHeapDestroy, ci.heap ? (ci.heap_windows ? 1 : 3) : 0, o_);
      m.Add(kSignalWait, wins ? 5 : 0, o_);
      m.Add(kBarrier, wins ? 4 : 0, o_);
      m.Add(kWaitHost, wins ? 5 : 0, o_);
      m.Add(kSendRecv, pairs ? 6 : 0, o_);
    }
    st.op = m.Draw(r);
    if (st.op < 0) st.op = kAllgatherMap;
    if (st.op == kWinFree || st.op == kHeapFree) {
      st.win = r.Below(static_cast<int>(ci.wins.size()));
      st.op = ci.wins[static_cast<size_t>(st.win)].kind == kHeapWin ? kHeapFree : kWinFree;
    }
    if (st.op == kSignalWait || st.op == kBarrier || st.op == kWaitHost) {
      st.win = r.Below(static_cast<int>(ci.wins.size()));
      if (ci.failed) st.op = kWaitHost;  // only bounded waits on a failed comm
    }
    st.expect_busy = !ci.failed && ((st.op == kCommDestroy && (wins || ci.heap)) ||
                                    (st.op == kHeapDestroy && ci.heap_windows > 0));
    st.root = r.Below(n);
    st.size.assign(static_cast<size_t>(n), 0);
    st.chunks.assign(static_cast<size_t>(n), 1);
    for (int q = 0; q < n; q++) {
      size_t &z = st.size[static_cast<size_t>(q)];
      int &k = st.chunks[static_cast<size_t>(q)];
      switch (st.op) {
        case kAllgatherMap:
        case kScatterMap:
          k = 1 + r.Below(3);
          z = r.Chance(0.15) ? 0 : kGran * static_cast<size_t>(k);
          if (!r.Chance(0.4)) k = 1;  // one chunk of that size, else one chunk per granule
          break;
        case kBcastMap:
          k = 1 + r.Below(2);
          z = kGran * static_cast<size_t>(k);
          break;
        case kWrap:
          k = 1 + r.Below(2);
          z = r.Chance(0.1) ? 0 : kGran * static_cast<size_t>(k);
          break;
        case kHeapAlloc: {
          int kind = r.Below(8);
          z = kind == 0   ? 0
              : kind < 4  ? 1 + static_cast<size_t>(r.Below(64 << 10))
              : kind < 7  ? (size_t(64) << 10) + static_cast<size_t>(r.Below(1 << 20))
                          : kGran * static_cast<size_t>(1 + r.Below(2)) + static_cast<size_t>(r.Below(4096));
          break;
        }
        default:
          break;
      }
    }
    if (st.op == kSendRecv) {
      st.partner.assign(static_cast<size_t>(n), -1);
      st.sender.assign(static_cast<size_t>(n), 0);
      for (int node = 0; node < l_.Nodes(); node++) {
        std::vector<int> here;
        for (int q = 0; q < n; q++)
          if (l_.node[ci.world[q]] == node) here.push_back(q);
        for (size_t i = here.size(); i > 1; i--) std::swap(here[i - 1], here[static_cast<size_t>(r.Below(static_cast<int>(i)))]);
        for (size_t i = 0; i + 1 < here.size(); i += 2) {
          int a = here[i], b = here[i + 1];
          st.partner[static_cast<size_t>(a)] = b;
          st.partner[static_cast<size_t>(b)] = a;
          st.sender[static_cast<size_t>(r.Chance(0.5) ? a : b)] = 1;
        }
      }
    }
    st.stream = !ci.failed;
  }

  // The fault.
  const CommInfo *ci = st.op == kCommCreate ? nullptr : &s.comm[st.slot];
  std::vector<int> who = st.op == kCommCreate ? st.members : ci->world;
  // The kill: at the planned step, or the first after it that makes no
  // comm (MPI's own splits would wait for the dead rank forever).
  if (kill_step_ >= 0 && index >= kill_step_ && st.op != kCommCreate) {
    st.fault = kKill;
    st.target = r.Below(world);
    st.delay_ms = r.Below(o_.timeout_ms + 1);
    return st;
  }
  bool pairs = st.op == kSendRecv;
  if (ci && ci->failed) return st;  // calls on a failed comm fail by themselves
  if (!ci && st.members.size() < 2) return st;  // nobody to wait on a rank alone
  if (st.expect_busy) return st;
  if (!r.Chance(o_.fault_rate)) return st;
  std::vector<int> kinds;
  CommInfo fresh;
  for (int f : Applicable(st.op, ci ? *ci : fresh, pairs))
    if (!o_.skip_fault[static_cast<size_t>(f)]) kinds.push_back(f);
  if (kinds.empty()) return st;
  st.fault = r.Pick(kinds);
  st.target = r.Pick(who);
  st.delay_ms = o_.timeout_ms * 3 / 2;
  st.nth = 1 + r.Below(2);
  switch (st.fault) {
    case kDriver: {
      std::vector<std::string> hooks;
      if (HasExchange(st.op)) hooks = {"export", "import", "map", "access", "reserve", "record", "transfer"};
      if (st.op == kHeapAlloc) hooks = {"heap_oom", "heap_fds", "import", "map"};
      if (st.op == kHeapCreate) hooks = {"reserve"};
      if (st.op == kWinFree || st.op == kHeapFree || st.op == kHeapTrim) hooks = {"unmap"};
      st.hook = r.Pick(hooks);
      break;
    }
    case kLate:
      // Asleep inside the exchange (the library's hook), or late into the call.
      st.how = HasExchange(st.op) && r.Chance(0.5) ? 0 : 1;
      if (st.op == kSendRecv || st.op == kWaitHost) {  // the one that sends or signals is late
        std::vector<int> senders;
        for (int q = 0; q < ci->Size(); q++)
          if (st.op == kWaitHost || (st.sender[static_cast<size_t>(q)] && st.partner[static_cast<size_t>(q)] >= 0))
            senders.push_back(ci->world[static_cast<size_t>(q)]);
        st.target = r.Pick(senders);
      }
      break;
    case kCollectorLate:
      st.target = who[0];
      st.how = r.Below(2);  // 0: late into the agreement; 1: stalls before announcing
      break;
    case kWithdraw: {
      std::vector<int> others(who.begin() + 1, who.end());
      st.target = r.Pick(others);
      break;
    }
    case kSockFail:
    case kSockStall:
    case kSockFull:
    case kLeave:
      if (st.op == kSendRecv) {
        std::vector<int> senders;
        for (int q = 0; q < ci->Size(); q++)
          if (st.sender[static_cast<size_t>(q)] && st.partner[static_cast<size_t>(q)] >= 0)
            senders.push_back(ci->world[static_cast<size_t>(q)]);
        st.target = r.Pick(senders);
      }
      st.nth = 1 + r.Below(3);
      break;
    case kAbort:
      if (st.op == kSendRecv) {
        std::vector<int> receivers;
        for (int q = 0; q < ci->Size(); q++)
          if (!st.sender[static_cast<size_t>(q)] && st.partner[static_cast<size_t>(q)] >= 0)
            receivers.push_back(ci->world[static_cast<size_t>(q)]);
        st.target = r.Pick(receivers);
      }
      st.delay_ms = o_.timeout_ms / 4;
      if (st.op == kCommDestroy) {  // another rank comes late, so that the abort finds the destroy blocked
        std::vector<int> others;
        for (int w : who)
          if (w != st.target) others.push_back(w);
        st.late2 = r.Pick(others);
      }
      break;
    default:
      break;
  }
  // Known defects (issue 29), left out only when asked (--known; docs/dev/chaos.md).
  if (o_.Known("lost_verdict") && Collective(st.op) && st.target == who[0] &&
      (st.fault == kSockFail || st.fault == kSockStall || st.fault == kSockFull || st.fault == kLeave))
    st.target = who.size() > 1 ? who[1] : -1;
  if (o_.Known("abort_destroy") && st.op == kCommDestroy && st.fault == kAbort) st.fault = kNone;
  // Found by this program (docs/dev/chaos.md, "Known defects").
  if (o_.Known("stall_withdrawals") && st.fault == kCollectorLate) st.how = 0;
  if (o_.Known("abort_vote") && st.fault == kAbort && Collective(st.op)) st.fault = kNone;
  if (st.target < 0) st.fault = kNone;
  if (st.fault == kNone) st.late2 = -1;
  return st;
}

std::string Step::Describe(const State &s) const {
  char b[512];
  std::string what = OpName(op);
  if (op == kCommCreate) {
    what += " of ranks {";
    for (size_t i = 0; i < members.size(); i++) what += (i ? "," : "") + std::to_string(members[i]);
    what += "}";
  } else {
    const CommInfo &ci = s.comm[slot];
    if (op == kBcastMap || op == kScatterMap) what += " root " + std::to_string(ci.world[static_cast<size_t>(root)]);
    if (win >= 0) what += " window #" + std::to_string(win);
    if (expect_busy) what += " (busy)";
  }
  std::snprintf(b, sizeof b, "step %d: %s on comm %d", index, what.c_str(), slot);
  std::string d = b;
  if (fault != kNone) {
    d += std::string(", fault ") + FaultName(fault) + " on rank " + std::to_string(target);
    if (fault == kDriver) d += " at " + hook + " #" + std::to_string(nth);
    if (fault == kLate || fault == kCollectorLate) d += how ? " (how 1)" : " (how 0)";
    if (fault == kKill) d += " after " + std::to_string(delay_ms) + " ms";
    if (late2 >= 0) d += ", rank " + std::to_string(late2) + " late";
  }
  return d;
}

bool Options::Known(const char *name) const { return std::find(known.begin(), known.end(), name) != known.end(); }

}  // namespace chaos
