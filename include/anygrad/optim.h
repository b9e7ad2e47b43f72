/* Optimizers: SGD with momentum and AdamW with fused multi-tensor updates
 * (one kernel launch per group of up to 128 parameters of one device, never
 * one per parameter), and RMSprop composed from elementwise ops. Gradient clipping by global norm and learning-rate
 * schedules, all without host synchronisation. */
#ifndef ANYGRAD_OPTIM_H
#define ANYGRAD_OPTIM_H

#include <math.h>
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

typedef struct ag_rmsprop_options {
  double lr, alpha, eps, weight_decay, momentum; /* torch defaults: 1e-2, 0.99, 1e-8, 0, 0 */
  bool centered;                                 /* torch default: false */
} ag_rmsprop_options;

/* RMSprop defaults as torch.optim.RMSprop. */
AG_API ag_rmsprop_options ag_rmsprop_defaults(void);

/* Optimizers over the tensors of `params` (retained; the list itself is not
 * kept). State tensors (momentum, exp_avg, exp_avg_sq) are allocated now,
 * zero, as AG_MEM_OPTIMIZER. Owned by the caller: ag_optimizer_free.
 * Errors (NULL returned): AG_ERR_INVALID for an lr, momentum, weight decay
 * or eps that is negative, NaN or infinite, a non-finite dampening, betas
 * outside [0, 1), nesterov without momentum, one tensor listed twice
 * (naming both indices and names), AG_ERR_DTYPE for a parameter that is
 * not f32 (AdamW) or not floating point (SGD), AG_ERR_STATE for a
 * non-contiguous or non-leaf parameter, AG_ERR_DEVICE when parameters span
 * devices. */
AG_API ag_optimizer *ag_sgd_create(const ag_param_list *params, const ag_sgd_options *opts);
AG_API ag_optimizer *ag_adamw_create(const ag_param_list *params, const ag_adamw_options *opts);
/* torch.optim.RMSprop (L2 weight decay, optional momentum and centering)
 * over the tensors of `params` (retained), composed from elementwise tensor
 * ops in torch's order (a few launches per parameter and step, no fused
 * kernel), so it runs on every device and floating dtype those ops take
 * (f64 included) and equals torch's update up to their rounding. State:
 * square_avg, momentum_buffer (momentum > 0), grad_avg (centered), zero,
 * as AG_MEM_OPTIMIZER; ag_optimizer_state names them so. opts NULL: the
 * defaults. Owned by the caller: ag_optimizer_free. Errors (NULL
 * returned): AG_ERR_INVALID for an lr, alpha, eps, weight decay or momentum
 * that is negative, NaN or infinite, one tensor listed twice;
 * AG_ERR_DTYPE, AG_ERR_STATE, AG_ERR_DEVICE as ag_sgd_create. Its
 * ag_optimizer_step_amp with a scale or found_inf is AG_ERR_UNSUPPORTED
 * (no fused update to unscale in). */
AG_API ag_optimizer *ag_rmsprop_create(const ag_param_list *params, const ag_rmsprop_options *opts);
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
/* Every group's learning rate. Errors: AG_ERR_INVALID for a NULL o or an
 * lr that is negative, NaN or infinite (the rates stay as they were). */
AG_API ag_status ag_optimizer_set_lr(ag_optimizer *o, double lr);
AG_API double ag_optimizer_lr(const ag_optimizer *o);
/* Steps taken so far (AdamW bias correction uses it); settable for resume. */
AG_API int64_t ag_optimizer_steps(const ag_optimizer *o);
AG_API void ag_optimizer_set_steps(ag_optimizer *o, int64_t steps);
/* Append the optimizer's state tensors (borrowed references retained by l)
 * named "<param name>.<state>" (exp_avg, exp_avg_sq, momentum; RMSprop:
 * square_avg, momentum_buffer, grad_avg), for
 * checkpoints: loading into them restores the state. State not created yet
 * (before the first step) is not listed. Errors: AG_ERR_INVALID (NULL o or
 * l), AG_ERR_OOM; entries added before an error stay in l. */
AG_API ag_status ag_optimizer_state(const ag_optimizer *o, ag_param_list *l);

/* ---- parameter groups ---- */

/* One group of parameters with its own learning rate and weight decay
 * (torch.optim param_groups). lr or weight_decay NAN (AG_GROUP_INHERIT):
 * the options' value; any other value is used as given (0 is a real 0). */
#define AG_GROUP_INHERIT NAN
typedef struct ag_param_group {
  const ag_param_list *params; /* read during the call only */
  double lr, weight_decay;
} ag_param_group;

