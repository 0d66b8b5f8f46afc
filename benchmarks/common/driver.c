/* The benchmarks' driver table, from the driver vmmipc loaded. */
#include "common/driver.h"

#include <dlfcn.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vmmipc.h"

bd_table_t bd;

/* Entry points come from the driver vmmipc loaded, at cuda.h's ABI. */
static void *bd_lookup(const char *name) {
  void *fn = NULL;
  return vmmipc_driver_proc(name, 0, &fn) == VMMIPC_SUCCESS ? fn : NULL;
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
  void *fn;
#define BD_RESOLVE_REQ(name)                        \
  fn = bd_lookup(#name);                            \
  if (!fn) {                                        \
    snprintf(err, errlen, "%s", vmmipc_last_error()); \
    return -1;                                      \
  }                                                 \
  memcpy(&bd.name, &fn, sizeof fn);
#define BD_RESOLVE_OPT(name) \
  fn = bd_lookup(#name);     \
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
