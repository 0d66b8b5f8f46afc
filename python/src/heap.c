/* vmmipc.Heap: the symmetric heap (vmmipc_heap_*) of a comm. alloc() gives
 * Windows that keep the heap alive; close() (vmmipc_heap_destroy) is
 * collective and refused while heap windows are open. */
#include "vmp.h"

int vmp_heap_check(VmpHeap *hp, const char *op);
int vmp_heap_check(VmpHeap *hp, const char *op) {
  return vmp_open_check(hp->h, hp->closing, op, "heap");
}

PyObject *vmp_comm_heap(VmpComm *c, PyObject *args, PyObject *kw) {
  static char *kwlist[] = {"reserve", "grow", "access", NULL};
  PyObject *ro = Py_None, *go = Py_None, *ao = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "|OOO:heap", kwlist, &ro, &go, &ao))
    return vmp_join_failed(c, VMP_JOIN_HEAP, 0);
  vmmipc_heap_config_t cfg = VMMIPC_HEAP_CONFIG_INIT;
  vmmipc_access_t acc;
  int readonly;
  if (vmp_comm_check(c, "vmmipc.Comm.heap") < 0) return NULL;
  vmp_comm_settle(c, 0);
  if ((ro != Py_None && vmp_size_arg(ro, "reserve", &cfg.reserve) < 0) ||
      (go != Py_None && vmp_size_arg(go, "grow", &cfg.grow) < 0) || vmp_access_arg(ao, &acc, &cfg.access, &readonly) < 0)
    return vmp_join_failed(c, VMP_JOIN_HEAP, 0);
  VmpHeap *hp = (VmpHeap *)VmpHeap_Type.tp_alloc(&VmpHeap_Type, 0);
  if (!hp) return vmp_join_failed(c, VMP_JOIN_HEAP, 0);
  vmmipc_heap_t h = NULL;
  vmmipc_result_t r;
  vmmipc_comm_t ch = c->h;
  c->busy++;
  Py_BEGIN_ALLOW_THREADS
  r = vmmipc_heap_create(ch, &cfg, &h);
  Py_END_ALLOW_THREADS
  c->busy--;
  VMP_SWEEP(es);
  if (r != VMMIPC_SUCCESS) {
    Py_DECREF(hp);
    return vmp_raise_snap(r, &es);
  }
  hp->h = h;
  Py_INCREF(c);
  hp->comm = c;
  hp->readonly = readonly;
  vmp_link_add(&vmp_live_heaps, &hp->link);
  return (PyObject *)hp;
}

/* Exit only: the comm is aborted and the heap destroyed locally. */
void vmp_heap_release_local(VmpHeap *hp, const char *why) {
  if (!hp->h) return;
  vmp_warn_resource("vmmipc.Heap %s while open: %s (close it collectively, or use 'with')", why,
                    vmp_exit_keep ? "left to the process exit" : "aborting its comm and freeing it locally");
  int fin = 0;
  MPI_Finalized(&fin);
  if (!fin && !vmp_exit_keep && hp->comm && vmp_comm_abort_once(hp->comm) == 0 && !hp->busy) vmmipc_heap_destroy(hp->h);  /* local once aborted */
  hp->h = NULL;
  vmp_link_del(&hp->link);
}

/* The garbage collector never runs collective work and never aborts: the
 * heap is released, and destroyed in step at a later collective call on its
 * comm once every rank released it and its windows are freed. */
static void heap_dealloc(VmpHeap *self) {
  if (self->h && !vmp_finalized) {
    vmp_warn_resource("vmmipc.Heap garbage-collected while open: released; it is destroyed in step at a later "
                      "collective call on its comm once every rank released it (close it collectively, or use "
                      "'with')");
    vmmipc_heap_release(self->h);
    self->h = NULL;
    vmp_link_del(&self->link);
  }
  Py_CLEAR(self->comm);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

/* A bad argument to alloc on this rank: it still joins, with a NULL out
 * that the library refuses on every rank, as vmp_join_failed does; the
 * Python exception already set is then raised. */
static PyObject *heap_join_failed(VmpHeap *self) {
  if (!self->h || self->closing) return NULL;  /* nothing to join */
  VMP_ERR_SAVE(saved);
  vmmipc_heap_t h = self->h;
  self->busy++;
  Py_BEGIN_ALLOW_THREADS
  vmmipc_heap_alloc(h, 0, NULL);
  Py_END_ALLOW_THREADS
  self->busy--;
  VMP_SWEEP(es);
  VMP_ERR_RESTORE(saved);
  return NULL;
}

static PyObject *heap_alloc(VmpHeap *self, PyObject *args, PyObject *kw) {
  static char *kwlist[] = {"nbytes", NULL};
  PyObject *no;
  size_t n;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "O:alloc", kwlist, &no)) return heap_join_failed(self);
  if (vmp_heap_check(self, "vmmipc.Heap.alloc") < 0 || vmp_mpi_check("vmmipc.Heap.alloc") < 0) return NULL;
  vmp_comm_settle(self->comm, 0);
  if (vmp_size_arg(no, "nbytes", &n) < 0) return heap_join_failed(self);
  vmmipc_win_t w = NULL;
  vmmipc_result_t r;
  vmmipc_heap_t h = self->h;
  self->busy++;
  self->comm->busy++;
  Py_BEGIN_ALLOW_THREADS
  r = vmmipc_heap_alloc(h, n, &w);
  Py_END_ALLOW_THREADS
  self->comm->busy--;
  self->busy--;
  VMP_SWEEP(es);
  if (r != VMMIPC_SUCCESS) return vmp_raise_snap(r, &es);
  return vmp_window_new(w, self->comm, NULL, self, self->readonly);
}

