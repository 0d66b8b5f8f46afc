/* The DLPack ABI (https://dmlc.github.io/dlpack/latest/c_api.html), written
 * here from the published specification: the classic DLManagedTensor and
 * the versioned DLManagedTensorVersioned of DLPack 1.x. Only what vmmipc's
 * views and vmmipc.wrap need. Layouts and values are fixed by the spec. */
#ifndef VMP_DLPACK_H
#define VMP_DLPACK_H

#include <stdint.h>

/* The version this producer implements (DLManagedTensorVersioned.version). */
#define VMP_DLPACK_MAJOR 1u
#define VMP_DLPACK_MINOR 0u

/* Capsule names: the producer's, and what a consumer renames them to. */
#define VMP_DLPACK_CAPSULE "dltensor"
#define VMP_DLPACK_CAPSULE_USED "used_dltensor"
#define VMP_DLPACK_CAPSULE_VERSIONED "dltensor_versioned"
#define VMP_DLPACK_CAPSULE_VERSIONED_USED "used_dltensor_versioned"

typedef enum {
  kDLCPU = 1,
  kDLCUDA = 2,         /* CUDA device memory: every vmmipc view */
  kDLCUDAHost = 3,
  kDLCUDAManaged = 13,
} DLDeviceType;

typedef struct {
  DLDeviceType device_type;
  int32_t device_id;   /* the CUDA ordinal */
} DLDevice;

typedef enum {
  kDLInt = 0,
  kDLUInt = 1,
  kDLFloat = 2,
  kDLOpaqueHandle = 3,
  kDLBfloat = 4,
  kDLComplex = 5,
  kDLBool = 6,
} DLDataTypeCode;

typedef struct {
  uint8_t code;        /* a DLDataTypeCode */
  uint8_t bits;
  uint16_t lanes;
} DLDataType;

typedef struct {
  void *data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t *shape;
  int64_t *strides;    /* in elements; NULL: compact row-major */
  uint64_t byte_offset;
} DLTensor;

/* Classic (pre-1.0) managed tensor, capsule "dltensor". */
typedef struct DLManagedTensor {
  DLTensor dl_tensor;
  void *manager_ctx;
  void (*deleter)(struct DLManagedTensor *self);
} DLManagedTensor;

typedef struct {
  uint32_t major;
  uint32_t minor;
} DLPackVersion;

#define DLPACK_FLAG_BITMASK_READ_ONLY (UINT64_C(1) << 0)
#define DLPACK_FLAG_BITMASK_IS_COPIED (UINT64_C(1) << 1)
#define DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED (UINT64_C(1) << 2)

/* Versioned managed tensor (DLPack >= 1.0), capsule "dltensor_versioned". */
typedef struct DLManagedTensorVersioned {
  DLPackVersion version;
  void *manager_ctx;
  void (*deleter)(struct DLManagedTensorVersioned *self);
  uint64_t flags;
  DLTensor dl_tensor;
} DLManagedTensorVersioned;

#endif /* VMP_DLPACK_H */
