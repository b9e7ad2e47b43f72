/* CPU row kernels: softmax and log-softmax, cross-entropy, layer norm and
 * RMS norm (forward and backward), variance, cumulative sums, gather,
 * top-k and embedding. Rows are converted to a compute type (f32 for
 * f32/f16/bf16, f64 for f64) and run through the bodies of cpu_rows.inc,
 * threaded over rows by the host pool. Dispatched from cpu_kernels.c
 * (ag__cpu_rows). */
#if defined(__GNUC__) && !defined(__clang__)
/* The loops here are written to be vectorised; -O2's "very cheap" cost model
 * refuses any loop that needs an alias check or a remainder loop, and with
 * trapping math a float compare (a clamp, a max) stays a branch. No kernel
 * reads the floating-point exception flags. */
#pragma GCC optimize("O3", "no-trapping-math")
#endif
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <tgmath.h>

#include "cpu_backend.h"
#include "cpu_tile.h"
#include "cpu_vmath.h"
#include "tensor/half.h"

typedef ag_cpu_range_fn range_fn;
#define par_for ag__cpu_par_for

/* ---- row I/O for the row kernels: a direct pointer when the data is
 * already in the compute type, else a converted copy in buf ---- */

static const float *rowin_f(ag_dtype dt, const char *p, int64_t n, float *buf) {
  if (dt == AG_F32) return (const float *)p;
  load_f(dt, p, 1, n, buf);
  return buf;
}
static float *rowdst_f(ag_dtype dt, char *p, float *buf) { return dt == AG_F32 ? (float *)p : buf; }
static void rowout_f(ag_dtype dt, char *p, int64_t n, const float *v) {
  if ((const char *)v != p) store_f(dt, p, 1, n, v);
}
static const double *rowin_d(ag_dtype dt, const char *p, int64_t n, double *buf) {
  if (dt == AG_F64) return (const double *)p;
  load_d(dt, p, 1, n, buf);
  return buf;
}
static double *rowdst_d(ag_dtype dt, char *p, double *buf) { return dt == AG_F64 ? (double *)p : buf; }
static void rowout_d(ag_dtype dt, char *p, int64_t n, const double *v) {
  if ((const char *)v != p) store_d(dt, p, 1, n, v);
}

/* ---- type-generic bodies: f32 (and AVX2+FMA on x86), f64 ---- */

#define CPU_BODY "cpu_rows.inc"
#include "cpu_variants.inc"

/* ---- row kernels ---- */

typedef struct rowctx {
  const ag_kernel_call *c;
  int64_t rows, cols;
  atomic_bool oom;
  ag_kernel_error err; /* index errors found by the serial pre-scan */
} rowctx;

/* Scratch for `nbuf` converted rows of `cols` elements of `esz` bytes. */
static void *row_scratch(rowctx *r, int nbuf, size_t esz) {
  void *p = malloc((size_t)nbuf * (size_t)(r->cols > 0 ? r->cols : 1) * esz);
  if (!p) atomic_store(&r->oom, true);
  return p;
}

static void softmax_rows(void *ctx, int64_t a, int64_t b) {
  rowctx *r = ctx;
  const ag_kernel_call *c = r->c;
  const int64_t n = r->cols;
  const ag_dtype dy = c->o[0].dtype, dx = c->o[1].dtype;
  char *yp = ag__cpu_ptr(&c->o[0]);
  const char *xp = ag__cpu_ptr(&c->o[1]);
  size_t sy = ag__cpu_dtsize(dy) * (size_t)n, sx = ag__cpu_dtsize(dx) * (size_t)n;
  if (dy == AG_F64) {
    double *buf = row_scratch(r, 2, 8);
    if (!buf) return;
    for (int64_t i = a; i < b; i++) {
      const double *x = rowin_d(dx, xp + i * sx, n, buf);
      double *y = rowdst_d(dy, yp + i * sy, buf + n);
      softmax_row_d(c->sub, y, x, n);
      rowout_d(dy, yp + i * sy, n, y);
    }
    free(buf);
  } else {
    float *buf = row_scratch(r, 2, 4);
    if (!buf) return;
    for (int64_t i = a; i < b; i++) {
      if (i + 1 < b)
        for (size_t k = 0; k < sx; k += 64) __builtin_prefetch(xp + (i + 1) * sx + k);
      const float *x = rowin_f(dx, xp + i * sx, n, buf);
      float *y = rowdst_f(dy, yp + i * sy, buf + n);
      FV(softmax_row_f)(c->sub, y, x, n);
      rowout_f(dy, yp + i * sy, n, y);
    }
    free(buf);
  }
}

