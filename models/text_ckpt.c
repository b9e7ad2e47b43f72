/* The text task's checkpoint metadata (text_ckpt.h): written as strings,
 * read back through the strict parsers of anygrad/checks.h, and compared
 * with the file's tensors before a model is built from it. */
#include "text_ckpt.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "text.h"

static const char *const k_keys[TEXT_CKPT_N_META] = {
    "format", "anygrad",   "step",       "seed",           "dim",      "layers", "heads",     "kv_heads",
    "vocab",  "seq",       "data_hash",  "data_bytes",     "tokenizer_hash", "loss_sum", "loss_n", "first_loss"};

void text_ckpt_strings_make(const text_ckpt_meta *k, text_ckpt_strings *s) {
  for (int i = 0; i < TEXT_CKPT_N_META; i++) {
    s->keys[i] = k_keys[i];
    s->vals[i] = s->v[i];
  }
  snprintf(s->v[0], 40, "pt");
  snprintf(s->v[1], 40, "text-1");
  snprintf(s->v[2], 40, "%lld", (long long)k->step);
  snprintf(s->v[3], 40, "%llu", (unsigned long long)k->seed);
  snprintf(s->v[4], 40, "%d", k->dim);
  snprintf(s->v[5], 40, "%d", k->layers);
  snprintf(s->v[6], 40, "%d", k->heads);
  snprintf(s->v[7], 40, "%d", k->kv_heads);
  snprintf(s->v[8], 40, "%d", k->vocab);
  snprintf(s->v[9], 40, "%lld", (long long)k->seq);
  snprintf(s->v[10], 40, "%016llx", (unsigned long long)k->data_hash);
  snprintf(s->v[11], 40, "%llu", (unsigned long long)k->data_bytes);
  snprintf(s->v[12], 40, "%016llx", (unsigned long long)k->bpe_hash);
  snprintf(s->v[13], 40, "%.17g", k->loss_sum); /* 17 digits: the same double back */
  snprintf(s->v[14], 40, "%lld", (long long)k->loss_n);
  snprintf(s->v[15], 40, "%.17g", k->first_loss);
}

/* ---- metadata keys ---- */

static ag_status bad_value(const char *path, const char *k, const char *v, const char *expected) {
  char vb[64];
  return ag_error_set(AG_ERR_CORRUPT, "text: %s: metadata '%s' is '%s', expected %s", path, k,
                      ag_escape(v, vb, sizeof vb), expected);
}

static const char *value(const ag_safetensors *f, const char *path, const char *k, ag_status *st) {
  const char *v = ag_safetensors_meta(f, k);
  if (!v) *st = ag_error_set(AG_ERR_CORRUPT, "text: %s: not a text checkpoint (metadata '%s' missing)", path, k);
  return v;
}

/* A decimal integer in [lo, hi]: digits only (no sign, blank or hex), no
 * overflow. */
static ag_status meta_int(const ag_safetensors *f, const char *path, const char *k, uint64_t lo, uint64_t hi,
                          uint64_t *out) {
  ag_status st = AG_OK;
  const char *v = value(f, path, k, &st);
  if (!v) return st;
  bool digits = *v != 0;
  for (const char *p = v; digits && *p; p++) digits = *p >= '0' && *p <= '9';
  uint64_t x = 0;
  if (!digits || !ag_parse_u64(v, &x) || x < lo || x > hi) {
    char e[64];
    snprintf(e, sizeof e, "an integer in %llu..%llu", (unsigned long long)lo, (unsigned long long)hi);
    return bad_value(path, k, v, e);
  }
  *out = x;
  return AG_OK;
}

