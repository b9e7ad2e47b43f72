/* A Llama and its tokenizer as a GGUF v3 file for llama.cpp
 * (include/anygrad/gguf.h, docs/export.md). The layout is computed first
 * (header, metadata, tensor infos, then each tensor's data at an offset
 * aligned to 32 bytes); then every tensor is read to the host, converted
 * and written in order, one at a time. */
#include "anygrad/gguf.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "anygrad/backend.h"
#include "anygrad/checks.h"
#include "../text/bpe_internal.h"
#include "hf_internal.h"

#define FN "ag_llama_save_gguf"
#define ALIGN 32
#define QK 32 /* weights per Q8_0 block */

/* GGUF's value types and ggml's llama file types. */
enum { V_UINT32 = 4, V_INT32 = 5, V_FLOAT32 = 6, V_BOOL = 7, V_STRING = 8, V_ARRAY = 9 };
enum { FTYPE_ALL_F32 = 0, FTYPE_MOSTLY_F16 = 1, FTYPE_MOSTLY_Q8_0 = 7 };
enum { TOKEN_NORMAL = 1, TOKEN_UNUSED = 5 };

ag_status ag_gguf_type_parse(const char *s, ag_gguf_type *out) {
  if (!s || !out) return ag_error_set(AG_ERR_INVALID, "ag_gguf_type_parse: NULL argument");
  if (!strcmp(s, "f32")) *out = AG_GGUF_F32;
  else if (!strcmp(s, "f16")) *out = AG_GGUF_F16;
  else if (!strcmp(s, "q8_0")) *out = AG_GGUF_Q8_0;
  else {
    char b[64];
    return ag_error_set(AG_ERR_INVALID, "ag_gguf_type_parse: '%s' is no GGUF type (f32, f16 or q8_0)",
                        ag_escape(s, b, sizeof b));
  }
  return AG_OK;
}

/* ---- little-endian writers (x86 and ARM Linux: host order) ---- */

static void put_u32(FILE *f, uint32_t v) { fwrite(&v, 4, 1, f); }
static void put_u64(FILE *f, uint64_t v) { fwrite(&v, 8, 1, f); }
static void put_str(FILE *f, const char *s, size_t n) {
  put_u64(f, n);
  fwrite(s, 1, n, f);
}
static void kv_key(FILE *f, const char *k, uint32_t type) {
  put_str(f, k, strlen(k));
  put_u32(f, type);
}
static void kv_u32(FILE *f, const char *k, uint32_t v) { kv_key(f, k, V_UINT32), put_u32(f, v); }
static void kv_f32(FILE *f, const char *k, float v) { kv_key(f, k, V_FLOAT32), fwrite(&v, 4, 1, f); }
static void kv_bool(FILE *f, const char *k, bool v) { kv_key(f, k, V_BOOL), fputc(v ? 1 : 0, f); }
static void kv_string(FILE *f, const char *k, const char *v) { kv_key(f, k, V_STRING), put_str(f, v, strlen(v)); }
static void kv_array(FILE *f, const char *k, uint32_t elem, uint64_t n) {
  kv_key(f, k, V_ARRAY);
  put_u32(f, elem);
  put_u64(f, n);
}

/* ---- the tensors ---- */

typedef struct gtensor {
  char name[48];
  const ag_tensor *t;
  int ndim;            /* 1 or 2 */
  uint64_t ne[2];      /* GGUF order: ne[0] is the row length */
  uint32_t type;       /* ggml type */
  int permute_heads;   /* > 0: permute rows as llama.cpp's converter, this many heads */
  uint64_t offset;     /* in the data section */
  uint64_t bytes;
} gtensor;

static uint64_t type_bytes(uint32_t type, uint64_t n) {
  return type == AG_GGUF_F32 ? 4 * n : type == AG_GGUF_F16 ? 2 * n : n / QK * (2 + QK);
}

static void add(gtensor *g, int *n, const ag_tensor *t, ag_gguf_type type, int heads, const char *fmt, int layer) {
  gtensor *x = &g[(*n)++];
  snprintf(x->name, sizeof x->name, fmt, layer);
  x->t = t;
  const int64_t *s = ag_tensor_shape(t);
  x->ndim = ag_tensor_ndim(t);
  x->ne[0] = (uint64_t)s[x->ndim - 1];
  x->ne[1] = x->ndim == 2 ? (uint64_t)s[0] : 1;
  x->permute_heads = heads;
  if (x->ndim == 1) x->type = AG_GGUF_F32;
  else if (type == AG_GGUF_Q8_0 && x->ne[0] % QK) x->type = AG_GGUF_F16; /* llama.cpp's converter too */
  else x->type = (uint32_t)type;
  x->bytes = type_bytes(x->type, x->ne[0] * x->ne[1]);
}

