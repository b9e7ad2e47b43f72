/* ag_sequential: layers from specs, torch.nn.Sequential names. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "anygrad/onnx.h"
#include "anygrad/sequential.h"

struct ag__seq_layer {
  ag_layer_spec spec;
  ag_linear lin;
  ag_conv2d_layer conv;
  ag_batch_norm2d bn;
  ag_layer_norm_layer ln;
};

static const char *kind_name(ag_layer_kind k) {
  switch (k) {
  case AG_LAYER_LINEAR: return "linear";
  case AG_LAYER_CONV2D: return "conv2d";
  case AG_LAYER_BATCH_NORM2D: return "batch_norm2d";
  case AG_LAYER_LAYER_NORM: return "layer_norm";
  case AG_LAYER_ACTIVATION: return "activation";
  case AG_LAYER_DROPOUT: return "dropout";
  case AG_LAYER_FLATTEN: return "flatten";
  default: return "?";
  }
}

static void layer_free(struct ag__seq_layer *l) {
  ag_linear_free(&l->lin);
  ag_conv2d_layer_free(&l->conv);
  ag_batch_norm2d_free(&l->bn);
  ag_layer_norm_free(&l->ln);
}

static ag_status layer_init(struct ag__seq_layer *l, int i, ag_device d, ag_dtype dt, ag_generator *g,
                            ag_param_list *params, ag_param_list *buffers) {
  const ag_layer_spec *s = &l->spec;
  char prefix[32];
  snprintf(prefix, sizeof prefix, "%d.", i);
  double eps = s->eps == 0 ? 1e-5 : s->eps;
  if ((s->kind == AG_LAYER_BATCH_NORM2D || s->kind == AG_LAYER_LAYER_NORM) && (!(eps > 0) || isinf(eps)))
    return ag_error_set(AG_ERR_INVALID, "ag_sequential_init: layer %d (%s): eps %g must be finite and > 0 (0 selects "
                        "1e-5)", i, kind_name(s->kind), s->eps);
  ag_status st;
  switch (s->kind) {
  case AG_LAYER_LINEAR:
    st = ag_linear_init(&l->lin, d, dt, s->in, s->out, s->bias, g);
    return st == AG_OK ? ag_linear_params(&l->lin, prefix, params) : st;
  case AG_LAYER_CONV2D: {
    ag_conv2d_params p = s->conv, def = AG_CONV2D_DEFAULT;
    if (p.stride[0] == 0 && p.stride[1] == 0 && p.dilation[0] == 0 && p.groups == 0) {
      int pad0 = p.padding[0], pad1 = p.padding[1];
      p = def;
      p.padding[0] = pad0;
      p.padding[1] = pad1;
    }
    if (s->kernel < 1)
      return ag_error_set(AG_ERR_SHAPE, "ag_sequential_init: layer %d (conv2d): kernel %d < 1", i, s->kernel);
    st = ag_conv2d_layer_init(&l->conv, d, dt, s->in, s->out, s->kernel, s->kernel, &p, s->bias, g);
    return st == AG_OK ? ag_conv2d_layer_params(&l->conv, prefix, params) : st;
  }
  case AG_LAYER_BATCH_NORM2D:
    st = ag_batch_norm2d_init(&l->bn, d, dt, s->in, 0.1, eps);
    if (st == AG_OK) st = ag_batch_norm2d_params(&l->bn, prefix, params);
    return st == AG_OK ? ag_batch_norm2d_buffers(&l->bn, prefix, buffers) : st;
  case AG_LAYER_LAYER_NORM:
    st = ag_layer_norm_init(&l->ln, d, dt, s->in, eps);
    return st == AG_OK ? ag_layer_norm_params(&l->ln, prefix, params) : st;
  case AG_LAYER_ACTIVATION:
    if (s->act < AG_ACT_NONE || s->act > AG_ACT_SIGMOID)
      return ag_error_set(AG_ERR_INVALID, "ag_sequential_init: layer %d (activation): unknown activation %d", i,
                          (int)s->act);
    return AG_OK;
  case AG_LAYER_DROPOUT:
    if (!(s->p >= 0 && s->p < 1))
      return ag_error_set(AG_ERR_INVALID, "ag_sequential_init: layer %d (dropout): p %g is outside [0, 1)", i, s->p);
    return AG_OK;
  case AG_LAYER_FLATTEN: return AG_OK;
  default:
    return ag_error_set(AG_ERR_INVALID, "ag_sequential_init: layer %d: unknown kind %d", i, (int)s->kind);
  }
}

ag_status ag_sequential_init(ag_sequential *m, ag_device d, ag_dtype dt, int n, const ag_layer_spec *specs,
                             ag_generator *g) {
  if (!m) return ag_error_set(AG_ERR_INVALID, "ag_sequential_init: NULL module");
  memset(m, 0, sizeof *m);
  if (n < 1 || !specs)
    return ag_error_set(AG_ERR_INVALID, "ag_sequential_init: need at least one layer spec (n %d%s)", n,
                        specs ? "" : ", NULL specs");
  m->layers = calloc((size_t)n, sizeof *m->layers);
  if (!m->layers) return ag_error_set(AG_ERR_OOM, "ag_sequential_init: out of host memory");
  m->train = true;
  m->gen = g;
  ag_status st = AG_OK;
  for (int i = 0; i < n && st == AG_OK; i++) {
    m->layers[i].spec = specs[i];
    m->n_layers++;
    st = layer_init(&m->layers[i], i, d, dt, g, &m->params, &m->buffers);
  }
  if (st != AG_OK) ag_sequential_free(m);
  return st;
}

ag_status ag_sequential_set_train(ag_sequential *m, bool train) {
  if (!m) return ag_error_set(AG_ERR_INVALID, "ag_sequential_set_train: NULL module");
  m->train = train;
  return AG_OK;
}

static ag_tensor *layer_forward(const ag_sequential *m, const struct ag__seq_layer *l, ag_tensor *h) {
  const ag_layer_spec *s = &l->spec;
  switch (s->kind) {
  case AG_LAYER_LINEAR: return ag_linear_forward(&l->lin, h);
  case AG_LAYER_CONV2D: return ag_conv2d_layer_forward(&l->conv, h);
  case AG_LAYER_BATCH_NORM2D: return ag_batch_norm2d_forward(&l->bn, h, m->train);
  case AG_LAYER_LAYER_NORM: return ag_layer_norm_forward(&l->ln, h);
  case AG_LAYER_ACTIVATION: return ag_activation_forward(s->act, h);
  case AG_LAYER_DROPOUT: return ag_dropout_forward(s->p, h, m->train, m->gen);
  case AG_LAYER_FLATTEN: {
    if (ag_tensor_ndim(h) < 1) {
      ag_error_set(AG_ERR_SHAPE, "flatten needs a batch dim, got a 0-d tensor");
      return NULL;
    }
    const int64_t shape[2] = {ag_tensor_shape(h)[0], -1};
    return ag_tensor_numel(h) ? ag_reshape(h, 2, shape) : ag_flatten(h);
  }
  default: return NULL;
  }
}

ag_tensor *ag_sequential_forward(const ag_sequential *m, ag_tensor *x) {
  if (!m || !x) {
    if (!m || ag_last_status() == AG_OK)
      ag_error_set(AG_ERR_INVALID, "ag_sequential_forward: NULL %s", m ? "input" : "module");
    return NULL;
  }
  ag_tensor *h = x;
  for (int i = 0; i < m->n_layers; i++) {
    ag_tensor *y = layer_forward(m, &m->layers[i], h);
    if (!y) {
      char msg[512];
      snprintf(msg, sizeof msg, "%s", ag_last_error());
      ag_status st = ag_last_status() != AG_OK ? ag_last_status() : AG_ERR_INVALID;
      ag_error_set(st, "ag_sequential_forward: layer %d (%s): %s", i, kind_name(m->layers[i].spec.kind), msg);
      if (h != x) ag_tensor_release(h);
      return NULL;
    }
    if (h != x) ag_tensor_release(h);
    h = y;
  }
  return h == x ? ag_tensor_retain(x) : h;
}

void ag_sequential_free(ag_sequential *m) {
  if (!m) return;
  for (int i = 0; i < m->n_layers; i++) layer_free(&m->layers[i]);
  free(m->layers);
  ag_params_free(&m->params);
  ag_params_free(&m->buffers);
  memset(m, 0, sizeof *m);
}

/* ONNX export (anygrad/onnx.h): the evaluation forward, layer by layer,
 * through the graph builder (which refuses when anygrad has no ONNX). */
