/* Descriptor movement shared by the collectives. */
#ifndef VMMIPC_COLL_COLL_H
#define VMMIPC_COLL_COLL_H

#include "comm/comm.h"
#include "desc/desc.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Every rank of the node sends `mine` (NULL: none) to every other and gets
 * theirs: got[node_rank] (own entry and "none" entries are NULL). */
vmmipc_result_t vmmipc__coll_allgather(struct vmmipc_comm *c, vmmipc_desc_t mine, vmmipc_desc_t *got);
/* The root sends descs[comm rank] (NULL: none) to each rank of its node;
 * the others get theirs in *got (NULL off the root's node or for none). */
vmmipc_result_t vmmipc__coll_scatter(struct vmmipc_comm *c, const vmmipc_desc_t *descs, int root,
                                     vmmipc_desc_t *got);
/* A copy of `d` with duplicated fds (NULL stays NULL). */
vmmipc_result_t vmmipc__desc_dup(vmmipc_desc_t d, vmmipc_desc_t *out);
/* Start of every collective: clears the phase timings; returns the start time. */
double vmmipc__coll_begin(struct vmmipc_comm *c);
/* Argument checks of the rooted collectives: `out` given and `root` a rank. */
vmmipc_result_t vmmipc__check_rooted(struct vmmipc_comm *c, const void *out, int root, const char *op);
/* Internal import that splits the time into import/map/access. */
vmmipc_result_t vmmipc__import_timed(vmmipc_desc_t d, const vmmipc_access_t *access, vmmipc_buf_t *out,
                                     vmmipc_timing_t *t);

#ifdef __cplusplus
}
#endif
#endif
