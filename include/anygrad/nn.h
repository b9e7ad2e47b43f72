/* Neural-network building blocks as plain C structs: parameter lists,
 * Linear, Embedding, LayerNorm, Dropout, activations, an MLP, a causal
 * self-attention block and a small GPT. Parameters are leaf tensors with
 * requires_grad, counted as AG_MEM_PARAMETERS, initialised from a seeded
 * generator so every backend starts from the same weights.
 *
 * Ownership: a module owns its parameter tensors (references outside any
 * scope) until its *_free. Forward functions return new tensors (tensor.h
 * rules) and record autograd nodes when grad mode is on.
 *
 * Every module below has the same four calls:
 *   <m>_init     fills the caller's struct (no allocation of the struct
 *                itself). Errors: AG_ERR_INVALID for a NULL module,
 *                AG_ERR_SHAPE for a size < 1 (and the module's own shape
 *                rules), the tensor creation errors (AG_ERR_DTYPE,
 *                AG_ERR_DEVICE, AG_ERR_UNAVAILABLE, AG_ERR_OOM). On error
 *                the struct holds nothing.
 *   <m>_forward  returns a new tensor owned by the caller (or the open
 *                scope), or NULL with the error set: AG_ERR_INVALID for a
 *                NULL module, a NULL input propagated (its message kept),
 *                and the errors of the ops it runs (AG_ERR_SHAPE for an
 *                input that does not fit the module, AG_ERR_DEVICE, ...).
 *   <m>_params   appends the module's parameters to l as
 *                "<prefix><name>" (prefix NULL: ""); l retains each, the
 *                module keeps its own references. m must not be NULL.
 *                Errors: AG_ERR_INVALID (NULL l), AG_ERR_OOM; entries added
 *                before an error stay in l.
 *   <m>_free     releases the parameters and zeroes the struct; NULL is
 *                ignored. */
#ifndef ANYGRAD_NN_H
#define ANYGRAD_NN_H

#include <stdbool.h>
#include <stdint.h>

#include "anygrad/ops.h"
#include "anygrad/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- parameter lists ---- */

/* A named list of tensors; holds one reference per entry. Zero-initialise
 * ({0}) before use. */
typedef struct ag_param_list {
  int count, cap;
  ag_tensor **tensors;
  char **names;
} ag_param_list;

/* Append t under name (copied); retains t. Errors: AG_ERR_INVALID (NULL),
 * AG_ERR_OOM. */
AG_API ag_status ag_params_add(ag_param_list *l, const char *name, ag_tensor *t);
/* Append every entry of src with prefix prepended to its name (prefix NULL:
 * ""); l retains each tensor. Errors: AG_ERR_INVALID (NULL l or src),
 * AG_ERR_OOM; entries added before an error stay in l. */
AG_API ag_status ag_params_extend(ag_param_list *l, const char *prefix, const ag_param_list *src);
/* Release every entry and the list's memory; the list is empty afterwards. */
AG_API void ag_params_free(ag_param_list *l);
/* Entry by name, borrowed, or NULL. */
AG_API ag_tensor *ag_params_find(const ag_param_list *l, const char *name);
/* Total number of elements. */
AG_API int64_t ag_params_numel(const ag_param_list *l);
/* Drop the gradient of every entry (set to none). */
AG_API void ag_params_zero_grad(const ag_param_list *l);

/* ---- layers ---- */

typedef struct ag_linear {
  ag_tensor *weight; /* [out, in], U(-1/sqrt(in), 1/sqrt(in)) as torch.nn.Linear */
  ag_tensor *bias;   /* [out] or NULL */
  int64_t in, out;
} ag_linear;

/* g NULL: the default generator. Errors: AG_ERR_SHAPE for sizes < 1, tensor
 * creation errors. On error m holds nothing. */
AG_API ag_status ag_linear_init(ag_linear *m, ag_device d, ag_dtype dt, int64_t in, int64_t out,
                                bool bias, ag_generator *g);
/* y = x @ weight^T + bias for x [..., in] -> [..., out]; a new tensor, or
 * NULL (module conventions above). */
