/* Views share storage and carry the right shapes and strides; scopes and
 * reference counts return ag_live_tensors() to where it started. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "anygrad/anygrad.h"

static ag_tensor *iota(int ndim, const int64_t *shape) {
  int64_t n = 1;
  for (int i = 0; i < ndim; i++) n *= shape[i];
  ag_tensor *a = ag_arange(AG_CPU, AG_F32, 0, (double)n, 1);
  ag_tensor *r = ag_reshape(a, ndim, shape);
  ag_tensor_release(a);
  return r;
}

static void view_metadata(void **state) {
  int64_t live = ag_live_tensors();
  ag_tensor *a = iota(2, (int64_t[]){3, 4});
  ag_tensor *t = ag_transpose(a, 0, 1);
  assert_int_equal(ag_tensor_dim(t, 0), 4);
  assert_int_equal(ag_tensor_dim(t, -1), 3);
  assert_int_equal(ag_tensor_strides(t)[0], 1);
  assert_int_equal(ag_tensor_strides(t)[1], 4);
  assert_false(ag_tensor_is_contiguous(t));
  /* no elements: contiguous whatever the strides (PyTorch agrees) */
  ag_tensor *z = ag_zeros(AG_CPU, AG_F32, 2, (int64_t[]){2, 0});
  assert_true(ag_tensor_is_contiguous(z));
  ag_tensor *zt = ag_transpose(z, 0, 1);
  assert_true(ag_tensor_is_contiguous(zt));
  ag_tensor_release(zt);
  ag_tensor_release(z);
  ag_tensor *s = ag_slice(a, 1, -3, 4, 2); /* columns 1, 3 */
  assert_int_equal(ag_tensor_dim(s, 1), 2);
  assert_int_equal(ag_tensor_strides(s)[1], 2);
  float v[6];
  assert_int_equal(ag_to_host(s, v, sizeof v), AG_OK);
  const float want_s[6] = {1, 3, 5, 7, 9, 11};
  assert_memory_equal(v, want_s, sizeof v);
  ag_tensor *row = ag_slice(a, 0, 0, 1, 1);
  ag_tensor *e = ag_expand(row, 2, (int64_t[]){5, 4});
  assert_int_equal(ag_tensor_strides(e)[0], 0);
  ag_tensor *u = ag_unsqueeze(a, 0);
  assert_int_equal(ag_tensor_ndim(u), 3);
  ag_tensor *q = ag_squeeze(u, 0);
  assert_int_equal(ag_tensor_ndim(q), 2);
  const int perm[3] = {2, 0, 1};
  ag_tensor *cube = iota(3, (int64_t[]){2, 3, 4});
  ag_tensor *p3 = ag_permute(cube, perm);
  assert_int_equal(ag_tensor_dim(p3, 0), 4);
  assert_int_equal(ag_tensor_strides(p3)[0], 1);
  /* a view fails on a transposed layout; reshape copies instead */
  assert_null(ag_view(t, 1, (int64_t[]){12}));
  ag_tensor *r = ag_reshape(t, 1, (int64_t[]){12});
  float w[12];
  assert_int_equal(ag_to_host(r, w, sizeof w), AG_OK);
  const float want_t[12] = {0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11};
  assert_memory_equal(w, want_t, sizeof w);
  ag_tensor *ts[] = {a, t, s, row, e, u, q, cube, p3, r};
  for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) ag_tensor_release(ts[i]);
  ag_error_clear();
  assert_int_equal(ag_live_tensors(), live);
}

static void views_share_storage(void **state) {
  ag_tensor *a = ag_zeros(AG_CPU, AG_F32, 2, (int64_t[]){4, 6});
  ag_tensor *col = ag_slice(a, 1, 2, 3, 1);
  assert_int_equal(ag_fill_(col, 5), AG_OK); /* write through the view */
  ag_tensor *flat = ag_view(a, 1, (int64_t[]){24});
  float v[24];
  assert_int_equal(ag_to_host(flat, v, sizeof v), AG_OK);
  for (int i = 0; i < 24; i++) assert_float_equal(v[i], (i % 6 == 2 ? 5 : 0), 0);
  /* the view keeps the storage alive after the base is released */
  ag_tensor_release(a);
  ag_tensor_release(flat);
  float c[4];
  assert_int_equal(ag_to_host(col, c, sizeof c), AG_OK);
  for (int i = 0; i < 4; i++) assert_float_equal(c[i], 5, 0);
  ag_tensor_release(col);
}

