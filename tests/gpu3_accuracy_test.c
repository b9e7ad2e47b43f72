/* Accuracy of the default numerics mode on one device against references
 * computed in long double: gelu (tanh form) and mish backward for large
 * |x| (1 - tanh^2 times a term growing like x^3 was 7.38 for 1 where a
 * device's tanh stops below 1), log1p and expm1 over their whole range
 * (log1p(3e38) was inf, expm1 inf from 85, expm1(1e-6) 4.6 % off), elu and
 * mish forward which use them (mish within 64 ulps: GLSL's exp on lavapipe is
 * off by about |x| ulps, e^-30 by 18), and fmod and remainder with quotients past
 * 2^24 (f32) and 2^53 (f64), which must be exact. Each function runs on
 * the listed inputs plus a dense sample.
 *
 * usage: gpu3_accuracy_test DEVICE (cpu, opencl:0, gpuemu:0, vulkan:0);
 * skips (77) where the device is absent. A dtype the device does not take
 * (f64 off the CPU) is skipped with a message. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "anygrad/anygrad.h"

static ag_device DEV;
static const char *DEVNAME;

/* ---- values in and out ---- */

/* The value of v as dtype dt holds it (round to nearest even). */
static double round_to(ag_dtype dt, double v) {
  if (dt == AG_F64) return v;
  float f = (float)v;
  if (dt == AG_F32 || isnan(f) || isinf(f)) return f;
  uint32_t u;
  memcpy(&u, &f, 4);
  if (dt == AG_BF16) {
    u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    memcpy(&f, &u, 4);
    return f;
  }
  /* f16: 11 significant bits, subnormal below 2^-14, inf at 65520 */
  double a = fabs(v);
  if (a >= 65520) return copysign(INFINITY, v);
  int e;
  frexp(a, &e);
  double q = ldexp(1.0, (e - 1 < -14 ? -14 : e - 1) - 10);
  return copysign(nearbyint(a / q) * q, v);
}

/* A tensor of dtype dt on the device holding v (rounded to dt); NULL (and
 * a message) where the device does not take dt. */
static ag_tensor *up(ag_dtype dt, int64_t n, const double *v) {
  int64_t s[1] = {n};
  ag_tensor *t;
  if (dt == AG_F64) {
    t = ag_from_host(DEV, AG_F64, 1, s, v);
  } else {
    float *f = malloc((size_t)n * sizeof *f);
    assert_non_null(f);
    for (int64_t i = 0; i < n; i++) f[i] = (float)v[i];
    ag_tensor *t32 = ag_from_host(DEV, AG_F32, 1, s, f);
    free(f);
    assert_non_null(t32);
    t = dt == AG_F32 ? t32 : ag_cast(t32, dt);
    if (t != t32) ag_tensor_release(t32);
  }
  if (!t) fprintf(stderr, "%s: %s skipped: %s\n", DEVNAME, ag_dtype_name(dt), ag_last_error());
  return t;
}

/* t's values as doubles (through f32 for f16 and bf16). */
static double *down(ag_tensor *t) {
  assert_non_null(t);
  int64_t n = ag_tensor_numel(t);
  ag_dtype dt = ag_tensor_dtype(t);
  double *o = malloc((size_t)(n ? n : 1) * sizeof *o);
  assert_non_null(o);
  if (dt == AG_F64) {
    assert_int_equal(ag_to_host(t, o, (size_t)n * sizeof *o), AG_OK);
    return o;
  }
  ag_tensor *t32 = dt == AG_F32 ? t : ag_cast(t, AG_F32);
  assert_non_null(t32);
  float *f = malloc((size_t)(n ? n : 1) * sizeof *f);
  assert_non_null(f);
  ag_status st = ag_to_host(t32, f, (size_t)n * sizeof *f);
  if (st != AG_OK) fail_msg("ag_to_host: %s", ag_last_error());
  for (int64_t i = 0; i < n; i++) o[i] = f[i];
  free(f);
  if (t32 != t) ag_tensor_release(t32);
  return o;
}

/* The distance in ulps between a and b as values of dt (f32 or f64):
 * places on the ordered line -inf .. -0 = +0 .. +inf. */
