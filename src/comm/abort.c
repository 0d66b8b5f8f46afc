/* vmmipc_comm_abort: local, from any thread, as ncclCommAbort. It marks the
 * comm aborted (every wait of a call blocked on it ends within about 100 ms
 * with VMMIPC_ERR_ABORTED, and every later call fails at once), releases the
 * stream waits on its windows, tells the node's peers (an END frame on
 * every connection), which fail at once naming this rank, and refuses
 * what they send it after that (it would hold their memory: guard.c,
 * vmmipc__seal_failed). The sockets belong to whichever thread holds the
 * comm: if a call is inside, that thread tells the peers as it leaves
 * (guard.c), else this one does, and tells the ranks off its node over MPI
 * too where MPI allows this thread a call (vmmipc__tell_aborted_unasked):
 * an aborted rank 0, or a rank alone on its node, reaches them without a
 * further call.
 *
 * Lifetime: an abort may run while vmmipc_comm_destroy is blocked on
 * another thread, and that destroy then frees the comm. Live comms are in a
 * registry: an abort finds its comm there (by address, touching nothing of
 * it) and counts itself in under the registry's lock; the free takes the
 * comm out of the registry and then waits until nothing is counted in it.
 * A call that lets the comm go counts itself in the same way for the few
 * steps it takes after (vmmipc__linger): a destroy on another thread may
 * take the comm at once. */
#include <pthread.h>

#include "comm/comm.h"
#include "common/testhooks.h"

static pthread_mutex_t live_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t live_cv = PTHREAD_COND_INITIALIZER;
static struct vmmipc_comm *live_head; /* live_mu */

void vmmipc__live_add(struct vmmipc_comm *c) {
  pthread_mutex_lock(&live_mu);
  c->live_next = live_head;
  live_head = c;
  pthread_mutex_unlock(&live_mu);
}

void vmmipc__live_remove(struct vmmipc_comm *c) {
  pthread_mutex_lock(&live_mu);
  struct vmmipc_comm **pp = &live_head;
  while (*pp && *pp != c) pp = &(*pp)->live_next;
  if (*pp) *pp = c->live_next;
  while (c->lingering > 0) pthread_cond_wait(&live_cv, &live_mu);
  pthread_mutex_unlock(&live_mu);
}

void vmmipc__linger(struct vmmipc_comm *c) {
  pthread_mutex_lock(&live_mu);
  c->lingering++;
  pthread_mutex_unlock(&live_mu);
}

void vmmipc__unlinger(struct vmmipc_comm *c) {
  pthread_mutex_lock(&live_mu);
  if (--c->lingering == 0) pthread_cond_broadcast(&live_cv);
  pthread_mutex_unlock(&live_mu);
}

vmmipc_result_t vmmipc__live_enter(struct vmmipc_comm *c, const char *op) {
  if (!c) return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "%s: comm is NULL", op);
  pthread_mutex_lock(&live_mu);
  struct vmmipc_comm *x = live_head;
  while (x && x != c) x = x->live_next;
  if (x) c->lingering++;
  pthread_mutex_unlock(&live_mu);
  if (!x)
    return vmmipc__error(VMMIPC_ERR_INVALID_ARG,
                         "%s: not a live comm; hint: a comm must not be used after vmmipc_comm_destroy returned", op);
  return VMMIPC_SUCCESS;
}

void vmmipc__tell_aborted_unasked(struct vmmipc_comm *c, const char *op) {
  int finalized = 1;
  if (c->thread_level == MPI_THREAD_SERIALIZED || MPI_Finalized(&finalized) != MPI_SUCCESS || finalized) return;
  vmmipc__error_saved_t keep;
  vmmipc__error_save(&keep);
  if (!vmmipc__enter_process(c->thread_level, 0, op)) { /* refuses a thread MPI does not allow */
    vmmipc__agree_tell_aborted(c);
    vmmipc__leave_process();
  }
  vmmipc__error_restore(&keep);
}

void vmmipc__announce_abort(struct vmmipc_comm *c) {
  vmmipc__tell_abort(c);
  vmmipc__seal_failed(c);
  /* The ranks off this node, over MPI where this thread may call it; else
   * this rank's next call does (vmmipc__leave, the destroy). */
  if (!VMMIPC__INJECT("abort_quiet")) vmmipc__tell_aborted_unasked(c, "vmmipc_comm_abort");
}

vmmipc_result_t vmmipc_comm_abort(vmmipc_comm_t c) {
  vmmipc_result_t r = vmmipc__live_enter(c, "vmmipc_comm_abort");
  if (r) return r;
  __atomic_store_n(&c->aborted, 1, __ATOMIC_SEQ_CST);
  vmmipc__release_waits(c);
  if (VMMIPC__INJECT("abort_slow")) VMMIPC__LATE(200);
  /* The sockets are free: this thread tells the peers, holding the comm
   * as VMMIPC__BUSY_ABORT, which a destroy waits out. */
  int idle = 0;
  if (__atomic_compare_exchange_n(&c->busy, &idle, VMMIPC__BUSY_ABORT, 0, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED)) {
    if (VMMIPC__INJECT("announce_slow")) VMMIPC__STALL(300);
    vmmipc__announce_abort(c);
    __atomic_store_n(&c->busy, 0, __ATOMIC_SEQ_CST);
  }
  vmmipc__unlinger(c);
  return VMMIPC_SUCCESS;
}
