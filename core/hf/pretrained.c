/* The Hugging Face layout of a Llama model and its tokenizer
 * (include/anygrad/pretrained.h, docs/export.md). */
#include "anygrad/pretrained.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "anygrad/checks.h"
#include "anygrad/serialize.h"
#include "../text/bpe_internal.h"
#include "hf_internal.h"
#include "json.h"

#define CONFIG_MAX_BYTES ((uint64_t)1 << 20)
#define TOKENIZER_MAX_BYTES ((uint64_t)256 << 20)

/* anygrad's chunks (tokenizer.h) as a regular expression of the
 * `tokenizers` library (Oniguruma): letters (ASCII and every non-ASCII
 * character, whose UTF-8 bytes are all >= 0x80), digits, other
 * non-blank characters, each with at most one space in front, at most 256
 * bytes with it; a run of blanks whose last space goes to a following
 * word; a run of blanks. The lengths count characters, so they are
 * anygrad's byte limits for ASCII text (docs/export.md). */
#define L "A-Za-z\\x{80}-\\x{10FFFF}"
#define W "\\t-\\r "
static const char k_split_regex[] = " [" L "]{1,255}|[" L "]{1,256}| [0-9]{1,255}|[0-9]{1,256}"
                                    "| [^0-9" L W "]{1,255}|[^0-9" L W "]{1,256}"
                                    "|[" W "]{1,255}(?= [^" W "])|[" W "]{1,256}";
#undef L
#undef W

/* ---- GPT-2's byte <-> unicode map ---- */

void ag__hf_byte_map(uint16_t to_cp[256]) {
  int n = 0;
  for (int b = 0; b < 256; b++) {
    bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
    to_cp[b] = (uint16_t)(printable ? b : 256 + n++);
  }
}

/* The UTF-8 of token bytes p[0..n) through the map; out has 2n bytes. */
size_t ag__hf_map_token(const uint16_t to_cp[256], const uint8_t *p, size_t n, char *out) {
  size_t o = 0;
  for (size_t i = 0; i < n; i++) {
    unsigned cp = to_cp[p[i]];
    if (cp < 0x80) {
      out[o++] = (char)cp;
    } else {
      out[o++] = (char)(0xC0 | (cp >> 6));
      out[o++] = (char)(0x80 | (cp & 0x3F));
    }
  }
  return o;
}

/* Back from the mapped UTF-8 s[0..n) to bytes (out has n bytes); -1 when s
 * holds a character outside the map. */
static long unmap_token(const int16_t from_cp[512], const char *s, size_t n, uint8_t *out) {
  size_t o = 0;
  for (size_t i = 0; i < n;) {
    unsigned c = (unsigned char)s[i], cp;
    if (c < 0x80) {
      cp = c;
      i++;
    } else if ((c & 0xE0) == 0xC0 && i + 1 < n) {
      cp = ((c & 0x1F) << 6) | ((unsigned char)s[i + 1] & 0x3F);
      i += 2;
    } else {
      return -1;
    }
    if (cp >= 512 || from_cp[cp] < 0) return -1;
    out[o++] = (uint8_t)from_cp[cp];
  }
  return (long)o;
}

static void byte_unmap(int16_t from_cp[512]) {
  uint16_t to[256];
  ag__hf_byte_map(to);
  for (int i = 0; i < 512; i++) from_cp[i] = -1;
  for (int b = 0; b < 256; b++) from_cp[to[b]] = (int16_t)b;
}

/* ---- a hash set of token byte strings ---- */

typedef struct tokmap {
  int32_t *slot; /* id or -1 */
  size_t mask;
  const uint8_t *const *bytes;
  const size_t *len;
} tokmap;

static uint64_t fnv(const uint8_t *p, size_t n) {
  uint64_t h = 1469598103934665603ULL;
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ULL;
  return h;
}

static bool tokmap_init(tokmap *t, int n, const uint8_t *const *bytes, const size_t *len) {
  size_t cap = 16;
  while (cap < (size_t)n * 2) cap <<= 1;
  t->slot = malloc(sizeof(int32_t) * cap);
  if (!t->slot) return false;
  for (size_t i = 0; i < cap; i++) t->slot[i] = -1;
  t->mask = cap - 1;
  t->bytes = bytes;
  t->len = len;
  return true;
}

/* The id holding p[0..n), or -1; with add >= 0, inserts add when absent. */
static int32_t tokmap_find(tokmap *t, const uint8_t *p, size_t n, int32_t add) {
  for (size_t i = fnv(p, n) & t->mask;; i = (i + 1) & t->mask) {
    int32_t id = t->slot[i];
    if (id < 0) {
      if (add >= 0) t->slot[i] = add;
      return -1;
    }
    if (t->len[id] == n && !memcmp(t->bytes[id], p, n)) return id;
  }
}

/* ---- tokenizer.json ---- */

