/* Which path a host sync call takes. VMMIPC_SYNC (read once):
 *   kernel  the library's kernels, else the call fails;
 *   memops  the driver's stream memory operations only;
 *   auto    (default) kernels where they load on the current context, unless
 *           two node ranks of the window share a GPU: kernels of different
 *           processes time-slice there (a wait costs a scheduler slice,
 *           milliseconds), so stream memory operations, where the device
 *           has them. Decided once per window, the same on every rank.
 * Every call first checks the window's device record (sync/device.c). */
#include <stdlib.h>
#include <string.h>

#include "driver/device.h"
#include "sync/sync.h"
#include "vmm/vmm.h"

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

/* Whether two node ranks' signal pools live on one GPU: every rank sees
 * every pool's owner, so every rank answers the same. */
static int gpu_shared(struct vmmipc_win *w) {
  const struct vmmipc__pool *p = w->comm->pool;
  int n = w->comm->node_size;
  if (!p || w->slice < 0) return 0;
  for (int a = 0; a < n; a++)
    for (int b = a + 1; b < n; b++) {
      vmmipc_buf_t x = a == w->comm->node_rank ? p->local : p->peer[a];
      vmmipc_buf_t y = b == w->comm->node_rank ? p->local : p->peer[b];
      if (x && y && memcmp(&x->owner, &y->owner, sizeof x->owner) == 0) return 1;
    }
  return 0;
}

/* auto's choice for w: 1 memops, 2 kernels. */
static int auto_choice(struct vmmipc_win *w, const char *op) {
  int c = __atomic_load_n(&w->sync_auto, __ATOMIC_RELAXED);
  if (c) return c;
  const vmmipc__cu_t *cu;
  vmmipc__kernels_t k;
  int memops = 0, dev;
  vmmipc_result_t r = vmmipc__cu_load(&cu);
  if (!r) r = vmmipc__kernels_get(cu, op, &k);
  if (!r && gpu_shared(w) && vmmipc__current_device(cu, op, &dev) == VMMIPC_SUCCESS &&
      cu->cuDeviceGetAttribute(&memops, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, dev) == CUDA_SUCCESS &&
      memops)
    r = VMMIPC_ERR_UNSUPPORTED;
  c = r ? 1 : 2;
  __atomic_store_n(&w->sync_auto, c, __ATOMIC_RELAXED);
  return c;
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
  if (mode == MODE_KERNEL) {
    const vmmipc__cu_t *cu;
    vmmipc__kernels_t k;
    if (!(r = vmmipc__cu_load(&cu))) r = vmmipc__kernels_get(cu, op, &k);
    if (r) return r;
    *kernel = 1;
  } else if (mode == MODE_AUTO) {
    *kernel = auto_choice(w, op) == 2;
  }
  if (w->slice >= 0) __atomic_add_fetch(*kernel ? &w->sync_kernel : &w->sync_memops, 1, __ATOMIC_RELAXED);
  return VMMIPC_SUCCESS;
}
