/* f64 elementwise kernels, in the program only where the device reports
 * cl_khr_fp64 (the host then builds with -DAG_FP64): unary ops and casts,
 * binary ops and comparisons, and strided fills, computed in double. The op
 * table's expressions are re-expanded here in double precision. */
#ifdef AG_FP64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable

/* Any dtype as double, and double stored as any dtype: to f32/f16/bf16
 * through f32 (as the CPU converts), to integers truncated and saturated
 * (NaN -> 0; bool is v != 0). */
double ldd(const gbuf *b, ulong off, long i, int dt) {
  const gbuf *p = b + off;
  switch (dt) {
    case DT_F64: return ((const __global double *)p)[i];
    case DT_I32:
    case DT_I64:
    case DT_BOOL:
    case DT_U8: return (double)ldl(b, off, i, dt);
    default: return (double)ldf(b, off, i, dt);
  }
}

void std_(gbuf *b, ulong off, long i, int dt, double v) {
  gbuf *p = b + off;
  switch (dt) {
    case DT_F64: ((__global double *)p)[i] = v; break;
    case DT_I32: ((__global int *)p)[i] = convert_int_sat_rtz(v); break;
    case DT_I64: ((__global long *)p)[i] = convert_long_sat_rtz(v); break;
    case DT_U8: ((__global uchar *)p)[i] = convert_uchar_sat_rtz(v); break;
    case DT_BOOL: ((__global uchar *)p)[i] = v != 0.0; break;
    default: stf(b, off, i, dt, (float)v); break;
  }
}

#undef E_K
#undef E_SIGMOID
#undef E_RSQRT
#undef CL_SAVE_X
#undef CL_SAVE_Y
#undef CL_BWD_CASE
#define E_K(c) ((double)(c))
#define E_SIGMOID(v) (1.0 / (1.0 + exp(-(v))))
#define E_RSQRT(v) (1.0 / sqrt(v))
#define CL_SAVE_X(v) const double x = v;
#define CL_SAVE_Y(v) const double y = v;
#define CL_BWD_CASE(ID, name, api, fwd, save, bwd, ...) \
  AG_OPT_IF(AG_OPT_HAS_BWD_##save)(case AG_B_##ID##_BWD: { \
    const double g = a;                                    \
    CL_SAVE_##save(b) return (bwd);                        \
  })

double unary_d(int op, double x, double s0, double s1) {
  switch (op) {
    AG_UNARY_OPS(CL_UNARY_CASE)
  }
  return NAN;
}

double binary_d(int op, double a, double b, double s0, double s1) {
  switch (op) {
    AG_BINARY_OPS(CL_BINARY_CASE)
    AG_UNARY_OPS(CL_BWD_CASE)
    AG_BINARY_OPS(CL_PART_CASE)
  }
  return NAN;
}

/* o = op(x), x or o f64; COPY between dtypes is a cast. */
__kernel void ag_unary_d(gbuf *o, ulong oo, int odt, const gbuf *x, ulong xo, int xdt, int op, double s0,
                         double s1, long n, int nd, ew_meta m) {
  long i = get_global_id(0);
  if (i >= n) return;
  long off[2];
  ew_offsets(i, nd, &m, 2, off);
  double v = ldd(x, xo, off[1], xdt);
  std_(o, oo, off[0], odt, op == AG_U_COPY ? v : unary_d(op, v, s0, s1));
}

/* o = op(a, b) for f64 a and b; comparisons write bool. */
__kernel void ag_binary_d(gbuf *o, ulong oo, const gbuf *a, ulong ao, const gbuf *b, ulong bo, int op,
                          double s0, double s1, long n, int nd, ew_meta m) {
  long i = get_global_id(0);
  if (i >= n) return;
  long off[3];
  ew_offsets(i, nd, &m, 3, off);
  double x = ((const __global double *)(a + ao))[off[1]], y = ((const __global double *)(b + bo))[off[2]];
  if (cmp_op(op)) {
    bool r = op == AG_B_EQ ? x == y : op == AG_B_NE ? x != y : op == AG_B_GT ? x > y
           : op == AG_B_GE ? x >= y : op == AG_B_LT ? x < y : x <= y;
    ((__global uchar *)(o + oo))[off[0]] = r;
  } else {
    ((__global double *)(o + oo))[off[0]] = binary_d(op, x, y, s0, s1);
  }
}

