/* Helpers every CPU kernel family shares (cpu_kernels.c, cpu_reduce.c,
 * cpu_optim.c): saturating conversions, index operands, the sticky index
 * error, and the strided tile loads and stores that convert any dtype to a
 * compute type (f32, f64, i64) and back. Include it after the family's
 * optimisation pragma, so the loops here are compiled like the kernels
 * that call them. */
#ifndef AG_CPU_TILE_H
#define AG_CPU_TILE_H

#include <math.h>
#include <string.h>
#include <tgmath.h> /* as in the kernels: the generic math names pick the float versions */

#include "cpu_backend.h"
#include "tensor/half.h"

/* Elements per tile: the conversion buffers live on the stack. */
#define TILE 256

/* Defined once per family that includes this header, each family using a
 * subset: plain static functions (the compiler inlines and specialises them
 * per caller as before), without the unused-function warning. */
#define AG_CPU_SHARED static __attribute__((unused))

/* ---- scalar conversions ---- */

static inline int32_t sat_i32(double v) {
  if (!(v == v)) return 0;
  if (v >= 2147483647.0) return INT32_MAX;
  if (v <= -2147483648.0) return INT32_MIN;
  return (int32_t)v;
}

static inline int64_t sat_i64(double v) {
  if (!(v == v)) return 0;
  if (v >= 9223372036854775807.0) return INT64_MAX;
  if (v <= -9223372036854775808.0) return INT64_MIN;
  return (int64_t)v;
}

/* v saturated into integer dtype dt's range (bool: v != 0), as casts and
 * fills from floating values do. */
static inline int64_t sat_int(double v, ag_dtype dt) {
  switch (dt) {
    case AG_I32: return sat_i32(v);
    case AG_BOOL: return v != 0;
    case AG_U8: return !(v == v) || v <= 0 ? 0 : v >= 255 ? 255 : (int64_t)v;
    default: return sat_i64(v);
  }
}

/* Element i of an index operand (i32 or i64). */
static inline int64_t idx_at(const ag_koperand *o, int64_t i) {
  const char *p = (const char *)o->base + o->offset;
  return o->dtype == AG_I64 ? ((const int64_t *)p)[i] : ((const int32_t *)p)[i];
}

AG_CPU_SHARED void kerr(ag_kernel_error *e, ag_kop op, int64_t idx, int64_t limit) {
  if (e->code) return;
  e->code = AG_ERR_INDEX;
  e->kop = op;
  e->index = idx;
  e->limit = limit;
}

/* ---- strided tile loads and stores into the compute types ---- */

AG_CPU_SHARED void load_f(ag_dtype dt, const char *p, int64_t st, int64_t n, float *o) {
  switch (dt) {
    case AG_F32: {
      const float *s = (const float *)p;
      if (st == 1) memcpy(o, s, (size_t)n * 4);
      else for (int64_t i = 0; i < n; i++) o[i] = s[i * st];
    } break;
    case AG_F16: {
      const uint16_t *s = (const uint16_t *)p;
      if (st == 1) ag__f16_to_f32_n(s, o, (size_t)n);
      else for (int64_t i = 0; i < n; i++) o[i] = ag_f16_to_f32(s[i * st]);
    } break;
    case AG_BF16: {
      const uint16_t *s = (const uint16_t *)p;
      if (st == 1) ag__bf16_to_f32_n(s, o, (size_t)n);
      else for (int64_t i = 0; i < n; i++) o[i] = ag_bf16_to_f32(s[i * st]);
    } break;
    case AG_I32: {
      const int32_t *s = (const int32_t *)p;
      for (int64_t i = 0; i < n; i++) o[i] = (float)s[i * st];
    } break;
    case AG_I64: {
      const int64_t *s = (const int64_t *)p;
      for (int64_t i = 0; i < n; i++) o[i] = (float)s[i * st];
    } break;
    case AG_U8:
    case AG_BOOL: {
      const uint8_t *s = (const uint8_t *)p;
      for (int64_t i = 0; i < n; i++) o[i] = (float)s[i * st];
    } break;
    case AG_F64:
    case AG_DTYPE_COUNT: {
      const double *s = (const double *)p;
      for (int64_t i = 0; i < n; i++) o[i] = (float)s[i * st];
    } break;
  }
}

