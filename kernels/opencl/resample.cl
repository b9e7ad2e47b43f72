/* Group norm and interpolate (f32, f16, bf16; compute and statistics in
 * f32). Sums go through per-work-item strides and wg_sum's fixed tree: no
 * atomics, the same bits on every run. The host passes the decoded
 * arguments of AG_K_GROUP_NORM(_BWD), AG_K_INTERPOLATE(_BWD). */

#ifndef AG_PORTABLE /* portable.cl has its own */
/* One work-group per (sample, group) block of cpg * hw contiguous
 * elements: the mean, the centred sum of squares, then y; 4-wide loads
 * (ld4/st4 of rowred.cl) when hw is a multiple of 4. */
__kernel void ag_group_norm(gbuf *y, ulong yo, const gbuf *x, ulong xo, int dt, const gbuf *w, ulong wo,
                            const gbuf *b, ulong bo, gbuf *mean, ulong mo, gbuf *rstd, ulong ro, long groups,
                            long cpg, long hw, float eps) {
  __local float sh[AG_WG];
  const long blk = get_group_id(0), M = cpg * hw, base = blk * M, c0 = blk % groups * cpg;
  const int l = get_local_id(0), L = get_local_size(0);
  float mu, rs;
  if (hw % 4 == 0) { /* 4-wide loads; a quad never straddles two channels */
    const long n4 = M / 4;
    float4 s4 = (float4)(0.0f);
    for (long q = l; q < n4; q += L) s4 += ld4(x, xo, base + 4 * q, dt);
    mu = wg_sum((s4.x + s4.y) + (s4.z + s4.w), sh) / (float)M;
    float4 v4 = (float4)(0.0f);
    for (long q = l; q < n4; q += L) {
      const float4 d = ld4(x, xo, base + 4 * q, dt) - mu;
      v4 += d * d;
    }
    rs = 1.0f / sqrt(wg_sum((v4.x + v4.y) + (v4.z + v4.w), sh) / (float)M + eps);
    for (long q = l; q < n4; q += L) {
      const long ch = c0 + 4 * q / hw;
      float4 o = (ld4(x, xo, base + 4 * q, dt) - mu) * rs;
      if (w) o *= ldf(w, wo, ch, dt);
      if (b) o += ldf(b, bo, ch, dt);
      st4(y, yo, base + 4 * q, dt, o);
    }
  } else {
    float s = 0.0f;
    for (long k = l; k < M; k += L) s += ldf(x, xo, base + k, dt);
    mu = wg_sum(s, sh) / (float)M;
    float v = 0.0f;
    for (long k = l; k < M; k += L) {
      const float d = ldf(x, xo, base + k, dt) - mu;
      v += d * d;
    }
    rs = 1.0f / sqrt(wg_sum(v, sh) / (float)M + eps);
    for (long k = l; k < M; k += L) {
      const long ch = c0 + k / hw;
      float o = (ldf(x, xo, base + k, dt) - mu) * rs;
      if (w) o *= ldf(w, wo, ch, dt);
      if (b) o += ldf(b, bo, ch, dt);
      stf(y, yo, base + k, dt, o);
    }
  }
  if (l == 0 && mean) stf(mean, mo, blk, DT_F32, mu);
  if (l == 0 && rstd) stf(rstd, ro, blk, DT_F32, rs);
}

/* dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * w: one
 * work-group per (sample, group). */
