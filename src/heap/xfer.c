/* The one round of a heap call: every rank's input (its result so far
 * first) to every rank, with a bounded wait, so that each rank can decide
 * alone and all decide alike. */
#include <stdio.h>
#include <string.h>

#include "common/le.h"
#include "common/testhooks.h"
#include "heap/heap.h"

vmmipc_result_t vmmipc__heap_allgather(struct vmmipc_comm *c, unsigned char **bufs, size_t len, const char *op) {
  unsigned char *mine = *bufs, *all = *bufs + len;
  if (c->size == 1) {
    memcpy(all, mine, len);
    return VMMIPC_SUCCESS;
  }
  if (VMMIPC__INJECT("agree")) { /* a rank that never enters the call */
    vmmipc__error(VMMIPC_ERR_TIMEOUT, "%s: injected: this rank skipped the call", op);
    vmmipc__break(c);
    return VMMIPC_ERR_TIMEOUT;
  }
  double t0 = vmmipc__now();
  MPI_Request req = MPI_REQUEST_NULL;
  int mrc = MPI_Iallgather(mine, (int)len, MPI_BYTE, all, (int)len, MPI_BYTE, c->dup, &req);
  int w = mrc == MPI_SUCCESS ? vmmipc__mpi_wait(&req, 1, vmmipc__now_ms() + c->timeout_ms, &mrc) : -1;
  c->timing.agree_s += vmmipc__now() - t0;
  if (w == 0) return VMMIPC_SUCCESS;
  vmmipc_result_t r;
  if (w < 0) {
    r = vmmipc__mpi_error(mrc, "%s: MPI_Iallgather of the ranks' inputs", op);
  } else {
    vmmipc__mpi_abandon(&req, 1, 0, *bufs); /* MPI may still write there */
    *bufs = NULL;
    /* Which ranks are missing: the agreement names them (and breaks the comm). */
    vmmipc__error(VMMIPC_ERR_TIMEOUT, "%s: not every rank came within %d ms", op, c->timeout_ms);
    r = vmmipc__agree(c, VMMIPC_ERR_TIMEOUT, 0, op);
  }
  vmmipc__break(c);
  return r ? r : VMMIPC_ERR_TIMEOUT;
}

vmmipc_result_t vmmipc__heap_verdict(struct vmmipc_comm *c, const unsigned char *all, size_t len, const char *op) {
  for (int q = 0; q < c->size; q++) {
    vmmipc_result_t code = (vmmipc_result_t)vmmipc__get32(all + (size_t)q * len);
    if (!code) continue;
    if (q == c->rank) {
      vmmipc__error_prefix("%s failed on rank %d (%s): ", op, q, vmmipc_strerror(code));
    } else {
      vmmipc__error(code, "%s failed on rank %d (%s); that rank's vmmipc_last_error() says why", op, q,
                    vmmipc_strerror(code));
    }
    return code;
  }
  return VMMIPC_SUCCESS;
}
