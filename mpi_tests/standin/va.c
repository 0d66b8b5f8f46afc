/* Virtual address reservations: PROT_NONE, MAP_NORESERVE anonymous memory,
 * so a reservation costs address space only and any stray access faults. */
#include <sys/mman.h>

#include <stdlib.h>

#include "state.h"

static void *sti_mmap_none(void *hint, size_t len, int extra) {
  return mmap(hint, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | extra, -1, 0);
}

/* Tries the caller's hint first (the library grows a buffer in place by
 * asking for the range right after its reservation, which works on the real
 * driver when that range is free); otherwise over-reserves and trims to the
 * alignment. Returns 0 when out of address space. */
static uintptr_t sti_reserve(size_t size, size_t align, uintptr_t hint) {
  if (hint && hint % align == 0) {
    void *p = sti_mmap_none((void *)hint, size, MAP_FIXED_NOREPLACE);
    if (p == (void *)hint) return hint;
    /* Kernels before 4.17 treat the flag as a plain hint: undo a miss. */
    if (p != MAP_FAILED) munmap(p, size);
  }
  if (size > SIZE_MAX - align) return 0;
  size_t total = size + align;
  void *p = sti_mmap_none(NULL, total, 0);
  if (p == MAP_FAILED) return 0;
  uintptr_t start = (uintptr_t)p;
  uintptr_t base = (start + align - 1) & ~(uintptr_t)(align - 1);
  size_t head = base - start, tail = total - head - size;
  if (head) munmap(p, head);
  if (tail) munmap((void *)(base + size), tail);
  return base;
}

CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                             unsigned long long flags) {
  if (!ptr) return CUDA_ERROR_INVALID_VALUE;
  CUresult rc = sti_enter();
  if (rc) return rc;
  if (flags != 0 || size == 0 || size % STI_GRANULARITY != 0 || (alignment & (alignment - 1)) != 0) {
    rc = CUDA_ERROR_INVALID_VALUE;
  } else {
    size_t align = alignment > STI_GRANULARITY ? alignment : STI_GRANULARITY;
    sti_resv *r = calloc(1, sizeof *r);
    uintptr_t base = r ? sti_reserve(size, align, (uintptr_t)addr) : 0;
    if (!base) {
      free(r);
      rc = CUDA_ERROR_OUT_OF_MEMORY;
    } else {
      r->base = base;
      r->size = size;
      r->next = sti.resvs;
      sti.resvs = r;
      *ptr = (CUdeviceptr)base;
    }
  }
  sti_leave();
  return rc;
}

/* Must name a reservation exactly. A reservation that still holds mappings
 * is refused, so a forgotten cuMemUnmap shows up as an error. */
CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  CUresult rc = sti_enter();
  if (rc) return rc;
  sti_resv **pp = &sti.resvs;
  while (*pp && !((*pp)->base == (uintptr_t)ptr && (*pp)->size == size)) pp = &(*pp)->next;
  sti_resv *r = *pp;
  int busy = 0;
  for (sti_map *m = sti.maps; r && m; m = m->next)
    if (m->base >= r->base && m->base < r->base + r->size) busy = 1;
  if (!r || busy) {
    rc = CUDA_ERROR_INVALID_VALUE;
  } else {
    munmap((void *)r->base, r->size);
    *pp = r->next;
    free(r);
  }
  sti_leave();
  return rc;
}
