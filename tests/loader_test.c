/* ag_loader on threaded CPU streams: batch order and contents independent of
 * worker timing, shuffling by seed and epoch, drop-last, bucketing, worker
 * errors, shutdown mid-epoch, scope ownership and no host sync in next().
 * Labelled "threads" so CI also runs it under TSan. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "anygrad/anygrad.h"
#include "anygrad/cpu.h"
#include "anygrad/loader.h"
#include "test_device.h"

#define N 103
#define BS 8
#define W 4

/* Field 0: f32 [rows, W], row r = sample*10 + j. Sleeps a random 0-2 ms
 * chosen from the batch and a per-call counter, so workers finish out of
 * order. */
typedef struct delay_ctx {
  int max_delay_us;
  int64_t fail_batch; /* -1: none */
  atomic_int calls;
} delay_ctx;

static ag_status fill_rows(void *user, int64_t epoch, int64_t index, const int64_t *samples,
                           int64_t rows, ag_loader_batch *b) {
  delay_ctx *c = user;
  int k = atomic_fetch_add(&c->calls, 1);
  if (c->max_delay_us) {
    unsigned seed = (unsigned)(k * 2654435761u ^ (unsigned)index);
    usleep((useconds_t)(rand_r(&seed) % c->max_delay_us));
  }
  if (index == c->fail_batch)
    return ag_error_set(AG_ERR_IO, "cannot read shard %lld", (long long)(index * 100 + epoch));
  float *x = ag_loader_batch_data(b, 0);
  const int64_t *shape = ag_loader_batch_shape(b, 0);
  if (!x || shape[0] != rows || shape[1] != W) return ag_error_set(AG_ERR_INTERNAL, "bad batch layout");
  for (int64_t r = 0; r < rows; r++)
    for (int j = 0; j < W; j++) x[r * W + j] = (float)(samples[r] * 10 + j);
  return AG_OK;
}

static ag_loader_config base_config(delay_ctx *c) {
  ag_loader_config cfg = {0};
  cfg.device = TEST_DEV;
  cfg.num_samples = N;
  cfg.batch_size = BS;
  cfg.shuffle = true;
  cfg.seed = 7;
  cfg.epochs = 3;
  cfg.num_workers = 4;
  cfg.prefetch = 6;
  cfg.n_fields = 1;
  cfg.fields[0] = (ag_loader_field){.dtype = AG_F32, .ndim = 2, .shape = {0, W}};
  cfg.fill = fill_rows;
  cfg.user = c;
  return cfg;
}

/* Run a loader to the end; record the sample order (epochs * N entries). */
static int64_t run_order(const ag_loader_config *cfg, int64_t *order, int64_t cap) {
  ag_loader *l = ag_loader_create(cfg);
  assert_non_null(l);
  int64_t n = 0, expect_epoch = 0, expect_index = 0;
  for (;;) {
    ag_tensor *t[1];
    ag_loader_batch_info info;
    assert_int_equal(ag_loader_next(l, t, &info), AG_OK);
    if (info.end) {
      assert_null(t[0]);
      break;
    }
    assert_int_equal(info.epoch, expect_epoch);
    assert_int_equal(info.index, expect_index);
    if (++expect_index == ag_loader_batches_per_epoch(l)) {
      expect_index = 0;
      expect_epoch++;
    }
    assert_int_equal(ag_tensor_dim(t[0], 0), info.rows);
    float h[BS * W];
    assert_int_equal(ag_to_host(t[0], h, (size_t)info.rows * W * sizeof(float)), AG_OK);
    for (int64_t r = 0; r < info.rows; r++) {
      int64_t sample = (int64_t)h[r * W] / 10;
      for (int j = 0; j < W; j++) assert_float_equal(h[r * W + j], sample * 10 + j, 0);
      assert_true(n < cap);
      order[n++] = sample;
    }
    ag_tensor_release(t[0]);
  }
  ag_loader_destroy(l);
  return n;
}

static void threaded_mode(void **state) {
  assert_non_null(ag_stream_default(AG_CPU));
  assert_int_equal(ag_cpu_stream_mode_get(), AG_CPU_STREAMS_THREADED);
}

