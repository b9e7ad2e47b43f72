/* Vision kernels on the CPU: conv2d as im2col + one GEMM per sample and
 * group (OpenBLAS when present), and max/avg/adaptive-avg pooling. f32 and
 * f64; every operand arrives contiguous NCHW (the core made it so). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3")
#endif
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_backend.h"

#if defined(AG_HAVE_CBLAS)
#include <cblas.h>
#endif

typedef ag_conv_geom conv_geom;

/* C[M, N] = A @ B + beta * C, row-major, A as [M, K] (or stored [K, M] when
 * ta), B as [K, N] (or stored [N, K] when tb). */
#define GEMM(T)                                                                                     \
  static void gemm_##T(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const T *A, const T *B, \
                       T beta, T *C) {                                                            \
    GEMM_BLAS_##T                                                                                 \
    for (int64_t i = 0; i < M; i++) {                                                             \
      T *crow = C + i * N;                                                                        \
      if (beta == 0) memset(crow, 0, sizeof(T) * (size_t)N);                                      \
      else if (beta != 1) for (int64_t j = 0; j < N; j++) crow[j] *= beta;                        \
      for (int64_t k = 0; k < K; k++) {                                                           \
        T a = ta ? A[k * M + i] : A[i * K + k];                                                   \
        if (a == 0) continue;                                                                     \
        if (!tb) {                                                                                \
          const T *b = B + k * N;                                                                 \
          for (int64_t j = 0; j < N; j++) crow[j] += a * b[j];                                    \
        } else {                                                                                  \
          for (int64_t j = 0; j < N; j++) crow[j] += a * B[j * K + k];                            \
        }                                                                                         \
      }                                                                                           \
    }                                                                                             \
  }
#define GEMM_BLAS_float                                                                           \
  if (M > 0 && N > 0 && K > 0 &&                                                                  \
      ag__cpu_sgemm(ta, tb, M, N, K, 1, A, ta ? M : K, B, tb ? K : N, beta, C, N))                \
    return;
#if defined(AG_HAVE_CBLAS)
#define GEMM_BLAS_double                                                                          \
  if (M > 0 && N > 0 && K > 0 && M < (1LL << 31) && N < (1LL << 31) && K < (1LL << 31)) {        \
    cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,     \
                (int)M, (int)N, (int)K, 1, A, (int)(ta ? M : K), B, (int)(tb ? K : N), beta, C,    \
                (int)N);                                                                          \
    return;                                                                                       \
  }
#else
#define GEMM_BLAS_double
#endif

/* col[(c*kh + i)*kw + j][oh*Wo + ow] = x[c][oh*sh - ph + i*dh][ow*sw - pw + j*dw] (0 outside). */
#define IM2COL(T)                                                                                 \
  static void im2col_##T(const conv_geom *g, int64_t Cg, const T *x, T *col) {                    \
    const int64_t P = g->Ho * g->Wo;                                                              \
    for (int64_t c = 0; c < Cg; c++)                                                              \
      for (int64_t i = 0; i < g->kh; i++)                                                         \
        for (int64_t j = 0; j < g->kw; j++) {                                                     \
          T *row = col + ((c * g->kh + i) * g->kw + j) * P;                                       \
          const T *plane = x + c * g->H * g->W;                                                   \
          for (int64_t oh = 0; oh < g->Ho; oh++) {                                                \
            int64_t ih = oh * g->sh - g->ph + i * g->dh;                                          \
            T *r = row + oh * g->Wo;                                                              \
            if (ih < 0 || ih >= g->H) {                                                           \
              memset(r, 0, sizeof(T) * (size_t)g->Wo);                                            \
              continue;                                                                           \
            }                                                                                     \
            const T *xr = plane + ih * g->W;                                                      \
            int64_t iw = -g->pw + j * g->dw;                                                      \
            for (int64_t ow = 0; ow < g->Wo; ow++, iw += g->sw)                                   \
              r[ow] = (iw >= 0 && iw < g->W) ? xr[iw] : (T)0;                                     \
          }                                                                                       \
        }                                                                                         \
  }                                                                                               \
  static void col2im_##T(const conv_geom *g, int64_t Cg, const T *col, T *x) {                    \
    const int64_t P = g->Ho * g->Wo;                                                              \
    for (int64_t c = 0; c < Cg; c++)                                                              \
      for (int64_t i = 0; i < g->kh; i++)                                                         \
        for (int64_t j = 0; j < g->kw; j++) {                                                     \
          const T *row = col + ((c * g->kh + i) * g->kw + j) * P;                                 \
          T *plane = x + c * g->H * g->W;                                                         \
          for (int64_t oh = 0; oh < g->Ho; oh++) {                                                \
            int64_t ih = oh * g->sh - g->ph + i * g->dh;                                          \
            if (ih < 0 || ih >= g->H) continue;                                                   \
            const T *r = row + oh * g->Wo;                                                        \
            T *xr = plane + ih * g->W;                                                            \
            int64_t iw = -g->pw + j * g->dw;                                                      \
            for (int64_t ow = 0; ow < g->Wo; ow++, iw += g->sw)                                   \
              if (iw >= 0 && iw < g->W) xr[iw] += r[ow];                                          \
          }                                                                                       \
        }                                                                                         \
  }

