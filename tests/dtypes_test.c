/* The integer dtypes i64, bool and u8 through the public API on one device
 * (AG_TEST_DEVICE, the CPU when unset): creation, casts between every pair
 * of dtypes the device holds, views, comparisons giving bool, where and
 * masked_fill with bool masks, embedding and cross-entropy with i64 indices
 * (against values PyTorch 1.13 computed), reductions, DLPack codes. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "anygrad/anygrad.h"
#include "anygrad/interop.h"
#include "test_device.h"

#define CHECK(x)                                                \
  do {                                                          \
    if (!(x)) fail_msg("%s: %s", #x, ag_last_error());          \
  } while (0)

static const ag_dtype k_all[] = {AG_F32, AG_F16, AG_BF16, AG_I32, AG_F64, AG_I64, AG_BOOL, AG_U8};
#define N_ALL ((int)(sizeof k_all / sizeof *k_all))

/* Whether the test device holds dtype dt at all (f64 is CPU-only). */
static bool device_has(ag_dtype dt) {
  ag_tensor *t = ag_zeros(TEST_DEV, dt, 0, NULL);
  bool ok = t != NULL;
  ag_tensor_release(t);
  ag_error_clear();
  return ok;
}

/* Values of t as doubles (via a cast to f64 on the CPU, a path that is
 * itself checked against raw bytes below). */
static void values(ag_tensor *t, double *out, int64_t n) {
  ag_tensor *c = ag_to_device(t, AG_CPU);
  CHECK(c);
  ag_tensor *d = ag_cast(c, AG_F64);
  CHECK(d);
  CHECK(ag_to_host(d, out, (size_t)n * 8) == AG_OK);
  ag_tensor_release(c);
  ag_tensor_release(d);
}

static void test_names_sizes(void **state) {
  (void)state;
  assert_string_equal(ag_dtype_name(AG_I64), "i64");
  assert_string_equal(ag_dtype_name(AG_BOOL), "bool");
  assert_string_equal(ag_dtype_name(AG_U8), "u8");
  assert_int_equal(ag_dtype_size(AG_I64), 8);
  assert_int_equal(ag_dtype_size(AG_BOOL), 1);
  assert_int_equal(ag_dtype_size(AG_U8), 1);
  ag_dtype dt;
  assert_int_equal(ag_dtype_parse("bool", &dt), AG_OK);
  assert_int_equal(dt, AG_BOOL);
  assert_int_equal(ag_dtype_parse("i64", &dt), AG_OK);
  assert_int_equal(dt, AG_I64);
  assert_int_equal(ag_dtype_parse("u8", &dt), AG_OK);
  assert_int_equal(dt, AG_U8);
  assert_true(ag_dtype_is_int(AG_BOOL) && ag_dtype_is_int(AG_U8) && ag_dtype_is_int(AG_I64));
  assert_false(ag_dtype_is_float(AG_I64) || ag_dtype_is_int(AG_F16));
}

