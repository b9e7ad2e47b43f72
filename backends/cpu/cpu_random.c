/* CPU random numbers: uniform and normal fills and dropout, from the
 * counter-based Philox4x32-10 stream (core/tensor/philox.c), so every
 * element's value depends only on the seed, the offset and its index, never
 * on how the work is split across threads. */
#if defined(__GNUC__) && !defined(__clang__)
/* Compiled as cpu_kernels.c is (see there): -O3's vectoriser, no trapping math. */
#pragma GCC optimize("O3", "no-trapping-math")
#endif
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <tgmath.h>

#include "cpu_backend.h"
#include "cpu_portable.h"
#include "cpu_tile.h"

static inline float u24(uint32_t r) { return (float)(r >> 8) * 0x1p-24f; }

/* A fill with random numbers: uniform in [p0, p1), or normal with mean p0
 * and standard deviation p1, from the call's seed and offset. */
typedef struct rand_job {
  const ag_koperand *out;
  bool normal;
  double p0, p1;
  uint64_t seed, offset;
} rand_job;

static int64_t numel_of(const ag_koperand *o) {
  int64_t n = 1;
  for (int d = 0; d < o->ndim; d++) n *= o->shape[d];
  return n;
}

/* Tiles of TILE elements (a multiple of 4), so no Philox block straddles two
 * chunks of the parallel loop. */
static void rand_range(void *ctx, int64_t ta, int64_t tb) {
  const rand_job *job = ctx;
  const ag_koperand *o = job->out;
  const int64_t n = numel_of(o);
  const bool normal = job->normal, dbl = o->dtype == AG_F64;
  const size_t sz = ag__cpu_dtsize(o->dtype);
  char *p = ag__cpu_ptr(o);
  float bf[TILE];
  double bd[TILE];
  for (int64_t t = ta; t < tb; t++) {
    int64_t i0 = t * TILE, m = n - i0 < TILE ? n - i0 : TILE;
    uint32_t r[4];
    if (!normal) {
      const float lo = (float)job->p0, scale = (float)(job->p1 - job->p0);
      for (int64_t j = 0; j < m; j++) {
        int64_t i = i0 + j;
        if (j == 0 || (i & 3) == 0) ag_philox4x32(job->offset + (uint64_t)(i >> 2), job->seed, r);
        float u = u24(r[i & 3]);
        if (dbl) bd[j] = (double)u * (job->p1 - job->p0) + job->p0;
        else bf[j] = u * scale + lo;
      }
    } else {
      for (int64_t j = 0; j < m; j++) {
        int64_t i = i0 + j;
        if (j == 0 || (i & 1) == 0) ag_philox4x32(job->offset + (uint64_t)(i >> 1), job->seed, r);
        uint32_t a = r[2 * (i & 1)], b = r[2 * (i & 1) + 1];
        float u1 = (float)((a >> 8) + 1) * 0x1p-24f, u2 = u24(b);
        if (dbl)
          bd[j] = sqrt(-2.0 * log((double)u1)) * cos(6.283185307179586 * (double)u2) * job->p1 + job->p0;
        else
          bf[j] = sqrtf(-2.0f * logf(u1)) * cosf(6.2831855f * u2) * (float)job->p1 + (float)job->p0;
      }
    }
    if (dbl) store_d(o->dtype, p + (size_t)i0 * sz, 1, m, bd);
    else store_f(o->dtype, p + (size_t)i0 * sz, 1, m, bf);
  }
}

static void k_rand(const rand_job *j) {
  const int64_t n = numel_of(j->out);
  ag__cpu_par_for((n + TILE - 1) / TILE, n * 8, rand_range, (void *)j);
}

ag_status cpu_k_rand_uniform(ag_kernel_error *err, const ag_k_rand_uniform *a) {
  if (a->call->flags & AG_KF_PORTABLE) return ag__cpu_p_rand_uniform(a);
  (void)err;
  k_rand(&(rand_job){.out = a->out, .normal = false, .p0 = a->lo, .p1 = a->hi, .seed = a->call->seed,
                     .offset = a->call->offset});
  return AG_OK;
}

ag_status cpu_k_rand_normal(ag_kernel_error *err, const ag_k_rand_normal *a) {
  if (a->call->flags & AG_KF_PORTABLE) return ag__cpu_p_rand_normal(a);
  (void)err;
  k_rand(&(rand_job){.out = a->out, .normal = true, .p0 = a->mean, .p1 = a->std, .seed = a->call->seed,
                     .offset = a->call->offset});
  return AG_OK;
}

static void dropout_range(void *ctx, int64_t ta, int64_t tb) {
  const ag_k_dropout *a = ctx;
  const ag_kernel_call *c = a->call; /* seed, offset */
  const int64_t n = numel_of(a->x);
  const double p = a->p;
  const double scale = p < 1 ? 1.0 / (1.0 - p) : 0.0;
  const float pf = (float)p;
  const ag_dtype dx = a->x->dtype, dy = a->y->dtype;
  double x[TILE], y[TILE], mk[TILE];
  for (int64_t t = ta; t < tb; t++) {
    int64_t i0 = t * TILE, m = n - i0 < TILE ? n - i0 : TILE;
    load_d(dx, ag__cpu_ptr(a->x) + (size_t)i0 * ag__cpu_dtsize(dx), 1, m, x);
    uint32_t r[4];
    for (int64_t j = 0; j < m; j++) {
      int64_t i = i0 + j;
      if (j == 0 || (i & 3) == 0) ag_philox4x32(c->offset + (uint64_t)(i >> 2), c->seed, r);
      mk[j] = u24(r[i & 3]) >= pf ? scale : 0.0;
      y[j] = x[j] * mk[j];
    }
    store_d(dy, ag__cpu_ptr(a->y) + (size_t)i0 * ag__cpu_dtsize(dy), 1, m, y);
    if (a->mask && a->mask->base)
      store_d(a->mask->dtype, ag__cpu_ptr(a->mask) + (size_t)i0 * ag__cpu_dtsize(a->mask->dtype), 1, m, mk);
  }
}

ag_status cpu_k_dropout(ag_kernel_error *err, const ag_k_dropout *a) {
  if (a->call->flags & AG_KF_PORTABLE) return ag__cpu_p_dropout(a);
  (void)err;
  const int64_t n = numel_of(a->x);
  ag__cpu_par_for((n + TILE - 1) / TILE, n * 4, dropout_range, (void *)a);
  return AG_OK;
}
