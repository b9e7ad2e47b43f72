#version 450
/* Elementwise kernels: unary, binary, where, fill, arange, random fills and
 * dropout, one per build define (K_UNARY ...). Any layout up to 8 dims: the
 * host collapses dims and passes shape n[0..7] and the strides of operand k
 * at n[8 + 8k + d]; nd == 0 means every operand is contiguous. */
#include "common.glsl"
#include "ops.glsl"
layout(local_size_x = WG) in;

#define NUMEL pc.a.n[40]
#define ND int(pc.a.n[41])

void ew_offsets(int64_t i, int nop, out int64_t o[4]) {
  int nd = ND;
  for (int k = 0; k < 4; k++) o[k] = nd == 0 ? i : 0l;
  for (int d = nd - 1; d >= 0; d--) {
    int64_t sz = pc.a.n[d];
    int64_t c = i % sz;
    i /= sz;
    for (int k = 0; k < nop; k++) o[k] += c * pc.a.n[8 + 8 * k + d];
  }
}

#if defined(K_UNARY)
/* p0 out, p1 x; k0 out dtype, k1 x dtype, k4: n[42], n[43] are the exact
 * integer scalars of AFFINE on an integer dtype (the call's i[]); f0 f1
 * scalars. Integer arithmetic wraps (int64 in SPIR-V is two's complement)
 * and stl keeps the low bits of the output's width. */
void main() {
  int64_t i = gid();
  if (i >= NUMEL) return;
  int64_t off[4];
  ew_offsets(i, 2, off);
  uint64_t o = pc.a.p[0], x = pc.a.p[1];
  int odt = pc.a.k[0], xdt = pc.a.k[1];
  if (OP == AG_U_COPY && odt == xdt) {
    /* same-dtype copies move bits: NaN payloads and large ints survive */
    if (odt == AG_F16 || odt == AG_BF16) PH(o, off[0]) = PH(x, off[1]);
    else if (odt == AG_I64) PL(o, off[0]) = PL(x, off[1]);
    else if (odt == AG_U8 || odt == AG_BOOL) PB(o, off[0]) = PB(x, off[1]);
    else PU(o, off[0]) = PU(x, off[1]);
  } else if (is_int_dt(odt) && is_int_dt(xdt)) {
    int64_t v = ldl(x, off[1], xdt);
    if (OP == AG_U_NEG) v = -v;
    else if (OP == AG_U_ABS) v = v < 0l ? -v : v;
    else if (OP == AG_U_AFFINE && pc.a.k[4] != 0) v = v * pc.a.n[42] + pc.a.n[43];
    else if (OP == AG_U_AFFINE) {
      PFLOAT t = float(v) * pc.a.f[0] + pc.a.f[1];
      stf(o, off[0], odt, t);
      return;
    }
    stl(o, off[0], odt, v);
  } else {
    stf(o, off[0], odt, unary_f(ldf(x, off[1], xdt), pc.a.f[0], pc.a.f[1]));
  }
}
#endif

#if defined(K_BINARY)
int64_t binary_l(int64_t a, int64_t b, int64_t s0) {
  if (OP == AG_B_ADD) return a + s0 * b;
  if (OP == AG_B_SUB) return a - b;
  if (OP == AG_B_MUL) return a * b;
  if (OP == AG_B_MAX) return max(a, b);
  if (OP == AG_B_MIN) return min(a, b);
  return 0l;
}
bool cmp_l(int64_t a, int64_t b) {
  if (OP == AG_B_EQ) return a == b;
  if (OP == AG_B_GT) return a > b;
  if (OP == AG_B_LT) return a < b;
  if (OP == AG_B_NE) return a != b;
  if (OP == AG_B_LE) return a <= b;
  if (OP == AG_B_GE) return a >= b;
  return false;
}
/* p0 out, p1 a, p2 b; k0 the inputs' dtype, k4 s0 integral (n[42]). */
void main() {
  int64_t i = gid();
  if (i >= NUMEL) return;
  int64_t off[4];
  ew_offsets(i, 3, off);
  uint64_t o = pc.a.p[0], a = pc.a.p[1], b = pc.a.p[2];
  int dt = pc.a.k[0];
  float s0 = pc.a.f[0], s1 = pc.a.f[1];
  if (cmp_op()) {
    bool r = is_int_dt(dt) ? cmp_l(ldl(a, off[1], dt), ldl(b, off[2], dt))
                           : binary_f(ldf(a, off[1], dt), ldf(b, off[2], dt), 0.0, 0.0) != 0.0;
    PB(o, off[0]) = uint8_t(r ? 1u : 0u);
  } else if (is_int_dt(dt)) {
    if (OP == AG_B_ADD && pc.a.k[4] == 0) {
      PFLOAT v = float(ldl(a, off[1], dt)) + s0 * float(ldl(b, off[2], dt));
      stf(o, off[0], dt, v);
    } else {
      stl(o, off[0], dt, binary_l(ldl(a, off[1], dt), ldl(b, off[2], dt), pc.a.n[42]));
    }
  } else {
    stf(o, off[0], dt, binary_f(ldf(a, off[1], dt), ldf(b, off[2], dt), s0, s1));
  }
}
#endif

