/* The Fashion-MNIST job (models/cnn.c) on a slice of the data: it learns,
 * writes checkpoints that hold the batch-norm buffers, resumes where it
 * stopped, and reports bad data paths; plus the vision layers' errors.
 * Skipped when dataset-fashion-mnist is not installed. */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "cnn.h"

static bool have_data(void) { return access(CNN_DATA_DIR "/train-images-idx3-ubyte.gz", R_OK) == 0; }

static cnn_options small(const char *out) {
  cnn_options o = cnn_defaults();
  o.epochs = 1;
  o.train_limit = 1024;
  o.test_limit = 500;
  o.c1 = 4;
  o.c2 = 8;
  o.batch = 64;
  o.warmup = 2;
  o.out = out;
  o.quiet = true;
  o.profile = false;
  return o;
}

static void test_learns_and_resumes(void **state) {
  if (!have_data()) skip();
  const char *ck = AG_TEST_TMPDIR "/cnn_test.safetensors";
  remove(ck);
  cnn_options o = small(ck);
  cnn_result r;
  assert_int_equal(cnn_train(&o, &r), AG_OK);
  assert_int_equal(r.epochs_done, 1);
  assert_true(r.test_accuracy > 0.5); /* chance is 0.1 */
  int64_t total = 0;
  for (int i = 0; i < CNN_CLASSES; i++)
    for (int j = 0; j < CNN_CLASSES; j++) total += r.confusion[i][j];
  assert_int_equal(total, 500);

  /* the checkpoint holds parameters, running statistics and optimizer state */
  ag_safetensors *f;
  assert_int_equal(ag_safetensors_open(ck, &f), AG_OK);
  assert_string_equal(ag_safetensors_meta(f, "epoch"), "1");
  ag_tensor *rm = ag_safetensors_get(f, "buffers.bn1.running_mean", AG_CPU);
  assert_non_null(rm);
  float v[4];
  assert_int_equal(ag_to_host(rm, v, sizeof v), AG_OK);
  assert_true(fabsf(v[0]) + fabsf(v[1]) + fabsf(v[2]) + fabsf(v[3]) > 0); /* updated from zeros */
  ag_tensor_release(rm);
  ag_tensor *w2 = ag_safetensors_get(f, "model.conv2.weight", AG_CPU);
  assert_non_null(w2);
  ag_tensor_release(w2);
  ag_safetensors_close(f);

  /* resume: continues to epoch 2 with the saved architecture */
  cnn_options o2 = small(ck);
  o2.c1 = 99; /* ignored: the checkpoint's widths win */
  o2.resume = ck;
  o2.epochs = 2;
  assert_int_equal(cnn_train(&o2, &r), AG_OK);
  assert_int_equal(r.epochs_done, 2);
  assert_true(r.test_accuracy > 0.5);
  assert_int_equal(ag_safetensors_open(ck, &f), AG_OK);
  assert_string_equal(ag_safetensors_meta(f, "epoch"), "2");
  assert_string_equal(ag_safetensors_meta(f, "c1"), "4");
  ag_safetensors_close(f);
  /* at the requested epoch already: nothing trained, accuracy still reported */
  assert_int_equal(cnn_train(&o2, &r), AG_OK);
  assert_int_equal(r.epochs_done, 2);
  assert_true(r.test_accuracy > 0.5);
  remove(ck);
}

/* The seed rule made visible: a slow augmentation on the training thread
 * (0 workers) makes the step profiler say input-bound; the same work on
 * loader workers leaves the step compute-bound. The delay sleeps, so
 * workers overlap it even on a loaded two-core machine. */
static void test_input_bound_verdict(void **state) {
  if (!have_data()) skip();
  cnn_options o = small(NULL);
  o.train_limit = 64 * 40;
  o.profile_window = 25; /* the verdict covers steps 15-39: the workers' pipeline is full by then */
  o.test_limit = 100;
  o.c1 = 16;
  o.c2 = 32;
  o.profile = true;
  o.augment_delay_us = 1500; /* 96 ms per batch of 64: well above the step even under ASan */
  o.workers = 0;
  cnn_result r;
  assert_int_equal(cnn_train(&o, &r), AG_OK);
  if (!r.input_bound) fail_msg("0 workers: expected input-bound, verdict: %s", r.verdict);
  assert_non_null(strstr(r.verdict, "input-bound"));
  o.workers = 16; /* together a batch every 6 ms: ahead of any step */
  assert_int_equal(cnn_train(&o, &r), AG_OK);
  if (r.input_bound) fail_msg("16 workers: expected not input-bound, verdict: %s", r.verdict);
  assert_non_null(strstr(r.verdict, "compute-bound"));
}

