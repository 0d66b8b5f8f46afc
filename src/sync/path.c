/* Which path a host sync call takes: the comm's, decided with its first
 * window (setup.c) from VMMIPC_SYNC (read once):
 *   kernel  the library's kernels, else the calls fail saying why;
 *   memops  the driver's stream memory operations only;
 *   auto    (default) the faster of the two as the node's ranks measured
 *           them then (trial.c), where both are usable.
 * Every call first checks the window's device record and the comm's
 * alarm. Nothing here loads code: a call in a context where no window was
 * made fails instead. */
#include <stdlib.h>
#include <string.h>

#include "sync/sync.h"

int vmmipc__sync_mode(const char **raw) {
  static int mode; /* 0: not read yet */
  const char *e = getenv("VMMIPC_SYNC");
  *raw = e;
  int m = __atomic_load_n(&mode, __ATOMIC_RELAXED);
  if (!m) {
    if (!e || !*e || strcmp(e, "auto") == 0)
      m = VMMIPC__MODE_AUTO;
    else if (strcmp(e, "kernel") == 0)
      m = VMMIPC__MODE_KERNEL;
    else if (strcmp(e, "memops") == 0)
      m = VMMIPC__MODE_MEMOPS;
    else
      m = VMMIPC__MODE_BAD;
    __atomic_store_n(&mode, m, __ATOMIC_RELAXED);
  }
  return m;
}

vmmipc_result_t vmmipc__sync_refusal(struct vmmipc_win *w, const char *op) {
  /* The comm's failure first: its release of this rank's stream waits is
   * what a device wait found in a healthy rank's slot (windev_check). */
  vmmipc_result_t r = vmmipc__sync_alarm(w->comm, op);
  return r ? r : vmmipc__windev_check(w, op);
}

vmmipc_result_t vmmipc__sync_path(struct vmmipc_win *w, const char *op, int barrier, int *kernel) {
  *kernel = 0;
  vmmipc_result_t r = vmmipc__sync_refusal(w, op);
  if (r) return r;
  const struct vmmipc__sync *s = w->comm->pool ? w->comm->pool->sync : NULL;
  int path = w->forced_path ? w->forced_path : s ? (barrier ? s->barrier_path : s->path) : VMMIPC__PATH_MEMOPS;
  *kernel = path == VMMIPC__PATH_KERNELS;
  if (w->slice >= 0) __atomic_add_fetch(*kernel ? &w->sync_kernel : &w->sync_memops, 1, __ATOMIC_RELAXED);
  return VMMIPC_SUCCESS;
}
