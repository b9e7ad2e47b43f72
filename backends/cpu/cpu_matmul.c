/* AG_K_MATMUL on the CPU: C[b] = alpha * A[b] @ B[b] + beta * C[b].
 * Each operand goes to the GEMM engine as stored (row- or column-major, ld
 * from its non-unit stride): f32 to ag__cpu_sgemm (oneDNN or CBLAS,
 * cpu_gemm.c), f64 to CBLAS dgemm; without a usable one a small blocked
 * GEMM runs instead. f16/bf16 are widened to f32 scratch first. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3") /* vectorise the fallback GEMM's inner loop */
#endif
#include <stdlib.h>
#include <string.h>

#include "cpu_backend.h"
#include "cpu_portable.h"
#include "tensor/half.h"

#if defined(AG_HAVE_CBLAS)
#include <cblas.h>
#endif

/* One matrix operand of one batch: element (r, c) at p[r*rs + c*cs]. */
typedef struct mview {
  const void *p;
  int64_t rs, cs;
} mview;

/* BLAS layout of an R x C operand: trans and ld, or false when neither
 * stride is usable (then the caller packs it). Size-1 dims have arbitrary
 * strides, so they are normalised first. */
static bool blas_layout(int64_t R, int64_t C, int64_t rs, int64_t cs, bool *trans, int64_t *ld) {
  if (C == 1) cs = 1;
  if (R == 1) rs = C;
  if (cs == 1 && rs >= (C > 1 ? C : 1)) {
    *trans = false;
    *ld = rs;
    return true;
  }
  if (R == 1 && C >= 1 && cs >= 1) { /* one row: read it as a column-major 1 x C */
    *trans = true;
    *ld = cs;
    return cs >= 1;
  }
  if (rs == 1 && cs >= (R > 1 ? R : 1)) {
    *trans = true;
    *ld = cs;
    return true;
  }
  return false;
}

#define GEMM_BODY(T)                                                                          \
  /* C (row-major, ldc) = alpha * A @ B + beta * C; A, B general strides. */                 \
  static void gemm_ref_##T(int64_t M, int64_t N, int64_t K, T alpha, const T *A, int64_t ars, \
                           int64_t acs, const T *B, int64_t brs, int64_t bcs, T beta, T *C,    \
                           int64_t ldc) {                                                      \
    enum { MC = 64, KC = 256, NC = 512 };                                                      \
    for (int64_t i = 0; i < M; i++)                                                            \
      for (int64_t j = 0; j < N; j++) C[i * ldc + j] = beta == 0 ? (T)0 : beta * C[i * ldc + j]; \
    int64_t mblocks = (M + MC - 1) / MC;                                                       \
    for (int64_t mb = 0; mb < mblocks; mb++) {                                                 \
      T Ap[MC * KC];                                                                           \
      T *Bp = malloc(sizeof(T) * KC * NC);                                                     \
      if (!Bp) continue;                                                                       \
      int64_t i0 = mb * MC, mc = M - i0 < MC ? M - i0 : MC;                                    \
      for (int64_t k0 = 0; k0 < K; k0 += KC) {                                                 \
        int64_t kc = K - k0 < KC ? K - k0 : KC;                                                \
        for (int64_t i = 0; i < mc; i++)                                                       \
          for (int64_t k = 0; k < kc; k++)                                                     \
            Ap[i * kc + k] = alpha * A[(i0 + i) * ars + (k0 + k) * acs];                       \
        for (int64_t j0 = 0; j0 < N; j0 += NC) {                                               \
          int64_t nc = N - j0 < NC ? N - j0 : NC;                                              \
          for (int64_t k = 0; k < kc; k++)                                                     \
            for (int64_t j = 0; j < nc; j++) Bp[k * nc + j] = B[(k0 + k) * brs + (j0 + j) * bcs]; \
          for (int64_t i = 0; i < mc; i++) {                                                   \
            T *c = C + (i0 + i) * ldc + j0;                                                    \
            for (int64_t k = 0; k < kc; k++) {                                                 \
              const T a = Ap[i * kc + k];                                                      \
              const T *b = Bp + k * nc;                                                        \
              for (int64_t j = 0; j < nc; j++) c[j] += a * b[j];                               \
            }                                                                                  \
          }                                                                                    \
        }                                                                                      \
      }                                                                                        \
      free(Bp);                                                                                \
    }                                                                                          \
  }

