/* The mapping cache: imported mappings kept per buffer identity, so that
 * mapping an unchanged buffer again costs no import, map or access call.
 * One cache per comm (the collective layer owns it); thread-safe.
 *
 * Key: the descriptor's identity (owner host, pid and process nonce, buffer
 * serial, generation) and the resolved access (protection and the set of
 * devices). A descriptor without an identity is never cached.
 *
 * A hit returns a new buffer (a "view") that shares the entry's mapping;
 * every view counts as a reference. vmmipc_buf_free of a view drops its
 * reference; an entry with no reference left stays idle in the cache, most
 * recently used last, until more than max_idle entries are idle (the least
 * recently used one is then released: an eviction) or the cache is
 * destroyed. Views are imported buffers: never exportable, never grown.
 *
 * The owner's side: a grown buffer exports a new generation, so it never
 * hits an entry of its old layout (that entry ages out as any idle one). A
 * buffer the owner freed stays alive in the importer as long as an entry
 * holds it (the imported handles keep the physical memory), until the entry
 * is evicted or the cache destroyed: the question UCX's cuda_ipc cache
 * faces too. The owner's process cannot reuse that memory before then, and
 * its serials are never reused, so no later buffer is mistaken for it.
 *
 * After vmmipc__mapcache_destroy, views still in use keep working; their
 * entries are released with their last view. */
#ifndef VMMIPC_VMM_MAPCACHE_H
#define VMMIPC_VMM_MAPCACHE_H

#include <stdint.h>

#include "vmm/vmm.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct vmmipc__mapcache vmmipc__mapcache_t;

typedef struct vmmipc__mapcache_stats {
  uint64_t hits;      /* imports served by an entry */
  uint64_t misses;    /* imports that mapped anew */
  uint64_t evictions; /* idle entries released to stay within max_idle */
  int idle;           /* entries with no view now */
  int entries;        /* entries now, idle or in use */
} vmmipc__mapcache_stats_t;

/* max_idle: idle entries kept (>= 0); 0 caches nothing (every import maps
 * anew and is released with its buffer). */
vmmipc_result_t vmmipc__mapcache_create(int max_idle, vmmipc__mapcache_t **out);
/* Releases the idle entries now and the others with their last view;
 * returns the first failure of a release. NULL is accepted. */
vmmipc_result_t vmmipc__mapcache_destroy(vmmipc__mapcache_t *c);
/* Like vmmipc_import (same checks, errors and rollback), through the cache.
 * `t` (may be NULL) gets the import phases of a miss; *hit (may be NULL)
 * tells whether an entry served it. */
vmmipc_result_t vmmipc__mapcache_import(vmmipc__mapcache_t *c, vmmipc_desc_t desc, const vmmipc_access_t *access,
                                        vmmipc_timing_t *t, vmmipc_buf_t *out, int *hit);
void vmmipc__mapcache_stats(vmmipc__mapcache_t *c, vmmipc__mapcache_stats_t *out);

#ifdef __cplusplus
}
#endif
#endif
