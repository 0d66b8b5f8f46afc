/* wrap_existing: share memory that the application allocated itself. Every
 * rank builds a range the way an allocator does (cuMemCreate with the POSIX
 * fd handle type, one reservation, two allocations mapped back to back,
 * cuMemSetAccess), writes its rank into it, wraps it with vmmipc_buf_wrap
 * and maps every node peer's range with vmmipc_allgather_map. Freeing the
 * wrapper leaves the application's mapping alone; the application tears it
 * down as usual. Driver calls go through the driver vmmipc loaded
 * (vmmipc_driver_proc); an application linked with libcuda calls them
 * directly. */
#include <cuda.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vmmipc.h"

#define CHECK(call)                                                             \
  do {                                                                          \
    vmmipc_result_t r_ = (call);                                                \
    if (r_ != VMMIPC_SUCCESS) {                                                 \
      fprintf(stderr, "rank %d: %s: %s\n", rank, #call, vmmipc_last_error());   \
      MPI_Abort(MPI_COMM_WORLD, 1);                                             \
    }                                                                           \
  } while (0)
#define CHECK_CU(call)                                                          \
  do {                                                                          \
    CUresult rc_ = (call);                                                      \
    if (rc_ != CUDA_SUCCESS) {                                                  \
      fprintf(stderr, "rank %d: %s failed: CUresult %d\n", rank, #call, (int)rc_); \
      MPI_Abort(MPI_COMM_WORLD, 1);                                             \
    }                                                                           \
  } while (0)

/* The driver entry points this program calls. */
static struct {
  CUresult (*create)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long);
  CUresult (*release)(CUmemGenericAllocationHandle);
  CUresult (*reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
  CUresult (*free_va)(CUdeviceptr, size_t);
  CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
  CUresult (*unmap)(CUdeviceptr, size_t);
  CUresult (*set_access)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
  CUresult (*copy_in)(CUdeviceptr, const void *, size_t);
  CUresult (*copy_out)(void *, CUdeviceptr, size_t);
  CUresult (*ctx_sync)(void);
} cu;

static int load(const char *name, void *slot) {
  void *fn = NULL;
  if (vmmipc_driver_proc(name, 0, &fn) != VMMIPC_SUCCESS) return 0;
  memcpy(slot, &fn, sizeof fn);
  return 1;
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
  int dev = node_rank % ndev;
  CHECK(vmmipc_set_device(dev));
  if (!load("cuMemCreate", &cu.create) || !load("cuMemRelease", &cu.release) ||
      !load("cuMemAddressReserve", &cu.reserve) || !load("cuMemAddressFree", &cu.free_va) ||
      !load("cuMemMap", &cu.map) || !load("cuMemUnmap", &cu.unmap) || !load("cuMemSetAccess", &cu.set_access) ||
      !load("cuMemcpyHtoD", &cu.copy_in) || !load("cuMemcpyDtoH", &cu.copy_out) ||
      !load("cuCtxSynchronize", &cu.ctx_sync)) {
    fprintf(stderr, "rank %d: %s\n", rank, vmmipc_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }

  /* The application's own allocation: two chunks, 2 and 4 granules. */
  size_t gran = 0;
  CHECK(vmmipc_granularity(dev, &gran, NULL));
  size_t sizes[2] = {2 * gran, 4 * gran}, total = sizes[0] + sizes[1];
  CUmemGenericAllocationHandle handles[2];
  CUmemAllocationProp prop;
  memset(&prop, 0, sizeof prop);
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR; /* what sharing needs */
  CUdeviceptr base = 0;
  CHECK_CU(cu.reserve(&base, total, 0, 0, 0));
  CUmemAccessDesc access;
  memset(&access, 0, sizeof access);
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = dev;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  for (int i = 0, off = 0; i < 2; off += (int)(sizes[i] / gran), i++) {
    CHECK_CU(cu.create(&handles[i], sizes[i], &prop, 0));
    CHECK_CU(cu.map(base + (size_t)off * gran, sizes[i], 0, handles[i], 0));
  }
  CHECK_CU(cu.set_access(base, total, &access, 1));
  unsigned char *host = malloc(total);
  memset(host, rank + 1, total);
  CHECK_CU(cu.copy_in(base, host, total));
  CHECK_CU(cu.ctx_sync()); /* from pageable memory the copy may land after it returns */

  /* Share it. */
  vmmipc_buf_t buf;
  CHECK(vmmipc_buf_wrap((void *)(uintptr_t)base, total, &buf));
  vmmipc_win_t win;
  CHECK(vmmipc_allgather_map(comm, buf, NULL, &win));
  int bad = 0, mapped = 0;
  for (int r = 0; r < size; r++) {
    void *p;
    size_t n;
    CHECK(vmmipc_win_query(win, r, &p, &n));
    if (!p) continue; /* another node */
    unsigned char *h = malloc(n);
    CHECK_CU(cu.copy_out(h, (CUdeviceptr)(uintptr_t)p, n));
    for (size_t i = 0; i < n; i++) bad += h[i] != (unsigned char)(r + 1);
    free(h);
    mapped++;
  }
  CHECK(vmmipc_win_free(win));
  CHECK(vmmipc_buf_free(buf)); /* releases vmmipc's references only */

  /* The application's mapping is still there; it tears it down itself. */
  CHECK_CU(cu.copy_out(host, base, total));
  for (size_t i = 0; i < total; i++) bad += host[i] != (unsigned char)(rank + 1);
  free(host);
  CHECK_CU(cu.unmap(base, total));
  for (int i = 0; i < 2; i++) CHECK_CU(cu.release(handles[i]));
  CHECK_CU(cu.free_va(base, total));
  printf("rank %d: shared its own 2-chunk allocation; read %d range(s) of its node, %s\n", rank, mapped,
         bad ? "DATA MISMATCH" : "every byte checked");
  CHECK(vmmipc_comm_destroy(comm));
  int any = 0;
  MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return any ? 1 : 0;
}
