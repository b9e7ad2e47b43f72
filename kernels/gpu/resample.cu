/* Group norm and interpolate for CUDA, HIP and gpuemu, reading their
 * decoded arguments (ag_k_group_norm, ag_k_interpolate, ...). Every sum is
 * in a fixed order (per-thread strides, then agk_block_sum's fixed tree):
 * no float atomics, the same bits on every run. Compute type f32 (f64 for
 * f64); statistics saved in it. */
#include "common.cuh"

#define RS_THREADS 256

/* ---------------- group norm ---------------- */
/* One block per (sample, group) block of M = cpg * hw contiguous elements:
 * the mean, then the centred sum of squares (two passes), then y. */
template <typename T>
__global__ void __launch_bounds__(RS_THREADS) k_gn_fwd(T *y, agk_c<T> *mean, agk_c<T> *rstd, const T *x, const T *w,
                                                        const T *b, long long blocks, long long groups, long long cpg,
                                                        long long hw, agk_c<T> eps) {
  typedef agk_c<T> C;
  __shared__ C sh[32];
  const long long M = cpg * hw;
  for (long long blk = blockIdx.x; blk < blocks; blk += gridDim.x) {
    const T *xb = x + blk * M;
    const long long c0 = blk % groups * cpg;
    C s = 0;
    for (long long k = threadIdx.x; k < M; k += blockDim.x) s += agk_tof(xb[k]);
    const C mu = agk_block_sum(s, sh) / (C)M;
    C v = 0;
    for (long long k = threadIdx.x; k < M; k += blockDim.x) {
      const C d = agk_tof(xb[k]) - mu;
      v += d * d;
    }
    const C rs = (C)1 / agk_sqrt(agk_block_sum(v, sh) / (C)M + eps);
    for (long long k = threadIdx.x; k < M; k += blockDim.x) {
      const long long ch = c0 + k / hw;
      C h = (agk_tof(xb[k]) - mu) * rs;
      if (w) h *= agk_tof(w[ch]);
      if (b) h += agk_tof(b[ch]);
      y[blk * M + k] = agk_fromf<T>(h);
    }
    if (threadIdx.x == 0 && mean) mean[blk] = mu;
    if (threadIdx.x == 0 && rstd) rstd[blk] = rs;
  }
}

/* dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * w, one block
 * per (sample, group). */
template <typename T>
__global__ void __launch_bounds__(RS_THREADS) k_gn_bwd(T *dx, const T *dy, const T *x, const agk_c<T> *mean,
                                                        const agk_c<T> *rstd, const T *w, long long blocks,
                                                        long long groups, long long cpg, long long hw) {
  typedef agk_c<T> C;
  __shared__ C sh[32];
  const long long M = cpg * hw;
  for (long long blk = blockIdx.x; blk < blocks; blk += gridDim.x) {
    const long long c0 = blk % groups * cpg, o = blk * M;
    const C mu = mean[blk], rs = rstd[blk];
    C sg = 0, sgx = 0;
    for (long long k = threadIdx.x; k < M; k += blockDim.x) {
      const C g = agk_tof(dy[o + k]) * (w ? agk_tof(w[c0 + k / hw]) : (C)1);
      sg += g;
      sgx += g * (agk_tof(x[o + k]) - mu) * rs;
    }
    sg = agk_block_sum(sg, sh) / (C)M;
    sgx = agk_block_sum(sgx, sh) / (C)M;
    for (long long k = threadIdx.x; k < M; k += blockDim.x) {
      const C g = agk_tof(dy[o + k]) * (w ? agk_tof(w[c0 + k / hw]) : (C)1);
      dx[o + k] = agk_fromf<T>(rs * (g - sg - (agk_tof(x[o + k]) - mu) * rs * sgx));
    }
  }
}

/* dw[c] = sum of dy * xhat, db[c] = sum of dy over samples and positions:
 * one block per channel. */
