// The collective operations, this rank's part: comm create and destroy,
// the map collectives and buf_wrap, win_free, and the heap. Every call is
// timed and its result recorded; on success the data is checked through the
// mappings; the objects this rank holds, and what each accounts for, are
// kept in Local.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "test_chaos_calls.h"

namespace chaos {
namespace calls {

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
  if (pr == VMMIPC_ERR_TIMEOUT) {  // slow, not wrong: the comm is failed, so no later object makes its pool
    out->acct_bad = 4;
    out->failed_after = 1;
  } else if (pr) {  // no fault is armed here: its signal pool would count with a later object
    out->acct_bad = 3;
    Note(out, std::string("the new comm's first window (no fault armed) failed: ") + vmmipc_last_error());
  }
  lc.c = c;
  lc.mpi = mpi;
  lc.sockets = NewSockets(fds_before, OpenFds(), L.pids);
  lc.socket_inos = SocketInodes(lc.sockets);
  out->failed_after = out->failed_after || Failed(c);
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


}  // namespace calls
}  // namespace chaos
