/* vmmipc_export: one fresh fd per chunk, owned by the new descriptor. */
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include "common/error.h"
#include "common/host.h"
#include "common/testhooks.h"
#include "desc/desc.h"
#include "vmm/vmm.h"

vmmipc_result_t vmmipc_export(vmmipc_buf_t b, vmmipc_desc_t *out) {
  const char *op = "vmmipc_export";
  if (!b || !out) return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "%s: buf or out is NULL", op);
  *out = NULL;
  /* The driver refuses to export an imported allocation (INVALID_VALUE);
   * say why before any driver call. */
  if (b->imported)
    return vmmipc__error(VMMIPC_ERR_NOT_EXPORTABLE,
                         "%s: the buffer holds memory imported from another process, which cannot be exported "
                         "again; hint: forward the descriptor it was imported from (vmmipc_send of a received "
                         "descriptor works), or copy the data into a buffer of your own (vmmipc_alloc)",
                         op);
  const vmmipc__cu_t *cu;
  vmmipc_result_t r = vmmipc__cu_load(&cu);
  if (r) return r;
  vmmipc_desc_t d = NULL;
  if ((r = vmmipc__desc_new(b->num_chunks, &d))) return r;
  d->owner = b->owner;
  d->size = b->size;
  d->granularity = b->granularity;
  if ((r = vmmipc__host_id(d->host))) goto fail;
  for (int i = 0; i < b->num_chunks; i++) {
    int fd = -1;
    CUresult rc = VMMIPC__INJECT("export")
                      ? CUDA_ERROR_INVALID_VALUE
                      : cu->cuMemExportToShareableHandle(&fd, b->chunks[i].handle,
                                                         CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    if (rc) {
      long lim = 0;
      if (vmmipc__fd_limit_reached(&lim))
        r = vmmipc__error(VMMIPC_ERR_SYSTEM,
                          "%s: chunk %d of %d: the process reached its file descriptor limit (RLIMIT_NOFILE %ld); "
                          "the %d fd(s) this call had opened were closed again; hint: raise the limit (ulimit -n) "
                          "or free descriptors (vmmipc_desc_free)",
                          op, i + 1, b->num_chunks, lim, i);
      else
        r = vmmipc__cu_error(rc, NULL, "%s: chunk %d of %d: cuMemExportToShareableHandle(POSIX fd, size %zu)", op,
                             i + 1, b->num_chunks, b->chunks[i].size);
      goto fail;
    }
    d->sizes[i] = b->chunks[i].size;
    d->fds[i] = fd;
    /* No fd of ours leaks into a child that execs. */
    int fl = fcntl(fd, F_GETFD);
    if (fl >= 0) fcntl(fd, F_SETFD, fl | FD_CLOEXEC);
  }
  *out = d;
  return VMMIPC_SUCCESS;
fail:
  vmmipc_desc_free(d); /* closes the fds opened so far */
  return r;
}