/* REDUCE of f64 over the middle axis of [outer, r, inner]: a work-item per
 * output walks r in order (sum times scale in double; max/min propagate
 * NaN; argmax, i32, is the first NaN, else the first maximum, 0 for an
 * empty row). */
__kernel void ag_reduce_d(gbuf *o, ulong oo, const gbuf *x, ulong xo, int op, double scale, long outer, long r,
                          long inner) {
  long i = get_global_id(0);
  if (i >= outer * inner) return;
  long ou = i / inner, in = i % inner;
  const __global double *p = (const __global double *)(x + xo) + ou * r * inner + in;
  double acc = op == AG_R_SUM ? 0.0 : op == AG_R_MIN ? INFINITY : -INFINITY;
  int idx = 0;
  bool any = false;
  for (long j = 0; j < r; j++) {
    double v = p[j * inner];
    if (op == AG_R_SUM) {
      acc += v;
    } else if (op == AG_R_ARGMAX) {
      if (!any || (!isnan(acc) && (isnan(v) || v > acc))) {
        acc = v;
        idx = (int)j;
      }
      any = true;
    } else if (op == AG_R_MIN) {
      acc = (v < acc || isnan(v)) ? v : acc;
    } else {
      acc = (v > acc || isnan(v)) ? v : acc;
    }
  }
  if (op == AG_R_ARGMAX) ((__global int *)(o + oo))[i] = idx;
  else ((__global double *)(o + oo))[i] = op == AG_R_SUM ? acc * scale : acc;
}

/* VAR (sq: STD, the standard deviation) of f64 over [outer, r, inner]: two
 * passes per output (mean, then centred squares), divided by den = r -
 * correction. */
__kernel void ag_var_d(gbuf *o, ulong oo, const gbuf *x, ulong xo, long outer, long r, long inner, double den,
                       int sq) {
  long i = get_global_id(0);
  if (i >= outer * inner) return;
  long ou = i / inner, in = i % inner;
  const __global double *p = (const __global double *)(x + xo) + ou * r * inner + in;
  double s = 0.0;
  for (long j = 0; j < r; j++) s += p[j * inner];
  double mu = s / (double)r, v = 0.0;
  for (long j = 0; j < r; j++) {
    double d = p[j * inner] - mu;
    v += d * d;
  }
  v /= den;
  ((__global double *)(o + oo))[i] = sq ? sqrt(v) : v;
}

/* CUMSUM of f64 (rev: CUMSUM_SUFFIX, from the end), a work-item per line, in order. */
__kernel void ag_cumsum_d(gbuf *o, ulong oo, const gbuf *x, ulong xo, long outer, long r, long inner, int rev) {
  long i = get_global_id(0);
  if (i >= outer * inner) return;
  long ou = i / inner, in = i % inner, base = ou * r * inner + in;
  const __global double *p = (const __global double *)(x + xo);
  __global double *q = (__global double *)(o + oo);
  double s = 0.0;
  for (long k = 0; k < r; k++) {
    long j = base + (rev ? r - 1 - k : k) * inner;
    s += p[j];
    q[j] = s;
  }
}

/* ARANGE of f64: start + i * step in double. */
__kernel void ag_arange_d(gbuf *o, ulong oo, double start, double step, long n) {
  long i = get_global_id(0);
  if (i < n) ((__global double *)(o + oo))[i] = start + (double)i * step;
}

/* SOFTMAX of f64 rows (lg: LOG_SOFTMAX), a work-item per row. */
__kernel void ag_softmax_d(gbuf *y, ulong yo, const gbuf *x, ulong xo, long R, long C, int lg) {
  long row = get_global_id(0);
  if (row >= R) return;
  const __global double *xr = (const __global double *)(x + xo) + row * C;
  __global double *yr = (__global double *)(y + yo) + row * C;
  double m = -INFINITY, s = 0.0;
  for (long j = 0; j < C; j++) m = (xr[j] > m || isnan(xr[j])) ? xr[j] : m;
  for (long j = 0; j < C; j++) s += exp(xr[j] - m);
  double ls = log(s);
  for (long j = 0; j < C; j++) yr[j] = lg ? xr[j] - m - ls : exp(xr[j] - m) / s;
}

