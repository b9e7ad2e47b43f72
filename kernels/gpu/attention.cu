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
 * Backward: p = exp(s - lse) recomputed twice, in dq (a block per query
 * tile streaming the key tiles, as the forward) and in dk/dv (a block per
 * key tile streaming the query tiles of every query head of its group).
 * f32, f16, bf16 storage, f32 arithmetic. Dropout as every backend: element
 * ((b*H + h)*T + i)*S + j of the Philox stream, kept when u >= p and scaled
 * by 1/(1-p). One writer per output element, fixed summation orders, no
 * atomics: results repeat bit for bit. */
#include "common.cuh"

#define SD_NT 128 /* threads per block */
#define SD_TX 8   /* threads sharing a row: tile columns are split among them */
#define SD_TY (SD_NT / SD_TX)
#define SD_MAXD 128
/* 4 blocks of 128 threads per SM: at most 128 registers per thread, which
 * every kernel here fits without spilling (ptxas for sm_90 otherwise aims
 * at fewer and spilled dq's DM = 64 build); on AMD the 4 is waves per SIMD,
 * the same 128-VGPR cap on CDNA */
#define SD_BOUNDS __launch_bounds__(SD_NT, 4)
/* tile rows: queries (BQ) and keys (BK) per tile of each kernel, by DM; a
 * tile's f32 arrays stay within 48 KiB of static shared memory */
#define SD_FWD_BQ 32
#define SD_FWD_BK(DM) ((DM) > 64 ? 16 : 32)
#define SD_DQ_BQ(DM) ((DM) > 64 ? 16 : 32)
#define SD_DQ_BK 16
#define SD_DKV_BK(DM) ((DM) > 64 ? 16 : 32)
#define SD_DKV_BQ SD_TY

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

/* Rows [0, R) x columns [0, cols) of the tile sh from rows r0 + [0, n) of
 * x (row length cols), times scale; rows past n are zeros, so every
 * element a later loop may read is written. */