AG_API ag_tensor *ag_linear_forward(const ag_linear *m, ag_tensor *x);
/* "<prefix>weight", "<prefix>bias" (without a bias: weight only). */
AG_API ag_status ag_linear_params(const ag_linear *m, const char *prefix, ag_param_list *l);
AG_API void ag_linear_free(ag_linear *m);

typedef struct ag_embedding_layer {
  ag_tensor *weight; /* [num, dim], N(0, 1) as torch.nn.Embedding */
  int64_t num, dim;
} ag_embedding_layer;

/* num rows of dim; g NULL: the default generator. Module conventions
 * above (init, forward, params, free). */
AG_API ag_status ag_embedding_init(ag_embedding_layer *m, ag_device d, ag_dtype dt, int64_t num,
                                   int64_t dim, ag_generator *g);
/* Rows of weight for i64 or i32 indices of any shape -> [..., dim]; a new
 * tensor, or NULL (ag_embedding's errors: AG_ERR_INDEX for an index
 * outside [0, num), ...). */
AG_API ag_tensor *ag_embedding_forward(const ag_embedding_layer *m, ag_tensor *indices);
/* "<prefix>weight". */
AG_API ag_status ag_embedding_params(const ag_embedding_layer *m, const char *prefix, ag_param_list *l);
AG_API void ag_embedding_free(ag_embedding_layer *m);

typedef struct ag_layer_norm_layer {
  ag_tensor *weight, *bias; /* [dim]: ones, zeros */
  int64_t dim;
  double eps;
} ag_layer_norm_layer;

/* Normalises the last dim (dim wide) with eps. Module conventions above;
 * AG_ERR_INVALID for an eps that is negative, NaN or infinite. */
AG_API ag_status ag_layer_norm_init(ag_layer_norm_layer *m, ag_device d, ag_dtype dt, int64_t dim,
                                    double eps);
/* x [..., dim] -> [..., dim]; a new tensor, or NULL (ag_layer_norm's
 * errors). */
AG_API ag_tensor *ag_layer_norm_forward(const ag_layer_norm_layer *m, ag_tensor *x);
/* "<prefix>weight", "<prefix>bias". */
AG_API ag_status ag_layer_norm_params(const ag_layer_norm_layer *m, const char *prefix,
                                      ag_param_list *l);
AG_API void ag_layer_norm_free(ag_layer_norm_layer *m);

typedef struct ag_group_norm_layer {
  ag_tensor *weight, *bias; /* [channels]: ones, zeros; NULL without affine */
  int64_t groups, channels;
  double eps;
} ag_group_norm_layer;

/* torch.nn.GroupNorm(groups, channels, eps, affine). Module conventions
 * above; AG_ERR_SHAPE for groups or channels < 1 or groups not dividing
 * channels, AG_ERR_INVALID for an eps that is negative, NaN or infinite. */
AG_API ag_status ag_group_norm_init(ag_group_norm_layer *m, ag_device d, ag_dtype dt, int64_t groups,
                                    int64_t channels, double eps, bool affine);
/* x [N, channels, *] -> same shape; a new tensor, or NULL (ag_group_norm's
 * errors). */
AG_API ag_tensor *ag_group_norm_forward(const ag_group_norm_layer *m, ag_tensor *x);
/* "<prefix>weight", "<prefix>bias" (nothing without affine). */
AG_API ag_status ag_group_norm_params(const ag_group_norm_layer *m, const char *prefix, ag_param_list *l);
AG_API void ag_group_norm_free(ag_group_norm_layer *m);

typedef enum ag_activation {
  AG_ACT_NONE = 0, AG_ACT_RELU, AG_ACT_GELU, AG_ACT_TANH, AG_ACT_SILU, AG_ACT_SIGMOID
} ag_activation;

/* f(x), a new tensor owned by the caller or the open scope (AG_ACT_NONE: a
 * new view of x). NULL x gives NULL (AG_ERR_INVALID unless an error is
 * pending); other errors are the op's (AG_ERR_DTYPE for integer x). */
