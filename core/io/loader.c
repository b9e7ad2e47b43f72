/* ag_loader: worker threads fill batches in pinned buffers, a bounded ring of
 * slots keeps them in batch order, and next() issues their host->device
 * copies on a dedicated copy stream and makes the caller's stream wait on an
 * event, so the host waits only for host work, never for the device. */
#include <stdlib.h>
#include <string.h>

#include "anygrad/loader.h"
#include "anygrad/threads.h"
#include "diag/diag_internal.h"
#include "runtime/devstate.h"
#include "memory/block.h"
#include "tensor/tensor_internal.h"

typedef enum { S_EMPTY, S_FILLING, S_READY, S_ERROR, S_COPIED } slot_state;

typedef struct slot {
  slot_state state;
  int64_t g, epoch, index, rows;
  int64_t *samples;
  void *buf[AG_LOADER_MAX_FIELDS];
  int64_t shape[AG_LOADER_MAX_FIELDS][AG_MAX_DIMS];
  int64_t bucket[AG_LOADER_MAX_FIELDS];
  ag_tensor *dev[AG_LOADER_MAX_FIELDS]; /* loader-owned, after the copy */
  ag_event *start, *done;               /* around the copy on the copy stream */
  size_t copy_bytes;
  ag_status err;
  char msg[768];
} slot;

struct ag_loader_batch {
  const ag_loader *l;
  slot *s;
};

struct ag_loader {
  ag_loader_config cfg;
  ag_devstate *ds;
  ag_stream *copy;
  int64_t bpe, total;
  int depth, copy_ahead;
  size_t max_bytes[AG_LOADER_MAX_FIELDS];
  slot *slots;
  pthread_t *threads;
  void *threads_arg;
  int n_threads;
  pthread_mutex_t mu;
  pthread_cond_t cv_work, cv_ready;
  int64_t next_fill; /* next batch a worker claims */
  int64_t consumed;  /* next batch next() returns */
  bool stop;
  ag_status failed;  /* after a worker error every next() refuses */
  char failed_msg[896];
};

/* ---- order: a keyed bijection on [0, n) per epoch (Feistel network with
 * cycle walking), so any worker computes any batch's samples in O(1)
 * without a shared permutation array. ---- */

static uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

static int64_t permute(uint64_t key, int64_t n, int64_t i) {
  if (n <= 1) return i;
  int bits = 0;
  while (((int64_t)1 << bits) < n) bits++;
  int half = (bits + 1) / 2;
  uint64_t mask = ((uint64_t)1 << half) - 1;
  uint64_t x = (uint64_t)i;
  do {
    uint64_t l = x >> half, r = x & mask;
    for (int round = 0; round < 4; round++) {
      uint64_t nl = r;
      r = l ^ (mix64(key ^ ((uint64_t)round << 56) ^ r) & mask);
      l = nl;
    }
    x = (l << half) | r;
  } while (x >= (uint64_t)n);
  return (int64_t)x;
}

int64_t ag_loader_batches_per_epoch(const ag_loader *l) { return l ? l->bpe : 0; }

/* ---- batch accessors (worker threads) ---- */

void *ag_loader_batch_data(ag_loader_batch *b, int field) {
  if (!b || field < 0 || field >= b->l->cfg.n_fields) return NULL;
  return b->s->buf[field];
}

const int64_t *ag_loader_batch_shape(ag_loader_batch *b, int field) {
  if (!b || field < 0 || field >= b->l->cfg.n_fields) return NULL;
  return b->s->shape[field];
}

static int64_t field_numel(const ag_loader_field *f, const int64_t *shape) {
  int64_t n = 1;
  for (int d = 0; d < f->ndim; d++) n *= shape[d];
  return n;
}

