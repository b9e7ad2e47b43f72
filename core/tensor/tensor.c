/* Tensor objects: headers and storage, scopes, dtypes, properties, and the
 * launch path. Everything here is backend-neutral: memory comes from the
 * device's caching allocator and work goes through ag__launch. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "anygrad/autograd.h"
#include "runtime/devstate.h"
#include "memory/block.h"
#include "tensor/tensor_internal.h"
#include "tensor/autocast.h"
#include "tensor/record.h"

static atomic_llong g_live;

/* A NULL tensor argument: keep the first error of a chain (DESIGN.md), or
 * say which call got the NULL when nothing failed before. */
static ag_tensor *null_tensor(const char *fn) {
  if (ag_last_status() == AG_OK) ag_error_set(AG_ERR_INVALID, "%s: NULL tensor", fn);
  return NULL;
}

/* ---------------- header pool ----------------
 * Tensor headers are never returned to malloc. A released header is marked
 * AG__T_DEAD with its release record and queued on the releasing thread's
 * FIFO; it is reused only after HDR_QUARANTINE later releases on that thread.
 * A stale handle therefore always points at a valid header, and within that
 * window every public call reports it as released instead of reading freed
 * memory (docs/design/core.md, "Released handles"). A thread that releases
 * more than it creates hands its oldest headers to a shared list (under a
 * mutex, once per HDR_QUARANTINE releases); an exiting thread hands over all
 * of its own. */
#define HDR_QUARANTINE 4096

typedef struct hdr_list {
  ag_tensor *head, *tail; /* head: oldest */
  int64_t n;
} hdr_list;

/* Everything per thread in one block, so a call looks up its thread's
 * storage once: the FIFO of released headers, a slab of headers never used,
 * and the release in progress (the outermost public call that releases,
 * ag_tensor_release or ag_scope_end, names itself and its caller; the
 * releases it causes, of gradients and saved tensors, inherit it). */
#define HDR_SLAB 64
typedef struct hdr_tls {
  hdr_list q;
  ag_tensor *fresh;
  int nfresh;
  bool registered;
  struct {
    const char *call, *file;
    const void *addr;
    int line, depth;
  } rel;
} hdr_tls;

static _Thread_local hdr_tls tl_h;
static hdr_list g_hdrs;
static atomic_llong g_hdrs_n;
static pthread_mutex_t g_hdr_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_key_t g_hdr_key;
static pthread_once_t g_hdr_once = PTHREAD_ONCE_INIT;

static void hdr_push(hdr_list *l, ag_tensor *t) {
  t->pool_next = NULL;
  if (l->tail)
    l->tail->pool_next = t;
  else
    l->head = t;
  l->tail = t;
  l->n++;
}

static ag_tensor *hdr_pop(hdr_list *l) {
  ag_tensor *t = l->head;
  l->head = t->pool_next;
  if (!l->head) l->tail = NULL;
  l->n--;
  return t;
}

/* Append the first k headers of src to the shared list. */
static void hdr_give(hdr_list *src, int64_t k) {
  if (k <= 0) return;
  pthread_mutex_lock(&g_hdr_lock);
  for (int64_t i = 0; i < k; i++) hdr_push(&g_hdrs, hdr_pop(src));
  atomic_store_explicit(&g_hdrs_n, g_hdrs.n, memory_order_relaxed);
  pthread_mutex_unlock(&g_hdr_lock);
}

/* An exiting thread hands over its released headers and its unused ones. */
static void hdr_thread_exit(void *p) {
  hdr_tls *h = p;
  for (; h->nfresh > 0; h->nfresh--, h->fresh++) {
    h->fresh->magic = 0;
    hdr_push(&h->q, h->fresh);
  }
  hdr_give(&h->q, h->q.n);
}
static void hdr_key_init(void) { pthread_key_create(&g_hdr_key, hdr_thread_exit); }

static ag_tensor *hdr_alloc(hdr_tls *h) {
  if (h->q.n > HDR_QUARANTINE) return hdr_pop(&h->q);
  if (AG_UNLIKELY(atomic_load_explicit(&g_hdrs_n, memory_order_relaxed) > 0)) {
    ag_tensor *t = NULL;
    pthread_mutex_lock(&g_hdr_lock);
    if (g_hdrs.n > 0) {
      t = hdr_pop(&g_hdrs);
      atomic_store_explicit(&g_hdrs_n, g_hdrs.n, memory_order_relaxed);
    }
    pthread_mutex_unlock(&g_hdr_lock);
    if (t) return t;
  }
  if (AG_UNLIKELY(h->nfresh == 0)) {
    if (AG_UNLIKELY(!h->registered)) {
      pthread_once(&g_hdr_once, hdr_key_init);
      pthread_setspecific(g_hdr_key, h);
      h->registered = true;
    }
    h->fresh = malloc(HDR_SLAB * sizeof(ag_tensor));
    if (!h->fresh) return NULL;
    h->nfresh = HDR_SLAB;
  }
  h->nfresh--;
  return h->fresh++;
}

