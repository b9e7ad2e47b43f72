/* The numerics mode (anygrad/device.h, docs/numerics.md): setting, reading,
 * parsing and naming it; AG_NUMERICS (run as its own processes: `env-portable`
 * with AG_NUMERICS=portable, `env-reject` with a value the variable does not
 * take); the per-device check on the CPU and the refusal of a backend module
 * without portable kernels (the example module of tests/extbackend); and the
 * bit-for-bit comparison of `anygrad check --bitwise` on crafted buffers: one
 * ULP apart, -0 against +0, NaNs of other payloads. */
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

#define assert_has(s, sub)                                                \
  do {                                                                    \
    const char *s_ = (s);                                                 \
    if (!s_ || !strstr(s_, (sub))) fail_msg("'%s' lacks '%s'", s_ ? s_ : "(null)", (sub)); \
  } while (0)

static void set_get_parse_name(void **state) {
  (void)state;
  /* AG_NUMERICS is empty for this process: the default */
  assert_int_equal(ag_get_numerics(), AG_NUMERICS_DEFAULT);
  assert_int_equal(ag_set_numerics(AG_NUMERICS_PORTABLE), AG_OK);
  assert_int_equal(ag_get_numerics(), AG_NUMERICS_PORTABLE);
  /* a value outside the enum is refused and the mode kept */
  assert_int_equal(ag_set_numerics((ag_numerics)7), AG_ERR_INVALID);
  assert_has(ag_last_error(), "ag_set_numerics");
  assert_int_equal(ag_get_numerics(), AG_NUMERICS_PORTABLE);
  assert_int_equal(ag_set_numerics(AG_NUMERICS_DEFAULT), AG_OK);
  assert_int_equal(ag_get_numerics(), AG_NUMERICS_DEFAULT);

  ag_numerics m = (ag_numerics)5;
  assert_int_equal(ag_numerics_parse("portable", &m), AG_OK);
  assert_int_equal(m, AG_NUMERICS_PORTABLE);
  assert_int_equal(ag_numerics_parse("default", &m), AG_OK);
  assert_int_equal(m, AG_NUMERICS_DEFAULT);
  static const char *const bad[] = {"Portable", "", "portable ", "fast", "1"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    m = (ag_numerics)5;
    assert_int_equal(ag_numerics_parse(bad[i], &m), AG_ERR_INVALID);
    assert_int_equal(m, 5); /* untouched */
    assert_has(ag_last_error(), "is not default or portable");
  }
  assert_int_equal(ag_numerics_parse(NULL, &m), AG_ERR_INVALID);
  assert_int_equal(ag_numerics_parse("default", NULL), AG_ERR_INVALID);
  assert_string_equal(ag_numerics_name(AG_NUMERICS_DEFAULT), "default");
  assert_string_equal(ag_numerics_name(AG_NUMERICS_PORTABLE), "portable");
  assert_string_equal(ag_numerics_name((ag_numerics)7), "?");
  ag_error_clear();
}

/* The CPU runs the default mode; portable mode it either honours (an
 * elementwise add runs) or refuses with its reason on the check and on
 * every launch, never silently running the default kernels. */
static void device_check_cpu(void **state) {
  (void)state;
  assert_int_equal(ag_device_numerics_check(AG_CPU, AG_NUMERICS_DEFAULT), AG_OK);
  assert_int_equal(ag_device_numerics_check(AG_CPU, (ag_numerics)9), AG_ERR_INVALID);
  ag_status pst = ag_device_numerics_check(AG_CPU, AG_NUMERICS_PORTABLE);
  assert_true(pst == AG_OK || pst == AG_ERR_UNSUPPORTED);
  char reason[512] = "";
  if (pst != AG_OK) {
    snprintf(reason, sizeof reason, "%s", ag_last_error());
    assert_has(reason, "cpu:0");
  }
  assert_int_equal(ag_get_numerics(), AG_NUMERICS_DEFAULT); /* the check does not change the mode */

  int64_t s[1] = {4};
  const float av[4] = {1, 2, 3, 4}, bv[4] = {0.5f, -1, 1e-3f, 7};
  ag_scope_begin();
  ag_tensor *a = ag_from_host(AG_CPU, AG_F32, 1, s, av), *b = ag_from_host(AG_CPU, AG_F32, 1, s, bv);
  assert_non_null(a);
  assert_non_null(b);
  assert_int_equal(ag_set_numerics(AG_NUMERICS_PORTABLE), AG_OK);
  ag_tensor *c = ag_add(a, b);
  if (pst == AG_OK) {
    float out[4];
    assert_non_null(c);
    assert_int_equal(ag_to_host(c, out, sizeof out), AG_OK);
    for (int i = 0; i < 4; i++) assert_true(out[i] == av[i] + bv[i]); /* one correct rounding */
  } else {
    assert_null(c);
    assert_int_equal(ag_last_status(), AG_ERR_UNSUPPORTED);
    assert_has(ag_last_error(), "refuses portable numerics");
    /* the cached refusal repeats its reason */
    assert_int_equal(ag_device_numerics_check(AG_CPU, AG_NUMERICS_PORTABLE), AG_ERR_UNSUPPORTED);
    assert_string_equal(ag_last_error(), reason);
  }
  assert_int_equal(ag_set_numerics(AG_NUMERICS_DEFAULT), AG_OK);
  ag_error_clear();
  assert_non_null(ag_add(a, b)); /* the default mode is untouched */
  assert_int_equal(ag_scope_end(), AG_OK);
}

