/* Distance in units in the last place between two floats: the number of
 * representable values from a to b (0 when equal, +0 and -0 equal). A NaN
 * on either side gives INT64_MAX unless both are NaN (0). */
#ifndef ANYGRAD_TOOLS_ULP_H
#define ANYGRAD_TOOLS_ULP_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* The bits of x mapped onto a line where consecutive floats differ by one. */
static inline int64_t ag_ulp_ordered_f32_(float x) {
  int32_t i;
  memcpy(&i, &x, sizeof i);
  return i < 0 ? -(int64_t)(i & INT32_MAX) : (int64_t)i;
}

static inline int64_t ag_ulp_distance_f32(float a, float b) {
  if (isnan(a) || isnan(b)) return isnan(a) && isnan(b) ? 0 : INT64_MAX;
  int64_t d = ag_ulp_ordered_f32_(a) - ag_ulp_ordered_f32_(b);
  return d < 0 ? -d : d;
}

static inline int64_t ag_ulp_distance_f64(double a, double b) {
  if (isnan(a) || isnan(b)) return isnan(a) && isnan(b) ? 0 : INT64_MAX;
  int64_t i, j;
  memcpy(&i, &a, sizeof i);
  memcpy(&j, &b, sizeof j);
  /* Map to an ordered line in unsigned arithmetic (no overflow). */
  uint64_t x = i < 0 ? (uint64_t)0x8000000000000000u - ((uint64_t)i & INT64_MAX) : (uint64_t)i + 0x8000000000000000u;
  uint64_t y = j < 0 ? (uint64_t)0x8000000000000000u - ((uint64_t)j & INT64_MAX) : (uint64_t)j + 0x8000000000000000u;
  uint64_t d = x > y ? x - y : y - x;
  return d > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)d;
}

#endif