template <int R, int L, typename T>
AGK_DEV void sd_load(float (*sh)[L], const T *x, long long r0, int n, int cols, float scale) {
  x += r0 * cols;
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

/* The work item w of the kernels that stream key tiles past a tile of bq
 * queries (of tiles per head): batch b, head h (bh = b*H + h), its
 * key/value head kh, the tile's first query q0 and its nq rows. */
struct sd_qtile {
  long long b, h, bh, kh, q0;
  int nq;
};
AGK_DEV sd_qtile sd_qtile_of(const sd_geom &g, long long w, long long tiles, int bq) {
  long long qt = w % tiles;
  sd_qtile t;
  t.bh = w / tiles;
  t.h = t.bh % g.H;
  t.b = t.bh / g.H;
  t.kh = t.b * g.Hkv + t.h / (g.H / g.Hkv);
  t.q0 = qt * bq;
  t.nq = (int)(g.T - t.q0 < bq ? g.T - t.q0 : bq);
  return t;
}

/* Register tiles: thread (ty, tx) owns rows ty + SD_TY*i of a tile and
 * columns tx + SD_TX*c, in arrays indexed only by unrolled constants. */

/* acc[i][jj] = sum over d < n, in order, of a[ty + SD_TY*i][d] *
 * b[tx + SD_TX*jj][d]: a tile of scores q k^T (or dO v^T) */
template <int RA, int RB, int L>
AGK_DEV void sd_tile_dot(float (&acc)[RA][RB], const float (*a)[L], const float (*b)[L], int n) {
  const int tx = threadIdx.x % SD_TX, ty = threadIdx.x / SD_TX;
#pragma unroll
  for (int i = 0; i < RA; i++)
#pragma unroll
    for (int jj = 0; jj < RB; jj++) acc[i][jj] = 0.0f;
  for (int d = 0; d < n; d++) {
    float bd[RB];
#pragma unroll
    for (int jj = 0; jj < RB; jj++) bd[jj] = b[tx + SD_TX * jj][d];
#pragma unroll
    for (int i = 0; i < RA; i++) {
      float ad = a[ty + SD_TY * i][d];
#pragma unroll
      for (int jj = 0; jj < RB; jj++) acc[i][jj] += ad * bd[jj];
    }
  }
}
/* acc[i][c] += p[ty + SD_TY*i][j] * x[j][tx + SD_TX*c], for j = 0, 1, ...
 * in turn: a tile of weights (p, ds) times the rows of x */
template <int R, int C, int LP, int LX>
AGK_DEV void sd_tile_axpy(float (&acc)[R][C], const float (*p)[LP], const float (*x)[LX], int j) {
  const int tx = threadIdx.x % SD_TX, ty = threadIdx.x / SD_TX;
  float pj[R];
#pragma unroll
  for (int i = 0; i < R; i++) pj[i] = p[ty + SD_TY * i][j];
#pragma unroll
  for (int c = 0; c < C; c++) {
    float xj = x[j][tx + SD_TX * c];
#pragma unroll
    for (int i = 0; i < R; i++) acc[i][c] += pj[i] * xj;
  }
}
/* Rows ty + SD_TY*i below n of the register tile, columns below cols,
 * times mul, to rows r0 + ... of x (row length cols) */
template <int R, int C, typename T>
AGK_DEV void sd_tile_store(T *x, const float (&acc)[R][C], long long r0, int n, int cols, float mul) {
  const int tx = threadIdx.x % SD_TX, ty = threadIdx.x / SD_TX;
#pragma unroll
  for (int i = 0; i < R; i++) {
    const int ri = ty + SD_TY * i;
    if (ri >= n) continue;
#pragma unroll
    for (int c = 0; c < C; c++)
      if (tx + SD_TX * c < cols) x[(r0 + ri) * cols + tx + SD_TX * c] = agk_fromf<T>(acc[i][c] * mul);
  }
}

/* Score s of query i and key j with the mask and the causal rule added:
 * -inf where they rule it out or where live is false (a row or column past
 * the tile, a query row that sees no key). The forward writes the same two
 * lines out: through this helper hipcc gives it 5 more VGPRs on gfx1030. */
template <typename T>
AGK_DEV float sd_score(const sd_geom &g, const T *m, long long b, long long h, long long i, long long j, bool live,
                       float s) {
  if (!live) return -INFINITY;
  float bias = sd_bias(g, m, b, h, i, j);
  return bias == -INFINITY ? -INFINITY : s + bias;
}
/* Backward, score sc of element idx of the dropout stream: p = exp(sc -
 * lse), pd = p * mult, ds = p (dp * mult - delta); both 0 where sc = -inf.
 * delta by reference: dk/dv's shared-memory read stays where it is used. */
AGK_DEV void sd_grad(const sd_geom &g, long long idx, float sc, float dp, float ls, const float &dl, float &pd,
                     float &ds) {
  pd = ds = 0.0f;
  if (sc != -INFINITY) {
    float p = expf(sc - ls), mult = sd_mult(g, idx);
    pd = p * mult;
    ds = p * (dp * mult - dl);
  }
}

/* Forward, a block per (b, h, tile of BQ queries). Thread (ty, tx) owns
 * query rows ty + SD_TY*i (RQ of them) and, of each key tile, the scores
 * of keys tx + SD_TX*jj (RK of them) and output columns tx + SD_TX*c. */
template <typename T, int DM>
__global__ void SD_BOUNDS k_sdpa(T *o, const T *q, const T *k, const T *v, const T *m, float *lse, sd_geom g) {
  constexpr int BQ = SD_FWD_BQ, BK = SD_FWD_BK(DM), RQ = BQ / SD_TY, RK = BK / SD_TX, RC = DM / SD_TX, L = DM + 1;
  /* 35 KiB at DM = 128 (29 KiB at 64); the +1 columns keep the rows of a
   * warp's reads in distinct banks */
  __shared__ float qs[BQ][L], ks[BK][L], vs[BK][L], ps[BQ][BK + 1];
  const int tx = threadIdx.x % SD_TX, ty = threadIdx.x / SD_TX, D = (int)g.D, Dv = (int)g.Dv;
  sd_zero_cols<BK>(vs, Dv, DM);
  long long tiles = (g.T + BQ - 1) / BQ, n = g.B * g.H * tiles;
  for (long long w = blockIdx.x; w < n; w += gridDim.x) {
    const sd_qtile t = sd_qtile_of(g, w, tiles, BQ);
    const long long b = t.b, h = t.h, bh = t.bh, q0 = t.q0;
    const int nq = t.nq;
    __syncthreads(); /* the previous item's reads of qs are done */
    sd_load<BQ>(qs, q, bh * g.T + q0, nq, D, g.scale);
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
      sd_load<BK>(ks, k, t.kh * g.S + j0, nk, D, 1.0f);
      sd_load<BK>(vs, v, t.kh * g.S + j0, nk, Dv, 1.0f);
      __syncthreads();
      float s[RQ][RK];
      sd_tile_dot(s, qs, ks, D);
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
      for (int j = 0; j < nk; j++) sd_tile_axpy(acc, ps, vs, j);
    }
#pragma unroll
    for (int i = 0; i < RQ; i++) {
      const int ri = ty + SD_TY * i;
      float sum = sd_gsum(l[i]), inv = sum > 0.0f ? 1.0f / sum : 0.0f;
#pragma unroll
      for (int c = 0; c < RC; c++) acc[i][c] *= inv;
      if (tx == 0 && ri < nq) lse[bh * g.T + q0 + ri] = sum > 0.0f ? mx[i] + logf(sum) : -INFINITY;
    }
    sd_tile_store(o, acc, bh * g.T + q0, nq, Dv, 1.0f);
  }
}

