/* C-side timing loops for benchmarks/python: the same library calls that a
 * Python method makes, timed in C in the same process, so that the Python
 * overhead per call is the difference. Not part of the public API. */
#include "vmp.h"

#include <string.h>
#include <time.h>

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* _c_loop(op, obj, arg, iters) -> seconds for iters calls:
 *   "query"     obj: Window, arg: rank    vmmipc_win_query
 *   "signal"    obj: Window, arg: rank    vmmipc_win_signal(value i+1, stream 0)
 *   "heap_alloc" obj: Heap, arg: nbytes   vmmipc_heap_alloc + vmmipc_win_free (collective) */
static PyObject *py_c_loop(PyObject *Py_UNUSED(m), PyObject *args) {
  const char *op;
  PyObject *obj;
  long long arg, iters;
  if (!PyArg_ParseTuple(args, "sOLL:_c_loop", &op, &obj, &arg, &iters)) return NULL;
  vmmipc_result_t r = VMMIPC_SUCCESS;
  double t0 = 0, t1 = 0;
  if (!strcmp(op, "query") || !strcmp(op, "signal")) {
    if (!PyObject_TypeCheck(obj, &VmpWindow_Type) || vmp_window_check((VmpWindow *)obj, "_c_loop") < 0) {
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "_c_loop: needs a Window");
      return NULL;
    }
    vmmipc_win_t w = ((VmpWindow *)obj)->h;
    int sig = op[0] == 's';
    if (sig) vmp_work_op(&((VmpWindow *)obj)->work, NULL); /* stream work on it: close() waits */
    t0 = now_s();
    for (long long i = 0; i < iters && r == VMMIPC_SUCCESS; i++) {
      void *p;
      size_t n;
      r = sig ? vmmipc_win_signal(w, (int)arg, (uint64_t)i + 1, NULL) : vmmipc_win_query(w, (int)arg, &p, &n);
    }
    t1 = now_s();
  } else if (!strcmp(op, "heap_alloc")) {
    if (!PyObject_TypeCheck(obj, &VmpHeap_Type) || !((VmpHeap *)obj)->h) {
      PyErr_SetString(PyExc_TypeError, "_c_loop: needs an open Heap");
      return NULL;
    }
    vmmipc_heap_t h = ((VmpHeap *)obj)->h;
    Py_BEGIN_ALLOW_THREADS
    t0 = now_s();
    for (long long i = 0; i < iters && r == VMMIPC_SUCCESS; i++) {
      vmmipc_win_t w = NULL;
      r = vmmipc_heap_alloc(h, (size_t)arg, &w);
      if (r == VMMIPC_SUCCESS) r = vmmipc_win_free(w);
    }
    t1 = now_s();
    Py_END_ALLOW_THREADS
  } else {
    PyErr_Format(PyExc_ValueError, "_c_loop: unknown op %s", op);
    return NULL;
  }
  if (r != VMMIPC_SUCCESS) return vmp_raise(r);
  return PyFloat_FromDouble(t1 - t0);
}

PyMethodDef vmp_bench_functions[] = {
    {"_c_loop", py_c_loop, METH_VARARGS, "_c_loop(op, obj, arg, iters)\n--\n\nBenchmark helper: seconds for iters C calls."},
    {NULL, NULL, 0, NULL}};
