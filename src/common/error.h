/* Thread-local "last error" with context, and helpers that build it. */
#ifndef VMMIPC_COMMON_ERROR_H
#define VMMIPC_COMMON_ERROR_H

#include <stdarg.h>
#include "vmmipc.h"

#ifdef __cplusplus
extern "C" {
#endif

#define VMMIPC__ERRMSG_MAX 1024
#define VMMIPC__ERROP_MAX 64 /* the public call's name */
/* The highest result code this library knows (codes from peers above it
 * are reported as VMMIPC_ERR_PEER). */
#define VMMIPC__RESULT_MAX VMMIPC_ERR_ABORTED

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
/* Replace the message verbatim (used to copy a peer's message); the rest of
 * the state stays. */
void vmmipc__error_set_raw(const char *msg);
void vmmipc__error_clear(void);
/* VMMIPC_ERR_SYSTEM becomes VMMIPC_ERR_RESOURCE for EMFILE and ENFILE (a
 * limit); every other pair is returned as it is. */
vmmipc_result_t vmmipc__errno_result(vmmipc_result_t rc, int err);

/* The structured record of the last failure (vmmipc_last_error_info). Each
 * message setter above resets it to its code, rank -1, no driver or OS
 * error (vmmipc__error_errno records its errno); these add what the caller
 * knows. Call them after the setter. */
void vmmipc__error_rank(int rank);             /* the comm rank to blame, or -1 */
void vmmipc__error_code(vmmipc_result_t rc);   /* when the returned code differs from the setter's */
void vmmipc__error_driver(int cu_result);      /* the CUresult of a failed driver call */
void vmmipc__error_os(int err);                /* the errno of a failed OS call */
void vmmipc__error_op(const char *op);         /* the public call; default: the message's leading vmmipc_ name */
typedef struct vmmipc__error_state {
  vmmipc_result_t code;
  int rank, driver_error, os_error;
} vmmipc__error_state_t;
/* Save and restore the record (with vmmipc__error_set_raw for the text). */
void vmmipc__error_get(vmmipc__error_state_t *out);
void vmmipc__error_put(const vmmipc__error_state_t *in);
/* The whole record, message and operation included: kept across a step
 * whose own errors are not the caller's (a cleanup, a best-effort tell). */
typedef struct vmmipc__error_saved {
  vmmipc__error_state_t st;
  char op[VMMIPC__ERROP_MAX];
  char msg[VMMIPC__ERRMSG_MAX];
} vmmipc__error_saved_t;
void vmmipc__error_save(vmmipc__error_saved_t *out);
void vmmipc__error_restore(const vmmipc__error_saved_t *in);
/* Name of an errno value ("EMFILE"), or "errno N". */
const char *vmmipc__errno_name(int err);

#ifdef __cplusplus
}
#endif
#endif
