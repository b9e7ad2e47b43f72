#version 450
/* Kernels of the portable numerics mode (docs/numerics.md) that have no
 * default counterpart to rebuild: the device probe, the canonical sum S
 * over [outer, r, inner] in passes, and the row kernels whose sums are S
 * (psum.glsl). Built with -DAG_PORTABLE -DAG_GLSL only; every float that
 * an operation produces is precise (no contraction), every division and
 * square root is pmath's. One kernel per build define (K_P_...). */
#include "common.glsl"
#include "ops.glsl"
#include "pline.glsl"
layout(local_size_x = WG) in;

#if defined(K_P_PROBE)
/* The arithmetic portable_check relies on, on values read from the argument
 * block (no constant folding): subnormal products and sums, a normal result
 * from a subnormal operand, no contraction of a * b - c. p0 out (f32 x 8). */
void main() {
  if (gl_LocalInvocationID.x != 0u || gl_WorkGroupID.x != 0u) return;
  float a = pc.a.f[0], b = pc.a.f[1], c = pc.a.f[2], d = pc.a.f[3], e = pc.a.f[4], g = pc.a.f[5], h = pc.a.f[6];
  uint64_t o = pc.a.p[0];
  precise float r0 = a * b;    /* normal * 0.5 -> subnormal */
  precise float r1 = c + c;    /* subnormal + subnormal */
  precise float r2 = c * d;    /* subnormal * 2^20 -> normal */
  precise float r3 = a - e;    /* normal - normal -> subnormal */
  precise float r4 = c * b;    /* subnormal * 0.5, rounded to even */
  precise float r5 = g * g - h; /* 0 unless fused */
  precise float r6 = agp_div(g, h); /* correctly rounded */
  PF(o, 0) = r0;
  PF(o, 1) = r1;
  PF(o, 2) = r2;
  PF(o, 3) = r3;
  PF(o, 4) = r4;
  PF(o, 5) = r5;
  PF(o, 6) = r6;
}
#endif

#if defined(K_P_SUM)
/* One level of S: a work-group per (output q, group of 16 blocks) sums
 * the 256 terms src[o, b*256 .. b*256+255, i] of each block b (q = o *
 * inner + i; zeros past len) by the fixed tree (psum.glsl's ps_tree16).
 * p0 dst, p1 src (k1 its dtype); n0 outputs, n1 len, n2 inner (1 for a
 * level of block sums: src[q * len + j]), n3 blocks. k2: the last level
 * (one block): dst is the output (k0 its dtype), times f0 when k3; else dst
 * is f32 [q][blocks]. k4: the terms are the squares of src's values
 * (SUMSQ, level 0). */
int64_t g_base, g_st;
float pterm(int which, int64_t j) {
  precise float v = ldf(pc.a.p[1], g_base + j * g_st, pc.a.k[1]);
  if (pc.a.k[4] != 0) v = v * v;
  return v;
}
#include "psum.glsl"
void main() {
  int64_t g = group_id(), Q = pc.a.n[0], len = pc.a.n[1], inner = pc.a.n[2], nb = pc.a.n[3];
  if (P_SINGLE) {
    /* one block per output (the last level): an invocation per output */
    int64_t q = gid();
    if (q >= Q) return;
    g_base = (q / inner) * len * inner + q % inner;
    g_st = inner;
    precise float rs = psum1(0, len);
    if (pc.a.k[3] != 0) rs = rs * pc.a.f[0];
    stf(pc.a.p[0], q, pc.a.k[0], rs);
    return;
  }
  int64_t ng = (nb + 15) / 16;
  if (g >= Q * ng) return;
  int64_t q = g / ng, b0 = (g % ng) * 16;
  int64_t o = q / inner, i = q % inner;
  g_base = o * len * inner + i;
  g_st = inner;
  ps_tree16(0, len, b0, nb);
  uint l = gl_LocalInvocationID.x;
  if (l >= 16u || b0 + int64_t(l) >= nb) return;
  float r = ps_t[16u * l];
  if (pc.a.k[2] == 0) {
    PF(pc.a.p[0], q * nb + b0 + int64_t(l)) = r;
    return;
  }
  precise float rs = r;
  if (pc.a.k[3] != 0) rs = rs * pc.a.f[0];
  stf(pc.a.p[0], q, pc.a.k[0], rs);
}
#endif

