#version 450
/* AG_K_PAD and AG_K_PAD_BWD over x [b, h, w] and the padded [b, ho, wo]
 * (top, left before; bottom, right from the shapes). An invocation per
 * output element: the forward copies its source as bits (reflect mirrors
 * without repeating the edge) or stores the value; the backward sums the
 * dy elements that read its dx element, rows then columns ascending, in
 * f32: the CPU's and the other GPU kernels' order. */
#include "common.glsl"
#if defined(K_PAD_D) || defined(K_PAD_BWD_D)
layout(buffer_reference, std430, buffer_reference_align = 8) buffer BF64 { double v; };
#define PD(a, i) BF64((a) + uint64_t(i) * 8ul).v
#endif
layout(local_size_x = WG) in;

/* p0 the output (y or dx), p1 the input (x or dy), k0 dtype, k1 element
 * size, k2 reflect; n0 B, n1 H, n2 W, n3 Ho, n4 Wo, n5 top, n6 left; f0 the
 * value (the _D builds, devices with shaderFloat64: every operand f64, the
 * value's bits in n7, the sums in double) */
int64_t pad_src(int64_t p, int64_t before, int64_t n, bool reflect) {
  int64_t r = p - before;
  if (!reflect) return r >= 0 && r < n ? r : -1;
  if (r < 0) r = -r;
  if (r >= n) r = 2 * (n - 1) - r;
  return r;
}
int pad_pre(int64_t i, int64_t before, int64_t n, int64_t no, bool reflect, out int64_t o[3]) {
  int k = 0;
  if (reflect && i >= 1 && i <= before) o[k++] = before - i;
  o[k++] = before + i;
  if (reflect && i <= n - 2 && before + 2 * (n - 1) - i < no) o[k++] = before + 2 * (n - 1) - i;
  return k;
}

#if defined(K_PAD)
void main() {
  int64_t t = gid(), B = pc.a.n[0], H = pc.a.n[1], W = pc.a.n[2], Ho = pc.a.n[3], Wo = pc.a.n[4];
  if (t >= B * Ho * Wo) return;
  bool refl = pc.a.k[2] != 0;
  int64_t c = t % Wo, r = (t / Wo) % Ho, b = t / (Wo * Ho);
  int64_t sy = pad_src(r, pc.a.n[5], H, refl), sx = pad_src(c, pc.a.n[6], W, refl);
  if (sy < 0 || sx < 0) {
    stf(pc.a.p[0], t, pc.a.k[0], pc.a.f[0]);
    return;
  }
  int64_t s = (b * H + sy) * W + sx;
  if (pc.a.k[1] == 2) PH(pc.a.p[0], t) = PH(pc.a.p[1], s);
  else PU(pc.a.p[0], t) = PU(pc.a.p[1], s);
}
#endif

#if defined(K_PAD_BWD)
void main() {
  int64_t t = gid(), B = pc.a.n[0], H = pc.a.n[1], W = pc.a.n[2], Ho = pc.a.n[3], Wo = pc.a.n[4];
  if (t >= B * H * W) return;
  bool refl = pc.a.k[2] != 0;
  int dt = pc.a.k[0];
  int64_t j = t % W, i = (t / W) % H, b = t / (W * H);
  int64_t ys[3], xs[3];
  int ny = pad_pre(i, pc.a.n[5], H, Ho, refl, ys), nx = pad_pre(j, pc.a.n[6], W, Wo, refl, xs);
  float acc = 0.0;
  for (int q = 0; q < ny; q++)
    for (int r = 0; r < nx; r++) acc += ldf(pc.a.p[1], (b * Ho + ys[q]) * Wo + xs[r], dt);
  stf(pc.a.p[0], t, dt, acc);
}
#endif

#if defined(K_PAD_D)
void main() {
  int64_t t = gid(), B = pc.a.n[0], H = pc.a.n[1], W = pc.a.n[2], Ho = pc.a.n[3], Wo = pc.a.n[4];
  if (t >= B * Ho * Wo) return;
  bool refl = pc.a.k[2] != 0;
  int64_t c = t % Wo, r = (t / Wo) % Ho, b = t / (Wo * Ho);
  int64_t sy = pad_src(r, pc.a.n[5], H, refl), sx = pad_src(c, pc.a.n[6], W, refl);
  if (sy < 0 || sx < 0) PL(pc.a.p[0], t) = pc.a.n[7];
  else PL(pc.a.p[0], t) = PL(pc.a.p[1], (b * H + sy) * W + sx);
}
#endif

#if defined(K_PAD_BWD_D)
void main() {
  int64_t t = gid(), B = pc.a.n[0], H = pc.a.n[1], W = pc.a.n[2], Ho = pc.a.n[3], Wo = pc.a.n[4];
  if (t >= B * H * W) return;
  bool refl = pc.a.k[2] != 0;
  int64_t j = t % W, i = (t / W) % H, b = t / (W * H);
  int64_t ys[3], xs[3];
  int ny = pad_pre(i, pc.a.n[5], H, Ho, refl, ys), nx = pad_pre(j, pc.a.n[6], W, Wo, refl, xs);
  double acc = 0.0LF;
  for (int q = 0; q < ny; q++)
    for (int r = 0; r < nx; r++) acc += PD(pc.a.p[1], (b * Ho + ys[q]) * Wo + xs[r]);
  PD(pc.a.p[0], t) = acc;
}
#endif
