/* The portable f32 math library (include/anygrad/pmath.h) on the host:
 * each function against libm in double, at most 2 ulp from the correctly
 * rounded reference over a stratified sample of its domain (every binade,
 * both signs) plus the points where it switches formula; the special
 * values of C99 Annex F (signed zeros, infinities, NaN); the built
 * division and square root bit for bit against IEEE '/' and sqrtf; the
 * f16/bf16 conversions against backend.h's; and every constant of the
 * header round-trips (strtof == (float)strtod).
 *   pmath_test            the sweep (PMATH_SCALE=<x> scales its size)
 * Prints the table of the largest errors (in ulp of the reference). */
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "anygrad/anygrad.h"
#include "anygrad/backend.h"

#define AGP_NATIVE_DIVSQRT 1
#include "anygrad/pmath.h"

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd32(void) {
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 7;
  g_rng ^= g_rng << 17;
  return (uint32_t)(g_rng >> 16);
}

static float fb(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}
static uint32_t bf(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static double g_scale = 1.0;
static int64_t scaled(double n) {
  double v = n * g_scale;
  return v < 1000 ? 1000 : (int64_t)v;
}

/* ulp of the float nearest to v (2^-149 in the subnormal range) */
static double ulp_of(double v) {
  double a = fabs(v);
  if (a < 0x1p-126) return 0x1p-149;
  int e;
  frexp(a, &e); /* a = m 2^e, m in [0.5, 1) */
  return ldexp(1.0, e - 24);
}

/* order-preserving integer of a float's bits (-0 == +0) */
static int64_t ord(float f) {
  int32_t i;
  memcpy(&i, &f, 4);
  return i < 0 ? -(int64_t)(i & 0x7fffffff) : (int64_t)i;
}

typedef struct stat {
  const char *name;
  double max_err;    /* |result - ref| / ulp(ref) */
  int64_t max_dist;  /* ulps between result and (float)ref */
  float worst_x, worst_y;
  int64_t n;
  int64_t bad_special;
} stat;

/* one comparison: result r of inputs (x, y) against the double reference */
static void check(stat *s, float x, float y, float r, double ref) {
  s->n++;
  if (isnan(ref)) {
    if (!isnan(r)) {
      s->bad_special++;
      if (s->bad_special < 5) printf("  %s(%a, %a) = %a, want NaN\n", s->name, x, y, r);
    }
    return;
  }
  float rf = (float)ref;
  if (isnan(r)) {
    s->bad_special++;
    if (s->bad_special < 5) printf("  %s(%a, %a) = NaN, want %a\n", s->name, x, y, ref);
    return;
  }
  double err;
  int64_t dist = ord(r) - ord(rf);
  if (dist < 0) dist = -dist;
  if (isinf(rf) || isinf(r)) {
    err = (r == rf) ? 0.0 : 1e9;
    if (r != rf) dist = (int64_t)1 << 40;
  } else {
    err = fabs((double)r - ref) / ulp_of(ref);
  }
  if (err > s->max_err) {
    s->max_err = err;
    s->worst_x = x;
    s->worst_y = y;
  }
  if (dist > s->max_dist) s->max_dist = dist;
}

/* a random float with its bits uniform over [lo_bits, hi_bits] of |x| and
 * a random sign when sign is set */
static float rnd_in(uint32_t lo, uint32_t hi, int sign) {
  uint32_t u = lo + (uint32_t)(((uint64_t)rnd32() * ((uint64_t)hi - lo + 1)) >> 32);
  if (sign && (rnd32() & 1)) u |= 0x80000000u;
  return fb(u);
}

typedef float (*fn1)(float);
typedef double (*ref1)(double);

static double r_sigmoid(double x) { return x >= 0 ? 1.0 / (1.0 + exp(-x)) : exp(x) / (1.0 + exp(x)); }
static double r_rsqrt(double x) { return 1.0 / sqrt(x); }
static float f_exp(float x) { return agp_exp(x); }
static float f_exp2(float x) { return agp_exp2(x); }
static float f_expm1(float x) { return agp_expm1(x); }
static float f_log(float x) { return agp_log(x); }
static float f_log1p(float x) { return agp_log1p(x); }
static float f_tanh(float x) { return agp_tanh(x); }
static float f_sigmoid(float x) { return agp_sigmoid(x); }
static float f_erf(float x) { return agp_erf(x); }
static float f_sin(float x) { return agp_sin(x); }
static float f_cos(float x) { return agp_cos(x); }
static float f_sinh(float x) { return agp_sinh(x); }
static float f_cosh(float x) { return agp_cosh(x); }
static float f_sqrt(float x) { return agp_sqrt(x); }
static float f_rsqrt(float x) { return agp_rsqrt(x); }

/* |x| bit ranges of a domain: [lo, hi], both signs or positive only */
typedef struct dom1 {
  uint32_t lo, hi;
  int sign;
} dom1;

static double now(void) {
  struct timespec t;
  timespec_get(&t, TIME_UTC);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void sweep1(stat *s, fn1 f, ref1 ref, dom1 d, int64_t n, const float *extra, int nextra) {
  double t0 = now();
  for (int64_t i = 0; i < n; i++) {
    float x = rnd_in(d.lo, d.hi, d.sign);
    check(s, x, 0, f(x), ref((double)x));
  }
  /* every binade: its first and last floats and a few inside */
  for (uint32_t e = d.lo >> 23; e <= (d.hi >> 23); e++) {
    for (int k = 0; k < 8; k++) {
      uint32_t u = (e << 23) | (k == 0 ? 0 : k == 1 ? 0x7fffff : (rnd32() & 0x7fffff));
      if (u < d.lo || u > d.hi) continue;
      check(s, fb(u), 0, f(fb(u)), ref((double)fb(u)));
      if (d.sign) check(s, -fb(u), 0, f(-fb(u)), ref(-(double)fb(u)));
    }
  }
  /* the switch points and their neighbours */
  for (int k = 0; k < nextra; k++) {
    float x0 = extra[k];
    for (int dlt = -64; dlt <= 64; dlt++) {
      float x = fb(bf(x0) + (uint32_t)dlt);
      if (isnan(x) || bf(x) == 0x7f800000u || bf(x) == 0xff800000u) continue;
      check(s, x, 0, f(x), ref((double)x));
      if (d.sign) check(s, -x, 0, f(-x), ref(-(double)x));
    }
  }
  if (getenv("PMATH_TIMES")) printf("%s: %.2f s\n", s->name, now() - t0);
}

static stat g_stats[32];
static int g_nstats;
static stat *new_stat(const char *name) {
  stat *s = &g_stats[g_nstats++];
  memset(s, 0, sizeof *s);
  s->name = name;
  return s;
}

#define ALL_FINITE ((dom1){0u, 0x7f7fffffu, 1})
#define POS_FINITE ((dom1){0u, 0x7f7fffffu, 0})

static void test_one_arg(void **state) {
  (void)state;
  int64_t n = scaled(1e7);
  static const float sw_exp[] = {88.7228f, -87.3f, -103.97f, -104.0f, 0.34657f, 1.0397f, 0.5f, 1e-8f};
  static const float sw_expm1[] = {0.34657f, 1.0397f, 0.6931f, -17.33f, -16.98f, 17.33f, 88.7f, 1e-8f};
  static const float sw_exp2[] = {0.5f, 1.5f, 128.0f, -126.0f, -149.0f, -150.0f, 1e-8f};
  static const float sw_log[] = {1.0f, 1.41421356f, 0.70710678f, 2.0f, 1e-38f, 1.17549435e-38f};
  static const float sw_log1p[] = {0.41421356f, -0.29289322f, -0.5f, 1e-8f, 16777216.0f, -0.99999994f};
  static const float sw_tanh[] = {0.625f, 9.01f, 10.0f, 1e-4f};
  static const float sw_sig[] = {0.0f, 15.9f, 16.7f, 88.0f, 103.0f, 1e-8f};
  static const float sw_erf[] = {1.0f, 3.83f, 3.95f, 4.0f, 1e-4f};
  static const float sw_trig[] = {0.785398f, 1.570796f, 3.141593f, 4.712389f, 1608.0f, 1607.7f, 1048576.0f, 102943.7f};
  static const float sw_hyp[] = {1.0f, 89.4f, 88.72f, 9.0f, 1e-4f};
  static const float sw_sqrt[] = {1.0f, 2.0f, 4.0f, 1e-45f, 3.4e38f};
  /* floats nearest multiples of pi/2 (kernels/gpu trig test's hard cases up to 2^20) */
  static const float hard[] = {0x1.921fb6p+0f, 0x1.921fb6p+1f, 0x1.2d97c8p+2f, 0x1.2d97c8p+3f, 0x1.2d97c8p+4f,
                               0x1.2d97c8p+5f, 0x1.2d97c8p+6f, 0x1.f9cbe2p+7f, 0x1.f9cbe2p+8f, 0x1.f9cbe2p+9f,
                               0x1.f9cbe2p+10f, 0x1.17cc5p+11f, 0x1.17cc5p+12f, 0x1.17cc5p+13f, 0x1.17cc5p+14f,
                               0x1.9a48dep+15f, 0x1.9a48dep+16f, 0x1.9a48dep+17f, 0x1.04ccbcp+18f, 0x1.04ccbcp+19f};
  float trig_extra[sizeof sw_trig / sizeof *sw_trig + sizeof hard / sizeof *hard];
  int nt = 0;
  for (size_t i = 0; i < sizeof sw_trig / sizeof *sw_trig; i++) trig_extra[nt++] = sw_trig[i];
  for (size_t i = 0; i < sizeof hard / sizeof *hard; i++) trig_extra[nt++] = hard[i];
  const dom1 trig = {0u, 0x49800000u, 1}; /* |x| <= 2^20 */
  const dom1 lp = {0u, 0x7f7fffffu, 0};
#define RUN1(nm, f, r, d, ex) \
  sweep1(new_stat(nm), f, r, d, n, ex, (int)(sizeof ex / sizeof *ex))
  RUN1("exp", f_exp, exp, ALL_FINITE, sw_exp);
  RUN1("exp2", f_exp2, exp2, ALL_FINITE, sw_exp2);
  RUN1("expm1", f_expm1, expm1, ALL_FINITE, sw_expm1);
  RUN1("log", f_log, log, POS_FINITE, sw_log);
  /* log1p: x > -1 (negative side up to the float below -1 excluded) */
  {
    stat *s = new_stat("log1p");
    sweep1(s, f_log1p, log1p, lp, n / 2, sw_log1p, (int)(sizeof sw_log1p / sizeof *sw_log1p));
    sweep1(s, f_log1p, log1p, (dom1){0u, 0x3f7fffffu, 0}, n / 4, sw_log1p, 0);
    for (int64_t i = 0; i < n / 4; i++) {
      float x = -rnd_in(0u, 0x3f7fffffu, 0);
      check(s, x, 0, agp_log1p(x), log1p((double)x));
    }
  }
  RUN1("tanh", f_tanh, tanh, ALL_FINITE, sw_tanh);
  RUN1("sigmoid", f_sigmoid, r_sigmoid, ALL_FINITE, sw_sig);
  RUN1("erf", f_erf, erf, ALL_FINITE, sw_erf);
  /* sin, cos: densely up to 2^20 (Cody-Waite), then over every float
   * (Payne-Hanek above 2^20) with each binade's float nearest a multiple of
   * pi/2 (found by a scan of every float) */
  static const float hard_big[] = {
      0x1.4ac55cp+21f, 0x1.4ac55cp+22f, 0x1.4ac55cp+23f, 0x1.e768f6p+24f, 0x1.4665d2p+25f, 0x1.4665d2p+26f,
      0x1.4665d2p+27f, 0x1.08ecc2p+28f, 0x1.27a94ap+29f, 0x1.27a94ap+30f, 0x1.1ffa28p+31f, 0x1.b7a65ep+32f,
      0x1.ffa4e8p+33f, 0x1.47d0fep+34f, 0x1.47d0fep+35f, 0x1.47d0fep+36f, 0x1.47d0fep+37f, 0x1.47d0fep+38f,
      0x1.47d0fep+39f, 0x1.628d4cp+40f, 0x1.628d4cp+41f, 0x1.628d4cp+42f, 0x1.628d4cp+43f, 0x1.628d4cp+44f,
      0x1.f0eaeep+45f, 0x1.f0eaeep+46f, 0x1.f0eaeep+47f, 0x1.705312p+48f, 0x1.705312p+49f, 0x1.b86d92p+50f,
      0x1.dc7ad2p+51f, 0x1.ee8172p+52f, 0x1.f784c2p+53f, 0x1.fc066ap+54f, 0x1.fe473ep+55f, 0x1.ff67a8p+56f,
      0x1.0f79ap+57f, 0x1.0f79ap+58f, 0x1.0f79ap+59f, 0x1.0f79ap+60f, 0x1.0f79ap+61f, 0x1.0f79ap+62f,
      0x1.0f79ap+63f, 0x1.c82258p+64f, 0x1.c82258p+65f, 0x1.5619c2p+66f, 0x1.f8aad6p+67f, 0x1.a7624cp+68f,
      0x1.a7624cp+69f, 0x1.d83694p+70f, 0x1.d83694p+71f, 0x1.cc0182p+72f, 0x1.5c0e66p+73f, 0x1.5c0e66p+74f,
      0x1.5c0e66p+75f, 0x1.13093p+76f, 0x1.13093p+77f, 0x1.13093p+78f, 0x1.13093p+79f, 0x1.13093p+80f,
      0x1.13093p+81f, 0x1.13093p+82f, 0x1.8dc776p+83f, 0x1.8dc776p+84f, 0x1.32ede2p+85f, 0x1.32ede2p+86f,
      0x1.32ede2p+87f, 0x1.32ede2p+88f, 0x1.abb4bp+89f, 0x1.abb4bp+90f, 0x1.40c784p+91f, 0x1.0b50eep+92f,
      0x1.0b50eep+93f, 0x1.0b50eep+94f, 0x1.f37c8ap+95f, 0x1.f37c8ap+96f, 0x1.f37c8ap+97f, 0x1.f37c8ap+98f,
      0x1.f37c8ap+99f, 0x1.f37c8ap+100f, 0x1.7f4134p+101f, 0x1.7f4134p+102f, 0x1.7f4134p+103f,
      0x1.cc383p+104f, 0x1.a5bcb2p+105f, 0x1.a5bcb2p+106f, 0x1.df43b8p+107f, 0x1.2928e2p+108f,
      0x1.a0f9dp+109f, 0x1.484dd6p+110f, 0x1.b08c4ap+111f, 0x1.b08c4ap+112f, 0x1.b08c4ap+113f,
      0x1.517106p+114f, 0x1.80fea8p+115f, 0x1.80fea8p+116f, 0x1.20befep+117f, 0x1.f99756p+118f,
      0x1.2ceb8p+119f, 0x1.2ceb8p+120f, 0x1.d8660ap+121f, 0x1.fe037ap+122f, 0x1.fe037ap+123f,
      0x1.fe037ap+124f, 0x1.fe037ap+125f, 0x1.7b9b4p+126f, 0x1.7b9b4p+127f};
  {
    const dom1 big = {0x49800001u, 0x7f7fffffu, 1};
    stat *s = new_stat("sin");
    sweep1(s, f_sin, sin, trig, n, trig_extra, nt);
    sweep1(s, f_sin, sin, big, n / 2, hard_big, (int)(sizeof hard_big / sizeof *hard_big));
    s = new_stat("cos");
    sweep1(s, f_cos, cos, trig, n, trig_extra, nt);
    sweep1(s, f_cos, cos, big, n / 2, hard_big, (int)(sizeof hard_big / sizeof *hard_big));
  }
  RUN1("sinh", f_sinh, sinh, ALL_FINITE, sw_hyp);
  RUN1("cosh", f_cosh, cosh, ALL_FINITE, sw_hyp);
  RUN1("sqrt", f_sqrt, sqrt, POS_FINITE, sw_sqrt);
  RUN1("rsqrt", f_rsqrt, r_rsqrt, POS_FINITE, sw_sqrt);
#undef RUN1
}

static void test_two_arg(void **state) {
  (void)state;
  int64_t n = scaled(4e6);
  /* pow on the conformance domain, x in [0.1, 3], y in [-4, 4] */
  stat *s = new_stat("pow [0.1,3]x[-4,4]");
  for (int64_t i = 0; i < n; i++) {
    float x = 0.1f + 2.9f * (float)(rnd32() >> 8) * 0x1p-24f;
    float y = -4.0f + 8.0f * (float)(rnd32() >> 8) * 0x1p-24f;
    if (i & 1) y = rintf(y);
    check(s, x, y, agp_pow(x, y), pow((double)x, (double)y));
  }
  /* pow everywhere: every positive x, y with |y log2 x| <= 150 */
  s = new_stat("pow, |y log2 x| > 32");
  stat *s32 = new_stat("pow, |y log2 x| <= 32");
  for (int64_t i = 0; i < n; i++) {
    float x = rnd_in(0u, 0x7f7fffffu, 0);
    double l = fabs(log2((double)x));
    float lim = (float)(l > 0 ? 150.0 / l : 1e30);
    float y = rnd_in(0u, bf(lim < 1e30f ? lim : 1e30f), 1);
    if (i & 1) y = rintf(y);
    if (i % 7 == 0) x = -x;
    double ref = pow((double)x, (double)y);
    check(fabs(y * log2(fabs((double)x))) <= 32 ? s32 : s, x, y, agp_pow(x, y), ref);
  }
  s = new_stat("atan2");
  for (int64_t i = 0; i < n; i++) {
    float y = rnd_in(0u, 0x7f7fffffu, 1);
    float x = rnd_in(0u, 0x7f7fffffu, 1);
    if (i & 1) { /* nearby magnitudes */
      x = fb((bf(y) & 0x7fffffffu) + (rnd32() & 0x1ffffffu) - 0x1000000u);
      if (isnan(x) || isinf(x)) x = 1.0f;
      if (rnd32() & 1) x = -x;
    }
    check(s, y, x, agp_atan2(y, x), atan2((double)y, (double)x));
  }
  s = new_stat("fmod (exact)");
  for (int64_t i = 0; i < n / 4; i++) {
    float a = rnd_in(0u, 0x7f7fffffu, 1);
    float b = rnd_in(0u, 0x7f7fffffu, 1);
    if (i & 1) b = fb((bf(a) & 0x7fffffffu) - (rnd32() & 0x7ffffffu));
    check(s, a, b, agp_fmod(a, b), fmod((double)a, (double)b));
  }
}

/* C99 Annex F values, signs of zero included, and NaN in, NaN out */
static void expect_bits(const char *what, float got, float want) {
  if (isnan(want) ? !isnan(got) : bf(got) != bf(want)) {
    print_error("%s = %a, want %a\n", what, got, want);
    fail();
  }
}

static void test_specials(void **state) {
  (void)state;
  const float inf = INFINITY, nan = NAN, pz = 0.0f, nz = -0.0f;
  expect_bits("exp(-0)", agp_exp(nz), 1.0f);
  expect_bits("exp(inf)", agp_exp(inf), inf);
  expect_bits("exp(-inf)", agp_exp(-inf), pz);
  expect_bits("exp(nan)", agp_exp(nan), nan);
  expect_bits("exp(-100)", agp_exp(-100.0f), (float)exp(-100.0));
  expect_bits("exp2(-149)", agp_exp2(-149.0f), 0x1p-149f);
  expect_bits("exp2(128)", agp_exp2(128.0f), inf);
  expect_bits("exp2(10)", agp_exp2(10.0f), 1024.0f);
  expect_bits("expm1(-0)", agp_expm1(nz), nz);
  expect_bits("expm1(inf)", agp_expm1(inf), inf);
  expect_bits("expm1(-inf)", agp_expm1(-inf), -1.0f);
  expect_bits("expm1(nan)", agp_expm1(nan), nan);
  expect_bits("log(0)", agp_log(pz), -inf);
  expect_bits("log(-0)", agp_log(nz), -inf);
  expect_bits("log(-1)", agp_log(-1.0f), nan);
  expect_bits("log(1)", agp_log(1.0f), pz);
  expect_bits("log(inf)", agp_log(inf), inf);
  expect_bits("log(nan)", agp_log(nan), nan);
  expect_bits("log1p(-0)", agp_log1p(nz), nz);
  expect_bits("log1p(-1)", agp_log1p(-1.0f), -inf);
  expect_bits("log1p(-2)", agp_log1p(-2.0f), nan);
  expect_bits("log1p(inf)", agp_log1p(inf), inf);
  expect_bits("log1p(-inf)", agp_log1p(-inf), nan);
  expect_bits("tanh(-0)", agp_tanh(nz), nz);
  expect_bits("tanh(inf)", agp_tanh(inf), 1.0f);
  expect_bits("tanh(-inf)", agp_tanh(-inf), -1.0f);
  expect_bits("tanh(nan)", agp_tanh(nan), nan);
  expect_bits("sigmoid(inf)", agp_sigmoid(inf), 1.0f);
  expect_bits("sigmoid(-inf)", agp_sigmoid(-inf), pz);
  expect_bits("sigmoid(0)", agp_sigmoid(pz), 0.5f);
  expect_bits("sigmoid(nan)", agp_sigmoid(nan), nan);
  expect_bits("erf(-0)", agp_erf(nz), nz);
  expect_bits("erf(inf)", agp_erf(inf), 1.0f);
  expect_bits("erf(-inf)", agp_erf(-inf), -1.0f);
  expect_bits("erf(nan)", agp_erf(nan), nan);
  expect_bits("sin(-0)", agp_sin(nz), nz);
  expect_bits("sin(inf)", agp_sin(inf), nan);
  expect_bits("sin(nan)", agp_sin(nan), nan);
  expect_bits("cos(-0)", agp_cos(nz), 1.0f);
  expect_bits("cos(-inf)", agp_cos(-inf), nan);
  expect_bits("sinh(-0)", agp_sinh(nz), nz);
  expect_bits("sinh(-inf)", agp_sinh(-inf), -inf);
  expect_bits("sinh(nan)", agp_sinh(nan), nan);
  expect_bits("cosh(-inf)", agp_cosh(-inf), inf);
  expect_bits("cosh(nan)", agp_cosh(nan), nan);
  expect_bits("sqrt(-0)", agp_sqrt(nz), nz);
  expect_bits("sqrt(-1)", agp_sqrt(-1.0f), nan);
  expect_bits("rsqrt(0)", agp_rsqrt(pz), inf);
  expect_bits("rsqrt(inf)", agp_rsqrt(inf), pz);
  /* pow: C99 F.9.4.4 */
  const float ys[] = {0.0f, -0.0f, 1.0f, -1.0f, 2.0f, -2.0f, 3.0f, -3.0f, 0.5f, -0.5f, 2.5f, inf, -inf, nan,
                      1e10f, -1e10f, 16777217.0f, 0x1p-149f};
  const float xs[] = {0.0f, -0.0f, 1.0f, -1.0f, 2.0f, -2.0f, 0.5f, -0.5f, inf, -inf, nan, 0x1p-149f, -0x1p-149f,
                      3.4e38f, 1.0000001f, 0.99999994f};
  for (size_t i = 0; i < sizeof xs / sizeof *xs; i++)
    for (size_t j = 0; j < sizeof ys / sizeof *ys; j++) {
      char what[96];
      snprintf(what, sizeof what, "pow(%a, %a)", xs[i], ys[j]);
      float want = powf(xs[i], ys[j]);
      float got = agp_pow(xs[i], ys[j]);
      if (isinf(want) || want == 0 || isnan(want) || want == 1.0f) expect_bits(what, got, want);
      else {
        double e = fabs((double)got - pow((double)xs[i], (double)ys[j])) / ulp_of(pow((double)xs[i], (double)ys[j]));
        if (e > 2) {
          print_error("%s = %a (%.2f ulp)\n", what, got, e);
          fail();
        }
      }
    }
  /* atan2: F.9.1.4 */
  const float as[] = {0.0f, -0.0f, 1.0f, -1.0f, inf, -inf, nan, 0x1p-149f, 3.4e38f};
  for (size_t i = 0; i < sizeof as / sizeof *as; i++)
    for (size_t j = 0; j < sizeof as / sizeof *as; j++) {
      char what[96];
      snprintf(what, sizeof what, "atan2(%a, %a)", as[i], as[j]);
      float want = (float)atan2((double)as[i], (double)as[j]);
      float got = agp_atan2(as[i], as[j]);
      double e = isnan(want) || isinf(want) || want == 0 ? 0 : fabs((double)got - atan2((double)as[i], (double)as[j])) /
                                                                 ulp_of(atan2((double)as[i], (double)as[j]));
      if (want == 0 || isnan(want)) expect_bits(what, got, want);
      else if (e > 2) {
        print_error("%s = %a (%.2f ulp)\n", what, got, e);
        fail();
      }
    }
  /* fmod: F.9.7.1 */
  const float fs[] = {0.0f, -0.0f, 1.0f, -1.0f, 3.0f, -7.5f, inf, -inf, nan, 0x1p-149f, 3.4e38f, 1e-40f};
  for (size_t i = 0; i < sizeof fs / sizeof *fs; i++)
    for (size_t j = 0; j < sizeof fs / sizeof *fs; j++) {
      char what[96];
      snprintf(what, sizeof what, "fmod(%a, %a)", fs[i], fs[j]);
      expect_bits(what, agp_fmod(fs[i], fs[j]), fmodf(fs[i], fs[j]));
    }
  /* rounding wrappers */
  expect_bits("rint(2.5)", agp_rint(2.5f), 2.0f);
  expect_bits("rint(-3.5)", agp_rint(-3.5f), -4.0f);
  expect_bits("rint(-0.4)", agp_rint(-0.4f), nz);
  expect_bits("floor(-0.5)", agp_floor(-0.5f), -1.0f);
  expect_bits("ceil(-0.5)", agp_ceil(-0.5f), nz);
  expect_bits("trunc(-1.5)", agp_trunc(-1.5f), -1.0f);
  expect_bits("abs(-0)", agp_abs(nz), pz);
}

/* The built division and square root against IEEE, bit for bit */
static int same(float a, float b) { return (isnan(a) && isnan(b)) || bf(a) == bf(b); }

static float any_float(void) {
  uint32_t u = rnd32();
  switch (rnd32() & 7) {
  case 0: u &= 0x807fffffu; break;                    /* subnormal */
  case 1: u = (u & 0x80ffffffu) | 0x7f000000u; break; /* huge */
  case 2: u = (u & 0x8000000fu) | (rnd32() & 0x7f800000u); break; /* short significand */
  case 3: u = (rnd32() & 7) == 0 ? (u & 0x80000000u) | 0x7f800000u : u; break;
  default: break;
  }
  return fb(u);
}

static void test_built_divsqrt(void **state) {
  (void)state;
  int64_t n = scaled(1e7), bad = 0;
  for (int64_t i = 0; i < n; i++) {
    float a = any_float(), b = any_float();
    if (i % 3 == 0) { /* quotients near and in the subnormal range */
      uint32_t ea = rnd32() % 60, eb = 100 + rnd32() % 100;
      a = fb((ea << 23) | (rnd32() & 0x807fffffu));
      b = fb((eb << 23) | (rnd32() & 0x807fffffu));
    }
    float q = agp_div_built(a, b), w = a / b;
    if (!same(q, w)) {
      if (++bad < 10) print_error("div(%a, %a) = %a, IEEE %a\n", a, b, q, w);
    }
    float x = i & 1 ? fabsf(a) : a;
    float r = agp_sqrt_built(x), v = sqrtf(x);
    if (!same(r, v)) {
      if (++bad < 10) print_error("sqrt(%a) = %a, IEEE %a\n", x, r, v);
    }
  }
  /* every significand (both exponent parities: [1, 4)) and every
   * subnormal: sqrt scales exactly otherwise */
  for (uint32_t u = 0x3f800000u; u < 0x40800000u; u++)
    if (!same(agp_sqrt_built(fb(u)), sqrtf(fb(u))) && ++bad < 10) print_error("sqrt(%a)\n", fb(u));
  for (uint32_t u = 0; u < 0x00800000u; u++)
    if (!same(agp_sqrt_built(fb(u)), sqrtf(fb(u))) && ++bad < 10) print_error("sqrt(%a)\n", fb(u));
  /* every float's square root in a stride, and 1/x, x/3 over a stride */
  for (uint32_t u = 0; u < 0xff800000u; u += 4099) {
    float x = fb(u);
    if (!same(agp_sqrt_built(x), sqrtf(x)) && ++bad < 10) print_error("sqrt(%a)\n", x);
    if (!same(agp_div_built(1.0f, x), 1.0f / x) && ++bad < 10) print_error("1/%a\n", x);
    if (!same(agp_div_built(x, 3.0f), x / 3.0f) && ++bad < 10) print_error("%a/3\n", x);
  }
  printf("built division and square root: %lld operand sets, %lld mismatches\n",
         (long long)(n + 3 * (0xff800000u / 4099) + 0x01800000),
         (long long)bad);
  assert_int_equal(bad, 0);
}

static void test_half(void **state) {
  (void)state;
  int64_t bad = 0;
  for (uint32_t u = 0; u <= 0xffffu; u++) {
    if (!same(agp_f16_bits_to_f32((int)u), ag_f16_to_f32((uint16_t)u))) bad++;
    if (!same(agp_bf16_bits_to_f32((int)u), ag_bf16_to_f32((uint16_t)u))) bad++;
    if (bf(agp_bf16_bits_to_f32((int)u)) != bf(ag_bf16_to_f32((uint16_t)u))) bad++;
  }
  for (uint64_t v = 0; v <= 0xffffffffull; v += 7) {
    float f = fb((uint32_t)v);
    if (agp_f32_to_f16_bits(f) != (int)ag_f32_to_f16(f)) bad++;
    if (agp_f32_to_bf16_bits(f) != (int)ag_f32_to_bf16(f)) bad++;
  }
  /* around every f16 and bf16 rounding boundary */
  for (uint32_t h = 0; h < 0x10000u; h++) {
    uint32_t b16 = h << 16;
    for (int d = -2; d <= 2; d++) {
      float f = fb(b16 + 0x8000u + (uint32_t)d);
      if (agp_f32_to_bf16_bits(f) != (int)ag_f32_to_bf16(f)) bad++;
      float g = ag_f16_to_f32((uint16_t)h);
      float mid = fb(bf(g) + 0x1000u + (uint32_t)d);
      if (agp_f32_to_f16_bits(mid) != (int)ag_f32_to_f16(mid)) bad++;
    }
  }
  assert_int_equal(bad, 0);
}

/* Every AGP_K(c) of the header: the text gives the same float through
 * strtof and through strtod then a cast (no double rounding anywhere). */
static void test_constants(void **state) {
  (void)state;
  FILE *f = fopen(PMATH_HEADER, "r");
  assert_non_null(f);
  static char text[1 << 20];
  size_t len = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  text[len] = 0;
  int count = 0, bad = 0;
  for (char *p = strstr(text, "AGP_K("); p; p = strstr(p + 1, "AGP_K(")) {
    char *q = p + 6;
    if (*q == 'c') continue; /* the macro's own definition */
    char num[64];
    size_t k = 0;
    while (*q && *q != ')' && k < sizeof num - 1) num[k++] = *q++;
    num[k] = 0;
    if (!strchr(num, '.') && !strchr(num, 'e')) {
      print_error("AGP_K(%s): not a floating literal\n", num);
      bad++;
    }
    float a = strtof(num, NULL);
    float b = (float)strtod(num, NULL);
    if (bf(a) != bf(b)) {
      print_error("AGP_K(%s): strtof %a, strtod %a\n", num, a, b);
      bad++;
    }
    count++;
  }
  printf("%d constants checked\n", count);
  assert_true(count > 100);
  assert_int_equal(bad, 0);
}

static int print_table(void **state) {
  (void)state;
  printf("%-22s %12s %10s %12s  %s\n", "function", "points", "max ulp", "max ulp dist", "worst input");
  for (int i = 0; i < g_nstats; i++) {
    stat *s = &g_stats[i];
    printf("%-22s %12lld %10.3f %12lld  %a %a\n", s->name, (long long)s->n, s->max_err, (long long)s->max_dist,
           s->worst_x, s->worst_y);
  }
  return 0;
}

static void test_bounds(void **state) {
  (void)state;
  int fails = 0;
  for (int i = 0; i < g_nstats; i++) {
    stat *s = &g_stats[i];
    if (s->bad_special || s->max_dist > 2 || (strstr(s->name, "fmod") && s->max_dist != 0)) {
      print_error("%s: max %lld ulp, %lld wrong special values\n", s->name, (long long)s->max_dist,
                  (long long)s->bad_special);
      fails++;
    }
  }
  print_table(NULL);
  assert_int_equal(fails, 0);
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define PMATH_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define PMATH_SANITIZED 1
#endif
#endif

int main(void) {
#ifdef PMATH_SANITIZED
  g_scale = 0.05; /* the checks, not the sweep, are what a sanitizer adds */
#endif
  const char *sc = getenv("PMATH_SCALE");
  if (sc) g_scale = atof(sc);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_constants), cmocka_unit_test(test_specials), cmocka_unit_test(test_half),
      cmocka_unit_test(test_built_divsqrt), cmocka_unit_test(test_one_arg), cmocka_unit_test(test_two_arg),
      cmocka_unit_test(test_bounds),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
