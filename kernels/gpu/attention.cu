/* Scaled dot-product attention (AG_K_SDPA, AG_K_SDPA_BWD) in the work split
 * of FlashAttention-2, on CUDA cores: blocks of SD_NT = 128 threads, seen as
 * 16 row groups of 8 threads (consecutive lanes, so a row's reductions are
 * shuffles of width 8 on 32- and 64-wide warps alike). Tiles of q, k, v
 * (and dO) live in shared memory as f32; each thread keeps a small block of
 * scores and of its output rows in registers, in arrays indexed only by
 * unrolled constants (a runtime index would put them in local memory).
 * The head width is a template constant DM (64 or 128; larger heads are
 * declined and the core runs the unfused composition), so the tiles fit 48
 * KiB of static shared memory and a thread owns DM / 8 output columns.
 *
 * Forward: a block per (batch, head, tile of BQ queries) streams the key and
 * value tiles, folding each into a running maximum, sum and accumulator per
 * query row (the online softmax); only the per-row log-sum-exp is kept.
 * f32, f16, bf16 storage, f32 arithmetic. Dropout as every backend: element
 * ((b*H + h)*T + i)*S + j of the Philox stream, kept when u >= p and scaled
 * by 1/(1-p). One writer per output element, fixed summation orders, no
 * atomics: results repeat bit for bit. */
#include "common.cuh"

#define SD_NT 128 /* threads per block */
#define SD_TX 8   /* threads sharing a row: tile columns are split among them */
#define SD_TY (SD_NT / SD_TX)
#define SD_MAXD 128
#define SD_FWD_BQ 32 /* queries per block of the forward */

struct sd_geom {
  long long B, H, Hkv, T, S, D, Dv;
  long long ms0, ms1, ms2, ms3; /* mask element strides (0: broadcast) */
  float scale, p, keep;
  int causal;
  uint64_t seed, offset;
};

AGK_DEV float sd_mult(const sd_geom &g, long long idx) {
  if (g.p <= 0.0f) return 1.0f;
  uint4 r = agk_philox(g.offset + (uint64_t)(idx >> 2), g.seed);
  return agk_u01(agk_lane(r, (int)(idx & 3))) >= g.p ? g.keep : 0.0f;
}

/* the mask's and the causal rule's contribution to score (b, h, i, j) */
template <typename T>
AGK_DEV float sd_bias(const sd_geom &g, const T *m, long long b, long long h, long long i, long long j) {
  if (g.causal && j > i) return -INFINITY;
  return m ? agk_tof(m[b * g.ms0 + h * g.ms1 + i * g.ms2 + j * g.ms3]) : 0.0f;
}

/* maximum and sum over the SD_TX threads of a row group (every one gets the
 * same bits: the butterfly's pairs are added in either order) */
AGK_DEV float sd_gmax(float v) {
#pragma unroll
  for (int m = SD_TX / 2; m > 0; m >>= 1) v = fmaxf(v, AGK_SHFL_XOR(v, m, SD_TX));
  return v;
}
AGK_DEV float sd_gsum(float v) {
#pragma unroll
  for (int m = SD_TX / 2; m > 0; m >>= 1) v += AGK_SHFL_XOR(v, m, SD_TX);
  return v;
}

/* Rows [0, R) x columns [0, cols) of the tile sh from n contiguous rows of
 * x (row length cols), times scale; rows past n are zeros, so every
 * element a later loop may read is written. */
template <int R, int L, typename T>
AGK_DEV void sd_load(float (*sh)[L], const T *x, int n, int cols, float scale) {
  for (int t = threadIdx.x; t < R * cols; t += SD_NT) {
    int r = t / cols, c = t - r * cols;
    sh[r][c] = r < n ? agk_tof(x[(long long)r * cols + c]) * scale : 0.0f;
  }
}
/* Columns [cols, DM) of a tile read by the column loops: zero once per
 * block (the loads never write them). */
template <int R, int L>
AGK_DEV void sd_zero_cols(float (*sh)[L], int cols, int DM) {
  int w = DM - cols;
  for (int t = threadIdx.x; t < R * w; t += SD_NT) sh[t / w][cols + t % w] = 0.0f;
}

/* Forward, a block per (b, h, tile of BQ queries). Thread (ty, tx) owns
 * query rows ty + SD_TY*i (RQ of them) and, of each key tile, the scores
 * of keys tx + SD_TX*jj (RK of them) and output columns tx + SD_TX*c. */