static void order_is_deterministic_under_random_delays(void **state) {
  delay_ctx c1 = {.max_delay_us = 2000, .fail_batch = -1}, c2 = {.max_delay_us = 2000, .fail_batch = -1};
  ag_loader_config cfg1 = base_config(&c1), cfg2 = base_config(&c2);
  cfg2.num_workers = 3; /* other timing, same order */
  static int64_t a[3 * N], b[3 * N];
  assert_int_equal(run_order(&cfg1, a, 3 * N), 3 * N);
  assert_int_equal(run_order(&cfg2, b, 3 * N), 3 * N);
  assert_memory_equal(a, b, sizeof a);
  /* every epoch is a permutation of the dataset, and epochs differ */
  for (int e = 0; e < 3; e++) {
    int seen[N] = {0};
    for (int i = 0; i < N; i++) seen[a[e * N + i]]++;
    for (int i = 0; i < N; i++) assert_int_equal(seen[i], 1);
  }
  assert_memory_not_equal(a, a + N, N * sizeof(int64_t));
  /* a shuffled order is not the identity */
  int identity = 0;
  for (int i = 0; i < N; i++) identity += a[i] == i;
  assert_true(identity < N / 2);
  /* another seed gives another order */
  delay_ctx c3 = {.fail_batch = -1};
  ag_loader_config cfg3 = base_config(&c3);
  cfg3.seed = 8;
  assert_int_equal(run_order(&cfg3, b, 3 * N), 3 * N);
  assert_memory_not_equal(a, b, N * sizeof(int64_t));
}

/* fill_on_caller: the same batches in the same order as with workers, made
 * on the thread calling next (no fill runs ahead of it), and an error of
 * the fill surfaces from that next. */
static pthread_t g_caller;
static atomic_int g_foreign;
static ag_status fill_on_thread(void *user, int64_t epoch, int64_t index, const int64_t *samples,
                                int64_t rows, ag_loader_batch *b) {
  if (!pthread_equal(pthread_self(), g_caller)) atomic_fetch_add(&g_foreign, 1);
  return fill_rows(user, epoch, index, samples, rows, b);
}

static void fill_on_caller_thread(void **state) {
  delay_ctx c1 = {.max_delay_us = 500, .fail_batch = -1}, c2 = {.max_delay_us = 500, .fail_batch = -1};
  ag_loader_config cfg1 = base_config(&c1), cfg2 = base_config(&c2);
  cfg2.fill_on_caller = true;
  cfg2.fill = fill_on_thread;
  g_caller = pthread_self();
  atomic_store(&g_foreign, 0);
  static int64_t a[3 * N], b[3 * N];
  assert_int_equal(run_order(&cfg1, a, 3 * N), 3 * N);
  assert_int_equal(run_order(&cfg2, b, 3 * N), 3 * N);
  assert_memory_equal(a, b, sizeof a);
  assert_int_equal(atomic_load(&g_foreign), 0);
  assert_int_equal(atomic_load(&c2.calls), 3 * ((N + BS - 1) / BS)); /* one fill per batch, none ahead */

  delay_ctx c3 = {.fail_batch = 2};
  ag_loader_config cfg3 = base_config(&c3);
  cfg3.fill_on_caller = true;
  ag_loader *l = ag_loader_create(&cfg3);
  assert_non_null(l);
  ag_tensor *t[1];
  ag_loader_batch_info info;
  for (int i = 0; i < 2; i++) {
    assert_int_equal(ag_loader_next(l, t, &info), AG_OK);
    ag_tensor_release(t[0]);
  }
  assert_int_equal(atomic_load(&c3.calls), 2);
  assert_int_equal(ag_loader_next(l, t, &info), AG_ERR_IO);
  assert_non_null(strstr(ag_last_error(), "cannot read shard"));
  ag_loader_destroy(l);
}

static void no_shuffle_and_drop_last(void **state) {
  delay_ctx c = {.max_delay_us = 500, .fail_batch = -1};
  ag_loader_config cfg = base_config(&c);
  cfg.shuffle = false;
  cfg.epochs = 1;
  static int64_t o[N];
  assert_int_equal(run_order(&cfg, o, N), N);
  for (int i = 0; i < N; i++) assert_int_equal(o[i], i);
  cfg.drop_last = true;
  cfg.shuffle = true;
  assert_int_equal(run_order(&cfg, o, N), (N / BS) * BS);
  int seen[N] = {0};
  for (int i = 0; i < (N / BS) * BS; i++) assert_int_equal(seen[o[i]]++, 0);
}

