/* Portable numerics on the CPU (docs/numerics.md), part 2: the row ops
 * (softmax, log-sum-exp, cross-entropy, layer and RMS norm, forward and
 * backward) and the multi-tensor ones (AdamW, SGD, sum of squares), each
 * the literal text of the contract: every sum is S (cpu_portable.c), every
 * function pmath's, scalars rounded once to f32. Rows are threaded over the
 * pool; a row is always computed whole by one thread, so the bits do not
 * depend on the thread count. Built like cpu_portable.c (no contraction). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3", "no-trapping-math", "fp-contract=off")
#endif
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_backend.h"
#include "cpu_pmath.h"
#include "cpu_portable.h"
#include "cpu_tile.h"

/* ---- the row runner: fn(r, i, buf) for each row i, buf holding
 * nbuf * cols floats of scratch per thread ---- */

typedef struct prows prows;
typedef void (*prow_fn)(const prows *r, int64_t i, float *buf);
struct prows {
  const void *a;
  int64_t rows, cols;
  int nbuf;
  prow_fn fn;
  atomic_bool oom;
};

static void prows_range(void *ctx, int64_t lo, int64_t hi) {
  prows *r = ctx;
  float *buf = malloc(sizeof(float) * (size_t)r->nbuf * (size_t)(r->cols > 0 ? r->cols : 1));
  if (!buf) {
    atomic_store(&r->oom, true);
    return;
  }
  for (int64_t i = lo; i < hi; i++) r->fn(r, i, buf);
  free(buf);
}

static ag_status prows_run(const ag_kernel_call *c, const void *a, int64_t rows, int64_t cols, int nbuf, prow_fn fn) {
  prows r = {.a = a, .rows = rows, .cols = cols, .nbuf = nbuf, .fn = fn};
  atomic_init(&r.oom, false);
  if (rows > 0) ag__cpu_par_for(rows, rows * (cols > 0 ? cols : 1) * 4, prows_range, &r);
  if (atomic_load(&r.oom))
    return ag_error_set(AG_ERR_OOM, "%s: no memory for row scratch", c->name ? c->name : "cpu kernel");
  return AG_OK;
}

static int64_t pick(int64_t given, int64_t fallback) { return given > 0 ? given : fallback; }

/* Row i (cols values) of operand o as f32 into dst. */
static void row_load(const ag_koperand *o, int64_t i, int64_t cols, float *dst) {
  load_f(o->dtype, ag__cpu_ptr(o) + (size_t)(i * cols) * ag__cpu_dtsize(o->dtype), 1, cols, dst);
}
static void row_store(const ag_koperand *o, int64_t i, int64_t cols, const float *v) {
  store_f(o->dtype, ag__cpu_ptr(o) + (size_t)(i * cols) * ag__cpu_dtsize(o->dtype), 1, cols, v);
}
static float elem_load(const ag_koperand *o, int64_t i) {
  float v;
  load_f(o->dtype, ag__cpu_ptr(o) + (size_t)i * ag__cpu_dtsize(o->dtype), 1, 1, &v);
  return v;
}
static void elem_store(const ag_koperand *o, int64_t i, float v) {
  store_f(o->dtype, ag__cpu_ptr(o) + (size_t)i * ag__cpu_dtsize(o->dtype), 1, 1, &v);
}

/* The maximum of the non-NaN values (-inf when there are none). */
static float row_max(const float *x, int64_t n) { return ag__cpu_p_row_max(x, n); }

static bool row_has_nan(const float *x, int64_t n) {
  bool r = false;
  for (int64_t j = 0; j < n; j++) r |= x[j] != x[j];
  return r;
}

/* ---- SOFTMAX, SOFTMAX_BWD ---- */

static void softmax_row(const prows *r, int64_t i, float *buf) {
  const ag_k_softmax *k = r->a;
  const int64_t n = r->cols;
  float *x = buf, *e = buf + n;
  row_load(k->x, i, n, x);
  const float mx = row_max(x, n);
  ag__cpu_p_exp_shift(e, x, mx, n);
  const float s = ag__cpu_psum_f32(e, n);
  if (k->variant == AG_KV_LOG_SOFTMAX) {
    const float ls = agp_log(s);
    for (int64_t j = 0; j < n; j++) e[j] = (x[j] - mx) - ls;
  } else {
    ag__cpu_p_div_by(e, s, n);
  }
  row_store(k->y, i, n, e);
}

ag_status ag__cpu_p_softmax(const ag_k_softmax *a) {
  return prows_run(a->call, a, a->rows, a->cols, 2, softmax_row);
}

static void softmax_bwd_row(const prows *r, int64_t i, float *buf) {
  const ag_k_softmax_bwd *k = r->a;
  const int64_t n = r->cols;
  float *dy = buf, *y = buf + n, *t = buf + 2 * n;
  row_load(k->dy, i, n, dy);
  row_load(k->y, i, n, y);
  if (k->variant == AG_KV_LOG_SOFTMAX) {
    const float sg = ag__cpu_psum_f32(dy, n);
    for (int64_t j = 0; j < n; j++) t[j] = dy[j] - agp_exp(y[j]) * sg;
  } else {
    for (int64_t j = 0; j < n; j++) t[j] = dy[j] * y[j];
    const float dot = ag__cpu_psum_f32(t, n);
    for (int64_t j = 0; j < n; j++) t[j] = y[j] * (dy[j] - dot);
  }
  row_store(k->dx, i, n, t);
}