static double ulps(ag_dtype dt, double a, double b) {
  if (isnan(a) || isnan(b)) return isnan(a) && isnan(b) ? 0 : INFINITY;
  if (dt == AG_F64) {
    int64_t ia, ib;
    memcpy(&ia, &a, 8);
    memcpy(&ib, &b, 8);
    if (ia < 0) ia = INT64_MIN - ia;
    if (ib < 0) ib = INT64_MIN - ib;
    return (double)fabsl((long double)ia - (long double)ib); /* exact: 64 significant bits */
  }
  float fa = (float)a, fb = (float)b;
  int32_t ia, ib;
  memcpy(&ia, &fa, 4);
  memcpy(&ib, &fb, 4);
  if (ia < 0) ia = INT32_MIN - ia;
  if (ib < 0) ib = INT32_MIN - ib;
  return fabs((double)ia - (double)ib);
}

/* A dense sample: n magnitudes log-uniform in [lo, hi] with alternating
 * signs (sign > 0: positive only), from a fixed generator. */
static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static double urand(void) {
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 7;
  g_rng ^= g_rng << 17;
  return (double)(g_rng >> 11) * 0x1p-53;
}
static int sample(double *v, int n, double lo, double hi, int sign) {
  for (int i = 0; i < n; i++) {
    double m = exp(log(lo) + urand() * (log(hi) - log(lo)));
    v[i] = sign > 0 || i % 2 == 0 ? m : -m;
  }
  return n;
}

/* ---- references (long double) ---- */

typedef long double LD;
static const LD K_GELU = 0.79788456080286535587989211986876373695L;

static double ref_gelu_d(double xd) {
  LD x = xd;
  if (isinf(xd)) return xd > 0 ? 1 : 0;
  LD u = K_GELU * (x + 0.044715L * x * x * x), c = coshl(u);
  LD sig2u = 1 / (1 + expl(-2 * u)); /* 0.5 (1 + tanh u) */
  LD sech2 = isinf(c) ? 0 : 1 / (c * c);
  return (double)(sig2u + 0.5L * x * sech2 * K_GELU * (1 + 3 * 0.044715L * x * x));
}
static double ref_mish_d(double xd) {
  LD x = xd;
  if (isinf(xd)) return xd > 0 ? 1 : 0;
  LD sp = x > 20 ? log1pl(expl(x)) : log1pl(expl(x)), c = coshl(sp);
  LD sech2 = isinf(c) ? 0 : 1 / (c * c);
  return (double)(tanhl(sp) + x / (1 + expl(-x)) * sech2);
}
static double ref_mish(double xd) {
  LD x = xd;
  return (double)(x * tanhl(log1pl(expl(x))));
}
static double ref_log1p(double x) { return (double)log1pl(x); }
static double ref_expm1(double x) { return (double)expm1l(x); }
static double ref_elu(double x) { return x > 0 ? x : (double)expm1l(x); }
/* PyTorch's remainder: fmod, plus b where the signs differ */
static double ref_remainder(double a, double b, ag_dtype dt) {
  double r = fmod(a, b);
  if (r != 0 && (r < 0) != (b < 0)) r = round_to(dt, r + b);
  return r;
}

/* ---- checks ---- */

typedef ag_tensor *(*unary_fn)(ag_tensor *);
static ag_tensor *call_elu(ag_tensor *x) { return ag_elu(x, 1.0); }

/* The gradient of f at v (upstream 1) in dtype dt against ref: within
 * tol * eps * (1 + |ref|), eps the dtype's; returns the failures. */
