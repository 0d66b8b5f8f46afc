/* vmmipc_bw: bandwidth through peer buffers mapped by vmmipc, next to its
 * anchors (raw driver VMM, legacy IPC, NCCL, host-staged MPI, line rate).
 * Run under mpirun with >= 2 ranks on one node, one GPU each. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bw/bw.h"
#include "common/args.h"
#include "common/driver.h"

typedef struct bw_opts {
  size_t min_size, max_size, matrix_size;
  int iters, warmup, matrix, quiet;
  bw_tables_t tables;
  double line_rate;
  const char *modes, *json, *csv;
} bw_opts_t;

static void bw_usage(FILE *f) {
  fprintf(f,
          "usage: mpirun -np N vmmipc_bw [options]\n"
          "  --max-size S      largest message (default 1G; K/M/G suffixes are binary)\n"
          "  --min-size S      smallest message (default 1)\n"
          "  --iters N         timed iterations at every size (default: 100 up to 1 MiB, 20 above)\n"
          "  --warmup N        warm-up iterations (default: 10 up to 1 MiB, 2 above; iters/10 with --iters)\n"
          "  --matrix-size S   size of the peer matrix (default min(256M, max-size))\n"
          "  --no-matrix       skip the peer matrix\n"
          "  --modes LIST      comma-separated prefixes of series names to run, e.g. vmmipc.ce,nccl\n"
          "                    (series: vmmipc.{ce,sm}.{read,write}.{uni,bidir}, raw_vmm.ce..., legacy_ipc.ce...,\n"
          "                    nccl.sendrecv.{uni,bidir}, host_staged.sendrecv.{uni,bidir})\n"
          "  --line-rate GBPS  NVLink line rate per direction instead of detecting it\n"
          "  --json FILE       write the results as JSON\n"
          "  --csv FILE        write the results as CSV\n"
          "  --tables WHICH    all (default), compare (the comparison tables only) or none (a summary of\n"
          "                    what ran and which data checks passed, without figures)\n"
          "  --quiet           no progress on stderr\n");
}

static void bw_parse(int argc, char **argv, bw_opts_t *o) {
  memset(o, 0, sizeof *o);
  o->min_size = 1;
  o->max_size = BENCH_GiB;
  o->matrix = 1;
  for (int i = 1; i < argc; i++) {
    const char *v;
    int bad = 0;
    if ((v = bench_opt(argc, argv, &i, "max-size")))
      bad = bench_parse_size(v, &o->max_size) || o->max_size == 0;
    else if ((v = bench_opt(argc, argv, &i, "min-size")))
      bad = bench_parse_size(v, &o->min_size) || o->min_size == 0;
    else if ((v = bench_opt(argc, argv, &i, "matrix-size")))
      bad = bench_parse_size(v, &o->matrix_size) || o->matrix_size == 0;
    else if ((v = bench_opt(argc, argv, &i, "iters")))
      bad = bench_parse_int(v, &o->iters) || o->iters < 1;
    else if ((v = bench_opt(argc, argv, &i, "warmup")))
      bad = bench_parse_int(v, &o->warmup) || o->warmup < 0;
    else if ((v = bench_opt(argc, argv, &i, "line-rate")))
      bad = bench_parse_double(v, &o->line_rate) || o->line_rate <= 0;
    else if ((v = bench_opt(argc, argv, &i, "modes")))
      o->modes = v;
    else if ((v = bench_opt(argc, argv, &i, "json")))
      o->json = v;
    else if ((v = bench_opt(argc, argv, &i, "csv")))
      o->csv = v;
    else if ((v = bench_opt(argc, argv, &i, "tables"))) {
      if (strcmp(v, "all") == 0)
        o->tables = BW_TABLES_ALL;
      else if (strcmp(v, "compare") == 0)
        o->tables = BW_TABLES_COMPARE;
      else if (strcmp(v, "none") == 0)
        o->tables = BW_TABLES_NONE;
      else
        bad = 1;
    }
    else if (bench_flag(argv[i], "no-matrix"))
      o->matrix = 0;
    else if (!bench_common_flag(argv[i], &o->quiet, bw_usage))
      bench_opt_fail("vmmipc_bw", argv[i], 1, bw_usage);
    if (bad) bench_opt_fail("vmmipc_bw", argv[i], 0, bw_usage);
  }
  if (o->min_size > o->max_size) o->min_size = o->max_size;
  if (o->matrix_size == 0) o->matrix_size = o->max_size < 256 * BENCH_MiB ? o->max_size : 256 * BENCH_MiB;
}

/* Whether a series name is selected by --modes (prefixes), or any series of
 * a method prefix when name is a prefix itself. */
