/* Mapping views (Window.mapping, Buffer.mapping): a typed, C-contiguous view
 * of device memory for array libraries, through DLPack (__dlpack__,
 * __dlpack_device__: versioned capsule when the consumer passes max_version,
 * else the classic one), the CUDA Array Interface v3, and Python's buffer
 * protocol where the memory is host-visible (the CPU stand-in).
 *
 * A view keeps its memory: it keeps its owner alive, and its owner's
 * close() is refused while it lives (a window's on every rank: each view
 * pins it, vmmipc_win_pin), so no view ever reads unmapped memory or a heap
 * slice handed to another window. DLPack capsules and the tensors made from
 * them keep the view alive until their deleter runs; a CUDA Array Interface
 * consumer keeps the Mapping object itself. */
#include "vmp.h"
#include "dlpack.h"

#include <stdio.h>
#include <string.h>

#define VMP_MAX_NDIM 32

typedef struct {
  PyObject_HEAD
  PyObject *owner;     /* a Window or a Buffer (strong) */
  uintptr_t ptr;
  size_t nbytes;
  int readonly, device;
  DLDataType dtype;
  const char *dtype_name, *typestr;
  int ndim;
  int64_t shape[VMP_MAX_NDIM];
  Py_ssize_t *host_dims;  /* buffer protocol: shape then strides, made on first use */
} VmpView;

static const struct {
  const char *name;
  uint8_t code, bits;
  const char *typestr;  /* CUDA Array Interface; NULL: none exists */
} vmp_dtypes[] = {
    {"uint8", kDLUInt, 8, "|u1"},       {"int8", kDLInt, 8, "|i1"},         {"uint16", kDLUInt, 16, "<u2"},
    {"int16", kDLInt, 16, "<i2"},       {"uint32", kDLUInt, 32, "<u4"},     {"int32", kDLInt, 32, "<i4"},
    {"uint64", kDLUInt, 64, "<u8"},     {"int64", kDLInt, 64, "<i8"},       {"float16", kDLFloat, 16, "<f2"},
    {"float32", kDLFloat, 32, "<f4"},   {"float64", kDLFloat, 64, "<f8"},   {"bfloat16", kDLBfloat, 16, NULL},
    {"complex64", kDLComplex, 64, "<c8"}, {"complex128", kDLComplex, 128, "<c16"}, {"bool", kDLBool, 8, "|b1"},
};

/* A dtype name from a str, a type (numpy scalar types), an object with a
 * str .name (numpy dtypes), or str(obj) ("torch.float32"). */
static int parse_dtype(PyObject *o, VmpView *v) {
  PyObject *s = NULL;
  if (o == Py_None) {
    s = PyUnicode_FromString("uint8");
  } else if (PyUnicode_Check(o)) {
    Py_INCREF(o);
    s = o;
  } else if (PyType_Check(o)) {
    s = PyObject_GetAttrString(o, "__name__");
  } else {
    PyObject *name = PyObject_HasAttrString(o, "name") ? PyObject_GetAttrString(o, "name") : NULL;
    if (name && PyUnicode_Check(name)) s = name;
    else {
      Py_XDECREF(name);
      PyErr_Clear();
      s = PyObject_Str(o);
    }
  }
  if (!s) return -1;
  const char *n = PyUnicode_AsUTF8(s);
  if (!n) {
    Py_DECREF(s);
    return -1;
  }
  if (!strncmp(n, "torch.", 6)) n += 6;
  for (size_t i = 0; i < sizeof vmp_dtypes / sizeof vmp_dtypes[0]; i++) {
    if (!strcmp(n, vmp_dtypes[i].name)) {
      v->dtype.code = vmp_dtypes[i].code;
      v->dtype.bits = vmp_dtypes[i].bits;
      v->dtype.lanes = 1;
      v->dtype_name = vmp_dtypes[i].name;
      v->typestr = vmp_dtypes[i].typestr;
      Py_DECREF(s);
      return 0;
    }
  }
  PyErr_Format(PyExc_TypeError, "dtype %R is not supported (uint8..uint64, int8..int64, float16/32/64, bfloat16, "
               "complex64/128, bool)", o);
  Py_DECREF(s);
  return -1;
}

