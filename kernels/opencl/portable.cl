/* Portable-numerics kernels (docs/numerics.md), only in the portable
 * program: the canonical sum S, the sequential-k GEMM, the device probe and
 * the row kernels that replace the default ones of the same name (nn.cl
 * leaves those out under AG_PORTABLE, so the host's arguments are the
 * same). Row kernels run as work-groups of exactly 256 work-items. */
#ifdef AG_PORTABLE

/* One block of S: t[i] for the 256 work-items, then t[i] += t[i + s] for
 * s = 128 .. 1; every work-item gets t[0]. sh: 256 floats. */
float ps_tree(float t, __local float *sh) {
  int l = get_local_id(0);
  sh[l] = t;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int s = 128; s > 0; s >>= 1) {
    if (l < s) sh[l] = sh[l] + sh[l + s];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  float r = sh[0];
  barrier(CLK_LOCAL_MEM_FENCE);
  return r;
}

#define PS_LOCAL (5 * 256) /* the tree and four levels of block sums */

/* OUT = S(TERM for ps_i in [0, N)): a full 256-ary tree of fixed binary
 * trees, +0 for the leaves past N, which is S's recursion (a level of one
 * node is the result; a node with no leaves is never formed, and +0 is
 * what the tree pads with). Level k's node sums wait in SH[256 * k ..]
 * until their parent's 256 are complete. MINTOP > 0 forces that many
 * levels above the blocks (a chunk's node of a multi-pass sum is a tree
 * over its block sums even when there is one). N < 2^40. Uniform control
 * flow: every work-item of the group runs it. */
#define PS_SUM_TOP(OUT, N, SH, TERM, MINTOP)                                      \
  do {                                                                           \
    const long ps_n = (N);                                                       \
    const int ps_l = get_local_id(0);                                            \
    long ps_c[5];                                                                \
    int ps_top = 0;                                                              \
    ps_c[0] = ps_n > 256 ? (ps_n + 255) / 256 : 1;                               \
    while (ps_top < 4 && (ps_c[ps_top] > 1 || ps_top < (MINTOP))) {              \
      ps_c[ps_top + 1] = (ps_c[ps_top] + 255) / 256;                             \
      ps_top++;                                                                  \
    }                                                                            \
    for (long ps_b = 0; ps_b < ps_c[0]; ps_b++) {                                \
      const long ps_i = ps_b * 256 + ps_l;                                       \
      float ps_v = ps_tree(ps_i < ps_n ? (TERM) : 0.0f, SH);                     \
      long ps_idx = ps_b;                                                        \
      int ps_k = 0;                                                              \
      while (ps_k < ps_top) {                                                    \
        const int ps_slot = (int)(ps_idx & 255);                                 \
        if (ps_l == 0) SH[256 * (ps_k + 1) + ps_slot] = ps_v;                    \
        if (ps_slot != 255 && ps_idx != ps_c[ps_k] - 1) break;                   \
        barrier(CLK_LOCAL_MEM_FENCE);                                            \
        ps_v = ps_tree(ps_l <= ps_slot ? SH[256 * (ps_k + 1) + ps_l] : 0.0f, SH); \
        ps_idx >>= 8;                                                            \
        ps_k++;                                                                  \
      }                                                                          \
      if (ps_k == ps_top) OUT = ps_v;                                            \
    }                                                                            \
  } while (0)
#define PS_SUM(OUT, N, SH, TERM) PS_SUM_TOP(OUT, N, SH, TERM, 0)

/* Max of the non-NaN values of a row (-inf if none): a strided pass, then
 * a tree; of equal values the first in the row is kept (+0 and -0 differ),
 * as the sequential definition's. SH: 512 floats (values, then indices). */
#define PS_MAX(OUT, N, SH, TERM)                                                 \
  do {                                                                           \
    const int pm_l = get_local_id(0);                                            \
    __local int *pm_ix = (__local int *)(SH) + 256;                              \
    float pm_m = -INFINITY;                                                      \
    int pm_i = INT_MAX;                                                          \
    for (long ps_i = pm_l; ps_i < (N); ps_i += 256) {                            \
      float pm_v = (TERM);                                                       \
      if (pm_v > pm_m) {                                                         \
        pm_m = pm_v;                                                             \
        pm_i = (int)ps_i;                                                        \
      }                                                                          \
    }                                                                            \
    SH[pm_l] = pm_m;                                                             \
    pm_ix[pm_l] = pm_i;                                                          \
    barrier(CLK_LOCAL_MEM_FENCE);                                                \
    for (int pm_s = 128; pm_s > 0; pm_s >>= 1) {                                 \
      if (pm_l < pm_s) {                                                         \
        float pm_a = SH[pm_l], pm_b = SH[pm_l + pm_s];                           \
        if (pm_b > pm_a || (pm_b == pm_a && pm_ix[pm_l + pm_s] < pm_ix[pm_l])) { \
          SH[pm_l] = pm_b;                                                       \
          pm_ix[pm_l] = pm_ix[pm_l + pm_s];                                      \
        }                                                                        \
      }                                                                          \
      barrier(CLK_LOCAL_MEM_FENCE);                                              \
    }                                                                            \
    OUT = SH[0];                                                                 \
    barrier(CLK_LOCAL_MEM_FENCE);                                                \
  } while (0)

