/* vmmipc_comm_cache_trim: give back what the comm's mapping cache holds
 * idle, without waiting for a bound or a collective. */
#include "comm/comm.h"
#include "vmm/mapcache.h"

vmmipc_result_t vmmipc_comm_cache_trim(vmmipc_comm_t c, uint64_t *released) {
  if (released) *released = 0;
  /* The cache has its own lock and never releases what a call uses, so
   * this holds no comm: it also works on a broken or aborted comm. Counted
   * in as an abort is, so that a destroy on another thread frees the comm
   * and its cache only after it. */
  vmmipc_result_t r = vmmipc__live_enter(c, "vmmipc_comm_cache_trim");
  if (r) return r;
  r = vmmipc__mapcache_trim(c->cache, released);
  if (r) vmmipc__error_prefix("vmmipc_comm_cache_trim: ");
  vmmipc__unlinger(c);
  return r;
}