/* Host bytes in, the same bytes out; full/arange/item agree. */
static void test_creation(void **state) {
  (void)state;
  const int64_t n = 5;
  const int64_t l[5] = {-3, 0, 1, (1LL << 40) + 1, INT64_MAX};
  const uint8_t b[5] = {1, 0, 1, 1, 0}, u[5] = {0, 7, 128, 255, 3};
  const struct { ag_dtype dt; const void *p; size_t es; } cases[] = {{AG_I64, l, 8}, {AG_BOOL, b, 1}, {AG_U8, u, 1}};
  for (size_t k = 0; k < 3; k++) {
    ag_tensor *t = ag_from_host(TEST_DEV, cases[k].dt, 1, &n, cases[k].p);
    CHECK(t);
    uint8_t got[40];
    CHECK(ag_to_host(t, got, (size_t)n * cases[k].es) == AG_OK);
    assert_memory_equal(got, cases[k].p, (size_t)n * cases[k].es);
    ag_tensor_release(t);
  }
  ag_tensor *f = ag_full(TEST_DEV, AG_I64, 1, &n, 1099511627776.0);
  ag_tensor *a = ag_arange(TEST_DEV, AG_I64, 0, 5, 1);
  ag_tensor *fb = ag_full(TEST_DEV, AG_BOOL, 1, &n, 5.0), *fu = ag_full(TEST_DEV, AG_U8, 1, &n, 200.0);
  CHECK(f && a && fb && fu);
  int64_t gl[5];
  CHECK(ag_to_host(f, gl, sizeof gl) == AG_OK);
  for (int i = 0; i < 5; i++) assert_true(gl[i] == 1099511627776LL);
  CHECK(ag_to_host(a, gl, sizeof gl) == AG_OK);
  for (int i = 0; i < 5; i++) assert_true(gl[i] == i);
  uint8_t g8[5];
  CHECK(ag_to_host(fb, g8, 5) == AG_OK);
  for (int i = 0; i < 5; i++) assert_int_equal(g8[i], 1);
  CHECK(ag_to_host(fu, g8, 5) == AG_OK);
  for (int i = 0; i < 5; i++) assert_int_equal(g8[i], 200);
  ag_tensor *s = ag_scalar(TEST_DEV, AG_I64, -7);
  assert_true(ag_item(s) == -7.0);
  ag_tensor *sb = ag_scalar(TEST_DEV, AG_BOOL, 1);
  assert_true(ag_item(sb) == 1.0);
  ag_tensor *r = ag_rand(TEST_DEV, AG_I64, 1, &n, 0, 1, NULL); /* random ints: not a thing */
  assert_null(r);
  assert_int_equal(ag_last_status(), AG_ERR_DTYPE);
  ag_error_clear();
  ag_tensor *rel[] = {f, a, fb, fu, s, sb};
  for (size_t i = 0; i < 6; i++) ag_tensor_release(rel[i]);
}

/* Expected value of x (exact in every source dtype below) cast to dt. */
static double cast_ref(double x, ag_dtype dt) {
  switch (dt) {
    case AG_BOOL: return x != 0;
    case AG_U8: return x <= 0 ? 0 : x >= 255 ? 255 : trunc(x);
    case AG_I32:
    case AG_I64: return trunc(x);
    default: return x;
  }
}

/* Every ordered pair of dtypes the device holds: values chosen exact in all
 * of them (after the first cast), including 0 -> false and 2 -> true. */
static void test_cast_matrix(void **state) {
  (void)state;
  const double src[6] = {0, 1, 2, 7, 100, 200};
  const int64_t n = 6;
  int pairs = 0;
  for (int i = 0; i < N_ALL; i++) {
    if (!device_has(k_all[i])) continue;
    ag_tensor *f = ag_from_host(AG_CPU, AG_F64, 1, &n, src);
    ag_tensor *fc = ag_cast(f, k_all[i]), *a = fc ? ag_to_device(fc, TEST_DEV) : NULL;
    CHECK(a);
    double av[6];
    values(a, av, n);
    for (int j = 0; j < N_ALL; j++) {
      if (!device_has(k_all[j])) continue;
      ag_tensor *b = ag_cast(a, k_all[j]);
      if (!b) fail_msg("cast %s -> %s: %s", ag_dtype_name(k_all[i]), ag_dtype_name(k_all[j]), ag_last_error());
      assert_int_equal(ag_tensor_dtype(b), k_all[j]);
      double bv[6];
      values(b, bv, n);
      for (int e = 0; e < 6; e++)
        if (bv[e] != cast_ref(av[e], k_all[j]))
          fail_msg("cast %s -> %s element %d: %g, want %g", ag_dtype_name(k_all[i]), ag_dtype_name(k_all[j]), e,
                   bv[e], cast_ref(av[e], k_all[j]));
      ag_tensor_release(b);
      pairs++;
    }
    ag_tensor_release(f);
    ag_tensor_release(fc);
    ag_tensor_release(a);
  }
  assert_true(pairs >= 7 * 7);
}