/* The bytes of every id of bpe; AG_ERR_UNSUPPORTED when two are equal. */
ag_status ag__hf_token_table(const ag_bpe *bpe, const char *fn, const uint8_t ***out_b, size_t **out_l) {
  int n = ag_bpe_vocab_size(bpe);
  const uint8_t **b = malloc(sizeof *b * (size_t)n);
  size_t *l = malloc(sizeof *l * (size_t)n);
  tokmap t = {0};
  if (!b || !l || !tokmap_init(&t, n, b, l)) {
    free(b), free(l), free(t.slot);
    return ag_error_set(AG_ERR_OOM, "%s: out of memory for %d tokens", fn, n);
  }
  for (int i = 0; i < n; i++) {
    b[i] = ag_bpe_token_bytes(bpe, i, &l[i]);
    int32_t dup = tokmap_find(&t, b[i], l[i], i);
    if (dup >= 0) {
      free(b), free(l), free(t.slot);
      return ag_error_set(AG_ERR_UNSUPPORTED,
                          "%s: tokens %" PRId32 " and %d have the same bytes; %s maps each string to one id",
                          fn, dup, i, strcmp(fn, "ag_llama_save_gguf") ? "tokenizer.json" : "a GGUF vocabulary");
    }
  }
  free(t.slot);
  *out_b = b;
  *out_l = l;
  return AG_OK;
}

static void write_tokenizer_json(FILE *f, const ag_bpe *bpe, const uint8_t *const *b, const size_t *l) {
  uint16_t to[256];
  ag__hf_byte_map(to);
  char buf[4 * AG_BPE_MAX_TOKEN_BYTES + 2];
  int n = ag_bpe_vocab_size(bpe);
  fputs("{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n  \"added_tokens\": [],\n"
        "  \"normalizer\": null,\n  \"pre_tokenizer\": {\n    \"type\": \"Sequence\",\n"
        "    \"pretokenizers\": [\n      {\n        \"type\": \"Split\",\n        \"pattern\": {\"Regex\": ",
        f);
  agj_put_str(f, k_split_regex, strlen(k_split_regex));
  fputs("},\n        \"behavior\": \"Isolated\",\n        \"invert\": false\n      },\n"
        "      {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true, \"use_regex\": false}\n"
        "    ]\n  },\n  \"post_processor\": null,\n"
        "  \"decoder\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true, "
        "\"use_regex\": false},\n"
        "  \"model\": {\n    \"type\": \"BPE\",\n    \"dropout\": null,\n    \"unk_token\": null,\n"
        "    \"continuing_subword_prefix\": null,\n    \"end_of_word_suffix\": null,\n    \"fuse_unk\": false,\n"
        "    \"byte_fallback\": false,\n    \"ignore_merges\": false,\n    \"vocab\": {",
        f);
  for (int i = 0; i < n; i++) {
    fputs(i ? ",\n      " : "\n      ", f);
    agj_put_str(f, buf, ag__hf_map_token(to, b[i], l[i], buf));
    fprintf(f, ": %d", i);
  }
  fputs("\n    },\n    \"merges\": [", f);
  for (int i = 256; i < n; i++) {
    int32_t x = 0, y = 0;
    ag__bpe_merge(bpe, i - 256, &x, &y);
    size_t o = ag__hf_map_token(to, b[x], l[x], buf);
    buf[o++] = ' ';
    o += ag__hf_map_token(to, b[y], l[y], buf + o);
    fputs(i > 256 ? ",\n      " : "\n      ", f);
    agj_put_str(f, buf, o);
  }
  fputs("\n    ]\n  }\n}\n", f);
}

ag_status ag_bpe_save_hf(const ag_bpe *bpe, const char *path) {
  if (!bpe || !path || !*path) return ag_error_set(AG_ERR_INVALID, "ag_bpe_save_hf: NULL or empty argument");
  const uint8_t **b = NULL;
  size_t *l = NULL;
  ag_status st = ag__hf_token_table(bpe, "ag_bpe_save_hf", &b, &l);
  if (st != AG_OK) return st;
  ag_output *o = NULL;
  st = ag_output_open(path, "tokenizer.json", &o);
  if (st == AG_OK) {
    write_tokenizer_json(ag_output_file(o), bpe, b, l);
    st = ag_output_commit(o);
  }
  free(b);
  free(l);
  return st;
}

/* ---- reading JSON files ---- */

typedef struct jfile {
  char *text;
  agj *doc;
  const char *path;
} jfile;

static ag_status jfile_read(const char *path, const char *what, uint64_t max, jfile *j) {
  size_t n = 0;
  j->text = NULL;
  j->doc = NULL;
  j->path = path;
  ag_status st = ag_file_read_all(path, what, max, &j->text, &n);
  if (st == AG_OK) st = agj_parse(j->text, n, path, &j->doc);
  if (st == AG_OK && agj_type_of(j->doc, 0) != AGJ_OBJ)
    st = ag_error_set(AG_ERR_CORRUPT, "%s: not a JSON object", path);
  return st;
}

static void jfile_free(jfile *j) {
  agj_free(j->doc);
  free(j->text);
}

/* Member key of obj (-1 when absent or null), with its type checked. */
static ag_status jget(const jfile *j, int obj, const char *ctx, const char *key, agj_type want, int *out) {
  ag_status st = agj_get(j->doc, obj, key, out);
  if (st != AG_OK) return ag_error_set(AG_ERR_CORRUPT, "%s: the key \"%s%s\" occurs twice", j->path, ctx, key);
  if (*out >= 0 && agj_type_of(j->doc, *out) == AGJ_NULL) *out = -1;
  if (*out >= 0 && agj_type_of(j->doc, *out) != want) {
    static const char *const names[] = {"null", "a boolean", "a number", "a string", "an array", "an object"};
    return ag_error_set(AG_ERR_CORRUPT, "%s: \"%s%s\" must be %s, got %s", j->path, ctx, key, names[want],
                        names[agj_type_of(j->doc, *out)]);
  }
  return AG_OK;
}