/* ag_clone: never a view (a write to the copy leaves the source), the
 * dtype and every bit kept (-0.0, NaN payload), a NULL refused. */
static void clone_copies(void **state) {
  const float src[4] = {-0.0f, 1.5f, 0, 3};
  float in[4];
  memcpy(in, src, sizeof in);
  const uint32_t payload = 0x7fc01234u; /* a quiet NaN with a payload */
  memcpy(&in[2], &payload, sizeof payload);
  ag_tensor *a = ag_from_host(AG_CPU, AG_F32, 1, (int64_t[]){4}, in);
  assert_non_null(a);
  ag_tensor *c = ag_clone(a);
  assert_non_null(c);
  assert_int_equal(ag_tensor_dtype(c), AG_F32);
  assert_int_equal(ag_fill_(a, 7), AG_OK); /* the source changes, the clone does not */
  float out[4];
  assert_int_equal(ag_to_host(c, out, sizeof out), AG_OK);
  assert_memory_equal(out, in, sizeof out);
  ag_tensor_release(c);
  /* a transposed view: the clone is contiguous, row-major in the view's order */
  ag_tensor *m = iota(2, (int64_t[]){2, 3});
  ag_tensor *t = ag_transpose(m, 0, 1);
  ag_tensor *tc = ag_clone(t);
  assert_true(ag_tensor_is_contiguous(tc));
  float tv[6];
  assert_int_equal(ag_to_host(tc, tv, sizeof tv), AG_OK);
  const float want[6] = {0, 3, 1, 4, 2, 5};
  assert_memory_equal(tv, want, sizeof tv);
  ag_tensor_release(tc);
  ag_tensor_release(t);
  ag_tensor_release(m);
  ag_tensor_release(a);
  assert_null(ag_clone(NULL));
  assert_int_equal(ag_last_status(), AG_ERR_INVALID);
  ag_error_clear();
}

static void refcount(void **state) {
  int64_t live = ag_live_tensors();
  ag_tensor *a = ag_ones(AG_CPU, AG_F32, 1, (int64_t[]){8});
  assert_int_equal(ag_live_tensors(), live + 1);
  ag_tensor *b = ag_tensor_retain(a);
  assert_ptr_equal(a, b);
  ag_tensor_release(a);
  assert_int_equal(ag_live_tensors(), live + 1);
  ag_tensor *sum = ag_sum(b, 0, NULL, false);
  assert_float_equal(ag_item(sum), 8, 0);
  ag_tensor_release(sum);
  ag_tensor_release(b);
  assert_int_equal(ag_live_tensors(), live);
  ag_error_clear();
}

static void scopes(void **state) {
  int64_t live = ag_live_tensors();
  ag_scope_begin();
  ag_tensor *a = ag_ones(AG_CPU, AG_F32, 2, (int64_t[]){3, 3});
  ag_tensor *b = ag_mul_scalar(ag_add(a, a), 3);
  ag_tensor *t = ag_transpose(b, 0, 1);
  ag_tensor *early = ag_exp(a);
  ag_tensor_release(early); /* releasing a scope-owned reference removes it */
  ag_scope_begin();
  ag_tensor *inner = ag_sum(t, 0, NULL, false);
  ag_tensor *kept = ag_tensor_keep(ag_neg(inner));
  assert_int_equal(ag_scope_end(), AG_OK); /* inner released, kept moved out */
  assert_float_equal(ag_item(kept), -54, 0);
  ag_tensor *kept2 = ag_tensor_keep(kept); /* to the caller */
  assert_int_equal(ag_scope_end(), AG_OK);
  assert_int_equal(ag_live_tensors(), live + 1);
  assert_float_equal(ag_item(kept2), -54, 0);
  ag_tensor_release(kept2);
  assert_int_equal(ag_live_tensors(), live);
}

/* Ops that may hand back their input (contiguous of a contiguous tensor, a
 * cast to the same dtype, reshape to the same shape, to_device on the same
 * device, eval dropout) still return a reference the scope releases. */