ag_status ag__cpu_p_softmax_bwd(const ag_k_softmax_bwd *a) {
  return prows_run(a->call, a, pick(a->rows, a->dx->shape[0]), pick(a->cols, a->dx->shape[1]), 3, softmax_bwd_row);
}

/* ---- LOGSUMEXP over x [outer, r, inner] ---- */

static void lse_row(const prows *r, int64_t w, float *buf) {
  const ag_k_logsumexp *k = r->a;
  const int64_t R = k->r, inner = k->inner, o = w / inner, in = w % inner;
  float *x = buf, *e = buf + R;
  load_f(k->x->dtype, ag__cpu_ptr(k->x) + (size_t)(o * R * inner + in) * ag__cpu_dtsize(k->x->dtype), inner, R, x);
  const float mx = row_max(x, R);
  float out;
  if (mx == INFINITY || mx == -INFINITY) {
    out = row_has_nan(x, R) ? NAN : mx;
  } else {
    ag__cpu_p_exp_shift(e, x, mx, R);
    out = mx + agp_log(ag__cpu_psum_f32(e, R));
  }
  elem_store(k->out, w, out);
}

ag_status ag__cpu_p_logsumexp(const ag_k_logsumexp *a) {
  /* cols: the scratch per row (two lines of r) */
  prows r = {.a = a, .rows = a->outer * a->inner, .cols = a->r, .nbuf = 2, .fn = lse_row};
  atomic_init(&r.oom, false);
  if (r.rows > 0) ag__cpu_par_for(r.rows, r.rows * (a->r > 0 ? a->r : 1) * 4, prows_range, &r);
  if (atomic_load(&r.oom))
    return ag_error_set(AG_ERR_OOM, "%s: no memory for row scratch", a->call->name ? a->call->name : "logsumexp");
  return AG_OK;
}

/* ---- CROSS_ENTROPY, CROSS_ENTROPY_BWD ---- */

/* Target of row i: -1 ignored, -2 out of range. */
static int64_t ce_target(const ag_koperand *targets, int64_t ignore, int64_t i, int64_t C) {
  int64_t t = idx_at(targets, i);
  if (t == ignore) return -1;
  return t < 0 || t >= C ? -2 : t;
}

static void ce_prescan(ag_kernel_error *err, ag_kop op, const ag_koperand *targets, int64_t ignore, int64_t rows,
                       int64_t C) {
  for (int64_t i = 0; i < rows; i++) {
    int64_t t = idx_at(targets, i);
    if (t != ignore && (t < 0 || t >= C)) {
      kerr(err, op, t, C);
      break;
    }
  }
}

/* mx and s = S(agp_exp(x_i - mx)) of a row, e the exponentials. */
static float ce_sum(const float *x, float *e, int64_t n, float *mx_out) {
  const float mx = row_max(x, n);
  ag__cpu_p_exp_shift(e, x, mx, n);
  *mx_out = mx;
  return ag__cpu_psum_f32(e, n);
}

static void ce_row(const prows *r, int64_t i, float *buf) {
  const ag_k_cross_entropy *k = r->a;
  const int64_t n = r->cols, t = ce_target(k->targets, k->ignore_index, i, n);
  float loss = 0.0f;
  if (t == -2) loss = NAN;
  else if (t >= 0) {
    float *x = buf, *e = buf + n, mx;
    row_load(k->logits, i, n, x);
    const float s = ce_sum(x, e, n, &mx);
    const float lse = mx + agp_log(s);
    loss = lse - x[t];
  }
  elem_store(k->loss, i, loss);
}

ag_status ag__cpu_p_cross_entropy(ag_kernel_error *err, const ag_k_cross_entropy *a) {
  ce_prescan(err, AG_K_CROSS_ENTROPY, a->targets, a->ignore_index, a->n, a->c);
  return prows_run(a->call, a, a->n, a->c, 2, ce_row);
}

static void ce_bwd_row(const prows *r, int64_t i, float *buf) {
  const ag_k_cross_entropy_bwd *k = r->a;
  const int64_t n = r->cols, t = ce_target(k->targets, k->ignore_index, i, n);
  float *x = buf, *e = buf + n;
  if (t < 0) {
    for (int64_t j = 0; j < n; j++) e[j] = 0.0f;
  } else {
    const int64_t gst = k->grad->ndim ? k->grad->strides[0] : 0;
    const float g = elem_load(k->grad, i * gst);
    float mx;
    row_load(k->logits, i, n, x);
    const float s = ce_sum(x, e, n, &mx);
    for (int64_t j = 0; j < n; j++) {
      const float p = agp_div(e[j], s);
      e[j] = (p - (j == t ? 1.0f : 0.0f)) * g;
    }
  }
  row_store(k->dlogits, i, n, e);
}

