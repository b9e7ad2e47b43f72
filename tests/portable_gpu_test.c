/* The GPU kernels' portable numerics (kernels/gpu/portable.cu, docs/numerics.md)
 * on gpuemu:0 (warp 32) and gpuemu:1 (warp 64) against the CPU backend, bit
 * for bit (NaN equals NaN, signed zeros differ), through the public API in
 * portable mode: sums of 1, 255, 256, 257 and 70000 elements (one, two and
 * three levels of the canonical sum), max and min whose result is a zero
 * held with both signs, rows of 1, 257 and 5000 (softmax, log-softmax,
 * log-sum-exp, layer and RMS norm, cross-entropy, var and cumsum along
 * either dim, each with its backward), matmul shapes around the 16-wide
 * tiles, the elementwise table, random numbers and arange, in f32, f16 and
 * bf16; convolution (padding, stride, dilation, groups; a weight gradient
 * summed over 600 terms) and max, average and adaptive pooling with their
 * gradients in f32. A cell the CPU refuses (its portable list lacks it) is
 * reported and skipped; one the emulated GPU refuses fails.
 *   portable_gpu_test (AG_BACKEND_PATH names the gpuemu module's folder) */
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

#define MAX_OUT 4

static const ag_dtype g_dtypes[] = {AG_F32, AG_F16, AG_BF16};
static int g_skipped, g_cells;

/* deterministic inputs in [lo, hi), a few exact zeros and negative zeros */
static float *gen(int64_t n, uint32_t seed, float lo, float hi) {
  float *v = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
  assert_non_null(v);
  uint32_t r = seed * 2654435761u + 12345u;
  for (int64_t i = 0; i < n; i++) {
    r ^= r << 13;
    r ^= r >> 17;
    r ^= r << 5;
    v[i] = lo + (hi - lo) * (float)(r >> 8) * (1.0f / 16777216.0f);
    if (i % 97 == 13) v[i] = 0.0f;
    if (i % 101 == 7) v[i] = -0.0f;
  }
  return v;
}

static ag_tensor *upload(ag_device d, ag_dtype dt, int ndim, const int64_t *shape, const float *v) {
  ag_tensor *t = ag_from_host(d, AG_F32, ndim, shape, v);
  if (!t || dt == AG_F32) return t;
  return ag_cast(t, dt);
}
static ag_tensor *input(ag_device d, ag_dtype dt, int ndim, const int64_t *shape, uint32_t seed, float lo, float hi,
                        bool grad) {
  int64_t n = 1;
  for (int i = 0; i < ndim; i++) n *= shape[i];
  float *v = gen(n, seed, lo, hi);
  ag_tensor *t = upload(d, dt, ndim, shape, v);
  free(v);
  if (t && grad) assert_int_equal(ag_tensor_set_requires_grad(t, true), AG_OK);
  return t;
}
/* sum(y * w) with a fixed w: the backward's incoming gradient is w */
static ag_tensor *weighted(ag_tensor *y, uint32_t seed) {
  if (!y) return NULL;
  ag_tensor *w = input(ag_tensor_device(y), ag_tensor_dtype(y), ag_tensor_ndim(y), ag_tensor_shape(y), seed, -1, 1,
                       false);
  return ag_sum(ag_mul(y, w), 0, NULL, false);
}

typedef enum {
  C_SUM,
  C_SUM_DIM0,
  C_MEAN_DIM1,
  C_SOFTMAX,
  C_LOG_SOFTMAX,
  C_LOGSUMEXP,
  C_LAYERNORM,
  C_RMSNORM,
  C_XENT,
  C_MATMUL,
  C_UNARY,
  C_BINARY,
  C_RANDOM,
  C_ARANGE,
  C_CONV,
  C_POOL,
  C_MAXMIN,
  C_VAR,
  C_COUNT
} case_kind;
static const char *const g_case_names[C_COUNT] = {"sum",       "sum_dim0",  "mean_dim1", "softmax", "log_softmax",
                                                  "logsumexp", "layernorm", "rmsnorm",   "xent",    "matmul",
                                                  "unary",     "binary",    "random",    "arange",
                                                  "conv2d",    "pool2d",    "maxmin",    "var_cumsum"};

