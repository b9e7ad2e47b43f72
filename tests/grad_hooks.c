/* Gradient-ready hooks: one call per backward pass per leaf, after the
 * leaf's last contribution is accumulated, roughly in reverse order of use,
 * never for tensors without grad; removal, errors, misuse. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "anygrad/anygrad.h"

#define MAXREC 32

/* What the hooks saw, in firing order. */
typedef struct rec {
  int n;
  ag_tensor *who[MAXREC];
  double grad0[MAXREC]; /* first element of the gradient when the hook ran */
} rec;

typedef struct hook_ctx {
  rec *r;
  ag_status ret;
} hook_ctx;

static ag_status record_hook(ag_tensor *t, void *user) {
  hook_ctx *c = user;
  rec *r = c->r;
  if (r->n < MAXREC) {
    r->who[r->n] = t;
    ag_tensor *g = ag_tensor_grad(t);
    double v = NAN;
    if (g) {
      ag_tensor *g64 = ag_cast(g, AG_F64);
      ag_tensor *flat = ag_reshape(g64, 1, (int64_t[]){ag_tensor_numel(g64)});
      double buf[64];
      if (flat && ag_tensor_numel(flat) <= 64 && ag_to_host(flat, buf, (size_t)ag_tensor_numel(flat) * 8) == AG_OK)
        v = buf[0];
      ag_tensor_release(flat);
      ag_tensor_release(g64);
    }
    r->grad0[r->n] = v;
    r->n++;
  }
  if (c->ret != AG_OK) return ag_error_set(c->ret, "record_hook: refused on purpose");
  return AG_OK;
}

static ag_tensor *leaf(double v) {
  int64_t s = 1;
  ag_tensor *t = ag_from_host(AG_CPU, AG_F64, 1, &s, &v);
  assert_non_null(t);
  assert_int_equal(ag_tensor_set_requires_grad(t, true), AG_OK);
  return t;
}

static double scalar(ag_tensor *t) {
  double v = NAN;
  assert_int_equal(ag_to_host(t, &v, sizeof v), AG_OK);
  return v;
}

/* p is used twice, at two depths: out = p * (p * x). The hook must see the
 * complete gradient 2*p*x, not the first contribution p*x. */
static void test_fires_after_last_contribution(void **state) {
  (void)state;
  ag_tensor *p = leaf(3.0), *q = leaf(5.0);
  rec r = {0};
  hook_ctx c = {&r, AG_OK};
  uint64_t id_p, id_q;
  assert_int_equal(ag_tensor_add_grad_hook(p, record_hook, &c, &id_p), AG_OK);
  assert_int_equal(ag_tensor_add_grad_hook(q, record_hook, &c, &id_q), AG_OK);
  assert_int_equal(ag_tensor_grad_hook_count(p), 1);
  ag_scope_begin();
  int64_t s = 1;
  double xv = 2.0;
  ag_tensor *x = ag_from_host(AG_CPU, AG_F64, 1, &s, &xv); /* no grad: never hooked */
  ag_tensor *h = ag_mul(q, ag_mul(p, x));                 /* mul0(p, x), mul1(q, .) */
  ag_tensor *out = ag_sum(ag_mul(h, p), 0, NULL, false);   /* mul2(h, p): out = q p^2 x */
  assert_int_equal(ag_backward(out, NULL, true), AG_OK);
  /* the engine finishes q (one use) when mul1 is done, p only after mul0,
   * its deepest use: q first, then p with both contributions */
  assert_int_equal(r.n, 2);
  int ip = 1, iq = 0;
  assert_ptr_equal(r.who[iq], q);
  assert_ptr_equal(r.who[ip], p);
  assert_true(fabs(r.grad0[ip] - 2 * 5.0 * 3.0 * 2.0) < 1e-12); /* d/dp = 2 q p x = 60 */
  assert_true(fabs(r.grad0[iq] - 3.0 * 3.0 * 2.0) < 1e-12);     /* d/dq = p^2 x = 18 */
  assert_true(fabs(scalar(ag_tensor_grad(p)) - 60.0) < 1e-12);
  /* once per pass: a second backward calls each hook once more, with the
   * accumulated gradient */
  assert_int_equal(ag_backward(out, NULL, false), AG_OK);
  assert_int_equal(r.n, 4);
  for (int i = 2; i < 4; i++) {
    if (r.who[i] == p) assert_true(fabs(r.grad0[i] - 120.0) < 1e-12);
    else assert_true(fabs(r.grad0[i] - 36.0) < 1e-12);
  }
  ag_scope_end();
  ag_tensor_release(p);
  ag_tensor_release(q);
}

