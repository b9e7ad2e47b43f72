/* Row-wise network kernels: softmax, cross-entropy, layer norm (one
 * work-group per row, statistics in f32) and embedding lookups. */

/* The portable program has its own softmax, cross-entropy, layer and RMS
 * norm kernels (portable.cl). */
#ifndef AG_PORTABLE
/* The row kernels below read 4 elements at a time (ld4, rowred.cl: item l
 * takes quads l, l + L, ...; the last cols % 4 elements one by one). */
#define ROW_QUADS(q) for (long q = l; q < n4; q += L)
#define ROW_TAIL(j) for (long j = 4 * n4 + l; j < cols; j += L)

/* f32 rows store exp(x - m) in the sum's pass and scale it in place: one
 * exp per element. Half types recompute it (a stored half would round twice). */
__kernel void ag_softmax(gbuf *y, ulong yo, const gbuf *x, ulong xo, int dt, long cols, int logm) {
  __local float sh[AG_WG];
  long base = (long)get_group_id(0) * cols, n4 = cols / 4;
  int l = get_local_id(0), L = get_local_size(0);
  const bool keep = !logm && dt == DT_F32;
  float4 m4 = (float4)(-INFINITY);
  ROW_QUADS(q) { /* fmax, as a compare and select (m4 is never NaN) */
    float4 v = ld4(x, xo, base + 4 * q, dt);
    m4 = select(m4, v, v > m4);
  }
  float m = fmax(fmax(m4.x, m4.y), fmax(m4.z, m4.w));
  ROW_TAIL(j) m = fmax(m, ldf(x, xo, base + j, dt));
  m = wg_max(m, sh);
  float4 s4 = (float4)(0.0f);
  ROW_QUADS(q) {
    float4 e = exp(ld4(x, xo, base + 4 * q, dt) - m);
    if (keep) st4(y, yo, base + 4 * q, dt, e);
    s4 += e;
  }
  float s = (s4.x + s4.y) + (s4.z + s4.w);
  ROW_TAIL(j) {
    float e = exp(ldf(x, xo, base + j, dt) - m);
    if (keep) stf(y, yo, base + j, dt, e);
    s += e;
  }
  s = wg_sum(s, sh);
  float ls = log(s), inv = 1.0f / s;
  ROW_QUADS(q) {
    float4 v = keep ? ld4(y, yo, base + 4 * q, dt) : ld4(x, xo, base + 4 * q, dt) - m;
    st4(y, yo, base + 4 * q, dt, keep ? v * inv : logm ? v - ls : exp(v) * inv);
  }
  ROW_TAIL(j) {
    float v = keep ? ldf(y, yo, base + j, dt) : ldf(x, xo, base + j, dt) - m;
    stf(y, yo, base + j, dt, keep ? v * inv : logm ? v - ls : exp(v) * inv);
  }
}

__kernel void ag_softmax_bwd(gbuf *dx, ulong dxo, const gbuf *dy, ulong dyo, const gbuf *y,
                             ulong yo, int dt, long cols, int logm) {
  __local float sh[AG_WG];
  long base = (long)get_group_id(0) * cols, n4 = cols / 4;
  int l = get_local_id(0), L = get_local_size(0);
  float4 s4 = (float4)(0.0f);
  ROW_QUADS(q) {
    float4 g = ld4(dy, dyo, base + 4 * q, dt);
    s4 += logm ? g : g * ld4(y, yo, base + 4 * q, dt);
  }
  float s = (s4.x + s4.y) + (s4.z + s4.w);
  ROW_TAIL(j) {
    float g = ldf(dy, dyo, base + j, dt);
    s += logm ? g : g * ldf(y, yo, base + j, dt);
  }
  s = wg_sum(s, sh);
  ROW_QUADS(q) {
    float4 g = ld4(dy, dyo, base + 4 * q, dt), yv = ld4(y, yo, base + 4 * q, dt);
    st4(dx, dxo, base + 4 * q, dt, logm ? g - exp(yv) * s : yv * (g - s));
  }
  ROW_TAIL(j) {
    float g = ldf(dy, dyo, base + j, dt), yv = ldf(y, yo, base + j, dt);
    stf(dx, dxo, base + j, dt, logm ? g - exp(yv) * s : yv * (g - s));
  }
}

