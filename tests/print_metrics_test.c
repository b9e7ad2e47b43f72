/* ag_tensor_format / ag_print edge cases (empty, scalar, NaN/inf,
 * summarised, integer and bool dtypes, views, snprintf semantics; the
 * layout against torch itself is tests/format_torch.py) and the
 * device-side metrics (accuracy and running mean) on AG_TEST_DEVICE,
 * with updates checked to run under AG_SYNC_DEBUG_ERROR. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "anygrad/anygrad.h"
#include "test_device.h"

static char *fmt(ag_tensor *t) {
  char *s = ag_tensor_format_alloc(t);
  assert_non_null(s);
  return s;
}

static void expect(ag_tensor *t, const char *want) {
  char *s = fmt(t);
  if (strcmp(s, want) != 0) print_error("got\n%s\nwant\n%s\n", s, want);
  assert_string_equal(s, want);
  free(s);
}

static ag_tensor *f32(int ndim, const int64_t *shape, const float *v) {
  ag_tensor *t = ag_from_host(TEST_DEV, AG_F32, ndim, shape, v);
  assert_non_null(t);
  return t;
}

static void test_basic(void **state) {
  (void)state;
  ag_scope_begin();
  const float a[4] = {0.1234f, -1.0f, 2.5f, 3.0f};
  const int64_t s22[2] = {2, 2}, s4[1] = {4};
  char dev[64] = "", want[256];
  if (TEST_DEV.backend != AG_CPU.backend) {
    char ds[32];
    snprintf(dev, sizeof dev, ", device='%s'", ag_device_str(TEST_DEV, ds, sizeof ds));
  }
  snprintf(want, sizeof want, "tensor([[ 0.1234, -1.0000],\n        [ 2.5000,  3.0000]]%s)", dev);
  expect(f32(2, s22, a), want);
  const float ints[4] = {1, -2, 3, 40};
  snprintf(want, sizeof want, "tensor([ 1., -2.,  3., 40.]%s)", dev);
  expect(f32(1, s4, ints), want);
  /* scientific: magnitudes spanning more than 1000x */
  const float sci[2] = {1e-5f, 1.0f};
  const int64_t s2[1] = {2};
  snprintf(want, sizeof want, "tensor([1.0000e-05, 1.0000e+00]%s)", dev);
  expect(f32(1, s2, sci), want);
  /* a transposed view prints its own order */
  ag_tensor *tt = ag_transpose(f32(2, s22, a), 0, 1);
  snprintf(want, sizeof want, "tensor([[ 0.1234,  2.5000],\n        [-1.0000,  3.0000]]%s)", dev);
  expect(tt, want);
  assert_int_equal(ag_scope_end(), AG_OK);
}

static void test_scalar_nan_inf(void **state) {
  (void)state;
  ag_scope_begin();
  ag_tensor *s = ag_scalar(AG_CPU, AG_F32, 1.5);
  expect(s, "tensor(1.5000)");
  expect(ag_scalar(AG_CPU, AG_I64, -7), "tensor(-7)");
  expect(ag_scalar(AG_CPU, AG_F32, NAN), "tensor(nan)");
  const float v[4] = {1.5f, NAN, INFINITY, -INFINITY};
  const int64_t s4[1] = {4};
  expect(ag_from_host(AG_CPU, AG_F32, 1, s4, v), "tensor([1.5000,    nan,    inf,   -inf])");
  const float w[2] = {1.0f, -INFINITY};
  const int64_t s2[1] = {2};
  expect(ag_from_host(AG_CPU, AG_F32, 1, s2, w), "tensor([1., -inf])");
  /* -NaN prints as nan, as Python does */
  const float nn[1] = {-NAN};
  const int64_t s1[1] = {1};
  expect(ag_from_host(AG_CPU, AG_F32, 1, s1, nn), "tensor([nan])");
  assert_int_equal(ag_scope_end(), AG_OK);
}

