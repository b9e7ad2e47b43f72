/* The Vulkan backend through the public API: device properties, a missing
 * loader reported as unavailable, stream-ordered copies and kernels across
 * batch boundaries, events between streams, the index error word, the
 * validation messenger's verdict, and the training example on vulkan:0
 * against the CPU. Skips without a Vulkan device (lavapipe counts). */
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
#include "charlm.h"

static ag_device VK;

static bool have_vulkan(void) {
  ag_backend_kind k;
  if (ag_backend_find("vulkan", &k) != AG_OK) return false;
  return ag_backend_available(k, NULL) && ag_device_parse("vulkan:0", &VK) == AG_OK;
}

#define NEED_DEVICE()            \
  do {                           \
    if (!have_vulkan()) skip();  \
  } while (0)

static void test_device(void **state) {
  (void)state;
  NEED_DEVICE();
  ag_device_props p;
  assert_int_equal(ag_device_props_get(VK, &p), AG_OK);
  assert_true(p.name[0] && p.arch[0] && p.total_memory > 0);
  /* the subgroup size is read from the device, never assumed */
  assert_non_null(strstr(p.arch, "subgroup"));
  size_t fr, tot;
  assert_int_equal(ag_device_mem_info(VK, &fr, &tot), AG_OK);
  assert_true(fr <= tot && tot == p.total_memory);
  ag_device bad;
  assert_int_equal(ag_device_parse("vulkan:9", &bad), AG_ERR_DEVICE);
}

/* Enough kernels between two host reads to span several batches (a batch
 * is submitted every 256 commands): the order and the values survive. */
static void test_many_batches(void **state) {
  (void)state;
  NEED_DEVICE();
  int64_t n = 1000;
  ag_tensor *x = ag_zeros(VK, AG_F32, 1, &n);
  assert_non_null(x);
  for (int i = 0; i < 700; i++) {
    ag_tensor *y = ag_add_scalar(x, 1.0);
    assert_non_null(y);
    ag_tensor_release(x);
    x = y;
  }
  float h[1000];
  assert_int_equal(ag_to_host(x, h, sizeof h), AG_OK);
  assert_true(h[0] == 700.0f && h[999] == 700.0f);
  /* a host upload larger than a batch's arena is staged in pieces */
  int64_t big = 3 << 20;
  float *src = malloc((size_t)big * sizeof *src), *back = malloc((size_t)big * sizeof *back);
  assert_non_null(src);
  assert_non_null(back);
  for (int64_t i = 0; i < big; i++) src[i] = (float)(i % 1000) - 500.0f;
  ag_tensor *t = ag_from_host(VK, AG_F32, 1, &big, src);
  assert_non_null(t);
  ag_tensor *u = ag_mul_scalar(t, 2.0);
  assert_int_equal(ag_to_host(u, back, (size_t)big * sizeof *back), AG_OK);
  for (int64_t i = 0; i < big; i += 4099) assert_true(back[i] == 2.0f * src[i]);
  ag_tensor_release(u);
  ag_tensor_release(t);
  ag_tensor_release(x);
  free(src);
  free(back);
}

/* Indices computed on the device ([0, 4, 8] for a 4-row table): the shader
 * finds the bad ones and the core reports AG_ERR_INDEX at the next sync. */
static void test_index_error(void **state) {
  (void)state;
  NEED_DEVICE();
  int64_t ts[2] = {4, 3};
  ag_tensor *tab = ag_ones(VK, AG_F32, 2, ts);
  ag_tensor *ar = ag_arange(VK, AG_I32, 0, 3, 1);
  ag_tensor *ix = ag_mul_scalar(ar, 4);
  assert_non_null(ix);
  ag_error_clear();
  ag_tensor *e = ag_embedding(tab, ix);
  if (e) {
    float out[9];
    assert_int_equal(ag_to_host(e, out, sizeof out), AG_ERR_INDEX);
  } else {
    assert_int_equal(ag_last_status(), AG_ERR_INDEX);
  }
  ag_error_clear();
  float all[12];
  assert_int_equal(ag_to_host(tab, all, sizeof all), AG_OK);
  assert_true(all[11] == 1.0f);
  ag_tensor_release(e);
  ag_tensor_release(ix);
  ag_tensor_release(ar);
  ag_tensor_release(tab);
}

/* Same seed, same data, same Philox draws on both devices: the losses
 * differ only by f32 summation order (1% bound, as for OpenCL). */
static void train_both(charlm_model_kind kind, int64_t steps) {
  charlm_options o = charlm_defaults(kind);
  o.steps = steps;
  o.batch = kind == CHARLM_MLP ? 64 : 8;
  o.warmup = 2;
  o.eval_batches = 2;
  o.samples = 0;
  o.quiet = true;
  o.log = stderr;
  if (kind == CHARLM_GPT) {
    o.n_layer = 1;
    o.n_embd = 32;
    o.n_head = 2;
  }
  charlm_result rc, rg;
  o.device = AG_CPU;
  assert_int_equal(charlm_train(&o, &rc), AG_OK);
  o.device = VK;
  ag_status st = charlm_train(&o, &rg);
  if (st != AG_OK) fail_msg("charlm on vulkan:0: %s", ag_last_error());
  print_message("%s: cpu loss %.5f -> %.5f (val %.5f), vulkan %.5f -> %.5f (val %.5f)\n",
                kind == CHARLM_MLP ? "mlp" : "gpt", rc.first_loss, rc.final_loss, rc.val_loss, rg.first_loss,
                rg.final_loss, rg.val_loss);
  assert_true(rg.steps_done == rc.steps_done);
  assert_true(rc.final_loss < rc.first_loss);
  const double pairs[3][2] = {{rc.first_loss, rg.first_loss}, {rc.final_loss, rg.final_loss}, {rc.val_loss, rg.val_loss}};
  for (int i = 0; i < 3; i++)
    if (!(fabs(pairs[i][0] - pairs[i][1]) <= 0.01 * fabs(pairs[i][0])))
      fail_msg("loss %d: cpu %.6f vulkan %.6f", i, pairs[i][0], pairs[i][1]);
}

static void test_train_mlp_matches_cpu(void **state) {
  (void)state;
  NEED_DEVICE();
  train_both(CHARLM_MLP, 30);
}

static void test_train_gpt_matches_cpu(void **state) {
  (void)state;
  NEED_DEVICE();
  train_both(CHARLM_GPT, 6);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_device),
      cmocka_unit_test(test_many_batches),
      cmocka_unit_test(test_index_error),
      cmocka_unit_test(test_train_mlp_matches_cpu),
      cmocka_unit_test(test_train_gpt_matches_cpu),
  };
  return cmocka_run_group_tests_name("vulkan", tests, NULL, NULL);
}
