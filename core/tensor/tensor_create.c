/* Tensor creation: empty/full/zeros/arange, in-place fills, random
 * generators, and host transfers (from_host, to_host, item). Backend-neutral:
 * every fill and copy goes through ag__launch or the backend copy hooks. */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "tensor/tensor_internal.h"

/* ---------------- creation ---------------- */

static bool check_shape(const char *op, ag_dtype dt, int ndim, const int64_t *shape) {
  if ((unsigned)dt >= AG_DTYPE_COUNT) {
    ag_error_set(AG_ERR_DTYPE, "%s: invalid dtype %d", op, (int)dt);
    return false;
  }
  if (ndim < 0 || ndim > AG_MAX_DIMS || (ndim > 0 && !shape)) {
    ag_error_set(AG_ERR_SHAPE, "%s: ndim %d out of range [0, %d]", op, ndim, AG_MAX_DIMS);
    return false;
  }
  return ag__shape_check(op, ndim, shape, dt, NULL);
}

ag_tensor *ag_empty(ag_device d, ag_dtype dt, int ndim, const int64_t *shape) {
  if (!check_shape("ag_empty", dt, ndim, shape)) return NULL;
  ag_devstate *ds = ag__devstate(d);
  if (!ds) return NULL;
  return ag__tensor_new(ds, dt, ndim, shape);
}

static ag_status fill(ag_tensor *t, double v) {
  if (t->numel == 0) return AG_OK;
  ag_devstate *ds = ag__ds(t);
  if (!ag__supported(ds, AG_K_FILL, 0, t->dtype, "ag_fill")) return ag_last_status();
  ag_kernel_call c;
  ag__kcall_init(&c, AG_K_FILL, 0, "ag_fill", 1, (ag_tensor *[]){t});
  c.s[0] = v;
  return ag__launch(ds, &c);
}

ag_tensor *ag_full(ag_device d, ag_dtype dt, int ndim, const int64_t *shape, double value) {
  if (!check_shape("ag_full", dt, ndim, shape)) return NULL;
  ag_devstate *ds = ag__devstate(d);
  if (!ds) return NULL;
  ag_tensor *t = ag__tensor_new(ds, dt, ndim, shape);
  if (t && fill(t, value) != AG_OK) {
    ag_tensor_release(t);
    return NULL;
  }
  return t;
}

ag_tensor *ag_zeros(ag_device d, ag_dtype dt, int ndim, const int64_t *shape) {
  return ag_full(d, dt, ndim, shape, 0.0);
}
ag_tensor *ag_ones(ag_device d, ag_dtype dt, int ndim, const int64_t *shape) {
  return ag_full(d, dt, ndim, shape, 1.0);
}
ag_tensor *ag_scalar(ag_device d, ag_dtype dt, double value) { return ag_full(d, dt, 0, NULL, value); }

ag_tensor *ag_empty_like(const ag_tensor *t) {
  if (ag__bad_tensor(t, "ag_empty_like")) return NULL;
  return ag__tensor_new(t->st->ds, t->dtype, t->ndim, t->shape);
}
ag_tensor *ag_zeros_like(const ag_tensor *t) {
  if (ag__bad_tensor(t, "ag_zeros_like")) return NULL;
  ag_tensor *r = ag__tensor_new(t->st->ds, t->dtype, t->ndim, t->shape);
  if (r && fill(r, 0.0) != AG_OK) {
    ag_tensor_release(r);
    return NULL;
  }
  return r;
}

ag_status ag_fill_(ag_tensor *dst, double value) {
  if (ag__bad_tensor(dst, "ag_fill_")) return ag_last_status();
  ag_status st = ag__inplace_check(dst, "ag_fill_");
  if (st == AG_OK) st = fill(dst, value);
  if (st == AG_OK && dst->numel) ag__version_bump(dst);
  return st;
}

ag_tensor *ag_arange(ag_device d, ag_dtype dt, double start, double end, double step) {
  if (step == 0 || !isfinite(start) || !isfinite(end) || !isfinite(step)) {
    ag_error_set(AG_ERR_INVALID, "ag_arange: invalid range start=%g end=%g step=%g", start, end, step);
    return NULL;
  }
  double nd = ceil((end - start) / step);
  if (nd < 0) nd = 0;
  if (nd > 1e15) {
    ag_error_set(AG_ERR_INVALID, "ag_arange: %g elements is too many", nd);
    return NULL;
  }
  int64_t n = (int64_t)nd;
  ag_tensor *t = ag_empty(d, dt, 1, &n);
  if (!t || n == 0) return t;
  ag_devstate *ds = ag__ds(t);
  ag_kernel_call c;
  ag__kcall_init(&c, AG_K_ARANGE, 0, "ag_arange", 1, (ag_tensor *[]){t});
  c.s[0] = start;
  c.s[1] = step;
  if (!ag__supported(ds, AG_K_ARANGE, 0, dt, "ag_arange") || ag__launch(ds, &c) != AG_OK) {
    ag_tensor_release(t);
    return NULL;
  }
  return t;
}

