// What every operation shares: timing and recording a call's result,
// buffers filled with a pattern, and the checks of a window's mappings.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "test_chaos_calls.h"

namespace chaos {
namespace calls {

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

}  // namespace calls
}  // namespace chaos
