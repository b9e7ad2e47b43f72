/* SGD and AdamW through the fused multi-tensor kernels (AG_K_SGD,
 * AG_K_ADAMW), global-norm clipping with AG_K_SUMSQ and an in-place device
 * scale (no host sync), and the cosine learning-rate schedule. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "anygrad/optim.h"
#include "autograd/grad_internal.h"

enum { OPT_SGD = 1, OPT_ADAMW = 2 };

struct ag_optimizer {
  int kind;
  ag_sgd_options sgd;
  ag_adamw_options adam;
  int n;
  ag_tensor **params;
  char **names;
  ag_tensor **s0, **s1; /* SGD: momentum, -; AdamW: exp_avg, exp_avg_sq */
  int64_t steps;
  ag_devstate *ds;
  ag_kmulti *multi; /* reused every step: 16 KiB is too much for the stack */
};

ag_adamw_options ag_adamw_defaults(void) {
  return (ag_adamw_options){.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01};
}

void ag_optimizer_free(ag_optimizer *o) {
  if (!o) return;
  for (int i = 0; i < o->n; i++) {
    ag__unhold(o->params[i]);
    if (o->s0) ag_tensor_release(o->s0[i]);
    if (o->s1) ag_tensor_release(o->s1[i]);
    if (o->names) free(o->names[i]);
  }
  free(o->params);
  free(o->names);
  free(o->s0);
  free(o->s1);
  free(o->multi);
  free(o);
}

static ag_tensor *state_zeros(const ag_tensor *p) {
  ag_mem_category_push(AG_MEM_OPTIMIZER);
  ag_tensor *t = ag_zeros(ag_tensor_device(p), p->dtype, p->ndim, p->shape);
  ag_mem_category_pop();
  ag__grad_own(t);
  ag__grad_tag(t, AG_MEM_OPTIMIZER);
  return t;
}

static ag_optimizer *create(const ag_param_list *params, int kind, const char *fn, bool need_s0,
                            bool need_s1) {
  if (!params) {
    ag_error_set(AG_ERR_INVALID, "%s: NULL parameter list", fn);
    return NULL;
  }
  ag_optimizer *o = calloc(1, sizeof *o);
  if (!o) goto oom;
  o->kind = kind;
  o->multi = malloc(sizeof *o->multi);
  o->params = calloc((size_t)params->count + 1, sizeof *o->params);
  o->names = calloc((size_t)params->count + 1, sizeof *o->names);
  o->s0 = calloc((size_t)params->count + 1, sizeof *o->s0);
  o->s1 = calloc((size_t)params->count + 1, sizeof *o->s1);
  if (!o->multi || !o->params || !o->names || !o->s0 || !o->s1) goto oom;
  for (int i = 0; i < params->count; i++) {
    ag_tensor *p = params->tensors[i];
    char b[96];
    if (!ag_dtype_is_float(p->dtype) || (kind == OPT_ADAMW && p->dtype != AG_F32)) {
      ag_error_set(AG_ERR_DTYPE, "%s: parameter '%s' is %s; %s", fn, params->names[i],
                   ag_tensor_describe(p, b, sizeof b),
                   kind == OPT_ADAMW ? "AdamW keeps f32 parameters (use f32 master weights)"
                                     : "parameters must be floating point");
      goto fail;
    }
    if (p->grad_fn || !ag_tensor_is_contiguous(p)) {
      ag_error_set(AG_ERR_STATE, "%s: parameter '%s' must be a contiguous leaf tensor", fn, params->names[i]);
      goto fail;
    }
    if (!o->ds) o->ds = ag__ds(p);
    else if (o->ds != ag__ds(p)) {
      ag_error_set(AG_ERR_DEVICE, "%s: parameters on %s and %s", fn, o->ds->label, ag__devlabel(p));
      goto fail;
    }
    /* The fused update kernels read f32 (an f64 parameter would be updated
     * as if it held floats): refuse what the device cannot update. */
    if (!ag__supported(o->ds, kind == OPT_ADAMW ? AG_K_ADAMW : AG_K_SGD, 0, p->dtype, fn)) goto fail;
    o->params[i] = ag__hold(p);
    o->names[i] = strdup(params->names[i]);
    o->n = i + 1;
    if (!o->names[i]) goto oom;
    if (need_s0 && !(o->s0[i] = state_zeros(p))) goto fail;
    if (need_s1 && !(o->s1[i] = state_zeros(p))) goto fail;
  }
  return o;
oom:
  ag_error_set(AG_ERR_OOM, "%s: out of host memory", fn);
fail:
  ag_optimizer_free(o);
  return NULL;
}