/* Every thread that retires a header allocated one first or registers
 * here, so its FIFO is handed over when it exits. */
static void hdr_retire(hdr_tls *h, ag_tensor *t) {
  if (AG_UNLIKELY(!h->registered)) {
    pthread_once(&g_hdr_once, hdr_key_init);
    pthread_setspecific(g_hdr_key, h);
    h->registered = true;
  }
  hdr_push(&h->q, t);
  if (AG_UNLIKELY(h->q.n > 2 * HDR_QUARANTINE)) hdr_give(&h->q, HDR_QUARANTINE);
}

static void tensor_release(hdr_tls *h, ag_tensor *t);

static hdr_tls *rel_enter(const char *call, const void *addr) {
  hdr_tls *h = &tl_h;
  if (h->rel.depth++ == 0) {
    h->rel.call = call;
    h->rel.addr = addr;
    h->rel.file = ag__site_marked(&h->rel.line);
  }
  return h;
}

bool ag__tensor_unusable(const ag_tensor *t, const char *fn) {
  if (!t) {
    null_tensor(fn);
    return true;
  }
  if (t->magic != AG__T_DEAD) {
    ag_error_set(AG_ERR_STATE, "%s: %p is not a tensor handle", fn, (const void *)t);
    return true;
  }
  char desc[160], where[200];
  size_t n = (size_t)snprintf(desc, sizeof desc, "%s[", ag_dtype_name(t->dtype));
  for (int i = 0; i < t->ndim && i < AG_MAX_DIMS && n < sizeof desc; i++)
    n += (size_t)snprintf(desc + n, sizeof desc - n, i ? ",%lld" : "%lld", (long long)t->shape[i]);
  if (n < sizeof desc) snprintf(desc + n, sizeof desc - n, "] %s", t->rel_dev ? t->rel_dev : "?");
  if (t->rel_file)
    snprintf(where, sizeof where, "%s:%d", t->rel_file, t->rel_line);
  else
    ag__describe_address(t->rel_addr, where, sizeof where);
  ag_error_set(AG_ERR_STATE,
               "%s: tensor %s was released (by %s, called from %s); a tensor lives until its "
               "last reference is released or the scope that owns it ends: read it before, or "
               "move it out of the scope with ag_tensor_keep",
               fn, desc, t->rel_call ? t->rel_call : "ag_tensor_release", where);
  return true;
}

/* ---------------- dtypes ---------------- */

static const char *const k_dtype_names[AG_DTYPE_COUNT] = {"f32", "f16", "bf16", "i32", "f64",
                                                                 "i64", "bool", "u8"};
static const size_t k_dtype_sizes[AG_DTYPE_COUNT] = {4, 2, 2, 4, 8, 8, 1, 1};

const char *ag_dtype_name(ag_dtype dt) {
  return ((unsigned)dt < AG_DTYPE_COUNT) ? k_dtype_names[dt] : "?";
}
size_t ag_dtype_size(ag_dtype dt) { return ((unsigned)dt < AG_DTYPE_COUNT) ? k_dtype_sizes[dt] : 0; }
bool ag_dtype_is_float(ag_dtype dt) { return dt == AG_F32 || dt == AG_F16 || dt == AG_BF16 || dt == AG_F64; }
bool ag_dtype_is_int(ag_dtype dt) { return dt == AG_I32 || dt == AG_I64 || dt == AG_U8 || dt == AG_BOOL; }

ag_status ag_dtype_parse(const char *s, ag_dtype *out_dtype) {
  if (!s || !out_dtype) return ag_error_set(AG_ERR_INVALID, "ag_dtype_parse: NULL argument");
  for (int i = 0; i < AG_DTYPE_COUNT; i++)
    if (!strcmp(s, k_dtype_names[i])) {
      *out_dtype = (ag_dtype)i;
      return AG_OK;
    }
  return ag_error_set(AG_ERR_INVALID, "ag_dtype_parse: '%s' is not a dtype (f32, f16, bf16, i32, f64, i64, bool, u8)", s);
}

