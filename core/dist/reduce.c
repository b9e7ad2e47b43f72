/* Host reductions for the collectives: the one place that knows how each
 * dtype is loaded, accumulated and stored. Everything accumulates in double
 * (exact for i32 sums of up to 2^21 ranks, f16/bf16/f32 widened without
 * loss) and rounds once into the dtype, in a fixed source order, so results
 * do not depend on thread timing. A new dtype is added here only. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3") /* vectorise the f32 loops below (clang does at -O2) */
#endif
#include <math.h>
#include <string.h>

#include "anygrad/backend.h"
#include "dist_internal.h"

#define BLOCK 512

bool ag__dist_dtype_ok(ag_dtype dt) {
  switch (dt) {
    case AG_F32: case AG_F16: case AG_BF16: case AG_I32: case AG_F64: return true;
    default: return false;
  }
}

static void load(ag_dtype dt, const void *p, size_t off, size_t n, double *acc) {
  switch (dt) {
    case AG_F32: { const float *s = (const float *)p + off; for (size_t i = 0; i < n; i++) acc[i] = s[i]; break; }
    case AG_F64: memcpy(acc, (const double *)p + off, n * sizeof(double)); break;
    case AG_I32: { const int32_t *s = (const int32_t *)p + off; for (size_t i = 0; i < n; i++) acc[i] = s[i]; break; }
    case AG_F16: { const uint16_t *s = (const uint16_t *)p + off; for (size_t i = 0; i < n; i++) acc[i] = ag_f16_to_f32(s[i]); break; }
    case AG_BF16: { const uint16_t *s = (const uint16_t *)p + off; for (size_t i = 0; i < n; i++) acc[i] = ag_bf16_to_f32(s[i]); break; }
    default: break;
  }
}

/* i32 sums wrap as two's complement, as the devices' integer adds do. */
static int32_t wrap_i32(double v) { return (int32_t)(uint32_t)(uint64_t)(int64_t)v; }

static void store(ag_dtype dt, const double *acc, void *p, size_t off, size_t n) {
  switch (dt) {
    case AG_F32: { float *d = (float *)p + off; for (size_t i = 0; i < n; i++) d[i] = (float)acc[i]; break; }
    case AG_F64: memcpy((double *)p + off, acc, n * sizeof(double)); break;
    case AG_I32: { int32_t *d = (int32_t *)p + off; for (size_t i = 0; i < n; i++) d[i] = wrap_i32(acc[i]); break; }
    case AG_F16: { uint16_t *d = (uint16_t *)p + off; for (size_t i = 0; i < n; i++) d[i] = ag_f32_to_f16((float)acc[i]); break; }
    case AG_BF16: { uint16_t *d = (uint16_t *)p + off; for (size_t i = 0; i < n; i++) d[i] = ag_f32_to_bf16((float)acc[i]); break; }
    default: break;
  }
}

static void combine(ag_dist_reduce op, double *acc, const double *v, size_t n) {
  switch (op) {
    case AG_DIST_SUM:
    case AG_DIST_AVG: for (size_t i = 0; i < n; i++) acc[i] += v[i]; break;
    /* NaN wins, as torch.maximum/minimum */
    case AG_DIST_MAX: for (size_t i = 0; i < n; i++) acc[i] = (v[i] > acc[i] || isnan(v[i])) && !isnan(acc[i]) ? v[i] : acc[i]; break;
    case AG_DIST_MIN: for (size_t i = 0; i < n; i++) acc[i] = (v[i] < acc[i] || isnan(v[i])) && !isnan(acc[i]) ? v[i] : acc[i]; break;
  }
}

/* f32 sum and average, the gradients' case: the same arithmetic as the
 * general path below (double accumulation in source order, one rounding),
 * in typed loops the compiler vectorises. */
static void reduce_f32_sum(bool avg, int nsrc, void *const *srcs, int ndst, void *const *dsts, size_t off,
                           size_t n) {
  double acc[BLOCK];
  for (size_t b = 0; b < n; b += BLOCK) {
    size_t m = n - b < BLOCK ? n - b : BLOCK;
    const float *s0 = (const float *)srcs[0] + off + b;
    for (size_t i = 0; i < m; i++) acc[i] = s0[i];
    for (int k = 1; k < nsrc; k++) {
      const float *sk = (const float *)srcs[k] + off + b;
      for (size_t i = 0; i < m; i++) acc[i] += sk[i];
    }
    if (avg)
      for (size_t i = 0; i < m; i++) acc[i] /= nsrc;
    for (int j = 0; j < ndst; j++) {
      float *d = (float *)dsts[j] + off + b;
      for (size_t i = 0; i < m; i++) d[i] = (float)acc[i];
    }
  }
}

void ag__dist_reduce(ag_dtype dt, ag_dist_reduce op, int nsrc, void *const *srcs, int ndst,
                     void *const *dsts, size_t off, size_t n) {
  if (dt == AG_F32 && (op == AG_DIST_SUM || op == AG_DIST_AVG)) {
    reduce_f32_sum(op == AG_DIST_AVG, nsrc, srcs, ndst, dsts, off, n);
    return;
  }
  double acc[BLOCK], v[BLOCK];
  for (size_t b = 0; b < n; b += BLOCK) {
    size_t m = n - b < BLOCK ? n - b : BLOCK;
    load(dt, srcs[0], off + b, m, acc);
    for (int k = 1; k < nsrc; k++) {
      load(dt, srcs[k], off + b, m, v);
      combine(op, acc, v, m);
    }
    if (op == AG_DIST_AVG)
      for (size_t i = 0; i < m; i++) acc[i] /= nsrc;
    for (int j = 0; j < ndst; j++) store(dt, acc, dsts[j], off + b, m);
  }
}

ag_dtype ag__dist_wire_dtype(ag_dtype dt) { return dt == AG_F16 || dt == AG_BF16 ? AG_F32 : dt; }

void ag__dist_widen(ag_dtype dt, const void *src, float *dst, size_t n) {
  const uint16_t *s = src;
  if (dt == AG_F16) for (size_t i = 0; i < n; i++) dst[i] = ag_f16_to_f32(s[i]);
  else if (dt == AG_BF16) for (size_t i = 0; i < n; i++) dst[i] = ag_bf16_to_f32(s[i]);
}

void ag__dist_narrow(ag_dtype dt, const float *src, void *dst, size_t n) {
  uint16_t *d = dst;
  if (dt == AG_F16) for (size_t i = 0; i < n; i++) d[i] = ag_f32_to_f16(src[i]);
  else if (dt == AG_BF16) for (size_t i = 0; i < n; i++) d[i] = ag_f32_to_bf16(src[i]);
}

void ag__dist_divide(ag_dtype dt, void *buf, size_t n, double div) {
  double acc[BLOCK];
  for (size_t b = 0; b < n; b += BLOCK) {
    size_t m = n - b < BLOCK ? n - b : BLOCK;
    load(dt, buf, b, m, acc);
    for (size_t i = 0; i < m; i++) acc[i] /= div;
    store(dt, acc, buf, b, m);
  }
}
