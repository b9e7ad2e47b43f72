/* AG_K_SORT: stable sort along r of x [o, r, in], torch's order (NaN above
 * every number, equal keys by position). A thread per element finds its
 * rank in its line, the number of elements ordered before it, and writes
 * itself there: O(r) work per element, no scratch, no synchronisation, the
 * same result on every device and launch geometry. */
#include "common.cuh"

/* Whether (a, ia) comes before (b, ib): descending puts NaN first, larger
 * keys first; ascending NaN last; equal keys (and NaNs) by position. */
template <typename F> AGK_DEV bool sort_before(F a, long long ia, F b, long long ib, int desc) {
  bool an = a != a, bn = b != b;
  if (an != bn) return desc ? an : bn;
  if (!an && a != b) return desc ? a > b : a < b;
  return ia < ib;
}

template <typename T>
__global__ void k_sort(T *val, long long *idx, const T *x, long long O, long long R, long long I, int desc) {
  long long stride = (long long)gridDim.x * blockDim.x;
  for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < O * R * I; t += stride) {
    long long i = t % I, oj = t / I, j = oj % R, o = oj / R;
    const T *line = x + o * R * I + i;
    agk_c<T> v = agk_tof(line[j * I]);
    long long rank = 0;
    for (long long q = 0; q < R; q++)
      if (sort_before(agk_tof(line[q * I]), q, v, j, desc)) rank++;
    val[(o * R + rank) * I + i] = line[j * I];
    idx[(o * R + rank) * I + i] = j;
  }
}

gpuError_t agk_sort(const agk_env *env, const ag_k_sort *a) {
  long long O = a->o, R = a->r, I = a->in;
  if (O * R * I == 0) return gpuSuccess;
  int desc = a->variant == AG_KV_SORT_DESCENDING;
  unsigned g = agk_blocks(O * R * I, 256, 256, agk_wave(env, 256));
  AGK_DISPATCH_FLOAT(a->x->dtype, T,
                     agk_launch(k_sort<T>, g, 256, 0, env->stream, (T *)agk_ptr(a->values),
                                (long long *)agk_ptr(a->indices), (const T *)agk_ptr(a->x), O, R, I, desc));
  return gpuGetLastError();
}