template <typename T, int DM>
__global__ void __launch_bounds__(SD_NT) k_sdpa(T *o, const T *q, const T *k, const T *v, const T *m, float *lse,
                                                sd_geom g) {
  constexpr int BQ = SD_FWD_BQ, BK = DM > 64 ? 16 : 32, RQ = BQ / SD_TY, RK = BK / SD_TX, RC = DM / SD_TX, L = DM + 1;
  /* 35 KiB at DM = 128 (29 KiB at 64); the +1 columns keep the rows of a
   * warp's reads in distinct banks */
  __shared__ float qs[BQ][L], ks[BK][L], vs[BK][L], ps[BQ][BK + 1];
  const int tx = threadIdx.x % SD_TX, ty = threadIdx.x / SD_TX, D = (int)g.D, Dv = (int)g.Dv;
  sd_zero_cols<BK>(vs, Dv, DM);
  long long tiles = (g.T + BQ - 1) / BQ, n = g.B * g.H * tiles;
  for (long long w = blockIdx.x; w < n; w += gridDim.x) {
    long long qt = w % tiles, bh = w / tiles, h = bh % g.H, b = bh / g.H;
    long long kh = b * g.Hkv + h / (g.H / g.Hkv), q0 = qt * BQ;
    int nq = (int)(g.T - q0 < BQ ? g.T - q0 : BQ);
    __syncthreads(); /* the previous item's reads of qs are done */
    sd_load<BQ>(qs, q + (bh * g.T + q0) * D, nq, D, g.scale);
    float acc[RQ][RC], mx[RQ], l[RQ];
#pragma unroll
    for (int i = 0; i < RQ; i++) {
      mx[i] = -INFINITY;
      l[i] = 0.0f;
#pragma unroll
      for (int c = 0; c < RC; c++) acc[i][c] = 0.0f;
    }
    long long jend = g.causal && q0 + nq < g.S ? q0 + nq : g.S; /* under causal, no key past the last query */
    for (long long j0 = 0; j0 < jend; j0 += BK) {
      int nk = (int)(jend - j0 < BK ? jend - j0 : BK);
      __syncthreads(); /* the previous tile's reads of ks, vs, ps are done */
      sd_load<BK>(ks, k + (kh * g.S + j0) * D, nk, D, 1.0f);
      sd_load<BK>(vs, v + (kh * g.S + j0) * Dv, nk, Dv, 1.0f);
      __syncthreads();
      float s[RQ][RK];
#pragma unroll
      for (int i = 0; i < RQ; i++)
#pragma unroll
        for (int jj = 0; jj < RK; jj++) s[i][jj] = 0.0f;
      for (int d = 0; d < D; d++) {
        float kd[RK];
#pragma unroll
        for (int jj = 0; jj < RK; jj++) kd[jj] = ks[tx + SD_TX * jj][d];
#pragma unroll
        for (int i = 0; i < RQ; i++) {
          float qd = qs[ty + SD_TY * i][d];
#pragma unroll
          for (int jj = 0; jj < RK; jj++) s[i][jj] += qd * kd[jj];
        }
      }
#pragma unroll
      for (int i = 0; i < RQ; i++) {
        const int ri = ty + SD_TY * i;
        const long long qi = q0 + ri;
        float tmax = -INFINITY;
#pragma unroll
        for (int jj = 0; jj < RK; jj++) {
          const int cj = tx + SD_TX * jj;
          float bias = ri < nq && cj < nk ? sd_bias(g, m, b, h, qi, j0 + cj) : -INFINITY;
          s[i][jj] = bias == -INFINITY ? -INFINITY : s[i][jj] + bias;
          tmax = fmaxf(tmax, s[i][jj]);
        }
        float mn = fmaxf(mx[i], sd_gmax(tmax));
        float alpha = mx[i] == -INFINITY ? 0.0f : expf(mx[i] - mn);
        mx[i] = mn;
        l[i] *= alpha;
#pragma unroll
        for (int c = 0; c < RC; c++) acc[i][c] *= alpha;
#pragma unroll
        for (int jj = 0; jj < RK; jj++) {
          const int cj = tx + SD_TX * jj;
          float p = s[i][jj] == -INFINITY ? 0.0f : expf(s[i][jj] - mn);
          l[i] += p;
          ps[ri][cj] = p == 0.0f ? 0.0f : p * sd_mult(g, (bh * g.T + qi) * g.S + j0 + cj);
        }
      }
      __syncthreads();
      for (int j = 0; j < nk; j++) {
        float pj[RQ];
#pragma unroll
        for (int i = 0; i < RQ; i++) pj[i] = ps[ty + SD_TY * i][j];
#pragma unroll
        for (int c = 0; c < RC; c++) {
          float vj = vs[j][tx + SD_TX * c];
#pragma unroll
          for (int i = 0; i < RQ; i++) acc[i][c] += pj[i] * vj;
        }
      }
    }
#pragma unroll
    for (int i = 0; i < RQ; i++) {
      const int ri = ty + SD_TY * i;
      float sum = sd_gsum(l[i]);
      if (ri >= nq) continue;
      long long r = bh * g.T + q0 + ri;
      float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
#pragma unroll
      for (int c = 0; c < RC; c++)
        if (tx + SD_TX * c < Dv) o[r * Dv + tx + SD_TX * c] = agk_fromf<T>(acc[i][c] * inv);
      if (tx == 0) lse[r] = sum > 0.0f ? mx[i] + logf(sum) : -INFINITY;
    }
  }
}

