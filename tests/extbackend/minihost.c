/* minihost: the smallest backend module, built outside anygrad's tree
 * against the installed headers and library, to show that adding a backend
 * edits nothing in anygrad. Device memory is host memory; kernels run on the
 * calling thread at launch, so streams and events are trivial. It runs FILL,
 * UNARY COPY (any dtype to any dtype), NEG, EXP and SQRT, BINARY ADD, MUL
 * and the backward of EXP and SQRT, and REDUCE SUM; supports() says no to
 * everything else, and launch refuses it too (AG_ERR_UNSUPPORTED), so
 * `anygrad check --backend minihost` reports those cases "unsup". The steps
 * are docs/design/backends.md's. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <anygrad/backend.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* tests/backend_abi.cmake builds this file again under other names and ABI
 * versions; a module of your own writes its name and AG_BACKEND_HEADER. */
#ifndef NAME
#define NAME "minihost"
#endif
#ifndef HEADER
#define HEADER AG_BACKEND_HEADER
#endif
#ifndef KCALL_NEED
#define KCALL_NEED sizeof(ag_kernel_call)
#endif
#define MEMORY ((size_t)1 << 30) /* what the device reports; allocations are malloc's */

struct ag_bstream {
  int dev;
};
struct ag_bevent {
  double ms;
  bool recorded;
};

static ag_status mh_init(int *out_device_count, char *reason, size_t reason_len) {
  (void)reason;
  (void)reason_len;
  *out_device_count = 1;
  return AG_OK;
}

static ag_status mh_device_props(int dev, ag_device_props *out) {
  (void)dev;
  strcpy(out->name, "minihost (out-of-tree example)");
  strcpy(out->vendor, "anygrad tests/extbackend");
  strcpy(out->arch, "host");
  out->total_memory = MEMORY;
  out->compute_units = 1;
  out->unified_memory = true;
  return AG_OK;
}

static ag_status mh_mem_info(int dev, size_t *out_free, size_t *out_total) {
  (void)dev;
  *out_free = *out_total = MEMORY;
  return AG_OK;
}

static ag_status mh_alloc(int dev, size_t bytes, void **out) {
  (void)dev;
  *out = aligned_alloc(64, (bytes + 63) / 64 * 64 + 64);
  return *out ? AG_OK : ag_error_set(AG_ERR_OOM, NAME ": out of memory for %zu bytes", bytes);
}

static void mh_free(int dev, void *p) {
  (void)dev;
  free(p);
}

static ag_status mh_stream_create(int dev, ag_bstream **out) {
  *out = calloc(1, sizeof **out);
  if (!*out) return ag_error_set(AG_ERR_OOM, NAME ": out of host memory");
  (*out)->dev = dev;
  return AG_OK;
}
static void mh_stream_destroy(ag_bstream *s) { free(s); }
static ag_status mh_stream_sync(ag_bstream *s) {
  (void)s;
  return AG_OK;
}
static ag_status mh_stream_query(ag_bstream *s, bool *done) {
  (void)s;
  *done = true;
  return AG_OK;
}

static ag_status mh_event_create(int dev, bool timing, ag_bevent **out) {
  (void)dev;
  (void)timing;
  *out = calloc(1, sizeof **out);
  return *out ? AG_OK : ag_error_set(AG_ERR_OOM, NAME ": out of host memory");
}
static void mh_event_destroy(ag_bevent *e) { free(e); }
static ag_status mh_event_record(ag_bevent *e, ag_bstream *s) {
  (void)s;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  e->ms = ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
  e->recorded = true;
  return AG_OK;
}
static ag_status mh_stream_wait_event(ag_bstream *s, ag_bevent *e) {
  (void)s;
  (void)e;
  return AG_OK;
}
static ag_status mh_event_query(ag_bevent *e, bool *done) {
  (void)e;
  *done = true;
  return AG_OK;
}
static ag_status mh_event_sync(ag_bevent *e) {
  (void)e;
  return AG_OK;
}
static ag_status mh_event_elapsed(ag_bevent *a, ag_bevent *b, float *out_ms) {
  *out_ms = (float)(b->ms - a->ms);
  return AG_OK;
}

static ag_status mh_h2d(ag_bstream *s, void *dst, size_t off, const void *src, size_t n, bool pinned) {
  (void)s;
  (void)pinned;
  memcpy((char *)dst + off, src, n);
  return AG_OK;
}
static ag_status mh_d2h(ag_bstream *s, void *dst, const void *src, size_t off, size_t n) {
  (void)s;
  memcpy(dst, (const char *)src + off, n);
  return AG_OK;
}
static ag_status mh_d2d(ag_bstream *s, void *dst, size_t doff, const void *src, size_t soff, size_t n) {
  (void)s;
  memmove((char *)dst + doff, (const char *)src + soff, n);
  return AG_OK;
}

