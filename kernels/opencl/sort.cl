/* AG_K_SORT: stable sort along r of x [o, r, in], torch's order (NaN above
 * every number, equal keys by position), as a bottom-up merge sort: the
 * host enqueues ceil(log2 r) passes (one when r == 1), pass w merging each
 * pair of adjacent sorted runs (A, B) of width w into one run of 2w. A
 * work-item per element binary-searches its partner run for the elements
 * ordered before it (the order includes the original position, so ties keep
 * A first and the sort is stable) and writes itself at its offset in its own
 * run plus that count: O(log r) per element and pass, the same result on
 * every device. The first pass (first != 0) reads x with implicit positions,
 * later ones the previous pass's keys and long positions; keys are copied
 * as bits (esz bytes). */
bool sort_before(float a, long ia, float b, long ib, int desc) {
  bool an = isnan(a), bn = isnan(b);
  if (an != bn) return desc ? an : bn;
  if (!an && a != b) return desc ? a > b : a < b;
  return ia < ib;
}
/* The partner run [*p0, *p1) of element j of a pair of runs of width w and
 * its offset in its own run; returns the pair's start. */
long sort_partner(long j, long R, long w, long *p0, long *p1, long *own) {
  long a0 = j - j % (2 * w), mid = min(a0 + w, R);
  *p0 = j < mid ? mid : a0;
  *p1 = j < mid ? min(a0 + 2 * w, R) : mid;
  *own = j < mid ? j - a0 : j - mid;
  return a0;
}
__kernel void ag_sort(gbuf *val, ulong vo, gbuf *idx, ulong io, const gbuf *src, ulong so, const gbuf *srci,
                      ulong sio, int first, int dt, int esz, long O, long R, long I, long w, int desc) {
  long t = get_global_id(0);
  if (t >= O * R * I) return;
  long i = t % I, oj = t / I, j = oj % R, o = oj / R, base = o * R * I + i, s = base + j * I;
  const __global long *si = (const __global long *)(srci + sio);
  float v = ldf(src, so, s, dt);
  long iv = first ? j : si[s], p0, p1, own;
  long a0 = sort_partner(j, R, w, &p0, &p1, &own), lo = p0, hi = p1;
  while (lo < hi) {
    long m = lo + (hi - lo) / 2, q = base + m * I;
    if (sort_before(ldf(src, so, q, dt), first ? m : si[q], v, iv, desc)) lo = m + 1;
    else hi = m;
  }
  long p = (o * R + a0 + own + (lo - p0)) * I + i;
  if (esz == 2)
    ((__global ushort *)(val + vo))[p] = ((const __global ushort *)(src + so))[s];
  else
    ((__global uint *)(val + vo))[p] = ((const __global uint *)(src + so))[s];
  ((__global long *)(idx + io))[p] = iv;
}
#ifdef AG_FP64
/* f64 (cl_khr_fp64): the same order and passes on doubles; keys copied as
 * 8 bytes. */
bool sort_before_d(double a, long ia, double b, long ib, int desc) {
  bool an = isnan(a), bn = isnan(b);
  if (an != bn) return desc ? an : bn;
  if (!an && a != b) return desc ? a > b : a < b;
  return ia < ib;
}
__kernel void ag_sort_d(gbuf *val, ulong vo, gbuf *idx, ulong io, const gbuf *src, ulong so, const gbuf *srci,
                        ulong sio, int first, long O, long R, long I, long w, int desc) {
  long t = get_global_id(0);
  if (t >= O * R * I) return;
  long i = t % I, oj = t / I, j = oj % R, o = oj / R, base = o * R * I + i, s = base + j * I;
  const __global double *xs = (const __global double *)(src + so);
  const __global long *si = (const __global long *)(srci + sio);
  double v = xs[s];
  long iv = first ? j : si[s], p0, p1, own;
  long a0 = sort_partner(j, R, w, &p0, &p1, &own), lo = p0, hi = p1;
  while (lo < hi) {
    long m = lo + (hi - lo) / 2, q = base + m * I;
    if (sort_before_d(xs[q], first ? m : si[q], v, iv, desc)) lo = m + 1;
    else hi = m;
  }
  long p = (o * R + a0 + own + (lo - p0)) * I + i;
  ((__global ulong *)(val + vo))[p] = ((const __global ulong *)(src + so))[s];
  ((__global long *)(idx + io))[p] = iv;
}
#endif
