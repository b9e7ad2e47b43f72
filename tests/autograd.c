/* Tape semantics: accumulation, retain_graph, freeing, explicit gradients,
 * grad modes, detach, mixed dtypes, misuse errors, activation memory. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "anygrad/anygrad.h"

static ag_tensor *leaf(int nd, const int64_t *s, const double *v) {
  ag_tensor *t = ag_from_host(AG_CPU, AG_F64, nd, s, v);
  assert_non_null(t);
  assert_int_equal(ag_tensor_set_requires_grad(t, true), AG_OK);
  return t;
}

static void grad_equals(ag_tensor *t, const double *want, int n) {
  ag_tensor *g = ag_tensor_grad(t);
  assert_non_null(g);
  double got[16];
  assert_int_equal(ag_to_host(g, got, (size_t)n * sizeof(double)), AG_OK);
  for (int i = 0; i < n; i++)
    if (fabs(got[i] - want[i]) > 1e-12) fail_msg("grad[%d] = %g, want %g", i, got[i], want[i]);
}

static void test_accumulate_and_retain(void **state) {
  (void)state;
  int64_t s = 3;
  double v[3] = {1, 2, 3};
  ag_tensor *x = leaf(1, &s, v);
  ag_scope_begin();
  ag_tensor *y = ag_sum(ag_mul(x, x), 0, NULL, false); /* dy/dx = 2x */
  assert_int_equal(ag_backward(y, NULL, true), AG_OK);
  double g1[3] = {2, 4, 6};
  grad_equals(x, g1, 3);
  assert_int_equal(ag_backward(y, NULL, false), AG_OK); /* accumulates */
  double g2[3] = {4, 8, 12};
  grad_equals(x, g2, 3);
  /* the graph is freed now: a third backward is a clear error */
  assert_int_equal(ag_backward(y, NULL, false), AG_ERR_STATE);
  assert_non_null(strstr(ag_last_error(), "retain_graph"));
  ag_scope_end();
  assert_int_equal(ag_live_nodes(), 0);
  ag_tensor_zero_grad(x);
  assert_null(ag_tensor_grad(x));
  ag_tensor_release(x);
}

static void test_misuse_errors(void **state) {
  (void)state;
  int64_t s = 2;
  double v[2] = {1, 2};
  ag_tensor *x = leaf(1, &s, v); /* outside the scope: released below */
  ag_scope_begin();
  ag_tensor *c = ag_from_host(AG_CPU, AG_F64, 1, &s, v);
  ag_tensor *y = ag_sum(c, 0, NULL, false);
  assert_int_equal(ag_backward(y, NULL, false), AG_ERR_STATE); /* no graph */
  assert_non_null(strstr(ag_last_error(), "does not require grad"));
  int32_t iv[2] = {1, 2};
  ag_tensor *i = ag_from_host(AG_CPU, AG_I32, 1, &s, iv);
  assert_int_equal(ag_tensor_set_requires_grad(i, true), AG_ERR_DTYPE);
  ag_tensor *z = ag_mul_scalar(x, 3.0);
  assert_int_equal(ag_backward(z, NULL, false), AG_ERR_SHAPE); /* non-scalar needs a gradient */
  assert_int_equal(ag_tensor_set_requires_grad(z, false), AG_ERR_STATE); /* non-leaf */
  assert_int_equal(ag_tensor_set_requires_grad(z, true), AG_OK);         /* already does: no-op */
  assert_false(ag_tensor_is_leaf(z));
  assert_true(ag_tensor_requires_grad(z));
  int64_t s3 = 3;
  ag_tensor *bad = ag_ones(AG_CPU, AG_F64, 1, &s3);
  assert_int_equal(ag_backward(z, bad, false), AG_ERR_SHAPE);
  double w[2] = {10, 100};
  ag_tensor *gz = ag_from_host(AG_CPU, AG_F64, 1, &s, w);
  assert_int_equal(ag_backward(z, gz, false), AG_OK); /* explicit gradient */
  double want[2] = {30, 300};
  grad_equals(x, want, 2);
  assert_int_equal(ag_grad_mode_end(), AG_ERR_STATE); /* nothing open */
  ag_scope_end();
  ag_tensor_release(x);
}

