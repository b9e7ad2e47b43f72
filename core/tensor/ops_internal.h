/* What the parts of the ops front end share (ops.c, ops_reduce.c, ops_nn.c):
 * argument checks, the autograd record, tape-free views, broadcasting and the
 * autocast policy. Never installed. */
#ifndef AG_CORE_OPS_INTERNAL_H
#define AG_CORE_OPS_INTERNAL_H

#include "anygrad/amp.h"
#include "tensor/tensor_internal.h"
#include "tensor/record.h"

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

/* The binary kernel bop of a and b (both broadcastable to out's shape, of
 * the kernel's input dtype, on out's device) written into out (of the
 * op's result dtype): no checks, no recording. out may be a when the
 * kernel reads each element before writing it (the elementwise kernels
 * do); AG_OK or the launch's error. */
AG_HIDDEN ag_status ag__binary_into(const char *name, ag_binary_op bop, ag_tensor *out, ag_tensor *a, ag_tensor *b);

/* ---- launch helpers that a backward formula (core/autograd/) shares
 * with its forward ---- */

/* The fused attention call's scalars (scale, dropout p, causal), Philox
 * words and optional mask operand (slot 4, broadcast to bhts = [B, H, T,
 * S]); forward in attention.c, backward in autograd/grad_attention.c. */
/* Batch norm's kernel passes over a contiguous NCHW a, viewed [N, C, HW]
 * (vision.c; backward in autograd/grad_vision.c), each a new reference or
 * NULL: out [2, C] = BN_STATS(a), or with b the sums of b and b*(a - mu);
 * y = a*p + q (+ (b - mu)*r) per channel with coef rows [p, q(, r, mu)];
 * row r of a [k, C] tensor as [C] (a view); [k, C] from k vectors [C]. */
AG_HIDDEN ag_tensor *ag__bn_stats(ag_tensor *a, ag_tensor *b, ag_tensor *mu);
AG_HIDDEN ag_tensor *ag__bn_apply(ag_tensor *a, ag_tensor *coef, ag_tensor *b);
AG_HIDDEN ag_tensor *ag__bn_row(ag_tensor *t, int64_t r);
AG_HIDDEN ag_tensor *ag__bn_coef(int k, ag_tensor *const *rows);

AG_HIDDEN void ag__sdpa_call_args(ag_kernel_call *c, ag_tensor *mask, const int64_t bhts[4], double scale,
                                  bool causal, double p, uint64_t seed, uint64_t offset);

#endif
