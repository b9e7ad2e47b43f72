/* Strict JSON reader and writing helpers (core/hf/json.h). */
#include "json.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "anygrad/status.h"

typedef struct agj_node {
  agj_type type;
  bool b;
  int first, last, next, count;
  size_t key, key_len; /* offsets into strs; key == SIZE_MAX: none */
  size_t s, s_len;
  double num;
} agj_node;

struct agj {
  agj_node *nodes;
  int n_nodes, cap_nodes;
  char *strs;
  size_t n_strs, cap_strs;
  const char *what;
};

typedef struct parser {
  const unsigned char *p;
  size_t n, i;
  agj *d;
  ag_status st;
} parser;

static ag_status fail(parser *ps, const char *msg) {
  if (ps->st == AG_OK)
    ps->st = ag_error_set(AG_ERR_CORRUPT, "%s: not valid JSON at byte %zu: %s", ps->d->what, ps->i, msg);
  return ps->st;
}

static void skip_ws(parser *ps) {
  while (ps->i < ps->n) {
    unsigned char c = ps->p[ps->i];
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
    ps->i++;
  }
}

static int new_node(parser *ps, agj_type t) {
  agj *d = ps->d;
  if (d->n_nodes == d->cap_nodes) {
    int cap = d->cap_nodes ? d->cap_nodes * 2 : 64;
    agj_node *nn = realloc(d->nodes, sizeof *nn * (size_t)cap);
    if (!nn) {
      if (ps->st == AG_OK) ps->st = ag_error_set(AG_ERR_OOM, "%s: out of memory reading JSON", d->what);
      return -1;
    }
    d->nodes = nn;
    d->cap_nodes = cap;
  }
  agj_node *x = &d->nodes[d->n_nodes];
  memset(x, 0, sizeof *x);
  x->type = t;
  x->first = x->last = x->next = -1;
  x->key = SIZE_MAX;
  return d->n_nodes++;
}

static bool put_byte(parser *ps, unsigned char c) {
  agj *d = ps->d;
  if (d->n_strs == d->cap_strs) {
    size_t cap = d->cap_strs ? d->cap_strs * 2 : 256;
    char *ns = realloc(d->strs, cap);
    if (!ns) {
      if (ps->st == AG_OK) ps->st = ag_error_set(AG_ERR_OOM, "%s: out of memory reading JSON", d->what);
      return false;
    }
    d->strs = ns;
    d->cap_strs = cap;
  }
  d->strs[d->n_strs++] = (char)c;
  return true;
}

static bool put_utf8(parser *ps, uint32_t cp) {
  if (cp < 0x80) return put_byte(ps, (unsigned char)cp);
  if (cp < 0x800) return put_byte(ps, (unsigned char)(0xC0 | (cp >> 6))) && put_byte(ps, 0x80 | (cp & 0x3F));
  if (cp < 0x10000)
    return put_byte(ps, (unsigned char)(0xE0 | (cp >> 12))) && put_byte(ps, 0x80 | ((cp >> 6) & 0x3F)) &&
           put_byte(ps, 0x80 | (cp & 0x3F));
  return put_byte(ps, (unsigned char)(0xF0 | (cp >> 18))) && put_byte(ps, 0x80 | ((cp >> 12) & 0x3F)) &&
         put_byte(ps, 0x80 | ((cp >> 6) & 0x3F)) && put_byte(ps, 0x80 | (cp & 0x3F));
}

static bool hex4(parser *ps, uint32_t *out) {
  if (ps->n - ps->i < 4) return fail(ps, "a \\u escape cut short"), false;
  uint32_t v = 0;
  for (int k = 0; k < 4; k++) {
    unsigned char c = ps->p[ps->i++];
    v <<= 4;
    if (c >= '0' && c <= '9') v |= (uint32_t)(c - '0');
    else if ((c | 0x20) >= 'a' && (c | 0x20) <= 'f') v |= (uint32_t)((c | 0x20) - 'a' + 10);
    else return fail(ps, "a \\u escape with a non-hex digit"), false;
  }
  *out = v;
  return true;
}

