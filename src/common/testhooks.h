/* Failure injection for the test suites. Compiled in only when the library is
 * built for tests (VMMIPC_TEST_HOOKS, the vmmipc_testlib target); in the
 * installed library VMMIPC__INJECT() is the constant 0. */
#ifndef VMMIPC_COMMON_TESTHOOKS_H
#define VMMIPC_COMMON_TESTHOOKS_H

#ifdef __cplusplus
extern "C" {
#endif

#ifdef VMMIPC_TEST_HOOKS
/* Make the nth (1-based) next occurrence of `step` in this process fail;
 * step NULL or nth <= 0 disarms. Steps: "alloc", "reserve", "export",
 * "import", "map", "access", "transfer", "args". */
void vmmipc__test_fail_at(const char *step, int nth);
/* Whether this occurrence of `step` must fail (counts occurrences). */
int vmmipc__test_should_fail(const char *step);
#define VMMIPC__INJECT(step) vmmipc__test_should_fail(step)
#else
#define VMMIPC__INJECT(step) 0
#endif

#ifdef __cplusplus
}
#endif
#endif