/* Floating -> integer casts truncate and saturate; NaN -> 0; -> bool is != 0. */
static void test_cast_edges(void **state) {
  (void)state;
  const float src[6] = {-2.7f, 2.7f, 300.0f, -0.0f, NAN, 1e30f};
  const int64_t n = 6;
  ag_tensor *x = ag_from_host(TEST_DEV, AG_F32, 1, &n, src);
  ag_tensor *l = ag_cast(x, AG_I64), *b = ag_cast(x, AG_BOOL), *u = ag_cast(x, AG_U8);
  CHECK(l && b && u);
  int64_t gl[6];
  uint8_t gb[6], gu[6];
  CHECK(ag_to_host(l, gl, sizeof gl) == AG_OK);
  CHECK(ag_to_host(b, gb, 6) == AG_OK);
  CHECK(ag_to_host(u, gu, 6) == AG_OK);
  assert_true(gl[0] == -2 && gl[1] == 2 && gl[2] == 300 && gl[3] == 0 && gl[4] == 0 && gl[5] == INT64_MAX);
  const uint8_t wb[6] = {1, 1, 1, 0, 1, 1}, wu[6] = {0, 2, 255, 0, 0, 255};
  assert_memory_equal(gb, wb, 6);
  assert_memory_equal(gu, wu, 6);
  /* integer -> integer keeps the low bits (two's complement), as PyTorch */
  const int64_t big[3] = {-1, 256 + 7, (1LL << 32) + 5};
  ag_tensor *bl = ag_from_host(TEST_DEV, AG_I64, 1, (int64_t[]){3}, big);
  ag_tensor *b8 = ag_cast(bl, AG_U8), *b32 = ag_cast(bl, AG_I32), *bb = ag_cast(bl, AG_BOOL);
  CHECK(b8 && b32 && bb);
  uint8_t g8[3];
  int32_t g32[3];
  CHECK(ag_to_host(b8, g8, 3) == AG_OK);
  CHECK(ag_to_host(b32, g32, 12) == AG_OK);
  assert_true(g8[0] == 255 && g8[1] == 7 && g8[2] == 5);
  assert_true(g32[0] == -1 && g32[1] == 263 && g32[2] == 5);
  CHECK(ag_to_host(bb, g8, 3) == AG_OK);
  assert_true(g8[0] == 1 && g8[1] == 1 && g8[2] == 1);
  ag_tensor *rel[] = {x, l, b, u, bl, b8, b32, bb};
  for (size_t i = 0; i < 8; i++) ag_tensor_release(rel[i]);
}

/* Views (transpose, slice, expand) of 1- and 8-byte dtypes, made contiguous
 * and written through with ag_copy_. */
static void test_views(void **state) {
  (void)state;
  const ag_dtype dts[3] = {AG_I64, AG_BOOL, AG_U8};
  for (int k = 0; k < 3; k++) {
    const int64_t s2[2] = {3, 4};
    ag_tensor *a = ag_arange(TEST_DEV, AG_I64, 0, 12, 1), *ar = ag_reshape(a, 2, s2);
    ag_tensor *t = ag_cast(ar, dts[k]);
    CHECK(t);
    ag_tensor *tr = ag_transpose(t, 0, 1), *tc = ag_contiguous(tr);
    CHECK(tc);
    double v[12];
    values(tc, v, 12);
    for (int i = 0; i < 4; i++)
      for (int j = 0; j < 3; j++) assert_true(v[i * 3 + j] == cast_ref((double)(j * 4 + i), dts[k]));
    ag_tensor *sl = ag_slice(t, 1, 1, 4, 2); /* columns 1 and 3 */
    ag_tensor *z = ag_zeros(TEST_DEV, dts[k], 1, (int64_t[]){2});
    ag_tensor *ze = ag_expand(z, 2, (int64_t[]){3, 2});
    CHECK(sl && ze);
    CHECK(ag_copy_(sl, ze) == AG_OK);
    values(t, v, 12);
    for (int i = 0; i < 12; i++) assert_true(v[i] == ((i % 4) % 2 == 1 ? 0 : cast_ref(i, dts[k])));
    ag_tensor *rel[] = {a, ar, t, tr, tc, sl, z, ze};
    for (size_t i = 0; i < 8; i++) ag_tensor_release(rel[i]);
  }
}

/* eq/ne/lt/le/gt/ge give bool for every dtype the device holds; NaN is
 * unequal to everything. */
