/* dlopen + cuGetProcAddress: builds the entry-point table. The first load
 * that succeeds fixes the table for the life of the process; a load that
 * fails closes what it opened, and the next call tries again (the driver may
 * have been installed, or VMMIPC_CUDA_DRIVER changed, in between). */
#include "driver/cu.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/host.h"

/* cuGetProcAddress_v2 (CUDA 12.0 on) reports a query status; the
 * unversioned CUDA 11.3 symbol has no such parameter. */
typedef CUresult (*vmmipc__getproc_v2_fn)(const char *, void **, int, cuuint64_t,
                                          CUdriverProcAddressQueryResult *);
typedef CUresult (*vmmipc__getproc_v1_fn)(const char *, void **, int, cuuint64_t);

static vmmipc__cu_t vmmipc__table;
static vmmipc__getproc_v2_fn vmmipc__getproc_v2;
static vmmipc__getproc_v1_fn vmmipc__getproc_v1;
static pthread_mutex_t vmmipc__load_mu = PTHREAD_MUTEX_INITIALIZER;
/* Set (release) once the table is complete; never cleared. Readers that see
 * it may use the table and the getproc pointers without the lock. */
static atomic_int vmmipc__loaded;

/* One lookup through whichever cuGetProcAddress the driver exports. */
static CUresult vmmipc__getproc(const char *name, void **fn, int version, CUdriverProcAddressQueryResult *status) {
  *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  if (vmmipc__getproc_v2) return vmmipc__getproc_v2(name, fn, version, CU_GET_PROC_ADDRESS_DEFAULT, status);
  CUresult rc = vmmipc__getproc_v1(name, fn, version, CU_GET_PROC_ADDRESS_DEFAULT);
  if (rc == CUDA_SUCCESS && *fn) *status = CU_GET_PROC_ADDRESS_SUCCESS;
  return rc;
}

/* The file the driver was loaded from (dlopen of "libcuda.so.1" finds it
 * through the loader's search path), else the name given to dlopen. */
static const char *vmmipc__loaded_file(char *buf, size_t cap) {
  Dl_info info;
  void *sym = NULL; /* a function pointer, as dladdr takes it */
  memcpy(&sym, vmmipc__getproc_v2 ? (const void *)&vmmipc__getproc_v2 : (const void *)&vmmipc__getproc_v1,
         sizeof sym);
  if (sym && dladdr(sym, &info) && info.dli_fname && *info.dli_fname)
    snprintf(buf, cap, "%s", info.dli_fname);
  else
    snprintf(buf, cap, "%s", vmmipc__table.path);
  return buf;
}

/* CUDA_ERROR_STUB_LIBRARY: the toolkit's link-time stub (lib64/stubs), not
 * a driver, came first in the search path. */
static vmmipc_result_t vmmipc__stub_error(const char *call) {
  char file[512];
  vmmipc__error(VMMIPC_ERR_UNSUPPORTED,
                       "loading the CUDA driver: %s in %s returned CUDA_ERROR_STUB_LIBRARY (34): that libcuda is the "
                       "CUDA toolkit's stub for linking, not the driver; hint: remove the toolkit's stubs directory "
                       "from LD_LIBRARY_PATH, or set VMMIPC_CUDA_DRIVER to the driver's libcuda.so.1 (ldconfig -p | "
                       "grep libcuda)",
                       call, vmmipc__loaded_file(file, sizeof file));
  vmmipc__error_driver(CUDA_ERROR_STUB_LIBRARY);
  return VMMIPC_ERR_UNSUPPORTED;
}

/* A symbol the driver does not give: older than the headers. */
static vmmipc_result_t resolve_error(const char *name, CUresult rc, CUdriverProcAddressQueryResult status) {
  vmmipc__error(VMMIPC_ERR_UNSUPPORTED,
                "loading the CUDA driver: cuGetProcAddress(\"%s\", version %d) in %s failed (CUresult %d, query "
                "status %d); hint: the driver is older than the CUDA %d.%d headers vmmipc was built with; update the "
                "driver",
                name, vmmipc__cu_abi_version(name), vmmipc__table.path, (int)rc, (int)status, CUDA_VERSION / 1000,
                (CUDA_VERSION % 1000) / 10);
  if (rc != CUDA_SUCCESS) vmmipc__error_driver(rc);
  return VMMIPC_ERR_UNSUPPORTED;
}

