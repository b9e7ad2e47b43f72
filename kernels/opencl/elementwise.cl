/* Elementwise kernels: unary, binary, where, fill, arange, random fills and
 * dropout. Any layout up to 8 dims through ew_meta; the op code is a kernel
 * argument so one compiled kernel serves every sub-op and dtype. */

/* The op table's expression language (include/anygrad/optable.h, embedded
 * in front of these sources) in OpenCL C, single precision; the portable
 * program maps it to pmath.h instead (portable_vocab.cl). */
#ifndef AG_PORTABLE
#define E_K(c) ((float)(c))
#define E_EXP(v) exp(v)
#define E_LOG(v) log(v)
#define E_SQRT(v) sqrt(v)
#define E_RSQRT(v) rsqrt(v)
#define E_TANH(v) tanh(v)
#define E_SIGMOID(v) (1.0f / (1.0f + exp(-(v))))
#define E_ERF(v) erf(v)
#define E_SIN(v) sin(v)
#define E_COS(v) cos(v)
#define E_LOG1P(v) log1p(v)
#define E_EXPM1(v) expm1(v)
#define E_FLOOR(v) floor(v)
#define E_CEIL(v) ceil(v)
#define E_RINT(v) rint(v)
#define E_ABS(v) fabs(v)
#define E_POW(u, v) pow(u, v)
#define E_ATAN2(u, v) atan2(u, v)
#define E_FMOD(u, v) fmod(u, v)
#define E_DIV(u, v) ((u) / (v))
#endif
#define CL_SAVE_NG(v)
#define CL_SAVE_N(v)
#define CL_SAVE_X(v) const float x = v;
#define CL_SAVE_Y(v) const float y = v;
#define CL_UNARY_CASE(ID, name, api, fwd, ...) \
  case AG_U_##ID: return (fwd);
#define CL_BINARY_CASE(ID, name, api, fwd, ...) \
  case AG_B_##ID: return (fwd);
#define CL_BWD_CASE(ID, name, api, fwd, save, bwd, ...) \
  AG_OPT_IF(AG_OPT_HAS_BWD_##save)(case AG_B_##ID##_BWD: { \
    const float g = a;                                     \
    CL_SAVE_##save(b) return (bwd);                        \
  })
