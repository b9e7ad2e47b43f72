/* f16 and bf16 conversions: the scalar reference (round-to-nearest-even,
 * NaN kept as a quiet NaN with its sign and top payload bits, subnormals
 * exact) and bulk versions that use F16C on x86-64 CPUs that have it. */
#include "tensor/half.h"

#include <string.h>

#include <stdatomic.h>

#if defined(AG_X86)
#include <cpuid.h>
#include <immintrin.h>
#endif

static inline uint32_t f2u(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

static inline float u2f(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

uint16_t ag_f32_to_f16(float f) {
  uint32_t x = f2u(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) /* inf stays inf; NaN: quiet bit set like F16C */
    return (uint16_t)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u | ((ax >> 13) & 0x3ffu) : 0));
  if (ax >= 0x477ff000u) /* >= 65520 rounds to infinity */
    return (uint16_t)(sign | 0x7c00u);
  if (ax < 0x38800000u) {
    /* Result is subnormal or zero: shift the 24-bit significand right so
     * that its unit is 2^-24, rounding to nearest even by hand (no reliance
     * on the FPU's rounding mode or denormal flags). */
    if (ax < 0x33000000u) return (uint16_t)sign; /* < 2^-25: rounds to zero */
    uint32_t e = ax >> 23;
    uint32_t m = (ax & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126u - e; /* 14..24 */
    uint32_t q = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u))) q++;
    return (uint16_t)(sign | q);
  }
  /* Normal: rebias the exponent and round the 13 dropped bits to even; a
   * carry out of the significand correctly bumps the exponent. */
  uint32_t odd = (ax >> 13) & 1u;
  ax += 0xc8000fffu + odd; /* (15-127)<<23 + 0xfff, mod 2^32 */
  return (uint16_t)(sign | (ax >> 13));
}

float ag_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t e = (h >> 10) & 0x1fu;
  uint32_t m = h & 0x3ffu;
  if (e == 0x1f) /* NaN comes back quiet, as vcvtph2ps returns it */
    return u2f(sign | 0x7f800000u | (m ? 0x400000u | (m << 13) : 0));
  if (e == 0) {
    if (m == 0) return u2f(sign);
    /* Subnormal: normalise the significand into an f32 normal. */
    int sh = __builtin_clz(m) - 21; /* bring the top bit to bit 10 */
    m = (m << sh) & 0x3ffu;
    return u2f(sign | ((uint32_t)(113 - sh) << 23) | (m << 13));
  }
  return u2f(sign | ((e + 112u) << 23) | (m << 13));
}

uint16_t ag_f32_to_bf16(float f) {
  uint32_t x = f2u(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return (uint16_t)(x >> 16);
}

float ag_bf16_to_f32(uint16_t b) { return u2f((uint32_t)b << 16); }

#if defined(AG_X86)
__attribute__((target("avx,f16c"))) static void f16_to_f32_f16c(const uint16_t *src, float *dst,
                                                                 size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
  for (; i < n; i++) dst[i] = ag_f16_to_f32(src[i]);
}

__attribute__((target("avx,f16c"))) static void f32_to_f16_f16c(const float *src, uint16_t *dst,
                                                                 size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128((__m128i *)(dst + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
  for (; i < n; i++) dst[i] = ag_f32_to_f16(src[i]);
}

static int detect_f16c(void) {
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
  const unsigned need = bit_AVX | bit_F16C | bit_OSXSAVE;
  if ((c & need) != need) return 0;
  unsigned lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  (void)hi;
  return (lo & 6u) == 6u; /* the OS saves XMM and YMM state */
}
#endif

bool ag__cpu_has_f16c(void) {
#if defined(AG_X86)
  /* A fact about the machine, computed at most a few times on a race and
   * never changed: -1 unknown, 0 no, 1 yes. cpuid traps in VMs, so it is
   * not asked on every conversion. */
  static atomic_int known = -1;
  int v = atomic_load_explicit(&known, memory_order_relaxed);
  if (v < 0) {
    v = detect_f16c();
    atomic_store_explicit(&known, v, memory_order_relaxed);
  }
  return v == 1;
#else
  return false;
#endif
}

#if defined(AG_X86)
static inline int have_f16c(void) { return ag__cpu_has_f16c(); }
#endif

void ag__f16_to_f32_n(const uint16_t *src, float *dst, size_t n) {
#if defined(AG_X86)
  if (n >= 8 && have_f16c()) {
    f16_to_f32_f16c(src, dst, n);
    return;
  }
#endif
  for (size_t i = 0; i < n; i++) dst[i] = ag_f16_to_f32(src[i]);
}

void ag__f32_to_f16_n(const float *src, uint16_t *dst, size_t n) {
#if defined(AG_X86)
  if (n >= 8 && have_f16c()) {
    f32_to_f16_f16c(src, dst, n);
    return;
  }
#endif
  for (size_t i = 0; i < n; i++) dst[i] = ag_f32_to_f16(src[i]);
}

void ag__bf16_to_f32_n(const uint16_t *src, float *dst, size_t n) {
  for (size_t i = 0; i < n; i++) dst[i] = ag_bf16_to_f32(src[i]);
}

void ag__f32_to_bf16_n(const float *src, uint16_t *dst, size_t n) {
  for (size_t i = 0; i < n; i++) dst[i] = ag_f32_to_bf16(src[i]);
}
