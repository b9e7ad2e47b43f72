#version 450
/* AG_K_SORT: stable sort along r of x [o, r, in], torch's order (NaN above
 * every number, equal keys by position). An invocation per element counts
 * the elements ordered before it in its line and writes itself at that
 * rank: O(r) per element, no shared memory, the same result on every
 * device. Values are copied as bits. */
#include "common.glsl"
#if defined(K_SORT_D)
#include "ops64.glsl"
layout(buffer_reference, std430, buffer_reference_align = 8) buffer BF64 { double v; };
#define PD(a, i) BF64((a) + uint64_t(i) * 8ul).v
#endif
layout(local_size_x = WG) in;

#if defined(K_SORT)
/* p0 values, p1 x (k0 dtype, k1 element size), p2 i64 indices; n0 O, n1 R,
 * n2 I; k2 descending */
bool sort_before(float a, int64_t ia, float b, int64_t ib, bool desc) {
  bool an = ag_isnan(a), bn = ag_isnan(b);
  if (an != bn) return desc ? an : bn;
  if (!an && a != b) return desc ? a > b : a < b;
  return ia < ib;
}
void main() {
  int64_t t = gid(), O = pc.a.n[0], R = pc.a.n[1], I = pc.a.n[2];
  if (t >= O * R * I) return;
  int dt = pc.a.k[0];
  bool desc = pc.a.k[2] != 0;
  int64_t i = t % I, oj = t / I, j = oj % R, o = oj / R, base = o * R * I + i;
  float v = ldf(pc.a.p[1], base + j * I, dt);
  int64_t rank = 0;
  for (int64_t q = 0; q < R; q++)
    if (sort_before(ldf(pc.a.p[1], base + q * I, dt), q, v, j, desc)) rank++;
  int64_t p = (o * R + rank) * I + i, s = base + j * I;
  if (pc.a.k[1] == 2) PH(pc.a.p[0], p) = PH(pc.a.p[1], s);
  else PU(pc.a.p[0], p) = PU(pc.a.p[1], s);
  PL(pc.a.p[2], p) = j;
}
#endif

#if defined(K_SORT_D)
/* f64 (devices with shaderFloat64): the same order on doubles, values
 * copied as 8 bytes; p0 values, p1 x, p2 i64 indices; n0 O, n1 R, n2 I; k2
 * descending */
bool sort_before_d(double a, int64_t ia, double b, int64_t ib, bool desc) {
  bool an = ag_isnan(a), bn = ag_isnan(b);
  if (an != bn) return desc ? an : bn;
  if (!an && a != b) return desc ? a > b : a < b;
  return ia < ib;
}
void main() {
  int64_t t = gid(), O = pc.a.n[0], R = pc.a.n[1], I = pc.a.n[2];
  if (t >= O * R * I) return;
  bool desc = pc.a.k[2] != 0;
  int64_t i = t % I, oj = t / I, j = oj % R, o = oj / R, base = o * R * I + i;
  double v = PD(pc.a.p[1], base + j * I);
  int64_t rank = 0;
  for (int64_t q = 0; q < R; q++)
    if (sort_before_d(PD(pc.a.p[1], base + q * I), q, v, j, desc)) rank++;
  int64_t p = (o * R + rank) * I + i;
  PL(pc.a.p[0], p) = PL(pc.a.p[1], base + j * I);
  PL(pc.a.p[2], p) = j;
}
#endif
