/* Character-level language model on a word list: the training job behind
 * `anygrad train`. Everything device-side goes through the public API; the
 * host reads values only to print progress, evaluate and sample. */
#include "charlm.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The allocator statistics are optional at link time: without them the
 * progress line shows no memory figure. */
#pragma weak ag_memory_stats_get

/* ---------------- host random numbers (batches, sampling) ---------------- */

static uint64_t splitmix(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static double urand(uint64_t *s) { return (double)(splitmix(s) >> 11) * (1.0 / 9007199254740992.0); }

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---------------- data ---------------- */

typedef struct dataset {
  int n_words;
  char **words;
  /* MLP: one example per character position (including the final '.') */
  int64_t n_ex;
  int32_t *ctx, *tgt;
  /* GPT: one padded sequence per word */
  int32_t *seq_x, *seq_y;
} dataset;

static void dataset_free(dataset *d) {
  for (int i = 0; i < d->n_words; i++) free(d->words[i]);
  free(d->words);
  free(d->ctx);
  free(d->tgt);
  free(d->seq_x);
  free(d->seq_y);
  memset(d, 0, sizeof *d);
}

static int char_id(char c) { return c == '.' ? 0 : c - 'a' + 1; }

/* Lower-case a-z words only (the word list also holds names and
 * possessives), shuffled with the seed. */
static ag_status load_words(const char *path, uint64_t seed, char ***out, int *out_n) {
  FILE *f = fopen(path, "r");
  if (!f) return ag_error_set(AG_ERR_IO, "charlm: cannot open %s (Debian: apt-get install wamerican)", path);
  char line[256];
  int n = 0, cap = 0;
  char **w = NULL;
  while (fgets(line, sizeof line, f)) {
    size_t len = strcspn(line, "\r\n");
    line[len] = 0;
    bool ok = len > 0 && len <= CHARLM_MAX_WORD;
    for (size_t i = 0; ok && i < len; i++) ok = line[i] >= 'a' && line[i] <= 'z';
    if (!ok) continue;
    if (n == cap) {
      cap = cap ? cap * 2 : 4096;
      char **nw = realloc(w, (size_t)cap * sizeof *nw);
      if (!nw) break;
      w = nw;
    }
    w[n] = strdup(line);
    if (!w[n]) break;
    n++;
  }
  fclose(f);
  if (n < 100) {
    for (int i = 0; i < n; i++) free(w[i]);
    free(w);
    return ag_error_set(AG_ERR_IO, "charlm: %s holds only %d usable words", path, n);
  }
  uint64_t s = seed ^ 0x5eedull;
  for (int i = n - 1; i > 0; i--) {
    int j = (int)(splitmix(&s) % (uint64_t)(i + 1));
    char *t = w[i];
    w[i] = w[j];
    w[j] = t;
  }
  *out = w;
  *out_n = n;
  return AG_OK;
}

static ag_status build(dataset *d, char **words, int n, int context, int T) {
  d->words = words;
  d->n_words = n;
  int64_t total = 0;
  for (int i = 0; i < n; i++) total += (int64_t)strlen(words[i]) + 1;
  d->n_ex = total;
  d->ctx = malloc((size_t)total * (size_t)context * sizeof(int32_t));
  d->tgt = malloc((size_t)total * sizeof(int32_t));
  d->seq_x = malloc((size_t)n * (size_t)T * sizeof(int32_t));
  d->seq_y = malloc((size_t)n * (size_t)T * sizeof(int32_t));
  if (!d->ctx || !d->tgt || !d->seq_x || !d->seq_y) return ag_error_set(AG_ERR_OOM, "charlm: out of host memory");
  int64_t e = 0;
  for (int i = 0; i < n; i++) {
    const char *w = words[i];
    int len = (int)strlen(w);
    int32_t win[64] = {0};
    for (int p = 0; p <= len; p++) {
      int32_t t = p < len ? char_id(w[p]) : 0;
      memcpy(d->ctx + e * context, win, (size_t)context * sizeof(int32_t));
      d->tgt[e++] = t;
      memmove(win, win + 1, (size_t)(context - 1) * sizeof(int32_t));
      win[context - 1] = t;
    }
    int32_t *x = d->seq_x + (int64_t)i * T, *y = d->seq_y + (int64_t)i * T;
    for (int p = 0; p < T; p++) {
      x[p] = p == 0 ? 0 : (p <= len ? char_id(w[p - 1]) : 0);
      y[p] = p < len ? char_id(w[p]) : (p == len ? 0 : -1);
    }
  }
  return AG_OK;
}

/* ---------------- model ---------------- */

typedef struct model {
  charlm_model_kind kind;
  int context, T;
  ag_embedding_layer emb;
  ag_linear l1, l2;
  ag_gpt gpt;
  ag_param_list params;
} model;

static void model_free(model *m) {
  ag_embedding_free(&m->emb);
  ag_linear_free(&m->l1);
  ag_linear_free(&m->l2);
  if (m->kind == CHARLM_GPT) ag_gpt_free(&m->gpt);
  ag_params_free(&m->params);
}

static ag_status model_init(model *m, const charlm_options *o, ag_generator *g) {
  memset(m, 0, sizeof *m);
  m->kind = o->model;
  m->context = o->context;
  m->T = CHARLM_MAX_WORD + 2;
  ag_status st;
  if (o->model == CHARLM_MLP) {
    st = ag_embedding_init(&m->emb, o->device, AG_F32, CHARLM_VOCAB, o->emb, g);
    if (st == AG_OK) st = ag_linear_init(&m->l1, o->device, AG_F32, (int64_t)o->context * o->emb, o->hidden, true, g);
    if (st == AG_OK) st = ag_linear_init(&m->l2, o->device, AG_F32, o->hidden, CHARLM_VOCAB, true, g);
    if (st == AG_OK) st = ag_embedding_params(&m->emb, "emb.", &m->params);
    if (st == AG_OK) st = ag_linear_params(&m->l1, "fc1.", &m->params);
    if (st == AG_OK) st = ag_linear_params(&m->l2, "fc2.", &m->params);
  } else {
    ag_gpt_config c = {.vocab_size = CHARLM_VOCAB, .block_size = m->T, .n_layer = o->n_layer,
                       .n_embd = o->n_embd, .n_head = o->n_head, .dropout = 0.0};
    st = ag_gpt_init(&m->gpt, &c, o->device, AG_F32, g);
    if (st == AG_OK) st = ag_params_extend(&m->params, "", &m->gpt.params);
  }
  if (st != AG_OK) model_free(m);
  return st;
}

/* Logits as [rows, vocab] for input x (MLP: [B, context], GPT: [B, t]). */
static ag_tensor *model_logits(const model *m, ag_tensor *x) {
  if (m->kind == CHARLM_MLP) {
    int64_t B = ag_tensor_dim(x, 0);
    ag_tensor *e = ag_embedding_forward(&m->emb, x);
    int64_t s[2] = {B, ag_tensor_dim(x, 1) * m->emb.dim};
    ag_tensor *ef = ag_reshape(e, 2, s);
    ag_tensor *h = ag_linear_forward(&m->l1, ef);
    ag_tensor *a = ag_tanh(h);
    ag_tensor *y = ag_linear_forward(&m->l2, a);
    ag_tensor_release(e);
    ag_tensor_release(ef);
    ag_tensor_release(h);
    ag_tensor_release(a);
    return y;
  }
  ag_tensor *l = ag_gpt_forward(&m->gpt, x, true, NULL);
  int64_t s[2] = {-1, CHARLM_VOCAB};
  ag_tensor *r = ag_reshape(l, 2, s);
  ag_tensor_release(l);
  return r;
}

/* One micro-batch drawn with rng: input and flat targets on the device. */
static ag_status make_batch(const model *m, const dataset *d, int64_t B, uint64_t *rng, ag_device dev,
                            ag_tensor **x, ag_tensor **y) {
  int cols = m->kind == CHARLM_MLP ? m->context : m->T;
  int ycols = m->kind == CHARLM_MLP ? 1 : m->T;
  int32_t *hx = malloc((size_t)(B * cols) * sizeof *hx), *hy = malloc((size_t)(B * ycols) * sizeof *hy);
  if (!hx || !hy) {
    free(hx);
    free(hy);
    return ag_error_set(AG_ERR_OOM, "charlm: out of host memory");
  }
  for (int64_t b = 0; b < B; b++) {
    if (m->kind == CHARLM_MLP) {
      int64_t i = (int64_t)(splitmix(rng) % (uint64_t)d->n_ex);
      memcpy(hx + b * cols, d->ctx + i * cols, (size_t)cols * sizeof *hx);
      hy[b] = d->tgt[i];
    } else {
      int64_t i = (int64_t)(splitmix(rng) % (uint64_t)d->n_words);
      memcpy(hx + b * cols, d->seq_x + i * cols, (size_t)cols * sizeof *hx);
      memcpy(hy + b * cols, d->seq_y + i * cols, (size_t)cols * sizeof *hy);
    }
  }
  int64_t sx[2] = {B, cols}, sy[1] = {B * ycols};
  *x = ag_from_host(dev, AG_I32, 2, sx, hx);
  *y = ag_from_host(dev, AG_I32, 1, sy, hy);
  free(hx);
  free(hy);
  return *x && *y ? AG_OK : ag_last_status();
}

static ag_tensor *batch_loss(const model *m, ag_tensor *x, ag_tensor *y) {
  ag_tensor *logits = model_logits(m, x);
  ag_tensor *loss = ag_cross_entropy(logits, y, AG_REDUCTION_MEAN, -1);
  ag_tensor_release(logits);
  return loss;
}

static double evaluate(const model *m, const dataset *val, int batches, int64_t B, ag_device dev, ag_status *st) {
  uint64_t rng = 12345;
  double sum = 0;
  ag_inference_mode_begin();
  for (int i = 0; i < batches && *st == AG_OK; i++) {
    ag_scope_begin();
    ag_tensor *x, *y;
    *st = make_batch(m, val, B, &rng, dev, &x, &y);
    if (*st == AG_OK) {
      double l = ag_item(batch_loss(m, x, y));
      if (isnan(l) && ag_last_status() != AG_OK) *st = ag_last_status();
      sum += l;
    }
    ag_scope_end();
  }
  ag_grad_mode_end();
  return sum / (batches > 0 ? batches : 1);
}

/* Sample one word: feed '.'-context, draw from softmax until '.'. */
static ag_status sample_word(const model *m, ag_device dev, uint64_t *rng, char *out, size_t cap) {
  int32_t ctx[64] = {0}, seq[CHARLM_MAX_WORD + 2] = {0};
  size_t n = 0;
  ag_status st = AG_OK;
  ag_inference_mode_begin();
  while (n + 1 < cap && n < CHARLM_MAX_WORD && st == AG_OK) {
    ag_scope_begin();
    ag_tensor *x;
    if (m->kind == CHARLM_MLP) {
      int64_t s[2] = {1, m->context};
      x = ag_from_host(dev, AG_I32, 2, s, ctx);
    } else {
      int64_t s[2] = {1, (int64_t)n + 1};
      x = ag_from_host(dev, AG_I32, 2, s, seq);
    }
    ag_tensor *logits = model_logits(m, x);
    ag_tensor *last = logits ? ag_slice(logits, 0, -1, ag_tensor_dim(logits, 0), 1) : NULL;
    ag_tensor *p = ag_softmax(last, -1);
    float probs[CHARLM_VOCAB];
    st = p ? ag_to_host(p, probs, sizeof probs) : ag_last_status();
    ag_scope_end();
    if (st != AG_OK) break;
    double u = urand(rng), acc = 0;
    int c = CHARLM_VOCAB - 1;
    for (int k = 0; k < CHARLM_VOCAB; k++) {
      acc += probs[k];
      if (u < acc) {
        c = k;
        break;
      }
    }
    if (c == 0) break;
    out[n++] = (char)('a' + c - 1);
    memmove(ctx, ctx + 1, (size_t)(m->context - 1) * sizeof *ctx);
    ctx[m->context - 1] = c;
    seq[n] = c;
  }
  ag_grad_mode_end();
  out[n] = 0;
  return st;
}

/* ---------------- checkpoints ---------------- */

static ag_status save_ckpt(const char *path, const model *m, ag_optimizer *opt, const charlm_options *o,
                           int64_t step) {
  ag_param_list all = {0}, st_list = {0};
  ag_status st = ag_params_extend(&all, "model.", &m->params);
  if (st == AG_OK) st = ag_optimizer_state(opt, &st_list);
  if (st == AG_OK) st = ag_params_extend(&all, "optim.", &st_list);
  char v[8][32];
  snprintf(v[0], 32, "%lld", (long long)step);
  snprintf(v[1], 32, "%d", o->context);
  snprintf(v[2], 32, "%d", o->emb);
  snprintf(v[3], 32, "%d", o->hidden);
  snprintf(v[4], 32, "%d", o->n_layer);
  snprintf(v[5], 32, "%d", o->n_head);
  snprintf(v[6], 32, "%d", o->n_embd);
  snprintf(v[7], 32, "%llu", (unsigned long long)o->seed);
  const char *keys[] = {"format", "model", "step", "context", "emb", "hidden", "n_layer", "n_head", "n_embd", "seed"};
  const char *vals[] = {"anygrad-charlm-1", o->model == CHARLM_MLP ? "mlp" : "gpt", v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]};
  if (st == AG_OK) st = ag_safetensors_save(path, &all, 10, keys, vals);
  ag_params_free(&all);
  ag_params_free(&st_list);
  return st;
}

