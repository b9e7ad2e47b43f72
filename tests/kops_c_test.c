/* ag_group_norm and ag_interpolate: every argument error gives NULL with
 * the documented status and a message naming the call; a NULL argument
 * propagates; the backward is deterministic (two runs, the same bits); the
 * other backends present (opencl:0, gpuemu:0, gpuemu:1, vulkan:0) agree
 * with the CPU forward and backward. The numerics against double
 * references are the conformance rows (anygrad check). */
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
#include "anygrad/amp.h"
#include "anygrad/nn.h"

static ag_tensor *rnd(ag_device dev, ag_dtype dt, int ndim, const int64_t *shape, uint64_t seed) {
  ag_generator *g = ag_generator_create(seed);
  assert_non_null(g);
  ag_tensor *t = ag_randn(dev, dt, ndim, shape, 0, 1, g);
  ag_generator_free(g);
  assert_non_null(t);
  return t;
}

static double *host(ag_tensor *t) {
  ag_tensor *d = ag_cast(t, AG_F64);
  assert_non_null(d);
  int64_t n = ag_tensor_numel(d);
  double *h = malloc(sizeof(double) * (size_t)(n ? n : 1));
  assert_int_equal(ag_to_host(d, h, sizeof(double) * (size_t)n), AG_OK);
  ag_tensor_release(d);
  return h;
}

/* max |a - b| / (1 + max |b|) */
static double rel_err(ag_tensor *a, ag_tensor *b) {
  assert_int_equal(ag_tensor_numel(a), ag_tensor_numel(b));
  double *x = host(a), *y = host(b), e = 0, m = 0;
  for (int64_t i = 0; i < ag_tensor_numel(a); i++) {
    double d = fabs(x[i] - y[i]);
    if (!(d <= e)) e = d;
    if (fabs(y[i]) > m) m = fabs(y[i]);
  }
  free(x);
  free(y);
  return e / (1 + m);
}

static bool same_bits(ag_tensor *a, ag_tensor *b) {
  size_t n = (size_t)ag_tensor_numel(a) * ag_dtype_size(ag_tensor_dtype(a));
  void *x = malloc(n ? n : 1), *y = malloc(n ? n : 1);
  assert_int_equal(ag_to_host(a, x, n), AG_OK);
  assert_int_equal(ag_to_host(b, y, n), AG_OK);
  bool same = memcmp(x, y, n) == 0;
  free(x);
  free(y);
  return same;
}

static bool present(const char *name, ag_device *dev) {
  if (ag_device_parse(name, dev) != AG_OK || !ag_backend_available((ag_backend_kind)dev->backend, NULL) ||
      dev->index >= ag_backend_device_count((ag_backend_kind)dev->backend)) {
    ag_error_clear();
    return false;
  }
  return true;
}

static const char *k_devs[] = {"opencl:0", "gpuemu:0", "gpuemu:1", "vulkan:0"};
#define N_DEVS (sizeof k_devs / sizeof *k_devs)

/* NULL result, status st, the call's name in the message; then cleared. */
static void expect_err(ag_tensor *r, ag_status st, const char *name) {
  assert_null(r);
  assert_int_equal(ag_last_status(), st);
  if (!strstr(ag_last_error(), name)) fail_msg("message \"%s\" lacks \"%s\"", ag_last_error(), name);
  ag_error_clear();
}

