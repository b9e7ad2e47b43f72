/* Group norm (ops.h): validates, lays x out as contiguous [N, C, HW], runs
 * AG_K_GROUP_NORM (statistics per sample and group, saved for the
 * backward) and records one node, whose backward
 * (core/autograd/grad_resample.c) runs AG_K_GROUP_NORM_BWD. */
#include <math.h>
#include <string.h>

#include "anygrad/autograd.h"
#include "tensor/ops_internal.h"

static ag_status failed(void) {
  ag_status st = ag_last_status();
  return st != AG_OK ? st : ag_error_set(AG_ERR_INTERNAL, "ag_group_norm: a step failed without a message");
}

static ag_tensor *group_norm_impl(ag_tensor *x, int64_t groups, ag_tensor *weight, ag_tensor *bias, double eps) {
  static const char name[] = "ag_group_norm";
  if (ag__null_args(name, 1, &x)) return NULL;
  ag_tensor *in[3] = {x, weight, bias};
  ag_devstate *ds = ag__same_device(name, 3, in);
  if (!ds) return NULL;
  char b1[96], b2[96];
  if (!ag_dtype_is_float(x->dtype) || x->ndim < 2) {
    ag_error_set(AG_ERR_DTYPE, "%s: needs a floating tensor [N, C, *] with at least 2 dims, got %s", name,
                 ag_tensor_describe(x, b1, sizeof b1));
    return NULL;
  }
  const int64_t N = x->shape[0], C = x->shape[1], HW = N && C ? x->numel / (N * C) : 0;
  if (groups <= 0 || C % groups != 0) {
    ag_error_set(AG_ERR_INVALID, "%s: groups %lld must be >= 1 and divide the %lld channels of %s", name,
                 (long long)groups, (long long)C, ag_tensor_describe(x, b1, sizeof b1));
    return NULL;
  }
  for (int i = 1; i < 3; i++) {
    ag_tensor *w = in[i];
    if (w && (w->dtype != x->dtype || w->ndim != 1 || w->shape[0] != C)) {
      ag_error_set(AG_ERR_SHAPE, "%s: %s %s must be %s[%lld] for input %s", name, i == 1 ? "weight" : "bias",
                   ag_tensor_describe(w, b1, sizeof b1), ag_dtype_name(x->dtype), (long long)C,
                   ag_tensor_describe(x, b2, sizeof b2));
      return NULL;
    }
  }
  if (!(eps >= 0) || isinf(eps)) {
    ag_error_set(AG_ERR_INVALID, "%s: eps must be finite and >= 0, got %g", name, eps);
    return NULL;
  }
  if (!ag__supported(ds, AG_K_GROUP_NORM, AG_KV_NONE, x->dtype, name)) return NULL;
  int64_t s3[3] = {N, C, HW}, s2[2] = {N, groups};
  ag_tensor *xc0 = ag__raw_contiguous(x);
  ag_tensor *xc = xc0 ? ag__raw_view(xc0, 3, s3) : NULL;
  ag_tensor_release(xc0);
  ag_tensor *wc = weight ? ag__raw_contiguous(weight) : NULL;
  ag_tensor *bc = bias ? ag__raw_contiguous(bias) : NULL;
  ag_tensor *y = xc ? ag__tensor_new(ds, x->dtype, x->ndim, x->shape) : NULL;
  /* statistics in f32, f64 for f64 x (the gradient check's dtype) */
  const ag_dtype sdt = x->dtype == AG_F64 ? AG_F64 : AG_F32;
  ag_tensor *mean = y ? ag__tensor_new(ds, sdt, 2, s2) : NULL;
  ag_tensor *rstd = mean ? ag__tensor_new(ds, sdt, 2, s2) : NULL;
  ag_status st = (rstd && (!weight || wc) && (!bias || bc)) ? AG_OK : failed();
  if (st == AG_OK && N && C) {
    ag_kernel_call c;
    ag__kcall_init(&c, AG_K_GROUP_NORM, AG_KV_NONE, name, 6, (ag_tensor *[]){y, xc, wc, bc, mean, rstd});
    c.i[0] = N;
    c.i[1] = C;
    c.i[2] = HW;
    c.i[3] = groups;
    c.s[0] = eps;
    st = ag__launch(ds, &c);
  }
  ag_tensor_release(wc);
  ag_tensor_release(bc);
  if (st == AG_OK) {
    ag_gparams p;
    memset(&p, 0, sizeof p);
    p.i[0] = groups;
    p.s[0] = eps;
    ag_tensor *sv[3] = {xc, mean, rstd};
    y = ag__op_record(y, AG_G_GROUP_NORM, 3, in, 3, sv, &p);
  } else {
    ag_tensor_release(y);
    y = NULL;
  }
  ag_tensor_release(xc);
  ag_tensor_release(mean);
  ag_tensor_release(rstd);
  return y;
}

/* Under autocast in f32 (as torch autocasts group_norm). */
ag_tensor *ag_group_norm(ag_tensor *x, int64_t groups, ag_tensor *weight, ag_tensor *bias, double eps) {
  if (!AC_ON() || !x) return group_norm_impl(x, groups, weight, bias, eps);
  ag_tensor *ts[3] = {x, weight, bias};
  ag__ac_args ac;
  if (!ag__ac_begin(AC_F32, 3, ts, &ac)) return NULL;
  return ag__ac_end(&ac, group_norm_impl(ts[0], groups, ts[1], ts[2], eps));
}
