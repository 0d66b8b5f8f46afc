/* vmmipc.Buffer, vmmipc.alloc and vmmipc.wrap: device memory that windows
 * and root collectives share. A wrapped object (DLPack or CUDA Array
 * Interface producer) is kept alive by the Buffer. */
#include "vmp.h"

#include <stdio.h>
#include <stdlib.h>

static VmpBuffer *buf_alloc_obj(void) { return (VmpBuffer *)VmpBuffer_Type.tp_alloc(&VmpBuffer_Type, 0); }

static int buf_fill(VmpBuffer *b, vmmipc_buf_t h) {
  void *p = NULL;
  size_t n = 0;
  vmmipc_result_t r = vmmipc_buf_ptr(h, &p, &n);
  if (r != VMMIPC_SUCCESS) {
    vmp_raise(r);
    return -1;
  }
  b->h = h;
  b->ptr = (uintptr_t)p;
  b->size = n;
  b->device = vmp_current_device();
  return 0;
}

PyObject *vmp_buffer_new(vmmipc_buf_t h, int readonly) {
  VmpBuffer *b = buf_alloc_obj();
  if (!b || buf_fill(b, h) < 0) {
    Py_XDECREF(b);
    vmmipc_buf_free(h);
    return NULL;
  }
  b->readonly = readonly;
  return (PyObject *)b;
}

/* Open, and no close() of it in progress on another thread, else raises. */
static int buf_check(VmpBuffer *b, const char *what) { return vmp_open_check(b->h, b->closing, what, "buffer"); }

int vmp_buffer_or_none(PyObject *o, const char *what, vmmipc_buf_t *out) {
  *out = NULL;
  if (o == Py_None) return 0;
  if (!PyObject_TypeCheck(o, &VmpBuffer_Type)) {
    PyErr_Format(PyExc_TypeError, "%s must be a vmmipc.Buffer or None, not %.100s", what, Py_TYPE(o)->tp_name);
    return -1;
  }
  VmpBuffer *b = (VmpBuffer *)o;
  if (buf_check(b, what) < 0) return -1;
  *out = b->h;
  return 0;
}

void vmp_buffer_hold(PyObject *o, int d) {
  if (o && PyObject_TypeCheck(o, &VmpBuffer_Type)) ((VmpBuffer *)o)->busy += d;
}

void vmp_release_keep(PyObject *keep, void *dl_managed, int dl_versioned) {
  if (dl_managed && !vmp_finalized) vmp_dlpack_release(dl_managed, dl_versioned);
  Py_XDECREF(keep);
}

static void buf_release_keep(VmpBuffer *b) {
  vmp_release_keep(b->keep, b->dl_managed, b->dl_versioned);
  b->keep = NULL;
  b->dl_managed = NULL;
}

/* Local. Open windows hold a reference to the buffers they expose; one the
 * garbage collector released may still expose it until the library frees
 * it in step: then the buffer (and what it wraps) waits for that. So does a
 * buffer whose pointer or views went out to device work (unmapped under that
 * work, a kernel would fault): its work is recorded and waited for after a
 * later collective call, as a collected window's (release.c), since nothing
 * that needs a context runs here. */
