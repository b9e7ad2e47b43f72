/* AG_K_SORT: stable sort along r of x [o, r, in], torch's order (NaN above
 * every number, equal keys by position), as a bottom-up merge sort:
 * ceil(log2 r) launches (one when r == 1), launch w merging each pair of
 * adjacent sorted runs (A, B) of width w into one run of 2w. A thread per
 * element binary-searches its partner run for the elements ordered before
 * it (the order includes the original position, so ties keep A first and
 * the sort is stable) and writes itself at its offset in its own run plus
 * that count: O(log r) work per element and launch, no synchronisation
 * inside a launch, the same result on every device and launch geometry.
 * The first launch reads x (positions implicit), later ones the previous
 * launch's keys and positions; the launches ping-pong between the outputs
 * and a temporary (the stream's scratch where it fits, else a buffer of
 * its own, freed once the stream has run the sort). */
#include "common.cuh"

/* Whether (a, ia) comes before (b, ib): descending puts NaN first, larger
 * keys first; ascending NaN last; equal keys (and NaNs) by position. */
template <typename F> AGK_DEV bool sort_before(F a, long long ia, F b, long long ib, int desc) {
  bool an = a != a, bn = b != b;
  if (an != bn) return desc ? an : bn;
  if (!an && a != b) return desc ? a > b : a < b;
  return ia < ib;
}

/* One merge launch of run width w; srci NULL on the first. */
template <typename T>
__global__ void k_sort(T *val, long long *idx, const T *src, const long long *srci, long long O, long long R,
                       long long I, long long w, int desc) {
  long long stride = (long long)gridDim.x * blockDim.x;
  for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < O * R * I; t += stride) {
    long long i = t % I, oj = t / I, j = oj % R, o = oj / R, base = o * R * I + i, s = base + j * I;
    agk_c<T> v = agk_tof(src[s]);
    long long iv = srci ? srci[s] : j;
    long long a0 = j - j % (2 * w), mid = a0 + w < R ? a0 + w : R;
    long long p0 = j < mid ? mid : a0, p1 = j < mid ? (a0 + 2 * w < R ? a0 + 2 * w : R) : mid;
    long long own = j < mid ? j - a0 : j - mid, lo = p0, hi = p1;
    while (lo < hi) {
      long long m = lo + (hi - lo) / 2, q = base + m * I;
      if (sort_before(agk_tof(src[q]), srci ? srci[q] : m, v, iv, desc)) lo = m + 1;
      else hi = m;
    }
    long long p = (o * R + a0 + own + (lo - p0)) * I + i;
    val[p] = src[s];
    idx[p] = iv;
  }
}

template <typename T> static gpuError_t sort_passes(const agk_env *env, const ag_k_sort *a, char *tmp, size_t kbytes) {
  long long O = a->o, R = a->r, I = a->in, n = O * R * I;
  int desc = a->variant == AG_KV_SORT_DESCENDING, passes = 1;
  while ((1ll << passes) < R) passes++;
  unsigned g = agk_blocks(n, 256, 256, agk_wave(env, 256));
  const T *src = (const T *)agk_ptr(a->x);
  const long long *srci = NULL;
  for (int p = 0; p < passes; p++) {
    /* the last launch writes the outputs, the one before the temporary, ... */
    bool to_out = (passes - 1 - p) % 2 == 0;
    T *dst = to_out ? (T *)agk_ptr(a->values) : (T *)tmp;
    long long *dsti = to_out ? (long long *)agk_ptr(a->indices) : (long long *)(tmp + kbytes);
    agk_launch(k_sort<T>, g, 256, 0, env->stream, dst, dsti, src, srci, O, R, I, 1ll << p, desc);
    gpuError_t e = gpuGetLastError();
    if (e != gpuSuccess) return e;
    src = dst;
    srci = dsti;
  }
  return gpuSuccess;
}

gpuError_t agk_sort(const agk_env *env, const ag_k_sort *a) {
  long long n = a->o * a->r * a->in;
  if (n == 0) return gpuSuccess;
  ag_dtype dt = a->x->dtype;
  if (dt != AG_F32 && dt != AG_F64 && dt != AG_F16 && dt != AG_BF16) return gpuErrorNotSupported;
  size_t esz = dt == AG_F64 ? 8 : dt == AG_F32 ? 4 : 2;
  size_t kbytes = ((size_t)n * esz + 15) & ~(size_t)15, need = a->r > 1 ? kbytes + (size_t)n * 8 : 0;
  char *tmp = (char *)env->scratch;
  bool own = need > env->scratch_bytes;
  if (own) {
    gpuError_t e = gpuMalloc((void **)&tmp, need);
    if (e != gpuSuccess) return e;
  }
  gpuError_t e = gpuSuccess;
  AGK_DISPATCH_FLOAT(dt, T, e = sort_passes<T>(env, a, tmp, kbytes));
  if (own) {
    gpuError_t s = gpuStreamSynchronize(env->stream);
    gpuError_t f = gpuFree(tmp);
    if (e == gpuSuccess) e = s != gpuSuccess ? s : f;
  }
  return e;
}