static void softmax_bwd_rows(void *ctx, int64_t a, int64_t b) {
  rowctx *r = ctx;
  const ag_kernel_call *c = r->c;
  const int64_t n = r->cols;
  const ag_dtype d0 = c->o[0].dtype, d1 = c->o[1].dtype, d2 = c->o[2].dtype;
  char *p0 = ag__cpu_ptr(&c->o[0]);
  const char *p1 = ag__cpu_ptr(&c->o[1]), *p2 = ag__cpu_ptr(&c->o[2]);
  size_t s0 = ag__cpu_dtsize(d0) * (size_t)n, s1 = ag__cpu_dtsize(d1) * (size_t)n,
         s2 = ag__cpu_dtsize(d2) * (size_t)n;
  if (d0 == AG_F64) {
    double *buf = row_scratch(r, 3, 8);
    if (!buf) return;
    for (int64_t i = a; i < b; i++) {
      const double *dy = rowin_d(d1, p1 + i * s1, n, buf);
      const double *y = rowin_d(d2, p2 + i * s2, n, buf + n);
      double *dx = rowdst_d(d0, p0 + i * s0, buf + 2 * n);
      softmax_bwd_row_d(c->sub, dx, dy, y, n);
      rowout_d(d0, p0 + i * s0, n, dx);
    }
    free(buf);
  } else {
    float *buf = row_scratch(r, 3, 4);
    if (!buf) return;
    for (int64_t i = a; i < b; i++) {
      const float *dy = rowin_f(d1, p1 + i * s1, n, buf);
      const float *y = rowin_f(d2, p2 + i * s2, n, buf + n);
      float *dx = rowdst_f(d0, p0 + i * s0, buf + 2 * n);
      FV(softmax_bwd_row_f)(c->sub, dx, dy, y, n);
      rowout_f(d0, p0 + i * s0, n, dx);
    }
    free(buf);
  }
}

/* Target of row i, or -1 when ignored or out of range (the pre-scan has
 * recorded the error; such rows get the safe value). */
static int64_t ce_target(const ag_kernel_call *c, int64_t i, int64_t C, bool *bad) {
  int64_t t = idx_at(&c->o[2], i);
  *bad = false;
  if (t == c->i[2]) return -1;
  if (t < 0 || t >= C) {
    *bad = true;
    return -1;
  }
  return t;
}

static void ce_rows(void *ctx, int64_t a, int64_t b) {
  rowctx *r = ctx;
  const ag_kernel_call *c = r->c;
  const int64_t n = r->cols;
  const ag_dtype dl = c->o[1].dtype, dloss = c->o[0].dtype;
  const char *lp = ag__cpu_ptr(&c->o[1]);
  char *op = ag__cpu_ptr(&c->o[0]);
  size_t sl = ag__cpu_dtsize(dl) * (size_t)n, so = ag__cpu_dtsize(dloss);
  void *buf = row_scratch(r, 1, dl == AG_F64 ? 8 : 4);
  if (!buf) return;
  for (int64_t i = a; i < b; i++) {
    bool bad;
    int64_t t = ce_target(c, i, n, &bad);
    double loss = 0;
    if (bad) loss = NAN;
    else if (t >= 0) {
      if (dl == AG_F64) {
        const double *x = rowin_d(dl, lp + i * sl, n, buf);
        loss = logsumexp_d(x, n) - x[t];
      } else {
        const float *x = rowin_f(dl, lp + i * sl, n, buf);
        loss = (double)(FV(logsumexp_f)(x, n) - x[t]);
      }
    }
    store_d(dloss, op + (size_t)i * so, 1, 1, &loss);
  }
  free(buf);
}