/* ---- kernels: one strided loop over doubles ---- */

static double get(ag_dtype dt, const char *p) {
  switch (dt) {
    case AG_F32: return *(const float *)p;
    case AG_F64: return *(const double *)p;
    case AG_F16: return ag_f16_to_f32(*(const uint16_t *)p);
    case AG_BF16: return ag_bf16_to_f32(*(const uint16_t *)p);
    case AG_I32: return *(const int32_t *)p;
    case AG_I64: return (double)*(const int64_t *)p;
    case AG_U8: return *(const uint8_t *)p;
    case AG_BOOL: return *(const uint8_t *)p != 0;
    default: return NAN;
  }
}

/* Integers stored from floats truncate and saturate (NaN: 0), as tensor.h
 * says casts do. */
static double sat(double v, double lo, double hi) { return isnan(v) ? 0 : v <= lo ? lo : v >= hi ? hi : trunc(v); }

static void put(ag_dtype dt, char *p, double v) {
  switch (dt) {
    case AG_F32: *(float *)p = (float)v; break;
    case AG_F64: *(double *)p = v; break;
    case AG_F16: *(uint16_t *)p = ag_f32_to_f16((float)v); break;
    case AG_BF16: *(uint16_t *)p = ag_f32_to_bf16((float)v); break;
    case AG_I32: *(int32_t *)p = (int32_t)sat(v, INT32_MIN, INT32_MAX); break;
    case AG_I64: *(int64_t *)p = v >= 9223372036854775807.0 ? INT64_MAX : (int64_t)sat(v, (double)INT64_MIN, 0x1p63); break;
    case AG_U8: *(uint8_t *)p = (uint8_t)sat(v, 0, 255); break;
    case AG_BOOL: *(uint8_t *)p = v != 0; break;
    default: break;
  }
}

/* Between integer dtypes values keep their low bits (two's complement). */
static bool is_int(ag_dtype dt) { return dt == AG_I32 || dt == AG_I64 || dt == AG_U8 || dt == AG_BOOL; }

static int64_t get_int(ag_dtype dt, const char *p) {
  switch (dt) {
    case AG_I32: return *(const int32_t *)p;
    case AG_I64: return *(const int64_t *)p;
    default: return *(const uint8_t *)p;
  }
}

static void put_int(ag_dtype dt, char *p, int64_t v) {
  switch (dt) {
    case AG_I32: *(int32_t *)p = (int32_t)(uint32_t)(uint64_t)v; break;
    case AG_I64: *(int64_t *)p = v; break;
    case AG_U8: *(uint8_t *)p = (uint8_t)(uint64_t)v; break;
    default: *(uint8_t *)p = v != 0; break;
  }
}

static char *at(const ag_koperand *o, const int64_t *idx) {
  int64_t e = 0;
  for (int d = 0; d < o->ndim; d++) e += idx[d] * o->strides[d];
  return (char *)o->base + o->offset + (size_t)e * ag_dtype_size(o->dtype);
}

static bool is_float(ag_dtype dt) { return dt == AG_F32 || dt == AG_F64 || dt == AG_F16 || dt == AG_BF16; }

static bool mh_supports(int dev, ag_kop op, int sub, ag_dtype dt) {
  (void)dev;
  switch (op) {
    case AG_K_FILL: return true;
    case AG_K_UNARY:
      return sub == AG_U_COPY || ((sub == AG_U_NEG || sub == AG_U_EXP || sub == AG_U_SQRT) && is_float(dt));
    case AG_K_BINARY:
      return (sub == AG_B_ADD || sub == AG_B_MUL || sub == AG_B_EXP_BWD || sub == AG_B_SQRT_BWD) && is_float(dt);
    case AG_K_REDUCE: return sub == AG_R_SUM && (dt == AG_F32 || dt == AG_F64);
    default: return false;
  }
}

