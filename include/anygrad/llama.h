/* A Llama-style decoder: RMSNorm, rotary position embeddings (Hugging
 * Face's rotate_half convention), grouped-query causal attention through
 * ag_scaled_dot_product_attention, a SwiGLU MLP, no biases, tied or
 * untied embeddings, optional activation checkpointing. Parameters carry
 * Hugging Face's Llama names, so a checkpoint saved by ag_llama_save is a
 * LlamaForCausalLM state dict and HF Llama safetensors load with
 * ag_llama_load (docs/llama.md).
 *
 * Ownership and errors follow the module conventions of anygrad/nn.h: the
 * caller owns the ag_llama struct, the model owns its parameters until
 * ag_llama_free, forward returns a new tensor (or NULL with the error set). */
#ifndef ANYGRAD_LLAMA_H
#define ANYGRAD_LLAMA_H

#include <stdbool.h>
#include <stdint.h>

#include "anygrad/nn.h"
#include "anygrad/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Zero in a field selects the default named with it. */
typedef struct ag_llama_config {
  int64_t vocab_size;  /* required, >= 1 */
  int64_t dim;         /* hidden_size; required, a multiple of n_heads */
  int64_t n_layers;    /* required, >= 1 */
  int n_heads;         /* required, >= 1; head_dim = dim / n_heads, even */
  int n_kv_heads;      /* key/value heads, dividing n_heads; 0: n_heads */
  int64_t hidden_dim;  /* MLP width (intermediate_size); 0: 2/3 of 4*dim
                          rounded up to a multiple of multiple_of */
  int64_t multiple_of; /* 0: 256 */
  int64_t max_seq_len; /* longest sequence (rotary tables); required */
  double rope_theta;   /* rotary base; 0: 10000 */
  double norm_eps;     /* RMSNorm eps; 0: 1e-5 */
  bool untied_head;    /* false: lm_head is the embedding matrix (HF's
                          tie_word_embeddings, no "lm_head.weight" in params);
                          true: a separate "lm_head.weight" */
  bool checkpoint;     /* activation checkpointing (ag_checkpoint) of each
                          layer's attention and MLP halves in training
                          forwards: same gradients, less activation memory */
} ag_llama_config;

typedef struct ag_llama_layer {
  ag_tensor *input_layernorm, *post_attention_layernorm; /* [dim], ones */
  ag_linear q_proj, k_proj, v_proj, o_proj;              /* no biases */
  ag_linear gate_proj, up_proj, down_proj;
} ag_llama_layer;

typedef struct ag_llama {
  ag_llama_config cfg; /* with the defaults filled in */
  int64_t head_dim;
  ag_embedding_layer embed_tokens;
  ag_llama_layer *layers;
  ag_tensor *norm;    /* [dim], ones */
  ag_linear lm_head;  /* tied: a second reference to embed_tokens.weight */
  ag_tensor *rope_cos, *rope_sin; /* [max_seq_len, head_dim], model dtype */
  /* "model.embed_tokens.weight", "model.layers.N.self_attn.q_proj.weight",
   * ..., "model.norm.weight", "lm_head.weight" (untied only) */
  ag_param_list params;
} ag_llama;

/* MLP width that cfg selects (hidden_dim, or the rounded 8*dim/3). */
AG_API int64_t ag_llama_hidden_dim(const ag_llama_config *cfg);

/* Fill m from cfg on device d in dtype dt. Init as Hugging Face's
 * LlamaPreTrainedModel: linears and the embedding N(0, 0.02), norms ones;
 * drawn from g (NULL: the default generator) in a fixed order. The rotary
 * tables cos/sin(pos * theta^(-2i/head_dim)), i < head_dim/2, repeated over
 * both halves, are computed in double and rounded to dt. Errors:
 * AG_ERR_INVALID (NULL m or cfg), AG_ERR_SHAPE (a required size < 1, dim
 * not a multiple of n_heads, odd head_dim, n_heads not a multiple of
 * n_kv_heads, rope_theta <= 0), AG_ERR_INVALID (norm_eps negative, NaN or
 * infinite), tensor creation errors. On error m holds nothing. */
AG_API ag_status ag_llama_init(ag_llama *m, const ag_llama_config *cfg, ag_device d, ag_dtype dt,
                               ag_generator *g);

/* Token ids idx (i32 or i64) [B, T], T <= max_seq_len, at positions 0..T-1
 * -> logits [B, T, vocab_size] in the model dtype. train only selects
 * checkpointing (the model has no dropout); with cfg.checkpoint, a
 * recorded training forward needs m to stay valid until the backward. A
 * new tensor, or NULL: AG_ERR_INVALID (NULL m or idx), AG_ERR_SHAPE
 * (another shape), AG_ERR_INDEX for an id outside the vocabulary (at the
 * next host sync, as ag_embedding), the ops' errors. */
