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

/* Mark a leaf tensor as needing a gradient (or clear the mark). On a
 * non-leaf (an op output with a recorded node, so it requires grad already)
 * true is AG_OK and changes nothing, and false is AG_ERR_STATE (use
 * ag_detach), as torch's requires_grad_. An op output made with recording
 * off (no-grad, inference, no input requiring grad) is a leaf. Errors:
 * AG_ERR_DTYPE for an integer or bool tensor ("ag_tensor_set_requires_grad:
 * i32 tensors cannot require grad"), AG_ERR_STATE for false on a non-leaf
 * or true inside inference mode, AG_ERR_INVALID for NULL, AG_ERR_STATE for
 * a released handle. */
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
 * into .grad of every leaf that requires grad. Unless retain_graph, each
 * node's saved tensors are freed as soon as the node has run (so the
 * activations of layers already done do not sit under the gradients of the
 * rest), and the graph's edges afterwards.
 * Errors: AG_ERR_STATE when out has no graph ("does not require grad") or
 * its graph was freed by an earlier backward without retain_graph (also one
 * that failed part-way: the nodes it ran are freed), or when
 * called in inference mode, or when a tensor a node saved for its backward
 * was written in place afterwards ("a tensor needed for gradient
 * computation has been modified by an in-place operation: ... is at version
 * X, expected version Y"; see ag_fill_ in tensor.h and docs/autograd.md);
 * AG_ERR_SHAPE when grad is NULL for a non-scalar
 * or has the wrong shape; AG_ERR_DTYPE for an integer out; errors of the
 * backward ops. Runs asynchronously like any op (no host sync). */
AG_API ag_status ag_backward(ag_tensor *out, ag_tensor *grad, bool retain_graph);

/* ---- gradient-ready hooks ----
 * A callback on a leaf that requires grad (a parameter), called by
 * ag_backward once per backward pass, as soon as the leaf's gradient for
 * that pass is complete: after the last contribution of the graph has been
 * accumulated into ag_tensor_grad(t) (as PyTorch's post-accumulate-grad
 * hooks). Leaves are finished in the order the engine finishes them, which
 * is roughly the reverse of the order the forward used them - what data
 * parallelism needs to start reducing the last layers' gradients while the
 * first layers' are still being computed (include/anygrad/ddp.h).
 *
 * When it runs: on the thread that called ag_backward, with grad mode off,
 * autocast suspended and the backward's scope open (tensors the hook creates
 * and does not keep are released when ag_backward returns). The gradient's
 * accumulation is enqueued on the current stream of t's device, not
 * necessarily finished on the device: work the hook enqueues on that stream
 * sees it, work on another stream must wait for it (an event). A leaf that
 * this pass reaches but sends no gradient to (every path to it carries
 * none) gets no call; a tensor that does not require grad never gets one.
 * A leaf used both inside an ag_checkpoint block and outside it may be
 * finished twice in one pass (once by the block's re-run).
 *
 * fn returns AG_OK, or an error status that stops the backward: ag_backward
 * returns it (the graph is kept, as for any failed backward). Several hooks
 * on one tensor run in registration order.
 *
 * Thread-safety: hooks of a tensor may be added or removed from any thread
 * while no backward that reaches the tensor runs (the same rule as its
 * .grad); never from inside one of its own hooks (AG_ERR_STATE). Hooks on
 * different tensors are independent. Hooks are dropped with the tensor. */
typedef ag_status (*ag_grad_hook_fn)(ag_tensor *t, void *user);

/* Register fn(t, user) on t; *out_id (not NULL) receives a handle, unique
 * among t's hooks, for ag_tensor_remove_grad_hook. t does not own user.
 * Errors: AG_ERR_INVALID (NULL t, fn or out_id), AG_ERR_STATE when t is not
 * a leaf or does not require grad ("ag_tensor_add_grad_hook: ... does not
 * require grad") or inside one of t's hooks, AG_ERR_OOM. On error nothing
 * is registered. */
AG_API ag_status ag_tensor_add_grad_hook(ag_tensor *t, ag_grad_hook_fn fn, void *user, uint64_t *out_id);
/* Remove the hook `id` from t. Errors: AG_ERR_INVALID (NULL t, or no hook
 * `id` on t), AG_ERR_STATE inside one of t's hooks. */
AG_API ag_status ag_tensor_remove_grad_hook(ag_tensor *t, uint64_t id);
/* Number of hooks registered on t (0 for NULL). */
AG_API int ag_tensor_grad_hook_count(const ag_tensor *t);

/* ---- gradient hooks that may replace the gradient ----
 * PyTorch's Tensor.register_hook: fn(grad, user, &replacement) sees the
 * gradient flowing into t during a backward pass, before it is used: for
 * an op output (a non-leaf), the sum of every contribution, before t's op
 * passes it on; for a leaf, the sum of the pass's contributions, before it
 * is added into ag_tensor_grad(t) (then the gradient-ready hooks above
 * run); for the tensor ag_backward starts from, its seed. fn leaves
 * *out_grad NULL to keep grad, or sets it to a tensor of grad's shape and
 * device that is used instead (a new reference, which the engine takes;
 * cast to grad's dtype). grad is borrowed for the call. Several hooks run
 * in registration order, each seeing the previous one's result.
 *
 * When it runs: on the thread of the backward, with grad mode off and no
 * scope open (tensors fn creates are its own, to release or return), so
 * code that never uses scopes (a language binding) may create tensors
 * freely. fn returns AG_OK, or an error status that stops the backward
 * (ag_backward returns it). Hooks on a non-leaf live on its recorded node
 * and go with it; ag_autograd_grad runs those, not a leaf's. Thread-safety
 * as the gradient-ready hooks.
 *
 * ag_tensor_add_grad_pre_hook: *out_id (not NULL) receives a handle for
 * ag_tensor_remove_grad_hook (which removes either kind). free_user (may
 * be NULL) runs once with user when the hook goes: removed, or dropped
 * with its tensor (a leaf) or its node (an op output); a binding keeps its
 * callable alive until then. Errors: AG_ERR_INVALID (NULL t, fn or
 * out_id), AG_ERR_STATE when t does not require grad ("... does not
 * require grad") or inside one of its hooks, AG_ERR_OOM. On error nothing
 * is registered and free_user is not called. */
typedef ag_status (*ag_grad_pre_hook_fn)(ag_tensor *grad, void *user, ag_tensor **out_grad);
AG_API ag_status ag_tensor_add_grad_pre_hook(ag_tensor *t, ag_grad_pre_hook_fn fn, void *user,
                                             void (*free_user)(void *user), uint64_t *out_id);

/* ---- gradients without accumulation (torch.autograd.grad) ----
 * The gradients of the outputs with respect to the inputs: out_grads[i]
 * receives d(sum_k outputs[k] * grad_outputs[k]) / d inputs[i], a new
 * tensor owned by the caller with inputs[i]'s shape, dtype and device,
 * or NULL when the input is not reached from the outputs and allow_unused.
 * Nothing is accumulated into any tensor's .grad. As torch 1.13: no hook of
 * a leaf runs, the pre-hooks of op outputs do (they change what flows on),
 * and an op output's gradient is gathered before its own pre-hooks run.
 * grad_outputs may be NULL, and any
 * entry of it NULL, for one-element outputs (a gradient of 1). Inputs may
 * be leaves or op outputs (their gradient is the total flowing into them).
 * Unless retain_graph, the graph behind the outputs is freed as by
 * ag_backward. The backward runs under no-grad: the results have no graph
 * (no create_graph). A checkpointed block (ag_checkpoint) on the way
 * re-runs with ag_backward, so the parameters read inside it do get .grad.
 * On error every out_grads[i] is NULL.
 * Errors: AG_ERR_INVALID (NULL arrays or entries, counts below 1),
 * AG_ERR_STATE (an output that does not require grad, an input that does
 * not require grad, an unused input without allow_unused: "input 1 was not
 * used in the graph (pass allow_unused)", a freed graph, inference mode),
 * AG_ERR_SHAPE / AG_ERR_DEVICE / AG_ERR_DTYPE for a grad_outputs entry
 * that does not match its output (or is missing for a non-scalar), and
 * the errors of the backward ops. */
AG_API ag_status ag_autograd_grad(int n_outputs, ag_tensor *const *outputs, ag_tensor *const *grad_outputs,
                                  int n_inputs, ag_tensor *const *inputs, bool retain_graph, bool allow_unused,
                                  ag_tensor **out_grads);

/* ---- the recorded graph (grad_fn) ----
 * The node that produced t (PyTorch's grad_fn), or NULL for a leaf or a
 * result made with recording off. Borrowed: valid while t (or a reference
 * taken with ag_grad_node_retain) lives. A node's name is its op's
 * ("add", "matmul", "sum", a custom function's name); its inputs are the
 * tensors the op recorded, each leading to the node that produced it
 * (ag_grad_node_next returns it, borrowed) or to a leaf that requires grad
 * (*out_leaf, borrowed; may be NULL) or to nothing (an input without grad,
 * or an edge already freed by a backward without retain_graph).
 * ag_grad_node_retain returns n with one more reference, which
 * ag_grad_node_release drops. NULL in, NULL or 0 out, with no error. */
typedef struct ag_node ag_grad_node;
AG_API ag_grad_node *ag_tensor_grad_fn(const ag_tensor *t);
AG_API ag_grad_node *ag_grad_node_retain(ag_grad_node *n);
AG_API void ag_grad_node_release(ag_grad_node *n);
AG_API const char *ag_grad_node_name(const ag_grad_node *n);
AG_API int ag_grad_node_input_count(const ag_grad_node *n);
AG_API ag_grad_node *ag_grad_node_next(const ag_grad_node *n, int i, ag_tensor **out_leaf);

/* ---- custom functions (torch.autograd.Function) ----
 * Make out the result of a function whose gradient the caller computes:
 * records a node on out (a tensor with no graph, computed from the inputs
 * under no-grad, that does not require grad itself) with an edge to each
 * input. In backward, backward(user, grad_output, n_inputs, grads) runs
 * (grad mode off, no scope open, as the pre-hooks above) and sets grads[i]
 * to the gradient of input i (a new reference the engine takes; input i's
 * shape and device, cast to its dtype) or leaves it NULL (no gradient);
 * grad_output is borrowed. It returns AG_OK or an error status, which
 * stops the backward. name (copied, at most 63 bytes kept) names the node
 * for ag_grad_node_name. The library owns user from the call on:
 * free_user(user) (may be NULL) runs exactly once, at once when nothing is
 * recorded (grad mode off, no input requires grad) or on error, else when
 * the node's graph is freed (after a backward without retain_graph, or
 * when the last tensor holding the node goes).
 * Errors: AG_ERR_INVALID (NULL out, backward, or inputs with n_inputs > 0,
 * n_inputs < 0), AG_ERR_STATE (out already has a graph or requires grad),
 * AG_ERR_DTYPE (an integer out), AG_ERR_OOM. A gradient of the wrong shape
 * or device makes the backward fail with AG_ERR_SHAPE / AG_ERR_DEVICE
 * naming the function and the input. */
typedef ag_status (*ag_custom_backward_fn)(void *user, ag_tensor *grad_output, int n_inputs, ag_tensor **grads);
AG_API ag_status ag_custom_record(ag_tensor *out, const char *name, int n_inputs, ag_tensor *const *inputs,
                                  ag_custom_backward_fn backward, void (*free_user)(void *user), void *user);

/* ---- grad modes (per thread, nestable up to depth 64) ----
 * No-grad: ops record nothing. Inference mode: ops record nothing, and
 * requires_grad cannot be set and backward cannot run (AG_ERR_STATE), so a
 * forward pass can never keep a graph alive by accident. */
AG_API void ag_no_grad_begin(void);
AG_API void ag_inference_mode_begin(void);
/* Re-enable recording inside a no-grad region (rarely needed). */
AG_API void ag_enable_grad_begin(void);
/* A region opened inside a scope must be closed before the scope ends:
 * ag_scope_end closes one left open and reports it (AG_ERR_STATE). */
/* Close the innermost region opened by one of the *_begin calls above.
 * Errors: AG_ERR_STATE when none is open. */
AG_API ag_status ag_grad_mode_end(void);
/* Whether ops on this thread record (no enclosing no-grad/inference). */
AG_API bool ag_grad_enabled(void);
AG_API bool ag_inference_mode(void);

/* ---- activation checkpointing ----
 * Trade compute for memory (as torch.utils.checkpoint): run a block's
 * forward without keeping its activations, and re-run it in backward.
 *
 * fn computes the block's output from its inputs (parameters are reached
 * through ctx) and returns a new tensor (ownership as any op's result), or
 * NULL with the error set. It must be deterministic given its inputs, ctx
 * and the generator `gen` (whose state is saved before the forward and
 * restored for the re-run, so dropout masks repeat), and must release its
 * temporaries or leave them to the current scope.
 *
 * ag_checkpoint runs fn under no-grad in its own scope, so nothing but the
 * inputs (saved, as references) and the output stay alive, and records one
 * node. Its backward re-runs fn with grad on (under the forward's autocast
 * dtype) from detached copies of the inputs, backpropagates through that
 * graph - the parameters fn reads receive their gradients there - and
 * passes the inputs' gradients on. ctx_size bytes of ctx are copied into the
 * node (at most AG_CHECKPOINT_MAX_CTX); with ctx_size 0, ctx is passed as
 * is and must stay valid until the backward. With grad mode off, fn simply
 * runs. Not supported: a checkpointed block inside another one's re-run
 * under autocast (it re-runs in f32).
 * Errors: AG_ERR_INVALID (NULL fn or input, n_inputs outside
 * 1..AG_CHECKPOINT_MAX_INPUTS, ctx_size too large, fn returning a view of an
 * input), AG_ERR_OOM, fn's errors (in the forward, or from ag_backward). */
#define AG_CHECKPOINT_MAX_INPUTS 8
#define AG_CHECKPOINT_MAX_CTX 256
typedef ag_tensor *(*ag_checkpoint_fn)(void *ctx, int n_inputs, ag_tensor *const *inputs);
AG_API ag_tensor *ag_checkpoint(ag_checkpoint_fn fn, const void *ctx, size_t ctx_size, ag_generator *gen,
                                int n_inputs, ag_tensor *const *inputs);

/* Number of live autograd nodes in the process (for leak tests). */
AG_API int64_t ag_live_nodes(void);

#ifdef __cplusplus
}
#endif
#endif
