/* Portable numerics (docs/numerics.md): the kernels of GPU_KOPS_PORTABLE_OWN,
 * bit for bit the CPU backend's on every device. This file is compiled
 * without contraction and with IEEE division, square root and subnormals
 * (nvcc -fmad=false -prec-div=true -prec-sqrt=true -ftz=false; hipcc
 * -ffp-contract=off -fno-fast-math; gpuemu -ffp-contract=off), so `/` and
 * sqrtf are the correctly rounded ones pmath.h's AGP_NATIVE_DIVSQRT asks
 * for and every `a * b + c` is two roundings.
 *
 * Every float sum is the canonical sum S: blocks of 256 terms, each summed
 * by the fixed tree of docs/numerics.md in a 256-thread block's shared
 * memory (p_tree), the block sums summed again the same way until one value
 * remains (p_sum, p_sum_more). Nothing depends on the warp width, the grid
 * or the order blocks run in; no atomics. Integer dtypes and the ops exact
 * by nature go to the default kernels. */
#include <stdio.h>

#include "common.cuh"

#define AGP_NATIVE_DIVSQRT 1
#include "anygrad/pmath.h"

/* The threads of every S block, and the tree's width (the spec's B). */
#define P_B 256
/* Block sums of one row kept in shared memory; rows with more (over 256 *
 * P_SPART terms) keep them in the stream's scratch. */
#define P_SPART 1024

typedef long long ll;

/* ---- the canonical sum ---- */

/* The tree of one block of 256 values, v the calling thread's (+0 past the
 * block's end): t[i] = t[i] + t[i + s] for s = 128 .. 1. Every thread of
 * the block calls it and gets t[0]; t is reusable on return. */
AGK_DEV float p_tree(float *t, float v) {
  const unsigned i = threadIdx.x;
  t[i] = v;
  __syncthreads();
  for (unsigned s = P_B / 2; s > 0; s >>= 1) {
    if (i < s) t[i] = t[i] + t[i + s];
    __syncthreads();
  }
  const float r = t[0];
  __syncthreads();
  return r;
}

/* S continued from m >= 1 block sums in buf[0 .. m): the sums of blocks of
 * 256 of them, in place, until one is left (docs/numerics.md step 3). */
AGK_DEV float p_sum_more(float *t, float *buf, ll m) {
  while (m > 1) {
    const ll nm = (m + P_B - 1) / P_B;
    for (ll c = 0; c < nm; c++) {
      const ll j = c * P_B + threadIdx.x;
      const float p = p_tree(t, j < m ? buf[j] : 0.f);
      if (threadIdx.x == 0) buf[c] = p;
    }
    __syncthreads();
    m = nm;
  }
  const float r = buf[0];
  __syncthreads();
  return r;
}

/* S(term(0) .. term(n - 1)) by one block; buf holds ceil(n / 256) floats
 * (p_buf) when n > 256. */
template <typename F> AGK_DEV float p_sum(float *t, float *buf, ll n, const F &term) {
  if (n <= P_B) return p_tree(t, (ll)threadIdx.x < n ? term((ll)threadIdx.x) : 0.f);
  const ll m = (n + P_B - 1) / P_B;
  for (ll c = 0; c < m; c++) {
    const ll j = c * P_B + threadIdx.x;
    const float p = p_tree(t, j < n ? term(j) : 0.f);
    if (threadIdx.x == 0) buf[c] = p;
  }
  __syncthreads();
  return p_sum_more(t, buf, m);
}

/* The block-sum buffer of a row of n terms: shared, or this block's part of
 * the scratch (the launch bounds the grid: p_grid). */
AGK_DEV float *p_buf(float *sh, float *scratch, ll n) {
  const ll m = (n + P_B - 1) / P_B;
  return m <= P_SPART ? sh : scratch + (ll)blockIdx.x * m;
}

/* Max of the non-NaN values the threads hold (-inf if none): exact, so any
 * tree will do. */
AGK_DEV float p_max(float *t, float v) {
  const unsigned i = threadIdx.x;
  t[i] = v;
  __syncthreads();
  for (unsigned s = P_B / 2; s > 0; s >>= 1) {
    if (i < s && t[i + s] > t[i]) t[i] = t[i + s];
    __syncthreads();
  }
  const float r = t[0];
  __syncthreads();
  return r;
}

/* Blocks of a one-block-per-row launch over `rows` rows of n terms each:
 * bounded by what a 1-D grid takes and, when the rows' block sums live in
 * the scratch, by how many rows' sums it holds (0: none fits). */
static unsigned p_grid(const agk_env *env, ll rows, ll n) {
  const ll m = (n + P_B - 1) / P_B;
  ll cap = agk_wave(env, P_B);
  if (m > P_SPART) {
    const ll fit = (ll)(env->scratch_bytes / sizeof(float)) / m;
    if (fit < 1) return 0;
    if (fit < cap) cap = fit;
  }
  return agk_blocks(rows, 1, P_B, cap);
}

/* ---- storage ---- */
AGK_DEV float p_ld(const float *p, ll i) { return p[i]; }
AGK_DEV float p_ld(const agk_f16 *p, ll i) { return agk_tof(p[i]); }
AGK_DEV float p_ld(const agk_bf16 *p, ll i) { return agk_tof(p[i]); }
template <typename T> AGK_DEV void p_st(T *p, ll i, float v) { p[i] = agk_fromf<T>(v); }

/* ---- elementwise: the op table with pmath ---- */

#define P_EW_MAXOPS 3
typedef struct p_ew {
  int ndim, nops;
  ll numel;
  ll shape[AG_MAX_DIMS];
  ll st[P_EW_MAXOPS][AG_MAX_DIMS];
  char *p[P_EW_MAXOPS];
} p_ew;

/* Collapse the operands (the first gives the shape): size-1 dims dropped,
 * dims contiguous in every operand merged. */
static void p_ew_build(const ag_koperand *const *ops, int nops, p_ew *d) {
  const ag_koperand *o0 = ops[0];
  int nd = 0;
  ll numel = 1;
  ll sh[AG_MAX_DIMS], st[P_EW_MAXOPS][AG_MAX_DIMS];
  for (int k = 0; k < nops; k++) d->p[k] = agk_ptr(ops[k]);
  for (int i = o0->ndim - 1; i >= 0; i--) {
    ll n = o0->shape[i];
    numel *= n;
    if (n == 1) continue;
    bool merge = nd > 0;
    for (int k = 0; k < nops && merge; k++) merge = ops[k]->strides[i] == st[k][nd - 1] * sh[nd - 1];
    if (merge) {
      sh[nd - 1] *= n;
    } else {
      sh[nd] = n;
      for (int k = 0; k < nops; k++) st[k][nd] = ops[k]->strides[i];
      nd++;
    }
  }
  d->ndim = nd;
  d->nops = nops;
  d->numel = numel;
  for (int i = 0; i < nd; i++) {
    d->shape[i] = sh[nd - 1 - i];
    for (int k = 0; k < nops; k++) d->st[k][i] = st[k][nd - 1 - i];
  }
}

AGK_DEV void p_ew_offsets(const p_ew &d, ll i, ll *off) {
  for (int k = 0; k < P_EW_MAXOPS; k++) off[k] = 0;
  ll r = i;
  for (int dim = d.ndim - 1; dim >= 0; dim--) {
    ll n = d.shape[dim], q = r / n, x = r - q * n;
    r = q;
    for (int k = 0; k < P_EW_MAXOPS; k++)
      if (k < d.nops) off[k] += x * d.st[k][dim];
  }
}

static unsigned p_ew_grid(const agk_env *env, ll n) { return agk_blocks(n, P_B, P_B, agk_wave(env, P_B)); }

/* The op table's vocabulary on pmath (docs/numerics.md "Elementwise math") */
#define C float
#define E_K(c) ((float)(c))
#define E_EXP(v) agp_exp((float)(v))
#define E_LOG(v) agp_log((float)(v))
#define E_SQRT(v) agp_sqrt((float)(v))
#define E_RSQRT(v) agp_rsqrt((float)(v))
#define E_TANH(v) agp_tanh((float)(v))
#define E_SIGMOID(v) agp_sigmoid((float)(v))
#define E_ERF(v) agp_erf((float)(v))
#define E_SIN(v) agp_sin((float)(v))
#define E_COS(v) agp_cos((float)(v))
#define E_LOG1P(v) agp_log1p((float)(v))
#define E_EXPM1(v) agp_expm1((float)(v))
#define E_FLOOR(v) agp_floor((float)(v))
#define E_CEIL(v) agp_ceil((float)(v))
#define E_RINT(v) agp_rint((float)(v))
#define E_ABS(v) agp_abs((float)(v))
#define E_POW(u, v) agp_pow((float)(u), (float)(v))
#define E_ATAN2(u, v) agp_atan2((float)(u), (float)(v))
#define E_FMOD(u, v) agp_fmod((float)(u), (float)(v))
#define E_DIV(u, v) agp_div((float)(u), (float)(v))
#define P_SAVE_NG(v)
#define P_SAVE_N(v)
#define P_SAVE_X(v) const float x = v;
#define P_SAVE_Y(v) const float y = v;
#define P_UNARY_CASE(ID, name, api, fwd, ...) \
  case AG_U_##ID: return (fwd);
#define P_BINARY_CASE(ID, name, api, fwd, ...) \
  case AG_B_##ID: return (fwd);
#define P_BWD_CASE(ID, name, api, fwd, save, bwd, ...)     \
  AG_OPT_IF(AG_OPT_HAS_BWD_##save)(case AG_B_##ID##_BWD: { \
    const float g = a;                                     \
    P_SAVE_##save(b)(void) g;                              \
    return (bwd);                                          \
  })
