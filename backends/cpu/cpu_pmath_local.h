/* The portable math library for the CPU's portable kernels: pmath.h
 * (include/anygrad/pmath.h), the one text every backend includes. Until
 * that header is present this maps the same names to libm, which keeps the
 * build and the bitwise self-consistency tests running but is not the
 * cross-backend contract. */
#ifndef AG_CPU_PMATH_LOCAL_H
#define AG_CPU_PMATH_LOCAL_H

#if defined(__has_include)
#if __has_include("anygrad/pmath.h")
#define AG_CPU_HAVE_PMATH 1
#endif
#endif

#if defined(AG_CPU_HAVE_PMATH)
#define AGP_NATIVE_DIVSQRT 1
#include "anygrad/pmath.h"
#else
#include <math.h>
static inline float agp_exp(float x) { return expf(x); }
static inline float agp_log(float x) { return logf(x); }
static inline float agp_sqrt(float x) { return sqrtf(x); }
static inline float agp_rsqrt(float x) { return 1.0f / sqrtf(x); }
static inline float agp_tanh(float x) { return tanhf(x); }
static inline float agp_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
static inline float agp_erf(float x) { return erff(x); }
static inline float agp_sin(float x) { return sinf(x); }
static inline float agp_cos(float x) { return cosf(x); }
static inline float agp_log1p(float x) { return log1pf(x); }
static inline float agp_expm1(float x) { return expm1f(x); }
static inline float agp_floor(float x) { return floorf(x); }
static inline float agp_ceil(float x) { return ceilf(x); }
static inline float agp_rint(float x) { return rintf(x); }
static inline float agp_abs(float x) { return fabsf(x); }
static inline float agp_pow(float x, float y) { return powf(x, y); }
static inline float agp_atan2(float y, float x) { return atan2f(y, x); }
static inline float agp_fmod(float x, float y) { return fmodf(x, y); }
static inline float agp_div(float x, float y) { return x / y; }
#endif

#endif
