/* vmmipc_bw output: OSU-style tables on stdout, JSON and CSV files. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "bw/bw.h"
#include "common/args.h"
#include "common/driver.h"
#include "common/json_node.h"

static const char *bw_engine_str(bw_engine_t e) {
  return e == BW_CE ? "ce" : e == BW_SM ? "sm" : e == BW_NCCL ? "nccl" : "mpi";
}
static const char *bw_op_str(bw_op_t o) { return o == BW_READ ? "read" : o == BW_WRITE ? "write" : "sendrecv"; }

/* Measured GB/s relative to the line rate, per direction (a bidirectional
 * figure sums two directions, so it is compared with twice the rate). */
static double bw_line_ratio(const bw_ctx_t *c, double gbps, int bidir) {
  if (!(c->line.gbps > 0) || !isfinite(gbps)) return NAN;
  return gbps / (c->line.gbps * (bidir ? 2 : 1));
}

static const bw_series_t *bw_find(const bw_series_t *s, int ns, const char *name) {
  for (int i = 0; i < ns; i++)
    if (strcmp(s[i].name, name) == 0) return &s[i];
  return NULL;
}

static double bw_at(const bw_series_t *s, size_t size) {
  if (!s) return NAN;
  for (int i = 0; i < s->npoints; i++)
    if (s->pts[i].size == size) return s->pts[i].gbps;
  return NAN;
}

static void bw_header(const bw_ctx_t *c) {
  const bench_node_t *n = c->node;
  printf("# vmmipc_bw (vmmipc %s): %d ranks on one node; sweeps between rank %d and rank %d\n", vmmipc_version(),
         n->size, c->a, c->b);
  for (int r = 0; r < n->size; r++)
    printf("#   rank %d: device %d, %s, %s\n", r, n->all_devices[r], n->all_names[r], n->all_uuids[r]);
  printf("# driver: %s%s (version %d)\n", bd.path, bd.is_standin ? " [CPU stand-in]" : "", bd.driver_version);
  if (c->line.gbps > 0)
    printf("# line rate: %.1f GB/s per direction (%s)\n", c->line.gbps, c->line.source);
  else
    printf("# line rate: %s\n", c->line.source);
  if (c->host_kind[0]) printf("# host-staged buffers: %s\n", c->host_kind);
  if (c->nccl_version[0]) printf("# NCCL %s\n", c->nccl_version);
  printf("# MB = 10^6 bytes, GB = 10^9 bytes; line%% = per-direction GB/s over the line rate (bidir: half the sum)\n");
}

static void bw_series_table(const bw_ctx_t *c, const bw_series_t *s) {
  printf("\n# %s: %s\n", s->name, s->desc);
  if (s->skipped[0]) {
    printf("# %s: skipped: %s\n", s->name, s->skipped);
    return;
  }
  if (s->error[0]) {
    printf("# %s: error: %s\n", s->name, s->error);
    return;
  }
  printf("# Size  Bandwidth (MB/s)         GB/s    line%%   iters\n");
  for (int i = 0; i < s->npoints; i++) {
    const bw_point_t *p = &s->pts[i];
    double r = bw_line_ratio(c, p->gbps, s->bidir);
    char lr[16] = "-";
    if (isfinite(r)) snprintf(lr, sizeof lr, "%.2f", 100 * r);
    printf("%-10zu %17.2f %12.3f %8s %7d\n", p->size, p->gbps * 1e3, p->gbps, lr, p->iters);
  }
}

static void bw_cell(double v) {
  if (isfinite(v))
    printf(" %10.2f", v);
  else
    printf(" %10s", "-");
}

