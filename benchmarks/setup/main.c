/* vmmipc_setup: how long vmmipc_allgather_map, vmmipc_bcast_map and
 * vmmipc_scatter_map take to map peers' buffers, by ranks x chunks x size,
 * with the per-phase split, first mapping (fresh buffers) and mapped again
 * (cache hits), next to the raw-driver floor and legacy IPC, and the goals
 * of issue 11 as ratios from this run.
 * Run under mpirun with >= 2 ranks on one node. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/args.h"
#include "common/driver.h"
#include "common/rawvmm.h"
#include "setup/setup.h"

const char *const setup_field_names[SF_N] = {"wall", "export", "transfer", "import", "map", "access", "agree", "total"};
const char *const setup_coll_names[SC_N] = {"allgather_map", "bcast_map", "scatter_map", "allgather_desc"};

#define SETUP_MAX_POINTS 64

typedef struct setup_opts {
  size_t min_size, max_size;
  int chunks[16], nchunks;
  size_t pt_size[SETUP_MAX_POINTS];
  int pt_chunks[SETUP_MAX_POINTS], npoints;
  int reps, reps_large, min_reps, root, quiet;
  int first_map_cache;
  double budget, time_limit;
  int colls[SC_N]; /* SC_NULL stays 0: floor.c walks all SC_N */
  int lib, floor, ipc, first, again;
  int probe_joint, probe_threads, ipc_fresh; /* --probes */
  int heap, heap_only, heap_windows;         /* --heap, --heap-only, --heap-windows */
  const char *heap_json;                     /* --heap-json */
  const char *json, *csv, *tag;
} setup_opts_t;

static void setup_usage(FILE *f) {
  fprintf(f,
          "usage: mpirun -np N vmmipc_setup [options]\n"
          "  --min-size S      smallest buffer (default 2M)\n"
          "  --max-size S      largest buffer (default 4G); sizes double from min to max\n"
          "  --chunks LIST     chunks per buffer (default 1,16,256); chunk = size/chunks, at least 2 MiB\n"
          "  --reps N          timed repetitions after the first (cold) call (default 20)\n"
          "  --reps-large N    repetitions for sizes >= 1 GiB (default: --reps)\n"
          "  --budget S        at most about S seconds per size x chunks x collective x method\n"
          "                    (fewer reps, at least --min-reps; default 0: no limit)\n"
          "  --min-reps N      lower bound for --budget (default 3)\n"
          "  --points LIST     SIZExCHUNKS pairs instead of the sweep, e.g. 2Mx1,32Mx16\n"
          "  --colls LIST      allgather,bcast,scatter (default all)\n"
          "  --methods LIST    vmmipc,floor,legacy_ipc (default all)\n"
"  --probes LIST     also measure issue 11's design probes (allgather only; default none):\n"
          "                    joint (floor_joint: one range and one access call for all peers),\n"
          "                    threads (floor_threads: a thread per peer), ipc_fresh (legacy_ipc_fresh:\n"
          "                    legacy IPC of a new buffer every repetition)\n"
          "  --modes LIST      first,again: vmmipc on fresh buffers every repetition (first mapping)\n"
          "                    and on the same buffers again (cache hits) (default both)\n"
          "  --first-map-cache N  mapping-cache entries of the first-mapping comm (default 0: off;\n"
          "                    -1: the library's default)\n"
          "  --time-limit S    measure no new size x chunks once the run is S seconds old (default 0: none)\n"
          "  --tag NAME        stored in the JSON (run-gpu.sh: main, scale)\n"
          "  --root R          root of bcast_map and scatter_map (default 0)\n"
          "  --heap            also measure the symmetric heap (issue 22): 2 MiB windows against the\n"
          "                    MPI floor, a fresh allgather_map and legacy IPC; a mixed workload of\n"
          "                    1000 windows; one growth step against the raw driver\n"
          "  --heap-only       only the heap's measurements\n"
          "  --heap-windows N  windows of the heap's mixed workload (default 1000)\n"
          "  --heap-json FILE  the heap's rows, workload and ratios as JSON\n"
          "  --json FILE, --csv FILE, --quiet\n");
}

