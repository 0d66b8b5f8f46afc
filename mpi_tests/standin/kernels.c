/* Modules and kernel launches, for the library's host-sync kernels only
 * (src/sync/kern/sync.cu): cuModuleLoadData accepts an image that names
 * them, cuModuleGetFunction knows their names, and cuLaunchKernel (or
 * cuLaunchKernelEx) runs the equivalent on the stream's worker (async.h),
 * or on the calling thread before it returns with VMMIPC_STANDIN_ASYNC=off;
 * on a capturing stream it is recorded instead (capture.c). The arguments
 * are copied at the launch, as the driver does. A wait gives up at its
 * deadline and records itself in the window's device record, and a
 * host-sync wait also in the comm's alarm, as the kernels do.
 * VMMIPC_STANDIN_CAPS=nokernels makes cuModuleLoadData fail as a device
 * without a usable binary would.
 *
 * As the driver does, cuModuleLoadData waits while a kernel of its context
 * runs: the emulated ones, and the stand-in's user kernel
 * (vmmipc_standin_spin, a kernel spinning on a device word), so that a
 * test can show a library call that loads code while a user's kernel
 * waits for it. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "capture.h"
#include "hostmem.h"
#include "vmmipc_win_device.h"

typedef enum { STI_K_SIGNAL, STI_K_WAIT, STI_K_BARRIER } sti_kind;

struct CUmod_st {
  struct CUmod_st *next;
};

struct CUfunc_st {
  const char *name;
  sti_kind kind;
};

static struct CUfunc_st sti_funcs[] = {
    {"vmmipc_k_signal", STI_K_SIGNAL}, {"vmmipc_k_wait", STI_K_WAIT}, {"vmmipc_k_barrier", STI_K_BARRIER}};

static struct CUmod_st *sti_mods;
static long sti_launches;
/* Kernels launched and not finished, by physical device (lock held). */
static int sti_running[STI_MAX_DEVICES];

/* A kernel of ctx starts or ends (takes the lock). */
static void sti_kernel_runs(struct CUctx_st *ctx, int delta) {
  pthread_mutex_lock(&sti.mu);
  sti_running[ctx->phys] += delta;
  pthread_mutex_unlock(&sti.mu);
}

static long sti_budget_ms(void) {
  const char *e = getenv("VMMIPC_STANDIN_WAIT_MS");
  long v = e && *e ? strtol(e, NULL, 10) : 0;
  return v > 0 ? v : 120000;
}

/* Live modules and mapped host allocations, and launches so far. */
STI_EXPORT void vmmipc_standin_kernel_counts(long *modules, long *host_allocs, long *launches) {
  pthread_mutex_lock(&sti.mu);
  long m = 0;
  for (struct CUmod_st *x = sti_mods; x; x = x->next) m++;
  if (modules) *modules = m;
  if (host_allocs) *host_allocs = sti_host_alloc_count();
  if (launches) *launches = sti_launches;
  pthread_mutex_unlock(&sti.mu);
}

CUresult cuModuleLoadData(CUmodule *module, const void *image) {
  if (!module || !image) return CUDA_ERROR_INVALID_VALUE;
  CUresult rc = sti_enter_ctx();
  if (rc) return rc;
  struct CUmod_st *m = NULL;
  if (!sti.cap_kernels)
    rc = CUDA_ERROR_NO_BINARY_FOR_GPU;
  else if (!strstr((const char *)image, ".entry vmmipc_k_wait"))
    rc = CUDA_ERROR_INVALID_IMAGE; /* only the library's own kernels are emulated */
  else if (!(m = calloc(1, sizeof *m)))
    rc = CUDA_ERROR_OUT_OF_MEMORY;
  /* A load waits for the context's running kernels (lock dropped between
   * looks); the driver would wait forever, the stand-in as long as a
   * stream wait. A queued launch counts as running: its stream's work up to
   * it is hurried (only launches: other work waits for no load). */
  if (!rc && sti_async_on()) sti_hurry_launches(sti_current);
  struct timespec t0, now;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  long budget = sti_budget_ms();
  while (!rc && sti_running[sti_current->phys] > 0) {
    sti_leave();
    struct timespec ts = {0, 200000};
    nanosleep(&ts, NULL);
    clock_gettime(CLOCK_MONOTONIC, &now);
    if ((now.tv_sec - t0.tv_sec) * 1000 + (now.tv_nsec - t0.tv_nsec) / 1000000 >= budget) {
      free(m);
      return CUDA_ERROR_LAUNCH_TIMEOUT;
    }
    if ((rc = sti_enter_ctx())) {
      free(m);
      return rc;
    }
  }
  if (m && !rc) {
    m->next = sti_mods;
    sti_mods = m;
    *module = m;
  } else {
    free(m);
  }
  sti_leave();
  return rc;
}