static int meta_int(const ag_safetensors *f, const char *k, int dflt) {
  const char *v = ag_safetensors_meta(f, k);
  return v ? atoi(v) : dflt;
}

/* Architecture recorded in a checkpoint, so --resume needs no model flags. */
static ag_status ckpt_config(const char *path, charlm_options *o, ag_safetensors **out) {
  ag_status st = ag_safetensors_open(path, out);
  if (st != AG_OK) return st;
  const char *fmt = ag_safetensors_meta(*out, "format"), *kind = ag_safetensors_meta(*out, "model");
  if (!fmt || strcmp(fmt, "anygrad-charlm-1") || !kind) {
    ag_safetensors_close(*out);
    *out = NULL;
    return ag_error_set(AG_ERR_CORRUPT, "%s: not a charlm checkpoint (metadata format/model missing)", path);
  }
  o->model = !strcmp(kind, "gpt") ? CHARLM_GPT : CHARLM_MLP;
  o->context = meta_int(*out, "context", o->context);
  o->emb = meta_int(*out, "emb", o->emb);
  o->hidden = meta_int(*out, "hidden", o->hidden);
  o->n_layer = meta_int(*out, "n_layer", o->n_layer);
  o->n_head = meta_int(*out, "n_head", o->n_head);
  o->n_embd = meta_int(*out, "n_embd", o->n_embd);
  return AG_OK;
}

