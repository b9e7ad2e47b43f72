/* Hostile arguments to the optimizers, the learning-rate schedules, the
 * norms and the Llama loader (docs/reliability.md, API entry points): one
 * parameter listed twice, non-finite or negative learning rates, schedule
 * arguments out of range, a cosine-with-restarts step of 2^62, a deeper
 * model's file, a non-finite or negative norm eps (0 is taken, as PyTorch). */
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
#include "anygrad/sequential.h"

#define TMP AG_TEST_TMPDIR "/harden3_nn"

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

/* ---- ag_lr_cosine's arguments ---- */

static void test_lr_cosine_arguments(void **state) {
  (void)state;
  /* valid: unchanged values, a run shorter than its warmup ramps only */
  assert_true(fabs(ag_lr_cosine(60, 10, 110, 1.0, 0.1) - 0.55) < 1e-12);
  assert_true(fabs(ag_lr_cosine(4, 100, 20, 1.0, 0.1) - 0.05) < 1e-12);
  assert_true(fabs(ag_lr_cosine(3, 0, 0, 1.0, 0.1) - 0.1) < 1e-12);
  struct {
    int64_t step, warmup, total;
    double hi, lo;
    const char *what;
  } bad[] = {
      {-2, 10, 100, 1.0, 0.1, "step"},       {5, -1, 100, 1.0, 0.1, "warmup"},
      {5, INT64_MIN, 100, 1.0, 0.1, "warmup"}, {5, 0, -1, 1.0, 0.1, "total"},
      {5, 0, 100, NAN, 0.1, "lr_max"},       {5, 0, 100, INFINITY, 0.1, "lr_max"},
      {5, 0, 100, -1.0, 0.1, "lr_max"},      {5, 0, 100, 1.0, NAN, "lr_min"},
      {5, 0, 100, 1.0, -INFINITY, "lr_min"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    ag_error_clear();
    double v = ag_lr_cosine(bad[i].step, bad[i].warmup, bad[i].total, bad[i].hi, bad[i].lo);
    if (!isnan(v)) fprintf(stderr, "case %zu: got %g\n", i, v);
    assert_true(isnan(v));
    assert_int_equal(ag_last_status(), AG_ERR_INVALID);
    assert_true(has(bad[i].what));
  }
}

/* ---- every schedule's arguments ---- */

static void expect_bad(const ag_schedule *s, int64_t step, const char *what) {
  ag_error_clear();
  double v = ag_schedule_lr(s, step);
  if (!isnan(v)) fprintf(stderr, "schedule kind %d step %lld: got %g\n", (int)s->kind, (long long)step, v);
  assert_true(isnan(v));
  assert_int_equal(ag_last_status(), AG_ERR_INVALID);
  assert_true(has(what));
}

static void test_schedule_arguments(void **state) {
  (void)state;
  ag_schedule s = ag_schedule_multistep(1.0, 2, (int64_t[]){-3, 5}, 0.1);
  expect_bad(&s, 1, "milestones");
  s = ag_schedule_linear(1.0, 0.5, NAN, 10);
  expect_bad(&s, 1, "end_factor");
  s = ag_schedule_linear(1.0, 0.5, 1.0, -4);
  expect_bad(&s, 1, "total");
  s = ag_schedule_cosine(1.0, 0.0, -1);
  expect_bad(&s, 1, "total");
  s = ag_schedule_cosine(NAN, 0.0, 10);
  expect_bad(&s, 1, "lr");
  s = ag_schedule_cosine_restarts(1.0, INFINITY, 4, 2);
  expect_bad(&s, 1, "lr_min");
  s = ag_schedule_cosine_restarts(1.0, 0.0, -4, 2);
  expect_bad(&s, 1, "period");
  /* a rate that overflows on the way is not a rate */
  s = ag_schedule_step(1.0, 1, 10.0);
  assert_true(ag_schedule_lr(&s, 300) == 1e300);
  expect_bad(&s, 400, "not finite");
  s = ag_schedule_one_cycle(1.0, 10, 0.3, 1e-320, 1e4);
  expect_bad(&s, 0, "not finite");
  s = ag_schedule_with_warmup(ag_schedule_constant(1.0), -5, 0.5);
  expect_bad(&s, 1, "warmup");
  s = ag_schedule_with_warmup(ag_schedule_constant(1.0), 5, NAN);
  expect_bad(&s, 1, "start_factor");
  s = ag_schedule_constant(1.0);
  expect_bad(&s, INT64_MIN, "step");
}

/* The loop the restarts schedule used to run, step / period times for
 * period_mult 1: the reference over small steps. */
static double restarts_loop(double lr, double lr_min, int64_t period, int64_t mult, int64_t step) {
  int64_t cur = step, len = period;
  while (cur >= len) {
    cur -= len;
    len *= mult;
  }
  double pct = (double)cur / (double)len;
  return lr_min + (lr - lr_min) / 2.0 * (cos(M_PI * pct) + 1.0);
}

static void test_cosine_restarts_large_step(void **state) {
  (void)state;
  const int64_t cfg[][2] = {{1, 1}, {3, 1}, {7, 1}, {4, 2}, {1, 2}, {1, 3}, {5, 7}, {2, 1000}};
  for (size_t c = 0; c < sizeof cfg / sizeof *cfg; c++) {
    ag_schedule s = ag_schedule_cosine_restarts(0.5, 0.01, cfg[c][0], cfg[c][1]);
    for (int64_t step = 0; step < 3000; step++) {
      double want = restarts_loop(0.5, 0.01, cfg[c][0], cfg[c][1], step), got = ag_schedule_lr(&s, step);
      if (got != want)
        fprintf(stderr, "period %lld mult %lld step %lld: %.17g, the loop gives %.17g\n", (long long)cfg[c][0],
                (long long)cfg[c][1], (long long)step, got, want);
      assert_true(got == want);
    }
  }
  /* 2^62 with period_mult 1 (the loop ran 2^62 / 3 times): 2^62 mod 3 = 1 */
  const int64_t big = INT64_C(1) << 62;
  ag_schedule s = ag_schedule_cosine_restarts(0.5, 0.01, 3, 1);
  assert_true(ag_schedule_lr(&s, big) == restarts_loop(0.5, 0.01, 3, 1, 1));
  s = ag_schedule_cosine_restarts(0.5, 0.01, 1, 1);
  assert_true(ag_schedule_lr(&s, INT64_MAX) == 0.5);
  /* a period that would overflow int64: periods 1, 2^40, 2^80, so 2^62 is
   * 2^62 - 1 - 2^40 into the third (the loop divided by 2^40 there) */
  s = ag_schedule_cosine_restarts(0.5, 0.01, 1, INT64_C(1) << 40);
  double frac = (double)(big - 1 - (INT64_C(1) << 40)) / ldexp(1.0, 80);
  double want = 0.01 + (0.5 - 0.01) / 2.0 * (cos(M_PI * frac) + 1.0);
  assert_true(fabs(ag_schedule_lr(&s, big) - want) <= 1e-15);
  s = ag_schedule_cosine_restarts(0.5, 0.01, 3, 2);
  double v = ag_schedule_lr(&s, INT64_MAX);
  assert_true(v >= 0.01 && v <= 0.5);
  /* the same through a warmup */
  s = ag_schedule_with_warmup(ag_schedule_cosine_restarts(0.5, 0.01, 3, 1), 10, 0.1);
  assert_true(ag_schedule_lr(&s, big + 10) == restarts_loop(0.5, 0.01, 3, 1, 1));
}

/* ---- a deeper model's file, tensors the model does not have ---- */

static ag_llama_config tiny(int64_t layers) {
  return (ag_llama_config){.vocab_size = 16, .dim = 8, .n_layers = layers, .n_heads = 2, .hidden_dim = 16,
                           .max_seq_len = 4};
}

static void test_llama_load_extra_tensors(void **state) {
  (void)state;
  ag_llama deep, m;
  ag_llama_config c3 = tiny(3), c2 = tiny(2);
  assert_int_equal(ag_llama_init(&deep, &c3, AG_CPU, AG_F32, NULL), AG_OK);
  assert_int_equal(ag_llama_save(&deep, TMP "_deep.st"), AG_OK);
  assert_int_equal(ag_llama_init(&m, &c2, AG_CPU, AG_F32, NULL), AG_OK);
  ag_tensor *w = m.params.tensors[m.params.count - 1];
  size_t wn = (size_t)ag_tensor_numel(w) * sizeof(float);
  float *before = malloc(wn), *after = malloc(wn);
  assert_non_null(before);
  assert_non_null(after);
  assert_int_equal(ag_to_host(w, before, wn), AG_OK);

  assert_int_equal(ag_llama_load(&m, TMP "_deep.st"), AG_ERR_CORRUPT);
  assert_true(has("model.layers.2."));
  assert_true(has("n_layers 2"));
  assert_int_equal(ag_to_host(w, after, wn), AG_OK);
  assert_memory_equal(before, after, wn); /* nothing copied */
  free(before);
  free(after);

  /* the model's own tensors plus one it does not have */
  ag_param_list l = {0};
  assert_int_equal(ag_params_extend(&l, NULL, &m.params), AG_OK);
  ag_tensor *x = ag_zeros(AG_CPU, AG_F32, 1, (int64_t[]){4});
  assert_int_equal(ag_params_add(&l, "model.layers.0.mlp.extra_proj.weight", x), AG_OK);
  assert_int_equal(ag_safetensors_save(TMP "_extra.st", &l, 0, NULL, NULL), AG_OK);
  assert_int_equal(ag_llama_load(&m, TMP "_extra.st"), AG_ERR_CORRUPT);
  assert_true(has("'model.layers.0.mlp.extra_proj.weight'"));
  ag_params_free(&l);

  /* what a Llama file may carry besides the model: HF's rotary buffers of
   * its layers, anygrad's optimizer state and counters (train --task text) */
  assert_int_equal(ag_params_extend(&l, NULL, &m.params), AG_OK);
  assert_int_equal(ag_params_add(&l, "model.layers.1.self_attn.rotary_emb.inv_freq", x), AG_OK);
  assert_int_equal(ag_params_add(&l, "optim.model.norm.weight.exp_avg", x), AG_OK);
  assert_int_equal(ag_params_add(&l, "optimizer.step", x), AG_OK);
  assert_int_equal(ag_safetensors_save(TMP "_ok.st", &l, 0, NULL, NULL), AG_OK);
  assert_int_equal(ag_llama_load(&m, TMP "_ok.st"), AG_OK);
  ag_params_free(&l);
  /* ... but not the rotary buffer of a layer it does not have */
  assert_int_equal(ag_params_extend(&l, NULL, &m.params), AG_OK);
  assert_int_equal(ag_params_add(&l, "model.layers.2.self_attn.rotary_emb.inv_freq", x), AG_OK);
  assert_int_equal(ag_safetensors_save(TMP "_rot.st", &l, 0, NULL, NULL), AG_OK);
  assert_int_equal(ag_llama_load(&m, TMP "_rot.st"), AG_ERR_CORRUPT);
  assert_true(has("model.layers.2.self_attn.rotary_emb.inv_freq"));
  ag_params_free(&l);

  /* the deeper model loads its own file */
  assert_int_equal(ag_llama_load(&deep, TMP "_deep.st"), AG_OK);
  ag_tensor_release(x);
  ag_llama_free(&m);
  ag_llama_free(&deep);
  const char *files[] = {TMP "_deep.st", TMP "_extra.st", TMP "_ok.st", TMP "_rot.st"};
  for (size_t i = 0; i < sizeof files / sizeof *files; i++) unlink(files[i]);
}

/* ---- norm eps ---- */

static void test_norm_eps(void **state) {
  (void)state;
  const double bad[] = {INFINITY, -INFINITY, NAN, -1e-5};
  ag_tensor *x = ag_randn(AG_CPU, AG_F32, 2, (int64_t[]){3, 4}, 0, 1, NULL);
  ag_tensor *x4 = ag_randn(AG_CPU, AG_F32, 4, (int64_t[]){2, 3, 2, 2}, 0, 1, NULL);
  assert_non_null(x);
  assert_non_null(x4);
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    double e = bad[i];
    ag_error_clear();
    assert_null(ag_rms_norm(x, NULL, e));
    assert_int_equal(ag_last_status(), AG_ERR_INVALID);
    assert_true(has("eps"));
    ag_error_clear();
    assert_null(ag_layer_norm(x, NULL, NULL, e));
    assert_int_equal(ag_last_status(), AG_ERR_INVALID);
    assert_true(has("eps"));
    ag_error_clear();
    assert_null(ag_batch_norm(x4, NULL, NULL, NULL, NULL, true, 0.1, e));
    assert_int_equal(ag_last_status(), AG_ERR_INVALID);
    assert_true(has("eps"));

    ag_layer_norm_layer ln;
    assert_int_equal(ag_layer_norm_init(&ln, AG_CPU, AG_F32, 4, e), AG_ERR_INVALID);
    assert_true(has("eps"));
    ag_batch_norm2d bn;
    assert_int_equal(ag_batch_norm2d_init(&bn, AG_CPU, AG_F32, 3, 0.1, e), AG_ERR_INVALID);
    assert_true(has("eps"));

    ag_llama m;
    ag_llama_config c = tiny(1);
    c.norm_eps = e;
    assert_int_equal(ag_llama_init(&m, &c, AG_CPU, AG_F32, NULL), AG_ERR_INVALID);
    assert_true(has("norm_eps"));
    for (int k = 0; k < 2; k++) {
      ag_layer_spec sp[2] = {{.kind = AG_LAYER_LINEAR, .in = 4, .out = 4, .bias = true},
                             {.kind = k ? AG_LAYER_LAYER_NORM : AG_LAYER_BATCH_NORM2D, .in = 4, .eps = e}};
      ag_sequential sq;
      assert_int_equal(ag_sequential_init(&sq, AG_CPU, AG_F32, 2, sp, NULL), AG_ERR_INVALID);
      assert_true(has("layer 1"));
      assert_true(has("eps"));
    }
  }
  /* 0 in the config and the specs still selects 1e-5 */
  ag_llama m;
  ag_llama_config c = tiny(1);
  assert_int_equal(ag_llama_init(&m, &c, AG_CPU, AG_F32, NULL), AG_OK);
  assert_true(m.cfg.norm_eps == 1e-5);
  ag_llama_free(&m);
  ag_layer_spec sp[1] = {{.kind = AG_LAYER_LAYER_NORM, .in = 4}};
  ag_sequential sq;
  assert_int_equal(ag_sequential_init(&sq, AG_CPU, AG_F32, 1, sp, NULL), AG_OK);
  ag_tensor *y = ag_sequential_forward(&sq, x);
  assert_non_null(y);
  ag_tensor_release(y);
  ag_sequential_free(&sq);
  y = ag_rms_norm(x, NULL, 1e-6);
  assert_non_null(y);
  ag_tensor_release(y);
  /* eps 0 is PyTorch's too: the ops and the layers take it */
  y = ag_layer_norm(x, NULL, NULL, 0.0);
  assert_non_null(y);
  ag_tensor_release(y);
  ag_layer_norm_layer ln0;
  assert_int_equal(ag_layer_norm_init(&ln0, AG_CPU, AG_F32, 4, 0.0), AG_OK);
  ag_layer_norm_free(&ln0);
  ag_tensor_release(x);
  ag_tensor_release(x4);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_optimizer_duplicate_params),
      cmocka_unit_test(test_optimizer_set_lr_nonfinite),
      cmocka_unit_test(test_lr_cosine_arguments),
      cmocka_unit_test(test_schedule_arguments),
      cmocka_unit_test(test_cosine_restarts_large_step),
      cmocka_unit_test(test_llama_load_extra_tensors),
      cmocka_unit_test(test_norm_eps),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
