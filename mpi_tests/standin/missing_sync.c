/* The newcomer's race (issue 32): every rank fills its buffer with an
 * asynchronous copy on a stream and shares it with vmmipc_allgather_map;
 * its right neighbour on the node reads it back with cuMemcpyDtoH. Without
 * the stream's synchronisation before the collective, a GPU may let the
 * peer read the buffer before the copy lands. On the stand-in with
 * VMMIPC_STANDIN_ASYNC=late the copy lands only when something waits for it
 * (or long after), so the race is certain:
 *   missing_sync --no-sync --expect stale   every rank reads stale data
 *   missing_sync --sync --expect ok         every rank reads the data
 * It exits 0 when every rank saw what --expect says. */
#include <cuda.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vmmipc.h>

#define CHECK(call)                                                                          \
  do {                                                                                       \
    if ((call) != VMMIPC_SUCCESS) {                                                          \
      fprintf(stderr, "rank %d: %s: %s\n", rank, #call, vmmipc_last_error());              \
      MPI_Abort(MPI_COMM_WORLD, 2);                                                          \
    }                                                                                        \
  } while (0)
#define CU(call)                                                                             \
  do {                                                                                       \
    CUresult rc_ = (call);                                                                   \
    if (rc_ != CUDA_SUCCESS) {                                                               \
      fprintf(stderr, "rank %d: %s failed: %d\n", rank, #call, (int)rc_);                  \
      MPI_Abort(MPI_COMM_WORLD, 2);                                                          \
    }                                                                                        \
  } while (0)

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, sync = -1, expect_ok = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--sync") == 0) sync = 1;
    if (strcmp(argv[i], "--no-sync") == 0) sync = 0;
    if (strcmp(argv[i], "--expect") == 0 && i + 1 < argc) expect_ok = strcmp(argv[++i], "ok") == 0;
  }
  if (sync < 0 || expect_ok < 0) {
    if (rank == 0) fprintf(stderr, "usage: missing_sync --sync|--no-sync --expect ok|stale\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }

  vmmipc_comm_t comm;
  MPI_Comm node;
  int node_rank, node_size, ndev;
  CHECK(vmmipc_comm_create(MPI_COMM_WORLD, NULL, &comm));
  CHECK(vmmipc_comm_node_comm(comm, &node));
  MPI_Comm_rank(node, &node_rank);
  MPI_Comm_size(node, &node_size);
  CHECK(vmmipc_device_count(&ndev));
  CHECK(vmmipc_set_device(node_rank % ndev));

  CUresult (*stream_create)(CUstream *, unsigned int);
  CUresult (*stream_sync)(CUstream);
  CUresult (*stream_destroy)(CUstream);
  CUresult (*htod_async)(CUdeviceptr, const void *, size_t, CUstream);
  CUresult (*dtoh)(void *, CUdeviceptr, size_t);
  CHECK(vmmipc_driver_proc("cuStreamCreate", 0, (void **)&stream_create));
  CHECK(vmmipc_driver_proc("cuStreamSynchronize", 0, (void **)&stream_sync));
  CHECK(vmmipc_driver_proc("cuStreamDestroy", 0, (void **)&stream_destroy));
  CHECK(vmmipc_driver_proc("cuMemcpyHtoDAsync", 0, (void **)&htod_async));
  CHECK(vmmipc_driver_proc("cuMemcpyDtoH", 0, (void **)&dtoh));

  const size_t n = 1 << 16; /* ints */
  vmmipc_buf_t buf;
  void *mine;
  CHECK(vmmipc_alloc(n * sizeof(int), &buf));
  CHECK(vmmipc_buf_ptr(buf, &mine, NULL));
  int *host = malloc(n * sizeof(int));
  if (!host) MPI_Abort(MPI_COMM_WORLD, 2);
  for (size_t i = 0; i < n; i++) host[i] = rank + 1; /* fresh device memory reads 0 on the stand-in */
  CUstream s;
  CU(stream_create(&s, CU_STREAM_NON_BLOCKING));
  CU(htod_async((CUdeviceptr)(uintptr_t)mine, host, n * sizeof(int), s));
  if (sync) CU(stream_sync(s)); /* what the newcomer left out */

  vmmipc_win_t win;
  CHECK(vmmipc_allgather_map(comm, buf, NULL, &win));
  int right = (node_rank + 1) % node_size, right_rank;
  MPI_Group g_node, g_world;
  MPI_Comm_group(node, &g_node);
  MPI_Comm_group(MPI_COMM_WORLD, &g_world);
  MPI_Group_translate_ranks(g_node, 1, &right, g_world, &right_rank);
  MPI_Group_free(&g_node);
  MPI_Group_free(&g_world);
  void *peer;
  size_t peer_bytes;
  CHECK(vmmipc_win_query(win, right_rank, &peer, &peer_bytes));
  memset(host, 0xff, n * sizeof(int));
  CU(dtoh(host, (CUdeviceptr)(uintptr_t)peer, n * sizeof(int)));
  size_t wrong = 0;
  for (size_t i = 0; i < n; i++) wrong += host[i] != right_rank + 1;
  int as_expected = expect_ok ? wrong == 0 : wrong > 0, all = 0;
  printf("rank %d read rank %d's buffer (%s): %zu of %zu ints stale, %s\n", rank, right_rank,
         sync ? "synchronised" : "not synchronised", wrong, n, as_expected ? "as expected" : "NOT AS EXPECTED");
  MPI_Allreduce(&as_expected, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  free(host);

  CHECK(vmmipc_win_free(win));
  CU(stream_destroy(s));
  CHECK(vmmipc_buf_free(buf));
  CHECK(vmmipc_comm_destroy(comm));
  MPI_Finalize();
  return all ? 0 : 1;
}