static PyObject *heap_close(VmpHeap *self, PyObject *Py_UNUSED(ignored)) {
  if (!self->h || vmp_finalized) Py_RETURN_NONE;
  if (self->busy) return vmp_raise_msg(VMMIPC_ERR_BUSY, "vmmipc.Heap.close: a call on the heap is in progress");
  if (vmp_mpi_check("vmmipc.Heap.close") < 0) return NULL;
  vmp_comm_settle(self->comm, 0);
  vmmipc_result_t r;
  vmmipc_heap_t h = self->h;
  self->busy++;
  self->closing = 1;
  self->comm->busy++;
  Py_BEGIN_ALLOW_THREADS
  r = vmmipc_heap_destroy(h);
  Py_END_ALLOW_THREADS
  self->comm->busy--;
  self->closing = 0;
  self->busy--;
  vmp_err_snap es;
  vmp_err_take(&es);
  /* Only a refusal leaves the heap open; any other failure freed it (vmmipc.h). */
  const int refused = r == VMMIPC_ERR_BUSY || r == VMMIPC_ERR_INVALID_ARG;
  if (!refused) {  /* closed before the sweep's finalizers can run */
    self->h = NULL;
    vmp_link_del(&self->link);
  }
  vmp_sweep_buffers();
  if (refused) return vmp_raise_snap(r, &es);
  Py_CLEAR(self->comm);
  if (r != VMMIPC_SUCCESS) return vmp_raise_snap(r, &es);
  Py_RETURN_NONE;
}

/* Collective, as alloc: MPI must be usable, and the comm counts it busy. */
static PyObject *heap_trim(VmpHeap *self, PyObject *Py_UNUSED(ignored)) {
  if (vmp_heap_check(self, "vmmipc.Heap.trim") < 0 || vmp_mpi_check("vmmipc.Heap.trim") < 0) return NULL;
  vmp_comm_settle(self->comm, 0);
  vmmipc_result_t r;
  vmmipc_heap_t h = self->h;
  self->busy++;
  self->comm->busy++;
  Py_BEGIN_ALLOW_THREADS
  r = vmmipc_heap_trim(h);
  Py_END_ALLOW_THREADS
  self->comm->busy--;
  self->busy--;
  VMP_SWEEP(es);
  if (r != VMMIPC_SUCCESS) return vmp_raise_snap(r, &es);
  Py_RETURN_NONE;
}

static PyObject *heap_stats(VmpHeap *self, PyObject *Py_UNUSED(ignored)) {
  if (vmp_heap_check(self, "vmmipc.Heap.stats") < 0) return NULL;
  vmmipc_heap_stats_t s = VMMIPC_HEAP_STATS_INIT;
  vmmipc_result_t r = vmmipc_heap_stats(self->h, &s);
  if (r != VMMIPC_SUCCESS) return vmp_raise(r);
  return Py_BuildValue("{s:K,s:K,s:K,s:K,s:i,s:K,s:d}", "reserved", (unsigned long long)s.reserved, "mapped",
                       (unsigned long long)s.mapped, "in_use", (unsigned long long)s.in_use, "high_water",
                       (unsigned long long)s.high_water, "live_windows", s.live_windows, "growth_steps",
                       (unsigned long long)s.growth_steps, "grow_s", s.grow_s);
}

static PyObject *heap_enter(PyObject *self, PyObject *Py_UNUSED(ignored)) {
  Py_INCREF(self);
  return self;
}

static PyObject *heap_exit(VmpHeap *self, PyObject *Py_UNUSED(args)) {
  PyObject *r = heap_close(self, NULL);
  if (!r) return NULL;
  Py_DECREF(r);
  Py_RETURN_FALSE;
}

static PyObject *heap_get_closed(VmpHeap *self, void *Py_UNUSED(c)) { return PyBool_FromLong(!self->h); }

static PyMethodDef heap_methods[] = {
    {"alloc", (PyCFunction)(void (*)(void))heap_alloc, METH_VARARGS | METH_KEYWORDS,
     "alloc(nbytes)\n--\n\nCollective: a Window of nbytes on this rank (sizes may differ between ranks, 0 allowed), "
     "at the same offset on every rank. The window keeps the heap alive."},
    {"stats", (PyCFunction)heap_stats, METH_NOARGS,
     "stats()\n--\n\nLocal: a dict of reserved, mapped, in_use, high_water, live_windows, growth_steps, grow_s."},
    {"trim", (PyCFunction)heap_trim, METH_NOARGS, "trim()\n--\n\nCollective: gives back unused growth steps."},
    {"close", (PyCFunction)heap_close, METH_NOARGS,
     "close()\n--\n\nCollective: destroys the heap; refused (Result.BUSY) while heap windows are open. A second "
     "close does nothing."},
    {"__enter__", heap_enter, METH_NOARGS, "Returns the heap."},
    {"__exit__", (PyCFunction)heap_exit, METH_VARARGS, "Closes the heap (collective)."},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef heap_getset[] = {{"closed", (getter)heap_get_closed, NULL, "Whether close() ran.", NULL},
                                    {NULL, NULL, NULL, NULL, NULL}};

PyTypeObject VmpHeap_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "vmmipc.Heap",
    .tp_basicsize = sizeof(VmpHeap),
    .tp_dealloc = (destructor)heap_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A symmetric heap of a comm (Comm.heap): address space reserved once per rank, windows carved from it "
              "with one small collective. A context manager; close() is collective. Not constructible directly.",
    .tp_methods = heap_methods,
    .tp_getset = heap_getset,
};

int vmp_heap_init(PyObject *module) {
  if (PyType_Ready(&VmpHeap_Type) < 0) return -1;
  Py_INCREF(&VmpHeap_Type);
  return PyModule_AddObject(module, "Heap", (PyObject *)&VmpHeap_Type);
}
