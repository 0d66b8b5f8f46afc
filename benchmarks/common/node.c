/* Rank, node and device setup for the benchmarks. */
#include "common/node.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "common/driver.h"

double bench_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void bench_fatal(const char *fmt, ...) {
  int rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  fprintf(stderr, "[rank %d] error: %s\n", rank, msg);
  fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 2);
  exit(2);
}

void bench_vcheck_at(vmmipc_result_t r, const char *what, const char *file, int line) {
  if (r == VMMIPC_SUCCESS) return;
  bench_fatal("%s:%d: %s failed: %s: %s", file, line, what, vmmipc_strerror(r), vmmipc_last_error());
}

void bench_progress(const bench_node_t *n, const char *fmt, ...) {
  if (n->rank != 0 || n->quiet) return;
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  fprintf(stderr, "[%s %7.1fs] %s\n", n->prog, bench_now() - n->t0, msg);
  fflush(stderr);
}

int bench_agree_skip(char *why, size_t len) {
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int mine = why[0] ? rank : size, first;
  MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (first == size) return 0;
  char buf[512];
  if (rank == first) {
    if (first > 0)
      snprintf(buf, sizeof buf, "rank %d: %s", first, why);
    else
      snprintf(buf, sizeof buf, "%s", why);
  }
  MPI_Bcast(buf, (int)sizeof buf, MPI_CHAR, first, MPI_COMM_WORLD);
  snprintf(why, len, "%s", buf);
  return 1;
}

void bench_raise_fd_limit(void) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
}

void bench_node_init(bench_node_t *n, const char *prog) {
  memset(n, 0, sizeof *n);
  n->prog = prog;
  n->t0 = bench_now();
  MPI_Comm_rank(MPI_COMM_WORLD, &n->rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n->size);
  MPI_Comm local;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local);
  MPI_Comm_rank(local, &n->local_rank);
  MPI_Comm_size(local, &n->local_size);
  MPI_Comm_free(&local);
  int all_local = n->local_size == n->size, everywhere;
  MPI_Allreduce(&all_local, &everywhere, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (!everywhere) bench_fatal("%s needs all ranks on one node (this node has %d of %d)", prog, n->local_size, n->size);
  if (n->size < 2) bench_fatal("%s needs at least 2 ranks (run it under mpirun -np 2)", prog);

  VCHECK(vmmipc_device_count(&n->device_count));
  if (n->device_count < 1) bench_fatal("no CUDA device is visible");
  n->device = n->local_rank % n->device_count;
  VCHECK(vmmipc_set_device(n->device));
  char err[640];
  if (bd_load(err, sizeof err) != 0) bench_fatal("loading the driver table: %s", err);
  BD_CHECK(bd.cuDeviceGet(&n->cudev, n->device));
  if (bd.cuDeviceGetName(n->device_name, (int)sizeof n->device_name, n->cudev) != CUDA_SUCCESS)
    snprintf(n->device_name, sizeof n->device_name, "unknown");
  if (bd.cuDeviceGetAttribute(&n->sm_count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, n->cudev) != CUDA_SUCCESS)
    n->sm_count = 0;
  vmmipc_uuid_t u;
  VCHECK(vmmipc_device_uuid(n->device, &u));
  vmmipc_uuid_format(&u, n->uuid);

  n->all_names = calloc((size_t)n->size, sizeof *n->all_names);
  n->all_uuids = calloc((size_t)n->size, sizeof *n->all_uuids);
  n->all_devices = calloc((size_t)n->size, sizeof *n->all_devices);
  if (!n->all_names || !n->all_uuids || !n->all_devices) bench_fatal("out of host memory");
  MPI_Allgather(n->device_name, BENCH_NAME_LEN, MPI_CHAR, n->all_names, BENCH_NAME_LEN, MPI_CHAR, MPI_COMM_WORLD);
  MPI_Allgather(n->uuid, VMMIPC_UUID_STRING_LEN, MPI_CHAR, n->all_uuids, VMMIPC_UUID_STRING_LEN, MPI_CHAR,
                MPI_COMM_WORLD);
  MPI_Allgather(&n->device, 1, MPI_INT, n->all_devices, 1, MPI_INT, MPI_COMM_WORLD);
}

void bench_node_fini(bench_node_t *n) {
  free(n->all_names);
  free(n->all_uuids);
  free(n->all_devices);
}
