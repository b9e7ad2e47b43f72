/* Training against an independent reference: the MLP, data and initial
 * weights of tests/data/reference.safetensors (written by make_reference.py
 * with PyTorch) trained with AdamW and with SGD+momentum, gradient clipping
 * included; every step's loss and the final weights must match PyTorch's.
 * Also: no memory growth over 200 training steps of a small GPT. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "anygrad/anygrad.h"

#ifndef AG_TEST_DATA
#define AG_TEST_DATA "tests/data"
#endif

static ag_safetensors *open_ref(void) {
  ag_safetensors *f = NULL;
  ag_status st = ag_safetensors_open(AG_TEST_DATA "/reference.safetensors", &f);
  if (st != AG_OK) fail_msg("%s", ag_last_error());
  return f;
}

static void run_reference(const char *opt_name) {
  ag_safetensors *f = open_ref();
  int steps = atoi(ag_safetensors_meta(f, "steps"));
  assert_true(steps > 0);
  int64_t sizes[3] = {8, 16, 4};
  ag_mlp m;
  assert_int_equal(ag_mlp_init(&m, AG_CPU, AG_F32, 3, sizes, AG_ACT_TANH, NULL), AG_OK);
  /* ag_mlp names its parameters like torch.nn.Sequential: 0.weight, 2.bias... */
  ag_param_list init = {0};
  assert_int_equal(ag_params_extend(&init, "init.", &m.params), AG_OK);
  assert_int_equal(ag_safetensors_load_into(f, &init), AG_OK);
  ag_params_free(&init);

  ag_optimizer *opt;
  if (!strcmp(opt_name, "adamw")) {
    ag_adamw_options o = {.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01};
    opt = ag_adamw_create(&m.params, &o);
  } else {
    ag_sgd_options o = {.lr = 0.1, .momentum = 0.9, .weight_decay = 1e-3};
    opt = ag_sgd_create(&m.params, &o);
  }
  assert_non_null(opt);
  ag_tensor *X = ag_safetensors_get(f, "data.x", AG_CPU), *Y = ag_safetensors_get(f, "data.y", AG_CPU);
  char key[64];
  snprintf(key, sizeof key, "%s.losses", opt_name);
  ag_tensor *ref = ag_safetensors_get(f, key, AG_CPU);
  assert_non_null(X);
  assert_non_null(Y);
  assert_non_null(ref);
  double ref_losses[64];
  assert_true(steps <= 64);
  assert_int_equal(ag_to_host(ref, ref_losses, (size_t)steps * sizeof(double)), AG_OK);
  for (int s = 0; s < steps; s++) {
    ag_scope_begin();
    ag_tensor *x = ag_squeeze(ag_slice(X, 0, s, s + 1, 1), 0), *y = ag_squeeze(ag_slice(Y, 0, s, s + 1, 1), 0);
    ag_tensor *loss = ag_cross_entropy(ag_mlp_forward(&m, x), y, AG_REDUCTION_MEAN, -1);
    assert_int_equal(ag_backward(loss, NULL, false), AG_OK);
    assert_non_null(ag_clip_grad_norm(&m.params, 1.0));
    assert_int_equal(ag_optimizer_step(opt), AG_OK);
    ag_optimizer_zero_grad(opt);
    double l = ag_item(loss);
    if (fabs(l - ref_losses[s]) > 1e-5 * fmax(1.0, fabs(ref_losses[s])))
      fail_msg("%s step %d: loss %.8f, PyTorch %.8f", opt_name, s, l, ref_losses[s]);
    ag_scope_end();
  }
  for (int i = 0; i < m.params.count; i++) {
    snprintf(key, sizeof key, "%s.final.%s", opt_name, m.params.names[i]);
    ag_tensor *want = ag_safetensors_get(f, key, AG_CPU);
    assert_non_null(want);
    int64_t n = ag_tensor_numel(want);
    float a[64 * 16], b[64 * 16];
    assert_true(n <= 64 * 16);
    assert_int_equal(ag_to_host(m.params.tensors[i], a, (size_t)n * 4), AG_OK);
    assert_int_equal(ag_to_host(want, b, (size_t)n * 4), AG_OK);
    for (int64_t k = 0; k < n; k++)
      if (fabsf(a[k] - b[k]) > 2e-5f * fmaxf(1.0f, fabsf(b[k])))
        fail_msg("%s %s[%lld] = %.7f, PyTorch %.7f", opt_name, m.params.names[i], (long long)k, a[k], b[k]);
    ag_tensor_release(want);
  }
  ag_tensor_release(X);
  ag_tensor_release(Y);
  ag_tensor_release(ref);
  ag_optimizer_free(opt);
  ag_mlp_free(&m);
  ag_safetensors_close(f);
}

