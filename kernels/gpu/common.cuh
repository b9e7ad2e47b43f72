/* Device helpers shared by the kernel sources: storage types and their
 * f32 conversions, Philox 4x32-10, warp/block reductions, and the host-side
 * dispatch over dtypes. f16/bf16 are storage types: every kernel computes in
 * f32 and rounds to nearest even on store, as the CPU backend does; f64
 * computes in f64 (agk_c<T> is a kernel's compute type). */
#ifndef AG_GPU_COMMON_CUH
#define AG_GPU_COMMON_CUH

#include <math.h>
#include <string.h>
#include <stdint.h>

#include "gpu.h"

#define AGK_DEV __device__ __forceinline__

/* Distinct storage types so templates can tell f16 from bf16, and bool
 * (one byte, 0 or 1) from u8. */
struct agk_f16 { uint16_t x; };
struct agk_bf16 { uint16_t x; };
struct agk_bool { uint8_t x; };

/* The compute type of floating storage T: f32, or f64 for f64. */
template <typename T> struct agk_cty { typedef float type; };
template <> struct agk_cty<double> { typedef double type; };
template <typename T> using agk_c = typename agk_cty<T>::type;

AGK_DEV float agk_tof(float v) { return v; }
AGK_DEV double agk_tof(double v) { return v; }
AGK_DEV float agk_tof(int32_t v) { return (float)v; }
AGK_DEV float agk_tof(agk_f16 v) { return __half2float(__ushort_as_half(v.x)); }
AGK_DEV float agk_tof(agk_bf16 v) { return __uint_as_float((uint32_t)v.x << 16); }
AGK_DEV float agk_tof(int64_t v) { return (float)v; }
AGK_DEV float agk_tof(uint8_t v) { return (float)v; }
AGK_DEV float agk_tof(agk_bool v) { return (float)v.x; }

/* From the compute type (f32; f64 for T = double) to storage T. */
template <typename T> AGK_DEV T agk_fromf(agk_c<T> f);
template <> AGK_DEV float agk_fromf<float>(float f) { return f; }
template <> AGK_DEV double agk_fromf<double>(double f) { return f; }
/* saturating, NaN -> 0, as the CPU reference */
template <> AGK_DEV int32_t agk_fromf<int32_t>(float f) {
  if (!(f == f)) return 0;
  if (f >= 2147483647.f) return 2147483647;
  if (f <= -2147483648.f) return (-2147483647 - 1);
  return (int32_t)f;
}
AGK_DEV int32_t agk_sat_i32(double v) {
  if (!(v == v)) return 0;
  if (v >= 2147483647.0) return 2147483647;
  if (v <= -2147483648.0) return (-2147483647 - 1);
  return (int32_t)v;
}
template <> AGK_DEV int64_t agk_fromf<int64_t>(float f) {
  if (!(f == f)) return 0;
  if (f >= 9223372036854775807.f) return 0x7fffffffffffffffLL;
  if (f <= -9223372036854775808.f) return (-0x7fffffffffffffffLL - 1);
  return (int64_t)f;
}
template <> AGK_DEV uint8_t agk_fromf<uint8_t>(float f) {
  if (!(f > 0.f)) return 0; /* NaN too */
  return f >= 255.f ? 255 : (uint8_t)f;
}
template <> AGK_DEV agk_bool agk_fromf<agk_bool>(float f) {
  agk_bool r;
  r.x = f != 0.f; /* NaN is true */
  return r;
}
template <> AGK_DEV agk_f16 agk_fromf<agk_f16>(float f) {
  agk_f16 r;
  r.x = __half_as_ushort(__float2half_rn(f));
  return r;
}
template <> AGK_DEV agk_bf16 agk_fromf<agk_bf16>(float f) {
  uint32_t u = __float_as_uint(f);
  agk_bf16 r;
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    r.x = (uint16_t)((u >> 16) | 0x40u); /* quiet NaN, sign kept */
  } else {
    u += 0x7fffu + ((u >> 16) & 1u);
    r.x = (uint16_t)(u >> 16);
  }
  return r;
}

/* Integer storage (i32, i64, u8, bool) widened to and narrowed from the
 * i64 compute type: narrowing keeps the low bits (two's complement wrap),
 * bool stores v != 0. Casts go through agk_widen/agk_narrow: integers stay
 * exact between integer dtypes; floats narrow with saturation. */
