/* vmmipc_sync output: the goals (ratios from this run), a table on stdout,
 * JSON and CSV files. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/args.h"
#include "common/driver.h"
#include "common/json_node.h"
#include "sync/sync.h"

static const sy_lat_t *sy_find_lat(const sy_ctx_t *c, const char *name, sy_mode_t mode) {
  for (int i = 0; i < c->nlat; i++)
    if (strcmp(c->lat[i].name, name) == 0 && c->lat[i].mode == mode) return &c->lat[i];
  return NULL;
}

static int sy_measured(const sy_lat_t *l) { return l && !l->skipped[0] && !l->error[0] && l->st.n > 0; }

/* Why an entry has no median, for an n/a goal. */
static void sy_missing(const sy_lat_t *l, const char *name, sy_mode_t mode, char *out, size_t len) {
  if (!l)
    snprintf(out, len, "%s (%s) was not run", name, sy_mode_names[mode]);
  else if (l->skipped[0])
    snprintf(out, len, "%s (%s) skipped: %s", name, sy_mode_names[mode], l->skipped);
  else if (l->error[0])
    snprintf(out, len, "%s (%s): %s", name, sy_mode_names[mode], l->error);
  else
    snprintf(out, len, "%s (%s) has no samples", name, sy_mode_names[mode]);
}

/* Issue 13's goals: ratio = anchor median / vmmipc median, one run. The
 * queued mode is primary (GPU time with the host ahead, as in a pipeline);
 * the issued mode (enqueue cost included) is reported beside it. */
void sy_goals(sy_ctx_t *c) {
  static const struct {
    const char *id, *text, *subject, *anchor;
    int anchor_host;
    double target;
  } defs[4] = {
      {"barrier_vs_host", "stream barrier vs cuStreamSynchronize + MPI_Barrier", "vmmipc.barrier",
       "host.sync_barrier", 1, 5},
      {"put_signal_vs_host", "8-byte put + signal vs cuStreamSynchronize + MPI_Barrier", "vmmipc.put_signal",
       "host.sync_barrier", 1, 5},
      {"barrier_vs_nccl", "stream barrier vs NCCL send/recv of 8 bytes", "vmmipc.barrier", "nccl.sendrecv", 0, 3},
      {"put_signal_vs_nccl", "8-byte put + signal vs NCCL send/recv of 8 bytes", "vmmipc.put_signal",
       "nccl.sendrecv", 0, 3},
  };
  static const sy_mode_t modes[2] = {SY_QUEUED, SY_ISSUED};
  c->ngoals = 0;
  for (int k = 0; k < 2; k++)
    for (int i = 0; i < 4; i++) {
      sy_goal_t *g = &c->goals[c->ngoals++];
      memset(g, 0, sizeof *g);
      g->id = defs[i].id;
      g->text = defs[i].text;
      g->subject = defs[i].subject;
      g->anchor = defs[i].anchor;
      g->mode = modes[k];
      g->anchor_mode = defs[i].anchor_host ? SY_HOST : modes[k];
      g->primary = modes[k] == SY_QUEUED;
      g->target = defs[i].target;
      g->subject_s = g->anchor_s = g->ratio = NAN;
      const sy_lat_t *s = sy_find_lat(c, g->subject, g->mode), *a = sy_find_lat(c, g->anchor, g->anchor_mode);
      if (sy_measured(s)) g->subject_s = s->st.median;
      if (sy_measured(a)) g->anchor_s = a->st.median;
      if (!sy_measured(s))
        sy_missing(s, g->subject, g->mode, g->reason, sizeof g->reason);
      else if (!sy_measured(a))
        sy_missing(a, g->anchor, g->anchor_mode, g->reason, sizeof g->reason);
      if (g->reason[0] || !(g->subject_s > 0)) {
        g->verdict = "n/a";
        if (!g->reason[0]) snprintf(g->reason, sizeof g->reason, "%s has a zero median", g->subject);
        continue;
      }
      g->ratio = g->anchor_s / g->subject_s;
      g->verdict = g->ratio >= g->target ? "PASS" : "FAIL";
    }
}

static void sy_us(double s) {
  if (isfinite(s))
    printf(" %9.2f", s * 1e6);
  else
    printf(" %9s", "-");
}

