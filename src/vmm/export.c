/* vmmipc_export: one fd per chunk, owned by the new descriptor, and the
 * buffer's identity.
 *
 * Export cache: on the H200, cuMemExportToShareableHandle costs about
 * 0.57 ms per chunk while no exported fd of that allocation is open, and
 * 0.02 ms while one is; dup() costs under 1 us and importing from the dup
 * works. So a buffer with the cache on keeps the first exported fd of each
 * chunk until the chunk is freed and hands out duplicates. The cost is one
 * fd per exported chunk per live buffer, counted process-wide
 * (vmmipc_export_cache_fds) and named in every fd-limit message. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/error.h"
#include "common/host.h"
#include "common/testhooks.h"
#include "desc/desc.h"
#include "vmm/vmm.h"

/* Exports of one buffer may run on several threads at once (two comms, each
 * on its thread): the cached fds are filled and duplicated under this lock.
 * It is held for the driver's export only on a chunk's first export. */
static pthread_mutex_t vmmipc__export_mu = PTHREAD_MUTEX_INITIALIZER;

vmmipc_result_t vmmipc__export_cache_choice(int requested, const char *op, int *on) {
  if (requested >= 0) {
    *on = requested != 0;
    return VMMIPC_SUCCESS;
  }
  const char *env = getenv("VMMIPC_EXPORT_CACHE");
  if (!env || !*env || strcmp(env, "1") == 0) {
    *on = 1;
  } else if (strcmp(env, "0") == 0) {
    *on = 0;
  } else {
    return vmmipc__error(VMMIPC_ERR_INVALID_ARG,
                         "%s: VMMIPC_EXPORT_CACHE=\"%s\" is neither 0 (off) nor 1 (on, the default)", op, env);
  }
  return VMMIPC_SUCCESS;
}

vmmipc_result_t vmmipc_export_cache_fds(long *count) {
  if (!count) return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "vmmipc_export_cache_fds: count is NULL");
  *count = vmmipc__cached_fds();
  return VMMIPC_SUCCESS;
}

/* A fresh exported fd of chunk i (close-on-exec), or an error naming it.
 * `opened`: the fds this call opened so far, `fresh` of them cached ones:
 * the failure closes them again, so the message counts none as held. */