static int setup_has(const char *list, const char *word) {
  char buf[256];
  snprintf(buf, sizeof buf, "%s", list);
  char *save = NULL;
  for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save))
    if (strncmp(t, word, strlen(t) < strlen(word) ? strlen(t) : strlen(word)) == 0) return 1;
  return 0;
}

/* "2Mx1,32Mx16" into the point lists; -1 on a malformed entry. */
static int setup_parse_points(const char *v, setup_opts_t *o) {
  char buf[512];
  snprintf(buf, sizeof buf, "%s", v);
  o->npoints = 0;
  char *save = NULL;
  for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    char *x = strpbrk(t, "xX");
    if (!x || o->npoints == SETUP_MAX_POINTS) return -1;
    *x = '\0';
    size_t size;
    int chunks;
    if (bench_parse_size(t, &size) || size == 0 || bench_parse_int(x + 1, &chunks) || chunks < 1) return -1;
    o->pt_size[o->npoints] = size;
    o->pt_chunks[o->npoints++] = chunks;
  }
  return o->npoints ? 0 : -1;
}

static void setup_parse(int argc, char **argv, setup_opts_t *o) {
  memset(o, 0, sizeof *o);
  o->min_size = 2 * BENCH_MiB;
  o->max_size = 4 * BENCH_GiB;
  o->chunks[0] = 1;
  o->chunks[1] = 16;
  o->chunks[2] = 256;
  o->nchunks = 3;
  o->reps = 20;
  o->min_reps = 3;
  o->lib = o->floor = o->ipc = 1;
  o->first = o->again = 1;
  o->tag = "main";
  o->heap_windows = 1000;
  for (int k = 0; k < SC_NMAP; k++) o->colls[k] = 1;
  o->colls[SC_NULL] = 0;
  for (int i = 1; i < argc; i++) {
    const char *v;
    int bad = 0;
    if ((v = bench_opt(argc, argv, &i, "min-size")))
      bad = bench_parse_size(v, &o->min_size) || o->min_size == 0;
    else if ((v = bench_opt(argc, argv, &i, "max-size")))
      bad = bench_parse_size(v, &o->max_size) || o->max_size == 0;
    else if ((v = bench_opt(argc, argv, &i, "chunks"))) {
      bad = bench_parse_int_list(v, o->chunks, 16, &o->nchunks);
      for (int k = 0; !bad && k < o->nchunks; k++) bad = o->chunks[k] < 1;
    } else if ((v = bench_opt(argc, argv, &i, "reps")))
      bad = bench_parse_int(v, &o->reps) || o->reps < 1;
    else if ((v = bench_opt(argc, argv, &i, "reps-large")))
      bad = bench_parse_int(v, &o->reps_large) || o->reps_large < 1;
    else if ((v = bench_opt(argc, argv, &i, "min-reps")))
      bad = bench_parse_int(v, &o->min_reps) || o->min_reps < 1;
    else if ((v = bench_opt(argc, argv, &i, "budget")))
      bad = bench_parse_double(v, &o->budget) || o->budget < 0;
    else if ((v = bench_opt(argc, argv, &i, "time-limit")))
      bad = bench_parse_double(v, &o->time_limit) || o->time_limit < 0;
    else if ((v = bench_opt(argc, argv, &i, "first-map-cache")))
      bad = bench_parse_int(v, &o->first_map_cache) || o->first_map_cache < -1;
    else if ((v = bench_opt(argc, argv, &i, "points")))
      bad = setup_parse_points(v, o);
    else if ((v = bench_opt(argc, argv, &i, "modes"))) {
      o->first = setup_has(v, "first");
      o->again = setup_has(v, "again");
      bad = !o->first && !o->again;
    } else if ((v = bench_opt(argc, argv, &i, "tag")))
      bad = !*(o->tag = v);
    else if ((v = bench_opt(argc, argv, &i, "root")))
      bad = bench_parse_int(v, &o->root) || o->root < 0;
    else if ((v = bench_opt(argc, argv, &i, "colls"))) {
      o->colls[SC_ALLGATHER] = setup_has(v, "allgather");
      o->colls[SC_BCAST] = setup_has(v, "bcast");
      o->colls[SC_SCATTER] = setup_has(v, "scatter");
      bad = !o->colls[0] && !o->colls[1] && !o->colls[2];
    } else if ((v = bench_opt(argc, argv, &i, "methods"))) {
      o->lib = setup_has(v, "vmmipc");
      o->floor = setup_has(v, "floor");
      o->ipc = setup_has(v, "legacy_ipc");
      bad = !o->lib && !o->floor && !o->ipc;
    } else if ((v = bench_opt(argc, argv, &i, "probes"))) {
      o->probe_joint = setup_has(v, "joint");
      o->probe_threads = setup_has(v, "threads");
      o->ipc_fresh = setup_has(v, "ipc_fresh");
      bad = !o->probe_joint && !o->probe_threads && !o->ipc_fresh;
    } else if ((v = bench_opt(argc, argv, &i, "heap-json")))
      o->heap_json = v;
    else if ((v = bench_opt(argc, argv, &i, "json")))
      o->json = v;
    else if ((v = bench_opt(argc, argv, &i, "csv")))
      o->csv = v;
    else if ((v = bench_opt(argc, argv, &i, "heap-windows")))
      bad = bench_parse_int(v, &o->heap_windows) || o->heap_windows < 1;
    else if (strcmp(argv[i], "--heap") == 0)
      o->heap = 1;
    else if (strcmp(argv[i], "--heap-only") == 0)
      o->heap = o->heap_only = 1;
    else if (!bench_common_flag(argv[i], &o->quiet, setup_usage))
      bench_opt_fail("vmmipc_setup", argv[i], 1, setup_usage);
    if (bad) bench_opt_fail("vmmipc_setup", argv[i], 0, setup_usage);
  }
  if (o->reps_large == 0) o->reps_large = o->reps;
}

