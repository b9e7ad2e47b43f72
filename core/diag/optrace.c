/* Op traces and kernel-op tallies (anygrad/optrace.h) and the test-only
 * fault injection of AG_FAULT: all observe ag__launch through the launch
 * hook that this file registers with the ops (tensor/tensor_internal.h);
 * launches pay a single predictable branch while none is in use. A trace
 * or a tally belongs to the thread that began it. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "anygrad/checks.h"
#include "anygrad/optrace.h"
#include "tensor/half.h"
#include "tensor/tensor_internal.h"

/* ---------------- records ---------------- */

typedef struct region {
  void *base; /* the segment of the traced device */
  size_t off, bytes;
  unsigned char *before, *after;
} region;

typedef struct slot {
  int region;
  size_t rel; /* bytes from the region start */
  ag_dtype dtype;
  int ndim;
  int64_t shape[AG_MAX_DIMS], strides[AG_MAX_DIMS];
  int64_t numel;
  bool multi; /* an entry of the multi list (contiguous) */
} slot;

typedef struct rec {
  ag_kernel_call call; /* operand bases of the traced device */
  ag_kmulti *multi;    /* copy of call.multi, or NULL */
  ag_device dev;
  char name[64], kop[48], phase[16], node[48];
  int node_index;
  int n_slots, n_regions;
  slot *slots;
  region *regions;
} rec;

struct ag_optrace {
  rec *r;
  int64_t n, cap;
  bool recording;
  ag_status err;
  char phase[16];
};

static _Thread_local ag_optrace *tl_trace;
static _Thread_local bool tl_replaying;
static _Thread_local struct {
  int64_t *counts; /* NULL: no tally */
  int n;
  ag_device dev;
} tl_tally;
static void kop_name(const ag_kernel_call *c, char *buf, size_t n) {
  /* the kernel-op table's name (kargs.h), "?" for a code past it */
  const char *k = ag_kop_name(c->op);
  const char *sub = NULL;
  if (c->op == AG_K_UNARY) {
    const ag_unary_info *u = ag_unary_info_of(c->sub);
    sub = u ? u->name : NULL;
  } else if (c->op == AG_K_BINARY) {
    const ag_binary_info *b = ag_binary_info_of(c->sub);
    sub = b ? b->name : NULL;
  }
  if (sub) snprintf(buf, n, "%s:%s", k, sub);
  else if (c->sub) snprintf(buf, n, "%s:%d", k, c->sub);
  else snprintf(buf, n, "%s", k);
}

/* Byte span [lo, hi) of a strided view, relative to its offset; false when
 * it holds no element. */
static bool view_span(const ag_koperand *o, int64_t *lo, int64_t *hi) {
  int64_t a = 0, b = 0;
  for (int d = 0; d < o->ndim; d++) {
    if (o->shape[d] == 0) return false;
    int64_t e = (o->shape[d] - 1) * o->strides[d];
    if (e < 0) a += e;
    else b += e;
  }
  int64_t es = (int64_t)ag_dtype_size(o->dtype);
  *lo = a * es;
  *hi = (b + 1) * es;
  return true;
}

static void rec_free(rec *r) {
  for (int i = 0; i < r->n_regions; i++) {
    free(r->regions[i].before);
    free(r->regions[i].after);
  }
  free(r->regions);
  free(r->slots);
  free(r->multi);
  memset(r, 0, sizeof *r);
}