AG_CPU_SHARED void store_f(ag_dtype dt, char *p, int64_t st, int64_t n, const float *v) {
  switch (dt) {
    case AG_F32: {
      float *d = (float *)p;
      if (st == 1) memcpy(d, v, (size_t)n * 4);
      else for (int64_t i = 0; i < n; i++) d[i * st] = v[i];
    } break;
    case AG_F16: {
      uint16_t *d = (uint16_t *)p;
      if (st == 1) ag__f32_to_f16_n(v, d, (size_t)n);
      else for (int64_t i = 0; i < n; i++) d[i * st] = ag_f32_to_f16(v[i]);
    } break;
    case AG_BF16: {
      uint16_t *d = (uint16_t *)p;
      if (st == 1) ag__f32_to_bf16_n(v, d, (size_t)n);
      else for (int64_t i = 0; i < n; i++) d[i * st] = ag_f32_to_bf16(v[i]);
    } break;
    case AG_I32: {
      int32_t *d = (int32_t *)p;
      for (int64_t i = 0; i < n; i++) d[i * st] = sat_i32(v[i]);
    } break;
    case AG_I64: {
      int64_t *d = (int64_t *)p;
      for (int64_t i = 0; i < n; i++) d[i * st] = sat_i64(v[i]);
    } break;
    case AG_U8:
    case AG_BOOL: {
      uint8_t *d = (uint8_t *)p;
      for (int64_t i = 0; i < n; i++) d[i * st] = (uint8_t)sat_int(v[i], dt);
    } break;
    case AG_F64:
    case AG_DTYPE_COUNT: {
      double *d = (double *)p;
      for (int64_t i = 0; i < n; i++) d[i * st] = v[i];
    } break;
  }
}

AG_CPU_SHARED void load_d(ag_dtype dt, const char *p, int64_t st, int64_t n, double *o) {
  switch (dt) {
    case AG_F64: {
      const double *s = (const double *)p;
      if (st == 1) memcpy(o, s, (size_t)n * 8);
      else for (int64_t i = 0; i < n; i++) o[i] = s[i * st];
    } break;
    case AG_I32: {
      const int32_t *s = (const int32_t *)p;
      for (int64_t i = 0; i < n; i++) o[i] = s[i * st];
    } break;
    case AG_I64: {
      const int64_t *s = (const int64_t *)p;
      for (int64_t i = 0; i < n; i++) o[i] = (double)s[i * st];
    } break;
    case AG_U8:
    case AG_BOOL: {
      const uint8_t *s = (const uint8_t *)p;
      for (int64_t i = 0; i < n; i++) o[i] = s[i * st];
    } break;
    case AG_F32: {
      const float *s = (const float *)p;
      if (st == 1) for (int64_t i = 0; i < n; i++) o[i] = s[i];
      else for (int64_t i = 0; i < n; i++) o[i] = s[i * st];
    } break;
    default: {
      float tmp[TILE];
      for (int64_t i = 0; i < n; i += TILE) {
        int64_t m = n - i < TILE ? n - i : TILE;
        load_f(dt, p + (size_t)(i * st) * ag__cpu_dtsize(dt), st, m, tmp);
        for (int64_t j = 0; j < m; j++) o[i + j] = tmp[j];
      }
    } break;
  }
}

AG_CPU_SHARED void store_d(ag_dtype dt, char *p, int64_t st, int64_t n, const double *v) {
  switch (dt) {
    case AG_F64: {
      double *d = (double *)p;
      if (st == 1) memcpy(d, v, (size_t)n * 8);
      else for (int64_t i = 0; i < n; i++) d[i * st] = v[i];
    } break;
    case AG_I32: {
      int32_t *d = (int32_t *)p;
      for (int64_t i = 0; i < n; i++) d[i * st] = sat_i32(v[i]);
    } break;
    case AG_I64: {
      int64_t *d = (int64_t *)p;
      for (int64_t i = 0; i < n; i++) d[i * st] = sat_i64(v[i]);
    } break;
    case AG_U8:
    case AG_BOOL: {
      uint8_t *d = (uint8_t *)p;
      for (int64_t i = 0; i < n; i++) d[i * st] = (uint8_t)sat_int(v[i], dt);
    } break;
    default: {
      float tmp[TILE];
      for (int64_t i = 0; i < n; i += TILE) {
        int64_t m = n - i < TILE ? n - i : TILE;
        for (int64_t j = 0; j < m; j++) tmp[j] = (float)v[i + j];
        store_f(dt, p + (size_t)(i * st) * ag__cpu_dtsize(dt), st, m, tmp);
      }
    } break;
  }
}

