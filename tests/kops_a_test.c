/* logsumexp, the vector norms, one_hot and conv1d on the CPU: every error
 * path of their public functions (NULL, dtype, dim, p, shapes) with its
 * message, and small cases checked by hand, gradients included. The
 * cross-backend conformance rows are in tools/conformance_reduce2.c. */
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

#define assert_msg_has(s) \
  do { \
    if (!strstr(ag_last_error(), (s))) fail_msg("message '%s' lacks '%s'", ag_last_error(), (s)); \
  } while (0)
#define assert_fails(expr, status, text) \
  do { \
    ag_error_clear(); \
    assert_null(expr); \
    assert_int_equal(ag_last_status(), (status)); \
    assert_msg_has(text); \
  } while (0)

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

/* A CPU tensor of dtype dt holding v (through f64). */
static ag_tensor *from(ag_dtype dt, int ndim, const int64_t *shape, const double *v) {
  ag_tensor *d = ag_from_host(AG_CPU, AG_F64, ndim, shape, v);
  if (dt == AG_F64 || !d) return d;
  ag_tensor *c = ag_cast(d, dt);
  ag_tensor_release(d);
  return c;
}

static void read_f64(ag_tensor *t, double *out) {
  ag_tensor *d = ag_cast(t, AG_F64);
  assert_non_null(d);
  assert_int_equal(ag_to_host(d, out, (size_t)ag_tensor_numel(d) * sizeof(double)), AG_OK);
  ag_tensor_release(d);
}

static void assert_close(double got, double want, double tol) {
  if (isnan(want) && isnan(got)) return;
  if (isinf(want) && got == want) return;
  if (!(fabs(got - want) <= tol * (1 + fabs(want)))) fail_msg("got %.9g, want %.9g", got, want);
}

/* ---- logsumexp ---- */

static void logsumexp_errors(void **state) {
  (void)state;
  ag_tensor *x = ag_zeros(AG_CPU, AG_F32, 2, (int64_t[]){2, 3});
  ag_tensor *i = ag_zeros(AG_CPU, AG_I32, 2, (int64_t[]){2, 3});
  assert_fails(ag_logsumexp(NULL, 0, false), AG_ERR_INVALID, "ag_logsumexp");
  assert_fails(ag_logsumexp(i, 0, false), AG_ERR_DTYPE, "i32");
  assert_fails(ag_logsumexp(x, 2, false), AG_ERR_SHAPE, "dim 2 out of range");
  assert_fails(ag_logsumexp(x, -3, false), AG_ERR_SHAPE, "dim -3 out of range");
  ag_tensor *s = ag_scalar(AG_CPU, AG_F32, 1.5);
  assert_fails(ag_logsumexp(s, 1, false), AG_ERR_SHAPE, "out of range");
  /* a NULL from an earlier failure keeps the first message */
  ag_error_clear();
  assert_null(ag_logsumexp(ag_logsumexp(i, 0, false), 0, false));
  assert_int_equal(ag_last_status(), AG_ERR_DTYPE);
}

