/* Zero-copy interop: a tensor's memory for the caller's own kernels,
 * tensors over memory the caller owns, and DLPack export/import (PyTorch,
 * JAX, CuPy, NumPy...). Nothing here copies data. */
#ifndef ANYGRAD_INTEROP_H
#define ANYGRAD_INTEROP_H

#include <stdint.h>

#include "anygrad/device.h"
#include "anygrad/dlpack.h"
#include "anygrad/status.h"
#include "anygrad/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Where a tensor's element [0,...,0] lives. Borrowed: valid while the
 * tensor (or a view of its storage) is alive. */
typedef struct ag_tensor_memory {
  /* Address of element 0 for backends whose memory is pointer-addressable:
   * the host pointer on the CPU, the device pointer on CUDA and HIP. NULL on
   * OpenCL, whose buffers are handles. */
  void *ptr;
  /* The allocation the element lives in: the base pointer of the storage on
   * CPU/CUDA/HIP, the cl_mem of the buffer on OpenCL. */
  void *handle;
  size_t byte_offset; /* element 0 is at handle + byte_offset */
  size_t nbytes;      /* bytes of the whole storage from handle + its start */
  /* The stream anygrad's work on this tensor is ordered on (the device's
   * current stream): the caller's own kernels must run after the work
   * queued there (ag_stream_synchronize, or an event). */
  ag_stream *stream;
} ag_tensor_memory;

/* Fill *out_mem for t. Does not synchronize.
 * Errors: AG_ERR_INVALID for NULL arguments. */
AG_API ag_status ag_tensor_memory_get(const ag_tensor *t, ag_tensor_memory *out_mem);

/* Address of t's element [0,...,0]: host pointer on the CPU, device pointer
 * on CUDA and HIP. Borrowed; does not synchronize (order through
 * ag_stream_current of the tensor's device). NULL with AG_ERR_UNSUPPORTED on
 * OpenCL (an OpenCL buffer is a cl_mem handle, not an address: use
 * ag_tensor_memory_get), NULL with AG_ERR_INVALID if t is NULL. */
AG_API void *ag_tensor_data_ptr(const ag_tensor *t);

/* Called once when anygrad no longer uses wrapped memory: `data` as given to
 * ag_from_blob, `ctx` the caller's context. */
typedef void (*ag_deleter_fn)(void *data, void *ctx);

/* A tensor over memory the caller owns, without copying: `data` is a host
 * pointer (CPU), device pointer (CUDA, HIP) or cl_mem (OpenCL) of device d.
 * strides are in elements (NULL: contiguous row-major) and must be >= 0.
 * The tensor and its views keep the memory; when the last of them is
 * released anygrad synchronizes the device (so no queued kernel still uses
 * the memory, a counted host sync) and calls deleter(data, ctx); deleter
 * may be NULL when the caller frees the memory itself after that point.
 * The memory must stay valid and large enough for every element until then.
 * Ownership: new reference (see tensor.h). On error nothing is called and
 * the caller still owns data. Errors: AG_ERR_INVALID (NULL data with
 * elements, negative stride, strides whose span overflows int64 bytes),
 * AG_ERR_SHAPE (sizes whose byte size overflows), AG_ERR_DTYPE,
 * AG_ERR_DEVICE / AG_ERR_UNAVAILABLE for a bad device. */
AG_API ag_tensor *ag_from_blob(ag_device d, ag_dtype dt, int ndim, const int64_t *shape,
                               const int64_t *strides, void *data, ag_deleter_fn deleter,
                               void *ctx);

/* ---- DLPack ----
 * Device types: kDLCPU <-> the CPU backend, kDLCUDA <-> cuda:<id>,
 * kDLROCM <-> hip:<id>, kDLOpenCL (export only: a cl_mem is only valid in
 * the context that made it), kDLCUDAHost/kDLROCMHost/kDLCUDAManaged import
 * as CPU memory. dtypes, both ways: f32, f16, f64 (kDLFloat 32/16/64),
 * bf16 (kDLBfloat 16), i32, i64 (kDLInt 32/64), u8 (kDLUInt 8) and bool
 * (kDLBool 8), every ag_dtype; other DLPack types (int8/16, uint16/32/64,
 * complex, float8, ...) are refused by name (AG_ERR_DTYPE), lanes != 1 too. */

/* Export t without copying. Synchronizes t's device stream first (a counted
 * host sync) so the consumer sees the finished values. Strides, shape and
 * the view's offset are preserved. *out_managed is owned by the caller, who
 * hands it to exactly one consumer; the consumer calls its deleter once,
 * which drops the reference the export took on t's storage. t itself stays
 * owned by the caller. Errors: AG_ERR_INVALID (NULL), AG_ERR_OOM. */
AG_API ag_status ag_to_dlpack(ag_tensor *t, DLManagedTensor **out_managed);
/* The same as DLManagedTensorVersioned (version 1.0, flags 0). */
AG_API ag_status ag_to_dlpack_versioned(ag_tensor *t, DLManagedTensorVersioned **out_managed);

/* A tensor over a DLPack tensor's memory, without copying. On success
 * anygrad owns `managed` and calls managed->deleter(managed) once, when the
 * last tensor over the memory is released (after synchronizing the device,
 * as ag_from_blob). On error the caller still owns `managed` (nothing is
 * called). byte_offset and strides are honoured; negative strides, lanes
 * != 1, unsupported dtypes and devices are refused with their names
 * (AG_ERR_DTYPE, AG_ERR_UNSUPPORTED, AG_ERR_INVALID). A read-only versioned
 * tensor is refused (anygrad tensors are writable). New reference. */
AG_API ag_tensor *ag_from_dlpack(DLManagedTensor *managed);
AG_API ag_tensor *ag_from_dlpack_versioned(DLManagedTensorVersioned *managed);

#ifdef __cplusplus
}
#endif
#endif