/* Rows of one projection reordered per head: row 2i + j of a head is row
 * j * hd/2 + i of Hugging Face's layout, so that llama.cpp's rotation of
 * adjacent pairs (x[2i], x[2i+1]) is rotate_half's (x[i], x[i + hd/2]). */
static void permute_rows(const float *in, float *out, uint64_t rows, uint64_t cols, int heads) {
  uint64_t hd = rows / (uint64_t)heads, half = hd / 2;
  for (uint64_t h = 0; h < (uint64_t)heads; h++)
    for (uint64_t i = 0; i < half; i++)
      for (uint64_t j = 0; j < 2; j++)
        memcpy(out + (h * hd + 2 * i + j) * cols, in + (h * hd + j * half + i) * cols, sizeof(float) * cols);
}

/* ggml's quantize_row_q8_0_ref: scale d = amax / 127 (float), stored as
 * f16; q = roundf(x / d) computed as x * (1 / d). */
static void quantize_q8_0(const float *x, uint64_t n, uint8_t *out) {
  for (uint64_t b = 0; b < n / QK; b++, x += QK, out += 2 + QK) {
    float amax = 0.0f;
    for (int j = 0; j < QK; j++) {
      float a = x[j] < 0 ? -x[j] : x[j];
      if (a > amax) amax = a;
    }
    float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    uint16_t h = ag_f32_to_f16(d);
    memcpy(out, &h, 2);
    for (int j = 0; j < QK; j++) out[2 + j] = (uint8_t)(int8_t)roundf(x[j] * id);
  }
}

/* t's values as f32 on the host (m in f32, f16 or bf16). */
static ag_status read_f32(const ag_tensor *t, float *dst, uint64_t n) {
  ag_dtype dt = ag_tensor_dtype(t);
  if (dt == AG_F32) return ag_to_host(t, dst, sizeof(float) * n);
  uint16_t *h = (uint16_t *)dst + n; /* the upper half of dst */
  ag_status st = ag_to_host(t, h, sizeof(uint16_t) * n);
  if (st != AG_OK) return st;
  for (uint64_t i = 0; i < n; i++) {
    uint16_t v = h[i]; /* read before dst[i] may overwrite h[i / 2 ...] */
    dst[i] = dt == AG_F16 ? ag_f16_to_f32(v) : ag_bf16_to_f32(v);
  }
  return AG_OK;
}

static ag_status write_tensor(FILE *f, const gtensor *g, float *a, float *b, uint8_t *q) {
  uint64_t n = g->ne[0] * g->ne[1];
  ag_status st = read_f32(g->t, a, n);
  if (st != AG_OK) return st;
  if (g->permute_heads) {
    permute_rows(a, b, g->ne[1], g->ne[0], g->permute_heads);
    float *s = a;
    a = b, b = s;
  }
  if (g->type == AG_GGUF_F32) {
    fwrite(a, sizeof(float), n, f);
  } else if (g->type == AG_GGUF_F16) {
    uint16_t *h = (uint16_t *)q;
    for (uint64_t i = 0; i < n; i++) h[i] = ag_f32_to_f16(a[i]);
    fwrite(h, 2, n, f);
  } else {
    quantize_q8_0(a, n, q);
    fwrite(q, 1, g->bytes, f);
  }
  static const char zeros[ALIGN];
  uint64_t pad = (ALIGN - g->bytes % ALIGN) % ALIGN;
  fwrite(zeros, 1, pad, f);
  return AG_OK;
}

/* ---- the file ---- */

