/* The default-mode reductions of the OpenCL backend (rowred.cl's work-group
 * trees over multi-pass grids, the 4-wide row kernels of nn.cl) at the sizes
 * where their grids change shape: 0, 1 and odd element counts, 2^24 + 1
 * elements (several passes), rows of 1 and of 1M, columns split into
 * chunks; each against a host reference in double (group norm against the
 * CPU backend's), and repeated runs bit
 * for bit (the tree is fixed for a size and device). No timing here: the
 * speed is measured by `anygrad bench` (docs/opencl.md).
 *
 * usage: cl_reduce_speed_test DEVICE (opencl:0); skips (77) where the
 * device is absent. */
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

/* A deterministic sample in [-1, 1) (a 64-bit LCG). */
static float *sample(int64_t n, uint64_t seed) {
  float *v = malloc((size_t)(n ? n : 1) * sizeof *v);
  assert_non_null(v);
  uint64_t s = seed * 6364136223846793005ull + 1442695040888963407ull;
  for (int64_t i = 0; i < n; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    v[i] = (float)((double)(s >> 40) / (double)(1 << 24) * 2.0 - 1.0);
  }
  return v;
}

static ag_tensor *up(int ndim, const int64_t *shape, const float *v) {
  ag_tensor *t = ag_from_host(DEV, AG_F32, ndim, shape, v);
  if (!t) fail_msg("ag_from_host: %s", ag_last_error());
  return t;
}

/* t's values as floats (f16 and bf16 through a cast); caller frees. */
static float *down(ag_tensor *t) {
  if (!t) fail_msg("op failed: %s", ag_last_error());
  ag_tensor *t32 = ag_tensor_dtype(t) == AG_F32 ? t : ag_cast(t, AG_F32);
  assert_non_null(t32);
  int64_t n = ag_tensor_numel(t32);
  float *o = malloc((size_t)(n ? n : 1) * sizeof *o);
  assert_non_null(o);
  ag_status st = ag_to_host(t32, o, (size_t)n * sizeof *o);
  if (st != AG_OK) fail_msg("ag_to_host: %s", ag_last_error());
  if (t32 != t) ag_tensor_release(t32);
  return o;
}

/* |got - want| within tol * scale (NaN only for NaN). */
static void near(const char *what, int64_t i, double got, double want, double tol, double scale) {
  if (isnan(want) || isnan(got)) {
    if (isnan(want) != isnan(got)) fail_msg("%s[%lld]: %g, want %g", what, (long long)i, got, want);
    return;
  }
  if (isinf(want) || isinf(got)) {
    if (got != want) fail_msg("%s[%lld]: %g, want %g", what, (long long)i, got, want);
    return;
  }
  if (fabs(got - want) > tol * scale) fail_msg("%s[%lld]: %.9g, want %.9g", what, (long long)i, got, want);
}

/* sum, mean, max, min over all n elements, in f32 and f16. */
static void check_all(int64_t n, ag_dtype dt) {
  float *v = sample(n, (uint64_t)n);
  ag_tensor *x32 = up(1, &n, v);
  ag_tensor *x = dt == AG_F32 ? x32 : ag_cast(x32, dt);
  assert_non_null(x);
  if (x != x32) { /* the reference takes the values the device holds */
    free(v);
    v = down(x);
  }
  double s = 0, a = 0, mx = -INFINITY, mn = INFINITY;
  for (int64_t i = 0; i < n; i++) {
    s += v[i];
    a += fabs(v[i]);
    if (v[i] > mx) mx = v[i];
    if (v[i] < mn) mn = v[i];
  }
  const double tol = dt == AG_F32 ? 1e-6 : 2e-3;
  float *r = down(ag_sum(x, 0, NULL, false));
  near("sum", n, r[0], s, tol, a + 1);
  free(r);
  if (n) {
    r = down(ag_mean(x, 0, NULL, false));
    near("mean", n, r[0], s / (double)n, tol, a / (double)n + 1e-30);
    free(r);
    r = down(ag_max(x, 0, NULL, false));
    near("max", n, r[0], mx, 0, 0);
    free(r);
    r = down(ag_min(x, 0, NULL, false));
    near("min", n, r[0], mn, 0, 0);
    free(r);
    int64_t first = 0;
    for (int64_t i = 0; i < n; i++)
      if (v[i] == mx) {
        first = i;
        break;
      }
    r = down(ag_argmax(x, 0, false));
    near("argmax", n, r[0], (double)first, 0, 0);
    free(r);
  }
  if (x != x32) ag_tensor_release(x);
  ag_tensor_release(x32);
  free(v);
}

