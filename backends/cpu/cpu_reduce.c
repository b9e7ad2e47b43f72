/* CPU reductions (AG_K_REDUCE: sum, max, min, argmax over [outer, r, inner]):
 * one output per row, tiles of adjacent outputs, or few long rows split into
 * fixed chunks whose partials are combined in order, so the result never
 * depends on the thread count. */
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

/* ---- reductions: every dtype is exact in f64, so values are combined in
 * f64 (sums accumulate in f64; max/min/argmax compare exactly) ---- */

typedef struct racc {
  double v;
  int64_t i;
} racc;

static inline void rcombine(int op, racc *a, double v, int64_t i) {
  switch (op) {
    case AG_R_SUM: a->v += v; break;
    case AG_R_MAX: if (v > a->v || v != v) a->v = v; break;  /* once NaN, stays NaN */
    case AG_R_MIN: if (v < a->v || v != v) a->v = v; break;
    default: /* argmax: first maximum; NaN counts as the maximum */
      if ((v > a->v || (v != v && a->v == a->v))) {
        a->v = v;
        a->i = i;
      }
      break;
  }
}

static inline racc rinit(int op) {
  racc a = {0, 0};
  if (op == AG_R_MAX || op == AG_R_ARGMAX) a.v = -INFINITY;
  else if (op == AG_R_MIN) a.v = INFINITY;
  return a;
}

/* Reduce x[k*st] for k in [k0, k1) into *a (indices reported as k). */
static void reduce_line(int op, ag_dtype dt, const char *x, int64_t st, int64_t k0, int64_t k1,
                        racc *a) {
  double buf[TILE];
  size_t sz = ag__cpu_dtsize(dt);
  for (int64_t k = k0; k < k1; k += TILE) {
    int64_t m = k1 - k < TILE ? k1 - k : TILE;
    load_d(dt, x + (size_t)(k * st) * sz, st, m, buf);
    if (op == AG_R_SUM) {
      /* eight independent partial sums: no add-latency chain, vectorisable */
      double p[8] = {0};
      int64_t j = 0;
      for (; j + 8 <= m; j += 8)
        for (int l = 0; l < 8; l++) p[l] += buf[j + l];
      for (; j < m; j++) p[0] += buf[j];
      a->v += ((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7]));
    } else {
      for (int64_t j = 0; j < m; j++) rcombine(op, a, buf[j], k + j);
    }
  }
}

typedef struct rctx {
  const ag_koperand *out, *x;
  int op;       /* ag_reduce_op */
  double scale; /* SUM's factor */
  int64_t outer, r, inner;
  racc *part; /* split reductions: per-chunk partials */
  int64_t chunk;
} rctx;

static void rstore(const rctx *r, int64_t pos, int64_t n, const racc *a) {
  const ag_koperand *o = r->out;
  size_t sz = ag__cpu_dtsize(o->dtype);
  double v[TILE];
  for (int64_t j = 0; j < n; j++)
    v[j] = r->op == AG_R_ARGMAX ? (double)a[j].i : r->op == AG_R_SUM ? a[j].v * r->scale : a[j].v;
  store_d(o->dtype, ag__cpu_ptr(o) + (size_t)pos * sz, 1, n, v);
}

/* inner == 1: one output per contiguous row. */
static void reduce_rows(void *ctx, int64_t a, int64_t b) {
  const rctx *r = ctx;
  const ag_koperand *x = r->x;
  size_t sz = ag__cpu_dtsize(x->dtype);
  for (int64_t o = a; o < b; o++) {
    racc acc = rinit(r->op);
    reduce_line(r->op, x->dtype, ag__cpu_ptr(x) + (size_t)(o * r->r) * sz, 1, 0, r->r, &acc);
    rstore(r, o, 1, &acc);
  }
}

/* inner > 1: tiles of up to TILE adjacent outputs, combined row by row so
 * the loads stay contiguous. Work item w = (outer index, inner tile). */
static void reduce_cols(void *ctx, int64_t a, int64_t b) {
  const rctx *r = ctx;
  const ag_koperand *x = r->x;
  size_t sz = ag__cpu_dtsize(x->dtype);
  int64_t tiles = (r->inner + TILE - 1) / TILE;
  racc acc[TILE];
  double buf[TILE];
  for (int64_t w = a; w < b; w++) {
    int64_t o = w / tiles, j0 = (w % tiles) * TILE;
    int64_t m = r->inner - j0 < TILE ? r->inner - j0 : TILE;
    for (int64_t j = 0; j < m; j++) acc[j] = rinit(r->op);
    const char *base = ag__cpu_ptr(x) + (size_t)(o * r->r * r->inner + j0) * sz;
    if (r->op == AG_R_SUM && x->dtype == AG_F32) {
      /* The bias gradient of every Linear (a column sum over the rows):
       * widen and add in place, which vectorises, instead of going
       * through the generic f64 loader per row (same f64 sums). */
      double s[TILE] = {0};
      for (int64_t k = 0; k < r->r; k++) {
        const float *p = (const float *)(const void *)(base + (size_t)(k * r->inner) * sz);
        for (int64_t j = 0; j < m; j++) s[j] += (double)p[j];
      }
      for (int64_t j = 0; j < m; j++) acc[j].v = s[j];
      rstore(r, o * r->inner + j0, m, acc);
      continue;
    }
    for (int64_t k = 0; k < r->r; k++) {
      load_d(x->dtype, base + (size_t)(k * r->inner) * sz, 1, m, buf);
      if (r->op == AG_R_SUM)
        for (int64_t j = 0; j < m; j++) acc[j].v += buf[j];
      else
        for (int64_t j = 0; j < m; j++) rcombine(r->op, &acc[j], buf[j], k);
    }
    rstore(r, o * r->inner + j0, m, acc);
  }
}

