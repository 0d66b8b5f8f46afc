/* Devices: ordinals, UUIDs and the current context. */
#include "driver/device.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "common/error.h"

void vmmipc_uuid_format(const vmmipc_uuid_t *u, char out[VMMIPC_UUID_STRING_LEN]) {
  const unsigned char *b = u->bytes;
  snprintf(out, VMMIPC_UUID_STRING_LEN,
           "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2], b[3],
           b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
}

vmmipc_result_t vmmipc_device_count(int *count) {
  if (!count) return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "vmmipc_device_count: count is NULL");
  const vmmipc__cu_t *cu;
  vmmipc_result_t r = vmmipc__cu_load(&cu);
  if (r) return r;
  CUresult rc = cu->cuDeviceGetCount(count);
  if (rc) return vmmipc__cu_error(rc, NULL, "vmmipc_device_count: cuDeviceGetCount");
  return VMMIPC_SUCCESS;
}

vmmipc_result_t vmmipc__device_check(const vmmipc__cu_t *cu, int ordinal, const char *op) {
  int n = 0;
  CUresult rc = cu->cuDeviceGetCount(&n);
  if (rc) return vmmipc__cu_error(rc, NULL, "%s: cuDeviceGetCount", op);
  if (ordinal < 0 || ordinal >= n)
    return vmmipc__error(VMMIPC_ERR_INVALID_ARG,
                         "%s: device ordinal %d is out of range: this process sees %d device(s); hint: "
                         "ordinals are per process and follow CUDA_VISIBLE_DEVICES",
                         op, ordinal, n);
  return VMMIPC_SUCCESS;
}

vmmipc_result_t vmmipc_device_uuid(int ordinal, vmmipc_uuid_t *uuid) {
  if (!uuid) return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "vmmipc_device_uuid: uuid is NULL");
  const vmmipc__cu_t *cu;
  vmmipc_result_t r = vmmipc__cu_load(&cu);
  if (r) return r;
  if ((r = vmmipc__device_check(cu, ordinal, "vmmipc_device_uuid"))) return r;
  CUdevice dev;
  CUuuid u;
  CUresult rc = cu->cuDeviceGet(&dev, ordinal);
  if (!rc) rc = cu->cuDeviceGetUuid(&u, dev);
  if (rc) return vmmipc__cu_error(rc, NULL, "vmmipc_device_uuid: cuDeviceGetUuid(ordinal %d)", ordinal);
  memcpy(uuid->bytes, u.bytes, sizeof uuid->bytes);
  return VMMIPC_SUCCESS;
}

/* The primary contexts vmmipc_set_device retained, by ordinal (ordinals
 * beyond the table, which no machine has, are retained on every call). */
#define VMMIPC__CTX_SLOTS 256
static pthread_mutex_t vmmipc__ctx_mu = PTHREAD_MUTEX_INITIALIZER;
static CUcontext vmmipc__ctx[VMMIPC__CTX_SLOTS];

vmmipc_result_t vmmipc_set_device(int ordinal) {
  const vmmipc__cu_t *cu;
  vmmipc_result_t r = vmmipc__cu_load(&cu);
  if (r) return r;
  if ((r = vmmipc__device_check(cu, ordinal, "vmmipc_set_device"))) return r;
  CUdevice dev;
  CUcontext ctx;
  CUresult rc = cu->cuDeviceGet(&dev, ordinal);
  if (rc) return vmmipc__cu_error(rc, NULL, "vmmipc_set_device: cuDeviceGet(%d)", ordinal);
  /* The primary context is retained once per device and kept for the life
   * of the process, as the runtime's cudaSetDevice does: calling again
   * takes no further reference. */
  pthread_mutex_lock(&vmmipc__ctx_mu);
  ctx = ordinal < VMMIPC__CTX_SLOTS ? vmmipc__ctx[ordinal] : NULL;
  rc = CUDA_SUCCESS;
  if (!ctx) {
    rc = cu->cuDevicePrimaryCtxRetain(&ctx, dev);
    if (!rc && ordinal < VMMIPC__CTX_SLOTS) vmmipc__ctx[ordinal] = ctx;
  }
  pthread_mutex_unlock(&vmmipc__ctx_mu);
  if (rc) return vmmipc__cu_error(rc, NULL, "vmmipc_set_device: cuDevicePrimaryCtxRetain(device %d)", ordinal);
  rc = cu->cuCtxSetCurrent(ctx);
  if (rc) return vmmipc__cu_error(rc, NULL, "vmmipc_set_device: cuCtxSetCurrent(device %d)", ordinal);
  return VMMIPC_SUCCESS;
}

vmmipc_result_t vmmipc__current_device(const vmmipc__cu_t *cu, const char *op, int *ordinal) {
  CUcontext ctx = NULL;
  CUresult rc = cu->cuCtxGetCurrent(&ctx);
  if (rc) return vmmipc__cu_error(rc, NULL, "%s: cuCtxGetCurrent", op);
  if (!ctx)
    return vmmipc__error(VMMIPC_ERR_INVALID_ARG,
                         "%s: no CUDA context is current on this thread; hint: call vmmipc_set_device() "
                         "(or cudaSetDevice) first",
                         op);
  CUdevice dev;
  rc = cu->cuCtxGetDevice(&dev);
  if (rc) return vmmipc__cu_error(rc, NULL, "%s: cuCtxGetDevice", op);
  *ordinal = (int)dev;
  return VMMIPC_SUCCESS;
}

vmmipc_result_t vmmipc__device_by_uuid(const vmmipc__cu_t *cu, const vmmipc_uuid_t *uuid, const char *op,
                                       int *ordinal) {
  int n = 0;
  CUresult rc = cu->cuDeviceGetCount(&n);
  if (rc) return vmmipc__cu_error(rc, NULL, "%s: cuDeviceGetCount", op);
  for (int i = 0; i < n; i++) {
    CUdevice dev;
    CUuuid u;
    rc = cu->cuDeviceGet(&dev, i);
    if (!rc) rc = cu->cuDeviceGetUuid(&u, dev);
    if (rc) return vmmipc__cu_error(rc, NULL, "%s: cuDeviceGetUuid(ordinal %d)", op, i);
    if (memcmp(u.bytes, uuid->bytes, 16) == 0) {
      *ordinal = i;
      return VMMIPC_SUCCESS;
    }
  }
  char s[VMMIPC_UUID_STRING_LEN];
  vmmipc_uuid_format(uuid, s);
  return vmmipc__error(VMMIPC_ERR_INVALID_ARG,
                       "%s: device %s is not visible in this process (it sees %d device(s)); hint: check "
                       "CUDA_VISIBLE_DEVICES, or name a device this rank can see",
                       op, s, n);
}
