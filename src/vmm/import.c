/* vmmipc_import: validate, reserve the total once, import and map the chunks
 * back to back, set the requested access; roll everything back on failure. */
#include <stdint.h>
#include <string.h>

#include "common/clock.h"
#include "common/error.h"
#include "vmm/imported.h"
#include "common/host.h"
#include "common/testhooks.h"
#include "desc/desc.h"
#include "driver/device.h"
#include "vmm/vmm.h"

vmmipc_result_t vmmipc__import_check(const struct vmmipc_desc *d, const char *op) {
  vmmipc_result_t r = vmmipc__desc_check(d);
  if (r) {
    vmmipc__error_prefix("%s: ", op);
    return r;
  }
  for (int i = 0; i < d->num_chunks; i++)
    if (d->fds[i] < 0)
      return vmmipc__error(VMMIPC_ERR_INVALID_DESC, "%s: chunk %d of %d has no file descriptor", op, i + 1,
                           d->num_chunks);
  unsigned char host[16];
  if ((r = vmmipc__host_id(host))) return r;
  if (memcmp(host, d->host, 16) != 0)
    return vmmipc__error(VMMIPC_ERR_INVALID_DESC,
                         "%s: the descriptor was exported on another host (kernel boot id differs); hint: memory "
                         "can be shared only between processes on one host, and containers that MPI places on one "
                         "node may still run on different hosts",
                         op);
  return VMMIPC_SUCCESS;
}

/* Import chunk handles one by one; on failure release those imported. */
static vmmipc_result_t vmmipc__import_handles(const vmmipc__cu_t *cu, const struct vmmipc_desc *d,
                                              struct vmmipc__chunk *c, const char *op) {
  for (int i = 0; i < d->num_chunks; i++) {
    CUresult rc = VMMIPC__INJECT("import")
                      ? CUDA_ERROR_INVALID_VALUE
                      : cu->cuMemImportFromShareableHandle(&c[i].handle, (void *)(uintptr_t)d->fds[i],
                                                           CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    if (rc) {
      /* The driver needs an fd of its own per import: at the fd limit it
       * fails with CUDA_ERROR_OPERATING_SYSTEM, which says nothing of it. */
      long lim = 0;
      vmmipc_result_t r;
      char e[160];
      if (vmmipc__fd_limit_reached(&lim)) {
        r = vmmipc__error(VMMIPC_ERR_RESOURCE,
                          "%s: chunk %d of %d: cuMemImportFromShareableHandle(fd %d) failed (%s) at the process's "
                          "file descriptor limit (RLIMIT_NOFILE %ld), which the driver needs one more of; "
                          "the %d chunk(s) imported were released; hint: raise the limit (ulimit -n) or free "
                          "descriptors (vmmipc_desc_free)%s",
                          op, i + 1, d->num_chunks, d->fds[i], vmmipc__cu_errstr(rc, e, sizeof e), lim, i,
                          vmmipc__fd_limit_note());
        vmmipc__error_driver((int)rc);
      } else
        r = vmmipc__cu_error(
            rc,
            "the fd is not a CUDA VMM allocation exported as a POSIX fd, or its owner device cannot be used by "
            "this process",
            "%s: chunk %d of %d: cuMemImportFromShareableHandle(fd %d)", op, i + 1, d->num_chunks, d->fds[i]);
      for (int j = 0; j < i; j++) cu->cuMemRelease(c[j].handle);
      return r;
    }
    c[i].size = (size_t)d->sizes[i];
  }
  return VMMIPC_SUCCESS;
}

vmmipc_result_t vmmipc_import(vmmipc_desc_t d, const vmmipc_access_t *access, vmmipc_buf_t *out) {
  return vmmipc__import_timed(d, access, out, NULL);
}

vmmipc_result_t vmmipc__import_timed(vmmipc_desc_t d, const vmmipc_access_t *access, vmmipc_buf_t *out,
                                     vmmipc_timing_t *t) {
  const char *op = "vmmipc_import";
  double t0 = 0, t1 = 0, t2 = 0;
  if (!d || !out) return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "%s: desc or out is NULL", op);
  *out = NULL;
  vmmipc_result_t r = vmmipc__import_check(d, op);
  if (r) return r;
  const vmmipc__cu_t *cu;
  if ((r = vmmipc__cu_load(&cu))) return r;
  struct vmmipc_buf *b = NULL;
  if ((r = vmmipc__buf_new(d->num_chunks, op, &b))) return r;
  b->imported = 1;
  b->owner = d->owner;
  if ((r = vmmipc__access_resolve(cu, access, op, b->access, &b->num_access))) goto fail;
  if ((r = vmmipc__current_device(cu, op, &b->device))) goto fail;
  size_t g;
  if ((r = vmmipc__device_granularity(cu, b->device, op, &g))) goto fail;
  b->granularity = g > d->granularity ? g : (size_t)d->granularity;
  for (int i = 0; i < d->num_chunks; i++)
    if (d->sizes[i] % g) {
      r = vmmipc__error(VMMIPC_ERR_INVALID_DESC,
                        "%s: chunk %d of %d has size %llu, not a multiple of this device's granularity %zu", op, i + 1,
                        d->num_chunks, (unsigned long long)d->sizes[i], g);
      goto fail;
    }
  if (d->num_chunks == 0) {
    *out = b;
    return VMMIPC_SUCCESS;
  }
  size_t total = 0;
  for (int i = 0; i < d->num_chunks; i++) total += (size_t)d->sizes[i];
  CUdeviceptr base = 0;
  if ((r = vmmipc__reserve(cu, total, b->granularity, 0, &base, op))) goto fail;
  if ((r = vmmipc__buf_add_resv(b, base, total, op))) {
    cu->cuMemAddressFree(base, total);
    goto fail;
  }
  t0 = vmmipc__now();
  if ((r = vmmipc__import_handles(cu, d, b->chunks, op))) goto fail;
  b->num_chunks = d->num_chunks; /* from here on, destroy releases them */
  t1 = vmmipc__now();
  if ((r = vmmipc__map_chunks(cu, base, b->chunks, b->num_chunks, 0, b->num_chunks,
                              "a chunk size that does not match the exported allocation fails here; the descriptor "
                              "may be forged or corrupted",
                              op)))
    goto fail;
  b->base = base;
  t2 = vmmipc__now();
  if ((r = vmmipc__set_access(cu, base, total, b->access, b->num_access, op))) goto fail;
  if ((r = vmmipc__imported_add(base, total))) {
    vmmipc__error_prefix("%s: ", op);
    goto fail;
  }
  b->listed = 1;
  if (t) {
    t->import_s += t1 - t0;
    t->map_s += t2 - t1;
    t->access_s += vmmipc__now() - t2;
  }
  b->size = (size_t)d->size;
  b->mapped = total;
  *out = b;
  return VMMIPC_SUCCESS;
fail:
  vmmipc__buf_discard(cu, b);
  return r;
}