#define SD_BQ 32
#define SD_BK 32
template <typename T> AGK_DEV void sd_load_old(float (*sh)[SD_MAXD], const T *x, long long row, int n, long long X) {
  for (long long t = threadIdx.x; t < n * X; t += blockDim.x) sh[t / X][t % X] = agk_tof(x[row * X + t]);
}

/* dq of each query row: dq = scale * sum_j p (dp * mult - delta) k_j,
 * dp = dO . v_j, delta = dO . out */
template <typename T>
__global__ void k_sdpa_bwd_dq(T *dq, const T *dO, const T *q, const T *k, const T *v, const T *m,
                              const float *lse, const T *out, sd_geom g) {
  __shared__ float ks[SD_BK][SD_MAXD];
  __shared__ float vs[SD_BK][SD_MAXD];
  long long tiles = (g.T + SD_BQ - 1) / SD_BQ, n = g.B * g.H * tiles;
  for (long long w = blockIdx.x; w < n; w += gridDim.x) {
    long long qt = w % tiles, bh = w / tiles, h = bh % g.H, b = bh / g.H;
    long long kh = b * g.Hkv + h / (g.H / g.Hkv);
    long long i = qt * SD_BQ + threadIdx.x, r = bh * g.T + i;
    bool live = i < g.T;
    float qv[SD_MAXD], acc[SD_MAXD], go[SD_MAXD], dl = 0.0f, ls = -INFINITY;
    for (long long d = 0; d < g.D; d++) {
      qv[d] = live ? agk_tof(q[r * g.D + d]) * g.scale : 0.0f;
      acc[d] = 0.0f;
    }
    for (long long e = 0; e < g.Dv; e++) {
      go[e] = live ? agk_tof(dO[r * g.Dv + e]) : 0.0f;
      if (live) dl += go[e] * agk_tof(out[r * g.Dv + e]);
    }
    if (live) ls = lse[r];
    long long last = qt * SD_BQ + SD_BQ < g.T ? qt * SD_BQ + SD_BQ : g.T;
    long long jend = g.causal && last < g.S ? last : g.S;
    for (long long j0 = 0; j0 < jend; j0 += SD_BK) {
      int nk = (int)(jend - j0 < SD_BK ? jend - j0 : SD_BK);
      __syncthreads();
      sd_load_old(ks, k, kh * g.S + j0, nk, g.D);
      sd_load_old(vs, v, kh * g.S + j0, nk, g.Dv);
      __syncthreads();
      if (!live || ls == -INFINITY) continue;
      for (int jj = 0; jj < nk; jj++) {
        float s = sd_bias(g, m, b, h, i, j0 + jj);
        if (s == -INFINITY) continue;
        for (long long d = 0; d < g.D; d++) s += qv[d] * ks[jj][d];
        if (s == -INFINITY) continue;
        float p = expf(s - ls), dp = 0.0f;
        for (long long e = 0; e < g.Dv; e++) dp += go[e] * vs[jj][e];
        float ds = p * (dp * sd_mult(g, r * g.S + j0 + jj) - dl);
        for (long long d = 0; d < g.D; d++) acc[d] += ds * ks[jj][d];
      }
    }
    if (live)
      for (long long d = 0; d < g.D; d++) dq[r * g.D + d] = agk_fromf<T>(acc[d] * g.scale);
  }
}

