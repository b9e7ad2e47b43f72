/* conv2d and pooling for AG_K_CONV2D*, AG_K_POOL2D* (NCHW, contiguous; f32,
 * f16, bf16 with f32 accumulation). conv2d is an implicit GEMM: the tiled
 * kernel of gemm.cu, with tile loads that compute input coordinates, so the
 * im2col matrix is never stored and no workspace is needed. The weight
 * gradient splits its long reduction (batch x pixels) into chunks whose
 * partials are added in a fixed order: deterministic, no atomics. Pooling
 * backward gathers (each input element sums the outputs that picked it, in
 * the CPU backend's order), so it is deterministic too. Batch norm
 * (AG_K_BN_STATS, AG_K_BN_APPLY, f32): per-channel sums split into chunks
 * combined in a fixed order, and the per-channel affine map. */
#include "common.cuh"

#define CV_M 64
#define CV_N 64
#define CV_K 16

typedef struct cv_geom {
  long long N, C, H, W, Co, Ho, Wo, kh, kw, sh, sw, ph, pw, dh, dw, G;
  long long Cg, Cog, K, P, khw; /* C/G, Co/G, Cg*kh*kw, Ho*Wo, kh*kw */
} cv_geom;

/* The three ops by the forward's roles (gpu.h agk_conv). */
template <typename A> static agk_conv cv_common(const A *a, ag_kop op) {
  agk_conv cv;
  memset(&cv, 0, sizeof cv);
  cv.call = a->call;
  cv.op = op;
  cv.dtype = a->dtype;
  cv.stride_h = a->stride_h;
  cv.stride_w = a->stride_w;
  cv.pad_h = a->pad_h;
  cv.pad_w = a->pad_w;
  cv.dilation_h = a->dilation_h;
  cv.dilation_w = a->dilation_w;
  cv.groups = a->groups;
  return cv;
}
agk_conv agk_conv_of(const ag_k_conv2d *a) {
  agk_conv cv = cv_common(a, AG_K_CONV2D);
  cv.x = a->x;
  cv.y = a->y;
  cv.w = a->w;
  cv.bias = a->bias;
  return cv;
}
agk_conv agk_conv_of(const ag_k_conv2d_bwd_input *a) {
  agk_conv cv = cv_common(a, AG_K_CONV2D_BWD_INPUT);
  cv.x = a->dx;
  cv.y = a->dy;
  cv.w = a->w;
  return cv;
}
agk_conv agk_conv_of(const ag_k_conv2d_bwd_weight *a) {
  agk_conv cv = cv_common(a, AG_K_CONV2D_BWD_WEIGHT);
  cv.x = a->x;
  cv.y = a->dy;
  cv.w = a->dw;
  return cv;
}

static cv_geom cv_geom_of(const agk_conv *cv) {
  const ag_koperand *x = cv->x, *y = cv->y, *w = cv->w;
  cv_geom g = {x->shape[0],  x->shape[1],  x->shape[2],   x->shape[3],   y->shape[1],   y->shape[2],
               y->shape[3],  w->shape[2],  w->shape[3],   cv->stride_h,  cv->stride_w,  cv->pad_h,
               cv->pad_w,    cv->dilation_h, cv->dilation_w, cv->groups, 0, 0, 0, 0, 0};
  g.Cg = g.C / g.G;
  g.Cog = g.Co / g.G;
  g.khw = g.kh * g.kw;
  g.K = g.Cg * g.khw;
  g.P = g.Ho * g.Wo;
  return g;
}

/* Column k = (c, i, j) of the im2col matrix at pixel p = (oh, ow) of sample
 * n, group gr: the input element it reads, 0 in the padding. */
template <typename T> AGK_DEV float cv_col(const cv_geom &g, const T *x, long long n, long long gr, long long k,
                                            long long p) {
  long long c = k / g.khw, r = k - c * g.khw, i = r / g.kw, j = r - i * g.kw;
  long long oh = p / g.Wo, ow = p - oh * g.Wo;
  long long ih = oh * g.sh - g.ph + i * g.dh, iw = ow * g.sw - g.pw + j * g.dw;
  if (ih < 0 || ih >= g.H || iw < 0 || iw >= g.W) return 0.f;
  return agk_tof(x[((n * g.C + gr * g.Cg + c) * g.H + ih) * g.W + iw]);
}

