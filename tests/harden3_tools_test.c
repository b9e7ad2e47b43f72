/* The library half of the command line's checks (docs/reliability.md):
 * ag_file_same, which every command uses to refuse an output that is an
 * input or another output, and ag_device_parse's index through the strict
 * parser (an index past int64 was saturated to INT64_MAX). */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "anygrad/anygrad.h"

static char dir[512];

static const char *tmp(const char *name) {
  static char buf[16][640];
  static int k;
  char *b = buf[k++ & 15];
  snprintf(b, sizeof buf[0], "%s/%s", dir, name);
  return b;
}

static void touch(const char *path) {
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs("x", f);
  assert_int_equal(fclose(f), 0);
}

static int setup(void **state) {
  (void)state;
  snprintf(dir, sizeof dir, "%s/harden3_tools_%ld", AG_TEST_TMPDIR, (long)getpid());
  mkdir(dir, 0755);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  char cmd[700];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) return 0;
  return 0;
}

static void file_same(void **state) {
  (void)state;
  touch(tmp("a"));
  touch(tmp("b"));
  assert_int_equal(symlink(tmp("a"), tmp("sym")), 0);
  assert_int_equal(link(tmp("a"), tmp("hard")), 0);
  assert_true(ag_file_same(tmp("a"), tmp("a")));
  assert_true(ag_file_same(tmp("a"), tmp("sym")));
  assert_true(ag_file_same(tmp("hard"), tmp("sym")));
  assert_false(ag_file_same(tmp("a"), tmp("b")));
  /* files that do not exist yet: the same name in the same directory */
  assert_true(ag_file_same(tmp("new"), tmp("new")));
  assert_true(ag_file_same(tmp("new"), tmp("./new")));
  assert_false(ag_file_same(tmp("new"), tmp("new2")));
  assert_false(ag_file_same(tmp("new"), tmp("a")));
  /* a dangling link is replaced by a writer, not written through */
  assert_int_equal(symlink(tmp("gone"), tmp("dangling")), 0);
  assert_false(ag_file_same(tmp("dangling"), tmp("gone")));
  assert_false(ag_file_same(NULL, tmp("a")));
  assert_false(ag_file_same("", ""));
}

static void device_index(void **state) {
  (void)state;
  ag_device d = AG_CPU;
  ag_error_clear();
  assert_int_equal(ag_device_parse("cpu:99999999999999999999", &d), AG_ERR_DEVICE);
  assert_non_null(strstr(ag_last_error(), "no index 99999999999999999999 (out of range)"));
  assert_null(strstr(ag_last_error(), "9223372036854775807"));
  assert_int_equal(ag_device_parse("cpu:9223372036854775807", &d), AG_ERR_DEVICE);
  assert_int_equal(ag_device_parse("cpu:65536", &d), AG_ERR_DEVICE);
  /* what strtol took and the strict parser does not */
  const char *bad[] = {"cpu:+0", "cpu: 0", "cpu:0 ", "cpu:0x0", "cpu:\x1b[2J"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    ag_error_clear();
    ag_status st = ag_device_parse(bad[i], &d);
    if (st != AG_ERR_INVALID) fail_msg("'%s' parsed with %s", bad[i], ag_status_name(st));
    assert_null(strchr(ag_last_error(), '\x1b'));
  }
  assert_non_null(strstr(ag_last_error(), "\\x1b"));
  assert_int_equal(ag_device_parse("cpu:00", &d), AG_OK);
  assert_true(ag_device_eq(d, AG_CPU));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(file_same, setup, teardown),
      cmocka_unit_test(device_index),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
