/* Thread-local "last error" with context, and helpers that build it. */
#ifndef VMMIPC_COMMON_ERROR_H
#define VMMIPC_COMMON_ERROR_H

#include <stdarg.h>
#include "vmmipc.h"

#ifdef __cplusplus
extern "C" {
#endif

#define VMMIPC__ERRMSG_MAX 1024

#if defined(__GNUC__)
#define VMMIPC__PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define VMMIPC__PRINTF(a, b)
#endif

/* Set the thread's message to the formatted text and return `rc`. */
vmmipc_result_t vmmipc__error(vmmipc_result_t rc, const char *fmt, ...) VMMIPC__PRINTF(2, 3);
/* Same, with errno's name and text appended ("...: EMFILE (Too many open files)"). */
vmmipc_result_t vmmipc__error_errno(vmmipc_result_t rc, int err, const char *fmt, ...) VMMIPC__PRINTF(3, 4);
/* Prefix the current message with context ("chunk 2 of 3: " + old). */
void vmmipc__error_prefix(const char *fmt, ...) VMMIPC__PRINTF(1, 2);
/* Replace the message verbatim (used to copy a peer's message). */
void vmmipc__error_set_raw(const char *msg);
void vmmipc__error_clear(void);
/* Name of an errno value ("EMFILE"), or "errno N". */
const char *vmmipc__errno_name(int err);

#ifdef __cplusplus
}
#endif
#endif
