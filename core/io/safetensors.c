/* safetensors reader and writer: a strict parser for the small JSON subset
 * the format uses, validation of every byte range before any tensor is
 * created, and atomic saves (temp file, fsync, rename, directory fsync).
 * The reader keeps the file open and reads with pread: opening costs the
 * header, and each tensor is read in chunks through a bounce buffer to its
 * device (peak memory about the largest tensor, not the file). A file
 * truncated or rewritten while it is open is an error (AG_ERR_CORRUPT) on
 * the next read, never a SIGBUS as a mapping would give.
 * Every dtype of the format is read; one anygrad cannot hold is named in the
 * error of ag_safetensors_get and converted by ag_safetensors_get_as.
 * Hosts are assumed little-endian, as the format's data is. */
#define _GNU_SOURCE /* mremap */
#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <libgen.h>
#include <signal.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "anygrad/autograd.h"
#include "anygrad/checks.h"
#include "anygrad/serialize.h"
#include "runtime/devstate.h"
#include "io/files.h"
#include "tensor/tensor_internal.h"

#define MAX_HEADER (100u << 20)

/* The format's dtypes: name, element size, and the anygrad dtype that holds
 * it as-is (-1: none; ag_safetensors_get_as converts the integer ones). */
typedef enum st_kind { K_FLOAT, K_SINT, K_UINT, K_BOOL, K_F8 } st_kind;
static const struct {
  const char *s;
  unsigned len; /* strlen(s) */
  unsigned size;
  int ag;
  st_kind kind;
} k_fdt[] = {
#define FDT(s, size, ag, kind) {s, sizeof(s) - 1, size, ag, kind}
    FDT("F64", 8, AG_F64, K_FLOAT),  FDT("F32", 4, AG_F32, K_FLOAT),  FDT("F16", 2, AG_F16, K_FLOAT),
    FDT("BF16", 2, AG_BF16, K_FLOAT), FDT("I64", 8, AG_I64, K_SINT),   FDT("I32", 4, AG_I32, K_SINT),
    FDT("I16", 2, -1, K_SINT),        FDT("I8", 1, -1, K_SINT),         FDT("U64", 8, -1, K_UINT),
    FDT("U32", 4, -1, K_UINT),        FDT("U16", 2, -1, K_UINT),        FDT("U8", 1, AG_U8, K_UINT),
    FDT("BOOL", 1, AG_BOOL, K_BOOL),  FDT("F8_E4M3", 1, -1, K_F8),      FDT("F8_E5M2", 1, -1, K_F8),
#undef FDT
};
#define N_FDT ((int)(sizeof k_fdt / sizeof *k_fdt))

/* One tensor of the header, 24 bytes (a header of a million names keeps
 * its table small): the name and the shape live in arenas of the file, the
 * end of the data is begin + the shape's byte size (checked at parse). */
typedef struct st_entry {
  uint64_t begin; /* data_offsets[0], from the start of the data section */
  uint32_t name;  /* offset of the NUL-terminated name in f->names */
  uint32_t shape; /* offset of the ndim dimensions in f->shapes */
  uint8_t fdt;    /* index in k_fdt */
  uint8_t ndim;
} st_entry;

struct ag_safetensors {
  char *path;
  int fd;                    /* open for the reads of get and load_into */
  uint64_t file_size;        /* as validated at open */
  struct timespec mtime;     /* ditto: a rewrite in place is seen */
  char *names;               /* the tensor names, back to back (e[i].name are offsets here):
                                the header's buffer, compacted in place and cut to size */
  size_t names_map;          /* bytes mapped at names (0: none) */
  int64_t *shapes;           /* every tensor's dimensions, back to back */
  size_t n_shapes, shapes_map; /* used, bytes mapped */
  uint64_t data_off;         /* file offset of the data section */
  uint64_t data_size;
  int n;
  st_entry *e;               /* in its own mapping of e_map bytes */
  size_t e_map;
  uint32_t *index;           /* open-addressing hash of names (index_map bytes), 0 empty, else: */
  size_t index_map;
  size_t index_mask;         /* slots - 1 (a power of two, at least 1.5n) */
  unsigned index_shift;      /* entry + 1 in the low index_shift bits, hash bits above */
  int n_meta;
  char **meta_k, **meta_v;
};

static const struct { const char *s; ag_dtype dt; } k_dtypes[] = {
    {"F32", AG_F32}, {"F16", AG_F16}, {"BF16", AG_BF16}, {"I32", AG_I32}, {"F64", AG_F64},
    {"I64", AG_I64}, {"BOOL", AG_BOOL}, {"U8", AG_U8}};

static const char *dtype_str(ag_dtype dt) {
  for (size_t i = 0; i < sizeof k_dtypes / sizeof *k_dtypes; i++)
    if (k_dtypes[i].dt == dt) return k_dtypes[i].s;
  return NULL;
}

/* ---------------- writing ---------------- */

typedef struct sbuf {
  char *p;
  size_t n, cap;
  bool oom;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n) {
  if (b->oom) return;
  if (b->n + n + 1 > b->cap) {
    size_t nc = (b->cap ? b->cap * 2 : 1024) + n;
    char *np = realloc(b->p, nc);
    if (!np) {
      b->oom = true;
      return;
    }
    b->p = np;
    b->cap = nc;
  }
  memcpy(b->p + b->n, s, n);
  b->n += n;
  b->p[b->n] = 0;
}

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...) {
  char tmp[256];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  sb_put(b, tmp, (size_t)(n < (int)sizeof tmp ? n : (int)sizeof tmp - 1));
}

/* JSON string; false for characters the format's keys should never hold. */
static bool sb_str(sbuf *b, const char *s) {
  sb_put(b, "\"", 1);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c < 0x20) return false;
    if (c == '"' || c == '\\') sb_put(b, "\\", 1);
    sb_put(b, s, 1);
  }
  sb_put(b, "\"", 1);
  return true;
}

