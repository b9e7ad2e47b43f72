/* Modules: parameter lists, Linear, Embedding, LayerNorm, activations, MLP,
 * causal self-attention and a small GPT, all built from public ops so they
 * run and differentiate on every backend. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "anygrad/amp.h"
#include "anygrad/autograd.h"
#include "anygrad/nn.h"
#include "tensor/autocast.h"
#include "autograd/grad_internal.h"

/* ---------------- parameter lists ---------------- */

/* A NULL module is always an error; a NULL tensor keeps an earlier error
 * (a chain of ops checked once) or says which call got it. */
static ag_tensor *null_input(const char *fn, const void *module, const ag_tensor *x) {
  if (!module) ag_error_set(AG_ERR_INVALID, "%s: NULL module", fn);
  else if (!x && ag_last_status() == AG_OK) ag_error_set(AG_ERR_INVALID, "%s: NULL tensor", fn);
  return NULL;
}

ag_status ag_params_add(ag_param_list *l, const char *name, ag_tensor *t) {
  if (!l || !name || !t) return ag_error_set(AG_ERR_INVALID, "ag_params_add: NULL argument");
  if (ag__bad_tensor(t, "ag_params_add")) return ag_last_status();
  if (l->count == l->cap) {
    int nc = l->cap ? l->cap * 2 : 16;
    ag_tensor **nt = realloc(l->tensors, (size_t)nc * sizeof *nt);
    if (!nt) return ag_error_set(AG_ERR_OOM, "ag_params_add: out of host memory");
    l->tensors = nt;
    char **nn = realloc(l->names, (size_t)nc * sizeof *nn);
    if (!nn) return ag_error_set(AG_ERR_OOM, "ag_params_add: out of host memory");
    l->names = nn;
    l->cap = nc;
  }
  char *s = strdup(name);
  if (!s) return ag_error_set(AG_ERR_OOM, "ag_params_add: out of host memory");
  l->names[l->count] = s;
  l->tensors[l->count++] = ag__hold(t);
  return AG_OK;
}

ag_status ag_params_extend(ag_param_list *l, const char *prefix, const ag_param_list *src) {
  if (!l || !src) return ag_error_set(AG_ERR_INVALID, "ag_params_extend: NULL argument");
  char buf[256];
  for (int i = 0; i < src->count; i++) {
    snprintf(buf, sizeof buf, "%s%s", prefix ? prefix : "", src->names[i]);
    ag_status st = ag_params_add(l, buf, src->tensors[i]);
    if (st != AG_OK) return st;
  }
  return AG_OK;
}

void ag_params_free(ag_param_list *l) {
  if (!l) return;
  for (int i = 0; i < l->count; i++) {
    ag__unhold(l->tensors[i]);
    free(l->names[i]);
  }
  free(l->tensors);
  free(l->names);
  memset(l, 0, sizeof *l);
}

ag_tensor *ag_params_find(const ag_param_list *l, const char *name) {
  if (!l || !name) return NULL;
  for (int i = 0; i < l->count; i++)
    if (!strcmp(l->names[i], name)) return l->tensors[i];
  return NULL;
}

int64_t ag_params_numel(const ag_param_list *l) {
  int64_t n = 0;
  for (int i = 0; l && i < l->count; i++) n += ag_tensor_numel(l->tensors[i]);
  return n;
}

void ag_params_zero_grad(const ag_param_list *l) {
  for (int i = 0; l && i < l->count; i++) ag_tensor_zero_grad(l->tensors[i]);
}

/* A fresh tensor becomes a parameter: owned outside any scope, counted as
 * parameter memory, requiring grad. Consumes t. */
static ag_tensor *make_param(ag_tensor *t) {
  if (!t) return NULL;
  ag__grad_own(t);
  ag__grad_tag(t, AG_MEM_PARAMETERS);
  if (ag_tensor_set_requires_grad(t, true) != AG_OK) {
    ag_tensor_release(t);
    return NULL;
  }
  return t;
}