static void test_comparisons(void **state) {
  (void)state;
  typedef ag_tensor *(*cmp_fn)(ag_tensor *, ag_tensor *);
  const cmp_fn fns[6] = {ag_eq, ag_ne, ag_lt, ag_le, ag_gt, ag_ge};
  const double a[4] = {1, 2, 3, 0}, b[4] = {2, 2, 1, 0};
  const uint8_t want[6][4] = {{0, 1, 0, 1}, {1, 0, 1, 0}, {1, 0, 0, 0}, {1, 1, 0, 1}, {0, 0, 1, 0}, {0, 1, 1, 1}};
  const int64_t n = 4;
  for (int d = 0; d < N_ALL; d++) {
    if (!device_has(k_all[d])) continue;
    ag_tensor *a64 = ag_from_host(AG_CPU, AG_F64, 1, &n, a), *b64 = ag_from_host(AG_CPU, AG_F64, 1, &n, b);
    ag_tensor *ac = ag_cast(a64, k_all[d]), *bc = ag_cast(b64, k_all[d]);
    ag_tensor *x = ag_to_device(ac, TEST_DEV), *y = ag_to_device(bc, TEST_DEV);
    CHECK(x && y);
    for (int f = 0; f < 6; f++) {
      if (k_all[d] == AG_BOOL) continue; /* 2 and 3 are both true: other table */
      ag_tensor *r = fns[f](x, y);
      if (!r) fail_msg("comparison %d on %s: %s", f, ag_dtype_name(k_all[d]), ag_last_error());
      assert_int_equal(ag_tensor_dtype(r), AG_BOOL);
      uint8_t got[4];
      CHECK(ag_to_host(r, got, 4) == AG_OK);
      if (memcmp(got, want[f], 4))
        fail_msg("comparison %d on %s: %d%d%d%d", f, ag_dtype_name(k_all[d]), got[0], got[1], got[2], got[3]);
      ag_tensor_release(r);
    }
    ag_tensor *rel[] = {a64, b64, ac, bc, x, y};
    for (size_t i = 0; i < 6; i++) ag_tensor_release(rel[i]);
  }
  const float nan2[2] = {NAN, 1};
  ag_tensor *p = ag_from_host(TEST_DEV, AG_F32, 1, (int64_t[]){2}, nan2);
  ag_tensor *eq = ag_eq(p, p), *ne = ag_ne(p, p);
  uint8_t g[2];
  CHECK(ag_to_host(eq, g, 2) == AG_OK);
  assert_true(g[0] == 0 && g[1] == 1);
  CHECK(ag_to_host(ne, g, 2) == AG_OK);
  assert_true(g[0] == 1 && g[1] == 0);
  ag_tensor_release(p);
  ag_tensor_release(eq);
  ag_tensor_release(ne);
}

/* where/masked_fill with a bool mask from a comparison; the old float mask
 * still works; integer data selects exactly. */
static void test_where_masks(void **state) {
  (void)state;
  const float xv[4] = {-1, 2, -3, 4};
  const int64_t n = 4;
  ag_tensor *x = ag_from_host(TEST_DEV, AG_F32, 1, &n, xv), *z = ag_zeros(TEST_DEV, AG_F32, 0, NULL);
  ag_tensor *m = ag_gt(x, z);
  CHECK(m);
  assert_int_equal(ag_tensor_dtype(m), AG_BOOL);
  ag_tensor *w = ag_where(m, x, z), *mf = ag_masked_fill(x, m, -INFINITY);
  CHECK(w && mf);
  float g[4];
  CHECK(ag_to_host(w, g, 16) == AG_OK);
  assert_true(g[0] == 0 && g[1] == 2 && g[2] == 0 && g[3] == 4);
  CHECK(ag_to_host(mf, g, 16) == AG_OK);
  assert_true(g[0] == -1 && isinf(g[1]) && g[2] == -3 && isinf(g[3]));
  ag_tensor *fm = ag_cast(m, AG_F32), *w2 = ag_where(fm, x, z); /* float mask: the old API */
  CHECK(w2);
  CHECK(ag_to_host(w2, g, 16) == AG_OK);
  assert_true(g[0] == 0 && g[1] == 2 && g[2] == 0 && g[3] == 4);
  const int64_t big[4] = {INT64_MIN, 1, INT64_MAX, -5};
  ag_tensor *li = ag_from_host(TEST_DEV, AG_I64, 1, &n, big), *lz = ag_zeros(TEST_DEV, AG_I64, 1, &n);
  ag_tensor *wl = ag_where(m, li, lz), *ml = ag_masked_fill(li, m, 9);
  CHECK(wl && ml);
  int64_t gl[4];
  CHECK(ag_to_host(wl, gl, 32) == AG_OK);
  assert_true(gl[0] == 0 && gl[1] == 1 && gl[2] == 0 && gl[3] == -5);
  CHECK(ag_to_host(ml, gl, 32) == AG_OK);
  assert_true(gl[0] == INT64_MIN && gl[1] == 9 && gl[2] == INT64_MAX && gl[3] == 9);
  /* u8 and bool data */
  ag_tensor *ub = ag_full(TEST_DEV, AG_U8, 1, &n, 200), *uz = ag_zeros(TEST_DEV, AG_U8, 1, &n);
  ag_tensor *wb = ag_where(m, ub, uz), *lt = ag_lt(x, z), *wm = ag_where(m, lt, m);
  CHECK(wb && wm);
  uint8_t g8[4];
  CHECK(ag_to_host(wb, g8, 4) == AG_OK);
  assert_true(g8[0] == 0 && g8[1] == 200 && g8[2] == 0 && g8[3] == 200);
  CHECK(ag_to_host(wm, g8, 4) == AG_OK);
  assert_true(g8[0] == 0 && g8[1] == 0 && g8[2] == 0 && g8[3] == 0);
  ag_tensor *rel[] = {x, z, m, w, mf, fm, w2, li, lz, wl, ml, ub, uz, wb, lt, wm};
  for (size_t i = 0; i < 16; i++) ag_tensor_release(rel[i]);
}

