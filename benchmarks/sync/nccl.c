/* Anchor: NCCL ncclSend/ncclRecv, loaded with dlopen at run time (no build
 * dependency; the few types NCCL's ABI needs are declared here). NCCL's
 * runtime adopts the primary context made current by vmmipc_set_device and
 * takes the CUstream as its cudaStream_t. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/driver.h"
#include "sync/sync.h"

typedef int sy_ncclResult; /* ncclResult_t: ncclSuccess = 0 */
typedef struct sy_ncclComm *sy_ncclComm_t;
typedef struct {
  char internal[128]; /* NCCL_UNIQUE_ID_BYTES */
} sy_ncclUniqueId;
#define SY_NCCL_UINT8 1 /* ncclUint8 */

static struct {
  void *lib;
  sy_ncclComm_t comm;
  sy_ncclResult (*GetVersion)(int *);
  sy_ncclResult (*GetUniqueId)(sy_ncclUniqueId *);
  sy_ncclResult (*CommInitRank)(sy_ncclComm_t *, int, sy_ncclUniqueId, int);
  sy_ncclResult (*CommDestroy)(sy_ncclComm_t);
  sy_ncclResult (*Send)(const void *, size_t, int, int, sy_ncclComm_t, CUstream);
  sy_ncclResult (*Recv)(void *, size_t, int, int, sy_ncclComm_t, CUstream);
  const char *(*GetErrorString)(sy_ncclResult);
} nx;

static int sy_sym(const char *name, void *slot) {
  void *f = dlsym(nx.lib, name);
  memcpy(slot, &f, sizeof f);
  return f != NULL;
}

void sy_nccl_init(sy_ctx_t *c) {
  char *why = c->nccl_skipped;
  size_t len = sizeof c->nccl_skipped;
  why[0] = '\0';
  const char *path = getenv("VMMIPC_BENCH_NCCL");
  if (!path || !*path) path = "libnccl.so.2";
  const char *shared_ok = getenv("VMMIPC_BENCH_NCCL_SHARED");
  if (!bd.is_libcuda) {
    snprintf(why, len, "NCCL drives the GPU through its own CUDA runtime and libcuda.so.1, not the driver in use (%s)",
             bd.path);
  } else if (c->shared_gpu && !(shared_ok && strcmp(shared_ok, "1") == 0)) {
    /* NCCL rejects a communicator with two ranks on one device. */
    snprintf(why, len,
             "ranks share a GPU (%d ranks on %d GPU%s): NCCL refuses two ranks on one device (ncclInvalidUsage, "
             "'Duplicate GPU detected'); VMMIPC_BENCH_NCCL_SHARED=1 tries anyway",
             c->node->size, c->gpus, c->gpus == 1 ? "" : "s");
  } else if (!(nx.lib = dlopen(path, RTLD_NOW | RTLD_LOCAL))) {
    const char *e = dlerror();
    snprintf(why, len, "dlopen(\"%s\") failed: %s", path, e ? e : "?");
  } else if (!sy_sym("ncclGetVersion", &nx.GetVersion) || !sy_sym("ncclGetUniqueId", &nx.GetUniqueId) ||
             !sy_sym("ncclCommInitRank", &nx.CommInitRank) || !sy_sym("ncclCommDestroy", &nx.CommDestroy) ||
             !sy_sym("ncclSend", &nx.Send) || !sy_sym("ncclRecv", &nx.Recv) ||
             !sy_sym("ncclGetErrorString", &nx.GetErrorString)) {
    snprintf(why, len, "%s lacks a needed symbol (ncclSend/ncclRecv/ncclCommInitRank...)", path);
  }
  if (bench_agree_skip(why, len)) return;
  int v = 0;
  if (nx.GetVersion(&v) == 0)
    snprintf(c->nccl_version, sizeof c->nccl_version, "%d.%d.%d", v / 10000, (v / 100) % 100, v % 100);
  /* Never NVLink multicast (NVLS) on the shared machines. */
  setenv("NCCL_NVLS_ENABLE", "0", 1);
  sy_ncclUniqueId id;
  memset(&id, 0, sizeof id);
  sy_ncclResult r = 0;
  if (c->node->rank == 0 && (r = nx.GetUniqueId(&id)) != 0)
    snprintf(why, len, "ncclGetUniqueId failed: %s (%d)", nx.GetErrorString(r), r);
  if (bench_agree_skip(why, len)) return;
  MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
  if ((r = nx.CommInitRank(&nx.comm, c->node->size, id, c->node->rank)) != 0) {
    nx.comm = NULL;
    snprintf(why, len, "ncclCommInitRank failed: %s (%d)", nx.GetErrorString(r), r);
  }
  if (bench_agree_skip(why, len) && nx.comm) {
    nx.CommDestroy(nx.comm);
    nx.comm = NULL;
  }
}

void sy_nccl_send(sy_ctx_t *c, CUdeviceptr buf, size_t bytes, int peer) {
  sy_ncclResult r = nx.Send((const void *)(uintptr_t)buf, bytes, SY_NCCL_UINT8, peer, nx.comm, c->stream);
  if (r) bench_fatal("ncclSend(%zu bytes to rank %d) failed: %s (%d)", bytes, peer, nx.GetErrorString(r), r);
}

void sy_nccl_recv(sy_ctx_t *c, CUdeviceptr buf, size_t bytes, int peer) {
  sy_ncclResult r = nx.Recv((void *)(uintptr_t)buf, bytes, SY_NCCL_UINT8, peer, nx.comm, c->stream);
  if (r) bench_fatal("ncclRecv(%zu bytes from rank %d) failed: %s (%d)", bytes, peer, nx.GetErrorString(r), r);
}

void sy_nccl_fini(void) {
  if (nx.comm) nx.CommDestroy(nx.comm);
  nx.comm = NULL;
  /* libnccl stays loaded: its runtime may still have threads about. */
}
