/* Multi-tensor kernels: AdamW, SGD, the AMP non-finite check with unscale,
 * and the sum of squares for gradient-norm clipping. One launch covers every
 * tensor of the call: the host writes a table of pointers, sizes and chunk
 * prefix sums into pinned staging, copies it to the device on the stream, and
 * each block finds its tensor by binary search over the prefix sums. */
#include "common.cuh"

typedef struct agk_opt_params {
  float lr, b1, b2, eps, wd, decay, step, rbc2, momentum, dampening;
  int nesterov, first_step;
} agk_opt_params;

AGK_DEV int mt_find(const agk_mt_entry *tab, int n, long long b) {
  int lo = 0, hi = n - 1;
  while (lo < hi) {
    int mid = (lo + hi + 1) / 2;
    if (tab[mid].chunk_start <= b) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

AGK_DEV float mt_load(const void *p, int dt, long long i) {
  switch (dt) {
    case AG_F16: return agk_tof(((const agk_f16 *)p)[i]);
    case AG_BF16: return agk_tof(((const agk_bf16 *)p)[i]);
    default: return ((const float *)p)[i];
  }
}
AGK_DEV void mt_store(void *p, int dt, long long i, float v) {
  switch (dt) {
    case AG_F16: ((agk_f16 *)p)[i] = agk_fromf<agk_f16>(v); break;
    case AG_BF16: ((agk_bf16 *)p)[i] = agk_fromf<agk_bf16>(v); break;
    default: ((float *)p)[i] = v;
  }
}

/* part (deterministic SUMSQ, else NULL): block b stores the sum of its
 * chunks, taken in grid-stride order, at part[b] instead of adding it to
 * *flag with an atomic; k_sumsq_final adds the partials in a fixed order. */
__global__ void k_multi(int op, const agk_mt_entry *tab, int n, long long nchunks, agk_opt_params prm,
                        const float *inv_scale, float *flag, float *part) {
  __shared__ float sh[32];
  float tot = 0.f;
  if ((op == AG_K_ADAMW || op == AG_K_SGD) && flag && *flag != 0.f) return;
  /* grid-stride over chunks: the grid is bounded (agk_blocks) */
  for (long long bi = blockIdx.x; bi < nchunks; bi += gridDim.x) {
    int k = mt_find(tab, n, bi);
    const agk_mt_entry e = tab[k];
    long long lo = (bi - e.chunk_start) * (long long)AGK_MT_CHUNK;
    long long hi = lo + AGK_MT_CHUNK < e.numel ? lo + AGK_MT_CHUNK : e.numel;
    float sc = inv_scale ? *inv_scale : 1.f;
    if (op == AG_K_ADAMW) {
      float *p = (float *)e.p[0], *m = (float *)e.p[2], *v = (float *)e.p[3];
      const float *g = (const float *)e.p[1];
      float step = prm.step, rbc2 = prm.rbc2, decay = prm.decay;
      for (long long i = lo + threadIdx.x; i < hi; i += blockDim.x) {
        float gi = g[i] * sc, mi = m[i], vi = v[i];
        mi = prm.b1 * mi + (1.f - prm.b1) * gi;
        vi = prm.b2 * vi + (1.f - prm.b2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        p[i] = p[i] * decay - step * mi / (sqrtf(vi) * rbc2 + prm.eps);
      }
    } else if (op == AG_K_SGD) {
      float *p = (float *)e.p[0], *buf = (float *)e.p[2];
      const float *g = (const float *)e.p[1];
      for (long long i = lo + threadIdx.x; i < hi; i += blockDim.x) {
        float pi = p[i], gi = g[i] * sc;
        if (prm.wd != 0.f) gi += prm.wd * pi;
        if (buf && prm.momentum != 0.f) {
          float b = prm.first_step ? gi : prm.momentum * buf[i] + (1.f - prm.dampening) * gi;
          buf[i] = b;
          gi = prm.nesterov ? gi + prm.momentum * b : b;
        }
        p[i] = pi - prm.lr * gi;
      }
    } else if (op == AG_K_NONFINITE_CHECK) {
      bool bad = false;
      for (long long i = lo + threadIdx.x; i < hi; i += blockDim.x) {
        float x = mt_load(e.p[0], e.dtype, i);
        bad |= !isfinite(x);
        if (inv_scale) mt_store(e.p[0], e.dtype, i, x * sc);
      }
      if (bad) *flag = 1.f;
    } else { /* SUMSQ */
      float s = 0.f;
      for (long long i = lo + threadIdx.x; i < hi; i += blockDim.x) {
        float x = mt_load(e.p[0], e.dtype, i);
        s += x * x;
      }
      s = agk_block_sum(s, sh);
      if (part) tot += s;
      else if (threadIdx.x == 0 && s != 0.f) atomicAdd(flag, s);
    }
  }
  if (part && threadIdx.x == 0) part[blockIdx.x] = tot;
}
/* *out = the sum of part[0 .. n): one block, fixed order. */
__global__ void k_sumsq_final(float *out, const float *part, long long n) {
  __shared__ float sh[32];
  float s = 0.f;
  for (long long i = threadIdx.x; i < n; i += blockDim.x) s += part[i];
  s = agk_block_sum(s, sh);
  if (threadIdx.x == 0) *out = s;
}

/* Group k of a multi list as a table entry: its tensors p0..p3 (NULL:
 * absent), the numel and dtype of the first. */
static void mt_add(agk_mt_entry *tab, int *n, long long *chunks, const ag_kmulti_entry &first, char *p0, char *p1,
                   char *p2, char *p3) {
  agk_mt_entry e;
  memset(&e, 0, sizeof e);
  e.p[0] = p0;
  e.p[1] = p1;
  e.p[2] = p2;
  e.p[3] = p3;
  e.numel = first.numel;
  e.dtype = first.dtype;
  if (e.numel <= 0 || !e.p[0]) return;
  e.chunk_start = *chunks;
  *chunks += (e.numel + AGK_MT_CHUNK - 1) / AGK_MT_CHUNK;
  tab[(*n)++] = e;
}

/* One launch over the table of n entries (written to env->table_host) for
 * op: inv the scale of the gradients (NULL: 1), flag the op's f32 scalar
 * (found_inf; SUMSQ: the sum, zeroed first). */
static gpuError_t mt_run(const agk_env *env, const ag_kernel_call *c, ag_kop op, int n, long long chunks,
                         const agk_opt_params &prm, const float *inv, float *flag) {
  gpuError_t err;
  if (op == AG_K_SUMSQ && (err = gpuMemsetAsync(flag, 0, 4, env->stream)) != gpuSuccess) return err;
  if (n == 0) return gpuSuccess;
  if ((err = gpuMemcpyAsync(env->table_dev, env->table_host, n * sizeof(agk_mt_entry), gpuMemcpyHostToDevice,
                            env->stream)) != gpuSuccess)
    return err;
  unsigned g = agk_blocks(chunks, 1, 256, agk_wave(env, 256));
  /* deterministic SUMSQ: per-block partials in the scratch (g <= agk_wave
   * floats, far below its size) */
  float *part = op == AG_K_SUMSQ && (c->flags & AG_KF_DETERMINISTIC) ? (float *)env->scratch : (float *)0;
  agk_launch(k_multi, g, 256, 0, env->stream, (int)op, (const agk_mt_entry *)env->table_dev, n, chunks, prm, inv, flag,
             part);
  if (part) agk_launch(k_sumsq_final, 1, 256, 0, env->stream, flag, (const float *)part, (long long)g);
  return gpuGetLastError();
}

gpuError_t agk_adamw(const agk_env *env, const ag_k_adamw *a) {
  const int groups = AGK_MULTI_GROUPS(a);
  if (groups == 0) return gpuSuccess;
  agk_mt_entry *tab = (agk_mt_entry *)env->table_host;
  int n = 0;
  long long chunks = 0;
  for (int k = 0; k < groups; k++)
    mt_add(tab, &n, &chunks, AGK_MULTI(a, k, param), AGK_MULTI_PTR(a, k, param), AGK_MULTI_PTR(a, k, grad),
           AGK_MULTI_PTR(a, k, exp_avg), AGK_MULTI_PTR(a, k, exp_avg_sq));
  agk_opt_params prm;
  memset(&prm, 0, sizeof prm);
  prm.lr = (float)a->lr; prm.b1 = (float)a->beta1; prm.b2 = (float)a->beta2; prm.eps = (float)a->eps;
  /* folded in f64 on the host exactly as the CPU reference does */
  prm.decay = (float)(1.0 - a->lr * a->weight_decay);
  prm.step = (float)(a->lr / a->bias_correction1);
  prm.rbc2 = (float)(1.0 / sqrt(a->bias_correction2));
  return mt_run(env, a->call, AG_K_ADAMW, n, chunks, prm, (const float *)agk_optr(a->inv_scale),
                (float *)agk_optr(a->found_inf));
}

gpuError_t agk_sgd(const agk_env *env, const ag_k_sgd *a) {
  const int groups = AGK_MULTI_GROUPS(a);
  if (groups == 0) return gpuSuccess;
  agk_mt_entry *tab = (agk_mt_entry *)env->table_host;
  int n = 0;
  long long chunks = 0;
  for (int k = 0; k < groups; k++)
    mt_add(tab, &n, &chunks, AGK_MULTI(a, k, param), AGK_MULTI_PTR(a, k, param), AGK_MULTI_PTR(a, k, grad),
           AGK_MULTI_PTR(a, k, momentum_buffer), (char *)0);
  agk_opt_params prm;
  memset(&prm, 0, sizeof prm);
  prm.lr = (float)a->lr; prm.momentum = (float)a->momentum; prm.dampening = (float)a->dampening;
  prm.wd = (float)a->weight_decay; prm.nesterov = a->nesterov != 0; prm.first_step = a->first_step != 0;
  return mt_run(env, a->call, AG_K_SGD, n, chunks, prm, (const float *)agk_optr(a->inv_scale),
                (float *)agk_optr(a->found_inf));
}

gpuError_t agk_nonfinite_check(const agk_env *env, const ag_k_nonfinite_check *a) {
  const int groups = AGK_MULTI_GROUPS(a);
  if (groups == 0) return gpuSuccess;
  agk_mt_entry *tab = (agk_mt_entry *)env->table_host;
  int n = 0;
  long long chunks = 0;
  for (int k = 0; k < groups; k++)
    mt_add(tab, &n, &chunks, AGK_MULTI(a, k, x), AGK_MULTI_PTR(a, k, x), (char *)0, (char *)0, (char *)0);
  agk_opt_params prm;
  memset(&prm, 0, sizeof prm);
  return mt_run(env, a->call, AG_K_NONFINITE_CHECK, n, chunks, prm, (const float *)agk_optr(a->inv_scale),
                (float *)agk_ptr(a->found_inf));
}

gpuError_t agk_sumsq(const agk_env *env, const ag_k_sumsq *a) {
  const int groups = AGK_MULTI_GROUPS(a);
  if (groups == 0) return a->out->base ? gpuMemsetAsync(agk_ptr(a->out), 0, 4, env->stream) : gpuSuccess;
  agk_mt_entry *tab = (agk_mt_entry *)env->table_host;
  int n = 0;
  long long chunks = 0;
  for (int k = 0; k < groups; k++)
    mt_add(tab, &n, &chunks, AGK_MULTI(a, k, x), AGK_MULTI_PTR(a, k, x), (char *)0, (char *)0, (char *)0);
  agk_opt_params prm;
  memset(&prm, 0, sizeof prm);
  return mt_run(env, a->call, AG_K_SUMSQ, n, chunks, prm, (const float *)0, (float *)agk_ptr(a->out));
}
