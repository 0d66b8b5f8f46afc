// The invariants, checked after every step from every rank's outcome (each
// rank computes the same list; the first one alive prints it). Each
// violation starts with its kind:
//   split      the ranks of a collective returned different results
//   blame      one verdict, but it names another rank than the one at fault
//   contract   a result the contract rules out (vmmipc.h), e.g. SUCCESS on a
//              failed comm, or SUCCESS where a fault made the call impossible
//   unfaulted  a call failed although no fault fired (a TIMEOUT that every
//              rank concerned returned is counted apart instead, as
//              "timeouts": a rank the machine left without CPU for a
//              timeout is late, and the contract holds)
//   slow       a call took longer than its bound plus the grace
//   leak       fds, driver objects or device memory not back where they were
//   data       a mapping or message held other bytes, or a wrong size
//   probe      after a death, a call on the dead rank's comm did not fail
// What each rule rests on is in docs/dev/chaos.md ("What is checked").
#include <algorithm>
#include <cstdio>
#include <set>
#include <string>

#include "test_chaos.h"

namespace chaos {
namespace {

bool Collective(int op) { return op != kSignalWait && op != kBarrier && op != kWaitHost && op != kSendRecv; }
bool HeapOp(int op) { return op == kHeapCreate || op == kHeapAlloc || op == kHeapTrim || op == kHeapDestroy; }

std::string R(int w) { return "rank " + std::to_string(w); }

// One line per rank: its result, the rank it names, its message.
std::string Table(const std::vector<int> &who, const std::vector<Outcome> &out) {
  std::string t;
  for (int w : who) {
    const Outcome &o = out[static_cast<size_t>(w)];
    t += "\n    " + R(w) + ": " + ResultName(o.rc) + (o.named >= 0 ? " naming " + R(o.named) : "") +
         (o.fired ? " [fault fired here]" : "") + (o.msg[0] ? std::string(": ") + o.msg : "");
  }
  return t;
}

class Checker {
 public:
  Checker(const Step &st, const State &s, const Layout &l, const Options &o, const std::vector<Outcome> &out,
          const std::vector<int> &alive)
      : st_(st), l_(l), o_(o), out_(out), alive_(alive) {
    for (size_t w = 0; w < out.size(); w++)
      if (alive[w] && out[w].member) members_.push_back(static_cast<int>(w));
    if (st.op != kCommCreate) ci_ = &s.comm[st.slot];
    victim_ = st.fault == kKill ? st.target : -1;
    fired_ = st.fault == kKill || (st.target >= 0 && out[static_cast<size_t>(st.target)].fired);
  }
  std::vector<std::string> Run();
  int timeouts() const { return timeouts_; }

 private:
  // A failure with no fault: a violation unless every rank in `who` that
  // failed returned TIMEOUT.
  void Unfaulted(const std::vector<int> &who, const std::string &v) {
    for (int w : who)
      if (O(w).rc && O(w).rc != VMMIPC_ERR_TIMEOUT) return V("unfaulted", v);
    timeouts_++;
  }
  const Outcome &O(int w) const { return out_[static_cast<size_t>(w)]; }
  void V(const char *kind, const std::string &v) { v_.push_back(std::string(kind) + ": " + v); }
  bool Near(int a, int b) const { return l_.node[static_cast<size_t>(a)] == l_.node[static_cast<size_t>(b)]; }
  void Common();
  void Collectives();
  void Sync();
  void SendRecv();
  // One verdict among `who`; returns its code (-1 if split).
  int OneVerdict(const std::vector<int> &who, const char *why);
  // A failure among `who` names `t`.
  void Names(const std::vector<int> &who, int t, const char *why);

