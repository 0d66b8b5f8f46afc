/* The node-local communicator: the MPI side (node split, rank translation,
 * the bounded all-or-nothing agreement, the state after failures, and who
 * may call when) over the socket transport. */
#ifndef VMMIPC_COMM_COMM_H
#define VMMIPC_COMM_COMM_H

#include <mpi.h>
#include <pthread.h>
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

/* Ids of released objects an agreement carries at most (its outcome and
 * its verdict): the rest go with later agreements. */
#define VMMIPC__DEFERRED_MAX 32

/* A released window or heap, queued on its comm (deferred.c); embedded in
 * the object. */
struct vmmipc__deferred {
  uint64_t id;  /* the object's comm-wide id: the epoch of the call that made it */
  int heap;     /* 0: a window, 1: a heap */
  const void *group; /* a window's heap, or NULL */
  int (*ready)(struct vmmipc__deferred *d);          /* may it go now (unpinned; a heap: no window left) */
  void (*reap)(struct vmmipc__deferred *d, int in_step); /* frees it: in step after an agreement, or locally */
  struct vmmipc__deferred *next;
};

struct vmmipc_comm {
  MPI_Comm dup;            /* private duplicate of the user's communicator */
  MPI_Comm node;           /* ranks of this node (by host and VMMIPC_NODE_ID) */
  int rank, size;          /* in dup (= the user's communicator) */
  int node_rank, node_size;
  int *node_of;            /* [size]: comm rank -> node rank, or -1 off-node */
  int *rank_of;            /* [node_size]: node rank -> comm rank */
  vmmipc__tp_t *tp;
  int timeout_ms;
  int64_t deadline_ms;     /* the current call's bound (deadline.c), 0: none yet */
  int thread_level;        /* what MPI provides (MPI_Query_thread) */
  uint64_t epoch;          /* collective calls so far: every rank, success or not */
  uint64_t agreements;     /* agreements so far (tags their MPI messages) */
  uint64_t id;             /* rank 0's random id for this comm (withdrawals carry it) */
  int mpi_dirty;           /* a message to this rank may still come, or an MPI operation of it is
                              pending: keep the MPI comms */
  int busy;                /* a thread is inside a call on this comm (__atomic builtins); VMMIPC__BUSY_ABORT:
                              vmmipc_comm_abort tells the peers */
  const char *busy_op;     /* which call, for the refusal message (__atomic builtins) */
  int broken;              /* a bounded wait expired or a peer failed: every call fails (__atomic loads
                              from other threads) */
  vmmipc_result_t broken_code; /* what every later call returns (VMMIPC_ERR_PEER unless aborted, or MPI finalized) */
  char broken_msg[VMMIPC__ERRMSG_MAX];
  int broken_rank;             /* the rank its failure named (-1: none), named again by every later call */
  int breaking;                /* a break is writing the record above (guard.c; __atomic builtins) */
  int untold;                  /* broken outside any call (a torn barrier): the next call that holds the comm
                                  tells the others (guard.c; __atomic builtins) */
  int aborted;             /* vmmipc_comm_abort was called (__atomic builtins; any thread) */
  int lingering;           /* threads outside a call that still touch it: aborts, calls letting it go (abort.c's
                              registry lock); its free waits for none */
  struct vmmipc_comm *live_next; /* the registry of live comms (abort.c) */
  int abort_told;          /* the peers were told (__atomic builtins) */
  int abort_agreed;        /* the agreement was told over MPI (agree.c; the calling thread's) */
  int peer_abort_told;     /* a node peer's abort, read outside an agreement, was told over MPI (agree.c) */
  /* Releases the stream waits enqueued on this comm's windows (set by whoever
   * made the signal pool: sync/release.c); called once the comm fails. */
  void (*release)(struct vmmipc_comm *);
  int released;            /* (__atomic builtins) */
  /* Run by every call that holds the comm (vmmipc__enter): breaks the comm
   * if a host-sync stream wait timed out (set with the release hook:
   * sync/alarm.c). */
  void (*check)(struct vmmipc_comm *);
  int open_windows;
  int open_heaps;          /* heaps made on this comm not destroyed yet: comm_destroy is refused */
  struct vmmipc__mapcache *cache; /* NULL: no mapping cache */
  uint64_t *freed_told;    /* [2 * node_size]: freed-buffer notices delivered / sent (coll/xchg.c) */
  /* The tables a collective needs to tell its node peers that it failed,
   * made with the comm so that no collective lacks them (calls on a comm do
   * not overlap): a round's messages (coll/xchg.c), and node-rank flags.
   * [node_size] each. */
  vmmipc__tp_send_t *coll_sends;
  vmmipc__tp_recv_t *coll_recvs;
  unsigned char **coll_bytes;
  char *coll_flags;        /* [5 * node_size]: the five below, one block */
  const char *coll_all;    /* every node peer (set at creation) */
  char *coll_to, *coll_from; /* a rooted collective's roles */
  char *coll_both, *coll_told_all; /* a map exchange's first round (coll/xchg.c) */
  struct vmmipc__pool *pool;      /* signal pads of this comm's windows, made with the first window */
  void (*pool_free)(struct vmmipc__pool *, int node_size); /* set by whoever made the pool (coll) */
  vmmipc_timing_t timing;  /* phases of the last collective */
  /* The host-sync paths and how they were picked, copied when the pool is
   * made (coll/pool.c, from sync/setup.c and sync/trial.c) for
   * vmmipc_comm_stats: VMMIPC_SYNC_PATH_*,
   * VMMIPC_SYNC_BY_*, and the trial's ns (signal memops, kernels; barrier
   * memops, kernels). */
  int sync_path, sync_barrier_path, sync_by;
  uint64_t sync_trial_ns[4];
  /* Deferred frees (deferred.c): the queue (any thread, under def_mu), the
   * agreed cursor (see agree.c), and the ids an agreement of the current
   * call found released everywhere, freed when the call ends. */
  pthread_mutex_t def_mu;
  struct vmmipc__deferred *def_head;
  int def_count;           /* (__atomic builtins) */
  uint64_t def_freed;
  uint64_t def_cursor;
  uint64_t *due;
  int due_n, due_cap;
};

