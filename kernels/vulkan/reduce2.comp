#version 450
/* Line reductions of the typed kernel-op table (logsumexp, vector norms)
 * and one_hot. x is [outer, r, inner]: an invocation per line, walking r in
 * order (the CPU's order; the host refuses lines past the driver's loop
 * limit), or for contiguous or long lines a work-group per line (the _ROWS
 * kernels). f32 compute for f32/f16/bf16; the _D builds (devices with
 * shaderFloat64 only) compute f64 lines in double. One kernel per build
 * define. */
#extension GL_ARB_gpu_shader_int64 : require
#include "common.glsl"
#if defined(K_LOGSUMEXP_D) || defined(K_NORM_D) || defined(K_LOGSUMEXP_ROWS_D) || defined(K_NORM_ROWS_D)
#include "ops64.glsl"
layout(buffer_reference, std430, buffer_reference_align = 8) buffer BF64 { double v; };
#define PD(a, i) BF64((a) + uint64_t(i) * 8ul).v
#endif
layout(local_size_x = WG) in;

/* The argument block (vk_reduce2.c fills it) by name. */
#define Y_ADDR pc.a.p[0]
#define X_ADDR pc.a.p[1]
#define OUTER pc.a.n[0]
#define RLEN pc.a.n[1]
#define INNER pc.a.n[2]
#define DT pc.a.k[0]
#define VARIANT pc.a.k[6]

#if defined(K_LOGSUMEXP) || defined(K_LOGSUMEXP_D)
#if defined(K_LOGSUMEXP_D)
#define REAL double
#define LOADX(i) PD(X_ADDR, i)
#define EXPF(v) d_exp(v)
#define LOGF(v) d_log(v)
#define NANV D_NAN
#define NEG_INF (-D_INF)
#else
#define REAL float
#define LOADX(i) ldf(X_ADDR, i, DT)
#define EXPF(v) exp(v)
#define LOGF(v) log(v)
#define NANV F_NAN
#define NEG_INF (-F_INF)
#endif
/* max + log(sum(exp(x - max))); an infinite max is the answer, NaN
 * propagates */
void main() {
  int64_t t = gid(), inner = INNER, r = RLEN;
  if (t >= OUTER * inner) return;
  int64_t base = (t / inner) * r * inner + t % inner;
  REAL m = NEG_INF;
  bool nan_ = false;
  for (int64_t k = 0; k < r; k++) {
    REAL v = LOADX(base + k * inner);
    if (ag_isnan(v)) nan_ = true;
    else if (v > m) m = v;
  }
  REAL s = 0.0;
  if (!nan_ && !ag_isinf(m))
    for (int64_t k = 0; k < r; k++) s += EXPF(LOADX(base + k * inner) - m);
  REAL res = nan_ ? NANV : ag_isinf(m) ? m : m + LOGF(s);
#if defined(K_LOGSUMEXP_D)
  PD(Y_ADDR, t) = res;
#else
  stf(Y_ADDR, t, DT, res);
#endif
}
#endif

#if defined(K_NORM) || defined(K_NORM_D)
#if defined(K_NORM_D)
#define REAL double
#define LOADX(i) PD(X_ADDR, i)
#define NANV D_NAN
#else
#define REAL float
#define LOADX(i) ldf(X_ADDR, i, DT)
#define NANV F_NAN
#endif
/* VARIANT L1: sum |x|; INF: max |x|; L2: m * sqrt(sum (x/m)^2) with m =
 * max |x| (no overflow or underflow of the squares); NaN propagates */
void main() {
  int64_t t = gid(), inner = INNER, r = RLEN;
  if (t >= OUTER * inner) return;
  int64_t base = (t / inner) * r * inner + t % inner;
  REAL m = 0.0, s = 0.0;
  bool nan_ = false;
  for (int64_t k = 0; k < r; k++) {
    REAL a = abs(LOADX(base + k * inner));
    if (ag_isnan(a)) nan_ = true;
    s += a;
    if (a > m) m = a;
  }
  REAL res = VARIANT == AG_KV_NORM_L1 ? s : m;
  if (VARIANT == AG_KV_NORM_L2 && !nan_ && m != 0.0 && !ag_isinf(m)) {
    REAL q = 0.0;
    for (int64_t k = 0; k < r; k++) {
      REAL v = LOADX(base + k * inner) / m;
      q += v * v;
    }
    res = m * sqrt(q);
  }
  if (nan_) res = NANV;
#if defined(K_NORM_D)
  PD(Y_ADDR, t) = res;
#else
  stf(Y_ADDR, t, DT, res);
#endif
}
#endif

