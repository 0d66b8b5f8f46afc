/* Mapped (page-locked) host memory: cuMemHostAlloc is plain memory whose
 * device address is its own. The stand-in remembers the ranges, because
 * copies from page-locked memory behave differently from copies from
 * pageable memory (copy.c). */
#include <stdlib.h>

#include "async.h"
#include "hostmem.h"

typedef struct sti_host {
  struct sti_host *next;
  uintptr_t base;
  size_t size;
} sti_host;

static sti_host *sti_hosts; /* lock held */

long sti_host_alloc_count(void) {
  long n = 0;
  for (sti_host *h = sti_hosts; h; h = h->next) n++;
  return n;
}

int sti_is_pinned(uintptr_t p, size_t n) {
  for (sti_host *h = sti_hosts; h; h = h->next)
    if (p >= h->base && p - h->base <= h->size && n <= h->size - (p - h->base)) return 1;
  return 0;
}

CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int flags) {
  if (!pp || !bytesize) return CUDA_ERROR_INVALID_VALUE;
  const unsigned known = CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED;
  if (flags & ~known) return CUDA_ERROR_INVALID_VALUE;
  CUresult rc = sti_enter_ctx();
  if (rc) return rc;
  sti_host *h = calloc(1, sizeof *h);
  *pp = h ? calloc(1, bytesize) : NULL;
  if (*pp) {
    h->base = (uintptr_t)*pp;
    h->size = bytesize;
    h->next = sti_hosts;
    sti_hosts = h;
  } else {
    free(h);
    rc = CUDA_ERROR_OUT_OF_MEMORY;
  }
  sti_leave();
  return rc;
}

/* Waits for queued work first, as the real driver does: a queued copy may
 * still read or write it. */
CUresult cuMemFreeHost(void *p) {
  CUresult rc = sti_enter();
  if (rc) return rc;
  if (p && sti_async_on()) (void)sti_wait_ctx(NULL);
  if (p) {
    sti_host **pp = &sti_hosts;
    while (*pp && (*pp)->base != (uintptr_t)p) pp = &(*pp)->next;
    if (*pp) {
      sti_host *h = *pp;
      *pp = h->next;
      free(h);
      free(p);
    } else {
      rc = CUDA_ERROR_INVALID_VALUE;
    }
  }
  sti_leave();
  return rc;
}

CUresult cuMemHostGetDevicePointer(CUdeviceptr *pdptr, void *p, unsigned int flags) {
  if (!pdptr || !p || flags) return CUDA_ERROR_INVALID_VALUE;
  *pdptr = (CUdeviceptr)(uintptr_t)p;
  return CUDA_SUCCESS;
}