/* Forward, per (sample n, group gr) = z: y[Cog, P] = w[Cog, K] @ col[K, P] + bias. */
template <typename T> struct cv_fwd {
  static constexpr bool A_KFAST = true, B_NFAST = true;
  cv_geom g;
  const T *x, *w, *bias;
  T *y;
  long long M, N;
  AGK_DEV long long kbeg(long long) const { return 0; }
  AGK_DEV long long kend(long long) const { return g.K; }
  AGK_DEV float a(long long z, long long m, long long k) const {
    return agk_tof(w[((z % g.G) * g.Cog + m) * g.K + k]);
  }
  AGK_DEV float b(long long z, long long k, long long p) const { return cv_col(g, x, z / g.G, z % g.G, k, p); }
  AGK_DEV void store(long long z, long long m, long long p, float v) const {
    long long n = z / g.G, co = (z % g.G) * g.Cog + m;
    if (bias) v += agk_tof(bias[co]);
    y[(n * g.Co + co) * g.P + p] = agk_fromf<T>(v);
  }
};

/* Input gradient, per (n, gr) = z: dx[Cg, H*W] = w^T[Cg, Cog*khw] @ B where
 * B[(co, i, j), (h, w)] is the dy element whose window put tap (i, j) on
 * (h, w), or 0 (strides skip most taps). */
template <typename T> struct cv_bwd_in {
  static constexpr bool A_KFAST = false, B_NFAST = true;
  cv_geom g;
  const T *dy, *w;
  T *dx;
  long long M, N;
  AGK_DEV long long kbeg(long long) const { return 0; }
  AGK_DEV long long kend(long long) const { return g.Cog * g.khw; }
  AGK_DEV float a(long long z, long long c, long long k) const {
    long long co = k / g.khw, r = k - co * g.khw;
    return agk_tof(w[(((z % g.G) * g.Cog + co) * g.Cg + c) * g.khw + r]);
  }
  AGK_DEV float b(long long z, long long k, long long q) const {
    long long co = k / g.khw, r = k - co * g.khw, i = r / g.kw, j = r - i * g.kw;
    long long h = q / g.W, wq = q - h * g.W;
    long long th = h + g.ph - i * g.dh, tw = wq + g.pw - j * g.dw;
    if (th < 0 || tw < 0 || th % g.sh || tw % g.sw) return 0.f;
    long long oh = th / g.sh, ow = tw / g.sw;
    if (oh >= g.Ho || ow >= g.Wo) return 0.f;
    return agk_tof(dy[(((z / g.G) * g.Co + (z % g.G) * g.Cog + co) * g.Ho + oh) * g.Wo + ow]);
  }
  AGK_DEV void store(long long z, long long c, long long q, float v) const {
    dx[((z / g.G) * g.C + (z % g.G) * g.Cg + c) * g.H * g.W + q] = agk_fromf<T>(v);
  }
};

/* Weight gradient, per (split s, group gr) = z = s * G + gr:
 * dw[Cog, K] = dy[Cog, (n, p)] @ col[(n, p), K] over the split's chunk of
 * the N*P reduction. With one split it stores dw; otherwise f32 partials
 * part[s][Co*K], added in split order by k_cv_split_sum. */
template <typename T> struct cv_bwd_w {
  static constexpr bool A_KFAST = true, B_NFAST = false;
  cv_geom g;
  const T *dy, *x;
  T *dw;
  float *part;
  long long M, N, R, chunk;
  AGK_DEV long long kbeg(long long z) const { return (z / g.G) * chunk; }
  AGK_DEV long long kend(long long z) const {
    long long e = (z / g.G + 1) * chunk;
    return e < R ? e : R;
  }
  AGK_DEV float a(long long z, long long m, long long r) const {
    long long n = r / g.P, p = r - n * g.P;
    return agk_tof(dy[(n * g.Co + (z % g.G) * g.Cog + m) * g.P + p]);
  }
  AGK_DEV float b(long long z, long long r, long long k) const {
    long long n = r / g.P, p = r - n * g.P;
    return cv_col(g, x, n, z % g.G, k, p);
  }
  AGK_DEV void store(long long z, long long m, long long k, float v) const {
    long long e = ((z % g.G) * g.Cog + m) * g.K + k;
    if (part) part[(z / g.G) * g.Co * g.K + e] = v;
    else dw[e] = agk_fromf<T>(v);
  }
};

/* One 64x64 output tile at (m0, n0) of problem z: 16-deep k steps through
 * shared memory, 4x4 outputs per thread (the layout of gemm.cu). */
