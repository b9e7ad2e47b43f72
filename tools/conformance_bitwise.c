/* Bit-for-bit comparison of conformance runs (`anygrad check --numerics
 * portable --bitwise`): the capture of every read-back of a row, and the
 * element and capture comparisons under docs/numerics.md's rule (NaN equals
 * NaN whatever its payload, every other value by its bits). */
#include "conformance_internal.h"

#include <inttypes.h>

void ag__conf_capture_push(ctx *c, const ag_tensor *t, const void *bytes) {
  ag_conf_capture *cap = c->cap;
  if (cap->oom) return;
  if (cap->n == cap->cap) {
    int ncap = cap->cap ? 2 * cap->cap : 16;
    ag_conf_buf *nb = realloc(cap->b, (size_t)ncap * sizeof *nb);
    if (!nb) {
      cap->oom = true;
      return;
    }
    cap->b = nb;
    cap->cap = ncap;
  }
  ag_conf_buf *b = &cap->b[cap->n];
  memset(b, 0, sizeof *b);
  b->dt = ag_tensor_dtype(t);
  b->ndim = ag_tensor_ndim(t);
  for (int i = 0; i < b->ndim && i < AG_MAX_DIMS; i++) b->shape[i] = ag_tensor_shape(t)[i];
  b->n = ag_tensor_numel(t);
  size_t bytes_n = (size_t)b->n * ag_dtype_size(b->dt);
  b->bytes = malloc(bytes_n ? bytes_n : 1);
  if (!b->bytes) {
    cap->oom = true;
    return;
  }
  memcpy(b->bytes, bytes, bytes_n);
  snprintf(b->what, sizeof b->what, "case '%s' read %d", c->cname ? c->cname : "?", c->nread++);
  cap->n++;
}

void ag_conf_capture_free(ag_conf_capture *cap) {
  if (!cap) return;
  for (int i = 0; i < cap->n; i++) free(cap->b[i].bytes);
  free(cap->b);
  memset(cap, 0, sizeof *cap);
}

/* The element's bits, widened, and whether it is a NaN. */
static uint64_t elem_bits(ag_dtype dt, const void *p, int64_t i, bool *nan) {
  const unsigned char *q = (const unsigned char *)p + (size_t)i * ag_dtype_size(dt);
  *nan = false;
  switch (dt) {
    case AG_F32: {
      uint32_t u;
      memcpy(&u, q, 4);
      *nan = (u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu);
      return u;
    }
    case AG_F64: {
      uint64_t u;
      memcpy(&u, q, 8);
      *nan = (u & 0x7ff0000000000000ull) == 0x7ff0000000000000ull && (u & 0x000fffffffffffffull);
      return u;
    }
    case AG_F16: {
      uint16_t u;
      memcpy(&u, q, 2);
      *nan = (u & 0x7c00u) == 0x7c00u && (u & 0x03ffu);
      return u;
    }
    case AG_BF16: {
      uint16_t u;
      memcpy(&u, q, 2);
      *nan = (u & 0x7f80u) == 0x7f80u && (u & 0x007fu);
      return u;
    }
    case AG_I32: {
      uint32_t u;
      memcpy(&u, q, 4);
      return u;
    }
    case AG_I64: {
      uint64_t u;
      memcpy(&u, q, 8);
      return u;
    }
    default: return *q; /* u8, bool */
  }
}

static double bits_value(ag_dtype dt, uint64_t u) {
  switch (dt) {
    case AG_F32: {
      uint32_t w = (uint32_t)u;
      float f;
      memcpy(&f, &w, 4);
      return f;
    }
    case AG_F64: {
      double d;
      memcpy(&d, &u, 8);
      return d;
    }
    case AG_F16: {
      double s = (u & 0x8000) ? -1.0 : 1.0;
      int ex = (int)((u >> 10) & 0x1f), m = (int)(u & 0x3ff);
      if (ex == 31) return m ? NAN : s * INFINITY;
      return ex == 0 ? s * ldexp(m, -24) : s * ldexp(1024 + m, ex - 25);
    }
    case AG_BF16: {
      uint32_t w = (uint32_t)u << 16;
      float f;
      memcpy(&f, &w, 4);
      return f;
    }
    case AG_I32: return (double)(int32_t)(uint32_t)u;
    case AG_I64: return (double)(int64_t)u;
    default: return (double)u;
  }
}

static int64_t key16(uint64_t b) { return (b & 0x8000) ? -(int64_t)(b & 0x7fff) : (int64_t)(b & 0x7fff); }