static void ce_bwd_rows(void *ctx, int64_t a, int64_t b) {
  rowctx *r = ctx;
  const ag_kernel_call *c = r->c;
  const int64_t n = r->cols;
  const ag_dtype d0 = c->o[0].dtype, dl = c->o[1].dtype, dg = c->o[3].dtype;
  char *p0 = ag__cpu_ptr(&c->o[0]);
  const char *lp = ag__cpu_ptr(&c->o[1]), *gp = ag__cpu_ptr(&c->o[3]);
  const int64_t gst = c->o[3].ndim ? c->o[3].strides[0] : 0;
  size_t s0 = ag__cpu_dtsize(d0) * (size_t)n, sl = ag__cpu_dtsize(dl) * (size_t)n;
  size_t sg = ag__cpu_dtsize(dg);
  const bool dbl = d0 == AG_F64;
  char *buf = row_scratch(r, 2, dbl ? 8 : 4);
  if (!buf) return;
  for (int64_t i = a; i < b; i++) {
    bool bad;
    int64_t t = ce_target(c, i, n, &bad);
    double g;
    load_d(dg, gp + (size_t)(i * gst) * sg, 1, 1, &g);
    bool zero = bad || t < 0;
    if (dbl) {
      double *dx = rowdst_d(d0, p0 + i * s0, (double *)buf + n);
      if (zero) memset(dx, 0, (size_t)n * 8);
      else ce_bwd_row_d(dx, rowin_d(dl, lp + i * sl, n, (double *)buf), n, t, g);
      rowout_d(d0, p0 + i * s0, n, dx);
    } else {
      float *dx = rowdst_f(d0, p0 + i * s0, (float *)buf + n);
      if (zero) memset(dx, 0, (size_t)n * 4);
      else FV(ce_bwd_row_f)(dx, rowin_f(dl, lp + i * sl, n, (float *)buf), n, t, (float)g);
      rowout_f(d0, p0 + i * s0, n, dx);
    }
  }
  free(buf);
}

static void ce_prescan(rowctx *r, ag_kop op) {
  for (int64_t i = 0; i < r->rows; i++) {
    int64_t t = idx_at(&r->c->o[2], i);
    if (t != r->c->i[2] && (t < 0 || t >= r->cols)) {
      kerr(&r->err, op, t, r->cols);
      break;
    }
  }
}

static void layernorm_rows(void *ctx, int64_t a, int64_t b) {
  rowctx *r = ctx;
  const ag_kernel_call *c = r->c;
  const int64_t n = r->cols;
  const ag_dtype dy = c->o[0].dtype, dx = c->o[1].dtype;
  char *yp = ag__cpu_ptr(&c->o[0]);
  const char *xp = ag__cpu_ptr(&c->o[1]);
  size_t sy = ag__cpu_dtsize(dy) * (size_t)n, sx = ag__cpu_dtsize(dx) * (size_t)n;
  const bool dbl = dy == AG_F64, hw = present(c, 2), hb = present(c, 3);
  char *buf = row_scratch(r, 4, dbl ? 8 : 4);
  if (!buf) return;
  const size_t esz = dbl ? 8 : 4;
  const void *w = NULL, *bias = NULL;
  if (dbl) {
    if (hw) w = rowin_d(c->o[2].dtype, ag__cpu_ptr(&c->o[2]), n, (double *)(buf + 2 * n * esz));
    if (hb) bias = rowin_d(c->o[3].dtype, ag__cpu_ptr(&c->o[3]), n, (double *)(buf + 3 * n * esz));
  } else {
    if (hw) w = rowin_f(c->o[2].dtype, ag__cpu_ptr(&c->o[2]), n, (float *)(buf + 2 * n * esz));
    if (hb) bias = rowin_f(c->o[3].dtype, ag__cpu_ptr(&c->o[3]), n, (float *)(buf + 3 * n * esz));
  }
  for (int64_t i = a; i < b; i++) {
    /* Statistics leave the row in double; stored in the dtype of o4/o5 (f64
     * for f64 x, so the f64 backward reads them unrounded). */
    double mean, rstd;
    if (dbl) {
      const double *x = rowin_d(dx, xp + i * sx, n, (double *)buf);
      double *y = rowdst_d(dy, yp + i * sy, (double *)buf + n);
      layernorm_row_d(y, x, w, bias, n, c->s[0], &mean, &rstd);
      rowout_d(dy, yp + i * sy, n, y);
    } else {
      const float *x = rowin_f(dx, xp + i * sx, n, (float *)buf);
      float *y = rowdst_f(dy, yp + i * sy, (float *)buf + n);
      FV(layernorm_row_f)(y, x, w, bias, n, c->s[0], &mean, &rstd);
      rowout_f(dy, yp + i * sy, n, y);
    }
    if (present(c, 4)) store_d(c->o[4].dtype, ag__cpu_ptr(&c->o[4]) + (size_t)i * ag__cpu_dtsize(c->o[4].dtype), 1, 1, &mean);
    if (present(c, 5)) store_d(c->o[5].dtype, ag__cpu_ptr(&c->o[5]) + (size_t)i * ag__cpu_dtsize(c->o[5].dtype), 1, 1, &rstd);
  }
  free(buf);
}

