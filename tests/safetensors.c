/* safetensors: round trip of every dtype with metadata, a file written by
 * PyTorch's side (tests/data), Python reading our file, atomic save, and
 * rejection of corrupt and truncated files with AG_ERR_CORRUPT. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "anygrad/anygrad.h"

static char path[256];

static int setup(void **state) {
  (void)state;
  snprintf(path, sizeof path, "/tmp/ag_safetensors_test_%ld.safetensors", (long)getpid());
  return 0;
}
static int teardown(void **state) {
  (void)state;
  unlink(path);
  return 0;
}

static void save_sample(void) {
  ag_param_list l = {0};
  int64_t s2[2] = {2, 3}, s1 = 4;
  float f[6] = {1, -2, 3.5f, 4, 5, 6};
  int32_t i[4] = {7, -8, 9, 2147483647};
  double d = 3.25;
  ag_tensor *a = ag_from_host(AG_CPU, AG_F32, 2, s2, f);
  ag_tensor *b = ag_from_host(AG_CPU, AG_I32, 1, &s1, i);
  ag_tensor *c = ag_from_host(AG_CPU, AG_F64, 0, NULL, &d);
  ag_tensor *h = ag_cast(a, AG_F16), *bf = ag_cast(a, AG_BF16);
  ag_tensor *t = ag_transpose(a, 0, 1); /* a view: saved in row-major order */
  ag_params_add(&l, "layer.weight", a);
  ag_params_add(&l, "ids", b);
  ag_params_add(&l, "scalar", c);
  ag_params_add(&l, "half", h);
  ag_params_add(&l, "brain", bf);
  ag_params_add(&l, "transposed", t);
  const char *k[2] = {"step", "note"}, *v[2] = {"42", "quote \" and \\ backslash"};
  assert_int_equal(ag_safetensors_save(path, &l, 2, k, v), AG_OK);
  ag_params_free(&l);
  ag_tensor *all[] = {a, b, c, h, bf, t};
  for (int j = 0; j < 6; j++) ag_tensor_release(all[j]);
}

static void test_round_trip(void **state) {
  (void)state;
  save_sample();
  ag_safetensors *f;
  assert_int_equal(ag_safetensors_open(path, &f), AG_OK);
  assert_int_equal(ag_safetensors_count(f), 6);
  assert_string_equal(ag_safetensors_meta(f, "step"), "42");
  assert_string_equal(ag_safetensors_meta(f, "note"), "quote \" and \\ backslash");
  ag_tensor *t = ag_safetensors_get(f, "transposed", AG_CPU);
  assert_int_equal(ag_tensor_dim(t, 0), 3);
  float tv[6];
  assert_int_equal(ag_to_host(t, tv, sizeof tv), AG_OK);
  assert_true(tv[0] == 1 && tv[1] == 4 && tv[2] == -2 && tv[5] == 6);
  ag_tensor *h = ag_safetensors_get(f, "half", AG_CPU);
  assert_int_equal(ag_tensor_dtype(h), AG_F16);
  ag_tensor *s = ag_safetensors_get(f, "scalar", AG_CPU);
  assert_int_equal(ag_tensor_ndim(s), 0);
  assert_true(ag_item(s) == 3.25);
  assert_null(ag_safetensors_get(f, "missing", AG_CPU));
  /* load_into checks names, dtypes and shapes before copying */
  int64_t s2[2] = {2, 3};
  ag_tensor *dst = ag_zeros(AG_CPU, AG_F32, 2, s2), *wrong = ag_zeros(AG_CPU, AG_F32, 2, (int64_t[]){3, 2});
  ag_param_list l = {0};
  ag_params_add(&l, "layer.weight", dst);
  assert_int_equal(ag_safetensors_load_into(f, &l), AG_OK);
  float dv[6];
  assert_int_equal(ag_to_host(dst, dv, sizeof dv), AG_OK);
  assert_true(dv[2] == 3.5f);
  ag_params_free(&l);
  ag_params_add(&l, "layer.weight", wrong);
  assert_int_equal(ag_safetensors_load_into(f, &l), AG_ERR_SHAPE);
  assert_non_null(strstr(ag_last_error(), "'layer.weight' is F32[2,3] in the file, the model's is f32[3,2]"));
  ag_params_free(&l);
  /* same shape, other dtype: AG_ERR_DTYPE with both dtypes */
  ag_tensor *wrong_dt = ag_zeros(AG_CPU, AG_F64, 2, s2);
  ag_params_add(&l, "layer.weight", wrong_dt);
  assert_int_equal(ag_safetensors_load_into(f, &l), AG_ERR_DTYPE);
  assert_non_null(strstr(ag_last_error(), "'layer.weight' is F32[2,3] in the file, the model's is f64[2,3]"));
  ag_params_free(&l);
  ag_tensor_release(wrong_dt);
  /* a missing tensor stays AG_ERR_CORRUPT */
  ag_params_add(&l, "layer.nothere", dst);
  assert_int_equal(ag_safetensors_load_into(f, &l), AG_ERR_CORRUPT);
  assert_non_null(strstr(ag_last_error(), "layer.nothere"));
  ag_params_free(&l);
  ag_tensor_release(t);
  ag_tensor_release(h);
  ag_tensor_release(s);
  ag_tensor_release(dst);
  ag_tensor_release(wrong);
  ag_safetensors_close(f);
}

