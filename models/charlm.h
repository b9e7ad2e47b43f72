/* A character-level language model over an English word list: data
 * preparation, an MLP over a fixed context (Bengio et al. 2003) and a small
 * GPT, a training loop with progress, evaluation, sampling and resumable
 * safetensors checkpoints. `anygrad train` is a thin front end to this. */
#ifndef ANYGRAD_MODELS_CHARLM_H
#define ANYGRAD_MODELS_CHARLM_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "anygrad/anygrad.h"
#include "words.h" /* CHARLM_VOCAB, CHARLM_MAX_WORD, the word loader */

/* Limits of the options (charlm_train refuses anything outside them with
 * AG_ERR_INVALID, before touching data or devices). */
#define CHARLM_MAX_STEPS (INT64_C(1) << 40)
#define CHARLM_MAX_BATCH (1 << 20)
#define CHARLM_MAX_ACCUM 4096
#define CHARLM_MAX_LR 10.0
#define CHARLM_MAX_CONTEXT 64
#define CHARLM_MAX_WIDTH 16384
#define CHARLM_MAX_LAYERS 64

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
  bool seed_set;          /* seed given explicitly: --resume keeps it instead of the checkpoint's */
  /* MLP */
  int context, emb, hidden;
  /* GPT */
  int n_layer, n_head, n_embd;
  bool checkpoint_activations; /* re-run each block in backward (ag_checkpoint) */
  bool untied_head; /* GPT: a separate output head instead of the token
                       embedding (GPT-2 tying, the default); --resume sets it
                       from the checkpoint, so files written before tying
                       (with model.head.weight) resume untied */
  int eval_batches, samples, log_every;
  ag_dtype precision; /* AG_F32; AG_F16: autocast + dynamic loss scaling;
                         AG_BF16: autocast (f32 master weights either way) */
  bool batch_auto;      /* choose the batch: the largest that fits (see charlm_batch_search) */
  bool estimate_memory; /* predict the peak device memory by category from two
                           short steps at small batches and train nothing */
  bool quiet;   /* no progress bar (tests) */
  const char *trace; /* write a Chrome trace of the run here, or NULL */
  bool profile;      /* step profiler: verdict and leak check at the end */
  const char *report; /* write the HTML run report here (ag_report_write), or NULL;
                         the held-out loss is then also evaluated at each progress update */
  FILE *log;    /* progress output; stdout when NULL */
  int64_t save_every; /* > 0: also write out every save_every steps (each save
                         atomic: a temporary file, fsync, rename), so a run
                         killed at any moment leaves the last one whole */
  const char *heartbeat; /* a file rewritten (atomically) after every step and
                            at the end, one line "anygrad-heartbeat pid P rank R
                            step S state train|end time T" (T: CLOCK_REALTIME
                            seconds), for a launcher watching the run
                            (`anygrad launch`); NULL: none. Every rank writes
                            its own: the caller gives each a distinct path */
  /* Data parallelism (include/anygrad/ddp.h, docs/distributed.md): this
   * replica's handle on the group, or NULL for one device. Every rank calls
   * charlm_train with the same options except device and group; batch is
   * the global batch, shared among the ranks. Only rank 0 prints, evaluates,
   * samples and writes the checkpoint; a resumed checkpoint is read by
   * rank 0 and broadcast (the others read only its metadata). Not with
   * batch_auto, estimate_memory, trace, report or profile on ranks > 0 (they
   * are ignored there). */
  ag_group *group;
  int64_t bucket_bytes; /* 0: AG_DDP_DEFAULT_BUCKET_BYTES */
  bool balance;         /* share the batch by measured throughput (else equal shares) */
  double slowdown;      /* > 1: this replica acts like a device that much slower (tests) */
  /* Sharded optimizer state (ag_ddp_options.zero_stage: 0 off, 1, 2; with a
   * group only; not with f16 precision). The checkpoint at out then holds
   * the model and configuration, and each rank writes its optimizer shard
   * to "<out>.rank<r>.safetensors" (ag_ddp_zero_save); resume reads such a
   * checkpoint with any number of ranks, sharded or not. */
  int zero_stage;
} charlm_options;

/* A memory estimate (charlm_options.estimate_memory): allocated bytes by
 * category at the training step's peak, for the configured batch. */