static void logsumexp_values(void **state) {
  (void)state;
  const double v[8] = {1, 2, 3, 4, 1000, 1000, -INFINITY, -INFINITY};
  ag_tensor *x = from(AG_F32, 2, (int64_t[]){4, 2}, v);
  ag_tensor *y = ag_logsumexp(x, 1, false);
  assert_non_null(y);
  assert_int_equal(ag_tensor_ndim(y), 1);
  double o[4];
  read_f64(y, o);
  assert_close(o[0], log(exp(1) + exp(2)), 1e-6);
  assert_close(o[1], log(exp(3) + exp(4)), 1e-6);
  assert_close(o[2], 1000 + log(2), 1e-6);
  assert_close(o[3], -INFINITY, 0);
  ag_tensor *k = ag_logsumexp(x, 0, true);
  assert_non_null(k);
  assert_int_equal(ag_tensor_ndim(k), 2);
  assert_int_equal(ag_tensor_shape(k)[0], 1);
  ag_tensor *s = ag_logsumexp(ag_scalar(AG_CPU, AG_F64, 0.25), -1, false);
  assert_non_null(s);
  assert_int_equal(ag_tensor_ndim(s), 0);
  assert_close(ag_item(s), 0.25, 0);
  /* the gradient is softmax along the dim */
  const double w[6] = {0.5, -1, 2, 0, 0, 0};
  ag_tensor *a = from(AG_F64, 2, (int64_t[]){2, 3}, w);
  assert_int_equal(ag_tensor_set_requires_grad(a, true), AG_OK);
  ag_tensor *l = ag_sum(ag_logsumexp(a, 1, false), 0, NULL, false);
  assert_int_equal(ag_backward(l, NULL, false), AG_OK);
  double g[6];
  read_f64(ag_tensor_grad(a), g);
  double z = exp(0.5) + exp(-1) + exp(2);
  assert_close(g[0], exp(0.5) / z, 1e-12);
  assert_close(g[2], exp(2) / z, 1e-12);
  assert_close(g[4], 1.0 / 3, 1e-12);
}

/* ---- vector norms ---- */

static void norm_errors(void **state) {
  (void)state;
  ag_tensor *x = ag_zeros(AG_CPU, AG_F32, 2, (int64_t[]){2, 3});
  ag_tensor *i = ag_zeros(AG_CPU, AG_I64, 1, (int64_t[]){3});
  assert_fails(ag_norm(NULL, 2, 0, NULL, false), AG_ERR_INVALID, "ag_norm");
  assert_fails(ag_norm(i, 2, 0, NULL, false), AG_ERR_DTYPE, "i64");
  assert_fails(ag_norm(x, 3, 0, NULL, false), AG_ERR_INVALID, "p = 3");
  assert_fails(ag_norm(x, 0, 0, NULL, false), AG_ERR_INVALID, "1, 2 or inf");
  assert_fails(ag_norm(x, -INFINITY, 0, NULL, false), AG_ERR_INVALID, "p = -inf");
  assert_fails(ag_norm(x, NAN, 0, NULL, false), AG_ERR_INVALID, "ag_norm");
  assert_fails(ag_norm(x, 2, 1, (const int[]){2}, false), AG_ERR_SHAPE, "dim 2 out of range");
  assert_fails(ag_norm(x, 2, 2, (const int[]){1, -1}, false), AG_ERR_SHAPE, "more than once");
  ag_tensor *e = ag_zeros(AG_CPU, AG_F32, 2, (int64_t[]){2, 0});
  assert_fails(ag_norm(e, INFINITY, 1, (const int[]){1}, false), AG_ERR_SHAPE, "no identity");
  ag_tensor *z = ag_norm(e, 2, 1, (const int[]){1}, false); /* empty sums are 0, as torch */
  assert_non_null(z);
  double o[2];
  read_f64(z, o);
  assert_close(o[0], 0, 0);
}

