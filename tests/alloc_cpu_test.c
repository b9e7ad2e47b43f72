/* The caching allocator on the CPU backend (or AG_TEST_DEVICE, e.g. gpuemu:0,
 * whose expandable segments run the GPU backends' granule mapping) through
 * the public API: tensors
 * allocate through it, the cap and fault injection produce clean, recoverable
 * AG_ERR_OOM, expandable segments really commit memory (mmap + mprotect), and
 * stream-ordered reuse holds with the backend's threaded streams. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "anygrad/anygrad.h"
#include "test_device.h"
#include "runtime/devstate.h"
#include "memory/block.h"

#define MiB ((size_t)1 << 20)

static ag_memory_stats stats(void) {
  ag_memory_stats s;
  assert_int_equal(ag_memory_stats_get(TEST_DEV, &s), AG_OK);
  return s;
}

/* Sum of t's elements, read on the host (the scalar is released here). */
static double sum_item(ag_tensor *t) {
  ag_tensor *s = ag_sum(t, 0, NULL, false);
  double v = s ? ag_item(s) : -1.0;
  ag_tensor_release(s);
  return v;
}

static int setup(void **state) {
  /* Each test starts from the defaults with nothing cached. */
  assert_int_equal(ag_alloc_configure(TEST_DEV, "expandable_segments:0,caching:1"), AG_OK);
  assert_int_equal(ag_memory_set_cap(TEST_DEV, 0), AG_OK);
  assert_int_equal(ag_alloc_inject_failure(TEST_DEV, 0, 0), AG_OK);
  assert_int_equal(ag_memory_empty_cache(TEST_DEV), AG_OK);
  return 0;
}

static void test_tensors_allocate_through_cache(void **state) {
  ag_memory_stats s0 = stats();
  int64_t shape[] = {1000};
  ag_tensor *t = ag_full(TEST_DEV, AG_F32, 1, shape, 2.5);
  assert_non_null(t);
  ag_memory_stats s = stats();
  assert_int_equal(s.allocated_bytes[AG_POOL_ALL].current - s0.allocated_bytes[AG_POOL_ALL].current,
                   4096);
  assert_int_equal(s.requested_bytes[AG_POOL_ALL].current - s0.requested_bytes[AG_POOL_ALL].current,
                   4000);
  assert_true(sum_item(t) > 0); /* memory is usable */
  ag_tensor_release(t);
  s = stats();
  assert_int_equal(s.allocated_bytes[AG_POOL_ALL].current, s0.allocated_bytes[AG_POOL_ALL].current);
  /* The block is cached: the same request costs no raw allocation. */
  int64_t raw = s.num_device_alloc;
  t = ag_zeros(TEST_DEV, AG_F32, 1, shape);
  assert_int_equal(stats().num_device_alloc, raw);
  ag_tensor_release(t);
}

static void test_cap_oom_and_recovery(void **state) {
  assert_int_equal(ag_memory_set_cap(TEST_DEV, 64 * MiB), AG_OK);
  int64_t big[] = {20 * 1000 * 1000}; /* 80 MB of f32 */
  ag_error_clear();
  ag_tensor *t = ag_empty(TEST_DEV, AG_F32, 1, big);
  assert_null(t);
  assert_int_equal(ag_last_status(), AG_ERR_OOM);
  const char *m = ag_last_error();
  char want[64], dev[32];
  snprintf(want, sizeof want, "out of memory on %s", ag_device_str(TEST_DEV, dev, sizeof dev));
  assert_non_null(strstr(m, want));
  assert_non_null(strstr(m, "capped at 64.00 MiB"));
  assert_non_null(strstr(m, "Hint:"));
  ag_memory_stats s = stats();
  assert_true(s.num_ooms >= 1);
  /* The program goes on with a smaller batch. */
  int64_t small[] = {4 * 1000 * 1000};
  t = ag_full(TEST_DEV, AG_F32, 1, small, 1.0);
  assert_non_null(t);
  assert_true(sum_item(t) == 4e6);
  ag_tensor_release(t);
  assert_int_equal(ag_memory_set_fraction(TEST_DEV, 2.0), AG_ERR_INVALID);
  assert_int_equal(ag_memory_set_cap(TEST_DEV, 0), AG_OK);
}