static void test_group_norm_errors(void **state) {
  (void)state;
  ag_device cpu = AG_CPU;
  ag_scope_begin();
  const int64_t s4[4] = {2, 6, 3, 3}, s6[1] = {6}, s4c[1] = {4}, s1[1] = {6};
  ag_tensor *x = rnd(cpu, AG_F32, 4, s4, 1), *w = rnd(cpu, AG_F32, 1, s6, 2);
  expect_err(ag_group_norm(NULL, 2, NULL, NULL, 1e-5), AG_ERR_INVALID, "ag_group_norm");
  expect_err(ag_group_norm(x, 4, NULL, NULL, 1e-5), AG_ERR_INVALID, "ag_group_norm");  /* 4 does not divide 6 */
  expect_err(ag_group_norm(x, 0, NULL, NULL, 1e-5), AG_ERR_INVALID, "ag_group_norm");
  expect_err(ag_group_norm(x, -3, NULL, NULL, 1e-5), AG_ERR_INVALID, "ag_group_norm");
  expect_err(ag_group_norm(x, 3, NULL, NULL, -1), AG_ERR_INVALID, "ag_group_norm");
  expect_err(ag_group_norm(x, 3, NULL, NULL, NAN), AG_ERR_INVALID, "ag_group_norm");
  expect_err(ag_group_norm(x, 3, NULL, NULL, INFINITY), AG_ERR_INVALID, "ag_group_norm");
  ag_tensor *wbad = rnd(cpu, AG_F32, 1, s4c, 3), *w64 = rnd(cpu, AG_F64, 1, s1, 4);
  expect_err(ag_group_norm(x, 3, wbad, NULL, 1e-5), AG_ERR_SHAPE, "weight");
  expect_err(ag_group_norm(x, 3, NULL, w64, 1e-5), AG_ERR_SHAPE, "bias");
  ag_tensor *xi = ag_zeros(cpu, AG_I32, 4, s4), *x1 = rnd(cpu, AG_F32, 1, s6, 5);
  expect_err(ag_group_norm(xi, 3, NULL, NULL, 1e-5), AG_ERR_DTYPE, "ag_group_norm");
  expect_err(ag_group_norm(x1, 3, NULL, NULL, 1e-5), AG_ERR_DTYPE, "ag_group_norm");
  /* a failed step upstream: NULL propagates without a new message */
  ag_error_set(AG_ERR_SHAPE, "upstream");
  assert_null(ag_group_norm(NULL, 3, w, NULL, 1e-5));
  assert_string_equal(ag_last_error(), "upstream");
  ag_error_clear();
  /* empty batch: an empty result, no error; eps 0 is taken */
  const int64_t s0[3] = {0, 6, 2};
  ag_tensor *x0 = ag_zeros(cpu, AG_F32, 3, s0), *y0 = ag_group_norm(x0, 3, w, NULL, 1e-5);
  assert_non_null(y0);
  assert_int_equal(ag_tensor_numel(y0), 0);
  assert_non_null(ag_group_norm(x, 3, w, w, 0));
  /* under autocast f16 the statistics and the result are f32, as torch */
  ag_tensor *xh = ag_cast(x, AG_F16);
  assert_int_equal(ag_autocast_begin(AG_F16), AG_OK);
  ag_tensor *ya = ag_group_norm(xh, 3, NULL, NULL, 1e-5);
  assert_int_equal(ag_autocast_end(), AG_OK);
  assert_non_null(ya);
  assert_int_equal(ag_tensor_dtype(ya), AG_F32);
  ag_scope_end();
}

/* y, dx, dw, db of one group norm on dev (f32), x [2, 6, 4, 5], 3 groups. */
static void gn_run(ag_device dev, ag_tensor **out) {
  const int64_t s4[4] = {2, 6, 4, 5}, s1[1] = {6};
  ag_tensor *x = rnd(dev, AG_F32, 4, s4, 11), *w = rnd(dev, AG_F32, 1, s1, 12), *b = rnd(dev, AG_F32, 1, s1, 13);
  ag_tensor *gy = rnd(dev, AG_F32, 4, s4, 14);
  assert_int_equal(ag_tensor_set_requires_grad(x, true), AG_OK);
  assert_int_equal(ag_tensor_set_requires_grad(w, true), AG_OK);
  assert_int_equal(ag_tensor_set_requires_grad(b, true), AG_OK);
  ag_tensor *y = ag_group_norm(x, 3, w, b, 1e-5);
  assert_non_null(y);
  assert_int_equal(ag_backward(y, gy, false), AG_OK);
  ag_tensor *ts[4] = {y, ag_tensor_grad(x), ag_tensor_grad(w), ag_tensor_grad(b)};
  for (int i = 0; i < 4; i++) {
    assert_non_null(ts[i]);
    out[i] = ag_to_device(ts[i], AG_CPU);
    assert_non_null(out[i]);
  }
}

static void test_group_norm_backends(void **state) {
  (void)state;
  ag_scope_begin();
  ag_tensor *ref[4], *again[4];
  gn_run(AG_CPU, ref);
  gn_run(AG_CPU, again);
  for (int i = 0; i < 4; i++) assert_true(same_bits(ref[i], again[i]));
  for (size_t d = 0; d < N_DEVS; d++) {
    ag_device dev;
    if (!present(k_devs[d], &dev)) continue;
    ag_tensor *o[4], *o2[4];
    gn_run(dev, o);
    gn_run(dev, o2);
    for (int i = 0; i < 4; i++) {
      double e = rel_err(o[i], ref[i]);
      if (e > 1e-4) fail_msg("%s: group_norm output %d differs from the CPU by %g", k_devs[d], i, e);
      if (!same_bits(o[i], o2[i])) fail_msg("%s: group_norm output %d not deterministic", k_devs[d], i);
    }
  }
  ag_scope_end();
}

