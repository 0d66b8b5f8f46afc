/* Mapped host memory (hostmem.c), lock held. */
#ifndef VMMIPC_STANDIN_HOSTMEM_H
#define VMMIPC_STANDIN_HOSTMEM_H

#include "state.h"

/* Live cuMemHostAlloc allocations. */
long sti_host_alloc_count(void);
/* Whether [p, p+n) lies in one cuMemHostAlloc allocation (page-locked). */
int sti_is_pinned(uintptr_t p, size_t n);

#endif
