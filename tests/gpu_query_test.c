/* A query that finds a stream or event not yet done must not fail the next
 * launch. ROCm records hipErrorNotReady as the thread's last error and the
 * GPU launchers return gpuGetLastError(); gpuemu:1 models that, and with
 * deferred streams and a delay per queued item the queries below do find
 * work still pending. gpuemu:0 (CUDA, nothing recorded) runs the same. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>

#include "anygrad/anygrad.h"

static void query_then_launch(const char *name) {
  ag_device d;
  if (ag_device_parse(name, &d) != AG_OK) fail_msg("%s: %s", name, ag_last_error());
  int64_t n[1] = {4096};
  ag_tensor *t = ag_zeros(d, AG_F32, 1, n);
  assert_non_null(t);
  ag_stream *s = ag_stream_current(d);
  ag_event *e = ag_event_create(d, false);
  assert_non_null(e);
  for (int k = 1; k <= 3; k++) {
    assert_int_equal(ag_fill_(t, k), AG_OK);
    assert_int_equal(ag_event_record(e, s), AG_OK);
    assert_false(ag_event_query(e)); /* the delay keeps the fill queued */
    assert_false(ag_stream_query(s));
    /* the next launches are correct and must succeed */
    ag_status st = ag_fill_(t, k + 1);
    if (st != AG_OK) fail_msg("%s: a launch after a not-ready query failed: %s", name, ag_last_error());
    ag_tensor *u = ag_add_scalar(t, 1);
    if (!u) fail_msg("%s: a launch after a not-ready query failed: %s", name, ag_last_error());
    assert_float_equal(ag_item(u), k + 2, 0);
    ag_tensor_release(u);
  }
  ag_event_destroy(e);
  ag_tensor_release(t);
}

static void cuda_flavour(void **state) {
  (void)state;
  query_then_launch("gpuemu:0");
}
static void hip_flavour(void **state) {
  (void)state;
  query_then_launch("gpuemu:1");
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(cuda_flavour), cmocka_unit_test(hip_flavour)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
