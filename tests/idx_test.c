/* idx reader: round trips of crafted gzip and plain files, and a clear error
 * for each kind of damage (truncated, wrong magic, mismatched counts, ...).
 * The files are written here with zlib. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include <cmocka.h>

#include "anygrad/anygrad.h"

static char g_dir[256];

static void path_of(char *buf, size_t n, const char *name) { snprintf(buf, n, "%s/%s", g_dir, name); }

/* header + data, optionally gzip-compressed */
static void write_raw(const char *name, const uint8_t *bytes, size_t n, bool gz) {
  char p[512];
  path_of(p, sizeof p, name);
  if (gz) {
    gzFile f = gzopen(p, "wb");
    assert_non_null(f);
    assert_int_equal(gzwrite(f, bytes, (unsigned)n), (int)n);
    assert_int_equal(gzclose(f), Z_OK);
  } else {
    FILE *f = fopen(p, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(bytes, 1, n, f), n);
    fclose(f);
  }
}

static size_t make_idx(uint8_t *buf, uint8_t type, int nd, const uint32_t *dims, size_t data_bytes,
                       uint8_t first) {
  size_t k = 0;
  buf[k++] = 0;
  buf[k++] = 0;
  buf[k++] = type;
  buf[k++] = (uint8_t)nd;
  for (int d = 0; d < nd; d++) {
    buf[k++] = (uint8_t)(dims[d] >> 24);
    buf[k++] = (uint8_t)(dims[d] >> 16);
    buf[k++] = (uint8_t)(dims[d] >> 8);
    buf[k++] = (uint8_t)dims[d];
  }
  for (size_t i = 0; i < data_bytes; i++) buf[k++] = (uint8_t)(first + i);
  return k;
}

static void expect_error(const char *name, ag_status want, const char *fragment) {
  char p[512];
  path_of(p, sizeof p, name);
  ag_idx idx;
  idx.data = (uint8_t *)&idx; /* must be zeroed on failure */
  ag_error_clear();
  assert_int_equal(ag_idx_read(p, &idx), want);
  assert_null(idx.data);
  assert_int_equal(idx.numel, 0);
  const char *msg = ag_last_error();
  if (!strstr(msg, fragment)) fail_msg("message '%s' lacks '%s'", msg, fragment);
  assert_non_null(strstr(msg, name)); /* names the file */
}

static void test_round_trip(void **state) {
  uint8_t buf[256];
  uint32_t dims[3] = {3, 4, 5};
  for (int gz = 0; gz < 2; gz++) {
    size_t n = make_idx(buf, 0x08, 3, dims, 60, 7);
    write_raw(gz ? "rt.gz" : "rt.raw", buf, n, gz);
    char p[512];
    path_of(p, sizeof p, gz ? "rt.gz" : "rt.raw");
    ag_idx idx;
    assert_int_equal(ag_idx_read(p, &idx), AG_OK);
    assert_int_equal(idx.ndim, 3);
    assert_int_equal(idx.dims[0], 3);
    assert_int_equal(idx.dims[1], 4);
    assert_int_equal(idx.dims[2], 5);
    assert_int_equal(idx.numel, 60);
    for (int i = 0; i < 60; i++) assert_int_equal(idx.data[i], (uint8_t)(7 + i));
    ag_idx_free(&idx);
    assert_null(idx.data);
    ag_idx_free(&idx); /* zeroed: ignored */
  }
}

static void test_truncated_data(void **state) {
  uint8_t buf[256];
  uint32_t dims[2] = {10, 10};
  size_t n = make_idx(buf, 0x08, 2, dims, 60, 0); /* 100 promised, 60 present */
  write_raw("short_data.gz", buf, n, true);
  expect_error("short_data.gz", AG_ERR_CORRUPT, "truncated: header says 100 data bytes, file has 60");
  write_raw("short_head.gz", buf, 6, true); /* cut inside the dims */
  expect_error("short_head.gz", AG_ERR_CORRUPT, "truncated");
  write_raw("empty.gz", buf, 0, false);
  expect_error("empty.gz", AG_ERR_CORRUPT, "truncated");
}

/* A valid gzip file cut short in its compressed bytes. */
static void test_truncated_gzip_stream(void **state) {
  uint8_t buf[4096];
  uint32_t dims[1] = {4000};
  size_t n = make_idx(buf, 0x08, 1, dims, 0, 0);
  srand(3);
  for (int i = 0; i < 4000; i++) buf[n + i] = (uint8_t)rand(); /* incompressible */
  n += 4000;
  write_raw("cut.gz", buf, n, true);
  char p[512];
  path_of(p, sizeof p, "cut.gz");
  FILE *f = fopen(p, "rb");
  assert_non_null(f);
  static uint8_t z[8192];
  size_t zn = fread(z, 1, sizeof z, f);
  fclose(f);
  assert_true(zn > 2000);
  write_raw("cut.gz", z, zn / 2, false);
  expect_error("cut.gz", AG_ERR_CORRUPT, "truncated");
  /* the data complete but the gzip trailer (CRC, length) missing */
  write_raw("cut.gz", z, zn - 4, false);
  expect_error("cut.gz", AG_ERR_CORRUPT, "truncated");
}