/* The slots and merged regions of a call (no bytes yet). */
static ag_status rec_layout(rec *r, const ag_kernel_call *c) {
  int nm = c->multi ? c->multi->count : 0, ns = c->n_operands + nm;
  r->slots = calloc((size_t)(ns ? ns : 1), sizeof *r->slots);
  r->regions = calloc((size_t)(ns ? ns : 1), sizeof *r->regions);
  int64_t *lo = calloc((size_t)(ns ? ns : 1) * 2, sizeof *lo);
  if (!r->slots || !r->regions || !lo) {
    free(lo);
    return ag_error_set(AG_ERR_OOM, "ag_optrace: out of host memory");
  }
  int64_t *hi = lo + (ns ? ns : 1);
  int n = 0;
  for (int j = 0; j < ns; j++) {
    slot *s = &r->slots[n];
    void *base;
    size_t off;
    if (j < c->n_operands) {
      const ag_koperand *o = &c->o[j];
      if (!o->base || !view_span(o, &lo[n], &hi[n])) continue;
      base = o->base;
      off = o->offset;
      s->dtype = o->dtype;
      s->ndim = o->ndim;
      s->numel = 1;
      for (int d = 0; d < o->ndim; d++) {
        s->shape[d] = o->shape[d];
        s->strides[d] = o->strides[d];
        s->numel *= o->shape[d];
      }
    } else {
      const int m = j - c->n_operands;
      if (!c->multi->t[m].base || c->multi->t[m].numel <= 0) continue;
      base = c->multi->t[m].base;
      off = c->multi->t[m].offset;
      s->dtype = c->multi->t[m].dtype;
      s->ndim = 1;
      s->shape[0] = s->numel = c->multi->t[m].numel;
      s->strides[0] = 1;
      s->multi = true;
      lo[n] = 0;
      hi[n] = s->numel * (int64_t)ag_dtype_size(s->dtype);
    }
    s->region = j; /* the slot's source index until regions are made */
    /* Absolute byte range in the segment. */
    lo[n] += (int64_t)off;
    hi[n] += (int64_t)off;
    /* Merge with an overlapping region of the same segment. */
    int g = -1;
    for (int q = 0; q < r->n_regions && g < 0; q++) {
      region *rg = &r->regions[q];
      if (rg->base == base && lo[n] < (int64_t)(rg->off + rg->bytes) && hi[n] > (int64_t)rg->off) g = q;
    }
    if (g < 0) {
      g = r->n_regions++;
      r->regions[g].base = base;
      r->regions[g].off = (size_t)lo[n];
      r->regions[g].bytes = (size_t)(hi[n] - lo[n]);
    } else {
      region *rg = &r->regions[g];
      int64_t a = lo[n] < (int64_t)rg->off ? lo[n] : (int64_t)rg->off;
      int64_t b = hi[n] > (int64_t)(rg->off + rg->bytes) ? hi[n] : (int64_t)(rg->off + rg->bytes);
      rg->off = (size_t)a;
      rg->bytes = (size_t)(b - a);
    }
    n++;
  }
  r->n_slots = n;
  /* A merge can make regions overlap each other: merge until none do. */
  for (bool again = true; again;) {
    again = false;
    for (int a = 0; a < r->n_regions && !again; a++)
      for (int b = a + 1; b < r->n_regions && !again; b++) {
        region *x = &r->regions[a], *y = &r->regions[b];
        if (x->base == y->base && x->off < y->off + y->bytes && y->off < x->off + x->bytes) {
          size_t s0 = x->off < y->off ? x->off : y->off;
          size_t e0 = x->off + x->bytes > y->off + y->bytes ? x->off + x->bytes : y->off + y->bytes;
          x->off = s0;
          x->bytes = e0 - s0;
          *y = r->regions[--r->n_regions];
          again = true;
        }
      }
  }
  /* Each slot's region and offset in it (the view's start: its offset). */
  for (int k = 0; k < n; k++) {
    slot *s = &r->slots[k];
    int j = s->region;
    void *base = j < c->n_operands ? c->o[j].base : c->multi->t[j - c->n_operands].base;
    size_t off = j < c->n_operands ? c->o[j].offset : c->multi->t[j - c->n_operands].offset;
    s->region = -1;
    for (int q = 0; q < r->n_regions; q++)
      if (r->regions[q].base == base && lo[k] >= (int64_t)r->regions[q].off &&
          hi[k] <= (int64_t)(r->regions[q].off + r->regions[q].bytes))
        s->region = q;
    s->rel = off - r->regions[s->region].off;
  }
  free(lo);
  for (int q = 0; q < r->n_regions; q++) {
    r->regions[q].before = malloc(r->regions[q].bytes);
    r->regions[q].after = malloc(r->regions[q].bytes);
    if (!r->regions[q].before || !r->regions[q].after)
      return ag_error_set(AG_ERR_OOM, "ag_optrace: out of host memory (%zu bytes)", r->regions[q].bytes);
  }
  return AG_OK;
}

