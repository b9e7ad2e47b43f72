/* Reductions over the middle axis of a contiguous [outer, r, inner] view.
 * inner == 1 uses one work-group per row with a local tree; otherwise one
 * work-item per output walks r (neighbouring items read neighbouring inner
 * elements). op: an ag_reduce_op: SUM (times scale), MAX, MIN, ARGMAX (i32 output:
 * the first NaN, else the first maximum; 0 for an empty row, as the CPU). */

/* argmax: does v, met after acc in row order, replace it? */
bool am_takes(float acc, float v) { return !isnan(acc) && (isnan(v) || v > acc); }

float red_f(int op, float acc, float v) {
  if (op == AG_R_SUM) return acc + v;
  if (op == AG_R_MIN) return (v < acc || isnan(v)) ? v : acc;
  return (v > acc || isnan(v)) ? v : acc;
}

/* MAX/MIN: does v, met after acc, replace it? (NaN wins and stays) */
bool red_takes(int op, float acc, float v) {
  return op == AG_R_MIN ? (v < acc || isnan(v)) && !isnan(acc) : (v > acc || isnan(v)) && !isnan(acc);
}

/* acc + v with Kahan's compensation c: a work-item's running f32 sum keeps
 * an error near one rounding however many elements it adds (a plain sum of
 * 70000 elements was off by 1e-3). The compensation is dropped at inf or NaN
 * so those propagate as in a plain sum. */
float kahan_add(float acc, float v, float *c) {
  float y = v - *c, t = acc + y;
  *c = isfinite(t) ? (t - acc) - y : 0.0f;
  return t;
}

/* Integer dtypes reduce exactly in i64 (stores keep the low bits). */
long red_i(int op, long acc, long v) { return op == AG_R_SUM ? acc + v : op == AG_R_MIN ? min(acc, v) : max(acc, v); }

void store_red(gbuf *o, ulong oo, int odt, long i, int op, float acc, long iacc, int idx,
               int isint, float scale) {
  if (op == AG_R_ARGMAX)
    sti(o, oo, i, idx);
  else if (isint && op == AG_R_SUM && scale != 1.0f)
    stf(o, oo, i, odt, (float)iacc * scale);
  else if (isint)
    stl(o, oo, i, odt, odt == DT_I32 ? sat_dt(iacc, DT_I32) : iacc); /* i32 sums saturate, as the CPU's */
  else
    stf(o, oo, i, odt, op == AG_R_SUM ? acc * scale : acc);
}