CUresult cuModuleUnload(CUmodule hmod) {
  CUresult rc = sti_enter();
  if (rc) return rc;
  struct CUmod_st **pp = &sti_mods;
  while (*pp && *pp != hmod) pp = &(*pp)->next;
  if (hmod && *pp) {
    *pp = hmod->next;
    free(hmod);
  } else {
    rc = CUDA_ERROR_INVALID_HANDLE;
  }
  sti_leave();
  return rc;
}

CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name) {
  if (!hfunc || !name) return CUDA_ERROR_INVALID_VALUE;
  CUresult rc = sti_enter();
  if (rc) return rc;
  struct CUmod_st *x = sti_mods;
  while (x && x != hmod) x = x->next;
  rc = x ? CUDA_ERROR_NOT_FOUND : CUDA_ERROR_INVALID_HANDLE;
  for (size_t i = 0; x && i < sizeof sti_funcs / sizeof *sti_funcs; i++)
    if (strcmp(sti_funcs[i].name, name) == 0) {
      *hfunc = &sti_funcs[i];
      rc = CUDA_SUCCESS;
    }
  sti_leave();
  return rc;
}

/* As vmmipc__dev_record_to: the first to give up claims the record. */
static void sti_record(unsigned long long *claim, vmmipc_dev_record_t *rec, int state, int barrier, int rank,
                       uint64_t value, uint64_t seen) {
  unsigned long long zero = 0;
  if (!claim || !rec) return;
  if (!__atomic_compare_exchange_n(claim, &zero, 1ull, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) return;
  rec->value = value;
  rec->seen = seen;
  __atomic_store_n(&rec->head,
                   (unsigned long long)state | (unsigned long long)(barrier ? 1 : 0) << 8 |
                       (unsigned long long)(uint32_t)rank << 32,
                   __ATOMIC_SEQ_CST);
}

/* Where a host-sync kernel's timeout also goes: the comm's alarm. */
typedef struct {
  unsigned long long *claim;
  vmmipc_dev_record_t *rec;
} sti_alarm;

/* As vmmipc__dev_wait_slot, polling with a growing pause. */
static int sti_wait_slot(const vmmipc_win_device_t *w, const uint64_t *slot, uint64_t value, uint64_t deadline,
                         int rank, int barrier, const sti_alarm *a) {
  long pause_ns = 1000;
  if (!value) return VMMIPC_DEV_OK;
  for (;;) {
    uint64_t v = __atomic_load_n(slot, __ATOMIC_SEQ_CST);
    if (v & VMMIPC_DEV_FAILED_BIT) {
      sti_record(w->claim, w->record, VMMIPC_DEV_FAILED, barrier, rank, value, v);
      return VMMIPC_DEV_FAILED;
    }
    if ((int64_t)(v - value) >= 0) return VMMIPC_DEV_OK;
    if (sti_now_ns() >= deadline) {
      sti_record(w->claim, w->record, VMMIPC_DEV_TIMEOUT, barrier, rank, value, v);
      sti_record(a->claim, a->rec, VMMIPC_DEV_TIMEOUT, barrier, rank, value, v);
      return VMMIPC_DEV_TIMEOUT;
    }
    struct timespec ts = {0, pause_ns};
    nanosleep(&ts, NULL);
    if (pause_ns < 1000000) pause_ns *= 2;
  }
}

static uint64_t sti_deadline(const vmmipc_win_device_t *w, uint64_t timeout_ns) {
  return sti_now_ns() + (timeout_ns ? timeout_ns : w->timeout_ns);
}

/* The kernels' arguments, as sync.cu declares them:
 *   vmmipc_k_signal(w, int rank, uint64_t value)
 *   vmmipc_k_wait(w, int rank, uint64_t value, uint64_t timeout_ns, alarm claim, alarm record)
 *   vmmipc_k_barrier(w, out, in, uint64_t *epoch, uint64_t timeout_ns, alarm claim, alarm record) */
static int sti_arg_sizes(sti_kind kind, size_t *sizes) {
  static const size_t sig[] = {sizeof(vmmipc_win_device_t), sizeof(int), 8};
  static const size_t wait[] = {sizeof(vmmipc_win_device_t), sizeof(int), 8, 8, sizeof(void *), sizeof(void *)};
  static const size_t bar[] = {sizeof(vmmipc_win_device_t), sizeof(void *), sizeof(void *), sizeof(void *), 8,
                               sizeof(void *), sizeof(void *)};
  const size_t *from = kind == STI_K_SIGNAL ? sig : kind == STI_K_WAIT ? wait : bar;
  int n = kind == STI_K_SIGNAL ? 3 : kind == STI_K_WAIT ? 6 : 7;
  memcpy(sizes, from, (size_t)n * sizeof *sizes);
  return n;
}

static void sti_run(sti_kind kind, void **p) {
  const vmmipc_win_device_t *w = p[0];
  sti_pause_env("VMMIPC_STANDIN_KERNEL_US");
  if (kind == STI_K_SIGNAL) {
    int rank = *(const int *)p[1];
    uint64_t value = *(const uint64_t *)p[2];
    if (rank >= 0 && rank < w->nranks && w->signal_out[rank])
      __atomic_store_n(w->signal_out[rank], value, __ATOMIC_SEQ_CST);
  } else if (kind == STI_K_WAIT) {
    int rank = *(const int *)p[1];
    uint64_t value = *(const uint64_t *)p[2], timeout = *(const uint64_t *)p[3];
    sti_alarm a = {*(unsigned long long *const *)p[4], *(vmmipc_dev_record_t *const *)p[5]};
    if (rank >= 0 && rank < w->nranks && w->signal_in[rank])
      (void)sti_wait_slot(w, w->signal_in[rank], value, sti_deadline(w, timeout), rank, 0, &a);
  } else {
    uint64_t *const *out = *(uint64_t *const *const *)p[1];
    const uint64_t *in = *(const uint64_t *const *)p[2];
    uint64_t *epoch = *(uint64_t *const *)p[3];
    uint64_t timeout = *(const uint64_t *)p[4];
    sti_alarm a = {*(unsigned long long *const *)p[5], *(vmmipc_dev_record_t *const *)p[6]};
    uint64_t k = __atomic_add_fetch(epoch, 1, __ATOMIC_SEQ_CST); /* this barrier's number */
    for (int q = 0; q < w->node_size; q++)
      if (q != w->node_rank && out[q]) __atomic_store_n(out[q], k, __ATOMIC_SEQ_CST);
    uint64_t deadline = sti_deadline(w, timeout);
    for (int q = 0; q < w->node_size; q++)
      if (q != w->node_rank && sti_wait_slot(w, &in[q], k, deadline, w->node_ranks[q], 1, &a)) break;
  }
}

/* A queued launch: copies of its arguments, as sti_arg_sizes lays them out. */
typedef struct {
  sti_op op;
  sti_kind kind;
  int phys;
  void *params[STI_MAX_KERNEL_ARGS];
  unsigned char args[];
} sti_launch_op;

static CUresult sti_launch_run(sti_op *o) {
  sti_launch_op *l = (sti_launch_op *)o;
  sti_run(l->kind, l->params);
  return CUDA_SUCCESS;
}

static void sti_launch_fini(sti_op *o) {
  sti_running[((sti_launch_op *)o)->phys]--;
  o->stream->launches--;
}

/* Queues a launch on s (lock held): it counts as running until it ends. */
static CUresult sti_launch_queue(CUstream s, CUfunction f, void **params) {
  size_t sizes[STI_MAX_KERNEL_ARGS], total = 0;
  int n = sti_arg_sizes(f->kind, sizes);
  for (int i = 0; i < n; i++) total += (sizes[i] + 15) / 16 * 16;
  struct CUstream_st *q = sti_stream_of(s);
  sti_launch_op *l = q ? sti_op_new(sizeof *l + total, sti_launch_run) : NULL;
  if (!l) return CUDA_ERROR_OUT_OF_MEMORY;
  l->kind = f->kind;
  l->phys = sti_current->phys;
  for (size_t i = 0, at = 0; i < (size_t)n; at += (sizes[i] + 15) / 16 * 16, i++) {
    memcpy(l->args + at, params[i], sizes[i]);
    l->params[i] = l->args + at;
  }
  l->op.fini = sti_launch_fini;
  sti_running[l->phys]++;
  q->launches++;
  l->op.stream = q; /* for the fini, should the enqueue fail */
  return sti_enqueue(q, &l->op);
}

CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                        unsigned int by, unsigned int bz, unsigned int shared, CUstream s, void **params,
                        void **extra) {
  CUresult rc = sti_enter_ctx();
  if (rc) return rc;
  int known = 0;
  for (size_t i = 0; i < sizeof sti_funcs / sizeof *sti_funcs; i++) known |= f == &sti_funcs[i];
  if (!known)
    rc = CUDA_ERROR_INVALID_HANDLE;
  else if (!sti_stream_valid(s))
    rc = CUDA_ERROR_INVALID_HANDLE;
  else if (!params || extra || !gx || !gy || !gz || !bx || !by || !bz || (size_t)bx * by * bz > 1024 ||
           shared > 48 * 1024)
    rc = CUDA_ERROR_INVALID_VALUE;
  else
    sti_launches++;
  struct CUctx_st *ctx = sti_current;
  sti_leave();
  int capturing = !rc && sti_capturing(s);
  if (!rc && !capturing && sti_async_on()) {
    if (!(rc = sti_enter_ctx())) {
      rc = sti_stream_valid(s) ? sti_launch_queue(s, f, params) : CUDA_ERROR_INVALID_HANDLE;
      sti_leave();
    }
    return rc;
  }
  if (capturing) {
    size_t sizes[STI_MAX_KERNEL_ARGS];
    int n = sti_arg_sizes(f->kind, sizes);
    return sti_capture_launch(s, f, params, sizes, n);
  }
  /* Outside the lock, as a stream wait is: peers' threads signal meanwhile. */
  if (!rc) {
    sti_kernel_runs(ctx, 1);
    sti_run(f->kind, params);
    sti_kernel_runs(ctx, -1);
  }
  return rc;
}

