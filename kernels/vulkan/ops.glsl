/* The op table's expression language (include/anygrad/optable.h) in GLSL,
 * single precision, and the switch of every elementwise sub-op generated from
 * the table. GLSL lacks erf, log1p, expm1, C's fmod and a tanh that is safe
 * for large arguments: they are written here. The sub-op is the
 * specialization constant OP, so each pipeline holds one op's code. */
layout(constant_id = 0) const int OP = 0;

#if defined(AG_PORTABLE)
/* The portable prelude (docs/numerics.md): the vocabulary is pmath's, one
 * text with every other backend's; GLSL's `/`, sqrt, exp ... are never used
 * on floats. PFLOAT: a precise float, so every expression stored in one is
 * NoContraction. */
#include "anygrad/pmath.h"
#define PFLOAT precise float
#define E_K(c) float(c)
#define E_EXP(v) agp_exp(v)
#define E_LOG(v) agp_log(v)
#define E_SQRT(v) agp_sqrt(v)
#define E_RSQRT(v) agp_rsqrt(v)
#define E_TANH(v) agp_tanh(v)
#define E_SIGMOID(v) agp_sigmoid(v)
#define E_ERF(v) agp_erf(v)
#define E_SIN(v) agp_sin(v)
#define E_COS(v) agp_cos(v)
#define E_LOG1P(v) agp_log1p(v)
#define E_EXPM1(v) agp_expm1(v)
#define E_FLOOR(v) agp_floor(v)
#define E_CEIL(v) agp_ceil(v)
#define E_RINT(v) agp_rint(v)
#define E_ABS(v) agp_abs(v)
#define E_POW(u, v) agp_pow(u, v)
#define E_ATAN2(u, v) agp_atan2(u, v)
#define E_FMOD(u, v) agp_fmod(u, v)
#define E_DIV(u, v) agp_div(u, v)
#else
#define PFLOAT float

/* 2^k for k in [-126, 127], from the bits */
float e_pow2i(int k) { return uintBitsToFloat(uint(k + 127) << 23); }
/* e^r - 1 on |r| <= ln2/2 + a little: Taylor to r^9 (the next term is
 * under 2^-32 of the result), r itself for the leading term so tiny
 * arguments are exact */
float e_expm1_poly(float r) {
  return r + r * r * (0.5 + r * (1.6666667e-1 + r * (4.1666668e-2 + r * (8.3333338e-3 +
             r * (1.3888889e-3 + r * (1.9841270e-4 + r * (2.4801587e-5 + r * 2.7557319e-6)))))));
}
/* expm1 within a few ulp everywhere: GLSL's exp and log are accurate only
 * in absolute terms near 0 and 1 on some drivers (lavapipe: expm1(1e-6)
 * was 4.6 % off), and u = exp(x) times x overflowed from x = 85. Cody-Waite
 * reduction x = k ln2 + r, then 2^k (expm1(r) + 1) - 1 in the order that
 * rounds once (FreeBSD's expm1f); infinity only past ln(FLT_MAX). */
float e_expm1(float x) {
  if (ag_isnan(x) || x == 0.0) return x; /* expm1(-0) = -0 */
  if (x > 88.8) return F_INF;
  if (x < -30.0) return -1.0;
  if (abs(x) <= 0.34657359) return e_expm1_poly(x);
  int k = int(roundEven(x * 1.4426950409));
  precise float r = (x - float(k) * 6.9313812256e-01) - float(k) * 9.0580006145e-06;
  precise float p = e_expm1_poly(r);
  if (k > 24) return (p + 1.0) * e_pow2i(k - 1) * 2.0; /* the -1 is below half an ulp */
  if (k < -24) return (p + 1.0) * e_pow2i(k) - 1.0;
  precise float t = e_pow2i(k);
  return t * p + (t - 1.0); /* t p and t - 1 exact: one rounding */
}
/* log1p within a few ulp everywhere (FreeBSD's log1pf): u = 1 + x split
 * into 2^k (1 + f) with the rounding of 1 + x carried in c; log(1 + f)
 * from s = f / (2 + f) and a series in s^2. No product of x and log(u)
 * (log1p(3e38) was inf), no GLSL log near 1 (log1p(-5e-8) was -8.66e-8).
 * The rules at the edges are C's: log1p(-1) = -inf, log1p(x < -1) and
 * log1p(-inf) NaN, log1p(-0) = -0. */
float e_log1p(float x) {
  if (ag_isnan(x) || x == 0.0) return x;
  if (x == -1.0) return -F_INF;
  if (x < -1.0) return F_NAN; /* log1p(-inf) is NaN */
  if (ag_isinf(x)) return x;
  int k = 0;
  precise float f = x, c = 0.0;
  if (x < -0.29289323 || x > 0.41421357) {
    precise float u = 1.0 + x;
    uint bits = floatBitsToUint(u);
    k = int(bits >> 23) - 127;
    /* the significand in [sqrt(2)/2, sqrt(2)) */
    uint m = bits & 0x007fffffu;
    if (m > 0x3504f3u) {
      k += 1;
      f = uintBitsToFloat(m | 0x3f000000u) - 1.0;
    } else {
      f = uintBitsToFloat(m | 0x3f800000u) - 1.0;
    }
    /* the rounding error of 1 + x, relative to u */
    c = k > 0 ? (1.0 - (u - x)) / u : (x - (u - 1.0)) / u;
    if (k > 24) c = 1.0 / u; /* u - x is 0 or past f32's precision */
  }
  precise float hfsq = 0.5 * f * f, s = f / (2.0 + f), z = s * s;
  precise float R = z * (6.6666668e-1 + z * (4.0000000e-1 + z * (2.8571429e-1 + z * (2.2222222e-1 +
                    z * 1.8181818e-1))));
  precise float lf = f - (hfsq - s * (hfsq + R));
  if (k == 0) return lf;
  return float(k) * 6.9313812256e-01 + (lf + (c + float(k) * 9.0580006145e-06));
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
/* C's fmod, exact (its result is always representable): |a| reduced by
 * |b| 2^n, the largest multiple below it, one binade at a time; each step
 * is an exact subtraction (Sterbenz), at most 277 of them (the exponent
 * range). a - trunc(a/b)*b lost the quotient past 2^24 (fmod(2^30, 3) was
 * 0). The sign of a, a zero result too. */
float e_fmod(float a, float b) {
  if (b == 0.0 || ag_isinf(a) || ag_isnan(a) || ag_isnan(b)) return F_NAN;
  if (ag_isinf(b)) return a;
  precise float r = abs(a), bb = abs(b);
  if (r < bb) return a;
  int eb, er;
  frexp(bb, eb);
  for (int i = 0; i < 280 && r >= bb; i++) {
    frexp(r, er);
    precise float t = ldexp(bb, er - eb);
    if (t > r) t = ldexp(bb, er - eb - 1);
    r -= t;
  }
  return ag_copysign(r, a);
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
#define E_DIV(u, v) ((u) / (v))
#endif

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

PFLOAT unary_f(float x, float s0, float s1) {
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

PFLOAT binary_f(float a, float b, float s0, float s1) {
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