/* ---------------- scopes ---------------- */

typedef struct ag_scope {
  ag_tensor **items;
  int32_t n, cap;
  struct ag_scope *parent;
  int grad_depth, autocast_depth; /* mode regions open when the scope began */
} ag_scope;

static _Thread_local ag_scope *tl_scope;

static bool scope_add(ag_scope *s, ag_tensor *t) {
  if (s->n == s->cap) {
    int32_t cap = s->cap ? s->cap * 2 : 64;
    ag_tensor **p = realloc(s->items, (size_t)cap * sizeof *p);
    if (!p) return false;
    s->items = p;
    s->cap = cap;
  }
  t->scope = s;
  t->scope_slot = s->n;
  s->items[s->n++] = t;
  return true;
}

static void scope_remove(ag_tensor *t) {
  ag_scope *s = t->scope;
  s->items[t->scope_slot] = NULL;
  /* Popping trailing holes keeps a loop of create/release inside one scope
   * from growing the list. */
  while (s->n > 0 && s->items[s->n - 1] == NULL) s->n--;
  t->scope = NULL;
}

void ag_scope_begin(void) {
  ag_scope *s = calloc(1, sizeof *s);
  if (!s) {
    ag_error_set(AG_ERR_OOM, "ag_scope_begin: out of host memory");
    return;
  }
  s->parent = tl_scope;
  s->grad_depth = ag__grad_mode_depth();
  s->autocast_depth = ag__autocast_depth();
  tl_scope = s;
}

ag_status ag_scope_end(void) {
  ag_scope *s = tl_scope;
  if (!s) return ag_error_set(AG_ERR_STATE, "ag_scope_end: no scope is open");
  /* Mode regions opened inside the scope close with it (an early return
   * past ag_grad_mode_end or ag_autocast_end must not leave the thread in
   * that mode); the mismatch is reported once the state is restored. */
  char ac_what[300], gm_what[300];
  int n_ac = ag__autocast_unwind(s->autocast_depth, ac_what, sizeof ac_what);
  int n_gm = ag__grad_mode_unwind(s->grad_depth, gm_what, sizeof gm_what);
  /* Release in reverse creation order: later tensors tend to depend on
   * earlier ones through autograd nodes. */
  hdr_tls *h = rel_enter("ag_scope_end", __builtin_return_address(0));
  for (int32_t i = s->n - 1; i >= 0; i--) {
    ag_tensor *t = s->items[i];
    if (!t) continue;
    t->scope = NULL;
    s->items[i] = NULL;
    tensor_release(h, t);
  }
  h->rel.depth--;
  tl_scope = s->parent;
  free(s->items);
  free(s);
  if (n_ac || n_gm)
    return ag_error_set(AG_ERR_STATE,
                        "ag_scope_end: %d mode region%s opened inside the scope %s still open, the outermost %s; "
                        "closed with the scope (close each region before its scope ends)",
                        n_ac + n_gm, n_ac + n_gm == 1 ? "" : "s", n_ac + n_gm == 1 ? "was" : "were",
                        n_ac ? ac_what : gm_what);
  return AG_OK;
}

ag_tensor *ag_tensor_keep(ag_tensor *t) {
  if (!t) return NULL;
  if (ag__bad_tensor(t, "ag_tensor_keep")) return NULL;
  if (!t->scope) return t;
  ag_scope *parent = t->scope->parent;
  scope_remove(t);
  if (parent && !scope_add(parent, t)) ag_error_set(AG_ERR_OOM, "ag_tensor_keep: out of host memory");
  return t;
}

int64_t ag_live_tensors(void) { return atomic_load(&g_live); }

/* ---------------- headers and storage ---------------- */

/* The one shape rule: the product of all sizes, a size 0 counted as 1, times
 * the element size fits in int64_t. It bounds the element count, every
 * contiguous stride and the byte size at once, so nothing computed from a
 * shape that passed can wrap. */
