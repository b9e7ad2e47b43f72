/* SGD and AdamW through the fused multi-tensor kernels (AG_K_SGD,
 * AG_K_ADAMW), RMSprop composed from elementwise tensor ops, and
 * global-norm clipping with AG_K_SUMSQ and an in-place device scale (no
 * host sync). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "anygrad/optim.h"
#include "autograd/grad_internal.h"
#include "nn/optim_internal.h"

enum { OPT_SGD = 1, OPT_ADAMW = 2, OPT_RMSPROP = 3 };

struct ag_optimizer {
  int kind;
  ag_sgd_options sgd;
  ag_adamw_options adam;
  ag_rmsprop_options rms;
  int n;
  ag_tensor **params;
  char **names;
  ag_tensor **s0, **s1; /* SGD: momentum, -; AdamW: exp_avg, exp_avg_sq; RMSprop: square_avg, momentum_buffer */
  ag_tensor **s2;       /* RMSprop: grad_avg (centered) */
  int64_t steps;
  int n_groups;
  int *group;         /* per parameter: its group */
  double *glr, *gwd;  /* per group: learning rate, weight decay */
  ag_tensor *step_t;  /* i64 CPU scalars mirroring steps and each group's lr, */
  ag_tensor **lr_t;   /* created by ag_optimizer_counters (NULL before) */
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
    if (o->s2) ag_tensor_release(o->s2[i]);
    if (o->names) free(o->names[i]);
  }
  free(o->params);
  free(o->names);
  free(o->s0);
  free(o->s1);
  free(o->s2);
  free(o->multi);
  free(o->group);
  free(o->glr);
  free(o->gwd);
  ag_tensor_release(o->step_t);
  for (int g = 0; o->lr_t && g < o->n_groups; g++) ag_tensor_release(o->lr_t[g]);
  free(o->lr_t);
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

typedef struct tensor_at {
  uintptr_t t;
  int i;
} tensor_at;

static int cmp_tensor_at(const void *a, const void *b) {
  const tensor_at *x = a, *y = b;
  if (x->t != y->t) return x->t < y->t ? -1 : 1;
  return (x->i > y->i) - (x->i < y->i);
}

/* The first repeat of a tensor in ts[0..n): *out_dup its index (the lowest
 * index that repeats an earlier entry), *out_first the earlier entry's; -1
 * when each tensor is listed once. Sorted, so a list of thousands of
 * parameters costs no quadratic scan. Returns false only out of memory. */
static bool find_repeat(ag_tensor *const *ts, int n, int *out_first, int *out_dup) {
  *out_first = *out_dup = -1;
  if (n < 2) return true;
  tensor_at *v = malloc((size_t)n * sizeof *v);
  if (!v) return false;
  for (int i = 0; i < n; i++) v[i] = (tensor_at){(uintptr_t)ts[i], i};
  qsort(v, (size_t)n, sizeof *v, cmp_tensor_at);
  for (int k = 1; k < n; k++)
    if (v[k].t == v[k - 1].t && (*out_dup < 0 || v[k].i < *out_dup)) {
      *out_dup = v[k].i;
      *out_first = v[k - 1].i;
    }
  free(v);
  return true;
}

