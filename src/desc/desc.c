/* Descriptor lifetime, strict validation, and the public pack/unpack/info. */
#include "desc/desc.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/error.h"
#include "common/host.h"
#include "common/testhooks.h"

vmmipc_result_t vmmipc__desc_new(int num_chunks, const char *op, vmmipc_desc_t *out) {
  if (VMMIPC__INJECT("record")) return vmmipc__error(VMMIPC_ERR_NO_MEMORY, "%s: injected failure at record", op);
  struct vmmipc_desc *d = calloc(1, sizeof *d);
  if (!d) return vmmipc__error(VMMIPC_ERR_NO_MEMORY, "%s: allocating a descriptor of %d chunks", op, num_chunks);
  d->num_chunks = num_chunks;
  d->handle_type = VMMIPC__HANDLE_POSIX_FD;
  if (num_chunks > 0) {
    d->sizes = calloc((size_t)num_chunks, sizeof *d->sizes);
    d->fds = malloc((size_t)num_chunks * sizeof *d->fds);
    if (!d->sizes || !d->fds) {
      free(d->sizes);
      free(d->fds);
      free(d);
      return vmmipc__error(VMMIPC_ERR_NO_MEMORY, "%s: allocating a descriptor of %d chunks", op, num_chunks);
    }
    for (int i = 0; i < num_chunks; i++) d->fds[i] = -1;
  }
  *out = d;
  return VMMIPC_SUCCESS;
}

vmmipc_result_t vmmipc_desc_free(vmmipc_desc_t d) {
  if (!d) return VMMIPC_SUCCESS; /* like free(NULL) */
  for (int i = 0; i < d->num_chunks; i++)
    if (d->fds[i] >= 0) close(d->fds[i]);
  free(d->sizes);
  free(d->fds);
  free(d);
  return VMMIPC_SUCCESS;
}

int vmmipc__desc_has_identity(const struct vmmipc_desc *d) {
  return d->pid >= 1 && d->pid <= INT32_MAX && d->nonce != 0 && d->serial != 0;
}

vmmipc_result_t vmmipc__desc_copy(const struct vmmipc_desc *d, vmmipc_desc_t *out) {
  *out = NULL;
  if (!d) return VMMIPC_SUCCESS;
  vmmipc_desc_t n = NULL;
  vmmipc_result_t r = vmmipc__desc_new(d->num_chunks, "copying a descriptor", &n);
  if (r) return r;
  int *fds = n->fds;
  uint64_t *sizes = n->sizes;
  *n = *d; /* every field, then the arrays of the copy */
  n->fds = fds;
  n->sizes = sizes;
  for (int i = 0; i < d->num_chunks; i++) {
    n->sizes[i] = d->sizes[i];
    n->fds[i] = d->fds[i] < 0 ? -1 : fcntl(d->fds[i], F_DUPFD_CLOEXEC, 0);
    if (d->fds[i] >= 0 && n->fds[i] < 0) {
      int e = errno;
      long lim = 0;
      int at_limit = e == EMFILE && vmmipc__fd_limit_reached(&lim);
      vmmipc_desc_free(n);
      if (at_limit)
        return vmmipc__error_errno(VMMIPC_ERR_SYSTEM, e,
                                   "copying a descriptor: duplicating the fd of chunk %d of %d hit the file "
                                   "descriptor limit (RLIMIT_NOFILE %ld); hint: raise it with ulimit -n%s",
                                   i + 1, d->num_chunks, lim, vmmipc__fd_limit_note());
      return vmmipc__error_errno(VMMIPC_ERR_SYSTEM, e, "copying a descriptor: duplicating the fd of chunk %d of %d",
                                 i + 1, d->num_chunks);
    }
  }
  *out = n;
  return VMMIPC_SUCCESS;
}