/* The gradient through maximum/max and a bool-masked where is unchanged by
 * comparisons returning bool (the backward builds its masks in g's dtype). */
static void test_masks_in_autograd(void **state) {
  (void)state;
  const float av[3] = {1, 5, 3}, bv[3] = {2, 5, 1};
  const int64_t n = 3;
  ag_tensor *a = ag_from_host(TEST_DEV, AG_F32, 1, &n, av), *b = ag_from_host(TEST_DEV, AG_F32, 1, &n, bv);
  ag_tensor_set_requires_grad(a, true);
  ag_tensor_set_requires_grad(b, true);
  ag_tensor *m = ag_maximum(a, b), *mx = ag_max(a, 0, NULL, false);
  ag_tensor *s = ag_sum(m, 0, NULL, false), *l = ag_add(s, mx);
  CHECK(l);
  CHECK(ag_backward(l, NULL, false) == AG_OK);
  float ga[3], gb[3];
  CHECK(ag_to_host(ag_tensor_grad(a), ga, 12) == AG_OK);
  CHECK(ag_to_host(ag_tensor_grad(b), gb, 12) == AG_OK);
  assert_true(ga[0] == 0 && ga[1] == 1.5f && ga[2] == 1);
  assert_true(gb[0] == 1 && gb[1] == 0.5f && gb[2] == 0);
  ag_tensor *rel[] = {a, b, m, mx, s, l};
  for (size_t i = 0; i < 6; i++) ag_tensor_release(rel[i]);
}

/* PyTorch 1.13: F.embedding(i, tab) with i = [[2,0],[2,1]] (int64) and the
 * gradient of sum(e * [1, 2]). */
static void test_embedding_i64(void **state) {
  (void)state;
  const float tv[6] = {1, 2, 3, 4, 5, 6};
  const int64_t iv[4] = {2, 0, 2, 1}, s2[2] = {3, 2}, is[2] = {2, 2};
  ag_tensor *tab = ag_from_host(TEST_DEV, AG_F32, 2, s2, tv), *idx = ag_from_host(TEST_DEV, AG_I64, 2, is, iv);
  ag_tensor_set_requires_grad(tab, true);
  ag_tensor *e = ag_embedding(tab, idx);
  CHECK(e);
  assert_int_equal(ag_tensor_ndim(e), 3);
  float g[8];
  CHECK(ag_to_host(e, g, sizeof g) == AG_OK);
  const float want[8] = {5, 6, 1, 2, 5, 6, 3, 4};
  assert_memory_equal(g, want, sizeof want);
  const float wv[2] = {1, 2};
  ag_tensor *w = ag_from_host(TEST_DEV, AG_F32, 1, (int64_t[]){2}, wv), *p = ag_mul(e, w);
  ag_tensor *l = ag_sum(p, 0, NULL, false);
  CHECK(ag_backward(l, NULL, false) == AG_OK);
  float gt[6];
  CHECK(ag_to_host(ag_tensor_grad(tab), gt, sizeof gt) == AG_OK);
  const float wg[6] = {1, 2, 1, 2, 2, 4};
  assert_memory_equal(gt, wg, sizeof wg);
  /* an i64 index beyond the i32 range is reported, never wrapped into range */
  const int64_t bad[1] = {(1LL << 32) + 1};
  ag_tensor *bi = ag_from_host(TEST_DEV, AG_I64, 1, (int64_t[]){1}, bad);
  ag_no_grad_begin();
  ag_tensor *be = ag_embedding(tab, bi);
  ag_grad_mode_end();
  ag_status st = be ? ag_device_synchronize(TEST_DEV) : ag_last_status();
  assert_int_equal(st, AG_ERR_INDEX);
  ag_error_clear();
  ag_tensor *rel[] = {tab, idx, e, w, p, l, bi, be};
  for (size_t i = 0; i < 8; i++) ag_tensor_release(rel[i]);
}

