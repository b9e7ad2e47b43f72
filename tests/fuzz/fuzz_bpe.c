/* libFuzzer harness of the BPE tokenizer reader: every input is read by
 * ag_bpe_load; a file it accepts holds no NUL byte and no sign after its
 * magic (a saved tokenizer has neither), and must encode and decode a short
 * text and the input's own first bytes back to the same bytes, with ids in
 * range. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "anygrad/anygrad.h"
#include "anygrad/tokenizer.h"
#include "fuzz_common.h"

static void round_trip(const ag_bpe *b, const uint8_t *s, size_t n) {
  int32_t ids[128];
  uint8_t back[128];
  size_t nids = 0, nb = 0;
  if (n > sizeof back) n = sizeof back;
  if (ag_bpe_encode(b, s, n, ids, sizeof ids / sizeof *ids, &nids) != AG_OK || nids > n) abort();
  for (size_t i = 0; i < nids; i++)
    if (ids[i] < 0 || ids[i] >= ag_bpe_vocab_size(b)) abort();
  if (ag_bpe_decode(b, ids, nids, back, sizeof back, &nb) != AG_OK || nb != n || memcmp(back, s, n)) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  ag_bpe *b = NULL;
  if (ag_bpe_load(fuzz_file(data, size), &b) != AG_OK) {
    if (b) abort();
    return 0;
  }
  const uint8_t *body = memchr(data, '\n', size); /* after the magic "anygrad-bpe" */
  size_t nbody = body ? size - (size_t)(body - data) : 0;
  if (memchr(data, 0, size) || !body || memchr(body, '-', nbody) || memchr(body, '+', nbody)) abort();
  int vocab = ag_bpe_vocab_size(b);
  if (vocab < 256 || vocab > AG_BPE_MAX_VOCAB) abort();
  static const char text[] = "the cat sat on the mat.\n  aaabdaaabac \xc3\xa9t\xc3\xa9 0123 \x00\xff";
  round_trip(b, (const uint8_t *)text, sizeof text - 1);
  round_trip(b, data, size);
  size_t len = 0;
  if (!ag_bpe_token_bytes(b, vocab - 1, &len) || len < 1 || len > AG_BPE_MAX_TOKEN_BYTES) abort();
  ag_bpe_free(b);
  return 0;
}
