/* A Llama-style decoder (anygrad/llama.h) built from public ops: RMSNorm,
 * rotary embeddings in Hugging Face's rotate_half form, grouped-query
 * attention through the fused scaled-dot-product op (which takes fewer
 * key/value heads as they are), a SwiGLU MLP. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "anygrad/alloc.h"
#include "anygrad/autograd.h"
#include "anygrad/checks.h"
#include "anygrad/llama.h"
#include "anygrad/serialize.h"
#include "autograd/grad_internal.h"

int64_t ag_llama_hidden_dim(const ag_llama_config *cfg) {
  if (!cfg) return 0;
  if (cfg->hidden_dim > 0) return cfg->hidden_dim;
  int64_t mo = cfg->multiple_of > 0 ? cfg->multiple_of : 256;
  int64_t h = 2 * (4 * cfg->dim) / 3;
  return mo * ((h + mo - 1) / mo);
}

/* A fresh tensor becomes a parameter (owned outside any scope, counted as
 * parameter memory, requiring grad). Consumes t. */
static ag_tensor *as_param(ag_tensor *t) {
  if (!t) return NULL;
  ag__grad_own(t);
  ag__grad_tag(t, AG_MEM_PARAMETERS);
  if (ag_tensor_set_requires_grad(t, true) != AG_OK) {
    ag_tensor_release(t);
    return NULL;
  }
  return t;
}

static ag_tensor *normal_param(ag_device d, ag_dtype dt, int64_t rows, int64_t cols, ag_generator *g) {
  int64_t s[2] = {rows, cols};
  ag_mem_category_push(AG_MEM_PARAMETERS);
  ag_tensor *t = ag_randn(d, dt, 2, s, 0.0, 0.02, g);
  ag_mem_category_pop();
  return as_param(t);
}

static ag_tensor *ones_param(ag_device d, ag_dtype dt, int64_t n) {
  ag_mem_category_push(AG_MEM_PARAMETERS);
  ag_tensor *t = ag_full(d, dt, 1, &n, 1.0);
  ag_mem_category_pop();
  return as_param(t);
}

static ag_status linear(ag_linear *l, ag_device d, ag_dtype dt, int64_t in, int64_t out, ag_generator *g) {
  l->weight = normal_param(d, dt, out, in, g);
  l->in = in;
  l->out = out;
  return l->weight ? AG_OK : ag_last_status();
}

/* Rotary tables [max_seq_len, head_dim] in dt: angle pos * theta^(-2i/D)
 * for i < D/2, repeated over the two halves (HF's cat(freqs, freqs)). */
static ag_status rope_tables(ag_llama *m, ag_device d, ag_dtype dt) {
  int64_t L = m->cfg.max_seq_len, D = m->head_dim;
  float *c = malloc((size_t)(L * D) * sizeof *c), *s = malloc((size_t)(L * D) * sizeof *s);
  ag_status st = AG_OK;
  if (!c || !s) st = ag_error_set(AG_ERR_OOM, "ag_llama_init: out of host memory");
  for (int64_t p = 0; st == AG_OK && p < L; p++)
    for (int64_t i = 0; i < D / 2; i++) {
      double a = (double)p * pow(m->cfg.rope_theta, -(double)(2 * i) / (double)D);
      c[p * D + i] = c[p * D + i + D / 2] = (float)cos(a);
      s[p * D + i] = s[p * D + i + D / 2] = (float)sin(a);
    }
  int64_t sh[2] = {L, D};
  for (int k = 0; k < 2 && st == AG_OK; k++) {
    ag_tensor *h = ag_from_host(d, AG_F32, 2, sh, k ? s : c);
    ag_tensor *t = h ? ag_cast(h, dt) : NULL;
    ag_tensor_release(h);
    if (t) {
      ag__grad_own(t);
      ag__grad_tag(t, AG_MEM_PARAMETERS); /* module state, like a torch buffer */
    }
    if (!t) st = ag_last_status();
    *(k ? &m->rope_sin : &m->rope_cos) = t;
  }
  free(c);
  free(s);
  return st;
}