static void norm_values(void **state) {
  (void)state;
  const double v[6] = {3, -4, 0, 0, 0, 0};
  ag_tensor *x = from(AG_F64, 2, (int64_t[]){3, 2}, v);
  assert_int_equal(ag_tensor_set_requires_grad(x, true), AG_OK);
  ag_tensor *n2 = ag_norm(x, 2, 1, (const int[]){1}, false);
  assert_non_null(n2);
  double o[3];
  read_f64(n2, o);
  assert_close(o[0], 5, 1e-15);
  assert_close(o[1], 0, 0);
  /* p = 2: x / norm, 0 for a zero line (torch) */
  assert_int_equal(ag_backward(ag_sum(n2, 0, NULL, false), NULL, false), AG_OK);
  double g[6];
  read_f64(ag_tensor_grad(x), g);
  assert_close(g[0], 0.6, 1e-15);
  assert_close(g[1], -0.8, 1e-15);
  assert_close(g[2], 0, 0);
  assert_close(g[3], 0, 0);
  /* all dims, keepdim: shape [1, 1] */
  ag_tensor *all = ag_norm(x, 1, 0, NULL, true);
  assert_non_null(all);
  assert_int_equal(ag_tensor_ndim(all), 2);
  assert_close(ag_item(all), 7, 0);
  /* inf: ties share the gradient evenly, with their sign */
  const double w[3] = {1, -3, 3};
  ag_tensor *y = from(AG_F64, 1, (int64_t[]){3}, w);
  assert_int_equal(ag_tensor_set_requires_grad(y, true), AG_OK);
  ag_tensor *ni = ag_norm(y, INFINITY, 0, NULL, false);
  assert_close(ag_item(ni), 3, 0);
  assert_int_equal(ag_backward(ni, NULL, false), AG_OK);
  read_f64(ag_tensor_grad(y), g);
  assert_close(g[0], 0, 0);
  assert_close(g[1], -0.5, 1e-15);
  assert_close(g[2], 0.5, 1e-15);
  /* large f32 entries: the squares would overflow f32 */
  const double big[2] = {3e30, 4e30};
  ag_tensor *b = from(AG_F32, 1, (int64_t[]){2}, big);
  assert_close(ag_item(ag_norm(b, 2, 0, NULL, false)), 5e30, 1e-6);
}

/* ---- one_hot ---- */

static ag_tensor *index_of(ag_dtype dt, int64_t n, const int64_t *v) {
  ag_tensor *l = ag_from_host(AG_CPU, AG_I64, 1, &n, v);
  if (dt == AG_I64 || !l) return l;
  ag_tensor *c = ag_cast(l, dt);
  ag_tensor_release(l);
  return c;
}

static void one_hot_errors(void **state) {
  (void)state;
  ag_tensor *f = ag_zeros(AG_CPU, AG_F32, 1, (int64_t[]){3});
  assert_fails(ag_one_hot(NULL, 3), AG_ERR_INVALID, "ag_one_hot");
  assert_fails(ag_one_hot(f, 3), AG_ERR_DTYPE, "i64 or i32");
  ag_tensor *e = ag_zeros(AG_CPU, AG_I64, 1, (int64_t[]){0});
  assert_fails(ag_one_hot(e, -1), AG_ERR_SHAPE, "empty");
  ag_tensor *z = ag_one_hot(e, 4); /* an empty index with a count: [0, 4] */
  assert_non_null(z);
  assert_int_equal(ag_tensor_shape(z)[1], 4);
  int64_t big[AG_MAX_DIMS];
  for (int i = 0; i < AG_MAX_DIMS; i++) big[i] = 1;
  ag_tensor *d = ag_zeros(AG_CPU, AG_I64, AG_MAX_DIMS, big);
  assert_fails(ag_one_hot(d, 2), AG_ERR_SHAPE, "no dim for the classes");
  const int64_t neg[2] = {-3, -1}, one[1] = {0};
  assert_fails(ag_one_hot(index_of(AG_I64, 2, neg), -1), AG_ERR_INDEX, "non-negative");
  assert_fails(ag_one_hot(index_of(AG_I64, 1, one), 0), AG_ERR_INDEX, "[0, 0)");
  /* out of range: AG_ERR_INDEX naming the op (the CPU reports at launch) */
  const int64_t v[3] = {0, 3, 1};
  ag_error_clear();
  ag_tensor *o = ag_one_hot(index_of(AG_I64, 3, v), 3);
  ag_status st = o ? ag_to_host(o, (int64_t[9]){0}, 9 * sizeof(int64_t)) : ag_last_status();
  assert_int_equal(st, AG_ERR_INDEX);
  assert_msg_has("ag_one_hot: index 3 out of range [0, 3)");
  const int64_t n[2] = {-1, 0};
  ag_error_clear();
  o = ag_one_hot(index_of(AG_I32, 2, n), 2);
  st = o ? ag_to_host(o, (int64_t[4]){0}, 4 * sizeof(int64_t)) : ag_last_status();
  assert_int_equal(st, AG_ERR_INDEX);
  assert_msg_has("index -1");
}

