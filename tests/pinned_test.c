/* The pinned host caching allocator on threaded CPU streams: rounding and
 * reuse, a block reused only after the copy that reads it has completed
 * (checked by poisoning the block while the copy waits behind a gate), the
 * cache cap, empty_cache, and staging of pageable sources. Labelled "threads". */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "anygrad/anygrad.h"
#include "anygrad/cpu.h"
#include "anygrad/loader.h"
#include "test_device.h"

static void threaded_mode(void **state) {
  assert_non_null(ag_stream_default(AG_CPU));
  assert_int_equal(ag_cpu_stream_mode_get(), AG_CPU_STREAMS_THREADED);
}

static void rounding_and_cache_hits(void **state) {
  ag_pinned_stats s0, s;
  assert_int_equal(ag_pinned_empty_cache(TEST_DEV), AG_OK);
  assert_int_equal(ag_pinned_stats_get(TEST_DEV, &s0), AG_OK);
  void *a, *b;
  assert_int_equal(ag_pinned_alloc(TEST_DEV, 5000, &a), AG_OK);
  assert_int_equal((uintptr_t)a % 4096, 0);
  assert_int_equal(ag_pinned_stats_get(TEST_DEV, &s), AG_OK);
  assert_int_equal(s.allocated_bytes - s0.allocated_bytes, 8192);
  assert_int_equal(s.requested_bytes - s0.requested_bytes, 5000);
  assert_int_equal(s.num_raw_allocs - s0.num_raw_allocs, 1);
  memset(a, 1, 8192); /* the whole rounded block is usable */
  assert_int_equal(ag_pinned_free(a), AG_OK);
  assert_int_equal(ag_pinned_alloc(TEST_DEV, 6000, &b), AG_OK); /* same bucket */
  assert_ptr_equal(a, b);
  assert_int_equal(ag_pinned_stats_get(TEST_DEV, &s), AG_OK);
  assert_int_equal(s.num_cache_hits - s0.num_cache_hits, 1);
  assert_int_equal(s.num_raw_allocs - s0.num_raw_allocs, 1);
  assert_int_equal(ag_pinned_free(b), AG_OK);
  assert_int_equal(ag_pinned_stats_get(TEST_DEV, &s), AG_OK);
  assert_int_equal(s.cached_bytes - s0.cached_bytes, 8192);
  assert_int_equal(s.allocated_bytes, s0.allocated_bytes);
}

static void errors(void **state) {
  void *p;
  int x;
  assert_int_equal(ag_pinned_alloc(TEST_DEV, 0, &p), AG_ERR_INVALID);
  assert_int_equal(ag_pinned_alloc(TEST_DEV, 10, NULL), AG_ERR_INVALID);
  assert_int_equal(ag_pinned_free(&x), AG_ERR_INVALID);
  assert_int_equal(ag_pinned_record_stream(&x, ag_stream_default(TEST_DEV)), AG_ERR_INVALID);
  assert_int_equal(ag_pinned_free(NULL), AG_OK);
}

#define NBYTES (1 << 20)

/* Queue on s a wait for work that takes a while on another stream, so
 * everything queued on s afterwards is still pending for a while. */
static ag_tensor *gate(ag_stream *s, ag_stream *slow, ag_event *e) {
  ag_stream *prev = ag_stream_set_current(TEST_DEV, slow);
  /* Four 1024^3 products take long enough on a real device or the CPU; the
   * emulated GPU runs them 10x slower (50x under ASan), so its run delays
   * each queued item instead (AG_GPUEMU_DELAY_US) and small products do. */
  const char *delay = getenv("AG_GPUEMU_DELAY_US");
  int64_t side = delay && atol(delay) > 0 ? 128 : 1024;
  int64_t n[2] = {side, side};
  ag_tensor *a = ag_ones(TEST_DEV, AG_F32, 2, n);
  ag_tensor *m = a;
  for (int i = 0; i < 4; i++) {
    ag_tensor *next = ag_matmul(m, a);
    if (m != a) ag_tensor_release(m);
    m = next;
  }
  assert_int_equal(ag_event_record(e, slow), AG_OK);
  ag_stream_set_current(TEST_DEV, prev);
  assert_int_equal(ag_stream_wait_event(s, e), AG_OK);
  ag_tensor_release(a);
  return m;
}

