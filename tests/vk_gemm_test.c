/* Matmul on vulkan:0 through the register-blocked GEMM (gemm_tiled.comp)
 * and its load paths: f32 and f16 inputs, A and B row- or column-major
 * (transposed views, vec4 loads along k, m or n), shapes with partial
 * tiles on every edge (the scalar bounds-checked path), a view whose
 * offset and strides are not multiples of 4 elements (scalar loads),
 * batched products with B shared across the batch, and inner
 * dimensions of several K slices up to 70000. The inputs are multiples of 1/8 in
 * [-1, 1], so every sum is exact in f32 whatever its order: the result
 * must equal the CPU's bit for bit. tests/vk_gemm.cmake runs it with the
 * default tile and with other tiles (AG_VULKAN_TEST=gemm_tile:CFG, the
 * specialization constant). Skips (77) without vulkan:0. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "anygrad/anygrad.h"

static ag_device VK, CPU;

/* n values, multiples of 1/8 in [-1, 1] */
static ag_tensor *input(ag_device d, ag_dtype dt, int ndim, const int64_t *shape, int seed) {
  int64_t n = 1;
  for (int i = 0; i < ndim; i++) n *= shape[i];
  float *h = malloc((size_t)n * sizeof *h);
  assert_non_null(h);
  for (int64_t i = 0; i < n; i++) h[i] = (float)((i * 7919 + seed * 31) % 17 - 8) / 8.0f;
  ag_tensor *f = ag_from_host(d, AG_F32, ndim, shape, h);
  free(h);
  assert_non_null(f);
  ag_tensor *t = dt == AG_F32 ? f : ag_cast(f, dt);
  assert_non_null(t);
  return t;
}

/* a (maybe a view of) on vulkan:0 and b likewise: the product must equal
 * the CPU's of the same values, every element */
static void expect_cpu(ag_tensor *a, ag_tensor *b, const char *what) {
  ag_tensor *c = ag_matmul(a, b);
  if (!c) fail_msg("%s: %s", what, ag_last_error());
  ag_tensor *ac = ag_cast(ag_to_device(a, CPU), AG_F32), *bc = ag_cast(ag_to_device(b, CPU), AG_F32);
  ag_tensor *ref = ag_cast(ag_matmul(ac, bc), ag_tensor_dtype(c));
  ag_tensor *got = ag_to_device(c, CPU);
  assert_non_null(ref);
  assert_non_null(got);
  ref = ag_cast(ref, AG_F32);
  got = ag_cast(got, AG_F32);
  int64_t n = ag_tensor_numel(got);
  assert_int_equal(n, ag_tensor_numel(ref));
  float *r = malloc((size_t)n * sizeof *r), *g = malloc((size_t)n * sizeof *g);
  assert_non_null(r);
  assert_non_null(g);
  assert_int_equal(ag_to_host(ref, r, (size_t)n * sizeof *r), AG_OK);
  assert_int_equal(ag_to_host(got, g, (size_t)n * sizeof *g), AG_OK);
  for (int64_t i = 0; i < n; i++)
    if (memcmp(&r[i], &g[i], sizeof r[i]) != 0) {
      float ri = r[i], gi = g[i];
      free(r);
      free(g);
      fail_msg("%s: element %lld is %.9g, the CPU's %.9g", what, (long long)i, (double)gi, (double)ri);
    }
  free(r);
  free(g);
}

/* (M, K, N): whole tiles, partial tiles on each edge, a row, a column,
 * K of several slices and not a multiple of 4 */
static const int64_t k_shapes[][3] = {{64, 64, 64}, {128, 48, 192}, {130, 70, 67}, {1, 300, 5},
                                      {67, 1, 129}, {5, 257, 1},    {96, 33, 100}, {16, 70000, 20}};

