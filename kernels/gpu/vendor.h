/* The one vendor shim of the GPU kernels: maps a neutral gpu* spelling onto
 * the CUDA runtime (nvcc), the HIP runtime (hipcc) or the host emulator
 * (g++/clang++, AG_GPU_HOST), so kernels/gpu/ and the shared runtime glue are
 * a single source for all three. Only names that the sources use are mapped;
 * anything vendor-specific stays in backends/. */
#ifndef AG_GPU_VENDOR_H
#define AG_GPU_VENDOR_H

#if defined(AG_GPU_HOST)
#include "emu/emu.h"

#elif defined(__HIPCC__) || defined(AG_GPU_HIP)
#ifndef AG_GPU_HIP
#define AG_GPU_HIP 1
#endif
#include <hip/hip_fp16.h>
#include <hip/hip_runtime.h>

#define AG_GPU_BACKEND_NAME "hip"
#define AG_GPU_API "hip" /* prefix of runtime call names in messages */
/* The module's registry properties (ag_backend 4.1; runtime.cu's table). */
#define AG_GPU_FLAGS AG_BACKEND_F_ADDRESSABLE
#define AG_GPU_DLPACK_DEVICE kDLROCM
#define AG_GPU_PRIORITY 200
#define AG_GPU_COLLECTIVE "rccl"
#define AG_GPU_DESCRIPTION NULL
typedef hipError_t gpuError_t;
typedef hipStream_t gpuStream_t;
typedef hipEvent_t gpuEvent_t;
typedef hipDeviceProp_t gpuDeviceProp;
#define gpuSuccess hipSuccess
#define gpuErrorNotReady hipErrorNotReady
#define gpuErrorMemoryAllocation hipErrorOutOfMemory
#define gpuErrorNoDevice hipErrorNoDevice
#define gpuErrorInvalidValue hipErrorInvalidValue
#define gpuErrorNotSupported hipErrorNotSupported
#define gpuGetErrorString hipGetErrorString
#define gpuGetErrorName hipGetErrorName
#define gpuGetLastError hipGetLastError
#define gpuPeekAtLastError hipPeekAtLastError
#define gpuGetDeviceCount hipGetDeviceCount
#define gpuSetDevice hipSetDevice
#define gpuGetDevice hipGetDevice
#define gpuGetDeviceProperties hipGetDeviceProperties
#define gpuMemGetInfo hipMemGetInfo
#define gpuMalloc hipMalloc
#define gpuFree hipFree
#define gpuHostAlloc hipHostMalloc
#define gpuHostAllocPortable hipHostMallocPortable
#define gpuHostAllocMapped hipHostMallocMapped
#define gpuFreeHost hipHostFree
#define gpuHostGetDevicePointer hipHostGetDevicePointer
#define gpuMemcpyAsync hipMemcpyAsync
#define gpuMemsetAsync hipMemsetAsync
#define gpuMemcpyHostToDevice hipMemcpyHostToDevice
#define gpuMemcpyDeviceToHost hipMemcpyDeviceToHost
#define gpuMemcpyDeviceToDevice hipMemcpyDeviceToDevice
#define gpuStreamCreateWithFlags hipStreamCreateWithFlags
#define gpuStreamNonBlocking hipStreamNonBlocking
#define gpuStreamDestroy hipStreamDestroy
#define gpuStreamSynchronize hipStreamSynchronize
#define gpuStreamQuery hipStreamQuery
#define gpuStreamWaitEvent hipStreamWaitEvent
#define gpuEventCreateWithFlags hipEventCreateWithFlags
#define gpuEventDefault hipEventDefault
#define gpuEventDisableTiming hipEventDisableTiming
#define gpuEventDestroy hipEventDestroy
#define gpuEventRecord hipEventRecord
#define gpuEventQuery hipEventQuery
#define gpuEventSynchronize hipEventSynchronize
#define gpuEventElapsedTime hipEventElapsedTime
#define gpuDeviceSynchronize hipDeviceSynchronize
/* Wavefront width: 64 on CDNA, 32 on RDNA (which may also be built for
 * wave64), and one hipcc run builds several targets, so no single -D or
 * default can be right. HIP's warpSize is the supported way to read it in
 * device code: a per-target constant on older ROCm, a value the compiler
 * folds per target (__builtin_amdgcn_wavefrontsize) since
 * __AMDGCN_WAVEFRONT_SIZE was deprecated in LLVM 20 and removed in LLVM 22.
 * Nothing is assumed: without warpSize this does not compile. The kernels
 * use it only as a value (never an array bound or template argument), and
 * agg_init refuses a device whose width they do not handle (32 or 64). */
