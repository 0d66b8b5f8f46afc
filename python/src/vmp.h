/* Internal declarations of the vmmipc Python extension (_vmmipc).
 *
 * One concern per file: module.c (init, module functions, exit cleanup),
 * error.c (vmmipc.Error, vmmipc.Result), comm.c (Comm, mpi4py), buffer.c
 * (Buffer, alloc, wrap), window.c (Window: query and sync), heap.c (Heap),
 * view.c (mapping views: DLPack, CUDA Array Interface, host buffers),
 * work.c (the stream-ordered, bounded wait of close()), release.c (what the
 * garbage collector leaves to later calls), args.c (argument parsing shared
 * by all), bench.c (C-side timing loops for the benchmarks).
 *
 * Every object that holds a collective resource (Comm, Window, Heap) is on a
 * live list, so that the exit handler can release them locally before
 * mpi4py finalizes MPI. All list and state changes happen with the GIL held.
 * The garbage collector never runs collective work and never aborts a comm:
 * a Window or Heap collected open is released (vmmipc_win_release,
 * vmmipc_heap_release) and freed in step by a later collective. */
#ifndef VMP_H
#define VMP_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <vmmipc.h>

/* Keeps a pending exception across calls that may set or clear one
 * (PyErr_Fetch is deprecated from 3.12, where -Werror would refuse it). */