template <typename PB>
AGK_DEV void cv_tile(const PB &p, long long z, long long m0, long long n0, float (*As)[CV_M + 4],
                     float (*Bs)[CV_N + 4]) {
  int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
  float acc[4][4];
#pragma unroll
  for (int i = 0; i < 4; i++)
#pragma unroll
    for (int j = 0; j < 4; j++) acc[i][j] = 0.f;
  const long long kb = p.kbeg(z), ke = p.kend(z);
  for (long long k0 = kb; k0 < ke; k0 += CV_K) {
#pragma unroll
    for (int r = 0; r < 4; r++) {
      int idx = tid + r * 256, mm, kk, nn;
      /* the index that walks contiguous memory varies fastest across threads */
      if (PB::A_KFAST) { mm = idx / CV_K; kk = idx % CV_K; }
      else { mm = idx % CV_M; kk = idx / CV_M; }
      long long gm = m0 + mm, gk = k0 + kk;
      As[kk][mm] = gm < p.M && gk < ke ? p.a(z, gm, gk) : 0.f;
      if (PB::B_NFAST) { nn = idx % CV_N; kk = idx / CV_N; }
      else { nn = idx / CV_K; kk = idx % CV_K; }
      long long gn = n0 + nn;
      gk = k0 + kk;
      Bs[kk][nn] = gn < p.N && gk < ke ? p.b(z, gk, gn) : 0.f;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < CV_K; kk++) {
      float a[4], b[4];
#pragma unroll
      for (int i = 0; i < 4; i++) a[i] = As[kk][ty + 16 * i];
#pragma unroll
      for (int j = 0; j < 4; j++) b[j] = Bs[kk][tx + 16 * j];
#pragma unroll
      for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) acc[i][j] += a[i] * b[j];
    }
    __syncthreads(); /* this step's reads before the next step's loads */
  }
#pragma unroll
  for (int i = 0; i < 4; i++) {
    long long gm = m0 + ty + 16 * i;
    if (gm >= p.M) continue;
#pragma unroll
    for (int j = 0; j < 4; j++) {
      long long gn = n0 + tx + 16 * j;
      if (gn < p.N) p.store(z, gm, gn, acc[i][j]);
    }
  }
}

/* Tiles numbered (z, m tile, n tile), n fastest, taken in a grid-stride
 * loop: any batch and size fits every vendor's grid limits. */
template <typename PB> __global__ void __launch_bounds__(256) k_cv_gemm(PB p, long long ntm, long long ntn,
                                                                         long long ntiles) {
  __shared__ float As[CV_K][CV_M + 4];
  __shared__ float Bs[CV_K][CV_N + 4];
  for (long long t = blockIdx.x; t < ntiles; t += gridDim.x) {
    long long tn = t % ntn, rest = t / ntn, tm = rest % ntm, z = rest / ntm;
    cv_tile(p, z, tm * CV_M, tn * CV_N, As, Bs);
  }
}

template <typename PB> static gpuError_t cv_run(const agk_env *env, const PB &p, long long batch) {
  long long ntm = (p.M + CV_M - 1) / CV_M, ntn = (p.N + CV_N - 1) / CV_N, ntiles = ntm * ntn * batch;
  if (ntiles == 0) return gpuSuccess;
  agk_launch(k_cv_gemm<PB>, agk_blocks(ntiles, 1, 256, agk_wave(env, 256)), 256, 0, env->stream, p, ntm, ntn,
             ntiles);
  return gpuGetLastError();
}

/* out[e] = sum over s < splits of part[s * n + e], in split order. */
template <typename T> __global__ void k_cv_split_sum(T *out, const float *part, long long n, long long splits) {
  long long stride = (long long)gridDim.x * blockDim.x;
  for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += stride) {
    float s = part[e];
    for (long long k = 1; k < splits; k++) s += part[k * n + e];
    out[e] = agk_fromf<T>(s);
  }
}

template <typename T> static gpuError_t conv_fwd_go(const agk_env *env, const agk_conv *cv) {
  cv_fwd<T> p;
  p.g = cv_geom_of(cv);
  p.y = (T *)agk_ptr(cv->y);
  p.x = (const T *)agk_ptr(cv->x);
  p.w = (const T *)agk_ptr(cv->w);
  p.bias = (const T *)agk_optr(cv->bias);
  p.M = p.g.Cog;
  p.N = p.g.P;
  return cv_run(env, p, p.g.N * p.g.G);
}