static void layernorm_bwd_rows(void *ctx, int64_t a, int64_t b) {
  rowctx *r = ctx;
  const ag_kernel_call *c = r->c;
  const int64_t n = r->cols;
  const ag_dtype d0 = c->o[0].dtype, d1 = c->o[1].dtype, d2 = c->o[2].dtype;
  char *p0 = ag__cpu_ptr(&c->o[0]);
  const char *p1 = ag__cpu_ptr(&c->o[1]), *p2 = ag__cpu_ptr(&c->o[2]);
  size_t s0 = ag__cpu_dtsize(d0) * (size_t)n, s1 = ag__cpu_dtsize(d1) * (size_t)n,
         s2 = ag__cpu_dtsize(d2) * (size_t)n;
  const bool dbl = d0 == AG_F64, hw = present(c, 5);
  const size_t esz = dbl ? 8 : 4;
  char *buf = row_scratch(r, 4, esz);
  if (!buf) return;
  const void *w = NULL;
  if (hw)
    w = dbl ? (const void *)rowin_d(c->o[5].dtype, ag__cpu_ptr(&c->o[5]), n, (double *)(buf + 3 * n * esz))
            : (const void *)rowin_f(c->o[5].dtype, ag__cpu_ptr(&c->o[5]), n, (float *)(buf + 3 * n * esz));
  for (int64_t i = a; i < b; i++) {
    double mean = scalar_at(&c->o[3], i), rstd = scalar_at(&c->o[4], i);
    if (dbl) {
      const double *dy = rowin_d(d1, p1 + i * s1, n, (double *)buf);
      const double *x = rowin_d(d2, p2 + i * s2, n, (double *)buf + n);
      double *dx = rowdst_d(d0, p0 + i * s0, (double *)buf + 2 * n);
      layernorm_bwd_row_d(dx, dy, x, w, n, mean, rstd);
      rowout_d(d0, p0 + i * s0, n, dx);
    } else {
      const float *dy = rowin_f(d1, p1 + i * s1, n, (float *)buf);
      const float *x = rowin_f(d2, p2 + i * s2, n, (float *)buf + n);
      float *dx = rowdst_f(d0, p0 + i * s0, (float *)buf + 2 * n);
      FV(layernorm_bwd_row_f)(dx, dy, x, w, n, (float)mean, (float)rstd);
      rowout_f(d0, p0 + i * s0, n, dx);
    }
  }
  free(buf);
}

/* dw = sum_rows dy * xhat, db = sum_rows dy, in f64, overwriting t[0], t[1]. */
static ag_status layernorm_bwd_params(const ag_kernel_call *c, int64_t N, int64_t D) {
  double *acc = calloc((size_t)(4 * (D > 0 ? D : 1)), sizeof(double));
  if (!acc) return ag_error_set(AG_ERR_OOM, "%s: no memory for weight gradients", c->name ? c->name : "layer_norm");
  double *dw = acc, *db = acc + D, *dy = acc + 2 * D, *x = acc + 3 * D;
  const ag_dtype d1 = c->o[1].dtype, d2 = c->o[2].dtype;
  for (int64_t i = 0; i < N; i++) {
    double mean = scalar_at(&c->o[3], i), rstd = scalar_at(&c->o[4], i);
    load_d(d1, ag__cpu_ptr(&c->o[1]) + (size_t)(i * D) * ag__cpu_dtsize(d1), 1, D, dy);
    load_d(d2, ag__cpu_ptr(&c->o[2]) + (size_t)(i * D) * ag__cpu_dtsize(d2), 1, D, x);
    for (int64_t j = 0; j < D; j++) {
      dw[j] += dy[j] * ((x[j] - mean) * rstd);
      db[j] += dy[j];
    }
  }
  const ag_kmulti *m = c->multi;
  for (int k = 0; k < 2 && k < m->count; k++)
    if (m->t[k].base)
      store_d(m->t[k].dtype, (char *)m->t[k].base + m->t[k].offset, 1, D, k == 0 ? dw : db);
  free(acc);
  return AG_OK;
}

/* RMS norm rows in double for every dtype (the CPU is the reference):
 * rstd = 1/sqrt(mean(x^2) + eps), y = x * rstd * w. */
