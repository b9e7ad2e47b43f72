/* The op table's expression language (include/anygrad/optable.h) in double
 * precision, for the f64 kernels (f64.comp, devices with shaderFloat64).
 * GLSL's exp, log, sin, cos, atan, pow and tanh exist only in single
 * precision, so the double versions are written here: range reduction and
 * series accurate to a few ulp on the table's test domains (the conformance
 * threshold of f64 is an NMSE of 1e-20), with C's results at the edges
 * (NaN, infinities, zeros). The sub-op is the specialization constant OP. */
layout(constant_id = 0) const int OP = 0;

#define D_INF packDouble2x32(uvec2(0u, 0x7ff00000u))
#define D_NAN packDouble2x32(uvec2(0u, 0x7ff80000u))
const double D_LN2_HI = 6.93147180369123816490e-01LF;
const double D_LN2_LO = 1.90821492927058770002e-10LF;
const double D_PI = 3.14159265358979311600e+00LF;
const double D_PI_2 = 1.57079632679489655800e+00LF;

bool d_signbit(double x) { return (unpackDouble2x32(x).y >> 31) != 0u; }
/* the bit tests of common.glsl for double */
bool ag_isnan(double x) {
  uvec2 u = unpackDouble2x32(x);
  uint hi = u.y & 0x7fffffffu;
  return hi > 0x7ff00000u || (hi == 0x7ff00000u && u.x != 0u);
}
bool ag_isinf(double x) {
  uvec2 u = unpackDouble2x32(x);
  return (u.y & 0x7fffffffu) == 0x7ff00000u && u.x == 0u;
}
bool ag_isfinite(double x) { return (unpackDouble2x32(x).y & 0x7ff00000u) != 0x7ff00000u; }
double ag_copysign(double x, double s) {
  uvec2 u = unpackDouble2x32(x);
  return packDouble2x32(uvec2(u.x, (u.y & 0x7fffffffu) | (unpackDouble2x32(s).y & 0x80000000u)));
}

/* 2^k * p for k in the double range, subnormal results included */
double d_scale(double p, int k) { return ldexp(ldexp(p, k / 2), k - k / 2); }

double d_exp(double x) {
  if (ag_isnan(x)) return x;
  if (x > 709.782712893384LF) return D_INF;
  if (x < -745.2LF) return 0.0LF;
  double k = roundEven(x * 1.44269504088896338700e+00LF);
  double r = (x - k * D_LN2_HI) - k * D_LN2_LO;
  /* Taylor series on |r| <= ln2/2: r^14/14! < 4e-18 */
  double p = 1.0LF, t = 1.0LF;
  for (int n = 1; n < 15; n++) {
    t *= r / double(n);
    p += t;
  }
  return d_scale(p, int(k));
}

double d_log(double x) {
  if (ag_isnan(x) || x < 0.0LF) return D_NAN;
  if (x == 0.0LF) return -D_INF;
  if (ag_isinf(x)) return x;
  int e;
  double m = frexp(x, e);
  if (m < 0.70710678118654752440LF) {
    m *= 2.0LF;
    e -= 1;
  }
  /* log(m) = 2 atanh(z), |z| <= 0.172: z^31 / 31 < 1e-25 */
  double z = (m - 1.0LF) / (m + 1.0LF), z2 = z * z, t = z, s = 0.0LF;
  for (int k = 0; k < 16; k++) {
    s += t / double(2 * k + 1);
    t *= z2;
  }
  return 2.0LF * s + double(e) * D_LN2_LO + double(e) * D_LN2_HI;
}

/* sin (c false) or cos (c true): Cody-Waite reduction by pi/2 in three
 * parts, Taylor series on [-pi/4, pi/4] */
double d_sincos(double x, bool c) {
  if (ag_isnan(x) || ag_isinf(x)) return D_NAN;
  if (x == 0.0LF) return c ? 1.0LF : x; /* sin(-0) = -0 */
  const double h1 = 1.57079632673412561417e+00LF, h2 = 6.07710050630396597660e-11LF,
               h3 = 2.02226624879595063154e-21LF;
  double q = roundEven(x * 6.36619772367581382433e-01LF);
  double r = ((x - q * h1) - q * h2) - q * h3, r2 = r * r;
  double cs = 1.0LF, sn = r, tc = 1.0LF, ts = r;
  for (int k = 1; k < 13; k++) {
    tc *= -r2 / double((2 * k - 1) * (2 * k));
    ts *= -r2 / double((2 * k) * (2 * k + 1));
    cs += tc;
    sn += ts;
  }
  int qi = (int(mod(q, 4.0LF)) + (c ? 1 : 0)) & 3;
  return qi == 0 ? sn : qi == 1 ? cs : qi == 2 ? -sn : -cs;
}

