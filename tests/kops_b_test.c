/* Error cases of sort/argsort, scatter_add/index_add and pad: each bad
 * argument gives its status and a message naming the op, nothing aborts,
 * and a failed call leaves its out pointers NULL; plus small exact cases
 * on the CPU (stability, NaN placement). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "anygrad/anygrad.h"

#define assert_msg_has(s)                                                                        \
  do {                                                                                           \
    if (!strstr(ag_last_error(), (s))) fail_msg("message '%s' lacks '%s'", ag_last_error(), (s)); \
  } while (0)

static ag_tensor *from(ag_dtype dt, int ndim, const int64_t *shape, const void *v) {
  return ag_from_host(AG_CPU, dt, ndim, shape, v);
}

static int setup(void **state) {
  (void)state;
  ag_scope_begin();
  ag_error_clear();
  return 0;
}
static int teardown(void **state) {
  (void)state;
  ag_scope_end();
  return 0;
}

/* ---- sort ---- */

static void sort_errors(void **state) {
  (void)state;
  ag_tensor *x = ag_zeros(AG_CPU, AG_F32, 2, (int64_t[]){2, 3});
  ag_tensor *xi = ag_zeros(AG_CPU, AG_I32, 2, (int64_t[]){2, 3});
  ag_tensor *v = (ag_tensor *)1, *ix = (ag_tensor *)1;
  assert_int_equal(ag_sort(x, 0, false, NULL, &ix), AG_ERR_INVALID);
  assert_null(ix);
  assert_msg_has("ag_sort");
  ix = (ag_tensor *)1;
  assert_int_equal(ag_sort(NULL, 0, false, &v, &ix), AG_ERR_INVALID);
  assert_null(v);
  assert_null(ix);
  assert_int_equal(ag_sort(x, 2, false, &v, &ix), AG_ERR_SHAPE);
  assert_msg_has("dim 2 out of range");
  assert_int_equal(ag_sort(x, -3, true, &v, &ix), AG_ERR_SHAPE);
  assert_int_equal(ag_sort(xi, 0, false, &v, &ix), AG_ERR_DTYPE);
  assert_msg_has("i32");
  assert_null(ag_argsort(xi, 0, false));
  assert_int_equal(ag_last_status(), AG_ERR_DTYPE);
  assert_msg_has("ag_argsort");
  assert_null(ag_argsort(x, 5, false));
  assert_int_equal(ag_last_status(), AG_ERR_SHAPE);
  /* values alone */
  assert_int_equal(ag_sort(x, 1, false, &v, NULL), AG_OK);
  assert_non_null(v);
}

static void sort_stable_nan(void **state) {
  (void)state;
  const float in[7] = {2, NAN, 1, 2, -0.0f, 0, NAN};
  ag_tensor *x = from(AG_F32, 1, (int64_t[]){7}, in);
  ag_tensor *v, *ix;
  float ov[7];
  int64_t oi[7];
  assert_int_equal(ag_sort(x, 0, false, &v, &ix), AG_OK);
  assert_int_equal(ag_to_host(v, ov, sizeof ov), AG_OK);
  assert_int_equal(ag_to_host(ix, oi, sizeof oi), AG_OK);
  const int64_t asc[7] = {4, 5, 2, 0, 3, 1, 6};
  for (int i = 0; i < 7; i++) assert_int_equal(oi[i], asc[i]);
  assert_true(signbit(ov[0]) && !signbit(ov[1]) && isnan(ov[5]) && isnan(ov[6]));
  ag_tensor *d = ag_argsort(x, -1, true);
  assert_non_null(d);
  assert_int_equal(ag_tensor_dtype(d), AG_I64);
  assert_int_equal(ag_to_host(d, oi, sizeof oi), AG_OK);
  const int64_t desc[7] = {1, 6, 0, 3, 2, 4, 5};
  for (int i = 0; i < 7; i++) assert_int_equal(oi[i], desc[i]);
}

