/* Reverse-mode automatic differentiation: requires_grad, backward, grad
 * accumulation, detach, and the thread-local no-grad / inference modes.
 * Every differentiable op in ops.h and tensor.h records a node on a dynamic
 * tape when grad mode is on and an input requires grad. */
#ifndef ANYGRAD_AUTOGRAD_H
#define ANYGRAD_AUTOGRAD_H

#include <stdbool.h>

#include "anygrad/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Mark a leaf tensor as needing a gradient. Errors: AG_ERR_DTYPE for an
 * integer tensor ("ag_tensor_set_requires_grad: i32 tensors cannot require
 * grad"), AG_ERR_STATE for a non-leaf (an op output) or inside inference
 * mode, AG_ERR_INVALID for NULL. */
AG_API ag_status ag_tensor_set_requires_grad(ag_tensor *t, bool requires_grad);
AG_API bool ag_tensor_requires_grad(const ag_tensor *t);
/* True for tensors that were not produced by a recorded op. */
AG_API bool ag_tensor_is_leaf(const ag_tensor *t);

/* The accumulated gradient of a leaf, or NULL if none yet. Borrowed: valid
 * until the next backward, zero-grad or release of t. Gradients are
 * contiguous, with t's dtype and device. */
AG_API ag_tensor *ag_tensor_grad(const ag_tensor *t);
/* Drop t's gradient (set to none); the next backward allocates it again. */
AG_API void ag_tensor_zero_grad(ag_tensor *t);

/* A new tensor sharing t's storage (and so its in-place version counter)
 * with no autograd history and requires_grad false. Ownership as in
 * tensor.h. Errors: AG_ERR_INVALID for NULL (unless an error is pending). */
AG_API ag_tensor *ag_detach(ag_tensor *t);

/* Backpropagate from `out`. `grad` is the gradient of `out` (same shape);
 * it may be NULL only for a one-element `out` (then 1). Gradients are added
 * into .grad of every leaf that requires grad. Unless retain_graph, the
 * graph's saved tensors and edges are freed afterwards.
 * Errors: AG_ERR_STATE when out has no graph ("does not require grad") or
 * its graph was freed by an earlier backward without retain_graph, or when
 * called in inference mode, or when a tensor a node saved for its backward
 * was written in place afterwards ("a tensor needed for gradient
 * computation has been modified by an in-place operation: ... is at version
 * X, expected version Y"; see ag_fill_ in tensor.h and docs/autograd.md);
 * AG_ERR_SHAPE when grad is NULL for a non-scalar
 * or has the wrong shape; AG_ERR_DTYPE for an integer out; errors of the
 * backward ops. Runs asynchronously like any op (no host sync). */
AG_API ag_status ag_backward(ag_tensor *out, ag_tensor *grad, bool retain_graph);

/* ---- grad modes (per thread, nestable up to depth 64) ----
 * No-grad: ops record nothing. Inference mode: ops record nothing, and
 * requires_grad cannot be set and backward cannot run (AG_ERR_STATE), so a
 * forward pass can never keep a graph alive by accident. */
AG_API void ag_no_grad_begin(void);
AG_API void ag_inference_mode_begin(void);
/* Re-enable recording inside a no-grad region (rarely needed). */
AG_API void ag_enable_grad_begin(void);
/* Close the innermost region opened by one of the *_begin calls above.
 * Errors: AG_ERR_STATE when none is open. */
AG_API ag_status ag_grad_mode_end(void);
/* Whether ops on this thread record (no enclosing no-grad/inference). */
AG_API bool ag_grad_enabled(void);
AG_API bool ag_inference_mode(void);

/* Number of live autograd nodes in the process (for leak tests). */
AG_API int64_t ag_live_nodes(void);

#ifdef __cplusplus
}
#endif
#endif
