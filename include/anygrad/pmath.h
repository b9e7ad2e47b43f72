/* Portable f32 math: one text that compiles as C11, C++17/CUDA/HIP (and
 * gpuemu's host C++), OpenCL C 1.2 and GLSL 450, so every backend computes
 * elementwise math with the same sequence of correctly rounded f32 + - *
 * and gets the same bits (docs/numerics.md, "Math functions": algorithms,
 * domains, measured accuracy).
 *
 * Rules kept by every function below: floats only through + - * (no fma,
 * contraction off in every build: -ffp-contract=off, nvcc -fmad=false,
 * FP_CONTRACT OFF, GLSL precise), every float intermediate in an AGP_F
 * local, integers only as int, constants exactly representable floats,
 * division and square root correctly rounded (native where the includer
 * says it is, AGP_NATIVE_DIVSQRT; otherwise, and always in GLSL, built
 * from a float estimate and exact int arithmetic),
 * subnormals kept (IEEE), no arrays, pointers, recursion or overloading.
 *
 * Language: OpenCL C when __OPENCL_VERSION__ is defined, GLSL when AG_GLSL
 * is, CUDA/HIP device code under __CUDACC__/__HIPCC__, gpuemu's host C++
 * under AG_GPU_HOST, otherwise C/C++ on the host. */
#ifndef ANYGRAD_PMATH_H
#define ANYGRAD_PMATH_H

#if defined(AG_GLSL)
#define AGP_FN
#define AGP_FT float
#define AGP_F precise float
#define AGP_I int
#define AGP_K(c) (c)
#define AGP_AS_I(f) floatBitsToInt(f)
#define AGP_AS_F(i) intBitsToFloat(i)
#define AGP_ITOF(i) float(i)
#define AGP_FTOI(f) int(f)
#define AGP_FLOOR_(x) floor(x)
#define AGP_CEIL_(x) ceil(x)
#define AGP_TRUNC_(x) trunc(x)
#define AGP_RINT_(x) roundEven(x)
#define AGP_FABS_(x) abs(x)
#ifndef AGP_FORCE_BUILT_DIVSQRT
#define AGP_FORCE_BUILT_DIVSQRT 1
#endif

#elif defined(__OPENCL_VERSION__)
#pragma OPENCL FP_CONTRACT OFF
#define AGP_FN static inline
#define AGP_FT float
#define AGP_F float
#define AGP_I int
#define AGP_K(c) (c##f)
#define AGP_AS_I(f) as_int(f)
#define AGP_AS_F(i) as_float(i)
#define AGP_ITOF(i) ((float)(i))
#define AGP_FTOI(f) ((int)(f))
#define AGP_FLOOR_(x) floor(x)
#define AGP_CEIL_(x) ceil(x)
#define AGP_TRUNC_(x) trunc(x)
#define AGP_RINT_(x) rint(x)
#define AGP_FABS_(x) fabs(x)
#define AGP_NSQRT_(x) sqrt(x)

#elif (defined(__CUDACC__) || defined(__HIPCC__)) && !defined(AG_GPU_HOST)
#if defined(__HIPCC__)
#include <hip/hip_runtime.h> /* __float_as_int (nvcc includes its runtime itself) */
#endif
#define AGP_FN static __device__ inline
#define AGP_FT float
#define AGP_F float
#define AGP_I int
#define AGP_K(c) (c##f)
#define AGP_AS_I(f) __float_as_int(f)
#define AGP_AS_F(i) __int_as_float(i)
#define AGP_ITOF(i) ((float)(i))
#define AGP_FTOI(f) ((int)(f))
#define AGP_FLOOR_(x) floorf(x)
#define AGP_CEIL_(x) ceilf(x)
#define AGP_TRUNC_(x) truncf(x)
#define AGP_RINT_(x) rintf(x)
#define AGP_FABS_(x) fabsf(x)
#define AGP_NSQRT_(x) sqrtf(x)

#else /* C or C++ on the host, gpuemu's kernels included */
#include <math.h>
#include <string.h>
#if defined(__clang__) && !defined(__cplusplus)
#pragma STDC FP_CONTRACT OFF
#endif
#define AGP_FN static inline
#define AGP_FT float
#define AGP_F float
#define AGP_I int
#define AGP_K(c) (c##f)
static inline int agp_bits_of(float f) {
  int i;
  memcpy(&i, &f, sizeof i);
  return i;
}
static inline float agp_float_of(int i) {
  float f;
  memcpy(&f, &i, sizeof f);
  return f;
}
#define AGP_AS_I(f) agp_bits_of(f)
#define AGP_AS_F(i) agp_float_of(i)
#define AGP_ITOF(i) ((float)(i))
#define AGP_FTOI(f) ((int)(f))
#define AGP_FLOOR_(x) floorf(x)
#define AGP_CEIL_(x) ceilf(x)
#define AGP_TRUNC_(x) truncf(x)
#define AGP_RINT_(x) rintf(x)
#define AGP_FABS_(x) fabsf(x)
#define AGP_NSQRT_(x) sqrtf(x)
#endif

/* The sign bit as an int, and the bits of +inf. */
#define AGP_SIGN_BIT (-2147483647 - 1)
#define AGP_INF_BITS 0x7f800000
#define AGP_ABS_BITS 0x7fffffff
#define AGP_QNAN_BITS 0x7fc00000

/* ---- exact operations ---- */
AGP_FN AGP_FT agp_floor(AGP_FT x) { AGP_F r = AGP_FLOOR_(x); return r; }
AGP_FN AGP_FT agp_ceil(AGP_FT x) { AGP_F r = AGP_CEIL_(x); return r; }
AGP_FN AGP_FT agp_trunc(AGP_FT x) { AGP_F r = AGP_TRUNC_(x); return r; }
/* round half to even */
AGP_FN AGP_FT agp_rint(AGP_FT x) { AGP_F r = AGP_RINT_(x); return r; }
AGP_FN AGP_FT agp_abs(AGP_FT x) { AGP_F r = AGP_AS_F(AGP_AS_I(x) & AGP_ABS_BITS); return r; }
/* |x| with the sign bit of s */
AGP_FN AGP_FT agp_copysign(AGP_FT x, AGP_FT s) {
  AGP_F r = AGP_AS_F((AGP_AS_I(x) & AGP_ABS_BITS) | (AGP_AS_I(s) & AGP_SIGN_BIT));
  return r;
}
/* 2^e for -126 <= e <= 127 */
AGP_FN AGP_FT agp_i_pow2(AGP_I e) { AGP_F r = AGP_AS_F((e + 127) * 8388608); return r; }
/* rint for |x| < 2^22 from + - alone (ties to even): vectorises on every
 * SIMD level, the same bits as agp_rint there */
AGP_FN AGP_FT agp_i_rint(AGP_FT x) {
  AGP_F t = x + AGP_K(12582912.0);
  AGP_F r = t - AGP_K(12582912.0);
  return r;
}
AGP_FN AGP_I agp_i_isnan(AGP_FT x) { return (AGP_AS_I(x) & AGP_ABS_BITS) > AGP_INF_BITS ? 1 : 0; }

/* 1/d to about 2^-22 relative for d normal and positive: a bit-trick
 * seed and three Newton steps g = g * (2 - d*g), each product rounded (the
 * estimate the built division and pow's log2 refine exactly). */
AGP_FN AGP_FT agp_i_recip(AGP_FT d) {
  AGP_F g0 = AGP_AS_F(0x7ef311c3 - AGP_AS_I(d));
  AGP_F dg0 = d * g0;
  AGP_F c0 = AGP_K(2.0) - dg0;
  AGP_F g1 = g0 * c0;
  AGP_F dg1 = d * g1;
  AGP_F c1 = AGP_K(2.0) - dg1;
  AGP_F g2 = g1 * c1;
  AGP_F dg2 = d * g2;
  AGP_F c2 = AGP_K(2.0) - dg2;
  AGP_F g = g2 * c2;
  return g;
}