double d_expm1(double x) {
  if (ag_isnan(x) || x == 0.0LF) return x; /* expm1(-0) = -0 */
  if (abs(x) < 0.5LF) {
    double s = 0.0LF, t = 1.0LF;
    for (int n = 1; n < 22; n++) {
      t *= x / double(n);
      s += t;
    }
    return s;
  }
  return d_exp(x) - 1.0LF;
}

double d_log1p(double x) {
  precise double u = 1.0LF + x;
  if (ag_isnan(x) || u == 1.0LF) return x;
  if (ag_isinf(u)) return u > 0.0LF ? u : D_NAN; /* log1p(-inf) is NaN */
  if (u == 0.0LF) return -D_INF;
  precise double d = u - 1.0LF;
  return d_log(u) * (x / d);
}

double d_tanh(double x) {
  if (ag_isnan(x)) return x;
  double ax = abs(x);
  if (ax > 20.0LF) return ag_copysign(1.0LF, x);
  double t = d_expm1(2.0LF * ax);
  return ag_copysign(t / (t + 2.0LF), x);
}

/* erf(x) = 2/sqrt(pi) exp(-x^2) sum 2^n x^(2n+1) / (1*3*...*(2n+1)):
 * positive terms, no cancellation; erf = +-1 in double beyond 6 */
double d_erf(double x) {
  if (ag_isnan(x)) return x;
  double ax = abs(x);
  if (ax >= 6.0LF) return ag_copysign(1.0LF, x);
  double x2 = ax * ax, t = ax, s = ax;
  for (int n = 0; n < 400 && t > s * 1e-18LF; n++) {
    t *= 2.0LF * x2 / double(2 * n + 3);
    s += t;
  }
  double r = 1.12837916709551257390LF * d_exp(-x2) * s;
  if (r > 1.0LF) r = 1.0LF;
  return ag_copysign(r, x);
}

double d_atan(double x) {
  if (ag_isnan(x)) return x;
  double a = abs(x);
  if (ag_isinf(a)) return x < 0.0LF ? -D_PI_2 : D_PI_2;
  bool inv = a > 1.0LF;
  if (inv) a = 1.0LF / a;
  /* two halvings of the angle: |a| <= tan(pi/16) < 0.2 */
  a = a / (1.0LF + sqrt(1.0LF + a * a));
  a = a / (1.0LF + sqrt(1.0LF + a * a));
  double a2 = a * a, t = a, s = 0.0LF;
  for (int k = 0; k < 24; k++) {
    s += (k % 2 == 0 ? t : -t) / double(2 * k + 1);
    t *= a2;
  }
  s *= 4.0LF;
  if (inv) s = (D_PI_2 - s) + 6.12323399573676603587e-17LF;
  return ag_copysign(s, x);
}

/* C's atan2 (C11 F.10.1.4), as e_atan2 in ops.glsl */
double d_atan2(double y, double x) {
  if (ag_isnan(x) || ag_isnan(y)) return D_NAN;
  bool xneg = d_signbit(x);
  double r;
  if (y == 0.0LF) r = xneg ? D_PI : 0.0LF;
  else if (ag_isinf(x)) r = ag_isinf(y) ? (xneg ? 0.75LF * D_PI : 0.25LF * D_PI) : (xneg ? D_PI : 0.0LF);
  else if (x == 0.0LF || ag_isinf(y)) r = D_PI_2;
  else {
    r = abs(d_atan(y / x));
    if (x < 0.0LF) r = D_PI - r;
  }
  return ag_copysign(r, y);
}

/* C's pow (C11 F.10.4.4), as e_pow in ops.glsl */
double d_pow(double a, double b) {
  if (b == 0.0LF || a == 1.0LF) return 1.0LF;
  if (ag_isnan(a) || ag_isnan(b)) return D_NAN;
  double aa = abs(a);
  if (ag_isinf(b)) {
    if (aa == 1.0LF) return 1.0LF;
    return (aa > 1.0LF) == (b > 0.0LF) ? D_INF : 0.0LF;
  }
  bool integral = b == floor(b), odd = integral && mod(b, 2.0LF) == 1.0LF;
  if (a == 0.0LF || ag_isinf(a)) {
    double r = (a == 0.0LF) == (b < 0.0LF) ? D_INF : 0.0LF;
    return odd ? ag_copysign(r, a) : r;
  }
  if (a < 0.0LF && !integral) return D_NAN;
  double r = d_exp(b * d_log(aa));
  return a < 0.0LF && odd ? -r : r;
}

/* C's fmod, exact, as e_fmod in ops.glsl: at most 2098 exact steps (the
 * exponent range); a - trunc(a/b)*b lost the quotient past 2^53 */