static ag_optimizer *create(const ag_param_list *params, int kind, const char *fn, bool need_s0,
                            bool need_s1, bool need_s2) {
  if (!params) {
    ag_error_set(AG_ERR_INVALID, "%s: NULL parameter list", fn);
    return NULL;
  }
  /* One tensor listed twice would be updated twice per step (torch refuses
   * a parameter in two groups and warns about repeats within one). */
  int first, dup;
  if (!find_repeat(params->tensors, params->count, &first, &dup)) {
    ag_error_set(AG_ERR_OOM, "%s: out of host memory", fn);
    return NULL;
  }
  if (dup >= 0) {
    ag_error_set(AG_ERR_INVALID, "%s: parameter %d ('%s') is the same tensor as parameter %d ('%s'); list each "
                 "parameter once", fn, dup, params->names[dup], first, params->names[first]);
    return NULL;
  }
  ag_optimizer *o = calloc(1, sizeof *o);
  if (!o) goto oom;
  o->kind = kind;
  o->multi = calloc(1, sizeof *o->multi); /* count read before the first launch sets it */
  o->params = calloc((size_t)params->count + 1, sizeof *o->params);
  o->names = calloc((size_t)params->count + 1, sizeof *o->names);
  o->s0 = calloc((size_t)params->count + 1, sizeof *o->s0);
  o->s1 = calloc((size_t)params->count + 1, sizeof *o->s1);
  o->s2 = calloc((size_t)params->count + 1, sizeof *o->s2);
  o->group = calloc((size_t)params->count + 1, sizeof *o->group);
  o->glr = calloc(1, sizeof *o->glr);
  o->gwd = calloc(1, sizeof *o->gwd);
  o->n_groups = 1;
  if (!o->multi || !o->params || !o->names || !o->s0 || !o->s1 || !o->s2 || !o->group || !o->glr || !o->gwd)
    goto oom;
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
    if (kind != OPT_RMSPROP && !ag__supported(o->ds, kind == OPT_ADAMW ? AG_K_ADAMW : AG_K_SGD, 0, p->dtype, fn))
      goto fail;
    o->params[i] = ag__hold(p);
    o->names[i] = strdup(params->names[i]);
    o->n = i + 1;
    if (!o->names[i]) goto oom;
    if (need_s0 && !(o->s0[i] = state_zeros(p))) goto fail;
    if (need_s1 && !(o->s1[i] = state_zeros(p))) goto fail;
    if (need_s2 && !(o->s2[i] = state_zeros(p))) goto fail;
  }
  return o;
oom:
  ag_error_set(AG_ERR_OOM, "%s: out of host memory", fn);
fail:
  ag_optimizer_free(o);
  return NULL;
}

/* NaN fails every comparison: "< 0" alone let it through. */
static bool fin_nonneg(double v) { return v >= 0 && !isinf(v); }

ag_optimizer *ag_sgd_create(const ag_param_list *params, const ag_sgd_options *opts) {
  if (!opts) {
    ag_error_set(AG_ERR_INVALID, "ag_sgd_create: NULL options");
    return NULL;
  }
  if (!fin_nonneg(opts->lr) || !fin_nonneg(opts->momentum) || !fin_nonneg(opts->weight_decay) ||
      !isfinite(opts->dampening) || (opts->nesterov && (opts->momentum <= 0 || opts->dampening != 0))) {
    ag_error_set(AG_ERR_INVALID,
                 "ag_sgd_create: invalid options (lr %g, momentum %g, weight_decay %g: finite and >= 0; dampening "
                 "%g: finite%s)",
                 opts->lr, opts->momentum, opts->weight_decay, opts->dampening,
                 opts->nesterov ? "; nesterov needs momentum > 0 and dampening 0" : "");
    return NULL;
  }
  ag_optimizer *o = create(params, OPT_SGD, "ag_sgd_create", opts->momentum != 0, false, false);
  if (o) {
    o->sgd = *opts;
    o->glr[0] = opts->lr;
    o->gwd[0] = opts->weight_decay;
  }
  return o;
}

ag_optimizer *ag_adamw_create(const ag_param_list *params, const ag_adamw_options *opts) {
  ag_adamw_options d = opts ? *opts : ag_adamw_defaults();
  if (!fin_nonneg(d.lr) || !fin_nonneg(d.eps) || !(d.beta1 >= 0 && d.beta1 < 1) || !(d.beta2 >= 0 && d.beta2 < 1) ||
      !fin_nonneg(d.weight_decay)) {
    ag_error_set(AG_ERR_INVALID,
                 "ag_adamw_create: invalid options (lr %g, eps %g, weight_decay %g: finite and >= 0; betas %g %g: "
                 "in [0, 1))",
                 d.lr, d.eps, d.weight_decay, d.beta1, d.beta2);
    return NULL;
  }
  ag_optimizer *o = create(params, OPT_ADAMW, "ag_adamw_create", true, true, false);
  if (o) {
    o->adam = d;
    o->glr[0] = d.lr;
    o->gwd[0] = d.weight_decay;
  }
  return o;
}

