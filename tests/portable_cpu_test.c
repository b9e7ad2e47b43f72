/* The CPU's portable numerics (docs/numerics.md), the reference of every
 * other backend: (a) each portable kernel gives the same bits on 1 and 2
 * threads, on sizes that split unevenly; (b) scalar references written
 * straight from docs/numerics.md (plain loops, built with
 * -ffp-contract=off) equal the kernels bit for bit; (c) an op outside the
 * portable list, and f64, are refused naming the op; (d) the default mode
 * is unchanged. Kernels are called through ag__cpu_run with
 * AG_KF_PORTABLE, the public API for the refusal and the mode switch. */
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
#include "cpu_backend.h"
#include "cpu_pmath.h"
#include "cpu_portable.h"
#include "tensor/half.h"

/* ---- helpers ---- */

static uint32_t g_rng = 12345;
static float frand(float lo, float hi) {
  g_rng = g_rng * 1664525u + 1013904223u;
  return lo + (hi - lo) * (float)(g_rng >> 8) * (1.0f / 16777216.0f);
}
static float *fvec(int64_t n, float lo, float hi) {
  float *v = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
  assert_non_null(v);
  for (int64_t i = 0; i < n; i++) v[i] = frand(lo, hi);
  return v;
}

static ag_koperand opnd(void *base, ag_dtype dt, int ndim, const int64_t *shape, const int64_t *strides) {
  ag_koperand o;
  memset(&o, 0, sizeof o);
  o.base = base;
  o.dtype = dt;
  o.ndim = ndim;
  int64_t s = 1;
  for (int d = ndim - 1; d >= 0; d--) {
    o.shape[d] = shape[d];
    o.strides[d] = strides ? strides[d] : s;
    s *= shape[d];
  }
  return o;
}

static ag_kernel_call pcall(ag_kop op, int sub) {
  ag_kernel_call c;
  memset(&c, 0, sizeof c);
  c.struct_size = (uint32_t)sizeof c;
  c.op = op;
  c.sub = sub;
  c.name = "portable_test";
  c.flags = AG_KF_PORTABLE;
  return c;
}

static void prun(const ag_kernel_call *c) {
  ag_kernel_error e;
  memset(&e, 0, sizeof e);
  ag_status st = ag__cpu_run(c, &e);
  if (st != AG_OK) fail_msg("%s: %s", ag_kop_name(c->op), ag_last_error());
  assert_int_equal(e.code, 0);
}

/* Bit equality, NaN equal to NaN (docs/numerics.md). */
static void same_bits(const float *a, const float *b, int64_t n, const char *what) {
  for (int64_t i = 0; i < n; i++) {
    uint32_t ua, ub;
    memcpy(&ua, &a[i], 4);
    memcpy(&ub, &b[i], 4);
    if (ua != ub && !(a[i] != a[i] && b[i] != b[i]))
      fail_msg("%s: element %lld: %.9g (0x%08x) != %.9g (0x%08x)", what, (long long)i, (double)a[i], ua,
               (double)b[i], ub);
  }
}

/* Run the call on 1 and on 2 threads; out (n floats) the same bits. The
 * caller's refill() restores in-place operands before each run. */
typedef void (*refill_fn)(void *ctx);
static void threads_same(const ag_kernel_call *c, float *out, int64_t n, refill_fn refill, void *ctx,
                         const char *what) {
  float *first = malloc(sizeof(float) * (size_t)n);
  assert_non_null(first);
  assert_int_equal(ag_set_num_threads(1), AG_OK);
  if (refill) refill(ctx);
  prun(c);
  memcpy(first, out, sizeof(float) * (size_t)n);
  assert_int_equal(ag_set_num_threads(2), AG_OK);
  if (refill) refill(ctx);
  prun(c);
  same_bits(first, out, n, what);
  free(first);
}

/* ---- references written from docs/numerics.md ---- */

/* S: blocks of 256, the fixed tree, recursively over the block sums. */
static float ref_S(const float *v, int64_t n) {
  if (n == 0) return 0.0f;
  int64_t nb = (n + 255) / 256;
  float *bs = malloc(sizeof(float) * (size_t)nb);
  assert_non_null(bs);
  for (int64_t b = 0; b < nb; b++) {
    float t[256];
    int64_t len = n - b * 256 < 256 ? n - b * 256 : 256;
    for (int64_t i = 0; i < 256; i++) t[i] = i < len ? v[b * 256 + i] : 0.0f;
    for (int s = 128; s >= 1; s /= 2)
      for (int i = 0; i < s; i++) {
        volatile float r = t[i] + t[i + s];
        t[i] = r;
      }
    bs[b] = t[0];
  }
  float r = nb == 1 ? bs[0] : ref_S(bs, nb);
  free(bs);
  return r;
}

/* ---- (a) + (b): REDUCE SUM ---- */

static void reduce_sum_case(int64_t outer, int64_t r, int64_t inner, double scale) {
  const int64_t n = outer * r * inner;
  float *x = fvec(n, -2, 2), *out = calloc((size_t)(outer * inner), sizeof(float));
  assert_non_null(out);
  /* some exact cancellations and signed zeros */
  if (n > 3) x[1] = -0.0f, x[2] = 1e30f, x[3] = -1e30f;
  ag_kernel_call c = pcall(AG_K_REDUCE, AG_R_SUM);
  c.n_operands = 2;
  c.o[0] = opnd(out, AG_F32, 2, (int64_t[]){outer, inner}, NULL);
  c.o[1] = opnd(x, AG_F32, 3, (int64_t[]){outer, r, inner}, NULL);
  c.i[0] = outer;
  c.i[1] = r;
  c.i[2] = inner;
  c.s[0] = scale;
  char what[96];
  snprintf(what, sizeof what, "sum [%lld,%lld,%lld]", (long long)outer, (long long)r, (long long)inner);
  threads_same(&c, out, outer * inner, NULL, NULL, what);
  float *col = malloc(sizeof(float) * (size_t)(r > 0 ? r : 1)), *ref = malloc(sizeof(float) * (size_t)(outer * inner));
  for (int64_t o = 0; o < outer; o++)
    for (int64_t i = 0; i < inner; i++) {
      for (int64_t k = 0; k < r; k++) col[k] = x[(o * r + k) * inner + i];
      float s = ref_S(col, r);
      ref[o * inner + i] = scale == 1.0 ? s : s * (float)scale;
    }
  same_bits(ref, out, outer * inner, what);
  free(x), free(out), free(col), free(ref);
}

static void test_reduce_sum(void **state) {
  (void)state;
  reduce_sum_case(1, 1, 1, 1);
  reduce_sum_case(3, 0, 1, 1);
  reduce_sum_case(5, 255, 1, 1);
  reduce_sum_case(5, 257, 1, 0.5);
  reduce_sum_case(1, 1000003, 1, 1);      /* few long rows: parallel blocks */
  reduce_sum_case(3, 256 * 256 + 7, 1, 1); /* three levels */
  reduce_sum_case(700, 1501, 1, 1.0 / 1501);
  reduce_sum_case(2, 70001, 19, 1);       /* columns, lanes */
  reduce_sum_case(37, 300, 33, 1);
}

/* f16: loads exact, S in f32, one rounding at the store */
static void test_reduce_sum_f16(void **state) {
  (void)state;
  enum { R = 3001 };
  uint16_t *x = malloc(2 * R), out;
  float *xf = malloc(4 * R);
  for (int i = 0; i < R; i++) {
    x[i] = ag_f32_to_f16(frand(-1, 1));
    xf[i] = ag_f16_to_f32(x[i]);
  }
  ag_kernel_call c = pcall(AG_K_REDUCE, AG_R_SUM);
  c.n_operands = 2;
  c.o[0] = opnd(&out, AG_F16, 1, (int64_t[]){1}, NULL);
  c.o[1] = opnd(x, AG_F16, 1, (int64_t[]){R}, NULL);
  c.i[0] = 1, c.i[1] = R, c.i[2] = 1, c.s[0] = 1;
  prun(&c);
  assert_int_equal(out, ag_f32_to_f16(ref_S(xf, R)));
  free(x), free(xf);
}

/* ---- elementwise ---- */

/* Every unary sub-op on 1 and 2 threads (n above the split threshold). */
static void test_unary_threads(void **state) {
  (void)state;
  const int64_t n = 300007;
  float *x = fvec(n, -3, 3), *y = malloc(sizeof(float) * (size_t)n);
  for (int sub = 0; sub < AG_UNARY_COUNT; sub++) {
    ag_kernel_call c = pcall(AG_K_UNARY, sub);
    c.n_operands = 2;
    c.o[0] = opnd(y, AG_F32, 1, &n, NULL);
    c.o[1] = opnd(x, AG_F32, 1, &n, NULL);
    c.s[0] = 1.5, c.s[1] = -0.5;
    char what[64];
    snprintf(what, sizeof what, "unary %d", sub);
    threads_same(&c, y, n, NULL, NULL, what);
  }
  free(x), free(y);
}

