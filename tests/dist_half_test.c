/* f16/bf16 sums on the collectives' device path (core/dist/group.c): a
 * test-only implementation that takes device buffers and reduces in the
 * dtype it is handed, as NCCL does, standing for `RANKS` ranks that all
 * contribute this rank's tensor. Handed f16/bf16 it rounds at every step and
 * the sum visibly drifts; the group must hand it f32 (a cast on the comm
 * stream into the caching allocator, then back), so the result equals the
 * in-process path's: the exact sum rounded once. AG_DIST_HALF_REDUCE=native
 * keeps halves on the wire; an implementation without native_half (CUDA-aware
 * MPI) gets every half collective as f32. Runs on the CPU device with device buffers
 * forced on (ag__group_create_with_module), linked statically for that. */
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
#include "anygrad/backend.h"
#include "dist/dist_internal.h"

#define RANKS 64
#define N 1000

/* ---- the implementation ---- */

struct ag_dist_impl {
  int runs;
  bool half; /* takes f16/bf16 (NCCL); else refuses them (CUDA-aware MPI) */
};

static ag_dtype g_seen = AG_F32; /* the dtype of the last reduction handed over */

static bool f_probe(char *why, size_t n) {
  snprintf(why, n, "test");
  return true;
}

static ag_status f_create(ag_dist_create_args *a, ag_dist_impl **out, ag_dist_caps *caps) {
  *out = calloc(1, sizeof **out);
  if (!*out) return ag_error_set(AG_ERR_OOM, "fake: out of memory");
  a->rank = 0;
  a->size = 1;
  (*out)->half = true;
  *caps = (ag_dist_caps){.device_buffers = true, .native_avg = true, .native_half = true};
  return AG_OK;
}

static ag_status f_create_nohalf(ag_dist_create_args *a, ag_dist_impl **out, ag_dist_caps *caps) {
  ag_status st = f_create(a, out, caps);
  if (st == AG_OK) {
    (*out)->half = false;
    caps->native_half = false;
  }
  return st;
}

static float load(ag_dtype dt, const void *p, size_t i) {
  if (dt == AG_F16) return ag_f16_to_f32(((const uint16_t *)p)[i]);
  if (dt == AG_BF16) return ag_bf16_to_f32(((const uint16_t *)p)[i]);
  return ((const float *)p)[i];
}

/* Stores v rounded to dt; returns the rounded value. */
static float store(ag_dtype dt, void *p, size_t i, float v) {
  if (dt == AG_F16) {
    ((uint16_t *)p)[i] = ag_f32_to_f16(v);
    return ag_f16_to_f32(((uint16_t *)p)[i]);
  }
  if (dt == AG_BF16) {
    ((uint16_t *)p)[i] = ag_f32_to_bf16(v);
    return ag_bf16_to_f32(((uint16_t *)p)[i]);
  }
  ((float *)p)[i] = v;
  return v;
}

/* RANKS copies of buf summed one step at a time in c->dtype (a ring's
 * order), into buf (all-reduce) or out (reduce-scatter of one rank). */
static ag_status f_run(ag_dist_impl *im, const ag_coll *c, int64_t deadline_ns) {
  (void)deadline_ns;
  im->runs++;
  if (c->kind == AG_COLL_BARRIER) return AG_OK;
  g_seen = c->dtype;
  if (!im->half && (c->dtype == AG_F16 || c->dtype == AG_BF16))
    return ag_error_set(AG_ERR_DTYPE, "fake: dtype %d reaches it unconverted", (int)c->dtype);
  if (c->kind == AG_COLL_BROADCAST) return AG_OK; /* one rank: the root's data stays */
  if (c->kind == AG_COLL_ALL_GATHER) {
    memcpy(c->out, c->buf, c->count * ag_dtype_size(c->dtype));
    return AG_OK;
  }
  void *dst = c->kind == AG_COLL_ALL_REDUCE ? c->buf : c->out;
  for (size_t i = 0; i < c->count; i++) {
    float x = load(c->dtype, c->buf, i), acc = x, tmp;
    /* max and min of equal contributions: the value itself */
    for (int k = 1; k < RANKS && (c->op == AG_DIST_SUM || c->op == AG_DIST_AVG); k++)
      acc = store(c->dtype, &tmp, 0, acc + x);
    if (c->op == AG_DIST_AVG) acc = acc / RANKS;
    store(c->dtype, dst, i, acc);
  }
  return AG_OK;
}

