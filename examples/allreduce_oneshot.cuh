// The one-shot all-reduce kernel (sum of floats over every rank of an
// allgather_map window, all ranks on one node): examples/allreduce_oneshot.cu
// runs and checks it, benchmarks/sync/device_bench.cu times it.
//
// Blocks of kThreads threads, each block a region of kRegion floats (one
// float4 per thread), up to kMaxBlocks regions. Each block on its own, with
// no barrier among the blocks of a rank nor a second barrier after the sum:
//   1. copies its region of the input into its region of this rank's buffer
//      (one of two halves, alternating from call to call);
//   2. __syncthreads(), then thread q sets this block's flag in rank q's
//      buffer to the block's call number (a release: vmmipc_dev_flag_set)
//      and waits for rank q's flag here (an acquire: vmmipc_dev_flag_wait);
//   3. after a bar.red, sums its region of every rank's buffer into `out`.
// Why the halves make a second barrier needless: a block writes half h in
// call k only after its call k - 1 saw every peer's flag k - 1, which each
// peer set in a kernel after the one (call k - 2) in which it read half h.
// Every block's calls are counted in this rank's buffer, so the numbers are
// the same on every rank and a launch captured in a CUDA graph replays
// correctly. Each block only ever touches its own region.
//
// Layout of each rank's buffer (the window's), in bytes:
//   [0, data_bytes)              2 halves x kMaxBlocks regions of floats
//   flags, nranks per block      flag[b][q]: block b of rank q has written
//   counts, one per block        block b's calls on this rank (only it writes)
// The flags and counts must be zero before the first call on every rank
// (clear(): then synchronise and barrier before any rank launches).
// `in` and `out` must be 16-byte aligned (cudaMalloc's are).
#ifndef VMMIPC_EXAMPLE_ALLREDUCE_ONESHOT_CUH
#define VMMIPC_EXAMPLE_ALLREDUCE_ONESHOT_CUH

#include <stddef.h>
#include <stdint.h>

#include "vmmipc_device.cuh"

namespace oneshot {

constexpr int kThreads = 512;
constexpr int kRegion = 4 * kThreads; // floats per block
constexpr int kMaxBlocks = 8;
constexpr int kMaxFloats = kMaxBlocks * kRegion; // 64 KiB
constexpr size_t kDataBytes = 2ull * kMaxBlocks * kRegion * sizeof(float);

__host__ __device__ inline size_t sync_bytes(int nranks) { return ((size_t)kMaxBlocks * nranks + kMaxBlocks) * 8; }
// What each rank's window buffer needs; nranks <= kThreads.
__host__ __device__ inline size_t buffer_bytes(int nranks) { return kDataBytes + sync_bytes(nranks); }
// The blocks of a call on `count` floats (count <= kMaxFloats).
__host__ __device__ inline int blocks(int count) { return (count + kRegion - 1) / kRegion; }

__device__ inline float *region(void *buf, int half, int b) {
  return static_cast<float *>(buf) + (size_t)(half * kMaxBlocks + b) * kRegion;
}
__device__ inline uint64_t *flag(void *buf, int nranks, int b, int q) {
  return reinterpret_cast<uint64_t *>(static_cast<char *>(buf) + kDataBytes) + (size_t)b * nranks + q;
}
__device__ inline uint64_t *calls(void *buf, int nranks, int b) { return flag(buf, nranks, kMaxBlocks, 0) + b; }

__device__ inline float4 add4(float4 a, float4 b) { return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w); }

// Floats [i, i + 4) of src, those below len; the rest 0.
__device__ inline float4 load4(const float *src, int i, int len) {
  if (i + 4 <= len) return *reinterpret_cast<const float4 *>(src + i);
  float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
  if (i < len) v.x = src[i];
  if (i + 1 < len) v.y = src[i + 1];
  if (i + 2 < len) v.z = src[i + 2];
  return v;
}
__device__ inline void store4(float *dst, int i, int len, float4 v) {
  if (i + 4 <= len) {
    *reinterpret_cast<float4 *>(dst + i) = v;
    return;
  }
  if (i < len) dst[i] = v.x;
  if (i + 1 < len) dst[i + 1] = v.y;
  if (i + 2 < len) dst[i + 2] = v.z;
}