static void test_modes_and_detach(void **state) {
  (void)state;
  int64_t s = 2;
  double v[2] = {1, -2};
  ag_tensor *x = leaf(1, &s, v);
  ag_scope_begin();
  assert_true(ag_grad_enabled());
  ag_no_grad_begin();
  assert_false(ag_grad_enabled());
  assert_false(ag_tensor_requires_grad(ag_exp(x)));
  ag_no_grad_begin(); /* nested */
  ag_enable_grad_begin();
  assert_true(ag_grad_enabled());
  assert_true(ag_tensor_requires_grad(ag_exp(x)));
  assert_int_equal(ag_grad_mode_end(), AG_OK);
  assert_false(ag_grad_enabled());
  assert_int_equal(ag_grad_mode_end(), AG_OK);
  assert_int_equal(ag_grad_mode_end(), AG_OK);
  assert_true(ag_grad_enabled());
  ag_inference_mode_begin();
  assert_true(ag_inference_mode());
  assert_false(ag_tensor_requires_grad(ag_exp(x)));
  assert_int_equal(ag_tensor_set_requires_grad(ag_ones(AG_CPU, AG_F64, 1, &s), true), AG_ERR_STATE);
  ag_grad_mode_end();
  assert_false(ag_inference_mode());
  /* detach cuts the graph: d(sum(detach(2x) * x))/dx = 2x (not 4x) */
  ag_tensor *d = ag_detach(ag_mul_scalar(x, 2.0));
  assert_false(ag_tensor_requires_grad(d));
  assert_true(ag_tensor_is_leaf(d));
  assert_int_equal(ag_backward(ag_sum(ag_mul(d, x), 0, NULL, false), NULL, false), AG_OK);
  double want[2] = {2, -4};
  grad_equals(x, want, 2);
  ag_scope_end();
  ag_tensor_release(x);
}

static void test_broadcast_views_mixed_dtypes(void **state) {
  (void)state;
  int64_t sa[2] = {3, 1}, sb = 4;
  double va[3] = {1, 2, 3}, vb[4] = {1, 1, 1, 1};
  ag_tensor *a = leaf(2, sa, va), *b = leaf(1, &sb, vb);
  ag_scope_begin();
  /* a [3,1] + b [4] -> [3,4]; each a gets 4 contributions, each b 3 */
  assert_int_equal(ag_backward(ag_sum(ag_add(a, b), 0, NULL, false), NULL, false), AG_OK);
  double ga[3] = {4, 4, 4}, gb[4] = {3, 3, 3, 3};
  grad_equals(a, ga, 3);
  grad_equals(b, gb, 4);
  /* through a transposed slice: only the sliced elements get gradient */
  ag_tensor_zero_grad(a);
  ag_tensor *v = ag_transpose(ag_slice(a, 0, 1, 3, 1), 0, 1); /* [1,2] view of a[1:3] */
  assert_int_equal(ag_backward(ag_sum(ag_mul_scalar(v, 5.0), 0, NULL, false), NULL, false), AG_OK);
  double gv[3] = {0, 5, 5};
  grad_equals(a, gv, 3);
  /* mixed dtypes: an f32 leaf used in f64 math gets an f32 gradient */
  int64_t s2 = 2;
  float xf[2] = {1.5f, -1.0f};
  ag_tensor *x = ag_from_host(AG_CPU, AG_F32, 1, &s2, xf);
  ag_tensor_set_requires_grad(x, true);
  ag_tensor *x64 = ag_cast(x, AG_F64);
  assert_int_equal(ag_backward(ag_sum(ag_mul(x64, x64), 0, NULL, false), NULL, false), AG_OK);
  ag_tensor *gx = ag_tensor_grad(x);
  assert_int_equal(ag_tensor_dtype(gx), AG_F32);
  float g[2];
  assert_int_equal(ag_to_host(gx, g, sizeof g), AG_OK);
  assert_true(fabsf(g[0] - 3.0f) < 1e-6f && fabsf(g[1] + 2.0f) < 1e-6f);
  ag_scope_end();
  ag_tensor_release(a);
  ag_tensor_release(b);
  assert_int_equal(ag_live_nodes(), 0);
}

/* Tensors saved for backward count as activation memory until the graph
 * is freed; the gradient counts as gradient memory. */
