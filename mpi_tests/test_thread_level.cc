// Below MPI_THREAD_SERIALIZED a call from a thread other than MPI's main one
// is refused (INVALID_ARG). It must be refused before it is counted inside
// vmmipc: counted, even while it asks MPI, it made the main thread's
// concurrent call on another comm return BUSY on this rank alone (a
// watchdog's call under MPI_THREAD_FUNNELED; stop 45's mend, which had no
// test). The hook "thread_check_slow" holds the refused thread 300 ms just
// before it asks MPI; the main thread's collective on another comm runs
// meanwhile and must succeed. Its own main: MPI_THREAD_FUNNELED.
//
// Second part: vmmipc_comm_abort lands while another thread's call holds
// the comm and is about to be refused at entry (the same hook). The abort
// cannot tell the peers then (the comm is held); the refused call must, as
// it lets the comm go: rank 1, blocked in vmmipc_recv from rank 0, fails
// ABORTED at once, naming rank 0, not at its 10 s timeout. Rank 0 touches
// the comm no further until rank 1 is done (its destroy would tell).
#include <mpi.h>
#include <vmmipc.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "common/testhooks.h"

namespace {

int g_failures = 0;

void Check(bool ok, int rank, const char *what, vmmipc_result_t r, const char *msg) {
  if (ok) return;
  std::fprintf(stderr, "[rank %d] FAILED: %s (result %d: %s)\n", rank, what, (int)r, msg);
  g_failures++;
}

void AbortDuringARefusedEntry(int rank) {
  vmmipc_config_t cfg = VMMIPC_CONFIG_INIT;
  cfg.timeout_ms = 10000;
  vmmipc_comm_t c = nullptr;
  vmmipc_result_t r = vmmipc_comm_create(MPI_COMM_WORLD, &cfg, &c);
  Check(r == VMMIPC_SUCCESS, rank, "vmmipc_comm_create (c)", r, vmmipc_last_error());
  if (!c) return;
  int token = 0;
  if (rank == 0) {
    vmmipc_result_t refused = VMMIPC_SUCCESS;
    char refused_msg[512] = "";
    std::thread other([&] {  // not MPI's main thread: held inside the comm, then refused
      vmmipc__test_fail_at("thread_check_slow", 1);
      vmmipc_heap_t h = nullptr;
      refused = vmmipc_heap_create(c, nullptr, &h);
      std::snprintf(refused_msg, sizeof refused_msg, "%s", vmmipc_last_error());
      vmmipc__test_fail_at(nullptr, 0);
    });
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (vmmipc__test_stalling() == 0 && std::chrono::steady_clock::now() < until) std::this_thread::yield();
    Check(vmmipc__test_stalling() > 0, rank, "the other thread is held by thread_check_slow", VMMIPC_SUCCESS, "");
    r = vmmipc_comm_abort(c);
    Check(r == VMMIPC_SUCCESS, rank, "vmmipc_comm_abort", r, vmmipc_last_error());
    other.join();
    Check(refused == VMMIPC_ERR_INVALID_ARG, rank, "the other thread's call is refused", refused, refused_msg);
    MPI_Recv(&token, 1, MPI_INT, 1, 31, MPI_COMM_WORLD, MPI_STATUS_IGNORE);  // rank 1 is done
  } else if (rank == 1) {
    const auto t0 = std::chrono::steady_clock::now();
    vmmipc_desc_t d = nullptr;
    r = vmmipc_recv(c, 0, &d);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    vmmipc_error_info_t info = VMMIPC_ERROR_INFO_INIT;
    vmmipc_last_error_info(&info);
    char what[96];
    std::snprintf(what, sizeof what, "vmmipc_recv fails ABORTED naming rank 0 at once (%.2f s)", s);
    Check(r == VMMIPC_ERR_ABORTED && info.rank == 0 && s < 5.0, rank, what, r, vmmipc_last_error());
    vmmipc_desc_free(d);
    MPI_Send(&token, 1, MPI_INT, 0, 31, MPI_COMM_WORLD);
  }
  r = vmmipc_comm_destroy(c);  // frees it; on rank 1 it reports rank 0's abort
  Check(r == VMMIPC_SUCCESS || (rank != 0 && r == VMMIPC_ERR_ABORTED), rank, "vmmipc_comm_destroy (c)", r,
        vmmipc_last_error());
}

}  // namespace

int main(int argc, char **argv) {
  int provided = 0, rank = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (provided != MPI_THREAD_FUNNELED) {
    std::fprintf(stderr, "[rank %d] FAILED: MPI provides thread level %d, not MPI_THREAD_FUNNELED\n", rank, provided);
    MPI_Finalize();
    return 1;
  }
  vmmipc_result_t r = vmmipc_set_device(0);
  Check(r == VMMIPC_SUCCESS, rank, "vmmipc_set_device(0)", r, vmmipc_last_error());
  vmmipc_comm_t a = nullptr, b = nullptr;
  r = vmmipc_comm_create(MPI_COMM_WORLD, nullptr, &a);
  Check(r == VMMIPC_SUCCESS, rank, "vmmipc_comm_create (a)", r, vmmipc_last_error());
  r = vmmipc_comm_create(MPI_COMM_WORLD, nullptr, &b);
  Check(r == VMMIPC_SUCCESS, rank, "vmmipc_comm_create (b)", r, vmmipc_last_error());
  if (a && b) {
    vmmipc_result_t refused = VMMIPC_SUCCESS;
    char refused_msg[512] = "";
    std::thread watchdog([&] {  // not MPI's main thread
      vmmipc__test_fail_at("thread_check_slow", 1);  // per thread
      vmmipc_heap_t h = nullptr;
      refused = vmmipc_heap_create(a, nullptr, &h);
      std::snprintf(refused_msg, sizeof refused_msg, "%s", vmmipc_last_error());
      vmmipc__test_fail_at(nullptr, 0);
    });
    // It is held before MPI's answer (bounded: a hook that never fires fails here).
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (vmmipc__test_stalling() == 0 && std::chrono::steady_clock::now() < until) std::this_thread::yield();
    const bool held = vmmipc__test_stalling() > 0;
    Check(held, rank, "the other thread is held by thread_check_slow", VMMIPC_SUCCESS, "");
    // Collective on the other comm, entered during the hold (where the old
    // order counted the held thread inside vmmipc).
    vmmipc_heap_t h = nullptr;
    r = vmmipc_heap_create(b, nullptr, &h);
    Check(r == VMMIPC_SUCCESS, rank, "the main thread's vmmipc_heap_create on another comm", r, vmmipc_last_error());
    watchdog.join();
    Check(refused == VMMIPC_ERR_INVALID_ARG && std::strstr(refused_msg, "other than MPI's main thread"), rank,
          "the other thread's call is refused", refused, refused_msg);
    r = vmmipc_heap_destroy(h);
    Check(r == VMMIPC_SUCCESS, rank, "vmmipc_heap_destroy", r, vmmipc_last_error());
  }
  r = vmmipc_comm_destroy(a);
  Check(r == VMMIPC_SUCCESS, rank, "vmmipc_comm_destroy (a)", r, vmmipc_last_error());
  r = vmmipc_comm_destroy(b);
  Check(r == VMMIPC_SUCCESS, rank, "vmmipc_comm_destroy (b)", r, vmmipc_last_error());
  AbortDuringARefusedEntry(rank);
  if (!g_failures) std::printf("[rank %d] ok: the refused thread was not counted; its abort was told\n", rank);
  MPI_Finalize();
  return g_failures ? 1 : 0;
}
