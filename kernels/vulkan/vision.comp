#version 450
/* Vision kernels (f32, contiguous NCHW): direct conv2d and its two
 * gradients, pooling and batch norm. Conv geometry in n[0..15] as
 * ag_conv_geom: N C H W Co Ho Wo kh kw sh sw ph pw dh dw G. The convolutions
 * are direct (an invocation per output, or a work-group per weight for the
 * weight gradient): simple and exact in indexing; not tuned for speed. */
#include "common.glsl"
layout(local_size_x = WG) in;
/* The portable builds (-DAG_PORTABLE, docs/numerics.md): the same order of
 * terms (the convolutions and pooling sums are sequential as the contract
 * states them), each product rounded before its sum (precise), pmath's
 * division, and the weight gradient as S (psum.glsl). */
#if defined(AG_PORTABLE)
#include "anygrad/pmath.h"
#define PFLOAT precise float
#define P_DIV(a, b) agp_div(a, b)
#else
#define PFLOAT float
#define P_DIV(a, b) ((a) / (b))
#endif

#define GN pc.a.n[0]
#define GC pc.a.n[1]
#define GH pc.a.n[2]
#define GW pc.a.n[3]
#define GCO pc.a.n[4]
#define GHO pc.a.n[5]
#define GWO pc.a.n[6]
#define GKH pc.a.n[7]
#define GKW pc.a.n[8]
#define GSH pc.a.n[9]
#define GSW pc.a.n[10]
#define GPH pc.a.n[11]
#define GPW pc.a.n[12]
#define GDH pc.a.n[13]
#define GDW pc.a.n[14]
#define GG pc.a.n[15]

#if defined(K_CONV)
/* p0 y, p1 x, p2 w, p3 bias or 0 */
void main() {
  int64_t o = gid();
  if (o >= GN * GCO * GHO * GWO) return;
  int64_t ow = o % GWO, t = o / GWO, oh = t % GHO;
  t /= GHO;
  int64_t co = t % GCO, n = t / GCO;
  int64_t Cg = GC / GG, Cog = GCO / GG, g = co / Cog;
  PFLOAT acc = 0.0;
  for (int64_t ci = 0; ci < Cg; ci++) {
    int64_t c = g * Cg + ci;
    for (int64_t i = 0; i < GKH; i++) {
      int64_t h = oh * GSH - GPH + i * GDH;
      if (h < 0 || h >= GH) continue;
      for (int64_t j = 0; j < GKW; j++) {
        int64_t w = ow * GSW - GPW + j * GDW;
        if (w < 0 || w >= GW) continue;
        acc += PF(pc.a.p[1], ((n * GC + c) * GH + h) * GW + w) * PF(pc.a.p[2], ((co * Cg + ci) * GKH + i) * GKW + j);
      }
    }
  }
  if (pc.a.p[3] != 0ul) acc += PF(pc.a.p[3], co);
  PF(pc.a.p[0], o) = acc;
}
#endif

#if defined(K_CONV_BWD_IN)
/* p0 dx, p1 dy, p2 w */
void main() {
  int64_t e = gid();
  if (e >= GN * GC * GH * GW) return;
  int64_t w = e % GW, t = e / GW, h = t % GH;
  t /= GH;
  int64_t c = t % GC, n = t / GC;
  int64_t Cg = GC / GG, Cog = GCO / GG, g = c / Cg, ci = c % Cg;
  PFLOAT acc = 0.0;
  for (int64_t k = 0; k < Cog; k++) {
    int64_t co = g * Cog + k;
    for (int64_t i = 0; i < GKH; i++) {
      int64_t th = h + GPH - i * GDH;
      if (th < 0 || th % GSH != 0) continue;
      int64_t oh = th / GSH;
      if (oh >= GHO) continue;
      for (int64_t j = 0; j < GKW; j++) {
        int64_t tw = w + GPW - j * GDW;
        if (tw < 0 || tw % GSW != 0) continue;
        int64_t ow = tw / GSW;
        if (ow >= GWO) continue;
        acc += PF(pc.a.p[1], ((n * GCO + co) * GHO + oh) * GWO + ow) * PF(pc.a.p[2], ((co * Cg + ci) * GKH + i) * GKW + j);
      }
    }
  }
  PF(pc.a.p[0], e) = acc;
}
#endif

