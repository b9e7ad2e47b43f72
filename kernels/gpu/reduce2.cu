/* Line reductions of the typed kernel-op table (logsumexp, vector norms)
 * and one_hot. x is [outer, r, inner]: with inner == 1 a group of 32 lanes
 * (a block of 256 for lines over 1024) takes a line (coalesced along r) and
 * combines its lanes in a fixed butterfly (then the block's groups in
 * order); otherwise a thread takes a line (coalesced over inner) and
 * walks r in order. Either way the result repeats bit for bit. Compute in
 * f32 (f64 for f64). */
#include "common.cuh"

#define R2_TPR 32       /* lanes per line when inner == 1 */
#define R2_TPR_LONG 256 /* ... and the line is longer than R2_LONG: a block */
#define R2_LONG 1024
#define R2_W(TPR) ((TPR) < 32 ? (TPR) : 32) /* shuffle width */

/* Lines in a grid-stride loop: TPR lanes per line (TPR == 1: a thread;
 * TPR == blockDim.x: the block). The loop bound is uniform over a lane
 * group, so its shuffles and barriers never diverge. */
#define R2_LINES(TPR)                                                                              \
  const int lane = (TPR) > 1 ? (int)(threadIdx.x % (TPR)) : 0;                                     \
  const long long lpb = blockDim.x / (TPR);                                                        \
  for (long long t = (long long)blockIdx.x * lpb + threadIdx.x / (TPR); t < outer * inner;        \
       t += (long long)gridDim.x * lpb)

/* Sum and max over a line's TPR lanes: a butterfly within 32 lanes, then
 * (TPR > 32) each 32-lane group's result through sh (TPR / 32 entries),
 * combined by every thread in group order. The leading barrier lets a
 * call reuse sh. */
template <int TPR, typename C> AGK_DEV C r2_sum(C v, C *sh) {
  for (int m = R2_W(TPR) / 2; m > 0; m >>= 1) v += AGK_SHFL_XOR(v, m, R2_W(TPR));
  if (TPR <= 32) return v;
  __syncthreads();
  if (threadIdx.x % 32 == 0) sh[threadIdx.x / 32] = v;
  __syncthreads();
  v = sh[0];
  for (int i = 1; i < TPR / 32; i++) v += sh[i];
  return v;
}
template <int TPR, typename C> AGK_DEV C r2_max(C v, C *sh) {
  for (int m = R2_W(TPR) / 2; m > 0; m >>= 1) {
    C o = AGK_SHFL_XOR(v, m, R2_W(TPR));
    v = o > v ? o : v;
  }
  if (TPR <= 32) return v;
  __syncthreads();
  if (threadIdx.x % 32 == 0) sh[threadIdx.x / 32] = v;
  __syncthreads();
  v = sh[0];
  for (int i = 1; i < TPR / 32; i++) v = sh[i] > v ? sh[i] : v;
  return v;
}

/* ---------------- logsumexp ---------------- */
/* Online (max, sum of exp(x - max)) per lane, combined across lanes; NaN
 * is carried as a flag, an infinite max is the answer (exp(inf - inf) is
 * never used). */
