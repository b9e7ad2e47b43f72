#version 450
/* Group norm and interpolate (f32, f16, bf16; compute and statistics in
 * f32): one kernel per build define. Sums go through per-invocation strides
 * and wg_sum's fixed tree: no atomics, the same bits on every run. The host
 * (backends/vulkan/vk_resample.inc) fills the arguments from the decoded
 * AG_K_GROUP_NORM(_BWD), AG_K_INTERPOLATE(_BWD). */
#include "common.glsl"
layout(local_size_x = WG) in;
/* The portable builds of K_INTERP, K_INTERP_BWD (-DAG_PORTABLE,
 * docs/numerics.md): products rounded before their sums (precise); the
 * backward adds (wh * ww) * dy of each output that has the element as a
 * tap, in row-major order of (oh, ow), as the cpu does. */
#if defined(AG_PORTABLE)
#define PFLOAT precise float
#else
#define PFLOAT float
#endif

#define L int(gl_LocalInvocationID.x)
#define ROW_GUARD() if (group_id() >= pc.a.n[0]) return;

#if defined(K_GN)
/* One group per (sample, group) block: p0 y, p1 x, p2 w or 0, p3 b or 0,
 * p4 mean or 0, p5 rstd or 0; n0 blocks, n1 groups, n2 cpg, n3 hw; f0
 * eps; k0 dtype */
void main() {
  ROW_GUARD()
  int64_t blk = group_id(), cpg = pc.a.n[2], hw = pc.a.n[3], M = cpg * hw, base = blk * M;
  int64_t c0 = (blk % pc.a.n[1]) * cpg;
  int dt = pc.a.k[0];
  uint64_t x = pc.a.p[1], w = pc.a.p[2], b = pc.a.p[3];
  float s = 0.0;
  for (int64_t k = L; k < M; k += WG) s += ldf(x, base + k, dt);
  float mu = wg_sum(s) / float(M);
  float v = 0.0;
  for (int64_t k = L; k < M; k += WG) {
    float d = ldf(x, base + k, dt) - mu;
    v += d * d;
  }
  float rs = 1.0 / sqrt(wg_sum(v) / float(M) + pc.a.f[0]);
  for (int64_t k = L; k < M; k += WG) {
    int64_t ch = c0 + k / hw;
    float o = (ldf(x, base + k, dt) - mu) * rs;
    if (w != 0ul) o *= ldf(w, ch, dt);
    if (b != 0ul) o += ldf(b, ch, dt);
    stf(pc.a.p[0], base + k, dt, o);
  }
  if (L == 0 && pc.a.p[4] != 0ul) PF(pc.a.p[4], blk) = mu;
  if (L == 0 && pc.a.p[5] != 0ul) PF(pc.a.p[5], blk) = rs;
}
#endif

#if defined(K_GN_BWD)
/* dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * w: p0 dx,
 * p1 dy, p2 x, p3 mean, p4 rstd, p5 w or 0; n0 blocks, n1 groups, n2 cpg,
 * n3 hw; k0 dtype */
void main() {
  ROW_GUARD()
  int64_t blk = group_id(), cpg = pc.a.n[2], hw = pc.a.n[3], M = cpg * hw, base = blk * M;
  int64_t c0 = (blk % pc.a.n[1]) * cpg;
  int dt = pc.a.k[0];
  uint64_t dy = pc.a.p[1], x = pc.a.p[2], w = pc.a.p[5];
  float mu = PF(pc.a.p[3], blk), rs = PF(pc.a.p[4], blk);
  float sg = 0.0, sgx = 0.0;
  for (int64_t k = L; k < M; k += WG) {
    float g = ldf(dy, base + k, dt) * (w != 0ul ? ldf(w, c0 + k / hw, dt) : 1.0);
    sg += g;
    sgx += g * (ldf(x, base + k, dt) - mu) * rs;
  }
  sg = wg_sum(sg) / float(M);
  sgx = wg_sum(sgx) / float(M);
  for (int64_t k = L; k < M; k += WG) {
    float g = ldf(dy, base + k, dt) * (w != 0ul ? ldf(w, c0 + k / hw, dt) : 1.0);
    stf(pc.a.p[0], base + k, dt, rs * (g - sg - (ldf(x, base + k, dt) - mu) * rs * sgx));
  }
}
#endif