static int bw_selected(const char *modes, const char *name) {
  if (!modes || !*modes) return 1;
  char buf[512];
  snprintf(buf, sizeof buf, "%s", modes);
  char *save = NULL;
  for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    size_t lt = strlen(t), ln = strlen(name);
    size_t k = lt < ln ? lt : ln;
    if (strncmp(t, name, k) == 0) return 1;
  }
  return 0;
}

static const char *bw_engine_name(bw_engine_t e) {
  return e == BW_CE ? "ce" : e == BW_SM ? "sm" : e == BW_NCCL ? "nccl" : "mpi";
}

static void bw_add(bw_series_t *all, int *ns, const bw_opts_t *o, const char *method, bw_engine_t e, bw_op_t op,
                   int bidir, bw_ptrs_t *ptrs, const char *skipped, int a, int b) {
  bw_series_t *s = &all[*ns];
  memset(s, 0, sizeof *s);
  s->method = method;
  s->engine = e;
  s->op = op;
  s->bidir = bidir;
  s->ptrs = ptrs;
  const char *dir = bidir ? "bidir" : "uni";
  if (e == BW_CE || e == BW_SM)
    snprintf(s->name, sizeof s->name, "%s.%s.%s.%s", method, bw_engine_name(e), op == BW_READ ? "read" : "write",
             dir);
  else
    snprintf(s->name, sizeof s->name, "%s.sendrecv.%s", method, dir);
  if (!bw_selected(o->modes, s->name)) return;
  const char *how = e == BW_CE   ? "copy engine (cuMemcpyDtoDAsync)"
                    : e == BW_SM ? "SM copy kernel (cuLaunchKernel)"
                    : e == BW_NCCL ? "ncclSend/ncclRecv"
                                   : "cuMemcpyDtoH + MPI_Send/MPI_Recv + cuMemcpyHtoD";
  const char *via = strcmp(method, "vmmipc") == 0    ? "mapped by vmmipc_allgather_map"
                    : strcmp(method, "raw_vmm") == 0 ? "mapped with raw driver VMM calls"
                                                     : "opened with cuIpcOpenMemHandle";
  if (e == BW_CE || e == BW_SM)
    snprintf(s->desc, sizeof s->desc, "%s: rank %d %s rank %d's buffer (%s)%s", how, a,
             op == BW_READ ? "reads" : "writes", b, via,
             bidir ? "; the peer does the same at once; bandwidth sums both directions" : "");
  else
    snprintf(s->desc, sizeof s->desc, "%s: rank %d to rank %d%s", how, a, b,
             bidir ? " and back at once; bandwidth sums both directions" : "");
  if (ptrs && ptrs->skipped[0]) skipped = ptrs->skipped;
  if (skipped && skipped[0]) snprintf(s->skipped, sizeof s->skipped, "%s", skipped);
  (*ns)++;
}

static void bw_point(bw_ctx_t *c, bw_series_t *s, bw_ptrs_t *lib, size_t size) {
  int w, it;
  bw_iters(c, s, size, &w, &it);
  bw_point_t pt;
  if (s->engine == BW_NCCL)
    bw_nccl_point(c, lib, s->bidir, size, w, it, &pt);
  else if (s->engine == BW_STAGED)
    bw_staged_point(c, lib, s->bidir, size, w, it, &pt);
  else
    bw_copy_point(c, s, s->bidir, c->a, c->b, size, w, it, &pt);
  if (s->npoints < BW_MAX_SIZES) s->pts[s->npoints++] = pt;
}

