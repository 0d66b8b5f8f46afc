// test_chaos: `mpirun -np N test_chaos --seed S --steps K [options]`
// (docs/dev/chaos.md). The node layout comes from VMMIPC_NODE_ID, which
// harness/chaos_node.sh sets from VMMIPC_TEST_LAYOUT. Each step: a barrier,
// every rank's part (RunStep), a barrier, the reads of the peers' writes
// and the accounting (FinishStep), then every rank's outcome gathered and
// checked. The last line is "chaos: seed=S steps=K violations=V ..."; the
// exit status is 0 only when V is 0. A violation prints the command that
// replays the run up to that step.
#include <execinfo.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>

#include "test_chaos.h"

extern char **environ;

namespace chaos {
namespace {

int g_me = 0;
char g_replay[4096];  // for the crash handler: no allocation there
volatile int g_step = -1;

void Usage() {
  std::fprintf(stderr,
               "usage: test_chaos --seed S --steps K [--timeout-ms T] [--fault-rate P] [--kill [--kill-step I]]\n"
               "                  [--verbose]\n"
               "                  [--skip NAME,...] [--known NAME,...] [--max-violations N]\n"
               "  --kill   the launcher lets the job go on after a death (Open MPI: --mca orte_enable_recovery 1,\n"
               "           MPICH: -disable-auto-cleanup): one rank is SIGKILLed at a random step\n"
               "  --kill-step  that step (the first from I that makes no comm; default: drawn from the seed\n"
               "           in the second half of --steps); the replay command names it\n"
               "  --skip   operations or fault kinds left out (names as in the last line)\n"
               "  --known  combinations of known defects left out (docs/dev/chaos.md lists them)\n");
}

std::vector<std::string> Split(const std::string &s) {
  std::vector<std::string> v;
  size_t a = 0;
  while (a <= s.size()) {
    size_t b = s.find(',', a);
    if (b == std::string::npos) b = s.size();
    if (b > a) v.push_back(s.substr(a, b - a));
    a = b + 1;
  }
  return v;
}

bool Parse(int argc, char **argv, Options *o) {
  const char *t = std::getenv("VMMIPC_TIMEOUT_MS");
  if (t && std::atoi(t) > 0) o->timeout_ms = std::atoi(t);
  o->skip_op.assign(kOps, 0);
  o->skip_fault.assign(kFaults, 0);
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    auto val = [&]() -> const char * { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--seed") o->seed = std::strtoull(val(), nullptr, 10);
    else if (a == "--steps") o->steps = std::atoi(val());
    else if (a == "--timeout-ms") o->timeout_ms = std::atoi(val());
    else if (a == "--fault-rate") o->fault_rate = std::atof(val());
    else if (a == "--kill") o->kill = true;
    else if (a == "--kill-step") o->kill_step = std::atoi(val());
    else if (a == "--verbose") o->verbose = true;
    else if (a == "--max-violations") o->max_violations = std::atoi(val());
    else if (a == "--known") {
      o->known = Split(val());
      static const char *const names[] = {"lost_verdict", "abort_destroy", "stall_withdrawals", "abort_vote",
                                          "abort_rank", "timeout_blame", "trim_releases"};
      for (const std::string &k : o->known)
        if (std::find(std::begin(names), std::end(names), k) == std::end(names)) {
          std::fprintf(stderr, "test_chaos: --known %s: no such defect (docs/dev/chaos.md lists them)\n", k.c_str());
          return false;
        }
    }
    else if (a == "--skip") {
      for (const std::string &n : Split(val())) {
        int op = OpByName(n), f = FaultByName(n);
        if (op >= 0) o->skip_op[static_cast<size_t>(op)] = 1;
        else if (f >= 0) o->skip_fault[static_cast<size_t>(f)] = 1;
        else {
          std::fprintf(stderr, "test_chaos: --skip %s: no such operation or fault kind\n", n.c_str());
          return false;
        }
      }
    } else {
      return false;
    }
  }
  return o->steps > 0 && o->timeout_ms > 0;
}

// Node of every world rank: VMMIPC_NODE_ID (as vmmipc reads it) on each host.
Layout MakeLayout(int world) {
  char key[256] = {0};
  char host[128] = {0};
  gethostname(host, sizeof host - 1);
  const char *id = std::getenv("VMMIPC_NODE_ID");
  std::snprintf(key, sizeof key, "%s/%s", host, id ? id : "");
  std::vector<char> all(static_cast<size_t>(world) * sizeof key);
  MPI_Allgather(key, sizeof key, MPI_CHAR, all.data(), sizeof key, MPI_CHAR, MPI_COMM_WORLD);
  Layout l;
  std::vector<std::string> seen;
  for (int r = 0; r < world; r++) {
    std::string k(&all[static_cast<size_t>(r) * sizeof key]);
    size_t i = 0;
    while (i < seen.size() && seen[i] != k) i++;
    if (i == seen.size()) seen.push_back(k);
    l.node.push_back(static_cast<int>(i));
    l.text += (r ? "," : "") + std::to_string(i);
  }
  return l;
}

std::string Quote(const std::string &s) {
  if (s.find_first_of(" \t'\"$\\;&|<>*?()") == std::string::npos) return s;
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// The command that replays this run for `steps` steps (from the shell the
// launcher needs: scripts/env.sh for Open MPI as root).
std::string Replay(const Options &o, const Layout &l, int steps) {
  std::string cmd = "VMMIPC_TEST_LAYOUT=" + l.text;
  for (char **e = environ; *e; e++) {
    std::string kv = *e;
    // The launcher puts many OMPI_MCA_ settings of its own in the ranks' environment: only this one is ours.
    if ((kv.rfind("VMMIPC_", 0) == 0 || kv.rfind("OMPI_MCA_mpi_yield_when_idle=", 0) == 0 ||
         kv.rfind("CUDA_VISIBLE_DEVICES=", 0) == 0) &&
        kv.rfind("VMMIPC_NODE_ID=", 0) != 0 && kv.rfind("VMMIPC_TEST_LAYOUT=", 0) != 0)
      cmd += " " + Quote(kv);
  }
  char exe[1024] = {0};
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n < 0) std::snprintf(exe, sizeof exe, "test_chaos");
  cmd += std::string(" ") + CHAOS_MPIEXEC + " " + CHAOS_MPIEXEC_ARGS;
  if (o.kill) cmd += std::string(" ") + CHAOS_RECOVERY;
  cmd += std::string(" ") + CHAOS_NP_FLAG + " " + std::to_string(l.node.size()) + " " + CHAOS_NODE_SH + " " + exe;
  cmd += " --seed " + std::to_string(o.seed) + " --steps " + std::to_string(steps) +
         " --timeout-ms " + std::to_string(o.timeout_ms);
  char rate[32];
  std::snprintf(rate, sizeof rate, "%g", o.fault_rate);
  cmd += std::string(" --fault-rate ") + rate;
  // The kill's step is drawn from --steps: named, so that a replay of
  // fewer steps kills at the same one (chaos seed 30014).
  if (o.kill) cmd += " --kill";
  int kill_step = Planner::KillStep(o);
  if (kill_step >= 0) cmd += " --kill-step " + std::to_string(kill_step);
  std::string skip;
  for (int i = 0; i < kOps; i++)
    if (o.skip_op[static_cast<size_t>(i)]) skip += (skip.empty() ? "" : ",") + std::string(OpName(i));
  for (int i = 0; i < kFaults; i++)
    if (o.skip_fault[static_cast<size_t>(i)]) skip += (skip.empty() ? "" : ",") + std::string(FaultName(i));
  if (!skip.empty()) cmd += " --skip " + skip;
  std::string known;
  for (const std::string &k : o.known) known += (known.empty() ? "" : ",") + k;
  if (!known.empty()) cmd += " --known " + known;
  return cmd;
}

void OnCrash(int sig) {
  char b[160];
  int n = std::snprintf(b, sizeof b, "chaos: CRASH: rank %d died of signal %d in step %d; replay:\n", g_me, sig, g_step);
  if (write(2, b, static_cast<size_t>(n)) < 0) _exit(3);
  if (write(2, g_replay, std::strlen(g_replay)) < 0) _exit(3);
  if (write(2, "\n", 1) < 0) _exit(3);
  void *f[64];
  backtrace_symbols_fd(f, backtrace(f, 64), 2);
  _exit(3);
}

// Ends a rank that stays in one step far longer than any bound: a hang
// becomes a named failure with its replay command.
class Watchdog {
 public:
  Watchdog() : t_([this] { Run(); }) {}
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> g(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    t_.join();
  }
  void Arm(const std::string &what, double seconds) {
    std::lock_guard<std::mutex> g(mu_);
    what_ = what;
    deadline_ = std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<long>(seconds * 1000));
    armed_ = true;
    cv_.notify_all();
  }

