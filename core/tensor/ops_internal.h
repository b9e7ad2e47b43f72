/* What the parts of the ops front end share (ops.c, ops_reduce.c, ops_nn.c):
 * argument checks, the autograd record, tape-free views, broadcasting and the
 * autocast policy. Never installed. */
#ifndef AG_CORE_OPS_INTERNAL_H
#define AG_CORE_OPS_INTERNAL_H

#include "anygrad/amp.h"
#include "tensor/tensor_internal.h"
#include "autograd/record.h"

/* NULL (error kept, else AG_ERR_INVALID) or released (AG_ERR_STATE)
 * tensor arguments: true with the error set. */
AG_HIDDEN bool ag__null_args(const char *op, int n, ag_tensor *const *ts);
/* out, or NULL (out released) when st is an error. */
AG_HIDDEN ag_tensor *ag__op_finish(ag_tensor *out, ag_status st);
/* Records the autograd node of out when an input needs a gradient. */
AG_HIDDEN ag_tensor *ag__op_record(ag_tensor *out, ag_gop op, int n_in, ag_tensor *const *in, int n_saved,
                                   ag_tensor *const *saved, const ag_gparams *p);
/* Internal views and copies that never touch the tape. */
AG_HIDDEN ag_tensor *ag__raw_contiguous(ag_tensor *t);
AG_HIDDEN ag_tensor *ag__raw_view(ag_tensor *t, int ndim, const int64_t *shape);
AG_HIDDEN ag_tensor *ag__raw_transpose(ag_tensor *t, int a, int b);
AG_HIDDEN bool ag__broadcast_shapes(const char *op, int n, ag_tensor *const *ts, int *out_ndim,
                                    int64_t *out_shape);

/* Autocast policy of an op (ops.c, "autocast policy"). */
enum { AC_NONE, AC_LOW, AC_F32, AC_WIDEST };

typedef struct ag__ac_args {
  ag_tensor *t[8];
  int n;
} ag__ac_args;

/* Casts ts in place into a (new references); false on error. */
AG_HIDDEN bool ag__ac_begin(int policy, int n, ag_tensor **ts, ag__ac_args *a);
AG_HIDDEN ag_tensor *ag__ac_end(ag__ac_args *a, ag_tensor *r);

#define AC_ON() AG_UNLIKELY(ag_autocast_enabled())

#endif
