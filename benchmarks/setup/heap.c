/* The symmetric heap (issue 22), measured in the same run as its anchors:
 *   - vmmipc_heap_alloc of 2 MiB with room in the heap (and + win_free),
 *     against the MPI floor (one MPI_Allgather of 8 B + one MPI_Allreduce
 *     of 4 B), a fresh allgather_map (buffer made outside the clock) and
 *     legacy IPC of a fresh cuMemAlloc;
 *   - a mixed workload of 1000 windows (4 KiB..64 MiB, fixed seed, frees
 *     interleaved, a peer read of each) with the heap, allgather_map and
 *     legacy IPC: total time and peak physical memory per rank;
 *   - one growth step against the raw-driver floor for the same bytes
 *     (create, export, fd to each peer, import, map, set access).
 * Every time is the maximum over ranks of one repetition; rows give the
 * median. Benchmarks assume one node (as the rest of vmmipc_setup). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/args.h"
#include "common/driver.h"
#include "common/json.h"
#include "setup/setup.h"

#define HEAP_MAX_LIVE 16

typedef struct heap_row {
  const char *name;
  double median, p10, p90; /* seconds */
  int reps;
  char skipped[SETUP_REASON_LEN];
} heap_row_t;

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double max_over_ranks(double v) {
  double m = 0;
  MPI_Allreduce(&v, &m, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return m;
}

static void summarize(heap_row_t *r, double *v, int n) {
  r->reps = n;
  if (n == 0) {
    r->median = r->p10 = r->p90 = NAN;
    return;
  }
  qsort(v, (size_t)n, sizeof *v, cmp_d);
  r->median = v[n / 2];
  r->p10 = v[n / 10];
  r->p90 = v[(n * 9) / 10];
}

/* ---- 2 MiB: the heap, the MPI floor, a fresh allgather_map, legacy IPC ---- */

static void run_floor(int reps, heap_row_t *row) {
  double *v = calloc((size_t)reps, sizeof *v);
  uint64_t in = 1, *all = calloc((size_t)2 * 1024, sizeof *all);
  int one = 1, sum = 0, size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (!v || !all || size > 2048) bench_fatal("out of host memory");
  for (int i = 0; i < reps; i++) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = bench_now();
    MPI_Allgather(&in, 8, MPI_BYTE, all, 8, MPI_BYTE, MPI_COMM_WORLD);
    MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    v[i] = max_over_ranks(bench_now() - t0);
  }
  summarize(row, v, reps);
  free(v);
  free(all);
}

static void run_heap_2m(setup_ctx_t *c, int reps, heap_row_t *alloc_row, heap_row_t *both_row) {
  vmmipc_heap_t h;
  VCHECK(vmmipc_heap_create(c->comm, NULL, &h));
  vmmipc_win_t w;
  VCHECK(vmmipc_heap_alloc(h, 2 * BENCH_MiB, &w)); /* the first growth, untimed: "when the heap has room" */
  VCHECK(vmmipc_win_free(w));
  double *a = calloc((size_t)reps, sizeof *a), *b = calloc((size_t)reps, sizeof *b);
  if (!a || !b) bench_fatal("out of host memory");
  for (int i = 0; i < reps; i++) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = bench_now();
    VCHECK(vmmipc_heap_alloc(h, 2 * BENCH_MiB, &w));
    double t1 = bench_now();
    VCHECK(vmmipc_win_free(w));
    double t2 = bench_now();
    a[i] = max_over_ranks(t1 - t0);
    b[i] = max_over_ranks(t2 - t0);
  }
  vmmipc_heap_stats_t st = VMMIPC_HEAP_STATS_INIT;
  VCHECK(vmmipc_heap_stats(h, &st));
  if (st.growth_steps != 1) bench_fatal("the 2 MiB heap row grew %llu times", (unsigned long long)st.growth_steps);
  VCHECK(vmmipc_heap_destroy(h));
  summarize(alloc_row, a, reps);
  summarize(both_row, b, reps);
  free(a);
  free(b);
}

