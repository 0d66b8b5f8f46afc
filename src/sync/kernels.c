/* The kernel path of host sync: the library's kernels (kern/sync.cu, as
 * PTX embedded at build time), loaded with cuModuleLoadData once per
 * context by the window calls (setup.c: a module load waits for the
 * context's running kernels, so never a host sync call), and launched on
 * the caller's stream. Modules stay loaded for the life of the process,
 * like the driver table, for at most KERNELS_MAX contexts (past them: a
 * limit reached, VMMIPC_ERR_RESOURCE).
 * On devices of compute capability 9.0 and up the compute_90 PTX is loaded
 * and its kernels are launched with programmatic serialization (PDL): a
 * launch may then overlap the stream's previous kernel, which each kernel
 * waits for before touching memory (griddepcontrol.wait), so back-to-back
 * host sync calls do not pay a whole launch after each other.
 * VMMIPC_SYNC_PDL=0 (read at the load) keeps the compute_75 PTX and plain
 * launches. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/testhooks.h"
#include "sync/sync.h"

extern const unsigned char vmmipc__sync_ptx[], vmmipc__sync90_ptx[];
extern const size_t vmmipc__sync_ptx_size, vmmipc__sync90_ptx_size;

#define KERNELS_MAX 64 /* contexts */

typedef struct {
  CUcontext ctx;
  CUresult rc; /* the load's outcome: a failed load is not retried */
  vmmipc__kernels_t k;
} kmod_t;

static kmod_t kmods[KERNELS_MAX];
static int nkmods;
static pthread_mutex_t kmods_mu = PTHREAD_MUTEX_INITIALIZER;

static CUresult module_load(const vmmipc__cu_t *cu, const unsigned char *ptx, kmod_t *m) {
  CUmodule mod = NULL;
  CUresult rc = cu->cuModuleLoadData(&mod, ptx);
  if (!rc) rc = cu->cuModuleGetFunction(&m->k.signal, mod, "vmmipc_k_signal");
  if (!rc) rc = cu->cuModuleGetFunction(&m->k.wait, mod, "vmmipc_k_wait");
  if (!rc) rc = cu->cuModuleGetFunction(&m->k.barrier, mod, "vmmipc_k_barrier");
  if (rc && mod) cu->cuModuleUnload(mod);
  return rc;
}

/* Whether the current context's device takes the compute_90 PTX and PDL. */
static int pdl_wanted(const vmmipc__cu_t *cu) {
  const char *e = getenv("VMMIPC_SYNC_PDL");
  if (e && strcmp(e, "0") == 0) return 0;
  CUdevice dev = 0;
  int major = 0;
  if (cu->cuCtxGetDevice(&dev)) return 0;
  if (cu->cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev)) return 0;
  return major >= 9;
}

/* The compute_90 PTX where it fits, else (or if it does not load) the
 * compute_75 one with plain launches. */
static CUresult kernels_load(const vmmipc__cu_t *cu, kmod_t *m) {
  m->k.pdl = pdl_wanted(cu);
  if (m->k.pdl && !module_load(cu, vmmipc__sync90_ptx, m)) return CUDA_SUCCESS;
  m->k.pdl = 0;
  return module_load(cu, vmmipc__sync_ptx, m);
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
  const int full = VMMIPC__INJECT("kernels_full"); /* tests: every entry is another context's */
  for (int i = 0; i < nkmods && !m && !full; i++)
    if (kmods[i].ctx == ctx) m = &kmods[i];
  if (!m && load && nkmods < KERNELS_MAX && !full) {
    m = &kmods[nkmods];
    m->ctx = ctx;
    m->rc = kernels_load(cu, m);
    nkmods++;
  }
  int found = m != NULL, no_room = !m && (full || nkmods >= KERNELS_MAX);
  rc = m ? m->rc : CUDA_ERROR_NOT_SUPPORTED;
  if (!rc) *out = m->k;
  pthread_mutex_unlock(&kmods_mu);
  if (no_room) /* entries are never dropped: the driver tells nobody of a context's end */
    return vmmipc__error(VMMIPC_ERR_RESOURCE,
                         "%s: the library's kernels are loaded in %d contexts already, the most it keeps, and not in "
                         "the current one; hint: VMMIPC_SYNC=memops uses stream memory operations",
                         op, KERNELS_MAX);
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

static vmmipc_result_t launch(const vmmipc__cu_t *cu, const vmmipc__kernels_t *k, CUfunction f, unsigned threads,
                              void *stream, void **args, const char *op, const char *what, int rank) {
  CUlaunchAttribute attr;
  memset(&attr, 0, sizeof attr);
  attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
  attr.value.programmaticStreamSerializationAllowed = 1;
  CUlaunchConfig cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.gridDimX = cfg.gridDimY = cfg.gridDimZ = 1;
  cfg.blockDimX = threads;
  cfg.blockDimY = cfg.blockDimZ = 1;
  cfg.hStream = (CUstream)stream;
  cfg.attrs = &attr;
  cfg.numAttrs = k->pdl ? 1 : 0;
  CUresult rc = cu->cuLaunchKernelEx(&cfg, f, args, NULL);
  if (rc)
    return vmmipc__cu_error(rc, NULL, "%s: cuLaunchKernelEx(%s%s) for rank %d", op, what,
                            k->pdl ? ", programmatic serialization" : "", rank);
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
  return launch(cu, &k, k.signal, 1, stream, args, op, "vmmipc_k_signal", rank);
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
  return launch(cu, &k, k.wait, 1, stream, args, op, "vmmipc_k_wait", rank);
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
  if (VMMIPC__INJECT("barrier_batch"))
    return vmmipc__cu_error(CUDA_ERROR_INVALID_HANDLE, NULL, "%s: cuLaunchKernelEx(vmmipc_k_barrier) (injected)", op);
  return launch(cu, &f, f.barrier, threads, stream, args, op, "vmmipc_k_barrier", w->comm->rank);
}
