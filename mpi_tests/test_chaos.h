// test_chaos: a seeded, randomized fault campaign over vmmipc's operations
// (issue 29, docs/dev/chaos.md). Every rank draws the same plan from the
// seed, runs its part of each step with the faults the plan gives it, and
// the ranks then compare what they saw against the contract (vmmipc.h).
// The parts, one file each:
//   test_chaos_plan.cc     the random generator and the step generator
//   test_chaos_data.cc     byte patterns and device copies
//   test_chaos_ops.cc      the operations
//   test_chaos_faults.cc   arming faults (test hooks, sockets, threads, signals)
//   test_chaos_account.cc  fds, driver objects and device memory
//   test_chaos_check.cc    the invariants
//   test_chaos_report.cc   the counts and the last line
//   test_chaos.cc          options, the step loop, the replay command
#ifndef VMMIPC_TEST_CHAOS_H
#define VMMIPC_TEST_CHAOS_H

#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "vmmipc.h"

namespace chaos {

constexpr int kSlots = 3;        // comms alive at once at most
constexpr int kMaxWindows = 6;   // open windows per comm at most

enum Op {
  kCommCreate, kCommDestroy, kAllgatherMap, kBcastMap, kScatterMap, kWrap, kWinFree,
  kHeapCreate, kHeapAlloc, kHeapFree, kHeapTrim, kHeapDestroy,
  kSignalWait, kBarrier, kWaitHost, kSendRecv, kOps
};
enum Fault {
  kNone,
  kDriver,         // an injected driver (or OS) failure inside the call, on one rank
  kLate,           // one rank past the timeout: late into the call, or asleep in its exchange
  kCollectorLate,  // the agreement's collector (comm rank 0) late into, or stalled in, the agreement
  kSilent,         // one rank never enters the agreement
  kWithdraw,       // one rank gives up while the verdict is on its way
  kSockFail,       // one rank's socket write fails (ENOBUFS)
  kSockStall,      // one rank's socket write stalls past the timeout
  kSockFull,       // one rank's socket is full for 150 ms (EAGAIN)
  kLeave,          // one rank leaves early: its connections are shut down
  kAbort,          // vmmipc_comm_abort from another thread of one rank, during the call
  kKill,           // SIGKILL of one rank (the run ends after the survivors' checks)
  kFaults
};
enum WinKind { kMapWin, kHeapWin, kWrapWin };

const char *OpName(int op);
const char *FaultName(int fault);
int OpByName(const std::string &name);
int FaultByName(const std::string &name);

struct Options {
  uint64_t seed = 1;
  int steps = 100;
  int timeout_ms = 500;     // every comm's timeout (VMMIPC_TIMEOUT_MS sets the default)
  double fault_rate = 0.4;  // share of steps that carry a fault
  bool kill = false;        // the launcher lets the job go on after a death: one rank may be SIGKILLed
  int kill_step = -1;       // --kill-step: the step of the kill (else drawn from the seed and --steps)
  bool verbose = false;
  int max_violations = 20;  // stop after this many
  std::vector<char> skip_op, skip_fault;  // switched off with --skip
  std::vector<std::string> known;         // --known: combinations of known defects left out (off by default)
  bool Known(const char *name) const;
};

// Which node each world rank is on (VMMIPC_NODE_ID and the host).
struct Layout {
  std::vector<int> node;  // world rank -> node index, numbered by first appearance
  std::string text;       // "0,0,1": the VMMIPC_TEST_LAYOUT that rebuilds it
  int Nodes() const;
};

// What every rank knows about a window (identical everywhere).
struct WinInfo {
  int kind = kMapWin;
  std::vector<size_t> size;  // per comm rank: bytes its buffer (or slice) has; 0: none
};

// What every rank knows about a comm (identical everywhere).
struct CommInfo {
  bool live = false;
  std::vector<int> world;    // comm rank -> world rank
  bool heap = false;
  int heap_windows = 0;
  std::vector<WinInfo> wins;  // in the order they were made (and must be freed in)
  bool failed = false;       // broken or aborted on some member after the last step
  uint64_t next_value = 1;   // signal values: rising, never reused
  // send/recv: a message that arrived after its receive gave up, still
  // queued: [sender comm rank * size + receiver] -> the step that sent it.
  std::vector<int> pending;
  int Rank(int world_rank) const;  // comm rank of a world rank, or -1
  int Size() const { return static_cast<int>(world.size()); }
};

struct State {
  CommInfo comm[kSlots];
  int steps_done = 0;
};

// One step of the plan (identical on every rank).
struct Step {
  int index = 0;
  int op = kCommCreate;
  int slot = 0;
  std::vector<int> members;  // comm create: world ranks in comm rank order
  int root = 0;              // comm rank
  int win = -1;              // index in the comm's windows
  std::vector<size_t> size;  // per comm rank: bytes asked for (0: none)
  std::vector<int> chunks;   // per comm rank: chunks of its buffer
  std::vector<int> partner;  // send/recv: per comm rank, its partner's comm rank or -1
  std::vector<char> sender;  // send/recv: per comm rank
  bool expect_busy = false;  // destroy with windows or heaps open: refused everywhere
  bool stream = true;        // sync ops: stream waits (false: host waits only)
  int fault = kNone;
  int target = -1;           // world rank that carries the fault
  std::string hook;          // kDriver: the test hook's step name
  int nth = 1;               // kDriver, sockets: which occurrence
  int delay_ms = 0;          // kLate, kSockStall: how late; kKill: when
  int how = 0;               // variant of the fault (see test_chaos_faults.cc)
  int late2 = -1;            // kAbort in comm_destroy: a rank late by 1.5 x T into the call
  std::string Describe(const State &s) const;
};

// Draws the plan. Every rank calls it with the same arguments and gets the
// same step.
class Planner {
 public:
  // The step the kill is planned at (the first one after it that makes no
  // comm), or -1: --kill-step, else drawn from the seed in the second half
  // of --steps. The replay names it, so that fewer steps replay the same.
  static int KillStep(const Options &o);
  Planner(const Options &o, const Layout &l);
  Step Next(const State &s, int index) const;
  int kill_step() const { return kill_step_; }