/* No contraction: AFFINE x*s0 + s1 and the binary add a + s0*b equal a
 * volatile-stepped evaluation (two roundings) where a fused one differs. */
static void test_no_contraction(void **state) {
  (void)state;
  enum { N = 1024 };
  float x[N], y[N], b[N], o[N];
  for (int i = 0; i < N; i++) {
    x[i] = 1.0f + (float)i * 0x1p-12f;
    b[i] = frand(-1, 1);
  }
  const double s0 = 1.0 + 0x1p-12, s1 = -1.0 - 0x1p-11;
  ag_kernel_call c = pcall(AG_K_UNARY, AG_U_AFFINE);
  c.n_operands = 2;
  c.o[0] = opnd(y, AG_F32, 1, (int64_t[]){N}, NULL);
  c.o[1] = opnd(x, AG_F32, 1, (int64_t[]){N}, NULL);
  c.s[0] = s0, c.s[1] = s1;
  prun(&c);
  int fused_differs = 0;
  for (int i = 0; i < N; i++) {
    volatile float p = x[i] * (float)s0;
    volatile float r = p + (float)s1;
    if (fmaf(x[i], (float)s0, (float)s1) != r) fused_differs++;
    o[i] = r;
  }
  assert_true(fused_differs > 0);
  same_bits(o, y, N, "affine");
  c = pcall(AG_K_BINARY, AG_B_ADD);
  c.n_operands = 3;
  c.o[0] = opnd(y, AG_F32, 1, (int64_t[]){N}, NULL);
  c.o[1] = opnd(b, AG_F32, 1, (int64_t[]){N}, NULL);
  c.o[2] = opnd(x, AG_F32, 1, (int64_t[]){N}, NULL);
  c.s[0] = s0;
  prun(&c);
  for (int i = 0; i < N; i++) {
    volatile float p = (float)s0 * x[i];
    volatile float r = b[i] + p;
    o[i] = r;
  }
  same_bits(o, y, N, "add");
}

/* ---- MATMUL ---- */

static void ref_matmul(int64_t M, int64_t N, int64_t K, const float *a, int64_t ars, int64_t acs, const float *b,
                       int64_t brs, int64_t bcs, double alpha, double beta, const float *c0, float *out) {
  for (int64_t m = 0; m < M; m++)
    for (int64_t n = 0; n < N; n++) {
      volatile float acc = 0.0f;
      for (int64_t k = 0; k < K; k++) {
        volatile float t = a[m * ars + k * acs] * b[k * brs + n * bcs];
        acc = acc + t;
      }
      float r = acc;
      if (alpha != 1) {
        volatile float t = (float)alpha * r;
        r = t;
      }
      if (beta != 0) {
        volatile float t = (float)beta * c0[m * N + n];
        volatile float u = r + t;
        r = u;
      }
      out[m * N + n] = r;
    }
}

typedef struct mmfill {
  float *c, *c0;
  int64_t n;
} mmfill;
static void mm_refill(void *ctx) {
  mmfill *f = ctx;
  memcpy(f->c, f->c0, sizeof(float) * (size_t)f->n);
}

static void matmul_case(int64_t Bn, int64_t M, int64_t N, int64_t K, bool ta, bool tb, double alpha, double beta,
                        bool bcast_b) {
  float *a = fvec(Bn * M * K, -1, 1), *b = fvec(Bn * K * N, -1, 1), *c0 = fvec(Bn * M * N, -1, 1);
  float *c = malloc(sizeof(float) * (size_t)(Bn * M * N)), *ref = malloc(sizeof(float) * (size_t)(Bn * M * N));
  const int64_t ars = ta ? 1 : K, acs = ta ? M : 1, brs = tb ? 1 : N, bcs = tb ? K : 1;
  ag_kernel_call cl = pcall(AG_K_MATMUL, 0);
  cl.n_operands = 3;
  cl.o[0] = opnd(c, AG_F32, 3, (int64_t[]){Bn, M, N}, NULL);
  cl.o[1] = opnd(a, AG_F32, 3, (int64_t[]){Bn, M, K}, (int64_t[]){M * K, ars, acs});
  cl.o[2] = opnd(b, AG_F32, 3, (int64_t[]){Bn, K, N}, (int64_t[]){bcast_b ? 0 : K * N, brs, bcs});
  cl.s[0] = alpha, cl.s[1] = beta;
  mmfill f = {c, c0, Bn * M * N};
  char what[128];
  snprintf(what, sizeof what, "matmul %lldx[%lld,%lld,%lld] ta %d tb %d", (long long)Bn, (long long)M, (long long)N,
           (long long)K, ta, tb);
  threads_same(&cl, c, Bn * M * N, mm_refill, &f, what);
  for (int64_t bi = 0; bi < Bn; bi++)
    ref_matmul(M, N, K, a + bi * M * K, ars, acs, b + (bcast_b ? 0 : bi * K * N), brs, bcs, alpha, beta,
               c0 + bi * M * N, ref + bi * M * N);
  same_bits(ref, c, Bn * M * N, what);
  free(a), free(b), free(c0), free(c), free(ref);
}

static void test_matmul(void **state) {
  (void)state;
  matmul_case(1, 1, 1, 1, false, false, 1, 0, false);
  matmul_case(1, 5, 7, 0, false, false, 1, 0, false);
  matmul_case(1, 3, 5, 7, false, false, 1, 0, false);
  matmul_case(1, 131, 173, 67, false, false, 1, 0, false);
  matmul_case(1, 131, 173, 67, true, false, 0.5, 0, false);
  matmul_case(1, 131, 173, 67, false, true, 1, 1, false);
  matmul_case(1, 131, 173, 67, true, true, -2, 0.25, false);
  matmul_case(3, 67, 45, 301, false, false, 1, 0, true);
  matmul_case(2, 201, 301, 97, false, true, 1, 0, false); /* above the split threshold */
}

/* f16 operands: exact loads, f32 accumulation, one rounding. */
static void test_matmul_f16(void **state) {
  (void)state;
  enum { M = 9, N = 13, K = 70 };
  uint16_t a[M * K], b[K * N], c[M * N];
  float af[M * K], bf[K * N], ref[M * N];
  for (int i = 0; i < M * K; i++) a[i] = ag_f32_to_f16(frand(-1, 1)), af[i] = ag_f16_to_f32(a[i]);
  for (int i = 0; i < K * N; i++) b[i] = ag_f32_to_f16(frand(-1, 1)), bf[i] = ag_f16_to_f32(b[i]);
  ag_kernel_call cl = pcall(AG_K_MATMUL, 0);
  cl.n_operands = 3;
  cl.o[0] = opnd(c, AG_F16, 2, (int64_t[]){M, N}, NULL);
  cl.o[1] = opnd(a, AG_F16, 2, (int64_t[]){M, K}, NULL);
  cl.o[2] = opnd(b, AG_F16, 2, (int64_t[]){K, N}, NULL);
  cl.s[0] = 1, cl.s[1] = 0;
  prun(&cl);
  ref_matmul(M, N, K, af, K, 1, bf, N, 1, 1, 0, NULL, ref);
  for (int i = 0; i < M * N; i++) assert_int_equal(c[i], ag_f32_to_f16(ref[i]));
}


/* ---- row ops ---- */

static void ref_softmax_row(bool logv, const float *x, float *y, int64_t n) {
  float mx = -INFINITY;
  for (int64_t j = 0; j < n; j++)
    if (x[j] > mx) mx = x[j];
  float *e = malloc(sizeof(float) * (size_t)n);
  for (int64_t j = 0; j < n; j++) e[j] = agp_exp(x[j] - mx);
  float s = ref_S(e, n);
  for (int64_t j = 0; j < n; j++) {
    if (logv) {
      volatile float d = x[j] - mx;
      y[j] = d - agp_log(s);
    } else {
      y[j] = agp_div(e[j], s);
    }
  }
  free(e);
}

static void test_softmax(void **state) {
  (void)state;
  enum { R = 67, C = 2001 };
  float *x = fvec(R * C, -8, 8), *y = malloc(sizeof(float) * R * C), *ref = malloc(sizeof(float) * C);
  float *dy = fvec(R * C, -1, 1), *dx = malloc(sizeof(float) * R * C);
  x[5] = NAN; /* row 0: the NaN reaches every output through S */
  x[C + 3] = INFINITY;
  /* row 2: a zero maximum, -0 before +0 (the first zero is the max) */
  for (int j = 0; j < C; j++) x[2 * C + j] = -fabsf(x[2 * C + j]) - 1.0f;
  x[2 * C + 10] = -0.0f, x[2 * C + 20] = 0.0f;
  for (int v = 0; v < 2; v++) {
    const int variant = v ? AG_KV_LOG_SOFTMAX : AG_KV_SOFTMAX;
    ag_kernel_call c = pcall(AG_K_SOFTMAX, variant);
    c.n_operands = 2;
    c.o[0] = opnd(y, AG_F32, 2, (int64_t[]){R, C}, NULL);
    c.o[1] = opnd(x, AG_F32, 2, (int64_t[]){R, C}, NULL);
    c.i[0] = R, c.i[1] = C;
    threads_same(&c, y, R * C, NULL, NULL, v ? "log_softmax" : "softmax");
    for (int r = 0; r < R; r++) {
      ref_softmax_row(v, x + r * C, ref, C);
      same_bits(ref, y + r * C, C, v ? "log_softmax ref" : "softmax ref");
    }
    ag_kernel_call b = pcall(AG_K_SOFTMAX_BWD, variant);
    b.n_operands = 3;
    b.o[0] = opnd(dx, AG_F32, 2, (int64_t[]){R, C}, NULL);
    b.o[1] = opnd(dy, AG_F32, 2, (int64_t[]){R, C}, NULL);
    b.o[2] = opnd(y, AG_F32, 2, (int64_t[]){R, C}, NULL);
    b.i[0] = R, b.i[1] = C;
    threads_same(&b, dx, R * C, NULL, NULL, v ? "log_softmax_bwd" : "softmax_bwd");
  }
  free(x), free(y), free(ref), free(dy), free(dx);
}

