/* Single-precision sine and cosine of the elementwise kernels, in registers
 * only. CUDA's sinf/cosf reduce |x| > 105615 through a 7-word array indexed
 * at run time, which ptxas keeps in a 32-byte stack frame of every kernel
 * that may call them; here the large-argument reduction reads its window of
 * 2/pi from constant memory and keeps every partial product in a scalar.
 * At most 1.52 ulp from the exact result over every f32 (docs/gpu.md). */
#ifndef AG_GPU_TRIG_CUH
#define AG_GPU_TRIG_CUH

#include "common.cuh"

/* The bits of 2/pi after one zero word: bit i of 2/pi (weight 2^-i) is bit
 * 31 + i of the table, counted from the most significant bit of word 0. */
static __constant__ const uint32_t agk_2_over_pi[8] = {0u,          0xA2F9836Eu, 0x4E441529u, 0xFC2757D1u,
                                                       0xF534DDC0u, 0xDB629599u, 0x3C439041u, 0xFE5163ABu};

/* x = q pi/2 + r, |r| <= pi/4 (q modulo 4 is what matters). */
struct agk_pio2_red {
  float r;
  int q;
};

AGK_DEV agk_pio2_red agk_reduce_pio2(float x) {
  agk_pio2_red o;
  if (fabsf(x) <= 105615.0f) {
    /* Cody-Waite: pi/2 in three parts; j * the first two is exact in the
     * fma up to this bound (the bound of CUDA's own fast path) */
    float j = fmaf(x, 6.36619747e-1f, 12582912.0f) - 12582912.0f;
    float r = fmaf(j, -1.57079601e+00f, x);
    r = fmaf(j, -3.13916473e-07f, r);
    o.r = fmaf(j, -5.39030253e-15f, r);
    o.q = (int)j;
    return o;
  }
  /* Payne-Hanek: |x| = m 2^e with a 24-bit integer m; only bits e - 1 and
   * below of 2/pi matter modulo 4, 96 of them are enough. The window of 96
   * bits (w0 w1 w2) starts at bit e - 1 (table bit e + 30; e <= 104, so
   * words 0..7 are enough); m times it modulo 2^96 is |x| 2/pi modulo 4 in
   * 2.94 fixed point, of which the top 64 bits (2.62) are kept. Inf and NaN
   * pass through here too (exponent 255 reads the last words); the callers
   * return x - x for them. */
  uint32_t ia = __float_as_uint(x);
  uint32_t m = (ia & 0x7fffffu) | 0x800000u;
  int pos = (int)((ia >> 23) & 0xffu) - 150 + 30;
  int w = pos >> 5, s = pos & 31;
  uint64_t t0 = agk_2_over_pi[w], t1 = agk_2_over_pi[w + 1], t2 = agk_2_over_pi[w + 2],
           t3 = agk_2_over_pi[w + 3];
  uint32_t w0 = (uint32_t)(((t0 << 32) | t1) >> (32 - s));
  uint32_t w1 = (uint32_t)(((t1 << 32) | t2) >> (32 - s));
  uint32_t w2 = (uint32_t)(((t2 << 32) | t3) >> (32 - s));
  uint64_t p = (uint64_t)m * w2;
  p = (uint64_t)m * w1 + (p >> 32);
  uint32_t hi = m * w0 + (uint32_t)(p >> 32);
  uint64_t f = ((uint64_t)hi << 32) | (uint32_t)p;
  /* nearest quadrant (wrapping past 3.5 to 0) and the signed remainder in
   * units of 2^-62, |d| <= 2^61 */
  uint32_t q = (uint32_t)((f + (1ull << 61)) >> 62);
  int64_t d = (int64_t)(f - ((uint64_t)q << 62));
  /* r = d 2^-62 pi/2 from d = dh + dl (dh exact in float, dl its rounding
   * error) times pi/2 2^-62 = ch + cl, as a product of pairs (ph rounded
   * on its own, not contracted into the sum: the same bits on every
   * compiler) */
  float dh = (float)d;
  float dl = (float)(d - (int64_t)dh);
  const float ch = 0x1.921fb6p-62f, cl = -0x1.777a5cp-87f;
  float ph = __fmul_rn(dh, ch);
  float pe = fmaf(dh, ch, -ph);
  pe = fmaf(dh, cl, pe);
  pe = fmaf(dl, ch, pe);
  float r = ph + pe;
  o.r = x < 0.0f ? -r : r;
  o.q = x < 0.0f ? -(int)q : (int)q;
  return o;
}

/* sin(r) (q even) or cos(r) (q odd) on |r| <= pi/4, negated for q & 2:
 * minimax polynomials in r^2 (at most 0.65 and 0.88 ulp on the interval) */
AGK_DEV float agk_sincos_poly(float r, int q) {
  float s = r * r, v;
  if (q & 1) {
    v = 2.44677067e-5f;
    v = fmaf(v, s, -1.38877297e-3f);
    v = fmaf(v, s, 4.16666567e-2f);
    v = fmaf(v, s, -5.00000000e-1f);
    v = fmaf(v, s, 1.00000000e+0f);
  } else {
    v = 2.86567956e-6f;
    v = fmaf(v, s, -1.98559923e-4f);
    v = fmaf(v, s, 8.33338592e-3f);
    v = fmaf(v, s, -1.66666672e-1f);
    /* r s + 0 is +0 for r = -0, so that -0 comes out as -0 */
    v = fmaf(v, fmaf(r, s, 0.0f), r);
  }
  return (q & 2) ? 0.0f - v : v;
}

AGK_DEV float agk_sinf(float x) {
  if (!(fabsf(x) <= 3.40282347e+38f)) return x - x; /* inf, NaN: NaN */
  agk_pio2_red o = agk_reduce_pio2(x);
  return agk_sincos_poly(o.r, o.q);
}

AGK_DEV float agk_cosf(float x) {
  if (!(fabsf(x) <= 3.40282347e+38f)) return x - x;
  agk_pio2_red o = agk_reduce_pio2(x);
  return agk_sincos_poly(o.r, o.q + 1);
}

#endif
