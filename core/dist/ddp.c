/* Data parallelism on top of a process group: gradient buckets reduced from
 * autograd's gradient-ready hooks, the finish that writes them back, no_sync
 * micro-steps, and the heterogeneous balance of the global batch. Collectives
 * come from dist.h; this file only decides what to reduce and when. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "anygrad/ddp.h"
#include "autograd/grad_internal.h"

typedef struct ddp_param {
  struct ag_ddp *d;
  ag_tensor *p;    /* held */
  ag_tensor *view; /* p's slot in its bucket's flat buffer (owned) */
  int bucket;
  uint64_t hook_id;
  bool hooked;
  bool ready; /* its gradient for this step is complete */
} ddp_param;

typedef struct ddp_bucket {
  ag_dtype dtype;
  int64_t numel;
  ag_tensor *flat; /* owned, outside any scope */
  int first, count; /* members: d->order[first .. first+count) */
  int pending;      /* members not ready yet */
  bool launched;
  ag_work *work;
} ddp_bucket;

struct ag_ddp {
  ag_group *g;
  int rank, size;
  ag_device dev;
  int np, nb;
  ddp_param *params;
  ddp_bucket *buckets;
  int *order;
  int next_launch; /* buckets are launched strictly in index order */
  bool no_sync;
  double weight;
  int64_t bucket_bytes;
  /* balance */
  bool balance;
  ag_ddp_balance_options bo;
  int64_t *shares, *next_shares;
  bool have_next;
  int64_t bsteps; /* steps finished since balance was enabled */
  double win_rows, win_s; /* measured steps of the current interval */
  double thr_ema;
  double t_begin;
  bool step_open;
  double slowdown;
  ag_ddp_stats stats;
};

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static bool step_started(const ag_ddp *d) { return d->next_launch > 0; }

void ag_ddp_options_default(ag_ddp_options *o) {
  if (!o) return;
  memset(o, 0, sizeof *o);
  o->bucket_bytes = AG_DDP_DEFAULT_BUCKET_BYTES;
}

void ag_ddp_balance_options_default(ag_ddp_balance_options *o) {
  if (!o) return;
  memset(o, 0, sizeof *o);
  o->warmup_steps = 3;
  o->interval = 5;
  o->smoothing = 0.5;
  o->hysteresis = 0.03;
  o->min_rows = 1;
}

/* A persistent tensor (no scope owns it) over fresh memory of ds. */
static ag_tensor *persistent_new(ag_devstate *ds, ag_dtype dt, int64_t n) {
  ag_mem_category_push(AG_MEM_GRADIENTS);
  ag_tensor *t = ag__tensor_new(ds, dt, 1, &n);
  ag_mem_category_pop();
  if (t) {
    ag__scope_detach(t);
    ag__grad_tag(t, AG_MEM_GRADIENTS);
  }
  return t;
}

/* ---------------- launching buckets ---------------- */

/* view = g * w in one pass (the kernel's affine map). */
static ag_status scaled_copy(ag_tensor *view, ag_tensor *g, double w) {
  if (!view->numel) return AG_OK;
  ag_kernel_call c;
  ag__kcall_init(&c, AG_K_UNARY, AG_U_AFFINE, "ag_ddp (bucket)", 2, (ag_tensor *[]){view, g});
  c.s[0] = w;
  c.s[1] = 0.0;
  ag_status st = ag__launch(ag__ds(view), &c);
  if (st == AG_OK) ag__version_bump(view);
  return st;
}

/* Copy the members' gradients (zeros for a member without one) into the
 * flat buffer, scaled by the weight (in the same pass where the backend
 * has the affine map for the dtype and every gradient has the bucket's
 * dtype and device, else as a second pass), and queue the all-reduce. */
