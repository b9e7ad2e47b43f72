/* Portable numerics on opencl:0 (docs/numerics.md): each op run on the CPU
 * and on opencl:0 from the same inputs in portable mode must give the same
 * bits (NaN equal to NaN), on awkward sizes (1, 255, 256, 257, 70000
 * elements; rows of 1 and 5000). The canonical sum and the sequential GEMM
 * are also checked against references computed here, so the test says
 * something where the CPU refuses an op. An op either device refuses is
 * reported and skipped; the test skips without an OpenCL device. */
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
#include "anygrad/backend.h" /* ag_f32_to_f16 and friends */

static ag_device CL, CPU;

#define NEED_DEVICE()                                           \
  do {                                                          \
    if (!ag_backend_available(AG_BACKEND_OPENCL, NULL)) skip(); \
  } while (0)

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float frand(float lo, float hi) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return lo + (hi - lo) * (float)((rng >> 40) * 0x1.0p-24);
}

static size_t esz(ag_dtype dt) { return dt == AG_F16 || dt == AG_BF16 ? 2 : dt == AG_I64 ? 8 : 4; }

/* A tensor of dt on d holding v (rounded to dt). */
static ag_tensor *mk(ag_device d, ag_dtype dt, int nd, const int64_t *shape, const float *v) {
  int64_t n = 1;
  for (int i = 0; i < nd; i++) n *= shape[i];
  void *buf = malloc((size_t)(n ? n : 1) * 4);
  for (int64_t i = 0; i < n; i++) {
    if (dt == AG_F16) ((uint16_t *)buf)[i] = ag_f32_to_f16(v[i]);
    else if (dt == AG_BF16) ((uint16_t *)buf)[i] = ag_f32_to_bf16(v[i]);
    else if (dt == AG_I32) ((int32_t *)buf)[i] = (int32_t)v[i];
    else ((float *)buf)[i] = v[i];
  }
  ag_tensor *t = ag_from_host(d, dt, nd, shape, buf);
  free(buf);
  return t;
}

static float *rvec(int64_t n, float lo, float hi) {
  float *v = malloc((size_t)(n ? n : 1) * sizeof(float));
  for (int64_t i = 0; i < n; i++) v[i] = frand(lo, hi);
  return v;
}

/* Cells of a and b (same dtype and size) whose bits differ, NaN equal to
 * NaN; -1 when either is NULL. */
static int64_t ndiff(const ag_tensor *a, const ag_tensor *b) {
  if (!a || !b) return -1;
  ag_dtype dt = ag_tensor_dtype(a);
  int64_t n = ag_tensor_numel(a);
  size_t w = esz(dt);
  unsigned char *x = malloc((size_t)(n ? n : 1) * w), *y = malloc((size_t)(n ? n : 1) * w);
  assert_int_equal(ag_to_host(a, x, (size_t)n * w), AG_OK);
  assert_int_equal(ag_to_host(b, y, (size_t)n * w), AG_OK);
  int64_t bad = 0;
  for (int64_t i = 0; i < n; i++) {
    if (!memcmp(x + i * w, y + i * w, w)) continue;
    if (dt == AG_F32) {
      float p, q;
      memcpy(&p, x + i * w, 4);
      memcpy(&q, y + i * w, 4);
      if (isnan(p) && isnan(q)) continue;
      if (bad < 3) print_message("  cell %lld: %a vs %a\n", (long long)i, (double)p, (double)q);
    } else if (w == 2) {
      uint16_t p, q;
      memcpy(&p, x + i * w, 2);
      memcpy(&q, y + i * w, 2);
      float fp = dt == AG_F16 ? ag_f16_to_f32(p) : ag_bf16_to_f32(p);
      float fq = dt == AG_F16 ? ag_f16_to_f32(q) : ag_bf16_to_f32(q);
      if (isnan(fp) && isnan(fq)) continue;
      if (bad < 3) print_message("  cell %lld: %a vs %a\n", (long long)i, (double)fp, (double)fq);
    }
    bad++;
  }
  free(x);
  free(y);
  return bad;
}

static int refused, compared;