/* out[g] = S(x[ou, c*chunk + j, in] for j < the chunk's length) (times
 * scale when use_scale; squared terms when sq) for group g = (ou * inner +
 * in) * nchunks + c: a row of the reduction, or one chunk's level-2 node
 * (mintop 1) of a long row summed in two passes. */
__kernel void ag_psum(gbuf *o, ulong oo, int odt, const gbuf *x, ulong xo, int xdt, long r, long inner,
                      long chunk, long nchunks, int mintop, float scale, int use_scale, int sq) {
  __local float sh[PS_LOCAL];
  long g = get_group_id(0), t = g / nchunks, c = g % nchunks;
  long ou = t / inner, in = t % inner;
  long j0 = c * chunk, len = min(chunk, r - j0);
  long base = (ou * r + j0) * inner + in;
  float v = 0.0f;
  if (sq) {
    PS_SUM_TOP(v, len, sh, ldf(x, xo, base + ps_i * inner, xdt) * ldf(x, xo, base + ps_i * inner, xdt), mintop);
  } else {
    PS_SUM_TOP(v, len, sh, ldf(x, xo, base + ps_i * inner, xdt), mintop);
  }
  if (get_local_id(0) == 0) stf(o, oo, g, odt, use_scale ? v * scale : v);
}

/* c[b] = alpha * (a[b] @ b[b]) + beta * c[b], any strides: a work-item per
 * 4 x 4 block of outputs, each output adding its k terms in order from +0
 * (docs/numerics.md MATMUL). Edge blocks load clamped rows and columns and
 * store only theirs. */
#define PM_B 4
__kernel void ag_pmatmul(gbuf *c, ulong co, const gbuf *a, ulong ao, const gbuf *b, ulong bo, int dt,
                         long M, long N, long K, long sab, long sam, long sak, long sbb, long sbk,
                         long sbn, long scb, long scm, long scn, float alpha, int use_alpha, float beta,
                         int use_beta) {
  const long n0 = (long)get_global_id(0) * PM_B, m0 = (long)get_global_id(1) * PM_B, bt = get_global_id(2);
  if (n0 >= N || m0 >= M) return;
  long ra[PM_B], cb[PM_B];
  for (int i = 0; i < PM_B; i++) {
    ra[i] = bt * sab + min(m0 + i, M - 1) * sam;
    cb[i] = bt * sbb + min(n0 + i, N - 1) * sbn;
  }
  float acc[PM_B][PM_B];
  for (int i = 0; i < PM_B; i++)
    for (int j = 0; j < PM_B; j++) acc[i][j] = 0.0f;
  if (dt == DT_F32) {
    const __global float *A = (const __global float *)(a + ao), *Bm = (const __global float *)(b + bo);
    for (long k = 0; k < K; k++) {
      float av[PM_B], bv[PM_B];
      for (int i = 0; i < PM_B; i++) {
        av[i] = A[ra[i] + k * sak];
        bv[i] = Bm[cb[i] + k * sbk];
      }
      for (int i = 0; i < PM_B; i++)
        for (int j = 0; j < PM_B; j++) acc[i][j] = acc[i][j] + av[i] * bv[j];
    }
  } else {
    for (long k = 0; k < K; k++) {
      float av[PM_B], bv[PM_B];
      for (int i = 0; i < PM_B; i++) {
        av[i] = ldf(a, ao, ra[i] + k * sak, dt);
        bv[i] = ldf(b, bo, cb[i] + k * sbk, dt);
      }
      for (int i = 0; i < PM_B; i++)
        for (int j = 0; j < PM_B; j++) acc[i][j] = acc[i][j] + av[i] * bv[j];
    }
  }
  for (int i = 0; i < PM_B && m0 + i < M; i++)
    for (int j = 0; j < PM_B && n0 + j < N; j++) {
      long ci = bt * scb + (m0 + i) * scm + (n0 + j) * scn;
      float r = acc[i][j];
      if (use_alpha) r = alpha * r;
      if (use_beta) r = r + beta * ldf(c, co, ci, dt);
      stf(c, co, ci, dt, r);
    }
}

/* portable_check's probe: out[i] for the host to compare with its own
 * IEEE results (products and sums into and out of the subnormal range,
 * and pmath's division and square root). */
