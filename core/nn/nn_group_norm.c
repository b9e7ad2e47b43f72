/* GroupNorm of nn.h: torch.nn.GroupNorm's parameters (weight ones, bias
 * zeros, or none without affine) over ag_group_norm. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "anygrad/nn.h"
#include "autograd/grad_internal.h"

static ag_tensor *own_param(ag_tensor *t) {
  if (!t) return NULL;
  ag__grad_own(t);
  ag__grad_tag(t, AG_MEM_PARAMETERS);
  if (ag_tensor_set_requires_grad(t, true) != AG_OK) {
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

ag_status ag_group_norm_init(ag_group_norm_layer *m, ag_device d, ag_dtype dt, int64_t groups, int64_t channels,
                             double eps, bool affine) {
  if (!m) return ag_error_set(AG_ERR_INVALID, "ag_group_norm_init: NULL module");
  memset(m, 0, sizeof *m);
  if (groups < 1 || channels < 1 || channels % groups)
    return ag_error_set(AG_ERR_SHAPE, "ag_group_norm_init: need groups and channels >= 1, groups dividing channels "
                                      "(groups %lld, channels %lld)", (long long)groups, (long long)channels);
  if (!(eps >= 0) || isinf(eps))
    return ag_error_set(AG_ERR_INVALID, "ag_group_norm_init: eps must be finite and >= 0, got %g", eps);
  if (affine) {
    ag_mem_category_push(AG_MEM_PARAMETERS);
    m->weight = own_param(ag_full(d, dt, 1, &channels, 1.0));
    m->bias = m->weight ? own_param(ag_full(d, dt, 1, &channels, 0.0)) : NULL;
    ag_mem_category_pop();
    if (!m->bias) {
      ag_group_norm_free(m);
      return ag_last_status();
    }
  }
  m->groups = groups;
  m->channels = channels;
  m->eps = eps;
  return AG_OK;
}

ag_tensor *ag_group_norm_forward(const ag_group_norm_layer *m, ag_tensor *x) {
  if (!m) {
    ag_error_set(AG_ERR_INVALID, "ag_group_norm_forward: NULL layer");
    return NULL;
  }
  return ag_group_norm(x, m->groups, m->weight, m->bias, m->eps);
}

ag_status ag_group_norm_params(const ag_group_norm_layer *m, const char *prefix, ag_param_list *l) {
  ag_status st = add_named(l, prefix, "weight", m->weight);
  return st == AG_OK ? add_named(l, prefix, "bias", m->bias) : st;
}

void ag_group_norm_free(ag_group_norm_layer *m) {
  if (!m) return;
  ag_tensor_release(m->weight);
  ag_tensor_release(m->bias);
  memset(m, 0, sizeof *m);
}