static bool jstr_is(const jfile *j, int x, const char *s) {
  size_t n;
  const char *v = agj_str(j->doc, x, &n);
  return x >= 0 && n == strlen(s) && !memcmp(v, s, n);
}

/* ---- tokenizer.json, read ---- */

static ag_status unsupported(const jfile *j, const char *key, const char *why) {
  return ag_error_set(AG_ERR_UNSUPPORTED, "%s: \"%s\" %s: anygrad reads only its own byte-level BPE", j->path, key,
                      why);
}

static ag_status check_pre_tokenizer(const jfile *j, int root) {
  int pt, list, split, pat, rx, bl, x;
  ag_status st = jget(j, root, "", "pre_tokenizer", AGJ_OBJ, &pt);
  if (st == AG_OK && pt < 0) return unsupported(j, "pre_tokenizer", "is missing");
  if (st == AG_OK) st = jget(j, pt, "pre_tokenizer.", "type", AGJ_STR, &x);
  if (st != AG_OK) return st;
  if (!jstr_is(j, x, "Sequence")) return unsupported(j, "pre_tokenizer.type", "is not anygrad's Sequence");
  st = jget(j, pt, "pre_tokenizer.", "pretokenizers", AGJ_ARR, &list);
  if (st != AG_OK) return st;
  if (list < 0 || agj_count(j->doc, list) != 2)
    return unsupported(j, "pre_tokenizer.pretokenizers", "is not anygrad's [Split, ByteLevel]");
  split = agj_first(j->doc, list);
  bl = agj_next(j->doc, split);
  if (agj_type_of(j->doc, split) != AGJ_OBJ || agj_type_of(j->doc, bl) != AGJ_OBJ)
    return unsupported(j, "pre_tokenizer.pretokenizers", "is not anygrad's [Split, ByteLevel]");
  const char *c = "pre_tokenizer.pretokenizers[0].";
  if ((st = jget(j, split, c, "type", AGJ_STR, &x)) != AG_OK) return st;
  if (!jstr_is(j, x, "Split")) return unsupported(j, "pre_tokenizer.pretokenizers[0].type", "is not Split");
  if ((st = jget(j, split, c, "pattern", AGJ_OBJ, &pat)) != AG_OK) return st;
  if ((st = jget(j, pat, c, "Regex", AGJ_STR, &rx)) != AG_OK) return st;
  if (!jstr_is(j, rx, k_split_regex))
    return unsupported(j, "pre_tokenizer.pretokenizers[0].pattern.Regex", "is not anygrad's chunk expression");
  if ((st = jget(j, split, c, "behavior", AGJ_STR, &x)) != AG_OK) return st;
  if (!jstr_is(j, x, "Isolated"))
    return unsupported(j, "pre_tokenizer.pretokenizers[0].behavior", "is not Isolated");
  if ((st = jget(j, split, c, "invert", AGJ_BOOL, &x)) != AG_OK) return st;
  if (x >= 0 && agj_bool(j->doc, x)) return unsupported(j, "pre_tokenizer.pretokenizers[0].invert", "is true");
  c = "pre_tokenizer.pretokenizers[1].";
  if ((st = jget(j, bl, c, "type", AGJ_STR, &x)) != AG_OK) return st;
  if (!jstr_is(j, x, "ByteLevel")) return unsupported(j, "pre_tokenizer.pretokenizers[1].type", "is not ByteLevel");
  if ((st = jget(j, bl, c, "add_prefix_space", AGJ_BOOL, &x)) != AG_OK) return st;
  if (x >= 0 && agj_bool(j->doc, x))
    return unsupported(j, "pre_tokenizer.pretokenizers[1].add_prefix_space", "is true");
  if ((st = jget(j, bl, c, "use_regex", AGJ_BOOL, &x)) != AG_OK) return st;
  if (x < 0 || agj_bool(j->doc, x))
    return unsupported(j, "pre_tokenizer.pretokenizers[1].use_regex", "is not false");
  return AG_OK;
}

static ag_status check_model_options(const jfile *j, int root, int model) {
  int x;
  ag_status st;
  if ((st = jget(j, root, "", "normalizer", AGJ_OBJ, &x)) != AG_OK) return st;
  if (x >= 0) return unsupported(j, "normalizer", "is set");
  if ((st = jget(j, root, "", "added_tokens", AGJ_ARR, &x)) != AG_OK) return st;
  if (x >= 0 && agj_count(j->doc, x) > 0) return unsupported(j, "added_tokens", "is not empty");
  if ((st = jget(j, model, "model.", "type", AGJ_STR, &x)) != AG_OK) return st;
  if (!jstr_is(j, x, "BPE")) return unsupported(j, "model.type", "is not BPE");
  if ((st = jget(j, model, "model.", "byte_fallback", AGJ_BOOL, &x)) != AG_OK) return st;
  if (x >= 0 && agj_bool(j->doc, x)) return unsupported(j, "model.byte_fallback", "is true");
  if ((st = jget(j, model, "model.", "dropout", AGJ_NUM, &x)) != AG_OK) return st;
  if (x >= 0 && agj_num(j->doc, x) != 0.0) return unsupported(j, "model.dropout", "is set");
  static const char *const affix[] = {"continuing_subword_prefix", "end_of_word_suffix"};
  for (int k = 0; k < 2; k++) {
    if ((st = jget(j, model, "model.", affix[k], AGJ_STR, &x)) != AG_OK) return st;
    size_t n = 0;
    agj_str(j->doc, x, &n);
    if (x >= 0 && n > 0) return ag_error_set(AG_ERR_UNSUPPORTED, "%s: \"model.%s\" is set", j->path, affix[k]);
  }
  return AG_OK;
}

