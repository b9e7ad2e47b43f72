/* CPU interpolate (AG_K_INTERPOLATE, AG_K_INTERPOLATE_BWD), nearest and
 * bilinear on contiguous NCHW: the reference of the other backends. Source
 * indices and weights per axis are computed once (kops.h gives the
 * formulas: f32 for f32/f16/bf16, f64 for f64, nearest always f32, as
 * torch); sums in double. The backward gathers: each input element sums
 * the outputs that read it (a range of rows and columns, the source index
 * being monotonic), rows then columns in order: no atomics. */
#include <stdatomic.h>
#include <stdlib.h>

#include "cpu_backend.h"
#include "cpu_portable.h"
#include "cpu_tile.h"


/* One axis: out positions read i0 with weight l0 and i1 with weight l1;
 * start[i] (i in 0..in) is the first output whose i0 >= i. */
typedef struct axis {
  int64_t in, out;
  int64_t *i0, *i1, *start;
  double *l0, *l1;
} axis;

static bool axis_init(axis *x, int64_t in, int64_t out, double scale, bool nearest, bool align, bool f64) {
  x->in = in;
  x->out = out;
  x->i0 = malloc(sizeof(int64_t) * (size_t)(2 * out + in + 1));
  x->l0 = malloc(sizeof(double) * (size_t)(2 * out));
  if (!x->i0 || !x->l0) {
    free(x->i0);
    free(x->l0);
    return false;
  }
  x->i1 = x->i0 + out;
  x->start = x->i1 + out;
  x->l1 = x->l0 + out;
  for (int64_t o = 0; o < out; o++) {
    int64_t i0;
    double l0, l1;
    if (nearest) {
      if (out == in) i0 = o;
      else if (out == 2 * in) i0 = o >> 1;
      else {
        const int64_t s = (int64_t)floorf((float)o * (float)scale);
        i0 = s < in - 1 ? s : in - 1;
      }
      l0 = 1;
      l1 = 0;
    } else if (f64) {
      double s = align ? scale * (double)o : scale * ((double)o + 0.5) - 0.5;
      if (s < 0) s = 0;
      i0 = (int64_t)s;
      if (i0 > in - 1) i0 = in - 1;
      l1 = fmin(fmax(s - (double)i0, 0), 1);
      l0 = 1 - l1;
    } else { /* the weights in f32, as torch's opmath for f32, f16, bf16 */
      const float sc = (float)scale;
      float s = align ? sc * (float)o : sc * ((float)o + 0.5f) - 0.5f;
      if (s < 0) s = 0;
      i0 = (int64_t)s;
      if (i0 > in - 1) i0 = in - 1;
      const float lf = fminf(fmaxf(s - (float)i0, 0.0f), 1.0f);
      l1 = lf;
      l0 = 1.0f - lf;
    }
    x->i0[o] = i0;
    x->i1[o] = nearest ? i0 : i0 + (i0 < in - 1);
    x->l0[o] = l0;
    x->l1[o] = l1;
  }
  for (int64_t i = 0, o = 0; i <= in; i++) {
    while (o < out && x->i0[o] < i) o++;
    x->start[i] = o;
  }
  return true;
}

static void axis_free(axis *x) {
  free(x->i0);
  free(x->l0);
}

/* The weight with which output o reads input i. */
static double axis_w(const axis *x, int64_t o, int64_t i) {
  return (x->i0[o] == i ? x->l0[o] : 0) + (x->i1[o] == i ? x->l1[o] : 0);
}

typedef struct ip_job {
  const ag_koperand *dst, *src;
  axis h, w;
  bool nearest;
  atomic_bool oom;
} ip_job;

static char *at(const ag_koperand *o, int64_t i) { return ag__cpu_ptr(o) + (size_t)i * ag__cpu_dtsize(o->dtype); }

/* Output rows [lo, hi) of the n*c*ho rows. */
static void ip_fwd_rows(void *ctx, int64_t lo, int64_t hi) {
  ip_job *j = ctx;
  const int64_t H = j->h.in, W = j->w.in, Ho = j->h.out, Wo = j->w.out;
  double *v = malloc(sizeof(double) * (size_t)(2 * W + Wo));
  if (!v) {
    atomic_store(&j->oom, true);
    return;
  }
  double *r1 = v + W, *out = r1 + W;
  for (int64_t row = lo; row < hi; row++) {
    const int64_t p = row / Ho, oh = row % Ho;
    const int64_t h0 = j->h.i0[oh], h1 = j->h.i1[oh];
    const double a0 = j->h.l0[oh], a1 = j->h.l1[oh];
    load_d(j->src->dtype, at(j->src, (p * H + h0) * W), 1, W, v);
    if (j->nearest) {
      for (int64_t ow = 0; ow < Wo; ow++) out[ow] = v[j->w.i0[ow]];
    } else {
      load_d(j->src->dtype, at(j->src, (p * H + h1) * W), 1, W, r1);
      for (int64_t ow = 0; ow < Wo; ow++) {
        const int64_t w0 = j->w.i0[ow], w1 = j->w.i1[ow];
        const double b0 = j->w.l0[ow], b1 = j->w.l1[ow];
        out[ow] = a0 * (b0 * v[w0] + b1 * v[w1]) + a1 * (b0 * r1[w0] + b1 * r1[w1]);
      }
    }
    store_d(j->dst->dtype, at(j->dst, row * Wo), 1, Wo, out);
  }
  free(v);
}