static void test_interpolate_errors(void **state) {
  (void)state;
  ag_device cpu = AG_CPU;
  ag_scope_begin();
  const int64_t s4[4] = {1, 2, 3, 4}, s3[3] = {2, 3, 4};
  ag_tensor *x = rnd(cpu, AG_F32, 4, s4, 1), *x3 = rnd(cpu, AG_F32, 3, s3, 2), *xi = ag_zeros(cpu, AG_I32, 4, s4);
  const char *nm = "ag_interpolate";
  expect_err(ag_interpolate(NULL, 2, 2, 0, 0, AG_INTERP_NEAREST, false), AG_ERR_INVALID, nm);
  expect_err(ag_interpolate(x3, 2, 2, 0, 0, AG_INTERP_NEAREST, false), AG_ERR_SHAPE, nm);
  expect_err(ag_interpolate(xi, 2, 2, 0, 0, AG_INTERP_NEAREST, false), AG_ERR_DTYPE, nm);
  expect_err(ag_interpolate(x, 2, 2, 0, 0, (ag_interp_mode)7, false), AG_ERR_INVALID, "mode");
  expect_err(ag_interpolate(x, 2, 2, 0, 0, AG_INTERP_NEAREST, true), AG_ERR_INVALID, "align_corners");
  expect_err(ag_interpolate(x, 2, 2, 2.0, 2.0, AG_INTERP_BILINEAR, false), AG_ERR_INVALID, "not both");
  expect_err(ag_interpolate(x, 0, 0, 0, 0, AG_INTERP_BILINEAR, false), AG_ERR_INVALID, "one of them");
  expect_err(ag_interpolate(x, 0, 5, 0, 0, AG_INTERP_BILINEAR, false), AG_ERR_INVALID, "out_h");
  expect_err(ag_interpolate(x, -1, 5, 0, 0, AG_INTERP_BILINEAR, false), AG_ERR_INVALID, "out_h");
  expect_err(ag_interpolate(x, 3, -2, 0, 0, AG_INTERP_BILINEAR, false), AG_ERR_INVALID, "out_w");
  expect_err(ag_interpolate(x, 0, 0, 2.0, 0, AG_INTERP_BILINEAR, false), AG_ERR_INVALID, "scale_w");
  expect_err(ag_interpolate(x, 0, 0, -2.0, 2.0, AG_INTERP_BILINEAR, false), AG_ERR_INVALID, "scale_h");
  expect_err(ag_interpolate(x, 0, 0, NAN, 2.0, AG_INTERP_BILINEAR, false), AG_ERR_INVALID, "scale_h");
  expect_err(ag_interpolate(x, 0, 0, INFINITY, 2.0, AG_INTERP_BILINEAR, false), AG_ERR_INVALID, "scale_h");
  expect_err(ag_interpolate(x, 0, 0, 0.2, 2.0, AG_INTERP_NEAREST, false), AG_ERR_INVALID, "output size"); /* floor(3*0.2) = 0 */
  ag_error_set(AG_ERR_SHAPE, "upstream");
  assert_null(ag_interpolate(NULL, 2, 2, 0, 0, AG_INTERP_NEAREST, false));
  assert_string_equal(ag_last_error(), "upstream");
  ag_error_clear();
  /* the size from a scale factor is floor(in * scale), as torch */
  ag_tensor *y = ag_interpolate(x, 0, 0, 1.5, 0.7, AG_INTERP_NEAREST, false);
  assert_non_null(y);
  assert_int_equal(ag_tensor_shape(y)[2], 4);
  assert_int_equal(ag_tensor_shape(y)[3], 2);
  /* an empty batch gives an empty result */
  const int64_t s0[4] = {0, 2, 3, 4};
  ag_tensor *x0 = ag_zeros(cpu, AG_F32, 4, s0), *y0 = ag_interpolate(x0, 6, 8, 0, 0, AG_INTERP_BILINEAR, true);
  assert_non_null(y0);
  assert_int_equal(ag_tensor_numel(y0), 0);
  ag_scope_end();
}

