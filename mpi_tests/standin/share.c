/* Shareable handles: export an allocation as a POSIX fd, import one. The fd
 * is the allocation's memfd, so an importer in another process maps the
 * very same pages. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "state.h"

/* Each call gives a new fd that the caller owns. */
CUresult cuMemExportToShareableHandle(void *shareableHandle, CUmemGenericAllocationHandle handle,
                                      CUmemAllocationHandleType handleType, unsigned long long flags) {
  if (!shareableHandle) return CUDA_ERROR_INVALID_VALUE;
  CUresult rc = sti_enter();
  if (rc) return rc;
  int err = 0;
  sti_alloc *a = sti_alloc_find(handle);
  if (!a || flags != 0 || handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR ||
      !(a->types & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)) {
    rc = CUDA_ERROR_INVALID_VALUE;
  } else if (a->imported) {
    rc = CUDA_ERROR_INVALID_VALUE; /* the real driver refuses re-export too */
  } else {
    int fd = fcntl(a->fd, F_DUPFD_CLOEXEC, 0);
    if (fd < 0) {
      err = errno; /* EMFILE and friends: the caller may look at errno */
      rc = CUDA_ERROR_OPERATING_SYSTEM;
    } else {
      memcpy(shareableHandle, &fd, sizeof fd);
    }
  }
  sti_leave();
  if (err) errno = err;
  return rc;
}

static int sti_hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* Accepts only fds made by a stand-in cuMemCreate: a read-write memfd whose
 * name is STI_MEMFD_PREFIX + the owner UUID in hex, sized in whole
 * granules. Pipes, regular files, closed fds and foreign memfds fail. */
static int sti_check_export_fd(int fd, unsigned char owner[16], size_t *size) {
  if (fd < 0 || fcntl(fd, F_GET_SEALS) < 0) return -1;
  int fl = fcntl(fd, F_GETFL);
  if (fl < 0 || (fl & O_ACCMODE) != O_RDWR) return -1;
  char path[64], link[256];
  snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  ssize_t n = readlink(path, link, sizeof link - 1);
  if (n < 0) return -1;
  link[n] = '\0';
  static const char prefix[] = "/memfd:" STI_MEMFD_PREFIX;
  if (strncmp(link, prefix, sizeof prefix - 1) != 0) return -1;
  const char *hex = link + sizeof prefix - 1;
  for (int i = 0; i < 16; i++) {
    int hi = sti_hexval(hex[2 * i]), lo = hi < 0 ? -1 : sti_hexval(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return -1;
    owner[i] = (unsigned char)(hi << 4 | lo);
  }
  const char *rest = hex + 32;
  if (*rest != '\0' && strcmp(rest, " (deleted)") != 0) return -1;
  struct stat st;
  if (fstat(fd, &st) != 0 || st.st_size <= 0 || (size_t)st.st_size % STI_GRANULARITY != 0) return -1;
  *size = (size_t)st.st_size;
  return 0;
}

/* osHandle is the fd itself, cast through uintptr_t. The driver keeps its
 * own duplicate, so the caller may close its fd right after. */
CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle, void *osHandle,
                                        CUmemAllocationHandleType shHandleType) {
  if (!handle) return CUDA_ERROR_INVALID_VALUE;
  CUresult rc = sti_enter();
  if (rc) return rc;
  int err = 0;
  uintptr_t raw = (uintptr_t)osHandle;
  unsigned char owner[16];
  size_t size = 0;
  if (shHandleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) {
    rc = CUDA_ERROR_INVALID_VALUE;
  } else if (!sti.cap_vmm || !sti.cap_fd) {
    rc = CUDA_ERROR_NOT_SUPPORTED;
  } else if (raw > INT_MAX || sti_check_export_fd((int)raw, owner, &size) != 0) {
    rc = CUDA_ERROR_INVALID_VALUE;
  } else {
    int fd = fcntl((int)raw, F_DUPFD_CLOEXEC, 0);
    if (fd < 0) {
      err = errno;
      rc = CUDA_ERROR_OPERATING_SYSTEM;
    } else {
      sti_alloc *a = sti_alloc_new(fd, size, owner, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 1);
      if (a) {
        *handle = (CUmemGenericAllocationHandle)(uintptr_t)a;
      } else {
        close(fd);
        rc = CUDA_ERROR_OUT_OF_MEMORY;
      }
    }
  }
  sti_leave();
  if (err) errno = err;
  return rc;
}