setup_result_t *setup_new_result(setup_ctx_t *c, setup_coll_t coll, const char *method, size_t size, size_t chunk,
                                 int chunks) {
  if (c->nres == c->capres) {
    int cap = c->capres ? 2 * c->capres : 64;
    setup_result_t *r = realloc(c->res, (size_t)cap * sizeof *r);
    if (!r) bench_fatal("out of host memory");
    c->res = r;
    c->capres = cap;
  }
  setup_result_t *r = &c->res[c->nres++];
  memset(r, 0, sizeof *r);
  r->coll = coll;
  r->method = method;
  r->size = size;
  r->chunk = chunk;
  r->chunks = chunks;
  for (int f = 0; f < SF_N; f++) r->first[f] = NAN;
  bench_stats(NULL, 0, &r->st[0]);
  for (int f = 1; f < SF_N; f++) r->st[f] = r->st[0];
  return r;
}

const setup_result_t *setup_find(const setup_ctx_t *c, setup_coll_t coll, const char *method, size_t size,
                                 int chunks) {
  for (int i = 0; i < c->nres; i++) {
    const setup_result_t *r = &c->res[i];
    if (r->coll == coll && strcmp(r->method, method) == 0 && r->size == size && r->chunks == chunks &&
        !r->skipped[0] && !r->error[0] && r->reps > 0)
      return r;
  }
  return NULL;
}

