/* The node-local communicator: MPI side (node split, rank translation,
 * agreement) over the socket transport. */
#ifndef VMMIPC_COMM_COMM_H
#define VMMIPC_COMM_COMM_H

#include <mpi.h>

#include "common/clock.h"
#include "transport/tp.h"
#include "vmmipc.h"

#ifdef __cplusplus
extern "C" {
#endif

struct vmmipc_comm {
  MPI_Comm dup;       /* private duplicate of the user's communicator */
  MPI_Comm node;      /* ranks of this node (by host and VMMIPC_NODE_ID) */
  int rank, size;     /* in dup (= the user's communicator) */
  int node_rank, node_size;
  int *node_of;       /* [size]: comm rank -> node rank, or -1 off-node */
  int *rank_of;       /* [node_size]: node rank -> comm rank */
  vmmipc__tp_t *tp;
  int timeout_ms;
  vmmipc_timing_t timing; /* phases of the last collective */
};

/* All-or-nothing agreement over comm->dup: returns the result of the lowest
 * failing rank (or success), and on failure sets the same message on every
 * rank: "<op> failed on rank R: <its message>". */
vmmipc_result_t vmmipc__agree(struct vmmipc_comm *c, vmmipc_result_t local, const char *op);
/* Same, over any communicator (used before the comm exists). */
vmmipc_result_t vmmipc__agree_on(MPI_Comm comm, int rank, vmmipc_result_t local, const char *op);
/* Error for a failed MPI call, with MPI's error string. */
vmmipc_result_t vmmipc__mpi_error(int mpi_rc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Checks that `rank` is a valid rank of the comm other than the caller's
 * and on this node; returns its node rank. */
vmmipc_result_t vmmipc__peer_node_rank(struct vmmipc_comm *c, int rank, const char *op, int *node_rank);

#ifdef __cplusplus
}
#endif
#endif