/* dk, dv of each key row (b, kv head, j): a block per tile of SD_BK keys,
 * the query rows of every head of the group streaming through shared
 * memory (q scaled, dO, lse and delta per row). */
template <typename T>
__global__ void k_sdpa_bwd_dkv(T *dk, T *dv, const T *dO, const T *q, const T *k, const T *v, const T *m,
                               const float *lse, const T *out, sd_geom g) {
  __shared__ float qs[SD_BQ][SD_MAXD];
  __shared__ float gs[SD_BQ][SD_MAXD];
  __shared__ float lss[SD_BQ], dls[SD_BQ];
  long long tiles = (g.S + SD_BK - 1) / SD_BK, n = g.B * g.Hkv * tiles, G = g.H / g.Hkv;
  for (long long w = blockIdx.x; w < n; w += gridDim.x) {
    long long jt = w % tiles, kh = w / tiles, b = kh / g.Hkv;
    long long j = jt * SD_BK + threadIdx.x, t = kh * g.S + j;
    bool live = j < g.S;
    float kv[SD_MAXD], vv[SD_MAXD], gk[SD_MAXD], gv[SD_MAXD];
    for (long long d = 0; d < g.D; d++) {
      kv[d] = live ? agk_tof(k[t * g.D + d]) : 0.0f;
      gk[d] = 0.0f;
    }
    for (long long e = 0; e < g.Dv; e++) {
      vv[e] = live ? agk_tof(v[t * g.Dv + e]) : 0.0f;
      gv[e] = 0.0f;
    }
    /* under causal, queries before the tile's first key see none of it */
    long long i0 = g.causal ? jt * SD_BK / SD_BQ * SD_BQ : 0;
    for (long long hh = 0; hh < G; hh++) {
      long long h = (kh % g.Hkv) * G + hh, bh = b * g.H + h;
      for (long long q0 = i0; q0 < g.T; q0 += SD_BQ) {
        int nq = (int)(g.T - q0 < SD_BQ ? g.T - q0 : SD_BQ);
        __syncthreads();
        for (long long x = threadIdx.x; x < nq * g.D; x += blockDim.x)
          qs[x / g.D][x % g.D] = agk_tof(q[(bh * g.T + q0) * g.D + x]) * g.scale;
        for (long long x = threadIdx.x; x < nq * g.Dv; x += blockDim.x)
          gs[x / g.Dv][x % g.Dv] = agk_tof(dO[(bh * g.T + q0) * g.Dv + x]);
        for (int x = threadIdx.x; x < nq; x += blockDim.x) {
          long long r = bh * g.T + q0 + x;
          float dl = 0.0f;
          for (long long e = 0; e < g.Dv; e++) dl += agk_tof(dO[r * g.Dv + e]) * agk_tof(out[r * g.Dv + e]);
          lss[x] = lse[r];
          dls[x] = dl;
        }
        __syncthreads();
        if (!live) continue;
        for (int ii = 0; ii < nq; ii++) {
          long long i = q0 + ii, r = bh * g.T + i;
          if (lss[ii] == -INFINITY) continue;
          float s = sd_bias(g, m, b, h, i, j);
          if (s == -INFINITY) continue;
          for (long long d = 0; d < g.D; d++) s += qs[ii][d] * kv[d];
          if (s == -INFINITY) continue;
          float p = expf(s - lss[ii]), mult = sd_mult(g, r * g.S + j), dp = 0.0f;
          for (long long e = 0; e < g.Dv; e++) {
            dp += gs[ii][e] * vv[e];
            gv[e] += p * mult * gs[ii][e];
          }
          float ds = p * (dp * mult - dls[ii]);
          for (long long d = 0; d < g.D; d++) gk[d] += ds * qs[ii][d];
        }
      }
    }
    if (live) {
      for (long long d = 0; d < g.D; d++) dk[t * g.D + d] = agk_fromf<T>(gk[d]);
      for (long long e = 0; e < g.Dv; e++) dv[t * g.Dv + e] = agk_fromf<T>(gv[e]);
    }
  }
}