static void f_abort(ag_dist_impl *im, ag_status st, const char *why) {
  (void)im;
  (void)st;
  (void)why;
}
static void f_destroy(ag_dist_impl *im) { free(im); }

static const ag_dist_module k_fake = {.abi = AG_DIST_MODULE_ABI, .name = "half-test", .probe = f_probe,
                                      .create = f_create, .run = f_run, .abort = f_abort, .destroy = f_destroy};
static const ag_dist_module k_fake_nohalf = {.abi = AG_DIST_MODULE_ABI, .name = "nohalf-test", .probe = f_probe,
                                             .create = f_create_nohalf, .run = f_run, .abort = f_abort,
                                             .destroy = f_destroy};

/* ---- checks ---- */

static float value(int i) { return 0.1f + 0.01f * (float)(i % 37); }

/* The in-process path's answer: the exact sum of RANKS copies of the
 * rounded input, rounded once (the average divides it first). */
static float reference(ag_dtype dt, int i, bool avg) {
  float h;
  double x = store(dt, &h, 0, value(i));
  double s = x * RANKS;
  if (avg) s /= RANKS;
  return store(dt, &h, 0, (float)s);
}

static ag_group *make_group(void) {
  ag_dist_create_args a = {0};
  ag_group *g = NULL;
  ag_status st = ag__group_create_with_module(&k_fake, AG_CPU, 20000, &a, &g);
  if (st != AG_OK) fail_msg("group: %s", ag_last_error());
  return g;
}

static ag_tensor *input(ag_dtype dt, int64_t n) {
  float *v = malloc(sizeof(float) * (size_t)n);
  for (int64_t i = 0; i < n; i++) v[i] = value((int)i);
  ag_tensor *f = ag_from_host(AG_CPU, AG_F32, 1, &n, v);
  free(v);
  assert_non_null(f);
  ag_tensor *t = ag_cast(f, dt);
  assert_non_null(t);
  ag_tensor_release(f);
  return t;
}

/* mismatches of t (dtype dt) against the reference */
static int mismatches(ag_tensor *t, ag_dtype dt, bool avg, float *worst) {
  ag_tensor *f = ag_cast(t, AG_F32);
  assert_non_null(f);
  int64_t n = ag_tensor_numel(f);
  float *v = malloc(sizeof(float) * (size_t)n);
  assert_int_equal(ag_to_host(f, v, sizeof(float) * (size_t)n), AG_OK);
  int bad = 0;
  *worst = 0;
  for (int64_t i = 0; i < n; i++) {
    float r = reference(dt, (int)i, avg), e = fabsf(v[i] - r) / r;
    if (v[i] != r) bad++;
    if (e > *worst) *worst = e;
  }
  free(v);
  ag_tensor_release(f);
  return bad;
}

static void sums_in_f32(void **state) {
  (void)state;
  ag_group *g = make_group();
  static const ag_dtype dts[] = {AG_F16, AG_BF16};
  for (int d = 0; d < 2; d++) {
    ag_dtype dt = dts[d];
    for (int avg = 0; avg < 2; avg++) {
      ag_tensor *t = input(dt, N);
      assert_int_equal(ag_memory_reset_peak(AG_CPU), AG_OK);
      ag_work *w = NULL;
      if (ag_all_reduce(g, t, avg ? AG_DIST_AVG : AG_DIST_SUM, &w) != AG_OK) fail_msg("%s", ag_last_error());
      assert_int_equal(ag_work_wait(w), AG_OK);
      ag_work_release(w);
      assert_int_equal(g_seen, AG_F32);
      float worst;
      int bad = mismatches(t, dt, avg, &worst);
      if (bad) fail_msg("%s %s: %d of %d differ from the sum rounded once (worst %.3g)", ag_dtype_name(dt),
                        avg ? "avg" : "sum", bad, N, worst);
      /* the widened copy came from the caching allocator */
      ag_memory_stats ms;
      assert_int_equal(ag_memory_stats_get(AG_CPU, &ms), AG_OK);
      assert_true(ms.category_bytes[AG_MEM_STAGING].peak >= (int64_t)(N * sizeof(float)));
      ag_tensor_release(t);
    }
    /* reduce-scatter of a one-rank group: out is the widened sum narrowed */
    int64_t n = N;
    ag_tensor *in = input(dt, n), *out = ag_zeros(AG_CPU, dt, 1, &n);
    assert_non_null(out);
    if (ag_reduce_scatter(g, in, out, AG_DIST_SUM, NULL) != AG_OK) fail_msg("%s", ag_last_error());
    assert_int_equal(g_seen, AG_F32);
    float worst;
    int bad = mismatches(out, dt, false, &worst);
    if (bad) fail_msg("reduce-scatter %s: %d of %d differ (worst %.3g)", ag_dtype_name(dt), bad, N, worst);
    ag_tensor_release(in);
    ag_tensor_release(out);
  }
  /* max is exact in any dtype: handed over as is */
  ag_tensor *t = input(AG_F16, N);
  assert_int_equal(ag_all_reduce(g, t, AG_DIST_MAX, NULL), AG_OK);
  assert_int_equal(g_seen, AG_F16);
  ag_tensor_release(t);
  ag_group_destroy(g);
}