/* SOFTMAX_BWD: softmax dx = y*(dy - sum(dy*y)); log: dx = dy - exp(y)*sum(dy). */
__kernel void ag_softmax_bwd_d(gbuf *dx, ulong dxo, const gbuf *dy, ulong dyo, const gbuf *y, ulong yo, long R,
                               long C, int lg) {
  long row = get_global_id(0);
  if (row >= R) return;
  const __global double *g = (const __global double *)(dy + dyo) + row * C;
  const __global double *yr = (const __global double *)(y + yo) + row * C;
  __global double *d = (__global double *)(dx + dxo) + row * C;
  double s = 0.0;
  for (long j = 0; j < C; j++) s += lg ? g[j] : g[j] * yr[j];
  for (long j = 0; j < C; j++) d[j] = lg ? g[j] - exp(yr[j]) * s : yr[j] * (g[j] - s);
}

/* GATHER of f64 (i32 index), and its backward into an f64 dx. */
__kernel void ag_gather_d(gbuf *y, ulong yo, const gbuf *x, ulong xo, const gbuf *ix, ulong ixo, long s0,
                          long s1, long s2, long O, long K, long I, long X, __global int *err) {
  long t = get_global_id(0);
  if (t >= O * K * I) return;
  long i = t % I, ok = t / I, k = ok % K, o = ok / K;
  int j = ((const __global int *)(ix + ixo))[o * s0 + k * s1 + i * s2];
  __global double *yp = (__global double *)(y + yo);
  if (j < 0 || j >= X) {
    yp[t] = 0.0;
    set_error(err, ERR_INDEX, AG_K_GATHER, j, X);
  } else {
    yp[t] = ((const __global double *)(x + xo))[(o * X + j) * I + i];
  }
}

/* A work-item per (o, i) line: zeroed, then dout added in order of k. */
__kernel void ag_gather_bwd_d(gbuf *dx, ulong dxo, const gbuf *g, ulong go, const gbuf *ix, ulong ixo, long s0,
                              long s1, long s2, long O, long K, long I, long X) {
  long t = get_global_id(0);
  if (t >= O * I) return;
  long o = t / I, i = t % I, base = o * X * I + i;
  __global double *d = (__global double *)(dx + dxo);
  const __global double *gp = (const __global double *)(g + go);
  for (long j = 0; j < X; j++) d[base + j * I] = 0.0;
  for (long k = 0; k < K; k++) {
    int j = ((const __global int *)(ix + ixo))[o * s0 + k * s1 + i * s2];
    if (j >= 0 && j < X) d[base + j * I] += gp[(o * K + k) * I + i];
  }
}

/* EMBEDDING_BWD of an f64 table: a work-item per column walks the indices
 * in order (the CPU's sum order, no atomics). */
__kernel void ag_embedding_bwd_d(gbuf *tab, ulong to, const gbuf *dout, ulong doo, const gbuf *ix, ulong ixo,
                                 long n, long d, long v, __global int *err) {
  long col = get_global_id(0);
  if (col >= d) return;
  __global double *t = (__global double *)(tab + to);
  const __global double *g = (const __global double *)(dout + doo);
  for (long r = 0; r < n; r++) {
    int k = ((const __global int *)(ix + ixo))[r];
    if (k >= 0 && k < v) t[(long)k * d + col] += g[r * d + col];
    else if (col == 0) set_error(err, ERR_INDEX, AG_K_EMBEDDING_BWD, k, v);
  }
}

/* A strided f64 fill (contiguous ones are clEnqueueFillBuffer). */
__kernel void ag_fill_d(gbuf *o, ulong oo, double v, long n, int nd, ew_meta m) {
  long i = get_global_id(0);
  if (i >= n) return;
  long off[1];
  ew_offsets(i, nd, &m, 1, off);
  ((__global double *)(o + oo))[off[0]] = v;
}
#endif
