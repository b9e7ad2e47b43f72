/* Mixed precision: autocast regions.
 * Inside a region (per thread, nestable) float ops follow a per-op policy:
 *   low precision (the region's f16 or bf16): matmul
 *   f32: softmax, log_softmax, layer_norm, sum, mean, exp, log, pow, rsqrt,
 *        cross_entropy, mse_loss
 *   widest input: add, sub, mul, div, maximum, minimum, where, concat
 *   (f16 with bf16 promotes to f32)
 *   everything else runs in its input's dtype.
 * Casts are ordinary differentiable ops, so gradients reach f32 parameters in
 * f32. The low-precision cast of a parameter (a leaf that requires grad) is
 * made once per outermost region and reused. docs/amp.md has the table. */
#ifndef ANYGRAD_AMP_H
#define ANYGRAD_AMP_H

#include <stdbool.h>

#include "anygrad/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Open a region computing in dt (AG_F16 or AG_BF16; AG_F32 opens a region
 * with autocast off, for f32 islands). Errors: AG_ERR_DTYPE for other dtypes,
 * AG_ERR_STATE beyond 16 nested regions. */
AG_API ag_status ag_autocast_begin(ag_dtype dt);
/* Close the innermost region; closing the outermost releases the cached
 * parameter casts. Errors: AG_ERR_STATE if none is open. */
AG_API ag_status ag_autocast_end(void);
/* Whether autocast is on for this thread, and its low-precision dtype. */
AG_API bool ag_autocast_enabled(void);
AG_API ag_dtype ag_autocast_dtype(void);

#ifdef __cplusplus
}
#endif
#endif
