// The counts of a run and its last line:
//   chaos: seed=S steps=K violations=V kinds=... np=N layout=L ops=... faults=... planned=... verdicts=...
// then drained=D timeouts=U (late messages received after their receive
// gave up; failures with no fault that were a TIMEOUT everywhere); each
// list "name:count,..." (kinds: of the violations, test_chaos_check.cc;
// faults: those that fired; planned: those armed), which harness/chaos.sh
// adds up over a campaign.
#include <set>
#include <string>

#include "test_chaos.h"

namespace chaos {
namespace {

bool Collective(int op) { return op != kSignalWait && op != kBarrier && op != kWaitHost && op != kSendRecv; }

template <typename F>
std::string List(int n, const long *c, F name) {
  std::string s;
  for (int i = 0; i < n; i++)
    if (c[i]) s += (s.empty() ? "" : ",") + std::string(name(i)) + ":" + std::to_string(c[i]);
  return s.empty() ? "-" : s;
}

}  // namespace

std::string ResultName(int rc) {
  static const char *const n[] = {"SUCCESS", "INVALID_ARG", "INVALID_DESC", "UNSUPPORTED", "CUDA", "MPI", "SYSTEM",
                                  "PEER", "TIMEOUT", "NOT_EXPORTABLE", "NO_MEMORY", "BUSY", "RESOURCE", "ABORTED"};
  return rc >= 0 && rc <= VMMIPC_ERR_ABORTED ? n[rc] : "code" + std::to_string(rc);
}

void Report::Add(std::vector<std::pair<std::string, long>> *to, const std::string &v) {
  for (auto &p : *to)
    if (p.first == v) {
      p.second++;
      return;
    }
  to->push_back({v, 1});
}

void Report::Violation(const std::string &kind) { Add(&kinds_, kind); }

void Report::Count(const Step &st, const std::vector<Outcome> &out, const std::vector<std::string> &violations) {
  for (const std::string &v : violations) Add(&kinds_, v.substr(0, v.find(':')));
  op_[st.op]++;
  fault_[st.fault]++;
  bool fired = st.fault == kKill;
  std::set<int> codes;
  for (const Outcome &o : out) {
    if (o.member != 1) continue;
    codes.insert(o.rc);
    if (o.fired) fired = true;
    if (o.extra_rc == VMMIPC_SUCCESS && st.op == kSendRecv) drained_++;
  }
  if (fired) fault_fired_[st.fault]++;
  if (codes.empty()) return Add(&verdict_, "none_took_part");
  if (!Collective(st.op)) return Add(&verdict_, codes.size() == 1 && *codes.begin() == 0 ? "p2p_sync_ok" : "p2p_sync_failed");
  if (codes.size() > 1) return Add(&verdict_, "mixed");  // allowed (an abort, a silent rank) or a split (violations)
  Add(&verdict_, *codes.begin() == 0 ? "success" : ResultName(*codes.begin()));
}

std::string Report::Line(const Options &o, const Layout &l, int steps, int violations) const {
  std::string verdicts, kinds;
  for (const auto &p : verdict_) verdicts += (verdicts.empty() ? "" : ",") + p.first + ":" + std::to_string(p.second);
  for (const auto &p : kinds_) kinds += (kinds.empty() ? "" : ",") + p.first + ":" + std::to_string(p.second);
  return "chaos: seed=" + std::to_string(o.seed) + " steps=" + std::to_string(steps) +
         " violations=" + std::to_string(violations) + " kinds=" + (kinds.empty() ? "-" : kinds) + " np=" + std::to_string(l.node.size()) + " layout=" + l.text +
         " ops=" + List(kOps, op_, OpName) + " faults=" + List(kFaults, fault_fired_, FaultName) +
         " planned=" + List(kFaults, fault_, FaultName) + " verdicts=" + (verdicts.empty() ? "-" : verdicts) +
         " drained=" + std::to_string(drained_) + " timeouts=" + std::to_string(timeouts_);
}

}  // namespace chaos
