/* heap_window: windows from a symmetric heap (docs/heap.md). The heap reserves
 * address space once and grows its physical memory in steps every node rank
 * maps; each vmmipc_heap_alloc is then a window without driver calls. Every
 * rank carves a few windows of different sizes, writes its rank and the
 * window's number into its slice, and reads its right neighbour's slice back
 * with the driver's cuMemcpyDtoH. Driver API only: runs on the CPU stand-in. */
#include <cuda.h> /* only for the driver's types */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#include <vmmipc.h>

#define CHECK(call)                                                                    \
  do {                                                                                 \
    if ((call) != VMMIPC_SUCCESS) {                                                    \
      fprintf(stderr, "rank %d: %s: %s\n", rank, #call, vmmipc_last_error());        \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                    \
    }                                                                                  \
  } while (0)

enum { WINDOWS = 3 };

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, node_rank, node_size, ndev;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  vmmipc_comm_t comm;
  MPI_Comm node;
  CHECK(vmmipc_comm_create(MPI_COMM_WORLD, NULL, &comm));
  CHECK(vmmipc_comm_node_comm(comm, &node));
  MPI_Comm_rank(node, &node_rank);
  MPI_Comm_size(node, &node_size);
  CHECK(vmmipc_device_count(&ndev));
  CHECK(vmmipc_set_device(node_rank % ndev));

  CUresult (*htod)(CUdeviceptr, const void *, size_t);
  CUresult (*dtoh)(void *, CUdeviceptr, size_t);
  CUresult (*ctx_sync)(void);
  CHECK(vmmipc_driver_proc("cuMemcpyHtoD", 0, (void **)&htod));
  CHECK(vmmipc_driver_proc("cuMemcpyDtoH", 0, (void **)&dtoh));
  CHECK(vmmipc_driver_proc("cuCtxSynchronize", 0, (void **)&ctx_sync));

  vmmipc_heap_t heap; /* collective; NULL config: the default reserve and growth step */
  CHECK(vmmipc_heap_create(comm, NULL, &heap));

  int right = (node_rank + 1) % node_size, right_rank;
  MPI_Group g_node, g_world;
  MPI_Comm_group(node, &g_node);
  MPI_Comm_group(MPI_COMM_WORLD, &g_world);
  MPI_Group_translate_ranks(g_node, 1, &right, g_world, &right_rank);

  vmmipc_win_t win[WINDOWS];
  size_t wrong = 0;
  for (int w = 0; w < WINDOWS; w++) {
    size_t n = (size_t)(w + 1) << 16; /* ints; every rank asks for the same size here (they may differ) */
    CHECK(vmmipc_heap_alloc(heap, n * sizeof(int), &win[w])); /* collective */
    void *mine, *peer;
    size_t bytes;
    CHECK(vmmipc_win_query(win[w], rank, &mine, NULL));
    int *host = malloc(n * sizeof(int));
    for (size_t i = 0; i < n; i++) host[i] = rank * 100 + w;
    if (htod((CUdeviceptr)(uintptr_t)mine, host, n * sizeof(int)) || ctx_sync()) MPI_Abort(MPI_COMM_WORLD, 1);
    MPI_Barrier(node); /* every slice written before anyone reads (or use vmmipc_win_signal/wait) */
    CHECK(vmmipc_win_query(win[w], right_rank, &peer, &bytes));
    if (bytes != n * sizeof(int) || dtoh(host, (CUdeviceptr)(uintptr_t)peer, bytes)) MPI_Abort(MPI_COMM_WORLD, 1);
    for (size_t i = 0; i < n; i++) wrong += host[i] != right_rank * 100 + w;
    free(host);
  }
  vmmipc_heap_stats_t st = VMMIPC_HEAP_STATS_INIT;
  CHECK(vmmipc_heap_stats(heap, &st));
  printf("rank %d: %d heap windows, rank %d's slices read back: %s (%llu bytes in use, %llu growth steps)\n", rank,
         st.live_windows, right_rank, wrong ? "WRONG DATA" : "ok", (unsigned long long)st.in_use,
         (unsigned long long)st.growth_steps);

  for (int w = 0; w < WINDOWS; w++) CHECK(vmmipc_win_free(win[w])); /* collective */
  CHECK(vmmipc_heap_destroy(heap));                                   /* collective, after its windows */
  CHECK(vmmipc_comm_destroy(comm));
  MPI_Finalize();
  return wrong != 0;
}