ag_optimizer *ag_sgd_create(const ag_param_list *params, const ag_sgd_options *opts) {
  if (!opts) {
    ag_error_set(AG_ERR_INVALID, "ag_sgd_create: NULL options");
    return NULL;
  }
  if (opts->lr < 0 || opts->momentum < 0 || opts->weight_decay < 0 ||
      (opts->nesterov && (opts->momentum <= 0 || opts->dampening != 0))) {
    ag_error_set(AG_ERR_INVALID, "ag_sgd_create: invalid options (lr %g, momentum %g, weight_decay %g%s)",
                 opts->lr, opts->momentum, opts->weight_decay,
                 opts->nesterov ? ", nesterov needs momentum > 0 and dampening 0" : "");
    return NULL;
  }
  ag_optimizer *o = create(params, OPT_SGD, "ag_sgd_create", opts->momentum != 0, false);
  if (o) o->sgd = *opts;
  return o;
}

ag_optimizer *ag_adamw_create(const ag_param_list *params, const ag_adamw_options *opts) {
  ag_adamw_options d = opts ? *opts : ag_adamw_defaults();
  if (d.lr < 0 || d.eps < 0 || d.beta1 < 0 || d.beta1 >= 1 || d.beta2 < 0 || d.beta2 >= 1 ||
      d.weight_decay < 0) {
    ag_error_set(AG_ERR_INVALID, "ag_adamw_create: invalid options (lr %g, betas %g %g, eps %g, wd %g)", d.lr,
                 d.beta1, d.beta2, d.eps, d.weight_decay);
    return NULL;
  }
  ag_optimizer *o = create(params, OPT_ADAMW, "ag_adamw_create", true, true);
  if (o) o->adam = d;
  return o;
}

static ag_status step_impl(ag_optimizer *o, ag_tensor *inv_scale, ag_tensor *found_inf);

ag_status ag_optimizer_step(ag_optimizer *o) {
  if (!o) return ag_error_set(AG_ERR_INVALID, "ag_optimizer_step: NULL optimizer");
  return step_impl(o, NULL, NULL);
}

static ag_status check_amp_scalar(const ag_optimizer *o, const ag_tensor *t, const char *what) {
  char b[96];
  if (!t) return AG_OK;
  if (t->dtype != AG_F32 || t->numel != 1)
    return ag_error_set(AG_ERR_DTYPE, "ag_optimizer_step_amp: %s must be an f32 scalar, got %s", what,
                        ag_tensor_describe(t, b, sizeof b));
  if (o->ds && ag__ds(t) != o->ds)
    return ag_error_set(AG_ERR_DEVICE, "ag_optimizer_step_amp: %s on %s, parameters on %s", what, ag__devlabel(t),
                        o->ds->label);
  return AG_OK;
}

ag_status ag_optimizer_step_amp(ag_optimizer *o, ag_tensor *inv_scale, ag_tensor *found_inf) {
  if (!o) return ag_error_set(AG_ERR_INVALID, "ag_optimizer_step_amp: NULL optimizer");
  ag_status st = check_amp_scalar(o, inv_scale, "inv_scale");
  if (st == AG_OK) st = check_amp_scalar(o, found_inf, "found_inf");
  return st == AG_OK ? step_impl(o, inv_scale, found_inf) : st;
}

ag_status ag_optimizer_params(const ag_optimizer *o, ag_param_list *l) {
  if (!o || !l) return ag_error_set(AG_ERR_INVALID, "ag_optimizer_params: NULL argument");
  for (int i = 0; i < o->n; i++) {
    ag_status st = ag_params_add(l, o->names[i], o->params[i]);
    if (st != AG_OK) return st;
  }
  return AG_OK;
}

/* One launch per group of parameters that share a dtype, up to the
 * kernel's list capacity. */