ag_status ag__cpu_p_cross_entropy_bwd(const ag_k_cross_entropy_bwd *a) {
  const int64_t rows = pick(a->n, a->logits->shape[0]), cols = pick(a->c, a->logits->shape[1]);
  return prows_run(a->call, a, rows, cols, 2, ce_bwd_row);
}

/* ---- LAYERNORM, LAYERNORM_BWD ---- */

static void layernorm_row(const prows *r, int64_t i, float *buf) {
  const ag_k_layernorm *k = r->a;
  const int64_t n = r->cols;
  const float d_f = (float)n, eps_f = (float)k->eps;
  float *x = buf, *t = buf + n, *w = buf + 2 * n, *b = buf + 3 * n;
  row_load(k->x, i, n, x);
  const float mean = agp_div(ag__cpu_psum_f32(x, n), d_f);
  for (int64_t j = 0; j < n; j++) t[j] = (x[j] - mean) * (x[j] - mean);
  const float var = agp_div(ag__cpu_psum_f32(t, n), d_f);
  const float rstd = agp_div(1.0f, agp_sqrt(var + eps_f));
  for (int64_t j = 0; j < n; j++) t[j] = (x[j] - mean) * rstd;
  if (k->weight) {
    row_load(k->weight, 0, n, w);
    for (int64_t j = 0; j < n; j++) t[j] = t[j] * w[j];
  }
  if (k->bias) {
    row_load(k->bias, 0, n, b);
    for (int64_t j = 0; j < n; j++) t[j] = t[j] + b[j];
  }
  row_store(k->y, i, n, t);
  if (k->mean) elem_store(k->mean, i, mean);
  if (k->rstd) elem_store(k->rstd, i, rstd);
}

ag_status ag__cpu_p_layernorm(const ag_k_layernorm *a) {
  return prows_run(a->call, a, a->n, a->d, 4, layernorm_row);
}

static void layernorm_bwd_row(const prows *r, int64_t i, float *buf) {
  const ag_k_layernorm_bwd *k = r->a;
  const int64_t n = r->cols;
  const float d_f = (float)n, mean = elem_load(k->mean, i), rstd = elem_load(k->rstd, i);
  float *g = buf, *xh = buf + n, *t = buf + 2 * n, *w = buf + 3 * n;
  row_load(k->dy, i, n, g);
  row_load(k->x, i, n, xh);
  for (int64_t j = 0; j < n; j++) xh[j] = (xh[j] - mean) * rstd;
  if (k->weight) {
    row_load(k->weight, 0, n, w);
    for (int64_t j = 0; j < n; j++) g[j] = g[j] * w[j];
  }
  const float ma = agp_div(ag__cpu_psum_f32(g, n), d_f);
  for (int64_t j = 0; j < n; j++) t[j] = g[j] * xh[j];
  const float mb = agp_div(ag__cpu_psum_f32(t, n), d_f);
  for (int64_t j = 0; j < n; j++) t[j] = ((g[j] - ma) - xh[j] * mb) * rstd;
  row_store(k->dx, i, n, t);
}

/* The column sums of the weight gradients: S over rows r of a term of
 * (r, j), for a tile of columns at a time (each tile on one thread). */
typedef struct pcols pcols;
typedef void (*pcol_term)(const pcols *c, int64_t row, int64_t j0, int w, float *dst);
struct pcols {
  const void *a;
  int64_t rows, cols;
  pcol_term term;
  const ag_kmulti_entry *out;
  atomic_bool oom;
};

typedef struct pcols_tile {
  const pcols *c;
  int64_t j0;
  int w;
} pcols_tile;
static void pcols_row(const void *ctx, int64_t k, float *dst) {
  const pcols_tile *t = ctx;
  t->c->term(t->c, k, t->j0, t->w, dst);
}

static void pcols_range(void *ctx, int64_t lo, int64_t hi) {
  pcols *c = ctx;
  for (int64_t tile = lo; tile < hi; tile++) {
    pcols_tile t = {.c = c, .j0 = tile * AG_CPU_PLANES};
    t.w = (int)(c->cols - t.j0 < AG_CPU_PLANES ? c->cols - t.j0 : AG_CPU_PLANES);
    float v[AG_CPU_PLANES];
    ag__cpu_psum_lanes(c->rows, t.w, pcols_row, &t, v);
    if (c->out->base)
      store_f(c->out->dtype, (char *)c->out->base + c->out->offset + (size_t)t.j0 * ag__cpu_dtsize(c->out->dtype), 1,
              t.w, v);
  }
}

static void pcols_run(pcols *c) {
  if (!c->out->base || c->cols <= 0) return;
  ag__cpu_par_for((c->cols + AG_CPU_PLANES - 1) / AG_CPU_PLANES, c->rows * c->cols * 2, pcols_range, c);
}

