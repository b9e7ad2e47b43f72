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
#include "anygrad/serialize.h"
#include "autograd/grad_internal.h"
#include "nn/optim_internal.h"

typedef struct ddp_param {
  struct ag_ddp *d;
  ag_tensor *p;    /* held */
  ag_tensor *view; /* p's slot in its bucket's flat buffer (owned) */
  int bucket;
  uint64_t hook_id;
  bool hooked;
  bool ready; /* its gradient for this step is complete */
  int64_t boff; /* offset of its first element in its bucket's flat buffer */
  /* ZeRO: name, and this rank's piece of it (NULL when none) */
  char *name;
  ag_tensor *piece;    /* 1-D leaf viewing p's elements [pstart, pstart + numel) (owned) */
  int64_t pstart;
  ag_tensor *gview;    /* the piece's reduced gradient: a view of flat or of the shard (owned) */
} ddp_param;

typedef struct ddp_bucket {
  ag_dtype dtype;
  int64_t numel;
  ag_tensor *flat; /* owned, outside any scope */
  int first, count; /* members: d->order[first .. first+count) */
  int pending;      /* members not ready yet */
  bool launched;
  ag_work *work;
  int64_t flat_n;   /* elements of flat: numel, or size * chunk with ZeRO */
  int64_t chunk;    /* ZeRO: elements per rank (flat holds size * chunk) */
  int64_t shard_off; /* ZeRO stage 2: offset of this bucket's chunk in gshard */
  ag_tensor *gchunk; /* ZeRO stage 2: view of gshard receiving the reduce-scatter (owned) */
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
  int zero;          /* ZeRO stage: 0, 1, 2 */
  ag_tensor *gshard; /* stage 2: this rank's reduced gradient chunks, all buckets (owned) */
};

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ZeRO chunks are multiples of 16 elements: 64-byte aligned f32 shards. */
#define ZERO_ALIGN 16

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

/* The bucket's flat buffer (padding zero) and its members' views of it.
 * Without ZeRO stage 2 they live as long as d; stage 2 holds them only
 * while a collective needs them (bucket_release after queueing it: the
 * group keeps its own reference), so between steps a rank keeps only its
 * gradient shard. */
static ag_status bucket_alloc(ag_ddp *d, ddp_bucket *b) {
  if (b->flat) return AG_OK;
  ag_status st = AG_OK;
  b->flat = persistent_new(ag__ds(d->params[0].p), b->dtype, b->flat_n);
  if (!b->flat) return ag_last_status();
  if (b->flat_n > b->numel) { /* the padding of the last chunk stays zero */
    int64_t one = 1, pad = b->flat_n - b->numel;
    ag_tensor *v = ag__tensor_view(b->flat, 1, &pad, &one, b->flat->offset + b->numel);
    st = v ? ag_fill_(v, 0.0) : ag_last_status();
    ag_tensor_release(v);
  }
  for (int k = 0; st == AG_OK && k < b->count; k++) {
    ddp_param *pp = &d->params[d->order[b->first + k]];
    int64_t strides[AG_MAX_DIMS];
    ag__contiguous_strides(pp->p->ndim, pp->p->shape, strides);
    pp->view = ag__tensor_view(b->flat, pp->p->ndim, pp->p->shape, strides, b->flat->offset + pp->boff);
    if (!pp->view) st = ag_last_status();
    else ag__scope_detach(pp->view);
  }
  return st;
}

