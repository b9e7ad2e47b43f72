/* AG_K_PAD and AG_K_PAD_BWD over x [b, h, w] and the padded [b, ho, wo]
 * (top, left before; bottom, right from the shapes). A work-item per output
 * element: the forward copies its source as bits (esz bytes; reflect
 * mirrors without repeating the edge) or stores the value; the backward
 * sums the dy elements that read its dx element, rows then columns
 * ascending, in f32: the CPU's and the GPU kernels' order. */
long pad_src(long p, long before, long n, int reflect) {
  long r = p - before;
  if (!reflect) return r >= 0 && r < n ? r : -1;
  if (r < 0) r = -r;
  if (r >= n) r = 2 * (n - 1) - r;
  return r;
}
int pad_pre(long i, long before, long n, long no, int reflect, long *out) {
  int k = 0;
  if (reflect && i >= 1 && i <= before) out[k++] = before - i;
  out[k++] = before + i;
  if (reflect && i <= n - 2 && before + 2 * (n - 1) - i < no) out[k++] = before + 2 * (n - 1) - i;
  return k;
}
__kernel void ag_pad(gbuf *y, ulong yo, const gbuf *x, ulong xo, int dt, int esz, long B, long H, long W, long Ho,
                     long Wo, long top, long left, int reflect, float value) {
  long t = get_global_id(0);
  if (t >= B * Ho * Wo) return;
  long c = t % Wo, r = (t / Wo) % Ho, b = t / (Wo * Ho);
  long sy = pad_src(r, top, H, reflect), sx = pad_src(c, left, W, reflect);
  if (sy < 0 || sx < 0) {
    stf(y, yo, t, dt, value);
    return;
  }
  long s = (b * H + sy) * W + sx;
  if (esz == 2)
    ((__global ushort *)(y + yo))[t] = ((const __global ushort *)(x + xo))[s];
  else
    ((__global uint *)(y + yo))[t] = ((const __global uint *)(x + xo))[s];
}
__kernel void ag_pad_bwd(gbuf *dx, ulong xo, const gbuf *dy, ulong yo, int dt, long B, long H, long W, long Ho,
                         long Wo, long top, long left, int reflect) {
  long t = get_global_id(0);
  if (t >= B * H * W) return;
  long j = t % W, i = (t / W) % H, b = t / (W * H);
  long ys[3], xs[3];
  int ny = pad_pre(i, top, H, Ho, reflect, ys), nx = pad_pre(j, left, W, Wo, reflect, xs);
  float acc = 0.0f;
  for (int q = 0; q < ny; q++)
    for (int r = 0; r < nx; r++) acc += ldf(dy, yo, (b * Ho + ys[q]) * Wo + xs[r], dt);
  stf(dx, xo, t, dt, acc);
}
#ifdef AG_FP64
/* f64 (cl_khr_fp64): copies as 8 bytes, the value and the sums in double. */
__kernel void ag_pad_d(gbuf *y, ulong yo, const gbuf *x, ulong xo, long B, long H, long W, long Ho, long Wo, long top,
                       long left, int reflect, double value) {
  long t = get_global_id(0);
  if (t >= B * Ho * Wo) return;
  long c = t % Wo, r = (t / Wo) % Ho, b = t / (Wo * Ho);
  long sy = pad_src(r, top, H, reflect), sx = pad_src(c, left, W, reflect);
  __global double *yd = (__global double *)(y + yo);
  if (sy < 0 || sx < 0)
    yd[t] = value;
  else
    ((__global ulong *)yd)[t] = ((const __global ulong *)(x + xo))[(b * H + sy) * W + sx];
}
__kernel void ag_pad_bwd_d(gbuf *dx, ulong xo, const gbuf *dy, ulong yo, long B, long H, long W, long Ho, long Wo,
                           long top, long left, int reflect) {
  long t = get_global_id(0);
  if (t >= B * H * W) return;
  long j = t % W, i = (t / W) % H, b = t / (W * H);
  long ys[3], xs[3];
  int ny = pad_pre(i, top, H, Ho, reflect, ys), nx = pad_pre(j, left, W, Wo, reflect, xs);
  const __global double *g = (const __global double *)(dy + yo);
  double acc = 0.0;
  for (int q = 0; q < ny; q++)
    for (int r = 0; r < nx; r++) acc += g[(b * Ho + ys[q]) * Wo + xs[r]];
  ((__global double *)(dx + xo))[t] = acc;
}
#endif
