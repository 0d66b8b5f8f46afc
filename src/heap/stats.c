/* vmmipc_heap_stats: local counters. */
#include <string.h>

#include "heap/heap.h"

vmmipc_result_t vmmipc_heap_stats(vmmipc_heap_t h, vmmipc_heap_stats_t *s) {
  const char *op = "vmmipc_heap_stats";
  if (!h || !s) return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "%s: heap or stats is NULL", op);
  size_t want;
  memcpy(&want, s, sizeof want);
  if (want < offsetof(vmmipc_heap_stats_t, grow_s) + sizeof(double) || want > 4096)
    return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "%s: stats->struct_size is %zu; hint: initialise it with %s", op, want,
                         "VMMIPC_HEAP_STATS_INIT");
  vmmipc_heap_stats_t v;
  memset(&v, 0, sizeof v);
  v.struct_size = want < sizeof v ? want : sizeof v;
  v.reserved = (uint64_t)h->c->node_size * h->reserve;
  v.mapped = h->mapped;
  v.in_use = h->in_use;
  v.high_water = h->high_water;
  v.live_windows = h->live;
  v.growth_steps = h->growth_steps;
  v.grow_s = h->grow_s;
  v.carved = h->carved;
  v.carved_high_water = h->carved_high_water;
  v.trimmed_steps = h->trimmed_steps;
  v.reserve = h->reserve;
  v.grow = h->grow;
  memcpy((char *)s + sizeof want, (const char *)&v + sizeof want, (want < sizeof v ? want : sizeof v) - sizeof want);
  return VMMIPC_SUCCESS;
}