static void worker_error_surfaces(void **state) {
  delay_ctx c = {.max_delay_us = 1000, .fail_batch = 5};
  ag_loader_config cfg = base_config(&c);
  ag_loader *l = ag_loader_create(&cfg);
  assert_non_null(l);
  ag_tensor *t[1];
  ag_loader_batch_info info;
  for (int i = 0; i < 5; i++) {
    assert_int_equal(ag_loader_next(l, t, &info), AG_OK);
    assert_int_equal(info.index, i);
    ag_tensor_release(t[0]);
  }
  assert_int_equal(ag_loader_next(l, t, &info), AG_ERR_IO);
  assert_null(t[0]);
  assert_non_null(strstr(ag_last_error(), "cannot read shard 500"));
  assert_non_null(strstr(ag_last_error(), "batch 5 of epoch 0"));
  assert_int_equal(ag_loader_next(l, t, &info), AG_ERR_STATE);
  assert_non_null(strstr(ag_last_error(), "cannot read shard 500"));
  ag_loader_destroy(l);
}

static void shutdown_mid_epoch(void **state) {
  int64_t live0 = ag_live_tensors();
  delay_ctx c = {.max_delay_us = 3000, .fail_batch = -1};
  ag_loader_config cfg = base_config(&c);
  cfg.num_samples = 100000;
  cfg.prefetch = 8;
  ag_loader *l = ag_loader_create(&cfg);
  assert_non_null(l);
  ag_tensor *t[1];
  ag_loader_batch_info info;
  for (int i = 0; i < 3; i++) {
    assert_int_equal(ag_loader_next(l, t, &info), AG_OK);
    ag_tensor_release(t[0]);
  }
  usleep(5000); /* workers mid-fill, copies possibly queued */
  ag_loader_destroy(l);
  assert_true(atomic_load(&c.calls) < 3 + 8 + 4 + 1);
  assert_int_equal(ag_live_tensors(), live0);
  ag_pinned_stats ps;
  assert_int_equal(ag_pinned_stats_get(TEST_DEV, &ps), AG_OK);
  assert_int_equal(ps.allocated_bytes, 0);
}

static void tensors_follow_scopes_and_next_never_syncs(void **state) {
  int64_t live0 = ag_live_tensors();
  delay_ctx c = {.fail_batch = -1};
  ag_loader_config cfg = base_config(&c);
  ag_loader *l = ag_loader_create(&cfg);
  assert_non_null(l);
  ag_set_sync_debug(AG_SYNC_DEBUG_ERROR); /* any host sync in next() would fail */
  uint64_t syncs = ag_sync_count();
  for (int step = 0; step < 10; step++) {
    ag_scope_begin();
    ag_tensor *t[1];
    ag_loader_batch_info info;
    assert_int_equal(ag_loader_next(l, t, &info), AG_OK);
    ag_tensor *y = ag_mul_scalar(t[0], 2.0);
    assert_non_null(y);
    assert_int_equal(ag_scope_end(), AG_OK); /* releases t[0] and y */
  }
  assert_int_equal(ag_sync_count(), syncs);
  ag_set_sync_debug(AG_SYNC_DEBUG_OFF);
  assert_int_equal(ag_device_synchronize(TEST_DEV), AG_OK);
  ag_loader_destroy(l); /* it held the batch copied ahead */
  assert_int_equal(ag_live_tensors(), live0);
}

/* Variable-length field: sample s has length s % 13 + 1, padded with -1 to a
 * bucket of {4, 8, 16}. */
static ag_status fill_var(void *user, int64_t epoch, int64_t index, const int64_t *samples, int64_t rows,
                          ag_loader_batch *b) {
  int64_t longest = 0;
  for (int64_t r = 0; r < rows; r++)
    if (samples[r] % 13 + 1 > longest) longest = samples[r] % 13 + 1;
  int64_t L;
  ag_status st = ag_loader_batch_set_length(b, 0, longest, &L);
  if (st != AG_OK) return st;
  int32_t *x = ag_loader_batch_data(b, 0);
  for (int64_t r = 0; r < rows; r++)
    for (int64_t j = 0; j < samples[r] % 13 + 1; j++) x[r * L + j] = (int32_t)samples[r];
  return AG_OK;
}

