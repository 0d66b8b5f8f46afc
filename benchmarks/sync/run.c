/* The measurements of vmmipc_sync: ping-pongs (signal/wait, 8-byte put +
 * signal, NCCL 8 bytes), barriers, the host round trip, and the bandwidth
 * sweep. Every protocol is written once per role, so that both ranks of a
 * pair make exactly matching signals and waits. */
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/args.h"
#include "common/driver.h"
#include "sync/sync.h"

/* ---- signals with running counters --------------------------------------- */

/* Slot values only grow (waits are GEQ), so each side counts what it has
 * signalled to and awaited from every rank over the whole run. */
static void sy_sig(sy_ctx_t *c, int to) { VCHECK(vmmipc_win_signal(c->win, to, ++c->tx[to], c->stream)); }
static void sy_wt(sy_ctx_t *c, int from) { VCHECK(vmmipc_win_wait(c->win, from, ++c->rx[from], c->stream)); }

static void sy_put(sy_ctx_t *c, int to, size_t off, size_t bytes) {
  BD_CHECK(bd.cuMemcpyDtoDAsync(c->peer[to] + off, c->src, bytes, c->stream));
}

/* ---- protocols ------------------------------------------------------------ */

/* One protocol: `body` issues n iterations of this rank's part on c->stream
 * (size: message bytes, for the sweeps); `align` issues one exchange that
 * leaves both ranks' streams running together, before the start event. */
typedef struct sy_proto {
  const char *name;
  int all_ranks; /* every rank takes part (barrier); else the pair only */
  double per_iter; /* operations timed per iteration: 2 for a round trip, 1 otherwise */
  void (*align)(sy_ctx_t *c, size_t size);
  void (*body)(sy_ctx_t *c, size_t size, int n);
} sy_proto_t;

static int sy_other(const sy_ctx_t *c) { return c->node->rank == c->a ? c->b : c->a; }

/* vmmipc_win_signal then vmmipc_win_wait, back and forth. */
static void pp_signal(sy_ctx_t *c, size_t size, int n) {
  (void)size;
  int p = sy_other(c);
  for (int i = 0; i < n; i++) {
    if (c->node->rank == c->a) {
      sy_sig(c, p);
      sy_wt(c, p);
    } else {
      sy_wt(c, p);
      sy_sig(c, p);
    }
  }
}
static void pp_signal_align(sy_ctx_t *c, size_t size) { pp_signal(c, size, 1); }

/* An 8-byte copy into the peer's window, then the signal; the peer waits
 * and answers the same way. */
static void pp_put(sy_ctx_t *c, size_t size, int n) {
  (void)size;
  int p = sy_other(c);
  for (int i = 0; i < n; i++) {
    if (c->node->rank == c->a) {
      sy_put(c, p, SY_PUT_OFF, 8);
      sy_sig(c, p);
      sy_wt(c, p);
    } else {
      sy_wt(c, p);
      sy_put(c, p, SY_PUT_OFF, 8);
      sy_sig(c, p);
    }
  }
}
static void pp_put_align(sy_ctx_t *c, size_t size) { pp_put(c, size, 1); }

static void pp_barrier(sy_ctx_t *c, size_t size, int n) {
  (void)size;
  for (int i = 0; i < n; i++) VCHECK(vmmipc_win_barrier(c->win, c->stream));
}
static void pp_barrier_align(sy_ctx_t *c, size_t size) { pp_barrier(c, size, 1); }

/* NCCL: 8 bytes from rank a's source into b's window and back. */
static void pp_nccl(sy_ctx_t *c, size_t size, int n) {
  (void)size;
  int p = sy_other(c);
  for (int i = 0; i < n; i++) {
    if (c->node->rank == c->a) {
      sy_nccl_send(c, c->src, 8, p);
      sy_nccl_recv(c, c->mine + SY_PUT_OFF, 8, p);
    } else {
      sy_nccl_recv(c, c->mine + SY_PUT_OFF, 8, p);
      sy_nccl_send(c, c->src, 8, p);
    }
  }
}
static void pp_nccl_align(sy_ctx_t *c, size_t size) { pp_nccl(c, size, 1); }

/* Bandwidth, OSU style: a sends n messages back to back, b waits for each
 * and acknowledges the last; a's time runs to the acknowledgement. */
