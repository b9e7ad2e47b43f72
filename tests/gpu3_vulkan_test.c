/* The Vulkan backend at the level of the specification rather than of one
 * driver: NaN, infinity and signed-zero results of the ops that depend on
 * them compared with the CPU (max/min/argmax, pow, atan2, remainder, fmod,
 * comparisons, softmax, max pooling, attention's -inf masking, the AMP
 * non-finite check), the SignedZeroInfNanPreserve execution mode in every
 * SPIR-V module, a timeline semaphore destroyed while another stream's
 * batch waits on it, and the device limits and non-coherent memory through
 * the AG_VULKAN_TEST switch (docs/vulkan.md). Run under the validation
 * layers (tests/gpu3_vulkan.cmake): any message fails the process.
 *
 * usage: gpu3_vulkan_test GROUP [SPV...]; GROUP is ops, semaphore, spirv
 * (the .spv files follow), coherent (run with AG_VULKAN_TEST=noncoherent),
 * no_float_controls (AG_VULKAN_TEST=no_float_controls), max_buffer
 * (AG_VULKAN_TEST=max_buffer_size:8388608) or workgroup
 * (AG_VULKAN_TEST=max_workgroup_size:128). Skips (77) without vulkan:0. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <signal.h>
#include <unistd.h>

#include "anygrad/anygrad.h"

static ag_device VK;
static int g_nspv;
static char **g_spv;

static bool have_vulkan(void) {
  ag_backend_kind k;
  if (ag_backend_find("vulkan", &k) != AG_OK) return false;
  return ag_backend_available(k, NULL) && ag_device_parse("vulkan:0", &VK) == AG_OK;
}

/* ---- values in and out ---- */

/* A tensor of dtype dt (f32 or f64) with values v. */
static ag_tensor *up(ag_device d, ag_dtype dt, int nd, const int64_t *shape, const double *v) {
  int64_t n = 1;
  for (int i = 0; i < nd; i++) n *= shape[i];
  ag_tensor *t = NULL;
  if (dt == AG_F64) {
    t = ag_from_host(d, dt, nd, shape, v);
  } else {
    float *f = malloc((size_t)n * sizeof *f);
    assert_non_null(f);
    for (int64_t i = 0; i < n; i++) f[i] = (float)v[i];
    t = ag_from_host(d, AG_F32, nd, shape, f);
    free(f);
  }
  assert_non_null(t);
  return t;
}

/* t's values as doubles (f32, f64, i64, bool); returns the count. */
static int64_t down(ag_tensor *t, double **out) {
  assert_non_null(t);
  int64_t n = ag_tensor_numel(t);
  ag_dtype dt = ag_tensor_dtype(t);
  size_t es = ag_dtype_size(dt);
  void *h = malloc((size_t)(n ? n : 1) * es);
  double *o = malloc((size_t)(n ? n : 1) * sizeof *o);
  assert_true(h && o);
  ag_status st = ag_to_host(t, h, (size_t)n * es);
  if (st != AG_OK) fail_msg("ag_to_host: %s", ag_last_error());
  for (int64_t i = 0; i < n; i++) {
    if (dt == AG_F32) o[i] = ((float *)h)[i];
    else if (dt == AG_F64) o[i] = ((double *)h)[i];
    else if (dt == AG_I64) o[i] = (double)((int64_t *)h)[i];
    else if (dt == AG_I32) o[i] = ((int32_t *)h)[i];
    else if (dt == AG_BOOL || dt == AG_U8) o[i] = ((uint8_t *)h)[i];
    else fail_msg("unexpected dtype %s", ag_dtype_name(dt));
  }
  free(h);
  *out = o;
  return n;
}

/* NaN matches any NaN; an infinity or a zero matches only itself (sign
 * included); other values within rel of b, or atol (transcendental results
 * may differ by a few ulp between devices, and a sum that cancels by more). */
static bool same(double a, double b, double rel, double atol) {
  if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
  if (isinf(a) || isinf(b) || a == 0 || b == 0) return a == b && signbit(a) == signbit(b);
  return fabs(a - b) <= rel * fabs(b) || fabs(a - b) <= atol;
}