static void sy_placement(const sy_ctx_t *c, char *buf, size_t len) {
  if (c->gpus == 1)
    snprintf(buf, len, "%d ranks on 1 GPU (all on device %d)", c->node->size, c->node->all_devices[0]);
  else
    snprintf(buf, len, "%d ranks on %d GPUs", c->node->size, c->gpus);
}

void sy_report_table(const sy_ctx_t *c) {
  const bench_node_t *n = c->node;
  char where[96];
  sy_placement(c, where, sizeof where);
  printf("# vmmipc_sync (vmmipc %s): %s; ping-pongs and the sweep between rank %d and rank %d\n", vmmipc_version(),
         where, c->a, c->b);
  for (int r = 0; r < n->size; r++)
    printf("#   rank %d: device %d, %s, %s\n", r, n->all_devices[r], n->all_names[r], n->all_uuids[r]);
  printf("# driver: %s (version %d)\n", bd.path, bd.driver_version);
  if (bd.is_standin)
    printf("# CPU STAND-IN: a functional run only; every time below is meaningless (streams are synchronous)\n");
  printf("# NCCL: %s\n", c->nccl_skipped[0] ? c->nccl_skipped : c->nccl_version);
  printf("# timing: %d timed batches of %d iterations (after %d warm-up iterations); median, p10, p90 over the\n"
         "#   batches of the batch time / iterations (ping-pongs: / 2 as well, i.e. half the round trip);\n"
         "#   the slowest rank's time counts\n",
         c->reps, c->iters, c->warmup);
  if (c->budget_s > 0)
    printf("#   (fewer batches, at least %d, where they would take more than %.3g s per entry or size)\n", c->min_reps,
           c->budget_s);
  printf("# modes: queued = the batch is enqueued behind a gate (cuStreamWaitValue64 on a flag the host sets once\n"
         "#   everything is enqueued) and timed with CUDA events: what the GPU pays when the host runs ahead;\n"
         "#   issued = the same loop timed with CUDA events as the host issues it (enqueue cost included);\n"
         "#   host = host clock (cuStreamSynchronize + MPI_Barrier)\n");
  if (!c->gate.on) printf("# queued mode off: %s\n", c->gate.why);
  if (c->shared_gpu)
    printf("# ranks share a GPU: signals and copies stay on it (no NVLink), and the GPU switches between the\n"
           "#   ranks' contexts; figures for the GPU pair need one GPU per rank\n");
  if (c->vmm_error[0]) printf("# ERROR: %s\n", c->vmm_error);

  printf("\n# Latency (us)\n");
  printf("# %-18s %-7s %-13s %9s %9s %9s %6s %5s  %s\n", "name", "mode", "what", "median", "p10", "p90", "iters",
         "reps", "timer");
  for (int i = 0; i < c->nlat; i++) {
    const sy_lat_t *l = &c->lat[i];
    printf("%-20s %-7s %-13s", l->name, sy_mode_names[l->mode], l->what);
    if (l->skipped[0] || l->error[0]) {
      printf(" %s: %s\n", l->skipped[0] ? "skipped" : "error", l->skipped[0] ? l->skipped : l->error);
      continue;
    }
    sy_us(l->st.median);
    sy_us(l->st.p10);
    sy_us(l->st.p90);
    printf(" %6d %5d  %s\n", l->iters, l->reps, l->timer);
  }
  for (int i = 0; i < c->nlat; i++)
    if (c->lat[i].note[0]) printf("# note: %s (%s): %s\n", c->lat[i].name, sy_mode_names[c->lat[i].mode], c->lat[i].note);
  for (int i = 0; i < c->nbw; i++)
    if (c->bw[i].note[0]) printf("# note: bandwidth %s (%s): %s\n", c->bw[i].name, sy_mode_names[c->bw[i].mode], c->bw[i].note);

  int any_points = 0;
  for (int i = 0; i < c->nbw; i++) any_points |= c->bw[i].npts > 0;
  if (c->nbw) {
    printf("\n# Bandwidth, %d messages back to back + 1 acknowledgement (GB/s = 10^9 bytes/s, median over %d "
           "batches)\n",
           c->iters, c->reps);
    for (int i = 0; i < c->nbw; i++) {
      const sy_bw_t *s = &c->bw[i];
      printf("# %s, %s: %s\n", s->name, sy_mode_names[s->mode], s->desc);
      if (s->skipped[0]) printf("#   skipped: %s\n", s->skipped);
      if (s->error[0]) printf("#   error: %s\n", s->error);
    }
    if (!any_points) printf("# (no bandwidth series ran)\n");
  }
  if (any_points) {
    printf("# %-8s", "Size");
    for (int i = 0; i < c->nbw; i++) {
      char h[64];
      snprintf(h, sizeof h, "%s.%s", c->bw[i].method == SY_VMMIPC ? "vmmipc" : "nccl", sy_mode_names[c->bw[i].mode]);
      printf(" %14s", h);
    }
    /* vmmipc over NCCL, per mode, where both ran. */
    for (int m = 0; m < 2; m++) printf(" %14s", m == 0 ? "x nccl.queued" : "x nccl.issued");
    printf("\n");
    size_t sizes[SY_MAX_SIZES];
    int ns = 0;
    for (size_t s = c->min_size; s <= c->max_size && ns < SY_MAX_SIZES; s *= 2) sizes[ns++] = s;
    for (int k = 0; k < ns; k++) {
      char sz[32];
      printf("%-10s", bench_size_str(sizes[k], sz, sizeof sz));
      double v[2][2] = {{NAN, NAN}, {NAN, NAN}}; /* [mode][method] */
      for (int i = 0; i < c->nbw; i++) {
        const sy_bw_t *s = &c->bw[i];
        double g = NAN;
        for (int j = 0; j < s->npts; j++)
          if (s->pts[j].size == sizes[k]) g = s->pts[j].gbps.median;
        if (isfinite(g))
          printf(" %14.3f", g);
        else
          printf(" %14s", "-");
        if (s->mode <= SY_ISSUED) v[s->mode][s->method == SY_VMMIPC ? 0 : 1] = g;
      }
      for (int m = 0; m < 2; m++) {
        double r = v[m][0] / v[m][1];
        if (isfinite(r))
          printf(" %14.2f", r);
        else
          printf(" %14s", "-");
      }
      printf("\n");
    }
  }

  printf("\n# Goals (issue 13): ratio = anchor median / vmmipc median, both from this run (one-way latencies for\n"
         "#   the put + signal and NCCL); the queued mode is primary, the issued mode is shown beside it\n");
  if (bd.is_standin) printf("# CPU STAND-IN: the verdicts below mean nothing\n");
  printf("# %-7s %-7s %-56s %8s %7s  %s\n", "verdict", "mode", "goal", "ratio", "target", "anchor / vmmipc (us)");
  for (int i = 0; i < c->ngoals; i++) {
    const sy_goal_t *g = &c->goals[i];
    printf("%-9s %-7s %-56s", g->verdict, sy_mode_names[g->mode], g->text);
    if (isfinite(g->ratio))
      printf(" %7.2fx %5s%.0fx  %.2f / %.2f\n", g->ratio, ">=", g->target, g->anchor_s * 1e6, g->subject_s * 1e6);
    else
      printf(" %8s %5s%.0fx  %s\n", "-", ">=", g->target, g->reason);
  }
  fflush(stdout);
}