static void fill_value(void *p, ag_dtype dt, int64_t n, double v) {
  if (v == 0.0) {
    memset(p, 0, (size_t)n * ag_dtype_size(dt));
    return;
  }
  for (int64_t i = 0; i < n; i++) switch (dt) {
      case AG_F32: ((float *)p)[i] = (float)v; break;
      case AG_F64: ((double *)p)[i] = v; break;
      case AG_I32: ((int32_t *)p)[i] = (int32_t)v; break;
      case AG_I64: ((int64_t *)p)[i] = (int64_t)v; break;
      case AG_U8: ((uint8_t *)p)[i] = (uint8_t)v; break;
      case AG_BOOL: ((uint8_t *)p)[i] = v != 0; break;
      case AG_F16: ((uint16_t *)p)[i] = ag_f32_to_f16((float)v); break;
      case AG_BF16: ((uint16_t *)p)[i] = ag_f32_to_bf16((float)v); break;
      default: break;
    }
}

ag_status ag_loader_batch_set_length(ag_loader_batch *b, int field, int64_t length, int64_t *out_bucket) {
  if (!b || field < 0 || field >= b->l->cfg.n_fields)
    return ag_error_set(AG_ERR_INVALID, "ag_loader_batch_set_length: bad field %d", field);
  const ag_loader_field *f = &b->l->cfg.fields[field];
  if (f->var_dim <= 0)
    return ag_error_set(AG_ERR_INVALID, "ag_loader_batch_set_length: field %d has no variable dim", field);
  int k = 0;
  while (k < f->n_buckets && f->buckets[k] < length) k++;
  if (k == f->n_buckets || length < 0)
    return ag_error_set(AG_ERR_SHAPE, "ag_loader_batch_set_length: length %lld exceeds the largest bucket %lld",
                        (long long)length, (long long)f->buckets[f->n_buckets - 1]);
  slot *s = b->s;
  s->shape[field][f->var_dim] = f->buckets[k];
  s->bucket[field] = f->buckets[k];
  fill_value(s->buf[field], f->dtype, field_numel(f, s->shape[field]), f->pad_value);
  if (out_bucket) *out_bucket = f->buckets[k];
  return AG_OK;
}

/* ---- workers ---- */

static void release_buffers(slot *s, int n) {
  for (int f = 0; f < n; f++) {
    ag_pinned_free(s->buf[f]);
    s->buf[f] = NULL;
  }
}

static void fill_one(ag_loader *l, slot *s, int64_t g) {
  const ag_loader_config *c = &l->cfg;
  s->epoch = g / l->bpe;
  s->index = g % l->bpe;
  int64_t first = s->index * c->batch_size;
  s->rows = c->num_samples - first < c->batch_size ? c->num_samples - first : c->batch_size;
  uint64_t key = mix64(c->seed ^ mix64((uint64_t)s->epoch + 1));
  for (int64_t i = 0; i < s->rows; i++)
    s->samples[i] = c->shuffle ? permute(key, c->num_samples, first + i) : first + i;
  s->err = AG_OK;
  for (int f = 0; f < c->n_fields; f++) {
    const ag_loader_field *fd = &c->fields[f];
    for (int d = 0; d < fd->ndim; d++) s->shape[f][d] = fd->shape[d];
    s->shape[f][0] = s->rows;
    s->bucket[f] = 0;
    if (fd->var_dim > 0) s->shape[f][fd->var_dim] = fd->buckets[fd->n_buckets - 1];
    if (s->err == AG_OK) s->err = ag_pinned_alloc(c->device, l->max_bytes[f], &s->buf[f]);
  }
  if (s->err == AG_OK) {
    ag_loader_batch b = {l, s};
    uint64_t t0 = ag__now_ns();
    ag_error_clear();
    s->err = c->fill(c->user, s->epoch, s->index, s->samples, s->rows, &b);
    ag__trace_host("loader", "fill batch", t0, ag__now_ns(), "batch", g);
  }
  if (s->err != AG_OK) {
    snprintf(s->msg, sizeof s->msg, "%s", ag_last_status() != AG_OK ? ag_last_error() : "fill callback failed");
    release_buffers(s, c->n_fields);
  }
}

static const char *const k_worker_names[] = {"loader worker 0", "loader worker 1", "loader worker 2",
                                             "loader worker 3", "loader worker 4", "loader worker 5",
                                             "loader worker 6", "loader worker 7", "loader worker"};

