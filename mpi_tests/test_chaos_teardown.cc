// The end of this rank's objects: the probe after a death, and the
// teardown at the end of a run (collective, in the same order on every
// rank) or after a violation (local: each comm aborted, then freed).
#include <cstdio>
#include <cstring>

#include "test_chaos.h"
#include "test_chaos_calls.h"

namespace chaos {

// Of the dead rank's comms, the result reported is the worst: a success
// (a violation), then a failure naming another rank (not a TIMEOUT, then a
// TIMEOUT, which --known timeout_blame excuses), then any other; so no
// later comm's result hides an earlier one's violation.
void Probe(const State &s, Local &L, int victim, Outcome *out) {
  const double t0 = calls::Now();
  int worst = -1;
  for (int k = 0; k < kSlots; k++) {
    const CommInfo &ci = s.comm[k];
    LocalComm &lc = L.comm[k];
    if (!ci.live || !lc.c || ci.Rank(victim) < 0 || ci.Rank(L.me) < 0) continue;
    vmmipc_win_t w = nullptr;
    const double t1 = calls::Now();
    vmmipc_result_t rc = vmmipc_allgather_map(lc.c, nullptr, nullptr, &w);
    const double t2 = calls::Now();
    int named = -1;
    char msg[sizeof out->probe_msg] = {0};
    if (rc) {
      vmmipc_error_info_t info = VMMIPC_ERROR_INFO_INIT;
      vmmipc_last_error_info(&info);
      named = info.rank >= 0 && info.rank < ci.Size() ? ci.world[static_cast<size_t>(info.rank)] : -1;
      std::snprintf(msg, sizeof msg, "%s", vmmipc_last_error());
    } else {
      vmmipc_win_free(w);  // local on the broken comm it should be
    }
    const int bad = rc == VMMIPC_SUCCESS ? 3 : (named == victim || ci.failed) ? 0 : rc == VMMIPC_ERR_TIMEOUT ? 1 : 2;
    if (bad <= worst) continue;
    worst = bad;
    out->probe_rc = rc;
    out->probe_named = named;
    out->probe_failed_before = ci.failed;
    std::memcpy(out->probe_msg, msg, sizeof msg);
    // A blame names the comm and when this rank entered it: a rank whose
    // earlier probes took long enters later than the others.
    out->probe_slot = k;
    out->probe_start_ms = static_cast<int>((t1 - t0) * 1e3);
    out->probe_ms = static_cast<int>((t2 - t1) * 1e3);
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