__kernel void ag_group_norm_bwd(gbuf *dx, ulong dxo, const gbuf *dy, ulong dyo, const gbuf *x, ulong xo, int dt,
                                const gbuf *mean, ulong mo, const gbuf *rstd, ulong ro, const gbuf *w, ulong wo,
                                long groups, long cpg, long hw) {
  __local float sh[AG_WG];
  const long blk = get_group_id(0), M = cpg * hw, base = blk * M, c0 = blk % groups * cpg;
  const int l = get_local_id(0), L = get_local_size(0);
  const float mu = ldf(mean, mo, blk, DT_F32), rs = ldf(rstd, ro, blk, DT_F32);
  float sg = 0.0f, sgx = 0.0f;
  if (hw % 4 == 0) { /* 4-wide, as the forward */
    const long n4 = M / 4;
    float4 g4 = (float4)(0.0f), gx4 = (float4)(0.0f);
    for (long q = l; q < n4; q += L) {
      const float4 g = ld4(dy, dyo, base + 4 * q, dt) * (w ? ldf(w, wo, c0 + 4 * q / hw, dt) : 1.0f);
      g4 += g;
      gx4 += g * (ld4(x, xo, base + 4 * q, dt) - mu) * rs;
    }
    sg = wg_sum((g4.x + g4.y) + (g4.z + g4.w), sh) / (float)M;
    sgx = wg_sum((gx4.x + gx4.y) + (gx4.z + gx4.w), sh) / (float)M;
    for (long q = l; q < n4; q += L) {
      const float4 g = ld4(dy, dyo, base + 4 * q, dt) * (w ? ldf(w, wo, c0 + 4 * q / hw, dt) : 1.0f);
      st4(dx, dxo, base + 4 * q, dt, rs * (g - sg - (ld4(x, xo, base + 4 * q, dt) - mu) * rs * sgx));
    }
    return;
  }
  for (long k = l; k < M; k += L) {
    const float g = ldf(dy, dyo, base + k, dt) * (w ? ldf(w, wo, c0 + k / hw, dt) : 1.0f);
    sg += g;
    sgx += g * (ldf(x, xo, base + k, dt) - mu) * rs;
  }
  sg = wg_sum(sg, sh) / (float)M;
  sgx = wg_sum(sgx, sh) / (float)M;
  for (long k = l; k < M; k += L) {
    const float g = ldf(dy, dyo, base + k, dt) * (w ? ldf(w, wo, c0 + k / hw, dt) : 1.0f);
    stf(dx, dxo, base + k, dt, rs * (g - sg - (ldf(x, xo, base + k, dt) - mu) * rs * sgx));
  }
}

/* dw[c] = sum of dy * xhat, db[c] = sum of dy over samples and positions:
 * one work-group per channel. */
__kernel void ag_group_norm_bwd_wb(gbuf *dw, ulong dwo, gbuf *db, ulong dbo, const gbuf *dy, ulong dyo,
                                   const gbuf *x, ulong xo, int dt, const gbuf *mean, ulong mo, const gbuf *rstd,
                                   ulong ro, long n, long c, long groups, long hw) {
  __local float sh[AG_WG];
  const long ch = get_group_id(0), cpg = c / groups;
  const int l = get_local_id(0), L = get_local_size(0);
  float sw = 0.0f, sb = 0.0f;
  for (long k = l; k < n * hw; k += L) {
    const long smp = k / hw, blk = smp * groups + ch / cpg, i = (smp * c + ch) * hw + k % hw;
    const float g = ldf(dy, dyo, i, dt);
    sw += g * (ldf(x, xo, i, dt) - ldf(mean, mo, blk, DT_F32)) * ldf(rstd, ro, blk, DT_F32);
    sb += g;
  }
  sw = wg_sum(sw, sh);
  sb = wg_sum(sb, sh);
  if (l == 0 && dw) stf(dw, dwo, ch, DT_F32, sw);
  if (l == 0 && db) stf(db, dbo, ch, DT_F32, sb);
}
#endif

/* Output o of an axis (in -> out) reads i0 with weight l0 and i1 with l1
 * (kops.h: nearest with torch's CPU copies for 1x and 2x). */
typedef struct rs_src {
  long i0, i1;
  float l0, l1;
} rs_src;

rs_src rs_src_of(long o, long in, long out, float sc, int nearest, int align) {
  rs_src r;
  if (nearest) {
    long s = out == in ? o : out == 2 * in ? (o >> 1) : (long)floor((float)o * sc);
    r.i0 = r.i1 = s < in - 1 ? s : in - 1;
    r.l0 = 1.0f;
    r.l1 = 0.0f;
    return r;
  }
  float s = align ? sc * (float)o : sc * ((float)o + 0.5f) - 0.5f;
  if (s < 0.0f) s = 0.0f;
  long i0 = (long)s;
  if (i0 > in - 1) i0 = in - 1;
  float l1 = clamp(s - (float)i0, 0.0f, 1.0f);
  r.i0 = i0;
  r.i1 = i0 + (i0 < in - 1 ? 1 : 0);
  r.l1 = l1;
  r.l0 = 1.0f - l1;
  return r;
}