/* Our file parsed independently in Python (format by hand; torch decodes
 * the data); skipped without /usr/bin/python3 + torch. */
static void test_python_reads_it(void **state) {
  (void)state;
  if (access("/usr/bin/python3", X_OK) != 0 || system("/usr/bin/python3 -c 'import torch' 2>/dev/null") != 0)
    skip();
  save_sample();
  char cmd[2048];
  snprintf(cmd, sizeof cmd,
           "/usr/bin/python3 -c \"\n"
           "import json, struct, torch\n"
           "b = open('%s','rb').read(); n = struct.unpack('<Q', b[:8])[0]; h = json.loads(b[8:8+n]); d = b[8+n:]\n"
           "assert h['__metadata__']['step'] == '42'\n"
           "e = h['layer.weight']; assert e['dtype'] == 'F32' and e['shape'] == [2, 3]\n"
           "w = torch.frombuffer(bytearray(d[e['data_offsets'][0]:e['data_offsets'][1]]), dtype=torch.float32).view(2, 3)\n"
           "assert w.tolist() == [[1, -2, 3.5], [4, 5, 6]]\n"
           "e = h['half']; x = torch.frombuffer(bytearray(d[e['data_offsets'][0]:e['data_offsets'][1]]), dtype=torch.float16)\n"
           "assert x.tolist() == [1, -2, 3.5, 4, 5, 6]\n"
           "e = h['brain']; x = torch.frombuffer(bytearray(d[e['data_offsets'][0]:e['data_offsets'][1]]), dtype=torch.bfloat16)\n"
           "assert x.float().tolist() == [1, -2, 3.5, 4, 5, 6]\n"
           "e = h['ids']; assert torch.frombuffer(bytearray(d[e['data_offsets'][0]:e['data_offsets'][1]]), dtype=torch.int32).tolist() == [7, -8, 9, 2147483647]\n"
           "assert (8 + n) %% 8 == 0\n"
           "try:\n"
           "    import safetensors.torch as st; assert st.load_file('%s')['ids'].tolist() == [7, -8, 9, 2147483647]\n"
           "except ImportError: pass\n\"",
           path, path);
  assert_int_equal(system(cmd), 0);
}

/* The same file decoded by plain Python (json + struct, no torch): runs
 * wherever python3 exists, so CI checks the format even without torch. */
static void test_python_plain_reads_it(void **state) {
  (void)state;
  const char *py = access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : NULL;
  if (!py) skip();
  save_sample();
  char cmd[2048];
  snprintf(cmd, sizeof cmd,
           "%s -c \"\n"
           "import json, struct\n"
           "b = open('%s','rb').read(); n = struct.unpack('<Q', b[:8])[0]; h = json.loads(b[8:8+n]); d = b[8+n:]\n"
           "assert (8 + n) %% 8 == 0 and h['__metadata__']['step'] == '42'\n"
           "def raw(k): e = h[k]; return e, d[e['data_offsets'][0]:e['data_offsets'][1]]\n"
           "e, r = raw('layer.weight'); assert e['dtype'] == 'F32' and e['shape'] == [2, 3]\n"
           "assert list(struct.unpack('<6f', r)) == [1, -2, 3.5, 4, 5, 6]\n"
           "e, r = raw('half'); assert e['dtype'] == 'F16' and list(struct.unpack('<6e', r)) == [1, -2, 3.5, 4, 5, 6]\n"
           "e, r = raw('brain'); assert e['dtype'] == 'BF16'\n"
           "v = [struct.unpack('<f', struct.pack('<I', x << 16))[0] for x in struct.unpack('<6H', r)]\n"
           "assert v == [1, -2, 3.5, 4, 5, 6]\n"
           "e, r = raw('ids'); assert e['dtype'] == 'I32' and list(struct.unpack('<4i', r)) == [7, -8, 9, 2147483647]\n"
           "ends = sorted(x['data_offsets'] for k, x in h.items() if k != '__metadata__')\n"
           "assert ends[0][0] == 0 and ends[-1][1] == len(d) and all(a[1] == b[0] for a, b in zip(ends, ends[1:]))\n\"",
           py, path);
  assert_int_equal(system(cmd), 0);
}

