/* vmmipc_setup: latency of the mapping collectives, with its anchors. */
#ifndef VMMIPC_BENCH_SETUP_H
#define VMMIPC_BENCH_SETUP_H

#include <stddef.h>

#include "common/fdmesh.h"
#include "common/node.h"
#include "common/rawvmm.h"
#include "common/stats.h"
#include "vmmipc.h"

/* What each repetition records: the wall time around the call and the
 * phases (vmmipc_comm_last_timing for the library, the same split for the
 * anchors), each the maximum over ranks. */
enum { SF_WALL, SF_EXPORT, SF_TRANSFER, SF_IMPORT, SF_MAP, SF_ACCESS, SF_AGREE, SF_TOTAL, SF_N };
extern const char *const setup_field_names[SF_N];

/* Mapping-cache counters of vmmipc_comm_stats around a call, summed over
 * ranks: they show whether "mapped again" really hit the cache. */
enum { SK_HITS, SK_MISSES, SK_NOFDS, SK_N }; /* SK_NOFDS: fds_not_sent (issue 21) */

/* The three mapping collectives, then the collective that moves nothing
 * (vmmipc_allgather_desc of NULL: one exchange and one agreement). */
typedef enum { SC_ALLGATHER, SC_BCAST, SC_SCATTER, SC_NMAP, SC_NULL = SC_NMAP, SC_N } setup_coll_t;
extern const char *const setup_coll_names[SC_N]; /* "allgather_map", ..., "allgather_desc" */

#define SETUP_REASON_LEN 512

/* Methods: "vmmipc" (first mapping: fresh buffers every repetition),
 * "vmmipc_again" (the same buffers mapped again), "floor", "legacy_ipc". */
#define SETUP_FIRST "vmmipc"
#define SETUP_AGAIN "vmmipc_again"

typedef struct setup_result {
  setup_coll_t coll;
  const char *method;
  size_t size, chunk;
  int chunks, reps;
  double first[SF_N];
  double *samples; /* [reps][SF_N] */
  bench_stats_t st[SF_N];
  int counted;                   /* the cache counters below mean something (library methods) */
  long long first_k[SK_N], k[SK_N]; /* first call; sum over the repetitions after it */
  char skipped[SETUP_REASON_LEN];
  char error[SETUP_REASON_LEN];
} setup_result_t;

/* A goal of issue 11: ratio = subject / anchor (medians of this run), PASS
 * when ratio <= target; n/a with a reason when a row is missing or the run
 * is not on the placement the goal is about. */
typedef struct setup_goal {
  const char *id, *text;
  double subject_s, anchor_s, ratio, target; /* NaN when missing */
  const char *verdict;                        /* PASS, FAIL, n/a */
  char reason[SETUP_REASON_LEN];              /* why n/a */
  char note[SETUP_REASON_LEN];                /* which row, when the goal covers several */
} setup_goal_t;
#define SETUP_NGOALS 5

typedef struct setup_ctx {
  bench_node_t *node;
  /* First mappings, the comm's first window and the null collective. Its
   * mapping cache is off unless --first-map-cache says otherwise: a fresh
   * buffer can never hit it, and the idle mappings of freed buffers would
   * only hold GPU memory. */
  vmmipc_comm_t comm;
  int first_map_cache;
  /* Mapped again: a comm with the default config (caches as users get
   * them), made per size x chunks and destroyed after, so that what its
   * cache keeps of freed buffers never piles up over the run. */
  vmmipc_comm_t again;
  int mode_first, mode_again;
  bench_fdmesh_t mesh;
  int have_mesh;
  char mesh_skipped[SETUP_REASON_LEN];
  int root;
  int reps, reps_large, min_reps;
  double budget; /* seconds per (combo, collective, method); 0: no limit */
  double time_limit; /* seconds since start; 0: none */
  size_t granularity;
  int gpus, per_gpu; /* distinct devices; most ranks on one of them */
  const char *tag;
  char incomplete[SETUP_REASON_LEN]; /* why some combinations were not measured */
  long long rep_k[SK_N];             /* filled by a library repetition, this rank */
  int have_first_window;
  double first_window[SF_N]; /* the comm's first allgather_map (makes its signal pool) */
  size_t first_window_size;
  setup_result_t *res;
  int nres, capres;
  setup_goal_t goals[SETUP_NGOALS];
  int ngoals;
  int errors;
} setup_ctx_t;