#if defined(K_GN_BWD_WB)
/* dw[c] = sum of dy * xhat, db[c] = sum of dy, one group per channel: p0
 * dw or 0, p1 db or 0 (f32), p2 dy, p3 x, p4 mean, p5 rstd; n0 channels,
 * n1 groups, n2 samples, n3 hw; k0 dtype */
void main() {
  ROW_GUARD()
  int64_t ch = group_id(), C = pc.a.n[0], groups = pc.a.n[1], hw = pc.a.n[3], cpg = C / groups;
  int dt = pc.a.k[0];
  float sw = 0.0, sb = 0.0;
  for (int64_t k = L; k < pc.a.n[2] * hw; k += WG) {
    int64_t smp = k / hw, blk = smp * groups + ch / cpg, i = (smp * C + ch) * hw + k % hw;
    float g = ldf(pc.a.p[2], i, dt);
    sw += g * (ldf(pc.a.p[3], i, dt) - PF(pc.a.p[4], blk)) * PF(pc.a.p[5], blk);
    sb += g;
  }
  sw = wg_sum(sw);
  sb = wg_sum(sb);
  if (L == 0 && pc.a.p[0] != 0ul) PF(pc.a.p[0], ch) = sw;
  if (L == 0 && pc.a.p[1] != 0ul) PF(pc.a.p[1], ch) = sb;
}
#endif

#if defined(K_INTERP) || defined(K_INTERP_BWD)
/* Output o of an axis (n_in -> n_out) reads i0 with weight l0 and i1 with
 * l1 (kops.h: nearest with torch's CPU copies for 1x and 2x). */
void rs_src_of(int64_t o, int64_t n_in, int64_t n_out, float sc, bool nearest, bool align, out int64_t i0,
               out int64_t i1, out float l0, out float l1) {
  if (nearest) {
    int64_t s = n_out == n_in ? o : n_out == 2l * n_in ? (o >> 1) : int64_t(floor(float(o) * sc));
    i0 = s < n_in - 1l ? s : n_in - 1l;
    i1 = i0;
    l0 = 1.0;
    l1 = 0.0;
    return;
  }
  PFLOAT s = align ? sc * float(o) : sc * (float(o) + 0.5) - 0.5;
  if (s < 0.0) s = 0.0;
  i0 = int64_t(s);
  if (i0 > n_in - 1l) i0 = n_in - 1l;
  l1 = clamp(s - float(i0), 0.0, 1.0);
  i1 = i0 + (i0 < n_in - 1l ? 1l : 0l);
  l0 = 1.0 - l1;
}
#endif

#if defined(K_INTERP)
/* An invocation per output: p0 y, p1 x; n0 outputs, n1 planes, n2 H, n3
 * W, n4 Ho, n5 Wo; f0, f1 the steps; k0 dtype, k1 nearest, k2 align */
void main() {
  int64_t i = gid();
  if (i >= pc.a.n[0]) return;
  int64_t H = pc.a.n[2], W = pc.a.n[3], Ho = pc.a.n[4], Wo = pc.a.n[5];
  int64_t ow = i % Wo, oh = (i / Wo) % Ho, base = (i / (Wo * Ho)) * H * W;
  bool nearest = pc.a.k[1] != 0, align = pc.a.k[2] != 0;
  int dt = pc.a.k[0];
  uint64_t x = pc.a.p[1];
  int64_t h0, h1, w0, w1;
  float a0, a1, b0, b1;
  rs_src_of(oh, H, Ho, pc.a.f[0], nearest, align, h0, h1, a0, a1);
  rs_src_of(ow, W, Wo, pc.a.f[1], nearest, align, w0, w1, b0, b1);
  PFLOAT v;
  if (nearest) v = ldf(x, base + h0 * W + w0, dt);
  else
    v = a0 * (b0 * ldf(x, base + h0 * W + w0, dt) + b1 * ldf(x, base + h0 * W + w1, dt)) +
        a1 * (b0 * ldf(x, base + h1 * W + w0, dt) + b1 * ldf(x, base + h1 * W + w1, dt));
  stf(pc.a.p[0], i, dt, v);
}
#endif

