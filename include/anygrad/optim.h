/* Optimizers (SGD with momentum, AdamW) with fused multi-tensor updates: one
 * kernel launch per group of up to 128 parameters of one device, never one
 * per parameter. Gradient clipping by global norm and learning-rate
 * schedules, all without host synchronisation. */
#ifndef ANYGRAD_OPTIM_H
#define ANYGRAD_OPTIM_H

#include <stdbool.h>
#include <stdint.h>

#include "anygrad/nn.h"
#include "anygrad/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ag_optimizer ag_optimizer;

typedef struct ag_sgd_options {
  double lr, momentum, dampening, weight_decay;
  bool nesterov;
} ag_sgd_options;

typedef struct ag_adamw_options {
  double lr, beta1, beta2, eps, weight_decay; /* torch defaults: 1e-3, 0.9, 0.999, 1e-8, 0.01 */
} ag_adamw_options;

/* AdamW defaults as torch.optim.AdamW. */
AG_API ag_adamw_options ag_adamw_defaults(void);

/* Optimizers over the tensors of `params` (retained; the list itself is not
 * kept). State tensors (momentum, exp_avg, exp_avg_sq) are allocated now,
 * zero, as AG_MEM_OPTIMIZER. Owned by the caller: ag_optimizer_free.
 * Errors (NULL returned): AG_ERR_INVALID for a negative lr/momentum or
 * nesterov without momentum, AG_ERR_DTYPE for a parameter that is not f32
 * (AdamW) or not floating point (SGD), AG_ERR_STATE for a non-contiguous or
 * non-leaf parameter, AG_ERR_DEVICE when parameters span devices. */
AG_API ag_optimizer *ag_sgd_create(const ag_param_list *params, const ag_sgd_options *opts);
AG_API ag_optimizer *ag_adamw_create(const ag_param_list *params, const ag_adamw_options *opts);
AG_API void ag_optimizer_free(ag_optimizer *o);

/* One update of every parameter that has a gradient (others are skipped).
 * Asynchronous. Errors: kernel launch errors. */
AG_API ag_status ag_optimizer_step(ag_optimizer *o);
/* ag_optimizer_step for mixed precision (the grad scaler calls it; see
 * amp.h): the fused update reads two f32 scalar tensors on the parameters'
 * device, both optional (NULL): inv_scale multiplies every gradient inside
 * the update (gradients themselves stay as they are), and when found_inf is
 * non-zero the update is skipped on the device. No host sync. The step
 * counter advances either way (AdamW bias correction counts skipped steps).
 * Errors: AG_ERR_INVALID (NULL optimizer), AG_ERR_DEVICE / AG_ERR_DTYPE for
 * a scalar that is not an f32 scalar on the parameters' device, launch
 * errors. */
AG_API ag_status ag_optimizer_step_amp(ag_optimizer *o, ag_tensor *inv_scale, ag_tensor *found_inf);
/* Append the optimizer's parameters (retained by l) under their names.
 * Errors: AG_ERR_INVALID, AG_ERR_OOM. */
AG_API ag_status ag_optimizer_params(const ag_optimizer *o, ag_param_list *l);
/* Drop every parameter's gradient (set to none). */
AG_API void ag_optimizer_zero_grad(ag_optimizer *o);
AG_API void ag_optimizer_set_lr(ag_optimizer *o, double lr);
AG_API double ag_optimizer_lr(const ag_optimizer *o);
/* Steps taken so far (AdamW bias correction uses it); settable for resume. */
AG_API int64_t ag_optimizer_steps(const ag_optimizer *o);
AG_API void ag_optimizer_set_steps(ag_optimizer *o, int64_t steps);
/* Append the optimizer's state tensors (borrowed references retained by l)
 * named "<param name>.<state>" (exp_avg, exp_avg_sq, momentum), for
 * checkpoints: loading into them restores the state. State not created yet
 * (before the first step) is not listed. Errors: AG_ERR_INVALID (NULL o or
 * l), AG_ERR_OOM; entries added before an error stay in l. */
AG_API ag_status ag_optimizer_state(const ag_optimizer *o, ag_param_list *l);

/* Scale all gradients of params so their global L2 norm is at most
 * max_norm, without reading anything to the host: one sum-of-squares
 * launch and one in-place scaling launch per 512 gradients. Returns the norm
 * before clipping as a new f32 scalar tensor on the parameters' device
 * (reading it is the caller's choice), or NULL on error. Parameters without
 * gradients are skipped; with none at all the result is 0. */
AG_API ag_tensor *ag_clip_grad_norm(const ag_param_list *params, double max_norm);

/* Learning rate at `step` (0-based): linear warmup over `warmup` steps to
 * lr_max, then cosine decay to lr_min at `total` steps (constant after). */
AG_API double ag_lr_cosine(int64_t step, int64_t warmup, int64_t total, double lr_max, double lr_min);

#ifdef __cplusplus
}
#endif
#endif