#if defined(K_CONV_BWD_W) && defined(AG_PORTABLE)
/* p0 dw, p1 dy, p2 x: a work-group per weight element, S over the
 * flattened (n, oh, ow) of dy * x, +0 for a tap in the padding */
int64_t g_co, g_c, g_i, g_j;
float pterm(int which, int64_t k) {
  int64_t P = GHO * GWO, n = k / P, r = k % P, oh = r / GWO, ow = r % GWO;
  int64_t h = oh * GSH - GPH + g_i * GDH, w = ow * GSW - GPW + g_j * GDW;
  if (h < 0 || h >= GH || w < 0 || w >= GW) return 0.0;
  precise float t = PF(pc.a.p[1], (n * GCO + g_co) * P + r) * PF(pc.a.p[2], ((n * GC + g_c) * GH + h) * GW + w);
  return t;
}
#include "psum.glsl"
void main() {
  int64_t Cg = GC / GG, Cog = GCO / GG;
  int64_t idx = P_LINE();
  if (idx >= GCO * Cg * GKH * GKW) return;
  g_j = idx % GKW;
  int64_t t = idx / GKW;
  g_i = t % GKH;
  t /= GKH;
  int64_t ci = t % Cg;
  g_co = t / Cg;
  g_c = (g_co / Cog) * Cg + ci;
  float acc = psum_any(0, GN * GHO * GWO);
  if (P_LEAD) PF(pc.a.p[0], idx) = acc;
}
#elif defined(K_CONV_BWD_W)
/* p0 dw, p1 dy, p2 x: a work-group per weight element, its N*Ho*Wo terms
 * in a fixed order (strided shares, then the tree) */
void main() {
  int64_t Cg = GC / GG, Cog = GCO / GG;
  int64_t idx = group_id();
  if (idx >= GCO * Cg * GKH * GKW) return;
  int64_t j = idx % GKW, t = idx / GKW, i = t % GKH;
  t /= GKH;
  int64_t ci = t % Cg, co = t / Cg, c = (co / Cog) * Cg + ci;
  int64_t P = GHO * GWO, cnt = GN * P;
  float acc = 0.0;
  for (int64_t k = int64_t(gl_LocalInvocationID.x); k < cnt; k += WG) {
    int64_t n = k / P, r = k % P, oh = r / GWO, ow = r % GWO;
    int64_t h = oh * GSH - GPH + i * GDH, w = ow * GSW - GPW + j * GDW;
    if (h < 0 || h >= GH || w < 0 || w >= GW) continue;
    acc += PF(pc.a.p[1], (n * GCO + co) * P + r) * PF(pc.a.p[2], ((n * GC + c) * GH + h) * GW + w);
  }
  acc = wg_sum(acc);
  if (gl_LocalInvocationID.x == 0u) PF(pc.a.p[0], idx) = acc;
}
#endif

#if defined(K_POOL) || defined(K_POOL_BWD)
/* n0 planes n1 H n2 W n3 Ho n4 Wo n5 sh n6 sw n7 ph n8 pw n9 kh n10 kw;
 * k6 op (ag_pool_op), k7 count padding */