static int parse_shape(PyObject *o, VmpView *v) {
  size_t item = v->dtype.bits / 8, count = 1;
  if (o == Py_None) {
    if (v->nbytes % item) {
      PyErr_Format(PyExc_ValueError, "%zu bytes are not a whole number of %s items", v->nbytes, v->dtype_name);
      return -1;
    }
    v->ndim = 1;
    v->shape[0] = (int64_t)(v->nbytes / item);
    return 0;
  }
  PyObject *seq = PyLong_Check(o) ? PyTuple_Pack(1, o) : PySequence_Tuple(o);
  if (!seq) {
    PyErr_SetString(PyExc_TypeError, "shape must be an int or a sequence of ints");
    return -1;
  }
  Py_ssize_t nd = PyTuple_GET_SIZE(seq);
  if (nd > VMP_MAX_NDIM) {
    Py_DECREF(seq);
    PyErr_Format(PyExc_ValueError, "shape has more than %d dimensions", VMP_MAX_NDIM);
    return -1;
  }
  for (Py_ssize_t i = 0; i < nd; i++) {
    size_t d;
    if (vmp_size_arg(PyTuple_GET_ITEM(seq, i), "shape entries", &d) < 0) {
      Py_DECREF(seq);
      return -1;
    }
    if (d && count > (SIZE_MAX / item) / d) count = SIZE_MAX / item;  /* saturate: rejected below */
    else count *= d;
    v->shape[i] = (int64_t)d;
  }
  Py_DECREF(seq);
  v->ndim = (int)nd;
  if (count > v->nbytes / item) {
    PyErr_Format(PyExc_ValueError, "shape needs %zu %s items; the mapping has %zu bytes", count, v->dtype_name,
                 v->nbytes);
    return -1;
  }
  return 0;
}

PyObject *vmp_view_new(PyObject *owner, uintptr_t ptr, size_t size, int readonly, int device, PyObject *dtype,
                       PyObject *shape, const char *op) {
  VmpView *v = (VmpView *)VmpView_Type.tp_alloc(&VmpView_Type, 0);
  if (!v) return NULL;
  v->ptr = ptr;
  v->nbytes = size;
  v->readonly = readonly;
  v->device = device < 0 ? 0 : device;
  if (parse_dtype(dtype, v) < 0 || parse_shape(shape, v) < 0) {
    Py_DECREF(v);
    return NULL;
  }
  /* The view holds its memory: one pin of the window per view, one count
     of the buffer's. The owner is checked again here: parsing dtype and
     shape may run Python code (a generator, a .name), and another thread
     may have closed the owner meanwhile, or be inside its close(), past
     the count of views. */
  if (PyObject_TypeCheck(owner, &VmpWindow_Type)) {
    VmpWindow *w = (VmpWindow *)owner;
    if (vmp_window_check(w, op) < 0) {
      Py_DECREF(v);
      return NULL;
    }
    vmmipc_result_t r = vmmipc_win_pin(w->h);
    if (r != VMMIPC_SUCCESS) {
      Py_DECREF(v);
      return vmp_raise(r);
    }
    w->views++;
    w->work.handed = 1;
  } else if (PyObject_TypeCheck(owner, &VmpBuffer_Type)) {
    VmpBuffer *b = (VmpBuffer *)owner;
    if (vmp_open_check(b->h, b->closing, op, "buffer") < 0) {
      Py_DECREF(v);
      return NULL;
    }
    b->views++;
    b->work.handed = 1;
  }
  Py_INCREF(owner);
  v->owner = owner;
  return (PyObject *)v;
}

/* Runs wherever the last reference goes: a DLPack deleter's thread included
 * (with the GIL, which the deleter takes). Unpinning is local and atomic. */
