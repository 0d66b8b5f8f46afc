/* A program built against the installed library. Under an MPI launcher with
 * VMMIPC_CUDA_DRIVER naming a driver (the installed stand-in in CI), every
 * rank allocates a buffer, maps its node peers' with allgather_map and
 * checks what it sees; without a driver it only checks the version. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vmmipc.h"

#define STR_(x) #x
#define STR(x) STR_(x)

static int fail(int rank, const char *what) {
  fprintf(stderr, "consumer rank %d: %s: %s\n", rank, what, vmmipc_last_error());
  return 1;
}

static int share(int rank, int size) {
  vmmipc_comm_t comm;
  if (vmmipc_comm_create(MPI_COMM_WORLD, NULL, &comm) != VMMIPC_SUCCESS) return fail(rank, "vmmipc_comm_create");
  int ndev = 0, bad = 0, mapped = 0;
  vmmipc_buf_t buf = NULL;
  vmmipc_win_t win = NULL;
  vmmipc_access_t access = VMMIPC_ACCESS_DEFAULT;
  if (vmmipc_device_count(&ndev) || vmmipc_set_device(rank % ndev) || vmmipc_alloc((size_t)2 << 20, &buf) ||
      vmmipc_allgather_map(comm, buf, &access, &win))
    bad = fail(rank, "device, alloc or allgather_map");
  for (int r = 0; !bad && r < size; r++) {
    void *p = NULL;
    size_t n = 0;
    if (vmmipc_win_query(win, r, &p, &n) != VMMIPC_SUCCESS || !p || n != (size_t)2 << 20)
      bad = fail(rank, "vmmipc_win_query");
    else
      mapped++;
  }
  if (win && vmmipc_win_free(win)) bad = fail(rank, "vmmipc_win_free");
  if (buf && vmmipc_buf_free(buf)) bad = fail(rank, "vmmipc_buf_free");
  if (vmmipc_comm_destroy(comm)) bad = fail(rank, "vmmipc_comm_destroy");
  if (!bad) printf("consumer rank %d: mapped %d buffer(s) of its node\n", rank, mapped);
  return bad;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const char *header = STR(VMMIPC_VERSION_MAJOR) "." STR(VMMIPC_VERSION_MINOR) "." STR(VMMIPC_VERSION_PATCH);
  int bad = strcmp(vmmipc_version(), header) != 0;
  if (rank == 0) printf("consumer: vmmipc %s (header %s): %s\n", vmmipc_version(), header, vmmipc_strerror(VMMIPC_ERR_TIMEOUT));
  const char *driver = getenv("VMMIPC_CUDA_DRIVER");
  if (!bad && driver && *driver) bad = share(rank, size);
  int any = 0;
  MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return any;
}
