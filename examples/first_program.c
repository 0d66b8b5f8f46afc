/* first_program: the smallest complete vmmipc program (docs/integration.md
 * builds and runs it). Driver API only: runs on the CPU stand-in too. */
#include <cuda.h> /* the driver's types: nothing links libcuda */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#include <vmmipc.h>

static void check(vmmipc_result_t r, const char *call) {
  if (r == VMMIPC_SUCCESS) return;
  fprintf(stderr, "%s: %s\n", call, vmmipc_last_error()); /* names the rank and the cause */
  MPI_Abort(MPI_COMM_WORLD, 1);
}
#define CHECK(call) check((call), #call)

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);

  vmmipc_comm_t comm; /* collective: connects the ranks of each node */
  CHECK(vmmipc_comm_create(MPI_COMM_WORLD, NULL, &comm));
  MPI_Comm node; /* this node's ranks: pick a GPU by node rank */
  int node_rank, ndev;
  CHECK(vmmipc_comm_node_comm(comm, &node));
  MPI_Comm_rank(node, &node_rank);
  CHECK(vmmipc_device_count(&ndev));
  CHECK(vmmipc_set_device(node_rank % ndev));

  /* The driver vmmipc loaded, by cuda.h's names (or the CUDA runtime). */
  CUresult (*htod)(CUdeviceptr, const void *, size_t);
  CUresult (*dtoh)(void *, CUdeviceptr, size_t);
  CUresult (*ctx_sync)(void);
  CHECK(vmmipc_driver_proc("cuMemcpyHtoD", 0, (void **)&htod));
  CHECK(vmmipc_driver_proc("cuMemcpyDtoH", 0, (void **)&dtoh));
  CHECK(vmmipc_driver_proc("cuCtxSynchronize", 0, (void **)&ctx_sync));

  size_t n = 1 << 20; /* ints per rank */
  vmmipc_buf_t buf;
  void *mine;
  CHECK(vmmipc_alloc(n * sizeof(int), &buf)); /* VMM memory that can be shared */
  CHECK(vmmipc_buf_ptr(buf, &mine, NULL));
  int *host = malloc(n * sizeof(int));
  for (size_t i = 0; i < n; i++) host[i] = rank;
  /* Complete (ctx_sync) before the collective lets peers read it. */
  if (htod((CUdeviceptr)(uintptr_t)mine, host, n * sizeof(int)) || ctx_sync()) MPI_Abort(MPI_COMM_WORLD, 1);

  vmmipc_win_t win; /* collective: maps every node peer's buffer here */
  CHECK(vmmipc_allgather_map(comm, buf, NULL, &win));
  size_t wrong = 0;
  int seen = 0;
  for (int r = 0; r < size; r++) {
    void *peer;
    size_t bytes;
    CHECK(vmmipc_win_query(win, r, &peer, &bytes)); /* a device pointer here; NULL off this node */
    if (!peer) continue;
    if (dtoh(host, (CUdeviceptr)(uintptr_t)peer, bytes)) MPI_Abort(MPI_COMM_WORLD, 1);
    for (size_t i = 0; i < n; i++) wrong += host[i] != r;
    seen++;
  }
  printf("rank %d read the buffers of its node's %d ranks: %s\n", rank, seen, wrong ? "WRONG DATA" : "ok");
  free(host);

  CHECK(vmmipc_win_free(win)); /* collective: unmaps the peers here, then agrees */
  CHECK(vmmipc_buf_free(buf));
  CHECK(vmmipc_comm_destroy(comm)); /* collective */
  MPI_Finalize();
  return wrong != 0;
}