static void scopes_with_identity_results(void **state) {
  int64_t live = ag_live_tensors();
  ag_scope_begin();
  ag_tensor *a = ag_ones(AG_CPU, AG_F32, 1, (int64_t[]){8});
  ag_contiguous(a);
  ag_cast(a, AG_F32);
  ag_reshape(a, 1, (int64_t[]){8});
  ag_to_device(a, AG_CPU);
  ag_dropout(a, 0.5, false, NULL);
  float v[8];
  assert_int_equal(ag_to_host(a, v, sizeof v), AG_OK);
  ag_sum(a, 0, NULL, false);
  assert_int_equal(ag_scope_end(), AG_OK);
  assert_int_equal(ag_live_tensors(), live);
}

#define assert_shape_error(msg_part) \
  do { \
    assert_int_equal(ag_last_status(), AG_ERR_SHAPE); \
    if (!strstr(ag_last_error(), (msg_part))) fail_msg("message '%s' lacks '%s'", ag_last_error(), (msg_part)); \
    ag_error_clear(); \
  } while (0)

/* Shape products never wrap: numel, strides and byte sizes that overflow
 * int64 are refused with AG_ERR_SHAPE. */
static void shape_overflow_refused(void **state) {
  int64_t live = ag_live_tensors();
  const int64_t big = (int64_t)1 << 62;
  ag_error_clear();
  /* [2^62, 8] used to wrap to 0 elements; a slice of it then wrote past the
   * storage. */
  assert_null(ag_zeros(AG_CPU, AG_F32, 2, (int64_t[]){big, 8}));
  assert_shape_error("ag_full");
  assert_null(ag_empty(AG_CPU, AG_F32, 2, (int64_t[]){big, 8}));
  assert_shape_error("too large");
  /* 2^62 f32 elements: the count fits, the bytes do not. */
  assert_null(ag_empty(AG_CPU, AG_F32, 1, (int64_t[]){big}));
  assert_shape_error("ag_empty");
  /* A zero size does not hide wrapping strides. */
  assert_null(ag_empty(AG_CPU, AG_F32, 3, (int64_t[]){0, big, 8}));
  assert_shape_error("ag_empty");
  assert_null(ag_rand(AG_CPU, AG_F32, 2, (int64_t[]){big, 8}, 0, 1, NULL));
  assert_shape_error("ag_rand");
  assert_null(ag_from_host(AG_CPU, AG_F32, 2, (int64_t[]){big, 8}, NULL));
  assert_shape_error("ag_from_host");
  /* reshape of 12 elements to [2^62+3, 4]: the product wraps to 12. */
  ag_tensor *a = iota(1, (int64_t[]){12});
  assert_null(ag_reshape(a, 2, (int64_t[]){big + 3, 4}));
  assert_shape_error("ag_reshape");
  assert_null(ag_view(a, 2, (int64_t[]){big + 3, 4}));
  assert_shape_error("ag_view");
  assert_null(ag_reshape(a, 3, (int64_t[]){big + 3, 4, -1}));
  assert_shape_error("ag_reshape");
  ag_tensor *e0 = ag_zeros(AG_CPU, AG_F32, 1, (int64_t[]){0});
  assert_null(ag_reshape(e0, 3, (int64_t[]){0, big, 8}));
  assert_shape_error("ag_reshape");
  /* expand: stride 0 costs no memory, but numel would wrap. */
  ag_tensor *one = iota(2, (int64_t[]){1, 1});
  assert_null(ag_expand(one, 2, (int64_t[]){big, 8}));
  assert_shape_error("ag_expand");
  assert_null(ag_expand(one, 3, (int64_t[]){big, 4, 4}));
  assert_shape_error("ag_expand");
  /* shapes the core computes: broadcasting two legal expanded tensors */
  ag_tensor *c = ag_expand(one, 2, (int64_t[]){(int64_t)1 << 40, 1});
  ag_tensor *r = ag_expand(one, 2, (int64_t[]){1, (int64_t)1 << 40});
  assert_non_null(c);
  assert_non_null(r);
  assert_null(ag_add(c, r));
  assert_shape_error("too large");
  ag_tensor *c3 = ag_reshape(c, 3, (int64_t[]){(int64_t)1 << 40, 1, 1});
  ag_tensor *r3 = ag_reshape(r, 3, (int64_t[]){1, (int64_t)1 << 40, 1});
  ag_tensor *r3t = ag_transpose(r3, 1, 2);
  assert_null(ag_matmul(c3, r3t));
  assert_shape_error("too large");
  ag_tensor *half = ag_expand(one, 2, (int64_t[]){(int64_t)1 << 60, 1});
  assert_non_null(half);
  assert_null(ag_concat(8, (ag_tensor *[]){half, half, half, half, half, half, half, half}, 0));
  assert_shape_error("ag_concat");
  ag_error_clear();
  ag_tensor *ts[] = {a, e0, one, c, r, c3, r3, r3t, half};
  for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) ag_tensor_release(ts[i]);
  assert_int_equal(ag_live_tensors(), live);
}