static char *sd_mptr(const ag_kmulti *mt, int i) { return (char *)mt->t[i].base + mt->t[i].offset; }

gpuError_t agk_sdpa(const agk_env *env, const ag_kernel_call *c) {
  const ag_koperand *q = &c->o[1], *k = &c->o[2], *v = &c->o[3];
  const ag_koperand *mo = c->n_operands > 4 && c->o[4].base ? &c->o[4] : (const ag_koperand *)0;
  sd_geom g;
  memset(&g, 0, sizeof g);
  g.B = q->shape[0];
  g.H = q->shape[1];
  g.Hkv = k->shape[1];
  g.T = q->shape[2];
  g.S = k->shape[2];
  g.D = q->shape[3];
  g.Dv = v->shape[3];
  if (mo) {
    g.ms0 = mo->strides[0];
    g.ms1 = mo->strides[1];
    g.ms2 = mo->strides[2];
    g.ms3 = mo->strides[3];
  }
  g.scale = (float)c->s[0];
  g.p = (float)c->s[1];
  g.keep = (float)(c->s[1] < 1 ? 1.0 / (1.0 - c->s[1]) : 0.0);
  g.causal = c->i[0] != 0;
  g.seed = c->seed;
  g.offset = c->offset;
  /* shared tiles and per-thread columns of DM = 64 or 128 */
  if (g.D > SD_MAXD || g.Dv > SD_MAXD || g.Hkv <= 0 || g.H % g.Hkv != 0) return gpuErrorNotSupported;
  const bool dm64 = g.D <= 64 && g.Dv <= 64;
  const void *mp = mo ? agk_ptr(mo) : (const void *)0;
  if (c->op == AG_K_SDPA) {
    if (g.B * g.H * g.T == 0) return gpuSuccess;
    unsigned nb = agk_blocks(g.B * g.H * ((g.T + SD_FWD_BQ - 1) / SD_FWD_BQ), 1, SD_NT, agk_wave(env, SD_NT));
    AGK_DISPATCH_F32ISH(q->dtype, T,
                        agk_launch(dm64 ? k_sdpa<T, 64> : k_sdpa<T, 128>, nb, SD_NT, 0, env->stream,
                                   (T *)agk_ptr(&c->o[0]), (const T *)agk_ptr(q), (const T *)agk_ptr(k),
                                   (const T *)agk_ptr(v), (const T *)mp, (float *)agk_ptr(&c->o[5]), g));
    return gpuGetLastError();
  }
  if (!c->multi || c->multi->count < 4) return gpuErrorNotSupported;
  const ag_kmulti *mt = c->multi;
  if (g.B * g.H * g.T > 0) {
    unsigned nb = agk_blocks(g.B * g.H * ((g.T + SD_BQ - 1) / SD_BQ), 1, SD_BQ, agk_wave(env, SD_BQ));
    AGK_DISPATCH_F32ISH(q->dtype, T,
                        agk_launch(k_sdpa_bwd_dq<T>, nb, SD_BQ, 0, env->stream, (T *)sd_mptr(mt, 0),
                                   (const T *)agk_ptr(&c->o[0]), (const T *)agk_ptr(q), (const T *)agk_ptr(k),
                                   (const T *)agk_ptr(v), (const T *)mp, (const float *)agk_ptr(&c->o[5]),
                                   (const T *)sd_mptr(mt, 3), g));
    gpuError_t e = gpuGetLastError();
    if (e != gpuSuccess) return e;
  }
  if (g.B * g.Hkv * g.S > 0) {
    unsigned nb = agk_blocks(g.B * g.Hkv * ((g.S + SD_BK - 1) / SD_BK), 1, SD_BK, agk_wave(env, SD_BK));
    AGK_DISPATCH_F32ISH(q->dtype, T,
                        agk_launch(k_sdpa_bwd_dkv<T>, nb, SD_BK, 0, env->stream, (T *)sd_mptr(mt, 1),
                                   (T *)sd_mptr(mt, 2), (const T *)agk_ptr(&c->o[0]), (const T *)agk_ptr(q),
                                   (const T *)agk_ptr(k), (const T *)agk_ptr(v), (const T *)mp,
                                   (const float *)agk_ptr(&c->o[5]), (const T *)sd_mptr(mt, 3), g));
    return gpuGetLastError();
  }
  return gpuSuccess;
}
