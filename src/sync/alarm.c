/* A host-sync kernel wait that timed out (vmmipc_win_wait or
 * vmmipc_win_barrier on the kernel path) let the work after it on its
 * stream run on data that was not ready. It cannot go unnoticed: the
 * kernel sets the comm's alarm (mapped host memory, read without a copy);
 * from then on this rank's host sync calls return VMMIPC_ERR_TIMEOUT naming
 * the rank it waited for, and its next call that holds the comm (every
 * collective) breaks the comm, so that every rank's later calls fail. The
 * device API's own waits, whose results the user's kernel sees, only
 * record themselves in the window (device.c). */
#include "sync/sync.h"

/* Sets the error from the alarm ("<op>: " first unless op is NULL); 0 if
 * it is not set. */
static int alarm_error(struct vmmipc_comm *c, const char *op) {
  struct vmmipc__sync *s = c->pool ? c->pool->sync : NULL;
  unsigned long long head = s && s->alarm ? __atomic_load_n(&s->alarm->head, __ATOMIC_ACQUIRE) : 0;
  if (!head) return 0;
  int barrier = (int)(head >> 8 & 1), rank = (int)(uint32_t)(head >> 32);
  vmmipc__error(VMMIPC_ERR_TIMEOUT,
                "%s%sa device %s of a host sync call timed out waiting for rank %d to reach %llu (its slot held "
                "%llu): the stream went on without it, so the communicator fails; hint: is rank %d alive and "
                "making the same calls?",
                op ? op : "", op ? ": " : "", barrier ? "barrier" : "wait", rank, s->alarm->value, s->alarm->seen,
                rank);
  vmmipc__error_rank(rank);
  return 1;
}

vmmipc_result_t vmmipc__sync_alarm(struct vmmipc_comm *c, const char *op) {
  return alarm_error(c, op) ? VMMIPC_ERR_TIMEOUT : VMMIPC_SUCCESS;
}

void vmmipc__sync_check(struct vmmipc_comm *c) {
  if (!__atomic_load_n(&c->broken, __ATOMIC_ACQUIRE) && alarm_error(c, NULL)) vmmipc__break(c);
}