static void ln_dw_term(const pcols *c, int64_t row, int64_t j0, int w, float *dst) {
  const ag_k_layernorm_bwd *k = c->a;
  const float mean = elem_load(k->mean, row), rstd = elem_load(k->rstd, row);
  float dy[AG_CPU_PLANES], x[AG_CPU_PLANES];
  const int64_t D = c->cols;
  load_f(k->dy->dtype, ag__cpu_ptr(k->dy) + (size_t)(row * D + j0) * ag__cpu_dtsize(k->dy->dtype), 1, w, dy);
  load_f(k->x->dtype, ag__cpu_ptr(k->x) + (size_t)(row * D + j0) * ag__cpu_dtsize(k->x->dtype), 1, w, x);
  for (int l = 0; l < w; l++) dst[l] = dy[l] * ((x[l] - mean) * rstd);
}

static void ln_db_term(const pcols *c, int64_t row, int64_t j0, int w, float *dst) {
  const ag_k_layernorm_bwd *k = c->a;
  const int64_t D = c->cols;
  load_f(k->dy->dtype, ag__cpu_ptr(k->dy) + (size_t)(row * D + j0) * ag__cpu_dtsize(k->dy->dtype), 1, w, dst);
}

ag_status ag__cpu_p_layernorm_bwd(const ag_k_layernorm_bwd *a) {
  const int64_t N = pick(a->n, a->x->shape[0]), D = pick(a->d, a->x->shape[1]);
  ag_status st = prows_run(a->call, a, N, D, 4, layernorm_bwd_row);
  if (st != AG_OK || !a->multi || a->multi->count <= 0) return st;
  const int given = a->multi->count;
  if (a->m_dw < given) {
    pcols c = {.a = a, .rows = N, .cols = D, .term = ln_dw_term, .out = &AGK_MULTI(a, 0, dw)};
    pcols_run(&c);
  }
  if (a->m_db < given) {
    pcols c = {.a = a, .rows = N, .cols = D, .term = ln_db_term, .out = &AGK_MULTI(a, 0, db)};
    pcols_run(&c);
  }
  return AG_OK;
}

/* ---- RMSNORM, RMSNORM_BWD ---- */

static void rmsnorm_row(const prows *r, int64_t i, float *buf) {
  const ag_k_rmsnorm *k = r->a;
  const int64_t n = r->cols;
  const float d_f = (float)n, eps_f = (float)k->eps;
  float *x = buf, *t = buf + n, *w = buf + 2 * n;
  row_load(k->x, i, n, x);
  for (int64_t j = 0; j < n; j++) t[j] = x[j] * x[j];
  const float ms = agp_div(ag__cpu_psum_f32(t, n), d_f);
  const float rstd = agp_div(1.0f, agp_sqrt(ms + eps_f));
  for (int64_t j = 0; j < n; j++) t[j] = x[j] * rstd;
  if (k->weight) {
    row_load(k->weight, 0, n, w);
    for (int64_t j = 0; j < n; j++) t[j] = t[j] * w[j];
  }
  row_store(k->y, i, n, t);
  if (k->rstd) elem_store(k->rstd, i, rstd);
}

ag_status ag__cpu_p_rmsnorm(const ag_k_rmsnorm *a) { return prows_run(a->call, a, a->n, a->d, 3, rmsnorm_row); }

static void rmsnorm_bwd_row(const prows *r, int64_t i, float *buf) {
  const ag_k_rmsnorm_bwd *k = r->a;
  const int64_t n = r->cols;
  const float d_f = (float)n, rstd = elem_load(k->rstd, i);
  float *g = buf, *x = buf + n, *t = buf + 2 * n, *w = buf + 3 * n;
  row_load(k->dy, i, n, g);
  row_load(k->x, i, n, x);
  if (k->weight) {
    row_load(k->weight, 0, n, w);
    for (int64_t j = 0; j < n; j++) g[j] = g[j] * w[j];
  }
  for (int64_t j = 0; j < n; j++) t[j] = g[j] * x[j];
  const float m = agp_div(ag__cpu_psum_f32(t, n), d_f);
  const float c = (rstd * rstd) * m;
  for (int64_t j = 0; j < n; j++) t[j] = (g[j] - x[j] * c) * rstd;
  row_store(k->dx, i, n, t);
}

static void rms_dw_term(const pcols *c, int64_t row, int64_t j0, int w, float *dst) {
  const ag_k_rmsnorm_bwd *k = c->a;
  const float rstd = elem_load(k->rstd, row);
  float dy[AG_CPU_PLANES], x[AG_CPU_PLANES];
  const int64_t D = c->cols;
  load_f(k->dy->dtype, ag__cpu_ptr(k->dy) + (size_t)(row * D + j0) * ag__cpu_dtsize(k->dy->dtype), 1, w, dy);
  load_f(k->x->dtype, ag__cpu_ptr(k->x) + (size_t)(row * D + j0) * ag__cpu_dtsize(k->x->dtype), 1, w, x);
  for (int l = 0; l < w; l++) dst[l] = (dy[l] * x[l]) * rstd;
}

ag_status ag__cpu_p_rmsnorm_bwd(const ag_k_rmsnorm_bwd *a) {
  ag_status st = prows_run(a->call, a, a->n, a->d, 4, rmsnorm_bwd_row);
  if (st != AG_OK || !a->multi || a->multi->count <= 0) return st;
  pcols c = {.a = a, .rows = a->n, .cols = a->d, .term = rms_dw_term, .out = &AGK_MULTI(a, 0, dw)};
  pcols_run(&c);
  return AG_OK;
}