ag_status ag_llama_init(ag_llama *m, const ag_llama_config *cfg, ag_device d, ag_dtype dt, ag_generator *g) {
  if (!m || !cfg) return ag_error_set(AG_ERR_INVALID, "ag_llama_init: NULL argument");
  memset(m, 0, sizeof *m);
  ag_llama_config c = *cfg;
  if (!c.n_kv_heads) c.n_kv_heads = c.n_heads;
  if (c.rope_theta == 0.0) c.rope_theta = 10000.0;
  if (c.norm_eps == 0.0) c.norm_eps = 1e-5;
  if (!c.multiple_of) c.multiple_of = 256;
  if (c.vocab_size < 1 || c.dim < 1 || c.n_layers < 1 || c.n_heads < 1 || c.n_kv_heads < 1 ||
      c.max_seq_len < 1 || c.multiple_of < 1 || c.hidden_dim < 0)
    return ag_error_set(AG_ERR_SHAPE, "ag_llama_init: sizes must be >= 1 (vocab_size %lld, dim %lld, n_layers "
                        "%lld, n_heads %d, n_kv_heads %d, max_seq_len %lld, multiple_of %lld, hidden_dim %lld)",
                        (long long)c.vocab_size, (long long)c.dim, (long long)c.n_layers, c.n_heads, c.n_kv_heads,
                        (long long)c.max_seq_len, (long long)c.multiple_of, (long long)c.hidden_dim);
  if (c.dim % c.n_heads || (c.dim / c.n_heads) % 2 || c.n_heads % c.n_kv_heads)
    return ag_error_set(AG_ERR_SHAPE, "ag_llama_init: dim %lld must split into n_heads %d heads of an even size, "
                        "and n_heads into n_kv_heads %d groups", (long long)c.dim, c.n_heads, c.n_kv_heads);
  if (!(c.rope_theta > 0.0) || !isfinite(c.rope_theta))
    return ag_error_set(AG_ERR_SHAPE, "ag_llama_init: rope_theta %g must be finite and > 0", c.rope_theta);
  if (!(c.norm_eps > 0.0) || isinf(c.norm_eps))
    return ag_error_set(AG_ERR_INVALID, "ag_llama_init: norm_eps %g must be finite and > 0 (0 selects 1e-5)",
                        c.norm_eps);
  c.hidden_dim = ag_llama_hidden_dim(&c);
  m->cfg = c;
  m->head_dim = c.dim / c.n_heads;
  m->layers = calloc((size_t)c.n_layers, sizeof *m->layers);
  if (!m->layers) return ag_error_set(AG_ERR_OOM, "ag_llama_init: out of host memory");
  int64_t C = c.dim, D = m->head_dim, F = c.hidden_dim;
  ag_status st = AG_OK;
  m->embed_tokens.weight = normal_param(d, dt, c.vocab_size, C, g);
  m->embed_tokens.num = c.vocab_size;
  m->embed_tokens.dim = C;
  if (!m->embed_tokens.weight) st = ag_last_status();
  if (st == AG_OK) st = ag_params_add(&m->params, "model.embed_tokens.weight", m->embed_tokens.weight);
  for (int64_t i = 0; i < c.n_layers && st == AG_OK; i++) {
    ag_llama_layer *l = &m->layers[i];
    struct { ag_linear *lin; int64_t in, out; const char *name; } lins[] = {
        {&l->q_proj, C, c.n_heads * D, "self_attn.q_proj"},   {&l->k_proj, C, c.n_kv_heads * D, "self_attn.k_proj"},
        {&l->v_proj, C, c.n_kv_heads * D, "self_attn.v_proj"}, {&l->o_proj, c.n_heads * D, C, "self_attn.o_proj"},
        {&l->gate_proj, C, F, "mlp.gate_proj"},                {&l->up_proj, C, F, "mlp.up_proj"},
        {&l->down_proj, F, C, "mlp.down_proj"}};
    char name[128];
    for (size_t k = 0; k < sizeof lins / sizeof *lins && st == AG_OK; k++) {
      st = linear(lins[k].lin, d, dt, lins[k].in, lins[k].out, g);
      snprintf(name, sizeof name, "model.layers.%lld.%s.weight", (long long)i, lins[k].name);
      if (st == AG_OK) st = ag_params_add(&m->params, name, lins[k].lin->weight);
    }
    if (st == AG_OK && !(l->input_layernorm = ones_param(d, dt, C))) st = ag_last_status();
    snprintf(name, sizeof name, "model.layers.%lld.input_layernorm.weight", (long long)i);
    if (st == AG_OK) st = ag_params_add(&m->params, name, l->input_layernorm);
    if (st == AG_OK && !(l->post_attention_layernorm = ones_param(d, dt, C))) st = ag_last_status();
    snprintf(name, sizeof name, "model.layers.%lld.post_attention_layernorm.weight", (long long)i);
    if (st == AG_OK) st = ag_params_add(&m->params, name, l->post_attention_layernorm);
  }
  if (st == AG_OK && !(m->norm = ones_param(d, dt, C))) st = ag_last_status();
  if (st == AG_OK) st = ag_params_add(&m->params, "model.norm.weight", m->norm);
  if (st == AG_OK && c.untied_head) {
    st = linear(&m->lm_head, d, dt, C, c.vocab_size, g);
    if (st == AG_OK) st = ag_params_add(&m->params, "lm_head.weight", m->lm_head.weight);
  } else if (st == AG_OK) { /* one tensor: autograd sums its gradient over both uses */
    m->lm_head = (ag_linear){.weight = ag_tensor_retain(m->embed_tokens.weight), .in = C, .out = c.vocab_size};
    if (!m->lm_head.weight) st = ag_last_status();
  }
  if (st == AG_OK) st = rope_tables(m, d, dt);
  if (st != AG_OK) ag_llama_free(m);
  return st;
}