static ag_status bucket_launch(ag_ddp *d, ddp_bucket *b) {
  ag_status st = AG_OK;
  ag_devstate *ds = ag__ds(b->flat);
  bool fused = d->weight != 1.0 && ag__supports(ds, AG_K_UNARY, AG_U_AFFINE, b->dtype);
  for (int k = 0; fused && k < b->count; k++) {
    ag_tensor *g = d->params[d->order[b->first + k]].p->grad;
    if (g && (g->dtype != b->dtype || ag__ds(g) != ds || !ag_tensor_is_contiguous(g))) fused = false;
  }
  ag_scope_begin();
  for (int k = 0; st == AG_OK && k < b->count; k++) {
    ddp_param *pp = &d->params[d->order[b->first + k]];
    ag_tensor *g = pp->p->grad;
    st = !g ? ag_fill_(pp->view, 0.0) : fused ? scaled_copy(pp->view, g, d->weight) : ag_copy_(pp->view, g);
  }
  if (st == AG_OK && !fused && d->weight != 1.0) {
    ag_tensor *s = ag_mul_scalar(b->flat, d->weight);
    st = s ? ag_copy_(b->flat, s) : ag_last_status();
    ag_tensor_release(s);
  }
  ag_status se = ag_scope_end();
  if (st == AG_OK) st = se;
  if (st == AG_OK) st = ag_all_reduce(d->g, b->flat, AG_DIST_SUM, &b->work);
  b->launched = true; /* even on failure: the group is broken, never retried */
  return st;
}

/* Launch the buckets, in order, that are complete (all of them when
 * `all`): every rank launches the same sequence of collectives. */
static ag_status launch_ready(ag_ddp *d, bool all) {
  ag_status st = AG_OK;
  while (st == AG_OK && d->next_launch < d->nb && (all || d->buckets[d->next_launch].pending == 0)) {
    st = bucket_launch(d, &d->buckets[d->next_launch]);
    if (all) d->stats.launched_at_finish++;
    else d->stats.launched_in_hooks++;
    d->next_launch++;
  }
  return st;
}

static ag_status ddp_hook(ag_tensor *t, void *user) {
  ddp_param *pp = user;
  ag_ddp *d = pp->d;
  (void)t;
  if (d->no_sync) return AG_OK;
  ddp_bucket *b = &d->buckets[pp->bucket];
  if (pp->ready) {
    if (b->launched)
      return ag_error_set(AG_ERR_STATE, "ag_ddp: a parameter's gradient changed after its bucket was reduced "
                          "(a second backward before ag_ddp_finish, or a parameter used both inside and outside "
                          "an activation-checkpointed block)");
    return AG_OK;
  }
  pp->ready = true;
  b->pending--;
  return launch_ready(d, false);
}

/* ---------------- create / destroy ---------------- */

static void ddp_free(ag_ddp *d) {
  for (int i = 0; i < d->np; i++) {
    ddp_param *pp = &d->params[i];
    if (pp->hooked) ag_tensor_remove_grad_hook(pp->p, pp->hook_id);
    ag_tensor_release(pp->view);
    ag__unhold(pp->p);
  }
  for (int i = 0; i < d->nb; i++) {
    if (d->buckets[i].work) {
      ag_work_wait(d->buckets[i].work);
      ag_work_release(d->buckets[i].work);
    }
    ag_tensor_release(d->buckets[i].flat);
  }
  free(d->params);
  free(d->buckets);
  free(d->order);
  free(d->shares);
  free(d->next_shares);
  free(d);
}

void ag_ddp_destroy(ag_ddp *d) {
  if (d) ddp_free(d);
}

/* Copy every bucket's parameters into its buffer, broadcast it from root,
 * copy back: one collective per bucket. */