static void rmsnorm_rows(void *ctx, int64_t a, int64_t b) {
  rowctx *r = ctx;
  const ag_kernel_call *c = r->c;
  const int64_t n = r->cols;
  const ag_dtype dy = c->o[0].dtype, dx = c->o[1].dtype;
  char *yp = ag__cpu_ptr(&c->o[0]);
  const char *xp = ag__cpu_ptr(&c->o[1]);
  double *buf = row_scratch(r, 2, 8);
  if (!buf) return;
  double *x = buf, *w = buf + n;
  if (present(c, 2)) load_d(c->o[2].dtype, ag__cpu_ptr(&c->o[2]), 1, n, w);
  else
    for (int64_t j = 0; j < n; j++) w[j] = 1;
  for (int64_t i = a; i < b; i++) {
    load_d(dx, xp + (size_t)(i * n) * ag__cpu_dtsize(dx), 1, n, x);
    double ss = 0;
    for (int64_t j = 0; j < n; j++) ss += x[j] * x[j];
    double rstd = 1 / sqrt(ss / (double)n + c->s[0]);
    for (int64_t j = 0; j < n; j++) x[j] = x[j] * rstd * w[j];
    store_d(dy, yp + (size_t)(i * n) * ag__cpu_dtsize(dy), 1, n, x);
    if (present(c, 3)) store_d(c->o[3].dtype, ag__cpu_ptr(&c->o[3]) + (size_t)i * ag__cpu_dtsize(c->o[3].dtype), 1, 1, &rstd);
  }
  free(buf);
}

/* dx = rstd * (g - x * rstd^2 * mean(g * x)), g = dy * w, in double. */
static void rmsnorm_bwd_rows(void *ctx, int64_t a, int64_t b) {
  rowctx *r = ctx;
  const ag_kernel_call *c = r->c;
  const int64_t n = r->cols;
  const ag_dtype d0 = c->o[0].dtype, d1 = c->o[1].dtype, d2 = c->o[2].dtype;
  double *buf = row_scratch(r, 3, 8);
  if (!buf) return;
  double *g = buf, *x = buf + n, *w = buf + 2 * n;
  if (present(c, 4)) load_d(c->o[4].dtype, ag__cpu_ptr(&c->o[4]), 1, n, w);
  else
    for (int64_t j = 0; j < n; j++) w[j] = 1;
  for (int64_t i = a; i < b; i++) {
    double rstd = scalar_at(&c->o[3], i), s = 0;
    load_d(d1, ag__cpu_ptr(&c->o[1]) + (size_t)(i * n) * ag__cpu_dtsize(d1), 1, n, g);
    load_d(d2, ag__cpu_ptr(&c->o[2]) + (size_t)(i * n) * ag__cpu_dtsize(d2), 1, n, x);
    for (int64_t j = 0; j < n; j++) {
      g[j] *= w[j];
      s += g[j] * x[j];
    }
    s = s / (double)n * rstd * rstd;
    for (int64_t j = 0; j < n; j++) g[j] = rstd * (g[j] - x[j] * s);
    store_d(d0, ag__cpu_ptr(&c->o[0]) + (size_t)(i * n) * ag__cpu_dtsize(d0), 1, n, g);
  }
  free(buf);
}

/* dw = sum over rows of dy * x * rstd, in f64 and row order, into t[0]. */
static ag_status rmsnorm_bwd_weight(const ag_kernel_call *c, int64_t N, int64_t D) {
  double *acc = calloc((size_t)(3 * (D > 0 ? D : 1)), sizeof(double));
  if (!acc) return ag_error_set(AG_ERR_OOM, "%s: no memory for weight gradients", c->name ? c->name : "rms_norm");
  double *dw = acc, *dy = acc + D, *x = acc + 2 * D;
  const ag_dtype d1 = c->o[1].dtype, d2 = c->o[2].dtype;
  for (int64_t i = 0; i < N; i++) {
    double rstd = scalar_at(&c->o[3], i);
    load_d(d1, ag__cpu_ptr(&c->o[1]) + (size_t)(i * D) * ag__cpu_dtsize(d1), 1, D, dy);
    load_d(d2, ag__cpu_ptr(&c->o[2]) + (size_t)(i * D) * ag__cpu_dtsize(d2), 1, D, x);
    for (int64_t j = 0; j < D; j++) dw[j] += dy[j] * x[j] * rstd;
  }
  const ag_kmulti *m = c->multi;
  if (m->t[0].base) store_d(m->t[0].dtype, (char *)m->t[0].base + m->t[0].offset, 1, D, dw);
  free(acc);
  return AG_OK;
}