#if defined(K_ONE_HOT)
/* out [n, classes] (i64) = 1 at each row's index: an invocation per
 * element; an index out of range zeroes its row and is reported once per
 * row */
#define INDEX_ADDR pc.a.p[1]
#define ERR_ADDR pc.a.p[7]
#define N_ROWS pc.a.n[0]
#define CLASSES pc.a.n[1]
#define INDEX_DT pc.a.k[3]
void main() {
  int64_t t = gid(), classes = CLASSES;
  if (t >= N_ROWS * classes) return;
  int64_t row = t / classes, col = t % classes;
  int64_t v = ld_index(INDEX_ADDR, row, INDEX_DT);
  bool bad = v < 0 || v >= classes;
  if (bad && col == 0) set_error(ERR_ADDR, AG_ERR_INDEX, AG_K_ONE_HOT, v, classes);
  PL(Y_ADDR, t) = !bad && v == col ? 1l : 0l;
}
#endif

#if defined(K_LOGSUMEXP_ROWS) || defined(K_NORM_ROWS) || defined(K_LOGSUMEXP_ROWS_D) || defined(K_NORM_ROWS_D)
/* Long or contiguous lines: a work-group per line, WG invocations striding
 * along r and combined by work-group trees in a fixed order, so an
 * invocation's loops stay far below the driver's loop limit. NaN is a flag
 * summed through the tree (every invocation calls the trees). */
#if defined(K_LOGSUMEXP_ROWS_D) || defined(K_NORM_ROWS_D)
#define REAL double
#define LOADX(i) PD(X_ADDR, i)
#define STOREY(i, v) PD(Y_ADDR, i) = (v)
#define EXPF(v) d_exp(v)
#define LOGF(v) d_log(v)
#define NANV D_NAN
#define INFV D_INF
#else
#define REAL float
#define LOADX(i) ldf(X_ADDR, i, DT)
#define STOREY(i, v) stf(Y_ADDR, i, DT, v)
#define EXPF(v) exp(v)
#define LOGF(v) log(v)
#define NANV F_NAN
#define INFV F_INF
#endif
#if defined(K_LOGSUMEXP_ROWS) || defined(K_LOGSUMEXP_ROWS_D)
#define LSE_ROWS 1
#endif
#define L int64_t(gl_LocalInvocationID.x)
shared REAL sh_r[WG];
REAL r_tree(REAL v, bool take_max) {
  uint l = gl_LocalInvocationID.x;
  sh_r[l] = v;
  barrier();
  for (uint h = WG / 2; h > 0u; h >>= 1) {
    if (l < h) sh_r[l] = take_max ? max(sh_r[l], sh_r[l + h]) : sh_r[l] + sh_r[l + h];
    barrier();
  }
  REAL res = sh_r[0];
  barrier();
  return res;
}
void main() {
  int64_t line = group_id(), inner = INNER, r = RLEN;
  if (line >= OUTER * inner) return;
  int64_t base = (line / inner) * r * inner + line % inner;
  REAL m = 0.0, s = 0.0, nan_ = 0.0;
#if defined(LSE_ROWS)
  m = -INFV;
#endif
  for (int64_t k = L; k < r; k += WG) {
    REAL v = LOADX(base + k * inner);
#if !defined(LSE_ROWS)
    v = abs(v);
    if (!ag_isnan(v)) s += v;
#endif
    if (ag_isnan(v)) nan_ = 1.0;
    else m = max(m, v);
  }
  nan_ = r_tree(nan_, false);
  m = r_tree(m, true);
  REAL res;
#if defined(LSE_ROWS)
  s = 0.0;
  if (!ag_isinf(m))
    for (int64_t k = L; k < r; k += WG) s += EXPF(LOADX(base + k * inner) - m);
  s = r_tree(s, false);
  res = ag_isinf(m) ? m : m + LOGF(s);
#else
  if (VARIANT == AG_KV_NORM_L1) {
    res = r_tree(s, false);
  } else if (VARIANT == AG_KV_NORM_L2 && m != 0.0 && !ag_isinf(m)) {
    REAL q = 0.0;
    for (int64_t k = L; k < r; k += WG) {
      REAL v = LOADX(base + k * inner) / m;
      q += v * v;
    }
    res = m * sqrt(r_tree(q, false));
  } else {
    res = m;
  }
#endif
  if (nan_ != 0.0) res = NANV;
  if (L == 0) STOREY(line, res);
}
#endif
