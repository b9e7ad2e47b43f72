/* AG_K_SORT on OpenCL (kernels/opencl/sort.cl): a work-item per element of
 * x [o, r, in]; f32, f16, bf16, and f64 (ag_sort_d) where the device has
 * cl_khr_fp64. */
#include "cl_kops.h"

ag_status cl_k_sort(ag_bstream *s, const ag_k_sort *a) {
  int64_t O = a->o, R = a->r, I = a->in;
  if (O * R * I == 0) return AG_OK;
  const bool d = a->x->dtype == AG_F64; /* no dtype argument */
  clb_args k = clb_args_begin(s, d ? CLK_SORT_D : CLK_SORT, d ? "ag_sort_d" : "ag_sort");
  CLB_BUF(&k, a->values);
  CLB_BUF(&k, a->indices);
  CLB_BUF(&k, a->x);
  if (!d) {
    CLB_ARG(&k, cl_int, a->x->dtype);
    CLB_ARG(&k, cl_int, a->x->dtype == AG_F32 ? 4 : 2);
  }
  CLB_ARG(&k, cl_long, O);
  CLB_ARG(&k, cl_long, R);
  CLB_ARG(&k, cl_long, I);
  CLB_ARG(&k, cl_int, a->variant == AG_KV_SORT_DESCENDING);
  return clb_args_run(&k, (size_t)(O * R * I));
}
