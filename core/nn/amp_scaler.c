/* Dynamic loss scaling without host syncs: the scale, growth tracker,
 * found-inf flag and skipped count are device scalars; the non-finite check
 * is the multi-tensor AG_K_NONFINITE_CHECK kernel, the skip happens inside the
 * fused optimizer kernels, and the scale update is a handful of scalar ops. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "anygrad/amp.h"
#include "anygrad/autograd.h"
#include "runtime/devstate.h"
#include "tensor/tensor_internal.h"

/* Per-iteration marks on parameters (keys are borrowed pointers, compared
 * only): which were unscaled and which were stepped since the last update. */
enum { MARK_UNSCALED = 1, MARK_STEPPED = 2 };

typedef struct mark {
  const ag_tensor *key;
  int flags;
} mark;

struct ag_grad_scaler {
  ag_grad_scaler_options o;
  ag_devstate *ds;
  /* state (f32 scalars, off any scope, AG_MEM_OPTIMIZER) */
  ag_tensor *scale, *inv_scale, *tracker, *found, *skipped;
  /* constants the update compares and selects with */
  ag_tensor *zero, *one, *growth, *backoff, *threshold, *limit;
  /* since the last update */
  mark *marks; /* open addressing, cap a power of two, at most half full */
  int n_marks, cap_marks;
  const ag_optimizer **stepped;
  int n_stepped, cap_stepped;
  bool checked;   /* the flag saw an unscale or a step */
  bool inv_stale; /* scale may have been loaded from a checkpoint */
  ag_kmulti *multi;
};

ag_grad_scaler_options ag_grad_scaler_defaults(void) {
  return (ag_grad_scaler_options){
      .init_scale = 65536.0, .growth_factor = 2.0, .backoff_factor = 0.5, .growth_interval = 2000, .enabled = true};
}

/* ---------------- marks ---------------- */

static size_t mark_hash(const ag_tensor *k, int cap) {
  uint64_t x = (uint64_t)(uintptr_t)k;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return (size_t)x & (size_t)(cap - 1);
}

static mark *mark_slot(mark *tab, int cap, const ag_tensor *k) {
  size_t i = mark_hash(k, cap);
  while (tab[i].key && tab[i].key != k) i = (i + 1) & (size_t)(cap - 1);
  return &tab[i];
}

static int mark_get(const ag_grad_scaler *s, const ag_tensor *k) {
  if (!s->cap_marks) return 0;
  return mark_slot(s->marks, s->cap_marks, k)->flags;
}

static ag_status mark_add(ag_grad_scaler *s, const ag_tensor *k, int flag, const char *fn) {
  if (2 * (s->n_marks + 1) > s->cap_marks) {
    int cap = s->cap_marks ? 2 * s->cap_marks : 64;
    mark *t = calloc((size_t)cap, sizeof *t);
    if (!t) return ag_error_set(AG_ERR_OOM, "%s: out of host memory", fn);
    for (int i = 0; i < s->cap_marks; i++)
      if (s->marks[i].key) *mark_slot(t, cap, s->marks[i].key) = s->marks[i];
    free(s->marks);
    s->marks = t;
    s->cap_marks = cap;
  }
  mark *m = mark_slot(s->marks, s->cap_marks, k);
  if (!m->key) {
    m->key = k;
    s->n_marks++;
  }
  m->flags |= flag;
  return AG_OK;
}

static void iteration_reset(ag_grad_scaler *s) {
  if (s->marks) memset(s->marks, 0, (size_t)s->cap_marks * sizeof *s->marks);
  s->n_marks = 0;
  s->n_stepped = 0;
  s->checked = false;
}

/* ---------------- lifetime ---------------- */

static ag_tensor *state_scalar(ag_device d, double v) {
  ag_tensor *t = ag_full(d, AG_F32, 0, NULL, v);
  return ag__scope_detach(t);
}