/* loss[row] = logsumexp(x) - x[t]; errors name the ag_kop (kops.h). */

__kernel void ag_cross_entropy(gbuf *loss, ulong lo, const gbuf *x, ulong xo, int dt,
                               const gbuf *tg, ulong to, long cols, int ignore,
                               __global int *err) {
  __local float sh[AG_WG];
  long row = get_group_id(0), base = row * cols;
  int l = get_local_id(0), L = get_local_size(0);
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
  float m = -INFINITY;
  for (long j = l; j < cols; j += L) m = fmax(m, ldf(x, xo, base + j, dt));
  m = wg_max(m, sh);
  float s = 0.0f;
  for (long j = l; j < cols; j += L) s += exp(ldf(x, xo, base + j, dt) - m);
  s = wg_sum(s, sh);
  if (l == 0) stf(loss, lo, row, DT_F32, log(s) + m - ldf(x, xo, base + t, dt));
}

__kernel void ag_cross_entropy_bwd(gbuf *dl, ulong dlo, const gbuf *x, ulong xo, int dt,
                                   const gbuf *tg, ulong to, const gbuf *g, ulong go, long gstride,
                                   long cols, int ignore, __global int *err) {
  __local float sh[AG_WG];
  long row = get_group_id(0), base = row * cols;
  int l = get_local_id(0), L = get_local_size(0);
  int t = ((const __global int *)(tg + to))[row];
  if (t == ignore || t < 0 || t >= cols) {
    for (long j = l; j < cols; j += L) stf(dl, dlo, base + j, dt, 0.0f);
    if (t != ignore && l == 0) set_error(err, ERR_INDEX, AG_K_CROSS_ENTROPY_BWD, t, cols);
    return;
  }
  float m = -INFINITY;
  for (long j = l; j < cols; j += L) m = fmax(m, ldf(x, xo, base + j, dt));
  m = wg_max(m, sh);
  float s = 0.0f;
  for (long j = l; j < cols; j += L) s += exp(ldf(x, xo, base + j, dt) - m);
  s = wg_sum(s, sh);
  float gr = ldf(g, go, row * gstride, DT_F32), inv = 1.0f / s;
  for (long j = l; j < cols; j += L) {
    float p = exp(ldf(x, xo, base + j, dt) - m) * inv;
    stf(dl, dlo, base + j, dt, (p - (j == t ? 1.0f : 0.0f)) * gr);
  }
}

__kernel void ag_layernorm(gbuf *y, ulong yo, const gbuf *x, ulong xo, int dt, const gbuf *w,
                           ulong wo, const gbuf *b, ulong bo, __global float *mean, ulong mo,
                           __global float *rstd, ulong ro, long cols, float eps) {
  __local float2 sh[AG_WG];
  long row = get_group_id(0), base = row * cols, n4 = cols / 4;
  int l = get_local_id(0), L = get_local_size(0);
  /* one statistics pass: sums of d = x - c and of d * d, c the row's first
   * element (a shift near the mean keeps the variance's cancellation small;
   * 0 for an empty row), both in one tree */
  float c = cols ? ldf(x, xo, base, dt) : 0.0f;
  float4 a4 = (float4)(0.0f), b4 = (float4)(0.0f);
  ROW_QUADS(q) {
    float4 d = ld4(x, xo, base + 4 * q, dt) - c;
    a4 += d;
    b4 += d * d;
  }
  float2 s = (float2)((a4.x + a4.y) + (a4.z + a4.w), (b4.x + b4.y) + (b4.z + b4.w));
  ROW_TAIL(j) {
    float d = ldf(x, xo, base + j, dt) - c;
    s += (float2)(d, d * d);
  }
  sh[l] = s;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int h = L / 2; h > 0; h >>= 1) {
    if (l < h) sh[l] += sh[l + h];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  float dm = sh[0].x / (float)cols, mu = c + dm;
  float rs = rsqrt(fmax(sh[0].y / (float)cols - dm * dm, 0.0f) + eps);
  ROW_QUADS(q) {
    float4 o = (ld4(x, xo, base + 4 * q, dt) - mu) * rs;
    if (w) o *= ld4(w, wo, 4 * q, dt);
    if (b) o += ld4(b, bo, 4 * q, dt);
    st4(y, yo, base + 4 * q, dt, o);
  }
  ROW_TAIL(j) {
    float o = (ldf(x, xo, base + j, dt) - mu) * rs;
    if (w) o *= ldf(w, wo, j, dt);
    if (b) o += ldf(b, bo, j, dt);
    stf(y, yo, base + j, dt, o);
  }
  if (l == 0) {
    if (mean) stf((gbuf *)mean, mo, row, DT_F32, mu);
    if (rstd) stf((gbuf *)rstd, ro, row, DT_F32, rs);
  }
}

/* dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * w. */
__kernel void ag_layernorm_bwd(gbuf *dx, ulong dxo, const gbuf *dy, ulong dyo, const gbuf *x,
                               ulong xo, int dt, const gbuf *mean, ulong mo, const gbuf *rstd,
                               ulong ro, const gbuf *w, ulong wo, long cols) {
  __local float2 sh[AG_WG];
  long row = get_group_id(0), base = row * cols, n4 = cols / 4;
  int l = get_local_id(0), L = get_local_size(0);
  float mu = ldf(mean, mo, row, DT_F32), rs = ldf(rstd, ro, row, DT_F32);
  float4 a4 = (float4)(0.0f), b4 = (float4)(0.0f);
  ROW_QUADS(q) {
    float4 g = ld4(dy, dyo, base + 4 * q, dt);
    if (w) g *= ld4(w, wo, 4 * q, dt);
    a4 += g;
    b4 += g * (ld4(x, xo, base + 4 * q, dt) - mu) * rs;
  }
  float s1 = (a4.x + a4.y) + (a4.z + a4.w), s2 = (b4.x + b4.y) + (b4.z + b4.w);
  ROW_TAIL(j) {
    float g = ldf(dy, dyo, base + j, dt) * (w ? ldf(w, wo, j, dt) : 1.0f);
    s1 += g;
    s2 += g * (ldf(x, xo, base + j, dt) - mu) * rs;
  }
  sh[l] = (float2)(s1, s2); /* both sums in one tree */
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int h = L / 2; h > 0; h >>= 1) {
    if (l < h) sh[l] += sh[l + h];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  s1 = sh[0].x / (float)cols;
  s2 = sh[0].y / (float)cols;
  ROW_QUADS(q) {
    float4 g = ld4(dy, dyo, base + 4 * q, dt);
    if (w) g *= ld4(w, wo, 4 * q, dt);
    float4 xh = (ld4(x, xo, base + 4 * q, dt) - mu) * rs;
    st4(dx, dxo, base + 4 * q, dt, rs * (g - s1 - xh * s2));
  }
  ROW_TAIL(j) {
    float g = ldf(dy, dyo, base + j, dt) * (w ? ldf(w, wo, j, dt) : 1.0f);
    float xh = (ldf(x, xo, base + j, dt) - mu) * rs;
    stf(dx, dxo, base + j, dt, rs * (g - s1 - xh * s2));
  }
}

/* dw[j] = sum_n dy*xhat, db[j] = sum_n dy: one work-item per column, rows in
 * order, so the result does not depend on the device. */
__kernel void ag_layernorm_bwd_wb(gbuf *dw, ulong dwo, gbuf *db, ulong dbo, const gbuf *dy,
                                  ulong dyo, const gbuf *x, ulong xo, int dt, const gbuf *mean,
                                  ulong mo, const gbuf *rstd, ulong ro, long rows, long cols) {
  long j = get_global_id(0);
  if (j >= cols) return;
  float sw = 0.0f, sb = 0.0f;
  for (long r = 0; r < rows; r++) {
    float g = ldf(dy, dyo, r * cols + j, dt);
    sw += g * (ldf(x, xo, r * cols + j, dt) - ldf(mean, mo, r, DT_F32)) * ldf(rstd, ro, r, DT_F32);
    sb += g;
  }
  if (dw) stf(dw, dwo, j, DT_F32, sw);
  if (db) stf(db, dbo, j, DT_F32, sb);
}