static void test_bad_inputs(void **state) {
  cnn_options o = small(NULL);
  o.data_dir = "/nonexistent/fashion";
  cnn_result r;
  assert_int_equal(cnn_train(&o, &r), AG_ERR_IO);
  assert_non_null(strstr(ag_last_error(), "/nonexistent/fashion/train-images-idx3-ubyte.gz"));
  o = small(NULL);
  o.batch = 0;
  assert_int_equal(cnn_train(&o, &r), AG_ERR_INVALID);
  o = small(NULL);
  o.resume = AG_TEST_TMPDIR "/no_such_checkpoint.safetensors";
  assert_int_not_equal(cnn_train(&o, &r), AG_OK);

  ag_conv2d_layer c;
  ag_conv2d_params g3 = {{1, 1}, {0, 0}, {1, 1}, 3};
  assert_int_equal(ag_conv2d_layer_init(&c, AG_CPU, AG_F32, 4, 6, 3, 3, &g3, true, NULL), AG_ERR_SHAPE);
  assert_null(c.weight);
  assert_int_equal(ag_conv2d_layer_init(&c, AG_CPU, AG_F32, 3, 6, 3, 3, &g3, true, NULL), AG_OK);
  assert_int_equal(ag_tensor_shape(c.weight)[1], 1);
  ag_conv2d_layer_free(&c);
  ag_batch_norm2d bn;
  assert_int_equal(ag_batch_norm2d_init(&bn, AG_CPU, AG_F32, 4, 2.0, 1e-5), AG_ERR_INVALID);
  assert_int_equal(ag_batch_norm2d_init(&bn, AG_CPU, AG_F32, 4, 0.1, 1e-5), AG_OK);
  assert_false(ag_tensor_requires_grad(bn.running_mean));
  assert_true(ag_tensor_requires_grad(bn.weight));
  ag_batch_norm2d_free(&bn);
}

/* Data parallelism: 2 in-process replicas (cnn_options.group) against one
 * device with batch norm over the same 2 row shards (bn_shards), on batches
 * of 60 rows and a last one of 10; 1e-4 relative on the losses (the order
 * of f32 additions differs, docs/distributed.md). */
typedef struct replica_arg {
  cnn_options o;
  cnn_result r;
  ag_status st;
} replica_arg;

static void *replica_main(void *p) {
  replica_arg *a = p;
  a->st = cnn_train(&a->o, &a->r);
  return NULL;
}

static void test_replicas(void **state) {
  if (!have_data()) skip();
  cnn_options o = small(NULL);
  o.train_limit = 250;
  o.test_limit = 100;
  o.batch = 60;
  o.workers = 0;
  o.bucket_bytes = 4096;
  ag_device devs[2] = {AG_CPU, AG_CPU};
  ag_group *g[2];
  assert_int_equal(ag_group_create_inproc(2, devs, NULL, g), AG_OK);
  replica_arg a[2];
  pthread_t th[2];
  for (int i = 0; i < 2; i++) {
    memset(&a[i], 0, sizeof a[i]);
    a[i].o = o;
    a[i].o.group = g[i];
    assert_int_equal(pthread_create(&th[i], NULL, replica_main, &a[i]), 0);
  }
  for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
  for (int i = 0; i < 2; i++) ag_group_destroy(g[i]);
  assert_int_equal(a[0].st, AG_OK);
  assert_int_equal(a[1].st, AG_OK);
  assert_int_equal(a[0].r.steps, 5);
  /* every rank holds the whole batch's loss */
  assert_true(a[0].r.last_loss == a[1].r.last_loss);
  cnn_options one = o;
  one.bn_shards = 2;
  cnn_result r;
  assert_int_equal(cnn_train(&one, &r), AG_OK);
  if (!(fabs(a[0].r.first_loss - r.first_loss) <= 1e-4 * fabs(r.first_loss) &&
        fabs(a[0].r.last_loss - r.last_loss) <= 1e-4 * fabs(r.last_loss)))
    fail_msg("replicas: losses %.7f .. %.7f, one device with 2 batch-norm shards %.7f .. %.7f", a[0].r.first_loss,
             a[0].r.last_loss, r.first_loss, r.last_loss);
  /* without the shards the batch statistics differ: so does the loss */
  one.bn_shards = 0;
  cnn_result whole;
  assert_int_equal(cnn_train(&one, &whole), AG_OK);
  assert_true(fabs(whole.last_loss - r.last_loss) > 1e-6);
  /* bn_shards is a one-device setting */
  assert_int_equal(ag_group_create_inproc(1, devs, NULL, g), AG_OK);
  one.group = g[0];
  one.bn_shards = 2;
  assert_int_equal(cnn_train(&one, &whole), AG_ERR_INVALID);
  ag_group_destroy(g[0]);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_learns_and_resumes),
      cmocka_unit_test(test_input_bound_verdict),
      cmocka_unit_test(test_bad_inputs),
      cmocka_unit_test(test_replicas),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
