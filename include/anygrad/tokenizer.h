/* A byte-level BPE (byte-pair encoding) tokenizer (docs/tokenizer.md).
 *
 * The vocabulary is the 256 single bytes (ids 0..255, id == byte value)
 * followed by the learned merges: id 256 + i is the concatenation of the two
 * tokens of merge i, both of smaller id. Any byte sequence (invalid UTF-8,
 * NUL bytes, the empty sequence) encodes, and decoding the ids gives the
 * bytes back exactly.
 *
 * Text is first cut into chunks and merges never cross a chunk boundary (in
 * training and in encoding alike): a run of letters (ASCII letters and every
 * byte >= 0x80), a run of digits, or a run of other printable bytes, each
 * with at most one space before it; a run of whitespace (its last space goes
 * to a following word instead); a chunk is at most AG_BPE_MAX_TOKEN_BYTES
 * bytes (a longer run is cut). So "hello world" is "hello" + " world".
 *
 * An ag_bpe never changes after train or load: every function taking a
 * const ag_bpe * may be called from several threads at once. */
#ifndef ANYGRAD_TOKENIZER_H
#define ANYGRAD_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "anygrad/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The largest vocabulary train and load accept (256 bytes + merges). */
#define AG_BPE_MAX_VOCAB 1048576
/* The longest token and chunk, in bytes. */
#define AG_BPE_MAX_TOKEN_BYTES 256

typedef struct ag_bpe ag_bpe;

/* Learn merges from corpus[0..n) until the vocabulary has vocab_size tokens
 * or no pair of adjacent tokens occurs twice any more (then the vocabulary
 * is smaller: see ag_bpe_vocab_size). Each step merges the most frequent
 * pair, ties going to the smallest (left id, right id). Deterministic: the
 * same corpus and vocab_size give the same merges. corpus may be NULL when
 * n == 0. On success *out is a new tokenizer owned by the caller
 * (ag_bpe_free). Errors (*out = NULL): AG_ERR_INVALID (out NULL, corpus NULL
 * with n > 0, vocab_size < 256 or > AG_BPE_MAX_VOCAB), AG_ERR_OOM. */
AG_API ag_status ag_bpe_train(const uint8_t *corpus, size_t n, int vocab_size, ag_bpe **out);

/* Free a tokenizer (NULL: nothing). Cannot fail. */
AG_API void ag_bpe_free(ag_bpe *bpe);

/* Number of tokens: 256 + number of merges; 0 for NULL. Cannot fail. */
AG_API int ag_bpe_vocab_size(const ag_bpe *bpe);

/* The bytes of token id: *len bytes (1..AG_BPE_MAX_TOKEN_BYTES) at the
 * returned pointer, borrowed from bpe (valid until ag_bpe_free; not
 * NUL-terminated, do not free). Errors: NULL returned and *len = 0 (when
 * len is not NULL), with AG_ERR_INVALID (bpe or len NULL) or AG_ERR_INDEX
 * (id outside [0, vocab size)) recorded. */
AG_API const uint8_t *ag_bpe_token_bytes(const ag_bpe *bpe, int32_t id, size_t *len);

/* Encode bytes[0..n) into token ids. At most cap ids are written to
 * out_ids, and *out_n is set to the number of ids of the whole encoding;
 * n ids always suffice. out_ids may be NULL with cap == 0 to only count.
 * bytes may be NULL when n == 0 (no ids). Errors: AG_ERR_INVALID (bpe or
 * out_n NULL, bytes NULL with n > 0, out_ids NULL with cap > 0, or cap
 * smaller than the encoding when out_ids is given: the message says the
 * size needed, *out_n holds it, the first cap ids are written). */
AG_API ag_status ag_bpe_encode(const ag_bpe *bpe, const uint8_t *bytes, size_t n, int32_t *out_ids, size_t cap,
                               size_t *out_n);

/* Decode ids[0..n) into bytes. At most cap bytes are written to out, and
 * *out_n is set to the total length (each id contributes at most
 * AG_BPE_MAX_TOKEN_BYTES). out may be NULL with cap == 0 to only measure.
 * Errors: AG_ERR_INVALID (bpe or out_n NULL, ids NULL with n > 0, out NULL
 * with cap > 0, cap too small when out is given: *out_n holds the size
 * needed), AG_ERR_INDEX (an id outside [0, vocab size): the message gives
 * its position and value; *out_n = 0). */
AG_API ag_status ag_bpe_decode(const ag_bpe *bpe, const int32_t *ids, size_t n, uint8_t *out, size_t cap,
                               size_t *out_n);

/* Write bpe to path in the text format of docs/tokenizer.md
 * ("anygrad-bpe 1", then one merge per line). The file is replaced only
 * when complete (ag_output_open/commit): after a failure an existing file
 * at path keeps its old content. Errors: AG_ERR_INVALID (NULL argument or
 * empty path), AG_ERR_IO (cannot write, the message names path). */
AG_API ag_status ag_bpe_save(const ag_bpe *bpe, const char *path);

/* Read a tokenizer written by ag_bpe_save. On success *out is owned by the
 * caller (ag_bpe_free). Errors (*out = NULL): AG_ERR_INVALID (NULL
 * argument), AG_ERR_IO (cannot open, not a regular file, larger than
 * 64 MiB), AG_ERR_CORRUPT (wrong magic or version, truncated, a malformed
 * line, a merge naming a token that is not defined before it, a repeated
 * merge, a token longer than AG_BPE_MAX_TOKEN_BYTES, more than
 * AG_BPE_MAX_VOCAB tokens; the message names path and the line),
 * AG_ERR_OOM. */
AG_API ag_status ag_bpe_load(const char *path, ag_bpe **out);

#ifdef __cplusplus
}
#endif
#endif
