/* Copies, memset and plain device memory. Device memory is host memory, so
 * a copy is a memmove on the addresses: a write through a read-only mapping
 * faults with SIGSEGV, which is how tests prove access enforcement. The
 * range checks run under the lock; the copy itself runs outside it, so a
 * large copy does not stall other threads and a fault leaves no lock held.
 *
 * With queued work (async.h) the copies follow CUDA's "API synchronization
 * behavior": every copy and memset is stream work (the synchronous ones on
 * the current context's legacy default stream); the host waits for a copy
 * into host memory (cuMemcpyDtoH) and for one from page-locked memory; a
 * copy from pageable memory waits for the stream's earlier work, stages the
 * source and returns before the data lands; device-to-device copies and
 * memsets do not wait at all. The asynchronous copies stage a pageable
 * source at the call, as the driver does, and read page-locked memory when
 * they run. */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "hostmem.h"
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

typedef struct {
  sti_op op;
  uintptr_t dst;
  const void *src; /* NULL: a memset of `value` */
  size_t n;
  unsigned char value;
  unsigned char staged[]; /* the source, when staged at the call */
} sti_copy_op;

static CUresult sti_copy_run(sti_op *o) {
  sti_copy_op *c = (sti_copy_op *)o;
  if (c->src)
    memmove((void *)c->dst, c->src, c->n);
  else
    memset((void *)c->dst, c->value, c->n);
  return CUDA_SUCCESS;
}

enum {
  STI_STAGE = 1, /* copy the source now: the caller may reuse it once the call returns */
  STI_WAIT = 2,  /* return once the copy is done */
  STI_DRAIN = 4, /* wait for the stream's earlier work before the call checks and stages */
  STI_SET = 8    /* a memset of the byte at src */
};

/* Queues a copy (or memset) on `stream` (NULL: the legacy default stream),
 * lock held. */
static CUresult sti_queue_copy(uintptr_t dst, int dev_dst, uintptr_t src, int dev_src, size_t n,
                               const CUstream *stream, int how) {
  struct CUstream_st *s = NULL;
  CUresult rc = CUDA_SUCCESS;
  if (stream && !sti_stream_valid(*stream)) return CUDA_ERROR_INVALID_HANDLE;
  if (!(s = sti_stream_of(stream ? *stream : NULL))) return CUDA_ERROR_OUT_OF_MEMORY;
  if (how & STI_DRAIN) rc = sti_wait_upto(s, sti_last_order());
  if (rc) return rc;
  /* Checked after the drain, which let other threads run. */
  if (n && (!dst || (!src && !(how & STI_SET)))) return CUDA_ERROR_INVALID_VALUE;
  if (n && ((dev_dst && !sti_is_device_range(dst, n)) || (dev_src && !sti_is_device_range(src, n))))
    return CUDA_ERROR_INVALID_VALUE;
  if (!n) return CUDA_SUCCESS;
  size_t extra = (how & STI_STAGE) ? n : 0;
  sti_copy_op *c = sti_op_new(sizeof *c + extra, sti_copy_run);
  if (!c) return CUDA_ERROR_OUT_OF_MEMORY;
  c->dst = dst;
  c->n = n;
  if (how & STI_SET) {
    c->value = (unsigned char)src;
  } else if (how & STI_STAGE) {
    memcpy(c->staged, (const void *)src, n);
    c->src = c->staged;
  } else {
    c->src = (const void *)src;
  }
  if ((rc = sti_enqueue(s, &c->op))) return rc;
  if (how & STI_WAIT) rc = sti_wait_upto(s, c->op.order);
  return rc;
}

/* The asynchronous path of every copy entry point. */
static CUresult sti_copy_async(uintptr_t dst, int dev_dst, uintptr_t src, int dev_src, size_t n,
                               const CUstream *stream, int how) {
  CUresult rc = sti_enter_ctx();
  if (rc) return rc;
  rc = sti_queue_copy(dst, dev_dst, src, dev_src, n, stream, how);
  sti_leave();
  return rc;
}

/* How a copy from host memory goes: pageable memory is staged, page-locked
 * memory read when the copy runs; the synchronous copy waits for the latter. */