typedef struct worker_arg {
  ag_loader *l;
  int id;
} worker_arg;

static void *worker(void *arg) {
  ag_loader *l = ((worker_arg *)arg)->l;
  int id = ((worker_arg *)arg)->id;
  ag__trace_thread_name(k_worker_names[id < 8 ? id : 8]);
  pthread_mutex_lock(&l->mu);
  for (;;) {
    while (!l->stop && (l->next_fill >= l->total || l->next_fill >= l->consumed + l->depth))
      pthread_cond_wait(&l->cv_work, &l->mu);
    if (l->stop) break;
    int64_t g = l->next_fill++;
    slot *s = &l->slots[g % l->depth];
    s->state = S_FILLING;
    s->g = g;
    pthread_mutex_unlock(&l->mu);
    fill_one(l, s, g);
    pthread_mutex_lock(&l->mu);
    s->state = s->err == AG_OK ? S_READY : S_ERROR;
    pthread_cond_broadcast(&l->cv_ready);
  }
  pthread_mutex_unlock(&l->mu);
  return NULL;
}

/* ---- copies (the thread calling next) ---- */

static ag_status issue_copy(ag_loader *l, slot *s, ag_stream *compute) {
  const ag_loader_config *c = &l->cfg;
  ag_devstate *ds = l->ds;
  ag_status st = AG_OK;
  /* Allocated for the copy stream, so the copy never writes a block whose
   * previous contents compute work still reads; the compute stream's use is
   * recorded below so a free there waits for it. */
  ag_stream *prev = ag_stream_set_current(ds->dev, l->copy);
  ag_mem_category_push(AG_MEM_STAGING);
  for (int f = 0; f < c->n_fields && st == AG_OK; f++) {
    s->dev[f] = ag__scope_detach(ag__tensor_new(ds, c->fields[f].dtype, c->fields[f].ndim, s->shape[f]));
    if (!s->dev[f]) st = ag_last_status();
  }
  ag_mem_category_pop();
  ag_stream_set_current(ds->dev, prev);
  if (st == AG_OK && !s->start) {
    s->start = ag_event_create(ds->dev, true);
    s->done = ag_event_create(ds->dev, true);
    if (!s->start || !s->done) st = ag_last_status();
  }
  uint64_t t0 = ag__now_ns();
  if (st == AG_OK) st = ag_event_record(s->start, l->copy);
  s->copy_bytes = 0;
  for (int f = 0; f < c->n_fields && st == AG_OK; f++) {
    ag_tensor *t = s->dev[f];
    size_t bytes = (size_t)t->numel * ag_dtype_size(t->dtype);
    if (bytes) st = ds->be->copy_h2d(l->copy->bs, t->st->base, t->st->offset, s->buf[f], bytes, true);
    if (st == AG_OK) st = ag_pinned_record_stream(s->buf[f], l->copy);
    ag__block_record_stream(t->st->block, compute);
    s->copy_bytes += bytes;
  }
  if (st == AG_OK) st = ag_event_record(s->done, l->copy);
  ag__trace_host("loader", "issue copies", t0, ag__now_ns(), "bytes", (int64_t)s->copy_bytes);
  /* On failure the copies already queued may still read the buffers: the
   * recorded events keep them out of reuse until then. */
  release_buffers(s, c->n_fields);
  return st;
}

static void drop_tensors(slot *s, int n) {
  for (int f = 0; f < n; f++) {
    ag_tensor_release(s->dev[f]);
    s->dev[f] = NULL;
  }
}

static ag_status fail(ag_loader *l, ag_status st, const char *fmt_batch, long long index, long long epoch,
                      const char *msg) {
  snprintf(l->failed_msg, sizeof l->failed_msg, fmt_batch, index, epoch, msg);
  l->failed = st;
  return ag_error_set(st, "%s", l->failed_msg);
}

