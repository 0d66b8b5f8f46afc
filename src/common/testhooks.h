/* Failure injection for the test suites. Compiled in only when the library is
 * built for tests (VMMIPC_TEST_HOOKS, the vmmipc_testlib target); in the
 * installed library VMMIPC__INJECT() is the constant 0. */
#ifndef VMMIPC_COMMON_TESTHOOKS_H
#define VMMIPC_COMMON_TESTHOOKS_H

#ifdef __cplusplus
extern "C" {
#endif

#ifdef VMMIPC_TEST_HOOKS
/* Make the nth (1-based) next occurrence of `step` in this process fail;
 * step NULL or nth <= 0 disarms. Steps: "alloc", "reserve", "export",
 * "import", "map", "access", "unmap" (reported after a real unmap), "record" (no host memory for
 * a buffer's or descriptor's record, or a reservation's entry), "transfer", "args", "late" (this rank
 * sleeps inside the next exchange), "agree" (this rank skips the next
 * agreement, or the next heap call's allgather, as a rank that never enters
 * it), "agree_late" (this rank comes to its next agreement 1.5 x the
 * timeout late), "heap_oom" (the next heap growth step is out of device
 * memory), "heap_fds" (the next heap growth step's export hits the fd
 * limit), "heap_step_tables" (the next heap growth step has no host memory
 * for its own tables), "conn_tables" (the next transport opened has no host
 * memory for its last table), "node_tables" (the next vmmipc_comm_create
 * has none for the last of its node tables), "rank_table" (the next
 * vmmipc_comm_create has none for its node's rank table), "coll_tables" (the next collective, or signal pool, has no
 * host memory for its own tables), "round_tables" (the next round of a
 * collective has none for its notices), "map_tables" (the next map
 * exchange has none for its tables), "sync_tables" (the next host-sync
 * setup of a comm's signal pool has no host memory for its records table),
 * "kernels_full" (the next lookup of the library's kernels finds every
 * entry of its table another context's),
 * "break_slow" (the next break of a comm pauses 100 ms between writing its
 * message and its rank), "heap_record" (the next vmmipc_heap_create has no
 * host memory for its record), "trim_unmap" (the next unmap of a heap trim fails, the range still
 * mapped), "abort_slow" (the next vmmipc_comm_abort pauses 300 ms after it
 * marked the comm and released its waits, as a slow release would),
 * "announce_slow" (the next vmmipc_comm_abort pauses 300 ms while it holds
 * the comm to tell the peers),
 * "abort_quiet" (the next vmmipc_comm_abort tells nobody over MPI, as one
 * from a thread MPI does not allow a call: the next call tells),
 * "mesh_connect" (the next connection this rank makes to a node peer while
 * setting up a comm's sockets fails, as at the fd limit), "mesh_pending"
 * (this rank's mesh fails as soon as it has accepted a connection, before
 * reading its HELLO), "hello_kind" (the next HELLO this rank sends goes as a
 * DATA frame, as from another build), "hello_send" (the next HELLO this
 * rank sends fails with EPIPE, as to a peer that hung up), "random" (the
 * next draw of random bytes finds neither getrandom nor /dev/urandom), "addr_late" (this rank comes to the exchange of
 * socket addresses 1.5 x the timeout late),
 * "thread_check_slow" (the next call pauses 300 ms before it asks MPI
 * whether this is MPI's main thread, below MPI_THREAD_SERIALIZED),
 * "enter_slow" (the next call that holds a comm pauses 300 ms before it
 * looks whether the comm was aborted), "leave_linger" (the next call that
 * leaves a comm pauses 300 ms before it lets the comm go, and 300 ms
 * after), "drain_abort" (this rank aborts its
 * comm right after a round of the agreements that free released objects,
 * as another thread's abort could), "due_room" (no host memory to note the
 * released ids the next agreement may free), "barrier_batch" (the driver
 * refuses the next stream batch of a memory-operation barrier, or the next
 * host-API barrier kernel's launch, with CUDA_ERROR_INVALID_HANDLE, as for
 * a destroyed stream), "trial" (this rank leaves auto's trial of the
 * host-sync paths right after every node rank said it was ready),
 * "trial_abort" (this rank aborts its comm at that point), "trial_call"
 * (the trial's nth signal, wait or barrier call on this rank is refused,
 * as the driver could), "status_upload" (the next vmmipc_win_device_status
 * that clears a record cannot upload the cleared claim). At the
 * collector of an agreement (comm/agree.c): "verdict" (it stalls 1.5 x the
 * timeout between deciding and announcing), "verdict_slow" /
 * "verdict_stuck" (after sending rank 1 its verdict, it stalls for the
 * timeout plus 1.25 graces / twice the timeout plus four), "verdict_wait"
 * (its wait for the verdicts' sends fails), "agree_mpi" (its wait for the
 * outcomes fails in MPI), "verdict_drop" (its socket to its first node peer
 * is shut after deciding). At a member: "withdraw" (it withdraws after its
 * verdict came, as one whose timeout fired then). */
void vmmipc__test_fail_at(const char *step, int nth);
/* Whether the armed step has not failed yet (its nth occurrence not come). */
int vmmipc__test_fail_pending(void);
/* Whether this occurrence of `step` must fail (counts occurrences). */
int vmmipc__test_should_fail(const char *step);
#define VMMIPC__INJECT(step) vmmipc__test_should_fail(step)
/* Makes this rank late: sleeps for 1.5 x timeout_ms (the "late" step). */
void vmmipc__test_late(int timeout_ms);
/* Sleeps for ms milliseconds (a step that stalls for a set time). */
void vmmipc__test_sleep_ms(int ms);
/* How many threads of this process are inside such a stall now. */
int vmmipc__test_stalling(void);
/* Runs fn(arg) once, on this thread, inside its next collective (while the
 * comm is held): lets a test act at a known point of a call. */
void vmmipc__test_on_inside(void (*fn)(void *), void *arg);
void vmmipc__test_inside(void);
/* Runs fn(arg) once, on this thread, in its next vmmipc__tp_read_coll
 * between the peek at the connection and the read (fn NULL: disarms): a
 * test sends a peer's frame at that very point. */
void vmmipc__test_on_peeked(void (*fn)(void *), void *arg);
void vmmipc__test_peeked(void);
/* Caps the slices of the signal pools made from now on in this process
 * (0: no cap), so that a test can walk every slice of one in a few calls. */
void vmmipc__test_pool_slices(int max);
int vmmipc__test_pool_cap(void);
/* Caps the operations per cuStreamBatchMemOp of the memory-operation
 * barrier (0: the driver's 256), so that a barrier of a few ranks takes
 * several batches. */
void vmmipc__test_barrier_batch(int max);
int vmmipc__test_barrier_batch_cap(void);
/* Makes every record read of the transport's exchange, agreement read and
 * stale drop pause us microseconds first (0: none), so that a flooding
 * peer surely outpaces this reader. */
void vmmipc__test_record_pause_us(int us);
void vmmipc__test_record_pause(void);
#define VMMIPC__INSIDE() vmmipc__test_inside()
#define VMMIPC__PEEKED() vmmipc__test_peeked()
#define VMMIPC__LATE(ms) vmmipc__test_late(ms)
#define VMMIPC__STALL(ms) vmmipc__test_sleep_ms(ms)
#define VMMIPC__POOL_CAP() vmmipc__test_pool_cap()
#define VMMIPC__BATCH_CAP() vmmipc__test_barrier_batch_cap()
#define VMMIPC__RECORD_PAUSE() vmmipc__test_record_pause()
#else
#define VMMIPC__INJECT(step) 0
#define VMMIPC__INSIDE() ((void)0)
#define VMMIPC__PEEKED() ((void)0)
#define VMMIPC__LATE(ms) ((void)0)
#define VMMIPC__STALL(ms) ((void)0)
#define VMMIPC__POOL_CAP() 0
#define VMMIPC__BATCH_CAP() 0
#define VMMIPC__RECORD_PAUSE() ((void)0)
#endif

#ifdef __cplusplus
}
#endif
#endif