/* An MLP: the last layer's parameters finish before the first layer's. */
static void test_reverse_order_of_use(void **state) {
  (void)state;
  ag_generator *g = ag_generator_create(7);
  ag_mlp m;
  int64_t sizes[4] = {4, 8, 8, 3};
  assert_int_equal(ag_mlp_init(&m, AG_CPU, AG_F32, 4, sizes, AG_ACT_RELU, g), AG_OK);
  rec r = {0};
  hook_ctx c = {&r, AG_OK};
  uint64_t ids[16];
  assert_int_equal(m.params.count, 6);
  for (int i = 0; i < m.params.count; i++)
    assert_int_equal(ag_tensor_add_grad_hook(m.params.tensors[i], record_hook, &c, &ids[i]), AG_OK);
  ag_scope_begin();
  int64_t xs[2] = {5, 4};
  ag_tensor *x = ag_randn(AG_CPU, AG_F32, 2, xs, 0.0, 1.0, g);
  ag_tensor *y = ag_mlp_forward(&m, x);
  ag_tensor *loss = ag_mean(ag_mul(y, y), 0, NULL, false);
  assert_int_equal(ag_backward(loss, NULL, false), AG_OK);
  ag_scope_end();
  assert_int_equal(r.n, 6);
  int pos[6];
  for (int i = 0; i < 6; i++) {
    pos[i] = -1;
    for (int k = 0; k < r.n; k++)
      if (r.who[k] == m.params.tensors[i]) {
        assert_int_equal(pos[i], -1); /* once */
        pos[i] = k;
      }
    assert_int_not_equal(pos[i], -1);
  }
  /* params: 0.weight 0.bias 2.weight 2.bias 4.weight 4.bias */
  assert_true(pos[4] < pos[2] && pos[2] < pos[0]);
  assert_true(pos[5] < pos[3] && pos[3] < pos[1]);
  /* the hooks saw complete gradients: what they read equals the final ones */
  for (int i = 0; i < 6; i++) {
    ag_tensor *gg = ag_tensor_grad(m.params.tensors[i]);
    float v[64];
    assert_int_equal(ag_to_host(gg, v, (size_t)ag_tensor_numel(gg) * 4), AG_OK);
    assert_true(fabs((double)v[0] - r.grad0[pos[i]]) < 1e-7);
  }
  for (int i = 0; i < m.params.count; i++)
    assert_int_equal(ag_tensor_remove_grad_hook(m.params.tensors[i], ids[i]), AG_OK);
  ag_mlp_free(&m);
  ag_generator_free(g);
}

/* Not for tensors without grad, nor for leaves the pass does not reach;
 * removal; a hook on the backward's own (leaf) output. */
