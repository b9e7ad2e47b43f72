/* Conformance of interpolate (nearest, bilinear; size or scale factors,
 * align_corners): the forward against a double-precision reference written
 * from torch's definition (its source-index rules, recompute_scale_factor
 * None), and the gradient against central differences. */
#include "conformance_internal.h"

typedef struct icase {
  const char *name;
  int64_t s[4];
  int layout;
  int64_t oh, ow; /* the size, or 0 */
  double fh, fw;  /* the scale factors, or 0 */
  ag_interp_mode mode;
  bool align;
} icase;

/* torch: a given scale factor s steps the source by 1/s; a given size by
 * in/out; align_corners by (in - 1)/(out - 1). */
static int64_t out_size(int64_t in, int64_t size, double f) { return size ? size : (int64_t)floor((double)in * f); }
static double step(int64_t in, int64_t out, double f, bool align) {
  if (align) return out > 1 ? (double)(in - 1) / (double)(out - 1) : 0;
  return f > 0 ? 1 / f : (double)in / (double)out;
}

/* The two source indices and weights of output o along one axis. */
static void src_of(int64_t o, int64_t in, int64_t out, double st, ag_interp_mode mode, bool align, int64_t *i0,
                   int64_t *i1, double *l0, double *l1) {
  if (mode == AG_INTERP_NEAREST) {
    /* torch's CPU nearest_idx: exact copies for 1x and 2x, else the f32 step */
    int64_t s = out == in ? o : out == 2 * in ? o / 2 : (int64_t)floorf((float)o * (float)st);
    *i0 = *i1 = s < in - 1 ? s : in - 1;
    *l0 = 1;
    *l1 = 0;
    return;
  }
  double s = align ? st * (double)o : st * ((double)o + 0.5) - 0.5;
  if (s < 0) s = 0;
  *i0 = (int64_t)floor(s);
  if (*i0 > in - 1) *i0 = in - 1;
  *i1 = *i0 < in - 1 ? *i0 + 1 : *i0;
  *l1 = fmin(fmax(s - (double)*i0, 0), 1);
  *l0 = 1 - *l1;
}

static void interp_ref(const hbuf *h, const icase *k, int64_t Ho, int64_t Wo, double *ref) {
  const int64_t P = h->shape[0] * h->shape[1], H = h->shape[2], W = h->shape[3];
  const double sh = step(H, Ho, k->fh, k->align), sw = step(W, Wo, k->fw, k->align);
  for (int64_t p = 0; p < P; p++)
    for (int64_t oh = 0; oh < Ho; oh++) {
      int64_t h0, h1, w0, w1;
      double a0, a1, b0, b1;
      src_of(oh, H, Ho, sh, k->mode, k->align, &h0, &h1, &a0, &a1);
      const double *x = h->v + p * H * W;
      for (int64_t ow = 0; ow < Wo; ow++) {
        src_of(ow, W, Wo, sw, k->mode, k->align, &w0, &w1, &b0, &b1);
        ref[(p * Ho + oh) * Wo + ow] = a0 * (b0 * x[h0 * W + w0] + b1 * x[h0 * W + w1]) +
                                       a1 * (b0 * x[h1 * W + w0] + b1 * x[h1 * W + w1]);
      }
    }
}