/* A 1x1 kernel with stride 1 and no padding reads x as its own col matrix. */
static bool col_is_input(const conv_geom *g) {
  return g->kh == 1 && g->kw == 1 && g->sh == 1 && g->sw == 1 && g->ph == 0 && g->pw == 0;
}

#define CONV(T)                                                                                   \
  static ag_status conv_fwd_##T(const ag_kernel_call *c) {                                         \
    conv_geom g = ag_conv_geom_of(c, &c->o[1], &c->o[0], &c->o[2]);                                       \
    const T *x = (const T *)ag__cpu_ptr(&c->o[1]), *w = (const T *)ag__cpu_ptr(&c->o[2]);         \
    const T *bias = c->o[3].base ? (const T *)ag__cpu_ptr(&c->o[3]) : NULL;                        \
    T *y = (T *)ag__cpu_ptr(&c->o[0]);                                                            \
    const int64_t Cg = g.C / g.G, Cog = g.Co / g.G, K = Cg * g.kh * g.kw, P = g.Ho * g.Wo;       \
    const bool direct = col_is_input(&g);                                                         \
    T *col = direct ? NULL : malloc(sizeof(T) * (size_t)(K * P));                                 \
    if (!direct && !col) return ag_error_set(AG_ERR_OOM, "%s: no memory for im2col", c->name);    \
    for (int64_t n = 0; n < g.N; n++)                                                             \
      for (int64_t gr = 0; gr < g.G; gr++) {                                                      \
        const T *xg = x + (n * g.C + gr * Cg) * g.H * g.W;                                        \
        T *yg = y + (n * g.Co + gr * Cog) * P;                                                    \
        if (!direct) im2col_##T(&g, Cg, xg, col);                                                 \
        gemm_##T(false, false, Cog, P, K, w + gr * Cog * K, direct ? xg : col, 0, yg);            \
        if (bias)                                                                                 \
          for (int64_t o = 0; o < Cog; o++) {                                                     \
            T b = bias[gr * Cog + o], *yr = yg + o * P;                                           \
            for (int64_t p = 0; p < P; p++) yr[p] += b;                                           \
          }                                                                                       \
      }                                                                                           \
    free(col);                                                                                    \
    return AG_OK;                                                                                 \
  }                                                                                               \
  static ag_status conv_bwd_input_##T(const ag_kernel_call *c) {                                   \
    conv_geom g = ag_conv_geom_of(c, &c->o[0], &c->o[1], &c->o[2]);                                       \
    const T *dy = (const T *)ag__cpu_ptr(&c->o[1]), *w = (const T *)ag__cpu_ptr(&c->o[2]);        \
    T *dx = (T *)ag__cpu_ptr(&c->o[0]);                                                           \
    const int64_t Cg = g.C / g.G, Cog = g.Co / g.G, K = Cg * g.kh * g.kw, P = g.Ho * g.Wo;       \
    const bool direct = col_is_input(&g);                                                         \
    T *col = direct ? NULL : malloc(sizeof(T) * (size_t)(K * P));                                 \
    if (!direct && !col) return ag_error_set(AG_ERR_OOM, "%s: no memory for col2im", c->name);    \
    if (!direct) memset(dx, 0, sizeof(T) * (size_t)(g.N * g.C * g.H * g.W));                      \
    for (int64_t n = 0; n < g.N; n++)                                                             \
      for (int64_t gr = 0; gr < g.G; gr++) {                                                      \
        T *dxg = dx + (n * g.C + gr * Cg) * g.H * g.W;                                            \
        const T *dyg = dy + (n * g.Co + gr * Cog) * P;                                            \
        gemm_##T(true, false, K, P, Cog, w + gr * Cog * K, dyg, 0, direct ? dxg : col);           \
        if (!direct) col2im_##T(&g, Cg, col, dxg);                                                \
      }                                                                                           \
    free(col);                                                                                    \
    return AG_OK;                                                                                 \
  }                                                                                               \
  static ag_status conv_bwd_weight_##T(const ag_kernel_call *c) {                                  \
    conv_geom g = ag_conv_geom_of(c, &c->o[2], &c->o[1], &c->o[0]);                                       \
    const T *dy = (const T *)ag__cpu_ptr(&c->o[1]), *x = (const T *)ag__cpu_ptr(&c->o[2]);        \
    T *dw = (T *)ag__cpu_ptr(&c->o[0]);                                                           \
    const int64_t Cg = g.C / g.G, Cog = g.Co / g.G, K = Cg * g.kh * g.kw, P = g.Ho * g.Wo;       \
    const bool direct = col_is_input(&g);                                                         \
    T *col = direct ? NULL : malloc(sizeof(T) * (size_t)(K * P));                                 \
    if (!direct && !col) return ag_error_set(AG_ERR_OOM, "%s: no memory for im2col", c->name);    \
    if (g.N == 0) memset(dw, 0, sizeof(T) * (size_t)(g.Co * K));                                  \
    for (int64_t n = 0; n < g.N; n++)                                                             \
      for (int64_t gr = 0; gr < g.G; gr++) {                                                      \
        const T *xg = x + (n * g.C + gr * Cg) * g.H * g.W;                                        \
        const T *dyg = dy + (n * g.Co + gr * Cog) * P;                                            \
        if (!direct) im2col_##T(&g, Cg, xg, col);                                                 \
        gemm_##T(false, true, Cog, K, P, dyg, direct ? xg : col, n ? 1 : 0, dw + gr * Cog * K);   \
      }                                                                                           \
    free(col);                                                                                    \
    return AG_OK;                                                                                 \
  }

