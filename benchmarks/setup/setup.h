/* vmmipc_setup: latency of the mapping collectives, with its anchors. */
#ifndef VMMIPC_BENCH_SETUP_H
#define VMMIPC_BENCH_SETUP_H

#include <stddef.h>

#include "common/fdmesh.h"
#include "common/node.h"
#include "common/stats.h"
#include "vmmipc.h"

/* What each repetition records: the wall time around the call and the
 * phases (vmmipc_comm_last_timing for the library, the same split for the
 * anchors), each the maximum over ranks. */
enum { SF_WALL, SF_EXPORT, SF_TRANSFER, SF_IMPORT, SF_MAP, SF_ACCESS, SF_AGREE, SF_TOTAL, SF_N };
extern const char *const setup_field_names[SF_N];

typedef enum { SC_ALLGATHER, SC_BCAST, SC_SCATTER, SC_N } setup_coll_t;
extern const char *const setup_coll_names[SC_N]; /* "allgather_map", ... */

#define SETUP_REASON_LEN 512

typedef struct setup_result {
  setup_coll_t coll;
  const char *method; /* "vmmipc", "floor", "legacy_ipc" */
  size_t size, chunk;
  int chunks, reps;
  double first[SF_N];
  double *samples; /* [reps][SF_N] */
  bench_stats_t st[SF_N];
  char skipped[SETUP_REASON_LEN];
  char error[SETUP_REASON_LEN];
} setup_result_t;

typedef struct setup_ctx {
  bench_node_t *node;
  vmmipc_comm_t comm;
  bench_fdmesh_t mesh;
  int have_mesh;
  char mesh_skipped[SETUP_REASON_LEN];
  int root;
  int reps, reps_large, min_reps;
  double budget; /* seconds per (combo, collective, method); 0: no limit */
  size_t granularity;
  setup_result_t *res;
  int nres, capres;
  int errors;
} setup_ctx_t;

/* One repetition: does the work between barriers, fills v[] with this
 * rank's times, then releases what the call made (untimed). */
typedef void (*setup_rep_fn)(setup_ctx_t *c, void *arg, double v[SF_N]);

/* Appends a result for (coll, method, size, chunks); returns it. */
setup_result_t *setup_new_result(setup_ctx_t *c, setup_coll_t coll, const char *method, size_t size, size_t chunk,
                                 int chunks);
/* Runs fn once cold and then reps more times, or fewer when --budget says
 * so; fills r (max over ranks). Collective. */
void setup_measure(setup_ctx_t *c, setup_result_t *r, setup_rep_fn fn, void *arg);

/* Marker bytes at both ends of a buffer, checked through the mapping after
 * the first call: own buffers carry setup_own_mark(owner rank), the
 * per-rank buffers of a scatter setup_scatter_mark(destination rank). */
unsigned char setup_own_mark(int rank);
unsigned char setup_scatter_mark(int rank);
void setup_mark(unsigned long long base, size_t size, unsigned char m);
/* Empty string when both ends hold m, else a message in why. */
void setup_check_mark(unsigned long long base, size_t size, unsigned char m, const char *what, char *why,
                      size_t len);

/* The library's collectives on a buffer of `chunks` chunks (lib.c). */
void setup_run_lib(setup_ctx_t *c, const int *colls, size_t chunk, int chunks);
/* The raw-driver floor: the same work without the library (floor.c). */
void setup_run_floor(setup_ctx_t *c, const int *colls, size_t chunk, int chunks);
/* Legacy IPC: MPI_Allgather of cuIpc handles + cuIpcOpenMemHandle (ipc.c). */
void setup_run_ipc(setup_ctx_t *c, size_t size);

/* Output (report.c), rank 0. */
void setup_report_table(const setup_ctx_t *c);
int setup_report_json(const setup_ctx_t *c, const char *path, int argc, char **argv);
int setup_report_csv(const setup_ctx_t *c, const char *path);

#endif