static int64_t distance(ag_dtype dt, uint64_t a, uint64_t b, bool an, bool bn) {
  if (an || bn) return an && bn ? 0 : INT64_MAX;
  switch (dt) {
    case AG_F32: return ag_ulp_distance_f32((float)bits_value(dt, a), (float)bits_value(dt, b));
    case AG_F64: return ag_ulp_distance_f64(bits_value(dt, a), bits_value(dt, b));
    case AG_F16:
    case AG_BF16: {
      int64_t d = key16(a) - key16(b);
      return d < 0 ? -d : d;
    }
    case AG_I64: {
      int64_t x = (int64_t)a, y = (int64_t)b;
      uint64_t d = x >= y ? (uint64_t)x - (uint64_t)y : (uint64_t)y - (uint64_t)x;
      return d > (uint64_t)(INT64_MAX - 1) ? INT64_MAX - 1 : (int64_t)d;
    }
    default: {
      double d = bits_value(dt, a) - bits_value(dt, b);
      return (int64_t)(d < 0 ? -d : d);
    }
  }
}

bool ag_conf_bits_same(ag_dtype dt, const void *a, const void *b, int64_t i) {
  bool an, bn;
  uint64_t x = elem_bits(dt, a, i, &an), y = elem_bits(dt, b, i, &bn);
  return an || bn ? an && bn : x == y;
}

int64_t ag_conf_bits_compare(ag_dtype dt, const void *a, const void *b, int64_t n, ag_conf_bitdiff *first) {
  int64_t nd = 0;
  for (int64_t i = 0; i < n; i++) {
    bool an, bn;
    uint64_t x = elem_bits(dt, a, i, &an), y = elem_bits(dt, b, i, &bn);
    if (an || bn ? an && bn : x == y) continue;
    if (!nd++ && first)
      *first = (ag_conf_bitdiff){.dt = dt, .index = i, .a_bits = x, .b_bits = y, .a = bits_value(dt, x), .b = bits_value(dt, y),
                                 .ulps = distance(dt, x, y, an, bn)};
  }
  return nd;
}

const char *ag_conf_bitdiff_str(ag_dtype dt, const ag_conf_bitdiff *d, char *buf, size_t len) {
  int hexw = (int)ag_dtype_size(dt) * 2;
  int prec = dt == AG_F64 ? 17 : dt == AG_F32 ? 9 : dt == AG_F16 || dt == AG_BF16 ? 5 : 20;
  const char *unit = ag_dtype_is_float(dt) ? " ULP" : "";
  char dist[48];
  if (d->ulps == INT64_MAX) snprintf(dist, sizeof dist, "NaN against a number");
  else if (d->ulps == 0) snprintf(dist, sizeof dist, "0%s (signed zeros)", unit);
  else snprintf(dist, sizeof dist, "%" PRId64 "%s", d->ulps, unit);
  snprintf(buf, len, "element %" PRId64 ": 0x%0*" PRIx64 " (%.*g) vs 0x%0*" PRIx64 " (%.*g), %s", d->index, hexw,
           d->a_bits, prec, d->a, hexw, d->b_bits, prec, d->b, dist);
  return buf;
}

static void shape_str(const ag_conf_buf *b, char *s, size_t len) {
  size_t p = (size_t)snprintf(s, len, "%s[", ag_dtype_name(b->dt));
  for (int i = 0; i < b->ndim && p < len; i++)
    p += (size_t)snprintf(s + p, len - p, "%s%" PRId64, i ? "," : "", b->shape[i]);
  if (p < len) snprintf(s + p, len - p, "]");
}

int64_t ag_conf_capture_compare(const ag_conf_capture *a, const ag_conf_capture *b, char *why, size_t len,
                                ag_conf_bitdiff *first) {
  int64_t total = 0;
  if (why && len) why[0] = 0;
  if (first) *first = (ag_conf_bitdiff){.index = -1};
  ag_conf_bitdiff sd = {.index = -1};
  int n = a->n > b->n ? a->n : b->n;
  for (int i = 0; i < n; i++) {
    const ag_conf_buf *x = i < a->n ? &a->b[i] : NULL, *y = i < b->n ? &b->b[i] : NULL;
    char sx[96] = "nothing", sy[96] = "nothing";
    if (x) shape_str(x, sx, sizeof sx);
    if (y) shape_str(y, sy, sizeof sy);
    bool same_shape = x && y && x->dt == y->dt && x->ndim == y->ndim && x->n == y->n &&
                      !memcmp(x->shape, y->shape, (size_t)x->ndim * sizeof x->shape[0]);
    if (!same_shape) {
      if (!total) {
        if (why) snprintf(why, len, "%s: %s against %s", x ? x->what : y->what, sx, sy);
        sd.dt = x ? x->dt : y->dt;
        sd.buffer = i;
        if (first) *first = sd;
      }
      total++;
      continue;
    }
    ag_conf_bitdiff d;
    int64_t nd = ag_conf_bits_compare(x->dt, x->bytes, y->bytes, x->n, &d);
    if (nd && !total) {
      char ds[192];
      if (why)
        snprintf(why, len, "%s %s, %" PRId64 " of %" PRId64 " elements differ; first %s", x->what, sx, nd, x->n,
                 ag_conf_bitdiff_str(x->dt, &d, ds, sizeof ds));
      d.buffer = i;
      if (first) *first = d;
    }
    total += nd;
  }
  if ((a->oom || b->oom) && !total) {
    if (why) snprintf(why, len, "out of host memory while keeping the results");
    total = 1;
  }
  return total;
}
