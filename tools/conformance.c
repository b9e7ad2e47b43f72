/* Conformance engine: for each op x dtype x shape case it builds random
 * inputs on the host, runs the op on the device under test through the public
 * API, and compares with a reference computed here in double precision with
 * plain loops. Outputs are also written through a strided view of a sentinel
 * tensor and bracketed by sentinel neighbours to catch out-of-bounds writes.
 * This file holds the shared machinery and the op table; the cases of each op
 * family are in conformance_<family>.c. */
#include "conformance_internal.h"
#include "anygrad/backend.h" /* the kernel-op table: AG_KOPS, ag_kop_name (kargs.h) */

/* ---- host numbers ---- */

uint16_t ag_conf_f16_bits(double d) {
  uint16_t sign = signbit(d) ? 0x8000 : 0;
  double a = fabs(d);
  if (isnan(d)) return sign | 0x7e00;
  if (isinf(d)) return sign | 0x7c00;
  if (a < 0x1p-14) return sign | (uint16_t)nearbyint(a * 0x1p24); /* subnormal, units 2^-24 */
  int e;
  double q = nearbyint(ldexp(frexp(a, &e), 11)); /* 11 significant bits, ties to even */
  if (q == 2048.0) {
    q = 1024.0;
    e++;
  }
  int ex = e - 1 + 15;
  if (ex >= 31) return sign | 0x7c00;
  return sign | (uint16_t)(ex << 10) | (uint16_t)((int)q - 1024);
}

uint16_t ag_conf_bf16_bits(double d) {
  uint16_t sign = signbit(d) ? 0x8000 : 0;
  double a = fabs(d);
  if (isnan(d)) return sign | 0x7fc0;
  if (isinf(d)) return sign | 0x7f80;
  if (a < 0x1p-126) return sign | (uint16_t)nearbyint(a * 0x1p133);
  int e;
  double q = nearbyint(ldexp(frexp(a, &e), 8));
  if (q == 256.0) {
    q = 128.0;
    e++;
  }
  int ex = e - 1 + 127;
  if (ex >= 255) return sign | 0x7f80;
  return sign | (uint16_t)(ex << 7) | (uint16_t)((int)q - 128);
}

static double f16_val(uint16_t h) {
  double s = (h & 0x8000) ? -1.0 : 1.0;
  int ex = (h >> 10) & 0x1f, m = h & 0x3ff;
  if (ex == 31) return m ? NAN : s * INFINITY;
  if (ex == 0) return s * ldexp(m, -24);
  return s * ldexp(1024 + m, ex - 25);
}