/* y and dx of interpolate on dev (f32), x [2, 3, 5, 6]. */
static void ip_run(ag_device dev, int cfg, ag_tensor **out) {
  const int64_t s4[4] = {2, 3, 5, 6};
  ag_tensor *x = rnd(dev, AG_F32, 4, s4, 21);
  assert_int_equal(ag_tensor_set_requires_grad(x, true), AG_OK);
  ag_tensor *y = cfg == 0   ? ag_interpolate(x, 0, 0, 1.5, 2.5, AG_INTERP_NEAREST, false)
                 : cfg == 1 ? ag_interpolate(x, 11, 4, 0, 0, AG_INTERP_BILINEAR, false)
                 : cfg == 2 ? ag_interpolate(x, 0, 0, 2.0, 2.0, AG_INTERP_BILINEAR, true)
                            : ag_interpolate(x, 10, 12, 0, 0, AG_INTERP_NEAREST, false);
  assert_non_null(y);
  ag_tensor *gy = rnd(dev, AG_F32, 4, ag_tensor_shape(y), 22);
  assert_int_equal(ag_backward(y, gy, false), AG_OK);
  assert_non_null(ag_tensor_grad(x));
  out[0] = ag_to_device(y, AG_CPU);
  out[1] = ag_to_device(ag_tensor_grad(x), AG_CPU);
  assert_non_null(out[0]);
  assert_non_null(out[1]);
}

static void test_interpolate_backends(void **state) {
  (void)state;
  for (int cfg = 0; cfg < 4; cfg++) {
    ag_scope_begin();
    ag_tensor *ref[2], *again[2];
    ip_run(AG_CPU, cfg, ref);
    ip_run(AG_CPU, cfg, again);
    for (int i = 0; i < 2; i++) assert_true(same_bits(ref[i], again[i]));
    for (size_t d = 0; d < N_DEVS; d++) {
      ag_device dev;
      if (!present(k_devs[d], &dev)) continue;
      ag_tensor *o[2], *o2[2];
      ip_run(dev, cfg, o);
      ip_run(dev, cfg, o2);
      for (int i = 0; i < 2; i++) {
        double e = rel_err(o[i], ref[i]);
        if (e > 1e-5) fail_msg("%s: interpolate case %d output %d differs from the CPU by %g", k_devs[d], cfg, i, e);
        if (!same_bits(o[i], o2[i])) fail_msg("%s: interpolate case %d output %d not deterministic", k_devs[d], cfg, i);
      }
    }
    ag_scope_end();
  }
}

/* torch.nn.GroupNorm's module: parameters, forward as the functional. */
static void test_group_norm_module(void **state) {
  (void)state;
  ag_group_norm_layer m;
  assert_int_equal(ag_group_norm_init(&m, AG_CPU, AG_F32, 4, 6, 1e-5, true), AG_ERR_SHAPE);
  ag_error_clear();
  assert_int_equal(ag_group_norm_init(&m, AG_CPU, AG_F32, 0, 6, 1e-5, true), AG_ERR_SHAPE);
  ag_error_clear();
  assert_int_equal(ag_group_norm_init(&m, AG_CPU, AG_F32, 3, 6, -1, true), AG_ERR_INVALID);
  ag_error_clear();
  assert_int_equal(ag_group_norm_init(NULL, AG_CPU, AG_F32, 3, 6, 1e-5, true), AG_ERR_INVALID);
  ag_error_clear();
  assert_null(ag_group_norm_forward(NULL, NULL));
  ag_error_clear();
  assert_int_equal(ag_group_norm_init(&m, AG_CPU, AG_F32, 3, 6, 1e-5, true), AG_OK);
  ag_param_list l = {0};
  assert_int_equal(ag_group_norm_params(&m, "gn.", &l), AG_OK);
  assert_int_equal(l.count, 2);
  assert_non_null(ag_params_find(&l, "gn.weight"));
  assert_non_null(ag_params_find(&l, "gn.bias"));
  assert_true(ag_tensor_requires_grad(ag_params_find(&l, "gn.weight")));
  ag_params_free(&l);
  ag_scope_begin();
  const int64_t s4[4] = {2, 6, 3, 2};
  ag_tensor *x = rnd(AG_CPU, AG_F32, 4, s4, 31);
  ag_tensor *y = ag_group_norm_forward(&m, x), *r = ag_group_norm(x, 3, NULL, NULL, 1e-5);
  assert_non_null(y);
  assert_non_null(r);
  assert_true(same_bits(y, r)); /* weight ones, bias zeros */
  ag_scope_end();
  ag_group_norm_free(&m);
  ag_group_norm_layer n;
  assert_int_equal(ag_group_norm_init(&n, AG_CPU, AG_F32, 2, 4, 1e-5, false), AG_OK);
  assert_null(n.weight);
  ag_param_list l2 = {0};
  assert_int_equal(ag_group_norm_params(&n, NULL, &l2), AG_OK);
  assert_int_equal(l2.count, 0);
  ag_params_free(&l2);
  ag_group_norm_free(&n);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_group_norm_errors),
      cmocka_unit_test(test_group_norm_backends),
      cmocka_unit_test(test_group_norm_module),
      cmocka_unit_test(test_interpolate_errors),
      cmocka_unit_test(test_interpolate_backends),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