template <typename T>
__global__ void __launch_bounds__(RS_THREADS) k_gn_dwdb(agk_c<T> *dw, agk_c<T> *db, const T *dy, const T *x,
                                                         const agk_c<T> *mean, const agk_c<T> *rstd, long long n,
                                                         long long c, long long groups, long long hw) {
  typedef agk_c<T> C;
  __shared__ C sh[32];
  const long long cpg = c / groups;
  for (long long ch = blockIdx.x; ch < c; ch += gridDim.x) {
    C sw = 0, sb = 0;
    for (long long k = threadIdx.x; k < n * hw; k += blockDim.x) {
      const long long s = k / hw, blk = s * groups + ch / cpg, i = (s * c + ch) * hw + k % hw;
      const C g = agk_tof(dy[i]);
      sw += g * (agk_tof(x[i]) - mean[blk]) * rstd[blk];
      sb += g;
    }
    sw = agk_block_sum(sw, sh);
    sb = agk_block_sum(sb, sh);
    if (threadIdx.x == 0 && dw) dw[ch] = sw;
    if (threadIdx.x == 0 && db) db[ch] = sb;
  }
}

template <typename T> static gpuError_t gn_fwd_go(const agk_env *env, const ag_k_group_norm *a) {
  typedef agk_c<T> C;
  const long long blocks = a->n * a->groups;
  if (blocks == 0 || a->c == 0) return gpuSuccess;
  agk_launch(k_gn_fwd<T>, agk_blocks(blocks, 1, RS_THREADS, agk_wave(env, RS_THREADS)), RS_THREADS, 0, env->stream,
             (T *)agk_ptr(a->y), a->mean ? (C *)agk_ptr(a->mean) : (C *)0, a->rstd ? (C *)agk_ptr(a->rstd) : (C *)0,
             (const T *)agk_ptr(a->x), a->weight ? (const T *)agk_ptr(a->weight) : (const T *)0,
             a->bias ? (const T *)agk_ptr(a->bias) : (const T *)0, blocks, (long long)a->groups,
             (long long)(a->c / a->groups), (long long)a->hw, (C)a->eps);
  return gpuGetLastError();
}
gpuError_t agk_group_norm(const agk_env *env, const ag_k_group_norm *a) {
  AGK_DISPATCH_FLOAT(a->dtype, T, return gn_fwd_go<T>(env, a));
  return gpuErrorNotSupported;
}

/* Multi entry e's device pointer (NULL when absent). */
static char *entry_ptr(const ag_kmulti_entry *e) { return e->base ? (char *)e->base + e->offset : (char *)0; }

template <typename T> static gpuError_t gn_bwd_go(const agk_env *env, const ag_k_group_norm_bwd *a) {
  typedef agk_c<T> C;
  const long long blocks = a->n * a->groups;
  if (blocks == 0 || a->c == 0 || a->hw == 0) return gpuSuccess;
  const T *dy = (const T *)agk_ptr(a->dy), *x = (const T *)agk_ptr(a->x);
  const C *mean = (const C *)agk_ptr(a->mean), *rstd = (const C *)agk_ptr(a->rstd);
  agk_launch(k_gn_bwd<T>, agk_blocks(blocks, 1, RS_THREADS, agk_wave(env, RS_THREADS)), RS_THREADS, 0, env->stream,
             (T *)agk_ptr(a->dx), dy, x, mean, rstd, a->weight ? (const T *)agk_ptr(a->weight) : (const T *)0, blocks,
             (long long)a->groups, (long long)(a->c / a->groups), (long long)a->hw);
  const bool wb = AGK_MULTI_GROUPS(a) > 0; /* dw, db asked for */
  C *dw = wb ? (C *)entry_ptr(&AGK_MULTI(a, 0, dw)) : (C *)0, *db = wb ? (C *)entry_ptr(&AGK_MULTI(a, 0, db)) : (C *)0;
  if (dw || db)
    agk_launch(k_gn_dwdb<T>, agk_blocks(a->c, 1, RS_THREADS, agk_wave(env, RS_THREADS)), RS_THREADS, 0, env->stream,
               dw, db, dy, x, mean, rstd, (long long)a->n, (long long)a->c, (long long)a->groups, (long long)a->hw);
  return gpuGetLastError();
}
gpuError_t agk_group_norm_bwd(const agk_env *env, const ag_k_group_norm_bwd *a) {
  AGK_DISPATCH_FLOAT(a->dtype, T, return gn_bwd_go<T>(env, a));
  return gpuErrorNotSupported;
}