static double bf16_val(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static double to_i32(double v) {
  if (isnan(v)) return 0;
  v = trunc(v);
  return v > 2147483647.0 ? 2147483647.0 : v < -2147483648.0 ? -2147483648.0 : v;
}

static double to_i64(double v) {
  if (isnan(v)) return 0;
  v = trunc(v);
  return v >= 0x1p63 ? 0x1p63 - 1024 : v < -0x1p63 ? -0x1p63 : v;
}

/* A floating value stored into dt: integers truncate and saturate (NaN 0),
 * bool is v != 0 (tensor.h). */
double ag_conf_round(ag_dtype dt, double v) {
  switch (dt) {
    case AG_F32: return (double)(float)v;
    case AG_F16: return f16_val(ag_conf_f16_bits(v));
    case AG_BF16: return bf16_val(ag_conf_bf16_bits(v));
    case AG_I32: return to_i32(v);
    case AG_I64: return to_i64(v);
    case AG_U8: return isnan(v) || v <= 0 ? 0 : v >= 255 ? 255 : trunc(v);
    case AG_BOOL: return v != 0;
    case AG_F64:
    case AG_DTYPE_COUNT: return v;
  }
  return v;
}

/* An exact integer result of integer arithmetic stored into integer dtype
 * dt: the low bits, two's complement (bool: v != 0). Other dtypes: v. */
double ag__conf_wrap_int(ag_dtype dt, double v) {
  if (!ag_dtype_is_int(dt) || isnan(v)) return v;
  if (dt == AG_BOOL) return v != 0;
  if (dt == AG_I64) return v;
  int64_t x = (int64_t)v;
  return dt == AG_U8 ? (double)(uint8_t)(uint64_t)x : (double)(int32_t)(uint32_t)(uint64_t)x;
}

static void put(ag_dtype dt, void *buf, int64_t i, double v) {
  switch (dt) {
    case AG_F32: ((float *)buf)[i] = (float)v; break;
    case AG_F16: ((uint16_t *)buf)[i] = ag_conf_f16_bits(v); break;
    case AG_BF16: ((uint16_t *)buf)[i] = ag_conf_bf16_bits(v); break;
    case AG_I32: ((int32_t *)buf)[i] = (int32_t)to_i32(v); break;
    case AG_I64: ((int64_t *)buf)[i] = (int64_t)to_i64(v); break;
    case AG_U8:
    case AG_BOOL: ((uint8_t *)buf)[i] = (uint8_t)ag_conf_round(dt, v); break;
    default: ((double *)buf)[i] = v; break;
  }
}

static double get(ag_dtype dt, const void *buf, int64_t i) {
  switch (dt) {
    case AG_F32: return ((const float *)buf)[i];
    case AG_F16: return f16_val(((const uint16_t *)buf)[i]);
    case AG_BF16: return bf16_val(((const uint16_t *)buf)[i]);
    case AG_I32: return ((const int32_t *)buf)[i];
    case AG_I64: return (double)((const int64_t *)buf)[i];
    case AG_U8:
    case AG_BOOL: return ((const uint8_t *)buf)[i];
    default: return ((const double *)buf)[i];
  }
}

static size_t dsize(ag_dtype dt) { return ag_dtype_size(dt); }

/* Value range of random integer inputs: small enough that sums and
 * products stay exact (and, for u8, mostly in range). */
void ag__conf_int_range(ag_dtype dt, double *lo, double *hi) {
  if (dt == AG_U8) *lo = 0, *hi = 15;
  else if (dt == AG_BOOL) *lo = 0, *hi = 1;
  else if (dt == AG_I64) *lo = -100000, *hi = 100000;
}

void ag_conf_philox(uint64_t counter, uint64_t seed, uint32_t out[4]) {
  uint32_t c[4] = {(uint32_t)counter, (uint32_t)(counter >> 32), 0, 0};
  uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
  for (int r = 0; r < 10; r++) {
    if (r) {
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    uint64_t p0 = (uint64_t)0xD2511F53u * c[0], p1 = (uint64_t)0xCD9E8D57u * c[2];
    uint32_t n[4] = {(uint32_t)(p1 >> 32) ^ c[1] ^ k0, (uint32_t)p1, (uint32_t)(p0 >> 32) ^ c[3] ^ k1,
                     (uint32_t)p0};
    memcpy(c, n, sizeof c);
  }
  memcpy(out, c, sizeof c);
}

/* The documented uniform in [0, 1) for element i (tensor.h). */
double ag__conf_philox_uniform(uint64_t seed, uint64_t off, int64_t i) {
  uint32_t r[4];
  ag_conf_philox(off + (uint64_t)i / 4, seed, r);
  return (double)(r[i % 4] >> 8) * 0x1p-24;
}

double ag_conf_threshold(ag_dtype dt) {
  /* About 10x the NMSE of one correct rounding of the output (docs/conformance.md). */
  switch (dt) {
    case AG_F64: return 1e-20;
    case AG_F32: return 1e-10;
    case AG_F16: return 1e-6;
    case AG_BF16: return 1e-4;
    default: return 0;
  }
}

const char *ag_conf_result_name(ag_conf_result r) {
  switch (r) {
    case AG_CONF_PASS: return "pass";
    case AG_CONF_FAIL: return "FAIL";
    case AG_CONF_UNSUPPORTED: return "unsup";
    default: return "-";
  }
}

/* ---- case context ---- */



void *ag__conf_cx_alloc(ctx *c, size_t bytes) {
  if (c->nmem == c->capmem) {
    int cap = c->capmem ? 2 * c->capmem : 64;
    void **m = realloc(c->mem, (size_t)cap * sizeof *m);
    if (!m) return NULL;
    c->mem = m;
    c->capmem = cap;
  }
  void *p = calloc(1, bytes ? bytes : 1);
  if (p) c->mem[c->nmem++] = p;
  return p;
}

static uint64_t splitmix(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

double ag__conf_urand(ctx *c) { return (double)(splitmix(&c->rng) >> 11) * 0x1p-53; }

static uint64_t fnv(const char *s, uint64_t h) {
  for (; *s; s++) h = (h ^ (uint8_t)*s) * 0x100000001B3ull;
  return h;
}

void ag__conf_case_begin(ctx *c, const char *name) {
  c->cname = name;
  c->adv = false;
  c->din = NULL;
  c->dinfo[0] = 0;
  c->ncase++;
  c->nread = 0;
  c->cres = AG_CONF_PASS;
  c->cmsg[0] = 0;
  uint64_t h = fnv(name, fnv(c->opname, 0xCBF29CE484222325ull ^ c->seed));
  c->rng = h ^ ((uint64_t)c->dt << 56);
  ag_error_clear();
  ag_scope_begin();
}

void ag__conf_case_fail(ctx *c, const char *fmt, ...) {
  if (c->cres == AG_CONF_FAIL) return; /* keep the first problem of a case */
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->cmsg, sizeof c->cmsg, fmt, ap);
  va_end(ap);
  c->cres = AG_CONF_FAIL;
}

void ag__conf_case_unsup(ctx *c, const char *what) {
  if (c->cres != AG_CONF_PASS) return;
  snprintf(c->cmsg, sizeof c->cmsg, "%s: %s", what, ag_last_error());
  c->cres = AG_CONF_UNSUPPORTED;
}

void ag__conf_case_end(ctx *c) {
  ag_status st = ag_scope_end();
  if (st != AG_OK) ag__conf_case_fail(c, "ag_scope_end: %s", ag_last_error());
  char dev[24];
  ag_device_str(c->dev, dev, sizeof dev);
  if (c->log)
    fprintf(c->log, "  %-14s %-4s %-8s %-34s %s%s%s\n", c->opname, ag_dtype_name(c->dt), dev,
            c->cname, ag_conf_result_name(c->cres), c->cmsg[0] ? "  " : "", c->cmsg);
  if (c->cres == AG_CONF_FAIL && c->res != AG_CONF_FAIL) {
    snprintf(c->msg, sizeof c->msg, "%s %s on %s, case '%s' (seed 0x%llx): %s", c->opname,
             ag_dtype_name(c->dt), dev, c->cname, (unsigned long long)c->seed, c->cmsg);
    c->res = AG_CONF_FAIL;
  } else if (c->cres == AG_CONF_UNSUPPORTED && c->res == AG_CONF_PASS) {
    snprintf(c->msg, sizeof c->msg, "%s %s on %s, case '%s': %s", c->opname, ag_dtype_name(c->dt),
             dev, c->cname, c->cmsg);
    c->res = AG_CONF_UNSUPPORTED;
  }
  ag_error_clear();
}

/* An op returned NULL: unsupported is a result, anything else a failure. */
void ag__conf_on_null(ctx *c, const char *what) {
  ag_status st = ag_last_status();
  if (st == AG_ERR_UNSUPPORTED ||
      (st == AG_ERR_DTYPE && (c->optional || (c->dt == AG_F64 && c->dev.backend != AG_BACKEND_CPU))))
    ag__conf_case_unsup(c, what);
  else
    ag__conf_case_fail(c, "%s returned NULL: %s (%s)", what, ag_status_name(st), ag_last_error());
}

int64_t ag__conf_prod(int ndim, const int64_t *s) {
  int64_t n = 1;
  for (int i = 0; i < ndim; i++) n *= s[i];
  return n;
}

void ag__conf_cstrides(int ndim, const int64_t *s, int64_t *st) {
  int64_t acc = 1;
  for (int i = ndim - 1; i >= 0; i--) {
    st[i] = acc;
    acc *= s[i];
  }
}

void ag__conf_unravel(int64_t i, int ndim, const int64_t *s, int64_t *idx) {
  for (int d = ndim - 1; d >= 0; d--) {
    idx[d] = s[d] ? i % s[d] : 0;
    i = s[d] ? i / s[d] : 0;
  }
}

static hbuf *hnew(ctx *c, int ndim, const int64_t *shape) {
  hbuf *h = ag__conf_cx_alloc(c, sizeof *h);
  if (!h) return NULL;
  h->ndim = ndim;
  for (int i = 0; i < ndim; i++) h->shape[i] = shape[i];
  h->n = ag__conf_prod(ndim, shape);
  h->v = ag__conf_cx_alloc(c, (size_t)h->n * sizeof(double));
  return h->v ? h : NULL;
}

double ag__conf_gen(ctx *c, ag_dtype dt, int kind, double lo, double hi) {
  double u = ag__conf_urand(c);
  switch (kind) {
    case G_INT: return floor(lo + u * (hi - lo + 1));
    case G_SMALLINT: return floor(-3 + u * 7);
    case G_BOOL: return u < 0.5 ? 0 : 1;
    case G_AWAY: {
      double m = lo + ag__conf_urand(c) * (hi - lo);
      return u < 0.5 ? -m : m;
    }
    case G_FRAC: return ag_ref_draw((ag_ref_dom){AG_REF_FRAC, lo, hi}, u, ag__conf_urand(c));
    case G_NZINT: return ag_ref_draw((ag_ref_dom){AG_REF_NZINT, lo, hi}, u, ag__conf_urand(c));
    default:
      if (ag_dtype_is_int(dt)) return floor(lo + u * (hi - lo + 1));
      return lo + u * (hi - lo);
  }
}

/* A device input of logical shape `shape` in one of four layouts, and its
 * logical values (already rounded to dt) in *out. */
ag_tensor *ag__conf_mk_dt(ctx *c, ag_dtype dt, hbuf **out, int layout, int ndim, const int64_t *shape,
                        int kind, double lo, double hi) {
  hbuf *h = hnew(c, ndim, shape);
  *out = h;
  if (!h) return NULL;
  if (layout == L_T && ndim < 2) layout = L_C;
  if ((layout == L_S || layout == L_E) && ndim < 1) layout = L_C;
  int64_t ps[AG_MAX_DIMS], pst[AG_MAX_DIMS], ls[AG_MAX_DIMS], off = 0;
  for (int i = 0; i < ndim; i++) ps[i] = shape[i];
  if (layout == L_T) {
    ps[ndim - 2] = shape[ndim - 1];
    ps[ndim - 1] = shape[ndim - 2];
  } else if (layout == L_S) {
    ps[ndim - 1] = 2 * shape[ndim - 1] + 1;
  } else if (layout == L_E) {
    ps[0] = 1;
  }
  int64_t pn = ag__conf_prod(ndim, ps);
  double *pv = ag__conf_cx_alloc(c, (size_t)pn * sizeof(double));
  void *bytes = ag__conf_cx_alloc(c, (size_t)pn * dsize(dt));
  if (!pv || !bytes) return NULL;
  for (int64_t i = 0; i < pn; i++) {
    pv[i] = ag_conf_round(dt, ag__conf_gen(c, dt, kind, lo, hi));
    put(dt, bytes, i, pv[i]);
  }
  ag__conf_cstrides(ndim, ps, pst);
  for (int i = 0; i < ndim; i++) ls[i] = pst[i];
  if (layout == L_T) {
    ls[ndim - 2] = pst[ndim - 1];
    ls[ndim - 1] = pst[ndim - 2];
  } else if (layout == L_S) {
    ls[ndim - 1] = 2;
    off = 1;
  } else if (layout == L_E) {
    ls[0] = 0;
  }
  int64_t idx[AG_MAX_DIMS];
  for (int64_t i = 0; i < h->n; i++) {
    ag__conf_unravel(i, ndim, shape, idx);
    int64_t p = off;
    for (int d = 0; d < ndim; d++) p += idx[d] * ls[d];
    h->v[i] = pv[p];
  }
  ag_tensor *t = ag_from_host(c->dev, dt, ndim, ps, bytes);
  if (!t) {
    ag__conf_on_null(c, "ag_from_host");
    return NULL;
  }
  ag_tensor *v = t;
  if (layout == L_T) v = ag_transpose(t, ndim - 2, ndim - 1);
  if (layout == L_S) v = ag_slice(t, ndim - 1, 1, 2 * shape[ndim - 1] + 1, 2);
  if (layout == L_E) v = ag_expand(t, ndim, shape);
  if (!v) ag__conf_on_null(c, layout == L_T ? "ag_transpose" : layout == L_S ? "ag_slice" : "ag_expand");
  return v;
}

ag_tensor *ag__conf_mk(ctx *c, hbuf **out, int layout, int ndim, const int64_t *shape, int kind,
                     double lo, double hi) {
  return ag__conf_mk_dt(c, c->dt, out, layout, ndim, shape, kind, lo, hi);
}

/* A device tensor from explicit values (rounded to dt). */
ag_tensor *ag__conf_mk_vals(ctx *c, ag_dtype dt, hbuf **out, int ndim, const int64_t *shape,
                          const double *vals) {
  hbuf *h = hnew(c, ndim, shape);
  *out = h;
  void *bytes = h ? ag__conf_cx_alloc(c, (size_t)h->n * dsize(dt)) : NULL;
  if (!bytes) return NULL;
  for (int64_t i = 0; i < h->n; i++) {
    h->v[i] = ag_conf_round(dt, vals[i]);
    put(dt, bytes, i, h->v[i]);
  }
  ag_tensor *t = ag_from_host(c->dev, dt, ndim, shape, bytes);
  if (!t) ag__conf_on_null(c, "ag_from_host");
  return t;
}

/* Values of t (any layout) as doubles; NULL after failing the case. */
double *ag__conf_rd(ctx *c, const ag_tensor *t) {
  int64_t n = ag_tensor_numel(t);
  ag_dtype dt = ag_tensor_dtype(t);
  void *bytes = ag__conf_cx_alloc(c, (size_t)n * dsize(dt));
  double *v = ag__conf_cx_alloc(c, (size_t)n * sizeof(double));
  if (!bytes || !v) return NULL;
  ag_status st = ag_to_host(t, bytes, (size_t)n * dsize(dt));
  if (st == AG_ERR_UNSUPPORTED) {
    ag__conf_case_unsup(c, "ag_to_host");
    return NULL;
  }
  if (st != AG_OK) {
    ag__conf_case_fail(c, "ag_to_host: %s (%s)", ag_status_name(st), ag_last_error());
    return NULL;
  }
  if (c->cap) ag__conf_capture_push(c, t, bytes);
  for (int64_t i = 0; i < n; i++) v[i] = get(dt, bytes, i);
  return v;
}

#define SENTINEL (-77.0) /* exact in every signed dtype */
/* u8 cannot hold it, bool holds 0 and 1 only (a bool guard sees stray
 * writes of 0) */
double ag__conf_sentinel(ag_dtype dt) { return dt == AG_U8 ? 177 : dt == AG_BOOL ? 1 : SENTINEL; }

/* Neighbours filled with a sentinel around the hole the output will most
 * likely take in a best-fit caching allocator: overruns and underruns of
 * the output's block land in them. */

void ag__conf_guard_begin(ctx *c, guard *g, ag_dtype dt, int64_t n) {
  int64_t shp[1] = {n > 0 ? n : 1};
  g->a = ag_full(c->dev, dt, 1, shp, ag__conf_sentinel(dt));
  ag_tensor *hole = ag_full(c->dev, dt, 1, shp, ag__conf_sentinel(dt));
  g->b = ag_full(c->dev, dt, 1, shp, ag__conf_sentinel(dt));
  ag_tensor_release(hole);
  ag_error_clear();
}

void ag__conf_guard_end(ctx *c, guard *g) {
  for (int k = 0; k < 2; k++) {
    ag_tensor *t = k ? g->b : g->a;
    if (!t) continue;
    ag_conf_capture *cap = c->cap; /* the sentinels are not results */
    c->cap = NULL;
    double *v = ag__conf_rd(c, t);
    c->cap = cap;
    if (!v) return;
    for (int64_t i = 0; i < ag_tensor_numel(t); i++)
      if (v[i] != ag__conf_sentinel(ag_tensor_dtype(t))) {
        ag__conf_case_fail(c, "guard tensor overwritten near the output (element %lld = %g)", (long long)i,
                  v[i]);
        return;
      }
  }
}

/* Write `t` through a stride-3 view of a sentinel tensor: the copy must land
 * exactly on the view's elements. */
static void strided_guard(ctx *c, ag_tensor *t, const double *vals) {
  int64_t n = ag_tensor_numel(t);
  if (n == 0) return;
  ag_dtype dt = ag_tensor_dtype(t);
  int64_t bs[1] = {3 * n + 8};
  ag_tensor *big = ag_full(c->dev, dt, 1, bs, ag__conf_sentinel(dt));
  ag_tensor *flat = ag_reshape(t, 1, &n);
  ag_tensor *view = ag_slice(big, 0, 4, 4 + 3 * n, 3);
  if (!big || !flat || !view) {
    ag__conf_on_null(c, "strided guard view");
    return;
  }
  ag_status st = ag_copy_(view, flat);
  if (st == AG_ERR_UNSUPPORTED) {
    ag__conf_case_unsup(c, "ag_copy_");
    return;
  }
  if (st != AG_OK) {
    ag__conf_case_fail(c, "ag_copy_ into a strided view: %s (%s)", ag_status_name(st), ag_last_error());
    return;
  }
  double *v = ag__conf_rd(c, big);
  if (!v) return;
  for (int64_t i = 0; i < bs[0]; i++) {
    bool in = i >= 4 && (i - 4) % 3 == 0 && (i - 4) / 3 < n;
    double want = in ? vals[(i - 4) / 3] : ag__conf_sentinel(dt);
    if (!(v[i] == want || (isnan(v[i]) && isnan(want)))) {
      ag__conf_case_fail(c, "strided write: element %lld of the sentinel tensor is %g, want %g%s",
                (long long)i, v[i], want, in ? "" : " (ag__conf_sentinel)");
      return;
    }
  }
}


/* ---- accuracy recording ---- */

static int64_t key16(uint16_t b) { return (b & 0x8000) ? -(int64_t)(b & 0x7fff) : (int64_t)(b & 0x7fff); }

/* ULP distance of g from r (both values of dt) in dt's own bit patterns. */
static int64_t ulp_dt(ag_dtype dt, double g, double r) {
  if (dt == AG_F64) return ag_ulp_distance_f64(g, r);
  if (dt == AG_F32) return ag_ulp_distance_f32((float)g, (float)r);
  if (isnan(g) || isnan(r)) return isnan(g) && isnan(r) ? 0 : INT64_MAX;
  uint16_t a = dt == AG_F16 ? ag_conf_f16_bits(g) : ag_conf_bf16_bits(g);
  uint16_t b = dt == AG_F16 ? ag_conf_f16_bits(r) : ag_conf_bf16_bits(r);
  int64_t d = key16(a) - key16(b);
  return d < 0 ? -d : d;
}

static bool dist_push(ag_conf_dist *d, int64_t u) {
  if (d->n == d->cap) {
    int64_t cap = d->cap ? 2 * d->cap : 1024;
    int64_t *p = realloc(d->ulps, (size_t)cap * sizeof *p);
    if (!p) return false;
    d->ulps = p;
    d->cap = cap;
  }
  d->ulps[d->n++] = u;
  return true;
}

/* DIR/<op>.<dtype>.<device>.<case>.bin: one JSON header line, then the
 * logical input, the double reference and the device output as
 * little-endian doubles (docs/conformance.md). Written atomically through
 * ag_output_*; the first file that fails is recorded in acc->dump_error and
 * ends the dump. */
static void dump_case(ctx *c, const double *ref, const double *o, int ndim, const int64_t *shape, int64_t n) {
  ag_conf_acc *acc = c->acc;
  if (acc->dump_error[0]) return;
  char dev[24], path[1024];
  ag_device_str(c->dev, dev, sizeof dev);
  for (char *p = dev; *p; p++)
    if (*p == ':') *p = '_';
  int len = snprintf(path, sizeof path, "%s/%s.%s.%s.%02d.bin", acc->dump_dir, c->opname, ag_dtype_name(c->dt), dev,
                     c->ncase);
  if (len < 0 || (size_t)len >= sizeof path) {
    snprintf(acc->dump_error, sizeof acc->dump_error, "--dump-inputs: the path of %s.%s.%s.%02d.bin in %s is too long",
             c->opname, ag_dtype_name(c->dt), dev, c->ncase, acc->dump_dir);
    return;
  }
  ag_output *out = NULL;
  ag_status st = ag_output_open(path, "--dump-inputs file", &out);
  if (st == AG_OK) {
    FILE *f = ag_output_file(out);
    const hbuf *h = c->din;
    fprintf(f, "{\"op\": \"%s\", \"dtype\": \"%s\", \"device\": \"%s\", \"case\": \"%s\", \"adversarial\": %s, \"in_shape\": [",
            c->opname, ag_dtype_name(c->dt), dev, c->cname, c->adv ? "true" : "false");
    for (int i = 0; i < h->ndim; i++) fprintf(f, "%s%lld", i ? ", " : "", (long long)h->shape[i]);
    fprintf(f, "], \"out_shape\": [");
    for (int i = 0; i < ndim; i++) fprintf(f, "%s%lld", i ? ", " : "", (long long)shape[i]);
    fprintf(f, "], \"n_in\": %lld, \"n_out\": %lld%s%s}\n", (long long)h->n, (long long)n, c->dinfo[0] ? ", " : "",
            c->dinfo);
    fwrite(h->v, sizeof(double), (size_t)h->n, f);
    fwrite(ref, sizeof(double), (size_t)n, f);
    fwrite(o, sizeof(double), (size_t)n, f);
    st = ag_output_commit(out); /* a write error seen on the stream fails here */
  }
  if (st != AG_OK) snprintf(acc->dump_error, sizeof acc->dump_error, "%s", ag_last_error());
}

/* Record every element of a result in the accuracy distribution. */
static void record(ctx *c, ag_dtype dt, const double *ref, const double *o, int ndim, const int64_t *shape, int64_t n) {
  ag_conf_dist *d = c->adv ? &c->acc->adversarial : &c->acc->shapes;
  bool fl = ag_dtype_is_float(dt);
  for (int64_t i = 0; i < n; i++) {
    double rr = ag_conf_round(dt, ref[i]);
    if (fl) dist_push(d, ulp_dt(dt, o[i], rr));
    else {
      d->exact_n++;
      d->exact_match += o[i] == rr;
    }
  }
  if (c->acc->dump_dir && c->din && fl && n > 0) dump_case(c, ref, o, ndim, shape, n);
}

bool ag_conf_compare(ag_dtype dt, const double *got, const double *ref, const int64_t *index, int64_t n, double tol,
                     char *why, size_t why_len) {
  double err = 0, den = 0, worst = -1;
  int64_t wi = -1;
  for (int64_t i = 0; i < n; i++) {
    double r = ref[i], rr = ag_conf_round(dt, r), g = got[i];
    long long at = (long long)(index ? index[i] : i);
    if (isnan(rr) || isnan(g)) {
      if (isnan(rr) && isnan(g)) continue;
      snprintf(why, why_len, "element %lld: got %g, want %g", at, g, rr);
      return false;
    }
    if (isinf(rr) || isinf(g)) {
      if (g == rr) continue;
      snprintf(why, why_len, "element %lld: got %g, want %g (infinities must match)", at, g, rr);
      return false;
    }
    if (tol == EXACT && g != rr) {
      snprintf(why, why_len, "element %lld: got %.9g, want exactly %.9g", at, g, rr);
      return false;
    }
    double e = (g - r) * (g - r);
    err += e;
    den += r * r;
    if (e > worst) {
      worst = e;
      wi = i;
    }
  }
  double nmse = err / (den > 1e-300 ? den : 1e-300);
  if (tol != EXACT && nmse > tol && err > 0) {
    snprintf(why, why_len, "nmse %.3g > %.3g; worst element %lld: got %.9g, want %.9g", nmse, tol,
             (long long)(index ? index[wi] : wi), got[wi], ref[wi]);
    return false;
  }
  return true;
}

double ag_conf_value(ag_dtype dt, const void *buf, int64_t i) { return get(dt, buf, i); }

/* Compare the device result with a reference in doubles. tol: DEF (the
 * dtype's NMSE threshold), EXACT, or an explicit NMSE threshold. */
void ag__conf_check(ctx *c, ag_tensor *t, int ndim, const int64_t *shape, ag_dtype want_dt,
                  const double *ref, double tol) {
  if (!t) return;
  if (ag_tensor_ndim(t) != ndim ||
      (ndim > 0 && memcmp(ag_tensor_shape(t), shape, (size_t)ndim * sizeof(int64_t)) != 0)) {
    char got[96];
    ag_tensor_describe(t, got, sizeof got);
    char want[96];
    int p = snprintf(want, sizeof want, "[");
    for (int i = 0; i < ndim && p < 80; i++) p += snprintf(want + p, sizeof want - (size_t)p, "%s%lld", i ? "," : "", (long long)shape[i]);
    snprintf(want + p, sizeof want - (size_t)p, "]");
    ag__conf_case_fail(c, "result is %s, want shape %s", got, want);
    return;
  }
  ag_dtype dt = ag_tensor_dtype(t);
  if (dt != want_dt) {
    ag__conf_case_fail(c, "result dtype %s, want %s", ag_dtype_name(dt), ag_dtype_name(want_dt));
    return;
  }
  double *o = ag__conf_rd(c, t);
  if (!o) return;
  int64_t n = ag_tensor_numel(t);
  if (c->acc) record(c, dt, ref, o, ndim, shape, n);
  if (c->adv) return; /* adversarial inputs are measured, not judged */
  if (c->cap) return; /* bitwise: recorded by ag__conf_rd, compared with another device */
  if (tol == DEF) tol = ag_conf_threshold(dt);
  char why[256];
  if (!ag_conf_compare(dt, o, ref, NULL, n, tol, why, sizeof why)) {
    ag__conf_case_fail(c, "%s", why);
    return;
  }
  strided_guard(c, t, o);
}

int ag__conf_bshape(int na, const int64_t *a, int nb, const int64_t *b, int64_t *out) {
  int n = na > nb ? na : nb;
  for (int i = 0; i < n; i++) {
    int64_t x = i - (n - na) >= 0 ? a[i - (n - na)] : 1;
    int64_t y = i - (n - nb) >= 0 ? b[i - (n - nb)] : 1;
    out[i] = x == 1 ? y : x;
  }
  return n;
}

/* Index into h's contiguous logical values for output index oidx (ondim),
 * broadcasting size-1 and missing dims. */
int64_t ag__conf_bidx(const hbuf *h, int ondim, const int64_t *oidx) {
  int64_t p = 0;
  for (int d = 0; d < h->ndim; d++) {
    int od = d + ondim - h->ndim;
    p = p * h->shape[d] + (h->shape[d] == 1 ? 0 : oidx[od]);
  }
  return p;
}

/* ---- the op table ---- */

#define M_F ((1u << AG_F32) | (1u << AG_F16) | (1u << AG_BF16) | (1u << AG_F64))
#define M_I (1u << AG_I32)
#define M_L (1u << AG_I64)
#define M_U (1u << AG_U8)
#define M_B (1u << AG_BOOL)
#define M_IN (M_I | M_L | M_U) /* integer arithmetic */
#define M_ALL (M_F | M_I)
#define M_EVERY (M_F | M_IN | M_B)
#define M_G ((1u << AG_F32) | (1u << AG_F64)) /* finite differences need f32 or wider */

typedef struct opdef {
  const char *name;
  void (*fn)(ctx *);
  unsigned required; /* dtypes the op takes by contract */
  unsigned optional; /* dtypes a backend may take (DTYPE/UNSUPPORTED -> unsup) */
  int arg;           /* the table's sub-op, for the table rows */
} opdef;

/* The table's rows: every elementwise op with a wrapper, in every dtype its
 * entry takes; comparisons in every dtype. */
#define CONF_DT_FLT 0
#define CONF_DT_INT M_IN
#define CONF_UROW(ID, name, api, f, save, b, amp, ints, ...) \
  AG_OPT_IF(CONF_HAS_API_##api)({#name, ag__conf_op_table_unary, M_F | CONF_DT_##ints, 0, AG_U_##ID}, )
#define CONF_BDT_ARITH(ints) M_F | CONF_DT_##ints
#define CONF_BDT_CMP(ints) M_EVERY
#define CONF_BROW(ID, name, api, f, kind, grad, da, db, ints, ...) \
  AG_OPT_IF(CONF_HAS_API_##api)({#name, ag__conf_op_table_binary, CONF_BDT_##kind(ints), 0, AG_B_##ID}, )
#define CONF_GROW_U(ID, name, api, f, save, ...) \
  AG_OPT_IF(CONF_HAS_API_##api)(AG_OPT_IF(AG_OPT_HAS_BWD_##save)({"grad_" #name, ag__conf_op_grad, M_G, 0, 0}, ))
#define CONF_GROW_B(ID, name, api, f, kind, grad, ...) \
  AG_OPT_IF(CONF_HAS_API_##api)(AG_OPT_IF(AG_OPT_PART_##grad)({"grad_" #name, ag__conf_op_grad, M_G, 0, 0}, ))

static const opdef OPS[] = {
    AG_BINARY_OPS(CONF_BROW)
    AG_UNARY_OPS(CONF_UROW)
    {"pow_exponents", ag__conf_op_pow_exponents, M_F, 0, 0},
    {"add_scalar", ag__conf_op_add_scalar, M_F, 0, 0},
    {"sub_scalar", ag__conf_op_sub_scalar, M_F, 0, 0},
    {"rsub_scalar", ag__conf_op_rsub_scalar, M_F, 0, 0},
    {"mul_scalar", ag__conf_op_mul_scalar, M_F, 0, 0},
    {"div_scalar", ag__conf_op_div_scalar, M_F, 0, 0},
    {"where", ag__conf_op_where, M_EVERY, 0, 0},
    {"masked_fill", ag__conf_op_masked_fill, M_F, M_IN | M_B, 0},
    {"sum", ag__conf_op_sum, M_F, M_IN | M_B, 0},
    {"mean", ag__conf_op_mean, M_F, 0, 0},
    {"max", ag__conf_op_max, M_EVERY, 0, 0},
    {"min", ag__conf_op_min, M_EVERY, 0, 0},
    {"argmax", ag__conf_op_argmax, M_F, M_IN | M_B, 0},
    {"matmul", ag__conf_op_matmul, M_F, 0, 0},
    {"softmax", ag__conf_op_softmax, M_F, 0, 0},
    {"log_softmax", ag__conf_op_log_softmax, M_F, 0, 0},
    {"cross_entropy", ag__conf_op_cross_entropy, M_F, 0, 0},
    {"mse_loss", ag__conf_op_mse_loss, M_F, 0, 0},
    {"layer_norm", ag__conf_op_layer_norm, M_F, 0, 0},
    {"rms_norm", ag__conf_op_rms_norm, M_F, 0, 0},
    {"group_norm", ag__conf_op_group_norm, M_F, 0, 0},
    {"interpolate", ag__conf_op_interpolate, M_F, 0, 0},
    {"var", ag__conf_op_var, M_F, 0, 0},
    {"std", ag__conf_op_std, M_F, 0, 0},
    {"cumsum", ag__conf_op_cumsum, M_F, 0, 0},
    {"logsumexp", ag__conf_op_logsumexp, M_F, 0, 0},
    {"norm", ag__conf_op_norm, M_F, 0, 0},
    {"one_hot", ag__conf_op_one_hot, M_L | M_I, 0, 0},
    {"conv1d", ag__conf_op_conv1d, M_G, 0, 0}, /* conv2d's dtypes: f32, f64 on the CPU */
    {"gather", ag__conf_op_gather, M_F, 0, 0},
    {"index_select", ag__conf_op_index_select, M_F, 0, 0},
    {"topk", ag__conf_op_topk, M_F, 0, 0},
    {"sort", ag__conf_op_sort, M_F, 0, 0},
    {"argsort", ag__conf_op_argsort, M_F, 0, 0},
    {"scatter_add", ag__conf_op_scatter_add, M_F, 0, 0},
    {"index_add", ag__conf_op_index_add, M_F, 0, 0},
    {"pad", ag__conf_op_pad, M_F, 0, 0},
    {"embedding", ag__conf_op_embedding, M_F, 0, 0},
    {"concat", ag__conf_op_concat, M_EVERY, 0, 0},
    {"dropout", ag__conf_op_dropout, M_F, 0, 0},
    {"sdpa", ag__conf_op_sdpa, M_F, 0, 0},
    /* the multi-tensor kernels: optimizers update f32 parameters (optim.h);
     * clipping takes f32 everywhere, f16 and bf16 where the device runs
     * them */
    {"sgd", ag__conf_op_sgd, 1u << AG_F32, 0, 0},
    {"adamw", ag__conf_op_adamw, 1u << AG_F32, 0, 0},
    {"clip_grad_norm", ag__conf_op_clip_grad_norm, 1u << AG_F32, (1u << AG_F16) | (1u << AG_BF16), 0},
    {"full", ag__conf_op_full, M_EVERY, 0, 0},
    {"arange", ag__conf_op_arange, M_F | M_IN, 0, 0},
    {"rand", ag__conf_op_rand, M_F, 0, 0},
    {"randn", ag__conf_op_randn, M_F, 0, 0},
    {"cast", ag__conf_op_cast, M_EVERY, 0, 0},
    {"contiguous", ag__conf_op_contiguous, M_EVERY, 0, 0},
    {"copy", ag__conf_op_copy, M_EVERY, 0, 0},
    {"to_device", ag__conf_op_to_device, M_EVERY, 0, 0},
    AG_UNARY_OPS(CONF_GROW_U)
    AG_BINARY_OPS(CONF_GROW_B)
    {"grad_add", ag__conf_op_grad, M_G, 0, 0},
    {"grad_sub", ag__conf_op_grad, M_G, 0, 0},
    {"grad_mul", ag__conf_op_grad, M_G, 0, 0},
    {"grad_div", ag__conf_op_grad, M_G, 0, 0},
    {"grad_scalar_ops", ag__conf_op_grad, M_G, 0, 0},
    {"grad_where", ag__conf_op_grad, M_G, 0, 0},
    {"grad_sum", ag__conf_op_grad, M_G, 0, 0},
    {"grad_mean", ag__conf_op_grad, M_G, 0, 0},
    {"grad_matmul", ag__conf_op_grad, M_G, 0, 0},
    {"grad_softmax", ag__conf_op_grad, M_G, 0, 0},
    {"grad_log_softmax", ag__conf_op_grad, M_G, 0, 0},
    {"grad_cross_entropy", ag__conf_op_grad, M_G, 0, 0},
    {"grad_mse_loss", ag__conf_op_grad, M_G, 0, 0},
    {"grad_layer_norm", ag__conf_op_grad, M_G, 0, 0},
    {"grad_rms_norm", ag__conf_op_grad, M_G, 0, 0},
    {"grad_rms_norm_no_weight", ag__conf_op_grad, M_G, 0, 0},
    {"grad_group_norm", ag__conf_op_grad_group_norm, M_G, 0, 0},
    {"grad_group_norm_no_affine", ag__conf_op_grad_group_norm, M_G, 0, 0},
    {"grad_interpolate_nearest", ag__conf_op_grad_interpolate, M_G, 0, 0},
    {"grad_interpolate_bilinear", ag__conf_op_grad_interpolate, M_G, 0, 0},
    {"grad_interpolate_bilinear_align", ag__conf_op_grad_interpolate, M_G, 0, 0},
    {"grad_var", ag__conf_op_grad, M_G, 0, 0},
    {"grad_std", ag__conf_op_grad, M_G, 0, 0},
    {"grad_cumsum", ag__conf_op_grad, M_G, 0, 0},
    {"grad_logsumexp", ag__conf_op_grad, M_G, 0, 0},
    {"grad_norm_l1", ag__conf_op_grad, M_G, 0, 0},
    {"grad_norm_l2", ag__conf_op_grad, M_G, 0, 0},
    {"grad_norm_inf", ag__conf_op_grad, M_G, 0, 0},
    {"grad_gather", ag__conf_op_grad, M_G, 0, 0},
    {"grad_index_select", ag__conf_op_grad, M_G, 0, 0},
    {"grad_embedding", ag__conf_op_grad, M_G, 0, 0},
    {"grad_concat", ag__conf_op_grad, M_G, 0, 0},
    {"grad_views", ag__conf_op_grad, M_G, 0, 0},
    {"grad_reshape", ag__conf_op_grad, M_G, 0, 0},
    {"grad_conv2d", ag__conf_op_grad, M_G, 0, 0},
    {"grad_conv1d", ag__conf_op_grad, M_G, 0, 0},
    {"grad_avg_pool2d", ag__conf_op_grad, M_G, 0, 0},
    {"grad_adaptive_pool", ag__conf_op_grad, M_G, 0, 0},
    {"grad_batch_norm", ag__conf_op_grad, M_G, 0, 0},
    {"grad_sort", ag__conf_op_grad, M_G, 0, 0},
    {"grad_scatter_add", ag__conf_op_grad, M_G, 0, 0},
    {"grad_index_add", ag__conf_op_grad, M_G, 0, 0},
    {"grad_pad_constant", ag__conf_op_grad, M_G, 0, 0},
    {"grad_pad_reflect", ag__conf_op_grad, M_G, 0, 0},
    {"grad_sdpa", ag__conf_op_grad, M_G, 0, 0},
};

#define N_OPS ((int)(sizeof OPS / sizeof OPS[0]))

/* The range of sub codes of a kernel op, by its table's sub column: the
 * table's sub-op codes, or the variants (AG_KV_*, at most 32: the width of
 * a backend's variant mask). */
#define KOP_SUBS_VAR 32
#define KOP_SUBS_UNARY AG_UNARY_COUNT
#define KOP_SUBS_BINARY AG_BINARY_COUNT
#define KOP_SUBS_REDUCE AG_REDUCE_COUNT
#define KOP_SUBS_POOL AG_POOL_OP_COUNT
#define KOP_SUBS(ID, nm, sub, det, cost) KOP_SUBS_##sub,
static const int k_kop_subs[AG_KOP_COUNT] = {AG_KOPS(KOP_SUBS)};

int ag_conf_kop_count(void) { return AG_KOP_COUNT; }
const char *ag_conf_kop_name(int k) { return ag_kop_name((ag_kop)k); }

bool ag_conf_kop_supported(ag_device d, int k, ag_dtype dt) {
  if (k < 0 || k >= AG_KOP_COUNT) return false;
  for (int sub = 0; sub < k_kop_subs[k]; sub++)
    if (ag_device_supports(d, k, sub, dt)) return true;
  return false;
}

int ag_conf_op_count(void) { return N_OPS; }
const char *ag_conf_op_name(int op) { return op >= 0 && op < N_OPS ? OPS[op].name : "?"; }
int ag_conf_op_find(const char *name) {
  for (int i = 0; i < N_OPS; i++)
    if (strcmp(OPS[i].name, name) == 0) return i;
  return -1;
}

ag_conf_result ag_conf_run(int op, ag_dtype dt, ag_device d, uint64_t seed, FILE *log, char *msg,
                           size_t msg_len) {
  return ag_conf_run_acc(op, dt, d, seed, log, msg, msg_len, NULL);
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

ag_conf_stats ag_conf_dist_stats(ag_conf_dist *d) {
  ag_conf_stats st = {.n = d->n, .median = -1, .p99 = -1, .max = -1, .exact_n = d->exact_n, .exact_match = d->exact_match};
  if (d->n > 0) {
    qsort(d->ulps, (size_t)d->n, sizeof *d->ulps, cmp_i64);
    /* nearest-rank: the smallest value with at least q of the elements at or below it */
    st.median = d->ulps[(d->n + 1) / 2 - 1];
    st.p99 = d->ulps[(int64_t)ceil(0.99 * (double)d->n) - 1];
    st.max = d->ulps[d->n - 1];
    for (int64_t i = d->n; i > 0 && d->ulps[i - 1] == INT64_MAX; i--) st.nan_mismatch++;
  }
  return st;
}

void ag_conf_acc_free(ag_conf_acc *acc) {
  if (!acc) return;
  const char *dir = acc->dump_dir;
  free(acc->shapes.ulps);
  free(acc->adversarial.ulps);
  memset(acc, 0, sizeof *acc);
  acc->dump_dir = dir;
}

static ag_conf_result run_row(int op, ag_dtype dt, ag_device d, uint64_t seed, FILE *log, char *msg,
                              size_t msg_len, ag_conf_acc *acc, ag_conf_capture *cap);

ag_conf_result ag_conf_run_acc(int op, ag_dtype dt, ag_device d, uint64_t seed, FILE *log, char *msg,
                               size_t msg_len, ag_conf_acc *acc) {
  return run_row(op, dt, d, seed, log, msg, msg_len, acc, NULL);
}

ag_conf_result ag_conf_run_capture(int op, ag_dtype dt, ag_device d, uint64_t seed, FILE *log, char *msg,
                                   size_t msg_len, ag_conf_capture *cap) {
  return run_row(op, dt, d, seed, log, msg, msg_len, NULL, cap);
}

static ag_conf_result run_row(int op, ag_dtype dt, ag_device d, uint64_t seed, FILE *log, char *msg,
                              size_t msg_len, ag_conf_acc *acc, ag_conf_capture *cap) {
  if (msg && msg_len) msg[0] = 0;
  if (op < 0 || op >= N_OPS || (unsigned)dt >= AG_DTYPE_COUNT) {
    if (msg) snprintf(msg, msg_len, "unknown op or dtype");
    return AG_CONF_FAIL;
  }
  const opdef *od = &OPS[op];
  unsigned bit = 1u << dt;
  if (!((od->required | od->optional) & bit)) return AG_CONF_NA;
  ctx c = {.dev = d, .dt = dt, .seed = seed, .opname = od->name, .optional = (od->optional & bit) != 0, .arg = od->arg,
           .log = log, .res = AG_CONF_PASS, .acc = acc, .cap = cap};
  int64_t live = ag_live_tensors();
  ag_scope_begin();
  od->fn(&c);
  if (ag_scope_end() != AG_OK && c.res != AG_CONF_FAIL) {
    c.res = AG_CONF_FAIL;
    snprintf(c.msg, sizeof c.msg, "%s: ag_scope_end: %s", od->name, ag_last_error());
  }
  int64_t leaked = ag_live_tensors() - live;
  if (leaked != 0 && c.res != AG_CONF_FAIL) {
    c.res = AG_CONF_FAIL;
    snprintf(c.msg, sizeof c.msg, "%s %s: %lld tensors still live after the op's scope ended", od->name,
             ag_dtype_name(dt), (long long)leaked);
  }
  for (int i = 0; i < c.nmem; i++) free(c.mem[i]);
  free(c.mem);
  if (msg && msg_len) snprintf(msg, msg_len, "%s", c.msg);
  ag_error_clear();
  return c.res;
}