/* r[0] from the CPU, r[1] from opencl:0: equal bits, or reported refused. */
static void expect_same(const char *what, ag_tensor *c, ag_tensor *o) {
  if (!c || !o) {
    print_message("%s: refused on %s: %s\n", what, c ? "opencl:0" : "cpu", ag_last_error());
    ag_error_clear();
    refused++;
  } else {
    int64_t d = ndiff(c, o);
    if (d) print_message("%s: %lld cells differ\n", what, (long long)d);
    assert_int_equal(d, 0);
    compared++;
  }
  ag_tensor_release(c);
  ag_tensor_release(o);
}

static const ag_dtype FDT[3] = {AG_F32, AG_F16, AG_BF16};
static const char *const FDN[3] = {"f32", "f16", "bf16"};
static const int64_t SIZES[5] = {1, 255, 256, 257, 70000};

static void setup_devices(void) {
  assert_int_equal(ag_device_parse("opencl:0", &CL), AG_OK);
  CPU = AG_CPU;
  assert_int_equal(ag_set_numerics(AG_NUMERICS_PORTABLE), AG_OK);
}

typedef ag_tensor *(*unary_fn)(ag_tensor *);
typedef ag_tensor *(*binary_fn)(ag_tensor *, ag_tensor *);

static void test_elementwise(void **state) {
  (void)state;
  NEED_DEVICE();
  setup_devices();
  static const struct {
    const char *name;
    unary_fn f;
  } un[] = {{"exp", ag_exp},     {"log", ag_log},   {"sqrt", ag_sqrt}, {"tanh", ag_tanh}, {"sigmoid", ag_sigmoid},
            {"gelu", ag_gelu},   {"silu", ag_silu}, {"sin", ag_sin},   {"erf", ag_erf},   {"log1p", ag_log1p},
            {"rsqrt", ag_rsqrt}, {"mish", ag_mish}};
  static const struct {
    const char *name;
    binary_fn f;
  } bi[] = {{"add", ag_add}, {"mul", ag_mul}, {"div", ag_div}, {"sub", ag_sub}};
  for (int t = 0; t < 3; t++)
    for (int si = 0; si < 5; si++) {
      int64_t n = SIZES[si];
      float *a = rvec(n, -4, 4), *b = rvec(n, -3, 3);
      if (n > 3) {
        a[0] = 0x1.8p-140f; /* a subnormal */
        a[1] = -0.0f;
        a[2] = INFINITY;
      }
      ag_tensor *ac = mk(CPU, FDT[t], 1, &n, a), *ao = mk(CL, FDT[t], 1, &n, a);
      ag_tensor *bc = mk(CPU, FDT[t], 1, &n, b), *bo = mk(CL, FDT[t], 1, &n, b);
      char what[96];
      for (size_t k = 0; k < sizeof un / sizeof un[0]; k++) {
        snprintf(what, sizeof what, "%s %s [%lld]", un[k].name, FDN[t], (long long)n);
        expect_same(what, un[k].f(ac), un[k].f(ao));
      }
      for (size_t k = 0; k < sizeof bi / sizeof bi[0]; k++) {
        snprintf(what, sizeof what, "%s %s [%lld]", bi[k].name, FDN[t], (long long)n);
        expect_same(what, bi[k].f(ac, bc), bi[k].f(ao, bo));
      }
      ag_tensor_release(ac);
      ag_tensor_release(ao);
      ag_tensor_release(bc);
      ag_tensor_release(bo);
      free(a);
      free(b);
    }
}

/* S of docs/numerics.md, written as its definition. */
static float ref_S(const float *v, int64_t n) {
  if (n == 0) return 0.0f;
  if (n == 1) return v[0] + 0.0f;
  int64_t nb = (n + 255) / 256;
  float *bs = malloc((size_t)nb * sizeof(float));
  for (int64_t b = 0; b < nb; b++) {
    float t[256];
    for (int i = 0; i < 256; i++) t[i] = b * 256 + i < n ? v[b * 256 + i] : 0.0f;
    for (int s = 128; s > 0; s >>= 1)
      for (int i = 0; i < s; i++) t[i] = t[i] + t[i + s];
    bs[b] = t[0];
  }
  float r = nb == 1 ? bs[0] : ref_S(bs, nb);
  free(bs);
  return r;
}

