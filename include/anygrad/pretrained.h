/* The Hugging Face layout of a Llama model and its tokenizer
 * (docs/export.md): a folder with config.json (a transformers LlamaConfig),
 * model.safetensors (ag_llama_save's names), generation_config.json and,
 * with a tokenizer, tokenizer.json (the `tokenizers` library's format for
 * anygrad's byte-level BPE: the same ids) and tokenizer_config.json. A
 * folder written here loads in transformers (AutoModelForCausalLM,
 * AutoTokenizer), and one written by transformers' save_pretrained of a
 * LlamaForCausalLM loads here.
 *
 * JSON is read by one small strict reader (core/hf/json.h) with size
 * limits: config files at most 1 MiB, tokenizer.json at most 256 MiB. */
#ifndef ANYGRAD_PRETRAINED_H
#define ANYGRAD_PRETRAINED_H

#include "anygrad/llama.h"
#include "anygrad/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Write m (and tok, unless NULL) to folder dir, created when missing (its
 * parent must exist). Every file is written to a temp file first; the
 * JSON files are renamed into place only after model.safetensors is
 * complete, so a failure before that leaves every existing file of dir as
 * it was. Without tok, existing tokenizer files of dir are left alone.
 * Errors: AG_ERR_INVALID (NULL m or dir, empty dir), AG_ERR_IO (dir is not
 * a folder or cannot be created or written; a target that is not a
 * regular file; the message names it), AG_ERR_UNSUPPORTED (tok has two ids
 * with the same bytes, which tokenizer.json cannot hold: the message names
 * them; tok's vocabulary larger than m's), AG_ERR_DTYPE (m not in f32, f16
 * or bf16), ag_llama_save's errors. */
AG_API ag_status ag_llama_save_pretrained(const ag_llama *m, const ag_bpe *tok, const char *dir);

/* Read dir/config.json into *cfg (zeroed first; checkpoint off). Reads
 * LlamaConfig's keys that decide the computation and ignores the others.
 * Errors (the message names the file and the key): AG_ERR_INVALID (NULL
 * argument), AG_ERR_IO (missing or unreadable, over 1 MiB), AG_ERR_CORRUPT
 * (not JSON, not an object, a required key missing - hidden_size,
 * intermediate_size, num_hidden_layers, num_attention_heads, vocab_size,
 * max_position_embeddings - or of the wrong type or out of range, a key
 * twice), AG_ERR_UNSUPPORTED (a model anygrad cannot represent: model_type
 * not "llama", hidden_act not "silu", attention_bias or mlp_bias true,
 * rope_scaling or rope_parameters with a rope_type other than "default",
 * head_dim other than hidden_size / num_attention_heads, pretraining_tp
 * other than 1, quantization_config, rms_norm_eps or rope_theta <= 0, a
 * torch_dtype or dtype other than float32, float16, bfloat16). */
AG_API ag_status ag_llama_read_config(const char *dir, ag_llama_config *cfg);

/* Build *m from dir on device d: ag_llama_read_config, then the weights of
 * dir/model.safetensors in their own dtype (that of
 * "model.embed_tokens.weight": F32, F16 or BF16), loaded as ag_llama_load.
 * With tok non-NULL, *tok is the tokenizer of dir/tokenizer.json
 * (ag_bpe_load_hf; owned by the caller) or NULL when the folder has none.
 * On error m holds nothing and *tok is NULL. Errors: those of
 * ag_llama_read_config, ag_llama_init, ag_llama_load and ag_bpe_load_hf,
 * AG_ERR_UNSUPPORTED (sharded weights: model.safetensors.index.json; a
 * tokenizer vocabulary larger than the model's vocab_size). */
AG_API ag_status ag_llama_load_pretrained(const char *dir, ag_device d, ag_llama *m, ag_bpe **tok);

/* Write bpe to path as a `tokenizers` tokenizer.json: a BPE model whose
 * vocabulary is anygrad's ids (bytes through GPT-2's byte-to-unicode map),
 * merges in rank order, a Split pre-tokenizer whose regular expression
 * cuts text into anygrad's chunks (tokenizer.h), ByteLevel without its own
 * regex, a ByteLevel decoder, no special tokens. Atomic (ag_output_open).
 * Errors: AG_ERR_INVALID (NULL), AG_ERR_UNSUPPORTED (two ids with the same
 * bytes), AG_ERR_IO. */
AG_API ag_status ag_bpe_save_hf(const ag_bpe *bpe, const char *path);

/* Read a tokenizer.json that holds an anygrad tokenizer (as
 * ag_bpe_save_hf writes it, whatever the key order and spacing). *out is
 * owned by the caller. Errors (*out = NULL; the message names the file and
 * the key): AG_ERR_INVALID (NULL), AG_ERR_IO (unreadable, over 256 MiB),
 * AG_ERR_CORRUPT (not JSON, a vocabulary or merge list that is not a BPE's:
 * ids not 0..n-1 once each, ids 0..255 not the single bytes, a merge whose
 * tokens are not in the vocabulary or whose result is not token 256 + i),
 * AG_ERR_UNSUPPORTED (another tokenizer: a model other than BPE, another
 * pre-tokenizer, a normalizer, added tokens, byte fallback, a subword
 * prefix or suffix, dropout). */
AG_API ag_status ag_bpe_load_hf(const char *path, ag_bpe **out);

#ifdef __cplusplus
}
#endif
#endif
