/* vmmipc_setup output: tables on stdout, JSON and CSV files. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/args.h"
#include "common/driver.h"
#include "common/json_node.h"
#include "setup/setup.h"

static const setup_result_t *setup_floor_of(const setup_ctx_t *c, const setup_result_t *r) {
  for (int i = 0; i < c->nres; i++) {
    const setup_result_t *f = &c->res[i];
    if (f->coll == r->coll && f->size == r->size && f->chunks == r->chunks && strcmp(f->method, "floor") == 0 &&
        !f->skipped[0])
      return f;
  }
  return NULL;
}

static void setup_ms(double s) {
  if (isfinite(s))
    printf(" %8.3f", s * 1e3);
  else
    printf(" %8s", "-");
}

void setup_report_table(const setup_ctx_t *c) {
  const bench_node_t *n = c->node;
  printf("# vmmipc_setup (vmmipc %s): %d ranks on one node; root %d for bcast_map and scatter_map\n",
         vmmipc_version(), n->size, c->root);
  for (int r = 0; r < n->size; r++)
    printf("#   rank %d: device %d, %s, %s\n", r, n->all_devices[r], n->all_names[r], n->all_uuids[r]);
  printf("# driver: %s%s (version %d)\n", bd.path, bd.is_standin ? " [CPU stand-in]" : "", bd.driver_version);
  printf("# Times in ms. Each repetition takes the maximum over ranks; First is the first (cold) call,\n"
         "# Median/p10/p90 are over the repetitions after it; phases are medians; /chunk = Median / Chunks;\n"
         "# xFloor = Median / the floor's Median (floor: the same work with raw driver calls, no library).\n");
  for (int k = 0; k < SC_N; k++) {
    int any = 0;
    for (int i = 0; i < c->nres; i++) any |= c->res[i].coll == (setup_coll_t)k;
    if (!any) continue;
    printf("\n# %s\n", setup_coll_names[k]);
    printf("# %8s %6s %-11s %4s %8s %8s %8s %8s %8s %8s %8s %8s %8s %8s %8s %7s\n", "Size", "Chunks", "Method",
           "Reps", "First", "Median", "p10", "p90", "Export", "Transfer", "Import", "Map", "Access", "Agree",
           "/chunk", "xFloor");
    for (int i = 0; i < c->nres; i++) {
      const setup_result_t *r = &c->res[i];
      if (r->coll != (setup_coll_t)k) continue;
      char sz[32];
      printf("%10s %6d %-11s", bench_size_str(r->size, sz, sizeof sz), r->chunks, r->method);
      if (r->skipped[0] || r->error[0]) {
        printf(" %s: %s\n", r->skipped[0] ? "skipped" : "error", r->skipped[0] ? r->skipped : r->error);
        continue;
      }
      printf(" %4d", r->reps);
      setup_ms(r->first[SF_WALL]);
      setup_ms(r->st[SF_WALL].median);
      setup_ms(r->st[SF_WALL].p10);
      setup_ms(r->st[SF_WALL].p90);
      for (int f = SF_EXPORT; f <= SF_AGREE; f++) setup_ms(r->st[f].median);
      setup_ms(r->st[SF_WALL].median / r->chunks);
      const setup_result_t *fl = setup_floor_of(c, r);
      if (fl && fl->st[SF_WALL].median > 0)
        printf(" %7.2f\n", r->st[SF_WALL].median / fl->st[SF_WALL].median);
      else
        printf(" %7s\n", "-");
    }
  }
  fflush(stdout);
}

int setup_report_json(const setup_ctx_t *c, const char *path, int argc, char **argv) {
  FILE *f = fopen(path, "w");
  if (!f) {
    perror(path);
    return -1;
  }
  const bench_node_t *n = c->node;
  jw_t w;
  jw_init(&w, f);
  jw_obj(&w, NULL);
  bench_json_node(&w, n, "vmmipc_setup", argc, argv);
  jw_int(&w, "root", c->root);
  jw_obj(&w, "units");
  jw_str(&w, "times", "seconds; each repetition is the maximum over ranks");
  jw_str(&w, "first", "the first (cold) call of this size x chunks x collective x method");
  jw_str(&w, "stats", "over the repetitions after the first");
  jw_end_obj(&w);
  jw_obj(&w, "config");
  jw_int(&w, "reps", c->reps);
  jw_int(&w, "reps_large", c->reps_large);
  jw_num(&w, "budget_s", c->budget);
  jw_int(&w, "granularity", (long long)c->granularity);
  jw_end_obj(&w);
  jw_arr(&w, "results");
  for (int i = 0; i < c->nres; i++) {
    const setup_result_t *r = &c->res[i];
    jw_obj(&w, NULL);
    jw_str(&w, "coll", setup_coll_names[r->coll]);
    jw_str(&w, "method", r->method);
    jw_int(&w, "size", (long long)r->size);
    jw_int(&w, "chunks", r->chunks);
    jw_int(&w, "chunk_size", (long long)r->chunk);
    if (r->skipped[0]) {
      jw_str(&w, "skipped", r->skipped);
      jw_end_obj(&w);
      continue;
    }
    if (r->error[0]) jw_str(&w, "error", r->error);
    jw_int(&w, "reps", r->reps);
    jw_obj(&w, "first");
    for (int k = 0; k < SF_N; k++) jw_num(&w, setup_field_names[k], r->first[k]);
    jw_end_obj(&w);
    jw_obj(&w, "stats");
    for (int k = 0; k < SF_N; k++) {
      const bench_stats_t *s = &r->st[k];
      jw_obj(&w, setup_field_names[k]);
      jw_num(&w, "median", s->median);
      jw_num(&w, "p10", s->p10);
      jw_num(&w, "p90", s->p90);
      jw_num(&w, "min", s->min);
      jw_num(&w, "max", s->max);
      jw_num(&w, "mean", s->mean);
      jw_end_obj(&w);
    }
    jw_end_obj(&w);
    jw_arr(&w, "wall_samples");
    for (int k = 0; k < r->reps; k++) jw_num(&w, NULL, r->samples[(size_t)k * SF_N + SF_WALL]);
    jw_end_arr(&w);
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

static void setup_csv_num(FILE *f, double v) {
  fputc(',', f);
  if (isfinite(v)) fprintf(f, "%.9g", v);
}

int setup_report_csv(const setup_ctx_t *c, const char *path) {
  FILE *f = fopen(path, "w");
  if (!f) {
    perror(path);
    return -1;
  }
  fprintf(f, "coll,method,size,chunks,chunk_size,reps,field,first,median,p10,p90,min,max,mean,skipped\n");
  for (int i = 0; i < c->nres; i++) {
    const setup_result_t *r = &c->res[i];
    const char *why = r->skipped[0] ? r->skipped : r->error;
    for (int k = 0; k < SF_N; k++) {
      if (r->skipped[0] && k > 0) break;
      fprintf(f, "%s,%s,%zu,%d,%zu,%d,%s", setup_coll_names[r->coll], r->method, r->size, r->chunks, r->chunk, r->reps,
              setup_field_names[k]);
      const bench_stats_t *s = &r->st[k];
      setup_csv_num(f, r->first[k]);
      setup_csv_num(f, s->median);
      setup_csv_num(f, s->p10);
      setup_csv_num(f, s->p90);
      setup_csv_num(f, s->min);
      setup_csv_num(f, s->max);
      setup_csv_num(f, s->mean);
      fputc(',', f);
      if (why[0]) {
        fputc('"', f);
        for (const char *p = why; *p; p++) {
          if (*p == '"') fputc('"', f);
          fputc(*p, f);
        }
        fputc('"', f);
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