/* Input rows [lo, hi) of the n*c*h rows of dx. */
static void ip_bwd_rows(void *ctx, int64_t lo, int64_t hi) {
  ip_job *j = ctx;
  const int64_t H = j->h.in, W = j->w.in, Ho = j->h.out, Wo = j->w.out;
  double *v = malloc(sizeof(double) * (size_t)(Wo + W));
  if (!v) {
    atomic_store(&j->oom, true);
    return;
  }
  double *out = v + Wo;
  for (int64_t row = lo; row < hi; row++) {
    const int64_t p = row / H, ih = row % H;
    /* outputs reading row ih: i0 == ih (nearest), i0 in {ih - 1, ih} (bilinear) */
    const int64_t oh0 = j->h.start[j->nearest || ih == 0 ? ih : ih - 1], oh1 = j->h.start[ih + 1 < H ? ih + 1 : H];
    for (int64_t iw = 0; iw < W; iw++) out[iw] = 0;
    for (int64_t oh = oh0; oh < oh1; oh++) {
      const double wh = axis_w(&j->h, oh, ih);
      load_d(j->src->dtype, at(j->src, (p * Ho + oh) * Wo), 1, Wo, v);
      for (int64_t iw = 0; iw < W; iw++) {
        const int64_t ow0 = j->w.start[j->nearest || iw == 0 ? iw : iw - 1], ow1 = j->w.start[iw + 1 < W ? iw + 1 : W];
        double s = 0;
        for (int64_t ow = ow0; ow < ow1; ow++) s += axis_w(&j->w, ow, iw) * v[ow];
        out[iw] += wh * s;
      }
    }
    store_d(j->dst->dtype, at(j->dst, row * W), 1, W, out);
  }
  free(v);
}

static ag_status ip_run(const ag_kernel_call *call, const ag_koperand *dst, const ag_koperand *src,
                        const ag_koperand *big, int variant, double sh, double sw, int64_t align, bool bwd) {
  ip_job j;
  j.dst = dst;
  j.src = src;
  j.nearest = variant == AG_KV_INTERP_NEAREST;
  atomic_init(&j.oom, false);
  const bool f64 = big->dtype == AG_F64;
  /* big: x (the input side, [n, c, h, w]); the other operand is the output side */
  const ag_koperand *small = big == dst ? src : dst;
  const int64_t P = big->shape[0] * big->shape[1];
  if (!axis_init(&j.h, big->shape[2], small->shape[2], sh, j.nearest, align != 0, f64))
    return ag_error_set(AG_ERR_OOM, "%s: no memory for interpolate indices", call->name ? call->name : "interpolate");
  if (!axis_init(&j.w, big->shape[3], small->shape[3], sw, j.nearest, align != 0, f64)) {
    axis_free(&j.h);
    return ag_error_set(AG_ERR_OOM, "%s: no memory for interpolate indices", call->name ? call->name : "interpolate");
  }
  const int64_t work = P * small->shape[2] * small->shape[3] * 8;
  if (bwd) ag__cpu_par_for(P * j.h.in, work, ip_bwd_rows, &j);
  else ag__cpu_par_for(P * j.h.out, work, ip_fwd_rows, &j);
  axis_free(&j.h);
  axis_free(&j.w);
  if (atomic_load(&j.oom))
    return ag_error_set(AG_ERR_OOM, "%s: no memory for interpolate rows", call->name ? call->name : "interpolate");
  return AG_OK;
}

ag_status cpu_k_interpolate(ag_kernel_error *err, const ag_k_interpolate *a) {
  (void)err; /* no index operands */
  if (a->call->flags & AG_KF_PORTABLE) return ag__cpu_p_interpolate(a);
  return ip_run(a->call, a->y, a->x, a->x, a->variant, a->scale_h, a->scale_w, a->align_corners, false);
}

ag_status cpu_k_interpolate_bwd(ag_kernel_error *err, const ag_k_interpolate_bwd *a) {
  (void)err; /* no index operands */
  if (a->call->flags & AG_KF_PORTABLE) return ag__cpu_p_interpolate_bwd(a);
  return ip_run(a->call, a->dx, a->dy, a->dx, a->variant, a->scale_h, a->scale_w, a->align_corners, true);
}
