/* allgather_demo: every rank allocates a buffer on its GPU, writes its rank
 * into it, maps every node peer's buffer with vmmipc_allgather_map, and reads
 * them all back. Copies use the CUDA driver's cuMemcpy from the driver vmmipc
 * loaded (an application would use cudaMemcpy). */
#include <cuda.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vmmipc.h"

#define CHECK(call)                                                                          \
  do {                                                                                       \
    vmmipc_result_t r_ = (call);                                                             \
    if (r_ != VMMIPC_SUCCESS) {                                                              \
      fprintf(stderr, "rank %d: %s: %s\n", rank, #call, vmmipc_last_error());              \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                          \
    }                                                                                        \
  } while (0)

static void *driver_fn(const char *name) {
  void *fn = NULL;
  vmmipc_driver_proc(name, 0, &fn); /* the driver vmmipc loaded */
  return fn;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);

  vmmipc_comm_t comm;
  CHECK(vmmipc_comm_create(MPI_COMM_WORLD, NULL, &comm));
  MPI_Comm node;
  int node_rank = 0, ndev = 0;
  CHECK(vmmipc_comm_node_comm(comm, &node));
  MPI_Comm_rank(node, &node_rank);
  CHECK(vmmipc_device_count(&ndev));
  CHECK(vmmipc_set_device(node_rank % ndev));

  void *htod = driver_fn("cuMemcpyHtoD"), *dtoh = driver_fn("cuMemcpyDtoH"), *sync = driver_fn("cuCtxSynchronize");
  CUresult (*copy_in)(CUdeviceptr, const void *, size_t);
  CUresult (*copy_out)(void *, CUdeviceptr, size_t);
  memcpy(&copy_in, &htod, sizeof htod);
  memcpy(&copy_out, &dtoh, sizeof dtoh);
  CUresult (*ctx_sync)(void);
  memcpy(&ctx_sync, &sync, sizeof sync);

  /* Ranks own buffers of different sizes: 2 MiB times (rank + 1). */
  size_t bytes = (size_t)(rank + 1) << 21;
  vmmipc_buf_t buf;
  void *ptr;
  CHECK(vmmipc_alloc(bytes, &buf));
  CHECK(vmmipc_buf_ptr(buf, &ptr, NULL));
  unsigned char *host = malloc(bytes);
  memset(host, rank + 1, bytes);
  copy_in((CUdeviceptr)(uintptr_t)ptr, host, bytes);
  ctx_sync(); /* a pageable copy may return before the data lands: peers read it next */
  free(host);

  vmmipc_win_t win;
  vmmipc_access_t access = VMMIPC_ACCESS_DEFAULT;
  CHECK(vmmipc_allgather_map(comm, buf, &access, &win));
  vmmipc_timing_t t = VMMIPC_TIMING_INIT;
  CHECK(vmmipc_comm_last_timing(comm, &t));

  int bad = 0, mapped = 0;
  for (int r = 0; r < size; r++) {
    void *p;
    size_t n;
    CHECK(vmmipc_win_query(win, r, &p, &n));
    if (!p) continue; /* another node */
    unsigned char *h = malloc(n);
    copy_out(h, (CUdeviceptr)(uintptr_t)p, n);
    for (size_t i = 0; i < n; i++) bad += h[i] != (unsigned char)(r + 1);
    free(h);
    mapped++;
  }
  printf("rank %d: mapped %d buffer(s) of its node, %s; allgather_map took %.3f ms\n", rank, mapped,
         bad ? "DATA MISMATCH" : "every byte checked", t.total_s * 1e3);
  CHECK(vmmipc_win_free(win));
  CHECK(vmmipc_buf_free(buf));
  CHECK(vmmipc_comm_destroy(comm));
  int any = 0;
  MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return any ? 1 : 0;
}
