/* Every error path of the public API: shape, dtype and device mismatches
 * with their messages, NULL propagation keeping the first message, index
 * errors found by kernels (reported at the latest by the next host sync),
 * bad device strings and absent backends. Nothing here may abort. */
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

#define assert_msg_has(s) \
  do { \
    if (!strstr(ag_last_error(), (s))) fail_msg("message '%s' lacks '%s'", ag_last_error(), (s)); \
  } while (0)

static ag_tensor *f32(int ndim, const int64_t *shape) { return ag_zeros(AG_CPU, AG_F32, ndim, shape); }

static int setup(void **state) {
  ag_scope_begin();
  ag_error_clear();
  return 0;
}
static int teardown(void **state) {
  ag_scope_end();
  return 0;
}

static void shape_mismatch(void **state) {
  ag_tensor *a = f32(2, (int64_t[]){2, 3}), *b = f32(2, (int64_t[]){4, 3});
  assert_null(ag_add(a, b));
  assert_int_equal(ag_last_status(), AG_ERR_SHAPE);
  assert_msg_has("ag_add");
  assert_msg_has("[2,3]");
  assert_msg_has("[4,3]");
  ag_tensor *m = f32(2, (int64_t[]){4, 5});
  assert_null(ag_matmul(a, m));
  assert_int_equal(ag_last_status(), AG_ERR_SHAPE);
  assert_msg_has("ag_matmul");
  int64_t bad[1] = {7};
  assert_null(ag_reshape(a, 1, bad));
  assert_int_equal(ag_last_status(), AG_ERR_SHAPE);
  ag_tensor *t = ag_transpose(a, 0, 1);
  assert_null(ag_view(t, 1, (int64_t[]){6}));
  assert_int_equal(ag_last_status(), AG_ERR_SHAPE);
  assert_null(ag_concat(2, (ag_tensor *[]){a, m}, 0));
  assert_int_equal(ag_last_status(), AG_ERR_SHAPE);
  assert_null(ag_mse_loss(a, b, AG_REDUCTION_MEAN));
  assert_int_equal(ag_last_status(), AG_ERR_SHAPE);
  ag_tensor *w = f32(1, (int64_t[]){5});
  assert_null(ag_layer_norm(a, w, NULL, 1e-5));
  assert_int_equal(ag_last_status(), AG_ERR_SHAPE);
  assert_null(ag_empty(AG_CPU, AG_F32, 1, (int64_t[]){-1}));
  assert_int_equal(ag_last_status(), AG_ERR_SHAPE);
  int64_t nine[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
  assert_null(ag_empty(AG_CPU, AG_F32, 9, nine));
  assert_int_equal(ag_last_status(), AG_ERR_SHAPE);
  assert_null(ag_softmax(a, 5));
  assert_int_not_equal(ag_last_status(), AG_OK);
  assert_null(ag_transpose(a, 0, 4));
  assert_int_not_equal(ag_last_status(), AG_OK);
}

static void dtype_mismatch(void **state) {
  int64_t s[1] = {4};
  ag_tensor *a = ag_zeros(AG_CPU, AG_F32, 1, s), *h = ag_zeros(AG_CPU, AG_F16, 1, s);
  ag_tensor *i = ag_zeros(AG_CPU, AG_I32, 1, s);
  ag_tensor *p = ag_add(a, h); /* mixed dtypes promote (PyTorch): f32 */
  assert_non_null(p);
  assert_int_equal(ag_tensor_dtype(p), AG_F32);
  assert_null(ag_exp(i));
  assert_int_equal(ag_last_status(), AG_ERR_DTYPE);
  assert_msg_has("ag_exp");
  ag_tensor *tab = ag_zeros(AG_CPU, AG_F32, 2, (int64_t[]){4, 3});
  assert_null(ag_embedding(tab, a)); /* float indices */
  assert_int_equal(ag_last_status(), AG_ERR_DTYPE);
  ag_tensor *logits = ag_zeros(AG_CPU, AG_F32, 2, (int64_t[]){4, 3});
  assert_null(ag_cross_entropy(logits, a, AG_REDUCTION_MEAN, -100)); /* float targets */
  assert_int_equal(ag_last_status(), AG_ERR_DTYPE);
  assert_null(ag_empty(AG_CPU, (ag_dtype)99, 1, s));
  assert_int_equal(ag_last_status(), AG_ERR_DTYPE);
  ag_dtype dt;
  assert_int_equal(ag_dtype_parse("f8", &dt), AG_ERR_INVALID);
}

static void null_propagation(void **state) {
  ag_tensor *a = f32(2, (int64_t[]){2, 3}), *b = f32(2, (int64_t[]){4, 3});
  ag_tensor *bad = ag_add(a, b);
  assert_null(bad);
  char first[256];
  snprintf(first, sizeof first, "%s", ag_last_error());
  /* a chain of ops on the NULL keeps the first message and status */
  ag_tensor *y = ag_sum(ag_relu(ag_mul(ag_exp(bad), a)), 0, NULL, false);
  assert_null(y);
  assert_string_equal(ag_last_error(), first);
  assert_int_equal(ag_last_status(), AG_ERR_SHAPE);
  assert_null(ag_transpose(NULL, 0, 1));
  assert_null(ag_contiguous(NULL));
  assert_null(ag_cast(NULL, AG_F16));
  assert_null(ag_concat(2, (ag_tensor *[]){a, NULL}, 0));
  assert_string_equal(ag_last_error(), first);
  assert_true(isnan(ag_item(NULL)));
  assert_int_not_equal(ag_to_host(NULL, first, 4), AG_OK);
  /* the message survives until cleared */
  ag_error_clear();
  assert_int_equal(ag_last_status(), AG_OK);
  assert_string_equal(ag_last_error(), "");
}

static void host_data_errors(void **state) {
  int64_t s[1] = {4};
  assert_null(ag_from_host(AG_CPU, AG_F32, 1, s, NULL));
  assert_int_equal(ag_last_status(), AG_ERR_INVALID);
  ag_tensor *a = ag_ones(AG_CPU, AG_F32, 1, s);
  float buf[4];
  assert_int_equal(ag_to_host(a, buf, 8), AG_ERR_INVALID);
  assert_true(isnan(ag_item(a)));
  assert_int_not_equal(ag_last_status(), AG_OK);
}

/* The error is reported by the op itself or by the next host sync; after it
 * has been reported, the stream is clean again. */
static void expect_index_error(ag_tensor *out, const char *op, const char *value) {
  if (out) {
    float buf[64];
    size_t n = (size_t)ag_tensor_numel(out) * sizeof(float);
    assert_true(n <= sizeof buf);
    ag_status st = ag_to_host(out, buf, n);
    assert_int_equal(st, AG_ERR_INDEX);
  } else {
    assert_int_equal(ag_last_status(), AG_ERR_INDEX);
  }
  assert_msg_has(op);
  assert_msg_has(value);
  ag_error_clear();
  int64_t s[1] = {3};
  ag_tensor *ok = ag_ones(AG_CPU, AG_F32, 1, s);
  float buf[3];
  assert_int_equal(ag_to_host(ok, buf, sizeof buf), AG_OK);
  assert_int_equal(ag_device_synchronize(AG_CPU), AG_OK);
}

static void index_errors(void **state) {
  ag_tensor *tab = ag_ones(AG_CPU, AG_F32, 2, (int64_t[]){10, 2});
  ag_tensor *idx = ag_from_host(AG_CPU, AG_I32, 1, (int64_t[]){3}, (int32_t[]){1, 10, 2});
  expect_index_error(ag_embedding(tab, idx), "ag_embedding", "10");
  idx = ag_from_host(AG_CPU, AG_I32, 1, (int64_t[]){2}, (int32_t[]){-1, 0});
  expect_index_error(ag_embedding(tab, idx), "ag_embedding", "-1");

  ag_tensor *logits = ag_zeros(AG_CPU, AG_F32, 2, (int64_t[]){3, 11});
  ag_tensor *tg = ag_from_host(AG_CPU, AG_I32, 1, (int64_t[]){3}, (int32_t[]){0, 11, -100});
  expect_index_error(ag_cross_entropy(logits, tg, AG_REDUCTION_NONE, -100), "ag_cross_entropy", "11");
  tg = ag_from_host(AG_CPU, AG_I32, 1, (int64_t[]){3}, (int32_t[]){0, -5, 1});
  expect_index_error(ag_cross_entropy(logits, tg, AG_REDUCTION_NONE, -100), "ag_cross_entropy", "-5");
  /* gather and index_select: an index outside the gathered dim */
  ag_tensor *x = ag_ones(AG_CPU, AG_F32, 2, (int64_t[]){2, 3});
  ag_tensor *gi = ag_from_host(AG_CPU, AG_I64, 2, (int64_t[]){2, 2}, (int64_t[]){0, 2, 3, 1});
  expect_index_error(ag_gather(x, 1, gi), "ag_gather", "3");
  gi = ag_from_host(AG_CPU, AG_I32, 1, (int64_t[]){2}, (int32_t[]){1, -2});
  expect_index_error(ag_index_select(x, 0, gi), "ag_index_select", "-2");
  /* and the core's checks */
  assert_null(ag_gather(x, 1, ag_zeros(AG_CPU, AG_I32, 2, (int64_t[]){3, 1})));
  assert_int_equal(ag_last_status(), AG_ERR_SHAPE);
  assert_null(ag_gather(x, 2, gi));
  assert_int_equal(ag_last_status(), AG_ERR_SHAPE);
  assert_null(ag_gather(x, 0, x));
  assert_int_equal(ag_last_status(), AG_ERR_DTYPE);
  assert_null(ag_index_select(x, 0, ag_zeros(AG_CPU, AG_I32, 2, (int64_t[]){1, 1})));
  assert_int_equal(ag_last_status(), AG_ERR_SHAPE);
  assert_null(ag_var(gi, 0, NULL, 1, false));
  assert_int_equal(ag_last_status(), AG_ERR_DTYPE);
  assert_null(ag_std(x, 1, (int[]){5}, 1, false));
  assert_int_equal(ag_last_status(), AG_ERR_SHAPE);
  assert_null(ag_cumsum(x, -3));
  assert_int_equal(ag_last_status(), AG_ERR_SHAPE);
  assert_null(ag_rms_norm(x, ag_ones(AG_CPU, AG_F32, 1, (int64_t[]){2}), 1e-6));
  assert_int_equal(ag_last_status(), AG_ERR_SHAPE);
  assert_null(ag_rms_norm(x, NULL, -1));
  assert_int_equal(ag_last_status(), AG_ERR_INVALID);
  ag_tensor *tv = NULL, *ti = NULL;
  assert_int_equal(ag_topk(x, 4, 1, true, &tv, &ti), AG_ERR_INVALID);
  assert_null(tv);
  assert_int_equal(ag_topk(x, -1, 1, true, &tv, &ti), AG_ERR_INVALID);
  assert_int_equal(ag_topk(x, 1, 1, true, NULL, &ti), AG_ERR_INVALID);
  assert_int_equal(ag_topk(x, 1, 2, true, &tv, &ti), AG_ERR_SHAPE);
  assert_int_equal(ag_topk(gi, 1, 0, true, &tv, &ti), AG_ERR_DTYPE);
  assert_int_equal(ag_topk(x, 3, 1, false, &tv, &ti), AG_OK);
  assert_non_null(tv);
  assert_int_equal(ag_tensor_dtype(ti), AG_I64);
  /* the ignore index itself is not an error */
  tg = ag_from_host(AG_CPU, AG_I32, 1, (int64_t[]){3}, (int32_t[]){0, -100, 1});
  ag_tensor *l = ag_cross_entropy(logits, tg, AG_REDUCTION_MEAN, -100);
  assert_non_null(l);
  assert_float_equal(ag_item(l), log(11.0), 1e-5);
}

static void device_strings(void **state) {
  ag_device d;
  const char *bad[] = {"", "gpu", "cuda:", "cuda:x", "opencl:-1", "cpu:0:1", "cpu0", " cpu", "CPU:"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    ag_error_clear();
    ag_status st = ag_device_parse(bad[i], &d);
    if (st != AG_ERR_INVALID) fail_msg("'%s' parsed with %s", bad[i], ag_status_name(st));
    assert_true(strlen(ag_last_error()) > 0);
  }
  assert_int_equal(ag_device_parse(NULL, &d), AG_ERR_INVALID);
  assert_int_equal(ag_device_parse("cpu", &d), AG_OK);
  assert_true(ag_device_eq(d, AG_CPU));
  assert_int_equal(ag_device_parse("cpu:0", &d), AG_OK);
  assert_int_equal(ag_device_parse("cpu:7", &d), AG_ERR_DEVICE);
  char buf[16];
  assert_string_equal(ag_device_str(AG_CPU, buf, sizeof buf), "cpu:0");
}

static void absent_backends(void **state) {
  int absent = 0;
  for (int k = 1; k < AG_BACKEND_COUNT; k++) {
    const char *why = NULL;
    if (ag_backend_available((ag_backend_kind)k, &why)) continue;
    absent++;
    assert_non_null(why);
    assert_true(strlen(why) > 0);
    assert_int_equal(ag_backend_device_count((ag_backend_kind)k), 0);
    char s[32];
    snprintf(s, sizeof s, "%s:0", ag_backend_name((ag_backend_kind)k));
    ag_device d;
    ag_error_clear();
    assert_int_equal(ag_device_parse(s, &d), AG_ERR_UNAVAILABLE);
    assert_msg_has(ag_backend_name((ag_backend_kind)k));
    ag_device raw = {(int16_t)k, 0};
    assert_null(ag_zeros(raw, AG_F32, 1, (int64_t[]){2}));
    assert_int_equal(ag_last_status(), AG_ERR_UNAVAILABLE);
    assert_null(ag_stream_default(raw));
    ag_device_props p;
    assert_int_not_equal(ag_device_props_get(raw, &p), AG_OK);
  }
  if (!absent) skip();
}

static void mixed_devices(void **state) {
  ag_device other = AG_CPU; /* skip() does not return, but clang cannot tell */
  if (!ag_backend_available(AG_BACKEND_OPENCL, NULL) || ag_device_parse("opencl:0", &other) != AG_OK) skip();
  int64_t s[1] = {4};
  ag_tensor *a = ag_ones(other, AG_F32, 1, s), *b = ag_ones(AG_CPU, AG_F32, 1, s);
  assert_non_null(a);
  assert_null(ag_add(a, b));
  assert_int_equal(ag_last_status(), AG_ERR_DEVICE);
  assert_msg_has("ag_add: expected all tensors on one device");
  assert_msg_has("opencl:0");
  assert_msg_has("cpu");
  assert_null(ag_matmul(b, a));
  assert_int_equal(ag_last_status(), AG_ERR_DEVICE);
}

static void scope_state(void **state) {
  /* the fixture holds one scope; close it, then one more end is an error */
  assert_int_equal(ag_scope_end(), AG_OK);
  assert_int_equal(ag_scope_end(), AG_ERR_STATE);
  ag_scope_begin();
}

/* ag_env_check reports a typo in AG_ALLOC_CONF by variable and key,
 * without opening anything; a good value passes. */
static void env_check_alloc_conf(void **state) {
  (void)state;
  const char *old = getenv("AG_ALLOC_CONF");
  char keep[256] = "";
  if (old) snprintf(keep, sizeof keep, "%s", old);
  setenv("AG_ALLOC_CONF", "expandable_segments:1,max_splt_size_mb:64", 1);
  ag_error_clear();
  assert_int_equal(ag_env_check(), AG_ERR_INVALID);
  assert_msg_has("AG_ALLOC_CONF: unknown key 'max_splt_size_mb'");
  setenv("AG_ALLOC_CONF", "expandable_segments:maybe", 1);
  assert_int_equal(ag_env_check(), AG_ERR_INVALID);
  assert_msg_has("AG_ALLOC_CONF: expandable_segments");
  setenv("AG_ALLOC_CONF", "expandable_segments:1,max_split_size_mb:64", 1);
  ag_error_clear();
  assert_int_equal(ag_env_check(), AG_OK);
  if (old)
    setenv("AG_ALLOC_CONF", keep, 1);
  else
    unsetenv("AG_ALLOC_CONF");
}

/* Reductions refuse a dim list that is not a set of dims of the tensor. */
/* argmax and max pooling save i32 indices: more elements than i32 can
 * name are refused before anything is copied or launched (expanded views of
 * one element, so nothing large is allocated). */
static void i32_index_limits(void **state) {
  (void)state;
  ag_tensor *one = ag_ones(AG_CPU, AG_F32, 1, (int64_t[]){1});
  ag_tensor *big = ag_expand(one, 1, (int64_t[]){(int64_t)INT32_MAX + 2});
  assert_non_null(big);
  ag_error_clear();
  assert_null(ag_argmax(big, 0, false));
  assert_int_equal(ag_last_status(), AG_ERR_SHAPE);
  assert_msg_has("i32");
  ag_tensor *one4 = ag_ones(AG_CPU, AG_F32, 4, (int64_t[]){1, 1, 1, 1});
  ag_tensor *plane = ag_expand(one4, 4, (int64_t[]){1, 1, 65536, 32769});
  assert_non_null(plane);
  ag_pool2d_params p = {.kernel = {2, 2}};
  ag_error_clear();
  assert_null(ag_max_pool2d(plane, &p));
  assert_int_equal(ag_last_status(), AG_ERR_SHAPE);
  assert_msg_has("i32");
  ag_tensor_release(plane);
  ag_tensor_release(one4);
  ag_tensor_release(big);
  ag_tensor_release(one);
  ag_error_clear();
}

static void reduction_dim_lists(void **state) {
  ag_tensor *a = ag_ones(AG_CPU, AG_F32, 2, (int64_t[]){2, 3});
  ag_tensor *(*fns[])(ag_tensor *, int, const int *, bool) = {ag_sum, ag_mean, ag_max, ag_min};
  for (size_t k = 0; k < sizeof fns / sizeof fns[0]; k++) {
    ag_error_clear();
    assert_null(fns[k](a, 2, (int[]){0, 0}, false)); /* repeated */
    assert_int_equal(ag_last_status(), AG_ERR_SHAPE);
    assert_msg_has("more than once");
    ag_error_clear();
    assert_null(fns[k](a, 2, (int[]){1, -1}, false)); /* the same dim twice */
    assert_int_equal(ag_last_status(), AG_ERR_SHAPE);
    ag_error_clear();
    assert_null(fns[k](a, -1, (int[]){0}, false));
    assert_int_equal(ag_last_status(), AG_ERR_SHAPE);
    ag_error_clear();
    assert_null(fns[k](a, 3, (int[]){0, 1, 0}, false));
    assert_int_equal(ag_last_status(), AG_ERR_SHAPE);
    assert_msg_has("3 dims given for a 2-d tensor");
    ag_error_clear();
    assert_null(fns[k](a, 1, (int[]){2}, false));
    assert_int_equal(ag_last_status(), AG_ERR_SHAPE);
  }
  ag_error_clear();
  ag_tensor *s = ag_sum(a, 2, (int[]){1, 0}, false); /* a set in any order is fine */
  assert_float_equal(ag_item(s), 6, 0);
  ag_tensor *m = ag_mean(a, 1, (int[]){-1}, true);
  assert_int_equal(ag_tensor_ndim(m), 2);
  assert_int_equal(ag_last_status(), AG_OK);
}

/* ag_tensor_dim out of range is an error, not a size of 0. */
static void tensor_dim_range(void **state) {
  ag_tensor *a = f32(2, (int64_t[]){2, 3});
  assert_int_equal(ag_tensor_dim(a, -2), 2);
  assert_int_equal(ag_tensor_dim(a, 1), 3);
  assert_int_equal(ag_last_status(), AG_OK);
  assert_int_equal(ag_tensor_dim(a, 5), -1);
  assert_int_equal(ag_last_status(), AG_ERR_SHAPE);
  assert_msg_has("ag_tensor_dim: dim 5 out of range for a 2-d tensor");
  ag_error_clear();
  assert_int_equal(ag_tensor_dim(a, -3), -1);
  assert_int_equal(ag_last_status(), AG_ERR_SHAPE);
  ag_error_clear();
  assert_int_equal(ag_tensor_dim(NULL, 0), -1);
  assert_int_equal(ag_last_status(), AG_ERR_INVALID);
}

/* A NULL with no error pending says which call got it; a NULL after an
 * error keeps the first message (DESIGN.md). */
static void null_without_pending_error(void **state) {
  ag_tensor *a = f32(2, (int64_t[]){2, 3});
#define NULL_CASE(call, fn) \
  do { \
    ag_error_clear(); \
    assert_null(call); \
    assert_int_equal(ag_last_status(), AG_ERR_INVALID); \
    assert_msg_has(fn ": NULL tensor"); \
  } while (0)
  NULL_CASE(ag_reshape(NULL, 1, (int64_t[]){6}), "ag_reshape");
  NULL_CASE(ag_view(NULL, 1, (int64_t[]){6}), "ag_view");
  NULL_CASE(ag_cast(NULL, AG_F16), "ag_cast");
  NULL_CASE(ag_flatten(NULL), "ag_flatten");
  NULL_CASE(ag_transpose(NULL, 0, 1), "ag_transpose");
  NULL_CASE(ag_permute(NULL, (int[]){1, 0}), "ag_permute");
  NULL_CASE(ag_slice(NULL, 0, 0, 1, 1), "ag_slice");
  NULL_CASE(ag_expand(NULL, 1, (int64_t[]){3}), "ag_expand");
  NULL_CASE(ag_unsqueeze(NULL, 0), "ag_unsqueeze");
  NULL_CASE(ag_squeeze(NULL, 0), "ag_squeeze");
  NULL_CASE(ag_contiguous(NULL), "ag_contiguous");
  NULL_CASE(ag_to_device(NULL, AG_CPU), "ag_to_device");
  NULL_CASE(ag_empty_like(NULL), "ag_empty_like");
  NULL_CASE(ag_zeros_like(NULL), "ag_zeros_like");
  NULL_CASE(ag_detach(NULL), "ag_detach");
  NULL_CASE(ag_activation_forward(AG_ACT_RELU, NULL), "ag_activation_forward");
  NULL_CASE(ag_dropout_forward(0.5, NULL, true, NULL), "ag_dropout_forward");
  ag_linear lin;
  assert_int_equal(ag_linear_init(&lin, AG_CPU, AG_F32, 3, 2, true, NULL), AG_OK);
  NULL_CASE(ag_linear_forward(&lin, NULL), "ag_linear_forward");
  ag_linear_free(&lin);
#undef NULL_CASE
  /* a pending error is kept */
  assert_null(ag_reshape(a, 1, (int64_t[]){7}));
  char first[256];
  snprintf(first, sizeof first, "%s", ag_last_error());
  assert_null(ag_cast(ag_reshape(NULL, 1, (int64_t[]){6}), AG_F16));
  assert_string_equal(ag_last_error(), first);
  assert_int_equal(ag_last_status(), AG_ERR_SHAPE);
}

/* Copying into a view whose elements overlap (stride 0) is refused; filling
 * it is well defined and allowed. */
static void copy_into_expanded_view(void **state) {
  ag_tensor *base = ag_zeros(AG_CPU, AG_F32, 2, (int64_t[]){1, 3});
  ag_tensor *e = ag_expand(base, 2, (int64_t[]){4, 3});
  ag_tensor *src = ag_arange(AG_CPU, AG_F32, 0, 12, 1);
  ag_tensor *src2 = ag_reshape(src, 2, (int64_t[]){4, 3});
  assert_int_equal(ag_copy_(e, src2), AG_ERR_INVALID);
  assert_msg_has("overlapping");
  float v[3];
  assert_int_equal(ag_to_host(base, v, sizeof v), AG_OK);
  for (int i = 0; i < 3; i++) assert_float_equal(v[i], 0, 0); /* untouched */
  ag_error_clear();
  assert_int_equal(ag_fill_(e, 2), AG_OK);
  /* a size-1 dim may have any stride, stride 0 included */
  ag_tensor *row = ag_expand(base, 2, (int64_t[]){1, 3});
  assert_int_equal(ag_copy_(row, ag_slice(src2, 0, 1, 2, 1)), AG_OK);
  assert_int_equal(ag_to_host(base, v, sizeof v), AG_OK);
  assert_float_equal(v[2], 5, 0);
}

/* AG_SYNC_DEBUG=bogus (run as its own ctest case with that environment):
 * like a bad AG_ALLOC_CONF, no device opens and the error names the
 * variable. */
static void sync_debug_env_strict(void **state) {
  ag_tensor *t = ag_zeros(AG_CPU, AG_F32, 1, (int64_t[]){2});
  assert_null(t);
  assert_int_equal(ag_last_status(), AG_ERR_INVALID);
  assert_msg_has("AG_SYNC_DEBUG='bogus' is not off, warn or error");
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "sync-debug-env")) {
    const struct CMUnitTest env_tests[] = {cmocka_unit_test(sync_debug_env_strict)};
    return cmocka_run_group_tests(env_tests, NULL, NULL);
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(shape_mismatch, setup, teardown),
      cmocka_unit_test_setup_teardown(dtype_mismatch, setup, teardown),
      cmocka_unit_test_setup_teardown(null_propagation, setup, teardown),
      cmocka_unit_test_setup_teardown(host_data_errors, setup, teardown),
      cmocka_unit_test_setup_teardown(index_errors, setup, teardown),
      cmocka_unit_test_setup_teardown(device_strings, setup, teardown),
      cmocka_unit_test_setup_teardown(absent_backends, setup, teardown),
      cmocka_unit_test_setup_teardown(mixed_devices, setup, teardown),
      cmocka_unit_test_setup_teardown(scope_state, setup, teardown),
      cmocka_unit_test_setup_teardown(reduction_dim_lists, setup, teardown),
      cmocka_unit_test_setup_teardown(i32_index_limits, setup, teardown),
      cmocka_unit_test_setup_teardown(tensor_dim_range, setup, teardown),
      cmocka_unit_test_setup_teardown(null_without_pending_error, setup, teardown),
      cmocka_unit_test_setup_teardown(copy_into_expanded_view, setup, teardown),
      cmocka_unit_test_setup_teardown(env_check_alloc_conf, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