#if defined(K_P_SOFTMAX) || defined(K_P_SOFTMAX_BWD) || defined(K_P_CE) || defined(K_P_CE_BWD) || defined(K_P_LSE)
shared int64_t pm_i[WG];
/* The maximum of the non-NaN values of x[base + j * st], j < n (-inf if
 * none), as a scan in order finds it: of equal zeros the first (the sign of
 * a zero maximum is the first zero's). */
float prow_max(uint64_t x, int64_t base, int64_t st, int64_t n, int dt) {
  uint l = gl_LocalInvocationID.x;
  float m = -F_INF;
  if (P_SINGLE) {
    for (int64_t j = 0; j < n; j++) {
      float v = ldf(x, base + j * st, dt);
      m = v > m ? v : m;
    }
    return m;
  }
  for (int64_t j = int64_t(l); j < n; j += WG) m = ag_fmax(m, ldf(x, base + j * st, dt));
  m = wg_max(m);
  if (m != 0.0) return m;
  int64_t first = LONG_MAX;
  for (int64_t j = int64_t(l); j < n; j += WG)
    if (ldf(x, base + j * st, dt) == 0.0) {
      first = j;
      break;
    }
  pm_i[l] = first;
  barrier();
  for (uint s = WG / 2; s > 0u; s >>= 1) {
    if (l < s) pm_i[l] = min(pm_i[l], pm_i[l + s]);
    barrier();
  }
  first = pm_i[0];
  barrier();
  return ldf(x, base + first * st, dt);
}
#endif

#if defined(K_P_SOFTMAX) || defined(K_P_SOFTMAX_BWD)
/* A work-group per row (rows split over x and y). p0 y or dx, p1 x or dy,
 * p2 the forward's y (backward); k0 dtype, k6 variant; n0 rows, n1 cols. */
int64_t g_base;
float g_mx;
float pterm(int which, int64_t j) {
#if defined(K_P_SOFTMAX)
  precise float d = ldf(pc.a.p[1], g_base + j, pc.a.k[0]) - g_mx;
  precise float e = agp_exp(d);
  return e;
#else
  precise float dy = ldf(pc.a.p[1], g_base + j, pc.a.k[0]);
  if (which == 1) return dy;
  precise float p = dy * ldf(pc.a.p[2], g_base + j, pc.a.k[0]);
  return p;
#endif
}
#include "psum.glsl"

void main() {
  int64_t row = P_LINE(), cols = pc.a.n[1];
  if (row >= pc.a.n[0]) return;
  int dt = pc.a.k[0];
  bool logv = pc.a.k[6] == AG_KV_LOG_SOFTMAX;
  g_base = row * cols;
  uint64_t o = pc.a.p[0], x = pc.a.p[1];
#if defined(K_P_SOFTMAX)
  g_mx = prow_max(x, g_base, 1, cols, dt);
  precise float s = psum_any(0, cols);
  precise float ls = logv ? agp_log(s) : 0.0;
  for (int64_t j = P_LANE; j < cols; j += P_STEP) {
    precise float d = ldf(x, g_base + j, dt) - g_mx;
    precise float v;
    if (logv) v = d - ls;
    else v = agp_div(agp_exp(d), s);
    stf(o, g_base + j, dt, v);
  }
#else
  precise float s = psum_any(logv ? 1 : 0, cols);
  for (int64_t j = P_LANE; j < cols; j += P_STEP) {
    precise float dy = ldf(x, g_base + j, dt), y = ldf(pc.a.p[2], g_base + j, dt);
    precise float v;
    if (logv) v = dy - agp_exp(y) * s;
    else v = y * (dy - s);
    stf(o, g_base + j, dt, v);
  }
#endif
}
#endif

