/* OpenCL through the public API: device selection, index errors reported at
 * the next sync, and the training example run on opencl:0 and on the CPU
 * with the same seed, whose losses must agree. Skips without a device. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "anygrad/anygrad.h"
#include "charlm.h"

static ag_device CL;

#define NEED_DEVICE()                                  \
  do {                                                 \
    if (!ag_backend_available(AG_BACKEND_OPENCL, NULL)) skip(); \
  } while (0)

static void test_device(void **state) {
  NEED_DEVICE();
  assert_int_equal(ag_device_parse("opencl:0", &CL), AG_OK);
  assert_int_equal(CL.backend, AG_BACKEND_OPENCL);
  ag_device bad;
  assert_int_equal(ag_device_parse("opencl:7", &bad), AG_ERR_DEVICE);
  ag_device_props p;
  assert_int_equal(ag_device_props_get(CL, &p), AG_OK);
  assert_true(p.name[0] && p.arch[0] && p.total_memory > 0);
  size_t fr, tot;
  assert_int_equal(ag_device_mem_info(CL, &fr, &tot), AG_OK);
  assert_true(fr <= tot && tot == p.total_memory);
}

/* Indices computed on the device ([0, 4, 8] for a 4-row table): the kernel
 * finds the bad ones and the core reports AG_ERR_INDEX at the next sync (or
 * at the call, if the core checks indices it can see). */
static void test_index_error(void **state) {
  NEED_DEVICE();
  assert_int_equal(ag_device_parse("opencl:0", &CL), AG_OK);
  int64_t ts[2] = {4, 3};
  ag_tensor *tab = ag_ones(CL, AG_F32, 2, ts);
  ag_tensor *ar = ag_arange(CL, AG_I32, 0, 3, 1);
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
  print_message("reported: %s\n", ag_last_error());
  assert_non_null(strstr(ag_last_error(), "8") ? ag_last_error() : strstr(ag_last_error(), "4"));
  /* reported once: the device stays usable */
  ag_error_clear();
  float all[12];
  assert_int_equal(ag_to_host(tab, all, sizeof all), AG_OK);
  assert_true(all[11] == 1.0f);
  ag_tensor_release(e);
  ag_tensor_release(ix);
  ag_tensor_release(ar);
  ag_tensor_release(tab);
}

/* Same seed, same data order, same Philox draws on both devices: the loss
 * curves differ only by f32 summation order. Tolerance: 1% relative on
 * every reported loss after a short run (measured differences are far
 * smaller; a wrong kernel moves them by much more). */
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
  assert_int_equal(ag_device_parse("opencl:0", &o.device), AG_OK);
  ag_status st = charlm_train(&o, &rg);
  if (st != AG_OK) fail_msg("charlm on opencl:0: %s", ag_last_error());
  print_message("%s: cpu loss %.5f -> %.5f (val %.5f), opencl %.5f -> %.5f (val %.5f)\n",
                kind == CHARLM_MLP ? "mlp" : "gpt", rc.first_loss, rc.final_loss, rc.val_loss,
                rg.first_loss, rg.final_loss, rg.val_loss);
  assert_true(rg.steps_done == rc.steps_done);
  assert_true(rc.final_loss < rc.first_loss); /* it trained at all */
  const double pairs[3][2] = {{rc.first_loss, rg.first_loss},
                              {rc.final_loss, rg.final_loss},
                              {rc.val_loss, rg.val_loss}};
  for (int i = 0; i < 3; i++)
    if (!(fabs(pairs[i][0] - pairs[i][1]) <= 0.01 * fabs(pairs[i][0])))
      fail_msg("loss %d: cpu %.6f opencl %.6f", i, pairs[i][0], pairs[i][1]);
}

static void test_train_mlp_matches_cpu(void **state) {
  NEED_DEVICE();
  train_both(CHARLM_MLP, 40);
}

static void test_train_gpt_matches_cpu(void **state) {
  NEED_DEVICE();
  train_both(CHARLM_GPT, 8);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_device),
      cmocka_unit_test(test_index_error),
      cmocka_unit_test(test_train_mlp_matches_cpu),
      cmocka_unit_test(test_train_gpt_matches_cpu),
  };
  return cmocka_run_group_tests_name("opencl_api", tests, NULL, NULL);
}
