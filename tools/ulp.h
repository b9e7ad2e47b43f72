/* Distance in units in the last place between two floating-point numbers:
 * the number of representable values of the type between them, counted on
 * the ordered line -inf ... -0 = +0 ... +inf. Header-only, C11.
 *
 * - NaN against NaN is 0 (any payload or sign); NaN against a number
 *   (infinities included) is INT64_MAX.
 * - +0 and -0 are the same point: their distance is 0, and the smallest
 *   subnormal of either sign is 1 from both.
 * - The largest finite value is 1 from the infinity of its sign.
 * - f64 distances past INT64_MAX - 1 (the line from near -inf to near +inf
 *   is 2^64 - 2^53 long) saturate at INT64_MAX - 1, so INT64_MAX always
 *   means NaN against a number.
 * The result is symmetric and never negative. */
#ifndef ANYGRAD_TOOLS_ULP_H
#define ANYGRAD_TOOLS_ULP_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* Signed position of a non-NaN value on the ordered line, 0 for +0 and -0. */
static inline int64_t ag_ulp_key_f32_(float v) {
  uint32_t b;
  memcpy(&b, &v, sizeof b);
  int64_t m = (int64_t)(b & 0x7fffffffu);
  return (b >> 31) ? -m : m;
}

static inline int64_t ag_ulp_key_f64_(double v) {
  uint64_t b;
  memcpy(&b, &v, sizeof b);
  int64_t m = (int64_t)(b & 0x7fffffffffffffffull);
  return (b >> 63) ? -m : m;
}

static inline int64_t ag_ulp_distance_f32(float a, float b) {
  if (isnan(a) || isnan(b)) return isnan(a) && isnan(b) ? 0 : INT64_MAX;
  int64_t d = ag_ulp_key_f32_(a) - ag_ulp_key_f32_(b);
  return d < 0 ? -d : d;
}

static inline int64_t ag_ulp_distance_f64(double a, double b) {
  if (isnan(a) || isnan(b)) return isnan(a) && isnan(b) ? 0 : INT64_MAX;
  int64_t ka = ag_ulp_key_f64_(a), kb = ag_ulp_key_f64_(b);
  /* keys lie in [-(2^63-1), 2^63-1]; their difference can overflow int64 */
  uint64_t d = ka >= kb ? (uint64_t)ka - (uint64_t)kb : (uint64_t)kb - (uint64_t)ka;
  return d > (uint64_t)(INT64_MAX - 1) ? INT64_MAX - 1 : (int64_t)d;
}

#endif
