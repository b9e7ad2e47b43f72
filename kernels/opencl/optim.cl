/* Optimizer and mixed-precision kernels, launched once per tensor of a
 * multi-tensor call. The grad-scale and found-inf scalars stay on the device
 * so a step never waits for the host. */

#define FP(b, o) ((__global float *)((b) + (o)))

/* Optional device scalar: NULL buffer means absent. */
float opt_scalar(const gbuf *b, ulong o, float dflt) { return b ? ((const __global float *)(b + o))[0] : dflt; }

__kernel void ag_adamw(gbuf *pb, ulong po, gbuf *gb, ulong go, gbuf *mb, ulong mo, gbuf *vb,
                       ulong vo, long n, float b1, float b2, float eps, float decay,
                       float step, float rbc2, const gbuf *sc, ulong sco, const gbuf *fi,
                       ulong fio) {
  long i = get_global_id(0);
  if (i >= n || opt_scalar(fi, fio, 0.0f) != 0.0f) return;
  __global float *p = FP(pb, po), *m = FP(mb, mo), *v = FP(vb, vo);
  float gr = FP(gb, go)[i] * opt_scalar(sc, sco, 1.0f);
  float mm = b1 * m[i] + (1.0f - b1) * gr;
  float vv = b2 * v[i] + (1.0f - b2) * gr * gr;
  m[i] = mm;
  v[i] = vv;
  p[i] = p[i] * decay - step * mm / (sqrt(vv) * rbc2 + eps);
}

__kernel void ag_sgd(gbuf *pb, ulong po, gbuf *gb, ulong go, gbuf *bb, ulong bo, long n, float lr,
                     float mom, float damp, float wd, int nesterov, int first, const gbuf *sc,
                     ulong sco, const gbuf *fi, ulong fio) {
  long i = get_global_id(0);
  if (i >= n || opt_scalar(fi, fio, 0.0f) != 0.0f) return;
  __global float *p = FP(pb, po);
  float gr = FP(gb, go)[i] * opt_scalar(sc, sco, 1.0f);
  if (wd != 0.0f) gr += wd * p[i];
  if (bb && mom != 0.0f) {
    __global float *buf = FP(bb, bo);
    float b = first ? gr : mom * buf[i] + (1.0f - damp) * gr;
    buf[i] = b;
    gr = nesterov ? gr + mom * b : b;
  }
  p[i] -= lr * gr;
}

/* Checks the unscaled value, as torch's unscale does; found is never cleared. */
__kernel void ag_nonfinite(gbuf *x, ulong xo, int dt, long n, const gbuf *inv, ulong io,
                           gbuf *found, ulong fo) {
  long i = get_global_id(0);
  if (i >= n) return;
  float v = ldf(x, xo, i, dt);
  if (!isfinite(v)) FP(found, fo)[0] = 1.0f;
  if (inv) stf(x, xo, i, dt, v * FP(inv, io)[0]);
}
