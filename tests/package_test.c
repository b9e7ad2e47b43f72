/* The library's version at run time matches the header macros it was built
 * with, and the generated package files agree with both (tests/package.cmake
 * also installs the build and runs the installed CLI). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "anygrad/anygrad.h"

static void test_version_matches_macros(void **state) {
  int ma = -1, mi = -1, pa = -1;
  int n = ag_version(&ma, &mi, &pa);
  assert_int_equal(ma, AG_VERSION_MAJOR);
  assert_int_equal(mi, AG_VERSION_MINOR);
  assert_int_equal(pa, AG_VERSION_PATCH);
  assert_int_equal(n, AG_VERSION_NUMBER);
  assert_int_equal(n, ma * 10000 + mi * 100 + pa);
  assert_int_equal(ag_version(NULL, NULL, NULL), AG_VERSION_NUMBER);
  assert_string_equal(ag_version_string(), AG_VERSION_STRING);
  char want[32];
  snprintf(want, sizeof want, "%d.%d.%d", ma, mi, pa);
  assert_string_equal(ag_version_string(), want);
  /* the older spellings stay equal */
  assert_int_equal(ANYGRAD_VERSION_MINOR, AG_VERSION_MINOR);
}

/* CMake's project(VERSION) is read from version.h: the string the build
 * system used for the SONAME and the package must be the header's. */
static void test_build_system_version(void **state) {
  assert_string_equal(AG_TEST_PROJECT_VERSION, AG_VERSION_STRING);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_version_matches_macros),
      cmocka_unit_test(test_build_system_version),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