static void bw_run_matrix(bw_ctx_t *c, bw_series_t *s, bw_matrix_t *m) {
  int n = c->node->size;
  memset(m, 0, sizeof *m);
  snprintf(m->name, sizeof m->name, "%s.%s.%s", s->method, bw_engine_name(s->engine),
           s->op == BW_READ ? "read" : "write");
  m->like = s;
  m->size = c->matrix_size;
  m->n = n;
  m->gbps = malloc((size_t)n * n * sizeof *m->gbps);
  if (!m->gbps) bench_fatal("out of host memory");
  for (int i = 0; i < n * n; i++) m->gbps[i] = NAN;
  if (s->skipped[0] || s->error[0]) {
    snprintf(m->skipped, sizeof m->skipped, "%s", s->skipped[0] ? s->skipped : s->error);
    return;
  }
  bw_iters(c, s, m->size, &m->warmup, &m->iters);
  for (int src = 0; src < n; src++)
    for (int dst = 0; dst < n; dst++) {
      if (src == dst) continue;
      /* Data flows src -> dst: a write is issued by src, a read by dst. */
      int actor = s->op == BW_WRITE ? src : dst, peer = s->op == BW_WRITE ? dst : src;
      bw_point_t pt;
      bw_copy_point(c, s, 0, actor, peer, m->size, m->warmup, m->iters, &pt);
      m->gbps[src * n + dst] = pt.gbps;
    }
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  bw_opts_t o;
  bw_parse(argc, argv, &o);
  bench_node_t node;
  bench_node_init(&node, "vmmipc_bw");
  node.quiet = o.quiet;
  bench_raise_fd_limit();

  bw_ctx_t c;
  memset(&c, 0, sizeof c);
  c.node = &node;
  c.min_size = o.min_size;
  c.max_size = o.max_size;
  c.matrix_size = o.matrix_size;
  c.iters_override = o.iters;
  c.warmup_override = o.warmup;
  c.a = 0;
  c.b = 1;
  c.check_size = 64 * BENCH_KiB;
  c.bufsize = o.max_size;
  if (o.matrix && c.matrix_size > c.bufsize) c.bufsize = c.matrix_size;
  if (c.bufsize < c.check_size) c.bufsize = c.check_size;

  if (o.line_rate > 0)
    bench_linerate_override(o.line_rate, &c.line);
  else if (node.rank == 0 && strcmp(node.all_uuids[c.a], node.all_uuids[c.b]) == 0)
    /* Copies between two ranks on one GPU stay in its memory. */
    snprintf(c.line.source, sizeof c.line.source,
             "none: ranks %d and %d share one GPU (%s), so their copies cross no NVLink", c.a, c.b,
             node.all_uuids[c.a]);
  else if (node.rank == 0)
    bench_linerate_detect(node.device_name, node.uuid, &c.line);
  MPI_Bcast(&c.line, (int)sizeof c.line, MPI_BYTE, 0, MPI_COMM_WORLD);

  vmmipc_config_t cfg = VMMIPC_CONFIG_INIT;
  VCHECK(vmmipc_comm_create(MPI_COMM_WORLD, &cfg, &c.comm));
  BD_CHECK(bd.cuStreamCreate(&c.stream, CU_STREAM_NON_BLOCKING));
  BD_CHECK(bd.cuEventCreate(&c.ev0, CU_EVENT_DEFAULT));
  BD_CHECK(bd.cuEventCreate(&c.ev1, CU_EVENT_DEFAULT));

  bench_progress(&node, "%d ranks, buffers of %zu bytes; setting up", node.size, c.bufsize);
  bw_ptrs_t lib, raw, legacy;
  memset(&raw, 0, sizeof raw);
  memset(&legacy, 0, sizeof legacy);
  bw_ptrs_vmmipc(&c, &lib);
  if (bw_selected(o.modes, "raw_vmm")) bw_ptrs_raw(&c, &raw);
  if (bw_selected(o.modes, "legacy_ipc")) bw_ptrs_legacy(&c, &legacy);
  if (bw_selected(o.modes, "vmmipc.sm")) {
    bw_sm_init(&node, c.sm_skipped, sizeof c.sm_skipped);
    bench_agree_skip(c.sm_skipped, sizeof c.sm_skipped);
  }
  if (bw_selected(o.modes, "nccl")) bw_nccl_init(&c);
  if (bw_selected(o.modes, "host_staged")) bw_staged_init(&c);

  static bw_series_t series[32];
  int ns = 0;
  for (int bidir = 0; bidir < 2; bidir++) {
    for (int op = BW_READ; op <= BW_WRITE; op++) {
      bw_add(series, &ns, &o, "vmmipc", BW_CE, op, bidir, &lib, NULL, c.a, c.b);
      bw_add(series, &ns, &o, "vmmipc", BW_SM, op, bidir, &lib, c.sm_skipped, c.a, c.b);
      bw_add(series, &ns, &o, "raw_vmm", BW_CE, op, bidir, &raw, NULL, c.a, c.b);
      bw_add(series, &ns, &o, "legacy_ipc", BW_CE, op, bidir, &legacy, NULL, c.a, c.b);
    }
    bw_add(series, &ns, &o, "nccl", BW_NCCL, BW_SENDRECV, bidir, NULL, c.nccl_skipped, c.a, c.b);
    bw_add(series, &ns, &o, "host_staged", BW_STAGED, BW_SENDRECV, bidir, NULL, c.staged_skipped, c.a, c.b);
  }
  if (ns == 0) bench_fatal("--modes %s selects no series (see --help)", o.modes);

  for (int i = 0; i < ns; i++)
    if (!series[i].skipped[0] && (series[i].engine == BW_CE || series[i].engine == BW_SM))
      bw_copy_check(&c, &series[i]);

  size_t sizes[BW_MAX_SIZES];
  int nsizes = 0;
  for (size_t s = 1; s <= o.max_size && nsizes < BW_MAX_SIZES; s *= 2)
    if (s >= o.min_size) sizes[nsizes++] = s;
  for (int bidir = 0; bidir < 2; bidir++)
    for (int k = 0; k < nsizes; k++) {
      char sz[32];
      bench_progress(&node, "%s sweep: %s (%d/%d)", bidir ? "bidirectional" : "one-direction",
                     bench_size_str(sizes[k], sz, sizeof sz), k + 1, nsizes);
      for (int i = 0; i < ns; i++)
        if (series[i].bidir == bidir && !series[i].skipped[0] && !series[i].error[0])
          bw_point(&c, &series[i], &lib, sizes[k]);
    }

  static bw_matrix_t mats[8];
  int nm = 0;
  if (o.matrix)
    for (int i = 0; i < ns; i++)
      if (strcmp(series[i].method, "vmmipc") == 0 && !series[i].bidir && nm < 8) {
        bench_progress(&node, "peer matrix %s", series[i].name);
        bw_run_matrix(&c, &series[i], &mats[nm++]);
      }

  int out_rc = 0;
  if (node.rank == 0) {
    bw_report_table(&c, series, ns, mats, nm, o.tables);
    if (o.json && bw_report_json(&c, o.json, series, ns, mats, nm, argc, argv) != 0) out_rc = 1;
    if (o.csv && bw_report_csv(&c, o.csv, series, ns, mats, nm) != 0) out_rc = 1;
  }

  bw_staged_fini(&c);
  bw_nccl_fini(&c);
  bw_sm_fini();
  bw_ptrs_free(&c, &legacy);
  bw_ptrs_free(&c, &raw);
  bw_ptrs_free(&c, &lib);
  for (int i = 0; i < nm; i++) free(mats[i].gbps);
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