template <typename T> static gpuError_t conv_bwd_in_go(const agk_env *env, const agk_conv *cv) {
  cv_bwd_in<T> p;
  p.g = cv_geom_of(cv);
  p.dx = (T *)agk_ptr(cv->x);
  p.dy = (const T *)agk_ptr(cv->y);
  p.w = (const T *)agk_ptr(cv->w);
  p.M = p.g.Cg;
  p.N = p.g.H * p.g.W;
  return cv_run(env, p, p.g.N * p.g.G);
}

template <typename T> static gpuError_t conv_bwd_w_go(const agk_env *env, const agk_conv *cv) {
  cv_bwd_w<T> p;
  p.g = cv_geom_of(cv);
  p.dw = (T *)agk_ptr(cv->w);
  p.dy = (const T *)agk_ptr(cv->y);
  p.x = (const T *)agk_ptr(cv->x);
  p.part = (float *)0;
  p.M = p.g.Cog;
  p.N = p.g.K;
  p.R = p.g.N * p.g.P;
  const long long nout = p.g.Co * p.g.K;
  /* Split the reduction so that the (usually few) output tiles still fill
   * the device: about two waves of blocks, chunks of at least 1024 (a
   * multiple of the k step), partials within the stream scratch. The split
   * depends only on shapes and the device, so results repeat. */
  long long tiles = ((p.M + CV_M - 1) / CV_M) * ((p.N + CV_N - 1) / CV_N) * p.g.G;
  long long want = agk_wave(env, 256) / 2 / (tiles > 0 ? tiles : 1);
  long long by_len = p.R / 1024, by_mem = (long long)(env->scratch_bytes / sizeof(float)) / (nout > 0 ? nout : 1);
  long long splits = want < by_len ? want : by_len;
  if (splits > by_mem) splits = by_mem;
  if (splits > 256) splits = 256;
  if (splits < 1) splits = 1;
  p.chunk = (p.R + splits - 1) / splits;
  p.chunk = (p.chunk + CV_K - 1) / CV_K * CV_K;
  if (p.chunk < 1) p.chunk = 1;
  splits = (p.R + p.chunk - 1) / p.chunk;
  if (splits <= 1) { /* dw directly; with no samples (R == 0) the tiles run no k step and store 0 */
    p.chunk = p.R > 0 ? p.R : 1;
    return cv_run(env, p, p.g.G);
  }
  p.part = (float *)env->scratch;
  gpuError_t e = cv_run(env, p, splits * p.g.G);
  if (e != gpuSuccess) return e;
  agk_launch(k_cv_split_sum<T>, agk_blocks(nout, 256, 256, agk_wave(env, 256)), 256, 0, env->stream, p.dw,
             (const float *)p.part, nout, splits);
  return gpuGetLastError();
}

/* ---- pooling ---- */

typedef struct pl_geom {
  long long planes, H, W, Ho, Wo, sh, sw, ph, pw, kh, kw;
  int op, count_pad;
} pl_geom;

/* POOL2D and POOL2D_BWD name the same window */
template <typename A> static pl_geom pl_geom_of(const A *a, const ag_koperand *x, const ag_koperand *y) {
  pl_geom g;
  g.planes = x->shape[0] * x->shape[1];
  g.H = x->shape[2];
  g.W = x->shape[3];
  g.Ho = y->shape[2];
  g.Wo = y->shape[3];
  g.sh = a->stride_h;
  g.sw = a->stride_w;
  g.ph = a->pad_h;
  g.pw = a->pad_w;
  g.kh = a->kernel_h;
  g.kw = a->kernel_w;
  g.count_pad = a->count_pad != 0;
  g.op = a->variant;
  return g;
}

/* The window of output (oh, ow), clipped to the input, and its divisor: the
 * CPU backend's rule (backend.h AG_K_POOL2D). */
AGK_DEV void pl_window(const pl_geom &g, long long oh, long long ow, long long *h0, long long *h1, long long *w0,
                       long long *w1, long long *div) {
  if (g.op == AG_P_ADAPTIVE_AVG) {
    *h0 = oh * g.H / g.Ho;
    *h1 = ((oh + 1) * g.H + g.Ho - 1) / g.Ho;
    *w0 = ow * g.W / g.Wo;
    *w1 = ((ow + 1) * g.W + g.Wo - 1) / g.Wo;
    *div = (*h1 - *h0) * (*w1 - *w0);
    return;
  }
  long long a0 = oh * g.sh - g.ph, a1 = a0 + g.kh, b0 = ow * g.sw - g.pw, b1 = b0 + g.kw;
  long long hp = a1 < g.H + g.ph ? a1 : g.H + g.ph, wp = b1 < g.W + g.pw ? b1 : g.W + g.pw;
  long long d = (hp - a0) * (wp - b0);
  if (a0 < 0) a0 = 0;
  if (b0 < 0) b0 = 0;
  if (a1 > g.H) a1 = g.H;
  if (b1 > g.W) b1 = g.W;
  if (!g.count_pad) d = (a1 - a0) * (b1 - b0);
  *h0 = a0, *h1 = a1, *w0 = b0, *w1 = b1, *div = d;
}

