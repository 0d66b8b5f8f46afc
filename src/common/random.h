/* Random bytes from the kernel, for names and ids that must not be guessed. */
#ifndef VMMIPC_COMMON_RANDOM_H
#define VMMIPC_COMMON_RANDOM_H

#include <stddef.h>

#include "vmmipc.h"

#ifdef __cplusplus
extern "C" {
#endif
/* Fills out[0..n) from getrandom(), else /dev/urandom; an error (never
 * zeros) when neither works. `what` names the use in the message. */
vmmipc_result_t vmmipc__random(void *out, size_t n, const char *what);
#ifdef __cplusplus
}
#endif
#endif
