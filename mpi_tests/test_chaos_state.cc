// The state every rank knows: which comms live, their windows and heaps,
// which failed. It changes only through Apply, from the outcomes every
// rank gathered, so the plan it feeds stays the same on every rank.
#include "test_chaos.h"

namespace chaos {
namespace {

// Whether every member (alive) has flag set, and whether any has.
void Every(const std::vector<Outcome> &out, int Outcome::*flag, bool *all, bool *any) {
  *all = true;
  *any = false;
  bool none = true;
  for (const Outcome &o : out) {
    if (o.member != 1) continue;
    none = false;
    *all = *all && (o.*flag) != 0;
    *any = *any || (o.*flag) != 0;
  }
  if (none) *all = false;
}

bool AllSucceeded(const std::vector<Outcome> &out) {
  bool any = false;
  for (const Outcome &o : out) {
    if (o.member != 1) continue;
    if (o.rc != VMMIPC_SUCCESS) return false;
    any = true;
  }
  return any;
}

}  // namespace

void Apply(const Step &st, const std::vector<Outcome> &out, State *s) {
  s->steps_done = st.index + 1;
  CommInfo &ci = s->comm[st.slot];
  bool ok = AllSucceeded(out), freed_all = false, freed_any = false;
  Every(out, &Outcome::freed, &freed_all, &freed_any);
  switch (st.op) {
    case kCommCreate:
      if (ok) {
        ci = CommInfo();
        ci.live = true;
        ci.world = st.members;
        ci.pending.assign(st.members.size() * st.members.size(), -1);
      }
      break;
    case kCommDestroy:
      if (freed_all) ci = CommInfo();
      break;
    case kAllgatherMap:
    case kWrap:
    case kHeapAlloc:
      if (ok) {
        WinInfo wi;
        wi.kind = st.op == kWrap ? kWrapWin : st.op == kHeapAlloc ? kHeapWin : kMapWin;
        wi.size = st.size;
        ci.wins.push_back(wi);
        if (st.op == kHeapAlloc) ci.heap_windows++;
      }
      break;
    case kWinFree:
    case kHeapFree:
      if (freed_all) {
        if (st.op == kHeapFree) ci.heap_windows--;
        ci.wins.erase(ci.wins.begin() + st.win);
      }
      break;
    case kHeapCreate:
      if (ok) ci.heap = true;
      break;
    case kHeapDestroy:
      if (freed_all) ci.heap = false;
      break;
    case kSignalWait:
    case kBarrier:
    case kWaitHost:
      ci.next_value += 2;  // v + 1 is what an abort's wait waited for
      break;
    case kSendRecv:
      for (int a = 0; a < ci.Size(); a++) {
        int b = st.partner[static_cast<size_t>(a)];
        if (b < 0 || !st.sender[static_cast<size_t>(a)]) continue;
        const Outcome &snd = out[static_cast<size_t>(ci.world[static_cast<size_t>(a)])];
        const Outcome &rcv = out[static_cast<size_t>(ci.world[static_cast<size_t>(b)])];
        int &pend = ci.pending[static_cast<size_t>(a * ci.Size() + b)];
        if (rcv.extra_rc == VMMIPC_SUCCESS || rcv.rc == VMMIPC_SUCCESS) pend = -1;
        if (snd.rc == VMMIPC_SUCCESS && rcv.rc != VMMIPC_SUCCESS && rcv.extra_rc != VMMIPC_SUCCESS) pend = st.index;
      }
      break;
    default:
      break;
  }
  if (ci.live) {
    bool all = false, any = false;
    Every(out, &Outcome::failed_after, &all, &any);
    ci.failed = ci.failed || any;
    // A rank that dropped its connections, or aborted, failed the comm
    // whether or not a call noticed yet.
    bool cut = (st.fault == kLeave || st.fault == kAbort) && st.target >= 0 &&
               out[static_cast<size_t>(st.target)].fired;
    ci.failed = ci.failed || cut;
  }
}

}  // namespace chaos
