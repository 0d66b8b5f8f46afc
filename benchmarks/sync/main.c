/* vmmipc_sync: latency of stream-ordered window synchronisation
 * (vmmipc_win_signal/wait, 8-byte put + signal, vmmipc_win_barrier) and put +
 * signal bandwidth, next to its anchors (NCCL send/recv, cuStreamSynchronize
 * + MPI_Barrier), with the goals of issue 13 as ratios from the same run.
 * Run under mpirun with >= 2 ranks on one node; ranks may share a GPU. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/args.h"
#include "common/driver.h"
#include "sync/sync.h"

const char *const sy_mode_names[SY_NMODES] = {"queued", "issued", "host"};
const char *const sy_method_names[SY_NMETHODS] = {"vmmipc", "nccl", "host"};
sy_drv_t sy_drv;

typedef struct sy_opts {
  int iters, reps, warmup, quiet;
  size_t min_size, max_size;
  double gate_timeout, timeout, budget, time_limit;
  int min_reps;
  const char *parts, *methods, *modes, *json, *csv;
} sy_opts_t;

static void sy_usage(FILE *f) {
  fprintf(f,
          "usage: mpirun -np N vmmipc_sync [options]\n"
          "  --parts LIST      latency,barrier,bandwidth (default all)\n"
          "  --methods LIST    vmmipc,nccl,host (default all; nccl and host are the anchors)\n"
          "  --modes LIST      queued,issued (default both): queued holds each batch behind a gate until the\n"
          "                    host has enqueued it (GPU time alone); issued times the plain loop\n"
          "  --iters N         iterations per timed batch (default 100)\n"
          "  --reps N          timed batches; medians and p10/p90 are over these (default 30)\n"
          "  --warmup N        untimed iterations before each entry or size (default 10)\n"
          "  --min-size S      smallest bandwidth message (default 64)\n"
          "  --max-size S      largest bandwidth message (default 1M); sizes double\n"
          "  --gate-timeout S  seconds before the watchdog opens a held batch (default 2)\n"
          "  --budget S        at most about S seconds per latency entry and per bandwidth size: fewer reps when\n"
          "                    a batch is slow (never fewer than --min-reps, default 3); 0: no cap (default 2)\n"
          "  --time-limit S    once the run is S seconds old, what is left is skipped with that reason and the\n"
          "                    output is still written (default 0: no limit)\n"
          "  --timeout S       a batch that has not finished after S seconds ends the run (default 60)\n"
          "  --json FILE, --csv FILE, --quiet\n");
}

/* Whether word is in the comma-separated list (prefixes match). */
static int sy_has(const char *list, const char *word) {
  if (!list) return 1;
  char buf[256];
  snprintf(buf, sizeof buf, "%s", list);
  char *save = NULL;
  for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save))
    if (*t && strncmp(word, t, strlen(t)) == 0) return 1;
  return 0;
}

/* Every word of the list must name something known. */
static int sy_list_ok(const char *list, const char *const *known, int n) {
  if (!list) return 1;
  char buf[256];
  snprintf(buf, sizeof buf, "%s", list);
  char *save = NULL;
  int any = 0;
  for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    int ok = 0;
    for (int k = 0; k < n; k++) ok |= *t && strncmp(known[k], t, strlen(t)) == 0;
    if (!ok) return 0;
    any = 1;
  }
  return any;
}

static void sy_parse(int argc, char **argv, sy_opts_t *o) {
  memset(o, 0, sizeof *o);
  o->iters = 100;
  o->reps = 30;
  o->warmup = 10;
  o->min_size = 64;
  o->max_size = BENCH_MiB;
  o->gate_timeout = 2;
  o->timeout = 60;
  o->budget = 2;
  o->min_reps = 3;
  static const char *const parts[] = {"latency", "barrier", "bandwidth"};
  static const char *const methods[] = {"vmmipc", "nccl", "host"};
  static const char *const modes[] = {"queued", "issued"};
  for (int i = 1; i < argc; i++) {
    const char *v;
    int bad = 0;
    if ((v = bench_opt(argc, argv, &i, "iters")))
      bad = bench_parse_int(v, &o->iters) || o->iters < 1;
    else if ((v = bench_opt(argc, argv, &i, "reps")))
      bad = bench_parse_int(v, &o->reps) || o->reps < 1;
    else if ((v = bench_opt(argc, argv, &i, "warmup")))
      bad = bench_parse_int(v, &o->warmup) || o->warmup < 0;
    else if ((v = bench_opt(argc, argv, &i, "min-size")))
      bad = bench_parse_size(v, &o->min_size) || o->min_size == 0;
    else if ((v = bench_opt(argc, argv, &i, "max-size")))
      bad = bench_parse_size(v, &o->max_size) || o->max_size == 0;
    else if ((v = bench_opt(argc, argv, &i, "gate-timeout")))
      bad = bench_parse_double(v, &o->gate_timeout) || !(o->gate_timeout > 0);
    else if ((v = bench_opt(argc, argv, &i, "budget")))
      bad = bench_parse_double(v, &o->budget) || o->budget < 0;
    else if ((v = bench_opt(argc, argv, &i, "min-reps")))
      bad = bench_parse_int(v, &o->min_reps) || o->min_reps < 1;
    else if ((v = bench_opt(argc, argv, &i, "time-limit")))
      bad = bench_parse_double(v, &o->time_limit) || o->time_limit < 0;
    else if ((v = bench_opt(argc, argv, &i, "timeout")))
      bad = bench_parse_double(v, &o->timeout) || !(o->timeout > 0);
    else if ((v = bench_opt(argc, argv, &i, "parts")))
      bad = !sy_list_ok(o->parts = v, parts, 3);
    else if ((v = bench_opt(argc, argv, &i, "methods")))
      bad = !sy_list_ok(o->methods = v, methods, 3);
    else if ((v = bench_opt(argc, argv, &i, "modes")))
      bad = !sy_list_ok(o->modes = v, modes, 2);
    else if ((v = bench_opt(argc, argv, &i, "json")))
      o->json = v;
    else if ((v = bench_opt(argc, argv, &i, "csv")))
      o->csv = v;
    else if (!bench_common_flag(argv[i], &o->quiet, sy_usage))
      bench_opt_fail("vmmipc_sync", argv[i], 1, sy_usage);
    if (bad) bench_opt_fail("vmmipc_sync", argv[i], 0, sy_usage);
  }
  if (o->min_size > o->max_size) o->min_size = o->max_size;
}