bool ag__shape_check(const char *op, int ndim, const int64_t *shape, ag_dtype dt, int64_t *out_numel) {
  int64_t span = (int64_t)ag_dtype_size(dt), n = 1;
  if (span <= 0) span = 1;
  bool zero = false;
  for (int i = 0; i < ndim; i++) {
    if (shape[i] < 0) {
      ag_error_set(AG_ERR_SHAPE, "%s: negative size %lld in dim %d", op, (long long)shape[i], i);
      return false;
    }
    if (shape[i] == 0) zero = true;
    if (__builtin_mul_overflow(span, shape[i] > 0 ? shape[i] : 1, &span) ||
        (!zero && __builtin_mul_overflow(n, shape[i], &n))) {
      char b[AG_MAX_DIMS * 21 + 4];
      size_t k = 0;
      for (int j = 0; j < ndim && k < sizeof b; j++)
        k += (size_t)snprintf(b + k, sizeof b - k, j ? ",%lld" : "%lld", (long long)shape[j]);
      ag_error_set(AG_ERR_SHAPE, "%s: shape [%s] of %s is too large (its size in bytes overflows int64)", op,
                   b, ag_dtype_name(dt));
      return false;
    }
  }
  if (out_numel) *out_numel = zero ? 0 : n;
  return true;
}

/* Only called with shapes that passed ag__shape_check: no product wraps. */
void ag__contiguous_strides(int ndim, const int64_t *shape, int64_t *out) {
  int64_t s = 1;
  for (int i = ndim - 1; i >= 0; i--) {
    out[i] = s;
    s *= shape[i] > 0 ? shape[i] : 1;
  }
}

static ag_tensor *header_new(ag_dtype dt, int ndim, const int64_t *shape) {
  /* Every header passes here: shapes computed inside the core (broadcasts,
   * expands, concatenations) get the same overflow check as user shapes. */
  int64_t n = 0;
  if (AG_UNLIKELY(ndim < 0 || ndim > AG_MAX_DIMS)) {
    ag_error_set(AG_ERR_SHAPE, "tensor: ndim %d out of range [0, %d]", ndim, AG_MAX_DIMS);
    return NULL;
  }
  if (AG_UNLIKELY(!ag__shape_check("tensor", ndim, shape, dt, &n))) return NULL;
  ag_tensor *t = hdr_alloc(&tl_h);
  if (AG_UNLIKELY(!t)) {
    ag_error_set(AG_ERR_OOM, "out of host memory");
    return NULL;
  }
  t->magic = AG__T_LIVE;
  atomic_init(&t->refcount, 1);
  t->dtype = dt;
  t->ndim = ndim;
  for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
  t->numel = n;
  t->offset = 0;
  t->st = NULL;
  t->requires_grad = false;
  t->grad = NULL;
  t->grad_fn = NULL;
  t->out_index = 0;
  t->saved_version = 0;
  t->hooks = NULL;
  t->bw_pending = 0;
  t->bw_got = false;
  t->bw_buf = NULL;
  t->scope = NULL;
  t->scope_slot = -1;
  atomic_fetch_add_explicit(&g_live, 1, memory_order_relaxed);
  if (tl_scope && AG_UNLIKELY(!scope_add(tl_scope, t))) {
    ag_error_set(AG_ERR_OOM, "out of host memory");
    t->magic = AG__T_DEAD;
    t->rel_call = "tensor creation (out of host memory)";
    t->rel_addr = NULL;
    t->rel_file = NULL;
    t->rel_dev = NULL;
    hdr_retire(&tl_h, t);
    atomic_fetch_sub(&g_live, 1);
    return NULL;
  }
  return t;
}

static void storage_release(ag_storage *st) {
  if (atomic_fetch_sub_explicit(&st->refcount, 1, memory_order_acq_rel) != 1) return;
  if (st->block) ag__free(st->block);
  if (st->external && st->ext_free) {
    /* Queued kernels may still read or write the caller's memory: wait for
     * them before handing it back. If the wait is refused (sync-debug mode
     * error) the memory is kept rather than freed under a running kernel. */
    if (ag__sync_device(st->ds, "ag_tensor_release (wrapped memory)") == AG_OK)
      st->ext_free(st->ext_data, st->ext_ctx);
    else {
      char why[512]; /* the message buffer is the one being rewritten */
      snprintf(why, sizeof why, "%s", ag_last_error());
      ag_error_set(ag_last_status(), "%s; the wrapped memory was not returned to its deleter", why);
    }
  }
  free(st);
}

