/* Backward formulas of group norm and interpolate (their forward ops are
 * core/tensor/group_norm.c and interpolate.c): each one kernel op,
 * deterministic (fixed-order sums, no atomics). */
#include <string.h>

#include "autograd/grad_internal.h"

#define NEED(i) (n->e[(i)].fn || n->e[(i)].leaf)

static ag_status failed(const char *what) {
  ag_status st = ag_last_status();
  return st != AG_OK ? st : ag_error_set(AG_ERR_INTERNAL, "%s backward: a step failed without a message", what);
}

/* With xhat = (x - mean) * rstd and g = dy * weight over a group's M
 * elements: dx = rstd * (g - mean(g) - xhat * mean(g * xhat)); dweight[c]
 * = sum of dy * xhat, dbias[c] = sum of dy over samples and positions. */
ag_status ag__group_norm_backward(ag_node *n, ag_tensor *g, ag_tensor **gin) {
  if (n->n_saved < 3) return ag_error_set(AG_ERR_INTERNAL, "ag_group_norm backward: x, mean, rstd not saved");
  ag_tensor *x3 = n->saved[0], *mean = n->saved[1], *rstd = n->saved[2];
  ag_tensor *w = n->n_in > 1 ? n->e[1].val : NULL;
  const int64_t N = x3->shape[0], C = x3->shape[1], HW = x3->shape[2];
  int64_t sc[1] = {C};
  const bool want_w = n->n_in > 1 && NEED(1), want_b = n->n_in > 2 && NEED(2);
  ag_tensor *gc = ag_contiguous(g), *g3 = gc ? ag_reshape(gc, 3, x3->shape) : NULL;
  ag_tensor *wc = w ? ag_contiguous(w) : NULL;
  ag_tensor *dx = ag_empty_like(x3);
  const ag_dtype sdt = x3->dtype == AG_F64 ? AG_F64 : AG_F32;
  ag_device dev = ag_tensor_device(x3);
  ag_tensor *dw = want_w || want_b ? ag_empty(dev, sdt, 1, sc) : NULL;
  ag_tensor *db = want_w || want_b ? ag_empty(dev, sdt, 1, sc) : NULL;
  ag_status st = (g3 && dx && (!w || wc) && (!(want_w || want_b) || (dw && db))) ? AG_OK : failed("ag_group_norm");
  if (st == AG_OK && N && C && HW) {
    ag_kmulti m;
    ag_kernel_call c;
    ag__kcall_init(&c, AG_K_GROUP_NORM_BWD, AG_KV_NONE, "ag_group_norm backward", 6, (ag_tensor *[]){dx, g3, x3, mean, rstd, wc});
    c.i[0] = N;
    c.i[1] = C;
    c.i[2] = HW;
    c.i[3] = n->p.i[0];
    if (dw) {
      m.count = 0;
      ag__kmulti_set(&m, 0, dw);
      ag__kmulti_set(&m, 1, db);
      c.multi = &m;
    }
    st = ag__launch(ag__ds(dx), &c);
  } else if (st == AG_OK && dw) { /* nothing to sum */
    st = ag_fill_(dw, 0);
    if (st == AG_OK) st = ag_fill_(db, 0);
  }
  if (st == AG_OK && NEED(0) && !(gin[0] = ag_reshape(dx, n->e[0].ndim, n->e[0].shape))) st = failed("ag_group_norm");
  if (st == AG_OK && want_w && !(gin[1] = ag_cast(dw, n->e[1].dtype))) st = failed("ag_group_norm");
  if (st == AG_OK && want_b && !(gin[2] = ag_cast(db, n->e[2].dtype))) st = failed("ag_group_norm");
  ag_tensor *rel[] = {gc, g3, wc, dx, dw, db};
  for (size_t i = 0; i < sizeof rel / sizeof *rel; i++) ag_tensor_release(rel[i]);
  return st;
}

/* dx: each input element sums the outputs that read it, weighted
 * (AG_K_INTERPOLATE_BWD with the forward's variant and steps). */
ag_status ag__interpolate_backward(ag_node *n, ag_tensor *g, ag_tensor **gin) {
  if (!(n->e[0].fn || n->e[0].leaf)) return AG_OK;
  ag_tensor *gc = ag_contiguous(g);
  ag_tensor *dx = gc ? ag__tensor_new(ag__ds(gc), gc->dtype, 4, n->e[0].shape) : NULL;
  ag_status st = dx ? AG_OK : failed("ag_interpolate");
  if (st == AG_OK && dx->numel) {
    ag_kernel_call c;
    ag__kcall_init(&c, AG_K_INTERPOLATE_BWD, (int)n->p.i[0], "ag_interpolate backward", 2, (ag_tensor *[]){dx, gc});
    c.s[0] = n->p.s[0];
    c.s[1] = n->p.s[1];
    c.i[0] = n->p.i[1];
    st = ag__launch(ag__ds(dx), &c);
  }
  if (st == AG_OK) {
    gin[0] = dx->dtype == n->e[0].dtype ? ag__alias(dx) : ag_cast(dx, n->e[0].dtype);
    if (!gin[0]) st = failed("ag_interpolate");
  }
  ag_tensor_release(gc);
  ag_tensor_release(dx);
  return st;
}