ag_status ag_bpe_load_hf(const char *path, ag_bpe **out) {
  if (out) *out = NULL;
  if (!path || !out) return ag_error_set(AG_ERR_INVALID, "ag_bpe_load_hf: NULL argument");
  jfile j;
  ag_status st = jfile_read(path, "tokenizer.json", TOKENIZER_MAX_BYTES, &j);
  int model = -1, vocab = -1, merges = -1;
  if (st == AG_OK) st = jget(&j, 0, "", "model", AGJ_OBJ, &model);
  if (st == AG_OK && model < 0) st = ag_error_set(AG_ERR_CORRUPT, "%s: no \"model\"", path);
  if (st == AG_OK) st = check_model_options(&j, 0, model);
  if (st == AG_OK) st = check_pre_tokenizer(&j, 0);
  if (st == AG_OK) st = jget(&j, model, "model.", "vocab", AGJ_OBJ, &vocab);
  if (st == AG_OK) st = jget(&j, model, "model.", "merges", AGJ_ARR, &merges);
  if (st == AG_OK && (vocab < 0 || merges < 0))
    st = ag_error_set(AG_ERR_CORRUPT, "%s: \"model.%s\" is missing", path, vocab < 0 ? "vocab" : "merges");
  int n = st == AG_OK ? agj_count(j.doc, vocab) : 0;
  if (st == AG_OK && (n < 256 || n > AG_BPE_MAX_VOCAB || agj_count(j.doc, merges) != n - 256))
    st = ag_error_set(AG_ERR_CORRUPT,
                      "%s: \"model.vocab\" has %d tokens and \"model.merges\" %d: an anygrad BPE has 256 "
                      "bytes plus one token per merge (at most %d tokens)",
                      path, n, agj_count(j.doc, merges), AG_BPE_MAX_VOCAB);
  if (st != AG_OK) {
    jfile_free(&j);
    return st;
  }
  int16_t from[512];
  byte_unmap(from);
  const uint8_t **b = calloc((size_t)n, sizeof *b);
  size_t *l = calloc((size_t)n, sizeof *l);
  size_t total = 1, used = 0;
  for (int x = agj_first(j.doc, vocab); x >= 0; x = agj_next(j.doc, x)) {
    size_t kl;
    agj_key(j.doc, x, &kl);
    total += kl;
  }
  uint8_t *bytes = malloc(total);
  int32_t *mg = malloc(sizeof(int32_t) * 2 * (size_t)(n - 256 + 1));
  tokmap t = {0};
  if (!b || !l || !bytes || !mg || !tokmap_init(&t, n, b, l))
    st = ag_error_set(AG_ERR_OOM, "%s: out of memory for %d tokens", path, n);
  for (int x = agj_first(j.doc, vocab); st == AG_OK && x >= 0; x = agj_next(j.doc, x)) {
    size_t kl;
    const char *key = agj_key(j.doc, x, &kl);
    double v = agj_num(j.doc, x);
    if (agj_type_of(j.doc, x) != AGJ_NUM || v != floor(v) || v < 0 || v >= n) {
      st = ag_error_set(AG_ERR_CORRUPT, "%s: \"model.vocab\": the id of a token is not an integer in [0, %d)", path,
                        n);
      break;
    }
    int id = (int)v;
    uint8_t tmp[4 * AG_BPE_MAX_TOKEN_BYTES];
    long bl = kl <= sizeof tmp ? unmap_token(from, key, kl, tmp) : -1;
    if (bl < 1 || bl > AG_BPE_MAX_TOKEN_BYTES) {
      st = ag_error_set(AG_ERR_CORRUPT,
                        "%s: \"model.vocab\": token %d is not 1 to %d bytes in the byte-level alphabet", path, id,
                        AG_BPE_MAX_TOKEN_BYTES);
      break;
    }
    if (b[id]) {
      st = ag_error_set(AG_ERR_CORRUPT, "%s: \"model.vocab\": id %d given to two tokens", path, id);
      break;
    }
    if (id < 256 && (bl != 1 || tmp[0] != id)) {
      st = ag_error_set(AG_ERR_CORRUPT, "%s: \"model.vocab\": id %d is not the single byte %d", path, id, id);
      break;
    }
    memcpy(bytes + used, tmp, (size_t)bl); /* bl <= kl: within total */
    b[id] = bytes + used;
    used += (size_t)bl;
    l[id] = (size_t)bl;
    if (tokmap_find(&t, b[id], l[id], id) >= 0) {
      st = ag_error_set(AG_ERR_CORRUPT, "%s: \"model.vocab\": a token is given twice (id %d)", path, id);
      break;
    }
  }
  int i = 0;
  for (int x = agj_first(j.doc, merges); st == AG_OK && x >= 0; x = agj_next(j.doc, x), i++) {
    const char *part[2] = {NULL, NULL};
    size_t plen[2] = {0, 0};
    if (agj_type_of(j.doc, x) == AGJ_STR) {
      size_t sl;
      const char *s = agj_str(j.doc, x, &sl);
      const char *sp = memchr(s, ' ', sl);
      if (sp && !memchr(sp + 1, ' ', sl - (size_t)(sp + 1 - s))) {
        part[0] = s, plen[0] = (size_t)(sp - s);
        part[1] = sp + 1, plen[1] = sl - plen[0] - 1;
      }
    } else if (agj_type_of(j.doc, x) == AGJ_ARR && agj_count(j.doc, x) == 2) {
      int p0 = agj_first(j.doc, x), p1 = agj_next(j.doc, p0);
      if (agj_type_of(j.doc, p0) == AGJ_STR && agj_type_of(j.doc, p1) == AGJ_STR) {
        part[0] = agj_str(j.doc, p0, &plen[0]);
        part[1] = agj_str(j.doc, p1, &plen[1]);
      }
    }
    int32_t ids[2] = {-1, -1};
    for (int k = 0; k < 2 && part[0]; k++) {
      uint8_t tmp[4 * AG_BPE_MAX_TOKEN_BYTES];
      long bl = plen[k] <= sizeof tmp ? unmap_token(from, part[k], plen[k], tmp) : -1;
      if (bl > 0) ids[k] = tokmap_find(&t, tmp, (size_t)bl, -1);
    }
    if (ids[0] < 0 || ids[1] < 0) {
      st = ag_error_set(AG_ERR_CORRUPT, "%s: \"model.merges\"[%d] is not two tokens of the vocabulary", path, i);
      break;
    }
    int r = 256 + i;
    if (l[ids[0]] + l[ids[1]] != l[r] || memcmp(b[r], b[ids[0]], l[ids[0]]) ||
        memcmp(b[r] + l[ids[0]], b[ids[1]], l[ids[1]])) {
      st = ag_error_set(AG_ERR_CORRUPT, "%s: \"model.merges\"[%d] does not make token %d", path, i, r);
      break;
    }
    mg[2 * i] = ids[0];
    mg[2 * i + 1] = ids[1];
  }
  if (st == AG_OK) st = ag__bpe_from_merges(mg, n - 256, path, out);
  free(t.slot);
  free(b);
  free(l);
  free(bytes);
  free(mg);
  jfile_free(&j);
  return st;
}