ag_tensor *ag__tensor_wrap(ag_devstate *ds, ag_dtype dt, int ndim, const int64_t *shape,
                           const int64_t *strides, void *data, size_t byte_offset, size_t nbytes,
                           void (*free_fn)(void *, void *), void *ctx) {
  size_t es = ag_dtype_size(dt);
  if (byte_offset % es != 0) {
    ag_error_set(AG_ERR_INVALID, "byte offset %zu is not a multiple of the %s element size", byte_offset,
                 ag_dtype_name(dt));
    return NULL;
  }
  ag_storage *st = malloc(sizeof *st);
  if (AG_UNLIKELY(!st)) {
    ag_error_set(AG_ERR_OOM, "out of host memory");
    return NULL;
  }
  atomic_init(&st->refcount, 1);
  atomic_init(&st->version, 0);
  st->ds = ds;
  st->nbytes = nbytes;
  st->block = NULL;
  st->base = data;
  st->offset = 0;
  st->external = true;
  st->ext_free = NULL; /* set once the tensor exists: a failure here calls nothing */
  st->ext_data = data;
  st->ext_ctx = ctx;
  ag_tensor *t = header_new(dt, ndim, shape);
  if (AG_UNLIKELY(!t)) {
    free(st);
    return NULL;
  }
  t->st = st;
  if (strides)
    for (int i = 0; i < ndim; i++) t->strides[i] = strides[i];
  else
    ag__contiguous_strides(ndim, shape, t->strides);
  t->offset = (int64_t)(byte_offset / es);
  st->ext_free = free_fn;
  return t;
}

ag_tensor *ag__tensor_new(ag_devstate *ds, ag_dtype dt, int ndim, const int64_t *shape) {
  int64_t numel = 0;
  if (AG_UNLIKELY(ndim < 0 || ndim > AG_MAX_DIMS)) {
    ag_error_set(AG_ERR_SHAPE, "tensor: ndim %d out of range [0, %d]", ndim, AG_MAX_DIMS);
    return NULL;
  }
  if (AG_UNLIKELY(!ag__shape_check("tensor", ndim, shape, dt, &numel))) return NULL;
  size_t bytes = (size_t)numel * ag_dtype_size(dt);
  ag_storage *st = malloc(sizeof *st);
  if (AG_UNLIKELY(!st)) {
    ag_error_set(AG_ERR_OOM, "out of host memory");
    return NULL;
  }
  atomic_init(&st->refcount, 1);
  atomic_init(&st->version, 0);
  st->ds = ds;
  st->nbytes = bytes;
  st->block = NULL;
  st->external = false;
  st->ext_free = NULL;
  if (AG_UNLIKELY(ag__alloc(ds, bytes ? bytes : 1, ag__current_stream(ds), AG_MEM_OTHER, &st->block) != AG_OK)) {
    free(st);
    return NULL;
  }
  st->base = ag__block_base(st->block);
  st->offset = ag__block_offset(st->block);
  ag_tensor *t = header_new(dt, ndim, shape);
  if (AG_UNLIKELY(!t)) {
    storage_release(st);
    return NULL;
  }
  t->st = st;
  ag__contiguous_strides(ndim, shape, t->strides);
  return t;
}

ag_tensor *ag__tensor_view(ag_tensor *src, int ndim, const int64_t *shape, const int64_t *strides,
                           int64_t offset) {
  ag_tensor *t = header_new(src->dtype, ndim, shape);
  if (!t) return NULL;
  atomic_fetch_add_explicit(&src->st->refcount, 1, memory_order_relaxed);
  t->st = src->st;
  for (int i = 0; i < ndim; i++) t->strides[i] = strides[i];
  t->offset = offset;
  return t;
}

ag_tensor *ag__private_ref(ag_tensor *t) {
  ag_scope *saved = tl_scope;
  tl_scope = NULL; /* never scope-owned */
  ag_tensor *r = ag__tensor_view(t, t->ndim, t->shape, t->strides, t->offset);
  tl_scope = saved;
  if (r) {
    r->requires_grad = false;
  }
  return r;
}

ag_tensor *ag__scope_detach(ag_tensor *t) {
  if (t && t->scope) scope_remove(t);
  return t;
}

void *ag__scope_suspend(void) {
  ag_scope *s = tl_scope;
  tl_scope = NULL;
  return s;
}

void ag__scope_resume(void *scope) { tl_scope = scope; }

ag_status ag_tensor_record_stream(ag_tensor *t, ag_stream *s) {
  if (!t || !s) return ag_error_set(AG_ERR_INVALID, "ag_tensor_record_stream: NULL argument");
  if (ag__bad_tensor(t, "ag_tensor_record_stream")) return ag_last_status();
  if (s->ds != t->st->ds)
    return ag_error_set(AG_ERR_DEVICE, "ag_tensor_record_stream: tensor on %s, stream on %s", ag__devlabel(t),
                        s->ds->label);
  if (t->st->block) ag__block_record_stream(t->st->block, s);
  return AG_OK;
}

