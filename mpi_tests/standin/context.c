/* Primary contexts: one static struct per physical device; the current
 * context is thread-local. */
#include "async.h"

static int sti_is_context(CUcontext ctx) {
  for (int i = 0; i < sti.nvis; i++)
    if (ctx == &sti.ctx[sti.vis[i]]) return 1;
  return 0;
}

CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev) {
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  CUresult rc = sti_enter();
  if (rc) return rc;
  if (sti_valid_ordinal(dev)) {
    struct CUctx_st *c = &sti.ctx[sti.vis[dev]];
    c->retains++;
    *pctx = c;
  } else {
    rc = CUDA_ERROR_INVALID_DEVICE;
  }
  sti_leave();
  return rc;
}

CUresult cuDevicePrimaryCtxRelease(CUdevice dev) {
  CUresult rc = sti_enter();
  if (rc) return rc;
  if (!sti_valid_ordinal(dev))
    rc = CUDA_ERROR_INVALID_DEVICE;
  else if (sti.ctx[sti.vis[dev]].retains <= 0)
    rc = CUDA_ERROR_INVALID_CONTEXT; /* released more often than retained */
  else
    sti.ctx[sti.vis[dev]].retains--;
  sti_leave();
  return rc;
}

/* The retain count of visible device `dev`'s primary context, or -1: lets
 * tests check that vmmipc takes one reference per device, not per call. */
STI_EXPORT int vmmipc_standin_ctx_retains(int dev) {
  int n = -1;
  pthread_mutex_lock(&sti.mu);
  if (dev >= 0 && dev < sti.nvis) n = sti.ctx[sti.vis[dev]].retains;
  pthread_mutex_unlock(&sti.mu);
  return n;
}

/* NULL unsets the current context. */
CUresult cuCtxSetCurrent(CUcontext ctx) {
  CUresult rc = sti_enter();
  if (rc) return rc;
  if (ctx && !sti_is_context(ctx))
    rc = CUDA_ERROR_INVALID_CONTEXT;
  else
    sti_current = ctx;
  sti_leave();
  return rc;
}

CUresult cuCtxGetCurrent(CUcontext *pctx) {
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  CUresult rc = sti_enter();
  if (rc) return rc;
  *pctx = sti_current;
  sti_leave();
  return CUDA_SUCCESS;
}

CUresult cuCtxGetDevice(CUdevice *device) {
  if (!device) return CUDA_ERROR_INVALID_VALUE;
  CUresult rc = sti_enter_ctx();
  if (rc) return rc;
  *device = sti_ordinal_of_phys(sti_current->phys);
  sti_leave();
  return CUDA_SUCCESS;
}

/* Waits for the work queued so far on every stream of the context (with
 * VMMIPC_STANDIN_ASYNC=off it is all done already); a current context is
 * required. */
CUresult cuCtxSynchronize(void) {
  CUresult rc = sti_enter_ctx();
  if (rc) return rc;
  if (sti_async_on()) rc = sti_wait_ctx(sti_current);
  sti_leave();
  return rc;
}

/* The CUDA 13 variants, served for "cuCtxGetDevice" / "cuCtxSynchronize" at
 * cudaVersion >= 13000: an explicit context, or NULL for the current one. */
static CUresult sti_enter_ctx_arg(CUcontext *ctx) {
  CUresult rc = sti_enter();
  if (rc) return rc;
  if (!*ctx) *ctx = sti_current;
  if (!*ctx || !sti_is_context(*ctx)) {
    sti_leave();
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  return CUDA_SUCCESS;
}

CUresult cuCtxGetDevice_v2(CUdevice *device, CUcontext ctx) {
  if (!device) return CUDA_ERROR_INVALID_VALUE;
  CUresult rc = sti_enter_ctx_arg(&ctx);
  if (rc) return rc;
  *device = sti_ordinal_of_phys(ctx->phys);
  sti_leave();
  return CUDA_SUCCESS;
}

CUresult cuCtxSynchronize_v2(CUcontext ctx) {
  CUresult rc = sti_enter_ctx_arg(&ctx);
  if (rc) return rc;
  if (sti_async_on()) rc = sti_wait_ctx(ctx);
  sti_leave();
  return rc;
}
