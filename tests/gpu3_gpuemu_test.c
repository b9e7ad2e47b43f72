/* The GPU modules leave the calling thread's current device as they found
 * it. A program that uses CUDA beside anygrad on one thread (PyTorch, CuPy,
 * a DLPack consumer) keeps its own current device; the modules' entries set
 * theirs and must give the caller's back on every way out. The emulator keeps
 * a current device per thread as CUDA does, and the gpuemu module exports its
 * cudaSetDevice/cudaGetDevice (gpuemuSetDevice/gpuemuGetDevice): the test
 * makes one device current through them, runs every public call that reaches
 * the module on the other device, and checks after each that the current
 * device has not moved.
 *   gpu3_gpuemu_test MODULE   MODULE: the path of libanygrad-gpuemu.so */
#include <dlfcn.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "anygrad/anygrad.h"

static int (*g_set)(int);
static int (*g_get)(int *);

static int current(void) {
  int d = -1;
  assert_int_equal(g_get(&d), 0);
  return d;
}

/* After each call: the caller's device is still `want`. */
#define KEEP(want, what)                                                                               \
  do {                                                                                                 \
    int cur_ = current();                                                                              \
    if (cur_ != (want)) fail_msg("%s moved the current device from %d to %d", (what), (want), cur_); \
  } while (0)
