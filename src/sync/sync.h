/* Host sync's state and the device API's side of a window:
 *   setup.c    per comm, with its first window: the path every node rank
 *              takes (VMMIPC_SYNC, agreed), the alarm, the device arrays of
 *              windows (made at window creation, never on the sync path)
 *   trial.c    auto's measurement of both paths, with the first window
 *   path.c     which path a host sync call takes
 *   kernels.c  the library's kernels (kern/sync.cu): loaded at window
 *              creation, found and launched by host sync calls
 *   device.c   vmmipc_win_device: a window's arrays, filled on first use
 *   barrier.c  the host-API barrier on each path, CUDA-graph safe
 *   alarm.c    a host-sync kernel wait that timed out fails the comm
 *   release.c  the failure value, and its keeper
 * No host sync call loads code, allocates, or waits for the context
 * (DESIGN.md section 8): a user's kernel may wait for the very signal. */
#ifndef VMMIPC_SYNC_SYNC_H
#define VMMIPC_SYNC_SYNC_H

#include <pthread.h>

#include "coll/coll.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { VMMIPC__PATH_MEMOPS = 1, VMMIPC__PATH_KERNELS = 2 };
/* The counted memory-operation barrier's shape (VMMIPC_SYNC_BARRIER,
 * barrier.c), and what VMMIPC_DEV_SCOPE asks for (setup.c). */
enum { VMMIPC__BAR_FLAT = 1, VMMIPC__BAR_GATHER, VMMIPC__BAR_DISSEM, VMMIPC__BAR_BAD };
enum { VMMIPC__SCOPE_AUTO = 1, VMMIPC__SCOPE_SYS, VMMIPC__SCOPE_BAD };
#define VMMIPC__ARENA_SLICES 64 /* windows per chunk of device arrays */

/* One per comm, made with its signal pool (coll/pool.c). */
struct vmmipc__sync {
  int path;                        /* VMMIPC__PATH_* of signal and wait: the same on every node rank */
  int barrier_path;                /* VMMIPC__PATH_* of the host-API barrier: likewise */
  int shape;                       /* VMMIPC__BAR_*: the same on every node rank */
  int by;                          /* VMMIPC_SYNC_BY_*: how path and barrier_path were picked */
  uint64_t trial_ns[4];            /* auto's trial (trial.c): signal memops, kernels; barrier memops, kernels */
  uint32_t scope;                  /* VMMIPC_DEV_SCOPE_GPU or _SYS: the windows' vmmipc_win_device_t.scope */
  size_t words;                    /* 8-byte words of one window's device arrays */
  int nchunks;
  CUdeviceptr *chunk;              /* [nchunks]: arrays of VMMIPC__ARENA_SLICES slices (0: not made yet) */
  vmmipc_dev_record_t **records;   /* [nchunks]: their records, in mapped host memory */
  CUdeviceptr *records_dev;        /* [nchunks]: the records' device addresses */
  vmmipc_dev_record_t *alarm;      /* mapped host memory: the comm's first host-sync kernel wait that timed out */
  CUdeviceptr alarm_dev;           /* its device address */
  CUdeviceptr alarm_claim;         /* device memory: the first to time out takes the alarm */
  /* A host wait that found its peer failed (alarm.c; first wins, __atomic): 1 being written, 2 set. */
  int noted;
  vmmipc_result_t noted_code;
  int noted_rank;
  char noted_msg[VMMIPC__ERRMSG_MAX];
  /* The keeper of the failure value (release.c). */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  pthread_t keeper;
  int keeping, stop;
};

/* ---- setup.c ---- */
/* The comm's host-sync state, by every node rank of its first window
 * (coll/pool.c, before the pool's agreement; `local` is this rank's result
 * so far, and the node's ranks exchange what they are even when it is a
 * failure). Loads the library's kernels into the current context unless
 * VMMIPC_SYNC=memops; VMMIPC_SYNC must be the same on every node rank.
 * *trial: 1 where auto's trial must follow (the same on every node rank). */
