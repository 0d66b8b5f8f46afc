/* Buffers: VMM chunks mapped back to back in one or more reservations. */
#ifndef VMMIPC_VMM_VMM_H
#define VMMIPC_VMM_VMM_H

#include "driver/cu.h"

#ifdef __cplusplus
extern "C" {
#endif

#define VMMIPC__MAX_ACCESS 64 /* devices one mapping can grant access to */

struct vmmipc__chunk {
  CUmemGenericAllocationHandle handle;
  size_t size;
};

struct vmmipc__resv {
  CUdeviceptr ptr;
  size_t size;
};

struct vmmipc_buf {
  CUdeviceptr base;            /* 0 for an empty buffer */
  size_t size;                 /* bytes the user asked for */
  size_t mapped;               /* sum of the chunk sizes */
  int num_chunks, cap_chunks;
  struct vmmipc__chunk *chunks;
  int num_resv, cap_resv;      /* an in-place grow adds a reservation */
  struct vmmipc__resv *resv;
  int imported;                /* holds imported memory: never exportable */
  int device;                  /* ordinal that new chunks are created on */
  vmmipc_uuid_t owner;         /* owner GPU of the memory */
  int exposed;                 /* live windows that expose this buffer */
  size_t granularity;
  int num_access;
  CUmemAccessDesc access[VMMIPC__MAX_ACCESS];
};

/* Resolve what an importer asks for into access descriptors. NULL or no
 * devices means the current device. Errors name unknown UUIDs. */
vmmipc_result_t vmmipc__access_resolve(const vmmipc__cu_t *cu, const vmmipc_access_t *a, const char *op,
                                       CUmemAccessDesc *out, int *num);

/* Map chunks c[0..n) back to back from `at`; on failure unmap what this call
 * mapped. `first`/`total` number the chunks in messages ("chunk k of n"). */
vmmipc_result_t vmmipc__map_chunks(const vmmipc__cu_t *cu, CUdeviceptr at, const struct vmmipc__chunk *c, int n,
                                   int first, int total, const char *op);
void vmmipc__unmap_chunks(const vmmipc__cu_t *cu, CUdeviceptr at, const struct vmmipc__chunk *c, int n);
vmmipc_result_t vmmipc__set_access(const vmmipc__cu_t *cu, CUdeviceptr at, size_t size, const CUmemAccessDesc *a,
                                   int n, const char *op);
/* Reserve `size` bytes aligned to `align`, preferably at `hint`. */
vmmipc_result_t vmmipc__reserve(const vmmipc__cu_t *cu, size_t size, size_t align, CUdeviceptr hint,
                                CUdeviceptr *out, const char *op);
/* Create one exportable chunk on `device`. */
vmmipc_result_t vmmipc__chunk_create(const vmmipc__cu_t *cu, int device, size_t size, const char *op,
                                     CUmemGenericAllocationHandle *out);
/* Allocation granularity of `device`; checks VMM and POSIX-fd support. */
vmmipc_result_t vmmipc__device_granularity(const vmmipc__cu_t *cu, int device, const char *op, size_t *out);

/* Empty buffer record with room for `chunks` chunks. */
vmmipc_result_t vmmipc__buf_new(int chunks, struct vmmipc_buf **out);
/* Unmap, release and free everything a buffer holds. */
void vmmipc__buf_destroy(const vmmipc__cu_t *cu, struct vmmipc_buf *b);
vmmipc_result_t vmmipc__buf_add_resv(struct vmmipc_buf *b, CUdeviceptr ptr, size_t size);

/* vmmipc_import that adds its import/map/access phases to *t (may be NULL). */
vmmipc_result_t vmmipc__import_timed(vmmipc_desc_t d, const vmmipc_access_t *access, vmmipc_buf_t *out,
                                     vmmipc_timing_t *t);

static inline size_t vmmipc__round_up(size_t v, size_t g) { return (v + g - 1) / g * g; }

#ifdef __cplusplus
}
#endif
#endif