static ag_status broadcast_params(ag_ddp *d, int root) {
  ag_status st = AG_OK;
  ag_no_grad_begin();
  for (int bi = 0; st == AG_OK && bi < d->nb; bi++) {
    ddp_bucket *b = &d->buckets[bi];
    for (int k = 0; st == AG_OK && k < b->count; k++) {
      ddp_param *pp = &d->params[d->order[b->first + k]];
      st = ag_copy_(pp->view, pp->p);
    }
    if (st == AG_OK) st = ag_broadcast(d->g, b->flat, root, NULL);
    for (int k = 0; st == AG_OK && k < b->count; k++) {
      ddp_param *pp = &d->params[d->order[b->first + k]];
      st = ag_copy_(pp->p, pp->view);
    }
  }
  ag_grad_mode_end();
  return st;
}

ag_status ag_ddp_create(ag_group *g, const ag_param_list *params, const ag_ddp_options *opts, ag_ddp **out) {
  if (out) *out = NULL;
  if (!g || !params || !out) return ag_error_set(AG_ERR_INVALID, "ag_ddp_create: NULL group, params or out");
  if (params->count < 1) return ag_error_set(AG_ERR_INVALID, "ag_ddp_create: empty parameter list");
  ag_ddp_options o;
  ag_ddp_options_default(&o);
  if (opts) o = *opts;
  if (o.bucket_bytes < 0) return ag_error_set(AG_ERR_INVALID, "ag_ddp_create: negative bucket_bytes");
  if (o.bucket_bytes == 0) o.bucket_bytes = AG_DDP_DEFAULT_BUCKET_BYTES;
  ag_device dev = ag_group_device(g);
  for (int i = 0; i < params->count; i++) {
    ag_tensor *p = params->tensors[i];
    const char *nm = params->names && params->names[i] ? params->names[i] : "?";
    if (!p || p->grad_fn || !p->requires_grad)
      return ag_error_set(AG_ERR_INVALID, "ag_ddp_create: parameter %d (%s) is not a leaf that requires grad", i, nm);
    if (!ag_tensor_is_contiguous(p))
      return ag_error_set(AG_ERR_INVALID, "ag_ddp_create: parameter %d (%s) is not contiguous", i, nm);
    if (!ag_device_eq(ag_tensor_device(p), dev)) {
      char a[32], b[32];
      ag_device_str(ag_tensor_device(p), a, sizeof a);
      ag_device_str(dev, b, sizeof b);
      return ag_error_set(AG_ERR_DEVICE, "ag_ddp_create: parameter %d (%s) is on %s, the group's rank on %s", i, nm, a, b);
    }
  }
  ag_ddp *d = calloc(1, sizeof *d);
  if (!d) return ag_error_set(AG_ERR_OOM, "ag_ddp_create: out of host memory");
  d->g = g;
  d->rank = ag_group_rank(g);
  d->size = ag_group_size(g);
  d->dev = dev;
  d->weight = 1.0 / d->size;
  d->slowdown = 1.0;
  d->bucket_bytes = o.bucket_bytes;
  d->np = params->count;
  d->params = calloc((size_t)d->np, sizeof *d->params);
  d->buckets = calloc((size_t)d->np, sizeof *d->buckets); /* at most one per parameter */
  d->order = calloc((size_t)d->np, sizeof *d->order);
  if (!d->params || !d->buckets || !d->order) {
    ddp_free(d);
    return ag_error_set(AG_ERR_OOM, "ag_ddp_create: out of host memory");
  }
  for (int i = 0; i < d->np; i++) {
    d->params[i].d = d;
    d->params[i].p = ag__hold(params->tensors[i]);
  }
  /* Buckets in reverse parameter order (the order backward finishes them). */
  int nb = 0, no = 0;
  int64_t cur_bytes = 0;
  for (int i = d->np - 1; i >= 0; i--) {
    ag_tensor *p = d->params[i].p;
    int64_t bytes = p->numel * (int64_t)ag_dtype_size(p->dtype);
    ddp_bucket *b = nb ? &d->buckets[nb - 1] : NULL;
    if (!b || b->dtype != p->dtype || (cur_bytes > 0 && cur_bytes + bytes > o.bucket_bytes)) {
      b = &d->buckets[nb++];
      b->dtype = p->dtype;
      b->first = no;
      cur_bytes = 0;
    }
    d->params[i].bucket = nb - 1;
    d->order[no++] = i;
    b->count++;
    b->numel += p->numel;
    cur_bytes += bytes;
  }
  d->nb = nb;
  ag_status st = AG_OK;
  ag_devstate *ds = ag__ds(d->params[0].p);
  for (int bi = 0; st == AG_OK && bi < nb; bi++) {
    ddp_bucket *b = &d->buckets[bi];
    b->pending = b->count;
    b->flat = persistent_new(ds, b->dtype, b->numel > 0 ? b->numel : 1);
    if (!b->flat) st = ag_last_status();
    int64_t off = 0;
    for (int k = 0; st == AG_OK && k < b->count; k++) {
      ddp_param *pp = &d->params[d->order[b->first + k]];
      int64_t strides[AG_MAX_DIMS];
      ag__contiguous_strides(pp->p->ndim, pp->p->shape, strides);
      pp->view = ag__tensor_view(b->flat, pp->p->ndim, pp->p->shape, strides, off);
      if (!pp->view) st = ag_last_status();
      else ag__scope_detach(pp->view);
      off += pp->p->numel;
    }
  }
  if (st == AG_OK && !o.no_broadcast) st = broadcast_params(d, 0);
  for (int i = 0; st == AG_OK && i < d->np; i++) {
    st = ag_tensor_add_grad_hook(d->params[i].p, ddp_hook, &d->params[i], &d->params[i].hook_id);
    d->params[i].hooked = st == AG_OK;
  }
  if (st != AG_OK) {
    ddp_free(d);
    return st;
  }
  d->stats.n_buckets = nb;
  d->stats.bucket_bytes = o.bucket_bytes;
  *out = d;
  return AG_OK;
}

