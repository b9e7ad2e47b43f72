/* ag_sequential (include/anygrad/sequential.h): a classifier built from
 * specs trains (AdamW with the no-decay groups), train/eval modes, a
 * safetensors round trip by torch.nn.Sequential names, error cases. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "anygrad/anygrad.h"
#include "anygrad/sequential.h"
#include "test_device.h"

static const ag_layer_spec CNN[] = {
    {.kind = AG_LAYER_CONV2D, .in = 1, .out = 4, .kernel = 3, .bias = true, .conv = {{1, 1}, {1, 1}, {1, 1}, 1}},
    {.kind = AG_LAYER_BATCH_NORM2D, .in = 4},
    {.kind = AG_LAYER_ACTIVATION, .act = AG_ACT_RELU},
    {.kind = AG_LAYER_FLATTEN},
    {.kind = AG_LAYER_LINEAR, .in = 4 * 4 * 4, .out = 16, .bias = true},
    {.kind = AG_LAYER_LAYER_NORM, .in = 16},
    {.kind = AG_LAYER_ACTIVATION, .act = AG_ACT_GELU},
    {.kind = AG_LAYER_DROPOUT, .p = 0.1},
    {.kind = AG_LAYER_LINEAR, .in = 16, .out = 3, .bias = true},
};
enum { NL = sizeof CNN / sizeof CNN[0], N = 24 };

/* class c images: a bright pixel row c */
static void batch(ag_device d, ag_tensor **x, ag_tensor **y) {
  float img[N * 16];
  int64_t lab[N];
  for (int i = 0; i < N; i++) {
    lab[i] = i % 3;
    for (int k = 0; k < 16; k++) img[i * 16 + k] = (k / 4 == lab[i]) ? 1.0f : 0.1f * (float)((i + k) % 3);
  }
  const int64_t xs[4] = {N, 1, 4, 4}, ys[1] = {N};
  *x = ag_from_host(d, AG_F32, 4, xs, img);
  *y = ag_from_host(d, AG_I64, 1, ys, lab);
}

static void test_train_save_load(void **state) {
  (void)state;
  ag_device d = TEST_DEV;
  ag_generator *g = ag_generator_create(7);
  ag_sequential m;
  assert_int_equal(ag_sequential_init(&m, d, AG_F32, NL, CNN, g), AG_OK);
  assert_non_null(ag_params_find(&m.params, "0.weight"));
  assert_non_null(ag_params_find(&m.params, "1.weight"));
  assert_non_null(ag_params_find(&m.buffers, "1.running_mean"));
  assert_non_null(ag_params_find(&m.params, "8.bias"));
  assert_null(ag_params_find(&m.params, "2.weight"));
  ag_param_list decay = {0}, no_decay = {0};
  assert_int_equal(ag_params_split_decay(&m.params, &decay, &no_decay), AG_OK);
  assert_int_equal(decay.count, 3);    /* conv kernel and two linear weights */
  assert_int_equal(no_decay.count, 7); /* biases and norm weights */
  ag_param_group groups[2] = {{&decay, 1e-2, 0.1}, {&no_decay, 1e-2, 0.0}};
  ag_optimizer *opt = ag_adamw_create_groups(groups, 2, NULL);
  assert_non_null(opt);
  double first = 0, last = 0;
  for (int step = 0; step < 30; step++) {
    ag_scope_begin();
    ag_tensor *x, *y;
    batch(d, &x, &y);
    ag_tensor *loss = ag_cross_entropy(ag_sequential_forward(&m, x), y, AG_REDUCTION_MEAN, -100);
    assert_non_null(loss);
    assert_int_equal(ag_backward(loss, NULL, false), AG_OK);
    assert_int_equal(ag_optimizer_step(opt), AG_OK);
    ag_optimizer_zero_grad(opt);
    double l = ag_item(loss);
    if (step == 0) first = l;
    last = l;
    assert_int_equal(ag_scope_end(), AG_OK);
  }
  assert_true(last < 0.5 * first);
  /* eval mode: dropout off, batch norm on running stats: deterministic */
  assert_int_equal(ag_sequential_set_train(&m, false), AG_OK);
  ag_scope_begin();
  ag_tensor *x, *y;
  batch(d, &x, &y);
  float o1[N * 3], o2[N * 3], o3[N * 3];
  assert_int_equal(ag_to_host(ag_sequential_forward(&m, x), o1, sizeof o1), AG_OK);
  assert_int_equal(ag_to_host(ag_sequential_forward(&m, x), o2, sizeof o2), AG_OK);
  assert_memory_equal(o1, o2, sizeof o1);
  /* save params and buffers, load into a model with other weights */
  ag_param_list all = {0};
  assert_int_equal(ag_params_extend(&all, NULL, &m.params), AG_OK);
  assert_int_equal(ag_params_extend(&all, NULL, &m.buffers), AG_OK);
  char path[64];
  snprintf(path, sizeof path, "/tmp/ag_sequential_test_%d.safetensors", (int)getpid());
  assert_int_equal(ag_safetensors_save(path, &all, 0, NULL, NULL), AG_OK);
  ag_generator *g2 = ag_generator_create(99);
  ag_sequential m2;
  assert_int_equal(ag_sequential_init(&m2, d, AG_F32, NL, CNN, g2), AG_OK);
  ag_sequential_set_train(&m2, false);
  ag_param_list all2 = {0};
  ag_params_extend(&all2, NULL, &m2.params);
  ag_params_extend(&all2, NULL, &m2.buffers);
  ag_safetensors *f = NULL;
  assert_int_equal(ag_safetensors_open(path, &f), AG_OK);
  assert_int_equal(ag_safetensors_load_into(f, &all2), AG_OK);
  ag_safetensors_close(f);
  remove(path);
  assert_int_equal(ag_to_host(ag_sequential_forward(&m2, x), o3, sizeof o3), AG_OK);
  assert_memory_equal(o1, o3, sizeof o1);
  assert_int_equal(ag_scope_end(), AG_OK);
  ag_params_free(&all);
  ag_params_free(&all2);
  ag_params_free(&decay);
  ag_params_free(&no_decay);
  ag_optimizer_free(opt);
  ag_sequential_free(&m);
  ag_sequential_free(&m2);
  ag_generator_free(g);
  ag_generator_free(g2);
}

