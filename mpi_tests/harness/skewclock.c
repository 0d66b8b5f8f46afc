/* A wall clock that is off on one rank, for tests of "decided by messages,
 * never by clocks" (test_heap's .skew entry): preloaded (LD_PRELOAD), it
 * adds VMMIPC_TEST_SKEW_S seconds to CLOCK_REALTIME in the rank named by
 * VMMIPC_TEST_SKEW_RANK (the launcher's rank variable: Open MPI's or PMI's),
 * as a node whose NTP went wrong would. Monotonic clocks are left alone. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <time.h>

static long skew_s(void) {
  static long skew = -1;
  if (skew < 0) {
    const char *want = getenv("VMMIPC_TEST_SKEW_RANK"), *s = getenv("VMMIPC_TEST_SKEW_S");
    const char *me = getenv("OMPI_COMM_WORLD_RANK");
    if (!me) me = getenv("PMI_RANK");
    skew = want && s && me && atoi(want) == atoi(me) ? atol(s) : 0;
  }
  return skew;
}

int clock_gettime(clockid_t id, struct timespec *ts) {
  static int (*real)(clockid_t, struct timespec *);
  if (!real) real = (int (*)(clockid_t, struct timespec *))dlsym(RTLD_NEXT, "clock_gettime");
  int rc = real(id, ts);
  if (!rc && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE)) ts->tv_sec += skew_s();
  return rc;
}
