/* cuGetProcAddress: the only way into the stand-in (everything else is
 * hidden), looked up by BASE name as the real driver does ("cuMemcpyHtoD",
 * not "cuMemcpyHtoD_v2"), and by cudaVersion where the ABI behind a name
 * changed (cuCtxGetDevice, cuCtxSynchronize in CUDA 13.0). cuda.h maps many
 * names to versioned symbols; the table's strings are taken before that
 * macro expansion. */
#include <stdlib.h>
#include <string.h>

#include "state.h"

/* cuda.h #defines cuGetProcAddress to cuGetProcAddress_v2; the stand-in
 * exports both names, each with the real driver's signature: the
 * unversioned symbol is the CUDA 11.3 function without symbolStatus. The
 * variant built with STI_GETPROC_V1_ONLY (libvmmipc_standin_v1.so) exports
 * only that one, as a driver older than CUDA 12.0 does, so that tests can
 * reach the loader's fallback. */
#undef cuGetProcAddress
#ifdef STI_GETPROC_V1_ONLY
#define STI_EXPORT_V2
#else
#define STI_EXPORT_V2 STI_EXPORT
#endif

CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                             CUdriverProcAddressQueryResult *symbolStatus) STI_EXPORT_V2;
CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags) STI_EXPORT;

typedef void (*sti_fn)(void);
_Static_assert(sizeof(sti_fn) == sizeof(void *), "function and data pointers differ in size");
/* One ABI variant of a base name, served to requests for cudaVersion >= since. */
typedef struct {
  const char *name;
  int since;
  sti_fn fn;
} sti_entry;

/* #name is not macro-expanded; the function reference is, to the versioned
 * symbol that cuda.h's prototype names. `since` is the CUDA version that
 * introduced the ABI served here (older variants are not emulated). */
#define E(name, since) {#name, since, (sti_fn)name}
static const sti_entry sti_entries[] = {
    /* library: VMMIPC__CU_FUNCS in src/driver/cu.h */
    E(cuInit, 2000), E(cuDriverGetVersion, 2020), E(cuGetErrorName, 6000), E(cuGetErrorString, 6000),
    E(cuDeviceGetCount, 2000), E(cuDeviceGet, 2000), E(cuDeviceGetUuid, 9020), E(cuDeviceGetAttribute, 2000),
    E(cuDeviceTotalMem, 3020),
    E(cuDevicePrimaryCtxRetain, 7000), E(cuCtxSetCurrent, 4000), E(cuCtxGetCurrent, 4000),
    E(cuMemGetAllocationGranularity, 10020), E(cuMemCreate, 10020), E(cuMemRelease, 10020),
    E(cuMemAddressReserve, 10020), E(cuMemAddressFree, 10020), E(cuMemMap, 10020), E(cuMemUnmap, 10020),
    E(cuMemSetAccess, 10020), E(cuMemGetAccess, 10020), E(cuMemExportToShareableHandle, 10020),
    E(cuMemImportFromShareableHandle, 10020), E(cuMemGetAllocationPropertiesFromHandle, 10020),
    E(cuMemRetainAllocationHandle, 11000), E(cuMemGetAddressRange, 3020), E(cuPointerGetAttribute, 4000),
    /* CUDA 13.0 gave these a context argument under the same base name. */
    E(cuCtxGetDevice, 2000), {"cuCtxGetDevice", 13000, (sti_fn)cuCtxGetDevice_v2},
    E(cuCtxSynchronize, 2000), {"cuCtxSynchronize", 13000, (sti_fn)cuCtxSynchronize_v2},
    /* tests and benchmarks */
    E(cuMemcpyHtoD, 3020), E(cuMemcpyDtoH, 3020), E(cuMemcpyDtoD, 3020), E(cuMemsetD8, 3020),
    E(cuDevicePrimaryCtxRelease, 7000), E(cuStreamCreate, 2000), E(cuStreamDestroy, 4000),
    E(cuStreamSynchronize, 2000), E(cuMemcpyAsync, 4000), E(cuMemcpyHtoDAsync, 3020), E(cuMemcpyDtoHAsync, 3020),
    E(cuMemcpyDtoDAsync, 3020), E(cuEventCreate, 2000), E(cuEventDestroy, 4000), E(cuEventRecord, 2000),
    E(cuEventSynchronize, 2000), E(cuEventElapsedTime, 2000), E(cuMemAlloc, 3020), E(cuMemFree, 3020),
    E(cuIpcGetMemHandle, 4010), E(cuIpcOpenMemHandle, 4010), E(cuIpcCloseMemHandle, 4010),
    E(cuDeviceGetName, 2000), E(cuDeviceCanAccessPeer, 4000), E(cuGetProcAddress, 11030),
    E(cuStreamQuery, 2000), E(cuStreamWaitEvent, 3020), E(cuEventQuery, 2000), E(cuMemsetD8Async, 3020),
    {"cuGetProcAddress", 12000, (sti_fn)cuGetProcAddress_v2},
    /* stream memory operations (the window synchronisation) */
    E(cuStreamWriteValue64, 12000), E(cuStreamWaitValue64, 12000), E(cuStreamBatchMemOp, 12000),
    /* stream capture (capture.c) */
    E(cuStreamIsCapturing, 10000), E(cuThreadExchangeStreamCaptureMode, 10010),
    /* the host-sync kernels and the device API's window arrays */
    E(cuModuleLoadData, 2000), E(cuModuleUnload, 2000), E(cuModuleGetFunction, 2000), E(cuLaunchKernel, 4000),
    E(cuLaunchKernelEx, 11060),
    E(cuMemHostAlloc, 2020), E(cuMemFreeHost, 2000), E(cuMemHostGetDevicePointer, 3020),
};
#undef E

