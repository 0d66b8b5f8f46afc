/* The mapping cache (vmm/mapcache.h). Entries live in one list per cache;
 * the lock of the cache guards the list, the counters and every entry's
 * reference count. Driver calls (imports on a miss, releases of evicted,
 * dropped or trimmed entries) run outside the lock: entries to release are
 * unlinked under it and chained on their `next` pointer. A destroyed cache
 * stays allocated until its last entry goes, because views reach it
 * through their entry. */
#include "vmm/mapcache.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <stdio.h>

#include "common/error.h"
#include "common/host.h"
#include "desc/desc.h"

struct vmmipc__mapent {
  struct vmmipc__mapent *prev, *next;
  struct vmmipc__mapcache *cache;
  /* key */
  unsigned char host[16];
  uint32_t pid;
  uint64_t nonce, serial, generation;
  int num_access;
  CUmemAccessDesc access[VMMIPC__MAX_ACCESS]; /* sorted by device */
  /* the mapping: an imported buffer this entry owns */
  struct vmmipc_buf *map;
  long refs;          /* views alive (and pins) */
  uint64_t last_used; /* when it went idle (the cache's clock) */
  int doomed;         /* its owner freed it: never hit, released with its last view */
};

struct vmmipc__mapcache {
  pthread_mutex_t mu;
  int max_idle;
  uint64_t max_bytes; /* 0: no byte bound */
  int destroyed;
  int entries, idle, handles;
  uint64_t bytes, idle_bytes;
  struct vmmipc__mapent *head;
  uint64_t clock, hits, misses, evictions, freed, fds_not_sent;
};

vmmipc_result_t vmmipc__mapcache_create(int max_idle, vmmipc__mapcache_t **out) {
  *out = NULL;
  if (max_idle < 0)
    return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "mapping cache: %d idle entries is out of range", max_idle);
  struct vmmipc__mapcache *c = calloc(1, sizeof *c);
  if (!c) return vmmipc__error(VMMIPC_ERR_NO_MEMORY, "allocating a mapping cache");
  pthread_mutex_init(&c->mu, NULL);
  c->max_idle = max_idle;
  *out = c;
  return VMMIPC_SUCCESS;
}

static uint64_t ent_bytes(const struct vmmipc__mapent *e) { return e->map->mapped; }

static void vmmipc__unlink(struct vmmipc__mapcache *c, struct vmmipc__mapent *e) {
  if (e->prev) e->prev->next = e->next;
  else c->head = e->next;
  if (e->next) e->next->prev = e->prev;
  e->prev = e->next = NULL;
  c->entries--;
  c->bytes -= ent_bytes(e);
  c->handles -= e->map->num_chunks;
}

/* Lock held: unlinks an idle entry and chains it on *drop. */
static void vmmipc__take_idle(struct vmmipc__mapcache *c, struct vmmipc__mapent *e, struct vmmipc__mapent **drop) {
  vmmipc__unlink(c, e);
  c->idle--;
  c->idle_bytes -= ent_bytes(e);
  e->next = *drop;
  *drop = e;
}

/* Lock held: evicts least recently used idle entries until within bounds. */
static void vmmipc__evict(struct vmmipc__mapcache *c, struct vmmipc__mapent **drop) {
  while (c->idle > 0 && (c->idle > c->max_idle || (c->max_bytes && c->idle_bytes > c->max_bytes))) {
    struct vmmipc__mapent *lru = NULL;
    for (struct vmmipc__mapent *x = c->head; x; x = x->next)
      if (x->refs == 0 && (!lru || x->last_used < lru->last_used)) lru = x;
    vmmipc__take_idle(c, lru, drop);
    c->evictions++;
  }
}