ag_rmsprop_options ag_rmsprop_defaults(void) {
  return (ag_rmsprop_options){.lr = 1e-2, .alpha = 0.99, .eps = 1e-8, .weight_decay = 0, .momentum = 0,
                              .centered = false};
}

ag_optimizer *ag_rmsprop_create(const ag_param_list *params, const ag_rmsprop_options *opts) {
  ag_rmsprop_options d = opts ? *opts : ag_rmsprop_defaults();
  if (!fin_nonneg(d.lr) || !fin_nonneg(d.eps) || !fin_nonneg(d.weight_decay) || !fin_nonneg(d.momentum) ||
      !fin_nonneg(d.alpha)) {
    ag_error_set(AG_ERR_INVALID,
                 "ag_rmsprop_create: invalid options (lr %g, alpha %g, eps %g, weight_decay %g, momentum %g: "
                 "finite and >= 0)",
                 d.lr, d.alpha, d.eps, d.weight_decay, d.momentum);
    return NULL;
  }
  ag_optimizer *o = create(params, OPT_RMSPROP, "ag_rmsprop_create", true, d.momentum > 0, d.centered);
  if (o) {
    o->rms = d;
    o->glr[0] = d.lr;
    o->gwd[0] = d.weight_decay;
  }
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
static void counters_in(ag_optimizer *o);
static void counters_out(ag_optimizer *o);

/* torch.optim.RMSprop's single-tensor update, one elementwise op at a
 * time in torch's order (a few launches per parameter, no fused kernel):
 *   g += wd * p;  sq = sq * alpha + (1 - alpha) * g * g
 *   centered: ga = ga * alpha + (1 - alpha) * g;  avg = sqrt(sq - ga * ga) + eps
 *   else avg = sqrt(sq) + eps
 *   momentum: buf = buf * momentum + g / avg;  p += -lr * buf
 *   else p += (-lr * g) / avg
 * Every new value of a parameter is computed before any is written, so an
 * error leaves that parameter and its state as they were. */
static ag_status rmsprop_param(ag_optimizer *o, int i) {
  const ag_rmsprop_options *r = &o->rms;
  ag_tensor *p = o->params[i], *g = p->grad;
  const double lr = o->glr[o->group[i]], wd = o->gwd[o->group[i]];
  if (wd != 0) g = ag_add(g, ag_mul_scalar(p, wd));
  ag_tensor *sq = ag_add(ag_mul_scalar(o->s0[i], r->alpha), ag_mul(ag_mul_scalar(g, 1 - r->alpha), g));
  ag_tensor *ga = NULL, *avg;
  if (r->centered) {
    ga = ag_add(ag_mul_scalar(o->s2[i], r->alpha), ag_mul_scalar(g, 1 - r->alpha));
    avg = ag_sqrt(ag_sub(sq, ag_mul(ga, ga)));
  } else {
    avg = ag_sqrt(sq);
  }
  avg = ag_add_scalar(avg, r->eps);
  ag_tensor *buf = NULL, *np;
  if (r->momentum > 0) {
    buf = ag_add(ag_mul_scalar(o->s1[i], r->momentum), ag_div(g, avg));
    np = ag_add(p, ag_mul_scalar(buf, -lr));
  } else {
    np = ag_add(p, ag_div(ag_mul_scalar(g, -lr), avg));
  }
  if (!np || (r->centered && !ga) || (r->momentum > 0 && !buf)) return ag_last_status();
  ag_status st = ag_copy_(o->s0[i], sq);
  if (st == AG_OK && ga) st = ag_copy_(o->s2[i], ga);
  if (st == AG_OK && buf) st = ag_copy_(o->s1[i], buf);
  if (st == AG_OK) st = ag_copy_(p, np);
  return st;
}

static ag_status rmsprop_step(ag_optimizer *o, ag_tensor *inv_scale, ag_tensor *found_inf) {
  if (inv_scale || found_inf)
    return ag_error_set(AG_ERR_UNSUPPORTED, "ag_optimizer_step_amp: RMSprop has no fused update to unscale "
                        "gradients in or to skip on the device; unscale first (ag_grad_scaler_unscale) and step "
                        "with ag_optimizer_step when no gradient is infinite");
  ag_status st = AG_OK;
  ag_no_grad_begin();
  for (int i = 0; i < o->n && st == AG_OK; i++) {
    if (!o->params[i]->grad || !o->params[i]->numel) continue;
    ag_scope_begin();
    st = rmsprop_param(o, i);
    ag_status se = ag_scope_end();
    if (st == AG_OK) st = se;
  }
  ag_grad_mode_end();
  if (st != AG_OK) return st;
  o->steps++;
  counters_out(o);
  return AG_OK;
}

static ag_status step_impl(ag_optimizer *o, ag_tensor *inv_scale, ag_tensor *found_inf) {
  counters_in(o);
  if (o->kind == OPT_RMSPROP) {
    if (o->steps == INT64_MAX)
      return ag_error_set(AG_ERR_STATE, "ag_optimizer_step: the step counter is at its maximum (%lld)",
                          (long long)o->steps);
    return rmsprop_step(o, inv_scale, found_inf);
  }
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
    c.s[1] = o->adam.beta1;
    c.s[2] = o->adam.beta2;
    c.s[3] = o->adam.eps;
    /* Every kernel keeps beta in f32 and forms 1 - beta in f32 (exact), so
     * the bias corrections use that same rounded beta: with the double
     * 0.999 the first step moved a weight by lr * (1 + 6.4e-6), not lr
     * (1 - 0.999f is 0.00099998713), 1e-6 off torch after 5 steps at lr 0.03. */
    c.s[5] = 1.0 - pow((double)(float)o->adam.beta1, (double)t);
    c.s[6] = 1.0 - pow((double)(float)o->adam.beta2, (double)t);
  } else {
    c.s[1] = o->sgd.momentum;
    c.s[2] = o->sgd.dampening;
    c.s[4] = o->sgd.nesterov ? 1 : 0;
    c.s[5] = o->steps == 0 ? 1 : 0;
  }
  c.multi = o->multi;
  for (int grp = 0; grp < o->n_groups; grp++) {
    c.s[0] = o->glr[grp];
    c.s[adamw ? 4 : 3] = o->gwd[grp];
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
        if (o->group[i] != grp || !g || (int)p->dtype != dt || !p->numel) continue;
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
  }
  o->steps = t;
  counters_out(o);
  return AG_OK;
}