/* Works before cuInit, like the real one: the newest variant of `symbol`
 * that is not newer than cudaVersion. */
CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                             CUdriverProcAddressQueryResult *symbolStatus) {
  if (!symbol || !pfn) return CUDA_ERROR_INVALID_VALUE;
  /* VMMIPC_STANDIN_CAPS=stub: every call fails as in the CUDA toolkit's
   * stub libcuda (lib64/stubs), which programs link against and must never
   * load. */
  const char *caps = getenv("VMMIPC_STANDIN_CAPS");
  if (caps && strstr(caps, "stub")) {
    *pfn = NULL;
    return CUDA_ERROR_STUB_LIBRARY;
  }
  /* VMMIPC_STANDIN_CAPS=old11: a CUDA 11.8 driver, which knows no symbol
   * that came later (the loader's "driver older than the headers"). */
  const int driver_version = caps && strstr(caps, "old11") ? 11080 : CUDA_VERSION;
  const cuuint64_t known = CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  if (flags & ~known) return CUDA_ERROR_INVALID_VALUE;
  *pfn = NULL;
  const sti_entry *best = NULL;
  int named = 0;
  for (size_t i = 0; i < sizeof sti_entries / sizeof sti_entries[0]; i++) {
    const sti_entry *e = &sti_entries[i];
    if (strcmp(e->name, symbol) != 0 || e->since > driver_version) continue;
    named = 1;
    if (e->since <= cudaVersion && (!best || e->since > best->since)) best = e;
  }
  if (!best) {
    if (symbolStatus)
      *symbolStatus = named ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return CUDA_ERROR_NOT_FOUND;
  }
  memcpy(pfn, &best->fn, sizeof(void *));
  if (symbolStatus) *symbolStatus = CU_GET_PROC_ADDRESS_SUCCESS;
  return CUDA_SUCCESS;
}

/* The CUDA 11.3 signature: no symbolStatus; a name that is not found (or
 * too new for cudaVersion) is CUDA_ERROR_NOT_FOUND. */
CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags) {
  return cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, NULL);
}
