/* What an importer asks for, as driver access descriptors. */
#include <stddef.h>
#include <string.h>

#include "common/error.h"
#include "common/structsize.h"
#include "driver/device.h"
#include "vmm/vmm.h"

vmmipc_result_t vmmipc__access_resolve(const vmmipc__cu_t *cu, const vmmipc_access_t *a, const char *op,
                                       CUmemAccessDesc *out, int *num) {
  vmmipc_access_t def = VMMIPC_ACCESS_DEFAULT;
  if (!a) a = &def;
  if (a->struct_size < offsetof(vmmipc_access_t, devices) + sizeof a->devices ||
      a->struct_size > VMMIPC__STRUCT_SIZE_MAX)
    return vmmipc__error(VMMIPC_ERR_INVALID_ARG,
                         "%s: access.struct_size is %zu; hint: initialise it with VMMIPC_ACCESS_DEFAULT", op,
                         a->struct_size);
  vmmipc_result_t r = vmmipc__struct_tail_ok(a, a->struct_size, sizeof *a, op, "access");
  if (r) return r;
  if (a->prot != VMMIPC_PROT_READWRITE && a->prot != VMMIPC_PROT_READ)
    return vmmipc__error(VMMIPC_ERR_INVALID_ARG, "%s: access.prot %d is neither VMMIPC_PROT_READ nor _READWRITE", op,
                         (int)a->prot);
  if (a->num_devices < 0 || a->num_devices > VMMIPC__MAX_ACCESS || (a->num_devices > 0 && !a->devices))
    return vmmipc__error(VMMIPC_ERR_INVALID_ARG,
                         "%s: access.num_devices %d is out of range 0..%d or access.devices is NULL", op,
                         a->num_devices, VMMIPC__MAX_ACCESS);
  CUmemAccess_flags flags = a->prot == VMMIPC_PROT_READ ? CU_MEM_ACCESS_FLAGS_PROT_READ
                                                        : CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  int n = 0;
  if (a->num_devices == 0) {
    int dev;
    if ((r = vmmipc__current_device(cu, op, &dev))) return r;
    out[0].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    out[0].location.id = dev;
    out[0].flags = flags;
    *num = 1;
    return VMMIPC_SUCCESS;
  }
  for (int i = 0; i < a->num_devices; i++) {
    int dev;
    if ((r = vmmipc__device_by_uuid(cu, &a->devices[i], op, &dev))) return r;
    int dup = 0;
    for (int j = 0; j < n; j++) dup |= out[j].location.id == dev;
    if (dup) continue;
    out[n].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    out[n].location.id = dev;
    out[n].flags = flags;
    n++;
  }
  *num = n;
  return VMMIPC_SUCCESS;
}