void ag_optimizer_zero_grad(ag_optimizer *o) {
  for (int i = 0; o && i < o->n; i++) ag_tensor_zero_grad(o->params[i]);
}

ag_status ag_optimizer_set_lr(ag_optimizer *o, double lr) {
  if (!o) return ag_error_set(AG_ERR_INVALID, "ag_optimizer_set_lr: NULL optimizer");
  if (!fin_nonneg(lr))
    return ag_error_set(AG_ERR_INVALID, "ag_optimizer_set_lr: lr must be finite and >= 0, got %g", lr);
  counters_in(o);
  if (o->kind == OPT_ADAMW) o->adam.lr = lr;
  else if (o->kind == OPT_RMSPROP) o->rms.lr = lr;
  else o->sgd.lr = lr;
  for (int g = 0; g < o->n_groups; g++) o->glr[g] = lr;
  counters_out(o);
  return AG_OK;
}

double ag_optimizer_lr(const ag_optimizer *o) {
  if (!o) return NAN;
  counters_in((ag_optimizer *)o);
  return o->glr[0];
}

int64_t ag_optimizer_steps(const ag_optimizer *o) {
  if (!o) return 0;
  counters_in((ag_optimizer *)o);
  return o->steps;
}

void ag_optimizer_set_steps(ag_optimizer *o, int64_t steps) {
  if (!o || steps < 0) return;
  counters_in(o);
  o->steps = steps;
  counters_out(o);
}