__kernel void ag_pprobe(__global float *out, const __global float *in) {
  if (get_global_id(0) != 0) return;
  out[0] = in[0] * in[1];          /* normal * normal -> subnormal */
  out[1] = in[2] + in[3];          /* subnormal + subnormal */
  out[2] = in[4] - in[5];          /* normal - normal -> subnormal */
  out[3] = in[2] * in[6];          /* subnormal * 2^k -> normal */
  out[4] = in[2] * in[7];          /* rounded subnormal product */
  out[5] = agp_div(in[8], in[9]);
  out[6] = agp_div(in[2], in[9]);  /* subnormal quotient */
  out[7] = agp_sqrt(in[8]);
  out[8] = agp_sqrt(in[2]);        /* square root of a subnormal */
  out[9] = in[8] * in[8] - in[10]; /* 0: two roundings, not an fma */
}

/* ---- row kernels (same names and arguments as nn.cl's) ---- */

#define PX(i) ldf(x, xo, base + (i), dt)

__kernel void ag_softmax(gbuf *y, ulong yo, const gbuf *x, ulong xo, int dt, long cols, int logm) {
  __local float sh[PS_LOCAL];
  long base = (long)get_group_id(0) * cols;
  int l = get_local_id(0);
  float mx, s = 0.0f;
  PS_MAX(mx, cols, sh, PX(ps_i));
  PS_SUM(s, cols, sh, agp_exp(PX(ps_i) - mx));
  float ls = logm ? agp_log(s) : 0.0f;
  for (long j = l; j < cols; j += 256) {
    float v = PX(j) - mx;
    stf(y, yo, base + j, dt, logm ? v - ls : agp_div(agp_exp(v), s));
  }
}

__kernel void ag_softmax_bwd(gbuf *dx, ulong dxo, const gbuf *dy, ulong dyo, const gbuf *y, ulong yo, int dt,
                             long cols, int logm) {
  __local float sh[PS_LOCAL];
  long base = (long)get_group_id(0) * cols;
  int l = get_local_id(0);
  float s = 0.0f;
  if (logm) {
    PS_SUM(s, cols, sh, ldf(dy, dyo, base + ps_i, dt));
  } else {
    PS_SUM(s, cols, sh, ldf(dy, dyo, base + ps_i, dt) * ldf(y, yo, base + ps_i, dt));
  }
  for (long j = l; j < cols; j += 256) {
    float g = ldf(dy, dyo, base + j, dt), yv = ldf(y, yo, base + j, dt);
    stf(dx, dxo, base + j, dt, logm ? g - agp_exp(yv) * s : yv * (g - s));
  }
}

__kernel void ag_cross_entropy(gbuf *loss, ulong lo, const gbuf *x, ulong xo, int dt, const gbuf *tg, ulong to,
                               long cols, int ignore, __global int *err) {
  __local float sh[PS_LOCAL];
  long row = get_group_id(0), base = row * cols;
  int l = get_local_id(0);
  int t = ((const __global int *)(tg + to))[row];
  if (t == ignore) {
    if (l == 0) stf(loss, lo, row, DT_F32, 0.0f);
    return;
  }
  if (t < 0 || t >= cols) {
    if (l == 0) {
      stf(loss, lo, row, DT_F32, NAN);
      set_error(err, ERR_INDEX, AG_K_CROSS_ENTROPY, t, cols);
    }
    return;
  }
  float mx, s = 0.0f;
  PS_MAX(mx, cols, sh, PX(ps_i));
  PS_SUM(s, cols, sh, agp_exp(PX(ps_i) - mx));
  if (l == 0) stf(loss, lo, row, DT_F32, (mx + agp_log(s)) - PX(t));
}

__kernel void ag_cross_entropy_bwd(gbuf *dl, ulong dlo, const gbuf *x, ulong xo, int dt, const gbuf *tg, ulong to,
                                   const gbuf *g, ulong go, long gstride, long cols, int ignore,
                                   __global int *err) {
  __local float sh[PS_LOCAL];
  long row = get_group_id(0), base = row * cols;
  int l = get_local_id(0);
  int t = ((const __global int *)(tg + to))[row];
  if (t == ignore || t < 0 || t >= cols) {
    for (long j = l; j < cols; j += 256) stf(dl, dlo, base + j, dt, 0.0f);
    if (t != ignore && l == 0) set_error(err, ERR_INDEX, AG_K_CROSS_ENTROPY_BWD, t, cols);
    return;
  }
  float mx, s = 0.0f;
  PS_MAX(mx, cols, sh, PX(ps_i));
  PS_SUM(s, cols, sh, agp_exp(PX(ps_i) - mx));
  float gr = ldf(g, go, row * gstride, DT_F32);
  for (long j = l; j < cols; j += 256) {
    float p = agp_div(agp_exp(PX(j) - mx), s);
    stf(dl, dlo, base + j, dt, (p - (j == t ? 1.0f : 0.0f)) * gr);
  }
}