static void run_fresh_map(setup_ctx_t *c, int reps, heap_row_t *row) {
  double *v = calloc((size_t)reps, sizeof *v);
  if (!v) bench_fatal("out of host memory");
  for (int i = 0; i < reps; i++) {
    vmmipc_buf_t b;
    VCHECK(vmmipc_alloc(2 * BENCH_MiB, &b));
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = bench_now();
    vmmipc_win_t w;
    VCHECK(vmmipc_allgather_map(c->comm, b, NULL, &w));
    VCHECK(vmmipc_win_free(w));
    v[i] = max_over_ranks(bench_now() - t0);
    VCHECK(vmmipc_buf_free(b));
  }
  summarize(row, v, reps);
  free(v);
}

/* Legacy IPC of one fresh cuMemAlloc buffer per rank: get handle,
 * allgather, open every peer's; close and free outside the clock. */
typedef struct ipc_win {
  CUdeviceptr own, *peer;
  size_t size;
} ipc_win_t;

/* pre: a buffer made beforehand (outside the clock), else 0: made here. */
static int ipc_open(int n, int me, size_t size, CUdeviceptr pre, ipc_win_t *w, char *why, size_t len) {
  char e[160];
  CUresult rc;
  w->size = size;
  w->peer = calloc((size_t)n, sizeof *w->peer);
  CUipcMemHandle *all = calloc((size_t)n, sizeof *all);
  if (!w->peer || !all) bench_fatal("out of host memory");
  CUipcMemHandle hd;
  memset(&hd, 0, sizeof hd);
  w->own = pre;
  if (!pre && (rc = bd.cuMemAlloc(&w->own, size)) != CUDA_SUCCESS) {
    w->own = 0;
    snprintf(why, len, "cuMemAlloc(%zu): %s", size, bd_errstr(rc, e, sizeof e));
  } else if ((rc = bd.cuIpcGetMemHandle(&hd, w->own)) != CUDA_SUCCESS) {
    snprintf(why, len, "cuIpcGetMemHandle: %s", bd_errstr(rc, e, sizeof e));
  }
  MPI_Allgather(&hd, (int)sizeof hd, MPI_BYTE, all, (int)sizeof hd, MPI_BYTE, MPI_COMM_WORLD);
  for (int p = 0; p < n && !why[0]; p++)
    if (p != me && (rc = bd.cuIpcOpenMemHandle(&w->peer[p], all[p], CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)) != CUDA_SUCCESS) {
      w->peer[p] = 0;
      snprintf(why, len, "cuIpcOpenMemHandle(rank %d): %s", p, bd_errstr(rc, e, sizeof e));
    }
  free(all);
  return bench_agree_skip(why, len);
}

static void ipc_close(int n, ipc_win_t *w) {
  for (int p = 0; p < n; p++)
    if (w->peer[p]) bd.cuIpcCloseMemHandle(w->peer[p]);
  MPI_Barrier(MPI_COMM_WORLD); /* the owner frees after every peer closed */
  if (w->own) bd.cuMemFree(w->own);
  free(w->peer);
  memset(w, 0, sizeof *w);
}

static void run_ipc_2m(setup_ctx_t *c, int reps, heap_row_t *row) {
  int n = c->node->size, me = c->node->rank;
  double *v = calloc((size_t)reps, sizeof *v);
  if (!v) bench_fatal("out of host memory");
  if (!bd.cuIpcGetMemHandle || !bd.cuIpcOpenMemHandle || !bd.cuIpcCloseMemHandle) {
    snprintf(row->skipped, sizeof row->skipped, "the driver has no legacy IPC");
    bench_agree_skip(row->skipped, sizeof row->skipped);
  }
  int done = 0;
  for (int i = 0; i < reps && !row->skipped[0]; i++) {
    ipc_win_t w;
    memset(&w, 0, sizeof w);
    CUdeviceptr pre = 0; /* a fresh buffer, made outside the clock (the anchor) */
    if (bd.cuMemAlloc(&pre, 2 * BENCH_MiB) != CUDA_SUCCESS) bench_fatal("cuMemAlloc(2 MiB) failed");
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = bench_now();
    int skip = ipc_open(n, me, 2 * BENCH_MiB, pre, &w, row->skipped, sizeof row->skipped);
    double t = max_over_ranks(bench_now() - t0);
    ipc_close(n, &w);
    if (skip) break;
    v[done++] = t;
  }
  summarize(row, v, done);
  free(v);
}