static void test_empty_and_dtypes(void **state) {
  (void)state;
  ag_scope_begin();
  const int64_t z1[1] = {0}, z2[2] = {0, 3};
  expect(ag_empty(AG_CPU, AG_F32, 1, z1), "tensor([])");
  expect(ag_empty(AG_CPU, AG_F32, 2, z2), "tensor([], size=(0, 3))");
  expect(ag_empty(AG_CPU, AG_I64, 1, z1), "tensor([], dtype=int64)");
  const int32_t iv[3] = {1, -20, 300};
  const int64_t s3[1] = {3};
  expect(ag_from_host(AG_CPU, AG_I32, 1, s3, iv), "tensor([  1, -20, 300], dtype=int32)");
  const uint8_t bv[3] = {1, 0, 1};
  expect(ag_from_host(AG_CPU, AG_BOOL, 1, s3, bv), "tensor([ True, False,  True])");
  expect(ag_from_host(AG_CPU, AG_U8, 1, s3, bv), "tensor([1, 0, 1], dtype=uint8)");
  const uint16_t hv[3] = {0x3C00, 0x3555, 0xC000}; /* 1, 0.33325, -2 */
  expect(ag_from_host(AG_CPU, AG_F16, 1, s3, hv), "tensor([ 1.0000,  0.3333, -2.0000], dtype=float16)");
  ag_tensor *p = ag_zeros(AG_CPU, AG_F32, 1, s3);
  assert_int_equal(ag_tensor_set_requires_grad(p, true), AG_OK);
  expect(p, "tensor([0., 0., 0.], requires_grad=True)");
  assert_int_equal(ag_scope_end(), AG_OK);
}

static void test_summarised(void **state) {
  (void)state;
  ag_scope_begin();
  ag_tensor *a = ag_arange(TEST_DEV, AG_F32, 1000, 3000, 1);
  char *s = fmt(a);
  assert_non_null(strstr(s, "tensor([1000., 1001., 1002.,  ..., 2997., 2998., 2999.]"));
  free(s);
  /* 2-d: rows and columns cut; the formatter only sees the edge items */
  const int64_t shp[2] = {40, 40};
  ag_tensor *b = ag_reshape(ag_arange(AG_CPU, AG_I64, 0, 1600, 1), 2, shp);
  s = fmt(b);
  const char *want = "tensor([[   0,    1,    2,  ...,   37,   38,   39],\n"
                     "        [  40,   41,   42,  ...,   77,   78,   79],\n"
                     "        [  80,   81,   82,  ...,  117,  118,  119],\n"
                     "        ...,\n"
                     "        [1480, 1481, 1482,  ..., 1517, 1518, 1519],\n"
                     "        [1520, 1521, 1522,  ..., 1557, 1558, 1559],\n"
                     "        [1560, 1561, 1562,  ..., 1597, 1598, 1599]])";
  if (strcmp(s, want)) print_error("got\n%s\n", s);
  assert_string_equal(s, want);
  free(s);
  /* 1000 elements exactly: not summarised, wrapped at 80 columns */
  ag_tensor *c = ag_arange(AG_CPU, AG_I64, 0, 1000, 1);
  s = fmt(c);
  assert_null(strstr(s, "..."));
  assert_non_null(strstr(s, "999])"));
  for (char *line = s; line; line = strchr(line + 1, '\n')) {
    char *end = strchr(line + 1, '\n');
    assert_true((end ? end - line : (ptrdiff_t)strlen(line)) <= 81);
  }
  free(s);
  assert_int_equal(ag_scope_end(), AG_OK);
}

static void test_snprintf_and_errors(void **state) {
  (void)state;
  ag_scope_begin();
  ag_tensor *t = ag_scalar(AG_CPU, AG_F32, 2.0);
  char buf[8];
  int64_t n = ag_tensor_format(t, NULL, 0);
  assert_int_equal(n, (int64_t)strlen("tensor(2.)"));
  assert_int_equal(ag_tensor_format(t, buf, sizeof buf), n);
  assert_string_equal(buf, "tensor("); /* cut to size-1 characters */
  char big[32];
  assert_int_equal(ag_tensor_format(t, big, sizeof big), n);
  assert_string_equal(big, "tensor(2.)");
  assert_int_equal(ag_tensor_format(t, NULL, 4), -1);
  assert_int_equal(ag_last_status(), AG_ERR_INVALID);
  ag_error_clear();
  assert_int_equal(ag_tensor_format(NULL, big, sizeof big), -1);
  assert_int_equal(ag_last_status(), AG_ERR_INVALID);
  ag_error_clear();
  assert_int_equal(ag_print(t), AG_OK);
  assert_int_equal(ag_scope_end(), AG_OK);
  /* released handle */
  ag_tensor *r = ag_scalar(AG_CPU, AG_F32, 1.0);
  ag_tensor_release(r);
  assert_null(ag_tensor_format_alloc(r));
  assert_int_equal(ag_last_status(), AG_ERR_STATE);
  ag_error_clear();
}

/* ---- metrics ---- */