/* Few long rows: fixed-size chunks reduced in parallel, partials combined
 * in order, so the result does not depend on the thread count. */
static void reduce_chunks(void *ctx, int64_t a, int64_t b) {
  const rctx *r = ctx;
  const ag_koperand *x = r->x;
  size_t sz = ag__cpu_dtsize(x->dtype);
  int64_t per = (r->r + r->chunk - 1) / r->chunk;
  for (int64_t w = a; w < b; w++) {
    int64_t o = w / per, k0 = (w % per) * r->chunk;
    int64_t k1 = k0 + r->chunk < r->r ? k0 + r->chunk : r->r;
    racc acc = rinit(r->op);
    if (r->op == AG_R_ARGMAX && k0 < k1) { /* seed with the first element */
      double v0;
      load_d(x->dtype, ag__cpu_ptr(x) + (size_t)(o * r->r + k0) * sz, 1, 1, &v0);
      acc.v = v0;
      acc.i = k0;
    }
    reduce_line(r->op, x->dtype, ag__cpu_ptr(x) + (size_t)(o * r->r) * sz, 1, k0, k1, &acc);
    r->part[w] = acc;
  }
}

/* i64 input: exact in i64 (f64 would round beyond 2^53); the sum wraps as
 * two's complement. One work item per output, in order along r. */
static void reduce_i64_range(void *ctx, int64_t a, int64_t b) {
  const rctx *r = ctx;
  const int64_t *x = (const int64_t *)ag__cpu_ptr(r->x);
  char *out = ag__cpu_ptr(r->out);
  for (int64_t w = a; w < b; w++) {
    const int64_t *p = x + (w / r->inner) * r->r * r->inner + w % r->inner;
    uint64_t sum = 0;
    int64_t best = 0, bi = 0;
    for (int64_t k = 0; k < r->r; k++) {
      int64_t v = p[k * r->inner];
      sum += (uint64_t)v;
      if (k == 0 || (r->op == AG_R_MIN ? v < best : v > best)) best = v, bi = k;
    }
    if (r->op == AG_R_ARGMAX) ((int32_t *)out)[w] = (int32_t)bi;
    else ((int64_t *)out)[w] = r->op == AG_R_SUM ? (int64_t)sum : best;
  }
}

ag_status cpu_k_reduce(ag_kernel_error *err, const ag_k_reduce *a) {
  (void)err;
  if ((a->call->flags & AG_KF_PORTABLE) && a->variant == AG_R_SUM &&
      (a->x->dtype == AG_F32 || a->x->dtype == AG_F16 || a->x->dtype == AG_BF16))
    return ag__cpu_p_reduce_sum(a);
  if ((a->call->flags & AG_KF_PORTABLE) && a->variant == AG_R_SUM && a->x->dtype == AG_F64)
    return ag_k__not_portable(a->call, "cpu", AG_F64);
  rctx r = {.out = a->out, .x = a->x, .op = a->variant, .scale = a->scale, .outer = a->outer, .r = a->r,
            .inner = a->inner};
  int64_t total = r.outer * r.r * r.inner;
  if (r.outer * r.inner == 0) return AG_OK;
  if (r.x->dtype == AG_I64) {
    ag__cpu_par_for(r.outer * r.inner, total, reduce_i64_range, &r);
    return AG_OK;
  }
  if (r.inner == 1 && r.outer < 8 && total >= AG_CPU_PAR_MIN) {
    r.chunk = 16384;
    int64_t per = (r.r + r.chunk - 1) / r.chunk;
    r.part = malloc((size_t)(per * r.outer) * sizeof *r.part);
    if (!r.part)
      return ag_error_set(AG_ERR_OOM, "%s: no memory for partial sums", a->call->name ? a->call->name : "reduce");
    ag__cpu_par_for(per * r.outer, total, reduce_chunks, &r);
    for (int64_t o = 0; o < r.outer; o++) {
      racc acc = rinit(r.op);
      for (int64_t w = 0; w < per; w++) {
        racc p = r.part[o * per + w];
        if (r.op == AG_R_SUM) acc.v += p.v;
        else rcombine(r.op, &acc, p.v, p.i);
      }
      rstore(&r, o, 1, &acc);
    }
    free(r.part);
  } else if (r.inner == 1) {
    ag__cpu_par_for(r.outer, total, reduce_rows, &r);
  } else {
    ag__cpu_par_for(r.outer * ((r.inner + TILE - 1) / TILE), total, reduce_cols, &r);
  }
  return AG_OK;
}
