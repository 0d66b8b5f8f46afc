/* Host identity: the kernel boot id, shared by every process (and container)
 * on one kernel, which is what fd passing needs. */
#ifndef VMMIPC_COMMON_HOST_H
#define VMMIPC_COMMON_HOST_H

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

#ifdef __cplusplus
}
#endif
#endif
