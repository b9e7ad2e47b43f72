/* CPU row kernels: softmax and log-softmax, cross-entropy, layer norm and
 * RMS norm (forward and backward), variance, cumulative sums, gather,
 * top-k and embedding. Rows are converted to a compute type (f32 for
 * f32/f16/bf16, f64 for f64) and run through the bodies of cpu_rows.inc,
 * threaded over rows by the host pool. One function per op (cpu_k_<name>,
 * dispatched from cpu_kernels.c). */
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
#include "cpu_portable.h"
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

/* A row kernel's call: a the op's argument struct (ag_k_<op> of the range
 * function's op). */
typedef struct rowctx {
  const void *a;
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
  const ag_k_softmax *k = r->a;
  const bool logv = k->variant == AG_KV_LOG_SOFTMAX;
  const int64_t n = r->cols;
  const ag_dtype dy = k->y->dtype, dx = k->x->dtype;
  char *yp = ag__cpu_ptr(k->y);
  const char *xp = ag__cpu_ptr(k->x);
  size_t sy = ag__cpu_dtsize(dy) * (size_t)n, sx = ag__cpu_dtsize(dx) * (size_t)n;
  if (dy == AG_F64) {
    double *buf = row_scratch(r, 2, 8);
    if (!buf) return;
    for (int64_t i = a; i < b; i++) {
      const double *x = rowin_d(dx, xp + i * sx, n, buf);
      double *y = rowdst_d(dy, yp + i * sy, buf + n);
      softmax_row_d(logv, y, x, n);
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
      FV(softmax_row_f)(logv, y, x, n);
      rowout_f(dy, yp + i * sy, n, y);
    }
    free(buf);
  }
}

static void softmax_bwd_rows(void *ctx, int64_t a, int64_t b) {
  rowctx *r = ctx;
  const ag_k_softmax_bwd *k = r->a;
  const bool logv = k->variant == AG_KV_LOG_SOFTMAX;
  const int64_t n = r->cols;
  const ag_dtype d0 = k->dx->dtype, d1 = k->dy->dtype, d2 = k->y->dtype;
  char *p0 = ag__cpu_ptr(k->dx);
  const char *p1 = ag__cpu_ptr(k->dy), *p2 = ag__cpu_ptr(k->y);
  size_t s0 = ag__cpu_dtsize(d0) * (size_t)n, s1 = ag__cpu_dtsize(d1) * (size_t)n,
         s2 = ag__cpu_dtsize(d2) * (size_t)n;
  if (d0 == AG_F64) {
    double *buf = row_scratch(r, 3, 8);
    if (!buf) return;
    for (int64_t i = a; i < b; i++) {
      const double *dy = rowin_d(d1, p1 + i * s1, n, buf);
      const double *y = rowin_d(d2, p2 + i * s2, n, buf + n);
      double *dx = rowdst_d(d0, p0 + i * s0, buf + 2 * n);
      softmax_bwd_row_d(logv, dx, dy, y, n);
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
      FV(softmax_bwd_row_f)(logv, dx, dy, y, n);
      rowout_f(d0, p0 + i * s0, n, dx);
    }
    free(buf);
  }
}

/* Target of row i, or -1 when ignored or out of range (the pre-scan has
 * recorded the error; such rows get the safe value). */
static int64_t ce_target(const ag_koperand *targets, int64_t ignore, int64_t i, int64_t C, bool *bad) {
  int64_t t = idx_at(targets, i);
  *bad = false;
  if (t == ignore) return -1;
  if (t < 0 || t >= C) {
    *bad = true;
    return -1;
  }
  return t;
}

