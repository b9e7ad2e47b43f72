/* The run report's C API: argument errors, the report data a profiler
 * collects (series, info, steps, snapshot at the peak), escaping of data
 * inside the page, and building a report from a saved trace. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "anygrad/anygrad.h"

#define TMP(name) AG_TEST_TMPDIR "/report_api_" name

static char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *s = calloc(1, (size_t)n + 1);
  if (s && fread(s, 1, (size_t)n, f) != (size_t)n) s[0] = 0;
  fclose(f);
  return s;
}

static int count(const char *s, const char *what) {
  int n = 0;
  for (const char *p = strstr(s, what); p; p = strstr(p + 1, what)) n++;
  return n;
}

static ag_device cpu(void) { return (ag_device){AG_BACKEND_CPU, 0}; }

/* Steps that hold a parameter and allocate growing activations. */
static void run_steps(ag_profiler *p, int n, ag_tensor *param) {
  for (int s = 0; s < n; s++) {
    assert_int_equal(ag_profiler_step_begin(p), AG_OK);
    ag_scope_begin();
    ag_mem_category_push(AG_MEM_ACTIVATIONS);
    int64_t shape[1] = {1024 * (s + 1)};
    ag_tensor *a = ag_zeros(cpu(), AG_F32, 1, shape);
    assert_non_null(a);
    ag_mem_category_pop();
    ag_tensor *b = ag_add_scalar(a, 1.0);
    assert_non_null(b);
    (void)param;
    ag_scope_end();
    assert_int_equal(ag_profiler_step_end(p), AG_OK);
    assert_int_equal(ag_profiler_log_scalar(p, "loss", s, 3.0 - 0.1 * s), AG_OK);
  }
}

static void test_errors(void **state) {
  (void)state;
  ag_profiler *p = ag_profiler_create(cpu(), NULL);
  assert_non_null(p);
  assert_int_equal(ag_profiler_log_scalar(NULL, "x", 0, 1), AG_ERR_INVALID);
  assert_int_equal(ag_profiler_log_scalar(p, NULL, 0, 1), AG_ERR_INVALID);
  assert_int_equal(ag_profiler_log_scalar(p, "", 0, 1), AG_ERR_INVALID);
  assert_int_equal(ag_profiler_set_info(p, NULL, "v"), AG_ERR_INVALID);
  assert_int_equal(ag_profiler_set_info(p, "k", NULL), AG_ERR_INVALID);
  assert_int_equal(ag_profiler_set_info(p, "", "v"), AG_ERR_INVALID);
  /* nothing finished yet */
  assert_int_equal(ag_report_write(p, TMP("empty.html")), AG_ERR_STATE);
  assert_int_equal(ag_report_write(NULL, TMP("empty.html")), AG_ERR_INVALID);
  assert_int_equal(ag_report_write(p, NULL), AG_ERR_INVALID);
  /* 16 series at most; the 17th is refused and the others kept */
  char name[16];
  for (int i = 0; i < 16; i++) {
    snprintf(name, sizeof name, "s%d", i);
    assert_int_equal(ag_profiler_log_scalar(p, name, 0, i), AG_OK);
  }
  assert_int_equal(ag_profiler_log_scalar(p, "one too many", 0, 1), AG_ERR_INVALID);
  assert_non_null(strstr(ag_last_error(), "series"));
  assert_int_equal(ag_profiler_log_scalar(p, "s3", 1, 2), AG_OK);
  ag_profiler_destroy(p);
  assert_int_equal(ag_report_from_trace(NULL, NULL, TMP("x.html")), AG_ERR_INVALID);
  assert_int_equal(ag_report_from_trace(TMP("missing.json"), NULL, TMP("x.html")), AG_ERR_IO);
  FILE *f = fopen(TMP("bad.json"), "w");
  fputs("[1, 2, 3]", f);
  fclose(f);
  assert_int_equal(ag_report_from_trace(TMP("bad.json"), NULL, TMP("x.html")), AG_ERR_CORRUPT);
}