static bool write_all(int fd, const void *p, size_t n) {
  const char *c = p;
  while (n) {
    ssize_t w = write(fd, c, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    c += w;
    n -= (size_t)w;
  }
  return true;
}

ag_status ag_safetensors_save(const char *path, const ag_param_list *l, int n_meta,
                              const char *const *meta_keys, const char *const *meta_values) {
  if (!path || !l || (n_meta > 0 && (!meta_keys || !meta_values)))
    return ag_error_set(AG_ERR_INVALID, "ag_safetensors_save: NULL argument");
  for (int i = 0; i < l->count; i++) {
    if (!l->names[i][0] || !strcmp(l->names[i], "__metadata__"))
      return ag_error_set(AG_ERR_INVALID, "ag_safetensors_save: invalid tensor name '%s'", l->names[i]);
    for (int j = 0; j < i; j++)
      if (!strcmp(l->names[i], l->names[j]))
        return ag_error_set(AG_ERR_INVALID, "ag_safetensors_save: duplicate tensor name '%s'", l->names[i]);
  }
  sbuf h = {0};
  bool ok = true;
  sb_put(&h, "{", 1);
  if (n_meta > 0) {
    sb_put(&h, "\"__metadata__\":{", 16);
    for (int i = 0; i < n_meta; i++) {
      if (i) sb_put(&h, ",", 1);
      ok = ok && sb_str(&h, meta_keys[i]);
      sb_put(&h, ":", 1);
      ok = ok && sb_str(&h, meta_values[i]);
    }
    sb_put(&h, "}", 1);
  }
  uint64_t off = 0;
  for (int i = 0; i < l->count; i++) {
    ag_tensor *t = l->tensors[i];
    uint64_t bytes = (uint64_t)t->numel * ag_dtype_size(t->dtype);
    if (n_meta > 0 || i) sb_put(&h, ",", 1);
    ok = ok && sb_str(&h, l->names[i]);
    sb_printf(&h, ":{\"dtype\":\"%s\",\"shape\":[", dtype_str(t->dtype));
    for (int d = 0; d < t->ndim; d++) sb_printf(&h, d ? ",%lld" : "%lld", (long long)t->shape[d]);
    sb_printf(&h, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off,
              (unsigned long long)(off + bytes));
    off += bytes;
  }
  sb_put(&h, "}", 1);
  while (h.n % 8) sb_put(&h, " ", 1); /* keeps the data section 8-byte aligned */
  if (h.oom) {
    free(h.p);
    return ag_error_set(AG_ERR_OOM, "ag_safetensors_save: out of host memory");
  }
  if (!ok) {
    free(h.p);
    return ag_error_set(AG_ERR_INVALID, "ag_safetensors_save: a name or metadata string holds a control character");
  }

  size_t plen = strlen(path) + 48;
  char *tmp = malloc(plen);
  if (!tmp) {
    free(h.p);
    return ag_error_set(AG_ERR_OOM, "ag_safetensors_save: out of host memory");
  }
  ag_status st = ag__output_target_ok(path, "checkpoint");
  if (st != AG_OK) goto out;
  ag__temp_remove_stale(path);
  int fd = ag__temp_create(path, tmp, plen);
  if (fd < 0) {
    st = ag_error_set(AG_ERR_IO, "ag_safetensors_save: cannot create %s: %s", tmp, strerror(errno));
    goto out;
  }
  unsigned char len8[8];
  for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)h.n >> (8 * i));
  if (!write_all(fd, len8, 8) || !write_all(fd, h.p, h.n))
    st = ag_error_set(AG_ERR_IO, "ag_safetensors_save: write %s: %s", tmp, strerror(errno));
  for (int i = 0; st == AG_OK && i < l->count; i++) {
    ag_tensor *t = l->tensors[i];
    size_t bytes = (size_t)t->numel * ag_dtype_size(t->dtype);
    if (!bytes) continue;
    void *buf = malloc(bytes);
    if (!buf) {
      st = ag_error_set(AG_ERR_OOM, "ag_safetensors_save: out of host memory for '%s'", l->names[i]);
      break;
    }
    st = ag_to_host(t, buf, bytes);
    if (st == AG_OK && !write_all(fd, buf, bytes))
      st = ag_error_set(AG_ERR_IO, "ag_safetensors_save: write %s: %s", tmp, strerror(errno));
    free(buf);
  }
  if (st == AG_OK && fsync(fd) != 0)
    st = ag_error_set(AG_ERR_IO, "ag_safetensors_save: fsync %s: %s", tmp, strerror(errno));
  if (close(fd) != 0 && st == AG_OK)
    st = ag_error_set(AG_ERR_IO, "ag_safetensors_save: close %s: %s", tmp, strerror(errno));
  if (st == AG_OK && rename(tmp, path) != 0)
    st = ag_error_set(AG_ERR_IO, "ag_safetensors_save: rename %s -> %s: %s", tmp, path, strerror(errno));
  if (st != AG_OK) {
    unlink(tmp);
  } else {
    ag__dir_fsync(path); /* the rename is durable only once the directory entry is */
  }
out:
  free(tmp);
  free(h.p);
  return st;
}

/* ---------------- reading: a strict JSON subset ---------------- */

/* A name from a file (or a caller) as it may be printed: printable ASCII
 * kept, quote and backslash escaped, anything else as \xNN, long names cut
 * with "...". Returns buf. */
static const char *esc(const char *name, char *buf, size_t len) {
  static const char hex[] = "0123456789abcdef";
  size_t o = 0;
  for (const unsigned char *c = (const unsigned char *)name; *c; c++) {
    if (o + 8 >= len) {
      memcpy(buf + o, "...", 4);
      return buf;
    }
    if (*c == '\'' || *c == '\\') {
      buf[o++] = '\\';
      buf[o++] = (char)*c;
    } else if (*c >= 0x20 && *c < 0x7f) {
      buf[o++] = (char)*c;
    } else {
      buf[o++] = '\\';
      buf[o++] = 'x';
      buf[o++] = hex[*c >> 4];
      buf[o++] = hex[*c & 15];
    }
  }
  buf[o] = 0;
  return buf;
}
#define ESC(name, buf) esc((name), (buf), sizeof(buf))

static bool has_control(const char *s) {
  for (const unsigned char *c = (const unsigned char *)s; *c; c++)
    if (*c < 0x20 || *c == 0x7f) return true;
  return false;
}

typedef struct jp {
  const char *s, *end;
  const char *path;
  bool plain;    /* err is a whole message, not a JSON syntax error */
  char err[240];
} jp;

static void jfail(jp *p, const char *what) {
  if (!p->err[0])
    snprintf(p->err, sizeof p->err, "%s", what);
}

static inline void ws(jp *p) {
  while (p->s < p->end && (unsigned char)*p->s <= ' ' &&
         (*p->s == ' ' || *p->s == '\t' || *p->s == '\n' || *p->s == '\r'))
    p->s++;
}

static inline bool lit(jp *p, char c) {
  if (p->s < p->end && *p->s == c) { /* the common case: no white space */
    p->s++;
    return true;
  }
  ws(p);
  if (p->s < p->end && *p->s == c) {
    p->s++;
    return true;
  }
  return false;
}

