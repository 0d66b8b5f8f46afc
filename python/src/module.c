/* The _vmmipc extension module: initialisation, module functions
 * (set_device, device_count, version) and the exit handler that releases
 * what is still open before mpi4py finalizes MPI. */
#include "vmp.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

extern PyMethodDef vmp_copy_functions[];

vmp_link vmp_live_comms = {&vmp_live_comms, &vmp_live_comms};
vmp_link vmp_live_windows = {&vmp_live_windows, &vmp_live_windows};
vmp_link vmp_live_heaps = {&vmp_live_heaps, &vmp_live_heaps};
int vmp_finalized;
int vmp_exit_keep;

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

static int collected_running(void) {
  int n = vmp_orphans_running();
  for (vmp_link *l = vmp_live_comms.next; l != &vmp_live_comms; l = l->next)
    n += vmp_comm_running(VMP_CONTAINER(l, VmpComm));
  return n;
}

/* Freeing unmaps, and an unmap waits for the device work queued before it,
 * without a bound. So at exit every comm is aborted first (the library's
 * waits end), then the work that open windows and collected ones handed
 * out gets what a close would wait, half the longest comm timeout. The GIL
 * stays held meanwhile: no other thread changes the lists walked here.
 * Returns how many still run. */
static int exit_work_running(void) {
  int fin = 0;
  MPI_Finalized(&fin);
  if (fin) return 0; /* nothing is freed after MPI_Finalize anyway */
  int wait_ms = vmp_orphans_abort();
  for (vmp_link *l = vmp_live_comms.next; l != &vmp_live_comms; l = l->next) {
    VmpComm *c = VMP_CONTAINER(l, VmpComm);
    (void)vmp_comm_abort_once(c);
    if (vmp_close_wait_ms(c->timeout_ms) > wait_ms) wait_ms = vmp_close_wait_ms(c->timeout_ms);
  }
  const int64_t deadline = vmp_now_ms() + wait_ms;
  int running = 0;
  for (vmp_link *l = vmp_live_windows.next; l != &vmp_live_windows; l = l->next) {
    VmpWindow *w = VMP_CONTAINER(l, VmpWindow);
    if (!w->h || !w->work.handed) continue;
    if (vmp_ensure_context(w->device) < 0) { /* no context: nothing of ours runs there */
      PyErr_Clear();
      continue;
    }
    void **ev = NULL;
    int nev = 0, rc = 0, how = 0;
    if (vmp_work_begin(&w->work, &ev, &nev) < 0) { /* no memory to record: not known to be done */
      PyErr_Clear();
      running++;
      continue;
    }
    int64_t left = deadline - vmp_now_ms();
    how = vmp_events_wait(ev, nev, left > 0 ? (int)left : 0, &rc);
    free(ev);
    running += how != 0;
  }
  /* Collected windows: looked at, not released here (a release may run
   * deallocators, which change the lists). */
  int collected;
  while ((collected = collected_running()) && vmp_now_ms() < deadline) {
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
  return running + collected;
}

/* Registered with atexit by vmmipc/__init__.py, so it runs before mpi4py's
 * MPI_Finalize. Collectives cannot run at exit (the ranks exit at different
 * points), so what is still open is released locally: each comm is aborted
 * (its peers' calls then fail at once instead of waiting), then windows,
 * heaps and comms are freed once the work they handed out is done (waited
 * for as by a close); if some still runs, nothing is freed. Afterwards
 * deallocators do nothing collective. */
static PyObject *py_release_all(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(ignored)) {
  int running = exit_work_running();
  if (running) {
    vmp_exit_keep = 1;
    vmp_finalized = 1; /* deallocators run below free nothing either */
    vmp_warn_resource("vmmipc: device work handed out by %d window(s) still open or collected at exit did not "
                      "finish within half the comm's timeout: nothing is freed, the process exit releases it",
                      running);
  }
  while (vmp_live_windows.next != &vmp_live_windows)
    vmp_window_release_local(VMP_CONTAINER(vmp_live_windows.next, VmpWindow), "still open at exit");
  while (vmp_live_heaps.next != &vmp_live_heaps)
    vmp_heap_release_local(VMP_CONTAINER(vmp_live_heaps.next, VmpHeap), "still open at exit");
  while (vmp_live_comms.next != &vmp_live_comms)
    vmp_comm_release_local(VMP_CONTAINER(vmp_live_comms.next, VmpComm), "still open at exit");
  vmp_release_orphans();
  if (!vmp_exit_keep) vmp_sweep_buffers();
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