/* RMS norm: rstd = rsqrt(mean(x^2) + eps), y = x * rstd * w. */
__kernel void ag_rmsnorm(gbuf *y, ulong yo, const gbuf *x, ulong xo, int dt, const gbuf *w,
                         ulong wo, __global float *rstd, ulong ro, long cols, float eps) {
  __local float sh[AG_WG];
  long row = get_group_id(0), base = row * cols, n4 = cols / 4;
  int l = get_local_id(0), L = get_local_size(0);
  float4 s4 = (float4)(0.0f);
  ROW_QUADS(q) {
    float4 v = ld4(x, xo, base + 4 * q, dt);
    s4 += v * v;
  }
  float s = (s4.x + s4.y) + (s4.z + s4.w);
  ROW_TAIL(j) {
    float v = ldf(x, xo, base + j, dt);
    s += v * v;
  }
  float rs = rsqrt(wg_sum(s, sh) / (float)cols + eps);
  ROW_QUADS(q) {
    float4 o = ld4(x, xo, base + 4 * q, dt) * rs;
    if (w) o *= ld4(w, wo, 4 * q, dt);
    st4(y, yo, base + 4 * q, dt, o);
  }
  ROW_TAIL(j) {
    float o = ldf(x, xo, base + j, dt) * rs;
    if (w) o *= ldf(w, wo, j, dt);
    stf(y, yo, base + j, dt, o);
  }
  if (l == 0 && rstd) stf((gbuf *)rstd, ro, row, DT_F32, rs);
}

/* dx = rstd * (g - x * rstd^2 * mean(g * x)), g = dy * w. */
__kernel void ag_rmsnorm_bwd(gbuf *dx, ulong dxo, const gbuf *dy, ulong dyo, const gbuf *x,
                             ulong xo, int dt, const gbuf *rstd, ulong ro, const gbuf *w, ulong wo,
                             long cols) {
  __local float sh[AG_WG];
  long row = get_group_id(0), base = row * cols, n4 = cols / 4;
  int l = get_local_id(0), L = get_local_size(0);
  float rs = ldf(rstd, ro, row, DT_F32);
  float4 s4 = (float4)(0.0f);
  ROW_QUADS(q) {
    float4 g = ld4(dy, dyo, base + 4 * q, dt);
    if (w) g *= ld4(w, wo, 4 * q, dt);
    s4 += g * ld4(x, xo, base + 4 * q, dt);
  }
  float s = (s4.x + s4.y) + (s4.z + s4.w);
  ROW_TAIL(j) s += ldf(dy, dyo, base + j, dt) * (w ? ldf(w, wo, j, dt) : 1.0f) * ldf(x, xo, base + j, dt);
  s = wg_sum(s, sh) / (float)cols * rs * rs;
  ROW_QUADS(q) {
    float4 g = ld4(dy, dyo, base + 4 * q, dt);
    if (w) g *= ld4(w, wo, 4 * q, dt);
    st4(dx, dxo, base + 4 * q, dt, rs * (g - ld4(x, xo, base + 4 * q, dt) * s));
  }
  ROW_TAIL(j) {
    float g = ldf(dy, dyo, base + j, dt) * (w ? ldf(w, wo, j, dt) : 1.0f);
    stf(dx, dxo, base + j, dt, rs * (g - ldf(x, xo, base + j, dt) * s));
  }
}

/* dw[j] = sum_n dy * x * rstd: one work-item per column, rows in order. */
__kernel void ag_rmsnorm_bwd_w(gbuf *dw, ulong dwo, const gbuf *dy, ulong dyo, const gbuf *x,
                               ulong xo, int dt, const gbuf *rstd, ulong ro, long rows, long cols) {
  long j = get_global_id(0);
  if (j >= cols) return;
  float sw = 0.0f;
  for (long r = 0; r < rows; r++)
    sw += ldf(dy, dyo, r * cols + j, dt) * ldf(x, xo, r * cols + j, dt) * ldf(rstd, ro, r, DT_F32);
  stf(dw, dwo, j, DT_F32, sw);
}