/* ---- the mixed workload ---------------------------------------------------- */

typedef enum { MW_HEAP, MW_MAP, MW_IPC } mw_method_t;

typedef struct mw_live {
  vmmipc_win_t win;
  vmmipc_buf_t buf;
  ipc_win_t ipc;
  size_t size;
} mw_live_t;

/* Sizes log-uniform in [4 KiB, 64 MiB], one sequence for every method. */
static size_t mw_size(uint64_t *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  double u = (double)(*s >> 11) / 9007199254740992.0;
  return (size_t)(4096.0 * pow(16384.0, u)) / 256 * 256 + 256;
}

static int mw_free_now(uint64_t *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return (*s >> 40) % 2;
}

/* One rank writes a byte at both ends of its window; its right neighbour reads them. */
static void mw_touch_and_read(int me, int n, CUdeviceptr own, CUdeviceptr right, size_t size, size_t rsize,
                              unsigned char mark, int *bad) {
  BD_CHECK(bd.cuMemsetD8(own, (unsigned char)(mark + me), 1));
  BD_CHECK(bd.cuMemsetD8(own + size - 1, (unsigned char)(mark + me), 1));
  BD_CHECK(bd.cuCtxSynchronize());
  MPI_Barrier(MPI_COMM_WORLD);
  unsigned char lo = 0, hi = 0;
  int r = (me + 1) % n;
  BD_CHECK(bd.cuMemcpyDtoH(&lo, right, 1));
  BD_CHECK(bd.cuMemcpyDtoH(&hi, right + rsize - 1, 1));
  if (lo != (unsigned char)(mark + r) || hi != (unsigned char)(mark + r)) *bad = 1;
}

static void mw_release(setup_ctx_t *c, mw_method_t m, mw_live_t *l) {
  if (m == MW_IPC) {
    ipc_close(c->node->size, &l->ipc);
  } else {
    VCHECK(vmmipc_win_free(l->win));
    if (l->buf) VCHECK(vmmipc_buf_free(l->buf));
  }
  memset(l, 0, sizeof *l);
}

typedef struct mw_result {
  double total_s;
  double calls_s;      /* of which in the calls that make and free windows (max over ranks) */
  double read_s;       /* of which in the common touch-and-read step */
  double peak_mapped;  /* bytes of this rank's own physical memory, max over ranks */
  double carved_hw;    /* heap only */
  double grow;         /* heap only */
  char skipped[SETUP_REASON_LEN];
  int bad;
} mw_result_t;