/* [B, T, H*D] -> [B, H, T, D] */
static ag_tensor *split_heads(ag_tensor *x, int64_t H, int64_t D) {
  const int64_t *s = ag_tensor_shape(x);
  int64_t sh[4] = {s[0], s[1], H, D};
  int perm[4] = {0, 2, 1, 3};
  ag_tensor *r = ag_reshape(x, 4, sh);
  ag_tensor *p = ag_permute(r, perm);
  ag_tensor_release(r);
  return p;
}

/* x * cos + rotate_half(x) * sin with rotate_half(x) = cat(-x2, x1) over
 * the two halves of the head dim; cos, sin [T, D] broadcast over [B, H]. */
static ag_tensor *rope(ag_tensor *x, ag_tensor *cos_t, ag_tensor *sin_t, int64_t D) {
  ag_tensor *x1 = ag_slice(x, 3, 0, D / 2, 1), *x2 = ag_slice(x, 3, D / 2, D, 1);
  ag_tensor *n2 = ag_neg(x2);
  ag_tensor *parts[2] = {n2, x1};
  ag_tensor *rot = n2 && x1 ? ag_concat(2, parts, 3) : NULL;
  ag_tensor *a = ag_mul(x, cos_t), *b = ag_mul(rot, sin_t);
  ag_tensor *y = ag_add(a, b);
  ag_tensor *rel[] = {x1, x2, n2, rot, a, b};
  for (size_t i = 0; i < sizeof rel / sizeof *rel; i++) ag_tensor_release(rel[i]);
  return y;
}

typedef struct llama_layer_ctx {
  const ag_llama *m;
  const ag_llama_layer *l;
} llama_layer_ctx;

static ag_tensor *attn_fn(void *ctx, int n_inputs, ag_tensor *const *inputs) {
  const llama_layer_ctx *c = ctx;
  const ag_llama *m = c->m;
  (void)n_inputs;
  int64_t D = m->head_dim, B = ag_tensor_shape(inputs[0])[0], T = ag_tensor_shape(inputs[0])[1];
  /* [T, D] views of the tables, which live as long as m (a checkpointed
   * re-run slices them again) */
  ag_tensor *cos_t = ag_slice(m->rope_cos, 0, 0, T, 1), *sin_t = ag_slice(m->rope_sin, 0, 0, T, 1);
  ag_tensor *h = ag_rms_norm(inputs[0], c->l->input_layernorm, m->cfg.norm_eps);
  ag_tensor *q = ag_linear_forward(&c->l->q_proj, h), *k = ag_linear_forward(&c->l->k_proj, h),
            *v = ag_linear_forward(&c->l->v_proj, h);
  ag_tensor *qh = q ? split_heads(q, m->cfg.n_heads, D) : NULL, *kh = k ? split_heads(k, m->cfg.n_kv_heads, D) : NULL,
            *vh = v ? split_heads(v, m->cfg.n_kv_heads, D) : NULL;
  ag_tensor *qr = qh ? rope(qh, cos_t, sin_t, D) : NULL, *kr = kh ? rope(kh, cos_t, sin_t, D) : NULL;
  ag_tensor *y = qr && kr && vh ? ag_scaled_dot_product_attention(qr, kr, vh, NULL, true, 0.0, 0.0, NULL) : NULL;
  int perm[4] = {0, 2, 1, 3};
  ag_tensor *yt = y ? ag_permute(y, perm) : NULL;
  int64_t sh[3] = {B, T, m->cfg.n_heads * D};
  ag_tensor *yr = yt ? ag_reshape(yt, 3, sh) : NULL;
  ag_tensor *out = yr ? ag_linear_forward(&c->l->o_proj, yr) : NULL;
  ag_tensor *rel[] = {cos_t, sin_t, h, q, k, v, qh, kh, vh, qr, kr, y, yt, yr};
  for (size_t i = 0; i < sizeof rel / sizeof *rel; i++) ag_tensor_release(rel[i]);
  return out;
}