typedef ag_tensor *(*build_fn)(ag_device d, ag_dtype dt, int variant);

/* Runs f on the cpu and on vulkan:0 and compares every element; prints the
 * inputs' description and the first mismatches. */
static int check_both(const char *what, build_fn f, ag_dtype dt, int variant, double rel, double atol,
                      const double *ins_a, const double *ins_b, int64_t nb) {
  ag_tensor *c = f(AG_CPU, dt, variant), *v = f(VK, dt, variant);
  if (!c || !v) fail_msg("%s %s: %s", what, ag_dtype_name(dt), ag_last_error());
  double *rc, *rv;
  int64_t n = down(c, &rc), m = down(v, &rv);
  assert_int_equal(n, m);
  int bad = 0;
  for (int64_t i = 0; i < n; i++)
    if (!same(rv[i], rc[i], rel, atol)) {
      if (bad++ < 8) {
        if (ins_a && nb > 0)
          fprintf(stderr, "%s %s variant %d: (%g, %g) -> vulkan %a, cpu %a\n", what, ag_dtype_name(dt), variant,
                  ins_a[i / nb], ins_b ? ins_b[i % nb] : 0.0, rv[i], rc[i]);
        else
          fprintf(stderr, "%s %s variant %d: element %lld: vulkan %a, cpu %a\n", what, ag_dtype_name(dt), variant,
                  (long long)i, rv[i], rc[i]);
      }
    }
  free(rc);
  free(rv);
  ag_tensor_release(c);
  ag_tensor_release(v);
  if (bad)
    fprintf(stderr, "%s %s variant %d: %d of %lld elements differ from the cpu\n", what, ag_dtype_name(dt), variant, bad,
            (long long)n);
  return bad;
}

/* ---- elementwise: every pair of special values ---- */

static const double G[] = {0.0, -0.0, 0.5, -0.5, 1, -1, 1.5, -2.5, 2, -2, 3, -3, 1e30, -1e30, INFINITY, -INFINITY,
                           NAN};
#define NG ((int64_t)(sizeof G / sizeof G[0]))
/* fmod and remainder: no huge finite values (their quotient is not exact
 * in a GPU's a - trunc(a/b)*b, a matter of precision, not of NaN rules) */
static const double GM[] = {0.0, -0.0, 0.5, -0.5, 1.5, -2.5, 3, -3, INFINITY, -INFINITY, NAN};
#define NGM ((int64_t)(sizeof GM / sizeof GM[0]))

static ag_tensor *bin_op(ag_device d, ag_dtype dt, int op) {
  const double *g = op >= 3 && op <= 4 ? GM : G;
  int64_t n = op >= 3 && op <= 4 ? NGM : NG;
  int64_t sa[2] = {n, 1}, sb[2] = {1, n};
  ag_tensor *a = up(d, dt, 2, sa, g), *b = up(d, dt, 2, sb, g);
  ag_tensor *r = NULL;
  switch (op) {
    case 0: r = ag_maximum(a, b); break;
    case 1: r = ag_minimum(a, b); break;
    case 2: r = ag_atan2(a, b); break;
    case 3: r = ag_remainder(a, b); break;
    case 4: r = ag_fmod(a, b); break;
    case 5: r = ag_eq(a, b); break;
    case 6: r = ag_ne(a, b); break;
    case 7: r = ag_lt(a, b); break;
    case 8: r = ag_ge(a, b); break;
    case 9: r = ag_hypot(a, b); break;
    case 10: r = ag_div(a, b); break;
    case 11: r = ag_mul(a, b); break;
    default: break;
  }
  ag_tensor_release(a);
  ag_tensor_release(b);
  return r;
}

static void test_binary_special(void **state) {
  (void)state;
  static const char *names[] = {"maximum", "minimum", "atan2", "remainder", "fmod", "eq",
                                "ne",      "lt",      "ge",    "hypot",     "div",  "mul"};
  ag_dtype dts[2] = {AG_F32, AG_F64};
  int bad = 0;
  for (int k = 0; k < 2; k++)
    for (int op = 0; op < 12; op++) {
      const double *g = op >= 3 && op <= 4 ? GM : G;
      int64_t n = op >= 3 && op <= 4 ? NGM : NG;
      /* Vulkan allows 4096 ulp for f32 atan (lavapipe's is about 100 ulp off) */
      double rel = dts[k] == AG_F64 ? 1e-13 : op == 2 ? 4096 * 0x1p-23 : 2e-6;
      bad += check_both(names[op], bin_op, dts[k], op, rel, 0, g, g, n);
    }
  assert_int_equal(bad, 0);
}

