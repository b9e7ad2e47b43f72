/* The ops front end of padding (ag_pad): x viewed as [B, H, W] with H the
 * padded dim and W the product of the dims after it; one AG_K_PAD call
 * pads H (top, bottom) and, when H is the second-to-last dim, W (left,
 * right). Constant padding of more dims is a chain of such calls, each
 * recorded, so the gradient composes; reflect pads the last one or two
 * dims in one call. The backward is AG_K_PAD_BWD. */
#include <string.h>

#include "anygrad/autograd.h"
#include "tensor/ops_internal.h"

/* [B, H, W] of a tensor of ndim/shape padded at dim dh. */
static void pad_dims(int ndim, const int64_t *shape, int dh, int64_t *b, int64_t *h, int64_t *w) {
  *b = 1;
  *w = 1;
  for (int i = 0; i < dh; i++) *b *= shape[i];
  for (int i = dh + 1; i < ndim; i++) *w *= shape[i];
  *h = shape[dh];
}

/* One launch of op (AG_K_PAD: dst the padded tensor, src x; AG_K_PAD_BWD:
 * dst dx, src dy), both contiguous, viewed as [B, H, W]. */
static ag_status pad_launch(ag_kop op, const char *name, ag_devstate *ds, ag_tensor *dst, ag_tensor *src, int dh,
                            int64_t top, int64_t left, ag_pad_mode mode, double value) {
  int64_t db[3], sb[3];
  pad_dims(dst->ndim, dst->shape, dh, &db[0], &db[1], &db[2]);
  pad_dims(src->ndim, src->shape, dh, &sb[0], &sb[1], &sb[2]);
  ag_tensor *dv = ag__raw_view(dst, 3, db), *sv = dv ? ag__raw_view(src, 3, sb) : NULL;
  ag_status st = sv ? AG_OK : ag_last_status();
  if (st == AG_OK) {
    ag_kernel_call c;
    ag__kcall_init(&c, op, mode == AG_PAD_REFLECT ? AG_KV_PAD_REFLECT : AG_KV_PAD_CONSTANT, name, 2,
                   (ag_tensor *[]){dv, sv});
    c.i[0] = left;
    c.i[1] = top;
    c.s[0] = value;
    st = ag__launch(ds, &c);
  }
  ag_tensor_release(dv);
  ag_tensor_release(sv);
  return st;
}

/* x padded at dim dh by top/bottom and, when dh is the second-to-last dim,
 * the last dim by left/right; recorded. */
static ag_tensor *pad_step(const char *name, ag_tensor *x, int dh, int64_t top, int64_t bottom, int64_t left,
                           int64_t right, ag_pad_mode mode, double value) {
  ag_devstate *ds = ag__ds(x);
  int64_t oshape[AG_MAX_DIMS];
  for (int i = 0; i < x->ndim; i++) oshape[i] = x->shape[i];
  oshape[dh] += top + bottom;
  if (left || right) oshape[x->ndim - 1] += left + right;
  ag_tensor *xs = ag__raw_contiguous(x);
  ag_tensor *out = xs ? ag__tensor_new(ds, x->dtype, x->ndim, oshape) : NULL;
  ag_status st = out ? AG_OK : ag_last_status();
  if (st == AG_OK && out->numel) st = pad_launch(AG_K_PAD, name, ds, out, xs, dh, top, left, mode, value);
  ag_tensor_release(xs);
  if (st != AG_OK) return ag__op_finish(out, st);
  ag_gparams p;
  memset(&p, 0, sizeof p);
  p.i[0] = dh;
  p.i[1] = top;
  p.i[2] = left;
  p.i[3] = mode;
  return ag__op_record(out, AG_G_PAD, 1, &x, 0, NULL, &p);
}