/* Release a chain of unlinked entries (no lock held); the first failure. */
static vmmipc_result_t vmmipc__free_chain(const vmmipc__cu_t *cu, struct vmmipc__mapent *e) {
  vmmipc_result_t first = VMMIPC_SUCCESS;
  char msg[VMMIPC__ERRMSG_MAX] = "";
  for (struct vmmipc__mapent *next; e; e = next) {
    next = e->next;
    vmmipc__mapcache_chunks_add(-(long)e->map->num_chunks);
    vmmipc_result_t r = vmmipc__buf_destroy(cu, e->map);
    free(e);
    if (r && !first) {
      first = r;
      snprintf(msg, sizeof msg, "%s", vmmipc_last_error());
    }
  }
  if (first) vmmipc__error_set_raw(msg);
  return first;
}

/* With the lock held: whether the cache is done and must be freed. */
static int vmmipc__cache_gone(const struct vmmipc__mapcache *c) { return c->destroyed && c->entries == 0; }

static void vmmipc__cache_free(struct vmmipc__mapcache *c) {
  pthread_mutex_destroy(&c->mu);
  free(c);
}

/* Lock held: one reference of e goes; `touch` makes it most recently used
 * when it goes idle. */
static void vmmipc__unref(struct vmmipc__mapcache *c, struct vmmipc__mapent *e, int touch,
                          struct vmmipc__mapent **drop) {
  if (--e->refs > 0) return;
  if (c->destroyed || c->max_idle == 0 || e->doomed) {
    vmmipc__unlink(c, e);
    e->next = *drop;
    *drop = e;
    return;
  }
  if (touch) e->last_used = ++c->clock;
  c->idle++;
  c->idle_bytes += ent_bytes(e);
  vmmipc__evict(c, drop);
}

vmmipc_result_t vmmipc__mapent_release(const vmmipc__cu_t *cu, struct vmmipc__mapent *e) {
  struct vmmipc__mapcache *c = e->cache;
  struct vmmipc__mapent *drop = NULL;
  pthread_mutex_lock(&c->mu);
  vmmipc__unref(c, e, 1, &drop);
  int gone = vmmipc__cache_gone(c);
  pthread_mutex_unlock(&c->mu);
  vmmipc_result_t r = vmmipc__free_chain(cu, drop);
  if (gone) vmmipc__cache_free(c);
  return r;
}

static const vmmipc__cu_t *vmmipc__cache_cu(void) {
  const vmmipc__cu_t *cu = NULL;
  vmmipc__cu_load(&cu); /* entries exist only if the driver loaded */
  return cu;
}

void vmmipc__mapcache_set_max_bytes(vmmipc__mapcache_t *c, uint64_t max_bytes) {
  struct vmmipc__mapent *drop = NULL;
  pthread_mutex_lock(&c->mu);
  c->max_bytes = max_bytes;
  vmmipc__evict(c, &drop);
  pthread_mutex_unlock(&c->mu);
  if (drop) (void)vmmipc__free_chain(vmmipc__cache_cu(), drop);
}

/* Lock held: unlinks every idle entry onto *drop; returns their bytes. */
static uint64_t vmmipc__take_all_idle(struct vmmipc__mapcache *c, struct vmmipc__mapent **drop) {
  uint64_t bytes = 0;
  for (struct vmmipc__mapent *x = c->head, *next; x; x = next) {
    next = x->next;
    if (x->refs > 0) continue; /* released with its last view */
    bytes += ent_bytes(x);
    vmmipc__take_idle(c, x, drop);
  }
  return bytes;
}

vmmipc_result_t vmmipc__mapcache_destroy(vmmipc__mapcache_t *c) {
  if (!c) return VMMIPC_SUCCESS;
  struct vmmipc__mapent *drop = NULL;
  pthread_mutex_lock(&c->mu);
  c->destroyed = 1;
  vmmipc__take_all_idle(c, &drop);
  int gone = vmmipc__cache_gone(c);
  pthread_mutex_unlock(&c->mu);
  vmmipc_result_t r = drop ? vmmipc__free_chain(vmmipc__cache_cu(), drop) : VMMIPC_SUCCESS;
  if (gone) vmmipc__cache_free(c);
  return r;
}