template <typename T> __global__ void k_pool(T *y, int32_t *idx, const T *x, pl_geom g) {
  const long long n = g.planes * g.Ho * g.Wo, stride = (long long)gridDim.x * blockDim.x;
  for (long long o = (long long)blockIdx.x * blockDim.x + threadIdx.x; o < n; o += stride) {
    long long q = o / (g.Ho * g.Wo), r = o - q * g.Ho * g.Wo, oh = r / g.Wo, ow = r - oh * g.Wo;
    long long h0, h1, w0, w1, div;
    pl_window(g, oh, ow, &h0, &h1, &w0, &w1, &div);
    const T *xp = x + q * g.H * g.W;
    if (g.op == AG_P_MAX) {
      /* first maximum in row-major window order; a NaN wins at once */
      float best = -INFINITY;
      long long bi = h0 * g.W + w0;
      for (long long i = h0; i < h1; i++)
        for (long long j = w0; j < w1; j++) {
          float v = agk_tof(xp[i * g.W + j]);
          if (v > best || v != v) {
            best = v;
            bi = i * g.W + j;
            if (v != v) i = h1, j = w1; /* leave both loops */
          }
        }
      y[o] = agk_fromf<T>(best);
      idx[o] = (int32_t)bi;
    } else {
      float acc = 0.f;
      for (long long i = h0; i < h1; i++)
        for (long long j = w0; j < w1; j++) acc += agk_tof(xp[i * g.W + j]);
      y[o] = agk_fromf<T>(div > 0 ? acc / (float)div : 0.f);
    }
  }
}

/* dx[h, w] = sum over the outputs whose window holds (h, w) (and, for max,
 * whose saved index is (h, w)), in ascending output order as the CPU adds. */
template <typename T> __global__ void k_pool_bwd(T *dx, const T *dy, const int32_t *idx, pl_geom g) {
  const long long n = g.planes * g.H * g.W, stride = (long long)gridDim.x * blockDim.x;
  for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += stride) {
    long long q = e / (g.H * g.W), hw = e - q * g.H * g.W, h = hw / g.W, w = hw - h * g.W;
    long long oh0, oh1, ow0, ow1;
    if (g.op == AG_P_ADAPTIVE_AVG) {
      oh0 = h * g.Ho / g.H;
      oh1 = ((h + 1) * g.Ho + g.H - 1) / g.H;
      ow0 = w * g.Wo / g.W;
      ow1 = ((w + 1) * g.Wo + g.W - 1) / g.W;
    } else {
      long long lh = h + g.ph - g.kh + 1, lw = w + g.pw - g.kw + 1;
      oh0 = lh <= 0 ? 0 : (lh + g.sh - 1) / g.sh;
      ow0 = lw <= 0 ? 0 : (lw + g.sw - 1) / g.sw;
      oh1 = (h + g.ph) / g.sh + 1;
      ow1 = (w + g.pw) / g.sw + 1;
    }
    if (oh1 > g.Ho) oh1 = g.Ho;
    if (ow1 > g.Wo) ow1 = g.Wo;
    const long long ob = q * g.Ho * g.Wo;
    float acc = 0.f;
    for (long long oh = oh0; oh < oh1; oh++)
      for (long long ow = ow0; ow < ow1; ow++) {
        long long o = ob + oh * g.Wo + ow;
        if (g.op == AG_P_MAX) {
          if (idx[o] == hw) acc += agk_tof(dy[o]);
          continue;
        }
        long long h0, h1, w0, w1, div;
        pl_window(g, oh, ow, &h0, &h1, &w0, &w1, &div);
        if (div > 0 && h >= h0 && h < h1 && w >= w0 && w < w1) acc += agk_tof(dy[o]) / (float)div;
      }
    dx[e] = agk_fromf<T>(acc);
  }
}