static ag_tensor *param_uniform(ag_device d, ag_dtype dt, int nd, const int64_t *shape, double bound,
                                ag_generator *g) {
  ag_mem_category_push(AG_MEM_PARAMETERS);
  ag_tensor *t = ag_rand(d, dt, nd, shape, -bound, bound, g);
  ag_mem_category_pop();
  return make_param(t);
}

static ag_tensor *param_normal(ag_device d, ag_dtype dt, int nd, const int64_t *shape, double std,
                               ag_generator *g) {
  ag_mem_category_push(AG_MEM_PARAMETERS);
  ag_tensor *t = ag_randn(d, dt, nd, shape, 0.0, std, g);
  ag_mem_category_pop();
  return make_param(t);
}

static ag_tensor *param_full(ag_device d, ag_dtype dt, int nd, const int64_t *shape, double v) {
  ag_mem_category_push(AG_MEM_PARAMETERS);
  ag_tensor *t = ag_full(d, dt, nd, shape, v);
  ag_mem_category_pop();
  return make_param(t);
}

/* ---------------- Linear ---------------- */

ag_status ag_linear_init(ag_linear *m, ag_device d, ag_dtype dt, int64_t in, int64_t out, bool bias,
                         ag_generator *g) {
  if (!m) return ag_error_set(AG_ERR_INVALID, "ag_linear_init: NULL module");
  memset(m, 0, sizeof *m);
  if (in < 1 || out < 1)
    return ag_error_set(AG_ERR_SHAPE, "ag_linear_init: sizes must be >= 1 (in %lld, out %lld)",
                        (long long)in, (long long)out);
  double bound = 1.0 / sqrt((double)in);
  int64_t ws[2] = {out, in};
  m->weight = param_uniform(d, dt, 2, ws, bound, g);
  if (m->weight && bias) m->bias = param_uniform(d, dt, 1, &out, bound, g);
  if (!m->weight || (bias && !m->bias)) {
    ag_linear_free(m);
    return ag_last_status();
  }
  m->in = in;
  m->out = out;
  return AG_OK;
}

ag_tensor *ag_linear_forward(const ag_linear *m, ag_tensor *x) {
  if (!m || !x) return null_input("ag_linear_forward", m, x);
  /* Under autocast the layer is one low-precision op, as PyTorch's addmm:
   * weight and bias are cast once per region (cached, before the transpose
   * so the cache sees the parameter), and the bias add stays in half. */
  bool ac = ag_autocast_enabled();
  ag_dtype lo = ag_autocast_dtype();
  ag_tensor *w = ac ? ag__autocast_to(m->weight, lo) : m->weight;
  ag_tensor *b = ac && m->bias ? ag__autocast_to(m->bias, lo) : m->bias;
  ag_tensor *wt = w ? ag_transpose(w, 0, 1) : NULL;
  ag_tensor *r = wt ? ag__linear_addmm(x, wt, b) : NULL;
  ag_tensor_release(wt);
  if (ac) {
    ag_tensor_release(w);
    ag_tensor_release(b);
  }
  return r;
}

static ag_status add_named(ag_param_list *l, const char *prefix, const char *name, ag_tensor *t) {
  if (!t) return AG_OK;
  char buf[256];
  snprintf(buf, sizeof buf, "%s%s", prefix ? prefix : "", name);
  return ag_params_add(l, buf, t);
}

ag_status ag_linear_params(const ag_linear *m, const char *prefix, ag_param_list *l) {
  ag_status st = add_named(l, prefix, "weight", m->weight);
  return st == AG_OK ? add_named(l, prefix, "bias", m->bias) : st;
}

void ag_linear_free(ag_linear *m) {
  if (!m) return;
  ag_tensor_release(m->weight);
  ag_tensor_release(m->bias);
  memset(m, 0, sizeof *m);
}

/* ---------------- Embedding ---------------- */