static long sti_pdl_launches;

/* As the driver takes it for these kernels: one block, no extra; of the
 * attributes only programmatic serialization, which changes nothing here
 * (each kernel waits for the stream's previous work before any access, so
 * a stream's order is the stand-in's in-order run). Counted for tests. */
CUresult cuLaunchKernelEx(const CUlaunchConfig *cfg, CUfunction f, void **params, void **extra) {
  if (!cfg || (cfg->numAttrs && !cfg->attrs)) return CUDA_ERROR_INVALID_VALUE;
  int pdl = 0;
  for (unsigned i = 0; i < cfg->numAttrs; i++) {
    if (cfg->attrs[i].id != CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION) return CUDA_ERROR_NOT_SUPPORTED;
    pdl = cfg->attrs[i].value.programmaticStreamSerializationAllowed != 0;
  }
  CUresult rc = cuLaunchKernel(f, cfg->gridDimX, cfg->gridDimY, cfg->gridDimZ, cfg->blockDimX, cfg->blockDimY,
                               cfg->blockDimZ, cfg->sharedMemBytes, cfg->hStream, params, extra);
  if (!rc && pdl) {
    pthread_mutex_lock(&sti.mu);
    sti_pdl_launches++;
    pthread_mutex_unlock(&sti.mu);
  }
  return rc;
}

