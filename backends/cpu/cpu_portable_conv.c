/* Portable numerics on the CPU (docs/numerics.md), part 3: 2-D convolution
 * and its two gradients, f32, NCHW contiguous. Every output element is
 * accumulated by one thread in the contract's order (forward: ci, kh, kw;
 * input gradient: co, kh, kw; weight gradient: S over (n, oh, ow)), with
 * whole planes of accumulators so the loops over a row vectorise. Built
 * like cpu_portable.c (no contraction). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3", "no-trapping-math", "fp-contract=off")
#endif
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_backend.h"
#include "cpu_pmath.h"
#include "cpu_portable.h"
#include "cpu_tile.h"

typedef struct pconv {
  int64_t N, Ci, H, W, Co, Ho, Wo, KH, KW, sh, sw, ph, pw, dh, dw, G, cig, cog;
  const float *x, *w, *dy, *bias;
  float *out;
  atomic_bool oom;
} pconv;

#define PCONV_OF(a, X, Wt, Y)                                                                             \
  ((pconv){.N = (X)->shape[0], .Ci = (X)->shape[1], .H = (X)->shape[2], .W = (X)->shape[3],                \
           .Co = (Y)->shape[1], .Ho = (Y)->shape[2], .Wo = (Y)->shape[3], .KH = (Wt)->shape[2],            \
           .KW = (Wt)->shape[3], .sh = (a)->stride_h, .sw = (a)->stride_w, .ph = (a)->pad_h,               \
           .pw = (a)->pad_w, .dh = (a)->dilation_h, .dw = (a)->dilation_w, .G = (a)->groups > 0 ? (a)->groups : 1})

static void pconv_groups(pconv *p) {
  p->cig = p->Ci / p->G;
  p->cog = p->Co / p->G;
}

/* The output columns ow whose input column ow*sw - pw + k*dw is in [0, W):
 * [*lo, *hi). */
static void ow_range(const pconv *p, int64_t off, int64_t *lo, int64_t *hi) {
  /* iw = ow*sw + off in [0, W) */
  int64_t a = off >= 0 ? 0 : (-off + p->sw - 1) / p->sw;
  int64_t b = p->W - off <= 0 ? 0 : (p->W - off + p->sw - 1) / p->sw;
  if (b > p->Wo) b = p->Wo;
  *lo = a;
  *hi = b > a ? b : a;
}

#define PSUF(x) x##_base
#include "cpu_portable_conv.inc"
#undef PSUF
#if defined(AG_X86)
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2")
#endif
#define PSUF(x) x##_avx2
#include "cpu_portable_conv.inc"
#undef PSUF
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#define PCV(fn) (ag__cpu_p_isa >= 1 && __builtin_cpu_supports("avx2") ? fn##_avx2 : fn##_base)
#else
#define PCV(fn) fn##_base
#endif

static ag_status pconv_done(pconv *p, const ag_kernel_call *c) {
  if (atomic_load(&p->oom))
    return ag_error_set(AG_ERR_OOM, "%s: no memory for convolution scratch", c->name ? c->name : "conv2d");
  return AG_OK;
}

ag_status ag__cpu_p_conv2d(const ag_k_conv2d *a) {
  pconv p = PCONV_OF(a, a->x, a->w, a->y);
  pconv_groups(&p);
  atomic_init(&p.oom, false);
  p.x = (const float *)ag__cpu_ptr(a->x);
  p.w = (const float *)ag__cpu_ptr(a->w);
  p.bias = a->bias && a->bias->base ? (const float *)ag__cpu_ptr(a->bias) : NULL;
  p.out = (float *)ag__cpu_ptr(a->y);
  const int64_t planes = p.N * p.Co;
  ag__cpu_par_for(planes, planes * p.Ho * p.Wo * p.cig * p.KH * p.KW, PCV(pconv_fwd_range), &p);
  return pconv_done(&p, a->call);
}