void ag_grad_scaler_free(ag_grad_scaler *s) {
  if (!s) return;
  ag_tensor *ts[] = {s->scale, s->inv_scale, s->tracker, s->found, s->skipped,
                     s->zero,  s->one,       s->growth,  s->backoff, s->threshold, s->limit};
  for (size_t i = 0; i < sizeof ts / sizeof *ts; i++) ag_tensor_release(ts[i]);
  free(s->marks);
  free(s->stepped);
  free(s->multi);
  free(s);
}

ag_grad_scaler *ag_grad_scaler_create(ag_device d, const ag_grad_scaler_options *opts) {
  ag_grad_scaler_options o = opts ? *opts : ag_grad_scaler_defaults();
  if (o.enabled && (!(o.init_scale > 0) || !(o.growth_factor > 1) || !(o.backoff_factor > 0) ||
                    !(o.backoff_factor < 1) || o.growth_interval < 1 || o.growth_interval > (1 << 24) ||
                    o.init_scale > FLT_MAX)) {
    ag_error_set(AG_ERR_INVALID,
                 "ag_grad_scaler_create: invalid options (init_scale %g, growth_factor %g, backoff_factor %g, "
                 "growth_interval %lld)",
                 o.init_scale, o.growth_factor, o.backoff_factor, (long long)o.growth_interval);
    return NULL;
  }
  ag_devstate *ds = ag__devstate(d);
  if (!ds) return NULL;
  ag_grad_scaler *s = calloc(1, sizeof *s);
  if (!s) {
    ag_error_set(AG_ERR_OOM, "ag_grad_scaler_create: out of host memory");
    return NULL;
  }
  s->o = o;
  s->ds = ds;
  if (!o.enabled) return s;
  s->multi = calloc(1, sizeof *s->multi);
  if (!s->multi) {
    ag_error_set(AG_ERR_OOM, "ag_grad_scaler_create: out of host memory");
    ag_grad_scaler_free(s);
    return NULL;
  }
  ag_mem_category_push(AG_MEM_OPTIMIZER);
  s->scale = state_scalar(d, o.init_scale);
  s->inv_scale = state_scalar(d, 1.0 / (double)(float)o.init_scale);
  s->tracker = state_scalar(d, 0);
  s->found = state_scalar(d, 0);
  s->skipped = state_scalar(d, 0);
  s->zero = state_scalar(d, 0);
  s->one = state_scalar(d, 1);
  s->growth = state_scalar(d, o.growth_factor);
  s->backoff = state_scalar(d, o.backoff_factor);
  /* The tracker counts in f32 (exact to 2^24); half a step below the
   * interval keeps the comparison clear of rounding. */
  s->threshold = state_scalar(d, (double)o.growth_interval - 0.5);
  s->limit = state_scalar(d, FLT_MAX);
  ag_mem_category_pop();
  if (!s->scale || !s->inv_scale || !s->tracker || !s->found || !s->skipped || !s->zero || !s->one ||
      !s->growth || !s->backoff || !s->threshold || !s->limit) {
    ag_grad_scaler_free(s);
    return NULL;
  }
  return s;
}

/* ---------------- scale ---------------- */

ag_tensor *ag_grad_scaler_scale(ag_grad_scaler *s, ag_tensor *loss) {
  if (!s) {
    ag_error_set(AG_ERR_INVALID, "ag_grad_scaler_scale: NULL scaler");
    return NULL;
  }
  if (!loss) return NULL;
  if (ag__bad_tensor(loss, "ag_grad_scaler_scale")) return NULL;
  if (!s->o.enabled) return ag__alias(loss);
  if (ag__ds(loss) != s->ds) {
    ag_error_set(AG_ERR_DEVICE, "ag_grad_scaler_scale: loss on %s, scaler on %s", ag__devlabel(loss), s->ds->label);
    return NULL;
  }
  /* In f32 whatever the loss's dtype: loss * 65536 overflows f16. */
  ag_tensor *l = loss->dtype == AG_F32 ? loss : ag_cast(loss, AG_F32);
  ag_tensor *r = l ? ag_mul(l, s->scale) : NULL;
  if (l != loss) ag_tensor_release(l);
  return r;
}

