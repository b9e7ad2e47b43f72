/* libFuzzer harness of the text task's resume check (models/text_ckpt.c):
 * every input is opened as a safetensors file and checked as a checkpoint
 * of `anygrad train --task text` (metadata through the strict parsers, the
 * tensors against the sizes, the optimizer's step counter). What it accepts
 * must be within the limits the training job relies on before it builds a
 * model, and its metadata must write back to strings that read the same. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "anygrad/anygrad.h"
#include "fuzz_common.h"
#include "text.h"
#include "text_ckpt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  ag_safetensors *f = NULL;
  text_ckpt_meta k;
  if (text_ckpt_open(fuzz_file(data, size), &f, &k) != AG_OK) return 0;
  if (!f || k.step < 0 || k.step > TEXT_MAX_STEPS || k.dim < 1 || k.dim > TEXT_MAX_WIDTH || k.heads < 1 ||
      k.kv_heads < 1 || k.dim % k.heads || (k.dim / k.heads) % 2 || k.heads % k.kv_heads || k.layers < 1 ||
      k.layers > TEXT_MAX_LAYERS || k.vocab < 256 || k.vocab > TEXT_MAX_VOCAB || k.model_vocab < 256 ||
      k.model_vocab > k.vocab || k.seq < 1 || k.seq > TEXT_MAX_SEQ || k.loss_n < 0 || k.loss_n > k.step ||
      !isfinite(k.loss_sum) || !(k.loss_sum >= 0) || !isfinite(k.first_loss) || !(k.first_loss >= 0) ||
      k.data_bytes > TEXT_MAX_DATA_BYTES)
    abort();
  /* the strings it would write for this metadata read back the same */
  text_ckpt_strings s;
  text_ckpt_strings_make(&k, &s);
  for (int i = 1; i < TEXT_CKPT_N_META; i++) { /* key 0, "format", is not checked */
    const char *key = s.keys[i], *v = ag_safetensors_meta(f, key);
    if (!v) abort();
    if (!strcmp(key, "loss_sum") || !strcmp(key, "first_loss")) {
      double a = strtod(v, NULL), b = strtod(s.vals[i], NULL);
      if (memcmp(&a, &b, sizeof a)) abort();
    } else if (!strcmp(key, "anygrad") || strstr(key, "hash")) {
      if (strcmp(v, s.vals[i])) abort(); /* one accepted spelling */
    } else {
      uint64_t a = 0, b = 1; /* decimal digits, leading zeros allowed */
      if (!ag_parse_u64(v, &a) || !ag_parse_u64(s.vals[i], &b) || a != b) abort();
    }
  }
  ag_safetensors_close(f);
  return 0;
}