/* ---- ADAMW, SGD ---- */

/* An optional f32 scalar operand: present, and its value. */
static bool opt_f32(const ag_koperand *o, float *v) {
  if (!o || !o->base) return false;
  *v = elem_load(o, 0);
  return true;
}

typedef struct popt {
  const ag_k_adamw *adamw;
  const ag_k_sgd *sgd;
  int g;
  bool has_inv;
  float inv;
} popt;

#define MT_PTR(a, g, nm) ((float *)entry_ptr(&AGK_MULTI(a, g, nm)))

static void adamw_range(void *ctx, int64_t lo, int64_t hi) {
  const popt *x = ctx;
  const ag_k_adamw *k = x->adamw;
  float *restrict p = MT_PTR(k, x->g, param), *restrict m = MT_PTR(k, x->g, exp_avg),
                  *restrict v = MT_PTR(k, x->g, exp_avg_sq);
  const float *restrict gr = MT_PTR(k, x->g, grad);
  const float beta1_f = (float)k->beta1, beta2_f = (float)k->beta2, lr_f = (float)k->lr,
              wd_f = (float)k->weight_decay, eps_f = (float)k->eps, bc1_f = (float)k->bias_correction1,
              bc2_f = (float)k->bias_correction2;
  const float c1 = 1.0f - beta1_f, c2 = 1.0f - beta2_f, decay = 1.0f - lr_f * wd_f;
  const float inv = x->has_inv ? x->inv : 1.0f;
  const bool has_inv = x->has_inv;
  for (int64_t i = lo; i < hi; i++) {
    const float g = has_inv ? gr[i] * inv : gr[i];
    const float mi = beta1_f * m[i] + c1 * g;
    const float vi = beta2_f * v[i] + c2 * (g * g);
    float pi = p[i] * decay;
    const float mh = agp_div(mi, bc1_f), vh = agp_div(vi, bc2_f);
    pi = pi - lr_f * agp_div(mh, agp_sqrt(vh) + eps_f);
    m[i] = mi;
    v[i] = vi;
    p[i] = pi;
  }
}

ag_status ag__cpu_p_adamw(const ag_k_adamw *a) {
  float fi;
  if (opt_f32(a->found_inf, &fi) && fi != 0) return AG_OK;
  popt x = {.adamw = a};
  x.has_inv = opt_f32(a->inv_scale, &x.inv);
  for (x.g = 0; x.g < AGK_MULTI_GROUPS(a); x.g++) {
    int64_t n = AGK_MULTI(a, x.g, param).numel;
    ag__cpu_par_for(n, n * 8, adamw_range, &x);
  }
  return AG_OK;
}

static void sgd_range(void *ctx, int64_t lo, int64_t hi) {
  const popt *x = ctx;
  const ag_k_sgd *k = x->sgd;
  float *restrict p = MT_PTR(k, x->g, param);
  const float *restrict gr = MT_PTR(k, x->g, grad);
  float *restrict buf = AGK_MULTI(k, x->g, momentum_buffer).base ? MT_PTR(k, x->g, momentum_buffer) : NULL;
  const float lr_f = (float)k->lr, mom_f = (float)k->momentum, damp_f = (float)k->dampening,
              wd_f = (float)k->weight_decay;
  const float c = 1.0f - damp_f, inv = x->has_inv ? x->inv : 1.0f;
  const bool has_inv = x->has_inv, wd = k->weight_decay != 0, mom = k->momentum != 0 && buf;
  const bool nesterov = k->nesterov != 0, first = k->first_step != 0;
  for (int64_t i = lo; i < hi; i++) {
    float g = has_inv ? gr[i] * inv : gr[i];
    if (wd) g = g + wd_f * p[i];
    if (mom) {
      const float b = first ? g : mom_f * buf[i] + c * g;
      buf[i] = b;
      g = nesterov ? g + mom_f * b : b;
    }
    p[i] = p[i] - lr_f * g;
  }
}

ag_status ag__cpu_p_sgd(const ag_k_sgd *a) {
  float fi;
  if (opt_f32(a->found_inf, &fi) && fi != 0) return AG_OK;
  popt x = {.sgd = a};
  x.has_inv = opt_f32(a->inv_scale, &x.inv);
  for (x.g = 0; x.g < AGK_MULTI_GROUPS(a); x.g++) {
    int64_t n = AGK_MULTI(a, x.g, param).numel;
    ag__cpu_par_for(n, n * 8, sgd_range, &x);
  }
  return AG_OK;
}

/* ---- SUMSQ: S over the tensors of S(x_i * x_i) ---- */

typedef struct psq {
  const ag_kmulti_entry *e;
  float *bs;
} psq;