#define P_PART_CASE(ID, name, api, fwd, kind, grad, da, db, ...) \
  AG_OPT_IF(AG_OPT_PART_##grad)(case AG_B_##ID##_DA: return (da); case AG_B_##ID##_DB: return (db);)

AGK_DEV float p_unary_f(int op, float x, float s0, float s1) {
  (void)s0;
  (void)s1;
  switch (op) {
    AG_UNARY_OPS(P_UNARY_CASE)
  }
  return NAN;
}
AGK_DEV float p_binary_f(int op, float a, float b, float s0, float s1) {
  (void)s0;
  (void)s1;
  switch (op) {
    AG_BINARY_OPS(P_BINARY_CASE)
    AG_UNARY_OPS(P_BWD_CASE)
    AG_BINARY_OPS(P_PART_CASE)
  }
  return NAN;
}
#undef C

template <typename T> __global__ void k_p_unary(p_ew d, int op, float s0, float s1) {
  const ll stride = (ll)gridDim.x * blockDim.x;
  for (ll i = (ll)blockIdx.x * blockDim.x + threadIdx.x; i < d.numel; i += stride) {
    ll off[P_EW_MAXOPS];
    p_ew_offsets(d, i, off);
    p_st((T *)d.p[0], off[0], p_unary_f(op, p_ld((const T *)d.p[1], off[1]), s0, s1));
  }
}
template <typename T> __global__ void k_p_binary(p_ew d, int op, float s0, float s1) {
  const ll stride = (ll)gridDim.x * blockDim.x;
  for (ll i = (ll)blockIdx.x * blockDim.x + threadIdx.x; i < d.numel; i += stride) {
    ll off[P_EW_MAXOPS];
    p_ew_offsets(d, i, off);
    p_st((T *)d.p[0], off[0],
         p_binary_f(op, p_ld((const T *)d.p[1], off[1]), p_ld((const T *)d.p[2], off[2]), s0, s1));
  }
}

static bool p_float(ag_dtype dt) { return dt == AG_F32 || dt == AG_F16 || dt == AG_BF16; }

#define P_DISPATCH(dt, T, ...)                                 \
  switch (dt) {                                                \
    case AG_F32: { typedef float T; __VA_ARGS__; break; }      \
    case AG_F16: { typedef agk_f16 T; __VA_ARGS__; break; }    \
    case AG_BF16: { typedef agk_bf16 T; __VA_ARGS__; break; }  \
    default: return gpuErrorNotSupported;                      \
  }

gpuError_t agkp_unary(const agk_env *env, const ag_k_unary *a) {
  const ag_dtype to = a->y->dtype, ti = a->x->dtype;
  /* copies and casts, f64 included: one rounding (exact by nature) */
  if (a->variant == AG_U_COPY) return agk_unary(env, a);
  if (to == AG_F64 || ti == AG_F64) return gpuErrorNotSupported;
  /* the integer rules: exact */
  if (to != ti || !p_float(to)) return agk_unary(env, a);
  const ag_koperand *ops[2] = {a->y, a->x};
  p_ew d;
  p_ew_build(ops, 2, &d);
  if (d.numel == 0) return gpuSuccess;
  P_DISPATCH(to, T,
             agk_launch(k_p_unary<T>, p_ew_grid(env, d.numel), P_B, 0, env->stream, d, (int)a->variant,
                        (float)a->s0, (float)a->s1));
  return gpuGetLastError();
}

gpuError_t agkp_binary(const agk_env *env, const ag_k_binary *a) {
  const ag_binary_info *bi = ag_binary_info_of(a->variant);
  const ag_dtype dt = a->out->dtype;
  if (dt == AG_F64 || a->a->dtype == AG_F64 || a->b->dtype == AG_F64) return gpuErrorNotSupported;
  /* comparisons and the integer rules: exact */
  if ((bi && bi->compare) || !p_float(dt)) return agk_binary(env, a);
  const ag_koperand *ops[3] = {a->out, a->a, a->b};
  p_ew d;
  p_ew_build(ops, 3, &d);
  if (d.numel == 0) return gpuSuccess;
  P_DISPATCH(dt, T,
             agk_launch(k_p_binary<T>, p_ew_grid(env, d.numel), P_B, 0, env->stream, d, (int)a->variant,
                        (float)a->s0, (float)a->s1));
  return gpuGetLastError();
}

/* ---- REDUCE SUM: out[o, i] = S(x[o, 0 .. r, i]) * scale_f ---- */

/* First level: block (c, row) sums chunk c of row `row0 + row`; with one
 * chunk per row that is S and goes to out, else to part[row * nch + c]. */
template <typename T>
__global__ void k_p_sum_lvl1(const T *x, ll row0, ll rows, ll r, ll inner, ll nch, float *part, T *out,
                             float scale, int scaled) {
  __shared__ float t[P_B];
  for (ll row = blockIdx.y; row < rows; row += gridDim.y) {
    const ll gr = row0 + row, o = gr / inner, i = gr - o * inner;
    const T *xr = x + o * r * inner + i;
    for (ll c = blockIdx.x; c < nch; c += gridDim.x) {
      const ll j = c * P_B + threadIdx.x;
      const float v = p_tree(t, j < r ? p_ld(xr, j * inner) : 0.f);
      if (threadIdx.x == 0) {
        if (nch == 1) p_st(out, gr, scaled ? v * scale : v);
        else part[row * nch + c] = v;
      }
    }
  }
}
/* The rest of S from a row's nch > 1 block sums (in place in part). */
template <typename T>
__global__ void k_p_sum_more(float *part, ll row0, ll rows, ll nch, T *out, float scale, int scaled) {
  __shared__ float t[P_B];
  for (ll row = blockIdx.x; row < rows; row += gridDim.x) {
    const float v = p_sum_more(t, part + row * nch, nch);
    if (threadIdx.x == 0) p_st(out, row0 + row, scaled ? v * scale : v);
  }
}

template <typename T> static gpuError_t p_reduce_sum(const agk_env *env, const ag_k_reduce *a) {
  const ll outer = a->outer, r = a->r, inner = a->inner, rows = outer * inner;
  if (rows == 0) return gpuSuccess;
  const ll nch = r > 0 ? (r + P_B - 1) / P_B : 1;
  const int scaled = a->scale != 1.0;
  const float scale = (float)a->scale;
  const T *x = (const T *)agk_ptr(a->x);
  T *out = (T *)agk_ptr(a->out);
  float *part = (float *)env->scratch;
  /* rows per pass: as many as the scratch holds the block sums of */
  ll batch = nch == 1 ? rows : (ll)(env->scratch_bytes / sizeof(float)) / nch;
  if (batch < 1) return gpuErrorNotSupported;
  if (batch > rows) batch = rows;
  for (ll row0 = 0; row0 < rows; row0 += batch) {
    const ll nr = rows - row0 < batch ? rows - row0 : batch;
    dim3 grid(agk_blocks(nch, 1, P_B, 65535), (unsigned)(nr < 65535 ? nr : 65535), 1);
    agk_launch(k_p_sum_lvl1<T>, grid, P_B, 0, env->stream, x, row0, nr, r, inner, nch, part, out, scale, scaled);
    if (nch > 1)
      agk_launch(k_p_sum_more<T>, agk_blocks(nr, 1, P_B, agk_wave(env, P_B)), P_B, 0, env->stream, part, row0, nr,
                 nch, out, scale, scaled);
    gpuError_t e = gpuGetLastError();
    if (e != gpuSuccess) return e;
  }
  return gpuSuccess;
}

/* REDUCE MAX, MIN (float, f64): the CPU's sequential rule, so also the sign of a
 * zero maximum: the first of the row's values that no later one beats (v >
 * best, or v < best for MIN), a NaN once met stays. Each thread scans its
 * elements in order; the tree keeps, of two, the NaN, else the better, else
 * (equal values: -0 and +0) the earlier index. */
template <typename A> AGK_DEV bool p_mm_wins(int is_max, A v, ll i, A b, ll bi) {
  if (b != b) return false;
  if (v != v) return true;
  if (is_max ? v > b : v < b) return true;
  return v == b && i < bi;
}
/* f32 compute for f32, f16, bf16; f64 for f64 (exact either way) */
template <typename T>
__global__ void k_p_minmax(const T *x, ll rows, ll r, ll inner, T *out, int is_max) {
  typedef agk_c<T> A;
  __shared__ A tv[P_B];
  __shared__ ll ti[P_B];
  const unsigned tid = threadIdx.x;
  for (ll row = blockIdx.x; row < rows; row += gridDim.x) {
    const ll o = row / inner, i = row - o * inner;
    const T *xr = x + o * r * inner + i;
    A best = is_max ? (A)-INFINITY : (A)INFINITY;
    ll bi = -1;
    for (ll j = tid; j < r; j += P_B) {
      const A v = agk_tof(xr[j * inner]);
      if (bi < 0 || (best == best && (v != v || (is_max ? v > best : v < best)))) {
        best = v;
        bi = j;
      }
    }
    if (bi < 0) bi = 0x7fffffffffffffffLL; /* no element: loses every tie */
    tv[tid] = best;
    ti[tid] = bi;
    __syncthreads();
    for (unsigned s = P_B / 2; s > 0; s >>= 1) {
      if (tid < s && p_mm_wins(is_max, tv[tid + s], ti[tid + s], tv[tid], ti[tid])) {
        tv[tid] = tv[tid + s];
        ti[tid] = ti[tid + s];
      }
      __syncthreads();
    }
    if (tid == 0) out[row] = agk_fromf<T>(tv[0]);
    __syncthreads();
  }
}

gpuError_t agkp_reduce(const agk_env *env, const ag_k_reduce *a) {
  const ag_dtype dt = a->x->dtype;
  if (a->variant == AG_R_ARGMAX || !(p_float(dt) || dt == AG_F64)) return agk_reduce(env, a); /* exact */
  if (a->out->dtype != dt) return gpuErrorNotSupported;
  if (a->variant == AG_R_MAX || a->variant == AG_R_MIN) {
    const ll rows = a->outer * a->inner;
    if (rows == 0) return gpuSuccess;
    AGK_DISPATCH_FLOAT(dt, T,
               agk_launch(k_p_minmax<T>, agk_blocks(rows, 1, P_B, agk_wave(env, P_B)), P_B, 0, env->stream,
                          (const T *)agk_ptr(a->x), rows, (ll)a->r, (ll)a->inner, (T *)agk_ptr(a->out),
                          (int)(a->variant == AG_R_MAX)));
    return gpuGetLastError();
  }
  if (a->variant != AG_R_SUM || dt == AG_F64) return gpuErrorNotSupported;
  P_DISPATCH(dt, T, return p_reduce_sum<T>(env, a));
  return gpuErrorNotSupported;
}

/* ---- MATMUL: sequential k per output, 16x16 tiles through shared memory ---- */
#define P_TILE 16
template <typename T>
__global__ void k_p_matmul(T *c, const T *a, const T *b, ll batch, ll M, ll N, ll K, ll sab, ll sam, ll sak,
                           ll sbb, ll sbk, ll sbn, float alpha, float beta, int use_alpha, int use_beta) {
  __shared__ float As[P_TILE][P_TILE + 1];
  __shared__ float Bs[P_TILE][P_TILE + 1];
  const int tx = threadIdx.x % P_TILE, ty = threadIdx.x / P_TILE;
  const ll tiles_n = (N + P_TILE - 1) / P_TILE, tiles_m = (M + P_TILE - 1) / P_TILE;
  const ll tiles = tiles_n * tiles_m * batch;
  for (ll tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const ll bt = tile / (tiles_n * tiles_m), rem = tile - bt * tiles_n * tiles_m;
    const ll m0 = rem / tiles_n * P_TILE, n0 = rem % tiles_n * P_TILE;
    const ll m = m0 + ty, n = n0 + tx;
    const T *ab = a + bt * sab, *bb = b + bt * sbb;
    float acc = 0.f;
    for (ll k0 = 0; k0 < K; k0 += P_TILE) {
      As[ty][tx] = m < M && k0 + tx < K ? p_ld(ab, m * sam + (k0 + tx) * sak) : 0.f;
      Bs[ty][tx] = n < N && k0 + ty < K ? p_ld(bb, (k0 + ty) * sbk + n * sbn) : 0.f;
      __syncthreads();
      const int kn = K - k0 < P_TILE ? (int)(K - k0) : P_TILE;
      for (int kk = 0; kk < kn; kk++) acc = acc + As[ty][kk] * Bs[kk][tx];
      __syncthreads();
    }
    if (m < M && n < N) {
      float rv = acc;
      T *cp = c + bt * M * N + m * N + n;
      if (use_alpha) rv = alpha * rv;
      if (use_beta) rv = rv + beta * p_ld(cp, 0);
      p_st(cp, 0, rv);
    }
  }
}

gpuError_t agkp_matmul(const agk_env *env, const ag_k_matmul *a) {
  const ag_koperand *A = a->a, *B = a->b, *Cc = a->c;
  const int na = A->ndim, nb = B->ndim, nc = Cc->ndim;
  const ll M = Cc->shape[nc - 2], N = Cc->shape[nc - 1], K = A->shape[na - 1];
  const ll batch = nc > 2 ? Cc->shape[0] : 1;
  if (M == 0 || N == 0 || batch == 0) return gpuSuccess;
  const ll sab = na > 2 ? A->strides[na - 3] : 0, sbb = nb > 2 ? B->strides[nb - 3] : 0;
  const ll tiles = ((M + P_TILE - 1) / P_TILE) * ((N + P_TILE - 1) / P_TILE) * batch;
  P_DISPATCH(a->dtype, T,
             agk_launch(k_p_matmul<T>, agk_blocks(tiles, 1, P_B, agk_wave(env, P_B)), P_TILE * P_TILE, 0,
                        env->stream, (T *)agk_ptr(Cc), (const T *)agk_ptr(A), (const T *)agk_ptr(B), batch, M, N, K,
                        sab, A->strides[na - 2], A->strides[na - 1], sbb, B->strides[nb - 2], B->strides[nb - 1],
                        (float)a->alpha, (float)a->beta, (int)(a->alpha != 1.0), (int)(a->beta != 0.0)));
  return gpuGetLastError();
}

/* ---- row ops: one 256-thread block per row ---- */

/* x viewed as [outer, r, inner]: row (o, i), term j at (o * r + j) * inner + i */
typedef struct p_rows {
  ll rows, n, inner;
} p_rows;
AGK_DEV ll p_base(const p_rows &g, ll row) {
  const ll o = row / g.inner, i = row - o * g.inner;
  return o * g.n * g.inner + i;
}

/* The row's max of non-NaN values (-inf if none) */
template <typename T> AGK_DEV float p_row_max(float *t, const T *x, ll base, ll n, ll step) {
  float m = -INFINITY;
  for (ll j = threadIdx.x; j < n; j += P_B) {
    const float v = p_ld(x, base + j * step);
    if (v > m) m = v;
  }
  return p_max(t, m);
}
template <typename T> struct p_exp_term {
  const T *x;
  ll base, step;
  float mx;
  AGK_DEV float operator()(ll j) const { return agp_exp(p_ld(x, base + j * step) - mx); }
};

template <typename T> __global__ void k_p_softmax(T *y, const T *x, p_rows g, int log_softmax, float *scratch) {
  __shared__ float t[P_B];
  __shared__ float sp[P_SPART];
  float *buf = p_buf(sp, scratch, g.n);
  for (ll row = blockIdx.x; row < g.rows; row += gridDim.x) {
    const ll base = row * g.n;
    const float mx = p_row_max(t, x, base, g.n, 1);
    p_exp_term<T> e;
    e.x = x;
    e.base = base;
    e.step = 1;
    e.mx = mx;
    const float s = p_sum(t, buf, g.n, e);
    if (log_softmax) {
      const float ls = agp_log(s);
      for (ll j = threadIdx.x; j < g.n; j += P_B) p_st(y, base + j, (p_ld(x, base + j) - mx) - ls);
    } else {
      for (ll j = threadIdx.x; j < g.n; j += P_B) p_st(y, base + j, agp_div(agp_exp(p_ld(x, base + j) - mx), s));
    }
  }
}

template <typename T> struct p_dot_term {
  const T *a, *b;
  ll base;
  AGK_DEV float operator()(ll j) const { return p_ld(a, base + j) * p_ld(b, base + j); }
};
template <typename T> struct p_ld_term {
  const T *a;
  ll base;
  AGK_DEV float operator()(ll j) const { return p_ld(a, base + j); }
};

template <typename T>
__global__ void k_p_softmax_bwd(T *dx, const T *dy, const T *y, p_rows g, int log_softmax, float *scratch) {
  __shared__ float t[P_B];
  __shared__ float sp[P_SPART];
  float *buf = p_buf(sp, scratch, g.n);
  for (ll row = blockIdx.x; row < g.rows; row += gridDim.x) {
    const ll base = row * g.n;
    if (log_softmax) {
      p_ld_term<T> f;
      f.a = dy;
      f.base = base;
      const float sg = p_sum(t, buf, g.n, f);
      for (ll j = threadIdx.x; j < g.n; j += P_B)
        p_st(dx, base + j, p_ld(dy, base + j) - agp_exp(p_ld(y, base + j)) * sg);
    } else {
      p_dot_term<T> f;
      f.a = dy;
      f.b = y;
      f.base = base;
      const float dot = p_sum(t, buf, g.n, f);
      for (ll j = threadIdx.x; j < g.n; j += P_B)
        p_st(dx, base + j, p_ld(y, base + j) * (p_ld(dy, base + j) - dot));
    }
  }
}

template <typename T> static gpuError_t p_softmax_go(const agk_env *env, const ag_k_softmax *a) {
  p_rows g;
  g.rows = a->rows;
  g.n = a->cols;
  g.inner = 1;
  if (g.rows == 0 || g.n == 0) return gpuSuccess;
  const unsigned grid = p_grid(env, g.rows, g.n);
  if (!grid) return gpuErrorNotSupported;
  agk_launch(k_p_softmax<T>, grid, P_B, 0, env->stream, (T *)agk_ptr(a->y), (const T *)agk_ptr(a->x), g,
             (int)(a->variant == AG_KV_LOG_SOFTMAX), (float *)env->scratch);
  return gpuGetLastError();
}
gpuError_t agkp_softmax(const agk_env *env, const ag_k_softmax *a) {
  P_DISPATCH(a->dtype, T, return p_softmax_go<T>(env, a));
  return gpuErrorNotSupported;
}
template <typename T> static gpuError_t p_softmax_bwd_go(const agk_env *env, const ag_k_softmax_bwd *a) {
  p_rows g;
  g.rows = a->rows;
  g.n = a->cols;
  g.inner = 1;
  if (g.rows == 0 || g.n == 0) return gpuSuccess;
  const unsigned grid = p_grid(env, g.rows, g.n);
  if (!grid) return gpuErrorNotSupported;
  agk_launch(k_p_softmax_bwd<T>, grid, P_B, 0, env->stream, (T *)agk_ptr(a->dx), (const T *)agk_ptr(a->dy),
             (const T *)agk_ptr(a->y), g, (int)(a->variant == AG_KV_LOG_SOFTMAX), (float *)env->scratch);
  return gpuGetLastError();
}
gpuError_t agkp_softmax_bwd(const agk_env *env, const ag_k_softmax_bwd *a) {
  P_DISPATCH(a->dtype, T, return p_softmax_bwd_go<T>(env, a));
  return gpuErrorNotSupported;
}

/* LOGSUMEXP over [outer, r, inner] */
template <typename T> __global__ void k_p_logsumexp(T *out, const T *x, p_rows g, float *scratch) {
  __shared__ float t[P_B];
  __shared__ float sp[P_SPART];
  float *buf = p_buf(sp, scratch, g.n);
  for (ll row = blockIdx.x; row < g.rows; row += gridDim.x) {
    const ll base = p_base(g, row);
    const float mx = p_row_max(t, x, base, g.n, g.inner);
    float r;
    if (mx == INFINITY || mx == -INFINITY) {
      float nan = 0.f;
      for (ll j = threadIdx.x; j < g.n; j += P_B)
        if (p_ld(x, base + j * g.inner) != p_ld(x, base + j * g.inner)) nan = 1.f;
      r = p_max(t, nan) != 0.f ? NAN : mx;
    } else {
      p_exp_term<T> e;
      e.x = x;
      e.base = base;
      e.step = g.inner;
      e.mx = mx;
      r = mx + agp_log(p_sum(t, buf, g.n, e));
    }
    if (threadIdx.x == 0) p_st(out, row, r);
  }
}
template <typename T> static gpuError_t p_logsumexp_go(const agk_env *env, const ag_k_logsumexp *a) {
  p_rows g;
  g.rows = a->outer * a->inner;
  g.n = a->r;
  g.inner = a->inner;
  if (g.rows == 0) return gpuSuccess;
  const unsigned grid = p_grid(env, g.rows, g.n);
  if (!grid) return gpuErrorNotSupported;
  agk_launch(k_p_logsumexp<T>, grid, P_B, 0, env->stream, (T *)agk_ptr(a->out), (const T *)agk_ptr(a->x), g,
             (float *)env->scratch);
  return gpuGetLastError();
}
gpuError_t agkp_logsumexp(const agk_env *env, const ag_k_logsumexp *a) {
  P_DISPATCH(a->dtype, T, return p_logsumexp_go<T>(env, a));
  return gpuErrorNotSupported;
}

/* VAR over [outer, r, inner]: mean = S(x) / r_f; v = S((x - mean)^2) /
 * (float)max(0, r - correction) (host double); STD: sqrt(v) */
template <typename T> struct p_line_term {
  const T *x;
  ll base, step;
  float mean;
  int sq;
  AGK_DEV float operator()(ll j) const {
    const float v = p_ld(x, base + j * step);
    return sq ? (v - mean) * (v - mean) : v;
  }
};
template <typename T>
__global__ void k_p_var(T *out, const T *x, p_rows g, float r_f, float den_f, int stdev, float *scratch) {
  __shared__ float t[P_B];
  __shared__ float sp[P_SPART];
  float *buf = p_buf(sp, scratch, g.n);
  for (ll row = blockIdx.x; row < g.rows; row += gridDim.x) {
    p_line_term<T> f;
    f.x = x;
    f.base = p_base(g, row);
    f.step = g.inner;
    f.mean = 0.f;
    f.sq = 0;
    f.mean = agp_div(p_sum(t, buf, g.n, f), r_f);
    f.sq = 1;
    float v = agp_div(p_sum(t, buf, g.n, f), den_f);
    if (stdev) v = agp_sqrt(v);
    if (threadIdx.x == 0) p_st(out, row, v);
  }
}
template <typename T> static gpuError_t p_var_go(const agk_env *env, const ag_k_var *a) {
  p_rows g;
  g.rows = a->outer * a->inner;
  g.n = a->r;
  g.inner = a->inner;
  if (g.rows == 0) return gpuSuccess;
  const unsigned grid = p_grid(env, g.rows, g.n);
  if (!grid) return gpuErrorNotSupported;
  double den = (double)a->r - a->correction;
  if (den < 0) den = 0;
  agk_launch(k_p_var<T>, grid, P_B, 0, env->stream, (T *)agk_ptr(a->out), (const T *)agk_ptr(a->x), g,
             (float)a->r, (float)den, (int)(a->variant == AG_KV_STD), (float *)env->scratch);
  return gpuGetLastError();
}
gpuError_t agkp_var(const agk_env *env, const ag_k_var *a) {
  P_DISPATCH(a->dtype, T, return p_var_go<T>(env, a));
  return gpuErrorNotSupported;
}

/* CUMSUM over [outer, r, inner]: sequential from +0 along r (PREFIX) or from
 * the end (SUFFIX), one thread per line */
template <typename T> __global__ void k_p_cumsum(T *out, const T *x, p_rows g, int suffix) {
  const ll stride = (ll)gridDim.x * blockDim.x;
  for (ll row = (ll)blockIdx.x * blockDim.x + threadIdx.x; row < g.rows; row += stride) {
    const ll base = p_base(g, row);
    float acc = 0.f;
    for (ll k = 0; k < g.n; k++) {
      const ll j = suffix ? g.n - 1 - k : k;
      acc = acc + p_ld(x, base + j * g.inner);
      p_st(out, base + j * g.inner, acc);
    }
  }
}
template <typename T> static gpuError_t p_cumsum_go(const agk_env *env, const ag_k_cumsum *a) {
  p_rows g;
  g.rows = a->outer * a->inner;
  g.n = a->r;
  g.inner = a->inner;
  if (g.rows == 0 || g.n == 0) return gpuSuccess;
  agk_launch(k_p_cumsum<T>, p_ew_grid(env, g.rows), P_B, 0, env->stream, (T *)agk_ptr(a->out),
             (const T *)agk_ptr(a->x), g, (int)(a->variant == AG_KV_CUMSUM_SUFFIX));
  return gpuGetLastError();
}
gpuError_t agkp_cumsum(const agk_env *env, const ag_k_cumsum *a) {
  P_DISPATCH(a->dtype, T, return p_cumsum_go<T>(env, a));
  return gpuErrorNotSupported;
}

/* NORM over [outer, r, inner] (the default's formulas with S and pmath): a
 * NaN gives NaN; L1 S(|x|); INF m = max |x|; L2 m * sqrt(S((x / m)^2)), m
 * itself when 0 or inf */
template <typename T> struct p_norm_term {
  const T *x;
  ll base, step;
  float m;
  int l2;
  AGK_DEV float operator()(ll j) const {
    const float v = p_ld(x, base + j * step);
    if (!l2) return agp_abs(v);
    const float q = agp_div(v, m);
    return q * q;
  }
};
template <typename T> __global__ void k_p_norm(T *out, const T *x, p_rows g, int kind, float *scratch) {
  __shared__ float t[P_B];
  __shared__ float sp[P_SPART];
  float *buf = p_buf(sp, scratch, g.n);
  for (ll row = blockIdx.x; row < g.rows; row += gridDim.x) {
    const ll base = p_base(g, row);
    float m = 0.f, nan = 0.f;
    for (ll j = threadIdx.x; j < g.n; j += P_B) {
      const float a = agp_abs(p_ld(x, base + j * g.inner));
      if (a != a) nan = 1.f;
      else if (a > m) m = a;
    }
    m = p_max(t, m);
    nan = p_max(t, nan);
    p_norm_term<T> f;
    f.x = x;
    f.base = base;
    f.step = g.inner;
    f.m = m;
    f.l2 = 0;
    float r;
    if (nan != 0.f) r = NAN;
    else if (kind == AG_KV_NORM_L1) r = p_sum(t, buf, g.n, f);
    else if (kind == AG_KV_NORM_INF || m == 0.f || m == INFINITY) r = m;
    else {
      f.l2 = 1;
      r = m * agp_sqrt(p_sum(t, buf, g.n, f));
    }
    if (threadIdx.x == 0) p_st(out, row, r);
  }
}
template <typename T> static gpuError_t p_norm_go(const agk_env *env, const ag_k_norm *a) {
  p_rows g;
  g.rows = a->outer * a->inner;
  g.n = a->r;
  g.inner = a->inner;
  if (g.rows == 0) return gpuSuccess;
  const unsigned grid = p_grid(env, g.rows, g.n);
  if (!grid) return gpuErrorNotSupported;
  agk_launch(k_p_norm<T>, grid, P_B, 0, env->stream, (T *)agk_ptr(a->out), (const T *)agk_ptr(a->x), g,
             (int)a->variant, (float *)env->scratch);
  return gpuGetLastError();
}
gpuError_t agkp_norm(const agk_env *env, const ag_k_norm *a) {
  P_DISPATCH(a->dtype, T, return p_norm_go<T>(env, a));
  return gpuErrorNotSupported;
}

/* GATHER_BWD: dx[o, j, i] (f32, overwritten) = sequential over k in order of
 * dout[o, k, i] where index[o, k, i] == j; out-of-range entries skipped.
 * One thread per dx element scans k. */
template <typename T>
__global__ void k_p_gather_bwd(float *dx, const T *dout, const void *ix, int i64, ll s0, ll s1, ll s2, ll O, ll K,
                               ll I, ll X) {
  const ll n = O * X * I, stride = (ll)gridDim.x * blockDim.x;
  for (ll e = (ll)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += stride) {
    const ll i = e % I, j = e / I % X, o = e / (I * X);
    float acc = 0.f;
    for (ll k = 0; k < K; k++)
      if (agk_idx(ix, i64, o * s0 + k * s1 + i * s2) == j) acc = acc + p_ld(dout, (o * K + k) * I + i);
    dx[e] = acc;
  }
}
template <typename T> static gpuError_t p_gather_bwd_go(const agk_env *env, const ag_k_gather_bwd *a) {
  const ll O = a->o, K = a->k, I = a->in, X = a->xlen, n = O * X * I;
  if (n == 0) return gpuSuccess;
  const ag_koperand *ix = a->index;
  agk_launch(k_p_gather_bwd<T>, p_ew_grid(env, n), P_B, 0, env->stream, (float *)agk_ptr(a->dx),
             (const T *)agk_ptr(a->dout), (const void *)agk_ptr(ix), (int)(ix->dtype == AG_I64), (ll)ix->strides[0],
             (ll)ix->strides[1], (ll)ix->strides[2], O, K, I, X);
  return gpuGetLastError();
}
gpuError_t agkp_gather_bwd(const agk_env *env, const ag_k_gather_bwd *a) {
  P_DISPATCH(a->dtype, T, return p_gather_bwd_go<T>(env, a));
  return gpuErrorNotSupported;
}

/* CROSS_ENTROPY: loss = (mx + log(s)) - x[target]; ignored rows +0 */
template <typename T>
__global__ void k_p_xent(float *loss, const T *x, const void *tg, int t64, p_rows g, ll ignore, ag_kernel_error *err,
                         float *scratch) {
  __shared__ float t[P_B];
  __shared__ float sp[P_SPART];
  float *buf = p_buf(sp, scratch, g.n);
  for (ll row = blockIdx.x; row < g.rows; row += gridDim.x) {
    const ll k = agk_idx(tg, t64, row);
    if (k == ignore) {
      if (threadIdx.x == 0) loss[row] = 0.f;
      continue;
    }
    if (k < 0 || k >= g.n) {
      if (threadIdx.x == 0) {
        loss[row] = NAN;
        agk_report(err, AG_K_CROSS_ENTROPY, k, g.n);
      }
      continue;
    }
    const ll base = row * g.n;
    const float mx = p_row_max(t, x, base, g.n, 1);
    p_exp_term<T> e;
    e.x = x;
    e.base = base;
    e.step = 1;
    e.mx = mx;
    const float s = p_sum(t, buf, g.n, e);
    const float lse = mx + agp_log(s);
    if (threadIdx.x == 0) loss[row] = lse - p_ld(x, base + k);
  }
}
template <typename T>
__global__ void k_p_xent_bwd(T *dl, const T *x, const void *tg, int t64, const float *gr, ll gs, p_rows g, ll ignore,
                             float *scratch) {
  __shared__ float t[P_B];
  __shared__ float sp[P_SPART];
  float *buf = p_buf(sp, scratch, g.n);
  for (ll row = blockIdx.x; row < g.rows; row += gridDim.x) {
    const ll k = agk_idx(tg, t64, row), base = row * g.n;
    if (k == ignore || k < 0 || k >= g.n) {
      for (ll j = threadIdx.x; j < g.n; j += P_B) p_st(dl, base + j, 0.f);
      continue;
    }
    const float mx = p_row_max(t, x, base, g.n, 1);
    p_exp_term<T> e;
    e.x = x;
    e.base = base;
    e.step = 1;
    e.mx = mx;
    const float s = p_sum(t, buf, g.n, e);
    const float gv = gr[row * gs];
    for (ll j = threadIdx.x; j < g.n; j += P_B) {
      const float p = agp_div(agp_exp(p_ld(x, base + j) - mx), s);
      p_st(dl, base + j, (p - (j == k ? 1.f : 0.f)) * gv);
    }
  }
}
template <typename T> static gpuError_t p_xent_go(const agk_env *env, const ag_k_cross_entropy *a) {
  p_rows g;
  g.rows = a->n;
  g.n = a->c;
  g.inner = 1;
  if (g.rows == 0) return gpuSuccess;
  const unsigned grid = p_grid(env, g.rows, g.n);
  if (!grid) return gpuErrorNotSupported;
  agk_launch(k_p_xent<T>, grid, P_B, 0, env->stream, (float *)agk_ptr(a->loss), (const T *)agk_ptr(a->logits),
             (const void *)agk_ptr(a->targets), (int)(a->targets->dtype == AG_I64), g, (ll)a->ignore_index, env->err,
             (float *)env->scratch);
  return gpuGetLastError();
}
gpuError_t agkp_cross_entropy(const agk_env *env, const ag_k_cross_entropy *a) {
  P_DISPATCH(a->dtype, T, return p_xent_go<T>(env, a));
  return gpuErrorNotSupported;
}
template <typename T> static gpuError_t p_xent_bwd_go(const agk_env *env, const ag_k_cross_entropy_bwd *a) {
  p_rows g;
  g.rows = a->n;
  g.n = a->c;
  g.inner = 1;
  if (g.rows == 0 || g.n == 0) return gpuSuccess;
  const unsigned grid = p_grid(env, g.rows, g.n);
  if (!grid) return gpuErrorNotSupported;
  const ag_koperand *gr = a->grad;
  const ll gs = gr->ndim > 0 ? gr->strides[0] : 0;
  agk_launch(k_p_xent_bwd<T>, grid, P_B, 0, env->stream, (T *)agk_ptr(a->dlogits), (const T *)agk_ptr(a->logits),
             (const void *)agk_ptr(a->targets), (int)(a->targets->dtype == AG_I64), (const float *)agk_ptr(gr), gs, g,
             (ll)a->ignore_index, (float *)env->scratch);
  return gpuGetLastError();
}
gpuError_t agkp_cross_entropy_bwd(const agk_env *env, const ag_k_cross_entropy_bwd *a) {
  P_DISPATCH(a->dtype, T, return p_xent_bwd_go<T>(env, a));
  return gpuErrorNotSupported;
}

/* ---- LAYERNORM, RMSNORM ---- */

template <typename T> struct p_dev_term {
  const T *x;
  ll base;
  float mean;
  AGK_DEV float operator()(ll j) const {
    const float d = p_ld(x, base + j) - mean;
    return d * d;
  }
};
template <typename T> struct p_sq_term {
  const T *x;
  ll base;
  AGK_DEV float operator()(ll j) const {
    const float v = p_ld(x, base + j);
    return v * v;
  }
};

template <typename T>
__global__ void k_p_layernorm(T *y, const T *x, const T *w, const T *b, float *mean_o, float *rstd_o, p_rows g,
                              float eps, float df, float *scratch) {
  __shared__ float t[P_B];
  __shared__ float sp[P_SPART];
  float *buf = p_buf(sp, scratch, g.n);
  for (ll row = blockIdx.x; row < g.rows; row += gridDim.x) {
    const ll base = row * g.n;
    p_ld_term<T> f;
    f.a = x;
    f.base = base;
    const float mean = agp_div(p_sum(t, buf, g.n, f), df);
    p_dev_term<T> dv;
    dv.x = x;
    dv.base = base;
    dv.mean = mean;
    const float var = agp_div(p_sum(t, buf, g.n, dv), df);
    const float rstd = agp_div(1.f, agp_sqrt(var + eps));
    for (ll j = threadIdx.x; j < g.n; j += P_B) {
      float v = (p_ld(x, base + j) - mean) * rstd;
      if (w) v = v * p_ld(w, j);
      if (b) v = v + p_ld(b, j);
      p_st(y, base + j, v);
    }
    if (threadIdx.x == 0) {
      if (mean_o) mean_o[row] = mean;
      if (rstd_o) rstd_o[row] = rstd;
    }
  }
}
template <typename T> static gpuError_t p_layernorm_go(const agk_env *env, const ag_k_layernorm *a) {
  p_rows g;
  g.rows = a->n;
  g.n = a->d;
  g.inner = 1;
  if (g.rows == 0 || g.n == 0) return gpuSuccess;
  const unsigned grid = p_grid(env, g.rows, g.n);
  if (!grid) return gpuErrorNotSupported;
  agk_launch(k_p_layernorm<T>, grid, P_B, 0, env->stream, (T *)agk_ptr(a->y), (const T *)agk_ptr(a->x),
             (const T *)agk_optr(a->weight), (const T *)agk_optr(a->bias), (float *)agk_optr(a->mean),
             (float *)agk_optr(a->rstd), g, (float)a->eps, (float)g.n, (float *)env->scratch);
  return gpuGetLastError();
}
gpuError_t agkp_layernorm(const agk_env *env, const ag_k_layernorm *a) {
  P_DISPATCH(a->dtype, T, return p_layernorm_go<T>(env, a));
  return gpuErrorNotSupported;
}

/* g_i = dy_i * w_i (dy_i without weight); xh_i = (x_i - mean) * rstd */
template <typename T> struct p_ln_g {
  const T *dy, *w;
  ll base;
  AGK_DEV float operator()(ll j) const { return w ? p_ld(dy, base + j) * p_ld(w, j) : p_ld(dy, base + j); }
};
template <typename T> struct p_ln_gxh {
  p_ln_g<T> g;
  const T *x;
  float mean, rstd;
  AGK_DEV float operator()(ll j) const { return g(j) * ((p_ld(x, g.base + j) - mean) * rstd); }
};
template <typename T>
__global__ void k_p_layernorm_bwd(T *dx, const T *dy, const T *x, const float *mean_i, const float *rstd_i, const T *w,
                                  p_rows g, float df, float *scratch) {
  __shared__ float t[P_B];
  __shared__ float sp[P_SPART];
  float *buf = p_buf(sp, scratch, g.n);
  for (ll row = blockIdx.x; row < g.rows; row += gridDim.x) {
    const ll base = row * g.n;
    const float mean = mean_i[row], rstd = rstd_i[row];
    p_ln_g<T> gf;
    gf.dy = dy;
    gf.w = w;
    gf.base = base;
    p_ln_gxh<T> gx;
    gx.g = gf;
    gx.x = x;
    gx.mean = mean;
    gx.rstd = rstd;
    const float av = agp_div(p_sum(t, buf, g.n, gf), df);
    const float bv = agp_div(p_sum(t, buf, g.n, gx), df);
    for (ll j = threadIdx.x; j < g.n; j += P_B) {
      const float xh = (p_ld(x, base + j) - mean) * rstd;
      p_st(dx, base + j, ((gf(j) - av) - xh * bv) * rstd);
    }
  }
}
/* The column sums of the norms' weight gradients, one block per column j:
 * dw_j = S over rows r of term(r, j); LAYERNORM: dy * xh and dy (db);
 * RMSNORM: (dy * x) * rstd_r. */
template <typename T> struct p_col_term {
  const T *dy, *x;
  const float *mean, *rstd;
  ll D, j;
  int kind; /* 0: dy * xh, 1: dy, 2: (dy * x) * rstd */
  AGK_DEV float operator()(ll r) const {
    const float d = p_ld(dy, r * D + j);
    if (kind == 1) return d;
    const float xv = p_ld(x, r * D + j);
    if (kind == 2) return (d * xv) * rstd[r];
    return d * ((xv - mean[r]) * rstd[r]);
  }
};
template <typename T>
__global__ void k_p_colsum(float *out, const T *dy, const T *x, const float *mean, const float *rstd, ll R, ll D,
                           int kind, float *scratch) {
  __shared__ float t[P_B];
  __shared__ float sp[P_SPART];
  float *buf = p_buf(sp, scratch, R);
  for (ll j = blockIdx.x; j < D; j += gridDim.x) {
    p_col_term<T> f;
    f.dy = dy;
    f.x = x;
    f.mean = mean;
    f.rstd = rstd;
    f.D = D;
    f.j = j;
    f.kind = kind;
    const float s = p_sum(t, buf, R, f);
    if (threadIdx.x == 0) out[j] = s;
  }
}
template <typename T>
static gpuError_t p_colsum(const agk_env *env, float *out, const T *dy, const T *x, const float *mean,
                           const float *rstd, ll R, ll D, int kind) {
  if (!out || D == 0) return gpuSuccess;
  const unsigned grid = p_grid(env, D, R);
  if (!grid) return gpuErrorNotSupported;
  agk_launch(k_p_colsum<T>, grid, P_B, 0, env->stream, out, dy, x, mean, rstd, R, D, kind, (float *)env->scratch);
  return gpuGetLastError();
}
template <typename T> static gpuError_t p_layernorm_bwd_go(const agk_env *env, const ag_k_layernorm_bwd *a) {
  p_rows g;
  g.rows = a->n;
  g.n = a->d;
  g.inner = 1;
  if (g.n == 0) return gpuSuccess;
  const T *dy = (const T *)agk_ptr(a->dy), *x = (const T *)agk_ptr(a->x);
  const float *mean = (const float *)agk_ptr(a->mean), *rstd = (const float *)agk_ptr(a->rstd);
  if (g.rows > 0) {
    const unsigned grid = p_grid(env, g.rows, g.n);
    if (!grid) return gpuErrorNotSupported;
    agk_launch(k_p_layernorm_bwd<T>, grid, P_B, 0, env->stream, (T *)agk_ptr(a->dx), dy, x, mean, rstd,
               (const T *)agk_optr(a->weight), g, (float)g.n, (float *)env->scratch);
    gpuError_t e = gpuGetLastError();
    if (e != gpuSuccess) return e;
  }
  if (a->multi) {
    gpuError_t e = p_colsum<T>(env, (float *)AGK_MULTI_PTR(a, 0, dw), dy, x, mean, rstd, g.rows, g.n, 0);
    if (e == gpuSuccess) e = p_colsum<T>(env, (float *)AGK_MULTI_PTR(a, 0, db), dy, x, mean, rstd, g.rows, g.n, 1);
    if (e != gpuSuccess) return e;
  }
  return gpuSuccess;
}
gpuError_t agkp_layernorm_bwd(const agk_env *env, const ag_k_layernorm_bwd *a) {
  P_DISPATCH(a->dtype, T, return p_layernorm_bwd_go<T>(env, a));
  return gpuErrorNotSupported;
}

template <typename T>
__global__ void k_p_rmsnorm(T *y, const T *x, const T *w, float *rstd_o, p_rows g, float eps, float df,
                            float *scratch) {
  __shared__ float t[P_B];
  __shared__ float sp[P_SPART];
  float *buf = p_buf(sp, scratch, g.n);
  for (ll row = blockIdx.x; row < g.rows; row += gridDim.x) {
    const ll base = row * g.n;
    p_sq_term<T> f;
    f.x = x;
    f.base = base;
    const float ms = agp_div(p_sum(t, buf, g.n, f), df);
    const float rstd = agp_div(1.f, agp_sqrt(ms + eps));
    for (ll j = threadIdx.x; j < g.n; j += P_B) {
      float v = p_ld(x, base + j) * rstd;
      if (w) v = v * p_ld(w, j);
      p_st(y, base + j, v);
    }
    if (threadIdx.x == 0 && rstd_o) rstd_o[row] = rstd;
  }
}
template <typename T> static gpuError_t p_rmsnorm_go(const agk_env *env, const ag_k_rmsnorm *a) {
  p_rows g;
  g.rows = a->n;
  g.n = a->d;
  g.inner = 1;
  if (g.rows == 0 || g.n == 0) return gpuSuccess;
  const unsigned grid = p_grid(env, g.rows, g.n);
  if (!grid) return gpuErrorNotSupported;
  agk_launch(k_p_rmsnorm<T>, grid, P_B, 0, env->stream, (T *)agk_ptr(a->y), (const T *)agk_ptr(a->x),
             (const T *)agk_optr(a->weight), (float *)agk_optr(a->rstd), g, (float)a->eps, (float)g.n,
             (float *)env->scratch);
  return gpuGetLastError();
}
gpuError_t agkp_rmsnorm(const agk_env *env, const ag_k_rmsnorm *a) {
  P_DISPATCH(a->dtype, T, return p_rmsnorm_go<T>(env, a));
  return gpuErrorNotSupported;
}
template <typename T> struct p_rms_gx {
  p_ln_g<T> g;
  const T *x;
  AGK_DEV float operator()(ll j) const { return g(j) * p_ld(x, g.base + j); }
};
template <typename T>
__global__ void k_p_rmsnorm_bwd(T *dx, const T *dy, const T *x, const float *rstd_i, const T *w, p_rows g, float df,
                                float *scratch) {
  __shared__ float t[P_B];
  __shared__ float sp[P_SPART];
  float *buf = p_buf(sp, scratch, g.n);
  for (ll row = blockIdx.x; row < g.rows; row += gridDim.x) {
    const ll base = row * g.n;
    const float rstd = rstd_i[row];
    p_rms_gx<T> f;
    f.g.dy = dy;
    f.g.w = w;
    f.g.base = base;
    f.x = x;
    const float m = agp_div(p_sum(t, buf, g.n, f), df);
    const float c = (rstd * rstd) * m;
    for (ll j = threadIdx.x; j < g.n; j += P_B) p_st(dx, base + j, (f.g(j) - p_ld(x, base + j) * c) * rstd);
  }
}
template <typename T> static gpuError_t p_rmsnorm_bwd_go(const agk_env *env, const ag_k_rmsnorm_bwd *a) {
  p_rows g;
  g.rows = a->n;
  g.n = a->d;
  g.inner = 1;
  if (g.n == 0) return gpuSuccess;
  const T *dy = (const T *)agk_ptr(a->dy), *x = (const T *)agk_ptr(a->x);
  const float *rstd = (const float *)agk_ptr(a->rstd);
  if (g.rows > 0) {
    const unsigned grid = p_grid(env, g.rows, g.n);
    if (!grid) return gpuErrorNotSupported;
    agk_launch(k_p_rmsnorm_bwd<T>, grid, P_B, 0, env->stream, (T *)agk_ptr(a->dx), dy, x, rstd,
               (const T *)agk_optr(a->weight), g, (float)g.n, (float *)env->scratch);
    gpuError_t e = gpuGetLastError();
    if (e != gpuSuccess) return e;
  }
  if (a->multi) return p_colsum<T>(env, (float *)AGK_MULTI_PTR(a, 0, dw), dy, x, (const float *)0, rstd, g.rows, g.n, 2);
  return gpuSuccess;
}
gpuError_t agkp_rmsnorm_bwd(const agk_env *env, const ag_k_rmsnorm_bwd *a) {
  P_DISPATCH(a->dtype, T, return p_rmsnorm_bwd_go<T>(env, a));
  return gpuErrorNotSupported;
}

/* ---- GROUP_NORM(_BWD) over x [n, c, hw]: LAYERNORM's rules on each
 * (sample, group) block of M = c/groups * hw contiguous values, weight and
 * bias per channel; dw, db per channel as S over (n, hw), n outermost ---- */

typedef struct p_gn {
  ll blocks, M, hw, cpg, groups, C;
} p_gn;
template <typename T> struct p_gn_g { /* g_k = dy_k * w[channel] (dy without weight) */
  const T *dy, *w;
  ll base, c0, hw;
  AGK_DEV float operator()(ll k) const { return w ? p_ld(dy, base + k) * p_ld(w, c0 + k / hw) : p_ld(dy, base + k); }
};
template <typename T> struct p_gn_gxh {
  p_gn_g<T> g;
  const T *x;
  float mean, rstd;
  AGK_DEV float operator()(ll k) const { return g(k) * ((p_ld(x, g.base + k) - mean) * rstd); }
};
template <typename T>
__global__ void k_p_group_norm(T *y, const T *x, const T *w, const T *b, float *mean_o, float *rstd_o, p_gn q,
                               float eps, float df, float *scratch) {
  __shared__ float t[P_B];
  __shared__ float sp[P_SPART];
  float *buf = p_buf(sp, scratch, q.M);
  for (ll blk = blockIdx.x; blk < q.blocks; blk += gridDim.x) {
    const ll base = blk * q.M, c0 = blk % q.groups * q.cpg;
    p_ld_term<T> f;
    f.a = x;
    f.base = base;
    const float mean = agp_div(p_sum(t, buf, q.M, f), df);
    p_dev_term<T> dv;
    dv.x = x;
    dv.base = base;
    dv.mean = mean;
    const float var = agp_div(p_sum(t, buf, q.M, dv), df);
    const float rstd = agp_div(1.f, agp_sqrt(var + eps));
    for (ll k = threadIdx.x; k < q.M; k += P_B) {
      float v = (p_ld(x, base + k) - mean) * rstd;
      if (w) v = v * p_ld(w, c0 + k / q.hw);
      if (b) v = v + p_ld(b, c0 + k / q.hw);
      p_st(y, base + k, v);
    }
    if (threadIdx.x == 0) {
      if (mean_o) mean_o[blk] = mean;
      if (rstd_o) rstd_o[blk] = rstd;
    }
  }
}
template <typename T>
__global__ void k_p_group_norm_bwd(T *dx, const T *dy, const T *x, const float *mean_i, const float *rstd_i,
                                   const T *w, p_gn q, float df, float *scratch) {
  __shared__ float t[P_B];
  __shared__ float sp[P_SPART];
  float *buf = p_buf(sp, scratch, q.M);
  for (ll blk = blockIdx.x; blk < q.blocks; blk += gridDim.x) {
    const ll base = blk * q.M;
    const float mean = mean_i[blk], rstd = rstd_i[blk];
    p_gn_g<T> gf;
    gf.dy = dy;
    gf.w = w;
    gf.base = base;
    gf.c0 = blk % q.groups * q.cpg;
    gf.hw = q.hw;
    p_gn_gxh<T> gx;
    gx.g = gf;
    gx.x = x;
    gx.mean = mean;
    gx.rstd = rstd;
    const float ma = agp_div(p_sum(t, buf, q.M, gf), df);
    const float mb = agp_div(p_sum(t, buf, q.M, gx), df);
    for (ll k = threadIdx.x; k < q.M; k += P_B) {
      const float xh = (p_ld(x, base + k) - mean) * rstd;
      p_st(dx, base + k, ((gf(k) - ma) - xh * mb) * rstd);
    }
  }
}
template <typename T> struct p_gn_col {
  const T *dy, *x;
  const float *mean, *rstd;
  p_gn q;
  ll ch;
  int db;
  AGK_DEV float operator()(ll l) const {
    const ll n = l / q.hw, at = (n * q.C + ch) * q.hw + (l - n * q.hw);
    const float d = p_ld(dy, at);
    if (db) return d;
    const ll blk = n * q.groups + ch / q.cpg;
    return d * ((p_ld(x, at) - mean[blk]) * rstd[blk]);
  }
};
template <typename T>
__global__ void k_p_gn_colsum(float *out, const T *dy, const T *x, const float *mean, const float *rstd, p_gn q, ll N,
                              int db, float *scratch) {
  __shared__ float t[P_B];
  __shared__ float sp[P_SPART];
  const ll L = N * q.hw;
  float *buf = p_buf(sp, scratch, L);
  for (ll c = blockIdx.x; c < q.C; c += gridDim.x) {
    p_gn_col<T> f;
    f.dy = dy;
    f.x = x;
    f.mean = mean;
    f.rstd = rstd;
    f.q = q;
    f.ch = c;
    f.db = db;
    const float s = p_sum(t, buf, L, f);
    if (threadIdx.x == 0) out[c] = s;
  }
}
static p_gn p_gn_of(ll n, ll c, ll hw, ll groups) {
  p_gn q;
  q.groups = groups > 0 ? groups : 1;
  q.cpg = c / q.groups;
  q.hw = hw;
  q.C = c;
  q.M = q.cpg * hw;
  q.blocks = n * q.groups;
  return q;
}
template <typename T> static gpuError_t p_group_norm_go(const agk_env *env, const ag_k_group_norm *a) {
  const p_gn q = p_gn_of(a->n, a->c, a->hw, a->groups);
  if (q.blocks == 0 || q.M == 0) return gpuSuccess;
  const unsigned grid = p_grid(env, q.blocks, q.M);
  if (!grid) return gpuErrorNotSupported;
  agk_launch(k_p_group_norm<T>, grid, P_B, 0, env->stream, (T *)agk_ptr(a->y), (const T *)agk_ptr(a->x),
             (const T *)agk_optr(a->weight), (const T *)agk_optr(a->bias), (float *)agk_optr(a->mean),
             (float *)agk_optr(a->rstd), q, (float)a->eps, (float)q.M, (float *)env->scratch);
  return gpuGetLastError();
}
gpuError_t agkp_group_norm(const agk_env *env, const ag_k_group_norm *a) {
  P_DISPATCH(a->dtype, T, return p_group_norm_go<T>(env, a));
  return gpuErrorNotSupported;
}
template <typename T> static gpuError_t p_group_norm_bwd_go(const agk_env *env, const ag_k_group_norm_bwd *a) {
  const p_gn q = p_gn_of(a->n, a->c, a->hw, a->groups);
  if (q.M == 0) return gpuSuccess;
  const T *dy = (const T *)agk_ptr(a->dy), *x = (const T *)agk_ptr(a->x);
  const float *mean = (const float *)agk_ptr(a->mean), *rstd = (const float *)agk_ptr(a->rstd);
  if (q.blocks > 0) {
    const unsigned grid = p_grid(env, q.blocks, q.M);
    if (!grid) return gpuErrorNotSupported;
    agk_launch(k_p_group_norm_bwd<T>, grid, P_B, 0, env->stream, (T *)agk_ptr(a->dx), dy, x, mean, rstd,
               (const T *)agk_optr(a->weight), q, (float)q.M, (float *)env->scratch);
    gpuError_t e = gpuGetLastError();
    if (e != gpuSuccess) return e;
  }
  if (!a->multi || q.C == 0) return gpuSuccess;
  const unsigned grid = p_grid(env, q.C, a->n * q.hw);
  if (!grid) return gpuErrorNotSupported;
  for (int db = 0; db < 2; db++) {
    float *out = (float *)(db ? AGK_MULTI_PTR(a, 0, db) : AGK_MULTI_PTR(a, 0, dw));
    if (!out) continue;
    agk_launch(k_p_gn_colsum<T>, grid, P_B, 0, env->stream, out, dy, x, mean, rstd, q, (ll)a->n, db,
               (float *)env->scratch);
    gpuError_t e = gpuGetLastError();
    if (e != gpuSuccess) return e;
  }
  return gpuSuccess;
}
gpuError_t agkp_group_norm_bwd(const agk_env *env, const ag_k_group_norm_bwd *a) {
  P_DISPATCH(a->dtype, T, return p_group_norm_bwd_go<T>(env, a));
  return gpuErrorNotSupported;
}

/* ---- optimizers: one launch per group of the multi list ---- */

typedef struct p_adamw_prm {
  float lr, b1, b2, eps, wd, bc1, bc2;
} p_adamw_prm;
__global__ void k_p_adamw(float *p, const float *gr, float *m, float *v, ll n, p_adamw_prm q, const float *inv_scale,
                          const float *found_inf) {
  if (found_inf && *found_inf != 0.f) return;
  const ll stride = (ll)gridDim.x * blockDim.x;
  for (ll i = (ll)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    float g = gr[i];
    if (inv_scale) g = g * *inv_scale;
    const float mi = q.b1 * m[i] + (1.f - q.b1) * g;
    const float vi = q.b2 * v[i] + (1.f - q.b2) * (g * g);
    float pi = p[i] * (1.f - q.lr * q.wd);
    const float mh = agp_div(mi, q.bc1), vh = agp_div(vi, q.bc2);
    pi = pi - q.lr * agp_div(mh, agp_sqrt(vh) + q.eps);
    m[i] = mi;
    v[i] = vi;
    p[i] = pi;
  }
}
gpuError_t agkp_adamw(const agk_env *env, const ag_k_adamw *a) {
  p_adamw_prm q;
  q.lr = (float)a->lr;
  q.b1 = (float)a->beta1;
  q.b2 = (float)a->beta2;
  q.eps = (float)a->eps;
  q.wd = (float)a->weight_decay;
  q.bc1 = (float)a->bias_correction1;
  q.bc2 = (float)a->bias_correction2;
  const float *inv = (const float *)agk_optr(a->inv_scale), *fi = (const float *)agk_optr(a->found_inf);
  for (int k = 0; k < AGK_MULTI_GROUPS(a); k++) {
    const ll n = AGK_MULTI(a, k, param).numel;
    if (n == 0) continue;
    agk_launch(k_p_adamw, p_ew_grid(env, n), P_B, 0, env->stream, (float *)AGK_MULTI_PTR(a, k, param),
               (const float *)AGK_MULTI_PTR(a, k, grad), (float *)AGK_MULTI_PTR(a, k, exp_avg),
               (float *)AGK_MULTI_PTR(a, k, exp_avg_sq), n, q, inv, fi);
    gpuError_t e = gpuGetLastError();
    if (e != gpuSuccess) return e;
  }
  return gpuSuccess;
}

typedef struct p_sgd_prm {
  float lr, momentum, dampening, wd;
  int use_wd, use_momentum, nesterov, first_step;
} p_sgd_prm;
__global__ void k_p_sgd(float *p, const float *gr, float *buf, ll n, p_sgd_prm q, const float *inv_scale,
                        const float *found_inf) {
  if (found_inf && *found_inf != 0.f) return;
  const ll stride = (ll)gridDim.x * blockDim.x;
  for (ll i = (ll)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    float g = gr[i];
    if (inv_scale) g = g * *inv_scale;
    const float pi = p[i];
    if (q.use_wd) g = g + q.wd * pi;
    if (q.use_momentum && buf) {
      const float b = q.first_step ? g : q.momentum * buf[i] + (1.f - q.dampening) * g;
      buf[i] = b;
      g = q.nesterov ? g + q.momentum * b : b;
    }
    p[i] = pi - q.lr * g;
  }
}
gpuError_t agkp_sgd(const agk_env *env, const ag_k_sgd *a) {
  p_sgd_prm q;
  q.lr = (float)a->lr;
  q.momentum = (float)a->momentum;
  q.dampening = (float)a->dampening;
  q.wd = (float)a->weight_decay;
  q.use_wd = a->weight_decay != 0.0;
  q.use_momentum = a->momentum != 0.0;
  q.nesterov = a->nesterov != 0.0;
  q.first_step = a->first_step != 0.0;
  const float *inv = (const float *)agk_optr(a->inv_scale), *fi = (const float *)agk_optr(a->found_inf);
  for (int k = 0; k < AGK_MULTI_GROUPS(a); k++) {
    const ll n = AGK_MULTI(a, k, param).numel;
    if (n == 0) continue;
    agk_launch(k_p_sgd, p_ew_grid(env, n), P_B, 0, env->stream, (float *)AGK_MULTI_PTR(a, k, param),
               (const float *)AGK_MULTI_PTR(a, k, grad), (float *)AGK_MULTI_PTR(a, k, momentum_buffer), n, q, inv,
               fi);
    gpuError_t e = gpuGetLastError();
    if (e != gpuSuccess) return e;
  }
  return gpuSuccess;
}

/* ---- SUMSQ: s_t = S(x_i * x_i) per tensor, out = S(s_0 .. s_{T-1}) ---- */
template <typename T> __global__ void k_p_sumsq_lvl1(const T *x, ll n, ll nch, float *part, float *slot) {
  __shared__ float t[P_B];
  for (ll c = blockIdx.x; c < nch; c += gridDim.x) {
    const ll j = c * P_B + threadIdx.x;
    float v = 0.f;
    if (j < n) {
      v = p_ld(x, j);
      v = v * v;
    }
    const float s = p_tree(t, v);
    if (threadIdx.x == 0) {
      if (nch == 1) *slot = s;
      else part[c] = s;
    }
  }
}
__global__ void k_p_sum_tail(float *part, ll nch, float *slot) {
  __shared__ float t[P_B];
  const float v = p_sum_more(t, part, nch);
  if (threadIdx.x == 0) *slot = v;
}
struct p_vec_term {
  const float *v;
  AGK_DEV float operator()(ll j) const { return v[j]; }
};
/* out = S(v[0 .. n)), n <= 256 * P_SPART */
__global__ void k_p_sum_vec(const float *v, ll n, float *out) {
  __shared__ float t[P_B];
  __shared__ float sp[P_SPART];
  p_vec_term f;
  f.v = v;
  const float s = p_sum(t, sp, n, f);
  if (threadIdx.x == 0) *out = s;
}
gpuError_t agkp_sumsq(const agk_env *env, const ag_k_sumsq *a) {
  const int groups = AGK_MULTI_GROUPS(a);
  float *out = (float *)agk_ptr(a->out);
  /* the tensors' sums at the scratch's start, block sums after them */
  float *slots = (float *)env->scratch, *part = slots + AG_KMAX_MULTI;
  const ll cap = (ll)(env->scratch_bytes / sizeof(float)) - AG_KMAX_MULTI;
  for (int k = 0; k < groups; k++) {
    const ag_kmulti_entry &e = AGK_MULTI(a, k, x);
    const ll n = e.numel, nch = n > 0 ? (n + P_B - 1) / P_B : 1;
    if (nch > cap) return gpuErrorNotSupported;
    const char *x = AGK_MULTI_PTR(a, k, x);
    P_DISPATCH(e.dtype, T,
               agk_launch(k_p_sumsq_lvl1<T>, agk_blocks(nch, 1, P_B, agk_wave(env, P_B)), P_B, 0, env->stream,
                          (const T *)x, n, nch, part, slots + k));
    if (nch > 1) agk_launch(k_p_sum_tail, 1, P_B, 0, env->stream, part, nch, slots + k);
    gpuError_t err = gpuGetLastError();
    if (err != gpuSuccess) return err;
  }
  if (groups == 0) return gpuMemsetAsync(out, 0, sizeof(float), env->stream);
  agk_launch(k_p_sum_vec, 1, P_B, 0, env->stream, (const float *)slots, (ll)groups, out);
  return gpuGetLastError();
}

/* ---- EMBEDDING_BWD: per column, the rows in order; no atomics ---- */
template <typename T>
__global__ void k_p_embedding_bwd(float *dt, const T *dout, const void *idx, int idx64, ll N, ll D, ll V) {
  const ll stride = (ll)gridDim.x * blockDim.x;
  for (ll d = (ll)blockIdx.x * blockDim.x + threadIdx.x; d < D; d += stride)
    for (ll r = 0; r < N; r++) {
      const ll k = agk_idx(idx, idx64, r);
      if (k >= 0 && k < V) dt[k * D + d] = dt[k * D + d] + p_ld(dout, r * D + d);
    }
}
gpuError_t agkp_embedding_bwd(const agk_env *env, const ag_k_embedding_bwd *a) {
  if (a->n == 0 || a->d == 0) return gpuSuccess;
  P_DISPATCH(a->dtype, T,
             agk_launch(k_p_embedding_bwd<T>, agk_blocks(a->d, P_B, P_B, agk_wave(env, P_B)), P_B, 0, env->stream,
                        (float *)agk_ptr(a->dtable), (const T *)agk_ptr(a->dout), (const void *)agk_ptr(a->indices),
                        (int)(a->indices->dtype == AG_I64), (ll)a->n, (ll)a->d, (ll)a->v));
  return gpuGetLastError();
}

/* ---- random, dropout, arange ---- */

/* keep = u >= p_f; m = keep ? scale_f : 0; y = x * m; mask = m */
template <typename T>
__global__ void k_p_dropout(T *y, const T *x, T *mask, ll n, uint64_t seed, uint64_t offset, float p, float scale) {
  const ll stride = (ll)gridDim.x * blockDim.x;
  for (ll b = (ll)blockIdx.x * blockDim.x + threadIdx.x; b * 4 < n; b += stride) {
    const ll first = b * 4;
    const uint4 r = agk_philox(offset + (uint64_t)b, seed);
    for (int j = 0; j < 4 && first + j < n; j++) {
      const float m = agk_u01(agk_lane(r, j)) >= p ? scale : 0.f;
      p_st(y, first + j, p_ld(x, first + j) * m);
      if (mask) p_st(mask, first + j, m);
    }
  }
}
gpuError_t agkp_dropout(const agk_env *env, const ag_k_dropout *a) {
  ll n = 1;
  for (int i = 0; i < a->y->ndim; i++) n *= a->y->shape[i];
  if (n == 0) return gpuSuccess;
  const float p = (float)a->p;
  const float scale = a->p < 1.0 ? (float)(1.0 / (1.0 - a->p)) : 0.f; /* host double, one rounding */
  P_DISPATCH(a->dtype, T,
             agk_launch(k_p_dropout<T>, agk_blocks((n + 3) / 4, P_B, P_B, agk_wave(env, P_B)), P_B, 0, env->stream,
                        (T *)agk_ptr(a->y), (const T *)agk_ptr(a->x), (T *)agk_optr(a->mask), n, a->call->seed,
                        a->call->offset, p, scale));
  return gpuGetLastError();
}

/* RAND_UNIFORM: the default kernel is the spec's (u * range_f + lo_f with
 * explicit roundings, range_f = (float)(hi - lo) on the host). */
gpuError_t agkp_rand_uniform(const agk_env *env, const ag_k_rand_uniform *a) {
  if (!p_float(a->out->dtype)) return gpuErrorNotSupported;
  return agk_rand_uniform(env, a);
}

/* RAND_NORMAL: n = sqrt(-2 log u1) * cos(6.2831855 u2) with pmath */
template <typename T> __global__ void k_p_rand_normal(T *o, ll n, uint64_t seed, uint64_t offset, float mean, float sd) {
  const ll stride = (ll)gridDim.x * blockDim.x;
  for (ll b = (ll)blockIdx.x * blockDim.x + threadIdx.x; b * 2 < n; b += stride) {
    const ll first = b * 2;
    const uint4 r = agk_philox(offset + (uint64_t)b, seed);
    for (int j = 0; j < 2 && first + j < n; j++) {
      const uint32_t wa = agk_lane(r, 2 * j), wb = agk_lane(r, 2 * j + 1);
      const float u1 = (float)((wa >> 8) + 1u) * (1.0f / 16777216.0f);
      const float u2 = (float)(wb >> 8) * (1.0f / 16777216.0f);
      const float z = agp_sqrt(-2.f * agp_log(u1)) * agp_cos(6.2831855f * u2);
      p_st(o, first + j, z * sd + mean);
    }
  }
}
gpuError_t agkp_rand_normal(const agk_env *env, const ag_k_rand_normal *a) {
  ll n = 1;
  for (int i = 0; i < a->out->ndim; i++) n *= a->out->shape[i];
  if (n == 0) return gpuSuccess;
  P_DISPATCH(a->out->dtype, T,
             agk_launch(k_p_rand_normal<T>, agk_blocks((n + 1) / 2, P_B, P_B, agk_wave(env, P_B)), P_B, 0,
                        env->stream, (T *)agk_ptr(a->out), n, a->call->seed, a->call->offset, (float)a->mean,
                        (float)a->std));
  return gpuGetLastError();
}

/* ARANGE (float): out[i] = start_f + (float)i * step_f; integers exact */
template <typename T> __global__ void k_p_arange(T *o, ll n, float start, float step) {
  const ll stride = (ll)gridDim.x * blockDim.x;
  for (ll i = (ll)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) p_st(o, i, start + (float)i * step);
}
gpuError_t agkp_arange(const agk_env *env, const ag_k_arange *a) {
  const ag_dtype dt = a->out->dtype;
  if (dt == AG_F64) return gpuErrorNotSupported;
  if (!p_float(dt)) return agk_arange(env, a);
  const ll n = a->out->ndim ? a->out->shape[0] : 1;
  if (n == 0) return gpuSuccess;
  P_DISPATCH(dt, T,
             agk_launch(k_p_arange<T>, p_ew_grid(env, n), P_B, 0, env->stream, (T *)agk_ptr(a->out), n,
                        (float)a->start, (float)a->step));
  return gpuGetLastError();
}

/* ---- CONV2D and its gradients (f32, NCHW contiguous) ---- */

typedef struct p_conv {
  ll N, Ci, H, W, Co, Ho, Wo, KH, KW, sh, sw, ph, pw, dh, dw, cig, cog;
} p_conv;
static p_conv p_conv_of(const agk_conv *cv) {
  p_conv g;
  g.N = cv->x->shape[0];
  g.Ci = cv->x->shape[1];
  g.H = cv->x->shape[2];
  g.W = cv->x->shape[3];
  g.Co = cv->y->shape[1];
  g.Ho = cv->y->shape[2];
  g.Wo = cv->y->shape[3];
  g.KH = cv->w->shape[2];
  g.KW = cv->w->shape[3];
  g.sh = cv->stride_h;
  g.sw = cv->stride_w;
  g.ph = cv->pad_h;
  g.pw = cv->pad_w;
  g.dh = cv->dilation_h;
  g.dw = cv->dilation_w;
  const ll G = cv->groups > 0 ? cv->groups : 1;
  g.cig = g.Ci / G;
  g.cog = g.Co / G;
  return g;
}

/* y[n, co, oh, ow]: sequential over ci of the group, kh, kw; taps in the
 * padding skipped; then + bias[co] */
__global__ void k_p_conv_fwd(float *y, const float *x, const float *w, const float *bias, p_conv g) {
  const ll n_out = g.N * g.Co * g.Ho * g.Wo, stride = (ll)gridDim.x * blockDim.x;
  for (ll o = (ll)blockIdx.x * blockDim.x + threadIdx.x; o < n_out; o += stride) {
    const ll ow = o % g.Wo, oh = o / g.Wo % g.Ho, co = o / (g.Wo * g.Ho) % g.Co, n = o / (g.Wo * g.Ho * g.Co);
    const ll grp = co / g.cog;
    float acc = 0.f;
    for (ll c = 0; c < g.cig; c++) {
      const float *xp = x + (n * g.Ci + grp * g.cig + c) * g.H * g.W;
      const float *wp = w + (co * g.cig + c) * g.KH * g.KW;
      for (ll kh = 0; kh < g.KH; kh++) {
        const ll ih = oh * g.sh - g.ph + kh * g.dh;
        if (ih < 0 || ih >= g.H) continue;
        for (ll kw = 0; kw < g.KW; kw++) {
          const ll iw = ow * g.sw - g.pw + kw * g.dw;
          if (iw < 0 || iw >= g.W) continue;
          acc = acc + xp[ih * g.W + iw] * wp[kh * g.KW + kw];
        }
      }
    }
    y[o] = bias ? acc + bias[co] : acc;
  }
}

/* dx[n, ci, h, w]: sequential over co of the group, kh, kw of dy * w at the
 * taps whose (oh, ow) is an integral, in-range output position */
__global__ void k_p_conv_bwd_in(float *dx, const float *dy, const float *w, p_conv g) {
  const ll n_in = g.N * g.Ci * g.H * g.W, stride = (ll)gridDim.x * blockDim.x;
  for (ll e = (ll)blockIdx.x * blockDim.x + threadIdx.x; e < n_in; e += stride) {
    const ll iw = e % g.W, ih = e / g.W % g.H, ci = e / (g.W * g.H) % g.Ci, n = e / (g.W * g.H * g.Ci);
    const ll grp = ci / g.cig, c = ci % g.cig;
    float acc = 0.f;
    for (ll k = 0; k < g.cog; k++) {
      const ll co = grp * g.cog + k;
      const float *gp = dy + (n * g.Co + co) * g.Ho * g.Wo;
      const float *wp = w + (co * g.cig + c) * g.KH * g.KW;
      for (ll kh = 0; kh < g.KH; kh++) {
        const ll th = ih + g.ph - kh * g.dh;
        if (th < 0 || th % g.sh) continue;
        const ll oh = th / g.sh;
        if (oh >= g.Ho) continue;
        for (ll kw = 0; kw < g.KW; kw++) {
          const ll tw = iw + g.pw - kw * g.dw;
          if (tw < 0 || tw % g.sw) continue;
          const ll ow = tw / g.sw;
          if (ow >= g.Wo) continue;
          acc = acc + gp[oh * g.Wo + ow] * wp[kh * g.KW + kw];
        }
      }
    }
    dx[e] = acc;
  }
}

/* dw[co, c, kh, kw] = S over (n, oh, ow), n outermost, of dy * x (+0 at the
 * padding taps): one block per weight */
struct p_conv_wterm {
  const float *dy, *x;
  p_conv g;
  ll co, ci, kh, kw;
  AGK_DEV float operator()(ll l) const {
    const ll ow = l % g.Wo, oh = l / g.Wo % g.Ho, n = l / (g.Wo * g.Ho);
    const ll ih = oh * g.sh - g.ph + kh * g.dh, iw = ow * g.sw - g.pw + kw * g.dw;
    if (ih < 0 || ih >= g.H || iw < 0 || iw >= g.W) return 0.f;
    return dy[((n * g.Co + co) * g.Ho + oh) * g.Wo + ow] * x[((n * g.Ci + ci) * g.H + ih) * g.W + iw];
  }
};
__global__ void k_p_conv_bwd_w(float *dw, const float *dy, const float *x, p_conv g, float *scratch) {
  __shared__ float t[P_B];
  __shared__ float sp[P_SPART];
  const ll L = g.N * g.Ho * g.Wo, nw = g.Co * g.cig * g.KH * g.KW;
  float *buf = p_buf(sp, scratch, L);
  for (ll q = blockIdx.x; q < nw; q += gridDim.x) {
    p_conv_wterm f;
    f.dy = dy;
    f.x = x;
    f.g = g;
    f.kw = q % g.KW;
    f.kh = q / g.KW % g.KH;
    const ll c = q / (g.KW * g.KH) % g.cig;
    f.co = q / (g.KW * g.KH * g.cig);
    f.ci = f.co / g.cog * g.cig + c;
    const float s = p_sum(t, buf, L, f);
    if (threadIdx.x == 0) dw[q] = s;
  }
}

static gpuError_t p_conv_run(const agk_env *env, const agk_conv *cv) {
  if (cv->dtype != AG_F32) return gpuErrorNotSupported;
  const p_conv g = p_conv_of(cv);
  if (g.cig <= 0 || g.cog <= 0 || g.sh <= 0 || g.sw <= 0) return gpuErrorNotSupported;
  float *x = (float *)agk_ptr(cv->x), *y = (float *)agk_ptr(cv->y), *w = (float *)agk_ptr(cv->w);
  if (cv->op == AG_K_CONV2D) {
    const ll n = g.N * g.Co * g.Ho * g.Wo;
    if (n == 0) return gpuSuccess;
    agk_launch(k_p_conv_fwd, p_ew_grid(env, n), P_B, 0, env->stream, y, (const float *)x, (const float *)w,
               (const float *)agk_optr(cv->bias), g);
  } else if (cv->op == AG_K_CONV2D_BWD_INPUT) {
    const ll n = g.N * g.Ci * g.H * g.W;
    if (n == 0) return gpuSuccess;
    agk_launch(k_p_conv_bwd_in, p_ew_grid(env, n), P_B, 0, env->stream, x, (const float *)y, (const float *)w, g);
  } else {
    const ll nw = g.Co * g.cig * g.KH * g.KW;
    if (nw == 0) return gpuSuccess;
    const unsigned grid = p_grid(env, nw, g.N * g.Ho * g.Wo);
    if (!grid) return gpuErrorNotSupported;
    agk_launch(k_p_conv_bwd_w, grid, P_B, 0, env->stream, w, (const float *)y, (const float *)x, g,
               (float *)env->scratch);
  }
  return gpuGetLastError();
}
gpuError_t agkp_conv2d(const agk_env *env, const ag_k_conv2d *a) {
  const agk_conv cv = agk_conv_of(a);
  return p_conv_run(env, &cv);
}
gpuError_t agkp_conv2d_bwd_input(const agk_env *env, const ag_k_conv2d_bwd_input *a) {
  const agk_conv cv = agk_conv_of(a);
  return p_conv_run(env, &cv);
}
gpuError_t agkp_conv2d_bwd_weight(const agk_env *env, const ag_k_conv2d_bwd_weight *a) {
  const agk_conv cv = agk_conv_of(a);
  return p_conv_run(env, &cv);
}

/* ---- INTERPOLATE(_BWD), NCHW: each axis maps output o to taps i0, i1 with
 * weights l0, l1 (the CPU's rules, in f32); y = a0 * (b0 * v00 + b1 * v01)
 * + a1 * (b0 * v10 + b1 * v11); the backward sums, for each dx element, the
 * outputs that read it in row-major order of (oh, ow), each term (wh * ww)
 * * dy (l0 + l1 where both taps of an axis fall on the same input) ---- */

AGK_DEV void p_axis(ll o, ll in, ll out, float sc, int nearest, int align, ll *pi0, ll *pi1, float *pl0,
                    float *pl1) {
  ll i0;
  float l0 = 1.0f, l1 = 0.0f;
  if (nearest) {
    if (out == in) i0 = o;
    else if (out == 2 * in) i0 = o >> 1;
    else {
      const float f = (float)o * sc;
      const ll s = (ll)agp_floor(f);
      i0 = s < in - 1 ? s : in - 1;
    }
  } else {
    float s = align ? sc * (float)o : sc * ((float)o + 0.5f) - 0.5f;
    if (s < 0) s = 0;
    i0 = (ll)s;
    if (i0 > in - 1) i0 = in - 1;
    float lf = s - (float)i0;
    lf = lf < 0.0f ? 0.0f : lf > 1.0f ? 1.0f : lf;
    l1 = lf;
    l0 = 1.0f - lf;
  }
  *pi0 = i0;
  *pi1 = nearest ? i0 : i0 + (i0 < in - 1);
  *pl0 = l0;
  *pl1 = l1;
}
/* the weight with which output o reads input i (false: it does not) */
AGK_DEV bool p_axis_w(ll o, ll i, ll in, ll out, float sc, int nearest, int align, float *w) {
  ll a, b;
  float l0, l1;
  p_axis(o, in, out, sc, nearest, align, &a, &b, &l0, &l1);
  if (a == b) {
    if (a != i) return false;
    *w = l0 + l1;
    return true;
  }
  if (a == i) *w = l0;
  else if (b == i) *w = l1;
  else return false;
  return true;
}
typedef struct p_interp {
  ll P, H, W, Ho, Wo;
  float sh, sw;
  int nearest, align;
} p_interp;
template <typename T> __global__ void k_p_interp(T *y, const T *x, p_interp q) {
  const ll n = q.P * q.Ho * q.Wo, stride = (ll)gridDim.x * blockDim.x;
  for (ll e = (ll)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += stride) {
    const ll ow = e % q.Wo, oh = e / q.Wo % q.Ho, p = e / (q.Wo * q.Ho);
    ll h0, h1, w0, w1;
    float a0, a1, b0, b1;
    p_axis(oh, q.H, q.Ho, q.sh, q.nearest, q.align, &h0, &h1, &a0, &a1);
    p_axis(ow, q.W, q.Wo, q.sw, q.nearest, q.align, &w0, &w1, &b0, &b1);
    const T *r0 = x + (p * q.H + h0) * q.W, *r1 = x + (p * q.H + h1) * q.W;
    float v;
    if (q.nearest) v = p_ld(r0, w0);
    else v = a0 * (b0 * p_ld(r0, w0) + b1 * p_ld(r0, w1)) + a1 * (b0 * p_ld(r1, w0) + b1 * p_ld(r1, w1));
    p_st(y, e, v);
  }
}
template <typename T> __global__ void k_p_interp_bwd(T *dx, const T *dy, p_interp q) {
  const ll n = q.P * q.H * q.W, stride = (ll)gridDim.x * blockDim.x;
  for (ll e = (ll)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += stride) {
    const ll iw = e % q.W, ih = e / q.W % q.H, p = e / (q.W * q.H);
    float acc = 0.0f;
    for (ll oh = 0; oh < q.Ho; oh++) {
      float wh;
      if (!p_axis_w(oh, ih, q.H, q.Ho, q.sh, q.nearest, q.align, &wh)) continue;
      const T *g = dy + (p * q.Ho + oh) * q.Wo;
      for (ll ow = 0; ow < q.Wo; ow++) {
        float ww;
        if (p_axis_w(ow, iw, q.W, q.Wo, q.sw, q.nearest, q.align, &ww)) acc = acc + (wh * ww) * p_ld(g, ow);
      }
    }
    p_st(dx, e, acc);
  }
}
static p_interp p_interp_of(const ag_koperand *big, const ag_koperand *small, int variant, double sh, double sw,
                            long long align) {
  p_interp q;
  q.P = big->shape[0] * big->shape[1];
  q.H = big->shape[2];
  q.W = big->shape[3];
  q.Ho = small->shape[2];
  q.Wo = small->shape[3];
  q.sh = (float)sh;
  q.sw = (float)sw;
  q.nearest = variant == AG_KV_INTERP_NEAREST;
  q.align = align != 0;
  return q;
}
gpuError_t agkp_interpolate(const agk_env *env, const ag_k_interpolate *a) {
  const p_interp q = p_interp_of(a->x, a->y, a->variant, a->scale_h, a->scale_w, a->align_corners);
  const ll n = q.P * q.Ho * q.Wo;
  if (n == 0) return gpuSuccess;
  P_DISPATCH(a->dtype, T,
             agk_launch(k_p_interp<T>, p_ew_grid(env, n), P_B, 0, env->stream, (T *)agk_ptr(a->y),
                        (const T *)agk_ptr(a->x), q));
  return gpuGetLastError();
}
gpuError_t agkp_interpolate_bwd(const agk_env *env, const ag_k_interpolate_bwd *a) {
  const p_interp q = p_interp_of(a->dx, a->dy, a->variant, a->scale_h, a->scale_w, a->align_corners);
  const ll n = q.P * q.H * q.W;
  if (n == 0) return gpuSuccess;
  P_DISPATCH(a->dtype, T,
             agk_launch(k_p_interp_bwd<T>, p_ew_grid(env, n), P_B, 0, env->stream, (T *)agk_ptr(a->dx),
                        (const T *)agk_ptr(a->dy), q));
  return gpuGetLastError();
}

/* ---- BN_STATS, BN_APPLY over [n, c, hw] (f32): per channel, S over the
 * flattened (n, hw), n outermost; the affine map left to right ---- */

struct p_bn_term {
  const float *a, *b;
  ll C, HW, ch;
  float mean, mu;
  int term; /* 0: a; 1: (a - mean)^2; 2: a * (b - mu) */
  AGK_DEV float operator()(ll l) const {
    const ll n = l / HW, at = (n * C + ch) * HW + (l - n * HW);
    const float v = a[at];
    if (term == 0) return v;
    if (term == 1) return (v - mean) * (v - mean);
    return v * (b[at] - mu);
  }
};
__global__ void k_p_bn_stats(float *stats, const float *a, const float *b, const float *mu, ll N, ll C, ll HW,
                             int sums, float *scratch) {
  __shared__ float t[P_B];
  __shared__ float sp[P_SPART];
  const ll L = N * HW;
  const float cnt = (float)L;
  float *buf = p_buf(sp, scratch, L);
  for (ll c = blockIdx.x; c < C; c += gridDim.x) {
    p_bn_term f;
    f.a = a;
    f.b = b;
    f.C = C;
    f.HW = HW;
    f.ch = c;
    f.mean = 0.f;
    f.mu = sums ? mu[c] : 0.f;
    f.term = 0;
    const float s0 = p_sum(t, buf, L, f);
    float r0, r1;
    if (sums) {
      f.term = 2;
      r0 = s0;
      r1 = p_sum(t, buf, L, f);
    } else {
      f.mean = agp_div(s0, cnt);
      f.term = 1;
      r0 = f.mean;
      r1 = agp_div(p_sum(t, buf, L, f), cnt);
    }
    if (threadIdx.x == 0) {
      stats[c] = r0;
      stats[C + c] = r1;
    }
  }
}
gpuError_t agkp_bn_stats(const agk_env *env, const ag_k_bn_stats *a) {
  if (a->dtype != AG_F32) return gpuErrorNotSupported;
  const ll N = a->n, C = a->c, HW = a->hw;
  if (C == 0) return gpuSuccess;
  const int sums = a->variant == AG_KV_BN_SUMS;
  const unsigned grid = p_grid(env, C, N * HW);
  if (!grid) return gpuErrorNotSupported;
  agk_launch(k_p_bn_stats, grid, P_B, 0, env->stream, (float *)agk_ptr(a->stats), (const float *)agk_ptr(a->a),
             (const float *)(sums ? agk_optr(a->b) : (char *)0), (const float *)(sums ? agk_optr(a->mu) : (char *)0),
             N, C, HW, sums, (float *)env->scratch);
  return gpuGetLastError();
}

__global__ void k_p_bn_apply(float *y, const float *a, const float *coef, const float *b, ll N, ll C, ll HW) {
  const ll n_all = N * C * HW, stride = (ll)gridDim.x * blockDim.x;
  for (ll e = (ll)blockIdx.x * blockDim.x + threadIdx.x; e < n_all; e += stride) {
    const ll c = e / HW % C;
    const float v = a[e] * coef[c] + coef[C + c];
    y[e] = b ? v + (b[e] - coef[3 * C + c]) * coef[2 * C + c] : v;
  }
}
gpuError_t agkp_bn_apply(const agk_env *env, const ag_k_bn_apply *a) {
  if (a->dtype != AG_F32) return gpuErrorNotSupported;
  const ll n = a->n * a->c * a->hw;
  if (n == 0) return gpuSuccess;
  const bool with_b = a->variant == AG_KV_BN_AFFINE_B;
  agk_launch(k_p_bn_apply, p_ew_grid(env, n), P_B, 0, env->stream, (float *)agk_ptr(a->y),
             (const float *)agk_ptr(a->a), (const float *)agk_ptr(a->coef),
             (const float *)(with_b ? agk_optr(a->b) : (char *)0), (ll)a->n, (ll)a->c, (ll)a->hw);
  return gpuGetLastError();
}

/* ---- portable_check's probe ---- */

/* in: 2^-126, 0.5, 2^-149, 2^24, 1 + 2^-12, -(1 + 2^-11), 1, 3, 2 */
__global__ void k_p_probe(const float *in, float *out) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  out[0] = in[0] * in[1];          /* 2^-127: a subnormal product */
  out[1] = in[2] + in[2];          /* 2^-148: a subnormal sum */
  out[2] = in[2] * in[3];          /* 2^-125: from the subnormal range back */
  out[3] = in[4] * in[4] + in[5];  /* 0 unless a*b + c was fused (2^-24) */
  out[4] = in[6] / in[7];          /* 1/3 correctly rounded */
  out[5] = sqrtf(in[8]);           /* sqrt(2) correctly rounded */
}
gpuError_t agkp_probe(bool *ok, char *reason, size_t reason_len) {
  static const uint32_t in_bits[9] = {0x00800000u, 0x3f000000u, 0x00000001u, 0x4b800000u, 0x3f800800u,
                                      0xbf801000u, 0x3f800000u, 0x40400000u, 0x40000000u};
  static const uint32_t want[6] = {0x00400000u, 0x00000002u, 0x01000000u, 0x00000000u, 0x3eaaaaabu, 0x3fb504f3u};
  static const char *const what[6] = {"a product into the subnormal range is flushed to zero",
                                      "a sum of subnormals is flushed to zero",
                                      "a subnormal operand is read as zero",
                                      "a*b + c is contracted into a fused multiply-add",
                                      "division is not correctly rounded",
                                      "sqrt is not correctly rounded"};
  float hin[9], hout[8];
  memcpy(hin, in_bits, sizeof hin);
  memset(hout, 0, sizeof hout);
  *ok = false;
  gpuStream_t s;
  float *d = (float *)0;
  gpuError_t e = gpuStreamCreateWithFlags(&s, gpuStreamNonBlocking);
  if (e != gpuSuccess) return e;
  e = gpuMalloc((void **)&d, 32 * sizeof(float));
  if (e == gpuSuccess) e = gpuMemcpyAsync(d, hin, sizeof hin, gpuMemcpyHostToDevice, s);
  if (e == gpuSuccess) {
    agk_launch(k_p_probe, 1, 1, 0, s, (const float *)d, d + 16);
    e = gpuGetLastError();
  }
  if (e == gpuSuccess) e = gpuMemcpyAsync(hout, d + 16, sizeof hout, gpuMemcpyDeviceToHost, s);
  if (e == gpuSuccess) e = gpuStreamSynchronize(s);
  if (d) (void)gpuFree(d);
  (void)gpuStreamDestroy(s);
  if (e != gpuSuccess) return e;
  for (int i = 0; i < 6; i++) {
    uint32_t got;
    memcpy(&got, &hout[i], 4);
    if (got != want[i]) {
      snprintf(reason, reason_len, "%s (probe %d: 0x%08x, IEEE 0x%08x)", what[i], i, got, want[i]);
      return gpuSuccess;
    }
  }
  *ok = true;
  return gpuSuccess;
}