ag_tensor *ag_tensor_retain(ag_tensor *t) {
  if (!t) return NULL;
  if (ag__bad_tensor(t, "ag_tensor_retain")) return NULL;
  atomic_fetch_add_explicit(&t->refcount, 1, memory_order_relaxed);
  return t;
}

static void tensor_release(hdr_tls *h, ag_tensor *t) {
  if (AG_UNLIKELY(t->magic != AG__T_LIVE)) {
    ag__tensor_unusable(t, "ag_tensor_release");
    return;
  }
  /* Only the scope's own (last) reference takes the tensor out of its scope;
   * a release paired with a retain just drops that reference. */
  if (t->scope && atomic_load_explicit(&t->refcount, memory_order_acquire) == 1) scope_remove(t);
  if (atomic_fetch_sub_explicit(&t->refcount, 1, memory_order_acq_rel) != 1) return;
  t->magic = AG__T_DEAD;
  t->rel_call = h->rel.call;
  t->rel_addr = h->rel.addr;
  t->rel_file = h->rel.file;
  t->rel_line = h->rel.line;
  t->rel_dev = t->st ? t->st->ds->label : NULL;
  ag__grad_tensor_free(t);
  storage_release(t->st);
  t->st = NULL;
  atomic_fetch_sub_explicit(&g_live, 1, memory_order_relaxed);
  hdr_retire(h, t);
}

void ag_tensor_release(ag_tensor *t) {
  if (!t) return;
  hdr_tls *h = rel_enter("ag_tensor_release", __builtin_return_address(0));
  tensor_release(h, t);
  h->rel.depth--;
}

void ag__operand(ag_koperand *o, const ag_tensor *t) {
  o->base = t->st->base;
  o->offset = t->st->offset + (size_t)t->offset * ag_dtype_size(t->dtype);
  o->dtype = t->dtype;
  o->ndim = t->ndim;
  for (int i = 0; i < t->ndim; i++) {
    o->shape[i] = t->shape[i];
    o->strides[i] = t->strides[i];
  }
}

void ag__kmulti_set(ag_kmulti *m, int k, const ag_tensor *t) {
  m->t[k].base = t ? t->st->base : NULL;
  m->t[k].offset = t ? t->st->offset + (size_t)t->offset * ag_dtype_size(t->dtype) : 0;
  m->t[k].dtype = t ? t->dtype : AG_F32;
  m->t[k].numel = t ? t->numel : 0;
  if (m->count < k + 1) m->count = k + 1;
}

const char *ag__devlabel(const ag_tensor *t) { return t->st->ds->label; }

ag_devstate *ag__same_device(const char *op, int n, ag_tensor *const *ts) {
  ag_devstate *ds = NULL;
  const ag_tensor *first = NULL;
  for (int i = 0; i < n; i++) {
    if (!ts[i]) continue;
    if (AG_UNLIKELY(ts[i]->magic != AG__T_LIVE)) {
      ag__tensor_unusable(ts[i], op);
      return NULL;
    }
    if (!ds) {
      ds = ts[i]->st->ds;
      first = ts[i];
    } else if (ts[i]->st->ds != ds) {
      ag_error_set(AG_ERR_DEVICE, "%s: expected all tensors on one device, got %s and %s", op,
                   ag__devlabel(first), ag__devlabel(ts[i]));
      return NULL;
    }
  }
  return ds;
}

/* In portable numerics a device that refuses the mode says so (its cached
 * reason, docs/numerics.md), and an op without a portable kernel is named
 * as such: "not supported" alone would hide that the default mode runs it. */
static const char *portable_refusal(ag_devstate *ds) {
  if (AG_LIKELY(ag_get_numerics() != AG_NUMERICS_PORTABLE)) return "";
  return ag__portable_open(ds) == AG_OK ? " in portable numerics (no portable kernel: docs/numerics.md)" : NULL;
}

bool ag__supported(ag_devstate *ds, ag_kop op, int sub, ag_dtype dt, const char *name) {
  if (AG_LIKELY(ag__supports(ds, op, sub, dt))) return true;
  const char *why = portable_refusal(ds);
  if (why)
    ag_error_set(AG_ERR_UNSUPPORTED, "%s for %s is not supported on %s%s", name, ag_dtype_name(dt), ds->label, why);
  return false;
}

