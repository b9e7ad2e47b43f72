/* ag_autograd_grad: gradients of several outputs with respect to leaves and
 * op outputs, nothing accumulated; gradient pre-hooks that replace the
 * gradient (leaves: once per pass with the pass's sum; non-leaves: the total
 * before the op passes it on); custom functions; the grad_fn accessors;
 * errors and leaks. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "anygrad/anygrad.h"

static ag_tensor *vec(int n, const double *v, bool grad) {
  int64_t s = n;
  ag_tensor *t = ag_from_host(AG_CPU, AG_F64, 1, &s, v);
  assert_non_null(t);
  if (grad) assert_int_equal(ag_tensor_set_requires_grad(t, true), AG_OK);
  return t;
}

static void read(ag_tensor *t, double *out, int n) {
  assert_non_null(t);
  assert_int_equal(ag_tensor_numel(t), n);
  ag_tensor *c = ag_cast(t, AG_F64);
  assert_int_equal(ag_to_host(c, out, (size_t)n * sizeof(double)), AG_OK);
  ag_tensor_release(c);
}

static void expect(ag_tensor *t, int n, const double *want) {
  double got[16];
  read(t, got, n);
  for (int i = 0; i < n; i++) {
    if (fabs(got[i] - want[i]) >= 1e-12) fprintf(stderr, "element %d: got %g, want %g\n", i, got[i], want[i]);
    assert_true(fabs(got[i] - want[i]) < 1e-12);
  }
}

/* y = sum(x * x * w), h = x * w: d/dx = 2 x w, d/dw = x^2, d/dh of
 * sum(h * x) = x; .grad stays empty. */
static void test_grad_no_accumulation(void **state) {
  (void)state;
  int64_t live0 = ag_live_tensors(), nodes0 = ag_live_nodes();
  ag_tensor *x = vec(3, (double[]){1, 2, 3}, true), *w = vec(3, (double[]){4, 5, 6}, true);
  ag_scope_begin();
  ag_tensor *h = ag_mul(x, w);
  ag_tensor *y = ag_sum(ag_mul(h, x), 0, NULL, false);
  ag_tensor *g[3] = {0};
  ag_tensor *in[3] = {x, w, h};
  assert_int_equal(ag_autograd_grad(1, &y, NULL, 3, in, true, false, g), AG_OK);
  expect(g[0], 3, (double[]){8, 20, 36});
  expect(g[1], 3, (double[]){1, 4, 9});
  expect(g[2], 3, (double[]){1, 2, 3});
  assert_null(ag_tensor_grad(x));
  assert_null(ag_tensor_grad(w));
  for (int i = 0; i < 3; i++) ag_tensor_release(g[i]);
  /* retained: a second call, then ag_backward, both work; grad_outputs scale */
  ag_tensor *go = vec(1, (double[]){2}, false);
  ag_tensor *y1 = ag_reshape(y, 1, (int64_t[]){1});
  assert_int_equal(ag_autograd_grad(1, &y1, &go, 1, in, true, false, g), AG_OK);
  expect(g[0], 3, (double[]){16, 40, 72});
  ag_tensor_release(g[0]);
  assert_int_equal(ag_backward(y, NULL, false), AG_OK);
  expect(ag_tensor_grad(x), 3, (double[]){8, 20, 36});
  /* freed graph */
  assert_int_equal(ag_autograd_grad(1, &y, NULL, 1, in, false, false, g), AG_ERR_STATE);
  assert_null(g[0]);
  ag_scope_end();
  ag_tensor_release(x);
  ag_tensor_release(w);
  assert_int_equal(ag_live_tensors(), live0);
  assert_int_equal(ag_live_nodes(), nodes0);
}

/* Two outputs, one upstream of the other; a leaf output; unused inputs. */
static void test_grad_several_outputs(void **state) {
  (void)state;
  ag_tensor *x = vec(2, (double[]){1, 2}, true), *z = vec(2, (double[]){7, 7}, true);
  ag_scope_begin();
  ag_tensor *a = ag_mul(x, x);                       /* x^2 */
  ag_tensor *b = ag_mul(a, x);                       /* x^3 */
  ag_tensor *outs[3] = {a, b, x};
  ag_tensor *gos[3] = {vec(2, (double[]){1, 1}, false), vec(2, (double[]){1, 10}, false),
                       vec(2, (double[]){100, 100}, false)};
  ag_tensor *g[2] = {0};
  ag_tensor *in[2] = {x, z};
  assert_int_equal(ag_autograd_grad(3, outs, gos, 2, in, true, false, g), AG_ERR_STATE); /* z unused */
  assert_null(g[0]);
  assert_int_equal(ag_autograd_grad(3, outs, gos, 2, in, true, true, g), AG_OK);
  /* 2x + 3x^2 * go_b + go_x = [2 + 3 + 100, 4 + 120 + 100] */
  expect(g[0], 2, (double[]){105, 224});
  assert_null(g[1]);
  ag_tensor_release(g[0]);
  /* errors: a non-scalar output without its gradient, an input without grad,
   * an output without grad; nothing set */
  ag_tensor *c = vec(2, (double[]){1, 1}, false);
  assert_int_equal(ag_autograd_grad(1, &a, NULL, 1, in, true, false, g), AG_ERR_SHAPE);
  assert_int_equal(ag_autograd_grad(1, &a, gos, 1, &c, true, false, g), AG_ERR_STATE);
  assert_int_equal(ag_autograd_grad(1, &c, gos, 1, in, true, false, g), AG_ERR_STATE);
  assert_int_equal(ag_autograd_grad(1, &a, gos, 0, in, true, false, g), AG_ERR_INVALID);
  assert_null(g[0]);
  ag_error_clear();
  ag_scope_end();
  ag_tensor_release(x);
  ag_tensor_release(z);
}