/* The three ops of agk_conv (their dtype: the op's T) */
gpuError_t agk_conv_run(const agk_env *env, const agk_conv *cv) {
  switch (cv->op) {
    case AG_K_CONV2D: AGK_DISPATCH_F32ISH(cv->dtype, T, return conv_fwd_go<T>(env, cv)); break;
    case AG_K_CONV2D_BWD_INPUT: AGK_DISPATCH_F32ISH(cv->dtype, T, return conv_bwd_in_go<T>(env, cv)); break;
    case AG_K_CONV2D_BWD_WEIGHT: AGK_DISPATCH_F32ISH(cv->dtype, T, return conv_bwd_w_go<T>(env, cv)); break;
    default: break;
  }
  return gpuErrorNotSupported;
}
gpuError_t agk_conv2d(const agk_env *env, const ag_k_conv2d *a) {
  const agk_conv cv = agk_conv_of(a);
  return agk_conv_run(env, &cv);
}
gpuError_t agk_conv2d_bwd_input(const agk_env *env, const ag_k_conv2d_bwd_input *a) {
  const agk_conv cv = agk_conv_of(a);
  return agk_conv_run(env, &cv);
}
gpuError_t agk_conv2d_bwd_weight(const agk_env *env, const ag_k_conv2d_bwd_weight *a) {
  const agk_conv cv = agk_conv_of(a);
  return agk_conv_run(env, &cv);
}

gpuError_t agk_pool2d(const agk_env *env, const ag_k_pool2d *a) {
  if (a->variant < 0 || a->variant >= AG_POOL_OP_COUNT) return gpuErrorNotSupported;
  const pl_geom g = pl_geom_of(a, a->x, a->y);
  const long long n = g.planes * g.Ho * g.Wo;
  if (n == 0) return gpuSuccess;
  AGK_DISPATCH_F32ISH(a->y->dtype, T,
                      agk_launch(k_pool<T>, agk_blocks(n, 256, 256, agk_wave(env, 256)), 256, 0, env->stream,
                                 (T *)agk_ptr(a->y), (int32_t *)agk_optr(a->argmax), (const T *)agk_ptr(a->x), g))
  return gpuGetLastError();
}
gpuError_t agk_pool2d_bwd(const agk_env *env, const ag_k_pool2d_bwd *a) {
  if (a->variant < 0 || a->variant >= AG_POOL_OP_COUNT) return gpuErrorNotSupported;
  const pl_geom g = pl_geom_of(a, a->dx, a->dy);
  const long long n = g.planes * g.H * g.W;
  if (n == 0) return gpuSuccess;
  AGK_DISPATCH_F32ISH(a->dx->dtype, T,
                      agk_launch(k_pool_bwd<T>, agk_blocks(n, 256, 256, agk_wave(env, 256)), 256, 0, env->stream,
                                 (T *)agk_ptr(a->dx), (const T *)agk_ptr(a->dy), (const int32_t *)agk_optr(a->argmax),
                                 g))
  return gpuGetLastError();
}

/* ---------------- batch norm ---------------- */
/* AG_K_BN_STATS and AG_K_BN_APPLY on contiguous [N, C, HW] f32 (the core
 * composes batch norm for the other dtypes). Channel c's values, flattened
 * as k = n*HW + i, sit at (n*C + c)*HW + i. */
typedef struct bn_dims {
  long long N, C, HW, chunk; /* chunk: consecutive k per work item */
  int P;                     /* chunks per channel */
} bn_dims;

/* Advance a thread's position by step flattened elements: i within the
 * plane, off in the tensor; crossing q planes skips the q*(C-1) planes of
 * the other channels. */
#define BN_NEXT(i, off, step, HW, jump)       \
  do {                                        \
    (i) += (step);                            \
    (off) += (step);                          \
    if ((i) >= (HW)) {                        \
      long long q_ = (i) / (HW);              \
      (i) -= q_ * (HW);                       \
      (off) += q_ * (jump);                   \
    }                                         \
  } while (0)

/* Work item w = c*P + p reduces chunk p of channel c with the whole block:
 * each thread adds its strided share in f32, the block adds the threads in
 * a fixed tree. BN_MEAN_VAR: the chunk's mean, then its sum of squared
 * deviations from that mean (a second pass over the chunk); BN_SUMS (b
 * given): the chunk's sums of a and a*(b - mu[c]). One chunk per channel
 * (P == 1) stores the result; otherwise the pair goes to part[2w],
 * part[2w + 1] for k_bn_stats_final. No atomics: every run adds in the
 * same order. An empty channel gives NaN mean and variance (0/0) and zero
 * sums, as the CPU. */