#if defined(K_INTERP_BWD)
/* The weight with which output o reads input i. */
float rs_w(int64_t o, int64_t i, int64_t n_in, int64_t n_out, float sc, bool nearest, bool align) {
  int64_t i0, i1;
  float l0, l1;
  rs_src_of(o, n_in, n_out, sc, nearest, align, i0, i1, l0, l1);
  return (i0 == i ? l0 : 0.0) + (i1 == i ? l1 : 0.0);
}
/* Whether output o has input i as a tap, and its weight there (l0 + l1
 * when both taps are i). */
bool rs_tap(int64_t o, int64_t i, int64_t n_in, int64_t n_out, float sc, bool nearest, bool align, out float w) {
  int64_t i0, i1;
  float l0, l1;
  rs_src_of(o, n_in, n_out, sc, nearest, align, i0, i1, l0, l1);
  w = 0.0;
  if (i0 == i1) {
    if (i0 != i) return false;
    PFLOAT t = l0 + l1;
    w = t;
    return true;
  }
  if (i0 == i) w = l0;
  else if (i1 == i) w = l1;
  else return false;
  return true;
}
/* The first output in [0, n_out) whose i0 >= v (n_out if none). */
int64_t rs_first(int64_t v, int64_t n_in, int64_t n_out, float sc, bool nearest, bool align) {
  int64_t lo = 0, hi = n_out;
  while (lo < hi) {
    int64_t mid = lo + (hi - lo) / 2l, i0, i1;
    float l0, l1;
    rs_src_of(mid, n_in, n_out, sc, nearest, align, i0, i1, l0, l1);
    if (i0 < v) lo = mid + 1l;
    else hi = mid;
  }
  return lo;
}
/* An invocation per dx element, its readers (a bisected range of rows
 * and columns) summed rows then columns in order: p0 dx, p1 dy; n0 inputs,
 * n1 planes, n2 H, n3 W, n4 Ho, n5 Wo; f0, f1 the steps; k0 dtype, k1
 * nearest, k2 align */
void main() {
  int64_t i = gid();
  if (i >= pc.a.n[0]) return;
  int64_t H = pc.a.n[2], W = pc.a.n[3], Ho = pc.a.n[4], Wo = pc.a.n[5];
  int64_t iw = i % W, ih = (i / W) % H, base = (i / (W * H)) * Ho * Wo;
  bool nearest = pc.a.k[1] != 0, align = pc.a.k[2] != 0;
  int dt = pc.a.k[0];
  float sh = pc.a.f[0], sw = pc.a.f[1];
  int64_t oh0 = rs_first(nearest ? ih : ih - 1l, H, Ho, sh, nearest, align);
  int64_t oh1 = rs_first(ih + 1l, H, Ho, sh, nearest, align);
  int64_t ow0 = rs_first(nearest ? iw : iw - 1l, W, Wo, sw, nearest, align);
  int64_t ow1 = rs_first(iw + 1l, W, Wo, sw, nearest, align);
#if defined(AG_PORTABLE)
  precise float acc = 0.0;
  for (int64_t oh = oh0; oh < oh1; oh++) {
    float wh;
    if (!rs_tap(oh, ih, H, Ho, sh, nearest, align, wh)) continue;
    for (int64_t ow = ow0; ow < ow1; ow++) {
      float ww;
      if (!rs_tap(ow, iw, W, Wo, sw, nearest, align, ww)) continue;
      precise float t = (wh * ww) * ldf(pc.a.p[1], base + oh * Wo + ow, dt);
      acc = acc + t;
    }
  }
  stf(pc.a.p[0], i, dt, acc);
}
#else
  float acc = 0.0;
  for (int64_t oh = oh0; oh < oh1; oh++) {
    float wh = rs_w(oh, ih, H, Ho, sh, nearest, align);
    float s = 0.0;
    for (int64_t ow = ow0; ow < ow1; ow++) s += rs_w(ow, iw, W, Wo, sw, nearest, align) * ldf(pc.a.p[1], base + oh * Wo + ow, dt);
    acc += wh * s;
  }
  stf(pc.a.p[0], i, dt, acc);
}
#endif
#endif