static void test_no_grad_unreached_removed(void **state) {
  (void)state;
  rec r = {0};
  hook_ctx c = {&r, AG_OK};
  uint64_t id;
  int64_t s = 1;
  double v = 1.0;
  ag_tensor *plain = ag_from_host(AG_CPU, AG_F64, 1, &s, &v);
  assert_int_equal(ag_tensor_add_grad_hook(plain, record_hook, &c, &id), AG_ERR_STATE);
  assert_non_null(strstr(ag_last_error(), "does not require grad"));
  assert_int_equal(ag_tensor_grad_hook_count(plain), 0);
  ag_tensor *p = leaf(2.0), *unused = leaf(4.0), *removed = leaf(6.0);
  uint64_t id_p, id_u, id_r;
  assert_int_equal(ag_tensor_add_grad_hook(p, record_hook, &c, &id_p), AG_OK);
  assert_int_equal(ag_tensor_add_grad_hook(unused, record_hook, &c, &id_u), AG_OK);
  assert_int_equal(ag_tensor_add_grad_hook(removed, record_hook, &c, &id_r), AG_OK);
  assert_int_equal(ag_tensor_remove_grad_hook(removed, id_r), AG_OK);
  assert_int_equal(ag_tensor_remove_grad_hook(removed, id_r), AG_ERR_INVALID);
  assert_int_equal(ag_tensor_remove_grad_hook(removed, 12345), AG_ERR_INVALID);
  ag_scope_begin();
  ag_tensor *nonleaf = ag_mul(p, removed);
  assert_int_equal(ag_tensor_add_grad_hook(nonleaf, record_hook, &c, &id), AG_ERR_STATE);
  ag_tensor *out = ag_sum(ag_mul(nonleaf, plain), 0, NULL, false);
  assert_int_equal(ag_backward(out, NULL, false), AG_OK);
  assert_int_equal(r.n, 1);
  assert_ptr_equal(r.who[0], p);
  assert_non_null(ag_tensor_grad(removed)); /* it got a gradient, just no call */
  /* backward from a leaf: its hook runs once */
  assert_int_equal(ag_backward(unused, NULL, false), AG_OK);
  assert_int_equal(r.n, 2);
  assert_ptr_equal(r.who[1], unused);
  ag_scope_end();
  ag_tensor_release(plain);
  ag_tensor_release(p);
  ag_tensor_release(unused);
  ag_tensor_release(removed); /* hooks go with the tensor (ASan sees leaks) */
}

/* A failing hook stops the backward with its status; the counts it leaves
 * behind are reset, so the next pass calls hooks normally. */
static void test_hook_error(void **state) {
  (void)state;
  rec r = {0};
  hook_ctx bad = {&r, AG_ERR_STATE};
  ag_tensor *p = leaf(2.0), *q = leaf(3.0);
  uint64_t id_p, id_q;
  assert_int_equal(ag_tensor_add_grad_hook(p, record_hook, &bad, &id_p), AG_OK);
  assert_int_equal(ag_tensor_add_grad_hook(q, record_hook, &bad, &id_q), AG_OK);
  ag_scope_begin();
  ag_tensor *out = ag_sum(ag_mul(ag_mul(p, q), p), 0, NULL, false);
  assert_int_equal(ag_backward(out, NULL, true), AG_ERR_STATE);
  assert_non_null(strstr(ag_last_error(), "refused on purpose"));
  int first = r.n;
  assert_int_equal(first, 1);
  bad.ret = AG_OK;
  ag_tensor_zero_grad(p);
  ag_tensor_zero_grad(q);
  assert_int_equal(ag_backward(out, NULL, false), AG_OK);
  assert_int_equal(r.n, first + 2);
  ag_scope_end();
  ag_tensor_release(p);
  ag_tensor_release(q);
}

static ag_status remove_self_hook(ag_tensor *t, void *user) {
  uint64_t *id = user;
  ag_status st = ag_tensor_remove_grad_hook(t, *id);
  return st == AG_ERR_STATE ? AG_OK : ag_error_set(AG_ERR_INTERNAL, "remove inside hook: status %d", (int)st);
}

static void test_no_changes_inside_hook(void **state) {
  (void)state;
  ag_tensor *p = leaf(2.0);
  uint64_t id;
  assert_int_equal(ag_tensor_add_grad_hook(p, remove_self_hook, &id, &id), AG_OK);
  assert_int_equal(ag_tensor_add_grad_hook(NULL, remove_self_hook, &id, &id), AG_ERR_INVALID);
  assert_int_equal(ag_tensor_add_grad_hook(p, NULL, &id, &id), AG_ERR_INVALID);
  ag_scope_begin();
  ag_tensor *out = ag_sum(ag_mul(p, p), 0, NULL, false);
  assert_int_equal(ag_backward(out, NULL, false), AG_OK);
  ag_scope_end();
  assert_int_equal(ag_tensor_grad_hook_count(p), 1);
  assert_int_equal(ag_tensor_remove_grad_hook(p, id), AG_OK);
  assert_int_equal(ag_tensor_grad_hook_count(p), 0);
  ag_tensor_release(p);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fires_after_last_contribution),
      cmocka_unit_test(test_reverse_order_of_use),
      cmocka_unit_test(test_no_grad_unreached_removed),
      cmocka_unit_test(test_hook_error),
      cmocka_unit_test(test_no_changes_inside_hook),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
