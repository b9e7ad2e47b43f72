/* Ops that gave silent wrong results on hostile shapes and values
 * (docs/reliability.md, "API entry points"): a matmul with an inner
 * dimension of 0 left its output unwritten, ag_copy_ between overlapping
 * views read values it had already overwritten, integer scalar arithmetic
 * saturated instead of wrapping, and conv2d/pooling sizes wrapped in int.
 * Runs on AG_TEST_DEVICE (the CPU when unset; absent devices skip). */
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
#include "test_device.h"

static void expect(ag_status got, ag_status want, const char *fragment) {
  if (got != want)
    fail_msg("status %s, expected %s: %s", ag_status_name(got), ag_status_name(want), ag_last_error());
  if (fragment && !strstr(ag_last_error(), fragment))
    fail_msg("message '%s' lacks '%s'", ag_last_error(), fragment);
  ag_error_clear();
}

static ag_tensor *host_f32(int ndim, const int64_t *shape, const float *v) {
  ag_tensor *t = ag_from_host(TEST_DEV, AG_F32, ndim, shape, v);
  if (!t) fail_msg("ag_from_host: %s", ag_last_error());
  return t;
}

static void read_f32(const ag_tensor *t, float *out, int64_t n) {
  assert_int_equal(ag_tensor_numel(t), n);
  if (ag_to_host(t, out, (size_t)n * sizeof(float)) != AG_OK) fail_msg("ag_to_host: %s", ag_last_error());
}

/* Leaves NaN in the device allocator's free blocks of every size class a
 * small result takes, so an output that is never written reads as NaN. */
static void poison_allocator(ag_dtype dt) {
  enum { K = 16 };
  ag_tensor *t[K];
  for (int i = 0; i < K; i++) {
    int64_t n = (int64_t)64 << (i % 4);
    t[i] = ag_full(TEST_DEV, dt, 1, &n, NAN);
    assert_non_null(t[i]);
  }
  float probe;
  int64_t one = 1;
  ag_tensor *p = ag_empty(TEST_DEV, AG_F32, 1, &one);
  assert_non_null(p);
  assert_int_equal(ag_to_host(p, &probe, sizeof probe), AG_OK); /* the fills have run */
  ag_tensor_release(p);
  for (int i = 0; i < K; i++) ag_tensor_release(t[i]);
}

/* ---------------- matmul with an inner dimension of 0 ---------------- */

static void expect_zeros(ag_tensor *t, int64_t n, float add) {
  float v[64];
  assert_true(n <= 64);
  read_f32(t, v, n);
  for (int64_t i = 0; i < n; i++)
    if (v[i] != add) fail_msg("element %lld is %g, expected %g (an empty sum)", (long long)i, v[i], add);
}

static void test_matmul_k0(void **state) {
  (void)state;
  const int64_t sa[2] = {3, 0}, sb[2] = {0, 4};
  for (int round = 0; round < 2; round++) {
    poison_allocator(AG_F32);
    ag_tensor *a = host_f32(2, sa, NULL), *b = host_f32(2, sb, NULL);
    ag_tensor *y = ag_matmul(a, b);
    assert_non_null(y);
    assert_int_equal(ag_tensor_ndim(y), 2);
    assert_int_equal(ag_tensor_dim(y, 0), 3);
    assert_int_equal(ag_tensor_dim(y, 1), 4);
    expect_zeros(y, 12, 0.0f);
    ag_tensor_release(y);
    ag_tensor_release(a);
    ag_tensor_release(b);
  }
  /* batched with broadcasting, and 1-D . 1-D (a 0-d zero) */
  poison_allocator(AG_F32);
  const int64_t s3a[3] = {2, 3, 0}, s3b[2] = {0, 5}, s1[1] = {0};
  ag_tensor *a = host_f32(3, s3a, NULL), *b = host_f32(2, s3b, NULL);
  ag_tensor *y = ag_matmul(a, b);
  assert_non_null(y);
  expect_zeros(y, 30, 0.0f);
  ag_tensor_release(y);
  ag_tensor_release(a);
  ag_tensor_release(b);
  poison_allocator(AG_F32);
  a = host_f32(1, s1, NULL);
  b = host_f32(1, s1, NULL);
  y = ag_matmul(a, b);
  assert_non_null(y);
  assert_int_equal(ag_tensor_ndim(y), 0);
  expect_zeros(y, 1, 0.0f);
  ag_tensor_release(y);
  ag_tensor_release(a);
  ag_tensor_release(b);
}

