/* dlopen + cuGetProcAddress: builds the entry-point table once per process. */
#include "driver/cu.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"

typedef CUresult (*vmmipc__getproc_fn)(const char *, void **, int, cuuint64_t,
                                       CUdriverProcAddressQueryResult *);

static vmmipc__cu_t vmmipc__table;
static vmmipc__getproc_fn vmmipc__getproc;
static pthread_once_t vmmipc__once = PTHREAD_ONCE_INIT;
static vmmipc_result_t vmmipc__load_rc;
static char vmmipc__load_msg[VMMIPC__ERRMSG_MAX];

static vmmipc_result_t vmmipc__resolve(vmmipc__getproc_fn getproc) {
  CUdriverProcAddressQueryResult status;
  void *fn;
  CUresult rc;
#define VMMIPC__CU_RESOLVE(name)                                                                         \
  fn = NULL;                                                                                      \
  status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;                                                  \
  rc = getproc(#name, &fn, vmmipc__cu_abi_version(#name), CU_GET_PROC_ADDRESS_DEFAULT, &status);  \
  if (rc != CUDA_SUCCESS || fn == NULL || status != CU_GET_PROC_ADDRESS_SUCCESS)                  \
    return vmmipc__error(VMMIPC_ERR_UNSUPPORTED,                                                  \
                         "loading the CUDA driver: cuGetProcAddress(\"%s\", version %d) in %s "   \
                         "failed (CUresult %d, query status %d); hint: the driver is older than " \
                         "the CUDA %d.%d headers vmmipc was built with; update the driver",       \
                         #name, vmmipc__cu_abi_version(#name), vmmipc__table.path, (int)rc,      \
                         (int)status,                                                             \
                         CUDA_VERSION / 1000, (CUDA_VERSION % 1000) / 10);                        \
  memcpy(&vmmipc__table.name, &fn, sizeof fn);
  VMMIPC__CU_FUNCS(VMMIPC__CU_RESOLVE)
#undef VMMIPC__CU_RESOLVE
  return VMMIPC_SUCCESS;
}

static vmmipc_result_t vmmipc__load_once(void) {
  const char *env = getenv("VMMIPC_CUDA_DRIVER");
  const char *path = (env && *env) ? env : "libcuda.so.1";
  snprintf(vmmipc__table.path, sizeof vmmipc__table.path, "%s", path);
  /* RTLD_LOCAL: the driver's symbols stay out of the global namespace. */
  void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char *why = dlerror();
    return vmmipc__error(VMMIPC_ERR_UNSUPPORTED,
                         "loading the CUDA driver: dlopen(\"%s\") failed: %s; hint: install the NVIDIA "
                         "driver, or set VMMIPC_CUDA_DRIVER to the full path of a driver library "
                         "(for GPU-less tests: the CPU stand-in, libvmmipc_standin.so)",
                         path, why ? why : "unknown error");
  }
  void *sym = dlsym(lib, "cuGetProcAddress_v2");
  if (!sym) sym = dlsym(lib, "cuGetProcAddress");
  if (!sym)
    return vmmipc__error(VMMIPC_ERR_UNSUPPORTED,
                         "loading the CUDA driver: %s exports no cuGetProcAddress; hint: it is not a "
                         "CUDA driver of version 12 or later; set VMMIPC_CUDA_DRIVER to one",
                         path);
  memcpy(&vmmipc__getproc, &sym, sizeof sym);
  vmmipc_result_t r = vmmipc__resolve(vmmipc__getproc);
  if (r != VMMIPC_SUCCESS) return r;
  CUresult rc = vmmipc__table.cuInit(0);
  if (rc != CUDA_SUCCESS) {
    char e[128];
    r = vmmipc__error(rc == CUDA_ERROR_NO_DEVICE ? VMMIPC_ERR_UNSUPPORTED : VMMIPC_ERR_CUDA,
                      "loading the CUDA driver: cuInit(0) in %s failed: %s; hint: check that a GPU is "
                      "visible (nvidia-smi, CUDA_VISIBLE_DEVICES)",
                      path, vmmipc__cu_errstr(rc, e, sizeof e));
    return r;
  }
  rc = vmmipc__table.cuDriverGetVersion(&vmmipc__table.driver_version);
  if (rc != CUDA_SUCCESS) vmmipc__table.driver_version = 0;
  return VMMIPC_SUCCESS;
}

static void vmmipc__load_entry(void) {
  vmmipc__load_rc = vmmipc__load_once();
  if (vmmipc__load_rc != VMMIPC_SUCCESS)
    snprintf(vmmipc__load_msg, sizeof vmmipc__load_msg, "%s", vmmipc_last_error());
}

int vmmipc__cu_abi_version(const char *name) {
  static const char *const changed_in_13[] = {"cuCtxGetDevice", "cuCtxSynchronize"};
  for (size_t i = 0; i < sizeof changed_in_13 / sizeof *changed_in_13; i++)
    if (strcmp(name, changed_in_13[i]) == 0) return 12000;
  return CUDA_VERSION;
}

vmmipc_result_t vmmipc_driver_proc(const char *name, int cuda_version, void **fn) {
  if (!name || !fn) return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "vmmipc_driver_proc: name or fn is NULL");
  *fn = NULL;
  const vmmipc__cu_t *cu;
  vmmipc_result_t r = vmmipc__cu_load(&cu);
  if (r) return r;
  int version = cuda_version > 0 ? cuda_version : vmmipc__cu_abi_version(name);
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  CUresult rc = vmmipc__getproc(name, fn, version, CU_GET_PROC_ADDRESS_DEFAULT, &status);
  if (rc != CUDA_SUCCESS || !*fn || status != CU_GET_PROC_ADDRESS_SUCCESS) {
    *fn = NULL;
    return vmmipc__error(VMMIPC_ERR_UNSUPPORTED,
                         "vmmipc_driver_proc: %s has no entry point \"%s\" at CUDA version %d (CUresult %d, "
                         "query status %d)",
                         cu->path, name, version, (int)rc, (int)status);
  }
  return VMMIPC_SUCCESS;
}

/* Reads the table directly: it is also used while the table is being built. */
const char *vmmipc__cu_errstr(CUresult rc, char *buf, size_t len) {
  const char *name = NULL, *text = NULL;
  if (vmmipc__table.cuGetErrorName && vmmipc__table.cuGetErrorName(rc, &name) != CUDA_SUCCESS) name = NULL;
  if (vmmipc__table.cuGetErrorString && vmmipc__table.cuGetErrorString(rc, &text) != CUDA_SUCCESS)
    text = NULL;
  if (name)
    snprintf(buf, len, "%s (%s)", name, text ? text : "no description");
  else
    snprintf(buf, len, "CUresult %d", (int)rc);
  return buf;
}

vmmipc_result_t vmmipc__cu_load(const vmmipc__cu_t **out) {
  pthread_once(&vmmipc__once, vmmipc__load_entry);
  if (vmmipc__load_rc != VMMIPC_SUCCESS) {
    /* Every thread that asks gets the same message as the first. */
    vmmipc__error_set_raw(vmmipc__load_msg);
    *out = NULL;
    return vmmipc__load_rc;
  }
  *out = &vmmipc__table;
  return VMMIPC_SUCCESS;
}

const vmmipc__cu_t *vmmipc__cu(void) {
  const vmmipc__cu_t *cu;
  vmmipc__cu_load(&cu);
  return cu;
}
