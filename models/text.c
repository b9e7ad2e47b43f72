/* A Llama-style model trained on plain text (text.h). */
#define _POSIX_C_SOURCE 200809L
#include "text.h"

#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "anygrad/llama.h"
#include "anygrad/pretrained.h"
#include "anygrad/tokenizer.h"
#include "text_ckpt.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

text_options text_defaults(void) {
  text_options o = {.steps = 1000, .batch = 8, .seq = 128, .warmup = 30, .dim = 128, .layers = 4, .heads = 4,
                    .kv_heads = 2, .vocab = 512, .lr = 3e-3, .weight_decay = 0.1, .clip = 1.0, .seed = 1337,
                    .log_every = 100, .eval_batches = 8, .sample_tokens = 200, .prompt = "\n", .temperature = 0.8,
                    .top_k = 40};
  o.device = ag_device_best();
  return o;
}

/* ---- corpus ---- */

typedef struct buf {
  uint8_t *p;
  size_t n, cap;
} buf;

/* Append the regular file at path (ag_file_read_all: a FIFO, a device or
 * a directory is refused, never read), the corpus staying within
 * TEXT_MAX_DATA_BYTES. */
static ag_status buf_add_file(buf *b, const char *path) {
  uint64_t room = TEXT_MAX_DATA_BYTES - b->n;
  if (room == 0)
    return ag_error_set(AG_ERR_IO, "text: the corpus is over %llu bytes at %s",
                        (unsigned long long)TEXT_MAX_DATA_BYTES, path);
  char *p = NULL;
  size_t n = 0;
  ag_status st = ag_file_read_all(path, "corpus", room, &p, &n);
  if (st != AG_OK) {
    char msg[512];
    snprintf(msg, sizeof msg, "%s", ag_last_error());
    return ag_error_set(st, "text: %s", msg);
  }
  if (!b->p) {
    b->p = (uint8_t *)p;
    b->n = b->cap = n;
    return AG_OK;
  }
  if (b->cap - b->n < n) {
    size_t cap = b->n + n > 2 * b->cap ? b->n + n : 2 * b->cap;
    uint8_t *q = realloc(b->p, cap);
    if (!q) {
      free(p);
      return ag_error_set(AG_ERR_OOM, "text: out of host memory reading '%s'", path);
    }
    b->p = q;
    b->cap = cap;
  }
  memcpy(b->p + b->n, p, n);
  b->n += n;
  free(p);
  return AG_OK;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The fortunes files: regular files without a '.' in their name (the .dat
 * indexes and .u8 links are left out), in name order. */
static ag_status load_fortunes(buf *b, int *n_files) {
  DIR *d = opendir(TEXT_FORTUNES_DIR);
  if (!d)
    return ag_error_set(AG_ERR_IO, "text: cannot open %s (Debian package fortunes; or pass --data FILE)",
                        TEXT_FORTUNES_DIR);
  char *names[512];
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) && n < 512)
    if (e->d_name[0] != '.' && !strchr(e->d_name, '.')) names[n++] = strdup(e->d_name);
  closedir(d);
  qsort(names, (size_t)n, sizeof *names, cmp_str);
  ag_status st = AG_OK;
  *n_files = 0;
  for (int i = 0; i < n; i++) {
    char path[1024];
    struct stat sb;
    snprintf(path, sizeof path, "%s/%s", TEXT_FORTUNES_DIR, names[i]);
    if (st == AG_OK && stat(path, &sb) == 0 && S_ISREG(sb.st_mode)) {
      st = buf_add_file(b, path);
      (*n_files)++;
    }
    free(names[i]);
  }
  return st;
}

/* ---- batches ---- */