static void write_file(const void *p, size_t n) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(p, 1, n, f), n);
  fclose(f);
}

static void expect_corrupt(const char *what) {
  ag_safetensors *f = NULL;
  ag_status st = ag_safetensors_open(path, &f);
  if (st != AG_ERR_CORRUPT) fail_msg("%s: got %s (%s)", what, ag_status_name(st), ag_last_error());
  assert_null(f);
  assert_non_null(strstr(ag_last_error(), path));
}

static void with_header(const char *json, size_t data_bytes) {
  size_t n = strlen(json);
  unsigned char *b = calloc(1, 8 + n + data_bytes);
  for (int i = 0; i < 8; i++) b[i] = (unsigned char)((uint64_t)n >> (8 * i));
  memcpy(b + 8, json, n);
  write_file(b, 8 + n + data_bytes);
  free(b);
}

static void test_corrupt_files(void **state) {
  (void)state;
  save_sample();
  /* truncated: cut the good file at several points */
  FILE *f = fopen(path, "rb");
  static unsigned char buf[4096];
  size_t n = fread(buf, 1, sizeof buf, f);
  fclose(f);
  size_t cuts[] = {0, 5, 8, 20, n - 1};
  for (size_t i = 0; i < sizeof cuts / sizeof *cuts; i++) {
    write_file(buf, cuts[i]);
    expect_corrupt("truncated");
  }
  write_file(buf, n);
  ag_safetensors *ok;
  assert_int_equal(ag_safetensors_open(path, &ok), AG_OK);
  ag_safetensors_close(ok);
  with_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4);
  expect_corrupt("short data");
  assert_non_null(strstr(ag_last_error(), "truncated"));
  with_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8);
  expect_corrupt("size mismatch");
  with_header("{\"a\":{\"dtype\":\"Q8\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8);
  expect_corrupt("dtype");
  with_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
              "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12);
  expect_corrupt("overlap");
  with_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}", 8);
  expect_corrupt("bad json");
  with_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8);
  expect_corrupt("negative dim");
  with_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"x\":1}}", 8);
  expect_corrupt("unknown field");
  with_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 16);
  expect_corrupt("trailing data");
  buf[0] = 0xff;
  buf[7] = 0x7f;
  write_file(buf, n);
  expect_corrupt("huge header length");
  ag_safetensors *none;
  assert_int_equal(ag_safetensors_open("/nonexistent/x.safetensors", &none), AG_ERR_IO);
}


/* Every dtype of the format, in a file whose bytes come from PyTorch
 * (tests/data/st_all_dtypes.py): the file opens; tensors anygrad holds load
 * as they are; I64 (position_ids, num_batches_tracked), I16, I8, U8 and BOOL
 * are refused by name by ag_safetensors_get and converted by
 * ag_safetensors_get_as with a range check; F8 is listed and refused by
 * name. What was loaded is saved again and read back by PyTorch. */
static void expect_i32(const ag_safetensors *f, const char *name, int n, const int32_t *want) {
  ag_tensor *t = ag_safetensors_get_as(f, name, AG_CPU, AG_I32);
  if (!t) fail_msg("%s: %s", name, ag_last_error());
  assert_int_equal(ag_tensor_numel(t), n);
  int32_t got[8];
  assert_int_equal(ag_to_host(t, got, (size_t)n * 4), AG_OK);
  assert_memory_equal(got, want, (size_t)n * 4);
  ag_tensor_release(t);
}

