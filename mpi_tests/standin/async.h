/* Stream-ordered work that completes later, as on a GPU
 * (VMMIPC_STANDIN_ASYNC): each stream has a queue served, in order, by its
 * own worker thread, and each operation runs only after a delay, unless
 * something waits for it. Everything
 * here is guarded by sti.mu; waits release it while they sleep. With
 * VMMIPC_STANDIN_ASYNC=off nothing is queued: every call does its work
 * before it returns, as the stand-in always did. */
#ifndef VMMIPC_STANDIN_ASYNC_H
#define VMMIPC_STANDIN_ASYNC_H

#include "state.h"

/* One operation on a stream. `run` does the work outside the lock, on the
 * stream's worker or on a thread that waits for it (a fault
 * there kills the process, as an illegal access would kill a GPU context);
 * `fini`, if set, runs under the lock once the operation is over, whether
 * it ran or was skipped after an earlier failure on its stream. */
typedef struct sti_op {
  struct sti_op *next;
  struct CUstream_st *stream;
  uint64_t order;      /* enqueue order, process-wide */
  uint64_t not_before; /* CLOCK_MONOTONIC ns: the delay */
  CUresult (*run)(struct sti_op *);
  void (*fini)(struct sti_op *);
  /* cuStreamWaitEvent: starts once `after`'s work up to after_order is done
   * (a reference on `after` is held until then). */
  struct CUstream_st *after;
  uint64_t after_order;
} sti_op;

enum { STI_STREAM_USER, STI_STREAM_LEGACY, STI_STREAM_PER_THREAD };

struct CUstream_st {
  struct CUstream_st *next; /* sti_streams: every stream that is referenced */
  struct CUctx_st *ctx;
  unsigned flags; /* CU_STREAM_NON_BLOCKING */
  int kind;
  int handle; /* the handle is valid (until cuStreamDestroy or the thread's exit) */
  long refs;  /* the handle, the worker, and each waiter, event and wait naming it */
  sti_op *head, *tail;
  uint64_t hurry; /* work up to this order is waited for, so it runs without its delay */
  int busy;       /* its oldest operation is running (on its worker or a waiting thread) */
  long launches;  /* kernel launches queued and not yet over (kernels.c) */
  int worker;     /* a worker thread serves the queue */
  CUresult err; /* the first failure of its work: sticky, as on a GPU */
};

/* Every stream that is referenced (lock held). */
extern struct CUstream_st *sti_streams;

/* VMMIPC_STANDIN_ASYNC, read by cuInit (lock held). */
CUresult sti_async_configure(const char *env);
/* Whether stream work is queued (after a successful cuInit). */
int sti_async_on(void);

/* Lock held from here on. */
uint64_t sti_now_ns(void);
/* A zeroed operation of `size` bytes (at least sizeof(sti_op)), or NULL. */
void *sti_op_new(size_t size, CUresult (*run)(sti_op *));
/* Queues op on s, whose worker runs it after the earlier work of s, after
 * the legacy stream's rule and after its delay. Takes op in every case; an
 * error is s's sticky one or a failure to start the worker. */
CUresult sti_enqueue(struct CUstream_st *s, sti_op *op);
/* op, just queued on s, runs now on the calling thread if nothing comes
 * before it: an event recorded on an idle stream has no work to capture, so
 * it is complete at once, as cuEventQuery defines. op may be gone after. */
void sti_run_if_first(struct CUstream_st *s, sti_op *op);
/* Whether every operation of s up to `order` is over. */
int sti_done_upto(const struct CUstream_st *s, uint64_t order);
/* The order of the last operation queued so far. */
uint64_t sti_last_order(void);
/* Wait until s's work up to `order` is over; s's sticky error or success. */
CUresult sti_wait_upto(struct CUstream_st *s, uint64_t order);
/* The work queued so far on the streams of ctx that have launches queued
 * runs without its delay. */
void sti_hurry_launches(struct CUctx_st *ctx);
/* Wait for every stream of ctx (NULL: of every context) to finish the work
 * queued so far; the first sticky error among them, or success. */
CUresult sti_wait_ctx(struct CUctx_st *ctx);
/* Stream bookkeeping (stream_event.c owns handles; these are shared). */
struct CUstream_st *sti_stream_new(struct CUctx_st *ctx, unsigned flags, int kind);
void sti_stream_unref(struct CUstream_st *s);
/* cuStreamDestroy, or the thread's exit for its per-thread stream: the
 * handle goes; queued work still runs, then the stream goes too. */
void sti_stream_drop_handle(struct CUstream_st *s);
/* Fork: the child has no workers, and the parent's queued work is not its
 * own; it drops it (state.c calls this in the child, lock held). */
void sti_async_after_fork_child(void);

#endif
