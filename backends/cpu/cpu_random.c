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
#include "cpu_tile.h"

static inline float u24(uint32_t r) { return (float)(r >> 8) * 0x1p-24f; }

/* Tiles of TILE elements (a multiple of 4), so no Philox block straddles two
 * chunks of the parallel loop. */
static void rand_range(void *ctx, int64_t ta, int64_t tb) {
  const ag_kernel_call *c = ctx;
  const ag_koperand *o = &c->o[0];
  int64_t n = 1;
  for (int d = 0; d < o->ndim; d++) n *= o->shape[d];
  const bool normal = c->op == AG_K_RAND_NORMAL, dbl = o->dtype == AG_F64;
  const size_t sz = ag__cpu_dtsize(o->dtype);
  char *p = ag__cpu_ptr(o);
  float bf[TILE];
  double bd[TILE];
  for (int64_t t = ta; t < tb; t++) {
    int64_t i0 = t * TILE, m = n - i0 < TILE ? n - i0 : TILE;
    uint32_t r[4];
    if (!normal) {
      const float lo = (float)c->s[0], scale = (float)(c->s[1] - c->s[0]);
      for (int64_t j = 0; j < m; j++) {
        int64_t i = i0 + j;
        if (j == 0 || (i & 3) == 0) ag_philox4x32(c->offset + (uint64_t)(i >> 2), c->seed, r);
        float u = u24(r[i & 3]);
        if (dbl) bd[j] = (double)u * (c->s[1] - c->s[0]) + c->s[0];
        else bf[j] = u * scale + lo;
      }
    } else {
      for (int64_t j = 0; j < m; j++) {
        int64_t i = i0 + j;
        if (j == 0 || (i & 1) == 0) ag_philox4x32(c->offset + (uint64_t)(i >> 1), c->seed, r);
        uint32_t a = r[2 * (i & 1)], b = r[2 * (i & 1) + 1];
        float u1 = (float)((a >> 8) + 1) * 0x1p-24f, u2 = u24(b);
        if (dbl)
          bd[j] = sqrt(-2.0 * log((double)u1)) * cos(6.283185307179586 * (double)u2) * c->s[1] +
                  c->s[0];
        else
          bf[j] = sqrtf(-2.0f * logf(u1)) * cosf(6.2831855f * u2) * (float)c->s[1] +
                  (float)c->s[0];
      }
    }
    if (dbl) store_d(o->dtype, p + (size_t)i0 * sz, 1, m, bd);
    else store_f(o->dtype, p + (size_t)i0 * sz, 1, m, bf);
  }
}

static void k_rand(const ag_kernel_call *c) {
  int64_t n = 1;
  for (int d = 0; d < c->o[0].ndim; d++) n *= c->o[0].shape[d];
  ag__cpu_par_for((n + TILE - 1) / TILE, n * 8, rand_range, (void *)c);
}

static void dropout_range(void *ctx, int64_t ta, int64_t tb) {
  const ag_kernel_call *c = ctx;
  int64_t n = 1;
  for (int d = 0; d < c->o[1].ndim; d++) n *= c->o[1].shape[d];
  const double p = c->s[0];
  const double scale = p < 1 ? 1.0 / (1.0 - p) : 0.0;
  const float pf = (float)p;
  const ag_dtype dx = c->o[1].dtype, dy = c->o[0].dtype, dm = c->o[2].dtype;
  double x[TILE], y[TILE], mk[TILE];
  for (int64_t t = ta; t < tb; t++) {
    int64_t i0 = t * TILE, m = n - i0 < TILE ? n - i0 : TILE;
    load_d(dx, ag__cpu_ptr(&c->o[1]) + (size_t)i0 * ag__cpu_dtsize(dx), 1, m, x);
    uint32_t r[4];
    for (int64_t j = 0; j < m; j++) {
      int64_t i = i0 + j;
      if (j == 0 || (i & 3) == 0) ag_philox4x32(c->offset + (uint64_t)(i >> 2), c->seed, r);
      mk[j] = u24(r[i & 3]) >= pf ? scale : 0.0;
      y[j] = x[j] * mk[j];
    }
    store_d(dy, ag__cpu_ptr(&c->o[0]) + (size_t)i0 * ag__cpu_dtsize(dy), 1, m, y);
    if (c->n_operands > 2 && c->o[2].base)
      store_d(dm, ag__cpu_ptr(&c->o[2]) + (size_t)i0 * ag__cpu_dtsize(dm), 1, m, mk);
  }
}

static void k_dropout(const ag_kernel_call *c) {
  int64_t n = 1;
  for (int d = 0; d < c->o[1].ndim; d++) n *= c->o[1].shape[d];
  ag__cpu_par_for((n + TILE - 1) / TILE, n * 4, dropout_range, (void *)c);
}

ag_status ag__cpu_random(const ag_kernel_call *c) {
  switch (c->op) {
    case AG_K_RAND_UNIFORM:
    case AG_K_RAND_NORMAL: k_rand(c); return AG_OK;
    case AG_K_DROPOUT: k_dropout(c); return AG_OK;
    default:
      return ag_error_set(AG_ERR_INTERNAL, "%s: op %d is not a random-number kernel", c->name ? c->name : "launch",
                          (int)c->op);
  }
}