GEMM_BODY(float)
GEMM_BODY(double)

/* One GEMM, on one thread: the engine when both operands have a usable
 * layout, else the blocked loop. */
static void gemm1_float(int64_t M, int64_t N, int64_t K, float alpha, mview a, mview b, float beta, float *C,
                        int64_t ldc) {
  bool ta, tb;
  int64_t lda, ldb;
  if (blas_layout(M, K, a.rs, a.cs, &ta, &lda) && blas_layout(K, N, b.rs, b.cs, &tb, &ldb) &&
      ag__cpu_sgemm(ta, tb, M, N, K, alpha, a.p, lda, b.p, ldb, beta, C, ldc > 0 ? ldc : 1))
    return;
  gemm_ref_float(M, N, K, alpha, a.p, a.rs, a.cs, b.p, b.rs, b.cs, beta, C, ldc);
}

static void gemm1_double(int64_t M, int64_t N, int64_t K, double alpha, mview a, mview b, double beta, double *C,
                         int64_t ldc) {
#if defined(AG_HAVE_CBLAS)
  bool ta, tb;
  int64_t lda, ldb;
  if (blas_layout(M, K, a.rs, a.cs, &ta, &lda) && blas_layout(K, N, b.rs, b.cs, &tb, &ldb)) {
    cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)M, (int)N,
                (int)K, alpha, a.p, (int)lda, b.p, (int)ldb, beta, C, (int)(ldc > 0 ? ldc : 1));
    return;
  }
#endif
  gemm_ref_double(M, N, K, alpha, a.p, a.rs, a.cs, b.p, b.rs, b.cs, beta, C, ldc);
}

/* The pool splits one GEMM into panels of C (columns when N >= M, else
 * rows), each a single-threaded GEMM: one pool drives BLAS and the
 * elementwise kernels, so no two pools spin against each other, and a
 * panel re-packs only its share of the wider operand. */
typedef struct gsplit {
  bool f64, by_cols;
  int64_t M, N, K, panel;
  double alpha, beta;
  mview a, b;
  void *C;
} gsplit;

static void gemm_panels(void *ctx, int64_t p0, int64_t p1) {
  const gsplit *g = ctx;
  const size_t sz = g->f64 ? 8 : 4;
  int64_t lo = p0 * g->panel, hi = p1 * g->panel;
  int64_t lim = g->by_cols ? g->N : g->M;
  if (hi > lim) hi = lim;
  mview a = g->a, b = g->b;
  int64_t M = g->M, N = g->N, off;
  if (g->by_cols) {
    b.p = (const char *)b.p + (size_t)(lo * b.cs) * sz;
    N = hi - lo;
    off = lo;
  } else {
    a.p = (const char *)a.p + (size_t)(lo * a.rs) * sz;
    M = hi - lo;
    off = lo * g->N;
  }
  if (g->f64)
    gemm1_double(M, N, g->K, g->alpha, a, b, g->beta, (double *)g->C + off, g->N);
  else
    gemm1_float(M, N, g->K, (float)g->alpha, a, b, (float)g->beta, (float *)g->C + off, g->N);
}

static void gemm_any(bool f64, int64_t M, int64_t N, int64_t K, double alpha, mview a, mview b,
                     double beta, void *C) {
  ag__cpu_blas_init();
  gsplit g = {.f64 = f64, .M = M, .N = N, .K = K, .alpha = alpha, .beta = beta, .a = a, .b = b, .C = C};
  g.by_cols = N >= M;
  const int64_t len = g.by_cols ? N : M;
  g.panel = 64; /* a multiple of every BLAS's register block */
  int64_t panels = (len + g.panel - 1) / g.panel;
  /* work: flops / 16, so a 64x64x64 product stays on one thread */
  ag__cpu_par_for(panels, M * N * (K > 0 ? K : 1) / 16, gemm_panels, &g);
}

