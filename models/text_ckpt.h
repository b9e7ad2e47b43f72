/* The text task's checkpoint (text.c) besides its tensors: the metadata it
 * records, and the check of a checkpoint to resume from, which reads every
 * key with the strict parsers and compares the file's tensors (names,
 * dtypes and shapes in the header) with the sizes the metadata gives before
 * anything is built from them. Internal to the models library and the fuzz
 * harness tests/fuzz/fuzz_textckpt.c. */
#ifndef ANYGRAD_MODELS_TEXT_CKPT_H
#define ANYGRAD_MODELS_TEXT_CKPT_H

#include <stdint.h>

#include "anygrad/anygrad.h"

/* What a checkpoint records besides the tensors. The data order is a
 * function of (seed, step), so these are the whole position. */
typedef struct text_ckpt_meta {
  int64_t step;
  uint64_t seed, data_hash, bpe_hash, data_bytes;
  int dim, layers, heads, kv_heads;
  int vocab;       /* the vocabulary asked for (--vocab) */
  int model_vocab; /* the tokenizer's, which the embedding has (<= vocab) */
  int64_t seq;
  double loss_sum, first_loss; /* the progress line's running mean, exactly */
  int64_t loss_n;
} text_ckpt_meta;

#define TEXT_CKPT_N_META 16

/* The metadata of k as TEXT_CKPT_N_META key/value strings for
 * ag_safetensors_save; the values live in *s. Numbers are decimal (losses
 * with 17 significant digits, which read back to the same double), the
 * hashes 16 hexadecimal digits. */
typedef struct text_ckpt_strings {
  const char *keys[TEXT_CKPT_N_META], *vals[TEXT_CKPT_N_META];
  char v[TEXT_CKPT_N_META][40];
} text_ckpt_strings;
void text_ckpt_strings_make(const text_ckpt_meta *k, text_ckpt_strings *s);

/* Check an open checkpoint f (path: for messages) and fill *k: every
 * metadata key in its range through the strict parsers (decimal integers,
 * 16-digit hexadecimal hashes, finite decimal losses), the sizes consistent
 * with each other, every tensor of the model and of its AdamW state present
 * as F32 with the shape the metadata's sizes give (none of a layer beyond
 * them), and the optimizer's step counter ("optimizer.step", I64) equal to
 * the metadata's step. Reads one 8-byte tensor; allocates nothing the size
 * of the model. Errors: AG_ERR_CORRUPT naming the key or the tensor; a
 * read error of the step counter. */
ag_status text_ckpt_check(const ag_safetensors *f, const char *path, text_ckpt_meta *k);

/* Open path and text_ckpt_check it. On success *f is open (the caller
 * closes it); on error *f is NULL and the message names path. */
ag_status text_ckpt_open(const char *path, ag_safetensors **f, text_ckpt_meta *k);

#endif
