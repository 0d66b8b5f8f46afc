/* The mapping cache: imported mappings kept per buffer identity, so that
 * mapping an unchanged buffer again costs no import, map or access call,
 * and (in the collectives) no fd either. One cache per comm (the
 * collective layer owns it); thread-safe.
 *
 * Key: the descriptor's identity (owner host, pid and process nonce, buffer
 * serial, generation) and the resolved access (protection and the set of
 * devices). A descriptor without an identity is never cached.
 *
 * A hit returns a new buffer (a "view") that shares the entry's mapping;
 * every view counts as a reference. vmmipc_buf_free of a view drops its
 * reference; an entry with no reference left stays idle in the cache, until
 * more than max_idle entries are idle or their bytes exceed max_bytes (the
 * least recently used idle ones are then released: evictions), it is
 * trimmed, its owner says it freed the buffer, or the cache is destroyed.
 * Views are imported buffers: never exportable, never grown.
 *
 * The owner's side: a grown buffer exports a new generation, so it never
 * hits an entry of its old layout. When an owner frees (or grows) a buffer
 * it exported, the collectives tell its peers (vmm/freed.h, coll/msg.h),
 * and vmmipc__mapcache_drop releases the entry (an idle one at once, one in
 * use with its last view, and it is never hit again): the imported handles
 * no longer keep the owner's memory. Serials are never reused, so no later
 * buffer is mistaken for a freed one.
 *
 * Pinning (the collectives' "have" lists): an importer tells an owner which
 * of its buffers it holds, and the owner then sends those descriptors
 * without fds. The entries reported are pinned (a reference each) until
 * the collective ends, so that no other thread's eviction can make the
 * report wrong.
 *
 * After vmmipc__mapcache_destroy, views still in use keep working; their
 * entries are released with their last view. */
#ifndef VMMIPC_VMM_MAPCACHE_H
#define VMMIPC_VMM_MAPCACHE_H

#include <stdint.h>

#include "vmm/freed.h"
#include "vmm/vmm.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct vmmipc__mapcache vmmipc__mapcache_t;
struct vmmipc__mapent;

typedef struct vmmipc__mapcache_stats {
  uint64_t hits;         /* imports served by an entry */
  uint64_t misses;       /* imports that mapped anew */
  uint64_t evictions;    /* idle entries released to stay within the bounds */
  uint64_t freed;        /* entries dropped because their owner freed or grew the buffer */
  uint64_t fds_not_sent; /* chunks of hits whose descriptor came without fds */
  uint64_t bytes;        /* bytes the entries map now, idle or in use */
  uint64_t idle_bytes;   /* of which idle */
  int idle;              /* entries with no view now */
  int entries;           /* entries now, idle or in use */
  int handles;           /* imported chunk handles the entries hold */
} vmmipc__mapcache_stats_t;

/* max_idle: idle entries kept (>= 0); 0 caches nothing (every import maps
 * anew and is released with its buffer). No byte bound until set. */
vmmipc_result_t vmmipc__mapcache_create(int max_idle, vmmipc__mapcache_t **out);
/* Bound on the bytes of idle entries (0: none); evicts at once if needed. */
void vmmipc__mapcache_set_max_bytes(vmmipc__mapcache_t *c, uint64_t max_bytes);
/* Releases the idle entries now and the others with their last view;
 * returns the first failure of a release. NULL is accepted. */
vmmipc_result_t vmmipc__mapcache_destroy(vmmipc__mapcache_t *c);
/* Like vmmipc_import (same checks, errors and rollback), through the cache.
 * A descriptor whose fds are all -1 (its owner left them out because this
 * rank holds the mapping) is served by an entry or refused with
 * VMMIPC_ERR_INVALID_DESC. `t` (may be NULL) gets the import phases of a
 * miss; *hit (may be NULL) tells whether an entry served it. */
vmmipc_result_t vmmipc__mapcache_import(vmmipc__mapcache_t *c, vmmipc_desc_t desc, const vmmipc_access_t *access,
                                        vmmipc_timing_t *t, vmmipc_buf_t *out, int *hit);
void vmmipc__mapcache_stats(vmmipc__mapcache_t *c, vmmipc__mapcache_stats_t *out);

/* The owner process (pid, nonce) freed these identities (all: every buffer
 * of it, when its list overflowed): their entries are released (idle) or
 * doomed (in use: released with the last view, never hit). Returns the
 * entries dropped; a failed release is reported by the next call that
 * fails, never here (the handles are released either way). */
int vmmipc__mapcache_drop(vmmipc__mapcache_t *c, uint32_t pid, uint64_t nonce, const vmmipc__freed_id_t *ids,
                          int n, int all);
/* Releases every idle entry; *released (may be NULL) gets their bytes. */
vmmipc_result_t vmmipc__mapcache_trim(vmmipc__mapcache_t *c, uint64_t *released);
/* Pins (one reference each) up to `max` entries of owner process `pid` with
 * the access `access` resolves to, most recently used first; fills ids and
 * pinned and returns how many. Failures (resolving the access) pin none. */
int vmmipc__mapcache_pin(vmmipc__mapcache_t *c, uint32_t pid, const vmmipc_access_t *access,
                         vmmipc__freed_id_t *ids, struct vmmipc__mapent **pinned, int max);
/* Drops the references of vmmipc__mapcache_pin, without making the
 * entries more recently used. */
void vmmipc__mapcache_unpin(struct vmmipc__mapent **pinned, int n);

#ifdef __cplusplus
}
#endif
#endif