/* ---------------- interpolate ---------------- */
/* Output o of an axis (in -> out) reads i0 with weight l0 and i1 with l1
 * (kops.h: nearest in f32 with torch's CPU copies for 1x and 2x; bilinear
 * in the compute type C). */
template <typename C> struct rs_src {
  long long i0, i1;
  C l0, l1;
};
template <typename C>
AGK_DEV rs_src<C> rs_src_of(long long o, long long in, long long out, C scale, float fscale, int nearest, int align) {
  rs_src<C> r;
  if (nearest) {
    long long s = out == in ? o : out == 2 * in ? (o >> 1) : (long long)floorf((float)o * fscale);
    r.i0 = r.i1 = s < in - 1 ? s : in - 1;
    r.l0 = 1;
    r.l1 = 0;
    return r;
  }
  C s = align ? scale * (C)o : scale * ((C)o + (C)0.5) - (C)0.5;
  if (s < 0) s = 0;
  long long i0 = (long long)s;
  if (i0 > in - 1) i0 = in - 1;
  C l1 = s - (C)i0;
  l1 = l1 < 0 ? (C)0 : l1 > 1 ? (C)1 : l1;
  r.i0 = i0;
  r.i1 = i0 + (i0 < in - 1 ? 1 : 0);
  r.l1 = l1;
  r.l0 = (C)1 - l1;
  return r;
}
/* The weight with which output o reads input i. */
template <typename C> AGK_DEV C rs_w(const rs_src<C> &r, long long i) {
  return (r.i0 == i ? r.l0 : (C)0) + (r.i1 == i ? r.l1 : (C)0);
}
/* The first output o in [0, out) whose i0 >= v (out if none): i0 grows
 * with o. */
template <typename C>
AGK_DEV long long rs_first(long long v, long long in, long long out, C scale, float fscale, int nearest, int align) {
  long long lo = 0, hi = out;
  while (lo < hi) {
    long long mid = lo + (hi - lo) / 2;
    if (rs_src_of<C>(mid, in, out, scale, fscale, nearest, align).i0 < v) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

template <typename T>
__global__ void __launch_bounds__(RS_THREADS) k_interp_fwd(T *y, const T *x, long long planes, long long H, long long W,
                                                            long long Ho, long long Wo, agk_c<T> sh, agk_c<T> sw,
                                                            float fsh, float fsw, int nearest, int align) {
  typedef agk_c<T> C;
  const long long n = planes * Ho * Wo;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    const long long ow = i % Wo, oh = i / Wo % Ho, p = i / (Wo * Ho);
    const rs_src<C> a = rs_src_of<C>(oh, H, Ho, sh, fsh, nearest, align);
    const rs_src<C> b = rs_src_of<C>(ow, W, Wo, sw, fsw, nearest, align);
    const T *xp = x + p * H * W;
    C v;
    if (nearest) v = agk_tof(xp[a.i0 * W + b.i0]);
    else
      v = a.l0 * (b.l0 * agk_tof(xp[a.i0 * W + b.i0]) + b.l1 * agk_tof(xp[a.i0 * W + b.i1])) +
          a.l1 * (b.l0 * agk_tof(xp[a.i1 * W + b.i0]) + b.l1 * agk_tof(xp[a.i1 * W + b.i1]));
    y[i] = agk_fromf<T>(v);
  }
}

/* One thread per dx element: the outputs reading input row ih are those
 * with i0 == ih (nearest) or i0 in {ih - 1, ih} (bilinear), a range found
 * by bisection; summed rows then columns in order. */
template <typename T>
__global__ void __launch_bounds__(RS_THREADS) k_interp_bwd(T *dx, const T *dy, long long planes, long long H, long long W,
                                                            long long Ho, long long Wo, agk_c<T> sh, agk_c<T> sw,
                                                            float fsh, float fsw, int nearest, int align) {
  typedef agk_c<T> C;
  const long long n = planes * H * W;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    const long long iw = i % W, ih = i / W % H, p = i / (W * H);
    const long long oh0 = rs_first<C>(nearest ? ih : ih - 1, H, Ho, sh, fsh, nearest, align);
    const long long oh1 = rs_first<C>(ih + 1, H, Ho, sh, fsh, nearest, align);
    const long long ow0 = rs_first<C>(nearest ? iw : iw - 1, W, Wo, sw, fsw, nearest, align);
    const long long ow1 = rs_first<C>(iw + 1, W, Wo, sw, fsw, nearest, align);
    const T *dp = dy + p * Ho * Wo;
    C acc = 0;
    for (long long oh = oh0; oh < oh1; oh++) {
      const C wh = rs_w(rs_src_of<C>(oh, H, Ho, sh, fsh, nearest, align), ih);
      C s = 0;
      for (long long ow = ow0; ow < ow1; ow++)
        s += rs_w(rs_src_of<C>(ow, W, Wo, sw, fsw, nearest, align), iw) * agk_tof(dp[oh * Wo + ow]);
      acc += wh * s;
    }
    dx[i] = agk_fromf<T>(acc);
  }
}