vmmipc_result_t vmmipc__mapcache_trim(vmmipc__mapcache_t *c, uint64_t *released) {
  if (released) *released = 0;
  if (!c) return VMMIPC_SUCCESS;
  struct vmmipc__mapent *drop = NULL;
  pthread_mutex_lock(&c->mu);
  uint64_t bytes = vmmipc__take_all_idle(c, &drop);
  pthread_mutex_unlock(&c->mu);
  if (released) *released = bytes;
  return drop ? vmmipc__free_chain(vmmipc__cache_cu(), drop) : VMMIPC_SUCCESS;
}

int vmmipc__mapcache_drop(vmmipc__mapcache_t *c, uint32_t pid, uint64_t nonce, const vmmipc__freed_id_t *ids,
                          int n, int all) {
  if (!c || (!all && n <= 0)) return 0;
  struct vmmipc__mapent *drop = NULL;
  int dropped = 0;
  pthread_mutex_lock(&c->mu);
  for (struct vmmipc__mapent *x = c->head, *next; x; x = next) {
    next = x->next;
    if (x->pid != pid || x->nonce != nonce || x->doomed) continue;
    int hit = all;
    for (int i = 0; !hit && i < n; i++) hit = ids[i].serial == x->serial && ids[i].generation == x->generation;
    if (!hit) continue;
    dropped++;
    c->freed++;
    if (x->refs > 0) x->doomed = 1;
    else vmmipc__take_idle(c, x, &drop);
  }
  pthread_mutex_unlock(&c->mu);
  /* Nobody waits on this result: a release failure leaves nothing behind
   * that a later call could undo, so it is not reported, and the thread's
   * record stays the call's (code, rank, driver error and message). */
  if (drop) {
    vmmipc__error_saved_t keep;
    vmmipc__error_save(&keep);
    (void)vmmipc__free_chain(vmmipc__cache_cu(), drop);
    vmmipc__error_restore(&keep);
  }
  return dropped;
}

static int vmmipc__by_device(const void *a, const void *b) {
  const CUmemAccessDesc *x = a, *y = b;
  return (x->location.id > y->location.id) - (x->location.id < y->location.id);
}

/* The access part of the key: resolved and sorted by device. */
static vmmipc_result_t vmmipc__key_access(const vmmipc__cu_t *cu, const vmmipc_access_t *access, const char *op,
                                          CUmemAccessDesc *acc, int *n) {
  vmmipc_result_t r = vmmipc__access_resolve(cu, access, op, acc, n);
  if (!r) qsort(acc, (size_t)*n, sizeof *acc, vmmipc__by_device);
  return r;
}

static int vmmipc__same_access(const struct vmmipc__mapent *e, const CUmemAccessDesc *acc, int n) {
  if (e->num_access != n) return 0;
  for (int i = 0; i < n; i++)
    if (e->access[i].location.id != acc[i].location.id || e->access[i].flags != acc[i].flags) return 0;
  return 1;
}

/* The entry of this identity, access and layout, or NULL (lock held). */
static struct vmmipc__mapent *vmmipc__lookup(struct vmmipc__mapcache *c, const struct vmmipc_desc *d,
                                             const CUmemAccessDesc *acc, int n) {
  for (struct vmmipc__mapent *e = c->head; e; e = e->next) {
    if (e->doomed || e->pid != d->pid || e->nonce != d->nonce || e->serial != d->serial ||
        e->generation != d->generation || memcmp(e->host, d->host, 16) != 0 || !vmmipc__same_access(e, acc, n))
      continue;
    /* The same identity always has the same layout; a descriptor that says
     * otherwise is not served from this entry. */
    const struct vmmipc_buf *m = e->map;
    int same = m->size == d->size && m->num_chunks == d->num_chunks;
    for (int i = 0; same && i < d->num_chunks; i++) same = m->chunks[i].size == d->sizes[i];
    if (same) return e;
  }
  return NULL;
}