static ag_status load_ckpt(ag_safetensors *f, const model *m, ag_optimizer *opt, int64_t *step) {
  ag_param_list all = {0}, st_list = {0};
  ag_status st = ag_params_extend(&all, "model.", &m->params);
  if (st == AG_OK) st = ag_optimizer_state(opt, &st_list);
  if (st == AG_OK) st = ag_params_extend(&all, "optim.", &st_list);
  if (st == AG_OK) st = ag_safetensors_load_into(f, &all);
  const char *s = ag_safetensors_meta(f, "step");
  *step = s ? atoll(s) : 0;
  if (st == AG_OK) ag_optimizer_set_steps(opt, *step);
  ag_params_free(&all);
  ag_params_free(&st_list);
  return st;
}

/* ---------------- progress ---------------- */

static void fmt_bytes(double b, char *buf, size_t n) {
  const char *u[] = {"B", "KiB", "MiB", "GiB"};
  int i = 0;
  while (b >= 1024 && i < 3) {
    b /= 1024;
    i++;
  }
  snprintf(buf, n, "%.1f %s", b, u[i]);
}

static void progress(FILE *out, bool tty, ag_device dev, int64_t step, int64_t total, double loss, double rate,
                     const char *unit) {
  char bar[31], mem[96] = "";
  int fill = total ? (int)(30 * step / total) : 30;
  for (int i = 0; i < 30; i++) bar[i] = i < fill ? '#' : '-';
  bar[30] = 0;
  if (ag_memory_stats_get) {
    ag_memory_stats s;
    if (ag_memory_stats_get(dev, &s) == AG_OK) {
      char a[24], r[24];
      fmt_bytes((double)s.allocated_bytes[AG_POOL_ALL].current, a, sizeof a);
      fmt_bytes((double)s.reserved_bytes[AG_POOL_ALL].current, r, sizeof r);
      snprintf(mem, sizeof mem, " | mem %s (reserved %s)", a, r);
    }
  }
  fprintf(out, "%s[%s] %6lld/%lld loss %.4f | %.1fk %s/s%s%s", tty ? "\r" : "", bar, (long long)step,
          (long long)total, loss, rate / 1000.0, unit, mem, tty ? "\033[K" : "\n");
  fflush(out);
}

