#version 450
/* AG_K_SCATTER_ADD: out [o, xlen, in] += src [o, k, in] at the index along
 * xlen. An invocation per output element walks k in order and adds the
 * entries that name it in f32, then stores once: no atomics, deterministic,
 * the CPU's and the other GPU kernels' order. The invocation of element 0
 * of each line reports out-of-range entries. */
#include "common.glsl"
#if defined(K_SCATTER_ADD_D)
layout(buffer_reference, std430, buffer_reference_align = 8) buffer BF64 { double v; };
#define PD(a, i) BF64((a) + uint64_t(i) * 8ul).v
#endif
layout(local_size_x = WG) in;

#if defined(K_SCATTER_ADD)
/* p0 out, p1 src (k0 dtype), p2 index (k1 its dtype), p7 error word; n0 O,
 * n1 K, n2 I, n3 X, n4..n6 the index's element strides */
void main() {
  int64_t t = gid(), O = pc.a.n[0], K = pc.a.n[1], I = pc.a.n[2], X = pc.a.n[3];
  if (t >= O * X * I) return;
  int dt = pc.a.k[0];
  int64_t i = t % I, oj = t / I, j = oj % X, o = oj / X;
  float acc = ldf(pc.a.p[0], t, dt);
  for (int64_t k = 0; k < K; k++) {
    int64_t q = ld_index(pc.a.p[2], o * pc.a.n[4] + k * pc.a.n[5] + i * pc.a.n[6], pc.a.k[1]);
    if (q == j) acc += ldf(pc.a.p[1], (o * K + k) * I + i, dt);
    else if (j == 0 && (q < 0 || q >= X)) set_error(pc.a.p[7], AG_ERR_INDEX, AG_K_SCATTER_ADD, q, X);
  }
  stf(pc.a.p[0], t, dt, acc);
}
#endif

#if defined(K_SCATTER_ADD_D)
/* f64 (devices with shaderFloat64): the same walk, summed in double; the
 * arguments as K_SCATTER_ADD's (k0 unused) */
void main() {
  int64_t t = gid(), O = pc.a.n[0], K = pc.a.n[1], I = pc.a.n[2], X = pc.a.n[3];
  if (t >= O * X * I) return;
  int64_t i = t % I, oj = t / I, j = oj % X, o = oj / X;
  double acc = PD(pc.a.p[0], t);
  for (int64_t k = 0; k < K; k++) {
    int64_t q = ld_index(pc.a.p[2], o * pc.a.n[4] + k * pc.a.n[5] + i * pc.a.n[6], pc.a.k[1]);
    if (q == j) acc += PD(pc.a.p[1], (o * K + k) * I + i);
    else if (j == 0 && (q < 0 || q >= X)) set_error(pc.a.p[7], AG_ERR_INDEX, AG_K_SCATTER_ADD, q, X);
  }
  PD(pc.a.p[0], t) = acc;
}
#endif
