/* close()'s wait on the device work a Window or Buffer handed out, bounded
 * and stream-ordered: never the whole context (a kernel of the user may be
 * spinning on a signal that this very close would let through).
 *
 * A window records an event on a stream after each signal, wait or barrier
 * it enqueued there. At close, events are also recorded on the consumer
 * streams that __dlpack__(stream=...) was given and on the legacy default
 * stream (which orders after every blocking stream's earlier work); close
 * then polls them all (cuEventQuery) against the comm's timeout. */
#include "vmp.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int (*vmp_cu_event_create)(void **ev, unsigned flags);
typedef int (*vmp_cu_event_record)(void *ev, void *stream);
typedef int (*vmp_cu_event_query)(void *ev);
typedef int (*vmp_cu_event_destroy)(void *ev);

#define VMP_CU_EVENT_DISABLE_TIMING 0x2
#define VMP_CU_NOT_READY 600

int vmp_test_wait_outcome;

static vmp_cu_event_create ev_create;
static vmp_cu_event_record ev_record;
static vmp_cu_event_query ev_query;
static vmp_cu_event_destroy ev_destroy;

/* The four entry points, looked up once (the same values from any thread). */
static int events_ready(void) {
  if (ev_query) return 1;
  ev_create = (vmp_cu_event_create)vmp_cu_proc("cuEventCreate");
  ev_record = (vmp_cu_event_record)vmp_cu_proc("cuEventRecord");
  ev_destroy = (vmp_cu_event_destroy)vmp_cu_proc("cuEventDestroy");
  vmp_cu_event_query q = (vmp_cu_event_query)vmp_cu_proc("cuEventQuery");
  if (!ev_create || !ev_record || !ev_destroy || !q) return 0;
  ev_query = q;
  return 1;
}

static vmp_tracked *find(vmp_work *w, void *stream, int at_close) {
  for (int i = 0; i < w->n; i++)
    if (w->t[i].stream == stream && w->t[i].at_close == at_close) return &w->t[i];
  if (w->n == w->cap) {
    int cap = w->cap ? 2 * w->cap : 4;
    vmp_tracked *t = PyMem_Realloc(w->t, (size_t)cap * sizeof *t);
    if (!t) return NULL;
    w->t = t;
    w->cap = cap;
  }
  vmp_tracked *e = &w->t[w->n++];
  e->stream = stream;
  e->event = NULL;
  e->at_close = at_close;
  e->recorded = 0;
  return e;
}

/* 0 or the CUresult; -1 without the event entry points. */
static int record(vmp_tracked *e) {
  if (!events_ready()) return -1;
  const int made = !e->event;
  int rc = made ? ev_create(&e->event, VMP_CU_EVENT_DISABLE_TIMING) : 0;
  if (rc) {
    e->event = NULL;
    return rc;
  }
  rc = ev_record(e->event, e->stream);
  if (rc && made) {
    /* Made in this thread's context, maybe not the stream's (a DLPack
     * deleter runs anywhere): kept, every later record would fail too. */
    ev_destroy(e->event);
    e->event = NULL;
  }
  e->recorded = rc == 0;
  return rc;
}

void vmp_work_op(vmp_work *w, void *stream) {
  w->handed = 1;
  vmp_tracked *e = find(w, stream, 0);
  if (!e) {
    PyErr_Clear();  /* no memory: the legacy stream's record at close still orders blocking streams */
    return;
  }
  if (record(e) != 0) e->at_close = 1;  /* not recorded now: recorded at close instead */
}

int vmp_work_consumer(vmp_work *w, void *stream) {
  w->handed = 1;
  if (stream == NULL) stream = VMP_CU_LEGACY;  /* recorded at close anyway */
  if (stream == VMP_CU_LEGACY) return 0;
  /* One entry per stream: a view exported on it every iteration adds none. */
  for (int i = 0; i < w->n; i++)
    if (w->t[i].stream == stream) return 0;
  if (!find(w, stream, 1)) {
    PyErr_NoMemory();
    return -1;
  }
  return 0;
}

void vmp_work_consumer_done(vmp_work *w, void *stream) {
  /* The stream's entry (shared with other capsules and the window's
   * operations on it) is recorded again now, and waited for at close. If
   * that fails (this thread has no context, or another device's: deleters
   * run anywhere), it is recorded at close instead, as before, and what it
   * recorded earlier still stands. */
  for (int i = 0; i < w->n; i++) {
    vmp_tracked *e = &w->t[i];
    if (e->stream != stream) continue;
    int was = e->recorded;
    if (record(e) == 0) {
      e->at_close = 0;
    } else {
      e->recorded = was;
      e->at_close = 1;
    }
  }
}

