/* The Vulkan backend at the level of the specification rather than of one
 * driver: a timeline semaphore destroyed while another stream's batch
 * waits on it. Run under the validation layers (tests/gpu3_vulkan.cmake):
 * any message fails the process.
 *
 * usage: gpu3_vulkan_test GROUP; GROUP is semaphore. Skips (77) without
 * vulkan:0. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <signal.h>
#include <unistd.h>

#include "anygrad/anygrad.h"

static ag_device VK;

static bool have_vulkan(void) {
  ag_backend_kind k;
  if (ag_backend_find("vulkan", &k) != AG_OK) return false;
  return ag_backend_available(k, NULL) && ag_device_parse("vulkan:0", &VK) == AG_OK;
}

/* ---- a stream waits on an event of a stream destroyed right after ----
 * The semaphore of the destroyed stream must outlive the waiting batch:
 * lavapipe's queue waited for ever on the freed one (the next stream's
 * synchronization never returned), so a watchdog turns a hang into a
 * failure. */

static void on_alarm(int sig) {
  (void)sig;
  static const char m[] = "gpu3_vulkan_test: hung (a batch waits on a destroyed semaphore?)\n";
  if (write(2, m, sizeof m - 1) < 0) _exit(1);
  _exit(1);
}

static void test_semaphore_lifetime(void **state) {
  (void)state;
  int64_t n = 1 << 16;
  ag_stream *b = ag_stream_create(VK);
  assert_non_null(b);
  ag_tensor *acc = NULL;
  ag_stream *prev = ag_stream_set_current(VK, b);
  acc = ag_zeros(VK, AG_F32, 1, &n);
  assert_non_null(acc);
  ag_stream_set_current(VK, prev);
  for (int it = 0; it < 40; it++) {
    ag_stream *a = ag_stream_create(VK);
    ag_event *e = ag_event_create(VK, false);
    assert_true(a && e);
    /* a: some work, then the event */
    ag_stream_set_current(VK, a);
    ag_tensor *one = ag_full(VK, AG_F32, 1, &n, 1.0);
    assert_non_null(one);
    assert_int_equal(ag_tensor_record_stream(one, b), AG_OK);
    assert_int_equal(ag_event_record(e, a), AG_OK);
    /* b: queued work ahead, the wait, a kernel after it, submitted */
    ag_stream_set_current(VK, b);
    for (int k = 0; k < 4; k++) {
      ag_tensor *t = ag_mul_scalar(acc, 1.0);
      ag_tensor_release(acc);
      acc = t;
    }
    assert_int_equal(ag_stream_wait_event(b, e), AG_OK);
    ag_tensor *t = ag_add(acc, one);
    assert_non_null(t);
    ag_tensor_release(acc);
    acc = t;
    (void)ag_stream_query(b); /* submits b's batch with the wait */
    ag_stream_set_current(VK, prev);
    ag_tensor_release(one);
    /* the event and its stream go while b's batch may still wait */
    ag_event_destroy(e);
    ag_stream_destroy(a);
  }
  assert_int_equal(ag_stream_synchronize(b), AG_OK);
  float h[4];
  ag_tensor *head = ag_slice(acc, 0, 0, 4, 1);
  assert_non_null(head);
  assert_int_equal(ag_to_host(head, h, sizeof h), AG_OK);
  for (int i = 0; i < 4; i++) assert_true(h[i] == 40.0f);
  ag_tensor_release(head);
  ag_tensor_release(acc);
  ag_stream_destroy(b);
  assert_int_equal(ag_device_synchronize(VK), AG_OK);
}

int main(int argc, char **argv) {
  const char *group = argc > 1 ? argv[1] : "semaphore";
  if (!have_vulkan()) {
    fprintf(stderr, "vulkan:0 unavailable: skipped\n");
    return 77;
  }
  if (!strcmp(group, "semaphore")) {
    signal(SIGALRM, on_alarm);
    alarm(90);
    const struct CMUnitTest t[] = {cmocka_unit_test(test_semaphore_lifetime)};
    return cmocka_run_group_tests_name("gpu3_vulkan_semaphore", t, NULL, NULL);
  }
  fprintf(stderr, "gpu3_vulkan_test: unknown group '%s'\n", group);
  return 2;
}