static int check_grad(const char *name, unary_fn f, double (*ref)(double), ag_dtype dt, const double *v, int n,
                      double tol) {
  ag_tensor *x = up(dt, n, v);
  if (!x) return 0;
  assert_int_equal(ag_tensor_set_requires_grad(x, true), AG_OK);
  ag_tensor *y = f(x);
  assert_non_null(y);
  int64_t s[1] = {n};
  ag_tensor *ones = ag_full(DEV, dt, 1, s, 1.0);
  assert_non_null(ones);
  ag_status st = ag_backward(y, ones, false);
  if (st != AG_OK) fail_msg("%s backward: %s", name, ag_last_error());
  double *got = down(ag_tensor_grad(x));
  const double eps = dt == AG_F64 ? 0x1p-52 : dt == AG_F32 ? 0x1p-23 : dt == AG_F16 ? 0x1p-10 : 0x1p-7;
  int bad = 0;
  for (int i = 0; i < n; i++) {
    double xi = round_to(dt, v[i]), r = round_to(dt, ref(xi));
    if (!(fabs(got[i] - r) <= tol * eps * (1 + fabs(r)))) {
      if (bad++ < 6)
        fprintf(stderr, "%s: %s backward %s at %.9g: %.9g, reference %.9g\n", DEVNAME, name, ag_dtype_name(dt), xi,
                got[i], r);
    }
  }
  if (bad) fprintf(stderr, "%s: %s backward %s: %d of %d wrong\n", DEVNAME, name, ag_dtype_name(dt), bad, n);
  free(got);
  ag_tensor_release(ones);
  ag_tensor_release(y);
  ag_tensor_release(x);
  return bad;
}

/* f at v in dtype dt (f32 or f64) within max_ulps of ref rounded to dt. */
static int check_fwd(const char *name, unary_fn f, double (*ref)(double), ag_dtype dt, const double *v, int n,
                     double max_ulps) {
  ag_tensor *x = up(dt, n, v);
  if (!x) return 0;
  ag_tensor *y = f(x);
  if (!y) fail_msg("%s: %s", name, ag_last_error());
  double *got = down(y);
  int bad = 0;
  double worst = 0;
  for (int i = 0; i < n; i++) {
    double xi = round_to(dt, v[i]), r = round_to(dt, ref(xi)), d = ulps(dt, got[i], r);
    if (d > worst) worst = d;
    if (d > max_ulps && bad++ < 6)
      fprintf(stderr, "%s: %s %s(%.9g) = %.9g, reference %.9g (%.0f ulps)\n", DEVNAME, name, ag_dtype_name(dt), xi,
              got[i], r, d);
  }
  if (bad) fprintf(stderr, "%s: %s %s: %d of %d beyond %.0f ulps (worst %.3g)\n", DEVNAME, name, ag_dtype_name(dt), bad,
                   n, max_ulps, worst);
  free(got);
  ag_tensor_release(y);
  ag_tensor_release(x);
  return bad;
}

#define NS 4096
static const ag_dtype FLOATS[] = {AG_F32, AG_F16, AG_BF16, AG_F64};

/* ---- gelu and mish backward ---- */

static int grad_inputs(double *v, double maxv) {
  static const double list[] = {1000, -1000, 1e4, -1e4, 100, -100, 50, -50, 20, -20, 10, -10, 5, -5, 3, -3, 1,
                                -1, 0.5, -0.5, 0.1, -0.1, 0, 1e6, -1e6, 1e7, -1e7, 1e15, -1e15, 1e20, -1e20,
                                3e38, -3e38, INFINITY, -INFINITY};
  int n = 0;
  for (size_t i = 0; i < sizeof list / sizeof list[0]; i++)
    if (!(fabs(list[i]) > maxv) || isinf(list[i])) v[n++] = list[i];
  for (int i = 0; i < 1024; i++) v[n++] = -30 + 60.0 * i / 1023;
  double m[NS];
  int k = sample(m, NS, 1e-3, maxv, 0);
  for (int i = 0; i < k; i++) v[n++] = m[i];
  return n;
}

static void test_gelu_backward(void **state) {
  (void)state;
  double *v = malloc((NS + 2048) * sizeof *v);
  assert_non_null(v);
  int bad = 0;
  for (size_t d = 0; d < sizeof FLOATS / sizeof FLOATS[0]; d++) {
    int n = grad_inputs(v, FLOATS[d] == AG_F16 ? 6e4 : FLOATS[d] == AG_F64 ? 1e300 : 3e38);
    bad += check_grad("gelu", ag_gelu, ref_gelu_d, FLOATS[d], v, n, 32);
  }
  free(v);
  assert_int_equal(bad, 0);
}