#if defined(K_P_CE) || defined(K_P_CE_BWD)
/* The default kernel's arguments: p0 loss f32 [N] (fwd) or dlogits (bwd),
 * p1 logits (k1), p2 targets (k3), p3 upstream grad f32 (bwd, stride n3),
 * p7 error word; n0 rows, n1 cols, n2 ignore_index. */
int64_t g_base;
float g_mx;
float pterm(int which, int64_t j) {
  precise float e = agp_exp(ldf(pc.a.p[1], g_base + j, pc.a.k[1]) - g_mx);
  return e;
}
#include "psum.glsl"
void main() {
  int64_t row = P_LINE(), cols = pc.a.n[1];
  if (row >= pc.a.n[0]) return;
  uint l = gl_LocalInvocationID.x;
  int dt = pc.a.k[1];
  uint64_t x = pc.a.p[1];
  g_base = row * cols;
  int64_t t = ld_index(pc.a.p[2], row, pc.a.k[3]);
#if defined(K_P_CE)
  if (t == pc.a.n[2]) {
    if (P_LEAD) PF(pc.a.p[0], row) = 0.0;
    return;
  }
  if (t < 0 || t >= cols) {
    if (P_LEAD) {
      PF(pc.a.p[0], row) = F_NAN;
      set_error(pc.a.p[7], AG_ERR_INDEX, AG_K_CROSS_ENTROPY, t, cols);
    }
    return;
  }
  g_mx = prow_max(x, g_base, 1, cols, dt);
  precise float s = psum_any(0, cols);
  precise float lse = g_mx + agp_log(s);
  precise float loss = lse - ldf(x, g_base + t, dt);
  if (P_LEAD) PF(pc.a.p[0], row) = loss;
#else
  if (t == pc.a.n[2] || t < 0 || t >= cols) {
    for (int64_t j = P_LANE; j < cols; j += P_STEP) stf(pc.a.p[0], g_base + j, dt, 0.0);
    if (t != pc.a.n[2] && P_LEAD) set_error(pc.a.p[7], AG_ERR_INDEX, AG_K_CROSS_ENTROPY_BWD, t, cols);
    return;
  }
  g_mx = prow_max(x, g_base, 1, cols, dt);
  precise float s = psum_any(0, cols);
  float gr = PF(pc.a.p[3], row * pc.a.n[3]);
  for (int64_t j = P_LANE; j < cols; j += P_STEP) {
    precise float p = agp_div(agp_exp(ldf(x, g_base + j, dt) - g_mx), s);
    precise float v = (p - (j == t ? 1.0 : 0.0)) * gr;
    stf(pc.a.p[0], g_base + j, dt, v);
  }
#endif
}
#endif

#if defined(K_P_LSE)
/* out[o, i] = mx + log(S(exp(x - mx))) over x[o, 0..r, i]; mx as
 * softmax's, out = mx when it is infinite (NaN where the line holds one).
 * A work-group per output. p0 out (k0), p1 x (k1); n0 outer, n1 r, n2 inner. */
int64_t g_base, g_st;
float g_mx;
float pterm(int which, int64_t j) {
  precise float e = agp_exp(ldf(pc.a.p[1], g_base + j * g_st, pc.a.k[1]) - g_mx);
  return e;
}
#include "psum.glsl"
void main() {
  int64_t q = P_LINE(), R = pc.a.n[1], inner = pc.a.n[2];
  if (q >= pc.a.n[0] * inner) return;
  uint l = gl_LocalInvocationID.x;
  int64_t o = q / inner, i = q % inner;
  g_base = o * R * inner + i;
  g_st = inner;
  int dt = pc.a.k[1];
  g_mx = prow_max(pc.a.p[1], g_base, g_st, R, dt);
  if (ag_isinf(g_mx)) {
    bool nan = false;
    for (int64_t j = P_LANE; j < R; j += P_STEP) nan = nan || ag_isnan(ldf(pc.a.p[1], g_base + j * g_st, dt));
    float any = P_SINGLE ? (nan ? 1.0 : 0.0) : wg_max(nan ? 1.0 : 0.0);
    if (P_LEAD) stf(pc.a.p[0], q, pc.a.k[0], any != 0.0 ? F_NAN : g_mx);
    return;
  }
  precise float s = psum_any(0, R);
  precise float r = g_mx + agp_log(s);
  if (P_LEAD) stf(pc.a.p[0], q, pc.a.k[0], r);
}
#endif

