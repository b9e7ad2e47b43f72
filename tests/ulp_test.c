/* tools/ulp.h and the accuracy statistics of the conformance engine:
 * ULP distances at the special points (signed zeros, subnormals, the
 * largest finite values, infinities, NaN) against counts done by stepping
 * with nextafter, and the nearest-rank median / p99 / max. */
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "conformance.h"
#include "ulp.h"

/* Steps of nextafterf from a up to b (a <= b), the definition the header
 * implements by bit arithmetic; -0 and +0 are one point. */
static int64_t steps_f32(float a, float b) {
  int64_t n = 0;
  for (float x = a; x < b; x = nextafterf(x, INFINITY)) {
    if (x == 0 && signbit(x)) x = 0.0f; /* -0 -> +0 is no step */
    if (x >= b) break;
    n++;
  }
  return n;
}

static void special_points(void **state) {
  (void)state;
  assert_int_equal(ag_ulp_distance_f32(0.0f, -0.0f), 0);
  assert_int_equal(ag_ulp_distance_f64(0.0, -0.0), 0);
  assert_int_equal(ag_ulp_distance_f32(1.0f, 1.0f), 0);
  assert_int_equal(ag_ulp_distance_f32(1.0f, nextafterf(1.0f, 2.0f)), 1);
  assert_int_equal(ag_ulp_distance_f32(1.0f, nextafterf(1.0f, 0.0f)), 1);
  assert_int_equal(ag_ulp_distance_f64(1.0, nextafter(1.0, 2.0)), 1);
  /* the smallest subnormals of both signs are 2 apart, 1 from each zero */
  float ts = 0x1p-149f;
  assert_int_equal(ag_ulp_distance_f32(ts, -ts), 2);
  assert_int_equal(ag_ulp_distance_f32(ts, -0.0f), 1);
  assert_int_equal(ag_ulp_distance_f64(0x1p-1074, -0x1p-1074), 2);
  /* the largest finite value is one step from infinity */
  assert_int_equal(ag_ulp_distance_f32(FLT_MAX, INFINITY), 1);
  assert_int_equal(ag_ulp_distance_f64(-DBL_MAX, -INFINITY), 1);
  /* 2^23 floats in each binade [1, 2) */
  assert_int_equal(ag_ulp_distance_f32(1.0f, 2.0f), 1 << 23);
  assert_int_equal(ag_ulp_distance_f32(-1.0f, 1.0f), 2 * (int64_t)0x3f800000);
  /* the whole line: -inf to +inf in f64 does not overflow */
  assert_int_equal(ag_ulp_distance_f64(-INFINITY, INFINITY), INT64_MAX - 1);
  assert_int_equal(ag_ulp_distance_f64(-1.0, 1.0), 2 * (int64_t)0x3ff0000000000000ll);
  /* NaN */
  assert_int_equal(ag_ulp_distance_f32(NAN, -NAN), 0);
  assert_int_equal(ag_ulp_distance_f32(NAN, 1.0f), INT64_MAX);
  assert_int_equal(ag_ulp_distance_f64(INFINITY, NAN), INT64_MAX);
}

static void matches_nextafter(void **state) {
  (void)state;
  static const float pts[][2] = {{-0x1p-140f, 0x1p-140f}, {0.999f, 1.001f}, {-1e-38f, 1e-38f},
                                 {-2.0f, -1.9999f}, {3.0e38f, FLT_MAX}, {-0x1.0p-126f, 0x1.1p-126f}};
  for (size_t i = 0; i < sizeof pts / sizeof pts[0]; i++) {
    int64_t want = steps_f32(pts[i][0], pts[i][1]);
    assert_int_equal(ag_ulp_distance_f32(pts[i][0], pts[i][1]), want);
    assert_int_equal(ag_ulp_distance_f32(pts[i][1], pts[i][0]), want);
  }
}

static void order_statistics(void **state) {
  (void)state;
  ag_conf_dist d = {0};
  d.n = d.cap = 200;
  d.ulps = malloc(200 * sizeof *d.ulps);
  assert_non_null(d.ulps);
  /* 0..199 shuffled; two NaN mismatches at the top */
  for (int64_t i = 0; i < 200; i++) d.ulps[i] = (i * 73) % 200;
  d.ulps[5] = INT64_MAX;
  d.ulps[6] = INT64_MAX;
  ag_conf_stats st = ag_conf_dist_stats(&d);
  assert_int_equal(st.n, 200);
  assert_int_equal(st.max, INT64_MAX);
  assert_int_equal(st.nan_mismatch, 2);
  /* sorted: 0..199 without two values, then two INT64_MAX; nearest rank */
  assert_true(st.median >= 99 && st.median <= 101);
  assert_int_equal(st.p99, d.ulps[197]);
  assert_true(st.p99 >= 197);
  free(d.ulps);
  ag_conf_dist e = {0};
  ag_conf_stats es = ag_conf_dist_stats(&e);
  assert_int_equal(es.median, -1);
  assert_int_equal(es.max, -1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(special_points),
      cmocka_unit_test(matches_nextafter),
      cmocka_unit_test(order_statistics),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