static void test_errors(void **state) {
  (void)state;
  ag_device d = TEST_DEV;
  ag_sequential m;
  ag_layer_spec bad[2] = {{.kind = AG_LAYER_LINEAR, .in = 4, .out = 2, .bias = true}, {.kind = (ag_layer_kind)42}};
  assert_int_equal(ag_sequential_init(&m, d, AG_F32, 2, bad, NULL), AG_ERR_INVALID);
  assert_non_null(strstr(ag_last_error(), "layer 1"));
  assert_null(m.layers);
  bad[1] = (ag_layer_spec){.kind = AG_LAYER_DROPOUT, .p = 1.5};
  assert_int_equal(ag_sequential_init(&m, d, AG_F32, 2, bad, NULL), AG_ERR_INVALID);
  bad[1] = (ag_layer_spec){.kind = AG_LAYER_LINEAR, .in = 0, .out = 2};
  assert_int_equal(ag_sequential_init(&m, d, AG_F32, 2, bad, NULL), AG_ERR_SHAPE);
  assert_int_equal(ag_sequential_init(&m, d, AG_F32, 0, bad, NULL), AG_ERR_INVALID);
  assert_int_equal(ag_sequential_init(NULL, d, AG_F32, 1, bad, NULL), AG_ERR_INVALID);
  /* shape mismatch at forward names the layer */
  bad[1] = (ag_layer_spec){.kind = AG_LAYER_LINEAR, .in = 3, .out = 2};
  assert_int_equal(ag_sequential_init(&m, d, AG_F32, 2, bad, NULL), AG_OK);
  ag_scope_begin();
  const int64_t xs[2] = {5, 4};
  ag_tensor *x = ag_zeros(d, AG_F32, 2, xs);
  assert_null(ag_sequential_forward(&m, x));
  assert_int_equal(ag_last_status(), AG_ERR_SHAPE);
  assert_non_null(strstr(ag_last_error(), "ag_sequential_forward: layer 1 (linear)"));
  ag_error_clear();
  assert_null(ag_sequential_forward(&m, NULL));
  assert_int_equal(ag_last_status(), AG_ERR_INVALID);
  ag_error_clear();
  assert_int_equal(ag_scope_end(), AG_OK);
  ag_sequential_free(&m);
  ag_sequential_free(NULL);
}

int main(void) {
  (void)TEST_DEV;
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_train_save_load), cmocka_unit_test(test_errors)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