typedef struct scale_ctx {
  double k;
  int calls;
} scale_ctx;

static ag_status scale_hook(ag_tensor *grad, void *user, ag_tensor **out) {
  scale_ctx *c = user;
  c->calls++;
  *out = c->k == 1.0 ? NULL : ag_mul_scalar(grad, c->k);
  return *out || c->k == 1.0 ? AG_OK : ag_last_status();
}

static int n_freed, n_bad_freed;
static void count_free(void *user) {
  (void)user;
  n_freed++;
}
static void count_bad(void *user) { (*(int *)user)++; }

static ag_status bad_shape_hook(ag_tensor *grad, void *user, ag_tensor **out) {
  (void)grad;
  (void)user;
  *out = ag_zeros(AG_CPU, AG_F64, 1, (int64_t[]){5});
  return AG_OK;
}

/* A leaf used twice: its pre-hook sees the pass's sum once; a non-leaf's
 * pre-hook changes what flows on; hooks run outside any scope. */
static void test_pre_hooks(void **state) {
  (void)state;
  int64_t live0 = ag_live_tensors();
  ag_tensor *p = vec(1, (double[]){3}, true);
  scale_ctx cp = {10.0, 0}, ch = {2.0, 0};
  uint64_t idp, idh;
  assert_int_equal(ag_tensor_add_grad_pre_hook(p, scale_hook, &cp, count_free, &idp), AG_OK);
  ag_scope_begin();
  ag_tensor *h = ag_mul(p, p);                              /* p^2 */
  assert_int_equal(ag_tensor_add_grad_pre_hook(h, scale_hook, &ch, count_free, &idh), AG_OK);
  assert_int_equal(ag_tensor_grad_hook_count(h), 1);
  ag_tensor *out = ag_sum(ag_mul(h, p), 0, NULL, false);    /* p^3: d/dh = p, d/dp (direct) = h */
  assert_int_equal(ag_backward(out, NULL, true), AG_OK);
  /* d/dp = h + 2p * (2 * p) = 9 + 36 = 45, times 10 */
  assert_int_equal(cp.calls, 1);
  assert_int_equal(ch.calls, 1);
  expect(ag_tensor_grad(p), 1, (double[]){450});
  /* autograd_grad, as torch 1.13: the non-leaf's hook changes what flows
   * on, the leaf's does not run, h's own gradient is taken before its hook;
   * nothing accumulated */
  ag_tensor *g = NULL;
  assert_int_equal(ag_autograd_grad(1, &out, NULL, 1, &p, true, false, &g), AG_OK);
  expect(g, 1, (double[]){45});
  ag_tensor_release(g);
  assert_int_equal(ag_autograd_grad(1, &out, NULL, 1, &h, true, false, &g), AG_OK);
  expect(g, 1, (double[]){3});
  ag_tensor_release(g);
  assert_int_equal(cp.calls, 1);
  assert_int_equal(ch.calls, 3);
  expect(ag_tensor_grad(p), 1, (double[]){450});
  /* removed: the plain gradient */
  assert_int_equal(ag_tensor_remove_grad_hook(h, idh), AG_OK);
  assert_int_equal(ag_tensor_remove_grad_hook(p, idp), AG_OK);
  assert_int_equal(ag_tensor_remove_grad_hook(p, idp), AG_ERR_INVALID);
  assert_int_equal(n_freed, 2); /* removed: each freed once */
  ag_tensor_zero_grad(p);
  assert_int_equal(ag_backward(out, NULL, true), AG_OK);
  expect(ag_tensor_grad(p), 1, (double[]){27});
  /* a hook that changes the shape stops the backward */
  assert_int_equal(ag_tensor_add_grad_pre_hook(h, bad_shape_hook, &n_bad_freed, count_bad, &idh), AG_OK);
  assert_int_equal(ag_backward(out, NULL, true), AG_ERR_SHAPE);
  ag_error_clear();
  assert_int_equal(n_bad_freed, 0);
  ag_scope_end(); /* h and its node go, with the hook */
  assert_int_equal(n_bad_freed, 1);
  /* errors */
  ag_tensor *c = vec(1, (double[]){1}, false);
  assert_int_equal(ag_tensor_add_grad_pre_hook(c, scale_hook, &cp, count_free, &idp), AG_ERR_STATE);
  assert_int_equal(ag_tensor_add_grad_pre_hook(NULL, scale_hook, &cp, count_free, &idp), AG_ERR_INVALID);
  ag_error_clear();
  assert_int_equal(n_freed, 2);
  ag_tensor_release(c);
  ag_tensor_release(p);
  assert_int_equal(ag_live_tensors(), live0);
}