static void bw_put(sy_ctx_t *c, size_t size, int n) {
  int p = sy_other(c);
  if (c->node->rank == c->a) {
    for (int i = 0; i < n; i++) {
      sy_put(c, p, SY_DATA_OFF, size);
      sy_sig(c, p);
    }
    sy_wt(c, p);
  } else {
    for (int i = 0; i < n; i++) sy_wt(c, p);
    sy_sig(c, p);
  }
}

static void bw_nccl(sy_ctx_t *c, size_t size, int n) {
  int p = sy_other(c);
  if (c->node->rank == c->a) {
    for (int i = 0; i < n; i++) sy_nccl_send(c, c->src, size, p);
    sy_nccl_recv(c, c->mine + SY_PUT_OFF, 8, p);
  } else {
    for (int i = 0; i < n; i++) sy_nccl_recv(c, c->mine + SY_DATA_OFF, size, p);
    sy_nccl_send(c, c->src, 8, p);
  }
}

static const sy_proto_t P_SIGNAL = {"signal ping-pong", 0, 2, pp_signal_align, pp_signal};
static const sy_proto_t P_PUT = {"put+signal ping-pong", 0, 2, pp_put_align, pp_put};
static const sy_proto_t P_BARRIER = {"barrier", 1, 1, pp_barrier_align, pp_barrier};
static const sy_proto_t P_NCCL = {"NCCL ping-pong", 0, 2, pp_nccl_align, pp_nccl};
static const sy_proto_t P_BW_PUT = {"put+signal stream", 0, 1, pp_signal_align, bw_put};
static const sy_proto_t P_BW_NCCL = {"NCCL stream", 0, 1, pp_nccl_align, bw_nccl};

/* ---- one batch -------------------------------------------------------------- */

/* Waits for the end of a batch, bounded: a signal that never arrives (a
 * library bug, a dead peer) ends the run with the counters instead of a
 * hang. Without cuEventQuery (the stand-in) it is cuEventSynchronize. */
static void sy_event_wait(sy_ctx_t *c, CUevent ev, const char *what, const char *mode) {
  if (!sy_drv.cuEventQuery) {
    BD_CHECK(bd.cuEventSynchronize(ev));
    return;
  }
  double t0 = bench_now();
  for (long polls = 0;; polls++) {
    CUresult rc = sy_drv.cuEventQuery(ev);
    if (rc == CUDA_SUCCESS) return;
    if (rc != CUDA_ERROR_NOT_READY) BD_CHECK(rc);
    if (bench_now() - t0 > c->timeout_s) {
      int p = sy_other(c);
      bench_fatal("%s (%s): the stream did not finish the batch within %.0f s; with rank %d this rank has "
                  "signalled %llu and awaits %llu; hint: a vmmipc_win_wait that is never satisfied, or a peer "
                  "that stopped",
                  what, mode, c->timeout_s, p, (unsigned long long)c->tx[p],
                  (unsigned long long)c->rx[p]);
    }
    if (polls < 1000) {
      sched_yield();
    } else {
      struct timespec ts = {0, 20000};
      nanosleep(&ts, NULL);
    }
  }
}

void sy_stream_wait(sy_ctx_t *c, const char *what) {
  BD_CHECK(bd.cuEventRecord(c->ev1, c->stream));
  sy_event_wait(c, c->ev1, what, "untimed");
}

/* Runs one batch of n iterations in `mode` (queued or issued) and returns
 * the slowest active rank's event time in seconds; *wall gets the slowest
 * rank's wall time of the whole batch (for the budget), *forced whether the
 * gate watchdog had to open a queued batch on any rank. Collective. */
