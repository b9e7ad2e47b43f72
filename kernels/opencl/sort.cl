/* AG_K_SORT: stable sort along r of x [o, r, in], torch's order (NaN above
 * every number, equal keys by position). A work-item per element counts
 * the elements ordered before it in its line and writes itself at that
 * rank: O(r) per element, no scratch, the same result on every device.
 * Values are copied as bits (esz bytes). */
bool sort_before(float a, long ia, float b, long ib, int desc) {
  bool an = isnan(a), bn = isnan(b);
  if (an != bn) return desc ? an : bn;
  if (!an && a != b) return desc ? a > b : a < b;
  return ia < ib;
}
__kernel void ag_sort(gbuf *val, ulong vo, __global long *idx, ulong io, const gbuf *x, ulong xo, int dt,
                      int esz, long O, long R, long I, int desc) {
  long t = get_global_id(0);
  if (t >= O * R * I) return;
  long i = t % I, oj = t / I, j = oj % R, o = oj / R, base = o * R * I + i;
  float v = ldf(x, xo, base + j * I, dt);
  long rank = 0;
  for (long q = 0; q < R; q++)
    if (sort_before(ldf(x, xo, base + q * I, dt), q, v, j, desc)) rank++;
  long p = (o * R + rank) * I + i, s = base + j * I;
  if (esz == 2)
    ((__global ushort *)(val + vo))[p] = ((const __global ushort *)(x + xo))[s];
  else
    ((__global uint *)(val + vo))[p] = ((const __global uint *)(x + xo))[s];
  ((__global long *)((__global uchar *)idx + io))[p] = j;
}
#ifdef AG_FP64
/* f64 (cl_khr_fp64): the same order on doubles; values copied as 8 bytes. */
bool sort_before_d(double a, long ia, double b, long ib, int desc) {
  bool an = isnan(a), bn = isnan(b);
  if (an != bn) return desc ? an : bn;
  if (!an && a != b) return desc ? a > b : a < b;
  return ia < ib;
}
__kernel void ag_sort_d(gbuf *val, ulong vo, __global long *idx, ulong io, const gbuf *x, ulong xo, long O, long R,
                        long I, int desc) {
  long t = get_global_id(0);
  if (t >= O * R * I) return;
  long i = t % I, oj = t / I, j = oj % R, o = oj / R, base = o * R * I + i;
  const __global double *xs = (const __global double *)(x + xo);
  double v = xs[base + j * I];
  long rank = 0;
  for (long q = 0; q < R; q++)
    if (sort_before_d(xs[base + q * I], q, v, j, desc)) rank++;
  long p = (o * R + rank) * I + i;
  ((__global ulong *)(val + vo))[p] = ((const __global ulong *)(x + xo))[base + j * I];
  ((__global long *)((__global uchar *)idx + io))[p] = j;
}
#endif