static void sy_resolve(void) {
  void *fn;
#define SY_GET(name)                                                              \
  if (vmmipc_driver_proc(#name, 0, &fn) != VMMIPC_SUCCESS)                        \
    bench_fatal("the driver has no %s: %s", #name, vmmipc_last_error());          \
  memcpy(&sy_drv.name, &fn, sizeof fn);
  SY_GET(cuStreamWriteValue64)
  SY_GET(cuStreamWaitValue64)
  SY_GET(cuMemcpyDtoHAsync)
  SY_GET(cuCtxGetCurrent)
  SY_GET(cuCtxSetCurrent)
#undef SY_GET
  if (vmmipc_driver_proc("cuEventQuery", 0, &fn) == VMMIPC_SUCCESS) memcpy(&sy_drv.cuEventQuery, &fn, sizeof fn);
}

/* The window (8-byte put slot, then the bandwidth data), a private source
 * buffer, and every rank's window as mapped here. */
static void sy_setup(sy_ctx_t *c) {
  int n = c->node->size;
  void *p;
  size_t sz;
  c->winsize = SY_DATA_OFF + c->max_size;
  VCHECK(vmmipc_alloc(c->winsize, &c->winbuf));
  VCHECK(vmmipc_alloc(c->winsize, &c->srcbuf));
  VCHECK(vmmipc_buf_ptr(c->winbuf, &p, &sz));
  c->mine = (CUdeviceptr)(uintptr_t)p;
  VCHECK(vmmipc_buf_ptr(c->srcbuf, &p, &sz));
  c->src = (CUdeviceptr)(uintptr_t)p;
  vmmipc_access_t access = VMMIPC_ACCESS_DEFAULT;
  VCHECK(vmmipc_allgather_map(c->comm, c->winbuf, &access, &c->win));
  c->peer = calloc((size_t)n, sizeof *c->peer);
  c->tx = calloc((size_t)n, sizeof *c->tx);
  c->rx = calloc((size_t)n, sizeof *c->rx);
  if (!c->peer || !c->tx || !c->rx) bench_fatal("out of host memory");
  for (int r = 0; r < n; r++) {
    VCHECK(vmmipc_win_query(c->win, r, &p, &sz));
    if (!p || sz < c->winsize)
      bench_fatal("vmmipc_win_query(rank %d) gave %p with %zu bytes; expected %zu", r, p, sz, c->winsize);
    c->peer[r] = (CUdeviceptr)(uintptr_t)p;
  }
  BD_CHECK(bd.cuMemsetD8(c->src, 0x5a, c->winsize));
  BD_CHECK(bd.cuCtxSynchronize());

  /* Stream memory operations: the library's calls fail without them (and
   * so would the gate); the anchors still run. */
  int ok = 0;
  if (bd.cuDeviceGetAttribute(&ok, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, c->node->cudev) !=
      CUDA_SUCCESS)
    ok = 0;
  if (!ok)
    snprintf(c->vmm_skipped, sizeof c->vmm_skipped,
             "device %d has no 64-bit stream memory operations (CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS "
             "is 0): vmmipc_win_signal/wait/barrier are unsupported",
             c->node->device);
  bench_agree_skip(c->vmm_skipped, sizeof c->vmm_skipped);
}

static void sy_count_gpus(sy_ctx_t *c) {
  const bench_node_t *n = c->node;
  c->gpus = 0;
  for (int r = 0; r < n->size; r++) {
    int seen = 0;
    for (int q = 0; q < r; q++)
      if (strcmp(n->all_uuids[q], n->all_uuids[r]) == 0) seen = 1;
    if (!seen) c->gpus++;
  }
  c->shared_gpu = c->gpus < n->size;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  sy_opts_t o;
  sy_parse(argc, argv, &o);
  bench_node_t node;
  bench_node_init(&node, "vmmipc_sync");
  node.quiet = o.quiet;
  bench_raise_fd_limit();
  sy_resolve();

  static sy_ctx_t c;
  memset(&c, 0, sizeof c);
  c.node = &node;
  c.a = 0;
  c.b = 1;
  c.iters = o.iters;
  c.reps = o.reps;
  c.warmup = o.warmup;
  c.timeout_s = o.timeout;
  c.budget_s = o.budget;
  c.min_reps = o.min_reps;
  c.time_limit_s = o.time_limit;
  c.min_size = o.min_size;
  c.max_size = o.max_size;
  c.parts_latency = sy_has(o.parts, "latency");
  c.parts_barrier = sy_has(o.parts, "barrier");
  c.parts_bandwidth = sy_has(o.parts, "bandwidth");
  for (int m = 0; m < SY_NMETHODS; m++) c.methods[m] = sy_has(o.methods, sy_method_names[m]);
  c.modes[SY_QUEUED] = sy_has(o.modes, "queued");
  c.modes[SY_ISSUED] = sy_has(o.modes, "issued");
  c.modes[SY_HOST] = 1;
  sy_count_gpus(&c);

  vmmipc_config_t cfg = VMMIPC_CONFIG_INIT;
  VCHECK(vmmipc_comm_create(MPI_COMM_WORLD, &cfg, &c.comm));
  BD_CHECK(bd.cuStreamCreate(&c.stream, CU_STREAM_NON_BLOCKING));
  BD_CHECK(bd.cuEventCreate(&c.ev0, CU_EVENT_DEFAULT));
  BD_CHECK(bd.cuEventCreate(&c.ev1, CU_EVENT_DEFAULT));
  bench_progress(&node, "%d ranks on %d GPU%s; window of %zu bytes; setting up", node.size, c.gpus,
                 c.gpus == 1 ? "" : "s", SY_DATA_OFF + c.max_size);
  sy_setup(&c);
  sy_gate_init(&c, c.modes[SY_QUEUED], o.gate_timeout);
  if (c.methods[SY_NCCL]) {
    sy_nccl_init(&c);
    if (!c.nccl_skipped[0]) {
      /* NCCL connects peers on first use: keep that out of every batch. */
      MPI_Barrier(MPI_COMM_WORLD);
      if (node.rank == c.a || node.rank == c.b) {
        int p = node.rank == c.a ? c.b : c.a;
        if (node.rank == c.a) {
          sy_nccl_send(&c, c.src, c.max_size, p);
          sy_nccl_recv(&c, c.mine + SY_DATA_OFF, c.max_size, p);
        } else {
          sy_nccl_recv(&c, c.mine + SY_DATA_OFF, c.max_size, p);
          sy_nccl_send(&c, c.src, c.max_size, p);
        }
        sy_stream_wait(&c, "NCCL connection");
      }
    }
  } else {
    snprintf(c.nccl_skipped, sizeof c.nccl_skipped, "not selected (--methods)");
  }

  if (c.methods[SY_VMMIPC]) sy_check(&c);
  if (c.parts_latency || c.parts_barrier) sy_run_latency(&c);
  if (c.parts_bandwidth) sy_run_bandwidth(&c);
  sy_goals(&c);

  int out_rc = 0;
  if (node.rank == 0) {
    sy_report_table(&c);
    if (o.json && sy_report_json(&c, o.json, argc, argv) != 0) out_rc = 1;
    if (o.csv && sy_report_csv(&c, o.csv) != 0) out_rc = 1;
  }

  BD_CHECK(bd.cuStreamSynchronize(c.stream));
  MPI_Barrier(MPI_COMM_WORLD);
  sy_nccl_fini();
  sy_gate_fini(&c.gate);
  VCHECK(vmmipc_win_free(c.win));
  VCHECK(vmmipc_buf_free(c.winbuf));
  VCHECK(vmmipc_buf_free(c.srcbuf));
  for (int i = 0; i < c.nlat; i++) free(c.lat[i].samples);
  free(c.peer);
  free(c.tx);
  free(c.rx);
  bd.cuEventDestroy(c.ev0);
  bd.cuEventDestroy(c.ev1);
  bd.cuStreamDestroy(c.stream);
  VCHECK(vmmipc_comm_destroy(c.comm));
  int rc = c.errors ? 1 : out_rc, any;
  MPI_Allreduce(&rc, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  bench_progress(&node, "done%s", c.errors ? " (with data check failures)" : "");
  bench_node_fini(&node);
  MPI_Finalize();
  return any;
}