/* pow(x, s) for each special x and exponent s, and exp2 (pow(2, x)) */
static const double PS[] = {0.0, 1, 2, 3, -1, -2, -3, 0.5, -0.5, 1.0 / 3, 2.5, INFINITY, -INFINITY, NAN};
#define NPS ((int)(sizeof PS / sizeof PS[0]))

static ag_tensor *pow_op(ag_device d, ag_dtype dt, int variant) {
  int64_t n = NG;
  ag_tensor *x = up(d, dt, 1, &n, G);
  ag_tensor *r = variant < NPS ? ag_pow_scalar(x, PS[variant]) : ag_exp2(x);
  ag_tensor_release(x);
  return r;
}

static void test_pow_special(void **state) {
  (void)state;
  ag_dtype dts[2] = {AG_F32, AG_F64};
  int bad = 0;
  for (int k = 0; k < 2; k++)
    for (int s = 0; s <= NPS; s++)
      bad += check_both("pow", pow_op, dts[k], s, dts[k] == AG_F64 ? 1e-13 : 2e-6, 0, G, NULL, 1);
  assert_int_equal(bad, 0);
}

/* every unary op of the table on the special values (the scalars its
 * conformance rows use) */
typedef struct unary_entry {
  const char *name;
  int api; /* 0, 1 or 2 scalars */
  ag_tensor *(*f0)(ag_tensor *);
  ag_tensor *(*f1)(ag_tensor *, double);
  ag_tensor *(*f2)(ag_tensor *, double, double);
  double s0, s1;
} unary_entry;
#define U_A0(name, ts0, ts1) {#name, 0, ag_##name, NULL, NULL, ts0, ts1},
#define U_A1(name, ts0, ts1) {#name, 1, NULL, ag_##name, NULL, ts0, ts1},
#define U_A2(name, ts0, ts1) {#name, 2, NULL, NULL, ag_##name, ts0, ts1},
#define U_AH(name, ts0, ts1)
#define U_ENTRY(ID, name, api, fwd, save, bwd, amp, ints, cost, dom, gdom, ts0, ts1) U_##api(name, ts0, ts1)
static const unary_entry UNARY[] = {AG_UNARY_OPS(U_ENTRY)};
#define NUNARY ((int)(sizeof UNARY / sizeof UNARY[0]))

/* sin and cos: no huge arguments (GLSL defines their precision on [-pi, pi]
 * only, and the f64 range reduction is for the table's domains) */
static bool trig(int u) { return !strcmp(UNARY[u].name, "sin") || !strcmp(UNARY[u].name, "cos"); }

static ag_tensor *unary_op(ag_device d, ag_dtype dt, int variant) {
  double g[NG];
  int64_t n = 0;
  for (int i = 0; i < NG; i++)
    if (!trig(variant) || fabs(G[i]) != 1e30) g[n++] = G[i];
  ag_tensor *x = up(d, dt, 1, &n, g);
  const unary_entry *u = &UNARY[variant];
  ag_tensor *r = u->api == 0 ? u->f0(x) : u->api == 1 ? u->f1(x, u->s0) : u->f2(x, u->s0, u->s1);
  ag_tensor_release(x);
  return r;
}

static void test_unary_special(void **state) {
  (void)state;
  ag_dtype dts[2] = {AG_F32, AG_F64};
  int bad = 0;
  for (int k = 0; k < 2; k++)
    for (int u = 0; u < NUNARY; u++) {
      /* Vulkan's f32 sin, cos, exp, log are not correctly rounded; the
       * f64 erf is accurate to about 1e-12 where 1 + erf(x) cancels */
      bad += check_both(UNARY[u].name, unary_op, dts[k], u, dts[k] == AG_F64 ? 1e-11 : 1e-4, 0, trig(u) ? NULL : G,
                        NULL, 1);
    }
  assert_int_equal(bad, 0);
}

