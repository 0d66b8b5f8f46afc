/* Failure injection state (test builds only). */
#include "common/testhooks.h"

#ifdef VMMIPC_TEST_HOOKS
#include <stdio.h>
#include <string.h>
#include <time.h>

static _Thread_local char vmmipc__fail_step[32];
static _Thread_local int vmmipc__fail_countdown;

void vmmipc__test_fail_at(const char *step, int nth) {
  if (!step || nth <= 0) {
    vmmipc__fail_step[0] = '\0';
    vmmipc__fail_countdown = 0;
    return;
  }
  snprintf(vmmipc__fail_step, sizeof vmmipc__fail_step, "%s", step);
  vmmipc__fail_countdown = nth;
}

int vmmipc__test_fail_pending(void) { return vmmipc__fail_countdown > 0; }

int vmmipc__test_should_fail(const char *step) {
  if (vmmipc__fail_countdown <= 0 || strcmp(step, vmmipc__fail_step) != 0) return 0;
  if (--vmmipc__fail_countdown > 0) return 0;
  vmmipc__fail_step[0] = '\0';
  return 1;
}
static int vmmipc__stalling; /* threads inside a stall now (__atomic builtins) */

/* Sleeps us microseconds, signals or not. */
static void nap_us(long long us) {
  struct timespec ts = {(time_t)(us / 1000000), (long)(us % 1000000) * 1000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

void vmmipc__test_sleep_ms(int ms) {
  __atomic_fetch_add(&vmmipc__stalling, 1, __ATOMIC_SEQ_CST);
  nap_us(1000LL * ms);
  __atomic_fetch_sub(&vmmipc__stalling, 1, __ATOMIC_SEQ_CST);
}

int vmmipc__test_stalling(void) { return __atomic_load_n(&vmmipc__stalling, __ATOMIC_SEQ_CST); }

void vmmipc__test_late(int timeout_ms) { vmmipc__test_sleep_ms(timeout_ms * 3 / 2); }

static _Thread_local void (*vmmipc__inside_fn)(void *);
static _Thread_local void *vmmipc__inside_arg;

void vmmipc__test_on_inside(void (*fn)(void *), void *arg) {
  vmmipc__inside_fn = fn;
  vmmipc__inside_arg = arg;
}

void vmmipc__test_inside(void) {
  void (*fn)(void *) = vmmipc__inside_fn;
  vmmipc__inside_fn = NULL;
  if (fn) fn(vmmipc__inside_arg);
}

static _Thread_local void (*vmmipc__peeked_fn)(void *);
static _Thread_local void *vmmipc__peeked_arg;

void vmmipc__test_on_peeked(void (*fn)(void *), void *arg) {
  vmmipc__peeked_fn = fn;
  vmmipc__peeked_arg = arg;
}

void vmmipc__test_peeked(void) {
  void (*fn)(void *) = vmmipc__peeked_fn;
  vmmipc__peeked_fn = NULL;
  if (fn) fn(vmmipc__peeked_arg);
}

static int vmmipc__pool_cap;

void vmmipc__test_pool_slices(int max) { __atomic_store_n(&vmmipc__pool_cap, max > 0 ? max : 0, __ATOMIC_RELAXED); }

int vmmipc__test_pool_cap(void) { return __atomic_load_n(&vmmipc__pool_cap, __ATOMIC_RELAXED); }

static int vmmipc__batch_cap;

void vmmipc__test_barrier_batch(int max) { __atomic_store_n(&vmmipc__batch_cap, max > 0 ? max : 0, __ATOMIC_RELAXED); }

int vmmipc__test_barrier_batch_cap(void) { return __atomic_load_n(&vmmipc__batch_cap, __ATOMIC_RELAXED); }

static int vmmipc__record_pause;

void vmmipc__test_record_pause_us(int us) { __atomic_store_n(&vmmipc__record_pause, us > 0 ? us : 0, __ATOMIC_RELAXED); }

void vmmipc__test_record_pause(void) {
  int us = __atomic_load_n(&vmmipc__record_pause, __ATOMIC_RELAXED);
  if (us) nap_us(us);
}
#else
/* Keeps the translation unit non-empty in release builds. */
typedef int vmmipc__testhooks_unused;
#endif
