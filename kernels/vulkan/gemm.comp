#version 450
/* Batched GEMM C[b] = alpha * A[b] @ B[b] + beta * C[b] as a shared-memory
 * tiled shader: a 64x64 tile of C per work-group of 256 invocations, each
 * computing a 4x4 block, K in steps of 16. A and B are read through their
 * strides (row- or column-major, batch stride 0 for a shared matrix), in
 * any float dtype, accumulating in f32; C is contiguous [B, M, N].
 * p0 C (k0), p1 A (k1), p2 B (k2); n0 M n1 N n2 K; n3..n5 A's batch, row,
 * col strides; n6..n8 B's; n9 first batch; n10 first row tile; f0 alpha, f1 beta (0: C not
 * read). No subgroup operations, so any subgroup size works. */
#include "common.glsl"
/* The portable build (docs/numerics.md): the same tiles, each output's sum
 * sequential in k (the tile loop and the loop inside a tile both walk k
 * upwards; the zeros past K add nothing to an accumulator that starts at
 * +0), every product rounded before its sum (precise), alpha applied when
 * k3 (alpha != 1 on the host), beta when k4 (beta != 0). */
#if defined(AG_PORTABLE)
#define PFLOAT precise float
#else
#define PFLOAT float
#endif
layout(local_size_x = 16, local_size_y = 16) in;

#define TM 64
#define TN 64
#define TK 16
shared float As[TK][TM + 1];
shared float Bs[TK][TN + 1];

void main() {
  int64_t M = pc.a.n[0], N = pc.a.n[1], K = pc.a.n[2];
  int64_t b = int64_t(gl_WorkGroupID.z) + pc.a.n[9];
  int64_t m0 = (int64_t(gl_WorkGroupID.y) + pc.a.n[10]) * TM, n0 = int64_t(gl_WorkGroupID.x) * TN;
  int tx = int(gl_LocalInvocationID.x), ty = int(gl_LocalInvocationID.y);
  int tid = ty * 16 + tx;
  uint64_t A = pc.a.p[1], B = pc.a.p[2];
  int adt = pc.a.k[1], bdt = pc.a.k[2];
  int64_t aoff = b * pc.a.n[3], sam = pc.a.n[4], sak = pc.a.n[5];
  int64_t boff = b * pc.a.n[6], sbk = pc.a.n[7], sbn = pc.a.n[8];
  PFLOAT acc[4][4];
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 4; j++) acc[i][j] = 0.0;
  for (int64_t k0 = 0; k0 < K; k0 += TK) {
    /* 1024 elements of each tile, 4 per invocation */
    for (int q = 0; q < 4; q++) {
      int e = tid + q * 256;
      /* A tile [TM][TK]: consecutive invocations walk k when A is row-major */
      int am = e / TK, ak = e % TK;
      int64_t gm = m0 + am, gk = k0 + ak;
      As[ak][am] = gm < M && gk < K ? ldf(A, aoff + gm * sam + gk * sak, adt) : 0.0;
      int bk = e / TN, bn = e % TN;
      int64_t gk2 = k0 + bk, gn = n0 + bn;
      Bs[bk][bn] = gk2 < K && gn < N ? ldf(B, boff + gk2 * sbk + gn * sbn, bdt) : 0.0;
    }
    barrier();
    for (int k = 0; k < TK; k++) {
      float av[4], bv[4];
      for (int i = 0; i < 4; i++) av[i] = As[k][ty * 4 + i];
      for (int j = 0; j < 4; j++) bv[j] = Bs[k][tx * 4 + j];
      for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) acc[i][j] += av[i] * bv[j];
    }
    barrier();
  }
  uint64_t C = pc.a.p[0];
  int cdt = pc.a.k[0];
  float alpha = pc.a.f[0], beta = pc.a.f[1];
  for (int i = 0; i < 4; i++) {
    int64_t gm = m0 + ty * 4 + i;
    if (gm >= M) continue;
    for (int j = 0; j < 4; j++) {
      int64_t gn = n0 + tx * 4 + j;
      if (gn >= N) continue;
      int64_t ci = (b * M + gm) * N + gn;
#if defined(AG_PORTABLE)
      PFLOAT v = acc[i][j];
      if (pc.a.k[3] != 0) v = alpha * v;
      if (pc.a.k[4] != 0) v = v + beta * ldf(C, ci, cdt);
#else
      float v = alpha * acc[i][j];
      if (beta != 0.0) v += beta * ldf(C, ci, cdt);
#endif
      stf(C, ci, cdt, v);
    }
  }
}
