/* Vision kernels on the CPU: conv2d as im2col + one GEMM per sample and
 * group (OpenBLAS when present), and max/avg/adaptive-avg pooling. f32 and
 * f64; every operand arrives contiguous NCHW (the core made it so). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3")
#endif
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_backend.h"
#include "cpu_portable.h"

#if defined(AG_HAVE_CBLAS)
#include <cblas.h>
#endif

typedef ag_conv_geom conv_geom;

/* The geometry of a conv2d call a (any of the three: their windows have
 * the same names) with input x, output y and weight w. */
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

/* col[(c*kh + i)*kw + j][oh*Wo + ow] = x[c][oh*sh - ph + i*dh][ow*sw - pw + j*dw] (0 outside);
 * rows of col are ld apart (several samples' columns side by side). */
#define IM2COL(T)                                                                                 \
  static void im2col_##T(const conv_geom *g, int64_t Cg, const T *x, T *col, int64_t ld) {        \
    for (int64_t c = 0; c < Cg; c++)                                                              \
      for (int64_t i = 0; i < g->kh; i++)                                                         \
        for (int64_t j = 0; j < g->kw; j++) {                                                     \
          T *row = col + ((c * g->kh + i) * g->kw + j) * ld;                                      \
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
            if (g->sw == 1) { /* zeros, one contiguous run of the row, zeros */                   \
              int64_t lo = iw < 0 ? -iw : 0, hi = g->W - iw;                                      \
              if (lo > g->Wo) lo = g->Wo;                                                         \
              if (hi > g->Wo) hi = g->Wo;                                                         \
              if (hi < lo) hi = lo;                                                               \
              for (int64_t ow = 0; ow < lo; ow++) r[ow] = 0;                                      \
              memcpy(r + lo, xr + iw + lo, sizeof(T) * (size_t)(hi - lo));                        \
              for (int64_t ow = hi; ow < g->Wo; ow++) r[ow] = 0;                                  \
              continue;                                                                           \
            }                                                                                     \
            for (int64_t ow = 0; ow < g->Wo; ow++, iw += g->sw)                                   \
              r[ow] = (iw >= 0 && iw < g->W) ? xr[iw] : (T)0;                                     \
          }                                                                                       \
        }                                                                                         \
  }                                                                                               \
  static void col2im_##T(const conv_geom *g, int64_t Cg, const T *col, int64_t ld, T *x) {        \
    for (int64_t c = 0; c < Cg; c++)                                                              \
      for (int64_t i = 0; i < g->kh; i++)                                                         \
        for (int64_t j = 0; j < g->kw; j++) {                                                     \
          const T *row = col + ((c * g->kh + i) * g->kw + j) * ld;                                \
          T *plane = x + c * g->H * g->W;                                                         \
          for (int64_t oh = 0; oh < g->Ho; oh++) {                                                \
            int64_t ih = oh * g->sh - g->ph + i * g->dh;                                          \
            if (ih < 0 || ih >= g->H) continue;                                                   \
            const T *r = row + oh * g->Wo;                                                        \
            T *xr = plane + ih * g->W;                                                            \
            int64_t iw = -g->pw + j * g->dw;                                                      \
            if (g->sw == 1) { /* the run of the row inside the image */                           \
              int64_t lo = iw < 0 ? -iw : 0, hi = g->W - iw;                                      \
              if (hi > g->Wo) hi = g->Wo;                                                         \
              for (int64_t ow = lo; ow < hi; ow++) xr[iw + ow] += r[ow];                          \
              continue;                                                                           \
            }                                                                                     \
            for (int64_t ow = 0; ow < g->Wo; ow++, iw += g->sw)                                   \
              if (iw >= 0 && iw < g->W) xr[iw] += r[ow];                                          \
          }                                                                                       \
        }                                                                                         \
  }

/* conv2d as batched im2col + GEMM. The samples are cut into chunks of nb
 * (a col matrix of about 2^20 elements, and at least 8 chunks when N allows,
 * so the pool has work for every thread); per chunk and group one GEMM
 * covers all nb samples' columns side by side (N = nb*P instead of P: the
 * small per-sample products of a CNN run at a fraction of the engine's
 * speed). Chunks run in parallel on the pool; the weight gradient sums the
 * chunks' partial gradients in chunk order afterwards, so every result is
 * independent of the thread count. */
