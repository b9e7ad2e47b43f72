/* A small convolutional network on Fashion-MNIST: two conv blocks (conv 3x3,
 * batch norm, ReLU, 2x2 max pool) and a linear classifier, trained with
 * AdamW, test accuracy per epoch, a confusion summary, per-epoch resumable
 * checkpoints. `anygrad train --task fashion-mnist` is a thin front end. */
#ifndef ANYGRAD_MODELS_CNN_H
#define ANYGRAD_MODELS_CNN_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "anygrad/anygrad.h"

#define CNN_DATA_DIR "/usr/share/datasets/fashion-mnist"
#define CNN_CLASSES 10
#define CNN_MAX_EPOCHS 1000
#define CNN_MAX_BATCH 8192
#define CNN_MAX_WIDTH 1024
#define CNN_MAX_STEPS (INT64_C(1) << 40) /* checkpoint metadata 'step' */
#define CNN_NORM_MEAN 0.2860 /* of the 60,000 training images, pixel / 255 */
#define CNN_NORM_STD 0.3530  /* input = (pixel / 255 - mean) / std */

typedef struct cnn_options {
  ag_device device;
  const char *data_dir; /* the four idx files (default CNN_DATA_DIR) */
  int epochs;           /* total epochs (a resumed run continues to this) */
  int64_t batch;
  double lr, weight_decay;
  int64_t warmup;       /* steps */
  uint64_t seed;
  bool seed_set;
  int c1, c2;           /* channels of the two conv blocks */
  int64_t train_limit;  /* use the first N training images (0: all) */
  int64_t test_limit;   /* evaluate on the first N test images (0: all) */
  const char *out;      /* checkpoint written after every epoch, or NULL */
  const char *resume;   /* checkpoint to continue from, or NULL */
  int workers;          /* loader threads that decode, augment and normalise;
                           0: the training thread does it (input time) */
  bool augment;         /* random crop (padding 4) and horizontal flip (default off) */
  int augment_delay_us; /* extra time per image in the augmentation (tests of
                           the input-bound verdict); 0 normally */
  int profile_window;   /* steps per profiler verdict (0: 100) */
  bool profile, quiet;
  FILE *log;            /* stdout when NULL */
  /* Data parallelism (anygrad/ddp.h): this replica's handle on a group, or
   * NULL for one device. Every rank calls cnn_train with the same options
   * except device and group; batch is the global batch, rank r of n takes
   * rows [b*r/n, b*(r+1)/n) of each batch of b rows (all ranks read the
   * same shuffled order) and the gradients are averaged with weights
   * rows/b, so the update is the one of the whole batch. Batch norm uses
   * each replica's own rows (as PyTorch's DDP without SyncBatchNorm): the
   * one-device run this equals is the one with bn_shards = n. Only rank 0
   * prints, evaluates and writes out; the running statistics are averaged
   * over the ranks before each evaluation. */
  ag_group *group;
  int64_t bucket_bytes; /* gradient buckets (0: AG_DDP_DEFAULT_BUCKET_BYTES) */
  /* One device: batch norm statistics over bn_shards equal row shards of
   * each batch, [b*k/s, b*(k+1)/s), each its own forward (ghost batch
   * norm); the loss is still the mean over the whole batch. 0 or 1: the
   * whole batch (the default). Must be 0 or 1 with a group. */
  int bn_shards;
} cnn_options;

typedef struct cnn_result {
  int epochs_done;
  double test_accuracy; /* after the last epoch, in [0, 1] */
  double seconds;       /* training (without the final evaluation) */
  int64_t confusion[CNN_CLASSES][CNN_CLASSES]; /* [true][predicted] */
  bool input_bound;     /* the profiler's verdict over the last window */
  char verdict[1024];   /* its text (empty without the profiler) */
  int64_t steps;        /* optimizer steps taken by this call */
  double first_loss, last_loss; /* the whole batch's mean loss at the first and
                                   last step of this call (with a group: summed
                                   over the ranks, the same on every rank) */
} cnn_result;

cnn_options cnn_defaults(void);

/* The network of cnn_train, for tools that drive it step by step
 * (`anygrad compare --model cnn`). */
typedef struct cnn_model {
  ag_conv2d_layer conv1, conv2;
  ag_batch_norm2d bn1, bn2;
  ag_linear fc;
  ag_param_list params;  /* trainable, in a fixed order (conv1., bn1., conv2., bn2., fc.) */
  ag_param_list buffers; /* batch norm running statistics */
} cnn_model;

/* Build the network on o->device with o->c1, o->c2 channels, weights drawn
 * from g (not consumed beyond the draws). *m is owned by the caller
 * (cnn_model_free). Errors: the layers' (AG_ERR_INVALID, AG_ERR_OOM, device
 * errors); *m is zeroed on error. */
ag_status cnn_model_init(cnn_model *m, const cnn_options *o, ag_generator *g);

/* Free the layers and lists; NULL and zeroed models are ignored. */
void cnn_model_free(cnn_model *m);

/* Logits [B, 10] of x [B, 1, 28, 28] f32 (normalised as CNN_NORM_*); train
 * selects batch statistics (and updates the running ones). New reference
 * owned by the caller; NULL with the op's error. */
ag_tensor *cnn_model_logits(cnn_model *m, ag_tensor *x, bool train);

/* ONNX export (anygrad/onnx.h) of cnn_model_logits in evaluation mode
 * (batch norm on the running statistics): x [B, 1, 28, 28] -> logits
 * [B, 10], weights under the checkpoint's names. Returns the logits value,
 * or -1 with the error set. */
int cnn_model_onnx(const cnn_model *m, ag_onnx *g, int x);

/* Train as configured. Errors: AG_ERR_INVALID (options outside their
 * limits), the idx reader's errors for the data (AG_ERR_IO, AG_ERR_CORRUPT),
 * AG_ERR_CORRUPT for a checkpoint that is not a cnn checkpoint, AG_ERR_IO
 * for an unwritable out path (checked before training), AG_ERR_STATE when
 * the loss becomes NaN/Inf, op and device errors. */
ag_status cnn_train(const cnn_options *o, cnn_result *out_result);

#endif