/* PyTorch 1.13: F.cross_entropy(l, t) with int64 targets [2, -100, 1]. */
static void test_cross_entropy_i64(void **state) {
  (void)state;
  const float lv[12] = {0.5f, -1.0f, 2.0f, 0.25f, 1.5f, 0.0f, -0.5f, 1.0f, -2.0f, 3.0f, 0.5f, 0.0f};
  const int64_t tv[3] = {2, -100, 1}, s2[2] = {3, 4}, s1[1] = {3};
  const double want_loss = 0.2495436668395996;
  const double want_grad[12] = {0.07711739838123322, 0.01720721833407879, -0.15438377857208252,
                                0.060059092938899994, 0.0, 0.0, 0.0, 0.0, 0.002958846976980567,
                                -0.06086808443069458, 0.036046143621206284, 0.021863091737031937};
  for (int k = 0; k < 2; k++) { /* i64 (PyTorch's default), then i32: the same numbers */
    ag_tensor *lg = ag_from_host(TEST_DEV, AG_F32, 2, s2, lv);
    ag_tensor *t64 = ag_from_host(TEST_DEV, AG_I64, 1, s1, tv);
    ag_tensor *t = k == 0 ? ag_tensor_retain(t64) : ag_cast(t64, AG_I32);
    ag_tensor_set_requires_grad(lg, true);
    ag_tensor *loss = ag_cross_entropy(lg, t, AG_REDUCTION_MEAN, -100);
    CHECK(loss);
    assert_true(fabs(ag_item(loss) - want_loss) < 1e-6);
    CHECK(ag_backward(loss, NULL, false) == AG_OK);
    float g[12];
    CHECK(ag_to_host(ag_tensor_grad(lg), g, sizeof g) == AG_OK);
    for (int i = 0; i < 12; i++) assert_true(fabs(g[i] - want_grad[i]) < 1e-6);
    ag_tensor *rel[] = {lg, t64, t, loss};
    for (size_t i = 0; i < 4; i++) ag_tensor_release(rel[i]);
  }
  /* out of range target */
  const int64_t bad[1] = {4};
  ag_tensor *lg = ag_from_host(TEST_DEV, AG_F32, 2, (int64_t[]){1, 4}, lv);
  ag_tensor *bt = ag_from_host(TEST_DEV, AG_I64, 1, (int64_t[]){1}, bad);
  ag_tensor *loss = ag_cross_entropy(lg, bt, AG_REDUCTION_SUM, -100);
  ag_status st = loss ? ag_device_synchronize(TEST_DEV) : ag_last_status();
  assert_int_equal(st, AG_ERR_INDEX);
  ag_error_clear();
  ag_tensor_release(lg);
  ag_tensor_release(bt);
  ag_tensor_release(loss);
}