/* A hash as it is written: exactly 16 lowercase hexadecimal digits. */
static ag_status meta_hash(const ag_safetensors *f, const char *path, const char *k, uint64_t *out) {
  ag_status st = AG_OK;
  const char *v = value(f, path, k, &st);
  if (!v) return st;
  bool ok = strlen(v) == 16;
  for (const char *p = v; ok && *p; p++) ok = (*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f');
  char hx[19] = "0x";
  if (ok) memcpy(hx + 2, v, 17);
  if (!ok || !ag_parse_u64(hx, out)) return bad_value(path, k, v, "16 hexadecimal digits");
  return AG_OK;
}

/* A finite decimal number in [lo, hi] (no "nan", "inf" or hex). */
static ag_status meta_real(const ag_safetensors *f, const char *path, const char *k, double lo, double hi,
                           double *out) {
  ag_status st = AG_OK;
  const char *v = value(f, path, k, &st);
  if (!v) return st;
  if (!ag_parse_f64(v, lo, hi, out)) {
    char e[80];
    snprintf(e, sizeof e, "a finite decimal number in %g..%g", lo, hi);
    return bad_value(path, k, v, e);
  }
  return AG_OK;
}

/* ---- tensors against the sizes ---- */

/* Tensor `name` must be `dtype` with nd dims sh[0..nd); lo0 > 0 lets the
 * first dimension lie in lo0..sh[0] (the embedding's rows: the tokenizer
 * may learn fewer tokens than asked). sizes: the metadata's, for the
 * message. On success *rows0 (may be NULL) is the first dimension found. */
static ag_status want(const ag_safetensors *f, const char *path, const char *sizes, const char *name,
                      const char *dtype, int nd, const int64_t *sh, int64_t lo0, int64_t *rows0) {
  int i = ag_safetensors_find(f, name);
  int64_t got[AG_MAX_DIMS] = {0};
  int n = i < 0 ? -1 : ag_safetensors_shape(f, i, got);
  bool ok = n == nd && !strcmp(ag_safetensors_dtype(f, i), dtype);
  for (int d = 0; ok && d < nd; d++) ok = d == 0 && lo0 > 0 ? got[0] >= lo0 && got[0] <= sh[0] : got[d] == sh[d];
  if (ok) {
    if (rows0) *rows0 = nd ? got[0] : 0;
    return AG_OK;
  }
  char nb[160], w[96], g[AG_MAX_DIMS * 21 + 16];
  size_t k = (size_t)snprintf(w, sizeof w, "%s[", dtype);
  for (int d = 0; d < nd && k < sizeof w; d++)
    k += d == 0 && lo0 > 0 && lo0 < sh[0] ? (size_t)snprintf(w + k, sizeof w - k, "%lld..%lld", (long long)lo0, (long long)sh[0])
                           : (size_t)snprintf(w + k, sizeof w - k, d ? ",%lld" : "%lld", (long long)sh[d]);
  if (k < sizeof w) snprintf(w + k, sizeof w - k, "]");
  if (i < 0)
    return ag_error_set(AG_ERR_CORRUPT, "text: %s: tensor '%s' is missing; the metadata (%s) needs it as %s", path,
                        ag_escape(name, nb, sizeof nb), sizes, w);
  k = (size_t)snprintf(g, sizeof g, "%s[", ag_safetensors_dtype(f, i));
  for (int d = 0; d < n && k < sizeof g; d++)
    k += (size_t)snprintf(g + k, sizeof g - k, d ? ",%lld" : "%lld", (long long)got[d]);
  if (k < sizeof g) snprintf(g + k, sizeof g - k, "]");
  return ag_error_set(AG_ERR_CORRUPT, "text: %s: tensor '%s' is %s in the file; the metadata (%s) makes it %s", path,
                      ag_escape(name, nb, sizeof nb), g, sizes, w);
}

/* The model's tensors and their AdamW state ("optim.<name>.exp_avg",
 * ".exp_avg_sq"), as ag_llama_init names and shapes them for a tied,
 * untied-free Llama of these sizes. */
static ag_status want_param(const ag_safetensors *f, const char *path, const char *sizes, const char *name, int nd,
                            const int64_t *sh) {
  ag_status st = want(f, path, sizes, name, "F32", nd, sh, 0, NULL);
  char buf[192];
  for (int s = 0; s < 2 && st == AG_OK; s++) {
    snprintf(buf, sizeof buf, "optim.%s.%s", name, s ? "exp_avg_sq" : "exp_avg");
    st = want(f, path, sizes, buf, "F32", nd, sh, 0, NULL);
  }
  return st;
}

static ag_status check_tensors(const ag_safetensors *f, const char *path, text_ckpt_meta *k) {
  char sizes[128];
  snprintf(sizes, sizeof sizes, "dim %d, layers %d, heads %d, kv_heads %d, vocab %d", k->dim, k->layers, k->heads,
           k->kv_heads, k->vocab);
  ag_llama_config c = {.vocab_size = k->vocab, .dim = k->dim, .n_layers = k->layers, .n_heads = k->heads,
                       .n_kv_heads = k->kv_heads, .max_seq_len = k->seq};
  int64_t C = k->dim, D = k->dim / k->heads, F = ag_llama_hidden_dim(&c), HD = k->heads * D, KD = k->kv_heads * D;
  int64_t emb[2] = {k->vocab, C}, rows = 0;
  ag_status st = want(f, path, sizes, "model.embed_tokens.weight", "F32", 2, emb, 256, &rows);
  if (st == AG_OK) {
    k->model_vocab = (int)rows;
    emb[0] = rows;
    st = want_param(f, path, sizes, "model.embed_tokens.weight", 2, emb);
  }
  struct { const char *name; int nd; int64_t sh[2]; } per[] = {
      {"self_attn.q_proj.weight", 2, {HD, C}}, {"self_attn.k_proj.weight", 2, {KD, C}},
      {"self_attn.v_proj.weight", 2, {KD, C}}, {"self_attn.o_proj.weight", 2, {C, HD}},
      {"mlp.gate_proj.weight", 2, {F, C}},     {"mlp.up_proj.weight", 2, {F, C}},
      {"mlp.down_proj.weight", 2, {C, F}},     {"input_layernorm.weight", 1, {C, 0}},
      {"post_attention_layernorm.weight", 1, {C, 0}}};
  char name[160];
  for (int l = 0; l <= k->layers && st == AG_OK; l++)
    for (size_t j = 0; j < sizeof per / sizeof *per && st == AG_OK; j++) {
      snprintf(name, sizeof name, "model.layers.%d.%s", l, per[j].name);
      if (l < k->layers) st = want_param(f, path, sizes, name, per[j].nd, per[j].sh);
      else if (ag_safetensors_find(f, name) >= 0) /* a layer beyond the metadata's */
        st = ag_error_set(AG_ERR_CORRUPT, "text: %s: tensor '%s' is beyond the metadata's layers (%s)", path, name,
                          sizes);
    }
  int64_t norm[1] = {C};
  if (st == AG_OK) st = want_param(f, path, sizes, "model.norm.weight", 1, norm);
  if (st == AG_OK) st = want(f, path, sizes, "optimizer.lr.0", "F64", 0, NULL, 0, NULL);
  if (st == AG_OK) st = want(f, path, sizes, "optimizer.step", "I64", 0, NULL, 0, NULL);
  /* AdamW's bias correction counts from this: a value other than the
   * metadata's step (a negative one was ignored, restarting the correction
   * at 0) would not continue the run */
  int64_t s = 0;
  ag_tensor *t = st == AG_OK ? ag_safetensors_get(f, "optimizer.step", AG_CPU) : NULL;
  if (st == AG_OK) st = t ? ag_to_host(t, &s, sizeof s) : ag_last_status();
  ag_tensor_release(t);
  if (st == AG_OK && s != k->step)
    st = ag_error_set(AG_ERR_CORRUPT, "text: %s: tensor 'optimizer.step' is %lld, the metadata's step is %lld",
                      path, (long long)s, (long long)k->step);
  return st;
}

ag_status text_ckpt_check(const ag_safetensors *f, const char *path, text_ckpt_meta *k) {
  if (!f || !path || !k) return ag_error_set(AG_ERR_INVALID, "text_ckpt_check: NULL argument");
  const char *fmt = ag_safetensors_meta(f, "anygrad");
  if (!fmt || strcmp(fmt, "text-1"))
    return ag_error_set(AG_ERR_CORRUPT, "text: %s: not a checkpoint of anygrad train --task text (metadata "
                        "'anygrad' is not text-1)", path);
  struct { const char *k; uint64_t lo, hi; } spec[] = {
      {"step", 0, (uint64_t)TEXT_MAX_STEPS}, {"seed", 0, UINT64_MAX},          {"dim", 1, TEXT_MAX_WIDTH},
      {"layers", 1, TEXT_MAX_LAYERS},        {"heads", 1, TEXT_MAX_WIDTH},     {"kv_heads", 1, TEXT_MAX_WIDTH},
      {"vocab", 256, TEXT_MAX_VOCAB},        {"seq", 1, TEXT_MAX_SEQ},         {"data_bytes", 0, TEXT_MAX_DATA_BYTES},
      {"loss_n", 0, (uint64_t)TEXT_MAX_STEPS}};
  uint64_t x[sizeof spec / sizeof *spec] = {0};
  ag_status st = AG_OK;
  for (size_t i = 0; st == AG_OK && i < sizeof spec / sizeof *spec; i++)
    st = meta_int(f, path, spec[i].k, spec[i].lo, spec[i].hi, &x[i]);
  text_ckpt_meta m = {.step = (int64_t)x[0], .seed = x[1], .dim = (int)x[2], .layers = (int)x[3],
                      .heads = (int)x[4], .kv_heads = (int)x[5], .vocab = (int)x[6], .seq = (int64_t)x[7],
                      .data_bytes = x[8], .loss_n = (int64_t)x[9]};
  if (st == AG_OK) st = meta_hash(f, path, "data_hash", &m.data_hash);
  if (st == AG_OK) st = meta_hash(f, path, "tokenizer_hash", &m.bpe_hash);
  /* a mean of cross-entropy losses: never negative, finite (a NaN or Inf
   * stops the run before a checkpoint) */
  if (st == AG_OK) st = meta_real(f, path, "loss_sum", 0, 1e300, &m.loss_sum);
  if (st == AG_OK) st = meta_real(f, path, "first_loss", 0, 1e300, &m.first_loss);
  char e[96];
  if (st == AG_OK && (m.dim % m.heads || (m.dim / m.heads) % 2)) {
    snprintf(e, sizeof e, "a multiple of 'heads' (%d) with an even quotient", m.heads);
    st = bad_value(path, "dim", ag_safetensors_meta(f, "dim"), e);
  }
  if (st == AG_OK && m.heads % m.kv_heads) {
    snprintf(e, sizeof e, "a divisor of 'heads' (%d)", m.heads);
    st = bad_value(path, "kv_heads", ag_safetensors_meta(f, "kv_heads"), e);
  }
  if (st == AG_OK && m.loss_n > m.step) {
    snprintf(e, sizeof e, "at most 'step' (%lld)", (long long)m.step);
    st = bad_value(path, "loss_n", ag_safetensors_meta(f, "loss_n"), e);
  }
  if (st == AG_OK && m.loss_n == 0 && m.loss_sum != 0)
    st = bad_value(path, "loss_sum", ag_safetensors_meta(f, "loss_sum"), "0 as 'loss_n' is 0");
  if (st == AG_OK) st = check_tensors(f, path, &m);
  if (st == AG_OK) *k = m;
  return st;
}

ag_status text_ckpt_open(const char *path, ag_safetensors **f, text_ckpt_meta *k) {
  ag_status st = ag_safetensors_open(path, f);
  if (st != AG_OK) {
    char msg[512];
    snprintf(msg, sizeof msg, "%s", ag_last_error());
    return ag_error_set(st, "text: --resume: %s", msg);
  }
  st = text_ckpt_check(*f, path, k);
  if (st != AG_OK) {
    ag_safetensors_close(*f);
    *f = NULL;
  }
  return st;
}