/* Launches made with programmatic serialization so far. */
STI_EXPORT long vmmipc_standin_pdl_launches(void) {
  pthread_mutex_lock(&sti.mu);
  long n = sti_pdl_launches;
  pthread_mutex_unlock(&sti.mu);
  return n;
}

/* Kernels running now (emulated launches and vmmipc_standin_spin), in all
 * contexts: lets a test wait until its user kernel has started. */
STI_EXPORT long vmmipc_standin_kernels_running(void) {
  long n = 0;
  pthread_mutex_lock(&sti.mu);
  for (int i = 0; i < STI_MAX_DEVICES; i++) n += sti_running[i];
  pthread_mutex_unlock(&sti.mu);
  return n;
}

/* A user's kernel in the current context, for tests: spins until the
 * 64-bit word at `addr` (device memory) reaches `value` as
 * vmmipc_dev_wait compares, holds a failure value, or timeout_ms passes.
 * Returns VMMIPC_DEV_OK, VMMIPC_DEV_FAILED or VMMIPC_DEV_TIMEOUT, or -1
 * without a context. While it spins, cuModuleLoadData in its context
 * waits. */
STI_EXPORT int vmmipc_standin_spin(const uint64_t *addr, uint64_t value, long timeout_ms) {
  if (sti_enter_ctx()) return -1;
  struct CUctx_st *ctx = sti_current;
  sti_running[ctx->phys]++;
  sti_leave();
  uint64_t deadline = sti_now_ns() + (uint64_t)timeout_ms * 1000000u;
  int r;
  for (long pause_ns = 1000;; pause_ns = pause_ns < 1000000 ? pause_ns * 2 : pause_ns) {
    uint64_t v = __atomic_load_n(addr, __ATOMIC_SEQ_CST);
    if ((r = v & VMMIPC_DEV_FAILED_BIT ? VMMIPC_DEV_FAILED : (int64_t)(v - value) >= 0 ? VMMIPC_DEV_OK : -1) >= 0)
      break;
    if (sti_now_ns() >= deadline) {
      r = VMMIPC_DEV_TIMEOUT;
      break;
    }
    struct timespec ts = {0, pause_ns};
    nanosleep(&ts, NULL);
  }
  sti_kernel_runs(ctx, -1);
  return r;
}