ag_status ag_ddp_broadcast(ag_ddp *d, const ag_param_list *l, int root) {
  if (!d || !l) return ag_error_set(AG_ERR_INVALID, "ag_ddp_broadcast: NULL argument");
  if (root < 0 || root >= d->size)
    return ag_error_set(AG_ERR_INVALID, "ag_ddp_broadcast: root %d outside 0..%d", root, d->size - 1);
  ag_status st = AG_OK;
  for (int i = 0; st == AG_OK && i < l->count; i++) {
    ag_tensor *t = l->tensors[i];
    if (!t || !ag_tensor_is_contiguous(t))
      return ag_error_set(AG_ERR_INVALID, "ag_ddp_broadcast: entry %d is NULL or not contiguous", i);
    st = ag_broadcast(d->g, t, root, NULL);
    ag__version_bump(t); /* written in place */
  }
  return st;
}

/* ---------------- weights, no_sync ---------------- */

ag_status ag_ddp_set_weight(ag_ddp *d, double w) {
  if (!d || !isfinite(w) || w < 0)
    return ag_error_set(AG_ERR_INVALID, "ag_ddp_set_weight: NULL or weight not finite and >= 0");
  if (step_started(d))
    return ag_error_set(AG_ERR_STATE, "ag_ddp_set_weight: a bucket of this step was already reduced");
  d->weight = w;
  return AG_OK;
}

double ag_ddp_weight(const ag_ddp *d) { return d ? d->weight : NAN; }

ag_status ag_ddp_no_sync_begin(ag_ddp *d) {
  if (!d) return ag_error_set(AG_ERR_INVALID, "ag_ddp_no_sync_begin: NULL");
  if (d->no_sync) return ag_error_set(AG_ERR_STATE, "ag_ddp_no_sync_begin: already in a no_sync region");
  if (step_started(d))
    return ag_error_set(AG_ERR_STATE, "ag_ddp_no_sync_begin: this step's reduction has started (call ag_ddp_finish)");
  d->no_sync = true;
  return AG_OK;
}

