/* Hostile input to the BPE file reader and to the zero-copy entry points
 * (docs/reliability.md): tokenizer files with NUL bytes inside a field or
 * with a signed number ("-0"), which loaded as if the field ended there or
 * were 0, and a from_blob/DLPack layout whose last element offset is
 * exactly INT64_MAX, whose one-past-the-end offset overflowed. */
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
#include "anygrad/dlpack.h"
#include "anygrad/tokenizer.h"

static char dir[512];

static const char *tmp(const char *name) {
  static char buf[8][640];
  static int k;
  char *b = buf[k++ & 7];
  snprintf(b, sizeof buf[0], "%s/%s", dir, name);
  return b;
}

static int setup(void **state) {
  (void)state;
  snprintf(dir, sizeof dir, "%s/harden3_bpe_%ld", AG_TEST_TMPDIR, (long)getpid());
  return mkdir(dir, 0755) == 0 ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  char cmd[700];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  return system(cmd) == 0 ? 0 : -1;
}

static void expect(ag_status got, ag_status want, const char *fragment) {
  if (got != want)
    fail_msg("status %s, expected %s: %s", ag_status_name(got), ag_status_name(want), ag_last_error());
  if (fragment && !strstr(ag_last_error(), fragment))
    fail_msg("message '%s' lacks '%s'", ag_last_error(), fragment);
}

/* content[0..n) may hold NUL bytes */
static const char *write_bytes(const char *name, const char *content, size_t n) {
  const char *p = tmp(name);
  FILE *f = fopen(p, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(content, 1, n, f), n);
  assert_int_equal(fclose(f), 0);
  return p;
}

/* The file is refused as corrupt, naming the file and `fragment` (the line). */
#define REFUSED(name, lit, fragment) refused(name, lit, sizeof lit - 1, fragment)
static void refused(const char *name, const char *content, size_t n, const char *fragment) {
  const char *p = write_bytes(name, content, n);
  ag_bpe *b = (ag_bpe *)dir;
  ag_error_clear();
  ag_status st = ag_bpe_load(p, &b);
  if (st == AG_OK) fail_msg("%s loaded (vocab %d)", name, ag_bpe_vocab_size(b));
  assert_null(b);
  expect(st, AG_ERR_CORRUPT, fragment);
  expect(st, AG_ERR_CORRUPT, name);
}

static void test_bpe_nul(void **state) {
  (void)state;
  /* The same file without the NUL loads: the NUL is what is refused. */
  static const char good[] = "anygrad-bpe 1\nsplit words256\nmerges 2\n97 98\n256 99\n";
  ag_bpe *b = NULL;
  assert_int_equal(ag_bpe_load(write_bytes("good.bpe", good, sizeof good - 1), &b), AG_OK);
  assert_int_equal(ag_bpe_vocab_size(b), 258);
  ag_bpe_free(b);
  /* A NUL inside a field ended it: the magic compared equal, the id parsed. */
  REFUSED("magic.bpe", "anygrad-bpe\0junk 1\nsplit words256\nmerges 0\n", "line 1: a NUL byte");
  REFUSED("version.bpe", "anygrad-bpe 1\0x\nsplit words256\nmerges 0\n", "line 1: a NUL byte");
  REFUSED("split.bpe", "anygrad-bpe 1\nsplit words256\0zz\nmerges 0\n", "line 2: a NUL byte");
  REFUSED("count.bpe", "anygrad-bpe 1\nsplit words256\nmerges 1\0\n97 98\n", "line 3: a NUL byte");
  REFUSED("id.bpe", "anygrad-bpe 1\nsplit words256\nmerges 1\n97\0garbage 98\n", "line 4: a NUL byte");
  REFUSED("id2.bpe", "anygrad-bpe 1\nsplit words256\nmerges 2\n97 98\n256 99\0\n", "line 5: a NUL byte");
  REFUSED("tail.bpe", "anygrad-bpe 1\nsplit words256\nmerges 0\n\0", "line 4: a NUL byte");
  REFUSED("first.bpe", "\0", "line 1: a NUL byte");
}

