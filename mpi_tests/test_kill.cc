// Fail fast on death (issue 21, section 2): one rank is SIGKILLed while the
// others wait in a collective's agreement, under an mpirun that lets the
// job go on (Open MPI --mca orte_enable_recovery 1, MPICH
// -disable-auto-cleanup), with a 60 s timeout. Every survivor must get
// VMMIPC_ERR_PEER naming the dead rank well within the timeout. Not a gtest
// suite: the job cannot finalize with a dead rank, so each survivor prints
// one "KILLTEST OK" or "KILLTEST FAIL" line and exits; harness/killrun.sh
// counts them. A survivor's stream waiting on the dead rank completes too.
// With VMMIPC_TEST_KILL_LOOP set, the victim dies at a random moment of a
// loop of map collectives instead, and every survivor must fail one call
// well within the timeout naming it, then free everything at once.
#include <mpi.h>
#include <execinfo.h>
#include <signal.h>
#include <unistd.h>

#include <cuda.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "common/testhooks.h"
#include "vmmipc.h"

static void OnCrash(int sig) {
  void *f[64];
  int n = backtrace(f, 64);
  std::fprintf(stderr, "KILLTEST CRASH signal %d\n", sig);
  backtrace_symbols_fd(f, n, 2);
  _exit(3);
}

