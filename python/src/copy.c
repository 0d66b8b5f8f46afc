/* Driver copies between host bytes and device memory, and the current
 * device: through the driver vmmipc loaded (vmmipc_driver_proc), so that
 * programs and tests need neither torch nor libcuda to move bytes. */
#include "vmp.h"

typedef int (*vmp_cu_copy_htod)(unsigned long long dst, const void *src, size_t n);
typedef int (*vmp_cu_copy_dtoh)(void *dst, unsigned long long src, size_t n);
typedef int (*vmp_cu_ctx_get_device)(int *dev);
typedef int (*vmp_cu_ctx_sync)(void);
typedef int (*vmp_cu_stream_sync)(void *stream);

/* The ABIs of CUDA 12 (the _v2 copies; cuCtxGetDevice and cuCtxSynchronize
 * without the context argument that 13.0 added under the same names). */
#define VMP_CU_ABI 12000

static void *proc(const char *name) {
  void *fn = NULL;
  return vmmipc_driver_proc(name, VMP_CU_ABI, &fn) == VMMIPC_SUCCESS ? fn : NULL;
}

void *vmp_cu_proc(const char *name) { return proc(name); }

int vmp_current_device(void) {
  static vmp_cu_ctx_get_device get;
  if (!get) get = (vmp_cu_ctx_get_device)proc("cuCtxGetDevice");
  int dev = -1;
  if (!get || get(&dev) != 0) return -1;
  return dev;
}

typedef int (*vmp_cu_ctx_get_current)(void **ctx);

/* Python threads start without a current CUDA context; a window's calls
 * make its device current on such a thread, as torch does per thread. */
int vmp_ensure_context(int device) {
  static vmp_cu_ctx_get_current get;
  if (device < 0) return 0;
  if (!get) get = (vmp_cu_ctx_get_current)proc("cuCtxGetCurrent");
  void *ctx = NULL;
  if (get && get(&ctx) == 0 && ctx) return 0;
  vmmipc_result_t r = vmmipc_set_device(device);
  if (r != VMMIPC_SUCCESS) {
    vmp_raise(r);
    return -1;
  }
  return 0;
}

static PyObject *cu_failed(const char *op, int rc);

PyObject *vmp_cu_failed(const char *op, int rc) { return cu_failed(op, rc); }

static PyObject *cu_failed(const char *op, int rc) {
  return vmp_raise_msg(VMMIPC_ERR_CUDA, "%s: the driver returned CUresult %d", op, rc);
}

static PyObject *py_copy_to_device(PyObject *Py_UNUSED(m), PyObject *args) {
  PyObject *po;
  Py_buffer data;
  if (!PyArg_ParseTuple(args, "Oy*:copy_to_device", &po, &data)) return NULL;
  unsigned long long dst = PyLong_Check(po) ? PyLong_AsUnsignedLongLong(po) : 0;
  if (!PyLong_Check(po) || PyErr_Occurred()) {
    PyBuffer_Release(&data);
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "copy_to_device: ptr must be an int");
    return NULL;
  }
  vmp_cu_copy_htod fn = (vmp_cu_copy_htod)proc("cuMemcpyHtoD");
  vmp_cu_stream_sync sync = (vmp_cu_stream_sync)proc("cuStreamSynchronize");
  if (!fn || !sync) {
    PyBuffer_Release(&data);
    return vmp_raise(VMMIPC_ERR_UNSUPPORTED);
  }
  int rc = 0, src = 0;
  if (data.len) {
    Py_BEGIN_ALLOW_THREADS
    /* From pageable memory cuMemcpyHtoD may return before the bytes land
     * (small copies ride in the command stream): the legacy stream is
     * synchronised after it, so that the bytes are there when this returns
     * (a peer may read them next, or the memory may be freed). */
    rc = fn(dst, data.buf, (size_t)data.len);
    if (!rc) {
      rc = sync(NULL);
      src = 1;
    }
    Py_END_ALLOW_THREADS
  }
  PyBuffer_Release(&data);
  if (rc) return cu_failed(src ? "copy_to_device (cuStreamSynchronize of the legacy stream after cuMemcpyHtoD)"
                               : "copy_to_device (cuMemcpyHtoD)", rc);
  Py_RETURN_NONE;
}

static PyObject *py_copy_from_device(PyObject *Py_UNUSED(m), PyObject *args) {
  PyObject *po, *no;
  size_t n;
  if (!PyArg_ParseTuple(args, "OO:copy_from_device", &po, &no) || vmp_size_arg(no, "nbytes", &n) < 0) return NULL;
  if (!PyLong_Check(po)) {
    PyErr_SetString(PyExc_TypeError, "copy_from_device: ptr must be an int");
    return NULL;
  }
  unsigned long long src = PyLong_AsUnsignedLongLong(po);
  if (PyErr_Occurred()) return NULL;
  vmp_cu_copy_dtoh fn = (vmp_cu_copy_dtoh)proc("cuMemcpyDtoH");
  if (!fn) return vmp_raise(VMMIPC_ERR_UNSUPPORTED);
  PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)n);
  if (!out) return NULL;
  int rc = 0;
  char *dst = PyBytes_AS_STRING(out);
  if (n) {
    Py_BEGIN_ALLOW_THREADS
    rc = fn(dst, src, n);
    Py_END_ALLOW_THREADS
  }
  if (rc) {
    Py_DECREF(out);
    return cu_failed("copy_from_device (cuMemcpyDtoH)", rc);
  }
  return out;
}

static PyObject *py_synchronize(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(ignored)) {
  vmp_cu_ctx_sync fn = (vmp_cu_ctx_sync)proc("cuCtxSynchronize");
  if (!fn) return vmp_raise(VMMIPC_ERR_UNSUPPORTED);
  int rc;
  Py_BEGIN_ALLOW_THREADS
  rc = fn();
  Py_END_ALLOW_THREADS
  if (rc) return cu_failed("synchronize (cuCtxSynchronize)", rc);
  Py_RETURN_NONE;
}

static PyObject *py_current_device(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(ignored)) {
  int d = vmp_current_device();
  if (d < 0) Py_RETURN_NONE;
  return PyLong_FromLong(d);
}

PyMethodDef vmp_copy_functions[] = {
    {"copy_to_device", py_copy_to_device, METH_VARARGS,
     "copy_to_device(ptr, data)\n--\n\nCopies the bytes-like data to device address ptr (cuMemcpyHtoD on the legacy "
     "stream, then waits until the bytes have landed). Needs a current device (set_device)."},
    {"copy_from_device", py_copy_from_device, METH_VARARGS,
     "copy_from_device(ptr, nbytes)\n--\n\nReturns nbytes from device address ptr as bytes (cuMemcpyDtoH; "
     "synchronous)."},
    {"synchronize", py_synchronize, METH_NOARGS,
     "synchronize()\n--\n\nWaits for all work of the current context (cuCtxSynchronize), e.g. enqueued signals."},
    {"current_device", py_current_device, METH_NOARGS,
     "current_device()\n--\n\nThe ordinal of the current context's device, or None without one."},
    {NULL, NULL, 0, NULL}};
