/* The host branch of vendor.h: the CUDA device language and the runtime calls
 * that kernels/gpu/ uses, implemented on the CPU so the same kernel source
 * compiled by g++/clang++ runs in the gpuemu backend module. A block's
 * threads are cooperative fibers (emu_exec.cc); the runtime (emu_runtime.cc)
 * keeps device memory in host memory. Only what the sources use is here. */
#ifndef AG_GPU_EMU_H
#define AG_GPU_EMU_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <functional>
#include <tuple>
#include <type_traits>

#define AG_GPU_BACKEND_NAME "gpuemu"
#define AG_GPU_API "gpuemu"
/* The module's registry properties (ag_backend 4.1; runtime.cu's table):
 * device memory is host memory; no DLPack form and no collective library of
 * its own; never chosen by ag_device_best(). */
#define AG_GPU_FLAGS (AG_BACKEND_F_HOST_MEMORY | AG_BACKEND_F_ADDRESSABLE)
#define AG_GPU_DLPACK_DEVICE 0
#define AG_GPU_PRIORITY (-1)
#define AG_GPU_COLLECTIVE NULL
#define AG_GPU_DESCRIPTION                                                                            \
  "for testing and debugging: runs the CUDA/HIP kernel source on the CPU with GPU semantics (barriers, " \
  "warp shuffles, launch limits); never chosen as best device"
#define AGEMU_HIDDEN __attribute__((visibility("hidden")))

/* ---- the device language ---- */
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __launch_bounds__(...)
/* constant memory is read-only data; the tables are `static const` */
#define __constant__
/* Shared memory is per block: one OS thread runs one block at a time, so a
 * thread-local static is exactly the block's copy. The check build puts a
 * 64-byte redzone in front of each array; the checker finds both in the
 * module's symbol table (emu_check.cc). */
#ifdef AGEMU_CHECK
#define AGEMU_CAT2(a, b) a##b
#define AGEMU_CAT(a, b) AGEMU_CAT2(a, b)
#define __shared__                                                                               \
  static thread_local __attribute__((used, aligned(16))) char AGEMU_CAT(agemu_rz_, __COUNTER__)[64]; \
  static thread_local __attribute__((aligned(16)))
#else
#define __shared__ static thread_local
#endif

struct uint3 { unsigned x, y, z; };
struct uint4 { unsigned x, y, z, w; };
struct dim3 {
  unsigned x, y, z;
  dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
};
static inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) {
  uint4 r = {x, y, z, w};
  return r;
}

namespace agemu {
/* What the current fiber sees as its built-in variables. */
struct builtins {
  uint3 thread_idx;
  uint3 block_idx;
  dim3 block_dim;
  dim3 grid_dim;
  int warp;
};
/* __thread, not thread_local: no C++ TLS init wrapper on every access */
AGEMU_HIDDEN extern __thread builtins *tl_cur;
AGEMU_HIDDEN void syncthreads(const char *file, int line);
enum shfl_kind { SHFL_XOR = 0, SHFL_DOWN = 1, SHFL_UP = 2, SHFL_IDX = 3 };
/* Exchange 8 bytes with another lane of the warp (CUDA semantics for width
 * and mask; mask 0 means every lane of the warp, as HIP's unmasked forms). */
AGEMU_HIDDEN uint64_t shfl(uint64_t v, int kind, int arg, int width, uint64_t mask, const char *file, int line);
template <typename T> static inline T shfl_t(T v, int kind, int arg, int width, uint64_t mask, const char *file, int line) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value, "shuffle of a value over 8 bytes");
  uint64_t u = 0;
  memcpy(&u, &v, sizeof v);
  u = shfl(u, kind, arg, width, mask, file, line);
  T r;
  memcpy(&r, &u, sizeof r);
  return r;
}
} // namespace agemu

#define threadIdx (agemu::tl_cur->thread_idx)
#define blockIdx (agemu::tl_cur->block_idx)
#define blockDim (agemu::tl_cur->block_dim)
#define gridDim (agemu::tl_cur->grid_dim)
#define __syncthreads() agemu::syncthreads(__FILE__, __LINE__)
#define __shfl_xor_sync(mask, v, m, w) agemu::shfl_t((v), agemu::SHFL_XOR, (m), (w), (mask), __FILE__, __LINE__)
#define __shfl_down_sync(mask, v, d, w) agemu::shfl_t((v), agemu::SHFL_DOWN, (d), (w), (mask), __FILE__, __LINE__)
#define __shfl_up_sync(mask, v, d, w) agemu::shfl_t((v), agemu::SHFL_UP, (d), (w), (mask), __FILE__, __LINE__)
#define __shfl_sync(mask, v, l, w) agemu::shfl_t((v), agemu::SHFL_IDX, (l), (w), (mask), __FILE__, __LINE__)
/* The warp width is a property of the device the kernel runs on (gpuemu:0
 * has CUDA's 32, gpuemu:1 HIP's 64), so it is read at run time. */
