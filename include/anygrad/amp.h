/* Mixed precision: autocast regions.
 * Inside a region (per thread, nestable) float ops follow a per-op policy:
 *   low precision (the region's f16 or bf16): matmul
 *   f32: softmax, log_softmax, layer_norm, group_norm, sum, mean, cross_entropy,
 *        mse_loss, and the elementwise ops whose op-table entry says F32
 *        (optable.h's amp column: exp, log, pow_scalar, rsqrt, ...)
 *   widest input: the binary elementwise ops (add, sub, mul, div, maximum,
 *        minimum, atan2, remainder, comparisons), where, concat
 *   (f16 with bf16 promotes to f32)
 *   everything else runs in its input's dtype.
 * Casts are ordinary differentiable ops, so gradients reach f32 parameters in
 * f32. The low-precision cast of a parameter (a leaf that requires grad) is
 * made once per outermost region and reused. docs/amp.md has the table.
 *
 * Dynamic loss scaling (ag_grad_scaler, below) keeps f16 gradients in range
 * without a host sync per step; bf16 needs none. */
#ifndef ANYGRAD_AMP_H
#define ANYGRAD_AMP_H

#include <stdbool.h>

#include "anygrad/nn.h"
#include "anygrad/optim.h"
#include "anygrad/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Open a region computing in dt (AG_F16 or AG_BF16; AG_F32 opens a region
 * with autocast off, for f32 islands). Errors: AG_ERR_DTYPE for other dtypes,
 * AG_ERR_STATE beyond 16 nested regions. */
AG_API ag_status ag_autocast_begin(ag_dtype dt);
/* Close the innermost region; closing the outermost releases the cached
 * parameter casts. Errors: AG_ERR_STATE if none is open. A region opened
 * inside a scope and still open when the scope ends is closed by
 * ag_scope_end, which reports it (AG_ERR_STATE). */
AG_API ag_status ag_autocast_end(void);
/* Whether autocast is on for this thread, and its low-precision dtype. */
AG_API bool ag_autocast_enabled(void);
AG_API ag_dtype ag_autocast_dtype(void);

/* ---- dynamic loss scaling ----
 * A training step with f16 autocast:
 *   loss = ...forward in an autocast region...;
 *   ag_backward(ag_grad_scaler_scale(s, loss), NULL, false);
 *   ag_grad_scaler_unscale_(s, opt);   (optional: before clipping)
 *   ag_grad_scaler_step(s, opt);       (skips on the device on inf/nan)
 *   ag_grad_scaler_update(s);
 * The scale, the growth tracker, the found-inf flag and the skipped-step
 * count are f32 scalar tensors on the scaler's device; every call above is
 * asynchronous and performs no host sync. Only get_scale and skipped_steps
 * read them back (one counted sync each). Not thread-safe: one training
 * loop drives a scaler. */

typedef struct ag_grad_scaler ag_grad_scaler;

typedef struct ag_grad_scaler_options {
  double init_scale;       /* 65536 */
  double growth_factor;    /* 2: scale *= growth after growth_interval clean steps */
  double backoff_factor;   /* 0.5: scale *= backoff after a step with inf/nan */
  int64_t growth_interval; /* 2000 */
  bool enabled;            /* false: scale returns the loss, step is a plain
                              optimizer step, update does nothing (bf16, f32) */
} ag_grad_scaler_options;

/* PyTorch's GradScaler defaults, enabled. */
AG_API ag_grad_scaler_options ag_grad_scaler_defaults(void);

/* A scaler whose state lives on device d (opts NULL: defaults). Owned by the
 * caller: ag_grad_scaler_free. Errors (NULL returned): AG_ERR_INVALID for
 * init_scale <= 0, growth_factor <= 1, backoff_factor outside (0, 1) or
 * growth_interval outside [1, 2^24] (the tracker counts in f32); device
 * errors; AG_ERR_OOM. */
AG_API ag_grad_scaler *ag_grad_scaler_create(ag_device d, const ag_grad_scaler_options *opts);
/* NULL ignored. Does not synchronize. */
AG_API void ag_grad_scaler_free(ag_grad_scaler *s);

/* loss * scale as a differentiable f32 op (an f16/bf16 loss is cast to f32
 * first); a new reference (tensor.h ownership). Disabled: a new reference
 * to loss. Errors: AG_ERR_INVALID (NULL scaler), AG_ERR_DEVICE when loss is
 * not on the scaler's device, op errors. */
AG_API ag_tensor *ag_grad_scaler_scale(ag_grad_scaler *s, ag_tensor *loss);

/* Divide the gradients of the optimizer's parameters (or of params) by the
 * scale in place and record any inf/nan in the found-inf flag, on the
 * device. Call before anything that reads gradient values (clipping); at
 * most once per parameter between updates. Parameters without a gradient
 * are skipped. Errors: AG_ERR_STATE for a second unscale of a parameter or
 * an unscale after its step, AG_ERR_DEVICE for gradients off the scaler's
 * device, launch errors. Disabled: nothing happens. */
AG_API ag_status ag_grad_scaler_unscale_(ag_grad_scaler *s, ag_optimizer *opt);
AG_API ag_status ag_grad_scaler_unscale_params_(ag_grad_scaler *s, const ag_param_list *params);

/* Optimizer step that the device skips when the found-inf flag is set. If
 * unscale_ did not cover this optimizer, the non-finite check reads the
 * gradients here (without writing them) and the fused update divides by the
 * scale itself, leaving the gradients scaled. Errors: AG_ERR_STATE for a
 * second step of one optimizer between updates or a partial unscale of its
 * parameters, errors of ag_optimizer_step_amp. Disabled: ag_optimizer_step. */
AG_API ag_status ag_grad_scaler_step(ag_grad_scaler *s, ag_optimizer *opt);

/* Adjust the scale on the device: backoff and a tracker reset when the flag
 * is set (and the skipped count grows), growth after growth_interval clean
 * steps; clear the flag. Errors: AG_ERR_STATE when no unscale_ or step ran
 * since the last update, op errors. Disabled: AG_OK, nothing happens. */
AG_API ag_status ag_grad_scaler_update(ag_grad_scaler *s);

/* Current scale (1 when disabled) and the number of updates that found
 * inf/nan (steps skipped). Each reads a device value: one counted host
 * sync (AG_ERR_SYNC refusal under sync-debug error mode gives NAN / -1 with
 * the error set). */
AG_API double ag_grad_scaler_get_scale(ag_grad_scaler *s);
AG_API int64_t ag_grad_scaler_skipped_steps(ag_grad_scaler *s);

/* Append the state tensors ("<prefix>scale", "<prefix>growth_tracker",
 * "<prefix>skipped"; retained by l) for checkpoints: loading into them
 * restores the scaler. Disabled: nothing is appended. Errors: AG_ERR_INVALID,
 * AG_ERR_OOM. */
AG_API ag_status ag_grad_scaler_state(ag_grad_scaler *s, const char *prefix, ag_param_list *l);

#ifdef __cplusplus
}
#endif
#endif