/* ---- calls (guard.c) ---- */
/* Every call on a comm starts here: refuses overlapping calls on one comm,
 * concurrent calls that the MPI thread level does not allow, and calls on
 * a broken comm; a collective also advances the epoch and clears the
 * timings. On success vmmipc__leave must follow. */
vmmipc_result_t vmmipc__enter(struct vmmipc_comm *c, const char *op, int collective);
/* Lets the comm go: the caller must not touch c after it (a destroy on
 * another thread may free it at once), so a call makes its result first. */
void vmmipc__leave(struct vmmipc_comm *c);
/* Released objects: those the call's agreements found released by every
 * rank go now, in step; on a failed comm, every one that is ready goes
 * locally. Keeps the thread's message. (vmmipc__leave does it; so does a
 * destroy that frees the comm without leaving it.) */
void vmmipc__reap_released(struct vmmipc_comm *c);
/* Takes the comm (its busy flag): refused while a call is inside, but an
 * abort telling the peers (bounded: a few writes of 100 ms at most, a few
 * MPI sends) is waited out, up to 2 s. 1: held. */
int vmmipc__hold(struct vmmipc_comm *c);
/* The process-wide half of vmmipc__enter, for calls that have no comm yet
 * (vmmipc_comm_create) or free it (vmmipc_comm_destroy): counts this thread
 * as inside a call that may use MPI, and refuses it as vmmipc__enter does
 * when the thread level does not allow it (unasked after MPI_Finalize, which
 * the caller has asked). vmmipc__leave_process follows. */
vmmipc_result_t vmmipc__enter_process(int thread_level, int finalized, const char *op);
void vmmipc__leave_process(void);
/* Marks the comm broken with the current error message (every later call
 * returns VMMIPC_ERR_PEER, or `code` for vmmipc__break_code), and releases
 * the stream waits on its windows. */
void vmmipc__break(struct vmmipc_comm *c);
/* Whether the comm failed (broken, or aborted here): calls then free locally. */
int vmmipc__failed(struct vmmipc_comm *c);
/* The error of a call that freed its object locally on a failed comm:
 * ABORTED, or the comm's broken code, with "<op>: freed locally; ...". */
vmmipc_result_t vmmipc__freed_locally(struct vmmipc_comm *c, const char *op);
/* A call that frees locally on a failed comm (holding it, not entered):
 * tells a break made outside any call (c->untold), as an entered call
 * does, where MPI allows this thread a call. Keeps the caller's error. */
void vmmipc__tell_untold(struct vmmipc_comm *c, const char *op);
/* VMMIPC_ERR_ABORTED for a call on a comm aborted on this rank: "<op>:
 * <what>rank R aborted the communicator", naming this rank as its peers'
 * calls do. */