static void view_dealloc(VmpView *self) {
  PyObject_GC_UnTrack(self);
  if (self->owner && PyObject_TypeCheck(self->owner, &VmpWindow_Type)) {
    VmpWindow *w = (VmpWindow *)self->owner;
    w->views--;
    if (w->h && !vmp_finalized) vmmipc_win_unpin(w->h);  /* h: still the window's (closed: nothing to unpin) */
  } else if (self->owner && PyObject_TypeCheck(self->owner, &VmpBuffer_Type)) {
    ((VmpBuffer *)self->owner)->views--;
  }
  PyMem_Free(self->host_dims);
  Py_CLEAR(self->owner);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

/* The owner is open (its memory is mapped), else vmmipc.Error. */
static int view_check(VmpView *v, const char *op) {
  int open = 0;
  if (PyObject_TypeCheck(v->owner, &VmpWindow_Type)) open = ((VmpWindow *)v->owner)->h != NULL;
  else if (PyObject_TypeCheck(v->owner, &VmpBuffer_Type)) open = ((VmpBuffer *)v->owner)->h != NULL;
  if (open) return 0;
  vmp_raise_msg(VMMIPC_ERR_INVALID_ARG, "%s: the mapping's %s is closed", op,
                PyObject_TypeCheck(v->owner, &VmpWindow_Type) ? "window" : "buffer");
  return -1;
}

/* One allocation holds the managed tensor and its shape and strides. */
typedef struct {
  union {
    DLManagedTensor classic;
    DLManagedTensorVersioned versioned;
  } m;
  int64_t shape[VMP_MAX_NDIM], strides[VMP_MAX_NDIM];
  void *consumer;      /* the stream given to __dlpack__ (a handle), or NULL */
} vmp_dl_block;

static vmp_work *owner_work(VmpView *v) {
  return PyObject_TypeCheck(v->owner, &VmpWindow_Type) ? &((VmpWindow *)v->owner)->work
                                                       : &((VmpBuffer *)v->owner)->work;
}

/* The consumer lets the view go: all its work on the memory is queued on its
 * stream by now, which is recorded here, while the stream surely lives
 * (CuPy and numba destroy a stream with its object, often right after). */
static void dl_drop_view(void *ctx, void *consumer) {
  /* Consumers may call the deleter from any thread, with or without the GIL;
     after interpreter shutdown the view is left alone. */
  if (!ctx || !Py_IsInitialized()) return;
  PyGILState_STATE g = PyGILState_Ensure();
  if (consumer && !vmp_finalized) vmp_work_consumer_done(owner_work((VmpView *)ctx), consumer);
  Py_DECREF((PyObject *)ctx);
  PyGILState_Release(g);
}

static void dl_deleter_classic(DLManagedTensor *m) {
  dl_drop_view(m->manager_ctx, ((vmp_dl_block *)m)->consumer);
  PyMem_RawFree(m);
}

static void dl_deleter_versioned(DLManagedTensorVersioned *m) {
  dl_drop_view(m->manager_ctx, ((vmp_dl_block *)m)->consumer);
  PyMem_RawFree(m);
}

static void capsule_destructor_classic(PyObject *cap) {
  if (!PyCapsule_IsValid(cap, VMP_DLPACK_CAPSULE)) return;  /* consumed: the consumer owns it */
  DLManagedTensor *m = PyCapsule_GetPointer(cap, VMP_DLPACK_CAPSULE);
  if (m && m->deleter) m->deleter(m);
}

static void capsule_destructor_versioned(PyObject *cap) {
  if (!PyCapsule_IsValid(cap, VMP_DLPACK_CAPSULE_VERSIONED)) return;
  DLManagedTensorVersioned *m = PyCapsule_GetPointer(cap, VMP_DLPACK_CAPSULE_VERSIONED);
  if (m && m->deleter) m->deleter(m);
}

static void fill_tensor(VmpView *v, DLTensor *t, vmp_dl_block *b) {
  t->data = (void *)v->ptr;
  t->device.device_type = kDLCUDA;
  t->device.device_id = v->device;
  t->ndim = v->ndim;
  t->dtype = v->dtype;
  int64_t stride = 1;
  for (int i = v->ndim - 1; i >= 0; i--) {
    b->shape[i] = v->shape[i];
    b->strides[i] = stride;
    stride *= v->shape[i] > 0 ? v->shape[i] : 1;
  }
  t->shape = b->shape;
  t->strides = b->strides;
  t->byte_offset = 0;
}

static PyObject *view_dlpack(VmpView *self, PyObject *args, PyObject *kw) {
  static char *kwlist[] = {"stream", "max_version", "dl_device", "copy", NULL};
  PyObject *stream = Py_None, *maxv = Py_None, *dev = Py_None, *copy = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "|O$OOO:__dlpack__", kwlist, &stream, &maxv, &dev, &copy)) return NULL;
  if (view_check(self, "__dlpack__") < 0) return NULL;
  /* DLPack's CUDA stream numbers: None or 1 the legacy default stream, 2 the
   * per-thread one, -1 none given, else a handle (0 taken as legacy). */
  void *consumer = VMP_CU_LEGACY;
  if (stream != Py_None) {
    if (!PyLong_Check(stream) || PyBool_Check(stream)) {
      PyErr_SetString(PyExc_TypeError, "__dlpack__: stream must be an int or None");
      return NULL;
    }
    long long sv = PyLong_AsLongLong(stream);
    if (sv == -1 && PyErr_Occurred()) {
      PyErr_Clear();
      unsigned long long uv = PyLong_AsUnsignedLongLong(stream);
      if (uv == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
      consumer = (void *)(uintptr_t)uv;
    } else if (sv < -1) {
      PyErr_Format(PyExc_ValueError, "__dlpack__: stream %lld is not a CUDA stream number (-1, 0, 1, 2 or a handle)",
                   sv);
      return NULL;
    } else {
      consumer = sv == -1 ? NULL : sv == 0 ? VMP_CU_LEGACY : (void *)(uintptr_t)sv;
    }
  }
  int versioned = 0;
  if (maxv != Py_None) {
    PyObject *major = PyTuple_Check(maxv) && PyTuple_GET_SIZE(maxv) == 2 ? PyTuple_GET_ITEM(maxv, 0) : NULL;
    long mj = major && PyLong_Check(major) ? PyLong_AsLong(major) : -1;
    if (mj < 0) {
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "__dlpack__: max_version must be (major, minor)");
      return NULL;
    }
    versioned = mj >= 1;
  }
  if (dev != Py_None) {
    long t = -1, id = -1;
    if (PyTuple_Check(dev) && PyTuple_GET_SIZE(dev) == 2) {
      t = PyLong_AsLong(PyTuple_GET_ITEM(dev, 0));
      id = PyLong_AsLong(PyTuple_GET_ITEM(dev, 1));
      if (PyErr_Occurred()) return NULL;
    }
    if (t != kDLCUDA || id != self->device) {
      PyErr_Format(PyExc_BufferError, "__dlpack__: the memory is on (kDLCUDA, %d), not %R", self->device, dev);
      return NULL;
    }
  }
  if (copy == Py_True) {
    PyErr_SetString(PyExc_BufferError, "__dlpack__: vmmipc views are never copied (the point is sharing)");
    return NULL;
  }
  if (self->readonly && !versioned) {
    PyErr_SetString(PyExc_BufferError, "__dlpack__: a read-only mapping needs a consumer of DLPack >= 1.0 "
                                       "(max_version), which can be told it is read-only");
    return NULL;
  }
  /* Nothing is pending on any stream on the producer's side: the memory's
   * writers synchronise through the window (signal, wait, barrier). The
   * owner's close() waits for the consumer's stream, recorded when the
   * consumer lets the view go (registered only for a call that succeeds). */
  vmp_dl_block *b = PyMem_RawCalloc(1, sizeof *b);
  if (!b) return PyErr_NoMemory();
  b->consumer = consumer == VMP_CU_LEGACY ? NULL : consumer;  /* the legacy stream: recorded at close anyway */
  PyObject *cap;
  Py_INCREF(self);  /* released by the deleter */
  if (versioned) {
    DLManagedTensorVersioned *m = &b->m.versioned;
    m->version.major = VMP_DLPACK_MAJOR;
    m->version.minor = VMP_DLPACK_MINOR;
    m->manager_ctx = self;
    m->deleter = dl_deleter_versioned;
    m->flags = self->readonly ? DLPACK_FLAG_BITMASK_READ_ONLY : 0;
    fill_tensor(self, &m->dl_tensor, b);
    cap = PyCapsule_New(m, VMP_DLPACK_CAPSULE_VERSIONED, capsule_destructor_versioned);
  } else {
    DLManagedTensor *m = &b->m.classic;
    m->manager_ctx = self;
    m->deleter = dl_deleter_classic;
    fill_tensor(self, &m->dl_tensor, b);
    cap = PyCapsule_New(m, VMP_DLPACK_CAPSULE, capsule_destructor_classic);
  }
  if (!cap) {
    Py_DECREF(self);
    PyMem_RawFree(b);
    return NULL;
  }
  if (b->consumer && vmp_work_consumer(owner_work(self), b->consumer) < 0) {
    Py_DECREF(cap); /* its deleter drops the view; nothing was registered */
    return NULL;
  }
  if (!b->consumer && consumer) owner_work(self)->handed = 1; /* the legacy stream: recorded at close */
  return cap;
}