/* ---------------- generators ---------------- */

struct ag_generator {
  _Atomic uint64_t seed;
  _Atomic uint64_t offset; /* Philox blocks consumed */
};

static ag_generator g_default_gen; /* thread-safe through atomics */

ag_generator *ag_generator_create(uint64_t seed) {
  ag_generator *g = calloc(1, sizeof *g);
  if (!g) {
    ag_error_set(AG_ERR_OOM, "ag_generator_create: out of host memory");
    return NULL;
  }
  atomic_init(&g->seed, seed);
  atomic_init(&g->offset, 0);
  return g;
}
void ag_generator_free(ag_generator *g) {
  if (g && g != &g_default_gen) free(g);
}
void ag_generator_set_state(ag_generator *g, uint64_t seed, uint64_t offset) {
  if (!g) g = &g_default_gen;
  atomic_store(&g->seed, seed);
  atomic_store(&g->offset, offset);
}
void ag_generator_get_state(const ag_generator *g, uint64_t *out_seed, uint64_t *out_offset) {
  if (!g) g = &g_default_gen;
  if (out_seed) *out_seed = atomic_load(&((ag_generator *)g)->seed);
  if (out_offset) *out_offset = atomic_load(&((ag_generator *)g)->offset);
}
ag_generator *ag_default_generator(void) { return &g_default_gen; }
void ag_manual_seed(uint64_t seed) { ag_generator_set_state(&g_default_gen, seed, 0); }

/* Reserve `blocks` Philox blocks; returns (seed, first block). */
AG_HIDDEN void ag__generator_take(ag_generator *g, uint64_t blocks, uint64_t *seed, uint64_t *offset) {
  if (!g) g = &g_default_gen;
  *seed = atomic_load(&g->seed);
  *offset = atomic_fetch_add(&g->offset, blocks);
}

static ag_tensor *random_fill(const char *op, ag_kop kop, ag_device d, ag_dtype dt, int ndim,
                              const int64_t *shape, double a, double b, ag_generator *g) {
  if (!check_shape(op, dt, ndim, shape)) return NULL;
  if (!ag_dtype_is_float(dt)) {
    ag_error_set(AG_ERR_DTYPE, "%s: dtype %s is not a floating type", op, ag_dtype_name(dt));
    return NULL;
  }
  ag_devstate *ds = ag__devstate(d);
  if (!ds || !ag__supported(ds, kop, 0, dt, op)) return NULL;
  ag_tensor *t = ag__tensor_new(ds, dt, ndim, shape);
  if (!t || t->numel == 0) return t;
  uint64_t per = kop == AG_K_RAND_UNIFORM ? 4 : 2;
  ag_kernel_call c;
  ag__kcall_init(&c, kop, 0, op, 1, (ag_tensor *[]){t});
  c.s[0] = a;
  c.s[1] = b;
  ag__generator_take(g, ((uint64_t)t->numel + per - 1) / per, &c.seed, &c.offset);
  if (ag__launch(ds, &c) != AG_OK) {
    ag_tensor_release(t);
    return NULL;
  }
  return t;
}

ag_tensor *ag_rand(ag_device d, ag_dtype dt, int ndim, const int64_t *shape, double low, double high,
                   ag_generator *g) {
  return random_fill("ag_rand", AG_K_RAND_UNIFORM, d, dt, ndim, shape, low, high, g);
}
ag_tensor *ag_randn(ag_device d, ag_dtype dt, int ndim, const int64_t *shape, double mean, double std,
                    ag_generator *g) {
  return random_fill("ag_randn", AG_K_RAND_NORMAL, d, dt, ndim, shape, mean, std, g);
}

/* ---------------- host transfers ---------------- */

