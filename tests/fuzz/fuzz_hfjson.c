/* libFuzzer harness of the Hugging Face layout's JSON readers
 * (core/hf/json.c, core/hf/pretrained.c): every input is read as a
 * tokenizer.json (ag_bpe_load_hf) and as a config.json
 * (ag_llama_read_config). A tokenizer it accepts must encode and decode a
 * short text and the input's first bytes back to the same bytes; a config
 * it accepts must hold sizes ag_llama_init takes the ranges of. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "anygrad/anygrad.h"
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

static char g_dir[64];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  ag_bpe *b = (ag_bpe *)1;
  if (ag_bpe_load_hf(fuzz_file(data, size), &b) == AG_OK) {
    int vocab = ag_bpe_vocab_size(b);
    if (vocab < 256 || vocab > AG_BPE_MAX_VOCAB) abort();
    static const char text[] = "the cat sat on the mat.\n  aaabdaaabac \xc3\xa9t\xc3\xa9 0123 \x00\xff";
    round_trip(b, (const uint8_t *)text, sizeof text - 1);
    round_trip(b, data, size);
    ag_bpe_free(b);
  } else if (b) {
    abort();
  }
  if (!g_dir[0]) {
    snprintf(g_dir, sizeof g_dir, "/tmp/ag_fuzz_hfjson.XXXXXX");
    if (!mkdtemp(g_dir)) abort();
  }
  char path[96];
  snprintf(path, sizeof path, "%s/config.json", g_dir);
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(data, 1, size, f) != size || fclose(f) != 0) abort();
  ag_llama_config c;
  if (ag_llama_read_config(g_dir, &c) == AG_OK) {
    if (c.vocab_size < 1 || c.dim < 1 || c.n_layers < 1 || c.n_heads < 1 || c.n_kv_heads < 1 || c.hidden_dim < 1 ||
        c.max_seq_len < 1 || !(c.rope_theta > 0) || !(c.norm_eps > 0) || c.dim % c.n_heads)
      abort();
  }
  return 0;
}
