#version 450
/* Reductions, softmax, logsumexp and cumsum of any length as work-group
 * trees over a multi-pass grid (vk_tree.c): a pass gives each work-group
 * a chunk of at most TREE_CHUNK elements of a row (TREE_TRIPS steps per
 * invocation, then a shared-memory tree) and writes one partial per (row,
 * chunk); the next pass reduces the partials the same way, until one
 * chunk covers the row. No invocation walks a row, and the trees have a
 * fixed shape for a given size (deterministic). Built for f32 math, as
 * the K_*_D modules for f64 (devices with shaderFloat64 only), and as
 * K_TREE_I for the integer dtypes' sum, max, min and argmax in i64 (sums
 * wrap, as the CPU's). */
#if defined(K_TREE_D) || defined(K_SMX_PART_D) || defined(K_SMX_ROW_D) || defined(K_SMX_OUT_D) || \
    defined(K_SCAN_PART_D) || defined(K_SCAN_MID_D) || defined(K_SCAN_OUT_D) || defined(K_SMXB_OUT_D) || \
    defined(K_LSE_FIN_D)
#define TREE_D
#extension GL_ARB_gpu_shader_int64 : require
#endif
#if defined(K_TREE_SG)
/* K_TREE with the work-group's sum, max or min by subgroup operations
 * (any subgroup size), on devices that report them for compute shaders */
#define K_TREE
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_vote : require
#endif
#if defined(K_TREE_I)
#define K_TREE
#define TREE_I
#endif
#include "common.glsl"
#if defined(TREE_I)
#define T int64_t
#define T_DT AG_I64
#define T_INF LONG_MAX
#define T_NEG_INF LONG_MIN
#define T_ZERO 0l
#define LD(a, i, dt) ldl(a, i, dt)
#define PT(a, i) PL(a, i)
#define SCALE pc.a.f[0]
/* no NaN or infinity among integers */
bool ag_isnan(int64_t x) { return false; }
bool ag_isfinite(int64_t x) { return true; }
#elif defined(TREE_D)
#include "ops64.glsl"
layout(buffer_reference, std430, buffer_reference_align = 8) buffer BF64 { double v; };
#define PD(a, i) BF64((a) + uint64_t(i) * 8ul).v
#define T double
#define T_DT AG_F64
#define T_INF D_INF
#define T_ZERO 0.0LF
#define LD(a, i, dt) PD(a, i)
#define ST(a, i, dt, v) PD(a, i) = (v)
#define PT(a, i) PD(a, i)
#define T_EXP d_exp
#define T_LOG d_log
#define SCALE int64BitsToDouble(pc.a.n[46])
#define BETA int64BitsToDouble(pc.a.n[47])
#else
#define T float
#define T_DT AG_F32
#define T_INF F_INF
#define T_ZERO 0.0
#define LD(a, i, dt) ldf(a, i, dt)
#define ST(a, i, dt, v) stf(a, i, dt, v)
#define PT(a, i) PF(a, i)
#define T_EXP exp
#define T_LOG log
#define SCALE pc.a.f[0]
#define BETA pc.a.f[1]
#endif
#if !defined(TREE_I)
#define T_NEG_INF (-T_INF)
#endif
layout(local_size_x = WG) in;
#if !defined(TREE_D) /* ops64.glsl declares OP */
layout(constant_id = 0) const int OP = 0;
#endif

/* the host's VKB_TREE_TRIPS: steps per invocation in one pass */
#define TREE_TRIPS 64
#define TREE_CHUNK (WG * TREE_TRIPS)
#define LID int(gl_LocalInvocationID.x)

shared T sv[WG];
shared int64_t sx[WG];

/* max and min propagate NaN; argmax takes the first NaN, else the first
 * maximum (reduce.comp's rules) */
bool am_takes(T acc, T v) { return !ag_isnan(acc) && (ag_isnan(v) || v > acc); }
T red(T acc, T v) {
  if (OP == AG_R_SUM) return acc + v;
  if (OP == AG_R_MIN) return (v < acc || ag_isnan(v)) ? v : acc;
  return (v > acc || ag_isnan(v)) ? v : acc;
}
/* b (value vb, index ib) replaces a in an argmax: -1 marks no element */
bool am_b(T va, int64_t ia, T vb, int64_t ib) {
  if (ib < 0) return false;
  if (ia < 0) return true;
  bool same = va == vb || (ag_isnan(va) && ag_isnan(vb));
  return same ? ib < ia : am_takes(va, vb);
}

