/* What the GGUF writer shares with the Hugging Face layout (core/hf/):
 * GPT-2's byte-to-unicode map of token bytes and the table of a
 * tokenizer's token bytes. Never installed. */
#ifndef ANYGRAD_CORE_HF_INTERNAL_H
#define ANYGRAD_CORE_HF_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "anygrad/tokenizer.h"
#include "hidden.h"

/* GPT-2's map: byte b is the code point to_cp[b] (printable bytes are
 * themselves, the others 256 + n in byte order; space is U+0120). */
AG_HIDDEN void ag__hf_byte_map(uint16_t to_cp[256]);

/* The UTF-8 of token bytes p[0..n) through the map into out (2n bytes
 * suffice); returns its length. */
AG_HIDDEN size_t ag__hf_map_token(const uint16_t to_cp[256], const uint8_t *p, size_t n, char *out);

/* The bytes of every id of bpe (*out_b[i], *out_l[i] bytes; borrowed from
 * bpe; both arrays owned by the caller, free). fn names the caller in
 * errors: AG_ERR_UNSUPPORTED (two ids with the same bytes), AG_ERR_OOM. */
AG_HIDDEN ag_status ag__hf_token_table(const ag_bpe *bpe, const char *fn, const uint8_t ***out_b, size_t **out_l);

#endif