static int sti_from_host(uintptr_t src, size_t n, int sync) {
  pthread_mutex_lock(&sti.mu);
  int pinned = sti_is_pinned(src, n);
  pthread_mutex_unlock(&sti.mu);
  if (pinned) return sync ? STI_WAIT : 0;
  return sync ? STI_DRAIN | STI_STAGE : STI_STAGE;
}

CUresult cuMemcpyHtoD(CUdeviceptr dst, const void *src, size_t n) {
  if (sti_async_on())
    return sti_copy_async((uintptr_t)dst, 1, (uintptr_t)src, 0, n, NULL, sti_from_host((uintptr_t)src, n, 1));
  return sti_copy((uintptr_t)dst, 1, (uintptr_t)src, 0, n, NULL);
}

CUresult cuMemcpyDtoH(void *dst, CUdeviceptr src, size_t n) {
  if (sti_async_on()) return sti_copy_async((uintptr_t)dst, 0, (uintptr_t)src, 1, n, NULL, STI_WAIT);
  return sti_copy((uintptr_t)dst, 0, (uintptr_t)src, 1, n, NULL);
}

CUresult cuMemcpyDtoD(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  if (sti_async_on()) return sti_copy_async((uintptr_t)dst, 1, (uintptr_t)src, 1, n, NULL, 0);
  return sti_copy((uintptr_t)dst, 1, (uintptr_t)src, 1, n, NULL);
}

CUresult cuMemcpyHtoDAsync(CUdeviceptr dst, const void *src, size_t n, CUstream s) {
  if (sti_async_on())
    return sti_copy_async((uintptr_t)dst, 1, (uintptr_t)src, 0, n, &s, sti_from_host((uintptr_t)src, n, 0));
  return sti_copy((uintptr_t)dst, 1, (uintptr_t)src, 0, n, &s);
}

CUresult cuMemcpyDtoHAsync(void *dst, CUdeviceptr src, size_t n, CUstream s) {
  if (sti_async_on()) return sti_copy_async((uintptr_t)dst, 0, (uintptr_t)src, 1, n, &s, 0);
  return sti_copy((uintptr_t)dst, 0, (uintptr_t)src, 1, n, &s);
}

CUresult cuMemcpyDtoDAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  if (sti_async_on()) return sti_copy_async((uintptr_t)dst, 1, (uintptr_t)src, 1, n, &s, 0);
  return sti_copy((uintptr_t)dst, 1, (uintptr_t)src, 1, n, &s);
}

/* Unified addressing: either side may be host or device memory. Between
 * two host buffers the copy is synchronous, as CUDA documents. */
CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  if (!sti_async_on()) return sti_copy((uintptr_t)dst, 0, (uintptr_t)src, 0, n, &s);
  pthread_mutex_lock(&sti.mu);
  int dev_dst = n && sti_is_device_range((uintptr_t)dst, n), dev_src = n && sti_is_device_range((uintptr_t)src, n);
  pthread_mutex_unlock(&sti.mu);
  int how = !dev_dst && !dev_src ? STI_WAIT : !dev_src ? sti_from_host((uintptr_t)src, n, 0) : 0;
  return sti_copy_async((uintptr_t)dst, 0, (uintptr_t)src, 0, n, &s, how);
}

/* On device memory, asynchronous with respect to the host. */
CUresult cuMemsetD8(CUdeviceptr dst, unsigned char value, size_t n) {
  if (sti_async_on()) return sti_copy_async((uintptr_t)dst, 1, value, 0, n, NULL, STI_SET);
  CUresult rc = sti_check_copy((uintptr_t)dst, 1, (uintptr_t)dst, 1, n, NULL);
  if (rc == CUDA_SUCCESS && n) memset((void *)(uintptr_t)dst, value, n);
  return rc;
}

CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char value, size_t n, CUstream s) {
  if (sti_async_on()) return sti_copy_async((uintptr_t)dst, 1, value, 0, n, &s, STI_SET);
  CUresult rc = sti_check_copy((uintptr_t)dst, 1, (uintptr_t)dst, 1, n, &s);
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

/* Waits for queued work first, as the real driver does: a queued copy or
 * kernel may still use the buffer. */
CUresult cuMemFree(CUdeviceptr dptr) {
  CUresult rc = sti_enter_ctx();
  if (rc) return rc;
  if (dptr && sti_async_on()) (void)sti_wait_ctx(NULL);
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