static double sy_batch(sy_ctx_t *c, const sy_proto_t *p, sy_mode_t mode, size_t size, int n, double *wall,
                       int *forced) {
  int me = c->node->rank;
  int active = p->all_ranks || me == c->a || me == c->b;
  double secs = 0, t0 = bench_now();
  int mine_forced = 0;
  MPI_Barrier(MPI_COMM_WORLD);
  if (active) {
    if (mode == SY_QUEUED) sy_gate_close(&c->gate, c->stream);
    p->align(c, size);
    BD_CHECK(bd.cuEventRecord(c->ev0, c->stream));
    p->body(c, size, n);
    BD_CHECK(bd.cuEventRecord(c->ev1, c->stream));
    if (mode == SY_QUEUED) mine_forced = sy_gate_open(&c->gate);
    sy_event_wait(c, c->ev1, p->name, sy_mode_names[mode]);
    float ms = 0;
    BD_CHECK(bd.cuEventElapsedTime(&ms, c->ev0, c->ev1));
    secs = ms * 1e-3;
  }
  double in[3] = {secs, (double)mine_forced, bench_now() - t0}, out[3];
  MPI_Allreduce(in, out, 3, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  *forced = out[1] > 0;
  *wall = out[2];
  return out[0];
}

/* Whether the run is past --time-limit (the same answer on every rank);
 * sticky, and the reason goes to c->time_up. Collective. */
static int sy_out_of_time(sy_ctx_t *c) {
  if (c->time_up[0]) return 1;
  if (!(c->time_limit_s > 0)) return 0;
  double el = bench_now() - c->node->t0, mx = 0;
  MPI_Allreduce(&el, &mx, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  if (mx < c->time_limit_s) return 0;
  snprintf(c->time_up, sizeof c->time_up, "the time limit (--time-limit %.3g s) was reached before this ran",
           c->time_limit_s);
  return 1;
}

/* How many reps fit the budget, from the first batch's wall time. */
static int sy_fit(const sy_ctx_t *c, int reps, double first_wall) {
  if (!(c->budget_s > 0) || !(first_wall > 0)) return reps;
  double fit = c->budget_s / first_wall;
  int cap = fit >= reps ? reps : (int)fit;
  if (cap < c->min_reps) cap = c->min_reps < reps ? c->min_reps : reps;
  return cap;
}

/* Untimed warm-up in the issued mode; waits for the stream. Collective. */
static void sy_warm(sy_ctx_t *c, const sy_proto_t *p, size_t size, int n) {
  int me = c->node->rank;
  MPI_Barrier(MPI_COMM_WORLD);
  if (n > 0 && (p->all_ranks || me == c->a || me == c->b)) {
    p->align(c, size);
    p->body(c, size, n);
    sy_stream_wait(c, p->name);
  }
}

static const char *sy_gate_reason(const sy_ctx_t *c, sy_method_t m) {
  if (!c->gate.on) return c->gate.why;
  if (c->gate_broken[m][0]) return c->gate_broken[m];
  return NULL;
}

/* Records that the watchdog fired: queued timing is not possible for m. */
static void sy_gate_fired(sy_ctx_t *c, sy_method_t m, const char *where) {
  snprintf(c->gate_broken[m], sizeof c->gate_broken[m],
           "the gate watchdog opened a held batch (%s) after %.1f s: the host blocked while the stream was held "
           "(full stream queue, or a call that waits for the stream), so queued timing is not possible here",
           where, c->gate.timeout_s);
}

/* ---- latency entries ---------------------------------------------------------- */

static sy_lat_t *sy_new_lat(sy_ctx_t *c, const char *name, sy_method_t m, sy_mode_t mode, const char *what,
                            size_t bytes) {
  if (c->nlat >= SY_MAX_LAT) bench_fatal("too many latency entries");
  sy_lat_t *l = &c->lat[c->nlat++];
  memset(l, 0, sizeof *l);
  snprintf(l->name, sizeof l->name, "%s", name);
  l->method = m;
  l->mode = mode;
  l->what = what;
  l->timer = mode == SY_HOST ? "host_clock" : "cuda_events";
  l->bytes = bytes;
  l->iters = c->iters;
  l->reps = c->reps;
  l->warmup = c->warmup;
  bench_stats(NULL, 0, &l->st);
  return l;
}

static void sy_lat_samples(sy_lat_t *l) {
  l->samples = calloc((size_t)(l->reps > 0 ? l->reps : 1), sizeof *l->samples);
  if (!l->samples) bench_fatal("out of host memory");
}

static void sy_measure(sy_ctx_t *c, sy_lat_t *l, const sy_proto_t *p) {
  const char *why = NULL;
  if (l->method == SY_VMMIPC && c->vmm_skipped[0]) why = c->vmm_skipped;
  if (l->method == SY_NCCL && c->nccl_skipped[0]) why = c->nccl_skipped;
  if (!why && l->mode == SY_QUEUED) why = sy_gate_reason(c, l->method);
  if (!why && sy_out_of_time(c)) why = c->time_up;
  if (why) {
    snprintf(l->skipped, sizeof l->skipped, "%s", why);
    return;
  }
  if (l->method == SY_VMMIPC && c->vmm_error[0]) {
    snprintf(l->error, sizeof l->error, "%s", c->vmm_error);
    return;
  }
  bench_progress(c->node, "%s, %s (%d x %d iterations)", l->name, sy_mode_names[l->mode], l->reps, l->iters);
  sy_lat_samples(l);
  sy_warm(c, p, 8, l->warmup);
  int done = 0, reps = l->reps;
  for (int r = 0; r < reps; r++) {
    if (r > 0 && sy_out_of_time(c)) {
      snprintf(l->note, sizeof l->note, "%d of %d reps: %s", r, l->reps, "the time limit was reached");
      break;
    }
    int forced = 0;
    double wall = 0;
    double s = sy_batch(c, p, l->mode, 8, l->iters, &wall, &forced);
    if (forced) {
      sy_gate_fired(c, l->method, l->name);
      snprintf(l->skipped, sizeof l->skipped, "%s", c->gate_broken[l->method]);
      return;
    }
    if (r == 0) {
      reps = sy_fit(c, reps, wall);
      if (reps < l->reps)
        snprintf(l->note, sizeof l->note, "%d of %d reps: a batch took %.3g s, the budget is %.3g s", reps,
                 l->reps, wall, c->budget_s);
    }
    l->samples[done++] = s / l->iters / p->per_iter;
  }
  l->reps = done;
  bench_stats(l->samples, done, &l->st);
}

/* The host round trip users make today: a tiny op on the stream (an 8-byte
 * copy into the next rank's window), cuStreamSynchronize, MPI_Barrier. */
static void sy_measure_host(sy_ctx_t *c, sy_lat_t *l) {
  if (sy_out_of_time(c)) {
    snprintf(l->skipped, sizeof l->skipped, "%s", c->time_up);
    return;
  }
  bench_progress(c->node, "%s (%d x %d iterations)", l->name, l->reps, l->iters);
  sy_lat_samples(l);
  int me = c->node->rank, n = c->node->size, next = (me + 1) % n;
  int done = 0, reps = l->reps;
  for (int r = -1; r < reps; r++) {
    if (r > 0 && sy_out_of_time(c)) {
      snprintf(l->note, sizeof l->note, "%d of %d reps: %s", r, l->reps, "the time limit was reached");
      break;
    }
    int iters = r < 0 ? l->warmup : l->iters; /* r = -1: warm-up */
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = bench_now();
    for (int i = 0; i < iters; i++) {
      sy_put(c, next, SY_PUT_OFF, 8);
      BD_CHECK(bd.cuStreamSynchronize(c->stream));
      MPI_Barrier(MPI_COMM_WORLD);
    }
    double s = bench_now() - t0, mx = 0;
    MPI_Allreduce(&s, &mx, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (r < 0) continue;
    if (r == 0) {
      reps = sy_fit(c, reps, mx);
      if (reps < l->reps)
        snprintf(l->note, sizeof l->note, "%d of %d reps: a batch took %.3g s, the budget is %.3g s", reps,
                 l->reps, mx, c->budget_s);
    }
    l->samples[done++] = mx / iters;
  }
  l->reps = done;
  bench_stats(l->samples, done, &l->st);
}

void sy_run_latency(sy_ctx_t *c) {
  static const sy_mode_t dev_modes[2] = {SY_QUEUED, SY_ISSUED};
  /* Entries are listed in reading order but measured by priority (what the
   * goals need first), so that a --time-limit cuts the least useful. */
  const sy_proto_t *proto[SY_MAX_LAT] = {NULL};
  int prio[SY_MAX_LAT];
  int first = c->nlat;
  int lat = c->parts_latency, any = c->parts_latency || c->parts_barrier;
  for (int k = 0; k < 2; k++) {
    sy_mode_t m = dev_modes[k];
    if (!c->modes[m]) continue;
    if (lat && c->methods[SY_VMMIPC]) {
      sy_lat_t *l = sy_new_lat(c, "vmmipc.signal_wait", SY_VMMIPC, m, "one_way", 0);
      snprintf(l->desc, sizeof l->desc,
               "rank %d: vmmipc_win_signal then vmmipc_win_wait on its stream; rank %d: wait then signal back; "
               "half the round trip",
               c->a, c->b);
      proto[c->nlat - 1] = &P_SIGNAL;
      prio[c->nlat - 1] = 20 + k;
      l = sy_new_lat(c, "vmmipc.put_signal", SY_VMMIPC, m, "one_way", 8);
      snprintf(l->desc, sizeof l->desc,
               "8-byte cuMemcpyDtoDAsync into the peer's window + vmmipc_win_signal; the peer waits "
               "(vmmipc_win_wait) and answers the same way; half the round trip (ranks %d and %d)",
               c->a, c->b);
      proto[c->nlat - 1] = &P_PUT;
      prio[c->nlat - 1] = 2 + 10 * k;
    }
    if (c->parts_barrier && c->methods[SY_VMMIPC]) {
      sy_lat_t *l = sy_new_lat(c, "vmmipc.barrier", SY_VMMIPC, m, "per_barrier", 0);
      snprintf(l->desc, sizeof l->desc,
               "vmmipc_win_barrier on every rank's stream, repeated; time per barrier (slowest of %d ranks)",
               c->node->size);
      proto[c->nlat - 1] = &P_BARRIER;
      prio[c->nlat - 1] = 1 + 10 * k;
    }
    if (any && c->methods[SY_NCCL]) {
      sy_lat_t *l = sy_new_lat(c, "nccl.sendrecv", SY_NCCL, m, "one_way", 8);
      snprintf(l->desc, sizeof l->desc,
               "ncclSend then ncclRecv of 8 bytes, rank %d to rank %d and back; half the round trip", c->a, c->b);
      proto[c->nlat - 1] = &P_NCCL;
      prio[c->nlat - 1] = 3 + 10 * k;
    }
  }
  if (any && c->methods[SY_HOSTRT] && c->modes[SY_HOST]) {
    sy_lat_t *l = sy_new_lat(c, "host.sync_barrier", SY_HOSTRT, SY_HOST, "per_iteration", 8);
    snprintf(l->desc, sizeof l->desc,
             "every rank: an 8-byte cuMemcpyDtoDAsync into the next rank's window, cuStreamSynchronize, "
             "MPI_Barrier; host clock, time per iteration (slowest of %d ranks)",
             c->node->size);
    prio[c->nlat - 1] = 0;
  }
  for (int p = 0; p < 30; p++)
    for (int i = first; i < c->nlat; i++) {
      if (prio[i] != p) continue;
      if (proto[i])
        sy_measure(c, &c->lat[i], proto[i]);
      else
        sy_measure_host(c, &c->lat[i]);
    }
}

/* ---- bandwidth ------------------------------------------------------------------ */

static void sy_sweep(sy_ctx_t *c, sy_bw_t *s, const sy_proto_t *p) {
  const char *why = NULL;
  if (s->method == SY_VMMIPC && c->vmm_skipped[0]) why = c->vmm_skipped;
  if (s->method == SY_NCCL && c->nccl_skipped[0]) why = c->nccl_skipped;
  if (!why && s->mode == SY_QUEUED) why = sy_gate_reason(c, s->method);
  if (!why && sy_out_of_time(c)) why = c->time_up;
  if (why) {
    snprintf(s->skipped, sizeof s->skipped, "%s", why);
    return;
  }
  if (s->method == SY_VMMIPC && c->vmm_error[0]) {
    snprintf(s->error, sizeof s->error, "%s", c->vmm_error);
    return;
  }
  double *g = calloc((size_t)c->reps, sizeof *g), *t = calloc((size_t)c->reps, sizeof *t);
  if (!g || !t) bench_fatal("out of host memory");
  int capped = 0;
  for (size_t size = c->min_size; size <= c->max_size && s->npts < SY_MAX_SIZES; size *= 2) {
    char sz[32];
    if (sy_out_of_time(c)) {
      snprintf(s->note, sizeof s->note, "stopped before %s: the time limit was reached",
               bench_size_str(size, sz, sizeof sz));
      break;
    }
    bench_progress(c->node, "%s, %s: %s", s->name, sy_mode_names[s->mode], bench_size_str(size, sz, sizeof sz));
    sy_warm(c, p, size, c->warmup);
    int reps = c->reps, done = 0;
    for (int r = 0; r < reps; r++) {
      int forced = 0;
      double wall = 0;
      double secs = sy_batch(c, p, s->mode, size, c->iters, &wall, &forced);
      if (forced) {
        snprintf(sz, sizeof sz, "%zu B", size);
        sy_gate_fired(c, s->method, sz);
        snprintf(s->skipped, sizeof s->skipped, "%s", c->gate_broken[s->method]);
        s->npts = 0;
        free(g);
        free(t);
        return;
      }
      if (r == 0) reps = sy_fit(c, reps, wall);
      t[done] = secs;
      g[done++] = secs > 0 ? (double)size * c->iters / secs / 1e9 : NAN;
    }
    capped |= reps < c->reps;
    sy_bwpt_t *pt = &s->pts[s->npts++];
    pt->size = size;
    pt->iters = c->iters;
    pt->reps = done;
    bench_stats_t ts;
    bench_stats(t, done, &ts);
    pt->seconds = ts.median;
    bench_stats(g, done, &pt->gbps);
  }
  if (capped && !s->note[0])
    snprintf(s->note, sizeof s->note, "fewer reps than %d at some sizes (see reps): --budget %.3g s per size",
             c->reps, c->budget_s);
  free(g);
  free(t);
}

void sy_run_bandwidth(sy_ctx_t *c) {
  static const sy_mode_t dev_modes[2] = {SY_QUEUED, SY_ISSUED};
  for (int k = 0; k < 2; k++) {
    if (!c->modes[dev_modes[k]]) continue;
    for (int m = 0; m < 2; m++) {
      sy_method_t meth = m == 0 ? SY_VMMIPC : SY_NCCL;
      if (!c->methods[meth]) continue;
      if (c->nbw >= SY_MAX_BW) bench_fatal("too many bandwidth series");
      sy_bw_t *s = &c->bw[c->nbw++];
      memset(s, 0, sizeof *s);
      s->method = meth;
      s->mode = dev_modes[k];
      if (meth == SY_VMMIPC) {
        snprintf(s->name, sizeof s->name, "vmmipc.put_signal");
        snprintf(s->desc, sizeof s->desc,
                 "rank %d: cuMemcpyDtoDAsync into rank %d's window + vmmipc_win_signal, %d back to back; rank %d "
                 "waits for each (vmmipc_win_wait) and signals once at the end; time to that acknowledgement",
                 c->a, c->b, c->iters, c->b);
        sy_sweep(c, s, &P_BW_PUT);
      } else {
        snprintf(s->name, sizeof s->name, "nccl.sendrecv");
        snprintf(s->desc, sizeof s->desc,
                 "rank %d: %d ncclSend back to back; rank %d: as many ncclRecv, then an 8-byte ncclSend back; "
                 "time to that acknowledgement",
                 c->a, c->iters, c->b);
        sy_sweep(c, s, &P_BW_NCCL);
      }
    }
  }
}

/* ---- data check --------------------------------------------------------------- */

static unsigned char sy_pattern(size_t i, int rank) { return (unsigned char)(i * 131u + (size_t)rank * 7u + 1u); }

/* Before any timing: each rank of the pair puts a block into the other's
 * window and signals; the other waits on its stream, copies the block out
 * on the same stream and checks every byte. A mismatch is an error (the
 * vmmipc series are then not timed, and the program exits 1). */
void sy_check(sy_ctx_t *c) {
  if (c->vmm_skipped[0]) return;
  size_t n = c->max_size < 64 * BENCH_KiB ? c->max_size : 64 * BENCH_KiB;
  int me = c->node->rank;
  int active = me == c->a || me == c->b, p = sy_other(c);
  unsigned char *host = malloc(n), *got = malloc(n);
  if (!host || !got) bench_fatal("out of host memory");
  char why[SY_REASON_LEN] = "";
  if (active) {
    for (size_t i = 0; i < n; i++) host[i] = sy_pattern(i, me);
    BD_CHECK(bd.cuMemcpyHtoD(c->src, host, n));
    BD_CHECK(bd.cuCtxSynchronize()); /* a pageable copy may return before the data lands */
    BD_CHECK(bd.cuMemsetD8(c->mine + SY_DATA_OFF, 0, n));
    BD_CHECK(bd.cuCtxSynchronize());
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (active) {
    sy_put(c, p, SY_DATA_OFF, n);
    sy_sig(c, p);
    sy_wt(c, p);
    BD_CHECK(sy_drv.cuMemcpyDtoHAsync(got, c->mine + SY_DATA_OFF, n, c->stream));
    sy_stream_wait(c, "data check");
    for (size_t i = 0; i < n; i++)
      if (got[i] != sy_pattern(i, p)) {
        snprintf(why, sizeof why,
                 "data check: after vmmipc_win_wait, rank %d read byte %zu of the %zu bytes rank %d put as 0x%02x, "
                 "expected 0x%02x",
                 me, i, n, p, got[i], sy_pattern(i, p));
        break;
      }
  }
  free(host);
  free(got);
  if (bench_agree_skip(why, sizeof why)) {
    snprintf(c->vmm_error, sizeof c->vmm_error, "%s", why);
    c->errors++;
  }
  MPI_Barrier(MPI_COMM_WORLD);
}
