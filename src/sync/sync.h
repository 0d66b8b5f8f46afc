/* The device API's side of a window and the kernel path of host sync:
 * device.c makes the arrays kernels read, kernels.c loads and launches the
 * library's kernels (kern/sync.cu), path.c picks kernels or stream memory
 * operations for each host sync call (VMMIPC_SYNC). */
#ifndef VMMIPC_SYNC_SYNC_H
#define VMMIPC_SYNC_SYNC_H

#include "coll/coll.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What a window keeps for kernels. `d` is what vmmipc_win_device hands out;
 * the host-API barrier's slots are here too (the device barrier has its own). */
struct vmmipc__windev {
  vmmipc_win_device_t d;
  CUdeviceptr mem;            /* every array of d, in one allocation */
  CUdeviceptr hbar_out;       /* [node_size]: the caller's host-barrier slot at each node rank */
  CUdeviceptr hbar_in;        /* node rank q's host-barrier slot here: hbar_in + 8 q */
  vmmipc_dev_record_t *record; /* mapped host memory (cuMemHostAlloc) */
};

/* The window's arrays, made on first use (thread-safe); on failure the
 * window stays without them and the next call tries again. */
vmmipc_result_t vmmipc__windev_get(struct vmmipc_win *w, const char *op, struct vmmipc__windev **out);

/* Fails (VMMIPC_ERR_TIMEOUT, or VMMIPC_ERR_PEER for a failure value) while
 * a device wait on w has left a record; the message names the rank. */
vmmipc_result_t vmmipc__windev_check(struct vmmipc_win *w, const char *op);

/* The library's kernels in the current context: loaded on first use per
 * context; VMMIPC_ERR_UNSUPPORTED where they cannot be loaded. */
typedef struct vmmipc__kernels {
  CUfunction signal, wait, barrier;
} vmmipc__kernels_t;
vmmipc_result_t vmmipc__kernels_get(const vmmipc__cu_t *cu, const char *op, vmmipc__kernels_t *out);

/* The kernel path of each host call (rank checked; w->slice >= 0). */
vmmipc_result_t vmmipc__kern_signal(struct vmmipc_win *w, int rank, uint64_t value, void *stream, const char *op);
vmmipc_result_t vmmipc__kern_wait(struct vmmipc_win *w, int rank, uint64_t value, void *stream, const char *op);
vmmipc_result_t vmmipc__kern_barrier(struct vmmipc_win *w, uint64_t k, void *stream, const char *op);

/* Which path a host sync call takes: VMMIPC_SYNC=kernel|memops|auto
 * (default auto: kernels where they load, else memory operations). Checks
 * the window's record first; *kernel: 1 for kernels, 0 for memory
 * operations (counted in the window's stats). */
vmmipc_result_t vmmipc__sync_path(struct vmmipc_win *w, const char *op, int *kernel);

#ifdef __cplusplus
}
#endif
#endif
