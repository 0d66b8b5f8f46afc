/* vmmipc.Window: the result of Comm.allgather_map and Heap.alloc; query,
 * mapping views and the stream-ordered synchronisation. It keeps its comm,
 * its buffer and its heap alive; close() is collective. */
#include "vmp.h"

#include <stdlib.h>

PyObject *vmp_window_new(vmmipc_win_t h, VmpComm *comm, PyObject *buf, VmpHeap *heap, int readonly) {
  VmpWindow *w = (VmpWindow *)VmpWindow_Type.tp_alloc(&VmpWindow_Type, 0);
  if (!w) {  /* freeing it is collective: released, it is freed in step by a later collective */
    vmmipc_win_release(h);
    return NULL;
  }
  w->h = h;
  Py_INCREF(comm);
  w->comm = comm;
  Py_XINCREF(buf);
  w->buf = buf;
  Py_XINCREF((PyObject *)heap);
  w->heap = heap;
  w->readonly = readonly;
  w->device = vmp_current_device();
  vmp_link_add(&vmp_live_windows, &w->link);
  return (PyObject *)w;
}

int vmp_window_check(VmpWindow *w, const char *op) {
  return vmp_open_check(w->h, w->closing, op, "window");
}

static void window_drop_refs(VmpWindow *w) {
  Py_CLEAR(w->buf);
  Py_CLEAR(w->heap);
  Py_CLEAR(w->comm);
}

/* Exit only (module.c): collectives cannot run at exit, so the comm is
 * aborted (peers still in a call on it fail at once) and the window freed
 * locally. */
void vmp_window_release_local(VmpWindow *w, const char *why) {
  if (!w->h) return;
  vmp_warn_resource("vmmipc.Window %s while open: %s (close it collectively, or use 'with')", why,
                    vmp_exit_keep ? "left to the process exit" : "aborting its comm and freeing it locally");
  int fin = 0;
  MPI_Finalized(&fin);
  /* Aborting wakes a call another thread is blocked in; while one is, the
     window is left to the process exit rather than freed under it. */
  if (!fin && !vmp_exit_keep && w->comm && vmp_comm_abort_once(w->comm) == 0 && !w->busy) vmmipc_win_free(w->h);
  w->h = NULL;
  vmp_link_del(&w->link);
}

/* The garbage collector never runs collective work and never aborts: the
 * window is released (release.c) and freed in step at a later collective
 * call on its comm, once every rank let it go. */
