/* What tests/pmath_opencl_test.c and tests/pmath_vulkan_test.c share: the
 * functions of include/anygrad/pmath.h in the order of their kernels'
 * switch (tests/pmath_vk.comp lists the same), the host's result of each
 * (the C build of the same header), the inputs, and the comparison: the
 * same bits, NaN matching any NaN. */
#ifndef PMATH_CROSS_H
#define PMATH_CROSS_H
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define AGP_NATIVE_DIVSQRT 1
#include "anygrad/pmath.h"

/* the functions, in the kernel's switch order */
#define PM_FUNCS(X)                                                  \
  X(exp, agp_exp(x)) X(exp2, agp_exp2(x)) X(expm1, agp_expm1(x))     \
  X(log, agp_log(x)) X(log1p, agp_log1p(x)) X(tanh, agp_tanh(x))     \
  X(sigmoid, agp_sigmoid(x)) X(erf, agp_erf(x)) X(sin, agp_sin(x))   \
  X(cos, agp_cos(x)) X(sinh, agp_sinh(x)) X(cosh, agp_cosh(x))       \
  X(sqrt, agp_sqrt(x)) X(rsqrt, agp_rsqrt(x)) X(div, agp_div(x, y))  \
  X(pow, agp_pow(x, y)) X(atan2, agp_atan2(x, y))                    \
  X(fmod, agp_fmod(x, y)) X(div_built, agp_div_built(x, y))          \
  X(sqrt_built, agp_sqrt_built(x)) X(floor, agp_floor(x))            \
  X(rint, agp_rint(x)) X(f16, agp_f16_bits_to_f32(agp_f32_to_f16_bits(x))) \
  X(bf16, agp_bf16_bits_to_f32(agp_f32_to_bf16_bits(x)))

static float host_eval(int f, float x, float y) {
  float r = 0;
  int k = 0;
#define PM_HOST(name, expr) \
  if (f == k++) return expr;
  PM_FUNCS(PM_HOST)
#undef PM_HOST
  return r;
}

static const char *g_names[] = {
#define PM_NAME(name, expr) #name,
    PM_FUNCS(PM_NAME)
#undef PM_NAME
};
#define PM_COUNT ((int)(sizeof g_names / sizeof *g_names))

static uint64_t g_rng = 0x243f6a8885a308d3ull;
static uint32_t rnd32(void) {
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 7;
  g_rng ^= g_rng << 17;
  return (uint32_t)(g_rng >> 16);
}
static float fb(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static uint32_t bf(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

/* inputs: a quarter any bits, the rest in the ranges models use */
static float input(int64_t i) {
  switch (i & 3) {
  case 0: return fb(rnd32());
  case 1: return (float)((int32_t)rnd32()) * 0x1p-28f;    /* |x| < 8 */
  case 2: return (float)((int32_t)rnd32()) * 0x1p-24f;    /* |x| < 128 */
  default: return fb(rnd32() & 0x3fffffffu) * (rnd32() & 1 ? 1.0f : -1.0f); /* |x| < 2 */
  }
}

/* the inputs of function f: a quarter any bits, the rest in the ranges
 * models use; pow mostly with x > 0 and moderate y */
static void pm_inputs(int f, float *xs, float *ys, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    xs[i] = input(i);
    ys[i] = input(i + 1);
  }
  /* sin, cos: an eighth above 2^20 (the Payne-Hanek reduction) */
  if (!strcmp(g_names[f], "sin") || !strcmp(g_names[f], "cos"))
    for (int64_t i = 3; i < n; i += 8) xs[i] = fb(0x49800001u + rnd32() % (0x7f7fffffu - 0x49800000u)) * (rnd32() & 1 ? 1.0f : -1.0f);
  if (!strcmp(g_names[f], "pow"))
    for (int64_t i = 0; i < n; i++) {
      if (i & 1) xs[i] = fabsf(xs[i]);
      if (i % 3) ys[i] = (float)((int32_t)rnd32()) * 0x1p-27f;
    }
}

/* the device's results against the host's: the number that differ */
static int64_t pm_compare(int f, const float *xs, const float *ys, const float *out, int64_t n) {
  int64_t bad = 0;
  for (int64_t i = 0; i < n; i++) {
    float h = host_eval(f, xs[i], ys[i]);
    if (isnan(h) && isnan(out[i])) continue;
    if (bf(h) != bf(out[i])) {
      if (bad < 3) printf("  %s(%a, %a): device %a, host %a\n", g_names[f], xs[i], ys[i], out[i], h);
      bad++;
    }
  }
  printf("%-11s %lld mismatches\n", g_names[f], (long long)bad);
  return bad;
}
#endif
