/* The library half of the command line's checks (docs/reliability.md):
 * ag_file_same, which every command uses to refuse an output that is an
 * input or another output. */
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

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(file_same, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