/* o0 = f(o1, o2) elementwise over o0's shape (strides may be 0). */
static void elementwise(const ag_kernel_call *c) {
  const ag_koperand *o = &c->o[0];
  int64_t n = 1, idx[AG_MAX_DIMS] = {0};
  for (int d = 0; d < o->ndim; d++) n *= o->shape[d];
  for (int64_t i = 0; i < n; i++) {
    double v = 0;
    if (c->op == AG_K_UNARY && c->sub == AG_U_COPY && is_int(o->dtype) && is_int(c->o[1].dtype)) {
      put_int(o->dtype, at(o, idx), get_int(c->o[1].dtype, at(&c->o[1], idx)));
      goto next;
    }
    if (c->op == AG_K_FILL) v = c->s[0];
    else if (c->op == AG_K_UNARY) {
      v = get(c->o[1].dtype, at(&c->o[1], idx));
      v = c->sub == AG_U_NEG ? -v : c->sub == AG_U_EXP ? exp(v) : c->sub == AG_U_SQRT ? sqrt(v) : v;
    } else {
      /* the backward ops: a is the upstream gradient, b the saved output */
      double a = get(c->o[1].dtype, at(&c->o[1], idx)), b = get(c->o[2].dtype, at(&c->o[2], idx));
      v = c->sub == AG_B_ADD ? a + c->s[0] * b : c->sub == AG_B_SQRT_BWD ? a * 0.5 / b : a * b;
    }
    put(o->dtype, at(o, idx), v);
  next:
    for (int d = o->ndim - 1; d >= 0; d--) {
      if (++idx[d] < o->shape[d]) break;
      idx[d] = 0;
    }
  }
}

static ag_status mh_launch(ag_bstream *s, const ag_kernel_call *c) {
  (void)s;
#if AG_BACKEND_ABI_MAJOR >= 5
  /* read nothing past the core's call: KCALL_NEED stands for the call of a
   * newer minor in tests/gpu3_abi.cmake */
  ag_status cst = ag_kernel_call_check(c, KCALL_NEED, NAME);
  if (cst != AG_OK) return cst;
#endif
  ag_dtype dt = c->op == AG_K_UNARY || c->op == AG_K_REDUCE ? c->o[1].dtype : c->o[0].dtype;
  if (!mh_supports(0, c->op, c->sub, dt))
    return ag_error_set(AG_ERR_UNSUPPORTED, NAME ": kernel op %d (%d) for %s is not implemented", (int)c->op, c->sub,
                        ag_dtype_name(dt));
  if (c->op != AG_K_REDUCE) {
    elementwise(c);
    return AG_OK;
  }
  /* o1 contiguous [outer, r, inner] -> o0 contiguous [outer, inner], times s[0] */
  int64_t outer = c->i[0], r = c->i[1], inner = c->i[2];
  size_t in_es = ag_dtype_size(c->o[1].dtype), out_es = ag_dtype_size(c->o[0].dtype);
  const char *in = (const char *)c->o[1].base + c->o[1].offset;
  char *out = (char *)c->o[0].base + c->o[0].offset;
  for (int64_t a = 0; a < outer; a++)
    for (int64_t b = 0; b < inner; b++) {
      double acc = 0;
      for (int64_t k = 0; k < r; k++) acc += get(c->o[1].dtype, in + (size_t)((a * r + k) * inner + b) * in_es);
      put(c->o[0].dtype, out + (size_t)(a * inner + b) * out_es, acc * c->s[0]);
    }
  return AG_OK;
}

static ag_status mh_take_error(ag_bstream *s, ag_kernel_error *out) {
  (void)s;
  memset(out, 0, sizeof *out);
  return AG_OK;
}

static const ag_backend k_minihost = {
    HEADER,
    .name = NAME,
    .init = mh_init,
    .device_props = mh_device_props,
    .mem_info = mh_mem_info,
    .segment_alloc = mh_alloc,
    .segment_free = mh_free,
    .pinned_alloc = mh_alloc,
    .pinned_free = mh_free,
    .stream_create = mh_stream_create,
    .stream_destroy = mh_stream_destroy,
    .stream_synchronize = mh_stream_sync,
    .stream_query = mh_stream_query,
    .event_create = mh_event_create,
    .event_destroy = mh_event_destroy,
    .event_record = mh_event_record,
    .stream_wait_event = mh_stream_wait_event,
    .event_query = mh_event_query,
    .event_synchronize = mh_event_sync,
    .event_elapsed_ms = mh_event_elapsed,
    .copy_h2d = mh_h2d,
    .copy_d2h = mh_d2h,
    .copy_d2d = mh_d2d,
    .launch = mh_launch,
    .supports = mh_supports,
    .take_kernel_error = mh_take_error,
    .flags = AG_BACKEND_F_HOST_MEMORY | AG_BACKEND_F_ADDRESSABLE,
    .dlpack_device = 0,  /* no DLPack form: kDLCPU imports stay on the cpu backend */
    .priority = -1,      /* an example: never chosen by ag_device_best() */
    .description = "an out-of-tree example backend (tests/extbackend): host memory, a handful of ops",
};

__attribute__((visibility("default"))) const ag_backend *ag_backend_module_get(void) { return &k_minihost; }