static PyObject *view_dlpack_device(VmpView *self, PyObject *Py_UNUSED(ignored)) {
  if (view_check(self, "__dlpack_device__") < 0) return NULL;
  return Py_BuildValue("(ii)", (int)kDLCUDA, self->device);
}

static PyObject *shape_tuple(VmpView *v) {
  PyObject *t = PyTuple_New(v->ndim);
  for (int i = 0; t && i < v->ndim; i++) {
    PyObject *d = PyLong_FromLongLong(v->shape[i]);
    if (!d) {
      Py_CLEAR(t);
      break;
    }
    PyTuple_SET_ITEM(t, i, d);
  }
  return t;
}

static PyObject *view_cai(VmpView *self, void *Py_UNUSED(c)) {
  if (view_check(self, "__cuda_array_interface__") < 0) return NULL;
  if (!self->typestr) {
    PyErr_Format(PyExc_TypeError, "the CUDA Array Interface has no typestr for %s: use DLPack", self->dtype_name);
    return NULL;
  }
  PyObject *shape = shape_tuple(self);
  if (!shape) return NULL;
  /* strides None: C-contiguous; stream None: no synchronisation needed. */
  return Py_BuildValue("{s:N,s:s,s:(KO),s:i,s:O,s:O}", "shape", shape, "typestr", self->typestr, "data",
                       (unsigned long long)self->ptr, self->readonly ? Py_True : Py_False, "version", 3, "strides",
                       Py_None, "stream", Py_None);
}