static void test_cross_entropy(void **state) {
  (void)state;
  enum { R = 301, C = 1001 };
  float *x = fvec(R * C, -5, 5), *loss = malloc(sizeof(float) * R), *dl = malloc(sizeof(float) * R * C);
  float *g = fvec(R, 0.5f, 1.5f);
  int32_t t[R];
  for (int i = 0; i < R; i++) t[i] = i % 7 == 0 ? -100 : (i * 37) % C;
  ag_kernel_call c = pcall(AG_K_CROSS_ENTROPY, AG_KV_IDX32);
  c.n_operands = 3;
  c.o[0] = opnd(loss, AG_F32, 1, (int64_t[]){R}, NULL);
  c.o[1] = opnd(x, AG_F32, 2, (int64_t[]){R, C}, NULL);
  c.o[2] = opnd(t, AG_I32, 1, (int64_t[]){R}, NULL);
  c.i[0] = R, c.i[1] = C, c.i[2] = -100;
  threads_same(&c, loss, R, NULL, NULL, "cross_entropy");
  for (int i = 0; i < R; i++) {
    float mx = -INFINITY, *row = x + i * C;
    for (int j = 0; j < C; j++) mx = row[j] > mx ? row[j] : mx;
    float e[C];
    for (int j = 0; j < C; j++) e[j] = agp_exp(row[j] - mx);
    volatile float lse = mx + agp_log(ref_S(e, C));
    float want = t[i] == -100 ? 0.0f : lse - row[t[i]];
    same_bits(&want, &loss[i], 1, "cross_entropy ref");
  }
  ag_kernel_call b = pcall(AG_K_CROSS_ENTROPY_BWD, AG_KV_IDX32);
  b.n_operands = 4;
  b.o[0] = opnd(dl, AG_F32, 2, (int64_t[]){R, C}, NULL);
  b.o[1] = opnd(x, AG_F32, 2, (int64_t[]){R, C}, NULL);
  b.o[2] = opnd(t, AG_I32, 1, (int64_t[]){R}, NULL);
  b.o[3] = opnd(g, AG_F32, 1, (int64_t[]){R}, NULL);
  b.i[0] = R, b.i[1] = C, b.i[2] = -100;
  threads_same(&b, dl, R * C, NULL, NULL, "cross_entropy_bwd");
  free(x), free(loss), free(dl), free(g);
}

static void test_layernorm(void **state) {
  (void)state;
  enum { R = 131, D = 1023 };
  float *x = fvec(R * D, -3, 3), *w = fvec(D, 0.5f, 1.5f), *bb = fvec(D, -1, 1);
  float *y = malloc(sizeof(float) * R * D), *mean = malloc(sizeof(float) * R), *rstd = malloc(sizeof(float) * R);
  const double eps = 1e-5;
  ag_kernel_call c = pcall(AG_K_LAYERNORM, 0);
  c.n_operands = 6;
  c.o[0] = opnd(y, AG_F32, 2, (int64_t[]){R, D}, NULL);
  c.o[1] = opnd(x, AG_F32, 2, (int64_t[]){R, D}, NULL);
  c.o[2] = opnd(w, AG_F32, 1, (int64_t[]){D}, NULL);
  c.o[3] = opnd(bb, AG_F32, 1, (int64_t[]){D}, NULL);
  c.o[4] = opnd(mean, AG_F32, 1, (int64_t[]){R}, NULL);
  c.o[5] = opnd(rstd, AG_F32, 1, (int64_t[]){R}, NULL);
  c.i[0] = R, c.i[1] = D, c.s[0] = eps;
  threads_same(&c, y, R * D, NULL, NULL, "layernorm");
  /* the reference, from the table */
  float t[D], ry[D];
  for (int r = 0; r < R; r++) {
    const float *xr = x + r * D, d_f = (float)D;
    float mu = agp_div(ref_S(xr, D), d_f);
    for (int j = 0; j < D; j++) {
      volatile float dd = xr[j] - mu;
      t[j] = dd * dd;
    }
    float var = agp_div(ref_S(t, D), d_f);
    volatile float ve = var + (float)eps;
    float rs = agp_div(1.0f, agp_sqrt(ve));
    for (int j = 0; j < D; j++) {
      volatile float v = (xr[j] - mu) * rs;
      v = v * w[j];
      v = v + bb[j];
      ry[j] = v;
    }
    same_bits(&mu, &mean[r], 1, "layernorm mean");
    same_bits(&rs, &rstd[r], 1, "layernorm rstd");
    same_bits(ry, y + r * D, D, "layernorm ref");
  }
  /* backward with dw, db */
  float *dy = fvec(R * D, -1, 1), *dx = malloc(sizeof(float) * R * D), *dw = malloc(sizeof(float) * D),
        *db = malloc(sizeof(float) * D), *first = malloc(sizeof(float) * 2 * D);
  ag_kmulti ml;
  memset(&ml, 0, sizeof ml);
  ml.count = 2;
  ml.t[0] = (ag_kmulti_entry){.base = dw, .dtype = AG_F32, .numel = D};
  ml.t[1] = (ag_kmulti_entry){.base = db, .dtype = AG_F32, .numel = D};
  ag_kernel_call b = pcall(AG_K_LAYERNORM_BWD, 0);
  b.n_operands = 6;
  b.o[0] = opnd(dx, AG_F32, 2, (int64_t[]){R, D}, NULL);
  b.o[1] = opnd(dy, AG_F32, 2, (int64_t[]){R, D}, NULL);
  b.o[2] = opnd(x, AG_F32, 2, (int64_t[]){R, D}, NULL);
  b.o[3] = opnd(mean, AG_F32, 1, (int64_t[]){R}, NULL);
  b.o[4] = opnd(rstd, AG_F32, 1, (int64_t[]){R}, NULL);
  b.o[5] = opnd(w, AG_F32, 1, (int64_t[]){D}, NULL);
  b.i[0] = R, b.i[1] = D;
  b.multi = &ml;
  assert_int_equal(ag_set_num_threads(1), AG_OK);
  prun(&b);
  memcpy(first, dw, sizeof(float) * D);
  memcpy(first + D, db, sizeof(float) * D);
  threads_same(&b, dx, R * D, NULL, NULL, "layernorm_bwd dx");
  same_bits(first, dw, D, "layernorm_bwd dw");
  same_bits(first + D, db, D, "layernorm_bwd db");
  /* dw_j = S over rows of dy * xh */
  float *col = malloc(sizeof(float) * R);
  for (int j = 0; j < D; j++) {
    for (int r = 0; r < R; r++) {
      volatile float xh = (x[r * D + j] - mean[r]) * rstd[r];
      col[r] = dy[r * D + j] * xh;
    }
    float want = ref_S(col, R);
    same_bits(&want, &dw[j], 1, "layernorm_bwd dw ref");
  }
  free(col);
  free(x), free(w), free(bb), free(y), free(mean), free(rstd), free(dy), free(dx), free(dw), free(db), free(first);
}