#endif

/* var/std of rows (inner == 1): one work-group per row, mean then the
 * centred sum of squares, in f32. */
__kernel void ag_var_rows(gbuf *y, ulong yo, const gbuf *x, ulong xo, int dt, long cols, float den,
                          int sq) {
  __local float sh[AG_WG];
  long row = get_group_id(0), base = row * cols;
  int l = get_local_id(0), L = get_local_size(0);
  float s = 0.0f;
  for (long j = l; j < cols; j += L) s += ldf(x, xo, base + j, dt);
  float mu = wg_sum(s, sh) / (float)cols;
  float v = 0.0f;
  for (long j = l; j < cols; j += L) {
    float d = ldf(x, xo, base + j, dt) - mu;
    v += d * d;
  }
  v = wg_sum(v, sh) / den;
  if (l == 0) stf(y, yo, row, dt, sq ? sqrt(v) : v);
}

#ifndef AG_PORTABLE /* portable.cl has its own */
/* var/std over the middle dim of [outer, r, inner]: a work-item per output. */
__kernel void ag_var_cols(gbuf *y, ulong yo, const gbuf *x, ulong xo, int dt, long outer, long r,
                          long inner, float den, int sq) {
  long t = get_global_id(0);
  if (t >= outer * inner) return;
  long o = t / inner, i = t % inner, base = o * r * inner + i;
  float s = 0.0f;
  for (long k = 0; k < r; k++) s += ldf(x, xo, base + k * inner, dt);
  float mu = s / (float)r, v = 0.0f;
  for (long k = 0; k < r; k++) {
    float d = ldf(x, xo, base + k * inner, dt) - mu;
    v += d * d;
  }
  v /= den;
  stf(y, yo, t, dt, sq ? sqrt(v) : v);
}
#endif

/* Prefix or suffix (rev: CUMSUM_SUFFIX) sums along the middle dim of [outer, r,
 * inner]: a work-item per line, in order, f32 accumulation. */
__kernel void ag_cumsum(gbuf *y, ulong yo, const gbuf *x, ulong xo, int dt, long outer, long r,
                        long inner, int rev) {
  long t = get_global_id(0);
  if (t >= outer * inner) return;
  long o = t / inner, i = t % inner, base = o * r * inner + i;
  float s = 0.0f;
  for (long k = 0; k < r; k++) {
    long p = base + (rev ? r - 1 - k : k) * inner;
    s += ldf(x, xo, p, dt);
    stf(y, yo, p, dt, s);
  }
}

/* out[o,k,i] = x[o, idx[o,k,i], i]; i32 index with element strides s0..s2. */
__kernel void ag_gather(gbuf *y, ulong yo, const gbuf *x, ulong xo, int dt, const gbuf *ix, ulong ixo,
                        long s0, long s1, long s2, long O, long K, long I, long X,
                        __global int *err) {
  long t = get_global_id(0);
  if (t >= O * K * I) return;
  long i = t % I, ok = t / I, k = ok % K, o = ok / K;
  int j = ((const __global int *)(ix + ixo))[o * s0 + k * s1 + i * s2];
  if (j < 0 || j >= X) {
    stf(y, yo, t, dt, 0.0f);
    set_error(err, ERR_INDEX, AG_K_GATHER, j, X);
  } else {
    stf(y, yo, t, dt, ldf(x, xo, (o * X + j) * I + i, dt));
  }
}

/* A work-item per (o, i) line: zeroed, then dout added in order of k. */
__kernel void ag_gather_bwd(gbuf *dx, ulong dxo, const gbuf *g, ulong go, int dt, const gbuf *ix,
                            ulong ixo, long s0, long s1, long s2, long O, long K, long I, long X) {
  long t = get_global_id(0);
  if (t >= O * I) return;
  long o = t / I, i = t % I, base = o * X * I + i;
  for (long j = 0; j < X; j++) stf(dx, dxo, base + j * I, DT_F32, 0.0f);
  for (long k = 0; k < K; k++) {
    int j = ((const __global int *)(ix + ixo))[o * s0 + k * s1 + i * s2];
    if (j >= 0 && j < X) {
      long p = base + j * I;
      stf(dx, dxo, p, DT_F32, ldf(dx, dxo, p, DT_F32) + ldf(g, go, (o * K + k) * I + i, dt));
    }
  }
}

