/* Buffers: VMM chunks mapped back to back in one or more reservations. */
#ifndef VMMIPC_VMM_VMM_H
#define VMMIPC_VMM_VMM_H

#include <stdint.h>

#include "driver/cu.h"

#ifdef __cplusplus
extern "C" {
#endif

#define VMMIPC__MAX_ACCESS 64 /* devices one mapping can grant access to */
/* vmmipc_alloc_ex's default chunk size. On the H200 pair, 1 GiB mapped with
 * peer access took 9.1 ms as 16 chunks of 64 MiB against 22.8 ms as one
 * chunk of 1 GiB (benchmarks/results/2026-11-30-h200x2): peer access of one
 * large mapping costs more than that of several smaller ones. */
#define VMMIPC__DEFAULT_CHUNK_SIZE ((size_t)64 << 20)

struct vmmipc__chunk {
  CUmemGenericAllocationHandle handle;
  size_t size;
  int export_fd; /* export cache: the chunk's exported fd, kept until the chunk goes; -1: none */
};

struct vmmipc__resv {
  CUdeviceptr ptr;
  size_t size;
};

struct vmmipc__mapent; /* a mapping-cache entry (vmm/mapcache.h) */

/* Who owns what a buffer maps, which decides what free undoes:
 * - allocated (vmmipc_alloc/_ex): chunks, mappings and reservations;
 * - imported: the same, of imported handles; never exportable;
 * - wrapped (vmmipc_buf_wrap): only the handles it retained; the
 *   application's mappings and reservations are never touched;
 * - a view of a mapping-cache entry (cached != NULL): nothing of its own;
 *   chunks point into the entry's mapping; free drops a reference. */
struct vmmipc_buf {
  CUdeviceptr base;            /* 0 for an empty buffer */
  size_t size;                 /* bytes the user asked for */
  size_t mapped;               /* sum of the chunk sizes */
  int num_chunks, cap_chunks;
  struct vmmipc__chunk *chunks;
  int num_resv, cap_resv;      /* an in-place grow adds a reservation */
  struct vmmipc__resv *resv;
  int imported;                /* holds imported memory: never exportable */
  int wrapped;                 /* wraps memory the application mapped */
  int exposed;                 /* live windows exposing the buffer: free and grow are refused
                                  (__atomic builtins: windows of two comms may change it at once) */
  int listed;                  /* imported: its range is in vmm/imported.h's registry */
  int device;                  /* ordinal that new chunks are created on */
  vmmipc_uuid_t owner;         /* owner GPU of the memory */
  size_t granularity;
  size_t chunk_size;           /* grow appends chunks of at most this; 0: one chunk per grow */
  unsigned int alloc_flags;    /* VMMIPC_ALLOC_* of every chunk */
  int num_access;              /* 0 for a wrapped buffer: its access is the application's */
  CUmemAccessDesc access[VMMIPC__MAX_ACCESS];
  int export_cache;            /* 1: each chunk keeps its exported fd (export_fd) */
  uint64_t serial;             /* identity: per process, never reused; 0 for imports */
  uint64_t generation;         /* changes whenever the buffer grows */
  struct vmmipc__mapent *cached; /* the entry a view shares, or NULL */
  int exported;                /* this generation was exported (__atomic builtins): freeing or growing
                                  it is noted for importers (vmm/freed.h) */
};

/* Resolve what an importer asks for into access descriptors. NULL or no
 * devices means the current device. Errors name unknown UUIDs. */
vmmipc_result_t vmmipc__access_resolve(const vmmipc__cu_t *cu, const vmmipc_access_t *a, const char *op,
                                       CUmemAccessDesc *out, int *num);

/* Map chunks c[0..n) back to back from `at`; on failure unmap what this call
 * mapped. `first`/`total` number the chunks in messages ("chunk k of n");
 * `hint` (or NULL) ends a failure's message. */
vmmipc_result_t vmmipc__map_chunks(const vmmipc__cu_t *cu, CUdeviceptr at, const struct vmmipc__chunk *c, int n,
                                   int first, int total, const char *hint, const char *op);
void vmmipc__unmap_chunks(const vmmipc__cu_t *cu, CUdeviceptr at, const struct vmmipc__chunk *c, int n);
vmmipc_result_t vmmipc__set_access(const vmmipc__cu_t *cu, CUdeviceptr at, size_t size, const CUmemAccessDesc *a,
                                   int n, const char *op);
/* Reserve `size` bytes aligned to `align`, preferably at `hint`. */
vmmipc_result_t vmmipc__reserve(const vmmipc__cu_t *cu, size_t size, size_t align, CUdeviceptr hint,
                                CUdeviceptr *out, const char *op);
/* Create one exportable chunk on `device` with VMMIPC_ALLOC_* `flags`. */
vmmipc_result_t vmmipc__chunk_create(const vmmipc__cu_t *cu, int device, size_t size, unsigned int flags,
                                     const char *op, CUmemGenericAllocationHandle *out);
/* Allocation granularity of `device`; checks VMM and POSIX-fd support. */
vmmipc_result_t vmmipc__device_granularity(const vmmipc__cu_t *cu, int device, const char *op, size_t *out);
/* Both granularities (either output may be NULL), with the same checks. */
vmmipc_result_t vmmipc__device_granularities(const vmmipc__cu_t *cu, int device, const char *op, size_t *minimum,
                                             size_t *recommended);
/* Whether `device` can create chunks with `flags`; UNSUPPORTED names the flag. */
vmmipc_result_t vmmipc__check_alloc_flags(const vmmipc__cu_t *cu, int device, unsigned int flags, const char *op);

/* Empty buffer record with room for `chunks` chunks; a failure names `op`. */
vmmipc_result_t vmmipc__buf_new(int chunks, const char *op, struct vmmipc_buf **out);
/* Undo everything a buffer holds (as its kind says) and free the record.
 * Goes on after a failed driver call; returns the first failure, with a
 * message naming the call and the chunk. */
vmmipc_result_t vmmipc__buf_destroy(const vmmipc__cu_t *cu, struct vmmipc_buf *b);
/* The same for rollback after another failure: that failure's message stays. */
void vmmipc__buf_discard(const vmmipc__cu_t *cu, struct vmmipc_buf *b);
vmmipc_result_t vmmipc__buf_add_resv(struct vmmipc_buf *b, CUdeviceptr ptr, size_t size, const char *op);
/* Room for `more` chunks beyond num_chunks. */
vmmipc_result_t vmmipc__buf_reserve_chunks(struct vmmipc_buf *b, int more, const char *op);
/* Refusal while windows expose `b` (VMMIPC_ERR_INVALID_ARG naming how many). */
vmmipc_result_t vmmipc__buf_check_unexposed(const struct vmmipc_buf *b, const char *op);

/* vmmipc_export, or (with_fds 0) the same descriptor with every fd -1: what
 * a peer that holds the buffer mapped needs (coll/xchg.c). */
vmmipc_result_t vmmipc__export_ex(vmmipc_buf_t b, int with_fds, vmmipc_desc_t *out);
/* A new buffer serial: unique in this process, never 0. */
uint64_t vmmipc__next_serial(void);
/* Whether new buffers keep exported fds: props value (< 0: default), else
 * VMMIPC_EXPORT_CACHE (0 or 1; unset or empty: 1). */
vmmipc_result_t vmmipc__export_cache_choice(int requested, const char *op, int *on);
/* What import checks before any driver call: the metadata, one fd per
 * chunk, and the host. */
vmmipc_result_t vmmipc__import_check(const struct vmmipc_desc *d, const char *op);
/* vmmipc_import that adds its import/map/access time to `t` (may be NULL).
 * (Also declared in coll/coll.h, where the collectives used to find it.) */
vmmipc_result_t vmmipc__import_timed(vmmipc_desc_t d, const vmmipc_access_t *access, vmmipc_buf_t *out,
                                     vmmipc_timing_t *t);
/* Drop a view's reference to its cache entry (vmm/mapcache.c); releases the
 * mapping when the entry goes. */
vmmipc_result_t vmmipc__mapent_release(const vmmipc__cu_t *cu, struct vmmipc__mapent *e);

/* vmmipc_import that adds its import/map/access phases to *t (may be NULL). */
vmmipc_result_t vmmipc__import_timed(vmmipc_desc_t d, const vmmipc_access_t *access, vmmipc_buf_t *out,
                                     vmmipc_timing_t *t);

static inline size_t vmmipc__round_up(size_t v, size_t g) { return (v + g - 1) / g * g; }

#ifdef __cplusplus
}
#endif
#endif
