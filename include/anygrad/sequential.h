/* A configurable sequential container (torch.nn.Sequential): layers given as
 * specs, built into parameters on a device, run in order. Include this
 * header with <anygrad/anygrad.h>.
 *
 * Layer i's parameters are named as torch.nn.Sequential names them:
 * "<i>.weight", "<i>.bias" (and the batch-norm buffers "<i>.running_mean",
 * "<i>.running_var"), so a state dict saved from PyTorch loads by name.
 * Parameters are listed in m->params (for the optimizer and
 * ag_optimizer_groups' no-decay rule: biases and norm weights are 1-d) and
 * buffers in m->buffers; a checkpoint saves both (ag_safetensors_save of
 * each list, or of one list built with ag_params_extend).
 *
 * Ownership: the container owns its layers, parameters and buffers until
 * ag_sequential_free; ag_sequential_forward returns a new tensor (tensor.h
 * rules). The specs are copied at init. */
#ifndef ANYGRAD_SEQUENTIAL_H
#define ANYGRAD_SEQUENTIAL_H

#include "anygrad/nn.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ag_layer_kind {
  AG_LAYER_LINEAR = 1,    /* in -> out features, bias */
  AG_LAYER_CONV2D,        /* in -> out channels, kernel x kernel, conv, bias */
  AG_LAYER_BATCH_NORM2D,  /* in channels, eps (0: 1e-5), momentum 0.1 */
  AG_LAYER_LAYER_NORM,    /* in features (the last dim), eps (0: 1e-5) */
  AG_LAYER_ACTIVATION,    /* act */
  AG_LAYER_DROPOUT,       /* p in [0, 1) */
  AG_LAYER_FLATTEN,       /* [N, ...] -> [N, prod(...)] */
} ag_layer_kind;

typedef struct ag_layer_spec {
  ag_layer_kind kind;
  int64_t in, out;
  bool bias;
  int kernel;
  ag_conv2d_params conv; /* all zero: AG_CONV2D_DEFAULT */
  ag_activation act;
  double p, eps;
} ag_layer_spec;

struct ag__seq_layer;
typedef struct ag_sequential {
  int n_layers;
  struct ag__seq_layer *layers;
  bool train;           /* dropout active, batch norm on batch statistics */
  ag_generator *gen;    /* dropout's generator (borrowed; NULL: the default) */
  ag_param_list params;  /* "<i>.weight", "<i>.bias" */
  ag_param_list buffers; /* "<i>.running_mean", "<i>.running_var" */
} ag_sequential;

/* Build n layers from specs on d in dtype dt; g (NULL: the default
 * generator) draws the initial weights (PyTorch's defaults per layer) and
 * is kept for dropout. Starts in training mode. Errors: AG_ERR_INVALID (NULL
 * m or specs, n < 1, an unknown kind, activation or a dropout p outside
 * [0, 1), a norm eps that is negative, NaN or infinite, naming the layer
 * index), AG_ERR_SHAPE (a size < 1), the layers'
 * init errors. On error m holds nothing. */
AG_API ag_status ag_sequential_init(ag_sequential *m, ag_device d, ag_dtype dt, int n,
                                    const ag_layer_spec *specs, ag_generator *g);
/* Training (true) or evaluation mode for dropout and batch norm. Errors:
 * AG_ERR_INVALID for NULL m. */
AG_API ag_status ag_sequential_set_train(ag_sequential *m, bool train);
/* Every layer in order; a new tensor, or NULL with the error set: a NULL
 * input or module (AG_ERR_INVALID), and the layers' errors with
 * "ag_sequential_forward: layer <i> (<kind>)" prepended to the message
 * (AG_ERR_SHAPE for an input that does not fit). Intermediates are
 * released as it goes. */
AG_API ag_tensor *ag_sequential_forward(const ag_sequential *m, ag_tensor *x);
/* Releases everything and zeroes the struct; NULL is ignored. */
AG_API void ag_sequential_free(ag_sequential *m);

#ifdef __cplusplus
}
#endif
#endif