/* topk: a work-item per element, its rank = the number of elements ordered
 * before it (NaN above numbers, ties by lower index); ranks below k written. */
bool topk_before(float a, long ia, float b, long ib, int smallest) {
  bool an = isnan(a), bn = isnan(b);
  if (an != bn) return smallest ? bn : an;
  if (!an && a != b) return smallest ? a < b : a > b;
  return ia < ib;
}
__kernel void ag_topk(gbuf *val, ulong vo, __global long *idx, ulong io, const gbuf *x, ulong xo,
                      int dt, long O, long R, long I, long K, int smallest) {
  long t = get_global_id(0);
  if (t >= O * R * I) return;
  long i = t % I, oj = t / I, j = oj % R, o = oj / R, base = o * R * I + i;
  float v = ldf(x, xo, base + j * I, dt);
  long rank = 0;
  for (long q = 0; q < R && rank < K; q++)
    if (topk_before(ldf(x, xo, base + q * I, dt), q, v, j, smallest)) rank++;
  if (rank < K) {
    long p = (o * K + rank) * I + i;
    stf(val, vo, p, dt, v);
    ((__global long *)((__global uchar *)idx + io))[p] = j;
  }
}

/* Rows are copied as bits (esz bytes per element), so every dtype is exact. */
__kernel void ag_embedding(gbuf *o, ulong oo, const gbuf *tab, ulong tbo, int esz, const gbuf *ix,
                           ulong ixo, long n, long d, long v, __global int *err) {
  long i = get_global_id(0);
  if (i >= n * d) return;
  long row = i / d, col = i % d;
  int t = ((const __global int *)(ix + ixo))[row];
  bool bad = t < 0 || t >= v;
  if (bad && col == 0) set_error(err, ERR_INDEX, AG_K_EMBEDDING, t, v);
  long src = (long)t * d + col;
  if (esz == 2)
    ((__global ushort *)(o + oo))[i] = bad ? 0 : ((const __global ushort *)(tab + tbo))[src];
  else if (esz == 8) /* f64 tables */
    ((__global ulong *)(o + oo))[i] = bad ? 0 : ((const __global ulong *)(tab + tbo))[src];
  else
    ((__global uint *)(o + oo))[i] = bad ? 0 : ((const __global uint *)(tab + tbo))[src];
}

/* One work-item per column walks the indices in order: duplicates need no
 * atomics and the sum order equals the CPU's. */
__kernel void ag_embedding_bwd(gbuf *tab, ulong to, int tdt, const gbuf *dout, ulong doo, int dt,
                               const gbuf *ix, ulong ixo, long n, long d, long v,
                               __global int *err) {
  long col = get_global_id(0);
  if (col >= d) return;
  for (long r = 0; r < n; r++) {
    int t = ((const __global int *)(ix + ixo))[r];
    if (t >= 0 && t < v) {
      long k = (long)t * d + col;
      stf(tab, to, k, tdt, ldf(tab, to, k, tdt) + ldf(dout, doo, r * d + col, dt));
    } else if (col == 0) {
      set_error(err, ERR_INDEX, AG_K_EMBEDDING_BWD, t, v);
    }
  }
}

/* Scaled dot-product attention (AG_K_SDPA*), one work-item per query row
 * (forward, dq) or per key row (dk, dv) streaming over the other side with
 * an online softmax: no T x S matrix, the backward recomputes p from the
 * saved log-sum-exp. Heads up to SDPA_MAXD (the launcher declines larger
 * ones and the core runs the unfused composition). Dropout as the CPU's:
 * element ((b*H + h)*T + i)*S + j of the Philox stream, kept with 1/(1-p). */
#define SDPA_MAXD 128