ag_status ag_embedding_init(ag_embedding_layer *m, ag_device d, ag_dtype dt, int64_t num, int64_t dim,
                            ag_generator *g) {
  if (!m) return ag_error_set(AG_ERR_INVALID, "ag_embedding_init: NULL module");
  memset(m, 0, sizeof *m);
  if (num < 1 || dim < 1) return ag_error_set(AG_ERR_SHAPE, "ag_embedding_init: sizes must be >= 1");
  int64_t s[2] = {num, dim};
  m->weight = param_normal(d, dt, 2, s, 1.0, g);
  if (!m->weight) return ag_last_status();
  m->num = num;
  m->dim = dim;
  return AG_OK;
}

ag_tensor *ag_embedding_forward(const ag_embedding_layer *m, ag_tensor *indices) {
  if (!m) {
    ag_error_set(AG_ERR_INVALID, "ag_embedding_forward: NULL layer");
    return NULL;
  }
  return ag_embedding(m->weight, indices);
}

ag_status ag_embedding_params(const ag_embedding_layer *m, const char *prefix, ag_param_list *l) {
  return add_named(l, prefix, "weight", m->weight);
}

void ag_embedding_free(ag_embedding_layer *m) {
  if (!m) return;
  ag_tensor_release(m->weight);
  memset(m, 0, sizeof *m);
}

/* ---------------- LayerNorm ---------------- */

ag_status ag_layer_norm_init(ag_layer_norm_layer *m, ag_device d, ag_dtype dt, int64_t dim, double eps) {
  if (!m) return ag_error_set(AG_ERR_INVALID, "ag_layer_norm_init: NULL module");
  memset(m, 0, sizeof *m);
  if (dim < 1) return ag_error_set(AG_ERR_SHAPE, "ag_layer_norm_init: dim must be >= 1");
  if (!(eps >= 0) || isinf(eps))
    return ag_error_set(AG_ERR_INVALID, "ag_layer_norm_init: eps must be finite and >= 0, got %g", eps);
  m->weight = param_full(d, dt, 1, &dim, 1.0);
  m->bias = m->weight ? param_full(d, dt, 1, &dim, 0.0) : NULL;
  if (!m->bias) {
    ag_layer_norm_free(m);
    return ag_last_status();
  }
  m->dim = dim;
  m->eps = eps;
  return AG_OK;
}

ag_tensor *ag_layer_norm_forward(const ag_layer_norm_layer *m, ag_tensor *x) {
  if (!m) {
    ag_error_set(AG_ERR_INVALID, "ag_layer_norm_forward: NULL layer");
    return NULL;
  }
  return ag_layer_norm(x, m->weight, m->bias, m->eps);
}

ag_status ag_layer_norm_params(const ag_layer_norm_layer *m, const char *prefix, ag_param_list *l) {
  ag_status st = add_named(l, prefix, "weight", m->weight);
  return st == AG_OK ? add_named(l, prefix, "bias", m->bias) : st;
}

void ag_layer_norm_free(ag_layer_norm_layer *m) {
  if (!m) return;
  ag_tensor_release(m->weight);
  ag_tensor_release(m->bias);
  memset(m, 0, sizeof *m);
}

/* ---------------- activations, dropout ---------------- */

ag_tensor *ag_activation_forward(ag_activation act, ag_tensor *x) {
  if (!x) {
    if (ag_last_status() == AG_OK) ag_error_set(AG_ERR_INVALID, "ag_activation_forward: NULL tensor");
    return NULL;
  }
  switch (act) {
    case AG_ACT_NONE: return ag_view(x, x->ndim, x->shape);
    case AG_ACT_RELU: return ag_relu(x);
    case AG_ACT_GELU: return ag_gelu(x);
    case AG_ACT_TANH: return ag_tanh(x);
    case AG_ACT_SILU: return ag_silu(x);
    case AG_ACT_SIGMOID: return ag_sigmoid(x);
  }
  ag_error_set(AG_ERR_INVALID, "ag_activation_forward: unknown activation %d", (int)act);
  return NULL;
}

