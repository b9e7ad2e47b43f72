/* Internal entry of the optimizers for data parallelism (core/dist/ddp.c). */
#ifndef ANYGRAD_OPTIM_INTERNAL_H
#define ANYGRAD_OPTIM_INTERNAL_H

#include "anygrad/optim.h"
#include "hidden.h"

/* ag_clip_grad_norm with the norm taken over the gradients of norm_params
 * (which may be params itself) and the coefficient applied to those of
 * params; reduce (may be NULL) runs on the f32 scalar sum of squares before
 * the square root, in place (a sharded run sums its ranks' shares there);
 * dev_hint (may be NULL) is the device of the result when both lists are
 * empty. */
AG_HIDDEN ag_tensor *ag__clip_grad_norm_ex(const ag_param_list *norm_params, const ag_param_list *params,
                                           double max_norm, ag_status (*reduce)(ag_tensor *sumsq, void *ctx),
                                           void *ctx, const ag_device *dev_hint);

#endif