ag_status ag_loader_next(ag_loader *l, ag_tensor **out, ag_loader_batch_info *info) {
  if (!l || !out || !info) return ag_error_set(AG_ERR_INVALID, "ag_loader_next: NULL argument");
  const ag_loader_config *c = &l->cfg;
  memset(info, 0, sizeof *info);
  for (int f = 0; f < c->n_fields; f++) out[f] = NULL;
  if (l->failed != AG_OK)
    return ag_error_set(AG_ERR_STATE, "ag_loader_next: the loader stopped after an error: %s", l->failed_msg);
  int64_t g = l->consumed;
  if (g >= l->total) {
    info->end = true;
    if (c->profiler) ag__prof_data_end(c->profiler);
    return AG_OK;
  }
  ag_stream *compute = ag__current_stream(l->ds);
  slot *s = &l->slots[g % l->depth];
  uint64_t t0 = ag__now_ns();
  if (c->fill_on_caller && s->state == S_EMPTY) {
    /* No workers: the batch is made here, and all of it is input time. */
    s->state = S_FILLING;
    s->g = g;
    l->next_fill = g + 1;
    fill_one(l, s, g);
    s->state = s->err == AG_OK ? S_READY : S_ERROR;
  }
  pthread_mutex_lock(&l->mu);
  while (s->state == S_EMPTY || s->state == S_FILLING || s->g != g) pthread_cond_wait(&l->cv_ready, &l->mu);
  slot_state state = s->state;
  pthread_mutex_unlock(&l->mu);
  uint64_t waited = ag__now_ns() - t0;
  if (waited > 20000) ag__trace_host("loader", "wait for data", t0, t0 + waited, "batch", g);
  if (c->profiler) ag__prof_data_wait(c->profiler, waited);
  if (state == S_ERROR)
    return fail(l, s->err, "ag_loader: batch %lld of epoch %lld: %s", (long long)s->index,
                (long long)s->epoch, s->msg);
  ag_status st = AG_OK;
  if (state == S_READY) st = issue_copy(l, s, compute);
  /* Copy ahead: later batches already filled get their copies queued now,
   * so they overlap this step's compute. */
  for (int k = 1; k <= l->copy_ahead && st == AG_OK && g + k < l->total; k++) {
    slot *n = &l->slots[(g + k) % l->depth];
    pthread_mutex_lock(&l->mu);
    bool ready = n->state == S_READY && n->g == g + k;
    pthread_mutex_unlock(&l->mu);
    if (!ready) break;
    st = issue_copy(l, n, compute);
    pthread_mutex_lock(&l->mu);
    n->state = S_COPIED;
    pthread_mutex_unlock(&l->mu);
  }
  if (st == AG_OK) st = ag_stream_wait_event(compute, s->done);
  if (st != AG_OK) {
    drop_tensors(s, c->n_fields);
    return fail(l, st, "ag_loader: copying batch %lld of epoch %lld: %s", (long long)s->index,
                (long long)s->epoch, ag_last_error());
  }
  if (c->profiler) {
    ag__prof_data_ready(c->profiler, compute);
    ag__prof_copy(c->profiler, l->copy, s->start, s->done, s->copy_bytes);
    s->start = s->done = NULL; /* the profiler owns them now */
  }
  for (int f = 0; f < c->n_fields; f++) {
    out[f] = ag__alias(s->dev[f]); /* a fresh reference in the caller's scope */
    ag_tensor_release(s->dev[f]);
    s->dev[f] = NULL;
    info->bucket[f] = s->bucket[f];
    if (!out[f]) st = ag_last_status();
  }
  info->epoch = s->epoch;
  info->index = s->index;
  info->rows = s->rows;
  pthread_mutex_lock(&l->mu);
  s->state = S_EMPTY;
  l->consumed++;
  pthread_cond_broadcast(&l->cv_work);
  pthread_mutex_unlock(&l->mu);
  if (st != AG_OK)
    for (int f = 0; f < c->n_fields; f++) {
      ag_tensor_release(out[f]);
      out[f] = NULL;
    }
  return st;
}

/* ---- lifetime ---- */