/* A string into a new buffer (escapes \" \\ \/ \b \f \n \r \t \uXXXX for ASCII). */
static char *jstr(jp *p) {
  if (!lit(p, '"')) {
    jfail(p, "expected a string");
    return NULL;
  }
  /* The common case, a string without escapes: one scan, one copy. */
  const char *q = p->s;
  while (q < p->end && *q != '"' && *q != '\\' && (unsigned char)*q >= 0x20) q++;
  if (q < p->end && *q == '"') {
    size_t len = (size_t)(q - p->s);
    char *o = malloc(len + 1);
    if (!o) {
      jfail(p, "out of host memory");
      return NULL;
    }
    memcpy(o, p->s, len);
    o[len] = 0;
    p->s = q + 1;
    return o;
  }
  size_t cap = 32, n = 0;
  char *out = malloc(cap);
  while (out && p->s < p->end && *p->s != '"') {
    char c = *p->s++;
    if ((unsigned char)c < 0x20) {
      free(out);
      jfail(p, "control character in a string");
      return NULL;
    }
    if (c == '\\') {
      if (p->s >= p->end) break;
      char e = *p->s++;
      switch (e) {
        case '"': case '\\': case '/': c = e; break;
        case 'b': c = '\b'; break;
        case 'f': c = '\f'; break;
        case 'n': c = '\n'; break;
        case 'r': c = '\r'; break;
        case 't': c = '\t'; break;
        case 'u': {
          unsigned v = 0;
          for (int k = 0; k < 4; k++) {
            char h = p->s < p->end ? *p->s++ : 0;
            v <<= 4;
            if (h >= '0' && h <= '9') v |= (unsigned)(h - '0');
            else if (h >= 'a' && h <= 'f') v |= (unsigned)(h - 'a' + 10);
            else if (h >= 'A' && h <= 'F') v |= (unsigned)(h - 'A' + 10);
            else v = 0x10000;
          }
          if (v == 0 || v > 0x7f) {
            free(out);
            jfail(p, "unsupported \\u escape");
            return NULL;
          }
          c = (char)v;
          break;
        }
        default:
          free(out);
          jfail(p, "bad escape in a string");
          return NULL;
      }
    }
    if (n + 2 > cap) {
      char *no = realloc(out, cap *= 2);
      if (!no) {
        free(out);
        out = NULL;
        break;
      }
      out = no;
    }
    out[n++] = c;
  }
  if (!out) {
    jfail(p, "out of host memory");
    return NULL;
  }
  if (p->s >= p->end) {
    free(out);
    jfail(p, "unterminated string");
    return NULL;
  }
  p->s++;
  out[n] = 0;
  return out;
}

/* A short string (a field name, a dtype) into buf without allocating; one
 * longer than len - 1 is cut (it then matches no known name). False with
 * p->err set on a parse error. */
static bool jkey(jp *p, char *buf, size_t len) {
  ws(p);
  const char *q = p->s + 1;
  if (p->s < p->end && *p->s == '"') {
    while (q < p->end && *q != '"' && *q != '\\' && (unsigned char)*q >= 0x20 && (size_t)(q - p->s) < len) q++;
    if (q < p->end && *q == '"') {
      size_t n = (size_t)(q - p->s - 1);
      memcpy(buf, p->s + 1, n);
      buf[n] = 0;
      p->s = q + 1;
      return true;
    }
  }
  char *k = jstr(p);
  if (!k) return false;
  snprintf(buf, len, "%s", k);
  free(k);
  return true;
}

/* A string copied into arena at *used (decoded, NUL-terminated); NULL with
 * p->err set on a parse error. A decoded string and its NUL take no more
 * bytes than the string and its quotes did in the header, so the arena may
 * be the header's own buffer: arena + *used never passes the cursor, and
 * what is written lies behind it (hence memmove). */
static char *jname(jp *p, char *arena, size_t *used, bool *no_control) {
  ws(p);
  *no_control = false;
  if (p->s < p->end && *p->s == '"') {
    const char *q = p->s + 1;
    while (q < p->end && *q != '"' && *q != '\\' && (unsigned char)*q >= 0x20 && *q != 0x7f) q++;
    if (q < p->end && *q == '"') { /* nothing to decode, no control character */
      *no_control = true;
      size_t n = (size_t)(q - p->s - 1);
      char *o = arena + *used;
      memmove(o, p->s + 1, n);
      o[n] = 0;
      *used += n + 1;
      p->s = q + 1;
      return o;
    }
  }
  char *k = jstr(p); /* escapes, control characters, errors */
  if (!k) return NULL;
  size_t n = strlen(k);
  char *o = arena + *used;
  memcpy(o, k, n + 1);
  *used += n + 1;
  free(k);
  return o;
}

/* The exact token q (n bytes, quotes included) at the cursor: consumed. */
static inline bool lit_token(jp *p, const char *q, size_t n) {
  if ((size_t)(p->end - p->s) >= n && !memcmp(p->s, q, n)) {
    p->s += n;
    return true;
  }
  return false;
}

static bool juint(jp *p, uint64_t *out) {
  ws(p);
  const char *st = p->s;
  uint64_t v = 0;
  /* 19 digits cannot overflow; a longer number goes on with checks */
  const char *stop = p->end - p->s > 19 ? p->s + 19 : p->end;
  while (p->s < stop && (unsigned)(*p->s - '0') < 10) v = v * 10 + (uint64_t)(*p->s++ - '0');
  while (p->s < p->end && *p->s >= '0' && *p->s <= '9') {
    uint64_t d = (uint64_t)(*p->s++ - '0');
    if (v > UINT64_MAX / 10 || (v == UINT64_MAX / 10 && d > UINT64_MAX % 10)) {
      jfail(p, "integer overflow");
      return false;
    }
    v = v * 10 + d;
  }
  if (p->s == st) {
    jfail(p, "expected a non-negative integer");
    return false;
  }
  *out = v;
  return true;
}

/* [u, u, ...] into out (at most max entries). */
static int juint_array(jp *p, uint64_t *out, int max) {
  if (!lit(p, '[')) {
    jfail(p, "expected '['");
    return -1;
  }
  int n = 0;
  if (lit(p, ']')) return 0;
  do {
    uint64_t v;
    if (!juint(p, &v)) return -1;
    if (n == max) {
      jfail(p, "array too long");
      return -1;
    }
    out[n++] = v;
  } while (lit(p, ','));
  if (!lit(p, ']')) {
    jfail(p, "expected ']'");
    return -1;
  }
  return n;
}

static void st_free_contents(ag_safetensors *f) {
  if (f->names_map) munmap(f->names, f->names_map);
  if (f->shapes_map) munmap(f->shapes, f->shapes_map);
  for (int i = 0; i < f->n_meta; i++) {
    free(f->meta_k[i]);
    free(f->meta_v[i]);
  }
  if (f->e_map) munmap(f->e, f->e_map);
  free(f->meta_k);
  free(f->meta_v);
  if (f->index_map) munmap(f->index, f->index_map);
  if (f->fd >= 0) close(f->fd);
  free(f->path);
}

void ag_safetensors_close(ag_safetensors *f) {
  if (!f) return;
  st_free_contents(f);
  free(f);
}