/* A module without the 5.2 entries (tests/extbackend/minihost.c) refuses the
 * mode with the reason, and every launch in portable mode on it. */
static void refusal_of_backend_without_portable(void **state) {
  (void)state;
  ag_device d;
  if (ag_device_parse("minihost:0", &d) != AG_OK) {
    ag_error_clear();
    skip(); /* not on AG_BACKEND_PATH */
  }
  assert_int_equal(ag_device_numerics_check(d, AG_NUMERICS_DEFAULT), AG_OK);
  assert_int_equal(ag_device_numerics_check(d, AG_NUMERICS_PORTABLE), AG_ERR_UNSUPPORTED);
  assert_has(ag_last_error(), "minihost:0 refuses portable numerics");
  assert_has(ag_last_error(), "backend minihost has no portable numerics");
  int64_t s[1] = {8};
  ag_scope_begin();
  assert_int_equal(ag_set_numerics(AG_NUMERICS_PORTABLE), AG_OK);
  assert_null(ag_full(d, AG_F32, 1, s, 1.5));
  assert_int_equal(ag_last_status(), AG_ERR_UNSUPPORTED);
  assert_has(ag_last_error(), "minihost:0 refuses portable numerics");
  assert_int_equal(ag_set_numerics(AG_NUMERICS_DEFAULT), AG_OK);
  ag_error_clear();
  assert_int_equal(ag_scope_end(), AG_OK);
}

/* ---- the bit-for-bit comparison of `anygrad check --bitwise` ---- */

