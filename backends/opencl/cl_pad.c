/* AG_K_PAD and AG_K_PAD_BWD on OpenCL (kernels/opencl/pad.cl): a work-item
 * per output element; f32, f16, bf16. */
#include "cl_kops.h"

ag_status cl_k_pad(ag_bstream *s, const ag_k_pad *a) {
  int64_t B = a->x->shape[0], H = a->x->shape[1], W = a->x->shape[2], Ho = a->out->shape[1], Wo = a->out->shape[2];
  if (B * Ho * Wo == 0) return AG_OK;
  clb_args k = clb_args_begin(s, CLK_PAD, "ag_pad");
  CLB_BUF(&k, a->out);
  CLB_BUF(&k, a->x);
  CLB_ARG(&k, cl_int, a->x->dtype);
  CLB_ARG(&k, cl_int, a->x->dtype == AG_F32 ? 4 : 2);
  CLB_ARG(&k, cl_long, B);
  CLB_ARG(&k, cl_long, H);
  CLB_ARG(&k, cl_long, W);
  CLB_ARG(&k, cl_long, Ho);
  CLB_ARG(&k, cl_long, Wo);
  CLB_ARG(&k, cl_long, a->top);
  CLB_ARG(&k, cl_long, a->left);
  CLB_ARG(&k, cl_int, a->variant == AG_KV_PAD_REFLECT);
  CLB_ARG(&k, cl_float, a->value);
  return clb_args_run(&k, (size_t)(B * Ho * Wo));
}

ag_status cl_k_pad_bwd(ag_bstream *s, const ag_k_pad_bwd *a) {
  int64_t B = a->dx->shape[0], H = a->dx->shape[1], W = a->dx->shape[2], Ho = a->dy->shape[1], Wo = a->dy->shape[2];
  if (B * H * W == 0) return AG_OK;
  clb_args k = clb_args_begin(s, CLK_PAD_BWD, "ag_pad_bwd");
  CLB_BUF(&k, a->dx);
  CLB_BUF(&k, a->dy);
  CLB_ARG(&k, cl_int, a->dx->dtype);
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