#if defined(K_P_LN) || defined(K_P_LN_BWD) || defined(K_P_RMS) || defined(K_P_RMS_BWD)
/* The default kernels' arguments (nn.comp): a work-group per row; k0 the
 * dtype of x, y, dy, dx, w, b; n0 rows, n1 cols.
 * LN: p0 y, p1 x, p2 w or 0, p3 b or 0, p4 mean or 0, p5 rstd or 0, f0 eps.
 * LN_BWD: p0 dx, p1 dy, p2 x, p3 mean, p4 rstd, p5 w or 0.
 * RMS: p0 y, p1 x, p2 w or 0, p3 rstd or 0, f0 eps.
 * RMS_BWD: p0 dx, p1 dy, p2 x, p3 rstd, p4 w or 0. */
int64_t g_base;
float g_mean, g_rstd;
#define DT pc.a.k[0]
#if defined(K_P_LN_BWD)
#define W_ADDR pc.a.p[5]
#elif defined(K_P_RMS_BWD)
#define W_ADDR pc.a.p[4]
#else
#define W_ADDR pc.a.p[2]
#endif
/* g_i = dy_i * w_i (dy_i without weight) */
float bwd_g(int64_t j) {
  precise float g = ldf(pc.a.p[1], g_base + j, DT);
  if (W_ADDR != 0ul) g = g * ldf(W_ADDR, j, DT);
  return g;
}
float pterm(int which, int64_t j) {
#if defined(K_P_LN)
  precise float x = ldf(pc.a.p[1], g_base + j, DT);
  if (which == 0) return x;
  precise float d = (x - g_mean) * (x - g_mean);
  return d;
#elif defined(K_P_RMS)
  precise float x = ldf(pc.a.p[1], g_base + j, DT);
  precise float x2 = x * x;
  return x2;
#elif defined(K_P_LN_BWD)
  precise float g = bwd_g(j);
  if (which == 0) return g;
  precise float xh = (ldf(pc.a.p[2], g_base + j, DT) - g_mean) * g_rstd;
  precise float gx = g * xh;
  return gx;
#else
  precise float gx = bwd_g(j) * ldf(pc.a.p[2], g_base + j, DT);
  return gx;
#endif
}
#include "psum.glsl"
void main() {
  int64_t row = P_LINE(), cols = pc.a.n[1];
  if (row >= pc.a.n[0]) return;
  uint l = gl_LocalInvocationID.x;
  g_base = row * cols;
  float d_f = float(cols);
#if defined(K_P_LN)
  g_mean = agp_div(psum_any(0, cols), d_f);
  precise float var = agp_div(psum_any(1, cols), d_f);
  precise float rstd = agp_div(1.0, agp_sqrt(var + pc.a.f[0]));
  for (int64_t j = P_LANE; j < cols; j += P_STEP) {
    precise float y = (ldf(pc.a.p[1], g_base + j, DT) - g_mean) * rstd;
    if (pc.a.p[2] != 0ul) y = y * ldf(pc.a.p[2], j, DT);
    if (pc.a.p[3] != 0ul) y = y + ldf(pc.a.p[3], j, DT);
    stf(pc.a.p[0], g_base + j, DT, y);
  }
  if (P_LEAD) {
    if (pc.a.p[4] != 0ul) PF(pc.a.p[4], row) = g_mean;
    if (pc.a.p[5] != 0ul) PF(pc.a.p[5], row) = rstd;
  }
#elif defined(K_P_RMS)
  precise float ms = agp_div(psum_any(0, cols), d_f);
  precise float rstd = agp_div(1.0, agp_sqrt(ms + pc.a.f[0]));
  for (int64_t j = P_LANE; j < cols; j += P_STEP) {
    precise float y = ldf(pc.a.p[1], g_base + j, DT) * rstd;
    if (pc.a.p[2] != 0ul) y = y * ldf(pc.a.p[2], j, DT);
    stf(pc.a.p[0], g_base + j, DT, y);
  }
  if (P_LEAD && pc.a.p[3] != 0ul) PF(pc.a.p[3], row) = rstd;
#elif defined(K_P_LN_BWD)
  g_mean = PF(pc.a.p[3], row);
  g_rstd = PF(pc.a.p[4], row);
  precise float ma = agp_div(psum_any(0, cols), d_f);
  precise float mb = agp_div(psum_any(1, cols), d_f);
  for (int64_t j = P_LANE; j < cols; j += P_STEP) {
    precise float xh = (ldf(pc.a.p[2], g_base + j, DT) - g_mean) * g_rstd;
    precise float dx = ((bwd_g(j) - ma) - xh * mb) * g_rstd;
    stf(pc.a.p[0], g_base + j, DT, dx);
  }
#else
  float rstd = PF(pc.a.p[3], row);
  precise float m = agp_div(psum_any(0, cols), d_f);
  precise float c = (rstd * rstd) * m;
  for (int64_t j = P_LANE; j < cols; j += P_STEP) {
    precise float dx = (bwd_g(j) - ldf(pc.a.p[2], g_base + j, DT) * c) * rstd;
    stf(pc.a.p[0], g_base + j, DT, dx);
  }
#endif
}
#endif