static uint32_t f2u(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

static float u2f(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static void bits_f32(void **state) {
  (void)state;
  /* 0: equal; 1: one ULP apart; 2: -0 against +0; 3: NaNs of other sign
   * and payload (equal); 4: NaN against a number; 5: inf equal */
  float a[6] = {1.5f, 1.0f, -0.0f, u2f(0xffc00000u), u2f(0x7fc00000u), INFINITY};
  float b[6] = {1.5f, u2f(0x3f800001u), 0.0f, u2f(0x7f800001u), 1.0f, INFINITY};
  assert_true(ag_conf_bits_same(AG_F32, a, b, 0));
  assert_false(ag_conf_bits_same(AG_F32, a, b, 1));
  assert_false(ag_conf_bits_same(AG_F32, a, b, 2));
  assert_true(ag_conf_bits_same(AG_F32, a, b, 3));
  assert_false(ag_conf_bits_same(AG_F32, a, b, 4));
  assert_true(ag_conf_bits_same(AG_F32, a, b, 5));
  ag_conf_bitdiff d;
  assert_int_equal(ag_conf_bits_compare(AG_F32, a, b, 6, &d), 3);
  assert_int_equal(d.index, 1);
  assert_int_equal(d.a_bits, 0x3f800000u);
  assert_int_equal(d.b_bits, 0x3f800001u);
  assert_int_equal(d.ulps, 1);
  assert_true(d.a == 1.0 && d.b == (double)u2f(0x3f800001u));
  char s[256];
  ag_conf_bitdiff_str(AG_F32, &d, s, sizeof s);
  assert_has(s, "element 1: 0x3f800000 (1) vs 0x3f800001 (1.00000012), 1 ULP");
  /* -0 against +0: bits differ, distance 0 */
  assert_int_equal(ag_conf_bits_compare(AG_F32, a + 2, b + 2, 1, &d), 1);
  assert_int_equal(d.ulps, 0);
  assert_int_equal(d.a_bits, 0x80000000u);
  assert_has(ag_conf_bitdiff_str(AG_F32, &d, s, sizeof s), "signed zeros");
  /* NaN against a number */
  assert_int_equal(ag_conf_bits_compare(AG_F32, a + 4, b + 4, 1, &d), 1);
  assert_true(d.ulps == INT64_MAX);
  assert_has(ag_conf_bitdiff_str(AG_F32, &d, s, sizeof s), "NaN against a number");
  /* every NaN equals every NaN */
  float n1[3] = {u2f(0x7fc00000u), u2f(0xffc00000u), u2f(0x7f812345u)};
  float n2[3] = {u2f(0xffffffffu), u2f(0x7f800001u), u2f(0x7fc00000u)};
  assert_int_equal(ag_conf_bits_compare(AG_F32, n1, n2, 3, NULL), 0);
  /* the smallest subnormals of either sign: one ULP from zero, two apart */
  float s1[1] = {u2f(0x00000001u)}, s2[1] = {u2f(0x80000001u)};
  assert_int_equal(ag_conf_bits_compare(AG_F32, s1, s2, 1, &d), 1);
  assert_int_equal(d.ulps, 2);
  (void)f2u;
}

static void bits_other_dtypes(void **state) {
  (void)state;
  ag_conf_bitdiff d;
  /* f16: 1.0 is 0x3c00; NaNs 0x7e00 and 0xfc01 are equal */
  uint16_t h1[3] = {0x3c00, 0x7e00, 0x8000}, h2[3] = {0x3c01, 0xfc01, 0x0000};
  assert_int_equal(ag_conf_bits_compare(AG_F16, h1, h2, 3, &d), 2);
  assert_int_equal(d.index, 0);
  assert_int_equal(d.ulps, 1);
  assert_true(d.a == 1.0);
  char s[256];
  assert_has(ag_conf_bitdiff_str(AG_F16, &d, s, sizeof s), "0x3c00 (1) vs 0x3c01");
  /* bf16: 1.0 is 0x3f80; 3 ULP */
  uint16_t b1[2] = {0x3f80, 0x7fc1}, b2[2] = {0x3f83, 0xffc0};
  assert_int_equal(ag_conf_bits_compare(AG_BF16, b1, b2, 2, &d), 1);
  assert_int_equal(d.ulps, 3);
  /* f64: one ULP */
  double x1[2] = {1.0, NAN}, x2[2] = {nextafter(1.0, 2.0), -NAN};
  assert_int_equal(ag_conf_bits_compare(AG_F64, x1, x2, 2, &d), 1);
  assert_int_equal(d.ulps, 1);
  assert_has(ag_conf_bitdiff_str(AG_F64, &d, s, sizeof s), "0x3ff0000000000000 (1) vs 0x3ff0000000000001");
  /* integers: by value, distance |a - b| */
  int32_t i1[3] = {5, -7, 0}, i2[3] = {5, -4, 0};
  assert_int_equal(ag_conf_bits_compare(AG_I32, i1, i2, 3, &d), 1);
  assert_int_equal(d.index, 1);
  assert_int_equal(d.ulps, 3);
  assert_has(ag_conf_bitdiff_str(AG_I32, &d, s, sizeof s), "(-7) vs 0xfffffffc (-4), 3");
  int64_t l1[1] = {INT64_MIN}, l2[1] = {INT64_MAX};
  assert_int_equal(ag_conf_bits_compare(AG_I64, l1, l2, 1, &d), 1);
  assert_true(d.ulps == INT64_MAX - 1); /* saturated, never read as NaN */
  uint8_t u1[2] = {1, 0}, u2[2] = {1, 1};
  assert_int_equal(ag_conf_bits_compare(AG_BOOL, u1, u2, 2, &d), 1);
  assert_int_equal(d.index, 1);
}

/* Two captures of a row, crafted: the same, a difference in one element of
 * the second buffer, a buffer of another shape, a missing buffer. */
static void capture_compare(void **state) {
  (void)state;
  float v0[4] = {1, 2, 3, 4}, v1[2] = {0.5f, -0.0f}, w1[2] = {0.5f, 0.0f};
  ag_conf_buf ba[2] = {{.what = "case 'a' read 0", .dt = AG_F32, .ndim = 2, .shape = {2, 2}, .n = 4, .bytes = v0},
                       {.what = "case 'a' read 1", .dt = AG_F32, .ndim = 1, .shape = {2}, .n = 2, .bytes = v1}};
  ag_conf_buf bb[2] = {ba[0], ba[1]};
  ag_conf_capture a = {.b = ba, .n = 2, .cap = 2}, b = {.b = bb, .n = 2, .cap = 2};
  char why[512];
  ag_conf_bitdiff d;
  assert_int_equal(ag_conf_capture_compare(&a, &b, why, sizeof why, &d), 0);
  assert_string_equal(why, "");
  assert_int_equal(d.index, -1);
  bb[1].bytes = w1; /* -0 against +0 */
  assert_int_equal(ag_conf_capture_compare(&a, &b, why, sizeof why, &d), 1);
  assert_has(why, "case 'a' read 1 f32[2], 1 of 2 elements differ; first element 1: 0x80000000 (-0) vs 0x00000000 (0)");
  assert_int_equal(d.buffer, 1);
  assert_int_equal(d.index, 1);
  bb[1].bytes = v1;
  bb[0].shape[0] = 4, bb[0].shape[1] = 1;
  assert_int_equal(ag_conf_capture_compare(&a, &b, why, sizeof why, &d), 1);
  assert_has(why, "case 'a' read 0: f32[2,2] against f32[4,1]");
  assert_int_equal(d.index, -1);
  bb[0] = ba[0];
  b.n = 1;
  assert_int_equal(ag_conf_capture_compare(&a, &b, why, sizeof why, &d), 1);
  assert_has(why, "case 'a' read 1: f32[2] against nothing");
}

/* A row run twice on the CPU captures the same bits; in portable mode the
 * row runs or is refused as a whole, never half. */
static void capture_cpu_row(void **state) {
  (void)state;
  int op = ag_conf_op_find("add");
  assert_true(op >= 0);
  for (int mode = 0; mode < 2; mode++) {
    assert_int_equal(ag_set_numerics(mode ? AG_NUMERICS_PORTABLE : AG_NUMERICS_DEFAULT), AG_OK);
    ag_conf_capture x = {0}, y = {0};
    char msg[512];
    ag_conf_result r1 = ag_conf_run_capture(op, AG_F32, AG_CPU, AG_CONF_DEFAULT_SEED, NULL, msg, sizeof msg, &x);
    ag_conf_result r2 = ag_conf_run_capture(op, AG_F32, AG_CPU, AG_CONF_DEFAULT_SEED, NULL, msg, sizeof msg, &y);
    assert_int_equal(r1, r2);
    if (mode == 0 || r1 == AG_CONF_PASS) {
      assert_int_equal(r1, AG_CONF_PASS);
      assert_true(x.n > 0);
      assert_int_equal(ag_conf_capture_compare(&x, &y, NULL, 0, NULL), 0);
    } else {
      assert_int_equal(r1, AG_CONF_UNSUPPORTED);
      assert_has(msg, "portable numerics");
    }
    ag_conf_capture_free(&x);
    ag_conf_capture_free(&y);
  }
  assert_int_equal(ag_set_numerics(AG_NUMERICS_DEFAULT), AG_OK);
}

/* AG_NUMERICS=portable (set by the test): the initial mode. */
static void env_portable(void **state) {
  (void)state;
  assert_int_equal(ag_get_numerics(), AG_NUMERICS_PORTABLE);
  assert_int_equal(ag_env_check(), AG_OK);
  assert_int_equal(ag_set_numerics(AG_NUMERICS_DEFAULT), AG_OK); /* the API wins over the variable */
  assert_int_equal(ag_get_numerics(), AG_NUMERICS_DEFAULT);
}

/* AG_NUMERICS=fast (set by the test): the first device open stops with
 * AG_ERR_INVALID naming the variable; the mode reads as the default. */
static void env_reject(void **state) {
  (void)state;
  int64_t s[1] = {2};
  assert_null(ag_zeros(AG_CPU, AG_F32, 1, s));
  assert_int_equal(ag_last_status(), AG_ERR_INVALID);
  assert_has(ag_last_error(), "AG_NUMERICS='fast' is not default or portable");
  assert_int_equal(ag_env_check(), AG_ERR_INVALID);
  assert_int_equal(ag_get_numerics(), AG_NUMERICS_DEFAULT);
  ag_error_clear();
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(set_get_parse_name),
      cmocka_unit_test(device_check_cpu),
      cmocka_unit_test(refusal_of_backend_without_portable),
      cmocka_unit_test(bits_f32),
      cmocka_unit_test(bits_other_dtypes),
      cmocka_unit_test(capture_compare),
      cmocka_unit_test(capture_cpu_row),
  };
  const struct CMUnitTest env_p[] = {cmocka_unit_test(env_portable)};
  const struct CMUnitTest env_r[] = {cmocka_unit_test(env_reject)};
  if (argc > 1 && !strcmp(argv[1], "env-portable")) return cmocka_run_group_tests(env_p, NULL, NULL);
  if (argc > 1 && !strcmp(argv[1], "env-reject")) return cmocka_run_group_tests(env_r, NULL, NULL);
  return cmocka_run_group_tests(tests, NULL, NULL);
}