static void test_rmsnorm(void **state) {
  (void)state;
  enum { R = 257, D = 777 };
  float *x = fvec(R * D, -3, 3), *w = fvec(D, 0.5f, 1.5f), *y = malloc(sizeof(float) * R * D),
        *rstd = malloc(sizeof(float) * R);
  ag_kernel_call c = pcall(AG_K_RMSNORM, 0);
  c.n_operands = 4;
  c.o[0] = opnd(y, AG_F32, 2, (int64_t[]){R, D}, NULL);
  c.o[1] = opnd(x, AG_F32, 2, (int64_t[]){R, D}, NULL);
  c.o[2] = opnd(w, AG_F32, 1, (int64_t[]){D}, NULL);
  c.o[3] = opnd(rstd, AG_F32, 1, (int64_t[]){R}, NULL);
  c.i[0] = R, c.i[1] = D, c.s[0] = 1e-6;
  threads_same(&c, y, R * D, NULL, NULL, "rmsnorm");
  float *dy = fvec(R * D, -1, 1), *dx = malloc(sizeof(float) * R * D), *dw = malloc(sizeof(float) * D);
  ag_kmulti ml;
  memset(&ml, 0, sizeof ml);
  ml.count = 1;
  ml.t[0] = (ag_kmulti_entry){.base = dw, .dtype = AG_F32, .numel = D};
  ag_kernel_call b = pcall(AG_K_RMSNORM_BWD, 0);
  b.n_operands = 5;
  b.o[0] = opnd(dx, AG_F32, 2, (int64_t[]){R, D}, NULL);
  b.o[1] = opnd(dy, AG_F32, 2, (int64_t[]){R, D}, NULL);
  b.o[2] = opnd(x, AG_F32, 2, (int64_t[]){R, D}, NULL);
  b.o[3] = opnd(rstd, AG_F32, 1, (int64_t[]){R}, NULL);
  b.o[4] = opnd(w, AG_F32, 1, (int64_t[]){D}, NULL);
  b.i[0] = R, b.i[1] = D;
  b.multi = &ml;
  threads_same(&b, dx, R * D, NULL, NULL, "rmsnorm_bwd dx");
  float *dw1 = malloc(sizeof(float) * D);
  memcpy(dw1, dw, sizeof(float) * D);
  assert_int_equal(ag_set_num_threads(1), AG_OK);
  prun(&b);
  same_bits(dw1, dw, D, "rmsnorm_bwd dw");
  free(x), free(w), free(y), free(rstd), free(dy), free(dx), free(dw), free(dw1);
}

static void test_logsumexp(void **state) {
  (void)state;
  enum { O = 7, R = 3001, I = 29 };
  float *x = fvec(O * R * I, -10, 10), *out = malloc(sizeof(float) * O * I);
  ag_kernel_call c = pcall(AG_K_LOGSUMEXP, 0);
  c.n_operands = 2;
  c.o[0] = opnd(out, AG_F32, 2, (int64_t[]){O, I}, NULL);
  c.o[1] = opnd(x, AG_F32, 3, (int64_t[]){O, R, I}, NULL);
  c.i[0] = O, c.i[1] = R, c.i[2] = I;
  threads_same(&c, out, O * I, NULL, NULL, "logsumexp");
  free(x), free(out);
}

/* ---- optimizers and the sum of squares ---- */

typedef struct optfill {
  float *dst[4], *src[4];
  int64_t n;
} optfill;
static void opt_refill(void *ctx) {
  optfill *f = ctx;
  for (int k = 0; k < 4; k++)
    if (f->dst[k]) memcpy(f->dst[k], f->src[k], sizeof(float) * (size_t)f->n);
}

static void test_adamw(void **state) {
  (void)state;
  enum { N = 300001 };
  float *p0 = fvec(N, -1, 1), *g = fvec(N, -1, 1), *m0 = fvec(N, -0.1f, 0.1f), *v0 = fvec(N, 0, 0.01f);
  float *p = malloc(sizeof(float) * N), *m = malloc(sizeof(float) * N), *v = malloc(sizeof(float) * N);
  float inv = 0.5f;
  ag_kmulti ml;
  memset(&ml, 0, sizeof ml);
  ml.count = 4;
  ml.t[0] = (ag_kmulti_entry){.base = p, .dtype = AG_F32, .numel = N};
  ml.t[1] = (ag_kmulti_entry){.base = g, .dtype = AG_F32, .numel = N};
  ml.t[2] = (ag_kmulti_entry){.base = m, .dtype = AG_F32, .numel = N};
  ml.t[3] = (ag_kmulti_entry){.base = v, .dtype = AG_F32, .numel = N};
  const double lr = 1e-3, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.01, bc1 = 1 - pow(b1, 3), bc2 = 1 - pow(b2, 3);
  ag_kernel_call c = pcall(AG_K_ADAMW, 0);
  c.n_operands = 2;
  c.o[0] = opnd(&inv, AG_F32, 0, NULL, NULL);
  c.s[0] = lr, c.s[1] = b1, c.s[2] = b2, c.s[3] = eps, c.s[4] = wd, c.s[5] = bc1, c.s[6] = bc2;
  c.multi = &ml;
  optfill f = {{p, m, v, NULL}, {p0, m0, v0, NULL}, N};
  threads_same(&c, p, N, opt_refill, &f, "adamw");
  /* the reference */
  const float b1f = (float)b1, b2f = (float)b2, lrf = (float)lr, wdf = (float)wd, epsf = (float)eps,
              bc1f = (float)bc1, bc2f = (float)bc2;
  for (int64_t i = 0; i < N; i++) {
    volatile float gi = g[i] * inv;
    volatile float c1 = 1.0f - b1f, c2 = 1.0f - b2f;
    volatile float t1 = b1f * m0[i], t2 = c1 * gi;
    volatile float mi = t1 + t2;
    volatile float gg = gi * gi, t3 = b2f * v0[i], t4 = c2 * gg;
    volatile float vi = t3 + t4;
    volatile float lw = lrf * wdf, dec = 1.0f - lw;
    volatile float pi = p0[i] * dec;
    float mh = agp_div(mi, bc1f), vh = agp_div(vi, bc2f);
    volatile float den = agp_sqrt(vh) + epsf;
    volatile float st = lrf * agp_div(mh, den);
    volatile float pn = pi - st;
    float want[3] = {pn, mi, vi}, got[3] = {p[i], m[i], v[i]};
    same_bits(want, got, 3, "adamw ref");
  }
  free(p0), free(g), free(m0), free(v0), free(p), free(m), free(v);
}

static void test_sgd_sumsq(void **state) {
  (void)state;
  enum { N = 300001 };
  float *p0 = fvec(N, -1, 1), *g = fvec(N, -1, 1), *b0 = fvec(N, -0.1f, 0.1f);
  float *p = malloc(sizeof(float) * N), *b = malloc(sizeof(float) * N);
  ag_kmulti ml;
  memset(&ml, 0, sizeof ml);
  ml.count = 3;
  ml.t[0] = (ag_kmulti_entry){.base = p, .dtype = AG_F32, .numel = N};
  ml.t[1] = (ag_kmulti_entry){.base = g, .dtype = AG_F32, .numel = N};
  ml.t[2] = (ag_kmulti_entry){.base = b, .dtype = AG_F32, .numel = N};
  ag_kernel_call c = pcall(AG_K_SGD, 0);
  c.s[0] = 0.1, c.s[1] = 0.9, c.s[2] = 0.1, c.s[3] = 1e-4, c.s[4] = 1, c.s[5] = 0;
  c.multi = &ml;
  optfill f = {{p, b, NULL, NULL}, {p0, b0, NULL, NULL}, N};
  threads_same(&c, p, N, opt_refill, &f, "sgd");
  /* sum of squares over three tensors, one of them f16 */
  enum { N2 = 1000, N3 = 70000 };
  uint16_t *h = malloc(2 * N3);
  float *hf = malloc(4 * N3), out;
  for (int i = 0; i < N3; i++) h[i] = ag_f32_to_f16(frand(-1, 1)), hf[i] = ag_f16_to_f32(h[i]);
  memset(&ml, 0, sizeof ml);
  ml.count = 3;
  ml.t[0] = (ag_kmulti_entry){.base = p0, .dtype = AG_F32, .numel = N};
  ml.t[1] = (ag_kmulti_entry){.base = g, .dtype = AG_F32, .numel = N2};
  ml.t[2] = (ag_kmulti_entry){.base = h, .dtype = AG_F16, .numel = N3};
  c = pcall(AG_K_SUMSQ, 0);
  c.n_operands = 1;
  c.o[0] = opnd(&out, AG_F32, 0, NULL, NULL);
  c.multi = &ml;
  threads_same(&c, &out, 1, NULL, NULL, "sumsq");
  float *sq = malloc(sizeof(float) * N), s3[3];
  for (int i = 0; i < N; i++) sq[i] = p0[i] * p0[i];
  s3[0] = ref_S(sq, N);
  for (int i = 0; i < N2; i++) sq[i] = g[i] * g[i];
  s3[1] = ref_S(sq, N2);
  for (int i = 0; i < N3; i++) sq[i] = hf[i] * hf[i];
  s3[2] = ref_S(sq, N3);
  float want = ref_S(s3, 3);
  same_bits(&want, &out, 1, "sumsq ref");
  free(p0), free(g), free(b0), free(p), free(b), free(h), free(hf), free(sq);
}


/* ---- random numbers, dropout, arange ---- */

