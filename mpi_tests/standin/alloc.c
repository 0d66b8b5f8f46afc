/* Physical allocations: cuMemCreate / cuMemRelease and the refcounted
 * records behind every CUmemGenericAllocationHandle. Each allocation is a
 * memfd named after its owner's UUID, so another process that receives the
 * fd can tell where it came from. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "state.h"

sti_alloc *sti_alloc_find(CUmemGenericAllocationHandle h) {
  for (sti_alloc *a = sti.allocs; a; a = a->next)
    if ((CUmemGenericAllocationHandle)(uintptr_t)a == h && a->handle_live) return a;
  return NULL;
}

sti_alloc *sti_alloc_new(int fd, size_t size, const unsigned char owner[16], CUmemAllocationHandleType types,
                         int imported) {
  sti_alloc *a = calloc(1, sizeof *a);
  if (!a) return NULL;
  a->fd = fd;
  a->size = size;
  memcpy(a->owner, owner, 16);
  a->types = types;
  a->imported = imported;
  a->handle_live = 1;
  a->handle_refs = 1;
  a->refs = 1;
  a->next = sti.allocs;
  sti.allocs = a;
  return a;
}

/* The memfd closes with the last reference: the handle or a mapping. */
void sti_alloc_unref(sti_alloc *a) {
  if (--a->refs > 0) return;
  for (sti_alloc **p = &sti.allocs; *p; p = &(*p)->next)
    if (*p == a) {
      *p = a->next;
      break;
    }
  close(a->fd);
  free(a);
}

/* Checks a CUmemAllocationProp's location: a visible device. Host locations
 * are real driver features the stand-in does not emulate. */
CUresult sti_check_location(const CUmemLocation *loc) {
  switch (loc->type) {
    case CU_MEM_LOCATION_TYPE_DEVICE:
      return sti_valid_ordinal(loc->id) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
    case CU_MEM_LOCATION_TYPE_HOST:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT:
      return CUDA_ERROR_NOT_SUPPORTED;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

CUresult cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
                                       CUmemAllocationGranularity_flags option) {
  if (!granularity || !prop) return CUDA_ERROR_INVALID_VALUE;
  CUresult rc = sti_enter();
  if (rc) return rc;
  if (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM && option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)
    rc = CUDA_ERROR_INVALID_VALUE;
  else if (prop->type != CU_MEM_ALLOCATION_TYPE_PINNED)
    rc = CUDA_ERROR_INVALID_VALUE;
  else
    rc = sti_check_location(&prop->location);
  if (rc == CUDA_SUCCESS) *granularity = STI_GRANULARITY;
  sti_leave();
  return rc;
}

static CUresult sti_check_create(size_t size, const CUmemAllocationProp *prop, unsigned long long flags) {
  if (flags != 0 || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED || prop->win32HandleMetaData)
    return CUDA_ERROR_INVALID_VALUE;
  CUresult rc = sti_check_location(&prop->location);
  if (rc) return rc;
  if (size == 0 || size % STI_GRANULARITY != 0) return CUDA_ERROR_INVALID_VALUE;
  /* What an H200 without IMEX answers for a fabric request. */
  if (prop->requestedHandleTypes & CU_MEM_HANDLE_TYPE_FABRIC) return CUDA_ERROR_NOT_PERMITTED;
  if (prop->requestedHandleTypes & ~(unsigned)CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
    return CUDA_ERROR_NOT_SUPPORTED; /* Win32 handles on Linux */
  if (!sti.cap_vmm) return CUDA_ERROR_NOT_SUPPORTED;
  if ((prop->requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) && !sti.cap_fd)
    return CUDA_ERROR_NOT_SUPPORTED;
  /* What the driver answers is not measured on a device without the
   * capability; NOT_SUPPORTED is the stand-in's choice (docs/standin.md). */
  if (prop->allocFlags.gpuDirectRDMACapable && !sti.cap_rdma) return CUDA_ERROR_NOT_SUPPORTED;
  return CUDA_SUCCESS;
}

/* A memfd of `size` bytes whose name carries the owner UUID. Sealed against
 * resizing, so no importer can shrink pages out from under other mappers. */
static int sti_memfd(size_t size, const unsigned char owner[16]) {
  char name[64];
  int n = snprintf(name, sizeof name, "%s", STI_MEMFD_PREFIX);
  for (int i = 0; i < 16; i++) n += snprintf(name + n, sizeof name - (size_t)n, "%02x", owner[i]);
  int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return -1;
  if (ftruncate(fd, (off_t)size) != 0 || fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    int e = errno;
    close(fd);
    errno = e;
    return -1;
  }
  return fd;
}

CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
                     unsigned long long flags) {
  if (!handle || !prop) return CUDA_ERROR_INVALID_VALUE;
  CUresult rc = sti_enter();
  if (rc) return rc;
  rc = sti_check_create(size, prop, flags);
  if (rc == CUDA_SUCCESS) {
    unsigned char owner[16];
    sti_uuid_of(sti.vis[prop->location.id], owner);
    int fd = sti_memfd(size, owner);
    sti_alloc *a = fd >= 0 ? sti_alloc_new(fd, size, owner, prop->requestedHandleTypes, 0) : NULL;
    if (a) {
      a->rdma = prop->allocFlags.gpuDirectRDMACapable != 0;
      *handle = (CUmemGenericAllocationHandle)(uintptr_t)a;
    } else {
      if (fd >= 0) close(fd);
      rc = CUDA_ERROR_OUT_OF_MEMORY;
    }
  }
  sti_leave();
  return rc;
}

/* Drops one handle reference (cuMemCreate, import or retain); the last one
 * invalidates the handle. Mappings keep the memory alive. */
CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  CUresult rc = sti_enter();
  if (rc) return rc;
  sti_alloc *a = sti_alloc_find(handle);
  if (a) {
    if (--a->handle_refs == 0) {
      a->handle_live = 0;
      sti_alloc_unref(a);
    }
  } else {
    rc = CUDA_ERROR_INVALID_VALUE;
  }
  sti_leave();
  return rc;
}

/* The location id is this process's ordinal of the owner device, or -2
 * (CU_DEVICE_INVALID) when the owner is not visible here, as on the real
 * driver for memory imported from a GPU hidden by CUDA_VISIBLE_DEVICES. */
CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop, CUmemGenericAllocationHandle handle) {
  if (!prop) return CUDA_ERROR_INVALID_VALUE;
  CUresult rc = sti_enter();
  if (rc) return rc;
  sti_alloc *a = sti_alloc_find(handle);
  if (a) {
    int phys = sti_phys_of_uuid(a->owner);
    int ord = phys >= 0 ? sti_ordinal_of_phys(phys) : -1;
    memset(prop, 0, sizeof *prop);
    prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop->requestedHandleTypes = a->types;
    prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop->location.id = ord >= 0 ? ord : CU_DEVICE_INVALID;
    prop->allocFlags.gpuDirectRDMACapable = (unsigned char)a->rdma;
  } else {
    rc = CUDA_ERROR_INVALID_VALUE;
  }
  sti_leave();
  return rc;
}