static bool parse_meta(jp *p, ag_safetensors *f, int *meta_cap) {
  if (!lit(p, '{')) {
    jfail(p, "__metadata__ must be an object");
    return false;
  }
  if (lit(p, '}')) return true;
  do {
    char *k = jstr(p);
    if (!k) return false;
    if (!lit(p, ':')) {
      free(k);
      jfail(p, "expected ':'");
      return false;
    }
    char kb[96];
    if (has_control(k)) {
      snprintf(p->err, sizeof p->err, "metadata key '%s' has a control character", ESC(k, kb));
      free(k);
      return false;
    }
    char *v = jstr(p);
    if (!v) {
      free(k);
      return false;
    }
    if (f->n_meta == *meta_cap) { /* doubling: a header of many keys stays linear */
      int nc = *meta_cap ? *meta_cap * 2 : 8;
      char **nk = realloc(f->meta_k, (size_t)nc * sizeof *nk);
      if (nk) f->meta_k = nk;
      char **nv = nk ? realloc(f->meta_v, (size_t)nc * sizeof *nv) : NULL;
      if (nv) f->meta_v = nv;
      if (!nk || !nv) {
        free(k);
        free(v);
        jfail(p, "out of host memory");
        return false;
      }
      *meta_cap = nc;
    }
    f->meta_k[f->n_meta] = k;
    f->meta_v[f->n_meta++] = v;
  } while (lit(p, ','));
  if (!lit(p, '}')) {
    jfail(p, "expected '}' after metadata");
    return false;
  }
  return true;
}

/* Hugepages for a large buffer (fewer page faults where the kernel has
 * them; a hint, so its failure is ignored). */
static void advise_large(void *p, size_t n) {
#ifdef MADV_HUGEPAGE
  if (p && n >= (8u << 20)) madvise(p, n, MADV_HUGEPAGE);
#else
  (void)p;
  (void)n;
#endif
}

/* The arrays of a header (entries, shapes, index, names) live in their own
 * anonymous mappings: zero pages that cost nothing until touched, grown
 * without a copy (mremap), hugepages when large. *p and *bytes grow to hold at
 * least need bytes; false when out of memory (nothing changed). */
