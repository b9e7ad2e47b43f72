/* ag_tensor_format / ag_print: a tensor's values as text, laid out as
 * torch 1.13's str(tensor) (torch/_tensor_str.py with its default print
 * options: precision 4, threshold 1000, edgeitems 3, linewidth 80). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "anygrad/autograd.h"
#include "anygrad/backend.h"
#include "anygrad/tensor.h"
#include "tensor_internal.h"

enum { PRECISION = 4, THRESHOLD = 1000, EDGE = 3, LINEWIDTH = 80 };

/* ---- a growing string ---- */

typedef struct sbuf {
  char *p;
  size_t len, cap;
  bool oom;
} sbuf;

static void sb_putn(sbuf *b, const char *s, size_t n) {
  if (b->oom) return;
  if (b->len + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + n + 1) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) {
      b->oom = true;
      return;
    }
    b->p = p;
    b->cap = cap;
  }
  memcpy(b->p + b->len, s, n);
  b->len += n;
  b->p[b->len] = 0;
}
static void sb_puts(sbuf *b, const char *s) { sb_putn(b, s, strlen(s)); }
static void sb_spaces(sbuf *b, int n) {
  for (int i = 0; i < n; i++) sb_putn(b, " ", 1);
}

/* ---- the values on the host ---- */

typedef struct vals {
  bool is_float, is_bool;
  double *f; /* floating dtypes, as double (f16/bf16 exactly) */
  int64_t *i; /* integer dtypes and bool */
} vals;

/* Every element of t, row-major, one host sync. */
static ag_status read_values(const ag_tensor *t, int64_t n, vals *v) {
  ag_dtype dt = ag_tensor_dtype(t);
  size_t es = ag_dtype_size(dt);
  void *raw = malloc(n ? (size_t)n * es : 1);
  v->is_float = ag_dtype_is_float(dt);
  v->is_bool = dt == AG_BOOL;
  if (v->is_float) v->f = malloc(n ? (size_t)n * sizeof(double) : 1);
  else v->i = malloc(n ? (size_t)n * sizeof(int64_t) : 1);
  if (!raw || (v->is_float ? !v->f : !v->i)) {
    free(raw);
    return ag_error_set(AG_ERR_OOM, "ag_tensor_format: no host memory for %lld elements", (long long)n);
  }
  ag_status st = ag_to_host(t, raw, (size_t)n * es);
  if (st != AG_OK) {
    free(raw);
    return st;
  }
  for (int64_t k = 0; k < n; k++) {
    switch (dt) {
    case AG_F32: v->f[k] = ((const float *)raw)[k]; break;
    case AG_F64: v->f[k] = ((const double *)raw)[k]; break;
    case AG_F16: v->f[k] = ag_f16_to_f32(((const uint16_t *)raw)[k]); break;
    case AG_BF16: v->f[k] = ag_bf16_to_f32(((const uint16_t *)raw)[k]); break;
    case AG_I32: v->i[k] = ((const int32_t *)raw)[k]; break;
    case AG_I64: v->i[k] = ((const int64_t *)raw)[k]; break;
    case AG_U8: v->i[k] = ((const uint8_t *)raw)[k]; break;
    case AG_BOOL: v->i[k] = ((const uint8_t *)raw)[k] != 0; break;
    default: break;
    }
  }
  free(raw);
  return AG_OK;
}

/* ---- the formatter (torch's _Formatter) ---- */

typedef struct fmt {
  bool is_float, is_bool, int_mode, sci_mode;
  int max_width;
} fmt;

/* Python's '{}' / '{:.Nf}' / '{:.Ne}' of one value (nan and inf as Python
 * spells them, whatever the sign of the NaN). */
static int value_str(const fmt *f, const vals *v, int64_t k, char *out, size_t len) {
  if (!f->is_float) {
    if (f->is_bool) return snprintf(out, len, "%s", v->i[k] ? "True" : "False");
    return snprintf(out, len, "%lld", (long long)v->i[k]);
  }
  double x = v->f[k];
  if (isnan(x)) return snprintf(out, len, "nan");
  if (isinf(x)) return snprintf(out, len, "%s", x < 0 ? "-inf" : "inf");
  if (f->sci_mode) return snprintf(out, len, "%.*e", PRECISION, x);
  if (f->int_mode) return snprintf(out, len, "%.0f.", x);
  return snprintf(out, len, "%.*f", PRECISION, x);
}

/* Flat indices of the elements the formatter looks at: all of them, or the
 * summarised ones (torch's get_summarized_data) when summarising. */
