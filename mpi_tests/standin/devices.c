/* cuInit and the device queries: how many stand-in GPUs exist, which are
 * visible, their UUIDs and attributes. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "async.h"

/* Physical device i has the fixed UUID 564d4d2d-5354-4e0i-0000-00000000000i
 * ("VMM-STN", then i in bytes 7 and 15): distinct, recognisable, and with a
 * short unambiguous prefix (GPU-564d4d2d-5354-4e0i) per device. */
void sti_uuid_of(int phys, unsigned char out[16]) {
  static const unsigned char base[7] = {0x56, 0x4d, 0x4d, 0x2d, 'S', 'T', 'N'};
  memset(out, 0, 16);
  memcpy(out, base, sizeof base);
  out[7] = (unsigned char)phys;
  out[15] = (unsigned char)phys;
}

int sti_phys_of_uuid(const unsigned char uuid[16]) {
  unsigned char u[16];
  for (int i = 0; i < sti.nphys; i++) {
    sti_uuid_of(i, u);
    if (memcmp(u, uuid, 16) == 0) return i;
  }
  return -1;
}

int sti_ordinal_of_phys(int phys) {
  for (int i = 0; i < sti.nvis; i++)
    if (sti.vis[i] == phys) return i;
  return -1;
}

int sti_valid_ordinal(int ordinal) { return ordinal >= 0 && ordinal < sti.nvis; }

void sti_uuid_string(const unsigned char b[16], char out[41]) {
  snprintf(out, 41, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2],
           b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
}

/* A bad stand-in setting fails cuInit loudly instead of silently testing
 * some other configuration than the one asked for. */
static CUresult sti_bad_env(const char *name, const char *value, const char *why) {
  fprintf(stderr, "vmmipc stand-in driver: %s=\"%s\" is invalid: %s; cuInit fails with CUDA_ERROR_INVALID_VALUE\n",
          name, value, why);
  return CUDA_ERROR_INVALID_VALUE;
}

static CUresult sti_read_device_count(void) {
  const char *env = getenv("VMMIPC_STANDIN_DEVICES");
  sti.nphys = STI_DEFAULT_DEVICES;
  if (!env) return CUDA_SUCCESS;
  char *end = NULL;
  errno = 0;
  long n = strtol(env, &end, 10);
  if (errno || end == env || *end != '\0' || n < 0 || n > STI_MAX_DEVICES)
    return sti_bad_env("VMMIPC_STANDIN_DEVICES", env, "expected an integer from 0 to 8");
  sti.nphys = (int)n;
  return CUDA_SUCCESS;
}

static CUresult sti_read_caps(void) {
  const char *env = getenv("VMMIPC_STANDIN_CAPS");
  sti.cap_vmm = 1;
  sti.cap_fd = 1;
  sti.cap_memops = 1;
  sti.cap_kernels = 1;
  sti.cap_rdma = 1;
  if (!env) return CUDA_SUCCESS;
  const char *p = env;
  while (*p) {
    size_t len = strcspn(p, ",");
    if (len == 5 && strncmp(p, "novmm", 5) == 0)
      sti.cap_vmm = 0;
    else if (len == 4 && strncmp(p, "nofd", 4) == 0)
      sti.cap_fd = 0;
    else if (len == 8 && strncmp(p, "nomemops", 8) == 0)
      sti.cap_memops = 0;
    else if (len == 9 && strncmp(p, "nokernels", 9) == 0)
      sti.cap_kernels = 0;
    else if (len == 6 && strncmp(p, "nordma", 6) == 0)
      sti.cap_rdma = 0;
    else if (len == 4 && strncmp(p, "stub", 4) == 0)
      return CUDA_ERROR_STUB_LIBRARY; /* as the toolkit's stub libcuda (getproc.c) */
    else if (len != 0 && !(len == 5 && strncmp(p, "old11", 5) == 0)) /* old11: getproc.c's */
      return sti_bad_env("VMMIPC_STANDIN_CAPS", env,
                         "known capabilities are novmm, nofd, nordma, nomemops, nokernels, stub and old11");
    p += len;
    if (*p == ',') p++;
  }
  return CUDA_SUCCESS;
}

/* VMMIPC_STANDIN_MPS: 1 makes the devices answer as MPS clients' do (only
 * the attribute: kernels run as they always do here). */
static CUresult sti_read_mps(void) {
  const char *env = getenv("VMMIPC_STANDIN_MPS");
  sti.mps = 0;
  if (!env || !*env || strcmp(env, "0") == 0) return CUDA_SUCCESS;
  if (strcmp(env, "1") == 0) {
    sti.mps = 1;
    return CUDA_SUCCESS;
  }
  return sti_bad_env("VMMIPC_STANDIN_MPS", env, "expected 0 or 1");
}

static CUresult sti_init_from_env(void) {
  CUresult rc = sti_read_device_count();
  if (rc == CUDA_SUCCESS) rc = sti_read_mps();
  if (rc == CUDA_SUCCESS) rc = sti_read_caps();
  if (rc == CUDA_SUCCESS) rc = sti_async_configure(getenv("VMMIPC_STANDIN_ASYNC"));
  if (rc != CUDA_SUCCESS) return rc;
  for (int i = 0; i < STI_MAX_DEVICES; i++) {
    sti.ctx[i].phys = i;
    sti.ctx[i].retains = 0;
  }
  const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
  if (cvd) {
    sti_parse_visible(cvd, sti.nphys, sti.vis, &sti.nvis);
  } else {
    sti.nvis = sti.nphys;
    for (int i = 0; i < sti.nphys; i++) sti.vis[i] = i;
  }
  return sti.nvis > 0 ? CUDA_SUCCESS : CUDA_ERROR_NO_DEVICE;
}