/* Pooling over planes (N*C of them, split across threads). */
#define POOL(T)                                                                                   \
  static void pool_fwd_##T(const ag_kernel_call *c) {                                              \
    const ag_koperand *Y = &c->o[0], *X = &c->o[1];                                               \
    const int64_t planes = X->shape[0] * X->shape[1], H = X->shape[2], W = X->shape[3];           \
    const int64_t Ho = Y->shape[2], Wo = Y->shape[3];                                             \
    const int64_t sh = (int64_t)c->s[0], sw = (int64_t)c->s[1], ph = (int64_t)c->s[2],            \
                  pw = (int64_t)c->s[3], kh = (int64_t)c->s[4], kw = (int64_t)c->s[5];            \
    const bool with_pad = c->s[6] != 0;                                                           \
    const T *x = (const T *)ag__cpu_ptr(X);                                                       \
    T *y = (T *)ag__cpu_ptr(Y);                                                                   \
    int32_t *idx = c->sub == AG_P_MAX ? (int32_t *)ag__cpu_ptr(&c->o[2]) : NULL;                  \
    for (int64_t q = 0; q < planes; q++) {                                                        \
      const T *xp = x + q * H * W;                                                                \
      for (int64_t oh = 0; oh < Ho; oh++)                                                         \
        for (int64_t ow = 0; ow < Wo; ow++) {                                                     \
          int64_t h0, h1, w0, w1, div;                                                            \
          if (c->sub == AG_P_ADAPTIVE_AVG) {                                                      \
            h0 = oh * H / Ho, h1 = ((oh + 1) * H + Ho - 1) / Ho;                                  \
            w0 = ow * W / Wo, w1 = ((ow + 1) * W + Wo - 1) / Wo;                                  \
            div = (h1 - h0) * (w1 - w0);                                                          \
          } else {                                                                                \
            h0 = oh * sh - ph, h1 = h0 + kh, w0 = ow * sw - pw, w1 = w0 + kw;                     \
            int64_t hp = h1 < H + ph ? h1 : H + ph, wp = w1 < W + pw ? w1 : W + pw;               \
            div = (hp - h0) * (wp - w0);                                                          \
            if (h0 < 0) h0 = 0;                                                                   \
            if (w0 < 0) w0 = 0;                                                                   \
            if (h1 > H) h1 = H;                                                                   \
            if (w1 > W) w1 = W;                                                                   \
            if (!with_pad) div = (h1 - h0) * (w1 - w0);                                           \
          }                                                                                       \
          const int64_t o = q * Ho * Wo + oh * Wo + ow;                                           \
          if (idx) {                                                                              \
            T best = -INFINITY;                                                                   \
            int64_t bi = h0 * W + w0;                                                             \
            for (int64_t i = h0; i < h1; i++)                                                     \
              for (int64_t j = w0; j < w1; j++) {                                                 \
                T v = xp[i * W + j];                                                              \
                if (v > best || isnan(v)) {                                                       \
                  best = v;                                                                       \
                  bi = i * W + j;                                                                 \
                  if (isnan(v)) goto found_##T;                                                   \
                }                                                                                 \
              }                                                                                   \
          found_##T:                                                                              \
            y[o] = best;                                                                          \
            idx[o] = (int32_t)bi;                                                                 \
          } else {                                                                                \
            T acc = 0;                                                                            \
            for (int64_t i = h0; i < h1; i++)                                                     \
              for (int64_t j = w0; j < w1; j++) acc += xp[i * W + j];                             \
            y[o] = div > 0 ? acc / (T)div : (T)0;                                                 \
          }                                                                                       \
        }                                                                                         \
    }                                                                                             \
  }                                                                                               \
  static void pool_bwd_##T(const ag_kernel_call *c) {                                              \
    const ag_koperand *DX = &c->o[0], *DY = &c->o[1];                                             \
    const int64_t planes = DX->shape[0] * DX->shape[1], H = DX->shape[2], W = DX->shape[3];       \
    const int64_t Ho = DY->shape[2], Wo = DY->shape[3];                                           \
    const int64_t sh = (int64_t)c->s[0], sw = (int64_t)c->s[1], ph = (int64_t)c->s[2],            \
                  pw = (int64_t)c->s[3], kh = (int64_t)c->s[4], kw = (int64_t)c->s[5];            \
    const bool with_pad = c->s[6] != 0;                                                           \
    const T *dy = (const T *)ag__cpu_ptr(DY);                                                     \
    T *dx = (T *)ag__cpu_ptr(DX);                                                                 \
    const int32_t *idx = c->sub == AG_P_MAX ? (const int32_t *)ag__cpu_ptr(&c->o[2]) : NULL;      \
    for (int64_t q = 0; q < planes; q++) {                                                        \
      T *dp = dx + q * H * W;                                                                     \
      memset(dp, 0, sizeof(T) * (size_t)(H * W));                                                \
      for (int64_t oh = 0; oh < Ho; oh++)                                                         \
        for (int64_t ow = 0; ow < Wo; ow++) {                                                     \
          const int64_t o = q * Ho * Wo + oh * Wo + ow;                                           \
          if (idx) {                                                                              \
            dp[idx[o]] += dy[o];                                                                  \
            continue;                                                                             \
          }                                                                                       \
          int64_t h0, h1, w0, w1, div;                                                            \
          if (c->sub == AG_P_ADAPTIVE_AVG) {                                                      \
            h0 = oh * H / Ho, h1 = ((oh + 1) * H + Ho - 1) / Ho;                                  \
            w0 = ow * W / Wo, w1 = ((ow + 1) * W + Wo - 1) / Wo;                                  \
            div = (h1 - h0) * (w1 - w0);                                                          \
          } else {                                                                                \
            h0 = oh * sh - ph, h1 = h0 + kh, w0 = ow * sw - pw, w1 = w0 + kw;                     \
            int64_t hp = h1 < H + ph ? h1 : H + ph, wp = w1 < W + pw ? w1 : W + pw;               \
            div = (hp - h0) * (wp - w0);                                                          \
            if (h0 < 0) h0 = 0;                                                                   \
            if (w0 < 0) w0 = 0;                                                                   \
            if (h1 > H) h1 = H;                                                                   \
            if (w1 > W) w1 = W;                                                                   \
            if (!with_pad) div = (h1 - h0) * (w1 - w0);                                           \
          }                                                                                       \
          if (div <= 0) continue;                                                                 \
          const T gv = dy[o] / (T)div;                                                            \
          for (int64_t i = h0; i < h1; i++)                                                       \
            for (int64_t j = w0; j < w1; j++) dp[i * W + j] += gv;                                \
        }                                                                                         \
    }                                                                                             \
  }

GEMM(float)
GEMM(double)
IM2COL(float)
IM2COL(double)
CONV(float)
CONV(double)
POOL(float)
POOL(double)

ag_status ag__cpu_vision(const ag_kernel_call *c) {
  const bool f64 = c->o[0].dtype == AG_F64;
  switch (c->op) {
    case AG_K_CONV2D: return f64 ? conv_fwd_double(c) : conv_fwd_float(c);
    case AG_K_CONV2D_BWD_INPUT: return f64 ? conv_bwd_input_double(c) : conv_bwd_input_float(c);
    case AG_K_CONV2D_BWD_WEIGHT: return f64 ? conv_bwd_weight_double(c) : conv_bwd_weight_float(c);
    case AG_K_POOL2D:
      if (f64) pool_fwd_double(c);
      else pool_fwd_float(c);
      return AG_OK;
    case AG_K_POOL2D_BWD:
      if (f64) pool_bwd_double(c);
      else pool_bwd_float(c);
      return AG_OK;
    default: break;
  }
  return ag_error_set(AG_ERR_INTERNAL, "%s: not a vision op (%d)", c->name ? c->name : "launch", (int)c->op);
}
