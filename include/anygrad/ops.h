/* Forward ops. Each returns a new tensor, owned by the caller or the open
 * scope (ownership as in tensor.h), or NULL with the error set; it runs
 * asynchronously on the current stream of its inputs' device, and records an
 * autograd node when grad mode is on and an input requires grad.
 *
 * Common errors: NULL input -> NULL (message of the first failure kept);
 * AG_ERR_DEVICE when inputs live on different devices ("ag_add: expected all
 * tensors on one device, got cuda:0 and cpu"); AG_ERR_SHAPE when shapes do not
 * broadcast; AG_ERR_DTYPE for dtypes the op does not take; AG_ERR_UNSUPPORTED
 * when the backend lacks the op for that dtype.
 *
 * dtypes: binary ops need equal dtypes (cast first). f16/bf16 compute in f32
 * and store in their own type. Integer tensors (i32, i64, u8, bool) take add,
 * sub, mul, neg, abs, maximum/minimum, scalar add/sub/mul with integral
 * scalars, sum/max/min/argmax reductions, comparisons, where, and casts;
 * arithmetic wraps around in the dtype's width (u8 and bool too: bool
 * results are stored as x != 0). Which backend has which dtype is what its
 * supports() says (docs/conformance.md). */
#ifndef ANYGRAD_OPS_H
#define ANYGRAD_OPS_H