void setup_measure(setup_ctx_t *c, setup_result_t *r, setup_rep_fn fn, void *arg) {
  int reps = r->size >= BENCH_GiB ? c->reps_large : c->reps;
  r->samples = calloc((size_t)reps * SF_N, sizeof *r->samples);
  if (!r->samples) bench_fatal("out of host memory");
  for (int i = 0; i <= reps; i++) {
    double v[SF_N], mx[SF_N];
    long long k[SK_N];
    for (int f = 0; f < SF_N; f++) v[f] = 0;
    for (int f = 0; f < SK_N; f++) c->rep_k[f] = 0;
    double r0 = bench_now(), whole, whole_mx;
    fn(c, arg, v);
    whole = bench_now() - r0;
    MPI_Allreduce(v, mx, SF_N, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(c->rep_k, k, SK_N, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(&whole, &whole_mx, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (i == 0) {
      memcpy(r->first, mx, sizeof mx);
      memcpy(r->first_k, k, sizeof k);
      /* The cold call bounds the warm ones from above: a safe estimate.
       * The whole repetition counts, untimed buffer making included (first
       * mapping makes fresh buffers every time). */
      if (c->budget > 0 && whole_mx > 0) {
        double fit = c->budget / whole_mx;
        int cap = fit > reps ? reps : (int)fit;
        if (cap < c->min_reps) cap = c->min_reps < reps ? c->min_reps : reps;
        reps = cap;
      }
    } else {
      memcpy(&r->samples[(size_t)(i - 1) * SF_N], mx, sizeof mx);
      for (int f = 0; f < SK_N; f++) r->k[f] += k[f];
    }
  }
  r->reps = reps;
  double *col = malloc((size_t)(reps > 0 ? reps : 1) * sizeof *col);
  if (!col) bench_fatal("out of host memory");
  for (int f = 0; f < SF_N; f++) {
    for (int i = 0; i < reps; i++) col[i] = r->samples[(size_t)i * SF_N + f];
    bench_stats(col, reps, &r->st[f]);
  }
  free(col);
}

/* Collective: whether rank 0's clock says the --time-limit has passed. */
static int setup_time_up(const setup_ctx_t *c, double limit) {
  int up = limit > 0 && bench_now() - c->node->t0 > limit;
  MPI_Bcast(&up, 1, MPI_INT, 0, MPI_COMM_WORLD);
  return up;
}

/* Distinct devices among the ranks (by UUID) and the most ranks on one. */
static void setup_count_gpus(setup_ctx_t *c) {
  const bench_node_t *n = c->node;
  c->gpus = c->per_gpu = 0;
  for (int r = 0; r < n->size; r++) {
    int seen = 0, same = 0;
    for (int q = 0; q < n->size; q++) {
      if (strcmp(n->all_uuids[q], n->all_uuids[r]) != 0) continue;
      same++;
      if (q < r) seen = 1;
    }
    if (!seen) c->gpus++;
    if (same > c->per_gpu) c->per_gpu = same;
  }
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  setup_opts_t o;
  setup_parse(argc, argv, &o);
  bench_node_t node;
  bench_node_init(&node, "vmmipc_setup");
  node.quiet = o.quiet;
  bench_raise_fd_limit();
  if (o.root >= node.size) bench_fatal("--root %d is not a rank (0..%d)", o.root, node.size - 1);

  setup_ctx_t c;
  memset(&c, 0, sizeof c);
  c.node = &node;
  c.root = o.root;
  c.reps = o.reps;
  c.reps_large = o.reps_large;
  c.min_reps = o.min_reps;
  c.budget = o.budget;
  c.time_limit = o.time_limit;
  c.tag = o.tag;
  c.first_map_cache = o.first_map_cache;
  c.mode_first = o.lib && o.first;
  c.mode_again = o.lib && o.again;
  setup_count_gpus(&c);
  vmmipc_config_t cfg = VMMIPC_CONFIG_INIT;
  cfg.map_cache_entries = o.first_map_cache;
  VCHECK(vmmipc_comm_create(MPI_COMM_WORLD, &cfg, &c.comm));
  BD_CHECK(bench_raw_granularity(node.device, &c.granularity));
  if (c.granularity < 2 * BENCH_MiB) c.granularity = 2 * BENCH_MiB;
  if (o.floor || o.probe_joint || o.probe_threads) {
    c.have_mesh = bench_fdmesh_create(MPI_COMM_WORLD, &c.mesh, c.mesh_skipped, sizeof c.mesh_skipped) == 0;
    bench_agree_skip(c.mesh_skipped, sizeof c.mesh_skipped);
  }
  bench_progress(&node, "%d ranks on %d GPU%s (at most %d on one)", node.size, c.gpus, c.gpus == 1 ? "" : "s",
                 c.per_gpu);

  /* What the sweep measures: explicit points, or sizes x chunks. */
  size_t sizes[SETUP_MAX_POINTS];
  int nchunks[SETUP_MAX_POINTS], combos = 0;
  if (o.npoints) {
    for (int k = 0; k < o.npoints; k++) {
      sizes[combos] = o.pt_size[k];
      nchunks[combos++] = o.pt_chunks[k];
    }
  } else {
    for (size_t s = o.min_size; s <= o.max_size; s *= 2)
      for (int j = 0; j < o.nchunks && combos < SETUP_MAX_POINTS; j++) {
        sizes[combos] = s;
        nchunks[combos++] = o.chunks[j];
      }
  }
  int todo = 0, done = 0;
  for (int k = 0; k < combos; k++) todo += sizes[k] / (size_t)nchunks[k] >= c.granularity;

  /* The comm's first window (it makes the signal pool) and one agreement,
   * each on its own, before anything else is timed. */
  if (o.heap_only) combos = 0;
  if (!o.heap_only && (c.mode_first || c.mode_again)) {
    bench_progress(&node, "the comm's first window; a collective that moves nothing");
    setup_run_first_window(&c);
    setup_run_null(&c);
  }

  for (int k = 0; k < combos; k++) {
    int chunks = nchunks[k];
    size_t chunk = sizes[k] / (size_t)chunks / c.granularity * c.granularity;
    if (chunk < c.granularity) continue;
    if (setup_time_up(&c, o.time_limit)) {
      snprintf(c.incomplete, sizeof c.incomplete,
               "--time-limit %g s reached after %d of %d size x chunks combinations; the rest was not measured",
               o.time_limit, done, todo);
      bench_progress(&node, "%s", c.incomplete);
      break;
    }
    char sz[32], cz[32];
    bench_progress(&node, "%s x %d chunks of %s (%d/%d)", bench_size_str(sizes[k], sz, sizeof sz), chunks,
                   bench_size_str(chunk, cz, sizeof cz), ++done, todo);
    if (o.lib) setup_run_lib(&c, o.colls, chunk, chunks);
    if (o.floor) setup_run_floor(&c, o.colls, chunk, chunks);
    if (o.colls[SC_ALLGATHER] && o.probe_joint) setup_run_floor_probe(&c, "floor_joint", chunk, chunks);
    if (o.colls[SC_ALLGATHER] && o.probe_threads) setup_run_floor_probe(&c, "floor_threads", chunk, chunks);
    if (o.ipc && chunks == 1 && o.colls[SC_ALLGATHER]) setup_run_ipc(&c, chunk, 0);
    if (o.ipc_fresh && chunks == 1 && o.colls[SC_ALLGATHER]) setup_run_ipc(&c, chunk, 1);
  }

  if (o.heap) setup_run_heap(&c, o.reps, o.heap_windows, o.heap_json);
  int out_rc = 0;
  if (node.rank == 0 && !o.heap_only) {
    setup_goals(&c);
    setup_report_table(&c);
    if (o.json && setup_report_json(&c, o.json, argc, argv) != 0) out_rc = 1;
    if (o.csv && setup_report_csv(&c, o.csv) != 0) out_rc = 1;
  }
  if (c.have_mesh) bench_fdmesh_destroy(&c.mesh);
  VCHECK(vmmipc_comm_destroy(c.comm));
  for (int i = 0; i < c.nres; i++) free(c.res[i].samples);
  free(c.res);
  int rc = c.errors ? 1 : out_rc, any;
  MPI_Allreduce(&rc, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  bench_progress(&node, "done%s", c.errors ? " (with errors)" : "");
  bench_node_fini(&node);
  MPI_Finalize();
  return any;
}