/* Runs case k with size n on d; out[] gets up to MAX_OUT result tensors
 * (f32 after an exact cast). Returns how many, or -1 with the error set. */
static int run_case(case_kind k, ag_device d, ag_dtype dt, int64_t n, int sub, ag_tensor **out) {
  int m = 0;
  switch (k) {
    case C_SUM: {
      ag_tensor *x = input(d, dt, 1, &n, 1, -2, 2, false);
      out[m++] = ag_sum(x, 0, NULL, false);
      break;
    }
    case C_SUM_DIM0: {
      int64_t sh[2] = {n, 3};
      int dim = 0;
      ag_tensor *x = input(d, dt, 2, sh, 2, -2, 2, false);
      out[m++] = ag_sum(x, 1, &dim, false);
      break;
    }
    case C_MEAN_DIM1: {
      int64_t sh[2] = {2, n};
      int dim = 1;
      ag_tensor *x = input(d, dt, 2, sh, 3, -2, 2, false);
      out[m++] = ag_mean(x, 1, &dim, false);
      break;
    }
    case C_SOFTMAX:
    case C_LOG_SOFTMAX:
    case C_LOGSUMEXP: {
      int64_t sh[2] = {3, n};
      ag_tensor *x = input(d, dt, 2, sh, 4, -6, 6, true);
      ag_tensor *y = k == C_SOFTMAX ? ag_softmax(x, 1) : k == C_LOG_SOFTMAX ? ag_log_softmax(x, 1) : ag_logsumexp(x, 1, false);
      out[m++] = y;
      if (ag_backward(weighted(y, 5), NULL, false) != AG_OK) return -1;
      out[m++] = ag_tensor_grad(x);
      break;
    }
    case C_LAYERNORM:
    case C_RMSNORM: {
      int64_t sh[2] = {3, n};
      ag_tensor *x = input(d, dt, 2, sh, 6, -3, 5, true);
      ag_tensor *w = input(d, dt, 1, &n, 7, 0.5f, 1.5f, true);
      ag_tensor *b = k == C_LAYERNORM ? input(d, dt, 1, &n, 8, -1, 1, true) : NULL;
      ag_tensor *y = k == C_LAYERNORM ? ag_layer_norm(x, w, b, 1e-5) : ag_rms_norm(x, w, 1e-6);
      out[m++] = y;
      if (ag_backward(weighted(y, 9), NULL, false) != AG_OK) return -1;
      out[m++] = ag_tensor_grad(x);
      out[m++] = ag_tensor_grad(w);
      if (b) out[m++] = ag_tensor_grad(b);
      break;
    }
    case C_XENT: {
      int64_t sh[2] = {4, n}, rows = 4;
      int32_t tg[4] = {0, (int32_t)(n - 1), -100, (int32_t)(n / 2)};
      ag_tensor *x = input(d, dt, 2, sh, 10, -5, 5, true);
      ag_tensor *t = ag_from_host(d, AG_I32, 1, &rows, tg);
      ag_tensor *l = ag_cross_entropy(x, t, AG_REDUCTION_NONE, -100);
      out[m++] = l;
      if (ag_backward(weighted(l, 11), NULL, false) != AG_OK) return -1;
      out[m++] = ag_tensor_grad(x);
      break;
    }
    case C_MATMUL: {
      /* [M, K] @ [K, N] with M, K, N from n and sub */
      int64_t M = sub == 0 ? 1 : sub == 1 ? 17 : 33, K = n, N = sub == 0 ? 1 : sub == 1 ? 9 : 16;
      int64_t sa[2] = {M, K}, sb[2] = {K, N};
      ag_tensor *a = input(d, dt, 2, sa, 12, -1, 1, true);
      ag_tensor *b = input(d, dt, 2, sb, 13, -1, 1, true);
      ag_tensor *c = ag_matmul(a, b);
      out[m++] = c;
      if (ag_backward(weighted(c, 14), NULL, false) != AG_OK) return -1;
      out[m++] = ag_tensor_grad(a);
      out[m++] = ag_tensor_grad(b);
      break;
    }
    case C_UNARY: {
      ag_tensor *x = input(d, dt, 1, &n, 15, -4, 4, true);
      ag_tensor *y;
      switch (sub) {
        case 0: y = ag_exp(x); break;
        case 1: y = ag_gelu(x); break;
        case 2: y = ag_tanh(x); break;
        case 3: y = ag_sigmoid(ag_sin(x)); break;
        default: y = ag_log1p(ag_abs(x)); break;
      }
      out[m++] = y;
      if (ag_backward(weighted(y, 16), NULL, false) != AG_OK) return -1;
      out[m++] = ag_tensor_grad(x);
      break;
    }
    case C_BINARY: {
      ag_tensor *a = input(d, dt, 1, &n, 17, -3, 3, true);
      ag_tensor *b = input(d, dt, 1, &n, 18, 0.5f, 3, true);
      ag_tensor *y = sub == 0 ? ag_div(a, b) : ag_atan2(a, b);
      out[m++] = y;
      if (ag_backward(weighted(y, 19), NULL, false) != AG_OK) return -1;
      out[m++] = ag_tensor_grad(a);
      out[m++] = ag_tensor_grad(b);
      break;
    }
    case C_RANDOM: {
      ag_generator *g = ag_generator_create(1234);
      out[m++] = ag_rand(d, dt, 1, &n, -1.5, 2.5, g);
      out[m++] = ag_randn(d, dt, 1, &n, 0.25, 3.0, g);
      ag_generator_free(g);
      break;
    }
    case C_ARANGE:
      out[m++] = ag_arange(d, dt, -3.25, -3.25 + 0.1 * (double)n, 0.1);
      break;
    case C_CONV: {
      /* sub 0: 3x3, padding 1; 1: stride 2, dilation 2, padding 2, 2 groups;
       * 2: 1x1 over a plane of n (the weight gradient's S over 2n terms) */
      int64_t side = sub == 2 ? n : 9 + n % 7;
      int64_t sx[4] = {2, 4, sub == 2 ? 1 : side, side};
      int64_t sw[4] = {6, sub == 1 ? 2 : 4, sub == 2 ? 1 : 3, sub == 2 ? 1 : 3}, sb = 6;
      ag_conv2d_params prm = {{1, 1}, {1, 1}, {1, 1}, 1};
      if (sub == 1) {
        prm.stride[0] = prm.stride[1] = 2;
        prm.dilation[0] = prm.dilation[1] = 2;
        prm.padding[0] = prm.padding[1] = 2;
        prm.groups = 2;
      }
      if (sub == 2) prm.padding[0] = prm.padding[1] = 0;
      ag_tensor *x = input(d, dt, 4, sx, 20, -2, 2, true);
      ag_tensor *w = input(d, dt, 4, sw, 21, -1, 1, true);
      ag_tensor *b = input(d, dt, 1, &sb, 22, -1, 1, true);
      ag_tensor *y = ag_conv2d(x, w, b, &prm);
      out[m++] = y;
      if (ag_backward(weighted(y, 23), NULL, false) != AG_OK) return -1;
      out[m++] = ag_tensor_grad(x);
      out[m++] = ag_tensor_grad(w);
      out[m++] = ag_tensor_grad(b);
      break;
    }
    case C_POOL: {
      int64_t side = 7 + n % 9, sx[4] = {2, 3, side, side + 1};
      ag_pool2d_params prm = {{3, 3}, {2, 2}, {1, 1}, sub == 1};
      ag_tensor *x = input(d, dt, 4, sx, 24, -2, 2, true);
      ag_tensor *y = sub == 0 ? ag_max_pool2d(x, &prm) : sub == 1 ? ag_avg_pool2d(x, &prm)
                                                                 : ag_adaptive_avg_pool2d(x, 3, 4);
      out[m++] = y;
      if (ag_backward(weighted(y, 25), NULL, false) != AG_OK) return -1;
      out[m++] = ag_tensor_grad(x);
      break;
    }
    case C_MAXMIN: {
      /* rows whose maximum (minimum) is zero, held as +0 and -0: the
       * first of them is the result, as the CPU's sequential rule gives */
      int64_t sh[2] = {3, n};
      int dim = sub == 2 ? 0 : 1;
      ag_tensor *x = input(d, dt, 2, sh, 26, -3, 0, false);
      out[m++] = sub == 1 ? ag_min(ag_neg(x), 1, &dim, false) : ag_max(x, 1, &dim, false);
      out[m++] = ag_max(x, 0, NULL, false);
      break;
    }
    case C_VAR: {
      int64_t sh[2] = {3, n};
      int dim = sub;
      ag_tensor *x = input(d, dt, 2, sh, 27, -2, 3, true);
      ag_tensor *v = ag_var(x, 1, &dim, 1.0, false);
      ag_tensor *c = ag_cumsum(x, sub);
      out[m++] = v;
      out[m++] = c;
      if (ag_backward(ag_add(weighted(v, 28), weighted(c, 29)), NULL, false) != AG_OK) return -1;
      out[m++] = ag_tensor_grad(x);
      break;
    }
    default: return -1;
  }
  for (int i = 0; i < m; i++) {
    if (!out[i]) return -1;
    if (dt != AG_F32) out[i] = ag_cast(out[i], AG_F32);
    if (!out[i]) return -1;
  }
  return m;
}