static PyObject *view_get_ptr(VmpView *self, void *Py_UNUSED(c)) {
  if (view_check(self, "vmmipc view ptr") < 0) return NULL;
  return PyLong_FromSize_t(self->ptr);
}
static PyObject *view_get_nbytes(VmpView *self, void *Py_UNUSED(c)) { return PyLong_FromSize_t(self->nbytes); }
static PyObject *view_get_shape(VmpView *self, void *Py_UNUSED(c)) { return shape_tuple(self); }
static PyObject *view_get_dtype(VmpView *self, void *Py_UNUSED(c)) { return PyUnicode_FromString(self->dtype_name); }
static PyObject *view_get_readonly(VmpView *self, void *Py_UNUSED(c)) { return PyBool_FromLong(self->readonly); }
static PyObject *view_get_device(VmpView *self, void *Py_UNUSED(c)) { return PyLong_FromLong(self->device); }
static PyObject *view_get_owner(VmpView *self, void *Py_UNUSED(c)) {
  Py_INCREF(self->owner);
  return self->owner;
}

/* ---- Python's buffer protocol, where the memory is host-visible --------- */

typedef int (*vmp_cu_pointer_attr)(void *data, int attribute, unsigned long long ptr);
#define VMP_CU_POINTER_ATTRIBUTE_HOST_POINTER 4

static const struct {
  const char *name, *format;
} vmp_formats[] = {
    {"uint8", "B"},  {"int8", "b"},    {"uint16", "H"},  {"int16", "h"},      {"uint32", "I"},       {"int32", "i"},
    {"uint64", "Q"}, {"int64", "q"},   {"float16", "e"}, {"float32", "f"},    {"float64", "d"},      {"bool", "?"},
    {"complex64", "Zf"}, {"complex128", "Zd"},
};

/* The host address of the mapping, or NULL: device memory is host-visible
 * on the CPU stand-in only (the driver's HOST_POINTER attribute says so). */
static void *host_address(const VmpView *v) {
  static vmp_cu_pointer_attr get;
  if (!get) get = (vmp_cu_pointer_attr)vmp_cu_proc("cuPointerGetAttribute");
  void *host = NULL;
  if (!get || !v->ptr || get(&host, VMP_CU_POINTER_ATTRIBUTE_HOST_POINTER, (unsigned long long)v->ptr) != 0) return NULL;
  return host;
}