static vmmipc_result_t vmmipc__export_chunk(const vmmipc__cu_t *cu, const struct vmmipc_buf *b, int i, int opened,
                                            int fresh, const char *op, int *out) {
  int fd = -1;
  CUresult rc =
      cu->cuMemExportToShareableHandle(&fd, b->chunks[i].handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
  if (rc) {
    long lim = 0;
    if (vmmipc__fd_limit_reached(&lim)) {
      char e[160];
      vmmipc__error(VMMIPC_ERR_RESOURCE,
                    "%s: chunk %d of %d: cuMemExportToShareableHandle failed (%s) at the process's file "
                    "descriptor limit (RLIMIT_NOFILE %ld); the %d fd(s) this call opened are closed again; hint: "
                    "raise the limit (ulimit -n) or free descriptors (vmmipc_desc_free)%s",
                    op, i + 1, b->num_chunks, vmmipc__cu_errstr(rc, e, sizeof e), lim, opened,
                    vmmipc__fd_limit_note_less(fresh));
      vmmipc__error_driver((int)rc);
      return VMMIPC_ERR_RESOURCE;
    }
    return vmmipc__cu_error(rc, NULL, "%s: chunk %d of %d: cuMemExportToShareableHandle(POSIX fd, size %zu)", op,
                            i + 1, b->num_chunks, b->chunks[i].size);
  }
  /* No fd of ours leaks into a child that execs. */
  int fl = fcntl(fd, F_GETFD);
  if (fl >= 0) fcntl(fd, F_SETFD, fl | FD_CLOEXEC);
  *out = fd;
  return VMMIPC_SUCCESS;
}

/* A duplicate of chunk i's cached fd. */
static vmmipc_result_t vmmipc__dup_chunk(const struct vmmipc_buf *b, int i, int opened, int fresh, const char *op,
                                         int *out) {
  int fd = fcntl(b->chunks[i].export_fd, F_DUPFD_CLOEXEC, 0);
  if (fd >= 0) {
    *out = fd;
    return VMMIPC_SUCCESS;
  }
  int e = errno;
  long lim = 0;
  if (e == EMFILE && vmmipc__fd_limit_reached(&lim))
    return vmmipc__error_errno(VMMIPC_ERR_SYSTEM, e,
                               "%s: chunk %d of %d: duplicating the cached fd hit the file descriptor limit "
                               "(RLIMIT_NOFILE %ld); the %d fd(s) this call opened are closed again; hint: "
                               "raise the limit (ulimit -n) or free descriptors (vmmipc_desc_free)%s",
                               op, i + 1, b->num_chunks, lim, opened, vmmipc__fd_limit_note_less(fresh));
  return vmmipc__error_errno(VMMIPC_ERR_SYSTEM, e, "%s: chunk %d of %d: duplicating the cached fd", op, i + 1,
                             b->num_chunks);
}

vmmipc_result_t vmmipc_export(vmmipc_buf_t b, vmmipc_desc_t *out) { return vmmipc__export_ex(b, 1, out); }

vmmipc_result_t vmmipc__export_ex(vmmipc_buf_t b, int with_fds, vmmipc_desc_t *out) {
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
  if ((r = vmmipc__desc_new(b->num_chunks, op, &d))) return r;
  d->owner = b->owner;
  d->size = b->size;
  d->granularity = b->granularity;
  d->pid = (uint32_t)getpid();
  d->nonce = vmmipc__process_nonce();
  d->serial = b->serial;
  d->generation = b->generation;
  /* Which chunks got their cached fd in this call: undone on failure. */
  unsigned char *fresh = NULL;
  int locked = 0, opened = 0, nfresh = 0;
  if (b->export_cache && b->num_chunks > 0 && !(fresh = calloc((size_t)b->num_chunks, 1))) {
    vmmipc_desc_free(d);
    return vmmipc__error(VMMIPC_ERR_NO_MEMORY, "%s: %d chunks", op, b->num_chunks);
  }
  if ((r = vmmipc__host_id(d->host))) goto fail;
  if (!with_fds) { /* the peers hold the mapping: the metadata is all they need */
    for (int i = 0; i < b->num_chunks; i++) d->sizes[i] = b->chunks[i].size;
    free(fresh);
    *out = d;
    return VMMIPC_SUCCESS;
  }
  if (b->export_cache) {
    pthread_mutex_lock(&vmmipc__export_mu);
    locked = 1;
  }
  for (int i = 0; i < b->num_chunks; i++) {
    struct vmmipc__chunk *c = &b->chunks[i];
    /* Tests fail the export of chunk k, cached or not, with this hook. */
    if (VMMIPC__INJECT("export")) {
      r = vmmipc__error(VMMIPC_ERR_CUDA, "%s: chunk %d of %d: injected failure at export", op, i + 1, b->num_chunks);
      goto fail;
    }
    if (!b->export_cache) {
      if ((r = vmmipc__export_chunk(cu, b, i, opened, 0, op, &d->fds[i]))) goto fail;
    } else {
      if (c->export_fd < 0) {
        if ((r = vmmipc__export_chunk(cu, b, i, opened, nfresh, op, &c->export_fd))) goto fail;
        vmmipc__cached_fds_add(1);
        fresh[i] = 1;
        nfresh++;
        opened++;
      }
      if ((r = vmmipc__dup_chunk(b, i, opened, nfresh, op, &d->fds[i]))) goto fail;
    }
    opened++;
    d->sizes[i] = c->size;
  }
  if (locked) pthread_mutex_unlock(&vmmipc__export_mu);
  free(fresh);
  __atomic_store_n(&b->exported, 1, __ATOMIC_RELAXED);
  *out = d;
  return VMMIPC_SUCCESS;
fail:
  vmmipc_desc_free(d); /* closes the fds handed out so far */
  for (int i = 0; fresh && i < b->num_chunks; i++)
    if (fresh[i]) {
      close(b->chunks[i].export_fd);
      b->chunks[i].export_fd = -1;
      vmmipc__cached_fds_add(-1);
    }
  if (locked) pthread_mutex_unlock(&vmmipc__export_mu);
  free(fresh);
  return r;
}