/* ---- reductions ---- */

#define RR 7
#define RC 300
static double *red_rows(void) {
  static double v[RR * RC];
  for (int i = 0; i < RR * RC; i++) v[i] = sin(0.37 * i) * 5;
  v[0 * RC + 1] = NAN; /* NaN among numbers, twice */
  v[0 * RC + 290] = NAN;
  for (int j = 0; j < RC; j++) v[1 * RC + j] = -INFINITY; /* all -inf */
  v[2 * RC + 7] = INFINITY;                                 /* +inf twice */
  v[2 * RC + 260] = INFINITY;
  for (int j = 0; j < RC; j++) v[3 * RC + j] = j % 2 ? 0.0 : -0.0; /* signed zeros */
  v[4 * RC + 299] = NAN;                                            /* NaN last */
  v[4 * RC + 5] = INFINITY;
  v[5 * RC + 3] = -INFINITY; /* -inf and +inf: sum NaN */
  v[5 * RC + 4] = INFINITY;
  for (int j = 0; j < RC; j++) v[6 * RC + j] = NAN; /* all NaN */
  return v;
}

/* variant: op * 2 + layout; layout 0 reduces the rows (dim 1 of [RR, RC]),
 * layout 1 the columns of the transposed copy (dim 0 of [RC, RR]) */
static ag_tensor *red_op(ag_device d, ag_dtype dt, int variant) {
  int op = variant / 2, cols = variant % 2;
  double *v = red_rows();
  double *t = malloc(sizeof(double) * RR * RC);
  assert_non_null(t);
  for (int i = 0; i < RR; i++)
    for (int j = 0; j < RC; j++) t[j * RR + i] = v[i * RC + j];
  int64_t s[2] = {cols ? RC : RR, cols ? RR : RC};
  ag_tensor *x = up(d, dt, 2, s, cols ? t : v);
  free(t);
  int dim = cols ? 0 : 1;
  ag_tensor *r = NULL;
  switch (op) {
    case 0: r = ag_max(x, 1, &dim, false); break;
    case 1: r = ag_min(x, 1, &dim, false); break;
    case 2: r = ag_argmax(x, dim, false); break;
    case 3: r = ag_sum(x, 1, &dim, false); break;
    case 4: r = ag_softmax(x, dim); break;
    case 5: r = ag_log_softmax(x, dim); break;
    default: break;
  }
  ag_tensor_release(x);
  return r;
}

static void test_reduce_special(void **state) {
  (void)state;
  static const char *names[] = {"max", "min", "argmax", "sum", "softmax", "log_softmax"};
  ag_dtype dts[2] = {AG_F32, AG_F64};
  int bad = 0;
  for (int k = 0; k < 2; k++)
    for (int v = 0; v < 12; v++) {
      if (v / 2 >= 4 && v % 2) continue; /* softmax runs on rows */
      bad += check_both(names[v / 2], red_op, dts[k], v, dts[k] == AG_F64 ? 1e-12 : 1e-5, 0, NULL, NULL, 0);
    }
  assert_int_equal(bad, 0);
}

/* ---- max pooling ---- */

static ag_tensor *pool_op(ag_device d, ag_dtype dt, int variant) {
  (void)variant;
  double v[2 * 16];
  for (int i = 0; i < 32; i++) v[i] = cos(0.7 * i);
  v[1] = NAN;                              /* window (0,0) of plane 0 */
  v[6] = INFINITY;                         /* window (0,1) */
  v[8] = v[9] = v[12] = v[13] = -INFINITY; /* window (1,0): all -inf */
  v[16 + 10] = NAN;                        /* plane 1, window (1,1): NaN before inf */
  v[16 + 11] = INFINITY;
  int64_t s[4] = {1, 2, 4, 4};
  ag_tensor *x = up(d, dt, 4, s, v);
  ag_pool2d_params p = {.kernel = {2, 2}};
  ag_tensor *r = ag_max_pool2d(x, &p);
  ag_tensor_release(x);
  return r;
}

static void test_pool_special(void **state) {
  (void)state;
  assert_int_equal(check_both("max_pool2d", pool_op, AG_F32, 0, 0, 0, NULL, NULL, 0), 0);
}