static void window_dealloc(VmpWindow *self) {
  PyObject_GC_UnTrack(self);
  if (self->h && !vmp_finalized) {
    vmp_warn_resource("vmmipc.Window garbage-collected while open: released; it is freed in step at a later "
                      "collective call on its comm once every rank released it (close it collectively, or use "
                      "'with')");
    vmp_window_collected(self);
    self->h = NULL;
    vmp_link_del(&self->link);
  }
  vmp_work_free(&self->work);
  window_drop_refs(self);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

/* The library refuses the free on every rank while views pin the window
 * anywhere; here, where they are, the message counts them. */
static PyObject *refused_for_views(VmpWindow *w) {
  const int rank = w->comm ? w->comm->rank : -1;
  return vmp_raise_msg_rank(VMMIPC_ERR_BUSY, rank,
                            "vmmipc.Window.close: %d view(s) of the window are live on rank %d (Mapping objects, "
                            "DLPack capsules and the tensors made from them, CUDA Array Interface consumers holding "
                            "a Mapping); the window stays open on every rank: release them, then close again",
                            w->views, rank);
}

static PyObject *window_close(VmpWindow *self, PyObject *Py_UNUSED(ignored)) {
  const char *op = "vmmipc.Window.close";
  if (!self->h || vmp_finalized) Py_RETURN_NONE;
  if (self->busy) return vmp_raise_msg(VMMIPC_ERR_BUSY, "%s: a call on the window is in progress", op);
  if (vmp_mpi_check(op) < 0 || vmp_ensure_context(self->device) < 0) return NULL;
  VmpComm *c = self->comm;
  vmp_comm_settle(c, 0);
  if (!self->h) Py_RETURN_NONE;
  /* The settle may run finalizers, and so let another thread start a call. */
  if (self->busy) return vmp_raise_msg(VMMIPC_ERR_BUSY, "%s: a call on the window is in progress", op);
  /* vmmipc_win_free unmaps the peers: the device work this window handed
   * out must be done first (work.c), and in Python nobody should have to
   * remember that. A wait that fails pins the window for the call, so that
   * the library refuses the free on every rank (BUSY) and no peer waits.
   * Live views here refuse it anyway: nothing is waited for, and the window
   * is pinned for the call, so that a view that another thread drops
   * meanwhile cannot let the free go ahead before its work was waited for. */
  void **ev = NULL;
  int nev = 0, how = 0, rc = 0;
  const int viewed = self->views > 0;
  if (self->work.handed && !viewed) {
    rc = vmp_work_begin(&self->work, &ev, &nev);
    if (rc) how = VMP_WAIT_DRIVER;
    if (rc < 0) PyErr_Clear();
  }
  vmmipc_result_t r;
  vmmipc_win_t h = self->h;
  vmmipc_comm_t ch = c->h;
  const int rank = c->rank; /* c may go with the window's references */
  int timeout = vmp_close_wait_ms(c->timeout_ms), freed = 0, test_how = vmp_test_wait_outcome;
  vmp_test_wait_outcome = 0;
  vmmipc_comm_stats_t st = VMMIPC_COMM_STATS_INIT;
  self->busy++;
  self->closing = 1;
  c->busy++;
  Py_BEGIN_ALLOW_THREADS
  if (!how && nev) how = vmp_events_wait(ev, nev, timeout, &rc);
  if (test_how) {
    how = test_how;
    rc = how == VMP_WAIT_DRIVER ? 719 : 0;
  }
  if (how && vmmipc_comm_stats(ch, &st) == VMMIPC_SUCCESS && st.broken) {
    r = VMMIPC_ERR_BUSY; /* nobody to agree with, and its work may still run: left open here */
  } else {
    if (how || viewed) vmmipc_win_pin(h);
    r = vmmipc_win_free(h);
    /* BUSY always means still open; another failure freed it exactly when the comm is broken. */
    st.broken = 0;
    freed = r == VMMIPC_SUCCESS ||
            (r != VMMIPC_ERR_BUSY && vmmipc_comm_stats(ch, &st) == VMMIPC_SUCCESS && st.broken);
    if ((how || viewed) && !freed) vmmipc_win_unpin(h);
  }
  Py_END_ALLOW_THREADS
  c->busy--;
  self->closing = 0;
  self->busy--;
  free(ev);
  if (freed) {
    self->h = NULL;
    vmp_link_del(&self->link);
    vmp_work_free(&self->work);
    window_drop_refs(self);
  }
  VMP_SWEEP(es);
  if (how) return vmp_wait_failed(op, how, rc, timeout, rank);
  if (!freed && r == VMMIPC_ERR_BUSY && self->views) return refused_for_views(self);
  if (r != VMMIPC_SUCCESS) return vmp_raise_snap(r, &es);
  Py_RETURN_NONE;
}

static PyObject *window_enter(PyObject *self, PyObject *Py_UNUSED(ignored)) {
  Py_INCREF(self);
  return self;
}

static PyObject *window_exit(VmpWindow *self, PyObject *Py_UNUSED(args)) {
  PyObject *r = window_close(self, NULL);
  if (!r) return NULL;
  Py_DECREF(r);
  Py_RETURN_FALSE;
}

static int win_rank(VmpWindow *self, PyObject *o, const char *op, int *rank) {
  if (vmp_window_check(self, op) < 0 || vmp_ensure_context(self->device) < 0) return -1;
  return vmp_rank_arg(o, self->comm->size, "rank", rank);
}

static PyObject *window_query(VmpWindow *self, PyObject *rank_o) {
  int rank;
  if (win_rank(self, rank_o, "vmmipc.Window.query", &rank) < 0) return NULL;
  void *p = NULL;
  size_t n = 0;
  vmmipc_result_t r = vmmipc_win_query(self->h, rank, &p, &n);  /* local, never blocks */
  if (r != VMMIPC_SUCCESS) return vmp_raise(r);
  self->work.handed = 1;
  return Py_BuildValue("(Kn)", (unsigned long long)(uintptr_t)p, (Py_ssize_t)n);
}

static PyObject *window_mapping(VmpWindow *self, PyObject *args, PyObject *kw) {
  static char *kwlist[] = {"rank", "dtype", "shape", NULL};
  PyObject *rank_o, *dtype = Py_None, *shape = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "O|OO:mapping", kwlist, &rank_o, &dtype, &shape)) return NULL;
  int rank;
  if (win_rank(self, rank_o, "vmmipc.Window.mapping", &rank) < 0) return NULL;
  void *p = NULL;
  size_t n = 0;
  vmmipc_result_t r = vmmipc_win_query(self->h, rank, &p, &n);
  if (r != VMMIPC_SUCCESS) return vmp_raise(r);
  /* The caller's own buffer is as writable as it is (a wrapped producer may
   * have said read-only), whatever access the peers asked for. */
  int ro = rank == self->comm->rank ? self->buf && ((VmpBuffer *)self->buf)->readonly : self->readonly;
  /* The peers' memory is accessible from the window's device, whichever is current now. */
  int dev = self->device >= 0 ? self->device : vmp_current_device();
  return vmp_view_new((PyObject *)self, (uintptr_t)p, n, ro, dev, dtype, shape, "vmmipc.Window.mapping");
}