/* delta = dO . out of query row r (n = Dv, or 0 for a row past the end),
 * summed by the row group: the same bits in both backward kernels */
template <typename T> AGK_DEV float sd_delta(const T *dO, const T *out, long long r, int n) {
  float d = 0.0f;
  for (int e = threadIdx.x % SD_TX; e < n; e += SD_TX) d += agk_tof(dO[r * n + e]) * agk_tof(out[r * n + e]);
  return sd_gsum(d);
}

/* dq, a block per (b, h, tile of BQ queries) streaming the key tiles as the
 * forward: p = exp(s - lse) recomputed, dp = dO . v_j, ds = p (dp * mult -
 * delta), dq = scale * sum_j ds k_j. Thread (ty, tx) owns query rows
 * ty + SD_TY*i, the scores of keys tx + SD_TX*jj and dq columns
 * tx + SD_TX*c. */
template <typename T, int DM>
__global__ void SD_BOUNDS k_sdpa_bwd_dq(T *dq, const T *dO, const T *q, const T *k, const T *v, const T *m,
                                        const float *lse, const T *out, sd_geom g) {
  constexpr int BQ = SD_DQ_BQ(DM), BK = SD_DQ_BK, RQ = BQ / SD_TY, RK = BK / SD_TX, RC = DM / SD_TX, L = DM + 1;
  /* 33 KiB at DM = 128 (27 KiB at 64) */
  __shared__ float qs[BQ][L], gs[BQ][L], ks[BK][L], vs[BK][L], dss[BQ][BK + 1];
  const int tx = threadIdx.x % SD_TX, ty = threadIdx.x / SD_TX, D = (int)g.D, Dv = (int)g.Dv;
  sd_zero_cols<BK>(ks, D, DM);
  long long tiles = (g.T + BQ - 1) / BQ, n = g.B * g.H * tiles;
  for (long long w = blockIdx.x; w < n; w += gridDim.x) {
    const sd_qtile t = sd_qtile_of(g, w, tiles, BQ);
    const long long b = t.b, h = t.h, bh = t.bh, q0 = t.q0;
    const int nq = t.nq;
    __syncthreads(); /* the previous item's reads of qs, gs are done */
    sd_load<BQ>(qs, q, bh * g.T + q0, nq, D, g.scale);
    sd_load<BQ>(gs, dO, bh * g.T + q0, nq, Dv, 1.0f);
    float acc[RQ][RC], ls[RQ], dl[RQ];
#pragma unroll
    for (int i = 0; i < RQ; i++) {
      const int ri = ty + SD_TY * i;
      const long long r = bh * g.T + q0 + ri;
      dl[i] = sd_delta(dO, out, r, ri < nq ? Dv : 0);
      ls[i] = ri < nq ? lse[r] : -INFINITY;
#pragma unroll
      for (int c = 0; c < RC; c++) acc[i][c] = 0.0f;
    }
    long long jend = g.causal && q0 + nq < g.S ? q0 + nq : g.S;
    for (long long j0 = 0; j0 < jend; j0 += BK) {
      int nk = (int)(jend - j0 < BK ? jend - j0 : BK);
      __syncthreads(); /* the previous tile's reads of ks, vs, dss are done */
      sd_load<BK>(ks, k, t.kh * g.S + j0, nk, D, 1.0f);
      sd_load<BK>(vs, v, t.kh * g.S + j0, nk, Dv, 1.0f);
      __syncthreads();
      float s[RQ][RK], dp[RQ][RK];
      sd_tile_dot(s, qs, ks, D);
      sd_tile_dot(dp, gs, vs, Dv);
#pragma unroll
      for (int i = 0; i < RQ; i++) {
        const int ri = ty + SD_TY * i;
        const long long qi = q0 + ri;
#pragma unroll
        for (int jj = 0; jj < RK; jj++) {
          const int cj = tx + SD_TX * jj;
          float sc = sd_score(g, m, b, h, qi, j0 + cj, ri < nq && cj < nk && ls[i] != -INFINITY, s[i][jj]), pd, ds;
          sd_grad(g, (bh * g.T + qi) * g.S + j0 + cj, sc, dp[i][jj], ls[i], dl[i], pd, ds);
          dss[ri][cj] = ds;
        }
      }
      __syncthreads();
      for (int j = 0; j < nk; j++) sd_tile_axpy(acc, dss, ks, j);
    }
    sd_tile_store(dq, acc, bh * g.T + q0, nq, D, g.scale);
  }
}

