/* Argument parsing shared by the extension: sizes, ranks, values, timeouts,
 * CUDA streams and access modes, with TypeError for wrong types and
 * ValueError for values out of range. */
#include "vmp.h"

#include <string.h>

static int want_int(PyObject *o, const char *what) {
  if (PyLong_Check(o) && !PyBool_Check(o)) return 0;
  PyErr_Format(PyExc_TypeError, "%s must be an int, not %.100s", what, Py_TYPE(o)->tp_name);
  return -1;
}

int vmp_size_arg(PyObject *o, const char *what, size_t *out) {
  if (want_int(o, what) < 0) return -1;
  int overflow = 0;
  long long sv = PyLong_AsLongLongAndOverflow(o, &overflow);
  if (sv == -1 && PyErr_Occurred()) return -1;
  if (overflow < 0 || (!overflow && sv < 0)) {
    PyErr_Format(PyExc_ValueError, "%s must not be negative", what);
    return -1;
  }
  size_t v = PyLong_AsSize_t(o);
  if (v == (size_t)-1 && PyErr_Occurred()) {
    PyErr_Clear();
    PyErr_Format(PyExc_ValueError, "%s is too large", what);
    return -1;
  }
  *out = v;
  return 0;
}

int vmp_rank_arg(PyObject *o, int nranks, const char *what, int *out) {
  if (want_int(o, what) < 0) return -1;
  int overflow = 0;
  long v = PyLong_AsLongAndOverflow(o, &overflow);
  if (overflow || v < 0 || v >= nranks) {
    if (!PyErr_Occurred())
      PyErr_Format(PyExc_ValueError, "%s %R is out of range (the comm has %d ranks)", what, o, nranks);
    return -1;
  }
  *out = (int)v;
  return 0;
}

int vmp_u64_arg(PyObject *o, const char *what, uint64_t *out) {
  if (want_int(o, what) < 0) return -1;
  unsigned long long v = PyLong_AsUnsignedLongLong(o);
  if (v == (unsigned long long)-1 && PyErr_Occurred()) {
    PyErr_Clear();
    PyErr_Format(PyExc_ValueError, "%s must be in [0, 2**64)", what);
    return -1;
  }
  *out = (uint64_t)v;
  return 0;
}

int vmp_timeout_arg(PyObject *o, const char *what, int *out) {
  if (!o || o == Py_None) {
    *out = 0;
    return 0;
  }
  if (want_int(o, what) < 0) return -1;
  int overflow = 0;
  long v = PyLong_AsLongAndOverflow(o, &overflow);
  if (overflow || v <= 0 || v > 0x7fffffffL) {
    if (!PyErr_Occurred()) PyErr_Format(PyExc_ValueError, "%s must be a positive int of milliseconds or None", what);
    return -1;
  }
  *out = (int)v;
  return 0;
}

/* An int handle (0: the legacy default stream), an object with .cuda_stream
 * (torch, numba's .handle is not taken), or with __cuda_stream__ (the CUDA
 * stream protocol: a method returning (version, handle)). */
int vmp_stream_arg(PyObject *o, void **out) {
  *out = NULL;
  if (!o || o == Py_None) return 0;
  PyObject *h = NULL;
  if (PyLong_Check(o) && !PyBool_Check(o)) {
    h = o;
    Py_INCREF(h);
  } else if (PyObject_HasAttrString(o, "__cuda_stream__")) {
    PyObject *t = PyObject_GetAttrString(o, "__cuda_stream__");
    if (t && PyCallable_Check(t)) Py_SETREF(t, PyObject_CallNoArgs(t));
    if (!t) return -1;
    if (PyTuple_Check(t) && PyTuple_GET_SIZE(t) == 2) {
      h = PyTuple_GET_ITEM(t, 1);
      Py_INCREF(h);
    }
    Py_DECREF(t);
    if (!h) {
      PyErr_SetString(PyExc_TypeError, "stream.__cuda_stream__() must return (version, handle)");
      return -1;
    }
  } else if (PyObject_HasAttrString(o, "cuda_stream")) {
    h = PyObject_GetAttrString(o, "cuda_stream");
    if (!h) return -1;
  } else {
    PyErr_Format(PyExc_TypeError,
                 "stream must be an int handle or an object with .cuda_stream or __cuda_stream__, not %.100s",
                 Py_TYPE(o)->tp_name);
    return -1;
  }
  if (!PyLong_Check(h)) {
    Py_DECREF(h);
    PyErr_SetString(PyExc_TypeError, "the stream handle must be an int");
    return -1;
  }
  void *p = PyLong_AsVoidPtr(h);
  Py_DECREF(h);
  if (!p && PyErr_Occurred()) {
    PyErr_Clear();
    PyErr_SetString(PyExc_ValueError, "the stream handle is not a valid pointer value");
    return -1;
  }
  *out = p;
  return 0;
}

int vmp_access_arg(PyObject *o, vmmipc_access_t *storage, const vmmipc_access_t **out, int *readonly) {
  *out = NULL;
  *readonly = 0;
  if (!o || o == Py_None) return 0;
  if (!PyUnicode_Check(o)) {
    PyErr_Format(PyExc_TypeError, "access must be 'rw', 'r' or None, not %.100s", Py_TYPE(o)->tp_name);
    return -1;
  }
  const char *s = PyUnicode_AsUTF8(o);
  if (!s) return -1;
  vmmipc_access_t a = VMMIPC_ACCESS_DEFAULT;
  if (!strcmp(s, "rw") || !strcmp(s, "readwrite")) {
    a.prot = VMMIPC_PROT_READWRITE;
  } else if (!strcmp(s, "r") || !strcmp(s, "read")) {
    a.prot = VMMIPC_PROT_READ;
    *readonly = 1;
  } else {
    PyErr_Format(PyExc_ValueError, "access must be 'rw' (read-write) or 'r' (read-only), not %R", o);
    return -1;
  }
  *storage = a;
  *out = storage;
  return 0;
}