/* Read every region of r from ds into before or after. */
static ag_status snapshot(ag_devstate *ds, ag_stream *s, rec *r, bool after) {
  ag_status st = ag__sync_stream(s, "ag_optrace");
  for (int q = 0; q < r->n_regions && st == AG_OK; q++) {
    region *rg = &r->regions[q];
    st = ds->be->copy_d2h(s->bs, after ? rg->after : rg->before, rg->base, rg->off, rg->bytes);
  }
  if (st == AG_OK) st = ag__sync_stream(s, "ag_optrace");
  return st;
}

/* ---------------- fault injection (AG_FAULT, a test switch) ---------------- */

enum { FAULT_ULP = 1, FAULT_ROW = 2 };
static pthread_once_t g_fault_once = PTHREAD_ONCE_INIT;
static ag_status g_fault_status;
static struct {
  int kind; /* 0: off */
  char op[64], dev[24];
} g_fault;

AG_HIDDEN const char *ag__env_fault(void); /* runtime/env.c */

static void fault_parse(void) {
  const char *v = ag__env_fault();
  if (!v || !*v) return;
  char buf[160];
  snprintf(buf, sizeof buf, "%s", v);
  char *a = strchr(buf, ':');
  char *k = a ? strrchr(a + 1, ':') : NULL;
  if (a && k) {
    *a = 0;
    *k = 0;
  }
  int kind = k ? (!strcmp(k + 1, "ulp") ? FAULT_ULP : !strcmp(k + 1, "row") ? FAULT_ROW : 0) : 0;
  if (!kind || !*buf || !a[1] || strlen(buf) >= sizeof g_fault.op || strlen(a + 1) >= sizeof g_fault.dev) {
    g_fault_status = AG_ERR_INVALID;
    return;
  }
  /* lengths checked above (a Debug build's snprintf warns of truncation) */
  memcpy(g_fault.op, buf, strlen(buf) + 1);
  memcpy(g_fault.dev, a + 1, strlen(a + 1) + 1);
  g_fault.kind = kind;
  ag__launch_hook_use(1);
}

/* Parse AG_FAULT once (runtime/env.c reads it) and count it as a user of
 * the hook when it is set. AG_ERR_INVALID naming the value when it is not
 * op:device:kind. */
static ag_status fault_init(void) {
  pthread_once(&g_fault_once, fault_parse);
  if (g_fault_status != AG_OK) {
    char b[96];
    return ag_error_set(AG_ERR_INVALID, "AG_FAULT='%s' is not OP:DEVICE:ulp or OP:DEVICE:row",
                        ag_escape(ag__env_fault(), b, sizeof b));
  }
  return AG_OK;
}

/* Element i (row-major over the view) of s at region bytes p. */
static unsigned char *elem_at(const slot *s, unsigned char *p, int64_t i) {
  int64_t off = 0;
  for (int d = s->ndim - 1; d >= 0; d--) {
    off += (i % s->shape[d]) * s->strides[d];
    i /= s->shape[d];
  }
  return p + s->rel + off * (int64_t)ag_dtype_size(s->dtype);
}

/* One ULP up on every f32/f64 element of operand 0, or its first row (the
 * first element of a 1-D output) replaced by the next one. */