ag_tensor *ag_dropout_forward(double p, ag_tensor *x, bool train, ag_generator *g) {
  if (!x) {
    if (ag_last_status() == AG_OK) ag_error_set(AG_ERR_INVALID, "ag_dropout_forward: NULL tensor");
    return NULL;
  }
  /* A new header rather than x retained: the result belongs to the current
   * scope like any op output. */
  if (!train || p == 0.0) return ag_view(x, x->ndim, x->shape);
  return ag_dropout(x, p, train, g);
}

/* ---------------- MLP ---------------- */

ag_status ag_mlp_init(ag_mlp *m, ag_device d, ag_dtype dt, int n_sizes, const int64_t *sizes,
                      ag_activation act, ag_generator *g) {
  if (!m) return ag_error_set(AG_ERR_INVALID, "ag_mlp_init: NULL module");
  memset(m, 0, sizeof *m);
  if (n_sizes < 2 || !sizes) return ag_error_set(AG_ERR_INVALID, "ag_mlp_init: need at least 2 sizes");
  m->layers = calloc((size_t)(n_sizes - 1), sizeof *m->layers);
  if (!m->layers) return ag_error_set(AG_ERR_OOM, "ag_mlp_init: out of host memory");
  m->act = act;
  ag_status st = AG_OK;
  for (int i = 0; i < n_sizes - 1 && st == AG_OK; i++) {
    st = ag_linear_init(&m->layers[i], d, dt, sizes[i], sizes[i + 1], true, g);
    if (st != AG_OK) break;
    m->n_layers++;
    char prefix[32];
    snprintf(prefix, sizeof prefix, "%d.", 2 * i);
    st = ag_linear_params(&m->layers[i], prefix, &m->params);
  }
  if (st != AG_OK) ag_mlp_free(m);
  return st;
}

ag_tensor *ag_mlp_forward(const ag_mlp *m, ag_tensor *x) {
  if (!m || !x) return null_input("ag_mlp_forward", m, x);
  ag_tensor *h = x;
  for (int i = 0; i < m->n_layers && h; i++) {
    ag_tensor *y = ag_linear_forward(&m->layers[i], h);
    if (h != x) ag_tensor_release(h);
    h = y;
    if (h && i + 1 < m->n_layers) {
      y = ag_activation_forward(m->act, h);
      ag_tensor_release(h);
      h = y;
    }
  }
  return h;
}

void ag_mlp_free(ag_mlp *m) {
  if (!m) return;
  for (int i = 0; i < m->n_layers; i++) ag_linear_free(&m->layers[i]);
  free(m->layers);
  ag_params_free(&m->params);
  memset(m, 0, sizeof *m);
}

/* ---------------- causal self-attention ---------------- */

ag_status ag_causal_attention_init(ag_causal_attention *m, ag_device d, ag_dtype dt, int64_t dim,
                                   int n_head, int64_t max_len, double dropout, ag_generator *g) {
  if (!m) return ag_error_set(AG_ERR_INVALID, "ag_causal_attention_init: NULL module");
  memset(m, 0, sizeof *m);
  if (n_head < 1 || dim < 1 || max_len < 1 || dim % n_head)
    return ag_error_set(AG_ERR_SHAPE, "ag_causal_attention_init: dim %lld must be a positive multiple of "
                        "n_head %d", (long long)dim, n_head);
  ag_status st = ag_linear_init(&m->qkv, d, dt, dim, 3 * dim, true, g);
  if (st == AG_OK) st = ag_linear_init(&m->proj, d, dt, dim, dim, true, g);
  if (st == AG_OK) {
    float *h = calloc((size_t)(max_len * max_len), sizeof *h);
    if (!h) st = ag_error_set(AG_ERR_OOM, "ag_causal_attention_init: out of host memory");
    for (int64_t i = 0; h && i < max_len; i++)
      for (int64_t j = i + 1; j < max_len; j++) h[i * max_len + j] = 1.0f;
    int64_t s[2] = {max_len, max_len};
    if (h) {
      ag_tensor *mf = ag_from_host(d, AG_F32, 2, s, h);
      m->mask = ag__grad_own(mf ? ag_cast(mf, dt) : NULL);
      ag_tensor_release(mf);
      ag__grad_tag(m->mask, AG_MEM_PARAMETERS); /* module state, like a torch buffer */
      if (!m->mask) st = ag_last_status();
    }
    free(h);
  }
  m->n_head = n_head;
  m->dim = dim;
  m->max_len = max_len;
  m->dropout = dropout;
  if (st != AG_OK) ag_causal_attention_free(m);
  return st;
}

