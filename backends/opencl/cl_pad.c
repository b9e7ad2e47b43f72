/* AG_K_PAD and AG_K_PAD_BWD on OpenCL (kernels/opencl/pad.cl): a work-item
 * per output element; f32, f16, bf16, and f64 (ag_pad_d, ag_pad_bwd_d) where
 * the device has cl_khr_fp64. */
#include "cl_kops.h"

ag_status cl_k_pad(ag_bstream *s, const ag_k_pad *a) {
  int64_t B = a->x->shape[0], H = a->x->shape[1], W = a->x->shape[2], Ho = a->out->shape[1], Wo = a->out->shape[2];
  if (B * Ho * Wo == 0) return AG_OK;
  const bool d = a->x->dtype == AG_F64; /* no dtype argument; the value in double */
  clb_args k = clb_args_begin(s, d ? CLK_PAD_D : CLK_PAD, d ? "ag_pad_d" : "ag_pad");
  CLB_BUF(&k, a->out);
  CLB_BUF(&k, a->x);
  if (!d) {
    CLB_ARG(&k, cl_int, a->x->dtype);
    CLB_ARG(&k, cl_int, a->x->dtype == AG_F32 ? 4 : 2);
  }
  CLB_ARG(&k, cl_long, B);
  CLB_ARG(&k, cl_long, H);
  CLB_ARG(&k, cl_long, W);
  CLB_ARG(&k, cl_long, Ho);
  CLB_ARG(&k, cl_long, Wo);
  CLB_ARG(&k, cl_long, a->top);
  CLB_ARG(&k, cl_long, a->left);
  CLB_ARG(&k, cl_int, a->variant == AG_KV_PAD_REFLECT);
  if (d) CLB_ARG(&k, cl_double, a->value);
  else CLB_ARG(&k, cl_float, a->value);
  return clb_args_run(&k, (size_t)(B * Ho * Wo));
}

ag_status cl_k_pad_bwd(ag_bstream *s, const ag_k_pad_bwd *a) {
  int64_t B = a->dx->shape[0], H = a->dx->shape[1], W = a->dx->shape[2], Ho = a->dy->shape[1], Wo = a->dy->shape[2];
  if (B * H * W == 0) return AG_OK;
  const bool d = a->dx->dtype == AG_F64; /* no dtype argument */
  clb_args k = clb_args_begin(s, d ? CLK_PAD_BWD_D : CLK_PAD_BWD, d ? "ag_pad_bwd_d" : "ag_pad_bwd");
  CLB_BUF(&k, a->dx);
  CLB_BUF(&k, a->dy);
  if (!d) CLB_ARG(&k, cl_int, a->dx->dtype);
  CLB_ARG(&k, cl_long, B);
  CLB_ARG(&k, cl_long, H);
  CLB_ARG(&k, cl_long, W);
  CLB_ARG(&k, cl_long, Ho);
  CLB_ARG(&k, cl_long, Wo);
  CLB_ARG(&k, cl_long, a->top);
  CLB_ARG(&k, cl_long, a->left);
  CLB_ARG(&k, cl_int, a->variant == AG_KV_PAD_REFLECT);
  return clb_args_run(&k, (size_t)(B * H * W));
}
