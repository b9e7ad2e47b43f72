/* Vision layers of nn.h: Conv2d and BatchNorm2d, initialised as PyTorch
 * initialises them (so runs are comparable), with the batch-norm running
 * statistics kept as buffers (no gradient) that checkpoints save. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "anygrad/nn.h"
#include "autograd/grad_internal.h"

static ag_tensor *own(ag_tensor *t, bool param) {
  if (!t) return NULL;
  ag__grad_own(t);
  ag__grad_tag(t, param ? AG_MEM_PARAMETERS : AG_MEM_OTHER);
  if (param && ag_tensor_set_requires_grad(t, true) != AG_OK) {
    ag_tensor_release(t);
    return NULL;
  }
  return t;
}

static ag_status add_named(ag_param_list *l, const char *prefix, const char *name, ag_tensor *t) {
  if (!t) return AG_OK;
  char buf[256];
  snprintf(buf, sizeof buf, "%s%s", prefix ? prefix : "", name);
  return ag_params_add(l, buf, t);
}

ag_status ag_conv2d_layer_init(ag_conv2d_layer *m, ag_device d, ag_dtype dt, int64_t in, int64_t out,
                               int kh, int kw, const ag_conv2d_params *p, bool bias, ag_generator *g) {
  if (!m) return ag_error_set(AG_ERR_INVALID, "ag_conv2d_layer_init: NULL module");
  memset(m, 0, sizeof *m);
  m->p = p ? *p : (ag_conv2d_params)AG_CONV2D_DEFAULT;
  if (in < 1 || out < 1 || kh < 1 || kw < 1 || m->p.groups < 1 || in % m->p.groups || out % m->p.groups)
    return ag_error_set(AG_ERR_SHAPE,
                        "ag_conv2d_layer_init: need sizes >= 1 and channels divisible by groups "
                        "(in %lld, out %lld, kernel %dx%d, groups %d)",
                        (long long)in, (long long)out, kh, kw, m->p.groups);
  for (int k = 0; k < 2; k++)
    if (m->p.stride[k] < 1 || m->p.dilation[k] < 1 || m->p.padding[k] < 0)
      return ag_error_set(AG_ERR_INVALID,
                          "ag_conv2d_layer_init: stride and dilation must be >= 1 and padding >= 0 (got %d,%d / %d,%d "
                          "/ %d,%d)", m->p.stride[0], m->p.stride[1], m->p.dilation[0], m->p.dilation[1],
                          m->p.padding[0], m->p.padding[1]);
  /* torch.nn.Conv2d: kaiming_uniform(a=sqrt(5)) = U(-1/sqrt(fan_in), 1/sqrt(fan_in)), bias alike.
   * fan_in and the weight's element count in int64, checked (they wrapped
   * for huge kernels: a negative fan_in gave NaN bounds). */
  int64_t fan_in, wn;
  if (__builtin_mul_overflow(in / m->p.groups, (int64_t)kh, &fan_in) ||
      __builtin_mul_overflow(fan_in, (int64_t)kw, &fan_in) || __builtin_mul_overflow(fan_in, out, &wn))
    return ag_error_set(AG_ERR_INVALID,
                        "ag_conv2d_layer_init: kernel %dx%d with %lld input and %lld output channels (groups %d): "
                        "the weight's element count overflows int64", kh, kw, (long long)in, (long long)out,
                        m->p.groups);
  double bound = 1.0 / sqrt((double)fan_in);
  int64_t ws[4] = {out, in / m->p.groups, kh, kw};
  ag_mem_category_push(AG_MEM_PARAMETERS);
  m->weight = own(ag_rand(d, dt, 4, ws, -bound, bound, g), true);
  if (m->weight && bias) m->bias = own(ag_rand(d, dt, 1, &out, -bound, bound, g), true);
  ag_mem_category_pop();
  if (!m->weight || (bias && !m->bias)) {
    ag_conv2d_layer_free(m);
    return ag_last_status();
  }
  m->in = in;
  m->out = out;
  return AG_OK;
}

ag_tensor *ag_conv2d_layer_forward(const ag_conv2d_layer *m, ag_tensor *x) {
  if (!m) {
    ag_error_set(AG_ERR_INVALID, "ag_conv2d_layer_forward: NULL layer");
    return NULL;
  }
  return ag_conv2d(x, m->weight, m->bias, &m->p);
}

ag_status ag_conv2d_layer_params(const ag_conv2d_layer *m, const char *prefix, ag_param_list *l) {
  ag_status st = add_named(l, prefix, "weight", m->weight);
  return st == AG_OK ? add_named(l, prefix, "bias", m->bias) : st;
}

void ag_conv2d_layer_free(ag_conv2d_layer *m) {
  if (!m) return;
  ag_tensor_release(m->weight);
  ag_tensor_release(m->bias);
  memset(m, 0, sizeof *m);
}

ag_status ag_batch_norm2d_init(ag_batch_norm2d *m, ag_device d, ag_dtype dt, int64_t channels, double momentum,
                               double eps) {
  if (!m) return ag_error_set(AG_ERR_INVALID, "ag_batch_norm2d_init: NULL module");
  memset(m, 0, sizeof *m);
  if (channels < 1) return ag_error_set(AG_ERR_SHAPE, "ag_batch_norm2d_init: channels must be >= 1");
  if (!(momentum >= 0 && momentum <= 1) || !(eps >= 0) || isinf(eps))
    return ag_error_set(AG_ERR_INVALID,
                        "ag_batch_norm2d_init: need 0 <= momentum <= 1 and eps finite and >= 0 (momentum %g, eps %g)",
                        momentum, eps);
  ag_mem_category_push(AG_MEM_PARAMETERS);
  m->weight = own(ag_full(d, dt, 1, &channels, 1.0), true);
  m->bias = m->weight ? own(ag_full(d, dt, 1, &channels, 0.0), true) : NULL;
  m->running_mean = m->bias ? own(ag_full(d, dt, 1, &channels, 0.0), false) : NULL;
  m->running_var = m->running_mean ? own(ag_full(d, dt, 1, &channels, 1.0), false) : NULL;
  ag_mem_category_pop();
  if (!m->running_var) {
    ag_batch_norm2d_free(m);
    return ag_last_status();
  }
  m->channels = channels;
  m->momentum = momentum;
  m->eps = eps;
  return AG_OK;
}

ag_tensor *ag_batch_norm2d_forward(const ag_batch_norm2d *m, ag_tensor *x, bool train) {
  if (!m) {
    ag_error_set(AG_ERR_INVALID, "ag_batch_norm2d_forward: NULL layer");
    return NULL;
  }
  return ag_batch_norm(x, m->running_mean, m->running_var, m->weight, m->bias, train, m->momentum, m->eps);
}

ag_status ag_batch_norm2d_params(const ag_batch_norm2d *m, const char *prefix, ag_param_list *l) {
  ag_status st = add_named(l, prefix, "weight", m->weight);
  return st == AG_OK ? add_named(l, prefix, "bias", m->bias) : st;
}

ag_status ag_batch_norm2d_buffers(const ag_batch_norm2d *m, const char *prefix, ag_param_list *l) {
  ag_status st = add_named(l, prefix, "running_mean", m->running_mean);
  return st == AG_OK ? add_named(l, prefix, "running_var", m->running_var) : st;
}

void ag_batch_norm2d_free(ag_batch_norm2d *m) {
  if (!m) return;
  ag_tensor_release(m->weight);
  ag_tensor_release(m->bias);
  ag_tensor_release(m->running_mean);
  ag_tensor_release(m->running_var);
  memset(m, 0, sizeof *m);
}