static void test_sum(void **state) {
  (void)state;
  NEED_DEVICE();
  setup_devices();
  /* rows [rows, cols] summed over the last dim, and over the first */
  static const int64_t shapes[][2] = {{1, 1}, {1, 255}, {1, 256}, {1, 257}, {1, 70000}, {5000, 1}, {1, 5000},
                                      {5, 5000}, {3, 70000}, {300, 257}, {1, 1 << 20}};
  for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
    int64_t rows = shapes[k][0], cols = shapes[k][1], n = rows * cols;
    float *v = rvec(n, -1, 1);
    for (int t = 0; t < 3; t++) {
      ag_tensor *xc = mk(CPU, FDT[t], 2, shapes[k], v), *xo = mk(CL, FDT[t], 2, shapes[k], v);
      char what[96];
      for (int d = 0; d < 2; d++) {
        snprintf(what, sizeof what, "sum dim %d %s [%lld, %lld]", d, FDN[t], (long long)rows, (long long)cols);
        ag_tensor *so = ag_sum(xo, 1, &d, false);
        assert_non_null(so);
        if (t == 0) {
          /* against S computed here */
          int64_t outs = d ? rows : cols, len = d ? cols : rows;
          float *got = malloc((size_t)outs * sizeof(float)), *line = malloc((size_t)len * sizeof(float));
          assert_int_equal(ag_to_host(so, got, (size_t)outs * sizeof(float)), AG_OK);
          for (int64_t o = 0; o < outs; o++) {
            for (int64_t j = 0; j < len; j++) line[j] = d ? v[o * cols + j] : v[j * cols + o];
            float want = ref_S(line, len);
            if (memcmp(&want, &got[o], 4)) print_message("%s: output %lld %a, S %a\n", what, (long long)o, (double)got[o], (double)want);
            assert_memory_equal(&want, &got[o], 4);
          }
          free(got);
          free(line);
        }
        expect_same(what, ag_sum(xc, 1, &d, false), so);
        snprintf(what, sizeof what, "mean dim %d %s [%lld, %lld]", d, FDN[t], (long long)rows, (long long)cols);
        expect_same(what, ag_mean(xc, 1, &d, false), ag_mean(xo, 1, &d, false));
      }
      ag_tensor_release(xc);
      ag_tensor_release(xo);
    }
    free(v);
  }
}

static void test_matmul(void **state) {
  (void)state;
  NEED_DEVICE();
  setup_devices();
  static const int64_t mkn[][3] = {{1, 1, 1}, {17, 255, 33}, {64, 257, 5}, {1, 5000, 3}, {33, 16, 70}};
  for (size_t c = 0; c < sizeof mkn / sizeof mkn[0]; c++) {
    int64_t M = mkn[c][0], K = mkn[c][1], N = mkn[c][2];
    int64_t sa[2] = {M, K}, sb[2] = {K, N};
    float *a = rvec(M * K, -1, 1), *b = rvec(K * N, -1, 1);
    for (int t = 0; t < 3; t++) {
      ag_tensor *ac = mk(CPU, FDT[t], 2, sa, a), *ao = mk(CL, FDT[t], 2, sa, a);
      ag_tensor *bc = mk(CPU, FDT[t], 2, sb, b), *bo = mk(CL, FDT[t], 2, sb, b);
      ag_tensor *po = ag_matmul(ao, bo);
      assert_non_null(po);
      if (t == 0) {
        float *got = malloc((size_t)(M * N) * sizeof(float));
        assert_int_equal(ag_to_host(po, got, (size_t)(M * N) * sizeof(float)), AG_OK);
        for (int64_t i = 0; i < M; i++)
          for (int64_t j = 0; j < N; j++) {
            float acc = 0.0f;
            for (int64_t k = 0; k < K; k++) {
              volatile float p = a[i * K + k] * b[k * N + j];
              acc = acc + p;
            }
            assert_memory_equal(&acc, &got[i * N + j], 4);
          }
        free(got);
      }
      char what[96];
      snprintf(what, sizeof what, "matmul %s [%lld, %lld, %lld]", FDN[t], (long long)M, (long long)K, (long long)N);
      expect_same(what, ag_matmul(ac, bc), po);
      ag_tensor_release(ac);
      ag_tensor_release(ao);
      ag_tensor_release(bc);
      ag_tensor_release(bo);
    }
    free(a);
    free(b);
  }
}