static void test_mish_backward(void **state) {
  (void)state;
  double *v = malloc((NS + 2048) * sizeof *v);
  assert_non_null(v);
  int bad = 0;
  for (size_t d = 0; d < sizeof FLOATS / sizeof FLOATS[0]; d++) {
    int n = grad_inputs(v, FLOATS[d] == AG_F16 ? 6e4 : FLOATS[d] == AG_F64 ? 1e300 : 3e38);
    bad += check_grad("mish", ag_mish, ref_mish_d, FLOATS[d], v, n, 32);
  }
  free(v);
  assert_int_equal(bad, 0);
}

/* ---- log1p, expm1, elu, mish forward ---- */

static void test_log1p(void **state) {
  (void)state;
  static const double list[] = {3e38, 1e38, 3.4e38, 1e30, 1e10, 16777216, 1e-6, -1e-6, -5e-8, 5e-8, 1e-30, -1e-30,
                                -0.5, -0.9, -0.99999994, -0.2928, 0.4142, 1, 2, 0.5, 1e-3, -1e-3, 0};
  double *v = malloc((2 * NS + 64) * sizeof *v);
  assert_non_null(v);
  int bad = 0;
  for (int d = 0; d < 2; d++) {
    ag_dtype dt = d ? AG_F64 : AG_F32;
    int n = 0;
    for (size_t i = 0; i < sizeof list / sizeof list[0]; i++) v[n++] = list[i];
    n += sample(v + n, NS, 1e-40, dt == AG_F64 ? 1e300 : 3e38, 1);
    n += sample(v + n, NS, 1e-30, 0.999999, 1);
    for (int i = n - NS; i < n; i++) v[i] = -v[i]; /* (-1, 0) */
    bad += check_fwd("log1p", ag_log1p, ref_log1p, dt, v, n, 4);
  }
  free(v);
  assert_int_equal(bad, 0);
}

static void test_expm1(void **state) {
  (void)state;
  static const double list[] = {85, 86, 87, 88, 88.7, 88.72, 88.7228, 80, 50, 20, 1e-6, -1e-6, 1e-8, -5e-8, 1e-30,
                                0.3465, -0.3465, 0.35, -0.35, 0.7, -0.7, 1, -1, -10, -17, -18, -20, -87, -104, 0,
                                700, 709.78, -700};
  double *v = malloc((2 * NS + 64) * sizeof *v);
  assert_non_null(v);
  int bad = 0;
  for (int d = 0; d < 2; d++) {
    ag_dtype dt = d ? AG_F64 : AG_F32;
    int n = 0;
    for (size_t i = 0; i < sizeof list / sizeof list[0]; i++)
      if (dt == AG_F64 || fabs(list[i]) < 100) v[n++] = list[i];
    n += sample(v + n, NS, 1e-30, dt == AG_F64 ? 709.7 : 88.72, 0);
    n += sample(v + n, NS, 1e-30, dt == AG_F64 ? 745 : 104, 1);
    for (int i = n - NS; i < n; i++) v[i] = -v[i];
    bad += check_fwd("expm1", ag_expm1, ref_expm1, dt, v, n, 4);
    bad += check_fwd("elu", call_elu, ref_elu, dt, v, n, 4);
  }
  free(v);
  assert_int_equal(bad, 0);
}

static void test_mish_forward(void **state) {
  (void)state;
  double *v = malloc((NS + 1024) * sizeof *v);
  assert_non_null(v);
  int bad = 0;
  for (int d = 0; d < 2; d++) {
    ag_dtype dt = d ? AG_F64 : AG_F32;
    int n = sample(v, NS, 1e-6, 80, 0);
    for (int i = 0; i < 1024; i++) v[n++] = -20 + 40.0 * i / 1023;
    bad += check_fwd("mish", ag_mish, ref_mish, dt, v, n, 64);
  }
  free(v);
  assert_int_equal(bad, 0);
}

/* ---- fmod and remainder ---- */

