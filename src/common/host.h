/* Host identity: the kernel boot id, shared by every process (and container)
 * on one kernel, which is what fd passing needs. */
#ifndef VMMIPC_COMMON_HOST_H
#define VMMIPC_COMMON_HOST_H

#include <stdint.h>

#include "vmmipc.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Read once per process (thread-safe) and cached. */
vmmipc_result_t vmmipc__host_id(unsigned char out[16]);
/* Number of open fds of this process (from /proc/self/fd), or -1. */
int vmmipc__fd_count(void);
/* Whether the process is at its RLIMIT_NOFILE; *limit gets the soft limit. */
int vmmipc__fd_limit_reached(long *limit);
/* The fds the export cache holds, process-wide (the export cache adds and
 * drops them; the fd-limit messages report them). */
void vmmipc__cached_fds_add(long delta);
long vmmipc__cached_fds(void);
/* Imported chunks that mapping caches hold, process-wide (the mapping cache
 * adds and drops them: on a driver that keeps an fd per import, as the CPU
 * stand-in does, they are fds too). */
void vmmipc__mapcache_chunks_add(long delta);
long vmmipc__mapcache_chunks(void);
/* "; N fds are held by the export cache (...)" and "; the mapping caches
 * hold M imported chunk(s) (...)", each left out while zero: appended to
 * fd-limit messages. Thread-local storage. */
const char *vmmipc__fd_limit_note(void);
/* The same, not counting `closing` export-cache fds that the failing call
 * is about to close again. */
const char *vmmipc__fd_limit_note_less(long closing);
/* A random nonzero value fixed for this process (buffer identities). */
uint64_t vmmipc__process_nonce(void);

#ifdef __cplusplus
}
#endif
#endif