 private:
  void Run() {
    std::unique_lock<std::mutex> g(mu_);
    while (!stop_) {
      if (!armed_) {
        cv_.wait(g);
        continue;
      }
      if (cv_.wait_until(g, deadline_) == std::cv_status::timeout && !stop_ &&
          std::chrono::steady_clock::now() >= deadline_) {
        std::fprintf(stderr, "chaos: HANG: rank %d is still in %s; replay:\n%s\n", g_me, what_.c_str(), g_replay);
        std::fflush(stderr);
        _exit(4);
      }
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false, armed_ = false;
  std::string what_;
  std::chrono::steady_clock::time_point deadline_;
  std::thread t_;
};

// The comm of the survivors (every rank but the victim), made by them.
MPI_Comm Survivors(int victim) {
  MPI_Group world = MPI_GROUP_NULL, alive = MPI_GROUP_NULL;
  MPI_Comm_group(MPI_COMM_WORLD, &world);
  MPI_Group_excl(world, 1, &victim, &alive);
  MPI_Comm c = MPI_COMM_NULL;
  MPI_Comm_create_group(MPI_COMM_WORLD, alive, 7, &c);
  MPI_Group_free(&alive);
  MPI_Group_free(&world);
  return c;
}

// Every rank's outcome, indexed by world rank (the victim's stays empty).
std::vector<Outcome> Gather(const Outcome &mine, MPI_Comm over, int world, int victim) {
  int n = 0;
  MPI_Comm_size(over, &n);
  std::vector<Outcome> got(static_cast<size_t>(n)), all(static_cast<size_t>(world));
  MPI_Allgather(&mine, sizeof mine, MPI_BYTE, got.data(), sizeof mine, MPI_BYTE, over);
  for (int i = 0, w = 0; w < world; w++) {
    if (w == victim) continue;
    all[static_cast<size_t>(w)] = got[static_cast<size_t>(i++)];
  }
  return all;
}

// A comm made, mapped and freed once before counting: MPI's and the
// driver's lazily opened fds are then part of the baseline. Returns what
// failed ("" if nothing): a violation like any other.
std::string WarmUp(const Options &o) {
  vmmipc_config_t cfg = VMMIPC_CONFIG_INIT;
  cfg.timeout_ms = o.timeout_ms * 20;
  cfg.map_cache_entries = 0;
  vmmipc_comm_t c = nullptr;
  if (vmmipc_comm_create(MPI_COMM_WORLD, &cfg, &c)) return std::string("vmmipc_comm_create: ") + vmmipc_last_error();
  vmmipc_buf_t b = nullptr;
  vmmipc_win_t w = nullptr;
  std::string why;
  if (vmmipc_alloc(1, &b)) why = vmmipc_last_error();
  else if (vmmipc_allgather_map(c, b, nullptr, &w)) why = vmmipc_last_error();
  else if (vmmipc_win_free(w)) why = vmmipc_last_error();
  vmmipc_buf_free(b);
  if (vmmipc_comm_destroy(c) && why.empty()) why = vmmipc_last_error();
  return why;
}

}  // namespace
}  // namespace chaos

int main(int argc, char **argv) {
  using namespace chaos;
  // MPICH's launcher tells survivors of a death with SIGUSR1 (-disable-auto-cleanup).
  signal(SIGUSR1, SIG_IGN);
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &g_me);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  Options o;
  if (!Parse(argc, argv, &o)) {
    if (g_me == 0) Usage();
    MPI_Finalize();
    return 2;
  }
  Layout l = MakeLayout(world);
  std::snprintf(g_replay, sizeof g_replay, "%s", Replay(o, l, o.steps).c_str());
  signal(SIGSEGV, OnCrash);
  signal(SIGBUS, OnCrash);
  signal(SIGABRT, OnCrash);
  Local L;
  L.me = g_me;
  L.world = world;
  L.pids.assign(static_cast<size_t>(world), 0);
  int pid = static_cast<int>(getpid());
  MPI_Allgather(&pid, 1, MPI_INT, L.pids.data(), 1, MPI_INT, MPI_COMM_WORLD);
  int devices = 0, near = 0;
  for (int w = 0; w < g_me; w++) near += l.node[static_cast<size_t>(w)] == l.node[static_cast<size_t>(g_me)];
  if (vmmipc_device_count(&devices) || devices <= 0 || vmmipc_set_device(near % devices)) {
    std::fprintf(stderr, "chaos: rank %d: no device: %s\n", g_me, vmmipc_last_error());
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  L.device = near % devices;
  L.stream = StreamCreate();
  std::string warm = WarmUp(o);
  MPI_Barrier(MPI_COMM_WORLD);
  const Counts baseline = TakeCounts();
  if (g_me == 0 && !Standin())
    std::fprintf(stderr, "chaos: the real driver: driver objects are not counted (device memory is); every fault "
                         "runs here (none is the stand-in's own)\n");

  Planner plan(o, l);
  State s;
  Report rep;
  Watchdog dog;
  int violations = 0, steps = 0, printer = 0;
  bool replay_shown = false;
  MPI_Comm over = MPI_COMM_WORLD;
  std::vector<int> alive(static_cast<size_t>(world), 1);
  {
    int bad = !warm.empty(), any = 0;
    MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (bad) std::fprintf(stderr, "chaos: VIOLATION in the warm-up (a comm, one allgather_map, its win_free): rank %d: %s\n", g_me, warm.c_str());
    violations += any;
    for (int k = 0; k < any; k++) rep.Violation("warmup");
  }
  for (int i = 0; i < o.steps && violations < o.max_violations; i++) {
    Step st = plan.Next(s, i);
    std::string what = st.Describe(s);
    g_step = i;
    dog.Arm(what, 8.0 * o.timeout_ms / 1000.0 + 60);
    if (o.verbose && g_me == printer) std::fprintf(stderr, "chaos: %s\n", what.c_str());
    MPI_Barrier(MPI_COMM_WORLD);  // every rank is alive here
    const bool death = st.fault == kKill;
    if (death) {
      L.dead = st.target;
      alive[static_cast<size_t>(st.target)] = 0;
      printer = st.target == 0 ? 1 : 0;
      if (g_me != st.target) over = Survivors(st.target);
    }
    StepCtx x;
    Outcome out;
    RunStep(st, s, o, l, L, &x, &out);
    if (death && g_me == st.target)
      for (;;) pause();  // its killer thread ends it
    MPI_Barrier(over);
    FinishStep(st, s, o, l, L, &x, &out);
    MPI_Barrier(over);
    CheckDeviceMemory(st, x, &out);
    if (o.verbose && !death) PrintUnread(L, g_me, i);  // after a death the probes already send
    if (death) Probe(s, L, st.target, &out);
    std::vector<Outcome> all = Gather(out, over, world, death ? st.target : -1);
    int timeouts = 0;
    std::vector<std::string> v = CheckStep(st, s, l, o, all, alive, &timeouts);
    rep.Timeouts(timeouts);
    steps = i + 1;
    if (o.verbose && g_me == printer) {
      std::string line;
      for (int w = 0; w < world; w++) {
        const Outcome &a = all[static_cast<size_t>(w)];
        if (!alive[static_cast<size_t>(w)] || !a.member) continue;
        line += " " + std::to_string(w) + ":" + ResultName(a.rc) + (a.named >= 0 ? "@" + std::to_string(a.named) : "") +
                (a.fired ? "*" : "") + (a.failed_after ? "(failed)" : "");
      }
      const long long used = DeviceUsed();  // the real driver only: every process's use of the GPU
      if (used >= 0 && x.dev_before >= 0)
        line += " [GPU memory in use " + std::to_string(x.dev_before >> 20) + " -> " + std::to_string(used >> 20) +
                " MiB]";
      std::fprintf(stderr, "chaos:   ->%s\n", line.c_str());
    }
    rep.Count(st, all, v);
    if (!v.empty() && g_me == printer) {
      for (const std::string &line : v) std::fprintf(stderr, "chaos: VIOLATION in %s: %s\n", what.c_str(), line.c_str());
      if (!replay_shown) std::fprintf(stderr, "chaos: replay: %s\n", Replay(o, l, i + 1).c_str());
      replay_shown = true;
    }
    violations += static_cast<int>(v.size());
    Apply(st, all, &s);
    if (death) break;
    if (!v.empty()) Teardown(&s, L, false);  // the ranks may be out of step: start afresh
  }
  // The end: everything freed, and every rank holds what it held at the start.
  dog.Arm("the teardown at the end", 8.0 * o.timeout_ms / 1000.0 + 60);
  Teardown(&s, L, L.dead < 0 && violations == 0);
  MPI_Barrier(over);
  Counts end = TakeCounts();
  Outcome fin;
  fin.member = 1;
  if (!(end == baseline) || end.sockets != baseline.sockets) {
    fin.acct_bad = 1;
    std::snprintf(fin.note, sizeof fin.note, "holds %s at the end, against %s at the start", end.Str().c_str(),
                  baseline.Str().c_str());
  }
  std::vector<Outcome> all = Gather(fin, over, world, L.dead);
  for (int w = 0; w < world; w++)
    if (alive[static_cast<size_t>(w)] && all[static_cast<size_t>(w)].acct_bad) {
      if (g_me == printer) std::fprintf(stderr, "chaos: VIOLATION at the end: leak: rank %d: %s\n", w, all[static_cast<size_t>(w)].note);
      violations++;
      rep.Violation("leak");
    }
  StreamDestroy(L.stream);
  if (g_me == printer) {
    if (violations && !replay_shown) std::fprintf(stderr, "chaos: replay: %s\n", Replay(o, l, steps).c_str());
    if (L.dead >= 0) std::printf("chaos: rank %d was killed at step %d; %d survivors checked\n", L.dead, steps - 1, world - 1);
    std::printf("%s\n", rep.Line(o, l, steps, violations).c_str());
    std::fflush(stdout);
  }
  if (L.dead >= 0) {
    // No MPI_Finalize with a dead rank: the survivors leave together.
    MPI_Barrier(over);
    std::fflush(nullptr);
    _exit(violations ? 1 : 0);
  }
  MPI_Finalize();
  return violations ? 1 : 0;
}
