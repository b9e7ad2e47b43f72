/* AG_K_MATMUL on the CPU: C[b] = alpha * A[b] @ B[b] + beta * C[b].
 * With OpenBLAS each operand goes to sgemm/dgemm as stored (row- or
 * column-major, ld from its non-unit stride); without it a small blocked
 * GEMM runs instead. f16/bf16 are widened to f32 scratch first. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3") /* vectorise the fallback GEMM's inner loop */
#endif
#include <stdlib.h>
#include <string.h>

#include "cpu_backend.h"
#include "half.h"

#if defined(AG_HAVE_CBLAS)
#include <cblas.h>
#endif
#ifdef _OPENMP
#include <omp.h>
#endif

/* One matrix operand of one batch: element (r, c) at p[r*rs + c*cs]. */
typedef struct mview {
  const void *p;
  int64_t rs, cs;
} mview;

#if defined(AG_HAVE_CBLAS)
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
#endif

#ifdef _OPENMP
#define AG_OMP_GEMM _Pragma("omp parallel for schedule(static) if (M * N * K >= 262144)")
#else
#define AG_OMP_GEMM
#endif

#define GEMM_BODY(T)                                                                          \
  /* C (row-major, ldc) = alpha * A @ B + beta * C; A, B general strides. */                 \
  static void gemm_ref_##T(int64_t M, int64_t N, int64_t K, T alpha, const T *A, int64_t ars, \
                           int64_t acs, const T *B, int64_t brs, int64_t bcs, T beta, T *C,    \
                           int64_t ldc) {                                                      \
    enum { MC = 64, KC = 256, NC = 512 };                                                      \
    for (int64_t i = 0; i < M; i++)                                                            \
      for (int64_t j = 0; j < N; j++) C[i * ldc + j] = beta == 0 ? (T)0 : beta * C[i * ldc + j]; \
    int64_t mblocks = (M + MC - 1) / MC;                                                       \
    AG_OMP_GEMM                                                                                \
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

static void gemm_f32(int64_t M, int64_t N, int64_t K, float alpha, mview a, mview b, float beta,
                     float *C) {
#if defined(AG_HAVE_CBLAS)
  bool ta, tb;
  int64_t lda, ldb;
  if (blas_layout(M, K, a.rs, a.cs, &ta, &lda) && blas_layout(K, N, b.rs, b.cs, &tb, &ldb)) {
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                (int)M, (int)N, (int)K, alpha, a.p, (int)lda, b.p, (int)ldb, beta, C,
                (int)(N > 0 ? N : 1));
    return;
  }
#endif
  gemm_ref_float(M, N, K, alpha, a.p, a.rs, a.cs, b.p, b.rs, b.cs, beta, C, N);
}

static void gemm_f64(int64_t M, int64_t N, int64_t K, double alpha, mview a, mview b, double beta,
                     double *C) {
#if defined(AG_HAVE_CBLAS)
  bool ta, tb;
  int64_t lda, ldb;
  if (blas_layout(M, K, a.rs, a.cs, &ta, &lda) && blas_layout(K, N, b.rs, b.cs, &tb, &ldb)) {
    cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                (int)M, (int)N, (int)K, alpha, a.p, (int)lda, b.p, (int)ldb, beta, C,
                (int)(N > 0 ? N : 1));
    return;
  }
#endif
  gemm_ref_double(M, N, K, alpha, a.p, a.rs, a.cs, b.p, b.rs, b.cs, beta, C, N);
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

ag_status ag__cpu_matmul(const ag_kernel_call *c) {
  const ag_koperand *O = &c->o[0], *A = &c->o[1], *B = &c->o[2];
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
        gemm_f32(M, N, K, (float)c->s[0], va, vb, (float)c->s[1], (float *)cb);
      else
        gemm_f64(M, N, K, c->s[0], va, vb, c->s[1], (double *)cb);
    }
    return AG_OK;
  }

  /* f16/bf16: widen both operands, accumulate in f32, round once. */
  float *sa = malloc(sizeof(float) * (size_t)(M * K + K * N + M * N));
  if (!sa) return ag_error_set(AG_ERR_OOM, "%s: no memory for f32 matmul scratch", c->name ? c->name : "ag_matmul");
  float *sb = sa + M * K, *sc = sb + K * N;
  for (int64_t b = 0; b < Bn; b++) {
    const uint16_t *ab = (const uint16_t *)pa + b * abs_, *bb = (const uint16_t *)pb + b * bbs;
    uint16_t *cb = (uint16_t *)po + b * M * N;
    if (b == 0 || abs_ != 0) widen(dt, ab, M, K, ars, acs, sa);
    if (b == 0 || bbs != 0) widen(dt, bb, K, N, brs, bcs, sb);
    if (c->s[1] != 0) widen(dt, cb, M, N, N, 1, sc);
    gemm_f32(M, N, K, (float)c->s[0], (mview){sa, K, 1}, (mview){sb, N, 1}, (float)c->s[1], sc);
    if (dt == AG_F16) ag__f32_to_f16_n(sc, cb, (size_t)(M * N));
    else ag__f32_to_bf16_n(sc, cb, (size_t)(M * N));
  }
  free(sa);
  return AG_OK;
}