vmmipc_result_t vmmipc__sync_setup(struct vmmipc_comm *c, struct vmmipc__pool *p, vmmipc_result_t local,
                                   int *trial, const char *op);
/* Every node rank's `len` bytes into *all (malloc'd, node-rank order),
 * within the call's bound; `what` names them in errors. */
vmmipc_result_t vmmipc__sync_allgather(struct vmmipc_comm *c, const void *mine, size_t len, void **all,
                                       const char *what, const char *op);

/* ---- trial.c ---- */
/* auto's trial: every node rank of the pool's step, after its exchange
 * and before its agreement (`local`: this rank's result so far; the pool's
 * peers imported). Measures signal + wait and the barrier on both paths
 * and sets the faster of each, the same on every node rank. Returns
 * `local`, or the trial's own failure (a node rank missing: TIMEOUT). */
vmmipc_result_t vmmipc__sync_trial(struct vmmipc_comm *c, struct vmmipc__pool *p, vmmipc_result_t local,
                                   const char *op);
/* Everything a window of `slice` needs before any host sync call on it:
 * its chunk of device arrays, and on the kernel path the kernels in the
 * current context (a failed load is reported by the calls). Local; at
 * window creation, before its agreement. */
vmmipc_result_t vmmipc__sync_win_ready(struct vmmipc_comm *c, int slice, const char *op);
/* Stops the keeper and frees what setup and win_ready made (pool teardown). */
void vmmipc__sync_free(struct vmmipc__pool *p);

/* ---- device.c ---- */
/* What a window keeps for kernels. `d` is what vmmipc_win_device hands out;
 * the host-API barrier's slots and count are here too. */
struct vmmipc__windev {
  vmmipc_win_device_t d;
  CUdeviceptr mem;             /* every array of d, in its slice of the comm's arena */
  CUdeviceptr hbar_out;        /* [node_size]: the caller's host-barrier slot at each node rank */
  CUdeviceptr hbar_in;         /* node rank q's host-barrier slot here: hbar_in + 8 q */
  CUdeviceptr hbar_epoch;      /* host-API kernel barriers entered on this rank */
  vmmipc_dev_record_t *record; /* mapped host memory */
};
/* The window's arrays, filled on first use (thread-safe; no allocation:
 * an upload on the pool's private stream). */
vmmipc_result_t vmmipc__windev_get(struct vmmipc_win *w, const char *op, struct vmmipc__windev **out);
/* Fails (VMMIPC_ERR_TIMEOUT, or VMMIPC_ERR_PEER for a failure value) while
 * a device wait on w has left a record; the message names the rank. */
vmmipc_result_t vmmipc__windev_check(struct vmmipc_win *w, const char *op);

/* ---- kernels.c ---- */
typedef struct vmmipc__kernels {
  CUfunction signal, wait, barrier;
  int pdl; /* launched with programmatic serialization (the compute_90 PTX) */
} vmmipc__kernels_t;
/* Loads the kernels into the current context once (a failure is kept and
 * returned again). Never on the sync path: a load waits for the context. */
vmmipc_result_t vmmipc__kernels_load(const vmmipc__cu_t *cu, const char *op, vmmipc__kernels_t *out);
/* The kernels of the current context, if a window creation loaded them;
 * never loads. */
vmmipc_result_t vmmipc__kernels_find(const vmmipc__cu_t *cu, const char *op, vmmipc__kernels_t *out);
/* The kernel path of each host call (rank checked). */
vmmipc_result_t vmmipc__kern_signal(struct vmmipc_win *w, int rank, uint64_t value, void *stream, const char *op);
vmmipc_result_t vmmipc__kern_wait(struct vmmipc_win *w, int rank, uint64_t value, void *stream, const char *op);
vmmipc_result_t vmmipc__kern_barrier(struct vmmipc_win *w, void *stream, const char *op);