/* ---- attention: -inf in the mask, a fully masked row, causal ---- */

static ag_tensor *sdpa_op(ag_device d, ag_dtype dt, int variant) {
  enum { T = 6, S = 6, D = 8 };
  double q[T * D], k[S * D], v[S * D], m[T * S];
  for (int i = 0; i < T * D; i++) q[i] = sin(0.3 * i);
  for (int i = 0; i < S * D; i++) k[i] = cos(0.2 * i), v[i] = sin(0.11 * i + 1);
  for (int i = 0; i < T * S; i++) m[i] = (i % 5 == 1) ? -INFINITY : 0.1 * (i % 3);
  for (int j = 0; j < S; j++) m[2 * S + j] = -INFINITY; /* row 2: every key blocked */
  int64_t sq[4] = {1, 1, T, D}, sk[4] = {1, 1, S, D}, sm[2] = {T, S};
  ag_tensor *tq = up(d, dt, 4, sq, q), *tk = up(d, dt, 4, sk, k), *tv = up(d, dt, 4, sk, v);
  ag_tensor *tm = variant == 1 ? NULL : up(d, dt, 2, sm, m);
  ag_tensor *r = ag_scaled_dot_product_attention(tq, tk, tv, tm, variant >= 1, 0.5, 0.0, NULL);
  ag_tensor_release(tq);
  ag_tensor_release(tk);
  ag_tensor_release(tv);
  ag_tensor_release(tm);
  return r;
}

static void test_attention_masking(void **state) {
  (void)state;
  int bad = 0;
  /* outputs of order 1: an absolute bound where sums cancel */
  for (int variant = 0; variant < 3; variant++)
    bad += check_both("sdpa", sdpa_op, AG_F32, variant, 1e-5, 1e-5, NULL, NULL, 0);
  assert_int_equal(bad, 0);
}

/* ---- the AMP non-finite check: a gradient that is inf, NaN, or finite
 * inputs whose scaled gradient overflows ---- */

static int64_t amp_skips(ag_device d, const double *c, int64_t n) {
  ag_tensor *p = up(d, AG_F32, 1, &n, (double[8]){0});
  ag_tensor *ct = up(d, AG_F32, 1, &n, c);
  assert_int_equal(ag_tensor_set_requires_grad(p, true), AG_OK);
  ag_param_list l = {0};
  assert_int_equal(ag_params_add(&l, "p", p), AG_OK);
  ag_grad_scaler *s = ag_grad_scaler_create(d, NULL);
  assert_non_null(s);
  ag_tensor *pc = ag_mul(p, ct);
  ag_tensor *loss = ag_sum(pc, 0, NULL, false);
  ag_tensor *scaled = ag_grad_scaler_scale(s, loss);
  assert_non_null(scaled);
  assert_int_equal(ag_backward(scaled, NULL, false), AG_OK);
  assert_int_equal(ag_grad_scaler_unscale_params_(s, &l), AG_OK);
  assert_int_equal(ag_grad_scaler_update(s), AG_OK);
  int64_t k = ag_grad_scaler_skipped_steps(s);
  ag_tensor_release(scaled);
  ag_tensor_release(loss);
  ag_tensor_release(pc);
  ag_grad_scaler_free(s);
  ag_params_free(&l);
  ag_tensor_release(ct);
  ag_tensor_release(p);
  return k;
}

static void test_amp_nonfinite(void **state) {
  (void)state;
  static const double cases[][4] = {{1, 2, 3, 4},       {1, INFINITY, 3, 4}, {1, 2, -INFINITY, 4},
                                    {NAN, 2, 3, 4},     {1, 1e34, 3, 4},     {3e38, -3e38, 0, -0.0},
                                    {1e-45, -1e-45, 0, 1}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int64_t want = amp_skips(AG_CPU, cases[i], 4), got = amp_skips(VK, cases[i], 4);
    if (want != got) fail_msg("AMP case %zu: vulkan skipped %lld step(s), cpu %lld", i, (long long)got, (long long)want);
  }
}