/* var/std over the middle dim of [outer, r, inner], two passes in double. */
static ag_status k_var(const ag_kernel_call *c) {
  const int64_t O = c->i[0], R = c->i[1], In = c->i[2];
  const ag_dtype dx = c->o[1].dtype, dy = c->o[0].dtype;
  const size_t ex = ag__cpu_dtsize(dx), ey = ag__cpu_dtsize(dy);
  double *v = malloc((size_t)(R > 0 ? R : 1) * sizeof(double));
  if (!v) return ag_error_set(AG_ERR_OOM, "%s: no memory for a row", c->name ? c->name : "var");
  double den = (double)R - c->s[0];
  if (den < 0) den = 0;
  for (int64_t o = 0; o < O; o++)
    for (int64_t i = 0; i < In; i++) {
      load_d(dx, ag__cpu_ptr(&c->o[1]) + (size_t)(o * R * In + i) * ex, In, R, v);
      double m = 0, ss = 0;
      for (int64_t k = 0; k < R; k++) m += v[k];
      m /= (double)R;
      for (int64_t k = 0; k < R; k++) ss += (v[k] - m) * (v[k] - m);
      double r = ss / den;
      if (c->sub == 1) r = sqrt(r);
      store_d(dy, ag__cpu_ptr(&c->o[0]) + (size_t)(o * In + i) * ey, 1, 1, &r);
    }
  free(v);
  return AG_OK;
}

/* Prefix (sub 0) or suffix (sub 1) sums along the middle dim, in double. */
static ag_status k_cumsum(const ag_kernel_call *c) {
  const int64_t O = c->i[0], R = c->i[1], In = c->i[2];
  const ag_dtype dx = c->o[1].dtype, dy = c->o[0].dtype;
  const size_t ex = ag__cpu_dtsize(dx), ey = ag__cpu_dtsize(dy);
  double *v = malloc((size_t)(R > 0 ? R : 1) * sizeof(double));
  if (!v) return ag_error_set(AG_ERR_OOM, "%s: no memory for a row", c->name ? c->name : "cumsum");
  for (int64_t o = 0; o < O; o++)
    for (int64_t i = 0; i < In; i++) {
      load_d(dx, ag__cpu_ptr(&c->o[1]) + (size_t)(o * R * In + i) * ex, In, R, v);
      double s = 0;
      if (c->sub == 1)
        for (int64_t k = R - 1; k >= 0; k--) v[k] = s += v[k];
      else
        for (int64_t k = 0; k < R; k++) v[k] = s += v[k];
      store_d(dy, ag__cpu_ptr(&c->o[0]) + (size_t)(o * R * In + i) * ey, In, R, v);
    }
  free(v);
  return AG_OK;
}

/* Index (o, k, i) of a gather's 3-d index operand, strides in elements. */
static int64_t gidx(const ag_koperand *ix, int64_t o, int64_t k, int64_t i) {
  return idx_at(ix, o * ix->strides[0] + k * ix->strides[1] + i * ix->strides[2]);
}

static void k_gather(const ag_kernel_call *c, ag_kernel_error *err) {
  const int64_t O = c->i[0], K = c->i[1], In = c->i[2], X = c->i[3];
  const size_t es = ag__cpu_dtsize(c->o[0].dtype);
  char *out = ag__cpu_ptr(&c->o[0]);
  const char *x = ag__cpu_ptr(&c->o[1]);
  for (int64_t o = 0; o < O; o++)
    for (int64_t k = 0; k < K; k++)
      for (int64_t i = 0; i < In; i++) {
        int64_t j = gidx(&c->o[2], o, k, i);
        char *dst = out + (size_t)((o * K + k) * In + i) * es;
        if (j < 0 || j >= X) {
          kerr(err, AG_K_GATHER, j, X);
          memset(dst, 0, es);
        } else {
          memcpy(dst, x + (size_t)((o * X + j) * In + i) * es, es);
        }
      }
}

/* Scatter-add in double, in order of k, into a zeroed dx. */
static ag_status k_gather_bwd(const ag_kernel_call *c) {
  const int64_t O = c->i[0], K = c->i[1], In = c->i[2], X = c->i[3];
  const ag_dtype d0 = c->o[0].dtype, d1 = c->o[1].dtype;
  double *acc = calloc((size_t)(X * In > 0 ? X * In : 1), sizeof(double));
  if (!acc) return ag_error_set(AG_ERR_OOM, "%s: no memory for the gradient", c->name ? c->name : "gather");
  const char *g = ag__cpu_ptr(&c->o[1]);
  for (int64_t o = 0; o < O; o++) {
    memset(acc, 0, (size_t)(X * In) * sizeof(double));
    for (int64_t k = 0; k < K; k++)
      for (int64_t i = 0; i < In; i++) {
        int64_t j = gidx(&c->o[2], o, k, i);
        if (j < 0 || j >= X) continue;
        double v;
        load_d(d1, g + (size_t)((o * K + k) * In + i) * ag__cpu_dtsize(d1), 1, 1, &v);
        acc[j * In + i] += v;
      }
    store_d(d0, ag__cpu_ptr(&c->o[0]) + (size_t)(o * X * In) * ag__cpu_dtsize(d0), 1, X * In, acc);
  }
  free(acc);
  return AG_OK;
}