static void bucketing_pads_to_fixed_lengths(void **state) {
  ag_loader_config cfg = {0};
  cfg.device = TEST_DEV;
  cfg.num_samples = 200;
  cfg.batch_size = 4;
  cfg.shuffle = true;
  cfg.num_workers = 2;
  cfg.n_fields = 1;
  cfg.fields[0] = (ag_loader_field){.dtype = AG_I32, .ndim = 2, .var_dim = 1, .n_buckets = 3,
                                    .buckets = {4, 8, 16}, .pad_value = -1};
  cfg.fill = fill_var;
  ag_loader *l = ag_loader_create(&cfg);
  assert_non_null(l);
  int used[17] = {0};
  for (;;) {
    ag_tensor *t[1];
    ag_loader_batch_info info;
    assert_int_equal(ag_loader_next(l, t, &info), AG_OK);
    if (info.end) break;
    int64_t L = ag_tensor_dim(t[0], 1);
    assert_int_equal(L, info.bucket[0]);
    assert_true(L == 4 || L == 8 || L == 16);
    used[L]++;
    int32_t h[4 * 16];
    assert_int_equal(ag_to_host(t[0], h, (size_t)(4 * L) * sizeof(int32_t)), AG_OK);
    int64_t longest = 0;
    for (int r = 0; r < 4; r++) {
      int32_t s = h[r * L];
      int64_t len = s % 13 + 1;
      if (len > longest) longest = len;
      for (int64_t j = 0; j < L; j++) assert_int_equal(h[r * L + j], j < len ? s : -1);
    }
    assert_true(longest <= L && (L == 4 || longest > L / 2)); /* the smallest bucket that fits */
    ag_tensor_release(t[0]);
  }
  assert_true(used[4] + used[8] + used[16] == 50);
  ag_loader_destroy(l);
}

static void bad_config_is_an_error(void **state) {
  delay_ctx c = {.fail_batch = -1};
  ag_loader_config cfg = base_config(&c);
  cfg.batch_size = 0;
  assert_null(ag_loader_create(&cfg));
  assert_int_equal(ag_last_status(), AG_ERR_INVALID);
  cfg = base_config(&c);
  cfg.fields[0].var_dim = 1; /* no buckets */
  assert_null(ag_loader_create(&cfg));
  assert_non_null(strstr(ag_last_error(), "buckets"));
  assert_null(ag_loader_create(NULL));
  /* A batch whose byte size wraps int64 (batch 2^40 x 2^30 f32) is refused
   * before anything is allocated. */
  cfg = base_config(&c);
  cfg.batch_size = (int64_t)1 << 40;
  cfg.fields[0].shape[1] = (int64_t)1 << 30;
  ag_error_clear();
  assert_null(ag_loader_create(&cfg));
  assert_int_equal(ag_last_status(), AG_ERR_SHAPE);
  assert_non_null(strstr(ag_last_error(), "too large"));
  /* batches x epochs overflowing int64 */
  cfg = base_config(&c);
  cfg.num_samples = INT64_MAX;
  cfg.batch_size = 1;
  cfg.epochs = 4;
  ag_error_clear();
  assert_null(ag_loader_create(&cfg));
  assert_int_equal(ag_last_status(), AG_ERR_INVALID);
  assert_non_null(strstr(ag_last_error(), "overflows"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(threaded_mode),
      cmocka_unit_test(order_is_deterministic_under_random_delays),
      cmocka_unit_test(fill_on_caller_thread),
      cmocka_unit_test(no_shuffle_and_drop_last),
      cmocka_unit_test(worker_error_surfaces),
      cmocka_unit_test(shutdown_mid_epoch),
      cmocka_unit_test(tensors_follow_scopes_and_next_never_syncs),
      cmocka_unit_test(bucketing_pads_to_fixed_lengths),
      cmocka_unit_test(bad_config_is_an_error),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