/* The switch: halves stay halves, and the sum drifts as a ring's would
 * (so the test above can fail). */
static void native_halves(void **state) {
  (void)state;
  setenv("AG_DIST_HALF_REDUCE", "native", 1);
  ag_group *g = make_group();
  unsetenv("AG_DIST_HALF_REDUCE");
  ag_tensor *t = input(AG_F16, N);
  assert_int_equal(ag_all_reduce(g, t, AG_DIST_SUM, NULL), AG_OK);
  assert_int_equal(g_seen, AG_F16);
  float worst;
  int bad = mismatches(t, AG_F16, false, &worst);
  printf("f16 summed in f16 over %d ranks: %d of %d elements off, worst relative error %.3g\n", RANKS, bad, N,
         worst);
  assert_true(bad > N / 2);
  ag_tensor_release(t);
  ag_group_destroy(g);
  /* a value that is neither: refused by name */
  setenv("AG_DIST_HALF_REDUCE", "f16", 1);
  ag_dist_create_args a = {0};
  ag_group *bad_g = NULL;
  assert_int_equal(ag__group_create_with_module(&k_fake, AG_CPU, 20000, &a, &bad_g), AG_ERR_INVALID);
  assert_non_null(strstr(ag_last_error(), "AG_DIST_HALF_REDUCE"));
  unsetenv("AG_DIST_HALF_REDUCE");
}

/* An implementation without native_half (CUDA-aware MPI) gets every
 * f16/bf16 collective as f32, the switch notwithstanding; moves are exact. */
static void no_native_half(void **state) {
  (void)state;
  setenv("AG_DIST_HALF_REDUCE", "native", 1);
  ag_dist_create_args a = {0};
  ag_group *g = NULL;
  if (ag__group_create_with_module(&k_fake_nohalf, AG_CPU, 20000, &a, &g) != AG_OK) fail_msg("%s", ag_last_error());
  unsetenv("AG_DIST_HALF_REDUCE");
  int64_t n = N;
  ag_tensor *t = input(AG_BF16, N), *out = ag_zeros(AG_CPU, AG_BF16, 1, &n);
  assert_non_null(out);
  if (ag_broadcast(g, t, 0, NULL) != AG_OK) fail_msg("%s", ag_last_error());
  assert_int_equal(g_seen, AG_F32);
  if (ag_all_gather(g, t, out, NULL) != AG_OK) fail_msg("%s", ag_last_error());
  assert_int_equal(g_seen, AG_F32);
  assert_int_equal(ag_all_reduce(g, t, AG_DIST_MAX, NULL), AG_OK);
  assert_int_equal(g_seen, AG_F32);
  float a0[N], b0[N];
  ag_tensor *ta = ag_cast(t, AG_F32), *tb = ag_cast(out, AG_F32);
  assert_int_equal(ag_to_host(ta, a0, sizeof a0), AG_OK);
  assert_int_equal(ag_to_host(tb, b0, sizeof b0), AG_OK);
  for (int i = 0; i < N; i++) {
    uint16_t h = ag_f32_to_bf16(value(i));
    assert_float_equal(a0[i], ag_bf16_to_f32(h), 0);
    assert_float_equal(b0[i], a0[i], 0);
  }
  ag_tensor_release(ta);
  ag_tensor_release(tb);
  ag_tensor_release(t);
  ag_tensor_release(out);
  ag_group_destroy(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(sums_in_f32), cmocka_unit_test(native_halves),
                                     cmocka_unit_test(no_native_half)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
