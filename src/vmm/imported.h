/* The address ranges of this process that hold memory imported from
 * another process (vmmipc_import, the mapping cache's entries): what
 * vmmipc_buf_wrap consults to refuse wrapping them, since the driver
 * cannot export imported memory again. Thread-safe. */
#ifndef VMMIPC_VMM_IMPORTED_H
#define VMMIPC_VMM_IMPORTED_H

#include <stddef.h>

#include <cuda.h>

#include "vmmipc.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Records [base, base + size); VMMIPC_ERR_NO_MEMORY if it cannot. */
vmmipc_result_t vmmipc__imported_add(CUdeviceptr base, size_t size);
/* Forgets the range that starts at base (nothing if none). */
void vmmipc__imported_remove(CUdeviceptr base);
/* Whether [base, base + size) overlaps a recorded range; *at gets the start
 * of the first overlapping one. */
int vmmipc__imported_overlaps(CUdeviceptr base, size_t size, CUdeviceptr *at);

#ifdef __cplusplus
}
#endif
#endif