/* [B, T, C] slice of the fused qkv output -> [B, H, T, C/H]. */
static ag_tensor *heads(ag_tensor *qkv, int64_t which, int64_t C, int H) {
  int64_t B = qkv->shape[0], T = qkv->shape[1];
  ag_tensor *s = ag_slice(qkv, 2, which * C, (which + 1) * C, 1);
  int64_t sh[4] = {B, T, H, C / H};
  ag_tensor *r = ag_reshape(s, 4, sh);
  int perm[4] = {0, 2, 1, 3};
  ag_tensor *p = ag_permute(r, perm);
  ag_tensor_release(s);
  ag_tensor_release(r);
  return p;
}

ag_tensor *ag_causal_attention_forward(const ag_causal_attention *m, ag_tensor *x, bool train,
                                       ag_generator *g) {
  if (!m || !x) return null_input("ag_causal_attention_forward", m, x);
  if (x->ndim != 3 || x->shape[2] != m->dim || x->shape[1] > m->max_len) {
    char b[96];
    ag_error_set(AG_ERR_SHAPE, "ag_causal_attention_forward: expected [B, T<=%lld, %lld], got %s",
                 (long long)m->max_len, (long long)m->dim, ag_tensor_describe(x, b, sizeof b));
    return NULL;
  }
  int64_t B = x->shape[0], T = x->shape[1], C = m->dim;
  int H = m->n_head;
  ag_tensor *qkv = ag_linear_forward(&m->qkv, x);
  if (!qkv) return NULL;
  ag_tensor *q = heads(qkv, 0, C, H), *k = heads(qkv, 1, C, H), *v = heads(qkv, 2, C, H);
  ag_tensor_release(qkv);
  ag_tensor *kt = ag_transpose(k, 2, 3);
  ag_tensor *att = ag_matmul(q, kt);
  ag_tensor *scaled = ag_mul_scalar(att, 1.0 / sqrt((double)(C / H)));
  ag_tensor *m1 = ag_slice(m->mask, 0, 0, T, 1), *mask = ag_slice(m1, 1, 0, T, 1);
  ag_tensor *masked = ag_masked_fill(scaled, mask, -INFINITY);
  ag_tensor *p = ag_softmax(masked, -1);
  ag_tensor *pd = ag_dropout_forward(m->dropout, p, train, g);
  ag_tensor *y = ag_matmul(pd, v);
  int perm[4] = {0, 2, 1, 3};
  ag_tensor *yt = ag_permute(y, perm);
  int64_t sh[3] = {B, T, C};
  ag_tensor *yr = ag_reshape(yt, 3, sh);
  ag_tensor *out = ag_linear_forward(&m->proj, yr);
  ag_tensor *rel[] = {q, k, v, kt, att, scaled, m1, mask, masked, p, pd, y, yt, yr};
  for (size_t i = 0; i < sizeof rel / sizeof *rel; i++) ag_tensor_release(rel[i]);
  return out;
}

ag_status ag_causal_attention_params(const ag_causal_attention *m, const char *prefix, ag_param_list *l) {
  char buf[200];
  snprintf(buf, sizeof buf, "%sqkv.", prefix ? prefix : "");
  ag_status st = ag_linear_params(&m->qkv, buf, l);
  snprintf(buf, sizeof buf, "%sproj.", prefix ? prefix : "");
  return st == AG_OK ? ag_linear_params(&m->proj, buf, l) : st;
}

void ag_causal_attention_free(ag_causal_attention *m) {
  if (!m) return;
  ag_linear_free(&m->qkv);
  ag_linear_free(&m->proj);
  ag_tensor_release(m->mask);
  memset(m, 0, sizeof *m);
}

/* ---------------- GPT ---------------- */