ag_status ag__cpu_p_conv2d_bwd_input(const ag_k_conv2d_bwd_input *a) {
  pconv p = PCONV_OF(a, a->dx, a->w, a->dy);
  pconv_groups(&p);
  atomic_init(&p.oom, false);
  p.dy = (const float *)ag__cpu_ptr(a->dy);
  p.w = (const float *)ag__cpu_ptr(a->w);
  p.out = (float *)ag__cpu_ptr(a->dx);
  const int64_t planes = p.N * p.Ci;
  ag__cpu_par_for(planes, planes * p.Ho * p.Wo * p.cog * p.KH * p.KW, PCV(pconv_bwd_in_range), &p);
  return pconv_done(&p, a->call);
}

ag_status ag__cpu_p_conv2d_bwd_weight(const ag_k_conv2d_bwd_weight *a) {
  pconv p = PCONV_OF(a, a->x, a->dw, a->dy);
  pconv_groups(&p);
  atomic_init(&p.oom, false);
  p.dy = (const float *)ag__cpu_ptr(a->dy);
  p.x = (const float *)ag__cpu_ptr(a->x);
  p.out = (float *)ag__cpu_ptr(a->dw);
  const int64_t items = p.Co * p.cig;
  ag__cpu_par_for(items, items * p.N * p.Ho * p.Wo * p.KH * p.KW, PCV(pconv_bwd_w_range), &p);
  return pconv_done(&p, a->call);
}

/* ---- BN_STATS, BN_APPLY over [n, c, hw] (f32): per channel, S over the
 * flattened (n, hw), n outermost; the affine map left to right ---- */

typedef struct pbn {
  const ag_k_bn_stats *s;
  const ag_k_bn_apply *ap;
  const float *a, *b, *mu, *coef;
  float *y;
  int64_t N, C, HW;
  int64_t ch;      /* the channel being summed */
  float mean;      /* BN_MEAN_VAR's second pass */
  int term;        /* 0: a; 1: (a - mean)^2; 2: a * (b - mu) */
} pbn;

static void pbn_fill(const void *ctx, int64_t k0, int64_t m, float *t) {
  const pbn *p = ctx;
  int64_t n = k0 / p->HW, i = k0 % p->HW, k = 0;
  while (k < m) { /* runs of one sample's hw */
    const int64_t run = p->HW - i < m - k ? p->HW - i : m - k, at = (n * p->C + p->ch) * p->HW + i;
    const float *a = p->a + at;
    if (p->term == 0) {
      memcpy(t + k, a, sizeof(float) * (size_t)run);
    } else if (p->term == 1) {
      for (int64_t r = 0; r < run; r++) t[k + r] = (a[r] - p->mean) * (a[r] - p->mean);
    } else {
      const float *b = p->b + at, mu = p->mu[p->ch];
      for (int64_t r = 0; r < run; r++) t[k + r] = a[r] * (b[r] - mu);
    }
    k += run;
    i = 0;
    n++;
  }
}

static void pbn_stats_range(void *ctx, int64_t lo, int64_t hi) {
  const pbn *p0 = ctx;
  const int64_t L = p0->N * p0->HW;
  const float cnt_f = (float)L;
  for (int64_t c = lo; c < hi; c++) {
    pbn p = *p0;
    p.ch = c;
    if (p.s->variant == AG_KV_BN_SUMS) {
      p.term = 0;
      p.y[c] = ag__cpu_psum_gen(L, pbn_fill, &p);
      p.term = 2;
      p.y[p.C + c] = ag__cpu_psum_gen(L, pbn_fill, &p);
    } else {
      p.term = 0;
      p.mean = agp_div(ag__cpu_psum_gen(L, pbn_fill, &p), cnt_f);
      p.term = 1;
      p.y[c] = p.mean;
      p.y[p.C + c] = agp_div(ag__cpu_psum_gen(L, pbn_fill, &p), cnt_f);
    }
  }
}

