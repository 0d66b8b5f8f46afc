/* vmmipc_grow: append chunks, in place when the address range after the
 * buffer is free, else by remapping every chunk into a new reservation. The
 * physical chunks never change, so the data is kept either way. Only
 * buffers this process allocated grow: an import or a wrap maps memory
 * whose owner is someone else. */
#include <stdlib.h>

#include "common/error.h"
#include "common/testhooks.h"
#include "desc/desc.h"
#include "vmm/freed.h"
#include "vmm/vmm.h"

/* Map the k new chunks (at chunks[num_chunks]) right after the buffer;
 * *done tells if it worked. Undoes its own work on failure. */
static vmmipc_result_t vmmipc__grow_in_place(const vmmipc__cu_t *cu, struct vmmipc_buf *b, int k, size_t need,
                                             int *done, const char *op) {
  *done = 0;
  const struct vmmipc__chunk *nc = b->chunks + b->num_chunks;
  CUdeviceptr want = b->base + b->mapped, got = 0;
  if (cu->cuMemAddressReserve(&got, need, b->granularity, want, 0) != CUDA_SUCCESS) return VMMIPC_SUCCESS;
  if (got != want) {
    cu->cuMemAddressFree(got, need);
    return VMMIPC_SUCCESS;
  }
  vmmipc_result_t r = vmmipc__map_chunks(cu, got, nc, k, b->num_chunks, b->num_chunks + k, NULL, op);
  if (r) goto free_va;
  if ((r = vmmipc__set_access(cu, got, need, b->access, b->num_access, op))) goto unmap;
  if ((r = vmmipc__buf_add_resv(b, got, need, op))) goto unmap;
  *done = 1;
  return VMMIPC_SUCCESS;
unmap: /* a reservation is freed only once nothing is mapped in it */
  vmmipc__unmap_chunks(cu, got, nc, k);
free_va:
  cu->cuMemAddressFree(got, need);
  return r;
}

/* Map every chunk (the old ones and the k new ones) into a fresh reservation. */
static vmmipc_result_t vmmipc__grow_move(const vmmipc__cu_t *cu, struct vmmipc_buf *b, int k, size_t need,
                                         const char *op) {
  int n = b->num_chunks + k;
  size_t total = b->mapped + need;
  CUdeviceptr base = 0;
  vmmipc_result_t r = vmmipc__reserve(cu, total, b->granularity, 0, &base, op);
  if (r) return r;
  struct vmmipc__resv *nr = malloc(sizeof *nr);
  if (!nr) {
    cu->cuMemAddressFree(base, total);
    return vmmipc__error(VMMIPC_ERR_NO_MEMORY, "%s: recording a reservation", op);
  }
  if ((r = vmmipc__map_chunks(cu, base, b->chunks, n, 0, n, NULL, op))) goto undo_resv;
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

/* A descriptor exported from now on differs, so it is never served from a
 * stale cache entry; importers that cached the old generation are told
 * (vmm/freed.h), since its entry can never be hit again. */
static void vmmipc__retire_generation(struct vmmipc_buf *b) {
  if (__atomic_exchange_n(&b->exported, 0, __ATOMIC_RELAXED)) vmmipc__freed_note(b->serial, b->generation);
  b->generation++;
}

static vmmipc_result_t vmmipc__grow_check(const struct vmmipc_buf *b, size_t new_size, const char *op) {
  if (b->wrapped)
    return vmmipc__error(VMMIPC_ERR_INVALID_ARG,
                         "%s: the buffer wraps memory the application mapped (vmmipc_buf_wrap); hint: extend "
                         "your own mapping and wrap the new range",
                         op);
  if (b->imported)
    return vmmipc__error(VMMIPC_ERR_INVALID_ARG,
                         "%s: the buffer holds memory imported from another process; hint: the owner grows it "
                         "(vmmipc_grow) and shares it again",
                         op);
  vmmipc_result_t r = vmmipc__buf_check_unexposed(b, op);
  if (r) return r;
  if (new_size < b->size)
    return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "%s: new size %zu is smaller than the current %zu; buffers only grow",
                         op, new_size, b->size);
  if (new_size > SIZE_MAX / 2) return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "%s: size %zu is too large", op, new_size);
  return VMMIPC_SUCCESS;
}

vmmipc_result_t vmmipc_grow(vmmipc_buf_t b, size_t new_size) {
  const char *op = "vmmipc_grow";
  if (!b) return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "%s: buf is NULL", op);
  vmmipc_result_t r = vmmipc__grow_check(b, new_size, op);
  if (r) return r;
  if (new_size == b->size) return VMMIPC_SUCCESS;
  if (new_size <= b->mapped) {
    b->size = new_size;
    vmmipc__retire_generation(b);
    return VMMIPC_SUCCESS;
  }
  const vmmipc__cu_t *cu;
  if ((r = vmmipc__cu_load(&cu))) return r;
  size_t need = vmmipc__round_up(new_size - b->mapped, b->granularity);
  size_t per = b->chunk_size ? b->chunk_size : need;
  size_t k = (need + per - 1) / per;
  if (k > VMMIPC__DESC_MAX_CHUNKS - (size_t)b->num_chunks)
    return vmmipc__error(VMMIPC_ERR_INVALID_ARG,
                         "%s: %zu more chunks would make more than a descriptor holds (%u); hint: allocate with "
                         "larger chunks (vmmipc_alloc_ex)",
                         op, k, VMMIPC__DESC_MAX_CHUNKS);
  if ((r = vmmipc__buf_reserve_chunks(b, (int)k, op))) return r;
  /* The new chunks sit after num_chunks until the grow commits. */
  struct vmmipc__chunk *nc = b->chunks + b->num_chunks;
  int made = 0;
  for (; made < (int)k && !r; made++) {
    size_t left = need - (size_t)made * per;
    nc[made].size = left < per ? left : per;
    r = vmmipc__chunk_create(cu, b->device, nc[made].size, b->alloc_flags, op, &nc[made].handle);
  }
  if (r) {
    made--; /* the one that failed */
  } else {
    int done = 0;
    /* Tests can force the move path with the "inplace" hook. */
    if (b->base && !VMMIPC__INJECT("inplace")) r = vmmipc__grow_in_place(cu, b, (int)k, need, &done, op);
    if (!r && !done) r = vmmipc__grow_move(cu, b, (int)k, need, op);
  }
  if (r) {
    for (int i = 0; i < made; i++) cu->cuMemRelease(nc[i].handle);
    return r;
  }
  b->num_chunks += (int)k;
  b->mapped += need;
  b->size = new_size;
  vmmipc__retire_generation(b);
  return VMMIPC_SUCCESS;
}