/* The gradients: of an operand with a 0 dim, empty; of the other, the
 * empty sum a^T @ G with K = 0, zeros. */
static void test_matmul_k0_grad(void **state) {
  (void)state;
  const int64_t sa[2] = {0, 3}, sb[2] = {3, 4};
  const float bv[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  poison_allocator(AG_F32);
  ag_tensor *a = host_f32(2, sa, NULL), *b = host_f32(2, sb, bv);
  assert_int_equal(ag_tensor_set_requires_grad(a, true), AG_OK);
  assert_int_equal(ag_tensor_set_requires_grad(b, true), AG_OK);
  ag_tensor *y = ag_matmul(a, b); /* [0, 4] */
  ag_tensor *l = y ? ag_sum(y, 0, NULL, false) : NULL;
  assert_non_null(l);
  poison_allocator(AG_F32);
  assert_int_equal(ag_backward(l, NULL, false), AG_OK);
  ag_tensor *ga = ag_tensor_grad(a), *gb = ag_tensor_grad(b);
  assert_non_null(ga);
  assert_non_null(gb);
  assert_int_equal(ag_tensor_numel(ga), 0);
  expect_zeros(gb, 12, 0.0f);
  ag_tensor_release(l);
  ag_tensor_release(y);
  ag_tensor_release(a);
  ag_tensor_release(b);

  /* [3, 0] @ [0, 4]: both gradients empty, the sum of the zeros is 0 */
  const int64_t sc[2] = {3, 0}, sd[2] = {0, 4};
  ag_tensor *c = host_f32(2, sc, NULL), *d = host_f32(2, sd, NULL);
  assert_int_equal(ag_tensor_set_requires_grad(c, true), AG_OK);
  assert_int_equal(ag_tensor_set_requires_grad(d, true), AG_OK);
  poison_allocator(AG_F32);
  y = ag_matmul(c, d);
  l = y ? ag_sum(y, 0, NULL, false) : NULL;
  assert_non_null(l);
  assert_true(ag_item(l) == 0.0);
  assert_int_equal(ag_backward(l, NULL, false), AG_OK);
  assert_int_equal(ag_tensor_numel(ag_tensor_grad(c)), 0);
  assert_int_equal(ag_tensor_numel(ag_tensor_grad(d)), 0);
  ag_tensor_release(l);
  ag_tensor_release(y);
  ag_tensor_release(c);
  ag_tensor_release(d);
}

/* ---------------- ag_copy_ between overlapping views ---------------- */

static ag_tensor *iota(int64_t rows, int64_t cols) {
  float v[64];
  assert_true(rows * cols <= 64);
  for (int i = 0; i < rows * cols; i++) v[i] = (float)i;
  const int64_t s[2] = {rows, cols};
  return host_f32(2, s, v);
}

static void test_copy_overlap(void **state) {
  (void)state;
  float v[64];
  /* u <- u^T: with element-by-element copying the upper triangle read
   * values the lower one had already overwritten, and AG_OK came back */
  ag_tensor *u = iota(4, 4), *ut = ag_transpose(u, 0, 1);
  assert_non_null(ut);
  expect(ag_copy_(u, ut), AG_ERR_INVALID, "share memory");
  read_f32(u, v, 16);
  for (int i = 0; i < 16; i++) assert_true(v[i] == (float)i); /* untouched */
  /* a shifted view of itself (u[1:] <- u[:-1]), as torch refuses */
  ag_tensor *flat = ag_reshape(u, 1, (const int64_t[]){16});
  ag_tensor *hi = ag_slice(flat, 0, 1, 16, 1), *lo = ag_slice(flat, 0, 0, 15, 1);
  assert_non_null(hi);
  assert_non_null(lo);
  expect(ag_copy_(hi, lo), AG_ERR_INVALID, "share memory");
  expect(ag_copy_(lo, hi), AG_ERR_INVALID, "share memory");
  /* a broadcast element of dst itself */
  ag_tensor *first = ag_slice(flat, 0, 0, 1, 1);
  expect(ag_copy_(flat, first), AG_ERR_INVALID, "share memory");
  read_f32(u, v, 16);
  for (int i = 0; i < 16; i++) assert_true(v[i] == (float)i);
  /* the same view: nothing to do; a second header over it too */
  ag_tensor *alias = ag_reshape(u, 2, (const int64_t[]){4, 4});
  assert_int_equal(ag_copy_(u, u), AG_OK);
  assert_int_equal(ag_copy_(alias, u), AG_OK);
  /* interleaved views that never share a byte, and disjoint halves */
  ag_tensor *even = ag_slice(flat, 0, 0, 16, 2), *odd = ag_slice(flat, 0, 1, 16, 2);
  assert_int_equal(ag_copy_(even, odd), AG_OK);
  ag_tensor *a = ag_slice(flat, 0, 0, 8, 1), *b = ag_slice(flat, 0, 8, 16, 1);
  assert_int_equal(ag_copy_(b, a), AG_OK);
  read_f32(u, v, 16);
  const float want[16] = {1, 1, 3, 3, 5, 5, 7, 7, 1, 1, 3, 3, 5, 5, 7, 7};
  for (int i = 0; i < 16; i++)
    if (v[i] != want[i]) fail_msg("element %d is %g, expected %g", i, v[i], want[i]);
  ag_tensor *ts[] = {ut, flat, hi, lo, first, alias, even, odd, a, b, u};
  for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) ag_tensor_release(ts[i]);

  /* the columns of a [4, 2] tensor as [2, 4] views: interleaved, apart */
  ag_tensor *m = iota(4, 2);
  ag_tensor *c0 = ag_slice(m, 1, 0, 1, 1), *c1 = ag_slice(m, 1, 1, 2, 1);
  assert_int_equal(ag_copy_(c0, c1), AG_OK);
  read_f32(m, v, 8);
  for (int i = 0; i < 8; i++) assert_true(v[i] == (float)(i | 1));
  ag_tensor_release(c0);
  ag_tensor_release(c1);
  ag_tensor_release(m);
}