static void collect(const int64_t *shape, int ndim, int64_t base, bool summarize, int64_t *out,
                    int64_t *n_out) {
  if (ndim == 0) {
    out[(*n_out)++] = base;
    return;
  }
  int64_t inner = 1;
  for (int d = 1; d < ndim; d++) inner *= shape[d];
  int64_t s0 = shape[0];
  for (int64_t i = 0; i < s0; i++) {
    if (summarize && s0 > 2 * EDGE && i == EDGE) i = s0 - EDGE;
    collect(shape + 1, ndim - 1, base + i * inner, summarize, out, n_out);
  }
}

static void fmt_init(fmt *f, const vals *v, const int64_t *idx, int64_t n) {
  f->is_float = v->is_float;
  f->is_bool = v->is_bool;
  f->int_mode = true;
  f->sci_mode = false;
  f->max_width = 1;
  char s[64];
  if (!f->is_float) {
    for (int64_t k = 0; k < n; k++) {
      int w = value_str(f, v, idx[k], s, sizeof s);
      if (w > f->max_width) f->max_width = w;
    }
    return;
  }
  double mn = INFINITY, mx = 0;
  int64_t nz = 0;
  for (int64_t k = 0; k < n; k++) {
    double x = v->f[idx[k]];
    if (!isfinite(x) || x == 0) continue;
    nz++;
    double a = fabs(x);
    if (a < mn) mn = a;
    if (a > mx) mx = a;
    if (x != ceil(x)) f->int_mode = false;
  }
  if (!nz) return;
  if (f->int_mode) f->sci_mode = mx / mn > 1000. || mx > 1.e8;
  else f->sci_mode = mx / mn > 1000. || mx > 1.e8 || mn < 1.e-4;
  for (int64_t k = 0; k < n; k++) {
    double x = v->f[idx[k]];
    if (!isfinite(x) || x == 0) continue;
    int w = value_str(f, v, idx[k], s, sizeof s); /* int mode: "%.0f." is the +1 */
    if (w > f->max_width) f->max_width = w;
  }
}

static void put_value(sbuf *b, const fmt *f, const vals *v, int64_t k) {
  char s[64];
  int w = value_str(f, v, k, s, sizeof s);
  sb_spaces(b, f->max_width - w);
  sb_puts(b, s);
}

/* torch's _tensor_str_with_formatter (summarize: edge items only). */
static void put_tensor(sbuf *b, const fmt *f, const vals *v, const int64_t *shape, int ndim, int64_t base,
                       int indent, bool summarize) {
  if (ndim == 0) {
    put_value(b, f, v, base);
    return;
  }
  int64_t s0 = shape[0];
  bool cut = summarize && s0 > 2 * EDGE;
  if (ndim == 1) {
    int per_line = (LINEWIDTH - indent) / (f->max_width + 2);
    if (per_line < 1) per_line = 1;
    sb_puts(b, "[");
    int64_t cnt = 0; /* items so far, " ..." counting as one */
    for (int64_t i = 0; i < s0; i++) {
      for (int dots = cut && i == EDGE; dots >= 0; dots--) {
        if (cnt > 0) {
          if (cnt % per_line == 0) {
            sb_puts(b, ",\n");
            sb_spaces(b, indent + 1);
          } else {
            sb_puts(b, ", ");
          }
        }
        cnt++;
        if (dots) sb_puts(b, " ...");
        else put_value(b, f, v, base + i);
        if (dots) i = s0 - EDGE;
      }
    }
    sb_puts(b, "]");
    return;
  }
  int64_t inner = 1;
  for (int d = 1; d < ndim; d++) inner *= shape[d];
  sb_puts(b, "[");
  for (int64_t i = 0; i < s0; i++) {
    if (i > 0) {
      sb_puts(b, ",");
      for (int d = 0; d < ndim - 1; d++) sb_puts(b, "\n");
      sb_spaces(b, indent + 1);
    }
    if (cut && i == EDGE) {
      sb_puts(b, "...,");
      for (int d = 0; d < ndim - 1; d++) sb_puts(b, "\n");
      sb_spaces(b, indent + 1);
      i = s0 - EDGE;
    }
    put_tensor(b, f, v, shape + 1, ndim - 1, base + i * inner, indent + 1, summarize);
  }
  sb_puts(b, "]");
}

/* torch's _add_suffixes, including how it counts the last line. */
static void add_suffix(sbuf *b, const char *suffix, int indent, int64_t *last_line_len) {
  int64_t n = (int64_t)strlen(suffix);
  if (*last_line_len + n + 2 > LINEWIDTH) {
    sb_puts(b, ",\n");
    sb_spaces(b, indent);
    *last_line_len = indent + n;
  } else {
    sb_puts(b, ", ");
    *last_line_len += n + 2;
  }
  sb_puts(b, suffix);
}

static const char *torch_dtype_name(ag_dtype dt) {
  switch (dt) {
  case AG_F32: return "float32";
  case AG_F16: return "float16";
  case AG_BF16: return "bfloat16";
  case AG_F64: return "float64";
  case AG_I32: return "int32";
  case AG_I64: return "int64";
  case AG_BOOL: return "bool";
  case AG_U8: return "uint8";
  default: return "?";
  }
}

