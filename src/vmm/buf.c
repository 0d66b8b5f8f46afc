/* Buffer records and vmmipc_buf_free: what each kind of buffer undoes. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/error.h"
#include "common/host.h"
#include "common/testhooks.h"
#include "vmm/imported.h"
#include "vmm/freed.h"
#include "vmm/vmm.h"

static atomic_uint_fast64_t vmmipc__serials;

uint64_t vmmipc__next_serial(void) { return (uint64_t)atomic_fetch_add(&vmmipc__serials, 1) + 1; }

static void vmmipc__no_export_fds(struct vmmipc__chunk *c, int n) {
  for (int i = 0; i < n; i++) c[i].export_fd = -1;
}

vmmipc_result_t vmmipc__buf_new(int chunks, const char *op, struct vmmipc_buf **out) {
  if (VMMIPC__INJECT("record")) return vmmipc__error(VMMIPC_ERR_NO_MEMORY, "%s: injected failure at record", op);
  struct vmmipc_buf *b = calloc(1, sizeof *b);
  if (!b) return vmmipc__error(VMMIPC_ERR_NO_MEMORY, "%s: allocating a buffer record", op);
  if (chunks > 0) {
    b->chunks = calloc((size_t)chunks, sizeof *b->chunks);
    if (!b->chunks) {
      free(b);
      return vmmipc__error(VMMIPC_ERR_NO_MEMORY, "%s: allocating a buffer record of %d chunks", op, chunks);
    }
    b->cap_chunks = chunks;
    vmmipc__no_export_fds(b->chunks, chunks);
  }
  b->device = -1;
  b->generation = 1;
  *out = b;
  return VMMIPC_SUCCESS;
}

vmmipc_result_t vmmipc__buf_add_resv(struct vmmipc_buf *b, CUdeviceptr ptr, size_t size, const char *op) {
  if (VMMIPC__INJECT("record")) return vmmipc__error(VMMIPC_ERR_NO_MEMORY, "%s: injected failure at record", op);
  if (b->num_resv == b->cap_resv) {
    int cap = b->cap_resv ? 2 * b->cap_resv : 2;
    struct vmmipc__resv *r = realloc(b->resv, (size_t)cap * sizeof *r);
    if (!r) return vmmipc__error(VMMIPC_ERR_NO_MEMORY, "%s: recording a reservation", op);
    b->resv = r;
    b->cap_resv = cap;
  }
  b->resv[b->num_resv].ptr = ptr;
  b->resv[b->num_resv].size = size;
  b->num_resv++;
  return VMMIPC_SUCCESS;
}

vmmipc_result_t vmmipc__buf_reserve_chunks(struct vmmipc_buf *b, int more, const char *op) {
  if (more <= b->cap_chunks - b->num_chunks) return VMMIPC_SUCCESS;
  int cap = b->cap_chunks ? b->cap_chunks : 2;
  while (cap - b->num_chunks < more) cap *= 2;
  struct vmmipc__chunk *c = realloc(b->chunks, (size_t)cap * sizeof *c);
  if (!c) return vmmipc__error(VMMIPC_ERR_NO_MEMORY, "%s: recording %d chunks", op, cap);
  vmmipc__no_export_fds(c + b->cap_chunks, cap - b->cap_chunks);
  b->chunks = c;
  b->cap_chunks = cap;
  return VMMIPC_SUCCESS;
}

vmmipc_result_t vmmipc__buf_check_unexposed(const struct vmmipc_buf *b, const char *op) {
  int n = __atomic_load_n(&b->exposed, __ATOMIC_ACQUIRE);
  if (n > 0)
    return vmmipc__error(VMMIPC_ERR_BUSY,
                         "%s: the buffer is exposed by %d open window(s); hint: vmmipc_win_free them first", op, n);
  return VMMIPC_SUCCESS;
}

/* Keeps the first failure's message while later calls go on. */
struct vmmipc__first_error {
  vmmipc_result_t r;
  vmmipc__error_state_t st;
  char msg[VMMIPC__ERRMSG_MAX];
};

static void vmmipc__note(struct vmmipc__first_error *f, vmmipc_result_t r) {
  if (f->r || !r) return;
  f->r = r;
  vmmipc__error_get(&f->st);
  snprintf(f->msg, sizeof f->msg, "%s", vmmipc_last_error());
}