#if PY_VERSION_HEX >= 0x030C0000
#define VMP_ERR_SAVE(s) PyObject *s = PyErr_GetRaisedException()
#define VMP_ERR_RESTORE(s) PyErr_SetRaisedException(s)
#else
#define VMP_ERR_SAVE(s) \
  PyObject *s##_t, *s##_v, *s##_tb; \
  PyErr_Fetch(&s##_t, &s##_v, &s##_tb)
#define VMP_ERR_RESTORE(s) PyErr_Restore(s##_t, s##_v, s##_tb)
#endif

/* The device work a Window or Buffer handed out, which close() waits for
 * (work.c): an event per stream that the window's signal, wait and barrier
 * used (recorded after each), the consumer streams given to
 * __dlpack__(stream=...) (recorded when the consumer lets the view go, else
 * at close), and the streams recorded only at close: the legacy default
 * stream. */
typedef struct {
  void *stream;
  void *event;       /* a CUevent, made on first use; NULL: none yet */
  int at_close;      /* recorded by close() (else after each operation) */
  int recorded;      /* the event holds a record of this stream's work */
} vmp_tracked;

typedef struct {
  vmp_tracked *t;
  int n, cap;
  int handed;        /* a pointer, view or stream operation went out: close() waits */
} vmp_work;

/* A window the garbage collector took while open, on its comm's list until
 * its work is done and it is released (release.c). */
/* The work a collected Window or Buffer handed out, waited for without
 * blocking (release.c): its events are recorded at the first look, after a
 * later call, where a context can be made current. */
typedef struct {
  vmp_work work;
  void **events;     /* the events to wait for, once recorded */
  int nevents, begun;
  int device;
} vmp_collected;

typedef struct vmp_pending {
  struct vmp_pending *next;
  vmmipc_win_t h;
  vmp_collected work;
  PyObject *buf, *heap;  /* kept until the release */
} vmp_pending;

/* Intrusive list of live objects holding collective resources. */
typedef struct vmp_link {
  struct vmp_link *prev, *next;
} vmp_link;

typedef struct {
  PyObject_HEAD
  vmp_link link;
  vmmipc_comm_t h;    /* NULL once closed */
  int rank, size;
  int busy;           /* calls in progress with the GIL released */
  int aborted;        /* vmmipc_comm_abort was called here */
  int closing;        /* close() is inside vmmipc_comm_destroy: every call, abort() too, is refused */
  int timeout_ms;     /* the comm's bound on a wait for a peer, as the library resolved it */
  vmp_pending *pending; /* collected windows whose work is not done yet (release.c) */
} VmpComm;

typedef struct {
  PyObject_HEAD
  vmmipc_buf_t h;     /* NULL once closed */
  uintptr_t ptr;
  size_t size;
  int readonly;       /* a read-only imported mapping */
  int device;         /* device ordinal of the memory, -1 unknown (current) */
  PyObject *keep;     /* the wrapped object, kept alive (or NULL) */
  void *dl_managed;   /* a consumed DLPack tensor to release (or NULL) */
  int dl_versioned;
  int views;          /* live Mapping views of it: close() is refused meanwhile */
  int busy;           /* calls using it with the GIL released (a map of it, close()): close() is refused */
  int closing;        /* close() is inside its wait or vmmipc_buf_free: every use is refused */
  vmp_work work;
} VmpBuffer;

typedef struct VmpHeap VmpHeap;

typedef struct {
  PyObject_HEAD
  vmp_link link;
  vmmipc_win_t h;     /* NULL once closed */
  VmpComm *comm;      /* strong */
  PyObject *buf;      /* strong: the Buffer it exposes, or NULL */
  VmpHeap *heap;      /* strong: the heap it was carved from, or NULL */
  int readonly;       /* peers mapped read-only */
  int device;         /* current device when it was made (-1 unknown) */
  int busy;
  int closing;        /* close() is inside vmmipc_win_free: every call is refused (the handle may be freed) */
  int views;          /* live Mapping views of it here, each pinning it (vmmipc_win_pin) */
  vmp_work work;      /* what close() waits for */
} VmpWindow;

struct VmpHeap {
  PyObject_HEAD
  vmp_link link;
  vmmipc_heap_t h;    /* NULL once closed */
  VmpComm *comm;      /* strong */
  int readonly;
  int busy;
  int closing;        /* close() is inside vmmipc_heap_destroy: every call is refused */
};

extern PyTypeObject VmpComm_Type, VmpBuffer_Type, VmpWindow_Type, VmpHeap_Type, VmpView_Type;

/* live lists (module.c) */
extern vmp_link vmp_live_comms, vmp_live_windows, vmp_live_heaps;
void vmp_link_add(vmp_link *list, vmp_link *node);
void vmp_link_del(vmp_link *node);
/* 1 once the exit handler ran: MPI may be finalized, nothing collective runs. */
extern int vmp_finalized;
/* The device of the current context, for views (-1 if none). */
int vmp_current_device(void);
/* A driver entry point by base name at the CUDA 12 ABI, or NULL (copy.c). */
void *vmp_cu_proc(const char *name);
/* Raises vmmipc.Error for a failed driver call; NULL. */
PyObject *vmp_cu_failed(const char *op, int rc);
/* Makes `device` current on this thread if no context is (copy.c); -1 raised. */
int vmp_ensure_context(int device);

/* error.c */
int vmp_error_init(PyObject *module);
/* Raises vmmipc.Error for a failed library call (its code, message, rank). */
PyObject *vmp_raise(vmmipc_result_t r);
/* The thread's failure record, kept across later library calls (the sweep
 * of deferred buffers after a collective makes its own). */
typedef struct {
  vmmipc_result_t code;
  int rank;
  char msg[1024];
} vmp_err_snap;
void vmp_err_take(vmp_err_snap *s);
PyObject *vmp_raise_snap(vmmipc_result_t r, const vmp_err_snap *s);
/* After a collective call: keeps its failure record, then frees the
 * deferred buffers (release.c). Declares `es` for vmp_raise_snap. */
#define VMP_SWEEP(es) \
  vmp_err_snap es;    \
  vmp_err_take(&es);  \
  vmp_sweep_buffers()
/* Raises vmmipc.Error with our own message (a closed object...). */
PyObject *vmp_raise_msg(vmmipc_result_t r, const char *fmt, ...);
/* The same, naming `rank` (Error.rank), as the library's own errors do. */
PyObject *vmp_raise_msg_rank(vmmipc_result_t r, int rank, const char *fmt, ...);
/* Warns (ResourceWarning); returns -1 only if the warning became an error
 * and could not be reported (it is written out as unraisable instead). */
void vmp_warn_resource(const char *fmt, ...);

/* args.c */
int vmp_size_arg(PyObject *o, const char *what, size_t *out);     /* non-negative int */
int vmp_rank_arg(PyObject *o, int nranks, const char *what, int *out);
int vmp_u64_arg(PyObject *o, const char *what, uint64_t *out);
int vmp_timeout_arg(PyObject *o, const char *what, int *out);     /* None: 0 */
int vmp_stream_arg(PyObject *o, void **out);                      /* None/int/.cuda_stream/__cuda_stream__ */
int vmp_access_arg(PyObject *o, vmmipc_access_t *storage, const vmmipc_access_t **out, int *readonly);

/* work.c: close()'s stream-ordered wait. The caller holds the GIL except
 * in vmp_events_wait, and made the work's device current. */
#define VMP_CU_LEGACY ((void *)0x1)  /* CU_STREAM_LEGACY */
/* After a signal, wait or barrier was enqueued on stream: records its event. */
void vmp_work_op(vmp_work *w, void *stream);
/* A consumer will use stream (DLPack): recorded at close. -1: MemoryError set. */
int vmp_work_consumer(vmp_work *w, void *stream);
/* The consumer of a __dlpack__(stream=...) capsule let it go: its stream is
 * recorded now (not at close, when it may be destroyed). */
void vmp_work_consumer_done(vmp_work *w, void *stream);
/* Records what is recorded at close and gives the events to wait for (a
 * malloc'd array in *events, freed by the caller). 0, or the failing CUresult
 * (> 0), or -1 out of memory. */
int vmp_work_begin(vmp_work *w, void ***events, int *n);
/* Polls events until all completed, at most timeout_ms (GIL released by the
 * caller): 0 done, VMP_WAIT_TIMEOUT, or VMP_WAIT_DRIVER with *rc the CUresult. */
#define VMP_WAIT_TIMEOUT 1
#define VMP_WAIT_DRIVER 2
int vmp_events_wait(void *const *events, int n, int timeout_ms, int *rc);
/* How long a collective close (Window, Comm) waits for device work before
 * its free: half the comm's timeout. The peers entered the free's agreement
 * at once, bounded by the timeout: this rank's answer (a pinned window's
 * refusal) must reach it in time, or their free times out on this rank and
 * breaks the comm. */
int vmp_close_wait_ms(int timeout_ms);
/* CLOCK_MONOTONIC in milliseconds. */
int64_t vmp_now_ms(void);
/* Tests: the outcome the next Window.close()'s wait reports instead of its
 * own (VMP_WAIT_TIMEOUT or VMP_WAIT_DRIVER; 0: none), then cleared. */
extern int vmp_test_wait_outcome;
/* One poll of events without waiting: 1 all done, 0 some still running, -1 a driver error. */
int vmp_events_done(void *const *events, int n);
void vmp_work_free(vmp_work *w);
/* Raises vmmipc.Error for a close() whose wait failed (TIMEOUT or CUDA),
 * naming `rank` (a Window's; -1 for a Buffer's: None). */
PyObject *vmp_wait_failed(const char *op, int how, int rc, int timeout_ms, int rank);

/* release.c */
/* A window collected open: released now if none of its work went out, else
 * queued on its comm until that work is done. Steals w's work and refs. */
void vmp_window_collected(VmpWindow *w);
/* Releases the comm's queued windows whose work is done; with wait_ms > 0
 * waits up to that long for all of them (the GIL released while it sleeps).
 * Returns how many are still queued. Called before each collective call. */
int vmp_comm_settle(VmpComm *c, int wait_ms);
/* Releases every queued window of the comm at once (exit, a collected comm). */
void vmp_comm_settle_all(VmpComm *c);
/* Drops the queue of a comm that is gone (its windows went with it). */
void vmp_comm_forget(VmpComm *c);
/* A buffer collected while a released window still exposes it, or after
 * it handed out device work (*work, moved here): freed by vmp_sweep_buffers
 * (after collective calls, alloc, wrap and Buffer.close) once that window
 * is freed and that work, recorded at the first sweep, is done. */
void vmp_defer_buffer(vmmipc_buf_t h, PyObject *keep, void *dl_managed, int dl_versioned, vmp_work *work,
                      int device);
/* Frees the deferred buffers that nothing exposes any more and whose work
 * is done; after every collective call, alloc, wrap and Buffer.close. */
void vmp_sweep_buffers(void);
/* A comm collected open: kept (with what it queued) until exit, where it is
 * released locally; the collective close cannot run from the collector. */
void vmp_comm_orphan(VmpComm *c);
/* Exit: releases queued windows and orphaned comms locally (vmp_orphans_abort aborted them). */
void vmp_release_orphans(void);
/* Exit: aborts the orphaned comms; the longest wait their queued windows'
 * work may take (half the comm's timeout, as a close's). */
int vmp_orphans_abort(void);
/* Exit: how many of their queued windows' work still runs (one look). */
int vmp_orphans_running(void);
/* How many of c's collected windows' work still runs (one look; releases
 * nothing, so runs no deallocator). */
int vmp_comm_running(VmpComm *c);
/* Set at exit when device work handed out did not finish in time: nothing
 * is freed then (an unmap would wait for that work); the process exit
 * releases it all. */
extern int vmp_exit_keep;

/* comm.c */
int vmp_comm_init(PyObject *module);
int vmp_comm_check(VmpComm *c, const char *op);   /* open, not closing, and MPI not finalized, else raises */
PyObject *vmp_refuse_closing(const char *op, const char *what); /* raises BUSY: close() of it runs elsewhere */
/* Raises "<op>: the <what> is closed" for a NULL handle h, and BUSY while
 * its close() runs on another thread; 0 if neither. */
int vmp_open_check(const void *h, int closing, const char *op, const char *what);
int vmp_mpi_check(const char *op);                 /* MPI initialized and not finalized, else raises */
/* The library's default bound on a wait: VMMIPC_TIMEOUT_MS, else 60 s. */
int vmp_default_timeout_ms(void);
/* Frees a comm locally when it cannot be closed collectively (GC, exit). */
void vmp_comm_release_local(VmpComm *c, const char *why);
/* A bad argument in a collective: joins it with a NULL out (and a root
 * that is no rank where the root was bad) so that the peers fail at once
 * naming this rank, then returns NULL with the error set. */
enum { VMP_JOIN_ALLGATHER, VMP_JOIN_BCAST, VMP_JOIN_SCATTER, VMP_JOIN_HEAP };
PyObject *vmp_join_failed(VmpComm *c, int kind, int root);
/* Aborts the comm once (local); 0 on success. */
int vmp_comm_abort_once(VmpComm *c);

/* buffer.c */
int vmp_buffer_init(PyObject *module);
PyObject *vmp_buffer_new(vmmipc_buf_t h, int readonly);  /* steals h; frees it on failure */
int vmp_buffer_or_none(PyObject *o, const char *what, vmmipc_buf_t *out);
/* Counts a call that uses Buffer o (any other object: nothing) with the GIL
 * released: d is +1 before, -1 after; its close() is refused meanwhile. */
void vmp_buffer_hold(PyObject *o, int d);
/* Frees what a Buffer owns besides its handle (the wrapped object, a DLPack tensor). */
void vmp_release_keep(PyObject *keep, void *dl_managed, int dl_versioned);
extern PyMethodDef vmp_buffer_functions[];

/* window.c */
int vmp_window_init(PyObject *module);
PyObject *vmp_window_new(vmmipc_win_t h, VmpComm *comm, PyObject *buf, VmpHeap *heap, int readonly);
void vmp_window_release_local(VmpWindow *w, const char *why);
int vmp_window_check(VmpWindow *w, const char *op);

/* heap.c */
int vmp_heap_init(PyObject *module);
PyObject *vmp_comm_heap(VmpComm *c, PyObject *args, PyObject *kw);
void vmp_heap_release_local(VmpHeap *h, const char *why);

/* view.c */
int vmp_view_init(PyObject *module);
/* A view of [ptr, ptr + size) owned by `owner` (a Window or a Buffer), made
 * by the caller's `op` (named in its errors). */
PyObject *vmp_view_new(PyObject *owner, uintptr_t ptr, size_t size, int readonly, int device,
                       PyObject *dtype, PyObject *shape, const char *op);
/* Parses a DLPack capsule (classic or versioned) for wrap: the data pointer,
 * byte size, device, and whether the producer made it read-only (a
 * versioned capsule's flag); consumes it (renames it) and returns the
 * managed tensor to release later. */
int vmp_dlpack_consume(PyObject *capsule, uintptr_t *ptr, size_t *nbytes, int *device_type, int *device_id,
                       int *readonly, void **managed, int *versioned);
void vmp_dlpack_release(void *managed, int versioned);

/* bench.c, work.c */
extern PyMethodDef vmp_bench_functions[], vmp_work_functions[];

#endif /* VMP_H */