/* Error-free transformations. The rounding error of s = a + b (any order
 * of magnitude, Knuth's TwoSum), of s = a + b when |a| >= |b| or a == 0
 * (Dekker's Fast2Sum), and of p = a * b (Dekker's product with Veltkamp's
 * splits; |a|, |b| < 2^115 and no underflow). */
AGP_FN AGP_FT agp_i_sum_err(AGP_FT a, AGP_FT b, AGP_FT s) {
  AGP_F bb = s - a;
  AGP_F aa = s - bb;
  AGP_F da = a - aa;
  AGP_F db = b - bb;
  AGP_F e = da + db;
  return e;
}
AGP_FN AGP_FT agp_i_fast_err(AGP_FT a, AGP_FT b, AGP_FT s) {
  AGP_F d = s - a;
  AGP_F e = b - d;
  return e;
}
AGP_FN AGP_FT agp_i_prod_err(AGP_FT a, AGP_FT b, AGP_FT p) {
  AGP_F ca = AGP_K(4097.0) * a;
  AGP_F ta = ca - a;
  AGP_F ah = ca - ta;
  AGP_F al = a - ah;
  AGP_F cb = AGP_K(4097.0) * b;
  AGP_F tb = cb - b;
  AGP_F bh = cb - tb;
  AGP_F bl = b - bh;
  AGP_F e1 = ah * bh - p;
  AGP_F e2 = e1 + ah * bl;
  AGP_F e3 = e2 + al * bh;
  AGP_F e = e3 + al * bl;
  return e;
}

/* ---- division and square root, correctly rounded ----
 * Built versions: the exact integer quotient and square root of the
 * significands, from a float estimate (Newton) corrected by the exact
 * integer remainder, then round to nearest even from the
 * guard bit and the remainder; subnormal quotients are rounded once, at
 * their own precision. Bit-identical to
 * IEEE division and square root (tests/pmath_test.c checks it). */
AGP_FN AGP_FT agp_div_built(AGP_FT a, AGP_FT b) {
  AGP_I ia = AGP_AS_I(a);
  AGP_I ib = AGP_AS_I(b);
  AGP_I sgn = (ia ^ ib) < 0 ? AGP_SIGN_BIT : 0;
  AGP_I xa = ia & AGP_ABS_BITS;
  AGP_I xb = ib & AGP_ABS_BITS;
  AGP_I isn = (xa > AGP_INF_BITS || xb > AGP_INF_BITS || (xa == 0 && xb == 0) ||
               (xa == AGP_INF_BITS && xb == AGP_INF_BITS)) ? 1 : 0;
  AGP_I isi = (xa == AGP_INF_BITS || xb == 0) ? 1 : 0;
  AGP_I zero = (xa == 0 || xb == AGP_INF_BITS) ? 1 : 0;
  /* subnormal operands: scale by 2^24 first (exact) */
  AGP_F fa = AGP_AS_F(xa);
  AGP_F fb = AGP_AS_F(xb);
  AGP_F fa2 = fa * AGP_K(16777216.0);
  AGP_F fb2 = fb * AGP_K(16777216.0);
  AGP_I sa = xa < 8388608 ? 1 : 0;
  AGP_I sb = xb < 8388608 ? 1 : 0;
  AGP_I na = sa != 0 ? AGP_AS_I(fa2) : xa;
  AGP_I nb = sb != 0 ? AGP_AS_I(fb2) : xb;
  AGP_I ea = (na >> 23) - 24 * sa;
  AGP_I eb = (nb >> 23) - 24 * sb;
  AGP_I ma = (na & 8388607) | 8388608;
  AGP_I mb = (nb & 8388607) | 8388608;
  AGP_I e = ea - eb + 127;
  if (ma < mb) {
    ma = ma * 2;
    e = e - 1;
  }
  /* q = floor(ma 2^24 / mb), 25 bits: a float estimate (Newton
   * reciprocal, one step with the exact residual) within 2 of it, then the
   * exact integer remainder r = ma 2^24 - q mb (in 12- and 13-bit limbs)
   * moves it to the floor */
  AGP_F fla = AGP_ITOF(ma);
  AGP_F flb = AGP_ITOF(mb);
  AGP_F g = agp_i_recip(flb);
  AGP_F q0 = fla * g;
  AGP_F qp = q0 * flb;
  AGP_F qpe = agp_i_prod_err(q0, flb, qp);
  AGP_F rs0 = fla - qp;
  AGP_F rs1 = rs0 - qpe;
  AGP_F qc = rs1 * g;
  AGP_F q1 = q0 + qc;
  AGP_F est = q1 * AGP_K(16777216.0);
  AGP_I q = AGP_FTOI(est);
  AGP_I qa = q >> 13;
  AGP_I qb = q & 8191;
  AGP_I bc = mb >> 12;
  AGP_I bd = mb & 4095;
  AGP_I hh = (ma >> 1) - qa * bc;
  AGP_I gg = hh * 8192 + (ma & 1) * 4096 - qa * bd * 2 - qb * bc;
  gg = gg > 65536 ? 65536 : (gg < -65536 ? -65536 : gg);
  AGP_I r = gg * 4096 - qb * bd;
  for (AGP_I i = 0; i < 2; i++) {
    AGP_I dn = r < 0 ? 1 : 0;
    q = q - dn;
    r = dn != 0 ? r + mb : r;
    AGP_I upc = r >= mb ? 1 : 0;
    q = q + upc;
    r = upc != 0 ? r - mb : r;
  }
  AGP_I sticky = r != 0 ? 1 : 0;
  AGP_I bits;
  if (e >= 1) {
    AGP_I m = q >> 1;
    AGP_I up = ((q & 1) != 0 && (sticky != 0 || (m & 1) != 0)) ? 1 : 0;
    bits = e >= 255 ? AGP_INF_BITS : (e - 1) * 8388608 + m + up;
    bits = bits > AGP_INF_BITS ? AGP_INF_BITS : bits;
  } else {
    /* subnormal: q 2^(e-2) units of 2^-149 */
    AGP_I sh = 2 - e;
    sh = sh > 26 ? 26 : sh;
    AGP_I m = q >> sh;
    AGP_I hlf = 1 << (sh - 1);
    AGP_I rem = q & ((1 << sh) - 1);
    AGP_I up = (rem > hlf || (rem == hlf && (sticky != 0 || (m & 1) != 0))) ? 1 : 0;
    bits = m + up;
  }
  bits = isi != 0 ? AGP_INF_BITS : bits;
  bits = zero != 0 ? 0 : bits;
  bits = isn != 0 ? AGP_QNAN_BITS : (bits | sgn);
  AGP_F res = AGP_AS_F(bits);
  return res;
}