static void one_hot_values(void **state) {
  (void)state;
  const int64_t v[4] = {2, 0, 3, 2};
  for (int k = 0; k < 2; k++) {
    ag_tensor *o = ag_one_hot(index_of(k ? AG_I32 : AG_I64, 4, v), -1); /* 4 classes from the maximum */
    assert_non_null(o);
    assert_int_equal(ag_tensor_dtype(o), AG_I64);
    assert_int_equal(ag_tensor_ndim(o), 2);
    assert_int_equal(ag_tensor_shape(o)[1], 4);
    int64_t h[16];
    assert_int_equal(ag_to_host(o, h, sizeof h), AG_OK);
    for (int i = 0; i < 4; i++)
      for (int j = 0; j < 4; j++) assert_int_equal(h[i * 4 + j], v[i] == j ? 1 : 0);
  }
  ag_tensor *s = ag_one_hot(ag_scalar(AG_CPU, AG_I64, 1), 3);
  assert_non_null(s);
  assert_int_equal(ag_tensor_ndim(s), 1);
  int64_t h[3];
  assert_int_equal(ag_to_host(s, h, sizeof h), AG_OK);
  assert_int_equal(h[1], 1);
  assert_int_equal(h[0] + h[2], 0);
}

/* ---- conv1d ---- */

static void conv1d_errors(void **state) {
  (void)state;
  ag_tensor *x = ag_zeros(AG_CPU, AG_F32, 3, (int64_t[]){2, 4, 8});
  ag_tensor *w = ag_zeros(AG_CPU, AG_F32, 3, (int64_t[]){6, 2, 3});
  ag_tensor *x2 = ag_zeros(AG_CPU, AG_F32, 2, (int64_t[]){4, 8});
  ag_tensor *wd = ag_zeros(AG_CPU, AG_F64, 3, (int64_t[]){6, 2, 3});
  ag_tensor *xi = ag_zeros(AG_CPU, AG_I32, 3, (int64_t[]){2, 4, 8});
  assert_fails(ag_conv1d(NULL, w, NULL, 1, 0, 1, 2), AG_ERR_INVALID, "ag_conv1d: argument 1");
  assert_fails(ag_conv1d(x, NULL, NULL, 1, 0, 1, 2), AG_ERR_INVALID, "ag_conv1d: argument 2");
  assert_fails(ag_conv1d(x2, w, NULL, 1, 0, 1, 2), AG_ERR_SHAPE, "3-D");
  assert_fails(ag_conv1d(x, w, NULL, 0, 0, 1, 2), AG_ERR_INVALID, "stride");
  assert_fails(ag_conv1d(x, w, NULL, 1, -1, 1, 2), AG_ERR_INVALID, "padding");
  assert_fails(ag_conv1d(x, w, NULL, 1, 0, 0, 2), AG_ERR_INVALID, "dilation");
  assert_fails(ag_conv1d(x, w, NULL, 1, 0, 1, 0), AG_ERR_INVALID, "groups");
  assert_fails(ag_conv1d(x, w, NULL, 1, 0, 1, 1), AG_ERR_SHAPE, "ag_conv1d");
  assert_fails(ag_conv1d(x, w, NULL, 1, 0, 5, 2), AG_ERR_SHAPE, "ag_conv1d");
  assert_fails(ag_conv1d(x, wd, NULL, 1, 0, 1, 2), AG_ERR_DTYPE, "ag_conv1d");
  assert_fails(ag_conv1d(xi, w, NULL, 1, 0, 1, 2), AG_ERR_DTYPE, "ag_conv1d");
  ag_tensor *b = ag_zeros(AG_CPU, AG_F32, 1, (int64_t[]){5});
  assert_fails(ag_conv1d(x, w, b, 1, 0, 1, 2), AG_ERR_SHAPE, "bias");
}

