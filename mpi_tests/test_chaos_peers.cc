// The node-local operations, this rank's part: signals with stream or host
// waits, and barriers, on a window (every node rank writes its memory
// first, the peers read it after), and send/receive between node pairs.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "test_chaos_calls.h"

namespace chaos {
namespace calls {

// ---- synchronisation on a window ----

void SyncCall(const Step &st, const CommInfo &ci, const Options &o, const Layout &l, Local &L, LocalComm &lc,
              StepCtx *x, Outcome *out) {
  const int r = ci.Rank(L.me);
  const WinInfo &wi = ci.wins[static_cast<size_t>(st.win)];
  vmmipc_win_t w = lc.wins[static_cast<size_t>(st.win)].w;
  const uint64_t v = ci.next_value;
  std::vector<int> node;  // comm ranks of this node, this rank included
  for (int q = 0; q < ci.Size(); q++)
    if (SameNode(l, L.me, ci.world[static_cast<size_t>(q)])) node.push_back(q);
  size_t mine = wi.size[static_cast<size_t>(r)];
  void *own = Query(w, r, mine, true, out);
  if (own) FillPattern(own, mine, x->tag, L.me);
  FaultScope fs(st, o, lc.c, lc.sockets, false);
  fs.Before();  // a late rank signals late
  auto call = [&](vmmipc_result_t rc, double t0, double bound) {
    Timed(out, Now() - t0, bound);
    Result(out, rc, ci.world);
    return rc;
  };
  bool ok = true;
  if (st.op == kBarrier) {
    double t0 = Now();
    ok = !call(vmmipc_win_barrier(w, L.stream), t0, Bound(kBarrier, o.timeout_ms));
    t0 = Now();
    int sr = StreamSync(L.stream);
    call(VMMIPC_SUCCESS, t0, Bound(kBarrier, o.timeout_ms));
    if (sr) Bad(out, "cuStreamSynchronize after the barrier: CUresult " + std::to_string(sr));
  } else {
    for (int q : node) {
      double t0 = Now();
      ok = !call(vmmipc_win_signal(w, q, v, L.stream), t0, Bound(kSignalWait, o.timeout_ms)) && ok;
    }
    if (st.op == kSignalWait) {
      for (int q : node) {
        double t0 = Now();
        ok = !call(vmmipc_win_wait(w, q, v, L.stream), t0, Bound(kSignalWait, o.timeout_ms)) && ok;
      }
      double t0 = Now();
      int sr = StreamSync(L.stream);
      call(VMMIPC_SUCCESS, t0, Bound(kSignalWait, o.timeout_ms));
      if (sr) Bad(out, "cuStreamSynchronize after the waits: CUresult " + std::to_string(sr));
    } else {
      double t0 = Now();
      int sr = StreamSync(L.stream);  // the signals are out before anyone waits on the host
      call(VMMIPC_SUCCESS, t0, Bound(kSignalWait, o.timeout_ms));
      if (sr) Bad(out, "cuStreamSynchronize after the signals: CUresult " + std::to_string(sr));
      std::vector<char> got(node.size(), 0);
      for (size_t i = 0; i < node.size(); i++) {
        t0 = Now();
        got[i] = !call(vmmipc_win_wait_host(w, node[i], v, o.timeout_ms), t0, Bound(kWaitHost, o.timeout_ms));
      }
      ok = std::all_of(got.begin(), got.end(), [](char c) { return c != 0; });
      if (fs.armed() && st.fault == kAbort) {
        // A wait that only the abort ends: nobody signals v + 1 in this step.
        t0 = Now();
        vmmipc_result_t ar = vmmipc_win_wait_host(w, node[0], v + 1, o.timeout_ms);
        Timed(out, Now() - t0, Bound(kWaitHost, o.timeout_ms));
        if (ar == VMMIPC_SUCCESS) Bad(out, "a host wait for a value nobody signalled succeeded");
        else if (out->rc == VMMIPC_SUCCESS) Result(out, ar, ci.world);
      }
    }
  }
  out->fired = fs.Finish();
  if (!ok) return;
  // Every wait succeeded: the node's memory holds this step's writes.
  for (int q : node) {
    size_t want = wi.size[static_cast<size_t>(q)];
    int wq = ci.world[static_cast<size_t>(q)];
    void *p = Query(w, q, want, true, out);
    std::string why;
    if (p && CheckPattern(p, want, x->tag, wq, &why))
      Bad(out, "after " + std::string(OpName(st.op)) + ", rank " + std::to_string(wq) + "'s memory: " + why);
  }
}

// ---- point to point ----

void SendRecv(const Step &st, const CommInfo &ci, const Options &o, Local &L, LocalComm &lc, StepCtx *x,
              Outcome *out) {
  const int r = ci.Rank(L.me), peer = st.partner[static_cast<size_t>(r)];
  if (peer < 0) return;
  const bool sender = st.sender[static_cast<size_t>(r)] != 0;
  if (sender) {
    // An abort on the receiver must find it blocked: nothing is sent to it.
    if (st.fault == kAbort && ci.world[static_cast<size_t>(peer)] == st.target) return;
    x->send_buf = NewBuf(kGran, 1, x->tag, L.me, out);
    vmmipc_desc_t d = nullptr;
    if (x->send_buf && vmmipc_export(x->send_buf, &d) != VMMIPC_SUCCESS)
      Bad(out, std::string("vmmipc_export (no fault armed yet): ") + vmmipc_last_error());
    FaultScope fs(st, o, lc.c, lc.sockets, false);
    fs.Before();
    double t0 = Now();
    vmmipc_result_t rc = vmmipc_send(lc.c, d, peer);
    Timed(out, Now() - t0, Bound(kSendRecv, o.timeout_ms) + fs.own_delay_s());
    out->fired = fs.Finish();
    Result(out, rc, ci.world);
    vmmipc_desc_free(d);
    return;
  }
  FaultScope fs(st, o, lc.c, lc.sockets, false);
  fs.Before();
  vmmipc_desc_t d = nullptr;
  double t0 = Now();
  vmmipc_result_t rc = vmmipc_recv(lc.c, peer, &d);
  Timed(out, Now() - t0, Bound(kSendRecv, o.timeout_ms));
  out->fired = fs.Finish();
  Result(out, rc, ci.world);
  if (rc) {
    x->recv_failed = true;
    if (d) Bad(out, "vmmipc_recv failed and still gave a descriptor");
    return;
  }
  // A message that came after an earlier receive gave up comes first, once.
  int pend = ci.pending.empty() ? -1 : ci.pending[static_cast<size_t>(peer * ci.Size() + r)];
  uint64_t want = x->tag;
  for (int round = 0; round < 2; round++) {
    vmmipc_buf_t imp = nullptr;
    if (vmmipc_import(d, nullptr, &imp) != VMMIPC_SUCCESS) {
      Bad(out, std::string("vmmipc_import of the received descriptor: ") + vmmipc_last_error());
      vmmipc_desc_free(d);
      return;
    }
    void *p = nullptr;
    size_t sz = 0;
    vmmipc_buf_ptr(imp, &p, &sz);
    int owner = -1;
    uint64_t tag = ReadStamp(p, sz, &owner);
    std::string why;
    bool stale = round == 0 && pend >= 0 && tag != want && owner == ci.world[static_cast<size_t>(peer)];
    uint64_t expect = stale ? tag : want;
    if (stale && tag != (static_cast<uint64_t>(pend) << 8 | kSendRecv))
      Bad(out, "a message from rank " + std::to_string(owner) + " of tag " + std::to_string(tag) +
                   " came first; the late one queued was of step " + std::to_string(pend));
    else if (CheckPattern(p, sz, expect, ci.world[static_cast<size_t>(peer)], &why))
      Bad(out, "the received buffer: " + why);
    FreeBuf(imp, out, "the received buffer");
    vmmipc_desc_free(d);
    d = nullptr;
    if (!stale) break;
    out->extra_rc = VMMIPC_SUCCESS;  // a late message drained
    t0 = Now();
    rc = vmmipc_recv(lc.c, peer, &d);
    Timed(out, Now() - t0, Bound(kSendRecv, o.timeout_ms));
    if (rc) {
      Result(out, rc, ci.world);
      x->recv_failed = true;
      return;
    }
  }
}


}  // namespace calls
}  // namespace chaos