int ag_onnx_sequential(ag_onnx *g, const ag_sequential *m, int x) {
  if (!m) {
    ag_error_set(AG_ERR_INVALID, "ag_onnx_sequential: NULL module");
    return -1;
  }
  if (m->train) {
    ag_error_set(AG_ERR_STATE, "ag_onnx_sequential: the model is in training mode (dropout draws, batch norm "
                               "uses batch statistics): call ag_sequential_set_train(m, false) first");
    return -1;
  }
  for (int i = 0; i < m->n_layers && x >= 0; i++) {
    const struct ag__seq_layer *l = &m->layers[i];
    char prefix[32];
    snprintf(prefix, sizeof prefix, "%d.", i);
    switch (l->spec.kind) {
    case AG_LAYER_LINEAR: x = ag_onnx_linear(g, &l->lin, prefix, x); break;
    case AG_LAYER_CONV2D: x = ag_onnx_conv2d(g, &l->conv, prefix, x); break;
    case AG_LAYER_BATCH_NORM2D: x = ag_onnx_batch_norm2d(g, &l->bn, prefix, x); break;
    case AG_LAYER_LAYER_NORM: x = ag_onnx_layer_norm(g, &l->ln, prefix, x); break;
    case AG_LAYER_ACTIVATION: x = ag_onnx_activation(g, l->spec.act, x); break;
    case AG_LAYER_DROPOUT: break; /* the identity in evaluation mode */
    case AG_LAYER_FLATTEN: x = ag_onnx_flatten(g, x); break;
    default:
      ag_error_set(AG_ERR_UNSUPPORTED, "ag_onnx_sequential: layer %d has no ONNX form", i);
      return -1;
    }
  }
  return x;
}
