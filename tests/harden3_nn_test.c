/* Hostile arguments to the optimizers (docs/reliability.md, API entry
 * points): one parameter listed twice, non-finite or negative learning
 * rates. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "anygrad/anygrad.h"

static bool has(const char *needle) {
  const char *e = ag_last_error();
  if (strstr(e, needle)) return true;
  fprintf(stderr, "message '%s' does not name '%s'\n", e, needle);
  return false;
}

static ag_tensor *leaf(float v) {
  float h[3] = {v, v, v};
  ag_tensor *t = ag_from_host(AG_CPU, AG_F32, 1, (int64_t[]){3}, h);
  assert_non_null(t);
  assert_int_equal(ag_tensor_set_requires_grad(t, true), AG_OK);
  return t;
}

/* d(sum(t))/dt = 1 */
static void give_grad(ag_tensor *t) {
  ag_tensor *s = ag_sum(t, 0, NULL, false);
  assert_non_null(s);
  assert_int_equal(ag_backward(s, NULL, false), AG_OK);
  ag_tensor_release(s);
}

static float first(ag_tensor *t) {
  float h[3];
  assert_int_equal(ag_to_host(t, h, sizeof h), AG_OK);
  return h[0];
}

/* ---- one tensor twice in a parameter list ---- */

static void test_optimizer_duplicate_params(void **state) {
  (void)state;
  ag_tensor *a = leaf(1), *b = leaf(2);
  ag_param_list l = {0};
  assert_int_equal(ag_params_add(&l, "a", a), AG_OK);
  assert_int_equal(ag_params_add(&l, "b", b), AG_OK);
  assert_int_equal(ag_params_add(&l, "a_again", a), AG_OK);

  ag_adamw_options ao = ag_adamw_defaults();
  assert_null(ag_adamw_create(&l, &ao));
  assert_int_equal(ag_last_status(), AG_ERR_INVALID);
  assert_true(has("parameter 2 ('a_again')"));
  assert_true(has("parameter 0 ('a')"));
  ag_sgd_options so = {.lr = 0.1};
  assert_null(ag_sgd_create(&l, &so));
  assert_int_equal(ag_last_status(), AG_ERR_INVALID);
  assert_true(has("parameter 2 ('a_again')"));

  /* within one group (across groups was already refused) */
  ag_param_group g[2] = {{.params = &l, .lr = AG_GROUP_INHERIT, .weight_decay = AG_GROUP_INHERIT},
                         {.params = &l, .lr = AG_GROUP_INHERIT, .weight_decay = AG_GROUP_INHERIT}};
  assert_null(ag_adamw_create_groups(g, 1, &ao));
  assert_int_equal(ag_last_status(), AG_ERR_INVALID);
  assert_true(has("'a_again'"));
  assert_null(ag_sgd_create_groups(g, 1, &so));
  assert_int_equal(ag_last_status(), AG_ERR_INVALID);
  assert_true(has("'a_again'"));
  assert_null(ag_sgd_create_groups(g, 2, &so));
  assert_int_equal(ag_last_status(), AG_ERR_INVALID);

  /* the same list without the repeat: accepted, one step moves a once */
  ag_param_list ok = {0};
  assert_int_equal(ag_params_add(&ok, "a", a), AG_OK);
  assert_int_equal(ag_params_add(&ok, "b", b), AG_OK);
  ag_optimizer *o = ag_sgd_create(&ok, &so);
  assert_non_null(o);
  give_grad(a);
  assert_int_equal(ag_optimizer_step(o), AG_OK);
  assert_true(fabsf(first(a) - 0.9f) < 1e-6f);
  ag_optimizer_free(o);
  ag_params_free(&ok);
  ag_params_free(&l);
  ag_tensor_release(a);
  ag_tensor_release(b);
}

/* ---- a NaN, infinite or negative learning rate ---- */

static void test_optimizer_set_lr_nonfinite(void **state) {
  (void)state;
  ag_tensor *w = leaf(1);
  ag_param_list l = {0};
  assert_int_equal(ag_params_add(&l, "w", w), AG_OK);
  ag_adamw_options ao = ag_adamw_defaults();
  ag_optimizer *o = ag_adamw_create(&l, &ao);
  assert_non_null(o);
  const double bad[] = {NAN, INFINITY, -INFINITY, -0.5};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    ag_error_clear();
    assert_int_equal(ag_optimizer_set_lr(o, bad[i]), AG_ERR_INVALID);
    assert_true(has("lr"));
    assert_true(ag_optimizer_lr(o) == 1e-3); /* unchanged */
  }
  assert_int_equal(ag_optimizer_set_lr(o, 0.0), AG_OK);
  assert_int_equal(ag_optimizer_set_lr(o, 1e-2), AG_OK);
  give_grad(w);
  assert_int_equal(ag_optimizer_step(o), AG_OK);
  float v = first(w);
  assert_true(isfinite(v) && v < 1.0f);
  ag_optimizer_free(o);

  /* the constructors: a NaN option passed every "< 0" test */
  ao = ag_adamw_defaults();
  ao.lr = NAN;
  assert_null(ag_adamw_create(&l, &ao));
  assert_int_equal(ag_last_status(), AG_ERR_INVALID);
  ao = ag_adamw_defaults();
  ao.eps = NAN;
  assert_null(ag_adamw_create(&l, &ao));
  ao = ag_adamw_defaults();
  ao.beta1 = NAN;
  assert_null(ag_adamw_create(&l, &ao));
  ao = ag_adamw_defaults();
  ao.weight_decay = INFINITY;
  assert_null(ag_adamw_create(&l, &ao));
  ag_sgd_options so = {.lr = NAN};
  assert_null(ag_sgd_create(&l, &so));
  assert_int_equal(ag_last_status(), AG_ERR_INVALID);
  so = (ag_sgd_options){.lr = 0.1, .momentum = NAN};
  assert_null(ag_sgd_create(&l, &so));
  so = (ag_sgd_options){.lr = 0.1, .momentum = 0.9, .dampening = INFINITY};
  assert_null(ag_sgd_create(&l, &so));
  so = (ag_sgd_options){.lr = INFINITY};
  assert_null(ag_sgd_create(&l, &so));
  ag_params_free(&l);
  ag_tensor_release(w);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_optimizer_duplicate_params),
      cmocka_unit_test(test_optimizer_set_lr_nonfinite),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
