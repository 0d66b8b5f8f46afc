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
 * CUDA version whose ABI matches the prototype cuda.h gives that name:
 * CUDA 13.0 gave cuCtxGetDevice (and cuCtxSynchronize) a context argument
 * under the same name, so those are asked for at 12.0. */
#define VMMIPC__CU_FUNCS(X)                  \
  X(cuInit, CUDA_VERSION)                                  \
  X(cuDriverGetVersion, CUDA_VERSION)                      \
  X(cuGetErrorName, CUDA_VERSION)                          \
  X(cuGetErrorString, CUDA_VERSION)                        \
  X(cuDeviceGetCount, CUDA_VERSION)                        \
  X(cuDeviceGet, CUDA_VERSION)                             \
  X(cuDeviceGetUuid, CUDA_VERSION)                         \
  X(cuDeviceGetAttribute, CUDA_VERSION)                    \
  X(cuDevicePrimaryCtxRetain, CUDA_VERSION)                \
  X(cuCtxSetCurrent, CUDA_VERSION)                         \
  X(cuCtxGetCurrent, CUDA_VERSION)                         \
  X(cuCtxGetDevice, 12000)                          \
  X(cuMemGetAllocationGranularity, CUDA_VERSION)           \
  X(cuMemCreate, CUDA_VERSION)                             \
  X(cuMemRelease, CUDA_VERSION)                            \
  X(cuMemAddressReserve, CUDA_VERSION)                     \
  X(cuMemAddressFree, CUDA_VERSION)                        \
  X(cuMemMap, CUDA_VERSION)                                \
  X(cuMemUnmap, CUDA_VERSION)                              \
  X(cuMemSetAccess, CUDA_VERSION)                          \
  X(cuMemGetAccess, CUDA_VERSION)                          \
  X(cuMemExportToShareableHandle, CUDA_VERSION)            \
  X(cuMemImportFromShareableHandle, CUDA_VERSION)          \
  X(cuMemGetAllocationPropertiesFromHandle, CUDA_VERSION)

/* __typeof__ of the prototype in cuda.h; macros such as cuDeviceGetUuid ->
 * cuDeviceGetUuid_v2 expand consistently in the field name and its type. */
#define VMMIPC__CU_FIELD(name, version) __typeof__(&name) name;
typedef struct vmmipc__cu {
  VMMIPC__CU_FUNCS(VMMIPC__CU_FIELD)
  int driver_version;
  char path[512];
} vmmipc__cu_t;
#undef VMMIPC__CU_FIELD

/* Load the driver once (thread-safe) and cuInit it. Returns NULL and sets
 * the last error (VMMIPC_ERR_UNSUPPORTED / VMMIPC_ERR_CUDA) on failure. */
const vmmipc__cu_t *vmmipc__cu(void);
/* Like vmmipc__cu() but also returns the result code. */
vmmipc_result_t vmmipc__cu_load(const vmmipc__cu_t **out);

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