static vmmipc_result_t vmmipc__resolve(void) {
  CUdriverProcAddressQueryResult status;
  void *fn;
  CUresult rc;
#define VMMIPC__CU_RESOLVE(name)                                                                     \
  fn = NULL;                                                                                          \
  rc = vmmipc__getproc(#name, &fn, vmmipc__cu_abi_version(#name), &status);                           \
  if (rc == CUDA_ERROR_STUB_LIBRARY) return vmmipc__stub_error("cuGetProcAddress(\"" #name "\")");  \
  if (rc != CUDA_SUCCESS || fn == NULL || status != CU_GET_PROC_ADDRESS_SUCCESS)                      \
    return resolve_error(#name, rc, status);                                                          \
  memcpy(&vmmipc__table.name, &fn, sizeof fn);
  VMMIPC__CU_FUNCS(VMMIPC__CU_RESOLVE)
#undef VMMIPC__CU_RESOLVE
  return VMMIPC_SUCCESS;
}

/* Everything after dlopen; on failure the caller closes the library. */
static vmmipc_result_t vmmipc__load_from(void *lib, const char *path) {
  void *v2 = dlsym(lib, "cuGetProcAddress_v2");
  void *v1 = v2 ? NULL : dlsym(lib, "cuGetProcAddress");
  if (!v2 && !v1)
    return vmmipc__error(VMMIPC_ERR_UNSUPPORTED,
                         "loading the CUDA driver: %s exports no cuGetProcAddress; hint: it is not a "
                         "CUDA driver of version 11.3 or later; set VMMIPC_CUDA_DRIVER to one",
                         path);
  memcpy(&vmmipc__getproc_v2, &v2, sizeof v2);
  memcpy(&vmmipc__getproc_v1, &v1, sizeof v1);
  vmmipc_result_t r = vmmipc__resolve();
  if (r != VMMIPC_SUCCESS) return r;
  CUresult rc = vmmipc__table.cuInit(0);
  if (rc == CUDA_ERROR_STUB_LIBRARY) return vmmipc__stub_error("cuInit(0)");
  if (rc != CUDA_SUCCESS) {
    r = vmmipc__cu_error(rc, "check that a GPU is visible (nvidia-smi, CUDA_VISIBLE_DEVICES)",
                         "loading the CUDA driver: cuInit(0) in %s", path);
    if (rc == CUDA_ERROR_NO_DEVICE) vmmipc__error_code(r = VMMIPC_ERR_UNSUPPORTED); /* no GPU: not a driver fault */
    return r;
  }
  rc = vmmipc__table.cuDriverGetVersion(&vmmipc__table.driver_version);
  if (rc != CUDA_SUCCESS) vmmipc__table.driver_version = 0;
  return VMMIPC_SUCCESS;
}

/* Set by src/CMakeLists.txt from the install's libdir; builds of the sources
 * elsewhere (fuzz/) get the usual one. */
#ifndef VMMIPC_STANDIN_INSTALL_DIR
#define VMMIPC_STANDIN_INSTALL_DIR "<prefix>/lib/vmmipc/"
#endif

/* Where the CPU stand-in is, for the message of a failed load: next to this
 * library as an install puts it (<libdir>/vmmipc/, the component "standin")
 * or as a build tree has it (src/ -> mpi_tests/standin/), else where an
 * install would put it. */
static const char *standin_hint(char *buf, size_t cap) {
  static const char *const beside[] = {"/vmmipc/libvmmipc_standin.so", "/../mpi_tests/standin/libvmmipc_standin.so"};
  Dl_info info;
  char dir[PATH_MAX] = "";
  const char *(*self)(char *, size_t) = standin_hint;
  void *sym = NULL; /* a function pointer, as dladdr takes it */
  memcpy(&sym, &self, sizeof sym);
  if (dladdr(sym, &info) && info.dli_fname && realpath(info.dli_fname, dir)) {
    char *slash = strrchr(dir, '/');
    if (slash) *slash = '\0';
  }
  for (size_t i = 0; *dir && i < sizeof beside / sizeof *beside; i++) {
    char cand[PATH_MAX + 64], real[PATH_MAX];
    snprintf(cand, sizeof cand, "%s%s", dir, beside[i]);
    if (realpath(cand, real)) {
      snprintf(buf, cap, "VMMIPC_CUDA_DRIVER=%s", real);
      return buf;
    }
  }
  snprintf(buf, cap,
           "libvmmipc_standin.so, which 'cmake --install BUILD --component standin' puts in %s (a build has it in "
           "BUILD/mpi_tests/standin/)",
           VMMIPC_STANDIN_INSTALL_DIR);
  return buf;
}

/* Called with the lock held. */
static vmmipc_result_t vmmipc__load_locked(void) {
  const char *env = getenv("VMMIPC_CUDA_DRIVER");
  const char *path = (env && *env) ? env : "libcuda.so.1";
  memset(&vmmipc__table, 0, sizeof vmmipc__table);
  snprintf(vmmipc__table.path, sizeof vmmipc__table.path, "%s", path);
  /* RTLD_LOCAL: the driver's symbols stay out of the global namespace. */
  void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char *why = dlerror();
    char standin[PATH_MAX + 64];
    return vmmipc__error(VMMIPC_ERR_UNSUPPORTED,
                         "loading the CUDA driver: dlopen(\"%s\") failed: %s; hint: install the NVIDIA "
                         "driver, or set VMMIPC_CUDA_DRIVER to the full path of a driver library; without a GPU, "
                         "the CPU stand-in: %s",
                         path, why ? why : "unknown error", standin_hint(standin, sizeof standin));
  }
  vmmipc_result_t r = vmmipc__load_from(lib, path);
  if (r != VMMIPC_SUCCESS) {
    /* The message is formatted: nothing of this attempt may stay behind. */
    memset(&vmmipc__table, 0, sizeof vmmipc__table);
    vmmipc__getproc_v2 = NULL;
    vmmipc__getproc_v1 = NULL;
    dlclose(lib);
    return r;
  }
  /* Read the host identity now, while fds are plentiful; it is cached for
   * every later export and import (a failure here is retried there). */
  unsigned char host[16];
  (void)vmmipc__host_id(host);
  return VMMIPC_SUCCESS;
}

int vmmipc__cu_abi_version(const char *name) {
  static const char *const changed_in_13[] = {"cuCtxGetDevice", "cuCtxSynchronize"};
  for (size_t i = 0; i < sizeof changed_in_13 / sizeof *changed_in_13; i++)
    if (strcmp(name, changed_in_13[i]) == 0) return 12000;
  return CUDA_VERSION;
}

/* The length of `name` without a version or stream suffix (_v2, _ptds,
 * _ptsz): the symbols cuda.h's macros map names to, which cuGetProcAddress
 * never finds (it takes the names of the documentation). */
static size_t base_name_len(const char *name) {
  size_t n = strlen(name);
  const char *u = strrchr(name, '_');
  if (!u) return n;
  if (strcmp(u, "_ptds") == 0 || strcmp(u, "_ptsz") == 0) return (size_t)(u - name);
  if (u[1] == 'v' && u[2] && strspn(u + 2, "0123456789") == strlen(u + 2)) return (size_t)(u - name);
  return n;
}

vmmipc_result_t vmmipc_driver_proc(const char *name, int cuda_version, void **fn) {
  if (!name || !fn) return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "vmmipc_driver_proc: name or fn is NULL");
  *fn = NULL;
  const vmmipc__cu_t *cu;
  vmmipc_result_t r = vmmipc__cu_load(&cu);
  if (r) return r;
  int version = cuda_version > 0 ? cuda_version : vmmipc__cu_abi_version(name);
  CUdriverProcAddressQueryResult status;
  CUresult rc = vmmipc__getproc(name, fn, version, &status);
  if (rc == CUDA_SUCCESS && *fn && status == CU_GET_PROC_ADDRESS_SUCCESS) return VMMIPC_SUCCESS;
  *fn = NULL;
  int dv = cu->driver_version;
  if (status == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT)
    return vmmipc__error(VMMIPC_ERR_UNSUPPORTED,
                         "vmmipc_driver_proc: the driver %s (CUDA %d.%d) has \"%s\" only for CUDA versions after %d; "
                         "hint: pass cuda_version 0 for the prototype of vmmipc's cuda.h, or the version whose "
                         "prototype you use",
                         cu->path, dv / 1000, dv % 1000 / 10, name, version);
  size_t base = base_name_len(name);
  if (base < strlen(name)) {
    char plain[128];
    snprintf(plain, sizeof plain, "%.*s", (int)(base < sizeof plain ? base : sizeof plain - 1), name);
    return vmmipc__error(VMMIPC_ERR_INVALID_ARG,
                         "vmmipc_driver_proc: \"%s\" is a versioned symbol, which the driver does not look up; hint: "
                         "pass the name cuda.h documents, \"%s\" (cuda_version picks which ABI of it: 0 gives the "
                         "prototype of vmmipc's cuda.h)",
                         name, plain);
  }
  return vmmipc__error(VMMIPC_ERR_UNSUPPORTED,
                       "vmmipc_driver_proc: the driver %s (CUDA %d.%d) has no function \"%s\" (CUresult %d, query "
                       "status %d); hint: check the name against cuda.h (unversioned, e.g. \"cuMemcpyHtoD\"); a "
                       "function newer than the driver is not there either",
                       cu->path, dv / 1000, dv % 1000 / 10, name, (int)rc, (int)status);
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
  if (!atomic_load_explicit(&vmmipc__loaded, memory_order_acquire)) {
    pthread_mutex_lock(&vmmipc__load_mu);
    vmmipc_result_t r = VMMIPC_SUCCESS;
    if (!atomic_load_explicit(&vmmipc__loaded, memory_order_relaxed)) {
      r = vmmipc__load_locked();
      if (r == VMMIPC_SUCCESS) atomic_store_explicit(&vmmipc__loaded, 1, memory_order_release);
    }
    pthread_mutex_unlock(&vmmipc__load_mu);
    if (r != VMMIPC_SUCCESS) {
      *out = NULL;
      return r;
    }
  }
  *out = &vmmipc__table;
  return VMMIPC_SUCCESS;
}

const vmmipc__cu_t *vmmipc__cu(void) {
  const vmmipc__cu_t *cu;
  vmmipc__cu_load(&cu);
  return cu;
}