/* Length of the valid UTF-8 sequence at p[0..n), 0 if invalid. */
static size_t utf8_len(const unsigned char *p, size_t n) {
  unsigned char c = p[0];
  size_t len;
  uint32_t cp;
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) len = 2, cp = c & 0x1F;
  else if (c >= 0xE0 && c <= 0xEF) len = 3, cp = c & 0x0F;
  else if (c >= 0xF0 && c <= 0xF4) len = 4, cp = c & 0x07;
  else return 0;
  if (n < len) return 0;
  for (size_t k = 1; k < len; k++) {
    if ((p[k] & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (p[k] & 0x3F);
  }
  if ((len == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
    return 0;
  return len;
}

/* A string at ps->i (the opening quote); its bytes appended to strs + NUL. */
static bool parse_string(parser *ps, size_t *off, size_t *len) {
  ps->i++;
  *off = ps->d->n_strs;
  for (;;) {
    if (ps->i >= ps->n) return fail(ps, "a string without its closing quote"), false;
    unsigned char c = ps->p[ps->i];
    if (c == '"') {
      ps->i++;
      break;
    }
    if (c < 0x20) return fail(ps, "a control character inside a string"), false;
    if (c == '\\') {
      if (++ps->i >= ps->n) return fail(ps, "an escape cut short"), false;
      unsigned char e = ps->p[ps->i++];
      unsigned char out;
      switch (e) {
        case '"': out = '"'; break;
        case '\\': out = '\\'; break;
        case '/': out = '/'; break;
        case 'b': out = '\b'; break;
        case 'f': out = '\f'; break;
        case 'n': out = '\n'; break;
        case 'r': out = '\r'; break;
        case 't': out = '\t'; break;
        case 'u': {
          uint32_t cp, lo;
          if (!hex4(ps, &cp)) return false;
          if (cp >= 0xDC00 && cp <= 0xDFFF) return fail(ps, "a lone low surrogate"), false;
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (ps->n - ps->i < 2 || ps->p[ps->i] != '\\' || ps->p[ps->i + 1] != 'u')
              return fail(ps, "a high surrogate without its low half"), false;
            ps->i += 2;
            if (!hex4(ps, &lo)) return false;
            if (lo < 0xDC00 || lo > 0xDFFF) return fail(ps, "a high surrogate without its low half"), false;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          }
          if (!put_utf8(ps, cp)) return false;
          continue;
        }
        default: return fail(ps, "an unknown escape"), false;
      }
      if (!put_byte(ps, out)) return false;
      continue;
    }
    size_t l = utf8_len(ps->p + ps->i, ps->n - ps->i);
    if (!l) return fail(ps, "invalid UTF-8 inside a string"), false;
    for (size_t k = 0; k < l; k++)
      if (!put_byte(ps, ps->p[ps->i + k])) return false;
    ps->i += l;
  }
  *len = ps->d->n_strs - *off;
  return put_byte(ps, 0);
}

static bool parse_number(parser *ps, double *out) {
  size_t s = ps->i;
  const unsigned char *p = ps->p;
  size_t n = ps->n, i = s;
  if (i < n && p[i] == '-') i++;
  if (i < n && p[i] == '0') i++;
  else if (i < n && p[i] >= '1' && p[i] <= '9')
    while (i < n && p[i] >= '0' && p[i] <= '9') i++;
  else return fail(ps, "a malformed number"), false;
  if (i < n && p[i] == '.') {
    i++;
    if (i >= n || p[i] < '0' || p[i] > '9') return fail(ps, "a malformed number"), false;
    while (i < n && p[i] >= '0' && p[i] <= '9') i++;
  }
  if (i < n && (p[i] == 'e' || p[i] == 'E')) {
    i++;
    if (i < n && (p[i] == '+' || p[i] == '-')) i++;
    if (i >= n || p[i] < '0' || p[i] > '9') return fail(ps, "a malformed number"), false;
    while (i < n && p[i] >= '0' && p[i] <= '9') i++;
  }
  char buf[64];
  if (i - s >= sizeof buf) return fail(ps, "a number longer than 63 characters"), false;
  memcpy(buf, p + s, i - s);
  buf[i - s] = 0;
  double v = strtod(buf, NULL);
  if (!isfinite(v)) return fail(ps, "a number too large for a double"), false;
  *out = v;
  ps->i = i;
  return true;
}

static bool lit(parser *ps, const char *w) {
  size_t l = strlen(w);
  if (ps->n - ps->i < l || memcmp(ps->p + ps->i, w, l)) return fail(ps, "an unexpected character"), false;
  ps->i += l;
  return true;
}

static void link_child(agj *d, int parent, int child) {
  agj_node *pn = &d->nodes[parent];
  if (pn->last < 0) pn->first = child;
  else d->nodes[pn->last].next = child;
  d->nodes[parent].last = child;
  d->nodes[parent].count++;
}

static int parse_value(parser *ps, int depth) {
  skip_ws(ps);
  if (ps->i >= ps->n) return fail(ps, "a value expected, the text ends"), -1;
  if (depth > AGJ_MAX_DEPTH) return fail(ps, "nested deeper than 64 levels"), -1;
  unsigned char c = ps->p[ps->i];
  int x;
  if (c == '{' || c == '[') {
    bool obj = c == '{';
    x = new_node(ps, obj ? AGJ_OBJ : AGJ_ARR);
    if (x < 0) return -1;
    ps->i++;
    skip_ws(ps);
    if (ps->i < ps->n && ps->p[ps->i] == (obj ? '}' : ']')) {
      ps->i++;
      return x;
    }
    for (;;) {
      size_t ko = SIZE_MAX, kl = 0;
      if (obj) {
        skip_ws(ps);
        if (ps->i >= ps->n || ps->p[ps->i] != '"') return fail(ps, "an object key (a string) expected"), -1;
        if (!parse_string(ps, &ko, &kl)) return -1;
        skip_ws(ps);
        if (ps->i >= ps->n || ps->p[ps->i] != ':') return fail(ps, "':' expected after an object key"), -1;
        ps->i++;
      }
      int v = parse_value(ps, depth + 1);
      if (v < 0) return -1;
      ps->d->nodes[v].key = ko;
      ps->d->nodes[v].key_len = kl;
      link_child(ps->d, x, v);
      skip_ws(ps);
      if (ps->i >= ps->n) return fail(ps, obj ? "'}' expected, the text ends" : "']' expected, the text ends"), -1;
      unsigned char e = ps->p[ps->i++];
      if (e == ',') continue;
      if (e == (obj ? '}' : ']')) return x;
      ps->i--;
      return fail(ps, obj ? "',' or '}' expected" : "',' or ']' expected"), -1;
    }
  }
  if (c == '"') {
    x = new_node(ps, AGJ_STR);
    if (x < 0) return -1;
    size_t o, l;
    if (!parse_string(ps, &o, &l)) return -1;
    ps->d->nodes[x].s = o;
    ps->d->nodes[x].s_len = l;
    return x;
  }
  if (c == 't' || c == 'f') {
    x = new_node(ps, AGJ_BOOL);
    if (x < 0 || !lit(ps, c == 't' ? "true" : "false")) return -1;
    ps->d->nodes[x].b = c == 't';
    return x;
  }
  if (c == 'n') {
    x = new_node(ps, AGJ_NULL);
    if (x < 0 || !lit(ps, "null")) return -1;
    return x;
  }
  x = new_node(ps, AGJ_NUM);
  if (x < 0) return -1;
  double v;
  if (!parse_number(ps, &v)) return -1;
  ps->d->nodes[x].num = v;
  return x;
}

ag_status agj_parse(const char *text, size_t n, const char *what, agj **out) {
  if (out) *out = NULL;
  if (!text || !what || !out) return ag_error_set(AG_ERR_INVALID, "agj_parse: NULL argument");
  agj *d = calloc(1, sizeof *d);
  if (!d) return ag_error_set(AG_ERR_OOM, "%s: out of memory reading JSON", what);
  d->what = what;
  parser ps = {(const unsigned char *)text, n, 0, d, AG_OK};
  int root = parse_value(&ps, 0);
  if (root == 0) {
    skip_ws(&ps);
    if (ps.i != n) fail(&ps, "text after the JSON value");
  }
  if (ps.st != AG_OK) {
    agj_free(d);
    return ps.st;
  }
  d->what = NULL;
  *out = d;
  return AG_OK;
}

void agj_free(agj *d) {
  if (!d) return;
  free(d->nodes);
  free(d->strs);
  free(d);
}

static const agj_node *node(const agj *d, int x) { return d && x >= 0 && x < d->n_nodes ? &d->nodes[x] : NULL; }

agj_type agj_type_of(const agj *d, int x) {
  const agj_node *p = node(d, x);
  return p ? p->type : AGJ_NULL;
}
int agj_count(const agj *d, int x) {
  const agj_node *p = node(d, x);
  return p ? p->count : 0;
}
int agj_first(const agj *d, int x) {
  const agj_node *p = node(d, x);
  return p ? p->first : -1;
}
int agj_next(const agj *d, int x) {
  const agj_node *p = node(d, x);
  return p ? p->next : -1;
}
const char *agj_key(const agj *d, int x, size_t *len) {
  const agj_node *p = node(d, x);
  if (len) *len = p && p->key != SIZE_MAX ? p->key_len : 0;
  return p && p->key != SIZE_MAX ? d->strs + p->key : "";
}
const char *agj_str(const agj *d, int x, size_t *len) {
  const agj_node *p = node(d, x);
  bool ok = p && p->type == AGJ_STR;
  if (len) *len = ok ? p->s_len : 0;
  return ok ? d->strs + p->s : "";
}
double agj_num(const agj *d, int x) {
  const agj_node *p = node(d, x);
  return p && p->type == AGJ_NUM ? p->num : 0.0;
}
bool agj_bool(const agj *d, int x) {
  const agj_node *p = node(d, x);
  return p && p->type == AGJ_BOOL && p->b;
}

ag_status agj_get(const agj *d, int obj, const char *key, int *out) {
  *out = -1;
  if (agj_type_of(d, obj) != AGJ_OBJ) return AG_OK;
  size_t kl = strlen(key);
  for (int c = agj_first(d, obj); c >= 0; c = agj_next(d, c)) {
    const agj_node *p = &d->nodes[c];
    if (p->key_len != kl || memcmp(d->strs + p->key, key, kl)) continue;
    if (*out >= 0) {
      *out = -1;
      return ag_error_set(AG_ERR_CORRUPT, "the key \"%s\" occurs twice in one object", key);
    }
    *out = c;
  }
  return AG_OK;
}

void agj_put_str(FILE *f, const char *s, size_t n) {
  static const char hex[] = "0123456789abcdef";
  fputc('"', f);
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c == '"' || c == '\\') {
      fputc('\\', f);
      fputc(c, f);
    } else if (c == '\n') {
      fputs("\\n", f);
    } else if (c == '\t') {
      fputs("\\t", f);
    } else if (c == '\r') {
      fputs("\\r", f);
    } else if (c < 0x20 || c == 0x7F) {
      fprintf(f, "\\u00%c%c", hex[c >> 4], hex[c & 15]);
    } else {
      fputc(c, f);
    }
  }
  fputc('"', f);
}

void agj_put_num(FILE *f, double v) {
  char buf[40];
  if (v == floor(v) && fabs(v) < 1e15) {
    fprintf(f, "%.1f", v);
    return;
  }
  for (int prec = 1; prec <= 17; prec++) {
    snprintf(buf, sizeof buf, "%.*g", prec, v);
    if (strtod(buf, NULL) == v) break;
  }
  fputs(buf, f);
}
