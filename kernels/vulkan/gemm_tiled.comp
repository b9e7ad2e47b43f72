#version 450
/* Register-blocked GEMM C[b] = alpha * A[b] @ B[b] + beta * C[b] for f32
 * (K_GEMM_T32) or f16 (K_GEMM_T16) inputs with f32 accumulation. The
 * arguments are gemm.comp's (p0 C, p1 A, p2 B; n0 M n1 N n2 K; n3..n5 A's
 * batch, row, col strides; n6..n8 B's; n9 first batch; n10 first row
 * tile; f0 alpha, f1 beta; k0 C's dtype) plus k5 and k6, the load modes
 * the host proved for A and B (0 scalar; A: 1 vec4 along k (row-major),
 * 2 vec4 along m (column-major); B: 1 vec4 along n (row-major), 2 vec4
 * along k (column-major)): the operand's address and its other strides
 * are multiples of 4 elements, so the vector loads are aligned.
 *
 * A work-group of 8 x 8 invocations computes a BM x BN tile of C, BM = 8 *
 * TM, BN = 8 * TN; each invocation a TM x TN block in registers, its
 * rows and columns contiguous, so the shared-memory reads are vec4. K goes
 * in slices of BK through shared memory, k-major (As[k][m], Bs[k][n]).
 * Specialization constant 0 packs TM (bits 0..3), TN (4..7) and BK
 * (8..13); TM and TN multiples of 4, BK of 4. Tiles inside the matrix
 * load with vec4 where the mode allows, tiles on an edge with the scalar
 * bounds-checked path. Each output's sum walks k upwards; no subgroup
 * operations. Every loop but the one over K has a constant trip count
 * and is unrolled ([[unroll]]): lavapipe counts the back-edges an
 * invocation takes against a limit of 65535 (the host's loop_ok). */
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"

layout(constant_id = 0) const int CFG = 0x1088;
const int TM = CFG & 15;
const int TN = (CFG >> 4) & 15;
const int BK = (CFG >> 8) & 63;
const int BM = 8 * TM;
const int BN = 8 * TN;
layout(local_size_x = 64) in;

/* vec4 loads of a BK x B tile by 64 invocations */
#define VEC_TRIPS(B) ((B * BK / 4 + 63) / 64)

shared vec4 As[BK * BM / 4];
shared vec4 Bs[BK * BN / 4];

#if defined(K_GEMM_T16)
layout(buffer_reference, std430, buffer_reference_align = 8) readonly buffer BV4 { uvec2 v; };
#define ES 2
float lds(uint64_t a, int64_t i) { return f16_to_f(uint(PH(a, i))); }
vec4 ldv(uint64_t a, int64_t i) {
  uvec2 u = BV4(a + uint64_t(i) * 2ul).v;
  return vec4(unpackHalf2x16(u.x), unpackHalf2x16(u.y));
}
#else
layout(buffer_reference, std430, buffer_reference_align = 16) readonly buffer BV4 { vec4 v; };
#define ES 4
float lds(uint64_t a, int64_t i) { return PF(a, i); }
vec4 ldv(uint64_t a, int64_t i) { return BV4(a + uint64_t(i) * 4ul).v; }
#endif