/* Re-draw a parameter in place from N(0, std) (GPT-2 init), or zero it. */
static ag_status reinit(ag_tensor *t, double std, ag_generator *g) {
  if (!t) return AG_OK;
  if (std == 0.0) return ag_fill_(t, 0.0);
  ag_tensor *r = ag_randn(ag_tensor_device(t), ag_tensor_dtype(t), ag_tensor_ndim(t), ag_tensor_shape(t),
                          0.0, std, g);
  ag_status st = r ? ag_copy_(t, r) : ag_last_status();
  ag_tensor_release(r);
  return st;
}

ag_status ag_gpt_init(ag_gpt *m, const ag_gpt_config *cfg, ag_device d, ag_dtype dt, ag_generator *g) {
  if (!m || !cfg) return ag_error_set(AG_ERR_INVALID, "ag_gpt_init: NULL argument");
  memset(m, 0, sizeof *m);
  if (cfg->vocab_size < 1 || cfg->block_size < 1 || cfg->n_layer < 1 || cfg->n_head < 1 ||
      cfg->n_embd % cfg->n_head)
    return ag_error_set(AG_ERR_SHAPE, "ag_gpt_init: bad config (n_embd %lld must be a multiple of n_head %d)",
                        (long long)cfg->n_embd, cfg->n_head);
  m->cfg = *cfg;
  int64_t C = cfg->n_embd;
  double std = 0.02, pstd = 0.02 / sqrt(2.0 * (double)cfg->n_layer);
  m->blocks = calloc((size_t)cfg->n_layer, sizeof *m->blocks);
  if (!m->blocks) return ag_error_set(AG_ERR_OOM, "ag_gpt_init: out of host memory");
  ag_no_grad_begin(); /* in-place re-initialisation of leaves */
  ag_status st = ag_embedding_init(&m->wte, d, dt, cfg->vocab_size, C, g);
  if (st == AG_OK) st = ag_embedding_init(&m->wpe, d, dt, cfg->block_size, C, g);
  if (st == AG_OK) st = reinit(m->wte.weight, std, g);
  if (st == AG_OK) st = reinit(m->wpe.weight, std, g);
  if (st == AG_OK) st = ag_params_add(&m->params, "wte.weight", m->wte.weight);
  if (st == AG_OK) st = ag_params_add(&m->params, "wpe.weight", m->wpe.weight);
  for (int64_t i = 0; i < cfg->n_layer && st == AG_OK; i++) {
    ag_gpt_block *b = &m->blocks[i];
    char p[64];
    st = ag_layer_norm_init(&b->ln1, d, dt, C, 1e-5);
    if (st == AG_OK) st = ag_causal_attention_init(&b->attn, d, dt, C, cfg->n_head, cfg->block_size,
                                                   cfg->dropout, g);
    if (st == AG_OK) st = ag_layer_norm_init(&b->ln2, d, dt, C, 1e-5);
    if (st == AG_OK) st = ag_linear_init(&b->fc, d, dt, C, 4 * C, true, g);
    if (st == AG_OK) st = ag_linear_init(&b->proj, d, dt, 4 * C, C, true, g);
    ag_tensor *w[] = {b->attn.qkv.weight, b->attn.proj.weight, b->fc.weight, b->proj.weight};
    double s[] = {std, pstd, std, pstd};
    ag_tensor *z[] = {b->attn.qkv.bias, b->attn.proj.bias, b->fc.bias, b->proj.bias};
    for (int k = 0; k < 4 && st == AG_OK; k++) st = reinit(w[k], s[k], g);
    for (int k = 0; k < 4 && st == AG_OK; k++) st = reinit(z[k], 0.0, g);
    snprintf(p, sizeof p, "h.%lld.ln1.", (long long)i);
    if (st == AG_OK) st = ag_layer_norm_params(&b->ln1, p, &m->params);
    snprintf(p, sizeof p, "h.%lld.attn.", (long long)i);
    if (st == AG_OK) st = ag_causal_attention_params(&b->attn, p, &m->params);
    snprintf(p, sizeof p, "h.%lld.ln2.", (long long)i);
    if (st == AG_OK) st = ag_layer_norm_params(&b->ln2, p, &m->params);
    snprintf(p, sizeof p, "h.%lld.fc.", (long long)i);
    if (st == AG_OK) st = ag_linear_params(&b->fc, p, &m->params);
    snprintf(p, sizeof p, "h.%lld.proj.", (long long)i);
    if (st == AG_OK) st = ag_linear_params(&b->proj, p, &m->params);
  }
  if (st == AG_OK) st = ag_layer_norm_init(&m->ln_f, d, dt, C, 1e-5);
  if (st == AG_OK) st = ag_layer_norm_params(&m->ln_f, "ln_f.", &m->params);
  if (st == AG_OK && cfg->untied_head) {
    st = ag_linear_init(&m->head, d, dt, C, cfg->vocab_size, false, g);
    if (st == AG_OK) st = reinit(m->head.weight, std, g);
    if (st == AG_OK) st = ag_linear_params(&m->head, "head.", &m->params);
  } else if (st == AG_OK) { /* the same tensor: autograd sums its gradient over both uses */
    m->head = (ag_linear){.weight = ag_tensor_retain(m->wte.weight), .in = C, .out = cfg->vocab_size};
    if (!m->head.weight) st = ag_last_status();
  }
  if (st == AG_OK) {
    m->pos = ag__grad_own(ag_arange(d, AG_I32, 0, (double)cfg->block_size, 1));
    ag__grad_tag(m->pos, AG_MEM_PARAMETERS);
    if (!m->pos) st = ag_last_status();
  }
  ag_grad_mode_end();
  if (st != AG_OK) ag_gpt_free(m);
  return st;
}