/* The environment is read once, by the first cuInit; later calls return the
 * first result, as the real driver does. */
CUresult cuInit(unsigned int flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&sti.mu);
  if (!sti.init_done) {
    sti.init_rc = sti_init_from_env();
    sti.init_done = 1;
  }
  CUresult rc = sti.init_rc;
  pthread_mutex_unlock(&sti.mu);
  return rc;
}

/* Works before cuInit, like the real one. */
CUresult cuDriverGetVersion(int *version) {
  if (!version) return CUDA_ERROR_INVALID_VALUE;
  *version = STI_DRIVER_VERSION;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int *count) {
  if (!count) return CUDA_ERROR_INVALID_VALUE;
  CUresult rc = sti_enter();
  if (rc) return rc;
  *count = sti.nvis;
  sti_leave();
  return CUDA_SUCCESS;
}

/* CUdevice values are visible ordinals. */
CUresult cuDeviceGet(CUdevice *device, int ordinal) {
  if (!device) return CUDA_ERROR_INVALID_VALUE;
  CUresult rc = sti_enter();
  if (rc) return rc;
  if (sti_valid_ordinal(ordinal))
    *device = ordinal;
  else
    rc = CUDA_ERROR_INVALID_DEVICE;
  sti_leave();
  return rc;
}

CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev) {
  if (!uuid) return CUDA_ERROR_INVALID_VALUE;
  CUresult rc = sti_enter();
  if (rc) return rc;
  if (sti_valid_ordinal(dev)) {
    unsigned char u[16];
    sti_uuid_of(sti.vis[dev], u);
    memcpy(uuid->bytes, u, 16);
  } else {
    rc = CUDA_ERROR_INVALID_DEVICE;
  }
  sti_leave();
  return rc;
}

CUresult cuDeviceTotalMem(size_t *bytes, CUdevice dev) {
  if (!bytes) return CUDA_ERROR_INVALID_VALUE;
  CUresult rc = sti_enter();
  if (rc) return rc;
  if (sti_valid_ordinal(dev))
    *bytes = STI_TOTAL_MEM;
  else
    rc = CUDA_ERROR_INVALID_DEVICE;
  sti_leave();
  return rc;
}

CUresult cuDeviceGetName(char *name, int len, CUdevice dev) {
  if (!name || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  CUresult rc = sti_enter();
  if (rc) return rc;
  if (sti_valid_ordinal(dev))
    snprintf(name, (size_t)len, "vmmipc stand-in GPU %d", sti.vis[dev]);
  else
    rc = CUDA_ERROR_INVALID_DEVICE;
  sti_leave();
  return rc;
}

/* Values of an H200-like device where they matter to callers; the
 * capabilities the library probes follow VMMIPC_STANDIN_CAPS. */
static int sti_attribute(CUdevice_attribute a, int phys) {
  switch (a) {
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: return sti.cap_vmm;
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED: return sti.cap_fd;
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED: return 0; /* no IMEX */
    case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED: return sti.cap_rdma;
    case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED: return sti.cap_rdma;
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_WIN32_HANDLE_SUPPORTED: return 0;
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_WIN32_KMT_HANDLE_SUPPORTED: return 0;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: return 1;
    /* As measured on H200: 64-bit memory operations and wait-NOR, but no
     * flush of remote writes (CU_STREAM_WAIT_VALUE_FLUSH). */
    case CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS: return sti.cap_memops;
    case CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR: return sti.cap_memops;
    case CU_DEVICE_ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES: return 0;
    case CU_DEVICE_ATTRIBUTE_MPS_ENABLED: return sti.mps;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: return 9;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: return 0;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: return 132;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: return 32;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: return 1024;
    case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID: return 0;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: return 0x10 + phys;
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID: return 0;
    default: return 0; /* every other attribute: 0 (documented) */
  }
}

CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev) {
  if (!pi || (int)attrib <= 0 || attrib >= CU_DEVICE_ATTRIBUTE_MAX) return CUDA_ERROR_INVALID_VALUE;
  CUresult rc = sti_enter();
  if (rc) return rc;
  if (sti_valid_ordinal(dev))
    *pi = sti_attribute(attrib, sti.vis[dev]);
  else
    rc = CUDA_ERROR_INVALID_DEVICE;
  sti_leave();
  return rc;
}

/* Every pair of distinct stand-in devices can reach each other (all of them
 * are host memory); a device is not its own peer. */
CUresult cuDeviceCanAccessPeer(int *can, CUdevice dev, CUdevice peer) {
  if (!can) return CUDA_ERROR_INVALID_VALUE;
  CUresult rc = sti_enter();
  if (rc) return rc;
  if (sti_valid_ordinal(dev) && sti_valid_ordinal(peer))
    *can = dev != peer;
  else
    rc = CUDA_ERROR_INVALID_DEVICE;
  sti_leave();
  return rc;
}
