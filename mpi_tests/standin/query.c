/* Address queries: which allocation backs an address. The answers follow
 * what the real driver gave on an H200 (driver 580, 2026-12-01):
 * cuMemRetainAllocationHandle works anywhere inside a VMM mapping and gives
 * the handle cuMemCreate gave; it fails with CUDA_ERROR_INVALID_VALUE for a
 * hole in a reservation and for cuMemAlloc memory. cuMemGetAddressRange
 * gives the mapping (or the cuMemAlloc buffer) around an address, and
 * CUDA_ERROR_NOT_FOUND for a hole. */
#include <string.h>

#include "state.h"

/* A retain holds the handle like cuMemCreate does: one more cuMemRelease is
 * needed. A handle already released while its mapping stays becomes valid
 * again, with the same value. */
CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr) {
  if (!handle) return CUDA_ERROR_INVALID_VALUE;
  CUresult rc = sti_enter();
  if (rc) return rc;
  sti_map *m = sti_map_containing((uintptr_t)addr);
  if (!m) {
    rc = CUDA_ERROR_INVALID_VALUE;
  } else {
    sti_alloc *a = m->alloc;
    if (a->handle_live) {
      a->handle_refs++;
    } else {
      a->handle_live = 1;
      a->handle_refs = 1;
      a->refs++;
    }
    *handle = (CUmemGenericAllocationHandle)(uintptr_t)a;
  }
  sti_leave();
  return rc;
}

CUresult cuMemGetAddressRange(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr) {
  CUresult rc = sti_enter();
  if (rc) return rc;
  uintptr_t base = 0;
  size_t size = 0;
  sti_map *m = sti_map_containing((uintptr_t)dptr);
  sti_plain *b = m ? NULL : sti_plain_containing((uintptr_t)dptr);
  if (m) {
    base = m->base;
    size = m->size;
  } else if (b) {
    base = b->base;
    size = b->size;
  } else {
    rc = CUDA_ERROR_NOT_FOUND;
  }
  if (rc == CUDA_SUCCESS) {
    if (pbase) *pbase = (CUdeviceptr)base;
    if (psize) *psize = size;
  }
  sti_leave();
  return rc;
}

/* The attributes below; others are CUDA_ERROR_NOT_SUPPORTED (not emulated).
 * Addresses outside mappings and cuMemAlloc buffers are
 * CUDA_ERROR_INVALID_VALUE. */
CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr) {
  if (!data) return CUDA_ERROR_INVALID_VALUE;
  CUresult rc = sti_enter();
  if (rc) return rc;
  sti_map *m = sti_map_containing((uintptr_t)ptr);
  sti_plain *b = m ? NULL : sti_plain_containing((uintptr_t)ptr);
  uintptr_t base = m ? m->base : b ? b->base : 0;
  size_t size = m ? m->size : b ? b->size : 0;
  if (!m && !b) {
    rc = CUDA_ERROR_INVALID_VALUE;
  } else {
    switch (attribute) {
      case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
        memcpy(data, &size, sizeof size);
        break;
      case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR: {
        CUdeviceptr p = (CUdeviceptr)base;
        memcpy(data, &p, sizeof p);
        break;
      }
      case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES: {
        unsigned long long t = m ? (unsigned long long)m->alloc->types : 0;
        memcpy(data, &t, sizeof t);
        break;
      }
      case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE: {
        int v = 0; /* VMM memory never is; legacy IPC is not emulated at all */
        memcpy(data, &v, sizeof v);
        break;
      }
      case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE: {
        int v = m ? m->alloc->rdma : sti.cap_rdma;
        memcpy(data, &v, sizeof v);
        break;
      }
      case CU_POINTER_ATTRIBUTE_HOST_POINTER: { /* device memory is host memory here */
        void *host = (void *)(uintptr_t)ptr;
        memcpy(data, &host, sizeof host);
        break;
      }
      case CU_POINTER_ATTRIBUTE_MAPPED: {
        int v = 1;
        memcpy(data, &v, sizeof v);
        break;
      }
      case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE: {
        CUmemoryPool pool = NULL; /* no stream-ordered pools here */
        memcpy(data, &pool, sizeof pool);
        break;
      }
      default:
        rc = CUDA_ERROR_NOT_SUPPORTED;
    }
  }
  sti_leave();
  return rc;
}