/* ---------------- training ---------------- */

charlm_options charlm_defaults(charlm_model_kind kind) {
  charlm_options o = {
      .model = kind, .device = AG_CPU, .words_path = "/usr/share/dict/words", .steps = 3000, .batch = 128,
      .accum = 1, .lr = 3e-3, .weight_decay = 0.01, .clip = 1.0, .warmup = 100, .seed = 1337, .context = 6,
      .emb = 24, .hidden = 256, .n_layer = 2, .n_head = 4, .n_embd = 64, .eval_batches = 20, .samples = 8,
      .log_every = 50};
  if (kind == CHARLM_GPT) {
    o.steps = 1500;
    o.batch = 32;
    o.lr = 2e-3;
  }
  o.device = ag_device_best();
  return o;
}

ag_status charlm_train(const charlm_options *opts, charlm_result *res) {
  charlm_options o = *opts;
  charlm_result r = {0};
  FILE *out = o.log ? o.log : stdout;
  bool tty = !o.quiet && isatty(fileno(out));
  ag_safetensors *ck = NULL;
  ag_status st = AG_OK;
  if (o.resume) st = ckpt_config(o.resume, &o, &ck);
  if (st != AG_OK) return st;
  if (o.context < 1 || o.context > 64 || o.batch < 1 || o.accum < 1 || o.steps < 0) {
    ag_safetensors_close(ck);
    return ag_error_set(AG_ERR_INVALID, "charlm: invalid options (context 1..64, batch >= 1, accum >= 1)");
  }

  char **words = NULL;
  int n_words = 0;
  st = load_words(o.words_path, o.seed, &words, &n_words);
  if (st != AG_OK) {
    ag_safetensors_close(ck);
    return st;
  }
  int n_val = n_words / 10;
  dataset train = {0}, val = {0};
  char **vw = malloc((size_t)n_val * sizeof *vw);
  if (!vw) st = ag_error_set(AG_ERR_OOM, "charlm: out of host memory");
  else memcpy(vw, words + (n_words - n_val), (size_t)n_val * sizeof *vw);
  int T = CHARLM_MAX_WORD + 2;
  if (st == AG_OK) st = build(&val, vw, n_val, o.context, T);
  if (st == AG_OK) st = build(&train, words, n_words - n_val, o.context, T);
  else free(words);

  ag_generator *gen = ag_generator_create(o.seed);
  model m;
  bool have_model = false;
  ag_optimizer *opt = NULL;
  if (st == AG_OK) {
    st = model_init(&m, &o, gen);
    have_model = st == AG_OK;
  }
  if (st == AG_OK) {
    ag_adamw_options ao = ag_adamw_defaults();
    ao.lr = o.lr;
    ao.weight_decay = o.weight_decay;
    opt = ag_adamw_create(&m.params, &ao);
    if (!opt) st = ag_last_status();
  }
  /* Loss scaling only for f16: bf16 has f32's exponent range. */
  ag_grad_scaler *scaler = NULL;
  bool amp = o.precision == AG_F16 || o.precision == AG_BF16;
  if (st == AG_OK) {
    ag_grad_scaler_options so = ag_grad_scaler_defaults();
    so.enabled = o.precision == AG_F16;
    scaler = ag_grad_scaler_create(o.device, &so);
    if (!scaler) st = ag_last_status();
  }
  int64_t start = 0;
  if (st == AG_OK && ck) st = load_ckpt(ck, &m, opt, &start);
  ag_safetensors_close(ck);

  char dname[32];
  ag_device_str(o.device, dname, sizeof dname);
  const char *unit = o.model == CHARLM_MLP ? "examples" : "tokens";
  int64_t per_step = o.batch * o.accum * (o.model == CHARLM_MLP ? 1 : T);
  if (st == AG_OK && !o.quiet)
    fprintf(out, "charlm: %s model, %lld parameters, %d train / %d held-out words, device %s, %s%s\n",
            o.model == CHARLM_MLP ? "mlp" : "gpt", (long long)ag_params_numel(&m.params), train.n_words,
            val.n_words, dname, ag_dtype_name(amp ? o.precision : AG_F32), start ? " (resumed)" : "");
  if (st == AG_OK && start && !o.quiet) fprintf(out, "charlm: resuming at step %lld\n", (long long)start);

  /* The step profiler costs a few events per step; it says at the end
   * whether the device waited on input, on host syncs, or leaked memory. */
  ag_profiler *prof = NULL;
  if (st == AG_OK && (o.profile || o.trace)) {
    ag_profiler_config pc = {.window = 100, .trace = o.trace != NULL};
    prof = ag_profiler_create(o.device, &pc);
    if (!prof) st = ag_last_status();
  }
  double t0 = now_s(), t_log = t0;
  int64_t last_log_step = start;
  r.first_loss = NAN;
  for (int64_t step = start; st == AG_OK && step < o.steps; step++) {
    ag_optimizer_set_lr(opt, ag_lr_cosine(step, o.warmup, o.steps, o.lr, o.lr * 0.1));
    /* Batches depend only on (seed, step): a resumed run sees the same data. */
    uint64_t rng = o.seed * 0x100000001b3ull + (uint64_t)step;
    if (prof) ag_profiler_step_begin(prof);
    ag_scope_begin();
    ag_tensor *loss = NULL;
    for (int a = 0; a < o.accum && st == AG_OK; a++) {
      ag_tensor *x, *y;
      st = make_batch(&m, &train, o.batch, &rng, o.device, &x, &y);
      if (st != AG_OK) break;
      /* The region covers the forward only: backward runs in the dtypes
       * the forward recorded. */
      if (amp) st = ag_autocast_begin(o.precision);
      if (st != AG_OK) break;
      loss = batch_loss(&m, x, y);
      if (amp) ag_autocast_end();
      ag_tensor *part = o.accum > 1 ? ag_mul_scalar(loss, 1.0 / o.accum) : loss;
      ag_tensor *scaled = ag_grad_scaler_scale(scaler, part);
      st = scaled ? ag_backward(scaled, NULL, false) : ag_last_status();
      ag_tensor_release(scaled);
      if (part != loss) ag_tensor_release(part);
    }
    /* Clipping reads gradient values: unscale them first. */
    if (st == AG_OK && o.clip > 0) st = ag_grad_scaler_unscale_(scaler, opt);
    if (st == AG_OK && o.clip > 0 && !ag_clip_grad_norm(&m.params, o.clip)) st = ag_last_status();
    if (st == AG_OK) st = ag_grad_scaler_step(scaler, opt);
    if (st == AG_OK) st = ag_grad_scaler_update(scaler);
    ag_optimizer_zero_grad(opt);
    bool log_now = step == start || (step + 1) % o.log_every == 0 || step + 1 == o.steps;
    if (st == AG_OK && log_now) {
      double l = ag_item(loss); /* the step's only host sync */
      if (isnan(l) && ag_last_status() != AG_OK) st = ag_last_status();
      if (step == start) r.first_loss = l;
      r.final_loss = l;
      double t = now_s();
      double rate = t > t_log ? (double)(step + 1 - last_log_step) * (double)per_step / (t - t_log) : 0;
      if (!o.quiet) progress(out, tty, o.device, step + 1, o.steps, l, rate, unit);
      t_log = t;
      last_log_step = step + 1;
    }
    ag_scope_end();
    if (prof) ag_profiler_step_end(prof);
    r.steps_done = step + 1;
  }
  if (prof) {
    if (!o.quiet) ag_profiler_report(prof, out);
    if (o.trace && ag_profiler_write_trace(prof, o.trace) == AG_OK && !o.quiet)
      fprintf(out, "charlm: trace %s (open in chrome://tracing or ui.perfetto.dev)\n", o.trace);
    ag_profiler_destroy(prof);
  }
  r.seconds = now_s() - t0;
  if (r.steps_done > start && r.seconds > 0) r.examples_per_s = (double)(r.steps_done - start) * per_step / r.seconds;
  if (tty) fputc('\n', out);
  if (st == AG_OK && o.eval_batches > 0) {
    r.val_loss = evaluate(&m, &val, o.eval_batches, o.model == CHARLM_MLP ? 1024 : 64, o.device, &st);
    if (st == AG_OK && !o.quiet)
      fprintf(out, "charlm: %lld steps in %.1f s (%.1fk %s/s), train loss %.4f, held-out loss %.4f\n",
              (long long)(r.steps_done - start), r.seconds, r.examples_per_s / 1000.0, unit, r.final_loss,
              r.val_loss);
  }
  if (st == AG_OK && o.samples > 0 && !o.quiet) {
    uint64_t rng = o.seed + 99;
    fprintf(out, "charlm: samples:");
    for (int i = 0; i < o.samples && st == AG_OK; i++) {
      char w[CHARLM_MAX_WORD + 2];
      st = sample_word(&m, o.device, &rng, w, sizeof w);
      if (st == AG_OK) fprintf(out, " %s", w);
    }
    fputc('\n', out);
  }
  if (st == AG_OK && o.out) {
    st = save_ckpt(o.out, &m, opt, &o, r.steps_done);
    if (st == AG_OK && !o.quiet)
      fprintf(out, "charlm: checkpoint %s (step %lld; continue with --resume %s --steps N)\n", o.out,
              (long long)r.steps_done, o.out);
  }
  ag_grad_scaler_free(scaler);
  ag_optimizer_free(opt);
  if (have_model) model_free(&m);
  ag_generator_free(gen);
  dataset_free(&train);
  dataset_free(&val);
  if (res) *res = r;
  return st;
}