/* ---- config.json ---- */

static const char *torch_dtype(ag_dtype dt) {
  switch (dt) {
    case AG_F32: return "float32";
    case AG_F16: return "float16";
    case AG_BF16: return "bfloat16";
    default: return NULL;
  }
}

static void write_config(FILE *f, const ag_llama *m, const char *dt) {
  const ag_llama_config *c = &m->cfg;
  fprintf(f,
          "{\n  \"architectures\": [\"LlamaForCausalLM\"],\n  \"model_type\": \"llama\",\n"
          "  \"hidden_size\": %" PRId64 ",\n  \"intermediate_size\": %" PRId64 ",\n"
          "  \"num_hidden_layers\": %" PRId64 ",\n  \"num_attention_heads\": %d,\n"
          "  \"num_key_value_heads\": %d,\n  \"head_dim\": %" PRId64 ",\n"
          "  \"max_position_embeddings\": %" PRId64 ",\n  \"rms_norm_eps\": ",
          c->dim, ag_llama_hidden_dim(c), c->n_layers, c->n_heads, c->n_kv_heads ? c->n_kv_heads : c->n_heads,
          m->head_dim, c->max_seq_len);
  agj_put_num(f, c->norm_eps > 0 ? c->norm_eps : 1e-5);
  fputs(",\n  \"rope_theta\": ", f);
  agj_put_num(f, c->rope_theta > 0 ? c->rope_theta : 10000.0);
  fprintf(f,
          ",\n  \"rope_scaling\": null,\n  \"vocab_size\": %" PRId64 ",\n  \"tie_word_embeddings\": %s,\n"
          "  \"hidden_act\": \"silu\",\n  \"attention_bias\": false,\n  \"attention_dropout\": 0.0,\n"
          "  \"mlp_bias\": false,\n  \"pretraining_tp\": 1,\n  \"initializer_range\": 0.02,\n"
          "  \"use_cache\": true,\n  \"bos_token_id\": null,\n  \"eos_token_id\": null,\n"
          "  \"pad_token_id\": null,\n  \"torch_dtype\": \"%s\"\n}\n",
          c->vocab_size, c->untied_head ? "false" : "true", dt);
}

/* An integer member in [lo, hi]; *out keeps its value when absent and not
 * required. */
static ag_status cfg_int(const jfile *j, const char *key, bool required, int64_t lo, int64_t hi, int64_t *out) {
  int x;
  ag_status st = jget(j, 0, "", key, AGJ_NUM, &x);
  if (st != AG_OK) return st;
  if (x < 0) {
    if (required) return ag_error_set(AG_ERR_CORRUPT, "%s: the key \"%s\" is missing", j->path, key);
    return AG_OK;
  }
  double v = agj_num(j->doc, x);
  if (v != floor(v) || v < (double)lo || v > (double)hi)
    return ag_error_set(AG_ERR_CORRUPT, "%s: \"%s\" must be an integer in [%" PRId64 ", %" PRId64 "], got %.17g",
                        j->path, key, lo, hi, v);
  *out = (int64_t)v;
  return AG_OK;
}