static void test_random(void **state) {
  (void)state;
  enum { N = 300003 };
  float *u = malloc(sizeof(float) * N), *x = fvec(N, -1, 1), *y = malloc(sizeof(float) * N),
        *mk = malloc(sizeof(float) * N);
  ag_kernel_call c = pcall(AG_K_RAND_UNIFORM, 0);
  c.n_operands = 1;
  c.o[0] = opnd(u, AG_F32, 1, (int64_t[]){N}, NULL);
  c.s[0] = -0.3, c.s[1] = 1.7;
  c.seed = 42, c.offset = 7;
  threads_same(&c, u, N, NULL, NULL, "rand_uniform");
  for (int64_t i = 0; i < N; i += 997) {
    uint32_t r[4];
    ag_philox4x32(7 + (uint64_t)(i >> 2), 42, r);
    volatile float uu = (float)(r[i & 3] >> 8) * 0x1p-24f;
    volatile float t = uu * (float)(1.7 - -0.3);
    volatile float want = t + (float)-0.3;
    float w = want;
    same_bits(&w, &u[i], 1, "rand_uniform ref");
  }
  c = pcall(AG_K_RAND_NORMAL, 0);
  c.n_operands = 1;
  c.o[0] = opnd(u, AG_F32, 1, (int64_t[]){N}, NULL);
  c.s[0] = 0.5, c.s[1] = 2;
  c.seed = 43, c.offset = 9;
  threads_same(&c, u, N, NULL, NULL, "rand_normal");
  c = pcall(AG_K_DROPOUT, 0);
  c.n_operands = 3;
  c.o[0] = opnd(y, AG_F32, 1, (int64_t[]){N}, NULL);
  c.o[1] = opnd(x, AG_F32, 1, (int64_t[]){N}, NULL);
  c.o[2] = opnd(mk, AG_F32, 1, (int64_t[]){N}, NULL);
  c.s[0] = 0.3;
  c.seed = 44, c.offset = 11;
  threads_same(&c, y, N, NULL, NULL, "dropout");
  const float sc = (float)(1.0 / (1.0 - 0.3));
  for (int64_t i = 0; i < N; i += 991) {
    uint32_t r[4];
    ag_philox4x32(11 + (uint64_t)(i >> 2), 44, r);
    float uu = (float)(r[i & 3] >> 8) * 0x1p-24f, m = uu >= (float)0.3 ? sc : 0.0f;
    volatile float want = x[i] * m;
    float w = want;
    same_bits(&w, &y[i], 1, "dropout ref");
    same_bits(&m, &mk[i], 1, "dropout mask ref");
  }
  c = pcall(AG_K_ARANGE, 0);
  c.n_operands = 1;
  c.o[0] = opnd(u, AG_F32, 1, (int64_t[]){1000}, NULL);
  c.s[0] = 0.1, c.s[1] = 0.3;
  prun(&c);
  for (int i = 0; i < 1000; i++) {
    volatile float t = (float)i * (float)0.3;
    volatile float want = (float)0.1 + t;
    float w = want;
    same_bits(&w, &u[i], 1, "arange ref");
  }
  free(u), free(x), free(y), free(mk);
}


/* ---- convolution and pooling ---- */

typedef struct cgeom {
  int64_t N, Ci, H, W, Co, KH, KW, sh, sw, ph, pw, dh, dw, G, Ho, Wo;
} cgeom;

static void conv_call(ag_kernel_call *c, const cgeom *g) {
  c->s[0] = (double)g->sh, c->s[1] = (double)g->sw, c->s[2] = (double)g->ph, c->s[3] = (double)g->pw;
  c->s[4] = (double)g->dh, c->s[5] = (double)g->dw, c->s[6] = (double)g->G;
}

static void conv_case(cgeom g) {
  g.Ho = (g.H + 2 * g.ph - g.dh * (g.KH - 1) - 1) / g.sh + 1;
  g.Wo = (g.W + 2 * g.pw - g.dw * (g.KW - 1) - 1) / g.sw + 1;
  const int64_t cig = g.Ci / g.G, cog = g.Co / g.G;
  const int64_t nx = g.N * g.Ci * g.H * g.W, nw = g.Co * cig * g.KH * g.KW, ny = g.N * g.Co * g.Ho * g.Wo;
  float *x = fvec(nx, -1, 1), *w = fvec(nw, -1, 1), *bias = fvec(g.Co, -1, 1), *y = malloc(4 * (size_t)ny),
        *ref = malloc(4 * (size_t)ny), *dy = fvec(ny, -1, 1), *dx = malloc(4 * (size_t)nx),
        *rdx = malloc(4 * (size_t)nx), *dw = malloc(4 * (size_t)nw), *rdw = malloc(4 * (size_t)nw);
  const int64_t xs[4] = {g.N, g.Ci, g.H, g.W}, ws[4] = {g.Co, cig, g.KH, g.KW}, ys[4] = {g.N, g.Co, g.Ho, g.Wo};
  ag_kernel_call c = pcall(AG_K_CONV2D, 0);
  c.n_operands = 4;
  c.o[0] = opnd(y, AG_F32, 4, ys, NULL);
  c.o[1] = opnd(x, AG_F32, 4, xs, NULL);
  c.o[2] = opnd(w, AG_F32, 4, ws, NULL);
  c.o[3] = opnd(bias, AG_F32, 1, (int64_t[]){g.Co}, NULL);
  conv_call(&c, &g);
  threads_same(&c, y, ny, NULL, NULL, "conv2d");
  c = pcall(AG_K_CONV2D_BWD_INPUT, 0);
  c.n_operands = 3;
  c.o[0] = opnd(dx, AG_F32, 4, xs, NULL);
  c.o[1] = opnd(dy, AG_F32, 4, ys, NULL);
  c.o[2] = opnd(w, AG_F32, 4, ws, NULL);
  conv_call(&c, &g);
  threads_same(&c, dx, nx, NULL, NULL, "conv2d_bwd_input");
  c = pcall(AG_K_CONV2D_BWD_WEIGHT, 0);
  c.n_operands = 3;
  c.o[0] = opnd(dw, AG_F32, 4, ws, NULL);
  c.o[1] = opnd(dy, AG_F32, 4, ys, NULL);
  c.o[2] = opnd(x, AG_F32, 4, xs, NULL);
  conv_call(&c, &g);
  threads_same(&c, dw, nw, NULL, NULL, "conv2d_bwd_weight");
  /* references from the table */
  for (int64_t n = 0; n < g.N; n++)
    for (int64_t co = 0; co < g.Co; co++)
      for (int64_t oh = 0; oh < g.Ho; oh++)
        for (int64_t ow = 0; ow < g.Wo; ow++) {
          volatile float acc = 0.0f;
          const int64_t gr = co / cog;
          for (int64_t ci = 0; ci < cig; ci++)
            for (int64_t kh = 0; kh < g.KH; kh++)
              for (int64_t kw = 0; kw < g.KW; kw++) {
                int64_t ih = oh * g.sh - g.ph + kh * g.dh, iw = ow * g.sw - g.pw + kw * g.dw;
                if (ih < 0 || ih >= g.H || iw < 0 || iw >= g.W) continue;
                volatile float t = x[((n * g.Ci + gr * cig + ci) * g.H + ih) * g.W + iw] *
                                   w[((co * cig + ci) * g.KH + kh) * g.KW + kw];
                acc = acc + t;
              }
          ref[((n * g.Co + co) * g.Ho + oh) * g.Wo + ow] = acc + bias[co];
        }
  same_bits(ref, y, ny, "conv2d ref");
  for (int64_t n = 0; n < g.N; n++)
    for (int64_t ci = 0; ci < g.Ci; ci++)
      for (int64_t h = 0; h < g.H; h++)
        for (int64_t wq = 0; wq < g.W; wq++) {
          volatile float acc = 0.0f;
          const int64_t gr = ci / cig;
          for (int64_t k = 0; k < cog; k++)
            for (int64_t kh = 0; kh < g.KH; kh++)
              for (int64_t kw = 0; kw < g.KW; kw++) {
                int64_t th = h + g.ph - kh * g.dh, tw = wq + g.pw - kw * g.dw;
                if (th < 0 || tw < 0 || th % g.sh || tw % g.sw || th / g.sh >= g.Ho || tw / g.sw >= g.Wo) continue;
                const int64_t co = gr * cog + k;
                volatile float t = dy[((n * g.Co + co) * g.Ho + th / g.sh) * g.Wo + tw / g.sw] *
                                   w[((co * cig + ci % cig) * g.KH + kh) * g.KW + kw];
                acc = acc + t;
              }
          rdx[((n * g.Ci + ci) * g.H + h) * g.W + wq] = acc;
        }
  same_bits(rdx, dx, nx, "conv2d_bwd_input ref");
  const int64_t L = g.N * g.Ho * g.Wo;
  float *terms = malloc(4 * (size_t)L);
  for (int64_t co = 0; co < g.Co; co++)
    for (int64_t ci = 0; ci < cig; ci++)
      for (int64_t kh = 0; kh < g.KH; kh++)
        for (int64_t kw = 0; kw < g.KW; kw++) {
          const int64_t gr = co / cog;
          for (int64_t n = 0; n < g.N; n++)
            for (int64_t oh = 0; oh < g.Ho; oh++)
              for (int64_t ow = 0; ow < g.Wo; ow++) {
                int64_t ih = oh * g.sh - g.ph + kh * g.dh, iw = ow * g.sw - g.pw + kw * g.dw;
                float t = 0.0f;
                if (ih >= 0 && ih < g.H && iw >= 0 && iw < g.W)
                  t = dy[((n * g.Co + co) * g.Ho + oh) * g.Wo + ow] * x[((n * g.Ci + gr * cig + ci) * g.H + ih) * g.W + iw];
                terms[(n * g.Ho + oh) * g.Wo + ow] = t;
              }
          rdw[((co * cig + ci) * g.KH + kh) * g.KW + kw] = ref_S(terms, L);
        }
  same_bits(rdw, dw, nw, "conv2d_bwd_weight ref");
  free(terms);
  free(x), free(w), free(bias), free(y), free(ref), free(dy), free(dx), free(rdx), free(dw), free(rdw);
}