static int view_getbuffer(VmpView *self, Py_buffer *b, int flags) {
  b->obj = NULL;
  if (view_check(self, "memoryview") < 0) return -1;
  size_t item = self->dtype.bits / 8, count = 1;
  for (int i = 0; i < self->ndim; i++) count *= (size_t)self->shape[i];
  static char empty[1];
  void *host = count ? host_address(self) : empty;
  if (!host) {
    PyErr_SetString(PyExc_BufferError,
                    "memoryview: the mapping is device memory, which is not host-visible here (only on the CPU "
                    "stand-in); copy it out with vmmipc.copy_from_device(view.ptr, view.nbytes), or give the view to "
                    "torch, CuPy or numba (DLPack, CUDA Array Interface)");
    return -1;
  }
  if ((flags & PyBUF_WRITABLE) == PyBUF_WRITABLE && self->readonly) {
    PyErr_SetString(PyExc_BufferError, "memoryview: the mapping is read-only");
    return -1;
  }
  const char *format = NULL;
  for (size_t i = 0; i < sizeof vmp_formats / sizeof vmp_formats[0] && !format; i++)
    if (!strcmp(vmp_formats[i].name, self->dtype_name)) format = vmp_formats[i].format;
  if (!format) {
    PyErr_Format(PyExc_BufferError, "memoryview: %s has no buffer-protocol format; use DLPack", self->dtype_name);
    return -1;
  }
  if (self->ndim && !self->host_dims) {
    self->host_dims = PyMem_Malloc(2 * (size_t)self->ndim * sizeof *self->host_dims);
    if (!self->host_dims) {
      PyErr_NoMemory();
      return -1;
    }
    Py_ssize_t stride = (Py_ssize_t)item;
    for (int i = self->ndim - 1; i >= 0; i--) {
      self->host_dims[i] = (Py_ssize_t)self->shape[i];
      self->host_dims[self->ndim + i] = stride;
      stride *= self->shape[i] > 0 ? (Py_ssize_t)self->shape[i] : 1;
    }
  }
  b->buf = host;
  Py_INCREF(self);  /* the export keeps the view, and so its memory */
  b->obj = (PyObject *)self;
  b->len = (Py_ssize_t)(count * item);
  b->readonly = self->readonly;
  b->itemsize = (Py_ssize_t)item;
  b->format = (flags & PyBUF_FORMAT) == PyBUF_FORMAT ? (char *)format : NULL;
  b->ndim = (flags & PyBUF_ND) == PyBUF_ND ? self->ndim : 1;
  b->shape = (flags & PyBUF_ND) == PyBUF_ND && self->ndim ? self->host_dims : NULL;
  b->strides = (flags & PyBUF_STRIDES) == PyBUF_STRIDES && self->ndim ? self->host_dims + self->ndim : NULL;
  b->suboffsets = NULL;
  b->internal = NULL;
  return 0;
}

static PyBufferProcs view_as_buffer = {(getbufferproc)view_getbuffer, NULL};

static PyObject *view_repr(VmpView *self) {
  char text[128];
  snprintf(text, sizeof text, "<vmmipc.Mapping ptr=0x%zx nbytes=%zu dtype=%s ndim=%d%s>", (size_t)self->ptr,
           self->nbytes, self->dtype_name, self->ndim, self->readonly ? " read-only" : "");
  return PyUnicode_FromString(text);
}

