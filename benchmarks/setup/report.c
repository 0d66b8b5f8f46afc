/* vmmipc_setup output: tables on stdout, JSON and CSV files. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

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

static const char *setup_size_of(size_t n, char *buf, size_t len) { return bench_size_str(n, buf, len); }

/* "2 ranks on 2 GPUs" */
static void setup_placement(const setup_ctx_t *c, char *buf, size_t len) {
  snprintf(buf, len, "%d ranks on %d GPU%s", c->node->size, c->gpus, c->gpus == 1 ? "" : "s");
}

static void setup_goal_ratio(setup_goal_t *g, const setup_result_t *s, const setup_result_t *a, const char *sname,
                             const char *aname) {
  if (!s || !a) {
    snprintf(g->reason, sizeof g->reason, "no measured %s in this run", !s ? sname : aname);
    return;
  }
  g->subject_s = s->st[SF_WALL].median;
  g->anchor_s = a->st[SF_WALL].median;
}

/* Why an anchor row is missing: its skip reason when it was skipped. */
static void setup_goal_anchor_why(const setup_ctx_t *c, setup_goal_t *g, const char *method, size_t size, int chunks) {
  for (int i = 0; i < c->nres; i++) {
    const setup_result_t *r = &c->res[i];
    if (r->coll == SC_ALLGATHER && strcmp(r->method, method) == 0 && r->size == size && r->chunks == chunks &&
        r->skipped[0]) {
      snprintf(g->reason, sizeof g->reason, "%s skipped: %s", method, r->skipped);
      return;
    }
  }
}

double setup_again_anchor(const setup_ctx_t *c) {
  const setup_result_t *agree = setup_find(c, SC_NULL, SETUP_FIRST, 0, 0);
  return agree ? 1e-4 + agree->st[SF_AGREE].median : NAN;
}

void setup_goals(setup_ctx_t *c) {
  const size_t MiB2 = 2 * BENCH_MiB;
  int n = c->node->size;
  int pair = n == 2 && c->gpus == 2, one8 = n == 8 && c->gpus == 1;
  char where[64];
  setup_placement(c, where, sizeof where);
  c->ngoals = 0;
  for (int i = 0; i < SETUP_NGOALS; i++) {
    setup_goal_t *g = &c->goals[i];
    memset(g, 0, sizeof *g);
    g->subject_s = g->anchor_s = g->ratio = NAN;
  }
  setup_goal_t *g = &c->goals[c->ngoals++];
  g->id = "first_2m_vs_ipc";
  g->text = "2 ranks, 2 MiB x 1 chunk, first mapping vs legacy IPC";
  g->target = 1.0;
  setup_goal_ratio(g, setup_find(c, SC_ALLGATHER, SETUP_FIRST, MiB2, 1),
                   setup_find(c, SC_ALLGATHER, "legacy_ipc", MiB2, 1), "vmmipc 2 MiB x 1 chunk", "legacy_ipc 2 MiB");
  if (isnan(g->anchor_s)) setup_goal_anchor_why(c, g, "legacy_ipc", MiB2, 1);

  g = &c->goals[c->ngoals++];
  g->id = "again_vs_agree";
  g->text = "2 ranks, mapped again (cache hit), every collective x size x chunks, vs 0.1 ms + one agreement";
  g->target = 1.0;
  {
    const setup_result_t *worst = NULL;
    for (int i = 0; i < c->nres; i++) {
      const setup_result_t *r = &c->res[i];
      if (r->coll >= SC_NMAP || strcmp(r->method, SETUP_AGAIN) != 0 || r->skipped[0] || r->error[0] ||
          r->reps == 0)
        continue;
      if (!worst || r->st[SF_WALL].median > worst->st[SF_WALL].median) worst = r;
    }
    const setup_result_t *agree = setup_find(c, SC_NULL, SETUP_FIRST, 0, 0);
    if (!worst || !agree) {
      snprintf(g->reason, sizeof g->reason, "no measured %s in this run",
               !worst ? "vmmipc_again" : "allgather_desc(NULL)");
    } else {
      char sz[32];
      g->subject_s = worst->st[SF_WALL].median;
      g->anchor_s = setup_again_anchor(c);
      snprintf(g->note, sizeof g->note, "worst: %s %s x %d chunk%s", setup_coll_names[worst->coll],
               setup_size_of(worst->size, sz, sizeof sz), worst->chunks, worst->chunks == 1 ? "" : "s");
    }
  }

  g = &c->goals[c->ngoals++];
  g->id = "first_1g256_vs_floor";
  g->text = "2 ranks, 1 GiB x 256 chunks, first mapping vs the floor";
  g->target = 0.5;
  setup_goal_ratio(g, setup_find(c, SC_ALLGATHER, SETUP_FIRST, BENCH_GiB, 256),
                   setup_find(c, SC_ALLGATHER, "floor", BENCH_GiB, 256), "vmmipc 1 GiB x 256 chunks",
                   "floor 1 GiB x 256 chunks");

  g = &c->goals[c->ngoals++];
  g->id = "first_1g1_vs_floor";
  g->text = "2 ranks, 1 GiB x 1 chunk, first mapping vs the floor";
  g->target = 1.0;
  setup_goal_ratio(g, setup_find(c, SC_ALLGATHER, SETUP_FIRST, BENCH_GiB, 1),
                   setup_find(c, SC_ALLGATHER, "floor", BENCH_GiB, 1), "vmmipc 1 GiB x 1 chunk",
                   "floor 1 GiB x 1 chunk");

  g = &c->goals[c->ngoals++];
  g->id = "one_gpu_8_ranks_2m_vs_ipc";
  g->text = "one GPU, 8 ranks, 2 MiB x 1 chunk, first mapping vs legacy IPC";
  g->target = 1.0;
  setup_goal_ratio(g, setup_find(c, SC_ALLGATHER, SETUP_FIRST, MiB2, 1),
                   setup_find(c, SC_ALLGATHER, "legacy_ipc", MiB2, 1), "vmmipc 2 MiB x 1 chunk", "legacy_ipc 2 MiB");
  if (isnan(g->anchor_s)) setup_goal_anchor_why(c, g, "legacy_ipc", MiB2, 1);

  for (int i = 0; i < c->ngoals; i++) {
    g = &c->goals[i];
    int g5 = strcmp(g->id, "one_gpu_8_ranks_2m_vs_ipc") == 0, placed = g5 ? one8 : pair;
    if (!isnan(g->subject_s) && !isnan(g->anchor_s) && g->anchor_s > 0) g->ratio = g->subject_s / g->anchor_s;
    if (isnan(g->ratio)) {
      g->verdict = "n/a";
      if (!g->reason[0]) snprintf(g->reason, sizeof g->reason, "not measured in this run");
    } else if (!placed) {
      /* The ratio stays as information; the verdict belongs to the
       * placement the goal is about. */
      g->verdict = "n/a";
      snprintf(g->reason, sizeof g->reason, "the goal is about %s; this run: %s",
               g5 ? "8 ranks on one GPU" : "2 ranks on 2 GPUs", where);
    } else {
      g->verdict = g->ratio <= g->target ? "PASS" : "FAIL";
    }
  }
}

