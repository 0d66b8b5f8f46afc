/* What every bandwidth point shares: event timing on the context's stream,
 * and the slowest rank's time turned into a point. */
#include <math.h>

#include "bw/bw.h"
#include "common/driver.h"

void bw_events_begin(bw_ctx_t *c) { BD_CHECK(bd.cuEventRecord(c->ev0, c->stream)); }

double bw_events_end(bw_ctx_t *c) {
  BD_CHECK(bd.cuEventRecord(c->ev1, c->stream));
  BD_CHECK(bd.cuEventSynchronize(c->ev1));
  float ms = 0;
  BD_CHECK(bd.cuEventElapsedTime(&ms, c->ev0, c->ev1));
  return ms * 1e-3;
}

void bw_point_set(bw_point_t *pt, size_t size, int warmup, int iters, double secs, int bidir) {
  double slowest = 0;
  MPI_Allreduce(&secs, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  pt->size = size;
  pt->warmup = warmup;
  pt->iters = iters;
  pt->seconds = slowest;
  double bytes = (double)size * iters * (bidir ? 2 : 1);
  pt->gbps = slowest > 0 ? bytes / slowest / 1e9 : NAN;
}