static void write_metadata(FILE *f, const ag_llama *m, ag_gguf_type type, const ag_bpe *tok,
                           const uint8_t *const *tb, const size_t *tl) {
  const ag_llama_config *c = &m->cfg;
  uint32_t vocab = (uint32_t)c->vocab_size;
  int nt = ag_bpe_vocab_size(tok);
  kv_string(f, "general.architecture", "llama");
  kv_u32(f, "general.file_type",
         type == AG_GGUF_F32 ? FTYPE_ALL_F32 : type == AG_GGUF_F16 ? FTYPE_MOSTLY_F16 : FTYPE_MOSTLY_Q8_0);
  kv_u32(f, "llama.vocab_size", vocab);
  kv_u32(f, "llama.context_length", (uint32_t)c->max_seq_len);
  kv_u32(f, "llama.embedding_length", (uint32_t)c->dim);
  kv_u32(f, "llama.block_count", (uint32_t)c->n_layers);
  kv_u32(f, "llama.feed_forward_length", (uint32_t)c->hidden_dim);
  kv_u32(f, "llama.rope.dimension_count", (uint32_t)m->head_dim);
  kv_u32(f, "llama.attention.head_count", (uint32_t)c->n_heads);
  kv_u32(f, "llama.attention.head_count_kv", (uint32_t)c->n_kv_heads);
  kv_f32(f, "llama.attention.layer_norm_rms_epsilon", (float)c->norm_eps);
  kv_f32(f, "llama.rope.freq_base", (float)c->rope_theta);

  uint16_t to[256];
  ag__hf_byte_map(to);
  char buf[4 * AG_BPE_MAX_TOKEN_BYTES + 2];
  kv_string(f, "tokenizer.ggml.model", "gpt2");
  kv_string(f, "tokenizer.ggml.pre", "gpt-2");
  kv_array(f, "tokenizer.ggml.tokens", V_STRING, vocab);
  for (uint32_t i = 0; i < vocab; i++) {
    int len = (int)i < nt ? (int)ag__hf_map_token(to, tb[i], tl[i], buf)
                          : snprintf(buf, sizeof buf, "[PAD%" PRIu32 "]", i);
    put_str(f, buf, (size_t)len);
  }
  kv_array(f, "tokenizer.ggml.token_type", V_INT32, vocab);
  for (uint32_t i = 0; i < vocab; i++) put_u32(f, (int)i < nt ? TOKEN_NORMAL : TOKEN_UNUSED);
  kv_array(f, "tokenizer.ggml.merges", V_STRING, (uint64_t)(nt - 256));
  for (int i = 256; i < nt; i++) {
    int32_t x = 0, y = 0;
    ag__bpe_merge(tok, i - 256, &x, &y);
    size_t o = ag__hf_map_token(to, tb[x], tl[x], buf);
    buf[o++] = ' ';
    o += ag__hf_map_token(to, tb[y], tl[y], buf + o);
    put_str(f, buf, o);
  }
  /* No special tokens in anygrad's tokenizer; llama.cpp needs a bos and an
   * eos id (a gpt2 vocabulary without them gets 11, the byte \v). The NUL
   * byte, which text does not hold, is both; none is added to a prompt. */
  kv_u32(f, "tokenizer.ggml.bos_token_id", 0);
  kv_u32(f, "tokenizer.ggml.eos_token_id", 0);
  kv_bool(f, "tokenizer.ggml.add_bos_token", false);
  kv_bool(f, "tokenizer.ggml.add_eos_token", false);
}
enum { N_KV = 21 }; /* the keys write_metadata writes */

static ag_status check_args(const ag_llama *m, const ag_bpe *tok, const char *path, ag_gguf_type type) {
  if (!m || !tok || !path || !*path) return ag_error_set(AG_ERR_INVALID, FN ": NULL or empty argument");
  if (type != AG_GGUF_F32 && type != AG_GGUF_F16 && type != AG_GGUF_Q8_0)
    return ag_error_set(AG_ERR_INVALID, FN ": type %d is none of AG_GGUF_F32, AG_GGUF_F16, AG_GGUF_Q8_0", (int)type);
  if (!m->params.count || !m->params.tensors || !m->layers)
    return ag_error_set(AG_ERR_INVALID, FN ": the model holds no parameters");
  ag_dtype dt = ag_tensor_dtype(m->params.tensors[0]);
  if (dt != AG_F32 && dt != AG_F16 && dt != AG_BF16)
    return ag_error_set(AG_ERR_DTYPE, FN ": a model in %s (f32, f16 or bf16 only)", ag_dtype_name(dt));
  const ag_llama_config *c = &m->cfg;
  if (ag_bpe_vocab_size(tok) > c->vocab_size)
    return ag_error_set(AG_ERR_UNSUPPORTED, FN ": the tokenizer has %d tokens, the model's vocabulary %" PRId64,
                        ag_bpe_vocab_size(tok), c->vocab_size);
  int64_t big = c->vocab_size > c->max_seq_len ? c->vocab_size : c->max_seq_len;
  if (c->dim > big) big = c->dim;
  if (c->hidden_dim > big) big = c->hidden_dim;
  if (c->n_layers > big) big = c->n_layers;
  if (big > (int64_t)UINT32_MAX)
    return ag_error_set(AG_ERR_UNSUPPORTED, FN ": a size of %" PRId64 " does not fit GGUF's 32-bit metadata", big);
  return AG_OK;
}

