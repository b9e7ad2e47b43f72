/* Vulkan ops of sizes past one work-group's loop (vulkan:0, under the
 * validation layers: tests/vk_size.cmake): sum, mean, max, argmax, cumsum,
 * softmax, logsumexp and variance of 64M f32 elements, sum, max, min and
 * argmax of 64M i32 elements (whole, rows of 4M, columns), matmuls with inner
 * dimensions of 4M and 200K, and f64 rows of 1M (sum, max, argmax, softmax
 * and its gradient, logsumexp, cumsum, variance, a dot product), against
 * results known exactly or a host double reference on a sample. Skips (77) without vulkan:0. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>

#include "anygrad/anygrad.h"
#include "anygrad/kops.h"

/* exact equality, the values printed when it fails */
#define assert_exact(a, b)                                                                        \
  do {                                                                                            \
    double a_ = (a), b_ = (b);                                                                    \
    if (a_ != b_) fail_msg("%s = %.17g, expected %.17g", #a, a_, b_);                             \
  } while (0)

static ag_device VK;

#define BIG ((int64_t)1 << 26)
/* where the f32 data's two maxima lie (the first is argmax's) */
#define PEAK1 50000017
#define PEAK2 60000000

static float big_at(int64_t i) {
  if (i == PEAK1 || i == PEAK2) return 7.0f;
  return (float)(i % 1000) * 0.001f - 0.5f;
}

static ag_tensor *big_f32(void) {
  float *h = malloc((size_t)BIG * sizeof *h);
  if (!h) return NULL;
  for (int64_t i = 0; i < BIG; i++) h[i] = big_at(i);
  int64_t shape[1] = {BIG};
  ag_tensor *t = ag_from_host(VK, AG_F32, 1, shape, h);
  free(h);
  return t;
}

static void check_ok(void) { assert_int_equal(ag_scope_end(), AG_OK); }

static void test_sum_mean_ones(void **state) {
  (void)state;
  ag_scope_begin();
  int64_t shape[1] = {BIG};
  ag_tensor *x = ag_ones(VK, AG_F32, 1, shape);
  assert_exact(ag_item(ag_sum(x, 0, NULL, false)), (double)BIG);
  assert_exact(ag_item(ag_mean(x, 0, NULL, false)), 1.0);
  check_ok();
}

static void test_sum_max_argmax(void **state) {
  (void)state;
  ag_scope_begin();
  ag_tensor *x = big_f32();
  assert_non_null(x);
  double ref = 0.0;
  for (int64_t i = 0; i < BIG; i++) ref += big_at(i);
  double s = ag_item(ag_sum(x, 0, NULL, false));
  assert_true(fabs(s - ref) <= 1e-6 * (double)BIG);
  assert_exact(ag_item(ag_max(x, 0, NULL, false)), 7.0);
  assert_exact(ag_item(ag_argmax(x, 0, false)), (double)PEAK1);
  /* rows of 16M over dim 1 */
  int64_t s2[2] = {4, BIG / 4};
  ag_tensor *x2 = ag_reshape(x, 2, s2);
  int d1 = 1;
  ag_tensor *m = ag_max(x2, 1, &d1, false);
  float mh[4];
  assert_int_equal(ag_to_host(m, mh, sizeof mh), AG_OK);
  assert_true(mh[0] == big_at(999) && mh[1] == big_at(999) && mh[2] == 7.0f && mh[3] == 7.0f);
  /* columns of 16M over dim 0 (elements 4 apart) */
  int64_t s3[2] = {BIG / 4, 4};
  int d0 = 0;
  ag_tensor *cs = ag_sum(ag_reshape(x, 2, s3), 1, &d0, false);
  assert_int_equal(ag_to_host(cs, mh, sizeof mh), AG_OK);
  for (int c = 0; c < 4; c++) {
    double rc = 0.0;
    for (int64_t i = c; i < BIG; i += 4) rc += big_at(i);
    assert_true(fabs(mh[c] - rc) <= 1e-6 * (double)BIG);
  }
  /* variance and standard deviation of the whole tensor */
  double mu = ref / (double)BIG, q = 0.0;
  for (int64_t i = 0; i < BIG; i++) q += ((double)big_at(i) - mu) * ((double)big_at(i) - mu);
  double var = ag_item(ag_var(x, 0, NULL, 1.0, false));
  assert_true(fabs(var - q / (double)(BIG - 1)) <= 1e-5 * var);
  check_ok();
}

/* i32 data: small values, two maxima (the first is argmax's), one minimum */
#define TROUGH 33333331
static int32_t big_i32_at(int64_t i) {
  if (i == PEAK1 || i == PEAK2) return 2000000000;
  if (i == TROUGH) return -2000000000;
  return (int32_t)(i % 1000) * 3 - 1500;
}

/* integer sums (exact, in i64), max, min and argmax of 64M elements, rows
 * of 4M and columns of 16M */
static void test_int_reductions(void **state) {
  (void)state;
  ag_scope_begin();
  int32_t *h = malloc((size_t)BIG * sizeof *h);
  assert_non_null(h);
  int64_t ref = 0;
  for (int64_t i = 0; i < BIG; i++) ref += h[i] = big_i32_at(i);
  int64_t shape[1] = {BIG};
  ag_tensor *x = ag_from_host(VK, AG_I32, 1, shape, h);
  free(h);
  assert_non_null(x);
  assert_exact(ag_item(ag_sum(x, 0, NULL, false)), (double)ref);
  assert_exact(ag_item(ag_max(x, 0, NULL, false)), 2000000000.0);
  assert_exact(ag_item(ag_min(x, 0, NULL, false)), -2000000000.0);
  assert_exact(ag_item(ag_argmax(x, 0, false)), (double)PEAK1);
  /* 16 rows of 4M over dim 1 */
  int64_t s2[2] = {16, BIG / 16};
  int d1 = 1;
  ag_tensor *rs = ag_cast(ag_sum(ag_reshape(x, 2, s2), 1, &d1, false), AG_I64);
  ag_tensor *rm = ag_cast(ag_argmax(ag_reshape(x, 2, s2), 1, false), AG_I64);
  int64_t got[16], am[16];
  assert_int_equal(ag_to_host(rs, got, sizeof got), AG_OK);
  assert_int_equal(ag_to_host(rm, am, sizeof am), AG_OK);
  for (int r = 0; r < 16; r++) {
    int64_t want = 0, wi = 0;
    int32_t best = INT32_MIN;
    for (int64_t j = 0; j < BIG / 16; j++) {
      int32_t v = big_i32_at(r * (BIG / 16) + j);
      want += v;
      if (v > best) best = v, wi = j;
    }
    assert_exact((double)got[r], (double)want);
    assert_exact((double)am[r], (double)wi);
  }
  /* columns of 16M over dim 0 (elements 4 apart) */
  int64_t s3[2] = {BIG / 4, 4};
  int d0 = 0;
  ag_tensor *cs = ag_cast(ag_sum(ag_reshape(x, 2, s3), 1, &d0, false), AG_I64);
  assert_int_equal(ag_to_host(cs, got, 4 * sizeof *got), AG_OK);
  for (int c = 0; c < 4; c++) {
    int64_t want = 0;
    for (int64_t i = c; i < BIG; i += 4) want += big_i32_at(i);
    assert_exact((double)got[c], (double)want);
  }
  check_ok();
}

static void test_cumsum(void **state) {
  (void)state;
  ag_scope_begin();
  /* +1, -1, ...: the running sums are 1, 0, ... exactly */
  float *h = malloc((size_t)BIG * sizeof *h);
  assert_non_null(h);
  for (int64_t i = 0; i < BIG; i++) h[i] = (i & 1) ? -1.0f : 1.0f;
  int64_t shape[1] = {BIG};
  ag_tensor *x = ag_from_host(VK, AG_F32, 1, shape, h);
  ag_tensor *c = ag_cumsum(x, 0);
  assert_int_equal(ag_to_host(c, h, (size_t)BIG * sizeof *h), AG_OK);
  int64_t bad = 0;
  for (int64_t i = 0; i < BIG; i++) bad += h[i] != ((i & 1) ? 0.0f : 1.0f);
  assert_int_equal(bad, 0);
  free(h);
  check_ok();
}

static void test_softmax(void **state) {
  (void)state;
  ag_scope_begin();
  ag_tensor *x = big_f32();
  double z = 0.0;
  for (int64_t i = 0; i < BIG; i++) z += exp((double)big_at(i) - 7.0);
  float *h = malloc((size_t)BIG * sizeof *h);
  assert_non_null(h);
  assert_int_equal(ag_to_host(ag_softmax(x, 0), h, (size_t)BIG * sizeof *h), AG_OK);
  for (int64_t i = 0; i < BIG; i += 999983) {
    double ref = exp((double)big_at(i) - 7.0) / z;
    assert_true(fabs(h[i] - ref) <= 1e-4 * ref);
  }
  assert_true(fabs(h[PEAK1] - 1.0 / z) <= 1e-4 / z);
  double lse = ag_item(ag_logsumexp(x, 0, false));
  assert_true(fabs(lse - (7.0 + log(z))) <= 1e-5 * (7.0 + log(z)));
  assert_int_equal(ag_to_host(ag_log_softmax(x, 0), h, (size_t)BIG * sizeof *h), AG_OK);
  for (int64_t i = 0; i < BIG; i += 999983) {
    double ref = (double)big_at(i) - 7.0 - log(z);
    assert_true(fabs(h[i] - ref) <= 1e-4 * fabs(ref) + 1e-5);
  }
  free(h);
  check_ok();
}

static void test_matmul_long_k(void **state) {
  (void)state;
  ag_scope_begin();
  const int64_t K = (int64_t)1 << 22;
  float *a = malloc((size_t)(2 * K) * sizeof *a), *b = malloc((size_t)(2 * K) * sizeof *b);
  assert_true(a && b);
  for (int64_t i = 0; i < 2 * K; i++) {
    a[i] = (float)(i % 7) * 0.25f - 0.75f;
    b[i] = (float)(i % 5) * 0.5f - 1.0f;
  }
  int64_t sa[2] = {2, K}, sb[2] = {K, 2};
  ag_tensor *c = ag_matmul(ag_from_host(VK, AG_F32, 2, sa, a), ag_from_host(VK, AG_F32, 2, sb, b));
  float ch[4];
  assert_int_equal(ag_to_host(c, ch, sizeof ch), AG_OK);
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 2; j++) {
      double ref = 0.0, mag = 0.0;
      for (int64_t k = 0; k < K; k++) {
        double p = (double)a[i * K + k] * b[k * 2 + j];
        ref += p;
        mag += fabs(p);
      }
      assert_true(fabs(ch[i * 2 + j] - ref) <= 1e-6 * mag);
    }
  free(a);
  free(b);
  /* [2 x 16 x 200000] @ [200000 x 16]: split K over GEMM tiles, then summed */
  const int64_t K2 = 200000, M2 = 16;
  a = malloc((size_t)(2 * M2 * K2) * sizeof *a);
  b = malloc((size_t)(K2 * M2) * sizeof *b);
  assert_true(a && b);
  for (int64_t i = 0; i < 2 * M2 * K2; i++) a[i] = (float)(i % 11) * 0.125f - 0.625f;
  for (int64_t i = 0; i < K2 * M2; i++) b[i] = (float)(i % 13) * 0.25f - 1.5f;
  int64_t s3[3] = {2, M2, K2}, s4[2] = {K2, M2};
  c = ag_matmul(ag_from_host(VK, AG_F32, 3, s3, a), ag_from_host(VK, AG_F32, 2, s4, b));
  float c2[2 * 16 * 16];
  assert_int_equal(ag_to_host(c, c2, sizeof c2), AG_OK);
  for (int64_t bb = 0; bb < 2; bb++)
    for (int64_t i = 0; i < M2; i++)
      for (int64_t j = 0; j < M2; j++) {
        double ref = 0.0, mag = 0.0;
        for (int64_t k = 0; k < K2; k++) {
          double p = (double)a[(bb * M2 + i) * K2 + k] * b[k * M2 + j];
          ref += p;
          mag += fabs(p);
        }
        assert_true(fabs(c2[(bb * M2 + i) * M2 + j] - ref) <= 1e-5 * mag);
      }
  free(a);
  free(b);
  check_ok();
}

