/* The CUDA driver, loaded at run time: one table of entry points resolved
 * through cuGetProcAddress. Nothing here links against libcuda. */
#ifndef VMMIPC_DRIVER_CU_H
#define VMMIPC_DRIVER_CU_H

#include <cuda.h>
#include "vmmipc.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Every driver entry point the library uses. The stand-in driver in
 * mpi_tests/standin must provide each of these. Each is requested at the
 * ABI of the prototype cuda.h declares (vmmipc__cu_abi_version). */
#define VMMIPC__CU_FUNCS(X)                  \
  X(cuInit)                                  \
  X(cuDriverGetVersion)                      \
  X(cuGetErrorName)                          \
  X(cuGetErrorString)                        \
  X(cuDeviceGetCount)                        \
  X(cuDeviceGet)                             \
  X(cuDeviceGetUuid)                         \
  X(cuDeviceGetAttribute)                    \
  X(cuDeviceTotalMem)                        \
  X(cuDevicePrimaryCtxRetain)                \
  X(cuCtxSetCurrent)                         \
  X(cuCtxGetCurrent)                         \
  X(cuCtxGetDevice)                          \
  X(cuMemGetAllocationGranularity)           \
  X(cuMemCreate)                             \
  X(cuMemRelease)                            \
  X(cuMemAddressReserve)                     \
  X(cuMemAddressFree)                        \
  X(cuMemMap)                                \
  X(cuMemUnmap)                              \
  X(cuMemSetAccess)                          \
  X(cuMemGetAccess)                          \
  X(cuMemExportToShareableHandle)            \
  X(cuMemImportFromShareableHandle)          \
  X(cuMemGetAllocationPropertiesFromHandle) \
  X(cuStreamCreate)                          \
  X(cuStreamDestroy)                         \
  X(cuStreamSynchronize)                     \
  X(cuStreamQuery)                           \
  X(cuMemcpyHtoDAsync)                       \
  X(cuMemcpyDtoHAsync)                       \
  X(cuStreamWriteValue64)                    \
  X(cuStreamWaitValue64)                     \
  X(cuStreamBatchMemOp) \
  X(cuMemRetainAllocationHandle)            \
  X(cuMemGetAddressRange)                   \
  X(cuPointerGetAttribute)                  \
  X(cuModuleLoadData)                       \
  X(cuModuleUnload)                         \
  X(cuModuleGetFunction)                    \
  X(cuLaunchKernelEx)                       \
  X(cuMemAlloc)                             \
  X(cuMemFree)                              \
  X(cuMemHostAlloc)                         \
  X(cuMemFreeHost)                          \
  X(cuMemHostGetDevicePointer)               \
  X(cuStreamIsCapturing)                     \
  X(cuThreadExchangeStreamCaptureMode)

/* __typeof__ of the prototype in cuda.h; macros such as cuDeviceGetUuid ->
 * cuDeviceGetUuid_v2 expand consistently in the field name and its type. */
#define VMMIPC__CU_FIELD(name) __typeof__(&name) name;
typedef struct vmmipc__cu {
  VMMIPC__CU_FUNCS(VMMIPC__CU_FIELD)
  int driver_version;
  char path[512];
} vmmipc__cu_t;
#undef VMMIPC__CU_FIELD

/* Load the driver (thread-safe) and cuInit it; once that succeeded the table
 * stays for the life of the process. A failed load leaves nothing loaded and
 * is tried again by the next call. Returns NULL and sets the last error
 * (VMMIPC_ERR_UNSUPPORTED / VMMIPC_ERR_CUDA) on failure. */
const vmmipc__cu_t *vmmipc__cu(void);
/* Like vmmipc__cu() but also returns the result code. */
vmmipc_result_t vmmipc__cu_load(const vmmipc__cu_t **out);

/* The CUDA version at which to ask cuGetProcAddress for `name` so that the
 * result has the ABI of cuda.h's prototype: CUDA 13.0 changed cuCtxGetDevice
 * and cuCtxSynchronize in place (a context argument under the same name). */
int vmmipc__cu_abi_version(const char *name);

/* "CUDA_ERROR_INVALID_VALUE (invalid argument)" for a driver result. */
const char *vmmipc__cu_errstr(CUresult rc, char *buf, size_t len);
/* Set the last error for a failed driver call and return VMMIPC_ERR_CUDA
 * (or VMMIPC_ERR_NO_MEMORY for CUDA_ERROR_OUT_OF_MEMORY). `fmt` describes
 * the call and its arguments; `hint` may be NULL. */
vmmipc_result_t vmmipc__cu_error(CUresult rc, const char *hint, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#ifdef __cplusplus
}
#endif
#endif
