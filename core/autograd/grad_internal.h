/* Autograd node layout shared by the tape (autograd.c) and the backward
 * formulas (grad_ops.c). Never installed. */
#ifndef AG_CORE_GRAD_INTERNAL_H
#define AG_CORE_GRAD_INTERNAL_H

#include <stdatomic.h>

#include "anygrad/autograd.h"
#include "tensor/record.h"
#include "tensor/tensor_internal.h"

#define AG_NODE_MAX_SAVED 6
#define AG_NODE_MAX_INPUTS_STACK 8

/* Where an input's gradient goes: the node that produced it, or the leaf
 * that accumulates it (both retained), plus the input's metadata so the
 * backward can reduce broadcast gradients and cast back. */
typedef struct ag_edge {
  struct ag_node *fn;
  ag_tensor *leaf;
  ag_tensor *val; /* input values, kept only when the formula reads them */
  bool present;
  ag_dtype dtype;
  ag_device dev;
  int ndim;
  int64_t shape[AG_MAX_DIMS];
} ag_edge;

typedef struct ag_node {
  atomic_int refcount;
  ag_gop op;
  ag_gparams p;
  bool released; /* saved tensors freed by a backward without retain_graph */
  bool counted;
  bool want_out;
  /* scratch of one backward pass (graphs are not walked by two threads at once) */
  bool tmp_mark;
  int tmp_idx;
  ag_tensor *out_val; /* history-free alias of the output, when needed */
  ag_dtype out_dtype;
  ag_device out_dev;
  int out_ndim;
  int64_t out_shape[AG_MAX_DIMS];
  int n_saved;
  ag_tensor *saved[AG_NODE_MAX_SAVED];
  struct ag_ckpt *ckpt; /* AG_G_CHECKPOINT: the block to re-run (owned) */
  struct ag_custom *custom;     /* AG_G_CUSTOM: the caller's backward (owned) */
  struct ag_grad_hooks *hooks;  /* pre-hooks of the node's output tensor (owned) */
  int n_in;
  ag_edge e[];
} ag_node;

/* References held by long-lived holders (nodes, parameter lists,
 * optimizers) and temporaries on tensors another scope owns. A scope owns
 * its tensor, not one particular reference, so ag_tensor_release on a
 * scope-owned tensor takes it out of the scope: a retain/release pair on
 * someone else's tensor would orphan the scope's reference. These never
 * touch scope membership; the last unhold frees through ag_tensor_release. */
static inline ag_tensor *ag__hold(ag_tensor *t) {
  if (t) atomic_fetch_add_explicit(&t->refcount, 1, memory_order_relaxed);
  return t;
}
static inline void ag__unhold(ag_tensor *t) {
  if (!t) return;
  int c = atomic_load_explicit(&t->refcount, memory_order_relaxed);
  while (c > 1)
    if (atomic_compare_exchange_weak_explicit(&t->refcount, &c, c - 1, memory_order_acq_rel,
                                              memory_order_relaxed))
      return;
  ag_tensor_release(t);
}
/* Gradients of n's inputs given the gradient g of its output. gin[i] is set
 * (a new reference) only for edges with a node or leaf. Runs with grad mode
 * off inside the backward's scope. */
AG_HIDDEN ag_status ag__node_backward(ag_node *n, ag_tensor *g, ag_tensor **gin);
AG_HIDDEN void ag__node_release(ag_node *n);
/* The op's name for messages ("gelu", "matmul"); never NULL. */
AG_HIDDEN const char *ag__node_name(const ag_node *n);
/* Backward formulas of the vision ops (grad_vision.c). */
AG_HIDDEN ag_status ag__conv2d_backward(ag_node *n, ag_tensor *g, ag_tensor **gin);
AG_HIDDEN ag_status ag__pool2d_backward(ag_node *n, ag_tensor *g, ag_tensor **gin);
AG_HIDDEN ag_status ag__batch_norm_backward(ag_node *n, ag_tensor *g, ag_tensor **gin);
/* Backward of the fused attention node (grad_attention.c). */
AG_HIDDEN ag_status ag__sdpa_backward(ag_node *n, ag_tensor *g, ag_tensor **gin);
/* Backward of group norm and interpolate (grad_resample.c). */
AG_HIDDEN ag_status ag__group_norm_backward(ag_node *n, ag_tensor *g, ag_tensor **gin);
AG_HIDDEN ag_status ag__interpolate_backward(ag_node *n, ag_tensor *g, ag_tensor **gin);
/* Move a scope-owned reference to the caller (returns t). */
AG_HIDDEN ag_tensor *ag__grad_own(ag_tensor *t);
AG_HIDDEN void ag__grad_tag(ag_tensor *t, ag_mem_category cat);

#endif