__global__ void k_bn_stats(float *out, float *part, const float *a, const float *b, const float *mu, bn_dims d) {
  __shared__ float sh[32];
  const long long nhw = d.N * d.HW, step = blockDim.x, jump = (d.C - 1) * d.HW;
  for (long long w = blockIdx.x; w < d.C * d.P; w += gridDim.x) {
    const long long c = w / d.P, lo = (w - c * d.P) * d.chunk, hi = lo + d.chunk < nhw ? lo + d.chunk : nhw;
    const long long k0 = lo + threadIdx.x, n0 = k0 / d.HW, i0 = k0 - n0 * d.HW;
    const long long off0 = (n0 * d.C + c) * d.HW + i0;
    const float m = b ? mu[c] : 0.f;
    float s0 = 0.f, s1 = 0.f;
    long long i = i0, off = off0;
    for (long long k = k0; k < hi; k += step) {
      const float v = a[off];
      s0 += v;
      if (b) s1 += v * (b[off] - m);
      BN_NEXT(i, off, step, d.HW, jump);
    }
    s0 = agk_block_sum(s0, sh);
    float r0 = s0;
    if (!b) { /* the centred second pass */
      const double cnt = (double)(hi > lo ? hi - lo : 0);
      const float mean = (float)((double)s0 / cnt); /* NaN for an empty channel */
      i = i0;
      off = off0;
      for (long long k = k0; k < hi; k += step) {
        const float dv = a[off] - mean;
        s1 += dv * dv;
        BN_NEXT(i, off, step, d.HW, jump);
      }
      r0 = mean;
      s1 = agk_block_sum(s1, sh);
      if (d.P == 1) s1 = (float)((double)s1 / cnt);
    } else {
      s1 = agk_block_sum(s1, sh);
    }
    if (threadIdx.x == 0) {
      if (d.P == 1) {
        out[c] = r0;
        out[d.C + c] = s1;
      } else {
        part[2 * w] = r0;
        part[2 * w + 1] = s1;
      }
    }
  }
}

/* Combine channel c's P chunk results in chunk order, in f64. BN_MEAN_VAR:
 * (mean, M2) pairs merge by Chan et al.'s formula (counts from the
 * chunking); BN_SUMS (sums != 0): sums add. */
__global__ void k_bn_stats_final(float *out, const float *part, int sums, bn_dims d) {
  const long long nhw = d.N * d.HW, stride = (long long)gridDim.x * blockDim.x;
  for (long long c = (long long)blockIdx.x * blockDim.x + threadIdx.x; c < d.C; c += stride) {
    const float *pc = part + 2 * c * d.P;
    double r0 = 0, r1 = 0, n = 0;
    for (int p = 0; p < d.P; p++) {
      const double x0 = pc[2 * p], x1 = pc[2 * p + 1];
      if (sums) {
        r0 += x0;
        r1 += x1;
        continue;
      }
      const long long left = nhw - p * d.chunk;
      const double nb = (double)(left < d.chunk ? left : d.chunk), nn = n + nb, delta = x0 - r0;
      r0 += delta * (nb / nn);
      r1 += x1 + delta * delta * (n * nb / nn);
      n = nn;
    }
    out[c] = (float)r0;
    out[d.C + c] = (float)(sums ? r1 : r1 / n);
  }
}

gpuError_t agk_bn_stats(const agk_env *env, const ag_k_bn_stats *a) {
  const bool sums = a->variant == AG_KV_BN_SUMS;
  if (a->stats->dtype != AG_F32 || (a->variant != AG_KV_BN_MEAN_VAR && !sums)) return gpuErrorNotSupported;
  bn_dims d;
  d.N = a->n;
  d.C = a->c;
  d.HW = a->hw > 0 ? a->hw : 1; /* HW == 0: no element is read */
  const long long nhw = a->n * a->hw;
  if (d.C <= 0) return gpuSuccess;
  /* enough work items to fill the device, each a run of at least 4096
   * values, all partials inside the scratch */
  long long P = 1;
  d.chunk = nhw > 0 ? nhw : 1;
  if (nhw > 0) {
    const long long want = (long long)(env->sm_count > 0 ? env->sm_count : 80) * 4;
    const long long maxp = (nhw + 4095) / 4096, cap = (long long)(env->scratch_bytes / (2 * sizeof(float))) / d.C;
    P = (want + d.C - 1) / d.C;
    if (P > maxp) P = maxp;
    if (P > cap) P = cap;
    if (P > 1024) P = 1024;
    if (P < 1) P = 1;
    d.chunk = (nhw + P - 1) / P;
    P = (nhw + d.chunk - 1) / d.chunk; /* no empty chunk */
  }
  d.P = (int)P;
  const int threads = d.chunk >= 1024 ? 256 : d.chunk > 256 ? 128 : 64;
  const float *x = (const float *)agk_ptr(a->a);
  const float *b = sums ? (const float *)agk_optr(a->b) : (const float *)0;
  const float *mu = sums ? (const float *)agk_optr(a->mu) : (const float *)0;
  float *out = (float *)agk_ptr(a->stats), *part = (float *)env->scratch;
  agk_launch(k_bn_stats, agk_blocks(d.C * P, 1, threads, agk_wave(env, threads)), threads, 0, env->stream, out, part,
             x, b, mu, d);
  if (P > 1)
    agk_launch(k_bn_stats_final, agk_blocks(d.C, 256, 256, agk_wave(env, 256)), 256, 0, env->stream, out,
               (const float *)part, (int)sums, d);
  return gpuGetLastError();
}