static void test_write(void **state) {
  (void)state;
  ag_profiler_config pc = {.window = 4, .trace = true};
  ag_profiler *p = ag_profiler_create(cpu(), &pc);
  assert_non_null(p);
  ag_mem_category_push(AG_MEM_PARAMETERS);
  int64_t shape[1] = {4096};
  ag_tensor *param = ag_zeros(cpu(), AG_F32, 1, shape);
  ag_mem_category_pop();
  assert_non_null(param);
  assert_int_equal(ag_profiler_set_info(p, "model", "replaced-value"), AG_OK);
  assert_int_equal(ag_profiler_set_info(p, "model", "tiny </script><b>x</b>"), AG_OK); /* replaced */
  run_steps(p, 10, param);
  assert_int_equal(ag_report_write(p, TMP("run.html")), AG_OK);
  assert_int_equal(ag_profiler_write_trace(p, TMP("trace.json")), AG_OK);
  ag_profiler_destroy(p);
  ag_tensor_release(param);

  char *h = slurp(TMP("run.html"));
  assert_non_null(h);
  assert_non_null(strstr(h, "\"format\":\"anygrad-report\""));
  assert_non_null(strstr(h, "\"loss\":[[0,3]"));
  assert_null(strstr(h, "replaced-value")); /* the replaced value is gone */
  /* the value's markup is escaped: the page has exactly its own two script
   * elements, and the text survives as \u003c */
  assert_int_equal(count(h, "</script>"), 2);
  assert_non_null(strstr(h, "tiny \\u003c/script>\\u003cb>x\\u003c/b>"));
  /* ten step rows, verdicts of windows 0-3, 4-7 and the tail 8-9 */
  const char *steps = strstr(h, "\"steps\":[");
  assert_non_null(steps);
  assert_int_equal(count(steps, "\n[") >= 10, 1);
  assert_non_null(strstr(h, "{\"first\":8,\"steps\":2,"));
  /* the snapshot at the peak: taken in the last step (the activations grow
   * every step), holding the parameter block */
  assert_non_null(strstr(h, "\"snapshot_peak_step\":9"));
  const char *peak = strstr(h, "\"snapshot_peak\":{");
  assert_non_null(peak);
  assert_non_null(strstr(peak, "\"category\":\"parameters\""));
  free(h);

  char *t = slurp(TMP("trace.json"));
  assert_non_null(t);
  assert_non_null(strstr(t, "\"otherData\":{\"dropped_events\":"));
  assert_non_null(strstr(t, "\"anygrad_report\":{\"format\":\"anygrad-report\""));
  free(t);
  assert_int_equal(ag_report_from_trace(TMP("trace.json"), NULL, TMP("from_trace.html")), AG_OK);
  h = slurp(TMP("from_trace.html"));
  assert_non_null(h);
  assert_non_null(strstr(h, "{\"trace\":{\"displayTimeUnit\""));
  assert_int_equal(count(h, "</script>"), 2);
  free(h);
  /* a snapshot from ag_memory_snapshot_json goes in beside the trace */
  assert_int_equal(ag_memory_snapshot_json(cpu(), TMP("snap.json")), AG_OK);
  assert_int_equal(ag_report_from_trace(TMP("trace.json"), TMP("snap.json"), TMP("with_snap.html")), AG_OK);
  h = slurp(TMP("with_snap.html"));
  assert_non_null(strstr(h, ",\"snapshot\":{\"device\":\"cpu:0\""));
  free(h);
  /* a snapshot is not a trace, and a trace is not a snapshot */
  assert_int_equal(ag_report_from_trace(TMP("snap.json"), NULL, TMP("x.html")), AG_ERR_CORRUPT);
  assert_int_equal(ag_report_from_trace(TMP("trace.json"), TMP("bad.json"), TMP("x.html")), AG_ERR_CORRUPT);
}

/* The number after `key` in s at or after `from`, or -1. */
static long long number_after(const char *from, const char *key) {
  const char *k = from ? strstr(from, key) : NULL;
  return k ? strtoll(k + strlen(key), NULL, 10) : -1;
}

/* The segments at the peak are those of the moment of the peak, mid-step:
 * each step climbs in 64 small allocations (the peak rises by less than
 * 1/16 with each of the last ones, so the allocator does not snapshot every
 * one) and frees everything before it ends. After a repeat of the step the
 * snapshot's allocated bytes are the recorded peak exactly, and its blocks
 * hold the 64 allocations; a snapshot at the end of the step would hold
 * none of them. */
static void test_snapshot_at_peak(void **state) {
  (void)state;
  assert_int_equal(ag_memory_reset_peak(cpu()), AG_OK);
  ag_profiler_config pc = {.trace = true};
  ag_profiler *p = ag_profiler_create(cpu(), &pc);
  assert_non_null(p);
  enum { N = 64 };
  int64_t shape[1] = {16384 + 7}; /* 64 KiB and a bit: a size nothing else here has */
  for (int s = 0; s < 3; s++) {
    assert_int_equal(ag_profiler_step_begin(p), AG_OK);
    ag_tensor *t[N];
    for (int i = 0; i < N; i++) assert_non_null(t[i] = ag_zeros(cpu(), AG_F32, 1, shape));
    for (int i = 0; i < N; i++) ag_tensor_release(t[i]);
    assert_int_equal(ag_profiler_step_end(p), AG_OK);
  }
  ag_memory_stats ms;
  assert_int_equal(ag_memory_stats_get(cpu(), &ms), AG_OK);
  assert_int_equal(ag_profiler_write_trace(p, TMP("peak.json")), AG_OK);
  ag_profiler_destroy(p);
  char *t = slurp(TMP("peak.json"));
  assert_non_null(t);
  const char *snap = strstr(t, "\"snapshot_peak\":{");
  assert_non_null(snap);
  const char *end = strstr(snap, "\"snapshot_end\":");
  assert_non_null(end);
  long long at = number_after(snap, "\"allocated_bytes\":{\"all\":{\"current\":");
  printf("recorded peak %lld, snapshot at %lld (now %lld), in step %lld\n", (long long)ms.allocated_bytes[AG_POOL_ALL].peak,
         at, (long long)ms.allocated_bytes[AG_POOL_ALL].current, number_after(t, "\"snapshot_peak_step\":"));
  assert_int_equal(at, ms.allocated_bytes[AG_POOL_ALL].peak);
  assert_non_null(strstr(t, "\"snapshot_peak_in_step\":true,\n\"snapshot_peak_step\":1,"));
  assert_true(ms.allocated_bytes[AG_POOL_ALL].current < at);
  /* The 64 blocks (requested 65564 bytes each) are allocated in it. */
  int held = 0;
  for (const char *q = strstr(snap, "\"requested_size\":65564,"); q && q < end; q = strstr(q + 1, "\"requested_size\":65564,"))
    held += strncmp(strstr(q, "\"state\":") + 8, "\"active_allocated\"", 18) == 0;
  assert_int_equal(held, N);
  free(t);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_errors), cmocka_unit_test(test_write),
                                     cmocka_unit_test(test_snapshot_at_peak)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
