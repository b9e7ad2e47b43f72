#version 450
/* AG_K_SORT: stable sort along r of x [o, r, in], torch's order (NaN above
 * every number, equal keys by position), as a bottom-up merge sort: the
 * host records ceil(log2 r) passes (one when r == 1), pass w merging each
 * pair of adjacent sorted runs (A, B) of width w into one run of 2w. An
 * invocation per element binary-searches its partner run for the elements
 * ordered before it (the order includes the original position, so ties keep
 * A first and the sort is stable) and writes itself at its offset in its own
 * run plus that count: O(log r) per element and pass, the same result on
 * every device. The first pass reads x (positions implicit), later ones the
 * previous pass's keys and int64 positions; keys are copied as bits. */
#include "common.glsl"
#if defined(K_SORT_D)
#include "ops64.glsl"
layout(buffer_reference, std430, buffer_reference_align = 8) buffer BF64 { double v; };
#define PD(a, i) BF64((a) + uint64_t(i) * 8ul).v
#endif
layout(local_size_x = WG) in;

/* p0 output keys, p1 input keys (x on the first pass), p2 output int64
 * positions, p3 input positions (0 on the first pass); n0 O, n1 R, n2 I,
 * n3 the run width w; k0 dtype, k1 key size (2, 4 or 8), k2 descending */
#if defined(K_SORT)
#define KEY float
#define LDK(a, i) ldf(a, i, dt)
#else
#define KEY double
#define LDK(a, i) PD(a, i)
#endif

bool sort_before(KEY a, int64_t ia, KEY b, int64_t ib, bool desc) {
  bool an = ag_isnan(a), bn = ag_isnan(b);
  if (an != bn) return desc ? an : bn;
  if (!an && a != b) return desc ? a > b : a < b;
  return ia < ib;
}

void main() {
  int64_t t = gid(), O = pc.a.n[0], R = pc.a.n[1], I = pc.a.n[2], w = pc.a.n[3];
  if (t >= O * R * I) return;
  int dt = pc.a.k[0];
  bool desc = pc.a.k[2] != 0;
  uint64_t src = pc.a.p[1], srci = pc.a.p[3];
  int64_t i = t % I, oj = t / I, j = oj % R, o = oj / R, base = o * R * I + i;
  int64_t s = base + j * I;
  KEY v = LDK(src, s);
  int64_t iv = srci != 0ul ? PL(srci, s) : j;
  /* the pair of runs [a0, a0 + w) and [a0 + w, a0 + 2w) clipped to R; the
   * partner run [p0, p1) */
  int64_t a0 = j - j % (2 * w), mid = min(a0 + w, R), p0 = j < mid ? mid : a0;
  int64_t p1 = j < mid ? min(a0 + 2 * w, R) : mid;
  int64_t own = j < mid ? j - a0 : j - mid;
  int64_t lo = p0, hi = p1;
  while (lo < hi) {
    int64_t m = lo + (hi - lo) / 2, q = base + m * I;
    KEY u = LDK(src, q);
    int64_t iu = srci != 0ul ? PL(srci, q) : m;
    if (sort_before(u, iu, v, iv, desc)) lo = m + 1;
    else hi = m;
  }
  int64_t p = (o * R + a0 + own + (lo - p0)) * I + i;
  if (pc.a.k[1] == 8) PL(pc.a.p[0], p) = PL(src, s);
  else if (pc.a.k[1] == 2) PH(pc.a.p[0], p) = PH(src, s);
  else PU(pc.a.p[0], p) = PU(src, s);
  PL(pc.a.p[2], p) = iv;
}