#if defined(K_TREE) || defined(K_TREE_D)
/* One pass. Source: k2 == 0 x (p1, dtype k1) over [n0 outer, n1 r, n2
 * inner]; k2 == 2 the products of a matmul's rows and columns (below);
 * k2 == 1 the previous pass's partials [rows, n1] (values p2,
 * argmax indices p3). n4 chunks per row: > 1 writes partials (p4 values,
 * p5 indices) [rows, n4]; 1 writes the output p0 (dtype k0): the sum times
 * SCALE (plus BETA times the output where k5, split-K's last pass; its
 * square root where k7, the standard deviation), the
 * max or min, the argmax index (k0 an integer dtype). */
void main() {
  int64_t r = pc.a.n[1], inner = pc.a.n[2], G = pc.a.n[4];
  int64_t g = group_id(), row = g / G, chunk = g % G;
  if (row >= pc.a.n[0] * inner) return;
  bool part = pc.a.k[2] == 1, dot = pc.a.k[2] == 2;
  int64_t base = part ? row * r : (row / inner) * r * inner + row % inner, step = part ? 1 : inner;
  /* dot: row = (b, m, n) of a matmul [n14 M, n15 N]; x the A operand
   * (strides n8 batch, n9 row, n10 k), p6 the B operand (dtype k3, strides
   * n11 batch, n12 k, n13 col); k4: the squares of x less the row's mean
 * (p7, f32 or f64), for the variance */
  int64_t ya = 0, ys = 0;
  if (dot) {
    int64_t M = pc.a.n[14], N = pc.a.n[15], n = row % N, m = (row / N) % M, b = row / (M * N);
    base = b * pc.a.n[8] + m * pc.a.n[9];
    step = pc.a.n[10];
    ya = b * pc.a.n[11] + n * pc.a.n[13];
    ys = pc.a.n[12];
  }
  T acc = OP == AG_R_SUM ? T_ZERO : OP == AG_R_MIN ? T_INF : T_NEG_INF;
  int64_t idx = -1;
  T comp = T_ZERO;
  int64_t j1 = min(r, (chunk + 1) * TREE_CHUNK);
#define TREE_ACC(v, iv)                                       \
  if (OP == AG_R_ARGMAX) {                                    \
    if (am_b(acc, idx, v, iv)) {                              \
      acc = v;                                                \
      idx = iv;                                               \
    }                                                         \
  } else if (OP == AG_R_SUM) { /* Kahan-compensated (dropped  \
    at inf/NaN so those propagate) */                         \
    precise T y_ = v - comp;                                  \
    precise T t_ = acc + y_;                                  \
    precise T e_ = (t_ - acc) - y_;                           \
    comp = ag_isfinite(t_) ? e_ : T_ZERO;                     \
    acc = t_;                                                 \
  } else acc = red(acc, v);
  int64_t j0 = chunk * TREE_CHUNK + LID;
  if (!part && !dot && pc.a.k[4] == 0 && step == 1 && pc.a.k[1] == T_DT) {
    /* the common case (contiguous x of the math's dtype) without the
     * per-element tests of the modes */
    for (int64_t j = j0; j < j1; j += WG) {
      T v = PT(pc.a.p[1], base + j);
      TREE_ACC(v, j)
    }
  } else {
    for (int64_t j = j0; j < j1; j += WG) {
      T v = part ? PT(pc.a.p[2], base + j) : LD(pc.a.p[1], base + j * step, pc.a.k[1]);
      if (dot) v *= LD(pc.a.p[6], ya + j * ys, pc.a.k[3]);
      if (pc.a.k[4] != 0 && !part) { /* variance: squares about the row's mean */
        v -= PT(pc.a.p[7], row);
        v *= v;
      }
      int64_t iv = part && OP == AG_R_ARGMAX ? PL(pc.a.p[3], base + j) : j;
      TREE_ACC(v, iv)
    }
  }
#if defined(K_TREE_SG)
  if (OP != AG_R_ARGMAX) {
    /* NaN propagates by a vote (subgroupMax/Min leave it undefined); the
     * subgroups' results combine in subgroup order */
    bool nan_ = subgroupAny(ag_isnan(acc));
    T v = OP == AG_R_SUM ? subgroupAdd(acc) : OP == AG_R_MIN ? subgroupMin(acc) : subgroupMax(acc);
    if (nan_) v = F_NAN;
    if (subgroupElect()) sv[gl_SubgroupID] = v;
    barrier();
    if (LID == 0) {
      for (uint k = 1u; k < gl_NumSubgroups; k++) sv[0] = red(sv[0], sv[k]);
      sx[0] = -1;
    }
    barrier();
  } else
#endif
  {
  sv[LID] = acc;
  sx[LID] = idx;
  barrier();
  for (int s = WG / 2; s > 0; s >>= 1) {
    if (LID < s) {
      if (OP == AG_R_ARGMAX) {
        if (am_b(sv[LID], sx[LID], sv[LID + s], sx[LID + s])) { sv[LID] = sv[LID + s]; sx[LID] = sx[LID + s]; }
      } else sv[LID] = red(sv[LID], sv[LID + s]);
    }
    barrier();
  }
  }
  if (LID != 0) return;
  if (G > 1) {
    PT(pc.a.p[4], g) = sv[0];
    PL(pc.a.p[5], g) = sx[0];
  } else if (OP == AG_R_ARGMAX) stl(pc.a.p[0], row, pc.a.k[0], sx[0] < 0 ? 0l : sx[0]);
#if defined(TREE_I)
  /* reduce.comp's store: a scaled sum (the mean) in float, else saturated
   * to an i32 output */
  else if (OP == AG_R_SUM && SCALE != 1.0) stf(pc.a.p[0], row, pc.a.k[0], float(sv[0]) * SCALE);
  else stl(pc.a.p[0], row, pc.a.k[0], pc.a.k[0] == AG_I32 ? sat_dt(sv[0], AG_I32) : sv[0]);
#else
  else if (OP == AG_R_SUM) {
    T v = sv[0] * SCALE;
    if (pc.a.k[5] != 0) v += BETA * LD(pc.a.p[0], row, pc.a.k[0]);
    if (pc.a.k[7] != 0) v = sqrt(v);
    ST(pc.a.p[0], row, pc.a.k[0], v);
  } else ST(pc.a.p[0], row, pc.a.k[0], sv[0]);
#endif
}
#endif