typedef struct sdpa_geom {
  long B, H, Hkv, T, S, D, Dv;
  long ms0, ms1, ms2, ms3; /* mask strides */
  float scale, p, keep;
  int causal, dt;
  ulong seed, offset;
} sdpa_geom;

float sdpa_mult(const sdpa_geom *g, long idx) {
  if (g->p <= 0.0f) return 1.0f;
  uint4 r = philox(g->offset + (ulong)(idx >> 2), g->seed);
  return (float)(lane4(r, (int)(idx & 3)) >> 8) * 0x1.0p-24f >= g->p ? g->keep : 0.0f;
}

/* scale * q_i . k_j + mask (q row already scaled in qv) */
float sdpa_score(const sdpa_geom *g, const float *qv, const gbuf *k, ulong ko, long kh, long j, const gbuf *m,
                 ulong mo, long b, long h, long i) {
  float s = 0.0f;
  for (long d = 0; d < g->D; d++) s += qv[d] * ldf(k, ko, (kh * g->S + j) * g->D + d, g->dt);
  if (m) s += ldf(m, mo, b * g->ms0 + h * g->ms1 + i * g->ms2 + j * g->ms3, g->dt);
  if (g->causal && j > i) s = -INFINITY;
  return s;
}

__kernel void ag_sdpa(gbuf *o, ulong oo, const gbuf *q, ulong qo, const gbuf *k, ulong ko, const gbuf *v, ulong vo,
                      const gbuf *m, ulong mo, gbuf *lse, ulong lo, sdpa_geom g) {
  long r = get_global_id(0);
  if (r >= g.B * g.H * g.T) return;
  long i = r % g.T, bh = r / g.T, h = bh % g.H, b = bh / g.H, kh = b * g.Hkv + h / (g.H / g.Hkv);
  float qv[SDPA_MAXD], acc[SDPA_MAXD];
  for (long d = 0; d < g.D; d++) qv[d] = ldf(q, qo, r * g.D + d, g.dt) * g.scale;
  for (long e = 0; e < g.Dv; e++) acc[e] = 0.0f;
  float mx = -INFINITY, l = 0.0f;
  long jend = g.causal ? min(g.S, i + 1) : g.S;
  for (long j = 0; j < jend; j++) {
    float s = sdpa_score(&g, qv, k, ko, kh, j, m, mo, b, h, i);
    if (s == -INFINITY) continue;
    float mn = fmax(mx, s), alpha = mx == -INFINITY ? 0.0f : exp(mx - mn), pe = exp(s - mn);
    l = l * alpha + pe;
    mx = mn;
    float pd = pe * sdpa_mult(&g, r * g.S + j);
    for (long e = 0; e < g.Dv; e++) acc[e] = acc[e] * alpha + pd * ldf(v, vo, (kh * g.S + j) * g.Dv + e, g.dt);
  }
  float inv = l > 0.0f ? 1.0f / l : 0.0f;
  for (long e = 0; e < g.Dv; e++) stf(o, oo, r * g.Dv + e, g.dt, acc[e] * inv);
  stf(lse, lo, r, DT_F32, l > 0.0f ? mx + log(l) : -INFINITY);
}

/* delta_i = dO_i . O_i */
float sdpa_delta(const sdpa_geom *g, const gbuf *dO, ulong dOo, const gbuf *out, ulong outo, long r) {
  float s = 0.0f;
  for (long e = 0; e < g->Dv; e++) s += ldf(dO, dOo, r * g->Dv + e, g->dt) * ldf(out, outo, r * g->Dv + e, g->dt);
  return s;
}