/* empty_cache trims a segment's free tail at a granule boundary inside
 * what one earlier growth mapped: on a GPU backend that is only possible
 * when every granule is its own physical allocation (cuMemUnmap refuses
 * part of one), which gpuemu's strict emulation of it checks. */
static void test_expandable_trim_inside_growth(void **state) {
  assert_int_equal(ag_alloc_configure(TEST_DEV, "expandable_segments:1"), AG_OK);
  assert_int_equal(ag_memory_empty_cache(TEST_DEV), AG_OK);
  int64_t r0 = stats().reserved_bytes[AG_POOL_LARGE].current;
  int64_t big[] = {6 * MiB / 4}, small[] = {3 * MiB / 8};
  ag_tensor *a = ag_full(TEST_DEV, AG_F32, 1, big, 1.0);
  assert_non_null(a);
  assert_int_equal(stats().reserved_bytes[AG_POOL_LARGE].current - r0, 6 * MiB);
  ag_tensor_release(a);
  ag_tensor *b = ag_full(TEST_DEV, AG_F32, 1, small, 2.0); /* the head of the same segment */
  assert_non_null(b);
  assert_int_equal(ag_memory_empty_cache(TEST_DEV), AG_OK);
  assert_int_equal(stats().reserved_bytes[AG_POOL_LARGE].current - r0, 2 * MiB);
  assert_true(sum_item(b) == 2.0 * (double)small[0]);
  ag_tensor_release(b);
  assert_int_equal(ag_memory_empty_cache(TEST_DEV), AG_OK);
  assert_int_equal(stats().reserved_bytes[AG_POOL_LARGE].current, r0);
  assert_int_equal(ag_alloc_configure(TEST_DEV, "expandable_segments:0"), AG_OK);
}

static void test_expandable_segments_commit_memory(void **state) {
  assert_int_equal(ag_alloc_configure(TEST_DEV, "expandable_segments:1"), AG_OK);
  ag_memory_stats s = stats();
  assert_true(s.expandable_segments);
  int64_t r0 = s.reserved_bytes[AG_POOL_LARGE].current;
  ag_tensor *ts[6];
  for (int i = 0; i < 6; i++) {
    int64_t shape[] = {(int64_t)(i + 1) * 300 * 1000};
    ts[i] = ag_full(TEST_DEV, AG_F32, 1, shape, (double)i + 1);
    assert_non_null(ts[i]);
  }
  for (int i = 0; i < 6; i++) /* writes and reads go to committed pages */
    assert_true(sum_item(ts[i]) == (double)(i + 1) * (i + 1) * 300 * 1000);
  s = stats();
  /* one large segment, reserved rounded to 2 MiB over 25.2 MB of requests */
  assert_int_equal(s.segment[AG_POOL_LARGE].current, 1);
  assert_true(s.reserved_bytes[AG_POOL_LARGE].current - r0 <= (int64_t)(26 * MiB));
  for (int i = 0; i < 6; i++) ag_tensor_release(ts[i]);
  assert_int_equal(ag_memory_empty_cache(TEST_DEV), AG_OK);
  s = stats();
  assert_int_equal(s.segment[AG_POOL_LARGE].current, 0);
  assert_int_equal(ag_alloc_configure(TEST_DEV, "expandable_segments:0"), AG_OK);
}

/* A small training-like sequence: a linear model, forward, loss, backward. */
static ag_status train_steps(void) {
  ag_status st = AG_OK;
  int64_t ws[] = {512, 256}, xs[] = {64, 512}; /* 512 KiB weights: several segments */
  ag_tensor *w = ag_full(TEST_DEV, AG_F32, 2, ws, 0.01);
  if (!w || ag_tensor_set_requires_grad(w, true) != AG_OK) {
    st = ag_last_status();
    ag_tensor_release(w);
    return st;
  }
  for (int step = 0; step < 2 && st == AG_OK; step++) {
    ag_scope_begin();
    ag_tensor *x = ag_full(TEST_DEV, AG_F32, 2, xs, 1.0 + step);
    ag_tensor *y = ag_relu(ag_matmul(x, w));
    ag_tensor *loss = ag_mean(ag_mul(y, y), 0, NULL, false);
    if (!loss) st = ag_last_status();
    if (st == AG_OK) st = ag_backward(loss, NULL, false);
    if (st == AG_OK && !ag_tensor_grad(w)) st = AG_ERR_INTERNAL;
    ag_status se = ag_scope_end();
    if (st == AG_OK) st = se;
  }
  ag_tensor_release(w);
  return st;
}