static void bucket_release(ag_ddp *d, ddp_bucket *b) {
  for (int k = 0; k < b->count; k++) {
    ddp_param *pp = &d->params[d->order[b->first + k]];
    ag_tensor_release(pp->view);
    pp->view = NULL;
  }
  ag_tensor_release(b->flat);
  b->flat = NULL;
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
  ag_status st = bucket_alloc(d, b);
  if (st != AG_OK) {
    b->launched = true;
    return st;
  }
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
  if (st == AG_OK)
    st = d->zero == 2 ? ag_reduce_scatter(d->g, b->flat, b->gchunk, AG_DIST_SUM, &b->work)
                      : ag_all_reduce(d->g, b->flat, AG_DIST_SUM, &b->work);
  b->launched = true; /* even on failure: the group is broken, never retried */
  if (d->zero == 2) { /* the shard receives the sum: the members' gradients and the buffer go */
    for (int k = 0; k < b->count; k++) ag_tensor_zero_grad(d->params[d->order[b->first + k]].p);
    bucket_release(d, b);
  }
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

/* ---------------- ZeRO layout ---------------- */

/* A persistent 1-D view of n elements of t's storage at element `at`. */
static ag_tensor *flat_view(ag_tensor *t, int64_t at, int64_t n) {
  int64_t one = 1;
  ag_tensor *v = ag__tensor_view(t, 1, &n, &one, at);
  return v ? ag__scope_detach(v) : NULL;
}

/* This rank's piece of every parameter (the overlap of the parameter's
 * elements in its bucket with chunk `rank`), and for stage 2 the gradient
 * shard that the reduce-scatters fill. */
static ag_status zero_layout(ag_ddp *d) {
  int64_t total = 0;
  for (int bi = 0; bi < d->nb; bi++) {
    d->buckets[bi].shard_off = total;
    total += d->buckets[bi].chunk;
  }
  if (d->zero == 2) {
    d->gshard = persistent_new(ag__ds(d->params[0].p), d->buckets[0].dtype, total > 0 ? total : 1);
    if (!d->gshard) return ag_last_status();
    for (int bi = 0; bi < d->nb; bi++) {
      ddp_bucket *b = &d->buckets[bi];
      if (b->dtype != d->buckets[0].dtype)
        return ag_error_set(AG_ERR_DTYPE, "ag_ddp_create: zero_stage 2 needs parameters of one dtype (%s and %s)",
                            ag_dtype_name(b->dtype), ag_dtype_name(d->buckets[0].dtype));
      if (!(b->gchunk = flat_view(d->gshard, b->shard_off, b->chunk))) return ag_last_status();
    }
  }
  for (int i = 0; i < d->np; i++) {
    ddp_param *pp = &d->params[i];
    ddp_bucket *b = &d->buckets[pp->bucket];
    int64_t c0 = (int64_t)d->rank * b->chunk, c1 = c0 + b->chunk;
    int64_t lo = pp->boff > c0 ? pp->boff : c0;
    int64_t hi = pp->boff + pp->p->numel < c1 ? pp->boff + pp->p->numel : c1;
    if (hi <= lo) continue;
    pp->pstart = lo - pp->boff;
    pp->piece = flat_view(pp->p, pp->p->offset + pp->pstart, hi - lo);
    if (!pp->piece) return ag_last_status();
    pp->piece->requires_grad = true;
    pp->gview = d->zero == 2 ? flat_view(d->gshard, b->shard_off + (lo - c0), hi - lo)
                             : flat_view(b->flat, b->flat->offset + lo, hi - lo);
    if (!pp->gview) return ag_last_status();
  }
  return AG_OK;
}

/* After the reduction: every piece's .grad is its reduced gradient (again:
 * the optimizer's zero_grad drops it every step); stage 2 releases the
 * parameters' own gradients, the shard holds what is needed. */
static ag_status zero_set_grads(ag_ddp *d) {
  for (int i = 0; i < d->np; i++) {
    ddp_param *pp = &d->params[i];
    if (d->zero == 2) ag_tensor_zero_grad(pp->p);
    if (!pp->piece || pp->piece->grad == pp->gview) continue;
    ag_tensor_zero_grad(pp->piece);
    pp->piece->grad = ag__hold(pp->gview);
  }
  return AG_OK;
}

/* ---------------- create / destroy ---------------- */

static void ddp_free(ag_ddp *d) {
  for (int i = 0; i < d->np; i++) {
    ddp_param *pp = &d->params[i];
    if (pp->hooked) ag_tensor_remove_grad_hook(pp->p, pp->hook_id);
    ag_tensor_release(pp->view);
    if (pp->piece) ag_tensor_zero_grad(pp->piece);
    ag_tensor_release(pp->piece);
    ag_tensor_release(pp->gview);
    free(pp->name);
    ag__unhold(pp->p);
  }
  for (int i = 0; i < d->nb; i++) {
    if (d->buckets[i].work) {
      ag_work_wait(d->buckets[i].work);
      ag_work_release(d->buckets[i].work);
    }
    ag_tensor_release(d->buckets[i].flat);
    ag_tensor_release(d->buckets[i].gchunk);
  }
  ag_tensor_release(d->gshard);
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
  if (o.zero_stage < 0 || o.zero_stage > 2)
    return ag_error_set(AG_ERR_INVALID, "ag_ddp_create: zero_stage %d (0, 1 or 2)", o.zero_stage);
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
  d->zero = o.zero_stage;
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
    if (d->zero) {
      const char *nm = params->names && params->names[i] ? params->names[i] : "";
      if (!(d->params[i].name = strdup(nm))) {
        ddp_free(d);
        return ag_error_set(AG_ERR_OOM, "ag_ddp_create: out of host memory");
      }
    }
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
    int64_t flat_n = b->numel > 0 ? b->numel : 1;
    if (d->zero) {
      b->chunk = ((b->numel + d->size - 1) / d->size + ZERO_ALIGN - 1) / ZERO_ALIGN * ZERO_ALIGN;
      flat_n = b->chunk * d->size;
    }
    b->flat_n = flat_n;
    int64_t off = 0;
    for (int k = 0; k < b->count; k++) {
      ddp_param *pp = &d->params[d->order[b->first + k]];
      pp->boff = off;
      off += pp->p->numel;
    }
    st = bucket_alloc(d, b);
  }
  (void)ds;
  if (st == AG_OK && d->zero) st = zero_layout(d);
  if (st == AG_OK && !o.no_broadcast) st = broadcast_params(d, 0);
  for (int bi = 0; st == AG_OK && d->zero == 2 && bi < nb; bi++) bucket_release(d, &d->buckets[bi]);
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
  /* Write the reduced gradients back (stage 2: only the shard has them). */
  if (st == AG_OK && d->zero) st = zero_set_grads(d);
  ag_scope_begin();
  for (int i = 0; st == AG_OK && d->zero != 2 && i < d->np; i++) {
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

/* ---------------- ZeRO: shard, clip, gather ---------------- */

static ag_status need_zero(const ag_ddp *d, const char *fn) {
  if (!d) return ag_error_set(AG_ERR_INVALID, "%s: NULL", fn);
  if (!d->zero) return ag_error_set(AG_ERR_STATE, "%s: the ag_ddp was created with zero_stage 0 (no shards)", fn);
  return AG_OK;
}

int ag_ddp_zero_stage(const ag_ddp *d) { return d ? d->zero : -1; }

ag_status ag_ddp_zero_params(const ag_ddp *d, const ag_param_list *subset, ag_param_list *out) {
  ag_status st = need_zero(d, "ag_ddp_zero_params");
  if (st != AG_OK) return st;
  if (!out) return ag_error_set(AG_ERR_INVALID, "ag_ddp_zero_params: NULL out");
  int n = subset ? subset->count : d->np;
  for (int k = 0; st == AG_OK && k < n; k++) {
    int i = k;
    if (subset) {
      for (i = 0; i < d->np && d->params[i].p != subset->tensors[k]; i++) {}
      if (i == d->np)
        return ag_error_set(AG_ERR_INVALID, "ag_ddp_zero_params: entry %d ('%s') is not a parameter of this ag_ddp", k,
                            subset->names && subset->names[k] ? subset->names[k] : "?");
    }
    if (d->params[i].piece) st = ag_params_add(out, d->params[i].name, d->params[i].piece);
  }
  return st;
}

static ag_status sumsq_all_reduce(ag_tensor *t, void *ctx) {
  ag_ddp *d = ctx;
  return ag_all_reduce(d->g, t, AG_DIST_SUM, NULL);
}

ag_tensor *ag_ddp_clip_grad_norm(ag_ddp *d, double max_norm) {
  if (need_zero(d, "ag_ddp_clip_grad_norm") != AG_OK) return NULL;
  if (!(max_norm > 0)) {
    ag_error_set(AG_ERR_INVALID, "ag_ddp_clip_grad_norm: max_norm must be positive, got %g", max_norm);
    return NULL;
  }
  ag_param_list shard = {0}, full = {0};
  ag_status st = ag_ddp_zero_params(d, NULL, &shard);
  for (int i = 0; st == AG_OK && d->zero == 1 && i < d->np; i++) st = ag_params_add(&full, "", d->params[i].p);
  ag_tensor *norm = NULL;
  if (st == AG_OK)
    norm = d->zero == 1 ? ag__clip_grad_norm_ex(&full, &shard, max_norm, NULL, NULL, &d->dev)
                        : ag__clip_grad_norm_ex(&shard, &shard, max_norm, sumsq_all_reduce, d, &d->dev);
  ag_params_free(&shard);
  ag_params_free(&full);
  return norm;
}

ag_status ag_ddp_gather_params(ag_ddp *d) {
  ag_status st = need_zero(d, "ag_ddp_gather_params");
  if (st != AG_OK) return st;
  if (step_started(d))
    return ag_error_set(AG_ERR_STATE, "ag_ddp_gather_params: this step's reduction has started (call ag_ddp_finish)");
  ag_no_grad_begin();
  ag_scope_begin();
  /* This rank's chunk of every bucket (padding zero), all gathered into the
   * bucket buffers: every all-gather queued before the first wait. */
  for (int bi = 0; st == AG_OK && bi < d->nb; bi++) {
    ddp_bucket *b = &d->buckets[bi];
    ag_tensor *in = ag_zeros(d->dev, b->dtype, 1, &b->chunk);
    if (!in) st = ag_last_status();
    for (int k = 0; st == AG_OK && k < b->count; k++) {
      ddp_param *pp = &d->params[d->order[b->first + k]];
      if (!pp->piece) continue;
      int64_t at = pp->boff + pp->pstart - (int64_t)d->rank * b->chunk;
      ag_tensor *v = flat_view(in, in->offset + at, pp->piece->numel);
      st = v ? ag_copy_(v, pp->piece) : ag_last_status();
      ag_tensor_release(v);
    }
    if (st == AG_OK) st = bucket_alloc(d, b);
    if (st == AG_OK) st = ag_all_gather(d->g, in, b->flat, &b->work);
  }
  ag_stream *cs = ag_stream_current(d->dev);
  for (int bi = 0; bi < d->nb; bi++) {
    ddp_bucket *b = &d->buckets[bi];
    if (!b->work) continue;
    ag_status ws = ag_work_stream_wait(b->work, cs);
    if (st == AG_OK) st = ws;
    for (int k = 0; st == AG_OK && k < b->count; k++) {
      ddp_param *pp = &d->params[d->order[b->first + k]];
      st = ag_copy_(pp->p, pp->view);
    }
    ag_work_release(b->work);
    b->work = NULL;
    if (d->zero == 2) bucket_release(d, b);
  }
  ag_status se = ag_scope_end();
  ag_grad_mode_end();
  if (st == AG_OK) st = se;
  /* The step is over: the gradients it used go (the shard's view the
   * buffers the parameters were just gathered into). */
  for (int i = 0; i < d->np; i++) {
    if (d->params[i].piece) ag_tensor_zero_grad(d->params[i].piece);
    ag_tensor_zero_grad(d->params[i].p);
  }
  return st;
}

/* ---------------- ZeRO: checkpoints ---------------- */

/* One tensor to fill from a sharded checkpoint: elements [start, start +
 * numel) of the flattened parameter pname, stored as `name`. */
typedef struct zero_target {
  char name[256], pname[256];
  ag_tensor *t; /* borrowed */
  int64_t start;
} zero_target;

static const char *const zero_state_suffix[] = {"exp_avg", "exp_avg_sq", "momentum", "square_avg", "momentum_buffer",
                                                "grad_avg"};

/* The parameter name of an optimizer state entry "<pname>.<state>". */
static bool state_pname(const char *name, char *out, size_t n) {
  const char *dot = strrchr(name, '.');
  if (!dot) return false;
  bool known = false;
  for (size_t k = 0; k < sizeof zero_state_suffix / sizeof *zero_state_suffix; k++)
    if (!strcmp(dot + 1, zero_state_suffix[k])) known = true;
  if (!known || (size_t)(dot - name) >= n) return false;
  memcpy(out, name, (size_t)(dot - name));
  out[dot - name] = 0;
  return true;
}

static ag_status parse_i64(const ag_safetensors *f, const char *key, const char *path, int64_t *out) {
  const char *v = ag_safetensors_meta(f, key);
  char *end = NULL;
  long long x = v ? strtoll(v, &end, 10) : 0;
  if (!v || end == v || *end || x < 0)
    return ag_error_set(AG_ERR_CORRUPT, "%s: metadata '%s' is %s%s%s (a sharded checkpoint of ag_ddp_zero_save?)", path,
                        key, v ? "'" : "missing", v ? v : "", v ? "'" : "");
  *out = x;
  return AG_OK;
}

static void shard_path(char *buf, size_t n, const char *prefix, int rank) {
  snprintf(buf, n, "%s.rank%d.safetensors", prefix, rank);
}

/* Fill every target from the shards (each element from the one shard that
 * holds it), then the counters of opt from shard 0. */
static ag_status zero_load_targets(const char *prefix, zero_target *tg, int nt, ag_optimizer *opt) {
  char path[4096];
  shard_path(path, sizeof path, prefix, 0);
  ag_safetensors *f0 = NULL;
  ag_status st = ag_safetensors_open(path, &f0);
  if (st != AG_OK) return st;
  int64_t world = 0;
  st = parse_i64(f0, "zero.world_size", path, &world);
  if (st == AG_OK && (world < 1 || world > 1 << 16))
    st = ag_error_set(AG_ERR_CORRUPT, "%s: zero.world_size %lld out of range", path, (long long)world);
  if (st != AG_OK) {
    ag_safetensors_close(f0);
    return st;
  }
  ag_safetensors **fs = calloc((size_t)world, sizeof *fs);
  if (!fs) {
    ag_safetensors_close(f0);
    return ag_error_set(AG_ERR_OOM, "ag_ddp_zero_load: out of host memory");
  }
  fs[0] = f0;
  for (int r = 1; st == AG_OK && r < world; r++) {
    shard_path(path, sizeof path, prefix, r);
    st = ag_safetensors_open(path, &fs[r]);
    int64_t w = 0, rk = -1;
    if (st == AG_OK) st = parse_i64(fs[r], "zero.world_size", path, &w);
    if (st == AG_OK) st = parse_i64(fs[r], "zero.rank", path, &rk);
    if (st == AG_OK && (w != world || rk != r))
      st = ag_error_set(AG_ERR_CORRUPT, "%s: rank %lld of %lld, expected rank %d of %lld (shards of another save?)",
                        path, (long long)rk, (long long)w, r, (long long)world);
  }
  ag_no_grad_begin();
  for (int k = 0; st == AG_OK && k < nt; k++) {
    zero_target *t = &tg[k];
    int64_t n = t->t->numel, covered = 0;
    size_t es = ag_dtype_size(t->t->dtype);
    unsigned char *buf = malloc((size_t)n * es + 1);
    if (!buf) {
      st = ag_error_set(AG_ERR_OOM, "ag_ddp_zero_load: out of host memory");
      break;
    }
    char key[300];
    snprintf(key, sizeof key, "zero.offset.%s", t->pname);
    for (int r = 0; st == AG_OK && r < world; r++) {
      int idx = ag_safetensors_find(fs[r], t->name);
      if (idx < 0) continue;
      shard_path(path, sizeof path, prefix, r);
      int64_t s0 = 0, shape[AG_MAX_DIMS];
      st = parse_i64(fs[r], key, path, &s0);
      int nd = st == AG_OK ? ag_safetensors_shape(fs[r], idx, shape) : 0;
      if (st == AG_OK && nd != 1)
        st = ag_error_set(AG_ERR_CORRUPT, "%s: '%s' is not 1-D (a shard of a flattened tensor)", path, t->name);
      if (st != AG_OK) break;
      int64_t lo = s0 > t->start ? s0 : t->start;
      int64_t hi = s0 + shape[0] < t->start + n ? s0 + shape[0] : t->start + n;
      if (hi <= lo) continue;
      ag_scope_begin();
      ag_tensor *src = ag_safetensors_get_as(fs[r], t->name, AG_CPU, t->t->dtype);
      unsigned char *tmp = src ? malloc((size_t)shape[0] * es + 1) : NULL;
      if (!src) st = ag_last_status();
      else if (!tmp) st = ag_error_set(AG_ERR_OOM, "ag_ddp_zero_load: out of host memory");
      else st = ag_to_host(src, tmp, (size_t)shape[0] * es);
      if (st == AG_OK) memcpy(buf + (size_t)(lo - t->start) * es, tmp + (size_t)(lo - s0) * es, (size_t)(hi - lo) * es);
      free(tmp);
      ag_status se = ag_scope_end();
      if (st == AG_OK) st = se;
      covered += hi - lo;
    }
    if (st == AG_OK && covered != n)
      st = ag_error_set(AG_ERR_CORRUPT, "%s.rank*.safetensors: the %lld shards hold %lld of the %lld elements of '%s' "
                        "needed from offset %lld", prefix, (long long)world, (long long)covered, (long long)n, t->name,
                        (long long)t->start);
    if (st == AG_OK) {
      ag_scope_begin();
      ag_tensor *src = ag_from_host(ag_tensor_device(t->t), t->t->dtype, 1, &n, buf);
      ag_tensor *dst = src ? flat_view(t->t, t->t->offset, n) : NULL;
      st = dst ? ag_copy_(dst, src) : ag_last_status();
      ag_tensor_release(dst);
      ag_status se = ag_scope_end();
      if (st == AG_OK) st = se;
    }
    free(buf);
  }
  ag_grad_mode_end();
  if (st == AG_OK) { /* the step count and learning rates */
    ag_param_list cl = {0};
    st = ag_optimizer_counters(opt, &cl);
    if (st == AG_OK) st = ag_safetensors_load_into(fs[0], &cl);
    ag_params_free(&cl);
  }
  for (int r = 0; r < world; r++) ag_safetensors_close(fs[r]);
  free(fs);
  return st;
}

/* The optimizer's state as targets, each at its parameter's offset (from
 * start_of: -1 when the parameter is not one the caller holds). */
static ag_status state_targets(ag_optimizer *opt, const char *fn, int64_t (*start_of)(void *, const ag_tensor *),
                               void *ctx, ag_param_list *sl, zero_target **out, int *out_n, int extra) {
  ag_param_list pl = {0};
  ag_status st = ag_optimizer_params(opt, &pl);
  if (st == AG_OK) st = ag_optimizer_state(opt, sl);
  zero_target *tg = st == AG_OK ? calloc((size_t)(sl->count + extra) + 1, sizeof *tg) : NULL;
  if (st == AG_OK && !tg) st = ag_error_set(AG_ERR_OOM, "%s: out of host memory", fn);
  for (int i = 0; st == AG_OK && i < pl.count; i++)
    if (start_of(ctx, pl.tensors[i]) < 0)
      st = ag_error_set(AG_ERR_INVALID, "%s: the optimizer's parameter '%s' is not %s", fn, pl.names[i],
                        ctx ? "one of this ag_ddp's shard tensors (ag_ddp_zero_params)" : "in the parameter list");
  for (int i = 0; st == AG_OK && i < sl->count; i++) {
    zero_target *t = &tg[i];
    if (!state_pname(sl->names[i], t->pname, sizeof t->pname)) {
      st = ag_error_set(AG_ERR_INVALID, "%s: optimizer state '%s' has no known state name", fn, sl->names[i]);
      break;
    }
    snprintf(t->name, sizeof t->name, "%s", sl->names[i]);
    t->t = sl->tensors[i];
    int j = 0;
    for (; j < pl.count && strcmp(pl.names[j], t->pname); j++) {}
    t->start = j < pl.count ? start_of(ctx, pl.tensors[j]) : -1;
    if (t->start < 0) st = ag_error_set(AG_ERR_INVALID, "%s: optimizer state '%s' of no parameter", fn, sl->names[i]);
  }
  ag_params_free(&pl);
  if (st != AG_OK) {
    free(tg);
    return st;
  }
  *out = tg;
  *out_n = sl->count;
  return AG_OK;
}

static int64_t piece_start(void *ctx, const ag_tensor *t) {
  ag_ddp *d = ctx;
  for (int i = 0; i < d->np; i++)
    if (d->params[i].piece == t) return d->params[i].pstart;
  return -1;
}

ag_status ag_ddp_zero_save(ag_ddp *d, ag_optimizer *opt, const char *prefix) {
  ag_status st = need_zero(d, "ag_ddp_zero_save");
  if (st != AG_OK) return st;
  if (!opt || !prefix) return ag_error_set(AG_ERR_INVALID, "ag_ddp_zero_save: NULL optimizer or prefix");
  ag_param_list l = {0}, sl = {0};
  zero_target *tg = NULL;
  int nt = 0;
  st = state_targets(opt, "ag_ddp_zero_save", piece_start, d, &sl, &tg, &nt, 0);
  free(tg);
  ag_params_free(&sl);
  if (st == AG_OK) st = ag_ddp_zero_params(d, NULL, &l);
  int n_pieces = l.count;
  if (st == AG_OK) st = ag_optimizer_state(opt, &l);
  if (st == AG_OK) st = ag_optimizer_counters(opt, &l);
  int nm = 3 + n_pieces;
  char **keys = calloc((size_t)nm, sizeof *keys), **vals = calloc((size_t)nm, sizeof *vals);
  if (st == AG_OK && (!keys || !vals)) st = ag_error_set(AG_ERR_OOM, "ag_ddp_zero_save: out of host memory");
  for (int k = 0; st == AG_OK && k < nm; k++) {
    keys[k] = malloc(300);
    vals[k] = malloc(32);
    if (!keys[k] || !vals[k]) {
      st = ag_error_set(AG_ERR_OOM, "ag_ddp_zero_save: out of host memory");
      break;
    }
    if (k < 3) {
      static const char *const fixed[] = {"zero.rank", "zero.world_size", "zero.stage"};
      snprintf(keys[k], 300, "%s", fixed[k]);
      snprintf(vals[k], 32, "%d", k == 0 ? d->rank : k == 1 ? d->size : d->zero);
    } else {
      snprintf(keys[k], 300, "zero.offset.%s", l.names[k - 3]);
      snprintf(vals[k], 32, "%lld", (long long)piece_start(d, l.tensors[k - 3]));
    }
  }
  char path[4096];
  shard_path(path, sizeof path, prefix, d->rank);
  if (st == AG_OK)
    st = ag_safetensors_save(path, &l, nm, (const char *const *)keys, (const char *const *)vals);
  for (int k = 0; k < nm && keys && vals; k++) {
    free(keys[k]);
    free(vals[k]);
  }
  free(keys);
  free(vals);
  ag_params_free(&l);
  return st;
}

ag_status ag_ddp_zero_load(ag_ddp *d, ag_optimizer *opt, const char *prefix) {
  ag_status st = need_zero(d, "ag_ddp_zero_load");
  if (st != AG_OK) return st;
  if (!opt || !prefix) return ag_error_set(AG_ERR_INVALID, "ag_ddp_zero_load: NULL optimizer or prefix");
  ag_param_list sl = {0};
  zero_target *tg = NULL;
  int nt = 0;
  st = state_targets(opt, "ag_ddp_zero_load", piece_start, d, &sl, &tg, &nt, d->np);
  for (int i = 0; st == AG_OK && i < d->np; i++) { /* the whole parameters */
    zero_target *t = &tg[nt++];
    snprintf(t->name, sizeof t->name, "%s", d->params[i].name);
    snprintf(t->pname, sizeof t->pname, "%s", d->params[i].name);
    t->t = d->params[i].p;
    t->start = 0;
  }
  if (st == AG_OK) st = zero_load_targets(prefix, tg, nt, opt);
  free(tg);
  ag_params_free(&sl);
  return st;
}

static int64_t list_start(void *ctx, const ag_tensor *t) {
  const ag_param_list *l = ctx;
  for (int i = 0; i < l->count; i++)
    if (l->tensors[i] == t) return 0;
  return -1;
}

ag_status ag_zero_load_unsharded(const char *prefix, const ag_param_list *params, ag_optimizer *opt) {
  if (!prefix || !params || !opt) return ag_error_set(AG_ERR_INVALID, "ag_zero_load_unsharded: NULL argument");
  ag_param_list sl = {0};
  zero_target *tg = NULL;
  int nt = 0;
  ag_status st = state_targets(opt, "ag_zero_load_unsharded", list_start, (void *)params, &sl, &tg, &nt,
                               params->count);
  for (int i = 0; st == AG_OK && i < params->count; i++) {
    zero_target *t = &tg[nt++];
    snprintf(t->name, sizeof t->name, "%s", params->names[i]);
    snprintf(t->pname, sizeof t->pname, "%s", params->names[i]);
    t->t = params->tensors[i];
    t->start = 0;
    if (!ag_tensor_is_contiguous(t->t))
      st = ag_error_set(AG_ERR_INVALID, "ag_zero_load_unsharded: parameter '%s' is not contiguous", t->name);
  }
  if (st == AG_OK) st = zero_load_targets(prefix, tg, nt, opt);
  free(tg);
  ag_params_free(&sl);
  return st;
}
