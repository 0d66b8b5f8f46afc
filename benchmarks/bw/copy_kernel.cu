// The SM copy kernel of vmmipc_bw. Built by nvcc into a fatbin that is
// embedded in the program and loaded with cuModuleLoadData, so neither the
// CUDA runtime nor libcuda is needed at link time.
#include <stdint.h>

#define VMMIPC_BENCH_UNROLL 4

// Copies n bytes. When both pointers are 16-byte aligned each thread keeps
// VMMIPC_BENCH_UNROLL 16-byte loads in flight before storing them (many
// outstanding loads are what a remote read over NVLink needs); the tail and
// unaligned copies go byte by byte.
extern "C" __global__ void __launch_bounds__(512)
    vmmipc_bench_copy(unsigned char *__restrict__ dst, const unsigned char *__restrict__ src, unsigned long long n) {
  const unsigned long long tid = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
  const unsigned long long nthreads = (unsigned long long)gridDim.x * blockDim.x;
  unsigned long long done = 0;
  if ((((uintptr_t)dst | (uintptr_t)src) & 15) == 0) {
    const unsigned long long nv = n / 16;
    const uint4 *__restrict__ s = reinterpret_cast<const uint4 *>(src);
    uint4 *__restrict__ d = reinterpret_cast<uint4 *>(dst);
    unsigned long long i = tid;
    for (; i + (VMMIPC_BENCH_UNROLL - 1) * nthreads < nv; i += VMMIPC_BENCH_UNROLL * nthreads) {
      uint4 v[VMMIPC_BENCH_UNROLL];
#pragma unroll
      for (int k = 0; k < VMMIPC_BENCH_UNROLL; k++) v[k] = s[i + k * nthreads];
#pragma unroll
      for (int k = 0; k < VMMIPC_BENCH_UNROLL; k++) d[i + k * nthreads] = v[k];
    }
    for (; i < nv; i += nthreads) d[i] = s[i];
    done = nv * 16;
  }
  for (unsigned long long j = done + tid; j < n; j += nthreads) dst[j] = src[j];
}