ag_status ag_ddp_no_sync_end(ag_ddp *d) {
  if (!d) return ag_error_set(AG_ERR_INVALID, "ag_ddp_no_sync_end: NULL");
  if (!d->no_sync) return ag_error_set(AG_ERR_STATE, "ag_ddp_no_sync_end: no no_sync region is open");
  d->no_sync = false;
  return AG_OK;
}

/* ---------------- balance ---------------- */

ag_status ag_ddp_balance_enable(ag_ddp *d, const ag_ddp_balance_options *o) {
  if (!d || !o) return ag_error_set(AG_ERR_INVALID, "ag_ddp_balance_enable: NULL argument");
  if (d->size > 64) return ag_error_set(AG_ERR_INVALID, "ag_ddp_balance_enable: at most 64 ranks are balanced");
  if (o->min_rows < 1 || o->global_rows < (int64_t)d->size * o->min_rows || o->interval < 1 ||
      !(o->smoothing > 0 && o->smoothing <= 1) || !(o->hysteresis >= 0) || o->warmup_steps < 0)
    return ag_error_set(AG_ERR_INVALID, "ag_ddp_balance_enable: need global_rows >= size * min_rows (%d x %lld), "
                        "min_rows >= 1, interval >= 1, smoothing in (0, 1], hysteresis >= 0, warmup >= 0",
                        d->size, (long long)o->min_rows);
  if (!d->shares) {
    d->shares = calloc((size_t)d->size, sizeof *d->shares);
    d->next_shares = calloc((size_t)d->size, sizeof *d->next_shares);
    if (!d->shares || !d->next_shares) return ag_error_set(AG_ERR_OOM, "ag_ddp_balance_enable: out of host memory");
  }
  d->bo = *o;
  for (int r = 0; r < d->size; r++)
    d->shares[r] = o->global_rows / d->size + (r < o->global_rows % d->size ? 1 : 0);
  d->balance = true;
  d->have_next = false;
  d->bsteps = 0;
  d->win_rows = d->win_s = 0;
  d->thr_ema = 0;
  return AG_OK;
}

/* Shares proportional to thr (largest remainders, ties to the lower rank),
 * at least min_rows each, summing to total. The same inputs give the same
 * shares on every rank. */
static void shares_from(const double *thr, int n, int64_t total, int64_t min_rows, int64_t *out) {
  double sum = 0;
  for (int r = 0; r < n; r++) sum += thr[r];
  int64_t avail = total - (int64_t)n * min_rows, given = 0;
  double frac[64];
  for (int r = 0; r < n; r++) {
    double ideal = (double)avail * thr[r] / sum;
    int64_t base = (int64_t)floor(ideal);
    out[r] = base;
    frac[r] = ideal - (double)base;
    given += base;
  }
  for (int64_t left = avail - given; left > 0; left--) {
    int best = 0;
    for (int r = 1; r < n; r++)
      if (frac[r] > frac[best]) best = r;
    out[best]++;
    frac[best] = -1;
  }
  for (int r = 0; r < n; r++) out[r] += min_rows;
}

/* After a measured step: every `interval` steps all ranks exchange their
 * smoothed throughput and decide the next shares. */