vmmipc_result_t vmmipc__desc_check(const struct vmmipc_desc *d) {
  const char *op = "validating a descriptor";
  if (d->handle_type != VMMIPC__HANDLE_POSIX_FD)
    return vmmipc__error(VMMIPC_ERR_INVALID_DESC,
                         "%s: unknown handle type %u (this library shares POSIX file descriptors, type %u)", op,
                         d->handle_type, VMMIPC__HANDLE_POSIX_FD);
  if (d->flags != 0)
    return vmmipc__error(VMMIPC_ERR_INVALID_DESC, "%s: unknown flags 0x%x", op, d->flags);
  int none = !d->pid && !d->nonce && !d->serial && !d->generation;
  if (!none && !vmmipc__desc_has_identity(d))
    return vmmipc__error(VMMIPC_ERR_INVALID_DESC,
                         "%s: incomplete buffer identity (pid %u, nonce %s, serial %llu): it is either all zero "
                         "or has a pid from 1 to 2^31-1, a nonzero nonce and a nonzero serial",
                         op, d->pid, d->nonce ? "set" : "0", (unsigned long long)d->serial);
  uint64_t g = d->granularity;
  if (g < 4096 || (g & (g - 1)) != 0)
    return vmmipc__error(VMMIPC_ERR_INVALID_DESC, "%s: granularity %llu is not a power of two of at least 4096",
                         op, (unsigned long long)g);
  if (d->num_chunks < 0 || (uint32_t)d->num_chunks > VMMIPC__DESC_MAX_CHUNKS)
    return vmmipc__error(VMMIPC_ERR_INVALID_DESC, "%s: %d chunks is out of range", op, d->num_chunks);
  if (d->num_chunks == 0) {
    if (d->size != 0)
      return vmmipc__error(VMMIPC_ERR_INVALID_DESC, "%s: size %llu is given with no chunks", op,
                           (unsigned long long)d->size);
    return VMMIPC_SUCCESS;
  }
  uint64_t sum = 0;
  for (int i = 0; i < d->num_chunks; i++) {
    uint64_t s = d->sizes[i];
    if (s == 0 || s % g != 0)
      return vmmipc__error(VMMIPC_ERR_INVALID_DESC,
                           "%s: chunk %d of %d has size %llu, which is %s the granularity %llu", op, i + 1,
                           d->num_chunks, (unsigned long long)s, s == 0 ? "zero, not a multiple of" : "not a multiple of",
                           (unsigned long long)g);
    if (sum > UINT64_MAX - s)
      return vmmipc__error(VMMIPC_ERR_INVALID_DESC, "%s: the chunk sizes overflow 64 bits at chunk %d of %d", op,
                           i + 1, d->num_chunks);
    sum += s;
  }
  if (sum > (uint64_t)SIZE_MAX / 2)
    return vmmipc__error(VMMIPC_ERR_INVALID_DESC, "%s: total %llu bytes cannot be mapped in this address space", op,
                         (unsigned long long)sum);
  /* Every chunk must be needed: the last one holds the end of the buffer. */
  uint64_t last = d->sizes[d->num_chunks - 1];
  if (d->size > sum || d->size <= sum - last)
    return vmmipc__error(VMMIPC_ERR_INVALID_DESC,
                         "%s: size %llu does not fit its %d chunks totalling %llu bytes (it must be larger than "
                         "%llu and at most %llu)",
                         op, (unsigned long long)d->size, d->num_chunks, (unsigned long long)sum,
                         (unsigned long long)(sum - last), (unsigned long long)sum);
  return VMMIPC_SUCCESS;
}

vmmipc_result_t vmmipc_desc_pack(vmmipc_desc_t d, void *bytes, size_t *num_bytes, int *fds, int *num_fds) {
  if (!d || !num_bytes || !num_fds)
    return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "vmmipc_desc_pack: desc, num_bytes and num_fds must not be NULL");
  size_t need = vmmipc__desc_wire_bytes(d);
  int need_fds = d->num_chunks;
  if (!bytes) { /* a query for the sizes */
    *num_bytes = need;
    *num_fds = need_fds;
    return VMMIPC_SUCCESS;
  }
  if (need_fds > 0 && !fds)
    return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "vmmipc_desc_pack: fds is NULL but the descriptor has %d chunks",
                         need_fds);
  if (*num_bytes < need || *num_fds < need_fds) {
    size_t have_b = *num_bytes;
    int have_f = *num_fds;
    *num_bytes = need;
    *num_fds = need_fds;
    return vmmipc__error(VMMIPC_ERR_INVALID_ARG,
                         "vmmipc_desc_pack: needs %zu bytes and %d fds but the buffers hold %zu and %d; hint: call "
                         "with bytes == NULL first to get the sizes",
                         need, need_fds, have_b, have_f);
  }
  vmmipc__desc_encode(d, bytes);
  for (int i = 0; i < need_fds; i++) fds[i] = d->fds[i];
  *num_bytes = need;
  *num_fds = need_fds;
  return VMMIPC_SUCCESS;
}