static void test_all_sizes(void **st) {
  (void)st;
  const int64_t ns[] = {0, 1, 2, 3, 5, 7, 63, 1023, 1025, 16385, 65537, 1000003};
  for (size_t i = 0; i < sizeof ns / sizeof *ns; i++) {
    check_all(ns[i], AG_F32);
    check_all(ns[i], AG_F16);
  }
}

/* 2^24 + 1 elements: three passes; the same bits on a second run. */
static void test_all_2p24(void **st) {
  (void)st;
  check_all((INT64_C(1) << 24) + 1, AG_F32);
  int64_t n = (INT64_C(1) << 24) + 1;
  float *v = sample(n, 7);
  ag_tensor *x = up(1, &n, v);
  float *a = down(ag_sum(x, 0, NULL, false)), *b = down(ag_sum(x, 0, NULL, false));
  assert_memory_equal(a, b, sizeof *a);
  free(a);
  free(b);
  ag_tensor_release(x);
  free(v);
}

/* argmax takes the first of equal maxima, across chunks and passes. */
static void test_argmax_ties(void **st) {
  (void)st;
  const int64_t ns[] = {16, 1023, 65537, 1000003};
  for (size_t k = 0; k < sizeof ns / sizeof *ns; k++) {
    int64_t n = ns[k];
    float *v = sample(n, 9);
    v[n - 1] = 5;
    v[n / 2] = 5;
    v[n / 3 + 1] = 5;
    ag_tensor *x = up(1, &n, v);
    float *r = down(ag_argmax(x, 0, false));
    near("argmax ties", n, r[0], (double)(n / 3 + 1), 0, 0);
    free(r);
    ag_tensor_release(x);
    for (int64_t i = 0; i < n; i++) v[i] = -INFINITY;
    x = up(1, &n, v);
    r = down(ag_argmax(x, 0, false));
    near("argmax -inf", n, r[0], 0, 0, 0);
    free(r);
    ag_tensor_release(x);
    free(v);
  }
}

/* max and min propagate a NaN anywhere in the tensor; argmax takes the
 * first NaN. */
static void test_nan(void **st) {
  (void)st;
  const int64_t ns[] = {1, 5, 1023, 65537};
  for (size_t k = 0; k < sizeof ns / sizeof *ns; k++) {
    int64_t n = ns[k];
    for (int64_t at = 0; at < n; at += n / 3 + 1) {
      float *v = sample(n, 3);
      v[at] = NAN;
      v[n - 1] = NAN;
      ag_tensor *x = up(1, &n, v);
      float *am = down(ag_argmax(x, 0, false));
      near("argmax nan", n, am[0], (double)at, 0, 0);
      free(am);
      float *r = down(ag_max(x, 0, NULL, false));
      assert_true(isnan(r[0]));
      free(r);
      r = down(ag_min(x, 0, NULL, false));
      assert_true(isnan(r[0]));
      free(r);
      ag_tensor_release(x);
      free(v);
    }
  }
}

/* sum and max over the last dim of [rows, cols], and over the first. */
static void check_rows(int64_t rows, int64_t cols) {
  int64_t sh[2] = {rows, cols}, n = rows * cols;
  float *v = sample(n, (uint64_t)(rows * 31 + cols));
  ag_tensor *x = up(2, sh, v);
  float *s = down(ag_sum(x, 1, (const int[]){1}, false)), *m = down(ag_max(x, 1, (const int[]){1}, false));
  float *am = down(ag_argmax(x, 1, false));
  for (int64_t i = 0; i < rows; i++) {
    double want = 0, a = 0, mx = -INFINITY;
    int64_t at = 0;
    for (int64_t j = 0; j < cols; j++) {
      want += v[i * cols + j];
      a += fabs(v[i * cols + j]);
      if (v[i * cols + j] > mx) {
        mx = v[i * cols + j];
        at = j;
      }
    }
    near("sum rows", i, s[i], want, 1e-6, a + 1);
    near("max rows", i, m[i], mx, 0, 0);
    near("argmax rows", i, am[i], (double)at, 0, 0);
  }
  free(am);
  free(s);
  free(m);
  s = down(ag_mean(x, 1, (const int[]){0}, false));
  m = down(ag_min(x, 1, (const int[]){0}, false));
  for (int64_t j = 0; j < cols; j++) {
    double want = 0, a = 0, mn = INFINITY;
    for (int64_t i = 0; i < rows; i++) {
      want += v[i * cols + j];
      a += fabs(v[i * cols + j]);
      if (v[i * cols + j] < mn) mn = v[i * cols + j];
    }
    near("mean cols", j, s[j], want / (double)rows, 1e-6, (a + 1) / (double)rows);
    near("min cols", j, m[j], mn, 0, 0);
  }
  free(s);
  free(m);
  ag_tensor_release(x);
  free(v);
}

