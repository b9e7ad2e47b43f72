/* Stream semantics on the threaded CPU mode (one worker per stream): work on
 * a stream runs in order, events order two streams, host reads wait for the
 * producing work, and timing events measure it. Labelled "threads" for TSan. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <cmocka.h>

#include "anygrad/anygrad.h"
#include "anygrad/cpu.h"

#define BIG (1 << 22)

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void threaded_mode(void **state) {
  assert_int_equal(ag_cpu_stream_mode_get(), AG_CPU_STREAMS_THREADED);
}

/* A chain of in-place fills and reads on one stream: the read sees the last
 * fill only if the queue runs in order. */
static void one_stream_in_order(void **state) {
  ag_stream *s = ag_stream_create(AG_CPU);
  assert_non_null(s);
  ag_stream_set_current(AG_CPU, s);
  assert_ptr_equal(ag_stream_current(AG_CPU), s);
  int64_t n[1] = {BIG};
  ag_tensor *t = ag_zeros(AG_CPU, AG_F32, 1, n);
  for (int k = 1; k <= 8; k++) {
    assert_int_equal(ag_fill_(t, k), AG_OK);
    ag_tensor *u = ag_add_scalar(t, 1); /* reads t between fills */
    ag_tensor *sum = ag_sum(u, 0, NULL, false);
    assert_float_equal(ag_item(sum), (double)(k + 1) * BIG, 1e-3 * BIG);
    ag_tensor_release(u);
    ag_tensor_release(sum);
  }
  ag_tensor_release(t);
  assert_int_equal(ag_stream_synchronize(s), AG_OK);
  assert_true(ag_stream_query(s));
  ag_stream_set_current(AG_CPU, NULL);
  assert_ptr_equal(ag_stream_current(AG_CPU), ag_stream_default(AG_CPU));
  ag_stream_destroy(s);
}

/* s1 produces a large tensor, s2 consumes it after waiting on an event. */
static void events_order_two_streams(void **state) {
  ag_stream *s1 = ag_stream_create(AG_CPU), *s2 = ag_stream_create(AG_CPU);
  ag_event *e = ag_event_create(AG_CPU, false);
  assert_non_null(s1);
  assert_non_null(s2);
  assert_non_null(e);
  int64_t n[1] = {BIG};
  for (int round = 0; round < 4; round++) {
    ag_stream_set_current(AG_CPU, s1);
    ag_tensor *x = ag_zeros(AG_CPU, AG_F32, 1, n);
    ag_tensor *y = x;
    for (int k = 0; k < 6; k++) { /* slow producer */
      ag_tensor *z = ag_add_scalar(y, 1);
      if (y != x) ag_tensor_release(y);
      y = z;
    }
    assert_int_equal(ag_event_record(e, s1), AG_OK);
    ag_stream_set_current(AG_CPU, s2);
    assert_int_equal(ag_stream_wait_event(s2, e), AG_OK);
    ag_tensor *sum = ag_sum(y, 0, NULL, false);
    assert_float_equal(ag_item(sum), 6.0 * BIG, 1e-3 * BIG);
    assert_true(ag_event_query(e));
    ag_tensor_release(sum);
    ag_tensor_release(x);
    ag_tensor_release(y);
  }
  ag_stream_set_current(AG_CPU, NULL);
  assert_int_equal(ag_event_synchronize(e), AG_OK);
  ag_event_destroy(e);
  ag_stream_destroy(s1);
  ag_stream_destroy(s2);
}

static void host_read_waits(void **state) {
  int64_t n[1] = {BIG};
  ag_tensor *t = ag_full(AG_CPU, AG_F32, 1, n, 2);
  ag_tensor *u = ag_mul(t, t);
  float *buf = malloc(sizeof(float) * BIG);
  assert_non_null(buf);
  assert_int_equal(ag_to_host(u, buf, sizeof(float) * BIG), AG_OK);
  for (int i = 0; i < BIG; i += 4099) assert_float_equal(buf[i], 4, 0);
  assert_float_equal(buf[BIG - 1], 4, 0);
  free(buf);
  ag_tensor_release(t);
  ag_tensor_release(u);
}

static void elapsed_time(void **state) {
  ag_stream *s = ag_stream_create(AG_CPU);
  ag_event *a = ag_event_create(AG_CPU, true), *b = ag_event_create(AG_CPU, true);
  ag_event *notime = ag_event_create(AG_CPU, false);
  float ms;
  assert_int_equal(ag_event_elapsed_ms(a, b, &ms), AG_ERR_STATE); /* not recorded */
  ag_stream_set_current(AG_CPU, s);
  int64_t n[1] = {BIG};
  ag_tensor *t = ag_zeros(AG_CPU, AG_F32, 1, n);
  double h0 = now_ms();
  assert_int_equal(ag_event_record(a, s), AG_OK);
  ag_tensor *y = t;
  for (int k = 0; k < 5; k++) {
    ag_tensor *z = ag_exp(y);
    if (y != t) ag_tensor_release(y);
    y = z;
  }
  assert_int_equal(ag_event_record(b, s), AG_OK);
  assert_int_equal(ag_event_record(notime, s), AG_OK);
  assert_int_equal(ag_event_synchronize(b), AG_OK);
  double h1 = now_ms();
  assert_int_equal(ag_event_elapsed_ms(a, b, &ms), AG_OK);
  assert_true(ms > 0);
  assert_true(ms <= h1 - h0 + 1.0);
  assert_int_equal(ag_event_elapsed_ms(a, notime, &ms), AG_ERR_INVALID);
  ag_stream_set_current(AG_CPU, NULL);
  ag_tensor_release(y);
  ag_tensor_release(t);
  ag_event_destroy(a);
  ag_event_destroy(b);
  ag_event_destroy(notime);
  ag_stream_destroy(s);
}

int main(void) {
  /* before the first anygrad call, so the default stream is threaded too */
  setenv("AG_CPU_STREAMS", "threaded", 1);
  if (ag_cpu_set_stream_mode(AG_CPU_STREAMS_THREADED) != AG_OK) {
    fprintf(stderr, "cannot select threaded CPU streams: %s\n", ag_last_error());
    return 1;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(threaded_mode),
      cmocka_unit_test(one_stream_in_order),
      cmocka_unit_test(events_order_two_streams),
      cmocka_unit_test(host_read_waits),
      cmocka_unit_test(elapsed_time),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