/* An elementwise sub-op the backend does not run is refused here, by the
 * backend's own supports() data, whatever the caller checked: a kernel
 * never sees a sub-op it lacks (which could pass its input through). The
 * dtype asked is the input's (casts and comparisons read it; the other ops
 * have one dtype). */
static ag_status elementwise_check(ag_devstate *ds, const ag_kernel_call *c) {
  const ag_dtype dt = c->o[1].dtype;
  if (AG_LIKELY(ag__supports(ds, c->op, c->sub, dt))) return AG_OK;
  const ag_unary_info *u = c->op == AG_K_UNARY ? ag_unary_info_of(c->sub) : NULL;
  const ag_binary_info *b = c->op == AG_K_BINARY ? ag_binary_info_of(c->sub) : NULL;
  const char *sub = u ? u->name : b ? b->name : "(unknown sub-op)";
  const char *why = portable_refusal(ds);
  if (!why) return AG_ERR_UNSUPPORTED; /* the device's refusal, set */
  return ag_error_set(AG_ERR_UNSUPPORTED, "%s for %s is not supported on %s%s (elementwise %s, %s sub-op %d)",
                      c->name ? c->name : "launch", ag_dtype_name(dt), ds->label, why, sub,
                      c->op == AG_K_UNARY ? "unary" : "binary", c->sub);
}

/* The blocks a launch took through ag_kernel_call.workspace. */
typedef struct launch_ws {
  ag_devstate *ds;
  ag_stream *s;
  const char *name;
  int n;
  ag_block *b[AG_KMAX_WORKSPACE];
} launch_ws;

static ag_status workspace_take(void *ctx, size_t bytes, void **out_base, size_t *out_offset) {
  launch_ws *w = ctx;
  const char *fn = w->name ? w->name : "launch";
  if (!bytes || w->n >= AG_KMAX_WORKSPACE || !out_base || !out_offset)
    return ag_error_set(AG_ERR_INVALID, "%s: workspace of %zu bytes refused (%d taken, at most %d, none empty)",
                        fn, bytes, w->n, AG_KMAX_WORKSPACE);
  ag_block *b = NULL;
  ag_status st = ag__alloc(w->ds, bytes, w->s, AG_MEM_WORKSPACE, &b);
  if (st != AG_OK) {
    char msg[400];
    snprintf(msg, sizeof msg, "%s", ag_last_error());
    return ag_error_set(st, "%s: workspace of %zu bytes: %s", fn, bytes, msg);
  }
  w->b[w->n++] = b;
  *out_base = ag__block_base(b);
  *out_offset = ag__block_offset(b);
  return AG_OK;
}

/* ---------------- launches ---------------- */

static _Atomic(ag_launch_hook_fn) g_launch_hook;
static atomic_int g_launch_hook_users;
static _Thread_local const char *tl_node;
static _Thread_local int tl_node_index = -1;

void ag__launch_hook_set(ag_launch_hook_fn fn) { atomic_store_explicit(&g_launch_hook, fn, memory_order_release); }
void ag__launch_hook_use(int delta) { atomic_fetch_add(&g_launch_hook_users, delta); }
bool ag__launch_hook_active(void) {
  return atomic_load_explicit(&g_launch_hook_users, memory_order_relaxed) != 0;
}

void ag__launch_node_set(const char *name, int index) {
  tl_node = name;
  tl_node_index = name ? index : -1;
}

const char *ag__launch_node(int *out_index) {
  if (out_index) *out_index = tl_node ? tl_node_index : -1;
  return tl_node;
}

static inline ag_status launch_backend(ag_devstate *ds, ag_stream *s, const ag_kernel_call *c) {
  ag_status st = ds->be->launch(s->bs, c);
  /* Ops that validate indices on the device report through the error
   * word; checking it right away is free on synchronous backends. */
  if (st == AG_OK && (c->op == AG_K_EMBEDDING || c->op == AG_K_CROSS_ENTROPY || c->op == AG_K_GATHER ||
                      c->op == AG_K_ONE_HOT || c->op == AG_K_SCATTER_ADD))
    st = ag__kernel_error_check(s);
  return st;
}

ag_status ag__launch_backend(ag_devstate *ds, ag_stream *s, const ag_kernel_call *c) {
  return launch_backend(ds, s, c);
}

