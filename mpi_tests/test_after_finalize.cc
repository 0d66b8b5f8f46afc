// An aborted comm's calls after MPI_Finalize make no MPI call (review of
// 9509df8, mended in f077d82): a call refused at entry and the destroy
// tell the other ranks of the abort over MPI, but not once MPI is
// finalized, as at exit (RAII, atexit). Open MPI aborts the job on a call
// after MPI_Finalize, so the exit status of each rank is the check. Its own
// main: a gtest process cannot finalize MPI and go on. TEST_THREAD_LEVEL=
// funneled initialises MPI with MPI_THREAD_FUNNELED, where the entry's
// main-thread check (MPI_Is_thread_main) is itself an MPI call.
// A healthy comm's calls after MPI_Finalize (a destructor that runs late)
// made MPI calls too, and Open MPI killed the job: they now fail with
// VMMIPC_ERR_MPI, break the comm, and the frees go locally.
#include <dirent.h>
#include <mpi.h>
#include <vmmipc.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

int g_failures = 0;

void Check(bool ok, int rank, const char *what, vmmipc_result_t r) {
  if (ok) return;
  std::fprintf(stderr, "[rank %d] FAILED: %s (result %d: %s)\n", rank, what, (int)r, vmmipc_last_error());
  g_failures++;
}

int OpenFds() {
  int n = 0;
  if (DIR *d = opendir("/proc/self/fd")) {
    while (readdir(d)) n++;
    closedir(d);
  }
  return n;
}

}  // namespace

int main(int argc, char **argv) {
  int provided = 0, rank = 0;
  const char *level = std::getenv("TEST_THREAD_LEVEL");
  const bool funneled = level && std::strcmp(level, "funneled") == 0;
  MPI_Init_thread(&argc, &argv, funneled ? MPI_THREAD_FUNNELED : MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  vmmipc_result_t r = vmmipc_set_device(0); // the heap needs a context
  Check(r == VMMIPC_SUCCESS, rank, "vmmipc_set_device(0)", r);
  vmmipc_comm_t c = nullptr, d = nullptr;
  r = vmmipc_comm_create(MPI_COMM_WORLD, nullptr, &c);
  Check(r == VMMIPC_SUCCESS, rank, "vmmipc_comm_create (first)", r);
  r = vmmipc_comm_create(MPI_COMM_WORLD, nullptr, &d);
  Check(r == VMMIPC_SUCCESS, rank, "vmmipc_comm_create (second)", r);
  vmmipc_comm_t e = nullptr; // stays healthy: a heap with a window, and MPI_Finalize under them
  vmmipc_heap_t h = nullptr;
  vmmipc_win_t w = nullptr;
  r = vmmipc_comm_create(MPI_COMM_WORLD, nullptr, &e);
  Check(r == VMMIPC_SUCCESS, rank, "vmmipc_comm_create (third)", r);
  if (e) r = vmmipc_heap_create(e, nullptr, &h);
  Check(r == VMMIPC_SUCCESS, rank, "vmmipc_heap_create", r);
  if (h) r = vmmipc_heap_alloc(h, 4096, &w);
  Check(r == VMMIPC_SUCCESS, rank, "vmmipc_heap_alloc before MPI_Finalize", r);
  int same = 0; // sockets to close only where the peer shares the node (not in a vnodes1 layout)
  if (e) r = vmmipc_comm_same_node(e, 1 - rank, &same);
  Check(r == VMMIPC_SUCCESS, rank, "vmmipc_comm_same_node", r);
  MPI_Barrier(MPI_COMM_WORLD); // every comm made everywhere before any abort
  if (c) vmmipc_comm_abort(c);
  if (d) vmmipc_comm_abort(d);
  MPI_Finalize();
  if (c) { // a collective refused at entry, then the destroy
    vmmipc_heap_t h = nullptr;
    r = vmmipc_heap_create(c, nullptr, &h);
    Check(r == VMMIPC_ERR_ABORTED, rank, "vmmipc_heap_create after the abort and MPI_Finalize is ABORTED", r);
    r = vmmipc_comm_destroy(c);
    Check(r == VMMIPC_SUCCESS, rank, "vmmipc_comm_destroy of the first comm after MPI_Finalize", r);
  }
  if (d) { // the destroy alone
    r = vmmipc_comm_destroy(d);
    Check(r == VMMIPC_SUCCESS, rank, "vmmipc_comm_destroy of the second comm after MPI_Finalize", r);
  }
  if (e && h && w) { // the healthy comm: its calls fail, its frees go locally
    const int before = OpenFds();
    vmmipc_win_t w2 = nullptr;
    r = vmmipc_heap_alloc(h, 4096, &w2);
    Check(r == VMMIPC_ERR_MPI && w2 == nullptr, rank, "vmmipc_heap_alloc after MPI_Finalize is VMMIPC_ERR_MPI", r);
    Check(std::strstr(vmmipc_last_error(), "MPI_Finalize") != nullptr, rank, "its message names MPI_Finalize", r);
    vmmipc_desc_t got = nullptr;
    r = vmmipc_recv(e, 1 - rank, &got);
    Check(r == VMMIPC_ERR_MPI && got == nullptr, rank, "vmmipc_recv on the broken comm is VMMIPC_ERR_MPI", r);
    r = vmmipc_win_free(w);
    Check(r == VMMIPC_ERR_MPI, rank, "vmmipc_win_free frees the window locally (VMMIPC_ERR_MPI)", r);
    r = vmmipc_heap_destroy(h);
    Check(r == VMMIPC_SUCCESS, rank, "vmmipc_heap_destroy after MPI_Finalize", r);
    r = vmmipc_comm_destroy(e);
    Check(r == VMMIPC_SUCCESS, rank, "vmmipc_comm_destroy of the healthy comm after MPI_Finalize", r);
    const int after = OpenFds();
    // On a GPU the window holds no fd (imported handles keep none), so
    // only the peer's socket can close; the stand-in's memory is fd-backed.
    const bool ok = same ? after < before : after <= before;
    Check(ok, rank, same ? "the healthy comm's socket to its node peer closed" : "the frees opened no fd", r);
    if (!ok) std::fprintf(stderr, "[rank %d] %d fds open before the frees, %d after\n", rank, before, after);
  }
  if (!g_failures) std::printf("[rank %d] ok: no MPI call after MPI_Finalize\n", rank);
  return g_failures ? 1 : 0;
}