#if defined(K_P_LN_BWD_WB) || defined(K_P_RMS_BWD_W)
/* The weight gradients, S over the rows of each column: a work-group per
 * column j. LN: p0 dw or 0 (k1), p1 db or 0 (k2), p2 dy, p3 x, p4 mean,
 * p5 rstd. RMS: p0 dw (k1), p2 dy, p3 x, p5 rstd. k0 the dtype of dy and
 * x; n0 rows, n1 cols. */
int64_t g_col;
float pterm(int which, int64_t r) {
  int64_t cols = pc.a.n[1];
  precise float dy = ldf(pc.a.p[2], r * cols + g_col, pc.a.k[0]);
  if (which == 1) return dy;
  precise float x = ldf(pc.a.p[3], r * cols + g_col, pc.a.k[0]);
#if defined(K_P_LN_BWD_WB)
  precise float t = dy * ((x - PF(pc.a.p[4], r)) * PF(pc.a.p[5], r));
#else
  precise float t = (dy * x) * PF(pc.a.p[5], r);
#endif
  return t;
}
#include "psum.glsl"
void main() {
  g_col = P_LINE();
  if (g_col >= pc.a.n[1]) return;
  int64_t rows = pc.a.n[0];
  if (pc.a.p[0] != 0ul) {
    float w = psum_any(0, rows);
    if (P_LEAD) stf(pc.a.p[0], g_col, pc.a.k[1], w);
  }
  if (pc.a.p[1] != 0ul) {
    float b = psum_any(1, rows);
    if (P_LEAD) stf(pc.a.p[1], g_col, pc.a.k[2], b);
  }
}
#endif

#if defined(K_P_ADAMW) || defined(K_P_SGD)
/* One tensor of the multi-tensor call: p0 param, p1 grad, p2 exp_avg or
 * the momentum buffer, p3 exp_avg_sq, p4 inverse scale or 0, p5 found_inf
 * or 0 (f32 scalars on the device); n0 numel. Scalars rounded once to f32
 * on the host. ADAMW: f0 beta1, f1 beta2, f2 lr, f3 weight decay, f4 eps,
 * f5 bias_correction1, f6 bias_correction2. SGD: f0 lr, f1 momentum, f2
 * dampening, f3 weight decay; k4 weight decay != 0, k5 momentum != 0 (and a
 * buffer), k6 nesterov, k7 first step. */
