/*
 * vmmipc: the window as kernels see it (docs/device-api.md). Plain C, no MPI:
 * included by vmmipc.h (which fills it, vmmipc_win_device) and by
 * vmmipc_device.cuh (whose device functions read it).
 */
#ifndef VMMIPC_WIN_DEVICE_H
#define VMMIPC_WIN_DEVICE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What vmmipc_dev_wait and vmmipc_dev_barrier return, and what a window's
 * device status records (vmmipc_win_device_status_t.state). */
#define VMMIPC_DEV_OK 0
#define VMMIPC_DEV_TIMEOUT 1 /* the deadline passed before the slot reached the value */
#define VMMIPC_DEV_FAILED 2  /* the slot holds a failure value (top bit set): a peer failed */
#define VMMIPC_DEV_INVALID 3 /* vmmipc_dev_wait: the rank is out of range or not on the caller's node
                                (the host calls' VMMIPC_ERR_INVALID_ARG); nothing is recorded */

/* A slot whose top bit is set holds a failure value, written when the comm
 * detects a failure: every wait on it returns at once (VMMIPC_DEV_FAILED). */
#define VMMIPC_DEV_FAILED_BIT 0x8000000000000000ull

/* The record of the first device wait that gave up, in host memory mapped
 * to the device (written by kernels, read by the host without a copy).
 * head == 0: empty; else state | barrier << 8 | (uint32_t)rank << 32. */
typedef struct vmmipc_dev_record {
  volatile unsigned long long head;
  volatile unsigned long long value; /* the awaited value */
  volatile unsigned long long seen;  /* what the slot held when it gave up */
} vmmipc_dev_record_t;

/* A window as kernels see it: a plain struct, taken by value (kernel
 * argument or __constant__). Arrays are device memory owned by the window's
 * comm and valid until the window is freed; indexes are comm ranks unless
 * said otherwise. Slots are NULL exactly for ranks of other nodes, where
 * the host calls return VMMIPC_ERR_INVALID_ARG: vmmipc_dev_signal does
 * nothing there and vmmipc_dev_wait returns VMMIPC_DEV_INVALID (as for a
 * rank out of range). */
typedef struct vmmipc_win_device {
  int rank;                        /* the caller's rank in the window's comm */
  int nranks;                      /* the comm's size */
  int node_rank;                   /* the caller's rank among its node's ranks */
  int node_size;
  uint64_t timeout_ns;             /* the comm's timeout: what a timeout of 0 means */
  void *const *ptrs;               /* [nranks]: rank's buffer as mapped here (NULL: none, other node) */
  const uint64_t *sizes;           /* [nranks]: its size in bytes (0: none) */
  uint64_t *const *signal_out;     /* [nranks]: the caller's slot in rank's pad (vmmipc_win_signal's) */
  uint64_t *const *signal_in;      /* [nranks]: rank's slot in the caller's pad */
  const int *node_ranks;           /* [node_size]: node rank -> comm rank */
  uint64_t *const *barrier_out;    /* [node_size]: the caller's device-barrier slot in each node rank's pad */
  uint64_t *barrier_in;            /* [node_size]: node rank q's device-barrier slot here */
  uint64_t *epoch;                 /* device barriers entered on this rank (one block at a time) */
  unsigned long long *claim;       /* device memory: the first wait to give up takes the record */
  vmmipc_dev_record_t *record;     /* host memory mapped to the device (vmmipc_win_device_status) */
} vmmipc_win_device_t;

#ifdef __cplusplus
}
#endif
#endif /* VMMIPC_WIN_DEVICE_H */
