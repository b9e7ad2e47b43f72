/* The op table's expression language (include/anygrad/optable.h) in GLSL,
 * single precision, and the switch of every elementwise sub-op generated from
 * the table. GLSL lacks erf, log1p, expm1, C's fmod and a tanh that is safe
 * for large arguments: they are written here. The sub-op is the
 * specialization constant OP, so each pipeline holds one op's code. */
layout(constant_id = 0) const int OP = 0;

float e_expm1(float x) {
  /* Kahan's: exact where exp(x) rounds to 1, accurate near 0 */
  precise float u = exp(x);
  if (u == 1.0) return x;
  precise float um1 = u - 1.0;
  if (um1 == -1.0) return -1.0;
  if (ag_isinf(u)) return u;
  return um1 * x / log(u);
}
float e_log1p(float x) {
  precise float u = 1.0 + x;
  if (u == 1.0) return x;
  if (ag_isinf(u)) return u > 0.0 ? u : F_NAN; /* log1p(-inf) is NaN */
  precise float d = u - 1.0;
  return log(u) * x / d;
}
/* the sign of x kept for -0 (C's tanh(-0) is -0); NaN propagates */
float e_tanh(float x) {
  float ax = abs(x);
  if (ax > 15.0) return ag_copysign(1.0, x);
  float t = e_expm1(2.0 * ax);
  return ag_copysign(t / (t + 2.0), x);
}
/* erf: the Maclaurin series near 0 and 1 - erfc with erfc from Numerical
 * Recipes' Chebyshev fit (relative error < 1.2e-7) elsewhere. */
float e_erf(float x) {
  float ax = abs(x);
  if (ag_isnan(x)) return x;
  if (ax < 0.5) {
    float x2 = x * x;
    return x * (1.1283791670955126 + x2 * (-0.37612638903183754 + x2 * (0.11283791670955126 +
                x2 * (-0.026866170645131252 + x2 * (0.0052239776254421878 + x2 * -0.00085483270234508521)))));
  }
  if (ax > 6.0) return ag_copysign(1.0, x);
  float t = 1.0 / (1.0 + 0.5 * ax);
  float y = t * exp(-ax * ax - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 +
            t * (-0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 +
            t * (-0.82215223 + t * 0.17087277)))))))));
  return ag_copysign(1.0 - y, x);
}
/* C's pow (C11 F.10.4.4) for every case GLSL's pow leaves undefined (it is
 * defined for a finite base > 0 only): NaN, zeros with the sign rules of
 * odd integer exponents, infinite bases and exponents, negative bases. */
float e_pow(float a, float b) {
  if (b == 0.0 || a == 1.0) return 1.0; /* even for a NaN operand */
  if (ag_isnan(a) || ag_isnan(b)) return F_NAN;
  float aa = abs(a);
  if (ag_isinf(b)) {
    if (aa == 1.0) return 1.0;
    return (aa > 1.0) == (b > 0.0) ? F_INF : 0.0;
  }
  bool integral = b == floor(b), odd = integral && mod(b, 2.0) == 1.0;
  if (a == 0.0 || ag_isinf(a)) {
    /* |a|^b is 0 or inf; the sign of a survives an odd exponent */
    float r = (a == 0.0) == (b < 0.0) ? F_INF : 0.0;
    return odd ? ag_copysign(r, a) : r;
  }
  if (a < 0.0) {
    if (!integral) return F_NAN;
    float r = pow(aa, b);
    return odd ? -r : r;
  }
  return pow(a, b);
}
/* C's atan2 (C11 F.10.1.4): GLSL's atan(y, x) is undefined at x = y = 0,
 * and the zeros, infinities and signs are written out */
float e_atan2(float y, float x) {
  if (ag_isnan(x) || ag_isnan(y)) return F_NAN;
  const float pi = 3.14159265358979323846, pi_2 = 1.57079632679489661923;
  bool xneg = ag_signbit(x);
  float r;
  if (y == 0.0) r = xneg ? pi : 0.0;
  else if (ag_isinf(x)) r = ag_isinf(y) ? (xneg ? 0.75 * pi : 0.25 * pi) : (xneg ? pi : 0.0);
  else if (x == 0.0 || ag_isinf(y)) r = pi_2;
  else r = abs(atan(y, x));
  return ag_copysign(r, y);
}
/* C's fmod: a - trunc(a/b)*b, the sign of a (a zero result too) */
float e_fmod(float a, float b) {
  if (b == 0.0 || ag_isinf(a) || ag_isnan(a) || ag_isnan(b)) return F_NAN;
  if (ag_isinf(b)) return a;
  precise float q = trunc(a / b);
  precise float r = a - q * b;
  if (r != 0.0 && (r < 0.0) != (a < 0.0)) r += a < 0.0 ? -abs(b) : abs(b);
  if (abs(r) >= abs(b)) r -= a < 0.0 ? -abs(b) : abs(b);
  return r == 0.0 ? ag_copysign(0.0, a) : r;
}

