/* Elementwise kernels: unary, binary, where, fill, arange, random fills and
 * dropout. Any layout up to 8 dims through ew_meta; the op code is a kernel
 * argument so one compiled kernel serves every sub-op and dtype. */

float unary_f(int op, float x, float s0, float s1) {
  switch (op) {
    case 0: return x;
    case 1: return -x;
    case 2: return exp(x);
    case 3: return log(x);
    case 4: return sqrt(x);
    case 5: return rsqrt(x);
    case 6: return fabs(x);
    case 7: return x < 0.0f ? 0.0f : x; /* NaN passes, as torch.relu */
    case 8: return 0.5f * x * (1.0f + tanh(0.7978845608f * (x + 0.044715f * x * x * x)));
    case 9: return x / (1.0f + exp(-x));
    case 10: return 1.0f / (1.0f + exp(-x));
    case 11: return tanh(x);
    case 12: return pow(x, s0);
    case 13: return x * s0 + s1;
    case 14: return s0 / x;
    case 15: return x * x;
  }
  return NAN;
}

/* i32 arithmetic wraps (two's complement) like the CPU backend; AFFINE
 * saturates. */
int sat_i32(long v) { return v > INT_MAX ? INT_MAX : v < INT_MIN ? INT_MIN : (int)v; }

int unary_i(int op, int x, long s0, long s1) {
  switch (op) {
    case 1: return (int)(0u - (uint)x);
    case 6: return x < 0 ? (int)(0u - (uint)x) : x;
    case 13: return sat_i32((long)x * s0 + s1);
    default: return x;
  }
}

/* sint: the scalars are integral and the i32 path uses is0/is1 exactly. */
__kernel void ag_unary(gbuf *o, ulong oo, int odt, const gbuf *x, ulong xo, int xdt, int op,
                       float s0, float s1, long is0, long is1, int sint, long n, int nd,
                       ew_meta m) {
  long i = get_global_id(0);
  if (i >= n) return;
  long off[2];
  ew_offsets(i, nd, &m, 2, off);
  if (op == 0 && odt == xdt) {
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
    if (op == 1) v = (long)(0ul - (ulong)v);
    else if (op == 6) v = v < 0 ? (long)(0ul - (ulong)v) : v;
    else if (op == 13 && sint) v = sat_dt(v * is0 + is1, odt);
    else if (op == 13) {
      stf(o, oo, off[0], odt, (float)v * s0 + s1);
      return;
    }
    stl(o, oo, off[0], odt, v);
  } else {
    stf(o, oo, off[0], odt, unary_f(op, ldf(x, xo, off[1], xdt), s0, s1));
  }
}

float binary_f(int op, float a, float b, float s0) {
  const float k = 0.7978845608f;
  switch (op) {
    case 0: return a + s0 * b;
    case 1: return a - b;
    case 2: return a * b;
    case 3: return a / b;
    case 4: return (a > b || isnan(a)) ? a : b;
    case 5: return (a < b || isnan(a)) ? a : b;
    case 6: return a == b ? 1.0f : 0.0f;
    case 7: return a > b ? 1.0f : 0.0f;
    case 8: return a < b ? 1.0f : 0.0f;
    case 9: return b > 0.0f ? a : 0.0f;
    case 10: {
      float t = tanh(k * (b + 0.044715f * b * b * b));
      return a * (0.5f * (1.0f + t) + 0.5f * b * (1.0f - t * t) * k * (1.0f + 3.0f * 0.044715f * b * b));
    }
    case 11: {
      float sg = 1.0f / (1.0f + exp(-b));
      return a * sg * (1.0f + b * (1.0f - sg));
    }
    case 12: return a * b * (1.0f - b);
    case 13: return a * (1.0f - b * b);
    case 14: return a * s0 * pow(b, s0 - 1.0f);
    case 15: return a * sign(b);
  }
  return NAN;
}

int binary_i(int op, int a, int b, long s0) {
  switch (op) {
    case 0: return (int)((uint)a + (uint)s0 * (uint)b);
    case 1: return (int)((uint)a - (uint)b);
    case 2: return (int)((uint)a * (uint)b);
    case 4: return max(a, b);
    case 5: return min(a, b);
    case 6: return a == b;
    case 7: return a > b;
    case 8: return a < b;
  }
  return 0;
}

/* Comparisons (ops 6-8 eq/gt/lt, 16-18 ne/le/ge) write bool. */
bool cmp_op(int op) { return (op >= 6 && op <= 8) || (op >= 16 && op <= 18); }
bool cmp_l(int op, long a, long b) {
  switch (op) {
    case 6: return a == b;
    case 7: return a > b;
    case 8: return a < b;
    case 16: return a != b;
    case 17: return a <= b;
    default: return a >= b;
  }
}
bool cmp_f(int op, float a, float b) {
  switch (op) {
    case 6: return a == b;
    case 7: return a > b;
    case 8: return a < b;
    case 16: return a != b;
    case 17: return a <= b;
    default: return a >= b;
  }
}