/* One transformer block: x1 = x + attn(ln1(x)), then y = x1 + mlp(ln2(x1)).
 * With checkpointing, the attention half and the MLP half are checkpointed
 * separately (each an ag_checkpoint_fn that leaves its input to the
 * caller), the residual adds outside them: a re-run then holds one half's
 * activations, not the whole block's, and each keeps only its input. */
typedef struct gpt_block_ctx {
  const ag_gpt *m;
  const ag_gpt_block *b;
  bool train;
  ag_generator *g;
} gpt_block_ctx;

static ag_tensor *gpt_attn_fn(void *ctx, int n_inputs, ag_tensor *const *inputs) {
  const gpt_block_ctx *c = ctx;
  (void)n_inputs;
  ag_tensor *h = ag_layer_norm_forward(&c->b->ln1, inputs[0]);
  ag_tensor *a = ag_causal_attention_forward(&c->b->attn, h, c->train, c->g);
  ag_tensor *ad = ag_dropout_forward(c->m->cfg.dropout, a, c->train, c->g);
  ag_tensor_release(h);
  ag_tensor_release(a);
  return ad;
}

static ag_tensor *gpt_mlp_fn(void *ctx, int n_inputs, ag_tensor *const *inputs) {
  const gpt_block_ctx *c = ctx;
  (void)n_inputs;
  ag_tensor *h = ag_layer_norm_forward(&c->b->ln2, inputs[0]);
  ag_tensor *f = ag_linear_forward(&c->b->fc, h);
  ag_tensor *ge = ag_gelu(f);
  ag_tensor *pr = ag_linear_forward(&c->b->proj, ge);
  ag_tensor *pd = ag_dropout_forward(c->m->cfg.dropout, pr, c->train, c->g);
  ag_tensor *rel[] = {h, f, ge, pr};
  for (size_t k = 0; k < sizeof rel / sizeof *rel; k++) ag_tensor_release(rel[k]);
  return pd;
}