__kernel void ag_reduce_rows(gbuf *o, ulong oo, int odt, const gbuf *x, ulong xo, int xdt, int op,
                             float scale, long r) {
  __local float sf[AG_WG];
  __local long si[AG_WG];
  __local int sx[AG_WG];
  long base = (long)get_group_id(0) * r;
  int l = get_local_id(0), L = get_local_size(0);
  int isint = is_int_dt(xdt);
  float acc = op == AG_R_SUM ? 0.0f : op == AG_R_MIN ? INFINITY : -INFINITY;
  long iacc = op == AG_R_SUM ? 0 : op == AG_R_MIN ? LONG_MAX : LONG_MIN;
  int idx = INT_MAX;
  float comp = 0.0f;
  for (long j = l; j < r; j += L) {
    if (isint) {
      long v = ldl(x, xo, base + j, xdt);
      if (op == AG_R_ARGMAX) {
        if (idx == INT_MAX || v > iacc) { iacc = v; idx = (int)j; }
      } else {
        iacc = red_i(op, iacc, v);
      }
    } else {
      float v = ldf(x, xo, base + j, xdt);
      if (op == AG_R_ARGMAX) {
        if (idx == INT_MAX || am_takes(acc, v)) { acc = v; idx = (int)j; }
      } else if (op == AG_R_SUM) {
        acc = kahan_add(acc, v, &comp);
      } else {
#ifdef AG_PORTABLE
        /* MAX/MIN keep the first of equal values (+0 and -0 differ in
         * bits): the index goes along, as the sequential definition's */
        if (red_takes(op, acc, v)) { acc = v; idx = (int)j; }
#else
        acc = red_f(op, acc, v);
#endif
      }
    }
  }
  sf[l] = acc;
  si[l] = iacc;
  sx[l] = idx;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int s = L / 2; s > 0; s >>= 1) {
    if (l < s) {
      if (op == AG_R_ARGMAX) {
        int ia = sx[l], ib = sx[l + s];
        bool take_b;
        if (ib == INT_MAX) take_b = false;
        else if (ia == INT_MAX) take_b = true;
        else if (isint) take_b = si[l + s] > si[l] || (si[l + s] == si[l] && ib < ia);
        else {
          float a = sf[l], b = sf[l + s];
          bool same = a == b || (isnan(a) && isnan(b));
          take_b = same ? ib < ia : am_takes(a, b);
        }
        if (take_b) { sf[l] = sf[l + s]; si[l] = si[l + s]; sx[l] = ib; }
      } else if (isint) {
        si[l] = red_i(op, si[l], si[l + s]);
      } else {
#ifdef AG_PORTABLE
        float a = sf[l], b = sf[l + s];
        if (red_takes(op, a, b) || (a == b && sx[l + s] < sx[l])) { sf[l] = b; sx[l] = sx[l + s]; }
#else
        sf[l] = red_f(op, sf[l], sf[l + s]);
#endif
      }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (l == 0)
    store_red(o, oo, odt, get_group_id(0), op, sf[0], si[0], sx[0] == INT_MAX ? 0 : sx[0], isint,
              scale);
}

__kernel void ag_reduce_cols(gbuf *o, ulong oo, int odt, const gbuf *x, ulong xo, int xdt, int op,
                             float scale, long outer, long r, long inner) {
  long i = get_global_id(0);
  if (i >= outer * inner) return;
  long ou = i / inner, in = i % inner, base = ou * r * inner + in;
  int isint = is_int_dt(xdt);
  float acc = op == AG_R_SUM ? 0.0f : op == AG_R_MIN ? INFINITY : -INFINITY;
  long iacc = op == AG_R_SUM ? 0 : op == AG_R_MIN ? LONG_MAX : LONG_MIN;
  int idx = 0;
  float comp = 0.0f;
  for (long j = 0; j < r; j++) {
    if (isint) {
      long v = ldl(x, xo, base + j * inner, xdt);
      if (op == AG_R_ARGMAX) {
        if (j == 0 || v > iacc) { iacc = v; idx = (int)j; }
      } else {
        iacc = red_i(op, iacc, v);
      }
    } else {
      float v = ldf(x, xo, base + j * inner, xdt);
      if (op == AG_R_ARGMAX) {
        if (j == 0 || am_takes(acc, v)) { acc = v; idx = (int)j; }
      } else if (op == AG_R_SUM) {
        acc = kahan_add(acc, v, &comp);
      } else {
        acc = red_f(op, acc, v);
      }
    }
  }
  store_red(o, oo, odt, i, op, acc, iacc, idx, isint, scale);
}

/* Sum of squares of one contiguous tensor, one partial per work-group. */
__kernel void ag_sumsq_part(__global float *part, long pbase, const gbuf *x, ulong xo, int dt,
                            long n) {
  __local float sf[AG_WG];
  float acc = 0.0f;
  for (long j = get_global_id(0); j < n; j += get_global_size(0)) {
    float v = ldf(x, xo, j, dt);
    acc += v * v;
  }
  acc = wg_sum(acc, sf);
  if (get_local_id(0) == 0) part[pbase + get_group_id(0)] = acc;
}

__kernel void ag_sumsq_final(gbuf *o, ulong oo, const __global float *part, long n) {
  __local float sf[AG_WG];
  float acc = 0.0f;
  for (long j = get_local_id(0); j < n; j += get_local_size(0)) acc += part[j];
  acc = wg_sum(acc, sf);
  if (get_local_id(0) == 0) stf(o, oo, 0, DT_F32, acc);
}
