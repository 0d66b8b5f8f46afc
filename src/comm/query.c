/* Local queries on a comm: its node, its ranks, its timings and counters. */
#include <string.h>

#include "comm/comm.h"
#include "vmm/mapcache.h"

vmmipc_result_t vmmipc_comm_node_comm(vmmipc_comm_t c, MPI_Comm *node_comm) {
  if (!c || !node_comm) return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "vmmipc_comm_node_comm: comm or out is NULL");
  *node_comm = c->node;
  return VMMIPC_SUCCESS;
}

vmmipc_result_t vmmipc_comm_same_node(vmmipc_comm_t c, int rank, int *same) {
  if (!c || !same) return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "vmmipc_comm_same_node: comm or same is NULL");
  if (rank < 0 || rank >= c->size)
    return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "vmmipc_comm_same_node: rank %d is out of range 0..%d", rank,
                         c->size - 1);
  *same = c->node_of[rank] >= 0;
  return VMMIPC_SUCCESS;
}

/* Copies at most struct_size bytes: callers built against an older,
 * shorter struct get the fields they know. */
static vmmipc_result_t copy_sized(void *dst, const void *src, size_t have, size_t min, const char *op,
                                  const char *what, const char *init) {
  size_t want;
  memcpy(&want, dst, sizeof want);
  if (want < min || want > 4096)
    return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "%s: %s->struct_size is %zu; hint: initialise it with %s", op, what,
                         want, init);
  memcpy((char *)dst + sizeof want, (const char *)src + sizeof want, (want < have ? want : have) - sizeof want);
  return VMMIPC_SUCCESS;
}

vmmipc_result_t vmmipc_comm_last_timing(vmmipc_comm_t c, vmmipc_timing_t *t) {
  if (!c || !t) return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "vmmipc_comm_last_timing: comm or timing is NULL");
  return copy_sized(t, &c->timing, sizeof c->timing, sizeof(size_t) + sizeof(double), "vmmipc_comm_last_timing",
                    "timing", "VMMIPC_TIMING_INIT");
}

vmmipc_result_t vmmipc_comm_stats(vmmipc_comm_t c, vmmipc_comm_stats_t *s) {
  if (!c || !s) return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "vmmipc_comm_stats: comm or stats is NULL");
  vmmipc_comm_stats_t v;
  memset(&v, 0, sizeof v);
  v.struct_size = sizeof v;
  if (c->tp) {
    vmmipc__tp_stats_t t;
    vmmipc__tp_stats(c->tp, &t);
    v.stale_frames = t.stale_frames;
    v.stale_fds = t.stale_fds;
    v.refused = t.refused;
  }
  if (c->cache) {
    vmmipc__mapcache_stats_t m;
    vmmipc__mapcache_stats(c->cache, &m);
    v.map_cache_hits = m.hits;
    v.map_cache_misses = m.misses;
    v.map_cache_evictions = m.evictions;
    v.map_cache_idle = m.idle;
    v.map_cache_bytes = m.bytes;
    v.map_cache_idle_bytes = m.idle_bytes;
    v.map_cache_entries = m.entries;
    v.map_cache_handles = m.handles;
    v.map_cache_freed = m.freed;
    v.fds_not_sent = m.fds_not_sent;
  }
  v.open_windows = c->open_windows;
  v.released = vmmipc__deferred_count(c);
  v.released_freed = __atomic_load_n(&c->def_freed, __ATOMIC_RELAXED);
  v.broken = c->broken || __atomic_load_n(&c->aborted, __ATOMIC_ACQUIRE);
  v.sync_path = c->sync_path;
  v.sync_barrier_path = c->sync_barrier_path;
  v.sync_decided_by = c->sync_by;
  v.trial_signal_memops_ns = c->sync_trial_ns[0];
  v.trial_signal_kernels_ns = c->sync_trial_ns[1];
  v.trial_barrier_memops_ns = c->sync_trial_ns[2];
  v.trial_barrier_kernels_ns = c->sync_trial_ns[3];
  return copy_sized(s, &v, sizeof v, sizeof(size_t) + sizeof(uint64_t), "vmmipc_comm_stats", "stats",
                    "VMMIPC_COMM_STATS_INIT");
}

vmmipc_result_t vmmipc__peer_node_rank(struct vmmipc_comm *c, int rank, const char *op, int *node_rank) {
  if (rank < 0 || rank >= c->size)
    return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "%s: rank %d is out of range 0..%d", op, rank, c->size - 1);
  if (rank == c->rank)
    return vmmipc__error(VMMIPC_ERR_INVALID_ARG,
                         "%s: rank %d is the calling rank; hint: import your own descriptor with vmmipc_import", op,
                         rank);
  if (c->node_of[rank] < 0)
    return vmmipc__error(VMMIPC_ERR_PEER,
                         "%s: rank %d is not on the node of rank %d, so no file descriptor can reach it; hint: check "
                         "vmmipc_comm_same_node() first, and use MPI for off-node data",
                         op, rank, c->rank);
  *node_rank = c->node_of[rank];
  return VMMIPC_SUCCESS;
}
