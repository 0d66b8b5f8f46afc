/* vmmipc_buf_wrap: a buffer over VMM memory the application mapped itself
 * (its own cuMemCreate/cuMemMap code, or an allocator's). Walks the range
 * mapping by mapping: cuMemRetainAllocationHandle gives the handle behind
 * an address (the one cuMemCreate gave, held once more), and
 * cuMemGetAddressRange the mapping around it. The buffer owns only those
 * retained handles: free releases them and never touches the mappings or
 * the reservations. */
#include <stdint.h>

#include "common/error.h"
#include "desc/desc.h"
#include "vmm/imported.h"
#include "vmm/vmm.h"

/* Why no allocation handle backs `at` (cuMemRetainAllocationHandle failed
 * with `rc`): memory that is not VMM, a stream-ordered pool, or nothing. */
static vmmipc_result_t vmmipc__wrap_explain(const vmmipc__cu_t *cu, CUdeviceptr at, CUdeviceptr start, int chunk,
                                            CUresult rc, const char *op) {
  unsigned long long off = (unsigned long long)(at - start), addr = (unsigned long long)at;
  CUdeviceptr rb = 0;
  size_t rs = 0;
  if (cu->cuMemGetAddressRange(&rb, &rs, at) == CUDA_SUCCESS) {
    /* Device memory with no VMM handle: cuMemAlloc or a pool. */
    CUmemoryPool pool = NULL;
    if (cu->cuPointerGetAttribute(&pool, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, at) == CUDA_SUCCESS && pool)
      return vmmipc__error(VMMIPC_ERR_UNSUPPORTED,
                           "%s: offset %llu (address 0x%llx) lies in memory of a stream-ordered pool "
                           "(cuMemAllocFromPoolAsync / cudaMallocAsync), which has no VMM allocation handle "
                           "to share; hint: allocate with cuMemCreate + cuMemMap and the POSIX fd handle type (or "
                           "vmmipc_alloc), or share pool memory with cuMemPoolExportPointer",
                           op, off, addr);
    return vmmipc__error(VMMIPC_ERR_UNSUPPORTED,
                         "%s: offset %llu (address 0x%llx) is not CUDA VMM memory: it comes from "
                         "cuMemAlloc/cudaMalloc (a plain allocation of %zu bytes at 0x%llx), which has no "
                         "allocation handle to share; hint: allocate with cuMemCreate + cuMemMap and the POSIX fd "
                         "handle type, or with vmmipc_alloc",
                         op, off, addr, rs, (unsigned long long)rb);
  }
  char e[160];
  vmmipc__cu_errstr(rc, e, sizeof e);
  if (chunk == 1)
    return vmmipc__error(VMMIPC_ERR_INVALID_ARG,
                         "%s: address 0x%llx is not mapped device memory (cuMemRetainAllocationHandle: %s); hint: "
                         "pass the start of a range mapped with cuMemMap",
                         op, addr, e);
  return vmmipc__error(VMMIPC_ERR_INVALID_ARG,
                       "%s: the range has a hole at offset %llu (address 0x%llx): nothing is mapped there after "
                       "chunk %d (cuMemRetainAllocationHandle: %s); hint: wrap only allocations mapped back to "
                       "back, or wrap each mapped part on its own",
                       op, off, addr, chunk - 1, e);
}

/* Check chunk k (handle h, retained at `at`) and get its device and the
 * mapping around `at`. */
static vmmipc_result_t vmmipc__wrap_chunk(const vmmipc__cu_t *cu, CUmemGenericAllocationHandle h, CUdeviceptr at,
                                          CUdeviceptr start, int k, int *dev, CUdeviceptr *base, size_t *size,
                                          const char *op) {
  unsigned long long off = (unsigned long long)(at - start);
  CUmemAllocationProp prop = {0};
  CUresult rc = cu->cuMemGetAllocationPropertiesFromHandle(&prop, h);
  if (rc)
    return vmmipc__cu_error(rc, NULL, "%s: chunk %d (offset %llu): cuMemGetAllocationPropertiesFromHandle", op, k,
                            off);
  if (!(prop.requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))
    return vmmipc__error(VMMIPC_ERR_UNSUPPORTED,
                         "%s: chunk %d (offset %llu) was created without the POSIX file descriptor handle type "
                         "(requested handle types 0x%x), so it cannot be exported; hint: create it with "
                         "CUmemAllocationProp.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR",
                         op, k, off, (unsigned)prop.requestedHandleTypes);
  if (prop.location.type != CU_MEM_LOCATION_TYPE_DEVICE || prop.location.id < 0)
    return vmmipc__error(VMMIPC_ERR_UNSUPPORTED,
                         "%s: chunk %d (offset %llu) is not memory of a device this process sees (location type "
                         "%d, id %d); hint: vmmipc shares device memory",
                         op, k, off, (int)prop.location.type, prop.location.id);
  CUdeviceptr mb = 0;
  size_t ms = 0;
  rc = cu->cuMemGetAddressRange(&mb, &ms, at);
  if (rc) return vmmipc__cu_error(rc, NULL, "%s: chunk %d (offset %llu): cuMemGetAddressRange", op, k, off);
  if (ms == 0)
    return vmmipc__error(VMMIPC_ERR_CUDA, "%s: chunk %d (offset %llu): cuMemGetAddressRange reports an empty mapping",
                         op, k, off);
  *dev = prop.location.id;
  *base = mb;
  *size = ms;
  return VMMIPC_SUCCESS;
}