static ag_tensor *mlp_fn(void *ctx, int n_inputs, ag_tensor *const *inputs) {
  const llama_layer_ctx *c = ctx;
  (void)n_inputs;
  ag_tensor *h = ag_rms_norm(inputs[0], c->l->post_attention_layernorm, c->m->cfg.norm_eps);
  ag_tensor *gt = ag_linear_forward(&c->l->gate_proj, h), *up = ag_linear_forward(&c->l->up_proj, h);
  ag_tensor *sg = ag_silu(gt);
  ag_tensor *pr = ag_mul(sg, up);
  ag_tensor *out = ag_linear_forward(&c->l->down_proj, pr);
  ag_tensor *rel[] = {h, gt, up, sg, pr};
  for (size_t i = 0; i < sizeof rel / sizeof *rel; i++) ag_tensor_release(rel[i]);
  return out;
}

static ag_tensor *layer(const llama_layer_ctx *c, ag_tensor *x, bool ck) {
  ag_tensor *a = ck ? ag_checkpoint(attn_fn, c, sizeof *c, NULL, 1, &x) : attn_fn((void *)c, 1, &x);
  ag_tensor *x1 = ag_add(x, a);
  ag_tensor_release(a);
  if (!x1) return NULL;
  ag_tensor *f = ck ? ag_checkpoint(mlp_fn, c, sizeof *c, NULL, 1, &x1) : mlp_fn((void *)c, 1, &x1);
  ag_tensor *y = ag_add(x1, f);
  ag_tensor_release(x1);
  ag_tensor_release(f);
  return y;
}

/* The final RMSNorm and the output projection of hidden states x (NULL
 * passes through as NULL); x is released. */
static ag_tensor *head(const ag_llama *m, ag_tensor *x) {
  ag_tensor *xf = x ? ag_rms_norm(x, m->norm, m->cfg.norm_eps) : NULL;
  ag_tensor *logits = xf ? ag_linear_forward(&m->lm_head, xf) : NULL;
  ag_tensor_release(x);
  ag_tensor_release(xf);
  return logits;
}

ag_tensor *ag_llama_forward(const ag_llama *m, ag_tensor *idx, bool train, ag_generator *g) {
  (void)g;
  if (!m || !idx) {
    if (!m) ag_error_set(AG_ERR_INVALID, "ag_llama_forward: NULL module");
    else if (ag_last_status() == AG_OK) ag_error_set(AG_ERR_INVALID, "ag_llama_forward: NULL tensor");
    return NULL;
  }
  if (ag_tensor_ndim(idx) != 2 || ag_tensor_shape(idx)[1] > m->cfg.max_seq_len || ag_tensor_shape(idx)[1] < 1 ||
      (ag_tensor_dtype(idx) != AG_I32 && ag_tensor_dtype(idx) != AG_I64)) {
    char b[96];
    ag_error_set(AG_ERR_SHAPE, "ag_llama_forward: expected i32 or i64 [B, 1 <= T <= %lld], got %s",
                 (long long)m->cfg.max_seq_len, ag_tensor_describe(idx, b, sizeof b));
    return NULL;
  }
  ag_tensor *x = ag_embedding(m->embed_tokens.weight, idx);
  bool ck = m->cfg.checkpoint && train && ag_grad_enabled();
  for (int64_t i = 0; i < m->cfg.n_layers && x; i++) {
    llama_layer_ctx c = {m, &m->layers[i]};
    ag_tensor *y = layer(&c, x, ck);
    ag_tensor_release(x);
    x = y;
  }
  ag_tensor *logits = head(m, x);
  return logits;
}