static void buf_dealloc(VmpBuffer *self) {
  PyObject_GC_UnTrack(self);
  if (self->h && !vmp_finalized && (self->work.handed || vmmipc_buf_free(self->h) == VMMIPC_ERR_BUSY)) {
    vmp_defer_buffer(self->h, self->keep, self->dl_managed, self->dl_versioned, &self->work, self->device);
    self->keep = NULL;
    self->dl_managed = NULL;
  }
  self->h = NULL;
  buf_release_keep(self);
  vmp_work_free(&self->work);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Local: refused while views of it live; waits (at most VMMIPC_TIMEOUT_MS,
 * else 60 s) for the work its pointer and views handed out on the legacy
 * default stream and the consumer streams of its views' __dlpack__. */
static PyObject *buf_close(VmpBuffer *self, PyObject *Py_UNUSED(ignored)) {
  const char *op = "vmmipc.Buffer.close";
  if (!self->h) Py_RETURN_NONE;
  if (self->closing) return vmp_refuse_closing(op, "buffer");
  if (self->busy)
    return vmp_raise_msg(VMMIPC_ERR_BUSY, "%s: a call on another thread uses the buffer (a map of it)", op);
  if (self->views)
    return vmp_raise_msg(VMMIPC_ERR_BUSY,
                         "%s: %d view(s) of the buffer are live (Mapping objects, DLPack capsules and the tensors "
                         "made from them, CUDA Array Interface consumers holding a Mapping); release them first",
                         op, self->views);
  void **ev = NULL;
  int nev = 0, how = 0, rc = 0, timeout = vmp_default_timeout_ms();
  if (self->work.handed) {
    if (vmp_ensure_context(self->device) < 0) return NULL;
    rc = vmp_work_begin(&self->work, &ev, &nev);
    if (rc < 0) return PyErr_NoMemory();
    if (rc) how = VMP_WAIT_DRIVER;
  }
  vmmipc_result_t r = VMMIPC_SUCCESS;
  vmmipc_buf_t h = self->h;
  self->closing = 1;
  Py_BEGIN_ALLOW_THREADS
  if (!how && nev) how = vmp_events_wait(ev, nev, timeout, &rc);
  if (!how) r = vmmipc_buf_free(h);
  Py_END_ALLOW_THREADS
  self->closing = 0;
  free(ev);
  if (how) return vmp_wait_failed(op, how, rc, timeout, -1);
  if (r != VMMIPC_SUCCESS) return vmp_raise(r);
  self->h = NULL;
  buf_release_keep(self);
  vmp_work_free(&self->work);
  vmp_sweep_buffers();
  Py_RETURN_NONE;
}

/* The collector sees the wrapped object, so that one holding its own Buffer
 * (a cycle) is found. No tp_clear: dropping it here would free the memory
 * while the Buffer still registers it; the cycle breaks at the other object,
 * and the Buffer's dealloc then frees in order. */
static int buf_traverse(VmpBuffer *self, visitproc visit, void *arg) {
  Py_VISIT(self->keep);
  return 0;
}

static PyObject *buf_enter(PyObject *self, PyObject *Py_UNUSED(ignored)) {
  Py_INCREF(self);
  return self;
}

static PyObject *buf_exit(VmpBuffer *self, PyObject *Py_UNUSED(args)) {
  PyObject *r = buf_close(self, NULL);
  if (!r) return NULL;
  Py_DECREF(r);
  Py_RETURN_FALSE;
}

static PyObject *buf_mapping(VmpBuffer *self, PyObject *args, PyObject *kw) {
  static char *kwlist[] = {"dtype", "shape", NULL};
  PyObject *dtype = Py_None, *shape = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "|OO:mapping", kwlist, &dtype, &shape)) return NULL;
  if (buf_check(self, "vmmipc.Buffer.mapping") < 0) return NULL;
  return vmp_view_new((PyObject *)self, self->ptr, self->size, self->readonly, self->device, dtype, shape,
                      "vmmipc.Buffer.mapping");
}

static PyObject *buf_get_ptr(VmpBuffer *self, void *Py_UNUSED(c)) {
  if (buf_check(self, "vmmipc.Buffer.ptr") < 0) return NULL;
  self->work.handed = 1;
  return PyLong_FromSize_t(self->ptr);
}
static PyObject *buf_get_views(VmpBuffer *self, void *Py_UNUSED(c)) { return PyLong_FromLong(self->views); }
static PyObject *buf_get_tracked(VmpBuffer *self, void *Py_UNUSED(c)) { return PyLong_FromLong(self->work.n); }
static PyObject *buf_get_size(VmpBuffer *self, void *Py_UNUSED(c)) { return PyLong_FromSize_t(self->h ? self->size : 0); }
static PyObject *buf_get_closed(VmpBuffer *self, void *Py_UNUSED(c)) { return PyBool_FromLong(!self->h); }
static PyObject *buf_get_readonly(VmpBuffer *self, void *Py_UNUSED(c)) { return PyBool_FromLong(self->readonly); }

