/* Diagnostics: sync-debug warn mode naming each call site once, error mode
 * refusing item and to-host copies, per-step sync counts and the sync-bound
 * verdict, the leak detector (fires on a kept graph, silent on a clean loop),
 * the input-bound verdict and the Chrome trace. Compiled with AG_SYNC_SITES
 * so sites are file:line. Labelled "threads" (threaded CPU streams). */
#define AG_SYNC_SITES 1
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <math.h>
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

/* ---- stderr capture ---- */
static int g_saved_fd = -1;
static FILE *g_cap;

static void capture_begin(void) {
  fflush(stderr);
  g_cap = tmpfile();
  assert_non_null(g_cap);
  g_saved_fd = dup(2);
  dup2(fileno(g_cap), 2);
}

static char *capture_end(void) {
  fflush(stderr);
  dup2(g_saved_fd, 2);
  close(g_saved_fd);
  long n = ftell(g_cap);
  char *s = calloc(1, (size_t)n + 1);
  rewind(g_cap);
  assert_int_equal(fread(s, 1, (size_t)n, g_cap), (size_t)n);
  fclose(g_cap);
  return s;
}

static int count(const char *hay, const char *needle) {
  int n = 0;
  for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle)) n++;
  return n;
}

static void threaded_mode(void **state) {
  assert_non_null(ag_stream_default(AG_CPU));
  assert_int_equal(ag_cpu_stream_mode_get(), AG_CPU_STREAMS_THREADED);
}

static void warn_names_each_site_once(void **state) {
  ag_tensor *t = ag_full(AG_CPU, AG_F32, 0, NULL, 2.5);
  float h;
  char site_item[64], site_host[64];
  ag_set_sync_debug(AG_SYNC_DEBUG_WARN);
  capture_begin();
  for (int i = 0; i < 3; i++) {
    snprintf(site_item, sizeof site_item, "ag_item at diag_test.c:%d", __LINE__ + 1);
    assert_float_equal(ag_item(t), 2.5, 0);
    snprintf(site_host, sizeof site_host, "ag_to_host at diag_test.c:%d", __LINE__ + 1);
    assert_int_equal(ag_to_host(t, &h, sizeof h), AG_OK);
  }
  assert_float_equal((ag_item)(t), 2.5, 0); /* unmarked: resolved from the stack */
  char *out = capture_end();
  ag_set_sync_debug(AG_SYNC_DEBUG_OFF);
  assert_int_equal(count(out, site_item), 1);
  assert_int_equal(count(out, site_host), 1);
  assert_int_equal(count(out, "anygrad: warning: host sync in"), 3);
  assert_int_equal(count(out, "unknown site"), 0);
  free(out);
  ag_tensor_release(t);
}

static void error_mode_refuses_item_and_to_host(void **state) {
  ag_tensor *t = ag_full(AG_CPU, AG_F32, 0, NULL, 1.0);
  assert_int_equal(ag_device_synchronize(AG_CPU), AG_OK);
  uint64_t syncs = ag_sync_count();
  ag_set_sync_debug(AG_SYNC_DEBUG_ERROR);
  float h;
  assert_true(isnan(ag_item(t)));
  assert_int_equal(ag_last_status(), AG_ERR_SYNC);
  assert_non_null(strstr(ag_last_error(), "ag_item"));
  assert_non_null(strstr(ag_last_error(), "diag_test.c:"));
  assert_int_equal(ag_to_host(t, &h, sizeof h), AG_ERR_SYNC);
  assert_non_null(strstr(ag_last_error(), "ag_to_host"));
  assert_int_equal(ag_stream_synchronize(ag_stream_default(AG_CPU)), AG_ERR_SYNC);
  ag_set_sync_debug(AG_SYNC_DEBUG_OFF);
  assert_int_equal(ag_sync_count(), syncs);
  assert_float_equal(ag_item(t), 1.0, 0);
  ag_tensor_release(t);
}

/* Three syncs per step at one line, with host work after each: the device
 * idles while the host works between syncs. */
