/* AG_K_PAD and AG_K_PAD_BWD over x [b, h, w] and the padded [b, ho, wo]
 * (top, left before; bottom, right from the shapes). A thread per output
 * element: the forward reads its source (reflect mirrors without repeating
 * the edge, pad < size) or the value; the backward sums the dy elements
 * that read its dx element, rows then columns ascending, in f32 (f64 for
 * f64): at most 3 x 3 terms, no atomics, the CPU's order. */
#include "common.cuh"

AGK_DEV long long pad_src(long long p, long long before, long long n, int reflect) {
  long long r = p - before;
  if (!reflect) return r >= 0 && r < n ? r : -1;
  if (r < 0) r = -r;
  if (r >= n) r = 2 * (n - 1) - r;
  return r;
}
/* The q-th (0..2) padded position reading source i, ascending (left
 * mirror, itself, right mirror), or -1: no arrays, so nothing lives in
 * local memory. */
AGK_DEV long long pad_pre(long long i, long long before, long long n, long long no, int reflect, int q) {
  if (q == 1) return before + i;
  if (!reflect) return -1;
  if (q == 0) return i >= 1 && i <= before ? before - i : -1;
  return i <= n - 2 && before + 2 * (n - 1) - i < no ? before + 2 * (n - 1) - i : -1;
}

template <typename T>
__global__ void k_pad(T *y, const T *x, long long B, long long H, long long W, long long Ho, long long Wo,
                      long long top, long long left, int reflect, agk_c<T> value) {
  long long stride = (long long)gridDim.x * blockDim.x;
  for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < B * Ho * Wo; t += stride) {
    long long c = t % Wo, r = (t / Wo) % Ho, b = t / (Wo * Ho);
    long long sy = pad_src(r, top, H, reflect), sx = pad_src(c, left, W, reflect);
    y[t] = sy >= 0 && sx >= 0 ? x[(b * H + sy) * W + sx] : agk_fromf<T>(value);
  }
}

template <typename T>
__global__ void k_pad_bwd(T *dx, const T *dy, long long B, long long H, long long W, long long Ho, long long Wo,
                          long long top, long long left, int reflect) {
  long long stride = (long long)gridDim.x * blockDim.x;
  for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < B * H * W; t += stride) {
    long long j = t % W, i = (t / W) % H, b = t / (W * H);
    agk_c<T> acc = 0;
    for (int q = 0; q < 3; q++) {
      long long y = pad_pre(i, top, H, Ho, reflect, q);
      if (y < 0) continue;
      for (int r = 0; r < 3; r++) {
        long long x = pad_pre(j, left, W, Wo, reflect, r);
        if (x >= 0) acc += agk_tof(dy[(b * Ho + y) * Wo + x]);
      }
    }
    dx[t] = agk_fromf<T>(acc);
  }
}

gpuError_t agk_pad(const agk_env *env, const ag_k_pad *a) {
  long long B = a->x->shape[0], H = a->x->shape[1], W = a->x->shape[2];
  long long Ho = a->out->shape[1], Wo = a->out->shape[2];
  if (B * Ho * Wo == 0) return gpuSuccess;
  int reflect = a->variant == AG_KV_PAD_REFLECT;
  unsigned g = agk_blocks(B * Ho * Wo, 256, 256, agk_wave(env, 256));
  AGK_DISPATCH_FLOAT(a->x->dtype, T,
                     agk_launch(k_pad<T>, g, 256, 0, env->stream, (T *)agk_ptr(a->out), (const T *)agk_ptr(a->x),
                                B, H, W, Ho, Wo, (long long)a->top, (long long)a->left, reflect,
                                (agk_c<T>)a->value));
  return gpuGetLastError();
}

gpuError_t agk_pad_bwd(const agk_env *env, const ag_k_pad_bwd *a) {
  long long B = a->dx->shape[0], H = a->dx->shape[1], W = a->dx->shape[2];
  long long Ho = a->dy->shape[1], Wo = a->dy->shape[2];
  if (B * H * W == 0) return gpuSuccess;
  int reflect = a->variant == AG_KV_PAD_REFLECT;
  unsigned g = agk_blocks(B * H * W, 256, 256, agk_wave(env, 256));
  AGK_DISPATCH_FLOAT(a->dx->dtype, T,
                     agk_launch(k_pad_bwd<T>, g, 256, 0, env->stream, (T *)agk_ptr(a->dx),
                                (const T *)agk_ptr(a->dy), B, H, W, Ho, Wo, (long long)a->top,
                                (long long)a->left, reflect));
  return gpuGetLastError();
}