/* sum of bool/u8 -> i64 (PyTorch), sum of i64 stays i64; max/min/argmax. */
static void test_reductions(void **state) {
  (void)state;
  const uint8_t bv[6] = {1, 0, 1, 1, 1, 0}, uv[6] = {200, 100, 255, 3, 0, 9};
  const int64_t lv[6] = {-4, 7, 1LL << 40, 2, -9, 5}, s2[2] = {2, 3};
  ag_tensor *b = ag_from_host(TEST_DEV, AG_BOOL, 2, s2, bv), *u = ag_from_host(TEST_DEV, AG_U8, 2, s2, uv);
  ag_tensor *l = ag_from_host(TEST_DEV, AG_I64, 2, s2, lv);
  ag_tensor *sb = ag_sum(b, 0, NULL, false), *su = ag_sum(u, 0, NULL, false);
  int dim1 = 1;
  ag_tensor *sl = ag_sum(l, 1, &dim1, false);
  CHECK(sb && su && sl);
  assert_int_equal(ag_tensor_dtype(sb), AG_I64);
  assert_int_equal(ag_tensor_dtype(su), AG_I64);
  assert_int_equal(ag_tensor_dtype(sl), AG_I64);
  assert_true(ag_item(sb) == 4 && ag_item(su) == 567);
  int64_t g[2];
  CHECK(ag_to_host(sl, g, 16) == AG_OK);
  assert_true(g[0] == (1LL << 40) + 3 && g[1] == -2);
  ag_tensor *mu = ag_max(u, 0, NULL, false), *nb = ag_min(b, 0, NULL, false), *ml = ag_max(l, 0, NULL, false);
  ag_tensor *nl = ag_min(l, 1, &dim1, false), *am = ag_argmax(u, 1, false);
  CHECK(mu && nb && ml && nl && am);
  assert_int_equal(ag_tensor_dtype(mu), AG_U8);
  assert_int_equal(ag_tensor_dtype(nb), AG_BOOL);
  assert_true(ag_item(mu) == 255 && ag_item(nb) == 0 && ag_item(ml) == (double)(1LL << 40));
  CHECK(ag_to_host(nl, g, 16) == AG_OK);
  assert_true(g[0] == -4 && g[1] == -9);
  int64_t ai[2];
  assert_int_equal(ag_tensor_dtype(am), AG_I64);
  CHECK(ag_to_host(am, ai, 16) == AG_OK);
  assert_true(ai[0] == 2 && ai[1] == 2);
  /* beyond 2^53: exact (an f64 accumulator would round these) */
  const int64_t big[3] = {(1LL << 62) + 1, (1LL << 62) + 3, -(1LL << 62)};
  ag_tensor *bl = ag_from_host(TEST_DEV, AG_I64, 1, (int64_t[]){3}, big);
  ag_tensor *bs = ag_sum(bl, 0, NULL, false), *bm = ag_max(bl, 0, NULL, false), *ba = ag_argmax(bl, 0, false);
  CHECK(bs && bm && ba);
  int64_t gb;
  CHECK(ag_to_host(bs, &gb, 8) == AG_OK);
  assert_true(gb == (1LL << 62) + 4);
  CHECK(ag_to_host(bm, &gb, 8) == AG_OK);
  assert_true(gb == (1LL << 62) + 3);
  int64_t gi;
  CHECK(ag_to_host(ba, &gi, 8) == AG_OK);
  assert_int_equal(gi, 1);
  ag_tensor_release(bl);
  ag_tensor_release(bs);
  ag_tensor_release(bm);
  ag_tensor_release(ba);
  assert_null(ag_mean(l, 0, NULL, false));
  assert_int_equal(ag_last_status(), AG_ERR_DTYPE);
  ag_error_clear();
  ag_tensor *rel[] = {b, u, l, sb, su, sl, mu, nb, ml, nl, am};
  for (size_t i = 0; i < 11; i++) ag_tensor_release(rel[i]);
}

/* Integer arithmetic wraps in the dtype's width. */
static void test_int_arithmetic(void **state) {
  (void)state;
  const int64_t lv[2] = {INT64_MAX, -3};
  const uint8_t uv[2] = {250, 3};
  ag_tensor *l = ag_from_host(TEST_DEV, AG_I64, 1, (int64_t[]){2}, lv);
  ag_tensor *u = ag_from_host(TEST_DEV, AG_U8, 1, (int64_t[]){2}, uv);
  ag_tensor *l2 = ag_add(l, l), *u2 = ag_add(u, u), *un = ag_neg(u), *la = ag_abs(l), *ls = ag_mul_scalar(l, 2);
  CHECK(l2 && u2 && un && la && ls);
  int64_t g[2];
  uint8_t g8[2];
  CHECK(ag_to_host(l2, g, 16) == AG_OK);
  assert_true(g[0] == -2 && g[1] == -6);
  CHECK(ag_to_host(la, g, 16) == AG_OK);
  assert_true(g[0] == INT64_MAX && g[1] == 3);
  CHECK(ag_to_host(u2, g8, 2) == AG_OK);
  assert_true(g8[0] == 244 && g8[1] == 6);
  CHECK(ag_to_host(un, g8, 2) == AG_OK);
  assert_true(g8[0] == 6 && g8[1] == 253);
  CHECK(ag_to_host(ls, g, 16) == AG_OK);
  assert_true(g[1] == -6);
  ag_tensor *rel[] = {l, u, l2, u2, un, la, ls};
  for (size_t i = 0; i < 7; i++) ag_tensor_release(rel[i]);
}