static void bw_compare(const bw_ctx_t *c, const bw_series_t *s, int ns, int bidir) {
  const char *dir = bidir ? "bidir" : "uni";
  char n[8][64];
  const char *names[8] = {"vmmipc.ce.read", "raw_vmm.ce.read", "vmmipc.ce.write", "raw_vmm.ce.write",
                          "nccl.sendrecv", "vmmipc.sm.read", "vmmipc.sm.write", "legacy_ipc.ce.write"};
  const bw_series_t *p[8];
  int any = 0;
  for (int i = 0; i < 8; i++) {
    snprintf(n[i], sizeof n[i], "%s.%s", names[i], dir);
    p[i] = bw_find(s, ns, n[i]);
    if (p[i] && p[i]->npoints) any = 1;
  }
  if (!any || !p[0]) return;
  printf("\n# Comparison, %s (GB/s%s); r/raw, w/raw: vmmipc over raw driver VMM; /nccl: vmmipc over NCCL\n",
         bidir ? "both directions at once" : "one direction", bidir ? ", both directions summed" : "");
  printf("# %-8s %10s %10s %10s %10s %10s %10s %10s %10s %10s %10s\n", "Size", "ce.read", "raw.read", "r/raw",
         "ce.write", "raw.write", "w/raw", "nccl", "r/nccl", "w/nccl", "line%");
  for (int k = 0; k < p[0]->npoints; k++) {
    size_t size = p[0]->pts[k].size;
    if (size < 64 * BENCH_KiB) continue;
    double rd = bw_at(p[0], size), rr = bw_at(p[1], size), wr = bw_at(p[2], size), rw = bw_at(p[3], size);
    double nc = bw_at(p[4], size);
    double best = rd > wr ? rd : wr;
    char sz[32];
    printf("%-10s", bench_size_str(size, sz, sizeof sz));
    bw_cell(rd);
    bw_cell(rr);
    bw_cell(rd / rr);
    bw_cell(wr);
    bw_cell(rw);
    bw_cell(wr / rw);
    bw_cell(nc);
    bw_cell(rd / nc);
    bw_cell(wr / nc);
    bw_cell(100 * bw_line_ratio(c, best, bidir));
    printf("\n");
  }
  /* Why a column is empty. */
  for (int i = 0; i < 5; i++)
    if (p[i] && (p[i]->skipped[0] || p[i]->error[0]))
      printf("# %s: %s: %s\n", p[i]->name, p[i]->skipped[0] ? "skipped" : "error",
             p[i]->skipped[0] ? p[i]->skipped : p[i]->error);
    else if (!p[i] && i != 0)
      printf("# %s: not run (see --modes)\n", n[i]);
  if (!(c->line.gbps > 0)) printf("# line%%: %s\n", c->line.source);
}

static void bw_matrix_table(const bw_matrix_t *m) {
  char sz[32];
  printf("\n# Peer matrix %s at %s, GB/s (row = source rank, column = destination rank)\n", m->name,
         bench_size_str(m->size, sz, sizeof sz));
  if (m->skipped[0]) {
    printf("# %s: skipped: %s\n", m->name, m->skipped);
    return;
  }
  printf("#%5s", "");
  for (int j = 0; j < m->n; j++) printf(" %10d", j);
  printf("\n");
  for (int i = 0; i < m->n; i++) {
    printf("%6d", i);
    for (int j = 0; j < m->n; j++) bw_cell(m->gbps[i * m->n + j]);
    printf("\n");
  }
}

void bw_report_table(const bw_ctx_t *c, bw_series_t *s, int ns, bw_matrix_t *m, int nm, bw_tables_t which) {
  if (which == BW_TABLES_NONE) {
    bw_report_summary(c, s, ns, m, nm);
    return;
  }
  bw_header(c);
  if (which == BW_TABLES_ALL)
    for (int i = 0; i < ns; i++) bw_series_table(c, &s[i]);
  bw_compare(c, s, ns, 0);
  bw_compare(c, s, ns, 1);
  if (which == BW_TABLES_ALL)
    for (int i = 0; i < nm; i++) bw_matrix_table(&m[i]);
  fflush(stdout);
}

/* What ran and what was checked, without figures: for runs whose numbers
 * mean nothing (the CPU stand-in) but whose data checks do. */
void bw_report_summary(const bw_ctx_t *c, const bw_series_t *s, int ns, const bw_matrix_t *m, int nm) {
  const bench_node_t *n = c->node;
  printf("vmmipc_bw: %d ranks; driver %s%s; ranks %d and %d on %s and %s\n", n->size, bd.path,
         bd.is_standin ? " (CPU stand-in)" : "", c->a, c->b, n->all_uuids[c->a], n->all_uuids[c->b]);
  int failed = 0;
  for (int i = 0; i < ns; i++) {
    const bw_series_t *x = &s[i];
    char lo[32] = "", hi[32] = "";
    if (x->npoints) {
      bench_size_str(x->pts[0].size, lo, sizeof lo);
      bench_size_str(x->pts[x->npoints - 1].size, hi, sizeof hi);
    }
    if (x->error[0]) {
      failed = 1;
      printf("vmmipc_bw: %s: FAILED: %s\n", x->name, x->error);
    } else if (x->skipped[0]) {
      printf("vmmipc_bw: %s: skipped: %s\n", x->name, x->skipped);
    } else if (x->engine == BW_CE || x->engine == BW_SM) {
      char chk[32];
      printf("vmmipc_bw: %s: %s copied each way and checked byte for byte: ok; then ran at %d sizes, %s to %s\n",
             x->name, bench_size_str(c->check_size, chk, sizeof chk), x->npoints, lo, hi);
    } else {
      printf("vmmipc_bw: %s: ran at %d sizes, %s to %s\n", x->name, x->npoints, lo, hi);
    }
  }
  for (int i = 0; i < nm; i++) {
    char sz[32];
    if (m[i].skipped[0])
      printf("vmmipc_bw: peer matrix %s: skipped: %s\n", m[i].name, m[i].skipped);
    else
      printf("vmmipc_bw: peer matrix %s: every ordered pair of %d ranks ran at %s\n", m[i].name, m[i].n,
             bench_size_str(m[i].size, sz, sizeof sz));
  }
  printf("vmmipc_bw: %s\n", failed || c->errors ? "some data checks FAILED" : "every data check passed");
  fflush(stdout);
}