void main() {
  int64_t i = gid();
  if (i >= pc.a.n[0]) return;
  if (pc.a.p[5] != 0ul && PF(pc.a.p[5], 0) != 0.0) return;
  precise float g = PF(pc.a.p[1], i);
  if (pc.a.p[4] != 0ul) g = g * PF(pc.a.p[4], 0);
#if defined(K_P_ADAMW)
  float b1 = pc.a.f[0], b2 = pc.a.f[1], lr = pc.a.f[2], wd = pc.a.f[3], eps = pc.a.f[4];
  precise float c1 = 1.0 - b1, c2 = 1.0 - b2, decay = 1.0 - lr * wd;
  precise float m = b1 * PF(pc.a.p[2], i) + c1 * g;
  precise float v = b2 * PF(pc.a.p[3], i) + c2 * (g * g);
  precise float p = PF(pc.a.p[0], i) * decay;
  precise float mh = agp_div(m, pc.a.f[5]), vh = agp_div(v, pc.a.f[6]);
  p = p - lr * agp_div(mh, agp_sqrt(vh) + eps);
  PF(pc.a.p[2], i) = m;
  PF(pc.a.p[3], i) = v;
  PF(pc.a.p[0], i) = p;
#else
  float lr = pc.a.f[0], mom = pc.a.f[1];
  precise float p = PF(pc.a.p[0], i);
  if (pc.a.k[4] != 0) g = g + pc.a.f[3] * p;
  if (pc.a.k[5] != 0) {
    precise float c = 1.0 - pc.a.f[2];
    precise float b = pc.a.k[7] != 0 ? g : mom * PF(pc.a.p[2], i) + c * g;
    PF(pc.a.p[2], i) = b;
    g = pc.a.k[6] != 0 ? g + mom * b : b;
  }
  p = p - lr * g;
  PF(pc.a.p[0], i) = p;
#endif
}
#endif

#if defined(K_P_VAR)
/* VAR, STD over x [outer, r, inner], a work-group per output: mean =
 * S(x) / r_f, v = S((x - mean)^2) / f0 (f0 = max(0, r - correction),
 * rounded once on the host), STD its square root. p0 out, p1 x, k0 dtype,
 * k6 variant; n0 outer, n1 r, n2 inner. */
int64_t g_base, g_st;
float g_mean;
float pterm(int which, int64_t j) {
  precise float x = ldf(pc.a.p[1], g_base + j * g_st, pc.a.k[0]);
  if (which == 0) return x;
  precise float d = (x - g_mean) * (x - g_mean);
  return d;
}
#include "psum.glsl"
void main() {
  int64_t q = P_LINE(), R = pc.a.n[1], inner = pc.a.n[2];
  if (q >= pc.a.n[0] * inner) return;
  g_base = (q / inner) * R * inner + q % inner;
  g_st = inner;
  g_mean = agp_div(psum_any(0, R), float(R));
  precise float v = agp_div(psum_any(1, R), pc.a.f[0]);
  if (pc.a.k[6] == AG_KV_STD) v = agp_sqrt(v);
  if (P_LEAD) stf(pc.a.p[0], q, pc.a.k[0], v);
}
#endif

#if defined(K_P_BN_STATS)
/* Batch-norm statistics per channel c (a line), its terms over the
 * flattened (n, hw), n outermost: BN_MEAN_VAR: mean = S(a) / cnt_f, then
 * S((a - mean)^2) / cnt_f; BN_SUMS: S(a), S(a * (b - mu[c])). The default
 * kernel's arguments: p0 stats [2, C], p1 a, p2 b, p3 mu (BN_SUMS); n0 N,
 * n1 C, n2 HW; k6 the variant. */
