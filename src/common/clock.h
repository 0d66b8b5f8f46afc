/* The one monotonic clock of the library: phase timings and deadlines. */
#ifndef VMMIPC_COMMON_CLOCK_H
#define VMMIPC_COMMON_CLOCK_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif
/* CLOCK_MONOTONIC in seconds (timings). */
double vmmipc__now(void);
/* CLOCK_MONOTONIC in milliseconds (deadlines). */
int64_t vmmipc__now_ms(void);
#ifdef __cplusplus
}
#endif
#endif
