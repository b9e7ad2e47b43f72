/* AG_K_SCATTER_ADD on OpenCL (kernels/opencl/scatter.cl): a work-item per
 * element of out [o, xlen, in]; f32, f16, bf16, and f64 (ag_scatter_add_d,
 * summed in double) where the device has cl_khr_fp64; i32 or i64 index. */
#include "cl_kops.h"

ag_status cl_k_scatter_add(ag_bstream *s, const ag_k_scatter_add *a) {
  int64_t O = a->o, K = a->k, I = a->in, X = a->xlen;
  if (O * X * I == 0 || K == 0) return AG_OK;
  const bool d = a->out->dtype == AG_F64; /* no dtype argument */
  clb_args k = clb_args_begin(s, d ? CLK_SCATTER_ADD_D : CLK_SCATTER_ADD, d ? "ag_scatter_add_d" : "ag_scatter_add");
  CLB_BUF(&k, a->out);
  CLB_BUF(&k, a->src);
  if (!d) CLB_ARG(&k, cl_int, a->out->dtype);
  CLB_BUF(&k, a->index);
  CLB_ARG(&k, cl_int, a->variant == AG_KV_IDX64);
  CLB_ARG(&k, cl_long, a->index->strides[0]);
  CLB_ARG(&k, cl_long, a->index->strides[1]);
  CLB_ARG(&k, cl_long, a->index->strides[2]);
  CLB_ARG(&k, cl_long, O);
  CLB_ARG(&k, cl_long, K);
  CLB_ARG(&k, cl_long, I);
  CLB_ARG(&k, cl_long, X);
  CLB_ARG(&k, cl_mem, s->err);
  s->err_armed = true;
  return clb_args_run(&k, (size_t)(O * X * I));
}