/* ---------------- non-finite check ---------------- */

/* Set the flag on inf/nan in gs; with unscale, multiply them by 1/scale in
 * place (without, the kernel only reads them). */
static ag_status check_grads(ag_grad_scaler *s, ag_tensor **gs, int n, bool unscale, const char *fn) {
  if (s->inv_stale) {
    ag_no_grad_begin();
    ag_tensor *inv = ag_div(s->one, s->scale);
    ag_status st = inv ? ag_copy_(s->inv_scale, inv) : ag_last_status();
    ag_tensor_release(inv);
    ag_grad_mode_end();
    if (st != AG_OK) return st;
    s->inv_stale = false;
  }
  for (int i = 0; i < n; i++)
    if (!ag__supported(s->ds, AG_K_NONFINITE_CHECK, 0, gs[i]->dtype, fn)) return ag_last_status();
  for (int k = 0; k < n; k += AG_KMAX_MULTI) {
    int cnt = n - k < AG_KMAX_MULTI ? n - k : AG_KMAX_MULTI;
    ag_kernel_call c;
    ag__kcall_init(&c, AG_K_NONFINITE_CHECK, 0, fn, unscale ? 2 : 1,
                   (ag_tensor *[]){s->found, s->inv_scale});
    s->multi->count = cnt;
    for (int j = 0; j < cnt; j++) ag__kmulti_set(s->multi, j, gs[k + j]);
    c.multi = s->multi;
    ag_status st = ag__launch(s->ds, &c);
    if (st != AG_OK) return st;
    for (int j = 0; unscale && j < cnt; j++) ag__version_bump(gs[k + j]); /* unscaled in place */
  }
  return AG_OK;
}

/* The gradients of l's parameters (borrowed), checked for device. *out
 * holds n entries; params[i] of each in *out_params. */
static ag_status collect(ag_grad_scaler *s, const ag_param_list *l, ag_tensor ***out, ag_tensor ***out_params,
                         int *out_n, const char *fn) {
  *out = calloc((size_t)l->count + 1, sizeof **out);
  *out_params = calloc((size_t)l->count + 1, sizeof **out_params);
  if (!*out || !*out_params) return ag_error_set(AG_ERR_OOM, "%s: out of host memory", fn);
  int n = 0;
  for (int i = 0; i < l->count; i++) {
    ag_tensor *p = l->tensors[i], *g = p ? p->grad : NULL;
    if (!g || !g->numel) continue;
    if (ag__ds(g) != s->ds)
      return ag_error_set(AG_ERR_DEVICE, "%s: gradient of '%s' on %s, scaler on %s", fn, l->names[i],
                          ag__devlabel(g), s->ds->label);
    (*out_params)[n] = p;
    (*out)[n++] = g;
  }
  *out_n = n;
  return AG_OK;
}

static ag_status unscale_list(ag_grad_scaler *s, const ag_param_list *l, const char *fn) {
  ag_tensor **gs = NULL, **ps = NULL;
  int n = 0;
  ag_status st = collect(s, l, &gs, &ps, &n, fn);
  for (int i = 0; st == AG_OK && i < n; i++) {
    int f = mark_get(s, ps[i]);
    if (f)
      st = ag_error_set(AG_ERR_STATE, "%s: the gradient of '%s' was already %s since the last update", fn,
                        l->names[i], f & MARK_STEPPED ? "used by a step" : "unscaled");
  }
  if (st == AG_OK) st = check_grads(s, gs, n, true, fn);
  for (int i = 0; st == AG_OK && i < n; i++) st = mark_add(s, ps[i], MARK_UNSCALED, fn);
  if (st == AG_OK) s->checked = true;
  free(gs);
  free(ps);
  return st;
}

