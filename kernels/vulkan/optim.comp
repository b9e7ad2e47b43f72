#version 450
/* Optimizer and mixed-precision kernels, one dispatch per tensor of a
 * multi-tensor call. The grad-scale and found-inf scalars stay on the
 * device (p4, p5; 0 when absent) so a step never waits for the host. */
#include "common.glsl"
layout(local_size_x = WG) in;

float opt_scalar(uint64_t a, float dflt) { return a != 0ul ? PF(a, 0) : dflt; }

#if defined(K_ADAMW)
/* p0 param, p1 grad, p2 exp_avg, p3 exp_avg_sq; n0 numel; f0 b1 f1 b2 f2 eps
 * f3 decay factor f4 step f5 1/sqrt(bc2) (folded on the host in f64) */
void main() {
  int64_t i = gid();
  if (i >= pc.a.n[0] || opt_scalar(pc.a.p[5], 0.0) != 0.0) return;
  float b1 = pc.a.f[0], b2 = pc.a.f[1];
  float gr = PF(pc.a.p[1], i) * opt_scalar(pc.a.p[4], 1.0);
  float mm = b1 * PF(pc.a.p[2], i) + (1.0 - b1) * gr;
  float vv = b2 * PF(pc.a.p[3], i) + (1.0 - b2) * gr * gr;
  PF(pc.a.p[2], i) = mm;
  PF(pc.a.p[3], i) = vv;
  PF(pc.a.p[0], i) = PF(pc.a.p[0], i) * pc.a.f[3] - pc.a.f[4] * mm / (sqrt(vv) * pc.a.f[5] + pc.a.f[2]);
}
#endif

#if defined(K_SGD)
/* p0 param, p1 grad, p2 momentum buffer or 0; f0 lr f1 momentum f2 dampening
 * f3 weight decay; k6 nesterov, k7 first step */
void main() {
  int64_t i = gid();
  if (i >= pc.a.n[0] || opt_scalar(pc.a.p[5], 0.0) != 0.0) return;
  float gr = PF(pc.a.p[1], i) * opt_scalar(pc.a.p[4], 1.0);
  float wd = pc.a.f[3], mom = pc.a.f[1];
  if (wd != 0.0) gr += wd * PF(pc.a.p[0], i);
  if (pc.a.p[2] != 0ul && mom != 0.0) {
    float b = pc.a.k[7] != 0 ? gr : mom * PF(pc.a.p[2], i) + (1.0 - pc.a.f[2]) * gr;
    PF(pc.a.p[2], i) = b;
    gr = pc.a.k[6] != 0 ? gr + mom * b : b;
  }
  PF(pc.a.p[0], i) -= pc.a.f[0] * gr;
}
#endif

#if defined(K_NONFINITE)
/* p0 x (k0), n0 numel, p1 inverse scale or 0, p2 found (f32) */
void main() {
  int64_t i = gid();
  if (i >= pc.a.n[0]) return;
  int dt = pc.a.k[0];
  float v = ldf(pc.a.p[0], i, dt);
  /* on the exponent bits: an overflowed gradient is exactly what a driver
   * assuming no inf or NaN would miss */
  if (!ag_isfinite(v)) PF(pc.a.p[2], 0) = 1.0;
  if (pc.a.p[1] != 0ul) stf(pc.a.p[0], i, dt, v * PF(pc.a.p[1], 0));
}
#endif
