/* Our own batched GEMM for AG_K_MATMUL: 64x64 output tiles, 16-deep k steps
 * through shared memory, 4x4 outputs per thread, f32 accumulation (f64 for
 * f64). It is the
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

/* One 64x64 output tile at (m0, n0) of the matrices at A, B, C. */
template <typename T>
AGK_DEV void gemm_tile(T *C, const T *A, const T *B, long long M, long long N, long long K, long long sam,
                       long long sak, long long sbk, long long sbn, agk_c<T> alpha, agk_c<T> beta, long long m0,
                       long long n0, agk_c<T> (*As)[GB_M + 4], agk_c<T> (*Bs)[GB_N + 4]) {
  int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
  agk_c<T> acc[4][4];
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
      As[kk][mm] = gm < M && gk < K ? agk_tof(A[gm * sam + gk * sak]) : 0.f;
      int nn;
      if (b_rowmajor) { nn = idx % GB_N; kk = idx / GB_N; }
      else { nn = idx / GB_K; kk = idx % GB_K; }
      long long gn = n0 + nn;
      gk = k0 + kk;
      Bs[kk][nn] = gn < N && gk < K ? agk_tof(B[gk * sbk + gn * sbn]) : 0.f;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < GB_K; kk++) {
      agk_c<T> a[4], b[4];
#pragma unroll
      for (int i = 0; i < 4; i++) a[i] = As[kk][ty + 16 * i];
#pragma unroll
      for (int j = 0; j < 4; j++) b[j] = Bs[kk][tx + 16 * j];
#pragma unroll
      for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) acc[i][j] += a[i] * b[j];
    }
    __syncthreads(); /* also separates this tile's reads from the next tile's loads */
  }
#pragma unroll
  for (int i = 0; i < 4; i++) {
    long long gm = m0 + ty + 16 * i;
    if (gm >= M) continue;
#pragma unroll
    for (int j = 0; j < 4; j++) {
      long long gn = n0 + tx + 16 * j;
      if (gn >= N) continue;
      agk_c<T> v = alpha * acc[i][j];
      if (beta != 0.f) v += beta * agk_tof(C[gm * N + gn]);
      C[gm * N + gn] = agk_fromf<T>(v);
    }
  }
}

/* FLAT == false: grid (n tiles, m tiles, batch), one tile per block, for
 * shapes within every vendor's grid limits (the common case).
 * FLAT == true: tiles numbered (batch, m tile, n tile), n fastest, taken in a
 * grid-stride loop over a 1-D grid, for M > 4,194,240 rows or a batch over
 * 65,535 (gridDim.y/z are limited to 65,535 on CUDA). */
template <typename T, bool FLAT>
__global__ void __launch_bounds__(256) k_gemm(T *C, const T *A, const T *B, long long M, long long N, long long K,
                                              long long sam, long long sak, long long sab, long long sbk,
                                              long long sbn, long long sbb, agk_c<T> alpha, agk_c<T> beta,
                                              long long ntn, long long ntiles) {
  __shared__ agk_c<T> As[GB_K][GB_M + 4];
  __shared__ agk_c<T> Bs[GB_K][GB_N + 4];
  if (!FLAT) {
    long long bz = blockIdx.z;
    gemm_tile(C + bz * M * N, A + bz * sab, B + bz * sbb, M, N, K, sam, sak, sbk, sbn, alpha, beta,
              (long long)blockIdx.y * GB_M, (long long)blockIdx.x * GB_N, As, Bs);
    return;
  }
  long long ntm = (M + GB_M - 1) / GB_M;
  for (long long t = blockIdx.x; t < ntiles; t += gridDim.x) {
    long long tmb = t / ntn, bz = tmb / ntm;
    gemm_tile(C + bz * M * N, A + bz * sab, B + bz * sbb, M, N, K, sam, sak, sbk, sbn, alpha, beta,
              (tmb - bz * ntm) * GB_M, (t - tmb * ntn) * GB_N, As, Bs);
  }
}

template <typename T> static gpuError_t gemm_go(const agk_env *env, const ag_k_matmul *args) {
  const ag_koperand *a = args->a, *b = args->b, *o = args->c;
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
  long long ntn = (N + GB_N - 1) / GB_N, ntm = (M + GB_M - 1) / GB_M, ntiles = ntn * ntm * batch;
  /* 3-D grid within CUDA's (x < 2^31, y, z <= 65535) and HIP's (x * 256 <
   * 2^32) limits, else the flat grid-stride form */
  if (ntm <= 65535 && batch <= 65535 && ntn < (1LL << 24))
    agk_launch(k_gemm<T, false>, dim3((unsigned)ntn, (unsigned)ntm, (unsigned)batch), 256, 0, env->stream,
               (T *)agk_ptr(o), (const T *)agk_ptr(a), (const T *)agk_ptr(b), M, N, K, sam, sak, sab, sbk, sbn, sbb,
               (agk_c<T>)args->alpha, (agk_c<T>)args->beta, ntn, ntiles);
  else
    agk_launch(k_gemm<T, true>, agk_blocks(ntiles, 1, 256, agk_wave(env, 256)), 256, 0, env->stream,
               (T *)agk_ptr(o), (const T *)agk_ptr(a), (const T *)agk_ptr(b), M, N, K, sam, sak, sab, sbk, sbn, sbb,
               (agk_c<T>)args->alpha, (agk_c<T>)args->beta, ntn, ntiles);
  return gpuGetLastError();
}

gpuError_t agk_matmul(const agk_env *env, const ag_k_matmul *a) {
  AGK_DISPATCH_FLOAT(a->c->dtype, T, return gemm_go<T>(env, a));
  return gpuErrorNotSupported;
}
