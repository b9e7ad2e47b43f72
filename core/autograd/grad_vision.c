/* Backward formulas of the vision ops (recorded by core/tensor/vision.c):
 * conv2d and pooling launch the matching backward kernel; batch norm is two
 * kernel passes (BN_STATS, BN_APPLY) through the forward's helpers. */
#include <string.h>

#include "anygrad/autograd.h"
#include "autograd/grad_internal.h"
#include "tensor/ops_internal.h"

/* The status of the op that just failed (never AG_OK). */
static ag_status failed(void) {
  ag_status st = ag_last_status();
  return st != AG_OK ? st : ag_error_set(AG_ERR_INTERNAL, "vision backward: a step failed without a message");
}

/* dx or dw (shape ndim/shape) from dy and the other forward operand. */
static ag_tensor *conv_bwd_call(ag_kop op, const ag_gparams *p, int ndim, const int64_t *shape, ag_tensor *dy,
                                ag_tensor *other) {
  if (dy->numel == 0) return ag_zeros(ag_tensor_device(dy), dy->dtype, ndim, shape);
  ag_tensor *o = ag__tensor_new(ag__ds(dy), dy->dtype, ndim, shape);
  if (!o || !o->numel) return o;
  ag_kernel_call c;
  ag__kcall_init(&c, op, 0, "ag_conv2d backward", 3, (ag_tensor *[]){o, dy, other});
  for (int k = 0; k < 7; k++) c.s[k] = p->dims[k];
  if (ag__launch(ag__ds(o), &c) != AG_OK) {
    ag_tensor_release(o);
    return NULL;
  }
  return o;
}

ag_status ag__conv2d_backward(ag_node *n, ag_tensor *g, ag_tensor **gin) {
  ag_tensor *x = n->e[0].val, *w = n->e[1].val;
  bool need_x = n->e[0].fn || n->e[0].leaf, need_w = n->e[1].fn || n->e[1].leaf;
  bool need_b = n->n_in > 2 && (n->e[2].fn || n->e[2].leaf);
  ag_tensor *gc = ag_contiguous(g), *xc = NULL, *wc = NULL;
  ag_status st = gc ? AG_OK : failed();
  if (st == AG_OK && need_x) {
    wc = ag_contiguous(w);
    gin[0] = wc ? conv_bwd_call(AG_K_CONV2D_BWD_INPUT, &n->p, 4, x->shape, gc, wc) : NULL;
    if (!gin[0]) st = failed();
  }
  if (st == AG_OK && need_w) {
    xc = ag_contiguous(x);
    gin[1] = xc ? conv_bwd_call(AG_K_CONV2D_BWD_WEIGHT, &n->p, 4, w->shape, gc, xc) : NULL;
    if (!gin[1]) st = failed();
  }
  if (st == AG_OK && need_b) {
    int dims[3] = {0, 2, 3};
    gin[2] = ag_sum(gc, 3, dims, false);
    if (!gin[2]) st = failed();
  }
  ag_tensor_release(gc);
  ag_tensor_release(xc);
  ag_tensor_release(wc);
  return st;
}

ag_status ag__pool2d_backward(ag_node *n, ag_tensor *g, ag_tensor **gin) {
  if (!(n->e[0].fn || n->e[0].leaf)) return AG_OK;
  ag_tensor *gc = ag_contiguous(g);
  if (!gc) return failed();
  ag_tensor *dx = ag__tensor_new(ag__ds(gc), gc->dtype, n->e[0].ndim, n->e[0].shape);
  ag_status st = dx ? AG_OK : failed();
  if (st == AG_OK && dx->numel) {
    ag_kernel_call c;
    bool max = n->p.i[0] == AG_P_MAX;
    ag__kcall_init(&c, AG_K_POOL2D_BWD, (int)n->p.i[0], "pool2d backward", max ? 3 : 2,
                   (ag_tensor *[]){dx, gc, NULL});
    for (int k = 0; k < 7; k++) c.s[k] = n->p.dims[k];
    if (max) {
      if (n->n_saved < 1) st = ag_error_set(AG_ERR_INTERNAL, "max_pool2d backward: indices not saved");
      else ag__operand(&c.o[2], n->saved[0]);
    }
    if (st == AG_OK && gc->numel == 0) st = ag_fill_(dx, 0.0);
    else if (st == AG_OK) st = ag__launch(ag__ds(dx), &c);
  }
  ag_tensor_release(gc);
  if (st != AG_OK) {
    ag_tensor_release(dx);
    return st;
  }
  gin[0] = dx;
  return AG_OK;
}