static ag_status fault_apply(ag_devstate *ds, ag_stream *s, const ag_kernel_call *c) {
  if (!c->n_operands || !c->o[0].base) return AG_OK;
  ag_kernel_call one = *c;
  one.n_operands = 1;
  one.multi = NULL;
  rec r;
  memset(&r, 0, sizeof r);
  ag_status st = rec_layout(&r, &one);
  if (st == AG_OK && r.n_slots == 1) st = snapshot(ds, s, &r, false);
  if (st != AG_OK || r.n_slots != 1) {
    rec_free(&r);
    return st;
  }
  slot *sl = &r.slots[0];
  unsigned char *p = r.regions[0].before;
  size_t es = ag_dtype_size(sl->dtype);
  if (g_fault.kind == FAULT_ULP) {
    for (int64_t i = 0; i < sl->numel; i++) {
      unsigned char *e = elem_at(sl, p, i);
      if (sl->dtype == AG_F32) {
        float f;
        memcpy(&f, e, 4);
        f = nextafterf(f, INFINITY);
        memcpy(e, &f, 4);
      } else if (sl->dtype == AG_F64) {
        double f;
        memcpy(&f, e, 8);
        f = nextafter(f, INFINITY);
        memcpy(e, &f, 8);
      }
    }
  } else if (sl->numel >= 2) {
    int64_t cols = sl->ndim >= 2 && sl->numel / sl->shape[sl->ndim - 1] >= 2 ? sl->shape[sl->ndim - 1] : 1;
    for (int64_t i = 0; i < cols; i++) memmove(elem_at(sl, p, i), elem_at(sl, p, i + cols), es);
  }
  st = ds->be->copy_h2d(s->bs, r.regions[0].base, r.regions[0].off, p, r.regions[0].bytes, false);
  if (st == AG_OK) st = ag__sync_stream(s, "AG_FAULT");
  rec_free(&r);
  return st;
}

/* ---------------- the hook ---------------- */

static rec *trace_push(ag_optrace *t) {
  if (t->n == t->cap) {
    int64_t cap = t->cap ? 2 * t->cap : 256;
    rec *nr = realloc(t->r, (size_t)cap * sizeof *nr);
    if (!nr) return NULL;
    t->r = nr;
    t->cap = cap;
  }
  rec *r = &t->r[t->n];
  memset(r, 0, sizeof *r);
  return r;
}

static ag_status launch_hooked(ag_devstate *ds, ag_stream *s, ag_kernel_call *c) {
  if (tl_tally.counts && !tl_replaying && (int)c->op < tl_tally.n && ag_device_eq(ds->dev, tl_tally.dev))
    tl_tally.counts[c->op]++;
  ag_optrace *t = tl_replaying ? NULL : tl_trace;
  rec *r = t && t->err == AG_OK ? trace_push(t) : NULL;
  if (t && t->err == AG_OK && !r) t->err = AG_ERR_OOM;
  if (r) {
    ag_status ts = rec_layout(r, c);
    if (ts == AG_OK && c->multi) {
      r->multi = malloc(sizeof *r->multi);
      if (r->multi) memcpy(r->multi, c->multi, sizeof *r->multi);
      else ts = ag_error_set(AG_ERR_OOM, "ag_optrace: out of host memory");
    }
    if (ts == AG_OK) ts = snapshot(ds, s, r, false);
    if (ts != AG_OK) {
      rec_free(r);
      t->err = ts;
      r = NULL;
    }
  }
  ag_status st = ag__launch_backend(ds, s, c);
  if (st == AG_OK && g_fault.kind && !strcmp(ds->label, g_fault.dev) && c->name && !strcmp(c->name, g_fault.op))
    st = fault_apply(ds, s, c);
  if (r && st == AG_OK) {
    ag_status ts = snapshot(ds, s, r, true);
    if (ts != AG_OK) {
      rec_free(r);
      t->err = ts;
      return st;
    }
    r->call = *c;
    r->call.multi = r->multi;
    r->dev = ds->dev;
    snprintf(r->name, sizeof r->name, "%s", c->name ? c->name : "launch");
    kop_name(c, r->kop, sizeof r->kop);
    snprintf(r->phase, sizeof r->phase, "%s", t->phase);
    const char *node = ag__launch_node(&r->node_index);
    snprintf(r->node, sizeof r->node, "%s", node ? node : "");
    t->n++;
  } else if (r) {
    rec_free(r);
  }
  return st;
}