static void ce_rows(void *ctx, int64_t a, int64_t b) {
  rowctx *r = ctx;
  const ag_k_cross_entropy *k = r->a;
  const int64_t n = r->cols;
  const ag_dtype dl = k->logits->dtype, dloss = k->loss->dtype;
  const char *lp = ag__cpu_ptr(k->logits);
  char *op = ag__cpu_ptr(k->loss);
  size_t sl = ag__cpu_dtsize(dl) * (size_t)n, so = ag__cpu_dtsize(dloss);
  void *buf = row_scratch(r, 1, dl == AG_F64 ? 8 : 4);
  if (!buf) return;
  for (int64_t i = a; i < b; i++) {
    bool bad;
    int64_t t = ce_target(k->targets, k->ignore_index, i, n, &bad);
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
  const ag_k_cross_entropy_bwd *k = r->a;
  const int64_t n = r->cols;
  const ag_dtype d0 = k->dlogits->dtype, dl = k->logits->dtype, dg = k->grad->dtype;
  char *p0 = ag__cpu_ptr(k->dlogits);
  const char *lp = ag__cpu_ptr(k->logits), *gp = ag__cpu_ptr(k->grad);
  const int64_t gst = k->grad->ndim ? k->grad->strides[0] : 0;
  size_t s0 = ag__cpu_dtsize(d0) * (size_t)n, sl = ag__cpu_dtsize(dl) * (size_t)n;
  size_t sg = ag__cpu_dtsize(dg);
  const bool dbl = d0 == AG_F64;
  char *buf = row_scratch(r, 2, dbl ? 8 : 4);
  if (!buf) return;
  for (int64_t i = a; i < b; i++) {
    bool bad;
    int64_t t = ce_target(k->targets, k->ignore_index, i, n, &bad);
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

static void ce_prescan(rowctx *r, ag_kop op, const ag_koperand *targets, int64_t ignore) {
  for (int64_t i = 0; i < r->rows; i++) {
    int64_t t = idx_at(targets, i);
    if (t != ignore && (t < 0 || t >= r->cols)) {
      kerr(&r->err, op, t, r->cols);
      break;
    }
  }
}

static void layernorm_rows(void *ctx, int64_t a, int64_t b) {
  rowctx *r = ctx;
  const ag_k_layernorm *k = r->a;
  const int64_t n = r->cols;
  const ag_dtype dy = k->y->dtype, dx = k->x->dtype;
  char *yp = ag__cpu_ptr(k->y);
  const char *xp = ag__cpu_ptr(k->x);
  size_t sy = ag__cpu_dtsize(dy) * (size_t)n, sx = ag__cpu_dtsize(dx) * (size_t)n;
  const ag_koperand *wt = k->weight, *bs = k->bias;
  const bool dbl = dy == AG_F64;
  char *buf = row_scratch(r, 4, dbl ? 8 : 4);
  if (!buf) return;
  const size_t esz = dbl ? 8 : 4;
  const void *w = NULL, *bias = NULL;
  if (dbl) {
    if (wt) w = rowin_d(wt->dtype, ag__cpu_ptr(wt), n, (double *)(buf + 2 * n * esz));
    if (bs) bias = rowin_d(bs->dtype, ag__cpu_ptr(bs), n, (double *)(buf + 3 * n * esz));
  } else {
    if (wt) w = rowin_f(wt->dtype, ag__cpu_ptr(wt), n, (float *)(buf + 2 * n * esz));
    if (bs) bias = rowin_f(bs->dtype, ag__cpu_ptr(bs), n, (float *)(buf + 3 * n * esz));
  }
  for (int64_t i = a; i < b; i++) {
    /* Statistics leave the row in double; stored in the dtype of mean and
     * rstd (f64 for f64 x, so the f64 backward reads them unrounded). */
    double mean, rstd;
    if (dbl) {
      const double *x = rowin_d(dx, xp + i * sx, n, (double *)buf);
      double *y = rowdst_d(dy, yp + i * sy, (double *)buf + n);
      layernorm_row_d(y, x, w, bias, n, k->eps, &mean, &rstd);
      rowout_d(dy, yp + i * sy, n, y);
    } else {
      const float *x = rowin_f(dx, xp + i * sx, n, (float *)buf);
      float *y = rowdst_f(dy, yp + i * sy, (float *)buf + n);
      FV(layernorm_row_f)(y, x, w, bias, n, k->eps, &mean, &rstd);
      rowout_f(dy, yp + i * sy, n, y);
    }
    if (k->mean) store_at(k->mean, i, mean);
    if (k->rstd) store_at(k->rstd, i, rstd);
  }
  free(buf);
}

static void layernorm_bwd_rows(void *ctx, int64_t a, int64_t b) {
  rowctx *r = ctx;
  const ag_k_layernorm_bwd *k = r->a;
  const int64_t n = r->cols;
  const ag_dtype d0 = k->dx->dtype, d1 = k->dy->dtype, d2 = k->x->dtype;
  char *p0 = ag__cpu_ptr(k->dx);
  const char *p1 = ag__cpu_ptr(k->dy), *p2 = ag__cpu_ptr(k->x);
  size_t s0 = ag__cpu_dtsize(d0) * (size_t)n, s1 = ag__cpu_dtsize(d1) * (size_t)n,
         s2 = ag__cpu_dtsize(d2) * (size_t)n;
  const ag_koperand *wt = k->weight;
  const bool dbl = d0 == AG_F64;
  const size_t esz = dbl ? 8 : 4;
  char *buf = row_scratch(r, 4, esz);
  if (!buf) return;
  const void *w = NULL;
  if (wt)
    w = dbl ? (const void *)rowin_d(wt->dtype, ag__cpu_ptr(wt), n, (double *)(buf + 3 * n * esz))
            : (const void *)rowin_f(wt->dtype, ag__cpu_ptr(wt), n, (float *)(buf + 3 * n * esz));
  for (int64_t i = a; i < b; i++) {
    double mean = scalar_at(k->mean, i), rstd = scalar_at(k->rstd, i);
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

/* dw = sum_rows dy * xhat, db = sum_rows dy, in f64, overwriting the multi
 * list's dw and db (each when given). */
static ag_status layernorm_bwd_params(const ag_k_layernorm_bwd *k, int64_t N, int64_t D) {
  double *acc = calloc((size_t)(4 * (D > 0 ? D : 1)), sizeof(double));
  if (!acc)
    return ag_error_set(AG_ERR_OOM, "%s: no memory for weight gradients", k->call->name ? k->call->name : "layer_norm");
  double *dw = acc, *db = acc + D, *dy = acc + 2 * D, *x = acc + 3 * D;
  const ag_dtype d1 = k->dy->dtype, d2 = k->x->dtype;
  for (int64_t i = 0; i < N; i++) {
    double mean = scalar_at(k->mean, i), rstd = scalar_at(k->rstd, i);
    load_d(d1, ag__cpu_ptr(k->dy) + (size_t)(i * D) * ag__cpu_dtsize(d1), 1, D, dy);
    load_d(d2, ag__cpu_ptr(k->x) + (size_t)(i * D) * ag__cpu_dtsize(d2), 1, D, x);
    for (int64_t j = 0; j < D; j++) {
      dw[j] += dy[j] * ((x[j] - mean) * rstd);
      db[j] += dy[j];
    }
  }
  const int given = k->multi->count;
  if (k->m_dw < given) store_entry(&AGK_MULTI(k, 0, dw), D, dw);
  if (k->m_db < given) store_entry(&AGK_MULTI(k, 0, db), D, db);
  free(acc);
  return AG_OK;
}

/* RMS norm rows in double for every dtype (the CPU is the reference):
 * rstd = 1/sqrt(mean(x^2) + eps), y = x * rstd * w. */
static void rmsnorm_rows(void *ctx, int64_t a, int64_t b) {
  rowctx *r = ctx;
  const ag_k_rmsnorm *k = r->a;
  const int64_t n = r->cols;
  const ag_dtype dy = k->y->dtype, dx = k->x->dtype;
  char *yp = ag__cpu_ptr(k->y);
  const char *xp = ag__cpu_ptr(k->x);
  double *buf = row_scratch(r, 2, 8);
  if (!buf) return;
  double *x = buf, *w = buf + n;
  if (k->weight) load_d(k->weight->dtype, ag__cpu_ptr(k->weight), 1, n, w);
  else
    for (int64_t j = 0; j < n; j++) w[j] = 1;
  for (int64_t i = a; i < b; i++) {
    load_d(dx, xp + (size_t)(i * n) * ag__cpu_dtsize(dx), 1, n, x);
    double ss = 0;
    for (int64_t j = 0; j < n; j++) ss += x[j] * x[j];
    double rstd = 1 / sqrt(ss / (double)n + k->eps);
    for (int64_t j = 0; j < n; j++) x[j] = x[j] * rstd * w[j];
    store_d(dy, yp + (size_t)(i * n) * ag__cpu_dtsize(dy), 1, n, x);
    if (k->rstd) store_at(k->rstd, i, rstd);
  }
  free(buf);
}

/* dx = rstd * (g - x * rstd^2 * mean(g * x)), g = dy * w, in double. */
static void rmsnorm_bwd_rows(void *ctx, int64_t a, int64_t b) {
  rowctx *r = ctx;
  const ag_k_rmsnorm_bwd *k = r->a;
  const int64_t n = r->cols;
  const ag_dtype d0 = k->dx->dtype, d1 = k->dy->dtype, d2 = k->x->dtype;
  double *buf = row_scratch(r, 3, 8);
  if (!buf) return;
  double *g = buf, *x = buf + n, *w = buf + 2 * n;
  if (k->weight) load_d(k->weight->dtype, ag__cpu_ptr(k->weight), 1, n, w);
  else
    for (int64_t j = 0; j < n; j++) w[j] = 1;
  for (int64_t i = a; i < b; i++) {
    double rstd = scalar_at(k->rstd, i), s = 0;
    load_d(d1, ag__cpu_ptr(k->dy) + (size_t)(i * n) * ag__cpu_dtsize(d1), 1, n, g);
    load_d(d2, ag__cpu_ptr(k->x) + (size_t)(i * n) * ag__cpu_dtsize(d2), 1, n, x);
    for (int64_t j = 0; j < n; j++) {
      g[j] *= w[j];
      s += g[j] * x[j];
    }
    s = s / (double)n * rstd * rstd;
    for (int64_t j = 0; j < n; j++) g[j] = rstd * (g[j] - x[j] * s);
    store_d(d0, ag__cpu_ptr(k->dx) + (size_t)(i * n) * ag__cpu_dtsize(d0), 1, n, g);
  }
  free(buf);
}

/* dw = sum over rows of dy * x * rstd, in f64 and row order, into the
 * multi list's dw. */
static ag_status rmsnorm_bwd_weight(const ag_k_rmsnorm_bwd *k, int64_t N, int64_t D) {
  double *acc = calloc((size_t)(3 * (D > 0 ? D : 1)), sizeof(double));
  if (!acc)
    return ag_error_set(AG_ERR_OOM, "%s: no memory for weight gradients", k->call->name ? k->call->name : "rms_norm");
  double *dw = acc, *dy = acc + D, *x = acc + 2 * D;
  const ag_dtype d1 = k->dy->dtype, d2 = k->x->dtype;
  for (int64_t i = 0; i < N; i++) {
    double rstd = scalar_at(k->rstd, i);
    load_d(d1, ag__cpu_ptr(k->dy) + (size_t)(i * D) * ag__cpu_dtsize(d1), 1, D, dy);
    load_d(d2, ag__cpu_ptr(k->x) + (size_t)(i * D) * ag__cpu_dtsize(d2), 1, D, x);
    for (int64_t j = 0; j < D; j++) dw[j] += dy[j] * x[j] * rstd;
  }
  store_entry(&AGK_MULTI(k, 0, dw), D, dw);
  free(acc);
  return AG_OK;
}

/* var/std over the middle dim of [outer, r, inner], two passes in double. */
ag_status cpu_k_var(ag_kernel_error *err, const ag_k_var *a) {
  (void)err;
  if (a->call->flags & AG_KF_PORTABLE) return ag__cpu_p_var(a);
  const int64_t O = a->outer, R = a->r, In = a->inner;
  const ag_dtype dx = a->x->dtype, dy = a->out->dtype;
  const size_t ex = ag__cpu_dtsize(dx), ey = ag__cpu_dtsize(dy);
  double *v = malloc((size_t)(R > 0 ? R : 1) * sizeof(double));
  if (!v) return ag_error_set(AG_ERR_OOM, "%s: no memory for a row", a->call->name ? a->call->name : "var");
  double den = (double)R - a->correction;
  if (den < 0) den = 0;
  for (int64_t o = 0; o < O; o++)
    for (int64_t i = 0; i < In; i++) {
      load_d(dx, ag__cpu_ptr(a->x) + (size_t)(o * R * In + i) * ex, In, R, v);
      double m = 0, ss = 0;
      for (int64_t k = 0; k < R; k++) m += v[k];
      m /= (double)R;
      for (int64_t k = 0; k < R; k++) ss += (v[k] - m) * (v[k] - m);
      double r = ss / den;
      if (a->variant == AG_KV_STD) r = sqrt(r);
      store_d(dy, ag__cpu_ptr(a->out) + (size_t)(o * In + i) * ey, 1, 1, &r);
    }
  free(v);
  return AG_OK;
}

/* Prefix or suffix sums along the middle dim, in double. */
ag_status cpu_k_cumsum(ag_kernel_error *err, const ag_k_cumsum *a) {
  (void)err;
  if (a->call->flags & AG_KF_PORTABLE) return ag__cpu_p_cumsum(a);
  const int64_t O = a->outer, R = a->r, In = a->inner;
  const ag_dtype dx = a->x->dtype, dy = a->out->dtype;
  const size_t ex = ag__cpu_dtsize(dx), ey = ag__cpu_dtsize(dy);
  double *v = malloc((size_t)(R > 0 ? R : 1) * sizeof(double));
  if (!v) return ag_error_set(AG_ERR_OOM, "%s: no memory for a row", a->call->name ? a->call->name : "cumsum");
  for (int64_t o = 0; o < O; o++)
    for (int64_t i = 0; i < In; i++) {
      load_d(dx, ag__cpu_ptr(a->x) + (size_t)(o * R * In + i) * ex, In, R, v);
      double s = 0;
      if (a->variant == AG_KV_CUMSUM_SUFFIX)
        for (int64_t k = R - 1; k >= 0; k--) v[k] = s += v[k];
      else
        for (int64_t k = 0; k < R; k++) v[k] = s += v[k];
      store_d(dy, ag__cpu_ptr(a->out) + (size_t)(o * R * In + i) * ey, In, R, v);
    }
  free(v);
  return AG_OK;
}

/* Index (o, k, i) of a gather's 3-d index operand, strides in elements. */
static int64_t gidx(const ag_koperand *ix, int64_t o, int64_t k, int64_t i) {
  return idx_at(ix, o * ix->strides[0] + k * ix->strides[1] + i * ix->strides[2]);
}

ag_status cpu_k_gather(ag_kernel_error *err, const ag_k_gather *a) {
  const int64_t O = a->o, K = a->k, In = a->in, X = a->xlen;
  const size_t es = ag__cpu_dtsize(a->out->dtype);
  char *out = ag__cpu_ptr(a->out);
  const char *x = ag__cpu_ptr(a->x);
  for (int64_t o = 0; o < O; o++)
    for (int64_t k = 0; k < K; k++)
      for (int64_t i = 0; i < In; i++) {
        int64_t j = gidx(a->index, o, k, i);
        char *dst = out + (size_t)((o * K + k) * In + i) * es;
        if (j < 0 || j >= X) {
          kerr(err, AG_K_GATHER, j, X);
          memset(dst, 0, es);
        } else {
          memcpy(dst, x + (size_t)((o * X + j) * In + i) * es, es);
        }
      }
  return AG_OK;
}

/* Scatter-add in double, in order of k, into a zeroed dx. */
ag_status cpu_k_gather_bwd(ag_kernel_error *err, const ag_k_gather_bwd *a) {
  (void)err;
  if (a->call->flags & AG_KF_PORTABLE) return ag__cpu_p_gather_bwd(a);
  const int64_t O = a->o, K = a->k, In = a->in, X = a->xlen;
  const ag_dtype d0 = a->dx->dtype, d1 = a->dout->dtype;
  double *acc = calloc((size_t)(X * In > 0 ? X * In : 1), sizeof(double));
  if (!acc) return ag_error_set(AG_ERR_OOM, "%s: no memory for the gradient", a->call->name ? a->call->name : "gather");
  const char *g = ag__cpu_ptr(a->dout);
  for (int64_t o = 0; o < O; o++) {
    memset(acc, 0, (size_t)(X * In) * sizeof(double));
    for (int64_t k = 0; k < K; k++)
      for (int64_t i = 0; i < In; i++) {
        int64_t j = gidx(a->index, o, k, i);
        if (j < 0 || j >= X) continue;
        double v;
        load_d(d1, g + (size_t)((o * K + k) * In + i) * ag__cpu_dtsize(d1), 1, 1, &v);
        acc[j * In + i] += v;
      }
    store_d(d0, ag__cpu_ptr(a->dx) + (size_t)(o * X * In) * ag__cpu_dtsize(d0), 1, X * In, acc);
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
ag_status cpu_k_topk(ag_kernel_error *err, const ag_k_topk *a) {
  (void)err;
  const int64_t O = a->o, R = a->r, In = a->in, K = a->k;
  const ag_dtype dx = a->x->dtype, dv = a->values->dtype;
  double *v = malloc((size_t)(R > 0 ? R : 1) * (sizeof(double) + sizeof(topk_item)));
  if (!v) return ag_error_set(AG_ERR_OOM, "%s: no memory for a line", a->call->name ? a->call->name : "topk");
  topk_item *it = (topk_item *)(v + (R > 0 ? R : 1));
  int64_t *ip = (int64_t *)ag__cpu_ptr(a->indices);
  for (int64_t o = 0; o < O; o++)
    for (int64_t i = 0; i < In; i++) {
      load_d(dx, ag__cpu_ptr(a->x) + (size_t)(o * R * In + i) * ag__cpu_dtsize(dx), In, R, v);
      for (int64_t j = 0; j < R; j++) it[j] = (topk_item){v[j], j};
      qsort(it, (size_t)R, sizeof *it, a->variant == AG_KV_TOPK_SMALLEST ? topk_cmp_small : topk_cmp_large);
      for (int64_t k = 0; k < K; k++) {
        int64_t p = (o * K + k) * In + i;
        store_d(dv, ag__cpu_ptr(a->values) + (size_t)p * ag__cpu_dtsize(dv), 1, 1, &it[k].v);
        ip[p] = it[k].i;
      }
    }
  free(v);
  return AG_OK;
}

static int64_t pick(int64_t given, int64_t fallback) { return given > 0 ? given : fallback; }

/* fn over the rows of call c (a: its argument struct); cross-entropy calls
 * (targets given) check every target first. */
static ag_status run_rows(const ag_kernel_call *c, const void *a, int64_t rows, int64_t cols, range_fn fn,
                          ag_kernel_error *err, const ag_koperand *targets, int64_t ignore) {
  rowctx r = {.a = a, .rows = rows, .cols = cols};
  atomic_init(&r.oom, false);
  if (targets) ce_prescan(&r, c->op, targets, ignore);
  par_for(rows, rows * cols * 4, fn, &r);
  if (r.err.code) kerr(err, (ag_kop)r.err.kop, r.err.index, r.err.limit);
  if (atomic_load(&r.oom))
    return ag_error_set(AG_ERR_OOM, "%s: no memory for row scratch", c->name ? c->name : "cpu kernel");
  return AG_OK;
}

/* ---- embedding ---- */

ag_status cpu_k_embedding(ag_kernel_error *err, const ag_k_embedding *a) {
  const ag_koperand *ix = a->indices, *tb = a->table;
  int64_t N = pick(a->n, ix->ndim ? ix->shape[0] : 1);
  int64_t D = pick(a->d, tb->ndim > 1 ? tb->shape[1] : 1);
  int64_t V = pick(a->v, tb->ndim ? tb->shape[0] : 0);
  size_t row = (size_t)D * ag__cpu_dtsize(a->out->dtype);
  char *out = ag__cpu_ptr(a->out);
  const char *tab = ag__cpu_ptr(tb);
  for (int64_t i = 0; i < N; i++) {
    int64_t v = idx_at(ix, i);
    if (v < 0 || v >= V) {
      kerr(err, AG_K_EMBEDDING, v, V);
      memset(out + (size_t)i * row, 0, row);
    } else {
      memcpy(out + (size_t)i * row, tab + (size_t)v * row, row);
    }
  }
  return AG_OK;
}

ag_status cpu_k_embedding_bwd(ag_kernel_error *err, const ag_k_embedding_bwd *a) {
  /* portable: the f32 table is the contract's sequential sum in row order
   * (below); other table dtypes accumulate in double */
  if ((a->call->flags & AG_KF_PORTABLE) && a->dtable->dtype != AG_F32)
    return ag_k__not_portable(a->call, "cpu", a->dtable->dtype);
  const ag_koperand *ix = a->indices, *dtab = a->dtable;
  int64_t N = pick(a->n, ix->ndim ? ix->shape[0] : 1);
  int64_t D = pick(a->d, dtab->ndim > 1 ? dtab->shape[1] : 1);
  int64_t V = pick(a->v, dtab->ndim ? dtab->shape[0] : 0);
  const ag_dtype dt = dtab->dtype, dd = a->dout->dtype;
  char *tab = ag__cpu_ptr(dtab);
  const char *dout = ag__cpu_ptr(a->dout);
  double g[TILE];
  for (int64_t i = 0; i < N; i++) {
    int64_t v = idx_at(ix, i);
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
  return AG_OK;
}

/* ---- the row ops ---- */

ag_status cpu_k_softmax(ag_kernel_error *err, const ag_k_softmax *a) {
  if (a->call->flags & AG_KF_PORTABLE) return ag__cpu_p_softmax(a);
  return run_rows(a->call, a, a->rows, a->cols, softmax_rows, err, NULL, 0);
}

ag_status cpu_k_softmax_bwd(ag_kernel_error *err, const ag_k_softmax_bwd *a) {
  if (a->call->flags & AG_KF_PORTABLE) return ag__cpu_p_softmax_bwd(a);
  return run_rows(a->call, a, pick(a->rows, a->dx->shape[0]), pick(a->cols, a->dx->shape[1]), softmax_bwd_rows, err,
                  NULL, 0);
}

ag_status cpu_k_cross_entropy(ag_kernel_error *err, const ag_k_cross_entropy *a) {
  if (a->call->flags & AG_KF_PORTABLE) return ag__cpu_p_cross_entropy(err, a);
  return run_rows(a->call, a, a->n, a->c, ce_rows, err, a->targets, a->ignore_index);
}

ag_status cpu_k_cross_entropy_bwd(ag_kernel_error *err, const ag_k_cross_entropy_bwd *a) {
  if (a->call->flags & AG_KF_PORTABLE) return ag__cpu_p_cross_entropy_bwd(a);
  return run_rows(a->call, a, pick(a->n, a->logits->shape[0]), pick(a->c, a->logits->shape[1]), ce_bwd_rows, err,
                  a->targets, a->ignore_index);
}

ag_status cpu_k_layernorm(ag_kernel_error *err, const ag_k_layernorm *a) {
  if (a->call->flags & AG_KF_PORTABLE) return ag__cpu_p_layernorm(a);
  return run_rows(a->call, a, a->n, a->d, layernorm_rows, err, NULL, 0);
}

ag_status cpu_k_layernorm_bwd(ag_kernel_error *err, const ag_k_layernorm_bwd *a) {
  if (a->call->flags & AG_KF_PORTABLE) return ag__cpu_p_layernorm_bwd(a);
  int64_t N = pick(a->n, a->x->shape[0]), D = pick(a->d, a->x->shape[1]);
  ag_status st = run_rows(a->call, a, N, D, layernorm_bwd_rows, err, NULL, 0);
  if (st == AG_OK && a->multi && a->multi->count > 0) st = layernorm_bwd_params(a, N, D);
  return st;
}

ag_status cpu_k_rmsnorm(ag_kernel_error *err, const ag_k_rmsnorm *a) {
  if (a->call->flags & AG_KF_PORTABLE) return ag__cpu_p_rmsnorm(a);
  return run_rows(a->call, a, a->n, a->d, rmsnorm_rows, err, NULL, 0);
}

ag_status cpu_k_rmsnorm_bwd(ag_kernel_error *err, const ag_k_rmsnorm_bwd *a) {
  if (a->call->flags & AG_KF_PORTABLE) return ag__cpu_p_rmsnorm_bwd(a);
  ag_status st = run_rows(a->call, a, a->n, a->d, rmsnorm_bwd_rows, err, NULL, 0);
  if (st == AG_OK && a->multi && a->multi->count > 0) st = rmsnorm_bwd_weight(a, a->n, a->d);
  return st;
}
