/* AG_K_SORT on OpenCL (kernels/opencl/sort.cl): a bottom-up merge sort of
 * each line of x [o, r, in] in ceil(log2 r) passes (one when r == 1), each
 * one range of a work-item per element (a binary search of O(log r) steps);
 * the passes ping-pong between the outputs and the stream's scratch buffer
 * (keys, then long positions), arranged so that the last one writes the
 * outputs. f32, f16, bf16, and f64 (ag_sort_d) where the device has
 * cl_khr_fp64. */
#include "cl_kops.h"

ag_status cl_k_sort(ag_bstream *s, const ag_k_sort *a) {
  int64_t O = a->o, R = a->r, I = a->in, n = O * R * I;
  if (n == 0) return AG_OK;
  const bool d = a->x->dtype == AG_F64; /* no dtype argument */
  const int esz = d ? 8 : a->x->dtype == AG_F32 ? 4 : 2;
  int passes = 1;
  while (((int64_t)1 << passes) < R) passes++;
  cl_mem tmp = NULL;
  size_t kbytes = ((size_t)n * (size_t)esz + 15) & ~(size_t)15;
  if (passes > 1) {
    ag_status st = clb_scratch(s, kbytes + (size_t)n * 8, &tmp);
    if (st != AG_OK) return st;
  }
  cl_mem src_k = a->x->base, src_i = a->x->base;
  cl_ulong src_ko = a->x->offset, src_io = 0;
  for (int p = 0; p < passes; p++) {
    /* the last pass writes the outputs, the one before the scratch, ... */
    const bool to_out = (passes - 1 - p) % 2 == 0;
    cl_mem dst_k = to_out ? a->values->base : tmp, dst_i = to_out ? a->indices->base : tmp;
    cl_ulong dst_ko = to_out ? a->values->offset : 0, dst_io = to_out ? a->indices->offset : kbytes;
    clb_args k = clb_args_begin(s, d ? CLK_SORT_D : CLK_SORT, d ? "ag_sort_d" : "ag_sort");
    CLB_ARG(&k, cl_mem, dst_k);
    CLB_ARG(&k, cl_ulong, dst_ko);
    CLB_ARG(&k, cl_mem, dst_i);
    CLB_ARG(&k, cl_ulong, dst_io);
    CLB_ARG(&k, cl_mem, src_k);
    CLB_ARG(&k, cl_ulong, src_ko);
    CLB_ARG(&k, cl_mem, src_i);
    CLB_ARG(&k, cl_ulong, src_io);
    CLB_ARG(&k, cl_int, p == 0);
    if (!d) {
      CLB_ARG(&k, cl_int, a->x->dtype);
      CLB_ARG(&k, cl_int, esz);
    }
    CLB_ARG(&k, cl_long, O);
    CLB_ARG(&k, cl_long, R);
    CLB_ARG(&k, cl_long, I);
    CLB_ARG(&k, cl_long, (int64_t)1 << p);
    CLB_ARG(&k, cl_int, a->variant == AG_KV_SORT_DESCENDING);
    ag_status st = clb_args_run(&k, (size_t)n);
    if (st != AG_OK) return st;
    src_k = dst_k;
    src_ko = dst_ko;
    src_i = dst_i;
    src_io = dst_io;
  }
  return AG_OK;
}
