/* `anygrad compare` run in-process: two replicas on the CPU must train to the
 * same bits, the CPU and OpenCL must agree within a stated tolerance, the exit
 * status must match the report, and every bad request must exit 2. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "anygrad/anygrad.h"

int ag_cmd_compare(int argc, char **argv);

#define JSON_PATH AG_TEST_TMPDIR "/compare_test.json"

/* CPU against OpenCL for 10 MLP steps (f32): the backends sum in different
 * orders, so losses and parameters differ by rounding only. Measured on PoCL:
 * 1e-7 (loss) and 2e-7 (parameters); a wrong kernel shows up at 1e-2 or more.
 * 1e-4 leaves room for OpenCL devices that reduce in other orders. */
#define OPENCL_TOL "1e-4"

static int run(int n, const char **args) {
  char *argv[32];
  argv[0] = "compare";
  for (int i = 0; i < n; i++) argv[i + 1] = (char *)args[i];
  fflush(stdout);
  return ag_cmd_compare(n + 1, argv);
}

static char *slurp(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *s = malloc((size_t)n + 1);
  if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
    free(s);
    s = NULL;
  }
  if (s) s[n] = 0;
  fclose(f);
  return s;
}

/* Number after `"key": ` on the line of device entry `dev` (0-based); NAN for
 * null; the test fails when the key is missing. */
static double device_field(const char *json, int dev, const char *key) {
  const char *p = json;
  for (int i = 0; i <= dev; i++) {
    p = strstr(p, "{\"device\": ");
    assert_non_null(p);
    p++;
  }
  const char *eol = strchr(p, '\n');
  char k[64];
  snprintf(k, sizeof k, "\"%s\": ", key);
  const char *q = strstr(p, k);
  assert_true(q && (!eol || q < eol));
  q += strlen(k);
  return strncmp(q, "null", 4) ? strtod(q, NULL) : NAN;
}

static int count(const char *s, const char *needle) {
  int n = 0;
  for (const char *p = strstr(s, needle); p; p = strstr(p + 1, needle)) n++;
  return n;
}

static void cpu_against_cpu_is_identical(void **state) {
  (void)state;
  int64_t live = ag_live_tensors();
  remove(JSON_PATH);
  const char *a[] = {"--devices", "cpu,cpu", "--steps", "8", "--tol", "0", "--json", JSON_PATH};
  assert_int_equal(run(8, a), 0);
  assert_int_equal(ag_live_tensors(), live);
  char *j = slurp(JSON_PATH);
  assert_non_null(j);
  assert_non_null(strstr(j, "\"diverged\": false"));
  assert_int_equal(count(j, "{\"step\": "), 8);
  assert_true(device_field(j, 1, "max_loss_divergence") == 0.0);
  assert_true(device_field(j, 1, "max_param_divergence") == 0.0);
  assert_true(device_field(j, 1, "init_divergence") == 0.0);
  double first = device_field(j, 0, "first_loss"), last = device_field(j, 0, "final_loss");
  /* 27 classes: an untrained model starts near ln 27 = 3.30 and 8 AdamW steps
   * at lr 3e-3 must lower it. */
  assert_true(first > 2.5 && first < 4.5);
  assert_true(last < first);
  assert_true(device_field(j, 0, "final_loss") == device_field(j, 1, "final_loss"));
  /* --tol 0 is bit for bit; the weights' hashes at the end agree (five
   * tensors of the MLP, one hash per device each) */
  assert_non_null(strstr(j, "\"weights_identical\": true"));
  assert_int_equal(count(j, "{\"name\": "), 5);
  free(j);
}

static void gpt_cpu_against_cpu_checks_every_other_step(void **state) {
  (void)state;
  remove(JSON_PATH);
  const char *a[] = {"--devices", "cpu,cpu", "--model", "gpt", "--steps", "3", "--batch", "4",
                     "--check-every", "2", "--tol", "0", "--json", JSON_PATH};
  assert_int_equal(run(14, a), 0);
  char *j = slurp(JSON_PATH);
  assert_non_null(j);
  assert_non_null(strstr(j, "\"model\": \"gpt\""));
  /* Steps 2 and 3 (the last) compare parameters, step 1 does not. */
  assert_non_null(strstr(j, "{\"step\": 1, ") );
  assert_non_null(strstr(j, "\"param_divergence\": [0, null]"));
  assert_int_equal(count(j, "\"param_divergence\": [0, 0]"), 2);
  free(j);
}