#define PP pc.a.n[0]
#define PH_ pc.a.n[1]
#define PW_ pc.a.n[2]
#define PHO pc.a.n[3]
#define PWO pc.a.n[4]
void pool_window(int64_t oh, int64_t ow, out int64_t h0, out int64_t h1, out int64_t w0, out int64_t w1,
                 out int64_t dv) {
  if (pc.a.k[6] == AG_P_ADAPTIVE_AVG) {
    h0 = oh * PH_ / PHO;
    h1 = ((oh + 1) * PH_ + PHO - 1) / PHO;
    w0 = ow * PW_ / PWO;
    w1 = ((ow + 1) * PW_ + PWO - 1) / PWO;
    dv = (h1 - h0) * (w1 - w0);
    return;
  }
  int64_t sh = pc.a.n[5], sw = pc.a.n[6], ph = pc.a.n[7], pw = pc.a.n[8], kh = pc.a.n[9], kw = pc.a.n[10];
  int64_t a0 = oh * sh - ph, a1 = a0 + kh, b0 = ow * sw - pw, b1 = b0 + kw;
  int64_t hp = a1 < PH_ + ph ? a1 : PH_ + ph, wp = b1 < PW_ + pw ? b1 : PW_ + pw;
  int64_t d = (hp - a0) * (wp - b0);
  if (a0 < 0) a0 = 0;
  if (b0 < 0) b0 = 0;
  if (a1 > PH_) a1 = PH_;
  if (b1 > PW_) b1 = PW_;
  if (pc.a.k[7] == 0) d = (a1 - a0) * (b1 - b0);
  h0 = a0;
  h1 = a1;
  w0 = b0;
  w1 = b1;
  dv = d;
}
#endif

#if defined(K_POOL)
/* p0 y, p1 x, p2 i32 argmax (MAX) */
void main() {
  int64_t o = gid();
  if (o >= PP * PHO * PWO) return;
  int64_t q = o / (PHO * PWO), r = o - q * PHO * PWO, oh = r / PWO, ow = r - oh * PWO;
  int64_t h0, h1, w0, w1, dv;
  pool_window(oh, ow, h0, h1, w0, w1, dv);
  int64_t xb = q * PH_ * PW_;
  if (pc.a.k[6] == AG_P_MAX) {
    /* first maximum in row-major window order; a NaN wins at once */
    float best = -F_INF;
    int64_t bi = h0 * PW_ + w0;
    bool done = false;
    for (int64_t i = h0; i < h1 && !done; i++)
      for (int64_t j = w0; j < w1; j++) {
        float v = PF(pc.a.p[1], xb + i * PW_ + j);
        if (v > best || ag_isnan(v)) {
          best = v;
          bi = i * PW_ + j;
          if (ag_isnan(v)) {
            done = true;
            break;
          }
        }
      }
    PF(pc.a.p[0], o) = best;
    PI(pc.a.p[2], o) = int(bi);
  } else {
    PFLOAT acc = 0.0;
    for (int64_t i = h0; i < h1; i++)
      for (int64_t j = w0; j < w1; j++) acc += PF(pc.a.p[1], xb + i * PW_ + j);
    PFLOAT y = dv > 0 ? P_DIV(acc, float(dv)) : 0.0;
    PF(pc.a.p[0], o) = y;
  }
}
#endif

#if defined(K_POOL_BWD)
/* p0 dx, p1 dy, p2 indices (MAX): dx sums, in ascending output order, the
 * outputs whose window holds the element (the CPU's order) */