ag_status ag__cpu_p_bn_stats(const ag_k_bn_stats *a) {
  const bool sums = a->variant == AG_KV_BN_SUMS;
  pbn p = {.s = a, .a = (const float *)ag__cpu_ptr(a->a), .b = sums ? (const float *)ag__cpu_ptr(a->b) : NULL,
           .mu = sums ? (const float *)ag__cpu_ptr(a->mu) : NULL, .y = (float *)ag__cpu_ptr(a->stats), .N = a->n,
           .C = a->c, .HW = a->hw};
  if (p.C > 0) ag__cpu_par_for(p.C, 2 * p.N * p.C * p.HW, pbn_stats_range, &p);
  return AG_OK;
}

static void pbn_apply_range(void *ctx, int64_t lo, int64_t hi) {
  const pbn *p = ctx;
  const bool with_b = p->ap->variant == AG_KV_BN_AFFINE_B;
  for (int64_t q = lo; q < hi; q++) {
    const int64_t c = q % p->C;
    const float pc = p->coef[c], qc = p->coef[p->C + c];
    const float *a = p->a + q * p->HW;
    float *y = p->y + q * p->HW;
    if (with_b) {
      const float rc = p->coef[2 * p->C + c], mc = p->coef[3 * p->C + c];
      const float *b = p->b + q * p->HW;
      for (int64_t i = 0; i < p->HW; i++) y[i] = (a[i] * pc + qc) + (b[i] - mc) * rc;
    } else {
      for (int64_t i = 0; i < p->HW; i++) y[i] = a[i] * pc + qc;
    }
  }
}

ag_status ag__cpu_p_bn_apply(const ag_k_bn_apply *a) {
  const bool with_b = a->variant == AG_KV_BN_AFFINE_B;
  pbn p = {.ap = a, .a = (const float *)ag__cpu_ptr(a->a), .b = with_b ? (const float *)ag__cpu_ptr(a->b) : NULL,
           .coef = (const float *)ag__cpu_ptr(a->coef), .y = (float *)ag__cpu_ptr(a->y), .N = a->n, .C = a->c,
           .HW = a->hw};
  if (p.N * p.C > 0) ag__cpu_par_for(p.N * p.C, p.N * p.C * p.HW, pbn_apply_range, &p);
  return AG_OK;
}

/* ---- GROUP_NORM(_BWD) over x [n, c, hw]: LAYERNORM's rules on each
 * (sample, group) block of c/groups channels of hw (contiguous), the weight
 * and bias per channel; dw, db per channel as S over the flattened
 * (n, hw), n outermost ---- */

typedef struct pgn {
  const ag_k_group_norm *f;
  const ag_k_group_norm_bwd *b;
  int64_t cpg, hw, groups, C;
  int64_t ch;
  int term; /* 0: dy * xh, 1: dy */
  atomic_bool oom;
} pgn;

static float pgn_elem(const ag_koperand *o, int64_t i) {
  float v;
  load_f(o->dtype, ag__cpu_ptr(o) + (size_t)i * ag__cpu_dtsize(o->dtype), 1, 1, &v);
  return v;
}
static void pgn_store(const ag_koperand *o, int64_t i, float v) {
  store_f(o->dtype, ag__cpu_ptr(o) + (size_t)i * ag__cpu_dtsize(o->dtype), 1, 1, &v);
}

