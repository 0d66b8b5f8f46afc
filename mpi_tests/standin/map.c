/* Mapping allocations into reservations, and per-device access. A mapping
 * is the allocation's memfd mapped MAP_SHARED over the reserved range;
 * access is enforced with mprotect (the union over devices), so a write
 * through a read-only mapping really faults. */
#include <stdlib.h>
#include <sys/mman.h>

#include "async.h"

sti_map *sti_map_containing(uintptr_t addr) {
  for (sti_map *m = sti.maps; m; m = m->next)
    if (addr >= m->base && addr - m->base < m->size) return m;
  return NULL;
}

static sti_map *sti_map_at(uintptr_t base) {
  for (sti_map *m = sti.maps; m; m = m->next)
    if (m->base == base) return m;
  return NULL;
}

static sti_resv *sti_resv_containing(uintptr_t p, size_t n) {
  for (sti_resv *r = sti.resvs; r; r = r->next)
    if (p >= r->base && p - r->base <= r->size && n <= r->size - (p - r->base)) return r;
  return NULL;
}

static int sti_overlaps_mapping(uintptr_t p, size_t n) {
  for (sti_map *m = sti.maps; m; m = m->next)
    if (p < m->base + m->size && m->base < p + n) return 1;
  return 0;
}

/* Whether [p, p+n) is exactly a run of whole, adjacent mappings. */
static int sti_whole_mappings(uintptr_t p, size_t n) {
  if (n == 0 || p + n < p) return 0;
  uintptr_t cur = p, end = p + n;
  while (cur < end) {
    sti_map *m = sti_map_at(cur);
    if (!m) return 0;
    cur += m->size;
  }
  return cur == end;
}

/* The whole allocation at offset 0: the library relies on a size mismatch
 * failing here to catch forged sizes. No access until cuMemSetAccess. */
CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                  unsigned long long flags) {
  CUresult rc = sti_enter();
  if (rc) return rc;
  uintptr_t p = (uintptr_t)ptr;
  sti_alloc *a = sti_alloc_find(handle);
  if (!a || flags != 0 || offset != 0 || size != a->size || p % STI_GRANULARITY != 0 ||
      !sti_resv_containing(p, size) || sti_overlaps_mapping(p, size)) {
    rc = CUDA_ERROR_INVALID_VALUE;
  } else {
    sti_map *m = calloc(1, sizeof *m);
    if (!m || mmap((void *)p, size, PROT_NONE, MAP_SHARED | MAP_FIXED, a->fd, 0) == MAP_FAILED) {
      free(m);
      rc = CUDA_ERROR_OUT_OF_MEMORY;
    } else {
      m->base = p;
      m->size = size;
      m->alloc = a;
      a->refs++;
      m->next = sti.maps;
      sti.maps = m;
    }
  }
  sti_leave();
  return rc;
}

/* Must cover whole mappings exactly; the range returns to PROT_NONE
 * reserved memory and each mapping drops its allocation reference. Like the
 * real driver's, synchronous: queued work that may use the range is over
 * first. */
CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  CUresult rc = sti_enter();
  if (rc) return rc;
  if (sti_async_on()) (void)sti_wait_ctx(NULL);
  uintptr_t cur = (uintptr_t)ptr, end = cur + size;
  if (!sti_whole_mappings(cur, size)) rc = CUDA_ERROR_INVALID_VALUE;
  while (rc == CUDA_SUCCESS && cur < end) {
    sti_map **pp = &sti.maps;
    while ((*pp)->base != cur) pp = &(*pp)->next;
    sti_map *m = *pp;
    void *back = mmap((void *)m->base, m->size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED,
                      -1, 0);
    if (back == MAP_FAILED) {
      rc = CUDA_ERROR_OUT_OF_MEMORY;
      break;
    }
    cur += m->size;
    *pp = m->next;
    sti_alloc_unref(m->alloc);
    free(m);
  }
  sti_leave();
  return rc;
}

static int sti_prot_of(const unsigned char access[STI_MAX_DEVICES]) {
  int prot = PROT_NONE;
  for (int i = 0; i < STI_MAX_DEVICES; i++) {
    if (access[i] == CU_MEM_ACCESS_FLAGS_PROT_READWRITE) prot |= PROT_READ | PROT_WRITE;
    if (access[i] == CU_MEM_ACCESS_FLAGS_PROT_READ) prot |= PROT_READ;
  }
  return prot;
}

static CUresult sti_check_desc(const CUmemAccessDesc *d) {
  if (d->location.type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_INVALID_VALUE;
  if (!sti_valid_ordinal(d->location.id)) return CUDA_ERROR_INVALID_DEVICE;
  if (d->flags != CU_MEM_ACCESS_FLAGS_PROT_NONE && d->flags != CU_MEM_ACCESS_FLAGS_PROT_READ &&
      d->flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
    return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

/* Records the flags per mapping per device and mprotects each mapping to
 * the union. The range must be a run of whole mappings. */
CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count) {
  if (!desc || count == 0) return CUDA_ERROR_INVALID_VALUE;
  CUresult rc = sti_enter();
  if (rc) return rc;
  for (size_t i = 0; i < count && rc == CUDA_SUCCESS; i++) rc = sti_check_desc(&desc[i]);
  if (rc == CUDA_SUCCESS && !sti_whole_mappings((uintptr_t)ptr, size)) rc = CUDA_ERROR_INVALID_VALUE;
  uintptr_t cur = (uintptr_t)ptr, end = cur + size;
  while (rc == CUDA_SUCCESS && cur < end) {
    sti_map *m = sti_map_at(cur);
    unsigned char access[STI_MAX_DEVICES];
    for (int d = 0; d < STI_MAX_DEVICES; d++) access[d] = m->access[d];
    for (size_t i = 0; i < count; i++) access[desc[i].location.id] = (unsigned char)desc[i].flags;
    if (mprotect((void *)m->base, m->size, sti_prot_of(access)) != 0) {
      rc = CUDA_ERROR_OUT_OF_MEMORY;
      break;
    }
    for (int d = 0; d < STI_MAX_DEVICES; d++) m->access[d] = access[d];
    cur += m->size;
  }
  sti_leave();
  return rc;
}

CUresult cuMemGetAccess(unsigned long long *flags, const CUmemLocation *location, CUdeviceptr ptr) {
  if (!flags || !location) return CUDA_ERROR_INVALID_VALUE;
  CUresult rc = sti_enter();
  if (rc) return rc;
  sti_map *m = sti_map_containing((uintptr_t)ptr);
  if (location->type != CU_MEM_LOCATION_TYPE_DEVICE)
    rc = CUDA_ERROR_INVALID_VALUE;
  else if (!sti_valid_ordinal(location->id))
    rc = CUDA_ERROR_INVALID_DEVICE;
  else if (!m)
    rc = CUDA_ERROR_INVALID_VALUE;
  else
    *flags = m->access[location->id];
  sti_leave();
  return rc;
}