void main() {
  int64_t M = pc.a.n[0], N = pc.a.n[1], K = pc.a.n[2];
  int64_t b = int64_t(gl_WorkGroupID.z) + pc.a.n[9];
  int64_t m0 = (int64_t(gl_WorkGroupID.y) + pc.a.n[10]) * BM, n0 = int64_t(gl_WorkGroupID.x) * BN;
  int tid = int(gl_LocalInvocationID.x), tx = tid & 7, ty = tid >> 3;
  uint64_t A = pc.a.p[1], B = pc.a.p[2];
  int amode = pc.a.k[5], bmode = pc.a.k[6];
  int64_t aoff = b * pc.a.n[3], sam = pc.a.n[4], sak = pc.a.n[5];
  int64_t boff = b * pc.a.n[6], sbk = pc.a.n[7], sbn = pc.a.n[8];
  bool arows = m0 + BM <= M, bcols = n0 + BN <= N;
  float acc[TM][TN];
  [[unroll]] for (int i = 0; i < TM; i++)
    [[unroll]] for (int j = 0; j < TN; j++) acc[i][j] = 0.0;
  for (int64_t k0 = 0; k0 < K; k0 += BK) {
    bool kin = k0 + BK <= K;
    /* A's tile, BM x BK */
    if (kin && arows && amode == 1) {
      [[unroll]] for (int q = 0; q < VEC_TRIPS(BM); q++) {
        int e = tid + q * 64;
        if (e < BM * BK / 4) {
          int m = e / (BK / 4), kq = (e % (BK / 4)) * 4;
          vec4 v = ldv(A, aoff + (m0 + m) * sam + (k0 + kq));
          [[unroll]] for (int c = 0; c < 4; c++) As[(kq + c) * (BM / 4) + (m >> 2)][m & 3] = v[c];
        }
      }
    } else if (kin && arows && amode == 2) {
      [[unroll]] for (int q = 0; q < VEC_TRIPS(BM); q++) {
        int e = tid + q * 64;
        if (e < BM * BK / 4) {
          int k = e / (BM / 4), mq = e % (BM / 4);
          As[k * (BM / 4) + mq] = ldv(A, aoff + (m0 + mq * 4) + (k0 + k) * sak);
        }
      }
    } else {
      [[unroll]] for (int q = 0; q < BM * BK / 64; q++) {
        int e = tid + q * 64;
        int m = e / BK, k = e % BK;
        int64_t gm = m0 + m, gk = k0 + k;
        As[k * (BM / 4) + (m >> 2)][m & 3] = gm < M && gk < K ? lds(A, aoff + gm * sam + gk * sak) : 0.0;
      }
    }
    /* B's tile, BK x BN */
    if (kin && bcols && bmode == 1) {
      [[unroll]] for (int q = 0; q < VEC_TRIPS(BN); q++) {
        int e = tid + q * 64;
        if (e < BK * BN / 4) {
          int k = e / (BN / 4), nq = e % (BN / 4);
          Bs[k * (BN / 4) + nq] = ldv(B, boff + (k0 + k) * sbk + (n0 + nq * 4));
        }
      }
    } else if (kin && bcols && bmode == 2) {
      [[unroll]] for (int q = 0; q < VEC_TRIPS(BN); q++) {
        int e = tid + q * 64;
        if (e < BK * BN / 4) {
          int n = e / (BK / 4), kq = (e % (BK / 4)) * 4;
          vec4 v = ldv(B, boff + (k0 + kq) + (n0 + n) * sbn);
          [[unroll]] for (int c = 0; c < 4; c++) Bs[(kq + c) * (BN / 4) + (n >> 2)][n & 3] = v[c];
        }
      }
    } else {
      [[unroll]] for (int q = 0; q < BK * BN / 64; q++) {
        int e = tid + q * 64;
        int k = e / BN, n = e % BN;
        int64_t gk = k0 + k, gn = n0 + n;
        Bs[k * (BN / 4) + (n >> 2)][n & 3] = gk < K && gn < N ? lds(B, boff + gk * sbk + gn * sbn) : 0.0;
      }
    }
    barrier();
    [[unroll]] for (int k = 0; k < BK; k++) {
      vec4 av[TM / 4], bv[TN / 4];
      [[unroll]] for (int i = 0; i < TM / 4; i++) av[i] = As[k * (BM / 4) + ty * (TM / 4) + i];
      [[unroll]] for (int j = 0; j < TN / 4; j++) bv[j] = Bs[k * (BN / 4) + tx * (TN / 4) + j];
      [[unroll]] for (int i = 0; i < TM; i++)
        [[unroll]] for (int j = 0; j < TN; j++) acc[i][j] += av[i >> 2][i & 3] * bv[j >> 2][j & 3];
    }
    barrier();
  }
  uint64_t C = pc.a.p[0];
  int cdt = pc.a.k[0];
  float alpha = pc.a.f[0], beta = pc.a.f[1];
  [[unroll]] for (int i = 0; i < TM; i++) {
    int64_t gm = m0 + ty * TM + i;
    if (gm >= M) continue;
    [[unroll]] for (int j = 0; j < TN; j++) {
      int64_t gn = n0 + tx * TN + j;
      if (gn >= N) continue;
      int64_t ci = (b * M + gm) * N + gn;
      float v = alpha * acc[i][j];
      if (beta != 0.0) v += beta * ldf(C, ci, cdt);
      if (cdt == AG_F32) PF(C, ci) = v;
      else stf(C, ci, cdt, v);
    }
  }
}
