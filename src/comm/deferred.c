/* Deferred frees (vmmipc_win_release, vmmipc_heap_release): objects given
 * up locally, from any thread, and freed in step at a later collective.
 *
 * Releasing only queues the object here (under a mutex: the thread inside
 * a call on the comm may be reading the queue). The thread that holds the
 * comm puts the ids of queued objects into its agreement's outcome
 * (agree.c); the verdict names those every rank queued, and each rank
 * frees them, in id order, when the collective call ends (vmmipc__leave):
 * after the call's own work, so that no call sees its heap change under it.
 * On a failed comm there is nobody to agree with: they are freed locally. */
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "common/testhooks.h"

void vmmipc__deferred_push(struct vmmipc_comm *c, struct vmmipc__deferred *d) {
  pthread_mutex_lock(&c->def_mu);
  d->next = c->def_head;
  c->def_head = d;
  __atomic_add_fetch(&c->def_count, 1, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&c->def_mu);
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

int vmmipc__deferred_collect(struct vmmipc_comm *c, uint64_t cursor, uint64_t *ids, int max, int *more) {
  int n = 0, eligible = 0;
  *more = 0;
  if (!__atomic_load_n(&c->def_count, __ATOMIC_ACQUIRE)) return 0; /* the common case: no lock */
  pthread_mutex_lock(&c->def_mu);
  /* The `max` smallest eligible ids, kept sorted (max is small). */
  for (struct vmmipc__deferred *d = c->def_head; d; d = d->next) {
    if (d->id < cursor || !d->ready(d)) continue;
    eligible++;
    if (n < max) {
      ids[n++] = d->id;
      qsort(ids, (size_t)n, sizeof *ids, cmp_u64);
    } else if (d->id < ids[max - 1]) {
      ids[max - 1] = d->id;
      qsort(ids, (size_t)n, sizeof *ids, cmp_u64);
    }
  }
  pthread_mutex_unlock(&c->def_mu);
  *more = eligible > n;
  return n;
}

/* Takes the queued object with this id off the queue, or NULL. */
static struct vmmipc__deferred *take(struct vmmipc_comm *c, uint64_t id) {
  pthread_mutex_lock(&c->def_mu);
  struct vmmipc__deferred **pp = &c->def_head, *d = NULL;
  for (; *pp; pp = &(*pp)->next)
    if ((*pp)->id == id) {
      d = *pp;
      *pp = d->next;
      __atomic_sub_fetch(&c->def_count, 1, __ATOMIC_RELEASE);
      break;
    }
  pthread_mutex_unlock(&c->def_mu);
  return d;
}

int vmmipc__deferred_room(struct vmmipc_comm *c, int n) {
  if (c->due_n + n <= c->due_cap) return 0;
  int cap = c->due_cap ? 2 * c->due_cap : 2 * VMMIPC__DEFERRED_MAX;
  while (cap < c->due_n + n) cap *= 2;
  uint64_t *p = VMMIPC__INJECT("due_room") ? NULL : realloc(c->due, (size_t)cap * sizeof *p);
  if (!p) return -1;
  c->due = p;
  c->due_cap = cap;
  return 0;
}

void vmmipc__deferred_due(struct vmmipc_comm *c, const uint64_t *ids, int n) {
  /* A verdict names only ids this rank sent, with room made for them
   * (vmmipc__deferred_room): this cannot drop any. */
  if (n > c->due_cap - c->due_n) n = c->due_cap - c->due_n;
  if (n <= 0) return;
  memcpy(c->due + c->due_n, ids, (size_t)n * sizeof *ids);
  c->due_n += n;
}

int vmmipc__deferred_reap_due(struct vmmipc_comm *c) {
  int named = 0;
  if (!c->due_n) return 0;
  qsort(c->due, (size_t)c->due_n, sizeof *c->due, cmp_u64); /* the same order on every rank */
  int in_step = !vmmipc__failed(c);
  for (int i = 0; i < c->due_n; i++) {
    if (i && c->due[i] == c->due[i - 1]) continue;
    named++;
    struct vmmipc__deferred *d = take(c, c->due[i]);
    if (!d) continue;
    d->reap(d, in_step);
    __atomic_add_fetch(&c->def_freed, 1, __ATOMIC_RELAXED);
  }
  c->due_n = 0;
  return named;
}

int vmmipc__deferred_reap_local(struct vmmipc_comm *c) {
  int freed = 0;
  c->due_n = 0;
  /* Windows before their heaps: repeat while something goes (a heap is
   * ready once its last window went). */
  for (int progress = 1; progress;) {
    progress = 0;
    struct vmmipc__deferred *d = NULL;
    pthread_mutex_lock(&c->def_mu);
    for (struct vmmipc__deferred **pp = &c->def_head; *pp; pp = &(*pp)->next)
      if ((*pp)->ready(*pp)) {
        d = *pp;
        *pp = d->next;
        __atomic_sub_fetch(&c->def_count, 1, __ATOMIC_RELEASE);
        break;
      }
    pthread_mutex_unlock(&c->def_mu);
    if (d) {
      d->reap(d, 0);
      __atomic_add_fetch(&c->def_freed, 1, __ATOMIC_RELAXED);
      freed++;
      progress = 1;
    }
  }
  return freed;
}

int vmmipc__deferred_count(struct vmmipc_comm *c) { return __atomic_load_n(&c->def_count, __ATOMIC_ACQUIRE); }

int vmmipc__deferred_count_of(struct vmmipc_comm *c, int heap, const void *group) {
  int n = 0;
  pthread_mutex_lock(&c->def_mu);
  for (struct vmmipc__deferred *d = c->def_head; d; d = d->next)
    if (d->heap == heap && (!group || d->group == group) && (heap || d->ready(d))) n++;
  pthread_mutex_unlock(&c->def_mu);
  return n;
}

vmmipc_result_t vmmipc__agree_drain(struct vmmipc_comm *c, vmmipc_result_t local, const char *op, int keyed,
                                    uint64_t key) {
  /* Every verdict is the same on every rank, so every rank makes as many
   * rounds: the next comes while the last one freed something or the
   * cursor has not wrapped (objects may lie beyond what was sent). */
  for (int round = 0;; round++) {
    vmmipc_result_t r = vmmipc__agree_key(c, local, 0, op, keyed, key);
    int named = vmmipc__deferred_reap_due(c);
    if (VMMIPC__INJECT("drain_abort")) vmmipc_comm_abort(c); /* tests: an abort between two rounds */
    if (r || vmmipc__failed(c) || (!named && c->def_cursor == 0) || round >= 100000) return r;
  }
}