 private:
  const Options &o_;
  const Layout &l_;
  int kill_step_ = -1;
};

// ---- what one rank saw in one step (gathered from every rank) ----
struct Outcome {
  int member = 0;        // took part in the step's call(s)
  int rc = 0;            // vmmipc_result_t of its main call
  int named = -1;        // world rank its error names (-1: none)
  int fired = 0;         // the fault armed on this rank fired
  int failed_before = 0, failed_after = 0;  // the comm broken or aborted here
  int freed = 0;         // the object the call frees is gone here
  int extra_rc = -1;     // a second call: the new comm's first window; a late message drained
  int extra_named = -1;
  int probe_rc = -1;     // after a death: a collective on the dead rank's comms (-1: none here)
  int probe_named = -1, probe_failed_before = 0;
  int probe_slot = -1, probe_ms = 0, probe_start_ms = 0;  // the reported probe's comm, its time, and when it began
  char probe_msg[160] = {0};
  int data_bad = 0;
  int acct_bad = 0;      // 1: holds more or less than its objects account for; 2: a failed call gave
                         // something back; 3: the new comm's first window failed (its pool uncounted);
                         // 4: it timed out (the comm is then treated as failed)
  double secs = 0, bound = 0;  // the longest call here and its bound
  char msg[240] = {0};   // its error message
  char note[240] = {0};  // what went wrong here (data, accounting)
};

// ---- driver access (test_chaos_data.cc) ----
struct Drv;
const Drv &D();
bool Standin();
int CopyIn(void *dev, const void *host, size_t n);   // 0 or the CUresult
int CopyOut(void *host, const void *dev, size_t n);
int CtxSync();
void *StreamCreate();
void StreamDestroy(void *s);
int StreamSync(void *s);
long long DeviceUsed();  // bytes in use on the current device (-1 where unknown)

// Patterns: every byte depends on the tag (the step and the purpose) and
// the owner; regions are the head and the tail of the buffer.
void FillPattern(void *dev, size_t size, uint64_t tag, int owner);
// 0 if the buffer holds the pattern; else writes what differs into `why`.
int CheckPattern(const void *dev, size_t size, uint64_t tag, int owner, std::string *why);
// The tag a buffer was filled with, read from its stamp (0 if none).
uint64_t ReadStamp(const void *dev, size_t size, int *owner);

// An application's own VMM range (cuMemCreate, reserve, map, access), for
// vmmipc_buf_wrap.
struct RawRange {
  void *ptr = nullptr;
  size_t size = 0;
  std::vector<std::pair<uintptr_t, unsigned long long>> maps;  // address, handle
  size_t chunk = 0;
};
int RawMake(int device, size_t chunk, int chunks, RawRange *out);  // 0 or the CUresult
void RawFree(RawRange *r);

// ---- accounting (test_chaos_account.cc) ----
// fds are those that are not sockets: a comm's connections may close on
// their own once a peer hung up, so sockets are counted apart (they may
// only grow when a comm is made, and are back at the start at the end).
struct Counts {
  long fds = 0, allocations = 0, mappings = 0, reservations = 0, sockets = 0;
  Counts operator-(const Counts &o) const;
  Counts operator+(const Counts &o) const;
  bool operator==(const Counts &o) const;
  std::string Str() const;
};
Counts TakeCounts();
int FdCount();
std::vector<int> OpenFds();
// The sockets that appeared between two fd lists and connect to one of pids.
std::vector<int> NewSockets(const std::vector<int> &before, const std::vector<int> &after,
                            const std::vector<int> &pids);
// Their inodes (LocalComm::socket_inos: an fd number closed and reused since differs).
std::vector<unsigned long> SocketInodes(const std::vector<int> &fds);
struct Local;  // below
// --verbose: what is left unread in each comm's node sockets after a step.
void PrintUnread(const Local &L, int me, int step);

// ---- faults (test_chaos_faults.cc) ----
struct Local;
// Arms this rank's part of the step's fault before its call; Fired after.
class FaultScope {
 public:
  FaultScope(const Step &st, const Options &o, vmmipc_comm_t c, const std::vector<int> &sockets, bool inside_call);
  ~FaultScope();
  // Before the call: a late rank sleeps here, a leaving rank shuts its
  // connections (when the fault is not acted inside the call).
  void Before();
  // After the call: whether the armed fault fired; stops helper threads.
  bool Finish();
  double own_delay_s() const { return own_delay_s_; }
  bool armed() const { return armed_; }

