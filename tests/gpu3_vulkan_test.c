/* The Vulkan backend at the level of the specification rather than of one
 * driver: a timeline semaphore destroyed while another stream's batch
 * waits on it, and the device limits and non-coherent memory through the
 * AG_VULKAN_TEST switch (docs/vulkan.md). Run under the validation layers
 * (tests/gpu3_vulkan.cmake): any message fails the process.
 *
 * usage: gpu3_vulkan_test GROUP; GROUP is semaphore, coherent (run with
 * AG_VULKAN_TEST=noncoherent), max_buffer (AG_VULKAN_TEST=
 * max_buffer_size:8388608) or workgroup (AG_VULKAN_TEST=
 * max_workgroup_size:128). Skips (77) without vulkan:0. */
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

/* ---- values in and out ---- */

/* A tensor of dtype dt (f32 or f64) with values v. */
static ag_tensor *up(ag_device d, ag_dtype dt, int nd, const int64_t *shape, const double *v) {
  int64_t n = 1;
  for (int i = 0; i < nd; i++) n *= shape[i];
  ag_tensor *t = NULL;
  if (dt == AG_F64) {
    t = ag_from_host(d, dt, nd, shape, v);
  } else {
    float *f = malloc((size_t)n * sizeof *f);
    assert_non_null(f);
    for (int64_t i = 0; i < n; i++) f[i] = (float)v[i];
    t = ag_from_host(d, AG_F32, nd, shape, f);
    free(f);
  }
  assert_non_null(t);
  return t;
}