static void test_rows(void **st) {
  (void)st;
  const int64_t shapes[][2] = {{1, 1},    {5, 1},       {1000, 1}, {7, 3},      {3, 15},   {3, 16},
                               {9, 1023}, {4, 1024},    {2, 4097}, {1, 1 << 20}, {3, 1 << 20}, {1 << 20, 1},
                               {1 << 20, 4}, {1 << 18, 12}, {600, 8},  {513, 3}};
  for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) check_rows(shapes[i][0], shapes[i][1]);
}

/* softmax and log-softmax of [rows, cols] against double. */
static void check_softmax(int64_t rows, int64_t cols) {
  int64_t sh[2] = {rows, cols}, n = rows * cols;
  float *v = sample(n, (uint64_t)(rows + cols));
  for (int64_t i = 0; i < n; i++) v[i] *= 8;
  ag_tensor *x = up(2, sh, v);
  float *p = down(ag_softmax(x, -1)), *lp = down(ag_log_softmax(x, -1));
  for (int64_t i = 0; i < rows; i++) {
    const float *r = v + i * cols;
    double m = -INFINITY, s = 0;
    for (int64_t j = 0; j < cols; j++) m = fmax(m, r[j]);
    for (int64_t j = 0; j < cols; j++) s += exp((double)r[j] - m);
    for (int64_t j = 0; j < cols; j++) {
      double l = (double)r[j] - m - log(s);
      near("softmax", i * cols + j, p[i * cols + j], exp(l), 1e-5, exp(l) + 1e-30);
      near("log_softmax", i * cols + j, lp[i * cols + j], l, 1e-5, fabs(l) + 1);
    }
  }
  float *p2 = down(ag_softmax(x, -1));
  assert_memory_equal(p, p2, (size_t)n * sizeof *p);
  free(p2);
  free(p);
  free(lp);
  ag_tensor_release(x);
  free(v);
}

static void test_softmax(void **st) {
  (void)st;
  const int64_t shapes[][2] = {{1, 1}, {3, 1}, {4, 3}, {5, 37}, {7, 1023}, {2, 1024}, {1, 1 << 20}};
  for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) check_softmax(shapes[i][0], shapes[i][1]);
}

/* layer norm and RMS norm (no weight, then a weight), forward and the
 * input's gradient for an upstream gradient g, against double. */
static void check_norms(int64_t rows, int64_t cols, bool weighted) {
  int64_t sh[2] = {rows, cols}, n = rows * cols;
  float *v = sample(n, (uint64_t)(rows * 7 + cols)), *g = sample(n, 11), *w = sample(cols, 5);
  for (int64_t i = 0; i < n; i++) v[i] = v[i] * 3 + 0.5f;
  for (int rms = 0; rms < 2; rms++) {
    ag_tensor *x = up(2, sh, v), *gt = up(2, sh, g), *wt = weighted ? up(1, &cols, w) : NULL;
    assert_int_equal(ag_tensor_set_requires_grad(x, true), AG_OK);
    ag_tensor *y = rms ? ag_rms_norm(x, wt, 1e-6) : ag_layer_norm(x, wt, NULL, 1e-5);
    assert_non_null(y);
    float *yh = down(y);
    assert_int_equal(ag_backward(y, gt, false), AG_OK);
    float *dx = down(ag_tensor_grad(x));
    const char *name = rms ? "rms_norm" : "layer_norm";
    for (int64_t i = 0; i < rows; i++) {
      const float *r = v + i * cols, *gr = g + i * cols;
      double mu = 0, var = 0;
      if (!rms)
        for (int64_t j = 0; j < cols; j++) mu += r[j];
      mu /= (double)cols;
      for (int64_t j = 0; j < cols; j++) var += (r[j] - mu) * (r[j] - mu);
      double rs = 1 / sqrt(var / (double)cols + (rms ? 1e-6 : 1e-5)), s1 = 0, s2 = 0;
      for (int64_t j = 0; j < cols; j++) {
        double gw = gr[j] * (weighted ? w[j] : 1.0), xh = (r[j] - mu) * rs;
        s1 += gw;
        s2 += gw * xh;
      }
      s1 /= (double)cols;
      s2 /= (double)cols;
      for (int64_t j = 0; j < cols; j++) {
        double xh = (r[j] - mu) * rs, gw = gr[j] * (weighted ? w[j] : 1.0);
        near(name, i * cols + j, yh[i * cols + j], xh * (weighted ? w[j] : 1.0), 2e-5, 1 + fabs(xh));
        double want = rms ? rs * (gw - xh * s2) : rs * (gw - s1 - xh * s2);
        near(name, i * cols + j, dx[i * cols + j], want, 2e-4, rs * (1 + fabs(gw) + fabs(xh)));
      }
    }
    free(yh);
    free(dx);
    ag_tensor_release(y);
    ag_tensor_release(x);
    ag_tensor_release(gt);
    ag_tensor_release(wt);
  }
  free(v);
  free(g);
  free(w);
}

