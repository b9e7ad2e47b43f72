/* Arguments and launch of the kernel ops that live in their own files
 * (cl_sort.c, ...): each sets its kernel's arguments in order through
 * clb_args and runs it as a 1-D range of work-items. */
#ifndef AG_CL_KOPS_H
#define AG_CL_KOPS_H

#include "cl_internal.h"

typedef struct clb_args {
  ag_bstream *s;
  clb_kernel which;
  const char *name;
  cl_uint n;
  cl_int err;
} clb_args;

static inline clb_args clb_args_begin(ag_bstream *s, clb_kernel which, const char *name) {
  clb_args a = {s, which, name, 0, s->k[which] ? CL_SUCCESS : CL_INVALID_KERNEL};
  return a;
}
static inline void clb_arg(clb_args *a, size_t bytes, const void *v) {
  if (a->err == CL_SUCCESS) a->err = clSetKernelArg(a->s->k[a->which], a->n, bytes, v);
  a->n++;
}
#define CLB_ARG(a, T, v)            \
  do {                              \
    T clb_v_ = (T)(v);              \
    clb_arg(a, sizeof clb_v_, &clb_v_); \
  } while (0)
/* An operand: its buffer and byte offset. */
#define CLB_BUF(a, op)              \
  do {                              \
    CLB_ARG(a, cl_mem, (op)->base); \
    CLB_ARG(a, cl_ulong, (op)->offset); \
  } while (0)

/* Enqueues `items` work-items (rounded up to the kernel's group size; the
 * kernels bound-check). */
static inline ag_status clb_args_run(clb_args *a, size_t items) {
  if (a->err != CL_SUCCESS) return clb_error(a->err, a->name);
  size_t local = a->s->kwg[a->which];
  size_t global = (items + local - 1) / local * local;
  if (!global) return AG_OK;
  cl_int err = clEnqueueNDRangeKernel(a->s->q, a->s->k[a->which], 1, NULL, &global, &local, 0, NULL, NULL);
  return err == CL_SUCCESS ? AG_OK : clb_error(err, a->name);
}

/* The ops (one file each); s->lock held, kernels created. */
CLB_HIDDEN ag_status cl_k_sort(ag_bstream *s, const ag_k_sort *a);
CLB_HIDDEN ag_status cl_k_scatter_add(ag_bstream *s, const ag_k_scatter_add *a);
CLB_HIDDEN ag_status cl_k_pad(ag_bstream *s, const ag_k_pad *a);
CLB_HIDDEN ag_status cl_k_pad_bwd(ag_bstream *s, const ag_k_pad_bwd *a);

#endif