static int64_t conv_chunk(int64_t N, int64_t K, int64_t P) {
  int64_t kp = K * P > 0 ? K * P : 1, nb = ((int64_t)1 << 20) / kp, spread = (N + 7) / 8;
  if (nb > spread) nb = spread;
  return nb < 1 ? 1 : nb;
}

typedef struct conv_job {
  conv_geom g;
  int64_t Cg, Cog, K, P, nb;
  const void *in, *w, *bias; /* fwd: x; bwd_input: dy; bwd_weight: dy (in) and x (w) */
  void *out;                 /* y, dx, or the chunks' partial dw (nchunks x Co x K) */
  atomic_int oom;
} conv_job;

/* A chunk's scratch: its col matrix (K x nb*P) then its output or output
 * gradient (Cog x nb*P), elements of es bytes; NULL (the job's OOM flag
 * set) when out of memory. The caller frees it. */
static void *chunk_scratch(conv_job *j, size_t es) {
  void *p = malloc(es * (size_t)((j->K + j->Cog) * j->nb * j->P + 1));
  if (!p) atomic_store(&j->oom, 1);
  return p;
}

/* Samples in chunk ch (the last one may be short). */
static int64_t chunk_len(const conv_job *j, int64_t ch) {
  int64_t left = j->g.N - ch * j->nb;
  return left < j->nb ? left : j->nb;
}

