/* What a forward op records for autograd: the node kinds, their
 * parameters and what each saves. The ops' side of the contract; the tape
 * (core/autograd/autograd.c), a layer above, registers the recorder that
 * builds the node (tensor/grad_mode.c). Never installed. */
#ifndef AG_CORE_RECORD_H
#define AG_CORE_RECORD_H

#include <stdbool.h>
#include <stdint.h>

#include "anygrad/status.h"
#include "anygrad/tensor.h"

#include "hidden.h"

typedef enum ag_gop {
  AG_G_ADD, AG_G_SUB, AG_G_MUL, AG_G_DIV,
  AG_G_UNARY,       /* a unary op of the table (optable.h): p->i[0] the
                       ag_unary_op, p->s[0..1] its scalars; what it saves
                       (x or the output) is the table's */
  AG_G_BINARY,      /* a binary op of the table whose gradient is generated
                       (PART): p->i[0] the ag_binary_op; saves a and b */
  AG_G_WHERE,       /* inputs cond, a, b (cond not differentiable) */
  AG_G_SUM, AG_G_MEAN, AG_G_MAX, AG_G_MIN, /* dims in p, keepdim in p */
  AG_G_MATMUL,
  AG_G_SOFTMAX, AG_G_LOG_SOFTMAX, /* dim in p->i[0] */
  AG_G_CROSS_ENTROPY, /* inputs logits, targets; p->i[0] reduction, i[1] ignore */
  AG_G_MSE,
  AG_G_LAYER_NORM,  /* inputs x, weight, bias (NULL allowed); saved mean, rstd */
  AG_G_EMBEDDING,   /* inputs table, indices */
  AG_G_CONCAT,      /* n inputs; dim in p->i[0] */
  AG_G_DROPOUT,     /* saved mask */
  AG_G_VIEW,        /* reshape/view/flatten/squeeze/unsqueeze: input shape in p */
  AG_G_PERMUTE,     /* dims in p */
  AG_G_SLICE,       /* p->i: dim, start, end, step */
  AG_G_EXPAND,      /* input shape in p */
  AG_G_CAST,        /* input dtype in p->i[0] */
  AG_G_TO_DEVICE,
  AG_G_CHECKPOINT,  /* ag_checkpoint: inputs saved, the block re-run in backward */
  AG_G_CONV2D,      /* inputs x, w, bias (NULL allowed); p->dims[0..6] stride,
                       padding, dilation (h, w each), groups */
  AG_G_BATCH_NORM,  /* inputs x, weight, bias (NULL allowed); saved mean, rstd
                       [C]; p->i[0] training (the statistics depend on x) */
  AG_G_POOL2D,      /* input x; p->i[0] ag_pool_op; p->dims[0..6] as the
                       kernel call's s[0..6]; MAX saves the i32 indices */
  AG_G_RMS_NORM,    /* inputs x, weight (NULL allowed); saved contiguous x,
                       rstd */
  AG_G_VAR,         /* var (p->i[0] 0) or std (1): dims, keepdim, keepdim
                       shape in p as AG_G_SUM; p->s[0] = max(0, N -
                       correction); std saves its output (keepdim shape) */
  AG_G_CUMSUM,      /* p->i[0] dim, p->i[1] reverse (suffix sums) */
  AG_G_GATHER,      /* inputs x, index; p->i[0] dim, p->i[1] 1 for index_select */
  AG_G_SDPA,        /* fused attention: inputs q, k, v; saved contiguous q,
                       k, v, the output, the log-sum-exp [B, H, T] and the
                       mask (or NULL); p->s[0] scale, s[1] dropout p, i[0]
                       causal, i[1], i[2] the Philox seed and offset */
  AG_G_LOGSUMEXP,   /* input x; saved the output (keepdim shape); dims,
                       keepdim and keepdim shape in p as AG_G_SUM */
  AG_G_NORM,        /* input x; p->i[0] the variant (AG_KV_NORM_L1, _L2,
                       _INF); saved the output (keepdim shape); dims as
                       AG_G_SUM */
  AG_G_GROUP_NORM,  /* inputs x, weight, bias (NULL allowed); saved x as
                       contiguous [N, C, HW], mean, rstd [N, groups] (f32;
                       f64 for f64 x); p->i[0] groups */
  AG_G_INTERPOLATE, /* input x [N, C, H, W]; p->i[0] the AG_KV_INTERP_*
                       variant, i[1] align_corners; p->s[0], s[1] the
                       kernel's source steps */
  AG_G_SCATTER_ADD, /* inputs self, index, src; p->i[0] dim, p->i[1] 1 for
                       index_add, p->s[0] alpha */
  AG_G_PAD,         /* one pad step: input x; p->i[0] the padded dim (x as
                       [B, H, W] around it), i[1] top, i[2] left, i[3]
                       ag_pad_mode */
  AG_G_CUSTOM,      /* ag_custom_record: n inputs, the caller's backward
                       (autograd.c) */
  AG_GOP_COUNT
} ag_gop;