AGP_FN AGP_FT agp_sqrt_built(AGP_FT x) {
  AGP_I ix = AGP_AS_I(x);
  AGP_I xa = ix & AGP_ABS_BITS;
  AGP_F fx = AGP_AS_F(xa);
  AGP_F fx2 = fx * AGP_K(16777216.0);
  AGP_I s = xa < 8388608 ? 1 : 0;
  AGP_I n = s != 0 ? AGP_AS_I(fx2) : xa;
  AGP_I ex = (n >> 23) - 127 - 24 * s - 23; /* x = m 2^ex, m a 24-bit integer */
  AGP_I m = (n & 8388607) | 8388608;
  /* m 2^ex with m in [2^24, 2^26) and ex even */
  AGP_I odd = ex & 1;
  m = odd != 0 ? m * 2 : m * 4;
  ex = odd != 0 ? ex - 1 : ex - 2;
  /* root = floor(sqrt(m 2^24)), 25 bits: a float estimate (Newton for
   * 1/sqrt from a bit-trick seed, one step with the exact residual)
   * within 2 of it, then the exact integer remainder m 2^24 - root^2 (in
   * 13-bit limbs) moves it to the floor */
  AGP_F mf = AGP_ITOF(m);
  AGP_F y0 = AGP_AS_F(0x5f3759df - AGP_AS_I(mf) / 2);
  AGP_F hm = AGP_K(0.5) * mf;
  AGP_F n0 = hm * y0;
  AGP_F n1 = n0 * y0;
  AGP_F n2 = AGP_K(1.5) - n1;
  AGP_F y1 = y0 * n2;
  AGP_F n3 = hm * y1;
  AGP_F n4 = n3 * y1;
  AGP_F n5 = AGP_K(1.5) - n4;
  AGP_F y2 = y1 * n5;
  AGP_F n6 = hm * y2;
  AGP_F n7 = n6 * y2;
  AGP_F n8 = AGP_K(1.5) - n7;
  AGP_F y = y2 * n8;
  AGP_F s0 = mf * y;
  AGP_F sp = s0 * s0;
  AGP_F spe = agp_i_prod_err(s0, s0, sp);
  AGP_F res0 = mf - sp;
  AGP_F res1 = res0 - spe;
  AGP_F hy = AGP_K(0.5) * y;
  AGP_F corr = hy * res1;
  AGP_F s1 = s0 + corr;
  AGP_F est = s1 * AGP_K(4096.0);
  AGP_I root = AGP_FTOI(est);
  AGP_I la = root >> 13;
  AGP_I lb = root & 8191;
  AGP_I hi = (m >> 2) - la * la;
  AGP_I g = hi * 8192 + (m & 3) * 2048 - 2 * la * lb;
  g = g > 65536 ? 65536 : (g < -65536 ? -65536 : g);
  AGP_I rem = g * 8192 - lb * lb;
  for (AGP_I i = 0; i < 2; i++) {
    AGP_I dn = rem < 0 ? 1 : 0;
    root = root - dn;
    rem = dn != 0 ? rem + 2 * root + 1 : rem;
    AGP_I upc = rem >= 2 * root + 1 ? 1 : 0;
    rem = upc != 0 ? rem - 2 * root - 1 : rem;
    root = root + upc;
  }
  AGP_I mm = root >> 1;
  AGP_I up = ((root & 1) != 0 && (rem != 0 || (mm & 1) != 0)) ? 1 : 0;
  /* sqrt(x) = root 2^(ex/2 - 12), root in [2^24, 2^25) */
  AGP_I e = ex / 2 + 12 + 127;
  AGP_I bits = (e - 1) * 8388608 + mm + up;
  bits = xa == 0 ? ix : bits;
  bits = xa == AGP_INF_BITS ? ix : bits;
  bits = (ix < 0 && xa != 0) || xa > AGP_INF_BITS ? AGP_QNAN_BITS : bits;
  AGP_F res = AGP_AS_F(bits);
  return res;
}

#if defined(AGP_NATIVE_DIVSQRT) && !defined(AGP_FORCE_BUILT_DIVSQRT)
AGP_FN AGP_FT agp_div(AGP_FT a, AGP_FT b) { AGP_F r = a / b; return r; }
AGP_FN AGP_FT agp_sqrt(AGP_FT x) { AGP_F r = AGP_NSQRT_(x); return r; }
#else
AGP_FN AGP_FT agp_div(AGP_FT a, AGP_FT b) { AGP_F r = agp_div_built(a, b); return r; }
AGP_FN AGP_FT agp_sqrt(AGP_FT x) { AGP_F r = agp_sqrt_built(x); return r; }
#endif
/* 1/sqrt(x): two correctly rounded operations, so not always the nearest
 * float to 1/sqrt(x) (within 1 ulp) */
AGP_FN AGP_FT agp_rsqrt(AGP_FT x) {
  AGP_F s = agp_sqrt(x);
  AGP_F r = agp_div(AGP_K(1.0), s);
  return r;
}

/* ---- exponentials ----
 * agp_i_exp_fin: e^(rh + rl) 2^k (mode 0) or e^(rh + rl) 2^k - 1 (mode 1)
 * for |rh + rl| <= 0.36: expm1(r) = r + r^2 P(r) (degree 5) kept as th + tl,
 * then rebuilt with the power of two split in two factors (mode 0: one
 * rounding into the subnormal range) or added to 2^k - 1 (mode 1). */
AGP_FN AGP_FT agp_i_exp_fin(AGP_FT rh, AGP_FT rl, AGP_I k, AGP_I mode) {
  AGP_F p = AGP_K(0.00019892992);
  p = p * rh + AGP_K(0.00139354519);
  p = p * rh + AGP_K(0.00833330862);
  p = p * rh + AGP_K(0.0416664481);
  p = p * rh + AGP_K(0.166666672);
  p = p * rh + AGP_K(0.5);
  AGP_F z = rh * rh;
  AGP_F s = z * p;
  AGP_F rr = rl * rh;
  AGP_F rc = rl + rr;
  AGP_F s2 = s + rc;
  AGP_F th = rh + s2;
  AGP_F tl = agp_i_fast_err(rh, s2, th);
  AGP_F res;
  if (mode != 1) {
    AGP_F mh = AGP_K(1.0) + th;
    AGP_F ml = agp_i_fast_err(AGP_K(1.0), th, mh);
    AGP_F mt = ml + tl;
    AGP_F m = mh + mt;
    /* mode 2: the rounding error of m, scaled alike (a low part) */
    AGP_F ms = mode == 2 ? agp_i_fast_err(mh, mt, m) : m;
    AGP_I k1 = k / 2;
    AGP_F m1 = ms * agp_i_pow2(k1);
    res = m1 * agp_i_pow2(k - k1);
  } else {
    AGP_F sc = agp_i_pow2(k - 1);
    AGP_I mid = (k >= -1 && k <= 24) ? 1 : 0;
    AGP_F c1 = mid != 0 ? sc - AGP_K(0.5) : sc;
    AGP_F c2 = mid != 0 ? AGP_K(0.0) : AGP_K(-0.5);
    AGP_F u1 = sc * th;
    AGP_F u2 = u1 + c1;
    AGP_F u3 = sc * tl;
    AGP_F u4 = u2 + u3;
    AGP_F u5 = u4 + c2;
    res = u5 * AGP_K(2.0);
  }
  return res;
}

/* x = k ln2 + rh + rl for |x| <= 104: k ln2hi exact (16-bit ln2hi), the
 * rounding of x - k ln2hi - k ln2lo kept in rl. Returns e^x 2^adj. */
AGP_FN AGP_FT agp_i_expk(AGP_FT x, AGP_I adj, AGP_I mode) {
  AGP_F t = x * AGP_K(1.44269502);
  AGP_F kf = agp_i_rint(t);
  AGP_F a = kf * AGP_K(0.693145751953125);
  AGP_F hi = x - a;
  AGP_F b = kf * AGP_K(1.42860677e-06);
  AGP_F nb = -b;
  AGP_F rh = hi + nb;
  AGP_F rl = agp_i_sum_err(hi, nb, rh);
  AGP_F res = agp_i_exp_fin(rh, rl, AGP_FTOI(kf) + adj, mode);
  return res;
}

AGP_FN AGP_FT agp_exp(AGP_FT x) {
  AGP_F xc = x > AGP_K(89.0) ? AGP_K(89.0) : x;
  xc = xc < AGP_K(-104.0) ? AGP_K(-104.0) : xc;
  xc = agp_i_isnan(x) != 0 ? AGP_K(0.0) : xc;
  AGP_F r = agp_i_expk(xc, 0, 0);
  r = agp_i_isnan(x) != 0 ? x : r;
  return r;
}

AGP_FN AGP_FT agp_expm1(AGP_FT x) {
  AGP_F xc = x > AGP_K(89.0) ? AGP_K(89.0) : x;
  xc = xc < AGP_K(-17.5) ? AGP_K(-17.5) : xc;
  xc = agp_i_isnan(x) != 0 ? AGP_K(0.0) : xc;
  AGP_F r = agp_i_expk(xc, 0, 1);
  /* tiny x: expm1(x) rounds to x (keeps -0 and subnormals) */
  r = (AGP_AS_I(x) & AGP_ABS_BITS) < 0x32800000 ? x : r;
  r = agp_i_isnan(x) != 0 ? x : r;
  return r;
}

/* 2^x = 2^k e^((x - k) ln2), (x - k) ln2 as an exact product plus the
 * product with ln2's low part */