/* ---------------- options ---------------- */

static void usage(void) {
  printf(
      "usage: anygrad train [options]\n"
      "Train a character-level language model on /usr/share/dict/words.\n\n"
      "  --model mlp|gpt      model (default mlp: context MLP; gpt: 2-layer transformer)\n"
      "  --device D           cpu, cuda:0, hip:0, opencl:0 (default: best available)\n"
      "  --steps N            total optimizer steps (default 3000 mlp, 1500 gpt)\n"
      "  --batch N            examples (mlp) or words (gpt) per micro-batch\n"
      "  --accum N            micro-batches per step (gradient accumulation)\n"
      "  --lr X               peak learning rate (cosine schedule with warmup)\n"
      "  --warmup N           warmup steps (default 100)\n"
      "  --weight-decay X     AdamW weight decay (default 0.01)\n"
      "  --clip X             clip the global gradient norm to X (0: off; default 1)\n"
      "  --precision P        f32 (default), f16 (autocast + loss scaling) or bf16 (autocast)\n"
      "  --seed N             seed of data order, init and batches (default 1337)\n"
      "  --context N --emb N --hidden N      mlp sizes (default 6, 24, 256)\n"
      "  --layers N --heads N --embd N       gpt sizes (default 2, 4, 64)\n"
      "  --words PATH         word list (default /usr/share/dict/words)\n"
      "  --out PATH           checkpoint to write at the end (default charlm.safetensors)\n"
      "  --resume PATH        continue from a checkpoint (its architecture is used)\n"
      "  --samples N          words to sample at the end (default 8)\n"
      "  --log-every N        steps between progress updates (default 50)\n"
      "  --trace PATH         write a Chrome trace of the run (chrome://tracing, Perfetto)\n"
      "  --profile on|off     step profiler verdict and leak check at the end (default on)\n");
}