__kernel void ag_layernorm(gbuf *y, ulong yo, const gbuf *x, ulong xo, int dt, const gbuf *w, ulong wo,
                           const gbuf *b, ulong bo, __global float *mean, ulong mo, __global float *rstd,
                           ulong ro, long cols, float eps) {
  __local float sh[PS_LOCAL];
  long row = get_group_id(0), base = row * cols;
  int l = get_local_id(0);
  const float df = (float)cols;
  float s = 0.0f, v = 0.0f;
  PS_SUM(s, cols, sh, PX(ps_i));
  const float mu = agp_div(s, df);
  PS_SUM(v, cols, sh, (PX(ps_i) - mu) * (PX(ps_i) - mu));
  const float var = agp_div(v, df);
  const float rs = agp_div(1.0f, agp_sqrt(var + eps));
  for (long j = l; j < cols; j += 256) {
    float o = (PX(j) - mu) * rs;
    if (w) o = o * ldf(w, wo, j, dt);
    if (b) o = o + ldf(b, bo, j, dt);
    stf(y, yo, base + j, dt, o);
  }
  if (l == 0) {
    if (mean) stf((gbuf *)mean, mo, row, DT_F32, mu);
    if (rstd) stf((gbuf *)rstd, ro, row, DT_F32, rs);
  }
}

#define PG(i) (w ? ldf(dy, dyo, base + (i), dt) * ldf(w, wo, (i), dt) : ldf(dy, dyo, base + (i), dt))
#define PXH(i) ((PX(i) - mu) * rs)

__kernel void ag_layernorm_bwd(gbuf *dx, ulong dxo, const gbuf *dy, ulong dyo, const gbuf *x, ulong xo, int dt,
                               const gbuf *mean, ulong mo, const gbuf *rstd, ulong ro, const gbuf *w, ulong wo,
                               long cols) {
  __local float sh[PS_LOCAL];
  long row = get_group_id(0), base = row * cols;
  int l = get_local_id(0);
  const float mu = ldf(mean, mo, row, DT_F32), rs = ldf(rstd, ro, row, DT_F32), df = (float)cols;
  float s1 = 0.0f, s2 = 0.0f;
  PS_SUM(s1, cols, sh, PG(ps_i));
  PS_SUM(s2, cols, sh, PG(ps_i) * PXH(ps_i));
  const float a = agp_div(s1, df), bb = agp_div(s2, df);
  for (long j = l; j < cols; j += 256) stf(dx, dxo, base + j, dt, ((PG(j) - a) - PXH(j) * bb) * rs);
}

/* dw[j] = S over rows of dy * xhat, db[j] = S over rows of dy: a group per
 * column. */
__kernel void ag_layernorm_bwd_wb(gbuf *dw, ulong dwo, gbuf *db, ulong dbo, const gbuf *dy, ulong dyo, const gbuf *x,
                                  ulong xo, int dt, const gbuf *mean, ulong mo, const gbuf *rstd, ulong ro, long rows,
                                  long cols) {
  __local float sh[PS_LOCAL];
  long j = get_group_id(0);
  float sw = 0.0f, sb = 0.0f;
#define PWB_DY(r) ldf(dy, dyo, (r) * cols + j, dt)
#define PWB_XH(r) ((ldf(x, xo, (r) * cols + j, dt) - ldf(mean, mo, (r), DT_F32)) * ldf(rstd, ro, (r), DT_F32))
  if (dw) PS_SUM(sw, rows, sh, PWB_DY(ps_i) * PWB_XH(ps_i));
  if (db) PS_SUM(sb, rows, sh, PWB_DY(ps_i));
  if (get_local_id(0) == 0) {
    if (dw) stf(dw, dwo, j, DT_F32, sw);
    if (db) stf(db, dbo, j, DT_F32, sb);
  }
}

__kernel void ag_rmsnorm(gbuf *y, ulong yo, const gbuf *x, ulong xo, int dt, const gbuf *w, ulong wo,
                         __global float *rstd, ulong ro, long cols, float eps) {
  __local float sh[PS_LOCAL];
  long row = get_group_id(0), base = row * cols;
  int l = get_local_id(0);
  float s = 0.0f;
  PS_SUM(s, cols, sh, PX(ps_i) * PX(ps_i));
  const float ms = agp_div(s, (float)cols);
  const float rs = agp_div(1.0f, agp_sqrt(ms + eps));
  for (long j = l; j < cols; j += 256) {
    float o = PX(j) * rs;
    if (w) o = o * ldf(w, wo, j, dt);
    stf(y, yo, base + j, dt, o);
  }
  if (l == 0 && rstd) stf((gbuf *)rstd, ro, row, DT_F32, rs);
}