AGP_FN AGP_FT agp_exp2(AGP_FT x) {
  AGP_F xc = x > AGP_K(129.0) ? AGP_K(129.0) : x;
  xc = xc < AGP_K(-151.0) ? AGP_K(-151.0) : xc;
  xc = agp_i_isnan(x) != 0 ? AGP_K(0.0) : xc;
  AGP_F kf = agp_i_rint(xc);
  AGP_F d = xc - kf;
  AGP_F rh = d * AGP_K(0.693147182);
  AGP_F e = agp_i_prod_err(d, AGP_K(0.693147182), rh);
  AGP_F dl = d * AGP_K(-1.90465421e-09);
  AGP_F rl = e + dl;
  AGP_F r = agp_i_exp_fin(rh, rl, AGP_FTOI(kf), 0);
  r = agp_i_isnan(x) != 0 ? x : r;
  return r;
}

/* ---- logarithms ----
 * log(u + c) for u > 0 normal, |c| <= ulp(u)/2: u = 2^e m, m in
 * [sqrt(1/2), sqrt(2)), f = m - 1 exact; log1p(f) = f - f^2/2 + f^3 P(f)
 * (P degree 8), c 2^-e / (1 + f) added, e ln2 in two parts with the
 * rounding of e ln2hi + f kept. */
AGP_FN AGP_FT agp_i_logc(AGP_FT u, AGP_FT c, AGP_I eadj) {
  AGP_I iu = AGP_AS_I(u);
  AGP_I e = ((iu >> 23) & 255) - 127;
  AGP_I mi = (iu & 8388607) | 0x3f800000;
  AGP_I big = mi > 0x3fb504f3 ? 1 : 0;
  mi = big != 0 ? mi - 8388608 : mi;
  e = e + big;
  AGP_F m = AGP_AS_F(mi);
  AGP_F f = m - AGP_K(1.0);
  AGP_I ce = e > 126 ? 126 : e;
  AGP_F cs = c * agp_i_pow2(-ce);
  AGP_F p = AGP_K(0.0697161183);
  p = p * f + AGP_K(-0.114797339);
  p = p * f + AGP_K(0.116854198);
  p = p * f + AGP_K(-0.124256872);
  p = p * f + AGP_K(0.142490581);
  p = p * f + AGP_K(-0.166678026);
  p = p * f + AGP_K(0.200007156);
  p = p * f + AGP_K(-0.24999997);
  p = p * f + AGP_K(0.333333313);
  AGP_F z = f * f;
  AGP_F h = AGP_K(0.5) * z;
  AGP_F f3 = f * z;
  AGP_F q = f3 * p;
  AGP_F y = q - h;
  AGP_F w = AGP_K(1.0) - f;
  AGP_F w2 = w + z;
  AGP_F cc = cs * w2;
  AGP_F ef = AGP_ITOF(e + eadj);
  AGP_F a = ef * AGP_K(0.693145751953125);
  AGP_F hi = a + f;
  AGP_F lo = agp_i_fast_err(a, f, hi);
  AGP_F el = ef * AGP_K(1.42860677e-06);
  AGP_F t1 = y + cc;
  AGP_F t2 = t1 + el;
  AGP_F t3 = lo + t2;
  AGP_F r = hi + t3;
  return r;
}

AGP_FN AGP_FT agp_log(AGP_FT x) {
  AGP_I ix = AGP_AS_I(x);
  AGP_F xs = x * AGP_K(16777216.0);
  AGP_I sub = ix < 8388608 ? 1 : 0;
  AGP_F u = sub != 0 ? xs : x;
  AGP_F r = agp_i_logc(u, AGP_K(0.0), -24 * sub);
  r = ix == AGP_INF_BITS ? x : r;
  r = (ix & AGP_ABS_BITS) == 0 ? AGP_AS_F(AGP_INF_BITS | AGP_SIGN_BIT) : r;
  r = (ix < 0 && (ix & AGP_ABS_BITS) != 0) ? AGP_AS_F(AGP_QNAN_BITS) : r;
  r = agp_i_isnan(x) != 0 ? x : r;
  return r;
}

/* log1p(x) = log(u + c) with u + c = 1 + x exactly */
AGP_FN AGP_FT agp_log1p(AGP_FT x) {
  AGP_I bad = (agp_i_isnan(x) != 0 || x < AGP_K(-1.0) || x == AGP_AS_F(AGP_INF_BITS)) ? 1 : 0;
  AGP_F xc = bad != 0 ? AGP_K(0.0) : x;
  AGP_F u = AGP_K(1.0) + xc;
  AGP_F c = agp_i_sum_err(AGP_K(1.0), xc, u);
  AGP_F r = agp_i_logc(u, c, 0);
  r = x == AGP_AS_F(AGP_INF_BITS) ? x : r;
  r = x == AGP_K(-1.0) ? AGP_AS_F(AGP_INF_BITS | AGP_SIGN_BIT) : r;
  r = x < AGP_K(-1.0) ? AGP_AS_F(AGP_QNAN_BITS) : r;
  r = (AGP_AS_I(x) & AGP_ABS_BITS) < 0x33000000 ? x : r;
  r = agp_i_isnan(x) != 0 ? x : r;
  return r;
}

/* ---- hyperbolic functions ---- */
/* tanh: x + x^3 T(x^2) (degree 5) below 0.625, else 1 - 2/(expm1(2|x|) + 2) */
AGP_FN AGP_FT agp_tanh(AGP_FT x) {
  AGP_F a = agp_abs(x);
  AGP_F z = a * a;
  AGP_F p = AGP_K(0.00229274482);
  p = p * z + AGP_K(-0.00834394526);
  p = p * z + AGP_K(0.0217689183);
  p = p * z + AGP_K(-0.0539592579);
  p = p * z + AGP_K(0.133333042);
  p = p * z + AGP_K(-0.333333343);
  AGP_F a3 = a * z;
  AGP_F t = a3 * p;
  AGP_F small = a + t;
  AGP_F ac = a > AGP_K(10.0) ? AGP_K(10.0) : a;
  ac = agp_i_isnan(x) != 0 ? AGP_K(1.0) : ac;
  AGP_F a2 = ac * AGP_K(2.0);
  AGP_F em = agp_expm1(a2);
  AGP_F d = em + AGP_K(2.0);
  AGP_F q = agp_div(AGP_K(2.0), d);
  AGP_F big = AGP_K(1.0) - q;
  AGP_F u = a < AGP_K(0.625) ? small : big;
  AGP_F r = agp_copysign(u, x);
  r = agp_i_isnan(x) != 0 ? x : r;
  return r;
}

/* 1/(1 + e^-x) for x >= 0, e^x/(1 + e^x) below: e = e^-|x| (never
 * overflows) as a pair eh + el, 1 + e as a pair dh + dl, the quotient q of
 * the high parts corrected by (el - q dl)/(dh + dl), where 1/dh is q
 * (x >= 0) or 1 - q (x < 0) */
AGP_FN AGP_FT agp_sigmoid(AGP_FT x) {
  AGP_F na = -agp_abs(x);
  AGP_F nc = na < AGP_K(-104.0) ? AGP_K(-104.0) : na;
  nc = agp_i_isnan(x) != 0 ? AGP_K(0.0) : nc;
  AGP_F eh = agp_i_expk(nc, 0, 0);
  AGP_F el = agp_i_expk(nc, 0, 2);
  AGP_F dh = AGP_K(1.0) + eh;
  AGP_F d1 = agp_i_fast_err(AGP_K(1.0), eh, dh);
  AGP_F dl = d1 + el;
  AGP_I pos = x >= AGP_K(0.0) ? 1 : 0;
  AGP_F n = pos != 0 ? AGP_K(1.0) : eh;
  AGP_F nl = pos != 0 ? AGP_K(0.0) : el;
  AGP_F q = agp_div(n, dh);
  AGP_F inv0 = AGP_K(1.0) - q;
  AGP_F inv = pos != 0 ? q : inv0;
  AGP_F qd = q * dl;
  AGP_F c0 = nl - qd;
  AGP_F c = inv * c0;
  AGP_F r = q + c;
  r = agp_i_isnan(x) != 0 ? x : r;
  return r;
}

