/* cuGetProcAddress: the only way into the stand-in (everything else is
 * hidden), looked up by BASE name as the real driver does ("cuMemcpyHtoD",
 * not "cuMemcpyHtoD_v2"). cuda.h maps many names to versioned symbols; the
 * table's strings are taken before that macro expansion. */
#include <string.h>

#include "state.h"

/* cuda.h #defines cuGetProcAddress to cuGetProcAddress_v2; the stand-in
 * exports both names. */
#undef cuGetProcAddress

CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                             CUdriverProcAddressQueryResult *symbolStatus) STI_EXPORT;
CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                          CUdriverProcAddressQueryResult *symbolStatus) STI_EXPORT;

typedef void (*sti_fn)(void);
_Static_assert(sizeof(sti_fn) == sizeof(void *), "function and data pointers differ in size");
typedef struct {
  const char *name;
  sti_fn fn;
} sti_entry;

/* #name is not macro-expanded; the function reference is, to the versioned
 * symbol that cuda.h's prototype names. */
#define E(name) {#name, (sti_fn)name}
static const sti_entry sti_entries[] = {
    /* library: VMMIPC__CU_FUNCS in src/driver/cu.h */
    E(cuInit), E(cuDriverGetVersion), E(cuGetErrorName), E(cuGetErrorString), E(cuDeviceGetCount), E(cuDeviceGet),
    E(cuDeviceGetUuid), E(cuDeviceGetAttribute), E(cuDevicePrimaryCtxRetain), E(cuCtxSetCurrent),
    E(cuCtxGetCurrent), E(cuCtxGetDevice), E(cuMemGetAllocationGranularity), E(cuMemCreate), E(cuMemRelease),
    E(cuMemAddressReserve), E(cuMemAddressFree), E(cuMemMap), E(cuMemUnmap), E(cuMemSetAccess), E(cuMemGetAccess),
    E(cuMemExportToShareableHandle), E(cuMemImportFromShareableHandle), E(cuMemGetAllocationPropertiesFromHandle),
    /* tests and benchmarks */
    E(cuMemcpyHtoD), E(cuMemcpyDtoH), E(cuMemcpyDtoD), E(cuMemsetD8), E(cuCtxSynchronize),
    E(cuDevicePrimaryCtxRelease), E(cuStreamCreate), E(cuStreamDestroy), E(cuStreamSynchronize), E(cuMemcpyAsync),
    E(cuMemcpyHtoDAsync), E(cuMemcpyDtoHAsync), E(cuMemcpyDtoDAsync), E(cuEventCreate), E(cuEventDestroy),
    E(cuEventRecord), E(cuEventSynchronize), E(cuEventElapsedTime), E(cuMemAlloc), E(cuMemFree),
    E(cuIpcGetMemHandle), E(cuIpcOpenMemHandle), E(cuIpcCloseMemHandle), E(cuDeviceGetName),
    E(cuDeviceCanAccessPeer), E(cuGetProcAddress),
};
#undef E

/* Works before cuInit, like the real one. Only the CUDA 12/13 variants of
 * the entry points exist here, so older cudaVersion requests are refused. */
CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                             CUdriverProcAddressQueryResult *symbolStatus) {
  if (!symbol || !pfn) return CUDA_ERROR_INVALID_VALUE;
  const cuuint64_t known = CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  if (flags & ~known) return CUDA_ERROR_INVALID_VALUE;
  *pfn = NULL;
  for (size_t i = 0; i < sizeof sti_entries / sizeof sti_entries[0]; i++) {
    if (strcmp(sti_entries[i].name, symbol) != 0) continue;
    if (cudaVersion < 12000) {
      if (symbolStatus) *symbolStatus = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
      return CUDA_ERROR_NOT_FOUND;
    }
    memcpy(pfn, &sti_entries[i].fn, sizeof(void *));
    if (symbolStatus) *symbolStatus = CU_GET_PROC_ADDRESS_SUCCESS;
    return CUDA_SUCCESS;
  }
  if (symbolStatus) *symbolStatus = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  return CUDA_ERROR_NOT_FOUND;
}

/* The loader falls back to this name with the same five arguments. (The
 * real driver's unversioned symbol has no symbolStatus parameter.) */
CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                          CUdriverProcAddressQueryResult *symbolStatus) {
  return cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, symbolStatus);
}
