/* dlopen + cuGetProcAddress_v2 for the benchmarks' driver table. */
#include "common/driver.h"

#include <dlfcn.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bd_table_t bd;

typedef CUresult (*bd_getproc_fn)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);

static void *bd_lookup(bd_getproc_fn getproc, const char *name) {
  void *fn = NULL;
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  /* CUDA 13.0 gave cuCtxSynchronize a context argument under the same name:
   * ask for the ABI of cuda.h's prototype. */
  int version = strcmp(name, "cuCtxSynchronize") == 0 ? 12000 : CUDA_VERSION;
  CUresult rc = getproc(name, &fn, version, CU_GET_PROC_ADDRESS_DEFAULT, &status);
  if (rc != CUDA_SUCCESS || status != CU_GET_PROC_ADDRESS_SUCCESS) return NULL;
  return fn;
}

int bd_load(char *err, size_t errlen) {
  static int loaded;
  if (loaded) return 0;
  const char *env = getenv("VMMIPC_CUDA_DRIVER");
  const char *path = (env && *env) ? env : "libcuda.so.1";
  snprintf(bd.path, sizeof bd.path, "%s", path);
  void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char *why = dlerror();
    snprintf(err, errlen, "dlopen(\"%s\") failed: %s", path, why ? why : "unknown error");
    return -1;
  }
  void *sym = dlsym(lib, "cuGetProcAddress_v2");
  if (!sym) sym = dlsym(lib, "cuGetProcAddress");
  if (!sym) {
    snprintf(err, errlen, "%s exports no cuGetProcAddress_v2 (not a CUDA 12+ driver)", path);
    return -1;
  }
  bd_getproc_fn getproc;
  memcpy(&getproc, &sym, sizeof sym);
  void *fn;
#define BD_RESOLVE_REQ(name)                                                                         \
  fn = bd_lookup(getproc, #name);                                                                    \
  if (!fn) {                                                                                         \
    snprintf(err, errlen, "cuGetProcAddress_v2(\"%s\", %d) found nothing in %s", #name, CUDA_VERSION, \
             path);                                                                                  \
    return -1;                                                                                       \
  }                                                                                                  \
  memcpy(&bd.name, &fn, sizeof fn);
#define BD_RESOLVE_OPT(name)     \
  fn = bd_lookup(getproc, #name); \
  memcpy(&bd.name, &fn, sizeof fn);
  BD_REQUIRED(BD_RESOLVE_REQ)
  BD_OPTIONAL(BD_RESOLVE_OPT)
#undef BD_RESOLVE_REQ
#undef BD_RESOLVE_OPT
  CUresult rc = bd.cuInit(0);
  if (rc != CUDA_SUCCESS) {
    char e[160];
    snprintf(err, errlen, "cuInit(0) in %s failed: %s", path, bd_errstr(rc, e, sizeof e));
    return -1;
  }
  if (!bd.cuDriverGetVersion || bd.cuDriverGetVersion(&bd.driver_version) != CUDA_SUCCESS) bd.driver_version = 0;
  bd.is_standin = dlsym(lib, "vmmipc_standin_counts") != NULL;
  /* glibc matches RTLD_NOLOAD names against the sonames of loaded objects. */
  void *real = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  bd.is_libcuda = real != NULL && real == lib;
  if (real) dlclose(real);
  loaded = 1;
  return 0;
}

const char *bd_errstr(CUresult rc, char *buf, size_t len) {
  const char *name = NULL, *text = NULL;
  if (bd.cuGetErrorName && bd.cuGetErrorName(rc, &name) != CUDA_SUCCESS) name = NULL;
  if (bd.cuGetErrorString && bd.cuGetErrorString(rc, &text) != CUDA_SUCCESS) text = NULL;
  if (name)
    snprintf(buf, len, "%s (%s)", name, text ? text : "no description");
  else
    snprintf(buf, len, "CUresult %d", (int)rc);
  return buf;
}

void bd_check_at(CUresult rc, const char *what, const char *file, int line) {
  if (rc == CUDA_SUCCESS) return;
  char e[160];
  int rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  fprintf(stderr, "[rank %d] %s:%d: %s failed: %s\n", rank, file, line, what, bd_errstr(rc, e, sizeof e));
  fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 3);
}