// out = the sum over ranks of every rank's in, count floats. Launch with
// blocks(count) blocks of kThreads threads (launch() below does). status[b]
// gets block b's wait result if it was not VMMIPC_DEV_OK (out is then not
// written there); clear it before the call.
__global__ void __launch_bounds__(kThreads)
    allreduce(vmmipc_win_device_t w, const float *in, float *out, int count, int *status) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // Launched by launch() with programmatic serialization, this grid may be
  // resident before the previous kernel of the stream has ended: wait for
  // it (and its writes) before any access, then let the next one be
  // launched. A plain launch passes the wait at once.
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
  const int b = blockIdx.x, t = threadIdx.x, n = w.nranks, me = w.rank;
  void *mine = vmmipc_dev_ptr(&w, me);
  uint64_t *my_calls = calls(mine, n, b);
  const uint64_t k = *my_calls + 1; // this block's call: the same number on every rank
  const int half = (int)(k & 1), base = b * kRegion, i = 4 * t;
  const int len = count - base < kRegion ? count - base : kRegion;
  void *peer = t < n && t != me ? vmmipc_dev_ptr(&w, t) : nullptr; // the rank this thread tells and waits for
  void *first8[8]; // the first eight ranks' buffers, looked up before the waits
#pragma unroll
  for (int j = 0; j < 8; j++) first8[j] = vmmipc_dev_ptr(&w, j);
  const float4 v = load4(in + base, i, len);
  store4(region(mine, half, b), i, len, v);
  __syncthreads(); // the block's copy precedes every release
  if (t == 0) *my_calls = k; // every thread read it before the __syncthreads()
  int r = VMMIPC_DEV_OK;
  if (peer) {
    vmmipc_dev_flag_set(&w, flag(peer, n, b, me), k);
    r = vmmipc_dev_flag_wait(&w, flag(mine, n, b, t), k, 0);
  }
  if (__syncthreads_or(r != VMMIPC_DEV_OK)) { // every acquire precedes the sum's reads
    if (r != VMMIPC_DEV_OK) status[b] = r;
    return;
  }
  if (i >= len) return;
  // In rank order on every rank, so that every rank gets the same bits;
  // this rank's own part comes from registers; eight loads in flight.
  float4 s = make_float4(0.f, 0.f, 0.f, 0.f);
  for (int q0 = 0; q0 < n; q0 += 8) {
    float4 x[8];
#pragma unroll
    for (int j = 0; j < 8; j++) {
      const int q = q0 + j;
      void *src = q0 ? vmmipc_dev_ptr(&w, q) : first8[j];
      x[j] = q == me ? v : q < n ? load4(region(src, half, b), i, len) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
#pragma unroll
    for (int j = 0; j < 8; j++)
      if (q0 + j < n) s = add4(s, x[j]);
  }
  store4(out + base, i, len, s);
}

// Launches allreduce on stream. With pdl (devices of compute capability
// 9.0 and up), the launch may overlap the previous kernel's last part:
// back to back on several ranks of one GPU, the launch's own latency is
// then no longer paid after each call (benchmarks/sync/device_bench.cu
// measures both). The grid still waits for that kernel before touching
// memory, so the stream's order holds as for a plain launch.
inline cudaError_t launch(cudaStream_t stream, bool pdl, const vmmipc_win_device_t &w, const float *in, float *out,
                          int count, int *status) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3((unsigned)blocks(count));
  cfg.blockDim = dim3((unsigned)kThreads);
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl ? 1 : 0;
  return cudaLaunchKernelEx(&cfg, allreduce, w, in, out, count, status);
}

// Whether launch(..., pdl = true) is safe here: the device takes PDL and
// the kernel it runs was compiled for compute_90 or later, so that it has
// the griddepcontrol.wait (a build for older targets only, JIT-compiled on
// a newer device, has not).
inline bool pdl_supported() {
  int dev = 0, major = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return false;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) return false;
  cudaFuncAttributes a = {};
  if (cudaFuncGetAttributes(&a, allreduce) != cudaSuccess) return false;
  return major >= 9 && a.ptxVersion >= 90;
}

} // namespace oneshot

#endif
