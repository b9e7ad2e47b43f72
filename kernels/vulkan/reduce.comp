#version 450
/* Reductions over the middle axis of a contiguous [outer, r, inner] view
 * (K_REDUCE_ROWS: inner == 1, one work-group per row with a shared-memory
 * tree; K_REDUCE_COLS: one invocation per output walking r), and the sum of
 * squares of a tensor list (K_SUMSQ_PART, K_SUMSQ_FINAL). The reduction op
 * (ag_reduce_op) is the specialization constant OP. ARGMAX writes i32: the
 * first NaN, else the first maximum; 0 for an empty row, as the CPU. */
#include "common.glsl"
layout(local_size_x = WG) in;
layout(constant_id = 0) const int OP = 0;

/* NaN tests on the bits (common.glsl): max and min propagate NaN, argmax
 * takes the first NaN, as torch.max / torch.argmax */
bool am_takes(float acc, float v) { return !ag_isnan(acc) && (ag_isnan(v) || v > acc); }
float red_f(float acc, float v) {
  if (OP == AG_R_SUM) return acc + v;
  if (OP == AG_R_MIN) return (v < acc || ag_isnan(v)) ? v : acc;
  return (v > acc || ag_isnan(v)) ? v : acc;
}
/* Kahan-compensated running sum (dropped at inf/NaN so those propagate) */
float kahan_add(float acc, float v, inout float c) {
  precise float y = v - c;
  precise float t = acc + y;
  precise float e = (t - acc) - y;
  c = ag_isfinite(t) ? e : 0.0;
  return t;
}
int64_t red_i(int64_t acc, int64_t v) { return OP == AG_R_SUM ? acc + v : OP == AG_R_MIN ? min(acc, v) : max(acc, v); }

/* p0 out (k0), p1 x (k1); f0 scale of SUM; n0 outer, n1 r, n2 inner. */
void store_red(int64_t i, float acc, int64_t iacc, int idx, bool isint) {
  uint64_t o = pc.a.p[0];
  int odt = pc.a.k[0];
  float scale = pc.a.f[0];
  if (OP == AG_R_ARGMAX) PI(o, i) = idx;
  else if (isint && OP == AG_R_SUM && scale != 1.0) stf(o, i, odt, float(iacc) * scale);
  else if (isint) stl(o, i, odt, odt == AG_I32 ? sat_dt(iacc, AG_I32) : iacc);
  else stf(o, i, odt, OP == AG_R_SUM ? acc * scale : acc);
}

#if defined(K_REDUCE_ROWS)
shared int64_t si[WG];
shared int sx[WG];
void main() {
  /* a work-group per output (row of [outer, inner]); elements inner apart */
  int64_t row = group_id(), r = pc.a.n[1], inner = pc.a.n[2];
  if (row >= pc.a.n[0] * inner) return;
  int64_t base = (row / inner) * r * inner + row % inner;
  int l = int(gl_LocalInvocationID.x);
  uint64_t x = pc.a.p[1];
  int xdt = pc.a.k[1];
  bool isint = is_int_dt(xdt);
  float acc = OP == AG_R_SUM ? 0.0 : OP == AG_R_MIN ? F_INF : -F_INF;
  int64_t iacc = OP == AG_R_SUM ? 0l : OP == AG_R_MIN ? LONG_MAX : LONG_MIN;
  int idx = INT_MAX;
  float comp = 0.0;
  for (int64_t j = l; j < r; j += WG) {
    if (isint) {
      int64_t v = ldl(x, base + j * inner, xdt);
      if (OP == AG_R_ARGMAX) {
        if (idx == INT_MAX || v > iacc) { iacc = v; idx = int(j); }
      } else iacc = red_i(iacc, v);
    } else {
      float v = ldf(x, base + j * inner, xdt);
      if (OP == AG_R_ARGMAX) {
        if (idx == INT_MAX || am_takes(acc, v)) { acc = v; idx = int(j); }
      } else if (OP == AG_R_SUM) acc = kahan_add(acc, v, comp);
      else acc = red_f(acc, v);
    }
  }
  sh_f[l] = acc;
  si[l] = iacc;
  sx[l] = idx;
  barrier();
  for (int s = WG / 2; s > 0; s >>= 1) {
    if (l < s) {
      if (OP == AG_R_ARGMAX) {
        int ia = sx[l], ib = sx[l + s];
        bool take_b;
        if (ib == INT_MAX) take_b = false;
        else if (ia == INT_MAX) take_b = true;
        else if (isint) take_b = si[l + s] > si[l] || (si[l + s] == si[l] && ib < ia);
        else {
          float a = sh_f[l], b = sh_f[l + s];
          bool same = a == b || (ag_isnan(a) && ag_isnan(b));
          take_b = same ? ib < ia : am_takes(a, b);
        }
        if (take_b) { sh_f[l] = sh_f[l + s]; si[l] = si[l + s]; sx[l] = ib; }
      } else if (isint) si[l] = red_i(si[l], si[l + s]);
      else sh_f[l] = red_f(sh_f[l], sh_f[l + s]);
    }
    barrier();
  }
#if defined(AG_PORTABLE)
  /* docs/numerics.md: MAX and MIN keep the first of equal values, so a zero
   * result has the sign of the line's first zero (the tree keeps the first
   * of each pair, not of the line) */
  if ((OP == AG_R_MAX || OP == AG_R_MIN) && !isint) {
    float m = sh_f[0];
    barrier();
    if (m == 0.0) {
      int64_t first = LONG_MAX;
      for (int64_t j = l; j < r; j += WG)
        if (ldf(x, base + j * inner, xdt) == 0.0) {
          first = j;
          break;
        }
      si[l] = first;
      barrier();
      for (int s = WG / 2; s > 0; s >>= 1) {
        if (l < s) si[l] = min(si[l], si[l + s]);
        barrier();
      }
      if (l == 0) store_red(row, ldf(x, base + si[0] * inner, xdt), 0l, 0, false);
      return;
    }
  }
#endif
  if (l == 0) store_red(row, sh_f[0], si[0], sx[0] == INT_MAX ? 0 : sx[0], isint);
}
#endif