AG_API ag_tensor *ag_activation_forward(ag_activation act, ag_tensor *x);
/* Dropout: identity (a new view of x) when !train or p == 0; else
 * ag_dropout's result. Either is a new tensor owned by the caller or the
 * open scope. NULL x gives NULL (AG_ERR_INVALID unless an error is
 * pending); other errors are ag_dropout's. */
AG_API ag_tensor *ag_dropout_forward(double p, ag_tensor *x, bool train, ag_generator *g);

/* ---- vision layers (NCHW) ---- */

typedef struct ag_conv2d_layer {
  ag_tensor *weight; /* [out, in/groups, kh, kw], U(-1/sqrt(fan_in), +) as torch.nn.Conv2d */
  ag_tensor *bias;   /* [out] or NULL */
  ag_conv2d_params p;
  int64_t in, out;
} ag_conv2d_layer;

/* p NULL: AG_CONV2D_DEFAULT. Errors: AG_ERR_SHAPE (sizes < 1, channels not
 * divisible by groups), tensor creation errors. On error m holds nothing. */
AG_API ag_status ag_conv2d_layer_init(ag_conv2d_layer *m, ag_device d, ag_dtype dt, int64_t in,
                                      int64_t out, int kh, int kw, const ag_conv2d_params *p, bool bias,
                                      ag_generator *g);
/* x [N, in, H, W] -> [N, out, H', W']; a new tensor, or NULL (ag_conv2d's
 * errors; module conventions above). */
AG_API ag_tensor *ag_conv2d_layer_forward(const ag_conv2d_layer *m, ag_tensor *x);
/* "<prefix>weight", "<prefix>bias" (without a bias: weight only). */
AG_API ag_status ag_conv2d_layer_params(const ag_conv2d_layer *m, const char *prefix, ag_param_list *l);
AG_API void ag_conv2d_layer_free(ag_conv2d_layer *m);

/* torch.nn.BatchNorm2d: weight ones, bias zeros (parameters); running_mean
 * zeros and running_var ones are buffers: no gradient, updated by training
 * forwards, listed by ag_batch_norm2d_buffers so checkpoints save them. */
typedef struct ag_batch_norm2d {
  ag_tensor *weight, *bias, *running_mean, *running_var; /* [channels] */
  int64_t channels;
  double momentum, eps; /* PyTorch's defaults: 0.1, 1e-5 */
} ag_batch_norm2d;

/* Module conventions above; momentum and eps as PyTorch's (0.1, 1e-5).
 * AG_ERR_INVALID for momentum outside [0, 1] or an eps that is not finite
 * and > 0. */
AG_API ag_status ag_batch_norm2d_init(ag_batch_norm2d *m, ag_device d, ag_dtype dt, int64_t channels,
                                      double momentum, double eps);
/* train: batch statistics (and running-stat update); else the running stats.
 * x [N, channels, H, W]; a new tensor, or NULL (ag_batch_norm2d's errors;
 * module conventions above). */
AG_API ag_tensor *ag_batch_norm2d_forward(const ag_batch_norm2d *m, ag_tensor *x, bool train);
/* "<prefix>weight", "<prefix>bias" (module conventions above). */
AG_API ag_status ag_batch_norm2d_params(const ag_batch_norm2d *m, const char *prefix, ag_param_list *l);
/* "<prefix>running_mean", "<prefix>running_var", appended and retained as
 * _params does (same errors). */
AG_API ag_status ag_batch_norm2d_buffers(const ag_batch_norm2d *m, const char *prefix, ag_param_list *l);
AG_API void ag_batch_norm2d_free(ag_batch_norm2d *m);

/* ---- a multi-layer perceptron: Linear, act, ..., Linear ---- */

typedef struct ag_mlp {
  int n_layers;
  ag_linear *layers;
  ag_activation act;
  ag_param_list params; /* "0.weight", "0.bias", ... as torch.nn.Sequential */
} ag_mlp;

/* sizes[0] inputs, sizes[n_sizes-1] outputs; n_sizes >= 2. Layer i is
 * registered as "<2i>.weight"/"<2i>.bias" (torch.nn.Sequential numbering
 * with an activation between linears). Errors: AG_ERR_INVALID for NULL m or
 * sizes or n_sizes < 2, and the module conventions above. */