/* ---------------- integer scalar arithmetic wraps ---------------- */

static void test_int_scalar_wraps(void **state) {
  (void)state;
  int64_t one = 1;
  /* u8: 1 + 300 = 301 mod 256 = 45 (was 255); 200 * 2 = 144; 3 - 5 = 254 */
  uint8_t u8v[3] = {1, 200, 3}, u8o[3];
  const int64_t s3 = 3;
  ag_tensor *u8 = ag_from_host(TEST_DEV, AG_U8, 1, &s3, u8v);
  assert_non_null(u8);
  ag_tensor *r = ag_add_scalar(u8, 300);
  assert_non_null(r);
  assert_int_equal(ag_tensor_dtype(r), AG_U8);
  assert_int_equal(ag_to_host(r, u8o, 3), AG_OK);
  assert_int_equal(u8o[0], 45);
  ag_tensor_release(r);
  r = ag_mul_scalar(u8, 2);
  assert_int_equal(ag_to_host(r, u8o, 3), AG_OK);
  assert_int_equal(u8o[1], 144);
  ag_tensor_release(r);
  r = ag_sub_scalar(u8, 5);
  assert_int_equal(ag_to_host(r, u8o, 3), AG_OK);
  assert_int_equal(u8o[2], 254);
  ag_tensor_release(r);
  ag_tensor_release(u8);

  /* i32: INT32_MAX + 1 = INT32_MIN (was INT32_MAX); INT32_MIN - 1 = INT32_MAX;
   * 0 - INT32_MIN = INT32_MIN (rsub); INT32_MAX * 2 = -2 */
  int32_t i32v[1] = {INT32_MAX}, i32o[1];
  ag_tensor *i32 = ag_from_host(TEST_DEV, AG_I32, 1, &one, i32v);
  assert_non_null(i32);
  r = ag_add_scalar(i32, 1);
  assert_int_equal(ag_to_host(r, i32o, 4), AG_OK);
  assert_int_equal(i32o[0], INT32_MIN);
  ag_tensor *r2 = ag_sub_scalar(r, 1);
  assert_int_equal(ag_to_host(r2, i32o, 4), AG_OK);
  assert_int_equal(i32o[0], INT32_MAX);
  ag_tensor *r3 = ag_rsub_scalar(r, 0);
  assert_int_equal(ag_to_host(r3, i32o, 4), AG_OK);
  assert_int_equal(i32o[0], INT32_MIN);
  ag_tensor *r4 = ag_mul_scalar(i32, 2);
  assert_int_equal(ag_to_host(r4, i32o, 4), AG_OK);
  assert_int_equal(i32o[0], -2);
  ag_tensor_release(r);
  ag_tensor_release(r2);
  ag_tensor_release(r3);
  ag_tensor_release(r4);
  ag_tensor_release(i32);

  /* i64: (2^53 + 1) * 1 + 2 exact (the f64 path gave 2^53 + 2); INT64_MAX
   * + 1 wraps; a scalar of -2^63 subtracted is added back exactly */
  int64_t i64v[2] = {((int64_t)1 << 53) + 1, INT64_MAX}, i64o[2];
  const int64_t s2 = 2;
  ag_tensor *i64 = ag_from_host(TEST_DEV, AG_I64, 1, &s2, i64v);
  assert_non_null(i64);
  r = ag_mul_scalar(i64, 1);
  r2 = r ? ag_add_scalar(r, 2) : NULL;
  assert_non_null(r2);
  assert_int_equal(ag_tensor_dtype(r2), AG_I64);
  assert_int_equal(ag_to_host(r2, i64o, 16), AG_OK);
  assert_true(i64o[0] == ((int64_t)1 << 53) + 3);
  assert_true(i64o[1] == INT64_MIN + 1);
  r3 = ag_sub_scalar(i64, -0x1p63);
  assert_non_null(r3);
  assert_int_equal(ag_to_host(r3, i64o, 16), AG_OK);
  assert_true((uint64_t)i64o[0] == (uint64_t)i64v[0] + ((uint64_t)1 << 63));
  ag_tensor_release(r);
  ag_tensor_release(r2);
  ag_tensor_release(r3);
  /* an integral scalar beyond int64 for an integer result */
  assert_null(ag_add_scalar(i64, 0x1p63));
  expect(ag_last_status(), AG_ERR_INVALID, "does not fit in int64");
  assert_null(ag_mul_scalar(i64, -1e30));
  expect(ag_last_status(), AG_ERR_INVALID, "does not fit in int64");
  ag_tensor_release(i64);
}