static void test_conv2d(void **state) {
  (void)state;
  conv_case((cgeom){.N = 2, .Ci = 3, .H = 11, .W = 13, .Co = 5, .KH = 3, .KW = 3, .sh = 1, .sw = 1, .ph = 1, .pw = 1,
                    .dh = 1, .dw = 1, .G = 1});
  conv_case((cgeom){.N = 3, .Ci = 4, .H = 17, .W = 15, .Co = 6, .KH = 3, .KW = 2, .sh = 2, .sw = 3, .ph = 2, .pw = 1,
                    .dh = 2, .dw = 1, .G = 2});
  conv_case((cgeom){.N = 4, .Ci = 16, .H = 32, .W = 30, .Co = 16, .KH = 3, .KW = 3, .sh = 1, .sw = 1, .ph = 1,
                    .pw = 1, .dh = 1, .dw = 1, .G = 1}); /* splits across threads */
  ag__cpu_p_isa = 0; /* the baseline build against the same references */
  conv_case((cgeom){.N = 3, .Ci = 4, .H = 17, .W = 15, .Co = 6, .KH = 3, .KW = 2, .sh = 2, .sw = 3, .ph = 2, .pw = 1,
                    .dh = 2, .dw = 1, .G = 2});
  conv_case((cgeom){.N = 2, .Ci = 3, .H = 11, .W = 13, .Co = 5, .KH = 3, .KW = 3, .sh = 1, .sw = 1, .ph = 1, .pw = 1,
                    .dh = 1, .dw = 1, .G = 1});
  ag__cpu_p_isa = 2;
}

static void test_pool(void **state) {
  (void)state;
  enum { N = 4, C = 33, H = 37, W = 29 };
  for (int op = 0; op < AG_POOL_OP_COUNT; op++) {
    const int64_t kh = 3, kw = 2, sh = 2, sw = 2, ph = 1, pw = 1;
    const int64_t Ho = op == AG_P_ADAPTIVE_AVG ? 7 : (H + 2 * ph - kh) / sh + 1;
    const int64_t Wo = op == AG_P_ADAPTIVE_AVG ? 5 : (W + 2 * pw - kw) / sw + 1;
    float *x = fvec(N * C * H * W, -1, 1), *y = malloc(4 * (size_t)(N * C * Ho * Wo)),
          *dy = fvec(N * C * Ho * Wo, -1, 1), *dx = malloc(4 * (size_t)(N * C * H * W));
    int32_t *am = malloc(4 * (size_t)(N * C * Ho * Wo));
    ag_kernel_call c = pcall(AG_K_POOL2D, op);
    c.n_operands = 3;
    c.o[0] = opnd(y, AG_F32, 4, (int64_t[]){N, C, Ho, Wo}, NULL);
    c.o[1] = opnd(x, AG_F32, 4, (int64_t[]){N, C, H, W}, NULL);
    c.o[2] = opnd(am, AG_I32, 4, (int64_t[]){N, C, Ho, Wo}, NULL);
    c.s[0] = (double)sh, c.s[1] = (double)sw, c.s[2] = (double)ph, c.s[3] = (double)pw, c.s[4] = (double)kh;
    c.s[5] = (double)kw, c.s[6] = 0;
    threads_same(&c, y, N * C * Ho * Wo, NULL, NULL, "pool2d");
    c.op = AG_K_POOL2D_BWD;
    c.o[0] = opnd(dx, AG_F32, 4, (int64_t[]){N, C, H, W}, NULL);
    c.o[1] = opnd(dy, AG_F32, 4, (int64_t[]){N, C, Ho, Wo}, NULL);
    threads_same(&c, dx, N * C * H * W, NULL, NULL, "pool2d_bwd");
    free(x), free(y), free(dy), free(dx), free(am);
  }
}


/* ---- var, cumsum ---- */

static void test_var_cumsum(void **state) {
  (void)state;
  enum { O = 5, R = 2001, I = 67 };
  float *x = fvec(O * R * I, -2, 2), *out = malloc(sizeof(float) * O * I), *cs = malloc(sizeof(float) * O * R * I);
  float *col = malloc(sizeof(float) * R), *t = malloc(sizeof(float) * R);
  for (int v = 0; v < 2; v++) {
    ag_kernel_call c = pcall(AG_K_VAR, v ? AG_KV_STD : AG_KV_VAR);
    c.n_operands = 2;
    c.o[0] = opnd(out, AG_F32, 2, (int64_t[]){O, I}, NULL);
    c.o[1] = opnd(x, AG_F32, 3, (int64_t[]){O, R, I}, NULL);
    c.i[0] = O, c.i[1] = R, c.i[2] = I, c.s[0] = 1;
    threads_same(&c, out, O * I, NULL, NULL, v ? "std" : "var");
    for (int o = 0; o < O; o++)
      for (int i = 0; i < I; i++) {
        for (int k = 0; k < R; k++) col[k] = x[(o * R + k) * I + i];
        float mean = agp_div(ref_S(col, R), (float)R);
        for (int k = 0; k < R; k++) {
          volatile float d = col[k] - mean;
          t[k] = d * d;
        }
        float want = agp_div(ref_S(t, R), (float)(R - 1));
        if (v) want = agp_sqrt(want);
        same_bits(&want, &out[o * I + i], 1, "var ref");
      }
  }
  ag_kernel_call c = pcall(AG_K_CUMSUM, AG_KV_CUMSUM_SUFFIX);
  c.n_operands = 2;
  c.o[0] = opnd(cs, AG_F32, 3, (int64_t[]){O, R, I}, NULL);
  c.o[1] = opnd(x, AG_F32, 3, (int64_t[]){O, R, I}, NULL);
  c.i[0] = O, c.i[1] = R, c.i[2] = I;
  threads_same(&c, cs, O * R * I, NULL, NULL, "cumsum");
  for (int o = 0; o < O; o++)
    for (int i = 0; i < I; i += 7) {
      volatile float acc = 0.0f;
      for (int k = R - 1; k >= 0; k--) {
        acc = acc + x[(o * R + k) * I + i];
        float a = acc;
        same_bits(&a, &cs[(o * R + k) * I + i], 1, "cumsum ref");
      }
    }
  free(x), free(out), free(cs), free(col), free(t);
}


/* ---- every vector width gives the same bits ---- */

static void isa_same(const ag_kernel_call *c, float *out, int64_t n, refill_fn refill, void *ctx, const char *what) {
  float *first = malloc(sizeof(float) * (size_t)n);
  for (int isa = 0; isa <= 2; isa++) {
    ag__cpu_p_isa = isa;
    if (refill) refill(ctx);
    prun(c);
    if (isa == 0) memcpy(first, out, sizeof(float) * (size_t)n);
    else same_bits(first, out, n, what);
  }
  ag__cpu_p_isa = 2;
  free(first);
}

static void test_vector_widths(void **state) {
  (void)state;
  const int64_t n = 4099;
  float *x = fvec(n, -20, 20), *y = malloc(sizeof(float) * (size_t)n);
  x[0] = NAN, x[1] = INFINITY, x[2] = -INFINITY, x[3] = -0.0f, x[4] = 0x1p-140f, x[5] = 100.0f, x[6] = -100.0f;
  for (int sub = 0; sub < AG_UNARY_COUNT; sub++) {
    ag_kernel_call c = pcall(AG_K_UNARY, sub);
    c.n_operands = 2;
    c.o[0] = opnd(y, AG_F32, 1, &n, NULL);
    c.o[1] = opnd(x, AG_F32, 1, &n, NULL);
    c.s[0] = 1.5, c.s[1] = -0.5;
    char what[64];
    snprintf(what, sizeof what, "unary %d widths", sub);
    isa_same(&c, y, n, NULL, NULL, what);
  }
  float *b = fvec(n, -3, 3);
  for (int sub = 0; sub < AG_BINARY_COUNT; sub++) {
    ag_kernel_call c = pcall(AG_K_BINARY, sub);
    c.n_operands = 3;
    c.o[0] = opnd(y, AG_F32, 1, &n, NULL);
    c.o[1] = opnd(x, AG_F32, 1, &n, NULL);
    c.o[2] = opnd(b, AG_F32, 1, &n, NULL);
    c.s[0] = 0.75;
    const ag_binary_info *bi = ag_binary_info_of(sub);
    if (bi && bi->compare) continue; /* bool outputs */
    char what[64];
    snprintf(what, sizeof what, "binary %d widths", sub);
    isa_same(&c, y, n, NULL, NULL, what);
  }
  enum { M = 37, N = 75, K = 129 };
  float *a = fvec(M * K, -1, 1), *bm = fvec(K * N, -1, 1), *cm = malloc(sizeof(float) * M * N);
  ag_kernel_call c = pcall(AG_K_MATMUL, 0);
  c.n_operands = 3;
  c.o[0] = opnd(cm, AG_F32, 2, (int64_t[]){M, N}, NULL);
  c.o[1] = opnd(a, AG_F32, 2, (int64_t[]){M, K}, NULL);
  c.o[2] = opnd(bm, AG_F32, 2, (int64_t[]){K, N}, (int64_t[]){1, K});
  c.s[0] = 1;
  isa_same(&c, cm, M * N, NULL, NULL, "matmul widths");
  float *ref = malloc(sizeof(float) * M * N);
  ref_matmul(M, N, K, a, K, 1, bm, 1, K, 1, 0, NULL, ref);
  same_bits(ref, cm, M * N, "matmul widths ref");
  c = pcall(AG_K_SOFTMAX, AG_KV_SOFTMAX);
  c.n_operands = 2;
  c.o[0] = opnd(y, AG_F32, 2, (int64_t[]){1, n}, NULL);
  c.o[1] = opnd(b, AG_F32, 2, (int64_t[]){1, n}, NULL);
  c.i[0] = 1, c.i[1] = n;
  isa_same(&c, y, n, NULL, NULL, "softmax widths");
  free(x), free(y), free(b), free(a), free(bm), free(cm), free(ref);
}