static ag_status cfg_refuse(const jfile *j, const char *key, const char *why) {
  return ag_error_set(AG_ERR_UNSUPPORTED, "%s: \"%s\" %s: anygrad's Llama cannot represent this model", j->path,
                      key, why);
}

/* rope_scaling / rope_parameters: absent, null, or rope_type "default". */
static ag_status cfg_rope(const jfile *j, const char *key, double *theta) {
  int x, t;
  char ctx[32];
  snprintf(ctx, sizeof ctx, "%s.", key);
  ag_status st = jget(j, 0, "", key, AGJ_OBJ, &x);
  if (st != AG_OK || x < 0) return st;
  if ((st = jget(j, x, ctx, "rope_type", AGJ_STR, &t)) != AG_OK) return st;
  if (t < 0 && (st = jget(j, x, ctx, "type", AGJ_STR, &t)) != AG_OK) return st;
  if (t >= 0 && !jstr_is(j, t, "default")) {
    char why[96];
    snprintf(why, sizeof why, "has rope_type \"%.40s\" (only \"default\")", agj_str(j->doc, t, NULL));
    return cfg_refuse(j, key, why);
  }
  if (t < 0 && agj_count(j->doc, x) > 0 && strcmp(key, "rope_scaling") == 0)
    return cfg_refuse(j, key, "is set without rope_type \"default\"");
  if ((st = jget(j, x, ctx, "rope_theta", AGJ_NUM, &t)) != AG_OK) return st;
  if (t >= 0) *theta = agj_num(j->doc, t);
  return AG_OK;
}

static ag_status parse_config(const jfile *j, ag_llama_config *c) {
  int x;
  ag_status st;
  if ((st = jget(j, 0, "", "model_type", AGJ_STR, &x)) != AG_OK) return st;
  if (x < 0) return ag_error_set(AG_ERR_CORRUPT, "%s: the key \"model_type\" is missing", j->path);
  if (!jstr_is(j, x, "llama")) return cfg_refuse(j, "model_type", "is not \"llama\"");
  if ((st = jget(j, 0, "", "hidden_act", AGJ_STR, &x)) != AG_OK) return st;
  if (x >= 0 && !jstr_is(j, x, "silu")) return cfg_refuse(j, "hidden_act", "is not \"silu\"");
  static const char *const no_bias[] = {"attention_bias", "mlp_bias"};
  for (int k = 0; k < 2; k++) {
    if ((st = jget(j, 0, "", no_bias[k], AGJ_BOOL, &x)) != AG_OK) return st;
    if (x >= 0 && agj_bool(j->doc, x)) return cfg_refuse(j, no_bias[k], "is true (anygrad's Llama has no biases)");
  }
  if ((st = jget(j, 0, "", "quantization_config", AGJ_OBJ, &x)) != AG_OK) return st;
  if (x >= 0) return cfg_refuse(j, "quantization_config", "is set");
  int64_t tp = 1, dim = 0, inter = 0, layers = 0, heads = 0, kv = 0, vocab = 0, seq = 0, head_dim = 0;
  if ((st = cfg_int(j, "pretraining_tp", false, INT64_MIN / 2, INT64_MAX / 2, &tp)) != AG_OK) return st;
  if (tp != 1) return cfg_refuse(j, "pretraining_tp", "is not 1");
  const int64_t big = INT64_C(1) << 40;
  if ((st = cfg_int(j, "hidden_size", true, 1, big, &dim)) != AG_OK) return st;
  if ((st = cfg_int(j, "intermediate_size", true, 1, big, &inter)) != AG_OK) return st;
  if ((st = cfg_int(j, "num_hidden_layers", true, 1, 1 << 20, &layers)) != AG_OK) return st;
  if ((st = cfg_int(j, "num_attention_heads", true, 1, 1 << 20, &heads)) != AG_OK) return st;
  kv = heads;
  if ((st = cfg_int(j, "num_key_value_heads", false, 1, 1 << 20, &kv)) != AG_OK) return st;
  if ((st = cfg_int(j, "vocab_size", true, 1, big, &vocab)) != AG_OK) return st;
  if ((st = cfg_int(j, "max_position_embeddings", true, 1, 1 << 20, &seq)) != AG_OK) return st;
  head_dim = dim / heads;
  if ((st = cfg_int(j, "head_dim", false, 0, big, &head_dim)) != AG_OK) return st;
  if (dim % heads || head_dim != dim / heads)
    return cfg_refuse(j, "head_dim", "is not hidden_size / num_attention_heads");
  double eps = 1e-6, theta = 10000.0;
  if ((st = jget(j, 0, "", "rms_norm_eps", AGJ_NUM, &x)) != AG_OK) return st;
  if (x >= 0) eps = agj_num(j->doc, x);
  if (!(eps > 0)) return cfg_refuse(j, "rms_norm_eps", "is not positive");
  if ((st = jget(j, 0, "", "rope_theta", AGJ_NUM, &x)) != AG_OK) return st;
  if (x >= 0) theta = agj_num(j->doc, x);
  if ((st = cfg_rope(j, "rope_scaling", &theta)) != AG_OK) return st;
  if ((st = cfg_rope(j, "rope_parameters", &theta)) != AG_OK) return st;
  if (!(theta > 0)) return cfg_refuse(j, "rope_theta", "is not positive");
  bool tied = false; /* LlamaConfig's default */
  if ((st = jget(j, 0, "", "tie_word_embeddings", AGJ_BOOL, &x)) != AG_OK) return st;
  if (x >= 0) tied = agj_bool(j->doc, x);
  static const char *const dkeys[] = {"torch_dtype", "dtype"};
  for (int k = 0; k < 2; k++) {
    if ((st = jget(j, 0, "", dkeys[k], AGJ_STR, &x)) != AG_OK) return st;
    if (x >= 0 && !jstr_is(j, x, "float32") && !jstr_is(j, x, "float16") && !jstr_is(j, x, "bfloat16"))
      return cfg_refuse(j, dkeys[k], "is not float32, float16 or bfloat16");
  }
  memset(c, 0, sizeof *c);
  c->vocab_size = vocab;
  c->dim = dim;
  c->n_layers = layers;
  c->n_heads = (int)heads;
  c->n_kv_heads = (int)kv;
  c->hidden_dim = inter;
  c->max_seq_len = seq;
  c->rope_theta = theta;
  c->norm_eps = eps;
  c->untied_head = !tied;
  return AG_OK;
}