double d_fmod(double a, double b) {
  if (b == 0.0LF || ag_isinf(a) || ag_isnan(a) || ag_isnan(b)) return D_NAN;
  if (ag_isinf(b)) return a;
  precise double r = abs(a), bb = abs(b);
  if (r < bb) return a;
  int eb, er;
  frexp(bb, eb);
  for (int i = 0; i < 2100 && r >= bb; i++) {
    frexp(r, er);
    precise double t = ldexp(bb, er - eb);
    if (t > r) t = ldexp(bb, er - eb - 1);
    r -= t;
  }
  return ag_copysign(r, a);
}

/* glslang folds double(literal) from the literal's full text, so the
 * table's constants keep their double value */
#define E_K(c) double(c)
#define E_EXP(v) d_exp(v)
#define E_LOG(v) d_log(v)
#define E_SQRT(v) sqrt(v)
#define E_RSQRT(v) (1.0LF / sqrt(v))
#define E_TANH(v) d_tanh(v)
#define E_SIGMOID(v) (1.0LF / (1.0LF + d_exp(-(v))))
#define E_ERF(v) d_erf(v)
#define E_SIN(v) d_sincos(v, false)
#define E_COS(v) d_sincos(v, true)
#define E_LOG1P(v) d_log1p(v)
#define E_EXPM1(v) d_expm1(v)
#define E_FLOOR(v) floor(v)
#define E_CEIL(v) ceil(v)
#define E_RINT(v) roundEven(v)
#define E_ABS(v) abs(v)
#define E_POW(u, v) d_pow(u, v)
#define E_ATAN2(u, v) d_atan2(u, v)
#define E_FMOD(u, v) d_fmod(u, v)
#define E_DIV(u, v) ((u) / (v))

#include "anygrad/optable.h"

/* GLSL has no variadic macros: each list macro names every field. */
#define VD_U_CASE(ID, name, api, fwd, save, bwd, amp, ints, cost, dom, gdom, ts0, ts1) \
  case AG_U_##ID: return (fwd);
#define VD_B_CASE(ID, name, api, fwd, kind, grad, da, db, ints, cost, doma, domb) \
  case AG_B_##ID: return (fwd);
#define VD_SAVE_NG(ID, bwd)
#define VD_SAVE_N(ID, bwd) case AG_B_##ID##_BWD: { double g = a; return (bwd); }
#define VD_SAVE_X(ID, bwd) case AG_B_##ID##_BWD: { double g = a; double x = b; return (bwd); }
#define VD_SAVE_Y(ID, bwd) case AG_B_##ID##_BWD: { double g = a; double y = b; return (bwd); }
#define VD_BWD_CASE(ID, name, api, fwd, save, bwd, amp, ints, cost, dom, gdom, ts0, ts1) \
  VD_SAVE_##save(ID, bwd)
#define VD_PART_CORE(ID, da, db)
#define VD_PART_NG(ID, da, db)
#define VD_PART_PART(ID, da, db) case AG_B_##ID##_DA: return (da); case AG_B_##ID##_DB: return (db);
#define VD_PART_CASE(ID, name, api, fwd, kind, grad, da, db, ints, cost, doma, domb) \
  VD_PART_##grad(ID, da, db)
#define VD_CMP_ARITH(ID)
#define VD_CMP_CMP(ID) case AG_B_##ID:
#define VD_CMP_CASE(ID, name, api, fwd, kind, grad, da, db, ints, cost, doma, domb) VD_CMP_##kind(ID)

double unary_d(double x, double s0, double s1) {
  /* sign on the bits, as unary_f in ops.glsl */
  if (OP == AG_U_SIGN) return x == 0.0LF || ag_isnan(x) ? 0.0LF : ag_copysign(1.0LF, x);
  switch (OP) {
    AG_UNARY_OPS(VD_U_CASE)
  }
  return D_NAN;
}

bool cmp_op() {
  switch (OP) {
    AG_BINARY_OPS(VD_CMP_CASE) return true;
  }
  return false;
}

double binary_d(double a, double b, double s0, double s1) {
  /* NaN rules on the bits, as binary_f in ops.glsl */
  if (OP == AG_B_MAX) return ag_isnan(a) || a > b ? a : b;
  if (OP == AG_B_MIN) return ag_isnan(a) || a < b ? a : b;
  if (cmp_op() && (ag_isnan(a) || ag_isnan(b))) return OP == AG_B_NE ? 1.0LF : 0.0LF;
  switch (OP) {
    AG_BINARY_OPS(VD_B_CASE)
    AG_UNARY_OPS(VD_BWD_CASE)
    AG_BINARY_OPS(VD_PART_CASE)
  }
  return D_NAN;
}