/* ---- norm, batch norm, group norm ---- */

static void test_norms(void **state) {
  (void)state;
  enum { O = 3, R = 3001, I = 41 };
  float *x = fvec(O * R * I, -2, 2), *out = malloc(sizeof(float) * O * I);
  const int vs[3] = {AG_KV_NORM_L1, AG_KV_NORM_L2, AG_KV_NORM_INF};
  for (int v = 0; v < 3; v++) {
    ag_kernel_call c = pcall(AG_K_NORM, vs[v]);
    c.n_operands = 2;
    c.o[0] = opnd(out, AG_F32, 2, (int64_t[]){O, I}, NULL);
    c.o[1] = opnd(x, AG_F32, 3, (int64_t[]){O, R, I}, NULL);
    c.i[0] = O, c.i[1] = R, c.i[2] = I;
    threads_same(&c, out, O * I, NULL, NULL, "norm");
  }
  /* batch norm statistics and the affine map */
  enum { N = 9, C = 13, HW = 4097 };
  float *a = fvec(N * C * HW, -2, 2), *b = fvec(N * C * HW, -1, 1), *mu = fvec(C, -0.1f, 0.1f),
        *st = malloc(sizeof(float) * 2 * C), *coef = fvec(4 * C, -1, 1), *y = malloc(sizeof(float) * N * C * HW);
  for (int v = 0; v < 2; v++) {
    ag_kernel_call c = pcall(AG_K_BN_STATS, v ? AG_KV_BN_SUMS : AG_KV_BN_MEAN_VAR);
    c.n_operands = 4;
    c.o[0] = opnd(st, AG_F32, 2, (int64_t[]){2, C}, NULL);
    c.o[1] = opnd(a, AG_F32, 3, (int64_t[]){N, C, HW}, NULL);
    if (v) {
      c.o[2] = opnd(b, AG_F32, 3, (int64_t[]){N, C, HW}, NULL);
      c.o[3] = opnd(mu, AG_F32, 1, (int64_t[]){C}, NULL);
    }
    c.i[0] = N, c.i[1] = C, c.i[2] = HW;
    threads_same(&c, st, 2 * C, NULL, NULL, "bn_stats");
    /* the mean: S over (n, hw) of channel 5 */
    float *t = malloc(sizeof(float) * N * HW);
    for (int n = 0; n < N; n++) memcpy(t + n * HW, a + (n * C + 5) * HW, sizeof(float) * HW);
    float want = ref_S(t, N * HW);
    if (!v) want = agp_div(want, (float)(N * HW));
    same_bits(&want, &st[5], 1, "bn_stats ref");
    free(t);
    c = pcall(AG_K_BN_APPLY, v ? AG_KV_BN_AFFINE_B : AG_KV_BN_AFFINE);
    c.n_operands = 4;
    c.o[0] = opnd(y, AG_F32, 3, (int64_t[]){N, C, HW}, NULL);
    c.o[1] = opnd(a, AG_F32, 3, (int64_t[]){N, C, HW}, NULL);
    c.o[2] = opnd(coef, AG_F32, 2, (int64_t[]){v ? 4 : 2, C}, NULL);
    if (v) c.o[3] = opnd(b, AG_F32, 3, (int64_t[]){N, C, HW}, NULL);
    c.i[0] = N, c.i[1] = C, c.i[2] = HW;
    threads_same(&c, y, N * C * HW, NULL, NULL, "bn_apply");
  }
  /* group norm and its backward with dw, db */
  enum { G = 4, GC = 12, GHW = 999, GN = 7 };
  float *gx = fvec(GN * GC * GHW, -2, 2), *gw = fvec(GC, 0.5f, 1.5f), *gb = fvec(GC, -1, 1),
        *gy = malloc(sizeof(float) * GN * GC * GHW), *gm = malloc(sizeof(float) * GN * G),
        *gr = malloc(sizeof(float) * GN * G), *gdy = fvec(GN * GC * GHW, -1, 1),
        *gdx = malloc(sizeof(float) * GN * GC * GHW), *gdw = malloc(sizeof(float) * GC), *gdb = malloc(sizeof(float) * GC),
        *keep = malloc(sizeof(float) * 2 * GC);
  ag_kernel_call c = pcall(AG_K_GROUP_NORM, 0);
  c.n_operands = 6;
  c.o[0] = opnd(gy, AG_F32, 3, (int64_t[]){GN, GC, GHW}, NULL);
  c.o[1] = opnd(gx, AG_F32, 3, (int64_t[]){GN, GC, GHW}, NULL);
  c.o[2] = opnd(gw, AG_F32, 1, (int64_t[]){GC}, NULL);
  c.o[3] = opnd(gb, AG_F32, 1, (int64_t[]){GC}, NULL);
  c.o[4] = opnd(gm, AG_F32, 2, (int64_t[]){GN, G}, NULL);
  c.o[5] = opnd(gr, AG_F32, 2, (int64_t[]){GN, G}, NULL);
  c.i[0] = GN, c.i[1] = GC, c.i[2] = GHW, c.i[3] = G, c.s[0] = 1e-5;
  threads_same(&c, gy, GN * GC * GHW, NULL, NULL, "group_norm");
  ag_kmulti ml;
  memset(&ml, 0, sizeof ml);
  ml.count = 2;
  ml.t[0] = (ag_kmulti_entry){.base = gdw, .dtype = AG_F32, .numel = GC};
  ml.t[1] = (ag_kmulti_entry){.base = gdb, .dtype = AG_F32, .numel = GC};
  c = pcall(AG_K_GROUP_NORM_BWD, 0);
  c.n_operands = 6;
  c.o[0] = opnd(gdx, AG_F32, 3, (int64_t[]){GN, GC, GHW}, NULL);
  c.o[1] = opnd(gdy, AG_F32, 3, (int64_t[]){GN, GC, GHW}, NULL);
  c.o[2] = opnd(gx, AG_F32, 3, (int64_t[]){GN, GC, GHW}, NULL);
  c.o[3] = opnd(gm, AG_F32, 2, (int64_t[]){GN, G}, NULL);
  c.o[4] = opnd(gr, AG_F32, 2, (int64_t[]){GN, G}, NULL);
  c.o[5] = opnd(gw, AG_F32, 1, (int64_t[]){GC}, NULL);
  c.i[0] = GN, c.i[1] = GC, c.i[2] = GHW, c.i[3] = G;
  c.multi = &ml;
  assert_int_equal(ag_set_num_threads(1), AG_OK);
  prun(&c);
  memcpy(keep, gdw, sizeof(float) * GC);
  memcpy(keep + GC, gdb, sizeof(float) * GC);
  threads_same(&c, gdx, GN * GC * GHW, NULL, NULL, "group_norm_bwd");
  same_bits(keep, gdw, GC, "group_norm_bwd dw");
  same_bits(keep + GC, gdb, GC, "group_norm_bwd db");
  free(x), free(out), free(a), free(b), free(mu), free(st), free(coef), free(y);
  free(gx), free(gw), free(gb), free(gy), free(gm), free(gr), free(gdy), free(gdx), free(gdw), free(gdb), free(keep);
}


