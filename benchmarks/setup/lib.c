/* The library's mapping collectives, timed around the call, with the
 * phases of vmmipc_comm_last_timing and the mapping-cache counters of
 * vmmipc_comm_stats. Buffers of N chunks are made with vmmipc_alloc of one
 * chunk and N-1 vmmipc_grow calls (one chunk each).
 *
 * Two modes, so that the caches cannot flatter the first case nor hide in
 * the second: "first mapping" makes fresh buffers before every repetition
 * (untimed), so neither the export cache nor the mapping cache can help;
 * "mapped again" maps the same buffers every repetition (cache hits after
 * the first call). Neither times the comm's first window, which also makes
 * the comm's signal pool: that one is measured on its own. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/driver.h"
#include "setup/setup.h"

unsigned char setup_own_mark(int rank) { return (unsigned char)(0x40 + rank % 64); }
unsigned char setup_scatter_mark(int rank) { return (unsigned char)(0x80 + rank % 64); }

void setup_mark(unsigned long long base, size_t size, unsigned char m) {
  BD_CHECK(bd.cuMemsetD8((CUdeviceptr)base, m, 1));
  BD_CHECK(bd.cuMemsetD8((CUdeviceptr)base + size - 1, m, 1));
  BD_CHECK(bd.cuCtxSynchronize());
}

void setup_check_mark(unsigned long long base, size_t size, unsigned char m, const char *what, char *why,
                      size_t len) {
  unsigned char lo = 0, hi = 0;
  if (!base) {
    snprintf(why, len, "%s: no mapping", what);
    return;
  }
  BD_CHECK(bd.cuMemcpyDtoH(&lo, (CUdeviceptr)base, 1));
  BD_CHECK(bd.cuMemcpyDtoH(&hi, (CUdeviceptr)base + size - 1, 1));
  if (lo != m || hi != m)
    snprintf(why, len, "%s: bytes 0 and %zu read 0x%02x and 0x%02x through the mapping, expected 0x%02x", what,
             size - 1, lo, hi, m);
}

static vmmipc_buf_t lib_build(size_t chunk, int chunks, unsigned char mark) {
  vmmipc_buf_t b;
  VCHECK(vmmipc_alloc(chunk, &b));
  for (int i = 2; i <= chunks; i++) VCHECK(vmmipc_grow(b, chunk * (size_t)i));
  int n = 0, imported = 0;
  VCHECK(vmmipc_buf_info(b, &n, &imported));
  if (n != chunks) bench_fatal("a buffer grown to %d chunks reports %d chunks", chunks, n);
  void *p;
  size_t size;
  VCHECK(vmmipc_buf_ptr(b, &p, &size));
  if (size != chunk * (size_t)chunks) bench_fatal("buffer of %zu bytes expected, vmmipc_buf_ptr says %zu", chunk * (size_t)chunks, size);
  setup_mark((unsigned long long)(uintptr_t)p, size, mark);
  return b;
}

typedef struct lib_arg {
  setup_coll_t coll;
  vmmipc_comm_t comm;
  int fresh; /* first mapping: new buffers before every repetition */
  size_t chunk, size;
  int chunks;
  vmmipc_buf_t own;   /* allgather: every rank; bcast: the root */
  vmmipc_buf_t *bufs; /* scatter: [ranks] at the root, NULL for the root itself */
  int check;          /* check the mapping after this call */
  char error[SETUP_REASON_LEN];
} lib_arg_t;

/* The buffers a collective exports: every rank's own for allgather, the
 * root's for bcast, one per other rank at the root for scatter. */
static void lib_make(setup_ctx_t *c, lib_arg_t *a, int for_allgather, int for_bcast, int for_scatter) {
  int me = c->node->rank, n = c->node->size;
  if (for_allgather || (for_bcast && me == c->root)) a->own = lib_build(a->chunk, a->chunks, setup_own_mark(me));
  if (for_scatter && me == c->root) {
    a->bufs = calloc((size_t)n, sizeof *a->bufs);
    if (!a->bufs) bench_fatal("out of host memory");
    for (int r = 0; r < n; r++)
      if (r != c->root) a->bufs[r] = lib_build(a->chunk, a->chunks, setup_scatter_mark(r));
  }
}

static void lib_drop(setup_ctx_t *c, lib_arg_t *a) {
  for (int r = 0; a->bufs && r < c->node->size; r++) VCHECK(vmmipc_buf_free(a->bufs[r]));
  free(a->bufs);
  a->bufs = NULL;
  VCHECK(vmmipc_buf_free(a->own));
  a->own = NULL;
}