static void pgn_fwd_range(void *ctx, int64_t lo, int64_t hi) {
  pgn *p = ctx;
  const ag_k_group_norm *a = p->f;
  const int64_t M = p->cpg * p->hw;
  float *x = malloc(sizeof(float) * (size_t)(2 * (M > 0 ? M : 1)));
  if (!x) {
    atomic_store(&p->oom, true);
    return;
  }
  float *t = x + M;
  const float d_f = (float)M, eps_f = (float)a->eps;
  for (int64_t blk = lo; blk < hi; blk++) {
    const int64_t c0 = blk % p->groups * p->cpg;
    load_f(a->x->dtype, ag__cpu_ptr(a->x) + (size_t)(blk * M) * ag__cpu_dtsize(a->x->dtype), 1, M, x);
    const float mean = agp_div(ag__cpu_psum_f32(x, M), d_f);
    for (int64_t k = 0; k < M; k++) t[k] = (x[k] - mean) * (x[k] - mean);
    const float var = agp_div(ag__cpu_psum_f32(t, M), d_f);
    const float rstd = agp_div(1.0f, agp_sqrt(var + eps_f));
    for (int64_t k = 0; k < M; k++) t[k] = (x[k] - mean) * rstd;
    if (a->weight)
      for (int64_t c = 0; c < p->cpg; c++) {
        const float w = pgn_elem(a->weight, c0 + c);
        for (int64_t i = 0; i < p->hw; i++) t[c * p->hw + i] = t[c * p->hw + i] * w;
      }
    if (a->bias)
      for (int64_t c = 0; c < p->cpg; c++) {
        const float b = pgn_elem(a->bias, c0 + c);
        for (int64_t i = 0; i < p->hw; i++) t[c * p->hw + i] = t[c * p->hw + i] + b;
      }
    store_f(a->y->dtype, ag__cpu_ptr(a->y) + (size_t)(blk * M) * ag__cpu_dtsize(a->y->dtype), 1, M, t);
    if (a->mean) pgn_store(a->mean, blk, mean);
    if (a->rstd) pgn_store(a->rstd, blk, rstd);
  }
  free(x);
}

ag_status ag__cpu_p_group_norm(const ag_k_group_norm *a) {
  pgn p = {.f = a, .cpg = a->c / a->groups, .hw = a->hw, .groups = a->groups, .C = a->c};
  atomic_init(&p.oom, false);
  if (a->n * a->groups > 0) ag__cpu_par_for(a->n * a->groups, a->n * a->c * a->hw * 4, pgn_fwd_range, &p);
  if (atomic_load(&p.oom))
    return ag_error_set(AG_ERR_OOM, "%s: no memory for group norm scratch", a->call->name ? a->call->name : "group_norm");
  return AG_OK;
}

static void pgn_bwd_range(void *ctx, int64_t lo, int64_t hi) {
  pgn *p = ctx;
  const ag_k_group_norm_bwd *a = p->b;
  const int64_t M = p->cpg * p->hw;
  float *g = malloc(sizeof(float) * (size_t)(3 * (M > 0 ? M : 1)));
  if (!g) {
    atomic_store(&p->oom, true);
    return;
  }
  float *xh = g + M, *t = xh + M;
  const float d_f = (float)M;
  for (int64_t blk = lo; blk < hi; blk++) {
    const int64_t c0 = blk % p->groups * p->cpg;
    const float mean = pgn_elem(a->mean, blk), rstd = pgn_elem(a->rstd, blk);
    load_f(a->dy->dtype, ag__cpu_ptr(a->dy) + (size_t)(blk * M) * ag__cpu_dtsize(a->dy->dtype), 1, M, g);
    load_f(a->x->dtype, ag__cpu_ptr(a->x) + (size_t)(blk * M) * ag__cpu_dtsize(a->x->dtype), 1, M, xh);
    for (int64_t k = 0; k < M; k++) xh[k] = (xh[k] - mean) * rstd;
    if (a->weight)
      for (int64_t c = 0; c < p->cpg; c++) {
        const float w = pgn_elem(a->weight, c0 + c);
        for (int64_t i = 0; i < p->hw; i++) g[c * p->hw + i] = g[c * p->hw + i] * w;
      }
    const float ma = agp_div(ag__cpu_psum_f32(g, M), d_f);
    for (int64_t k = 0; k < M; k++) t[k] = g[k] * xh[k];
    const float mb = agp_div(ag__cpu_psum_f32(t, M), d_f);
    for (int64_t k = 0; k < M; k++) t[k] = ((g[k] - ma) - xh[k] * mb) * rstd;
    store_f(a->dx->dtype, ag__cpu_ptr(a->dx) + (size_t)(blk * M) * ag__cpu_dtsize(a->dx->dtype), 1, M, t);
  }
  free(g);
}