static void test_torch_every_dtype(void **state) {
  (void)state;
  if (access("/usr/bin/python3", X_OK) != 0 || system("/usr/bin/python3 -c 'import torch' 2>/dev/null") != 0)
    skip();
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/st_all_dtypes.py write %s", AG_TEST_DATA, path);
  assert_int_equal(system(cmd), 0);
  ag_safetensors *f = NULL;
  if (ag_safetensors_open(path, &f) != AG_OK) fail_msg("%s", ag_last_error());
  assert_int_equal(ag_safetensors_count(f), 13);
  const char *want_dt[13] = {"F64", "F32", "F16", "BF16", "I32", "I64", "I64", "I64", "I16", "I8", "U8", "BOOL",
                             "F8_E4M3"};
  for (int i = 0; i < 13; i++) assert_string_equal(ag_safetensors_dtype(f, i), want_dt[i]);
  assert_null(ag_safetensors_dtype(f, 13));
  /* held as they are */
  ag_tensor *f64 = ag_safetensors_get(f, "f64", AG_CPU);
  double d[3];
  assert_int_equal(ag_to_host(f64, d, sizeof d), AG_OK);
  assert_true(d[0] == 1.5 && d[1] == -2.25 && d[2] == 1e300);
  ag_tensor *f16 = ag_safetensors_get_as(f, "f16", AG_CPU, AG_F32);
  float h[3];
  assert_int_equal(ag_to_host(f16, h, sizeof h), AG_OK);
  assert_true(h[0] == 0.5f && h[1] == -1.0f && h[2] == 65504.0f);
  ag_tensor_release(f16);
  ag_tensor *bf = ag_safetensors_get(f, "bf16", AG_CPU);
  assert_int_equal(ag_tensor_dtype(bf), AG_BF16);
  ag_tensor_release(bf);
  ag_tensor *bf32 = ag_safetensors_get_as(f, "bf16", AG_CPU, AG_F32);
  assert_int_equal(ag_to_host(bf32, h, sizeof h), AG_OK);
  assert_true(h[0] == 1.0f && h[1] == -3.0f && h[2] == 256.0f);
  ag_tensor_release(bf32);
  /* I64, U8 and BOOL load as they are (PyTorch's position ids, counters,
   * masks); I16 is named, not "corrupt" */
  ag_tensor *pid64 = ag_safetensors_get(f, "position_ids", AG_CPU);
  if (!pid64) fail_msg("%s", ag_last_error());
  assert_int_equal(ag_tensor_dtype(pid64), AG_I64);
  int64_t l5[5];
  assert_int_equal(ag_to_host(pid64, l5, sizeof l5), AG_OK);
  for (int i = 0; i < 5; i++) assert_int_equal(l5[i], i);
  ag_tensor_release(pid64);
  ag_tensor *big64 = ag_safetensors_get(f, "big", AG_CPU);
  assert_int_equal(ag_to_host(big64, l5, 16), AG_OK);
  assert_true(l5[0] == (1LL << 40) && l5[1] == -3);
  ag_tensor_release(big64);
  ag_tensor *mk = ag_safetensors_get(f, "mask", AG_CPU), *u8t = ag_safetensors_get(f, "u8", AG_CPU);
  assert_true(mk && u8t);
  assert_int_equal(ag_tensor_dtype(mk), AG_BOOL);
  assert_int_equal(ag_tensor_dtype(u8t), AG_U8);
  uint8_t b3[3], b2[2];
  assert_int_equal(ag_to_host(mk, b3, 3), AG_OK);
  assert_int_equal(ag_to_host(u8t, b2, 2), AG_OK);
  assert_true(b3[0] == 1 && b3[1] == 0 && b3[2] == 1 && b2[0] == 0 && b2[1] == 255);
  ag_tensor_release(mk);
  ag_tensor_release(u8t);
  assert_null(ag_safetensors_get(f, "i16", AG_CPU));
  assert_int_equal(ag_last_status(), AG_ERR_DTYPE);
  assert_non_null(strstr(ag_last_error(), "'i16' is I16"));
  assert_non_null(strstr(ag_last_error(), "ag_safetensors_get_as"));
  /* conversions between the integer dtypes, range-checked */
  ag_tensor *u8b = ag_safetensors_get_as(f, "i8", AG_CPU, AG_U8);
  assert_null(u8b); /* -128 */
  assert_non_null(strstr(ag_last_error(), "outside the u8 range"));
  ag_tensor *mb = ag_safetensors_get_as(f, "i16", AG_CPU, AG_BOOL);
  assert_int_equal(ag_to_host(mb, b2, 2), AG_OK);
  assert_true(b2[0] == 1 && b2[1] == 1);
  ag_tensor_release(mb);
  const int32_t pos[5] = {0, 1, 2, 3, 4}, nbt[1] = {123456}, i16[2] = {-32768, 32767}, i8[2] = {-128, 127},
                u8[2] = {0, 255}, mask[3] = {1, 0, 1};
  expect_i32(f, "position_ids", 5, pos);
  expect_i32(f, "bn.num_batches_tracked", 1, nbt);
  expect_i32(f, "i16", 2, i16);
  expect_i32(f, "i8", 2, i8);
  expect_i32(f, "u8", 2, u8);
  expect_i32(f, "mask", 3, mask);
  ag_tensor *pid = ag_safetensors_get_as(f, "position_ids", AG_CPU, AG_I32);
  assert_int_equal(ag_tensor_ndim(pid), 2);
  assert_int_equal(ag_tensor_dim(pid, 1), 5);
  /* range check, and the same values as f64 */
  assert_null(ag_safetensors_get_as(f, "big", AG_CPU, AG_I32));
  assert_int_equal(ag_last_status(), AG_ERR_INVALID);
  assert_non_null(strstr(ag_last_error(), "1099511627776"));
  ag_tensor *big = ag_safetensors_get_as(f, "big", AG_CPU, AG_F64);
  assert_int_equal(ag_to_host(big, d, 16), AG_OK);
  assert_true(d[0] == 1099511627776.0 && d[1] == -3.0);
  ag_tensor_release(big);
  /* floats do not silently become integers; F8 is skippable, by name */
  assert_null(ag_safetensors_get_as(f, "f32", AG_CPU, AG_I32));
  assert_int_equal(ag_last_status(), AG_ERR_DTYPE);
  assert_null(ag_safetensors_get(f, "f8", AG_CPU));
  assert_non_null(strstr(ag_last_error(), "F8_E4M3"));
  assert_null(ag_safetensors_get_as(f, "f8", AG_CPU, AG_F32));
  assert_int_equal(ag_last_status(), AG_ERR_DTYPE);
  /* save what was loaded (I16/I8 converted to i32) and let PyTorch check it */
  ag_param_list l = {0};
  const char *keep[] = {"f64", "f32", "f16", "bf16", "i32", "position_ids", "bn.num_batches_tracked", "big",
                        "u8", "mask"};
  const char *conv[] = {"i16", "i8"};
  ag_tensor *held[12];
  int nh = 0;
  for (int i = 0; i < 10; i++) ag_params_add(&l, keep[i], held[nh++] = ag_safetensors_get(f, keep[i], AG_CPU));
  for (int i = 0; i < 2; i++)
    ag_params_add(&l, conv[i], held[nh++] = ag_safetensors_get_as(f, conv[i], AG_CPU, AG_I32));
  ag_safetensors_close(f);
  if (ag_safetensors_save(path, &l, 0, NULL, NULL) != AG_OK) fail_msg("%s", ag_last_error());
  ag_params_free(&l);
  for (int i = 0; i < nh; i++) ag_tensor_release(held[i]);
  ag_tensor_release(pid);
  ag_tensor_release(f64);
  snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/st_all_dtypes.py check %s", AG_TEST_DATA, path);
  assert_int_equal(system(cmd), 0);
}