/* ---- key/value cache ---- */

struct ag_llama_cache {
  int64_t batch, max_len, len, n_layers, n_kv_heads, head_dim;
  ag_device dev;
  ag_dtype dt;
  ag_tensor **k, **v; /* per layer [batch, n_kv_heads, max_len, head_dim] */
};

ag_llama_cache *ag_llama_cache_create(const ag_llama *m, int64_t batch, int64_t max_len) {
  if (!m || !m->embed_tokens.weight) {
    ag_error_set(AG_ERR_INVALID, "ag_llama_cache_create: NULL or empty model");
    return NULL;
  }
  if (batch < 1 || max_len < 1 || max_len > m->cfg.max_seq_len) {
    ag_error_set(AG_ERR_SHAPE, "ag_llama_cache_create: batch %lld must be >= 1 and max_len %lld in 1..%lld "
                 "(the model's max_seq_len)", (long long)batch, (long long)max_len, (long long)m->cfg.max_seq_len);
    return NULL;
  }
  ag_llama_cache *c = calloc(1, sizeof *c);
  if (c) {
    c->k = calloc((size_t)m->cfg.n_layers, sizeof *c->k);
    c->v = calloc((size_t)m->cfg.n_layers, sizeof *c->v);
  }
  if (!c || !c->k || !c->v) {
    if (c) {
      free(c->k);
      free(c->v);
    }
    free(c);
    ag_error_set(AG_ERR_OOM, "ag_llama_cache_create: out of host memory");
    return NULL;
  }
  c->batch = batch;
  c->max_len = max_len;
  c->n_layers = m->cfg.n_layers;
  c->n_kv_heads = m->cfg.n_kv_heads;
  c->head_dim = m->head_dim;
  c->dev = ag_tensor_device(m->embed_tokens.weight);
  c->dt = ag_tensor_dtype(m->embed_tokens.weight);
  int64_t sh[4] = {batch, c->n_kv_heads, max_len, c->head_dim};
  for (int64_t i = 0; i < c->n_layers; i++) {
    c->k[i] = ag_zeros(c->dev, c->dt, 4, sh);
    c->v[i] = c->k[i] ? ag_zeros(c->dev, c->dt, 4, sh) : NULL;
    if (!c->v[i]) {
      ag_status st = ag_last_status();
      char msg[512];
      snprintf(msg, sizeof msg, "%s", ag_last_error());
      ag_llama_cache_free(c);
      ag_error_set(st, "ag_llama_cache_create: %s", msg);
      return NULL;
    }
    ag__grad_own(c->k[i]);
    ag__grad_own(c->v[i]);
  }
  return c;
}

void ag_llama_cache_reset(ag_llama_cache *c) {
  if (c) c->len = 0;
}

int64_t ag_llama_cache_length(const ag_llama_cache *c) { return c ? c->len : 0; }

void ag_llama_cache_free(ag_llama_cache *c) {
  if (!c) return;
  for (int64_t i = 0; i < c->n_layers; i++) {
    if (c->k) ag_tensor_release(c->k[i]);
    if (c->v) ag_tensor_release(c->v[i]);
  }
  free(c->k);
  free(c->v);
  free(c);
}

/* One layer's attention half for new positions len..len+T-1: their keys and
 * values go into the cache, the queries attend to all len+T. */