#define OK(call, want)                                                   \
  do {                                                                   \
    ag_status st_ = (call);                                              \
    if (st_ != AG_OK) fail_msg("%s: %s", #call, ag_last_error());         \
    KEEP(want, #call);                                                   \
  } while (0)

/* Every public entry that reaches the module, on device `dev` ("gpuemu:N")
 * while device `mine` is current on this thread. */
static void exercise(const char *dev, int mine, bool expandable) {
  assert_int_equal(g_set(mine), 0);
  KEEP(mine, "gpuemuSetDevice");
  ag_device d;
  OK(ag_device_parse(dev, &d), mine);
  if (expandable) OK(ag_alloc_configure(d, "expandable_segments:1"), mine); /* the vm_* entries */
  ag_device_props props;
  OK(ag_device_props_get(d, &props), mine);
  size_t free_b = 0, total_b = 0;
  OK(ag_device_mem_info(d, &free_b, &total_b), mine);

  /* the first tensor opens the device: streams, segments, a launch */
  int64_t n[2] = {64, 64};
  ag_tensor *a = ag_zeros(d, AG_F32, 2, n);
  if (!a) fail_msg("ag_zeros: %s", ag_last_error());
  KEEP(mine, "ag_zeros (device open, segment, launch)");
  float host[64 * 64];
  for (int i = 0; i < 64 * 64; i++) host[i] = (float)(i % 7);
  ag_tensor *b = ag_from_host(d, AG_F32, 2, n, host);
  if (!b) fail_msg("ag_from_host: %s", ag_last_error());
  KEEP(mine, "ag_from_host (copy to the device)");
  OK(ag_copy_(a, b), mine);
  ag_tensor *c = ag_matmul(a, b);
  assert_non_null(c);
  KEEP(mine, "ag_matmul (launch)");
  ag_tensor *s = ag_sum(c, 0, NULL, false);
  assert_non_null(s);
  KEEP(mine, "ag_sum (launch with scratch)");
  /* a gradient and an optimizer step: the multi-tensor launch with its
   * staging slot and event */
  ag_tensor *w = ag_from_host(d, AG_F32, 2, n, host);
  assert_non_null(w);
  OK(ag_tensor_set_requires_grad(w, true), mine);
  ag_scope_begin();
  ag_tensor *loss = ag_sum(ag_mul(w, w), 0, NULL, false);
  assert_non_null(loss);
  OK(ag_backward(loss, NULL, false), mine);
  OK(ag_scope_end(), mine);
  ag_param_list pl = {0};
  OK(ag_params_add(&pl, "w", w), mine);
  ag_tensor *norm = ag_clip_grad_norm(&pl, 1.0);
  if (!norm) fail_msg("ag_clip_grad_norm: %s", ag_last_error());
  KEEP(mine, "ag_clip_grad_norm");
  ag_sgd_options so = {0.1, 0.9, 0, 0, false};
  ag_optimizer *opt = ag_sgd_create(&pl, &so);
  assert_non_null(opt);
  KEEP(mine, "ag_sgd_create");
  OK(ag_optimizer_step(opt), mine);
  ag_optimizer_free(opt);
  ag_params_free(&pl);
  ag_tensor_release(w);
  float back[64 * 64];
  OK(ag_to_host(c, back, sizeof back), mine);
  assert_float_equal(ag_item(s), ag_item(s), 0);
  KEEP(mine, "ag_item (copy to the host)");

  /* streams and events */
  ag_stream *st = ag_stream_create(d);
  assert_non_null(st);
  KEEP(mine, "ag_stream_create");
  ag_stream *prev = ag_stream_set_current(d, st);
  KEEP(mine, "ag_stream_set_current");
  ag_event *e0 = ag_event_create(d, true), *e1 = ag_event_create(d, true);
  assert_non_null(e0);
  assert_non_null(e1);
  KEEP(mine, "ag_event_create");
  OK(ag_event_record(e0, st), mine);
  OK(ag_fill_(a, 2), mine);
  OK(ag_event_record(e1, st), mine);
  OK(ag_stream_wait_event(ag_stream_default(d), e1), mine);
  (void)ag_event_query(e1);
  KEEP(mine, "ag_event_query");
  (void)ag_stream_query(st);
  KEEP(mine, "ag_stream_query");
  OK(ag_event_synchronize(e1), mine);
  float ms = -1;
  OK(ag_event_elapsed_ms(e0, e1, &ms), mine);
  OK(ag_stream_synchronize(st), mine);
  ag_stream_set_current(d, prev);
  ag_event_destroy(e0);
  ag_event_destroy(e1);
  KEEP(mine, "ag_event_destroy");
  ag_stream_destroy(st);
  KEEP(mine, "ag_stream_destroy");

  /* pinned host memory and an asynchronous copy from it */
  void *pin = NULL;
  OK(ag_pinned_alloc(d, sizeof host, &pin), mine);
  memcpy(pin, host, sizeof host);
  OK(ag_copy_from_host_async(a, pin, sizeof host, ag_stream_current(d)), mine);
  OK(ag_pinned_free(pin), mine);
  OK(ag_device_synchronize(d), mine);
  OK(ag_pinned_empty_cache(d), mine);

  /* close: everything released, the cached segments given back */
  ag_tensor_release(norm);
  ag_tensor_release(s);
  ag_tensor_release(c);
  ag_tensor_release(b);
  ag_tensor_release(a);
  KEEP(mine, "ag_tensor_release");
  OK(ag_device_synchronize(d), mine);
  OK(ag_memory_empty_cache(d), mine);
}

static void other_device_0(void **state) {
  (void)state;
  exercise("gpuemu:0", 1, false);
}
static void other_device_1(void **state) {
  (void)state;
  exercise("gpuemu:1", 0, true);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: gpu3_gpuemu_test MODULE\n");
    return 2;
  }
  /* the registry's later dlopen of the same file returns this instance */
  void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    fprintf(stderr, "%s\n", dlerror());
    return 1;
  }
  *(void **)&g_set = dlsym(h, "gpuemuSetDevice");
  *(void **)&g_get = dlsym(h, "gpuemuGetDevice");
  if (!g_set || !g_get) {
    fprintf(stderr, "%s does not export gpuemuSetDevice/gpuemuGetDevice\n", argv[1]);
    return 1;
  }
  const struct CMUnitTest tests[] = {cmocka_unit_test(other_device_0), cmocka_unit_test(other_device_1)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
