/* A character-level language model over an English word list: data
 * preparation, an MLP over a fixed context (Bengio et al. 2003) and a small
 * GPT, a training loop with progress, evaluation, sampling and resumable
 * safetensors checkpoints. `anygrad train` is a thin front end to this. */
#ifndef ANYGRAD_EXAMPLES_CHARLM_H
#define ANYGRAD_EXAMPLES_CHARLM_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "anygrad/anygrad.h"

#define CHARLM_VOCAB 27 /* '.' (word boundary) and a-z */
#define CHARLM_MAX_WORD 22

typedef enum { CHARLM_MLP = 0, CHARLM_GPT = 1 } charlm_model_kind;

typedef struct charlm_options {
  charlm_model_kind model;
  ag_device device;
  const char *words_path; /* default /usr/share/dict/words */
  const char *resume;     /* checkpoint to continue from, or NULL */
  const char *out;        /* checkpoint written at the end, or NULL */
  int64_t steps;          /* total optimizer steps (a resumed run continues to this) */
  int64_t batch;          /* examples (MLP) or words (GPT) per micro-batch */
  int accum;              /* micro-batches per step */
  double lr, weight_decay, clip;
  int64_t warmup;
  uint64_t seed;
  /* MLP */
  int context, emb, hidden;
  /* GPT */
  int n_layer, n_head, n_embd;
  int eval_batches, samples, log_every;
  ag_dtype precision; /* AG_F32; AG_F16: autocast + dynamic loss scaling;
                         AG_BF16: autocast (f32 master weights either way) */
  bool quiet;   /* no progress bar (tests) */
  const char *trace; /* write a Chrome trace of the run here, or NULL */
  bool profile;      /* step profiler: verdict and leak check at the end */
  FILE *log;    /* progress output; stdout when NULL */
} charlm_options;

typedef struct charlm_result {
  double first_loss, final_loss, val_loss;
  int64_t steps_done;
  double seconds, examples_per_s;
} charlm_result;

/* Defaults for a model kind (about a minute on one CPU core for the MLP). */
charlm_options charlm_defaults(charlm_model_kind kind);

/* Parse `anygrad train` options into o (starting from defaults). Returns 0,
 * 1 when --help was printed, or -1 with a message on stderr. */
int charlm_parse_args(int argc, char **argv, charlm_options *o);

/* Train as configured. On failure returns the status; the message is in
 * ag_last_error(). */
ag_status charlm_train(const charlm_options *o, charlm_result *out_result);

#endif