/* ---------------- conv2d and pooling sizes ---------------- */

static void test_window_sizes(void **state) {
  (void)state;
  const int64_t sx[4] = {1, 1, 8, 8}, sw[4] = {1, 1, 3, 3};
  ag_tensor *x = ag_zeros(TEST_DEV, AG_F32, 4, sx), *w = ag_zeros(TEST_DEV, AG_F32, 4, sw);
  assert_non_null(x);
  assert_non_null(w);
  /* 2 * INT_MAX wrapped to -2: a 4x4 output for an 8x8 input came back */
  ag_conv2d_params p = {{1, 1}, {INT32_MAX, INT32_MAX}, {1, 1}, 1};
  assert_null(ag_conv2d(x, w, NULL, &p));
  expect(ag_last_status(), AG_ERR_INVALID, "padding");
  /* dilation * (kh - 1) beyond int64: a kernel height of 2^40 (an expanded view) */
  const int64_t big[4] = {1, 1, (int64_t)1 << 40, 1};
  ag_tensor *w1 = ag_zeros(TEST_DEV, AG_F32, 4, (const int64_t[]){1, 1, 1, 1});
  ag_tensor *wbig = w1 ? ag_expand(w1, 4, big) : NULL;
  assert_non_null(wbig);
  ag_conv2d_params pd = {{1, 1}, {0, 0}, {INT32_MAX, 1}, 1};
  ag_conv2d_params pd2 = {{1, 1}, {0, 0}, {1 << 24, 1}, 1};
  assert_null(ag_conv2d(x, wbig, NULL, &pd));
  expect(ag_last_status(), AG_ERR_INVALID, "dilation");
  assert_null(ag_conv2d(x, wbig, NULL, &pd2));
  expect(ag_last_status(), AG_ERR_INVALID, "dilation");
  /* pooling: 2 * padding wrapped and passed "padding <= kernel/2" */
  ag_pool2d_params pp = {{2, 2}, {0, 0}, {INT32_MAX, INT32_MAX}, false};
  assert_null(ag_max_pool2d(x, &pp));
  expect(ag_last_status(), AG_ERR_INVALID, "padding");
  assert_null(ag_avg_pool2d(x, &pp));
  expect(ag_last_status(), AG_ERR_INVALID, "padding");
  /* ordinary sizes still work */
  ag_conv2d_params ok = {{1, 1}, {1, 1}, {1, 1}, 1};
  ag_tensor *y = ag_conv2d(x, w, NULL, &ok);
  assert_non_null(y);
  assert_int_equal(ag_tensor_dim(y, 2), 8);
  ag_tensor_release(y);
  ag_pool2d_params pk = {{2, 2}, {0, 0}, {1, 1}, true};
  y = ag_max_pool2d(x, &pk);
  assert_non_null(y);
  assert_int_equal(ag_tensor_dim(y, 2), 5);
  ag_tensor_release(y);
  ag_tensor_release(wbig);
  ag_tensor_release(w1);
  ag_tensor_release(x);
  ag_tensor_release(w);

  /* Conv2d layer: fan_in = 4 * INT_MAX * INT_MAX wrapped */
  ag_conv2d_layer m;
  expect(ag_conv2d_layer_init(&m, TEST_DEV, AG_F32, 4, 1, INT32_MAX, INT32_MAX, NULL, true, NULL), AG_ERR_INVALID,
         "kernel");
  ag_conv2d_params neg = {{1, 1}, {-1, 0}, {1, 1}, 1};
  expect(ag_conv2d_layer_init(&m, TEST_DEV, AG_F32, 4, 1, 3, 3, &neg, true, NULL), AG_ERR_INVALID, "padding");
}