static uint64_t rng_next(uint64_t *s) { /* splitmix64 */
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* B random windows of T+1 tokens of ids[0..n): inputs [B, T], targets [B*T]. */
static ag_status make_batch(const int32_t *ids, size_t n, int64_t B, int64_t T, uint64_t *rng, ag_device dev,
                            ag_tensor **x, ag_tensor **y) {
  int32_t *hx = malloc((size_t)(B * T) * sizeof *hx), *hy = malloc((size_t)(B * T) * sizeof *hy);
  ag_status st = AG_OK;
  if (!hx || !hy) st = ag_error_set(AG_ERR_OOM, "text: out of host memory for a batch");
  for (int64_t b = 0; st == AG_OK && b < B; b++) {
    size_t off = (size_t)(rng_next(rng) % (uint64_t)(n - (size_t)T));
    memcpy(hx + b * T, ids + off, (size_t)T * sizeof *hx);
    memcpy(hy + b * T, ids + off + 1, (size_t)T * sizeof *hy);
  }
  int64_t sx[2] = {B, T}, sy[1] = {B * T};
  if (st == AG_OK) {
    *x = ag_from_host(dev, AG_I32, 2, sx, hx);
    *y = *x ? ag_from_host(dev, AG_I32, 1, sy, hy) : NULL;
    if (!*y) st = ag_last_status();
  }
  free(hx);
  free(hy);
  return st;
}

static ag_tensor *batch_loss(const ag_llama *m, ag_tensor *x, ag_tensor *y, bool train) {
  ag_tensor *logits = ag_llama_forward(m, x, train, NULL);
  int64_t s2[2] = {ag_tensor_numel(y), m->cfg.vocab_size};
  ag_tensor *flat = logits ? ag_reshape(logits, 2, s2) : NULL;
  ag_tensor *loss = flat ? ag_cross_entropy(flat, y, AG_REDUCTION_MEAN, -1) : NULL;
  ag_tensor_release(flat);
  ag_tensor_release(logits);
  return loss;
}

/* Mean loss over fixed windows of the held-out tokens (the same windows at
 * every evaluation). */
static double evaluate(const ag_llama *m, const int32_t *ids, size_t n, const text_options *o, ag_status *st) {
  uint64_t rng = 12345;
  double sum = 0;
  ag_inference_mode_begin();
  for (int i = 0; i < o->eval_batches && *st == AG_OK; i++) {
    ag_scope_begin();
    ag_tensor *x = NULL, *y = NULL;
    *st = make_batch(ids, n, o->batch, o->seq, &rng, o->device, &x, &y);
    if (*st == AG_OK) {
      double l = ag_item(batch_loss(m, x, y, false));
      if (isnan(l) && ag_last_status() != AG_OK) *st = ag_last_status();
      sum += l;
    }
    ag_scope_end();
  }
  ag_grad_mode_end();
  return sum / (o->eval_batches > 0 ? o->eval_batches : 1);
}

/* ---- sampling: one token per step through the key/value cache
 * (ag_llama_forward_cached); a full cache restarts from the last seq/2
 * tokens ---- */

static ag_status sample(const ag_llama *m, const ag_bpe *bpe, const text_options *o, FILE *out) {
  size_t np = strlen(o->prompt), cap = np + (size_t)o->sample_tokens + 1, n = 0;
  int32_t *ids = malloc(cap * sizeof *ids);
  int64_t V = m->cfg.vocab_size;
  float *lg = malloc((size_t)V * sizeof *lg);
  ag_status st = ids && lg ? AG_OK : ag_error_set(AG_ERR_OOM, "text: out of host memory for sampling");
  if (st == AG_OK) st = ag_bpe_encode(bpe, (const uint8_t *)o->prompt, np, ids, cap, &n);
  uint64_t rng = o->seed ^ 0x5eedull;
  size_t n_prompt = n;
  ag_llama_cache *kv = NULL;
  if (st == AG_OK && n == 0 && o->sample_tokens > 0)
    st = ag_error_set(AG_ERR_INVALID, "text: the sample needs a non-empty --prompt");
  if (st == AG_OK && !(kv = ag_llama_cache_create(m, 1, o->seq))) st = ag_last_status();
  size_t base = 0; /* ids[base .. base + cache length) are in the cache */
  ag_inference_mode_begin();
  for (int t = 0; st == AG_OK && t < o->sample_tokens; t++) {
    size_t len = (size_t)ag_llama_cache_length(kv), seq = (size_t)o->seq;
    if (len + (n - base - len) > seq) {
      size_t keep = len == 0 ? seq : (seq / 2 > 0 ? seq / 2 : 1);
      if (keep > n) keep = n;
      ag_llama_cache_reset(kv);
      base = n - keep;
      len = 0;
    }
    size_t ctx = n - base - len;
    ag_scope_begin();
    int64_t sx[2] = {1, (int64_t)ctx};
    ag_tensor *x = ag_from_host(o->device, AG_I32, 2, sx, ids + base + len);
    ag_tensor *logits = x ? ag_llama_forward_cached(m, kv, x) : NULL;
    ag_tensor *last = logits ? ag_slice(logits, 1, (int64_t)ctx - 1, (int64_t)ctx, 1) : NULL;
    ag_tensor *l32 = last ? ag_cast(last, AG_F32) : NULL;
    st = l32 ? ag_to_host(l32, lg, (size_t)V * sizeof *lg) : ag_last_status();
    ag_scope_end();
    if (st != AG_OK) break;
    /* temperature, then the top k (ties: all equal to the k-th), softmax */
    double mx = -INFINITY;
    for (int64_t v = 0; v < V; v++) mx = lg[v] > mx ? lg[v] : mx;
    float kth = -INFINITY;
    if (o->top_k > 0 && o->top_k < V) {
      /* the k-th largest by repeated selection of the maximum below the last */
      float prev = INFINITY;
      int taken = 0;
      while (taken < o->top_k) {
        float best = -INFINITY;
        int cnt = 0;
        for (int64_t v = 0; v < V; v++)
          if (lg[v] < prev && lg[v] > best) best = lg[v];
        for (int64_t v = 0; v < V; v++) cnt += lg[v] == best;
        if (cnt == 0 || best == -INFINITY) break;
        taken += cnt;
        kth = best;
        prev = best;
      }
    }
    double tot = 0;
    for (int64_t v = 0; v < V; v++) tot += lg[v] >= kth ? exp((lg[v] - mx) / o->temperature) : 0.0;
    double u = (double)(rng_next(&rng) >> 11) * 0x1.0p-53 * tot, acc = 0;
    int32_t pick = 0;
    for (int64_t v = 0; v < V; v++) {
      if (lg[v] < kth) continue;
      pick = (int32_t)v;
      acc += exp((lg[v] - mx) / o->temperature);
      if (acc > u) break;
    }
    ids[n++] = pick;
  }
  ag_grad_mode_end();
  ag_llama_cache_free(kv);
  if (st == AG_OK) {
    size_t nb = 0;
    st = ag_bpe_decode(bpe, ids + n_prompt, n - n_prompt, NULL, 0, &nb);
    uint8_t *text = st == AG_OK ? malloc(nb + 1) : NULL;
    if (st == AG_OK && !text) st = ag_error_set(AG_ERR_OOM, "text: out of host memory for sampling");
    if (st == AG_OK) st = ag_bpe_decode(bpe, ids + n_prompt, n - n_prompt, text, nb, &nb);
    if (st == AG_OK) {
      fprintf(out, "text: sample (%d tokens, temperature %g, top-k %d, key/value cache):\n%s", o->sample_tokens, o->temperature, o->top_k, o->prompt);
      fwrite(text, 1, nb, out);
      fputc('\n', out);
    }
    free(text);
  }
  free(ids);
  free(lg);
  return st;
}

/* ---- checkpoints ---- */

static uint64_t fnv1a(uint64_t h, const void *p, size_t n) {
  const uint8_t *b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

/* The tokenizer's identity: every token's bytes in id order. */
static uint64_t bpe_hash(const ag_bpe *bpe) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (int32_t id = 0; id < ag_bpe_vocab_size(bpe); id++) {
    size_t len = 0;
    const uint8_t *t = ag_bpe_token_bytes(bpe, id, &len);
    uint64_t l = len;
    h = fnv1a(h, &l, sizeof l);
    if (t) h = fnv1a(h, t, len);
  }
  return h;
}

/* Weights under HF names, then "optim." AdamW state and the counters. */
static ag_status ckpt_lists(const ag_llama *m, ag_optimizer *opt, ag_param_list *all) {
  ag_param_list sl = {0};
  ag_status st = ag_params_extend(all, NULL, &m->params);
  if (st == AG_OK) st = ag_optimizer_state(opt, &sl);
  if (st == AG_OK) st = ag_params_extend(all, "optim.", &sl);
  if (st == AG_OK) st = ag_optimizer_counters(opt, all);
  ag_params_free(&sl);
  return st;
}

static ag_status save_ckpt(const char *path, const ag_llama *m, ag_optimizer *opt, const text_ckpt_meta *k) {
  ag_param_list all = {0};
  ag_status st = ckpt_lists(m, opt, &all);
  text_ckpt_strings ms;
  text_ckpt_strings_make(k, &ms);
  if (st == AG_OK) st = ag_safetensors_save(path, &all, TEXT_CKPT_N_META, ms.keys, ms.vals);
  ag_params_free(&all);
  return st;
}

/* ---- training ---- */

static ag_status check_options(const text_options *o) {
  if (o->steps < 0 || o->steps > TEXT_MAX_STEPS || o->batch < 1 || o->batch > TEXT_MAX_BATCH || o->seq < 1 ||
      o->seq > TEXT_MAX_SEQ || o->warmup < 0 || o->dim < 1 || o->dim > TEXT_MAX_WIDTH || o->layers < 1 ||
      o->layers > TEXT_MAX_LAYERS || o->heads < 1 || o->kv_heads < 0 || o->vocab < 256 ||
      o->vocab > TEXT_MAX_VOCAB || !(o->lr > 0) || !isfinite(o->lr) || !(o->weight_decay >= 0) ||
      !(o->clip >= 0) || !(o->temperature > 0) || o->top_k < 0 || o->log_every < 1 || o->eval_batches < 0 ||
      o->sample_tokens < 0)
    return ag_error_set(AG_ERR_INVALID, "text: an option is outside its limits (see anygrad train --help)");
  return AG_OK;
}

/* The tokenizer's path, out + ".bpe", never cut; owned by the caller. */
static char *bpe_path(const char *out) {
  size_t n = strlen(out) + sizeof ".bpe";
  char *p = malloc(n);
  if (p) snprintf(p, n, "%s.bpe", out);
  return p;
}

ag_status text_check_outputs(const text_options *o) {
  if (!o) return ag_error_set(AG_ERR_INVALID, "text_check_outputs: NULL argument");
  if (!o->out) return AG_OK;
  char *bp = bpe_path(o->out);
  if (!bp) return ag_error_set(AG_ERR_OOM, "text: out of host memory");
  /* the checkpoint may replace the one it resumes from: that is read
   * before the first step, and the new one replaces it atomically */
  struct { const char *opt, *path; bool out_ok; } in[] = {{"--data", o->data, false}, {"--resume", o->resume, true}};
  ag_status st = AG_OK;
  for (size_t i = 0; st == AG_OK && i < sizeof in / sizeof *in; i++) {
    if (!in[i].out_ok && ag_file_same(o->out, in[i].path))
      st = ag_error_set(AG_ERR_INVALID, "text: --out '%s' is the same file as %s '%s'; refusing to overwrite it",
                        o->out, in[i].opt, in[i].path);
    else if (ag_file_same(bp, in[i].path))
      st = ag_error_set(AG_ERR_INVALID, "text: the tokenizer '%s' (--out + .bpe) is the same file as %s '%s'; "
                        "refusing to overwrite it", bp, in[i].opt, in[i].path);
  }
  free(bp);
  return st;
}

/* An output checked before any work (ag_output_check), the message
 * prefixed with the task. */
static ag_status check_output(const char *path, const char *what) {
  ag_status st = ag_output_check(path, what);
  if (st != AG_OK) {
    char msg[512];
    snprintf(msg, sizeof msg, "%s", ag_last_error());
    st = ag_error_set(st, "text: %s", msg);
  }
  return st;
}

ag_status text_train(const text_options *opt, text_result *r) {
  text_options o = *opt;
  memset(r, 0, sizeof *r);
  FILE *out = o.log ? o.log : stdout;
  ag_status st = check_options(&o);
  if (st == AG_OK) st = text_check_outputs(&o);
  struct stat hs;
  if (st == AG_OK && o.hf && stat(o.hf, &hs) == 0 && !S_ISDIR(hs.st_mode))
    st = ag_error_set(AG_ERR_IO, "text: --hf '%s' exists and is not a folder", o.hf);
  char *bp = NULL;
  if (st == AG_OK && o.out && !(bp = bpe_path(o.out))) st = ag_error_set(AG_ERR_OOM, "text: out of host memory");
  ag_safetensors *ck = NULL;
  text_ckpt_meta km = {0};
  if (st == AG_OK && o.resume) st = text_ckpt_open(o.resume, &ck, &km);
  if (ck) { /* the checkpoint's architecture; its seed unless one is given */
    o.dim = km.dim;
    o.layers = km.layers;
    o.heads = km.heads;
    o.kv_heads = km.kv_heads;
    o.vocab = km.vocab;
    o.seq = km.seq;
    if (!o.seed_set) o.seed = km.seed;
  }
  /* checked before any work: nothing is left behind */
  if (st == AG_OK && o.out) st = check_output(o.out, "--out checkpoint");
  if (st == AG_OK && o.out) st = check_output(bp, "tokenizer (--out + .bpe)");
  buf corpus = {0};
  int n_files = 1;
  if (st == AG_OK) st = o.data ? buf_add_file(&corpus, o.data) : load_fortunes(&corpus, &n_files);
  /* the last 5% of the bytes are held out */
  size_t n_val_bytes = corpus.n / 20, n_train_bytes = corpus.n - n_val_bytes;
  uint64_t data_hash = fnv1a(0xcbf29ce484222325ull, corpus.p, corpus.n);
  if (st == AG_OK && ck && (data_hash != km.data_hash || corpus.n != km.data_bytes))
    st = ag_error_set(AG_ERR_INVALID, "text: --resume %s was trained on another corpus (%llu bytes, hash %016llx) "
                      "than this run's %s (%zu bytes, hash %016llx); resume with the same --data",
                      o.resume, (unsigned long long)km.data_bytes, (unsigned long long)km.data_hash,
                      o.data ? o.data : TEXT_FORTUNES_DIR, corpus.n, (unsigned long long)data_hash);
  ag_bpe *bpe = NULL;
  double t_bpe = now_s();
  if (st == AG_OK) st = ag_bpe_train(corpus.p, n_train_bytes, o.vocab, &bpe);
  t_bpe = now_s() - t_bpe;
  uint64_t tok_hash = bpe ? bpe_hash(bpe) : 0;
  if (st == AG_OK && ck && tok_hash != km.bpe_hash)
    st = ag_error_set(AG_ERR_INVALID, "text: --resume %s: the tokenizer learned here (vocabulary %d, hash %016llx) "
                      "is not the checkpoint's (hash %016llx)", o.resume, ag_bpe_vocab_size(bpe),
                      (unsigned long long)tok_hash, (unsigned long long)km.bpe_hash);
  int32_t *tr = NULL, *va = NULL;
  size_t n_tr = 0, n_va = 0;
  if (st == AG_OK) {
    tr = malloc((n_train_bytes + 1) * sizeof *tr);
    va = malloc((n_val_bytes + 1) * sizeof *va);
    if (!tr || !va) st = ag_error_set(AG_ERR_OOM, "text: out of host memory for the tokens");
  }
  if (st == AG_OK) st = ag_bpe_encode(bpe, corpus.p, n_train_bytes, tr, n_train_bytes + 1, &n_tr);
  if (st == AG_OK) st = ag_bpe_encode(bpe, corpus.p + n_train_bytes, n_val_bytes, va, n_val_bytes + 1, &n_va);
  if (st == AG_OK && (n_tr <= (size_t)o.seq || n_va <= (size_t)o.seq))
    st = ag_error_set(AG_ERR_SHAPE,
                      "text: the corpus (%zu bytes: %zu training and %zu held-out tokens) is too small for "
                      "sequences of %lld tokens; each split needs more",
                      corpus.n, n_tr, n_va, (long long)o.seq);
  free(corpus.p);
  double tok_per_byte = n_val_bytes ? (double)n_va / (double)n_val_bytes : 0;

  ag_generator *gen = ag_generator_create(o.seed);
  ag_llama m;
  bool have_model = false;
  ag_optimizer *optim = NULL;
  if (st == AG_OK) {
    ag_llama_config c = {.vocab_size = ag_bpe_vocab_size(bpe), .dim = o.dim, .n_layers = o.layers,
                         .n_heads = o.heads, .n_kv_heads = o.kv_heads, .max_seq_len = o.seq};
    st = ag_llama_init(&m, &c, o.device, AG_F32, gen);
    have_model = st == AG_OK;
  }
  if (st == AG_OK) {
    ag_adamw_options ao = ag_adamw_defaults();
    ao.lr = o.lr;
    ao.weight_decay = o.weight_decay;
    optim = ag_adamw_create(&m.params, &ao);
    if (!optim) st = ag_last_status();
  }
  int64_t start = 0;
  if (st == AG_OK && ck) {
    ag_param_list all = {0};
    st = ckpt_lists(&m, optim, &all);
    if (st == AG_OK) st = ag_safetensors_load_into(ck, &all);
    if (st != AG_OK) {
      char msg[512];
      snprintf(msg, sizeof msg, "%s", ag_last_error());
      st = ag_error_set(st, "text: --resume %s: %s", o.resume, msg);
    }
    ag_params_free(&all);
    start = km.step;
  }
  ag_safetensors_close(ck);
  ck = NULL;
  char dname[32];
  ag_device_str(o.device, dname, sizeof dname);
  if (st == AG_OK)
    fprintf(out,
            "text: %s: %zu training / %zu held-out tokens (BPE vocabulary %d, learned in %.1f s; %.3f tokens per "
            "byte held out)\n"
            "text: llama dim %d, %d layers, %d heads (%d key/value), sequence %lld, batch %lld, %lld parameters, "
            "device %s\n",
            o.data ? o.data : TEXT_FORTUNES_DIR, n_tr, n_va, ag_bpe_vocab_size(bpe), t_bpe, tok_per_byte, o.dim,
            o.layers, o.heads, o.kv_heads ? o.kv_heads : o.heads, (long long)o.seq, (long long)o.batch,
            (long long)ag_params_numel(&m.params), dname);
  if (st == AG_OK && o.resume)
    fprintf(out, "text: resumed from %s at step %lld%s\n", o.resume, (long long)start,
            start >= o.steps ? " (--steps is not beyond it: nothing to train)" : "");
  double t0 = now_s(), sum = o.resume ? km.loss_sum : 0;
  int64_t n_sum = o.resume ? km.loss_n : 0;
  r->first_loss = o.resume ? km.first_loss : NAN;
  r->steps_done = start;
  r->last_loss = NAN;
  int64_t end = o.stop_at > 0 && o.stop_at < o.steps ? o.stop_at : o.steps;
  text_ckpt_meta cur = {.seed = o.seed, .data_hash = data_hash, .bpe_hash = tok_hash, .data_bytes = corpus.n,
                   .dim = o.dim, .layers = o.layers, .heads = o.heads, .kv_heads = o.kv_heads ? o.kv_heads : o.heads,
                   .vocab = o.vocab, .seq = o.seq};
  for (int64_t step = start; st == AG_OK && step < end; step++) {
    ag_optimizer_set_lr(optim, ag_lr_cosine(step, o.warmup, o.steps, o.lr, o.lr * 0.1));
    uint64_t rng = o.seed * 0x100000001b3ull + (uint64_t)step;
    ag_scope_begin();
    ag_tensor *x = NULL, *y = NULL, *loss = NULL;
    st = make_batch(tr, n_tr, o.batch, o.seq, &rng, o.device, &x, &y);
    if (st == AG_OK) loss = batch_loss(&m, x, y, true);
    if (st == AG_OK) st = loss ? ag_backward(loss, NULL, false) : ag_last_status();
    if (st == AG_OK && o.clip > 0 && !ag_clip_grad_norm(&m.params, o.clip)) st = ag_last_status();
    if (st == AG_OK) st = ag_optimizer_step(optim);
    ag_optimizer_zero_grad(optim);
    double l = st == AG_OK ? ag_item(loss) : NAN;
    ag_scope_end();
    if (st != AG_OK) break;
    if (!isfinite(l)) {
      st = ag_error_set(AG_ERR_STATE, "text: the loss became %g at step %lld", l, (long long)step + 1);
      break;
    }
    if (step == 0) r->first_loss = l;
    r->last_loss = l;
    sum += l;
    n_sum++;
    r->steps_done = step + 1;
    bool log_now = step == 0 || (step + 1) % o.log_every == 0 || step + 1 == o.steps;
    if (log_now) {
      r->train_loss = sum / n_sum;
      sum = 0;
      n_sum = 0;
      double vl = evaluate(&m, va, n_va, &o, &st);
      if (st != AG_OK) break;
      if (!o.quiet || step + 1 == o.steps)
        fprintf(out, "text: step %lld/%lld  train loss %.4f  held-out loss %.4f  %.4f bits/byte  %.1f s\n",
                (long long)step + 1, (long long)o.steps, r->train_loss, vl, vl * tok_per_byte / log(2.0),
                now_s() - t0);
      fflush(out);
      r->val_loss = vl;
    }
    if (o.out && o.save_every > 0 && (step + 1) % o.save_every == 0 && step + 1 < end) {
      cur.step = step + 1;
      cur.loss_sum = sum;
      cur.loss_n = n_sum;
      cur.first_loss = r->first_loss;
      st = save_ckpt(o.out, &m, optim, &cur);
    }
  }
  r->seconds = now_s() - t0;
  if (st == AG_OK && r->steps_done > start) {
    r->val_bpb = r->val_loss * tok_per_byte / log(2.0);
    fprintf(out,
            "text: done: %lld steps in %.1f s; first loss %.4f, train loss %.4f, held-out loss %.4f nats/token, "
            "%.4f bits per byte\n",
            (long long)r->steps_done, r->seconds, r->first_loss, r->train_loss, r->val_loss, r->val_bpb);
  }
  if (st == AG_OK && o.out && r->steps_done > start) {
    cur.step = r->steps_done;
    cur.loss_sum = sum;
    cur.loss_n = n_sum;
    cur.first_loss = r->first_loss;
    st = save_ckpt(o.out, &m, optim, &cur);
    if (st == AG_OK) st = ag_bpe_save(bpe, bp);
    if (st == AG_OK)
      fprintf(out, "text: wrote %s (step %lld; continue with --resume %s) and %s\n", o.out,
              (long long)r->steps_done, o.out, bp);
  }
  if (st == AG_OK && o.hf) {
    st = ag_llama_save_pretrained(&m, bpe, o.hf);
    if (st == AG_OK) fprintf(out, "text: wrote the Hugging Face folder %s (docs/export.md)\n", o.hf);
  }
  if (st == AG_OK && o.sample_tokens > 0) st = sample(&m, bpe, &o, out);
  ag_safetensors_close(ck);
  ag_optimizer_free(optim);
  if (have_model) ag_llama_free(&m);
  ag_generator_free(gen);
  ag_bpe_free(bpe);
  free(bp);
  free(tr);
  free(va);
  return st;
}