static ag_tensor *attn_cached(const ag_llama *m, const ag_llama_layer *l, ag_tensor *x, ag_tensor *kc, ag_tensor *vc,
                              int64_t len, ag_tensor *mask) {
  int64_t D = m->head_dim, B = ag_tensor_shape(x)[0], T = ag_tensor_shape(x)[1];
  ag_tensor *cos_t = ag_slice(m->rope_cos, 0, len, len + T, 1), *sin_t = ag_slice(m->rope_sin, 0, len, len + T, 1);
  ag_tensor *h = ag_rms_norm(x, l->input_layernorm, m->cfg.norm_eps);
  ag_tensor *q = ag_linear_forward(&l->q_proj, h), *k = ag_linear_forward(&l->k_proj, h),
            *v = ag_linear_forward(&l->v_proj, h);
  ag_tensor *qh = q ? split_heads(q, m->cfg.n_heads, D) : NULL, *kh = k ? split_heads(k, m->cfg.n_kv_heads, D) : NULL,
            *vh = v ? split_heads(v, m->cfg.n_kv_heads, D) : NULL;
  ag_tensor *qr = qh ? rope(qh, cos_t, sin_t, D) : NULL, *kr = kh ? rope(kh, cos_t, sin_t, D) : NULL;
  ag_tensor *kd = ag_slice(kc, 2, len, len + T, 1), *vd = ag_slice(vc, 2, len, len + T, 1);
  bool ok = qr && kr && vh && kd && vd && ag_copy_(kd, kr) == AG_OK && ag_copy_(vd, vh) == AG_OK;
  ag_tensor *ka = ok ? ag_slice(kc, 2, 0, len + T, 1) : NULL, *va = ok ? ag_slice(vc, 2, 0, len + T, 1) : NULL;
  /* T == S (an empty cache): the causal triangle; one query: every key;
   * otherwise the offset triangle as an additive mask */
  ag_tensor *y = ka && va ? ag_scaled_dot_product_attention(qr, ka, va, mask, len == 0 && T > 1, 0.0, 0.0, NULL)
                          : NULL;
  int perm[4] = {0, 2, 1, 3};
  ag_tensor *yt = y ? ag_permute(y, perm) : NULL;
  int64_t sh[3] = {B, T, m->cfg.n_heads * D};
  ag_tensor *yr = yt ? ag_reshape(yt, 3, sh) : NULL;
  ag_tensor *out = yr ? ag_linear_forward(&l->o_proj, yr) : NULL;
  ag_tensor *rel[] = {cos_t, sin_t, h, q, k, v, qh, kh, vh, qr, kr, kd, vd, ka, va, y, yt, yr};
  for (size_t i = 0; i < sizeof rel / sizeof *rel; i++) ag_tensor_release(rel[i]);
  return out;
}

/* [1, 1, T, len+T] additive mask: query i (position len+i) sees keys j <= len+i. */
static ag_tensor *offset_mask(int64_t len, int64_t T, ag_device d, ag_dtype dt) {
  int64_t S = len + T;
  float *h = malloc((size_t)(T * S) * sizeof *h);
  if (!h) {
    ag_error_set(AG_ERR_OOM, "ag_llama_forward_cached: out of host memory");
    return NULL;
  }
  for (int64_t i = 0; i < T; i++)
    for (int64_t j = 0; j < S; j++) h[i * S + j] = j <= len + i ? 0.0f : -INFINITY;
  int64_t sh[4] = {1, 1, T, S};
  ag_tensor *f = ag_from_host(d, AG_F32, 4, sh, h);
  free(h);
  ag_tensor *r = f ? ag_cast(f, dt) : NULL;
  ag_tensor_release(f);
  return r;
}