/* ---- a stream waits on an event of a stream destroyed right after ----
 * The semaphore of the destroyed stream must outlive the waiting batch:
 * lavapipe's queue waited for ever on the freed one (the next stream's
 * synchronization never returned), so a watchdog turns a hang into a
 * failure. */

static void on_alarm(int sig) {
  (void)sig;
  static const char m[] = "gpu3_vulkan_test: hung (a batch waits on a destroyed semaphore?)\n";
  if (write(2, m, sizeof m - 1) < 0) _exit(1);
  _exit(1);
}

static void test_semaphore_lifetime(void **state) {
  (void)state;
  int64_t n = 1 << 16;
  ag_stream *b = ag_stream_create(VK);
  assert_non_null(b);
  ag_tensor *acc = NULL;
  ag_stream *prev = ag_stream_set_current(VK, b);
  acc = ag_zeros(VK, AG_F32, 1, &n);
  assert_non_null(acc);
  ag_stream_set_current(VK, prev);
  for (int it = 0; it < 40; it++) {
    ag_stream *a = ag_stream_create(VK);
    ag_event *e = ag_event_create(VK, false);
    assert_true(a && e);
    /* a: some work, then the event */
    ag_stream_set_current(VK, a);
    ag_tensor *one = ag_full(VK, AG_F32, 1, &n, 1.0);
    assert_non_null(one);
    assert_int_equal(ag_tensor_record_stream(one, b), AG_OK);
    assert_int_equal(ag_event_record(e, a), AG_OK);
    /* b: queued work ahead, the wait, a kernel after it, submitted */
    ag_stream_set_current(VK, b);
    for (int k = 0; k < 4; k++) {
      ag_tensor *t = ag_mul_scalar(acc, 1.0);
      ag_tensor_release(acc);
      acc = t;
    }
    assert_int_equal(ag_stream_wait_event(b, e), AG_OK);
    ag_tensor *t = ag_add(acc, one);
    assert_non_null(t);
    ag_tensor_release(acc);
    acc = t;
    (void)ag_stream_query(b); /* submits b's batch with the wait */
    ag_stream_set_current(VK, prev);
    ag_tensor_release(one);
    /* the event and its stream go while b's batch may still wait */
    ag_event_destroy(e);
    ag_stream_destroy(a);
  }
  assert_int_equal(ag_stream_synchronize(b), AG_OK);
  float h[4];
  ag_tensor *head = ag_slice(acc, 0, 0, 4, 1);
  assert_non_null(head);
  assert_int_equal(ag_to_host(head, h, sizeof h), AG_OK);
  for (int i = 0; i < 4; i++) assert_true(h[i] == 40.0f);
  ag_tensor_release(head);
  ag_tensor_release(acc);
  ag_stream_destroy(b);
  assert_int_equal(ag_device_synchronize(VK), AG_OK);
}

/* ---- SPIR-V: every module declares SignedZeroInfNanPreserve ---- */

enum { SPV_OP_CAPABILITY = 17, SPV_OP_EXECUTION_MODE = 16, SPV_CAP_FLOAT64 = 10, SPV_CAP_SZINP = 4466,
       SPV_MODE_SZINP = 4461 };

static void test_spirv_execution_mode(void **state) {
  (void)state;
  assert_true(g_nspv > 0);
  for (int f = 0; f < g_nspv; f++) {
    FILE *fp = fopen(g_spv[f], "rb");
    if (!fp) fail_msg("cannot open %s", g_spv[f]);
    fseek(fp, 0, SEEK_END);
    long bytes = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    assert_true(bytes > 20 && bytes % 4 == 0);
    uint32_t *w = malloc((size_t)bytes);
    assert_non_null(w);
    assert_int_equal(fread(w, 1, (size_t)bytes, fp), (size_t)bytes);
    fclose(fp);
    size_t nw = (size_t)bytes / 4;
    assert_int_equal(w[0], 0x07230203u);
    bool cap = false, f64 = false, mode32 = false, mode64 = false;
    for (size_t i = 5; i < nw;) {
      uint32_t len = w[i] >> 16, op = w[i] & 0xffffu;
      if (len == 0 || i + len > nw) fail_msg("%s: malformed instruction at word %zu", g_spv[f], i);
      if (op == SPV_OP_CAPABILITY && len == 2) {
        cap |= w[i + 1] == SPV_CAP_SZINP;
        f64 |= w[i + 1] == SPV_CAP_FLOAT64;
      }
      if (op == SPV_OP_EXECUTION_MODE && len == 4 && w[i + 2] == SPV_MODE_SZINP) {
        mode32 |= w[i + 3] == 32;
        mode64 |= w[i + 3] == 64;
      }
      i += len;
    }
    free(w);
    if (!cap || !mode32 || (f64 && !mode64))
      fail_msg("%s: %s%s%s", g_spv[f], cap ? "" : "no SignedZeroInfNanPreserve capability; ",
               mode32 ? "" : "no SignedZeroInfNanPreserve 32 execution mode; ",
               f64 && !mode64 ? "Float64 without SignedZeroInfNanPreserve 64" : "");
  }
}