__kernel void ag_rmsnorm_bwd(gbuf *dx, ulong dxo, const gbuf *dy, ulong dyo, const gbuf *x, ulong xo, int dt,
                             const gbuf *rstd, ulong ro, const gbuf *w, ulong wo, long cols) {
  __local float sh[PS_LOCAL];
  long row = get_group_id(0), base = row * cols;
  int l = get_local_id(0);
  const float rs = ldf(rstd, ro, row, DT_F32);
  float s = 0.0f;
  PS_SUM(s, cols, sh, PG(ps_i) * PX(ps_i));
  const float m = agp_div(s, (float)cols);
  const float c = (rs * rs) * m;
  for (long j = l; j < cols; j += 256) stf(dx, dxo, base + j, dt, (PG(j) - PX(j) * c) * rs);
}

/* dw[j] = S over rows of (dy * x) * rstd: a group per column. */
__kernel void ag_rmsnorm_bwd_w(gbuf *dw, ulong dwo, const gbuf *dy, ulong dyo, const gbuf *x, ulong xo, int dt,
                               const gbuf *rstd, ulong ro, long rows, long cols) {
  __local float sh[PS_LOCAL];
  long j = get_group_id(0);
  float sw = 0.0f;
  PS_SUM(sw, rows, sh,
         (ldf(dy, dyo, ps_i * cols + j, dt) * ldf(x, xo, ps_i * cols + j, dt)) * ldf(rstd, ro, ps_i, DT_F32));
  if (get_local_id(0) == 0) stf(dw, dwo, j, DT_F32, sw);
}

/* AdamW as docs/numerics.md writes it; f32 scalars rounded once on the
 * host. */
__kernel void ag_padamw(gbuf *pb, ulong po, gbuf *gb, ulong go, gbuf *mb, ulong mo, gbuf *vb, ulong vo, long n,
                        float b1, float b2, float eps, float lr, float wd, float bc1, float bc2, const gbuf *sc,
                        ulong sco, const gbuf *fi, ulong fio) {
  long i = get_global_id(0);
  if (i >= n || opt_scalar(fi, fio, 0.0f) != 0.0f) return;
  __global float *p = FP(pb, po), *m = FP(mb, mo), *v = FP(vb, vo);
  float g = FP(gb, go)[i];
  if (sc) g = g * opt_scalar(sc, sco, 1.0f);
  const float mm = b1 * m[i] + (1.0f - b1) * g;
  const float vv = b2 * v[i] + (1.0f - b2) * (g * g);
  m[i] = mm;
  v[i] = vv;
  float pp = p[i] * (1.0f - lr * wd);
  const float mh = agp_div(mm, bc1), vh = agp_div(vv, bc2);
  p[i] = pp - lr * agp_div(mh, agp_sqrt(vh) + eps);
}

/* ---- log-sum-exp: a group per line of [outer, r, inner] ---- */
__kernel void ag_logsumexp(gbuf *y, ulong yo, const gbuf *x, ulong xo, int dt, long outer, long r, long inner) {
  __local float sh[PS_LOCAL];
  long t = get_group_id(0), base = (t / inner) * r * inner + t % inner;
  int l = get_local_id(0);
#define PL(i) ldf(x, xo, base + (i) * inner, dt)
  float mx, nan_, s = 0.0f;
  PS_MAX(mx, r, sh, PL(ps_i));
  PS_MAX(nan_, r, sh, isnan(PL(ps_i)) ? 1.0f : 0.0f);
  if (isinf(mx)) {
    if (l == 0) stf(y, yo, t, dt, nan_ != 0.0f ? NAN : mx);
    return;
  }
  PS_SUM(s, r, sh, agp_exp(PL(ps_i) - mx));
  if (l == 0) stf(y, yo, t, dt, mx + agp_log(s));
#undef PL
}

/* ---- conv2d, f32 NCHW (conv_meta of conv.cl) ---- */

/* y[n, co, oh, ow] = sequential over ci of the group, kh, kw of x * w
 * (padding taps skipped), then + bias[co]. */