/* ---- path.c ---- */
enum { VMMIPC__MODE_AUTO = 1, VMMIPC__MODE_KERNEL, VMMIPC__MODE_MEMOPS, VMMIPC__MODE_BAD };
/* VMMIPC_SYNC, read once; *raw: its text. */
int vmmipc__sync_mode(const char **raw);
/* Which path a host sync call on w takes (*kernel: 1 kernels, 0 memory
 * operations; `barrier`: 1 for vmmipc_win_barrier, whose path may differ
 * from signal's and wait's under auto), counted in the window's stats.
 * Checks the window's device record and the comm's alarm first. */
vmmipc_result_t vmmipc__sync_path(struct vmmipc_win *w, const char *op, int barrier, int *kernel);
/* Why a host sync call on w is refused now, or VMMIPC_SUCCESS: the comm's
 * noted failure or alarm first, then the window's device record. */
vmmipc_result_t vmmipc__sync_refusal(struct vmmipc_win *w, const char *op);

/* ---- barrier.c ---- */
/* The memory-operation barrier: a counted one in the comm's shape, or, on a
 * stream being captured into a CUDA graph, one of fixed values (two
 * phases) that replays correctly. `wait_flags`: what sync_ready found. */
vmmipc_result_t vmmipc__memops_barrier(struct vmmipc_win *w, void *stream, unsigned wait_flags, const char *op);
/* Its operations, without a driver call (tests read them): counted barrier
 * number k in `shape` (VMMIPC__BAR_*), or the captured form. Returns how
 * many were written to ops, which has room for
 * vmmipc__memops_barrier_max(node_size). */
int vmmipc__memops_barrier_plan(const struct vmmipc_win *w, int shape, uint64_t k, int captured, unsigned wait_flags,
                                CUstreamBatchMemOpParams *ops);
int vmmipc__memops_barrier_max(int node_size);
/* Address of slot `slot` in node rank q's part of the window's slice. */
CUdeviceptr vmmipc__slot_addr(const struct vmmipc_win *w, int q, int slot);

/* ---- alarm.c ---- */
/* VMMIPC_ERR_TIMEOUT naming the rank if a host-sync kernel wait on the comm
 * timed out, or the failure a host wait found (vmmipc__sync_note): the comm
 * then fails (see vmmipc__sync_check). */
vmmipc_result_t vmmipc__sync_alarm(struct vmmipc_comm *c, const char *op);
/* A host wait found its peer failed (`code`, the thread's error naming it):
 * recorded first (the first one wins), so that this rank's sync calls
 * refuse with it, then this rank's stream waits are released. */
void vmmipc__sync_note(struct vmmipc_comm *c, vmmipc_result_t code);
/* The comm's check hook (comm.h), run by every call that holds the comm:
 * breaks it if the alarm is set. */
void vmmipc__sync_check(struct vmmipc_comm *c);

/* ---- capture.c ---- */
/* Library work that must not spoil a user's stream capture (copies on the
 * pool's private stream, which is never captured): the calling thread's
 * capture mode is relaxed meanwhile (cuThreadExchangeStreamCaptureMode). */
typedef struct {
  CUstreamCaptureMode was;
  int set;
} vmmipc__relaxed_t;
void vmmipc__capture_relax(const vmmipc__cu_t *cu, vmmipc__relaxed_t *r);
void vmmipc__capture_restore(const vmmipc__cu_t *cu, const vmmipc__relaxed_t *r);
/* The library's copies on the pool's private stream from any thread, with
 * whatever context it has current (none, or another device's): the pool's
 * context `ctx` is made current and the capture mode relaxed, both put back
 * by vmmipc__aside_end. */
typedef struct {
  vmmipc__relaxed_t relaxed;
  CUcontext was;
  int switched;
} vmmipc__aside_t;
void vmmipc__aside_begin(const vmmipc__cu_t *cu, CUcontext ctx, vmmipc__aside_t *a);
void vmmipc__aside_end(const vmmipc__cu_t *cu, const vmmipc__aside_t *a);
/* Whether `stream` is being captured into a graph (0 where the driver
 * cannot tell). */
int vmmipc__capturing(const vmmipc__cu_t *cu, void *stream);

#ifdef __cplusplus
}
#endif
#endif