static float *download(ag_tensor *t, int64_t *n) {
  *n = ag_tensor_numel(t);
  float *v = malloc(sizeof(float) * (size_t)(*n > 0 ? *n : 1));
  assert_non_null(v);
  if (ag_to_host(t, v, (size_t)*n * sizeof(float)) != AG_OK) fail_msg("ag_to_host: %s", ag_last_error());
  return v;
}

static bool same(float a, float b) {
  if (a != a && b != b) return true;
  uint32_t x, y;
  memcpy(&x, &a, 4);
  memcpy(&y, &b, 4);
  return x == y;
}

/* One cell: the case on cpu, gpuemu:0 and gpuemu:1, compared bit for bit. */
static void cell(case_kind k, ag_dtype dt, int64_t n, int sub) {
  static const char *const devs[3] = {"cpu", "gpuemu:0", "gpuemu:1"};
  float *res[3][MAX_OUT];
  int64_t len[3][MAX_OUT];
  int count[3] = {0, 0, 0};
  bool cpu_ok = true;
  g_cells++;
  for (int di = 0; di < 3; di++) {
    ag_device d;
    assert_int_equal(ag_device_parse(devs[di], &d), AG_OK);
    ag_scope_begin();
    ag_tensor *out[MAX_OUT] = {NULL, NULL, NULL, NULL};
    int m = run_case(k, d, dt, n, sub, out);
    if (m < 0) {
      if (di == 0) {
        print_message("  %s %s n=%lld sub=%d: cpu refuses (%s): skipped\n", g_case_names[k], ag_dtype_name(dt),
                      (long long)n, sub, ag_last_error());
        cpu_ok = false;
        (ag_scope_end)();
        continue;
      }
      fail_msg("%s %s n=%lld sub=%d on %s: %s", g_case_names[k], ag_dtype_name(dt), (long long)n, sub, devs[di],
               ag_last_error());
    }
    count[di] = m;
    for (int i = 0; i < m; i++) res[di][i] = download(out[i], &len[di][i]);
    (ag_scope_end)();
  }
  int first = cpu_ok ? 0 : 1;
  if (!cpu_ok) g_skipped++;
  for (int di = first + 1; di < 3; di++) {
    assert_int_equal(count[di], count[first]);
    for (int i = 0; i < count[first]; i++) {
      assert_int_equal(len[di][i], len[first][i]);
      int64_t diff = 0, at = -1;
      for (int64_t j = 0; j < len[first][i]; j++)
        if (!same(res[first][i][j], res[di][i][j])) {
          if (at < 0) at = j;
          diff++;
        }
      if (diff)
        fail_msg("%s %s n=%lld sub=%d: output %d: %lld cells of %lld differ between %s and %s (first [%lld]: %a vs %a)",
                 g_case_names[k], ag_dtype_name(dt), (long long)n, sub, i, (long long)diff, (long long)len[first][i],
                 devs[first], devs[di], (long long)at, (double)res[first][i][at], (double)res[di][i][at]);
    }
  }
  for (int di = 0; di < 3; di++)
    for (int i = 0; i < count[di]; i++) free(res[di][i]);
}