/* signal / wait: (rank, value, stream=0); they enqueue and return. */
static PyObject *window_sigwait(VmpWindow *self, PyObject *args, PyObject *kw, int is_wait) {
  static char *kwlist[] = {"rank", "value", "stream", NULL};
  PyObject *rank_o, *value_o, *stream_o = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kw, is_wait ? "OO|O:wait" : "OO|O:signal", kwlist, &rank_o, &value_o,
                                   &stream_o))
    return NULL;
  int rank;
  uint64_t value;
  void *stream;
  /* The stream first: reading it may run Python code (.cuda_stream), during
     which another thread may close the window; the check comes after. */
  if (vmp_stream_arg(stream_o, &stream) < 0 || vmp_u64_arg(value_o, "value", &value) < 0 ||
      win_rank(self, rank_o, is_wait ? "vmmipc.Window.wait" : "vmmipc.Window.signal", &rank) < 0)
    return NULL;
  vmmipc_result_t r;
  vmmipc_win_t h = self->h;
  self->work.handed = 1;  /* even a failed call may have enqueued part */
  self->busy++;
  Py_BEGIN_ALLOW_THREADS  /* enqueues; may wait on the stand-in's or a full stream's queue */
  r = is_wait ? vmmipc_win_wait(h, rank, value, stream) : vmmipc_win_signal(h, rank, value, stream);
  Py_END_ALLOW_THREADS
  self->busy--;
  if (r != VMMIPC_SUCCESS) return vmp_raise(r);
  vmp_work_op(&self->work, stream);
  Py_RETURN_NONE;
}

static PyObject *window_signal(VmpWindow *self, PyObject *args, PyObject *kw) {
  return window_sigwait(self, args, kw, 0);
}
static PyObject *window_wait(VmpWindow *self, PyObject *args, PyObject *kw) {
  return window_sigwait(self, args, kw, 1);
}

static PyObject *window_barrier(VmpWindow *self, PyObject *args, PyObject *kw) {
  static char *kwlist[] = {"stream", NULL};
  PyObject *stream_o = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:barrier", kwlist, &stream_o)) return NULL;
  void *stream;
  if (vmp_stream_arg(stream_o, &stream) < 0 || vmp_window_check(self, "vmmipc.Window.barrier") < 0 ||
      vmp_ensure_context(self->device) < 0)  /* the stream first, as in signal */
    return NULL;
  vmmipc_result_t r;
  vmmipc_win_t h = self->h;
  self->work.handed = 1;
  self->busy++;
  Py_BEGIN_ALLOW_THREADS  /* enqueues; may wait on the stand-in's or a full stream's queue */
  r = vmmipc_win_barrier(h, stream);
  Py_END_ALLOW_THREADS
  self->busy--;
  if (r != VMMIPC_SUCCESS) return vmp_raise(r);
  vmp_work_op(&self->work, stream);
  Py_RETURN_NONE;
}

static PyObject *window_wait_host(VmpWindow *self, PyObject *args, PyObject *kw) {
  static char *kwlist[] = {"rank", "value", "timeout_ms", NULL};
  PyObject *rank_o, *value_o, *to_o = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|O:wait_host", kwlist, &rank_o, &value_o, &to_o)) return NULL;
  int rank, timeout;
  uint64_t value;
  if (win_rank(self, rank_o, "vmmipc.Window.wait_host", &rank) < 0 || vmp_u64_arg(value_o, "value", &value) < 0 ||
      vmp_timeout_arg(to_o, "timeout_ms", &timeout) < 0)
    return NULL;
  vmmipc_result_t r;
  vmmipc_win_t h = self->h;
  self->busy++;
  Py_BEGIN_ALLOW_THREADS
  r = vmmipc_win_wait_host(h, rank, value, timeout);
  Py_END_ALLOW_THREADS
  self->busy--;
  if (r != VMMIPC_SUCCESS) return vmp_raise(r);
  Py_RETURN_NONE;
}

static PyObject *window_get_closed(VmpWindow *self, void *Py_UNUSED(c)) { return PyBool_FromLong(!self->h); }
static PyObject *window_get_busy(VmpWindow *self, void *Py_UNUSED(c)) { return PyLong_FromLong(self->busy); }
static PyObject *window_get_views(VmpWindow *self, void *Py_UNUSED(c)) { return PyLong_FromLong(self->views); }
static PyObject *window_get_comm(VmpWindow *self, void *Py_UNUSED(c)) {
  if (!self->comm) Py_RETURN_NONE;
  Py_INCREF(self->comm);
  return (PyObject *)self->comm;
}
static PyObject *window_get_rank(VmpWindow *self, void *Py_UNUSED(c)) {
  return self->comm ? PyLong_FromLong(self->comm->rank) : (Py_INCREF(Py_None), Py_None);
}
static PyObject *window_get_size(VmpWindow *self, void *Py_UNUSED(c)) {
  return self->comm ? PyLong_FromLong(self->comm->size) : (Py_INCREF(Py_None), Py_None);
}

