/* The library's mapping collectives, timed around the call, with the
 * phases of vmmipc_comm_last_timing. Buffers of N chunks are made with
 * vmmipc_alloc of one chunk and N-1 vmmipc_grow calls (one chunk each). */
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
  size_t size;
  vmmipc_buf_t own;   /* allgather: every rank; bcast: the root */
  vmmipc_buf_t *bufs; /* scatter: [ranks] at the root, NULL for the root itself */
  int check;          /* check the mapping after this call */
  char error[SETUP_REASON_LEN];
} lib_arg_t;

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

static void lib_rep(setup_ctx_t *c, void *argp, double v[SF_N]) {
  lib_arg_t *a = argp;
  int me = c->node->rank;
  vmmipc_access_t access = VMMIPC_ACCESS_DEFAULT;
  vmmipc_win_t win = NULL;
  vmmipc_buf_t out = NULL;
  vmmipc_result_t r = VMMIPC_SUCCESS;
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = bench_now();
  switch (a->coll) {
    case SC_ALLGATHER: r = vmmipc_allgather_map(c->comm, a->own, &access, &win); break;
    case SC_BCAST: r = vmmipc_bcast_map(c->comm, me == c->root ? a->own : NULL, c->root, &access, &out); break;
    default: r = vmmipc_scatter_map(c->comm, me == c->root ? a->bufs : NULL, c->root, &access, &out); break;
  }
  v[SF_WALL] = bench_now() - t0;
  if (r != VMMIPC_SUCCESS)
    bench_fatal("vmmipc_%s of %zu bytes failed: %s: %s", setup_coll_names[a->coll], a->size, vmmipc_strerror(r),
                vmmipc_last_error());
  vmmipc_timing_t t = VMMIPC_TIMING_INIT;
  VCHECK(vmmipc_comm_last_timing(c->comm, &t));
  v[SF_EXPORT] = t.export_s;
  v[SF_TRANSFER] = t.transfer_s;
  v[SF_IMPORT] = t.import_s;
  v[SF_MAP] = t.map_s;
  v[SF_ACCESS] = t.access_s;
  v[SF_AGREE] = t.agree_s;
  v[SF_TOTAL] = t.total_s;
  if (a->check) {
    lib_check(c, a, win, out);
    a->check = 0;
  }
  if (win) VCHECK(vmmipc_win_free(win));
  if (out) VCHECK(vmmipc_buf_free(out));
}

void setup_run_lib(setup_ctx_t *c, const int *colls, size_t chunk, int chunks) {
  int me = c->node->rank, n = c->node->size;
  size_t size = chunk * (size_t)chunks;
  vmmipc_buf_t own = lib_build(chunk, chunks, setup_own_mark(me));
  for (int k = 0; k < SC_N; k++) {
    if (!colls[k]) continue;
    lib_arg_t a;
    memset(&a, 0, sizeof a);
    a.coll = (setup_coll_t)k;
    a.size = size;
    a.own = own;
    a.check = 1;
    if (k == SC_SCATTER && me == c->root) {
      a.bufs = calloc((size_t)n, sizeof *a.bufs);
      if (!a.bufs) bench_fatal("out of host memory");
      for (int r = 0; r < n; r++)
        if (r != c->root) a.bufs[r] = lib_build(chunk, chunks, setup_scatter_mark(r));
    }
    setup_result_t *res = setup_new_result(c, (setup_coll_t)k, "vmmipc", size, chunk, chunks);
    setup_measure(c, res, lib_rep, &a);
    if (a.error[0]) {
      snprintf(res->error, sizeof res->error, "%s", a.error);
      c->errors++;
    }
    for (int r = 0; a.bufs && r < n; r++)
      if (a.bufs[r]) VCHECK(vmmipc_buf_free(a.bufs[r]));
    free(a.bufs);
  }
  VCHECK(vmmipc_buf_free(own));
}