/* topk: (value, index) pairs sorted by torch's order, NaN above numbers. */
typedef struct topk_item {
  double v;
  int64_t i;
} topk_item;
static int topk_before(const topk_item *a, const topk_item *b, bool largest) {
  bool an = isnan(a->v), bn = isnan(b->v);
  if (an != bn) return largest ? an : bn;
  if (!an && a->v != b->v) return largest ? a->v > b->v : a->v < b->v;
  return a->i < b->i;
}
static int topk_cmp_large(const void *x, const void *y) {
  return topk_before(x, y, true) ? -1 : topk_before(y, x, true) ? 1 : 0;
}
static int topk_cmp_small(const void *x, const void *y) {
  return topk_before(x, y, false) ? -1 : topk_before(y, x, false) ? 1 : 0;
}
static ag_status k_topk(const ag_kernel_call *c) {
  const int64_t O = c->i[0], R = c->i[1], In = c->i[2], K = c->i[3];
  const ag_dtype dx = c->o[1].dtype, dv = c->o[0].dtype;
  double *v = malloc((size_t)(R > 0 ? R : 1) * (sizeof(double) + sizeof(topk_item)));
  if (!v) return ag_error_set(AG_ERR_OOM, "%s: no memory for a line", c->name ? c->name : "topk");
  topk_item *it = (topk_item *)(v + (R > 0 ? R : 1));
  int64_t *ip = (int64_t *)ag__cpu_ptr(&c->o[2]);
  for (int64_t o = 0; o < O; o++)
    for (int64_t i = 0; i < In; i++) {
      load_d(dx, ag__cpu_ptr(&c->o[1]) + (size_t)(o * R * In + i) * ag__cpu_dtsize(dx), In, R, v);
      for (int64_t j = 0; j < R; j++) it[j] = (topk_item){v[j], j};
      qsort(it, (size_t)R, sizeof *it, c->sub == 1 ? topk_cmp_small : topk_cmp_large);
      for (int64_t k = 0; k < K; k++) {
        int64_t p = (o * K + k) * In + i;
        store_d(dv, ag__cpu_ptr(&c->o[0]) + (size_t)p * ag__cpu_dtsize(dv), 1, 1, &it[k].v);
        ip[p] = it[k].i;
      }
    }
  free(v);
  return AG_OK;
}

static int64_t pick(int64_t given, int64_t fallback) { return given > 0 ? given : fallback; }

static ag_status run_rows(const ag_kernel_call *c, int64_t rows, int64_t cols, range_fn fn,
                          ag_kernel_error *err, bool ce) {
  rowctx r = {.c = c, .rows = rows, .cols = cols};
  atomic_init(&r.oom, false);
  if (ce) ce_prescan(&r, c->op);
  par_for(rows, rows * cols * 4, fn, &r);
  if (r.err.code) kerr(err, (ag_kop)r.err.kop, r.err.index, r.err.limit);
  if (atomic_load(&r.oom))
    return ag_error_set(AG_ERR_OOM, "%s: no memory for row scratch", c->name ? c->name : "cpu kernel");
  return AG_OK;
}

/* ---- embedding ---- */

static void k_embedding(const ag_kernel_call *c, ag_kernel_error *err) {
  int64_t N = pick(c->i[0], c->o[2].ndim ? c->o[2].shape[0] : 1);
  int64_t D = pick(c->i[1], c->o[1].ndim > 1 ? c->o[1].shape[1] : 1);
  int64_t V = pick(c->i[2], c->o[1].ndim ? c->o[1].shape[0] : 0);
  size_t row = (size_t)D * ag__cpu_dtsize(c->o[0].dtype);
  char *out = ag__cpu_ptr(&c->o[0]);
  const char *tab = ag__cpu_ptr(&c->o[1]);
  for (int64_t i = 0; i < N; i++) {
    int64_t v = idx_at(&c->o[2], i);
    if (v < 0 || v >= V) {
      kerr(err, AG_K_EMBEDDING, v, V);
      memset(out + (size_t)i * row, 0, row);
    } else {
      memcpy(out + (size_t)i * row, tab + (size_t)v * row, row);
    }
  }
}