/* Reducing over a dim of size 1 (keepdim false) drops it; the backward must
 * put it back rather than treat the reduction as over every dim. */
static void test_reduce_size1_dim(void **state) {
  (void)state;
  int64_t s[2] = {3, 1};
  float d[3] = {1, 5, 2}, g[3];
  int dim = 1;
  ag_tensor *x = ag_from_host(AG_CPU, AG_F32, 2, s, d);
  assert_int_equal(ag_tensor_set_requires_grad(x, true), AG_OK);
  ag_scope_begin();
  ag_tensor *sm = ag_sum(x, 1, &dim, false);
  ag_tensor *mx = ag_max(x, 1, &dim, false);
  ag_tensor *l = ag_sum(ag_add(ag_mul(sm, sm), mx), 0, NULL, false);
  assert_int_equal(ag_backward(l, NULL, false), AG_OK);
  ag_scope_end();
  assert_int_equal(ag_to_host(ag_tensor_grad(x), g, sizeof g), AG_OK);
  for (int i = 0; i < 3; i++) assert_float_equal(g[i], 2 * d[i] + 1, 1e-6);
  ag_tensor_release(x);
}

static void test_memory_categories(void **state) {
  (void)state;
  int64_t s[2] = {64, 64};
  ag_tensor *w = ag_randn(AG_CPU, AG_F32, 2, s, 0, 1, NULL);
  ag_tensor_set_requires_grad(w, true);
  ag_memory_stats m0, m1, m2;
  assert_int_equal(ag_memory_stats_get(AG_CPU, &m0), AG_OK);
  ag_scope_begin();
  ag_tensor *h = ag_tanh(ag_matmul(w, w));
  ag_tensor *loss = ag_sum(h, 0, NULL, false);
  assert_int_equal(ag_memory_stats_get(AG_CPU, &m1), AG_OK);
  assert_true(m1.category_bytes[AG_MEM_ACTIVATIONS].current > m0.category_bytes[AG_MEM_ACTIVATIONS].current);
  assert_int_equal(ag_backward(loss, NULL, false), AG_OK);
  ag_scope_end();
  assert_int_equal(ag_memory_stats_get(AG_CPU, &m2), AG_OK);
  assert_int_equal(m2.category_bytes[AG_MEM_ACTIVATIONS].current, m0.category_bytes[AG_MEM_ACTIVATIONS].current);
  assert_true(m2.category_bytes[AG_MEM_GRADIENTS].current >= 64 * 64 * 4);
  ag_tensor_release(w);
}

static void expect_version_error(ag_status st, unsigned got, unsigned want) {
  assert_int_equal(st, AG_ERR_STATE);
  const char *m = ag_last_error();
  if (!strstr(m, "has been modified by an in-place operation")) fail_msg("message: %s", m);
  char v[64];
  snprintf(v, sizeof v, "version %u, expected version %u", got, want);
  if (!strstr(m, v)) fail_msg("message '%s' lacks '%s'", m, v);
}

/* Version counters (docs/autograd.md, "In-place writes"): writing a tensor
 * saved for backward makes that backward fail instead of using the new
 * values; in-place writes to tensors that require grad are refused while
 * grad mode is on. */