/* A custom square: forward computed without a graph, backward 2 x g. */
typedef struct sq_ctx {
  ag_tensor *x; /* saved input (owned) */
  int *freed;
  int calls;
} sq_ctx;

static ag_status sq_backward(void *user, ag_tensor *g, int n, ag_tensor **grads) {
  sq_ctx *c = user;
  assert_int_equal(n, 1);
  assert_false(ag_grad_enabled());
  c->calls++;
  ag_tensor *t = ag_mul_scalar(c->x, 2.0);
  grads[0] = ag_mul(t, g);
  ag_tensor_release(t);
  return grads[0] ? AG_OK : ag_last_status();
}

static void sq_free(void *user) {
  sq_ctx *c = user;
  ag_tensor_release(c->x);
  (*c->freed)++;
}

static void test_custom(void **state) {
  (void)state;
  int64_t live0 = ag_live_tensors(), nodes0 = ag_live_nodes();
  int freed = 0;
  ag_tensor *x = vec(3, (double[]){1, 2, 3}, true);
  sq_ctx c = {ag_detach(x), &freed, 0};
  ag_scope_begin();
  ag_no_grad_begin();
  ag_tensor *y = ag_mul(x, x);
  ag_grad_mode_end();
  assert_int_equal(ag_custom_record(y, "SquareBackward", 1, &x, sq_backward, sq_free, &c), AG_OK);
  assert_true(ag_tensor_requires_grad(y));
  ag_grad_node *n = ag_tensor_grad_fn(y);
  assert_non_null(n);
  assert_string_equal(ag_grad_node_name(n), "SquareBackward");
  ag_tensor *leaf = NULL;
  assert_int_equal(ag_grad_node_input_count(n), 1);
  assert_null(ag_grad_node_next(n, 0, &leaf));
  assert_ptr_equal(leaf, x);
  ag_tensor *out = ag_sum(ag_mul_scalar(y, 3.0), 0, NULL, false);
  assert_string_equal(ag_grad_node_name(ag_tensor_grad_fn(out)), "sum");
  ag_grad_node *m = ag_grad_node_next(ag_tensor_grad_fn(out), 0, &leaf);
  assert_non_null(m);
  assert_null(leaf);
  assert_int_equal(ag_backward(out, NULL, false), AG_OK);
  expect(ag_tensor_grad(x), 3, (double[]){6, 12, 18});
  assert_int_equal(c.calls, 1);
  assert_int_equal(freed, 1); /* the graph was freed with the backward */
  /* nothing recorded under no-grad: freed at once */
  int freed2 = 0;
  sq_ctx c2 = {ag_detach(x), &freed2, 0};
  ag_no_grad_begin();
  ag_tensor *y2 = ag_mul(x, x);
  assert_int_equal(ag_custom_record(y2, "Sq", 1, &x, sq_backward, sq_free, &c2), AG_OK);
  ag_grad_mode_end();
  assert_int_equal(freed2, 1);
  assert_null(ag_tensor_grad_fn(y2));
  /* a graph never backwarded frees with its tensor; retain/release */
  int freed3 = 0;
  sq_ctx c3 = {ag_detach(x), &freed3, 0};
  ag_no_grad_begin();
  ag_tensor *y3 = ag_mul(x, x);
  ag_grad_mode_end();
  assert_int_equal(ag_custom_record(y3, NULL, 1, &x, sq_backward, sq_free, &c3), AG_OK);
  ag_grad_node *keep = ag_grad_node_retain(ag_tensor_grad_fn(y3));
  assert_string_equal(ag_grad_node_name(keep), "custom");
  ag_tensor_release(y3);
  assert_int_equal(freed3, 0);
  ag_grad_node_release(keep);
  assert_int_equal(freed3, 1);
  /* errors: an output with a graph, an integer output */
  int freed4 = 0;
  sq_ctx c4 = {ag_detach(x), &freed4, 0};
  ag_tensor *yg = ag_mul(x, x);
  assert_int_equal(ag_custom_record(yg, "Sq", 1, &x, sq_backward, sq_free, &c4), AG_ERR_STATE);
  assert_int_equal(freed4, 1);
  ag_error_clear();
  ag_scope_end();
  ag_tensor_release(x);
  assert_null(ag_tensor_grad_fn(NULL));
  assert_int_equal(ag_live_tensors(), live0);
  assert_int_equal(ag_live_nodes(), nodes0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_grad_no_accumulation),
      cmocka_unit_test(test_grad_several_outputs),
      cmocka_unit_test(test_pre_hooks),
      cmocka_unit_test(test_custom),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