/* ---------------- the public API ---------------- */

ag_status ag_optrace_tally_begin(ag_device d, int64_t *counts, int n) {
  if (!counts || n < 0) return ag_error_set(AG_ERR_INVALID, "ag_optrace_tally_begin: %s", counts ? "n < 0" : "counts is NULL");
  if (tl_tally.counts) return ag_error_set(AG_ERR_STATE, "ag_optrace_tally_begin: this thread already tallies");
  tl_tally.counts = counts;
  tl_tally.n = n;
  tl_tally.dev = d;
  ag__launch_hook_use(1);
  return AG_OK;
}

ag_status ag_optrace_tally_end(void) {
  if (!tl_tally.counts) return ag_error_set(AG_ERR_STATE, "ag_optrace_tally_end: this thread has no tally");
  tl_tally.counts = NULL;
  ag__launch_hook_use(-1);
  return AG_OK;
}

ag_optrace *ag_optrace_begin(void) {
  if (tl_trace) {
    ag_error_set(AG_ERR_STATE, "ag_optrace_begin: this thread already records a trace");
    return NULL;
  }
  ag_optrace *t = calloc(1, sizeof *t);
  if (!t) {
    ag_error_set(AG_ERR_OOM, "ag_optrace_begin: out of host memory");
    return NULL;
  }
  t->recording = true;
  tl_trace = t;
  ag__launch_hook_use(1);
  return t;
}

ag_status ag_optrace_end(ag_optrace *t) {
  if (!t) return ag_error_set(AG_ERR_INVALID, "ag_optrace_end: trace is NULL");
  if (!t->recording || tl_trace != t)
    return ag_error_set(AG_ERR_STATE, "ag_optrace_end: the trace is not recording on this thread");
  t->recording = false;
  tl_trace = NULL;
  ag__launch_hook_use(-1);
  if (t->err != AG_OK) return ag_error_set(t->err, "ag_optrace_end: recording stopped after %lld launches: %s",
                                           (long long)t->n, ag_status_name(t->err));
  return AG_OK;
}

void ag_optrace_phase(ag_optrace *t, const char *phase) {
  if (t) snprintf(t->phase, sizeof t->phase, "%s", phase ? phase : "");
}

void ag_optrace_free(ag_optrace *t) {
  if (!t) return;
  if (t->recording && tl_trace == t) {
    tl_trace = NULL;
    ag__launch_hook_use(-1);
  }
  for (int64_t k = 0; k < t->n; k++) rec_free(&t->r[k]);
  free(t->r);
  free(t);
}

int64_t ag_optrace_count(const ag_optrace *t) { return t ? t->n : 0; }

static const rec *get_rec(const ag_optrace *t, int64_t k, const char *fn) {
  if (!t || k < 0 || k >= t->n) {
    ag_error_set(AG_ERR_INVALID, "%s: %s", fn, !t ? "trace is NULL" : "record index out of range");
    return NULL;
  }
  return &t->r[k];
}

ag_status ag_optrace_get(const ag_optrace *t, int64_t k, ag_optrace_op *out) {
  const rec *r = get_rec(t, k, "ag_optrace_get");
  if (!r) return ag_last_status();
  if (!out) return ag_error_set(AG_ERR_INVALID, "ag_optrace_get: out is NULL");
  out->name = r->name;
  out->kop = r->kop;
  out->phase = r->phase;
  out->node = r->node;
  out->node_index = r->node_index;
  out->device = r->dev;
  out->n_operands = r->n_slots;
  return AG_OK;
}

