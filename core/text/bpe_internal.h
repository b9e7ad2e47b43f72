/* What the Hugging Face layout (core/hf/) needs of the BPE tokenizer
 * besides its public API. Never installed. */
#ifndef ANYGRAD_CORE_TEXT_BPE_INTERNAL_H
#define ANYGRAD_CORE_TEXT_BPE_INTERNAL_H

#include <stdint.h>

#include "anygrad/tokenizer.h"
#include "hidden.h"

/* A tokenizer from its merges (2 * nm ids: merge i makes token 256 + i from
 * merges[2i], merges[2i+1]), checked as ag_bpe_load checks a file; `where`
 * names the source in errors. merges is copied. *out owned by the caller.
 * Errors: AG_ERR_INVALID (NULL, nm < 0 or above AG_BPE_MAX_VOCAB - 256),
 * AG_ERR_CORRUPT (as ag_bpe_load), AG_ERR_OOM. */
AG_HIDDEN ag_status ag__bpe_from_merges(const int32_t *merges, int nm, const char *where, ag_bpe **out);

/* Merge i (0 <= i < vocab - 256) of bpe: token 256 + i is *x followed by
 * *y. No checks (the caller keeps i in range). */
AG_HIDDEN void ag__bpe_merge(const ag_bpe *bpe, int i, int32_t *x, int32_t *y);

#endif
