/* Line reductions of the typed kernel-op table (logsumexp, vector norms)
 * and one_hot. x is [outer, r, inner]: a work-item per line, walking r in
 * order (coalesced over inner), or for contiguous lines a work-group per
 * line (the _rows kernels, at the end), so results repeat bit for bit. f32 compute
 * for f32/f16/bf16; f64 lines (AG_FP64 builds) compute in double. */

/* ---- logsumexp: max + log(sum(exp(x - max))) ---- */
#define AG_LSE_LINE(REAL, LOAD)                                                  \
  {                                                                              \
    REAL m = -INFINITY;                                                          \
    bool nan_ = false;                                                           \
    for (long k = 0; k < r; k++) {                                               \
      REAL v = LOAD(base + k * inner);                                           \
      if (isnan(v)) nan_ = true;                                                 \
      else if (v > m) m = v;                                                     \
    }                                                                            \
    REAL s = 0;                                                                  \
    if (!nan_ && !isinf(m))                                                      \
      for (long k = 0; k < r; k++) s += exp(LOAD(base + k * inner) - m);         \
    res = nan_ ? (REAL)NAN : isinf(m) ? m : m + log(s);                          \
  }

#define AG_LDF(i) ldf(x, xo, (i), dt)
#define AG_LDD(i) ((const __global double *)(x + xo))[i]

#ifndef AG_PORTABLE /* portable.cl has its own */
__kernel void ag_logsumexp(gbuf *y, ulong yo, const gbuf *x, ulong xo, int dt, long outer, long r, long inner) {
  long t = get_global_id(0);
  if (t >= outer * inner) return;
  long base = (t / inner) * r * inner + t % inner;
#ifdef AG_FP64
  if (dt == DT_F64) {
    double res;
    AG_LSE_LINE(double, AG_LDD)
    ((__global double *)(y + yo))[t] = res;
    return;
  }
#endif
  float res;
  AG_LSE_LINE(float, AG_LDF)
  stf(y, yo, t, dt, res);
}
#endif

/* ---- vector norms: sum |x|, max |x|, or m * sqrt(sum (x/m)^2) with m =
 * max |x| (no overflow or underflow of the squares); NaN propagates ---- */
#define AG_NORM_LINE(REAL, LOAD)                                                 \
  {                                                                              \
    REAL m = 0, s = 0;                                                           \
    bool nan_ = false;                                                           \
    for (long k = 0; k < r; k++) {                                               \
      REAL a = fabs(LOAD(base + k * inner));                                     \
      if (isnan(a)) nan_ = true;                                                 \
      s += a;                                                                    \
      m = a > m ? a : m;                                                         \
    }                                                                            \
    res = variant == AG_KV_NORM_L1 ? s : m;                                      \
    if (variant == AG_KV_NORM_L2 && !nan_ && m != 0 && !isinf(m)) {              \
      REAL q = 0;                                                                \
      for (long k = 0; k < r; k++) {                                             \
        REAL v = LOAD(base + k * inner) / m;                                     \
        q += v * v;                                                              \
      }                                                                          \
      res = m * sqrt(q);                                                         \
    }                                                                            \
    if (nan_) res = (REAL)NAN;                                                   \
  }

#ifndef AG_PORTABLE /* portable.cl has its own */
__kernel void ag_norm(gbuf *y, ulong yo, const gbuf *x, ulong xo, int dt, long outer, long r, long inner,
                      int variant) {
  long t = get_global_id(0);
  if (t >= outer * inner) return;
  long base = (t / inner) * r * inner + t % inner;
#ifdef AG_FP64
  if (dt == DT_F64) {
    double res;
    AG_NORM_LINE(double, AG_LDD)
    ((__global double *)(y + yo))[t] = res;
    return;
  }
#endif
  float res;
  AG_NORM_LINE(float, AG_LDF)
  stf(y, yo, t, dt, res);
}
#endif

/* ---- one_hot: a work-item per output element of out [n, classes] (i64);
 * an index out of range zeroes its row and is reported once per row ---- */
__kernel void ag_one_hot(gbuf *y, ulong yo, const gbuf *ix, ulong io, int idt, long n, long classes,
                         __global int *err) {
  long t = get_global_id(0);
  if (t >= n * classes) return;
  long row = t / classes, col = t % classes;
  long v = ldl(ix, io, row, idt);
  bool bad = v < 0 || v >= classes;
  if (bad && col == 0) set_error(err, ERR_INDEX, AG_K_ONE_HOT, v, classes);
  ((__global long *)(y + yo))[t] = !bad && v == col ? 1 : 0;
}

/* ---- contiguous lines (inner == 1), f32/f16/bf16: a work-group per line,
 * its work-items striding along r, combined by the work-group trees of
 * common.cl (a fixed order for a given group size). NaN is a flag summed
 * through the tree; every work-item calls every tree. ---- */
__kernel void ag_logsumexp_rows(gbuf *y, ulong yo, const gbuf *x, ulong xo, int dt, long r) {
  __local float sh[AG_WG];
  long row = get_group_id(0), base = row * r;
  int l = get_local_id(0), L = get_local_size(0);
  float m = -INFINITY, nan_ = 0.0f, s = 0.0f;
  for (long j = l; j < r; j += L) {
    float v = ldf(x, xo, base + j, dt);
    if (isnan(v)) nan_ = 1.0f;
    else m = fmax(m, v);
  }
  nan_ = wg_sum(nan_, sh);
  m = wg_max(m, sh);
  if (!isinf(m))
    for (long j = l; j < r; j += L) s += exp(ldf(x, xo, base + j, dt) - m);
  s = wg_sum(s, sh);
  if (l == 0) stf(y, yo, row, dt, nan_ != 0.0f ? NAN : isinf(m) ? m : m + log(s));
}

__kernel void ag_norm_rows(gbuf *y, ulong yo, const gbuf *x, ulong xo, int dt, long r, int variant) {
  __local float sh[AG_WG];
  long row = get_group_id(0), base = row * r;
  int l = get_local_id(0), L = get_local_size(0);
  float m = 0.0f, s = 0.0f, nan_ = 0.0f, q = 0.0f;
  for (long j = l; j < r; j += L) {
    float a = fabs(ldf(x, xo, base + j, dt));
    if (isnan(a)) nan_ = 1.0f;
    else {
      s += a;
      m = fmax(m, a);
    }
  }
  nan_ = wg_sum(nan_, sh);
  m = wg_max(m, sh);
  s = wg_sum(s, sh);
  if (variant == AG_KV_NORM_L2 && m != 0.0f && !isinf(m))
    for (long j = l; j < r; j += L) {
      float v = ldf(x, xo, base + j, dt) / m;
      q += v * v;
    }
  q = wg_sum(q, sh);
  float res = variant == AG_KV_NORM_L1 ? s : m;
  if (variant == AG_KV_NORM_L2 && m != 0.0f && !isinf(m)) res = m * sqrt(q);
  if (l == 0) stf(y, yo, row, dt, nan_ != 0.0f ? NAN : res);
}