/* ag_adamw_create / ag_sgd_create over n_groups groups (group i has index
 * i): the same fused update, one launch per group (and dtype, and 128
 * tensors) with that group's lr and weight decay; every other option is
 * shared. Parameters are listed by ag_optimizer_params and
 * ag_optimizer_state in group order. Owned by the caller:
 * ag_optimizer_free. Errors (NULL returned): AG_ERR_INVALID for NULL groups
 * (or a NULL list in one), n_groups < 1, a negative, infinite lr or weight
 * decay, a parameter in two groups (both names given); then the errors of
 * ag_adamw_create / ag_sgd_create (opts NULL: AdamW defaults; SGD needs
 * opts). */
AG_API ag_optimizer *ag_adamw_create_groups(const ag_param_group *groups, int n_groups,
                                            const ag_adamw_options *opts);
AG_API ag_optimizer *ag_sgd_create_groups(const ag_param_group *groups, int n_groups,
                                          const ag_sgd_options *opts);
/* ag_rmsprop_create over groups, as ag_adamw_create_groups (opts NULL:
 * the defaults); each group's lr and weight decay, the other options
 * shared. Owned by the caller: ag_optimizer_free. Errors (NULL returned):
 * those of ag_adamw_create_groups, then those of ag_rmsprop_create. */
AG_API ag_optimizer *ag_rmsprop_create_groups(const ag_param_group *groups, int n_groups,
                                              const ag_rmsprop_options *opts);
/* The usual no-decay rule: append every entry of `all` of rank >= 2
 * (weight matrices, embeddings, convolution kernels) to `decay`, and every
 * entry of rank 0 or 1 (biases, LayerNorm/BatchNorm weights) to
 * `no_decay`, under the same names; both lists retain what they get.
 * Errors: AG_ERR_INVALID (a NULL list or two lists the same), AG_ERR_OOM;
 * entries added before an error stay. */
AG_API ag_status ag_params_split_decay(const ag_param_list *all, ag_param_list *decay, ag_param_list *no_decay);
/* Number of groups (1 for ag_adamw_create / ag_sgd_create; 0 for NULL). */
AG_API int ag_optimizer_group_count(const ag_optimizer *o);
/* One group's learning rate. ag_optimizer_set_lr sets every group's;
 * ag_optimizer_lr reads group 0's. Errors: AG_ERR_INVALID for a NULL o, a
 * group out of range or a negative/non-finite lr (the getters return NAN
 * with the error set). */
AG_API ag_status ag_optimizer_set_group_lr(ag_optimizer *o, int group, double lr);
AG_API double ag_optimizer_group_lr(const ag_optimizer *o, int group);
AG_API double ag_optimizer_group_weight_decay(const ag_optimizer *o, int group);

/* The step count and every group's learning rate as tensors, for
 * checkpoints that resume without metadata: appends "optimizer.step" (an
 * i64 scalar) and "optimizer.lr.<group>" (f64 scalars, exact), CPU tensors
 * owned by o (retained by l). From this call on they are the optimizer's
 * counters: ag_safetensors_load_into writing them sets the step count and
 * learning rates the next ag_optimizer_step uses (and ag_optimizer_steps,
 * ag_optimizer_lr report); every step and setter writes them back. Reading
 * them is a host read, never a device synchronisation. Kept apart from
 * ag_optimizer_state so checkpoints saved without them still load into
 * that list. Errors: AG_ERR_INVALID (NULL o or l), AG_ERR_OOM; entries
 * added before an error stay in l. */
AG_API ag_status ag_optimizer_counters(ag_optimizer *o, ag_param_list *l);

/* Scale all gradients of params so their global L2 norm is at most
 * max_norm, without reading anything to the host: one sum-of-squares
 * launch and one in-place scaling launch per 512 gradients. Returns the norm
 * before clipping as a new f32 scalar tensor on the parameters' device
 * (reading it is the caller's choice), or NULL on error (AG_ERR_UNSUPPORTED
 * for a gradient dtype the device's kernels do not take: f32 everywhere,
 * f16 and bf16 where the backend has them). Parameters without
 * gradients are skipped; with none at all the result is 0. */
AG_API ag_tensor *ag_clip_grad_norm(const ag_param_list *params, double max_norm);

/* Learning rate at `step` (0-based): linear warmup over `warmup` steps to
 * lr_max, then cosine decay to lr_min at `total` steps (constant after; a
 * total <= warmup is a run that ends in its warmup: lr_min after it).
 * Errors (NAN returned, AG_ERR_INVALID set naming the argument): a negative
 * step, warmup or total, an lr_max or lr_min that is negative, NaN or
 * infinite. */
AG_API double ag_lr_cosine(int64_t step, int64_t warmup, int64_t total, double lr_max, double lr_min);

