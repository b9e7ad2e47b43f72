#version 450
/* Group norm and interpolate in f64 (every operand f64, statistics too),
 * used only on devices with shaderFloat64: resample.comp's work-groups and
 * order in double (nearest's source index stays f32, as torch). Double
 * scalars come as bits in n[46], n[47]. */
#extension GL_ARB_gpu_shader_int64 : require
#include "common.glsl"
layout(local_size_x = WG) in;

layout(buffer_reference, std430, buffer_reference_align = 8) buffer BF64 { double v; };
#define PD(a, i) BF64((a) + uint64_t(i) * 8ul).v
#define S0 int64BitsToDouble(pc.a.n[46])
#define S1 int64BitsToDouble(pc.a.n[47])
#define L int(gl_LocalInvocationID.x)
#define ROW_GUARD() if (group_id() >= pc.a.n[0]) return;

shared double sh_d[WG];
double wg_sum_d(double v) {
  uint l = gl_LocalInvocationID.x;
  sh_d[l] = v;
  barrier();
  for (uint s = WG / 2; s > 0u; s >>= 1) {
    if (l < s) sh_d[l] += sh_d[l + s];
    barrier();
  }
  double r = sh_d[0];
  barrier();
  return r;
}

#if defined(K_GN_D)
/* as K_GN; eps in S0 */
void main() {
  ROW_GUARD()
  int64_t blk = group_id(), cpg = pc.a.n[2], hw = pc.a.n[3], M = cpg * hw, base = blk * M;
  int64_t c0 = (blk % pc.a.n[1]) * cpg;
  uint64_t x = pc.a.p[1], w = pc.a.p[2], b = pc.a.p[3];
  double s = 0.0LF;
  for (int64_t k = L; k < M; k += WG) s += PD(x, base + k);
  double mu = wg_sum_d(s) / double(M);
  double v = 0.0LF;
  for (int64_t k = L; k < M; k += WG) v += (PD(x, base + k) - mu) * (PD(x, base + k) - mu);
  double rs = 1.0LF / sqrt(wg_sum_d(v) / double(M) + S0);
  for (int64_t k = L; k < M; k += WG) {
    int64_t ch = c0 + k / hw;
    double o = (PD(x, base + k) - mu) * rs;
    if (w != 0ul) o *= PD(w, ch);
    if (b != 0ul) o += PD(b, ch);
    PD(pc.a.p[0], base + k) = o;
  }
  if (L == 0 && pc.a.p[4] != 0ul) PD(pc.a.p[4], blk) = mu;
  if (L == 0 && pc.a.p[5] != 0ul) PD(pc.a.p[5], blk) = rs;
}
#endif

#if defined(K_GN_BWD_D)
/* as K_GN_BWD */
void main() {
  ROW_GUARD()
  int64_t blk = group_id(), cpg = pc.a.n[2], hw = pc.a.n[3], M = cpg * hw, base = blk * M;
  int64_t c0 = (blk % pc.a.n[1]) * cpg;
  uint64_t dy = pc.a.p[1], x = pc.a.p[2], w = pc.a.p[5];
  double mu = PD(pc.a.p[3], blk), rs = PD(pc.a.p[4], blk);
  double sg = 0.0LF, sgx = 0.0LF;
  for (int64_t k = L; k < M; k += WG) {
    double g = PD(dy, base + k) * (w != 0ul ? PD(w, c0 + k / hw) : 1.0LF);
    sg += g;
    sgx += g * (PD(x, base + k) - mu) * rs;
  }
  sg = wg_sum_d(sg) / double(M);
  sgx = wg_sum_d(sgx) / double(M);
  for (int64_t k = L; k < M; k += WG) {
    double g = PD(dy, base + k) * (w != 0ul ? PD(w, c0 + k / hw) : 1.0LF);
    PD(pc.a.p[0], base + k) = rs * (g - sg - (PD(x, base + k) - mu) * rs * sgx);
  }
}
#endif

#if defined(K_GN_BWD_WB_D)
/* as K_GN_BWD_WB, dw and db f64 */
void main() {
  ROW_GUARD()
  int64_t ch = group_id(), C = pc.a.n[0], groups = pc.a.n[1], hw = pc.a.n[3], cpg = C / groups;
  double sw = 0.0LF, sb = 0.0LF;
  for (int64_t k = L; k < pc.a.n[2] * hw; k += WG) {
    int64_t smp = k / hw, blk = smp * groups + ch / cpg, i = (smp * C + ch) * hw + k % hw;
    double g = PD(pc.a.p[2], i);
    sw += g * (PD(pc.a.p[3], i) - PD(pc.a.p[4], blk)) * PD(pc.a.p[5], blk);
    sb += g;
  }
  sw = wg_sum_d(sw);
  sb = wg_sum_d(sb);
  if (L == 0 && pc.a.p[0] != 0ul) PD(pc.a.p[0], ch) = sw;
  if (L == 0 && pc.a.p[1] != 0ul) PD(pc.a.p[1], ch) = sb;
}
#endif