static void test_inplace_versions(void **state) {
  (void)state;
  int64_t s = 4;
  double v[4] = {1, 2, 3, 4};
  ag_tensor *x = leaf(1, &s, v);
  ag_scope_begin();
  /* The case: y = sum(x*x) saves x; overwriting x with 5 used to
   * give gradients 10 instead of 2,4,6,8. */
  ag_tensor *y = ag_sum(ag_mul(x, x), 0, NULL, false);
  assert_int_equal(ag_fill_(x, 5), AG_ERR_INVALID); /* leaf, grad mode on */
  assert_non_null(strstr(ag_last_error(), "leaf tensor that requires grad"));
  ag_tensor *x2 = ag_from_host(AG_CPU, AG_F64, 1, &s, v);
  assert_int_equal(ag_copy_(x, x2), AG_ERR_INVALID);
  ag_tensor *xs = ag_slice(x, 0, 1, 3, 1); /* a view of the leaf has a graph */
  assert_int_equal(ag_fill_(xs, 0), AG_ERR_INVALID);
  assert_non_null(strstr(ag_last_error(), "not recorded by autograd"));
  double got[4];
  assert_int_equal(ag_to_host(x, got, sizeof got), AG_OK);
  assert_memory_equal(got, v, sizeof v); /* nothing written */
  /* Under no-grad the write is allowed, and the backward that needs the old
   * x says so. */
  ag_no_grad_begin();
  assert_int_equal(ag_fill_(x, 5), AG_OK);
  ag_grad_mode_end();
  ag_error_clear();
  expect_version_error(ag_backward(y, NULL, false), 1, 0);
  assert_null(ag_tensor_grad(x));
  /* A write through a detached alias (shares storage, requires no grad) is
   * seen too: h*h saves h. */
  ag_tensor *h = ag_mul_scalar(x, 2.0);
  ag_tensor *z = ag_sum(ag_mul(h, h), 0, NULL, false);
  ag_tensor *hd = ag_detach(h);
  assert_int_equal(ag_fill_(hd, 0), AG_OK); /* hd does not require grad */
  expect_version_error(ag_backward(z, NULL, false), 1, 0);
  /* In place on a non-leaf that requires grad, in grad mode: refused. */
  assert_int_equal(ag_fill_(h, 1), AG_ERR_INVALID);
  /* An op that saves its output (exp) sees writes to the output. */
  ag_tensor *e = ag_exp(x);
  ag_tensor *ze = ag_sum(e, 0, NULL, false);
  ag_no_grad_begin();
  assert_int_equal(ag_copy_(e, x2), AG_OK);
  assert_int_equal(ag_copy_(e, x2), AG_OK);
  ag_grad_mode_end();
  expect_version_error(ag_backward(ze, NULL, false), 2, 0);
  /* Writes to tensors nobody saved change nothing: x*3 saves nothing. */
  ag_tensor *w = ag_sum(ag_mul_scalar(x, 3.0), 0, NULL, false);
  ag_no_grad_begin();
  assert_int_equal(ag_fill_(x, 7), AG_OK);
  ag_grad_mode_end();
  ag_error_clear();
  assert_int_equal(ag_backward(w, NULL, false), AG_OK);
  double g3[4] = {3, 3, 3, 3};
  grad_equals(x, g3, 4);
  ag_tensor_zero_grad(x);
  /* A fresh graph after the write works and uses the new values. */
  ag_tensor *y2 = ag_sum(ag_mul(x, x), 0, NULL, false);
  assert_int_equal(ag_backward(y2, NULL, false), AG_OK);
  double g14[4] = {14, 14, 14, 14};
  grad_equals(x, g14, 4);
  ag_scope_end(); /* x2 and the graphs go with the scope */
  ag_tensor_release(x);
  assert_int_equal(ag_live_nodes(), 0);
}

/* ag_add_ and friends: one call writes self op other into self's storage
 * (through a view too), moves the version, and refuses, writing nothing,
 * what would lose a gradient, a cast torch forbids and a larger shape. */