static void lib_check(setup_ctx_t *c, lib_arg_t *a, vmmipc_win_t win, vmmipc_buf_t out) {
  int me = c->node->rank;
  char why[SETUP_REASON_LEN] = "", what[96];
  void *p = NULL;
  size_t size = 0;
  if (a->coll == SC_ALLGATHER) {
    for (int r = 0; r < c->node->size && !why[0]; r++) {
      if (r == me) continue;
      VCHECK(vmmipc_win_query(win, r, &p, &size));
      snprintf(what, sizeof what, "allgather_map: rank %d's buffer", r);
      if (size != a->size)
        snprintf(why, sizeof why, "%s has %zu bytes, expected %zu", what, size, a->size);
      else
        setup_check_mark((unsigned long long)(uintptr_t)p, size, setup_own_mark(r), what, why, sizeof why);
    }
  } else if (me != c->root) {
    VCHECK(vmmipc_buf_ptr(out, &p, &size));
    snprintf(what, sizeof what, "%s from root %d", setup_coll_names[a->coll], c->root);
    if (size != a->size)
      snprintf(why, sizeof why, "%s has %zu bytes, expected %zu", what, size, a->size);
    else
      setup_check_mark((unsigned long long)(uintptr_t)p, size,
                       a->coll == SC_BCAST ? setup_own_mark(c->root) : setup_scatter_mark(me), what, why, sizeof why);
  }
  if (bench_agree_skip(why, sizeof why)) snprintf(a->error, sizeof a->error, "%s", why);
}

static void lib_timing(vmmipc_comm_t comm, double v[SF_N]) {
  vmmipc_timing_t t = VMMIPC_TIMING_INIT;
  VCHECK(vmmipc_comm_last_timing(comm, &t));
  v[SF_EXPORT] = t.export_s;
  v[SF_TRANSFER] = t.transfer_s;
  v[SF_IMPORT] = t.import_s;
  v[SF_MAP] = t.map_s;
  v[SF_ACCESS] = t.access_s;
  v[SF_AGREE] = t.agree_s;
  v[SF_TOTAL] = t.total_s;
}

static void lib_rep(setup_ctx_t *c, void *argp, double v[SF_N]) {
  lib_arg_t *a = argp;
  int me = c->node->rank;
  if (a->fresh) lib_make(c, a, a->coll == SC_ALLGATHER, a->coll == SC_BCAST, a->coll == SC_SCATTER);
  vmmipc_access_t access = VMMIPC_ACCESS_DEFAULT;
  vmmipc_win_t win = NULL;
  vmmipc_buf_t out = NULL;
  vmmipc_result_t r = VMMIPC_SUCCESS;
  vmmipc_comm_stats_t s0 = VMMIPC_COMM_STATS_INIT, s1 = VMMIPC_COMM_STATS_INIT;
  VCHECK(vmmipc_comm_stats(a->comm, &s0));
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = bench_now();
  switch (a->coll) {
    case SC_ALLGATHER: r = vmmipc_allgather_map(a->comm, a->own, &access, &win); break;
    case SC_BCAST: r = vmmipc_bcast_map(a->comm, me == c->root ? a->own : NULL, c->root, &access, &out); break;
    default: r = vmmipc_scatter_map(a->comm, me == c->root ? a->bufs : NULL, c->root, &access, &out); break;
  }
  v[SF_WALL] = bench_now() - t0;
  if (r != VMMIPC_SUCCESS)
    bench_fatal("vmmipc_%s of %zu bytes failed: %s: %s", setup_coll_names[a->coll], a->size, vmmipc_strerror(r),
                vmmipc_last_error());
  lib_timing(a->comm, v);
  VCHECK(vmmipc_comm_stats(a->comm, &s1));
  c->rep_k[SK_HITS] = (long long)(s1.map_cache_hits - s0.map_cache_hits);
  c->rep_k[SK_MISSES] = (long long)(s1.map_cache_misses - s0.map_cache_misses);
  c->rep_k[SK_NOFDS] = (long long)(s1.fds_not_sent - s0.fds_not_sent);
  if (a->check) {
    lib_check(c, a, win, out);
    a->check = 0;
  }
  VCHECK(vmmipc_win_free(win));
  VCHECK(vmmipc_buf_free(out));
  if (a->fresh) lib_drop(c, a);
}