#if defined(K_INTERP_D) || defined(K_INTERP_BWD_D)
/* resample.comp's rs_src_of in double for bilinear; nearest in f32 */
void rs_src_of(int64_t o, int64_t n_in, int64_t n_out, double sc, float fsc, bool nearest, bool align, out int64_t i0,
               out int64_t i1, out double l0, out double l1) {
  if (nearest) {
    int64_t s = n_out == n_in ? o : n_out == 2l * n_in ? (o >> 1) : int64_t(floor(float(o) * fsc));
    i0 = s < n_in - 1l ? s : n_in - 1l;
    i1 = i0;
    l0 = 1.0LF;
    l1 = 0.0LF;
    return;
  }
  double s = align ? sc * double(o) : sc * (double(o) + 0.5LF) - 0.5LF;
  if (s < 0.0LF) s = 0.0LF;
  i0 = int64_t(s);
  if (i0 > n_in - 1l) i0 = n_in - 1l;
  l1 = clamp(s - double(i0), 0.0LF, 1.0LF);
  i1 = i0 + (i0 < n_in - 1l ? 1l : 0l);
  l0 = 1.0LF - l1;
}
#endif

#if defined(K_INTERP_D)
/* as K_INTERP; steps in S0, S1 (and f0, f1 for nearest) */
void main() {
  int64_t i = gid();
  if (i >= pc.a.n[0]) return;
  int64_t H = pc.a.n[2], W = pc.a.n[3], Ho = pc.a.n[4], Wo = pc.a.n[5];
  int64_t ow = i % Wo, oh = (i / Wo) % Ho, base = (i / (Wo * Ho)) * H * W;
  bool nearest = pc.a.k[1] != 0, align = pc.a.k[2] != 0;
  uint64_t x = pc.a.p[1];
  int64_t h0, h1, w0, w1;
  double a0, a1, b0, b1;
  rs_src_of(oh, H, Ho, S0, pc.a.f[0], nearest, align, h0, h1, a0, a1);
  rs_src_of(ow, W, Wo, S1, pc.a.f[1], nearest, align, w0, w1, b0, b1);
  PD(pc.a.p[0], i) = nearest ? PD(x, base + h0 * W + w0)
                             : a0 * (b0 * PD(x, base + h0 * W + w0) + b1 * PD(x, base + h0 * W + w1)) +
                                   a1 * (b0 * PD(x, base + h1 * W + w0) + b1 * PD(x, base + h1 * W + w1));
}
#endif

#if defined(K_INTERP_BWD_D)
double rs_w(int64_t o, int64_t i, int64_t n_in, int64_t n_out, double sc, float fsc, bool nearest, bool align) {
  int64_t i0, i1;
  double l0, l1;
  rs_src_of(o, n_in, n_out, sc, fsc, nearest, align, i0, i1, l0, l1);
  return (i0 == i ? l0 : 0.0LF) + (i1 == i ? l1 : 0.0LF);
}
int64_t rs_first(int64_t v, int64_t n_in, int64_t n_out, double sc, float fsc, bool nearest, bool align) {
  int64_t lo = 0, hi = n_out;
  while (lo < hi) {
    int64_t mid = lo + (hi - lo) / 2l, i0, i1;
    double l0, l1;
    rs_src_of(mid, n_in, n_out, sc, fsc, nearest, align, i0, i1, l0, l1);
    if (i0 < v) lo = mid + 1l;
    else hi = mid;
  }
  return lo;
}
/* as K_INTERP_BWD */
void main() {
  int64_t i = gid();
  if (i >= pc.a.n[0]) return;
  int64_t H = pc.a.n[2], W = pc.a.n[3], Ho = pc.a.n[4], Wo = pc.a.n[5];
  int64_t iw = i % W, ih = (i / W) % H, base = (i / (W * H)) * Ho * Wo;
  bool nearest = pc.a.k[1] != 0, align = pc.a.k[2] != 0;
  double sh = S0, sw = S1;
  float fsh = pc.a.f[0], fsw = pc.a.f[1];
  int64_t oh0 = rs_first(nearest ? ih : ih - 1l, H, Ho, sh, fsh, nearest, align);
  int64_t oh1 = rs_first(ih + 1l, H, Ho, sh, fsh, nearest, align);
  int64_t ow0 = rs_first(nearest ? iw : iw - 1l, W, Wo, sw, fsw, nearest, align);
  int64_t ow1 = rs_first(iw + 1l, W, Wo, sw, fsw, nearest, align);
  double acc = 0.0LF;
  for (int64_t oh = oh0; oh < oh1; oh++) {
    double wh = rs_w(oh, ih, H, Ho, sh, fsh, nearest, align);
    double s = 0.0LF;
    for (int64_t ow = ow0; ow < ow1; ow++) s += rs_w(ow, iw, W, Wo, sw, fsw, nearest, align) * PD(pc.a.p[1], base + oh * Wo + ow);
    acc += wh * s;
  }
  PD(pc.a.p[0], i) = acc;
}
#endif
