/* The kernel path of host sync: the library's kernels (kern/sync.cu, as
 * PTX embedded at build time), loaded with cuModuleLoadData once per
 * context by the window calls (setup.c: a module load waits for the
 * context's running kernels, so never a host sync call), and launched with
 * cuLaunchKernel on the caller's stream. Modules stay loaded for the life
 * of the process, like the driver table. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "sync/sync.h"

extern const unsigned char vmmipc__sync_ptx[];
extern const size_t vmmipc__sync_ptx_size;

#define KERNELS_MAX 64 /* contexts */

typedef struct {
  CUcontext ctx;
  CUresult rc; /* the load's outcome: a failed load is not retried */
  vmmipc__kernels_t k;
} kmod_t;

static kmod_t kmods[KERNELS_MAX];
static int nkmods;
static pthread_mutex_t kmods_mu = PTHREAD_MUTEX_INITIALIZER;

static CUresult kernels_load(const vmmipc__cu_t *cu, kmod_t *m) {
  CUmodule mod = NULL;
  CUresult rc = cu->cuModuleLoadData(&mod, vmmipc__sync_ptx);
  if (!rc) rc = cu->cuModuleGetFunction(&m->k.signal, mod, "vmmipc_k_signal");
  if (!rc) rc = cu->cuModuleGetFunction(&m->k.wait, mod, "vmmipc_k_wait");
  if (!rc) rc = cu->cuModuleGetFunction(&m->k.barrier, mod, "vmmipc_k_barrier");
  if (rc && mod) cu->cuModuleUnload(mod);
  return rc;
}

/* The current context's entry, loading it if `load` (kmods_mu held). */
static vmmipc_result_t lookup(const vmmipc__cu_t *cu, const char *op, int load, vmmipc__kernels_t *out) {
  CUcontext ctx = NULL;
  CUresult rc = cu->cuCtxGetCurrent(&ctx);
  if (rc) return vmmipc__cu_error(rc, NULL, "%s: cuCtxGetCurrent", op);
  if (!ctx)
    return vmmipc__error(VMMIPC_ERR_CUDA, "%s: no current CUDA context; hint: call vmmipc_set_device first", op);
  pthread_mutex_lock(&kmods_mu);
  kmod_t *m = NULL;
  for (int i = 0; i < nkmods && !m; i++)
    if (kmods[i].ctx == ctx) m = &kmods[i];
  if (!m && load && nkmods < KERNELS_MAX) {
    m = &kmods[nkmods];
    m->ctx = ctx;
    m->rc = kernels_load(cu, m);
    nkmods++;
  }
  int found = m != NULL;
  rc = m ? m->rc : CUDA_ERROR_NOT_SUPPORTED;
  if (!rc) *out = m->k;
  pthread_mutex_unlock(&kmods_mu);
  if (!found && !load)
    return vmmipc__error(VMMIPC_ERR_INVALID_ARG,
                         "%s: the library's kernels are not loaded in the current context: a host sync call never "
                         "loads code (a load waits for the context's kernels); hint: make a window (or heap window) "
                         "with this context current first",
                         op);
  if (rc)
    return vmmipc__cu_error(rc, "the device cannot run the library's PTX (sm_75 and a CUDA 13 driver are needed); "
                                "VMMIPC_SYNC=memops uses stream memory operations",
                            "%s: loading the sync kernels (%zu bytes of PTX)", op, vmmipc__sync_ptx_size);
  return VMMIPC_SUCCESS;
}

vmmipc_result_t vmmipc__kernels_load(const vmmipc__cu_t *cu, const char *op, vmmipc__kernels_t *out) {
  return lookup(cu, op, 1, out);
}

vmmipc_result_t vmmipc__kernels_find(const vmmipc__cu_t *cu, const char *op, vmmipc__kernels_t *out) {
  return lookup(cu, op, 0, out);
}

/* Everything a launch needs: the window's arrays, the kernels, the alarm. */
static vmmipc_result_t launch_begin(struct vmmipc_win *w, const char *op, const vmmipc__cu_t **cu,
                                    struct vmmipc__windev **v, vmmipc__kernels_t *k, struct vmmipc__sync **s) {
  vmmipc_result_t r = vmmipc__cu_load(cu);
  if (!r) r = vmmipc__kernels_find(*cu, op, k);
  if (!r) r = vmmipc__windev_get(w, op, v);
  *s = w->comm->pool->sync;
  return r;
}

static vmmipc_result_t launch(const vmmipc__cu_t *cu, CUfunction f, unsigned threads, void *stream, void **args,
                              const char *op, const char *what, int rank) {
  CUresult rc = cu->cuLaunchKernel(f, 1, 1, 1, threads, 1, 1, 0, (CUstream)stream, args, NULL);
  if (rc) return vmmipc__cu_error(rc, NULL, "%s: cuLaunchKernel(%s) for rank %d", op, what, rank);
  return VMMIPC_SUCCESS;
}

vmmipc_result_t vmmipc__kern_signal(struct vmmipc_win *w, int rank, uint64_t value, void *stream, const char *op) {
  const vmmipc__cu_t *cu;
  struct vmmipc__windev *v;
  vmmipc__kernels_t k;
  struct vmmipc__sync *s;
  vmmipc_result_t r = launch_begin(w, op, &cu, &v, &k, &s);
  if (r) return r;
  void *args[] = {&v->d, &rank, &value};
  return launch(cu, k.signal, 1, stream, args, op, "vmmipc_k_signal", rank);
}

vmmipc_result_t vmmipc__kern_wait(struct vmmipc_win *w, int rank, uint64_t value, void *stream, const char *op) {
  const vmmipc__cu_t *cu;
  struct vmmipc__windev *v;
  vmmipc__kernels_t k;
  struct vmmipc__sync *s;
  vmmipc_result_t r = launch_begin(w, op, &cu, &v, &k, &s);
  if (r) return r;
  uint64_t timeout_ns = 0; /* the comm's */
  void *claim = (void *)(uintptr_t)s->alarm_claim, *alarm = (void *)(uintptr_t)s->alarm_dev;
  void *args[] = {&v->d, &rank, &value, &timeout_ns, &claim, &alarm};
  return launch(cu, k.wait, 1, stream, args, op, "vmmipc_k_wait", rank);
}

vmmipc_result_t vmmipc__kern_barrier(struct vmmipc_win *w, void *stream, const char *op) {
  const vmmipc__cu_t *cu;
  struct vmmipc__windev *v;
  vmmipc__kernels_t f;
  struct vmmipc__sync *s;
  vmmipc_result_t r = launch_begin(w, op, &cu, &v, &f, &s);
  if (r) return r;
  /* A thread per node rank (a warp at least), up to a block. */
  unsigned n = (unsigned)w->comm->node_size, threads = (n + 31) / 32 * 32;
  if (threads > 1024) threads = 1024;
  uint64_t timeout_ns = 0;
  void *out = (void *)(uintptr_t)v->hbar_out, *in = (void *)(uintptr_t)v->hbar_in;
  void *epoch = (void *)(uintptr_t)v->hbar_epoch;
  void *claim = (void *)(uintptr_t)s->alarm_claim, *alarm = (void *)(uintptr_t)s->alarm_dev;
  void *args[] = {&v->d, &out, &in, &epoch, &timeout_ns, &claim, &alarm};
  return launch(cu, f.barrier, threads, stream, args, op, "vmmipc_k_barrier", w->comm->rank);
}