/* Forward and the input's (and weight's) gradients of the row ops, through
 * autograd: loss = sum(op(x) * r). */
typedef enum { R_SOFTMAX, R_LOG_SOFTMAX, R_LAYERNORM, R_RMSNORM, R_CE } row_op;
static const char *const ROW_NAMES[] = {"softmax", "log_softmax", "layer_norm", "rms_norm", "cross_entropy"};

static ag_tensor *row_fwd(row_op op, ag_tensor *x, ag_tensor *w, ag_tensor *b, ag_tensor *tg) {
  switch (op) {
    case R_SOFTMAX: return ag_softmax(x, 1);
    case R_LOG_SOFTMAX: return ag_log_softmax(x, 1);
    case R_LAYERNORM: return ag_layer_norm(x, w, b, 1e-5);
    case R_RMSNORM: return ag_rms_norm(x, w, 1e-6);
    case R_CE: return ag_cross_entropy(x, tg, AG_REDUCTION_NONE, -100);
  }
  return NULL;
}

static void test_rows(void **state) {
  (void)state;
  NEED_DEVICE();
  setup_devices();
  static const int64_t shapes[][2] = {{1, 1}, {1, 5000}, {5, 257}, {5000, 1}, {7, 256}, {3, 255}};
  for (int op = 0; op <= R_CE; op++)
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++)
      for (int t = 0; t < 3; t++) {
        int64_t rows = shapes[k][0], cols = shapes[k][1], n = rows * cols;
        float *x = rvec(n, -3, 3), *r = rvec(n, -1, 1), *w = rvec(cols, 0.5f, 1.5f), *bb = rvec(cols, -1, 1);
        float *tg = malloc((size_t)rows * sizeof(float));
        for (int64_t i = 0; i < rows; i++) tg[i] = (float)(int64_t)frand(0, (float)cols - 0.01f);
        if (rows > 1) tg[1] = -100; /* an ignored row */
        ag_tensor *out[2], *gx[2], *gw[2], *gb[2];
        for (int dv = 0; dv < 2; dv++) {
          ag_device d = dv ? CL : CPU;
          ag_tensor *xt = mk(d, FDT[t], 2, shapes[k], x), *rt = NULL;
          ag_tensor *wt = mk(d, FDT[t], 1, &cols, w), *bt = mk(d, FDT[t], 1, &cols, bb);
          ag_tensor *tt = mk(d, AG_I32, 1, &rows, tg);
          ag_tensor_set_requires_grad(xt, true);
          ag_tensor_set_requires_grad(wt, true);
          ag_tensor_set_requires_grad(bt, true);
          out[dv] = row_fwd((row_op)op, xt, wt, bt, tt);
          gx[dv] = gw[dv] = gb[dv] = NULL;
          if (out[dv]) {
            rt = op == R_CE ? mk(d, FDT[t], 1, &rows, r) : mk(d, FDT[t], 2, shapes[k], r);
            ag_tensor *pr = ag_mul(out[dv], rt);
            ag_tensor *loss = ag_sum(pr, 0, NULL, false);
            if (loss && ag_backward(loss, NULL, false) == AG_OK) {
              /* borrowed from the leaves: kept past their release */
              gx[dv] = ag_tensor_retain(ag_tensor_grad(xt));
              if (op == R_LAYERNORM || op == R_RMSNORM) gw[dv] = ag_tensor_retain(ag_tensor_grad(wt));
              if (op == R_LAYERNORM) gb[dv] = ag_tensor_retain(ag_tensor_grad(bt));
            } else {
              print_message("%s backward refused on %s: %s\n", ROW_NAMES[op], dv ? "opencl:0" : "cpu", ag_last_error());
              ag_error_clear();
            }
            ag_tensor_release(loss);
            ag_tensor_release(pr);
            ag_tensor_release(rt);
          }
          ag_tensor_release(xt);
          ag_tensor_release(wt);
          ag_tensor_release(bt);
          ag_tensor_release(tt);
        }
        char what[96];
        snprintf(what, sizeof what, "%s %s [%lld, %lld]", ROW_NAMES[op], FDN[t], (long long)rows, (long long)cols);
        expect_same(what, out[0], out[1]);
        for (int dv = 0; dv < 2; dv++)
          if (!(gx[0] && gx[1])) ag_tensor_release(gx[dv]);
        for (int dv = 0; dv < 2; dv++)
          if (!(gw[0] && gw[1])) ag_tensor_release(gw[dv]);
        for (int dv = 0; dv < 2; dv++)
          if (!(gb[0] && gb[1])) ag_tensor_release(gb[dv]);
        if (gx[0] && gx[1]) {
          snprintf(what, sizeof what, "%s dx %s [%lld, %lld]", ROW_NAMES[op], FDN[t], (long long)rows, (long long)cols);
          expect_same(what, gx[0], gx[1]);
        }
        if (gw[0] && gw[1]) {
          snprintf(what, sizeof what, "%s dw %s [%lld, %lld]", ROW_NAMES[op], FDN[t], (long long)rows, (long long)cols);
          expect_same(what, gw[0], gw[1]);
        }
        if (gb[0] && gb[1]) {
          snprintf(what, sizeof what, "%s db %s [%lld, %lld]", ROW_NAMES[op], FDN[t], (long long)rows, (long long)cols);
          expect_same(what, gb[0], gb[1]);
        }
        free(x);
        free(r);
        free(w);
        free(bb);
        free(tg);
      }
}

