/* A Llama-style model (anygrad/llama.h) trained on plain text: Debian's
 * fortunes corpus or any text file, tokenized with a byte-level BPE learned
 * on the training split (anygrad/tokenizer.h), the last 5% of the bytes
 * held out. Progress with training and held-out loss and held-out bits per
 * byte, a safetensors checkpoint, and a sample at the end. `anygrad train
 * --task text` is a thin front end to this. */
#ifndef ANYGRAD_MODELS_TEXT_H
#define ANYGRAD_MODELS_TEXT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "anygrad/anygrad.h"

#define TEXT_FORTUNES_DIR "/usr/share/games/fortunes"
#define TEXT_MAX_STEPS (INT64_C(1) << 40)
#define TEXT_MAX_WIDTH 16384
#define TEXT_MAX_LAYERS 64
#define TEXT_MAX_SEQ 8192
#define TEXT_MAX_BATCH 65536
#define TEXT_MAX_VOCAB 65536
/* The largest corpus read (--data, or the fortunes files together): the
 * token ids take 4 bytes per byte on top of it. */
#define TEXT_MAX_DATA_BYTES (UINT64_C(256) << 20)

typedef struct text_options {
  ag_device device;
  const char *data;   /* a regular text file of at most TEXT_MAX_DATA_BYTES,
                         or NULL: every file of TEXT_FORTUNES_DIR without an
                         extension, in name order */
  const char *out;    /* checkpoint written at the end (and every save_every
                         steps), or NULL: the weights under Hugging Face names
                         (ag_llama_load reads it), the AdamW state and
                         counters, the step, seed, architecture and hashes of
                         the corpus and tokenizer; replaced atomically. The
                         tokenizer also goes to out + ".bpe" (ag_bpe_save).
                         Neither may be --data; the tokenizer may not be
                         --resume either (text_check_outputs) */
  const char *resume; /* a checkpoint to continue from, or NULL: its
                         architecture, vocabulary and seed (unless seed_set)
                         are used; the corpus and the tokenizer learned from
                         it must be the ones it was trained on */
  const char *hf;     /* a folder to write at the end in the Hugging Face
                         layout (ag_llama_save_pretrained: the model and the
                         tokenizer), or NULL; when it exists it must be a
                         folder (checked before the first step) */
  int64_t save_every; /* > 0: also write out every save_every steps */
  int64_t stop_at;    /* > 0: stop after this step as an interrupted run
                         would (out written there), the schedule still that
                         of steps; 0: run to steps */
  bool seed_set;      /* seed given explicitly (wins over a checkpoint's) */
  int64_t steps, batch, seq, warmup;
  int dim, layers, heads, kv_heads;
  int vocab;          /* BPE vocabulary (256: raw bytes, no merges) */
  double lr, weight_decay, clip;
  uint64_t seed;
  int log_every, eval_batches;
  int sample_tokens;  /* tokens generated at the end (0: no sample) */
  const char *prompt; /* sample prompt (default "\n") */
  double temperature; /* > 0 */
  int top_k;          /* 0: the whole vocabulary */
  bool quiet;         /* progress to log only at the end */
  FILE *log;          /* progress output; stdout when NULL */
} text_options;

typedef struct text_result {
  double first_loss, train_loss; /* the first step's loss; mean of the last logged steps */
  double val_loss;               /* held-out nats per token */
  double val_bpb;                /* held-out bits per byte */
  double last_loss;              /* the last step's training loss (NAN if none ran) */
  int64_t steps_done;
  double seconds;
} text_result;

/* Defaults (dim 128, 4 layers, 4 heads, 2 key/value heads, sequence 128,
 * batch 8, BPE vocabulary 512; the best available device). */
text_options text_defaults(void);

/* AG_ERR_INVALID when an output of o (out, out + ".bpe") is the same file
 * (device and inode: also through a hard link or symlink) as an input
 * (data; resume for the tokenizer: out may replace the checkpoint it
 * resumes from), the message naming both; AG_OK otherwise (also for a NULL
 * out). text_train makes this check first; a front end can make it alone
 * to report a usage error. */
ag_status text_check_outputs(const text_options *o);

/* Train as configured. Errors (the message in ag_last_error()):
 * AG_ERR_INVALID for options outside the limits, an output that is an
 * input (text_check_outputs) or a model shape ag_llama_init refuses,
 * AG_ERR_IO for unreadable data (not a regular file, over
 * TEXT_MAX_DATA_BYTES; the message names the path and the reason) or an
 * unwritable out or out + ".bpe" (both checked before the first step),
 * AG_ERR_CORRUPT for a resume checkpoint that is not one of this task's or
 * is damaged: metadata out of range, tensors that do not have the shapes its
 * sizes give (checked before the model is built), an optimizer step counter
 * other than its step (text_ckpt.h), AG_ERR_INVALID
 * for one made from another corpus or tokenizer, AG_ERR_SHAPE for a corpus too small
 * for one sequence in each split, AG_ERR_STATE when the loss became
 * NaN/Inf, the library's errors otherwise. */
ag_status text_train(const text_options *o, text_result *r);

#endif
