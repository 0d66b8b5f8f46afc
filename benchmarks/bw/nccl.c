/* Anchor: NCCL ncclSend/ncclRecv, loaded with dlopen at run time (no build
 * dependency: the few types are declared here). The unique id travels by
 * MPI_Bcast; NCCL's own CUDA runtime adopts the primary context that
 * vmmipc_set_device made current, and takes the CUstream as cudaStream_t. */
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bw/bw.h"
#include "common/driver.h"

typedef int nccl_result_t; /* ncclResult_t: ncclSuccess = 0 */
typedef struct nccl_comm *nccl_comm_t;
typedef struct {
  char internal[128]; /* NCCL_UNIQUE_ID_BYTES */
} nccl_unique_id_t;
#define NCCL_UINT8 1 /* ncclUint8 */

static struct {
  void *lib;
  nccl_comm_t comm;
  nccl_result_t (*GetVersion)(int *);
  nccl_result_t (*GetUniqueId)(nccl_unique_id_t *);
  nccl_result_t (*CommInitRank)(nccl_comm_t *, int, nccl_unique_id_t, int);
  nccl_result_t (*CommDestroy)(nccl_comm_t);
  nccl_result_t (*Send)(const void *, size_t, int, int, nccl_comm_t, CUstream);
  nccl_result_t (*Recv)(void *, size_t, int, int, nccl_comm_t, CUstream);
  nccl_result_t (*GroupStart)(void);
  nccl_result_t (*GroupEnd)(void);
  const char *(*GetErrorString)(nccl_result_t);
} nc;

static int nccl_sym(const char *name, void *slot) {
  void *f = dlsym(nc.lib, name);
  memcpy(slot, &f, sizeof f);
  return f != NULL;
}

static void nccl_fail(char *why, size_t len, const char *what, nccl_result_t r) {
  snprintf(why, len, "%s failed: %s (%d)", what, nc.GetErrorString ? nc.GetErrorString(r) : "?", r);
}

void bw_nccl_init(bw_ctx_t *c) {
  char *why = c->nccl_skipped;
  size_t len = sizeof c->nccl_skipped;
  why[0] = '\0';
  const char *path = getenv("VMMIPC_BENCH_NCCL");
  if (!path || !*path) path = "libnccl.so.2";
  if (!bd.is_libcuda) {
    snprintf(why, len, "NCCL drives the GPU through its own CUDA runtime and libcuda.so.1, not the driver in use (%s)",
             bd.path);
  } else if (!(nc.lib = dlopen(path, RTLD_NOW | RTLD_LOCAL))) {
    const char *e = dlerror();
    snprintf(why, len, "dlopen(\"%s\") failed: %s", path, e ? e : "?");
  } else if (!nccl_sym("ncclGetVersion", &nc.GetVersion) || !nccl_sym("ncclGetUniqueId", &nc.GetUniqueId) ||
             !nccl_sym("ncclCommInitRank", &nc.CommInitRank) || !nccl_sym("ncclCommDestroy", &nc.CommDestroy) ||
             !nccl_sym("ncclSend", &nc.Send) || !nccl_sym("ncclRecv", &nc.Recv) ||
             !nccl_sym("ncclGroupStart", &nc.GroupStart) || !nccl_sym("ncclGroupEnd", &nc.GroupEnd) ||
             !nccl_sym("ncclGetErrorString", &nc.GetErrorString)) {
    snprintf(why, len, "%s lacks a needed symbol (ncclSend/ncclRecv/ncclCommInitRank...)", path);
  }
  if (bench_agree_skip(why, len)) return;
  int v = 0;
  if (nc.GetVersion(&v) == 0)
    snprintf(c->nccl_version, sizeof c->nccl_version, "%d.%d.%d", v / 10000, (v / 100) % 100, v % 100);
  /* Never NVLink multicast (NVLS) on the shared machines. */
  const char *nvls = getenv("NCCL_NVLS_ENABLE");
  if (nvls && strcmp(nvls, "0") != 0 && c->node->rank == 0)
    fprintf(stderr, "note: NCCL_NVLS_ENABLE=%s overridden to 0 (no NVLink multicast)\n", nvls);
  setenv("NCCL_NVLS_ENABLE", "0", 1);
  nccl_unique_id_t id;
  memset(&id, 0, sizeof id);
  nccl_result_t r = 0;
  if (c->node->rank == 0 && (r = nc.GetUniqueId(&id)) != 0) nccl_fail(why, len, "ncclGetUniqueId", r);
  if (bench_agree_skip(why, len)) return;
  MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
  if ((r = nc.CommInitRank(&nc.comm, c->node->size, id, c->node->rank)) != 0) {
    nc.comm = NULL;
    nccl_fail(why, len, "ncclCommInitRank", r);
  }
  bench_agree_skip(why, len);
}

static void nccl_check(nccl_result_t r, const char *what) {
  if (r != 0) bench_fatal("%s failed: %s (%d)", what, nc.GetErrorString(r), r);
}

/* Uni: a sends its private buffer to b's; bidir: both send and receive (into
 * the exposed buffer) in one group. */
static void nccl_issue(bw_ctx_t *c, const bw_ptrs_t *bufs, int bidir, size_t size) {
  int me = c->node->rank;
  int peer = me == c->a ? c->b : c->a;
  void *local = (void *)(uintptr_t)bufs->local, *own = (void *)(uintptr_t)bufs->own;
  nccl_check(nc.GroupStart(), "ncclGroupStart");
  if (bidir || me == c->a) nccl_check(nc.Send(local, size, NCCL_UINT8, peer, nc.comm, c->stream), "ncclSend");
  if (bidir || me == c->b)
    nccl_check(nc.Recv(bidir ? own : local, size, NCCL_UINT8, peer, nc.comm, c->stream), "ncclRecv");
  nccl_check(nc.GroupEnd(), "ncclGroupEnd");
}

void bw_nccl_point(bw_ctx_t *c, const bw_ptrs_t *bufs, int bidir, size_t size, int warmup, int iters, bw_point_t *pt) {
  int me = c->node->rank;
  int active = me == c->a || me == c->b;
  MPI_Barrier(MPI_COMM_WORLD);
  if (active) {
    for (int i = 0; i < warmup; i++) nccl_issue(c, bufs, bidir, size);
    BD_CHECK(bd.cuStreamSynchronize(c->stream));
  }
  MPI_Barrier(MPI_COMM_WORLD);
  double secs = 0;
  if (active) {
    bw_events_begin(c);
    for (int i = 0; i < iters; i++) nccl_issue(c, bufs, bidir, size);
    secs = bw_events_end(c);
  }
  bw_point_set(pt, size, warmup, iters, secs, bidir);
}

void bw_nccl_fini(bw_ctx_t *c) {
  (void)c;
  if (nc.comm) nc.CommDestroy(nc.comm);
  nc.comm = NULL;
  /* libnccl stays loaded: its runtime may still have threads about. */
}