static int setup(void **state) {
  (void)state;
  ag_device d;
  if (ag_device_parse("gpuemu:1", &d) != AG_OK || ag_set_numerics(AG_NUMERICS_PORTABLE) != AG_OK) return -1;
  if (ag_device_numerics_check(d, AG_NUMERICS_PORTABLE) != AG_OK) {
    print_message("gpuemu refuses portable numerics: %s\n", ag_last_error());
    return -1;
  }
  return 0;
}

static void test_sums(void **state) {
  (void)state;
  static const int64_t sizes[] = {1, 255, 256, 257, 70000};
  for (size_t t = 0; t < sizeof g_dtypes / sizeof g_dtypes[0]; t++)
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
      cell(C_SUM, g_dtypes[t], sizes[s], 0);
      if (sizes[s] < 70000) {
        cell(C_SUM_DIM0, g_dtypes[t], sizes[s], 0);
        cell(C_MEAN_DIM1, g_dtypes[t], sizes[s], 0);
      }
    }
}

static void test_maxmin(void **state) {
  (void)state;
  static const int64_t sizes[] = {1, 255, 257, 5000};
  for (size_t t = 0; t < sizeof g_dtypes / sizeof g_dtypes[0]; t++)
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
      for (int sub = 0; sub < 3; sub++) cell(C_MAXMIN, g_dtypes[t], sizes[s], sub);
}