ag_status ag_grad_scaler_unscale_params_(ag_grad_scaler *s, const ag_param_list *params) {
  if (!s || !params) return ag_error_set(AG_ERR_INVALID, "ag_grad_scaler_unscale_params_: NULL argument");
  if (!s->o.enabled) return AG_OK;
  return unscale_list(s, params, "ag_grad_scaler_unscale_params_");
}

static bool was_stepped(const ag_grad_scaler *s, const ag_optimizer *opt) {
  for (int i = 0; i < s->n_stepped; i++)
    if (s->stepped[i] == opt) return true;
  return false;
}

ag_status ag_grad_scaler_unscale_(ag_grad_scaler *s, ag_optimizer *opt) {
  const char *fn = "ag_grad_scaler_unscale_";
  if (!s || !opt) return ag_error_set(AG_ERR_INVALID, "%s: NULL argument", fn);
  if (!s->o.enabled) return AG_OK;
  if (was_stepped(s, opt)) return ag_error_set(AG_ERR_STATE, "%s: called after this optimizer's step (call update first)", fn);
  ag_param_list l = {0};
  ag_status st = ag_optimizer_params(opt, &l);
  if (st == AG_OK) st = unscale_list(s, &l, fn);
  ag_params_free(&l);
  return st;
}

/* ---------------- step ---------------- */

ag_status ag_grad_scaler_step(ag_grad_scaler *s, ag_optimizer *opt) {
  const char *fn = "ag_grad_scaler_step";
  if (!s || !opt) return ag_error_set(AG_ERR_INVALID, "%s: NULL argument", fn);
  if (!s->o.enabled) return ag_optimizer_step(opt);
  if (was_stepped(s, opt))
    return ag_error_set(AG_ERR_STATE, "%s: this optimizer already stepped since the last update", fn);
  if (s->n_stepped == s->cap_stepped) {
    int cap = s->cap_stepped ? 2 * s->cap_stepped : 4;
    const ag_optimizer **p = realloc(s->stepped, (size_t)cap * sizeof *p);
    if (!p) return ag_error_set(AG_ERR_OOM, "%s: out of host memory", fn);
    s->stepped = p;
    s->cap_stepped = cap;
  }
  ag_param_list l = {0};
  ag_tensor **gs = NULL, **ps = NULL;
  int n = 0;
  ag_status st = ag_optimizer_params(opt, &l);
  if (st == AG_OK) st = collect(s, &l, &gs, &ps, &n, fn);
  int unscaled = 0;
  for (int i = 0; st == AG_OK && i < n; i++) unscaled += (mark_get(s, ps[i]) & MARK_UNSCALED) != 0;
  if (st == AG_OK && unscaled && unscaled != n)
    st = ag_error_set(AG_ERR_STATE, "%s: %d of the optimizer's %d gradients were unscaled; unscale all or none", fn,
                      unscaled, n);
  if (st == AG_OK) {
    /* Not unscaled: check without writing, and let the fused update
     * multiply by 1/scale as it reads each gradient (one pass saved). */
    bool fused = unscaled == 0 && n > 0;
    if (fused) st = check_grads(s, gs, n, false, fn);
    if (st == AG_OK) st = ag_optimizer_step_amp(opt, fused ? s->inv_scale : NULL, s->found);
  }
  for (int i = 0; st == AG_OK && i < n; i++) st = mark_add(s, ps[i], MARK_STEPPED, fn);
  if (st == AG_OK) {
    s->stepped[s->n_stepped++] = opt;
    s->checked = true;
  }
  free(gs);
  free(ps);
  ag_params_free(&l);
  return st;
}

/* ---------------- update ---------------- */

