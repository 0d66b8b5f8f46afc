/* Monotonic time in seconds, for the phase timings. */
#ifndef VMMIPC_COMMON_CLOCK_H
#define VMMIPC_COMMON_CLOCK_H

#ifdef __cplusplus
extern "C" {
#endif
double vmmipc__now(void);
#ifdef __cplusplus
}
#endif
#endif