  const Step &st_;
  const Layout &l_;
  const Options &o_;
  const std::vector<Outcome> &out_;
  const std::vector<int> &alive_;
  const CommInfo *ci_ = nullptr;
  std::vector<int> members_;
  int victim_ = -1;
  bool fired_ = false;
  int timeouts_ = 0;
  std::vector<std::string> v_;
};

void Checker::Common() {
  for (int w : members_) {
    const Outcome &o = O(w);
    if (o.data_bad) V("data", R(w) + ": " + o.note);
    if (o.acct_bad == 1) V("leak", R(w) + ": " + o.note);
    if (o.acct_bad == 2 && !(st_.op == kHeapTrim && o_.Known("trim_releases"))) V("contract", R(w) + ": " + o.note);
    if (o.acct_bad == 3) V("unfaulted", R(w) + ": " + o.note);
    if (o.acct_bad == 4) timeouts_++;
    if (o.bound > 0 && o.secs > o.bound + Grace(o_.timeout_ms)) {
      char b[200];
      std::snprintf(b, sizeof b, "%s: a call took %.3f s, over its bound of %.3f s plus the grace of %.3f s",
                    R(w).c_str(), o.secs, o.bound, Grace(o_.timeout_ms));
      V("slow", b);
    }
    if (o.rc < 0 || o.rc > VMMIPC_ERR_ABORTED) V("contract", R(w) + ": returned an unknown code " + std::to_string(o.rc));
  }
}

int Checker::OneVerdict(const std::vector<int> &who, const char *why) {
  std::set<int> codes, named;
  for (int w : who) {
    codes.insert(O(w).rc);
    if (O(w).rc) named.insert(O(w).named);
  }
  if (codes.size() > 1) {
    V("split", std::string(why) + ":" + Table(who, out_));
    return -1;
  }
  if (named.size() > 1) V("split", std::string(why) + ": one code, but the ranks name different ranks:" + Table(who, out_));
  return codes.empty() ? 0 : *codes.begin();
}

void Checker::Names(const std::vector<int> &who, int t, const char *why) {
  if (members_.size() < 2) return;  // no agreement: a rank's own failure names no rank
  for (int w : who)
    if (O(w).rc && O(w).named != t) {
      V("blame", std::string(why) + ": the failure must name " + R(t) + ":" + Table(who, out_));
      return;
    }
}

void Checker::Collectives() {
  bool failed_before = false;
  for (int w : members_) failed_before = failed_before || O(w).failed_before;
  const bool destroy = st_.op == kCommDestroy || st_.op == kHeapDestroy;
  if (failed_before) {
    // vmmipc.h: after a failure the comm is broken on the ranks that failed,
    // and the next call fails everywhere; destroys are then local (their
    // result is not a verdict).
    if (destroy) return;
    for (int w : members_)
      if (O(w).rc == VMMIPC_SUCCESS) {
        V("contract", R(w) + " succeeded on a comm that had failed on some rank:" + Table(members_, out_));
        return;
      }
    return;
  }
  if (victim_ >= 0) {
    bool in = st_.op == kCommCreate ? std::count(st_.members.begin(), st_.members.end(), victim_) > 0
                                    : ci_->Rank(victim_) >= 0;
    if (in) {
      // A death: the survivors agree; a failure is PEER (a node peer's
      // death, within about 100 ms) or TIMEOUT (another node's), naming it.
      // Unless the comm had failed in an earlier step (the state's
      // ci.failed, as for the probe), though no survivor's call noticed
      // yet: a rank that aborted or left after that call had decided (its
      // fault fired, the call succeeded) told its node peers over the
      // sockets, and their next call may read that first: ABORTED or PEER
      // naming that rank, whether or not it is the one that died (chaos
      // seed 30014: rank 1 aborted comm 0 just after step 76 decided, and
      // died in step 77).
      const bool before = ci_ && ci_->failed;
      int rc = OneVerdict(members_, "the survivors of a death");
      if (rc > 0 && rc != VMMIPC_ERR_PEER && rc != VMMIPC_ERR_TIMEOUT && !(before && rc == VMMIPC_ERR_ABORTED))
        V("contract", "after a death, expected PEER or TIMEOUT:" + Table(members_, out_));
      if (!before) Names(members_, victim_, "after a death");
      return;
    }
  }
  if (st_.expect_busy) {
    for (int w : members_)
      if (O(w).rc != VMMIPC_ERR_BUSY) {
        V("contract", "destroying with windows or heaps open must be refused (BUSY) everywhere:" + Table(members_, out_));
        break;
      }
    return;
  }
  const int t = st_.target;
  if (st_.fault == kNone || st_.fault == kKill || !fired_) {
    int rc = OneVerdict(members_, "no fault fired");
    // A comm that lost a rank's connections or was aborted (state) may fail.
    if (rc != VMMIPC_SUCCESS && rc != -1 && !(ci_ && ci_->failed))
      Unfaulted(members_, "the call failed with no fault fired:" + Table(members_, out_));
    return;
  }
  std::vector<int> others;
  for (int w : members_)
    if (w != t) others.push_back(w);
  switch (st_.fault) {
    case kWithdraw: {
      // A rank that withdraws while the verdict is on its way still takes it.
      int rc = OneVerdict(members_, "a rank withdrew while the verdict was on its way");
      if (rc > 0) V("contract", "a withdrawal while the verdict was on its way made the call fail:" + Table(members_, out_));
      return;
    }
    case kDriver: {
      int rc = OneVerdict(members_, ("an injected failure at " + st_.hook + " on one rank").c_str());
      if (st_.hook == "unmap") return;  // reported after a real unmap: win_free goes on (coll_map.c)
      if (rc == VMMIPC_SUCCESS) V("contract", "a failure injected at " + st_.hook + " was not reported:" + Table(members_, out_));
      Names(members_, t, "an injected failure");
      return;
    }
    case kLate:
    case kCollectorLate: {
      // Late by half a timeout past the others' timeout: they may still
      // have taken it if they came later themselves (then the data is right).
      int rc = OneVerdict(members_, "a rank late past the timeout");
      if (rc > 0 && rc != VMMIPC_ERR_TIMEOUT) V("contract", "a late rank must give TIMEOUT:" + Table(members_, out_));
      if (rc > 0 && !o_.Known("timeout_blame")) Names(members_, t, "a late rank");
      return;
    }
    case kSilent: {
      // The silent rank's own result is the hook's; the others must fail,
      // naming it (TIMEOUT; PEER where it hung up: comm_create frees its
      // half-made comm, comm_destroy its comm). The heap's hook lets the rank join the heap's
      // agreement afterwards, so who is named there is not checked.
      if (others.empty()) return;
      int rc = OneVerdict(others, "a rank never entered the agreement");
      if (rc == VMMIPC_SUCCESS) V("contract", "a rank never entered the agreement, yet the others succeeded:" + Table(members_, out_));
      bool frees = st_.op == kCommCreate || st_.op == kCommDestroy;
      if (rc > 0 && rc != VMMIPC_ERR_TIMEOUT && !(frees && rc == VMMIPC_ERR_PEER))
        V("contract", "a silent rank must give TIMEOUT:" + Table(members_, out_));
      if (!HeapOp(st_.op) && !o_.Known("timeout_blame")) Names(others, t, "a silent rank");
      return;
    }
    case kSockFail:
    case kSockStall:
    case kSockFull:
      OneVerdict(members_, "a socket write failed, stalled or found the socket full");
      return;
    case kLeave:
      // A call that needed none of the dropped connections may still succeed.
      OneVerdict(members_, "a rank's connections were shut down");
      return;
    case kAbort: {
      // vmmipc.h: the aborting rank's blocked call returns ABORTED, its
      // node's peers fail at once naming it; one verdict for a collective:
      // every rank fails, naming it, unless the call had ended everywhere.
      if (O(t).rc == VMMIPC_SUCCESS) {
        OneVerdict(members_, "the abort came after the call had decided");
        return;
      }
      if (O(t).rc != VMMIPC_ERR_ABORTED)
        V("contract", R(t) + " aborted but its call returned " + ResultName(O(t).rc) + ":" + Table(members_, out_));
      for (int w : others)
        if (O(w).rc == VMMIPC_SUCCESS) {
          V("split", R(t) + " aborted inside the call and returned ABORTED, while others succeeded:" + Table(members_, out_));
          return;
        }
      // In comm_destroy a second rank is late (Step::late2): who the others
      // name is then not the abort's alone.
      if (!o_.Known("abort_rank") && st_.op != kCommDestroy) Names(others, t, "after an abort");
      return;
    }
    default:
      return;
  }
}

void Checker::Sync() {
  const int t = st_.target;
  bool failed = false;
  for (int w : members_) failed = failed || O(w).failed_before;
  for (int w : members_) {
    const Outcome &o = O(w);
    if (o.failed_before) {
      if (o.rc == VMMIPC_SUCCESS) V("contract", R(w) + "'s comm had failed, yet " + OpName(st_.op) + " succeeded there");
      continue;
    }
    if (failed || ci_->failed) continue;  // a wait on a failed peer may time out; bounded (checked above)
    bool near = t >= 0 && fired_ && Near(w, t);
    if (!near) {
      if (o.rc) Unfaulted({w}, R(w) + ": " + OpName(st_.op) + " failed with no fault on its node:" + Table({w}, out_));
    } else if (st_.fault == kLate) {
      // The late rank's own waits are for signals that came; the others'
      // waits for it time out, unless they began late themselves.
      if (w == t && o.rc) Unfaulted({w}, R(w) + " signalled late, yet its own waits failed:" + Table({w}, out_));
      if (w != t && o.rc && (o.rc != VMMIPC_ERR_TIMEOUT || o.named != t))
        V("blame", R(w) + ": expected TIMEOUT naming the late " + R(t) + ":" + Table({w}, out_));
    } else if (st_.fault == kAbort) {
      if (w == t && o.rc != VMMIPC_ERR_ABORTED)
        V("contract", R(w) + " aborted, yet its wait returned " + ResultName(o.rc) + ":" + Table({w}, out_));
      if (w != t && o.rc && !((o.rc == VMMIPC_ERR_ABORTED || o.rc == VMMIPC_ERR_PEER) && (o.named == t || o_.Known("abort_rank"))))
        V("blame", R(w) + ": a failure after " + R(t) + " aborted must name it:" + Table({w}, out_));
    }
  }
}

void Checker::SendRecv() {
  const int n = ci_->Size(), t = st_.target;
  for (int a = 0; a < n; a++) {
    if (!st_.sender[static_cast<size_t>(a)] || st_.partner[static_cast<size_t>(a)] < 0) continue;
    int S = ci_->world[static_cast<size_t>(a)], Rv = ci_->world[static_cast<size_t>(st_.partner[static_cast<size_t>(a)])];
    if (!alive_[static_cast<size_t>(S)] || !alive_[static_cast<size_t>(Rv)]) continue;
    const Outcome &s = O(S), &r = O(Rv);
    std::string pair = "send from " + R(S) + " to " + R(Rv);
    if (s.failed_before || r.failed_before || ci_->failed) {
      if (s.failed_before && s.rc == VMMIPC_SUCCESS) V("contract", pair + ": the sender's comm had failed, yet the send succeeded");
      if (r.failed_before && r.rc == VMMIPC_SUCCESS) V("contract", pair + ": the receiver's comm had failed, yet the receive succeeded");
      continue;
    }
    bool ours = fired_ && (t == S || t == Rv);
    // A message the send queued is received: by the receive, or, when that
    // gave up, after the barrier (in order, once).
    if (s.rc == VMMIPC_SUCCESS && r.rc != VMMIPC_SUCCESS && !r.failed_after && r.extra_rc != VMMIPC_SUCCESS &&
        !(ours && st_.fault == kAbort))
      V("contract", pair + ": the send succeeded (queued) but the receive failed and the message never came after:" +
                        Table({S, Rv}, out_) + "\n    the receive after the barrier: " + ResultName(r.extra_rc));
    if (!ours) {
      bool near = fired_ && t >= 0 && Near(t, S) && (st_.fault == kAbort || st_.fault == kLeave);
      for (int w : {S, Rv})
        if (O(w).rc && !(near && (O(w).named == t || o_.Known("abort_rank")))) {  // an abort reaches the node's other connections
          Unfaulted({S, Rv}, pair + " failed with no fault on either:" + Table({S, Rv}, out_));
          break;
        }
      continue;
    }
    switch (st_.fault) {
      case kLate:
      case kSockStall:
        if (s.rc) V("contract", pair + ": a late send must still succeed:" + Table({S}, out_));
        if (r.rc && (r.rc != VMMIPC_ERR_TIMEOUT || r.named != S))
          V("blame", pair + ": expected TIMEOUT naming the late sender:" + Table({Rv}, out_));
        break;
      case kSockFull:
        if (s.rc) V("contract", pair + ": a send to a full socket must wait, not fail:" + Table({S}, out_));
        break;
      case kSockFail:
        if (!s.rc) V("contract", pair + ": the socket write failed, yet the send succeeded");
        if (r.rc == VMMIPC_SUCCESS) V("contract", pair + ": nothing was sent, yet the receive succeeded");
        else if (r.named != S) V("blame", pair + ": the receive's failure must name the sender:" + Table({Rv}, out_));
        break;
      case kLeave:
        if (!s.rc) V("contract", pair + ": the sender's connections were shut, yet its send succeeded");
        if (r.rc != VMMIPC_ERR_PEER || r.named != S)
          V("blame", pair + ": expected PEER naming the sender that left:" + Table({Rv}, out_));
        break;
      case kAbort:
        if (r.rc != VMMIPC_ERR_ABORTED)
          V("contract", pair + ": the receiver aborted, yet its receive returned " + ResultName(r.rc) + Table({Rv}, out_));
        break;
      default:
        break;
    }
  }
}

std::vector<std::string> Checker::Run() {
  Common();
  if (Collective(st_.op)) Collectives();
  else if (st_.op == kSendRecv) SendRecv();
  else Sync();
  // After a death, every comm the dead rank was in fails on every survivor,
  // naming it (unless it had failed before, for another reason).
  if (victim_ >= 0)
    for (size_t w = 0; w < out_.size(); w++) {
      const Outcome &o = out_[w];
      if (!alive_[w] || o.probe_rc < 0) continue;
      if (o.probe_rc == VMMIPC_SUCCESS)
        V("probe", R(static_cast<int>(w)) + ": a collective after the death of " + R(victim_) + " succeeded");
      else if (o.probe_named != victim_ && !o.probe_failed_before &&
               !(o.probe_rc == VMMIPC_ERR_TIMEOUT && o_.Known("timeout_blame")))  // a dead rank is silent too
        V("blame", R(static_cast<int>(w)) + ": the collective after the death of " + R(victim_) + " (on comm " +
                       std::to_string(o.probe_slot) + ", entered " + std::to_string(o.probe_start_ms) +
                       " ms into the probes, " + std::to_string(o.probe_ms) + " ms in it) failed with " +
                       ResultName(o.probe_rc) + " naming " + R(o.probe_named) + ": " + o.probe_msg);
    }
  return v_;
}

}  // namespace

double Grace(int timeout_ms) { return 0.5 + timeout_ms / 2000.0; }

double Bound(int op, int timeout_ms) {
  double T = timeout_ms / 1000.0, g = std::min(1.0, std::max(0.02, T / 10));
  switch (op) {
    case kSendRecv:
    case kWaitHost:
      return T + g;
    case kSignalWait:
    case kBarrier:
      return 2 * T;  // stream waits: the test's own bound (they all are satisfied unless the comm fails)
    case kHeapAlloc:
      return 3 * T + g;  // the sizes' exchange, then a growth step's exchange and agreement
    default:
      return 2 * T + g;  // vmmipc.h: an exchange and an agreement, each bounded, plus a grace
  }
}

std::vector<std::string> CheckStep(const Step &st, const State &s, const Layout &l, const Options &o,
                                   const std::vector<Outcome> &out, const std::vector<int> &alive, int *timeouts) {
  Checker c(st, s, l, o, out, alive);
  std::vector<std::string> v = c.Run();
  *timeouts = c.timeouts();
  return v;
}

}  // namespace chaos