ag_tensor *ag_from_host(ag_device d, ag_dtype dt, int ndim, const int64_t *shape, const void *data) {
  if (!check_shape("ag_from_host", dt, ndim, shape)) return NULL;
  ag_devstate *ds = ag__devstate(d);
  if (!ds) return NULL;
  ag_tensor *t = ag__tensor_new(ds, dt, ndim, shape);
  if (!t) return NULL;
  if (t->numel == 0) return t;
  if (!data) {
    ag_error_set(AG_ERR_INVALID, "ag_from_host: NULL data for %lld elements", (long long)t->numel);
    ag_tensor_release(t);
    return NULL;
  }
  ag_stream *s = ag__current_stream(ds);
  if (ds->be->copy_h2d(s->bs, t->st->base, t->st->offset, data, t->st->nbytes, false) != AG_OK) {
    ag_tensor_release(t);
    return NULL;
  }
  return t;
}

ag_status ag_to_host(const ag_tensor *t, void *out, size_t n_bytes) {
  if (ag__bad_tensor(t, "ag_to_host")) return ag_last_status();
  size_t need = (size_t)t->numel * ag_dtype_size(t->dtype);
  if (n_bytes != need)
    return ag_error_set(AG_ERR_INVALID, "ag_to_host: buffer of %zu bytes, tensor needs %zu", n_bytes, need);
  if (need == 0) return AG_OK;
  if (!out) return ag_error_set(AG_ERR_INVALID, "ag_to_host: NULL output buffer");
  ag_tensor *c = ag_contiguous((ag_tensor *)t);
  if (!c) return ag_last_status();
  ag_devstate *ds = ag__ds(c);
  ag_stream *s = ag__current_stream(ds);
  ag_status st = ag__sync_refused(ds, "ag_to_host");
  if (st != AG_OK) {
    ag_tensor_release(c);
    return st;
  }
  st = ds->be->copy_d2h(s->bs, out, c->st->base,
                                  c->st->offset + (size_t)c->offset * ag_dtype_size(c->dtype), need);
  if (st == AG_OK) st = ag__sync_stream(s, "ag_to_host");
  ag_tensor_release(c);
  return st;
}

/* Read one-element t into *out (see ag_item_scalar); `call` names the
 * public function in errors and in sync-debug reports. */
static ag_status item_read(const ag_tensor *t, ag_item_value *out, const char *call) {
  if (ag__bad_tensor(t, call)) return ag_last_status();
  if (t->numel != 1)
    return ag_error_set(AG_ERR_SHAPE, "%s: tensor has %lld elements, expected 1", call, (long long)t->numel);
  union {
    float f;
    double d;
    int32_t i;
    int64_t l;
    uint16_t h;
    uint8_t b;
  } v;
  ag_devstate *ds = ag__ds(t);
  ag_stream *s = ag__current_stream(ds);
  size_t es = ag_dtype_size(t->dtype);
  ag_status st = ag__sync_refused(ds, call); /* before v is a copy's target */
  if (st != AG_OK) return st;
  st = ds->be->copy_d2h(s->bs, &v, t->st->base, t->st->offset + (size_t)t->offset * es, es);
  if (st == AG_OK) st = ag__sync_stream(s, call);
  if (st != AG_OK) return st;
  ag_item_value r = {.dtype = t->dtype, .is_floating = 1};
  switch (t->dtype) {
    case AG_F32: r.f = v.f; break;
    case AG_F64: r.f = v.d; break;
    case AG_F16: r.f = ag_f16_to_f32(v.h); break;
    case AG_BF16: r.f = ag_bf16_to_f32(v.h); break;
    case AG_I32: r.i = v.i; r.is_floating = 0; break;
    case AG_I64: r.i = v.l; r.is_floating = 0; break;
    case AG_U8: r.i = v.b; r.is_floating = 0; break;
    case AG_BOOL: r.i = v.b != 0; r.is_floating = 0; break;
    default: return ag_error_set(AG_ERR_DTYPE, "%s: unknown dtype %d", call, (int)t->dtype);
  }
  if (r.is_floating) {
    /* the integer view of a floating value: truncated, saturated, NaN -> 0 */
    r.i = r.f != r.f ? 0 : r.f >= 9.2233720368547758e18 ? INT64_MAX : r.f <= -9.2233720368547758e18 ? INT64_MIN : (int64_t)r.f;
  } else {
    r.f = (double)r.i;
  }
  *out = r;
  return AG_OK;
}

double ag_item(const ag_tensor *t) {
  ag_item_value r = {0};
  return item_read(t, &r, "ag_item") == AG_OK ? r.f : NAN;
}

ag_status ag_item_scalar(const ag_tensor *t, ag_item_value *out) {
  if (!out) return ag_error_set(AG_ERR_INVALID, "ag_item_scalar: out is NULL");
  return item_read(t, out, "ag_item_scalar");
}