#if defined(K_WHERE)
/* p0 out, p1 cond (k1 its dtype), p2 a, p3 b; k5 element size. */
void main() {
  int64_t i = gid();
  if (i >= NUMEL) return;
  int64_t off[4];
  ew_offsets(i, 4, off);
  uint64_t o = pc.a.p[0], c = pc.a.p[1], a = pc.a.p[2], b = pc.a.p[3];
  int cdt = pc.a.k[1], esz = pc.a.k[5];
  /* an f64 condition is tested on its bits (nonzero but for +-0), so this
   * module needs no double */
  bool ta = cdt == AG_F64 ? (PL(c, off[1]) & LONG_MAX) != 0l
            : is_int_dt(cdt) ? ldl(c, off[1], cdt) != 0l : ldf(c, off[1], cdt) != 0.0;
  if (esz == 8) PL(o, off[0]) = ta ? PL(a, off[2]) : PL(b, off[3]);
  else if (esz == 4) PU(o, off[0]) = ta ? PU(a, off[2]) : PU(b, off[3]);
  else if (esz == 2) PH(o, off[0]) = ta ? PH(a, off[2]) : PH(b, off[3]);
  else PB(o, off[0]) = ta ? PB(a, off[2]) : PB(b, off[3]);
}
#endif

#if defined(K_FILL)
/* p0 out, k0 dtype, f0 value, n[42] the value as the integer dtype stores it. */
void main() {
  int64_t i = gid();
  if (i >= NUMEL) return;
  int64_t off[4];
  ew_offsets(i, 1, off);
  int dt = pc.a.k[0];
  if (is_int_dt(dt)) stl(pc.a.p[0], off[0], dt, pc.a.n[42]);
  else stf(pc.a.p[0], off[0], dt, pc.a.f[0]);
}
#endif

#if defined(K_ARANGE)
/* p0 out (contiguous), k0 dtype, f0 start, f1 step, n[42] n[43] the same as
 * integers. */
void main() {
  int64_t i = gid();
  if (i >= NUMEL) return;
  int dt = pc.a.k[0];
  if (is_int_dt(dt)) stl(pc.a.p[0], i, dt, sat_dt(pc.a.n[42] + i * pc.a.n[43], dt));
  else {
    precise float v = pc.a.f[0] + float(i) * pc.a.f[1];
    stf(pc.a.p[0], i, dt, v);
  }
}
#endif

#if defined(K_RAND) || defined(K_RAND64)
#if defined(K_RAND64)
/* log and cos in f64 by series, rounded to f32: what a correctly rounded
 * libm (the CPU's logf, cosf) returns, where the driver's f32 functions
 * are a few ulp off and move bf16 roundings (K_RAND64 runs on devices with
 * shaderFloat64; GLSL has no f64 log or cos). */
double d_log(double x) {
  int e;
  double m = frexp(x, e);
  if (m < 0.70710678118654752) {
    m *= 2.0;
    e -= 1;
  }
  double z = (m - 1.0) / (m + 1.0), z2 = z * z, t = z, s = 0.0;
  for (int k = 0; k < 14; k++) {
    s += t / double(2 * k + 1);
    t *= z2;
  }
  return 2.0 * s + double(e) * 0.693147180559945309417232121458LF;
}
double d_cos(double x) {
  const double h1 = 1.57079632679489655800LF, h2 = 6.12323399573676603587e-17LF;
  double q = floor(x / h1 + 0.5);
  double r = (x - q * h1) - q * h2, r2 = r * r;
  /* Taylor series of sin and cos on [-pi/4, pi/4] */
  double c = 1.0, sn = r, tc = 1.0, ts = r;
  for (int k = 1; k < 12; k++) {
    tc *= -r2 / double((2 * k - 1) * (2 * k));
    ts *= -r2 / double((2 * k) * (2 * k + 1));
    c += tc;
    sn += ts;
  }
  int qi = int(q) & 3;
  return qi == 0 ? c : qi == 1 ? -sn : qi == 2 ? -c : sn;
}
#endif
/* One invocation per Philox block (core/tensor/philox.c): uniform fills 4
 * elements, normal 2 (Box-Muller). p0 out, k0 dtype, k1 normal, f0 f1,
 * n[44] seed, n[45] offset. */