int bw_report_json(const bw_ctx_t *c, const char *path, bw_series_t *s, int ns, bw_matrix_t *m, int nm, int argc,
                   char **argv) {
  FILE *f = fopen(path, "w");
  if (!f) {
    perror(path);
    return -1;
  }
  const bench_node_t *n = c->node;
  jw_t w;
  jw_init(&w, f);
  jw_obj(&w, NULL);
  bench_json_node(&w, n, "vmmipc_bw", argc, argv);
  jw_arr(&w, "pair");
  jw_int(&w, NULL, c->a);
  jw_int(&w, NULL, c->b);
  jw_end_arr(&w);
  jw_obj(&w, "units");
  jw_str(&w, "size", "bytes");
  jw_str(&w, "gbps", "GB/s, 1e9 bytes per second; bidirectional figures sum both directions");
  jw_str(&w, "mbps", "MB/s, 1e6 bytes per second");
  jw_str(&w, "seconds", "all timed iterations, slowest active rank");
  jw_end_obj(&w);
  jw_obj(&w, "line_rate");
  if (c->line.gbps > 0) jw_num(&w, "gbps", c->line.gbps); else jw_null(&w, "gbps");
  jw_int(&w, "nvlink_gen", c->line.nvlink_gen);
  jw_int(&w, "links", c->line.links);
  jw_num(&w, "per_link_gbps", c->line.per_link_gbps);
  jw_num(&w, "smi_link_gbps", c->line.smi_link_gbps);
  jw_str(&w, "source", c->line.source);
  jw_end_obj(&w);
  jw_str(&w, "host_staging", c->host_kind[0] ? c->host_kind : NULL);
  jw_str(&w, "nccl_version", c->nccl_version[0] ? c->nccl_version : NULL);
  jw_obj(&w, "config");
  jw_int(&w, "min_size", (long long)c->min_size);
  jw_int(&w, "max_size", (long long)c->max_size);
  jw_int(&w, "buffer_size", (long long)c->bufsize);
  jw_int(&w, "matrix_size", (long long)c->matrix_size);
  jw_int(&w, "check_size", (long long)c->check_size);
  if (c->iters_override) jw_int(&w, "iters", c->iters_override); else jw_null(&w, "iters");
  if (c->warmup_override) jw_int(&w, "warmup", c->warmup_override); else jw_null(&w, "warmup");
  jw_end_obj(&w);
  jw_arr(&w, "series");
  for (int i = 0; i < ns; i++) {
    const bw_series_t *x = &s[i];
    jw_obj(&w, NULL);
    jw_str(&w, "name", x->name);
    jw_str(&w, "method", x->method);
    jw_str(&w, "engine", bw_engine_str(x->engine));
    jw_str(&w, "op", bw_op_str(x->op));
    jw_str(&w, "direction", x->bidir ? "bidir" : "uni");
    jw_str(&w, "description", x->desc);
    if (x->skipped[0]) jw_str(&w, "skipped", x->skipped);
    if (x->error[0]) jw_str(&w, "error", x->error);
    jw_arr(&w, "points");
    for (int k = 0; k < x->npoints; k++) {
      const bw_point_t *p = &x->pts[k];
      jw_obj(&w, NULL);
      jw_int(&w, "size", (long long)p->size);
      jw_int(&w, "warmup", p->warmup);
      jw_int(&w, "iters", p->iters);
      jw_num(&w, "seconds", p->seconds);
      jw_num(&w, "gbps", p->gbps);
      jw_num(&w, "mbps", p->gbps * 1e3);
      jw_num(&w, "line_ratio", bw_line_ratio(c, p->gbps, x->bidir));
      jw_end_obj(&w);
    }
    jw_end_arr(&w);
    jw_end_obj(&w);
  }
  jw_end_arr(&w);
  jw_arr(&w, "matrices");
  for (int i = 0; i < nm; i++) {
    jw_obj(&w, NULL);
    jw_str(&w, "name", m[i].name);
    jw_int(&w, "size", (long long)m[i].size);
    jw_str(&w, "rows", "source rank");
    jw_str(&w, "cols", "destination rank");
    if (m[i].skipped[0]) {
      jw_str(&w, "skipped", m[i].skipped);
    } else {
      jw_int(&w, "warmup", m[i].warmup);
      jw_int(&w, "iters", m[i].iters);
      jw_arr(&w, "gbps");
      for (int r = 0; r < m[i].n; r++) {
        jw_arr(&w, NULL);
        for (int col = 0; col < m[i].n; col++) jw_num(&w, NULL, m[i].gbps[r * m[i].n + col]);
        jw_end_arr(&w);
      }
      jw_end_arr(&w);
    }
    jw_end_obj(&w);
  }
  jw_end_arr(&w);
  jw_end_obj(&w);
  int bad = ferror(f);
  if (fclose(f) != 0 || bad) {
    perror(path);
    return -1;
  }
  return 0;
}