#if !defined(TREE_I)

/* Softmax of long rows (p1 x, p0 y, dtype k0, n0 rows, n1 cols, n4 chunks
 * per row, k6 the variant): SMX_PART a (max, sum of exp(x - max)) per
 * (row, chunk) into p4 (pairs); SMX_ROW a work-group per row merges its
 * chunks' pairs into p5 (pairs); SMX_OUT writes y per (row, chunk). */
#if defined(TREE_D)
bool ag_is_neg_inf(double x) { return ag_isinf(x) && x < 0.0LF; }
T smax(T a, T b) { return (b > a || ag_isnan(b)) ? b : a; }
#else
T smax(T a, T b) { return ag_fmax(a, b); }
#endif
shared T ss[WG];
/* (m, s) merged with (m2, s2); a pair with m == -inf adds nothing */
void pair_merge(inout T m, inout T s, T m2, T s2) {
  T mm = smax(m, m2);
  if (ag_is_neg_inf(mm) || ag_isnan(mm)) {
    m = mm;
    s = s + s2;
    return;
  }
  s = (ag_is_neg_inf(m) ? T_ZERO : s * T_EXP(m - mm)) + (ag_is_neg_inf(m2) ? T_ZERO : s2 * T_EXP(m2 - mm));
  m = mm;
}
void wg_pair(inout T m, inout T s) {
  sv[LID] = m;
  ss[LID] = s;
  barrier();
  for (int k = WG / 2; k > 0; k >>= 1) {
    if (LID < k) {
      T a = sv[LID], b = ss[LID];
      pair_merge(a, b, sv[LID + k], ss[LID + k]);
      sv[LID] = a;
      ss[LID] = b;
    }
    barrier();
  }
  m = sv[0];
  s = ss[0];
}
#endif