/* conv2d with no input channels: an empty sum per output, the bias alone */
static void test_conv_no_channels(void **state) {
  (void)state;
  const int64_t sx[4] = {1, 0, 4, 4}, sw[4] = {2, 0, 3, 3}, sb[1] = {2};
  poison_allocator(AG_F32);
  ag_tensor *x = ag_zeros(TEST_DEV, AG_F32, 4, sx), *w = ag_zeros(TEST_DEV, AG_F32, 4, sw);
  ag_tensor *b = host_f32(1, sb, (const float[]){0.5f, -2.0f});
  ag_tensor *y = ag_conv2d(x, w, NULL, NULL);
  if (!y) fail_msg("conv2d: %s", ag_last_error());
  expect_zeros(y, 8, 0.0f);
  ag_tensor_release(y);
  poison_allocator(AG_F32);
  y = ag_conv2d(x, w, b, NULL);
  if (!y) fail_msg("conv2d: %s", ag_last_error());
  float v[8];
  read_f32(y, v, 8);
  for (int i = 0; i < 8; i++) assert_true(v[i] == (i < 4 ? 0.5f : -2.0f));
  ag_tensor_release(y);
  ag_tensor_release(x);
  ag_tensor_release(w);
  ag_tensor_release(b);
}

/* Work still queued at exit: PoCL may be compiling a kernel for it in a
 * thread while CLBlast's exit handlers free their programs. */
static int teardown(void **state) {
  (void)state;
  return ag_device_synchronize(TEST_DEV) == AG_OK ? 0 : -1;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_matmul_k0),
      cmocka_unit_test(test_matmul_k0_grad),
      cmocka_unit_test(test_conv_no_channels),
      cmocka_unit_test(test_copy_overlap),
      cmocka_unit_test(test_int_scalar_wraps),
      cmocka_unit_test(test_window_sizes),
  };
  return cmocka_run_group_tests(tests, NULL, teardown);
}
