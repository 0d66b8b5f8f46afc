/* A host-sync kernel wait that timed out (vmmipc_win_wait or
 * vmmipc_win_barrier on the kernel path) let the work after it on its
 * stream run on data that was not ready. It cannot go unnoticed: the
 * kernel sets the comm's alarm (mapped host memory, read without a copy);
 * from then on this rank's host sync calls return VMMIPC_ERR_TIMEOUT naming
 * the rank it waited for, and its next call that holds the comm (every
 * collective) breaks the comm and tells the others (guard.c, agree.c), so
 * that every rank's next call fails at once with that failure. The
 * device API's own waits, whose results the user's kernel sees, only
 * record themselves in the window (device.c).
 *
 * A host wait that finds its peer exited or failed (vmmipc_win_wait_host,
 * which holds no comm) raises the same kind of alarm from the host: its
 * release of this rank's stream waits would otherwise let a later stream
 * wait on a healthy peer pass at once. */
#include <stdio.h>

#include "sync/sync.h"

/* Sets the error from the alarm ("<op>: " first unless op is NULL) and
 * returns its code; VMMIPC_SUCCESS if it is not set. */
static vmmipc_result_t alarm_error(struct vmmipc_comm *c, const char *op) {
  struct vmmipc__sync *s = c->pool ? c->pool->sync : NULL;
  if (s && __atomic_load_n(&s->noted, __ATOMIC_ACQUIRE) == 2) {
    vmmipc__error(s->noted_code, "%s%sthe communicator failed (a host wait found it): %s", op ? op : "",
                  op ? ": " : "", s->noted_msg);
    vmmipc__error_rank(s->noted_rank);
    return s->noted_code;
  }
  unsigned long long head = s && s->alarm ? __atomic_load_n(&s->alarm->head, __ATOMIC_ACQUIRE) : 0;
  if (!head) return VMMIPC_SUCCESS;
  int barrier = (int)(head >> 8 & 1), rank = (int)(uint32_t)(head >> 32);
  vmmipc__error(VMMIPC_ERR_TIMEOUT,
                "%s%sa device %s of a host sync call timed out waiting for rank %d to reach %llu (its slot held "
                "%llu): the stream went on without it, so the communicator fails; hint: is rank %d alive and "
                "making the same calls?",
                op ? op : "", op ? ": " : "", barrier ? "barrier" : "wait", rank, s->alarm->value, s->alarm->seen,
                rank);
  vmmipc__error_rank(rank);
  return VMMIPC_ERR_TIMEOUT;
}

vmmipc_result_t vmmipc__sync_alarm(struct vmmipc_comm *c, const char *op) { return alarm_error(c, op); }

void vmmipc__sync_note(struct vmmipc_comm *c, vmmipc_result_t code) {
  struct vmmipc__sync *s = c->pool ? c->pool->sync : NULL;
  if (!s) return; /* no window made: no stream wait to release */
  int none = 0;
  if (__atomic_compare_exchange_n(&s->noted, &none, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
    vmmipc__error_state_t st = {VMMIPC_SUCCESS, -1, 0, 0};
    vmmipc__error_get(&st);
    snprintf(s->noted_msg, sizeof s->noted_msg, "%s", vmmipc_last_error());
    s->noted_rank = st.rank;
    s->noted_code = code;
    __atomic_store_n(&s->noted, 2, __ATOMIC_RELEASE);
  }
  vmmipc__release_waits(c); /* after the record: the sync calls refuse from now on */
}

void vmmipc__sync_check(struct vmmipc_comm *c) {
  vmmipc_result_t code;
  if (!__atomic_load_n(&c->broken, __ATOMIC_ACQUIRE) && (code = alarm_error(c, NULL))) vmmipc__break_untold(c, code);
}