int ag_optimizer_group_count(const ag_optimizer *o) { return o ? o->n_groups : 0; }

static ag_status check_group(const ag_optimizer *o, int group, const char *fn) {
  if (!o) return ag_error_set(AG_ERR_INVALID, "%s: NULL optimizer", fn);
  if (group < 0 || group >= o->n_groups)
    return ag_error_set(AG_ERR_INVALID, "%s: group %d out of range (the optimizer has %d)", fn, group,
                        o->n_groups);
  return AG_OK;
}

ag_status ag_optimizer_set_group_lr(ag_optimizer *o, int group, double lr) {
  ag_status st = check_group(o, group, "ag_optimizer_set_group_lr");
  if (st != AG_OK) return st;
  if (!fin_nonneg(lr))
    return ag_error_set(AG_ERR_INVALID, "ag_optimizer_set_group_lr: lr must be finite and >= 0, got %g", lr);
  counters_in(o);
  o->glr[group] = lr;
  counters_out(o);
  return AG_OK;
}

double ag_optimizer_group_lr(const ag_optimizer *o, int group) {
  if (check_group(o, group, "ag_optimizer_group_lr") != AG_OK) return NAN;
  counters_in((ag_optimizer *)o);
  return o->glr[group];
}

double ag_optimizer_group_weight_decay(const ag_optimizer *o, int group) {
  if (check_group(o, group, "ag_optimizer_group_weight_decay") != AG_OK) return NAN;
  return o->gwd[group];
}

/* ---------------- parameter groups ---------------- */

static ag_optimizer *create_groups(const ag_param_group *groups, int n_groups, const char *fn, double lr,
                                   double wd, ag_optimizer *(*make)(const ag_param_list *, const void *),
                                   const void *opts) {
  if (!groups || n_groups < 1) {
    ag_error_set(AG_ERR_INVALID, "%s: %s", fn, groups ? "n_groups must be >= 1" : "NULL groups");
    return NULL;
  }
  ag_param_list all = {0};
  for (int g = 0; g < n_groups; g++) {
    const ag_param_group *pg = &groups[g];
    double glr = isnan(pg->lr) ? lr : pg->lr, gwd = isnan(pg->weight_decay) ? wd : pg->weight_decay;
    if (!pg->params || !fin_nonneg(glr) || !fin_nonneg(gwd)) {
      ag_error_set(AG_ERR_INVALID, "%s: group %d: %s (lr %g, weight_decay %g)", fn, g,
                   pg->params ? "lr and weight_decay must be finite and >= 0" : "NULL parameter list", glr,
                   gwd);
      ag_params_free(&all);
      return NULL;
    }
    if (ag_params_extend(&all, NULL, pg->params) != AG_OK) {
      ag_params_free(&all);
      return NULL;
    }
  }
  /* A tensor twice, in one group or two: name both places. */
  int first, dup;
  if (!find_repeat(all.tensors, all.count, &first, &dup)) {
    ag_error_set(AG_ERR_OOM, "%s: out of host memory", fn);
    ag_params_free(&all);
    return NULL;
  }
  if (dup >= 0) {
    int gd = 0, gf = 0, id = dup, ifirst = first;
    while (id >= groups[gd].params->count) id -= groups[gd++].params->count;
    while (ifirst >= groups[gf].params->count) ifirst -= groups[gf++].params->count;
    if (gd == gf)
      ag_error_set(AG_ERR_INVALID, "%s: group %d: parameter %d ('%s') is the same tensor as parameter %d ('%s'); "
                   "list each parameter once", fn, gd, id, all.names[dup], ifirst, all.names[first]);
    else
      ag_error_set(AG_ERR_INVALID, "%s: parameter %d ('%s') of group %d is already in an earlier group (group %d, "
                   "parameter %d, '%s')", fn, id, all.names[dup], gd, gf, ifirst, all.names[first]);
    ag_params_free(&all);
    return NULL;
  }
  ag_optimizer *o = make(&all, opts);
  ag_params_free(&all);
  if (!o) return NULL;
  double *glr = realloc(o->glr, (size_t)n_groups * sizeof *glr);
  if (glr) o->glr = glr;
  double *gwd = realloc(o->gwd, (size_t)n_groups * sizeof *gwd);
  if (gwd) o->gwd = gwd;
  if (!glr || !gwd) {
    ag_error_set(AG_ERR_OOM, "%s: out of host memory", fn);
    ag_optimizer_free(o);
    return NULL;
  }
  o->n_groups = n_groups;
  for (int g = 0, k = 0; g < n_groups; g++) {
    o->glr[g] = isnan(groups[g].lr) ? lr : groups[g].lr;
    o->gwd[g] = isnan(groups[g].weight_decay) ? wd : groups[g].weight_decay;
    for (int i = 0; i < groups[g].params->count; i++) o->group[k++] = g;
  }
  return o;
}