static void sort_grad(void **state) {
  (void)state;
  const float in[4] = {3, 1, 4, 2};
  ag_tensor *x = from(AG_F32, 1, (int64_t[]){4}, in);
  assert_int_equal(ag_tensor_set_requires_grad(x, true), AG_OK);
  ag_tensor *v, *ix;
  assert_int_equal(ag_sort(x, 0, true, &v, &ix), AG_OK);
  const float w[4] = {1, 10, 100, 1000};
  ag_tensor *g = from(AG_F32, 1, (int64_t[]){4}, w);
  assert_int_equal(ag_backward(v, g, false), AG_OK);
  float gx[4];
  assert_int_equal(ag_to_host(ag_tensor_grad(x), gx, sizeof gx), AG_OK);
  /* sorted descending: 4 (x[2]), 3 (x[0]), 2 (x[3]), 1 (x[1]) */
  assert_true(gx[2] == 1 && gx[0] == 10 && gx[3] == 100 && gx[1] == 1000);
}

/* ---- scatter_add, index_add ---- */

static void scatter_errors(void **state) {
  (void)state;
  ag_tensor *x = ag_zeros(AG_CPU, AG_F32, 2, (int64_t[]){3, 4});
  ag_tensor *xh = ag_zeros(AG_CPU, AG_F16, 2, (int64_t[]){3, 4});
  ag_tensor *xi = ag_zeros(AG_CPU, AG_I32, 2, (int64_t[]){3, 4});
  ag_tensor *ix = ag_zeros(AG_CPU, AG_I64, 2, (int64_t[]){2, 4});
  ag_tensor *src = ag_ones(AG_CPU, AG_F32, 2, (int64_t[]){2, 4});
  assert_null(ag_scatter_add(NULL, 0, ix, src));
  assert_int_equal(ag_last_status(), AG_ERR_INVALID);
  assert_null(ag_scatter_add(xi, 0, ix, ag_ones(AG_CPU, AG_I32, 2, (int64_t[]){2, 4})));
  assert_int_equal(ag_last_status(), AG_ERR_DTYPE);
  assert_msg_has("ag_scatter_add");
  assert_null(ag_scatter_add(xh, 0, ix, src));
  assert_int_equal(ag_last_status(), AG_ERR_DTYPE);
  assert_msg_has("one dtype");
  assert_null(ag_scatter_add(x, 0, src, src));
  assert_int_equal(ag_last_status(), AG_ERR_DTYPE);
  assert_msg_has("index");
  assert_null(ag_scatter_add(x, 2, ix, src));
  assert_int_equal(ag_last_status(), AG_ERR_SHAPE);
  assert_msg_has("dim 2 out of range");
  assert_null(ag_scatter_add(x, 0, ag_zeros(AG_CPU, AG_I64, 1, (int64_t[]){2}), src));
  assert_int_equal(ag_last_status(), AG_ERR_SHAPE);
  assert_null(ag_scatter_add(x, 0, ag_zeros(AG_CPU, AG_I64, 2, (int64_t[]){3, 4}), src));
  assert_int_equal(ag_last_status(), AG_ERR_SHAPE);
  assert_msg_has("larger than src");
  assert_null(ag_scatter_add(x, 0, ag_zeros(AG_CPU, AG_I64, 2, (int64_t[]){2, 5}), ag_ones(AG_CPU, AG_F32, 2, (int64_t[]){2, 5})));
  assert_int_equal(ag_last_status(), AG_ERR_SHAPE);
  assert_msg_has("larger than self");
  /* index_add */
  ag_tensor *i1 = ag_zeros(AG_CPU, AG_I32, 1, (int64_t[]){2});
  assert_null(ag_index_add(x, 0, ix, src, 1));
  assert_int_equal(ag_last_status(), AG_ERR_SHAPE);
  assert_msg_has("must be 1-d");
  assert_null(ag_index_add(x, 1, i1, src, 1));
  assert_int_equal(ag_last_status(), AG_ERR_SHAPE);
  assert_msg_has("ag_index_add");
  assert_null(ag_index_add(x, -3, i1, src, 1));
  assert_int_equal(ag_last_status(), AG_ERR_SHAPE);
  assert_non_null(ag_index_add(x, 0, i1, src, 2));
}

/* The index error comes from the launch (synchronous backends check the
 * error word right away: NULL) or at the next host sync. */
static void expect_index_error(ag_device d, ag_tensor *out, const char *value) {
  float buf[64];
  if (out) assert_int_equal(ag_to_host(out, buf, (size_t)ag_tensor_numel(out) * sizeof(float)), AG_ERR_INDEX);
  else assert_int_equal(ag_last_status(), AG_ERR_INDEX);
  assert_msg_has("ag_scatter_add/ag_index_add");
  assert_msg_has(value);
  ag_error_clear();
  assert_int_equal(ag_device_synchronize(d), AG_OK);
}

