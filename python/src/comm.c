/* vmmipc.Comm: a vmmipc communicator made from an mpi4py communicator
 * through mpi4py's C API (PyMPIComm_Get), and its collectives. */
#include "vmp.h"

#include <mpi4py/mpi4py.h>
#include <limits.h>
#include <stdlib.h>

static int mpi_usable(void) {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  return init && !fin;
}

int vmp_mpi_check(const char *op) {
  if (mpi_usable()) return 0;
  vmp_raise_msg(VMMIPC_ERR_MPI, "%s: MPI is finalized (collective calls need it)", op);
  return -1;
}

/* close() of an object releases the GIL while the library frees its handle,
 * and takes it back only after: a call from another thread meanwhile would
 * use a handle that may be freed, so it is refused. */
PyObject *vmp_refuse_closing(const char *op, const char *what) {
  return vmp_raise_msg(VMMIPC_ERR_BUSY, "%s: close() of the %s is in progress on another thread", op, what);
}

int vmp_open_check(const void *h, int closing, const char *op, const char *what) {
  if (!h) {
    vmp_raise_msg(VMMIPC_ERR_INVALID_ARG, "%s: the %s is closed", op, what);
    return -1;
  }
  if (closing) {
    vmp_refuse_closing(op, what);
    return -1;
  }
  return 0;
}

int vmp_comm_check(VmpComm *c, const char *op) {
  if (vmp_open_check(c->h, c->closing, op, "comm") < 0) return -1;
  return vmp_mpi_check(op);
}

int vmp_default_timeout_ms(void) {
  const char *e = getenv("VMMIPC_TIMEOUT_MS");  /* as the library reads it */
  long v = e && *e ? strtol(e, NULL, 10) : 0;
  return v > 0 && v < INT_MAX / 2 ? (int)v : 60000;
}

/* Not while another thread's close() is inside vmmipc_comm_destroy: the
 * comm may be freed before that close() takes the GIL back. */
int vmp_comm_abort_once(VmpComm *c) {
  if (c->aborted) return 0;
  if (!c->h || c->closing || vmmipc_comm_abort(c->h) != VMMIPC_SUCCESS) return -1;
  c->aborted = 1;
  return 0;
}

/* Exit only: a comm still open at exit is aborted (peers still in a call on
 * it fail at once) so that destroying it is local, then destroyed. Without
 * MPI or abort, the handle is left to the process exit rather than risk a
 * collective that peers never join. */
void vmp_comm_release_local(VmpComm *c, const char *why) {
  if (!c->h) return;
  vmp_warn_resource("vmmipc.Comm %s while open: %s (close it collectively, or use 'with')", why,
                    vmp_exit_keep ? "left to the process exit" : "aborting it and freeing it locally");
  vmp_comm_settle_all(c);
  if (mpi_usable() && !vmp_exit_keep && vmp_comm_abort_once(c) == 0 && !c->busy) vmmipc_comm_destroy(c->h);  /* busy: see windows */
  c->h = NULL;
  vmp_link_del(&c->link);
}

/* A bad argument on this rank of a collective: the rank still joins the
 * call, with a NULL out-parameter that the library refuses, so that the
 * peers fail at once naming this rank instead of waiting out the timeout.
 * The Python exception already set is then raised. kind: 0 allgather_map,
 * 1 bcast_map, 2 scatter_map, 3 heap_create (each refuses a NULL out on
 * every rank, as the library's collectives do). */
PyObject *vmp_join_failed(VmpComm *c, int kind, int root) {
  if (!c->h || c->closing) return NULL; /* closed meanwhile (a bufs generator ran): no call to join */
  VMP_ERR_SAVE(saved);
  vmmipc_comm_t h = c->h;
  c->busy++;
  Py_BEGIN_ALLOW_THREADS
  switch (kind) {
    case VMP_JOIN_ALLGATHER: vmmipc_allgather_map(h, NULL, NULL, NULL); break;
    case VMP_JOIN_BCAST: vmmipc_bcast_map(h, NULL, root, NULL, NULL); break;
    case VMP_JOIN_SCATTER: vmmipc_scatter_map(h, NULL, root, NULL, NULL); break;
    default: vmmipc_heap_create(h, NULL, NULL); break;
  }
  Py_END_ALLOW_THREADS
  c->busy--;
  VMP_SWEEP(es);
  VMP_ERR_RESTORE(saved);
  return NULL;
}