/* Runs `compare` with argv a[0..n) (cpu,cpu, --tol 0, --json JSON_PATH, 3
 * steps) and checks the replicas agree bit for bit, the JSON names model,
 * the first loss lies in (lo, hi) and no tensor is left alive. */
static void check_cpu_replicas_identical(int n, const char **a, const char *model, double lo, double hi) {
  int64_t live = ag_live_tensors();
  remove(JSON_PATH);
  assert_int_equal(run(n, a), 0);
  assert_int_equal(ag_live_tensors(), live);
  char *j = slurp(JSON_PATH);
  assert_non_null(j);
  char want[64];
  snprintf(want, sizeof want, "\"model\": \"%s\"", model);
  assert_non_null(strstr(j, want));
  assert_int_equal(count(j, "{\"step\": "), 3);
  assert_true(device_field(j, 1, "max_loss_divergence") == 0.0);
  assert_true(device_field(j, 1, "max_param_divergence") == 0.0);
  double first = device_field(j, 0, "first_loss");
  assert_true(first > lo && first < hi);
  free(j);
}

/* The CNN on synthetic images: two CPU replicas agree bit for bit, the loss
 * of 10 classes starts near ln 10 and no tensor is left alive. */
static void cnn_cpu_against_cpu_is_identical(void **state) {
  (void)state;
  const char *a[] = {"--devices", "cpu,cpu", "--model", "cnn", "--data", "synthetic", "--steps", "3",
                     "--batch", "8", "--tol", "0", "--json", JSON_PATH};
  check_cpu_replicas_identical(14, a, "cnn", 1.5, 3.5);
}

/* The Llama-style decoder on the gpt model's batches: two CPU replicas
 * agree bit for bit, the loss of 27 characters starts near ln 27 and no
 * tensor is left alive. */
static void llama_cpu_against_cpu_is_identical(void **state) {
  (void)state;
  const char *a[] = {"--devices", "cpu,cpu", "--model", "llama", "--steps", "3", "--batch", "8",
                     "--tol", "0", "--json", JSON_PATH};
  check_cpu_replicas_identical(12, a, "llama", 2.5, 4.5);
}

/* Number after `"key": ` anywhere in the JSON. */
static double top_field(const char *json, const char *key) {
  char k[64];
  snprintf(k, sizeof k, "\"%s\": ", key);
  const char *q = strstr(json, k);
  assert_non_null(q);
  return strtod(q + strlen(k), NULL);
}

static void tolerance_defaults_and_overrides(void **state) {
  (void)state;
  remove(JSON_PATH);
  const char *a[] = {"--devices", "cpu,cpu", "--steps", "1", "--json", JSON_PATH};
  assert_int_equal(run(6, a), 0);
  char *j = slurp(JSON_PATH);
  assert_non_null(j);
  assert_true(top_field(j, "tolerance") == 1e-2);
  assert_true(top_field(j, "loss_tolerance") == 1e-5);
  free(j);
  /* --loss-tol wins over --tol whatever the order; --tol alone sets both. */
  const char *b[] = {"--loss-tol", "1e-7", "--devices", "cpu,cpu", "--tol", "1e-3",
                     "--steps",    "1",    "--json",    JSON_PATH};
  assert_int_equal(run(10, b), 0);
  j = slurp(JSON_PATH);
  assert_non_null(j);
  assert_true(top_field(j, "tolerance") == 1e-3);
  assert_true(top_field(j, "loss_tolerance") == 1e-7);
  free(j);
  const char *c[] = {"--devices", "cpu,cpu", "--tol", "0", "--steps", "1", "--json", JSON_PATH};
  assert_int_equal(run(8, c), 0);
  j = slurp(JSON_PATH);
  assert_non_null(j);
  assert_true(top_field(j, "tolerance") == 0 && top_field(j, "loss_tolerance") == 0);
  free(j);
}