/* t's values as doubles (f32, f64, i64, bool); returns the count. */
static int64_t down(ag_tensor *t, double **out) {
  assert_non_null(t);
  int64_t n = ag_tensor_numel(t);
  ag_dtype dt = ag_tensor_dtype(t);
  size_t es = ag_dtype_size(dt);
  void *h = malloc((size_t)(n ? n : 1) * es);
  double *o = malloc((size_t)(n ? n : 1) * sizeof *o);
  assert_true(h && o);
  ag_status st = ag_to_host(t, h, (size_t)n * es);
  if (st != AG_OK) fail_msg("ag_to_host: %s", ag_last_error());
  for (int64_t i = 0; i < n; i++) {
    if (dt == AG_F32) o[i] = ((float *)h)[i];
    else if (dt == AG_F64) o[i] = ((double *)h)[i];
    else if (dt == AG_I64) o[i] = (double)((int64_t *)h)[i];
    else if (dt == AG_I32) o[i] = ((int32_t *)h)[i];
    else if (dt == AG_BOOL || dt == AG_U8) o[i] = ((uint8_t *)h)[i];
    else fail_msg("unexpected dtype %s", ag_dtype_name(dt));
  }
  free(h);
  *out = o;
  return n;
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

/* ---- memory through AG_VULKAN_TEST ---- */

/* Under AG_VULKAN_TEST=noncoherent every host-visible buffer but pinned
 * memory is read and written through a host copy that reaches the device
 * only through flushes and invalidations of whole nonCoherentAtomSize
 * blocks, as on a device without HOST_COHERENT memory: kernels (argument
 * blocks), uploads, downloads and the index error word must still be right. */
static void test_noncoherent(void **state) {
  (void)state;
  int64_t n = 3000;
  double *v = malloc((size_t)n * sizeof *v);
  assert_non_null(v);
  for (int64_t i = 0; i < n; i++) v[i] = (double)(i % 97) - 40;
  ag_tensor *x = up(VK, AG_F32, 1, &n, v);
  ag_tensor *y = x;
  for (int k = 0; k < 300; k++) { /* more than one batch */
    ag_tensor *t = ag_add_scalar(y, 1.0);
    assert_non_null(t);
    if (y != x) ag_tensor_release(y);
    y = t;
  }
  double *r;
  assert_int_equal(down(y, &r), n);
  for (int64_t i = 0; i < n; i++)
    if (r[i] != v[i] + 300) fail_msg("element %lld: %g, expected %g", (long long)i, r[i], v[i] + 300);
  free(r);
  /* odd offsets and sizes of downloads (a narrow of the segment) */
  ag_tensor *mid = ag_slice(y, 0, 13, 30, 1);
  float h[17];
  assert_int_equal(ag_to_host(mid, h, sizeof h), AG_OK);
  for (int i = 0; i < 17; i++) assert_true(h[i] == (float)(v[13 + i] + 300));
  ag_tensor_release(mid);
  /* the error word */
  int64_t vs[2] = {10, 4}, ni = 3;
  ag_tensor *table = ag_zeros(VK, AG_F32, 2, vs);
  ag_tensor *idx = ag_from_host(VK, AG_I64, 1, &ni, (int64_t[]){1, 12, 2});
  ag_tensor *e = ag_embedding(table, idx);
  ag_status st = e ? ag_stream_synchronize(ag_stream_current(VK)) : ag_last_status();
  assert_int_equal(st, AG_ERR_INDEX);
  ag_tensor_release(e);
  ag_tensor *ok = ag_from_host(VK, AG_I64, 1, &ni, (int64_t[]){1, 9, 2});
  ag_tensor *e2 = ag_embedding(table, ok);
  assert_non_null(e2);
  assert_int_equal(ag_stream_synchronize(ag_stream_current(VK)), AG_OK);
  ag_tensor_release(e2);
  ag_tensor_release(ok);
  ag_tensor_release(idx);
  ag_tensor_release(table);
  ag_tensor_release(y);
  ag_tensor_release(x);
  free(v);
}

/* AG_VULKAN_TEST=max_buffer_size:8388608: a segment above the device's
 * maxBufferSize is AG_ERR_OOM naming the limit; smaller ones work. */
static void test_max_buffer(void **state) {
  (void)state;
  int64_t small = 1000, big = 4 << 20; /* 16 MiB of f32 */
  ag_tensor *s = ag_ones(VK, AG_F32, 1, &small);
  assert_non_null(s);
  ag_tensor *sum = ag_sum(s, 0, NULL, false);
  assert_true(ag_item(sum) == 1000.0);
  ag_tensor_release(sum);
  ag_tensor *b = ag_zeros(VK, AG_F32, 1, &big);
  assert_null(b);
  assert_int_equal(ag_last_status(), AG_ERR_OOM);
  if (!strstr(ag_last_error(), "maxBufferSize")) fail_msg("message: %s", ag_last_error());
  ag_tensor_release(s);
}

/* AG_VULKAN_TEST=max_workgroup_size:128: the kernels' 256-wide groups do
 * not fit: the device is unusable and says why. */
static void test_workgroup(void **state) {
  (void)state;
  ag_backend_kind k;
  assert_int_equal(ag_backend_find("vulkan", &k), AG_OK);
  const char *why = NULL;
  assert_false(ag_backend_available(k, &why));
  if (!why || !strstr(why, "maxComputeWorkGroupSize[0] is 128")) fail_msg("reason: %s", why ? why : "(none)");
}

int main(int argc, char **argv) {
  const char *group = argc > 1 ? argv[1] : "semaphore";
  if (!strcmp(group, "workgroup")) {
    const struct CMUnitTest t[] = {cmocka_unit_test(test_workgroup)};
    return cmocka_run_group_tests_name("gpu3_vulkan_workgroup", t, NULL, NULL);
  }
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
  if (!strcmp(group, "coherent")) {
    const struct CMUnitTest t[] = {cmocka_unit_test(test_noncoherent)};
    return cmocka_run_group_tests_name("gpu3_vulkan_coherent", t, NULL, NULL);
  }
  if (!strcmp(group, "max_buffer")) {
    const struct CMUnitTest t[] = {cmocka_unit_test(test_max_buffer)};
    return cmocka_run_group_tests_name("gpu3_vulkan_max_buffer", t, NULL, NULL);
  }
  fprintf(stderr, "gpu3_vulkan_test: unknown group '%s'\n", group);
  return 2;
}