static void test_f64_rows(void **state) {
  (void)state;
  if (!ag_device_supports(VK, AG_K_REDUCE, AG_R_SUM, AG_F64)) skip();
  ag_scope_begin();
  const int64_t R = 4, C = (int64_t)1 << 20;
  double *h = malloc((size_t)(R * C) * sizeof *h);
  assert_non_null(h);
  /* a ramp of halves: its sum is exact in f64 */
  for (int64_t i = 0; i < R * C; i++) h[i] = (double)(i % C) * 0.5 - (double)(i / C);
  int64_t shape[2] = {R, C};
  ag_tensor *x = ag_from_host(VK, AG_F64, 2, shape, h);
  int d1 = 1;
  double out[4];
  assert_int_equal(ag_to_host(ag_sum(x, 1, &d1, false), out, sizeof out), AG_OK);
  for (int r = 0; r < R; r++) assert_exact(out[r], 0.25 * (double)C * (double)(C - 1) - (double)r * C);
  assert_int_equal(ag_to_host(ag_max(x, 1, &d1, false), out, sizeof out), AG_OK);
  for (int r = 0; r < R; r++) assert_exact(out[r], (double)(C - 1) * 0.5 - r);
  int64_t am[4];
  assert_int_equal(ag_to_host(ag_argmax(x, 1, false), am, sizeof am), AG_OK);
  for (int r = 0; r < R; r++) assert_int_equal(am[r], C - 1);
  /* softmax of row 0 against a host reference on a sample */
  double *y = malloc((size_t)(R * C) * sizeof *y);
  assert_non_null(y);
  assert_int_equal(ag_to_host(ag_softmax(ag_mul_scalar(x, 1e-5), 1), y, (size_t)(R * C) * sizeof *y), AG_OK);
  double z = 0.0, m = (double)(C - 1) * 0.5e-5;
  for (int64_t j = 0; j < C; j++) z += exp(h[j] * 1e-5 - m);
  for (int64_t j = 0; j < C; j += 4099) assert_true(fabs(y[j] - exp(h[j] * 1e-5 - m) / z) <= 1e-12 * y[j]);
  assert_int_equal(ag_to_host(ag_logsumexp(ag_mul_scalar(x, 1e-5), 1, false), out, sizeof out), AG_OK);
  assert_true(fabs(out[0] - (m + log(z))) <= 1e-12 * fabs(m + log(z)));
  /* the softmax gradient of the rows: d sum(softmax(x) w) = y (w - sum(w y)) */
  for (int64_t i = 0; i < R * C; i++) y[i] = h[i] * 1e-5;
  ag_tensor *xs = ag_from_host(VK, AG_F64, 2, shape, y);
  assert_int_equal(ag_tensor_set_requires_grad(xs, true), AG_OK);
  for (int64_t i = 0; i < R * C; i++) y[i] = (double)(i % 3) - 1.0;
  ag_tensor *w = ag_from_host(VK, AG_F64, 2, shape, y);
  assert_int_equal(ag_backward(ag_sum(ag_mul(ag_softmax(xs, 1), w), 0, NULL, false), NULL, false), AG_OK);
  assert_int_equal(ag_to_host(ag_tensor_grad(xs), y, (size_t)(R * C) * sizeof *y), AG_OK);
  double sw = 0.0;
  for (int64_t j = 0; j < C; j++) sw += (double)(j % 3 - 1) * exp(h[j] * 1e-5 - m) / z;
  for (int64_t j = 0; j < C; j += 4099) {
    double yj = exp(h[j] * 1e-5 - m) / z, ref = yj * ((double)(j % 3 - 1) - sw);
    assert_true(fabs(y[j] - ref) <= 1e-9 * yj);
  }
  /* cumsum along the rows, and their variance */
  assert_int_equal(ag_to_host(ag_cumsum(x, 1), y, (size_t)(R * C) * sizeof *y), AG_OK);
  for (int r = 0; r < R; r++)
    for (int64_t j = 0; j < C; j += 7919) {
      double ref = 0.25 * (double)j * (double)(j + 1) - (double)r * (double)(j + 1);
      assert_exact(y[r * C + j], ref);
    }
  assert_exact(y[C - 1], 0.25 * (double)C * (double)(C - 1));
  assert_int_equal(ag_to_host(ag_var(x, 1, &d1, 0.0, false), out, sizeof out), AG_OK);
  double vref = 0.25 * ((double)C * (double)C - 1.0) / 12.0;
  for (int r = 0; r < R; r++) assert_true(fabs(out[r] - vref) <= 1e-12 * vref);
  /* matmul [1 x 1M] @ [1M x 1] of row 0 and 1 */
  int64_t sa[2] = {1, C}, sb[2] = {C, 1};
  ag_tensor *x0 = ag_from_host(VK, AG_F64, 2, sa, h), *x1 = ag_from_host(VK, AG_F64, 2, sb, h + C);
  /* sum of (j / 2) (j / 2 - 1), j < C: (S2 - 2 S1) / 4 in integers */
  int64_t s1 = C * (C - 1) / 2, s2 = (C - 1) * C * (2 * C - 1) / 6;
  double dref = (double)(s2 - 2 * s1) / 4.0;
  double got = ag_item(ag_matmul(x0, x1));
  if (!(fabs(got - dref) <= 1e-14 * fabs(dref))) fail_msg("f64 matmul %.17g, expected %.17g", got, dref);
  free(y);
  free(h);
  check_ok();
}

int main(void) {
  ag_backend_kind k;
  if (ag_backend_find("vulkan", &k) != AG_OK || !ag_backend_available(k, NULL) ||
      ag_device_parse("vulkan:0", &VK) != AG_OK) {
    printf("vulkan:0 unavailable: skipped\n");
    return 77;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sum_mean_ones), cmocka_unit_test(test_sum_max_argmax),
      cmocka_unit_test(test_int_reductions),
      cmocka_unit_test(test_cumsum),        cmocka_unit_test(test_softmax),
      cmocka_unit_test(test_matmul_long_k), cmocka_unit_test(test_f64_rows),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
