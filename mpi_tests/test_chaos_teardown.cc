// The end of this rank's objects: the probe after a death, and the
// teardown at the end of a run (collective, in the same order on every
// rank) or after a violation (local: each comm aborted, then freed).
#include <cstdio>

#include "test_chaos.h"
#include "test_chaos_calls.h"

namespace chaos {

void Probe(const State &s, Local &L, int victim, Outcome *out) {
  const double t0 = calls::Now();
  for (int k = 0; k < kSlots; k++) {
    const CommInfo &ci = s.comm[k];
    LocalComm &lc = L.comm[k];
    if (!ci.live || !lc.c || ci.Rank(victim) < 0 || ci.Rank(L.me) < 0) continue;
    vmmipc_comm_stats_t st = VMMIPC_COMM_STATS_INIT;
    vmmipc_comm_stats(lc.c, &st);
    vmmipc_win_t w = nullptr;
    const double t1 = calls::Now();
    vmmipc_result_t rc = vmmipc_allgather_map(lc.c, nullptr, nullptr, &w);
    if (out->probe_rc == VMMIPC_SUCCESS) continue;  // one success is enough to report
    out->probe_rc = rc;
    // A blame names the comm and when this rank entered it: a rank whose
    // earlier probes took long enters later than the others.
    out->probe_slot = k;
    out->probe_start_ms = static_cast<int>((t1 - t0) * 1e3);
    out->probe_ms = static_cast<int>((calls::Now() - t1) * 1e3);
    out->probe_failed_before = ci.failed;
    if (rc) {
      vmmipc_error_info_t info = VMMIPC_ERROR_INFO_INIT;
      vmmipc_last_error_info(&info);
      out->probe_named = info.rank >= 0 && info.rank < ci.Size() ? ci.world[static_cast<size_t>(info.rank)] : -1;
      std::snprintf(out->probe_msg, sizeof out->probe_msg, "%s", vmmipc_last_error());
    } else {
      vmmipc_win_free(w);  // local on the broken comm it should be
    }
  }
}

void Teardown(State *s, Local &L, bool graceful) {
  for (int k = 0; k < kSlots; k++) {
    LocalComm &lc = L.comm[k];
    if (lc.c) {
      if (!graceful) vmmipc_comm_abort(lc.c);
      // Windows in the order they were made (every rank the same order).
      for (LocalWin &lw : lc.wins) {
        vmmipc_result_t rc = vmmipc_win_free(lw.w);
        vmmipc_comm_stats_t st = VMMIPC_COMM_STATS_INIT;
        vmmipc_comm_stats(lc.c, &st);
        if (rc && !st.broken) {
          std::fprintf(stderr, "chaos: rank %d: teardown: vmmipc_win_free refused on a sound comm: %s\n", L.me,
                       vmmipc_last_error());
          continue;  // still open: left to the leak check
        }
        if (lw.buf) vmmipc_buf_free(lw.buf);
        RawFree(&lw.raw);
      }
      if (lc.heap) vmmipc_heap_destroy(lc.heap);
      vmmipc_result_t rc = vmmipc_comm_destroy(lc.c);
      if (rc == VMMIPC_ERR_BUSY || rc == VMMIPC_ERR_INVALID_ARG)
        std::fprintf(stderr, "chaos: rank %d: teardown: vmmipc_comm_destroy refused: %s\n", L.me, vmmipc_last_error());
    }
    // After a death MPI cannot free a communicator the dead rank was in.
    if (lc.mpi != MPI_COMM_NULL && lc.mpi != MPI_COMM_WORLD && L.dead < 0) MPI_Comm_free(&lc.mpi);
    lc = LocalComm();
    s->comm[k] = CommInfo();
  }
}

}  // namespace chaos