AG_API ag_status ag_mlp_init(ag_mlp *m, ag_device d, ag_dtype dt, int n_sizes, const int64_t *sizes,
                             ag_activation act, ag_generator *g);
/* x [..., sizes[0]] -> [..., sizes[n_sizes-1]]; a new tensor, or NULL
 * (module conventions above). */
AG_API ag_tensor *ag_mlp_forward(const ag_mlp *m, ag_tensor *x);
AG_API void ag_mlp_free(ag_mlp *m);

/* ---- causal self-attention and a small GPT ---- */

typedef struct ag_causal_attention {
  ag_linear qkv, proj;
  int n_head;
  int64_t dim, max_len;
  double dropout;
  ag_tensor *mask; /* [max_len, max_len], 1 above the diagonal */
} ag_causal_attention;

/* dim split over n_head heads (AG_ERR_SHAPE unless dim % n_head == 0),
 * sequences up to max_len, dropout on the attention weights. Module
 * conventions above. */
AG_API ag_status ag_causal_attention_init(ag_causal_attention *m, ag_device d, ag_dtype dt,
                                          int64_t dim, int n_head, int64_t max_len, double dropout,
                                          ag_generator *g);
/* x [B, T, dim] with T <= max_len -> [B, T, dim]; a new tensor, or NULL
 * (AG_ERR_SHAPE for another shape; module conventions above). */
AG_API ag_tensor *ag_causal_attention_forward(const ag_causal_attention *m, ag_tensor *x, bool train,
                                              ag_generator *g);
/* "<prefix>qkv.weight", "<prefix>qkv.bias", "<prefix>proj.weight",
 * "<prefix>proj.bias" (module conventions above). */
AG_API ag_status ag_causal_attention_params(const ag_causal_attention *m, const char *prefix,
                                            ag_param_list *l);
AG_API void ag_causal_attention_free(ag_causal_attention *m);

typedef struct ag_gpt_config {
  int64_t vocab_size, block_size, n_layer, n_embd;
  int n_head;
  double dropout;
  bool checkpoint; /* activation checkpointing (ag_checkpoint) of each
                      block's attention and MLP halves: each keeps only its
                      input for backward and is re-run there; same
                      gradients, less activation memory */
  bool untied_head; /* false (the default, as GPT-2): the output head's
                       weight IS the token embedding wte.weight [vocab,
                       n_embd], one tensor whose gradient sums both uses,
                       listed once in params ("wte.weight", no
                       "head.weight"); true: a separate "head.weight" */
} ag_gpt_config;

typedef struct ag_gpt_block {
  ag_layer_norm_layer ln1, ln2;
  ag_causal_attention attn;
  ag_linear fc, proj;
} ag_gpt_block;

typedef struct ag_gpt {
  ag_gpt_config cfg;
  ag_embedding_layer wte, wpe;
  ag_gpt_block *blocks;
  ag_layer_norm_layer ln_f;
  ag_linear head;
  ag_tensor *pos; /* i32 [block_size]: 0, 1, ... */
  ag_param_list params;
} ag_gpt;

/* GPT-2 style init: N(0, 0.02), residual projections scaled by
 * 1/sqrt(2*n_layer), zero biases; the head has no bias. With a tied head
 * (cfg.untied_head false) m->head.weight is a second reference to
 * m->wte.weight. Checkpoints of m->params follow the tying: a tied model's
 * file has no "head.weight", so loading it into an untied model fails
 * naming the missing tensor (ag_safetensors_load_into), and a file with
 * "head.weight" loaded into a tied model would drop that tensor: check with
 * ag_gpt_check_tying first. Errors: AG_ERR_SHAPE when n_embd is not a
 * multiple of n_head or a size is < 1. */
AG_API ag_status ag_gpt_init(ag_gpt *m, const ag_gpt_config *cfg, ag_device d, ag_dtype dt,
                             ag_generator *g);