typedef struct ag_gparams {
  double s[4];
  int64_t i[4];
  int n_dims;
  int dims[AG_MAX_DIMS];
  bool keepdim;
  int ndim; /* an input shape the backward needs */
  int64_t shape[AG_MAX_DIMS];
} ag_gparams;

/* Saved tensors passed by the forward ops (core/tensor/ops*.c, core/tensor/tensor_view.c):
 *   MUL, DIV, BINARY: the inputs a, b as given;  UNARY: the table's choice
 *   (x, the output, or nothing);  ADD/SUB: none
 *   WHERE: saved cond;  MAX/MIN reductions: saved x, out (keepdim=true
 *   shape view of out);  MATMUL: saved a, b (inputs as given; a third input
 *   is a bias the GEMM added, ag__linear_addmm)
 *   SOFTMAX, LOG_SOFTMAX: saved out;  CROSS_ENTROPY: saved logits as [N, C]
 *   contiguous, targets [N] contiguous i32, and for MEAN the scalar count
 *   of non-ignored targets (f32; f64 for f64 logits);  MSE: saved diff =
 *   a - b;  LAYER_NORM: saved x as [N, D] contiguous, mean [N], rstd [N]
 *   (f32; f64 for f64 x);  EMBEDDING: saved
 *   indices contiguous i32;  DROPOUT: saved mask (out = x * mask)
 * The node's output is `out` (its shape is out's); inputs are the forward
 * op's tensor arguments in order. */
/* True when grad mode is on and any non-NULL input requires grad. */
AG_HIDDEN bool ag__grad_needed(int n, ag_tensor *const *inputs);
/* Attach a backward node to out through the registered recorder. inputs
 * may hold NULLs (absent optional inputs); saved tensors are retained by
 * the node until it is freed. AG_ERR_INTERNAL when no recorder is
 * registered (only the tape sets requires_grad, so it cannot happen). */
AG_HIDDEN ag_status ag__grad_record(ag_tensor *out, ag_gop op, int n_inputs,
                                    ag_tensor *const *inputs, int n_saved,
                                    ag_tensor *const *saved, const ag_gparams *p);
/* Release t's autograd fields (gradient, node, hooks) when t is destroyed;
 * nothing to do, and no call, when it has none. */
AG_HIDDEN void ag__grad_tensor_free(ag_tensor *t);

/* What the tape does for the ops: build the node of a record (the
 * arguments of ag__grad_record, out non-NULL) and release a dying tensor's
 * autograd fields. core/autograd/autograd.c registers its recorder from a
 * constructor, before main; ag__grad_recorder_set is an atomic store of
 * the pointer (r must stay valid), so it is thread-safe, and the ops read
 * it with an acquire load. Only the tape sets requires_grad, so a program
 * without the tape (a static link that leaves it out) records nothing. */
typedef struct ag_grad_recorder {
  ag_status (*record)(ag_tensor *out, ag_gop op, int n_inputs, ag_tensor *const *inputs, int n_saved,
                      ag_tensor *const *saved, const ag_gparams *p);
  void (*tensor_free)(ag_tensor *t);
} ag_grad_recorder;
AG_HIDDEN void ag__grad_recorder_set(const ag_grad_recorder *r);

#endif