/* dk, dv, a block per (b, kv head, tile of BK keys): the q and dO rows of
 * every query head of the group stream through shared memory in tiles of
 * BQ = SD_TY rows (with each row's log-sum-exp and delta), in order, so
 * each key row has one writer and a fixed summation order. dv = sum_i
 * p * mult * dO_i, dk = sum_i ds * scale * q_i. Thread (ty, tx) owns key
 * rows ty + SD_TY*i, the scores of queries tx + SD_TX*ii and dk/dv columns
 * tx + SD_TX*c. */
template <typename T, int DM>
__global__ void SD_BOUNDS k_sdpa_bwd_dkv(T *dk, T *dv, const T *dO, const T *q, const T *k, const T *v,
                                         const T *m, const float *lse, const T *out, sd_geom g) {
  constexpr int BK = SD_DKV_BK(DM), BQ = SD_DKV_BQ, RK = BK / SD_TY, RQ = BQ / SD_TX, RC = DM / SD_TX, L = DM + 1;
  static_assert(BQ == SD_TY, "a row group per query row of a tile computes its delta");
  /* 35 KiB at DM = 128 (29 KiB at 64) */
  __shared__ float ks[BK][L], vs[BK][L], qs[BQ][L], gs[BQ][L], pds[BK][BQ + 1], dss[BK][BQ + 1];
  __shared__ float lss[BQ], dls[BQ];
  const int tx = threadIdx.x % SD_TX, ty = threadIdx.x / SD_TX, D = (int)g.D, Dv = (int)g.Dv;
  sd_zero_cols<BQ>(qs, D, DM);
  sd_zero_cols<BQ>(gs, Dv, DM);
  long long tiles = (g.S + BK - 1) / BK, n = g.B * g.Hkv * tiles, G = g.H / g.Hkv;
  for (long long w = blockIdx.x; w < n; w += gridDim.x) {
    long long jt = w % tiles, kh = w / tiles, b = kh / g.Hkv, j0 = jt * BK;
    int nk = (int)(g.S - j0 < BK ? g.S - j0 : BK);
    __syncthreads(); /* the previous item's reads of ks, vs are done */
    sd_load<BK>(ks, k, kh * g.S + j0, nk, D, 1.0f);
    sd_load<BK>(vs, v, kh * g.S + j0, nk, Dv, 1.0f);
    float gk[RK][RC], gv[RK][RC];
#pragma unroll
    for (int i = 0; i < RK; i++)
#pragma unroll
      for (int c = 0; c < RC; c++) gk[i][c] = gv[i][c] = 0.0f;
    /* under causal, queries before the tile's first key see none of it */
    long long i0 = g.causal ? j0 / BQ * BQ : 0;
    for (long long hh = 0; hh < G; hh++) {
      long long h = (kh % g.Hkv) * G + hh, bh = b * g.H + h;
      for (long long q0 = i0; q0 < g.T; q0 += BQ) {
        int nq = (int)(g.T - q0 < BQ ? g.T - q0 : BQ);
        __syncthreads(); /* the previous tile's reads of qs, gs, pds, dss, lss, dls are done */
        sd_load<BQ>(qs, q, bh * g.T + q0, nq, D, g.scale);
        sd_load<BQ>(gs, dO, bh * g.T + q0, nq, Dv, 1.0f);
        {
          long long r = bh * g.T + q0 + ty; /* row group ty: query row ty of the tile */
          float dl = sd_delta(dO, out, r, ty < nq ? Dv : 0);
          if (tx == 0) {
            dls[ty] = dl;
            lss[ty] = ty < nq ? lse[r] : -INFINITY;
          }
        }
        __syncthreads();
        float s[RK][RQ], dp[RK][RQ];
        sd_tile_dot(s, ks, qs, D);
        sd_tile_dot(dp, vs, gs, Dv);
#pragma unroll
        for (int i = 0; i < RK; i++) {
          const int kj = ty + SD_TY * i;
#pragma unroll
          for (int ii = 0; ii < RQ; ii++) {
            const int qi = tx + SD_TX * ii;
            const float ls = lss[qi];
            float sc = sd_score(g, m, b, h, q0 + qi, j0 + kj, kj < nk && qi < nq && ls != -INFINITY, s[i][ii]);
            float pd, ds;
            sd_grad(g, (bh * g.T + q0 + qi) * g.S + j0 + kj, sc, dp[i][ii], ls, dls[qi], pd, ds);
            pds[kj][qi] = pd;
            dss[kj][qi] = ds;
          }
        }
        __syncthreads();
        for (int ii = 0; ii < nq; ii++) {
          sd_tile_axpy(gv, pds, gs, ii);
          sd_tile_axpy(gk, dss, qs, ii);
        }
      }
    }
    sd_tile_store(dk, gk, kh * g.S + j0, nk, D, 1.0f);
    sd_tile_store(dv, gv, kh * g.S + j0, nk, Dv, 1.0f);
  }
}

