/* What every benchmark does first: the MPI ranks of one node, one GPU per
 * rank (node-local rank % device count), the driver table, and small
 * helpers for failing, agreeing on a skip, and reporting progress. */
#ifndef VMMIPC_BENCH_NODE_H
#define VMMIPC_BENCH_NODE_H

#include <cuda.h>
#include <mpi.h>
#include <stddef.h>

#include "vmmipc.h"

#define BENCH_NAME_LEN 128

typedef struct bench_node {
  const char *prog;
  int rank, size;             /* MPI_COMM_WORLD */
  int local_rank, local_size; /* MPI_COMM_TYPE_SHARED */
  int device_count, device;   /* visible devices; the ordinal this rank uses */
  CUdevice cudev;
  int sm_count;               /* 0 when the driver does not say */
  char device_name[BENCH_NAME_LEN];
  char uuid[VMMIPC_UUID_STRING_LEN];
  /* Every rank's device, gathered on all ranks: [size] entries. */
  char (*all_names)[BENCH_NAME_LEN];
  char (*all_uuids)[VMMIPC_UUID_STRING_LEN];
  int *all_devices;
  int quiet;
  double t0;
} bench_node_t;

/* Splits off the node, picks and sets the device, loads the driver table.
 * Fails (MPI_Abort with a message) unless all ranks share one node. */
void bench_node_init(bench_node_t *n, const char *prog);
void bench_node_fini(bench_node_t *n);

void bench_fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
void bench_vcheck_at(vmmipc_result_t r, const char *what, const char *file, int line);
#define VCHECK(call) bench_vcheck_at((call), #call, __FILE__, __LINE__)

double bench_now(void); /* monotonic seconds */

/* Rank 0 only, on stderr, with the elapsed time, unless quiet. */
void bench_progress(const bench_node_t *n, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Collective. A non-empty `why` on any rank means "skip": afterwards every
 * rank holds the reason of the lowest such rank (prefixed with its rank
 * unless that is rank 0).
 * Returns 1 when skipping, 0 when no rank gave a reason. */
int bench_agree_skip(char *why, size_t len);

/* Raises the soft RLIMIT_NOFILE to the hard limit (many chunks = many fds). */
void bench_raise_fd_limit(void);

#endif