int64_t g_ch;
float g_mean;
float pterm(int which, int64_t k) {
  int64_t C = pc.a.n[1], HW = pc.a.n[2];
  int64_t at = ((k / HW) * C + g_ch) * HW + k % HW;
  precise float a = PF(pc.a.p[1], at);
  if (which == 0) return a;
  if (which == 1) {
    precise float d = (a - g_mean) * (a - g_mean);
    return d;
  }
  precise float t = a * (PF(pc.a.p[2], at) - PF(pc.a.p[3], g_ch));
  return t;
}
#include "psum.glsl"
void main() {
  g_ch = P_LINE();
  int64_t C = pc.a.n[1], L = pc.a.n[0] * pc.a.n[2];
  if (g_ch >= C) return;
  float cnt_f = float(L);
  float s0, s1;
  if (pc.a.k[6] == AG_KV_BN_SUMS) {
    s0 = psum_any(0, L);
    s1 = psum_any(2, L);
  } else {
    g_mean = agp_div(psum_any(0, L), cnt_f);
    s0 = g_mean;
    s1 = agp_div(psum_any(1, L), cnt_f);
  }
  if (P_LEAD) {
    PF(pc.a.p[0], g_ch) = s0;
    PF(pc.a.p[0], C + g_ch) = s1;
  }
}
#endif

#if defined(K_P_GN) || defined(K_P_GN_BWD) || defined(K_P_GN_BWD_WB)
/* Group norm: LAYERNORM's rules on each (sample, group) block of cpg
 * channels of hw (contiguous, M = cpg * hw terms), the weight and bias per
 * channel; dw, db per channel as S over the flattened (n, hw), n
 * outermost. The default kernels' arguments (resample.comp): k0 dtype;
 * GN: p0 y, p1 x, p2 w or 0, p3 b or 0, p4 mean or 0, p5 rstd or 0, f0 eps;
 * GN_BWD: p0 dx, p1 dy, p2 x, p3 mean, p4 rstd, p5 w or 0; both n0 blocks,
 * n1 groups, n2 cpg, n3 hw. GN_BWD_WB: p0 dw or 0 (k1), p1 db or 0 (k2),
 * p2 dy, p3 x, p4 mean, p5 rstd; n0 C, n1 groups, n2 N, n3 hw. */
