#version 450
/* Scaled dot-product attention (AG_K_SDPA, AG_K_SDPA_BWD), flash style, as
 * kernels/gpu/attention.cu: a work-group of NR (64) invocations holds NR
 * query rows of one (batch, head), one each, and streams the keys and
 * values through shared memory in tiles of SQ (16) rows, loaded by all NR
 * invocations, with an online softmax (f32); only the per-row log-sum-exp
 * is kept. The backward recomputes p = exp(s - lse): dq over query tiles
 * as the forward; dk and dv over key tiles of NR rows, one invocation per
 * key row summing over the query heads of its group and every query tile
 * (SKV rows at a time) in order. Each row's arithmetic and its order do not
 * depend on NR (a row skips the keys past it under causal), so the results
 * are those of any tile size. No atomics, no subgroup operations, results
 * repeat. Heads up to MAXD; the shared tiles fit 16 KiB (the smallest limit
 * the module accepts). Dropout: element ((b*H + h)*T + i)*S + j of the
 * Philox stream.
 *
 * Arguments: n0..n6 B, H, Hkv, T, S, D, Dv; n7..n10 mask element strides;
 * n11 seed, n12 offset; f0 scale, f1 p, f2 1/(1-p); k0 dtype, k1 causal.
 * Forward: p0 out, p1 q, p2 k, p3 v, p4 mask (0: none), p5 lse (f32).
 * Backward: p0 dq, p1 q, p2 k, p3 v, p4 mask, p5 lse, p6 dO, p7 out;
 * n13 dk, n14 dv (addresses). */
#include "common.glsl"

#define NR 64  /* invocations (query or key rows) per work-group */
#define SQ 16  /* key rows per shared tile (forward, dq) */
#define SKV 15 /* query rows per shared tile (dk, dv) */
#define MAXD 128
layout(local_size_x = NR) in;

#define L int(gl_LocalInvocationID.x)

float sd_mult(int64_t idx) {
  float p = pc.a.f[1];
  if (p <= 0.0) return 1.0;
  uvec4 r = philox(uint64_t(pc.a.n[12]) + uint64_t(idx >> 2), uint64_t(pc.a.n[11]));
  uint bits = r[int(idx & 3l)];
  return float(bits >> 8) * (1.0 / 16777216.0) >= p ? pc.a.f[2] : 0.0;
}

/* the mask's and the causal rule's part of score (b, h, i, j). A key whose
 * score is -inf (masked, or causal) is skipped: tested on the bits, so no
 * driver's assumption about infinities changes which keys count. */
float sd_bias(int64_t b, int64_t h, int64_t i, int64_t j) {
  if (pc.a.k[1] != 0 && j > i) return -F_INF;
  uint64_t m = pc.a.p[4];
  if (m == 0ul) return 0.0;
  return ldf(m, b * pc.a.n[7] + h * pc.a.n[8] + i * pc.a.n[9] + j * pc.a.n[10], pc.a.k[0]);
}

#if defined(K_SDPA) || defined(K_SDPA_BWD_DQ)
shared float ks[SQ * MAXD];
shared float vs[SQ * MAXD];

void main() {
  int64_t B = pc.a.n[0], H = pc.a.n[1], Hkv = pc.a.n[2], T = pc.a.n[3], S = pc.a.n[4], D = pc.a.n[5],
          Dv = pc.a.n[6];
  int dt = pc.a.k[0];
  int64_t tiles = (T + NR - 1) / NR, w = group_id();
  if (w >= B * H * tiles) return;
  int64_t qt = w % tiles, bh = w / tiles, h = bh % H, b = bh / H, kh = b * Hkv + h / (H / Hkv);
  int64_t i = qt * NR + L, r = bh * T + i;
  bool live = i < T;
  float scale = pc.a.f[0];
  float qv[MAXD], acc[MAXD];
  for (int64_t d = 0; d < D; d++) {
    qv[int(d)] = live ? ldf(pc.a.p[1], r * D + d, dt) * scale : 0.0;
    acc[int(d)] = 0.0;
  }
#if defined(K_SDPA)
  for (int64_t e = 0; e < Dv; e++) acc[int(e)] = 0.0;
  float mx = -F_INF, l = 0.0;
#else
  float go[MAXD];
  float dl = 0.0, ls = -F_INF;
  for (int64_t e = 0; e < Dv; e++) {
    go[int(e)] = live ? ldf(pc.a.p[6], r * Dv + e, dt) : 0.0;
    if (live) dl += go[int(e)] * ldf(pc.a.p[7], r * Dv + e, dt);
  }
  if (live) ls = PF(pc.a.p[5], r);
#endif
  int64_t last = min(qt * NR + NR, T);
  int64_t jend = pc.a.k[1] != 0 ? min(last, S) : S;
  for (int64_t j0 = 0; j0 < jend; j0 += SQ) {
    int nk = int(min(jend - j0, int64_t(SQ)));
    barrier(); /* the previous tile is read */
    for (int t = L; t < nk * int(D); t += NR) ks[(t / int(D)) * MAXD + t % int(D)] = ldf(pc.a.p[2], (kh * S + j0) * D + t, dt);
    for (int t = L; t < nk * int(Dv); t += NR)
      vs[(t / int(Dv)) * MAXD + t % int(Dv)] = ldf(pc.a.p[3], (kh * S + j0) * Dv + t, dt);
    barrier();
#if defined(K_SDPA)
    if (live) {
      for (int jj = 0; jj < nk; jj++) {
        float s = sd_bias(b, h, i, j0 + jj);
        if (ag_is_neg_inf(s)) continue;
        for (int d = 0; d < int(D); d++) s += qv[d] * ks[jj * MAXD + d];
        if (ag_is_neg_inf(s)) continue;
        float mn = ag_fmax(mx, s), alpha = ag_is_neg_inf(mx) ? 0.0 : exp(mx - mn), pe = exp(s - mn);
        l = l * alpha + pe;
        mx = mn;
        float pd = pe * sd_mult(r * S + j0 + jj);
        for (int e = 0; e < int(Dv); e++) acc[e] = acc[e] * alpha + pd * vs[jj * MAXD + e];
      }
    }
#else
    if (live && !ag_is_neg_inf(ls)) {
      for (int jj = 0; jj < nk; jj++) {
        float s = sd_bias(b, h, i, j0 + jj);
        if (ag_is_neg_inf(s)) continue;
        for (int d = 0; d < int(D); d++) s += qv[d] * ks[jj * MAXD + d];
        if (ag_is_neg_inf(s)) continue;
        float p = exp(s - ls), dp = 0.0;
        for (int e = 0; e < int(Dv); e++) dp += go[e] * vs[jj * MAXD + e];
        float ds = p * (dp * sd_mult(r * S + j0 + jj) - dl);
        for (int d = 0; d < int(D); d++) acc[d] += ds * ks[jj * MAXD + d];
      }
    }
#endif
  }
  if (!live) return;
#if defined(K_SDPA)
  float inv = l > 0.0 ? 1.0 / l : 0.0;
  for (int e = 0; e < int(Dv); e++) stf(pc.a.p[0], r * Dv + e, dt, acc[e] * inv);
  PF(pc.a.p[5], r) = l > 0.0 ? mx + log(l) : -F_INF;
#else
  for (int d = 0; d < int(D); d++) stf(pc.a.p[0], r * D + d, dt, acc[d] * scale);
#endif
}
#endif