static void test_wrong_magic(void **state) {
  uint8_t buf[64];
  uint32_t dims[1] = {4};
  size_t n = make_idx(buf, 0x08, 1, dims, 4, 0);
  buf[0] = 0x1f; /* e.g. a doubly gzipped file, or something else entirely */
  write_raw("magic.gz", buf, n, true);
  expect_error("magic.gz", AG_ERR_CORRUPT, "wrong magic 0x1f000801");
  n = make_idx(buf, 0x0D, 1, dims, 16, 0); /* float elements */
  write_raw("float.gz", buf, n, true);
  expect_error("float.gz", AG_ERR_UNSUPPORTED, "element type 0x0d");
  n = make_idx(buf, 0x08, 0, dims, 0, 0);
  write_raw("nodims.gz", buf, n, true);
  expect_error("nodims.gz", AG_ERR_CORRUPT, "0 dims");
  uint32_t zero[2] = {3, 0};
  n = make_idx(buf, 0x08, 2, zero, 0, 0);
  write_raw("zero.gz", buf, n, true);
  expect_error("zero.gz", AG_ERR_CORRUPT, "dim 1 has size 0");
  uint32_t huge[4] = {0xffffffffu, 0xffffffffu, 2, 2};
  n = make_idx(buf, 0x08, 4, huge, 0, 0);
  write_raw("huge.gz", buf, n, true);
  expect_error("huge.gz", AG_ERR_CORRUPT, "exceed");
  n = make_idx(buf, 0x08, 1, dims, 5, 0); /* one byte too many */
  write_raw("long.gz", buf, n, true);
  expect_error("long.gz", AG_ERR_CORRUPT, "bytes after the 4");
}

static void test_missing_and_null(void **state) {
  ag_idx idx;
  assert_int_equal(ag_idx_read("/nonexistent/anygrad/x.gz", &idx), AG_ERR_IO);
  assert_non_null(strstr(ag_last_error(), "/nonexistent/anygrad/x.gz"));
  assert_int_equal(ag_idx_read(NULL, &idx), AG_ERR_INVALID);
  assert_int_equal(ag_idx_read("x", NULL), AG_ERR_INVALID);
  ag_image_set s;
  assert_int_equal(ag_image_set_load(NULL, "x", &s), AG_ERR_INVALID);
}

static void test_image_set(void **state) {
  uint8_t buf[512];
  uint32_t idims[3] = {5, 2, 3}, ldims[1] = {5}, ldims4[1] = {4}, bad2[2] = {5, 1};
  size_t n = make_idx(buf, 0x08, 3, idims, 30, 0);
  write_raw("img.gz", buf, n, true);
  n = make_idx(buf, 0x08, 1, ldims, 5, 2); /* labels 2..6 */
  write_raw("lab.gz", buf, n, true);
  n = make_idx(buf, 0x08, 1, ldims4, 4, 0);
  write_raw("lab4.gz", buf, n, true);
  n = make_idx(buf, 0x08, 2, bad2, 5, 0);
  write_raw("lab2d.gz", buf, n, true);
  char pi[512], pl[512], p4[512], p2[512];
  path_of(pi, sizeof pi, "img.gz");
  path_of(pl, sizeof pl, "lab.gz");
  path_of(p4, sizeof p4, "lab4.gz");
  path_of(p2, sizeof p2, "lab2d.gz");
  ag_image_set s;
  assert_int_equal(ag_image_set_load(pi, pl, &s), AG_OK);
  assert_int_equal(s.count, 5);
  assert_int_equal(s.height, 2);
  assert_int_equal(s.width, 3);
  assert_int_equal(s.num_classes, 7);
  assert_int_equal(s.pixels[29], 29);
  assert_int_equal(s.labels[4], 6);
  ag_image_set_free(&s);
  assert_null(s.pixels);

  s.pixels = (uint8_t *)&s;
  assert_int_equal(ag_image_set_load(pi, p4, &s), AG_ERR_CORRUPT);
  assert_null(s.pixels);
  assert_non_null(strstr(ag_last_error(), "has 5 images but"));
  assert_non_null(strstr(ag_last_error(), "has 4 labels"));
  assert_int_equal(ag_image_set_load(pi, p2, &s), AG_ERR_CORRUPT);
  assert_non_null(strstr(ag_last_error(), "labels must be 1-D"));
  assert_int_equal(ag_image_set_load(pl, pl, &s), AG_ERR_CORRUPT);
  assert_non_null(strstr(ag_last_error(), "images must be 3-D"));
}

/* The installed data set, when present (dataset-fashion-mnist). */
static void test_fashion_mnist(void **state) {
  const char *dir = "/usr/share/datasets/fashion-mnist";
  char pi[512], pl[512];
  snprintf(pi, sizeof pi, "%s/t10k-images-idx3-ubyte.gz", dir);
  snprintf(pl, sizeof pl, "%s/t10k-labels-idx1-ubyte.gz", dir);
  if (access(pi, R_OK) != 0 || access(pl, R_OK) != 0) skip();
  ag_image_set s;
  assert_int_equal(ag_image_set_load(pi, pl, &s), AG_OK);
  assert_int_equal(s.count, 10000);
  assert_int_equal(s.height, 28);
  assert_int_equal(s.width, 28);
  assert_int_equal(s.num_classes, 10);
  int per[10] = {0};
  for (int i = 0; i < 10000; i++) per[s.labels[i]]++;
  for (int c = 0; c < 10; c++) assert_int_equal(per[c], 1000);
  ag_image_set_free(&s);
}

static int setup(void **state) {
  snprintf(g_dir, sizeof g_dir, "/tmp/ag_idx_test_XXXXXX");
  return mkdtemp(g_dir) ? 0 : -1;
}

static int teardown(void **state) {
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
  return system(cmd) == 0 ? 0 : -1;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_round_trip),       cmocka_unit_test(test_truncated_data),
      cmocka_unit_test(test_truncated_gzip_stream), cmocka_unit_test(test_wrong_magic),
      cmocka_unit_test(test_missing_and_null), cmocka_unit_test(test_image_set),
      cmocka_unit_test(test_fashion_mnist),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