/* sinh: x + x^3 H(x^2) (degree 4) below 1, else e^|x|/2 - e^-|x|/2 with
 * the halving in the exponent (finite up to 89.4), each as a pair; cosh
 * the sum of the same pairs */
AGP_FN AGP_FT agp_sinh(AGP_FT x) {
  AGP_F a = agp_abs(x);
  AGP_F z = a * a;
  AGP_F p = AGP_K(2.5456707e-08);
  p = p * z + AGP_K(2.75537695e-06);
  p = p * z + AGP_K(0.000198412832);
  p = p * z + AGP_K(0.00833333377);
  p = p * z + AGP_K(0.166666672);
  AGP_F a3 = a * z;
  AGP_F t = a3 * p;
  AGP_F small = a + t;
  AGP_F ac = a > AGP_K(90.0) ? AGP_K(90.0) : a;
  ac = agp_i_isnan(x) != 0 ? AGP_K(1.0) : ac;
  AGP_F nac = -ac;
  AGP_F ep = agp_i_expk(ac, -1, 0);
  AGP_F en = agp_i_expk(nac, -1, 0);
  AGP_F epl = agp_i_expk(ac, -1, 2);
  AGP_F enl = agp_i_expk(nac, -1, 2);
  AGP_F nen = -en;
  AGP_F dh = ep + nen;
  AGP_F de = agp_i_sum_err(ep, nen, dh);
  AGP_F dl0 = epl - enl;
  AGP_F dl = de + dl0;
  AGP_F d = dh + dl;
  d = dh == AGP_AS_F(AGP_INF_BITS) ? dh : d;
  AGP_F u = a < AGP_K(1.0) ? small : d;
  AGP_F r = agp_copysign(u, x);
  r = agp_i_isnan(x) != 0 ? x : r;
  return r;
}

AGP_FN AGP_FT agp_cosh(AGP_FT x) {
  AGP_F a = agp_abs(x);
  AGP_F ac = a > AGP_K(90.0) ? AGP_K(90.0) : a;
  ac = agp_i_isnan(x) != 0 ? AGP_K(0.0) : ac;
  AGP_F nac = -ac;
  AGP_F ep = agp_i_expk(ac, -1, 0);
  AGP_F en = agp_i_expk(nac, -1, 0);
  AGP_F epl = agp_i_expk(ac, -1, 2);
  AGP_F enl = agp_i_expk(nac, -1, 2);
  AGP_F rh = ep + en;
  AGP_F re = agp_i_fast_err(ep, en, rh);
  AGP_F rl0 = epl + enl;
  AGP_F rl = re + rl0;
  AGP_F r = rh + rl;
  r = rh == AGP_AS_F(AGP_INF_BITS) ? rh : r;
  r = agp_i_isnan(x) != 0 ? x : r;
  return r;
}

/* ---- erf ----
 * |x| < 1: x + x E(x^2) (degree 7); else 1 - e^L with L = M(|x| - 2.5) -
 * x^2 (M degree 10 fits log(erfc(x)) + x^2 on [1, 4]), from expm1 */
AGP_FN AGP_FT agp_erf(AGP_FT x) {
  AGP_F a = agp_abs(x);
  AGP_F z = a * a;
  AGP_F p = AGP_K(-9.66704465e-06);
  p = p * z + AGP_K(0.000112659589);
  p = p * z + AGP_K(-0.000848408032);
  p = p * z + AGP_K(0.00522103161);
  p = p * z + AGP_K(-0.0268654302);
  p = p * z + AGP_K(0.112837821);
  p = p * z + AGP_K(-0.376126379);
  p = p * z + AGP_K(0.128379166);
  AGP_F ts = a * p;
  AGP_F small = a + ts;
  AGP_F ac = a > AGP_K(4.0) ? AGP_K(4.0) : a;
  ac = a < AGP_K(1.0) || agp_i_isnan(x) != 0 ? AGP_K(1.0) : ac;
  AGP_F t = ac - AGP_K(2.5);
  AGP_F q = AGP_K(-3.83471424e-08);
  q = q * t + AGP_K(-6.61463702e-08);
  q = q * t + AGP_K(1.82979272e-06);
  q = q * t + AGP_K(-1.29745258e-05);
  q = q * t + AGP_K(7.69696344e-05);
  q = q * t + AGP_K(-0.000420709635);
  q = q * t + AGP_K(0.0021655017);
  q = q * t + AGP_K(-0.0108581642);
  q = q * t + AGP_K(0.0561062619);
  q = q * t + AGP_K(-0.352680743);
  q = q * t + AGP_K(-1.55681527);
  AGP_F zc = ac * ac;
  AGP_F l = q - zc;
  AGP_F em = agp_expm1(l);
  AGP_F big = -em;
  AGP_F u = a < AGP_K(1.0) ? small : big;
  AGP_F r = agp_copysign(u, x);
  r = agp_i_isnan(x) != 0 ? x : r;
  return r;
}

/* ---- trigonometric functions ----
 * |x| = k pi/2 + r: k = rint(|x| 2/pi) split into kh (multiple of 1024) and
 * kl < 1024, pi/2 in five parts (four of 14 bits), so every product with
 * kh and kl is exact; the running sum is kept exactly (TwoSum) until the
 * remaining terms are below 2^-38. That is exact enough for |x| <= 2^20
 * (k < 2^20). Above 2^20 (behind a branch) Payne-Hanek in int arithmetic:
 * x = M 2^E (M of 24 bits in two 12-bit halves) times the 108 bits of 2/pi
 * that matter for this E (nine 12-bit words from agp_i_2opi), products of
 * 12 x 12 bits summed with carries in 12-bit limbs, the bits above 4 never
 * formed; the 2 bits of the quadrant and 70 bits of the fraction, rounded
 * to the nearest quadrant, then r = f pi/2 as a pair (exact products).
 * Then sin r = r + r^3 S(r^2), cos r = 1 - r^2/2 + r^4 C(r^2) (degree 4
 * each). */
