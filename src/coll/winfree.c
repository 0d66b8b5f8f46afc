/* Freeing a window, plain or heap: vmmipc_win_free's shape (refuse while
 * pinned, agree, then free on every rank or on none), the deferred free
 * (vmmipc_win_release) and pins (vmmipc_win_pin / _unpin). Plain and heap
 * windows differ only in what w->reap gives back. */
#include <stddef.h>

#include "coll/coll.h"

vmmipc_result_t vmmipc__win_free(struct vmmipc_win *w, vmmipc_result_t local) {
  const char *op = "vmmipc_win_free";
  struct vmmipc_comm *c = w->comm;
  vmmipc_result_t r = vmmipc__failed(c) ? VMMIPC_ERR_PEER : vmmipc__enter(c, op, 1);
  if (r && !vmmipc__failed(c)) return r; /* refused here (another thread inside): still open */
  int pins = __atomic_load_n(&w->pins, __ATOMIC_ACQUIRE);
  if (r) { /* a failed comm: nobody to agree with; it frees locally, holding the comm (an abort's
             * announcing is waited out); its result is made before the comm is let go */
    if (!vmmipc__hold(c))
      return vmmipc__error(VMMIPC_ERR_BUSY, "%s: another thread is inside a call on this comm; the window is still open",
                           op);
    vmmipc__tell_untold(c, op);
    if (pins) {
      r = vmmipc__error(VMMIPC_ERR_BUSY,
                        "%s: the window is pinned %d time(s) on rank %d (vmmipc_win_pin); it stays open, though "
                        "the communicator failed; hint: unpin it, then free it (locally)",
                        op, pins, c->rank);
    } else {
      w->reap(w, 0);
      r = vmmipc__freed_locally(c, op);
    }
    __atomic_store_n(&c->busy, 0, __ATOMIC_RELEASE);
    return r;
  }
  double t0 = vmmipc__now();
  if (!local && pins) {
    local = vmmipc__error(VMMIPC_ERR_BUSY,
                          "%s: the window is pinned %d time(s) on rank %d (vmmipc_win_pin: live views of its memory); "
                          "it stays open on every rank; hint: unpin it everywhere, or release it "
                          "(vmmipc_win_release) to have it freed once unpinned",
                          op, pins, c->rank);
    vmmipc__error_rank(c->rank);
  }
  /* Agreed first, keyed by the window: ranks that free different windows,
   * or a rank that still pins it, leave it open everywhere. */
  r = vmmipc__agree_key(c, local, 0, op, 1, w->id);
  if (!r) {
    w->reap(w, 1); /* its slots are zeroed only now: no peer can still signal into them */
  } else if (c->broken) { /* the comm broke in the agreement: freed locally, if nothing here pins it */
    if (pins) {
      r = vmmipc__error(VMMIPC_ERR_BUSY,
                        "%s: the communicator broke in this call (%s), and the window is pinned %d time(s) here; "
                        "it stays open",
                        op, c->broken_msg, pins);
      vmmipc__leave(c);
      return r;
    }
    w->reap(w, 0);
    if (r == VMMIPC_ERR_BUSY || r == VMMIPC_ERR_INVALID_ARG) { /* freed: never a code that means "still open" */
      r = c->broken_code ? c->broken_code : VMMIPC_ERR_PEER;
      vmmipc__error_code(r);
    }
  }
  c->timing.total_s = vmmipc__now() - t0;
  vmmipc__leave(c);
  return r;
}

static int win_ready(struct vmmipc__deferred *d) {
  struct vmmipc_win *w = (struct vmmipc_win *)((char *)d - offsetof(struct vmmipc_win, def));
  return __atomic_load_n(&w->pins, __ATOMIC_ACQUIRE) == 0;
}

static void win_reap(struct vmmipc__deferred *d, int in_step) {
  struct vmmipc_win *w = (struct vmmipc_win *)((char *)d - offsetof(struct vmmipc_win, def));
  w->reap(w, in_step);
}

vmmipc_result_t vmmipc_win_release(vmmipc_win_t w) {
  if (!w) return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "vmmipc_win_release: win is NULL");
  if (__atomic_exchange_n(&w->released, 1, __ATOMIC_ACQ_REL))
    return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "vmmipc_win_release: the window was released already");
  w->def.id = w->id;
  w->def.heap = 0;
  w->def.group = w->heap;
  w->def.ready = win_ready;
  w->def.reap = win_reap;
  vmmipc__deferred_push(w->comm, &w->def);
  return VMMIPC_SUCCESS;
}

vmmipc_result_t vmmipc_win_pin(vmmipc_win_t w) {
  if (!w) return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "vmmipc_win_pin: win is NULL");
  __atomic_add_fetch(&w->pins, 1, __ATOMIC_ACQ_REL);
  return VMMIPC_SUCCESS;
}

vmmipc_result_t vmmipc_win_unpin(vmmipc_win_t w) {
  if (!w) return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "vmmipc_win_unpin: win is NULL");
  int n = __atomic_load_n(&w->pins, __ATOMIC_ACQUIRE);
  do {
    if (n <= 0) return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "vmmipc_win_unpin: the window is not pinned");
  } while (!__atomic_compare_exchange_n(&w->pins, &n, n - 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE));
  return VMMIPC_SUCCESS;
}
