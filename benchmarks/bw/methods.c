/* The three ways to reach a peer's buffer: the library (allgather_map), raw
 * driver VMM calls, and legacy cuIpc handles. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bw/bw.h"
#include "common/driver.h"
#include "common/fdmesh.h"

static CUdeviceptr bw_dptr(void *p) { return (CUdeviceptr)(uintptr_t)p; }

static void bw_ptrs_begin(bw_ctx_t *c, bw_ptrs_t *p, const char *method) {
  memset(p, 0, sizeof *p);
  p->method = method;
  p->remote = calloc((size_t)c->node->size, sizeof *p->remote);
  if (!p->remote) bench_fatal("out of host memory");
}

void bw_ptrs_vmmipc(bw_ctx_t *c, bw_ptrs_t *p) {
  bw_ptrs_begin(c, p, "vmmipc");
  void *ptr;
  size_t sz;
  VCHECK(vmmipc_alloc(c->bufsize, &p->lib_local));
  VCHECK(vmmipc_alloc(c->bufsize, &p->lib_own));
  VCHECK(vmmipc_buf_ptr(p->lib_local, &ptr, &sz));
  p->local = bw_dptr(ptr);
  VCHECK(vmmipc_buf_ptr(p->lib_own, &ptr, &sz));
  p->own = bw_dptr(ptr);
  vmmipc_access_t access = VMMIPC_ACCESS_DEFAULT;
  VCHECK(vmmipc_allgather_map(c->comm, p->lib_own, &access, &p->win));
  for (int r = 0; r < c->node->size; r++) {
    if (r == c->node->rank) continue;
    VCHECK(vmmipc_win_query(p->win, r, &ptr, &sz));
    if (!ptr || sz < c->bufsize)
      bench_fatal("vmmipc_win_query(rank %d) gave %p with %zu bytes; expected %zu bytes", r, ptr, sz, c->bufsize);
    p->remote[r] = bw_dptr(ptr);
  }
}

void bw_ptrs_raw(bw_ctx_t *c, bw_ptrs_t *p) {
  bw_ptrs_begin(c, p, "raw_vmm");
  bench_node_t *n = c->node;
  char e[160];
  size_t g = 0, size = 0;
  int fd = -1;
  CUresult rc = bench_raw_granularity(n->device, &g);
  if (rc == CUDA_SUCCESS) {
    size = (c->bufsize + g - 1) / g * g;
    rc = bench_raw_alloc(n->device, size, 1, &p->raw_local);
  }
  if (rc == CUDA_SUCCESS) rc = bench_raw_alloc(n->device, size, 1, &p->raw_own);
  if (rc == CUDA_SUCCESS) rc = bench_raw_export(&p->raw_own, &fd);
  if (rc != CUDA_SUCCESS)
    snprintf(p->skipped, sizeof p->skipped, "raw VMM allocation or export: %s", bd_errstr(rc, e, sizeof e));
  if (bench_agree_skip(p->skipped, sizeof p->skipped)) {
    if (fd >= 0) close(fd);
    return;
  }
  p->local = p->raw_local.base;
  p->own = p->raw_own.base;
  p->raw_peers = calloc((size_t)n->size, sizeof *p->raw_peers);
  if (!p->raw_peers) bench_fatal("out of host memory");
  bench_fdmesh_t mesh;
  if (bench_fdmesh_create(MPI_COMM_WORLD, &mesh, p->skipped, sizeof p->skipped) != 0) {
    bench_agree_skip(p->skipped, sizeof p->skipped);
    close(fd);
    return;
  }
  uint64_t mysize = size;
  for (int r = 0; r < n->size; r++)
    if (r != n->rank && bench_fdmesh_send(&mesh, r, &mysize, sizeof mysize, &fd, 1) != 0)
      bench_fatal("sending an fd to rank %d: %s", r, strerror(errno));
  close(fd);
  for (int r = 0; r < n->size; r++) {
    if (r == n->rank) continue;
    uint64_t theirs;
    int pfd;
    if (bench_fdmesh_recv(&mesh, r, &theirs, sizeof theirs, &pfd, 1) != 0)
      bench_fatal("receiving an fd from rank %d: %s", r, strerror(errno));
    rc = bench_raw_import(n->device, &pfd, 1, (size_t)theirs, &p->raw_peers[r], NULL);
    if (rc != CUDA_SUCCESS && !p->skipped[0])
      snprintf(p->skipped, sizeof p->skipped, "importing rank %d's buffer: %s", r, bd_errstr(rc, e, sizeof e));
    p->remote[r] = p->raw_peers[r].base;
  }
  bench_fdmesh_destroy(&mesh);
  bench_agree_skip(p->skipped, sizeof p->skipped);
}

void bw_ptrs_legacy(bw_ctx_t *c, bw_ptrs_t *p) {
  bw_ptrs_begin(c, p, "legacy_ipc");
  bench_node_t *n = c->node;
  char e[160];
  CUipcMemHandle h;
  memset(&h, 0, sizeof h);
  if (!bd.cuIpcGetMemHandle || !bd.cuIpcOpenMemHandle || !bd.cuIpcCloseMemHandle) {
    snprintf(p->skipped, sizeof p->skipped, "the driver (%s) has no cuIpcGetMemHandle/cuIpcOpenMemHandle", bd.path);
  } else {
    CUresult rc = bd.cuMemAlloc(&p->local, c->bufsize);
    if (rc == CUDA_SUCCESS) rc = bd.cuMemAlloc(&p->own, c->bufsize);
    if (rc != CUDA_SUCCESS)
      snprintf(p->skipped, sizeof p->skipped, "cuMemAlloc(%zu): %s", c->bufsize, bd_errstr(rc, e, sizeof e));
    else if ((rc = bd.cuIpcGetMemHandle(&h, p->own)) != CUDA_SUCCESS)
      snprintf(p->skipped, sizeof p->skipped, "cuIpcGetMemHandle: %s", bd_errstr(rc, e, sizeof e));
  }
  if (bench_agree_skip(p->skipped, sizeof p->skipped)) return;
  CUipcMemHandle *all = calloc((size_t)n->size, sizeof *all);
  if (!all) bench_fatal("out of host memory");
  MPI_Allgather(&h, (int)sizeof h, MPI_BYTE, all, (int)sizeof h, MPI_BYTE, MPI_COMM_WORLD);
  for (int r = 0; r < n->size; r++) {
    if (r == n->rank) continue;
    CUresult rc = bd.cuIpcOpenMemHandle(&p->remote[r], all[r], CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
    if (rc != CUDA_SUCCESS) {
      p->remote[r] = 0;
      if (!p->skipped[0])
        snprintf(p->skipped, sizeof p->skipped, "cuIpcOpenMemHandle(rank %d): %s", r, bd_errstr(rc, e, sizeof e));
    } else {
      p->ipc_opened = 1;
    }
  }
  free(all);
  bench_agree_skip(p->skipped, sizeof p->skipped);
}

void bw_ptrs_free(bw_ctx_t *c, bw_ptrs_t *p) {
  bench_node_t *n = c->node;
  if (!p->method) return;
  if (p->win) VCHECK(vmmipc_win_free(p->win));
  if (p->lib_local) VCHECK(vmmipc_buf_free(p->lib_local));
  if (p->lib_own) VCHECK(vmmipc_buf_free(p->lib_own));
  if (strcmp(p->method, "raw_vmm") == 0) {
    for (int r = 0; p->raw_peers && r < n->size; r++) bench_raw_free(&p->raw_peers[r]);
    free(p->raw_peers);
    /* Peers' mappings hold their own references, but keep it simple. */
    MPI_Barrier(MPI_COMM_WORLD);
    bench_raw_free(&p->raw_own);
    bench_raw_free(&p->raw_local);
  } else if (strcmp(p->method, "legacy_ipc") == 0) {
    for (int r = 0; r < n->size; r++)
      if (p->remote[r]) bd.cuIpcCloseMemHandle(p->remote[r]);
    /* Every importer closes before the owner frees. */
    MPI_Barrier(MPI_COMM_WORLD);
    if (p->own) bd.cuMemFree(p->own);
    if (p->local) bd.cuMemFree(p->local);
  }
  free(p->remote);
  memset(p, 0, sizeof *p);
}
