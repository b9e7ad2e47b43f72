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
#include "cpu_portable.h"

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

/* ---- forward: one (n, co) plane per work item ---- */
static void pconv_fwd_range(void *ctx, int64_t lo, int64_t hi) {
  pconv *p = ctx;
  float *acc = malloc(sizeof(float) * (size_t)(p->Ho * p->Wo > 0 ? p->Ho * p->Wo : 1));
  if (!acc) {
    atomic_store(&p->oom, true);
    return;
  }
  for (int64_t q = lo; q < hi; q++) {
    const int64_t n = q / p->Co, co = q % p->Co, g = co / p->cog;
    for (int64_t i = 0; i < p->Ho * p->Wo; i++) acc[i] = 0.0f;
    for (int64_t c = 0; c < p->cig; c++) {
      const float *xp = p->x + (n * p->Ci + g * p->cig + c) * p->H * p->W;
      const float *wp = p->w + (co * p->cig + c) * p->KH * p->KW;
      for (int64_t kh = 0; kh < p->KH; kh++)
        for (int64_t kw = 0; kw < p->KW; kw++) {
          const float wv = wp[kh * p->KW + kw];
          const int64_t offw = kw * p->dw - p->pw;
          int64_t o0, o1;
          ow_range(p, offw, &o0, &o1);
          for (int64_t oh = 0; oh < p->Ho; oh++) {
            const int64_t ih = oh * p->sh - p->ph + kh * p->dh;
            if (ih < 0 || ih >= p->H) continue;
            const float *xr = xp + ih * p->W + offw;
            float *ar = acc + oh * p->Wo;
            if (p->sw == 1)
              for (int64_t ow = o0; ow < o1; ow++) ar[ow] = ar[ow] + xr[ow] * wv;
            else
              for (int64_t ow = o0; ow < o1; ow++) ar[ow] = ar[ow] + xr[ow * p->sw] * wv;
          }
        }
    }
    float *yp = p->out + q * p->Ho * p->Wo;
    if (p->bias) {
      const float b = p->bias[co];
      for (int64_t i = 0; i < p->Ho * p->Wo; i++) yp[i] = acc[i] + b;
    } else {
      memcpy(yp, acc, sizeof(float) * (size_t)(p->Ho * p->Wo));
    }
  }
  free(acc);
}

/* ---- input gradient: one (n, ci) plane per work item ---- */
static void pconv_bwd_in_range(void *ctx, int64_t lo, int64_t hi) {
  pconv *p = ctx;
  for (int64_t q = lo; q < hi; q++) {
    const int64_t n = q / p->Ci, ci = q % p->Ci, g = ci / p->cig, c = ci % p->cig;
    float *dx = p->out + q * p->H * p->W;
    for (int64_t i = 0; i < p->H * p->W; i++) dx[i] = 0.0f;
    for (int64_t k = 0; k < p->cog; k++) {
      const int64_t co = g * p->cog + k;
      const float *gp = p->dy + (n * p->Co + co) * p->Ho * p->Wo;
      const float *wp = p->w + (co * p->cig + c) * p->KH * p->KW;
      for (int64_t kh = 0; kh < p->KH; kh++)
        for (int64_t kw = 0; kw < p->KW; kw++) {
          const float wv = wp[kh * p->KW + kw];
          const int64_t offw = kw * p->dw - p->pw;
          int64_t o0, o1;
          ow_range(p, offw, &o0, &o1);
          for (int64_t oh = 0; oh < p->Ho; oh++) {
            const int64_t ih = oh * p->sh - p->ph + kh * p->dh;
            if (ih < 0 || ih >= p->H) continue;
            /* each (h, w) is reached by at most one (oh, ow) per tap */
            float *dr = dx + ih * p->W + offw;
            const float *gr = gp + oh * p->Wo;
            if (p->sw == 1)
              for (int64_t ow = o0; ow < o1; ow++) dr[ow] = dr[ow] + gr[ow] * wv;
            else
              for (int64_t ow = o0; ow < o1; ow++) dr[ow * p->sw] = dr[ow * p->sw] + gr[ow] * wv;
          }
        }
    }
  }
}

/* ---- weight gradient: one (co, c) pair per work item, all taps ---- */
static void pconv_bwd_w_range(void *ctx, int64_t lo, int64_t hi) {
  pconv *p = ctx;
  const int64_t L = p->N * p->Ho * p->Wo;
  float *t = malloc(sizeof(float) * (size_t)(L > 0 ? L : 1));
  if (!t) {
    atomic_store(&p->oom, true);
    return;
  }
  for (int64_t q = lo; q < hi; q++) {
    const int64_t co = q / p->cig, c = q % p->cig, g = co / p->cog, ci = g * p->cig + c;
    for (int64_t kh = 0; kh < p->KH; kh++)
      for (int64_t kw = 0; kw < p->KW; kw++) {
        const int64_t offw = kw * p->dw - p->pw;
        int64_t o0, o1;
        ow_range(p, offw, &o0, &o1);
        for (int64_t n = 0; n < p->N; n++) {
          const float *gp = p->dy + (n * p->Co + co) * p->Ho * p->Wo;
          const float *xp = p->x + (n * p->Ci + ci) * p->H * p->W;
          for (int64_t oh = 0; oh < p->Ho; oh++) {
            float *tr = t + (n * p->Ho + oh) * p->Wo;
            const int64_t ih = oh * p->sh - p->ph + kh * p->dh;
            for (int64_t ow = 0; ow < p->Wo; ow++) tr[ow] = 0.0f; /* padding taps: +0 */
            if (ih < 0 || ih >= p->H) continue;
            const float *xr = xp + ih * p->W + offw;
            const float *gr = gp + oh * p->Wo;
            for (int64_t ow = o0; ow < o1; ow++) tr[ow] = gr[ow] * xr[ow * p->sw];
          }
        }
        p->out[(q * p->KH + kh) * p->KW + kw] = ag__cpu_psum_f32(t, L);
      }
  }
  free(t);
}

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
  ag__cpu_par_for(planes, planes * p.Ho * p.Wo * p.cig * p.KH * p.KW, pconv_fwd_range, &p);
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
  ag__cpu_par_for(planes, planes * p.Ho * p.Wo * p.cog * p.KH * p.KW, pconv_bwd_in_range, &p);
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
  ag__cpu_par_for(items, items * p.N * p.Ho * p.Wo * p.KH * p.KW, pconv_bwd_w_range, &p);
  return pconv_done(&p, a->call);
}