__kernel void ag_pconv(gbuf *yb, ulong yo, const gbuf *xb, ulong xo, const gbuf *wb, ulong wo, const gbuf *bb,
                       ulong bo, conv_meta m) {
  long e = get_global_id(0);
  if (e >= m.N * m.Co * m.Ho * m.Wo) return;
  const long Cg = m.C / m.G, Cog = m.Co / m.G;
  long ow = e % m.Wo, t = e / m.Wo, oh = t % m.Ho;
  t /= m.Ho;
  long co = t % m.Co, n = t / m.Co, g = co / Cog;
  const __global float *x = F32P(xb, xo), *w = F32P(wb, wo);
  float acc = 0.0f;
  for (long c = 0; c < Cg; c++) {
    const __global float *xp = x + (n * m.C + g * Cg + c) * m.H * m.W;
    const __global float *wp = w + (co * Cg + c) * m.kh * m.kw;
    for (long i = 0; i < m.kh; i++) {
      long ih = oh * m.sh - m.ph + i * m.dh;
      if (ih < 0 || ih >= m.H) continue;
      for (long j = 0; j < m.kw; j++) {
        long iw = ow * m.sw - m.pw + j * m.dw;
        if (iw < 0 || iw >= m.W) continue;
        acc = acc + xp[ih * m.W + iw] * wp[i * m.kw + j];
      }
    }
  }
  if (bb) acc = acc + F32P(bb, bo)[co];
  F32P(yb, yo)[e] = acc;
}

/* dx[n, ci, h, w] = sequential over co of the group, kh, kw of dy * w for
 * the taps whose output position is integral and in range. */
__kernel void ag_pconv_bwd_in(gbuf *dxb, ulong dxo, const gbuf *dyb, ulong dyo, const gbuf *wb, ulong wo,
                              conv_meta m) {
  long e = get_global_id(0);
  if (e >= m.N * m.C * m.H * m.W) return;
  const long Cg = m.C / m.G, Cog = m.Co / m.G;
  long w = e % m.W, t = e / m.W, h = t % m.H;
  t /= m.H;
  long ci = t % m.C, n = t / m.C, g = ci / Cg, c = ci % Cg;
  const __global float *dy = F32P(dyb, dyo), *wt = F32P(wb, wo);
  float acc = 0.0f;
  for (long k = 0; k < Cog; k++) {
    const long co = g * Cog + k;
    const __global float *gp = dy + (n * m.Co + co) * m.Ho * m.Wo;
    const __global float *wp = wt + (co * Cg + c) * m.kh * m.kw;
    for (long i = 0; i < m.kh; i++) {
      long th = h + m.ph - i * m.dh;
      if (th < 0 || th % m.sh) continue;
      long oh = th / m.sh;
      if (oh >= m.Ho) continue;
      for (long j = 0; j < m.kw; j++) {
        long tw = w + m.pw - j * m.dw;
        if (tw < 0 || tw % m.sw) continue;
        long ow = tw / m.sw;
        if (ow >= m.Wo) continue;
        acc = acc + gp[oh * m.Wo + ow] * wp[i * m.kw + j];
      }
    }
  }
  F32P(dxb, dxo)[e] = acc;
}

/* dw[co, c, kh, kw] = S over (n, oh, ow), n outermost, of dy * x (+0 for
 * padding taps): a group per weight. */
__kernel void ag_pconv_bwd_w(gbuf *dwb, ulong dwo, const gbuf *dyb, ulong dyo, const gbuf *xb, ulong xo,
                             conv_meta m) {
  __local float sh[PS_LOCAL];
  const long Cg = m.C / m.G, Cog = m.Co / m.G, P = m.Ho * m.Wo;
  long e = get_group_id(0);
  long j = e % m.kw, t = e / m.kw, i = t % m.kh;
  t /= m.kh;
  long c = t % Cg, co = t / Cg, ci = (co / Cog) * Cg + c;
  const __global float *dy = F32P(dyb, dyo), *x = F32P(xb, xo);
#define PCW_IH(q) (((q) % P) / m.Wo * m.sh - m.ph + i * m.dh)
#define PCW_IW(q) (((q) % P) % m.Wo * m.sw - m.pw + j * m.dw)
#define PCW_TERM(q)                                                                         \
  (PCW_IH(q) >= 0 && PCW_IH(q) < m.H && PCW_IW(q) >= 0 && PCW_IW(q) < m.W                   \
       ? dy[((q) / P * m.Co + co) * P + (q) % P] *                                          \
             x[(((q) / P * m.C + ci) * m.H + PCW_IH(q)) * m.W + PCW_IW(q)]                  \
       : 0.0f)
  float v = 0.0f;
  PS_SUM(v, m.N * P, sh, PCW_TERM(ps_i));
  if (get_local_id(0) == 0) F32P(dwb, dwo)[e] = v;
#undef PCW_TERM
#undef PCW_IW
#undef PCW_IH
}

/* ---- batch-norm statistics over [N, C, HW] (f32): a group per channel,
 * S over the flattened (n, hw), n outermost ---- */