static void sumsq_blocks(void *ctx, int64_t lo, int64_t hi) {
  const psq *q = ctx;
  const ag_dtype dt = q->e->dtype;
  const char *base = entry_ptr(q->e);
  for (int64_t b = lo; b < hi; b++) {
    const int64_t k0 = b * 256, m = q->e->numel - k0 < 256 ? q->e->numel - k0 : 256;
    float t[256];
    load_f(dt, base + (size_t)k0 * ag__cpu_dtsize(dt), 1, m, t);
    for (int64_t j = 0; j < m; j++) t[j] = t[j] * t[j];
    q->bs[b] = ag__cpu_psum_f32(t, m); /* one block: its tree */
  }
}

ag_status ag__cpu_p_sumsq(const ag_k_sumsq *a) {
  const int T = AGK_MULTI_GROUPS(a);
  for (int k = 0; k < T; k++)
    if (AGK_MULTI(a, k, x).dtype == AG_F64) return ag_k__not_portable(a->call, "cpu", AG_F64);
  float *s = malloc(sizeof(float) * (size_t)(T > 0 ? T : 1));
  if (!s) return ag_error_set(AG_ERR_OOM, "%s: no memory for partial sums", a->call->name ? a->call->name : "sumsq");
  for (int k = 0; k < T; k++) {
    psq q = {.e = &AGK_MULTI(a, k, x)};
    const int64_t n = q.e->numel, nb = (n + 255) / 256;
    /* S(v) is S of its block sums: the blocks in parallel */
    q.bs = malloc(sizeof(float) * (size_t)(nb > 0 ? nb : 1));
    if (!q.bs) {
      free(s);
      return ag_error_set(AG_ERR_OOM, "%s: no memory for partial sums", a->call->name ? a->call->name : "sumsq");
    }
    if (nb > 0) ag__cpu_par_for(nb, n * 2, sumsq_blocks, &q);
    s[k] = n == 0 ? 0.0f : nb == 1 ? q.bs[0] : ag__cpu_psum_f32(q.bs, nb);
    free(q.bs);
  }
  const float out = ag__cpu_psum_f32(s, T);
  free(s);
  elem_store(a->out, 0, out);
  return AG_OK;
}

/* ---- RAND_UNIFORM, RAND_NORMAL, DROPOUT: the default mode's Philox words,
 * the arithmetic in f32 with the host-rounded scalars ---- */

static inline float pu24(uint32_t r) { return (float)(r >> 8) * 0x1p-24f; }

static int64_t numel_of(const ag_koperand *o) {
  int64_t n = 1;
  for (int d = 0; d < o->ndim; d++) n *= o->shape[d];
  return n;
}

typedef struct prand {
  const ag_koperand *out;
  bool normal;
  float a_f, b_f; /* uniform: range_f, lo_f; normal: std_f, mean_f */
  uint64_t seed, offset;
} prand;

/* Tiles of 256 elements (a multiple of 4: no Philox block straddles two). */
static void prand_range(void *ctx, int64_t ta, int64_t tb) {
  const prand *j = ctx;
  const int64_t n = numel_of(j->out);
  const size_t sz = ag__cpu_dtsize(j->out->dtype);
  float v[256];
  for (int64_t t = ta; t < tb; t++) {
    const int64_t i0 = t * 256, m = n - i0 < 256 ? n - i0 : 256;
    uint32_t r[4];
    for (int64_t k = 0; k < m; k++) {
      const int64_t i = i0 + k;
      if (!j->normal) {
        if (k == 0 || (i & 3) == 0) ag_philox4x32(j->offset + (uint64_t)(i >> 2), j->seed, r);
        v[k] = pu24(r[i & 3]) * j->a_f + j->b_f;
      } else {
        if (k == 0 || (i & 1) == 0) ag_philox4x32(j->offset + (uint64_t)(i >> 1), j->seed, r);
        const uint32_t a = r[2 * (i & 1)], b = r[2 * (i & 1) + 1];
        const float u1 = (float)((a >> 8) + 1) * 0x1p-24f, u2 = pu24(b);
        const float nv = agp_sqrt(-2.0f * agp_log(u1)) * agp_cos(6.2831855f * u2);
        v[k] = nv * j->a_f + j->b_f;
      }
    }
    store_f(j->out->dtype, ag__cpu_ptr(j->out) + (size_t)i0 * sz, 1, m, v);
  }
}

static void prand_run(const prand *j) {
  const int64_t n = numel_of(j->out);
  ag__cpu_par_for((n + 255) / 256, n * 8, prand_range, (void *)j);
}

ag_status ag__cpu_p_rand_uniform(const ag_k_rand_uniform *a) {
  prand j = {.out = a->out, .a_f = (float)(a->hi - a->lo), .b_f = (float)a->lo, .seed = a->call->seed,
             .offset = a->call->offset};
  prand_run(&j);
  return AG_OK;
}

ag_status ag__cpu_p_rand_normal(const ag_k_rand_normal *a) {
  prand j = {.out = a->out, .normal = true, .a_f = (float)a->std, .b_f = (float)a->mean, .seed = a->call->seed,
             .offset = a->call->offset};
  prand_run(&j);
  return AG_OK;
}