void main() {
  int64_t e = gid();
  if (e >= PP * PH_ * PW_) return;
  int64_t q = e / (PH_ * PW_), hw = e - q * PH_ * PW_, h = hw / PW_, w = hw - h * PW_;
  int64_t oh0, oh1, ow0, ow1;
  if (pc.a.k[6] == AG_P_ADAPTIVE_AVG) {
    oh0 = h * PHO / PH_;
    oh1 = ((h + 1) * PHO + PH_ - 1) / PH_;
    ow0 = w * PWO / PW_;
    ow1 = ((w + 1) * PWO + PW_ - 1) / PW_;
  } else {
    int64_t sh = pc.a.n[5], sw = pc.a.n[6], ph = pc.a.n[7], pw = pc.a.n[8], kh = pc.a.n[9], kw = pc.a.n[10];
    int64_t lh = h + ph - kh + 1, lw = w + pw - kw + 1;
    oh0 = lh <= 0 ? 0 : (lh + sh - 1) / sh;
    ow0 = lw <= 0 ? 0 : (lw + sw - 1) / sw;
    oh1 = (h + ph) / sh + 1;
    ow1 = (w + pw) / sw + 1;
  }
  if (oh1 > PHO) oh1 = PHO;
  if (ow1 > PWO) ow1 = PWO;
  int64_t ob = q * PHO * PWO;
  PFLOAT acc = 0.0;
  for (int64_t oh = oh0; oh < oh1; oh++)
    for (int64_t ow = ow0; ow < ow1; ow++) {
      int64_t o = ob + oh * PWO + ow;
      if (pc.a.k[6] == AG_P_MAX) {
        if (int64_t(PI(pc.a.p[2], o)) == hw) acc += PF(pc.a.p[1], o);
        continue;
      }
      int64_t h0, h1, w0, w1, dv;
      pool_window(oh, ow, h0, h1, w0, w1, dv);
      if (dv > 0 && h >= h0 && h < h1 && w >= w0 && w < w1) acc += P_DIV(PF(pc.a.p[1], o), float(dv));
    }
  PF(pc.a.p[0], e) = acc;
}
#endif

#if defined(K_BN_STATS)
/* p0 out [2, C], p1 a, p2 b, p3 mu (BN_SUMS); n0 N n1 C n2 HW; k6 the variant. A
 * work-group per channel, strided shares then the tree: a fixed order. */
void main() {
  int64_t ch = group_id(), N = pc.a.n[0], C = pc.a.n[1], HW = pc.a.n[2], cnt = N * HW;
  if (ch >= C) return;
  int64_t hw = HW > 0 ? HW : 1;
  float s0 = 0.0, s1 = 0.0;
  if (pc.a.k[6] == AG_KV_BN_MEAN_VAR) {
    for (int64_t k = int64_t(gl_LocalInvocationID.x); k < cnt; k += WG)
      s0 += PF(pc.a.p[1], ((k / hw) * C + ch) * HW + k % hw);
    float mean = wg_sum(s0) / float(cnt);
    for (int64_t k = int64_t(gl_LocalInvocationID.x); k < cnt; k += WG) {
      float d = PF(pc.a.p[1], ((k / hw) * C + ch) * HW + k % hw) - mean;
      s1 += d * d;
    }
    float var = wg_sum(s1) / float(cnt);
    if (gl_LocalInvocationID.x == 0u) {
      PF(pc.a.p[0], ch) = mean;
      PF(pc.a.p[0], C + ch) = var;
    }
    return;
  }
  float m = PF(pc.a.p[3], ch);
  for (int64_t k = int64_t(gl_LocalInvocationID.x); k < cnt; k += WG) {
    int64_t e = ((k / hw) * C + ch) * HW + k % hw;
    float v = PF(pc.a.p[1], e);
    s0 += v;
    s1 += v * (PF(pc.a.p[2], e) - m);
  }
  s0 = wg_sum(s0);
  s1 = wg_sum(s1);
  if (gl_LocalInvocationID.x == 0u) {
    PF(pc.a.p[0], ch) = s0;
    PF(pc.a.p[0], C + ch) = s1;
  }
}
#endif

#if defined(K_BN_APPLY)
/* p0 y, p1 a, p2 coef [k, C] (p, q, r, mu), p3 b or 0; n0 numel n1 C n2 HW;
 * the CPU's evaluation order */
void main() {
  int64_t e = gid();
  if (e >= pc.a.n[0]) return;
  int64_t C = pc.a.n[1], ch = (e / pc.a.n[2]) % C;
  uint64_t cf = pc.a.p[2];
  precise float v = PF(pc.a.p[1], e) * PF(cf, ch) + PF(cf, C + ch);
  if (pc.a.p[3] != 0ul) {
    precise float d = PF(pc.a.p[3], e) - PF(cf, 3 * C + ch);
    v = v + d * PF(cf, 2 * C + ch);
  }
  PF(pc.a.p[0], e) = v;
}
#endif