__kernel void ag_bn_stats(gbuf *ob, ulong oo, const gbuf *ab, ulong ao, const gbuf *bb, ulong bo, const gbuf *mb,
                          ulong mo, long N, long C, long HW, int sums) {
  __local float sh[PS_LOCAL];
  const long ch = get_group_id(0), cnt = N * HW;
  const __global float *a = F32P(ab, ao);
#define PBN_E(f) (((f) / HW * C + ch) * HW + (f) % HW)
  float s0 = 0.0f, s1 = 0.0f;
  if (!sums) {
    PS_SUM(s0, cnt, sh, a[PBN_E(ps_i)]);
    const float mean = agp_div(s0, (float)cnt);
    PS_SUM(s1, cnt, sh, (a[PBN_E(ps_i)] - mean) * (a[PBN_E(ps_i)] - mean));
    if (get_local_id(0) == 0) {
      F32P(ob, oo)[ch] = mean;
      F32P(ob, oo)[C + ch] = agp_div(s1, (float)cnt);
    }
    return;
  }
  const __global float *b = F32P(bb, bo);
  const float m = F32P(mb, mo)[ch];
  PS_SUM(s0, cnt, sh, a[PBN_E(ps_i)]);
  PS_SUM(s1, cnt, sh, a[PBN_E(ps_i)] * (b[PBN_E(ps_i)] - m));
  if (get_local_id(0) == 0) {
    F32P(ob, oo)[ch] = s0;
    F32P(ob, oo)[C + ch] = s1;
  }
#undef PBN_E
}

/* ---- var/std over the middle dim of [outer, r, inner]: a group per line;
 * den = (float)max(0, r - correction) from the host ---- */
__kernel void ag_var_cols(gbuf *y, ulong yo, const gbuf *x, ulong xo, int dt, long outer, long r, long inner,
                          float den, int sq) {
  __local float sh[PS_LOCAL];
  long t = get_group_id(0), base = (t / inner) * r * inner + t % inner;
#define PV(i) ldf(x, xo, base + (i) * inner, dt)
  float s = 0.0f, v = 0.0f;
  PS_SUM(s, r, sh, PV(ps_i));
  const float mean = agp_div(s, (float)r);
  PS_SUM(v, r, sh, (PV(ps_i) - mean) * (PV(ps_i) - mean));
  float res = agp_div(v, den);
  if (sq) res = agp_sqrt(res);
  if (get_local_id(0) == 0) stf(y, yo, t, dt, res);
#undef PV
}

/* ---- vector norms over the middle dim of [outer, r, inner]: a group per
 * line. NaN propagates; L1 S(|x|); INF max |x|; L2 m * sqrt(S((x/m)^2)),
 * m = max |x| (m itself when 0 or inf) ---- */
__kernel void ag_norm(gbuf *y, ulong yo, const gbuf *x, ulong xo, int dt, long outer, long r, long inner,
                      int variant) {
  __local float sh[PS_LOCAL];
  long t = get_group_id(0), base = (t / inner) * r * inner + t % inner;
#define PN(i) ldf(x, xo, base + (i) * inner, dt)
  float m, nan_, s = 0.0f, res;
  PS_MAX(m, r, sh, agp_abs(PN(ps_i)));
  if (m < 0.0f) m = 0.0f; /* the max of no values (-inf) or of none larger: 0 */
  PS_MAX(nan_, r, sh, isnan(PN(ps_i)) ? 1.0f : 0.0f);
  if (nan_ != 0.0f) {
    res = NAN;
  } else if (variant == AG_KV_NORM_L1) {
    PS_SUM(s, r, sh, agp_abs(PN(ps_i)));
    res = s;
  } else if (variant == AG_KV_NORM_INF || m == 0.0f || m == INFINITY) {
    res = m;
  } else {
    PS_SUM(s, r, sh, agp_div(PN(ps_i), m) * agp_div(PN(ps_i), m));
    res = m * agp_sqrt(s);
  }
  if (get_local_id(0) == 0) stf(y, yo, t, dt, res);
#undef PN
}

/* ---- group norm over x [n, c, hw]: LAYERNORM's rules on each (sample,
 * group) block of cpg * hw contiguous elements; dw, db per channel as S
 * over the flattened (n, hw), n outermost (same arguments as
 * resample.cl's) ---- */
__kernel void ag_group_norm(gbuf *y, ulong yo, const gbuf *x, ulong xo, int dt, const gbuf *w, ulong wo,
                            const gbuf *b, ulong bo, gbuf *mean, ulong mo, gbuf *rstd, ulong ro, long groups,
                            long cpg, long hw, float eps) {
  __local float sh[PS_LOCAL];
  const long blk = get_group_id(0), M = cpg * hw, base = blk * M, c0 = blk % groups * cpg;
  const int l = get_local_id(0);
  const float df = (float)M;
  float s = 0.0f, v = 0.0f;
  PS_SUM(s, M, sh, PX(ps_i));
  const float mu = agp_div(s, df);
  PS_SUM(v, M, sh, (PX(ps_i) - mu) * (PX(ps_i) - mu));
  const float rs = agp_div(1.0f, agp_sqrt(agp_div(v, df) + eps));
  for (long k = l; k < M; k += 256) {
    const long ch = c0 + k / hw;
    float o = (PX(k) - mu) * rs;
    if (w) o = o * ldf(w, wo, ch, dt);
    if (b) o = o + ldf(b, bo, ch, dt);
    stf(y, yo, base + k, dt, o);
  }
  if (l == 0 && mean) stf(mean, mo, blk, DT_F32, mu);
  if (l == 0 && rstd) stf(rstd, ro, blk, DT_F32, rs);
}