static void pgn_param_fill(const void *ctx, int64_t k0, int64_t m, float *t) {
  const pgn *p = ctx;
  const ag_k_group_norm_bwd *a = p->b;
  for (int64_t k = 0; k < m; k++) {
    const int64_t f = k0 + k, n = f / p->hw, i = f % p->hw, at = (n * p->C + p->ch) * p->hw + i;
    const float dy = pgn_elem(a->dy, at);
    if (p->term == 1) {
      t[k] = dy;
    } else {
      const int64_t blk = n * p->groups + p->ch / p->cpg;
      const float xh = (pgn_elem(a->x, at) - pgn_elem(a->mean, blk)) * pgn_elem(a->rstd, blk);
      t[k] = dy * xh;
    }
  }
}

static void pgn_param_range(void *ctx, int64_t lo, int64_t hi) {
  const pgn *p0 = ctx;
  const ag_k_group_norm_bwd *a = p0->b;
  const ag_kmulti_entry *dw = &AGK_MULTI(a, 0, dw), *db = &AGK_MULTI(a, 0, db);
  const int64_t L = a->n * p0->hw;
  for (int64_t c = lo; c < hi; c++) {
    pgn p = *p0;
    p.ch = c;
    if (dw->base) {
      p.term = 0;
      float v = ag__cpu_psum_gen(L, pgn_param_fill, &p);
      store_f(dw->dtype, (char *)dw->base + dw->offset + (size_t)c * ag__cpu_dtsize(dw->dtype), 1, 1, &v);
    }
    if (db->base) {
      p.term = 1;
      float v = ag__cpu_psum_gen(L, pgn_param_fill, &p);
      store_f(db->dtype, (char *)db->base + db->offset + (size_t)c * ag__cpu_dtsize(db->dtype), 1, 1, &v);
    }
  }
}

ag_status ag__cpu_p_group_norm_bwd(const ag_k_group_norm_bwd *a) {
  pgn p = {.b = a, .cpg = a->c / a->groups, .hw = a->hw, .groups = a->groups, .C = a->c};
  atomic_init(&p.oom, false);
  const int64_t work = a->n * a->c * a->hw * 6;
  if (a->n * a->groups > 0) ag__cpu_par_for(a->n * a->groups, work, pgn_bwd_range, &p);
  if (!atomic_load(&p.oom) && AGK_MULTI_GROUPS(a) > 0 && a->c > 0) ag__cpu_par_for(a->c, work, pgn_param_range, &p);
  if (atomic_load(&p.oom))
    return ag_error_set(AG_ERR_OOM, "%s: no memory for group norm scratch", a->call->name ? a->call->name : "group_norm");
  return AG_OK;
}

/* ---- INTERPOLATE(_BWD), f32 data: the axes' source indices and f32
 * weights as kops.h gives them (the default's f32 path); bilinear
 * y = a0 * (b0 * v00 + b1 * v01) + a1 * (b0 * v10 + b1 * v11); the backward
 * sums, for each dx element, the outputs that read it in row-major order
 * of (oh, ow), each term (wh * ww) * dy (a weight l0 + l1 where both taps
 * of an axis fall on the same input) ---- */

typedef struct paxis {
  int64_t in, out;
  int64_t *i0, *i1;
  float *l0, *l1;
} paxis;