static void test_inplace_arith(void **state) {
  (void)state;
  int64_t s = 4, s2[2] = {2, 4};
  double v[4] = {1, 2, 3, 4}, o[4] = {0.5, 0.5, 2, -1};
  ag_tensor *a = ag_from_host(AG_CPU, AG_F64, 1, &s, v);
  ag_tensor *b = ag_from_host(AG_CPU, AG_F64, 1, &s, o);
  double got[4];
  assert_int_equal(ag_add_(a, b), AG_OK);
  assert_int_equal(ag_mul_(a, b), AG_OK);
  assert_int_equal(ag_sub_(a, b), AG_OK);
  assert_int_equal(ag_div_(a, b), AG_OK);
  assert_int_equal(ag_to_host(a, got, sizeof got), AG_OK);
  for (int i = 0; i < 4; i++) {
    double want = (((v[i] + o[i]) * o[i]) - o[i]) / o[i];
    if (fabs(got[i] - want) > 1e-12) fail_msg("a[%d] = %g, want %g", i, got[i], want);
  }
  ag_tensor *view = ag_slice(a, 0, 1, 3, 1); /* through a view: a sees it */
  ag_tensor *one = ag_full(AG_CPU, AG_F64, 0, NULL, 1.0);
  assert_int_equal(ag_add_(view, one), AG_OK);
  double before[4];
  assert_int_equal(ag_to_host(a, before, sizeof before), AG_OK);
  assert_true(fabs(before[1] - got[1] - 1) < 1e-12 && before[0] == got[0] && before[3] == got[3]);
  /* refusals: nothing written */
  ag_tensor *w = leaf(1, &s, v); /* requires grad, grad mode on */
  assert_int_equal(ag_add_(a, w), AG_ERR_INVALID);
  assert_int_equal(ag_add_(w, b), AG_ERR_INVALID);
  ag_tensor *big = ag_full(AG_CPU, AG_F64, 2, s2, 1.0);
  assert_int_equal(ag_add_(a, big), AG_ERR_SHAPE);
  int64_t iv[4] = {1, 2, 3, 4};
  ag_tensor *ai = ag_from_host(AG_CPU, AG_I64, 1, &s, iv);
  assert_int_equal(ag_add_(ai, b), AG_ERR_DTYPE);
  assert_int_equal(ag_to_host(a, got, sizeof got), AG_OK);
  assert_memory_equal(got, before, sizeof got);
  int64_t igot[4];
  assert_int_equal(ag_to_host(ai, igot, sizeof igot), AG_OK);
  assert_memory_equal(igot, iv, sizeof iv);
  /* a saved tensor written in place: its backward says so */
  ag_tensor *y = ag_sum(ag_mul(w, a), 0, NULL, false); /* saves a */
  assert_int_equal(ag_mul_(a, b), AG_OK);
  expect_version_error(ag_backward(y, NULL, false), 6, 5); /* five writes before, one after */
  ag_error_clear();
  /* under no-grad, a leaf that requires grad may be written */
  ag_no_grad_begin();
  assert_int_equal(ag_add_(w, b), AG_OK);
  ag_grad_mode_end();
  ag_tensor *ts[] = {a, b, view, one, w, big, ai, y};
  for (size_t i = 0; i < sizeof ts / sizeof *ts; i++) ag_tensor_release(ts[i]);
  ag_error_clear();
}

/* An optimizer step writes its parameters in place: a retained graph that
 * saved them cannot be backwarded again afterwards. Steps themselves run
 * (they write under no-grad semantics on leaves). */
static void test_optimizer_step_bumps_version(void **state) {
  (void)state;
  int64_t s = 2;
  double v[2] = {1, 2};
  float vf[2] = {1, 2};
  ag_param_list pl;
  memset(&pl, 0, sizeof pl);
  ag_sgd_options o = {.lr = 0.5};
  /* The fused SGD kernel reads f32: an f64 parameter is refused rather than
   * updated as if it held floats. */
  ag_tensor *p64 = leaf(1, &s, v);
  assert_int_equal(ag_params_add(&pl, "p", p64), AG_OK);
  assert_null(ag_sgd_create(&pl, &o));
  assert_int_equal(ag_last_status(), AG_ERR_UNSUPPORTED);
  ag_params_free(&pl);
  ag_tensor_release(p64);
  memset(&pl, 0, sizeof pl);
  ag_error_clear();
  ag_tensor *p = ag_from_host(AG_CPU, AG_F32, 1, &s, vf);
  assert_int_equal(ag_tensor_set_requires_grad(p, true), AG_OK);
  assert_int_equal(ag_params_add(&pl, "p", p), AG_OK);
  ag_optimizer *opt = ag_sgd_create(&pl, &o);
  assert_non_null(opt);
  ag_scope_begin();
  ag_tensor *y = ag_sum(ag_mul(p, p), 0, NULL, false);
  assert_int_equal(ag_backward(y, NULL, true), AG_OK);
  assert_int_equal(ag_optimizer_step(opt), AG_OK); /* p = p - 0.5 * 2p = 0 */
  float got[2];
  assert_int_equal(ag_to_host(p, got, sizeof got), AG_OK);
  if (got[0] != 0 || got[1] != 0) fail_msg("after the step p = %g, %g", got[0], got[1]);
  expect_version_error(ag_backward(y, NULL, false), 1, 0);
  ag_error_clear();
  ag_optimizer_zero_grad(opt);
  ag_tensor *y2 = ag_sum(ag_mul(p, p), 0, NULL, false);
  assert_int_equal(ag_backward(y2, NULL, false), AG_OK);
  assert_int_equal(ag_optimizer_step(opt), AG_OK);
  ag_scope_end();
  ag_optimizer_free(opt);
  ag_params_free(&pl);
  ag_tensor_release(p);
}