#define PGG(k) (w ? ldf(dy, dyo, base + (k), dt) * ldf(w, wo, c0 + (k) / hw, dt) : ldf(dy, dyo, base + (k), dt))
__kernel void ag_group_norm_bwd(gbuf *dx, ulong dxo, const gbuf *dy, ulong dyo, const gbuf *x, ulong xo, int dt,
                                const gbuf *mean, ulong mo, const gbuf *rstd, ulong ro, const gbuf *w, ulong wo,
                                long groups, long cpg, long hw) {
  __local float sh[PS_LOCAL];
  const long blk = get_group_id(0), M = cpg * hw, base = blk * M, c0 = blk % groups * cpg;
  const int l = get_local_id(0);
  const float mu = ldf(mean, mo, blk, DT_F32), rs = ldf(rstd, ro, blk, DT_F32), df = (float)M;
  float s1 = 0.0f, s2 = 0.0f;
  PS_SUM(s1, M, sh, PGG(ps_i));
  PS_SUM(s2, M, sh, PGG(ps_i) * PXH(ps_i));
  const float ma = agp_div(s1, df), mb = agp_div(s2, df);
  for (long k = l; k < M; k += 256) stf(dx, dxo, base + k, dt, ((PGG(k) - ma) - PXH(k) * mb) * rs);
}

__kernel void ag_group_norm_bwd_wb(gbuf *dw, ulong dwo, gbuf *db, ulong dbo, const gbuf *dy, ulong dyo,
                                   const gbuf *x, ulong xo, int dt, const gbuf *mean, ulong mo, const gbuf *rstd,
                                   ulong ro, long n, long c, long groups, long hw) {
  __local float sh[PS_LOCAL];
  const long ch = get_group_id(0), cpg = c / groups;
#define PGW_I(f) (((f) / hw * c + ch) * hw + (f) % hw)
#define PGW_B(f) ((f) / hw * groups + ch / cpg)
  float sw = 0.0f, sb = 0.0f;
  if (dw)
    PS_SUM(sw, n * hw, sh,
           ldf(dy, dyo, PGW_I(ps_i), dt) *
               ((ldf(x, xo, PGW_I(ps_i), dt) - ldf(mean, mo, PGW_B(ps_i), DT_F32)) * ldf(rstd, ro, PGW_B(ps_i), DT_F32)));
  if (db) PS_SUM(sb, n * hw, sh, ldf(dy, dyo, PGW_I(ps_i), dt));
  if (get_local_id(0) == 0 && dw) stf(dw, dwo, ch, DT_F32, sw);
  if (get_local_id(0) == 0 && db) stf(db, dbo, ch, DT_F32, sb);
#undef PGW_B
#undef PGW_I
}

/* ---- interpolate backward: for each dx element, the outputs that read
 * it in row-major order of (oh, ow), each term (wh * ww) * dy ---- */
__kernel void ag_interpolate_bwd(gbuf *dx, ulong dxo, const gbuf *dy, ulong dyo, int dt, long planes, long H, long W,
                                 long Ho, long Wo, float sh, float sw, int nearest, int align) {
  const long i = get_global_id(0);
  if (i >= planes * H * W) return;
  const long iw = i % W, ih = i / W % H, p = i / (W * H), base = p * Ho * Wo;
  const long oh0 = rs_first(nearest ? ih : ih - 1, H, Ho, sh, nearest, align);
  const long oh1 = rs_first(ih + 1, H, Ho, sh, nearest, align);
  const long ow0 = rs_first(nearest ? iw : iw - 1, W, Wo, sw, nearest, align);
  const long ow1 = rs_first(iw + 1, W, Wo, sw, nearest, align);
  float acc = 0.0f;
  for (long oh = oh0; oh < oh1; oh++) {
    const float wh = rs_w(rs_src_of(oh, H, Ho, sh, nearest, align), ih);
    for (long ow = ow0; ow < ow1; ow++)
      acc = acc + (wh * rs_w(rs_src_of(ow, W, Wo, sw, nearest, align), iw)) * ldf(dy, dyo, base + oh * Wo + ow, dt);
  }
  stf(dx, dxo, i, dt, acc);
}

#endif