static ag_status step_impl(ag_optimizer *o, ag_tensor *inv_scale, ag_tensor *found_inf) {
  int per = o->kind == OPT_ADAMW ? 4 : 3;
  int cap = AG_KMAX_MULTI / per;
  if (o->steps == INT64_MAX) /* reachable only through ag_optimizer_set_steps */
    return ag_error_set(AG_ERR_STATE, "ag_optimizer_step: the step counter is at its maximum (%lld)",
                        (long long)o->steps);
  int64_t t = o->steps + 1;
  bool adamw = o->kind == OPT_ADAMW;
  ag_kernel_call c; /* o0 grad-scale, o1 found_inf: absent (base NULL) unless given */
  ag__kcall_init(&c, adamw ? AG_K_ADAMW : AG_K_SGD, 0,
                 adamw ? "ag_optimizer_step (adamw)" : "ag_optimizer_step (sgd)", 2,
                 (ag_tensor *[]){inv_scale, found_inf});
  if (!inv_scale) c.o[0].dtype = AG_F32;
  if (!found_inf) c.o[1].dtype = AG_F32;
  if (adamw) {
    c.s[0] = o->adam.lr;
    c.s[1] = o->adam.beta1;
    c.s[2] = o->adam.beta2;
    c.s[3] = o->adam.eps;
    c.s[4] = o->adam.weight_decay;
    c.s[5] = 1.0 - pow(o->adam.beta1, (double)t);
    c.s[6] = 1.0 - pow(o->adam.beta2, (double)t);
  } else {
    c.s[0] = o->sgd.lr;
    c.s[1] = o->sgd.momentum;
    c.s[2] = o->sgd.dampening;
    c.s[3] = o->sgd.weight_decay;
    c.s[4] = o->sgd.nesterov ? 1 : 0;
    c.s[5] = o->steps == 0 ? 1 : 0;
  }
  c.multi = o->multi;
  for (int dt = 0; dt < AG_DTYPE_COUNT; dt++) {
    int k = 0;
    for (int i = 0; i <= o->n; i++) {
      bool flush = i == o->n || k == cap;
      if (flush && k) {
        o->multi->count = k * per;
        ag_status st = ag__launch(o->ds, &c);
        if (st != AG_OK) return st;
        k = 0;
      }
      if (i == o->n) break;
      ag_tensor *p = o->params[i], *g = p->grad;
      if (!g || (int)p->dtype != dt || !p->numel) continue;
      /* Written in place below: a graph that saved p (or its state) and is
       * backwarded after this step fails instead of using new values. */
      ag__version_bump(p);
      ag__version_bump(o->s0[i]);
      ag__version_bump(o->s1[i]);
      ag__kmulti_set(o->multi, k * per + 0, p);
      ag__kmulti_set(o->multi, k * per + 1, g);
      ag__kmulti_set(o->multi, k * per + 2, o->s0[i]);
      if (per == 4) ag__kmulti_set(o->multi, k * per + 3, o->s1[i]);
      k++;
    }
  }
  o->steps = t;
  return AG_OK;
}

void ag_optimizer_zero_grad(ag_optimizer *o) {
  for (int i = 0; o && i < o->n; i++) ag_tensor_zero_grad(o->params[i]);
}

void ag_optimizer_set_lr(ag_optimizer *o, double lr) {
  if (!o) return;
  if (o->kind == OPT_ADAMW) o->adam.lr = lr;
  else o->sgd.lr = lr;
}

double ag_optimizer_lr(const ag_optimizer *o) {
  if (!o) return NAN;
  return o->kind == OPT_ADAMW ? o->adam.lr : o->sgd.lr;
}

int64_t ag_optimizer_steps(const ag_optimizer *o) { return o ? o->steps : 0; }
void ag_optimizer_set_steps(ag_optimizer *o, int64_t steps) {
  if (o && steps >= 0) o->steps = steps;
}

ag_status ag_optimizer_state(const ag_optimizer *o, ag_param_list *l) {
  if (!o || !l) return ag_error_set(AG_ERR_INVALID, "ag_optimizer_state: NULL argument");
  char buf[256];
  for (int i = 0; i < o->n; i++) {
    ag_status st = AG_OK;
    if (o->s0[i]) {
      snprintf(buf, sizeof buf, "%s.%s", o->names[i], o->kind == OPT_ADAMW ? "exp_avg" : "momentum");
      st = ag_params_add(l, buf, o->s0[i]);
    }
    if (st == AG_OK && o->s1[i]) {
      snprintf(buf, sizeof buf, "%s.exp_avg_sq", o->names[i]);
      st = ag_params_add(l, buf, o->s1[i]);
    }
    if (st != AG_OK) return st;
  }
  return AG_OK;
}

/* ---------------- clipping ---------------- */

static ag_status multi_launch(ag_devstate *ds, ag_kop op, ag_tensor *o0, ag_tensor *o1, ag_tensor **ts,
                              int n, ag_kmulti *m, const char *name) {
  ag_kernel_call c;
  ag__kcall_init(&c, op, 0, name, o1 ? 2 : 1, (ag_tensor *[]){o0, o1});
  m->count = n;
  for (int k = 0; k < n; k++) ag__kmulti_set(m, k, ts[k]);
  c.multi = m;
  return ag__launch(ds, &c);
}