/* PyTorch's _amp_update_scale_ as scalar ops:
 *   succ   = tracker + 1;  grow = succ >= interval
 *   factor = found ? backoff : (grow ? growth : 1)
 *   scale' = scale * factor, kept only if finite
 *   tracker' = (found || grow) ? 0 : succ
 * then skipped += found and found = 0. */
ag_status ag_grad_scaler_update(ag_grad_scaler *s) {
  const char *fn = "ag_grad_scaler_update";
  if (!s) return ag_error_set(AG_ERR_INVALID, "%s: NULL scaler", fn);
  if (!s->o.enabled) return AG_OK;
  if (!s->checked)
    return ag_error_set(AG_ERR_STATE, "%s: no unscale_ or step since the last update: nothing was checked", fn);
  ag_scope_begin();
  ag_no_grad_begin();
  /* All operands are f32 already: no casts, whatever region encloses us. */
  bool ac = ag_autocast_begin(AG_F32) == AG_OK;
  ag_tensor *f = s->found;
  ag_tensor *succ = ag_add_scalar(s->tracker, 1.0);
  ag_tensor *grow = ag_gt(succ, s->threshold);
  ag_tensor *fac_ok = ag_where(grow, s->growth, s->one);
  ag_tensor *fac = ag_where(f, s->backoff, fac_ok);
  ag_tensor *cand = ag_mul(s->scale, fac);
  ag_tensor *finite = ag_lt(cand, s->limit);
  ag_tensor *nscale = ag_where(finite, cand, s->scale);
  ag_tensor *ninv = ag_div(s->one, nscale);
  ag_tensor *tr_ok = ag_where(grow, s->zero, succ);
  ag_tensor *ntr = ag_where(f, s->zero, tr_ok);
  ag_tensor *nskip = ag_add(s->skipped, f);
  ag_status st = nskip && ninv && ntr ? AG_OK : ag_last_status();
  if (st == AG_OK) st = ag_copy_(s->scale, nscale);
  if (st == AG_OK) st = ag_copy_(s->inv_scale, ninv);
  if (st == AG_OK) st = ag_copy_(s->tracker, ntr);
  if (st == AG_OK) st = ag_copy_(s->skipped, nskip);
  if (st == AG_OK) st = ag_fill_(s->found, 0.0);
  if (ac) ag_autocast_end();
  ag_grad_mode_end();
  ag_scope_end();
  if (st == AG_OK) {
    iteration_reset(s);
    s->inv_stale = false;
  }
  return st;
}

/* ---------------- reads ---------------- */

double ag_grad_scaler_get_scale(ag_grad_scaler *s) {
  if (!s) {
    ag_error_set(AG_ERR_INVALID, "ag_grad_scaler_get_scale: NULL scaler");
    return NAN;
  }
  return s->o.enabled ? ag_item(s->scale) : 1.0;
}

int64_t ag_grad_scaler_skipped_steps(ag_grad_scaler *s) {
  if (!s) {
    ag_error_set(AG_ERR_INVALID, "ag_grad_scaler_skipped_steps: NULL scaler");
    return -1;
  }
  if (!s->o.enabled) return 0;
  double v = ag_item(s->skipped);
  return isnan(v) ? -1 : (int64_t)v;
}

ag_status ag_grad_scaler_state(ag_grad_scaler *s, const char *prefix, ag_param_list *l) {
  if (!s || !l) return ag_error_set(AG_ERR_INVALID, "ag_grad_scaler_state: NULL argument");
  if (!s->o.enabled) return AG_OK;
  s->inv_stale = true; /* the caller may load a scale into it */
  const char *names[] = {"scale", "growth_tracker", "skipped"};
  ag_tensor *ts[] = {s->scale, s->tracker, s->skipped};
  char buf[256];
  for (int i = 0; i < 3; i++) {
    snprintf(buf, sizeof buf, "%s%s", prefix ? prefix : "", names[i]);
    ag_status st = ag_params_add(l, buf, ts[i]);
    if (st != AG_OK) return st;
  }
  return AG_OK;
}