ag_status ag_llama_save_gguf(const ag_llama *m, const ag_bpe *tok, const char *path, ag_gguf_type type) {
  ag_status st = check_args(m, tok, path, type);
  if (st != AG_OK) return st;
  const ag_llama_config *c = &m->cfg;
  int cap = 3 + 9 * (int)c->n_layers, n = 0;
  gtensor *g = calloc((size_t)cap, sizeof *g);
  const uint8_t **tb = NULL;
  size_t *tl = NULL;
  float *a = NULL, *b = NULL;
  uint8_t *q = NULL;
  ag_output *o = NULL;
  if (!g) return ag_error_set(AG_ERR_OOM, FN ": out of memory");
  st = ag__hf_token_table(tok, FN, &tb, &tl);
  if (st != AG_OK) goto done;

  add(g, &n, m->embed_tokens.weight, type, 0, "token_embd.weight", 0);
  for (int l = 0; l < (int)c->n_layers; l++) {
    const ag_llama_layer *y = &m->layers[l];
    add(g, &n, y->input_layernorm, type, 0, "blk.%d.attn_norm.weight", l);
    add(g, &n, y->q_proj.weight, type, c->n_heads, "blk.%d.attn_q.weight", l);
    add(g, &n, y->k_proj.weight, type, c->n_kv_heads, "blk.%d.attn_k.weight", l);
    add(g, &n, y->v_proj.weight, type, 0, "blk.%d.attn_v.weight", l);
    add(g, &n, y->o_proj.weight, type, 0, "blk.%d.attn_output.weight", l);
    add(g, &n, y->post_attention_layernorm, type, 0, "blk.%d.ffn_norm.weight", l);
    add(g, &n, y->gate_proj.weight, type, 0, "blk.%d.ffn_gate.weight", l);
    add(g, &n, y->up_proj.weight, type, 0, "blk.%d.ffn_up.weight", l);
    add(g, &n, y->down_proj.weight, type, 0, "blk.%d.ffn_down.weight", l);
  }
  add(g, &n, m->norm, type, 0, "output_norm.weight", 0);
  if (c->untied_head) add(g, &n, m->lm_head.weight, type, 0, "output.weight", 0);
  uint64_t off = 0, most = 0;
  for (int i = 0; i < n; i++) {
    g[i].offset = off;
    off += (g[i].bytes + ALIGN - 1) / ALIGN * ALIGN;
    uint64_t e = g[i].ne[0] * g[i].ne[1];
    if (e > most) most = e;
  }
  a = malloc(sizeof(float) * most);
  b = malloc(sizeof(float) * most);
  q = malloc(sizeof(uint16_t) * most);
  if (!a || !b || !q) {
    st = ag_error_set(AG_ERR_OOM, FN ": out of memory for a tensor of %" PRIu64 " values", most);
    goto done;
  }
  st = ag_output_open(path, "GGUF file", &o);
  if (st != AG_OK) goto done;
  FILE *f = ag_output_file(o);
  fwrite("GGUF", 1, 4, f);
  put_u32(f, 3);
  put_u64(f, (uint64_t)n);
  put_u64(f, N_KV);
  write_metadata(f, m, type, tok, tb, tl);
  for (int i = 0; i < n; i++) {
    put_str(f, g[i].name, strlen(g[i].name));
    put_u32(f, (uint32_t)g[i].ndim);
    for (int d = 0; d < g[i].ndim; d++) put_u64(f, g[i].ne[d]);
    put_u32(f, g[i].type);
    put_u64(f, g[i].offset);
  }
  static const char zeros[ALIGN];
  long pos = ftell(f);
  if (pos < 0) {
    st = ag_error_set(AG_ERR_IO, FN ": cannot write %s", path);
    goto done;
  }
  fwrite(zeros, 1, (size_t)((ALIGN - pos % ALIGN) % ALIGN), f);
  for (int i = 0; i < n && st == AG_OK; i++) st = write_tensor(f, &g[i], a, b, q);
  if (st == AG_OK && ferror(f)) st = ag_error_set(AG_ERR_IO, FN ": cannot write %s", path);
  if (st == AG_OK) {
    st = ag_output_commit(o);
    o = NULL;
  }
done:
  ag_output_abort(o);
  free(g), free(tb), free(tl), free(a), free(b), free(q);
  return st;
}