/* Any int64 start/end/step clamps as PyTorch does: never a negative size. */
static void slice_extreme_bounds(void **state) {
  int64_t live = ag_live_tensors();
  ag_error_clear();
  ag_tensor *a = iota(1, (int64_t[]){4});
  float v[4];
  /* a[0:3:INT64_MAX] == [0] (was shape -1, numel -4) */
  ag_tensor *s = ag_slice(a, 0, 0, 3, INT64_MAX);
  assert_non_null(s);
  assert_int_equal(ag_tensor_dim(s, 0), 1);
  assert_int_equal(ag_tensor_numel(s), 1);
  assert_float_equal(ag_item(s), 0, 0);
  ag_tensor_release(s);
  struct { int64_t start, end, step, n, first; } cases[] = {
      {INT64_MIN, INT64_MAX, 1, 4, 0},       /* a[:] */
      {INT64_MIN, INT64_MAX, INT64_MAX, 1, 0},
      {1, INT64_MAX, 2, 2, 1},               /* a[1::2] */
      {-1, INT64_MAX, INT64_MAX - 1, 1, 3},  /* a[-1:] */
      {INT64_MAX, INT64_MAX, 1, 0, -1},      /* past the end */
      {INT64_MIN, INT64_MIN, 1, 0, -1},
      {3, 1, 1, 0, -1},                      /* end before start */
      {-5, -4, 1, 0, -1},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    s = ag_slice(a, 0, cases[k].start, cases[k].end, cases[k].step);
    assert_non_null(s);
    assert_int_equal(ag_tensor_dim(s, 0), cases[k].n);
    assert_int_equal(ag_tensor_numel(s), cases[k].n);
    if (cases[k].n) {
      assert_int_equal(ag_to_host(s, v, (size_t)cases[k].n * sizeof(float)), AG_OK);
      assert_float_equal(v[0], (float)cases[k].first, 0);
    }
    ag_tensor_release(s);
  }
  /* the backward of a huge-step slice puts the gradient in element 0 */
  ag_tensor *x = ag_ones(AG_CPU, AG_F32, 1, (int64_t[]){4});
  assert_int_equal(ag_tensor_set_requires_grad(x, true), AG_OK);
  ag_tensor *xs = ag_slice(x, 0, 0, 3, INT64_MAX);
  ag_tensor *l = ag_sum(xs, 0, NULL, false);
  assert_int_equal(ag_backward(l, NULL, false), AG_OK);
  assert_int_equal(ag_to_host(ag_tensor_grad(x), v, sizeof v), AG_OK);
  const float want_g[4] = {1, 0, 0, 0};
  assert_memory_equal(v, want_g, sizeof v);
  ag_tensor_release(l);
  ag_tensor_release(xs);
  ag_tensor_release(x);
  /* a slice of a huge-step slice, and unsqueeze of it, stay sane */
  s = ag_slice(a, 0, 2, INT64_MAX, INT64_MAX);
  ag_tensor *u = ag_unsqueeze(s, 1);
  assert_non_null(u);
  assert_int_equal(ag_tensor_numel(u), 1);
  assert_float_equal(ag_item(u), 2, 0);
  assert_int_equal(ag_last_status(), AG_OK);
  ag_tensor_release(u);
  ag_tensor_release(s);
  ag_tensor_release(a);
  assert_int_equal(ag_live_tensors(), live);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(view_metadata),
      cmocka_unit_test(views_share_storage),
      cmocka_unit_test(clone_copies),
      cmocka_unit_test(refcount),
      cmocka_unit_test(scopes),
      cmocka_unit_test(scopes_with_identity_results),
      cmocka_unit_test(shape_overflow_refused),
      cmocka_unit_test(slice_extreme_bounds),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