static void sync_counter_and_sync_bound_verdict(void **state) {
  ag_profiler_config pc = {.window = 5};
  ag_profiler *p = ag_profiler_create(AG_CPU, &pc);
  assert_non_null(p);
  int64_t n[1] = {256}; /* tiny device work: the host work dominates */
  ag_tensor *x = ag_ones(AG_CPU, AG_F32, 1, n);
  char where[64];
  for (int step = 0; step < 5; step++) {
    assert_int_equal(ag_profiler_step_begin(p), AG_OK);
    ag_scope_begin();
    for (int k = 0; k < 3; k++) {
      ag_tensor *s = ag_sum(ag_mul_scalar(x, k), 0, NULL, false);
      snprintf(where, sizeof where, "host syncs per step in ag_item at diag_test.c:%d", __LINE__ + 1);
      assert_float_equal(ag_item(s), (double)k * 256, 1e-3);
      usleep(10000); /* host work well above a sync's wait, even on a loaded machine */
    }
    assert_int_equal(ag_scope_end(), AG_OK);
    assert_int_equal(ag_profiler_step_end(p), AG_OK);
    ag_step_stats st;
    assert_int_equal(ag_profiler_step_stats(p, -1, &st), AG_OK);
    assert_int_equal(st.step, step);
    assert_int_equal(st.syncs, 3);
  }
  assert_int_equal(ag_stream_synchronize(ag_stream_default(AG_CPU)), AG_OK);
  ag_profiler_verdict v;
  assert_int_equal(ag_profiler_verdict_get(p, &v), AG_OK);
  assert_int_equal(v.steps, 5);
  assert_float_equal(v.syncs_per_step, 3.0, 1e-9);
  assert_true(v.sync_bound);
  assert_false(v.input_bound);
  assert_true(v.sync_stall_frac > 0.5);
  print_message("%s", v.text);
  assert_non_null(strstr(v.text, "sync-bound: 3 "));
  assert_non_null(strstr(v.text, where));
  ag_tensor_release(x);
  ag_profiler_destroy(p);
}

/* A training-like loop; `keep` holds each step's activation (which still
 * holds its graph) across steps, the classic leak. */
static int run_loop(ag_profiler *p, ag_tensor *w, int steps, ag_tensor **keep) {
  int64_t xs[2] = {32, 64};
  for (int step = 0; step < steps; step++) {
    assert_int_equal(ag_profiler_step_begin(p), AG_OK);
    ag_scope_begin();
    ag_mem_category_push(AG_MEM_ACTIVATIONS);
    ag_tensor *x = ag_rand(AG_CPU, AG_F32, 2, xs, -1, 1, NULL);
    ag_tensor *h = ag_relu(ag_matmul(x, w));
    ag_tensor *loss = ag_mean(ag_mul(h, h), 0, NULL, false);
    ag_mem_category_pop();
    assert_non_null(loss);
    if (keep) keep[step] = ag_tensor_keep(h);
    assert_int_equal(ag_scope_end(), AG_OK);
    assert_int_equal(ag_profiler_step_end(p), AG_OK);
  }
  return steps;
}

static void leak_detector_fires_on_kept_graph_only(void **state) {
  int64_t ws[2] = {64, 64};
  ag_tensor *w = ag_randn(AG_CPU, AG_F32, 2, ws, 0, 0.1, NULL);
  assert_int_equal(ag_tensor_set_requires_grad(w, true), AG_OK);

  ag_profiler_config pc = {.window = 4, .leak_steps = 5};
  ag_profiler *clean = ag_profiler_create(AG_CPU, &pc);
  run_loop(clean, w, 12, NULL);
  const char *text;
  assert_false(ag_profiler_leak(clean, &text));
  ag_profiler_verdict v;
  assert_int_equal(ag_profiler_verdict_get(clean, &v), AG_OK);
  assert_false(v.memory_growing);
  assert_null(strstr(v.text, "memory growing"));
  ag_profiler_destroy(clean);

  ag_profiler *leaky = ag_profiler_create(AG_CPU, &pc);
  ag_tensor *kept[12] = {0};
  int64_t nodes0 = ag_live_nodes();
  run_loop(leaky, w, 4, kept);
  assert_false(ag_profiler_leak(leaky, NULL)); /* 4 growing steps < K */
  run_loop(leaky, w, 4, kept + 4);
  assert_true(ag_live_nodes() > nodes0);
  assert_true(ag_profiler_leak(leaky, &text));
  print_message("%s\n", text);
  assert_non_null(strstr(text, "activations +"));
  assert_non_null(strstr(text, "a tensor holding a graph is kept across steps"));
  assert_int_equal(ag_profiler_verdict_get(leaky, &v), AG_OK);
  assert_true(v.memory_growing);
  assert_true(v.growth_bytes_per_step > 0);
  assert_non_null(strstr(v.text, "memory growing"));
  ag_profiler_destroy(leaky);
  for (int i = 0; i < 12; i++) ag_tensor_release(kept[i]);
  ag_tensor_release(w);
}