#include "anygrad/optable.h"
#include "anygrad/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- elementwise, NumPy broadcasting ----
 * One function per entry of the op table (anygrad/optable.h: each entry's
 * name, formula, gradient, AMP policy, dtypes and the meaning of its
 * scalars), declared below from the table:
 *   binary ops:  ag_<name>(a, b), e.g. ag_add, ag_mul, ag_maximum, ag_atan2,
 *     ag_remainder (Python's sign rule); the comparisons ag_eq ag_ne ag_gt
 *     ag_ge ag_lt ag_le return AG_BOOL (0 or 1) as PyTorch does, the inputs
 *     sharing one dtype; NaN compares unequal to everything (ne is true).
 *     Before the bool dtype they returned the inputs' dtype: multiply by a
 *     mask after ag_cast(mask, dtype).
 *   unary ops:   ag_<name>(x), e.g. ag_exp, ag_gelu (tanh approximation),
 *     ag_gelu_erf (PyTorch's default), ag_round (halves to even)
 *   with scalars, in the table's order: e.g. ag_pow_scalar(x, exponent),
 *     ag_leaky_relu(x, negative_slope), ag_clamp(x, min, max),
 *     ag_softplus(x, beta, threshold) (PyTorch's defaults: 1, 20)
 * Ops without an integer rule in the table take floating dtypes only
 * (AG_ERR_DTYPE otherwise). */
#define AG_OPS_DECL_B(name) AG_API ag_tensor *ag_##name(ag_tensor *a, ag_tensor *b);
#define AG_OPS_DECL_BH(name)
#define AG_OPS_DECL_BINARY(ID, name, api, ...) AG_OPS_DECL_##api(name)
#define AG_OPS_DECL_A0(name) AG_API ag_tensor *ag_##name(ag_tensor *a);
#define AG_OPS_DECL_A1(name) AG_API ag_tensor *ag_##name(ag_tensor *a, double s0);
#define AG_OPS_DECL_A2(name) AG_API ag_tensor *ag_##name(ag_tensor *a, double s0, double s1);
#define AG_OPS_DECL_AH(name)
#define AG_OPS_DECL_UNARY(ID, name, api, ...) AG_OPS_DECL_##api(name)
AG_BINARY_OPS(AG_OPS_DECL_BINARY)
AG_UNARY_OPS(AG_OPS_DECL_UNARY)

/* Elementwise with a double scalar: a + s, a - s, s - a, a * s, a / s,
 * s / a. A new tensor owned by the caller or the open scope; errors as
 * above. The result's dtype follows PyTorch's promotion with a Python
 * scalar: a double with an integral value counts as an int, any other as a
 * float, and the scalar changes the dtype only when its category is higher
 * (bool < integer < floating): i32 * 2 is i32, i32 * 0.5 and i32 / 2 are
 * f32, bool + 1 is i64, f16 * 3.5 stays f16 (ag_result_type_scalar). An
 * integer result is computed in its dtype from the scalar as an exact
 * int64 and wraps, as tensor + tensor does and as torch gives: u8 1 + 300
 * is 45, i32 INT32_MAX + 1 is INT32_MIN, i64 stays exact past 2^53. An
 * integral scalar outside int64 with an integer result is AG_ERR_INVALID. */
AG_API ag_tensor *ag_add_scalar(ag_tensor *a, double s);
AG_API ag_tensor *ag_sub_scalar(ag_tensor *a, double s); /* a - s */
AG_API ag_tensor *ag_rsub_scalar(ag_tensor *a, double s); /* s - a */
AG_API ag_tensor *ag_mul_scalar(ag_tensor *a, double s);
AG_API ag_tensor *ag_div_scalar(ag_tensor *a, double s); /* a / s */
AG_API ag_tensor *ag_rdiv_scalar(ag_tensor *a, double s); /* s / a */

/* ---- type promotion (torch.result_type) ----
 * Binary ops, comparisons and ag_where take operands of different dtypes
 * and compute in their result type (the comparisons then give bool):
 * categories bool < integer (u8 < i32 < i64) < floating (f16, bf16 < f32 <
 * f64; f16 with bf16 is f32); the higher category wins, within one the
 * wider dtype; a 0-dim tensor against a dimensioned one counts only when
 * its category is higher (f16[3] + f32[] is f16, i32[3] + f32[] is f32).
 * The operand that changes dtype goes through ag_cast (one kernel; on the
 * tape, so gradients flow back in the operand's own dtype). */
AG_API ag_dtype ag_promote_types(ag_dtype a, ag_dtype b); /* torch.promote_types */
/* torch.result_type(a, b); NULL operands give the other's dtype. */
AG_API ag_dtype ag_result_type(const ag_tensor *a, const ag_tensor *b);
/* torch.result_type(a, s) for a Python scalar s (integral: int, else float). */
AG_API ag_dtype ag_result_type_scalar(const ag_tensor *a, double s);

/* out = cond != 0 ? a : b, all three broadcast together. cond is normally
 * bool (a comparison's result); any other dtype the device has is accepted
 * and read as cond != 0 (NaN is true). */
AG_API ag_tensor *ag_where(ag_tensor *cond, ag_tensor *a, ag_tensor *b);
/* out = mask != 0 ? value : a; mask as ag_where's cond (bool normally). */
AG_API ag_tensor *ag_masked_fill(ag_tensor *a, ag_tensor *mask, double value);

/* ---- reductions ----
 * Integer inputs: sum of i32 is i32, of i64 is i64, and of bool or u8 is
 * i64 (PyTorch); max/min keep the dtype; mean needs a floating type. 

 * dims: n_dims entries (negative count from the end); n_dims == 0 or dims
 * NULL reduces over all dims. keepdim keeps reduced dims with size 1.
 * Errors: AG_ERR_SHAPE for n_dims < 0 or > ndim, a dim out of range, or a
 * dim listed twice (also as d and d - ndim). */
AG_API ag_tensor *ag_sum(ag_tensor *a, int n_dims, const int *dims, bool keepdim);
AG_API ag_tensor *ag_mean(ag_tensor *a, int n_dims, const int *dims, bool keepdim);
AG_API ag_tensor *ag_max(ag_tensor *a, int n_dims, const int *dims, bool keepdim);
AG_API ag_tensor *ag_min(ag_tensor *a, int n_dims, const int *dims, bool keepdim);
/* Index (i64, as PyTorch) of the first maximum along dim. */
AG_API ag_tensor *ag_argmax(ag_tensor *a, int dim, bool keepdim);

/* ---- linear algebra ----
 * matmul follows torch.matmul: 1-D operands are promoted and the added dim
 * removed; batch dims broadcast. f16/bf16 accumulate in f32. */
AG_API ag_tensor *ag_matmul(ag_tensor *a, ag_tensor *b);

/* ---- normalisation and losses ---- */
AG_API ag_tensor *ag_softmax(ag_tensor *a, int dim);
AG_API ag_tensor *ag_log_softmax(ag_tensor *a, int dim);

/* How a loss reduces its per-element values, PyTorch's `reduction=`
 * ('mean', 'sum', 'none'). Every loss takes one; each is differentiable
 * (gradients checked against finite differences in tests/gradcheck.c). */
typedef enum ag_reduction {
  AG_REDUCTION_MEAN = 0, /* a scalar: the mean (cross-entropy: over non-ignored targets) */
  AG_REDUCTION_SUM = 1,  /* a scalar: the sum */
  AG_REDUCTION_NONE = 2, /* one value per element, in the shape PyTorch gives */
} ag_reduction;

/* torch.nn.functional.cross_entropy with class-index targets, PyTorch's
 * shapes: logits [N, C] with targets [N], logits [C] with a 0-d target, or
 * logits [N, C, d1, ..., dk] with targets [N, d1, ..., dk] (class dim 1,
 * e.g. per-pixel or per-token losses). targets are i64 (PyTorch's default)
 * or i32. Result of logits' dtype: a scalar, or targets' shape for
 * AG_REDUCTION_NONE. Targets equal to ignore_index contribute nothing (0
 * under none; the mean divides by the non-ignored count, NaN when all are
 * ignored, as torch). Returns a new tensor owned by the caller (or its
 * scope), or NULL: AG_ERR_SHAPE for other shapes, AG_ERR_DTYPE for
 * non-floating logits or other target dtypes, AG_ERR_INVALID for a bad
 * reduction, AG_ERR_DEVICE for mixed devices. A target outside [0, C) is
 * AG_ERR_INDEX, reported by the next host sync on asynchronous devices (see
 * docs). Differentiable in logits. */
AG_API ag_tensor *ag_cross_entropy(ag_tensor *logits, ag_tensor *targets,
                                   ag_reduction reduction, int32_t ignore_index);
/* Mean squared error over a and b broadcast together (PyTorch's rule: [4,1]
 * against [4] is [4,4], which PyTorch warns about); reduction none keeps the
 * broadcast shape, mean divides by its element count, sum adds. Returns a
 * new tensor owned by the caller (or its scope), or NULL: AG_ERR_SHAPE when
 * the shapes do not broadcast, AG_ERR_DTYPE for non-floating a, AG_ERR_DEVICE
 * for mixed devices; mixed dtypes promote as ag_sub. Differentiable in a
 * and b (the gradient of a broadcast operand is summed back to its shape). */
AG_API ag_tensor *ag_mse_loss(ag_tensor *a, ag_tensor *b, ag_reduction reduction);

/* Normalise over the last dim (size D). weight and bias are [D]; either may
 * be NULL (treated as ones / zeros). Statistics are computed in f32.
 * AG_ERR_INVALID for an eps that is negative, NaN or infinite (inf gave all
 * zeros); 0 is taken, as PyTorch takes it. */
AG_API ag_tensor *ag_layer_norm(ag_tensor *x, ag_tensor *weight, ag_tensor *bias,
                                double eps);

/* Variance (and its square root, the standard deviation) over dims (n_dims
 * == 0 or dims NULL: all), PyTorch's semantics: sum((x - mean)^2) / (N -
 * correction) with N the number of reduced elements (correction 1 is
 * Bessel's, 0 the population variance); N - correction <= 0 gives inf or
 * nan, as torch. Computed from the centred values in f32 (f64 for f64 x).
 * Returns a new tensor owned by the caller, or NULL (AG_ERR_DTYPE for a
 * non-floating x, AG_ERR_SHAPE for a dim out of range or repeated,
 * AG_ERR_INVALID for a non-finite correction). Differentiable. */
AG_API ag_tensor *ag_var(ag_tensor *x, int n_dims, const int *dims, double correction, bool keepdim);
AG_API ag_tensor *ag_std(ag_tensor *x, int n_dims, const int *dims, double correction, bool keepdim);

/* torch.logsumexp over one dim (negative counts from the end; a 0-d x
 * takes 0 or -1): log(sum(exp(x))) computed from the maximum m of each
 * line, m + log(sum(exp(x - m))), so large entries do not overflow; in f32
 * (f64 for f64 x; the CPU in double). A line of -inf gives -inf, one holding
 * +inf gives +inf, NaN propagates, an empty dim gives -inf. Returns a new
 * tensor owned by the caller (x's dtype, dim dropped unless keepdim), or
 * NULL: AG_ERR_INVALID (x NULL), AG_ERR_DTYPE (x not floating), AG_ERR_SHAPE
 * (dim out of range), AG_ERR_UNSUPPORTED (no kernel on x's backend).
 * Differentiable: the gradient is g * exp(x - result). Under autocast
 * it runs in f32 (and returns f32), as torch's. */
AG_API ag_tensor *ag_logsumexp(ag_tensor *x, int dim, bool keepdim);

/* torch.linalg.vector_norm for p = 1 (sum of |x|), 2 (sqrt of the sum of
 * squares, scaled by the line's largest |x| so it neither overflows nor
 * underflows) and INFINITY (the largest |x|) over dims (n_dims == 0 or dims
 * NULL: all, x taken as a vector; several dims are made contiguous first).
 * NaN propagates. In f32 (f64 for f64 x; the CPU in double). Returns a new
 * tensor owned by the caller (x's dtype), or NULL: AG_ERR_INVALID (x NULL,
 * p not 1, 2 or +inf), AG_ERR_DTYPE (x not floating), AG_ERR_SHAPE (a dim
 * out of range or repeated; the inf norm of an empty line, which has no
 * identity), AG_ERR_UNSUPPORTED (no kernel on x's backend).
 * Differentiable, with torch's gradients: p = 2 gives g * x / norm (0 where
 * the norm is 0), p = 1 gives g * sign(x), inf splits g evenly among the
 * entries whose |x| equals the norm (times their sign; a line holding NaN
 * gives 0 there, where torch gives NaN at the NaN entries). Under autocast
 * it runs in f32 (and returns f32), as torch's. */
AG_API ag_tensor *ag_norm(ag_tensor *x, double p, int n_dims, const int *dims, bool keepdim);

/* Inclusive prefix sums along dim (negative counts from the end; a 0-d
 * tensor takes dim 0 or -1), torch.cumsum for floating dtypes: summed in
 * order along dim in f32 (f64 for f64), so results repeat bit for bit.
 * Returns a new tensor owned by the caller, or NULL (AG_ERR_DTYPE for an
 * integer or bool x, AG_ERR_SHAPE for dim out of range). Differentiable:
 * the gradient is the reverse cumulative sum. */
AG_API ag_tensor *ag_cumsum(ag_tensor *x, int dim);

/* torch.gather: out[...][j][...] = x[...][index[...][j][...]][...] along
 * dim. index is i64 or i32 with as many dims as x and no larger than x in
 * the other dims; the result has index's shape and x's dtype (floating).
 * ag_index_select: the entries of x at the 1-d index along dim (result:
 * x's shape with dim of the index's length). An index outside [0, size of
 * dim) gives AG_ERR_INDEX at the next host sync (as ag_embedding; the
 * element reads 0). Both return a new tensor owned by the caller, or NULL
 * (AG_ERR_DTYPE, AG_ERR_SHAPE, AG_ERR_DEVICE). Differentiable in x: the
 * gradient is a scatter-add, summed in a fixed order on every backend. */
AG_API ag_tensor *ag_gather(ag_tensor *x, int dim, ag_tensor *index);
AG_API ag_tensor *ag_index_select(ag_tensor *x, int dim, ag_tensor *index);
/* torch's x[index] along dim with an index on the cpu, checked before
 * anything runs: index is a 1-d i64 or i32 tensor on the cpu (x on any
 * device is then refused by ag_index_select as AG_ERR_DEVICE), every value
 * in [-n, n) where n is x's size in dim, a negative one counting from the
 * end. AG_ERR_INDEX ("index 7 is out of bounds for dimension 0 with size
 * 4", the first value outside, in order) leaves nothing launched. Returns
 * ag_index_select's result (a new tensor owned by the caller, differentiable
 * in x), or NULL: AG_ERR_DEVICE for an index not on the cpu, AG_ERR_INVALID
 * for an index of another dtype or rank or a 0-d x, AG_ERR_SHAPE for a dim
 * out of range, and ag_index_select's errors. */
AG_API ag_tensor *ag_index_select_host(ag_tensor *x, int dim, ag_tensor *index);

/* torch.Tensor.scatter_add (out of place): a copy of self with src added
 * at the positions the index names along dim, out[...][index[...][k][...]]
 * [...] += src[...][k][...] for every position of index. index is i64 or
 * i32 with as many dims as self, no larger than src in any dim and than
 * self in the dims other than dim; src has self's dtype (floating) and
 * dims. ag_index_add, torch.index_add: out = self with alpha * source[k]
 * added at index[k] along dim, index 1-d (i64 or i32), source of self's
 * shape with dim of the index's length. Deterministic: each element sums
 * its contributions in order of k in f32 (f64 for f64), no float atomics.
 * An index outside [0, size of dim) is skipped and gives AG_ERR_INDEX at
 * the next host sync. Both return a new tensor owned by the caller, or
 * NULL (AG_ERR_INVALID for NULL, AG_ERR_DTYPE for a non-floating self, a
 * src of another dtype or a non-integer index, AG_ERR_SHAPE for dim out of
 * range or shapes that do not fit, AG_ERR_DEVICE for mixed devices).
 * Differentiable in self (the gradient passes through) and src (gather, or
 * index_select times alpha, of the gradient at the index). */
AG_API ag_tensor *ag_scatter_add(ag_tensor *self, int dim, ag_tensor *index, ag_tensor *src);
AG_API ag_tensor *ag_index_add(ag_tensor *self, int dim, ag_tensor *index, ag_tensor *source, double alpha);

/* The k largest (largest = true) or smallest entries of x along dim,
 * torch.topk(sorted=True): sorted, ties by lower index first, NaN above
 * every number. *out_values (x's dtype) and *out_indices (i64) have x's
 * shape with dim of size k; both are new tensors owned by the caller, set
 * only on AG_OK (else NULL). Errors: AG_ERR_INVALID (NULL out pointers, k
 * outside [0, size of dim]), AG_ERR_DTYPE (non-floating x), AG_ERR_SHAPE
 * (dim out of range). Forward only: the values are not recorded for
 * autograd (gather x at the indices for a differentiable selection). */
AG_API ag_status ag_topk(ag_tensor *x, int64_t k, int dim, bool largest, ag_tensor **out_values,
                         ag_tensor **out_indices);

/* x sorted along dim (negative counts from the end; a 0-d tensor takes dim
 * 0 or -1), torch.sort(stable=True): ascending, or descending when
 * `descending`; equal keys keep their order (-0 equals 0), NaN sorts above
 * every number (last ascending, first descending). *out_values (x's dtype)
 * and *out_indices (i64: the position along dim each value came from) have
 * x's shape; both are new tensors owned by the caller, set only on AG_OK
 * (else NULL); out_indices may be NULL when only the values are wanted.
 * Errors: AG_ERR_INVALID (NULL x or out_values), AG_ERR_DTYPE (non-floating
 * x), AG_ERR_SHAPE (dim out of range), AG_ERR_UNSUPPORTED (no kernel on the
 * backend). Differentiable in x through the values: the gradient is the
 * upstream gradient scattered back through the indices.
 * ag_argsort: the indices alone (a new i64 tensor owned by the caller, or
 * NULL with the same errors); not differentiable. */
AG_API ag_status ag_sort(ag_tensor *x, int dim, bool descending, ag_tensor **out_values,
                         ag_tensor **out_indices);
AG_API ag_tensor *ag_argsort(ag_tensor *x, int dim, bool descending);

/* Root-mean-square norm over the last dim (size D): x / sqrt(mean(x^2) +
 * eps) * weight. weight is [D] of x's dtype, or NULL (ones). Statistics in
 * f32 (f64 for f64 x). Returns a new tensor owned by the caller, or NULL
 * (AG_ERR_DTYPE for a non-floating or 0-d x, AG_ERR_SHAPE for a weight of
 * another shape or dtype, AG_ERR_DEVICE for mixed devices, AG_ERR_INVALID
 * for an eps that is negative, NaN or infinite, AG_ERR_UNSUPPORTED where the backend lacks the
 * kernel). Differentiable in x and weight. */
AG_API ag_tensor *ag_rms_norm(ag_tensor *x, ag_tensor *weight, double eps);

/* torch.nn.functional.group_norm: x [N, C, *] split into `groups` groups
 * of C/groups channels; each (sample, group) is normalised by its own mean
 * and biased variance over those channels and every position, then scaled
 * by weight[c] and shifted by bias[c] ([C] of x's dtype, or NULL: ones,
 * zeros). Statistics in f32 (f64 for f64 x). Returns a new tensor of x's
 * shape owned by the caller, or NULL: AG_ERR_INVALID for a NULL x, groups
 * < 1 or not dividing C, an eps that is negative, NaN or infinite;
 * AG_ERR_DTYPE for a non-floating x or one with fewer than 2 dims;
 * AG_ERR_SHAPE for a weight or bias of another shape or dtype;
 * AG_ERR_DEVICE for mixed devices; AG_ERR_UNSUPPORTED where the backend
 * lacks the kernel. Differentiable in x, weight and bias (the weight and
 * bias gradients summed in a fixed order: deterministic). */
AG_API ag_tensor *ag_group_norm(ag_tensor *x, int64_t groups, ag_tensor *weight, ag_tensor *bias, double eps);

/* Scaled dot-product attention, torch's F.scaled_dot_product_attention:
 *   out = dropout(softmax(q k^T * scale + mask + causal)) v
 * q [B, H, T, D], k [B, Hkv, S, D], v [B, Hkv, S, Dv]; result [B, H, T, Dv]
 * in q's dtype. Grouped-query attention: H % Hkv == 0 and q head h reads
 * k/v head h / (H / Hkv) (Hkv == H is plain multi-head attention). q, k, v
 * share one floating dtype (f32, f16, bf16; f64 where the backend has it)
 * and one device; any strides.
 *   mask: NULL, or an additive mask of q's dtype broadcastable to [B, H, T,
 *     S] (-inf blocks a key); it gets no gradient.
 *   causal: query i sees keys j <= i (torch's is_causal: the upper-left
 *     triangle when T != S).
 *   scale: multiplies the scores; 0 means 1/sqrt(D).
 *   dropout_p in [0, 1): drops attention probabilities with the Philox
 *     bits of g (NULL: the default generator) exactly as ag_dropout would
 *     drop the [B, H, T, S] probability tensor, so the fused and the unfused
 *     paths give the same result for the same generator state; 0 (or eval)
 *     draws nothing.
 * A row whose keys are all blocked gives 0 (the unfused path gives NaN).
 * Where the backend has the fused kernel (supports(AG_K_SDPA)) the op runs
 * in the flash-attention manner: memory kept for backward is q, k, v, the
 * output and one f32 log-sum-exp per query row, never a T x S matrix.
 * Elsewhere it runs the unfused composition (matmul, mask, softmax,
 * dropout, matmul), which keeps the T x S probabilities.
 * Returns a new tensor owned by the caller, or NULL: AG_ERR_SHAPE (not
 * 4-d, sizes that differ, H % Hkv != 0, a mask that does not broadcast),
 * AG_ERR_DTYPE (non-floating or mixed dtypes), AG_ERR_DEVICE,
 * AG_ERR_INVALID (dropout_p outside [0, 1), scale not finite).
 * Differentiable in q, k and v. */
AG_API ag_tensor *ag_scaled_dot_product_attention(ag_tensor *q, ag_tensor *k, ag_tensor *v, ag_tensor *mask,
                                                  bool causal, double scale, double dropout_p,
                                                  ag_generator *g);
/* The same result through the unfused composition always (the reference
 * the fused kernels are tested against). Arguments, ownership and errors
 * as ag_scaled_dot_product_attention. */
AG_API ag_tensor *ag_scaled_dot_product_attention_unfused(ag_tensor *q, ag_tensor *k, ag_tensor *v,
                                                          ag_tensor *mask, bool causal, double scale,
                                                          double dropout_p, ag_generator *g);

/* Rows of table [V, D] for i64 (PyTorch's default) or i32 indices of any
 * shape: result [..., D].
 * An index outside [0, V) is AG_ERR_INDEX (see ag_cross_entropy). */
AG_API ag_tensor *ag_embedding(ag_tensor *table, ag_tensor *indices);

/* torch.nn.functional.one_hot: index (i64, as torch, or i32) of any shape
 * -> i64 [..., num_classes], 1 at each index and 0 elsewhere. num_classes
 * < 0: the largest index + 1, which reads index's maximum to the host (a
 * synchronization, as in torch; AG_ERR_SHAPE for an empty index then). An
 * index outside [0, num_classes) is AG_ERR_INDEX at the next host sync
 * (as ag_embedding; its row reads 0), at once where no kernel runs
 * (num_classes 0 with indices, a negative largest index inferred). Returns a new tensor owned by the
 * caller, or NULL: AG_ERR_INVALID (index NULL), AG_ERR_DTYPE (index not
 * i64 or i32), AG_ERR_SHAPE (index with AG_MAX_DIMS dims),
 * AG_ERR_UNSUPPORTED (no kernel on index's backend). Not differentiable
 * (an integer result). */
AG_API ag_tensor *ag_one_hot(ag_tensor *index, int64_t num_classes);

/* Concatenate n tensors along dim; all other dims equal, one dtype, one device. */
AG_API ag_tensor *ag_concat(int n, ag_tensor *const *ts, int dim);

/* Zero each element with probability p and scale the rest by 1/(1-p), with
 * a mask drawn from g (NULL: default generator). train=false (or p = 0)
 * returns a view of a. Deterministic for a given generator state on every backend. */
AG_API ag_tensor *ag_dropout(ag_tensor *a, double p, bool train, ag_generator *g);

/* ---- vision (NCHW) ----
 * conv2d, pooling and batch norm run on every backend: the CPU (f32, f64),
 * CUDA, HIP and gpuemu (f32, f16, bf16 with f32 accumulation), OpenCL and
 * Vulkan (f32). A dtype a backend lacks is AG_ERR_UNSUPPORTED naming the op
 * and device (cast to f32 first); the table is in docs/vision.md. Inputs of
 * any strides; outputs contiguous. */

typedef struct ag_conv2d_params {
  int stride[2];   /* h, w; >= 1 */
  int padding[2];  /* zeros on each side; >= 0 */
  int dilation[2]; /* >= 1 */
  int groups;      /* >= 1, divides C and Co */
} ag_conv2d_params;
#define AG_CONV2D_DEFAULT {{1, 1}, {0, 0}, {1, 1}, 1}

/* torch.nn.functional.conv2d: x [N, C, H, W], weight [Co, C/groups, kh, kw],
 * bias [Co] or NULL; params NULL means AG_CONV2D_DEFAULT. Result [N, Co, Ho,
 * Wo], Ho = (H + 2*pad - dil*(kh-1) - 1)/stride + 1. Errors: AG_ERR_SHAPE
 * (not 4-D, channels or groups do not fit, kernel larger than the padded
 * input), AG_ERR_DTYPE (not floating, or dtypes differ), AG_ERR_INVALID
 * (stride/dilation < 1, padding < 0). */
AG_API ag_tensor *ag_conv2d(ag_tensor *x, ag_tensor *weight, ag_tensor *bias,
                            const ag_conv2d_params *params);

/* torch.nn.functional.conv1d: x [N, C, L], weight [Co, C/groups, k], bias
 * [Co] or NULL; result [N, Co, Lo], Lo = (L + 2*padding - dilation*(k-1) -
 * 1)/stride + 1. Composed in the core over ag_conv2d (x as [N, C, 1, L],
 * weight as [Co, C/groups, 1, k], through views), so it runs wherever
 * conv2d does, in its dtypes, and its gradient (x, weight, bias) is
 * conv2d's through the views. Returns a new tensor owned by the caller, or
 * NULL: AG_ERR_INVALID (x or weight NULL, stride or dilation < 1, padding
 * < 0, groups < 1), AG_ERR_SHAPE (x or weight not 3-D; channels, groups,
 * bias or kernel that do not fit, as ag_conv2d), AG_ERR_DTYPE (not
 * floating, or dtypes differ), AG_ERR_UNSUPPORTED (no conv2d kernel for the
 * dtype). Messages from the conv2d checks are prefixed "ag_conv1d". */
AG_API ag_tensor *ag_conv1d(ag_tensor *x, ag_tensor *weight, ag_tensor *bias, int stride, int padding,
                            int dilation, int groups);

typedef struct ag_pool2d_params {
  int kernel[2];          /* >= 1 */
  int stride[2];          /* 0: the kernel size (PyTorch's default) */
  int padding[2];         /* 0 <= padding <= kernel/2 */
  bool count_include_pad; /* avg only: padded zeros count in the divisor
                             (PyTorch's default is true) */
} ag_pool2d_params;

/* Max over each window of x [N, C, H, W] (padding never wins; NaN
 * propagates). The argmax is saved for the backward, which routes each
 * gradient to it. Errors as ag_conv2d, plus AG_ERR_INVALID for NULL params. */
AG_API ag_tensor *ag_max_pool2d(ag_tensor *x, const ag_pool2d_params *params);
/* Mean over each window (divisor per count_include_pad). */
AG_API ag_tensor *ag_avg_pool2d(ag_tensor *x, const ag_pool2d_params *params);
/* Mean over windows that tile x into out_h x out_w cells, as
 * torch.nn.AdaptiveAvgPool2d: cell i spans [floor(i*H/out_h),
 * ceil((i+1)*H/out_h)). out_h, out_w >= 1 (AG_ERR_INVALID). */
AG_API ag_tensor *ag_adaptive_avg_pool2d(ag_tensor *x, int64_t out_h, int64_t out_w);

/* How ag_pad fills: a constant, or the mirror image of x without repeating
 * the edge (torch's "reflect"). */
typedef enum ag_pad_mode { AG_PAD_CONSTANT, AG_PAD_REFLECT } ag_pad_mode;

/* torch.nn.functional.pad: pads (npads of them, even) hold (before, after)
 * amounts for the trailing dims of x, the last dim first: (left, right,
 * top, bottom, front, back, ...). AG_PAD_CONSTANT fills `value` and pads
 * any number of trailing dims (npads / 2 <= ndim); AG_PAD_REFLECT pads the
 * last one or two dims (npads 2 or 4), each amount below the size of its
 * dim, as torch requires. Amounts are >= 0 (no cropping). x of any strides,
 * floating. Returns a new contiguous tensor owned by the caller, or NULL:
 * AG_ERR_INVALID (NULL x, NULL pads with npads > 0, odd npads, a negative
 * amount, an unknown mode), AG_ERR_SHAPE (more pad pairs than dims, reflect
 * on more than two dims or an amount not below its dim's size), AG_ERR_DTYPE
 * (non-floating x), AG_ERR_UNSUPPORTED (no kernel on the backend).
 * Differentiable: the gradient takes the padded region back, summing every
 * reflected copy into its source element in a fixed order. */
AG_API ag_tensor *ag_pad(ag_tensor *x, const int64_t *pads, int npads, ag_pad_mode mode, double value);

/* torch.nn.functional.batch_norm over x [N, C, H, W] per channel.
 * running_mean/running_var [C] (both or neither; required when !training),
 * weight/bias [C] or NULL; all x's dtype and device. training: normalise by
 * the batch's statistics (biased variance) and, when running stats are
 * given, update them in place: r = (1 - momentum) r + momentum * batch (the
 * variance unbiased); those updates are not recorded by autograd. Eval:
 * normalise by the running stats. Differentiable in x, weight and bias.
 * Errors: AG_ERR_SHAPE, AG_ERR_DEVICE, AG_ERR_INVALID (eps negative, NaN or
 * infinite, momentum outside [0, 1], training with one value per channel). */
AG_API ag_tensor *ag_batch_norm(ag_tensor *x, ag_tensor *running_mean, ag_tensor *running_var,
                                ag_tensor *weight, ag_tensor *bias, bool training,
                                double momentum, double eps);

typedef enum ag_interp_mode {
  AG_INTERP_NEAREST = 0,  /* torch's "nearest" */
  AG_INTERP_BILINEAR = 1, /* torch's "bilinear" */
} ag_interp_mode;

/* torch.nn.functional.interpolate of a 4-D x [N, C, H, W] (any strides)
 * to [N, C, Ho, Wo]. Give either the size (out_h, out_w >= 1, scale_h =
 * scale_w = 0) or the scale factors (scale_h, scale_w > 0, out_h = out_w =
 * 0: Ho = floor(H * scale_h)), as torch's size and scale_factor. The source
 * index is torch's with recompute_scale_factor=None: a given scale factor
 * steps the source by 1/scale, a given size by H/Ho; nearest reads
 * min(floor(dst * step), H - 1) (in f32, and dst itself where Ho == H,
 * dst/2 where Ho == 2H, as torch's CPU kernel); bilinear reads the two
 * neighbours of (dst + 0.5) * step - 0.5 (clamped at 0) or, with
 * align_corners, of dst * (H - 1)/(Ho - 1) (corners on corners; the scale
 * factor then only sets the size). align_corners is an error for nearest,
 * as torch. Returns a new contiguous tensor owned by the caller, or NULL:
 * AG_ERR_INVALID for a NULL x, a bad mode, both or neither of size and
 * scale, a size < 1, a scale not finite or <= 0 or giving a size < 1 or
 * too large, align_corners with nearest; AG_ERR_SHAPE for a x that is not
 * 4-D; AG_ERR_DTYPE for a non-floating x; AG_ERR_UNSUPPORTED where the
 * backend lacks the kernel. Differentiable in x: each input element's
 * gradient sums the weighted gradients of the outputs that read it, in a
 * fixed order (deterministic, no atomics). */
AG_API ag_tensor *ag_interpolate(ag_tensor *x, int64_t out_h, int64_t out_w, double scale_h, double scale_w,
                                 ag_interp_mode mode, bool align_corners);

/* In-place arithmetic, torch's a.add_(b) (sub_, mul_, div_): self = self
 * op other, other broadcast to self's shape, the result cast to self's
 * dtype; one call doing ag_add (...) into a temporary and ag_copy_ into
 * self (self may be a view; the storage's version moves). Returns AG_OK,
 * or an error with nothing written: AG_ERR_INVALID while grad mode is on
 * and self or other requires grad (no in-place op is recorded: compute it
 * out of place, or write under ag_no_grad_begin()) and for ag_copy_'s
 * refusals, AG_ERR_DTYPE when the result's dtype cannot be cast to self's
 * (floating into integer, integer into bool), AG_ERR_SHAPE when the
 * broadcast shape is larger than self's, and the op's own errors. Both
 * tensors are borrowed. */
AG_API ag_status ag_add_(ag_tensor *self, ag_tensor *other);
AG_API ag_status ag_sub_(ag_tensor *self, ag_tensor *other);
AG_API ag_status ag_mul_(ag_tensor *self, ag_tensor *other);
AG_API ag_status ag_div_(ag_tensor *self, ag_tensor *other);

#ifdef __cplusplus
}
#endif
#endif