#if defined(K_SMX_PART) || defined(K_SMX_PART_D)
void main() {
  int64_t cols = pc.a.n[1], G = pc.a.n[4];
  int64_t g = group_id(), row = g / G, chunk = g % G;
  if (row >= pc.a.n[0]) return;
  /* n2 > 1: elements n2 apart (logsumexp over [n0 / n2, cols, n2]) */
  int64_t inner = max(pc.a.n[2], 1l), base = (row / inner) * cols * inner + row % inner;
  int64_t j0 = chunk * TREE_CHUNK + LID, j1 = min(cols, (chunk + 1) * TREE_CHUNK);
  int dt = pc.a.k[0];
  T m = -T_INF, s = T_ZERO;
  for (int64_t j = j0; j < j1; j += WG) m = smax(m, LD(pc.a.p[1], base + j * inner, dt));
  sv[LID] = m;
  barrier();
  for (int k = WG / 2; k > 0; k >>= 1) {
    if (LID < k) sv[LID] = smax(sv[LID], sv[LID + k]);
    barrier();
  }
  m = sv[0];
  barrier();
  if (!ag_is_neg_inf(m))
    for (int64_t j = j0; j < j1; j += WG) s += T_EXP(LD(pc.a.p[1], base + j * inner, dt) - m);
  sv[LID] = s;
  barrier();
  for (int k = WG / 2; k > 0; k >>= 1) {
    if (LID < k) sv[LID] += sv[LID + k];
    barrier();
  }
  if (LID == 0) {
    PT(pc.a.p[4], 2 * g) = m;
    PT(pc.a.p[4], 2 * g + 1) = sv[0];
  }
}
#endif

#if defined(K_SMX_ROW) || defined(K_SMX_ROW_D)
void main() {
  int64_t G = pc.a.n[4], row = group_id();
  if (row >= pc.a.n[0]) return;
  T m = -T_INF, s = T_ZERO;
  for (int64_t c = LID; c < G; c += WG)
    pair_merge(m, s, PT(pc.a.p[4], 2 * (row * G + c)), PT(pc.a.p[4], 2 * (row * G + c) + 1));
  wg_pair(m, s);
  if (LID == 0) {
    PT(pc.a.p[5], 2 * row) = m;
    PT(pc.a.p[5], 2 * row + 1) = s;
  }
}
#endif

#if defined(K_SMX_OUT) || defined(K_SMX_OUT_D)
void main() {
  int64_t cols = pc.a.n[1], G = pc.a.n[4];
  int64_t g = group_id(), row = g / G, chunk = g % G;
  if (row >= pc.a.n[0]) return;
  int64_t base = row * cols, j1 = min(cols, (chunk + 1) * TREE_CHUNK);
  int dt = pc.a.k[0];
  T m = PT(pc.a.p[5], 2 * row), s = PT(pc.a.p[5], 2 * row + 1);
  bool lg = pc.a.k[6] == AG_KV_LOG_SOFTMAX;
  T ls = T_LOG(s), inv = T(1.0) / s;
  for (int64_t j = chunk * TREE_CHUNK + LID; j < j1; j += WG) {
    T v = LD(pc.a.p[1], base + j, dt) - m;
    ST(pc.a.p[0], base + j, dt, lg ? v - ls : T_EXP(v) * inv);
  }
}
#endif

/* cumsum of long lines as a multi-pass scan: SCAN_PART the sum of each
 * (line, chunk) into p4 [lines, n4]; SCAN_MID a work-group per line turns
 * them into exclusive prefixes in place; SCAN_OUT scans each chunk (64
 * consecutive elements an invocation, a scan of their sums over the
 * work-group) from its prefix. x p1, y p0 (dtype k0) over [n0 outer, n1 r,
 * n2 inner]; k6 the variant (suffix sums walk the line backwards). */
#if defined(K_SCAN_PART) || defined(K_SCAN_PART_D) || defined(K_SCAN_OUT) || defined(K_SCAN_OUT_D)
int64_t scan_pos(int64_t line, int64_t k) {
  int64_t r = pc.a.n[1], inner = pc.a.n[2];
  int64_t base = (line / inner) * r * inner + line % inner;
  return base + (pc.a.k[6] == AG_KV_CUMSUM_SUFFIX ? r - 1 - k : k) * inner;
}
#endif

#if defined(K_SCAN_PART) || defined(K_SCAN_PART_D)
void main() {
  int64_t r = pc.a.n[1], G = pc.a.n[4];
  int64_t g = group_id(), line = g / G, chunk = g % G;
  if (line >= pc.a.n[0] * pc.a.n[2]) return;
  int64_t j1 = min(r, (chunk + 1) * TREE_CHUNK);
  T s = T_ZERO;
  for (int64_t j = chunk * TREE_CHUNK + LID; j < j1; j += WG) s += LD(pc.a.p[1], scan_pos(line, j), pc.a.k[0]);
  sv[LID] = s;
  barrier();
  for (int k = WG / 2; k > 0; k >>= 1) {
    if (LID < k) sv[LID] += sv[LID + k];
    barrier();
  }
  if (LID == 0) PT(pc.a.p[4], g) = sv[0];
}
#endif