ag_tensor *ag_clip_grad_norm(const ag_param_list *params, double max_norm) {
  if (!params) {
    ag_error_set(AG_ERR_INVALID, "ag_clip_grad_norm: NULL parameter list");
    return NULL;
  }
  if (!(max_norm > 0)) {
    ag_error_set(AG_ERR_INVALID, "ag_clip_grad_norm: max_norm must be positive, got %g", max_norm);
    return NULL;
  }
  ag_tensor **gs = calloc((size_t)params->count + 1, sizeof *gs);
  ag_kmulti *m = malloc(sizeof *m);
  if (!gs || !m) {
    free(gs);
    free(m);
    ag_error_set(AG_ERR_OOM, "ag_clip_grad_norm: out of host memory");
    return NULL;
  }
  int n = 0;
  ag_devstate *ds = NULL;
  ag_device dev = AG_CPU;
  for (int i = 0; i < params->count; i++) {
    ag_tensor *g = params->tensors[i]->grad;
    if (!g || !g->numel) continue;
    if (ds && ag__ds(g) != ds) {
      ag_error_set(AG_ERR_DEVICE, "ag_clip_grad_norm: gradients on %s and %s", ds->label, ag__devlabel(g));
      free(gs);
      free(m);
      return NULL;
    }
    ds = ag__ds(g);
    dev = ag_tensor_device(g);
    gs[n++] = g;
  }
  if (!ds && params->count) dev = ag_tensor_device(params->tensors[0]);
  ag_no_grad_begin();
  ag_status st = AG_OK;
  ag_tensor *total = ag_zeros(dev, AG_F32, 0, NULL);
  if (!total) st = ag_last_status();
  for (int k = 0; st == AG_OK && k < n; k += AG_KMAX_MULTI) {
    int cnt = n - k < AG_KMAX_MULTI ? n - k : AG_KMAX_MULTI;
    ag_tensor *part = ag_empty(dev, AG_F32, 0, NULL);
    st = part ? multi_launch(ds, AG_K_SUMSQ, part, NULL, gs + k, cnt, m, "ag_clip_grad_norm") : ag_last_status();
    ag_tensor *sum = st == AG_OK ? ag_add(total, part) : NULL;
    if (st == AG_OK && !sum) st = ag_last_status();
    ag_tensor_release(part);
    ag_tensor_release(total);
    total = sum;
  }
  ag_tensor *norm = st == AG_OK ? ag_sqrt(total) : NULL;
  ag_tensor_release(total);
  if (st == AG_OK && !norm) st = ag_last_status();
  if (st == AG_OK && n) {
    /* coef = min(max_norm / (norm + 1e-6), 1), applied in place by the
     * multi-tensor scaling kernel; its found-inf flag goes to a scratch. */
    ag_tensor *den = ag_add_scalar(norm, 1e-6);
    ag_tensor *mx = ag_full(dev, AG_F32, 0, NULL, max_norm);
    ag_tensor *q = den && mx ? ag_div(mx, den) : NULL;
    ag_tensor *one = ag_ones(dev, AG_F32, 0, NULL);
    ag_tensor *coef = q && one ? ag_minimum(q, one) : NULL;
    ag_tensor *found = ag_zeros(dev, AG_F32, 0, NULL);
    if (!coef || !found) st = ag_last_status();
    for (int k = 0; st == AG_OK && k < n; k += AG_KMAX_MULTI) {
      int cnt = n - k < AG_KMAX_MULTI ? n - k : AG_KMAX_MULTI;
      st = multi_launch(ds, AG_K_NONFINITE_CHECK, found, coef, gs + k, cnt, m, "ag_clip_grad_norm");
    }
    for (int i = 0; i < n; i++) ag__version_bump(gs[i]); /* scaled in place */
    ag_tensor *rel[] = {den, mx, q, one, coef, found};
    for (size_t i = 0; i < sizeof rel / sizeof *rel; i++) ag_tensor_release(rel[i]);
  }
  ag_grad_mode_end();
  free(gs);
  free(m);
  if (st != AG_OK) {
    ag_tensor_release(norm);
    return NULL;
  }
  return norm;
}

double ag_lr_cosine(int64_t step, int64_t warmup, int64_t total, double lr_max, double lr_min) {
  if (warmup > 0 && step < warmup) return lr_max * (double)(step + 1) / (double)warmup;
  if (total <= warmup) return lr_min;
  double p = (double)(step - warmup) / (double)(total - warmup);
  if (p > 1) p = 1;
  if (p < 0) p = 0;
  return lr_min + 0.5 * (lr_max - lr_min) * (1.0 + cos(M_PI * p));
}