/* Widen an R x C half matrix (any strides) into contiguous row-major f32. */
static void widen(ag_dtype dt, const uint16_t *p, int64_t R, int64_t C, int64_t rs, int64_t cs,
                  float *out) {
  for (int64_t r = 0; r < R; r++) {
    const uint16_t *row = p + r * rs;
    float *o = out + r * C;
    if (cs == 1) {
      if (dt == AG_F16) ag__f16_to_f32_n(row, o, (size_t)C);
      else ag__bf16_to_f32_n(row, o, (size_t)C);
    } else {
      for (int64_t c = 0; c < C; c++)
        o[c] = dt == AG_F16 ? ag_f16_to_f32(row[c * cs]) : ag_bf16_to_f32(row[c * cs]);
    }
  }
}

ag_status cpu_k_matmul(ag_kernel_error *err, const ag_k_matmul *mm) {
  (void)err;
  if (mm->call->flags & AG_KF_PORTABLE) return ag__cpu_p_matmul(mm);
  const ag_koperand *O = mm->c, *A = mm->a, *B = mm->b;
  const double alpha = mm->alpha, beta = mm->beta;
  const int na = A->ndim, nb = B->ndim, no = O->ndim;
  const int64_t M = A->shape[na - 2], K = A->shape[na - 1], N = B->shape[nb - 1];
  const int64_t Bn = no >= 3 ? O->shape[0] : 1;
  const int64_t abs_ = na >= 3 ? A->strides[0] : 0, bbs = nb >= 3 ? B->strides[0] : 0;
  const int64_t ars = A->strides[na - 2], acs = A->strides[na - 1];
  const int64_t brs = B->strides[nb - 2], bcs = B->strides[nb - 1];
  const ag_dtype dt = O->dtype;
  const size_t sz = ag__cpu_dtsize(dt);
  char *po = ag__cpu_ptr(O);
  const char *pa = ag__cpu_ptr(A), *pb = ag__cpu_ptr(B);
  if (M == 0 || N == 0) return AG_OK;

  if (dt == AG_F32 || dt == AG_F64) {
    for (int64_t b = 0; b < Bn; b++) {
      mview va = {pa + (size_t)(b * abs_) * sz, ars, acs}, vb = {pb + (size_t)(b * bbs) * sz, brs, bcs};
      char *cb = po + (size_t)(b * M * N) * sz;
      if (dt == AG_F32)
        gemm_any(false, M, N, K, (float)alpha, va, vb, (float)beta, cb);
      else
        gemm_any(true, M, N, K, alpha, va, vb, beta, cb);
    }
    return AG_OK;
  }

  /* f16/bf16: widen both operands, accumulate in f32, round once. */
  float *sa = malloc(sizeof(float) * (size_t)(M * K + K * N + M * N));
  if (!sa)
    return ag_error_set(AG_ERR_OOM, "%s: no memory for f32 matmul scratch", mm->call->name ? mm->call->name : "ag_matmul");
  float *sb = sa + M * K, *sc = sb + K * N;
  for (int64_t b = 0; b < Bn; b++) {
    const uint16_t *ab = (const uint16_t *)pa + b * abs_, *bb = (const uint16_t *)pb + b * bbs;
    uint16_t *cb = (uint16_t *)po + b * M * N;
    if (b == 0 || abs_ != 0) widen(dt, ab, M, K, ars, acs, sa);
    if (b == 0 || bbs != 0) widen(dt, bb, K, N, brs, bcs, sb);
    if (beta != 0) widen(dt, cb, M, N, N, 1, sc);
    gemm_any(false, M, N, K, (float)alpha, (mview){sa, K, 1}, (mview){sb, N, 1}, (float)beta, sc);
    if (dt == AG_F16) ag__f32_to_f16_n(sc, cb, (size_t)(M * N));
    else ag__f32_to_bf16_n(sc, cb, (size_t)(M * N));
  }
  free(sa);
  return AG_OK;
}
