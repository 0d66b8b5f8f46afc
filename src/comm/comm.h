/* The node-local communicator: the MPI side (node split, rank translation,
 * the bounded all-or-nothing agreement, the state after failures, and who
 * may call when) over the socket transport. */
#ifndef VMMIPC_COMM_COMM_H
#define VMMIPC_COMM_COMM_H

#include <mpi.h>
#include <stdint.h>

#include "common/clock.h"
#include "common/error.h"
#include "transport/tp.h"
#include "vmmipc.h"

#ifdef __cplusplus
extern "C" {
#endif

struct vmmipc__mapcache;
struct vmmipc__pool;

struct vmmipc_comm {
  MPI_Comm dup;            /* private duplicate of the user's communicator */
  MPI_Comm node;           /* ranks of this node (by host and VMMIPC_NODE_ID) */
  int rank, size;          /* in dup (= the user's communicator) */
  int node_rank, node_size;
  int *node_of;            /* [size]: comm rank -> node rank, or -1 off-node */
  int *rank_of;            /* [node_size]: node rank -> comm rank */
  vmmipc__tp_t *tp;
  int timeout_ms;
  int thread_level;        /* what MPI provides (MPI_Query_thread) */
  uint64_t epoch;          /* collective calls so far: every rank, success or not */
  uint64_t agreements;     /* agreements so far (tags their MPI messages) */
  int busy;                /* a thread is inside a call on this comm (__atomic builtins) */
  const char *busy_op;     /* which call, for the refusal message (__atomic builtins) */
  int broken;              /* a bounded wait on MPI expired: every call fails */
  char broken_msg[VMMIPC__ERRMSG_MAX];
  int open_windows;
  int open_heaps;          /* heaps made on this comm not destroyed yet: comm_destroy is refused */
  struct vmmipc__mapcache *cache; /* NULL: no mapping cache */
  uint64_t *freed_told;    /* [2 * node_size]: freed-buffer notices delivered / sent (coll/xchg.c) */
  struct vmmipc__pool *pool;      /* signal pads of this comm's windows, made with the first window */
  void (*pool_free)(struct vmmipc__pool *, int node_size); /* set by whoever made the pool (coll) */
  vmmipc_timing_t timing;  /* phases of the last collective */
};

/* ---- calls (guard.c) ---- */
/* Every call on a comm starts here: refuses overlapping calls on one comm,
 * concurrent calls that the MPI thread level does not allow, and calls on
 * a broken comm; a collective also advances the epoch and clears the
 * timings. On success vmmipc__leave must follow. */
vmmipc_result_t vmmipc__enter(struct vmmipc_comm *c, const char *op, int collective);
void vmmipc__leave(struct vmmipc_comm *c);
/* The process-wide half of vmmipc__enter, for calls that have no comm yet
 * (vmmipc_comm_create) or free it (vmmipc_comm_destroy): counts this thread
 * as inside a call that may use MPI, and refuses it as vmmipc__enter does
 * when the thread level does not allow it. vmmipc__leave_process follows. */
vmmipc_result_t vmmipc__enter_process(int thread_level, const char *op);
void vmmipc__leave_process(void);
/* Marks the comm broken with the current error message. */
void vmmipc__break(struct vmmipc_comm *c);

/* ---- agreement (agree.c) ---- */
/* All-or-nothing outcome of a collective over comm->dup, bounded by the
 * timeout. Returns the result of the lowest rank that failed on its own
 * (`secondary` = 0), else of the lowest that failed because a peer gave up,
 * else success; on failure every rank gets the same message: "<op> failed
 * on rank R: <its message>". A rank that does not answer in time gives
 * VMMIPC_ERR_TIMEOUT naming it, and the comm is broken. */
vmmipc_result_t vmmipc__agree(struct vmmipc_comm *c, vmmipc_result_t local, int secondary, const char *op);

/* ---- bounded MPI waits (mpiwait.c) ---- */
/* Waits until every request completes or deadline_ms passes; 0 if all
 * completed, 1 on timeout (requests left pending), -1 on an MPI error
 * (*mpi_rc). */
int vmmipc__mpi_wait(MPI_Request *reqs, int n, int64_t deadline_ms, int *mpi_rc);
/* Gives up requests that will not complete: point-to-point receives are
 * cancelled if `cancel`, the rest are left to MPI. `keep` (their buffers,
 * malloc'd) stays allocated for the life of the process, since MPI may
 * still use it. */
void vmmipc__mpi_abandon(MPI_Request *reqs, int n, int cancel, void *keep);
/* Keeps `keep` (malloc'd) allocated for the life of the process. */
void vmmipc__mpi_keep(void *keep);
/* Error for a failed MPI call, with MPI's error string. */
vmmipc_result_t vmmipc__mpi_error(int mpi_rc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- helpers (query.c) ---- */
/* Checks that `rank` is a valid rank of the comm other than the caller's
 * and on this node; returns its node rank. */
vmmipc_result_t vmmipc__peer_node_rank(struct vmmipc_comm *c, int rank, const char *op, int *node_rank);

#ifdef __cplusplus
}
#endif
#endif