vmmipc_result_t vmmipc__aborted_here(struct vmmipc_comm *c, const char *op, const char *what);
void vmmipc__break_code(struct vmmipc_comm *c, vmmipc_result_t code);
/* Breaks it with exactly `code` as what every later call returns. */
void vmmipc__break_as(struct vmmipc_comm *c, vmmipc_result_t code);
/* vmmipc__break_code from outside any call (a host sync call, the check at
 * a call's entry): if this break wrote the record, the next call that holds
 * the comm tells it (c->untold), once. */
void vmmipc__break_untold(struct vmmipc_comm *c, vmmipc_result_t code);
/* Releases the stream waits on the comm's windows (once; any thread). */
void vmmipc__release_waits(struct vmmipc_comm *c);
/* Tells the node's peers that this rank aborted the comm, once. The caller
 * holds the comm (its busy flag). */
void vmmipc__tell_abort(struct vmmipc_comm *c);
/* What an abort that finds the comm held by nobody tells, from the thread
 * that holds it now: the node's peers (vmmipc__tell_abort, then
 * vmmipc__seal_failed) and, where MPI allows this thread a call, the ranks
 * off this node (vmmipc__tell_aborted_unasked). */
void vmmipc__announce_abort(struct vmmipc_comm *c);
/* Once the comm failed here (aborted or broken), refuses what peers send
 * it from now on and drops what they queued (transport/seal.c). The caller
 * holds the comm; after vmmipc__tell_abort. */
void vmmipc__seal_failed(struct vmmipc_comm *c);

/* ---- deferred frees (deferred.c) ---- */
/* Queues a released object (any thread). */
void vmmipc__deferred_push(struct vmmipc_comm *c, struct vmmipc__deferred *d);
/* The caller holds the comm: the (at most max) smallest ids >= cursor of
 * queued objects that are ready, ascending; *more: some were left out. */
int vmmipc__deferred_collect(struct vmmipc_comm *c, uint64_t cursor, uint64_t *ids, int max, int *more);
/* Makes room to note n more ids, before they go into an outcome: once
 * every rank accepted a verdict, noting its ids must not fail. -1: no
 * memory (the outcome then names none). */
int vmmipc__deferred_room(struct vmmipc_comm *c, int n);
/* Notes ids an agreement found released by every rank (freed by
 * vmmipc__deferred_reap_due), in the room made for them. */
void vmmipc__deferred_due(struct vmmipc_comm *c, const uint64_t *ids, int n);
/* Frees the noted objects, in id order; returns how many. */
int vmmipc__deferred_reap_due(struct vmmipc_comm *c);
/* On a failed comm: frees every queued object that is ready, locally. */
int vmmipc__deferred_reap_local(struct vmmipc_comm *c);
/* Objects queued and not freed yet (any thread). */
int vmmipc__deferred_count(struct vmmipc_comm *c);
/* Queued objects that a destroy may count as gone: windows (of `group`
 * unless NULL) that are ready, or (heap = 1) heaps. */
int vmmipc__deferred_count_of(struct vmmipc_comm *c, int heap, const void *group);
/* A destroy's agreements: one with `local`, then, while their verdicts
 * free released objects (freed at once, in step) or more may be left, more
 * of them; returns the first failure or the last success. */
vmmipc_result_t vmmipc__agree_drain(struct vmmipc_comm *c, vmmipc_result_t local, const char *op, int keyed,
                                    uint64_t key);

/* ---- lifetime (abort.c) ---- */
#define VMMIPC__BUSY_ABORT 2
/* Live comms: vmmipc_comm_abort only touches a comm it finds here. add: a
 * comm handed to the caller; remove: before it is freed, and waits until
 * no abort is inside it. */
void vmmipc__live_add(struct vmmipc_comm *c);
void vmmipc__live_remove(struct vmmipc_comm *c);
/* Counts this thread in as still touching c after it let c go (free waits
 * for it); unlinger is the thread's last touch of c. */
void vmmipc__linger(struct vmmipc_comm *c);
void vmmipc__unlinger(struct vmmipc_comm *c);
/* Counts this thread into c if c is live (found by address, touching
 * nothing of it), as linger does; else INVALID_ARG for `op` (a NULL or
 * destroyed comm). The calls that may run during a destroy on another
 * thread (abort, cache trim). */
vmmipc_result_t vmmipc__live_enter(struct vmmipc_comm *c, const char *op);