ag_status ag__launch(ag_devstate *ds, ag_kernel_call *c) {
  ag_stream *s = ag__current_stream(ds);
  if (c->op == AG_K_UNARY || c->op == AG_K_BINARY) {
    ag_status est = elementwise_check(ds, c);
    if (AG_UNLIKELY(est != AG_OK)) return est;
  }
  c->struct_size = (uint32_t)sizeof *c;
  c->flags = (ag_get_deterministic() ? AG_KF_DETERMINISTIC : 0u) | AG_KF_WORKSPACE;
  if (AG_UNLIKELY(ag_get_numerics() == AG_NUMERICS_PORTABLE)) {
    ag_status pst = ag__portable_open(ds);
    if (pst != AG_OK) return pst;
    c->flags |= AG_KF_PORTABLE;
  }
  launch_ws ws;
  ws.ds = ds;
  ws.s = s;
  ws.name = c->name;
  ws.n = 0;
  c->workspace = workspace_take;
  c->workspace_ctx = &ws;
  ag_status st;
  ag_launch_hook_fn hook = AG_UNLIKELY(ag__launch_hook_active())
                               ? atomic_load_explicit(&g_launch_hook, memory_order_acquire)
                               : NULL;
  if (hook) st = hook(ds, s, c); /* op traces, AG_FAULT */
  else st = launch_backend(ds, s, c);
  /* in s's order: the work enqueued above runs before any reuse */
  for (int i = 0; i < ws.n; i++) ag__free(ws.b[i]);
  c->workspace = NULL;
  c->workspace_ctx = NULL;
  c->flags &= ~AG_KF_WORKSPACE;
  return st;
}

/* ---------------- properties ---------------- */

/* A NULL tensor gives the neutral value without an error (documented); a
 * released one also sets AG_ERR_STATE. */
static bool prop_ok(const ag_tensor *t, const char *fn) {
  if (AG_LIKELY(t && t->magic == AG__T_LIVE)) return true;
  if (t) ag__tensor_unusable(t, fn);
  return false;
}
int ag_tensor_ndim(const ag_tensor *t) { return prop_ok(t, "ag_tensor_ndim") ? t->ndim : 0; }
const int64_t *ag_tensor_shape(const ag_tensor *t) {
  return prop_ok(t, "ag_tensor_shape") ? t->shape : NULL;
}
const int64_t *ag_tensor_strides(const ag_tensor *t) {
  return prop_ok(t, "ag_tensor_strides") ? t->strides : NULL;
}
int64_t ag_tensor_numel(const ag_tensor *t) { return prop_ok(t, "ag_tensor_numel") ? t->numel : 0; }
ag_dtype ag_tensor_dtype(const ag_tensor *t) {
  return prop_ok(t, "ag_tensor_dtype") ? t->dtype : AG_F32;
}
ag_device ag_tensor_device(const ag_tensor *t) {
  return prop_ok(t, "ag_tensor_device") ? t->st->ds->dev : AG_CPU;
}

int64_t ag_tensor_dim(const ag_tensor *t, int dim) {
  if (ag__bad_tensor(t, "ag_tensor_dim")) return -1;
  int d = dim < 0 ? dim + t->ndim : dim;
  if (d < 0 || d >= t->ndim) {
    ag_error_set(AG_ERR_SHAPE, "ag_tensor_dim: dim %d out of range for a %d-d tensor", dim, t->ndim);
    return -1;
  }
  return t->shape[d];
}

bool ag_tensor_is_contiguous(const ag_tensor *t) {
  if (!prop_ok(t, "ag_tensor_is_contiguous")) return false;
  if (t->numel == 0) return true; /* no element to address */
  int64_t s = 1;
  for (int i = t->ndim - 1; i >= 0; i--) {
    if (t->shape[i] != 1 && t->strides[i] != s) return false;
    s *= t->shape[i];
  }
  return true;
}

char *ag_tensor_describe(const ag_tensor *t, char *buf, size_t len) {
  if (!buf || !len) return buf;
  if (!t) {
    snprintf(buf, len, "(null)");
    return buf;
  }
  if (t->magic != AG__T_LIVE) {
    snprintf(buf, len, "(released tensor)");
    return buf;
  }
  size_t n = (size_t)snprintf(buf, len, "%s[", ag_dtype_name(t->dtype));
  for (int i = 0; i < t->ndim && n < len; i++)
    n += (size_t)snprintf(buf + n, len - n, i ? ",%lld" : "%lld", (long long)t->shape[i]);
  if (n < len) snprintf(buf + n, len - n, "] %s", ag__devlabel(t));
  return buf;
}