static PyMethodDef window_methods[] = {
    {"close", (PyCFunction)window_close, METH_NOARGS,
     "close()\n--\n\nCollective. First waits, at most half the comm's timeout, for the device work the window handed "
     "out (if a pointer, view or stream operation went out): after its signals, waits and barriers, on the streams "
     "given to its views' __dlpack__(stream=...), and on the legacy default stream. Then frees it on every rank. "
     "Refused (vmmipc.Error, Result.BUSY) on every rank while views of it live on any rank; a wait that failed "
     "raises TIMEOUT or CUDA here, and the window stays open on every rank. A second close does nothing."},
    {"query", (PyCFunction)window_query, METH_O,
     "query(rank)\n--\n\nLocal: (ptr, size) of rank's memory as mapped here; (0, 0) where that rank gave nothing or "
     "is on another node."},
    {"mapping", (PyCFunction)(void (*)(void))window_mapping, METH_VARARGS | METH_KEYWORDS,
     "mapping(rank, dtype=None, shape=None)\n--\n\nLocal: a view of rank's memory, on the window's device, with "
     "__dlpack__, __dlpack_device__ and __cuda_array_interface__. dtype: a name ('float32', torch.float32...; default "
     "uint8); shape: default all the bytes. The view keeps the window alive."},
    {"signal", (PyCFunction)(void (*)(void))window_signal, METH_VARARGS | METH_KEYWORDS,
     "signal(rank, value, stream=0)\n--\n\nEnqueues on stream: sets this rank's slot at rank to value once earlier "
     "work on stream is complete and visible. stream: an int handle (0: legacy default) or an object with "
     ".cuda_stream or __cuda_stream__."},
    {"wait", (PyCFunction)(void (*)(void))window_wait, METH_VARARGS | METH_KEYWORDS,
     "wait(rank, value, stream=0)\n--\n\nEnqueues on stream: holds later work until rank's slot here is at least "
     "value."},
    {"barrier", (PyCFunction)(void (*)(void))window_barrier, METH_VARARGS | METH_KEYWORDS,
     "barrier(stream=0)\n--\n\nA barrier among the node's ranks of the window, on each one's stream."},
    {"wait_host", (PyCFunction)(void (*)(void))window_wait_host, METH_VARARGS | METH_KEYWORDS,
     "wait_host(rank, value, timeout_ms=None)\n--\n\nBlocks (without the GIL) until rank's slot here reaches value, "
     "at most timeout_ms (None: the comm's timeout), else vmmipc.Error with Result.TIMEOUT."},
    {"__enter__", window_enter, METH_NOARGS, "Returns the window."},
    {"__exit__", (PyCFunction)window_exit, METH_VARARGS, "Closes the window (collective)."},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef window_getset[] = {
    {"closed", (getter)window_get_closed, NULL, "Whether close() ran.", NULL},
    {"_busy", (getter)window_get_busy, NULL, "Calls on the window in progress without the GIL (for tests).", NULL},
    {"views", (getter)window_get_views, NULL, "Live views (Mapping objects) of the window on this rank.", NULL},
    {"comm", (getter)window_get_comm, NULL, "The vmmipc.Comm of the window (None once closed).", NULL},
    {"rank", (getter)window_get_rank, NULL, "This process's rank in the window's comm.", NULL},
    {"size", (getter)window_get_size, NULL, "Number of ranks of the window's comm.", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

/* The collector sees what the window holds, so that a cycle through a
 * wrapped object (it holds the window, whose buffer holds it) is found. No
 * tp_clear, as for Buffer: the cycle breaks at the other object, and the
 * dealloc then releases the window as for any collected one. */
static int window_traverse(VmpWindow *self, visitproc visit, void *arg) {
  Py_VISIT(self->buf);
  Py_VISIT((PyObject *)self->heap);
  Py_VISIT((PyObject *)self->comm);
  return 0;
}

PyTypeObject VmpWindow_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "vmmipc.Window",
    .tp_basicsize = sizeof(VmpWindow),
    .tp_dealloc = (destructor)window_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_traverse = (traverseproc)window_traverse,
    .tp_doc = "Every node peer's memory mapped here (Comm.allgather_map, Heap.alloc). A context manager; close() is "
              "collective. Not constructible directly.",
    .tp_methods = window_methods,
    .tp_getset = window_getset,
};

int vmp_window_init(PyObject *module) {
  if (PyType_Ready(&VmpWindow_Type) < 0) return -1;
  Py_INCREF(&VmpWindow_Type);
  return PyModule_AddObject(module, "Window", (PyObject *)&VmpWindow_Type);
}