/* 2/pi = sum over q >= 0 of agp_i_2opi(q) 2^(-12 q - 12); 0 for q < 0 */
AGP_FN AGP_I agp_i_2opi(AGP_I q) {
  return q == 0 ? 2607 : q == 1 ? 2435 : q == 2 ? 1764 : q == 3 ? 3652 : q == 4 ? 338 : q == 5 ? 2556 :
         q == 6 ? 629 : q == 7 ? 2001 : q == 8 ? 3923 : q == 9 ? 1245 : q == 10 ? 3085 : q == 11 ? 2914 :
         q == 12 ? 2393 : q == 13 ? 2364 : q == 14 ? 1081 : q == 15 ? 65 : q == 16 ? 4069 : 0;
}
AGP_FN AGP_FT agp_i_sincos(AGP_FT ax, AGP_I off) {
  AGP_F xr = ax < AGP_K(1073741824.0) ? ax : AGP_K(0.0);
  AGP_F t = xr * AGP_K(0.636619772);
  AGP_F kf0 = agp_i_rint(t);
  AGP_F kf = t < AGP_K(4194304.0) ? kf0 : agp_trunc(t);
  AGP_I ki = AGP_FTOI(kf);
  AGP_F kl = AGP_ITOF(ki & 1023);
  AGP_F kh = AGP_ITOF(ki - (ki & 1023));
  AGP_F p1 = kh * AGP_K(1.57080078125);
  AGP_F a0 = xr - p1;
  AGP_F p2 = kl * AGP_K(1.57080078125);
  AGP_F a1 = a0 - p2;
  AGP_F p3 = kh * AGP_K(-4.45451587e-06);
  AGP_F a2 = a1 - p3;
  AGP_F t1 = kl * AGP_K(4.45451587e-06);
  AGP_F s1 = a2 + t1;
  AGP_F e1 = agp_i_sum_err(a2, t1, s1);
  AGP_F t2 = kh * AGP_K(-6.07727202e-11);
  AGP_F s2 = s1 + t2;
  AGP_F e2 = agp_i_sum_err(s1, t2, s2);
  AGP_F t3 = kl * AGP_K(-6.07727202e-11);
  AGP_F s3 = s2 + t3;
  AGP_F e3 = agp_i_sum_err(s2, t3, s3);
  AGP_F t4 = kh * AGP_K(1.71509942e-15);
  AGP_F s4 = s3 + t4;
  AGP_F e4 = agp_i_sum_err(s3, t4, s4);
  AGP_F t5 = kl * AGP_K(1.71509942e-15);
  AGP_F t6 = kf * AGP_K(2.50827884e-20);
  AGP_F l1 = e1 + e2;
  AGP_F l2 = l1 + e3;
  AGP_F l3 = l2 + e4;
  AGP_F l4 = l3 + t5;
  AGP_F l5 = l4 + t6;
  AGP_F rh = s4 + l5;
  AGP_F rl = agp_i_fast_err(s4, l5, rh);
  if (ax > AGP_K(1048576.0)) {
    /* |x| = M 2^E, E in [-3, 104]; 2/pi's word q carries 2^(E - 12 - 12 q),
     * q0 the first with a weight below 4, F = that weight's exponent in
     * [-10, 1]; S = sum over n of (mh c(q0+n+1) + ml c(q0+n)) 2^(-12 n)
     * mod 2^12, then |x| 2/pi = S 2^F mod 4. */
    AGP_I bx = AGP_AS_I(ax);
    AGP_I mm = (bx & 0x7fffff) | 0x800000;
    AGP_I ex = (bx >> 23) - 150;
    AGP_I q0 = (ex + 10) / 12 - 1;
    AGP_I sh = ex - 12 - 12 * q0 + 10;
    AGP_I mh = mm >> 12;
    AGP_I ml = mm & 4095;
    AGP_I c0 = agp_i_2opi(q0);
    AGP_I c1 = agp_i_2opi(q0 + 1);
    AGP_I c2 = agp_i_2opi(q0 + 2);
    AGP_I c3 = agp_i_2opi(q0 + 3);
    AGP_I c4 = agp_i_2opi(q0 + 4);
    AGP_I c5 = agp_i_2opi(q0 + 5);
    AGP_I c6 = agp_i_2opi(q0 + 6);
    AGP_I c7 = agp_i_2opi(q0 + 7);
    AGP_I c8 = agp_i_2opi(q0 + 8);
    AGP_I d = mh * c8 + ml * c7;
    AGP_I g7 = d & 4095;
    d = (d >> 12) + mh * c7 + ml * c6;
    AGP_I g6 = d & 4095;
    d = (d >> 12) + mh * c6 + ml * c5;
    AGP_I g5 = d & 4095;
    d = (d >> 12) + mh * c5 + ml * c4;
    AGP_I g4 = d & 4095;
    d = (d >> 12) + mh * c4 + ml * c3;
    AGP_I g3 = d & 4095;
    d = (d >> 12) + mh * c3 + ml * c2;
    AGP_I g2 = d & 4095;
    d = (d >> 12) + mh * c2 + ml * c1;
    AGP_I g1 = d & 4095;
    d = (d >> 12) + mh * c1 + ml * c0;
    AGP_I g0 = d & 4095;
    /* S 2^sh: 2 bits of quadrant, 10 + 60 bits of fraction */
    AGP_I rs = 12 - sh;
    AGP_I h0 = ((g0 << sh) | (g1 >> rs)) & 4095;
    AGP_I h1 = ((g1 << sh) | (g2 >> rs)) & 4095;
    AGP_I h2 = ((g2 << sh) | (g3 >> rs)) & 4095;
    AGP_I h3 = ((g3 << sh) | (g4 >> rs)) & 4095;
    AGP_I h4 = ((g4 << sh) | (g5 >> rs)) & 4095;
    AGP_I h5 = ((g5 << sh) | (g6 >> rs)) & 4095;
    AGP_I h6 = ((g6 << sh) | (g7 >> rs)) & 4095;
    AGP_I up = (h0 >> 9) & 1;
    AGP_I w0 = ((h0 & 1023) << 12) | h1;
    AGP_I w1 = (h2 << 12) | h3;
    AGP_I w2 = (h4 << 12) | h5;
    AGP_I w3 = h6;
    /* f >= 1/2: r = -(1 - f), the digits complemented with the carry */
    AGP_I v3 = up != 0 ? 4096 - w3 : w3;
    AGP_I cy = v3 >> 12;
    v3 = v3 & 4095;
    AGP_I v2 = up != 0 ? 16777215 - w2 + cy : w2;
    cy = up != 0 ? v2 >> 24 : 0;
    v2 = v2 & 16777215;
    AGP_I v1 = up != 0 ? 16777215 - w1 + cy : w1;
    cy = up != 0 ? v1 >> 24 : 0;
    v1 = v1 & 16777215;
    AGP_I v0 = up != 0 ? 4194303 - w0 + cy : w0;
    AGP_F f0 = AGP_ITOF(v0) * AGP_K(2.38418579e-07);
    AGP_F f1 = AGP_ITOF(v1) * AGP_K(1.42108547e-14);
    AGP_F f2 = AGP_ITOF(v2) * AGP_K(8.47032947e-22);
    AGP_F f3 = AGP_ITOF(v3) * AGP_K(2.06795153e-25);
    AGP_F fh = f0 + f1;
    AGP_F fe = agp_i_sum_err(f0, f1, fh);
    AGP_F f23 = f2 + f3;
    AGP_F fl = fe + f23;
    AGP_F gh = fh + fl;
    AGP_F gl = agp_i_fast_err(fh, fl, gh);
    /* (gh + gl) (pi/2 in two parts) */
    AGP_F ph = gh * AGP_K(1.57079637);
    AGP_F pe = agp_i_prod_err(gh, AGP_K(1.57079637), ph);
    AGP_F pl1 = gh * AGP_K(-4.37113883e-08);
    AGP_F pl2 = gl * AGP_K(1.57079637);
    AGP_F pl3 = pl1 + pl2;
    AGP_F pl = pe + pl3;
    AGP_F bh = ph + pl;
    AGP_F bl = agp_i_fast_err(ph, pl, bh);
    rh = up != 0 ? -bh : bh;
    rl = up != 0 ? -bl : bl;
    ki = (h0 >> 10) + up;
  }
  AGP_F z = rh * rh;
  /* sin r */
  AGP_F ps = AGP_K(-2.47636578e-08);
  ps = ps * z + AGP_K(2.75554999e-06);
  ps = ps * z + AGP_K(-0.000198412657);
  ps = ps * z + AGP_K(0.00833333377);
  ps = ps * z + AGP_K(-0.166666672);
  AGP_F r3 = rh * z;
  AGP_F st = r3 * ps;
  AGP_F hz = AGP_K(0.5) * z;
  AGP_F rlc = rl * hz;
  AGP_F rlt = rl - rlc;
  AGP_F st2 = st + rlt;
  AGP_F sn = rh + st2;
  /* cos r */
  AGP_F pc = AGP_K(2.06705764e-09);
  pc = pc * z + AGP_K(-2.75560183e-07);
  pc = pc * z + AGP_K(2.4801584e-05);
  pc = pc * z + AGP_K(-0.00138888892);
  pc = pc * z + AGP_K(0.0416666679);
  AGP_F w = AGP_K(1.0) - hz;
  AGP_F wc = AGP_K(1.0) - w;
  AGP_F we = wc - hz;
  AGP_F z2 = z * z;
  AGP_F ct = z2 * pc;
  AGP_F rr = rh * rl;
  AGP_F ct2 = ct - rr;
  AGP_F ct3 = we + ct2;
  AGP_F cs = w + ct3;
  AGP_I n = (ki + off) & 3;
  AGP_F r = n == 0 ? sn : n == 1 ? cs : n == 2 ? -sn : -cs;
  return r;
}

AGP_FN AGP_FT agp_sin(AGP_FT x) {
  AGP_F a = agp_abs(x);
  AGP_F s = agp_i_sincos(a, 0);
  AGP_F r = AGP_AS_I(x) < 0 ? -s : s;
  r = a >= AGP_AS_F(AGP_INF_BITS) || agp_i_isnan(x) != 0 ? x - x : r;
  return r;
}

