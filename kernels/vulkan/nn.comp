#version 450
/* Row-wise network kernels (one work-group per row, statistics in f32):
 * softmax, cross-entropy, layer and RMS norm, variance; and the per-element
 * or per-line kernels cumsum, gather, topk, embedding. One kernel per build
 * define; index operands are i32 or i64 (k[3]). Errors name the kernel op
 * through the generated AG_K_* constants. */
#include "common.glsl"
layout(local_size_x = WG) in;

#define L int(gl_LocalInvocationID.x)
/* Row kernels: the grid may hold a few groups past the last row (n0). */
#define ROW_GUARD() if (group_id() >= pc.a.n[0]) return;

#if defined(K_SOFTMAX)
/* p0 y, p1 x, k0 dtype, n1 cols, k6 the variant */
void main() {
  ROW_GUARD()
  int64_t cols = pc.a.n[1], base = group_id() * cols;
  uint64_t y = pc.a.p[0], x = pc.a.p[1];
  int dt = pc.a.k[0];
  float m = -F_INF;
  for (int64_t j = L; j < cols; j += WG) m = ag_fmax(m, ldf(x, base + j, dt));
  m = wg_max(m);
  float s = 0.0;
  for (int64_t j = L; j < cols; j += WG) s += exp(ldf(x, base + j, dt) - m);
  s = wg_sum(s);
  float ls = log(s), inv = 1.0 / s;
  for (int64_t j = L; j < cols; j += WG) {
    float v = ldf(x, base + j, dt) - m;
    stf(y, base + j, dt, pc.a.k[6] == AG_KV_LOG_SOFTMAX ? v - ls : exp(v) * inv);
  }
}
#endif

#if defined(K_SOFTMAX_BWD)
/* p0 dx, p1 dy, p2 y */
void main() {
  ROW_GUARD()
  int64_t cols = pc.a.n[1], base = group_id() * cols;
  int dt = pc.a.k[0];
  bool lg = pc.a.k[6] == AG_KV_LOG_SOFTMAX;
  float s = 0.0;
  for (int64_t j = L; j < cols; j += WG) {
    float g = ldf(pc.a.p[1], base + j, dt);
    s += lg ? g : g * ldf(pc.a.p[2], base + j, dt);
  }
  s = wg_sum(s);
  for (int64_t j = L; j < cols; j += WG) {
    float g = ldf(pc.a.p[1], base + j, dt), yv = ldf(pc.a.p[2], base + j, dt);
    stf(pc.a.p[0], base + j, dt, lg ? g - exp(yv) * s : yv * (g - s));
  }
}
#endif

#if defined(K_CE) || defined(K_CE_BWD)
/* p0 loss f32 [N] (fwd) or dlogits (bwd), p1 logits (k1), p2 targets (k3),
 * p3 upstream grad f32 (bwd, stride n3), p7 error word; n1 cols, n2 ignore */
void main() {
  ROW_GUARD()
  int64_t row = group_id(), cols = pc.a.n[1], base = row * cols;
  int dt = pc.a.k[1];
  uint64_t x = pc.a.p[1];
  int64_t t = ld_index(pc.a.p[2], row, pc.a.k[3]);
#if defined(K_CE)
  if (t == pc.a.n[2]) {
    if (L == 0) PF(pc.a.p[0], row) = 0.0;
    return;
  }
  if (t < 0 || t >= cols) {
    if (L == 0) {
      PF(pc.a.p[0], row) = F_NAN;
      set_error(pc.a.p[7], AG_ERR_INDEX, AG_K_CROSS_ENTROPY, t, cols);
    }
    return;
  }
#else
  if (t == pc.a.n[2] || t < 0 || t >= cols) {
    for (int64_t j = L; j < cols; j += WG) stf(pc.a.p[0], base + j, dt, 0.0);
    if (t != pc.a.n[2] && L == 0) set_error(pc.a.p[7], AG_ERR_INDEX, AG_K_CROSS_ENTROPY_BWD, t, cols);
    return;
  }
#endif
  float m = -F_INF;
  for (int64_t j = L; j < cols; j += WG) m = ag_fmax(m, ldf(x, base + j, dt));
  m = wg_max(m);
  float s = 0.0;
  for (int64_t j = L; j < cols; j += WG) s += exp(ldf(x, base + j, dt) - m);
  s = wg_sum(s);
#if defined(K_CE)
  if (L == 0) PF(pc.a.p[0], row) = log(s) + m - ldf(x, base + t, dt);
#else
  float gr = PF(pc.a.p[3], row * pc.a.n[3]), inv = 1.0 / s;
  for (int64_t j = L; j < cols; j += WG) {
    float p = exp(ldf(x, base + j, dt) - m) * inv;
    stf(pc.a.p[0], base + j, dt, (p - (j == t ? 1.0 : 0.0)) * gr);
  }
#endif
}
#endif