static void test_fault_injection_training(void **state) {
  int64_t live0 = ag_live_tensors();
  ag_memory_stats s0 = stats();
  assert_int_equal(ag_memory_empty_cache(TEST_DEV), AG_OK);
  int64_t raw0 = stats().num_device_alloc;
  assert_int_equal(train_steps(), AG_OK);
  int raw = (int)(stats().num_device_alloc - raw0);
  assert_true(raw >= 1);
  for (int n = 1; n <= raw + 1; n++) {
    assert_int_equal(ag_memory_empty_cache(TEST_DEV), AG_OK);
    assert_int_equal(ag_alloc_inject_failure(TEST_DEV, n, -1), AG_OK);
    ag_error_clear();
    ag_status st = train_steps();
    assert_int_equal(ag_alloc_inject_failure(TEST_DEV, 0, 0), AG_OK);
    if (n <= raw) {
      assert_int_equal(st, AG_ERR_OOM);
      assert_non_null(strstr(ag_last_error(), "injected failure"));
    } else {
      assert_int_equal(st, AG_OK);
    }
    if (ag_live_tensors() != live0)
      fprintf(stderr, "n=%d/%d: %s (%s) -> live tensors %lld (was %lld)\n", n, raw, ag_status_name(st), ag_last_error(),
              (long long)ag_live_tensors(), (long long)live0);
    /* nothing leaked: tensors and allocated bytes are back where they were */
    assert_int_equal(ag_live_tensors(), live0);
    assert_int_equal(stats().allocated_bytes[AG_POOL_ALL].current,
                     s0.allocated_bytes[AG_POOL_ALL].current);
  }
  assert_int_equal(train_steps(), AG_OK); /* and it still trains */
}

static void test_stream_ordered_reuse_threaded(void **state) {
  ag_devstate *ds = ag__devstate(TEST_DEV);
  assert_non_null(ds);
  ag_stream *s1 = ag_stream_create(TEST_DEV);
  assert_non_null(s1);
  /* Freed on its own stream: the same block comes back at once. */
  ag_block *a = NULL, *b = NULL, *c = NULL;
  assert_int_equal(ag__alloc(ds, 4096, s1, AG_MEM_OTHER, &a), AG_OK);
  void *base = ag__block_base(a);
  size_t off = ag__block_offset(a);
  ag__free(a);
  assert_int_equal(ag__alloc(ds, 4096, s1, AG_MEM_OTHER, &b), AG_OK);
  assert_true(ag__block_base(b) == base && ag__block_offset(b) == off);
  /* Used on the default stream behind queued work: reused only once that
   * work is done, and nothing waits for it. */
  ag_stream *s0 = ag_stream_default(TEST_DEV);
  ag_stream *prev = ag_stream_set_current(TEST_DEV, s0);
  int64_t big[] = {8 * 1000 * 1000};
  ag_tensor *work = ag_full(TEST_DEV, AG_F32, 1, big, 1.0); /* queued on s0 */
  ag_tensor *work2 = ag_mul_scalar(work, 3.0);
  ag__block_record_stream(b, s0);
  uint64_t syncs = ag_sync_count();
  ag__free(b);
  assert_int_equal(ag_sync_count(), syncs);
  /* Whether the event has completed yet is up to the worker thread; the
   * fake-backend test checks the exact order. Here: no hang, and after the
   * stream is done the block is reused. */
  assert_int_equal(ag__alloc(ds, 4096, s1, AG_MEM_OTHER, &c), AG_OK);
  assert_int_equal(ag_stream_synchronize(s0), AG_OK);
  assert_int_equal(ag__alloc(ds, 4096, s1, AG_MEM_OTHER, &a), AG_OK);
  assert_int_equal(stats().num_pending_events, 0);
  assert_true((ag__block_base(a) == base && ag__block_offset(a) == off) ||
              (ag__block_base(c) == base && ag__block_offset(c) == off));
  ag__free(a);
  ag__free(c);
  ag_tensor_release(work2);
  ag_tensor_release(work);
  ag_stream_set_current(TEST_DEV, prev);
  ag_stream_destroy(s1);
}