static void layouts(ag_dtype dt) {
  char what[96];
  for (size_t s = 0; s < sizeof k_shapes / sizeof k_shapes[0]; s++) {
    int64_t M = k_shapes[s][0], K = k_shapes[s][1], N = k_shapes[s][2];
    for (int ta = 0; ta < 2; ta++)
      for (int tb = 0; tb < 2; tb++) {
        ag_scope_begin();
        /* a transposed operand is a view of the transposed storage */
        int64_t sa[2] = {ta ? K : M, ta ? M : K}, sb[2] = {tb ? N : K, tb ? K : N};
        ag_tensor *a = input(VK, dt, 2, sa, 1), *b = input(VK, dt, 2, sb, 2);
        if (ta) a = ag_transpose(a, 0, 1);
        if (tb) b = ag_transpose(b, 0, 1);
        snprintf(what, sizeof what, "%s %lldx%lldx%lld %s%s", ag_dtype_name(dt), (long long)M, (long long)K,
                 (long long)N, ta ? "t" : "n", tb ? "t" : "n");
        expect_cpu(a, b, what);
        assert_int_equal(ag_scope_end(), AG_OK);
      }
  }
}

static void test_f32_layouts(void **state) {
  (void)state;
  layouts(AG_F32);
}

static void test_f16_layouts(void **state) {
  (void)state;
  layouts(AG_F16);
}

/* offsets and strides that are not multiples of 4 elements: the scalar loads */
static void test_unaligned_views(void **state) {
  (void)state;
  ag_dtype dts[2] = {AG_F32, AG_F16};
  for (int i = 0; i < 2; i++) {
    ag_scope_begin();
    int64_t sa[2] = {100, 131}, sb[2] = {130, 75};
    ag_tensor *a = ag_slice(input(VK, dts[i], 2, sa, 3), 1, 1, 131, 1); /* [100, 130], row stride 131 */
    ag_tensor *b = ag_slice(input(VK, dts[i], 2, sb, 4), 1, 3, 75, 1);  /* [130, 72], offset 3 */
    expect_cpu(a, b, dts[i] == AG_F32 ? "f32 unaligned" : "f16 unaligned");
    assert_int_equal(ag_scope_end(), AG_OK);
  }
}

/* [3, M, K] @ [K, N] (B shared: batch stride 0) and [3, M, K] @ [3, K, N] */
static void test_batched(void **state) {
  (void)state;
  ag_dtype dts[2] = {AG_F32, AG_F16};
  for (int i = 0; i < 2; i++) {
    ag_scope_begin();
    int64_t sa[3] = {3, 70, 36}, sb2[2] = {36, 68}, sb3[3] = {3, 36, 68};
    ag_tensor *a = input(VK, dts[i], 3, sa, 5);
    expect_cpu(a, input(VK, dts[i], 2, sb2, 6), "batched, B shared");
    expect_cpu(a, input(VK, dts[i], 3, sb3, 7), "batched");
    assert_int_equal(ag_scope_end(), AG_OK);
  }
}

/* K = 70000: more K slices than lavapipe's 65535 back-edges would allow
 * with a loop inside each slice */
static void test_long_k(void **state) {
  (void)state;
  ag_scope_begin();
  int64_t sa[2] = {16, 70000}, sb[2] = {70000, 20}, sbt[2] = {20, 70000};
  expect_cpu(input(VK, AG_F32, 2, sa, 8), input(VK, AG_F32, 2, sb, 9), "f32 K 70000");
  expect_cpu(input(VK, AG_F16, 2, sa, 10), ag_transpose(input(VK, AG_F16, 2, sbt, 11), 0, 1), "f16 K 70000 nt");
  assert_int_equal(ag_scope_end(), AG_OK);
}

int main(void) {
  ag_backend_kind k;
  if (ag_backend_find("vulkan", &k) != AG_OK || !ag_backend_available(k, NULL) ||
      ag_device_parse("vulkan:0", &VK) != AG_OK) {
    printf("vulkan:0 unavailable: skipped\n");
    return 77;
  }
  if (ag_device_parse("cpu", &CPU) != AG_OK) return 1;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_f32_layouts),
      cmocka_unit_test(test_f16_layouts),
      cmocka_unit_test(test_unaligned_views),
      cmocka_unit_test(test_batched),
      cmocka_unit_test(test_long_k),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