static ag_status balance_exchange(ag_ddp *d) {
  float mine = (float)d->thr_ema;
  int64_t one = 1, n = d->size;
  ag_status st = AG_OK;
  ag_scope_begin();
  ag_tensor *in = ag_from_host(d->dev, AG_F32, 1, &one, &mine);
  ag_tensor *out = in ? ag_zeros(d->dev, AG_F32, 1, &n) : NULL;
  float all[64];
  if (!out) st = ag_last_status();
  if (st == AG_OK) st = ag_all_gather(d->g, in, out, NULL);
  if (st == AG_OK) st = ag_to_host(out, all, (size_t)n * sizeof(float));
  ag_status se = ag_scope_end();
  if (st == AG_OK) st = se;
  if (st != AG_OK) return st;
  double thr[64];
  for (int r = 0; r < d->size; r++) {
    thr[r] = all[r];
    if (!(isfinite(thr[r]) && thr[r] > 0)) return AG_OK; /* nothing measured: keep the shares */
  }
  int64_t next[64];
  shares_from(thr, d->size, d->bo.global_rows, d->bo.min_rows, next);
  /* A step lasts as long as its slowest rank: move only when that predicted
   * time drops by more than the hysteresis (a new split also costs its
   * first steps: new shapes, new blocks). */
  double t_now = 0, t_next = 0;
  for (int r = 0; r < d->size; r++) {
    t_now = fmax(t_now, (double)d->shares[r] / thr[r]);
    t_next = fmax(t_next, (double)next[r] / thr[r]);
  }
  if (t_next < (1 - d->bo.hysteresis) * t_now) {
    memcpy(d->next_shares, next, (size_t)d->size * sizeof *next);
    d->have_next = true;
  }
  return AG_OK;
}

ag_status ag_ddp_step_begin(ag_ddp *d) {
  if (!d) return ag_error_set(AG_ERR_INVALID, "ag_ddp_step_begin: NULL");
  if (step_started(d))
    return ag_error_set(AG_ERR_STATE, "ag_ddp_step_begin: the previous step's reduction was not finished "
                        "(ag_ddp_finish)");
  if (d->balance) {
    if (d->have_next) {
      memcpy(d->shares, d->next_shares, (size_t)d->size * sizeof *d->shares);
      d->have_next = false;
      d->stats.rebalances++;
    }
    d->weight = (double)d->shares[d->rank] / (double)d->bo.global_rows;
  }
  d->t_begin = now_s();
  d->step_open = true;
  return AG_OK;
}

ag_status ag_ddp_rows(const ag_ddp *d, int64_t *out_rows, int64_t *out_offset) {
  if (!d || !out_rows || !out_offset) return ag_error_set(AG_ERR_INVALID, "ag_ddp_rows: NULL argument");
  if (!d->balance) return ag_error_set(AG_ERR_STATE, "ag_ddp_rows: balance is not enabled (no global batch)");
  int64_t off = 0;
  for (int r = 0; r < d->rank; r++) off += d->shares[r];
  *out_rows = d->shares[d->rank];
  *out_offset = off;
  return AG_OK;
}

ag_status ag_ddp_shares(const ag_ddp *d, int64_t *out_rows) {
  if (!d || !out_rows) return ag_error_set(AG_ERR_INVALID, "ag_ddp_shares: NULL argument");
  if (!d->balance) return ag_error_set(AG_ERR_STATE, "ag_ddp_shares: balance is not enabled");
  memcpy(out_rows, d->shares, (size_t)d->size * sizeof *out_rows);
  return AG_OK;
}

ag_status ag_ddp_set_slowdown(ag_ddp *d, double factor) {
  if (!d || !isfinite(factor) || factor < 1)
    return ag_error_set(AG_ERR_INVALID, "ag_ddp_set_slowdown: NULL or factor not finite and >= 1");
  d->slowdown = factor;
  return AG_OK;
}

/* ---------------- finish ---------------- */

