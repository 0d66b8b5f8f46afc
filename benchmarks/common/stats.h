/* Summary statistics of repeated measurements. */
#ifndef VMMIPC_BENCH_STATS_H
#define VMMIPC_BENCH_STATS_H

typedef struct bench_stats {
  int n;
  double median, p10, p90, min, max, mean;
} bench_stats_t;

/* Percentiles interpolate linearly between order statistics; n == 0 gives
 * NaN everywhere. v is not modified. */
void bench_stats(const double *v, int n, bench_stats_t *out);

#endif
