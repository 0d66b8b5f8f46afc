/* Who may call when: one call at a time per comm, concurrency across comms
 * only as far as the MPI thread level allows, and no call on a broken comm.
 * Overlapping calls on one comm are refused rather than serialised: two
 * collectives serialised in different orders on two ranks would match the
 * wrong calls, as in MPI. */
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "comm/comm.h"
#include "common/testhooks.h"

/* Threads inside a call on any comm (each of them may call MPI). */
static int g_inside; /* __atomic builtins: the header is shared with C++ tests */

static const char *level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE: return "MPI_THREAD_MULTIPLE";
  }
  return "an unknown thread level";
}

vmmipc_result_t vmmipc__enter_process(int thread_level, int finalized, const char *op) {
  /* A thread MPI does not allow is refused before it is counted: counted,
   * even for a moment, it would make the main thread's call BUSY. After
   * MPI_Finalize the check is itself a call MPI forbids (Open MPI aborts the
   * job), and the call makes no MPI call: an aborted or broken comm's calls
   * are refused, its destroy is local. */
  if (thread_level < MPI_THREAD_SERIALIZED && !finalized) {
    if (VMMIPC__INJECT("thread_check_slow")) VMMIPC__STALL(300); /* not counted yet (the comm is held, though) */
    int main_thread = 0;
    MPI_Is_thread_main(&main_thread);
    if (!main_thread)
      return vmmipc__error(VMMIPC_ERR_INVALID_ARG,
                           "%s: called from a thread other than MPI's main thread, and MPI provides %s; hint: call "
                           "from the thread that initialised MPI, or initialise it with MPI_THREAD_SERIALIZED or "
                           "higher",
                           op, level_name(thread_level));
  }
  int others = __atomic_fetch_add(&g_inside, 1, __ATOMIC_ACQ_REL);
  if (thread_level < MPI_THREAD_MULTIPLE && others > 0) {
    vmmipc__leave_process();
    return vmmipc__error(VMMIPC_ERR_BUSY,
                         "%s: another thread is inside a vmmipc call on another comm, and MPI provides %s; hint: "
                         "calls on different comms may run at once only under MPI_THREAD_MULTIPLE "
                         "(MPI_Init_thread)",
                         op, level_name(thread_level));
  }
  return VMMIPC_SUCCESS;
}

void vmmipc__leave_process(void) { __atomic_fetch_sub(&g_inside, 1, __ATOMIC_ACQ_REL); }

