/* ag_add_ / ag_sub_ / ag_mul_ / ag_div_ on every device: the one-kernel
 * write into self (self contiguous, other apart or exactly self) and the
 * two-kernel path (other overlapping self otherwise, self a strided view)
 * both give the out-of-place op's values bit for bit; views alias; a
 * refusal writes nothing and leaves the version where it was. And
 * ag_index_select_host, the one call behind the package's x[idx]. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "anygrad/anygrad.h"

typedef ag_tensor *(*op_fn)(ag_tensor *, ag_tensor *);
typedef ag_status (*iop_fn)(ag_tensor *, ag_tensor *);
static const op_fn OPS[4] = {ag_add, ag_sub, ag_mul, ag_div};
static const iop_fn IOPS[4] = {ag_add_, ag_sub_, ag_mul_, ag_div_};

static const char *DEVS[] = {"cpu", "opencl:0", "vulkan:0", "gpuemu:0"};

static bool dev_of(int k, ag_device *d) {
  if (ag_device_parse(DEVS[k], d) != AG_OK) {
    ag_error_clear();
    return false;
  }
  ag_tensor *t = ag_zeros(*d, AG_F32, 0, NULL);
  if (!t) {
    ag_error_clear();
    return false;
  }
  ag_tensor_release(t);
  return true;
}

static ag_tensor *vals(ag_device d, int nd, const int64_t *s, int n, float seed) {
  float v[32];
  for (int i = 0; i < n; i++) v[i] = seed + 0.37f * (float)i - 0.11f * (float)(i * i % 5) + 0.5f;
  ag_tensor *t = ag_from_host(d, AG_F32, nd, s, v);
  assert_non_null(t);
  return t;
}

static void host(ag_tensor *t, float *out, int n) {
  assert_int_equal(ag_to_host(t, out, (size_t)n * sizeof(float)), AG_OK);
}

/* self op= other against self op other computed before, bit for bit */
static void check_op(int k, ag_tensor *self, ag_tensor *other, const char *what) {
  int n = (int)ag_tensor_numel(self);
  ag_tensor *want = OPS[k](self, other);
  assert_non_null(want);
  float w[32], g[32];
  host(want, w, n);
  assert_int_equal(IOPS[k](self, other), AG_OK);
  host(self, g, n);
  if (memcmp(w, g, (size_t)n * sizeof(float)) != 0) fail_msg("%s: op %d differs from the out-of-place op", what, k);
  ag_tensor_release(want);
}

static void values_and_aliasing(void **state) {
  (void)state;
  for (int dk = 0; dk < 4; dk++) {
    ag_device d;
    if (!dev_of(dk, &d)) continue;
    int64_t s[2] = {2, 3}, s3 = 3, s8 = 8;
    for (int k = 0; k < 4; k++) {
      ag_tensor *a = vals(d, 2, s, 6, 1.f), *b = vals(d, 2, s, 6, 2.f), *r = vals(d, 1, &s3, 3, -3.f);
      ag_tensor *z = ag_full(d, AG_F32, 0, NULL, 1.5);
      check_op(k, a, b, "same shape");
      check_op(k, a, r, "broadcast row");
      check_op(k, a, z, "0-d other");
      check_op(k, a, a, "other is self");
      ag_tensor *same = ag_slice(a, 0, 0, 2, 1); /* the same elements, another handle */
      check_op(k, a, same, "other a view of the same elements");
      /* a view of a written in place: a sees it */
      ag_tensor *row = ag_slice(a, 0, 1, 2, 1);
      float before[6], after[6];
      host(a, before, 6);
      check_op(k, row, r, "a row view");
      host(a, after, 6);
      assert_memory_equal(before, after, 3 * sizeof(float));
      /* overlapping other (shifted by one): the two-kernel path */
      ag_tensor *base = vals(d, 1, &s8, 8, 0.25f);
      ag_tensor *lo = ag_slice(base, 0, 0, 6, 1), *hi = ag_slice(base, 0, 2, 8, 1);
      check_op(k, hi, lo, "partial overlap (other behind self)");
      /* a strided self: the two-kernel path */
      ag_tensor *t = ag_transpose(a, 0, 1), *bt = ag_transpose(b, 0, 1);
      check_op(k, t, bt, "transposed self");
      print_message("%s op %d\n", DEVS[dk], k);
      ag_tensor *ts[] = {a, b, r, z, same, row, base, lo, hi, t, bt};
      for (size_t i = 0; i < sizeof ts / sizeof *ts; i++) ag_tensor_release(ts[i]);
    }
  }
}

/* A refusal writes nothing and moves no version: a backward that saved a
 * still runs; a write that succeeds makes it fail. */
