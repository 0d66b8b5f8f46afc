/* The agreement step that makes collectives all-or-nothing: one MPI_Allreduce
 * (MINLOC of the failing rank, carrying its result code), and on failure one
 * MPI_Bcast of the failing rank's message. */
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "comm/comm.h"
#include "common/error.h"

vmmipc_result_t vmmipc__mpi_error(int mpi_rc, const char *fmt, ...) {
  char call[512], text[MPI_MAX_ERROR_STRING] = "";
  int len = 0;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(call, sizeof call, fmt, ap);
  va_end(ap);
  if (MPI_Error_string(mpi_rc, text, &len) != MPI_SUCCESS) snprintf(text, sizeof text, "MPI error %d", mpi_rc);
  return vmmipc__error(VMMIPC_ERR_MPI, "%s failed: %s; hint: check that every rank of the communicator made the "
                       "same collective call", call, text);
}

vmmipc_result_t vmmipc__agree_on(MPI_Comm comm, int rank, vmmipc_result_t local, const char *op) {
  struct {
    int value;
    int index;
  } in, out;
  in.value = local ? rank : INT_MAX;
  in.index = (int)local;
  int rc = MPI_Allreduce(&in, &out, 1, MPI_2INT, MPI_MINLOC, comm);
  if (rc != MPI_SUCCESS) return vmmipc__mpi_error(rc, "%s: agreement MPI_Allreduce", op);
  if (out.value == INT_MAX) return VMMIPC_SUCCESS;
  char msg[VMMIPC__ERRMSG_MAX];
  if (rank == out.value) snprintf(msg, sizeof msg, "%s", vmmipc_last_error());
  rc = MPI_Bcast(msg, (int)sizeof msg, MPI_CHAR, out.value, comm);
  if (rc != MPI_SUCCESS) return vmmipc__mpi_error(rc, "%s: agreement MPI_Bcast from rank %d", op, out.value);
  msg[sizeof msg - 1] = '\0';
  char full[VMMIPC__ERRMSG_MAX];
  snprintf(full, sizeof full, "%s failed on rank %d (%s): %s", op, out.value,
           vmmipc_strerror((vmmipc_result_t)out.index), msg);
  vmmipc__error_set_raw(full);
  return (vmmipc_result_t)out.index;
}

vmmipc_result_t vmmipc__agree(struct vmmipc_comm *c, vmmipc_result_t local, const char *op) {
  double t0 = vmmipc__now();
  vmmipc_result_t r = vmmipc__agree_on(c->dup, c->rank, local, op);
  c->timing.agree_s += vmmipc__now() - t0;
  return r;
}