#if defined(K_REDUCE_COLS)
void main() {
  int64_t i = gid(), outer = pc.a.n[0], r = pc.a.n[1], inner = pc.a.n[2];
  if (i >= outer * inner) return;
  int64_t ou = i / inner, in_ = i % inner, base = ou * r * inner + in_;
  uint64_t x = pc.a.p[1];
  int xdt = pc.a.k[1];
  bool isint = is_int_dt(xdt);
  float acc = OP == AG_R_SUM ? 0.0 : OP == AG_R_MIN ? F_INF : -F_INF;
  int64_t iacc = OP == AG_R_SUM ? 0l : OP == AG_R_MIN ? LONG_MAX : LONG_MIN;
  int idx = 0;
  float comp = 0.0;
  for (int64_t j = 0; j < r; j++) {
    if (isint) {
      int64_t v = ldl(x, base + j * inner, xdt);
      if (OP == AG_R_ARGMAX) {
        if (j == 0 || v > iacc) { iacc = v; idx = int(j); }
      } else iacc = red_i(iacc, v);
    } else {
      float v = ldf(x, base + j * inner, xdt);
      if (OP == AG_R_ARGMAX) {
        if (j == 0 || am_takes(acc, v)) { acc = v; idx = int(j); }
      } else if (OP == AG_R_SUM) acc = kahan_add(acc, v, comp);
      else acc = red_f(acc, v);
    }
  }
  store_red(i, acc, iacc, idx, isint);
}
#endif

#if defined(K_SUMSQ_PART)
/* p0 partials (f32), n0 first partial; p1 x (k1), n1 numel; grid of n2 groups */
void main() {
  float acc = 0.0;
  int64_t groups = pc.a.n[2], n = pc.a.n[1];
  for (int64_t j = group_id() * WG + gl_LocalInvocationID.x; j < n; j += groups * WG) {
    float v = ldf(pc.a.p[1], j, pc.a.k[1]);
    acc += v * v;
  }
  acc = wg_sum(acc);
  if (gl_LocalInvocationID.x == 0u) PF(pc.a.p[0], pc.a.n[0] + group_id()) = acc;
}
#endif

#if defined(K_SUMSQ_FINAL)
/* p0 out f32 scalar, p1 partials, n0 count */
void main() {
  float acc = 0.0;
  for (int64_t j = gl_LocalInvocationID.x; j < pc.a.n[0]; j += WG) acc += PF(pc.a.p[1], j);
  acc = wg_sum(acc);
  if (gl_LocalInvocationID.x == 0u) PF(pc.a.p[0], 0) = acc;
}
#endif