AGP_FN AGP_FT agp_cos(AGP_FT x) {
  AGP_F a = agp_abs(x);
  AGP_F r = agp_i_sincos(a, 1);
  r = a >= AGP_AS_F(AGP_INF_BITS) || agp_i_isnan(x) != 0 ? x - x : r;
  return r;
}

/* atan2: q = min/max (one correctly rounded division), atan q = q + q^3
 * A(q^2) (degree 10) on [0, 1], then pi/2 - a and pi - a from two-part
 * constants; C99's signed zeros and infinities. */
AGP_FN AGP_FT agp_atan2(AGP_FT y, AGP_FT x) {
  AGP_F ax = agp_abs(x);
  AGP_F ay = agp_abs(y);
  AGP_I swap = ay > ax ? 1 : 0;
  AGP_F mx = swap != 0 ? ay : ax;
  AGP_F mn = swap != 0 ? ax : ay;
  AGP_I both_inf = (ax == AGP_AS_F(AGP_INF_BITS) && ay == AGP_AS_F(AGP_INF_BITS)) ? 1 : 0;
  mx = both_inf != 0 ? AGP_K(1.0) : mx;
  mn = both_inf != 0 ? AGP_K(1.0) : mn;
  mx = mx == AGP_K(0.0) ? AGP_K(1.0) : mx;
  AGP_F q = agp_div(mn, mx);
  AGP_F z = q * q;
  AGP_F p = AGP_K(-0.000936299446);
  p = p * z + AGP_K(0.00620725472);
  p = p * z + AGP_K(-0.0192610808);
  p = p * z + AGP_K(0.0383274443);
  p = p * z + AGP_K(-0.057607159);
  p = p * z + AGP_K(0.0741749704);
  p = p * z + AGP_K(-0.0903674215);
  p = p * z + AGP_K(0.111047067);
  p = p * z + AGP_K(-0.142853186);
  p = p * z + AGP_K(0.199999899);
  p = p * z + AGP_K(-0.333333343);
  AGP_F q3 = q * z;
  AGP_F t = q3 * p;
  AGP_F a = q + t;
  AGP_F b1 = AGP_K(1.57079637) - a;
  AGP_F b = b1 + AGP_K(-4.37113883e-08);
  a = swap != 0 ? b : a;
  AGP_F c1 = AGP_K(3.14159274) - a;
  AGP_F c = c1 + AGP_K(-8.74227766e-08);
  a = AGP_AS_I(x) < 0 ? c : a;
  AGP_F r = agp_copysign(a, y);
  r = agp_i_isnan(x) != 0 || agp_i_isnan(y) != 0 ? x + y : r;
  return r;
}

/* ---- pow ----
 * log2|x| as a pair Th + Tl: |x| = 2^e m, f = m - 1, s = f/(2 + f) as a
 * pair (Newton reciprocal, exact residual), log(m) = 2s + s^3 W(s^2)
 * (degree 4), times log2(e) as a pair, plus e; y log2|x| as a pair
 * (Dekker product), then 2^k e^(r ln2) with r ln2 as a pair. C99's
 * special cases around it. */
AGP_FN AGP_FT agp_pow(AGP_FT x, AGP_FT y) {
  AGP_F ax = agp_abs(x);
  AGP_F ay = agp_abs(y);
  AGP_I ix = AGP_AS_I(ax);
  AGP_I special = (ix == 0 || ix >= AGP_INF_BITS || ay >= AGP_AS_F(AGP_INF_BITS) || agp_i_isnan(y) != 0) ? 1 : 0;
  AGP_F xs0 = special != 0 ? AGP_K(2.0) : ax;
  AGP_F xs1 = xs0 * AGP_K(16777216.0);
  AGP_I sub = AGP_AS_I(xs0) < 8388608 ? 1 : 0;
  AGP_F u = sub != 0 ? xs1 : xs0;
  AGP_I iu = AGP_AS_I(u);
  AGP_I e = ((iu >> 23) & 255) - 127 - 24 * sub;
  AGP_I mi = (iu & 8388607) | 0x3f800000;
  AGP_I big = mi > 0x3fb504f3 ? 1 : 0;
  mi = big != 0 ? mi - 8388608 : mi;
  e = e + big;
  AGP_F m = AGP_AS_F(mi);
  AGP_F f = m - AGP_K(1.0);
  AGP_F d = AGP_K(2.0) + f;
  AGP_F dl = agp_i_fast_err(AGP_K(2.0), f, d);
  /* 1/d by Newton from a bit-trick seed, d in [1.7, 2.5] */
  AGP_F g = agp_i_recip(d);
  AGP_F sh = f * g;
  AGP_F pp = sh * d;
  AGP_F pe = agp_i_prod_err(sh, d, pp);
  AGP_F r1 = f - pp;
  AGP_F r2 = r1 - pe;
  AGP_F sd = sh * dl;
  AGP_F r3 = r2 - sd;
  AGP_F sl = r3 * g;
  /* the tail 2s^3/3 + s^5 W'(s^2) as a pair: s^2 and s^3 exact pairs, 2/3
   * in two parts, sl's first-order share added */
  AGP_F z = sh * sh;
  AGP_F zl = agp_i_prod_err(sh, sh, z);
  AGP_F w = AGP_K(0.193626538);
  w = w * z + AGP_K(0.221914008);
  w = w * z + AGP_K(0.285717547);
  w = w * z + AGP_K(0.399999976);
  AGP_F s3 = sh * z;
  AGP_F s3e = agp_i_prod_err(sh, z, s3);
  AGP_F s3z = sh * zl;
  AGP_F s3l = s3e + s3z;
  AGP_F t1 = s3 * AGP_K(0.666666687);
  AGP_F t1e = agp_i_prod_err(s3, AGP_K(0.666666687), t1);
  AGP_F zw = z * w;
  AGP_F wl = zw + AGP_K(-1.98682149e-08);
  AGP_F t2 = s3 * wl;
  AGP_F t3 = s3l * AGP_K(0.666666687);
  /* sl's share of the tail: d(s^3 W)/ds sl = s^2 sl (2 + 3 z W') */
  AGP_F zw3 = AGP_K(3.0) * zw;
  AGP_F dw = AGP_K(2.0) + zw3;
  AGP_F zs = z * sl;
  AGP_F t5 = zs * dw;
  AGP_F t6 = t3 + t5;
  AGP_F t4 = t2 + t6;
  AGP_F tl0 = t1e + t4;
  AGP_F lh = AGP_K(2.0) * sh;
  AGP_F sl2 = AGP_K(2.0) * sl;
  AGP_F lm = sl2 + tl0;
  AGP_F llh = t1 + lm;
  AGP_F lle = agp_i_sum_err(t1, lm, llh);
  /* (lh + llh + lle) log2(e) + e as th + tl */
  AGP_F q1 = lh * AGP_K(1.44269502);
  AGP_F q1e = agp_i_prod_err(lh, AGP_K(1.44269502), q1);
  AGP_F q3 = llh * AGP_K(1.44269502);
  AGP_F q3e = agp_i_prod_err(llh, AGP_K(1.44269502), q3);
  AGP_F q2 = lh * AGP_K(1.92596303e-08);
  AGP_F q6 = lle * AGP_K(1.44269502);
  AGP_F q7 = q2 + q6;
  AGP_F q8 = q3e + q7;
  AGP_F q4 = q1e + q8;
  AGP_F ef = AGP_ITOF(e);
  AGP_F th0 = ef + q1;
  AGP_F te0 = agp_i_sum_err(ef, q1, th0);
  AGP_F th = th0 + q3;
  AGP_F te1 = agp_i_sum_err(th0, q3, th);
  AGP_F te2 = te0 + te1;
  AGP_F tl = te2 + q4;
  /* y (th + tl); |y| above 2^64 saturates the same way */
  AGP_F yc = ay > AGP_K(1.84467441e+19) ? agp_copysign(AGP_K(1.84467441e+19), y) : y;
  yc = special != 0 ? AGP_K(1.0) : yc;
  AGP_F ph = yc * th;
  AGP_F pe2 = agp_i_prod_err(yc, th, ph);
  AGP_F pt = yc * tl;
  AGP_F pl0 = pe2 + pt;
  AGP_F phn = ph + pl0;
  AGP_F pln = agp_i_fast_err(ph, pl0, phn);
  AGP_I sat = (phn > AGP_K(200.0) || phn < AGP_K(-200.0)) ? 1 : 0;
  AGP_F pc = phn > AGP_K(200.0) ? AGP_K(200.0) : phn;
  pc = pc < AGP_K(-200.0) ? AGP_K(-200.0) : pc;
  AGP_F plc = sat != 0 ? AGP_K(0.0) : pln;
  /* 2^(pc + plc) */
  AGP_F kf = agp_i_rint(pc);
  AGP_F fr = pc - kf;
  AGP_F fh = fr + plc;
  AGP_F fl = agp_i_sum_err(fr, plc, fh);
  AGP_F rh = fh * AGP_K(0.693147182);
  AGP_F re = agp_i_prod_err(fh, AGP_K(0.693147182), rh);
  AGP_F rl1 = fl * AGP_K(0.693147182);
  AGP_F rl2 = fh * AGP_K(-1.90465421e-09);
  AGP_F rl3 = rl1 + rl2;
  AGP_F rl = re + rl3;
  AGP_I k = AGP_FTOI(kf);
  k = k > 160 ? 160 : k;
  k = k < -160 ? -160 : k;
  AGP_F res = agp_i_exp_fin(rh, rl, k, 0);
  /* |x| = 0 or inf, or y = +-inf: 0 or inf by the signs of log|x| and y */
  AGP_I lgpos = ax > AGP_K(1.0) ? 1 : 0;
  AGP_I ypos = y > AGP_K(0.0) ? 1 : 0;
  AGP_F edge = lgpos == ypos ? AGP_AS_F(AGP_INF_BITS) : AGP_K(0.0);
  res = special != 0 ? edge : res;
  /* negative x: odd integer y flips the sign; a non-integer y is NaN for
   * finite x */
  AGP_F yfl = agp_floor(y);
  AGP_I yint = yfl == y ? 1 : 0;
  AGP_F yh = ay < AGP_K(16777216.0) ? ay : AGP_K(0.0);
  AGP_I yodd = (yint != 0 && (AGP_FTOI(yh) & 1) != 0) ? 1 : 0;
  AGP_I xneg = AGP_AS_I(x) < 0 ? 1 : 0;
  res = (xneg != 0 && yodd != 0) ? -res : res;
  res = (xneg != 0 && yint == 0 && ix != 0 && ix < AGP_INF_BITS) ? AGP_AS_F(AGP_QNAN_BITS) : res;
  res = (ax == AGP_K(1.0) && ay == AGP_AS_F(AGP_INF_BITS)) ? AGP_K(1.0) : res;
  res = (agp_i_isnan(x) != 0 || agp_i_isnan(y) != 0) ? x + y : res;
  res = (x == AGP_K(1.0) || y == AGP_K(0.0)) ? AGP_K(1.0) : res;
  return res;
}