static char *join(const char *dir, const char *name) {
  size_t a = strlen(dir), b = strlen(name);
  char *p = malloc(a + b + 2);
  if (!p) return NULL;
  memcpy(p, dir, a);
  p[a] = '/';
  memcpy(p + a + 1, name, b + 1);
  return p;
}

ag_status ag_llama_read_config(const char *dir, ag_llama_config *cfg) {
  if (!dir || !cfg) return ag_error_set(AG_ERR_INVALID, "ag_llama_read_config: NULL argument");
  char *path = join(dir, "config.json");
  if (!path) return ag_error_set(AG_ERR_OOM, "ag_llama_read_config: out of memory");
  jfile j;
  ag_status st = jfile_read(path, "config.json", CONFIG_MAX_BYTES, &j);
  if (st == AG_OK) st = parse_config(&j, cfg);
  jfile_free(&j);
  free(path);
  return st;
}

/* ---- the folder ---- */

enum { F_CONFIG, F_GENERATION, F_TOKENIZER, F_TOKENIZER_CONFIG, F_N };
static const char *const k_files[F_N] = {"config.json", "generation_config.json", "tokenizer.json",
                                         "tokenizer_config.json"};

static ag_status make_dir(const char *dir) {
  struct stat sb;
  if (mkdir(dir, 0777) != 0 && errno != EEXIST)
    return ag_error_set(AG_ERR_IO, "ag_llama_save_pretrained: cannot create the folder %s: %s", dir,
                        strerror(errno));
  if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
    return ag_error_set(AG_ERR_IO, "ag_llama_save_pretrained: %s is not a folder", dir);
  return AG_OK;
}

ag_status ag_llama_save_pretrained(const ag_llama *m, const ag_bpe *tok, const char *dir) {
  if (!m || !dir || !*dir) return ag_error_set(AG_ERR_INVALID, "ag_llama_save_pretrained: NULL or empty argument");
  if (!m->params.count || !m->params.tensors)
    return ag_error_set(AG_ERR_INVALID, "ag_llama_save_pretrained: the model holds no parameters");
  ag_dtype dt = ag_tensor_dtype(m->params.tensors[0]);
  const char *dts = torch_dtype(dt);
  if (!dts)
    return ag_error_set(AG_ERR_DTYPE, "ag_llama_save_pretrained: a model in %s (f32, f16 or bf16 only)",
                        ag_dtype_name(dt));
  if (tok && ag_bpe_vocab_size(tok) > m->cfg.vocab_size)
    return ag_error_set(AG_ERR_UNSUPPORTED,
                        "ag_llama_save_pretrained: the tokenizer has %d tokens, the model's vocabulary %" PRId64,
                        ag_bpe_vocab_size(tok), m->cfg.vocab_size);
  const uint8_t **tb = NULL;
  size_t *tl = NULL;
  ag_status st = tok ? ag__hf_token_table(tok, "ag_llama_save_pretrained", &tb, &tl) : AG_OK;
  if (st == AG_OK) st = make_dir(dir);
  char *paths[F_N + 1] = {0};
  ag_output *o[F_N] = {0};
  for (int i = 0; i <= F_N && st == AG_OK; i++)
    if (!(paths[i] = join(dir, i < F_N ? k_files[i] : "model.safetensors")))
      st = ag_error_set(AG_ERR_OOM, "ag_llama_save_pretrained: out of memory");
  if (st == AG_OK) st = ag_output_check(paths[F_N], "model.safetensors");
  for (int i = 0; i < F_N && st == AG_OK; i++) {
    if (!tok && (i == F_TOKENIZER || i == F_TOKENIZER_CONFIG)) continue;
    st = ag_output_open(paths[i], k_files[i], &o[i]);
    if (st != AG_OK) break;
    FILE *f = ag_output_file(o[i]);
    switch (i) {
      case F_CONFIG: write_config(f, m, dts); break;
      case F_GENERATION:
        fputs("{\n  \"_from_model_config\": true,\n  \"bos_token_id\": null,\n  \"eos_token_id\": null,\n"
              "  \"pad_token_id\": null\n}\n",
              f);
        break;
      case F_TOKENIZER: write_tokenizer_json(f, tok, tb, tl); break;
      default:
        fprintf(f,
                "{\n  \"tokenizer_class\": \"PreTrainedTokenizerFast\",\n  \"model_max_length\": %" PRId64
                ",\n  \"add_prefix_space\": false,\n  \"clean_up_tokenization_spaces\": false,\n"
                "  \"added_tokens_decoder\": {},\n  \"bos_token\": null,\n  \"eos_token\": null,\n"
                "  \"unk_token\": null,\n  \"pad_token\": null\n}\n",
                m->cfg.max_seq_len);
        break;
    }
    if (ferror(f)) st = ag_error_set(AG_ERR_IO, "ag_llama_save_pretrained: cannot write %s", paths[i]);
  }
  if (st == AG_OK) st = ag_llama_save(m, paths[F_N]);
  for (int i = 0; i < F_N; i++) {
    if (!o[i]) continue;
    if (st == AG_OK) st = ag_output_commit(o[i]);
    else ag_output_abort(o[i]);
  }
  for (int i = 0; i <= F_N; i++) free(paths[i]);
  free(tb);
  free(tl);
  return st;
}

