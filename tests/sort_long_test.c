/* Sort and argsort of long lines on AG_TEST_DEVICE (the CPU when unset;
 * absent devices skip) against the CPU backend, bit for bit: lines of
 * 100003 elements (not a power of two) along a middle dim, many ties, NaNs
 * and both zeros, ascending and descending, in f32, f16, bf16 and f64 (f64
 * and the half types where the device has them). The stable order is
 * unique, so any difference in a value's bits or an index is a bug. */
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
#include "test_device.h"

/* x [o, r, in] on the CPU: values from a small set (ties), a few NaNs, -0
 * and +0, by a fixed linear congruential sequence. */
static ag_tensor *make_x(ag_dtype dt, int64_t o, int64_t r, int64_t in) {
  int64_t n = o * r * in, shape[3] = {o, r, in};
  float *v = malloc((size_t)n * sizeof *v);
  assert_non_null(v);
  uint32_t s = 12345u;
  for (int64_t i = 0; i < n; i++) {
    s = s * 1664525u + 1013904223u;
    uint32_t k = s >> 8;
    v[i] = k % 97 == 0 ? NAN : k % 89 == 0 ? -0.0f : (float)((int)(k % 4001) - 2000) * 0.25f;
  }
  ag_tensor *f = ag_from_host(AG_CPU, AG_F32, 3, shape, v);
  free(v);
  assert_non_null(f);
  ag_tensor *x = ag_cast(f, dt);
  ag_tensor_release(f);
  if (!x) fail_msg("ag_cast: %s", ag_last_error());
  return x;
}

static void *bytes_of(ag_tensor *t, size_t esz) {
  size_t nb = (size_t)ag_tensor_numel(t) * esz;
  void *b = malloc(nb);
  assert_non_null(b);
  if (ag_to_host(t, b, nb) != AG_OK) fail_msg("ag_to_host: %s", ag_last_error());
  return b;
}

static void check_case(ag_dtype dt, size_t esz, int64_t o, int64_t r, int64_t in, bool desc) {
  ag_tensor *xc = make_x(dt, o, r, in);
  ag_tensor *xd = ag_to_device(xc, TEST_DEV);
  if (!xd) fail_msg("ag_to_device: %s", ag_last_error());
  ag_tensor *vc = NULL, *ic = NULL, *vd = NULL, *id = NULL;
  if (ag_sort(xc, 1, desc, &vc, &ic) != AG_OK) fail_msg("CPU ag_sort: %s", ag_last_error());
  ag_status st = ag_sort(xd, 1, desc, &vd, &id);
  if (st == AG_ERR_UNSUPPORTED && dt != AG_F32) { /* a dtype the device lacks */
    print_message("skipped %s: %s\n", ag_dtype_name(dt), ag_last_error());
    ag_error_clear();
  } else {
    if (st != AG_OK) fail_msg("ag_sort on the device: %s", ag_last_error());
    int64_t n = o * r * in;
    unsigned char *a = bytes_of(vc, esz), *b = bytes_of(vd, esz);
    int64_t *ia = bytes_of(ic, 8), *ib = bytes_of(id, 8);
    for (int64_t i = 0; i < n; i++)
      if (memcmp(a + i * (int64_t)esz, b + i * (int64_t)esz, esz) || ia[i] != ib[i])
        fail_msg("%s [%lld, %lld, %lld] %s: element %lld differs (index %lld on the CPU, %lld on the device)",
                 ag_dtype_name(dt), (long long)o, (long long)r, (long long)in, desc ? "descending" : "ascending",
                 (long long)i, (long long)ia[i], (long long)ib[i]);
    free(a);
    free(b);
    free(ia);
    free(ib);
  }
  ag_tensor_release(vc);
  ag_tensor_release(ic);
  ag_tensor_release(vd);
  ag_tensor_release(id);
  ag_tensor_release(xd);
  ag_tensor_release(xc);
}

static void test_long_f32(void **state) {
  (void)state;
  check_case(AG_F32, 4, 2, 100003, 3, false);
  check_case(AG_F32, 4, 2, 100003, 3, true);
}

static void test_long_half(void **state) {
  (void)state;
  check_case(AG_F16, 2, 1, 100003, 2, true);
  check_case(AG_BF16, 2, 3, 33333, 1, false);
}

static void test_f64_and_short(void **state) {
  (void)state;
  check_case(AG_F64, 8, 3, 50001, 2, false);
  check_case(AG_F64, 8, 5, 1000, 1, true);
  /* lines of 1, 2 and 3: one pass, then the first merges */
  for (int64_t r = 1; r <= 3; r++) check_case(AG_F32, 4, 4, r, 5, r == 2);
}

int main(void) {
  (void)TEST_DEV;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_long_f32),
      cmocka_unit_test(test_long_half),
      cmocka_unit_test(test_f64_and_short),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