static bool paxis_init(paxis *x, int64_t in, int64_t out, double scale, bool nearest, bool align) {
  x->in = in;
  x->out = out;
  x->i0 = malloc(sizeof(int64_t) * (size_t)(2 * (out > 0 ? out : 1)));
  x->l0 = malloc(sizeof(float) * (size_t)(2 * (out > 0 ? out : 1)));
  if (!x->i0 || !x->l0) {
    free(x->i0);
    free(x->l0);
    return false;
  }
  x->i1 = x->i0 + out;
  x->l1 = x->l0 + out;
  for (int64_t o = 0; o < out; o++) {
    int64_t i0;
    float l0 = 1.0f, l1 = 0.0f;
    if (nearest) {
      if (out == in) i0 = o;
      else if (out == 2 * in) i0 = o >> 1;
      else {
        const float f = (float)o * (float)scale;
        const int64_t s = (int64_t)agp_floor(f);
        i0 = s < in - 1 ? s : in - 1;
      }
    } else {
      const float sc = (float)scale;
      float s = align ? sc * (float)o : sc * ((float)o + 0.5f) - 0.5f;
      if (s < 0) s = 0;
      i0 = (int64_t)s;
      if (i0 > in - 1) i0 = in - 1;
      float lf = s - (float)i0;
      lf = lf < 0.0f ? 0.0f : lf > 1.0f ? 1.0f : lf;
      l1 = lf;
      l0 = 1.0f - lf;
    }
    x->i0[o] = i0;
    x->i1[o] = nearest ? i0 : i0 + (i0 < in - 1);
    x->l0[o] = l0;
    x->l1[o] = l1;
  }
  return true;
}

static void paxis_free(paxis *x) {
  free(x->i0);
  free(x->l0);
}

/* The weight with which output o reads input i (0 when it does not). */
static bool paxis_w(const paxis *x, int64_t o, int64_t i, float *w) {
  const int64_t a = x->i0[o], b = x->i1[o];
  if (a == b) {
    if (a != i) return false;
    *w = x->l0[o] + x->l1[o];
    return true;
  }
  if (a == i) *w = x->l0[o];
  else if (b == i) *w = x->l1[o];
  else return false;
  return true;
}

typedef struct pip {
  const ag_koperand *dst, *src;
  paxis h, w;
  bool nearest;
  atomic_bool oom;
} pip;

static void pip_fwd_rows(void *ctx, int64_t lo, int64_t hi) {
  pip *j = ctx;
  const int64_t H = j->h.in, W = j->w.in, Ho = j->h.out, Wo = j->w.out;
  float *v = malloc(sizeof(float) * (size_t)(2 * W + Wo));
  if (!v) {
    atomic_store(&j->oom, true);
    return;
  }
  float *r1 = v + W, *out = r1 + W;
  const size_t es = ag__cpu_dtsize(j->src->dtype), eo = ag__cpu_dtsize(j->dst->dtype);
  for (int64_t row = lo; row < hi; row++) {
    const int64_t p = row / Ho, oh = row % Ho, h0 = j->h.i0[oh], h1 = j->h.i1[oh];
    const float a0 = j->h.l0[oh], a1 = j->h.l1[oh];
    load_f(j->src->dtype, ag__cpu_ptr(j->src) + (size_t)((p * H + h0) * W) * es, 1, W, v);
    if (j->nearest) {
      for (int64_t ow = 0; ow < Wo; ow++) out[ow] = v[j->w.i0[ow]];
    } else {
      load_f(j->src->dtype, ag__cpu_ptr(j->src) + (size_t)((p * H + h1) * W) * es, 1, W, r1);
      for (int64_t ow = 0; ow < Wo; ow++) {
        const int64_t w0 = j->w.i0[ow], w1 = j->w.i1[ow];
        const float b0 = j->w.l0[ow], b1 = j->w.l1[ow];
        out[ow] = a0 * (b0 * v[w0] + b1 * v[w1]) + a1 * (b0 * r1[w0] + b1 * r1[w1]);
      }
    }
    store_f(j->dst->dtype, ag__cpu_ptr(j->dst) + (size_t)(row * Wo) * eo, 1, Wo, out);
  }
  free(v);
}

