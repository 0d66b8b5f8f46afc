/* Buffer records, vmmipc_alloc and vmmipc_buf_free. */
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "driver/device.h"
#include "vmm/vmm.h"

vmmipc_result_t vmmipc__buf_new(int chunks, struct vmmipc_buf **out) {
  struct vmmipc_buf *b = calloc(1, sizeof *b);
  if (!b) return vmmipc__error(VMMIPC_ERR_NO_MEMORY, "allocating a buffer record");
  if (chunks > 0) {
    b->chunks = calloc((size_t)chunks, sizeof *b->chunks);
    if (!b->chunks) {
      free(b);
      return vmmipc__error(VMMIPC_ERR_NO_MEMORY, "allocating a buffer record of %d chunks", chunks);
    }
    b->cap_chunks = chunks;
  }
  b->device = -1;
  *out = b;
  return VMMIPC_SUCCESS;
}

vmmipc_result_t vmmipc__buf_add_resv(struct vmmipc_buf *b, CUdeviceptr ptr, size_t size) {
  if (b->num_resv == b->cap_resv) {
    int cap = b->cap_resv ? 2 * b->cap_resv : 2;
    struct vmmipc__resv *r = realloc(b->resv, (size_t)cap * sizeof *r);
    if (!r) return vmmipc__error(VMMIPC_ERR_NO_MEMORY, "recording a reservation");
    b->resv = r;
    b->cap_resv = cap;
  }
  b->resv[b->num_resv].ptr = ptr;
  b->resv[b->num_resv].size = size;
  b->num_resv++;
  return VMMIPC_SUCCESS;
}

void vmmipc__buf_destroy(const vmmipc__cu_t *cu, struct vmmipc_buf *b) {
  if (!b) return;
  if (cu) {
    if (b->base) vmmipc__unmap_chunks(cu, b->base, b->chunks, b->num_chunks);
    for (int i = 0; i < b->num_chunks; i++) cu->cuMemRelease(b->chunks[i].handle);
    for (int i = 0; i < b->num_resv; i++) cu->cuMemAddressFree(b->resv[i].ptr, b->resv[i].size);
  }
  free(b->chunks);
  free(b->resv);
  free(b);
}

vmmipc_result_t vmmipc_alloc(size_t size, vmmipc_buf_t *out) {
  const char *op = "vmmipc_alloc";
  if (!out) return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "%s: out is NULL", op);
  *out = NULL;
  const vmmipc__cu_t *cu;
  vmmipc_result_t r = vmmipc__cu_load(&cu);
  if (r) return r;
  int dev;
  size_t g;
  if ((r = vmmipc__current_device(cu, op, &dev))) return r;
  if ((r = vmmipc__device_granularity(cu, dev, op, &g))) return r;
  if (size > SIZE_MAX / 2)
    return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "%s: size %zu is too large", op, size);
  struct vmmipc_buf *b = NULL;
  if ((r = vmmipc__buf_new(1, &b))) return r;
  b->device = dev;
  b->granularity = g;
  b->access[0].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  b->access[0].location.id = dev;
  b->access[0].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  b->num_access = 1;
  if ((r = vmmipc_device_uuid(dev, &b->owner))) goto fail;
  if (size == 0) {
    *out = b;
    return VMMIPC_SUCCESS;
  }
  size_t rounded = vmmipc__round_up(size, g);
  if ((r = vmmipc__chunk_create(cu, dev, rounded, op, &b->chunks[0].handle))) goto fail;
  b->chunks[0].size = rounded;
  b->num_chunks = 1;
  CUdeviceptr base = 0;
  if ((r = vmmipc__reserve(cu, rounded, g, 0, &base, op))) goto fail;
  if ((r = vmmipc__buf_add_resv(b, base, rounded))) {
    cu->cuMemAddressFree(base, rounded);
    goto fail;
  }
  if ((r = vmmipc__map_chunks(cu, base, b->chunks, 1, 0, 1, op))) goto fail;
  b->base = base;
  if ((r = vmmipc__set_access(cu, base, rounded, b->access, 1, op))) goto fail;
  b->size = size;
  b->mapped = rounded;
  *out = b;
  return VMMIPC_SUCCESS;
fail:
  vmmipc__buf_destroy(cu, b);
  return r;
}

vmmipc_result_t vmmipc_buf_ptr(vmmipc_buf_t b, void **ptr, size_t *size) {
  if (!b) return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "vmmipc_buf_ptr: buf is NULL");
  if (ptr) *ptr = (void *)(uintptr_t)b->base;
  if (size) *size = b->size;
  return VMMIPC_SUCCESS;
}

vmmipc_result_t vmmipc_buf_info(vmmipc_buf_t b, int *num_chunks, int *is_imported) {
  if (!b) return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "vmmipc_buf_info: buf is NULL");
  if (num_chunks) *num_chunks = b->num_chunks;
  if (is_imported) *is_imported = b->imported;
  return VMMIPC_SUCCESS;
}

vmmipc_result_t vmmipc_buf_free(vmmipc_buf_t b) {
  if (!b) return VMMIPC_SUCCESS; /* like free(NULL) */
  if (b->exposed)
    return vmmipc__error(VMMIPC_ERR_INVALID_ARG,
                         "vmmipc_buf_free: the buffer is exposed by %d open window(s); hint: vmmipc_win_free them "
                         "first",
                         b->exposed);
  const vmmipc__cu_t *cu = NULL;
  vmmipc__cu_load(&cu); /* a buffer exists only if the driver loaded */
  vmmipc__buf_destroy(cu, b);
  return VMMIPC_SUCCESS;
}