/* On every device present: the kernels report through the error word. */
static void scatter_index_range(void **state) {
  (void)state;
  static const char *const devs[] = {"cpu", "opencl:0", "gpuemu:0", "vulkan:0"};
  for (size_t k = 0; k < sizeof devs / sizeof devs[0]; k++) {
    ag_device d;
    if (ag_device_parse(devs[k], &d) != AG_OK) {
      ag_error_clear();
      continue;
    }
    ag_tensor *x = ag_zeros(d, AG_F32, 2, (int64_t[]){3, 2});
    if (!x) { /* absent here */
      ag_error_clear();
      continue;
    }
    ag_tensor *src = ag_ones(d, AG_F32, 2, (int64_t[]){2, 2});
    ag_tensor *ix = ag_from_host(d, AG_I64, 2, (int64_t[]){2, 2}, (int64_t[]){0, 3, 1, 2});
    expect_index_error(d, ag_scatter_add(x, 0, ix, src), "3");
    ag_tensor *i1 = ag_from_host(d, AG_I32, 1, (int64_t[]){2}, (int32_t[]){-1, 2});
    expect_index_error(d, ag_index_add(x, 0, i1, src, 1), "-1");
  }
}

static void scatter_values_grad(void **state) {
  (void)state;
  /* torch: torch.zeros(4).scatter_add(0, tensor([1, 3, 1, 1]), tensor([1., 2., 4., 8.])) = [0, 13, 0, 2] */
  ag_tensor *x = ag_zeros(AG_CPU, AG_F32, 1, (int64_t[]){4});
  ag_tensor *src = from(AG_F32, 1, (int64_t[]){4}, (float[]){1, 2, 4, 8});
  ag_tensor *ix = from(AG_I64, 1, (int64_t[]){4}, (int64_t[]){1, 3, 1, 1});
  assert_int_equal(ag_tensor_set_requires_grad(x, true), AG_OK);
  assert_int_equal(ag_tensor_set_requires_grad(src, true), AG_OK);
  ag_tensor *y = ag_scatter_add(x, 0, ix, src);
  float v[4];
  assert_int_equal(ag_to_host(y, v, sizeof v), AG_OK);
  assert_true(v[0] == 0 && v[1] == 13 && v[2] == 0 && v[3] == 2);
  ag_tensor *g = from(AG_F32, 1, (int64_t[]){4}, (float[]){10, 20, 30, 40});
  assert_int_equal(ag_backward(y, g, false), AG_OK);
  assert_int_equal(ag_to_host(ag_tensor_grad(x), v, sizeof v), AG_OK);
  assert_true(v[0] == 10 && v[1] == 20 && v[2] == 30 && v[3] == 40);
  assert_int_equal(ag_to_host(ag_tensor_grad(src), v, sizeof v), AG_OK);
  assert_true(v[0] == 20 && v[1] == 40 && v[2] == 20 && v[3] == 20);
  /* index_add with alpha: [0, 13, 0, 2] * -0.5 */
  ag_tensor *z = ag_index_add(ag_zeros(AG_CPU, AG_F32, 1, (int64_t[]){4}), 0, ix, src, -0.5);
  assert_int_equal(ag_to_host(z, v, sizeof v), AG_OK);
  assert_true(v[0] == 0 && v[1] == -6.5f && v[2] == 0 && v[3] == -1);
}

/* ---- pad ---- */