/* conv2d forward, input and weight gradients (f32), pooling and its
 * gradient, through autograd: loss = sum(op(x) * r). */
static void test_vision(void **state) {
  (void)state;
  NEED_DEVICE();
  setup_devices();
  static const struct {
    int64_t n, c, h, w, co, k;
    ag_conv2d_params p;
  } cs[] = {{1, 1, 1, 1, 1, 1, {{1, 1}, {0, 0}, {1, 1}, 1}},
            {2, 3, 9, 7, 4, 3, {{2, 1}, {1, 2}, {1, 1}, 1}},
            {1, 4, 16, 16, 6, 3, {{1, 1}, {2, 2}, {2, 2}, 2}},
            {3, 2, 33, 5, 2, 5, {{1, 1}, {2, 2}, {1, 1}, 1}}};
  for (size_t k = 0; k < sizeof cs / sizeof cs[0]; k++) {
    int64_t xs[4] = {cs[k].n, cs[k].c, cs[k].h, cs[k].w}, ws[4] = {cs[k].co, cs[k].c / cs[k].p.groups, cs[k].k, cs[k].k};
    int64_t nx = xs[0] * xs[1] * xs[2] * xs[3], nw = ws[0] * ws[1] * ws[2] * ws[3];
    float *x = rvec(nx, -1, 1), *w = rvec(nw, -1, 1), *b = rvec(cs[k].co, -1, 1);
    ag_tensor *y[2], *gx[2], *gw[2], *gb[2], *py[2], *pgx[2];
    for (int dv = 0; dv < 2; dv++) {
      ag_device d = dv ? CL : CPU;
      ag_tensor *xt = mk(d, AG_F32, 4, xs, x), *wt = mk(d, AG_F32, 4, ws, w), *bt = mk(d, AG_F32, 1, &cs[k].co, b);
      ag_tensor_set_requires_grad(xt, true);
      ag_tensor_set_requires_grad(wt, true);
      ag_tensor_set_requires_grad(bt, true);
      y[dv] = ag_conv2d(xt, wt, bt, &cs[k].p);
      gx[dv] = gw[dv] = gb[dv] = NULL;
      if (y[dv]) {
        ag_tensor *sq = ag_mul(y[dv], y[dv]), *loss = ag_sum(sq, 0, NULL, false);
        if (loss && ag_backward(loss, NULL, false) == AG_OK) {
          gx[dv] = ag_tensor_retain(ag_tensor_grad(xt));
          gw[dv] = ag_tensor_retain(ag_tensor_grad(wt));
          gb[dv] = ag_tensor_retain(ag_tensor_grad(bt));
        }
        ag_tensor_release(loss);
        ag_tensor_release(sq);
      }
      /* average pooling 3x3 stride 2 pad 1 and its gradient */
      ag_tensor *xp = mk(d, AG_F32, 4, xs, x);
      ag_tensor_set_requires_grad(xp, true);
      ag_pool2d_params pp = {{3, 3}, {2, 2}, {1, 1}, false};
      py[dv] = xs[2] >= 2 && xs[3] >= 2 ? ag_avg_pool2d(xp, &pp) : NULL;
      pgx[dv] = NULL;
      if (py[dv]) {
        ag_tensor *sq = ag_mul(py[dv], py[dv]), *loss = ag_sum(sq, 0, NULL, false);
        if (loss && ag_backward(loss, NULL, false) == AG_OK) pgx[dv] = ag_tensor_retain(ag_tensor_grad(xp));
        ag_tensor_release(loss);
        ag_tensor_release(sq);
      }
      ag_error_clear();
      ag_tensor_release(xp);
      ag_tensor_release(xt);
      ag_tensor_release(wt);
      ag_tensor_release(bt);
    }
    char what[64];
    snprintf(what, sizeof what, "conv2d case %zu", k);
    expect_same(what, y[0], y[1]);
    snprintf(what, sizeof what, "conv2d dx case %zu", k);
    expect_same(what, gx[0], gx[1]);
    snprintf(what, sizeof what, "conv2d dw case %zu", k);
    expect_same(what, gw[0], gw[1]);
    snprintf(what, sizeof what, "conv2d db case %zu", k);
    expect_same(what, gb[0], gb[1]);
    if (py[0] || py[1]) {
      snprintf(what, sizeof what, "avg_pool2d case %zu", k);
      expect_same(what, py[0], py[1]);
      snprintf(what, sizeof what, "avg_pool2d dx case %zu", k);
      expect_same(what, pgx[0], pgx[1]);
    }
    free(x);
    free(w);
    free(b);
  }
}

