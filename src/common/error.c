/* The thread-local error state behind vmmipc_last_error() and
 * vmmipc_last_error_info(): the message, the code, the failing rank, the
 * operation and the driver or OS error of the last failure. Every setter
 * that writes a new message resets the rest; the rank, the operation and
 * the driver error are then added by whoever knows them. */
#include "common/error.h"

#include <ctype.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

struct vmmipc__errstate {
  vmmipc_result_t code;
  int rank, driver_error, os_error;
  char op[VMMIPC__ERROP_MAX]; /* "" : taken from the message's leading "vmmipc_..." */
  char msg[VMMIPC__ERRMSG_MAX];
};

static _Thread_local struct vmmipc__errstate vmmipc__st = {VMMIPC_SUCCESS, -1, 0, 0, "", ""};

const char *vmmipc_last_error(void) { return vmmipc__st.msg; }

static void vmmipc__reset(vmmipc_result_t rc) {
  vmmipc__st.code = rc;
  vmmipc__st.rank = -1;
  vmmipc__st.driver_error = 0;
  vmmipc__st.os_error = 0;
  vmmipc__st.op[0] = '\0';
}

void vmmipc__error_clear(void) {
  vmmipc__reset(VMMIPC_SUCCESS);
  vmmipc__st.msg[0] = '\0';
}

void vmmipc__error_set_raw(const char *msg) {
  snprintf(vmmipc__st.msg, sizeof vmmipc__st.msg, "%s", msg ? msg : "");
}

void vmmipc__error_rank(int rank) { vmmipc__st.rank = rank < 0 ? -1 : rank; }

void vmmipc__error_code(vmmipc_result_t rc) { vmmipc__st.code = rc; }

void vmmipc__error_driver(int cu_result) { vmmipc__st.driver_error = cu_result; }

void vmmipc__error_os(int err) { vmmipc__st.os_error = err; }

void vmmipc__error_op(const char *op) { snprintf(vmmipc__st.op, sizeof vmmipc__st.op, "%s", op ? op : ""); }

void vmmipc__error_get(vmmipc__error_state_t *out) {
  out->code = vmmipc__st.code;
  out->rank = vmmipc__st.rank;
  out->driver_error = vmmipc__st.driver_error;
  out->os_error = vmmipc__st.os_error;
}

void vmmipc__error_put(const vmmipc__error_state_t *in) {
  vmmipc__st.code = in->code;
  vmmipc__st.rank = in->rank;
  vmmipc__st.driver_error = in->driver_error;
  vmmipc__st.os_error = in->os_error;
}

void vmmipc__error_save(vmmipc__error_saved_t *out) {
  vmmipc__error_get(&out->st);
  memcpy(out->op, vmmipc__st.op, sizeof out->op);
  memcpy(out->msg, vmmipc__st.msg, sizeof out->msg);
}

void vmmipc__error_restore(const vmmipc__error_saved_t *in) {
  vmmipc__error_put(&in->st);
  memcpy(vmmipc__st.op, in->op, sizeof vmmipc__st.op);
  memcpy(vmmipc__st.msg, in->msg, sizeof vmmipc__st.msg);
}

vmmipc_result_t vmmipc__error(vmmipc_result_t rc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(vmmipc__st.msg, sizeof vmmipc__st.msg, fmt, ap);
  va_end(ap);
  vmmipc__reset(rc);
  return rc;
}

vmmipc_result_t vmmipc__error_errno(vmmipc_result_t rc, int err, const char *fmt, ...) {
  char head[VMMIPC__ERRMSG_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(head, sizeof head, fmt, ap);
  va_end(ap);
  rc = vmmipc__errno_result(rc, err);
  snprintf(vmmipc__st.msg, sizeof vmmipc__st.msg, "%s: %s (%s)", head, vmmipc__errno_name(err), strerror(err));
  vmmipc__reset(rc);
  vmmipc__st.os_error = err;
  return rc;
}

vmmipc_result_t vmmipc__errno_result(vmmipc_result_t rc, int err) {
  if (rc == VMMIPC_ERR_SYSTEM && (err == EMFILE || err == ENFILE)) return VMMIPC_ERR_RESOURCE;
  return rc;
}

void vmmipc__error_prefix(const char *fmt, ...) {
  char head[VMMIPC__ERRMSG_MAX], old[VMMIPC__ERRMSG_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(head, sizeof head, fmt, ap);
  va_end(ap);
  snprintf(old, sizeof old, "%s", vmmipc__st.msg);
  snprintf(vmmipc__st.msg, sizeof vmmipc__st.msg, "%s%s", head, old);
}

/* The public call a message names first: its leading "vmmipc_xxx" word, or
 * the one after the "<context>: " prefixes inner layers add. */
static void vmmipc__op_from_message(char *out, size_t cap) {
  out[0] = '\0';
  for (const char *p = vmmipc__st.msg; (p = strstr(p, "vmmipc_")) != NULL; p++) {
    if (p != vmmipc__st.msg && (isalnum((unsigned char)p[-1]) || p[-1] == '_')) continue;
    size_t n = 0;
    while (p[n] && (isalnum((unsigned char)p[n]) || p[n] == '_')) n++;
    /* "vmmipc__x" is internal; a call that opens the message is the one
     * ("vmmipc_send to rank 1: ..."); one further in is taken only when a
     * ':' or " failed" follows (a call named in a hint is not). */
    if (p[7] == '_' ||
        (p != vmmipc__st.msg && p[n] != ':' && strncmp(p + n, " failed", 7) != 0))
      continue;
    if (n >= cap) n = cap - 1;
    memcpy(out, p, n);
    out[n] = '\0';
    return;
  }
}

vmmipc_result_t vmmipc_last_error_info(vmmipc_error_info_t *info) {
  static _Thread_local char op[VMMIPC__ERROP_MAX];
  if (!info || info->struct_size < offsetof(vmmipc_error_info_t, code) + sizeof info->code)
    return VMMIPC_ERR_INVALID_ARG; /* the record of the last failure stays as it is */
  if (vmmipc__st.op[0])
    snprintf(op, sizeof op, "%s", vmmipc__st.op);
  else
    vmmipc__op_from_message(op, sizeof op);
  vmmipc_error_info_t v;
  v.struct_size = info->struct_size; /* the caller's, as the stats calls leave it */
  v.code = vmmipc__st.code;
  v.rank = vmmipc__st.code ? vmmipc__st.rank : -1;
  v.driver_error = vmmipc__st.driver_error;
  v.os_error = vmmipc__st.os_error;
  v.operation = op;
  v.message = vmmipc__st.msg;
  memcpy(info, &v, info->struct_size < sizeof v ? info->struct_size : sizeof v);
  return VMMIPC_SUCCESS;
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
