/* What the collectives share: the descriptor exchange of one call, the
 * window, and small helpers. Every collective is: local part (checks,
 * export), one exchange on the node (descriptors, or ABORTs from a rank that
 * failed; peers' chunks imported as they arrive), one agreement. */
#ifndef VMMIPC_COLL_COLL_H
#define VMMIPC_COLL_COLL_H

#include "comm/comm.h"
#include <pthread.h>

#include "desc/desc.h"
#include "driver/cu.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The signal pool of a comm: one granule of device memory per rank, made
 * with the comm's first window and mapped by every node peer. Each window
 * takes one slice of it on every rank (the same index everywhere, since
 * windows come and go collectively): per_win 64-bit slots, node_size for
 * signals (slot q: written by node rank q), node_size for host-API barriers,
 * node_size for device barriers (vmmipc_dev_barrier), then 2 node_size for
 * host-API barriers captured in CUDA graphs on the memory-operation path
 * (two phases; sync/barrier.c). */
struct vmmipc__sync;
#define VMMIPC__POOL_SLOTS_PER_RANK 5 /* per_win = 5 * node_size */
#define VMMIPC__POOL_ZERO_BATCH 64    /* freed slices whose zeroings are queued together */
struct vmmipc__pool {
  vmmipc_buf_t local;    /* this rank's pool */
  vmmipc_buf_t *peer;    /* [node_size]: the peers' pools mapped here (NULL for self) */
  CUdeviceptr *base;     /* [node_size]: where each rank's pool is seen here */
  int per_win;           /* slots per window: VMMIPC__POOL_SLOTS_PER_RANK * node_size */
  int slices;            /* windows the pool holds */
  unsigned char *used;   /* [slices]: 0 free, 1 taken, 2 free and zeroed here (or its zeroing queued),
                            3 free, its zeroing owed (queued in batches: coll/pool.c) */
  uint64_t *zgen;        /* [slices]: the zeroing that made it so (queued ones are > synced) */
  uint64_t gen, synced;  /* zeroings queued on the private stream; those known complete */
  int owed, owed_lo, owed_hi; /* slices in state 3, and the range they lie in */
  int next;              /* next-fit: a freed slice is taken again last, its zeroing long done */
  int next_before;       /* next before the last take: what an undo restores */
  CUstream stream;       /* private, non-blocking: zeroing slices and host waits */
  CUcontext ctx;         /* the context it was made in (the release may run on any thread) */
  pthread_mutex_t mu;    /* serialises the private stream */
  struct vmmipc__sync *sync; /* host sync's state for the comm (sync/setup.c) */
};

struct vmmipc_win {
  vmmipc_comm_t comm;
  vmmipc_buf_t own;      /* the caller's buffer (not owned; its `exposed` counts this window) */
  vmmipc_buf_t *peers;   /* [node_size]: imported mappings, NULL for self or none */
  int slice;             /* its slice of the comm's signal pool; -1: none (a node of one) */
  uint64_t barriers;     /* uncaptured memory-operation barriers entered so far (__atomic builtins) */
  int memops;            /* 0: not checked yet, 1: supported, -1: not supported */
  struct vmmipc__windev *dev; /* the device API's arrays, filled on first use (sync/device.c) */
  uint64_t sync_kernel;  /* host sync calls that ran as kernels (__atomic builtins) */
  uint64_t sync_memops;  /* ... as stream memory operations */
  int forced_path;       /* VMMIPC__PATH_* of every host sync call (auto's trial, sync/trial.c); 0: the comm's */
  /* A heap window (src/heap): own and peers are views into the heap's
   * segments, owned by the window; vmmipc_win_free hands it to free_hook. */
  struct vmmipc_heap *heap;
  size_t heap_off, heap_span; /* the slice: offset in every segment, bytes carved */
  uint64_t id;           /* the epoch of the call that made it: the same on every rank */
  /* Frees what the window holds here and the record: in step (after an
   * agreement that every rank frees it: the slots are zeroed for reuse) or
   * locally (a failed comm). Plain and heap windows differ. */
  void (*reap)(struct vmmipc_win *w, int in_step);
  int pins;              /* vmmipc_win_pin (__atomic builtins; any thread) */
  int released;          /* vmmipc_win_release was called (__atomic builtins) */
  struct vmmipc__deferred def; /* its place in the comm's queue once released */
};

/* vmmipc_win_free's shape, for plain and heap windows alike (coll/winfree.c):
 * refuses a pinned window, agrees on the window (its id), then frees it on
 * every rank (w->reap) or on none; on a failed comm, frees it locally.
 * `local`: this rank's own objection (VMMIPC_SUCCESS: none). */
vmmipc_result_t vmmipc__win_free(struct vmmipc_win *w, vmmipc_result_t local);


/* Frees what the device API made for a window (sync/device.c); every
 * window's free path calls it. */
void vmmipc__windev_free(struct vmmipc_win *w);

/* Makes the comm's signal pool (a collective of its own: one exchange, one
 * agreement) unless it exists. Every rank calls it with its first window. */