ag_tensor *ag_pad(ag_tensor *x, const int64_t *pads, int npads, ag_pad_mode mode, double value) {
  static const char name[] = "ag_pad";
  if (ag__null_args(name, 1, &x)) return NULL;
  if (mode != AG_PAD_CONSTANT && mode != AG_PAD_REFLECT) {
    ag_error_set(AG_ERR_INVALID, "%s: unknown mode %d", name, (int)mode);
    return NULL;
  }
  if (npads < 0 || npads % 2 || (npads && !pads)) {
    ag_error_set(AG_ERR_INVALID, "%s: %d pads%s: want (before, after) pairs", name, npads,
                 npads > 0 && !pads ? " at NULL" : "");
    return NULL;
  }
  if (!ag_dtype_is_float(x->dtype)) {
    ag_error_set(AG_ERR_DTYPE, "%s: dtype %s is not a floating type", name, ag_dtype_name(x->dtype));
    return NULL;
  }
  const int np = npads / 2;
  if (np > x->ndim) {
    ag_error_set(AG_ERR_SHAPE, "%s: %d pad pairs for a %d-d tensor", name, np, x->ndim);
    return NULL;
  }
  for (int k = 0; k < npads; k++)
    if (pads[k] < 0) {
      ag_error_set(AG_ERR_INVALID, "%s: pad %d is %lld: negative amounts (cropping) are not supported", name, k,
                   (long long)pads[k]);
      return NULL;
    }
  if (mode == AG_PAD_REFLECT) {
    if (np > 2) {
      ag_error_set(AG_ERR_SHAPE, "%s: reflect pads the last 1 or 2 dims, %d pairs given", name, np);
      return NULL;
    }
    for (int k = 0; k < npads; k++) {
      int d = x->ndim - 1 - k / 2;
      if (pads[k] >= x->shape[d]) {
        char b1[96];
        ag_error_set(AG_ERR_SHAPE, "%s: reflect pad %lld of dim %d must be below its size (input %s)", name,
                     (long long)pads[k], d, ag_tensor_describe(x, b1, sizeof b1));
        return NULL;
      }
    }
  }
  if (!ag__supported(ag__ds(x), AG_K_PAD, mode == AG_PAD_REFLECT ? AG_KV_PAD_REFLECT : AG_KV_PAD_CONSTANT,
                     x->dtype, name))
    return NULL;
  if (np == 0) return ag_mul_scalar(x, 1.0); /* a copy, as torch */
  /* the last two dims in one call (or the last alone), then one call per
   * further dim */
  const int nd = x->ndim;
  ag_tensor *cur = np >= 2 ? pad_step(name, x, nd - 2, pads[2], pads[3], pads[0], pads[1], mode, value)
                           : pad_step(name, x, nd - 1, pads[0], pads[1], 0, 0, mode, value);
  for (int k = 2; cur && k < np; k++) {
    ag_tensor *next = pad_step(name, cur, nd - 1 - k, pads[2 * k], pads[2 * k + 1], 0, 0, mode, value);
    ag_tensor_release(cur);
    cur = next;
  }
  return cur;
}

/* The gradient of one pad step (grad_ops.c): g [..] of the padded shape
 * back to x's shape (xndim, xshape), reflected copies summed into their
 * source in a fixed order. A new tensor, or NULL with the error set. */
ag_tensor *ag__pad_backward(ag_tensor *g, int xndim, const int64_t *xshape, int dh, int64_t top, int64_t left,
                            int mode) {
  static const char name[] = "ag_pad backward";
  ag_devstate *ds = ag__ds(g);
  ag_tensor *gc = ag__raw_contiguous(g);
  ag_tensor *dx = gc ? ag__tensor_new(ds, g->dtype, xndim, xshape) : NULL;
  ag_status st = dx ? AG_OK : ag_last_status();
  if (st == AG_OK && dx->numel) {
    int sub = mode == AG_PAD_REFLECT ? AG_KV_PAD_REFLECT : AG_KV_PAD_CONSTANT;
    if (!ag__supported(ds, AG_K_PAD_BWD, sub, g->dtype, name)) st = ag_last_status();
    else st = pad_launch(AG_K_PAD_BWD, name, ds, dx, gc, dh, top, left, (ag_pad_mode)mode, 0);
  }
  ag_tensor_release(gc);
  return ag__op_finish(dx, st);
}