static void run_mixed(setup_ctx_t *c, mw_method_t m, int windows, mw_result_t *out) {
  int n = c->node->size, me = c->node->rank;
  memset(out, 0, sizeof *out);
  if (n < 2) {
    snprintf(out->skipped, sizeof out->skipped, "needs two ranks");
    return;
  }
  if (m == MW_IPC && (!bd.cuIpcGetMemHandle || !bd.cuIpcOpenMemHandle)) {
    snprintf(out->skipped, sizeof out->skipped, "the driver has no legacy IPC");
    return;
  }
  vmmipc_heap_t h = NULL;
  if (m == MW_HEAP) VCHECK(vmmipc_heap_create(c->comm, NULL, &h));
  mw_live_t live[HEAP_MAX_LIVE];
  memset(live, 0, sizeof live);
  int nlive = 0;
  uint64_t seed = 20261201, fseed = 77;
  double mapped = 0, peak = 0;
  size_t g = c->granularity;
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = bench_now(), calls = 0, reads = 0;
  for (int i = 0; i < windows; i++) {
    double tc = bench_now();
    while (nlive == HEAP_MAX_LIVE || (nlive > 0 && mw_free_now(&fseed))) {
      int k = (int)(fseed % (uint64_t)nlive);
      if (m != MW_HEAP) mapped -= (double)((live[k].size + g - 1) / g * g);
      mw_release(c, m, &live[k]);
      live[k] = live[--nlive];
    }
    size_t size = mw_size(&seed);
    mw_live_t *l = &live[nlive++];
    l->size = size;
    CUdeviceptr own = 0, right = 0;
    int r = (me + 1) % n;
    if (m == MW_HEAP) {
      VCHECK(vmmipc_heap_alloc(h, size, &l->win));
    } else if (m == MW_MAP) {
      VCHECK(vmmipc_alloc(size, &l->buf));
      VCHECK(vmmipc_allgather_map(c->comm, l->buf, NULL, &l->win));
    } else if (ipc_open(n, me, size, 0, &l->ipc, out->skipped, sizeof out->skipped)) {
      ipc_close(n, &l->ipc);
      nlive--;
      break;
    }
    if (m == MW_IPC) {
      own = l->ipc.own;
      right = l->ipc.peer[r];
    } else {
      void *p = NULL, *q = NULL;
      VCHECK(vmmipc_win_query(l->win, me, &p, NULL));
      VCHECK(vmmipc_win_query(l->win, r, &q, NULL));
      own = (CUdeviceptr)(uintptr_t)p;
      right = (CUdeviceptr)(uintptr_t)q;
    }
    double tr = bench_now();
    calls += tr - tc;
    mw_touch_and_read(me, n, own, right, size, size, (unsigned char)(i * 7), &out->bad);
    reads += bench_now() - tr;
    if (m == MW_HEAP) {
      vmmipc_heap_stats_t st = VMMIPC_HEAP_STATS_INIT;
      VCHECK(vmmipc_heap_stats(h, &st));
      mapped = (double)st.mapped;
    } else {
      mapped += (double)((size + g - 1) / g * g);
    }
    if (mapped > peak) peak = mapped;
  }
  double tc = bench_now();
  while (nlive > 0) mw_release(c, m, &live[--nlive]);
  calls += bench_now() - tc;
  out->total_s = max_over_ranks(bench_now() - t0);
  out->calls_s = max_over_ranks(calls);
  out->read_s = max_over_ranks(reads);
  out->peak_mapped = max_over_ranks(peak);
  if (h) {
    vmmipc_heap_stats_t st = VMMIPC_HEAP_STATS_INIT;
    VCHECK(vmmipc_heap_stats(h, &st));
    out->carved_hw = (double)st.carved_high_water;
    out->grow = (double)st.grow;
    VCHECK(vmmipc_heap_destroy(h));
  }
  int bad = out->bad, any = 0;
  MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  out->bad = any;
  bench_agree_skip(out->skipped, sizeof out->skipped);
}

/* ---- one growth step against the raw driver ------------------------------- */