int main(int argc, char **argv) {
  signal(SIGSEGV, OnCrash);
  // MPICH's launcher (-disable-auto-cleanup) tells the survivors of a death
  // with SIGUSR1, which would end them: the test is about what vmmipc tells.
  signal(SIGUSR1, SIG_IGN);
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  // Every pair talks once before the kill: an MPI that connects lazily
  // (MPICH asks its launcher for the address) has nothing in flight with
  // the launcher when the victim dies.
  std::vector<int> out(static_cast<size_t>(size), rank), in(static_cast<size_t>(size), 0);
  MPI_Alltoall(out.data(), 1, MPI_INT, in.data(), 1, MPI_INT, MPI_COMM_WORLD);
  const char *v = std::getenv("VMMIPC_TEST_VICTIM");
  int victim = v && std::strcmp(v, "last") == 0 ? size - 1 : (v ? std::atoi(v) : size - 1);
  const int timeout_ms = 60000;
  auto fail = [&](const std::string &why) {
    std::printf("KILLTEST FAIL rank %d: %s\n", rank, why.c_str());
    std::fflush(stdout);
    _exit(1);
  };
  int n = 0;
  if (vmmipc_device_count(&n) || n <= 0 || vmmipc_set_device(rank % n)) fail(vmmipc_last_error());
  vmmipc_config_t cfg = VMMIPC_CONFIG_INIT;
  cfg.timeout_ms = timeout_ms;
  vmmipc_comm_t c = nullptr;
  if (vmmipc_comm_create(MPI_COMM_WORLD, &cfg, &c)) fail(vmmipc_last_error());
  vmmipc_win_t w = nullptr;
  if (vmmipc_allgather_map(c, nullptr, nullptr, &w) || vmmipc_win_free(w)) fail(vmmipc_last_error());
  // A window stays open, and each survivor's stream waits on the victim's
  // signal, which never comes: once the survivor learns of the death, the
  // wait is released (VMMIPC_SIGNAL_FAILED) and the stream completes.
  vmmipc_win_t w0 = nullptr;
  if (vmmipc_allgather_map(c, nullptr, nullptr, &w0)) fail(vmmipc_last_error());
  using StreamFn = CUresult (*)(CUstream);
  CUresult (*stream_create)(CUstream *, unsigned) = nullptr;
  StreamFn stream_sync = nullptr, stream_destroy = nullptr;
  void *fp = nullptr;
  if (vmmipc_driver_proc("cuStreamCreate", 0, &fp)) fail(vmmipc_last_error());
  stream_create = reinterpret_cast<decltype(stream_create)>(fp);
  if (vmmipc_driver_proc("cuStreamSynchronize", 0, &fp)) fail(vmmipc_last_error());
  stream_sync = reinterpret_cast<StreamFn>(fp);
  if (vmmipc_driver_proc("cuStreamDestroy", 0, &fp)) fail(vmmipc_last_error());
  stream_destroy = reinterpret_cast<StreamFn>(fp);
  CUstream s0 = nullptr;
  if (stream_create(&s0, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) fail("cuStreamCreate");
  std::atomic<int> waiting{0};
  CUresult wait_rc = CUDA_ERROR_UNKNOWN;
  std::thread waiter;
  int near = 0;  // the victim shares this rank's node: its stream waits on it
  vmmipc_comm_same_node(c, victim, &near);
  if (rank != victim && near) {
    waiter = std::thread([&] {
      if (vmmipc_set_device(rank % n)) return;
      waiting = 1;
      vmmipc_win_wait(w0, victim, 1, s0);  // blocks here on the stand-in
      wait_rc = stream_sync(s0);           // here on a GPU
      waiting = 2;
    });
    while (!waiting) std::this_thread::yield();
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (std::getenv("VMMIPC_TEST_KILL_LOOP")) {
    // The victim dies at a random moment (1.8-2.6 s) of a loop of map
    // collectives and frees, as a crash would: no step is chosen for it.
    std::srand(static_cast<unsigned>(getpid()));
    if (rank == victim) {
      std::thread([] {
        std::this_thread::sleep_for(std::chrono::milliseconds(1800 + std::rand() % 800));
        raise(SIGKILL);
      }).detach();
    }
    vmmipc_buf_t lb = nullptr;
    if (vmmipc_alloc(2u << 20, &lb)) fail(vmmipc_last_error());
    std::string name = "rank " + std::to_string(victim), msg;
    vmmipc_result_t r = VMMIPC_SUCCESS;
    double worst = 0;
    int calls = 0;
    for (auto start = std::chrono::steady_clock::now();
         !r && std::chrono::steady_clock::now() - start < std::chrono::seconds(30); calls++) {
      auto t0 = std::chrono::steady_clock::now();
      vmmipc_win_t lw = nullptr;
      r = vmmipc_allgather_map(c, lb, nullptr, &lw);
      if (!r) r = vmmipc_win_free(lw);
      double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (s > worst) worst = s;
      if (r) msg = vmmipc_last_error();
    }
    if (rank == victim) pause();
    if (!r) fail("30 s of collectives and nobody noticed the death");
    if (msg.empty()) fail("an empty message");
    if (msg.find(name) == std::string::npos) fail("the message does not name " + name + ": " + msg);
    if (worst >= timeout_ms / 1000.0 / 2)
      fail("a call took " + std::to_string(worst) + " s of a " + std::to_string(timeout_ms) + " ms timeout: " + msg);
    auto t1 = std::chrono::steady_clock::now();
    vmmipc_win_free(w0);  // local now
    if (near) {
      waiter.join();
      if (wait_rc != CUDA_SUCCESS) fail("the stream waiting on the dead rank did not complete");
    }
    stream_destroy(s0);
    if (vmmipc_comm_destroy(c)) fail(std::string("destroy: ") + vmmipc_last_error());
    double rest = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
    if (rest >= 1.0) fail("freeing after the failure took " + std::to_string(rest) + " s");
    vmmipc_buf_free(lb);
    std::printf("KILLTEST OK rank %d: %d calls, the failing one %s: %s\n", rank, calls,
                vmmipc_strerror(r), msg.c_str());
    std::fflush(stdout);
    MPI_Group world = MPI_GROUP_NULL, alive = MPI_GROUP_NULL;
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    MPI_Group_excl(world, 1, &victim, &alive);
    MPI_Comm survivors = MPI_COMM_NULL;
    if (MPI_Comm_create_group(MPI_COMM_WORLD, alive, 5, &survivors) == MPI_SUCCESS) MPI_Barrier(survivors);
    _exit(0);
  }
  // The victim finishes the exchange, never answers the agreement, and dies:
  // the survivors are in the agreement, waiting on it (or, for rank 0, on
  // the collector's verdict).
  if (rank == victim) vmmipc__test_fail_at("agree", 1);
  vmmipc_buf_t b = nullptr;
  if (vmmipc_alloc(2u << 20, &b)) fail(vmmipc_last_error());
  auto t0 = std::chrono::steady_clock::now();
  vmmipc_result_t r = vmmipc_allgather_map(c, b, nullptr, &w);
  if (rank == victim) raise(SIGKILL);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::string msg = vmmipc_last_error();
  std::string name = "rank " + std::to_string(victim);
  if (r != VMMIPC_ERR_PEER) fail(std::string("expected VMMIPC_ERR_PEER, got ") + vmmipc_strerror(r) + ": " + msg);
  if (msg.find(name) == std::string::npos) fail("the message does not name " + name + ": " + msg);
  if (s >= timeout_ms / 1000.0 / 2) fail("took " + std::to_string(s) + " s of a " + std::to_string(timeout_ms) +
                                         " ms timeout: " + msg);
  if (near) {
    waiter.join();
    if (wait_rc != CUDA_SUCCESS)
      fail("the stream waiting on the dead rank did not complete: " + std::to_string(wait_rc));
    if (vmmipc_win_wait_host(w0, victim, 1, 100) != VMMIPC_ERR_PEER) fail("a host wait after the death did not fail");
  }
  if (vmmipc_win_free(w0) != VMMIPC_ERR_PEER) fail("win_free on the broken comm did not report it");
  stream_destroy(s0);
  if (vmmipc_comm_destroy(c)) fail(std::string("destroy: ") + vmmipc_last_error());
  vmmipc_buf_free(b);
  std::printf("KILLTEST OK rank %d: %.3f s: %s\n", rank, s, msg.c_str());
  std::fflush(stdout);
  // The survivors leave together: a launcher may end the job when one rank
  // exits without MPI_Finalize (MPICH's does), before the others printed.
  MPI_Group world = MPI_GROUP_NULL, alive = MPI_GROUP_NULL;
  MPI_Comm_group(MPI_COMM_WORLD, &world);
  MPI_Group_excl(world, 1, &victim, &alive);
  MPI_Comm survivors = MPI_COMM_NULL;
  if (MPI_Comm_create_group(MPI_COMM_WORLD, alive, 5, &survivors) == MPI_SUCCESS) MPI_Barrier(survivors);
  _exit(0);  // no MPI_Finalize: a rank of the job is dead
}