/* ---- learning-rate schedules ----
 *
 * A schedule is a plain value (no allocation, nothing to free) made by one
 * of the ag_schedule_* constructors below and optionally wrapped in a
 * linear warmup; ag_schedule_lr gives its learning rate at a 0-based step,
 * a pure function of the step (resuming needs only the step count). The
 * values follow torch.optim.lr_scheduler's closed forms; apply one with
 * ag_optimizer_set_lr(o, ag_schedule_lr(&s, step)) before each step. */
typedef enum ag_schedule_kind {
  AG_SCHED_CONSTANT = 0,   /* lr */
  AG_SCHED_STEP,           /* StepLR: lr * gamma^floor(step / step_size) */
  AG_SCHED_MULTISTEP,      /* MultiStepLR: lr * gamma^(milestones <= step) */
  AG_SCHED_LINEAR,         /* LinearLR: lr * (start + (end - start) * min(step, total) / total) */
  AG_SCHED_COSINE,         /* CosineAnnealingLR to lr_min at total, lr_min after */
  AG_SCHED_COSINE_RESTARTS, /* CosineAnnealingWarmRestarts: periods period, period*mult, ... */
  AG_SCHED_ONE_CYCLE       /* OneCycleLR, cosine annealing, two phases */
} ag_schedule_kind;

#define AG_SCHEDULE_MAX_MILESTONES 16

typedef struct ag_schedule {
  ag_schedule_kind kind;
  double lr;             /* base lr (one-cycle: the peak, max_lr) */
  double lr_min;         /* cosine, cosine restarts: eta_min */
  double gamma;          /* step, multistep */
  double start_factor, end_factor; /* linear */
  double pct_start, div_factor, final_div_factor; /* one-cycle */
  int64_t step_size;     /* step */
  int64_t total;         /* linear, cosine (T_max), one-cycle (total_steps) */
  int64_t period, period_mult; /* cosine restarts: T_0, T_mult */
  int n_milestones;      /* multistep: increasing milestones */
  int64_t milestones[AG_SCHEDULE_MAX_MILESTONES];
  int64_t warmup;        /* ag_schedule_with_warmup: steps (0: none) */
  double warmup_start_factor;
} ag_schedule;

/* Constructors: fill and return the value; they check nothing
 * (ag_schedule_lr does). milestones is copied (at most
 * AG_SCHEDULE_MAX_MILESTONES). */
AG_API ag_schedule ag_schedule_constant(double lr);
AG_API ag_schedule ag_schedule_step(double lr, int64_t step_size, double gamma);
AG_API ag_schedule ag_schedule_multistep(double lr, int n_milestones, const int64_t *milestones, double gamma);
AG_API ag_schedule ag_schedule_linear(double lr, double start_factor, double end_factor, int64_t total);
AG_API ag_schedule ag_schedule_cosine(double lr, double lr_min, int64_t total);
AG_API ag_schedule ag_schedule_cosine_restarts(double lr, double lr_min, int64_t period, int64_t period_mult);
/* torch.optim.lr_scheduler.OneCycleLR(max_lr, total_steps, pct_start,
 * anneal_strategy='cos', div_factor, final_div_factor, three_phase=False);
 * torch's defaults are 0.3, 25, 1e4. After total steps: the final lr. */
AG_API ag_schedule ag_schedule_one_cycle(double max_lr, int64_t total, double pct_start, double div_factor,
                                         double final_div_factor);
/* s preceded by `warmup` steps of linear warmup from start_factor times
 * s's first lr up to it (torch SequentialLR of LinearLR(start_factor, 1,
 * warmup) then s, milestone warmup): step < warmup gives
 * lr0 * (start_factor + (1 - start_factor) * step / warmup), step >= warmup
 * gives s at step - warmup. */
AG_API ag_schedule ag_schedule_with_warmup(ag_schedule s, int64_t warmup, double start_factor);
/* The learning rate at `step` (>= 0), in O(log step) time for every kind
 * (cosine restarts finds its period by multiplying, or by a remainder for
 * period_mult 1). Errors (NAN returned, AG_ERR_INVALID set naming the
 * field): NULL s, a negative step, an unknown kind, a negative or
 * non-finite lr/lr_min/gamma/factor, step_size, total or period < 1 where
 * the kind needs them, period_mult < 1, negative milestones, milestones
 * not increasing or more than AG_SCHEDULE_MAX_MILESTONES, pct_start
 * outside (0, 1), div factors <= 0, a negative warmup or a warmup
 * start_factor outside [0, 1], and a rate that is not finite where the
 * arguments overflow it (gamma^k, lr / div_factor). */
AG_API double ag_schedule_lr(const ag_schedule *s, int64_t step);

#ifdef __cplusplus
}
#endif
#endif