static PyObject *buf_repr(VmpBuffer *self) {
  if (!self->h) return PyUnicode_FromString("<vmmipc.Buffer closed>");
  char text[96];
  snprintf(text, sizeof text, "<vmmipc.Buffer ptr=0x%zx size=%zu%s>", (size_t)self->ptr, self->size,
           self->readonly ? " read-only" : "");
  return PyUnicode_FromString(text);
}

static PyMethodDef buf_methods[] = {
    {"close", (PyCFunction)buf_close, METH_NOARGS,
     "close()\n--\n\nLocal: frees the buffer (a wrapped buffer releases only its references), after waiting (at most "
     "VMMIPC_TIMEOUT_MS, else 60 s) for the work its pointer and views handed out on the legacy default stream and "
     "on the streams given to its views' __dlpack__. Refused (vmmipc.Error, BUSY) while an open window exposes it "
     "or views of it live. A second close does nothing."},
    {"mapping", (PyCFunction)(void (*)(void))buf_mapping, METH_VARARGS | METH_KEYWORDS,
     "mapping(dtype=None, shape=None)\n--\n\nA view of the whole buffer for DLPack and the CUDA Array Interface "
     "(uint8 bytes by default)."},
    {"__enter__", buf_enter, METH_NOARGS, "Returns the buffer."},
    {"__exit__", (PyCFunction)buf_exit, METH_VARARGS, "Closes the buffer."},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef buf_getset[] = {
    {"ptr", (getter)buf_get_ptr, NULL, "Device address (int).", NULL},
    {"size", (getter)buf_get_size, NULL, "Size in bytes (0 once closed).", NULL},
    {"closed", (getter)buf_get_closed, NULL, "Whether close() ran.", NULL},
    {"readonly", (getter)buf_get_readonly, NULL, "Whether it is a read-only mapping.", NULL},
    {"views", (getter)buf_get_views, NULL, "Live views (Mapping objects) of the buffer.", NULL},
    {"_tracked", (getter)buf_get_tracked, NULL, "Streams whose work close() waits for (for tests).", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

PyTypeObject VmpBuffer_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "vmmipc.Buffer",
    .tp_basicsize = sizeof(VmpBuffer),
    .tp_dealloc = (destructor)buf_dealloc,
    .tp_repr = (reprfunc)buf_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_traverse = (traverseproc)buf_traverse,
    .tp_doc = "Device memory that vmmipc can share: made by vmmipc.alloc or vmmipc.wrap, or a peer's memory "
              "mapped here by Comm.bcast_map or Comm.scatter_map. Not constructible directly.",
    .tp_methods = buf_methods,
    .tp_getset = buf_getset,
};

static PyObject *py_alloc(PyObject *Py_UNUSED(m), PyObject *args, PyObject *kw) {
  static char *kwlist[] = {"nbytes", NULL};
  PyObject *no;
  size_t n;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "O:alloc", kwlist, &no) || vmp_size_arg(no, "nbytes", &n) < 0) return NULL;
  vmp_sweep_buffers(); /* collected buffers whose work is done go first: their memory comes back */
  vmmipc_buf_t h = NULL;
  vmmipc_result_t r;
  Py_BEGIN_ALLOW_THREADS
  r = vmmipc_alloc(n, &h);
  Py_END_ALLOW_THREADS
  if (r != VMMIPC_SUCCESS) return vmp_raise(r);
  return vmp_buffer_new(h, 0);
}