/* ---- memory through AG_VULKAN_TEST ---- */

/* Under AG_VULKAN_TEST=noncoherent every host-visible buffer but pinned
 * memory is read and written through a host copy that reaches the device
 * only through flushes and invalidations of whole nonCoherentAtomSize
 * blocks, as on a device without HOST_COHERENT memory: kernels (argument
 * blocks), uploads, downloads and the index error word must still be right. */
static void test_noncoherent(void **state) {
  (void)state;
  int64_t n = 3000;
  double *v = malloc((size_t)n * sizeof *v);
  assert_non_null(v);
  for (int64_t i = 0; i < n; i++) v[i] = (double)(i % 97) - 40;
  ag_tensor *x = up(VK, AG_F32, 1, &n, v);
  ag_tensor *y = x;
  for (int k = 0; k < 300; k++) { /* more than one batch */
    ag_tensor *t = ag_add_scalar(y, 1.0);
    assert_non_null(t);
    if (y != x) ag_tensor_release(y);
    y = t;
  }
  double *r;
  assert_int_equal(down(y, &r), n);
  for (int64_t i = 0; i < n; i++)
    if (r[i] != v[i] + 300) fail_msg("element %lld: %g, expected %g", (long long)i, r[i], v[i] + 300);
  free(r);
  /* odd offsets and sizes of downloads (a narrow of the segment) */
  ag_tensor *mid = ag_slice(y, 0, 13, 30, 1);
  float h[17];
  assert_int_equal(ag_to_host(mid, h, sizeof h), AG_OK);
  for (int i = 0; i < 17; i++) assert_true(h[i] == (float)(v[13 + i] + 300));
  ag_tensor_release(mid);
  /* the error word */
  int64_t vs[2] = {10, 4}, ni = 3;
  ag_tensor *table = ag_zeros(VK, AG_F32, 2, vs);
  ag_tensor *idx = ag_from_host(VK, AG_I64, 1, &ni, (int64_t[]){1, 12, 2});
  ag_tensor *e = ag_embedding(table, idx);
  ag_status st = e ? ag_stream_synchronize(ag_stream_current(VK)) : ag_last_status();
  assert_int_equal(st, AG_ERR_INDEX);
  ag_tensor_release(e);
  ag_tensor *ok = ag_from_host(VK, AG_I64, 1, &ni, (int64_t[]){1, 9, 2});
  ag_tensor *e2 = ag_embedding(table, ok);
  assert_non_null(e2);
  assert_int_equal(ag_stream_synchronize(ag_stream_current(VK)), AG_OK);
  ag_tensor_release(e2);
  ag_tensor_release(ok);
  ag_tensor_release(idx);
  ag_tensor_release(table);
  ag_tensor_release(y);
  ag_tensor_release(x);
  free(v);
}

/* AG_VULKAN_TEST=max_buffer_size:8388608: a segment above the device's
 * maxBufferSize is AG_ERR_OOM naming the limit; smaller ones work. */
