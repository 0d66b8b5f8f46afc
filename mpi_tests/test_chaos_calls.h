// The parts every operation shares (test_chaos_calls.cc), and the
// operations, each this rank's part of one step: the comm, windows and the
// heap (test_chaos_colls.cc); waits on windows and send/receive
// (test_chaos_peers.cc). Internal to test_chaos.
#ifndef VMMIPC_TEST_CHAOS_CALLS_H
#define VMMIPC_TEST_CHAOS_CALLS_H

#include <string>
#include <vector>

#include "test_chaos.h"

namespace chaos {
namespace calls {

constexpr size_t kGran = size_t(2) << 20;

double Now();
// A note on what went wrong here (the first one is kept); Bad: a data one.
void Note(Outcome *out, const std::string &what);
void Bad(Outcome *out, const std::string &what);
// The first failure of the step's calls on this rank is its result (the
// rank its error names, as a world rank).
void Result(Outcome *out, vmmipc_result_t rc, const std::vector<int> &world_of);
// Keeps the call that overran its bound the most.
void Timed(Outcome *out, double secs, double bound);
bool Failed(vmmipc_comm_t c);  // broken or aborted here (vmmipc_comm_stats)
bool SameNode(const Layout &l, int a, int b);
// A buffer of `size` bytes in `chunks` chunks, filled with the pattern of
// (tag, owner); NULL for size 0.
vmmipc_buf_t NewBuf(size_t size, int chunks, uint64_t tag, int owner, Outcome *out);
void FreeBuf(vmmipc_buf_t b, Outcome *out, const char *what);
// The pointer and size of rank q in w, checked against the contract: q's
// `want` bytes on this node, NULL and 0 elsewhere.
void *Query(vmmipc_win_t w, int q, size_t want, bool near, Outcome *out);
// Every node rank's memory in w holds the pattern (tag, its world rank).
void CheckWindow(const CommInfo &ci, const WinInfo &wi, const Layout &l, vmmipc_win_t w, int me, uint64_t tag,
                 Outcome *out);

void CreateComm(const Step &st, const Options &o, Local &L, StepCtx *x, Outcome *out);
void DestroyComm(const Step &st, const CommInfo &ci, const Options &o, LocalComm &lc, StepCtx *x, Outcome *out);
void MapCall(const Step &st, const CommInfo &ci, const Options &o, const Layout &l, Local &L, LocalComm &lc,
             StepCtx *x, Outcome *out);
void RootedMap(const Step &st, const CommInfo &ci, const Options &o, const Layout &l, Local &L, LocalComm &lc,
               StepCtx *x, Outcome *out);
void FreeWin(const Step &st, const CommInfo &ci, const Options &o, LocalComm &lc, StepCtx *x, Outcome *out);
void HeapCall(const Step &st, const CommInfo &ci, const Options &o, Local &L, LocalComm &lc, StepCtx *x,
              Outcome *out);
void SyncCall(const Step &st, const CommInfo &ci, const Options &o, const Layout &l, Local &L, LocalComm &lc,
              StepCtx *x, Outcome *out);
void SendRecv(const Step &st, const CommInfo &ci, const Options &o, Local &L, LocalComm &lc, StepCtx *x,
              Outcome *out);

}  // namespace calls
}  // namespace chaos

#endif