template <typename C> AGK_DEV void lse_comb(C &m, C &s, C m2, C s2) {
  if (m2 == -INFINITY) return;
  if (m == -INFINITY) {
    m = m2;
    s = s2;
    return;
  }
  C mm = m > m2 ? m : m2;
  if (mm != INFINITY) s = s * agk_fexp(m - mm) + s2 * agk_fexp(m2 - mm);
  m = mm;
}
template <int TPR, typename T>
__global__ void k_logsumexp(T *y, const T *x, long long outer, long long r, long long inner) {
  typedef agk_c<T> C;
  __shared__ C shm[R2_TPR_LONG / 32], shs[R2_TPR_LONG / 32];
  __shared__ int shn[R2_TPR_LONG / 32];
  R2_LINES(TPR) {
    long long o = t / inner, i = t - o * inner;
    const T *p = x + o * r * inner + i;
    C m = -INFINITY, s = 0;
    int nan = 0;
    for (long long k = lane; k < r; k += TPR) {
      C v = agk_tof(p[k * inner]);
      if (v != v) nan = 1;
      else lse_comb(m, s, v, (C)1);
    }
    if (TPR > 1) {
      nan = r2_max<TPR>(nan, shn);
      for (int w = R2_W(TPR) / 2; w > 0; w >>= 1) {
        C m2 = AGK_SHFL_XOR(m, w, R2_W(TPR)), s2 = AGK_SHFL_XOR(s, w, R2_W(TPR));
        lse_comb(m, s, m2, s2);
      }
      if (TPR > 32) { /* the block's 32-lane groups, in order */
        __syncthreads();
        if (threadIdx.x % 32 == 0) {
          shm[threadIdx.x / 32] = m;
          shs[threadIdx.x / 32] = s;
        }
        __syncthreads();
        m = shm[0];
        s = shs[0];
        for (int i = 1; i < TPR / 32; i++) lse_comb(m, s, shm[i], shs[i]);
      }
    }
    C res = nan ? (C)NAN : (m == INFINITY || m == -INFINITY) ? m : m + agk_log(s);
    if (lane == 0) y[t] = agk_fromf<T>(res);
  }
}

template <typename T> static gpuError_t logsumexp_go(const agk_env *env, const ag_k_logsumexp *a) {
  long long outer = a->outer, r = a->r, inner = a->inner;
  if (outer == 0 || inner == 0) return gpuSuccess;
  T *y = (T *)agk_ptr(a->out);
  const T *x = (const T *)agk_ptr(a->x);
  if (inner == 1 && r > R2_LONG)
    agk_launch(k_logsumexp<R2_TPR_LONG, T>, agk_blocks(outer, 1, R2_TPR_LONG, agk_wave(env, R2_TPR_LONG)), R2_TPR_LONG,
               0, env->stream, y, x, outer, r, inner);
  else if (inner == 1)
    agk_launch(k_logsumexp<R2_TPR, T>, agk_blocks(outer, 256 / R2_TPR, 256, agk_wave(env, 256)), 256, 0,
               env->stream, y, x, outer, r, inner);
  else
    agk_launch(k_logsumexp<1, T>, agk_blocks(outer * inner, 256, 256, agk_wave(env, 256)), 256, 0, env->stream, y,
               x, outer, r, inner);
  return gpuGetLastError();
}
gpuError_t agk_logsumexp(const agk_env *env, const ag_k_logsumexp *a) {
  AGK_DISPATCH_FLOAT(a->dtype, T, return logsumexp_go<T>(env, a));
  return gpuErrorNotSupported;
}

/* ---------------- vector norms ---------------- */
/* L1: sum |x|; INF: max |x|; L2: m * sqrt(sum (x/m)^2) with m = max |x|
 * (a second pass over the line), so squares neither overflow nor
 * underflow. NaN propagates (a flag across lanes). */
template <int TPR, typename T>
__global__ void k_norm(T *y, const T *x, long long outer, long long r, long long inner, int variant) {
  typedef agk_c<T> C;
  __shared__ C shc[R2_TPR_LONG / 32];
  __shared__ int shn[R2_TPR_LONG / 32];
  R2_LINES(TPR) {
    long long o = t / inner, i = t - o * inner;
    const T *p = x + o * r * inner + i;
    C m = 0, s = 0;
    int nan = 0;
    for (long long k = lane; k < r; k += TPR) {
      C a = agk_tof(p[k * inner]);
      a = a < 0 ? -a : a;
      if (a != a) nan = 1;
      else {
        s += a;
        m = a > m ? a : m;
      }
    }
    if (TPR > 1) {
      nan = r2_max<TPR>(nan, shn);
      m = r2_max<TPR>(m, shc);
      if (variant == AG_KV_NORM_L1) s = r2_sum<TPR>(s, shc);
    }
    C res = variant == AG_KV_NORM_L1 ? s : m;
    if (variant == AG_KV_NORM_L2 && m != 0 && m != (C)INFINITY) {
      C q = 0;
      for (long long k = lane; k < r; k += TPR) {
        C v = agk_tof(p[k * inner]) / m;
        q += v * v;
      }
      if (TPR > 1) q = r2_sum<TPR>(q, shc);
      res = m * agk_sqrt(q);
    }
    if (nan) res = (C)NAN;
    if (lane == 0) y[t] = agk_fromf<T>(res);
  }
}

