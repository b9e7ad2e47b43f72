/* The word list the character-level model trains on: the vocabulary (a-z
 * and the word boundary '.') and the one loader that `anygrad train`,
 * `anygrad compare` and the examples share, so every program sees the same
 * words in the same order and the same held-out split for a seed. */
#ifndef ANYGRAD_MODELS_WORDS_H
#define ANYGRAD_MODELS_WORDS_H

#include <stdint.h>

#include "anygrad/status.h"

#define CHARLM_VOCAB 27 /* '.' (word boundary) and a-z */
#define CHARLM_MAX_WORD 22
#define CHARLM_MAX_WORDS_BYTES ((uint64_t)256 << 20) /* the largest word list read */

/* Token of a character: 0 for '.', 1..26 for 'a'..'z'. */
static inline int32_t charlm_char_id(char c) { return c == '.' ? 0 : c - 'a' + 1; }

/* Counter-based generator (splitmix64) for host-side shuffles and batches. */
static inline uint64_t charlm_splitmix(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Read the lines of `path` that are lower-case a-z words of 1..CHARLM_MAX_WORD
 * letters (a word list also holds names and possessives) and shuffle them
 * with `seed`. The held-out split is the last n / 10 words (charlm_words_val).
 * `who` prefixes the error messages ("charlm", "compare"). On success the
 * caller owns *out_words (n strings and the array: charlm_words_free).
 * Errors: AG_ERR_IO when the file cannot be opened or holds fewer than 100
 * usable words, AG_ERR_OOM. */
ag_status charlm_words_load(const char *path, uint64_t seed, const char *who, char ***out_words, int *out_n);

/* Words held out for evaluation out of n loaded: the last n_val of them. */
static inline int charlm_words_val(int n) { return n / 10; }

/* Free n words and their array (either may be 0/NULL). */
void charlm_words_free(char **words, int n);

#endif
