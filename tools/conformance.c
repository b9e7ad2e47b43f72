/* Conformance engine: for each op x dtype x shape case it builds random
 * inputs on the host, runs the op on the device under test through the public
 * API, and compares with a reference computed here in double precision with
 * plain loops. Outputs are also written through a strided view of a sentinel
 * tensor and bracketed by sentinel neighbours to catch out-of-bounds writes. */
#include "conformance.h"

#include "anygrad/autograd.h"
#include "anygrad/checks.h"
#include "op_ref.h"
#include "ulp.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

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
static double wrap_int(ag_dtype dt, double v) {
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
static void int_range(ag_dtype dt, double *lo, double *hi) {
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
static double philox_uniform(uint64_t seed, uint64_t off, int64_t i) {
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

enum { L_C, L_T, L_S, L_E }; /* contiguous, transposed, stepped slice, expanded */
enum { G_UNI, G_INT, G_AWAY, G_BOOL, G_SMALLINT, G_FRAC, G_NZINT };
#define EXACT 0.0
#define DEF (-1.0)

typedef struct hbuf {
  int ndim;
  int64_t shape[AG_MAX_DIMS];
  int64_t n;
  double *v;
} hbuf;

typedef struct ctx {
  ag_device dev;
  ag_dtype dt;
  uint64_t seed;
  const char *opname;
  const char *cname;
  bool optional; /* AG_ERR_DTYPE for this dtype means unsupported, not failure */
  int arg;       /* the row's table sub-op (ag_unary_op / ag_binary_op) */
  FILE *log;
  uint64_t rng;
  ag_conf_result res, cres;
  char msg[768];
  char cmsg[512];
  void **mem;
  int nmem, capmem;
  /* accuracy mode (ag_conf_run_acc): where check() records, whether the
   * case is adversarial (recorded, never judged), and the logical input of
   * a case with a torch counterpart plus its parameters as JSON members */
  ag_conf_acc *acc;
  bool adv;
  const hbuf *din;
  char dinfo[160];
  int ncase;
} ctx;

static void *cx_alloc(ctx *c, size_t bytes) {
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

static double urand(ctx *c) { return (double)(splitmix(&c->rng) >> 11) * 0x1p-53; }

static uint64_t fnv(const char *s, uint64_t h) {
  for (; *s; s++) h = (h ^ (uint8_t)*s) * 0x100000001B3ull;
  return h;
}

static void case_begin(ctx *c, const char *name) {
  c->cname = name;
  c->adv = false;
  c->din = NULL;
  c->dinfo[0] = 0;
  c->ncase++;
  c->cres = AG_CONF_PASS;
  c->cmsg[0] = 0;
  uint64_t h = fnv(name, fnv(c->opname, 0xCBF29CE484222325ull ^ c->seed));
  c->rng = h ^ ((uint64_t)c->dt << 56);
  ag_error_clear();
  ag_scope_begin();
}

static void case_fail(ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void case_fail(ctx *c, const char *fmt, ...) {
  if (c->cres == AG_CONF_FAIL) return; /* keep the first problem of a case */
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->cmsg, sizeof c->cmsg, fmt, ap);
  va_end(ap);
  c->cres = AG_CONF_FAIL;
}

static void case_unsup(ctx *c, const char *what) {
  if (c->cres != AG_CONF_PASS) return;
  snprintf(c->cmsg, sizeof c->cmsg, "%s: %s", what, ag_last_error());
  c->cres = AG_CONF_UNSUPPORTED;
}

static void case_end(ctx *c) {
  ag_status st = ag_scope_end();
  if (st != AG_OK) case_fail(c, "ag_scope_end: %s", ag_last_error());
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
static void on_null(ctx *c, const char *what) {
  ag_status st = ag_last_status();
  if (st == AG_ERR_UNSUPPORTED ||
      (st == AG_ERR_DTYPE && (c->optional || (c->dt == AG_F64 && c->dev.backend != AG_BACKEND_CPU))))
    case_unsup(c, what);
  else
    case_fail(c, "%s returned NULL: %s (%s)", what, ag_status_name(st), ag_last_error());
}

static int64_t prod(int ndim, const int64_t *s) {
  int64_t n = 1;
  for (int i = 0; i < ndim; i++) n *= s[i];
  return n;
}

static void cstrides(int ndim, const int64_t *s, int64_t *st) {
  int64_t acc = 1;
  for (int i = ndim - 1; i >= 0; i--) {
    st[i] = acc;
    acc *= s[i];
  }
}

static void unravel(int64_t i, int ndim, const int64_t *s, int64_t *idx) {
  for (int d = ndim - 1; d >= 0; d--) {
    idx[d] = s[d] ? i % s[d] : 0;
    i = s[d] ? i / s[d] : 0;
  }
}

static hbuf *hnew(ctx *c, int ndim, const int64_t *shape) {
  hbuf *h = cx_alloc(c, sizeof *h);
  if (!h) return NULL;
  h->ndim = ndim;
  for (int i = 0; i < ndim; i++) h->shape[i] = shape[i];
  h->n = prod(ndim, shape);
  h->v = cx_alloc(c, (size_t)h->n * sizeof(double));
  return h->v ? h : NULL;
}

static double gen(ctx *c, ag_dtype dt, int kind, double lo, double hi) {
  double u = urand(c);
  switch (kind) {
    case G_INT: return floor(lo + u * (hi - lo + 1));
    case G_SMALLINT: return floor(-3 + u * 7);
    case G_BOOL: return u < 0.5 ? 0 : 1;
    case G_AWAY: {
      double m = lo + urand(c) * (hi - lo);
      return u < 0.5 ? -m : m;
    }
    case G_FRAC: return ag_ref_draw((ag_ref_dom){AG_REF_FRAC, lo, hi}, u, urand(c));
    case G_NZINT: return ag_ref_draw((ag_ref_dom){AG_REF_NZINT, lo, hi}, u, urand(c));
    default:
      if (ag_dtype_is_int(dt)) return floor(lo + u * (hi - lo + 1));
      return lo + u * (hi - lo);
  }
}

/* A device input of logical shape `shape` in one of four layouts, and its
 * logical values (already rounded to dt) in *out. */
static ag_tensor *mk_dt(ctx *c, ag_dtype dt, hbuf **out, int layout, int ndim, const int64_t *shape,
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
  int64_t pn = prod(ndim, ps);
  double *pv = cx_alloc(c, (size_t)pn * sizeof(double));
  void *bytes = cx_alloc(c, (size_t)pn * dsize(dt));
  if (!pv || !bytes) return NULL;
  for (int64_t i = 0; i < pn; i++) {
    pv[i] = ag_conf_round(dt, gen(c, dt, kind, lo, hi));
    put(dt, bytes, i, pv[i]);
  }
  cstrides(ndim, ps, pst);
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
    unravel(i, ndim, shape, idx);
    int64_t p = off;
    for (int d = 0; d < ndim; d++) p += idx[d] * ls[d];
    h->v[i] = pv[p];
  }
  ag_tensor *t = ag_from_host(c->dev, dt, ndim, ps, bytes);
  if (!t) {
    on_null(c, "ag_from_host");
    return NULL;
  }
  ag_tensor *v = t;
  if (layout == L_T) v = ag_transpose(t, ndim - 2, ndim - 1);
  if (layout == L_S) v = ag_slice(t, ndim - 1, 1, 2 * shape[ndim - 1] + 1, 2);
  if (layout == L_E) v = ag_expand(t, ndim, shape);
  if (!v) on_null(c, layout == L_T ? "ag_transpose" : layout == L_S ? "ag_slice" : "ag_expand");
  return v;
}

static ag_tensor *mk(ctx *c, hbuf **out, int layout, int ndim, const int64_t *shape, int kind,
                     double lo, double hi) {
  return mk_dt(c, c->dt, out, layout, ndim, shape, kind, lo, hi);
}

/* A device tensor from explicit values (rounded to dt). */
static ag_tensor *mk_vals(ctx *c, ag_dtype dt, hbuf **out, int ndim, const int64_t *shape,
                          const double *vals) {
  hbuf *h = hnew(c, ndim, shape);
  *out = h;
  void *bytes = h ? cx_alloc(c, (size_t)h->n * dsize(dt)) : NULL;
  if (!bytes) return NULL;
  for (int64_t i = 0; i < h->n; i++) {
    h->v[i] = ag_conf_round(dt, vals[i]);
    put(dt, bytes, i, h->v[i]);
  }
  ag_tensor *t = ag_from_host(c->dev, dt, ndim, shape, bytes);
  if (!t) on_null(c, "ag_from_host");
  return t;
}

/* Values of t (any layout) as doubles; NULL after failing the case. */
static double *rd(ctx *c, const ag_tensor *t) {
  int64_t n = ag_tensor_numel(t);
  ag_dtype dt = ag_tensor_dtype(t);
  void *bytes = cx_alloc(c, (size_t)n * dsize(dt));
  double *v = cx_alloc(c, (size_t)n * sizeof(double));
  if (!bytes || !v) return NULL;
  ag_status st = ag_to_host(t, bytes, (size_t)n * dsize(dt));
  if (st == AG_ERR_UNSUPPORTED) {
    case_unsup(c, "ag_to_host");
    return NULL;
  }
  if (st != AG_OK) {
    case_fail(c, "ag_to_host: %s (%s)", ag_status_name(st), ag_last_error());
    return NULL;
  }
  for (int64_t i = 0; i < n; i++) v[i] = get(dt, bytes, i);
  return v;
}

#define SENTINEL (-77.0) /* exact in every signed dtype */
/* u8 cannot hold it, bool holds 0 and 1 only (a bool guard sees stray
 * writes of 0) */
static double sentinel(ag_dtype dt) { return dt == AG_U8 ? 177 : dt == AG_BOOL ? 1 : SENTINEL; }

/* Neighbours filled with a sentinel around the hole the output will most
 * likely take in a best-fit caching allocator: overruns and underruns of
 * the output's block land in them. */
typedef struct guard {
  ag_tensor *a, *b;
} guard;

static void guard_begin(ctx *c, guard *g, ag_dtype dt, int64_t n) {
  int64_t shp[1] = {n > 0 ? n : 1};
  g->a = ag_full(c->dev, dt, 1, shp, sentinel(dt));
  ag_tensor *hole = ag_full(c->dev, dt, 1, shp, sentinel(dt));
  g->b = ag_full(c->dev, dt, 1, shp, sentinel(dt));
  ag_tensor_release(hole);
  ag_error_clear();
}

static void guard_end(ctx *c, guard *g) {
  for (int k = 0; k < 2; k++) {
    ag_tensor *t = k ? g->b : g->a;
    if (!t) continue;
    double *v = rd(c, t);
    if (!v) return;
    for (int64_t i = 0; i < ag_tensor_numel(t); i++)
      if (v[i] != sentinel(ag_tensor_dtype(t))) {
        case_fail(c, "guard tensor overwritten near the output (element %lld = %g)", (long long)i,
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
  ag_tensor *big = ag_full(c->dev, dt, 1, bs, sentinel(dt));
  ag_tensor *flat = ag_reshape(t, 1, &n);
  ag_tensor *view = ag_slice(big, 0, 4, 4 + 3 * n, 3);
  if (!big || !flat || !view) {
    on_null(c, "strided guard view");
    return;
  }
  ag_status st = ag_copy_(view, flat);
  if (st == AG_ERR_UNSUPPORTED) {
    case_unsup(c, "ag_copy_");
    return;
  }
  if (st != AG_OK) {
    case_fail(c, "ag_copy_ into a strided view: %s (%s)", ag_status_name(st), ag_last_error());
    return;
  }
  double *v = rd(c, big);
  if (!v) return;
  for (int64_t i = 0; i < bs[0]; i++) {
    bool in = i >= 4 && (i - 4) % 3 == 0 && (i - 4) / 3 < n;
    double want = in ? vals[(i - 4) / 3] : sentinel(dt);
    if (!(v[i] == want || (isnan(v[i]) && isnan(want)))) {
      case_fail(c, "strided write: element %lld of the sentinel tensor is %g, want %g%s",
                (long long)i, v[i], want, in ? "" : " (sentinel)");
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

/* Compare the device result with a reference in doubles. tol: DEF (the
 * dtype's NMSE threshold), EXACT, or an explicit NMSE threshold. */
static void check(ctx *c, ag_tensor *t, int ndim, const int64_t *shape, ag_dtype want_dt,
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
    case_fail(c, "result is %s, want shape %s", got, want);
    return;
  }
  ag_dtype dt = ag_tensor_dtype(t);
  if (dt != want_dt) {
    case_fail(c, "result dtype %s, want %s", ag_dtype_name(dt), ag_dtype_name(want_dt));
    return;
  }
  double *o = rd(c, t);
  if (!o) return;
  int64_t n = ag_tensor_numel(t);
  if (c->acc) record(c, dt, ref, o, ndim, shape, n);
  if (c->adv) return; /* adversarial inputs are measured, not judged */
  if (tol == DEF) tol = ag_conf_threshold(dt);
  double err = 0, den = 0, worst = -1;
  int64_t wi = -1;
  for (int64_t i = 0; i < n; i++) {
    double r = ref[i], rr = ag_conf_round(dt, r), g = o[i];
    if (isnan(rr) || isnan(g)) {
      if (isnan(rr) && isnan(g)) continue;
      case_fail(c, "element %lld: got %g, want %g", (long long)i, g, rr);
      return;
    }
    if (isinf(rr) || isinf(g)) {
      if (g == rr) continue;
      case_fail(c, "element %lld: got %g, want %g (infinities must match)", (long long)i, g, rr);
      return;
    }
    if (tol == EXACT && g != rr) {
      case_fail(c, "element %lld: got %.9g, want exactly %.9g", (long long)i, g, rr);
      return;
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
    case_fail(c, "nmse %.3g > %.3g; worst element %lld: got %.9g, want %.9g", nmse, tol,
              (long long)wi, o[wi], ref[wi]);
    return;
  }
  strided_guard(c, t, o);
}

static int bshape(int na, const int64_t *a, int nb, const int64_t *b, int64_t *out) {
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
static int64_t bidx(const hbuf *h, int ondim, const int64_t *oidx) {
  int64_t p = 0;
  for (int d = 0; d < h->ndim; d++) {
    int od = d + ondim - h->ndim;
    p = p * h->shape[d] + (h->shape[d] == 1 ? 0 : oidx[od]);
  }
  return p;
}

/* ---- elementwise ---- */

/* The generator kind of a table domain. */
static int gkind(ag_ref_kind k) {
  switch (k) {
    case AG_REF_AWAY: return G_AWAY;
    case AG_REF_FRAC: return G_FRAC;
    case AG_REF_NZINT: return G_NZINT;
    case AG_REF_UNI: break;
  }
  return G_UNI;
}

/* The public function of a table op (the rows below exist for entries with
 * a generated wrapper only). */
#define CONF_BCALL_B(name) return ag_##name(a, b);
#define CONF_BCALL_BH(name) return NULL;
#define CONF_BCALL(ID, name, api, ...) \
  case AG_B_##ID: CONF_BCALL_##api(name)
static ag_tensor *call_binary(int op, ag_tensor *a, ag_tensor *b) {
  switch (op) {
    AG_BINARY_OPS(CONF_BCALL)
  }
  return NULL;
}
#define CONF_UCALL_A0(name) return ag_##name(a);
#define CONF_UCALL_A1(name) return ag_##name(a, s0);
#define CONF_UCALL_A2(name) return ag_##name(a, s0, s1);
#define CONF_UCALL_AH(name) return NULL;
#define CONF_UCALL(ID, name, api, ...) \
  case AG_U_##ID: CONF_UCALL_##api(name)
static ag_tensor *call_table_unary(int op, ag_tensor *a, double s0, double s1) {
  switch (op) {
    AG_UNARY_OPS(CONF_UCALL)
  }
  return NULL;
}

typedef struct bcase {
  const char *name;
  int na;
  int64_t sa[4];
  int la;
  int nb;
  int64_t sb[4];
  int lb;
} bcase;

static const bcase BCASES[] = {
    {"contiguous [37]", 1, {37}, L_C, 1, {37}, L_C},
    {"broadcast [4,1,6] [5,1]", 3, {4, 1, 6}, L_C, 2, {5, 1}, L_C},
    {"transposed x stepped [6,5]", 2, {6, 5}, L_T, 2, {6, 5}, L_S},
    {"expanded [7,9] x [9]", 2, {7, 9}, L_E, 1, {9}, L_C},
    {"scalar [] x [3,4]", 0, {0}, L_C, 2, {3, 4}, L_C},
    {"large [129,257] x stepped", 2, {129, 257}, L_C, 2, {129, 257}, L_S},
    {"empty [0,4] x [4]", 2, {0, 4}, L_C, 1, {4}, L_C},
};

/* A binary table op (c->arg) on every layout case, against op_ref.h. */
static void op_table_binary(ctx *c) {
  const int op = c->arg;
  const ag_binary_info *bi = ag_binary_info_of(op);
  char fname[48];
  snprintf(fname, sizeof fname, "ag_%s", bi->name);
  /* comparisons give bool; they and maximum/minimum are exact */
  bool cmp = bi->compare || op == AG_B_MAX || op == AG_B_MIN;
  const ag_dtype odt = bi->compare ? AG_BOOL : c->dt;
  const bool integer = ag_dtype_is_int(c->dt);
  const ag_ref_dom da = ag_ref_binary_dom(op, 0), db = ag_ref_binary_dom(op, 1);
  for (size_t k = 0; k < sizeof BCASES / sizeof BCASES[0]; k++) {
    const bcase *bc = &BCASES[k];
    case_begin(c, bc->name);
    hbuf *ha, *hb;
    double lo = c->dt == AG_I32 ? -1000 : -2, hi = -lo;
    int_range(c->dt, &lo, &hi);
    int ka = cmp ? G_SMALLINT : integer ? G_UNI : gkind(da.kind), kb = cmp ? G_SMALLINT : integer ? G_UNI : gkind(db.kind);
    ag_tensor *a = mk(c, &ha, bc->la, bc->na, bc->sa, ka, integer ? lo : da.lo, integer ? hi : da.hi);
    ag_tensor *b = mk(c, &hb, bc->lb, bc->nb, bc->sb, kb, integer ? lo : db.lo, integer ? hi : db.hi);
    if (a && b) {
      int64_t os[AG_MAX_DIMS], idx[AG_MAX_DIMS];
      int on = bshape(ha->ndim, ha->shape, hb->ndim, hb->shape, os);
      int64_t n = prod(on, os);
      guard g;
      guard_begin(c, &g, odt, n);
      ag_tensor *o = call_binary(op, a, b);
      if (!o) on_null(c, fname);
      else {
        double *ref = cx_alloc(c, (size_t)n * sizeof(double));
        for (int64_t i = 0; ref && i < n; i++) {
          unravel(i, on, os, idx);
          ref[i] = wrap_int(odt, ag_ref_binary(op, ha->v[bidx(ha, on, idx)], hb->v[bidx(hb, on, idx)], 1, 0));
        }
        if (ref) check(c, o, on, os, odt, ref, cmp ? EXACT : DEF);
        guard_end(c, &g);
      }
    }
    case_end(c);
  }
  if (op == AG_B_DIV && !ag_dtype_is_int(c->dt)) {
    case_begin(c, "special x/0 and 0/0");
    static const double av[4] = {1, -1, 0, 2}, bv[4] = {0, 0, 0, 4};
    int64_t s[1] = {4};
    hbuf *ha, *hb;
    ag_tensor *a = mk_vals(c, c->dt, &ha, 1, s, av), *b = mk_vals(c, c->dt, &hb, 1, s, bv);
    if (a && b) {
      ag_tensor *o = call_binary(op, a, b);
      double ref[4] = {INFINITY, -INFINITY, NAN, 0.5};
      if (!o) on_null(c, fname);
      else check(c, o, 1, s, c->dt, ref, DEF);
    }
    case_end(c);
  }
}

/* The scalar forms of the affine op (the table's AFFINE has no wrapper of
 * its own). */
enum { U_ADDS, U_SUBS, U_RSUBS, U_MULS, U_DIVS };

static double ref_scalar(int op, double x, double s) {
  switch (op) {
    case U_ADDS: return x + s;
    case U_SUBS: return x - s;
    case U_RSUBS: return s - x;
    case U_MULS: return x * s;
    default: return x / s;
  }
}

static ag_tensor *call_scalar(int op, ag_tensor *a, double s) {
  switch (op) {
    case U_ADDS: return ag_add_scalar(a, s);
    case U_SUBS: return ag_sub_scalar(a, s);
    case U_RSUBS: return ag_rsub_scalar(a, s);
    case U_MULS: return ag_mul_scalar(a, s);
    default: return ag_div_scalar(a, s);
  }
}

typedef struct ucase {
  const char *name;
  int n;
  int64_t s[3];
  int l;
} ucase;

static const ucase UCASES[] = {
    {"contiguous [37]", 1, {37}, L_C},        {"transposed [33,17]", 2, {33, 17}, L_T},
    {"stepped [8,9]", 2, {8, 9}, L_S},        {"expanded [5,6]", 2, {5, 6}, L_E},
    {"scalar []", 0, {0}, L_C},               {"large [300,111]", 2, {300, 111}, L_C},
    {"empty [0]", 1, {0}, L_C},
};

/* The adversarial inputs of an elementwise op in dtype dt (rounded to dt
 * when uploaded): signed zeros, infinities, NaN, subnormals, the largest
 * values, points where a function is ill-conditioned or an implementation
 * cancels (near 1 for log, near -1 for log1p, multiples of pi and large
 * arguments for sin/cos, tiny arguments for expm1/log1p/tanh/erf), the
 * overflow thresholds of exp and the saturation of tanh and sigmoid. */
static int adv_values(ag_dtype dt, double *v) {
  const double tiny = dt == AG_F16 ? 0x1p-24 : dt == AG_BF16 ? 0x1p-133 : dt == AG_F32 ? 0x1p-149 : 0x1p-1074;
  const double minn = dt == AG_F16 ? 0x1p-14 : dt == AG_F64 ? 0x1p-1022 : 0x1p-126;
  const double maxv = dt == AG_F16 ? 65504 : dt == AG_BF16 ? 0x1.fep127 : dt == AG_F32 ? 0x1.fffffep127 : 0x1.fffffffffffffp1023;
  const double eps = dt == AG_F16 ? 0x1p-10 : dt == AG_BF16 ? 0x1p-7 : dt == AG_F32 ? 0x1p-23 : 0x1p-52;
  const double list[] = {0, -0.0, INFINITY, -INFINITY, NAN, tiny, -tiny, 16 * tiny, minn / 2, -minn / 2, minn, -minn,
                         maxv, -maxv, maxv / 3, 1e4, -1e4, 1e6, -1e6, 1e10, 1 + eps, 1 - eps / 2, 1 + 4 * eps,
                         -1 + eps / 2, 1e-3, -1e-3, 1e-5, 1e-8, -1e-8, CREF_PI, 2 * CREF_PI, CREF_PI / 2,
                         100 * CREF_PI, 1e4 * CREF_PI, 88.72, 709.78, 11.09, -87.3, -103.5, 0.5, -0.5, 3, -3,
                         10, -10, 20, -20};
  int n = (int)(sizeof list / sizeof list[0]);
  for (int i = 0; i < n; i++) v[i] = list[i];
  return n;
}
#define ADV_MAX 64

/* A unary op on every layout case: table op top (>= 0; scalars s0, s1)
 * against op_ref.h, or the scalar form sop of affine (scalar s0). */
static void run_unary(ctx *c, int top, int sop, const char *fname, double s0, double s1) {
  ag_ref_dom dom = top >= 0 ? ag_ref_unary_dom(top, 0) : (ag_ref_dom){AG_REF_UNI, -3, 3};
  double lo = dom.lo, hi = dom.hi;
  int kind = gkind(dom.kind);
  if (ag_dtype_is_int(c->dt)) kind = G_UNI, lo = c->dt == AG_I32 ? -1000 : -3, hi = -lo;
  int_range(c->dt, &lo, &hi);
  bool exact = top == AG_U_NEG || top == AG_U_ABS || top == AG_U_RELU;
  for (size_t k = 0; k < sizeof UCASES / sizeof UCASES[0]; k++) {
    const ucase *u = &UCASES[k];
    case_begin(c, u->name);
    hbuf *h;
    ag_tensor *a = mk(c, &h, u->l, u->n, u->s, kind, lo, hi);
    if (a) {
      guard g;
      guard_begin(c, &g, c->dt, h->n);
      ag_tensor *o = top >= 0 ? call_table_unary(top, a, s0, s1) : call_scalar(sop, a, s0);
      if (!o) on_null(c, fname);
      else {
        double *ref = cx_alloc(c, (size_t)h->n * sizeof(double));
        for (int64_t i = 0; ref && i < h->n; i++)
          ref[i] = wrap_int(c->dt, top >= 0 ? ag_ref_unary(top, h->v[i], s0, s1) : ref_scalar(sop, h->v[i], s0));
        c->din = h;
        snprintf(c->dinfo, sizeof c->dinfo, "\"s0\": %.17g, \"s1\": %.17g", s0, s1);
        if (ref) check(c, o, h->ndim, h->shape, c->dt, ref, exact ? EXACT : DEF);
        guard_end(c, &g);
      }
    }
    case_end(c);
  }
  if (!ag_dtype_is_int(c->dt) && (top == AG_U_EXP || top == AG_U_LOG || top == AG_U_SQRT || top == AG_U_RSQRT)) {
    case_begin(c, "special values");
    static const double v[6] = {0, 100, -100, 1, -1, 4};
    int64_t sh[1] = {6};
    hbuf *h;
    ag_tensor *a = mk_vals(c, c->dt, &h, 1, sh, v);
    if (a) {
      ag_tensor *o = call_table_unary(top, a, s0, s1);
      double ref[6];
      for (int i = 0; i < 6; i++) ref[i] = ag_ref_unary(top, h->v[i], s0, s1);
      if (!o) on_null(c, fname);
      else check(c, o, 1, sh, c->dt, ref, DEF);
    }
    case_end(c);
  }
  if (c->acc && ag_dtype_is_float(c->dt)) {
    case_begin(c, "adversarial");
    c->adv = true;
    double v[ADV_MAX];
    int64_t sh[1] = {adv_values(c->dt, v)};
    hbuf *h;
    ag_tensor *a = mk_vals(c, c->dt, &h, 1, sh, v);
    if (a) {
      ag_tensor *o = top >= 0 ? call_table_unary(top, a, s0, s1) : call_scalar(sop, a, s0);
      double ref[ADV_MAX];
      for (int i = 0; i < sh[0]; i++)
        ref[i] = top >= 0 ? ag_ref_unary(top, h->v[i], s0, s1) : ref_scalar(sop, h->v[i], s0);
      c->din = h;
      snprintf(c->dinfo, sizeof c->dinfo, "\"s0\": %.17g, \"s1\": %.17g", s0, s1);
      if (!o) on_null(c, fname);
      else check(c, o, 1, sh, c->dt, ref, DEF);
    }
    case_end(c);
  }
}

/* A unary table op (c->arg) with the table's test scalars. */
static void op_table_unary(ctx *c) {
  double s0, s1;
  ag_ref_unary_scalars(c->arg, &s0, &s1);
  char fname[48];
  snprintf(fname, sizeof fname, "ag_%s", ag_unary_info_of(c->arg)->name);
  run_unary(c, c->arg, -1, fname, s0, s1);
}
static void op_add_scalar(ctx *c) { run_unary(c, -1, U_ADDS, "ag_add_scalar", 1.5, 0); }
static void op_sub_scalar(ctx *c) { run_unary(c, -1, U_SUBS, "ag_sub_scalar", 0.75, 0); }
static void op_rsub_scalar(ctx *c) { run_unary(c, -1, U_RSUBS, "ag_rsub_scalar", 2.0, 0); }
static void op_mul_scalar(ctx *c) { run_unary(c, -1, U_MULS, "ag_mul_scalar", -1.25, 0); }
static void op_div_scalar(ctx *c) { run_unary(c, -1, U_DIVS, "ag_div_scalar", 3.0, 0); }
/* exponents beside the table's: 2 (the CPU's squaring path), 0.5, -1.5 */
static void op_pow_exponents(ctx *c) {
  run_unary(c, AG_U_POW, -1, "ag_pow_scalar", 2.0, 0);
  run_unary(c, AG_U_POW, -1, "ag_pow_scalar", 0.5, 0);
  run_unary(c, AG_U_POW, -1, "ag_pow_scalar", -1.5, 0);
}

static void op_where(ctx *c) {
  static const struct {
    const char *name;
    int nc, na, nb;
    int64_t sc[3], sa[3], sb[3];
    int lc, la, lb;
    bool cond_i32;
  } W[] = {
      {"broadcast [4,1] [1,5] [4,5]", 2, 2, 2, {4, 1}, {1, 5}, {4, 5}, L_C, L_C, L_C, false},
      {"stepped/transposed [6,7]", 2, 2, 2, {6, 7}, {6, 7}, {6, 7}, L_S, L_T, L_E, false},
      {"i32 condition [3,4]", 2, 2, 1, {3, 4}, {3, 4}, {4}, L_C, L_S, L_C, true},
      {"bool condition [5,3] transposed", 2, 2, 2, {5, 3}, {5, 3}, {1, 3}, L_T, L_C, L_C, false},
  };
  for (size_t k = 0; k < sizeof W / sizeof W[0]; k++) {
    case_begin(c, W[k].name);
    hbuf *hc, *ha, *hb;
    ag_dtype cdt = W[k].cond_i32 ? AG_I32 : k == 3 ? AG_BOOL : c->dt;
    double lo = -5, hi = 5;
    int_range(c->dt, &lo, &hi);
    ag_tensor *tc = mk_dt(c, cdt, &hc, W[k].lc, W[k].nc, W[k].sc, G_BOOL, 0, 1);
    ag_tensor *ta = mk(c, &ha, W[k].la, W[k].na, W[k].sa, G_UNI, lo, hi);
    ag_tensor *tb = mk(c, &hb, W[k].lb, W[k].nb, W[k].sb, G_UNI, lo, hi);
    if (tc && ta && tb) {
      int64_t s1[AG_MAX_DIMS], os[AG_MAX_DIMS], idx[AG_MAX_DIMS];
      int n1 = bshape(hc->ndim, hc->shape, ha->ndim, ha->shape, s1);
      int on = bshape(n1, s1, hb->ndim, hb->shape, os);
      int64_t n = prod(on, os);
      ag_tensor *o = ag_where(tc, ta, tb);
      if (!o) on_null(c, "ag_where");
      else {
        double *ref = cx_alloc(c, (size_t)n * sizeof(double));
        for (int64_t i = 0; ref && i < n; i++) {
          unravel(i, on, os, idx);
          ref[i] = hc->v[bidx(hc, on, idx)] != 0 ? ha->v[bidx(ha, on, idx)] : hb->v[bidx(hb, on, idx)];
        }
        if (ref) check(c, o, on, os, c->dt, ref, EXACT);
      }
    }
    case_end(c);
  }
}

static void op_masked_fill(ctx *c) {
  static const struct {
    const char *name;
    int na, nm;
    int64_t sa[3], sm[3];
    int la;
    bool m_i32;
  } M[] = {
      {"broadcast mask [5]", 2, 1, {4, 5}, {5}, L_C, false},
      {"i32 mask [4,1], transposed", 2, 2, {4, 5}, {4, 1}, L_T, true},
      {"bool mask [4,5]", 2, 2, {4, 5}, {4, 5}, L_S, false},
  };
  double value = ag_dtype_is_int(c->dt) ? 7 : 0.1, lo = -5, hi = 5;
  int_range(c->dt, &lo, &hi);
  for (size_t k = 0; k < sizeof M / sizeof M[0]; k++) {
    case_begin(c, M[k].name);
    hbuf *ha, *hm;
    ag_tensor *a = mk(c, &ha, M[k].la, M[k].na, M[k].sa, G_UNI, lo, hi);
    ag_tensor *m = mk_dt(c, M[k].m_i32 ? AG_I32 : k == 2 ? AG_BOOL : c->dt, &hm, L_C, M[k].nm, M[k].sm, G_BOOL, 0, 1);
    if (a && m) {
      int64_t idx[AG_MAX_DIMS];
      ag_tensor *o = ag_masked_fill(a, m, value);
      if (!o) on_null(c, "ag_masked_fill");
      else {
        double *ref = cx_alloc(c, (size_t)ha->n * sizeof(double));
        for (int64_t i = 0; ref && i < ha->n; i++) {
          unravel(i, ha->ndim, ha->shape, idx);
          ref[i] = hm->v[bidx(hm, ha->ndim, idx)] != 0 ? ag_conf_round(c->dt, value) : ha->v[i];
        }
        if (ref) check(c, o, ha->ndim, ha->shape, c->dt, ref, EXACT);
      }
    }
    case_end(c);
  }
}

/* ---- reductions ---- */

enum { R_SUM, R_MEAN, R_MAX, R_MIN, R_ARGMAX };

static void run_reduce(ctx *c, int op) {
  static const struct {
    const char *name;
    int n;
    int64_t s[3];
    int l;
    int nd;
    int dims[3];
    bool keep;
  } R[] = {
      {"[5,7,9] dim 1", 3, {5, 7, 9}, L_C, 1, {1}, false},
      {"[5,7,9] dims 0,2 keepdim", 3, {5, 7, 9}, L_C, 2, {0, 2}, true},
      {"transposed [9,7] dim -1", 2, {9, 7}, L_T, 1, {-1}, false},
      {"stepped [6,33] dim 0 keepdim", 2, {6, 33}, L_S, 1, {0}, true},
      {"all of [5,7,9]", 3, {5, 7, 9}, L_C, 0, {0}, false},
      {"long [4099] all", 1, {4099}, L_C, 0, {0}, false},
      {"expanded [8,5] dim 0", 2, {8, 5}, L_E, 1, {0}, false},
  };
  static const char *names[] = {"ag_sum", "ag_mean", "ag_max", "ag_min", "ag_argmax"};
  for (size_t k = 0; k < sizeof R / sizeof R[0]; k++) {
    if (op == R_ARGMAX && R[k].nd != 1) continue;
    case_begin(c, R[k].name);
    hbuf *h;
    double lo = c->dt == AG_I32 ? -50 : -2, hi = -lo;
    if (c->dt == AG_U8) lo = 0, hi = 100;
    else int_range(c->dt, &lo, &hi);
    /* sums of bool and u8 are i64 (PyTorch); argmax is i64 (PyTorch) */
    const ag_dtype odt = op == R_ARGMAX ? AG_I64
                         : op == R_SUM && (c->dt == AG_BOOL || c->dt == AG_U8) ? AG_I64 : c->dt;
    ag_tensor *a = mk(c, &h, R[k].l, R[k].n, R[k].s, G_UNI, lo, hi);
    if (a) {
      bool red[AG_MAX_DIMS] = {0};
      for (int i = 0; i < R[k].nd; i++) red[(R[k].dims[i] + h->ndim) % h->ndim] = true;
      if (R[k].nd == 0)
        for (int i = 0; i < h->ndim; i++) red[i] = true;
      int64_t os[AG_MAX_DIMS], fs[AG_MAX_DIMS], idx[AG_MAX_DIMS];
      int on = 0;
      for (int d = 0; d < h->ndim; d++) {
        fs[d] = red[d] ? 1 : h->shape[d];
        if (!red[d] || R[k].keep) os[on++] = fs[d];
      }
      int64_t n = prod(h->ndim, fs), rcount = h->n / (n ? n : 1);
      ag_tensor *o;
      guard g;
      guard_begin(c, &g, odt, n);
      if (op == R_SUM) o = ag_sum(a, R[k].nd, R[k].dims, R[k].keep);
      else if (op == R_MEAN) o = ag_mean(a, R[k].nd, R[k].dims, R[k].keep);
      else if (op == R_MAX) o = ag_max(a, R[k].nd, R[k].dims, R[k].keep);
      else if (op == R_MIN) o = ag_min(a, R[k].nd, R[k].dims, R[k].keep);
      else o = ag_argmax(a, R[k].dims[0], R[k].keep);
      if (!o) on_null(c, names[op]);
      else {
        double *ref = cx_alloc(c, (size_t)n * sizeof(double));
        double *best = cx_alloc(c, (size_t)n * sizeof(double));
        bool *seen = cx_alloc(c, (size_t)n);
        int64_t fst[AG_MAX_DIMS];
        cstrides(h->ndim, fs, fst);
        int rd_dim = (R[k].dims[0] + h->ndim) % h->ndim;
        for (int64_t i = 0; ref && best && seen && i < h->n; i++) {
          unravel(i, h->ndim, h->shape, idx);
          int64_t p = 0;
          for (int d = 0; d < h->ndim; d++) p += (red[d] ? 0 : idx[d]) * fst[d];
          double x = h->v[i];
          if (op == R_SUM || op == R_MEAN) ref[p] += x;
          else if (!seen[p] || (op == R_MIN ? x < best[p] : x > best[p])) {
            best[p] = x;
            ref[p] = op == R_ARGMAX ? (double)idx[rd_dim] : x;
          }
          seen[p] = true;
        }
        if (op == R_MEAN)
          for (int64_t i = 0; i < n; i++) ref[i] /= (double)rcount;
        c->din = h;
        int dp = snprintf(c->dinfo, sizeof c->dinfo, "\"dims\": [");
        for (int i = 0; i < R[k].nd; i++) dp += snprintf(c->dinfo + dp, sizeof c->dinfo - (size_t)dp, "%s%d", i ? ", " : "", R[k].dims[i]);
        snprintf(c->dinfo + dp, sizeof c->dinfo - (size_t)dp, "], \"keep\": %s", R[k].keep ? "true" : "false");
        if (ref && best && seen)
          check(c, o, on, os, odt, ref,
                op == R_SUM || op == R_MEAN ? DEF : EXACT);
        guard_end(c, &g);
      }
    }
    case_end(c);
  }
  if (c->acc && ag_dtype_is_float(c->dt) && (op == R_SUM || op == R_MEAN)) {
    /* rows of 256 along the last dim: cancellation of large terms of both
     * signs around small ones, magnitudes over 12 (f16: 5) decades, an
     * infinity, a NaN, and only signed zeros */
    case_begin(c, "adversarial [5,256] dim -1");
    c->adv = true;
    enum { R = 5, L = 256 };
    double v[R * L];
    const double big = c->dt == AG_F16 ? 1e2 : 1e4, decades = c->dt == AG_F16 ? 5 : 12;
    for (int j = 0; j < L; j++) {
      v[j] = j % 2 ? (j % 4 == 1 ? big : -big) : 1e-3 * (urand(c) - 0.5);
      v[L + j] = (urand(c) < 0.5 ? -1 : 1) * pow(10, decades * urand(c) - decades / 2);
      v[2 * L + j] = j == 17 ? INFINITY : urand(c) - 0.5;
      v[3 * L + j] = j == 200 ? NAN : urand(c) - 0.5;
      v[4 * L + j] = j % 3 ? -0.0 : 0.0;
    }
    int64_t sh[2] = {R, L}, os[1] = {R};
    int dim[1] = {-1};
    hbuf *h;
    ag_tensor *a = mk_vals(c, c->dt, &h, 2, sh, v);
    if (a) {
      ag_tensor *o = op == R_SUM ? ag_sum(a, 1, dim, false) : ag_mean(a, 1, dim, false);
      double ref[R] = {0};
      for (int r = 0; r < R; r++) {
        for (int j = 0; j < L; j++) ref[r] += h->v[r * L + j];
        if (op == R_MEAN) ref[r] /= L;
      }
      c->din = h;
      snprintf(c->dinfo, sizeof c->dinfo, "\"dims\": [-1], \"keep\": false");
      if (!o) on_null(c, names[op]);
      else check(c, o, 1, os, c->dt, ref, DEF);
    }
    case_end(c);
  }
}

/* var (sq 0) and std (sq 1): reference in double from the centred values. */
static void run_var(ctx *c, int sq) {
  static const struct {
    const char *name;
    int n;
    int64_t s[3];
    int l;
    int nd;
    int dims[3];
    double corr;
    bool keep;
  } V[] = {
      {"[6,32] dim -1 correction 1", 2, {6, 32}, L_C, 1, {-1}, 1, false},
      {"[5,7,9] dims 0,2 correction 0 keepdim", 3, {5, 7, 9}, L_C, 2, {0, 2}, 0, true},
      {"transposed [9,7] dim 0 correction 1", 2, {9, 7}, L_T, 1, {0}, 1, false},
      {"stepped [6,33] dim 1 correction 2 keepdim", 2, {6, 33}, L_S, 1, {1}, 2, true},
      {"all of [5,7,9] correction 1", 3, {5, 7, 9}, L_C, 0, {0}, 1, false},
      {"long rows [3,1500] dim 1", 2, {3, 1500}, L_C, 1, {1}, 1, false},
      {"[4,1] dim 1 correction 1 (N - correction = 0: nan)", 2, {4, 1}, L_C, 1, {1}, 1, false},
      {"[4,3] dim 1 correction 5 (N - correction < 0: inf)", 2, {4, 3}, L_C, 1, {1}, 5, false},
  };
  for (size_t k = 0; k < sizeof V / sizeof V[0]; k++) {
    case_begin(c, V[k].name);
    hbuf *h;
    ag_tensor *a = mk(c, &h, V[k].l, V[k].n, V[k].s, G_UNI, -3, 5);
    if (a) {
      bool red[AG_MAX_DIMS] = {0};
      for (int i = 0; i < V[k].nd; i++) red[(V[k].dims[i] + h->ndim) % h->ndim] = true;
      if (V[k].nd == 0)
        for (int i = 0; i < h->ndim; i++) red[i] = true;
      int64_t os[AG_MAX_DIMS], fs[AG_MAX_DIMS], idx[AG_MAX_DIMS], fst[AG_MAX_DIMS];
      int on = 0;
      for (int d = 0; d < h->ndim; d++) {
        fs[d] = red[d] ? 1 : h->shape[d];
        if (!red[d] || V[k].keep) os[on++] = fs[d];
      }
      int64_t n = prod(h->ndim, fs), rcount = h->n / (n ? n : 1);
      cstrides(h->ndim, fs, fst);
      guard g;
      guard_begin(c, &g, c->dt, n);
      ag_tensor *o = sq ? ag_std(a, V[k].nd, V[k].dims, V[k].corr, V[k].keep)
                        : ag_var(a, V[k].nd, V[k].dims, V[k].corr, V[k].keep);
      if (!o) on_null(c, sq ? "ag_std" : "ag_var");
      else {
        double *mean = cx_alloc(c, (size_t)n * sizeof(double)), *ref = cx_alloc(c, (size_t)n * sizeof(double));
        for (int pass = 0; mean && ref && pass < 2; pass++)
          for (int64_t i = 0; i < h->n; i++) {
            unravel(i, h->ndim, h->shape, idx);
            int64_t p = 0;
            for (int d = 0; d < h->ndim; d++) p += (red[d] ? 0 : idx[d]) * fst[d];
            if (pass == 0) mean[p] += h->v[i] / (double)rcount;
            else ref[p] += (h->v[i] - mean[p]) * (h->v[i] - mean[p]);
          }
        double den = (double)rcount - V[k].corr;
        for (int64_t i = 0; ref && i < n; i++) {
          ref[i] /= den > 0 ? den : 0;
          if (sq) ref[i] = sqrt(ref[i]);
        }
        if (ref) check(c, o, on, os, c->dt, ref, DEF);
        guard_end(c, &g);
      }
    }
    case_end(c);
  }
}
static void op_var(ctx *c) { run_var(c, 0); }
static void op_std(ctx *c) { run_var(c, 1); }

static void op_cumsum(ctx *c) {
  static const struct {
    const char *name;
    int n;
    int64_t s[3];
    int l;
    int dim;
  } S[] = {
      {"[6,32] dim -1", 2, {6, 32}, L_C, -1},
      {"[5,7,9] dim 1", 3, {5, 7, 9}, L_C, 1},
      {"transposed [9,7] dim 0", 2, {9, 7}, L_T, 0},
      {"stepped [6,33] dim 1", 2, {6, 33}, L_S, 1},
      {"long [3000]", 1, {3000}, L_C, 0},
      {"scalar", 0, {0}, L_C, 0},
  };
  for (size_t k = 0; k < sizeof S / sizeof S[0]; k++) {
    case_begin(c, S[k].name);
    hbuf *h;
    ag_tensor *a = mk(c, &h, S[k].l, S[k].n, S[k].s, G_UNI, -2, 2);
    if (a) {
      int nd = h->ndim ? h->ndim : 1, d = (S[k].dim + nd) % nd;
      int64_t r = h->ndim ? h->shape[d] : 1, inner = 1;
      for (int i = d + 1; i < h->ndim; i++) inner *= h->shape[i];
      double *ref = cx_alloc(c, (size_t)(h->n ? h->n : 1) * sizeof(double));
      for (int64_t i = 0; ref && i < h->n; i++) {
        int64_t pos = (i / inner) % r;
        ref[i] = h->v[i] + (pos ? ref[i - inner] : 0);
      }
      guard g;
      guard_begin(c, &g, c->dt, h->n);
      ag_tensor *o = ag_cumsum(a, S[k].dim);
      if (!o) on_null(c, "ag_cumsum");
      else if (ref) {
        c->din = h;
        snprintf(c->dinfo, sizeof c->dinfo, "\"dim\": %d", S[k].dim);
        check(c, o, h->ndim, h->shape, c->dt, ref, DEF);
        guard_end(c, &g);
      }
    }
    case_end(c);
  }
}

/* gather (sel 0) and index_select (sel 1) against a reference in double. */
static void run_gather(ctx *c, int sel) {
  static const struct {
    const char *name;
    int n;
    int64_t xs[3];
    int lx;
    int ni;
    int64_t is[3];
    int li;
    int dim;
    bool i64;
  } G[2][4] = {
      {{"x [5,7] dim 1, i64 index [5,4]", 2, {5, 7}, L_C, 2, {5, 4}, L_C, 1, true},
       {"x [4,6,5] dim 0, index [3,6,2] (narrower)", 3, {4, 6, 5}, L_C, 3, {3, 6, 2}, L_C, 0, false},
       {"transposed x [6,8] dim -1, stepped index [2,3]", 2, {6, 8}, L_T, 2, {2, 3}, L_S, -1, false},
       {"scalar x and index", 0, {0}, L_C, 0, {0}, L_C, 0, true}},
      {{"x [5,7] dim 0, i64 index [4]", 2, {5, 7}, L_C, 1, {4}, L_C, 0, true},
       {"x [3,6,4] dim 1, index [8] with repeats", 3, {3, 6, 4}, L_C, 1, {8}, L_C, 1, false},
       {"transposed x [6,5] dim -1, stepped index [3]", 2, {6, 5}, L_T, 1, {3}, L_S, -1, false},
       {"x [4,3] dim 0, empty index", 2, {4, 3}, L_C, 1, {0}, L_C, 0, false}},
  };
  for (int k = 0; k < 4; k++) {
    const __typeof__(G[0][0]) *q = &G[sel][k];
    case_begin(c, q->name);
    hbuf *hx, *hi;
    ag_tensor *x = mk(c, &hx, q->lx, q->n, q->xs, G_UNI, -3, 3);
    int nd = q->n ? q->n : 1, d = (q->dim + nd) % nd;
    double hi_v = q->n ? (double)(q->xs[d] - 1) : 0;
    ag_tensor *ix = mk_dt(c, q->i64 ? AG_I64 : AG_I32, &hi, q->li, q->ni, q->is, G_INT, 0, hi_v);
    if (x && ix) {
      int64_t os[AG_MAX_DIMS], idx[AG_MAX_DIMS], xst[AG_MAX_DIMS];
      int on = q->n;
      for (int i = 0; i < q->n; i++) os[i] = sel ? (i == d ? q->is[0] : q->xs[i]) : q->is[i];
      int64_t n = prod(on, os);
      cstrides(q->n, q->xs, xst);
      double *ref = cx_alloc(c, (size_t)(n ? n : 1) * sizeof(double));
      for (int64_t t = 0; ref && t < n; t++) {
        unravel(t, on, os, idx);
        int64_t p = 0;
        for (int i = 0; i < q->n; i++) {
          int64_t j = i == d ? (int64_t)hi->v[sel ? idx[d] : t] : idx[i];
          p += j * xst[i];
        }
        ref[t] = hx->v[p];
      }
      guard g;
      guard_begin(c, &g, c->dt, n);
      ag_tensor *o = sel ? ag_index_select(x, q->dim, ix) : ag_gather(x, q->dim, ix);
      if (!o) on_null(c, sel ? "ag_index_select" : "ag_gather");
      else if (ref) {
        check(c, o, on, os, c->dt, ref, EXACT);
        guard_end(c, &g);
      }
    }
    case_end(c);
  }
}
static void op_gather(ctx *c) { run_gather(c, 0); }
static void op_index_select(ctx *c) { run_gather(c, 1); }

/* torch's topk order on (value, index): NaN above numbers, lower index first */
static bool topk_ref_before(double a, int64_t ia, double b, int64_t ib, bool largest) {
  if (isnan(a) != isnan(b)) return largest ? isnan(a) : isnan(b);
  if (!isnan(a) && a != b) return largest ? a > b : a < b;
  return ia < ib;
}

static void op_topk(ctx *c) {
  static const double nanrow[12] = {1, NAN, -2, 3, NAN, 3, 0, -1, 5, NAN, 2, 2};
  static const struct {
    const char *name;
    int n;
    int64_t s[3];
    int l;
    int dim;
    int64_t k;
    bool largest;
    int kind; /* 0 uniform, 1 small integers (ties), 2 the NaN rows */
  } T[] = {
      {"[6,32] k 5 dim -1 largest", 2, {6, 32}, L_C, -1, 5, true, 0},
      {"[5,7,9] k 3 dim 1 smallest", 3, {5, 7, 9}, L_C, 1, 3, false, 0},
      {"ties [4,20] k 7 largest", 2, {4, 20}, L_C, 1, 7, true, 1},
      {"ties, transposed [9,7] k 9 dim 0 smallest", 2, {9, 7}, L_T, 0, 9, false, 1},
      {"NaN [2,6] k 4 largest", 2, {2, 6}, L_C, 1, 4, true, 2},
      {"NaN [2,6] k 6 smallest", 2, {2, 6}, L_C, 1, 6, false, 2},
      {"[3,5] k 0", 2, {3, 5}, L_C, 1, 0, true, 0},
      {"long rows [2,3000] k 10", 2, {2, 3000}, L_C, 1, 10, true, 0},
  };
  for (size_t t = 0; t < sizeof T / sizeof T[0]; t++) {
    case_begin(c, T[t].name);
    hbuf *h;
    ag_tensor *x = T[t].kind == 2 ? mk_vals(c, c->dt, &h, T[t].n, T[t].s, nanrow)
                                  : mk(c, &h, T[t].l, T[t].n, T[t].s, T[t].kind ? G_INT : G_UNI,
                                       T[t].kind ? 0 : -3, T[t].kind ? 3 : 3);
    if (x) {
      int d = (T[t].dim + h->ndim) % h->ndim;
      int64_t R = h->shape[d], K = T[t].k, inner = 1, os[AG_MAX_DIMS];
      for (int i = d + 1; i < h->ndim; i++) inner *= h->shape[i];
      for (int i = 0; i < h->ndim; i++) os[i] = i == d ? K : h->shape[i];
      int64_t lines = h->n / (R ? R : 1), n = lines * K;
      double *rv = cx_alloc(c, (size_t)(n ? n : 1) * sizeof(double));
      double *ri = cx_alloc(c, (size_t)(n ? n : 1) * sizeof(double));
      for (int64_t ln = 0; rv && ri && ln < lines; ln++) {
        int64_t o = ln / inner, i = ln % inner;
        for (int64_t j = 0; j < R; j++) {
          double v = h->v[(o * R + j) * inner + i];
          int64_t rank = 0;
          for (int64_t q = 0; q < R; q++)
            if (topk_ref_before(h->v[(o * R + q) * inner + i], q, v, j, T[t].largest)) rank++;
          if (rank < K) {
            rv[(o * K + rank) * inner + i] = v;
            ri[(o * K + rank) * inner + i] = (double)j;
          }
        }
      }
      ag_tensor *vals = NULL, *idx = NULL;
      ag_status st = ag_topk(x, K, T[t].dim, T[t].largest, &vals, &idx);
      if (st != AG_OK) on_null(c, "ag_topk");
      else if (rv && ri) {
        check(c, vals, h->ndim, os, c->dt, rv, EXACT);
        check(c, idx, h->ndim, os, AG_I64, ri, EXACT);
      }
    }
    case_end(c);
  }
}

static void op_sum(ctx *c) { run_reduce(c, R_SUM); }
static void op_mean(ctx *c) { run_reduce(c, R_MEAN); }
static void op_max(ctx *c) { run_reduce(c, R_MAX); }
static void op_min(ctx *c) { run_reduce(c, R_MIN); }
static void op_argmax(ctx *c) { run_reduce(c, R_ARGMAX); }

/* ---- matmul ---- */

static void op_matmul(ctx *c) {
  static const bcase MM[] = {
      {"[7,13]@[13,5]", 2, {7, 13}, L_C, 2, {13, 5}, L_C},
      {"[13]@[13,5]", 1, {13}, L_C, 2, {13, 5}, L_C},
      {"[7,13]@[13]", 2, {7, 13}, L_C, 1, {13}, L_C},
      {"[13]@[13]", 1, {13}, L_C, 1, {13}, L_C},
      {"batched [3,4,5]@[5,6]", 3, {3, 4, 5}, L_C, 2, {5, 6}, L_C},
      {"broadcast [2,1,4,5]@[3,5,6]", 4, {2, 1, 4, 5}, L_C, 3, {3, 5, 6}, L_C},
      {"transposed [6,8]@[8,7]", 2, {6, 8}, L_T, 2, {8, 7}, L_T},
      {"stepped [5,9]@[9,4]", 2, {5, 9}, L_S, 2, {9, 4}, L_S},
      {"expanded batch [3,4,5]@[3,5,2]", 3, {3, 4, 5}, L_E, 3, {3, 5, 2}, L_C},
      {"large [64,128]@[128,96]", 2, {64, 128}, L_C, 2, {128, 96}, L_C},
  };
  for (size_t k = 0; k < sizeof MM / sizeof MM[0]; k++) {
    case_begin(c, MM[k].name);
    hbuf *ha, *hb;
    ag_tensor *a = mk(c, &ha, MM[k].la, MM[k].na, MM[k].sa, G_UNI, -1, 1);
    ag_tensor *b = mk(c, &hb, MM[k].lb, MM[k].nb, MM[k].sb, G_UNI, -1, 1);
    if (a && b) {
      /* promote 1-D operands as torch.matmul does */
      int64_t as[AG_MAX_DIMS + 1], bs[AG_MAX_DIMS + 1];
      int an = ha->ndim, bn = hb->ndim;
      memcpy(as, ha->shape, sizeof ha->shape);
      memcpy(bs, hb->shape, sizeof hb->shape);
      if (an == 1) {
        as[1] = as[0];
        as[0] = 1;
        an = 2;
      }
      if (bn == 1) {
        bs[1] = 1;
        bn = 2;
      }
      int64_t M = as[an - 2], K = as[an - 1], N = bs[bn - 1];
      int64_t bt[AG_MAX_DIMS], full[AG_MAX_DIMS], idx[AG_MAX_DIMS];
      int btn = bshape(an - 2, as, bn - 2, bs, bt);
      hbuf pa = {an - 2, {0}, 0, NULL}, pb = {bn - 2, {0}, 0, NULL};
      memcpy(pa.shape, as, sizeof(int64_t) * (size_t)(an - 2));
      memcpy(pb.shape, bs, sizeof(int64_t) * (size_t)(bn - 2));
      int64_t nb = prod(btn, bt);
      int64_t n = nb * M * N;
      double *ref = cx_alloc(c, (size_t)n * sizeof(double));
      for (int64_t bi = 0; ref && bi < nb; bi++) {
        unravel(bi, btn, bt, idx);
        int64_t ia = bidx(&pa, btn, idx), ib = bidx(&pb, btn, idx);
        for (int64_t m = 0; m < M; m++)
          for (int64_t j = 0; j < N; j++) {
            double acc = 0;
            for (int64_t q = 0; q < K; q++)
              acc += ha->v[(ia * M + m) * K + q] * hb->v[(ib * K + q) * N + j];
            ref[(bi * M + m) * N + j] = acc;
          }
      }
      int on = 0;
      for (int i = 0; i < btn; i++) full[on++] = bt[i];
      if (ha->ndim > 1) full[on++] = M;
      if (hb->ndim > 1) full[on++] = N;
      guard g;
      guard_begin(c, &g, c->dt, n);
      ag_tensor *o = ag_matmul(a, b);
      if (!o) on_null(c, "ag_matmul");
      else if (ref) {
        check(c, o, on, full, c->dt, ref, DEF);
        guard_end(c, &g);
      }
    }
    case_end(c);
  }
}

/* ---- softmax, losses, normalisation ---- */

/* Visit every line along `dim` of a contiguous logical shape. */
static void lines(const hbuf *h, int dim, void (*fn)(const double *, double *, int64_t, int64_t, void *),
                  double *out, void *arg) {
  int64_t st[AG_MAX_DIMS];
  cstrides(h->ndim, h->shape, st);
  int64_t L = h->shape[dim], S = st[dim], idx[AG_MAX_DIMS];
  for (int64_t i = 0; i < h->n; i++) {
    unravel(i, h->ndim, h->shape, idx);
    if (idx[dim] == 0) fn(h->v + i, out + i, L, S, arg);
  }
}

static void softmax_line(const double *x, double *y, int64_t L, int64_t S, void *arg) {
  bool logsm = *(bool *)arg;
  double m = -INFINITY, s = 0;
  for (int64_t j = 0; j < L; j++) m = fmax(m, x[j * S]);
  for (int64_t j = 0; j < L; j++) s += exp(x[j * S] - m);
  for (int64_t j = 0; j < L; j++) y[j * S] = logsm ? x[j * S] - m - log(s) : exp(x[j * S] - m) / s;
}

static void run_softmax(ctx *c, bool logsm) {
  static const struct {
    const char *name;
    int n;
    int64_t s[3];
    int l, dim;
    double scale, shift;
  } S[] = {
      {"[6,17] dim -1", 2, {6, 17}, L_C, -1, 3, 0},
      {"[6,17] dim 0", 2, {6, 17}, L_C, 0, 3, 0},
      {"[3,4,5] dim 1", 3, {3, 4, 5}, L_C, 1, 3, 0},
      {"transposed [17,6] dim -1", 2, {17, 6}, L_T, -1, 3, 0},
      {"large logits [4,33] dim -1", 2, {4, 33}, L_S, -1, 50, 100},
  };
  for (size_t k = 0; k < sizeof S / sizeof S[0]; k++) {
    case_begin(c, S[k].name);
    hbuf *h;
    double lo = S[k].shift - S[k].scale, hi = S[k].shift + S[k].scale;
    ag_tensor *a = mk(c, &h, S[k].l, S[k].n, S[k].s, G_UNI, lo, hi);
    if (a) {
      int dim = (S[k].dim + h->ndim) % h->ndim;
      double *ref = cx_alloc(c, (size_t)h->n * sizeof(double));
      if (ref) lines(h, dim, softmax_line, ref, &logsm);
      guard g;
      guard_begin(c, &g, c->dt, h->n);
      ag_tensor *o = logsm ? ag_log_softmax(a, S[k].dim) : ag_softmax(a, S[k].dim);
      if (!o) on_null(c, logsm ? "ag_log_softmax" : "ag_softmax");
      else if (ref) {
        c->din = h;
        snprintf(c->dinfo, sizeof c->dinfo, "\"dim\": %d", S[k].dim);
        check(c, o, h->ndim, h->shape, c->dt, ref, DEF);
        guard_end(c, &g);
      }
    }
    case_end(c);
  }
  if (c->acc && ag_dtype_is_float(c->dt)) {
    /* rows of 64: logits spread over +-1e4 (f16: +-1e3), half masked with
     * -inf, one far above the rest, tiny differences around a large
     * offset, and a NaN */
    case_begin(c, "adversarial [5,64] dim -1");
    c->adv = true;
    enum { R = 5, L = 64 };
    double v[R * L];
    const double big = c->dt == AG_F16 ? 1e3 : 1e4;
    for (int j = 0; j < L; j++) {
      v[j] = big * (2 * urand(c) - 1);
      v[L + j] = j % 2 ? -INFINITY : 3 * urand(c);
      v[2 * L + j] = j == 5 ? 60 : urand(c);
      v[3 * L + j] = 1000 + 1e-2 * urand(c);
      v[4 * L + j] = j == 9 ? NAN : urand(c);
    }
    int64_t sh[2] = {R, L};
    hbuf *h;
    ag_tensor *a = mk_vals(c, c->dt, &h, 2, sh, v);
    if (a) {
      double *ref = cx_alloc(c, sizeof(double) * R * L);
      if (ref) lines(h, 1, softmax_line, ref, &logsm);
      ag_tensor *o = logsm ? ag_log_softmax(a, -1) : ag_softmax(a, -1);
      c->din = h;
      snprintf(c->dinfo, sizeof c->dinfo, "\"dim\": -1");
      if (!o) on_null(c, logsm ? "ag_log_softmax" : "ag_softmax");
      else if (ref) check(c, o, 2, sh, c->dt, ref, DEF);
    }
    case_end(c);
  }
}

static void op_softmax(ctx *c) { run_softmax(c, false); }
static void op_log_softmax(ctx *c) { run_softmax(c, true); }

/* Cross-entropy and mse return the logits' dtype or f32 (ops.h leaves it to
 * the implementation), so the check accepts either. The cross-entropy kernel
 * contract computes per-row losses in f32 (backend.h), so f64 gets the f32
 * threshold. */
static void check_loss(ctx *c, ag_tensor *o, int ndim, const int64_t *shape, const double *ref) {
  ag_dtype want = o && ag_tensor_dtype(o) == AG_F32 ? AG_F32 : c->dt;
  double tol = ag_conf_threshold(c->dt == AG_F64 ? AG_F32 : c->dt);
  check(c, o, ndim, shape, want, ref, tol);
}

static void op_cross_entropy(ctx *c) {
  static const ag_reduction reds[3] = {AG_REDUCTION_MEAN, AG_REDUCTION_SUM, AG_REDUCTION_NONE};
  static const char *names[] = {"[8,11] mean, ignore -100", "[8,11] sum, ignore -100",
                                "[8,11] none, ignore -100", "[11] with scalar target",
                                "transposed [8,11] mean", "[8,11] mean, i64 targets"};
  for (int k = 0; k < 6; k++) {
    case_begin(c, names[k]);
    bool one = k == 3;
    const ag_dtype tdt = k == 5 ? AG_I64 : AG_I32;
    int64_t ls[2] = {8, 11}, ts[1] = {8};
    hbuf *hl, *ht;
    ag_tensor *l = one ? mk(c, &hl, L_C, 1, ls + 1, G_UNI, -4, 4)
                       : mk(c, &hl, k == 4 ? L_T : L_C, 2, ls, G_UNI, -4, 4);
    ag_tensor *t = mk_dt(c, tdt, &ht, L_C, one ? 0 : 1, ts, G_INT, 0, 10);
    if (l && t) {
      if (!one) { /* one ignored row, re-uploaded */
        ht->v[3] = -100;
        t = mk_vals(c, tdt, &ht, 1, ts, ht->v);
      }
      int64_t N = one ? 1 : 8, C = 11, cnt = 0;
      double *row = cx_alloc(c, (size_t)N * sizeof(double)), tot = 0;
      for (int64_t r = 0; t && row && r < N; r++) {
        int64_t tg = (int64_t)ht->v[r];
        if (tg == -100) continue;
        double m = -INFINITY, s = 0;
        for (int64_t j = 0; j < C; j++) m = fmax(m, hl->v[r * C + j]);
        for (int64_t j = 0; j < C; j++) s += exp(hl->v[r * C + j] - m);
        row[r] = m + log(s) - hl->v[r * C + tg];
        tot += row[r];
        cnt++;
      }
      ag_reduction red = reds[k < 3 ? k : 0];
      ag_tensor *o = t ? ag_cross_entropy(l, t, red, -100) : NULL;
      if (!o) on_null(c, "ag_cross_entropy");
      else if (red == AG_REDUCTION_NONE) check_loss(c, o, 1, &N, row);
      else {
        double v = red == AG_REDUCTION_SUM ? tot : tot / (double)cnt;
        check_loss(c, o, 0, NULL, &v);
      }
    }
    case_end(c);
  }
}

static void op_mse_loss(ctx *c) {
  static const ag_reduction reds[3] = {AG_REDUCTION_MEAN, AG_REDUCTION_SUM, AG_REDUCTION_NONE};
  static const char *names[3] = {"[6,7] mean, transposed", "[6,7] sum", "[6,7] none, stepped"};
  for (int k = 0; k < 3; k++) {
    case_begin(c, names[k]);
    int64_t s[2] = {6, 7};
    hbuf *ha, *hb;
    ag_tensor *a = mk(c, &ha, k == 0 ? L_T : L_C, 2, s, G_UNI, -2, 2);
    ag_tensor *b = mk(c, &hb, k == 2 ? L_S : L_C, 2, s, G_UNI, -2, 2);
    if (a && b) {
      double ref[42], tot = 0;
      for (int i = 0; i < 42; i++) {
        ref[i] = (ha->v[i] - hb->v[i]) * (ha->v[i] - hb->v[i]);
        tot += ref[i];
      }
      ag_tensor *o = ag_mse_loss(a, b, reds[k]);
      if (!o) on_null(c, "ag_mse_loss");
      else if (reds[k] == AG_REDUCTION_NONE) check_loss(c, o, 2, s, ref);
      else {
        double v = reds[k] == AG_REDUCTION_SUM ? tot : tot / 42;
        check_loss(c, o, 0, NULL, &v);
      }
    }
    case_end(c);
  }
}

static void op_layer_norm(ctx *c) {
  static const struct {
    const char *name;
    int n;
    int64_t s[3];
    int l;
    bool affine;
  } LN[] = {
      {"[6,32] weight+bias", 2, {6, 32}, L_C, true},
      {"[2,3,16] no affine", 3, {2, 3, 16}, L_C, false},
      {"transposed [6,32] weight+bias", 2, {6, 32}, L_T, true},
  };
  for (size_t k = 0; k < sizeof LN / sizeof LN[0]; k++) {
    case_begin(c, LN[k].name);
    hbuf *h, *hw = NULL, *hbias = NULL;
    ag_tensor *x = mk(c, &h, LN[k].l, LN[k].n, LN[k].s, G_UNI, -3, 5);
    int64_t D = LN[k].s[LN[k].n - 1];
    ag_tensor *w = LN[k].affine ? mk(c, &hw, L_C, 1, &D, G_UNI, 0.5, 1.5) : NULL;
    ag_tensor *b = LN[k].affine ? mk(c, &hbias, L_S, 1, &D, G_UNI, -1, 1) : NULL;
    if (x && (!LN[k].affine || (w && b))) {
      double *ref = cx_alloc(c, (size_t)h->n * sizeof(double));
      for (int64_t r = 0; ref && r < h->n / D; r++) {
        double m = 0, v = 0;
        for (int64_t j = 0; j < D; j++) m += h->v[r * D + j];
        m /= (double)D;
        for (int64_t j = 0; j < D; j++) v += (h->v[r * D + j] - m) * (h->v[r * D + j] - m);
        double rs = 1 / sqrt(v / (double)D + 1e-5);
        for (int64_t j = 0; j < D; j++)
          ref[r * D + j] = (h->v[r * D + j] - m) * rs * (hw ? hw->v[j] : 1) + (hbias ? hbias->v[j] : 0);
      }
      guard g;
      guard_begin(c, &g, c->dt, h->n);
      ag_tensor *o = ag_layer_norm(x, w, b, 1e-5);
      if (!o) on_null(c, "ag_layer_norm");
      else if (ref) {
        check(c, o, h->ndim, h->shape, c->dt, ref, DEF);
        guard_end(c, &g);
      }
    }
    case_end(c);
  }
}

static void op_rms_norm(ctx *c) {
  static const struct {
    const char *name;
    int n;
    int64_t s[3];
    int l;
    bool weight;
  } RN[] = {
      {"[6,32] weight", 2, {6, 32}, L_C, true},
      {"[2,3,16] no weight", 3, {2, 3, 16}, L_C, false},
      {"transposed [6,32] weight", 2, {6, 32}, L_T, true},
      {"[3,1500] long rows, weight", 2, {3, 1500}, L_C, true},
  };
  for (size_t k = 0; k < sizeof RN / sizeof RN[0]; k++) {
    case_begin(c, RN[k].name);
    hbuf *h, *hw = NULL;
    ag_tensor *x = mk(c, &h, RN[k].l, RN[k].n, RN[k].s, G_UNI, -3, 5);
    int64_t D = RN[k].s[RN[k].n - 1];
    ag_tensor *w = RN[k].weight ? mk(c, &hw, L_S, 1, &D, G_UNI, 0.5, 1.5) : NULL;
    if (x && (!RN[k].weight || w)) {
      double *ref = cx_alloc(c, (size_t)h->n * sizeof(double));
      for (int64_t r = 0; ref && r < h->n / D; r++) {
        double ss = 0;
        for (int64_t j = 0; j < D; j++) ss += h->v[r * D + j] * h->v[r * D + j];
        double rs = 1 / sqrt(ss / (double)D + 1e-5);
        for (int64_t j = 0; j < D; j++) ref[r * D + j] = h->v[r * D + j] * rs * (hw ? hw->v[j] : 1);
      }
      guard g;
      guard_begin(c, &g, c->dt, h->n);
      ag_tensor *o = ag_rms_norm(x, w, 1e-5);
      if (!o) on_null(c, "ag_rms_norm");
      else if (ref) {
        check(c, o, h->ndim, h->shape, c->dt, ref, DEF);
        guard_end(c, &g);
      }
    }
    case_end(c);
  }
}

static void op_embedding(ctx *c) {
  static const struct {
    const char *name;
    int n;
    int64_t s[2];
    int l;
  } E[] = {
      {"indices [3,4]", 2, {3, 4}, L_C},
      {"stepped indices [5]", 1, {5}, L_S},
      {"scalar index", 0, {0}, L_C},
      {"i64 indices [2,3]", 2, {2, 3}, L_T},
  };
  for (size_t k = 0; k < sizeof E / sizeof E[0]; k++) {
    case_begin(c, E[k].name);
    int64_t ts[2] = {10, 7};
    hbuf *ht, *hi;
    ag_tensor *tab = mk(c, &ht, L_C, 2, ts, G_UNI, -3, 3);
    ag_tensor *ix = mk_dt(c, k == 3 ? AG_I64 : AG_I32, &hi, E[k].l, E[k].n, E[k].s, G_INT, 0, 9);
    if (tab && ix) {
      int64_t os[3];
      int on = 0;
      for (int i = 0; i < E[k].n; i++) os[on++] = E[k].s[i];
      os[on++] = 7;
      double *ref = cx_alloc(c, (size_t)hi->n * 7 * sizeof(double));
      for (int64_t i = 0; ref && i < hi->n; i++)
        for (int j = 0; j < 7; j++) ref[i * 7 + j] = ht->v[(int64_t)hi->v[i] * 7 + j];
      guard g;
      guard_begin(c, &g, c->dt, hi->n * 7);
      ag_tensor *o = ag_embedding(tab, ix);
      if (!o) on_null(c, "ag_embedding");
      else if (ref) {
        check(c, o, on, os, c->dt, ref, EXACT);
        guard_end(c, &g);
      }
    }
    case_end(c);
  }
}

static void op_concat(ctx *c) {
  static const struct {
    const char *name;
    int n, ndim, dim;
    int64_t s[3][3];
    int l[3];
  } CC[] = {
      {"dim 0 [2,3]+[4,3]+[1,3]", 3, 2, 0, {{2, 3}, {4, 3}, {1, 3}}, {L_C, L_C, L_C}},
      {"dim 1 transposed+stepped", 2, 2, 1, {{3, 2}, {3, 5}}, {L_T, L_S}},
      {"dim -1 3-D expanded", 2, 3, -1, {{2, 3, 4}, {2, 3, 1}}, {L_E, L_C}},
      {"single tensor", 1, 2, 0, {{3, 3}}, {L_S}},
  };
  for (size_t k = 0; k < sizeof CC / sizeof CC[0]; k++) {
    case_begin(c, CC[k].name);
    hbuf *h[3];
    ag_tensor *t[3];
    bool ok = true;
    for (int i = 0; i < CC[k].n; i++) {
      t[i] = mk(c, &h[i], CC[k].l[i], CC[k].ndim, CC[k].s[i], G_UNI, -100, 100);
      ok = ok && t[i];
    }
    if (ok) {
      int nd = CC[k].ndim, dim = (CC[k].dim + nd) % nd;
      int64_t os[3], idx[3];
      memcpy(os, CC[k].s[0], sizeof os);
      for (int i = 1; i < CC[k].n; i++) os[dim] += CC[k].s[i][dim];
      int64_t n = prod(nd, os);
      double *ref = cx_alloc(c, (size_t)n * sizeof(double));
      for (int64_t e = 0; ref && e < n; e++) {
        unravel(e, nd, os, idx);
        int i = 0;
        while (idx[dim] >= h[i]->shape[dim]) idx[dim] -= h[i++]->shape[dim];
        int64_t st[3];
        cstrides(nd, h[i]->shape, st);
        int64_t p = 0;
        for (int d = 0; d < nd; d++) p += idx[d] * st[d];
        ref[e] = h[i]->v[p];
      }
      guard g;
      guard_begin(c, &g, c->dt, n);
      ag_tensor *o = ag_concat(CC[k].n, t, CC[k].dim);
      if (!o) on_null(c, "ag_concat");
      else if (ref) {
        check(c, o, nd, os, c->dt, ref, EXACT);
        guard_end(c, &g);
      }
    }
    case_end(c);
  }
}

static void op_dropout(ctx *c) {
  const double p = 0.3;
  int64_t s[2] = {100, 100};
  case_begin(c, "p=0.3 [100,100] mask and scale");
  hbuf *h;
  ag_tensor *x = mk(c, &h, L_C, 2, s, G_AWAY, 0.5, 2);
  ag_generator *g = ag_generator_create(c->seed ^ 0xD50Full);
  if (x && g) {
    uint64_t gs, go, gs2, go2;
    ag_generator_get_state(g, &gs, &go);
    ag_tensor *o = ag_dropout(x, p, true, g);
    ag_generator_get_state(g, &gs2, &go2);
    if (!o) on_null(c, "ag_dropout");
    else {
      double *ref = cx_alloc(c, (size_t)h->n * sizeof(double));
      for (int64_t i = 0; ref && i < h->n; i++)
        ref[i] = philox_uniform(gs, go, i) >= p ? h->v[i] / (1 - p) : 0;
      double *v = rd(c, o);
      if (v) {
        int64_t zeros = 0;
        for (int64_t i = 0; i < h->n; i++) zeros += v[i] == 0;
        double frac = (double)zeros / (double)h->n, sd = sqrt(p * (1 - p) / (double)h->n);
        if (fabs(frac - p) > 5 * sd)
          case_fail(c, "dropped fraction %.4f, want %.2f +- %.4f", frac, p, 5 * sd);
      }
      if (ref) check(c, o, 2, s, c->dt, ref, DEF);
      if (go2 == go) case_fail(c, "the generator offset did not advance");
      /* same state, same mask */
      ag_generator_set_state(g, gs, go);
      ag_tensor *o2 = ag_dropout(x, p, true, g);
      if (!o2) on_null(c, "ag_dropout");
      else if (v) check(c, o2, 2, s, c->dt, v, EXACT);
    }
  }
  ag_generator_free(g);
  case_end(c);

  case_begin(c, "train=false is identity");
  x = mk(c, &h, L_T, 2, s, G_UNI, -1, 1);
  if (x) {
    ag_tensor *o = ag_dropout(x, p, false, NULL);
    if (!o) on_null(c, "ag_dropout");
    else check(c, o, 2, s, c->dt, h->v, EXACT);
  }
  case_end(c);
}

/* ---- creation ---- */

static void op_full(ctx *c) {
  static const struct {
    const char *name;
    int n;
    int64_t s[2];
    double v;
  } F[] = {
      {"[3,5] = 0.1", 2, {3, 5}, 0.1},       {"[1000] = -3.5", 1, {1000}, -3.5},
      {"scalar = 7", 0, {0}, 7},             {"[2,3] = 1e5", 2, {2, 3}, 1e5},
      {"empty [0,3]", 2, {0, 3}, 1},
  };
  for (size_t k = 0; k < sizeof F / sizeof F[0]; k++) {
    case_begin(c, F[k].name);
    int64_t n = prod(F[k].n, F[k].s);
    double *ref = cx_alloc(c, (size_t)n * sizeof(double));
    for (int64_t i = 0; ref && i < n; i++) ref[i] = F[k].v;
    guard g;
    guard_begin(c, &g, c->dt, n);
    ag_tensor *o = ag_full(c->dev, c->dt, F[k].n, F[k].s, F[k].v);
    if (!o) on_null(c, "ag_full");
    else if (ref) {
      check(c, o, F[k].n, F[k].s, c->dt, ref, EXACT);
      guard_end(c, &g);
    }
    case_end(c);
  }
  case_begin(c, "zeros/ones [4,4]");
  int64_t s[2] = {4, 4};
  double z[16] = {0}, one[16];
  for (int i = 0; i < 16; i++) one[i] = 1;
  ag_tensor *a = ag_zeros(c->dev, c->dt, 2, s), *b = ag_ones(c->dev, c->dt, 2, s);
  if (!a || !b) on_null(c, "ag_zeros/ag_ones");
  else {
    check(c, a, 2, s, c->dt, z, EXACT);
    check(c, b, 2, s, c->dt, one, EXACT);
  }
  case_end(c);
}

static void op_arange(ctx *c) {
  static const struct {
    const char *name;
    double a, b, st;
    bool isint;
  } A[] = {
      {"0.5..10 step 0.75", 0.5, 10, 0.75, false},
      {"5..-5 step -1.5", 5, -5, -1.5, false},
      {"0..10 step 3", 0, 10, 3, true},
      {"0..1000 step 1", 0, 1000, 1, true},
  };
  for (size_t k = 0; k < sizeof A / sizeof A[0]; k++) {
    if (ag_dtype_is_int(c->dt) && !A[k].isint) continue;
    if (c->dt == AG_U8 && A[k].b > 255) continue;
    case_begin(c, A[k].name);
    int64_t n = (int64_t)ceil((A[k].b - A[k].a) / A[k].st);
    double *ref = cx_alloc(c, (size_t)n * sizeof(double));
    for (int64_t i = 0; ref && i < n; i++) ref[i] = A[k].a + (double)i * A[k].st;
    ag_tensor *o = ag_arange(c->dev, c->dt, A[k].a, A[k].b, A[k].st);
    if (!o) on_null(c, "ag_arange");
    else if (ref) check(c, o, 1, &n, c->dt, ref, EXACT);
    case_end(c);
  }
}

static void run_random(ctx *c, bool normal) {
  case_begin(c, normal ? "randn [256,256] mean 0.5 std 2" : "rand [256,256] in [-1,3)");
  int64_t s[2] = {256, 256}, n = 65536;
  double lo = normal ? 0.5 : -1, hi = normal ? 2 : 3;
  ag_generator *g = ag_generator_create(c->seed ^ 0x4A4Dull);
  uint64_t gs, go, gs2, go2;
  ag_generator_get_state(g, &gs, &go);
  ag_tensor *o = normal ? ag_randn(c->dev, c->dt, 2, s, lo, hi, g) : ag_rand(c->dev, c->dt, 2, s, lo, hi, g);
  ag_generator_get_state(g, &gs2, &go2);
  double *v = o ? rd(c, o) : NULL;
  if (!o) on_null(c, normal ? "ag_randn" : "ag_rand");
  else if (v) {
    /* the documented Philox mapping (tensor.h), rounded like the device */
    double *ref = cx_alloc(c, (size_t)n * sizeof(double));
    for (int64_t i = 0; ref && i < n; i++) {
      if (!normal) {
        double u = philox_uniform(gs, go, i);
        ref[i] = c->dt == AG_F64 ? u * (hi - lo) + lo : (double)((float)u * (float)(hi - lo) + (float)lo);
      } else {
        uint32_t r[4];
        ag_conf_philox(go + (uint64_t)i / 2, gs, r);
        double u1 = (double)((r[2 * (i % 2)] >> 8) + 1) * 0x1p-24, u2 = (double)(r[2 * (i % 2) + 1] >> 8) * 0x1p-24;
        ref[i] = sqrt(-2 * log(u1)) * cos(2 * M_PI * u2) * hi + lo;
      }
    }
    double m = 0, m2 = 0, in1 = 0, mn = INFINITY, mx = -INFINITY;
    for (int64_t i = 0; i < n; i++) {
      m += v[i];
      mn = fmin(mn, v[i]);
      mx = fmax(mx, v[i]);
    }
    m /= (double)n;
    for (int64_t i = 0; i < n; i++) {
      m2 += (v[i] - m) * (v[i] - m);
      in1 += fabs(v[i] - lo) < hi;
    }
    double sd = sqrt(m2 / (double)(n - 1));
    double want_m = normal ? lo : (lo + hi) / 2, want_sd = normal ? hi : (hi - lo) / sqrt(12);
    if (fabs(m - want_m) > 5 * want_sd / sqrt((double)n))
      case_fail(c, "mean %.5f, want %.5f", m, want_m);
    else if (fabs(sd / want_sd - 1) > 0.03)
      case_fail(c, "std %.5f, want %.5f", sd, want_sd);
    else if (normal && fabs(in1 / (double)n - 0.682689) > 0.01)
      case_fail(c, "fraction within one std %.4f, want 0.6827", in1 / (double)n);
    else if (!normal && (mn < lo || mx > hi || (c->dt != AG_F16 && c->dt != AG_BF16 && mx >= hi)))
      case_fail(c, "values outside [%g, %g): min %g max %g", lo, hi, mn, mx);
    else if (go2 == go)
      case_fail(c, "the generator offset did not advance");
    else if (ref)
      check(c, o, 2, s, c->dt, ref, normal && c->dt == AG_F32 ? 1e-9 : DEF);
    if (c->cres == AG_CONF_PASS) { /* same state, same bits */
      ag_generator_set_state(g, gs, go);
      ag_tensor *o2 = normal ? ag_randn(c->dev, c->dt, 2, s, lo, hi, g) : ag_rand(c->dev, c->dt, 2, s, lo, hi, g);
      if (!o2) on_null(c, "second draw");
      else check(c, o2, 2, s, c->dt, v, EXACT);
    }
  }
  ag_generator_free(g);
  case_end(c);
}

static void op_rand(ctx *c) { run_random(c, false); }
static void op_randn(ctx *c) { run_random(c, true); }

/* ---- casts, views, copies ---- */

static void op_cast(ctx *c) {
  /* ties and edges of f16/bf16 rounding, exact in f32/f64 */
  static const double special[] = {1 + 0x1p-11, 1 + 3 * 0x1p-11, 2049, 2051, 257, 259, 1 + 0x1p-8,
                                   1 + 3 * 0x1p-8, 65504, 65519, 65520, 1e-6, 6e-8, -0.0, 0x1p-126,
                                   3e38, INFINITY, -INFINITY, NAN, -2.5, 2.5, 70000, -131073};
  const int ns = (int)(sizeof special / sizeof special[0]);
  for (int dst = 0; dst < AG_DTYPE_COUNT; dst++) {
    char name[64];
    snprintf(name, sizeof name, "to %s", ag_dtype_name((ag_dtype)dst));
    case_begin(c, name);
    int64_t s[2] = {12, 10};
    hbuf *h;
    double lo = c->dt == AG_I32 || c->dt == AG_I64 ? -70000 : -300, hi = -lo;
    if (c->dt == AG_U8) lo = 0, hi = 255;
    if (c->dt == AG_BOOL) lo = 0, hi = 1;
    /* between integer dtypes a cast keeps the low bits; from floats it
     * truncates and saturates (ag_conf_round) */
    const bool int2int = ag_dtype_is_int(c->dt) && ag_dtype_is_int((ag_dtype)dst);
    ag_tensor *a = mk(c, &h, L_T, 2, s, G_UNI, lo, hi);
    if (a) {
      /* overwrite the first values with the special ones the source can hold */
      double *vals = cx_alloc(c, 120 * sizeof(double));
      for (int i = 0; i < 120; i++) vals[i] = h->v[i];
      for (int i = 0; !ag_dtype_is_int(c->dt) && i < ns; i++) {
        double v = ag_conf_round(c->dt, special[i]);
        /* undefined in C and on devices */
        if ((dst == AG_I32 || dst == AG_I64 || dst == AG_U8) && (isnan(v) || fabs(v) > 2e9)) continue;
        vals[i] = v;
      }
      ag_tensor *src = mk_vals(c, c->dt, &h, 2, s, vals);
      ag_tensor *o = src ? ag_cast(src, (ag_dtype)dst) : NULL;
      double ref[120];
      for (int i = 0; i < 120; i++)
        ref[i] = int2int ? wrap_int((ag_dtype)dst, h->v[i]) : ag_conf_round((ag_dtype)dst, h->v[i]);
      if (!o) on_null(c, "ag_cast");
      else check(c, o, 2, s, (ag_dtype)dst, ref, EXACT);
      /* and from a non-contiguous view */
      ag_tensor *o2 = ag_cast(a, (ag_dtype)dst);
      if (!o2) on_null(c, "ag_cast (view)");
      else {
        double *rv = rd(c, a);
        for (int i = 0; rv && i < 120; i++)
          rv[i] = int2int ? wrap_int((ag_dtype)dst, rv[i]) : ag_conf_round((ag_dtype)dst, rv[i]);
        if (rv) check(c, o2, 2, s, (ag_dtype)dst, rv, EXACT);
      }
    }
    case_end(c);
  }
}

/* A host view over a contiguous base, mirroring the device's view ops. */
typedef struct hview {
  int ndim;
  int64_t shape[AG_MAX_DIMS], strides[AG_MAX_DIMS], off;
} hview;

static hview hv_of(const hbuf *h) {
  hview v = {h->ndim, {0}, {0}, 0};
  memcpy(v.shape, h->shape, sizeof v.shape);
  cstrides(h->ndim, h->shape, v.strides);
  return v;
}

static double *hv_gather(ctx *c, const hview *v, const double *base) {
  int64_t n = prod(v->ndim, v->shape), idx[AG_MAX_DIMS];
  double *o = cx_alloc(c, (size_t)n * sizeof(double));
  for (int64_t i = 0; o && i < n; i++) {
    unravel(i, v->ndim, v->shape, idx);
    int64_t p = v->off;
    for (int d = 0; d < v->ndim; d++) p += idx[d] * v->strides[d];
    o[i] = base[p];
  }
  return o;
}

static void hv_slice(hview *v, int d, int64_t a, int64_t b, int64_t st) {
  if (a < 0) a += v->shape[d];
  if (b < 0) b += v->shape[d];
  v->off += a * v->strides[d];
  v->shape[d] = (b - a + st - 1) / st;
  v->strides[d] *= st;
}

static void op_contiguous(ctx *c) {
  for (int k = 0; k < 6; k++) {
    static const char *names[] = {"transpose [5,7]",           "permute [2,3,4] (2,0,1)",
                                  "slice step 3, negative ends", "expand [1,6] -> [4,6]",
                                  "reshape of a transposed view", "unsqueeze/squeeze/flatten of a slice"};
    case_begin(c, names[k]);
    int64_t s0[3][3] = {{5, 7}, {2, 3, 4}, {10, 6}};
    int nd = k == 1 ? 3 : 2;
    int64_t *s = k < 3 ? s0[k] : k == 3 ? (int64_t[]){1, 6} : k == 4 ? (int64_t[]){4, 6} : (int64_t[]){10, 6};
    hbuf *h;
    ag_tensor *t = mk(c, &h, L_C, nd, s, G_UNI, -9, 9);
    if (!t) {
      case_end(c);
      continue;
    }
    hview v = hv_of(h);
    ag_tensor *w = NULL;
    int64_t tmp;
    switch (k) {
      case 0:
        w = ag_transpose(t, 0, 1);
        tmp = v.shape[0], v.shape[0] = v.shape[1], v.shape[1] = tmp;
        tmp = v.strides[0], v.strides[0] = v.strides[1], v.strides[1] = tmp;
        break;
      case 1: {
        static const int perm[3] = {2, 0, 1};
        w = ag_permute(t, perm);
        hview u = v;
        for (int d = 0; d < 3; d++) u.shape[d] = v.shape[perm[d]], u.strides[d] = v.strides[perm[d]];
        v = u;
        break;
      }
      case 2: {
        ag_tensor *w1 = ag_slice(t, 0, 1, 9, 3);
        w = w1 ? ag_slice(w1, 1, -4, -1, 1) : NULL;
        hv_slice(&v, 0, 1, 9, 3);
        hv_slice(&v, 1, -4, -1, 1);
        break;
      }
      case 3: {
        int64_t es[2] = {4, 6};
        w = ag_expand(t, 2, es);
        v.shape[0] = 4;
        v.strides[0] = 0;
        break;
      }
      case 4: {
        ag_tensor *tt = ag_transpose(t, 0, 1);
        int64_t rs[2] = {3, 8};
        w = tt ? ag_reshape(tt, 2, rs) : NULL;
        tmp = v.shape[0], v.shape[0] = v.shape[1], v.shape[1] = tmp;
        tmp = v.strides[0], v.strides[0] = v.strides[1], v.strides[1] = tmp;
        double *tv = hv_gather(c, &v, h->v); /* reshape = reinterpret the row-major order */
        if (tv) memcpy(h->v, tv, 24 * sizeof(double));
        v = (hview){2, {3, 8}, {8, 1}, 0};
        break;
      }
      default: {
        ag_tensor *w1 = ag_slice(t, 0, 2, 8, 2);          /* [3,6] */
        ag_tensor *w2 = w1 ? ag_unsqueeze(w1, 1) : NULL;  /* [3,1,6] */
        ag_tensor *w3 = w2 ? ag_squeeze(w2, 1) : NULL;    /* [3,6] */
        w = w3 ? ag_flatten(w3) : NULL;                   /* [18] (copies) */
        hv_slice(&v, 0, 2, 8, 2);
        double *tv = hv_gather(c, &v, h->v);
        if (tv) memcpy(h->v, tv, 18 * sizeof(double));
        v = (hview){1, {18}, {1}, 0};
        break;
      }
    }
    if (!w) on_null(c, names[k]);
    else {
      double *ref = hv_gather(c, &v, h->v);
      ag_tensor *o = ag_contiguous(w);
      if (!o) on_null(c, "ag_contiguous");
      else if (!ag_tensor_is_contiguous(o)) case_fail(c, "ag_contiguous returned a non-contiguous tensor");
      else if (ref) check(c, o, v.ndim, v.shape, c->dt, ref, EXACT);
      if (ref && c->cres == AG_CONF_PASS) check(c, w, v.ndim, v.shape, c->dt, ref, EXACT);
    }
    case_end(c);
  }
}

static void op_copy(ctx *c) {
  for (int k = 0; k < 3; k++) {
    static const char *names[] = {"copy_ transposed into a stepped view",
                                  "copy_ broadcast f32 [5] into [4,5] view", "fill_ a stepped view"};
    case_begin(c, names[k]);
    int64_t bs[2] = {4, 11}, s[2] = {4, 5};
    double *base = cx_alloc(c, 44 * sizeof(double));
    for (int i = 0; base && i < 44; i++) base[i] = sentinel(c->dt);
    ag_tensor *big = ag_full(c->dev, c->dt, 2, bs, sentinel(c->dt));
    ag_tensor *dst = big ? ag_slice(big, 1, 1, 11, 2) : NULL; /* [4,5] at odd columns */
    hbuf *h = NULL;
    ag_tensor *src = NULL;
    ag_status st = AG_OK;
    if (!dst || !base) on_null(c, "ag_full/ag_slice");
    else if (k == 0 && (src = mk(c, &h, L_T, 2, s, G_UNI, -5, 5))) st = ag_copy_(dst, src);
    else if (k == 1 && (src = mk_dt(c, AG_F32, &h, L_C, 1, s + 1, G_UNI, -5, 5))) st = ag_copy_(dst, src);
    else if (k == 2) st = ag_fill_(dst, 2.5);
    if (st != AG_OK) {
      if (st == AG_ERR_UNSUPPORTED) case_unsup(c, names[k]);
      else case_fail(c, "%s: %s (%s)", names[k], ag_status_name(st), ag_last_error());
    } else if (dst && (k == 2 || src)) {
      for (int r = 0; r < 4; r++)
        for (int j = 0; j < 5; j++)
          base[r * 11 + 1 + 2 * j] = k == 2 ? ag_conf_round(c->dt, 2.5)
                                            : ag_conf_round(c->dt, h->v[k == 0 ? r * 5 + j : j]);
      check(c, big, 2, bs, c->dt, base, EXACT);
    }
    case_end(c);
  }
}

static void op_to_device(ctx *c) {
  case_begin(c, "host <-> device round trip");
  int64_t s[2] = {9, 13};
  hbuf *h;
  ag_tensor *t = mk(c, &h, L_T, 2, s, G_UNI, -50, 50);
  if (t) {
    ag_tensor *on_cpu = ag_to_device(t, AG_CPU);
    ag_tensor *back = on_cpu ? ag_to_device(on_cpu, c->dev) : NULL;
    ag_tensor *same = ag_to_device(t, c->dev);
    if (!on_cpu || !back || !same) on_null(c, "ag_to_device");
    else {
      if (!ag_device_eq(ag_tensor_device(on_cpu), AG_CPU) || !ag_device_eq(ag_tensor_device(back), c->dev))
        case_fail(c, "ag_to_device produced a tensor on the wrong device");
      check(c, on_cpu, 2, s, c->dt, h->v, EXACT);
      check(c, back, 2, s, c->dt, h->v, EXACT);
      check(c, same, 2, s, c->dt, h->v, EXACT);
    }
  }
  case_end(c);
}

/* ---- gradients: analytic (ag_backward) against central finite differences
 * on the same device. y = f(inputs); the loss is sum(y * W) for random W,
 * evaluated in double on the host so only f's own rounding enters the
 * differences. ---- */

enum {
  GA_ADD, GA_SUB, GA_MUL, GA_DIV, GA_AFFINE, GA_UNARY, GA_BINARY, GA_WHERE, GA_SUM, GA_MEAN, GA_MATMUL,
  GA_SOFTMAX, GA_LOG_SOFTMAX, GA_CE, GA_MSE, GA_LN, GA_RMS, GA_RMS_NOW, GA_VAR, GA_STD, GA_CUMSUM, GA_GATHER, GA_INDEX_SELECT, GA_EMB, GA_CONCAT, GA_VIEWS, GA_RESHAPE,
  GA_CONV2D, GA_AVG_POOL2D, GA_ADAPTIVE_AVG_POOL2D, GA_BATCH_NORM,
};

typedef struct gin {
  int ndim;
  int64_t shape[4];
  int kind;
  double lo, hi;
  int constant; /* 0 differentiable; 1 same dtype, not differentiable; 2 i32 */
} gin;

typedef struct gdef {
  const char *name;
  int fn, nin;
  gin in[3];
  int arg; /* GA_UNARY, GA_BINARY: the table's sub-op */
} gdef;

/* One finite-difference row per table op with a gradient and a wrapper:
 * inputs [3, 4] from the table's gradient domains. */
#define CONF_GIN(d) {2, {3, 4}, CONF_GIN_ d, 0}
#define CONF_GIN_(k, lo, hi) CONF_GK_##k, lo, hi
#define CONF_GK_UNI G_UNI
#define CONF_GK_AWAY G_AWAY
#define CONF_GK_FRAC G_FRAC
#define CONF_GK_NZINT G_NZINT
#define CONF_HAS_API_A0 1
#define CONF_HAS_API_A1 1
#define CONF_HAS_API_A2 1
#define CONF_HAS_API_AH 0
#define CONF_HAS_API_B 1
#define CONF_HAS_API_BH 0
#define CONF_GRAD_U(ID, name, api, f, save, b, amp, ints, cost, dom, gdom, ts0, ts1) \
  AG_OPT_IF(CONF_HAS_API_##api)(AG_OPT_IF(AG_OPT_HAS_BWD_##save)(                  \
      {"grad_" #name, GA_UNARY, 1, {CONF_GIN(gdom)}, AG_U_##ID}, ))
#define CONF_GRAD_B(ID, name, api, f, kind, grad, da, db, ints, cost, doma, domb) \
  AG_OPT_IF(CONF_HAS_API_##api)(AG_OPT_IF(AG_OPT_PART_##grad)(                    \
      {"grad_" #name, GA_BINARY, 2, {CONF_GIN(doma), CONF_GIN(domb)}, AG_B_##ID}, ))

#define GF(lo, hi) G_UNI, lo, hi, 0
static const gdef GRADS[] = {
    AG_UNARY_OPS(CONF_GRAD_U) AG_BINARY_OPS(CONF_GRAD_B)
    {"grad_add", GA_ADD, 2, {{2, {3, 4}, GF(-2, 2)}, {1, {4}, GF(-2, 2)}}, 0},
    {"grad_sub", GA_SUB, 2, {{3, {2, 3, 4}, GF(-2, 2)}, {2, {3, 1}, GF(-2, 2)}}, 0},
    {"grad_mul", GA_MUL, 2, {{2, {3, 4}, GF(-2, 2)}, {2, {1, 4}, GF(-2, 2)}}, 0},
    {"grad_div", GA_DIV, 2, {{2, {3, 4}, GF(-2, 2)}, {2, {3, 4}, G_AWAY, 0.5, 2, 0}}, 0},
    {"grad_scalar_ops", GA_AFFINE, 1, {{2, {3, 4}, GF(-2, 2)}}, 0},
    {"grad_where", GA_WHERE, 3, {{2, {3, 1}, G_BOOL, 0, 1, 1}, {2, {3, 4}, GF(-2, 2)}, {1, {4}, GF(-2, 2)}}, 0},
    {"grad_sum", GA_SUM, 1, {{3, {3, 4, 5}, GF(-2, 2)}}, 0},
    {"grad_mean", GA_MEAN, 1, {{3, {3, 4, 5}, GF(-2, 2)}}, 0},
    {"grad_matmul", GA_MATMUL, 2, {{3, {2, 3, 4}, GF(-1, 1)}, {2, {4, 5}, GF(-1, 1)}}, 0},
    {"grad_softmax", GA_SOFTMAX, 1, {{2, {3, 6}, GF(-2, 2)}}, 0},
    {"grad_log_softmax", GA_LOG_SOFTMAX, 1, {{2, {5, 4}, GF(-2, 2)}}, 0},
    {"grad_cross_entropy", GA_CE, 2, {{2, {4, 6}, GF(-2, 2)}, {1, {4}, G_INT, 0, 5, 2}}, 0},
    {"grad_mse_loss", GA_MSE, 2, {{2, {3, 4}, GF(-2, 2)}, {2, {3, 4}, GF(-2, 2)}}, 0},
    {"grad_layer_norm", GA_LN, 3, {{2, {3, 8}, GF(-2, 2)}, {1, {8}, GF(0.5, 1.5)}, {1, {8}, GF(-1, 1)}}, 0},
    {"grad_rms_norm", GA_RMS, 2, {{3, {2, 3, 8}, GF(-2, 2)}, {1, {8}, GF(0.5, 1.5)}}, 0},
    {"grad_rms_norm_no_weight", GA_RMS_NOW, 1, {{2, {4, 6}, GF(-2, 2)}}, 0},
    {"grad_var", GA_VAR, 1, {{3, {3, 4, 5}, GF(-2, 2)}}, 0},
    {"grad_std", GA_STD, 1, {{2, {4, 6}, GF(-2, 2)}}, 0},
    {"grad_cumsum", GA_CUMSUM, 1, {{3, {3, 4, 5}, GF(-2, 2)}}, 0},
    {"grad_gather", GA_GATHER, 2, {{2, {4, 5}, GF(-2, 2)}, {2, {4, 3}, G_INT, 0, 4, 2}}, 0},
    {"grad_index_select", GA_INDEX_SELECT, 2, {{2, {5, 3}, GF(-2, 2)}, {1, {6}, G_INT, 0, 4, 2}}, 0},
    {"grad_embedding", GA_EMB, 2, {{2, {6, 3}, GF(-2, 2)}, {1, {5}, G_INT, 0, 5, 2}}, 0},
    {"grad_concat", GA_CONCAT, 2, {{2, {2, 3}, GF(-2, 2)}, {2, {4, 3}, GF(-2, 2)}}, 0},
    {"grad_views", GA_VIEWS, 2, {{2, {4, 6}, GF(-2, 2)}, {2, {1, 4}, GF(-2, 2)}}, 0},
    {"grad_reshape", GA_RESHAPE, 1, {{3, {2, 3, 4}, GF(-2, 2)}}, 0},
    /* vision ops (max pooling is left out: a step of h can move its argmax) */
    {"grad_conv2d", GA_CONV2D, 3,
     {{4, {2, 4, 5, 4}, GF(-1, 1)}, {4, {6, 2, 3, 2}, GF(-1, 1)}, {1, {6}, GF(-1, 1)}}, 0},
    {"grad_avg_pool2d", GA_AVG_POOL2D, 1, {{4, {2, 3, 5, 6}, GF(-2, 2)}}, 0},
    {"grad_adaptive_pool", GA_ADAPTIVE_AVG_POOL2D, 1, {{4, {2, 2, 7, 5}, GF(-2, 2)}}, 0},
    {"grad_batch_norm", GA_BATCH_NORM, 3,
     {{4, {4, 3, 3, 2}, GF(-2, 2)}, {1, {3}, GF(0.5, 1.5)}, {1, {3}, GF(-1, 1)}}, 0},
};
#undef GF

static ag_tensor *gfn(const gdef *g, ag_tensor **x) {
  static const int d1[1] = {1}, d02[2] = {0, 2}, perm[3] = {1, 2, 0};
  double s0, s1;
  switch (g->fn) {
    case GA_UNARY:
      ag_ref_unary_scalars(g->arg, &s0, &s1);
      return call_table_unary(g->arg, x[0], s0, s1);
    case GA_BINARY: return call_binary(g->arg, x[0], x[1]);
    case GA_ADD: return ag_add(x[0], x[1]);
    case GA_SUB: return ag_sub(x[0], x[1]);
    case GA_MUL: return ag_mul(x[0], x[1]);
    case GA_DIV: return ag_div(x[0], x[1]);
    case GA_AFFINE:
      return ag_div_scalar(ag_rsub_scalar(ag_sub_scalar(ag_add_scalar(ag_mul_scalar(x[0], 1.5), 0.25), 1), 2), 3);
    case GA_WHERE: return ag_where(x[0], x[1], x[2]);
    case GA_SUM: return ag_sum(x[0], 1, d1, false);
    case GA_MEAN: return ag_mean(x[0], 2, d02, true);
    case GA_MATMUL: return ag_matmul(x[0], x[1]);
    case GA_SOFTMAX: return ag_softmax(x[0], -1);
    case GA_LOG_SOFTMAX: return ag_log_softmax(x[0], 0);
    case GA_CE: return ag_cross_entropy(x[0], x[1], AG_REDUCTION_MEAN, -100);
    case GA_MSE: return ag_mse_loss(x[0], x[1], AG_REDUCTION_MEAN);
    case GA_LN: return ag_layer_norm(x[0], x[1], x[2], 1e-5);
    case GA_RMS: return ag_rms_norm(x[0], x[1], 1e-5);
    case GA_RMS_NOW: return ag_rms_norm(x[0], NULL, 1e-5);
    case GA_VAR: return ag_var(x[0], 2, d02, 1, true);
    case GA_STD: return ag_std(x[0], 1, d1, 0, false);
    case GA_CUMSUM: return ag_cumsum(x[0], 1);
    case GA_GATHER: return ag_gather(x[0], 1, x[1]);
    case GA_INDEX_SELECT: return ag_index_select(x[0], 0, x[1]);
    case GA_EMB: return ag_embedding(x[0], x[1]);
    case GA_CONCAT: return ag_concat(2, x, 0);
    case GA_CONV2D: {
      /* stride 2x1, padding 1x1, dilation 1x2, groups 2, bias */
      static const ag_conv2d_params p = {{2, 1}, {1, 1}, {1, 2}, 2};
      return ag_conv2d(x[0], x[1], x[2], &p);
    }
    case GA_AVG_POOL2D: {
      static const ag_pool2d_params p = {{3, 2}, {2, 2}, {1, 1}, false};
      return ag_avg_pool2d(x[0], &p);
    }
    case GA_ADAPTIVE_AVG_POOL2D: return ag_adaptive_avg_pool2d(x[0], 3, 2);
    case GA_BATCH_NORM: return ag_batch_norm(x[0], NULL, NULL, x[1], x[2], true, 0.1, 1e-5);
    case GA_VIEWS: {
      ag_tensor *s = ag_slice(ag_transpose(x[0], 0, 1), 0, 1, 6, 2); /* [3,4] */
      return ag_mul(s, ag_expand(x[1], 2, (const int64_t[]){3, 4}));
    }
    default: return ag_reshape(ag_permute(x[0], perm), 2, (const int64_t[]){12, 2});
  }
}

/* Upload the inputs (values vals[k]); differentiable ones as leaves that
 * require grad when `leaf`. */
static bool gupload(ctx *c, const gdef *g, double **vals, bool leaf, ag_tensor **x) {
  for (int k = 0; k < g->nin; k++) {
    ag_dtype dt = g->in[k].constant == 2 ? AG_I32 : c->dt;
    hbuf *h;
    x[k] = mk_vals(c, dt, &h, g->in[k].ndim, g->in[k].shape, vals[k]);
    if (!x[k]) return false;
    if (leaf && !g->in[k].constant && ag_tensor_set_requires_grad(x[k], true) != AG_OK) {
      case_fail(c, "ag_tensor_set_requires_grad: %s", ag_last_error());
      return false;
    }
  }
  return true;
}

/* sum(f(x) * W) in double, with grad mode off; NAN after failing the case. */
static double gloss(ctx *c, const gdef *g, double **vals, const double *w) {
  ag_tensor *x[3];
  double L = NAN;
  ag_scope_begin();
  ag_no_grad_begin();
  if (gupload(c, g, vals, false, x)) {
    ag_tensor *y = gfn(g, x);
    double *v = y ? rd(c, y) : NULL;
    if (!y) on_null(c, g->name);
    if (v) {
      L = 0;
      for (int64_t i = 0; i < ag_tensor_numel(y); i++) L += v[i] * w[i];
    }
  }
  ag_grad_mode_end();
  ag_scope_end();
  return L;
}

static void op_grad(ctx *c) {
  const gdef *g = NULL;
  for (size_t i = 0; i < sizeof GRADS / sizeof GRADS[0]; i++)
    if (!strcmp(GRADS[i].name, c->opname)) g = &GRADS[i];
  if (!g) return;
  case_begin(c, "backward vs central differences");
  int64_t nodes = ag_live_nodes();
  double *vals[3];
  for (int k = 0; k < g->nin; k++) {
    const gin *in = &g->in[k];
    int64_t n = prod(in->ndim, in->shape);
    vals[k] = cx_alloc(c, (size_t)n * sizeof(double));
    ag_dtype dt = in->constant == 2 ? AG_I32 : c->dt;
    for (int64_t i = 0; vals[k] && i < n; i++) vals[k][i] = ag_conf_round(dt, gen(c, dt, in->kind, in->lo, in->hi));
  }
  ag_tensor *x[3];
  ag_tensor *y = gupload(c, g, vals, true, x) ? gfn(g, x) : NULL;
  if (!y && c->cres == AG_CONF_PASS) on_null(c, g->name);
  if (y) {
    int64_t ny = ag_tensor_numel(y);
    ag_dtype ydt = ag_tensor_dtype(y);
    double *w = cx_alloc(c, (size_t)ny * sizeof(double));
    for (int64_t i = 0; i < ny; i++) w[i] = ag_conf_round(ydt, gen(c, ydt, G_UNI, -1, 1));
    hbuf *hw;
    ag_tensor *wt = mk_vals(c, ydt, &hw, ag_tensor_ndim(y), ag_tensor_shape(y), w);
    ag_status st = wt ? ag_backward(y, wt, false) : AG_ERR_INTERNAL;
    if (st == AG_ERR_UNSUPPORTED) case_unsup(c, "ag_backward");
    else if (st != AG_OK) case_fail(c, "ag_backward: %s (%s)", ag_status_name(st), ag_last_error());
    /* the tolerance of a central difference with step h: truncation h^2 and
     * rounding eps/h; f64 resolves far more than f32 */
    bool wide = c->dt == AG_F64 && g->fn != GA_CE; /* cross-entropy's loss is f32 by contract */
    double h = wide ? 1e-6 : 1e-2, tol = wide ? 1e-10 : 1e-4;
    for (int k = 0; st == AG_OK && c->cres == AG_CONF_PASS && k < g->nin; k++) {
      if (g->in[k].constant) continue;
      ag_tensor *gr = ag_tensor_grad(x[k]);
      if (!gr) {
        case_fail(c, "input %d has no gradient after backward", k);
        break;
      }
      int64_t n = prod(g->in[k].ndim, g->in[k].shape);
      if (ag_tensor_numel(gr) != n) {
        case_fail(c, "gradient of input %d has %lld elements, want %lld", k, (long long)ag_tensor_numel(gr), (long long)n);
        break;
      }
      double *an = rd(c, gr);
      double err = 0, den = 0, worst = -1, wa = 0, wf = 0;
      int64_t wi = 0;
      for (int64_t i = 0; an && i < n && c->cres == AG_CONF_PASS; i++) {
        double x0 = vals[k][i], xp = ag_conf_round(c->dt, x0 + h), xm = ag_conf_round(c->dt, x0 - h);
        vals[k][i] = xp;
        double lp = gloss(c, g, vals, w);
        vals[k][i] = xm;
        double lm = gloss(c, g, vals, w);
        vals[k][i] = x0;
        double fd = (lp - lm) / (xp - xm), e = (an[i] - fd) * (an[i] - fd);
        err += e;
        den += fd * fd;
        if (e > worst) worst = e, wi = i, wa = an[i], wf = fd;
      }
      double nmse = err / (den > 1e-30 ? den : 1e-30);
      if (an && c->cres == AG_CONF_PASS && nmse > tol)
        case_fail(c, "input %d: gradient nmse %.3g > %.3g; worst element %lld: backward %.7g, finite difference %.7g",
                  k, nmse, tol, (long long)wi, wa, wf);
    }
  }
  case_end(c);
  if (ag_live_nodes() != nodes && c->res != AG_CONF_FAIL) {
    c->res = AG_CONF_FAIL;
    snprintf(c->msg, sizeof c->msg, "%s %s: %lld autograd nodes still live after backward and the scope's end",
             c->opname, ag_dtype_name(c->dt), (long long)(ag_live_nodes() - nodes));
  }
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
  AG_OPT_IF(CONF_HAS_API_##api)({#name, op_table_unary, M_F | CONF_DT_##ints, 0, AG_U_##ID}, )
#define CONF_BDT_ARITH(ints) M_F | CONF_DT_##ints
#define CONF_BDT_CMP(ints) M_EVERY
#define CONF_BROW(ID, name, api, f, kind, grad, da, db, ints, ...) \
  AG_OPT_IF(CONF_HAS_API_##api)({#name, op_table_binary, CONF_BDT_##kind(ints), 0, AG_B_##ID}, )
#define CONF_GROW_U(ID, name, api, f, save, ...) \
  AG_OPT_IF(CONF_HAS_API_##api)(AG_OPT_IF(AG_OPT_HAS_BWD_##save)({"grad_" #name, op_grad, M_G, 0, 0}, ))
#define CONF_GROW_B(ID, name, api, f, kind, grad, ...) \
  AG_OPT_IF(CONF_HAS_API_##api)(AG_OPT_IF(AG_OPT_PART_##grad)({"grad_" #name, op_grad, M_G, 0, 0}, ))

static const opdef OPS[] = {
    AG_BINARY_OPS(CONF_BROW)
    AG_UNARY_OPS(CONF_UROW)
    {"pow_exponents", op_pow_exponents, M_F, 0, 0},
    {"add_scalar", op_add_scalar, M_F, 0, 0},
    {"sub_scalar", op_sub_scalar, M_F, 0, 0},
    {"rsub_scalar", op_rsub_scalar, M_F, 0, 0},
    {"mul_scalar", op_mul_scalar, M_F, 0, 0},
    {"div_scalar", op_div_scalar, M_F, 0, 0},
    {"where", op_where, M_EVERY, 0, 0},
    {"masked_fill", op_masked_fill, M_F, M_IN | M_B, 0},
    {"sum", op_sum, M_F, M_IN | M_B, 0},
    {"mean", op_mean, M_F, 0, 0},
    {"max", op_max, M_EVERY, 0, 0},
    {"min", op_min, M_EVERY, 0, 0},
    {"argmax", op_argmax, M_F, M_IN | M_B, 0},
    {"matmul", op_matmul, M_F, 0, 0},
    {"softmax", op_softmax, M_F, 0, 0},
    {"log_softmax", op_log_softmax, M_F, 0, 0},
    {"cross_entropy", op_cross_entropy, M_F, 0, 0},
    {"mse_loss", op_mse_loss, M_F, 0, 0},
    {"layer_norm", op_layer_norm, M_F, 0, 0},
    {"rms_norm", op_rms_norm, M_F, 0, 0},
    {"var", op_var, M_F, 0, 0},
    {"std", op_std, M_F, 0, 0},
    {"cumsum", op_cumsum, M_F, 0, 0},
    {"gather", op_gather, M_F, 0, 0},
    {"index_select", op_index_select, M_F, 0, 0},
    {"topk", op_topk, M_F, 0, 0},
    {"embedding", op_embedding, M_F, 0, 0},
    {"concat", op_concat, M_EVERY, 0, 0},
    {"dropout", op_dropout, M_F, 0, 0},
    {"full", op_full, M_EVERY, 0, 0},
    {"arange", op_arange, M_F | M_IN, 0, 0},
    {"rand", op_rand, M_F, 0, 0},
    {"randn", op_randn, M_F, 0, 0},
    {"cast", op_cast, M_EVERY, 0, 0},
    {"contiguous", op_contiguous, M_EVERY, 0, 0},
    {"copy", op_copy, M_EVERY, 0, 0},
    {"to_device", op_to_device, M_EVERY, 0, 0},
    AG_UNARY_OPS(CONF_GROW_U)
    AG_BINARY_OPS(CONF_GROW_B)
    {"grad_add", op_grad, M_G, 0, 0},
    {"grad_sub", op_grad, M_G, 0, 0},
    {"grad_mul", op_grad, M_G, 0, 0},
    {"grad_div", op_grad, M_G, 0, 0},
    {"grad_scalar_ops", op_grad, M_G, 0, 0},
    {"grad_where", op_grad, M_G, 0, 0},
    {"grad_sum", op_grad, M_G, 0, 0},
    {"grad_mean", op_grad, M_G, 0, 0},
    {"grad_matmul", op_grad, M_G, 0, 0},
    {"grad_softmax", op_grad, M_G, 0, 0},
    {"grad_log_softmax", op_grad, M_G, 0, 0},
    {"grad_cross_entropy", op_grad, M_G, 0, 0},
    {"grad_mse_loss", op_grad, M_G, 0, 0},
    {"grad_layer_norm", op_grad, M_G, 0, 0},
    {"grad_rms_norm", op_grad, M_G, 0, 0},
    {"grad_rms_norm_no_weight", op_grad, M_G, 0, 0},
    {"grad_var", op_grad, M_G, 0, 0},
    {"grad_std", op_grad, M_G, 0, 0},
    {"grad_cumsum", op_grad, M_G, 0, 0},
    {"grad_gather", op_grad, M_G, 0, 0},
    {"grad_index_select", op_grad, M_G, 0, 0},
    {"grad_embedding", op_grad, M_G, 0, 0},
    {"grad_concat", op_grad, M_G, 0, 0},
    {"grad_views", op_grad, M_G, 0, 0},
    {"grad_reshape", op_grad, M_G, 0, 0},
    {"grad_conv2d", op_grad, M_G, 0, 0},
    {"grad_avg_pool2d", op_grad, M_G, 0, 0},
    {"grad_adaptive_pool", op_grad, M_G, 0, 0},
    {"grad_batch_norm", op_grad, M_G, 0, 0},
};

#define N_OPS ((int)(sizeof OPS / sizeof OPS[0]))

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

ag_conf_result ag_conf_run_acc(int op, ag_dtype dt, ag_device d, uint64_t seed, FILE *log, char *msg,
                               size_t msg_len, ag_conf_acc *acc) {
  if (msg && msg_len) msg[0] = 0;
  if (op < 0 || op >= N_OPS || (unsigned)dt >= AG_DTYPE_COUNT) {
    if (msg) snprintf(msg, msg_len, "unknown op or dtype");
    return AG_CONF_FAIL;
  }
  const opdef *od = &OPS[op];
  unsigned bit = 1u << dt;
  if (!((od->required | od->optional) & bit)) return AG_CONF_NA;
  ctx c = {.dev = d, .dt = dt, .seed = seed, .opname = od->name, .optional = (od->optional & bit) != 0, .arg = od->arg,
           .log = log, .res = AG_CONF_PASS, .acc = acc};
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