ag_tensor *ag_llama_forward_cached(const ag_llama *m, ag_llama_cache *c, ag_tensor *idx) {
  if (!m || !c || !idx) {
    if (!m || !c) ag_error_set(AG_ERR_INVALID, "ag_llama_forward_cached: NULL %s", !m ? "model" : "cache");
    else if (ag_last_status() == AG_OK) ag_error_set(AG_ERR_INVALID, "ag_llama_forward_cached: NULL tensor");
    return NULL;
  }
  if (c->n_layers != m->cfg.n_layers || c->n_kv_heads != m->cfg.n_kv_heads || c->head_dim != m->head_dim) {
    ag_error_set(AG_ERR_SHAPE, "ag_llama_forward_cached: the cache holds %lld layers of %lld key/value heads of %lld, "
                 "the model %lld of %d of %lld", (long long)c->n_layers, (long long)c->n_kv_heads,
                 (long long)c->head_dim, (long long)m->cfg.n_layers, m->cfg.n_kv_heads, (long long)m->head_dim);
    return NULL;
  }
  if (!ag_device_eq(c->dev, ag_tensor_device(m->embed_tokens.weight)) ||
      c->dt != ag_tensor_dtype(m->embed_tokens.weight)) {
    ag_error_set(AG_ERR_DEVICE, "ag_llama_forward_cached: the cache was made for another device or dtype than the "
                 "model's");
    return NULL;
  }
  char b[96];
  if (ag_tensor_ndim(idx) != 2 || ag_tensor_shape(idx)[0] != c->batch || ag_tensor_shape(idx)[1] < 1 ||
      (ag_tensor_dtype(idx) != AG_I32 && ag_tensor_dtype(idx) != AG_I64)) {
    ag_error_set(AG_ERR_SHAPE, "ag_llama_forward_cached: expected i32 or i64 [%lld, T >= 1], got %s",
                 (long long)c->batch, ag_tensor_describe(idx, b, sizeof b));
    return NULL;
  }
  int64_t T = ag_tensor_shape(idx)[1];
  if (c->len + T > c->max_len) {
    ag_error_set(AG_ERR_SHAPE, "ag_llama_forward_cached: %lld new positions after %lld cached exceed the cache's "
                 "max_len %lld", (long long)T, (long long)c->len, (long long)c->max_len);
    return NULL;
  }
  ag_no_grad_begin();
  ag_tensor *mask = c->len > 0 && T > 1 ? offset_mask(c->len, T, c->dev, c->dt) : NULL;
  ag_tensor *x = c->len > 0 && T > 1 && !mask ? NULL : ag_embedding(m->embed_tokens.weight, idx);
  for (int64_t i = 0; i < m->cfg.n_layers && x; i++) {
    const ag_llama_layer *l = &m->layers[i];
    ag_tensor *a = attn_cached(m, l, x, c->k[i], c->v[i], c->len, mask);
    ag_tensor *x1 = a ? ag_add(x, a) : NULL;
    ag_tensor_release(a);
    llama_layer_ctx lc = {m, l};
    ag_tensor *f = x1 ? mlp_fn(&lc, 1, &x1) : NULL;
    ag_tensor *y = f ? ag_add(x1, f) : NULL;
    ag_tensor_release(x1);
    ag_tensor_release(f);
    ag_tensor_release(x);
    x = y;
  }
  ag_tensor *logits = head(m, x);
  ag_tensor_release(mask);
  ag_grad_mode_end();
  if (logits) c->len += T;
  return logits;
}

ag_status ag_llama_check_tying(const ag_llama *m, int n, const char *const *names) {
  if (!m || (n > 0 && !names)) return ag_error_set(AG_ERR_INVALID, "ag_llama_check_tying: NULL argument");
  bool has_head = false;
  for (int i = 0; i < n && !has_head; i++) has_head = names[i] && !strcmp(names[i], "lm_head.weight");
  if (has_head && !m->cfg.untied_head)
    return ag_error_set(AG_ERR_CORRUPT, "ag_llama_check_tying: the checkpoint has a separate lm_head.weight (untied "
                        "embeddings) but the model ties lm_head to model.embed_tokens.weight; build it with "
                        "cfg.untied_head = true");
  if (!has_head && m->cfg.untied_head)
    return ag_error_set(AG_ERR_CORRUPT, "ag_llama_check_tying: the checkpoint has no lm_head.weight (tied "
                        "embeddings) but the model has a separate lm_head; build it with cfg.untied_head = false");
  return AG_OK;
}

