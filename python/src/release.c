/* What the garbage collector leaves to later calls. It never runs a
 * collective and never aborts a comm:
 * - a Window collected open is released (vmmipc_win_release) once the
 *   device work it handed out is done, checked without waiting at the start
 *   of every collective call on its comm; the library then frees it in step
 *   at a collective that starts after every rank released it;
 * - a Buffer collected while a released window still exposes it, or after
 *   its pointer or views went out, is freed after a later collective call
 *   (or alloc, wrap, Buffer.close) once the library freed that window and
 *   the work it handed out is done (checked as a window's);
 * - a Comm collected open is kept to the exit handler, which releases it
 *   locally (its collective close cannot run from the collector).
 * All of it with the GIL held; nothing here needs a CUDA context except
 * recording the collected objects' events, done at a later call. */
#include "vmp.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Takes over *work (left empty) for a later look. */
static void collected_take(vmp_collected *cw, vmp_work *work, int device) {
  cw->work = *work;
  memset(work, 0, sizeof *work);
  cw->device = device;
}

static void collected_free(vmp_collected *cw) {
  vmp_work_free(&cw->work);
  free(cw->events);
  cw->events = NULL;
}

/* One look, never waiting: 1 once the work is done. */
static int collected_done(vmp_collected *cw) {
  if (!cw->work.handed) return 1;
  if (!cw->begun) {
    VMP_ERR_SAVE(saved); /* a caller's exception stays as it was */
    int ctx = vmp_ensure_context(cw->device);
    int rc = ctx < 0 ? 0 : vmp_work_begin(&cw->work, &cw->events, &cw->nevents);
    PyErr_Clear();
    VMP_ERR_RESTORE(saved);
    if (ctx < 0) return 1; /* no context to record in: nothing of ours can run there */
    if (rc < 0) return 0;  /* out of memory: tried again at the next look */
    cw->begun = 1;         /* a stream that could not be recorded (gone) is not waited for; the others are */
  }
  /* A driver error (a lost context) leaves nothing running. */
  return vmp_events_done(cw->events, cw->nevents) != 0;
}

void vmp_window_collected(VmpWindow *w) {
  VmpComm *c = w->comm;
  vmp_pending *p = calloc(1, sizeof *p);
  if (!w->work.handed || !p || !c) {
    /* Nothing of it went out (or no memory to wait): released now. */
    free(p);
    vmmipc_win_release(w->h);
    vmp_work_free(&w->work);
    return;
  }
  p->h = w->h;
  collected_take(&p->work, &w->work, w->device);
  p->buf = w->buf;  /* the references move to the queue */
  p->heap = (PyObject *)w->heap;
  w->buf = NULL;
  w->heap = NULL;
  p->next = c->pending;
  c->pending = p;
}

static void pending_release(vmp_pending *p) {
  vmmipc_win_release(p->h);
  collected_free(&p->work);
  PyObject *buf = p->buf, *heap = p->heap;
  free(p);
  /* Last: these may run deallocators, which may queue more. */
  Py_XDECREF(buf);
  Py_XDECREF(heap);
}

int vmp_comm_settle(VmpComm *c, int wait_ms) {
  if (!c->pending) return 0;
  const int64_t start = vmp_now_ms();
  for (;;) {
    vmp_pending **pp = &c->pending, *done = NULL;
    int left = 0;
    while (*pp) {
      vmp_pending *p = *pp;
      if (collected_done(&p->work)) {
        *pp = p->next;
        p->next = done;
        done = p;
      } else {
        pp = &p->next;
        left++;
      }
    }
    while (done) {
      vmp_pending *p = done;
      done = p->next;
      pending_release(p);
    }
    if (!left || wait_ms <= 0) return left;
    if (vmp_now_ms() - start >= wait_ms) return left;
    Py_BEGIN_ALLOW_THREADS
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
    Py_END_ALLOW_THREADS
  }
}

void vmp_comm_forget(VmpComm *c) {
  while (c->pending) {
    vmp_pending *p = c->pending;
    c->pending = p->next;
    p->h = NULL;
    collected_free(&p->work);
    PyObject *buf = p->buf, *heap = p->heap;
    free(p);
    Py_XDECREF(buf);
    Py_XDECREF(heap);
  }
}