/* A view of entry e (which already counts the reference). */
static vmmipc_result_t vmmipc__view(const vmmipc__cu_t *cu, struct vmmipc__mapent *e, vmmipc_buf_t *out) {
  struct vmmipc_buf *v = malloc(sizeof *v);
  if (!v) {
    vmmipc_result_t r = vmmipc__error(VMMIPC_ERR_NO_MEMORY, "vmmipc_import: a buffer record");
    vmmipc__error_saved_t keep; /* a release that fails too does not replace it */
    vmmipc__error_save(&keep);
    vmmipc__mapent_release(cu, e);
    vmmipc__error_restore(&keep);
    return r;
  }
  *v = *e->map;
  v->chunks = e->map->chunks; /* borrowed: the entry owns them */
  v->num_resv = v->cap_resv = 0;
  v->resv = NULL;
  v->imported = 1;
  v->exposed = 0;
  v->cached = e;
  *out = v;
  return VMMIPC_SUCCESS;
}

/* Whether the owner left out every fd (the importer holds the mapping). */
static int vmmipc__fds_omitted(const struct vmmipc_desc *d) {
  if (d->num_chunks == 0) return 0;
  for (int i = 0; i < d->num_chunks; i++)
    if (d->fds[i] >= 0) return 0;
  return 1;
}

vmmipc_result_t vmmipc__mapcache_import(vmmipc__mapcache_t *c, vmmipc_desc_t d, const vmmipc_access_t *access,
                                        vmmipc_timing_t *t, vmmipc_buf_t *out, int *hit) {
  const char *op = "vmmipc_import";
  if (hit) *hit = 0;
  if (!c || !d || !out) return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "%s: cache, desc or out is NULL", op);
  *out = NULL;
  int omitted = vmmipc__fds_omitted(d);
  vmmipc_result_t r = VMMIPC_SUCCESS;
  if (omitted) {
    if ((r = vmmipc__desc_check(d))) {
      vmmipc__error_prefix("%s: ", op);
      return r;
    }
  } else if ((r = vmmipc__import_check(d, op))) {
    return r;
  }
  const vmmipc__cu_t *cu;
  if ((r = vmmipc__cu_load(&cu))) return r;
  CUmemAccessDesc acc[VMMIPC__MAX_ACCESS];
  int n = 0;
  if ((r = vmmipc__key_access(cu, access, op, acc, &n))) return r;
  int cacheable = c->max_idle > 0 && vmmipc__desc_has_identity(d) && d->num_chunks > 0;
  if (cacheable) {
    pthread_mutex_lock(&c->mu);
    struct vmmipc__mapent *e = vmmipc__lookup(c, d, acc, n);
    if (e) {
      if (e->refs++ == 0) {
        c->idle--;
        c->idle_bytes -= ent_bytes(e);
      }
      c->hits++;
      if (omitted) c->fds_not_sent += (uint64_t)d->num_chunks;
    }
    pthread_mutex_unlock(&c->mu);
    if (e) {
      if ((r = vmmipc__view(cu, e, out))) return r;
      if (hit) *hit = 1;
      return VMMIPC_SUCCESS;
    }
  }
  if (omitted)
    return vmmipc__error(VMMIPC_ERR_INVALID_DESC,
                         "%s: the descriptor (buffer serial %llu, generation %llu) came without file descriptors, "
                         "but this rank holds no mapping of it",
                         op, (unsigned long long)d->serial, (unsigned long long)d->generation);
  struct vmmipc_buf *m = NULL;
  if ((r = vmmipc__import_timed(d, access, &m, t))) return r;
  struct vmmipc__mapent *e = cacheable ? calloc(1, sizeof *e) : NULL;
  pthread_mutex_lock(&c->mu);
  c->misses++;
  if (e) {
    e->cache = c;
    memcpy(e->host, d->host, 16);
    e->pid = d->pid;
    e->nonce = d->nonce;
    e->serial = d->serial;
    e->generation = d->generation;
    e->num_access = n;
    memcpy(e->access, acc, (size_t)n * sizeof *acc);
    e->map = m;
    vmmipc__mapcache_chunks_add(m->num_chunks);
    e->refs = 1;
    e->next = c->head;
    if (c->head) c->head->prev = e;
    c->head = e;
    c->entries++;
    c->bytes += ent_bytes(e);
    c->handles += m->num_chunks;
  }
  pthread_mutex_unlock(&c->mu);
  if (!e) {
    /* Not cached (no identity, no room, or no memory for the entry): a
     * plain import that its buffer owns. */
    *out = m;
    return VMMIPC_SUCCESS;
  }
  return vmmipc__view(cu, e, out);
}