template <typename T> static gpuError_t norm_go(const agk_env *env, const ag_k_norm *a) {
  long long outer = a->outer, r = a->r, inner = a->inner;
  if (outer == 0 || inner == 0) return gpuSuccess;
  if (a->variant != AG_KV_NORM_L1 && a->variant != AG_KV_NORM_L2 && a->variant != AG_KV_NORM_INF)
    return gpuErrorNotSupported;
  T *y = (T *)agk_ptr(a->out);
  const T *x = (const T *)agk_ptr(a->x);
  if (inner == 1 && r > R2_LONG)
    agk_launch(k_norm<R2_TPR_LONG, T>, agk_blocks(outer, 1, R2_TPR_LONG, agk_wave(env, R2_TPR_LONG)), R2_TPR_LONG, 0,
               env->stream, y, x, outer, r, inner, a->variant);
  else if (inner == 1)
    agk_launch(k_norm<R2_TPR, T>, agk_blocks(outer, 256 / R2_TPR, 256, agk_wave(env, 256)), 256, 0, env->stream,
               y, x, outer, r, inner, a->variant);
  else
    agk_launch(k_norm<1, T>, agk_blocks(outer * inner, 256, 256, agk_wave(env, 256)), 256, 0, env->stream, y, x,
               outer, r, inner, a->variant);
  return gpuGetLastError();
}
gpuError_t agk_norm(const agk_env *env, const ag_k_norm *a) {
  AGK_DISPATCH_FLOAT(a->dtype, T, return norm_go<T>(env, a));
  return gpuErrorNotSupported;
}

/* ---------------- one_hot ---------------- */
/* A thread per output element: 1 where the column is the row's index; an
 * index out of range zeroes the row and is reported once per row. */
template <typename I>
__global__ void k_one_hot(int64_t *y, const I *index, long long n, long long classes, ag_kernel_error *err) {
  long long stride = (long long)gridDim.x * blockDim.x;
  for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < n * classes; t += stride) {
    long long row = t / classes, col = t - row * classes, v = (long long)index[row];
    bool bad = v < 0 || v >= classes;
    if (bad && col == 0) agk_report(err, AG_K_ONE_HOT, v, classes);
    y[t] = !bad && v == col ? 1 : 0;
  }
}

gpuError_t agk_one_hot(const agk_env *env, const ag_k_one_hot *a) {
  long long n = a->n, classes = a->classes;
  if (a->out->dtype != AG_I64) return gpuErrorNotSupported;
  if (n == 0 || classes == 0) return gpuSuccess;
  int64_t *y = (int64_t *)agk_ptr(a->out);
  unsigned blocks = agk_blocks(n * classes, 256, 256, agk_wave(env, 256));
  if (a->index->dtype == AG_I64)
    agk_launch(k_one_hot<int64_t>, blocks, 256, 0, env->stream, y, (const int64_t *)agk_ptr(a->index), n, classes,
               env->err);
  else if (a->index->dtype == AG_I32)
    agk_launch(k_one_hot<int32_t>, blocks, 256, 0, env->stream, y, (const int32_t *)agk_ptr(a->index), n, classes,
               env->err);
  else
    return gpuErrorNotSupported;
  return gpuGetLastError();
}