AGK_DEV long long agk_toi(int32_t v) { return v; }
AGK_DEV long long agk_toi(int64_t v) { return v; }
AGK_DEV long long agk_toi(uint8_t v) { return v; }
AGK_DEV long long agk_toi(agk_bool v) { return v.x; }
template <typename T> AGK_DEV T agk_fromi(long long v);
template <> AGK_DEV int32_t agk_fromi<int32_t>(long long v) { return (int32_t)(uint32_t)(unsigned long long)v; }
template <> AGK_DEV int64_t agk_fromi<int64_t>(long long v) { return (int64_t)v; }
template <> AGK_DEV uint8_t agk_fromi<uint8_t>(long long v) { return (uint8_t)(unsigned long long)v; }
template <> AGK_DEV agk_bool agk_fromi<agk_bool>(long long v) {
  agk_bool r;
  r.x = v != 0;
  return r;
}
template <> AGK_DEV float agk_fromi<float>(long long v) { return (float)v; }
template <> AGK_DEV double agk_fromi<double>(long long v) { return (double)v; }
template <> AGK_DEV agk_f16 agk_fromi<agk_f16>(long long v) { return agk_fromf<agk_f16>((float)v); }
template <> AGK_DEV agk_bf16 agk_fromi<agk_bf16>(long long v) { return agk_fromf<agk_bf16>((float)v); }
AGK_DEV float agk_widen(float v) { return v; }
AGK_DEV double agk_widen(double v) { return v; }
AGK_DEV float agk_widen(agk_f16 v) { return agk_tof(v); }
AGK_DEV float agk_widen(agk_bf16 v) { return agk_tof(v); }
AGK_DEV long long agk_widen(int32_t v) { return v; }
AGK_DEV long long agk_widen(int64_t v) { return v; }
AGK_DEV long long agk_widen(uint8_t v) { return v; }
AGK_DEV long long agk_widen(agk_bool v) { return v.x; }
template <typename T> AGK_DEV T agk_narrow(float f) { return agk_fromf<T>(f); }
template <typename T> AGK_DEV T agk_narrow(long long v) { return agk_fromi<T>(v); }
/* v saturated into integer storage T's range (bool: v != 0), as a cast from
 * a floating value (the AFFINE op's and fill's rule) */
template <typename T> AGK_DEV T agk_sat(double v);
template <> AGK_DEV int32_t agk_sat<int32_t>(double v) { return agk_sat_i32(v); }
template <> AGK_DEV int64_t agk_sat<int64_t>(double v) {
  if (!(v == v)) return 0;
  if (v >= 9223372036854775807.0) return 0x7fffffffffffffffLL;
  if (v <= -9223372036854775808.0) return (-0x7fffffffffffffffLL - 1);
  return (int64_t)v;
}
template <> AGK_DEV uint8_t agk_sat<uint8_t>(double v) { return !(v > 0) ? 0 : v >= 255 ? 255 : (uint8_t)v; }
template <> AGK_DEV agk_bool agk_sat<agk_bool>(double v) {
  agk_bool r;
  r.x = v != 0;
  return r;
}
/* From f64: to f32/f16/bf16 through f32 (as the CPU converts), to integers
 * saturating (NaN -> 0; bool: v != 0). */
template <typename T> struct agk_from_f64 { static AGK_DEV T go(double v) { return agk_fromf<T>((float)v); } };
template <> struct agk_from_f64<double> { static AGK_DEV double go(double v) { return v; } };
template <> struct agk_from_f64<int32_t> { static AGK_DEV int32_t go(double v) { return agk_sat<int32_t>(v); } };
template <> struct agk_from_f64<int64_t> { static AGK_DEV int64_t go(double v) { return agk_sat<int64_t>(v); } };
template <> struct agk_from_f64<uint8_t> { static AGK_DEV uint8_t go(double v) { return agk_sat<uint8_t>(v); } };
template <> struct agk_from_f64<agk_bool> { static AGK_DEV agk_bool go(double v) { return agk_sat<agk_bool>(v); } };
template <typename T> AGK_DEV T agk_narrow(double v) { return agk_from_f64<T>::go(v); }