/* i64 compute type: only integer operands reach it. Stores keep the low
 * bits (two's complement wrap-around); bool stores v != 0. */
AG_CPU_SHARED void load_i(ag_dtype dt, const char *p, int64_t st, int64_t n, int64_t *o) {
  switch (dt) {
    case AG_I64:
      if (st == 1) memcpy(o, p, (size_t)n * 8);
      else for (int64_t i = 0; i < n; i++) o[i] = ((const int64_t *)p)[i * st];
      break;
    case AG_I32: for (int64_t i = 0; i < n; i++) o[i] = ((const int32_t *)p)[i * st]; break;
    default: for (int64_t i = 0; i < n; i++) o[i] = ((const uint8_t *)p)[i * st]; break;
  }
}

AG_CPU_SHARED void store_i(ag_dtype dt, char *p, int64_t st, int64_t n, const int64_t *v) {
  switch (dt) {
    case AG_I64:
      if (st == 1) memcpy(p, v, (size_t)n * 8);
      else for (int64_t i = 0; i < n; i++) ((int64_t *)p)[i * st] = v[i];
      break;
    case AG_I32: for (int64_t i = 0; i < n; i++) ((int32_t *)p)[i * st] = (int32_t)(uint32_t)(uint64_t)v[i]; break;
    case AG_BOOL: for (int64_t i = 0; i < n; i++) ((uint8_t *)p)[i * st] = v[i] != 0; break;
    default: for (int64_t i = 0; i < n; i++) ((uint8_t *)p)[i * st] = (uint8_t)(uint64_t)v[i]; break;
  }
}

/* cond != 0 in the condition's own dtype (a tiny f64 is still true). */
AG_CPU_SHARED void load_mask(ag_dtype dt, const char *p, int64_t st, int64_t n, uint8_t *m) {
  switch (dt) {
    case AG_F32: for (int64_t i = 0; i < n; i++) m[i] = ((const float *)p)[i * st] != 0; break;
    case AG_F64: for (int64_t i = 0; i < n; i++) m[i] = ((const double *)p)[i * st] != 0; break;
    case AG_I32: for (int64_t i = 0; i < n; i++) m[i] = ((const int32_t *)p)[i * st] != 0; break;
    case AG_I64: for (int64_t i = 0; i < n; i++) m[i] = ((const int64_t *)p)[i * st] != 0; break;
    case AG_U8:
    case AG_BOOL: for (int64_t i = 0; i < n; i++) m[i] = ((const uint8_t *)p)[i * st] != 0; break;
    default: /* f16/bf16: any bit but the sign (NaN counts as true, as in C) */
      for (int64_t i = 0; i < n; i++) m[i] = (((const uint16_t *)p)[i * st] & 0x7fffu) != 0;
      break;
  }
}


/* ---- operands ---- */

/* Element i of operand o, as a double. */
AG_CPU_SHARED double scalar_at(const ag_koperand *o, int64_t i) {
  double v;
  load_d(o->dtype, ag__cpu_ptr(o) + (size_t)i * ag__cpu_dtsize(o->dtype), 1, 1, &v);
  return v;
}

/* Element i of operand o = v, in o's dtype. */
AG_CPU_SHARED void store_at(const ag_koperand *o, int64_t i, double v) {
  store_d(o->dtype, ag__cpu_ptr(o) + (size_t)i * ag__cpu_dtsize(o->dtype), 1, 1, &v);
}

/* The start of a multi-list tensor (AGK_MULTI). */
static inline char *entry_ptr(const ag_kmulti_entry *e) { return (char *)e->base + e->offset; }

/* The first n elements of multi-list tensor e = v (nothing when e has no
 * base: not asked for). */
AG_CPU_SHARED void store_entry(const ag_kmulti_entry *e, int64_t n, const double *v) {
  if (e->base) store_d(e->dtype, entry_ptr(e), 1, n, v);
}

#endif
