/* DLPack: the common in-memory tensor structure (dmlc/dlpack), the layout of
 * the v0.8 header (DLManagedTensor) plus the versioned struct of v1.0
 * (DLManagedTensorVersioned), written from the specification. The include
 * guard is the reference header's, so a program that includes the official
 * dlpack.h first gets those identical definitions and this file adds
 * nothing. anygrad's functions that use them are in anygrad/interop.h. */
#ifndef DLPACK_DLPACK_H_
#define DLPACK_DLPACK_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
#define DLPACK_EXTERN_C extern "C"
#else
#define DLPACK_EXTERN_C
#endif
#define DLPACK_DLL

/* The version of the header this file follows, and its ABI version. */
#define DLPACK_VERSION 80
#define DLPACK_ABI_VERSION 1

#ifdef __cplusplus
extern "C" {
#endif

/* Where the memory lives. */
typedef enum {
  kDLCPU = 1,          /* host memory */
  kDLCUDA = 2,         /* CUDA device memory */
  kDLCUDAHost = 3,     /* pinned host memory from cudaMallocHost */
  kDLOpenCL = 4,       /* OpenCL buffer; data is a cl_mem */
  kDLVulkan = 7,
  kDLMetal = 8,
  kDLVPI = 9,
  kDLROCM = 10,        /* ROCm/HIP device memory */
  kDLROCMHost = 11,    /* pinned host memory from hipMallocHost */
  kDLExtDev = 12,
  kDLCUDAManaged = 13, /* CUDA managed (unified) memory */
  kDLOneAPI = 14,
  kDLWebGPU = 15,
  kDLHexagon = 16,
} DLDeviceType;

typedef struct {
  DLDeviceType device_type;
  int32_t device_id; /* ordinal within the device type */
} DLDevice;

typedef enum {
  kDLInt = 0U,
  kDLUInt = 1U,
  kDLFloat = 2U,
  kDLOpaqueHandle = 3U,
  kDLBfloat = 4U,
  kDLComplex = 5U,
  kDLBool = 6U,
} DLDataTypeCode;

/* Element type: code (DLDataTypeCode), bits per lane, lanes per element. */
typedef struct {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
} DLDataType;

/* A tensor view. strides are in elements and may be NULL (compact
 * row-major). byte_offset is added to data, which for OpenCL is a handle. */
typedef struct {
  void *data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t *shape;
  int64_t *strides;
  uint64_t byte_offset;
} DLTensor;

/* A DLTensor with its owner: the consumer calls deleter(self) exactly once
 * when it no longer needs the memory (deleter may be NULL). */
typedef struct DLManagedTensor {
  DLTensor dl_tensor;
  void *manager_ctx;
  void (*deleter)(struct DLManagedTensor *self);
} DLManagedTensor;

/* ---- DLPack 1.0: the versioned struct ---- */
#define DLPACK_MAJOR_VERSION 1
#define DLPACK_MINOR_VERSION 0

typedef struct {
  uint32_t major;
  uint32_t minor;
} DLPackVersion;

/* The tensor must not be written through. */
#define DLPACK_FLAG_BITMASK_READ_ONLY (1UL << 0UL)
/* The producer copied the data; writes are not seen by the source. */
#define DLPACK_FLAG_BITMASK_IS_COPIED (1UL << 1UL)

typedef struct DLManagedTensorVersioned {
  DLPackVersion version;
  void *manager_ctx;
  void (*deleter)(struct DLManagedTensorVersioned *self);
  uint64_t flags;
  DLTensor dl_tensor;
} DLManagedTensorVersioned;

#ifdef __cplusplus
}
#endif
#endif