ag_status ag_llama_save(const ag_llama *m, const char *path) {
  if (!m || !path) return ag_error_set(AG_ERR_INVALID, "ag_llama_save: NULL argument");
  const char *k[] = {"format"}, *v[] = {"pt"};
  return ag_safetensors_save(path, &m->params, 1, k, v);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

/* N of "model.layers.N.<rest>" (plain decimal), or -1; *rest after the dot. */
static int64_t layer_of(const char *name, const char **rest) {
  static const char pre[] = "model.layers.";
  if (strncmp(name, pre, sizeof pre - 1)) return -1;
  const char *p = name + sizeof pre - 1;
  size_t n = strspn(p, "0123456789");
  if (n < 1 || n > 18 || p[n] != '.' || (n > 1 && p[0] == '0')) return -1;
  int64_t v = 0;
  for (size_t i = 0; i < n; i++) v = v * 10 + (p[i] - '0');
  *rest = p + n + 1;
  return v;
}

/* What a Llama file may hold besides m's parameters: Hugging Face's rotary
 * buffers of m's layers (old transformers versions saved them; from_pretrained
 * ignores them too) and anygrad's training state ("optim." optimizer state,
 * "optimizer." counters: train --task text writes one file for both). */
static bool not_a_parameter(const ag_llama *m, const char *name) {
  if (!strncmp(name, "optim.", 6) || !strncmp(name, "optimizer.", 10)) return true;
  const char *rest;
  int64_t l = layer_of(name, &rest);
  return l >= 0 && l < m->cfg.n_layers && !strcmp(rest, "self_attn.rotary_emb.inv_freq");
}

/* Every tensor of the file is one of m's parameters or not_a_parameter: a
 * deeper model's layers, or any other tensor m does not have, are refused
 * as a missing one is (AG_ERR_CORRUPT naming it), not dropped. */
static ag_status check_extra(const ag_llama *m, const char *path, int n, const char *const *names) {
  const char **own = malloc((size_t)(m->params.count ? m->params.count : 1) * sizeof *own);
  if (!own) return ag_error_set(AG_ERR_OOM, "ag_llama_load: out of host memory");
  for (int i = 0; i < m->params.count; i++) own[i] = m->params.names[i];
  qsort(own, (size_t)m->params.count, sizeof *own, cmp_str);
  ag_status st = AG_OK;
  for (int i = 0; i < n && st == AG_OK; i++) {
    if (!names[i] || not_a_parameter(m, names[i]) ||
        bsearch(&names[i], own, (size_t)m->params.count, sizeof *own, cmp_str))
      continue;
    char pb[256], nb[256];
    const char *rest;
    int64_t l = layer_of(names[i], &rest);
    if (l >= m->cfg.n_layers)
      st = ag_error_set(AG_ERR_CORRUPT, "ag_llama_load: %s: tensor '%s' is of layer %lld, the model has n_layers %lld "
                        "(a deeper model's file)", ag_escape(path, pb, sizeof pb), ag_escape(names[i], nb, sizeof nb),
                        (long long)l, (long long)m->cfg.n_layers);
    else
      st = ag_error_set(AG_ERR_CORRUPT, "ag_llama_load: %s: tensor '%s' is not a parameter of the model (n_layers "
                        "%lld, %s embeddings)", ag_escape(path, pb, sizeof pb), ag_escape(names[i], nb, sizeof nb),
                        (long long)m->cfg.n_layers, m->cfg.untied_head ? "untied" : "tied");
  }
  free(own);
  return st;
}

ag_status ag_llama_load(ag_llama *m, const char *path) {
  if (!m || !path) return ag_error_set(AG_ERR_INVALID, "ag_llama_load: NULL argument");
  ag_safetensors *f = NULL;
  ag_status st = ag_safetensors_open(path, &f);
  if (st != AG_OK) return st;
  int n = ag_safetensors_count(f);
  const char **names = calloc((size_t)(n ? n : 1), sizeof *names);
  if (!names) st = ag_error_set(AG_ERR_OOM, "ag_llama_load: out of host memory");
  for (int i = 0; names && i < n; i++) names[i] = ag_safetensors_name(f, i);
  if (st == AG_OK) st = ag_llama_check_tying(m, n, names);
  if (st == AG_OK) st = check_extra(m, path, n, names);
  if (st == AG_OK) {
    ag_no_grad_begin();
    st = ag_safetensors_load_into(f, &m->params);
    ag_grad_mode_end();
  }
  free(names);
  ag_safetensors_close(f);
  return st;
}

void ag_llama_free(ag_llama *m) {
  if (!m) return;
  ag_embedding_free(&m->embed_tokens);
  for (int64_t i = 0; m->layers && i < m->cfg.n_layers; i++) {
    ag_llama_layer *l = &m->layers[i];
    ag_linear *lins[] = {&l->q_proj, &l->k_proj, &l->v_proj, &l->o_proj, &l->gate_proj, &l->up_proj, &l->down_proj};
    for (size_t k = 0; k < sizeof lins / sizeof *lins; k++) ag_linear_free(lins[k]);
    ag_tensor_release(l->input_layernorm);
    ag_tensor_release(l->post_attention_layernorm);
  }
  free(m->layers);
  ag_tensor_release(m->norm);
  ag_linear_free(&m->lm_head);
  ag_tensor_release(m->rope_cos);
  ag_tensor_release(m->rope_sin);
  ag_params_free(&m->params);
  memset(m, 0, sizeof *m);
}