static ag_optimizer *make_adamw(const ag_param_list *l, const void *opts) { return ag_adamw_create(l, opts); }
static ag_optimizer *make_sgd(const ag_param_list *l, const void *opts) { return ag_sgd_create(l, opts); }
static ag_optimizer *make_rmsprop(const ag_param_list *l, const void *opts) { return ag_rmsprop_create(l, opts); }

ag_optimizer *ag_rmsprop_create_groups(const ag_param_group *groups, int n_groups,
                                       const ag_rmsprop_options *opts) {
  ag_rmsprop_options d = opts ? *opts : ag_rmsprop_defaults();
  return create_groups(groups, n_groups, "ag_rmsprop_create_groups", d.lr, d.weight_decay, make_rmsprop, &d);
}

ag_optimizer *ag_adamw_create_groups(const ag_param_group *groups, int n_groups, const ag_adamw_options *opts) {
  ag_adamw_options d = opts ? *opts : ag_adamw_defaults();
  return create_groups(groups, n_groups, "ag_adamw_create_groups", d.lr, d.weight_decay, make_adamw, &d);
}

ag_optimizer *ag_sgd_create_groups(const ag_param_group *groups, int n_groups, const ag_sgd_options *opts) {
  if (!opts) {
    ag_error_set(AG_ERR_INVALID, "ag_sgd_create_groups: NULL options");
    return NULL;
  }
  return create_groups(groups, n_groups, "ag_sgd_create_groups", opts->lr, opts->weight_decay, make_sgd, opts);
}

ag_status ag_params_split_decay(const ag_param_list *all, ag_param_list *decay, ag_param_list *no_decay) {
  if (!all || !decay || !no_decay)
    return ag_error_set(AG_ERR_INVALID, "ag_params_split_decay: NULL argument");
  if (decay == no_decay || decay == all || no_decay == all)
    return ag_error_set(AG_ERR_INVALID, "ag_params_split_decay: the three lists must be distinct");
  for (int i = 0; i < all->count; i++) {
    ag_tensor *t = all->tensors[i];
    ag_status st = ag_params_add(ag_tensor_ndim(t) >= 2 ? decay : no_decay, all->names[i], t);
    if (st != AG_OK) return st;
  }
  return AG_OK;
}

/* ---------------- counters as tensors ---------------- */