#if defined(K_LN)
/* p0 y, p1 x (k0), p2 w or 0, p3 b or 0, p4 mean or 0, p5 rstd or 0; n1 cols, f0 eps */
void main() {
  ROW_GUARD()
  int64_t row = group_id(), cols = pc.a.n[1], base = row * cols;
  int dt = pc.a.k[0];
  uint64_t x = pc.a.p[1], w = pc.a.p[2], b = pc.a.p[3];
  float s = 0.0;
  for (int64_t j = L; j < cols; j += WG) s += ldf(x, base + j, dt);
  float mu = wg_sum(s) / float(cols);
  float v = 0.0;
  for (int64_t j = L; j < cols; j += WG) {
    float d = ldf(x, base + j, dt) - mu;
    v += d * d;
  }
  float rs = inversesqrt(wg_sum(v) / float(cols) + pc.a.f[0]);
  for (int64_t j = L; j < cols; j += WG) {
    float o = (ldf(x, base + j, dt) - mu) * rs;
    if (w != 0ul) o *= ldf(w, j, dt);
    if (b != 0ul) o += ldf(b, j, dt);
    stf(pc.a.p[0], base + j, dt, o);
  }
  if (L == 0) {
    if (pc.a.p[4] != 0ul) PF(pc.a.p[4], row) = mu;
    if (pc.a.p[5] != 0ul) PF(pc.a.p[5], row) = rs;
  }
}
#endif

#if defined(K_LN_BWD)
/* p0 dx, p1 dy, p2 x, p3 mean, p4 rstd, p5 w or 0; k0 dtype; n1 cols */
void main() {
  ROW_GUARD()
  int64_t row = group_id(), cols = pc.a.n[1], base = row * cols;
  int dt = pc.a.k[0];
  uint64_t w = pc.a.p[5];
  float mu = PF(pc.a.p[3], row), rs = PF(pc.a.p[4], row);
  float s1 = 0.0, s2 = 0.0;
  for (int64_t j = L; j < cols; j += WG) {
    float g = ldf(pc.a.p[1], base + j, dt) * (w != 0ul ? ldf(w, j, dt) : 1.0);
    s1 += g;
    s2 += g * (ldf(pc.a.p[2], base + j, dt) - mu) * rs;
  }
  s1 = wg_sum(s1) / float(cols);
  s2 = wg_sum(s2) / float(cols);
  for (int64_t j = L; j < cols; j += WG) {
    float g = ldf(pc.a.p[1], base + j, dt) * (w != 0ul ? ldf(w, j, dt) : 1.0);
    float xh = (ldf(pc.a.p[2], base + j, dt) - mu) * rs;
    stf(pc.a.p[0], base + j, dt, rs * (g - s1 - xh * s2));
  }
}
#endif

