/* Copies, memset and plain device memory. Device memory is host memory, so
 * a copy is a memcpy on the addresses: a write through a read-only mapping
 * faults with SIGSEGV, which is how tests prove access enforcement. The
 * range checks run under the lock; the copy itself runs outside it, so a
 * large copy does not stall other threads and a fault leaves no lock held. */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "state.h"
#include "stream_event.h"

sti_plain *sti_plain_containing(uintptr_t addr) {
  for (sti_plain *b = sti.plains; b; b = b->next)
    if (addr >= b->base && addr - b->base < b->size) return b;
  return NULL;
}

/* Walks adjacent mappings/buffers, so a copy may span several chunks. */
int sti_is_device_range(uintptr_t p, size_t n) {
  if (p + n < p) return 0;
  uintptr_t cur = p, end = p + n;
  while (cur < end) {
    sti_map *m = sti_map_containing(cur);
    sti_plain *b = m ? NULL : sti_plain_containing(cur);
    if (m)
      cur = m->base + m->size;
    else if (b)
      cur = b->base + b->size;
    else
      return 0;
  }
  return 1;
}

/* dev_dst / dev_src: whether that side must be device memory. stream: NULL
 * for the synchronous calls. */
static CUresult sti_check_copy(uintptr_t dst, int dev_dst, uintptr_t src, int dev_src, size_t n,
                               const CUstream *stream) {
  CUresult rc = sti_enter_ctx();
  if (rc) return rc;
  if (stream && !sti_stream_valid(*stream))
    rc = CUDA_ERROR_INVALID_HANDLE;
  else if (n && (!dst || !src))
    rc = CUDA_ERROR_INVALID_VALUE;
  else if (n && ((dev_dst && !sti_is_device_range(dst, n)) || (dev_src && !sti_is_device_range(src, n))))
    rc = CUDA_ERROR_INVALID_VALUE;
  sti_leave();
  return rc;
}

static CUresult sti_copy(uintptr_t dst, int dev_dst, uintptr_t src, int dev_src, size_t n, const CUstream *stream) {
  CUresult rc = sti_check_copy(dst, dev_dst, src, dev_src, n, stream);
  if (rc == CUDA_SUCCESS && n) memmove((void *)dst, (const void *)src, n);
  return rc;
}

CUresult cuMemcpyHtoD(CUdeviceptr dst, const void *src, size_t n) {
  return sti_copy((uintptr_t)dst, 1, (uintptr_t)src, 0, n, NULL);
}

CUresult cuMemcpyDtoH(void *dst, CUdeviceptr src, size_t n) {
  return sti_copy((uintptr_t)dst, 0, (uintptr_t)src, 1, n, NULL);
}

CUresult cuMemcpyDtoD(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  return sti_copy((uintptr_t)dst, 1, (uintptr_t)src, 1, n, NULL);
}

/* Asynchronous copies complete before they return. */
CUresult cuMemcpyHtoDAsync(CUdeviceptr dst, const void *src, size_t n, CUstream s) {
  return sti_copy((uintptr_t)dst, 1, (uintptr_t)src, 0, n, &s);
}

CUresult cuMemcpyDtoHAsync(void *dst, CUdeviceptr src, size_t n, CUstream s) {
  return sti_copy((uintptr_t)dst, 0, (uintptr_t)src, 1, n, &s);
}

CUresult cuMemcpyDtoDAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  return sti_copy((uintptr_t)dst, 1, (uintptr_t)src, 1, n, &s);
}

/* Unified addressing: either side may be host or device memory. */
CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  return sti_copy((uintptr_t)dst, 0, (uintptr_t)src, 0, n, &s);
}

CUresult cuMemsetD8(CUdeviceptr dst, unsigned char value, size_t n) {
  CUresult rc = sti_check_copy((uintptr_t)dst, 1, (uintptr_t)dst, 1, n, NULL);
  if (rc == CUDA_SUCCESS && n) memset((void *)(uintptr_t)dst, value, n);
  return rc;
}

/* Plain device memory: private anonymous pages, page aligned. */
CUresult cuMemAlloc(CUdeviceptr *dptr, size_t size) {
  if (!dptr) return CUDA_ERROR_INVALID_VALUE;
  CUresult rc = sti_enter_ctx();
  if (rc) return rc;
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  sti_plain *b = NULL;
  void *p = MAP_FAILED;
  if (size == 0 || size > SIZE_MAX - page) {
    rc = CUDA_ERROR_INVALID_VALUE;
  } else {
    size_t len = (size + page - 1) / page * page;
    b = calloc(1, sizeof *b);
    if (b) p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      free(b);
      rc = CUDA_ERROR_OUT_OF_MEMORY;
    } else {
      b->base = (uintptr_t)p;
      b->size = size;
      b->maplen = len;
      b->next = sti.plains;
      sti.plains = b;
      *dptr = (CUdeviceptr)b->base;
    }
  }
  sti_leave();
  return rc;
}

CUresult cuMemFree(CUdeviceptr dptr) {
  CUresult rc = sti_enter_ctx();
  if (rc) return rc;
  if (dptr) {
    sti_plain **pp = &sti.plains;
    while (*pp && (*pp)->base != (uintptr_t)dptr) pp = &(*pp)->next;
    sti_plain *b = *pp;
    if (b) {
      munmap((void *)b->base, b->maplen);
      *pp = b->next;
      free(b);
    } else {
      rc = CUDA_ERROR_INVALID_VALUE;
    }
  }
  sti_leave();
  return rc;
}

/* Legacy IPC (cuIpc*MemHandle) is not emulated. */
CUresult cuIpcGetMemHandle(CUipcMemHandle *handle, CUdeviceptr dptr) {
  (void)handle;
  (void)dptr;
  CUresult rc = sti_enter();
  if (rc) return rc;
  sti_leave();
  return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int flags) {
  (void)pdptr;
  (void)handle;
  (void)flags;
  CUresult rc = sti_enter();
  if (rc) return rc;
  sti_leave();
  return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult cuIpcCloseMemHandle(CUdeviceptr dptr) {
  (void)dptr;
  CUresult rc = sti_enter();
  if (rc) return rc;
  sti_leave();
  return CUDA_ERROR_NOT_SUPPORTED;
}