/* A step that returns early on an error, past the close of its region. */
static ag_status early_return_step(int mode) {
  if (mode == 0) ag_no_grad_begin();
  if (mode == 1) ag_inference_mode_begin();
  if (mode == 2) ag_enable_grad_begin();
  if (mode == 3 && ag_autocast_begin(AG_F16) != AG_OK) return ag_last_status();
  return AG_ERR_INVALID; /* the region is not closed */
}

static void test_modes_close_with_scope(void **state) {
  (void)state;
  static const char *const names[4] = {"no-grad", "inference", "enable-grad", "autocast(f16)"};
  for (int mode = 0; mode < 4; mode++) {
    ag_error_clear();
    ag_no_grad_begin(); /* opened outside the scopes: left alone */
    ag_scope_begin();
    ag_scope_begin();
    assert_int_equal(early_return_step(mode), AG_ERR_INVALID);
    assert_true(mode != 1 || ag_inference_mode());
    assert_true(mode != 2 || ag_grad_enabled());
    assert_true(mode != 3 || ag_autocast_enabled());
    assert_int_equal(ag_scope_end(), AG_ERR_STATE);
    const char *msg = ag_last_error();
    if (!strstr(msg, names[mode]) || !strstr(msg, "called from") || !strstr(msg, "ag_scope_end"))
      fail_msg("mode %s: %s", names[mode], msg);
    /* the state is restored: only the outer no-grad region remains */
    assert_false(ag_autocast_enabled());
    assert_false(ag_inference_mode());
    assert_false(ag_grad_enabled());
    ag_error_clear();
    assert_int_equal(ag_scope_end(), AG_OK); /* nothing left inside the outer scope */
    assert_int_equal(ag_grad_mode_end(), AG_OK);
    assert_true(ag_grad_enabled());
    assert_int_equal(ag_grad_mode_end(), AG_ERR_STATE); /* the scopes closed nothing else */
  }
  /* several regions: all closed, the outermost named */
  ag_error_clear();
  ag_scope_begin();
  ag_inference_mode_begin();
  ag_no_grad_begin();
  assert_int_equal(ag_scope_end(), AG_ERR_STATE);
  assert_non_null(strstr(ag_last_error(), "2 mode regions"));
  assert_non_null(strstr(ag_last_error(), "inference"));
  assert_false(ag_inference_mode());
  assert_true(ag_grad_enabled());
  /* balanced regions inside a scope are no error */
  ag_error_clear();
  ag_scope_begin();
  ag_no_grad_begin();
  assert_int_equal(ag_autocast_begin(AG_BF16), AG_OK);
  assert_int_equal(ag_autocast_end(), AG_OK);
  assert_int_equal(ag_grad_mode_end(), AG_OK);
  assert_int_equal(ag_scope_end(), AG_OK);
  assert_int_equal(ag_last_status(), AG_OK);
}