static void conv1d_values(void **state) {
  (void)state;
  const double xv[4] = {1, 2, 3, 4}, wv[2] = {1, -1}, bv[1] = {0.5};
  ag_tensor *x = from(AG_F64, 3, (int64_t[]){1, 1, 4}, xv);
  ag_tensor *w = from(AG_F64, 3, (int64_t[]){1, 1, 2}, wv);
  ag_tensor *b = from(AG_F64, 1, (int64_t[]){1}, bv);
  assert_int_equal(ag_tensor_set_requires_grad(x, true), AG_OK);
  assert_int_equal(ag_tensor_set_requires_grad(w, true), AG_OK);
  assert_int_equal(ag_tensor_set_requires_grad(b, true), AG_OK);
  ag_tensor *y = ag_conv1d(x, w, b, 1, 0, 1, 1);
  assert_non_null(y);
  assert_int_equal(ag_tensor_ndim(y), 3);
  assert_int_equal(ag_tensor_shape(y)[2], 3);
  double o[4];
  read_f64(y, o);
  for (int i = 0; i < 3; i++) assert_close(o[i], -0.5, 0);
  assert_int_equal(ag_backward(ag_sum(y, 0, NULL, false), NULL, false), AG_OK);
  read_f64(ag_tensor_grad(x), o);
  assert_close(o[0], 1, 0);
  assert_close(o[1], 0, 0);
  assert_close(o[3], -1, 0);
  read_f64(ag_tensor_grad(w), o);
  assert_close(o[0], 6, 0);
  assert_close(o[1], 9, 0);
  read_f64(ag_tensor_grad(b), o);
  assert_close(o[0], 3, 0);
  /* stride 2, padding 1: [1, 2, 3, 4] padded to [0, 1, 2, 3, 4, 0] */
  ag_tensor *z = ag_conv1d(x, w, NULL, 2, 1, 1, 1);
  assert_non_null(z);
  assert_int_equal(ag_tensor_shape(z)[2], 3);
  read_f64(z, o);
  assert_close(o[0], -1, 0);
  assert_close(o[1], -1, 0);
  assert_close(o[2], 4, 0);
}

/* Under f16 autocast logsumexp and norm run in f32 and return f32 (torch's
 * f32 list). */
static void autocast_f32(void **state) {
  (void)state;
  const double v[4] = {1, 2, 3, 4};
  ag_tensor *h = from(AG_F16, 2, (int64_t[]){2, 2}, v);
  assert_int_equal(ag_autocast_begin(AG_F16), AG_OK);
  ag_tensor *l = ag_logsumexp(h, 1, false), *n = ag_norm(h, 2, 0, NULL, false);
  assert_int_equal(ag_autocast_end(), AG_OK);
  assert_non_null(l);
  assert_non_null(n);
  assert_int_equal(ag_tensor_dtype(l), AG_F32);
  assert_int_equal(ag_tensor_dtype(n), AG_F32);
  assert_close(ag_item(n), sqrt(30.0), 1e-6);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(logsumexp_errors, setup, teardown),
      cmocka_unit_test_setup_teardown(logsumexp_values, setup, teardown),
      cmocka_unit_test_setup_teardown(norm_errors, setup, teardown),
      cmocka_unit_test_setup_teardown(norm_values, setup, teardown),
      cmocka_unit_test_setup_teardown(one_hot_errors, setup, teardown),
      cmocka_unit_test_setup_teardown(one_hot_values, setup, teardown),
      cmocka_unit_test_setup_teardown(conv1d_errors, setup, teardown),
      cmocka_unit_test_setup_teardown(conv1d_values, setup, teardown),
      cmocka_unit_test_setup_teardown(autocast_f32, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
