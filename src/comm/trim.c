/* vmmipc_comm_cache_trim: give back what the comm's mapping cache holds
 * idle, without waiting for a bound or a collective. */
#include "comm/comm.h"
#include "vmm/mapcache.h"

vmmipc_result_t vmmipc_comm_cache_trim(vmmipc_comm_t c, uint64_t *released) {
  if (released) *released = 0;
  if (!c) return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "vmmipc_comm_cache_trim: comm is NULL");
  /* The cache has its own lock and never releases what a call uses, so
   * this needs no guard: it also works on a broken or aborted comm. */
  vmmipc_result_t r = vmmipc__mapcache_trim(c->cache, released);
  if (r) vmmipc__error_prefix("vmmipc_comm_cache_trim: ");
  return r;
}