static void pad_errors(void **state) {
  (void)state;
  ag_tensor *x = ag_zeros(AG_CPU, AG_F32, 3, (int64_t[]){2, 3, 4});
  ag_tensor *xi = ag_zeros(AG_CPU, AG_I32, 2, (int64_t[]){3, 4});
  const int64_t p2[2] = {1, 1}, p4[4] = {1, 1, 2, 2}, p6[6] = {1, 1, 1, 1, 1, 1}, p8[8] = {0};
  assert_null(ag_pad(NULL, p2, 2, AG_PAD_CONSTANT, 0));
  assert_int_equal(ag_last_status(), AG_ERR_INVALID);
  assert_null(ag_pad(x, NULL, 2, AG_PAD_CONSTANT, 0));
  assert_int_equal(ag_last_status(), AG_ERR_INVALID);
  assert_msg_has("ag_pad");
  assert_null(ag_pad(x, p2, 1, AG_PAD_CONSTANT, 0));
  assert_int_equal(ag_last_status(), AG_ERR_INVALID);
  assert_msg_has("pairs");
  assert_null(ag_pad(x, p2, 2, (ag_pad_mode)7, 0));
  assert_int_equal(ag_last_status(), AG_ERR_INVALID);
  assert_msg_has("mode");
  assert_null(ag_pad(x, (const int64_t[]){1, -1}, 2, AG_PAD_CONSTANT, 0));
  assert_int_equal(ag_last_status(), AG_ERR_INVALID);
  assert_msg_has("negative");
  assert_null(ag_pad(xi, p2, 2, AG_PAD_CONSTANT, 0));
  assert_int_equal(ag_last_status(), AG_ERR_DTYPE);
  assert_null(ag_pad(x, p8, 8, AG_PAD_CONSTANT, 0));
  assert_int_equal(ag_last_status(), AG_ERR_SHAPE);
  assert_msg_has("4 pad pairs for a 3-d tensor");
  /* reflect: the last 1 or 2 dims, each amount below its size */
  assert_null(ag_pad(x, p6, 6, AG_PAD_REFLECT, 0));
  assert_int_equal(ag_last_status(), AG_ERR_SHAPE);
  assert_msg_has("last 1 or 2 dims");
  assert_null(ag_pad(x, (const int64_t[]){4, 0}, 2, AG_PAD_REFLECT, 0));
  assert_int_equal(ag_last_status(), AG_ERR_SHAPE);
  assert_msg_has("below its size");
  assert_null(ag_pad(x, (const int64_t[]){0, 0, 0, 3}, 4, AG_PAD_REFLECT, 0));
  assert_int_equal(ag_last_status(), AG_ERR_SHAPE);
  ag_tensor *y = ag_pad(x, p4, 4, AG_PAD_REFLECT, 0);
  assert_non_null(y);
  assert_int_equal(ag_tensor_shape(y)[1], 7);
  assert_int_equal(ag_tensor_shape(y)[2], 6);
  y = ag_pad(x, p6, 6, AG_PAD_CONSTANT, 1);
  assert_non_null(y);
  assert_int_equal(ag_tensor_shape(y)[0], 4);
}

static void pad_reflect_grad(void **state) {
  (void)state;
  /* torch: F.pad([a, b, c, d], (2, 1), "reflect") = [c, b, a, b, c, d, c] */
  ag_tensor *x = from(AG_F32, 2, (int64_t[]){1, 4}, (float[]){1, 2, 3, 4});
  assert_int_equal(ag_tensor_set_requires_grad(x, true), AG_OK);
  ag_tensor *y = ag_pad(x, (const int64_t[]){2, 1}, 2, AG_PAD_REFLECT, 0);
  float v[7];
  assert_int_equal(ag_to_host(y, v, sizeof v), AG_OK);
  const float want[7] = {3, 2, 1, 2, 3, 4, 3};
  for (int i = 0; i < 7; i++) assert_true(v[i] == want[i]);
  ag_tensor *g = from(AG_F32, 2, (int64_t[]){1, 7}, (float[]){1, 10, 100, 1000, 1e4f, 1e5f, 1e6f});
  assert_int_equal(ag_backward(y, g, false), AG_OK);
  assert_int_equal(ag_to_host(ag_tensor_grad(x), v, 4 * sizeof(float)), AG_OK);
  assert_true(v[0] == 100 && v[1] == 1010 && v[2] == 1010001 && v[3] == 1e5f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(sort_errors, setup, teardown),
      cmocka_unit_test_setup_teardown(sort_stable_nan, setup, teardown),
      cmocka_unit_test_setup_teardown(sort_grad, setup, teardown),
      cmocka_unit_test_setup_teardown(scatter_errors, setup, teardown),
      cmocka_unit_test_setup_teardown(scatter_index_range, setup, teardown),
      cmocka_unit_test_setup_teardown(scatter_values_grad, setup, teardown),
      cmocka_unit_test_setup_teardown(pad_errors, setup, teardown),
      cmocka_unit_test_setup_teardown(pad_reflect_grad, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
