/* f32 exp and tanh that vectorise (libm's expf and tanhf are calls the
 * vectoriser cannot widen, 4-8x slower than the memory they stream): the
 * elementwise bodies (cpu_kernels.c) and the row bodies (cpu_rows.c) use
 * them as EXPT and TANHT for float. Static inline: each includer compiles
 * them under its own target options (AVX2 where it asks). */
#ifndef AG_CPU_VMATH_H
#define AG_CPU_VMATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

static inline float bits_f(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static inline uint32_t f_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

/* x = k ln2 + r with |r| <= ln2/2 (Cody-Waite: ln2 in two parts, the first
 * exact in a product with k). Returns e^r - 1 (Cephes' degree-5 polynomial,
 * under 1 ulp) and k. k is rounded with the 1.5*2^23 shifter, read from the
 * shifted value's low bits, so no float->int conversion sees a NaN. */
static inline float exp_reduce(float x, int32_t *k) {
  const float shifter = 0x1.8p23f;
  float t = x * 1.44269504088896341f + shifter;
  float n = t - shifter;
  *k = (int32_t)(f_bits(t) - f_bits(shifter));
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  return p * r * r + r;
}

/* 2^k for k in [-126, 127]. */
static inline float pow2i(int32_t k) { return bits_f((uint32_t)(k + 127) << 23); }

/* e^x, at most 1.02 ulp from the exact value (cpu_backend_test sweeps the
 * whole range in both builds; libm expf is 0.5). Clamping x to [-104, 89] keeps k in [-150, 129]
 * and lets the product overflow to inf or underflow to 0 on its own; 2^k is
 * applied as two factors so results near overflow or subnormal are rounded
 * once. NaN passes through every step. */
static inline float vexpf(float x) {
  x = x > 89.0f ? 89.0f : x;
  x = x < -104.0f ? -104.0f : x;
  int32_t k;
  float em1 = exp_reduce(x, &k);
  int32_t k1 = k >> 1;
  return (em1 + 1.0f) * pow2i(k1) * pow2i(k - k1);
}

/* tanh|x| = -m / (2 + m), m = expm1(-2|x|) = (2^k - 1) + 2^k (e^r - 1):
 * no cancellation for small |x| (k = 0 there), unlike (1 - e) / (1 + e).
 * tanh rounds to 1 in f32 from |x| = 9.01 on, so |x| is clamped at 10. */
static inline float vtanhf(float x) {
  float a = fabsf(x);
  a = a > 10.0f ? 10.0f : a;
  int32_t k;
  float em1 = exp_reduce(-2.0f * a, &k);
  float s = pow2i(k);
  float m = (s - 1.0f) + s * em1;
  return copysignf(-m / (2.0f + m), x);
}

#endif
