/* What the collectives share: the descriptor exchange of one call, the
 * window, and small helpers. Every collective is: local part (checks,
 * export), one exchange on the node (descriptors, or ABORTs from a rank that
 * failed; peers' chunks imported as they arrive), one agreement. */
#ifndef VMMIPC_COLL_COLL_H
#define VMMIPC_COLL_COLL_H

#include "comm/comm.h"
#include "desc/desc.h"

#ifdef __cplusplus
extern "C" {
#endif

struct vmmipc_win {
  vmmipc_comm_t comm;
  vmmipc_buf_t own;    /* the caller's buffer (not owned; its `exposed` counts this window) */
  vmmipc_buf_t *peers; /* [node_size]: imported mappings, NULL for self or none */
};

/* Called for each descriptor as it arrives (d is NULL for "none"); takes
 * ownership of d. */
typedef vmmipc_result_t (*vmmipc__coll_got_t)(void *arg, int node_rank, vmmipc_desc_t d);

/* The exchange of one collective: this rank sends send_desc[p] (NULL: an
 * empty message) to every node rank p with to[p] set, and receives one
 * descriptor from every p with from[p] set, handing each to `got` as soon
 * as it arrives. `local` non-zero: this rank already failed and tells the
 * peers instead. *secondary is set when the exchange ended because a peer
 * gave up. Adds the transfer time (without `got`) to the comm's timing. */
vmmipc_result_t vmmipc__coll_exchange(struct vmmipc_comm *c, const vmmipc_desc_t *send_desc, const char *to,
                                      const char *from, vmmipc__coll_got_t got, void *arg, vmmipc_result_t local,
                                      int *secondary);
/* A copy of `d` with duplicated fds (NULL stays NULL). */
vmmipc_result_t vmmipc__desc_dup(vmmipc_desc_t d, vmmipc_desc_t *out);
/* Argument checks of the rooted collectives: `out` given and `root` a rank. */
vmmipc_result_t vmmipc__check_rooted(struct vmmipc_comm *c, const void *out, int root, const char *op);
/* Resolves the access early, so that an invisible UUID fails before export. */
vmmipc_result_t vmmipc__check_access(const vmmipc_access_t *a, const char *op);
/* Exports `b` unless it is NULL or empty (then *d stays NULL); timed. */
vmmipc_result_t vmmipc__export_opt(struct vmmipc_comm *c, vmmipc_buf_t b, vmmipc_desc_t *d);
/* Imports a peer's descriptor for a collective (timed); messages name the rank. */
vmmipc_result_t vmmipc__coll_import(struct vmmipc_comm *c, vmmipc_desc_t d, const vmmipc_access_t *a,
                                    vmmipc_buf_t *out, int from_rank);
void vmmipc__free_descs(vmmipc_desc_t *d, int n);

#ifdef __cplusplus
}
#endif
#endif