static void test_fmod_remainder(void **state) {
  (void)state;
  enum { NL = 16 };
  static const double la[NL] = {0x1p30, -0x1p30, 0x1p30, -0x1p30, 3e38, -1e30, 1e30, 0x1p25 + 1,
                                0x1p60, -0x1p60, 0x1p100, 1e300, -1e300, 5.5, -5.5, 7};
  static const double lb[NL] = {3, 3, -3, -3, 7, 3.3, -0.1, 3, 3, 3, -3, 7, 0.3, 2, 2, -2.5};
  const int n = NL + NS;
  double *a = malloc((size_t)n * sizeof *a), *b = malloc((size_t)n * sizeof *b);
  assert_true(a && b);
  int bad = 0;
  for (int d = 0; d < 2; d++) {
    ag_dtype dt = d ? AG_F64 : AG_F32;
    /* f32: the literal's f32 value (2^100 becomes inf: left out) */
    for (int i = 0; i < NL; i++) {
      a[i] = round_to(dt, la[i]);
      b[i] = round_to(dt, lb[i]);
      if (isinf(a[i])) a[i] = 1;
    }
    /* operands of 2^-60..2^127 (f64: 2^-300..2^1000): every result is a
     * multiple of 2^-83 (2^-352), a normal number */
    for (int i = NL; i < n; i++) {
      double ea = dt == AG_F64 ? -300 + 1300 * urand() : -60 + 187 * urand();
      double eb = dt == AG_F64 ? -300 + 600 * urand() : -60 + 120 * urand();
      a[i] = round_to(dt, (i % 2 ? -1 : 1) * ldexp(1 + urand(), (int)ea));
      b[i] = round_to(dt, (i % 3 ? 1 : -1) * ldexp(1 + urand(), (int)eb));
    }
    ag_tensor *ta = up(dt, n, a), *tb = up(dt, n, b);
    if (!ta || !tb) {
      ag_tensor_release(ta);
      ag_tensor_release(tb);
      continue;
    }
    for (int op = 0; op < 2; op++) {
      ag_tensor *y = op ? ag_remainder(ta, tb) : ag_fmod(ta, tb);
      if (!y) fail_msg("%s: %s", op ? "remainder" : "fmod", ag_last_error());
      double *got = down(y);
      int nb = 0;
      for (int i = 0; i < n; i++) {
        double r = op ? ref_remainder(a[i], b[i], dt) : fmod(a[i], b[i]);
        if (got[i] != r && nb++ < 6)
          fprintf(stderr, "%s: %s %s(%a, %a) = %a, exact %a\n", DEVNAME, ag_dtype_name(dt), op ? "remainder" : "fmod",
                  a[i], b[i], got[i], r);
      }
      if (nb) fprintf(stderr, "%s: %s %s: %d of %d wrong\n", DEVNAME, ag_dtype_name(dt), op ? "remainder" : "fmod", nb, n);
      bad += nb;
      free(got);
      ag_tensor_release(y);
    }
    ag_tensor_release(ta);
    ag_tensor_release(tb);
  }
  free(a);
  free(b);
  assert_int_equal(bad, 0);
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: gpu3_accuracy_test DEVICE\n");
    return 2;
  }
  DEVNAME = argv[1];
  char kind[32];
  size_t k = strcspn(argv[1], ":");
  if (k >= sizeof kind) return 2;
  memcpy(kind, argv[1], k);
  kind[k] = 0;
  ag_backend_kind bk;
  if (ag_backend_find(kind, &bk) != AG_OK || !ag_backend_available(bk, NULL) ||
      ag_device_parse(argv[1], &DEV) != AG_OK) {
    fprintf(stderr, "%s absent: skipped\n", argv[1]);
    return 77;
  }
  const struct CMUnitTest t[] = {
      cmocka_unit_test(test_gelu_backward), cmocka_unit_test(test_mish_backward), cmocka_unit_test(test_log1p),
      cmocka_unit_test(test_expm1),         cmocka_unit_test(test_mish_forward),  cmocka_unit_test(test_fmod_remainder),
  };
  return cmocka_run_group_tests_name("gpu3_accuracy", t, NULL, NULL);
}