static void run_growth(setup_ctx_t *c, size_t bytes, int reps, heap_row_t *heap_row, heap_row_t *raw_row) {
  int n = c->node->size, me = c->node->rank, dev = c->node->device;
  double *a = calloc((size_t)reps, sizeof *a), *b = calloc((size_t)reps, sizeof *b);
  if (!a || !b) bench_fatal("out of host memory");
  for (int i = 0; i < reps; i++) {
    vmmipc_heap_config_t hc = VMMIPC_HEAP_CONFIG_INIT;
    hc.grow = bytes;
    hc.reserve = 4 * bytes;
    vmmipc_heap_t h;
    VCHECK(vmmipc_heap_create(c->comm, &hc, &h));
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = bench_now();
    vmmipc_win_t w;
    VCHECK(vmmipc_heap_alloc(h, bytes, &w));
    a[i] = max_over_ranks(bench_now() - t0);
    VCHECK(vmmipc_win_free(w));
    VCHECK(vmmipc_heap_destroy(h));
  }
  summarize(heap_row, a, reps);
  bench_fdmesh_t mesh;
  char why[SETUP_REASON_LEN] = "";
  int have = bench_fdmesh_create(MPI_COMM_WORLD, &mesh, why, sizeof why) == 0;
  if (bench_agree_skip(why, sizeof why) || !have) {
    snprintf(raw_row->skipped, sizeof raw_row->skipped, "%s", why[0] ? why : "no fd mesh");
    summarize(raw_row, b, 0);
    free(a);
    free(b);
    return;
  }
  CUmemAccessDesc acc;
  memset(&acc, 0, sizeof acc);
  acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  acc.location.id = dev;
  acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CUmemAllocationProp prop;
  memset(&prop, 0, sizeof prop);
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  CUmemGenericAllocationHandle *hs = calloc((size_t)n, sizeof *hs);
  if (!hs) bench_fatal("out of host memory");
  for (int i = 0; i < reps; i++) {
    CUdeviceptr base = 0; /* reserved outside the clock, as the heap does at create */
    BD_CHECK(bd.cuMemAddressReserve(&base, (size_t)n * bytes, c->granularity, 0, 0));
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = bench_now();
    BD_CHECK(bd.cuMemCreate(&hs[me], bytes, &prop, 0));
    BD_CHECK(bd.cuMemMap(base + (CUdeviceptr)me * bytes, bytes, 0, hs[me], 0));
    BD_CHECK(bd.cuMemSetAccess(base + (CUdeviceptr)me * bytes, bytes, &acc, 1));
    int fd = -1;
    BD_CHECK(bd.cuMemExportToShareableHandle(&fd, hs[me], CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    for (int p = 0; p < n; p++)
      if (p != me && bench_fdmesh_send(&mesh, p, &bytes, sizeof bytes, &fd, 1) != 0) bench_fatal("fd send");
    for (int p = 0; p < n; p++) {
      if (p == me) continue;
      size_t got = 0;
      int pfd = -1;
      if (bench_fdmesh_recv(&mesh, p, &got, sizeof got, &pfd, 1) != 0) bench_fatal("fd recv");
      BD_CHECK(bd.cuMemImportFromShareableHandle(&hs[p], (void *)(uintptr_t)pfd,
                                                 CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
      close(pfd);
      BD_CHECK(bd.cuMemMap(base + (CUdeviceptr)p * bytes, bytes, 0, hs[p], 0));
      BD_CHECK(bd.cuMemSetAccess(base + (CUdeviceptr)p * bytes, bytes, &acc, 1));
    }
    close(fd);
    b[i] = max_over_ranks(bench_now() - t0);
    for (int p = 0; p < n; p++) {
      BD_CHECK(bd.cuMemUnmap(base + (CUdeviceptr)p * bytes, bytes));
      BD_CHECK(bd.cuMemRelease(hs[p]));
    }
    BD_CHECK(bd.cuMemAddressFree(base, (size_t)n * bytes));
    MPI_Barrier(MPI_COMM_WORLD);
  }
  summarize(raw_row, b, reps);
  bench_fdmesh_destroy(&mesh);
  free(hs);
  free(a);
  free(b);
}

/* ---- the report -------------------------------------------------------------- */

static void print_row(const heap_row_t *r) {
  if (r->skipped[0] || r->reps == 0)
    printf("  %-34s %10s   (%s)\n", r->name, "n/a", r->skipped[0] ? r->skipped : "not measured");
  else
    printf("  %-34s %10.1f us  p10 %8.1f  p90 %8.1f  (%d reps)\n", r->name, r->median * 1e6, r->p10 * 1e6,
           r->p90 * 1e6, r->reps);
}

typedef struct heap_ratio {
  const char *what;
  double ratio, target; /* ratio NAN: n/a */
} heap_ratio_t;

#define HEAP_MAX_RATIOS 12
static heap_ratio_t g_ratios[HEAP_MAX_RATIOS];
static int g_nratios;

static void print_ratio(const char *what, double subject, double anchor, double target) {
  double ratio = isnan(subject) || isnan(anchor) || anchor <= 0 ? NAN : subject / anchor;
  if (g_nratios < HEAP_MAX_RATIOS) g_ratios[g_nratios++] = (heap_ratio_t){what, ratio, target};
  if (isnan(ratio)) {
    printf("  %-58s n/a\n", what);
    return;
  }
  printf("  %-58s %8.3f  (goal <= %g: %s)\n", what, ratio, target, ratio <= target ? "PASS" : "FAIL");
}

/* The same rows, workload and ratios as the table, for report tools. */
static void write_json(const setup_ctx_t *c, const char *path, const heap_row_t *const *rows, int nrows,
                       const char *const *names, const mw_result_t *mw, int windows) {
  FILE *f = fopen(path, "w");
  if (!f) {
    perror(path);
    return;
  }
  jw_t w;
  jw_init(&w, f);
  jw_obj(&w, NULL);
  jw_str(&w, "bench", "vmmipc_setup --heap");
  jw_str(&w, "benchmark", "vmmipc_heap"); /* the report tools' key (benchmarks/reporting) */
  jw_int(&w, "ranks", c->node->size);
  jw_int(&w, "gpus", c->gpus);
  const char *mps = getenv("VMMIPC_BENCH_MPS"); /* set by the scripts that start MPS or know it is off */
  if (mps)
    jw_bool(&w, "mps", strcmp(mps, "1") == 0);
  else
    jw_null(&w, "mps");
  jw_str(&w, "units", "seconds; each repetition is the maximum over ranks");
  jw_arr(&w, "rows");
  for (int i = 0; i < nrows; i++) {
    jw_obj(&w, NULL);
    jw_str(&w, "row", rows[i]->name);
    if (rows[i]->skipped[0] || !rows[i]->reps) {
      jw_str(&w, "skipped", rows[i]->skipped[0] ? rows[i]->skipped : "not measured");
    } else {
      jw_num(&w, "median", rows[i]->median);
      jw_num(&w, "p10", rows[i]->p10);
      jw_num(&w, "p90", rows[i]->p90);
      jw_int(&w, "reps", rows[i]->reps);
    }
    jw_end_obj(&w);
  }
  jw_end_arr(&w);
  jw_obj(&w, "mixed_workload");
  jw_int(&w, "windows", windows);
  for (int k = 0; k < 3; k++) {
    jw_obj(&w, names[k]);
    if (mw[k].skipped[0]) {
      jw_str(&w, "skipped", mw[k].skipped);
    } else {
      jw_num(&w, "total", mw[k].total_s);
      jw_num(&w, "window_calls", mw[k].calls_s);
      jw_num(&w, "touch_and_read", mw[k].read_s);
      jw_num(&w, "peak_mapped_bytes", mw[k].peak_mapped);
      jw_bool(&w, "data_ok", !mw[k].bad);
    }
    jw_end_obj(&w);
  }
  jw_end_obj(&w);
  jw_arr(&w, "ratios");
  for (int i = 0; i < g_nratios; i++) {
    jw_obj(&w, NULL);
    jw_str(&w, "ratio", g_ratios[i].what);
    if (isnan(g_ratios[i].ratio))
      jw_null(&w, "value");
    else
      jw_num(&w, "value", g_ratios[i].ratio);
    jw_num(&w, "goal_at_most", g_ratios[i].target);
    jw_end_obj(&w);
  }
  jw_end_arr(&w);
  jw_end_obj(&w);
  fputc('\n', f);
  fclose(f);
}

void setup_run_heap(setup_ctx_t *c, int reps, int windows, const char *json) {
  int n = c->node->size;
  heap_row_t floor_r = {"mpi_floor (allgather 8B+allreduce 4B)", 0, 0, 0, 0, ""};
  heap_row_t alloc_r = {"heap_alloc 2 MiB", 0, 0, 0, 0, ""};
  heap_row_t both_r = {"heap_alloc + win_free 2 MiB", 0, 0, 0, 0, ""};
  heap_row_t map_r = {"allgather_map + win_free 2 MiB (fresh)", 0, 0, 0, 0, ""};
  heap_row_t ipc_r = {"legacy_ipc 2 MiB (fresh cuMemAlloc)", 0, 0, 0, 0, ""};
  bench_progress(c->node, "heap: 2 MiB windows and their anchors");
  run_floor(reps, &floor_r);
  run_heap_2m(c, reps, &alloc_r, &both_r);
  run_fresh_map(c, reps, &map_r);
  run_ipc_2m(c, reps, &ipc_r);
  bench_progress(c->node, "heap: the mixed workload of %d windows", windows);
  mw_result_t mw[3];
  for (int k = 0; k < 3; k++) {
    run_mixed(c, (mw_method_t)k, windows, &mw[k]);
    if (mw[k].bad) c->errors++; /* agreed: every rank counts it */
  }
  size_t step = 64 * BENCH_MiB;
  heap_row_t grow_r = {"heap growth step 64 MiB (alloc)", 0, 0, 0, 0, ""};
  heap_row_t raw_r = {"raw-driver floor 64 MiB", 0, 0, 0, 0, ""};
  bench_progress(c->node, "heap: one growth step of 64 MiB against the raw driver");
  run_growth(c, step, reps < 30 ? reps : 30, &grow_r, &raw_r);
  if (c->node->rank != 0) return;
  printf("\nsymmetric heap (issue 22), %d ranks, %d GPU(s)\n", n, c->gpus);
  print_row(&floor_r);
  print_row(&alloc_r);
  print_row(&both_r);
  print_row(&map_r);
  print_row(&ipc_r);
  print_row(&grow_r);
  print_row(&raw_r);
  const char *names[3] = {"heap", "allgather_map", "legacy_ipc"};
  printf("  mixed workload, %d windows 4 KiB..64 MiB, at most %d live:\n", windows, HEAP_MAX_LIVE);
  for (int k = 0; k < 3; k++) {
    if (mw[k].skipped[0])
      printf("    %-14s n/a (%s)\n", names[k], mw[k].skipped);
    else
      printf("    %-14s total %9.1f ms (window calls %9.1f ms, touch-and-read %7.1f ms)  peak mapped %8.1f MiB%s\n",
             names[k], mw[k].total_s * 1e3, mw[k].calls_s * 1e3, mw[k].read_s * 1e3,
             mw[k].peak_mapped / (double)BENCH_MiB, mw[k].bad ? "  DATA MISMATCH" : "");
  }
  if (!mw[0].skipped[0])
    printf("    heap: carved high-water %.1f MiB, step %.1f MiB: peak <= high-water + one step: %s\n",
           mw[0].carved_hw / (double)BENCH_MiB, mw[0].grow / (double)BENCH_MiB,
           mw[0].peak_mapped <= mw[0].carved_hw + mw[0].grow ? "PASS" : "FAIL (fragmentation)");
  printf("  ratios (medians of this run):\n");
  print_ratio("heap_alloc 2 MiB / mpi_floor", alloc_r.median, floor_r.median, 2.0);
  print_ratio("heap_alloc 2 MiB / legacy_ipc", alloc_r.median, ipc_r.median, n >= 8 ? 0.02 : 0.1);
  print_ratio("heap_alloc+win_free 2 MiB / fresh allgather_map+win_free", both_r.median, map_r.median, 0.3);
  print_ratio("mixed workload: heap / legacy_ipc (time)", mw[0].skipped[0] ? NAN : mw[0].total_s,
              mw[2].skipped[0] ? NAN : mw[2].total_s, 0.1);
  print_ratio("mixed workload: heap / allgather_map (time)", mw[0].skipped[0] ? NAN : mw[0].total_s,
              mw[1].skipped[0] ? NAN : mw[1].total_s, 0.1);
  /* The touch-and-read step is the same work for every method and bounds
   * the total's ratio; the window calls are what the heap replaces. */
  print_ratio("mixed workload: heap / legacy_ipc (window calls only)", mw[0].skipped[0] ? NAN : mw[0].calls_s,
              mw[2].skipped[0] ? NAN : mw[2].calls_s, 0.1);
  print_ratio("growth step / raw-driver floor", grow_r.median, raw_r.median, 1.1);
  fflush(stdout);
  const heap_row_t *rows[] = {&floor_r, &alloc_r, &both_r, &map_r, &ipc_r, &grow_r, &raw_r};
  if (json) write_json(c, json, rows, (int)(sizeof rows / sizeof *rows), names, mw, windows);
}