/* CUDA Array Interface: data pointer, byte extent and read-only flag of a C-contiguous array. */
static int cai_extent(PyObject *obj, uintptr_t *ptr, size_t *nbytes, int *readonly) {
  PyObject *d = PyObject_GetAttrString(obj, "__cuda_array_interface__");
  if (!d) return -1;
  int rc = -1;
  if (!PyDict_Check(d)) {
    PyErr_SetString(PyExc_TypeError, "__cuda_array_interface__ is not a dict");
    goto out;
  }
  PyObject *data = PyDict_GetItemString(d, "data"), *shape = PyDict_GetItemString(d, "shape");
  PyObject *typestr = PyDict_GetItemString(d, "typestr"), *strides = PyDict_GetItemString(d, "strides");
  if (!data || !PyTuple_Check(data) || PyTuple_GET_SIZE(data) < 1 || !shape || !PyTuple_Check(shape) || !typestr ||
      !PyUnicode_Check(typestr)) {
    PyErr_SetString(PyExc_ValueError, "__cuda_array_interface__ lacks data, shape or typestr");
    goto out;
  }
  const char *ts = PyUnicode_AsUTF8(typestr);
  if (!ts) goto out;
  long item = ts[0] && ts[1] ? strtol(ts + 2, NULL, 10) : 0;
  if (item <= 0) {
    PyErr_Format(PyExc_ValueError, "__cuda_array_interface__ typestr %R has no item size", typestr);
    goto out;
  }
  size_t count = 1;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(shape); i++) {
    size_t dim;
    if (vmp_size_arg(PyTuple_GET_ITEM(shape, i), "__cuda_array_interface__ shape", &dim) < 0) goto out;
    count *= dim;
  }
  size_t expect = (size_t)item;
  if (strides && strides != Py_None) {  /* strided: only C-contiguous is one range */
    if (!PyTuple_Check(strides) || PyTuple_GET_SIZE(strides) != PyTuple_GET_SIZE(shape)) {
      PyErr_SetString(PyExc_ValueError, "__cuda_array_interface__ strides do not match the shape");
      goto out;
    }
    for (Py_ssize_t i = PyTuple_GET_SIZE(shape) - 1; i >= 0; i--) {
      size_t dim = PyLong_AsSize_t(PyTuple_GET_ITEM(shape, i)), st = PyLong_AsSize_t(PyTuple_GET_ITEM(strides, i));
      if (PyErr_Occurred()) goto out;
      if (dim > 1 && st != expect) {
        PyErr_SetString(PyExc_ValueError, "vmmipc.wrap: the array is not C-contiguous");
        goto out;
      }
      expect *= dim;
    }
  }
  void *p = PyLong_AsVoidPtr(PyTuple_GET_ITEM(data, 0));
  if (!p && PyErr_Occurred()) goto out;
  *ptr = (uintptr_t)p;
  *nbytes = count * (size_t)item;
  *readonly = PyTuple_GET_SIZE(data) > 1 ? PyObject_IsTrue(PyTuple_GET_ITEM(data, 1)) : 0;
  rc = *readonly < 0 ? -1 : 0;
out:
  Py_DECREF(d);
  return rc;
}