/* "93.8" (percent of imports served by the mapping cache), or "-" when
 * the library counted nothing (a build without the cache). */
static void setup_hits(const setup_result_t *r) {
  long long h = r->k[SK_HITS], m = r->k[SK_MISSES];
  if (!r->counted || h + m == 0)
    printf(" %5s", "-");
  else
    printf(" %5.1f", 100.0 * (double)h / (double)(h + m));
}

static void setup_phases_line(const char *label, const double *v) {
  printf("# %s: %.3f ms (export %.3f, transfer %.3f, import %.3f, map %.3f, access %.3f, agree %.3f)\n", label,
         v[SF_WALL] * 1e3, v[SF_EXPORT] * 1e3, v[SF_TRANSFER] * 1e3, v[SF_IMPORT] * 1e3, v[SF_MAP] * 1e3,
         v[SF_ACCESS] * 1e3, v[SF_AGREE] * 1e3);
}

void setup_report_table(const setup_ctx_t *c) {
  const bench_node_t *n = c->node;
  char where[64], sz[32];
  setup_placement(c, where, sizeof where);
  printf("# vmmipc_setup (vmmipc %s): %s of one node (at most %d on one GPU); root %d for bcast_map and "
         "scatter_map\n",
         vmmipc_version(), where, c->per_gpu, c->root);
  for (int r = 0; r < n->size; r++)
    printf("#   rank %d: device %d, %s, %s\n", r, n->all_devices[r], n->all_names[r], n->all_uuids[r]);
  printf("# driver: %s%s (version %d)\n", bd.path, bd.is_standin ? " [CPU stand-in]" : "", bd.driver_version);
  if (c->gpus < 2)
    printf("# one GPU: every rank maps peers on the same device; the two-GPU goals are left n/a\n");
  printf("# Times in ms. Each repetition takes the maximum over ranks; First is the first (cold) call,\n"
         "# Median/p10/p90 are over the repetitions after it; phases are medians; /chunk = Median / Chunks;\n"
         "# xFloor = Median / the floor's Median (floor: the same work with raw driver calls, no library).\n"
         "# vmmipc = first mapping: fresh buffers every repetition (mapping cache of that comm: %s);\n"
         "# vmmipc_again = the same buffers mapped again (default config; Hit%% = imports served by the\n"
         "# mapping cache, from vmmipc_comm_stats, '-' when the library counted none).\n",
         c->first_map_cache == 0 ? "off" : c->first_map_cache < 0 ? "library default" : "on");
  if (c->have_first_window)
    setup_phases_line("the comm's first window (makes its signal pool; not in any row below)", c->first_window);
  const setup_result_t *agree = setup_find(c, SC_NULL, SETUP_FIRST, 0, 0);
  if (agree)
    printf("# one agreement: allgather_desc(NULL), a collective that moves nothing: median %.3f ms, of which "
           "agree %.3f ms, transfer %.3f ms (%d reps)\n",
           agree->st[SF_WALL].median * 1e3, agree->st[SF_AGREE].median * 1e3, agree->st[SF_TRANSFER].median * 1e3,
           agree->reps);
  if (c->incomplete[0]) printf("# incomplete: %s\n", c->incomplete);
  for (int k = 0; k < SC_NMAP; k++) {
    int any = 0;
    for (int i = 0; i < c->nres; i++) any |= c->res[i].coll == (setup_coll_t)k;
    if (!any) continue;
    printf("\n# %s\n", setup_coll_names[k]);
    printf("# %8s %6s %-16s %4s %8s %8s %8s %8s %8s %8s %8s %8s %8s %8s %8s %7s %5s\n", "Size", "Chunks", "Method",
           "Reps", "First", "Median", "p10", "p90", "Export", "Transfer", "Import", "Map", "Access", "Agree",
           "/chunk", "xFloor", "Hit%");
    for (int i = 0; i < c->nres; i++) {
      const setup_result_t *r = &c->res[i];
      if (r->coll != (setup_coll_t)k) continue;
      printf("%10s %6d %-16s", bench_size_str(r->size, sz, sizeof sz), r->chunks, r->method);
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
        printf(" %7.2f", r->st[SF_WALL].median / fl->st[SF_WALL].median);
      else
        printf(" %7s", "-");
      setup_hits(r);
      printf("\n");
    }
  }
  double anchor = setup_again_anchor(c);
  int any_again = 0;
  for (int i = 0; i < c->nres; i++) any_again |= strcmp(c->res[i].method, SETUP_AGAIN) == 0;
  if (any_again) {
    printf("\n# Mapped again at every point (issue 21): ratio = vmmipc_again median / anchor, anchor = 0.1 ms + "
           "one agreement (agree phase of allgather_desc(NULL), this run) = ");
    if (isfinite(anchor))
      printf("%.3f ms; <= 1 meets the goal.\n", anchor * 1e3);
    else
      printf("- (not measured).\n");
    printf("# NoFd/call = chunk fds not sent because the importer held the mapping, summed over ranks, per call\n");
    printf("# %-14s %8s %6s %9s %7s %9s %6s\n", "coll", "Size", "Chunks", "again", "ratio", "NoFd/call", "Hit%");
    for (int i = 0; i < c->nres; i++) {
      const setup_result_t *r = &c->res[i];
      if (strcmp(r->method, SETUP_AGAIN) != 0 || r->skipped[0] || r->error[0] || r->reps == 0) continue;
      printf("  %-14s %8s %6d", setup_coll_names[r->coll], bench_size_str(r->size, sz, sizeof sz), r->chunks);
      setup_ms(r->st[SF_WALL].median);
      if (isfinite(anchor) && anchor > 0)
        printf(" %7.3f", r->st[SF_WALL].median / anchor);
      else
        printf(" %7s", "-");
      printf(" %9.1f", (double)r->k[SK_NOFDS] / r->reps);
      setup_hits(r);
      printf("\n");
    }
  }
  printf("\n# Goals of issue 11: ratio = vmmipc median / anchor median, this run; PASS when ratio <= target\n");
  printf("# %-7s %-82s %8s %6s  %s\n", "verdict", "goal", "ratio", "target", "vmmipc / anchor (ms)");
  for (int i = 0; i < c->ngoals; i++) {
    const setup_goal_t *g = &c->goals[i];
    printf("  %-7s %-82s", g->verdict, g->text);
    if (isnan(g->ratio))
      printf(" %8s %6.2f  %s\n", "-", g->target, g->reason);
    else
      printf(" %8.3f %6.2f  %.3f / %.3f%s%s%s%s\n", g->ratio, g->target, g->subject_s * 1e3, g->anchor_s * 1e3,
             g->note[0] ? "; " : "", g->note, g->reason[0] ? "; " : "", g->reason);
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
  char where[64];
  setup_placement(c, where, sizeof where);
  jw_str(&w, "tag", c->tag);
  jw_int(&w, "gpus", c->gpus);
  jw_int(&w, "ranks_per_gpu", c->per_gpu);
  jw_str(&w, "placement", where);
  jw_int(&w, "cpus", sysconf(_SC_NPROCESSORS_ONLN));
  jw_int(&w, "root", c->root);
  if (c->incomplete[0]) jw_str(&w, "incomplete", c->incomplete);
  jw_obj(&w, "units");
  jw_str(&w, "times", "seconds; each repetition is the maximum over ranks");
  jw_str(&w, "first", "the first (cold) call of this size x chunks x collective x method");
  jw_str(&w, "stats", "over the repetitions after the first");
  jw_str(&w, "cache", "vmmipc_comm_stats mapping-cache hits and misses, summed over ranks: first call, then the "
                      "repetitions after it");
  jw_end_obj(&w);
  jw_obj(&w, "methods");
  jw_str(&w, SETUP_FIRST, "first mapping: fresh buffers (vmmipc_alloc + vmmipc_grow, untimed) before every "
                          "repetition, so neither the export cache nor the mapping cache can help");
  jw_str(&w, SETUP_AGAIN, "mapped again: the same buffers every repetition, on a comm with the default config "
                          "(cache hits after the first call)");
  jw_str(&w, "floor", "the same work with raw driver calls and a minimal socket loop, no library");
  jw_str(&w, "legacy_ipc", "cuIpcGetMemHandle + MPI_Allgather + cuIpcOpenMemHandle of a cuMemAlloc buffer");
  jw_str(&w, "legacy_ipc_fresh", "legacy_ipc of a new cuMemAlloc buffer every repetition (made untimed)");
  jw_str(&w, "floor_joint", "the floor, but every peer's chunks mapped back to back in one reserved range and one "
                            "cuMemSetAccess over all of it");
  jw_str(&w, "floor_threads", "the floor, but a thread per peer receives, imports, maps and sets access");
  jw_end_obj(&w);
  if (c->have_first_window) {
    jw_obj(&w, "comm_first_window");
    jw_str(&w, "what", "the comm's first allgather_map (it also makes the comm's signal pool); untimed in every row");
    jw_int(&w, "size", (long long)c->first_window_size);
    jw_int(&w, "chunks", 1);
    for (int k = 0; k < SF_N; k++) jw_num(&w, setup_field_names[k], c->first_window[k]);
    jw_end_obj(&w);
  }
  jw_obj(&w, "config");
  jw_int(&w, "reps", c->reps);
  jw_int(&w, "reps_large", c->reps_large);
  jw_num(&w, "budget_s", c->budget);
  jw_num(&w, "time_limit_s", c->time_limit);
  jw_int(&w, "first_map_cache_entries", c->first_map_cache);
  jw_bool(&w, "first", c->mode_first);
  jw_bool(&w, "again", c->mode_again);
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
    if (strcmp(r->method, SETUP_AGAIN) == 0 && r->reps > 0) {
      double anchor = setup_again_anchor(c);
      jw_num(&w, "again_anchor_s", anchor);
      jw_num(&w, "again_ratio", anchor > 0 ? r->st[SF_WALL].median / anchor : NAN);
    }
    if (r->counted) {
      jw_obj(&w, "cache");
      jw_int(&w, "first_hits", r->first_k[SK_HITS]);
      jw_int(&w, "first_misses", r->first_k[SK_MISSES]);
      jw_int(&w, "hits", r->k[SK_HITS]);
      jw_int(&w, "misses", r->k[SK_MISSES]);
      jw_int(&w, "first_fds_not_sent", r->first_k[SK_NOFDS]);
      jw_int(&w, "fds_not_sent", r->k[SK_NOFDS]);
      jw_end_obj(&w);
    }
    jw_end_obj(&w);
  }
  jw_end_arr(&w);
  jw_arr(&w, "goals");
  for (int i = 0; i < c->ngoals; i++) {
    const setup_goal_t *g = &c->goals[i];
    jw_obj(&w, NULL);
    jw_str(&w, "id", g->id);
    jw_str(&w, "goal", g->text);
    jw_num(&w, "subject_s", g->subject_s);
    jw_num(&w, "anchor_s", g->anchor_s);
    jw_num(&w, "ratio", g->ratio);
    jw_str(&w, "compare", "<=");
    jw_num(&w, "target", g->target);
    jw_str(&w, "verdict", g->verdict);
    if (g->reason[0]) jw_str(&w, "reason", g->reason);
    if (g->note[0]) jw_str(&w, "note", g->note);
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
  fprintf(f, "coll,method,size,chunks,chunk_size,reps,field,first,median,p10,p90,min,max,mean,skipped,cache_hits,"
             "cache_misses\n");
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
      if (r->counted)
        fprintf(f, ",%lld,%lld\n", r->k[SK_HITS], r->k[SK_MISSES]);
      else
        fputs(",,\n", f);
    }
  }
  int bad = ferror(f);
  if (fclose(f) != 0 || bad) {
    perror(path);
    return -1;
  }
  return 0;
}
