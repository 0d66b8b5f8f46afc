/* The thread-local error message behind vmmipc_last_error(). */
#include "common/error.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char vmmipc__msg[VMMIPC__ERRMSG_MAX];

const char *vmmipc_last_error(void) { return vmmipc__msg; }

void vmmipc__error_clear(void) { vmmipc__msg[0] = '\0'; }

void vmmipc__error_set_raw(const char *msg) {
  snprintf(vmmipc__msg, sizeof vmmipc__msg, "%s", msg ? msg : "");
}

vmmipc_result_t vmmipc__error(vmmipc_result_t rc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(vmmipc__msg, sizeof vmmipc__msg, fmt, ap);
  va_end(ap);
  return rc;
}

vmmipc_result_t vmmipc__error_errno(vmmipc_result_t rc, int err, const char *fmt, ...) {
  char head[VMMIPC__ERRMSG_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(head, sizeof head, fmt, ap);
  va_end(ap);
  snprintf(vmmipc__msg, sizeof vmmipc__msg, "%s: %s (%s)", head, vmmipc__errno_name(err), strerror(err));
  return rc;
}

void vmmipc__error_prefix(const char *fmt, ...) {
  char head[VMMIPC__ERRMSG_MAX], old[VMMIPC__ERRMSG_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(head, sizeof head, fmt, ap);
  va_end(ap);
  snprintf(old, sizeof old, "%s", vmmipc__msg);
  snprintf(vmmipc__msg, sizeof vmmipc__msg, "%s%s", head, old);
}

const char *vmmipc__errno_name(int err) {
  switch (err) {
#define VMMIPC__E(n) case n: return #n;
    VMMIPC__E(EPERM) VMMIPC__E(ENOENT) VMMIPC__E(ESRCH) VMMIPC__E(EINTR) VMMIPC__E(EIO)
    VMMIPC__E(EBADF) VMMIPC__E(EAGAIN) VMMIPC__E(ENOMEM) VMMIPC__E(EACCES) VMMIPC__E(EFAULT)
    VMMIPC__E(EEXIST) VMMIPC__E(ENOTDIR) VMMIPC__E(EINVAL) VMMIPC__E(ENFILE) VMMIPC__E(EMFILE)
    VMMIPC__E(ENOSPC) VMMIPC__E(EPIPE) VMMIPC__E(ENAMETOOLONG) VMMIPC__E(ENOTSOCK)
    VMMIPC__E(EMSGSIZE) VMMIPC__E(EADDRINUSE) VMMIPC__E(ECONNRESET) VMMIPC__E(ENOBUFS)
    VMMIPC__E(ETOOMANYREFS) VMMIPC__E(ETIMEDOUT) VMMIPC__E(ECONNREFUSED) VMMIPC__E(ENOTCONN)
    VMMIPC__E(ENOSYS) VMMIPC__E(EOPNOTSUPP)
#undef VMMIPC__E
    default: {
      static _Thread_local char buf[32];
      snprintf(buf, sizeof buf, "errno %d", err);
      return buf;
    }
  }
}