/* The geometry and scalars of a call (SDPA and SDPA_BWD name them alike);
 * false for heads the kernels lack (gpuErrorNotSupported: the core runs the
 * unfused composition). */
template <typename A> static bool sd_geom_of(const A *a, sd_geom *out) {
  const ag_koperand *q = a->q, *k = a->k, *v = a->v, *mo = a->mask;
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
  g.scale = (float)a->scale;
  g.p = (float)a->dropout_p;
  g.keep = (float)(a->dropout_p < 1 ? 1.0 / (1.0 - a->dropout_p) : 0.0);
  g.causal = a->causal != 0;
  g.seed = a->call->seed;
  g.offset = a->call->offset;
  *out = g;
  /* tiles and per-thread columns of DM = 64 or 128 */
  return !(g.D > SD_MAXD || g.Dv > SD_MAXD || g.Hkv <= 0 || g.H % g.Hkv != 0);
}

gpuError_t agk_sdpa(const agk_env *env, const ag_k_sdpa *a) {
  sd_geom g;
  if (!sd_geom_of(a, &g)) return gpuErrorNotSupported;
  const bool dm64 = g.D <= 64 && g.Dv <= 64;
  const void *mp = agk_optr(a->mask);
  if (g.B * g.H * g.T == 0) return gpuSuccess;
  unsigned nb = agk_blocks(g.B * g.H * ((g.T + SD_FWD_BQ - 1) / SD_FWD_BQ), 1, SD_NT, agk_wave(env, SD_NT));
  AGK_DISPATCH_F32ISH(a->q->dtype, T,
                      agk_launch(dm64 ? k_sdpa<T, 64> : k_sdpa<T, 128>, nb, SD_NT, 0, env->stream,
                                 (T *)agk_ptr(a->out), (const T *)agk_ptr(a->q), (const T *)agk_ptr(a->k),
                                 (const T *)agk_ptr(a->v), (const T *)mp, (float *)agk_optr(a->lse), g));
  return gpuGetLastError();
}