/* idx i32 [B, T], T <= block_size -> logits [B, T, vocab_size]. With
 * cfg.checkpoint, training forwards checkpoint every block (m and g must
 * stay valid until the backward). A new tensor, or NULL (AG_ERR_SHAPE for
 * another shape; module conventions above). */
AG_API ag_tensor *ag_gpt_forward(const ag_gpt *m, ag_tensor *idx, bool train, ag_generator *g);
/* Whether tensor names `names[0..n)` (a checkpoint's, as
 * ag_safetensors_name lists them) match m's tying: a tied m refuses a
 * "<prefix>head.weight", an untied m needs one. AG_OK, or AG_ERR_CORRUPT
 * saying which way the checkpoint and the model differ and that
 * cfg.untied_head selects the other. prefix NULL: "". */
AG_API ag_status ag_gpt_check_tying(const ag_gpt *m, int n, const char *const *names, const char *prefix);
AG_API void ag_gpt_free(ag_gpt *m);

/* ---- initialisers (torch.nn.init) ----
 *
 * Each fills an existing floating-point tensor t in place (t may be a
 * parameter that requires grad: the write is not recorded by autograd and
 * bumps t's version). g NULL: the default generator. The draws are Philox
 * (ag_rand / ag_randn on t's device), so a seed gives the same uniform
 * values on every backend; normal values agree up to the rounding of
 * log/cos (a few ulp, tensor.h). Errors: AG_ERR_INVALID (NULL t, a bad
 * bound, std or gain), AG_ERR_DTYPE (t not floating point), AG_ERR_SHAPE
 * (the fan-based ones need rank >= 2 and elements), and the errors of
 * ag_rand / ag_copy_. On error t may be unchanged or partly written. */
typedef enum ag_fan_mode { AG_FAN_IN = 1, AG_FAN_OUT = 2 } ag_fan_mode;
/* Extra ag_init_gain activations beyond ag_activation. */
enum { AG_INIT_LEAKY_RELU = 100, AG_INIT_SELU = 101 };

/* fan_in = shape[1] * receptive field, fan_out = shape[0] * receptive
 * field (the product of dims 2..). Errors: AG_ERR_INVALID (NULL),
 * AG_ERR_SHAPE (rank < 2). */
AG_API ag_status ag_init_fans(const ag_tensor *t, int64_t *fan_in, int64_t *fan_out);
/* torch.nn.init.calculate_gain: 1 (none, sigmoid), 5/3 (tanh), sqrt(2)
 * (relu), sqrt(2 / (1 + slope^2)) (AG_INIT_LEAKY_RELU), 3/4
 * (AG_INIT_SELU). NAN with AG_ERR_INVALID for gelu, silu or an unknown
 * value (no recommended gain). */
AG_API double ag_init_gain(ag_activation act, double negative_slope);
/* U(low, high). */
AG_API ag_status ag_init_uniform_(ag_tensor *t, double low, double high, ag_generator *g);
/* N(mean, std^2). */
AG_API ag_status ag_init_normal_(ag_tensor *t, double mean, double std, ag_generator *g);
/* std = gain * sqrt(2 / (fan_in + fan_out)); uniform bound sqrt(3) * std. */
AG_API ag_status ag_init_xavier_uniform_(ag_tensor *t, double gain, ag_generator *g);
AG_API ag_status ag_init_xavier_normal_(ag_tensor *t, double gain, ag_generator *g);
/* std = gain / sqrt(fan), fan by mode; uniform bound sqrt(3) * std. torch's
 * kaiming_uniform_(t, a, mode, 'leaky_relu') is gain
 * ag_init_gain(AG_INIT_LEAKY_RELU, a). */
AG_API ag_status ag_init_kaiming_uniform_(ag_tensor *t, double gain, ag_fan_mode mode, ag_generator *g);
AG_API ag_status ag_init_kaiming_normal_(ag_tensor *t, double gain, ag_fan_mode mode, ag_generator *g);
/* N(mean, std^2) truncated to [a, b] (absolute bounds, as
 * torch.nn.init.trunc_normal_): Philox uniforms from t's device through the
 * inverse normal CDF on the host in double, so every backend gets the same
 * values bit for bit. Reads the draws to the host: synchronises t's device
 * once. Errors as above, AG_ERR_INVALID for std <= 0, a >= b or bounds that
 * hold no probability mass, AG_ERR_OOM. */
