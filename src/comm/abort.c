/* vmmipc_comm_abort: local, from any thread, as ncclCommAbort. It marks the
 * comm aborted (every wait of a call blocked on it ends within about 100 ms
 * with VMMIPC_ERR_ABORTED, and every later call fails at once), releases the
 * stream waits on its windows, and tells the node's peers (an END frame
 * on every connection), which fail at once naming this rank. The
 * sockets belong to whichever thread holds the comm: if a call is inside,
 * that thread tells the peers as it leaves (guard.c), else this one does. */
#include "comm/comm.h"

vmmipc_result_t vmmipc_comm_abort(vmmipc_comm_t c) {
  if (!c) return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "vmmipc_comm_abort: comm is NULL");
  __atomic_store_n(&c->aborted, 1, __ATOMIC_SEQ_CST);
  vmmipc__release_waits(c);
  int idle = 0;
  if (__atomic_compare_exchange_n(&c->busy, &idle, 1, 0, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED)) {
    vmmipc__tell_abort(c);
    __atomic_store_n(&c->busy, 0, __ATOMIC_SEQ_CST);
  }
  return VMMIPC_SUCCESS;
}