static const slot *get_slot(const ag_optrace *t, int64_t k, int j, const char *fn, const rec **rr) {
  const rec *r = get_rec(t, k, fn);
  if (!r) return NULL;
  if (j < 0 || j >= r->n_slots) {
    ag_error_set(AG_ERR_INVALID, "%s: operand %d out of range (%d operands)", fn, j, r->n_slots);
    return NULL;
  }
  *rr = r;
  return &r->slots[j];
}

ag_status ag_optrace_get_operand(const ag_optrace *t, int64_t k, int j, ag_optrace_operand *out) {
  const rec *r;
  const slot *s = get_slot(t, k, j, "ag_optrace_get_operand", &r);
  if (!s) return ag_last_status();
  if (!out) return ag_error_set(AG_ERR_INVALID, "ag_optrace_get_operand: out is NULL");
  out->dtype = s->dtype;
  out->ndim = s->ndim;
  for (int d = 0; d < s->ndim; d++) out->shape[d] = s->shape[d];
  out->numel = s->numel;
  out->written = false;
  const region *rg = &r->regions[s->region];
  size_t es = ag_dtype_size(s->dtype);
  for (int64_t i = 0; i < s->numel && !out->written; i++) {
    const unsigned char *a = elem_at(s, rg->before, i), *b = elem_at(s, rg->after, i);
    out->written = memcmp(a, b, es) != 0;
  }
  return AG_OK;
}

static double to_double(ag_dtype dt, const unsigned char *p) {
  switch (dt) {
    case AG_F32: { float f; memcpy(&f, p, 4); return f; }
    case AG_F64: { double f; memcpy(&f, p, 8); return f; }
    case AG_F16: case AG_BF16: {
      uint16_t h;
      float f;
      memcpy(&h, p, 2);
      if (dt == AG_F16) ag__f16_to_f32_n(&h, &f, 1);
      else ag__bf16_to_f32_n(&h, &f, 1);
      return f;
    }
    case AG_I32: { int32_t v; memcpy(&v, p, 4); return v; }
    case AG_I64: { int64_t v; memcpy(&v, p, 8); return (double)v; }
    default: return p[0];
  }
}

ag_status ag_optrace_values(const ag_optrace *t, int64_t k, int j, bool after, double *out, int64_t n) {
  const rec *r;
  const slot *s = get_slot(t, k, j, "ag_optrace_values", &r);
  if (!s) return ag_last_status();
  if (!out || n != s->numel)
    return ag_error_set(AG_ERR_INVALID, "ag_optrace_values: %s (operand has %lld elements, n = %lld)",
                        out ? "wrong n" : "out is NULL", (long long)s->numel, (long long)n);
  unsigned char *p = after ? r->regions[s->region].after : r->regions[s->region].before;
  for (int64_t i = 0; i < n; i++) out[i] = to_double(s->dtype, elem_at(s, p, i));
  return AG_OK;
}