gpuError_t agk_sdpa_bwd(const agk_env *env, const ag_k_sdpa_bwd *a) {
  sd_geom g;
  if (!sd_geom_of(a, &g)) return gpuErrorNotSupported;
  const bool dm64 = g.D <= 64 && g.Dv <= 64;
  const void *mp = agk_optr(a->mask);
  const long long wave = agk_wave(env, SD_NT);
  if (AGK_MULTI_GROUPS(a) < 1) return gpuErrorNotSupported;
  char *dq = AGK_MULTI_PTR(a, 0, dq), *dk = AGK_MULTI_PTR(a, 0, dk), *dv = AGK_MULTI_PTR(a, 0, dv);
  const char *out = AGK_MULTI_PTR(a, 0, out);
  if (g.B * g.H * g.T > 0) {
    const long long bq = dm64 ? SD_DQ_BQ(64) : SD_DQ_BQ(128);
    unsigned nb = agk_blocks(g.B * g.H * ((g.T + bq - 1) / bq), 1, SD_NT, wave);
    AGK_DISPATCH_F32ISH(a->q->dtype, T,
                        agk_launch(dm64 ? k_sdpa_bwd_dq<T, 64> : k_sdpa_bwd_dq<T, 128>, nb, SD_NT, 0, env->stream,
                                   (T *)dq, (const T *)agk_ptr(a->dout), (const T *)agk_ptr(a->q),
                                   (const T *)agk_ptr(a->k), (const T *)agk_ptr(a->v), (const T *)mp,
                                   (const float *)agk_ptr(a->lse), (const T *)out, g));
    gpuError_t e = gpuGetLastError();
    if (e != gpuSuccess) return e;
  }
  if (g.B * g.Hkv * g.S > 0) {
    const long long bk = dm64 ? SD_DKV_BK(64) : SD_DKV_BK(128);
    unsigned nb = agk_blocks(g.B * g.Hkv * ((g.S + bk - 1) / bk), 1, SD_NT, wave);
    AGK_DISPATCH_F32ISH(a->q->dtype, T,
                        agk_launch(dm64 ? k_sdpa_bwd_dkv<T, 64> : k_sdpa_bwd_dkv<T, 128>, nb, SD_NT, 0,
                                   env->stream, (T *)dk, (T *)dv, (const T *)agk_ptr(a->dout),
                                   (const T *)agk_ptr(a->q), (const T *)agk_ptr(a->k), (const T *)agk_ptr(a->v),
                                   (const T *)mp, (const float *)agk_ptr(a->lse), (const T *)out, g));
    return gpuGetLastError();
  }
  return gpuSuccess;
}