/* dx = scale*(dy - sum(dy)/M - (x - mean)*rstd^2*sum(dy*(x - mean))/M) in
 * training (scale alone in eval, where the statistics are constants);
 * dweight = rstd*sum(dy*(x - mean)); dbias = sum(dy). */
ag_status ag__batch_norm_backward(ag_node *n, ag_tensor *g, ag_tensor **gin) {
  if (n->n_saved < 2) return ag_error_set(AG_ERR_INTERNAL, "ag_batch_norm backward: statistics not saved");
  ag_tensor *x = n->e[0].val, *w = n->n_in > 1 ? n->e[1].val : NULL, *mean = n->saved[0], *rstd = n->saved[1];
  const bool training = n->p.i[0] != 0;
  const bool need_x = n->e[0].fn || n->e[0].leaf, need_w = n->n_in > 1 && (n->e[1].fn || n->e[1].leaf);
  const bool need_b = n->n_in > 2 && (n->e[2].fn || n->e[2].leaf);
  const double M = (double)(x->shape[0] * x->shape[2] * x->shape[3]);
  ag_tensor *gc = ag_contiguous(g), *xc = ag_contiguous(x);
  ag_status st = gc && xc ? AG_OK : failed();
  ag_tensor *stats = NULL, *sd = NULL, *sdx = NULL;
  if (st == AG_OK && (need_w || need_b || (need_x && training))) {
    stats = ag__bn_stats(gc, xc, mean);
    sd = stats ? ag__bn_row(stats, 0) : NULL;
    sdx = stats ? ag__bn_row(stats, 1) : NULL;
    if (!sdx) st = failed();
  }
  if (st == AG_OK && need_w && !(gin[1] = ag_mul(sdx, rstd))) st = failed();
  if (st == AG_OK && need_b && !(gin[2] = ag__alias(sd))) st = failed();
  if (st == AG_OK && need_x) {
    ag_tensor *scale = w ? ag_mul(w, rstd) : ag__alias(rstd), *coef = NULL;
    if (scale && training) {
      ag_tensor *q = ag_mul_scalar(sd, -1.0 / M), *r2 = ag_mul(rstd, rstd);
      ag_tensor *r1 = r2 ? ag_mul(r2, sdx) : NULL;
      ag_tensor *r0 = r1 ? ag_mul_scalar(r1, -1.0 / M) : NULL;
      ag_tensor *qs = q ? ag_mul(q, scale) : NULL, *rs = r0 ? ag_mul(r0, scale) : NULL;
      ag_tensor *rows[4] = {scale, qs, rs, mean};
      coef = qs && rs ? ag__bn_coef(4, rows) : NULL;
      ag_tensor *rel[] = {q, r2, r1, r0, qs, rs};
      for (size_t i = 0; i < sizeof rel / sizeof *rel; i++) ag_tensor_release(rel[i]);
    } else if (scale) {
      ag_tensor *zero = ag_zeros(ag_tensor_device(x), x->dtype, 1, &x->shape[1]);
      ag_tensor *rows[2] = {scale, zero};
      coef = zero ? ag__bn_coef(2, rows) : NULL;
      ag_tensor_release(zero);
    }
    gin[0] = coef ? ag__bn_apply(gc, coef, training ? xc : NULL) : NULL;
    if (!gin[0]) st = failed();
    ag_tensor_release(scale);
    ag_tensor_release(coef);
  }
  ag_tensor *rel[] = {gc, xc, stats, sd, sdx};
  for (size_t i = 0; i < sizeof rel / sizeof *rel; i++) ag_tensor_release(rel[i]);
  return st;
}