AG_API ag_tensor *ag_llama_forward(const ag_llama *m, ag_tensor *idx, bool train, ag_generator *g);

/* ---- generation with a key/value cache ----
 *
 * An inference forward that takes only the new tokens of each sequence and
 * keeps every layer's keys and values (after rotary) in a cache
 * preallocated to max_len positions: token t costs one position's work plus
 * attention over the t cached keys, so generating n tokens is linear in n
 * per layer-matmul instead of quadratic. The logits equal ag_llama_forward's
 * over the whole sequence up to rounding (the attention sums in another
 * order). */
typedef struct ag_llama_cache ag_llama_cache;

/* A cache for m: batch sequences of at most max_len positions (1 <= max_len
 * <= cfg.max_seq_len), on m's device and dtype, empty. Owned by the caller
 * (ag_llama_cache_free); it reads m's configuration only, so it serves any
 * model of the same shapes, but must not outlive the device. NULL on error:
 * AG_ERR_INVALID (NULL m), AG_ERR_SHAPE (batch < 1, max_len outside
 * 1..max_seq_len), tensor creation errors (AG_ERR_OOM). */
AG_API ag_llama_cache *ag_llama_cache_create(const ag_llama *m, int64_t batch, int64_t max_len);

/* Empty the cache (length 0) without freeing it; NULL is ignored. */
AG_API void ag_llama_cache_reset(ag_llama_cache *c);

/* Positions held (0 after create or reset; 0 for NULL). */
AG_API int64_t ag_llama_cache_length(const ag_llama_cache *c);

/* Release the cache; NULL is ignored. */
AG_API void ag_llama_cache_free(ag_llama_cache *c);

/* The next T tokens idx (i32 or i64) [B, T] of the cache's B sequences, at
 * positions len..len+T-1 where len = ag_llama_cache_length(c) (rotary
 * angles offset by len): appends their keys and values to c and returns the
 * logits [B, T, vocab_size] (a new tensor), each position attending to
 * itself and every earlier one. T > 1 fills a prompt in one call; T == 1 is
 * one generation step. Runs without recording (inference only; call it in
 * ag_inference_mode or no-grad for speed, it records nothing either way).
 * NULL on error, the cache unchanged: AG_ERR_INVALID (NULL m, c or idx),
 * AG_ERR_SHAPE (idx not [B, T >= 1] with the cache's B, or len + T beyond
 * the cache's max_len: the message gives both), AG_ERR_DEVICE (c made for
 * another device or dtype), AG_ERR_INDEX for an id outside the vocabulary
 * (at the next host sync), the ops' errors. */
AG_API ag_tensor *ag_llama_forward_cached(const ag_llama *m, ag_llama_cache *c, ag_tensor *idx);

/* Whether tensor names names[0..n) match m's tying: a tied m refuses a
 * "lm_head.weight", an untied m needs one. AG_OK, or AG_ERR_CORRUPT saying
 * which way they differ; AG_ERR_INVALID for NULL m or names (n > 0). */
AG_API ag_status ag_llama_check_tying(const ag_llama *m, int n, const char *const *names);

/* Write m->params to a safetensors file at path (HF names, metadata
 * "format": "pt"); atomic as ag_safetensors_save, whose errors it returns
 * (AG_ERR_INVALID for NULL m or path, AG_ERR_IO). */
AG_API ag_status ag_llama_save(const ag_llama *m, const char *path);

/* Load every parameter of m from a safetensors file with HF names. Besides
 * m's parameters the file may hold only HF's rotary buffers of m's layers
 * ("model.layers.N.self_attn.rotary_emb.inv_freq", ignored) and anygrad's
 * training state ("optim.*", "optimizer.*", ignored). Nothing is copied
 * unless all tensors are present with m's dtype and shapes. Errors:
 * AG_ERR_INVALID (NULL m or path), AG_ERR_IO, AG_ERR_CORRUPT (the file's
 * own problems, a missing tensor, a tensor m does not have such as a
 * deeper model's layers (naming it), a tying mismatch as
 * ag_llama_check_tying), AG_ERR_SHAPE / AG_ERR_DTYPE (a tensor of another
 * shape or dtype). */
AG_API ag_status ag_llama_load(ag_llama *m, const char *path);

/* Release the parameters and tables and zero the struct; NULL is ignored. */
AG_API void ag_llama_free(ag_llama *m);

#ifdef __cplusplus
}
#endif
#endif
