/* Which path a host sync call takes. VMMIPC_SYNC (read once):
 *   kernel  the library's kernels, else the call fails;
 *   memops  the driver's stream memory operations only;
 *   auto    (default) kernels where they load on the current context, else
 *           stream memory operations.
 * Every call first checks the window's device record (sync/device.c). */
#include <stdlib.h>
#include <string.h>

#include "sync/sync.h"

enum { MODE_UNREAD = 0, MODE_AUTO, MODE_KERNEL, MODE_MEMOPS, MODE_BAD };

static int sync_mode(const char **raw) {
  static int mode = MODE_UNREAD;
  const char *e = getenv("VMMIPC_SYNC");
  *raw = e;
  int m = __atomic_load_n(&mode, __ATOMIC_RELAXED);
  if (m == MODE_UNREAD) {
    if (!e || !*e || strcmp(e, "auto") == 0)
      m = MODE_AUTO;
    else if (strcmp(e, "kernel") == 0)
      m = MODE_KERNEL;
    else if (strcmp(e, "memops") == 0)
      m = MODE_MEMOPS;
    else
      m = MODE_BAD;
    __atomic_store_n(&mode, m, __ATOMIC_RELAXED);
  }
  return m;
}

vmmipc_result_t vmmipc__sync_path(struct vmmipc_win *w, const char *op, int *kernel) {
  *kernel = 0;
  vmmipc_result_t r = vmmipc__windev_check(w, op);
  if (r) return r;
  const char *raw;
  int mode = sync_mode(&raw);
  if (mode == MODE_BAD)
    return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "%s: VMMIPC_SYNC is \"%s\"; hint: use kernel, memops or auto", op,
                         raw ? raw : "");
  if (mode != MODE_MEMOPS) {
    const vmmipc__cu_t *cu;
    vmmipc__kernels_t k;
    if (!(r = vmmipc__cu_load(&cu))) r = vmmipc__kernels_get(cu, op, &k);
    if (r && mode == MODE_KERNEL) return r;
    *kernel = !r;
  }
  if (w->slice >= 0) __atomic_add_fetch(*kernel ? &w->sync_kernel : &w->sync_memops, 1, __ATOMIC_RELAXED);
  return VMMIPC_SUCCESS;
}