static void k_embedding_bwd(const ag_kernel_call *c, ag_kernel_error *err) {
  int64_t N = pick(c->i[0], c->o[2].ndim ? c->o[2].shape[0] : 1);
  int64_t D = pick(c->i[1], c->o[0].ndim > 1 ? c->o[0].shape[1] : 1);
  int64_t V = pick(c->i[2], c->o[0].ndim ? c->o[0].shape[0] : 0);
  const ag_dtype dt = c->o[0].dtype, dd = c->o[1].dtype;
  char *tab = ag__cpu_ptr(&c->o[0]);
  const char *dout = ag__cpu_ptr(&c->o[1]);
  double g[TILE];
  for (int64_t i = 0; i < N; i++) {
    int64_t v = idx_at(&c->o[2], i);
    if (v < 0 || v >= V) {
      kerr(err, AG_K_EMBEDDING_BWD, v, V);
      continue;
    }
    for (int64_t j = 0; j < D; j += TILE) {
      int64_t m = D - j < TILE ? D - j : TILE;
      load_d(dd, dout + (size_t)(i * D + j) * ag__cpu_dtsize(dd), 1, m, g);
      if (dt == AG_F64) {
        double *t = (double *)tab + v * D + j;
        for (int64_t k = 0; k < m; k++) t[k] += g[k];
      } else if (dt == AG_F32) {
        float *t = (float *)tab + v * D + j;
        for (int64_t k = 0; k < m; k++) t[k] += (float)g[k];
      } else {
        double cur[TILE];
        char *t = tab + (size_t)(v * D + j) * ag__cpu_dtsize(dt);
        load_d(dt, t, 1, m, cur);
        for (int64_t k = 0; k < m; k++) cur[k] += g[k];
        store_d(dt, t, 1, m, cur);
      }
    }
  }
}

/* ---- entry ---- */

ag_status ag__cpu_rows(const ag_kernel_call *c, ag_kernel_error *err) {
  switch (c->op) {
    case AG_K_SOFTMAX: return run_rows(c, c->i[0], c->i[1], softmax_rows, err, false);
    case AG_K_SOFTMAX_BWD:
      return run_rows(c, pick(c->i[0], c->o[0].shape[0]), pick(c->i[1], c->o[0].shape[1]),
                      softmax_bwd_rows, err, false);
    case AG_K_CROSS_ENTROPY: return run_rows(c, c->i[0], c->i[1], ce_rows, err, true);
    case AG_K_CROSS_ENTROPY_BWD:
      return run_rows(c, pick(c->i[0], c->o[1].shape[0]), pick(c->i[1], c->o[1].shape[1]),
                      ce_bwd_rows, err, true);
    case AG_K_LAYERNORM: return run_rows(c, c->i[0], c->i[1], layernorm_rows, err, false);
    case AG_K_LAYERNORM_BWD: {
      int64_t N = pick(c->i[0], c->o[2].shape[0]), D = pick(c->i[1], c->o[2].shape[1]);
      ag_status st = run_rows(c, N, D, layernorm_bwd_rows, err, false);
      if (st == AG_OK && c->multi && c->multi->count > 0) st = layernorm_bwd_params(c, N, D);
      return st;
    }
    case AG_K_RMSNORM: return run_rows(c, c->i[0], c->i[1], rmsnorm_rows, err, false);
    case AG_K_RMSNORM_BWD: {
      int64_t N = c->i[0], D = c->i[1];
      ag_status st = run_rows(c, N, D, rmsnorm_bwd_rows, err, false);
      if (st == AG_OK && c->multi && c->multi->count > 0) st = rmsnorm_bwd_weight(c, N, D);
      return st;
    }
    case AG_K_VAR: return k_var(c);
    case AG_K_CUMSUM: return k_cumsum(c);
    case AG_K_GATHER: k_gather(c, err); return AG_OK;
    case AG_K_GATHER_BWD: return k_gather_bwd(c);
    case AG_K_TOPK: return k_topk(c);
    case AG_K_EMBEDDING: k_embedding(c, err); return AG_OK;
    case AG_K_EMBEDDING_BWD: k_embedding_bwd(c, err); return AG_OK;
    default: break;
  }
  return ag_error_set(AG_ERR_UNSUPPORTED, "%s: no cpu row kernel for op %d", c->name ? c->name : "launch",
                      (int)c->op);
}
