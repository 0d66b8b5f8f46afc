/* The mapping cache (vmm/mapcache.h). Entries live in one list per cache;
 * the lock of the cache guards the list, the counters and every entry's
 * reference count. Driver calls (imports on a miss, releases of evicted
 * entries) run outside the lock. A destroyed cache stays allocated until
 * its last entry goes, because views reach it through their entry. */
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
  long refs;          /* views alive */
  uint64_t last_used; /* when it went idle (the cache's clock) */
};

struct vmmipc__mapcache {
  pthread_mutex_t mu;
  int max_idle;
  int destroyed;
  int entries, idle;
  struct vmmipc__mapent *head;
  uint64_t clock, hits, misses, evictions;
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

static void vmmipc__unlink(struct vmmipc__mapcache *c, struct vmmipc__mapent *e) {
  if (e->prev) e->prev->next = e->next;
  else c->head = e->next;
  if (e->next) e->next->prev = e->prev;
  e->prev = e->next = NULL;
  c->entries--;
}

/* Release an unlinked entry's mapping and free it (no lock held). */
static vmmipc_result_t vmmipc__mapent_free(const vmmipc__cu_t *cu, struct vmmipc__mapent *e) {
  if (!e) return VMMIPC_SUCCESS;
  vmmipc__mapcache_chunks_add(-(long)e->map->num_chunks);
  vmmipc_result_t r = vmmipc__buf_destroy(cu, e->map);
  free(e);
  return r;
}

/* With the lock held: whether the cache is done and must be freed. */
static int vmmipc__cache_gone(const struct vmmipc__mapcache *c) { return c->destroyed && c->entries == 0; }

static void vmmipc__cache_free(struct vmmipc__mapcache *c) {
  pthread_mutex_destroy(&c->mu);
  free(c);
}

vmmipc_result_t vmmipc__mapent_release(const vmmipc__cu_t *cu, struct vmmipc__mapent *e) {
  struct vmmipc__mapcache *c = e->cache;
  struct vmmipc__mapent *drop = NULL;
  pthread_mutex_lock(&c->mu);
  if (--e->refs == 0) {
    if (c->destroyed || c->max_idle == 0) {
      vmmipc__unlink(c, e);
      drop = e;
    } else {
      e->last_used = ++c->clock;
      if (++c->idle > c->max_idle) {
        struct vmmipc__mapent *lru = NULL;
        for (struct vmmipc__mapent *x = c->head; x; x = x->next)
          if (x->refs == 0 && (!lru || x->last_used < lru->last_used)) lru = x;
        vmmipc__unlink(c, lru);
        c->idle--;
        c->evictions++;
        drop = lru;
      }
    }
  }
  int gone = vmmipc__cache_gone(c);
  pthread_mutex_unlock(&c->mu);
  vmmipc_result_t r = vmmipc__mapent_free(cu, drop);
  if (gone) vmmipc__cache_free(c);
  return r;
}

vmmipc_result_t vmmipc__mapcache_destroy(vmmipc__mapcache_t *c) {
  if (!c) return VMMIPC_SUCCESS;
  const vmmipc__cu_t *cu = NULL;
  vmmipc__cu_load(&cu); /* entries exist only if the driver loaded */
  struct vmmipc__mapent *idle = NULL;
  pthread_mutex_lock(&c->mu);
  c->destroyed = 1;
  for (struct vmmipc__mapent *x = c->head, *next; x; x = next) {
    next = x->next;
    if (x->refs > 0) continue; /* released with its last view */
    vmmipc__unlink(c, x);
    x->next = idle;
    idle = x;
  }
  c->idle = 0;
  int gone = vmmipc__cache_gone(c);
  pthread_mutex_unlock(&c->mu);
  vmmipc_result_t first = VMMIPC_SUCCESS;
  char msg[VMMIPC__ERRMSG_MAX] = "";
  for (struct vmmipc__mapent *x = idle, *next; x; x = next) {
    next = x->next;
    vmmipc_result_t r = vmmipc__mapent_free(cu, x);
    if (r && !first) {
      first = r;
      snprintf(msg, sizeof msg, "%s", vmmipc_last_error());
    }
  }
  if (gone) vmmipc__cache_free(c);
  if (first) vmmipc__error_set_raw(msg);
  return first;
}

static int vmmipc__by_device(const void *a, const void *b) {
  const CUmemAccessDesc *x = a, *y = b;
  return (x->location.id > y->location.id) - (x->location.id < y->location.id);
}

/* The entry of this identity, access and layout, or NULL (lock held). */
static struct vmmipc__mapent *vmmipc__lookup(struct vmmipc__mapcache *c, const struct vmmipc_desc *d,
                                             const CUmemAccessDesc *acc, int n) {
  for (struct vmmipc__mapent *e = c->head; e; e = e->next) {
    if (e->pid != d->pid || e->nonce != d->nonce || e->serial != d->serial || e->generation != d->generation ||
        memcmp(e->host, d->host, 16) != 0 || e->num_access != n)
      continue;
    int same = 1;
    for (int i = 0; same && i < n; i++)
      same = e->access[i].location.id == acc[i].location.id && e->access[i].flags == acc[i].flags;
    /* The same identity always has the same layout; a descriptor that says
     * otherwise is not served from this entry. */
    const struct vmmipc_buf *m = e->map;
    same = same && m->size == d->size && m->num_chunks == d->num_chunks;
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
    vmmipc__mapent_release(cu, e);
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

vmmipc_result_t vmmipc__mapcache_import(vmmipc__mapcache_t *c, vmmipc_desc_t d, const vmmipc_access_t *access,
                                        vmmipc_timing_t *t, vmmipc_buf_t *out, int *hit) {
  const char *op = "vmmipc_import";
  if (hit) *hit = 0;
  if (!c || !d || !out) return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "%s: cache, desc or out is NULL", op);
  *out = NULL;
  vmmipc_result_t r = vmmipc__import_check(d, op);
  if (r) return r;
  const vmmipc__cu_t *cu;
  if ((r = vmmipc__cu_load(&cu))) return r;
  CUmemAccessDesc acc[VMMIPC__MAX_ACCESS];
  int n = 0;
  if ((r = vmmipc__access_resolve(cu, access, op, acc, &n))) return r;
  qsort(acc, (size_t)n, sizeof *acc, vmmipc__by_device);
  int cacheable = c->max_idle > 0 && vmmipc__desc_has_identity(d) && d->num_chunks > 0;
  if (cacheable) {
    pthread_mutex_lock(&c->mu);
    struct vmmipc__mapent *e = vmmipc__lookup(c, d, acc, n);
    if (e) {
      if (e->refs++ == 0) c->idle--;
      c->hits++;
    }
    pthread_mutex_unlock(&c->mu);
    if (e) {
      if ((r = vmmipc__view(cu, e, out))) return r;
      if (hit) *hit = 1;
      return VMMIPC_SUCCESS;
    }
  }
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

void vmmipc__mapcache_stats(vmmipc__mapcache_t *c, vmmipc__mapcache_stats_t *out) {
  memset(out, 0, sizeof *out);
  if (!c) return;
  pthread_mutex_lock(&c->mu);
  out->hits = c->hits;
  out->misses = c->misses;
  out->evictions = c->evictions;
  out->idle = c->idle;
  out->entries = c->entries;
  pthread_mutex_unlock(&c->mu);
}
