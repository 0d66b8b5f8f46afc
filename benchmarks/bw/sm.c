/* The SM-kernel mode: the embedded fatbin, loaded and launched through the
 * driver (cuModuleLoadData + cuLaunchKernel). */
#include <stdio.h>

#include "bw/bw.h"
#include "common/driver.h"

#define BW_SM_THREADS 512
#define BW_SM_BYTES_PER_THREAD 64 /* 4 x 16 bytes per loop trip */
#define BW_SM_BLOCKS_PER_SM 4

#ifdef VMMIPC_BENCH_HAVE_SM
extern const unsigned char vmmipc_bench_copy_fatbin[]; /* generated from copy_kernel.cu */
#endif

static CUmodule bw_sm_module;
static CUfunction bw_sm_fn;
static unsigned bw_sm_max_blocks;

int bw_sm_init(const bench_node_t *n, char *why, size_t len) {
#ifndef VMMIPC_BENCH_HAVE_SM
  (void)n;
  snprintf(why, len, "built without nvcc");
  return -1;
#else
  char e[160];
  if (!bd.cuModuleLoadData || !bd.cuModuleGetFunction || !bd.cuLaunchKernel || !bd.cuModuleUnload) {
    snprintf(why, len, "the driver (%s) has no cuModuleLoadData/cuLaunchKernel", bd.path);
    return -1;
  }
  CUresult rc = bd.cuModuleLoadData(&bw_sm_module, vmmipc_bench_copy_fatbin);
  if (rc != CUDA_SUCCESS) {
    snprintf(why, len, "cuModuleLoadData(copy kernel): %s (rebuild with VMMIPC_BENCH_CUDA_ARCHS for this GPU)",
             bd_errstr(rc, e, sizeof e));
    bw_sm_module = NULL;
    return -1;
  }
  rc = bd.cuModuleGetFunction(&bw_sm_fn, bw_sm_module, "vmmipc_bench_copy");
  if (rc != CUDA_SUCCESS) {
    snprintf(why, len, "cuModuleGetFunction(vmmipc_bench_copy): %s", bd_errstr(rc, e, sizeof e));
    bd.cuModuleUnload(bw_sm_module);
    bw_sm_module = NULL;
    return -1;
  }
  bw_sm_max_blocks = (unsigned)(n->sm_count > 0 ? n->sm_count : 132) * BW_SM_BLOCKS_PER_SM;
  return 0;
#endif
}

CUresult bw_sm_copy(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream stream) {
  if (!bw_sm_fn) return CUDA_ERROR_NOT_INITIALIZED;
  size_t per_block = (size_t)BW_SM_THREADS * BW_SM_BYTES_PER_THREAD;
  size_t want = (n + per_block - 1) / per_block;
  unsigned blocks = want < bw_sm_max_blocks ? (unsigned)want : bw_sm_max_blocks;
  if (blocks == 0) blocks = 1;
  unsigned long long bytes = n;
  void *args[] = {&dst, &src, &bytes};
  return bd.cuLaunchKernel(bw_sm_fn, blocks, 1, 1, BW_SM_THREADS, 1, 1, 0, stream, args, NULL);
}

void bw_sm_fini(void) {
  if (bw_sm_module) bd.cuModuleUnload(bw_sm_module);
  bw_sm_module = NULL;
  bw_sm_fn = NULL;
}