/* log-sum-exp, var, std, vector norms and cumsum over rows and columns;
 * random fills and dropout from one generator state on both devices. */
static void test_lse_random(void **state) {
  (void)state;
  NEED_DEVICE();
  setup_devices();
  static const int64_t shapes[][2] = {{1, 1}, {1, 5000}, {5, 257}, {5000, 1}, {3, 70000}};
  for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++)
    for (int t = 0; t < 3; t++) {
      int64_t n = shapes[k][0] * shapes[k][1];
      float *x = rvec(n, -20, 20);
      ag_tensor *xc = mk(CPU, FDT[t], 2, shapes[k], x), *xo = mk(CL, FDT[t], 2, shapes[k], x);
      char what[96];
      for (int d = 0; d < 2; d++) {
        snprintf(what, sizeof what, "logsumexp dim %d %s [%lld, %lld]", d, FDN[t], (long long)shapes[k][0],
                 (long long)shapes[k][1]);
        expect_same(what, ag_logsumexp(xc, d, false), ag_logsumexp(xo, d, false));
        snprintf(what, sizeof what, "var dim %d %s [%lld, %lld]", d, FDN[t], (long long)shapes[k][0],
                 (long long)shapes[k][1]);
        expect_same(what, ag_var(xc, 1, &d, 1.0, false), ag_var(xo, 1, &d, 1.0, false));
        snprintf(what, sizeof what, "std dim %d %s [%lld, %lld]", d, FDN[t], (long long)shapes[k][0],
                 (long long)shapes[k][1]);
        expect_same(what, ag_std(xc, 1, &d, 0.0, false), ag_std(xo, 1, &d, 0.0, false));
        static const double ps[3] = {1.0, 2.0, INFINITY};
        for (int q = 0; q < 3; q++) {
          snprintf(what, sizeof what, "norm p=%g dim %d %s [%lld, %lld]", ps[q], d, FDN[t], (long long)shapes[k][0],
                   (long long)shapes[k][1]);
          expect_same(what, ag_norm(xc, ps[q], 1, &d, false), ag_norm(xo, ps[q], 1, &d, false));
        }
        snprintf(what, sizeof what, "cumsum dim %d %s [%lld, %lld]", d, FDN[t], (long long)shapes[k][0],
                 (long long)shapes[k][1]);
        expect_same(what, ag_cumsum(xc, d), ag_cumsum(xo, d));
      }
      ag_generator *g[2] = {ag_generator_create(42 + k), ag_generator_create(42 + k)};
      snprintf(what, sizeof what, "rand %s [%lld]", FDN[t], (long long)n);
      expect_same(what, ag_rand(CPU, FDT[t], 2, shapes[k], -0.3, 1.7, g[0]), ag_rand(CL, FDT[t], 2, shapes[k], -0.3, 1.7, g[1]));
      snprintf(what, sizeof what, "randn %s [%lld]", FDN[t], (long long)n);
      expect_same(what, ag_randn(CPU, FDT[t], 2, shapes[k], 0.1, 2.3, g[0]), ag_randn(CL, FDT[t], 2, shapes[k], 0.1, 2.3, g[1]));
      snprintf(what, sizeof what, "dropout %s [%lld]", FDN[t], (long long)n);
      expect_same(what, ag_dropout(xc, 0.3, true, g[0]), ag_dropout(xo, 0.3, true, g[1]));
      ag_generator_free(g[0]);
      ag_generator_free(g[1]);
      ag_tensor_release(xc);
      ag_tensor_release(xo);
      free(x);
    }
}

