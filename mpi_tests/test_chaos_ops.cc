// The operations: this rank's part of each step. Every call is timed and
// its result recorded (the code, the rank its error names, in world ranks);
// on success the data is checked through the mappings; the objects this
// rank holds, and what each accounts for, are kept in Local.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "test_chaos.h"

namespace chaos {
namespace {

constexpr size_t kGran = size_t(2) << 20;

double Now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

void Note(Outcome *out, const std::string &what) {
  if (!out->note[0]) std::snprintf(out->note, sizeof out->note, "%s", what.c_str());
}
void Bad(Outcome *out, const std::string &what) {
  out->data_bad = 1;
  Note(out, what);
}

// The first failure of the step's calls on this rank is its result.
void Result(Outcome *out, vmmipc_result_t rc, const std::vector<int> &world_of) {
  if (rc == VMMIPC_SUCCESS || out->rc != VMMIPC_SUCCESS) return;
  out->rc = rc;
  vmmipc_error_info_t info = VMMIPC_ERROR_INFO_INIT;
  vmmipc_last_error_info(&info);
  out->named = info.rank >= 0 && info.rank < static_cast<int>(world_of.size()) ? world_of[static_cast<size_t>(info.rank)]
                                                                               : -1;
  std::snprintf(out->msg, sizeof out->msg, "%s", vmmipc_last_error());
}

// Keeps the call that overran its bound the most.
void Timed(Outcome *out, double secs, double bound) {
  if (out->bound == 0 || secs - bound > out->secs - out->bound) {
    out->secs = secs;
    out->bound = bound;
  }
}

bool Failed(vmmipc_comm_t c) {
  vmmipc_comm_stats_t st = VMMIPC_COMM_STATS_INIT;
  return c && vmmipc_comm_stats(c, &st) == VMMIPC_SUCCESS && st.broken;
}

bool SameNode(const Layout &l, int a, int b) { return l.node[static_cast<size_t>(a)] == l.node[static_cast<size_t>(b)]; }

// A buffer of `size` bytes in `chunks` chunks, filled with the pattern of
// (tag, owner); NULL for size 0.
vmmipc_buf_t NewBuf(size_t size, int chunks, uint64_t tag, int owner, Outcome *out) {
  if (!size) return nullptr;
  vmmipc_buf_t b = nullptr;
  vmmipc_result_t rc;
  if (chunks > 1) {
    vmmipc_alloc_props_t p = VMMIPC_ALLOC_PROPS_INIT;
    p.chunk_size = size / static_cast<size_t>(chunks);
    rc = vmmipc_alloc_ex(size, &p, &b);
  } else {
    rc = vmmipc_alloc(size, &b);
  }
  if (rc) {
    Bad(out, std::string("vmmipc_alloc (no fault armed yet): ") + vmmipc_last_error());
    return nullptr;
  }
  void *p = nullptr;
  size_t n = 0;
  vmmipc_buf_ptr(b, &p, &n);
  FillPattern(p, n, tag, owner);
  return b;
}

void FreeBuf(vmmipc_buf_t b, Outcome *out, const char *what) {
  if (b && vmmipc_buf_free(b) != VMMIPC_SUCCESS)
    Bad(out, std::string(what) + ": vmmipc_buf_free: " + vmmipc_last_error());
}

// The pointer and size of rank q in w, checked against the contract: q's
// `want` bytes on this node, NULL and 0 elsewhere.
void *Query(vmmipc_win_t w, int q, size_t want, bool near, Outcome *out) {
  void *p = nullptr;
  size_t n = 0;
  vmmipc_result_t rc = vmmipc_win_query(w, q, &p, &n);
  if (rc) {
    Bad(out, std::string("vmmipc_win_query: ") + vmmipc_last_error());
    return nullptr;
  }
  size_t expect = near ? want : 0;
  if (n != expect || (expect != 0) != (p != nullptr)) {
    Bad(out, "vmmipc_win_query(rank " + std::to_string(q) + ") gave " + std::to_string(n) + " bytes at " +
                 (p ? "an address" : "NULL") + ", expected " + std::to_string(expect));
    return nullptr;
  }
  return p;
}

// Every node rank's memory in w holds the pattern (tag, its world rank).
void CheckWindow(const CommInfo &ci, const WinInfo &wi, const Layout &l, vmmipc_win_t w, int me, uint64_t tag,
                 Outcome *out) {
  for (int q = 0; q < ci.Size(); q++) {
    int wq = ci.world[static_cast<size_t>(q)];
    size_t want = wi.size[static_cast<size_t>(q)];
    void *p = Query(w, q, want, SameNode(l, me, wq), out);
    std::string why;
    if (p && CheckPattern(p, want, tag, wq, &why))
      Bad(out, "rank " + std::to_string(wq) + "'s memory seen from rank " + std::to_string(me) + ": " + why);
  }
}

// ---- the comm ----

void CreateComm(const Step &st, const Options &o, Local &L, StepCtx *x, Outcome *out) {
  int pos = static_cast<int>(std::find(st.members.begin(), st.members.end(), L.me) - st.members.begin());
  bool member = pos < static_cast<int>(st.members.size());
  bool whole = static_cast<int>(st.members.size()) == L.world;
  for (int i = 0; whole && i < L.world; i++) whole = st.members[static_cast<size_t>(i)] == i;
  MPI_Comm mpi = MPI_COMM_WORLD;
  if (!whole) MPI_Comm_split(MPI_COMM_WORLD, member ? 0 : MPI_UNDEFINED, pos, &mpi);
  if (!member) return;
  out->member = 1;
  LocalComm &lc = L.comm[st.slot];
  std::vector<int> fds_before = OpenFds();
  x->before = TakeCounts();
  vmmipc_config_t cfg = VMMIPC_CONFIG_INIT;
  cfg.timeout_ms = o.timeout_ms;
  cfg.map_cache_entries = 0;  // a cache would keep mappings: counts could not return
  vmmipc_comm_t c = nullptr;
  vmmipc_result_t rc;
  {
    FaultScope fs(st, o, nullptr, {}, false);
    fs.Before();
    double t0 = Now();
    rc = vmmipc_comm_create(mpi, &cfg, &c);
    Timed(out, Now() - t0, Bound(kCommCreate, o.timeout_ms) + fs.own_delay_s());
    out->fired = fs.Finish();
  }
  Result(out, rc, st.members);
  if (rc) {
    if (c) Bad(out, "vmmipc_comm_create failed and still gave a comm");
    if (mpi != MPI_COMM_WORLD) MPI_Comm_free(&mpi);
    return;
  }
  // The signal pool lives as long as the comm and comes with its first
  // window: made now, so that it counts with the comm.
  vmmipc_win_t w = nullptr;
  vmmipc_result_t pr = vmmipc_allgather_map(c, nullptr, nullptr, &w);
  if (!pr) pr = vmmipc_win_free(w);
  out->extra_rc = pr;
  if (pr) Note(out, std::string("the new comm's first window: ") + vmmipc_last_error());
  lc.c = c;
  lc.mpi = mpi;
  lc.sockets = NewSockets(fds_before, OpenFds(), L.pids);
  out->failed_after = Failed(c);
  x->acct = StepCtx::kGrowComm;
}

void DestroyComm(const Step &st, const CommInfo &ci, const Options &o, LocalComm &lc, StepCtx *x, Outcome *out) {
  vmmipc_result_t rc;
  {
    FaultScope fs(st, o, lc.c, lc.sockets, false);
    fs.Before();
    double t0 = Now();
    rc = vmmipc_comm_destroy(lc.c);
    Timed(out, Now() - t0, Bound(kCommDestroy, o.timeout_ms) + fs.own_delay_s());
    out->fired = fs.Finish();
  }
  Result(out, rc, ci.world);
  if (rc == VMMIPC_ERR_BUSY || rc == VMMIPC_ERR_INVALID_ARG) {  // still open (vmmipc.h)
    out->failed_after = Failed(lc.c);
    return;
  }
  out->freed = 1;
  if (!lc.wins.empty() || lc.heap) {
    Bad(out, "vmmipc_comm_destroy freed a comm with " + std::to_string(lc.wins.size()) + " window(s)" +
                 (lc.heap ? " and a heap" : "") + " open (" + ResultName(rc) + ")");
    lc.wins.clear();  // their handles dangle now: dropped, not freed
    lc.heap = nullptr;
    x->acct = StepCtx::kUnknown;
  } else {
    x->acct = StepCtx::kRelease;
    x->release = lc.foot;
  }
  if (lc.mpi != MPI_COMM_WORLD && lc.mpi != MPI_COMM_NULL) MPI_Comm_free(&lc.mpi);
  lc = LocalComm();
}

// ---- windows ----

void MapCall(const Step &st, const CommInfo &ci, const Options &o, const Layout &l, Local &L, LocalComm &lc,
             StepCtx *x, Outcome *out) {
  const int r = ci.Rank(L.me);
  const size_t mine = st.size[static_cast<size_t>(r)];
  vmmipc_buf_t buf = nullptr;
  RawRange raw;
  if (st.op == kWrap && mine) {
    int cr = RawMake(L.device, kGran, st.chunks[static_cast<size_t>(r)], &raw);
    if (cr) {
      Bad(out, "the application's own range for vmmipc_buf_wrap: CUresult " + std::to_string(cr));
    } else {
      FillPattern(raw.ptr, raw.size, x->tag, L.me);
      if (vmmipc_buf_wrap(raw.ptr, raw.size, &buf) != VMMIPC_SUCCESS) {
        Bad(out, std::string("vmmipc_buf_wrap (no fault armed yet): ") + vmmipc_last_error());
        buf = nullptr;
      }
    }
  } else if (st.op == kAllgatherMap) {
    buf = NewBuf(mine, st.chunks[static_cast<size_t>(r)], x->tag, L.me, out);
  }
  vmmipc_win_t w = nullptr;
  vmmipc_result_t rc;
  {
    FaultScope fs(st, o, lc.c, lc.sockets, true);
    fs.Before();
    double t0 = Now();
    rc = vmmipc_allgather_map(lc.c, buf, nullptr, &w);
    Timed(out, Now() - t0, Bound(st.op, o.timeout_ms) + fs.own_delay_s());
    out->fired = fs.Finish();
  }
  Result(out, rc, ci.world);
  if (rc) {
    if (w) Bad(out, "vmmipc_allgather_map failed and still gave a window");
    FreeBuf(buf, out, "after a failed map");
    RawFree(&raw);
    return;
  }
  WinInfo wi;
  wi.kind = st.op == kWrap ? kWrapWin : kMapWin;
  wi.size = st.size;
  CheckWindow(ci, wi, l, w, L.me, x->tag, out);
  LocalWin lw;
  lw.w = w;
  lw.buf = buf;
  lw.raw = raw;
  lc.wins.push_back(lw);
  x->acct = StepCtx::kGrowWin;
  x->new_win = static_cast<int>(lc.wins.size()) - 1;
}

void RootedMap(const Step &st, const CommInfo &ci, const Options &o, const Layout &l, Local &L, LocalComm &lc,
               StepCtx *x, Outcome *out) {
  const int r = ci.Rank(L.me), n = ci.Size(), root_w = ci.world[static_cast<size_t>(st.root)];
  std::vector<vmmipc_buf_t> bufs(static_cast<size_t>(n), nullptr);
  if (r == st.root) {
    if (st.op == kBcastMap) {
      bufs[0] = NewBuf(st.size[static_cast<size_t>(r)], st.chunks[static_cast<size_t>(r)], x->tag, L.me, out);
    } else {
      for (int q = 0; q < n; q++)
        bufs[static_cast<size_t>(q)] = NewBuf(st.size[static_cast<size_t>(q)], st.chunks[static_cast<size_t>(q)],
                                              x->tag, ci.world[static_cast<size_t>(q)], out);
    }
  }
  vmmipc_buf_t got = nullptr;
  vmmipc_result_t rc;
  {
    FaultScope fs(st, o, lc.c, lc.sockets, true);
    fs.Before();
    double t0 = Now();
    rc = st.op == kBcastMap ? vmmipc_bcast_map(lc.c, bufs[0], st.root, nullptr, &got)
                            : vmmipc_scatter_map(lc.c, r == st.root ? bufs.data() : nullptr, st.root, nullptr, &got);
    Timed(out, Now() - t0, Bound(st.op, o.timeout_ms) + fs.own_delay_s());
    out->fired = fs.Finish();
  }
  Result(out, rc, ci.world);
  if (!rc) {
    int owner = st.op == kBcastMap ? root_w : L.me;
    size_t want = st.size[static_cast<size_t>(st.op == kBcastMap ? st.root : r)];
    bool expect = r != st.root && SameNode(l, L.me, root_w) && want;
    if (expect != (got != nullptr)) {
      Bad(out, std::string(OpName(st.op)) + " gave " + (got ? "a mapping" : "NULL") + " on rank " +
                   std::to_string(L.me) + ", expected " + (expect ? "a mapping" : "NULL"));
    } else if (got) {
      void *p = nullptr;
      size_t sz = 0;
      vmmipc_buf_ptr(got, &p, &sz);
      std::string why;
      if (sz != want) Bad(out, "the mapping has " + std::to_string(sz) + " bytes, expected " + std::to_string(want));
      else if (CheckPattern(p, sz, x->tag, owner, &why)) Bad(out, "the root's memory seen from rank " + std::to_string(L.me) + ": " + why);
    }
  } else if (got) {
    Bad(out, std::string(OpName(st.op)) + " failed and still gave a mapping");
  }
  FreeBuf(got, out, "the mapping");
  for (vmmipc_buf_t b : bufs) FreeBuf(b, out, "the root's buffer");
}

void FreeWin(const Step &st, const CommInfo &ci, const Options &o, LocalComm &lc, StepCtx *x, Outcome *out) {
  LocalWin &lw = lc.wins[static_cast<size_t>(st.win)];
  vmmipc_result_t rc;
  {
    FaultScope fs(st, o, lc.c, lc.sockets, false);
    fs.Before();
    double t0 = Now();
    rc = vmmipc_win_free(lw.w);
    Timed(out, Now() - t0, Bound(st.op, o.timeout_ms) + fs.own_delay_s());
    out->fired = fs.Finish();
  }
  Result(out, rc, ci.world);
  out->failed_after = Failed(lc.c);
  // vmmipc.h: a failed call freed the window exactly when the comm is
  // broken after it; on a sound comm it was refused and is still open.
  if (rc && !out->failed_after) return;
  out->freed = 1;
  FreeBuf(lw.buf, out, "the window's buffer after vmmipc_win_free");
  RawFree(&lw.raw);
  x->acct = StepCtx::kRelease;
  x->release = lw.foot;
  lc.wins.erase(lc.wins.begin() + st.win);
}

// ---- the heap ----

void HeapCall(const Step &st, const CommInfo &ci, const Options &o, Local &L, LocalComm &lc, StepCtx *x,
              Outcome *out) {
  const int r = ci.Rank(L.me);
  vmmipc_result_t rc;
  vmmipc_win_t w = nullptr;
  vmmipc_heap_t h = nullptr;
  {
    FaultScope fs(st, o, lc.c, lc.sockets, false);
    fs.Before();
    double t0 = Now();
    switch (st.op) {
      case kHeapCreate: {
        vmmipc_heap_config_t cfg = VMMIPC_HEAP_CONFIG_INIT;
        cfg.reserve = 32 * kGran;  // growth steps of one granule: the heap grows, and trims, often
        cfg.grow = kGran;
        rc = vmmipc_heap_create(lc.c, &cfg, &h);
        break;
      }
      case kHeapAlloc:
        rc = vmmipc_heap_alloc(lc.heap, st.size[static_cast<size_t>(r)], &w);
        break;
      case kHeapTrim:
        rc = vmmipc_heap_trim(lc.heap);
        break;
      default:
        rc = vmmipc_heap_destroy(lc.heap);
        break;
    }
    Timed(out, Now() - t0, Bound(st.op, o.timeout_ms) + fs.own_delay_s());
    out->fired = fs.Finish();
  }
  Result(out, rc, ci.world);
  switch (st.op) {
    case kHeapCreate:
      if (!rc) {
        lc.heap = h;
        x->acct = StepCtx::kGrowHeap;
      } else if (h) {
        Bad(out, "vmmipc_heap_create failed and still gave a heap");
      }
      break;
    case kHeapAlloc:
      if (!rc) {
        LocalWin lw;
        lw.w = w;
        lc.wins.push_back(lw);
        x->acct = StepCtx::kGrowHeap;  // a growth step is the heap's, not the window's
        // This rank writes its slice now; the peers read after the barrier.
        size_t want = st.size[static_cast<size_t>(r)];
        void *p = Query(w, r, want, true, out);
        if (p) FillPattern(p, want, x->tag, L.me);
        if (p && reinterpret_cast<uintptr_t>(p) % 256) Bad(out, "a heap slice is not aligned to 256 bytes");
      } else if (w) {
        Bad(out, "vmmipc_heap_alloc failed and still gave a window");
      }
      break;
    case kHeapTrim:
      if (!rc) x->acct = StepCtx::kGrowHeap;
      break;
    default:  // destroy: still open after BUSY or INVALID_ARG, freed after any other result (vmmipc.h)
      if (rc == VMMIPC_ERR_BUSY || rc == VMMIPC_ERR_INVALID_ARG) break;
      out->freed = 1;
      lc.heap = nullptr;
      x->acct = StepCtx::kRelease;
      x->release = lc.heap_foot;
      lc.heap_foot = Counts();
      break;
  }
  out->failed_after = Failed(lc.c);
}

// ---- synchronisation on a window ----

void SyncCall(const Step &st, const CommInfo &ci, const Options &o, const Layout &l, Local &L, LocalComm &lc,
              StepCtx *x, Outcome *out) {
  const int r = ci.Rank(L.me);
  const WinInfo &wi = ci.wins[static_cast<size_t>(st.win)];
  vmmipc_win_t w = lc.wins[static_cast<size_t>(st.win)].w;
  const uint64_t v = ci.next_value;
  const double T = o.timeout_ms / 1000.0;
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
        got[i] = !call(vmmipc_win_wait_host(w, node[i], v, o.timeout_ms), t0, T + Grace(o.timeout_ms) * 0);
      }
      ok = std::all_of(got.begin(), got.end(), [](char c) { return c != 0; });
      if (fs.armed() && st.fault == kAbort) {
        // A wait that only the abort ends: nobody signals v + 1 in this step.
        t0 = Now();
        vmmipc_result_t ar = vmmipc_win_wait_host(w, node[0], v + 1, o.timeout_ms);
        Timed(out, Now() - t0, T);
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

}  // namespace

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
                  OpName(st.op));
  }
}

}  // namespace chaos