/* The counters tensors are the truth once they exist (a checkpoint load
 * writes them): read them before every use of steps/lr, write after every
 * change. CPU scalars: no device synchronisation. */
static void counters_in(ag_optimizer *o) {
  if (!o->step_t) return;
  int64_t s;
  if (ag_to_host(o->step_t, &s, sizeof s) == AG_OK && s >= 0) o->steps = s;
  for (int g = 0; g < o->n_groups; g++) {
    double lr;
    if (ag_to_host(o->lr_t[g], &lr, sizeof lr) == AG_OK && lr >= 0 && !isinf(lr)) o->glr[g] = lr;
  }
  if (o->kind == OPT_ADAMW) o->adam.lr = o->glr[0];
  else if (o->kind == OPT_RMSPROP) o->rms.lr = o->glr[0];
  else o->sgd.lr = o->glr[0];
}

static void write_scalar(ag_tensor *dst, ag_dtype dt, const void *v) {
  ag_tensor *src = ag_from_host(AG_CPU, dt, 0, NULL, v);
  if (!src) return;
  ag__grad_own(src);
  ag_copy_(dst, src);
  ag_tensor_release(src);
}

static void counters_out(ag_optimizer *o) {
  if (!o->step_t) return;
  ag_no_grad_begin();
  write_scalar(o->step_t, AG_I64, &o->steps);
  for (int g = 0; g < o->n_groups; g++) write_scalar(o->lr_t[g], AG_F64, &o->glr[g]);
  ag_grad_mode_end();
}

static ag_tensor *counter_tensor(ag_dtype dt) {
  ag_tensor *t = ag_zeros(AG_CPU, dt, 0, NULL);
  if (t) ag__grad_own(t);
  return t;
}

ag_status ag_optimizer_counters(ag_optimizer *o, ag_param_list *l) {
  if (!o || !l) return ag_error_set(AG_ERR_INVALID, "ag_optimizer_counters: NULL argument");
  if (!o->step_t) {
    o->lr_t = calloc((size_t)o->n_groups, sizeof *o->lr_t);
    if (!o->lr_t) return ag_error_set(AG_ERR_OOM, "ag_optimizer_counters: out of host memory");
    for (int g = 0; g < o->n_groups; g++)
      if (!(o->lr_t[g] = counter_tensor(AG_F64))) goto fail;
    if (!(o->step_t = counter_tensor(AG_I64))) goto fail;
    counters_out(o);
  }
  ag_status st = ag_params_add(l, "optimizer.step", o->step_t);
  char buf[48];
  for (int g = 0; st == AG_OK && g < o->n_groups; g++) {
    snprintf(buf, sizeof buf, "optimizer.lr.%d", g);
    st = ag_params_add(l, buf, o->lr_t[g]);
  }
  return st;
fail:
  for (int g = 0; g < o->n_groups; g++) ag_tensor_release(o->lr_t[g]);
  free(o->lr_t);
  o->lr_t = NULL;
  return ag_last_status();
}