static void test_norms(void **st) {
  (void)st;
  const int64_t shapes[][2] = {{3, 1}, {4, 3}, {5, 37}, {6, 1023}, {2, 1024}, {1, 1 << 20}};
  for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
    check_norms(shapes[i][0], shapes[i][1], false);
    check_norms(shapes[i][0], shapes[i][1], true);
  }
}

/* group norm of [n, c, hw] in `groups` groups with weight and bias: y, and
 * the gradients of x, weight and bias for an upstream gradient g, against
 * the CPU backend's kernels from the same values (hw % 4 == 0 takes the
 * 4-wide path, other sizes the scalar one). */
static void check_group_norm(int64_t n, int64_t c, int64_t hw, int64_t groups) {
  int64_t sh[3] = {n, c, hw}, m = n * c * hw;
  float *v = sample(m, (uint64_t)(m + groups)), *g = sample(m, 13), *w = sample(c, 3), *b = sample(c, 4);
  for (int64_t i = 0; i < m; i++) v[i] = v[i] * 2 + 0.25f;
  float *out[2][4];
  for (int side = 0; side < 2; side++) {
    ag_device d = side ? DEV : AG_CPU;
    ag_tensor *x = ag_from_host(d, AG_F32, 3, sh, v), *gt = ag_from_host(d, AG_F32, 3, sh, g);
    ag_tensor *wt = ag_from_host(d, AG_F32, 1, &c, w), *bt = ag_from_host(d, AG_F32, 1, &c, b);
    assert_true(x && gt && wt && bt);
    assert_int_equal(ag_tensor_set_requires_grad(x, true), AG_OK);
    assert_int_equal(ag_tensor_set_requires_grad(wt, true), AG_OK);
    assert_int_equal(ag_tensor_set_requires_grad(bt, true), AG_OK);
    ag_tensor *y = ag_group_norm(x, groups, wt, bt, 1e-5);
    out[side][0] = down(y);
    assert_int_equal(ag_backward(y, gt, false), AG_OK);
    out[side][1] = down(ag_tensor_grad(x));
    out[side][2] = down(ag_tensor_grad(wt));
    out[side][3] = down(ag_tensor_grad(bt));
    ag_tensor *rel[] = {y, x, gt, wt, bt};
    for (size_t k = 0; k < sizeof rel / sizeof *rel; k++) ag_tensor_release(rel[k]);
  }
  const char *name[4] = {"group_norm", "group_norm dx", "group_norm dw", "group_norm db"};
  const int64_t len[4] = {m, m, c, c};
  for (int k = 0; k < 4; k++) {
    double scale = 0;
    for (int64_t i = 0; i < len[k]; i++) scale = fmax(scale, fabs(out[0][k][i]));
    /* at least 1: dx of a 2-element group is 0 up to rounding */
    for (int64_t i = 0; i < len[k]; i++) near(name[k], i, out[1][k][i], out[0][k][i], 2e-5, fmax(scale, 1.0));
    free(out[0][k]);
    free(out[1][k]);
  }
  free(v);
  free(g);
  free(w);
  free(b);
}

static void test_group_norm(void **st) {
  (void)st;
  const int64_t shapes[][4] = {{2, 6, 64, 3}, {2, 4, 15, 2}, {1, 4, 1024, 2}, {3, 8, 4, 4}, {2, 2, 1, 1}, {1, 3, 4100, 3}};
  for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++)
    check_group_norm(shapes[i][0], shapes[i][1], shapes[i][2], shapes[i][3]);
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: cl_reduce_speed_test DEVICE\n");
    return 2;
  }
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
      cmocka_unit_test(test_all_sizes), cmocka_unit_test(test_all_2p24), cmocka_unit_test(test_nan), cmocka_unit_test(test_argmax_ties),
      cmocka_unit_test(test_rows),      cmocka_unit_test(test_softmax),  cmocka_unit_test(test_norms),
      cmocka_unit_test(test_group_norm),
  };
  return cmocka_run_group_tests_name("cl_reduce_speed", t, NULL, NULL);
}