 private:
  const Step &st_;
  const Options &o_;
  vmmipc_comm_t c_;
  std::vector<int> sockets_;
  bool armed_ = false, inside_ = false, finished_ = false, fired_ = false;
  double own_delay_s_ = 0;
  struct Helper;
  Helper *helper_ = nullptr;
};
// SIGKILL of this rank after delay_ms, from a thread (the victim's main
// thread goes on with the step).
void ArmKill(int delay_ms);
// The socket fault (sendmsg interposer): state shared with the interposer.
void SockArm(int mode, int nth, int stall_ms, const std::vector<int> &fds);
bool SockDisarm();  // whether it fired
enum { kSockOff = 0, kSockModeFail, kSockModeStall, kSockModeFull };

// ---- this rank's objects (test_chaos_ops.cc) ----
struct LocalWin {
  vmmipc_win_t w = nullptr;
  vmmipc_buf_t buf = nullptr;  // the buffer it exposes (map and wrap windows)
  RawRange raw;                // the application's range under a wrapped buffer
  Counts foot;                 // what it holds here (made by its step)
};
struct LocalComm {
  vmmipc_comm_t c = nullptr;
  MPI_Comm mpi = MPI_COMM_NULL;  // the communicator it was made on (freed with it, unless the world's)
  vmmipc_heap_t heap = nullptr;
  Counts foot, heap_foot;        // what the comm and its heap hold here
  std::vector<LocalWin> wins;    // as CommInfo::wins
  std::vector<int> sockets;      // its connections to the node's ranks
  std::vector<unsigned long> socket_inos;  // their inodes then (an fd closed and reused since differs)
};
struct Local {
  LocalComm comm[kSlots];
  int me = 0, world = 1, device = 0;
  void *stream = nullptr;
  std::vector<int> pids;  // of every world rank
  int dead = -1;          // the world rank that was killed, once it was
};
// What a step carries from its call to its end (after the ranks' barrier).
struct StepCtx {
  Counts before;
  long long dev_before = -1;
  enum { kSame, kGrowComm, kGrowWin, kGrowHeap, kRelease, kUnknown } acct = kSame;
  Counts release;                 // kRelease: what the freed object held
  int new_win = -1;               // kGrowWin: its index
  vmmipc_buf_t send_buf = nullptr;  // send/recv: the sender's buffer, kept until the receiver looked
  bool recv_failed = false;       // send/recv: the receive gave up (a late message is drained after)
  uint64_t tag = 0;
};
// This rank's part of a step: the call, with its fault (RunStep); then,
// after every rank finished its call (a barrier), what reads the peers'
// writes and the accounting (FinishStep).
void RunStep(const Step &st, const State &s, const Options &o, const Layout &l, Local &L, StepCtx *x, Outcome *out);
void FinishStep(const Step &st, const State &s, const Options &o, const Layout &l, Local &L, StepCtx *x,
                Outcome *out);
// After every rank's FinishStep (a barrier): the device's memory after a
// failed collective (the real driver; the stand-in counts objects instead).
void CheckDeviceMemory(const Step &st, const StepCtx &x, Outcome *out);
// After a death: one allgather_map on every comm the victim was in; every
// survivor's must fail naming it.
void Probe(const State &s, Local &L, int victim, Outcome *out);
// Frees everything this rank holds: collectively (graceful) or, after a
// violation left the ranks out of step, locally (each comm aborted first).
void Teardown(State *s, Local &L, bool graceful);
// Applies the gathered outcomes to the state every rank knows.
void Apply(const Step &st, const std::vector<Outcome> &out, State *s);

// ---- checks (test_chaos_check.cc) ----
struct Verdicts;
// The violations of one step, from every rank's outcome (identical
// everywhere); empty when the contract held. *timeouts: the failures with
// no fault that were a TIMEOUT everywhere (counted, not violations).
std::vector<std::string> CheckStep(const Step &st, const State &s, const Layout &l, const Options &o,
                                   const std::vector<Outcome> &out, const std::vector<int> &alive, int *timeouts);
// The bound (seconds) on one call of op, from the contract.
double Bound(int op, int timeout_ms);
double Grace(int timeout_ms);  // what the test adds to every bound (stated in docs/dev/chaos.md)

// ---- counts and the last line (test_chaos_report.cc) ----
class Report {
 public:
  void Count(const Step &st, const std::vector<Outcome> &out, const std::vector<std::string> &violations);
  void Violation(const std::string &kind);  // one outside the steps (the warm-up, the end)
  void Timeouts(int n) { timeouts_ += n; }
  std::string Line(const Options &o, const Layout &l, int steps, int violations) const;
  long fired(int fault) const { return fault_fired_[fault]; }

 private:
  long op_[kOps] = {0}, fault_[kFaults] = {0}, fault_fired_[kFaults] = {0};
  std::vector<std::pair<std::string, long>> verdict_, kinds_;
  long drained_ = 0, timeouts_ = 0;
  static void Add(std::vector<std::pair<std::string, long>> *to, const std::string &name);
};
std::string ResultName(int rc);

}  // namespace chaos

#endif