static ag_status check_config(const ag_loader_config *c) {
  if (!c) return ag_error_set(AG_ERR_INVALID, "ag_loader_create: NULL config");
  if (!c->fill) return ag_error_set(AG_ERR_INVALID, "ag_loader_create: fill is NULL");
  if (c->num_samples <= 0 || c->batch_size <= 0)
    return ag_error_set(AG_ERR_INVALID, "ag_loader_create: num_samples %lld and batch_size %lld must be > 0",
                        (long long)c->num_samples, (long long)c->batch_size);
  if (c->n_fields < 1 || c->n_fields > AG_LOADER_MAX_FIELDS)
    return ag_error_set(AG_ERR_INVALID, "ag_loader_create: n_fields %d not in 1..%d", c->n_fields,
                        AG_LOADER_MAX_FIELDS);
  if (c->num_workers < 0 || c->num_workers > 256 || c->prefetch < 0 || c->epochs < 0)
    return ag_error_set(AG_ERR_INVALID, "ag_loader_create: num_workers, prefetch and epochs must be >= 0");
  for (int f = 0; f < c->n_fields; f++) {
    const ag_loader_field *fd = &c->fields[f];
    if (fd->ndim < 1 || fd->ndim > AG_MAX_DIMS || ag_dtype_size(fd->dtype) == 0)
      return ag_error_set(AG_ERR_INVALID, "ag_loader_create: field %d: bad ndim %d or dtype", f, fd->ndim);
    if (fd->var_dim < 0 || fd->var_dim >= fd->ndim)
      return ag_error_set(AG_ERR_INVALID, "ag_loader_create: field %d: var_dim %d not in 0..%d", f,
                          fd->var_dim, fd->ndim - 1);
    if (fd->var_dim > 0 && (fd->n_buckets < 1 || fd->n_buckets > AG_LOADER_MAX_BUCKETS))
      return ag_error_set(AG_ERR_INVALID, "ag_loader_create: field %d: a variable dim needs 1..%d buckets", f,
                          AG_LOADER_MAX_BUCKETS);
    for (int k = 0; fd->var_dim > 0 && k < fd->n_buckets; k++)
      if (fd->buckets[k] <= 0 || (k && fd->buckets[k] <= fd->buckets[k - 1]))
        return ag_error_set(AG_ERR_INVALID, "ag_loader_create: field %d: buckets must be positive and ascending", f);
    for (int d = 1; d < fd->ndim; d++)
      if (d != fd->var_dim && fd->shape[d] <= 0)
        return ag_error_set(AG_ERR_INVALID, "ag_loader_create: field %d: dim %d is %lld", f, d,
                            (long long)fd->shape[d]);
    /* The largest batch of this field: its byte size must not wrap. */
    int64_t big[AG_MAX_DIMS];
    big[0] = c->batch_size;
    for (int d = 1; d < fd->ndim; d++) big[d] = d == fd->var_dim ? fd->buckets[fd->n_buckets - 1] : fd->shape[d];
    if (!ag__shape_check("ag_loader_create", fd->ndim, big, fd->dtype, NULL)) return ag_last_status();
  }
  int64_t bpe = c->num_samples / c->batch_size + (c->num_samples % c->batch_size != 0), total;
  if (__builtin_mul_overflow(bpe, c->epochs ? c->epochs : 1, &total))
    return ag_error_set(AG_ERR_INVALID, "ag_loader_create: %lld batches x %lld epochs overflows",
                        (long long)bpe, (long long)c->epochs);
  return AG_OK;
}