#if defined(K_LN_BWD_WB)
/* p0 dw or 0, p1 db or 0 (f32), p2 dy, p3 x, p4 mean, p5 rstd; n0 rows, n1 cols */
void main() {
  int64_t j = gid(), rows = pc.a.n[0], cols = pc.a.n[1];
  if (j >= cols) return;
  int dt = pc.a.k[0];
  /* rows n2 .. n2 + n3, continuing the sums already in dw, db after the
   * first chunk (long batches take several dispatches, same order) */
  bool cont = pc.a.n[2] > 0;
  float sw = cont && pc.a.p[0] != 0ul ? PF(pc.a.p[0], j) : 0.0, sb = cont && pc.a.p[1] != 0ul ? PF(pc.a.p[1], j) : 0.0;
  for (int64_t r = pc.a.n[2]; r < pc.a.n[2] + pc.a.n[3]; r++) {
    float g = ldf(pc.a.p[2], r * cols + j, dt);
    sw += g * (ldf(pc.a.p[3], r * cols + j, dt) - PF(pc.a.p[4], r)) * PF(pc.a.p[5], r);
    sb += g;
  }
  if (pc.a.p[0] != 0ul) PF(pc.a.p[0], j) = sw;
  if (pc.a.p[1] != 0ul) PF(pc.a.p[1], j) = sb;
}
#endif

#if defined(K_RMS)
/* p0 y, p1 x, p2 w or 0, p3 rstd or 0; n1 cols, f0 eps */
void main() {
  ROW_GUARD()
  int64_t row = group_id(), cols = pc.a.n[1], base = row * cols;
  int dt = pc.a.k[0];
  uint64_t x = pc.a.p[1], w = pc.a.p[2];
  float s = 0.0;
  for (int64_t j = L; j < cols; j += WG) {
    float v = ldf(x, base + j, dt);
    s += v * v;
  }
  float rs = inversesqrt(wg_sum(s) / float(cols) + pc.a.f[0]);
  for (int64_t j = L; j < cols; j += WG) {
    float o = ldf(x, base + j, dt) * rs;
    if (w != 0ul) o *= ldf(w, j, dt);
    stf(pc.a.p[0], base + j, dt, o);
  }
  if (L == 0 && pc.a.p[3] != 0ul) PF(pc.a.p[3], row) = rs;
}
#endif

#if defined(K_RMS_BWD)
/* p0 dx, p1 dy, p2 x, p3 rstd, p4 w or 0; n1 cols */
void main() {
  ROW_GUARD()
  int64_t row = group_id(), cols = pc.a.n[1], base = row * cols;
  int dt = pc.a.k[0];
  uint64_t w = pc.a.p[4];
  float rs = PF(pc.a.p[3], row);
  float s = 0.0;
  for (int64_t j = L; j < cols; j += WG)
    s += ldf(pc.a.p[1], base + j, dt) * (w != 0ul ? ldf(w, j, dt) : 1.0) * ldf(pc.a.p[2], base + j, dt);
  s = wg_sum(s) / float(cols) * rs * rs;
  for (int64_t j = L; j < cols; j += WG) {
    float g = ldf(pc.a.p[1], base + j, dt) * (w != 0ul ? ldf(w, j, dt) : 1.0);
    stf(pc.a.p[0], base + j, dt, rs * (g - ldf(pc.a.p[2], base + j, dt) * s));
  }
}
#endif

#if defined(K_RMS_BWD_W)
/* p0 dw f32, p1 dy, p2 x, p3 rstd; n0 rows, n1 cols */
void main() {
  int64_t j = gid(), rows = pc.a.n[0], cols = pc.a.n[1];
  if (j >= cols) return;
  int dt = pc.a.k[0];
  float sw = pc.a.n[2] > 0 ? PF(pc.a.p[0], j) : 0.0;
  for (int64_t r = pc.a.n[2]; r < pc.a.n[2] + pc.a.n[3]; r++)
    sw += ldf(pc.a.p[1], r * cols + j, dt) * ldf(pc.a.p[2], r * cols + j, dt) * PF(pc.a.p[3], r);
  PF(pc.a.p[0], j) = sw;
}
#endif

#if defined(K_VAR_ROWS)
/* p0 y, p1 x (k0); n0 outer, n1 r, n2 inner (elements inner apart); f0
 * denominator; k6 the variant */