static PyMethodDef view_methods[] = {
    {"__dlpack__", (PyCFunction)(void (*)(void))view_dlpack, METH_VARARGS | METH_KEYWORDS,
     "__dlpack__(stream=None, *, max_version=None, dl_device=None, copy=None)\n--\n\n"
     "A DLPack capsule of the mapping: 'dltensor_versioned' (with the read-only flag) when max_version is (1, x) or "
     "newer, else the classic 'dltensor' (refused for read-only mappings). Never a copy (copy=True: BufferError)."},
    {"__dlpack_device__", (PyCFunction)view_dlpack_device, METH_NOARGS,
     "__dlpack_device__()\n--\n\n(kDLCUDA, ordinal): (2, the CUDA ordinal of the mapping)."},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef view_getset[] = {
    {"__cuda_array_interface__", (getter)view_cai, NULL, "The CUDA Array Interface, version 3 (a dict).", NULL},
    {"ptr", (getter)view_get_ptr, NULL, "Device address (int).", NULL},
    {"nbytes", (getter)view_get_nbytes, NULL, "Bytes of the mapping.", NULL},
    {"shape", (getter)view_get_shape, NULL, "Shape (a tuple) of the view.", NULL},
    {"dtype", (getter)view_get_dtype, NULL, "Element type name ('uint8', 'float32', ...).", NULL},
    {"readonly", (getter)view_get_readonly, NULL, "Whether the mapping is read-only here.", NULL},
    {"device", (getter)view_get_device, NULL, "CUDA ordinal of the device the mapping is accessible from.", NULL},
    {"owner", (getter)view_get_owner, NULL, "The Window or Buffer the view keeps alive.", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

/* Seen by the collector (a cycle through its owner's wrapped object); no
 * tp_clear, as for Window and Buffer. */
static int view_traverse(VmpView *self, visitproc visit, void *arg) {
  Py_VISIT(self->owner);
  return 0;
}

PyTypeObject VmpView_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "vmmipc.Mapping",
    .tp_basicsize = sizeof(VmpView),
    .tp_dealloc = (destructor)view_dealloc,
    .tp_repr = (reprfunc)view_repr,
    .tp_as_buffer = &view_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_traverse = (traverseproc)view_traverse,
    .tp_doc = "A view of mapped device memory (Window.mapping, Buffer.mapping) for torch.from_dlpack, "
              "cupy.from_dlpack / cupy.asarray and numba; memoryview() where the memory is host-visible (the CPU "
              "stand-in). While it (or a capsule or tensor made from it) lives, its window or buffer cannot be "
              "closed. Not constructible directly.",
    .tp_methods = view_methods,
    .tp_getset = view_getset,
};

int vmp_dlpack_consume(PyObject *cap, uintptr_t *ptr, size_t *nbytes, int *device_type, int *device_id,
                       int *readonly, void **managed, int *versioned) {
  DLTensor *t;
  *readonly = 0; /* a classic capsule cannot say */
  if (PyCapsule_IsValid(cap, VMP_DLPACK_CAPSULE_VERSIONED)) {
    DLManagedTensorVersioned *m = PyCapsule_GetPointer(cap, VMP_DLPACK_CAPSULE_VERSIONED);
    if (m->version.major != VMP_DLPACK_MAJOR) {
      PyErr_Format(PyExc_BufferError, "vmmipc.wrap: DLPack %u.%u is not supported (major 1)", m->version.major,
                   m->version.minor);
      return -1;
    }
    t = &m->dl_tensor;
    *managed = m;
    *versioned = 1;
    *readonly = (m->flags & DLPACK_FLAG_BITMASK_READ_ONLY) != 0;
  } else if (PyCapsule_IsValid(cap, VMP_DLPACK_CAPSULE)) {
    DLManagedTensor *m = PyCapsule_GetPointer(cap, VMP_DLPACK_CAPSULE);
    t = &m->dl_tensor;
    *managed = m;
    *versioned = 0;
  } else {
    PyErr_SetString(PyExc_TypeError, "vmmipc.wrap: __dlpack__ gave no unused DLPack capsule");
    return -1;
  }
  *device_type = (int)t->device.device_type;
  *device_id = t->device.device_id;
  if (t->device.device_type != kDLCUDA) {
    PyErr_Format(PyExc_ValueError, "vmmipc.wrap: the tensor is not CUDA device memory (DLPack device type %d)",
                 (int)t->device.device_type);
    return -1;
  }
  size_t item_bits = (size_t)t->dtype.bits * (t->dtype.lanes ? t->dtype.lanes : 1);
  size_t count = 1, expect = 1;
  for (int i = t->ndim - 1; i >= 0; i--) {
    if (t->shape[i] < 0) {
      PyErr_SetString(PyExc_ValueError, "vmmipc.wrap: negative DLPack shape");
      return -1;
    }
    if (t->strides && t->shape[i] > 1 && t->strides[i] != (int64_t)expect) {
      PyErr_SetString(PyExc_ValueError, "vmmipc.wrap: the tensor is not C-contiguous");
      return -1;
    }
    expect *= (size_t)t->shape[i];
    count *= (size_t)t->shape[i];
  }
  *ptr = (uintptr_t)t->data + (uintptr_t)t->byte_offset;
  *nbytes = (count * item_bits + 7) / 8;
  /* Consumed: the capsule's destructor no longer frees it; vmp_dlpack_release does. */
  if (PyCapsule_SetName(cap, *versioned ? VMP_DLPACK_CAPSULE_VERSIONED_USED : VMP_DLPACK_CAPSULE_USED) < 0) return -1;
  return 0;
}

void vmp_dlpack_release(void *managed, int versioned) {
  if (!managed) return;
  if (versioned) {
    DLManagedTensorVersioned *m = managed;
    if (m->deleter) m->deleter(m);
  } else {
    DLManagedTensor *m = managed;
    if (m->deleter) m->deleter(m);
  }
}

int vmp_view_init(PyObject *module) {
  if (PyType_Ready(&VmpView_Type) < 0) return -1;
  Py_INCREF(&VmpView_Type);
  return PyModule_AddObject(module, "Mapping", (PyObject *)&VmpView_Type);
}