static void test_interpolate(void **state) {
  (void)state;
  enum { P = 37, H = 13, W = 11, HO = 29, WO = 23 };
  float *x = fvec(P * H * W, -1, 1), *y = malloc(sizeof(float) * P * HO * WO), *dy = fvec(P * HO * WO, -1, 1),
        *dx = malloc(sizeof(float) * P * H * W);
  for (int v = 0; v < 2; v++)
    for (int align = 0; align < 2; align++) {
      ag_kernel_call c = pcall(AG_K_INTERPOLATE, v ? AG_KV_INTERP_BILINEAR : AG_KV_INTERP_NEAREST);
      c.n_operands = 2;
      c.o[0] = opnd(y, AG_F32, 4, (int64_t[]){1, P, HO, WO}, NULL);
      c.o[1] = opnd(x, AG_F32, 4, (int64_t[]){1, P, H, W}, NULL);
      c.s[0] = align ? (double)(H - 1) / (HO - 1) : (double)H / HO;
      c.s[1] = align ? (double)(W - 1) / (WO - 1) : (double)W / WO;
      c.i[0] = align;
      threads_same(&c, y, P * HO * WO, NULL, NULL, "interpolate");
      c.op = AG_K_INTERPOLATE_BWD;
      c.o[0] = opnd(dx, AG_F32, 4, (int64_t[]){1, P, H, W}, NULL);
      c.o[1] = opnd(dy, AG_F32, 4, (int64_t[]){1, P, HO, WO}, NULL);
      threads_same(&c, dx, P * H * W, NULL, NULL, "interpolate_bwd");
    }
  free(x), free(y), free(dy), free(dx);
}

/* ---- (c) refusals, (d) the default mode ---- */

static void test_refusals(void **state) {
  (void)state;
  /* an op outside the list, through the dispatch: SDPA (the core composes
   * attention from the portable ops) */
  float q[2 * 4 * 8] = {0}, o[2 * 4 * 8];
  const int64_t qs[4] = {1, 2, 4, 8};
  ag_kernel_call c = pcall(AG_K_SDPA, 0);
  c.n_operands = 4;
  c.o[0] = opnd(o, AG_F32, 4, qs, NULL);
  c.o[1] = opnd(q, AG_F32, 4, qs, NULL);
  c.o[2] = opnd(q, AG_F32, 4, qs, NULL);
  c.o[3] = opnd(q, AG_F32, 4, qs, NULL);
  ag_kernel_error e;
  memset(&e, 0, sizeof e);
  assert_false(ag__cpu_supports_portable(AG_K_SDPA, 0, AG_F32));
  assert_true(ag__cpu_supports(AG_K_SDPA, 0, AG_F32));
  assert_int_equal(ag__cpu_run(&c, &e), AG_ERR_UNSUPPORTED);
  assert_non_null(strstr(ag_last_error(), ag_kop_name(AG_K_SDPA)));
  /* f64 */
  double xd[4] = {1, 2, 3, 4}, yd[4];
  c = pcall(AG_K_UNARY, AG_U_EXP);
  c.n_operands = 2;
  c.o[0] = opnd(yd, AG_F64, 1, (int64_t[]){4}, NULL);
  c.o[1] = opnd(xd, AG_F64, 1, (int64_t[]){4}, NULL);
  assert_false(ag__cpu_supports_portable(AG_K_UNARY, AG_U_EXP, AG_F64));
  assert_int_equal(ag__cpu_run(&c, &e), AG_ERR_UNSUPPORTED);
  assert_non_null(strstr(ag_last_error(), ag_kop_name(AG_K_UNARY)));
  /* f64 where exact by nature: casts, max; a sum rounds: refused */
  float xf[4] = {1, 2, 3, 4};
  c = pcall(AG_K_UNARY, AG_U_COPY);
  c.n_operands = 2;
  c.o[0] = opnd(yd, AG_F64, 1, (int64_t[]){4}, NULL);
  c.o[1] = opnd(xf, AG_F32, 1, (int64_t[]){4}, NULL);
  assert_true(ag__cpu_supports_portable(AG_K_UNARY, AG_U_COPY, AG_F64));
  prun(&c);
  assert_true(yd[3] == 4.0);
  c = pcall(AG_K_REDUCE, AG_R_MAX);
  c.n_operands = 2;
  c.o[0] = opnd(yd, AG_F64, 1, (int64_t[]){1}, NULL);
  c.o[1] = opnd(xd, AG_F64, 1, (int64_t[]){4}, NULL);
  c.i[0] = 1, c.i[1] = 4, c.i[2] = 1, c.s[0] = 1;
  prun(&c);
  assert_true(yd[0] == 4.0);
  c.sub = AG_R_SUM;
  assert_false(ag__cpu_supports_portable(AG_K_REDUCE, AG_R_SUM, AG_F64));
  assert_int_equal(ag__cpu_run(&c, &e), AG_ERR_UNSUPPORTED);
  assert_non_null(strstr(ag_last_error(), ag_kop_name(AG_K_REDUCE)));

  /* the public API: f64 refused in portable mode, runs in the default one */
  ag_scope_begin();
  ag_device cpu;
  assert_int_equal(ag_device_parse("cpu", &cpu), AG_OK);
  assert_int_equal(ag_device_numerics_check(cpu, AG_NUMERICS_PORTABLE), AG_OK);
  ag_tensor *t = ag_from_host(cpu, AG_F64, 1, (int64_t[]){4}, xd);
  assert_non_null(t);
  assert_int_equal(ag_set_numerics(AG_NUMERICS_PORTABLE), AG_OK);
  ag_error_clear();
  ag_tensor *r = ag_exp(t);
  if (r) assert_int_not_equal(ag_device_synchronize(cpu), AG_OK);
  else assert_int_equal(ag_last_status(), AG_ERR_UNSUPPORTED);
  assert_int_equal(ag_set_numerics(AG_NUMERICS_DEFAULT), AG_OK);
  ag_error_clear();
  r = ag_exp(t);
  assert_non_null(r);
  assert_int_equal(ag_device_synchronize(cpu), AG_OK);
  ag_scope_end();
}

/* The default mode runs its own kernels: a pow 2 there is x*x, the sum is
 * in double; the portable flag changes nothing for an integer op. */
static void test_default_unchanged(void **state) {
  (void)state;
  enum { N = 5000 };
  float *x = fvec(N, -1, 1), out_d, out_p;
  ag_kernel_call c = pcall(AG_K_REDUCE, AG_R_SUM);
  c.n_operands = 2;
  c.o[0] = opnd(&out_p, AG_F32, 1, (int64_t[]){1}, NULL);
  c.o[1] = opnd(x, AG_F32, 1, (int64_t[]){N}, NULL);
  c.i[0] = 1, c.i[1] = N, c.i[2] = 1, c.s[0] = 1;
  prun(&c);
  c.flags = 0;
  c.o[0] = opnd(&out_d, AG_F32, 1, (int64_t[]){1}, NULL);
  prun(&c);
  double s = 0;
  for (int i = 0; i < N; i++) s += x[i];
  assert_true(out_d == (float)s); /* the default sums in double */
  assert_true(out_p == ref_S(x, N));
  /* i64 to f32: one rounding ((float)v), where through double gives a
   * second one: 2^60 + 2^36 + 1 is just above a tie of f32 */
  int64_t big[2] = {(INT64_C(1) << 60) + (INT64_C(1) << 36) + 1, -((INT64_C(1) << 60) + (INT64_C(1) << 36) + 1)};
  float fb[2];
  c = pcall(AG_K_UNARY, AG_U_COPY);
  c.n_operands = 2;
  c.o[0] = opnd(fb, AG_F32, 1, (int64_t[]){2}, NULL);
  c.o[1] = opnd(big, AG_I64, 1, (int64_t[]){2}, NULL);
  prun(&c);
  assert_true(fb[0] == (float)big[0] && fb[1] == (float)big[1]);
  assert_true((float)big[0] != (float)(double)big[0]);
  int32_t xi[5] = {1, -2, 3, 4, 5}, yi[5];
  c = pcall(AG_K_UNARY, AG_U_NEG);
  c.n_operands = 2;
  c.o[0] = opnd(yi, AG_I32, 1, (int64_t[]){5}, NULL);
  c.o[1] = opnd(xi, AG_I32, 1, (int64_t[]){5}, NULL);
  prun(&c);
  for (int i = 0; i < 5; i++) assert_int_equal(yi[i], -xi[i]);
  free(x);
}

static void test_probe(void **state) {
  (void)state;
  assert_int_equal(ag__cpu_portable_check(), AG_OK);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_probe),
      cmocka_unit_test(test_reduce_sum),
      cmocka_unit_test(test_reduce_sum_f16),
      cmocka_unit_test(test_unary_threads),
      cmocka_unit_test(test_no_contraction),
      cmocka_unit_test(test_matmul),
      cmocka_unit_test(test_matmul_f16),
      cmocka_unit_test(test_softmax),
      cmocka_unit_test(test_cross_entropy),
      cmocka_unit_test(test_layernorm),
      cmocka_unit_test(test_rmsnorm),
      cmocka_unit_test(test_logsumexp),
      cmocka_unit_test(test_adamw),
      cmocka_unit_test(test_sgd_sumsq),
      cmocka_unit_test(test_random),
      cmocka_unit_test(test_conv2d),
      cmocka_unit_test(test_pool),
      cmocka_unit_test(test_var_cumsum),
      cmocka_unit_test(test_vector_widths),
      cmocka_unit_test(test_norms),
      cmocka_unit_test(test_interpolate),
      cmocka_unit_test(test_refusals),
      cmocka_unit_test(test_default_unchanged),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