static void pdropout_range(void *ctx, int64_t ta, int64_t tb) {
  const ag_k_dropout *a = ctx;
  const ag_kernel_call *c = a->call;
  const int64_t n = numel_of(a->x);
  const float p_f = (float)a->p, scale_f = a->p < 1 ? (float)(1.0 / (1.0 - a->p)) : 0.0f;
  float x[256], mk[256];
  for (int64_t t = ta; t < tb; t++) {
    const int64_t i0 = t * 256, m = n - i0 < 256 ? n - i0 : 256;
    load_f(a->x->dtype, ag__cpu_ptr(a->x) + (size_t)i0 * ag__cpu_dtsize(a->x->dtype), 1, m, x);
    uint32_t r[4];
    for (int64_t k = 0; k < m; k++) {
      const int64_t i = i0 + k;
      if (k == 0 || (i & 3) == 0) ag_philox4x32(c->offset + (uint64_t)(i >> 2), c->seed, r);
      mk[k] = pu24(r[i & 3]) >= p_f ? scale_f : 0.0f;
      x[k] = x[k] * mk[k];
    }
    store_f(a->y->dtype, ag__cpu_ptr(a->y) + (size_t)i0 * ag__cpu_dtsize(a->y->dtype), 1, m, x);
    if (a->mask && a->mask->base)
      store_f(a->mask->dtype, ag__cpu_ptr(a->mask) + (size_t)i0 * ag__cpu_dtsize(a->mask->dtype), 1, m, mk);
  }
}

ag_status ag__cpu_p_dropout(const ag_k_dropout *a) {
  const int64_t n = numel_of(a->x);
  ag__cpu_par_for((n + 255) / 256, n * 4, pdropout_range, (void *)a);
  return AG_OK;
}

/* ---- ARANGE (floating): out[i] = start_f + (float)i * step_f ---- */

ag_status ag__cpu_p_arange(const ag_k_arange *a) {
  const ag_koperand *out = a->out;
  const int64_t n = out->ndim ? out->shape[0] : 1;
  const float start_f = (float)a->start, step_f = (float)a->step;
  const size_t sz = ag__cpu_dtsize(out->dtype);
  float v[256];
  for (int64_t i = 0; i < n; i += 256) {
    const int64_t m = n - i < 256 ? n - i : 256;
    for (int64_t k = 0; k < m; k++) v[k] = start_f + (float)(i + k) * step_f;
    store_f(out->dtype, ag__cpu_ptr(out) + (size_t)i * sz, 1, m, v);
  }
  return AG_OK;
}

/* ---- VAR, CUMSUM over x [outer, r, inner]: one line per work item ---- */

typedef struct plines {
  const void *a;
  const ag_koperand *x, *out;
  int64_t outer, r, inner;
  atomic_bool oom;
} plines;

static void var_range(void *ctx, int64_t lo, int64_t hi) {
  plines *L = ctx;
  const ag_k_var *k = L->a;
  const int64_t R = L->r, In = L->inner;
  float *v = malloc(sizeof(float) * (size_t)(2 * (R > 0 ? R : 1)));
  if (!v) {
    atomic_store(&L->oom, true);
    return;
  }
  float *t = v + R;
  double den = (double)R - k->correction;
  if (den < 0) den = 0;
  const float r_f = (float)R, den_f = (float)den;
  for (int64_t w = lo; w < hi; w++) {
    const int64_t o = w / In, i = w % In;
    load_f(L->x->dtype, ag__cpu_ptr(L->x) + (size_t)(o * R * In + i) * ag__cpu_dtsize(L->x->dtype), In, R, v);
    const float mean = agp_div(ag__cpu_psum_f32(v, R), r_f);
    for (int64_t j = 0; j < R; j++) t[j] = (v[j] - mean) * (v[j] - mean);
    float r = agp_div(ag__cpu_psum_f32(t, R), den_f);
    if (k->variant == AG_KV_STD) r = agp_sqrt(r);
    elem_store(L->out, w, r);
  }
  free(v);
}

ag_status ag__cpu_p_var(const ag_k_var *a) {
  plines L = {.a = a, .x = a->x, .out = a->out, .outer = a->outer, .r = a->r, .inner = a->inner};
  atomic_init(&L.oom, false);
  const int64_t n = a->outer * a->inner;
  if (n > 0) ag__cpu_par_for(n, n * (a->r > 0 ? a->r : 1) * 3, var_range, &L);
  if (atomic_load(&L.oom)) return ag_error_set(AG_ERR_OOM, "%s: no memory for a row", a->call->name ? a->call->name : "var");
  return AG_OK;
}

static void cumsum_range(void *ctx, int64_t lo, int64_t hi) {
  plines *L = ctx;
  const ag_k_cumsum *k = L->a;
  const int64_t R = L->r, In = L->inner;
  float *v = malloc(sizeof(float) * (size_t)(R > 0 ? R : 1));
  if (!v) {
    atomic_store(&L->oom, true);
    return;
  }
  const size_t ex = ag__cpu_dtsize(L->x->dtype), ey = ag__cpu_dtsize(L->out->dtype);
  for (int64_t w = lo; w < hi; w++) {
    const int64_t o = w / In, i = w % In;
    load_f(L->x->dtype, ag__cpu_ptr(L->x) + (size_t)(o * R * In + i) * ex, In, R, v);
    float acc = 0.0f;
    if (k->variant == AG_KV_CUMSUM_SUFFIX)
      for (int64_t j = R - 1; j >= 0; j--) v[j] = acc = acc + v[j];
    else
      for (int64_t j = 0; j < R; j++) v[j] = acc = acc + v[j];
    store_f(L->out->dtype, ag__cpu_ptr(L->out) + (size_t)(o * R * In + i) * ey, In, R, v);
  }
  free(v);
}