#define AGK_WARP (agemu::tl_cur->warp)
#define AGK_SHFL_XOR(v, m, w) agemu::shfl_t((v), agemu::SHFL_XOR, (m), (w), 0, __FILE__, __LINE__)

/* ---- intrinsics ---- */
struct __half { uint16_t x; };
static inline __half __ushort_as_half(unsigned short u) { __half h; h.x = u; return h; }
static inline unsigned short __half_as_ushort(__half h) { return h.x; }
extern "C" uint16_t ag_f32_to_f16(float f);
extern "C" float ag_f16_to_f32(uint16_t h);
static inline float __half2float(__half h) { return ag_f16_to_f32(h.x); }
static inline __half __float2half_rn(float f) { __half h; h.x = ag_f32_to_f16(f); return h; }
static inline float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
static inline unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
static inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((uint64_t)a * b) >> 32); }
/* The module is built with -ffp-contract=off: every product rounds. */
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fadd_rn(float a, float b) { return a + b; }
/* The device's __expf is an approximation (2 + 1.16*|x| ulp); libm's expf is
 * correctly rounded in practice, so results may differ in the last bits. */
static inline float agemu_expf(float x) { return expf(x); }
#define __expf(x) agemu_expf(x)
/* Blocks of a launch run on one OS thread and the host reads kernel results
 * only after a synchronising call (a mutex hand-off in deferred mode), so a
 * compiler barrier gives what the device's fences give here. */
