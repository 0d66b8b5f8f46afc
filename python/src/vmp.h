/* Internal declarations of the vmmipc Python extension (_vmmipc).
 *
 * One concern per file: module.c (init, module functions, exit cleanup),
 * error.c (vmmipc.Error, vmmipc.Result), comm.c (Comm, mpi4py), buffer.c
 * (Buffer, alloc, wrap), window.c (Window: query and sync), heap.c (Heap),
 * view.c (mapping views: DLPack and CUDA Array Interface), args.c (argument
 * parsing shared by all), bench.c (C-side timing loops for the benchmarks).
 *
 * Every object that holds a collective resource (Comm, Window, Heap) is on a
 * live list, so that the exit handler can release them locally before
 * mpi4py finalizes MPI. All list and state changes happen with the GIL held. */
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
  int handed;         /* a pointer, view or stream operation went out: close() waits for the GPU */
} VmpWindow;

struct VmpHeap {
  PyObject_HEAD
  vmp_link link;
  vmmipc_heap_t h;    /* NULL once closed */
  VmpComm *comm;      /* strong */
  int readonly;
  int busy;
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
/* cuCtxSynchronize of the current context (GIL released by the caller):
 * 0, or the CUresult; -1 without a driver. */
int vmp_ctx_synchronize(void);
/* Raises vmmipc.Error for a failed driver call; NULL. */
PyObject *vmp_cu_failed(const char *op, int rc);
/* Makes `device` current on this thread if no context is (copy.c); -1 raised. */
int vmp_ensure_context(int device);

/* error.c */
int vmp_error_init(PyObject *module);
/* Raises vmmipc.Error for a failed library call (its code, message, rank). */
PyObject *vmp_raise(vmmipc_result_t r);
/* Raises vmmipc.Error with our own message (a closed object...). */
PyObject *vmp_raise_msg(vmmipc_result_t r, const char *fmt, ...);
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

/* comm.c */
int vmp_comm_init(PyObject *module);
int vmp_comm_check(VmpComm *c, const char *op);   /* open, and MPI not finalized, else raises */
int vmp_mpi_check(const char *op);                 /* MPI initialized and not finalized, else raises */
/* Frees a comm locally when it cannot be closed collectively (GC, exit). */
void vmp_comm_release_local(VmpComm *c, const char *why);
/* A bad argument in a collective: joins it with a NULL out so that the
 * peers fail at once naming this rank, then returns NULL with the error set. */
PyObject *vmp_join_failed(VmpComm *c, int kind, int root);
/* Aborts the comm once (local); 0 on success. */
int vmp_comm_abort_once(VmpComm *c);

/* buffer.c */
int vmp_buffer_init(PyObject *module);
PyObject *vmp_buffer_new(vmmipc_buf_t h, int readonly);  /* steals h; frees it on failure */
int vmp_buffer_or_none(PyObject *o, const char *what, vmmipc_buf_t *out);
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
/* A view of [ptr, ptr + size) owned by `owner` (a Window or a Buffer). */
PyObject *vmp_view_new(PyObject *owner, uintptr_t ptr, size_t size, int readonly, int device,
                       PyObject *dtype, PyObject *shape);
/* Parses a DLPack capsule (classic or versioned) for wrap: the data pointer,
 * byte size, device; consumes it (renames it) and returns the managed
 * tensor to release later. */
int vmp_dlpack_consume(PyObject *capsule, uintptr_t *ptr, size_t *nbytes, int *device_type, int *device_id,
                       void **managed, int *versioned);
void vmp_dlpack_release(void *managed, int versioned);

/* bench.c */
extern PyMethodDef vmp_bench_functions[];

#endif /* VMP_H */