void vmp_comm_settle_all(VmpComm *c) {
  while (c->pending) {
    vmp_pending *p = c->pending;
    c->pending = p->next;
    pending_release(p);
  }
}

/* ---- buffers still exposed when collected --------------------------------- */

typedef struct vmp_deferred {
  struct vmp_deferred *next;
  vmmipc_buf_t h;
  PyObject *keep;
  void *dl_managed;
  int dl_versioned;
  vmp_collected work; /* the work it handed out */
} vmp_deferred;

static vmp_deferred *deferred;

void vmp_defer_buffer(vmmipc_buf_t h, PyObject *keep, void *dl_managed, int dl_versioned, vmp_work *work,
                      int device) {
  vmp_deferred *d = calloc(1, sizeof *d);
  if (!d) {  /* leaked rather than freed under a peer's mapping or running work */
    Py_XDECREF(keep);
    return;
  }
  d->h = h;
  d->keep = keep;
  d->dl_managed = dl_managed;
  d->dl_versioned = dl_versioned;
  collected_take(&d->work, work, device);
  d->next = deferred;
  deferred = d;
}

void vmp_sweep_buffers(void) {
  vmp_deferred **pp = &deferred, *done = NULL;
  while (*pp) {
    vmp_deferred *d = *pp;
    if (!collected_done(&d->work) || vmmipc_buf_free(d->h) == VMMIPC_ERR_BUSY) {
      pp = &d->next; /* its work still runs, or a released window still exposes it */
      continue;
    }
    *pp = d->next;
    d->next = done;
    done = d;
  }
  while (done) {
    vmp_deferred *d = done;
    done = d->next;
    vmp_release_keep(d->keep, d->dl_managed, d->dl_versioned);
    collected_free(&d->work);
    free(d);
  }
}

/* ---- comms collected open ------------------------------------------------- */

typedef struct vmp_orphan {
  struct vmp_orphan *next;
  vmmipc_comm_t h;
  vmp_pending *pending;
  int busy;
  int timeout_ms;
} vmp_orphan;

static vmp_orphan *orphans;

void vmp_comm_orphan(VmpComm *c) {
  vmp_orphan *o = malloc(sizeof *o);
  if (o) {
    o->h = c->h;
    o->pending = c->pending;
    o->busy = c->busy;
    o->timeout_ms = c->timeout_ms;
    o->next = orphans;
    orphans = o;
  } else {
    vmp_comm_settle_all(c);  /* leaked as it is: nothing collective or aborting here */
  }
  c->pending = NULL;
  c->h = NULL;
}

int vmp_orphans_abort(void) {
  int wait_ms = 0;
  for (vmp_orphan *o = orphans; o; o = o->next) {
    if (!o->busy && vmmipc_comm_abort(o->h) != VMMIPC_SUCCESS) o->busy = 1; /* not destroyed then */
    if (o->pending && vmp_close_wait_ms(o->timeout_ms) > wait_ms) wait_ms = vmp_close_wait_ms(o->timeout_ms);
  }
  return wait_ms;
}

static int pending_running(vmp_pending *p) {
  int left = 0;
  for (; p; p = p->next) left += !collected_done(&p->work);
  return left;
}

int vmp_comm_running(VmpComm *c) { return pending_running(c->pending); }

int vmp_orphans_running(void) {
  int left = 0;
  for (vmp_orphan *o = orphans; o; o = o->next) left += pending_running(o->pending);
  return left;
}

void vmp_release_orphans(void) {
  int fin = 0;
  MPI_Finalized(&fin);
  while (orphans) {
    vmp_orphan *o = orphans;
    orphans = o->next;
    while (o->pending) {
      vmp_pending *p = o->pending;
      o->pending = p->next;
      pending_release(p);
    }
    /* Aborted by vmp_orphans_abort (busy if that failed): peers still using
     * it fail at once (ABORTED) instead of waiting, and the destroy is local. */
    if (!fin && !o->busy && !vmp_exit_keep) vmmipc_comm_destroy(o->h);
    free(o);
  }
}