static ag_tensor *gpt_block(const gpt_block_ctx *c, ag_tensor *x) {
  bool ck = c->m->cfg.checkpoint;
  ag_tensor *a = ck ? ag_checkpoint(gpt_attn_fn, c, sizeof *c, c->g, 1, &x) : gpt_attn_fn((void *)c, 1, &x);
  ag_tensor *x1 = ag_add(x, a);
  ag_tensor_release(a);
  if (!x1) return NULL;
  ag_tensor *f = ck ? ag_checkpoint(gpt_mlp_fn, c, sizeof *c, c->g, 1, &x1) : gpt_mlp_fn((void *)c, 1, &x1);
  ag_tensor *y = ag_add(x1, f);
  ag_tensor_release(x1);
  ag_tensor_release(f);
  return y;
}

ag_tensor *ag_gpt_forward(const ag_gpt *m, ag_tensor *idx, bool train, ag_generator *g) {
  if (!m || !idx) return null_input("ag_gpt_forward", m, idx);
  if (idx->ndim != 2 || idx->shape[1] > m->cfg.block_size) {
    char b[96];
    ag_error_set(AG_ERR_SHAPE, "ag_gpt_forward: expected i32 [B, T<=%lld], got %s",
                 (long long)m->cfg.block_size, ag_tensor_describe(idx, b, sizeof b));
    return NULL;
  }
  int64_t T = idx->shape[1];
  ag_tensor *tok = ag_embedding(m->wte.weight, idx);
  ag_tensor *pi = ag_slice(m->pos, 0, 0, T, 1);
  ag_tensor *pos = ag_embedding(m->wpe.weight, pi);
  ag_tensor *x = ag_add(tok, pos);
  ag_tensor *d0 = ag_dropout_forward(m->cfg.dropout, x, train, g);
  ag_tensor_release(tok);
  ag_tensor_release(pi);
  ag_tensor_release(pos);
  ag_tensor_release(x);
  x = d0;
  for (int64_t i = 0; i < m->cfg.n_layer && x; i++) {
    gpt_block_ctx c = {m, &m->blocks[i], train, g};
    ag_tensor *y = gpt_block(&c, x);
    ag_tensor_release(x);
    x = y;
  }
  ag_tensor *xf = ag_layer_norm_forward(&m->ln_f, x);
  ag_tensor *logits = ag_linear_forward(&m->head, xf);
  ag_tensor_release(x);
  ag_tensor_release(xf);
  return logits;
}

ag_status ag_gpt_check_tying(const ag_gpt *m, int n, const char *const *names, const char *prefix) {
  if (!m || (n > 0 && !names)) return ag_error_set(AG_ERR_INVALID, "ag_gpt_check_tying: NULL argument");
  if (!prefix) prefix = "";
  size_t pl = strlen(prefix);
  bool has_head = false;
  for (int i = 0; i < n && !has_head; i++)
    has_head = names[i] && !strncmp(names[i], prefix, pl) && !strcmp(names[i] + pl, "head.weight");
  if (has_head && !m->cfg.untied_head)
    return ag_error_set(AG_ERR_CORRUPT,
                        "ag_gpt_check_tying: the checkpoint has a separate %shead.weight (an untied head) but the "
                        "model ties its head to wte.weight; build it with cfg.untied_head = true", prefix);
  if (!has_head && m->cfg.untied_head)
    return ag_error_set(AG_ERR_CORRUPT,
                        "ag_gpt_check_tying: the checkpoint has no %shead.weight (its head is tied to wte.weight) "
                        "but the model has a separate head; build it with cfg.untied_head = false", prefix);
  return AG_OK;
}

void ag_gpt_free(ag_gpt *m) {
  if (!m) return;
  ag_embedding_free(&m->wte);
  ag_embedding_free(&m->wpe);
  for (int64_t i = 0; m->blocks && i < m->cfg.n_layer; i++) {
    ag_gpt_block *b = &m->blocks[i];
    ag_layer_norm_free(&b->ln1);
    ag_layer_norm_free(&b->ln2);
    ag_causal_attention_free(&b->attn);
    ag_linear_free(&b->fc);
    ag_linear_free(&b->proj);
  }
  free(m->blocks);
  ag_layer_norm_free(&m->ln_f);
  ag_linear_free(&m->head);
  ag_tensor_release(m->pos);
  ag_params_free(&m->params);
  memset(m, 0, sizeof *m);
}