static void lib_series(setup_ctx_t *c, lib_arg_t *a, const char *method) {
  setup_result_t *res = setup_new_result(c, a->coll, method, a->size, a->chunk, a->chunks);
  res->counted = 1;
  a->check = 1;
  a->error[0] = '\0';
  setup_measure(c, res, lib_rep, a);
  if (a->error[0]) {
    snprintf(res->error, sizeof res->error, "%s", a->error);
    c->errors++;
  }
}

/* A window of one granule that nobody times: the comm's signal pool is
 * made by its first window, and must not land in a timed repetition. */
static void lib_warm(setup_ctx_t *c, vmmipc_comm_t comm) {
  vmmipc_buf_t b = lib_build(c->granularity, 1, setup_own_mark(c->node->rank));
  vmmipc_access_t access = VMMIPC_ACCESS_DEFAULT;
  vmmipc_win_t w = NULL;
  VCHECK(vmmipc_allgather_map(comm, b, &access, &w));
  VCHECK(vmmipc_win_free(w));
  VCHECK(vmmipc_buf_free(b));
}

void setup_run_first_window(setup_ctx_t *c) {
  lib_arg_t a;
  memset(&a, 0, sizeof a);
  a.coll = SC_ALLGATHER;
  a.comm = c->comm;
  a.fresh = 1;
  a.chunk = a.size = c->granularity;
  a.chunks = 1;
  a.check = 1;
  double v[SF_N] = {0}, mx[SF_N];
  lib_rep(c, &a, v);
  MPI_Allreduce(v, mx, SF_N, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  memcpy(c->first_window, mx, sizeof mx);
  c->first_window_size = c->granularity;
  c->have_first_window = 1;
  if (a.error[0]) {
    bench_progress(c->node, "the comm's first window: %s", a.error);
    c->errors++;
  }
}

typedef struct null_arg {
  vmmipc_desc_t *descs; /* [ranks] */
} null_arg_t;

static void null_rep(setup_ctx_t *c, void *argp, double v[SF_N]) {
  null_arg_t *a = argp;
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = bench_now();
  vmmipc_result_t r = vmmipc_allgather_desc(c->comm, NULL, a->descs);
  v[SF_WALL] = bench_now() - t0;
  if (r != VMMIPC_SUCCESS)
    bench_fatal("vmmipc_allgather_desc of no descriptor failed: %s: %s", vmmipc_strerror(r), vmmipc_last_error());
  lib_timing(c->comm, v);
  for (int i = 0; i < c->node->size; i++) {
    VCHECK(vmmipc_desc_free(a->descs[i]));
    a->descs[i] = NULL;
  }
}

void setup_run_null(setup_ctx_t *c) {
  null_arg_t a;
  a.descs = calloc((size_t)c->node->size, sizeof *a.descs);
  if (!a.descs) bench_fatal("out of host memory");
  setup_result_t *res = setup_new_result(c, SC_NULL, SETUP_FIRST, 0, 0, 0);
  setup_measure(c, res, null_rep, &a);
  free(a.descs);
}

void setup_run_lib(setup_ctx_t *c, const int *colls, size_t chunk, int chunks) {
  lib_arg_t a;
  memset(&a, 0, sizeof a);
  a.chunk = chunk;
  a.chunks = chunks;
  a.size = chunk * (size_t)chunks;
  if (c->mode_first) {
    a.comm = c->comm;
    a.fresh = 1;
    for (int k = 0; k < SC_NMAP; k++) {
      if (!colls[k]) continue;
      a.coll = (setup_coll_t)k;
      lib_series(c, &a, SETUP_FIRST);
    }
  }
  if (c->mode_again) {
    vmmipc_config_t cfg = VMMIPC_CONFIG_INIT;
    VCHECK(vmmipc_comm_create(MPI_COMM_WORLD, &cfg, &c->again));
    lib_warm(c, c->again);
    a.comm = c->again;
    a.fresh = 0;
    lib_make(c, &a, colls[SC_ALLGATHER], colls[SC_BCAST], colls[SC_SCATTER]);
    for (int k = 0; k < SC_NMAP; k++) {
      if (!colls[k]) continue;
      a.coll = (setup_coll_t)k;
      lib_series(c, &a, SETUP_AGAIN);
    }
    lib_drop(c, &a);
    VCHECK(vmmipc_comm_destroy(c->again));
    c->again = NULL;
  }
}