static void sy_stats_json(jw_t *w, const char *key, const bench_stats_t *s) {
  jw_obj(w, key);
  jw_num(w, "median", s->median);
  jw_num(w, "p10", s->p10);
  jw_num(w, "p90", s->p90);
  jw_num(w, "min", s->min);
  jw_num(w, "max", s->max);
  jw_num(w, "mean", s->mean);
  jw_end_obj(w);
}

int sy_report_json(const sy_ctx_t *c, const char *path, int argc, char **argv) {
  FILE *f = fopen(path, "w");
  if (!f) {
    perror(path);
    return -1;
  }
  const bench_node_t *n = c->node;
  jw_t w;
  jw_init(&w, f);
  jw_obj(&w, NULL);
  bench_json_node(&w, n, "vmmipc_sync", argc, argv);
  char where[96];
  sy_placement(c, where, sizeof where);
  jw_int(&w, "gpus", c->gpus);
  jw_str(&w, "placement", where);
  jw_bool(&w, "standin", bd.is_standin);
  if (bd.is_standin) jw_str(&w, "warning", "CPU stand-in: a functional run; the times are meaningless");
  jw_arr(&w, "pair");
  jw_int(&w, NULL, c->a);
  jw_int(&w, NULL, c->b);
  jw_end_arr(&w);
  jw_str(&w, "nccl_version", c->nccl_version[0] ? c->nccl_version : NULL);
  if (c->nccl_skipped[0]) jw_str(&w, "nccl_skipped", c->nccl_skipped);
  jw_obj(&w, "units");
  jw_str(&w, "times", "seconds per operation: batch time / iterations (ping-pongs: / 2, half the round trip); "
                      "each batch is the slowest active rank's");
  jw_str(&w, "gbps", "GB/s, 1e9 bytes per second: size x iterations / batch time (to the acknowledgement)");
  jw_str(&w, "stats", "over the timed batches (reps)");
  jw_end_obj(&w);
  jw_obj(&w, "modes");
  jw_str(&w, "queued", "batch enqueued behind a gate (cuStreamWaitValue64 on a flag the host sets when all is "
                       "enqueued), timed with CUDA events: GPU time with the host ahead");
  jw_str(&w, "issued", "the plain loop, timed with CUDA events as the host issues it (enqueue cost included)");
  jw_str(&w, "host", "host clock around the loop");
  jw_end_obj(&w);
  jw_obj(&w, "config");
  jw_int(&w, "iters", c->iters);
  jw_int(&w, "reps", c->reps);
  jw_int(&w, "warmup", c->warmup);
  jw_int(&w, "min_size", (long long)c->min_size);
  jw_int(&w, "max_size", (long long)c->max_size);
  jw_int(&w, "window_size", (long long)c->winsize);
  jw_bool(&w, "queued", c->gate.on);
  if (!c->gate.on) jw_str(&w, "queued_off", c->gate.why);
  jw_num(&w, "gate_timeout_s", c->gate.timeout_s);
  jw_num(&w, "budget_s", c->budget_s);
  jw_int(&w, "min_reps", c->min_reps);
  jw_num(&w, "time_limit_s", c->time_limit_s);
  jw_num(&w, "timeout_s", c->timeout_s);
  jw_end_obj(&w);
  if (c->vmm_skipped[0]) jw_str(&w, "vmmipc_skipped", c->vmm_skipped);
  if (c->vmm_error[0]) jw_str(&w, "error", c->vmm_error);

  jw_arr(&w, "latency");
  for (int i = 0; i < c->nlat; i++) {
    const sy_lat_t *l = &c->lat[i];
    jw_obj(&w, NULL);
    jw_str(&w, "name", l->name);
    jw_str(&w, "method", sy_method_names[l->method]);
    jw_str(&w, "mode", sy_mode_names[l->mode]);
    jw_str(&w, "what", l->what);
    jw_str(&w, "timer", l->timer);
    jw_int(&w, "bytes", (long long)l->bytes);
    jw_str(&w, "description", l->desc);
    if (l->skipped[0]) jw_str(&w, "skipped", l->skipped);
    if (l->error[0]) jw_str(&w, "error", l->error);
    if (l->note[0]) jw_str(&w, "note", l->note);
    if (!l->skipped[0] && !l->error[0]) {
      jw_int(&w, "iters", l->iters);
      jw_int(&w, "reps", l->reps);
      jw_int(&w, "warmup", l->warmup);
      sy_stats_json(&w, "stats", &l->st);
      jw_arr(&w, "samples");
      for (int k = 0; k < l->reps; k++) jw_num(&w, NULL, l->samples[k]);
      jw_end_arr(&w);
    }
    jw_end_obj(&w);
  }
  jw_end_arr(&w);

  jw_arr(&w, "bandwidth");
  for (int i = 0; i < c->nbw; i++) {
    const sy_bw_t *s = &c->bw[i];
    jw_obj(&w, NULL);
    jw_str(&w, "name", s->name);
    jw_str(&w, "method", sy_method_names[s->method]);
    jw_str(&w, "mode", sy_mode_names[s->mode]);
    jw_str(&w, "description", s->desc);
    if (s->skipped[0]) jw_str(&w, "skipped", s->skipped);
    if (s->error[0]) jw_str(&w, "error", s->error);
    if (s->note[0]) jw_str(&w, "note", s->note);
    jw_arr(&w, "points");
    for (int k = 0; k < s->npts; k++) {
      const sy_bwpt_t *p = &s->pts[k];
      jw_obj(&w, NULL);
      jw_int(&w, "size", (long long)p->size);
      jw_int(&w, "iters", p->iters);
      jw_int(&w, "reps", p->reps);
      jw_num(&w, "seconds", p->seconds);
      jw_num(&w, "gbps", p->gbps.median);
      sy_stats_json(&w, "gbps_stats", &p->gbps);
      jw_end_obj(&w);
    }
    jw_end_arr(&w);
    jw_end_obj(&w);
  }
  jw_end_arr(&w);

  jw_arr(&w, "goals");
  for (int i = 0; i < c->ngoals; i++) {
    const sy_goal_t *g = &c->goals[i];
    jw_obj(&w, NULL);
    jw_str(&w, "id", g->id);
    jw_str(&w, "goal", g->text);
    jw_bool(&w, "primary", g->primary);
    jw_str(&w, "mode", sy_mode_names[g->mode]);
    jw_str(&w, "subject", g->subject);
    jw_str(&w, "anchor", g->anchor);
    jw_str(&w, "anchor_mode", sy_mode_names[g->anchor_mode]);
    jw_num(&w, "subject_s", g->subject_s);
    jw_num(&w, "anchor_s", g->anchor_s);
    jw_num(&w, "ratio", g->ratio);
    jw_num(&w, "target", g->target);
    jw_str(&w, "verdict", g->verdict);
    if (g->reason[0]) jw_str(&w, "reason", g->reason);
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

static void sy_csv_num(FILE *f, double v) {
  fputc(',', f);
  if (isfinite(v)) fprintf(f, "%.9g", v);
}

static void sy_csv_text(FILE *f, const char *t) {
  fputc(',', f);
  if (!t || !*t) return;
  fputc('"', f);
  for (; *t; t++) {
    if (*t == '"') fputc('"', f);
    fputc(*t, f);
  }
  fputc('"', f);
}

int sy_report_csv(const sy_ctx_t *c, const char *path) {
  FILE *f = fopen(path, "w");
  if (!f) {
    perror(path);
    return -1;
  }
  fprintf(f, "section,name,mode,what,timer,size,iters,reps,median_s,p10_s,p90_s,min_s,max_s,mean_s,gbps,gbps_p10,"
             "gbps_p90,skipped\n");
  for (int i = 0; i < c->nlat; i++) {
    const sy_lat_t *l = &c->lat[i];
    int ok = !l->skipped[0] && !l->error[0];
    fprintf(f, "latency,%s,%s,%s,%s,%zu,%d,%d", l->name, sy_mode_names[l->mode], l->what, l->timer, l->bytes,
            ok ? l->iters : 0, ok ? l->reps : 0);
    const bench_stats_t *s = &l->st;
    sy_csv_num(f, ok ? s->median : NAN);
    sy_csv_num(f, ok ? s->p10 : NAN);
    sy_csv_num(f, ok ? s->p90 : NAN);
    sy_csv_num(f, ok ? s->min : NAN);
    sy_csv_num(f, ok ? s->max : NAN);
    sy_csv_num(f, ok ? s->mean : NAN);
    fputs(",,,", f);
    sy_csv_text(f, l->skipped[0] ? l->skipped : l->error);
    fputc('\n', f);
  }
  for (int i = 0; i < c->nbw; i++) {
    const sy_bw_t *s = &c->bw[i];
    if (s->skipped[0] || s->error[0] || s->npts == 0) {
      fprintf(f, "bandwidth,%s,%s,bandwidth,cuda_events,,,,,,,,,,,,", s->name, sy_mode_names[s->mode]);
      sy_csv_text(f, s->skipped[0] ? s->skipped : s->error[0] ? s->error : "no points");
      fputc('\n', f);
      continue;
    }
    for (int k = 0; k < s->npts; k++) {
      const sy_bwpt_t *p = &s->pts[k];
      fprintf(f, "bandwidth,%s,%s,bandwidth,cuda_events,%zu,%d,%d", s->name, sy_mode_names[s->mode], p->size,
              p->iters, p->reps);
      sy_csv_num(f, p->seconds);
      fputs(",,,,,", f);
      sy_csv_num(f, p->gbps.median);
      sy_csv_num(f, p->gbps.p10);
      sy_csv_num(f, p->gbps.p90);
      fputs(",\n", f);
    }
  }
  int bad = ferror(f);
  if (fclose(f) != 0 || bad) {
    perror(path);
    return -1;
  }
  return 0;
}