static void test_max_buffer(void **state) {
  (void)state;
  int64_t small = 1000, big = 4 << 20; /* 16 MiB of f32 */
  ag_tensor *s = ag_ones(VK, AG_F32, 1, &small);
  assert_non_null(s);
  ag_tensor *sum = ag_sum(s, 0, NULL, false);
  assert_true(ag_item(sum) == 1000.0);
  ag_tensor_release(sum);
  ag_tensor *b = ag_zeros(VK, AG_F32, 1, &big);
  assert_null(b);
  assert_int_equal(ag_last_status(), AG_ERR_OOM);
  if (!strstr(ag_last_error(), "maxBufferSize")) fail_msg("message: %s", ag_last_error());
  ag_tensor_release(s);
}

/* AG_VULKAN_TEST=max_workgroup_size:128: the kernels' 256-wide groups do
 * not fit: the device is unusable and says why. */
static void test_workgroup(void **state) {
  (void)state;
  ag_backend_kind k;
  assert_int_equal(ag_backend_find("vulkan", &k), AG_OK);
  const char *why = NULL;
  assert_false(ag_backend_available(k, &why));
  if (!why || !strstr(why, "maxComputeWorkGroupSize[0] is 128")) fail_msg("reason: %s", why ? why : "(none)");
}

/* AG_VULKAN_TEST=no_float_controls: the device description says so */
static void test_props_no_float_controls(void **state) {
  (void)state;
  ag_device_props p;
  assert_int_equal(ag_device_props_get(VK, &p), AG_OK);
  if (!strstr(p.arch, "NaN/inf not preserved")) fail_msg("arch: %s", p.arch);
}

int main(int argc, char **argv) {
  const char *group = argc > 1 ? argv[1] : "ops";
  if (!strcmp(group, "workgroup")) {
    const struct CMUnitTest t[] = {cmocka_unit_test(test_workgroup)};
    return cmocka_run_group_tests_name("gpu3_vulkan_workgroup", t, NULL, NULL);
  }
  if (!have_vulkan()) {
    fprintf(stderr, "vulkan:0 unavailable: skipped\n");
    return 77;
  }
  if (!strcmp(group, "spirv")) {
    g_nspv = argc - 2;
    g_spv = argv + 2;
    const struct CMUnitTest t[] = {cmocka_unit_test(test_spirv_execution_mode)};
    return cmocka_run_group_tests_name("gpu3_vulkan_spirv", t, NULL, NULL);
  }
  if (!strcmp(group, "semaphore")) {
    signal(SIGALRM, on_alarm);
    alarm(90);
    const struct CMUnitTest t[] = {cmocka_unit_test(test_semaphore_lifetime)};
    return cmocka_run_group_tests_name("gpu3_vulkan_semaphore", t, NULL, NULL);
  }
  if (!strcmp(group, "coherent")) {
    const struct CMUnitTest t[] = {cmocka_unit_test(test_noncoherent), cmocka_unit_test(test_binary_special),
                                   cmocka_unit_test(test_attention_masking)};
    return cmocka_run_group_tests_name("gpu3_vulkan_coherent", t, NULL, NULL);
  }
  if (!strcmp(group, "no_float_controls")) {
    /* the modules without SignedZeroInfNanPreserve: the NaN rules tested on
     * the bits still hold (and the stripped modules are valid SPIR-V) */
    const struct CMUnitTest t[] = {cmocka_unit_test(test_props_no_float_controls),
                                   cmocka_unit_test(test_binary_special), cmocka_unit_test(test_reduce_special),
                                   cmocka_unit_test(test_amp_nonfinite), cmocka_unit_test(test_attention_masking)};
    return cmocka_run_group_tests_name("gpu3_vulkan_no_float_controls", t, NULL, NULL);
  }
  if (!strcmp(group, "max_buffer")) {
    const struct CMUnitTest t[] = {cmocka_unit_test(test_max_buffer)};
    return cmocka_run_group_tests_name("gpu3_vulkan_max_buffer", t, NULL, NULL);
  }
  const struct CMUnitTest t[] = {
      cmocka_unit_test(test_binary_special), cmocka_unit_test(test_pow_special), cmocka_unit_test(test_unary_special),
      cmocka_unit_test(test_reduce_special), cmocka_unit_test(test_pool_special),
      cmocka_unit_test(test_attention_masking), cmocka_unit_test(test_amp_nonfinite),
  };
  return cmocka_run_group_tests_name("gpu3_vulkan_ops", t, NULL, NULL);
}