vmmipc_result_t vmmipc__pool_setup(struct vmmipc_comm *c, const char *op);
/* The comm's first window (or heap) makes the pool: a step of its own, with
 * its own epoch and agreement (all ranks take it together). */
vmmipc_result_t vmmipc__pool_ensure(struct vmmipc_comm *c, const char *op);
/* Takes the next free slice (next-fit, the same one on every rank, which
 * take and give alike) with this rank's part zeroed: a driver call only if
 * its zeroing is still queued (rare: every other slice comes first) or it
 * came back dirty. */
vmmipc_result_t vmmipc__pool_take(struct vmmipc_comm *c, int *slice, const char *op);
/* Undoes a take whose window never existed (its call failed): still
 * zeroed, and the next take picks it again, as on the ranks that failed
 * before taking. */
void vmmipc__pool_undo(struct vmmipc_comm *c, int slice);
/* Gives a used slice back dirty (the comm failed): zeroed when taken again. */
void vmmipc__pool_give(struct vmmipc_comm *c, int slice);
/* Gives a used slice back to be zeroed before it is taken again, without a
 * driver call: the zeroings owed are queued in one batch (contiguous runs,
 * one copy each) once VMMIPC__POOL_ZERO_BATCH are owed, or when a take
 * reaches one of them. Only once no peer can still write to it: after the
 * agreement of the window's free. */
void vmmipc__pool_give_zeroed(struct vmmipc_comm *c, int slice);
void vmmipc__pool_destroy(struct vmmipc__pool *p, int node_size);

/* Called for each descriptor as it arrives (d is NULL for "none"); takes
 * ownership of d. */
typedef vmmipc_result_t (*vmmipc__coll_got_t)(void *arg, int node_rank, vmmipc_desc_t d);

/* The exchange of one collective: this rank sends send_desc[p] (NULL: an
 * empty message) to every node rank p with to[p] set, and receives one
 * descriptor from every p with from[p] set, handing each to `got` as soon
 * as it arrives. `local` non-zero: this rank already failed and tells the
 * peers instead. *secondary is set when the exchange ended because a peer
 * gave up. Every message also carries this process's freed-buffer notices
 * that the peer has not had (vmm/freed.h); received ones drop the entries
 * of the comm's mapping cache. Adds the transfer time (without `got`) to the comm's timing. */
vmmipc_result_t vmmipc__coll_exchange(struct vmmipc_comm *c, const vmmipc_desc_t *send_desc, const char *to,
                                      const char *from, vmmipc__coll_got_t got, void *arg, vmmipc_result_t local,
                                      int *secondary);
/* The exchange of a map collective (allgather_map, bcast_map,
 * scatter_map): a first round where every importer tells each owner which
 * of the owner's buffers it holds mapped with `access` (pinned until the
 * call ends), then the exchange above of bufs[p] (NULL or empty: none)
 * exported for each p in `to`, where a buffer the receiver holds travels
 * without fds (and is exported without them when nobody needs them).
 * per_peer: export errors name the rank the buffer was for. The two rounds
 * take two epochs on every rank, a node of one included (window ids are
 * epochs, compared comm-wide). */
vmmipc_result_t vmmipc__coll_map_exchange(struct vmmipc_comm *c, const vmmipc_buf_t *bufs, int per_peer,
                                          const char *to, const char *from, const vmmipc_access_t *access,
                                          vmmipc__coll_got_t got, void *arg, vmmipc_result_t local,
                                          int *secondary);
/* After the agreement of every collective that exchanged: the freed
 * notices sent (coll/msg.h) count as delivered only when it succeeded. */
void vmmipc__coll_done(struct vmmipc_comm *c, vmmipc_result_t agreed);
/* A copy of `d` with duplicated fds (NULL stays NULL). */
vmmipc_result_t vmmipc__desc_dup(vmmipc_desc_t d, vmmipc_desc_t *out);
/* Argument checks of the rooted collectives: `out` given and `root` a rank. */
vmmipc_result_t vmmipc__check_rooted(struct vmmipc_comm *c, const void *out, int root, const char *op);
/* Resolves the access early, so that an invisible UUID fails before export. */
vmmipc_result_t vmmipc__check_access(const vmmipc_access_t *a, const char *op);
/* Exports `b` unless it is NULL or empty (then *d stays NULL); timed. (The
 * map collectives export inside vmmipc__coll_map_exchange instead.) */
vmmipc_result_t vmmipc__export_opt(struct vmmipc_comm *c, vmmipc_buf_t b, vmmipc_desc_t *d);
/* Imports a peer's descriptor for a collective (timed); messages name the rank. */
vmmipc_result_t vmmipc__coll_import(struct vmmipc_comm *c, vmmipc_desc_t d, const vmmipc_access_t *a,
                                    vmmipc_buf_t *out, int from_rank);
void vmmipc__free_descs(vmmipc_desc_t *d, int n);

#ifdef __cplusplus
}
#endif
#endif
