// A step on this rank: the call of its operation with its fault (RunStep),
// then, after every rank's call, the reads of the peers' writes, late
// messages, and what the rank holds against what its objects account for
// (FinishStep).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "test_chaos_calls.h"

namespace chaos {

using namespace calls;

void RunStep(const Step &st, const State &s, const Options &o, const Layout &l, Local &L, StepCtx *x, Outcome *out) {
  *out = Outcome();
  *x = StepCtx();
  x->tag = static_cast<uint64_t>(st.index) << 8 | static_cast<uint64_t>(st.op);
  x->before = TakeCounts();
  x->dev_before = DeviceUsed();
  if (st.fault == kKill && st.target == L.me) ArmKill(st.delay_ms);
  if (st.op == kCommCreate) {
    CreateComm(st, o, L, x, out);
    return;
  }
  const CommInfo &ci = s.comm[st.slot];
  LocalComm &lc = L.comm[st.slot];
  if (ci.Rank(L.me) < 0) return;
  out->member = 1;
  out->failed_before = Failed(lc.c);
  out->failed_after = out->failed_before;
  switch (st.op) {
    case kCommDestroy:
      DestroyComm(st, ci, o, lc, x, out);
      break;
    case kAllgatherMap:
    case kWrap:
      MapCall(st, ci, o, l, L, lc, x, out);
      out->failed_after = Failed(lc.c);
      break;
    case kBcastMap:
    case kScatterMap:
      RootedMap(st, ci, o, l, L, lc, x, out);
      out->failed_after = Failed(lc.c);
      break;
    case kWinFree:
    case kHeapFree:
      FreeWin(st, ci, o, lc, x, out);
      break;
    case kHeapCreate:
    case kHeapAlloc:
    case kHeapTrim:
    case kHeapDestroy:
      HeapCall(st, ci, o, L, lc, x, out);
      break;
    case kSignalWait:
    case kBarrier:
    case kWaitHost:
      SyncCall(st, ci, o, l, L, lc, x, out);
      out->failed_after = Failed(lc.c);
      break;
    case kSendRecv:
      SendRecv(st, ci, o, L, lc, x, out);
      out->failed_after = Failed(lc.c);
      break;
    default:
      break;
  }
}

void FinishStep(const Step &st, const State &s, const Options &o, const Layout &l, Local &L, StepCtx *x,
                Outcome *out) {
  if (st.op != kCommCreate && s.comm[st.slot].Rank(L.me) >= 0) {
    const CommInfo &ci = s.comm[st.slot];
    LocalComm &lc = L.comm[st.slot];
    const int r = ci.Rank(L.me);
    // The heap's new window: every node rank wrote its slice before the
    // barrier, if its call succeeded too (a split verdict is reported as
    // such, not as the bytes a failed rank never wrote). Not after a death:
    // the dead rank's comm cannot take a collective.
    int all_ok = out->rc == VMMIPC_SUCCESS, every = 0;
    if (st.op == kHeapAlloc && st.fault != kKill) MPI_Allreduce(&all_ok, &every, 1, MPI_INT, MPI_MIN, lc.mpi);
    if (st.op == kHeapAlloc && every && x->acct == StepCtx::kGrowHeap) {
      WinInfo wi;
      wi.kind = kHeapWin;
      wi.size = st.size;
      CheckWindow(ci, wi, l, lc.wins.back().w, L.me, x->tag, out);
    }
    // A receive that gave up while its sender's send succeeded: the message
    // was queued before the barrier, so it is there now, in order.
    if (st.op == kSendRecv && x->recv_failed && lc.c && !Failed(lc.c)) {
      int peer = st.partner[static_cast<size_t>(r)];
      vmmipc_desc_t d = nullptr;
      vmmipc_result_t rc = vmmipc_recv(lc.c, peer, &d);
      out->extra_rc = rc;
      if (rc) {
        vmmipc_error_info_t info = VMMIPC_ERROR_INFO_INIT;
        vmmipc_last_error_info(&info);
        out->extra_named = info.rank >= 0 ? ci.world[static_cast<size_t>(info.rank)] : -1;
      } else {
        vmmipc_buf_t imp = nullptr;
        if (vmmipc_import(d, nullptr, &imp) == VMMIPC_SUCCESS) {
          void *p = nullptr;
          size_t sz = 0;
          vmmipc_buf_ptr(imp, &p, &sz);
          std::string why;
          if (CheckPattern(p, sz, x->tag, ci.world[static_cast<size_t>(peer)], &why))
            Bad(out, "the late message drained after the barrier: " + why);
          FreeBuf(imp, out, "the late message");
        } else {
          Bad(out, std::string("importing the late message: ") + vmmipc_last_error());
        }
        vmmipc_desc_free(d);
      }
    }
    FreeBuf(x->send_buf, out, "the sent buffer");
    x->send_buf = nullptr;
  }
  // What this rank holds now, against what its objects account for.
  Counts now = TakeCounts(), delta = now - x->before;
  LocalComm &lc = L.comm[st.slot];
  if (delta.sockets > 0 && x->acct != StepCtx::kGrowComm) {
    out->acct_bad = 1;
    Note(out, "opened " + std::to_string(delta.sockets) + " socket(s) and kept them");
  }
  delta.sockets = 0;
  switch (x->acct) {
    case StepCtx::kSame:
      if (!(delta == Counts())) {
        // Less than before: a failed call gave something back (not all-or-nothing).
        bool less = delta.fds <= 0 && delta.allocations <= 0 && delta.mappings <= 0 && delta.reservations <= 0;
        out->acct_bad = less ? 2 : 1;
        Note(out, std::string(less ? "gave back what it held, although " : "holds more or less than before the step, ") +
                      (out->rc ? "the call failed" : "the call kept nothing") + ": " + delta.Str());
      }
      break;
    case StepCtx::kRelease:
      if (!(delta + x->release == Counts())) {
        out->acct_bad = 1;
        Note(out, "freeing released " + (Counts() - delta).Str() + " of " + x->release.Str());
      }
      break;
    case StepCtx::kGrowComm:
      lc.foot = delta;
      break;
    case StepCtx::kGrowWin:
      if (x->new_win >= 0 && x->new_win < static_cast<int>(lc.wins.size())) lc.wins[static_cast<size_t>(x->new_win)].foot = delta;
      break;
    case StepCtx::kGrowHeap:
      lc.heap_foot = lc.heap_foot + delta;
      break;
    default:
      break;
  }
  (void)o;
}

void CheckDeviceMemory(const Step &st, const StepCtx &x, Outcome *out) {
  // A collective that failed keeps nothing on any rank: the device's memory
  // in use is back where it was (ranks that share a GPU see the same total;
  // the driver's own lazy allocations get a little slack).
  const long long slack = 8ll << 20;
  bool makes = st.op == kCommCreate || st.op == kAllgatherMap || st.op == kWrap || st.op == kBcastMap ||
               st.op == kScatterMap || st.op == kHeapCreate || st.op == kHeapAlloc;
  long long used = DeviceUsed();
  if (makes && out->member && out->rc != VMMIPC_SUCCESS && used >= 0 && x.dev_before >= 0 &&
      used > x.dev_before + slack) {
    out->acct_bad = 1;
    Note(out, "device memory in use grew by " + std::to_string(used - x.dev_before) + " bytes over a failed " +
                  OpName(st.op) + " (" + std::to_string(x.dev_before >> 20) + " -> " + std::to_string(used >> 20) +
                  " MiB on the GPU, every process)");
  }
}

}  // namespace chaos