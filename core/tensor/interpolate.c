/* Interpolate (ops.h): validates the size or scale factors as torch does,
 * computes the source step the kernels use (torch's
 * area_pixel_compute_scale with recompute_scale_factor=None), runs
 * AG_K_INTERPOLATE on contiguous NCHW and records one node, whose backward
 * (core/autograd/grad_resample.c) runs AG_K_INTERPOLATE_BWD. */
#include <math.h>
#include <string.h>

#include "anygrad/autograd.h"
#include "tensor/ops_internal.h"

static ag_status failed(void) {
  ag_status st = ag_last_status();
  return st != AG_OK ? st : ag_error_set(AG_ERR_INTERNAL, "ag_interpolate: a step failed without a message");
}

/* The output size of one dim and the kernel's source step; false with
 * the error set. */
static bool interp_dim(const char *name, const char *dim, int64_t in, bool by_size, int64_t size, double scale,
                       bool align, int64_t *out, double *step) {
  if (!by_size) {
    if (!(scale > 0) || isinf(scale)) {
      ag_error_set(AG_ERR_INVALID, "%s: scale_%s must be finite and > 0, got %g", name, dim, scale);
      return false;
    }
    const double o = floor((double)in * scale);
    if (!(o >= 1) || o > (double)INT32_MAX) {
      ag_error_set(AG_ERR_INVALID, "%s: scale_%s %g gives an output size of %.0f for input size %lld (need 1 to %d)",
                   name, dim, scale, o, (long long)in, INT32_MAX);
      return false;
    }
    size = (int64_t)o;
  } else if (size < 1 || size > INT32_MAX) {
    ag_error_set(AG_ERR_INVALID, "%s: out_%s must be in 1..%d, got %lld", name, dim, INT32_MAX, (long long)size);
    return false;
  }
  *out = size;
  if (align) *step = size > 1 ? (double)(in - 1) / (double)(size - 1) : 0;
  else *step = by_size ? (double)in / (double)size : 1.0 / scale;
  return true;
}

ag_tensor *ag_interpolate(ag_tensor *x, int64_t out_h, int64_t out_w, double scale_h, double scale_w,
                          ag_interp_mode mode, bool align_corners) {
  static const char name[] = "ag_interpolate";
  if (ag__null_args(name, 1, &x)) return NULL;
  ag_devstate *ds = ag__same_device(name, 1, &x);
  if (!ds) return NULL;
  char b[96];
  if (x->ndim != 4) {
    ag_error_set(AG_ERR_SHAPE, "%s: x must be 4-D NCHW, got %s", name, ag_tensor_describe(x, b, sizeof b));
    return NULL;
  }
  if (!ag_dtype_is_float(x->dtype)) {
    ag_error_set(AG_ERR_DTYPE, "%s: x must be floating, got %s", name, ag_dtype_name(x->dtype));
    return NULL;
  }
  if (mode != AG_INTERP_NEAREST && mode != AG_INTERP_BILINEAR) {
    ag_error_set(AG_ERR_INVALID, "%s: mode %d is neither AG_INTERP_NEAREST nor AG_INTERP_BILINEAR", name, (int)mode);
    return NULL;
  }
  if (mode == AG_INTERP_NEAREST && align_corners) {
    ag_error_set(AG_ERR_INVALID, "%s: align_corners can only be set with bilinear, not nearest (as torch)", name);
    return NULL;
  }
  const bool by_size = out_h != 0 || out_w != 0, by_scale = scale_h != 0 || scale_w != 0;
  if (by_size == by_scale) {
    ag_error_set(AG_ERR_INVALID, "%s: give either the size (out_h %lld, out_w %lld) or the scale factors (%g, %g), %s",
                 name, (long long)out_h, (long long)out_w, scale_h, scale_w, by_size ? "not both" : "one of them");
    return NULL;
  }
  const int64_t H = x->shape[2], W = x->shape[3];
  int64_t Ho, Wo;
  double sh, sw;
  const bool align = mode == AG_INTERP_BILINEAR && align_corners;
  if (!interp_dim(name, "h", H, by_size, out_h, scale_h, align, &Ho, &sh) ||
      !interp_dim(name, "w", W, by_size, out_w, scale_w, align, &Wo, &sw))
    return NULL;
  if ((H == 0 || W == 0) && x->shape[0] * x->shape[1] != 0) {
    ag_error_set(AG_ERR_SHAPE, "%s: input %s has an empty plane", name, ag_tensor_describe(x, b, sizeof b));
    return NULL;
  }
  const int sub = mode == AG_INTERP_NEAREST ? AG_KV_INTERP_NEAREST : AG_KV_INTERP_BILINEAR;
  if (!ag__supported(ds, AG_K_INTERPOLATE, sub, x->dtype, name)) return NULL;
  const int64_t oshape[4] = {x->shape[0], x->shape[1], Ho, Wo};
  ag_tensor *xc = ag__raw_contiguous(x);
  ag_tensor *y = xc ? ag__tensor_new(ds, x->dtype, 4, oshape) : NULL;
  ag_status st = y ? AG_OK : failed();
  if (st == AG_OK && y->numel) {
    ag_kernel_call c;
    ag__kcall_init(&c, AG_K_INTERPOLATE, sub, name, 2, (ag_tensor *[]){y, xc});
    c.s[0] = sh;
    c.s[1] = sw;
    c.i[0] = align;
    st = ag__launch(ds, &c);
  }
  ag_tensor_release(xc);
  if (st != AG_OK) {
    ag_tensor_release(y);
    return NULL;
  }
  ag_gparams p;
  memset(&p, 0, sizeof p);
  p.i[0] = sub;
  p.i[1] = align;
  p.s[0] = sh;
  p.s[1] = sw;
  return ag__op_record(y, AG_G_INTERPOLATE, 1, &x, 0, NULL, &p);
}