static ag_status slow_fill(void *user, int64_t epoch, int64_t index, const int64_t *samples,
                           int64_t rows, ag_loader_batch *b) {
  usleep(4000);
  float *x = ag_loader_batch_data(b, 0);
  for (int64_t r = 0; r < rows * 16; r++) x[r] = (float)samples[r / 16];
  return AG_OK;
}

static void input_bound_verdict_and_trace(void **state) {
  ag_profiler_config pc = {.window = 10, .trace = true};
  ag_profiler *p = ag_profiler_create(AG_CPU, &pc);
  assert_non_null(p);
  ag_loader_config lc = {0};
  lc.device = AG_CPU;
  lc.num_samples = 20 * 8;
  lc.batch_size = 8;
  lc.num_workers = 1;
  lc.n_fields = 1;
  lc.fields[0] = (ag_loader_field){.dtype = AG_F32, .ndim = 2, .shape = {0, 16}};
  lc.fill = slow_fill;
  lc.profiler = p;
  ag_loader *l = ag_loader_create(&lc);
  assert_non_null(l);
  for (int step = 0; step < 20; step++) {
    assert_int_equal(ag_profiler_step_begin(p), AG_OK);
    ag_scope_begin();
    ag_trace_range_push("forward");
    ag_tensor *t[1];
    ag_loader_batch_info info;
    assert_int_equal(ag_loader_next(l, t, &info), AG_OK);
    ag_tensor *s = ag_sum(t[0], 0, NULL, false);
    if (step == 19) assert_float_equal(ag_item(s), 16.0 * (19 * 8 * 8 + 28), 1e-2);
    ag_trace_range_pop();
    assert_int_equal(ag_scope_end(), AG_OK);
    assert_int_equal(ag_profiler_step_end(p), AG_OK);
  }
  assert_int_equal(ag_device_synchronize(AG_CPU), AG_OK);
  ag_profiler_verdict v;
  assert_int_equal(ag_profiler_verdict_get(p, &v), AG_OK);
  assert_true(v.input_bound);
  assert_true(v.data_wait_frac > 0.5);
  assert_non_null(strstr(v.text, "input-bound: device idle"));
  assert_non_null(strstr(v.text, "raise workers"));
  /* the per-step stats carry the wait: over the steps, not any one step (a
   * loaded machine may have the next batch ready for some of them) */
  ag_step_stats st;
  double wait = 0;
  for (int k = 0; k < 20; k++) {
    assert_int_equal(ag_profiler_step_stats(p, k, &st), AG_OK);
    wait += st.data_wait_ms;
    assert_true(st.copy_ms >= 0);
    assert_true(st.device_ms >= 0);
  }
  assert_true(wait > 20.0);

  char path[] = "/tmp/ag_trace_XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  close(fd);
  assert_int_equal(ag_profiler_write_trace(p, path), AG_OK);
  FILE *f = fopen(path, "r");
  static char buf[1 << 22];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = 0;
  fclose(f);
  unlink(path);
  assert_non_null(strstr(buf, "{\"displayTimeUnit\":\"ms\",\"traceEvents\":["));
  const char *want[] = {"\"fill batch\"", "\"H2D copy\"", "\"name\":\"step\"", "\"wait for data\"",
                        "\"forward\"", "\"allocated bytes\"", "\"ag_item at diag_test.c:",
                        "\"loader copy stream\"", "\"cat\":\"allocator\""};
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
    if (!strstr(buf, want[i])) fail_msg("trace lacks %s", want[i]);
  assert_int_equal(count(buf, "\"name\":\"step\""), 40); /* host + device range per step */

  FILE *rep = tmpfile();
  assert_int_equal(ag_profiler_report(p, rep), AG_OK);
  rewind(rep);
  n = fread(buf, 1, sizeof buf - 1, rep);
  buf[n] = 0;
  fclose(rep);
  print_message("%s", buf);
  /* Two windows with the same verdict are one line over both. */
  assert_non_null(strstr(buf, "steps 0-19: input-bound"));
  assert_null(strstr(buf, "steps 10-19"));
  ag_loader_destroy(l);
  ag_profiler_destroy(p);
}

