/* What a device can do for vmmipc: VMM with POSIX-fd handles, its
 * granularities, and the optional allocation flags. */
#include "common/error.h"
#include "driver/device.h"
#include "vmm/vmm.h"

static vmmipc_result_t vmmipc__check_vmm(const vmmipc__cu_t *cu, int device, const char *op) {
  int vmm = 0, fd = 0;
  CUresult rc = cu->cuDeviceGetAttribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, device);
  if (!rc)
    rc = cu->cuDeviceGetAttribute(&fd, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, device);
  if (rc) return vmmipc__cu_error(rc, NULL, "%s: cuDeviceGetAttribute(device %d)", op, device);
  if (!vmm)
    return vmmipc__error(VMMIPC_ERR_UNSUPPORTED,
                         "%s: device %d does not support CUDA virtual memory management "
                         "(CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED is 0); hint: use a newer GPU or "
                         "driver",
                         op, device);
  if (!fd)
    return vmmipc__error(VMMIPC_ERR_UNSUPPORTED,
                         "%s: device %d cannot export POSIX file descriptor handles "
                         "(CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED is 0); hint: this needs "
                         "Linux and a driver with VMM IPC support",
                         op, device);
  return VMMIPC_SUCCESS;
}

static vmmipc_result_t vmmipc__query_granularity(const vmmipc__cu_t *cu, int device,
                                                 CUmemAllocationGranularity_flags which, const char *op,
                                                 size_t *out) {
  CUmemAllocationProp prop = {0};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  size_t g = 0;
  CUresult rc = cu->cuMemGetAllocationGranularity(&g, &prop, which);
  const char *name = which == CU_MEM_ALLOC_GRANULARITY_MINIMUM ? "MINIMUM" : "RECOMMENDED";
  if (rc)
    return vmmipc__cu_error(rc, NULL, "%s: cuMemGetAllocationGranularity(device %d, %s)", op, device, name);
  /* Alignment arithmetic below relies on a power of two. */
  if (g == 0 || (g & (g - 1)))
    return vmmipc__error(VMMIPC_ERR_CUDA, "%s: the driver reports %s granularity %zu for device %d", op, name, g,
                         device);
  *out = g;
  return VMMIPC_SUCCESS;
}

vmmipc_result_t vmmipc__device_granularities(const vmmipc__cu_t *cu, int device, const char *op, size_t *minimum,
                                             size_t *recommended) {
  vmmipc_result_t r = vmmipc__check_vmm(cu, device, op);
  if (!r && minimum) r = vmmipc__query_granularity(cu, device, CU_MEM_ALLOC_GRANULARITY_MINIMUM, op, minimum);
  if (!r && recommended)
    r = vmmipc__query_granularity(cu, device, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED, op, recommended);
  return r;
}

vmmipc_result_t vmmipc__device_granularity(const vmmipc__cu_t *cu, int device, const char *op, size_t *out) {
  return vmmipc__device_granularities(cu, device, op, out, NULL);
}

vmmipc_result_t vmmipc__check_alloc_flags(const vmmipc__cu_t *cu, int device, unsigned int flags, const char *op) {
  if (flags & ~VMMIPC_ALLOC_GPU_DIRECT_RDMA)
    return vmmipc__error(VMMIPC_ERR_INVALID_ARG,
                         "%s: unknown allocation flags 0x%x (known: VMMIPC_ALLOC_GPU_DIRECT_RDMA 0x%x)", op,
                         flags & ~VMMIPC_ALLOC_GPU_DIRECT_RDMA, VMMIPC_ALLOC_GPU_DIRECT_RDMA);
  if (flags & VMMIPC_ALLOC_GPU_DIRECT_RDMA) {
    int ok = 0;
    CUresult rc = cu->cuDeviceGetAttribute(&ok, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED, device);
    if (rc) return vmmipc__cu_error(rc, NULL, "%s: cuDeviceGetAttribute(device %d)", op, device);
    if (!ok)
      return vmmipc__error(VMMIPC_ERR_UNSUPPORTED,
                           "%s: device %d cannot create GPUDirect RDMA capable VMM memory "
                           "(CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED is 0); hint: leave out "
                           "VMMIPC_ALLOC_GPU_DIRECT_RDMA, or check the driver and the GPUDirect RDMA setup",
                           op, device);
  }
  return VMMIPC_SUCCESS;
}

vmmipc_result_t vmmipc_granularity(int device_ordinal, size_t *minimum, size_t *recommended) {
  const char *op = "vmmipc_granularity";
  if (!minimum && !recommended)
    return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "%s: minimum and recommended are both NULL", op);
  const vmmipc__cu_t *cu;
  vmmipc_result_t r = vmmipc__cu_load(&cu);
  if (r) return r;
  if ((r = vmmipc__device_check(cu, device_ordinal, op))) return r;
  return vmmipc__device_granularities(cu, device_ordinal, op, minimum, recommended);
}