/* y = a*p[c] + q[c], BN_AFFINE_B (b given) plus (b - mu[c])*r[c] (the
 * CPU's order of operations); coef is [4, C]: rows p, q, r, mu. Short
 * planes: one thread
 * per element, the channel from its index (I: 32-bit index arithmetic when
 * the tensor allows it). */
template <typename I>
__global__ void k_bn_apply_flat(float *y, const float *a, const float *b, const float *coef, I n, I C, I HW) {
  const I stride = (I)gridDim.x * blockDim.x;
  for (I e = (I)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += stride) {
    const I ch = (e / HW) % C;
    float v = a[e] * coef[ch] + coef[C + ch];
    if (b) v += (b[e] - coef[3 * C + ch]) * coef[2 * C + ch];
    y[e] = v;
  }
}
/* Long planes: work item w is tile t of plane q = n*C + c (tile elements),
 * the channel's coefficients read once per item. */
__global__ void k_bn_apply_planes(float *y, const float *a, const float *b, const float *coef, long long planes,
                                  long long C, long long HW, long long tile) {
  const long long tiles = (HW + tile - 1) / tile;
  for (long long w = blockIdx.x; w < planes * tiles; w += gridDim.x) {
    const long long q = w / tiles, lo = (w - q * tiles) * tile, hi = lo + tile < HW ? lo + tile : HW;
    const long long ch = q % C;
    const float p = coef[ch], sh = coef[C + ch];
    const float *ap = a + q * HW;
    float *yp = y + q * HW;
    if (!b) {
      for (long long i = lo + threadIdx.x; i < hi; i += blockDim.x) yp[i] = ap[i] * p + sh;
      continue;
    }
    const float r = coef[2 * C + ch], m = coef[3 * C + ch];
    const float *bp = b + q * HW;
    for (long long i = lo + threadIdx.x; i < hi; i += blockDim.x) yp[i] = ap[i] * p + sh + (bp[i] - m) * r;
  }
}

gpuError_t agk_bn_apply(const agk_env *env, const ag_k_bn_apply *a) {
  const bool with_b = a->variant == AG_KV_BN_AFFINE_B;
  if (a->y->dtype != AG_F32 || (a->variant != AG_KV_BN_AFFINE && !with_b)) return gpuErrorNotSupported;
  const long long N = a->n, C = a->c, HW = a->hw, n = N * C * HW;
  if (n <= 0) return gpuSuccess;
  float *y = (float *)agk_ptr(a->y);
  const float *x = (const float *)agk_ptr(a->a), *coef = (const float *)agk_ptr(a->coef);
  const float *b = with_b ? (const float *)agk_optr(a->b) : (const float *)0;
  if (HW >= 256) {
    const long long tile = 1024, items = N * C * ((HW + tile - 1) / tile);
    agk_launch(k_bn_apply_planes, agk_blocks(items, 1, 256, agk_wave(env, 256)), 256, 0, env->stream, y, x, b, coef,
               N * C, C, HW, tile);
  } else if (n <= 0x7fffffffLL) {
    agk_launch(k_bn_apply_flat<unsigned>, agk_blocks(n, 256, 256, agk_wave(env, 256)), 256, 0, env->stream, y, x, b,
               coef, (unsigned)n, (unsigned)C, (unsigned)HW);
  } else {
    agk_launch(k_bn_apply_flat<long long>, agk_blocks(n, 256, 256, agk_wave(env, 256)), 256, 0, env->stream, y, x, b,
               coef, n, C, HW);
  }
  return gpuGetLastError();
}