/* ---- agreement (agree.c) ---- */
/* All-or-nothing outcome of a collective over comm->dup, bounded by the
 * timeout. Returns the result of the lowest rank that failed on its own
 * (`secondary` = 0), else of the lowest that failed because a peer gave up,
 * else success; on failure every rank gets the same message: "<op> failed
 * on rank R: <its message>". A rank that does not answer in time gives
 * VMMIPC_ERR_TIMEOUT naming it, and the comm is broken. `op` is the public
 * call (agree.c's k_calls): ranks in different calls fail with
 * VMMIPC_ERR_INVALID_ARG naming both. */
vmmipc_result_t vmmipc__agree(struct vmmipc_comm *c, vmmipc_result_t local, int secondary, const char *op);
/* The same, and `keyed` ranks must all bring the same key (a window's or
 * heap's id, a root): else VMMIPC_ERR_INVALID_ARG naming the first rank
 * whose key differs from the first keyed rank's. */
vmmipc_result_t vmmipc__agree_key(struct vmmipc_comm *c, vmmipc_result_t local, int secondary, const char *op,
                                  int keyed, uint64_t key);
/* The agreement's full form: a key as above, and a fixed-size input of
 * this rank (len bytes, the same len on every rank) that the verdict hands
 * to every rank: on SUCCESS, all (size * len bytes, the caller's) holds
 * every rank's input in rank order, so that every rank decides alike from
 * the same inputs. Every agreement also carries the objects this rank
 * released (deferred.c); those every rank released are freed when the
 * call ends (vmmipc__leave). */
typedef struct vmmipc__agree_io {
  int keyed;
  uint64_t key;
  const void *mine;
  size_t len;
  unsigned char *all;
  int pool; /* the signal pool's agreement: its call made an MPI step on the node */
} vmmipc__agree_io_t;
vmmipc_result_t vmmipc__agree_io(struct vmmipc_comm *c, vmmipc_result_t local, int secondary, const char *op,
                                 vmmipc__agree_io_t *io);
/* Before a comm whose last verdict every rank shares (not broken) frees its
 * MPI communicators: every message a peer sent this rank on comm->dup is
 * received, so that none is left for a communicator that reuses the freed
 * context. Each member sends the collector a last message and waits for its
 * answer; the collector receives everything up to each member's last
 * message (withdrawals that came after its verdict). Bounded by two graces:
 * a rank that does not finish keeps its communicators (mpi_dirty). */
void vmmipc__agree_flush(struct vmmipc_comm *c);
/* This rank aborted: the abort, the call it lands in or the next one
 * (vmmipc__leave), or its local destroy tells the ranks off its node over
 * MPI, once, from a thread where MPI may be called: rank 0 sends every rank
 * the verdict of the next agreement (aborted, naming it), a member tells
 * rank 0, which fails every rank. Best effort: sets no error. */
void vmmipc__agree_tell_aborted(struct vmmipc_comm *c);
/* The same for rank `aborter` of this rank's node, whose abort a
 * point-to-point call read (its END frame) and which broke the comm here:
 * outside an agreement, where a member's wait would have told rank 0, and
 * this rank's next collective is refused at entry. Once; the calling
 * thread is inside a call. */
void vmmipc__agree_tell_peer_aborted(struct vmmipc_comm *c, int aborter);
/* Tells the others that this rank's comm broke outside any call (a failure
 * a host sync call recorded, its alarm or note: sync/alarm.c; a torn
 * barrier: sync/barrier.c): the node's peers get an END frame, and the next
 * agreement fails everywhere at once with this break's code and rank (rank
 * 0 sends its verdict; a member, its outcome flagged broken). Before, the
 * others waited out the timeout on this rank. Once (c->untold), by the
 * entry of the next call or by a call that frees locally
 * (vmmipc__tell_untold); keeps the caller's error. */
void vmmipc__agree_tell_break(struct vmmipc_comm *c, const char *op);
/* The same from a thread the application did not hand an MPI call (the
 * abort, the local destroy: abort.c), only where MPI allows it: MPI still
 * up, and any thread under MPI_THREAD_MULTIPLE or MPI's main thread below
 * MPI_THREAD_SERIALIZED (under SERIALIZED the application's own MPI call may
 * be running on another thread). Leaves the error record as it was. The
 * caller holds the comm. */
void vmmipc__tell_aborted_unasked(struct vmmipc_comm *c, const char *op);