__kernel void ag_sdpa_bwd_dq(gbuf *dq, ulong dqo, const gbuf *dO, ulong dOo, const gbuf *q, ulong qo, const gbuf *k,
                             ulong ko, const gbuf *v, ulong vo, const gbuf *m, ulong mo, const gbuf *lse, ulong lo,
                             const gbuf *out, ulong outo, sdpa_geom g) {
  long r = get_global_id(0);
  if (r >= g.B * g.H * g.T) return;
  long i = r % g.T, bh = r / g.T, h = bh % g.H, b = bh / g.H, kh = b * g.Hkv + h / (g.H / g.Hkv);
  float qv[SDPA_MAXD], acc[SDPA_MAXD], go[SDPA_MAXD];
  for (long d = 0; d < g.D; d++) {
    qv[d] = ldf(q, qo, r * g.D + d, g.dt) * g.scale;
    acc[d] = 0.0f;
  }
  for (long e = 0; e < g.Dv; e++) go[e] = ldf(dO, dOo, r * g.Dv + e, g.dt);
  float dl = sdpa_delta(&g, dO, dOo, out, outo, r), ls = ldf(lse, lo, r, DT_F32);
  long jend = g.causal ? min(g.S, i + 1) : g.S;
  for (long j = 0; ls != -INFINITY && j < jend; j++) {
    float s = sdpa_score(&g, qv, k, ko, kh, j, m, mo, b, h, i);
    if (s == -INFINITY) continue;
    float p = exp(s - ls), dp = 0.0f;
    for (long e = 0; e < g.Dv; e++) dp += go[e] * ldf(v, vo, (kh * g.S + j) * g.Dv + e, g.dt);
    float ds = p * (dp * sdpa_mult(&g, r * g.S + j) - dl);
    for (long d = 0; d < g.D; d++) acc[d] += ds * ldf(k, ko, (kh * g.S + j) * g.D + d, g.dt);
  }
  for (long d = 0; d < g.D; d++) stf(dq, dqo, r * g.D + d, g.dt, acc[d] * g.scale);
}

/* dk, dv of key row (b, kv head, j): summed over the q heads of the group
 * and every query, in order (one writer per row, deterministic). */
__kernel void ag_sdpa_bwd_dkv(gbuf *dk, ulong dko, gbuf *dv, ulong dvo, const gbuf *dO, ulong dOo, const gbuf *q,
                              ulong qo, const gbuf *k, ulong ko, const gbuf *v, ulong vo, const gbuf *m, ulong mo,
                              const gbuf *lse, ulong lo, const gbuf *out, ulong outo, sdpa_geom g) {
  long t = get_global_id(0);
  if (t >= g.B * g.Hkv * g.S) return;
  long j = t % g.S, kh = t / g.S, b = kh / g.Hkv, G = g.H / g.Hkv;
  float vv[SDPA_MAXD], gk[SDPA_MAXD], gv[SDPA_MAXD], qv[SDPA_MAXD];
  for (long e = 0; e < g.Dv; e++) {
    vv[e] = ldf(v, vo, t * g.Dv + e, g.dt);
    gv[e] = 0.0f;
  }
  for (long d = 0; d < g.D; d++) gk[d] = 0.0f;
  for (long hh = 0; hh < G; hh++) {
    long h = (kh % g.Hkv) * G + hh;
    for (long i = g.causal ? j : 0; i < g.T; i++) {
      long r = (b * g.H + h) * g.T + i;
      float ls = ldf(lse, lo, r, DT_F32);
      if (ls == -INFINITY) continue;
      for (long d = 0; d < g.D; d++) qv[d] = ldf(q, qo, r * g.D + d, g.dt) * g.scale;
      float s = sdpa_score(&g, qv, k, ko, kh, j, m, mo, b, h, i);
      if (s == -INFINITY) continue;
      float p = exp(s - ls), mult = sdpa_mult(&g, r * g.S + j), dp = 0.0f;
      for (long e = 0; e < g.Dv; e++) {
        float go = ldf(dO, dOo, r * g.Dv + e, g.dt);
        dp += go * vv[e];
        gv[e] += p * mult * go;
      }
      float ds = p * (dp * mult - sdpa_delta(&g, dO, dOo, out, outo, r));
      for (long d = 0; d < g.D; d++) gk[d] += ds * qv[d];
    }
  }
  for (long d = 0; d < g.D; d++) stf(dk, dko, t * g.D + d, g.dt, gk[d]);
  for (long e = 0; e < g.Dv; e++) stf(dv, dvo, t * g.Dv + e, g.dt, gv[e]);
}