float rs_w(rs_src r, long i) { return (r.i0 == i ? r.l0 : 0.0f) + (r.i1 == i ? r.l1 : 0.0f); }

/* The first output o in [0, out) whose i0 >= v (out if none). */
long rs_first(long v, long in, long out, float sc, int nearest, int align) {
  long lo = 0, hi = out;
  while (lo < hi) {
    long mid = lo + (hi - lo) / 2;
    if (rs_src_of(mid, in, out, sc, nearest, align).i0 < v) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/* One work-item per output element. */
__kernel void ag_interpolate(gbuf *y, ulong yo, const gbuf *x, ulong xo, int dt, long planes, long H, long W,
                             long Ho, long Wo, float sh, float sw, int nearest, int align) {
  const long i = get_global_id(0);
  if (i >= planes * Ho * Wo) return;
  const long ow = i % Wo, oh = i / Wo % Ho, p = i / (Wo * Ho), base = p * H * W;
  const rs_src a = rs_src_of(oh, H, Ho, sh, nearest, align), b = rs_src_of(ow, W, Wo, sw, nearest, align);
  float v;
  if (nearest) v = ldf(x, xo, base + a.i0 * W + b.i0, dt);
  else
    v = a.l0 * (b.l0 * ldf(x, xo, base + a.i0 * W + b.i0, dt) + b.l1 * ldf(x, xo, base + a.i0 * W + b.i1, dt)) +
        a.l1 * (b.l0 * ldf(x, xo, base + a.i1 * W + b.i0, dt) + b.l1 * ldf(x, xo, base + a.i1 * W + b.i1, dt));
  stf(y, yo, i, dt, v);
}

#ifndef AG_PORTABLE /* portable.cl has its own */
/* One work-item per dx element: the outputs reading input row ih have i0
 * == ih (nearest) or i0 in {ih - 1, ih} (bilinear), a range found by
 * bisection; summed rows then columns in order. */
__kernel void ag_interpolate_bwd(gbuf *dx, ulong dxo, const gbuf *dy, ulong dyo, int dt, long planes, long H, long W,
                                 long Ho, long Wo, float sh, float sw, int nearest, int align) {
  const long i = get_global_id(0);
  if (i >= planes * H * W) return;
  const long iw = i % W, ih = i / W % H, p = i / (W * H), base = p * Ho * Wo;
  const long oh0 = rs_first(nearest ? ih : ih - 1, H, Ho, sh, nearest, align);
  const long oh1 = rs_first(ih + 1, H, Ho, sh, nearest, align);
  const long ow0 = rs_first(nearest ? iw : iw - 1, W, Wo, sw, nearest, align);
  const long ow1 = rs_first(iw + 1, W, Wo, sw, nearest, align);
  float acc = 0.0f;
  for (long oh = oh0; oh < oh1; oh++) {
    const float wh = rs_w(rs_src_of(oh, H, Ho, sh, nearest, align), ih);
    float s = 0.0f;
    for (long ow = ow0; ow < ow1; ow++)
      s += rs_w(rs_src_of(ow, W, Wo, sw, nearest, align), iw) * ldf(dy, dyo, base + oh * Wo + ow, dt);
    acc += wh * s;
  }
  stf(dx, dxo, i, dt, acc);
}
#endif

#ifdef AG_FP64
/* f64 (every operand f64, statistics too), where the device has
 * cl_khr_fp64: the same work-groups and order in double. */
#define GD(p, o) ((__global double *)((p) + (o)))
#define CGD(p, o) ((const __global double *)((p) + (o)))

double wg_sum_d(double v, __local double *sh) {
  int l = get_local_id(0);
  sh[l] = v;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int s = get_local_size(0) / 2; s > 0; s >>= 1) {
    if (l < s) sh[l] += sh[l + s];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  double r = sh[0];
  barrier(CLK_LOCAL_MEM_FENCE);
  return r;
}

__kernel void ag_group_norm_d(gbuf *y, ulong yo, const gbuf *x, ulong xo, const gbuf *w, ulong wo, const gbuf *b,
                              ulong bo, gbuf *mean, ulong mo, gbuf *rstd, ulong ro, long groups, long cpg, long hw,
                              double eps) {
  __local double sh[AG_WG];
  const long blk = get_group_id(0), M = cpg * hw, c0 = blk % groups * cpg;
  const int l = get_local_id(0), L = get_local_size(0);
  const __global double *xb = CGD(x, xo) + blk * M;
  double s = 0.0;
  for (long k = l; k < M; k += L) s += xb[k];
  const double mu = wg_sum_d(s, sh) / (double)M;
  double v = 0.0;
  for (long k = l; k < M; k += L) v += (xb[k] - mu) * (xb[k] - mu);
  const double rs = 1.0 / sqrt(wg_sum_d(v, sh) / (double)M + eps);
  for (long k = l; k < M; k += L) {
    const long ch = c0 + k / hw;
    double o = (xb[k] - mu) * rs;
    if (w) o *= CGD(w, wo)[ch];
    if (b) o += CGD(b, bo)[ch];
    GD(y, yo)[blk * M + k] = o;
  }
  if (l == 0 && mean) GD(mean, mo)[blk] = mu;
  if (l == 0 && rstd) GD(rstd, ro)[blk] = rs;
}

__kernel void ag_group_norm_bwd_d(gbuf *dx, ulong dxo, const gbuf *dy, ulong dyo, const gbuf *x, ulong xo,
                                  const gbuf *mean, ulong mo, const gbuf *rstd, ulong ro, const gbuf *w, ulong wo,
                                  long groups, long cpg, long hw) {
  __local double sh[AG_WG];
  const long blk = get_group_id(0), M = cpg * hw, base = blk * M, c0 = blk % groups * cpg;
  const int l = get_local_id(0), L = get_local_size(0);
  const double mu = CGD(mean, mo)[blk], rs = CGD(rstd, ro)[blk];
  const __global double *g0 = CGD(dy, dyo) + base, *xb = CGD(x, xo) + base;
  double sg = 0.0, sgx = 0.0;
  for (long k = l; k < M; k += L) {
    const double g = g0[k] * (w ? CGD(w, wo)[c0 + k / hw] : 1.0);
    sg += g;
    sgx += g * (xb[k] - mu) * rs;
  }
  sg = wg_sum_d(sg, sh) / (double)M;
  sgx = wg_sum_d(sgx, sh) / (double)M;
  for (long k = l; k < M; k += L) {
    const double g = g0[k] * (w ? CGD(w, wo)[c0 + k / hw] : 1.0);
    GD(dx, dxo)[base + k] = rs * (g - sg - (xb[k] - mu) * rs * sgx);
  }
}

__kernel void ag_group_norm_bwd_wb_d(gbuf *dw, ulong dwo, gbuf *db, ulong dbo, const gbuf *dy, ulong dyo,
                                     const gbuf *x, ulong xo, const gbuf *mean, ulong mo, const gbuf *rstd, ulong ro,
                                     long n, long c, long groups, long hw) {
  __local double sh[AG_WG];
  const long ch = get_group_id(0), cpg = c / groups;
  const int l = get_local_id(0), L = get_local_size(0);
  double sw = 0.0, sb = 0.0;
  for (long k = l; k < n * hw; k += L) {
    const long smp = k / hw, blk = smp * groups + ch / cpg, i = (smp * c + ch) * hw + k % hw;
    const double g = CGD(dy, dyo)[i];
    sw += g * (CGD(x, xo)[i] - CGD(mean, mo)[blk]) * CGD(rstd, ro)[blk];
    sb += g;
  }
  sw = wg_sum_d(sw, sh);
  sb = wg_sum_d(sb, sh);
  if (l == 0 && dw) GD(dw, dwo)[ch] = sw;
  if (l == 0 && db) GD(db, dbo)[ch] = sb;
}

/* Bilinear in double, nearest in f32 (kops.h). */
typedef struct rs_src_d {
  long i0, i1;
  double l0, l1;
} rs_src_d;

rs_src_d rs_src_of_d(long o, long in, long out, double sc, float fsc, int nearest, int align) {
  rs_src_d r;
  if (nearest) {
    rs_src f = rs_src_of(o, in, out, fsc, 1, 0);
    r.i0 = f.i0;
    r.i1 = f.i1;
    r.l0 = 1.0;
    r.l1 = 0.0;
    return r;
  }
  double s = align ? sc * (double)o : sc * ((double)o + 0.5) - 0.5;
  if (s < 0.0) s = 0.0;
  long i0 = (long)s;
  if (i0 > in - 1) i0 = in - 1;
  double l1 = clamp(s - (double)i0, 0.0, 1.0);
  r.i0 = i0;
  r.i1 = i0 + (i0 < in - 1 ? 1 : 0);
  r.l1 = l1;
  r.l0 = 1.0 - l1;
  return r;
}

double rs_w_d(rs_src_d r, long i) { return (r.i0 == i ? r.l0 : 0.0) + (r.i1 == i ? r.l1 : 0.0); }

long rs_first_d(long v, long in, long out, double sc, float fsc, int nearest, int align) {
  long lo = 0, hi = out;
  while (lo < hi) {
    long mid = lo + (hi - lo) / 2;
    if (rs_src_of_d(mid, in, out, sc, fsc, nearest, align).i0 < v) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

__kernel void ag_interpolate_d(gbuf *y, ulong yo, const gbuf *x, ulong xo, long planes, long H, long W, long Ho,
                               long Wo, double sh, double sw, float fsh, float fsw, int nearest, int align) {
  const long i = get_global_id(0);
  if (i >= planes * Ho * Wo) return;
  const long ow = i % Wo, oh = i / Wo % Ho, p = i / (Wo * Ho);
  const __global double *xp = CGD(x, xo) + p * H * W;
  const rs_src_d a = rs_src_of_d(oh, H, Ho, sh, fsh, nearest, align), b = rs_src_of_d(ow, W, Wo, sw, fsw, nearest, align);
  GD(y, yo)[i] = nearest ? xp[a.i0 * W + b.i0]
                         : a.l0 * (b.l0 * xp[a.i0 * W + b.i0] + b.l1 * xp[a.i0 * W + b.i1]) +
                               a.l1 * (b.l0 * xp[a.i1 * W + b.i0] + b.l1 * xp[a.i1 * W + b.i1]);
}

__kernel void ag_interpolate_bwd_d(gbuf *dx, ulong dxo, const gbuf *dy, ulong dyo, long planes, long H, long W,
                                   long Ho, long Wo, double sh, double sw, float fsh, float fsw, int nearest,
                                   int align) {
  const long i = get_global_id(0);
  if (i >= planes * H * W) return;
  const long iw = i % W, ih = i / W % H, p = i / (W * H);
  const __global double *dp = CGD(dy, dyo) + p * Ho * Wo;
  const long oh0 = rs_first_d(nearest ? ih : ih - 1, H, Ho, sh, fsh, nearest, align);
  const long oh1 = rs_first_d(ih + 1, H, Ho, sh, fsh, nearest, align);
  const long ow0 = rs_first_d(nearest ? iw : iw - 1, W, Wo, sw, fsw, nearest, align);
  const long ow1 = rs_first_d(iw + 1, W, Wo, sw, fsw, nearest, align);
  double acc = 0.0;
  for (long oh = oh0; oh < oh1; oh++) {
    const double wh = rs_w_d(rs_src_of_d(oh, H, Ho, sh, fsh, nearest, align), ih);
    double s = 0.0;
    for (long ow = ow0; ow < ow1; ow++) s += rs_w_d(rs_src_of_d(ow, W, Wo, sw, fsw, nearest, align), iw) * dp[oh * Wo + ow];
    acc += wh * s;
  }
  GD(dx, dxo)[i] = acc;
}
#undef GD
#undef CGD
#endif