long binary_l(int op, long a, long b, long s0) {
  switch (op) {
    case 0: return (long)((ulong)a + (ulong)s0 * (ulong)b);
    case 1: return (long)((ulong)a - (ulong)b);
    case 2: return (long)((ulong)a * (ulong)b);
    case 4: return max(a, b);
    case 5: return min(a, b);
  }
  return 0;
}

__kernel void ag_binary(gbuf *o, ulong oo, const gbuf *a, ulong ao, const gbuf *b, ulong bo,
                        int dt, int op, float s0, long is0, int sint, long n, int nd, ew_meta m) {
  long i = get_global_id(0);
  if (i >= n) return;
  long off[3];
  ew_offsets(i, nd, &m, 3, off);
  if (cmp_op(op)) {
    bool r = is_int_dt(dt) ? cmp_l(op, ldl(a, ao, off[1], dt), ldl(b, bo, off[2], dt))
                           : cmp_f(op, ldf(a, ao, off[1], dt), ldf(b, bo, off[2], dt));
    ((__global uchar *)(o + oo))[off[0]] = r;
  } else if (is_int_dt(dt) && dt != DT_I32) {
    if (op == 0 && !sint)
      stf(o, oo, off[0], dt, (float)ldl(a, ao, off[1], dt) + s0 * (float)ldl(b, bo, off[2], dt));
    else
      stl(o, oo, off[0], dt, binary_l(op, ldl(a, ao, off[1], dt), ldl(b, bo, off[2], dt), is0));
  } else if (dt == DT_I32 && op == 0 && !sint)
    sti(o, oo, off[0], convert_int_sat_rtz((float)ldi(a, ao, off[1], dt) + s0 * (float)ldi(b, bo, off[2], dt)));
  else if (dt == DT_I32)
    sti(o, oo, off[0], binary_i(op, ldi(a, ao, off[1], dt), ldi(b, bo, off[2], dt), is0));
  else
    stf(o, oo, off[0], dt, binary_f(op, ldf(a, ao, off[1], dt), ldf(b, bo, off[2], dt), s0));
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
      v = sqrt(-2.0f * log(u1)) * cos(6.2831853071795865f * u2) * s1 + s0;
    } else {
      v = (float)(lane4(r, k) >> 8) * 0x1.0p-24f * (s1 - s0) + s0;
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
    /* x * (hi + lo) with one rounding: the CPU's f64 product, rounded */
    stf(o, oo, i, odt, keep ? fma(xv, scale_hi, xv * scale_lo) : 0.0f * xv);
    if (mk) stf(mk, mo, i, mdt, keep ? scale_hi : 0.0f);
  }
}

/* Contiguous same-dtype fast paths, one kernel per op: with the op a
 * compile-time constant the switch folds away and PoCL vectorises across
 * work-items (the 16-way switch with transcendental cases blocks that; about
 * 3x on a CPU device). The dtype stays a (uniform) argument. */
#define EW_UNARY_C(OP)                                                                    \
  __kernel void ag_u##OP(gbuf *o, ulong oo, const gbuf *x, ulong xo, int dt, float s0,    \
                         float s1, long n) {                                              \
    long i = get_global_id(0);                                                            \
    if (i < n) stf(o, oo, i, dt, unary_f(OP, ldf(x, xo, i, dt), s0, s1));                 \
  }
#define EW_BINARY_C(OP)                                                                   \
  __kernel void ag_b##OP(gbuf *o, ulong oo, const gbuf *a, ulong ao, const gbuf *b,       \
                         ulong bo, int dt, float s0, long n) {                            \
    long i = get_global_id(0);                                                            \
    if (i < n) stf(o, oo, i, dt, binary_f(OP, ldf(a, ao, i, dt), ldf(b, bo, i, dt), s0)); \
  }
EW_UNARY_C(0) EW_UNARY_C(1) EW_UNARY_C(2) EW_UNARY_C(3) EW_UNARY_C(4) EW_UNARY_C(5)
EW_UNARY_C(6) EW_UNARY_C(7) EW_UNARY_C(8) EW_UNARY_C(9) EW_UNARY_C(10) EW_UNARY_C(11)
EW_UNARY_C(12) EW_UNARY_C(13) EW_UNARY_C(14) EW_UNARY_C(15)
EW_BINARY_C(0) EW_BINARY_C(1) EW_BINARY_C(2) EW_BINARY_C(3) EW_BINARY_C(4) EW_BINARY_C(5)
EW_BINARY_C(6) EW_BINARY_C(7) EW_BINARY_C(8) EW_BINARY_C(9) EW_BINARY_C(10) EW_BINARY_C(11)
EW_BINARY_C(12) EW_BINARY_C(13) EW_BINARY_C(14) EW_BINARY_C(15)
