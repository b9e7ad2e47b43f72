/* The portable math library for the portable kernels (portable.cu):
 * pmath.h (include/anygrad/pmath.h), the one text every backend includes,
 * with AGP_NATIVE_DIVSQRT (this compiler's / and sqrtf are correctly
 * rounded in portable.cu). Until that header is present this maps the same
 * names to the device's libm, as the CPU backend's cpu_pmath_local.h does:
 * gpuemu then computes with the host's libm, the CPU's, which keeps the
 * bitwise tests running, but it is not the cross-device contract. */
#ifndef AG_GPU_PMATH_LOCAL_CUH
#define AG_GPU_PMATH_LOCAL_CUH

#if defined(__has_include)
#if __has_include("anygrad/pmath.h")
#define AG_GPU_HAVE_PMATH 1
#endif
#endif

#if defined(AG_GPU_HAVE_PMATH)
#define AGP_NATIVE_DIVSQRT 1
#include "anygrad/pmath.h"
#else
#define AGP_LOCAL_FN static __device__ __forceinline__ float
AGP_LOCAL_FN agp_exp(float x) { return expf(x); }
AGP_LOCAL_FN agp_log(float x) { return logf(x); }
AGP_LOCAL_FN agp_sqrt(float x) { return sqrtf(x); }
AGP_LOCAL_FN agp_rsqrt(float x) { return 1.0f / sqrtf(x); }
AGP_LOCAL_FN agp_tanh(float x) { return tanhf(x); }
AGP_LOCAL_FN agp_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
AGP_LOCAL_FN agp_erf(float x) { return erff(x); }
AGP_LOCAL_FN agp_sin(float x) { return sinf(x); }
AGP_LOCAL_FN agp_cos(float x) { return cosf(x); }
AGP_LOCAL_FN agp_log1p(float x) { return log1pf(x); }
AGP_LOCAL_FN agp_expm1(float x) { return expm1f(x); }
AGP_LOCAL_FN agp_floor(float x) { return floorf(x); }
AGP_LOCAL_FN agp_ceil(float x) { return ceilf(x); }
AGP_LOCAL_FN agp_rint(float x) { return rintf(x); }
AGP_LOCAL_FN agp_abs(float x) { return fabsf(x); }
AGP_LOCAL_FN agp_pow(float x, float y) { return powf(x, y); }
AGP_LOCAL_FN agp_atan2(float y, float x) { return atan2f(y, x); }
AGP_LOCAL_FN agp_fmod(float x, float y) { return fmodf(x, y); }
AGP_LOCAL_FN agp_div(float x, float y) { return x / y; }
#undef AGP_LOCAL_FN
#endif

#endif