static void test_adamw_matches_pytorch(void **state) {
  (void)state;
  run_reference("adamw"); }
static void test_sgd_matches_pytorch(void **state) {
  (void)state;
  run_reference("sgd"); }

/* 200 steps of a small GPT: live tensors, autograd nodes and allocated
 * bytes are the same after step 20 and after step 200. */
static void test_no_memory_growth(void **state) {
  (void)state;
  ag_generator *g = ag_generator_create(7);
  ag_gpt_config c = {.vocab_size = 27, .block_size = 8, .n_layer = 1, .n_embd = 16, .n_head = 2, .dropout = 0.1};
  ag_gpt m;
  assert_int_equal(ag_gpt_init(&m, &c, AG_CPU, AG_F32, g), AG_OK);
  ag_optimizer *opt = ag_adamw_create(&m.params, NULL);
  assert_non_null(opt);
  int32_t xs[4 * 8], ys[4 * 8];
  int64_t live20 = 0, nodes20 = 0, bytes20 = 0;
  for (int s = 0; s < 200; s++) {
    for (int i = 0; i < 32; i++) {
      xs[i] = (i * 7 + s) % 27;
      ys[i] = (i * 5 + s) % 27;
    }
    ag_scope_begin();
    int64_t sx[2] = {4, 8}, sy[1] = {32}, s2[2] = {32, 27};
    ag_tensor *x = ag_from_host(AG_CPU, AG_I32, 2, sx, xs), *y = ag_from_host(AG_CPU, AG_I32, 1, sy, ys);
    ag_tensor *logits = ag_reshape(ag_gpt_forward(&m, x, true, g), 2, s2);
    ag_tensor *loss = ag_cross_entropy(logits, y, AG_REDUCTION_MEAN, -1);
    assert_int_equal(ag_backward(loss, NULL, false), AG_OK);
    assert_non_null(ag_clip_grad_norm(&m.params, 1.0));
    assert_int_equal(ag_optimizer_step(opt), AG_OK);
    ag_optimizer_zero_grad(opt);
    assert_false(isnan(ag_item(loss)));
    ag_scope_end();
    ag_memory_stats ms;
    assert_int_equal(ag_memory_stats_get(AG_CPU, &ms), AG_OK);
    if (s == 19) {
      live20 = ag_live_tensors();
      nodes20 = ag_live_nodes();
      bytes20 = ms.allocated_bytes[AG_POOL_ALL].current;
    } else if (s == 199) {
      assert_int_equal(ag_live_tensors(), live20);
      assert_int_equal(ag_live_nodes(), nodes20);
      assert_int_equal(ag_live_nodes(), 0);
      assert_int_equal(ms.allocated_bytes[AG_POOL_ALL].current, bytes20);
      assert_int_equal(ms.category_bytes[AG_MEM_ACTIVATIONS].current, 0);
    }
  }
  ag_optimizer_free(opt);
  ag_gpt_free(&m);
  ag_generator_free(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_adamw_matches_pytorch),
      cmocka_unit_test(test_sgd_matches_pytorch),
      cmocka_unit_test(test_no_memory_growth),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