/* Compute type: f32 for floating storage, int for i32 (exact integer ops). */
template <typename T> struct agk_acc { typedef float type; };
template <> struct agk_acc<int32_t> { typedef int32_t type; };
template <> struct agk_acc<double> { typedef double type; };

template <typename T> AGK_DEV typename agk_acc<T>::type agk_ld(const T *p) { return agk_tof(*p); }
template <> AGK_DEV int32_t agk_ld<int32_t>(const int32_t *p) { return *p; }
template <typename T> AGK_DEV void agk_st(T *p, float v) { *p = agk_fromf<T>(v); }
AGK_DEV void agk_st(int32_t *p, int32_t v) { *p = v; }

/* Philox 4x32-10 (Salmon et al.), counter (lo, hi, 0, 0), key (seed lo, hi). */
AGK_DEV uint4 agk_philox(uint64_t counter, uint64_t seed) {
  uint32_t c0 = (uint32_t)counter, c1 = (uint32_t)(counter >> 32), c2 = 0, c3 = 0;
  uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
#pragma unroll
  for (int r = 0; r < 10; r++) {
    uint32_t hi0 = __umulhi(0xD2511F53u, c0), lo0 = 0xD2511F53u * c0;
    uint32_t hi1 = __umulhi(0xCD9E8D57u, c2), lo1 = 0xCD9E8D57u * c2;
    uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c0 = n0; c1 = lo1; c2 = n2; c3 = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return make_uint4(c0, c1, c2, c3);
}
AGK_DEV uint32_t agk_lane(uint4 v, int lane) {
  return lane == 0 ? v.x : lane == 1 ? v.y : lane == 2 ? v.z : v.w;
}
/* uniform in [0, 1) from the top 24 bits (tensor.h). */
AGK_DEV float agk_u01(uint32_t bits) { return (float)(bits >> 8) * (1.0f / 16777216.0f); }

/* ---- reductions ---- */
/* Math in the compute type (f32 or f64). agk_fexp is the device's fast
 * exponential in f32 and exp in f64. */
AGK_DEV float agk_fexp(float v) { return __expf(v); }
AGK_DEV double agk_fexp(double v) { return exp(v); }
AGK_DEV float agk_log(float v) { return logf(v); }
AGK_DEV double agk_log(double v) { return log(v); }
AGK_DEV float agk_sqrt(float v) { return sqrtf(v); }
AGK_DEV double agk_sqrt(double v) { return sqrt(v); }
AGK_DEV float agk_fmax(float a, float b) { return fmaxf(a, b); }
AGK_DEV double agk_fmax(double a, double b) { return fmax(a, b); }
template <typename C> AGK_DEV C agk_warp_sum(C v, int width) {
  for (int m = width / 2; m > 0; m >>= 1) v += AGK_SHFL_XOR(v, m, width);
  return v;
}
/* Block-wide sum; every thread gets the result. sh needs 32 elements.
 * Safe to call repeatedly (leading barrier protects sh). */
template <typename C> AGK_DEV C agk_block_sum(C v, C *sh) {
  v = agk_warp_sum(v, AGK_WARP);
  int lane = threadIdx.x % AGK_WARP, w = threadIdx.x / AGK_WARP;
  int nw = (blockDim.x + AGK_WARP - 1) / AGK_WARP;
  __syncthreads();
  if (lane == 0) sh[w] = v;
  __syncthreads();
  v = 0;
  for (int i = 0; i < nw; i++) v += sh[i];
  return v;
}

/* Record an index error in the stream's error word (first writer's fields
 * may mix with another's; every writer reports a genuinely bad index). */
AGK_DEV void agk_report(ag_kernel_error *e, int kop, long long index, long long limit) {
  volatile ag_kernel_error *v = e;
  if (v->code == 0) {
    v->kop = kop;
    v->index = index;
    v->limit = limit;
    __threadfence_system();
    v->code = AG_ERR_INDEX;
  }
}

/* Blocks of a 1-D grid of `threads`-thread blocks for n work items,
 * per_block items per block, bounded by what every vendor accepts in
 * gridDim.x (CUDA: 2^31-1 blocks; HIP: gridDim.x * blockDim.x < 2^32
 * work-items) and by cap (0: no cap; agk_wave gives a few waves of resident
 * blocks). Every kernel launched with it loops over its work with stride
 * gridDim.x (grid-stride), so a bounded grid still does all the work. */
static inline unsigned agk_blocks(long long n, long long per_block, int threads, long long cap) {
  long long b = (n + per_block - 1) / per_block;
  long long lim = 0xffffffffLL / threads;
  if (lim > 0x7fffffffLL) lim = 0x7fffffffLL;
  if (cap > 0 && lim > cap) lim = cap;
  if (b > lim) b = lim;
  return b < 1 ? 1u : (unsigned)b;
}
/* Four waves of resident `threads`-thread blocks (2048 threads per SM/CU):
 * the grid bound of grid-stride launches. More blocks only add scheduling. */
static inline long long agk_wave(const agk_env *env, int threads) {
  return (long long)(env->sm_count > 0 ? env->sm_count : 80) * (2048 / threads) * 4;
}

/* Host-side dispatch of a functor template over one float dtype (f64
 * computes in f64). */
#define AGK_DISPATCH_FLOAT(dt, T, ...)                      \
  switch (dt) {                                            \
    case AG_F32: { typedef float T; __VA_ARGS__; break; }  \
    case AG_F64: { typedef double T; __VA_ARGS__; break; } \
    case AG_F16: { typedef agk_f16 T; __VA_ARGS__; break; } \
    case AG_BF16: { typedef agk_bf16 T; __VA_ARGS__; break; } \
    default: return gpuErrorNotSupported;                  \
  }
/* ... over f32, f16 and bf16: kernels that compute in f32 only (conv2d,
 * pooling) */
#define AGK_DISPATCH_F32ISH(dt, T, ...)                     \
  switch (dt) {                                            \
    case AG_F32: { typedef float T; __VA_ARGS__; break; }  \
    case AG_F16: { typedef agk_f16 T; __VA_ARGS__; break; } \
    case AG_BF16: { typedef agk_bf16 T; __VA_ARGS__; break; } \
    default: return gpuErrorNotSupported;                  \
  }
#define AGK_DISPATCH_ALL(dt, T, ...)                        \
  switch (dt) {                                            \
    case AG_F32: { typedef float T; __VA_ARGS__; break; }  \
    case AG_F64: { typedef double T; __VA_ARGS__; break; } \
    case AG_F16: { typedef agk_f16 T; __VA_ARGS__; break; } \
    case AG_BF16: { typedef agk_bf16 T; __VA_ARGS__; break; } \
    case AG_I32: { typedef int32_t T; __VA_ARGS__; break; } \
    default: return gpuErrorNotSupported;                  \
  }
/* ... over every dtype the GPU kernels hold */
#define AGK_DISPATCH_EVERY(dt, T, ...)                      \
  switch (dt) {                                            \
    case AG_F32: { typedef float T; __VA_ARGS__; break; }  \
    case AG_F64: { typedef double T; __VA_ARGS__; break; } \
    case AG_F16: { typedef agk_f16 T; __VA_ARGS__; break; } \
    case AG_BF16: { typedef agk_bf16 T; __VA_ARGS__; break; } \
    case AG_I32: { typedef int32_t T; __VA_ARGS__; break; } \
    case AG_I64: { typedef int64_t T; __VA_ARGS__; break; } \
    case AG_U8: { typedef uint8_t T; __VA_ARGS__; break; } \
    case AG_BOOL: { typedef agk_bool T; __VA_ARGS__; break; } \
    default: return gpuErrorNotSupported;                  \
  }
/* ... over the integer dtypes that compute in i64 */
#define AGK_DISPATCH_INT64(dt, T, ...)                      \
  switch (dt) {                                            \
    case AG_I64: { typedef int64_t T; __VA_ARGS__; break; } \
    case AG_U8: { typedef uint8_t T; __VA_ARGS__; break; } \
    case AG_BOOL: { typedef agk_bool T; __VA_ARGS__; break; } \
    default: return gpuErrorNotSupported;                  \
  }

/* Element n of an index operand (embedding indices, cross-entropy
 * targets): i32, or i64 when idx64. */
AGK_DEV long long agk_idx(const void *p, int idx64, long long n) {
  return idx64 ? (long long)((const int64_t *)p)[n] : (long long)((const int32_t *)p)[n];
}

#endif