/* Without torch: a hand-made file with I64 and BOOL tensors opens and
 * converts; duplicate metadata keys and control characters in names are
 * refused, and names in messages are escaped (issue 12 item 14). */
static void test_int_bool_and_names(void **state) {
  (void)state;
  unsigned char data[16 + 3 + 5] = {0};
  int64_t v[2] = {-5, 1LL << 33};
  memcpy(data, v, 16);
  data[16] = 1;
  data[18] = 1;
  with_header("{\"__metadata__\":{\"a\":\"1\"},\"ids\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[0,16]},"
              "\"m\":{\"dtype\":\"BOOL\",\"shape\":[3],\"data_offsets\":[16,19]},"
              "\"u\":{\"dtype\":\"U8\",\"shape\":[5],\"data_offsets\":[19,24]}}",
              0);
  /* with_header wrote no data: append it */
  FILE *fp = fopen(path, "ab");
  assert_non_null(fp);
  assert_int_equal(fwrite(data, 1, sizeof data, fp), sizeof data);
  fclose(fp);
  ag_safetensors *f = NULL;
  if (ag_safetensors_open(path, &f) != AG_OK) fail_msg("%s", ag_last_error());
  assert_string_equal(ag_safetensors_dtype(f, 0), "I64");
  assert_null(ag_safetensors_get_as(f, "ids", AG_CPU, AG_I32)); /* 2^33 */
  assert_non_null(strstr(ag_last_error(), "element 1"));
  ag_tensor *x = ag_safetensors_get_as(f, "ids", AG_CPU, AG_F32);
  float fx[2];
  assert_int_equal(ag_to_host(x, fx, sizeof fx), AG_OK);
  assert_true(fx[0] == -5.0f && fx[1] == 8589934592.0f);
  ag_tensor_release(x);
  ag_tensor *m = ag_safetensors_get_as(f, "m", AG_CPU, AG_F32);
  assert_int_equal(ag_to_host(m, fx, 8), AG_ERR_INVALID); /* wrong size: 3 elements */
  float fm[3];
  assert_int_equal(ag_to_host(m, fm, sizeof fm), AG_OK);
  assert_true(fm[0] == 1.0f && fm[1] == 0.0f && fm[2] == 1.0f);
  ag_tensor_release(m);
  /* a missing name with a control character is printed escaped */
  assert_null(ag_safetensors_get(f, "bad\x01name", AG_CPU));
  assert_non_null(strstr(ag_last_error(), "'bad\\x01name'"));
  ag_safetensors_close(f);

  with_header("{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}", 0);
  expect_corrupt("duplicate metadata key");
  assert_non_null(strstr(ag_last_error(), "'k' appears twice"));
  with_header("{\"a\\nb\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4);
  expect_corrupt("control character in a tensor name");
  assert_non_null(strstr(ag_last_error(), "'a\\x0ab'"));
  assert_null(strchr(ag_last_error(), '\n'));
  with_header("{\"__metadata__\":{\"x\\u0007\":\"1\"}}", 0);
  expect_corrupt("control character in a metadata key");
  with_header("{\"q\\u001b[2J\":{\"dtype\":\"Q8\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4);
  expect_corrupt("escape sequence in a name");
  assert_null(strchr(ag_last_error(), '\x1b'));
}

/* A save that fails leaves the previous checkpoint intact and no temp file. */
static void test_atomic_save(void **state) {
  (void)state;
  save_sample();
  ag_param_list l = {0};
  int64_t s = 2;
  ag_tensor *a = ag_zeros(AG_CPU, AG_F32, 1, &s);
  ag_params_add(&l, "dup", a);
  ag_params_add(&l, "dup", a);
  assert_int_equal(ag_safetensors_save(path, &l, 0, NULL, NULL), AG_ERR_INVALID);
  ag_params_free(&l);
  char bad[300];
  snprintf(bad, sizeof bad, "/nonexistent_dir_ag/%ld.safetensors", (long)getpid());
  ag_params_add(&l, "a", a);
  assert_int_equal(ag_safetensors_save(bad, &l, 0, NULL, NULL), AG_ERR_IO);
  ag_safetensors *f;
  assert_int_equal(ag_safetensors_open(path, &f), AG_OK);
  assert_int_equal(ag_safetensors_count(f), 6);
  ag_safetensors_close(f);
  char tmp[300];
  snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
  assert_int_not_equal(access(tmp, F_OK), 0);
  /* and a successful save replaces the file */
  assert_int_equal(ag_safetensors_save(path, &l, 0, NULL, NULL), AG_OK);
  assert_int_equal(ag_safetensors_open(path, &f), AG_OK);
  assert_int_equal(ag_safetensors_count(f), 1);
  ag_safetensors_close(f);
  ag_params_free(&l);
  ag_tensor_release(a);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_round_trip, setup, teardown),
      cmocka_unit_test_setup_teardown(test_python_reads_it, setup, teardown),
      cmocka_unit_test_setup_teardown(test_python_plain_reads_it, setup, teardown),
      cmocka_unit_test_setup_teardown(test_corrupt_files, setup, teardown),
      cmocka_unit_test_setup_teardown(test_atomic_save, setup, teardown),
      cmocka_unit_test_setup_teardown(test_torch_every_dtype, setup, teardown),
      cmocka_unit_test_setup_teardown(test_int_bool_and_names, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
