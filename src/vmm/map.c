/* Driver-level building blocks: create, reserve, map, access, unmap. Each
 * undoes its own partial work on failure. (Granularity and capability
 * checks: granularity.c.) */
#include "common/error.h"
#include "common/testhooks.h"
#include "vmm/vmm.h"

vmmipc_result_t vmmipc__chunk_create(const vmmipc__cu_t *cu, int device, size_t size, unsigned int flags,
                                     const char *op, CUmemGenericAllocationHandle *out) {
  if (VMMIPC__INJECT("alloc")) return vmmipc__error(VMMIPC_ERR_CUDA, "%s: injected failure at alloc", op);
  CUmemAllocationProp prop = {0};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  prop.allocFlags.gpuDirectRDMACapable = (flags & VMMIPC_ALLOC_GPU_DIRECT_RDMA) ? 1 : 0;
  CUresult rc = cu->cuMemCreate(out, size, &prop, 0);
  if (rc)
    return vmmipc__cu_error(rc, rc == CUDA_ERROR_OUT_OF_MEMORY ? "free device memory or ask for less" : NULL,
                            "%s: cuMemCreate(size %zu, device %d, POSIX fd handle%s)", op, size, device,
                            prop.allocFlags.gpuDirectRDMACapable ? ", GPUDirect RDMA capable" : "");
  return VMMIPC_SUCCESS;
}

vmmipc_result_t vmmipc__reserve(const vmmipc__cu_t *cu, size_t size, size_t align, CUdeviceptr hint, CUdeviceptr *out,
                                const char *op) {
  if (VMMIPC__INJECT("reserve")) return vmmipc__error(VMMIPC_ERR_CUDA, "%s: injected failure at reserve", op);
  CUresult rc = cu->cuMemAddressReserve(out, size, align, hint, 0);
  if (rc == CUDA_ERROR_OUT_OF_MEMORY) { /* the device's virtual address space, not memory */
    vmmipc__cu_error(rc,
                     "no virtual address space is left for this size: free windows or mappings that hold "
                     "address space, or map less at once",
                     "%s: cuMemAddressReserve(size %zu, alignment %zu)", op, size, align);
    vmmipc__error_code(VMMIPC_ERR_RESOURCE);
    return VMMIPC_ERR_RESOURCE;
  }
  if (rc) return vmmipc__cu_error(rc, NULL, "%s: cuMemAddressReserve(size %zu, alignment %zu)", op, size, align);
  return VMMIPC_SUCCESS;
}

void vmmipc__unmap_chunks(const vmmipc__cu_t *cu, CUdeviceptr at, const struct vmmipc__chunk *c, int n) {
  for (int i = 0; i < n; i++) {
    cu->cuMemUnmap(at, c[i].size);
    at += c[i].size;
  }
}

vmmipc_result_t vmmipc__map_chunks(const vmmipc__cu_t *cu, CUdeviceptr at, const struct vmmipc__chunk *c, int n,
                                   int first, int total, const char *hint, const char *op) {
  CUdeviceptr p = at;
  for (int i = 0; i < n; i++) {
    CUresult rc = VMMIPC__INJECT("map") ? CUDA_ERROR_INVALID_VALUE
                                        : cu->cuMemMap(p, c[i].size, 0, c[i].handle, 0);
    if (rc) {
      vmmipc_result_t r = vmmipc__cu_error(rc, hint, "%s: chunk %d of %d: cuMemMap(offset %llu, size %zu)", op,
                                           first + i + 1, total, (unsigned long long)(p - at), c[i].size);
      vmmipc__unmap_chunks(cu, at, c, i);
      return r;
    }
    p += c[i].size;
  }
  return VMMIPC_SUCCESS;
}

vmmipc_result_t vmmipc__set_access(const vmmipc__cu_t *cu, CUdeviceptr at, size_t size, const CUmemAccessDesc *a,
                                   int n, const char *op) {
  if (VMMIPC__INJECT("access")) return vmmipc__error(VMMIPC_ERR_CUDA, "%s: injected failure at access", op);
  CUresult rc = cu->cuMemSetAccess(at, size, a, (size_t)n);
  if (rc)
    return vmmipc__cu_error(rc,
                            rc == CUDA_ERROR_INVALID_DEVICE ? "a requested device cannot reach the owner's memory "
                                                              "(no peer access between the two GPUs)"
                                                            : NULL,
                            "%s: cuMemSetAccess(size %zu, %d device(s), first device %d, flags %d)", op, size, n,
                            n ? a[0].location.id : -1, n ? (int)a[0].flags : -1);
  return VMMIPC_SUCCESS;
}
