/* Median, percentiles, min, max, mean. */
#include "common/stats.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int bench_cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double bench_pct(const double *sorted, int n, double p) {
  double pos = p * (double)(n - 1);
  int lo = (int)floor(pos);
  int hi = lo + 1 < n ? lo + 1 : lo;
  double frac = pos - (double)lo;
  return sorted[lo] + (sorted[hi] - sorted[lo]) * frac;
}

void bench_stats(const double *v, int n, bench_stats_t *out) {
  out->n = n;
  if (n <= 0) {
    out->median = out->p10 = out->p90 = out->min = out->max = out->mean = NAN;
    return;
  }
  double *s = malloc((size_t)n * sizeof *s);
  if (!s) abort();
  memcpy(s, v, (size_t)n * sizeof *s);
  qsort(s, (size_t)n, sizeof *s, bench_cmp_double);
  double sum = 0;
  for (int i = 0; i < n; i++) sum += s[i];
  out->min = s[0];
  out->max = s[n - 1];
  out->mean = sum / n;
  out->median = bench_pct(s, n, 0.5);
  out->p10 = bench_pct(s, n, 0.1);
  out->p90 = bench_pct(s, n, 0.9);
  free(s);
}
