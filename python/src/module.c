/* The _vmmipc extension module: initialisation, module functions
 * (set_device, device_count, version) and the exit handler that releases
 * what is still open before mpi4py finalizes MPI. */
#include "vmp.h"

#include <stddef.h>

extern PyMethodDef vmp_copy_functions[];

vmp_link vmp_live_comms = {&vmp_live_comms, &vmp_live_comms};
vmp_link vmp_live_windows = {&vmp_live_windows, &vmp_live_windows};
vmp_link vmp_live_heaps = {&vmp_live_heaps, &vmp_live_heaps};
int vmp_finalized;

void vmp_link_add(vmp_link *list, vmp_link *node) {
  node->next = list->next;
  node->prev = list;
  list->next->prev = node;
  list->next = node;
}

void vmp_link_del(vmp_link *node) {
  if (!node->next) return;
  node->prev->next = node->next;
  node->next->prev = node->prev;
  node->next = node->prev = NULL;
}

#define VMP_CONTAINER(ptr, type) ((type *)((char *)(ptr) - offsetof(type, link)))

/* Registered with atexit by vmmipc/__init__.py, so it runs before mpi4py's
 * MPI_Finalize. Collectives cannot run at exit (the ranks exit at different
 * points), so what is still open is released locally: each comm is aborted
 * (its peers' calls then fail at once instead of waiting), then windows,
 * heaps and comms are freed. Afterwards deallocators do nothing collective. */
static PyObject *py_release_all(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(ignored)) {
  while (vmp_live_windows.next != &vmp_live_windows)
    vmp_window_release_local(VMP_CONTAINER(vmp_live_windows.next, VmpWindow), "still open at exit");
  while (vmp_live_heaps.next != &vmp_live_heaps)
    vmp_heap_release_local(VMP_CONTAINER(vmp_live_heaps.next, VmpHeap), "still open at exit");
  while (vmp_live_comms.next != &vmp_live_comms)
    vmp_comm_release_local(VMP_CONTAINER(vmp_live_comms.next, VmpComm), "still open at exit");
  vmp_release_orphans();
  vmp_sweep_buffers();
  vmp_finalized = 1;
  Py_RETURN_NONE;
}

static PyObject *py_set_device(PyObject *Py_UNUSED(m), PyObject *arg) {
  if (!PyLong_Check(arg) || PyBool_Check(arg)) {
    PyErr_Format(PyExc_TypeError, "set_device: ordinal must be an int, not %.100s", Py_TYPE(arg)->tp_name);
    return NULL;
  }
  long d = PyLong_AsLong(arg);
  if (d == -1 && PyErr_Occurred()) return NULL;
  if (d < 0 || d > 0x7fffffffL) {
    PyErr_SetString(PyExc_ValueError, "set_device: ordinal must not be negative");
    return NULL;
  }
  vmmipc_result_t r;
  Py_BEGIN_ALLOW_THREADS
  r = vmmipc_set_device((int)d);
  Py_END_ALLOW_THREADS
  if (r != VMMIPC_SUCCESS) return vmp_raise(r);
  Py_RETURN_NONE;
}

static PyObject *py_device_count(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(ignored)) {
  int n = 0;
  vmmipc_result_t r = vmmipc_device_count(&n);
  if (r != VMMIPC_SUCCESS) return vmp_raise(r);
  return PyLong_FromLong(n);
}

static PyMethodDef module_functions[] = {
    {"set_device", py_set_device, METH_O,
     "set_device(ordinal)\n--\n\nMakes device ordinal's primary context current on the calling thread (as "
     "cudaSetDevice and torch.cuda.set_device do). Local."},
    {"device_count", py_device_count, METH_NOARGS, "device_count()\n--\n\nNumber of devices visible to this process."},
    {"_release_all", py_release_all, METH_NOARGS,
     "_release_all()\n--\n\nExit handler: releases open windows, heaps and comms locally (aborting their comms)."},
    {NULL, NULL, 0, NULL}};

static int add_functions(PyObject *m, PyMethodDef *defs) {
  PyObject *name = PyModule_GetNameObject(m);
  if (!name) return -1;
  for (PyMethodDef *d = defs; d->ml_name; d++) {
    PyObject *f = PyCFunction_NewEx(d, NULL, name);
    if (!f || PyModule_AddObject(m, d->ml_name, f) < 0) {
      Py_XDECREF(f);
      Py_DECREF(name);
      return -1;
    }
  }
  Py_DECREF(name);
  return 0;
}

static struct PyModuleDef vmp_module = {
    PyModuleDef_HEAD_INIT, "_vmmipc",
    "The vmmipc C extension: share CUDA VMM allocations between the MPI ranks of a node. Use the vmmipc package.",
    -1, module_functions, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__vmmipc(void) {
  PyObject *m = PyModule_Create(&vmp_module);
  if (!m) return NULL;
  if (add_functions(m, vmp_buffer_functions) < 0 || add_functions(m, vmp_copy_functions) < 0 ||
      add_functions(m, vmp_bench_functions) < 0 || add_functions(m, vmp_work_functions) < 0 || vmp_error_init(m) < 0 || vmp_comm_init(m) < 0 ||
      vmp_buffer_init(m) < 0 || vmp_window_init(m) < 0 || vmp_heap_init(m) < 0 || vmp_view_init(m) < 0 ||
      PyModule_AddStringConstant(m, "version", vmmipc_version()) < 0 ||
      PyModule_AddIntConstant(m, "kDLCUDA", 2) < 0) {
    Py_DECREF(m);
    return NULL;
  }
  return m;
}