/* One repetition: does the work between barriers, fills v[] with this
 * rank's times, then releases what the call made (untimed). */
typedef void (*setup_rep_fn)(setup_ctx_t *c, void *arg, double v[SF_N]);

/* Appends a result for (coll, method, size, chunks); returns it. */
setup_result_t *setup_new_result(setup_ctx_t *c, setup_coll_t coll, const char *method, size_t size, size_t chunk,
                                 int chunks);
/* Runs fn once cold and then reps more times, or fewer when --budget says
 * so; fills r (max over ranks; cache counters summed). Collective. */
void setup_measure(setup_ctx_t *c, setup_result_t *r, setup_rep_fn fn, void *arg);
/* The measured result for (coll, method, size, chunks), or NULL. */
const setup_result_t *setup_find(const setup_ctx_t *c, setup_coll_t coll, const char *method, size_t size,
                                 int chunks);

/* Marker bytes at both ends of a buffer, checked through the mapping after
 * the first call: own buffers carry setup_own_mark(owner rank), the
 * per-rank buffers of a scatter setup_scatter_mark(destination rank). */
unsigned char setup_own_mark(int rank);
unsigned char setup_scatter_mark(int rank);
void setup_mark(unsigned long long base, size_t size, unsigned char m);
/* Empty string when both ends hold m, else a message in why. */
void setup_check_mark(unsigned long long base, size_t size, unsigned char m, const char *what, char *why,
                      size_t len);

/* The comm's first window, timed on its own (lib.c). Collective. */
void setup_run_first_window(setup_ctx_t *c);
/* vmmipc_allgather_desc(NULL): the cost of one exchange and one agreement. */
void setup_run_null(setup_ctx_t *c);
/* The library's collectives on buffers of `chunks` chunks, first mapping
 * and mapped again as the modes say (lib.c). */
void setup_run_lib(setup_ctx_t *c, const int *colls, size_t chunk, int chunks);
/* The raw-driver floor: the same work without the library (floor.c). */
void setup_run_floor(setup_ctx_t *c, const int *colls, size_t chunk, int chunks);
/* v[] of a floor repetition: its phases, no agreement, total = wall. */
void setup_floor_phases(const bench_phases_t *ph, double wall, double v[SF_N]);
/* Issue 11's design probes, allgather only (floor_probe.c): method
 * "floor_joint" (one reserved range and one cuMemSetAccess for all peers)
 * or "floor_threads" (a thread per peer imports, maps and sets access). */
void setup_run_floor_probe(setup_ctx_t *c, const char *method, size_t chunk, int chunks);
/* Legacy IPC: MPI_Allgather of cuIpc handles + cuIpcOpenMemHandle (ipc.c).
 * fresh = 0: the same cuMemAlloc buffer opened again every repetition
 * (method "legacy_ipc"); fresh = 1: a new buffer every repetition, made
 * and freed outside the clock ("legacy_ipc_fresh", a first mapping). */
void setup_run_ipc(setup_ctx_t *c, size_t size, int fresh);

/* The symmetric heap's rows, its workload and its ratios, printed at rank
 * 0, and written to json (--heap-json FILE) unless NULL (heap.c; --heap,
 * --heap-only, --heap-windows). Collective. */
void setup_run_heap(setup_ctx_t *c, int reps, int windows, const char *json);

/* The anchor of "mapped again": 0.1 ms + the agree phase of
 * allgather_desc(NULL) in this run (median); NaN when not measured. */
double setup_again_anchor(const setup_ctx_t *c);
/* Issue 11's goals from the results (report.c), rank 0. */
void setup_goals(setup_ctx_t *c);
/* Output (report.c), rank 0. */
void setup_report_table(const setup_ctx_t *c);
int setup_report_json(const setup_ctx_t *c, const char *path, int argc, char **argv);
int setup_report_csv(const setup_ctx_t *c, const char *path);

#endif