/* The dtype of the weights, and a check that the file's embedding and last
 * layer have the config's shapes, made before the model is allocated (a
 * config that lies about its sizes is refused without allocating them). */
static ag_status file_dtype(const char *path, const ag_llama_config *c, ag_dtype *dt) {
  ag_safetensors *f = NULL;
  ag_status st = ag_safetensors_open(path, &f);
  if (st != AG_OK) return st;
  char last[96];
  snprintf(last, sizeof last, "model.layers.%" PRId64 ".mlp.down_proj.weight", c->n_layers - 1);
  struct {
    const char *name;
    int64_t d0, d1;
  } want[] = {{"model.embed_tokens.weight", c->vocab_size, c->dim}, {last, c->dim, c->hidden_dim}};
  for (int k = 0; k < 2 && st == AG_OK; k++) {
    int64_t shape[AG_MAX_DIMS];
    int i = ag_safetensors_find(f, want[k].name);
    int nd = i >= 0 ? ag_safetensors_shape(f, i, shape) : -1;
    if (nd < 0)
      st = ag_error_set(AG_ERR_CORRUPT, "%s: no tensor \"%s\" (config.json's sizes)", path, want[k].name);
    else if (nd != 2 || shape[0] != want[k].d0 || shape[1] != want[k].d1)
      st = ag_error_set(AG_ERR_SHAPE, "%s: \"%s\" is not [%" PRId64 ", %" PRId64 "] as config.json says", path,
                        want[k].name, want[k].d0, want[k].d1);
  }
  int i = ag_safetensors_find(f, "model.embed_tokens.weight");
  const char *s = i >= 0 ? ag_safetensors_dtype(f, i) : NULL;
  if (st == AG_OK) {
    if (!s) st = ag_error_set(AG_ERR_CORRUPT, "%s: no tensor \"model.embed_tokens.weight\"", path);
    else if (!strcmp(s, "F32")) *dt = AG_F32;
    else if (!strcmp(s, "F16")) *dt = AG_F16;
    else if (!strcmp(s, "BF16")) *dt = AG_BF16;
    else st = ag_error_set(AG_ERR_DTYPE, "%s: weights in %s (F32, F16 or BF16 only)", path, s);
  }
  ag_safetensors_close(f);
  return st;
}

ag_status ag_llama_load_pretrained(const char *dir, ag_device d, ag_llama *m, ag_bpe **tok) {
  if (tok) *tok = NULL;
  if (!dir || !m) return ag_error_set(AG_ERR_INVALID, "ag_llama_load_pretrained: NULL argument");
  memset(m, 0, sizeof *m);
  ag_llama_config cfg;
  ag_status st = ag_llama_read_config(dir, &cfg);
  char *w = st == AG_OK ? join(dir, "model.safetensors") : NULL;
  char *idx = st == AG_OK ? join(dir, "model.safetensors.index.json") : NULL;
  char *tj = st == AG_OK ? join(dir, "tokenizer.json") : NULL;
  if (st == AG_OK && (!w || !idx || !tj)) st = ag_error_set(AG_ERR_OOM, "ag_llama_load_pretrained: out of memory");
  if (st == AG_OK && access(w, F_OK) != 0 && access(idx, F_OK) == 0)
    st = ag_error_set(AG_ERR_UNSUPPORTED, "%s: sharded weights (model.safetensors.index.json); anygrad reads one "
                      "model.safetensors", dir);
  ag_dtype dt = AG_F32;
  if (st == AG_OK) st = file_dtype(w, &cfg, &dt);
  ag_bpe *b = NULL;
  if (st == AG_OK && tok && access(tj, F_OK) == 0) st = ag_bpe_load_hf(tj, &b);
  if (st == AG_OK && b && ag_bpe_vocab_size(b) > cfg.vocab_size)
    st = ag_error_set(AG_ERR_UNSUPPORTED, "%s: the tokenizer has %d tokens, vocab_size is %" PRId64, dir,
                      ag_bpe_vocab_size(b), cfg.vocab_size);
  bool built = false;
  if (st == AG_OK) built = (st = ag_llama_init(m, &cfg, d, dt, NULL)) == AG_OK;
  if (st == AG_OK) st = ag_llama_load(m, w);
  if (st != AG_OK) {
    if (built) ag_llama_free(m);
    ag_bpe_free(b);
    b = NULL;
  }
  if (tok) *tok = b;
  free(w);
  free(idx);
  free(tj);
  return st;
}