#define CL_PART_CASE(ID, name, api, fwd, kind, grad, da, db, ...) \
  AG_OPT_IF(AG_OPT_PART_##grad)(case AG_B_##ID##_DA: return (da); case AG_B_##ID##_DB: return (db);)
#define CL_IS_CMP_ARITH 0
#define CL_IS_CMP_CMP 1
#define CL_CMP_CASE(ID, name, api, fwd, kind, ...) AG_OPT_IF(CL_IS_CMP_##kind)(case AG_B_##ID:)

/* Every unary sub-op of the table; NaN outside it (the core refuses those
 * before launch). */
float unary_f(int op, float x, float s0, float s1) {
  switch (op) {
    AG_UNARY_OPS(CL_UNARY_CASE)
  }
  return NAN;
}

/* Integer ops wrap (two's complement) like the CPU backend, computed in
 * ulong and stored in the output's width (stl keeps the low bits). sint:
 * is0/is1 are exact integer scalars (AFFINE on integer dtypes, from the
 * call's i[]); the integer AFFINE path uses them. */
__kernel void ag_unary(gbuf *o, ulong oo, int odt, const gbuf *x, ulong xo, int xdt, int op,
                       float s0, float s1, long is0, long is1, int sint, long n, int nd,
                       ew_meta m) {
  long i = get_global_id(0);
  if (i >= n) return;
  long off[2];
  ew_offsets(i, nd, &m, 2, off);
  if (op == AG_U_COPY && odt == xdt) {
    /* Same-dtype copies move bits, so NaN payloads and large ints survive. */
    if (odt == DT_F16 || odt == DT_BF16)
      ((__global ushort *)(o + oo))[off[0]] = ((const __global ushort *)(x + xo))[off[1]];
    else if (odt == DT_I64)
      ((__global ulong *)(o + oo))[off[0]] = ((const __global ulong *)(x + xo))[off[1]];
    else if (odt == DT_U8 || odt == DT_BOOL)
      ((__global uchar *)(o + oo))[off[0]] = ((const __global uchar *)(x + xo))[off[1]];
    else
      ((__global uint *)(o + oo))[off[0]] = ((const __global uint *)(x + xo))[off[1]];
  } else if (is_int_dt(odt) && is_int_dt(xdt)) {
    /* integer ops and casts between integer dtypes in i64 (low bits kept) */
    long v = ldl(x, xo, off[1], xdt);
    if (op == AG_U_NEG) v = (long)(0ul - (ulong)v);
    else if (op == AG_U_ABS) v = v < 0 ? (long)(0ul - (ulong)v) : v;
    else if (op == AG_U_AFFINE && sint) v = (long)((ulong)v * (ulong)is0 + (ulong)is1);
    else if (op == AG_U_AFFINE) {
      stf(o, oo, off[0], odt, (float)v * s0 + s1);
      return;
    }
    stl(o, oo, off[0], odt, v);
  } else {
    stf(o, oo, off[0], odt, unary_f(op, ldf(x, xo, off[1], xdt), s0, s1));
  }
}

/* Every binary sub-op: forward, unary backward, partial derivatives. */
float binary_f(int op, float a, float b, float s0, float s1) {
  switch (op) {
    AG_BINARY_OPS(CL_BINARY_CASE)
    AG_UNARY_OPS(CL_BWD_CASE)
    AG_BINARY_OPS(CL_PART_CASE)
  }
  return NAN;
}

/* Integer rules of the table's INT entries (comparisons below); 0 for
 * any other sub-op (not reached: supports() refuses it). */
int binary_i(int op, int a, int b, long s0) {
  switch (op) {
    case AG_B_ADD: return (int)((uint)a + (uint)s0 * (uint)b);
    case AG_B_SUB: return (int)((uint)a - (uint)b);
    case AG_B_MUL: return (int)((uint)a * (uint)b);
    case AG_B_MAX: return max(a, b);
    case AG_B_MIN: return min(a, b);
  }
  return 0;
}

/* Comparisons (the table's CMP entries) write bool. */
bool cmp_op(int op) {
  switch (op) {
    AG_BINARY_OPS(CL_CMP_CASE) return true;
  }
  return false;
}
bool cmp_l(int op, long a, long b) {
  switch (op) {
    case AG_B_EQ: return a == b;
    case AG_B_GT: return a > b;
    case AG_B_LT: return a < b;
    case AG_B_NE: return a != b;
    case AG_B_LE: return a <= b;
    case AG_B_GE: return a >= b;
  }
  return false;
}
bool cmp_f(int op, float a, float b) { return binary_f(op, a, b, 0.0f, 0.0f) != 0.0f; }

long binary_l(int op, long a, long b, long s0) {
  switch (op) {
    case AG_B_ADD: return (long)((ulong)a + (ulong)s0 * (ulong)b);
    case AG_B_SUB: return (long)((ulong)a - (ulong)b);
    case AG_B_MUL: return (long)((ulong)a * (ulong)b);
    case AG_B_MAX: return max(a, b);
    case AG_B_MIN: return min(a, b);
  }
  return 0;
}

__kernel void ag_binary(gbuf *o, ulong oo, const gbuf *a, ulong ao, const gbuf *b, ulong bo,
                        int dt, int op, float s0, float s1, long is0, int sint, long n, int nd,
                        ew_meta m) {
  long i = get_global_id(0);
  if (i >= n) return;
  long off[3];
  ew_offsets(i, nd, &m, 3, off);
  if (cmp_op(op)) {
    bool r = is_int_dt(dt) ? cmp_l(op, ldl(a, ao, off[1], dt), ldl(b, bo, off[2], dt))
                           : cmp_f(op, ldf(a, ao, off[1], dt), ldf(b, bo, off[2], dt));
    ((__global uchar *)(o + oo))[off[0]] = r;
  } else if (is_int_dt(dt) && dt != DT_I32) {
    if (op == AG_B_ADD && !sint)
      stf(o, oo, off[0], dt, (float)ldl(a, ao, off[1], dt) + s0 * (float)ldl(b, bo, off[2], dt));
    else
      stl(o, oo, off[0], dt, binary_l(op, ldl(a, ao, off[1], dt), ldl(b, bo, off[2], dt), is0));
  } else if (dt == DT_I32 && op == AG_B_ADD && !sint)
    sti(o, oo, off[0], convert_int_sat_rtz((float)ldi(a, ao, off[1], dt) + s0 * (float)ldi(b, bo, off[2], dt)));
  else if (dt == DT_I32)
    sti(o, oo, off[0], binary_i(op, ldi(a, ao, off[1], dt), ldi(b, bo, off[2], dt), is0));
  else
    stf(o, oo, off[0], dt, binary_f(op, ldf(a, ao, off[1], dt), ldf(b, bo, off[2], dt), s0, s1));
}

/* Bits are copied, so every dtype is exact; esz is the element size. */
__kernel void ag_where(gbuf *o, ulong oo, const gbuf *c, ulong co, int cdt, const gbuf *a,
                       ulong ao, const gbuf *b, ulong bo, int esz, long n, int nd, ew_meta m) {
  long i = get_global_id(0);
  if (i >= n) return;
  long off[4];
  ew_offsets(i, nd, &m, 4, off);
  bool take_a = is_int_dt(cdt) ? ldl(c, co, off[1], cdt) != 0 : ldf(c, co, off[1], cdt) != 0.0f;
  if (esz == 8)
    ((__global ulong *)(o + oo))[off[0]] =
        take_a ? ((const __global ulong *)(a + ao))[off[2]] : ((const __global ulong *)(b + bo))[off[3]];
  else if (esz == 1)
    ((__global uchar *)(o + oo))[off[0]] =
        take_a ? ((const __global uchar *)(a + ao))[off[2]] : ((const __global uchar *)(b + bo))[off[3]];
  else if (esz == 4)
    ((__global uint *)(o + oo))[off[0]] =
        take_a ? ((const __global uint *)(a + ao))[off[2]] : ((const __global uint *)(b + bo))[off[3]];
  else
    ((__global ushort *)(o + oo))[off[0]] =
        take_a ? ((const __global ushort *)(a + ao))[off[2]] : ((const __global ushort *)(b + bo))[off[3]];
}

/* iv: the value as the integer dtype stores it (saturated on the host). */
__kernel void ag_fill(gbuf *o, ulong oo, int dt, float v, long iv, long n, int nd, ew_meta m) {
  long i = get_global_id(0);
  if (i >= n) return;
  long off[1];
  ew_offsets(i, nd, &m, 1, off);
  if (is_int_dt(dt))
    stl(o, oo, off[0], dt, iv);
  else
    stf(o, oo, off[0], dt, v);
}

__kernel void ag_arange(gbuf *o, ulong oo, int dt, float start, float step, long istart,
                        long istep, long n) {
  long i = get_global_id(0);
  if (i >= n) return;
  if (dt == DT_I32)
    sti(o, oo, i, (int)(istart + i * istep));
  else if (is_int_dt(dt))
    stl(o, oo, i, dt, sat_dt(istart + i * istep, dt));
  else
    stf(o, oo, i, dt, start + (float)i * step);
}

/* One work-item per Philox block: uniform fills 4 elements (lane i%4 of
 * block offset + i/4), normal fills 2 with Box-Muller on lanes 2*(i%2) and
 * 2*(i%2)+1 of block offset + i/2 (u1 in (0, 1] so the log is finite).
 * Must match core/tensor/philox.c. */
__kernel void ag_rand(gbuf *o, ulong oo, int dt, int normal, float s0, float s1, ulong seed,
                      ulong offset, long n) {
  long w = get_global_id(0), per = normal ? 2 : 4;
  if (w * per >= n) return;
  uint4 r = philox(offset + (ulong)w, seed);
  for (int k = 0; k < per && w * per + k < n; k++) {
    float v;
    if (normal) {
      float u1 = ((float)(lane4(r, 2 * k) >> 8) + 1.0f) * 0x1.0p-24f;
      float u2 = (float)(lane4(r, 2 * k + 1) >> 8) * 0x1.0p-24f;
#ifdef AG_PORTABLE
      v = agp_sqrt(-2.0f * agp_log(u1)) * agp_cos(6.2831855f * u2) * s1 + s0;
#else
      v = sqrt(-2.0f * log(u1)) * cos(6.2831853071795865f * u2) * s1 + s0;
#endif
    } else {
#ifdef AG_PORTABLE
      /* s1: range_f = (float)(hi - lo), from the host's double */
      v = (float)(lane4(r, k) >> 8) * 0x1.0p-24f * s1 + s0;
#else
      v = (float)(lane4(r, k) >> 8) * 0x1.0p-24f * (s1 - s0) + s0;
#endif
    }
    stf(o, oo, w * per + k, dt, v);
  }
}

__kernel void ag_dropout(gbuf *o, ulong oo, int odt, const gbuf *x, ulong xo, int xdt, gbuf *mk,
                         ulong mo, int mdt, float p, float scale_hi, float scale_lo, ulong seed,
                         ulong offset, long n) {
  long w = get_global_id(0);
  if (w * 4 >= n) return;
  uint4 r = philox(offset + (ulong)w, seed);
  for (int k = 0; k < 4 && w * 4 + k < n; k++) {
    long i = w * 4 + k;
    bool keep = (float)(lane4(r, k) >> 8) * 0x1.0p-24f >= p;
    float xv = ldf(x, xo, i, xdt);
#ifdef AG_PORTABLE
    /* m = keep ? scale_f : 0; y = x * m (docs/numerics.md) */
    float mv = keep ? scale_hi : 0.0f;
    stf(o, oo, i, odt, xv * mv);
    if (mk) stf(mk, mo, i, mdt, mv);
#else
    /* x * (hi + lo) with one rounding: the CPU's f64 product, rounded */
    stf(o, oo, i, odt, keep ? fma(xv, scale_hi, xv * scale_lo) : 0.0f * xv);
    if (mk) stf(mk, mo, i, mdt, keep ? scale_hi : 0.0f);
#endif
  }
}

/* Contiguous same-dtype fast paths, one kernel per sub-op, named from the
 * table (ag_u_EXP, ag_b_GELU_BWD, ...): with the op a compile-time
 * constant the switch folds away and PoCL vectorises across work-items
 * (the switch with transcendental cases blocks that; about 3x on a CPU
 * device). The dtype stays a (uniform) argument. Comparisons, which write
 * bool, take the general kernel. */
#define EW_UNARY_C(ID, ...)                                                                    \
  __kernel void ag_u_##ID(gbuf *o, ulong oo, const gbuf *x, ulong xo, int dt, float s0,        \
                          float s1, long n) {                                                  \
    long i = get_global_id(0);                                                                 \
    if (i < n) stf(o, oo, i, dt, unary_f(AG_U_##ID, ldf(x, xo, i, dt), s0, s1));               \
  }
#define EW_BINARY_C_OP(OP)                                                                     \
  __kernel void ag_b_##OP(gbuf *o, ulong oo, const gbuf *a, ulong ao, const gbuf *b, ulong bo, \
                          int dt, float s0, float s1, long n) {                                \
    long i = get_global_id(0);                                                                 \
    if (i < n) stf(o, oo, i, dt, binary_f(AG_B_##OP, ldf(a, ao, i, dt), ldf(b, bo, i, dt), s0, s1)); \
  }
#define EW_BINARY_C(ID, name, api, fwd, kind, ...) AG_OPT_IF(CL_IS_ARITH_##kind)(EW_BINARY_C_OP(ID))
#define CL_IS_ARITH_ARITH 1
#define CL_IS_ARITH_CMP 0
#define EW_BWD_C(ID, name, api, fwd, save, ...) AG_OPT_IF(AG_OPT_HAS_BWD_##save)(EW_BINARY_C_OP(ID##_BWD))
#define EW_PART_C(ID, name, api, fwd, kind, grad, ...) \
  AG_OPT_IF(AG_OPT_PART_##grad)(EW_BINARY_C_OP(ID##_DA) EW_BINARY_C_OP(ID##_DB))
AG_UNARY_OPS(EW_UNARY_C)
AG_BINARY_OPS(EW_BINARY_C)
AG_UNARY_OPS(EW_BWD_C)
AG_BINARY_OPS(EW_PART_C)