static void bw_csv_text(FILE *f, const char *t) {
  fputc('"', f);
  for (; *t; t++) {
    if (*t == '"') fputc('"', f);
    fputc(*t, f);
  }
  fputc('"', f);
}

static void bw_csv_num(FILE *f, double v) {
  if (isfinite(v)) fprintf(f, "%.9g", v);
}

int bw_report_csv(const bw_ctx_t *c, const char *path, bw_series_t *s, int ns, bw_matrix_t *m, int nm) {
  FILE *f = fopen(path, "w");
  if (!f) {
    perror(path);
    return -1;
  }
  fprintf(f, "series,method,engine,op,direction,size,src,dst,warmup,iters,seconds,gbps,mbps,line_ratio,skipped\n");
  for (int i = 0; i < ns; i++) {
    const bw_series_t *x = &s[i];
    const char *pre = x->bidir ? "bidir" : "uni";
    if (x->skipped[0] || x->error[0]) {
      fprintf(f, "%s,%s,%s,%s,%s,,%d,%d,,,,,,,", x->name, x->method, bw_engine_str(x->engine), bw_op_str(x->op), pre,
              c->a, c->b);
      bw_csv_text(f, x->skipped[0] ? x->skipped : x->error);
      fputc('\n', f);
      continue;
    }
    for (int k = 0; k < x->npoints; k++) {
      const bw_point_t *p = &x->pts[k];
      fprintf(f, "%s,%s,%s,%s,%s,%zu,%d,%d,%d,%d,", x->name, x->method, bw_engine_str(x->engine), bw_op_str(x->op),
              pre, p->size, c->a, c->b, p->warmup, p->iters);
      bw_csv_num(f, p->seconds);
      fputc(',', f);
      bw_csv_num(f, p->gbps);
      fputc(',', f);
      bw_csv_num(f, p->gbps * 1e3);
      fputc(',', f);
      bw_csv_num(f, bw_line_ratio(c, p->gbps, x->bidir));
      fputs(",\n", f);
    }
  }
  for (int i = 0; i < nm; i++) {
    const bw_series_t *x = m[i].like;
    for (int r = 0; r < m[i].n; r++)
      for (int col = 0; col < m[i].n; col++) {
        if (r == col && !m[i].skipped[0]) continue;
        if (m[i].skipped[0] && (r != 0 || col != 1)) continue;
        fprintf(f, "matrix.%s,%s,%s,%s,uni,%zu,%d,%d,", m[i].name, x->method, bw_engine_str(x->engine),
                bw_op_str(x->op), m[i].size, r, col);
        if (m[i].skipped[0]) {
          fputs(",,,,,,", f);
          bw_csv_text(f, m[i].skipped);
        } else {
          double g = m[i].gbps[r * m[i].n + col];
          fprintf(f, "%d,%d,,", m[i].warmup, m[i].iters);
          bw_csv_num(f, g);
          fputc(',', f);
          bw_csv_num(f, g * 1e3);
          fputc(',', f);
          bw_csv_num(f, bw_line_ratio(c, g, 0));
          fputc(',', f);
        }
        fputc('\n', f);
      }
  }
  int bad = ferror(f);
  if (fclose(f) != 0 || bad) {
    perror(path);
    return -1;
  }
  return 0;
}