AG_API ag_status ag_init_trunc_normal_(ag_tensor *t, double mean, double std, double a, double b,
                                       ag_generator *g);

/* ---- device-side metrics ----
 *
 * A metric keeps its running total in a 0-d tensor on its device: an update
 * queues a few kernels (argmax, compare, sum, add) on the device's current
 * stream and returns without waiting for the device or reading anything back
 * (no host sync, so it runs under AG_SYNC_DEBUG=error); the number of
 * samples is known from shapes and kept on the host. ag_metric_value reads
 * the total: one host sync. Updates run without recording autograd nodes
 * and release their intermediates (a scope of their own), whatever scope
 * the caller has open. A metric is used by one thread at a time.
 *
 * Ownership: the caller owns the metric (ag_metric_free); the metric keeps
 * no reference to the tensors given to an update. */
typedef struct ag_metric ag_metric;

/* Fraction of correct argmax predictions. NULL with the error set:
 * AG_ERR_OOM, the tensor creation errors for d (AG_ERR_DEVICE,
 * AG_ERR_UNAVAILABLE). */
AG_API ag_metric *ag_metric_accuracy(ag_device d);
/* Mean of every element given to ag_metric_mean_update (a running loss).
 * Sums in f32 (f64 once an f64 tensor is given). Errors as above. */
AG_API ag_metric *ag_metric_mean(ag_device d);
/* Accuracy: adds sum(argmax(logits, -1) == targets) and targets' element
 * count. logits floating point [..., C], targets integer class indices
 * (i64, i32 or u8) of logits' shape without the last dim, both on the
 * metric's device. Errors: AG_ERR_INVALID (NULL metric, a mean metric),
 * NULL/released tensors (tensor.h), AG_ERR_DEVICE (another device),
 * AG_ERR_DTYPE, AG_ERR_SHAPE (naming both shapes), the ops' errors. On
 * error the metric is unchanged. */
AG_API ag_status ag_metric_update(ag_metric *m, ag_tensor *logits, ag_tensor *targets);
/* Running mean: adds sum(values) and values' element count (any shape and
 * dtype; f16/bf16 and integers are summed in f32). Errors as
 * ag_metric_update (AG_ERR_INVALID for an accuracy metric). */
AG_API ag_status ag_metric_mean_update(ag_metric *m, ag_tensor *values);
/* The metric's value into *out: total / samples, NAN when no sample was
 * given since creation or the last reset. Synchronizes (one counted host
 * sync; AG_ERR_SYNC under AG_SYNC_DEBUG=error). Errors: AG_ERR_INVALID (NULL
 * m or out), ag_to_host's errors. */
AG_API ag_status ag_metric_value(ag_metric *m, double *out);
/* Samples given since creation or the last reset (host; no sync). 0 for
 * NULL. */
AG_API int64_t ag_metric_count(const ag_metric *m);
/* Back to no samples (a new zero total on the device; no sync). Errors:
 * AG_ERR_INVALID (NULL), the tensor creation errors (the metric is then
 * unchanged). */
AG_API ag_status ag_metric_reset(ag_metric *m);
/* Releases the metric and its total; NULL is ignored. */
AG_API void ag_metric_free(ag_metric *m);

/* ---- host shuffling ---- */

/* Fill idx[0..n) with a permutation of 0..n-1 that depends only on (seed,
 * epoch): Fisher-Yates over a splitmix64 stream, unbiased, the same on
 * every platform; one epoch per value of `epoch`. Host only, no tensors,
 * no global state (thread-safe). The caller owns idx. Errors:
 * AG_ERR_INVALID for n < 0 or a NULL idx with n > 0. */
AG_API ag_status ag_shuffle_indices(int64_t *idx, int64_t n, uint64_t seed, uint64_t epoch);

#ifdef __cplusplus
}
#endif
#endif