int charlm_parse_args(int argc, char **argv, charlm_options *o) {
  charlm_model_kind kind = CHARLM_MLP;
  for (int i = 1; i + 1 < argc; i++)
    if (!strcmp(argv[i], "--model")) kind = !strcmp(argv[i + 1], "gpt") ? CHARLM_GPT : CHARLM_MLP;
  *o = charlm_defaults(kind);
  o->out = "charlm.safetensors";
  o->profile = true;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage();
      return 1;
    }
    if (i + 1 >= argc) {
      fprintf(stderr, "anygrad train: option %s needs a value (see --help)\n", a);
      return -1;
    }
    const char *v = argv[++i];
    if (!strcmp(a, "--model")) {
      if (strcmp(v, "mlp") && strcmp(v, "gpt")) {
        fprintf(stderr, "anygrad train: --model must be mlp or gpt, got '%s'\n", v);
        return -1;
      }
    } else if (!strcmp(a, "--device")) {
      if (ag_device_parse(v, &o->device) != AG_OK) {
        fprintf(stderr, "anygrad train: %s\n", ag_last_error());
        return -1;
      }
    } else if (!strcmp(a, "--steps")) o->steps = atoll(v);
    else if (!strcmp(a, "--batch")) o->batch = atoll(v);
    else if (!strcmp(a, "--accum")) o->accum = atoi(v);
    else if (!strcmp(a, "--lr")) o->lr = atof(v);
    else if (!strcmp(a, "--warmup")) o->warmup = atoll(v);
    else if (!strcmp(a, "--weight-decay")) o->weight_decay = atof(v);
    else if (!strcmp(a, "--clip")) o->clip = atof(v);
    else if (!strcmp(a, "--precision")) {
      if (ag_dtype_parse(v, &o->precision) != AG_OK ||
          (o->precision != AG_F32 && o->precision != AG_F16 && o->precision != AG_BF16)) {
        fprintf(stderr, "anygrad train: --precision must be f32, f16 or bf16, got '%s'\n", v);
        return -1;
      }
    }
    else if (!strcmp(a, "--seed")) o->seed = strtoull(v, NULL, 10);
    else if (!strcmp(a, "--context")) o->context = atoi(v);
    else if (!strcmp(a, "--emb")) o->emb = atoi(v);
    else if (!strcmp(a, "--hidden")) o->hidden = atoi(v);
    else if (!strcmp(a, "--layers")) o->n_layer = atoi(v);
    else if (!strcmp(a, "--heads")) o->n_head = atoi(v);
    else if (!strcmp(a, "--embd")) o->n_embd = atoi(v);
    else if (!strcmp(a, "--words")) o->words_path = v;
    else if (!strcmp(a, "--out")) o->out = v;
    else if (!strcmp(a, "--resume")) o->resume = v;
    else if (!strcmp(a, "--samples")) o->samples = atoi(v);
    else if (!strcmp(a, "--log-every")) o->log_every = atoi(v) > 0 ? atoi(v) : 1;
    else if (!strcmp(a, "--trace")) o->trace = v;
    else if (!strcmp(a, "--profile")) o->profile = strcmp(v, "off") != 0;
    else {
      fprintf(stderr, "anygrad train: unknown option %s (see --help)\n", a);
      return -1;
    }
  }
  return 0;
}