static PyObject *py_wrap(PyObject *Py_UNUSED(m), PyObject *args, PyObject *kw) {
  static char *kwlist[] = {"obj", "nbytes", NULL};
  PyObject *obj, *no = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O:wrap", kwlist, &obj, &no)) return NULL;
  size_t given = 0, extent = 0;
  int have_n = no != Py_None;
  if (have_n && vmp_size_arg(no, "nbytes", &given) < 0) return NULL;
  vmp_sweep_buffers();
  uintptr_t ptr = 0;
  void *managed = NULL;
  int versioned = 0, did = -1; /* did: the DLPack producer's device id, -1 unknown */
  int ro = 0;                   /* the producer made it read-only: so are the buffer's own views */
  PyObject *keep = NULL;
  if (PyLong_Check(obj) && !PyBool_Check(obj)) {
    if (!have_n) {
      PyErr_SetString(PyExc_TypeError, "vmmipc.wrap(ptr, nbytes): an int pointer needs nbytes");
      return NULL;
    }
    void *p = PyLong_AsVoidPtr(obj);
    if (!p && PyErr_Occurred()) return NULL;
    ptr = (uintptr_t)p;
    extent = given;
  } else if (PyObject_HasAttrString(obj, "__dlpack__")) {
    if (PyObject_HasAttrString(obj, "__dlpack_device__")) {
      PyObject *dev = PyObject_CallMethod(obj, "__dlpack_device__", NULL);
      if (!dev) return NULL;
      long type = PyTuple_Check(dev) && PyTuple_GET_SIZE(dev) == 2 ? PyLong_AsLong(PyTuple_GET_ITEM(dev, 0)) : -1;
      Py_DECREF(dev);
      if (type == -1 && PyErr_Occurred()) return NULL;
      if (type != 2 /* kDLCUDA */) {
        PyErr_Format(PyExc_ValueError, "vmmipc.wrap: the object is not CUDA device memory (DLPack device type %ld)",
                     type);
        return NULL;
      }
    }
    PyObject *kwv = Py_BuildValue("{s:(ii)}", "max_version", 1, 0);
    PyObject *meth = PyObject_GetAttrString(obj, "__dlpack__");
    PyObject *empty = PyTuple_New(0);
    PyObject *cap = meth && kwv && empty ? PyObject_Call(meth, empty, kwv) : NULL;
    if (!cap && meth && empty && PyErr_ExceptionMatches(PyExc_TypeError)) {  /* a producer before DLPack 1.0 */
      PyErr_Clear();
      cap = PyObject_CallNoArgs(meth);
    }
    Py_XDECREF(kwv);
    Py_XDECREF(meth);
    Py_XDECREF(empty);
    if (!cap) return NULL;
    int dtype_;
    int rc = vmp_dlpack_consume(cap, &ptr, &extent, &dtype_, &did, &ro, &managed, &versioned);
    Py_DECREF(cap);
    if (rc < 0) return NULL;
    keep = obj;
  } else if (PyObject_HasAttrString(obj, "__cuda_array_interface__")) {
    if (cai_extent(obj, &ptr, &extent, &ro) < 0) return NULL;
    keep = obj;
  } else {
    PyErr_Format(PyExc_TypeError,
                 "vmmipc.wrap needs an int pointer and nbytes, or an object with __dlpack__ or "
                 "__cuda_array_interface__, not %.100s",
                 Py_TYPE(obj)->tp_name);
    return NULL;
  }
  if (have_n && given > extent) {
    if (managed) vmp_dlpack_release(managed, versioned);
    PyErr_Format(PyExc_ValueError, "vmmipc.wrap: nbytes %zu is more than the object's %zu bytes", given, extent);
    return NULL;
  }
  size_t n = have_n ? given : extent;
  vmmipc_buf_t h = NULL;
  vmmipc_result_t r;
  Py_BEGIN_ALLOW_THREADS
  r = vmmipc_buf_wrap((void *)ptr, n, &h);
  Py_END_ALLOW_THREADS
  if (r != VMMIPC_SUCCESS) {
    if (managed) vmp_dlpack_release(managed, versioned);
    return vmp_raise(r);
  }
  VmpBuffer *b = (VmpBuffer *)vmp_buffer_new(h, ro);
  if (!b) {
    if (managed) vmp_dlpack_release(managed, versioned);
    return NULL;
  }
  if (did >= 0) b->device = did; /* the producer's device, whichever is current */
  b->dl_managed = managed;
  b->dl_versioned = versioned;
  Py_XINCREF(keep);
  b->keep = keep;
  return (PyObject *)b;
}

PyMethodDef vmp_buffer_functions[] = {
    {"alloc", (PyCFunction)(void (*)(void))py_alloc, METH_VARARGS | METH_KEYWORDS,
     "alloc(nbytes)\n--\n\nLocal: a VMM allocation of at least nbytes on the current device (rounded up to the "
     "granularity; 0 gives an empty buffer). Returns a Buffer."},
    {"wrap", (PyCFunction)(void (*)(void))py_wrap, METH_VARARGS | METH_KEYWORDS,
     "wrap(obj, nbytes=None)\n--\n\nLocal: a Buffer over existing VMM memory (whole cuMemCreate mappings made with "
     "POSIX-fd handles): an object with __dlpack__ or __cuda_array_interface__ (C-contiguous CUDA memory, kept "
     "alive by the Buffer), or an int pointer with nbytes. Memory from cudaMalloc is refused (vmmipc.Error)."},
    {NULL, NULL, 0, NULL}};

int vmp_buffer_init(PyObject *module) {
  if (PyType_Ready(&VmpBuffer_Type) < 0) return -1;
  Py_INCREF(&VmpBuffer_Type);
  return PyModule_AddObject(module, "Buffer", (PyObject *)&VmpBuffer_Type);
}
