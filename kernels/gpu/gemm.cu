/* Our own batched GEMM for AG_K_MATMUL: 64x64 output tiles, 16-deep k steps
 * through shared memory, 4x4 outputs per thread, f32 accumulation. It is the
 * HIP backend's path when no rocBLAS/hipBLAS is found and is selectable on
 * CUDA (AG_GPU_GEMM=own) so it is tested on NVIDIA too. Operands are row- or
 * column-major; tile loads follow the layout so they stay coalesced. */
#include "common.cuh"

#define GB_M 64
#define GB_N 64
#define GB_K 16

agk_mat agk_mat_of(const ag_koperand *o) {
  agk_mat m;
  int nd = o->ndim;
  long long rows = o->shape[nd - 2], cols = o->shape[nd - 1];
  long long sr = o->strides[nd - 2], sc = o->strides[nd - 1];
  m.p = agk_ptr(o);
  m.batch_stride = nd > 2 ? o->strides[nd - 3] : 0;
  /* a dim of size 1 may carry any stride, so ld is clamped to what BLAS
   * accepts; the core guarantees that one of the two strides is 1 */
  if (sc == 1 && sr >= cols) { m.row_major = 1; m.ld = sr; }
  else if (sr == 1 && sc >= rows) { m.row_major = 0; m.ld = sc; }
  else if (sc == 1) { m.row_major = 1; m.ld = sr > cols ? sr : cols; }
  else { m.row_major = 0; m.ld = sc > rows ? sc : rows; }
  if (m.ld < 1) m.ld = 1;
  return m;
}

template <typename T>
__global__ void __launch_bounds__(256) k_gemm(T *C, const T *A, const T *B, long long M, long long N, long long K,
                                              long long sam, long long sak, long long sab, long long sbk,
                                              long long sbn, long long sbb, float alpha, float beta,
                                              long long ntn, long long ntiles) {
  __shared__ float As[GB_K][GB_M + 4];
  __shared__ float Bs[GB_K][GB_N + 4];
  int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
  /* Output tiles are numbered (batch, m tile, n tile), n fastest, and taken
   * in a grid-stride loop over a 1-D grid: gridDim.y/z (65535 on CUDA) would
   * bound M to 4,194,240 rows and the batch to 65,535. */
  for (long long t = blockIdx.x; t < ntiles; t += gridDim.x) {
    long long tn = t % ntn, tmb = t / ntn, ntm = (M + GB_M - 1) / GB_M;
    long long bz = tmb / ntm;
    long long m0 = (tmb - bz * ntm) * GB_M, n0 = tn * GB_N;
    const T *Ab = A + bz * sab, *Bb = B + bz * sbb;
    T *Cb = C + bz * M * N;
    float acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
      for (int j = 0; j < 4; j++) acc[i][j] = 0.f;
    bool a_rowmajor = sak == 1, b_rowmajor = sbn == 1;
    for (long long k0 = 0; k0 < K; k0 += GB_K) {
#pragma unroll
      for (int r = 0; r < 4; r++) {
        int idx = tid + r * 256, mm, kk;
        if (a_rowmajor) { mm = idx / GB_K; kk = idx % GB_K; }
        else { mm = idx % GB_M; kk = idx / GB_M; }
        long long gm = m0 + mm, gk = k0 + kk;
        As[kk][mm] = gm < M && gk < K ? agk_tof(Ab[gm * sam + gk * sak]) : 0.f;
        int nn;
        if (b_rowmajor) { nn = idx % GB_N; kk = idx / GB_N; }
        else { nn = idx / GB_K; kk = idx % GB_K; }
        long long gn = n0 + nn;
        gk = k0 + kk;
        Bs[kk][nn] = gn < N && gk < K ? agk_tof(Bb[gk * sbk + gn * sbn]) : 0.f;
      }
      __syncthreads();
#pragma unroll
      for (int kk = 0; kk < GB_K; kk++) {
        float a[4], b[4];
#pragma unroll
        for (int i = 0; i < 4; i++) a[i] = As[kk][ty + 16 * i];
#pragma unroll
        for (int j = 0; j < 4; j++) b[j] = Bs[kk][tx + 16 * j];
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
          for (int j = 0; j < 4; j++) acc[i][j] += a[i] * b[j];
      }
      __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; i++) {
      long long gm = m0 + ty + 16 * i;
      if (gm >= M) continue;
#pragma unroll
      for (int j = 0; j < 4; j++) {
        long long gn = n0 + tx + 16 * j;
        if (gn >= N) continue;
        float v = alpha * acc[i][j];
        if (beta != 0.f) v += beta * agk_tof(Cb[gm * N + gn]);
        Cb[gm * N + gn] = agk_fromf<T>(v);
      }
    }
    /* no barrier before the next tile: the k loop ends with one */
  }
}

template <typename T> static gpuError_t gemm_go(const agk_env *env, const ag_kernel_call *c) {
  const ag_koperand *a = &c->o[1], *b = &c->o[2], *o = &c->o[0];
  int nd = o->ndim;
  long long M = o->shape[nd - 2], N = o->shape[nd - 1], K = a->shape[a->ndim - 1];
  long long batch = 1;
  for (int i = 0; i < nd - 2; i++) batch *= o->shape[i];
  if (M == 0 || N == 0 || batch == 0) return gpuSuccess;
  long long sab = a->ndim > 2 ? a->strides[a->ndim - 3] : 0, sbb = b->ndim > 2 ? b->strides[b->ndim - 3] : 0;
  long long sam = a->strides[a->ndim - 2], sak = a->strides[a->ndim - 1];
  long long sbk = b->strides[b->ndim - 2], sbn = b->strides[b->ndim - 1];
  /* size-1 dims: make the layout test (stride == 1) pick the coalesced path */
  if (K == 1) { sak = 1; sbk = 1; }
  long long ntn = (N + GB_N - 1) / GB_N, ntiles = ntn * ((M + GB_M - 1) / GB_M) * batch;
  agk_launch(k_gemm<T>, agk_blocks(ntiles, 1, 256, agk_wave(env, 256)), 256, 0, env->stream, (T *)agk_ptr(o),
             (const T *)agk_ptr(a), (const T *)agk_ptr(b), M, N, K, sam, sak, sab, sbk, sbn, sbb, (float)c->s[0],
             (float)c->s[1], ntn, ntiles);
  return gpuGetLastError();
}

gpuError_t agk_gemm(const agk_env *env, const ag_kernel_call *c) {
  AGK_DISPATCH_FLOAT(c->o[0].dtype, T, return gemm_go<T>(env, c));
  return gpuErrorNotSupported;
}