/* dst/src: the output and input sides of the launch (y, x or dx, dy); big
 * the [n, c, h, w] input side. */
template <typename T>
static gpuError_t interp_go(const agk_env *env, const ag_koperand *dst, const ag_koperand *src, bool bwd, int variant,
                            double scale_h, double scale_w, long long align) {
  typedef agk_c<T> C;
  const ag_koperand *in = bwd ? dst : src, *out = bwd ? src : dst;
  const long long planes = in->shape[0] * in->shape[1], H = in->shape[2], W = in->shape[3];
  const long long Ho = out->shape[2], Wo = out->shape[3];
  const long long n = planes * (bwd ? H * W : Ho * Wo);
  if (n == 0) return gpuSuccess;
  const int nearest = variant == AG_KV_INTERP_NEAREST, al = align != 0;
  const unsigned grid = agk_blocks(n, RS_THREADS, RS_THREADS, agk_wave(env, RS_THREADS));
  if (bwd)
    agk_launch(k_interp_bwd<T>, grid, RS_THREADS, 0, env->stream, (T *)agk_ptr(dst), (const T *)agk_ptr(src), planes, H,
               W, Ho, Wo, (C)scale_h, (C)scale_w, (float)scale_h, (float)scale_w, nearest, al);
  else
    agk_launch(k_interp_fwd<T>, grid, RS_THREADS, 0, env->stream, (T *)agk_ptr(dst), (const T *)agk_ptr(src), planes, H,
               W, Ho, Wo, (C)scale_h, (C)scale_w, (float)scale_h, (float)scale_w, nearest, al);
  return gpuGetLastError();
}
gpuError_t agk_interpolate(const agk_env *env, const ag_k_interpolate *a) {
  AGK_DISPATCH_FLOAT(a->dtype, T,
                     return interp_go<T>(env, a->y, a->x, false, a->variant, a->scale_h, a->scale_w, a->align_corners));
  return gpuErrorNotSupported;
}
gpuError_t agk_interpolate_bwd(const agk_env *env, const ag_k_interpolate_bwd *a) {
  AGK_DISPATCH_FLOAT(a->dtype, T,
                     return interp_go<T>(env, a->dx, a->dy, true, a->variant, a->scale_h, a->scale_w, a->align_corners));
  return gpuErrorNotSupported;
}
