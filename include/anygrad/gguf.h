/* A Llama and its tokenizer as one GGUF file (version 3), the format
 * llama.cpp loads (docs/export.md, "GGUF"): the architecture's metadata,
 * anygrad's byte-level BPE as a "gpt2" vocabulary, and the weights under
 * llama.cpp's tensor names, with the rows of the query and key projections
 * permuted from Hugging Face's rotary layout (rotate_half, anygrad's) to
 * the interleaved pairs llama.cpp rotates, as its own converter does.
 * Written in F32, F16 or Q8_0 (blocks of 32 weights: an f16 scale and 32
 * int8, llama.cpp's rounding); the norms stay F32. */
#ifndef ANYGRAD_GGUF_H
#define ANYGRAD_GGUF_H

#include "anygrad/llama.h"
#include "anygrad/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The weight types of a GGUF export; the values are ggml's type numbers. */
typedef enum ag_gguf_type {
  AG_GGUF_F32 = 0,
  AG_GGUF_F16 = 1,
  AG_GGUF_Q8_0 = 8,
} ag_gguf_type;

/* "f32", "f16" or "q8_0" into *out. Errors: AG_ERR_INVALID (NULL, another
 * name: the message lists the three). */
AG_API ag_status ag_gguf_type_parse(const char *s, ag_gguf_type *out);

/* Write m with its tokenizer tok to path as a GGUF file of weight type
 * type. Two-dimensional weights are stored in type (under Q8_0, a matrix
 * whose rows are not a multiple of 32 long is stored as F16, as llama.cpp's
 * converter does); the norms are F32. A tokenizer smaller than m's
 * vocabulary is padded with unused tokens "[PADn]". m's weights are read to
 * the host one tensor at a time (a host sync); m and tok are not changed.
 * The file replaces path only when complete (ag_output_open): after any
 * failure an existing file keeps its content and no temp file is left.
 * Errors: AG_ERR_INVALID (NULL m, tok or path, empty path, a type other
 * than the three, a model without parameters), AG_ERR_DTYPE (m not in f32,
 * f16 or bf16), AG_ERR_UNSUPPORTED (tok larger than m's vocabulary, two
 * tokens with the same bytes - a GGUF vocabulary maps each string to one
 * id -, a size beyond GGUF's 32-bit metadata), AG_ERR_IO (path not a
 * regular file, not writable, a write error), AG_ERR_OOM, the errors of
 * reading a tensor to the host. */
AG_API ag_status ag_llama_save_gguf(const ag_llama *m, const ag_bpe *tok, const char *path, ag_gguf_type type);

#ifdef __cplusplus
}
#endif
#endif