static void pip_bwd_rows(void *ctx, int64_t lo, int64_t hi) {
  pip *j = ctx;
  const int64_t H = j->h.in, W = j->w.in, Ho = j->h.out, Wo = j->w.out;
  float *v = malloc(sizeof(float) * (size_t)(Wo + W));
  if (!v) {
    atomic_store(&j->oom, true);
    return;
  }
  float *acc = v + Wo;
  const size_t es = ag__cpu_dtsize(j->src->dtype), eo = ag__cpu_dtsize(j->dst->dtype);
  for (int64_t row = lo; row < hi; row++) {
    const int64_t p = row / H, ih = row % H;
    for (int64_t iw = 0; iw < W; iw++) acc[iw] = 0.0f;
    for (int64_t oh = 0; oh < Ho; oh++) {
      float wh;
      if (!paxis_w(&j->h, oh, ih, &wh)) continue;
      load_f(j->src->dtype, ag__cpu_ptr(j->src) + (size_t)((p * Ho + oh) * Wo) * es, 1, Wo, v);
      for (int64_t ow = 0; ow < Wo; ow++) {
        const int64_t w0 = j->w.i0[ow], w1 = j->w.i1[ow];
        if (w0 == w1) {
          const float ww = j->w.l0[ow] + j->w.l1[ow];
          acc[w0] = acc[w0] + (wh * ww) * v[ow];
        } else {
          acc[w0] = acc[w0] + (wh * j->w.l0[ow]) * v[ow];
          acc[w1] = acc[w1] + (wh * j->w.l1[ow]) * v[ow];
        }
      }
    }
    store_f(j->dst->dtype, ag__cpu_ptr(j->dst) + (size_t)(row * W) * eo, 1, W, acc);
  }
  free(v);
}

static ag_status pip_run(const ag_kernel_call *call, const ag_koperand *dst, const ag_koperand *src,
                         const ag_koperand *big, int variant, double sh, double sw, int64_t align, bool bwd) {
  pip j = {.dst = dst, .src = src, .nearest = variant == AG_KV_INTERP_NEAREST};
  atomic_init(&j.oom, false);
  const ag_koperand *small = big == dst ? src : dst;
  const int64_t P = big->shape[0] * big->shape[1];
  if (!paxis_init(&j.h, big->shape[2], small->shape[2], sh, j.nearest, align != 0))
    return ag_error_set(AG_ERR_OOM, "%s: no memory for interpolate indices", call->name ? call->name : "interpolate");
  if (!paxis_init(&j.w, big->shape[3], small->shape[3], sw, j.nearest, align != 0)) {
    paxis_free(&j.h);
    return ag_error_set(AG_ERR_OOM, "%s: no memory for interpolate indices", call->name ? call->name : "interpolate");
  }
  const int64_t work = P * small->shape[2] * small->shape[3] * 8;
  if (bwd) ag__cpu_par_for(P * j.h.in, work, pip_bwd_rows, &j);
  else ag__cpu_par_for(P * j.h.out, work, pip_fwd_rows, &j);
  paxis_free(&j.h);
  paxis_free(&j.w);
  if (atomic_load(&j.oom))
    return ag_error_set(AG_ERR_OOM, "%s: no memory for interpolate rows", call->name ? call->name : "interpolate");
  return AG_OK;
}

ag_status ag__cpu_p_interpolate(const ag_k_interpolate *a) {
  return pip_run(a->call, a->y, a->x, a->x, a->variant, a->scale_h, a->scale_w, a->align_corners, false);
}

ag_status ag__cpu_p_interpolate_bwd(const ag_k_interpolate_bwd *a) {
  return pip_run(a->call, a->dx, a->dy, a->dx, a->variant, a->scale_h, a->scale_w, a->align_corners, true);
}