static void test_accuracy(void **state) {
  (void)state;
  ag_device d = TEST_DEV;
  ag_metric *m = ag_metric_accuracy(d);
  assert_non_null(m);
  /* 4 samples, 3 classes; predictions 2, 0, 1, 1 */
  const float l1[12] = {0, 1, 5, 9, 1, 2, 0, 3, 1, -1, 4, 0};
  const int64_t t1[4] = {2, 0, 0, 1}; /* 3 correct */
  const float l2[6] = {1, 0, 0, 0, 0, 1};
  const int32_t t2[2] = {1, 2}; /* i32 targets: 1 correct */
  const int64_t s43[2] = {4, 3}, s4[1] = {4}, s23[2] = {2, 3}, s2[1] = {2};
  uint64_t syncs0 = ag_sync_count();
  ag_scope_begin();
  ag_tensor *L1 = ag_from_host(d, AG_F32, 2, s43, l1), *T1 = ag_from_host(d, AG_I64, 1, s4, t1);
  ag_tensor *L2 = ag_from_host(d, AG_F32, 2, s23, l2), *T2 = ag_from_host(d, AG_I32, 1, s2, t2);
  int64_t live = ag_live_tensors();
  ag_set_sync_debug(AG_SYNC_DEBUG_ERROR); /* an update that synced would fail */
  for (int rep = 0; rep < 3; rep++) {
    assert_int_equal(ag_metric_update(m, L1, T1), AG_OK);
    assert_int_equal(ag_metric_update(m, L2, T2), AG_OK);
  }
  ag_set_sync_debug(AG_SYNC_DEBUG_OFF);
  assert_int_equal(ag_live_tensors(), live); /* intermediates released */
  assert_int_equal(ag_sync_count(), syncs0);
  assert_int_equal(ag_metric_count(m), 18);
  double v = 0;
  assert_int_equal(ag_metric_value(m, &v), AG_OK);
  assert_true(fabs(v - 12.0 / 18.0) < 1e-12);
  assert_true(ag_sync_count() > syncs0);
  /* errors: shape, dtype, kind, device of another metric */
  assert_int_equal(ag_metric_update(m, L1, T2), AG_ERR_SHAPE);
  assert_non_null(strstr(ag_last_error(), "[4,3]"));
  assert_int_equal(ag_metric_update(m, L1, L1), AG_ERR_DTYPE);
  assert_int_equal(ag_metric_mean_update(m, L1), AG_ERR_INVALID);
  assert_int_equal(ag_metric_update(NULL, L1, T1), AG_ERR_INVALID);
  assert_int_equal(ag_metric_count(m), 18);
  assert_int_equal(ag_scope_end(), AG_OK);
  ag_error_clear();
  assert_int_equal(ag_metric_reset(m), AG_OK);
  assert_int_equal(ag_metric_count(m), 0);
  assert_int_equal(ag_metric_value(m, &v), AG_OK);
  assert_true(isnan(v));
  ag_metric_free(m);
  ag_metric_free(NULL);
}

static void test_running_mean(void **state) {
  (void)state;
  ag_device d = TEST_DEV;
  ag_metric *m = ag_metric_mean(d);
  assert_non_null(m);
  double want = 0;
  int64_t n = 0;
  ag_set_sync_debug(AG_SYNC_DEBUG_ERROR);
  for (int step = 0; step < 20; step++) {
    ag_scope_begin();
    const int64_t shp[1] = {5};
    float v[5];
    for (int i = 0; i < 5; i++) {
      v[i] = (float)((step * 7 + i * 3) % 11) * 0.25f;
      want += v[i];
      n++;
    }
    ag_tensor *t = ag_from_host(d, AG_F32, 1, shp, v);
    assert_int_equal(ag_metric_mean_update(m, t), AG_OK);
    assert_int_equal(ag_scope_end(), AG_OK);
  }
  ag_set_sync_debug(AG_SYNC_DEBUG_OFF);
  double got = 0;
  assert_int_equal(ag_metric_value(m, &got), AG_OK);
  assert_true(fabs(got - want / (double)n) < 1e-6);
  /* another device is refused */
  if (d.backend != AG_CPU.backend) {
    ag_tensor *c = ag_scalar(AG_CPU, AG_F32, 1);
    assert_int_equal(ag_metric_mean_update(m, c), AG_ERR_DEVICE);
    ag_tensor_release(c);
  }
  ag_metric_free(m);
}

int main(void) {
  (void)TEST_DEV;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_basic),       cmocka_unit_test(test_scalar_nan_inf),
      cmocka_unit_test(test_empty_and_dtypes), cmocka_unit_test(test_summarised),
      cmocka_unit_test(test_snprintf_and_errors), cmocka_unit_test(test_accuracy),
      cmocka_unit_test(test_running_mean),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
