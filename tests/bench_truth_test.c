/* The result check of `anygrad bench` (tools/cmd_bench.c, ag_bench_compare)
 * on crafted buffers: an output corrupted in one element, by a NaN or an
 * infinity, a large output corrupted at its last element (the sample keeps
 * the first and the last), an exact op (cast) one f16 ULP off, and a
 * rounding difference the conformance tolerance accepts; then a whole
 * device run under the allocator's failure injection: error rows with the
 * status and no times. */
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
#include "conformance.h"

#define assert_has(s, sub)                                                                \
  do {                                                                                    \
    const char *s_ = (s);                                                                 \
    if (!s_ || !strstr(s_, (sub))) fail_msg("'%s' lacks '%s'", s_ ? s_ : "(null)", (sub)); \
  } while (0)

/* want: 1 + i/n; got: the same */
static void fill(float *want, float *got, int64_t n) {
  for (int64_t i = 0; i < n; i++) want[i] = got[i] = 1.0f + (float)i / (float)n;
}

static void corrupted_element(void **state) {
  (void)state;
  enum { N = 1000 };
  float want[N], got[N];
  char why[256] = "";
  fill(want, got, N);
  assert_int_equal(ag_bench_compare(AG_F32, got, want, N, false, why, sizeof why), AG_BENCH_OK);
  got[537] += 0.25f; /* a wrong element: far outside the f32 NMSE threshold */
  assert_int_equal(ag_bench_compare(AG_F32, got, want, N, false, why, sizeof why), AG_BENCH_ERROR);
  assert_has(why, "element 537");
  assert_has(why, "nmse");
  assert_has(why, "got 1.786");
}

static void nan_and_inf(void **state) {
  (void)state;
  enum { N = 64 };
  float want[N], got[N];
  char why[256] = "";
  fill(want, got, N);
  got[3] = NAN;
  assert_int_equal(ag_bench_compare(AG_F32, got, want, N, false, why, sizeof why), AG_BENCH_ERROR);
  assert_has(why, "element 3: got nan");
  fill(want, got, N);
  got[60] = INFINITY;
  assert_int_equal(ag_bench_compare(AG_F32, got, want, N, false, why, sizeof why), AG_BENCH_ERROR);
  assert_has(why, "element 60");
  assert_has(why, "infinities");
  /* NaN where the CPU has NaN is a match */
  fill(want, got, N);
  got[5] = want[5] = NAN;
  assert_int_equal(ag_bench_compare(AG_F32, got, want, N, false, why, sizeof why), AG_BENCH_OK);
}

static void large_output_sampled(void **state) {
  (void)state;
  const int64_t n = (int64_t)1 << 22; /* 4M: sampled */
  float *want = malloc((size_t)n * sizeof *want), *got = malloc((size_t)n * sizeof *got);
  assert_non_null(want);
  assert_non_null(got);
  char why[256] = "";
  fill(want, got, n);
  assert_int_equal(ag_bench_compare(AG_F32, got, want, n, false, why, sizeof why), AG_BENCH_OK);
  got[n - 1] = -7; /* the last element is always in the sample */
  assert_int_equal(ag_bench_compare(AG_F32, got, want, n, false, why, sizeof why), AG_BENCH_ERROR);
  assert_has(why, "element 4194303");
  got[n - 1] = want[n - 1];
  got[0] = 0; /* and so is the first */
  assert_int_equal(ag_bench_compare(AG_F32, got, want, n, false, why, sizeof why), AG_BENCH_ERROR);
  assert_has(why, "element 0:");
  free(want);
  free(got);
}

static void tolerance_of_the_conformance(void **state) {
  (void)state;
  enum { N = 256 };
  float want[N], got[N];
  char why[256] = "";
  fill(want, got, N);
  /* one f32 ULP on every element: rounding, within ag_conf_threshold(f32) */
  for (int i = 0; i < N; i++) got[i] = nextafterf(want[i], INFINITY);
  assert_int_equal(ag_bench_compare(AG_F32, got, want, N, false, why, sizeof why), AG_BENCH_OK);
  /* an exact op (cast, copy) takes no ULP: f16 1.0 against 1.0 + 1 ULP */
  uint16_t hw[N], hg[N];
  for (int i = 0; i < N; i++) hw[i] = hg[i] = 0x3c00;
  assert_int_equal(ag_bench_compare(AG_F16, hg, hw, N, true, why, sizeof why), AG_BENCH_OK);
  hg[17] = 0x3c01;
  assert_int_equal(ag_bench_compare(AG_F16, hg, hw, N, true, why, sizeof why), AG_BENCH_ERROR);
  assert_has(why, "element 17");
  assert_has(why, "exactly 1");
  /* the same bits are what the conformance engine judges */
  double g[2] = {1, 1.5}, r[2] = {1, 1.25};
  assert_false(ag_conf_compare(AG_F32, g, r, NULL, 2, ag_conf_threshold(AG_F32), why, sizeof why));
  assert_has(why, "worst element 1");
}

/* The allocator's failure injection: every raw allocation fails, so no case
 * can be run, and each row is an error naming AG_ERR_OOM, without times. */
static void injected_failure_is_an_error_row(void **state) {
  (void)state;
  ag_bench_opts o = ag_bench_default_opts();
  o.large_numel = (int64_t)3 << 20; /* a size no earlier test left cached */
  o.reps = 1;
  o.ops = "add,sum";
  ag_bench_row rows[4];
  assert_int_equal(ag_device_synchronize(AG_CPU), AG_OK);
  assert_int_equal(ag_alloc_inject_failure(AG_CPU, 1, -1), AG_OK);
  int n = ag_bench_device(AG_CPU, &o, rows, 4);
  assert_int_equal(ag_alloc_inject_failure(AG_CPU, 0, 0), AG_OK);
  assert_int_equal(n, 2);
  for (int i = 0; i < n; i++) {
    assert_int_equal(rows[i].status, AG_BENCH_ERROR);
    assert_has(rows[i].error, "AG_ERR_OOM");
    assert_true(rows[i].large_ms == 0 && rows[i].gbps == 0);
  }
  /* and without it the same rows are timed */
  n = ag_bench_device(AG_CPU, &o, rows, 4);
  assert_int_equal(n, 2);
  for (int i = 0; i < n; i++) {
    assert_int_equal(rows[i].status, AG_BENCH_OK);
    assert_string_equal(rows[i].error, "");
    assert_true(rows[i].large_ms > 0);
  }
  assert_string_equal(ag_bench_status_name(AG_BENCH_UNSUPPORTED), "unsupported");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(corrupted_element),
      cmocka_unit_test(nan_and_inf),
      cmocka_unit_test(large_output_sampled),
      cmocka_unit_test(tolerance_of_the_conformance),
      cmocka_unit_test(injected_failure_is_an_error_row),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