ag_status ag_optimizer_state(const ag_optimizer *o, ag_param_list *l) {
  if (!o || !l) return ag_error_set(AG_ERR_INVALID, "ag_optimizer_state: NULL argument");
  char buf[256];
  const bool rms = o->kind == OPT_RMSPROP;
  const char *n0 = o->kind == OPT_ADAMW ? "exp_avg" : rms ? "square_avg" : "momentum";
  const char *n1 = rms ? "momentum_buffer" : "exp_avg_sq";
  for (int i = 0; i < o->n; i++) {
    ag_status st = AG_OK;
    if (o->s0[i]) {
      snprintf(buf, sizeof buf, "%s.%s", o->names[i], n0);
      st = ag_params_add(l, buf, o->s0[i]);
    }
    if (st == AG_OK && o->s1[i]) {
      snprintf(buf, sizeof buf, "%s.%s", o->names[i], n1);
      st = ag_params_add(l, buf, o->s1[i]);
    }
    if (st == AG_OK && o->s2[i]) {
      snprintf(buf, sizeof buf, "%s.grad_avg", o->names[i]);
      st = ag_params_add(l, buf, o->s2[i]);
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
  return ag__clip_grad_norm_ex(params, params, max_norm, NULL, NULL, NULL);
}

ag_tensor *ag__clip_grad_norm_ex(const ag_param_list *norm_params, const ag_param_list *params, double max_norm,
                                 ag_status (*reduce)(ag_tensor *sumsq, void *ctx), void *ctx,
                                 const ag_device *dev_hint) {
  if (!params || !norm_params) {
    ag_error_set(AG_ERR_INVALID, "ag_clip_grad_norm: NULL parameter list");
    return NULL;
  }
  if (!(max_norm > 0)) {
    ag_error_set(AG_ERR_INVALID, "ag_clip_grad_norm: max_norm must be positive, got %g", max_norm);
    return NULL;
  }
  ag_tensor **gs = calloc((size_t)params->count + 1, sizeof *gs);
  ag_kmulti *m = calloc(1, sizeof *m);
  if (!gs || !m) {
    free(gs);
    free(m);
    ag_error_set(AG_ERR_OOM, "ag_clip_grad_norm: out of host memory");
    return NULL;
  }
  int n = 0, nn = 0;
  ag_devstate *ds = NULL;
  ag_device dev = AG_CPU;
  ag_tensor **ns = gs; /* gradients the norm is taken over: gs unless they differ */
  if (norm_params != params) {
    ns = calloc((size_t)norm_params->count + 1, sizeof *ns);
    if (!ns) {
      free(gs);
      free(m);
      ag_error_set(AG_ERR_OOM, "ag_clip_grad_norm: out of host memory");
      return NULL;
    }
    for (int i = 0; i < norm_params->count; i++) {
      ag_tensor *g = norm_params->tensors[i]->grad;
      if (g && g->numel) ns[nn++] = g;
    }
  }
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
    /* The kernels read each gradient as its dtype only where the device
     * runs it (an f64 gradient was summed as floats off the CPU). */
    if (!ag__supported(ds, AG_K_SUMSQ, 0, g->dtype, "ag_clip_grad_norm") ||
        !ag__supported(ds, AG_K_NONFINITE_CHECK, 0, g->dtype, "ag_clip_grad_norm")) {
      if (ns != gs) free(ns);
      free(gs);
      free(m);
      return NULL;
    }
    dev = ag_tensor_device(g);
    gs[n++] = g;
  }
  if (ns == gs) nn = n;
  if (!ds && params->count) dev = ag_tensor_device(params->tensors[0]);
  else if (!ds && dev_hint) dev = *dev_hint;
  if (!ds && nn) ds = ag__ds(ns[0]);
  ag_no_grad_begin();
  ag_status st = AG_OK;
  ag_tensor *total = ag_zeros(dev, AG_F32, 0, NULL);
  if (!total) st = ag_last_status();
  for (int k = 0; st == AG_OK && k < nn; k += AG_KMAX_MULTI) {
    int cnt = nn - k < AG_KMAX_MULTI ? nn - k : AG_KMAX_MULTI;
    ag_tensor *part = ag_empty(dev, AG_F32, 0, NULL);
    st = part ? multi_launch(ds, AG_K_SUMSQ, part, NULL, ns + k, cnt, m, "ag_clip_grad_norm") : ag_last_status();
    ag_tensor *sum = st == AG_OK ? ag_add(total, part) : NULL;
    if (st == AG_OK && !sum) st = ag_last_status();
    ag_tensor_release(part);
    ag_tensor_release(total);
    total = sum;
  }
  if (st == AG_OK && reduce) st = reduce(total, ctx);
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
  if (ns != gs) free(ns);
  free(gs);
  free(m);
  if (st != AG_OK) {
    ag_tensor_release(norm);
    return NULL;
  }
  return norm;
}