#if defined(K_SDPA_BWD_DKV)
shared float qs[SKV * MAXD];
shared float gs[SKV * MAXD];
shared float lss[SKV], dls[SKV];

void main() {
  int64_t B = pc.a.n[0], H = pc.a.n[1], Hkv = pc.a.n[2], T = pc.a.n[3], S = pc.a.n[4], D = pc.a.n[5],
          Dv = pc.a.n[6];
  int dt = pc.a.k[0];
  int64_t tiles = (S + NR - 1) / NR, w = group_id(), G = H / Hkv;
  if (w >= B * Hkv * tiles) return;
  int64_t jt = w % tiles, kh = w / tiles, b = kh / Hkv;
  int64_t j = jt * NR + L, t = kh * S + j;
  bool live = j < S;
  float scale = pc.a.f[0];
  float kv[MAXD], vv[MAXD], gk[MAXD], gv[MAXD];
  for (int d = 0; d < int(D); d++) {
    kv[d] = live ? ldf(pc.a.p[2], t * D + d, dt) : 0.0;
    gk[d] = 0.0;
  }
  for (int e = 0; e < int(Dv); e++) {
    vv[e] = live ? ldf(pc.a.p[3], t * Dv + e, dt) : 0.0;
    gv[e] = 0.0;
  }
  /* under causal, queries before the tile's first key see none of it */
  int64_t i0 = pc.a.k[1] != 0 ? jt * NR / SKV * SKV : 0;
  for (int64_t hh = 0; hh < G; hh++) {
    int64_t h = (kh % Hkv) * G + hh, bh = b * H + h;
    for (int64_t q0 = i0; q0 < T; q0 += SKV) {
      int nq = int(min(T - q0, int64_t(SKV)));
      barrier();
      for (int x = L; x < nq * int(D); x += NR)
        qs[(x / int(D)) * MAXD + x % int(D)] = ldf(pc.a.p[1], (bh * T + q0) * D + x, dt) * scale;
      for (int x = L; x < nq * int(Dv); x += NR)
        gs[(x / int(Dv)) * MAXD + x % int(Dv)] = ldf(pc.a.p[6], (bh * T + q0) * Dv + x, dt);
      if (L < nq) {
        int64_t r = bh * T + q0 + L;
        float dl = 0.0;
        for (int e = 0; e < int(Dv); e++) dl += ldf(pc.a.p[6], r * Dv + e, dt) * ldf(pc.a.p[7], r * Dv + e, dt);
        lss[L] = PF(pc.a.p[5], r);
        dls[L] = dl;
      }
      barrier();
      if (live) {
        for (int ii = 0; ii < nq; ii++) {
          int64_t i = q0 + ii, r = bh * T + i;
          if (ag_is_neg_inf(lss[ii])) continue;
          float s = sd_bias(b, h, i, j);
          if (ag_is_neg_inf(s)) continue;
          for (int d = 0; d < int(D); d++) s += qs[ii * MAXD + d] * kv[d];
          if (ag_is_neg_inf(s)) continue;
          float p = exp(s - lss[ii]), mult = sd_mult(r * S + j), dp = 0.0;
          for (int e = 0; e < int(Dv); e++) {
            dp += gs[ii * MAXD + e] * vv[e];
            gv[e] += p * mult * gs[ii * MAXD + e];
          }
          float ds = p * (dp * mult - dls[ii]);
          for (int d = 0; d < int(D); d++) gk[d] += ds * qs[ii * MAXD + d];
        }
      }
    }
  }
  if (!live) return;
  for (int d = 0; d < int(D); d++) stf(uint64_t(pc.a.n[13]), t * D + d, dt, gk[d]);
  for (int e = 0; e < int(Dv); e++) stf(uint64_t(pc.a.n[14]), t * Dv + e, dt, gv[e]);
}
#endif