/* DLPack codes: i64 = kDLInt 64, bool = kDLBool 8, u8 = kDLUInt 8, both ways. */
static void test_dlpack_codes(void **state) {
  (void)state;
  const struct { ag_dtype dt; uint8_t code, bits; } k[3] = {
      {AG_I64, kDLInt, 64}, {AG_BOOL, kDLBool, 8}, {AG_U8, kDLUInt, 8}};
  for (int i = 0; i < 3; i++) {
    ag_tensor *t = ag_ones(AG_CPU, k[i].dt, 1, (int64_t[]){3});
    DLManagedTensor *m = NULL;
    CHECK(ag_to_dlpack(t, &m) == AG_OK);
    assert_int_equal(m->dl_tensor.dtype.code, k[i].code);
    assert_int_equal(m->dl_tensor.dtype.bits, k[i].bits);
    ag_tensor *back = ag_from_dlpack(m);
    CHECK(back);
    assert_int_equal(ag_tensor_dtype(back), k[i].dt);
    assert_ptr_equal(ag_tensor_data_ptr(back), ag_tensor_data_ptr(t));
    ag_tensor_release(back);
    ag_tensor_release(t);
  }
}

/* ag_item_scalar: every dtype the device holds, with its dtype and the
 * value exact (an i64 past 2^53 included, where ag_item rounds); errors. */
static void test_item_scalar(void **state) {
  (void)state;
  const int64_t big = (INT64_C(1) << 53) + 1;
  for (int i = 0; i < N_ALL; i++) {
    ag_dtype dt = k_all[i];
    if (!device_has(dt)) continue;
    ag_tensor *t = ag_full(TEST_DEV, dt, 0, NULL, dt == AG_BOOL ? 1.0 : dt == AG_U8 ? 3.0 : -3.0);
    CHECK(t);
    ag_item_value s;
    CHECK(ag_item_scalar(t, &s) == AG_OK);
    assert_int_equal(s.dtype, dt);
    bool fl = dt == AG_F32 || dt == AG_F64 || dt == AG_F16 || dt == AG_BF16;
    assert_int_equal(s.is_floating, fl);
    int64_t want = dt == AG_BOOL ? 1 : dt == AG_U8 ? 3 : -3;
    assert_int_equal(s.i, want);
    assert_true(s.f == (double)want);
    ag_tensor_release(t);
  }
  if (device_has(AG_I64)) {
    ag_tensor *t = ag_from_host(TEST_DEV, AG_I64, 0, NULL, &big);
    CHECK(t);
    ag_item_value s;
    CHECK(ag_item_scalar(t, &s) == AG_OK);
    assert_true(s.i == big);
    assert_true(ag_item(t) == (double)(big - 1)); /* rounded to even */
    ag_tensor_release(t);
  }
  ag_tensor *two = ag_zeros(TEST_DEV, AG_F32, 1, (int64_t[]){2});
  ag_item_value s = {.dtype = AG_U8, .i = 7};
  assert_int_equal(ag_item_scalar(two, &s), AG_ERR_SHAPE);
  assert_int_equal(s.i, 7); /* unchanged on error */
  assert_non_null(strstr(ag_last_error(), "ag_item_scalar"));
  assert_int_equal(ag_item_scalar(two, NULL), AG_ERR_INVALID);
  assert_int_equal(ag_item_scalar(NULL, &s), AG_ERR_INVALID);
  ag_tensor_release(two);
  ag_error_clear();
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_names_sizes),    cmocka_unit_test(test_creation),
      cmocka_unit_test(test_cast_matrix),    cmocka_unit_test(test_cast_edges),
      cmocka_unit_test(test_views),          cmocka_unit_test(test_comparisons),
      cmocka_unit_test(test_where_masks),    cmocka_unit_test(test_masks_in_autograd),
      cmocka_unit_test(test_embedding_i64),  cmocka_unit_test(test_cross_entropy_i64),
      cmocka_unit_test(test_reductions),     cmocka_unit_test(test_int_arithmetic),
      cmocka_unit_test(test_dlpack_codes),   cmocka_unit_test(test_item_scalar),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