static void test_summary_snapshot_errors(void **state) {
  int64_t shape[] = {300};
  ag_mem_category_push(AG_MEM_ACTIVATIONS);
  ag_tensor *t = ag_zeros(TEST_DEV, AG_F32, 1, shape);
  ag_mem_category_pop();
  assert_non_null(t);
  assert_true(stats().category_bytes[AG_MEM_ACTIVATIONS].current >= 1024);
  char buf[8192];
  assert_int_equal(ag_memory_summary(TEST_DEV, buf, sizeof buf), AG_OK);
  char dev[32];
  assert_non_null(strstr(buf, ag_device_str(TEST_DEV, dev, sizeof dev)));
  assert_non_null(strstr(buf, "activations"));
  const char *path = "alloc_cpu_snapshot.json";
  assert_int_equal(ag_memory_snapshot_json(TEST_DEV, path), AG_OK);
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  char head[64] = {0};
  assert_true(fread(head, 1, sizeof head - 1, f) > 0);
  fclose(f);
  remove(path);
  char want[48];
  snprintf(want, sizeof want, "\"device\":\"%s\"", dev);
  assert_non_null(strstr(head, want));
  assert_int_equal(ag_memory_snapshot_json(TEST_DEV, "/nonexistent-dir/x.json"), AG_ERR_IO);
  assert_int_equal(ag_memory_summary(TEST_DEV, NULL, 0), AG_ERR_INVALID);
  assert_int_equal(ag_memory_stats_get(TEST_DEV, NULL), AG_ERR_INVALID);
  ag_memory_stats s;
  assert_int_equal(ag_memory_stats_get((ag_device){AG_BACKEND_CPU, 7}, &s), AG_ERR_DEVICE);
  assert_int_equal(ag_alloc_configure(TEST_DEV, "no_such_key:1"), AG_ERR_INVALID);
  assert_int_equal(ag_alloc_inject_failure(TEST_DEV, -1, 1), AG_ERR_INVALID);
  assert_int_equal(ag_memory_reset_peak(TEST_DEV), AG_OK);
  ag_tensor_release(t);
}

static void test_caching_off(void **state) {
  assert_int_equal(ag_alloc_configure(TEST_DEV, "caching:0"), AG_OK);
  int64_t raw = stats().num_device_alloc, fr = stats().num_device_free;
  int64_t shape[] = {1000};
  for (int i = 0; i < 3; i++) {
    ag_tensor *t = ag_full(TEST_DEV, AG_F32, 1, shape, 1.0);
    assert_true(sum_item(t) == 1000.0);
    ag_tensor_release(t);
  }
  ag_memory_stats s = stats();
  assert_true(s.num_device_alloc - raw >= 3);
  assert_int_equal(s.num_device_alloc - raw, s.num_device_free - fr);
  assert_int_equal(ag_alloc_configure(TEST_DEV, "caching:1"), AG_OK);
}

int main(void) {
  /* The suite sets its own configuration; AG_ALLOC_CONF from CI must parse. */
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup(test_tensors_allocate_through_cache, setup),
      cmocka_unit_test_setup(test_cap_oom_and_recovery, setup),
      cmocka_unit_test_setup(test_expandable_segments_commit_memory, setup),
      cmocka_unit_test_setup(test_expandable_trim_inside_growth, setup),
      cmocka_unit_test_setup(test_fault_injection_training, setup),
      cmocka_unit_test_setup(test_stream_ordered_reuse_threaded, setup),
      cmocka_unit_test_setup(test_summary_snapshot_errors, setup),
      cmocka_unit_test_setup(test_caching_off, setup),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
