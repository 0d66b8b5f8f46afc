/* Device helpers over the driver table. */
#ifndef VMMIPC_DRIVER_DEVICE_H
#define VMMIPC_DRIVER_DEVICE_H

#include "driver/cu.h"

#ifdef __cplusplus
extern "C" {
#endif

vmmipc_result_t vmmipc__device_check(const vmmipc__cu_t *cu, int ordinal, const char *op);
/* Ordinal of the current context's device; an error names `op` if none. */
vmmipc_result_t vmmipc__current_device(const vmmipc__cu_t *cu, const char *op, int *ordinal);
/* Ordinal of the visible device with this UUID; an error names the UUID. */
vmmipc_result_t vmmipc__device_by_uuid(const vmmipc__cu_t *cu, const vmmipc_uuid_t *uuid, const char *op,
                                       int *ordinal);

#ifdef __cplusplus
}
#endif
#endif