/* A bad argument to Comm(), or no memory for its object: the rank still
 * joins vmmipc_comm_create (with no out, which it refuses on every rank), so
 * that its peers fail at once. */
static PyObject *comm_join_failed(MPI_Comm mpic) {
  VMP_ERR_SAVE(saved);
  Py_BEGIN_ALLOW_THREADS
  vmmipc_comm_create(mpic, NULL, NULL);
  Py_END_ALLOW_THREADS
  VMP_ERR_RESTORE(saved);
  return NULL;
}

static PyObject *comm_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
  static char *kwlist[] = {"comm", "timeout_ms", NULL};
  PyObject *mc, *to = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O:Comm", kwlist, &mc, &to)) return NULL;
  if (!PyObject_TypeCheck(mc, &PyMPIComm_Type)) {
    PyErr_Format(PyExc_TypeError, "vmmipc.Comm needs an mpi4py.MPI.Comm, not %.100s", Py_TYPE(mc)->tp_name);
    return NULL;
  }
  MPI_Comm *pc = PyMPIComm_Get(mc);
  if (!pc) return NULL;
  if (*pc == MPI_COMM_NULL) {
    PyErr_SetString(PyExc_ValueError, "vmmipc.Comm: the mpi4py communicator is MPI.COMM_NULL");
    return NULL;
  }
  if (!mpi_usable()) return vmp_raise_msg(VMMIPC_ERR_MPI, "vmmipc.Comm: MPI is not initialized or already finalized");
  int inter = 0;
  MPI_Comm_test_inter(*pc, &inter);
  if (inter) {
    PyErr_SetString(PyExc_ValueError, "vmmipc.Comm needs an intracommunicator, not an intercommunicator");
    return NULL;
  }
  int timeout;
  if (vmp_timeout_arg(to, "timeout_ms", &timeout) < 0) return comm_join_failed(*pc);
  VmpComm *self = (VmpComm *)type->tp_alloc(type, 0);
  if (!self) return comm_join_failed(*pc);
  MPI_Comm_rank(*pc, &self->rank);
  MPI_Comm_size(*pc, &self->size);
  vmmipc_config_t cfg = VMMIPC_CONFIG_INIT;
  cfg.timeout_ms = timeout;
  vmmipc_comm_t h = NULL;
  vmmipc_result_t r;
  MPI_Comm mpic = *pc;
  Py_BEGIN_ALLOW_THREADS
  r = vmmipc_comm_create(mpic, &cfg, &h);
  Py_END_ALLOW_THREADS
  if (r != VMMIPC_SUCCESS) {
    Py_DECREF(self);
    return vmp_raise(r);
  }
  self->h = h;
  self->timeout_ms = timeout > 0 ? timeout : vmp_default_timeout_ms();
  vmp_link_add(&vmp_live_comms, &self->link);
  return (PyObject *)self;
}

/* The garbage collector cannot run the collective close, and never aborts:
 * the comm is kept (release.c) and released locally at exit. Its windows
 * and heaps were closed or released first (they keep it alive). */