/* The whole text into a new malloc'd string; NULL with the error set. */
static char *format_alloc(const ag_tensor *t, size_t *out_len) {
  if (ag__bad_tensor(t, "ag_tensor_format")) return NULL;
  const int ndim = ag_tensor_ndim(t);
  const int64_t *shape = ag_tensor_shape(t);
  const int64_t n = ag_tensor_numel(t);
  const ag_dtype dt = ag_tensor_dtype(t);
  const int indent = 7; /* strlen("tensor(") */
  sbuf b = {0};
  vals v = {0};
  int64_t *idx = NULL;
  char suffix[96];
  sb_puts(&b, "tensor(");
  if (n == 0) {
    sb_puts(&b, "[]");
  } else {
    if (read_values(t, n, &v) != AG_OK) goto fail;
    bool summarize = n > THRESHOLD;
    idx = malloc((size_t)n * sizeof *idx);
    if (!idx) {
      ag_error_set(AG_ERR_OOM, "ag_tensor_format: no host memory for %lld elements", (long long)n);
      goto fail;
    }
    int64_t m = 0;
    collect(shape, ndim, 0, summarize, idx, &m);
    fmt f;
    fmt_init(&f, &v, idx, m);
    put_tensor(&b, &f, &v, shape, ndim, 0, indent, summarize);
  }
  const char *nl = b.p ? strrchr(b.p, '\n') : NULL;
  int64_t last_line_len = b.p ? (int64_t)b.len - (nl ? (int64_t)(nl - b.p) : -1) + 1 : 0;
  ag_device d = ag_tensor_device(t);
  if (d.backend != AG_CPU.backend) {
    char ds[48];
    snprintf(suffix, sizeof suffix, "device='%s'", ag_device_str(d, ds, sizeof ds));
    add_suffix(&b, suffix, indent, &last_line_len);
  }
  if (n == 0) {
    if (ndim != 1) {
      int k = snprintf(suffix, sizeof suffix, "size=(");
      for (int i = 0; i < ndim && k < (int)sizeof suffix; i++)
        k += snprintf(suffix + k, sizeof suffix - (size_t)k, i ? ", %lld" : "%lld", (long long)shape[i]);
      if (k < (int)sizeof suffix) snprintf(suffix + k, sizeof suffix - (size_t)k, ndim == 1 ? ",)" : ")");
      add_suffix(&b, suffix, indent, &last_line_len);
    }
    if (dt != AG_F32) {
      snprintf(suffix, sizeof suffix, "dtype=%s", torch_dtype_name(dt));
      add_suffix(&b, suffix, indent, &last_line_len);
    }
  } else if (dt != AG_F32 && dt != AG_I64 && dt != AG_BOOL) {
    snprintf(suffix, sizeof suffix, "dtype=%s", torch_dtype_name(dt));
    add_suffix(&b, suffix, indent, &last_line_len);
  }
  if (ag_tensor_requires_grad(t)) add_suffix(&b, "requires_grad=True", indent, &last_line_len);
  sb_puts(&b, ")");
  if (b.oom) {
    ag_error_set(AG_ERR_OOM, "ag_tensor_format: no host memory for the text of %lld elements", (long long)n);
    goto fail;
  }
  free(v.f);
  free(v.i);
  free(idx);
  *out_len = b.len;
  return b.p;
fail:
  free(v.f);
  free(v.i);
  free(idx);
  free(b.p);
  return NULL;
}

int64_t ag_tensor_format(const ag_tensor *t, char *buf, size_t size) {
  if (!buf && size) {
    ag_error_set(AG_ERR_INVALID, "ag_tensor_format: NULL buf with size %zu", size);
    return -1;
  }
  size_t len = 0;
  char *s = format_alloc(t, &len);
  if (!s) return -1;
  if (size) {
    size_t k = len < size - 1 ? len : size - 1;
    memcpy(buf, s, k);
    buf[k] = 0;
  }
  free(s);
  return (int64_t)len;
}

char *ag_tensor_format_alloc(const ag_tensor *t) {
  size_t len = 0;
  return format_alloc(t, &len);
}

ag_status ag_fprint(FILE *f, const ag_tensor *t) {
  if (!f) return ag_error_set(AG_ERR_INVALID, "ag_fprint: NULL FILE");
  size_t len = 0;
  char *s = format_alloc(t, &len);
  if (!s) return ag_last_status();
  int ok = fputs(s, f) >= 0 && fputc('\n', f) != EOF;
  free(s);
  if (!ok) return ag_error_set(AG_ERR_IO, "ag_fprint: write failed");
  return AG_OK;
}

ag_status ag_print(const ag_tensor *t) { return ag_fprint(stdout, t); }