typedef struct charlm_memory_estimate {
  int64_t batch;                          /* the batch predicted for */
  int64_t probe_batch[2];                 /* the small batches measured */
  double peak_bytes;                      /* predicted allocated peak of a step */
  double category_peak[AG_MEM_CATEGORY_COUNT]; /* predicted peak of each category */
  double per_example_bytes;               /* slope of the peak in the batch */
} charlm_memory_estimate;

/* The automatic batch search (charlm_options.batch_auto). */
typedef struct charlm_batch_search {
  int64_t limit_bytes;       /* the memory cap, else the device's free memory */
  int64_t predicted;         /* from the estimate's per-example bytes */
  int64_t largest_fit;       /* the largest batch whose step ran */
  int64_t chosen;            /* largest_fit less the safety margin (10%) */
  int tries, ooms;           /* probe steps run; out-of-memory errors caught */
  int64_t allocated_before, allocated_after; /* device allocated bytes around
                                                the search: equal unless it leaked */
} charlm_batch_search;

typedef struct charlm_result {
  charlm_batch_search batch_search; /* with batch_auto */
  charlm_memory_estimate estimate; /* with estimate_memory */
  double first_loss, final_loss, val_loss; /* final_loss: the last logged batch */
  double smooth_loss; /* mean loss of the steps since the previous progress line */
  int64_t steps_done;
  double seconds, examples_per_s;
  double recent_examples_per_s; /* over the steps since the previous progress line */
  /* data parallelism: this rank's final share of the global batch, its
   * ag_ddp_stats (rebalances, buckets launched from hooks) */
  int64_t ddp_rows;
  ag_ddp_stats ddp;
  /* growth of the device allocator's "optimizer" category while this rank
   * built its optimizer: its state bytes where the rank is alone on its
   * device's allocator (one device, one process per rank) */
  int64_t optimizer_bytes;
} charlm_result;

/* The model alone, on one device: an MLP over a fixed context (embedding,
 * tanh hidden layer, output layer) or a GPT over padded words, with its
 * parameters named as in a checkpoint ("emb.", "fc1.", "fc2." or the GPT's
 * names). charlm_train builds one per replica; `anygrad compare` builds one
 * per device from the same generator seed. */
typedef struct charlm_model {
  charlm_model_kind kind;
  int context, T; /* MLP context; GPT sequence length (CHARLM_MAX_WORD + 2) */
  ag_embedding_layer emb;
  ag_linear l1, l2;
  ag_gpt gpt;
  ag_param_list params;
} charlm_model;

/* Build the model of o->model with o's sizes (context, emb, hidden or
 * n_layer, n_head, n_embd, checkpoint_activations, untied_head) on dev,
 * f32, initialised from g. On failure nothing is left to free. */
ag_status charlm_model_init(charlm_model *m, const charlm_options *o, ag_device dev, ag_generator *g);

/* Logits as [rows, CHARLM_VOCAB] for tokens x (MLP: [B, context], GPT:
 * [B, t]); NULL with the error set on failure. The caller owns the result. */
ag_tensor *charlm_model_logits(const charlm_model *m, ag_tensor *x);

/* Release the model's layers and parameter list. */
void charlm_model_free(charlm_model *m);

/* ONNX export (anygrad/onnx.h) of charlm_model_logits for the MLP: tokens
 * x [B, context] (integers) -> logits [B, CHARLM_VOCAB], weights under the
 * checkpoint's names. Returns the logits value, or -1 with the error set
 * (AG_ERR_UNSUPPORTED for the GPT model, whose export is not written). */
int charlm_model_onnx(const charlm_model *m, ag_onnx *g, int x);

/* Defaults for a model kind (about a minute on one CPU core for the MLP). */
charlm_options charlm_defaults(charlm_model_kind kind);

/* Train as configured. On failure returns the status; the message is in
 * ag_last_error(). Errors: AG_ERR_INVALID for options outside the limits
 * above or a non-finite hyper-parameter; AG_ERR_IO for an unwritable out,
 * trace or report path (checked before the first step) or a failed write;
 * AG_ERR_CORRUPT for a checkpoint whose metadata is not a charlm
 * checkpoint's; AG_ERR_STATE when the loss or a parameter became NaN/Inf
 * (the message names the step); AG_ERR_OOM when the host address space
 * (ulimit -v) cannot hold the BLAS buffers. A checkpoint at out is replaced
 * only by finite parameters of a run that trained at least one step. */
ag_status charlm_train(const charlm_options *o, charlm_result *out_result);

#endif