#define CONV(T)                                                                                   \
  /* Yb[Cog, m*P] of a chunk <-> y[n][gr*Cog + o][p] */                                           \
  static void gather_##T(const conv_job *j, const T *y, int64_t n0, int64_t m, int64_t gr, T *yb) { \
    for (int64_t s = 0; s < m; s++)                                                               \
      for (int64_t o = 0; o < j->Cog; o++)                                                        \
        memcpy(yb + o * m * j->P + s * j->P, y + ((n0 + s) * j->g.Co + gr * j->Cog + o) * j->P,     \
               sizeof(T) * (size_t)j->P);                                                         \
  }                                                                                               \
  static void conv_fwd_chunks_##T(void *ctx, int64_t c0, int64_t c1) {                            \
    conv_job *j = ctx;                                                                            \
    const int64_t nb = j->nb, KP = j->K * nb * j->P;                                              \
    T *col = chunk_scratch(j, sizeof(T));                                                         \
    if (!col) return;                                                                             \
    T *yb = col + KP;                                                                            \
    const T *x = j->in, *w = j->w, *bias = j->bias;                                               \
    T *y = j->out;                                                                                \
    for (int64_t ch = c0; ch < c1; ch++) {                                                        \
      int64_t n0 = ch * nb, m = chunk_len(j, ch), ld = m * j->P;                                  \
      for (int64_t gr = 0; gr < j->g.G; gr++) {                                                   \
        for (int64_t s = 0; s < m; s++)                                                           \
          im2col_##T(&j->g, j->Cg, x + ((n0 + s) * j->g.C + gr * j->Cg) * j->g.H * j->g.W,        \
                     col + s * j->P, ld);                                                         \
        gemm_##T(false, false, j->Cog, ld, j->K, w + gr * j->Cog * j->K, col, 0, yb);             \
        for (int64_t s = 0; s < m; s++)                                                           \
          for (int64_t o = 0; o < j->Cog; o++) {                                                  \
            T *dst = y + ((n0 + s) * j->g.Co + gr * j->Cog + o) * j->P;                           \
            const T *src = yb + o * ld + s * j->P, b = bias ? bias[gr * j->Cog + o] : (T)0;       \
            for (int64_t p = 0; p < j->P; p++) dst[p] = src[p] + b;                               \
          }                                                                                       \
      }                                                                                           \
    }                                                                                             \
    free(col);                                                                                    \
  }                                                                                               \
  static void conv_bwd_input_chunks_##T(void *ctx, int64_t c0, int64_t c1) {                      \
    conv_job *j = ctx;                                                                            \
    const int64_t nb = j->nb, KP = j->K * nb * j->P;                                              \
    T *col = chunk_scratch(j, sizeof(T));                                                         \
    if (!col) return;                                                                             \
    T *dyb = col + KP;                                                                            \
    const T *dy = j->in, *w = j->w;                                                               \
    T *dx = j->out;                                                                               \
    const int64_t plane = j->g.H * j->g.W;                                                        \
    for (int64_t ch = c0; ch < c1; ch++) {                                                        \
      int64_t n0 = ch * nb, m = chunk_len(j, ch), ld = m * j->P;                                  \
      memset(dx + n0 * j->g.C * plane, 0, sizeof(T) * (size_t)(m * j->g.C * plane));              \
      for (int64_t gr = 0; gr < j->g.G; gr++) {                                                   \
        gather_##T(j, dy, n0, m, gr, dyb);                                                        \
        gemm_##T(true, false, j->K, ld, j->Cog, w + gr * j->Cog * j->K, dyb, 0, col);             \
        for (int64_t s = 0; s < m; s++)                                                           \
          col2im_##T(&j->g, j->Cg, col + s * j->P, ld, dx + ((n0 + s) * j->g.C + gr * j->Cg) * plane); \
      }                                                                                           \
    }                                                                                             \
    free(col);                                                                                    \
  }                                                                                               \
  static void conv_bwd_weight_chunks_##T(void *ctx, int64_t c0, int64_t c1) {                     \
    conv_job *j = ctx;                                                                            \
    const int64_t nb = j->nb, KP = j->K * nb * j->P;                                              \
    T *col = chunk_scratch(j, sizeof(T));                                                         \
    if (!col) return;                                                                             \
    T *dyb = col + KP;                                                                            \
    const T *dy = j->in, *x = j->w;                                                               \
    T *part = j->out;                                                                             \
    for (int64_t ch = c0; ch < c1; ch++) {                                                        \
      int64_t n0 = ch * nb, m = chunk_len(j, ch), ld = m * j->P;                                  \
      for (int64_t gr = 0; gr < j->g.G; gr++) {                                                   \
        for (int64_t s = 0; s < m; s++)                                                           \
          im2col_##T(&j->g, j->Cg, x + ((n0 + s) * j->g.C + gr * j->Cg) * j->g.H * j->g.W,        \
                     col + s * j->P, ld);                                                         \
        gather_##T(j, dy, n0, m, gr, dyb);                                                        \
        gemm_##T(false, true, j->Cog, j->K, ld, dyb, col, 0,                                      \
                 part + (ch * j->g.Co + gr * j->Cog) * j->K);                                     \
      }                                                                                           \
    }                                                                                             \
    free(col);                                                                                    \
  }                                                                                               \
  static ag_status conv_run_##T(const char *name, conv_geom g, const void *in, const void *w,       \
                                const void *bias, void *out, ag_cpu_range_fn fn, bool weight) {    \
    conv_job j = {.g = g, .in = in, .w = w, .bias = bias, .out = out};                            \
    atomic_init(&j.oom, 0);                                                                       \
    j.Cg = g.C / g.G, j.Cog = g.Co / g.G, j.K = j.Cg * g.kh * g.kw, j.P = g.Ho * g.Wo;            \
    j.nb = conv_chunk(g.N, j.K, j.P);                                                             \
    const int64_t nchunks = (g.N + j.nb - 1) / j.nb, dwn = g.Co * j.K;                            \
    T *part = NULL;                                                                               \
    if (weight) {                                                                                 \
      if (g.N == 0 || j.P == 0) {                                                                 \
        memset(out, 0, sizeof(T) * (size_t)dwn);                                                  \
        return AG_OK;                                                                             \
      }                                                                                           \
      part = malloc(sizeof(T) * (size_t)(nchunks * dwn));                                         \
      if (!part) return ag_error_set(AG_ERR_OOM, "%s: no memory for the weight gradient's chunks", name); \
      j.out = part;                                                                               \
    }                                                                                             \
    if (g.N > 0) ag__cpu_par_for(nchunks, g.N * g.Co * j.K * j.P, fn, &j);                        \
    if (weight) {                                                                                 \
      T *dw = out;                                                                                \
      memcpy(dw, part, sizeof(T) * (size_t)dwn);                                                  \
      for (int64_t ch = 1; ch < nchunks; ch++)                                                    \
        for (int64_t i = 0; i < dwn; i++) dw[i] += part[ch * dwn + i];                            \
      free(part);                                                                                 \
    }                                                                                             \
    if (atomic_load(&j.oom)) return ag_error_set(AG_ERR_OOM, "%s: no memory for im2col", name);   \
    return AG_OK;                                                                                 \
  }                                                                                               \
  static ag_status conv_fwd_##T(const ag_k_conv2d *a) {                                           \
    conv_geom g = AG_CONV_GEOM(a, a->x, a->y, a->w);                                                 \
    return conv_run_##T(a->call->name, g, ag__cpu_ptr(a->x), ag__cpu_ptr(a->w),                   \
                        a->bias ? ag__cpu_ptr(a->bias) : NULL, ag__cpu_ptr(a->y), conv_fwd_chunks_##T, \
                        false);                                                                   \
  }                                                                                               \
  static ag_status conv_bwd_input_##T(const ag_k_conv2d_bwd_input *a) {                           \
    conv_geom g = AG_CONV_GEOM(a, a->dx, a->dy, a->w);                                               \
    return conv_run_##T(a->call->name, g, ag__cpu_ptr(a->dy), ag__cpu_ptr(a->w), NULL,            \
                        ag__cpu_ptr(a->dx), conv_bwd_input_chunks_##T, false);                    \
  }                                                                                               \
  static ag_status conv_bwd_weight_##T(const ag_k_conv2d_bwd_weight *a) {                         \
    conv_geom g = AG_CONV_GEOM(a, a->x, a->dy, a->dw);                                               \
    return conv_run_##T(a->call->name, g, ag__cpu_ptr(a->dy), ag__cpu_ptr(a->x), NULL,            \
                        ag__cpu_ptr(a->dw), conv_bwd_weight_chunks_##T, true);                    \
  }