/* exclusive scan over the work-group of v (Hillis-Steele, fixed shape) */
#if defined(K_SCAN_MID) || defined(K_SCAN_MID_D) || defined(K_SCAN_OUT) || defined(K_SCAN_OUT_D)
T wg_exclusive(T v) {
  sv[LID] = v;
  barrier();
  for (int k = 1; k < WG; k <<= 1) {
    T add = LID >= k ? sv[LID - k] : T_ZERO;
    barrier();
    sv[LID] += add;
    barrier();
  }
  T incl = sv[LID];
  barrier();
  return incl - v;
}
#endif

#if defined(K_SCAN_MID) || defined(K_SCAN_MID_D)
void main() {
  int64_t G = pc.a.n[4], line = group_id();
  if (line >= pc.a.n[0] * pc.a.n[2]) return;
  int64_t seg = (G + WG - 1) / WG, c0 = min(G, LID * seg), c1 = min(G, c0 + seg), at = line * G;
  T s = T_ZERO;
  for (int64_t c = c0; c < c1; c++) s += PT(pc.a.p[4], at + c);
  T run = wg_exclusive(s);
  for (int64_t c = c0; c < c1; c++) {
    T v = PT(pc.a.p[4], at + c);
    PT(pc.a.p[4], at + c) = run;
    run += v;
  }
}
#endif

#if defined(K_SCAN_OUT) || defined(K_SCAN_OUT_D)
void main() {
  int64_t r = pc.a.n[1], G = pc.a.n[4];
  int64_t g = group_id(), line = g / G, chunk = g % G;
  if (line >= pc.a.n[0] * pc.a.n[2]) return;
  int64_t j0 = min(r, chunk * TREE_CHUNK + LID * TREE_TRIPS), j1 = min(r, j0 + TREE_TRIPS);
  int dt = pc.a.k[0];
  T s = T_ZERO;
  for (int64_t j = j0; j < j1; j++) s += LD(pc.a.p[1], scan_pos(line, j), dt);
  T run = PT(pc.a.p[4], g) + wg_exclusive(s);
  for (int64_t j = j0; j < j1; j++) {
    int64_t p = scan_pos(line, j);
    run += LD(pc.a.p[1], p, dt);
    ST(pc.a.p[0], p, dt, run);
  }
}
#endif

/* The softmax gradient of long rows: p5 the row sums (sum of dy y, or of
 * dy for log_softmax) from tree passes; dx p0, dy p1, y p2 per (row, chunk). */
#if defined(K_SMXB_OUT) || defined(K_SMXB_OUT_D)
void main() {
  int64_t cols = pc.a.n[1], G = pc.a.n[4];
  int64_t g = group_id(), row = g / G, chunk = g % G;
  if (row >= pc.a.n[0]) return;
  int64_t base = row * cols, j1 = min(cols, (chunk + 1) * TREE_CHUNK);
  int dt = pc.a.k[0];
  T s = PT(pc.a.p[5], row);
  bool lg = pc.a.k[6] == AG_KV_LOG_SOFTMAX;
  for (int64_t j = chunk * TREE_CHUNK + LID; j < j1; j += WG) {
    T gv = LD(pc.a.p[1], base + j, dt), yv = LD(pc.a.p[2], base + j, dt);
    ST(pc.a.p[0], base + j, dt, lg ? gv - T_EXP(yv) * s : yv * (gv - s));
  }
}
#endif

/* logsumexp of long lines: the row's (max, sum) pair p5 and its
 * NaN-propagating max p6; an invocation per row writes p0 (dtype k0): NaN
 * with a NaN, the max where it is infinite, else max + log(sum). */
#if defined(K_LSE_FIN) || defined(K_LSE_FIN_D)
void main() {
  int64_t row = gid();
  if (row >= pc.a.n[0]) return;
  T mx = PT(pc.a.p[6], row), m = PT(pc.a.p[5], 2 * row), s = PT(pc.a.p[5], 2 * row + 1);
  ST(pc.a.p[0], row, pc.a.k[0], ag_isnan(mx) || ag_isinf(mx) ? mx : m + T_LOG(s));
}
#endif