int64_t g_base, g_c0, g_ch;
float g_mean, g_rstd;
#define DT pc.a.k[0]
#define HW pc.a.n[3]
#if defined(K_P_GN_BWD)
float bwd_g(int64_t k) {
  precise float g = ldf(pc.a.p[1], g_base + k, DT);
  if (pc.a.p[5] != 0ul) g = g * ldf(pc.a.p[5], g_c0 + k / HW, DT);
  return g;
}
#endif
float pterm(int which, int64_t k) {
#if defined(K_P_GN)
  precise float x = ldf(pc.a.p[1], g_base + k, DT);
  if (which == 0) return x;
  precise float d = (x - g_mean) * (x - g_mean);
  return d;
#elif defined(K_P_GN_BWD)
  precise float g = bwd_g(k);
  if (which == 0) return g;
  precise float xh = (ldf(pc.a.p[2], g_base + k, DT) - g_mean) * g_rstd;
  precise float gx = g * xh;
  return gx;
#else
  int64_t C = pc.a.n[0], n = k / HW, at = (n * C + g_ch) * HW + k % HW;
  precise float dy = ldf(pc.a.p[2], at, DT);
  if (which == 1) return dy;
  int64_t blk = n * pc.a.n[1] + g_ch / (C / pc.a.n[1]);
  precise float xh = (ldf(pc.a.p[3], at, DT) - PF(pc.a.p[4], blk)) * PF(pc.a.p[5], blk);
  precise float t = dy * xh;
  return t;
#endif
}
#include "psum.glsl"
void main() {
#if defined(K_P_GN_BWD_WB)
  g_ch = P_LINE();
  if (g_ch >= pc.a.n[0]) return;
  int64_t L = pc.a.n[2] * HW;
  if (pc.a.p[0] != 0ul) {
    float w = psum_any(0, L);
    if (P_LEAD) stf(pc.a.p[0], g_ch, pc.a.k[1], w);
  }
  if (pc.a.p[1] != 0ul) {
    float b = psum_any(1, L);
    if (P_LEAD) stf(pc.a.p[1], g_ch, pc.a.k[2], b);
  }
#else
  int64_t blk = P_LINE(), M = pc.a.n[2] * HW;
  if (blk >= pc.a.n[0]) return;
  g_base = blk * M;
  g_c0 = (blk % pc.a.n[1]) * pc.a.n[2];
  float d_f = float(M);
#if defined(K_P_GN)
  g_mean = agp_div(psum_any(0, M), d_f);
  precise float var = agp_div(psum_any(1, M), d_f);
  precise float rstd = agp_div(1.0, agp_sqrt(var + pc.a.f[0]));
  for (int64_t k = P_LANE; k < M; k += P_STEP) {
    precise float y = (ldf(pc.a.p[1], g_base + k, DT) - g_mean) * rstd;
    if (pc.a.p[2] != 0ul) y = y * ldf(pc.a.p[2], g_c0 + k / HW, DT);
    if (pc.a.p[3] != 0ul) y = y + ldf(pc.a.p[3], g_c0 + k / HW, DT);
    stf(pc.a.p[0], g_base + k, DT, y);
  }
  if (P_LEAD) {
    if (pc.a.p[4] != 0ul) PF(pc.a.p[4], blk) = g_mean;
    if (pc.a.p[5] != 0ul) PF(pc.a.p[5], blk) = rstd;
  }
#else
  g_mean = PF(pc.a.p[3], blk);
  g_rstd = PF(pc.a.p[4], blk);
  precise float ma = agp_div(psum_any(0, M), d_f);
  precise float mb = agp_div(psum_any(1, M), d_f);
  for (int64_t k = P_LANE; k < M; k += P_STEP) {
    precise float xh = (ldf(pc.a.p[2], g_base + k, DT) - g_mean) * g_rstd;
    precise float dx = ((bwd_g(k) - ma) - xh * mb) * g_rstd;
    stf(pc.a.p[0], g_base + k, DT, dx);
  }
#endif
#endif
}
#endif

#if defined(K_P_NORM)
/* NORM over x [outer, r, inner], a line per output (the cpu's rules): NaN
 * if the line holds one; L1 S(|x|); INF m = max |x|; L2 m * sqrt(S((x /
 * m)^2)), m itself when 0 or infinite. p0 out (k0), p1 x (k1); n0 outer,
 * n1 r, n2 inner; k6 the variant. */
int64_t g_base, g_st;
float g_m;
float pterm(int which, int64_t j) {
  float x = ldf(pc.a.p[1], g_base + j * g_st, pc.a.k[1]);
  if (which == 0) return agp_abs(x);
  precise float q = agp_div(x, g_m);
  precise float q2 = q * q;
  return q2;
}
#include "psum.glsl"
void main() {
  int64_t q = P_LINE(), R = pc.a.n[1], inner = pc.a.n[2];
  if (q >= pc.a.n[0] * inner) return;
  g_base = (q / inner) * R * inner + q % inner;
  g_st = inner;
  float m = 0.0, nan = 0.0;
  for (int64_t j = P_LANE; j < R; j += P_STEP) {
    float t = agp_abs(ldf(pc.a.p[1], g_base + j * g_st, pc.a.k[1]));
    if (ag_isnan(t)) nan = 1.0;
    else m = t > m ? t : m;
  }
  if (!P_SINGLE) {
    m = wg_max(m);
    nan = wg_max(nan);
  }
  g_m = m;
  int v = pc.a.k[6];
  precise float r;
  if (nan != 0.0) r = F_NAN;
  else if (v == AG_KV_NORM_L1) r = psum_any(0, R);
  else if (v == AG_KV_NORM_INF || m == 0.0 || ag_isinf(m)) r = m;
  else r = m * agp_sqrt(psum_any(1, R));
  if (P_LEAD) stf(pc.a.p[0], q, pc.a.k[0], r);
}
#endif