static const icase IC[] = {
    {"nearest [2,3,5,7] size 8x4", {2, 3, 5, 7}, L_C, 8, 4, 0, 0, AG_INTERP_NEAREST, false},
    {"nearest [1,2,3,4] scale 2", {1, 2, 3, 4}, L_C, 0, 0, 2, 2, AG_INTERP_NEAREST, false},
    {"nearest [2,2,6,5] scale 1.5x0.7", {2, 2, 6, 5}, L_C, 0, 0, 1.5, 0.7, AG_INTERP_NEAREST, false},
    {"nearest [1,3,4,5] size 4x5 (copy)", {1, 3, 4, 5}, L_C, 4, 5, 0, 0, AG_INTERP_NEAREST, false},
    {"nearest transposed [2,2,5,6] size 7x3", {2, 2, 5, 6}, L_T, 7, 3, 0, 0, AG_INTERP_NEAREST, false},
    {"bilinear [2,2,5,6] size 9x4", {2, 2, 5, 6}, L_C, 9, 4, 0, 0, AG_INTERP_BILINEAR, false},
    {"bilinear align [2,3,4,5] size 7x11", {2, 3, 4, 5}, L_C, 7, 11, 0, 0, AG_INTERP_BILINEAR, true},
    {"bilinear [1,2,3,4] scale 2", {1, 2, 3, 4}, L_C, 0, 0, 2, 2, AG_INTERP_BILINEAR, false},
    {"bilinear align [1,2,6,4] scale 1.7x0.5", {1, 2, 6, 4}, L_C, 0, 0, 1.7, 0.5, AG_INTERP_BILINEAR, true},
    {"bilinear [2,1,7,9] scale 0.6x1.3", {2, 1, 7, 9}, L_C, 0, 0, 0.6, 1.3, AG_INTERP_BILINEAR, false},
    {"bilinear align [1,2,3,3] size 1x4", {1, 2, 3, 3}, L_C, 1, 4, 0, 0, AG_INTERP_BILINEAR, true},
    {"bilinear transposed [2,2,4,6] size 5x8", {2, 2, 4, 6}, L_T, 5, 8, 0, 0, AG_INTERP_BILINEAR, false},
    {"bilinear [1,4,16,16] size 37x29", {1, 4, 16, 16}, L_C, 37, 29, 0, 0, AG_INTERP_BILINEAR, false},
};

void ag__conf_op_interpolate(ctx *c) {
  for (size_t k = 0; k < sizeof IC / sizeof IC[0]; k++) {
    const icase *ic = &IC[k];
    ag__conf_case_begin(c, ic->name);
    hbuf *h;
    ag_tensor *x = ag__conf_mk(c, &h, ic->layout, 4, ic->s, G_UNI, -3, 5);
    if (x) {
      const int64_t Ho = out_size(ic->s[2], ic->oh, ic->fh), Wo = out_size(ic->s[3], ic->ow, ic->fw);
      const int64_t os[4] = {ic->s[0], ic->s[1], Ho, Wo}, n = ag__conf_prod(4, os);
      double *ref = ag__conf_cx_alloc(c, (size_t)n * sizeof(double));
      if (ref) interp_ref(h, ic, Ho, Wo, ref);
      guard g;
      ag__conf_guard_begin(c, &g, c->dt, n);
      ag_tensor *o = ag_interpolate(x, ic->oh, ic->ow, ic->fh, ic->fw, ic->mode, ic->align);
      if (!o) ag__conf_on_null(c, "ag_interpolate");
      else if (ref) {
        ag__conf_check(c, o, 4, os, c->dt, ref, DEF);
        ag__conf_guard_end(c, &g);
      }
    }
    ag__conf_case_end(c);
  }
}

/* The gradient rows: arg picks the call. */
static ag_tensor *ip_call(const gdef *g, ag_tensor **x) {
  switch (g->arg) {
    case 0: return ag_interpolate(x[0], 0, 0, 1.5, 2.5, AG_INTERP_NEAREST, false);
    case 1: return ag_interpolate(x[0], 7, 5, 0, 0, AG_INTERP_BILINEAR, false);
    default: return ag_interpolate(x[0], 0, 0, 0.6, 1.7, AG_INTERP_BILINEAR, true);
  }
}

#define GF(lo, hi) G_UNI, lo, hi, 0
static const gdef IP_GRADS[] = {
    {"grad_interpolate_nearest", -1, 1, {{4, {2, 2, 3, 4}, GF(-2, 2)}}, 0},
    {"grad_interpolate_bilinear", -1, 1, {{4, {2, 2, 4, 3}, GF(-2, 2)}}, 1},
    {"grad_interpolate_bilinear_align", -1, 1, {{4, {1, 2, 5, 4}, GF(-2, 2)}}, 2},
};
#undef GF

void ag__conf_op_grad_interpolate(ctx *c) {
  for (size_t i = 0; i < sizeof IP_GRADS / sizeof IP_GRADS[0]; i++)
    if (!strcmp(IP_GRADS[i].name, c->opname)) ag__conf_grad_check(c, &IP_GRADS[i], ip_call);
}
