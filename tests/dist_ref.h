/* Shared by the collectives tests: deterministic inputs per rank and the
 * host reference of the documented semantics (sum/avg/max/min exact in
 * double in rank order, rounded once into the dtype). */
#ifndef AG_TESTS_DIST_REF_H
#define AG_TESTS_DIST_REF_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "anygrad/anygrad.h"
#include "anygrad/backend.h"

static const ag_dtype k_dtypes[] = {AG_F32, AG_F16, AG_BF16, AG_F64, AG_I32};
#define NDT (int)(sizeof k_dtypes / sizeof k_dtypes[0])

/* ---- values ---- */

static inline uint32_t hash(uint32_t x) {
  x ^= x >> 16; x *= 0x7feb352d; x ^= x >> 15; x *= 0x846ca68b; x ^= x >> 16;
  return x;
}

/* Element i of rank r's input (stored in dt). */
static inline double gen(ag_dtype dt, int r, size_t i, int salt) {
  uint32_t h = hash((uint32_t)i * 2654435761u + (uint32_t)r * 97u + (uint32_t)salt * 7919u);
  if (dt == AG_I32) return (double)((int32_t)(h % 2001) - 1000);
  return ((double)(h % 1000003) / 1000003.0 - 0.5) * 8.0;
}

static inline void store(ag_dtype dt, void *p, size_t i, double v) {
  switch (dt) {
    case AG_F32: ((float *)p)[i] = (float)v; break;
    case AG_F64: ((double *)p)[i] = v; break;
    case AG_I32: ((int32_t *)p)[i] = (int32_t)v; break;
    case AG_F16: ((uint16_t *)p)[i] = ag_f32_to_f16((float)v); break;
    case AG_BF16: ((uint16_t *)p)[i] = ag_f32_to_bf16((float)v); break;
    default: break;
  }
}

static inline double fetch(ag_dtype dt, const void *p, size_t i) {
  switch (dt) {
    case AG_F32: return ((const float *)p)[i];
    case AG_F64: return ((const double *)p)[i];
    case AG_I32: return ((const int32_t *)p)[i];
    case AG_F16: return ag_f16_to_f32(((const uint16_t *)p)[i]);
    case AG_BF16: return ag_bf16_to_f32(((const uint16_t *)p)[i]);
    default: return NAN;
  }
}

static inline void *make_input(ag_dtype dt, int r, size_t n, int salt) {
  void *h = malloc(n * ag_dtype_size(dt) + 1);
  for (size_t i = 0; i < n; i++) store(dt, h, i, gen(dt, r, i, salt));
  return h;
}

/* Reference: exact in double, in rank order, rounded once (the documented
 * in-process semantics); compared bit for bit through the dtype. */
static inline double ref_reduce(ag_dtype dt, ag_dist_reduce op, int size, size_t i, int salt, size_t base) {
  double acc = 0;
  for (int r = 0; r < size; r++) {
    /* the value as stored in dt */
    unsigned char tmp[8];
    store(dt, tmp, 0, gen(dt, r, base + i, salt));
    double v = fetch(dt, tmp, 0);
    if (r == 0) acc = v;
    else if (op == AG_DIST_SUM || op == AG_DIST_AVG) acc += v;
    else if (op == AG_DIST_MAX) acc = v > acc ? v : acc;
    else acc = v < acc ? v : acc;
  }
  if (op == AG_DIST_AVG) acc /= size;
  unsigned char tmp[8];
  if (dt == AG_I32) return (double)(int32_t)(uint32_t)(uint64_t)(int64_t)acc;
  store(dt, tmp, 0, acc);
  return fetch(dt, tmp, 0);
}

/* Sum of |inputs| at element i: the scale of the rounding error of a sum
 * taken in another order or precision (MPI). */
static inline double ref_sumabs(ag_dtype dt, int size, size_t i, int salt, size_t base) {
  double acc = 0;
  for (int r = 0; r < size; r++) {
    unsigned char tmp[8];
    store(dt, tmp, 0, gen(dt, r, base + i, salt));
    acc += fabs(fetch(dt, tmp, 0));
  }
  return acc;
}

/* Relative rounding unit of a dtype (a few ulps of slack for f32). */
static inline double ref_eps(ag_dtype dt) {
  switch (dt) {
    case AG_F16: return 1.0 / 1024;
    case AG_BF16: return 1.0 / 128;
    case AG_F32: return 1e-6;
    case AG_F64: return 1e-14;
    default: return 0;
  }
}
#endif