static void comm_dealloc(VmpComm *self) {
  if (self->h && !vmp_finalized) {
    vmp_warn_resource("vmmipc.Comm garbage-collected while open: kept until exit, where it is released locally "
                      "(close it collectively, or use 'with')");
    vmp_comm_orphan(self);
    vmp_link_del(&self->link);
  }
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *comm_close(VmpComm *self, PyObject *Py_UNUSED(ignored)) {
  if (!self->h || vmp_finalized) Py_RETURN_NONE;
  if (self->closing) return vmp_refuse_closing("vmmipc.Comm.close", "comm");
  if (self->busy) return vmp_raise_msg(VMMIPC_ERR_BUSY, "vmmipc.Comm.close: a call on the comm is in progress");
  if (vmp_mpi_check("vmmipc.Comm.close") < 0) return NULL;
  /* Collected windows go to the library once their work is done (within
   * vmp_close_wait_ms): it frees them here, in step, before destroying. That
   * wait lets the GIL go: the comm is closing from here on, so that a call
   * (a second close too) from another thread meanwhile is refused. */
  self->busy++;
  self->closing = 1;
  const int wait_ms = vmp_close_wait_ms(self->timeout_ms);
  int left = vmp_comm_settle(self, wait_ms);
  vmmipc_result_t r;
  vmmipc_comm_t h = self->h;
  Py_BEGIN_ALLOW_THREADS
  r = vmmipc_comm_destroy(h);
  Py_END_ALLOW_THREADS
  self->closing = 0;
  self->busy--;
  vmp_err_snap es;
  vmp_err_take(&es);
  /* Only a refusal leaves the comm open; any other failure freed it (vmmipc.h). */
  const int refused = r == VMMIPC_ERR_BUSY || r == VMMIPC_ERR_INVALID_ARG;
  if (!refused) {
    /* Closed before any Python code runs: dropping the queued windows'
     * buffers and the sweep may run finalizers, which must not find the
     * freed handle. */
    self->h = NULL;
    vmp_link_del(&self->link);
    vmp_comm_forget(self);  /* freed with the comm (an unreleased one would have refused it) */
  }
  vmp_sweep_buffers();
  if (refused && left)
    return vmp_raise_msg(r, "vmmipc.Comm.close: %d garbage-collected window(s) still have device work running after "
                         "%d ms, so they are not released yet; the comm stays open on every rank (%s)",
                         left, wait_ms, es.msg);
  if (r != VMMIPC_SUCCESS) return vmp_raise_snap(r, &es);
  Py_RETURN_NONE;
}

static PyObject *comm_enter(PyObject *self, PyObject *Py_UNUSED(ignored)) {
  Py_INCREF(self);
  return self;
}

static PyObject *comm_exit(VmpComm *self, PyObject *Py_UNUSED(args)) {
  PyObject *r = comm_close(self, NULL);
  if (!r) return NULL;
  Py_DECREF(r);
  Py_RETURN_FALSE;
}

/* Local, from any thread. Not while close() is inside vmmipc_comm_destroy:
 * the comm may be freed before close() takes the GIL back, and an abort
 * then would touch freed memory; that close() ends within its bound anyway. */
static PyObject *comm_abort(VmpComm *self, PyObject *Py_UNUSED(ignored)) {
  if (vmp_comm_check(self, "vmmipc.Comm.abort") < 0) return NULL; /* refused while closing: it ends within the timeout */
  vmmipc_result_t r = vmmipc_comm_abort(self->h);  /* local: at most a few nonblocking MPI sends */
  if (r != VMMIPC_SUCCESS) return vmp_raise(r);
  self->aborted = 1;
  Py_RETURN_NONE;
}

static PyObject *comm_allgather_map(VmpComm *self, PyObject *args, PyObject *kw) {
  static char *kwlist[] = {"buf", "access", NULL};
  PyObject *bo, *ao = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O:allgather_map", kwlist, &bo, &ao))
    return vmp_join_failed(self, VMP_JOIN_ALLGATHER, 0);  /* a call Python cannot parse still joins */
  vmmipc_buf_t buf;
  vmmipc_access_t acc;
  const vmmipc_access_t *pacc;
  int ro;
  if (vmp_comm_check(self, "vmmipc.Comm.allgather_map") < 0) return NULL;
  vmp_comm_settle(self, 0);
  if (vmp_buffer_or_none(bo, "buf", &buf) < 0 || vmp_access_arg(ao, &acc, &pacc, &ro) < 0)
    return vmp_join_failed(self, VMP_JOIN_ALLGATHER, 0);
  vmmipc_win_t w = NULL;
  vmmipc_result_t r;
  vmmipc_comm_t h = self->h;
  self->busy++;
  vmp_buffer_hold(bo, 1);
  Py_BEGIN_ALLOW_THREADS
  r = vmmipc_allgather_map(h, buf, pacc, &w);
  Py_END_ALLOW_THREADS
  vmp_buffer_hold(bo, -1);
  self->busy--;
  VMP_SWEEP(es);
  if (r != VMMIPC_SUCCESS) return vmp_raise_snap(r, &es);
  return vmp_window_new(w, self, buf ? bo : NULL, NULL, ro);
}

static PyObject *comm_bcast_map(VmpComm *self, PyObject *args, PyObject *kw) {
  static char *kwlist[] = {"buf", "root", "access", NULL};
  PyObject *bo, *rooto, *ao = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|O:bcast_map", kwlist, &bo, &rooto, &ao))
    return vmp_join_failed(self, VMP_JOIN_BCAST, -1);  /* a call Python cannot parse still joins */
  vmmipc_buf_t buf;
  vmmipc_access_t acc;
  const vmmipc_access_t *pacc;
  int ro, root;
  if (vmp_comm_check(self, "vmmipc.Comm.bcast_map") < 0) return NULL;
  vmp_comm_settle(self, 0);
  /* A bad root still joins (as no rank): the peers that take this rank for
   * their root fail at once. */
  if (vmp_rank_arg(rooto, self->size, "root", &root) < 0) return vmp_join_failed(self, VMP_JOIN_BCAST, -1);
  if (vmp_buffer_or_none(bo, "buf", &buf) < 0 || vmp_access_arg(ao, &acc, &pacc, &ro) < 0)
    return vmp_join_failed(self, VMP_JOIN_BCAST, root);
  vmmipc_buf_t out = NULL;
  vmmipc_result_t r;
  vmmipc_comm_t h = self->h;
  self->busy++;
  vmp_buffer_hold(bo, 1);
  Py_BEGIN_ALLOW_THREADS
  r = vmmipc_bcast_map(h, buf, root, pacc, &out);
  Py_END_ALLOW_THREADS
  vmp_buffer_hold(bo, -1);
  self->busy--;
  VMP_SWEEP(es);
  if (r != VMMIPC_SUCCESS) return vmp_raise_snap(r, &es);
  if (!out) Py_RETURN_NONE;
  return vmp_buffer_new(out, ro);
}

static PyObject *comm_scatter_map(VmpComm *self, PyObject *args, PyObject *kw) {
  static char *kwlist[] = {"bufs", "root", "access", NULL};
  PyObject *bo, *rooto, *ao = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|O:scatter_map", kwlist, &bo, &rooto, &ao))
    return vmp_join_failed(self, VMP_JOIN_SCATTER, -1);  /* a call Python cannot parse still joins */
  vmmipc_access_t acc;
  const vmmipc_access_t *pacc;
  int ro, root;
  if (vmp_comm_check(self, "vmmipc.Comm.scatter_map") < 0) return NULL;
  vmp_comm_settle(self, 0);
  if (vmp_rank_arg(rooto, self->size, "root", &root) < 0) return vmp_join_failed(self, VMP_JOIN_SCATTER, -1);
  if (vmp_access_arg(ao, &acc, &pacc, &ro) < 0) return vmp_join_failed(self, VMP_JOIN_SCATTER, root);
  vmmipc_buf_t *bufs = NULL;
  PyObject *seq = NULL;  /* a tuple of its own: holds the Buffers during the call, whatever other threads do
                            to the caller's list meanwhile */
  if (self->rank == root && bo != Py_None) {  /* read at the root only, as in C; None: refused collectively */
    PyObject *fast = PySequence_Fast(bo, "bufs must be a sequence of Buffer or None (one per rank) at the root");
    seq = fast ? PySequence_Tuple(fast) : NULL;
    Py_XDECREF(fast);
    if (!seq) return vmp_join_failed(self, VMP_JOIN_SCATTER, root);
    if (PySequence_Fast_GET_SIZE(seq) != self->size) {
      PyErr_Format(PyExc_ValueError, "bufs has %zd entries; the comm has %d ranks", PySequence_Fast_GET_SIZE(seq),
                   self->size);
      Py_DECREF(seq);
      return vmp_join_failed(self, VMP_JOIN_SCATTER, root);
    }
    bufs = PyMem_Calloc((size_t)self->size, sizeof *bufs);
    if (!bufs) {
      Py_DECREF(seq);
      PyErr_NoMemory();
      return vmp_join_failed(self, VMP_JOIN_SCATTER, root);
    }
    for (int i = 0; i < self->size; i++) {
      if (vmp_buffer_or_none(PySequence_Fast_GET_ITEM(seq, i), "bufs[i]", &bufs[i]) < 0) {
        PyMem_Free(bufs);
        Py_DECREF(seq);
        return vmp_join_failed(self, VMP_JOIN_SCATTER, root);
      }
    }
  }
  /* Reading bufs may have run Python code (a generator), during which
     another thread may have closed the comm or begun to. */
  if (vmp_comm_check(self, "vmmipc.Comm.scatter_map") < 0) {
    PyMem_Free(bufs);
    Py_XDECREF(seq);
    return NULL;
  }
  vmmipc_buf_t out = NULL;
  vmmipc_result_t r;
  vmmipc_comm_t h = self->h;
  self->busy++;
  for (Py_ssize_t i = 0; bufs && i < self->size; i++) vmp_buffer_hold(PySequence_Fast_GET_ITEM(seq, i), 1);
  Py_BEGIN_ALLOW_THREADS
  r = vmmipc_scatter_map(h, bufs, root, pacc, &out);
  Py_END_ALLOW_THREADS
  for (Py_ssize_t i = 0; bufs && i < self->size; i++) vmp_buffer_hold(PySequence_Fast_GET_ITEM(seq, i), -1);
  self->busy--;
  VMP_SWEEP(es);
  PyMem_Free(bufs);
  Py_XDECREF(seq);
  if (r != VMMIPC_SUCCESS) return vmp_raise_snap(r, &es);
  if (!out) Py_RETURN_NONE;
  return vmp_buffer_new(out, ro);
}

static PyObject *comm_heap_m(VmpComm *self, PyObject *args, PyObject *kw) { return vmp_comm_heap(self, args, kw); }

static PyObject *comm_stats(VmpComm *self, PyObject *Py_UNUSED(ignored)) {
  if (vmp_comm_check(self, "vmmipc.Comm.stats") < 0) return NULL;
  vmmipc_comm_stats_t s = VMMIPC_COMM_STATS_INIT;
  vmmipc_result_t r = vmmipc_comm_stats(self->h, &s);
  if (r != VMMIPC_SUCCESS) return vmp_raise(r);
  int pending = 0;
  for (vmp_pending *p = self->pending; p; p = p->next) pending++;
  static const char *const paths[] = {NULL, "memops", "kernel"}, *const by[] = {NULL, "setting", "support", "trial"};
  int sp = s.sync_path >= 1 && s.sync_path <= 2 ? s.sync_path : 0;
  int bp = s.sync_barrier_path >= 1 && s.sync_barrier_path <= 2 ? s.sync_barrier_path : 0;
  int db = s.sync_decided_by >= 1 && s.sync_decided_by <= 3 ? s.sync_decided_by : 0;
  return Py_BuildValue("{s:K,s:K,s:K,s:K,s:K,s:i,s:i,s:O,s:i,s:K,s:i,s:z,s:z,s:z,s:(KK),s:(KK)}", "map_cache_hits",
                       (unsigned long long)s.map_cache_hits, "map_cache_misses", (unsigned long long)s.map_cache_misses,
                       "stale_frames", (unsigned long long)s.stale_frames, "map_cache_bytes",
                       (unsigned long long)s.map_cache_bytes, "refused", (unsigned long long)s.refused,
                       "map_cache_idle", s.map_cache_idle, "open_windows", s.open_windows, "broken",
                       s.broken ? Py_True : Py_False, "released", s.released, "released_freed",
                       (unsigned long long)s.released_freed, "collected_waiting", pending, "sync_path", paths[sp],
                       "sync_barrier_path", paths[bp], "sync_decided_by", by[db], "trial_signal_ns",
                       (unsigned long long)s.trial_signal_memops_ns, (unsigned long long)s.trial_signal_kernels_ns,
                       "trial_barrier_ns", (unsigned long long)s.trial_barrier_memops_ns,
                       (unsigned long long)s.trial_barrier_kernels_ns);
}

static PyObject *comm_get_rank(VmpComm *self, void *Py_UNUSED(c)) { return PyLong_FromLong(self->rank); }
static PyObject *comm_get_size(VmpComm *self, void *Py_UNUSED(c)) { return PyLong_FromLong(self->size); }
static PyObject *comm_get_closed(VmpComm *self, void *Py_UNUSED(c)) { return PyBool_FromLong(!self->h); }
static PyObject *comm_get_busy(VmpComm *self, void *Py_UNUSED(c)) { return PyLong_FromLong(self->busy); }

static PyMethodDef comm_methods[] = {
    {"close", (PyCFunction)comm_close, METH_NOARGS,
     "close()\n--\n\nCollective: frees, in step, the windows and heaps of the comm that every rank's garbage "
     "collector released (waiting up to half the timeout for their device work), then destroys the comm. Refused "
     "(vmmipc.Error) while windows or heaps of it are open on some rank. A second close does nothing."},
    {"__enter__", comm_enter, METH_NOARGS, "Returns the comm."},
    {"__exit__", (PyCFunction)comm_exit, METH_VARARGS, "Closes the comm (collective)."},
    {"abort", (PyCFunction)comm_abort, METH_NOARGS,
     "abort()\n--\n\nLocal, callable from another thread while a call on the comm blocks: the blocked call and every "
     "later one fail with Result.ABORTED, here and at the node's peers; close() then frees locally. Refused "
     "(Result.BUSY) while close() of the comm runs on another thread (the comm may be freed under it)."},
    {"allgather_map", (PyCFunction)(void (*)(void))comm_allgather_map, METH_VARARGS | METH_KEYWORDS,
     "allgather_map(buf, access=None)\n--\n\nCollective: maps every node peer's Buffer (None: this rank gives "
     "nothing). access: None or 'rw' (read-write), or 'r' (read-only). Returns a Window."},
    {"bcast_map", (PyCFunction)(void (*)(void))comm_bcast_map, METH_VARARGS | METH_KEYWORDS,
     "bcast_map(buf, root, access=None)\n--\n\nCollective: the root's Buffer mapped by the other ranks of its node. "
     "Returns the mapped Buffer, or None at the root and off its node."},
    {"scatter_map", (PyCFunction)(void (*)(void))comm_scatter_map, METH_VARARGS | METH_KEYWORDS,
     "scatter_map(bufs, root, access=None)\n--\n\nCollective: bufs (read at the root only) has one Buffer or None "
     "per rank; each other rank of the root's node maps its entry. Returns the mapped Buffer, or None at the root, "
     "off its node and for a None entry."},
    {"heap", (PyCFunction)(void (*)(void))comm_heap_m, METH_VARARGS | METH_KEYWORDS,
     "heap(reserve=None, grow=None, access=None)\n--\n\nCollective: a symmetric heap (vmmipc.Heap) whose alloc() "
     "gives windows without driver calls. reserve: address space per rank; grow: bytes per growth step (None: "
     "the library's defaults)."},
    {"stats", (PyCFunction)comm_stats, METH_NOARGS,
     "stats()\n--\n\nLocal: counters of the comm (a dict: mapping cache, open windows, broken; released: windows "
     "and heaps released here by the garbage collector and not freed yet; released_freed: those freed so far; "
     "collected_waiting: collected windows whose device work is not done yet, not released; sync_path, "
     "sync_barrier_path: 'memops' or 'kernel' once the first window made them (else None), sync_decided_by: "
     "'setting', 'support' or 'trial'; trial_signal_ns, trial_barrier_ns: auto's figures, memops and kernel)."},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef comm_getset[] = {
    {"rank", (getter)comm_get_rank, NULL, "This process's rank in the comm.", NULL},
    {"size", (getter)comm_get_size, NULL, "Number of ranks of the comm.", NULL},
    {"closed", (getter)comm_get_closed, NULL, "Whether close() ran.", NULL},
    {"_busy", (getter)comm_get_busy, NULL, "Calls on the comm in progress without the GIL (for tests).", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

PyTypeObject VmpComm_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "vmmipc.Comm",
    .tp_basicsize = sizeof(VmpComm),
    .tp_dealloc = (destructor)comm_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Comm(comm, timeout_ms=None)\n--\n\n"
              "A vmmipc communicator over the ranks of an mpi4py communicator (collective to create; "
              "vmmipc duplicates it). timeout_ms bounds every wait for a peer (None: VMMIPC_TIMEOUT_MS or 60 s). "
              "A context manager; close() is collective.",
    .tp_methods = comm_methods,
    .tp_getset = comm_getset,
    .tp_new = comm_new,
};

int vmp_comm_init(PyObject *module) {
  if (import_mpi4py() < 0) return -1;
  if (PyType_Ready(&VmpComm_Type) < 0) return -1;
  Py_INCREF(&VmpComm_Type);
  return PyModule_AddObject(module, "Comm", (PyObject *)&VmpComm_Type);
}