static ag_status quick_fill(void *user, int64_t epoch, int64_t index, const int64_t *samples,
                            int64_t rows, ag_loader_batch *b) {
  (void)user, (void)epoch, (void)index;
  /* about 0.1 ms of work: input is all the step does, but 0.1 ms of it */
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  do clock_gettime(CLOCK_MONOTONIC, &t1);
  while ((t1.tv_sec - t0.tv_sec) * 1000000000L + (t1.tv_nsec - t0.tv_nsec) < 100000L);
  float *x = ag_loader_batch_data(b, 0);
  for (int64_t r = 0; r < rows * 4; r++) x[r] = (float)samples[r / 4];
  return AG_OK;
}

/* The documented loop: the last pass finds the end of the data and runs no
 * step, so 312 batches are 312 steps; a data wait of ~0.1 ms per step is no
 * reason to advise more workers; verdict text has no trailing newline. */
static void end_of_data_is_no_step(void **state) {
  (void)state;
  ag_profiler_config pc = {.window = 400};
  ag_profiler *p = ag_profiler_create(AG_CPU, &pc);
  assert_non_null(p);
  ag_loader_config lc = {0};
  lc.device = AG_CPU;
  lc.num_samples = 312;
  lc.batch_size = 1;
  lc.fill_on_caller = true;
  lc.n_fields = 1;
  lc.fields[0] = (ag_loader_field){.dtype = AG_F32, .ndim = 2, .shape = {0, 4}};
  lc.fill = quick_fill;
  lc.profiler = p;
  ag_loader *l = ag_loader_create(&lc);
  assert_non_null(l);
  int64_t batches = 0;
  for (;;) {
    assert_int_equal(ag_profiler_step_begin(p), AG_OK);
    ag_scope_begin();
    ag_tensor *t[1];
    ag_loader_batch_info info;
    assert_int_equal(ag_loader_next(l, t, &info), AG_OK);
    if (info.end) {
      assert_int_equal(ag_scope_end(), AG_OK);
      assert_int_equal(ag_profiler_step_end(p), AG_OK);
      break;
    }
    batches++;
    assert_int_equal(ag_scope_end(), AG_OK);
    assert_int_equal(ag_profiler_step_end(p), AG_OK);
  }
  assert_int_equal(batches, 312);
  ag_step_stats st;
  assert_int_equal(ag_profiler_step_stats(p, -1, &st), AG_OK);
  assert_int_equal(st.step, 311);
  assert_int_equal(ag_profiler_step_stats(p, 312, &st), AG_ERR_INDEX);
  ag_error_clear();
  ag_profiler_verdict v;
  assert_int_equal(ag_profiler_verdict_get(p, &v), AG_OK);
  assert_int_equal(v.steps, 312);
  double wait = 0;
  for (int64_t k = 0; k < 312; k++) {
    assert_int_equal(ag_profiler_step_stats(p, k, &st), AG_OK);
    wait += st.data_wait_ms;
  }
  print_message("data wait %.0f%% of the step, %.3f ms/step: %s\n", v.data_wait_frac * 100, wait / 312, v.text);
  /* the input is what the step spends its time in, but far too little of it */
  assert_true(v.data_wait_frac >= 0.10);
  assert_false(v.input_bound);
  assert_null(strstr(v.text, "raise workers"));
  size_t n = strlen(v.text);
  assert_true(n > 0 && v.text[n - 1] != '\n');
  /* a step opened after the end stays uncounted */
  assert_int_equal(ag_profiler_step_begin(p), AG_OK);
  ag_tensor *t[1];
  ag_loader_batch_info info;
  assert_int_equal(ag_loader_next(l, t, &info), AG_OK);
  assert_true(info.end);
  assert_int_equal(ag_profiler_step_end(p), AG_OK);
  assert_int_equal(ag_profiler_step_stats(p, -1, &st), AG_OK);
  assert_int_equal(st.step, 311);
  ag_loader_destroy(l);
  ag_profiler_destroy(p);

  /* a step that got a batch and then reached the end ran: it counts */
  p = ag_profiler_create(AG_CPU, &pc);
  lc.num_samples = 3;
  lc.profiler = p;
  l = ag_loader_create(&lc);
  assert_non_null(l);
  ag_scope_begin();
  assert_int_equal(ag_profiler_step_begin(p), AG_OK);
  assert_int_equal(ag_loader_next(l, t, &info), AG_OK);
  assert_false(info.end);
  assert_int_equal(ag_profiler_step_end(p), AG_OK);
  assert_int_equal(ag_profiler_step_begin(p), AG_OK);
  for (int k = 0; k < 3; k++) assert_int_equal(ag_loader_next(l, t, &info), AG_OK);
  assert_true(info.end);
  assert_int_equal(ag_profiler_step_end(p), AG_OK);
  assert_int_equal(ag_scope_end(), AG_OK);
  assert_int_equal(ag_profiler_step_stats(p, -1, &st), AG_OK);
  assert_int_equal(st.step, 1);
  ag_loader_destroy(l);
  ag_profiler_destroy(p);
}