vmmipc_result_t vmmipc__buf_destroy(const vmmipc__cu_t *cu, struct vmmipc_buf *b) {
  const char *op = "vmmipc_buf_free";
  struct vmmipc__first_error f = {VMMIPC_SUCCESS, {VMMIPC_SUCCESS, -1, 0, 0}, ""};
  if (!b) return VMMIPC_SUCCESS;
  if (b->cached) { /* a view: the entry owns the mapping */
    vmmipc_result_t r = vmmipc__mapent_release(cu, b->cached);
    free(b);
    return r;
  }
  if (b->listed) vmmipc__imported_remove(b->base);
  /* Importers that cached this buffer drop it at the next collective. */
  if (!b->imported && b->serial && __atomic_load_n(&b->exported, __ATOMIC_RELAXED))
    vmmipc__freed_note(b->serial, b->generation);
  for (int i = 0; i < b->num_chunks; i++)
    if (b->chunks[i].export_fd >= 0) {
      close(b->chunks[i].export_fd);
      vmmipc__cached_fds_add(-1);
    }
  if (cu) {
    /* A wrapped buffer maps the application's memory: only the handles it
     * retained are its own. Everything is undone even after a failure. */
    CUdeviceptr at = b->base;
    for (int i = 0; !b->wrapped && at && i < b->num_chunks; i++) {
      CUresult rc = cu->cuMemUnmap(at, b->chunks[i].size);
      if (!rc && VMMIPC__INJECT("unmap")) rc = CUDA_ERROR_INVALID_VALUE; /* tests: a failure reported, no leak */
      if (rc)
        vmmipc__note(&f, vmmipc__cu_error(rc, NULL, "%s: chunk %d of %d: cuMemUnmap(offset %llu, size %zu)", op,
                                          i + 1, b->num_chunks, (unsigned long long)(at - b->base),
                                          b->chunks[i].size));
      at += b->chunks[i].size;
    }
    for (int i = 0; i < b->num_chunks; i++) {
      CUresult rc = cu->cuMemRelease(b->chunks[i].handle);
      if (rc)
        vmmipc__note(&f, vmmipc__cu_error(rc, NULL, "%s: chunk %d of %d: cuMemRelease", op, i + 1, b->num_chunks));
    }
    for (int i = 0; i < b->num_resv; i++) {
      CUresult rc = cu->cuMemAddressFree(b->resv[i].ptr, b->resv[i].size);
      if (rc)
        vmmipc__note(&f, vmmipc__cu_error(rc, NULL, "%s: reservation %d of %d: cuMemAddressFree(size %zu)", op,
                                          i + 1, b->num_resv, b->resv[i].size));
    }
  }
  free(b->chunks);
  free(b->resv);
  free(b);
  if (f.r) {
    vmmipc__error_set_raw(f.msg);
    vmmipc__error_put(&f.st);
  }
  return f.r;
}

void vmmipc__buf_discard(const vmmipc__cu_t *cu, struct vmmipc_buf *b) {
  vmmipc__error_saved_t keep;
  vmmipc__error_save(&keep);
  (void)vmmipc__buf_destroy(cu, b);
  vmmipc__error_restore(&keep);
}

vmmipc_result_t vmmipc_buf_ptr(vmmipc_buf_t b, void **ptr, size_t *size) {
  if (!b) return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "vmmipc_buf_ptr: buf is NULL");
  if (ptr) *ptr = (void *)(uintptr_t)b->base;
  if (size) *size = b->size;
  return VMMIPC_SUCCESS;
}

vmmipc_result_t vmmipc_buf_info(vmmipc_buf_t b, int *num_chunks, int *is_imported) {
  if (!b) return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "vmmipc_buf_info: buf is NULL");
  if (num_chunks) *num_chunks = b->num_chunks;
  if (is_imported) *is_imported = b->imported;
  return VMMIPC_SUCCESS;
}

vmmipc_result_t vmmipc_buf_free(vmmipc_buf_t b) {
  if (!b) return VMMIPC_SUCCESS; /* like free(NULL) */
  vmmipc_result_t r = vmmipc__buf_check_unexposed(b, "vmmipc_buf_free");
  if (r) return r;
  const vmmipc__cu_t *cu = NULL;
  vmmipc__cu_load(&cu); /* a buffer exists only if the driver loaded */
  return vmmipc__buf_destroy(cu, b);
}