ag_status ag__cpu_p_cumsum(const ag_k_cumsum *a) {
  plines L = {.a = a, .x = a->x, .out = a->out, .outer = a->outer, .r = a->r, .inner = a->inner};
  atomic_init(&L.oom, false);
  const int64_t n = a->outer * a->inner;
  if (n > 0) ag__cpu_par_for(n, n * (a->r > 0 ? a->r : 1), cumsum_range, &L);
  if (atomic_load(&L.oom))
    return ag_error_set(AG_ERR_OOM, "%s: no memory for a row", a->call->name ? a->call->name : "cumsum");
  return AG_OK;
}

/* ---- GATHER_BWD: sequential in order of k into a zeroed dx, in f32 ---- */

static int64_t gidx(const ag_koperand *ix, int64_t o, int64_t k, int64_t i) {
  return idx_at(ix, o * ix->strides[0] + k * ix->strides[1] + i * ix->strides[2]);
}

ag_status ag__cpu_p_gather_bwd(const ag_k_gather_bwd *a) {
  const int64_t O = a->o, K = a->k, In = a->in, X = a->xlen;
  const ag_dtype d0 = a->dx->dtype, d1 = a->dout->dtype;
  float *acc = malloc(sizeof(float) * (size_t)(X * In > 0 ? X * In : 1));
  if (!acc) return ag_error_set(AG_ERR_OOM, "%s: no memory for the gradient", a->call->name ? a->call->name : "gather");
  const char *g = ag__cpu_ptr(a->dout);
  for (int64_t o = 0; o < O; o++) {
    for (int64_t j = 0; j < X * In; j++) acc[j] = 0.0f;
    for (int64_t k = 0; k < K; k++)
      for (int64_t i = 0; i < In; i++) {
        const int64_t j = gidx(a->index, o, k, i);
        if (j < 0 || j >= X) continue;
        float v;
        load_f(d1, g + (size_t)((o * K + k) * In + i) * ag__cpu_dtsize(d1), 1, 1, &v);
        acc[j * In + i] = acc[j * In + i] + v;
      }
    store_f(d0, ag__cpu_ptr(a->dx) + (size_t)(o * X * In) * ag__cpu_dtsize(d0), 1, X * In, acc);
  }
  free(acc);
  return AG_OK;
}

/* ---- NORM over x [outer, r, inner]: the default's formulas with S and
 * pmath. NaN propagates; L1 S(|x|); INF max |x|; L2 m * sqrt(S((x/m)^2))
 * with m = max |x| (m itself when 0 or inf) ---- */

static void norm_range(void *ctx, int64_t lo, int64_t hi) {
  plines *L = ctx;
  const ag_k_norm *k = L->a;
  const int64_t R = L->r, In = L->inner;
  float *v = malloc(sizeof(float) * (size_t)(2 * (R > 0 ? R : 1)));
  if (!v) {
    atomic_store(&L->oom, true);
    return;
  }
  float *t = v + R;
  for (int64_t w = lo; w < hi; w++) {
    const int64_t o = w / In, i = w % In;
    load_f(L->x->dtype, ag__cpu_ptr(L->x) + (size_t)(o * R * In + i) * ag__cpu_dtsize(L->x->dtype), In, R, v);
    float m = 0.0f;
    bool nan = false;
    for (int64_t j = 0; j < R; j++) {
      t[j] = agp_abs(v[j]);
      nan |= t[j] != t[j];
      m = t[j] > m ? t[j] : m;
    }
    float r;
    if (nan) r = NAN;
    else if (k->variant == AG_KV_NORM_L1) r = ag__cpu_psum_f32(t, R);
    else if (k->variant == AG_KV_NORM_INF || m == 0.0f || m == INFINITY) r = m;
    else {
      for (int64_t j = 0; j < R; j++) {
        const float q = agp_div(v[j], m);
        t[j] = q * q;
      }
      r = m * agp_sqrt(ag__cpu_psum_f32(t, R));
    }
    elem_store(L->out, w, r);
  }
  free(v);
}

ag_status ag__cpu_p_norm(const ag_k_norm *a) {
  plines L = {.a = a, .x = a->x, .out = a->out, .outer = a->outer, .r = a->r, .inner = a->inner};
  atomic_init(&L.oom, false);
  const int64_t n = a->outer * a->inner;
  if (n > 0) ag__cpu_par_for(n, n * (a->r > 0 ? a->r : 1) * 3, norm_range, &L);
  if (atomic_load(&L.oom)) return ag_error_set(AG_ERR_OOM, "%s: no memory for a row", a->call->name ? a->call->name : "norm");
  return AG_OK;
}