int vmp_work_begin(vmp_work *w, void ***events, int *n) {
  *events = NULL;
  *n = 0;
  if (!find(w, VMP_CU_LEGACY, 1)) return -1;
  void **ev = malloc((size_t)w->n * sizeof *ev);
  if (!ev) return -1;
  int first = 0, k = 0;
  for (int i = 0; i < w->n; i++) {
    vmp_tracked *e = &w->t[i];
    if (e->at_close) {
      int rc = record(e);
      if (rc && !first) first = rc < 0 ? 1 /* CUDA_ERROR_INVALID_VALUE: no such entry point */ : rc;
    }
    if (e->recorded) ev[k++] = e->event;
  }
  *events = ev;
  *n = k;
  return first;
}

int vmp_events_done(void *const *events, int n) {
  if (n && !events_ready()) return -1;
  for (int i = 0; i < n; i++) {
    int rc = ev_query(events[i]);
    if (rc == VMP_CU_NOT_READY) return 0;
    if (rc) return -1;
  }
  return 1;
}

int64_t vmp_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int vmp_events_wait(void *const *events, int n, int timeout_ms, int *rc) {
  *rc = 0;
  if (!n) return 0;
  if (!events_ready()) {
    *rc = -1;
    return VMP_WAIT_DRIVER;
  }
  int64_t deadline = vmp_now_ms() + timeout_ms;
  long pause_ns = 1000;
  for (int i = 0, polls = 0; i < n; polls++) {
    int q = ev_query(events[i]);
    if (q == 0) {
      i++;
      continue;
    }
    if (q != VMP_CU_NOT_READY) {
      *rc = q;
      return VMP_WAIT_DRIVER;
    }
    if (vmp_now_ms() >= deadline) return VMP_WAIT_TIMEOUT;
    /* Spin briefly, then back off to 1 ms: latency when it is close, little CPU when it is not. */
    if (polls > 32) {
      struct timespec ts = {0, pause_ns};
      nanosleep(&ts, NULL);
      if (pause_ns < 1000000) pause_ns *= 2;
    }
  }
  return 0;
}

int vmp_close_wait_ms(int timeout_ms) { return timeout_ms / 2; }

void vmp_work_free(vmp_work *w) {
  for (int i = 0; i < w->n; i++)
    if (w->t[i].event && events_ready()) ev_destroy(w->t[i].event);
  PyMem_Free(w->t);
  w->t = NULL;
  w->n = w->cap = 0;
}

PyObject *vmp_wait_failed(const char *op, int how, int rc, int timeout_ms, int rank) {
  /* A Buffer's close is local: it stays open here; a Window's, everywhere. */
  const int buffer = strstr(op, "Buffer") != NULL;
  const char *what = buffer ? "buffer" : "window", *where = buffer ? "" : " on every rank";
  if (how == VMP_WAIT_TIMEOUT)
    return vmp_raise_msg_rank(VMMIPC_ERR_TIMEOUT, rank,
                              "%s: the device work on the %s's streams (its signals, waits and barriers, the "
                              "consumer streams given to __dlpack__, the legacy default stream) was not done within "
                              "%d ms; the %s stays open%s; hint: is a kernel or a stream wait still waiting for a "
                              "peer's signal?",
                              op, what, timeout_ms, what, where);
  return vmp_raise_msg_rank(VMMIPC_ERR_CUDA, rank,
                            "%s: waiting for the device work on the %s's streams: the driver returned CUresult %d "
                            "(a kernel may have faulted; the context is then lost); the %s stays open",
                            op, what, rc, what);
}

/* _test_fail_next_close_wait(how): the next Window.close()'s wait reports a
 * timeout (1) or a driver error (2), whatever it found; tests only. */
static PyObject *py_test_fail_wait(PyObject *Py_UNUSED(m), PyObject *arg) {
  long how = PyLong_AsLong(arg);
  if (how == -1 && PyErr_Occurred()) return NULL;
  if (how < 0 || how > VMP_WAIT_DRIVER) {
    PyErr_SetString(PyExc_ValueError, "_test_fail_next_close_wait: 0, 1 (a timeout) or 2 (a driver error)");
    return NULL;
  }
  vmp_test_wait_outcome = (int)how;
  Py_RETURN_NONE;
}

PyMethodDef vmp_work_functions[] = {
    {"_test_fail_next_close_wait", py_test_fail_wait, METH_O,
     "_test_fail_next_close_wait(how)\n--\n\nTests: the next Window.close()'s wait reports 1 a timeout, 2 a driver "
     "error."},
    {NULL, NULL, 0, NULL}};