void main() {
  int64_t row = group_id(), cols = pc.a.n[1], inner = pc.a.n[2];
  if (row >= pc.a.n[0] * inner) return;
  int64_t base = (row / inner) * cols * inner + row % inner;
  int dt = pc.a.k[0];
  float s = 0.0;
  for (int64_t j = L; j < cols; j += WG) s += ldf(pc.a.p[1], base + j * inner, dt);
  float mu = wg_sum(s) / float(cols);
  float v = 0.0;
  for (int64_t j = L; j < cols; j += WG) {
    float d = ldf(pc.a.p[1], base + j * inner, dt) - mu;
    v += d * d;
  }
  v = wg_sum(v) / pc.a.f[0];
  if (L == 0) stf(pc.a.p[0], row, dt, pc.a.k[6] == AG_KV_STD ? sqrt(v) : v);
}
#endif

#if defined(K_VAR_COLS)
/* n0 outer, n1 r, n2 inner */
void main() {
  int64_t t = gid(), outer = pc.a.n[0], r = pc.a.n[1], inner = pc.a.n[2];
  if (t >= outer * inner) return;
  int dt = pc.a.k[0];
  int64_t base = (t / inner) * r * inner + t % inner;
  float s = 0.0;
  for (int64_t k = 0; k < r; k++) s += ldf(pc.a.p[1], base + k * inner, dt);
  float mu = s / float(r), v = 0.0;
  for (int64_t k = 0; k < r; k++) {
    float d = ldf(pc.a.p[1], base + k * inner, dt) - mu;
    v += d * d;
  }
  v /= pc.a.f[0];
  stf(pc.a.p[0], t, dt, pc.a.k[6] == AG_KV_STD ? sqrt(v) : v);
}
#endif

#if defined(K_CUMSUM)
/* n0 outer, n1 r, n2 inner; k6 the variant; steps n3 .. n3 + n4 of each line,
 * continuing from the f32 running sum in p2 (one per line), so a long line
 * takes several dispatches in order and the sums stay sequential */
void main() {
  int64_t t = gid(), outer = pc.a.n[0], r = pc.a.n[1], inner = pc.a.n[2];
  if (t >= outer * inner) return;
  int dt = pc.a.k[0];
  int64_t base = (t / inner) * r * inner + t % inner, k0 = pc.a.n[3];
  float s = k0 == 0 ? 0.0 : PF(pc.a.p[2], t);
  for (int64_t kk = 0; kk < pc.a.n[4]; kk++) {
    int64_t k = k0 + kk;
    int64_t p = base + (pc.a.k[6] == AG_KV_CUMSUM_SUFFIX ? r - 1 - k : k) * inner;
    s += ldf(pc.a.p[1], p, dt);
    stf(pc.a.p[0], p, dt, s);
  }
  PF(pc.a.p[2], t) = s;
}
#endif

#if defined(K_GATHER) || defined(K_GATHER_BWD)
/* p0 out / dx, p1 x / dout (k0), p2 index (k3) with strides n4 n5 n6;
 * n0 O, n1 K, n2 I, n3 X; p7 error word */
int64_t gidx(int64_t o, int64_t k, int64_t i) {
  return ld_index(pc.a.p[2], o * pc.a.n[4] + k * pc.a.n[5] + i * pc.a.n[6], pc.a.k[3]);
}
#endif

#if defined(K_GATHER)
void main() {
  int64_t t = gid(), O = pc.a.n[0], K = pc.a.n[1], I = pc.a.n[2], X = pc.a.n[3];
  if (t >= O * K * I) return;
  int dt = pc.a.k[0];
  int64_t i = t % I, ok = t / I, k = ok % K, o = ok / K;
  int64_t j = gidx(o, k, i);
  if (j < 0 || j >= X) {
    stf(pc.a.p[0], t, dt, 0.0);
    set_error(pc.a.p[7], AG_ERR_INDEX, AG_K_GATHER, j, X);
  } else {
    stf(pc.a.p[0], t, dt, ldf(pc.a.p[1], (o * X + j) * I + i, dt));
  }
}
#endif