/* With AG_SYNC_SITES a mode region left open in a scope is named by the
 * file:line of its begin. */
static void scope_names_open_region_site(void **state) {
  (void)state;
  ag_scope_begin();
  assert_int_equal(ag_autocast_begin(AG_BF16), AG_OK);
  int line = __LINE__ - 1;
  assert_int_equal(ag_scope_end(), AG_ERR_STATE);
  char want[64];
  snprintf(want, sizeof want, "diag_test.c:%d", line);
  if (!strstr(ag_last_error(), want) || !strstr(ag_last_error(), "autocast(bf16)"))
    fail_msg("lacks %s: %s", want, ag_last_error());
  assert_false(ag_autocast_enabled());
  ag_scope_begin();
  ag_inference_mode_begin();
  line = __LINE__ - 1;
  assert_int_equal(ag_scope_end(), AG_ERR_STATE);
  snprintf(want, sizeof want, "diag_test.c:%d", line);
  if (!strstr(ag_last_error(), want) || !strstr(ag_last_error(), "inference"))
    fail_msg("lacks %s: %s", want, ag_last_error());
  assert_false(ag_inference_mode());
  ag_error_clear();
}

static void profiler_state_errors(void **state) {
  ag_profiler *p = ag_profiler_create(AG_CPU, NULL);
  ag_profiler_verdict v;
  assert_int_equal(ag_profiler_verdict_get(p, &v), AG_ERR_STATE);
  assert_int_equal(ag_profiler_step_end(p), AG_ERR_STATE);
  assert_int_equal(ag_profiler_step_begin(p), AG_OK);
  assert_int_equal(ag_profiler_step_begin(p), AG_ERR_STATE);
  assert_int_equal(ag_profiler_write_trace(p, "/tmp/x.json"), AG_ERR_STATE);
  ag_step_stats st;
  assert_int_equal(ag_profiler_step_stats(p, 0, &st), AG_ERR_INDEX);
  ag_profiler_destroy(p);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(threaded_mode),
      cmocka_unit_test(warn_names_each_site_once),
      cmocka_unit_test(error_mode_refuses_item_and_to_host),
      cmocka_unit_test(sync_counter_and_sync_bound_verdict),
      cmocka_unit_test(leak_detector_fires_on_kept_graph_only),
      cmocka_unit_test(input_bound_verdict_and_trace),
      cmocka_unit_test(profiler_state_errors),
      cmocka_unit_test(end_of_data_is_no_step),
      cmocka_unit_test(scope_names_open_region_site),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