vmmipc_result_t vmmipc__desc_adopt(const void *bytes, size_t num_bytes, int *fds, int num_fds, vmmipc_desc_t *out) {
  vmmipc_desc_t d = NULL;
  vmmipc_result_t r = vmmipc__desc_decode(bytes, num_bytes, &d);
  if (!r && num_fds != d->num_chunks)
    r = vmmipc__error(VMMIPC_ERR_INVALID_DESC, "descriptor of %d chunks arrived with %d file descriptors",
                      d->num_chunks, num_fds);
  if (r) {
    for (int i = 0; i < num_fds; i++)
      if (fds && fds[i] >= 0) close(fds[i]);
    if (d) vmmipc_desc_free(d);
    *out = NULL;
    return r;
  }
  for (int i = 0; i < num_fds; i++) d->fds[i] = fds[i];
  *out = d;
  return VMMIPC_SUCCESS;
}

vmmipc_result_t vmmipc_desc_unpack(const void *bytes, size_t num_bytes, const int *fds, int num_fds,
                                   vmmipc_desc_t *out) {
  if (!out) return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "vmmipc_desc_unpack: out is NULL");
  *out = NULL;
  if (!bytes) return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "vmmipc_desc_unpack: bytes is NULL");
  if (num_fds < 0 || (num_fds > 0 && !fds))
    return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "vmmipc_desc_unpack: %d fds given with fds %s", num_fds,
                         fds ? "set" : "NULL");
  vmmipc_desc_t d = NULL;
  vmmipc_result_t r = vmmipc__desc_decode(bytes, num_bytes, &d);
  if (r) {
    vmmipc__error_prefix("vmmipc_desc_unpack: ");
    return r;
  }
  if (num_fds != d->num_chunks) {
    int chunks = d->num_chunks;
    vmmipc_desc_free(d);
    return vmmipc__error(VMMIPC_ERR_INVALID_DESC,
                         "vmmipc_desc_unpack: the descriptor has %d chunks but %d file descriptors were given",
                         chunks, num_fds);
  }
  for (int i = 0; i < num_fds; i++) {
    /* The caller keeps its fds; the descriptor owns duplicates. */
    int fd = fcntl(fds[i], F_DUPFD_CLOEXEC, 0);
    if (fd < 0) {
      int e = errno;
      long lim = 0;
      int at_limit = (e == EMFILE);
      if (at_limit) vmmipc__fd_limit_reached(&lim);
      vmmipc_desc_free(d); /* closes the duplicates made so far */
      if (at_limit)
        return vmmipc__error_errno(VMMIPC_ERR_SYSTEM, e,
                                   "vmmipc_desc_unpack: duplicating fd %d (chunk %d of %d) hit the file descriptor "
                                   "limit (RLIMIT_NOFILE %ld); hint: raise it with ulimit -n%s",
                                   fds[i], i + 1, num_fds, lim, vmmipc__fd_limit_note());
      return vmmipc__error_errno(e == EBADF ? VMMIPC_ERR_INVALID_DESC : VMMIPC_ERR_SYSTEM, e,
                                 "vmmipc_desc_unpack: duplicating fd %d (chunk %d of %d)", fds[i], i + 1, num_fds);
    }
    d->fds[i] = fd;
  }
  *out = d;
  return VMMIPC_SUCCESS;
}

vmmipc_result_t vmmipc_desc_info(vmmipc_desc_t d, size_t *size, int *num_chunks, vmmipc_uuid_t *owner) {
  if (!d) return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "vmmipc_desc_info: desc is NULL");
  if (size) *size = (size_t)d->size;
  if (num_chunks) *num_chunks = d->num_chunks;
  if (owner) *owner = d->owner;
  return VMMIPC_SUCCESS;
}

vmmipc_result_t vmmipc_desc_chunk_size(vmmipc_desc_t d, int index, size_t *size) {
  if (!d || !size) return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "vmmipc_desc_chunk_size: desc or size is NULL");
  if (index < 0 || index >= d->num_chunks)
    return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "vmmipc_desc_chunk_size: index %d is out of range (%d chunks)",
                         index, d->num_chunks);
  *size = (size_t)d->sizes[index];
  return VMMIPC_SUCCESS;
}
