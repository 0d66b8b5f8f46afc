/* vmmipc_grow: append a chunk, in place when the address space after the
 * buffer is free, else by remapping every chunk into a new reservation. The
 * physical chunks never change, so the data is kept either way. */
#include <stdlib.h>

#include "common/error.h"
#include "common/testhooks.h"
#include "driver/device.h"
#include "vmm/vmm.h"

static vmmipc_result_t vmmipc__grow_chunks(struct vmmipc_buf *b) {
  if (b->num_chunks < b->cap_chunks) return VMMIPC_SUCCESS;
  int cap = b->cap_chunks ? 2 * b->cap_chunks : 2;
  struct vmmipc__chunk *c = realloc(b->chunks, (size_t)cap * sizeof *c);
  if (!c) return vmmipc__error(VMMIPC_ERR_NO_MEMORY, "vmmipc_grow: recording %d chunks", cap);
  b->chunks = c;
  b->cap_chunks = cap;
  return VMMIPC_SUCCESS;
}

/* Try to map the new chunk right after the buffer; *done tells if it worked. */
static vmmipc_result_t vmmipc__grow_in_place(const vmmipc__cu_t *cu, struct vmmipc_buf *b,
                                             const struct vmmipc__chunk *nc, int *done, const char *op) {
  *done = 0;
  CUdeviceptr want = b->base + b->mapped, got = 0;
  if (cu->cuMemAddressReserve(&got, nc->size, b->granularity, want, 0) != CUDA_SUCCESS) return VMMIPC_SUCCESS;
  if (got != want) {
    cu->cuMemAddressFree(got, nc->size);
    return VMMIPC_SUCCESS;
  }
  vmmipc_result_t r = vmmipc__map_chunks(cu, got, nc, 1, b->num_chunks, b->num_chunks + 1, op);
  if (!r) {
    r = vmmipc__set_access(cu, got, nc->size, b->access, b->num_access, op);
    if (r) cu->cuMemUnmap(got, nc->size);
  }
  if (!r) r = vmmipc__buf_add_resv(b, got, nc->size);
  if (r) {
    cu->cuMemAddressFree(got, nc->size);
    return r;
  }
  *done = 1;
  return VMMIPC_SUCCESS;
}

/* Map every chunk (old ones and the new one) into a fresh reservation. */
static vmmipc_result_t vmmipc__grow_move(const vmmipc__cu_t *cu, struct vmmipc_buf *b, const char *op) {
  int n = b->num_chunks + 1; /* the new chunk already sits at chunks[num_chunks] */
  size_t total = b->mapped + b->chunks[b->num_chunks].size;
  CUdeviceptr base = 0;
  vmmipc_result_t r = vmmipc__reserve(cu, total, b->granularity, 0, &base, op);
  if (r) return r;
  struct vmmipc__resv *nr = malloc(sizeof *nr);
  if (!nr) {
    cu->cuMemAddressFree(base, total);
    return vmmipc__error(VMMIPC_ERR_NO_MEMORY, "%s: recording a reservation", op);
  }
  if ((r = vmmipc__map_chunks(cu, base, b->chunks, n, 0, n, op))) goto undo_resv;
  if ((r = vmmipc__set_access(cu, base, total, b->access, b->num_access, op))) goto undo_map;
  /* Commit: retire the old mappings and reservations. */
  if (b->base) vmmipc__unmap_chunks(cu, b->base, b->chunks, b->num_chunks);
  for (int i = 0; i < b->num_resv; i++) cu->cuMemAddressFree(b->resv[i].ptr, b->resv[i].size);
  free(b->resv);
  nr->ptr = base;
  nr->size = total;
  b->resv = nr;
  b->num_resv = b->cap_resv = 1;
  b->base = base;
  return VMMIPC_SUCCESS;
undo_map:
  vmmipc__unmap_chunks(cu, base, b->chunks, n);
undo_resv:
  free(nr);
  cu->cuMemAddressFree(base, total);
  return r;
}

vmmipc_result_t vmmipc_grow(vmmipc_buf_t b, size_t new_size) {
  const char *op = "vmmipc_grow";
  if (!b) return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "%s: buf is NULL", op);
  if (b->exposed) /* the window's peers would keep the old size and address */
    return vmmipc__error(VMMIPC_ERR_INVALID_ARG,
                         "%s: the buffer is exposed by %d open window(s); hint: vmmipc_win_free them first", op,
                         b->exposed);
  if (new_size < b->size)
    return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "%s: new size %zu is smaller than the current %zu; buffers only grow",
                         op, new_size, b->size);
  if (new_size > SIZE_MAX / 2) return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "%s: size %zu is too large", op, new_size);
  if (new_size <= b->mapped) {
    b->size = new_size;
    return VMMIPC_SUCCESS;
  }
  const vmmipc__cu_t *cu;
  vmmipc_result_t r = vmmipc__cu_load(&cu);
  if (r) return r;
  if (b->device < 0 || b->granularity == 0) {
    /* An imported empty buffer: new chunks go on the current device. */
    if ((r = vmmipc__current_device(cu, op, &b->device))) return r;
  }
  size_t g;
  if ((r = vmmipc__device_granularity(cu, b->device, op, &g))) return r;
  if (b->granularity < g) b->granularity = g;
  if (b->num_access == 0) {
    b->access[0].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    b->access[0].location.id = b->device;
    b->access[0].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    b->num_access = 1;
  }
  if ((r = vmmipc__grow_chunks(b))) return r;
  struct vmmipc__chunk nc;
  nc.size = vmmipc__round_up(new_size - b->mapped, b->granularity);
  if ((r = vmmipc__chunk_create(cu, b->device, nc.size, op, &nc.handle))) return r;
  int done = 0;
  /* Tests can force the move path with the "inplace" hook. */
  if (b->base && !VMMIPC__INJECT("inplace")) r = vmmipc__grow_in_place(cu, b, &nc, &done, op);
  if (!r && !done) {
    b->chunks[b->num_chunks] = nc;
    r = vmmipc__grow_move(cu, b, op);
  }
  if (r) {
    cu->cuMemRelease(nc.handle);
    return r;
  }
  b->chunks[b->num_chunks++] = nc;
  b->mapped += nc.size;
  b->size = new_size;
  return VMMIPC_SUCCESS;
}
