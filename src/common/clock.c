/* Monotonic clock for phase timings. */
#include "common/clock.h"

#include <time.h>

double vmmipc__now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