#define AGK_WARP warpSize
#define AGK_SHFL_XOR(v, m, w) __shfl_xor((v), (m), (w))

#else /* CUDA */
#define AG_GPU_CUDA 1
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#define AG_GPU_BACKEND_NAME "cuda"
#define AG_GPU_API "cuda"
#define AG_GPU_FLAGS AG_BACKEND_F_ADDRESSABLE
#define AG_GPU_DLPACK_DEVICE kDLCUDA
#define AG_GPU_PRIORITY 300
#define AG_GPU_COLLECTIVE "nccl"
#define AG_GPU_DESCRIPTION NULL
typedef cudaError_t gpuError_t;
typedef cudaStream_t gpuStream_t;
typedef cudaEvent_t gpuEvent_t;
typedef cudaDeviceProp gpuDeviceProp;
#define gpuSuccess cudaSuccess
#define gpuErrorNotReady cudaErrorNotReady
#define gpuErrorMemoryAllocation cudaErrorMemoryAllocation
#define gpuErrorNoDevice cudaErrorNoDevice
#define gpuErrorInvalidValue cudaErrorInvalidValue
#define gpuErrorNotSupported cudaErrorNotSupported
#define gpuGetErrorString cudaGetErrorString
#define gpuGetErrorName cudaGetErrorName
#define gpuGetLastError cudaGetLastError
#define gpuPeekAtLastError cudaPeekAtLastError
#define gpuGetDeviceCount cudaGetDeviceCount
#define gpuSetDevice cudaSetDevice
#define gpuGetDevice cudaGetDevice
#define gpuGetDeviceProperties cudaGetDeviceProperties
#define gpuMemGetInfo cudaMemGetInfo
#define gpuMalloc cudaMalloc
#define gpuFree cudaFree
#define gpuHostAlloc cudaHostAlloc
#define gpuHostAllocPortable cudaHostAllocPortable
#define gpuHostAllocMapped cudaHostAllocMapped
#define gpuFreeHost cudaFreeHost
#define gpuHostGetDevicePointer cudaHostGetDevicePointer
#define gpuMemcpyAsync cudaMemcpyAsync
#define gpuMemsetAsync cudaMemsetAsync
#define gpuMemcpyHostToDevice cudaMemcpyHostToDevice
#define gpuMemcpyDeviceToHost cudaMemcpyDeviceToHost
#define gpuMemcpyDeviceToDevice cudaMemcpyDeviceToDevice
#define gpuStreamCreateWithFlags cudaStreamCreateWithFlags
#define gpuStreamNonBlocking cudaStreamNonBlocking
#define gpuStreamDestroy cudaStreamDestroy
#define gpuStreamSynchronize cudaStreamSynchronize
#define gpuStreamQuery cudaStreamQuery
#define gpuStreamWaitEvent(s, e, f) cudaStreamWaitEvent((s), (e), (f))
#define gpuEventCreateWithFlags cudaEventCreateWithFlags
#define gpuEventDefault cudaEventDefault
#define gpuEventDisableTiming cudaEventDisableTiming
#define gpuEventDestroy cudaEventDestroy
#define gpuEventRecord cudaEventRecord
#define gpuEventQuery cudaEventQuery
#define gpuEventSynchronize cudaEventSynchronize
#define gpuEventElapsedTime cudaEventElapsedTime
#define gpuDeviceSynchronize cudaDeviceSynchronize
#define AGK_WARP 32 /* every CUDA architecture */
#define AGK_SHFL_XOR(v, m, w) __shfl_xor_sync(0xffffffffu, (v), (m), (w))
#endif

#if !defined(AG_GPU_HOST)
/* One launch spelling for nvcc, hipcc and the host emulator (emu/emu.h has
 * the host's). Like <<<>>> it returns nothing: a launch error is read with
 * gpuGetLastError() after one or several launches. */
template <typename... P, typename... A>
static inline void agk_launch(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, gpuStream_t stream,
                              A... args) {
  kernel<<<grid, block, smem, stream>>>(static_cast<P>(args)...);
}
#endif

#endif