int vmmipc__mapcache_pin(vmmipc__mapcache_t *c, uint32_t pid, const vmmipc_access_t *access,
                         vmmipc__freed_id_t *ids, struct vmmipc__mapent **pinned, int max) {
  if (!c || max <= 0 || c->max_idle == 0) return 0;
  const vmmipc__cu_t *cu;
  CUmemAccessDesc acc[VMMIPC__MAX_ACCESS];
  int n = 0, k = 0;
  vmmipc__error_saved_t keep;
  vmmipc__error_save(&keep);
  int bad = vmmipc__cu_load(&cu) || vmmipc__key_access(cu, access, "pinning cached mappings", acc, &n);
  vmmipc__error_restore(&keep); /* the import reports a bad access itself */
  if (bad) return 0;
  pthread_mutex_lock(&c->mu);
  /* New entries go to the head, so the list runs most recent first. */
  for (struct vmmipc__mapent *e = c->head; e && k < max; e = e->next) {
    if (e->doomed || e->pid != pid || !vmmipc__same_access(e, acc, n)) continue;
    if (e->refs++ == 0) {
      c->idle--;
      c->idle_bytes -= ent_bytes(e);
    }
    ids[k].serial = e->serial;
    ids[k].generation = e->generation;
    pinned[k++] = e;
  }
  pthread_mutex_unlock(&c->mu);
  return k;
}

void vmmipc__mapcache_unpin(struct vmmipc__mapent **pinned, int n) {
  for (int i = 0; i < n; i++) {
    struct vmmipc__mapent *e = pinned[i];
    struct vmmipc__mapcache *c = e->cache;
    struct vmmipc__mapent *drop = NULL;
    pthread_mutex_lock(&c->mu);
    vmmipc__unref(c, e, 0, &drop);
    int gone = vmmipc__cache_gone(c);
    pthread_mutex_unlock(&c->mu);
    if (drop) {
      vmmipc__error_saved_t keep; /* the call's record, as in vmmipc__mapcache_drop */
      vmmipc__error_save(&keep);
      (void)vmmipc__free_chain(vmmipc__cache_cu(), drop);
      vmmipc__error_restore(&keep);
    }
    if (gone) vmmipc__cache_free(c);
  }
}

void vmmipc__mapcache_stats(vmmipc__mapcache_t *c, vmmipc__mapcache_stats_t *out) {
  memset(out, 0, sizeof *out);
  if (!c) return;
  pthread_mutex_lock(&c->mu);
  out->hits = c->hits;
  out->misses = c->misses;
  out->evictions = c->evictions;
  out->freed = c->freed;
  out->fds_not_sent = c->fds_not_sent;
  out->bytes = c->bytes;
  out->idle_bytes = c->idle_bytes;
  out->idle = c->idle;
  out->entries = c->entries;
  out->handles = c->handles;
  pthread_mutex_unlock(&c->mu);
}