/* PyTorch's K-dimensional cross-entropy: logits [N, C, d], targets [N, d]. */
static void test_cross_entropy_kdim(void **state) {
  (void)state;
  ag_scope_begin();
  double l[12];
  for (int i = 0; i < 12; i++) l[i] = sin(1.3 * i) * 2.0;
  int64_t ls[3] = {2, 3, 2}, ts[2] = {2, 2};
  int64_t t[4] = {2, -1, 0, 1};
  ag_tensor *x = ag_from_host(AG_CPU, AG_F64, 3, ls, l);
  ag_tensor *tg = ag_from_host(AG_CPU, AG_I64, 2, ts, t);
  double want[4], sum = 0;
  int cnt = 0;
  for (int n = 0; n < 2; n++)
    for (int d = 0; d < 2; d++) {
      int k = t[n * 2 + d];
      if (k < 0) {
        want[n * 2 + d] = 0;
        continue;
      }
      double se = 0;
      for (int c = 0; c < 3; c++) se += exp(l[n * 6 + c * 2 + d]);
      want[n * 2 + d] = log(se) - l[n * 6 + k * 2 + d];
      sum += want[n * 2 + d];
      cnt++;
    }
  ag_tensor *none = ag_cross_entropy(x, tg, AG_REDUCTION_NONE, -1);
  assert_non_null(none);
  assert_int_equal(ag_tensor_ndim(none), 2);
  assert_int_equal(ag_tensor_shape(none)[0], 2);
  assert_int_equal(ag_tensor_shape(none)[1], 2);
  double got[4];
  assert_int_equal(ag_to_host(none, got, sizeof got), AG_OK);
  for (int i = 0; i < 4; i++)
    if (fabs(got[i] - want[i]) > 1e-12) fail_msg("none[%d] = %.17g, want %.17g", i, got[i], want[i]);
  double m = ag_item(ag_cross_entropy(x, tg, AG_REDUCTION_MEAN, -1));
  double s = ag_item(ag_cross_entropy(x, tg, AG_REDUCTION_SUM, -1));
  assert_true(fabs(m - sum / cnt) < 1e-12);
  assert_true(fabs(s - sum) < 1e-12);
  /* targets that do not match the spatial dims are a shape error */
  int64_t bad[2] = {2, 3};
  assert_null(ag_cross_entropy(x, ag_zeros(AG_CPU, AG_I64, 2, bad), AG_REDUCTION_MEAN, -1));
  assert_int_equal(ag_last_status(), AG_ERR_SHAPE);
  ag_error_clear();
  /* a reduction that is none of the three is refused by every loss */
  assert_null(ag_cross_entropy(x, tg, (ag_reduction)7, -1));
  assert_int_equal(ag_last_status(), AG_ERR_INVALID);
  assert_null(ag_mse_loss(x, x, (ag_reduction)7));
  assert_int_equal(ag_last_status(), AG_ERR_INVALID);
  ag_error_clear();
  ag_scope_end();
}

/* Under autocast a linear layer is one half-precision op: weight and bias
 * are cast, and the bias add stays in half (no promotion back to f32). */
static void test_linear_autocast_dtype(void **state) {
  (void)state;
  ag_generator *g = ag_generator_create(5);
  ag_linear m;
  assert_int_equal(ag_linear_init(&m, AG_CPU, AG_F32, 3, 4, true, g), AG_OK);
  int64_t xs[2] = {2, 3};
  ag_scope_begin();
  ag_tensor *x = ag_ones(AG_CPU, AG_F32, 2, xs);
  ag_tensor *ref = ag_linear_forward(&m, x);
  assert_int_equal(ag_tensor_dtype(ref), AG_F32);
  const ag_dtype lo[2] = {AG_F16, AG_BF16};
  for (int k = 0; k < 2; k++) {
    assert_int_equal(ag_autocast_begin(lo[k]), AG_OK);
    ag_tensor *y = ag_linear_forward(&m, x);
    assert_int_equal(ag_autocast_end(), AG_OK);
    assert_non_null(y);
    assert_int_equal(ag_tensor_dtype(y), lo[k]);
    float a[8], b[8];
    assert_int_equal(ag_to_host(ag_cast(y, AG_F32), a, sizeof a), AG_OK);
    assert_int_equal(ag_to_host(ref, b, sizeof b), AG_OK);
    for (int i = 0; i < 8; i++) assert_true(fabsf(a[i] - b[i]) <= 0.02f * (1 + fabsf(b[i])));
  }
  assert_int_equal(ag_autocast_begin(AG_F32), AG_OK); /* an f32 island */
  assert_int_equal(ag_tensor_dtype(ag_linear_forward(&m, x)), AG_F32);
  assert_int_equal(ag_autocast_end(), AG_OK);
  assert_int_equal(ag_scope_end(), AG_OK);
  ag_linear_free(&m);
  ag_generator_free(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_accumulate_and_retain),   cmocka_unit_test(test_misuse_errors),
      cmocka_unit_test(test_modes_and_detach),        cmocka_unit_test(test_broadcast_views_mixed_dtypes),
      cmocka_unit_test(test_memory_categories),        cmocka_unit_test(test_reduce_size1_dim),
      cmocka_unit_test(test_inplace_versions),         cmocka_unit_test(test_optimizer_step_bumps_version),
      cmocka_unit_test(test_modes_close_with_scope),   cmocka_unit_test(test_cross_entropy_kdim),
      cmocka_unit_test(test_linear_autocast_dtype),   cmocka_unit_test(test_inplace_arith),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