int vmmipc__hold(struct vmmipc_comm *c) {
  for (int64_t until = vmmipc__now_ms() + 2000;;) {
    int idle = 0;
    if (__atomic_compare_exchange_n(&c->busy, &idle, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) return 1;
    if (idle != VMMIPC__BUSY_ABORT || vmmipc__now_ms() >= until) return 0;
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
}

/* A break made outside any call (the check at entry, a torn barrier) is
 * told by the first call that holds the comm, once; an abort meanwhile
 * tells ABORTED itself (vmmipc__leave): not a break before it. */
static void tell_untold(struct vmmipc_comm *c, const char *op) {
  if (__atomic_load_n(&c->untold, __ATOMIC_ACQUIRE) && __atomic_exchange_n(&c->untold, 0, __ATOMIC_ACQ_REL) &&
      !__atomic_load_n(&c->aborted, __ATOMIC_ACQUIRE))
    vmmipc__agree_tell_break(c, op);
}

void vmmipc__tell_untold(struct vmmipc_comm *c, const char *op) {
  if (!__atomic_load_n(&c->untold, __ATOMIC_ACQUIRE)) return;
  /* Under MPI_THREAD_SERIALIZED the application's own MPI call may be
   * running on another thread (as for vmmipc__tell_aborted_unasked): a
   * later entered call tells. After MPI_Finalize: its node peers see the
   * seal's hang-up. */
  int finalized = 1;
  if (c->thread_level == MPI_THREAD_SERIALIZED || MPI_Finalized(&finalized) != MPI_SUCCESS || finalized) return;
  vmmipc__error_saved_t keep;
  vmmipc__error_save(&keep);
  if (!vmmipc__enter_process(c->thread_level, 0, op)) { /* refuses a thread MPI does not allow: a later call tells */
    tell_untold(c, op);
    vmmipc__leave_process();
  }
  vmmipc__error_restore(&keep);
}

/* Lets the comm go, held by this thread (vmmipc__hold). An abort from
 * another thread while it was held could not tell the peers (it found the
 * comm held), so this thread does, holding the comm as an abort does (a
 * destroy waits that out): after a call, and after a call refused at entry
 * too. `linger`: the leave_linger test hook's second pause. */
static void let_go(struct vmmipc_comm *c, int linger) {
  /* Counted in before letting go: a destroy on another thread may take the
   * comm at once, and its free then waits for this thread (abort.c). */
  vmmipc__linger(c);
  __atomic_store_n(&c->busy_op, (const char *)NULL, __ATOMIC_RELAXED);
  __atomic_store_n(&c->busy, 0, __ATOMIC_SEQ_CST);
  if (linger) VMMIPC__STALL(300); /* a destroy on another thread takes the comm here */
  int idle = 0;
  if (__atomic_load_n(&c->aborted, __ATOMIC_SEQ_CST) && !__atomic_load_n(&c->abort_told, __ATOMIC_SEQ_CST) &&
      __atomic_compare_exchange_n(&c->busy, &idle, VMMIPC__BUSY_ABORT, 0, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED)) {
    vmmipc__announce_abort(c); /* outside the call now, as the abort itself would */
    __atomic_store_n(&c->busy, 0, __ATOMIC_SEQ_CST);
  }
  vmmipc__unlinger(c); /* this thread's last touch of c */
}

vmmipc_result_t vmmipc__enter(struct vmmipc_comm *c, const char *op, int collective) {
  /* An abort telling the peers is waited out: the call then fails ABORTED,
   * as one that came after it, not BUSY. */
  if (!vmmipc__hold(c)) {
    const char *other = __atomic_load_n(&c->busy_op, __ATOMIC_RELAXED);
    return vmmipc__error(VMMIPC_ERR_BUSY,
                         "%s: another thread is inside %s on this comm; hint: calls on one comm must not overlap: "
                         "serialise them, or give each thread its own comm",
                         op, other ? other : "a call");
  }
  __atomic_store_n(&c->busy_op, op, __ATOMIC_RELAXED);
  int finalized = 0;
  MPI_Finalized(&finalized); /* asked once per call: enter_process needs it too */
  vmmipc_result_t r = vmmipc__enter_process(c->thread_level, finalized, op);
  if (r) {
    let_go(c, 0); /* an abort that landed meanwhile is told here */
    return r;
  }
  if (c->check) c->check(c); /* a failure a host sync call recorded breaks the comm now (untold) */
  tell_untold(c, op);
  if (VMMIPC__INJECT("enter_slow")) VMMIPC__STALL(300); /* an abort from another thread lands here */
  if (__atomic_load_n(&c->aborted, __ATOMIC_ACQUIRE)) {
    vmmipc_result_t a = vmmipc__aborted_here(c, op, "");
    vmmipc__leave(c); /* tells the ranks off this node, once */
    return a;
  }
  if (c->broken) {
    vmmipc_result_t b = vmmipc__error(c->broken_code ? c->broken_code : VMMIPC_ERR_PEER,
                                      "%s: the communicator is broken: %s", op, c->broken_msg);
    vmmipc__error_rank(c->broken_rank);
    vmmipc__leave(c);
    return b;
  }
  if (finalized) { /* a late destructor: no call of it can run again, so it breaks and its frees go locally */
    vmmipc_result_t f = vmmipc__error(VMMIPC_ERR_MPI,
                                      "%s: MPI was finalized before this call on rank %d; the communicator is broken: "
                                      "every later call on it fails, and vmmipc_win_free, vmmipc_heap_destroy and "
                                      "vmmipc_comm_destroy free locally; hint: free vmmipc objects before "
                                      "MPI_Finalize",
                                      op, c->rank);
    vmmipc__error_rank(c->rank);
    vmmipc__break_as(c, VMMIPC_ERR_MPI);
    vmmipc__leave(c);
    return f;
  }
  if (collective) {
    c->epoch++; /* on every rank, whatever the outcome: frames of this call carry it */
    c->deadline_ms = vmmipc__now_ms() + c->timeout_ms; /* one for the call's steps and agreement */
    memset(&c->timing, 0, sizeof c->timing);
    c->timing.struct_size = sizeof c->timing;
  }
  return VMMIPC_SUCCESS;
}

void vmmipc__reap_released(struct vmmipc_comm *c) {
  if (!c->due_n && !(vmmipc__deferred_count(c) && vmmipc__failed(c))) return;
  vmmipc__error_saved_t keep;
  vmmipc__error_save(&keep);
  vmmipc__deferred_reap_due(c);
  if (vmmipc__failed(c)) vmmipc__deferred_reap_local(c);
  vmmipc__error_restore(&keep);
}

void vmmipc__leave(struct vmmipc_comm *c) {
  vmmipc__reap_released(c);
  vmmipc__seal_failed(c); /* an abort's END frames first */
  /* Aborted from another thread after this call's last agreement (or
   * between a drain's rounds): the ranks off this node are told over MPI
   * by this thread, still inside the call, where MPI is the caller's. */
  if (__atomic_load_n(&c->aborted, __ATOMIC_SEQ_CST)) vmmipc__agree_tell_aborted(c);
  c->deadline_ms = 0;
  vmmipc__leave_process();
  const int linger = VMMIPC__INJECT("leave_linger");
  if (linger) VMMIPC__STALL(300); /* still holding the comm */
  let_go(c, linger);
}

void vmmipc__tell_abort(struct vmmipc_comm *c) {
  if (__atomic_exchange_n(&c->abort_told, 1, __ATOMIC_SEQ_CST)) return;
  char text[160];
  snprintf(text, sizeof text, "rank %d aborted the communicator (vmmipc_comm_abort)", c->rank);
  vmmipc__tp_abort_all(c->tp, VMMIPC_ERR_ABORTED, text);
}

/* Once the comm failed here, nothing reads its sockets again: what peers
 * still send this rank (their descriptors, each fd holding the sender's
 * device memory) would stay queued until the destroy. */
void vmmipc__seal_failed(struct vmmipc_comm *c) {
  if (!c->tp || !vmmipc__failed(c)) return;
  /* An abort that landed since the caller's look: its END goes first. */
  if (__atomic_load_n(&c->aborted, __ATOMIC_SEQ_CST)) vmmipc__tell_abort(c);
  vmmipc__tp_seal(c->tp);
}

void vmmipc__release_waits(struct vmmipc_comm *c) {
  if (c->release && !__atomic_exchange_n(&c->released, 1, __ATOMIC_ACQ_REL)) c->release(c);
}

void vmmipc__break_code(struct vmmipc_comm *c, vmmipc_result_t code) {
  vmmipc__break_as(c, code == VMMIPC_ERR_ABORTED ? VMMIPC_ERR_ABORTED : VMMIPC_ERR_PEER);
}

/* 1 when this call wrote the record, 0 when another break had or did. */
static int break_record(struct vmmipc_comm *c, vmmipc_result_t code) {
  if (__atomic_load_n(&c->broken, __ATOMIC_ACQUIRE)) return 0;
  /* One break writes the record: a torn barrier breaks from a host sync
   * call while a collective on another thread may break too. The others
   * return once it is written (a few string copies). */
  if (__atomic_exchange_n(&c->breaking, 1, __ATOMIC_ACQ_REL)) {
    while (!__atomic_load_n(&c->broken, __ATOMIC_ACQUIRE)) sched_yield();
    return 0;
  }
  vmmipc__error_state_t st = {VMMIPC_SUCCESS, -1, 0, 0};
  vmmipc__error_get(&st);
  const char *why = vmmipc_last_error();
  /* Never an empty reason, and always a rank: a later call says why. */
  if (!why[0])
    snprintf(c->broken_msg, sizeof c->broken_msg,
             "%s: the communicator broke on rank %d (no reason was recorded: a bug; please report it)",
             __atomic_load_n(&c->busy_op, __ATOMIC_RELAXED) ? __atomic_load_n(&c->busy_op, __ATOMIC_RELAXED) : "a call",
             c->rank);
  else if (!strstr(why, "rank "))
    snprintf(c->broken_msg, sizeof c->broken_msg, "rank %d: %s", c->rank, why);
  else
    snprintf(c->broken_msg, sizeof c->broken_msg, "%s", why);
  if (VMMIPC__INJECT("break_slow")) VMMIPC__STALL(100); /* tests: a second break meanwhile */
  c->broken_rank = st.rank >= 0 ? st.rank : c->rank;
  c->broken_code = code;
  __atomic_store_n(&c->broken, 1, __ATOMIC_RELEASE);
  vmmipc__release_waits(c);
  return 1;
}

void vmmipc__break_as(struct vmmipc_comm *c, vmmipc_result_t code) { (void)break_record(c, code); }

void vmmipc__break_untold(struct vmmipc_comm *c, vmmipc_result_t code) {
  /* Only the break that wrote the record: one that lost to a collective's
   * break on another thread was told by that one. */
  if (break_record(c, code == VMMIPC_ERR_ABORTED ? VMMIPC_ERR_ABORTED : VMMIPC_ERR_PEER))
    __atomic_store_n(&c->untold, 1, __ATOMIC_RELEASE);
}

void vmmipc__break(struct vmmipc_comm *c) { vmmipc__break_code(c, VMMIPC_ERR_PEER); }

int vmmipc__failed(struct vmmipc_comm *c) {
  return __atomic_load_n(&c->broken, __ATOMIC_ACQUIRE) || __atomic_load_n(&c->aborted, __ATOMIC_ACQUIRE);
}

vmmipc_result_t vmmipc__aborted_here(struct vmmipc_comm *c, const char *op, const char *what) {
  vmmipc__error(VMMIPC_ERR_ABORTED, "%s: %srank %d aborted the communicator (vmmipc_comm_abort)", op, what, c->rank);
  vmmipc__error_rank(c->rank);
  return VMMIPC_ERR_ABORTED;
}

vmmipc_result_t vmmipc__freed_locally(struct vmmipc_comm *c, const char *op) {
  if (__atomic_load_n(&c->aborted, __ATOMIC_ACQUIRE)) return vmmipc__aborted_here(c, op, "freed locally; ");
  vmmipc_result_t r = vmmipc__error(c->broken_code ? c->broken_code : VMMIPC_ERR_PEER,
                                     "%s: freed locally; the communicator is broken: %s", op, c->broken_msg);
  vmmipc__error_rank(c->broken_rank);
  return r;
}