/* Pooling over planes (N*C of them, split across the pool's threads). The
 * max picks its window's first maximum without branches (a data-dependent
 * branch per element mispredicts on real activations); a NaN wins and the
 * first NaN is kept. A 2x2 window of stride 2 without padding that fits the
 * input (the CNN default) has its own loop. */
typedef struct pool_job {
  int op; /* ag_pool_op */
  int64_t H, W, Ho, Wo, sh, sw, ph, pw, kh, kw;
  bool with_pad;
  const void *in;   /* fwd: x; bwd: dy */
  void *out;        /* fwd: y; bwd: dx */
  int32_t *idx;     /* MAX: the argmax (written by fwd, read by bwd) */
} pool_job;

/* The job of a pool call a (forward or backward: their windows have the
 * same names) with input X and output Y. */
#define POOL_JOB_OF(a, X, Y)                                                                      \
  ((pool_job){.op = (a)->variant, .H = (X)->shape[2], .W = (X)->shape[3], .Ho = (Y)->shape[2],     \
              .Wo = (Y)->shape[3], .sh = (a)->stride_h, .sw = (a)->stride_w, .ph = (a)->pad_h,     \
              .pw = (a)->pad_w, .kh = (a)->kernel_h, .kw = (a)->kernel_w, .with_pad = (a)->count_pad != 0})

/* The window of output (oh, ow) clipped to the input, and its divisor. */
static void pool_window(const pool_job *j, int64_t oh, int64_t ow, int64_t *h0, int64_t *h1, int64_t *w0,
                        int64_t *w1, int64_t *div) {
  const int64_t H = j->H, W = j->W;
  if (j->op == AG_P_ADAPTIVE_AVG) {
    *h0 = oh * H / j->Ho, *h1 = ((oh + 1) * H + j->Ho - 1) / j->Ho;
    *w0 = ow * W / j->Wo, *w1 = ((ow + 1) * W + j->Wo - 1) / j->Wo;
    *div = (*h1 - *h0) * (*w1 - *w0);
    return;
  }
  *h0 = oh * j->sh - j->ph, *h1 = *h0 + j->kh, *w0 = ow * j->sw - j->pw, *w1 = *w0 + j->kw;
  int64_t hp = *h1 < H + j->ph ? *h1 : H + j->ph, wp = *w1 < W + j->pw ? *w1 : W + j->pw;
  *div = (hp - *h0) * (wp - *w0);
  if (*h0 < 0) *h0 = 0;
  if (*w0 < 0) *w0 = 0;
  if (*h1 > H) *h1 = H;
  if (*w1 > W) *w1 = W;
  if (!j->with_pad) *div = (*h1 - *h0) * (*w1 - *w0);
}