ag_loader *ag_loader_create(const ag_loader_config *cfg) {
  if (check_config(cfg) != AG_OK) return NULL;
  ag_devstate *ds = ag__devstate(cfg->device);
  if (!ds) return NULL;
  ag_loader *l = calloc(1, sizeof *l);
  if (!l) {
    ag_error_set(AG_ERR_OOM, "ag_loader_create: out of host memory");
    return NULL;
  }
  l->cfg = *cfg;
  ag_loader_config *c = &l->cfg;
  if (!c->epochs) c->epochs = 1;
  if (!c->num_workers) c->num_workers = ag_get_num_threads() < 2 ? 1 : 2;
  l->depth = c->prefetch ? c->prefetch : 2 * c->num_workers;
  if (c->fill_on_caller) {
    c->num_workers = 0;
    l->depth = 1;
  }
  l->copy_ahead = c->copy_ahead == 0 ? 1 : (c->copy_ahead < 0 ? 0 : c->copy_ahead);
  if (l->copy_ahead > l->depth - 1) l->copy_ahead = l->depth - 1;
  l->ds = ds;
  l->bpe = c->num_samples / c->batch_size + (!c->drop_last && c->num_samples % c->batch_size != 0);
  l->total = l->bpe * c->epochs;
  for (int f = 0; f < c->n_fields; f++) {
    ag_loader_field *fd = &c->fields[f];
    int64_t n = c->batch_size;
    for (int d = 1; d < fd->ndim; d++) n *= d == fd->var_dim ? fd->buckets[fd->n_buckets - 1] : fd->shape[d];
    l->max_bytes[f] = (size_t)(n > 0 ? n : 1) * ag_dtype_size(fd->dtype);
  }
  pthread_mutex_init(&l->mu, NULL);
  pthread_cond_init(&l->cv_work, NULL);
  pthread_cond_init(&l->cv_ready, NULL);
  l->slots = calloc((size_t)l->depth, sizeof *l->slots);
  l->threads = calloc((size_t)(c->num_workers ? c->num_workers : 1), sizeof *l->threads);
  worker_arg *args = calloc((size_t)(c->num_workers ? c->num_workers : 1), sizeof *args);
  bool ok = l->slots && l->threads && args;
  for (int i = 0; ok && i < l->depth; i++) {
    l->slots[i].g = -1;
    ok = (l->slots[i].samples = malloc((size_t)c->batch_size * sizeof(int64_t))) != NULL;
  }
  if (!ok) ag_error_set(AG_ERR_OOM, "ag_loader_create: out of host memory");
  if (ok) ok = (l->copy = ag_stream_create(c->device)) != NULL;
  if (ok) ag__trace_stream_name(l->copy, "loader copy stream");
  for (int i = 0; ok && i < c->num_workers; i++) {
    args[i] = (worker_arg){l, i};
    if (pthread_create(&l->threads[i], NULL, worker, &args[i]) != 0) {
      ag_error_set(AG_ERR_INTERNAL, "ag_loader_create: cannot start worker thread %d", i);
      ok = false;
    } else {
      l->n_threads++;
    }
  }
  if (!ok) {
    ag_status st = ag_last_status();
    char msg[512];
    snprintf(msg, sizeof msg, "%s", ag_last_error());
    l->threads_arg = args;
    ag_loader_destroy(l);
    ag_error_set(st, "%s", msg);
    return NULL;
  }
  /* Workers read their argument only at start, but a worker may not have
   * started yet: the array lives as long as the loader. */
  l->failed_msg[0] = 0;
  l->threads_arg = args;
  return l;
}

void ag_loader_destroy(ag_loader *l) {
  if (!l) return;
  pthread_mutex_lock(&l->mu);
  l->stop = true;
  pthread_cond_broadcast(&l->cv_work);
  pthread_mutex_unlock(&l->mu);
  for (int i = 0; i < l->n_threads; i++) pthread_join(l->threads[i], NULL);
  for (int i = 0; l->slots && i < l->depth; i++) {
    slot *s = &l->slots[i];
    if (s->state == S_READY) release_buffers(s, l->cfg.n_fields);
    drop_tensors(s, l->cfg.n_fields);
    ag_event_destroy(s->start);
    ag_event_destroy(s->done);
    free(s->samples);
  }
  ag_stream_destroy(l->copy);
  pthread_mutex_destroy(&l->mu);
  pthread_cond_destroy(&l->cv_work);
  pthread_cond_destroy(&l->cv_ready);
  free(l->slots);
  free(l->threads);
  free(l->threads_arg);
  free(l);
}