static void test_bpe_sign(void **state) {
  (void)state;
  /* "-0" was taken as 0: every number of the file is plain digits. */
  REFUSED("neg0_left.bpe", "anygrad-bpe 1\nsplit words256\nmerges 1\n-0 97\n", "line 4: expected two token ids");
  REFUSED("neg0_right.bpe", "anygrad-bpe 1\nsplit words256\nmerges 1\n97 -0\n", "line 4: expected two token ids");
  REFUSED("neg0_count.bpe", "anygrad-bpe 1\nsplit words256\nmerges -0\n", "line 3: expected 'merges N'");
  REFUSED("plus.bpe", "anygrad-bpe 1\nsplit words256\nmerges 1\n+97 98\n", "line 4: expected two token ids");
  REFUSED("neg_version.bpe", "anygrad-bpe -1\nsplit words256\nmerges 0\n", "line 1: unsupported version");
  REFUSED("hex.bpe", "anygrad-bpe 1\nsplit words256\nmerges 1\n0x61 98\n", "line 4: expected two token ids");
  /* 0 itself is an id (the NUL byte's token) */
  ag_bpe *b = NULL;
  static const char zero[] = "anygrad-bpe 1\nsplit words256\nmerges 1\n0 97\n";
  assert_int_equal(ag_bpe_load(write_bytes("zero.bpe", zero, sizeof zero - 1), &b), AG_OK);
  size_t len = 0;
  const uint8_t *t = ag_bpe_token_bytes(b, 256, &len);
  assert_int_equal(len, 2);
  assert_memory_equal(t, "\0a", 2);
  ag_bpe_free(b);
}

/* ---- from_blob / DLPack: the last element at INT64_MAX ---- */

static void no_delete(DLManagedTensor *m) { (void)m; }

static void test_span_int64_max(void **state) {
  (void)state;
  unsigned char data[64] = {0};
  /* 2 elements 2^63-1 apart: the last element's offset is INT64_MAX, one
   * past it overflowed (UBSan), then wrapped into a small or negative span. */
  int64_t shape[] = {2}, strides[] = {INT64_MAX};
  static const ag_dtype dts[] = {AG_U8, AG_BOOL, AG_F32, AG_F64};
  for (size_t i = 0; i < sizeof dts / sizeof *dts; i++) {
    ag_error_clear();
    ag_tensor *t = ag_from_blob(AG_CPU, dts[i], 1, shape, strides, data, NULL, NULL);
    if (t) ag_tensor_release(t);
    assert_null(t);
    expect(ag_last_status(), AG_ERR_INVALID, "ag_from_blob: a stride layout");
    expect(ag_last_status(), AG_ERR_INVALID, "overflows");
  }
  /* The same across two dims, and with the sum reaching it in steps. */
  int64_t shape2[] = {3, 2}, strides2[] = {INT64_MAX / 2, 1}; /* 2 * (2^62 - 1) + 1 */
  ag_error_clear();
  assert_null(ag_from_blob(AG_CPU, AG_U8, 2, shape2, strides2, data, NULL, NULL));
  expect(ag_last_status(), AG_ERR_INVALID, "overflows");
  /* One below: the last element at INT64_MAX - 1 is a layout of INT64_MAX
   * bytes, which no buffer holds; it is refused by the address check, not
   * by wrapping. */
  int64_t below[] = {INT64_MAX - 1};
  ag_error_clear();
  assert_null(ag_from_blob(AG_CPU, AG_U8, 1, shape, below, data, NULL, NULL));
  assert_int_equal(ag_last_status(), AG_ERR_INVALID);

  DLManagedTensor m;
  memset(&m, 0, sizeof m);
  m.dl_tensor.data = data;
  m.dl_tensor.device.device_type = kDLCPU;
  m.dl_tensor.ndim = 1;
  m.dl_tensor.dtype.code = kDLUInt;
  m.dl_tensor.dtype.bits = 8;
  m.dl_tensor.dtype.lanes = 1;
  m.dl_tensor.shape = shape;
  m.dl_tensor.strides = strides;
  m.deleter = no_delete;
  ag_error_clear();
  assert_null(ag_from_dlpack(&m));
  expect(ag_last_status(), AG_ERR_INVALID, "ag_from_dlpack: a stride layout");
  m.dl_tensor.dtype.code = kDLFloat;
  m.dl_tensor.dtype.bits = 32;
  ag_error_clear();
  assert_null(ag_from_dlpack(&m));
  expect(ag_last_status(), AG_ERR_INVALID, "overflows");
  /* A size-1 dim's stride is never multiplied: such a layout is fine. */
  int64_t one[] = {1}, big[] = {INT64_MAX};
  ag_tensor *t = ag_from_blob(AG_CPU, AG_F32, 1, one, big, data, NULL, NULL);
  assert_non_null(t);
  ag_tensor_release(t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_bpe_nul),
      cmocka_unit_test(test_bpe_sign),
      cmocka_unit_test(test_span_int64_max),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