static void test_var_cumsum(void **state) {
  (void)state;
  static const int64_t sizes[] = {1, 257, 5000};
  for (size_t t = 0; t < sizeof g_dtypes / sizeof g_dtypes[0]; t++)
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
      for (int sub = 0; sub < 2; sub++) cell(C_VAR, g_dtypes[t], sizes[s], sub);
}

static void test_rows(void **state) {
  (void)state;
  static const int64_t sizes[] = {1, 257, 5000};
  static const case_kind kinds[] = {C_SOFTMAX, C_LOG_SOFTMAX, C_LOGSUMEXP, C_LAYERNORM, C_RMSNORM, C_XENT};
  for (size_t t = 0; t < sizeof g_dtypes / sizeof g_dtypes[0]; t++)
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
      for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) cell(kinds[k], g_dtypes[t], sizes[s], 0);
}

static void test_matmul(void **state) {
  (void)state;
  static const int64_t ks[] = {1, 15, 16, 17, 300};
  for (size_t t = 0; t < sizeof g_dtypes / sizeof g_dtypes[0]; t++)
    for (size_t s = 0; s < sizeof ks / sizeof ks[0]; s++)
      for (int sub = 0; sub < 3; sub++) cell(C_MATMUL, g_dtypes[t], ks[s], sub);
}

static void test_elementwise(void **state) {
  (void)state;
  static const int64_t sizes[] = {1, 255, 256, 257, 70000};
  for (size_t t = 0; t < sizeof g_dtypes / sizeof g_dtypes[0]; t++)
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
      for (int sub = 0; sub < 5; sub++) cell(C_UNARY, g_dtypes[t], sizes[s], sub);
      for (int sub = 0; sub < 2; sub++) cell(C_BINARY, g_dtypes[t], sizes[s], sub);
      cell(C_RANDOM, g_dtypes[t], sizes[s], 0);
      cell(C_ARANGE, g_dtypes[t], sizes[s], 0);
    }
  print_message("%d cells, %d compared on the two emulated devices only (the cpu refused them)\n", g_cells, g_skipped);
}

static void test_vision(void **state) {
  (void)state;
  /* f32: the dtype the CPU's convolution and pooling have */
  static const int64_t sizes[] = {1, 5, 300};
  for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
    for (int sub = 0; sub < 3; sub++) {
      cell(C_CONV, AG_F32, sizes[s], sub);
      cell(C_POOL, AG_F32, sizes[s], sub);
    }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sums),
      cmocka_unit_test(test_maxmin),
      cmocka_unit_test(test_var_cumsum),
      cmocka_unit_test(test_rows),
      cmocka_unit_test(test_matmul),
      cmocka_unit_test(test_vision),
      cmocka_unit_test(test_elementwise),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