/* Ties of +0 and -0 (equal values, different bits): max, min and the
 * softmax family keep the first in the row, as the sequential text does. */
static void test_signed_zero(void **state) {
  (void)state;
  NEED_DEVICE();
  setup_devices();
  static const int64_t lens[] = {2, 257, 1000, 5000};
  for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++)
    for (int pat = 0; pat < 2; pat++) {
      int64_t n = lens[k], shape[2] = {1, n};
      float *v = malloc((size_t)n * sizeof(float));
      for (int64_t i = 0; i < n; i++) v[i] = -1.0f;
      v[1] = pat ? -0.0f : 0.0f;
      v[n - 1] = pat ? 0.0f : -0.0f;
      if (n > 256) v[256] = pat ? 0.0f : -0.0f;
      ag_tensor *xc = mk(CPU, AG_F32, 2, shape, v), *xo = mk(CL, AG_F32, 2, shape, v);
      ag_tensor *nc = ag_neg(xc), *no = ag_neg(xo);
      int d = 1;
      char what[64];
      snprintf(what, sizeof what, "max of zeros [%lld] pattern %d", (long long)n, pat);
      expect_same(what, ag_max(xc, 1, &d, false), ag_max(xo, 1, &d, false));
      snprintf(what, sizeof what, "min of zeros [%lld] pattern %d", (long long)n, pat);
      expect_same(what, ag_min(nc, 1, &d, false), ag_min(no, 1, &d, false));
      snprintf(what, sizeof what, "log_softmax of zeros [%lld] pattern %d", (long long)n, pat);
      expect_same(what, ag_log_softmax(xc, 1), ag_log_softmax(xo, 1));
      snprintf(what, sizeof what, "logsumexp of zeros [%lld] pattern %d", (long long)n, pat);
      expect_same(what, ag_logsumexp(xc, 1, false), ag_logsumexp(xo, 1, false));
      ag_tensor_release(nc);
      ag_tensor_release(no);
      ag_tensor_release(xc);
      ag_tensor_release(xo);
      free(v);
    }
}

/* The device check itself: the portable program builds and the probe
 * passes on PoCL. */
static void test_check(void **state) {
  (void)state;
  NEED_DEVICE();
  setup_devices();
  ag_status st = ag_device_numerics_check(CL, AG_NUMERICS_PORTABLE);
  if (st != AG_OK) print_message("opencl:0: %s\n", ag_last_error());
  assert_int_equal(st, AG_OK);
}

static int report(void **state) {
  (void)state;
  print_message("compared %d, refused %d\n", compared, refused);
  ag_set_numerics(AG_NUMERICS_DEFAULT);
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_check),  cmocka_unit_test(test_elementwise), cmocka_unit_test(test_sum),
      cmocka_unit_test(test_matmul), cmocka_unit_test(test_rows),        cmocka_unit_test(test_vision),
      cmocka_unit_test(test_lse_random), cmocka_unit_test(test_signed_zero),
  };
  return cmocka_run_group_tests(tests, NULL, report);
}