void main() {
  int64_t w = gid();
  bool normal = pc.a.k[1] != 0;
  int64_t per = normal ? 2l : 4l, n = NUMEL;
  if (w * per >= n) return;
  uvec4 r = philox(uint64_t(pc.a.n[45]) + uint64_t(w), uint64_t(pc.a.n[44]));
  float s0 = pc.a.f[0], s1 = pc.a.f[1];
  for (int k = 0; k < int(per) && w * per + k < n; k++) {
    precise float v;
    if (normal) {
      precise float u1 = (float(r[2 * k] >> 8) + 1.0) * 5.9604644775390625e-8;
      precise float u2 = float(r[2 * k + 1] >> 8) * 5.9604644775390625e-8;
#if defined(AG_PORTABLE)
      /* docs/numerics.md: sqrt(-2 log u1) cos(2 pi u2) with pmath */
      precise float lg = agp_log(u1);
      precise float m2 = -2.0 * lg;
      precise float rad = agp_sqrt(m2);
      precise float cs = agp_cos(6.2831855 * u2);
#elif defined(K_RAND64)
      precise float lg = float(d_log(double(u1)));
      precise float ang = 6.2831853071795865 * u2;
      precise float cs = float(d_cos(double(ang)));
#else
      /* f32 (GPUs run f64 at a fraction of the f32 rate): u1 is in
       * [2^-24, 1], never 0, so log is finite; a driver's log may give a
       * tiny positive value near 1, hence the clamp before sqrt */
      precise float lg = log(u1);
      precise float cs = cos(6.2831853071795865 * u2);
#endif
#if !defined(AG_PORTABLE)
      precise float m2 = -2.0 * lg;
      precise float rad = sqrt(m2 > 0.0 ? m2 : 0.0);
#endif
      precise float nv = rad * cs;
      precise float sv = nv * s1;
      v = sv + s0;
    } else {
      precise float u = float(r[k] >> 8) * 5.9604644775390625e-8;
#if defined(AG_PORTABLE)
      /* f1 is hi - lo, computed in double on the host */
      precise float t = u * s1;
#else
      precise float d = s1 - s0;
      precise float t = u * d;
#endif
      v = t + s0;
    }
    stf(pc.a.p[0], w * per + k, pc.a.k[0], v);
  }
}
#endif

#if defined(K_DROPOUT) || defined(K_DROPOUT64)
#if defined(K_DROPOUT64)
#extension GL_ARB_gpu_shader_int64 : require
#endif
/* p0 out (k0), p1 x (k1), p2 mask or 0 (k2); f0 p, f1 f2 1/(1-p) as
 * hi + lo, n[46] the same as the bits of a double (K_DROPOUT64, for
 * devices with shaderFloat64); n[44] seed, n[45] offset. */
void main() {
  int64_t w = gid(), n = NUMEL;
  if (w * 4l >= n) return;
  uvec4 r = philox(uint64_t(pc.a.n[45]) + uint64_t(w), uint64_t(pc.a.n[44]));
  float p = pc.a.f[0], hi = pc.a.f[1], lo = pc.a.f[2];
  for (int k = 0; k < 4 && w * 4l + k < n; k++) {
    int64_t i = w * 4l + k;
    precise float u = float(r[k] >> 8) * 5.9604644775390625e-8;
    bool keep = u >= p;
    float xv = ldf(pc.a.p[1], i, pc.a.k[1]);
    /* x * (hi + lo) with one rounding: the CPU's f64 product, rounded. A
     * dropped x gives x * 0 as on the CPU, written on the bits (-0 for a
     * negative x, NaN for NaN and inf): lavapipe turned 0.0 * x inside the
     * select into +0 */
    float dropped = ag_isfinite(xv) ? uintBitsToFloat(floatBitsToUint(xv) & 0x80000000u)
                                    : uintBitsToFloat(0x7fc00000u);
#if defined(AG_PORTABLE)
    /* y = x * m, m = keep ? scale_f : 0 (f1: (float)(1 / (1 - p)) from
     * the host's double); x * 0 written on the bits as above */
    precise float xs = xv * hi;
    precise float v = keep ? xs : dropped;
#elif defined(K_DROPOUT64)
    precise double pd = double(xv) * int64BitsToDouble(pc.a.n[46]);
    precise float v = keep ? float(pd) : dropped;
#else
    precise float xl = xv * lo;
    precise float v = keep ? fma(xv, hi, xl) : dropped;
#endif
    stf(pc.a.p[0], i, pc.a.k[0], v);
    if (pc.a.p[2] != 0ul) stf(pc.a.p[2], i, pc.a.k[2], keep ? hi : 0.0);
  }
}
#endif