ag_status ag_ddp_finish(ag_ddp *d) {
  if (!d) return ag_error_set(AG_ERR_INVALID, "ag_ddp_finish: NULL");
  if (d->no_sync)
    return ag_error_set(AG_ERR_STATE, "ag_ddp_finish: inside a no_sync region (end it and run the last "
                        "micro-step's backward first)");
  ag_status st = AG_OK;
  bool measure = d->balance && !d->bo.fixed && d->step_open;
  bool interval_end = false; /* a measured interval ends with this step */
  if (measure || (d->step_open && d->slowdown > 1)) {
    /* This rank's compute: until its backward has run on the device. */
    st = ag_stream_synchronize(ag_stream_current(d->dev));
    double t = now_s() - d->t_begin;
    if (st == AG_OK && d->slowdown > 1) {
      double extra = (d->slowdown - 1) * t;
      struct timespec ts = {(time_t)extra, (long)((extra - floor(extra)) * 1e9)};
      nanosleep(&ts, NULL);
      t = now_s() - d->t_begin;
    }
    if (st == AG_OK && measure) {
      d->bsteps++;
      interval_end = d->bsteps > d->bo.warmup_steps && (d->bsteps - d->bo.warmup_steps) % d->bo.interval == 0;
      if (d->bsteps > d->bo.warmup_steps && t > 0) {
        /* rows over seconds of the interval's steps, then smoothed across
         * intervals: one slow step weighs by its time, not as a rate */
        d->win_rows += (double)d->shares[d->rank];
        d->win_s += t;
        if (interval_end) {
          double thr = d->win_rows / d->win_s;
          d->thr_ema = d->thr_ema > 0 ? d->bo.smoothing * thr + (1 - d->bo.smoothing) * d->thr_ema : thr;
          d->stats.last_throughput = d->thr_ema;
          d->win_rows = d->win_s = 0;
        }
      }
    }
  }
  d->step_open = false;
  double tw = now_s();
  if (st == AG_OK) st = launch_ready(d, true);
  ag_stream *cs = ag_stream_current(d->dev);
  for (int bi = 0; bi < d->nb; bi++) {
    ddp_bucket *b = &d->buckets[bi];
    if (b->work) {
      ag_status ws = ag_work_stream_wait(b->work, cs);
      if (st == AG_OK) st = ws;
    }
  }
  d->stats.finish_wait_ms += (now_s() - tw) * 1e3;
  /* Write the reduced gradients back. */
  ag_scope_begin();
  for (int i = 0; st == AG_OK && i < d->np; i++) {
    ddp_param *pp = &d->params[i];
    ag_tensor *p = pp->p;
    if (p->grad) {
      st = ag_copy_(p->grad, pp->view);
    } else { /* no gradient here, but the others' sum is this rank's too */
      ag_tensor *ng = persistent_new(ag__ds(p), p->dtype, p->numel);
      if (!ng) {
        st = ag_last_status();
        break;
      }
      int64_t strides[AG_MAX_DIMS];
      ag__contiguous_strides(p->ndim, p->shape, strides);
      ag_tensor *shaped = ag__tensor_view(ng, p->ndim, p->shape, strides, 0);
      ag_tensor_release(ng);
      if (!shaped) {
        st = ag_last_status();
        break;
      }
      ag__scope_detach(shaped);
      st = ag_copy_(shaped, pp->view);
      if (st == AG_OK) p->grad = shaped;
      else ag_tensor_release(shaped);
    }
  }
  ag_status se = ag_scope_end();
  if (st == AG_OK) st = se;
  for (int bi = 0; bi < d->nb; bi++) {
    ddp_bucket *b = &d->buckets[bi];
    ag_work_release(b->work);
    b->work = NULL;
    b->launched = false;
    b->pending = b->count;
  }
  for (int i = 0; i < d->np; i++) d->params[i].ready = false;
  d->next_launch = 0;
  if (st == AG_OK) d->stats.steps++;
  if (st == AG_OK && interval_end) st = balance_exchange(d);
  return st;
}

/* ---------------- introspection ---------------- */

ag_status ag_ddp_stats_get(const ag_ddp *d, ag_ddp_stats *out) {
  if (!d || !out) return ag_error_set(AG_ERR_INVALID, "ag_ddp_stats_get: NULL argument");
  *out = d->stats;
  return AG_OK;
}

int ag_ddp_bucket_of(const ag_ddp *d, int i) {
  if (!d || i < 0 || i >= d->np) {
    ag_error_set(AG_ERR_INVALID, "ag_ddp_bucket_of: NULL or parameter index %d out of range", i);
    return -1;
  }
  return d->params[i].bucket;
}

ag_group *ag_ddp_group(const ag_ddp *d) { return d ? d->g : NULL; }
