/* first_program: the smallest complete vmmipc program. Every rank allocates
 * a buffer, fills it with its rank number, maps every node peer's buffer with
 * vmmipc_allgather_map and reads its right neighbour's buffer back with the
 * driver's cuMemcpyDtoH. Driver API only, so it runs on the CPU stand-in
 * (docs/standin.md) as well as on GPUs:
 *   mpicc first_program.c $(pkg-config --cflags --libs vmmipc) -I<cuda>/include -o first_program
 *   VMMIPC_CUDA_DRIVER=<prefix>/lib/vmmipc/libvmmipc_standin.so mpiexec -n 2 ./first_program */
#include <cuda.h> /* only for the driver's types: vmmipc loads the driver, nothing links libcuda */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vmmipc.h>

#define CHECK(call)                                                                    \
  do {                                                                                 \
    if ((call) != VMMIPC_SUCCESS) {                                                    \
      fprintf(stderr, "rank %d: %s: %s\n", rank, #call, vmmipc_last_error());        \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                    \
    }                                                                                  \
  } while (0)

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);

  vmmipc_comm_t comm; /* collective: connects the ranks of each node */
  CHECK(vmmipc_comm_create(MPI_COMM_WORLD, NULL, &comm));
  MPI_Comm node; /* this node's ranks: pick a GPU by node rank */
  int node_rank, node_size, ndev;
  CHECK(vmmipc_comm_node_comm(comm, &node));
  MPI_Comm_rank(node, &node_rank);
  MPI_Comm_size(node, &node_size);
  CHECK(vmmipc_device_count(&ndev));
  CHECK(vmmipc_set_device(node_rank % ndev));

  /* The driver calls, from the driver vmmipc loaded (an application with the
   * CUDA runtime would call cudaMemcpy instead). */
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
  if (htod((CUdeviceptr)(uintptr_t)mine, host, n * sizeof(int)) || ctx_sync()) MPI_Abort(MPI_COMM_WORLD, 1);

  vmmipc_win_t win; /* collective: maps every node peer's buffer here */
  CHECK(vmmipc_allgather_map(comm, buf, NULL, &win));

  int right = (node_rank + 1) % node_size, right_rank; /* the right neighbour on this node */
  MPI_Group g_node, g_world;
  MPI_Comm_group(node, &g_node);
  MPI_Comm_group(MPI_COMM_WORLD, &g_world);
  MPI_Group_translate_ranks(g_node, 1, &right, g_world, &right_rank);
  void *peer;
  size_t peer_bytes;
  CHECK(vmmipc_win_query(win, right_rank, &peer, &peer_bytes)); /* a device pointer in this process */
  memset(host, 0xff, n * sizeof(int));
  if (dtoh(host, (CUdeviceptr)(uintptr_t)peer, peer_bytes)) MPI_Abort(MPI_COMM_WORLD, 1);
  size_t wrong = 0;
  for (size_t i = 0; i < n; i++) wrong += host[i] != right_rank;
  printf("rank %d read rank %d's buffer (%zu bytes): %s\n", rank, right_rank, peer_bytes,
         wrong ? "WRONG DATA" : "ok");
  free(host);

  CHECK(vmmipc_win_free(win)); /* collective: unmaps the peers here, then agrees */
  CHECK(vmmipc_buf_free(buf));
  CHECK(vmmipc_comm_destroy(comm)); /* collective */
  MPI_Finalize();
  return wrong != 0;
}