static void block_reused_only_after_its_copy(void **state) {
  ag_stream *s = ag_stream_create(TEST_DEV), *slow = ag_stream_create(TEST_DEV);
  ag_event *e = ag_event_create(TEST_DEV, false);
  int64_t n[1] = {NBYTES / 4};
  ag_tensor *dst = ag_zeros(TEST_DEV, AG_F32, 1, n);
  assert_int_equal(ag_device_synchronize(TEST_DEV), AG_OK);
  float *src;
  assert_int_equal(ag_pinned_alloc(TEST_DEV, NBYTES, (void **)&src), AG_OK);
  for (int i = 0; i < NBYTES / 4; i++) src[i] = (float)i;

  ag_tensor *g = gate(s, slow, e);
  assert_int_equal(ag_copy_from_host_async(dst, src, NBYTES, s), AG_OK);
  assert_false(ag_stream_query(s)); /* the copy waits behind the gate */
  assert_int_equal(ag_pinned_free(src), AG_OK);
  ag_pinned_stats st;
  assert_int_equal(ag_pinned_stats_get(TEST_DEV, &st), AG_OK);
  assert_true(st.pending_bytes >= NBYTES);

  /* Same size while the copy is pending: must be another block. Poison it:
   * if it were src, the copy would read the poison. */
  float *other;
  assert_int_equal(ag_pinned_alloc(TEST_DEV, NBYTES, (void **)&other), AG_OK);
  assert_ptr_not_equal(other, src);
  memset(other, 0xff, NBYTES);

  assert_int_equal(ag_stream_synchronize(s), AG_OK);
  static float h[NBYTES / 4];
  assert_int_equal(ag_to_host(dst, h, NBYTES), AG_OK);
  for (int i = 0; i < NBYTES / 4; i++)
    if (h[i] != (float)i) fail_msg("element %d is %g: the block was reused before its copy", i, h[i]);

  /* Copy done: the block comes back from the cache. */
  float *again;
  assert_int_equal(ag_pinned_alloc(TEST_DEV, NBYTES, (void **)&again), AG_OK);
  assert_ptr_equal(again, src);
  assert_int_equal(ag_pinned_free(again), AG_OK);
  assert_int_equal(ag_pinned_free(other), AG_OK);
  ag_tensor_release(dst);
  ag_tensor_release(g);
  ag_stream_destroy(s);
  ag_stream_destroy(slow);
  ag_event_destroy(e);
}

static void pageable_source_is_staged(void **state) {
  ag_stream *s = ag_stream_create(TEST_DEV), *slow = ag_stream_create(TEST_DEV);
  ag_event *e = ag_event_create(TEST_DEV, false);
  int64_t n[1] = {4096};
  ag_tensor *dst = ag_zeros(TEST_DEV, AG_I32, 1, n);
  assert_int_equal(ag_device_synchronize(TEST_DEV), AG_OK);
  static int32_t buf[4096];
  for (int i = 0; i < 4096; i++) buf[i] = i * 3;
  ag_pinned_stats s0, s1;
  assert_int_equal(ag_pinned_stats_get(TEST_DEV, &s0), AG_OK);
  uint64_t syncs = ag_sync_count();
  ag_tensor *g = gate(s, slow, e);
  assert_int_equal(ag_copy_from_host_async(dst, buf, sizeof buf, s), AG_OK);
  assert_int_equal(ag_sync_count(), syncs); /* no host sync */
  memset(buf, 0, sizeof buf);                /* the caller may reuse it at once */
  assert_int_equal(ag_stream_synchronize(s), AG_OK);
  static int32_t h[4096];
  assert_int_equal(ag_to_host(dst, h, sizeof h), AG_OK);
  for (int i = 0; i < 4096; i++) assert_int_equal(h[i], i * 3);
  assert_int_equal(ag_pinned_stats_get(TEST_DEV, &s1), AG_OK);
  assert_int_equal(s1.num_staged_copies - s0.num_staged_copies, 1);
  assert_int_equal(ag_copy_from_host_async(dst, buf, 12, s), AG_ERR_INVALID);
  ag_tensor_release(dst);
  ag_tensor_release(g);
  ag_stream_destroy(s);
  ag_stream_destroy(slow);
  ag_event_destroy(e);
}

static void cap_and_empty_cache(void **state) {
  assert_int_equal(ag_pinned_empty_cache(TEST_DEV), AG_OK);
  assert_int_equal(ag_pinned_set_cache_cap(TEST_DEV, 16384), AG_OK);
  ag_pinned_stats s0, s;
  assert_int_equal(ag_pinned_stats_get(TEST_DEV, &s0), AG_OK);
  void *p[3];
  for (int i = 0; i < 3; i++) assert_int_equal(ag_pinned_alloc(TEST_DEV, 8192, &p[i]), AG_OK);
  for (int i = 0; i < 3; i++) assert_int_equal(ag_pinned_free(p[i]), AG_OK);
  assert_int_equal(ag_pinned_stats_get(TEST_DEV, &s), AG_OK);
  assert_true(s.cached_bytes <= 16384);
  assert_int_equal(s.num_raw_frees - s0.num_raw_frees, 1);
  assert_int_equal(s.cache_cap_bytes, 16384);
  assert_int_equal(ag_pinned_empty_cache(TEST_DEV), AG_OK);
  assert_int_equal(ag_pinned_stats_get(TEST_DEV, &s), AG_OK);
  assert_int_equal(s.cached_bytes, 0);
  assert_int_equal(s.num_raw_frees - s0.num_raw_frees, 3);
  assert_int_equal(ag_pinned_set_cache_cap(TEST_DEV, SIZE_MAX), AG_OK);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(threaded_mode),
      cmocka_unit_test(rounding_and_cache_hits),
      cmocka_unit_test(errors),
      cmocka_unit_test(block_reused_only_after_its_copy),
      cmocka_unit_test(pageable_source_is_staged),
      cmocka_unit_test(cap_and_empty_cache),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