static bool pool_is_2x2(const pool_job *j) {
  return j->op == AG_P_MAX && j->kh == 2 && j->kw == 2 && j->sh == 2 && j->sw == 2 && j->ph == 0 &&
         j->pw == 0 && 2 * j->Ho <= j->H && 2 * j->Wo <= j->W;
}

/* best/bi take v at index i when v > best, or v is the first NaN */
#define POOL_TAKE(v, i)                                   \
  do {                                                    \
    const int take_ = ((v) > best) | (((v) != (v)) & (best == best)); \
    best = take_ ? (v) : best;                            \
    bi = take_ ? (i) : bi;                                \
  } while (0)

#define POOL(T)                                                                                   \
  static void pool_fwd_planes_##T(void *ctx, int64_t q0, int64_t q1) {                            \
    const pool_job *j = ctx;                                                                      \
    const int64_t H = j->H, W = j->W, Ho = j->Ho, Wo = j->Wo;                                     \
    const T *x = j->in;                                                                           \
    T *y = j->out;                                                                                \
    const bool two = pool_is_2x2(j);                                                              \
    for (int64_t q = q0; q < q1; q++) {                                                           \
      const T *xp = x + q * H * W;                                                                \
      T *yp = y + q * Ho * Wo;                                                                    \
      int32_t *ip = j->idx ? j->idx + q * Ho * Wo : NULL;                                         \
      int nan = 0;                                                                                \
      if (two) {                                                                                  \
        for (int64_t oh = 0; oh < Ho; oh++) {                                                     \
          const T *r0 = xp + 2 * oh * W, *r1 = r0 + W;                                            \
          for (int64_t ow = 0; ow < Wo; ow++) {                                                   \
            const T a = r0[2 * ow], b = r0[2 * ow + 1], d = r1[2 * ow], e = r1[2 * ow + 1];         \
            const T ab = b > a ? b : a, de = e > d ? e : d, m = de > ab ? de : ab;                \
            /* the first element equal to the max: selects, no branches */                       \
            const int32_t off = a == m ? 0 : b == m ? 1 : d == m ? (int32_t)W : (int32_t)W + 1;    \
            yp[oh * Wo + ow] = m;                                                                 \
            ip[oh * Wo + ow] = (int32_t)(2 * oh * W + 2 * ow) + off;                              \
            nan |= (a != a) | (b != b) | (d != d) | (e != e);                                     \
          }                                                                                       \
        }                                                                                         \
        if (!nan) continue; /* else the general loop redoes the plane with NaNs winning */         \
      }                                                                                           \
      for (int64_t oh = 0; oh < Ho; oh++)                                                         \
        for (int64_t ow = 0; ow < Wo; ow++) {                                                     \
          int64_t h0, h1, w0, w1, div;                                                            \
          pool_window(j, oh, ow, &h0, &h1, &w0, &w1, &div);                                       \
          const int64_t o = oh * Wo + ow;                                                         \
          if (ip) {                                                                               \
            T best = -INFINITY;                                                                   \
            int64_t bi = h0 * W + w0;                                                             \
            for (int64_t i = h0; i < h1; i++)                                                     \
              for (int64_t k = w0; k < w1; k++) POOL_TAKE(xp[i * W + k], i * W + k);              \
            yp[o] = best;                                                                         \
            ip[o] = (int32_t)bi;                                                                  \
          } else {                                                                                \
            T acc = 0;                                                                            \
            for (int64_t i = h0; i < h1; i++)                                                     \
              for (int64_t k = w0; k < w1; k++) acc += xp[i * W + k];                             \
            yp[o] = div > 0 ? acc / (T)div : (T)0;                                                \
          }                                                                                       \
        }                                                                                         \
    }                                                                                             \
  }                                                                                               \
  static void pool_bwd_planes_##T(void *ctx, int64_t q0, int64_t q1) {                            \
    const pool_job *j = ctx;                                                                      \
    const int64_t H = j->H, W = j->W, Ho = j->Ho, Wo = j->Wo;                                     \
    const T *dy = j->in;                                                                          \
    T *dx = j->out;                                                                               \
    for (int64_t q = q0; q < q1; q++) {                                                           \
      T *dp = dx + q * H * W;                                                                     \
      const T *gp = dy + q * Ho * Wo;                                                             \
      memset(dp, 0, sizeof(T) * (size_t)(H * W));                                                \
      if (j->idx) {                                                                               \
        const int32_t *ip = j->idx + q * Ho * Wo;                                                 \
        for (int64_t o = 0; o < Ho * Wo; o++) dp[ip[o]] += gp[o];                                 \
        continue;                                                                                 \
      }                                                                                           \
      for (int64_t oh = 0; oh < Ho; oh++)                                                         \
        for (int64_t ow = 0; ow < Wo; ow++) {                                                     \
          int64_t h0, h1, w0, w1, div;                                                            \
          pool_window(j, oh, ow, &h0, &h1, &w0, &w1, &div);                                       \
          if (div <= 0) continue;                                                                 \
          const T gv = gp[oh * Wo + ow] / (T)div;                                                 \
          for (int64_t i = h0; i < h1; i++)                                                       \
            for (int64_t k = w0; k < w1; k++) dp[i * W + k] += gv;                                \
        }                                                                                         \
    }                                                                                             \
  }