/* ---- one deadline per call (deadline.c) ---- */
/* The collector's slack: a tenth of the timeout, at most 1 s. */
int vmmipc__slack_ms(const struct vmmipc_comm *c);
/* The call's bound (vmmipc__now_ms clock): set at a collective's entry, or
 * at its first use; the agreement ends it (the next step starts one). */
int64_t vmmipc__deadline(struct vmmipc_comm *c);
/* A step before the agreement: two slacks before the call's bound. */
int64_t vmmipc__step_deadline(struct vmmipc_comm *c);

/* ---- a failed socket mesh told over the node (mesh_news.c) ---- */
struct vmmipc__mesh_news;
/* Before the mesh: receives for each node peer's outcome. Whatever this
 * returns, vmmipc__mesh_news_end follows (with *out, which may be NULL):
 * a rank that fails here still tells its peers. */
vmmipc_result_t vmmipc__mesh_news_start(struct vmmipc_comm *c, struct vmmipc__mesh_news **out);
/* The mesh's stop callback (vmmipc__mesh_stop_fn): PEER, naming the rank
 * to blame, once a node peer's outcome that came is a failure. */
vmmipc_result_t vmmipc__mesh_news_stop(void *arg);
/* After the mesh: sends this rank's outcome to each node peer and waits
 * for theirs (bounded by the mesh's timeout plus a second, watching their
 * pids); frees the news. Returns `mine` if it failed, else the wait's
 * error, naming the peer (its MPI communicators are then not freed). */
vmmipc_result_t vmmipc__mesh_news_end(struct vmmipc_comm *c, struct vmmipc__mesh_news *m, vmmipc_result_t mine);
/* Tells every node peer, unwaited, that this rank's setup failed with
 * `code` before its mesh (its exchange of addresses timed out or failed: a
 * late peer whose exchange completed then stops at once); the comm's MPI
 * communicators are then left to MPI. */
void vmmipc__mesh_news_tell(struct vmmipc_comm *c, vmmipc_result_t code);

/* ---- bounded MPI waits (mpiwait.c) ---- */
/* Waits until every request completes or deadline_ms passes; 0 if all
 * completed, 1 on timeout (requests left pending), -1 on an MPI error
 * (*mpi_rc). */
int vmmipc__mpi_wait(MPI_Request *reqs, int n, int64_t deadline_ms, int *mpi_rc);
enum {
  VMMIPC__WAIT_MPI = -1,     /* an MPI call failed (*mpi_rc) */
  VMMIPC__WAIT_DONE = 0,     /* every request completed */
  VMMIPC__WAIT_TIMEOUT = 1,  /* the deadline passed */
  VMMIPC__WAIT_GONE = 2,     /* watched node rank *gone hung up, exited, broke the protocol or aborted the
                                comm (error set; *gone_code: VMMIPC_ERR_ABORTED for an abort) */
  VMMIPC__WAIT_ABORTED = 3   /* vmmipc_comm_abort on this rank (error set) */
};
/* vmmipc__mpi_wait that also watches the collective sockets of the node
 * ranks with watch[p] == 1 (NULL: none; 2: only the pid of p; 3: hang-ups
 * and the pid, reading nothing; 4: as 3, and an abort's END frame queued
 * first, left queued, ends the wait; a hang-up turns 3 and 4 into 2,
 * another record first 4 into 3): reads them as they become readable
 * (vmmipc__tp_read_coll), checks their pids every 100 ms, and ends as soon
 * as one is gone or the comm is aborted here. Sleeps in poll() between
 * tests, backing off to 1 ms. */
int vmmipc__mpi_wait_watch(struct vmmipc_comm *c, MPI_Request *reqs, int n, int64_t deadline_ms, int *mpi_rc,
                           char *watch, int *gone, vmmipc_result_t *gone_code);
/* Gives up requests that will not complete: point-to-point receives are
 * cancelled if `cancel`, the rest are left to MPI. `keep` (their buffers,
 * malloc'd) stays allocated for the life of the process, since MPI may
 * still use it. */
void vmmipc__mpi_abandon(MPI_Request *reqs, int n, int cancel, void *keep);
/* Keeps `keep` (malloc'd) allocated for the life of the process. */
void vmmipc__mpi_keep(void *keep);
/* Sends without waiting (MPI_Isend, its request freed): for a message that
 * may never be received. `b` must outlive the send: static, or kept
 * (vmmipc__mpi_keep). Failures are ignored: the receiver's own bound ends
 * its wait. */
void vmmipc__mpi_send_unwaited(MPI_Comm comm, const void *b, int count, MPI_Datatype type, int to, int tag);
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