static void refusals(void **state) {
  (void)state;
  for (int dk = 0; dk < 4; dk++) {
    ag_device d;
    if (!dev_of(dk, &d)) continue;
    int64_t s = 4;
    ag_tensor *a = vals(d, 1, &s, 4, 1.f), *b = vals(d, 1, &s, 4, 2.f), *w = vals(d, 1, &s, 4, 3.f);
    assert_int_equal(ag_tensor_set_requires_grad(w, true), AG_OK);
    float before[4], got[4];
    host(a, before, 4);
    ag_tensor *y = ag_sum(ag_mul(w, a), 0, NULL, false); /* saves a */
    assert_non_null(y);
    assert_int_equal(ag_add_(w, b), AG_ERR_INVALID); /* a leaf that requires grad, grad mode on */
    assert_int_equal(ag_add_(a, w), AG_ERR_INVALID); /* other requires grad */
    ag_error_clear();
    ag_tensor *wv = ag_slice(w, 0, 0, 4, 1);
    assert_int_equal(ag_mul_(wv, b), AG_ERR_INVALID); /* a view of it, with a graph */
    ag_error_clear();
    int64_t s2[2] = {2, 4};
    ag_tensor *big = ag_full(d, AG_F32, 2, s2, 1.0);
    assert_int_equal(ag_add_(a, big), AG_ERR_SHAPE); /* a larger broadcast shape */
    ag_error_clear();
    host(a, got, 4);
    assert_memory_equal(got, before, sizeof got);
    assert_int_equal(ag_backward(y, NULL, true), AG_OK); /* a's version unchanged */
    assert_int_equal(ag_add_(a, b), AG_OK);
    assert_int_equal(ag_backward(y, NULL, false), AG_ERR_STATE);
    const char *m = ag_last_error();
    if (!strstr(m, "version 1, expected version 0")) fail_msg("%s: message '%s'", DEVS[dk], m);
    ag_error_clear();
    ag_tensor *ts[] = {a, b, w, y, wv, big};
    for (size_t i = 0; i < sizeof ts / sizeof *ts; i++) ag_tensor_release(ts[i]);
  }
}

/* ag_index_select_host: negatives from the end, the first value out of
 * bounds named, an index on a device refused. */
static void index_select_host(void **state) {
  (void)state;
  int64_t s[2] = {4, 2}, m = 3;
  float x[8] = {0, 1, 2, 3, 4, 5, 6, 7}, got[6];
  ag_tensor *t = ag_from_host(AG_CPU, AG_F32, 2, s, x);
  int64_t iv[3] = {-1, 2, 0};
  int32_t iv32[3] = {3, -4, 1};
  ag_tensor *i64 = ag_from_host(AG_CPU, AG_I64, 1, &m, iv), *i32 = ag_from_host(AG_CPU, AG_I32, 1, &m, iv32);
  ag_tensor *r = ag_index_select_host(t, 0, i64);
  assert_non_null(r);
  host(r, got, 6);
  const float w1[6] = {6, 7, 4, 5, 0, 1}, w2[6] = {6, 7, 0, 1, 2, 3};
  assert_memory_equal(got, w1, sizeof got);
  ag_tensor *r2 = ag_index_select_host(t, 0, i32);
  assert_non_null(r2);
  host(r2, got, 6);
  assert_memory_equal(got, w2, sizeof got);
  int64_t bad[3] = {1, 4, -5};
  ag_tensor *ib = ag_from_host(AG_CPU, AG_I64, 1, &m, bad);
  assert_null(ag_index_select_host(t, 0, ib));
  assert_int_equal(ag_last_status(), AG_ERR_INDEX);
  if (!strstr(ag_last_error(), "index 4 is out of bounds for dimension 0 with size 4")) fail_msg("%s", ag_last_error());
  ag_error_clear();
  assert_null(ag_index_select_host(t, 1, ib)); /* dim 1 of size 2 */
  if (!strstr(ag_last_error(), "index 4 is out of bounds for dimension 1 with size 2")) fail_msg("%s", ag_last_error());
  ag_error_clear();
  assert_null(ag_index_select_host(NULL, 0, i64));
  assert_int_equal(ag_last_status(), AG_ERR_INVALID);
  ag_error_clear();
  enum { M = 200 }; /* more values than the stack buffer holds */
  int64_t many[M];
  for (int k = 0; k < M; k++) many[k] = (k * 7) % 8 - 4;
  int64_t mm = M;
  ag_tensor *im = ag_from_host(AG_CPU, AG_I64, 1, &mm, many), *rm = ag_index_select_host(t, 0, im);
  assert_non_null(rm);
  float gm[2 * M];
  host(rm, gm, 2 * M);
  for (int k = 0; k < M; k++)
    if (gm[2 * k] != x[2 * ((many[k] + 4) % 4)]) fail_msg("row %d: %g", k, gm[2 * k]);
  ag_tensor_release(im);
  ag_tensor_release(rm);
  ag_device d;
  if (dev_of(3, &d)) {
    ag_tensor *di = ag_to_device(i64, d);
    assert_null(ag_index_select_host(t, 0, di));
    assert_int_equal(ag_last_status(), AG_ERR_DEVICE);
    ag_error_clear();
    ag_tensor_release(di);
  }
  ag_tensor *ts[] = {t, i64, i32, r, r2, ib};
  for (size_t i = 0; i < sizeof ts / sizeof *ts; i++) ag_tensor_release(ts[i]);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(values_and_aliasing), cmocka_unit_test(refusals),
                                     cmocka_unit_test(index_select_host)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