/* j (geometry from the input X) over its planes, with its work for the
 * pool (window reads); in, out, argmax: the job's operands. */
static void pool_run(pool_job j, const ag_koperand *X, const ag_koperand *in, const ag_koperand *out,
                     const ag_koperand *argmax, ag_cpu_range_fn fn) {
  j.in = ag__cpu_ptr(in);
  j.out = ag__cpu_ptr(out);
  j.idx = j.op == AG_P_MAX ? (int32_t *)ag__cpu_ptr(argmax) : NULL;
  const int64_t planes = X->shape[0] * X->shape[1];
  const int64_t win = j.op == AG_P_ADAPTIVE_AVG ? (j.H / (j.Ho > 0 ? j.Ho : 1) + 1) * (j.W / (j.Wo > 0 ? j.Wo : 1) + 1)
                                                : j.kh * j.kw;
  ag__cpu_par_for(planes, planes * (j.H * j.W + j.Ho * j.Wo * win), fn, &j);
}

/* Batch norm: per-channel sums (BN_STATS) and the per-channel affine map
 * (BN_APPLY) over contiguous [N, C, HW]. Sums run over each channel's N
 * planes in a fixed order: blocks of up to BN_BLOCK elements in 16 lanes of
 * T (vector registers), each block's sum added into f64, so the result does
 * not depend on the thread count and f32 rounding spans at most
 * BN_BLOCK/16 terms. Channels are split across threads. */
typedef struct bn_job {
  const void *a, *b, *mu, *coef; /* inputs (b, mu: BN_SUMS, BN_AFFINE_B) */
  void *y;                       /* stats or y */
  int64_t N, C, HW;
} bn_job;

#define BN_BLOCK 2048
#define BN_LANES 16