static inline void __threadfence_system(void) { __atomic_signal_fence(__ATOMIC_SEQ_CST); }
static inline void __threadfence(void) { __atomic_signal_fence(__ATOMIC_SEQ_CST); }
/* Real atomics: streams may run on different OS threads. */
static inline float atomicAdd(float *p, float v) {
  uint32_t old = __atomic_load_n((uint32_t *)p, __ATOMIC_RELAXED), want;
  do {
    want = __float_as_uint(__uint_as_float(old) + v);
  } while (!__atomic_compare_exchange_n((uint32_t *)p, &old, want, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
  return __uint_as_float(old);
}
static inline double atomicAdd(double *p, double v) {
  uint64_t old = __atomic_load_n((uint64_t *)p, __ATOMIC_RELAXED), want;
  do {
    double d;
    memcpy(&d, &old, 8);
    d += v;
    memcpy(&want, &d, 8);
  } while (!__atomic_compare_exchange_n((uint64_t *)p, &old, want, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
  double r;
  memcpy(&r, &old, 8);
  return r;
}
static inline int atomicAdd(int *p, int v) { return __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }
static inline unsigned atomicAdd(unsigned *p, unsigned v) { return __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }
static inline unsigned long long atomicAdd(unsigned long long *p, unsigned long long v) {
  return __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
}
static inline int atomicMax(int *p, int v) {
  int old = __atomic_load_n(p, __ATOMIC_RELAXED);
  while (old < v && !__atomic_compare_exchange_n(p, &old, v, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
  return old;
}
static inline int atomicCAS(int *p, int cmp, int v) {
  __atomic_compare_exchange_n(p, &cmp, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
  return cmp;
}

/* ---- the runtime API (emu_runtime.cc) ---- */
struct agemu_stream;
struct agemu_event;
typedef int gpuError_t;
typedef agemu_stream *gpuStream_t;
typedef agemu_event *gpuEvent_t;
typedef struct gpuDeviceProp {
  char name[256];
  size_t totalGlobalMem;
  int multiProcessorCount;
  int major, minor;
  int warpSize;
  int maxThreadsPerBlock;
  size_t sharedMemPerBlock;
} gpuDeviceProp;

enum {
  gpuSuccess = 0,
  gpuErrorInvalidValue = 1,
  gpuErrorMemoryAllocation = 2,
  gpuErrorInvalidConfiguration = 9,
  gpuErrorInvalidDevice = 101,
  gpuErrorNoDevice = 100,
  gpuErrorNotReady = 600,
  gpuErrorLaunchFailure = 719,
  gpuErrorNotSupported = 801,
  gpuErrorInvalidResourceHandle = 400,
  gpuErrorIllegalState = 401,
};
enum { gpuMemcpyHostToDevice = 1, gpuMemcpyDeviceToHost = 2, gpuMemcpyDeviceToDevice = 3 };
#define gpuHostAllocPortable 1u
#define gpuHostAllocMapped 2u
#define gpuStreamNonBlocking 1u
#define gpuEventDefault 0u
#define gpuEventDisableTiming 2u

#define AGEMU_API extern "C" AGEMU_HIDDEN
AGEMU_API const char *gpuGetErrorString(gpuError_t e);
AGEMU_API const char *gpuGetErrorName(gpuError_t e);
AGEMU_API gpuError_t gpuGetLastError(void);
AGEMU_API gpuError_t gpuPeekAtLastError(void);
AGEMU_API gpuError_t gpuGetDeviceCount(int *n);
/* The current device is per OS thread (0 until set), as in CUDA and HIP: a
 * program's own calls on the thread see what the module leaves there. */
AGEMU_API gpuError_t gpuSetDevice(int dev);
AGEMU_API gpuError_t gpuGetDevice(int *dev);
AGEMU_API gpuError_t gpuGetDeviceProperties(gpuDeviceProp *p, int dev);
AGEMU_API gpuError_t gpuMemGetInfo(size_t *free_b, size_t *total_b);
AGEMU_API gpuError_t gpuMalloc(void **p, size_t bytes);
AGEMU_API gpuError_t gpuFree(void *p);
AGEMU_API gpuError_t gpuHostAlloc(void **p, size_t bytes, unsigned flags);
AGEMU_API gpuError_t gpuFreeHost(void *p);
AGEMU_API gpuError_t gpuHostGetDevicePointer(void **dev, void *host, unsigned flags);
AGEMU_API gpuError_t gpuMemcpyAsync(void *dst, const void *src, size_t bytes, int kind, gpuStream_t s);
AGEMU_API gpuError_t gpuMemsetAsync(void *dst, int v, size_t bytes, gpuStream_t s);
AGEMU_API gpuError_t gpuStreamCreateWithFlags(gpuStream_t *s, unsigned flags);
AGEMU_API gpuError_t gpuStreamDestroy(gpuStream_t s);
AGEMU_API gpuError_t gpuStreamSynchronize(gpuStream_t s);
AGEMU_API gpuError_t gpuStreamQuery(gpuStream_t s);
AGEMU_API gpuError_t gpuStreamWaitEvent(gpuStream_t s, gpuEvent_t e, unsigned flags);
AGEMU_API gpuError_t gpuEventCreateWithFlags(gpuEvent_t *e, unsigned flags);
AGEMU_API gpuError_t gpuEventDestroy(gpuEvent_t e);
AGEMU_API gpuError_t gpuEventRecord(gpuEvent_t e, gpuStream_t s);
AGEMU_API gpuError_t gpuEventQuery(gpuEvent_t e);
AGEMU_API gpuError_t gpuEventSynchronize(gpuEvent_t e);
AGEMU_API gpuError_t gpuEventElapsedTime(float *ms, gpuEvent_t a, gpuEvent_t b);
AGEMU_API gpuError_t gpuDeviceSynchronize(void);
/* The detail of the last execution error on this thread's device (the
 * kernel, block and what went wrong), "" if none. */
AGEMU_API const char *agemu_error_detail(void);
AGEMU_API void agemu_error_detail_clear(void);

/* ---- launches ---- */
namespace agemu {
/* Validate the configuration against the stream's device (CUDA or HIP
 * limits) and run or queue body over the grid. */
AGEMU_HIDDEN gpuError_t launch(gpuStream_t s, dim3 grid, dim3 block, size_t smem, const void *kernel,
                               std::function<void()> body);
} // namespace agemu

/* One launch spelling for nvcc, hipcc and the host (vendor.h). The arguments
 * are converted to the kernel's parameter types and copied, as a real launch
 * copies them into the parameter buffer; a configuration error is left for
 * gpuGetLastError(), as after <<<>>>. */
template <typename... P, typename... A>
static inline void agk_launch(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, gpuStream_t stream,
                              A... args) {
  std::tuple<typename std::decay<P>::type...> params(static_cast<P>(args)...);
  (void)agemu::launch(stream, grid, block, smem, (const void *)kernel,
                      [kernel, params]() { std::apply(kernel, params); });
}

#endif