/* ---- fmod: exact, the sign of a ----
 * The integer significands' remainder, 6 exponent steps at a time. */
AGP_FN AGP_FT agp_fmod(AGP_FT a, AGP_FT b) {
  AGP_I ia = AGP_AS_I(a);
  AGP_I xa = ia & AGP_ABS_BITS;
  AGP_I xb = AGP_AS_I(b) & AGP_ABS_BITS;
  AGP_I ea = xa >> 23;
  AGP_I eb = xb >> 23;
  AGP_I ma = (xa & 8388607) | (ea != 0 ? 8388608 : 0);
  AGP_I mb = (xb & 8388607) | (eb != 0 ? 8388608 : 0);
  ea = ea != 0 ? ea : 1;
  eb = eb != 0 ? eb : 1;
  AGP_I valid = (xa < AGP_INF_BITS && xb < AGP_INF_BITS && xb != 0 && xa >= xb) ? 1 : 0;
  mb = valid != 0 ? mb : 1;
  AGP_I dd = valid != 0 ? ea - eb : 0;
  AGP_I r = ma % mb;
  while (dd > 0) {
    AGP_I st = dd > 6 ? 6 : dd;
    r = (r * (1 << st)) % mb;
    dd = dd - st;
  }
  /* r 2^(eb - 150), exact: r < 2^24 */
  AGP_F fr = AGP_ITOF(r);
  AGP_F f1 = fr * AGP_K(1.1920929e-07);
  AGP_F f2 = f1 * agp_i_pow2(eb - 127);
  AGP_F res = valid != 0 ? f2 : a;
  res = (xa >= xb || xb >= AGP_INF_BITS) ? res : a;
  res = (xa >= AGP_INF_BITS || xb == 0 || xb > AGP_INF_BITS) ? AGP_AS_F(AGP_QNAN_BITS) : res;
  res = (xb == AGP_INF_BITS && xa < AGP_INF_BITS) ? a : res;
  res = agp_copysign(res, a);
  res = (agp_i_isnan(a) != 0 || agp_i_isnan(b) != 0) ? a + b : res;
  return res;
}

/* ---- f16 and bf16 conversions (bits as int), round to nearest even,
 * NaN kept quiet with its sign and top payload bits, as backend.h's
 * ag_f32_to_f16 and friends ---- */
AGP_FN AGP_I agp_f32_to_f16_bits(AGP_FT f) {
  AGP_I x = AGP_AS_I(f);
  AGP_I sgn = x < 0 ? 32768 : 0;
  AGP_I ax = x & AGP_ABS_BITS;
  AGP_I r;
  if (ax >= AGP_INF_BITS) {
    r = sgn | 31744 | (ax > AGP_INF_BITS ? 512 | ((ax >> 13) & 1023) : 0);
  } else if (ax >= 0x477ff000) {
    r = sgn | 31744;
  } else if (ax < 0x38800000) {
    if (ax < 0x33000000) {
      r = sgn;
    } else {
      AGP_I e = ax >> 23;
      AGP_I m = (ax & 8388607) | 8388608;
      AGP_I sh = 126 - e;
      AGP_I q = m >> sh;
      AGP_I rem = m & ((1 << sh) - 1);
      AGP_I hlf = 1 << (sh - 1);
      AGP_I up = (rem > hlf || (rem == hlf && (q & 1) != 0)) ? 1 : 0;
      r = sgn | (q + up);
    }
  } else {
    AGP_I odd = (ax >> 13) & 1;
    r = sgn | ((ax - 0x38000000 + 4095 + odd) >> 13);
  }
  return r;
}

AGP_FN AGP_FT agp_f16_bits_to_f32(AGP_I h) {
  AGP_I sgn = (h & 32768) != 0 ? AGP_SIGN_BIT : 0;
  AGP_I e = (h >> 10) & 31;
  AGP_I m = h & 1023;
  AGP_I bits = (e + 112) * 8388608 + m * 8192;
  bits = e == 31 ? AGP_INF_BITS | (m != 0 ? 4194304 | (m * 8192) : 0) : bits;
  AGP_F sub = AGP_ITOF(m) * AGP_K(5.96046448e-08);
  bits = e == 0 ? AGP_AS_I(sub) : bits;
  AGP_F r = AGP_AS_F(bits | sgn);
  return r;
}

AGP_FN AGP_I agp_f32_to_bf16_bits(AGP_FT f) {
  AGP_I x = AGP_AS_I(f);
  AGP_I r;
  if ((x & AGP_ABS_BITS) > AGP_INF_BITS) {
    r = ((x >> 16) & 65535) | 64;
  } else {
    AGP_I odd = (x >> 16) & 1;
    AGP_I ax = x & AGP_ABS_BITS;
    AGP_I rounded = (ax + 32767 + odd) >> 16;
    r = rounded | (x < 0 ? 32768 : 0);
  }
  return r;
}

AGP_FN AGP_FT agp_bf16_bits_to_f32(AGP_I b) {
  AGP_I sgn = (b & 32768) != 0 ? AGP_SIGN_BIT : 0;
  AGP_F r = AGP_AS_F(((b & 32767) * 65536) | sgn);
  return r;
}

#endif