#define BN(T)                                                                                     \
  /* sum of a[0..n) (mode 0), of (a - m)^2 (mode 1), or of a*(b - m) into *s1 and a into *s0 (mode 2) */ \
  static void bn_block_##T(int mode, const T *restrict a, const T *restrict b, T m, int64_t n,    \
                           double *s0, double *s1) {                                              \
    T l0[BN_LANES] = {0}, l1[BN_LANES] = {0};                                                     \
    const int64_t n16 = n - n % BN_LANES;                                                         \
    int64_t i = 0;                                                                                \
    if (mode == 0)                                                                                \
      for (; i < n16; i += BN_LANES)                                                              \
        for (int k = 0; k < BN_LANES; k++) l0[k] += a[i + k];                                     \
    else if (mode == 1)                                                                           \
      for (; i < n16; i += BN_LANES)                                                              \
        for (int k = 0; k < BN_LANES; k++) {                                                      \
          const T d = a[i + k] - m;                                                               \
          l0[k] += d * d;                                                                         \
        }                                                                                         \
    else                                                                                          \
      for (; i < n16; i += BN_LANES)                                                              \
        for (int k = 0; k < BN_LANES; k++) {                                                      \
          l0[k] += a[i + k] * (b[i + k] - m);                                                     \
          l1[k] += a[i + k];                                                                      \
        }                                                                                         \
    for (; i < n; i++) {                                                                          \
      const T d = mode == 0 ? a[i] : mode == 1 ? (a[i] - m) * (a[i] - m) : a[i] * (b[i] - m);     \
      l0[0] += d;                                                                                 \
      if (mode == 2) l1[0] += a[i];                                                               \
    }                                                                                             \
    double t0 = 0, t1 = 0;                                                                        \
    for (int k = 0; k < BN_LANES; k++) t0 += (double)l0[k], t1 += (double)l1[k];                  \
    *s1 += t0;                                                                                    \
    if (mode == 2) *s0 += t1;                                                                     \
  }                                                                                               \
  /* the sums of bn_block over channel ch's N planes */                                           \
  static void bn_channel_##T(const bn_job *j, int mode, const T *a, const T *b, T m, int64_t ch,  \
                             double *s0, double *s1) {                                            \
    for (int64_t n = 0; n < j->N; n++) {                                                          \
      const int64_t off = (n * j->C + ch) * j->HW;                                                \
      for (int64_t i = 0; i < j->HW; i += BN_BLOCK) {                                             \
        const int64_t len = j->HW - i < BN_BLOCK ? j->HW - i : BN_BLOCK;                          \
        bn_block_##T(mode, a + off + i, b ? b + off + i : NULL, m, len, s0, s1);                  \
      }                                                                                           \
    }                                                                                             \
  }                                                                                               \
  static void bn_stats_chans_##T(void *ctx, int64_t c0, int64_t c1) {                             \
    const bn_job *j = ctx;                                                                        \
    const int64_t C = j->C, cnt = j->N * j->HW;                                                   \
    const T *a = j->a, *b = j->b, *mu = j->mu;                                                    \
    T *out = j->y;                                                                                \
    for (int64_t ch = c0; ch < c1; ch++) {                                                        \
      double s0 = 0, s1 = 0;                                                                      \
      if (!b) { /* the mean, then the second moment about it */                                   \
        bn_channel_##T(j, 0, a, NULL, 0, ch, &s1, &s0);                                           \
        const double mean = s0 / (double)cnt;                                                     \
        bn_channel_##T(j, 1, a, NULL, (T)mean, ch, &s0, &s1);                                     \
        out[ch] = (T)mean;                                                                        \
        out[C + ch] = (T)(s1 / (double)cnt);                                                      \
        continue;                                                                                 \
      }                                                                                           \
      bn_channel_##T(j, 2, a, b, mu[ch], ch, &s0, &s1);                                           \
      out[ch] = (T)s0;                                                                            \
      out[C + ch] = (T)s1;                                                                        \
    }                                                                                             \
  }                                                                                               \
  static void bn_apply_planes_##T(void *ctx, int64_t q0, int64_t q1) {                            \
    const bn_job *j = ctx;                                                                        \
    const int64_t C = j->C, HW = j->HW;                                                           \
    T *y = j->y;                                                                                  \
    const T *a = j->a, *coef = j->coef, *b = j->b;                                                \
    for (int64_t q = q0; q < q1; q++) {                                                           \
      const int64_t ch = q % C;                                                                   \
      const T p = coef[ch], sh = coef[C + ch];                                                    \
      T *restrict yo = y + q * HW;                                                                \
      const T *restrict ai = a + q * HW;                                                          \
      if (!b) {                                                                                   \
        for (int64_t i = 0; i < HW; i++) yo[i] = ai[i] * p + sh;                                  \
        continue;                                                                                 \
      }                                                                                           \
      const T r = coef[2 * C + ch], mu = coef[3 * C + ch];                                        \
      const T *restrict bi = b + q * HW;                                                          \
      for (int64_t i = 0; i < HW; i++) yo[i] = ai[i] * p + sh + (bi[i] - mu) * r;                 \
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
BN(float)
BN(double)

ag_status cpu_k_conv2d(ag_kernel_error *err, const ag_k_conv2d *a) {
  (void)err;
  if (a->call->flags & AG_KF_PORTABLE) return ag__cpu_p_conv2d(a);
  return a->y->dtype == AG_F64 ? conv_fwd_double(a) : conv_fwd_float(a);
}

ag_status cpu_k_conv2d_bwd_input(ag_kernel_error *err, const ag_k_conv2d_bwd_input *a) {
  (void)err;
  if (a->call->flags & AG_KF_PORTABLE) return ag__cpu_p_conv2d_bwd_input(a);
  return a->dx->dtype == AG_F64 ? conv_bwd_input_double(a) : conv_bwd_input_float(a);
}

ag_status cpu_k_conv2d_bwd_weight(ag_kernel_error *err, const ag_k_conv2d_bwd_weight *a) {
  (void)err;
  if (a->call->flags & AG_KF_PORTABLE) return ag__cpu_p_conv2d_bwd_weight(a);
  return a->dw->dtype == AG_F64 ? conv_bwd_weight_double(a) : conv_bwd_weight_float(a);
}

ag_status cpu_k_pool2d(ag_kernel_error *err, const ag_k_pool2d *a) {
  (void)err;
  if ((a->call->flags & AG_KF_PORTABLE) && a->y->dtype == AG_F64 && a->variant != AG_P_MAX)
    return ag_k__not_portable(a->call, "cpu", AG_F64);
  pool_run(POOL_JOB_OF(a, a->x, a->y), a->x, a->x, a->y, a->argmax,
           a->y->dtype == AG_F64 ? pool_fwd_planes_double : pool_fwd_planes_float);
  return AG_OK;
}

ag_status cpu_k_pool2d_bwd(ag_kernel_error *err, const ag_k_pool2d_bwd *a) {
  (void)err;
  pool_run(POOL_JOB_OF(a, a->dx, a->dy), a->dx, a->dy, a->dx, a->argmax,
           a->dx->dtype == AG_F64 ? pool_bwd_planes_double : pool_bwd_planes_float);
  return AG_OK;
}

ag_status cpu_k_bn_stats(ag_kernel_error *err, const ag_k_bn_stats *a) {
  (void)err;
  if (a->call->flags & AG_KF_PORTABLE) return ag__cpu_p_bn_stats(a);
  const bool sums = a->variant == AG_KV_BN_SUMS;
  bn_job j = {.a = ag__cpu_ptr(a->a), .b = sums ? ag__cpu_ptr(a->b) : NULL, .mu = sums ? ag__cpu_ptr(a->mu) : NULL,
              .y = ag__cpu_ptr(a->stats), .N = a->n, .C = a->c, .HW = a->hw};
  ag__cpu_par_for(j.C, 2 * j.N * j.C * j.HW, a->stats->dtype == AG_F64 ? bn_stats_chans_double : bn_stats_chans_float,
                  &j);
  return AG_OK;
}

ag_status cpu_k_bn_apply(ag_kernel_error *err, const ag_k_bn_apply *a) {
  (void)err;
  if (a->call->flags & AG_KF_PORTABLE) return ag__cpu_p_bn_apply(a);
  const bool with_b = a->variant == AG_KV_BN_AFFINE_B;
  bn_job j = {.a = ag__cpu_ptr(a->a), .b = with_b ? ag__cpu_ptr(a->b) : NULL, .coef = ag__cpu_ptr(a->coef),
              .y = ag__cpu_ptr(a->y), .N = a->n, .C = a->c, .HW = a->hw};
  ag__cpu_par_for(j.N * j.C, j.N * j.C * j.HW, a->y->dtype == AG_F64 ? bn_apply_planes_double : bn_apply_planes_float,
                  &j);
  return AG_OK;
}