static void cpu_against_opencl_within_tolerance(void **state) {
  (void)state;
  const char *why = NULL;
  if (!ag_backend_available(AG_BACKEND_OPENCL, &why)) {
    printf("skipped: opencl unavailable: %s\n", why ? why : "?");
    skip();
  }
  remove(JSON_PATH);
  const char *a[] = {"--devices", "cpu,opencl:0", "--steps", "10", "--tol", OPENCL_TOL, "--json", JSON_PATH};
  int rc = run(8, a);
  char *j = slurp(JSON_PATH);
  assert_non_null(j);
  double dl = device_field(j, 1, "max_loss_divergence"), dp = device_field(j, 1, "max_param_divergence");
  double init = device_field(j, 1, "init_divergence");
  printf("cpu vs opencl:0: max loss divergence %.3g, max param divergence %.3g, own-init divergence %.3g\n", dl,
         dp, init);
  assert_int_equal(rc, 0);
  assert_true(dl <= 1e-4 && dp <= 1e-4);
  /* Philox gives both backends the same bits; only Box-Muller's log/cos and
   * the scaling round differently. */
  assert_true(init <= 1e-5);
  free(j);

  /* Exit status and report agree at a zero tolerance: 1 exactly when some
   * divergence is nonzero, and then a first step is named. */
  remove(JSON_PATH);
  const char *b[] = {"--devices", "cpu,opencl:0", "--steps", "3", "--tol", "0", "--json", JSON_PATH};
  rc = run(8, b);
  j = slurp(JSON_PATH);
  assert_non_null(j);
  bool differs = device_field(j, 1, "max_loss_divergence") > 0 || device_field(j, 1, "max_param_divergence") > 0;
  assert_int_equal(rc, differs ? 1 : 0);
  assert_int_equal(!isnan(device_field(j, 1, "first_exceed_step")), differs);
  assert_non_null(strstr(j, differs ? "\"diverged\": true" : "\"diverged\": false"));
  free(j);
}

static void bad_requests_exit_2(void **state) {
  (void)state;
  int64_t live = ag_live_tensors();
  const char *one[] = {"--devices", "cpu"};
  assert_int_equal(run(2, one), 2);
  const char *none[] = {"--steps", "3"};
  assert_int_equal(run(2, none), 2);
  const char *ordinal[] = {"--devices", "cpu,cpu:9"};
  assert_int_equal(run(2, ordinal), 2);
  const char *name[] = {"--devices", "cpu,tpu:0"};
  assert_int_equal(run(2, name), 2);
  const char *steps[] = {"--devices", "cpu,cpu", "--steps", "0"};
  assert_int_equal(run(4, steps), 2);
  const char *tol[] = {"--devices", "cpu,cpu", "--tol", "abc"};
  assert_int_equal(run(4, tol), 2);
  const char *ltol[] = {"--devices", "cpu,cpu", "--loss-tol", "-1e-3"};
  assert_int_equal(run(4, ltol), 2);
  const char *numerics[] = {"--devices", "cpu,cpu", "--numerics", "fast"};
  assert_int_equal(run(4, numerics), 2);
  assert_int_equal(ag_get_numerics(), AG_NUMERICS_DEFAULT);
  const char *model[] = {"--devices", "cpu,cpu", "--model", "rnn"};
  assert_int_equal(run(4, model), 2);
  const char *opt[] = {"--devices", "cpu,cpu", "--frobnicate", "1"};
  assert_int_equal(run(4, opt), 2);
  const char *words[] = {"--devices", "cpu,cpu", "--steps", "1", "--words", "/nonexistent/words"};
  assert_int_equal(run(6, words), 2);
  const char *json[] = {"--devices", "cpu,cpu", "--steps", "1", "--json", "/nonexistent/dir/x.json"};
  assert_int_equal(run(6, json), 2);
  const char *data[] = {"--devices", "cpu,cpu", "--model", "cnn", "--steps", "1", "--data", "/nonexistent/dir"};
  assert_int_equal(run(8, data), 2);
  const char *report[] = {"--devices", "cpu,cpu", "--steps", "1", "--report", "/nonexistent/dir/x.html"};
  assert_int_equal(run(6, report), 2);
  const char *help[] = {"--help"};
  assert_int_equal(run(1, help), 0);
  assert_int_equal(ag_live_tensors(), live);
}

static void absent_backend_exits_2(void **state) {
  (void)state;
  for (int k = AG_BACKEND_CUDA; k < AG_BACKEND_COUNT; k++) {
    if (ag_backend_available((ag_backend_kind)k, NULL)) continue;
    char dev[32];
    snprintf(dev, sizeof dev, "cpu,%s:0", ag_backend_name((ag_backend_kind)k));
    const char *a[] = {"--devices", dev, "--steps", "1"};
    assert_int_equal(run(4, a), 2);
    return;
  }
  skip(); /* every backend is present */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(cpu_against_cpu_is_identical),
      cmocka_unit_test(gpt_cpu_against_cpu_checks_every_other_step),
      cmocka_unit_test(cnn_cpu_against_cpu_is_identical),
      cmocka_unit_test(llama_cpu_against_cpu_is_identical),
      cmocka_unit_test(tolerance_defaults_and_overrides),
      cmocka_unit_test(cpu_against_opencl_within_tolerance),
      cmocka_unit_test(bad_requests_exit_2),
      cmocka_unit_test(absent_backend_exits_2),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
