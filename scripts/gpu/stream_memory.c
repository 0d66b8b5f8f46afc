/* Does a stream's first work make the GPU's memory in use grow? A probe
 * for docs/dev/chaos.md ("Without MPS on the H200"): the chaos campaign
 * saw 10 MiB appear over an aborted allgather_map at 4 ranks without MPS,
 * given back when the comm went, and the abort's failure-value writes are
 * the first work on the signal pool's private stream. This program reads
 * cuMemGetInfo (the whole GPU) around each step of that pattern in one
 * process: a 2 MiB allocation, a non-blocking stream, its first and second
 * pageable copies, a second stream's first copy, the streams' destruction.
 * Run it alone on the GPU (another process's allocations would read as
 * its own), once under MPS (scripts/mps.sh) and once without:
 *   nvcc -o /tmp/stream_memory scripts/gpu/stream_memory.c -lcuda && /tmp/stream_memory
 * Prints one line per step with the change in KiB; exits 1 on a driver
 * error. */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>

static long long used(void) {
  size_t free_b = 0, total = 0;
  if (cuMemGetInfo(&free_b, &total) != CUDA_SUCCESS) return -1;
  return (long long)(total - free_b);
}

static int check(CUresult rc, const char *what) {
  if (rc == CUDA_SUCCESS) return 0;
  const char *name = NULL;
  cuGetErrorName(rc, &name);
  fprintf(stderr, "stream_memory: %s: %s\n", what, name ? name : "unknown error");
  return 1;
}

static long long last;
static void step(const char *what) {
  long long now = used();
  printf("%-44s %+8lld KiB (in use %lld MiB)\n", what, (now - last) / 1024, now >> 20);
  last = now;
}

int main(void) {
  CUdevice dev;
  CUcontext ctx;
  CUdeviceptr dst = 0;
  CUstream s1 = NULL, s2 = NULL;
  static unsigned char src[4096];
  if (check(cuInit(0), "cuInit") || check(cuDeviceGet(&dev, 0), "cuDeviceGet") ||
      check(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain") ||
      check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent"))
    return 1;
  last = used();
  printf("%-44s (in use %lld MiB)\n", "context made", last >> 20);
  if (check(cuMemAlloc(&dst, 2u << 20), "cuMemAlloc")) return 1;
  step("cuMemAlloc 2 MiB");
  if (check(cuMemcpyHtoD(dst, src, sizeof src), "cuMemcpyHtoD")) return 1;
  step("first synchronous copy (legacy stream)");
  if (check(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING), "cuStreamCreate")) return 1;
  step("non-blocking stream made");
  if (check(cuMemcpyHtoDAsync(dst, src, sizeof src, s1), "cuMemcpyHtoDAsync") ||
      check(cuStreamSynchronize(s1), "cuStreamSynchronize"))
    return 1;
  step("its first copy");
  if (check(cuMemcpyHtoDAsync(dst, src, sizeof src, s1), "cuMemcpyHtoDAsync") ||
      check(cuStreamSynchronize(s1), "cuStreamSynchronize"))
    return 1;
  step("its second copy");
  if (check(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING), "cuStreamCreate") ||
      check(cuMemcpyHtoDAsync(dst, src, sizeof src, s2), "cuMemcpyHtoDAsync") ||
      check(cuStreamSynchronize(s2), "cuStreamSynchronize"))
    return 1;
  step("a second stream and its first copy");
  if (check(cuStreamDestroy(s2), "cuStreamDestroy") || check(cuStreamDestroy(s1), "cuStreamDestroy")) return 1;
  step("both streams destroyed");
  if (check(cuMemFree(dst), "cuMemFree")) return 1;
  step("cuMemFree");
  cuDevicePrimaryCtxRelease(dev);
  return 0;
}