#if defined(K_GATHER_BWD)
void main() {
  int64_t t = gid(), O = pc.a.n[0], K = pc.a.n[1], I = pc.a.n[2], X = pc.a.n[3];
  if (t >= O * I) return;
  int dt = pc.a.k[0];
  int64_t o = t / I, i = t % I, base = o * X * I + i;
  for (int64_t j = 0; j < X; j++) PF(pc.a.p[0], base + j * I) = 0.0;
  for (int64_t k = 0; k < K; k++) {
    int64_t j = gidx(o, k, i);
    if (j >= 0 && j < X) PF(pc.a.p[0], base + j * I) += ldf(pc.a.p[1], (o * K + k) * I + i, dt);
  }
}
#endif

#if defined(K_TOPK)
/* p0 values, p1 x (k0), p2 i64 indices; n0 O, n1 R, n2 I, n3 k; k6 the variant */
bool topk_before(float a, int64_t ia, float b, int64_t ib, bool smallest) {
  bool an = ag_isnan(a), bn = ag_isnan(b);
  if (an != bn) return smallest ? bn : an;
  if (!an && a != b) return smallest ? a < b : a > b;
  return ia < ib;
}
void main() {
  int64_t t = gid(), O = pc.a.n[0], R = pc.a.n[1], I = pc.a.n[2], K = pc.a.n[3];
  if (t >= O * R * I) return;
  int dt = pc.a.k[0];
  bool sm = pc.a.k[6] == AG_KV_TOPK_SMALLEST;
  int64_t i = t % I, oj = t / I, j = oj % R, o = oj / R, base = o * R * I + i;
  float v = ldf(pc.a.p[1], base + j * I, dt);
  int64_t rank = 0;
  for (int64_t q = 0; q < R; q++)
    if (rank < K && topk_before(ldf(pc.a.p[1], base + q * I, dt), q, v, j, sm)) rank++;
  if (rank < K) {
    int64_t p = (o * K + rank) * I + i;
    stf(pc.a.p[0], p, dt, v);
    PL(pc.a.p[2], p) = j;
  }
}
#endif

#if defined(K_EMB)
/* p0 out [n, d], p1 table, k5 element size, p2 index (k3); n0 n, n1 d, n2 v;
 * rows copied as bits */
void main() {
  int64_t i = gid(), n = pc.a.n[0], d = pc.a.n[1], v = pc.a.n[2];
  if (i >= n * d) return;
  int64_t row = i / d, col = i % d;
  int64_t t = ld_index(pc.a.p[2], row, pc.a.k[3]);
  bool bad = t < 0 || t >= v;
  if (bad && col == 0) set_error(pc.a.p[7], AG_ERR_INDEX, AG_K_EMBEDDING, t, v);
  int64_t src = t * d + col;
  int esz = pc.a.k[5];
  if (esz == 2) PH(pc.a.p[0], i) = bad ? uint16_t(0u) : PH(pc.a.p[1], src);
  else if (esz == 8) PL(pc.a.p[0], i) = bad ? 0l : PL(pc.a.p[1], src);
  else if (esz == 1) PB(pc.a.p[0], i) = bad ? uint8_t(0u) : PB(pc.a.p[1], src);
  else PU(pc.a.p[0], i) = bad ? 0u : PU(pc.a.p[1], src);
}
#endif

#if defined(K_EMB_BWD)
/* p0 dtable f32 (+=), p1 dout (k0), p2 index (k3); n0 n, n1 d, n2 v: one
 * invocation per column walks the rows in order (no atomics, CPU order) */
void main() {
  int64_t col = gid(), n = pc.a.n[0], d = pc.a.n[1], v = pc.a.n[2];
  if (col >= d) return;
  /* rows n3 .. n3 + n4: long index lists take several dispatches in order */
  for (int64_t r = pc.a.n[3]; r < pc.a.n[3] + pc.a.n[4]; r++) {
    int64_t t = ld_index(pc.a.p[2], r, pc.a.k[3]);
    if (t >= 0 && t < v) PF(pc.a.p[0], t * d + col) += ldf(pc.a.p[1], r * d + col, pc.a.k[0]);
    else if (col == 0) set_error(pc.a.p[7], AG_ERR_INDEX, AG_K_EMBEDDING_BWD, t, v);
  }
}
#endif
