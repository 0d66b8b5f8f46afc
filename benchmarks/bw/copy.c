/* Copy-engine and SM-kernel copies to and from a peer's mapped buffer,
 * timed with CUDA events on the copying rank. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bw/bw.h"
#include "common/args.h"
#include "common/driver.h"

void bw_iters(const bw_ctx_t *c, const bw_series_t *s, size_t size, int *warmup, int *iters) {
  if (c->iters_override > 0) {
    *iters = c->iters_override;
    *warmup = c->warmup_override > 0 ? c->warmup_override : (*iters + 9) / 10;
  } else {
    int small = size <= BENCH_MiB;
    *iters = small ? 100 : 20;
    *warmup = c->warmup_override > 0 ? c->warmup_override : (small ? 10 : 2);
  }
  if (s && s->engine == BW_STAGED && size >= 16 * BENCH_MiB) {
    if (*iters > 5) *iters = 5;
    if (*warmup > 1) *warmup = 1;
  }
}

static CUresult bw_issue(const bw_ctx_t *c, bw_engine_t e, CUdeviceptr dst, CUdeviceptr src, size_t n) {
  if (e == BW_SM) return bw_sm_copy(dst, src, n, c->stream);
  return bd.cuMemcpyDtoDAsync(dst, src, n, c->stream);
}

/* Where this rank copies from and to, as the actor or (bidir) the peer. */
static void bw_endpoints(const bw_series_t *s, int me, int actor, int peer, CUdeviceptr *dst, CUdeviceptr *src) {
  int other = me == actor ? peer : actor;
  CUdeviceptr remote = s->ptrs->remote[other], local = s->ptrs->local;
  if (s->op == BW_READ) {
    *dst = local;
    *src = remote;
  } else {
    *dst = remote;
    *src = local;
  }
}

void bw_copy_point(bw_ctx_t *c, const bw_series_t *s, int bidir, int actor, int peer, size_t size, int warmup,
                   int iters, bw_point_t *pt) {
  int me = c->node->rank;
  int active = me == actor || (bidir && me == peer);
  CUdeviceptr dst = 0, src = 0;
  if (active) bw_endpoints(s, me, actor, peer, &dst, &src);
  MPI_Barrier(MPI_COMM_WORLD);
  if (active) {
    for (int i = 0; i < warmup; i++) BD_CHECK(bw_issue(c, s->engine, dst, src, size));
    BD_CHECK(bd.cuStreamSynchronize(c->stream));
  }
  MPI_Barrier(MPI_COMM_WORLD);
  double secs = 0;
  if (active) {
    bw_events_begin(c);
    for (int i = 0; i < iters; i++) BD_CHECK(bw_issue(c, s->engine, dst, src, size));
    secs = bw_events_end(c);
  }
  bw_point_set(pt, size, warmup, iters, secs, bidir);
}

/* Fill patterns: exposed buffers 0x30 + rank, private buffers 0xa0 + rank. */
static unsigned char bw_own_byte(int rank) { return (unsigned char)(0x30 + rank % 64); }
static unsigned char bw_local_byte(int rank) { return (unsigned char)(0xa0 + rank % 64); }

static int bw_expect(CUdeviceptr p, size_t n, unsigned char want, size_t *bad_at, unsigned char *bad) {
  unsigned char *h = malloc(n);
  if (!h) bench_fatal("out of host memory");
  BD_CHECK(bd.cuMemcpyDtoH(h, p, n));
  int ok = 1;
  for (size_t i = 0; i < n; i++)
    if (h[i] != want) {
      *bad_at = i;
      *bad = h[i];
      ok = 0;
      break;
    }
  free(h);
  return ok;
}

void bw_copy_check(bw_ctx_t *c, bw_series_t *s) {
  int me = c->node->rank, a = c->a, b = c->b;
  int in_pair = me == a || me == b;
  size_t n = c->check_size;
  const bw_ptrs_t *p = s->ptrs;
  if (in_pair) {
    BD_CHECK(bd.cuMemsetD8(p->own, bw_own_byte(me), n));
    BD_CHECK(bd.cuMemsetD8(p->local, bw_local_byte(me), n));
    BD_CHECK(bd.cuCtxSynchronize());
  }
  MPI_Barrier(MPI_COMM_WORLD);
  /* Both ranks of the pair copy at once, as in the bidirectional runs. */
  if (in_pair) {
    CUdeviceptr dst, src;
    bw_endpoints(s, me, a, b, &dst, &src);
    BD_CHECK(bw_issue(c, s->engine, dst, src, n));
    BD_CHECK(bd.cuStreamSynchronize(c->stream));
  }
  MPI_Barrier(MPI_COMM_WORLD);
  char why[BW_REASON_LEN] = "";
  if (in_pair) {
    int other = me == a ? b : a;
    size_t at = 0;
    unsigned char got = 0;
    /* read: my private buffer holds the peer's exposed bytes; write: my
     * exposed buffer holds the peer's private bytes. */
    CUdeviceptr where = s->op == BW_READ ? p->local : p->own;
    unsigned char want = s->op == BW_READ ? bw_own_byte(other) : bw_local_byte(other);
    if (!bw_expect(where, n, want, &at, &got))
      snprintf(why, sizeof why, "data check failed: after a %zu-byte %s, byte %zu is 0x%02x, expected 0x%02x", n,
               s->op == BW_READ ? "read" : "write", at, got, want);
  }
  if (bench_agree_skip(why, sizeof why)) {
    snprintf(s->error, sizeof s->error, "%s", why);
    c->errors++;
  }
}