#define E_K(c) float(c)
#define E_EXP(v) exp(v)
#define E_LOG(v) log(v)
#define E_SQRT(v) sqrt(v)
#define E_RSQRT(v) inversesqrt(v)
#define E_TANH(v) e_tanh(v)
#define E_SIGMOID(v) (1.0 / (1.0 + exp(-(v))))
#define E_ERF(v) e_erf(v)
#define E_SIN(v) sin(v)
#define E_COS(v) cos(v)
#define E_LOG1P(v) e_log1p(v)
#define E_EXPM1(v) e_expm1(v)
#define E_FLOOR(v) floor(v)
#define E_CEIL(v) ceil(v)
#define E_RINT(v) roundEven(v)
#define E_ABS(v) abs(v)
#define E_POW(u, v) e_pow(u, v)
#define E_ATAN2(u, v) e_atan2(u, v)
#define E_FMOD(u, v) e_fmod(u, v)

#include "anygrad/optable.h"

/* GLSL has no variadic macros: each list macro names every field. */
#define VK_U_CASE(ID, name, api, fwd, save, bwd, amp, ints, cost, dom, gdom, ts0, ts1) \
  case AG_U_##ID: return (fwd);
#define VK_B_CASE(ID, name, api, fwd, kind, grad, da, db, ints, cost, doma, domb) \
  case AG_B_##ID: return (fwd);
#define VK_SAVE_NG(ID, bwd)
#define VK_SAVE_N(ID, bwd) case AG_B_##ID##_BWD: { float g = a; return (bwd); }
#define VK_SAVE_X(ID, bwd) case AG_B_##ID##_BWD: { float g = a; float x = b; return (bwd); }
#define VK_SAVE_Y(ID, bwd) case AG_B_##ID##_BWD: { float g = a; float y = b; return (bwd); }
#define VK_BWD_CASE(ID, name, api, fwd, save, bwd, amp, ints, cost, dom, gdom, ts0, ts1) \
  VK_SAVE_##save(ID, bwd)
#define VK_PART_CORE(ID, da, db)
#define VK_PART_NG(ID, da, db)
#define VK_PART_PART(ID, da, db) case AG_B_##ID##_DA: return (da); case AG_B_##ID##_DB: return (db);
#define VK_PART_CASE(ID, name, api, fwd, kind, grad, da, db, ints, cost, doma, domb) \
  VK_PART_##grad(ID, da, db)
#define VK_CMP_ARITH(ID)
#define VK_CMP_CMP(ID) case AG_B_##ID:
#define VK_CMP_CASE(ID, name, api, fwd, kind, grad, da, db, ints, cost, doma, domb) VK_CMP_##kind(ID)

float unary_f(float x, float s0, float s1) {
  /* sign on the bits: lavapipe turned the table's select chain into -0 for
   * +0, -0 and NaN, where the CPU gives +0 */
  if (OP == AG_U_SIGN) {
    uint u = floatBitsToUint(x);
    return (u & 0x7fffffffu) == 0u || ag_isnan(x) ? 0.0 : uintBitsToFloat((u & 0x80000000u) | 0x3f800000u);
  }
  switch (OP) {
    AG_UNARY_OPS(VK_U_CASE)
  }
  return F_NAN;
}

bool cmp_op() {
  switch (OP) {
    AG_BINARY_OPS(VK_CMP_CASE) return true;
  }
  return false;
}

float binary_f(float a, float b, float s0, float s1) {
  /* The table's maximum and minimum test a != a and its comparisons are
   * IEEE's, which the execution mode guarantees; the NaN cases are tested
   * on the bits here as well, so they hold on a device without it. */
  if (OP == AG_B_MAX) return ag_isnan(a) || a > b ? a : b;
  if (OP == AG_B_MIN) return ag_isnan(a) || a < b ? a : b;
  if (cmp_op() && (ag_isnan(a) || ag_isnan(b))) return OP == AG_B_NE ? 1.0 : 0.0;
  switch (OP) {
    AG_BINARY_OPS(VK_B_CASE)
    AG_UNARY_OPS(VK_BWD_CASE)
    AG_BINARY_OPS(VK_PART_CASE)
  }
  return F_NAN;
}
