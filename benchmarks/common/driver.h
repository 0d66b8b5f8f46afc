/* The benchmarks' own table of CUDA driver entry points.
 *
 * Like the library, the benchmarks never link libcuda: every entry point
 * comes from vmmipc_driver_proc, i.e. the driver vmmipc loaded, at the ABI
 * of cuda.h's prototype. */
#ifndef VMMIPC_BENCH_DRIVER_H
#define VMMIPC_BENCH_DRIVER_H

#include <cuda.h>
#include <stddef.h>

/* Entry points every benchmark needs: loading fails without one of them. */
#define BD_REQUIRED(X)               \
  X(cuInit)                          \
  X(cuGetErrorName)                  \
  X(cuGetErrorString)                \
  X(cuDeviceGet)                     \
  X(cuDeviceGetName)                 \
  X(cuDeviceGetAttribute)            \
  X(cuCtxSynchronize)                \
  X(cuStreamCreate)                  \
  X(cuStreamDestroy)                 \
  X(cuStreamSynchronize)             \
  X(cuEventCreate)                   \
  X(cuEventDestroy)                  \
  X(cuEventRecord)                   \
  X(cuEventSynchronize)              \
  X(cuEventElapsedTime)              \
  X(cuMemcpyAsync)                   \
  X(cuMemcpyDtoDAsync)               \
  X(cuMemcpyDtoH)                    \
  X(cuMemcpyHtoD)                    \
  X(cuMemsetD8)                      \
  X(cuMemAlloc)                      \
  X(cuMemFree)                       \
  X(cuMemGetAllocationGranularity)   \
  X(cuMemCreate)                     \
  X(cuMemRelease)                    \
  X(cuMemAddressReserve)             \
  X(cuMemAddressFree)                \
  X(cuMemMap)                        \
  X(cuMemUnmap)                      \
  X(cuMemSetAccess)                  \
  X(cuMemExportToShareableHandle)    \
  X(cuMemImportFromShareableHandle)

/* Entry points of optional modes (NULL when the driver lacks them, as the
 * CPU stand-in may): legacy IPC, the SM kernel, pinned host memory. */
#define BD_OPTIONAL(X)      \
  X(cuDriverGetVersion)     \
  X(cuIpcGetMemHandle)      \
  X(cuIpcOpenMemHandle)     \
  X(cuIpcCloseMemHandle)    \
  X(cuModuleLoadData)       \
  X(cuModuleUnload)         \
  X(cuModuleGetFunction)    \
  X(cuLaunchKernel)         \
  X(cuMemHostAlloc)         \
  X(cuMemFreeHost)

/* __typeof__ of cuda.h's prototype: versioned names (cuMemAlloc ->
 * cuMemAlloc_v2) expand the same way in the field name and in its uses. */
#define BD_FIELD(name) __typeof__(&name) name;
typedef struct bd_table {
  BD_REQUIRED(BD_FIELD)
  BD_OPTIONAL(BD_FIELD)
  char path[512];     /* what was dlopen'ed */
  int is_standin;     /* the library exports vmmipc_standin_counts */
  int is_libcuda;     /* the object loaded under the soname libcuda.so.1 */
  int driver_version; /* cuDriverGetVersion, 0 when unknown */
} bd_table_t;
#undef BD_FIELD

extern bd_table_t bd;

/* Loads the table (once); 0 on success, else -1 with a message in err. */
int bd_load(char *err, size_t errlen);
/* "CUDA_ERROR_X (text)" for a driver result; buf must hold ~160 bytes. */
const char *bd_errstr(CUresult rc, char *buf, size_t len);
/* Aborts the MPI job with a message when rc is not CUDA_SUCCESS. */
void bd_check_at(CUresult rc, const char *what, const char *file, int line);
#define BD_CHECK(call) bd_check_at((call), #call, __FILE__, __LINE__)

#endif
