/* AG_K_SCATTER_ADD: out [o, xlen, in] += src [o, k, in] at the index along
 * xlen. A thread per output element walks k in order and adds the entries
 * that name it, in f32 (f64 for f64), then stores once: no float atomics,
 * deterministic, and the same bits as the CPU, which adds in the same order.
 * O(k) per element; the thread of element 0 of each line reports the
 * out-of-range entries. */
#include "common.cuh"

struct sc_ix {
  const void *p;
  int i64;
  long long s0, s1, s2;
};
AGK_DEV long long sc_ix_at(sc_ix ix, long long o, long long k, long long i) {
  return agk_idx(ix.p, ix.i64, o * ix.s0 + k * ix.s1 + i * ix.s2);
}

template <typename T>
__global__ void k_scatter_add(T *out, const T *src, sc_ix ix, long long O, long long K, long long I, long long X,
                              ag_kernel_error *err) {
  long long stride = (long long)gridDim.x * blockDim.x;
  for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < O * X * I; t += stride) {
    long long i = t % I, oj = t / I, j = oj % X, o = oj / X;
    agk_c<T> acc = agk_tof(out[t]);
    for (long long k = 0; k < K; k++) {
      long long q = sc_ix_at(ix, o, k, i);
      if (q == j) acc += agk_tof(src[(o * K + k) * I + i]);
      else if (j == 0 && (q < 0 || q >= X)) agk_report(err, AG_K_SCATTER_ADD, q, X);
    }
    out[t] = agk_fromf<T>(acc);
  }
}

gpuError_t agk_scatter_add(const agk_env *env, const ag_k_scatter_add *a) {
  long long O = a->o, K = a->k, I = a->in, X = a->xlen;
  if (O * X * I == 0 || K == 0) return gpuSuccess;
  sc_ix ix;
  ix.p = agk_ptr(a->index);
  ix.i64 = a->variant == AG_KV_IDX64;
  ix.s0 = a->index->strides[0];
  ix.s1 = a->index->strides[1];
  ix.s2 = a->index->strides[2];
  unsigned g = agk_blocks(O * X * I, 256, 256, agk_wave(env, 256));
  AGK_DISPATCH_FLOAT(a->out->dtype, T,
                     agk_launch(k_scatter_add<T>, g, 256, 0, env->stream, (T *)agk_ptr(a->out),
                                (const T *)agk_ptr(a->src), ix, O, K, I, X, env->err));
  return gpuGetLastError();
}