vmmipc_result_t vmmipc_buf_wrap(void *ptr, size_t size, vmmipc_buf_t *out) {
  const char *op = "vmmipc_buf_wrap";
  if (!out) return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "%s: out is NULL", op);
  *out = NULL;
  CUdeviceptr start = (CUdeviceptr)(uintptr_t)ptr, end = start + size;
  if (!ptr || size == 0 || end < start)
    return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "%s: the range (ptr %p, size %zu) is empty or wraps around", op,
                         ptr, size);
  int cache = 0;
  vmmipc_result_t r = vmmipc__export_cache_choice(-1, op, &cache);
  if (r) return r;
  const vmmipc__cu_t *cu;
  if ((r = vmmipc__cu_load(&cu))) return r;
  /* The driver cannot export memory imported from another process: say so
   * here rather than at the first export. */
  CUdeviceptr imp = 0;
  if (vmmipc__imported_overlaps(start, size, &imp))
    return vmmipc__error(VMMIPC_ERR_NOT_EXPORTABLE,
                         "%s: the range (address 0x%llx, size %zu) holds memory imported from another process (the "
                         "mapping at 0x%llx), which cannot be exported again; hint: forward the descriptor it was "
                         "imported from, or copy the data into a buffer of your own (vmmipc_alloc)",
                         op, (unsigned long long)start, size, (unsigned long long)imp);
  struct vmmipc_buf *b = NULL;
  if ((r = vmmipc__buf_new(1, op, &b))) return r;
  b->wrapped = 1; /* from here on, destroy releases the retained handles only */
  b->export_cache = cache;
  b->serial = vmmipc__next_serial(); /* each wrap is a buffer of its own */
  CUdeviceptr at = start;
  for (int k = 1; at < end; k++) {
    if (k > (int)VMMIPC__DESC_MAX_CHUNKS) {
      r = vmmipc__error(VMMIPC_ERR_INVALID_ARG, "%s: the range holds more than %u mappings", op,
                        VMMIPC__DESC_MAX_CHUNKS);
      goto fail;
    }
    if ((r = vmmipc__buf_reserve_chunks(b, 1, op))) goto fail;
    CUmemGenericAllocationHandle h = 0;
    CUresult rc = cu->cuMemRetainAllocationHandle(&h, (void *)(uintptr_t)at);
    if (rc) {
      r = vmmipc__wrap_explain(cu, at, start, k, rc, op);
      vmmipc__error_driver((int)rc); /* whatever the reason it gives */
      goto fail;
    }
    b->chunks[b->num_chunks].handle = h;
    b->chunks[b->num_chunks].size = 0;
    b->num_chunks++; /* retained: released by destroy */
    int dev = -1;
    CUdeviceptr mb = 0;
    size_t ms = 0;
    if ((r = vmmipc__wrap_chunk(cu, h, at, start, k, &dev, &mb, &ms, op))) goto fail;
    if (k == 1) {
      /* The granularity of the memory's own device. */
      if ((r = vmmipc__device_granularity(cu, dev, op, &b->granularity))) goto fail;
      if (start % b->granularity || size % b->granularity) {
        r = vmmipc__error(VMMIPC_ERR_INVALID_ARG,
                          "%s: the range (address 0x%llx, size %zu) is not aligned to device %d's allocation "
                          "granularity of %zu bytes; hint: wrap whole mappings, whose start and size are "
                          "multiples of the granularity (vmmipc_granularity)",
                          op, (unsigned long long)start, size, dev, b->granularity);
        goto fail;
      }
      b->device = dev;
    }
    if (mb != at) {
      r = vmmipc__error(VMMIPC_ERR_INVALID_ARG,
                        "%s: address 0x%llx lies %llu bytes inside a mapping that starts at 0x%llx; hint: wrap "
                        "from the start of a mapping",
                        op, (unsigned long long)at, (unsigned long long)(at - mb), (unsigned long long)mb);
      goto fail;
    }
    if (dev != b->device) {
      r = vmmipc__error(VMMIPC_ERR_INVALID_ARG,
                        "%s: chunk %d (offset %llu) is memory of device %d but chunk 1 of device %d; hint: a "
                        "wrapped range lies on one device; wrap each device's part on its own",
                        op, k, (unsigned long long)(at - start), dev, b->device);
      goto fail;
    }
    if (ms > end - at) {
      r = vmmipc__error(VMMIPC_ERR_INVALID_ARG,
                        "%s: the range ends %llu bytes into chunk %d, a mapping of %zu bytes at offset %llu; hint: "
                        "wrap whole mappings (a size of %llu would end with this one)",
                        op, (unsigned long long)(end - at), k, ms, (unsigned long long)(at - start),
                        (unsigned long long)(at - start + ms));
      goto fail;
    }
    b->chunks[b->num_chunks - 1].size = ms;
    at += ms;
  }
  if ((r = vmmipc_device_uuid(b->device, &b->owner))) goto fail;
  b->base = start;
  b->size = size;
  b->mapped = size;
  *out = b;
  return VMMIPC_SUCCESS;
fail:
  vmmipc__buf_discard(cu, b);
  return r;
}