ag_optrace *ag_optrace_replay(const ag_optrace *t, int64_t k, ag_device dev) {
  const rec *src = get_rec(t, k, "ag_optrace_replay");
  if (!src) return NULL;
  ag_devstate *ds = ag__devstate(dev);
  if (!ds) return NULL;
  ag_optrace *out = calloc(1, sizeof *out);
  rec *r = out ? trace_push(out) : NULL;
  ag_tensor **mem = calloc((size_t)(src->n_regions ? src->n_regions : 1), sizeof *mem);
  if (!r || !mem) {
    free(mem);
    ag_optrace_free(out);
    ag_error_set(AG_ERR_OOM, "ag_optrace_replay: out of host memory");
    return NULL;
  }
  ag_status st = AG_OK;
  *r = *src;
  r->dev = dev;
  r->slots = malloc((size_t)(src->n_slots ? src->n_slots : 1) * sizeof *r->slots);
  r->regions = calloc((size_t)(src->n_regions ? src->n_regions : 1), sizeof *r->regions);
  r->multi = NULL;
  r->n_regions = 0;
  if (src->multi) r->multi = malloc(sizeof *r->multi);
  if (!r->slots || !r->regions || (src->multi && !r->multi)) st = ag_error_set(AG_ERR_OOM, "ag_optrace_replay: out of host memory");
  if (st == AG_OK) {
    memcpy(r->slots, src->slots, (size_t)src->n_slots * sizeof *r->slots);
    if (src->multi) memcpy(r->multi, src->multi, sizeof *r->multi);
    r->call.multi = r->multi;
  }
  out->n = 1; /* rec_free cleans what was made so far */
  ag_kernel_call c = src->call;
  c.multi = r->multi;
  bool done_o[AG_KMAX_OPERANDS] = {false}, *done_m = calloc(AG_KMAX_MULTI, sizeof *done_m);
  if (!done_m && st == AG_OK) st = ag_error_set(AG_ERR_OOM, "ag_optrace_replay: out of host memory");
  for (int q = 0; q < src->n_regions && st == AG_OK; q++) {
    const region *rg = &src->regions[q];
    int64_t shape[1] = {(int64_t)rg->bytes};
    mem[q] = ag_from_host(dev, AG_U8, 1, shape, rg->before);
    r->regions[q].bytes = rg->bytes;
    r->regions[q].before = malloc(rg->bytes);
    r->regions[q].after = malloc(rg->bytes);
    r->n_regions = q + 1;
    if (!mem[q]) st = ag_last_status();
    else if (!r->regions[q].before || !r->regions[q].after) st = ag_error_set(AG_ERR_OOM, "ag_optrace_replay: out of host memory");
    else {
      memcpy(r->regions[q].before, rg->before, rg->bytes);
      ag_koperand ko;
      ag__operand(&ko, mem[q]);
      r->regions[q].base = ko.base;
      r->regions[q].off = ko.offset;
      /* Point every operand and list entry of this region at the copy. */
      for (int j = 0; j < c.n_operands; j++)
        if (!done_o[j] && src->call.o[j].base == rg->base && src->call.o[j].offset >= rg->off &&
            src->call.o[j].offset < rg->off + rg->bytes) {
          c.o[j].base = ko.base;
          c.o[j].offset = ko.offset + (src->call.o[j].offset - rg->off);
          done_o[j] = true;
        }
      for (int j = 0; c.multi && j < c.multi->count; j++) {
        const ag_kmulti *sm = src->multi;
        if (!done_m[j] && sm->t[j].base == rg->base && sm->t[j].offset >= rg->off &&
            sm->t[j].offset < rg->off + rg->bytes) {
          done_m[j] = true;
          r->multi->t[j].base = ko.base;
          r->multi->t[j].offset = ko.offset + (sm->t[j].offset - rg->off);
        }
      }
    }
  }
  if (st == AG_OK) {
    tl_replaying = true;
    st = ag__launch(ds, &c);
    tl_replaying = false;
  }
  for (int q = 0; q < src->n_regions && st == AG_OK; q++) st = ag_to_host(mem[q], r->regions[q].after, src->regions[q].bytes);
  for (int q = 0; q < src->n_regions; q++) ag_tensor_release(mem[q]);
  free(mem);
  free(done_m);
  r->call = c;
  r->call.multi = r->multi;
  if (st != AG_OK) {
    ag_optrace_free(out);
    return NULL;
  }
  return out;
}

/* The ops launch through launch_hooked while a trace records or AG_FAULT
 * is set; a bad AG_FAULT stops the first device open (runtime/env.c). */
__attribute__((constructor)) static void optrace_install(void) {
  ag__launch_hook_set(launch_hooked);
  ag__env_check_add(fault_init);
}