static bool map_grow(void **p, size_t *bytes, size_t need) {
  if (need <= *bytes) return true;
  size_t nb = *bytes ? *bytes : 4096;
  while (nb < need) {
    if (nb > SIZE_MAX / 2) return false;
    nb *= 2;
  }
#ifdef MREMAP_MAYMOVE
  void *q = *p ? mremap(*p, *bytes, nb, MREMAP_MAYMOVE)
               : mmap(NULL, nb, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (q == MAP_FAILED) return false;
#else /* without mremap: a new mapping and a copy */
  void *q = mmap(NULL, nb, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (q == MAP_FAILED) return false;
  if (*p) {
    memcpy(q, *p, *bytes);
    munmap(*p, *bytes);
  }
#endif
  advise_large(q, nb);
  *p = q;
  *bytes = nb;
  return true;
}

/* One tensor's object into e (name: its name, for messages): the shape goes
 * to f->shapes, and data_offsets must span exactly the shape's bytes. */
static bool parse_entry(jp *p, ag_safetensors *f, st_entry *e, const char *name) {
  uint64_t s[AG_MAX_DIMS], o[2];
  if (!lit(p, '{')) {
    jfail(p, "tensor entry must be an object");
    return false;
  }
  bool have_dt = false, have_shape = false, have_off = false;
  do {
    char k[32];
    ws(p);
    /* the three field names as written, else the general string parser */
    enum { F_DTYPE, F_SHAPE, F_OFFSETS, F_OTHER } fid;
    if (lit_token(p, "\"dtype\"", 7)) {
      fid = F_DTYPE;
    } else if (lit_token(p, "\"shape\"", 7)) {
      fid = F_SHAPE;
    } else if (lit_token(p, "\"data_offsets\"", 14)) {
      fid = F_OFFSETS;
    } else {
      if (!jkey(p, k, sizeof k)) return false;
      fid = !strcmp(k, "dtype") ? F_DTYPE : !strcmp(k, "shape") ? F_SHAPE : !strcmp(k, "data_offsets") ? F_OFFSETS
                                                                                                          : F_OTHER;
    }
    if (!lit(p, ':')) {
      jfail(p, "expected ':'");
      return false;
    }
    if (fid == F_DTYPE && !have_dt) {
      ws(p);
      bool found = false;
      if (p->s < p->end && *p->s == '"') { /* a dtype as written, without escapes */
        const char *v0 = p->s + 1;
        size_t room = (size_t)(p->end - v0);
        for (int i = 0; i < N_FDT && !found; i++) {
          size_t n = k_fdt[i].len;
          if (room > n && v0[0] == k_fdt[i].s[0] && v0[n] == '"' && !memcmp(v0, k_fdt[i].s, n)) {
            e->fdt = (uint8_t)i;
            p->s = v0 + n + 1;
            found = true;
          }
        }
      }
      char v[32];
      if (!found && !jkey(p, v, sizeof v)) return false;
      for (int i = 0; i < N_FDT && !found; i++)
        if (v[0] == k_fdt[i].s[0] && !strcmp(v, k_fdt[i].s)) {
          e->fdt = (uint8_t)i;
          found = true;
        }
      if (!found) {
        char nb[64], vb[48];
        snprintf(p->err, sizeof p->err, "tensor '%s': '%s' is not a safetensors dtype", ESC(name, nb),
                 ESC(v, vb));
        return false;
      }
      have_dt = true;
    } else if (fid == F_SHAPE && !have_shape) {
      int n = juint_array(p, s, AG_MAX_DIMS);
      if (n < 0) return false;
      e->ndim = (uint8_t)n;
      for (int i = 0; i < n; i++)
        if (s[i] > (uint64_t)INT64_MAX / 2) {
          jfail(p, "dimension too large");
          return false;
        }
      have_shape = true;
    } else if (fid == F_OFFSETS && !have_off) {
      if (juint_array(p, o, 2) != 2) {
        jfail(p, "data_offsets must hold two integers");
        return false;
      }
      e->begin = o[0];
      have_off = true;
    } else {
      static const char *const fname[] = {"dtype", "shape", "data_offsets"};
      char nb[64], kb[48];
      snprintf(p->err, sizeof p->err, "tensor '%s': unexpected or repeated field '%s'", ESC(name, nb),
               fid == F_OTHER ? ESC(k, kb) : fname[fid]);
      return false;
    }
  } while (lit(p, ','));
  if (!lit(p, '}')) {
    jfail(p, "expected '}' after a tensor entry");
    return false;
  }
  if (!have_dt || !have_shape || !have_off) {
    char nb[96];
    snprintf(p->err, sizeof p->err, "tensor '%s': needs dtype, shape and data_offsets", ESC(name, nb));
    return false;
  }
  uint64_t numel = 1;
  for (int d = 0; d < e->ndim; d++) {
    if (s[d] && numel > UINT64_MAX / s[d] / 8) {
      p->plain = true;
      snprintf(p->err, sizeof p->err, "shape too large");
      return false;
    }
    numel *= s[d];
  }
  uint64_t want = numel * k_fdt[e->fdt].size;
  if (o[1] < o[0] || o[1] - o[0] != want) {
    char nb[96];
    p->plain = true;
    snprintf(p->err, sizeof p->err, "tensor '%s': %s%s needs %llu bytes, data_offsets give [%llu, %llu)", ESC(name, nb),
             k_fdt[e->fdt].s, e->ndim ? " tensor" : " scalar", (unsigned long long)want, (unsigned long long)o[0],
             (unsigned long long)o[1]);
    return false;
  }
  if (e->ndim) {
    void *sp = f->shapes;
    if (!map_grow(&sp, &f->shapes_map, (f->n_shapes + e->ndim) * sizeof *f->shapes)) {
      jfail(p, "out of host memory");
      return false;
    }
    f->shapes = sp;
    e->shape = (uint32_t)f->n_shapes;
    for (int d = 0; d < e->ndim; d++) f->shapes[f->n_shapes++] = (int64_t)s[d];
  }
  return true;
}

/* The bytes of e's data (checked at parse: no overflow). */
static uint64_t entry_bytes(const ag_safetensors *f, const st_entry *e) {
  uint64_t numel = 1;
  for (int d = 0; d < e->ndim; d++) numel *= (uint64_t)f->shapes[e->shape + d];
  return numel * k_fdt[e->fdt].size;
}

static const char *entry_name(const ag_safetensors *f, const st_entry *e) { return f->names + e->name; }

static const int64_t *entry_shape(const ag_safetensors *f, const st_entry *e) {
  static const int64_t scalar[1];
  return e->ndim ? f->shapes + e->shape : scalar;
}

static int cmp_begin(const void *a, const void *b) {
  const st_entry *x = *(st_entry *const *)a, *y = *(st_entry *const *)b;
  return x->begin < y->begin ? -1 : x->begin > y->begin;
}

static ag_status corrupt(const char *path, const char *msg) {
  return ag_error_set(AG_ERR_CORRUPT, "%s: not a valid safetensors file: %s", path, msg);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* FNV-1a over the name's bytes. */
static uint64_t name_hash(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

/* The slot of name in f->index: the one holding it, or the empty one where
 * it would go. A slot keeps hash bits above the entry number, so a probe
 * compares names only when those bits match. */
static size_t index_slot(const ag_safetensors *f, const char *name, uint64_t hv) {
  uint32_t emask = (1u << f->index_shift) - 1, tag = (uint32_t)(hv >> 32) & ~emask;
  size_t h = (size_t)hv & f->index_mask;
  for (uint32_t v; (v = f->index[h]); h = (h + 1) & f->index_mask)
    if ((v & ~emask) == tag && !strcmp(entry_name(f, &f->e[(v & emask) - 1]), name)) break;
  return h;
}

/* Names are unique and found in O(1): an open-addressing hash index built
 * once (a header of a million names indexes in tens of milliseconds);
 * metadata keys, usually a handful, are sorted and neighbours compared. */
static ag_status check_unique(ag_safetensors *f) {
  char msg[240], nb[96];
  size_t slots = 16;
  while (slots < (size_t)f->n + (size_t)f->n / 2) slots *= 2;
  void *ip = NULL;
  char **keys = malloc((size_t)(f->n_meta + 1) * sizeof *keys);
  if (!keys || !map_grow(&ip, &f->index_map, slots * sizeof *f->index)) {
    free(keys);
    return ag_error_set(AG_ERR_OOM, "ag_safetensors_open: out of host memory");
  }
  f->index = ip;
  f->index_mask = slots - 1;
  f->index_shift = 1;
  while (f->index_shift < 31 && ((uint32_t)f->n >> f->index_shift)) f->index_shift++; /* n < 2^shift */
  uint32_t emask = (1u << f->index_shift) - 1;
  ag_status st = AG_OK;
  for (int i = 0; i < f->n && st == AG_OK; i++) {
    const char *name = entry_name(f, &f->e[i]);
    uint64_t hv = name_hash(name);
    size_t h = index_slot(f, name, hv);
    if (f->index[h]) {
      snprintf(msg, sizeof msg, "tensor '%s' appears twice", ESC(name, nb));
      st = corrupt(f->path, msg);
    } else {
      f->index[h] = ((uint32_t)(hv >> 32) & ~emask) | ((uint32_t)i + 1);
    }
  }
  if (f->n_meta) memcpy(keys, f->meta_k, (size_t)f->n_meta * sizeof *keys); /* meta_k is NULL without keys */
  qsort(keys, (size_t)f->n_meta, sizeof *keys, cmp_str);
  for (int i = 1; i < f->n_meta && st == AG_OK; i++)
    if (!strcmp(keys[i - 1], keys[i])) {
      snprintf(msg, sizeof msg, "header JSON: metadata key '%s' appears twice", ESC(keys[i], nb));
      st = corrupt(f->path, msg);
    }
  free(keys);
  return st;
}

/* Byte sizes were checked against the shapes at parse; here the names are
 * checked unique and the byte ranges to tile the data section. */
static ag_status validate(ag_safetensors *f) {
  char msg[240], nb[96];
  ag_status ust = check_unique(f);
  if (ust != AG_OK) return ust;
  /* writers lay tensors out in header order: sort only when they did not */
  bool in_order = true;
  for (int i = 1; i < f->n && in_order; i++) in_order = f->e[i - 1].begin <= f->e[i].begin;
  st_entry **sorted = NULL;
  if (!in_order) {
    if (!(sorted = malloc((size_t)f->n * sizeof *sorted)))
      return ag_error_set(AG_ERR_OOM, "ag_safetensors_open: out of host memory");
    for (int i = 0; i < f->n; i++) sorted[i] = &f->e[i];
    qsort(sorted, (size_t)f->n, sizeof *sorted, cmp_begin);
  }
  uint64_t pos = 0;
  for (int i = 0; i < f->n; i++) {
    const st_entry *e = sorted ? sorted[i] : &f->e[i];
    if (e->begin != pos) {
      snprintf(msg, sizeof msg, "tensor '%s' starts at byte %llu, expected %llu (gap or overlap)",
               ESC(entry_name(f, e), nb), (unsigned long long)e->begin, (unsigned long long)pos);
      free(sorted);
      return corrupt(f->path, msg);
    }
    pos = e->begin + entry_bytes(f, e);
  }
  free(sorted);
  if (pos != f->data_size) {
    snprintf(msg, sizeof msg, "%s: header describes %llu data bytes, file has %llu",
             pos > f->data_size ? "truncated" : "trailing bytes", (unsigned long long)pos,
             (unsigned long long)f->data_size);
    return corrupt(f->path, msg);
  }
  return AG_OK;
}

/* n bytes at file offset off into dst. The file must still be what open
 * validated: same size and modification time, and every byte there; a file
 * truncated or rewritten since is AG_ERR_CORRUPT (what a mapping would turn
 * into SIGBUS). */
static ag_status read_at(const ag_safetensors *f, uint64_t off, void *dst, size_t n, const char *what) {
  struct stat sb;
  if (fstat(f->fd, &sb) != 0)
    return ag_error_set(AG_ERR_IO, "%s: cannot stat while reading %s: %s", f->path, what, strerror(errno));
  if ((uint64_t)sb.st_size != f->file_size || sb.st_mtim.tv_sec != f->mtime.tv_sec ||
      sb.st_mtim.tv_nsec != f->mtime.tv_nsec)
    return ag_error_set(AG_ERR_CORRUPT,
                        "%s: the file changed since it was opened (%llu bytes then, %llu now): reopen it", f->path,
                        (unsigned long long)f->file_size, (unsigned long long)sb.st_size);
  size_t got = 0;
  while (got < n) {
    ssize_t r = pread(f->fd, (char *)dst + got, n - got, (off_t)(off + got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return ag_error_set(AG_ERR_IO, "%s: read error in %s: %s", f->path, what, strerror(errno));
    if (r == 0)
      return ag_error_set(AG_ERR_CORRUPT, "%s: truncated while open: %s ends at byte %llu of the file", f->path,
                          what, (unsigned long long)(off + got));
    got += (size_t)r;
  }
  return AG_OK;
}

ag_status ag_safetensors_open(const char *path, ag_safetensors **out) {
  if (!path || !out) return ag_error_set(AG_ERR_INVALID, "ag_safetensors_open: NULL argument");
  *out = NULL;
  ag_safetensors *f = calloc(1, sizeof *f);
  if (!f || !(f->path = strdup(path))) {
    free(f);
    return ag_error_set(AG_ERR_OOM, "ag_safetensors_open: out of host memory");
  }
  f->fd = -1;
  int meta_cap = 0;
  struct stat sb;
  /* Regular files only, opened without blocking (a FIFO is refused). */
  ag_status st = ag_file_open_read(path, "checkpoint", 0, &f->fd, NULL);
  if (st == AG_OK && fstat(f->fd, &sb) != 0)
    st = ag_error_set(AG_ERR_IO, "ag_safetensors_open: cannot stat %s: %s", path, strerror(errno));
  if (st != AG_OK) goto fail;
  f->file_size = (uint64_t)sb.st_size;
  f->mtime = sb.st_mtim;
  if (f->file_size < 8) {
    st = corrupt(path, "truncated: shorter than the 8-byte header length");
    goto fail;
  }
  unsigned char len8[8];
  st = read_at(f, 0, len8, 8, "the header length");
  if (st != AG_OK) goto fail;
  uint64_t hlen = 0;
  for (int i = 0; i < 8; i++) hlen |= (uint64_t)len8[i] << (8 * i);
  if (hlen > MAX_HEADER || hlen > f->file_size - 8) {
    char msg[160];
    snprintf(msg, sizeof msg, "truncated or bad header length %llu (file has %llu bytes)",
             (unsigned long long)hlen, (unsigned long long)f->file_size);
    st = corrupt(path, msg);
    goto fail;
  }
  /* The header is read (pread: a copy, no mapping of the file) into an
   * anonymous mapping, where the names are then compacted in place and the
   * rest of the pages given back. */
  long page = sysconf(_SC_PAGESIZE);
  size_t pg = page > 0 ? (size_t)page : 4096;
  f->names_map = ((size_t)hlen + 1 + pg - 1) / pg * pg;
  void *hb = mmap(NULL, f->names_map, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (hb == MAP_FAILED) {
    f->names_map = 0;
    st = ag_error_set(AG_ERR_OOM, "ag_safetensors_open: out of host memory for a %llu-byte header",
                      (unsigned long long)hlen);
    goto fail;
  }
  f->names = hb;
  advise_large(hb, f->names_map);
  st = read_at(f, 8, f->names, hlen, "the header");
  if (st != AG_OK) goto fail;
  f->data_off = 8 + hlen;
  f->data_size = f->file_size - 8 - hlen;
  size_t names_used = 0;
  jp p = {.s = f->names, .end = f->names + hlen, .path = path};
  const char *hstart = p.s;
  if (!lit(&p, '{')) jfail(&p, "header is not a JSON object");
  if (!p.err[0] && !lit(&p, '}')) {
    do {
      size_t k_at = names_used;
      bool no_control;
      char *k = jname(&p, f->names, &names_used, &no_control);
      if (!k) break;
      if (!lit(&p, ':')) {
        jfail(&p, "expected ':'");
        break;
      }
      if (k[0] == '_' && !strcmp(k, "__metadata__")) {
        names_used = k_at;
        if (!parse_meta(&p, f, &meta_cap)) break;
        continue;
      }
      void *ep = f->e;
      if (f->n == INT32_MAX || !map_grow(&ep, &f->e_map, ((size_t)f->n + 1) * sizeof *f->e)) {
        jfail(&p, "out of host memory");
        break;
      }
      f->e = ep;
      st_entry *e = &f->e[f->n++];
      memset(e, 0, sizeof *e);
      e->name = (uint32_t)k_at;
      if (!no_control && has_control(k)) {
        char nb[96];
        snprintf(p.err, sizeof p.err, "tensor name '%s' has a control character", ESC(k, nb));
        break;
      }
      if (!parse_entry(&p, f, e, k)) break;
    } while (lit(&p, ','));
    if (!p.err[0] && !lit(&p, '}')) jfail(&p, "expected '}' or ',' in the header");
  }
  if (!p.err[0]) {
    ws(&p);
    if (p.s != p.end) jfail(&p, "bytes after the header object");
  }
  if (p.err[0]) {
    char msg[320];
    if (p.plain)
      snprintf(msg, sizeof msg, "%s", p.err);
    else
      snprintf(msg, sizeof msg, "header JSON: %s (near byte %ld of %llu)", p.err, (long)(p.s - hstart),
               (unsigned long long)hlen);
    st = corrupt(path, msg);
    goto fail;
  }
  /* the names are all that stays of the header: the pages past them go back */
  size_t keep = (names_used + pg - 1) / pg * pg;
  if (!keep) keep = pg;
  if (keep < f->names_map && munmap(f->names + keep, f->names_map - keep) == 0) f->names_map = keep;
  st = validate(f);
  if (st != AG_OK) goto fail;
  *out = f;
  return AG_OK;
fail:
  ag_safetensors_close(f);
  return st;
}

int ag_safetensors_count(const ag_safetensors *f) { return f ? f->n : 0; }

const char *ag_safetensors_name(const ag_safetensors *f, int i) {
  return f && i >= 0 && i < f->n ? entry_name(f, &f->e[i]) : NULL;
}

const char *ag_safetensors_meta(const ag_safetensors *f, const char *key) {
  for (int i = 0; f && key && i < f->n_meta; i++)
    if (!strcmp(f->meta_k[i], key)) return f->meta_v[i];
  return NULL;
}

static const st_entry *find(const ag_safetensors *f, const char *name) {
  if (!f->n || !f->index) return NULL;
  uint32_t v = f->index[index_slot(f, name, name_hash(name))];
  return v ? &f->e[(v & ((1u << f->index_shift) - 1)) - 1] : NULL;
}

const char *ag_safetensors_dtype(const ag_safetensors *f, int i) {
  return f && i >= 0 && i < f->n ? k_fdt[f->e[i].fdt].s : NULL;
}

int ag_safetensors_find(const ag_safetensors *f, const char *name) {
  const st_entry *e = f && name ? find(f, name) : NULL;
  return e ? (int)(e - f->e) : -1;
}

int ag_safetensors_shape(const ag_safetensors *f, int i, int64_t *out_shape) {
  if (!f || i < 0 || i >= f->n) return -1;
  const st_entry *e = &f->e[i];
  if (out_shape) memcpy(out_shape, entry_shape(f, e), (size_t)e->ndim * sizeof *out_shape);
  return e->ndim;
}

/* Element i of a stored integer or bool tensor. */
static bool int_at(const unsigned char *src, int fdt, size_t i, int64_t *out_s, uint64_t *out_u) {
  const unsigned char *q = src + i * k_fdt[fdt].size;
  uint64_t u = 0;
  for (unsigned b = 0; b < k_fdt[fdt].size; b++) u |= (uint64_t)q[b] << (8 * b);
  if (k_fdt[fdt].kind == K_SINT) {
    unsigned bits = 8 * k_fdt[fdt].size;
    int64_t v = bits == 64 ? (int64_t)u : (int64_t)(u << (64 - bits)) >> (64 - bits);
    *out_s = v;
    return false; /* signed */
  }
  *out_u = u;
  return true; /* unsigned (bool: 0/1) */
}

static double float_at(const unsigned char *src, int fdt, size_t i) {
  const unsigned char *q = src + i * k_fdt[fdt].size;
  switch (k_fdt[fdt].size) {
    case 8: {
      double d;
      memcpy(&d, q, 8);
      return d;
    }
    case 4: {
      float x;
      memcpy(&x, q, 4);
      return x;
    }
    default: {
      uint16_t h = (uint16_t)(q[0] | (q[1] << 8));
      return !strcmp(k_fdt[fdt].s, "F16") ? ag_f16_to_f32(h) : ag_bf16_to_f32(h);
    }
  }
}

/* Convert e's elements to `as` into a new host buffer. Integers (and bool
 * as 0/1) go to i32 with a range check, or to any float type; floats go to
 * float types. Returns NULL with the error set. */
static void *convert(const ag_safetensors *f, const st_entry *e, const unsigned char *src, ag_dtype as,
                     size_t numel) {
  const char *fn = "ag_safetensors_get_as";
  st_kind kind = k_fdt[e->fdt].kind;
  char nb[96];
  if (kind == K_F8) {
    ag_error_set(AG_ERR_DTYPE, "%s: %s: tensor '%s' is %s, which anygrad does not convert (skip it)", fn,
                 f->path, ESC(entry_name(f, e), nb), k_fdt[e->fdt].s);
    return NULL;
  }
  if (kind == K_FLOAT && !ag_dtype_is_float(as)) {
    ag_error_set(AG_ERR_DTYPE, "%s: %s: tensor '%s' is %s; converting it to %s would truncate", fn, f->path,
                 ESC(entry_name(f, e), nb), k_fdt[e->fdt].s, ag_dtype_name(as));
    return NULL;
  }
  size_t es = ag_dtype_size(as);
  unsigned char *out = malloc(numel > 0 ? numel * es : 1);
  if (!out) {
    ag_error_set(AG_ERR_OOM, "%s: out of host memory for %zu bytes", fn, numel * es);
    return NULL;
  }
  for (size_t i = 0; i < numel; i++) {
    double v;
    if (kind == K_FLOAT) {
      v = float_at(src, e->fdt, i);
    } else {
      int64_t sv = 0;
      uint64_t uv = 0;
      bool is_u = int_at(src, e->fdt, i, &sv, &uv);
      if (ag_dtype_is_int(as)) {
        /* exact integers: a value the target cannot hold is refused, except
         * that bool takes x != 0 (as a cast does) */
        int64_t lo = as == AG_I32 ? INT32_MIN : as == AG_I64 ? INT64_MIN : 0;
        uint64_t hi = as == AG_I32 ? INT32_MAX : as == AG_I64 ? (uint64_t)INT64_MAX : as == AG_U8 ? 255u : UINT64_MAX;
        bool ok = as == AG_BOOL || (is_u ? uv <= hi : (sv >= lo && (sv < 0 || (uint64_t)sv <= hi)));
        if (!ok) {
          char vb[32];
          if (is_u) snprintf(vb, sizeof vb, "%llu", (unsigned long long)uv);
          else snprintf(vb, sizeof vb, "%lld", (long long)sv);
          ag_error_set(AG_ERR_INVALID, "%s: %s: tensor '%s' (%s) element %zu is %s, outside the %s range", fn,
                       f->path, ESC(entry_name(f, e), nb), k_fdt[e->fdt].s, i, vb, ag_dtype_name(as));
          free(out);
          return NULL;
        }
        int64_t x = is_u ? (int64_t)uv : sv;
        if (as == AG_I32) {
          int32_t y = (int32_t)x;
          memcpy(out + i * 4, &y, 4);
        } else if (as == AG_I64) {
          memcpy(out + i * 8, &x, 8);
        } else {
          out[i] = as == AG_BOOL ? (unsigned char)((is_u ? uv : (uint64_t)sv) != 0) : (unsigned char)x;
        }
        continue;
      }
      v = is_u ? (double)uv : (double)sv;
    }
    switch (as) {
      case AG_F64: memcpy(out + i * 8, &v, 8); break;
      case AG_F32: {
        float x = (float)v;
        memcpy(out + i * 4, &x, 4);
        break;
      }
      case AG_F16: {
        uint16_t h = ag_f32_to_f16((float)v);
        memcpy(out + i * 2, &h, 2);
        break;
      }
      case AG_BF16: {
        uint16_t h = ag_f32_to_bf16((float)v);
        memcpy(out + i * 2, &h, 2);
        break;
      }
      default:
        free(out);
        ag_error_set(AG_ERR_DTYPE, "%s: cannot convert to %s", fn, ag_dtype_name(as));
        return NULL;
    }
  }
  return out;
}

/* Bytes read (and copied to the device) at a time. */
#define LOAD_CHUNK (4u << 20)

static ag_tensor *entry_tensor(const ag_safetensors *f, const st_entry *e, ag_device d, ag_dtype as) {
  size_t bytes = (size_t)entry_bytes(f, e);
  size_t numel = bytes / k_fdt[e->fdt].size;
  char nb[96], what[160];
  snprintf(what, sizeof what, "tensor '%s'", ESC(entry_name(f, e), nb));
  if (k_fdt[e->fdt].ag != (int)as) { /* converted on the host, then one copy */
    if (k_fdt[e->fdt].kind == K_F8 || (k_fdt[e->fdt].kind == K_FLOAT && !ag_dtype_is_float(as))) {
      return convert(f, e, NULL, as, 0); /* NULL with the refusal set, before any read */
    }
    unsigned char *raw = malloc(bytes ? bytes : 1);
    if (!raw) {
      ag_error_set(AG_ERR_OOM, "ag_safetensors_get_as: out of host memory for %zu bytes", bytes);
      return NULL;
    }
    if (read_at(f, f->data_off + e->begin, raw, bytes, what) != AG_OK) {
      free(raw);
      return NULL;
    }
    void *tmp = convert(f, e, raw, as, numel);
    free(raw);
    if (!tmp) return NULL;
    static const char zero[8];
    ag_tensor *t = ag_from_host(d, as, e->ndim, entry_shape(f, e), numel ? tmp : zero);
    free(tmp);
    return t;
  }
  ag_devstate *ds = ag__devstate(d);
  if (!ds) return NULL;
  ag_tensor *t = ag__tensor_new(ds, as, e->ndim, entry_shape(f, e));
  if (!t || !bytes) return t;
  void *bounce = malloc(bytes < LOAD_CHUNK ? bytes : LOAD_CHUNK);
  if (!bounce) {
    ag_tensor_release(t);
    ag_error_set(AG_ERR_OOM, "ag_safetensors_get: out of host memory");
    return NULL;
  }
  ag_stream *s = ag__current_stream(ds);
  for (size_t o = 0; o < bytes; o += LOAD_CHUNK) {
    size_t n = bytes - o < LOAD_CHUNK ? bytes - o : LOAD_CHUNK;
    if (read_at(f, f->data_off + e->begin + o, bounce, n, what) != AG_OK ||
        ds->be->copy_h2d(s->bs, t->st->base, t->st->offset + o, bounce, n, false) != AG_OK) {
      free(bounce);
      ag_tensor_release(t);
      return NULL;
    }
  }
  free(bounce);
  return t;
}

static const st_entry *lookup(const ag_safetensors *f, const char *name, const char *fn) {
  if (!f || !name) {
    ag_error_set(AG_ERR_INVALID, "%s: NULL argument", fn);
    return NULL;
  }
  const st_entry *e = find(f, name);
  if (!e) {
    char nb[96];
    ag_error_set(AG_ERR_INVALID, "%s: %s has no tensor '%s'", fn, f->path, ESC(name, nb));
  }
  return e;
}

ag_tensor *ag_safetensors_get(const ag_safetensors *f, const char *name, ag_device d) {
  const st_entry *e = lookup(f, name, "ag_safetensors_get");
  if (!e) return NULL;
  if (k_fdt[e->fdt].ag < 0) {
    char nb[96];
    const char *hint = k_fdt[e->fdt].kind == K_F8 ? "anygrad has no 8-bit float type"
                                                  : "ag_safetensors_get_as converts it (to an integer or a float type)";
    ag_error_set(AG_ERR_DTYPE, "ag_safetensors_get: %s: tensor '%s' is %s, not an anygrad dtype; %s", f->path,
                 ESC(entry_name(f, e), nb), k_fdt[e->fdt].s, hint);
    return NULL;
  }
  return entry_tensor(f, e, d, (ag_dtype)k_fdt[e->fdt].ag);
}

ag_tensor *ag_safetensors_get_as(const ag_safetensors *f, const char *name, ag_device d, ag_dtype as) {
  if ((unsigned)as >= AG_DTYPE_COUNT) {
    ag_error_set(AG_ERR_DTYPE, "ag_safetensors_get_as: invalid dtype %d", (int)as);
    return NULL;
  }
  const st_entry *e = lookup(f, name, "ag_safetensors_get_as");
  return e ? entry_tensor(f, e, d, as) : NULL;
}

ag_status ag_safetensors_load_into(const ag_safetensors *f, const ag_param_list *l) {
  if (!f || !l) return ag_error_set(AG_ERR_INVALID, "ag_safetensors_load_into: NULL argument");
  for (int i = 0; i < l->count; i++) {
    const st_entry *e = find(f, l->names[i]);
    ag_tensor *t = l->tensors[i];
    char nb[96];
    if (!e) return ag_error_set(AG_ERR_CORRUPT, "%s: missing tensor '%s'", f->path, ESC(l->names[i], nb));
    const int64_t *shape = entry_shape(f, e);
    bool same_dt = k_fdt[e->fdt].ag == (int)t->dtype, same_shape = e->ndim == t->ndim;
    for (int d = 0; same_shape && d < e->ndim; d++) same_shape = shape[d] == t->shape[d];
    if (!same_dt || !same_shape) {
      /* A valid file that does not fit the model (other sizes or another
       * dtype) is a shape or dtype error, not a damaged file; both shapes
       * and the name say which tensor and how. */
      char a[96], fs[AG_MAX_DIMS * 21 + 4];
      size_t k = 0;
      for (int d = 0; d < e->ndim && k < sizeof fs; d++)
        k += (size_t)snprintf(fs + k, sizeof fs - k, d ? ",%lld" : "%lld", (long long)shape[d]);
      if (!e->ndim) fs[0] = 0;
      return ag_error_set(!same_shape ? AG_ERR_SHAPE : AG_ERR_DTYPE,
                          "%s: tensor '%s' is %s[%s] in the file, the model's is %s (%s differs)", f->path,
                          ESC(l->names[i], nb), k_fdt[e->fdt].s, fs, ag_tensor_describe(t, a, sizeof a),
                          !same_shape ? (!same_dt ? "shape and dtype" : "shape") : "dtype");
    }
  }
  ag_status st = AG_OK;
  ag_no_grad_begin();
  for (int i = 0; i < l->count && st == AG_OK; i++) {
    ag_tensor *t = l->tensors[i];
    ag_tensor *src = entry_tensor(f, find(f, l->names[i]), ag_tensor_device(t), t->dtype);
    st = src ? ag_copy_(t, src) : ag_last_status();
    ag_tensor_release(src);
  }
  ag_grad_mode_end();
  return st;
}
