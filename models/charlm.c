/* Character-level language model on a word list: the training job behind
 * `anygrad train`. Everything device-side goes through the public API; the
 * host reads values only to print progress, evaluate and sample. */
#include "charlm.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* The allocator statistics are optional at link time: without them the
 * progress line shows no memory figure. */
#pragma weak ag_memory_stats_get

/* ---------------- host random numbers (batches, sampling) ---------------- */

static double urand(uint64_t *s) { return (double)(charlm_splitmix(s) >> 11) * (1.0 / 9007199254740992.0); }

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The heartbeat file (charlm_options.heartbeat): one line, written to a
 * temporary file beside it and renamed over it, so a reader sees a whole
 * line or the previous one. */
static ag_status heartbeat_write(const char *path, int rank, int64_t step, const char *state) {
  char tmp[4096], line[192];
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  int n = snprintf(line, sizeof line, "anygrad-heartbeat pid %ld rank %d step %lld state %s time %.6f\n",
                   (long)getpid(), rank, (long long)step, state, (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec);
  if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp)
    return ag_error_set(AG_ERR_INVALID, "charlm: heartbeat path too long");
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  bool ok = fd >= 0 && write(fd, line, (size_t)n) == n;
  if (fd >= 0 && close(fd) != 0) ok = false;
  if (ok && rename(tmp, path) != 0) ok = false;
  if (!ok) {
    int e = errno;
    unlink(tmp);
    return ag_error_set(AG_ERR_IO, "charlm: cannot write the heartbeat %s: %s", path, strerror(e));
  }
  return AG_OK;
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
      int32_t t = p < len ? charlm_char_id(w[p]) : 0;
      memcpy(d->ctx + e * context, win, (size_t)context * sizeof(int32_t));
      d->tgt[e++] = t;
      memmove(win, win + 1, (size_t)(context - 1) * sizeof(int32_t));
      win[context - 1] = t;
    }
    int32_t *x = d->seq_x + (int64_t)i * T, *y = d->seq_y + (int64_t)i * T;
    for (int p = 0; p < T; p++) {
      x[p] = p == 0 ? 0 : (p <= len ? charlm_char_id(w[p - 1]) : 0);
      y[p] = p < len ? charlm_char_id(w[p]) : (p == len ? 0 : -1);
    }
  }
  return AG_OK;
}

/* ---------------- model ---------------- */

typedef charlm_model model;

void charlm_model_free(charlm_model *m) {
  ag_embedding_free(&m->emb);
  ag_linear_free(&m->l1);
  ag_linear_free(&m->l2);
  if (m->kind == CHARLM_GPT) ag_gpt_free(&m->gpt);
  ag_params_free(&m->params);
}

ag_status charlm_model_init(charlm_model *m, const charlm_options *o, ag_device dev, ag_generator *g) {
  memset(m, 0, sizeof *m);
  m->kind = o->model;
  m->context = o->context;
  m->T = CHARLM_MAX_WORD + 2;
  ag_status st;
  if (o->model == CHARLM_MLP) {
    st = ag_embedding_init(&m->emb, dev, AG_F32, CHARLM_VOCAB, o->emb, g);
    if (st == AG_OK) st = ag_linear_init(&m->l1, dev, AG_F32, (int64_t)o->context * o->emb, o->hidden, true, g);
    if (st == AG_OK) st = ag_linear_init(&m->l2, dev, AG_F32, o->hidden, CHARLM_VOCAB, true, g);
    if (st == AG_OK) st = ag_embedding_params(&m->emb, "emb.", &m->params);
    if (st == AG_OK) st = ag_linear_params(&m->l1, "fc1.", &m->params);
    if (st == AG_OK) st = ag_linear_params(&m->l2, "fc2.", &m->params);
  } else {
    ag_gpt_config c = {.vocab_size = CHARLM_VOCAB, .block_size = m->T, .n_layer = o->n_layer,
                       .n_embd = o->n_embd, .n_head = o->n_head, .dropout = 0.0,
                       .checkpoint = o->checkpoint_activations, .untied_head = o->untied_head};
    st = ag_gpt_init(&m->gpt, &c, dev, AG_F32, g);
    if (st == AG_OK) st = ag_params_extend(&m->params, "", &m->gpt.params);
  }
  if (st != AG_OK) charlm_model_free(m);
  return st;
}

/* Logits as [rows, vocab] for input x (MLP: [B, context], GPT: [B, t]). */
ag_tensor *charlm_model_logits(const charlm_model *m, ag_tensor *x) {
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
static ag_status make_batch_rows(const model *m, const dataset *d, int64_t B, int64_t off, int64_t rows,
                                 uint64_t *rng, ag_device dev, ag_tensor **x, ag_tensor **y, int64_t *n_mine,
                                 int64_t *n_all);

static ag_status make_batch(const model *m, const dataset *d, int64_t B, uint64_t *rng, ag_device dev,
                            ag_tensor **x, ag_tensor **y) {
  int64_t a, b;
  return make_batch_rows(m, d, B, 0, B, rng, dev, x, y, &a, &b);
}

/* Rows [off, off + rows) of a batch of B drawn with rng (a replica's share
 * of the global batch: every rank draws the same B rows). n_mine and n_all
 * count the targets the loss averages over (not ignored) in those rows and
 * in the whole batch. */
static ag_status make_batch_rows(const model *m, const dataset *d, int64_t Bg, int64_t off, int64_t rows,
                                 uint64_t *rng, ag_device dev, ag_tensor **x, ag_tensor **y, int64_t *n_mine,
                                 int64_t *n_all) {
  *x = NULL;
  *y = NULL;
  *n_mine = *n_all = 0;
  int64_t B = rows;
  int cols = m->kind == CHARLM_MLP ? m->context : m->T;
  int ycols = m->kind == CHARLM_MLP ? 1 : m->T;
  /* Sizes are checked, not trusted: a huge B must not wrap before malloc. */
  size_t nx, ny, bx, by;
  if (B < 1 || __builtin_mul_overflow((size_t)B, (size_t)cols, &nx) ||
      __builtin_mul_overflow((size_t)B, (size_t)ycols, &ny) || __builtin_mul_overflow(nx, sizeof(int32_t), &bx) ||
      __builtin_mul_overflow(ny, sizeof(int32_t), &by) || nx > (size_t)INT64_MAX)
    return ag_error_set(AG_ERR_INVALID, "charlm: batch of %lld rows x %d columns is too large", (long long)B, cols);
  int32_t *hx = malloc(bx), *hy = malloc(by);
  if (!hx || !hy) {
    free(hx);
    free(hy);
    return ag_error_set(AG_ERR_OOM, "charlm: out of host memory for a batch of %lld rows", (long long)B);
  }
  for (int64_t gb = 0; gb < Bg; gb++) {
    int64_t b = gb - off;
    bool keep = b >= 0 && b < B;
    if (m->kind == CHARLM_MLP) {
      int64_t i = (int64_t)(charlm_splitmix(rng) % (uint64_t)d->n_ex);
      ++*n_all;
      if (!keep) continue;
      ++*n_mine;
      memcpy(hx + b * cols, d->ctx + i * cols, (size_t)cols * sizeof *hx);
      hy[b] = d->tgt[i];
    } else {
      int64_t i = (int64_t)(charlm_splitmix(rng) % (uint64_t)d->n_words);
      int64_t nt = 0;
      for (int p = 0; p < cols; p++) nt += d->seq_y[i * cols + p] != -1;
      *n_all += nt;
      if (!keep) continue;
      *n_mine += nt;
      memcpy(hx + b * cols, d->seq_x + i * cols, (size_t)cols * sizeof *hx);
      memcpy(hy + b * cols, d->seq_y + i * cols, (size_t)cols * sizeof *hy);
    }
  }
  int64_t sx[2] = {B, cols}, sy[1] = {(int64_t)ny};
  *x = ag_from_host(dev, AG_I32, 2, sx, hx);
  *y = ag_from_host(dev, AG_I32, 1, sy, hy);
  free(hx);
  free(hy);
  return *x && *y ? AG_OK : ag_last_status();
}

static ag_tensor *batch_loss(const model *m, ag_tensor *x, ag_tensor *y) {
  ag_tensor *logits = charlm_model_logits(m, x);
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
    ag_tensor *x = NULL, *y = NULL;
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
    ag_tensor *logits = charlm_model_logits(m, x);
    ag_tensor *last = logits ? ag_slice(logits, 0, -1, ag_tensor_dim(logits, 0), 1) : NULL;
    ag_tensor *p = ag_softmax(last, -1);
    float probs[CHARLM_VOCAB];
    st = p ? ag_to_host(p, probs, sizeof probs) : ag_last_status();
    ag_scope_end();
    if (st != AG_OK) break;
    /* A word has at least one letter: the end mark is not drawn first. */
    if (n == 0) {
      double rest = 1.0 - probs[0];
      if (!(rest > 0)) break;
      for (int k = 1; k < CHARLM_VOCAB; k++) probs[k] = (float)(probs[k] / rest);
      probs[0] = 0;
    }
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

/* Metadata "optimizer" of a checkpoint whose optimizer state is in shard
 * files "<path>.rank<r>.safetensors" (ag_ddp_zero_save). */
#define ZERO_SHARDED "zero-shards"

static bool ckpt_sharded(const ag_safetensors *f) {
  const char *v = f ? ag_safetensors_meta(f, "optimizer") : NULL;
  return v && !strcmp(v, ZERO_SHARDED);
}

static ag_status save_ckpt(const char *path, const model *m, ag_optimizer *opt, const charlm_options *o,
                           int64_t step, bool sharded) {
  ag_param_list all = {0}, st_list = {0};
  ag_status st = ag_params_extend(&all, "model.", &m->params);
  if (st == AG_OK && !sharded) st = ag_optimizer_state(opt, &st_list);
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
  const char *keys[] = {"format", "model", "step", "context", "emb", "hidden", "n_layer", "n_head", "n_embd", "seed",
                        "optimizer"};
  const char *vals[] = {"anygrad-charlm-1", o->model == CHARLM_MLP ? "mlp" : "gpt", v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7],
                        ZERO_SHARDED};
  if (st == AG_OK) st = ag_safetensors_save(path, &all, sharded ? 11 : 10, keys, vals);
  ag_params_free(&all);
  ag_params_free(&st_list);
  return st;
}

/* A decimal integer in [lo, hi], the whole string (no sign for lo >= 0). */
static bool strict_u64(const char *v, uint64_t hi, uint64_t *out) {
  if (!v || !*v || strlen(v) > 20) return false;
  uint64_t x = 0;
  for (const char *p = v; *p; p++) {
    if (*p < '0' || *p > '9') return false;
    unsigned d = (unsigned)(*p - '0');
    if (x > (UINT64_MAX - d) / 10) return false;
    x = x * 10 + d;
  }
  if (x > hi) return false;
  *out = x;
  return true;
}

/* Metadata key k as an integer in [lo, hi]; a missing or malformed value is
 * AG_ERR_CORRUPT naming the key (values are printed only when printable). */
static ag_status meta_u64(const ag_safetensors *f, const char *path, const char *k, uint64_t lo, uint64_t hi,
                          uint64_t *out) {
  const char *v = ag_safetensors_meta(f, k);
  if (!v) return ag_error_set(AG_ERR_CORRUPT, "%s: not a charlm checkpoint (metadata '%s' missing)", path, k);
  if (!strict_u64(v, hi, out) || *out < lo) {
    bool printable = strlen(v) <= 40;
    for (const char *p = v; printable && *p; p++) printable = isprint((unsigned char)*p);
    return ag_error_set(AG_ERR_CORRUPT, "%s: metadata '%s' is %s%s%s, expected an integer in %llu..%llu", path, k,
                        printable ? "'" : "", printable ? v : "not printable", printable ? "'" : "",
                        (unsigned long long)lo, (unsigned long long)hi);
  }
  return AG_OK;
}

static ag_status meta_int(const ag_safetensors *f, const char *path, const char *k, int lo, int hi, int *out) {
  uint64_t x;
  ag_status st = meta_u64(f, path, k, (uint64_t)lo, (uint64_t)hi, &x);
  if (st == AG_OK) *out = (int)x;
  return st;
}

/* Architecture and seed recorded in a checkpoint, so --resume needs no
 * model flags and sees the same data split. Every key is validated. */
static ag_status ckpt_config(const char *path, charlm_options *o, ag_safetensors **out) {
  ag_status st = ag_safetensors_open(path, out);
  if (st != AG_OK) return st;
  ag_safetensors *f = *out;
  const char *fmt = ag_safetensors_meta(f, "format"), *kind = ag_safetensors_meta(f, "model");
  if (!fmt || strcmp(fmt, "anygrad-charlm-1") || !kind)
    st = ag_error_set(AG_ERR_CORRUPT, "%s: not a charlm checkpoint (metadata format/model missing)", path);
  else if (strcmp(kind, "mlp") && strcmp(kind, "gpt"))
    st = ag_error_set(AG_ERR_CORRUPT, "%s: metadata 'model' must be mlp or gpt", path);
  uint64_t step, seed;
  if (st == AG_OK) st = meta_u64(f, path, "step", 0, (uint64_t)CHARLM_MAX_STEPS, &step);
  if (st == AG_OK) st = meta_u64(f, path, "seed", 0, UINT64_MAX, &seed);
  if (st == AG_OK) st = meta_int(f, path, "context", 1, CHARLM_MAX_CONTEXT, &o->context);
  if (st == AG_OK) st = meta_int(f, path, "emb", 1, CHARLM_MAX_WIDTH, &o->emb);
  if (st == AG_OK) st = meta_int(f, path, "hidden", 1, CHARLM_MAX_WIDTH, &o->hidden);
  if (st == AG_OK) st = meta_int(f, path, "n_layer", 1, CHARLM_MAX_LAYERS, &o->n_layer);
  if (st == AG_OK) st = meta_int(f, path, "n_head", 1, CHARLM_MAX_LAYERS, &o->n_head);
  if (st == AG_OK) st = meta_int(f, path, "n_embd", 1, CHARLM_MAX_WIDTH, &o->n_embd);
  if (st != AG_OK) {
    ag_safetensors_close(f);
    *out = NULL;
    return st;
  }
  o->model = !strcmp(kind, "gpt") ? CHARLM_GPT : CHARLM_MLP;
  o->untied_head = false;
  for (int i = 0; i < ag_safetensors_count(f); i++)
    if (!strcmp(ag_safetensors_name(f, i), "model.head.weight")) o->untied_head = true;
  /* The seed fixes the held-out split: resuming with another one would
   * train on held-out words. An explicit seed still wins. */
  if (!o->seed_set) o->seed = seed;
  return AG_OK;
}

static ag_status load_ckpt(ag_safetensors *f, const char *path, const model *m, ag_optimizer *opt, int64_t *step) {
  ag_param_list all = {0}, st_list = {0};
  bool sharded = ckpt_sharded(f);
  ag_status st = ag_params_extend(&all, "model.", &m->params);
  if (st == AG_OK && !sharded) st = ag_optimizer_state(opt, &st_list);
  if (st == AG_OK) st = ag_params_extend(&all, "optim.", &st_list);
  if (st == AG_OK && m->kind == CHARLM_GPT) { /* ckpt_config matched the tying; a guard all the same */
    int n = ag_safetensors_count(f);
    const char **names = calloc((size_t)(n > 0 ? n : 1), sizeof *names);
    if (!names) st = ag_error_set(AG_ERR_OOM, "charlm: out of host memory");
    for (int i = 0; names && i < n; i++) names[i] = ag_safetensors_name(f, i);
    if (st == AG_OK) st = ag_gpt_check_tying(&m->gpt, n, names, "model.");
    free(names);
  }
  if (st == AG_OK) st = ag_safetensors_load_into(f, &all);
  /* the optimizer state (and the parameters again) from every shard */
  if (st == AG_OK && sharded) st = ag_zero_load_unsharded(path, &m->params, opt);
  uint64_t s = 0; /* validated by ckpt_config */
  strict_u64(ag_safetensors_meta(f, "step"), (uint64_t)CHARLM_MAX_STEPS, &s);
  *step = (int64_t)s;
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

static void progress(FILE *out, bool tty, ag_device dev, int64_t step, int64_t total, double loss, double mean,
                     double rate, const char *unit) {
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
  fprintf(out, "%s[%s] %6lld/%lld loss %.4f (mean %.4f) | %.1fk %s/s%s%s", tty ? "\r" : "", bar, (long long)step,
          (long long)total, loss, mean, rate / 1000.0, unit, mem, tty ? "\033[K" : "\n");
  fflush(out);
}

/* ---------------- checks before the first step ---------------- */

/* Options outside the documented limits, or non-finite, are refused before
 * any data or device is touched (a NaN learning rate would otherwise train
 * and write NaN weights over a good checkpoint). */
static ag_status validate_options(const charlm_options *o) {
  const char *bad = NULL;
  if (!(isfinite(o->lr) && o->lr > 0 && o->lr <= CHARLM_MAX_LR)) bad = "lr (finite, 0 < lr <= 10)";
  else if (!(isfinite(o->weight_decay) && o->weight_decay >= 0 && o->weight_decay <= 1)) bad = "weight_decay (0..1)";
  else if (!(isfinite(o->clip) && o->clip >= 0)) bad = "clip (finite, >= 0)";
  else if (o->steps < 0 || o->steps > CHARLM_MAX_STEPS) bad = "steps (0..2^40)";
  else if (o->warmup < 0 || o->warmup > CHARLM_MAX_STEPS) bad = "warmup (0..2^40)";
  else if (o->batch < 1 || o->batch > CHARLM_MAX_BATCH) bad = "batch (1..1048576)";
  else if (o->accum < 1 || o->accum > CHARLM_MAX_ACCUM) bad = "accum (1..4096)";
  else if (o->context < 1 || o->context > CHARLM_MAX_CONTEXT) bad = "context (1..64)";
  else if (o->emb < 1 || o->emb > CHARLM_MAX_WIDTH || o->hidden < 1 || o->hidden > CHARLM_MAX_WIDTH ||
           o->n_embd < 1 || o->n_embd > CHARLM_MAX_WIDTH)
    bad = "emb, hidden, n_embd (1..16384)";
  else if (o->n_layer < 1 || o->n_layer > CHARLM_MAX_LAYERS || o->n_head < 1 || o->n_head > CHARLM_MAX_LAYERS)
    bad = "n_layer, n_head (1..64)";
  else if (o->eval_batches < 0 || o->samples < 0 || o->log_every < 1) bad = "eval_batches, samples (>= 0), log_every (>= 1)";
  else if (o->precision != AG_F32 && o->precision != AG_F16 && o->precision != AG_BF16) bad = "precision (f32, f16, bf16)";
  else if (o->out && !*o->out) bad = "out (empty path)";
  else if (o->save_every < 0 || o->save_every > CHARLM_MAX_STEPS) bad = "save_every (0..2^40)";
  else if (o->heartbeat && !*o->heartbeat) bad = "heartbeat (empty path)";
  if (bad) return ag_error_set(AG_ERR_INVALID, "charlm: invalid option %s", bad);
  return AG_OK;
}

/* The shared up-front check of an output path (ag_output_check: a regular
 * file or nothing there, a file can be created beside it; nothing left
 * behind), with this job's prefix on the message. */
static ag_status check_writable(const char *path, const char *what) {
  ag_status st = ag_output_check(path, what);
  if (st != AG_OK) {
    char msg[512];
    snprintf(msg, sizeof msg, "%s", ag_last_error());
    st = ag_error_set(st, "charlm: %s", msg);
  }
  return st;
}

/* OpenBLAS (the CPU backend's matmul) mallocs one 128 MiB buffer on its
 * first call and, when an address-space limit (ulimit -v) refuses it,
 * retries forever instead of failing. Probe for that much address space (and
 * a little for the first step's tensors) before the first step, so the run
 * stops with a message instead of hanging. Only matters under a limit; later
 * allocations that fail report AG_ERR_OOM as usual. */
#define BLAS_HEADROOM ((size_t)130 << 20)
static ag_status check_address_space(void) {
  unsigned long long limit_kib = 0;
  if (!ag_address_space_short(BLAS_HEADROOM, &limit_kib)) return AG_OK;
  return ag_error_set(AG_ERR_OOM,
                      "charlm: out of host memory: the address-space limit (ulimit -v %llu KiB) leaves less than "
                      "%zu MiB free, which the CPU BLAS needs for its buffers (it would stall, not fail); raise "
                      "or remove the limit",
                      limit_kib, BLAS_HEADROOM >> 20);
}

/* Whether every parameter is finite (reads them to the host). */
static ag_status params_finite(const ag_param_list *l, const char **out_bad) {
  *out_bad = NULL;
  for (int i = 0; i < l->count && !*out_bad; i++) {
    ag_tensor *t = l->tensors[i];
    int64_t n = ag_tensor_numel(t);
    float *h = malloc((size_t)(n > 0 ? n : 1) * sizeof *h);
    if (!h) return ag_error_set(AG_ERR_OOM, "charlm: out of host memory");
    ag_tensor *f = ag_tensor_dtype(t) == AG_F32 ? ag_tensor_retain(t) : ag_cast(t, AG_F32);
    ag_status st = f ? ag_to_host(f, h, (size_t)n * sizeof *h) : ag_last_status();
    ag_tensor_release(f);
    for (int64_t k = 0; st == AG_OK && k < n; k++)
      if (!isfinite(h[k])) {
        *out_bad = l->names[i];
        break;
      }
    free(h);
    if (st != AG_OK) return st;
  }
  return AG_OK;
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

/* The loss of every step is summed on the device (no host sync) and read at
 * each progress line: the mean over the steps since the last line is the
 * smoothed loss, and a NaN/Inf in any of them shows there. */
static ag_status loss_accumulate(ag_tensor *sum, ag_tensor *loss) {
  ag_tensor *d = ag_detach(loss);
  ag_tensor *c = d && ag_tensor_dtype(d) != AG_F32 ? ag_cast(d, AG_F32) : d;
  ag_tensor *n = c ? ag_add(sum, c) : NULL;
  ag_status st = n ? ag_copy_(sum, n) : ag_last_status();
  ag_tensor_release(n);
  if (c != d) ag_tensor_release(c);
  ag_tensor_release(d);
  return st;
}

/* One training step at batch B (the loop's step without logging) and the
 * allocator's peaks during it: a warm step first, so gradients, optimizer
 * state and the caches are as in a running job. */
static ag_status probe_step(model *m, ag_optimizer *opt, const dataset *train, const charlm_options *o, int64_t B,
                            ag_memory_stats *out_before, ag_memory_stats *out_after) {
  ag_status st = AG_OK;
  uint64_t rng = o->seed;
  bool amp = o->precision == AG_F16 || o->precision == AG_BF16;
  for (int rep = 0; rep < 2 && st == AG_OK; rep++) {
    if (rep == 1) {
      st = ag_memory_reset_peak(o->device);
      if (st == AG_OK) st = ag_memory_stats_get(o->device, out_before);
    }
    ag_scope_begin();
    for (int a = 0; a < o->accum && st == AG_OK; a++) {
      ag_tensor *x = NULL, *y = NULL;
      st = make_batch(m, train, B, &rng, o->device, &x, &y);
      if (st == AG_OK && amp) st = ag_autocast_begin(o->precision);
      if (st != AG_OK) break;
      ag_tensor *loss = batch_loss(m, x, y);
      if (amp) ag_autocast_end();
      st = loss ? ag_backward(loss, NULL, false) : ag_last_status();
    }
    if (st == AG_OK && o->clip > 0 && !ag_clip_grad_norm(&m->params, o->clip)) st = ag_last_status();
    if (st == AG_OK) st = ag_optimizer_step(opt);
    ag_optimizer_zero_grad(opt);
    ag_scope_end();
  }
  if (st == AG_OK) st = ag_memory_stats_get(o->device, out_after);
  return st;
}

/* Predict the step's allocated peak by category at o->batch from two probe
 * steps at small batches: what does not depend on the batch (parameters,
 * gradients, optimizer state) is measured, and activations and temporaries
 * are extrapolated linearly in the batch. */
static ag_status estimate_memory(model *m, ag_optimizer *opt, const dataset *train, const charlm_options *o,
                                 charlm_memory_estimate *e) {
  memset(e, 0, sizeof *e);
  e->batch = o->batch;
  /* Probes of a quarter and a half of the batch. The step's peak is the
   * largest of its moments' allocated bytes, each linear in the batch, so
   * it bends upwards: at small batches a moment with fixed-size temporaries
   * is the peak, at large ones a moment with more per-example bytes (the
   * MLP's turns between batch 64 and 128). Probes nearer the batch follow
   * the moment that is the peak there: an eighth and a quarter
   * underestimated the MLP at 512 by 13%. */
  int64_t b1 = o->batch / 4 > 1 ? o->batch / 4 : 1, b2 = o->batch / 2 > b1 ? o->batch / 2 : b1 + 1;
  if (b2 > o->batch) b1 = b2 = o->batch;
  e->probe_batch[0] = b1;
  e->probe_batch[1] = b2;
  ag_memory_stats s[2][2];
  ag_status st = probe_step(m, opt, train, o, b1, &s[0][0], &s[0][1]);
  if (st == AG_OK) st = probe_step(m, opt, train, o, b2, &s[1][0], &s[1][1]);
  if (st != AG_OK) return st;
  double p1 = (double)s[0][1].allocated_bytes[AG_POOL_ALL].peak, p2 = (double)s[1][1].allocated_bytes[AG_POOL_ALL].peak;
  double slope = b2 > b1 ? (p2 - p1) / (double)(b2 - b1) : 0;
  e->per_example_bytes = slope;
  e->peak_bytes = p2 + slope * (double)(o->batch - b2);
  for (int c = 0; c < AG_MEM_CATEGORY_COUNT; c++) {
    double c1 = (double)s[0][1].category_bytes[c].peak, c2 = (double)s[1][1].category_bytes[c].peak;
    double cs = b2 > b1 ? (c2 - c1) / (double)(b2 - b1) : 0;
    e->category_peak[c] = c2 + cs * (double)(o->batch - b2);
  }
  return AG_OK;
}

/* The largest batch whose training step fits: predicted from the estimate's
 * per-example bytes against the limit (the memory cap, else the device's
 * free memory), then grown by 1/4 until a step fails with AG_ERR_OOM (or
 * shrunk until one runs); the error is caught, the step's memory is
 * released, and 10% is kept as a safety margin. Every probe is a full step
 * (forward, backward, optimizer), after a warm step at batch 1 that creates
 * the optimizer state. */
static ag_status batch_search(model *m, ag_optimizer *opt, const dataset *train, charlm_options *o,
                              charlm_batch_search *bs) {
  memset(bs, 0, sizeof *bs);
  ag_memory_stats s;
  ag_device_props pr;
  ag_status st = ag_memory_stats_get(o->device, &s);
  if (st == AG_OK) st = ag_device_props_get(o->device, &pr);
  if (st != AG_OK) return st;
  size_t free_b = 0, total_b = 0;
  if (s.cap_bytes > 0) {
    bs->limit_bytes = s.cap_bytes;
  } else if (pr.unified_memory) {
    return ag_error_set(AG_ERR_INVALID, "charlm: --batch auto on %s (device memory is host memory) needs a memory cap "
                        "to search under: AG_ALLOC_CONF=memory_cap_mb:N", pr.name);
  } else {
    st = ag_device_mem_info(o->device, &free_b, &total_b);
    if (st != AG_OK) return st;
    bs->limit_bytes = (int64_t)free_b + s.reserved_bytes[AG_POOL_ALL].current;
  }
  ag_memory_stats a, b;
  charlm_options w = *o;
  w.batch = 1;
  st = probe_step(m, opt, train, &w, 1, &a, &b); /* optimizer state, caches */
  if (st != AG_OK) return st;
  st = ag_memory_stats_get(o->device, &s);
  if (st != AG_OK) return st;
  bs->allocated_before = s.allocated_bytes[AG_POOL_ALL].current;
  charlm_memory_estimate e;
  w.batch = 64;
  st = estimate_memory(m, opt, train, &w, &e);
  if (st != AG_OK) return st;
  double fixed = e.peak_bytes - e.per_example_bytes * 64.0;
  double pred = e.per_example_bytes > 0 ? ((double)bs->limit_bytes - fixed) / e.per_example_bytes : (double)CHARLM_MAX_BATCH;
  bs->predicted = pred < 1 ? 1 : pred > CHARLM_MAX_BATCH ? CHARLM_MAX_BATCH : (int64_t)pred;
  int64_t B = bs->predicted, fit = 0, fail = 0;
  while (st == AG_OK && bs->tries < 24) {
    bs->tries++;
    st = probe_step(m, opt, train, o, B, &a, &b);
    if (st == AG_ERR_OOM) { /* the recoverable out-of-memory error: caught, nothing kept */
      ag_error_clear();
      st = AG_OK;
      bs->ooms++;
      fail = B;
      if (fit) break;
      if (B == 1) return ag_error_set(AG_ERR_OOM, "charlm: --batch auto: even batch 1 does not fit in %lld bytes",
                                      (long long)bs->limit_bytes);
      B = B * 4 / 5 > 0 ? B * 4 / 5 : 1;
      continue;
    }
    if (st != AG_OK) break;
    fit = B;
    if (fail || B >= CHARLM_MAX_BATCH) break;
    B = B + B / 4 + 1 < CHARLM_MAX_BATCH ? B + B / 4 + 1 : CHARLM_MAX_BATCH;
  }
  if (st != AG_OK) return st;
  if (!fit) return ag_error_set(AG_ERR_OOM, "charlm: --batch auto: no batch fits in %lld bytes", (long long)bs->limit_bytes);
  bs->largest_fit = fit;
  bs->chosen = fit - fit / 10 > 0 ? fit - fit / 10 : 1;
  ag_optimizer_zero_grad(opt);
  st = ag_memory_stats_get(o->device, &s);
  if (st == AG_OK) bs->allocated_after = s.allocated_bytes[AG_POOL_ALL].current;
  (void)fail;
  return st;
}

static void print_estimate(FILE *out, const charlm_memory_estimate *e, const char *dname) {
  fprintf(out, "charlm: memory estimate for batch %lld on %s (from steps at batch %lld and %lld, activations\n"
               "        and temporaries scaled linearly in the batch):\n",
          (long long)e->batch, dname, (long long)e->probe_batch[0], (long long)e->probe_batch[1]);
  for (int c = 0; c < AG_MEM_CATEGORY_COUNT; c++)
    if (e->category_peak[c] > 0)
      fprintf(out, "  %-12s %10.2f MiB (peak)\n", ag_mem_category_name((ag_mem_category)c),
              e->category_peak[c] / 1048576.0);
  fprintf(out, "  %-12s %10.2f MiB allocated at the step's peak (+%.1f KiB per example)\n", "total",
          e->peak_bytes / 1048576.0, e->per_example_bytes / 1024.0);
}

/* The run's configuration, for the report. */
static ag_status report_info(ag_profiler *p, const charlm_options *o, const char *dname, const model *m) {
  char v[64];
  ag_status st = ag_profiler_set_info(p, "program", "anygrad train (models/charlm.c)");
  if (st == AG_OK) st = ag_profiler_set_info(p, "model", o->model == CHARLM_MLP ? "mlp" : "gpt");
  snprintf(v, sizeof v, "%lld", (long long)ag_params_numel(&m->params));
  if (st == AG_OK) st = ag_profiler_set_info(p, "parameters", v);
  if (o->model == CHARLM_MLP)
    snprintf(v, sizeof v, "context %d, emb %d, hidden %d", o->context, o->emb, o->hidden);
  else
    snprintf(v, sizeof v, "layers %d, heads %d, embd %d", o->n_layer, o->n_head, o->n_embd);
  if (st == AG_OK) st = ag_profiler_set_info(p, "sizes", v);
  if (st == AG_OK) st = ag_profiler_set_info(p, "device", dname);
  snprintf(v, sizeof v, "%lld x %d", (long long)o->batch, o->accum);
  if (st == AG_OK) st = ag_profiler_set_info(p, "batch x accum", v);
  snprintf(v, sizeof v, "%lld", (long long)o->steps);
  if (st == AG_OK) st = ag_profiler_set_info(p, "steps", v);
  snprintf(v, sizeof v, "%g (warmup %lld, cosine)", o->lr, (long long)o->warmup);
  if (st == AG_OK) st = ag_profiler_set_info(p, "learning rate", v);
  snprintf(v, sizeof v, "weight decay %g, clip %g", o->weight_decay, o->clip);
  if (st == AG_OK) st = ag_profiler_set_info(p, "AdamW", v);
  if (st == AG_OK) st = ag_profiler_set_info(p, "precision", ag_dtype_name(o->precision));
  if (st == AG_OK && o->model == CHARLM_GPT)
    st = ag_profiler_set_info(p, "activation checkpointing", o->checkpoint_activations ? "on" : "off");
  snprintf(v, sizeof v, "%llu", (unsigned long long)o->seed);
  if (st == AG_OK) st = ag_profiler_set_info(p, "seed", v);
  const char *conf = getenv("AG_ALLOC_CONF");
  if (st == AG_OK && conf && *conf) st = ag_profiler_set_info(p, "AG_ALLOC_CONF", conf);
  return st;
}

static ag_status charlm_train_rank(const charlm_options *opts, charlm_result *res);

/* A replica that fails breaks the group, so the others stop at once
 * instead of waiting for it until the timeout. */
ag_status charlm_train(const charlm_options *opts, charlm_result *res) {
  ag_status st = charlm_train_rank(opts, res);
  if (st != AG_OK && opts && opts->group) ag_group_abort(opts->group, ag_last_error());
  return st;
}

static int64_t optimizer_category(ag_device d) {
  ag_memory_stats s;
  return ag_memory_stats_get(d, &s) == AG_OK ? s.category_bytes[AG_MEM_OPTIMIZER].current : 0;
}

static ag_status charlm_train_rank(const charlm_options *opts, charlm_result *res) {
  charlm_options o = *opts;
  charlm_result r = {0};
  ag_group *grp = o.group;
  bool lead = !grp || ag_group_rank(grp) == 0;
  if (grp && (o.batch_auto || o.estimate_memory))
    return ag_error_set(AG_ERR_INVALID, "charlm: --batch auto and --estimate-memory measure one device; not with "
                        "data parallelism");
  if (grp && !(isfinite(o.slowdown) && (o.slowdown == 0 || o.slowdown >= 1)))
    return ag_error_set(AG_ERR_INVALID, "charlm: invalid option slowdown (0 or >= 1)");
  if (o.zero_stage < 0 || o.zero_stage > 2)
    return ag_error_set(AG_ERR_INVALID, "charlm: invalid option zero_stage %d (0, 1 or 2)", o.zero_stage);
  if (o.zero_stage && !grp)
    return ag_error_set(AG_ERR_INVALID, "charlm: a sharded optimizer (zero stage %d) needs data parallelism "
                        "(--devices or --dist mpi)", o.zero_stage);
  if (o.zero_stage && o.precision == AG_F16)
    return ag_error_set(AG_ERR_UNSUPPORTED, "charlm: f16 precision's loss scaling is not supported with a sharded "
                        "optimizer (its inf check would see one shard); use bf16 or f32");
  const char *zero_out = o.zero_stage ? o.out : NULL; /* every rank writes its shard */
  if (!lead) { /* only rank 0 prints, evaluates, samples and writes */
    o.quiet = true;
    o.out = NULL;
    o.trace = NULL;
    o.report = NULL;
    o.profile = false;
    o.eval_batches = 0;
    o.samples = 0;
  }
  FILE *out = o.log ? o.log : stdout;
  bool tty = !o.quiet && isatty(fileno(out));
  ag_safetensors *ck = NULL;
  ag_status st = validate_options(&o);
  if (st == AG_OK && o.resume) st = ckpt_config(o.resume, &o, &ck);
  if (st == AG_OK) st = validate_options(&o); /* the checkpoint's sizes too */
  /* Output paths are checked before any work, not found unwritable after it. */
  if (st == AG_OK && o.out) st = check_writable(o.out, "checkpoint");
  if (st == AG_OK && o.trace) st = check_writable(o.trace, "trace");
  if (st == AG_OK && o.report) st = check_writable(o.report, "report");
  if (st == AG_OK && o.heartbeat) st = check_writable(o.heartbeat, "heartbeat");
  if (st != AG_OK) {
    ag_safetensors_close(ck);
    return st;
  }

  char **words = NULL;
  int n_words = 0;
  st = charlm_words_load(o.words_path, o.seed, "charlm", &words, &n_words);
  if (st != AG_OK) {
    ag_safetensors_close(ck);
    return st;
  }
  int n_val = charlm_words_val(n_words);
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
    st = charlm_model_init(&m, &o, o.device, gen);
    have_model = st == AG_OK;
  }
  ag_adamw_options ao = ag_adamw_defaults();
  ao.lr = o.lr;
  ao.weight_decay = o.weight_decay;
  int64_t opt_before = optimizer_category(o.device);
  if (st == AG_OK && !o.zero_stage) { /* sharded: over this rank's shard, below */
    opt = ag_adamw_create(&m.params, &ao);
    if (!opt) st = ag_last_status();
    r.optimizer_bytes = optimizer_category(o.device) - opt_before;
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
  bool resumed = ck != NULL;
  if (st == AG_OK && ck && o.zero_stage && !ckpt_sharded(ck))
    st = ag_error_set(AG_ERR_UNSUPPORTED, "charlm: %s holds the whole optimizer state: resume it without --zero "
                      "(a sharded run resumes from a checkpoint written with --zero, by any number of ranks)",
                      o.resume);
  if (st == AG_OK && ck && lead && !o.zero_stage) st = load_ckpt(ck, o.resume, &m, opt, &start);
  if (st == AG_OK && ck && (!lead || o.zero_stage)) { /* the tensors come from rank 0 or the shards below */
    uint64_t s = 0; /* validated by ckpt_config */
    strict_u64(ag_safetensors_meta(ck, "step"), (uint64_t)CHARLM_MAX_STEPS, &s);
    start = (int64_t)s;
    if (opt) ag_optimizer_set_steps(opt, start);
  }
  ag_safetensors_close(ck);
  /* Data parallelism: parameters (and a resumed optimizer state) from
   * rank 0; the global batch shared equally, or by measured throughput. */
  ag_ddp *ddp = NULL;
  if (st == AG_OK && grp) {
    ag_ddp_options dopt;
    ag_ddp_options_default(&dopt);
    if (o.bucket_bytes > 0) dopt.bucket_bytes = o.bucket_bytes;
    dopt.zero_stage = o.zero_stage;
    st = ag_ddp_create(grp, &m.params, &dopt, &ddp);
    if (st == AG_OK && o.zero_stage) {
      ag_param_list shard = {0};
      st = ag_ddp_zero_params(ddp, NULL, &shard);
      opt_before = optimizer_category(o.device);
      if (st == AG_OK && !(opt = ag_adamw_create(&shard, &ao))) st = ag_last_status();
      r.optimizer_bytes = optimizer_category(o.device) - opt_before;
      ag_params_free(&shard);
      if (st == AG_OK) ag_optimizer_set_steps(opt, start);
      if (st == AG_OK && resumed) st = ag_ddp_zero_load(ddp, opt, o.resume);
    } else if (st == AG_OK && resumed) {
      ag_param_list sl = {0};
      st = ag_optimizer_state(opt, &sl);
      if (st == AG_OK) st = ag_ddp_broadcast(ddp, &sl, 0);
      ag_params_free(&sl);
    }
    ag_ddp_balance_options bo;
    ag_ddp_balance_options_default(&bo);
    bo.global_rows = o.batch;
    bo.fixed = !o.balance;
    if (st == AG_OK) st = ag_ddp_balance_enable(ddp, &bo);
    if (st == AG_OK && o.slowdown > 1) st = ag_ddp_set_slowdown(ddp, o.slowdown);
  }
  if (st == AG_OK && o.device.backend == AG_BACKEND_CPU) st = check_address_space();
  int64_t sshape[1] = {1};
  ag_tensor *loss_sum = st == AG_OK ? ag_zeros(o.device, AG_F32, 1, sshape) : NULL;
  if (st == AG_OK && !loss_sum) st = ag_last_status();

  char dname[32];
  ag_device_str(o.device, dname, sizeof dname);
  const char *unit = o.model == CHARLM_MLP ? "examples" : "tokens";
  int64_t per_step = o.batch * o.accum * (o.model == CHARLM_MLP ? 1 : T);
  if (st == AG_OK && !o.quiet)
    fprintf(out, "charlm: %s model, %lld parameters, %d train / %d held-out words, device %s, %s%s\n",
            o.model == CHARLM_MLP ? "mlp" : "gpt", (long long)ag_params_numel(&m.params), train.n_words,
            val.n_words, dname, ag_dtype_name(amp ? o.precision : AG_F32), start ? " (resumed)" : "");
  if (st == AG_OK && start && !o.quiet) fprintf(out, "charlm: resuming at step %lld\n", (long long)start);
  /* A checkpoint already at or past --steps is left as it is: saving it
   * again would record steps that were never run. */
  bool nothing = st == AG_OK && o.resume && start >= o.steps;
  if (nothing && !o.quiet)
    fprintf(out, "charlm: the checkpoint is at step %lld and --steps is %lld: nothing to train (the checkpoint "
                 "is not rewritten; pass --steps > %lld to continue)\n",
            (long long)start, (long long)o.steps, (long long)start);

  if (st == AG_OK && o.batch_auto && !nothing) {
    /* The probe steps run with learning rate 0: the parameters stay as they
     * were (the optimizer's moment estimates do see the probe batches). */
    ag_optimizer_set_lr(opt, 0.0);
    st = batch_search(&m, opt, &train, &o, &r.batch_search);
    if (st == AG_OK) {
      o.batch = r.batch_search.chosen;
      per_step = o.batch * o.accum * (o.model == CHARLM_MLP ? 1 : T);
      if (!o.quiet)
        fprintf(out, "charlm: --batch auto: %lld (largest fitting %lld under %.1f MiB, predicted %lld; %d steps "
                     "tried, %d out-of-memory errors caught; 10%% margin)\n",
                (long long)o.batch, (long long)r.batch_search.largest_fit, r.batch_search.limit_bytes / 1048576.0,
                (long long)r.batch_search.predicted, r.batch_search.tries, r.batch_search.ooms);
    }
  }
  if (st == AG_OK && o.estimate_memory && !nothing) {
    st = estimate_memory(&m, opt, &train, &o, &r.estimate);
    if (st == AG_OK && !o.quiet) print_estimate(out, &r.estimate, dname);
    nothing = true; /* an estimate trains nothing and writes no checkpoint */
    o.steps = start;
    o.eval_batches = 0;
    o.samples = 0;
  }
  /* The step profiler costs a few events per step; it says at the end
   * whether the device waited on input, on host syncs, or leaked memory. */
  ag_profiler *prof = NULL;
  if (st == AG_OK && !nothing && (o.profile || o.trace || o.report)) {
    ag_profiler_config pc = {.window = o.report ? 20 : 100, .trace = o.trace != NULL};
    prof = ag_profiler_create(o.device, &pc);
    if (!prof) st = ag_last_status();
  }
  if (prof) st = report_info(prof, &o, dname, &m);
  /* The report replays the allocator's event ring: keep enough events for a
   * few steps of a larger model, unless AG_ALLOC_CONF chose a size. */
  const char *conf = getenv("AG_ALLOC_CONF");
  if (st == AG_OK && o.report && !(conf && strstr(conf, "trace_max_entries")))
    st = ag_alloc_configure(o.device, "trace_max_entries:16384");
  double t0 = now_s(), t_log = t0;
  int64_t last_log_step = start, smooth_n = 0;
  r.first_loss = NAN;
  r.smooth_loss = NAN;
  r.steps_done = start;
  bool line_open = false; /* a tty progress line without its newline yet */
  for (int64_t step = start; st == AG_OK && step < o.steps; step++) {
    ag_optimizer_set_lr(opt, ag_lr_cosine(step, o.warmup, o.steps, o.lr, o.lr * 0.1));
    /* Batches depend only on (seed, step): a resumed run sees the same data. */
    uint64_t rng = o.seed * 0x100000001b3ull + (uint64_t)step;
    if (prof) ag_profiler_step_begin(prof);
    ag_scope_begin();
    ag_tensor *loss = NULL;
    int64_t rows = o.batch, off = 0;
    double last_tok_w = 1.0;
    if (ddp) {
      st = ag_ddp_step_begin(ddp);
      if (st == AG_OK) st = ag_ddp_rows(ddp, &rows, &off);
    }
    for (int a = 0; a < o.accum && st == AG_OK; a++) {
      ag_tensor *x = NULL, *y = NULL;
      /* micro-steps before the last accumulate without communication */
      bool quiet_step = ddp && a + 1 < o.accum;
      if (quiet_step) st = ag_ddp_no_sync_begin(ddp);
      int64_t n_mine = 0, n_all = 0;
      if (st == AG_OK) st = make_batch_rows(&m, &train, o.batch, off, rows, &rng, o.device, &x, &y, &n_mine, &n_all);
      if (st != AG_OK) break;
      /* The loss is a mean over targets. MLP: one per row, so the weight
       * rows/global rows that ddp applies is exact. GPT: words have unequal
       * numbers of targets; the exact weight, tokens here / tokens in the
       * global micro-batch, differs per micro-batch, so it scales the loss
       * and the reduction adds with weight 1. */
      double tok_w = 1.0;
      if (ddp && m.kind == CHARLM_GPT) {
        tok_w = n_all > 0 ? (double)n_mine / (double)n_all : 0.0;
        if (a == 0) st = ag_ddp_set_weight(ddp, 1.0);
        if (st != AG_OK) break;
      }
      last_tok_w = tok_w;
      /* The region covers the forward only: backward runs in the dtypes
       * the forward recorded. */
      if (amp) st = ag_autocast_begin(o.precision);
      if (st != AG_OK) break;
      loss = batch_loss(&m, x, y);
      if (amp) ag_autocast_end();
      ag_tensor *part = o.accum > 1 || tok_w != 1.0 ? ag_mul_scalar(loss, tok_w / o.accum) : loss;
      ag_tensor *scaled = ag_grad_scaler_scale(scaler, part);
      st = scaled ? ag_backward(scaled, NULL, false) : ag_last_status();
      ag_tensor_release(scaled);
      if (part != loss) ag_tensor_release(part);
      if (quiet_step) {
        ag_status se = ag_ddp_no_sync_end(ddp);
        if (st == AG_OK) st = se;
      }
    }
    /* The reduced gradients are the global batch's: clip, unscale and step
     * as on one device (the same decisions on every rank). */
    if (st == AG_OK && ddp) st = ag_ddp_finish(ddp);
    /* Clipping reads gradient values: unscale them first. */
    if (st == AG_OK && o.clip > 0) st = ag_grad_scaler_unscale_(scaler, opt);
    if (st == AG_OK && o.clip > 0) {
      ag_tensor *norm = o.zero_stage ? ag_ddp_clip_grad_norm(ddp, o.clip) : ag_clip_grad_norm(&m.params, o.clip);
      if (!norm) st = ag_last_status();
      ag_tensor_release(norm);
    }
    if (st == AG_OK) st = ag_grad_scaler_step(scaler, opt);
    if (st == AG_OK && o.zero_stage) st = ag_ddp_gather_params(ddp); /* every rank's updated shard */
    if (st == AG_OK) st = ag_grad_scaler_update(scaler);
    /* With replicas, each adds its loss weighted by its share: the sum over
     * ranks (read at the progress lines) is the global batch's loss. */
    ag_tensor *lw = loss;
    if (st == AG_OK && ddp) {
      ag_tensor *dl = ag_detach(loss);
      lw = dl ? ag_mul_scalar(dl, m.kind == CHARLM_GPT ? last_tok_w : ag_ddp_weight(ddp)) : NULL;
      ag_tensor_release(dl);
      if (!lw) st = ag_last_status();
    }
    if (st == AG_OK) st = loss_accumulate(loss_sum, lw);
    ag_optimizer_zero_grad(opt);
    bool log_now = step == start || (step + 1) % o.log_every == 0 || step + 1 == o.steps;
    if (st == AG_OK && log_now && ddp) {
      st = ag_all_reduce(grp, lw, AG_DIST_SUM, NULL);
      if (st == AG_OK) st = ag_all_reduce(grp, loss_sum, AG_DIST_SUM, NULL);
    }
    if (st == AG_OK && log_now) {
      double l = ag_item(lw); /* with the sum below, the step's only host syncs */
      if (isnan(l) && ag_last_status() != AG_OK) st = ag_last_status();
      double mean = st == AG_OK ? ag_item(loss_sum) / (double)(step + 1 - last_log_step) : NAN;
      if (st == AG_OK && isnan(mean) && ag_last_status() != AG_OK) st = ag_last_status();
      if (st == AG_OK) st = ag_fill_(loss_sum, 0.0);
      if (st == AG_OK && (!isfinite(l) || !isfinite(mean))) {
        if (line_open) fputc('\n', out);
        line_open = false;
        char when[160];
        if (step == last_log_step)
          snprintf(when, sizeof when, "at step %lld", (long long)step + 1);
        else
          snprintf(when, sizeof when, "between step %lld and step %lld (--log-every 1 names the exact step)",
                   (long long)last_log_step + 1, (long long)step + 1);
        st = ag_error_set(AG_ERR_STATE, "charlm: training diverged: the loss became %s %s; %s",
                          isnan(l) || isnan(mean) ? "NaN" : "infinite", when,
                          o.out ? "the checkpoint is not written (an existing one is kept)" : "stopped");
      }
      if (st == AG_OK && prof) {
        st = ag_profiler_log_scalar(prof, "loss (last batch)", step, l);
        if (st == AG_OK) st = ag_profiler_log_scalar(prof, "loss (mean since last update)", step, mean);
      }
      if (st == AG_OK) {
        if (step == start) r.first_loss = l;
        r.final_loss = l;
        r.smooth_loss = mean;
        smooth_n = step + 1 - last_log_step;
        double t = now_s();
        double rate = t > t_log ? (double)(step + 1 - last_log_step) * (double)per_step / (t - t_log) : 0;
        r.recent_examples_per_s = rate;
        if (!o.quiet) progress(out, tty, o.device, step + 1, o.steps, l, mean, rate, unit);
        line_open = tty && !o.quiet;
        t_log = t;
        last_log_step = step + 1;
      }
    }
    ag_scope_end();
    if (prof) ag_profiler_step_end(prof);
    if (st == AG_OK) r.steps_done = step + 1;
    /* --save-every: the checkpoint of this step (rank 0 alone has an out),
     * before the heartbeat says the step is done. */
    if (st == AG_OK && (o.out || zero_out) && o.save_every > 0 && (step + 1) % o.save_every == 0 &&
        step + 1 < o.steps) { /* with --zero every rank also writes its shard */
      const char *bad = NULL;
      st = params_finite(&m.params, &bad);
      if (st == AG_OK && bad)
        st = ag_error_set(AG_ERR_STATE,
                          "charlm: parameter '%s' is NaN/Inf after step %lld; the checkpoint %s is not written "
                          "(an existing one is kept)",
                          bad, (long long)step + 1, o.out ? o.out : zero_out);
      if (st == AG_OK && o.out) st = save_ckpt(o.out, &m, opt, &o, step + 1, o.zero_stage != 0);
      if (st == AG_OK && zero_out) st = ag_ddp_zero_save(ddp, opt, zero_out);
    }
    if (st == AG_OK && o.heartbeat) st = heartbeat_write(o.heartbeat, grp ? ag_group_rank(grp) : 0, step + 1, "train");
    /* The report's held-out curve: a short evaluation outside the step. */
    if (st == AG_OK && o.report && log_now && o.eval_batches > 0 && step + 1 < o.steps) {
      double v = evaluate(&m, &val, o.eval_batches < 4 ? o.eval_batches : 4, o.model == CHARLM_MLP ? 1024 : 64,
                          o.device, &st);
      if (st == AG_OK) st = ag_profiler_log_scalar(prof, "held-out loss", step, v);
    }
  }
  /* The progress line ends before anything else is printed. */
  if (line_open) fputc('\n', out);
  ag_status trace_st = AG_OK;
  if (prof) {
    if (!o.quiet && st == AG_OK) ag_profiler_report(prof, out);
    if (o.trace && st == AG_OK) {
      trace_st = ag_profiler_write_trace(prof, o.trace);
      if (trace_st == AG_OK && !o.quiet)
        fprintf(out, "charlm: trace %s (open in chrome://tracing or ui.perfetto.dev)\n", o.trace);
    }
    if (!o.report) {
      ag_profiler_destroy(prof);
      prof = NULL;
    }
  }
  char trace_err[512] = "";
  if (trace_st != AG_OK) snprintf(trace_err, sizeof trace_err, "%s", ag_last_error());
  r.seconds = now_s() - t0;
  if (r.steps_done > start && r.seconds > 0) r.examples_per_s = (double)(r.steps_done - start) * per_step / r.seconds;
  if (st == AG_OK && o.eval_batches > 0) {
    r.val_loss = evaluate(&m, &val, o.eval_batches, o.model == CHARLM_MLP ? 1024 : 64, o.device, &st);
    if (st == AG_OK && !o.quiet && r.steps_done > start)
      fprintf(out,
              "charlm: %lld steps in %.1f s (%.1fk %s/s), train loss %.4f (mean of the last %lld step%s; "
              "last batch %.4f), held-out loss %.4f\n",
              (long long)(r.steps_done - start), r.seconds, r.examples_per_s / 1000.0, unit, r.smooth_loss,
              (long long)smooth_n, smooth_n == 1 ? "" : "s", r.final_loss, r.val_loss);
    else if (st == AG_OK && !o.quiet)
      fprintf(out, "charlm: held-out loss %.4f\n", r.val_loss);
    if (st == AG_OK && prof && r.steps_done > start)
      st = ag_profiler_log_scalar(prof, "held-out loss", r.steps_done - 1, r.val_loss);
  }
  if (prof) { /* the report: after the final held-out loss */
    if (st == AG_OK && r.steps_done > start) {
      st = ag_report_write(prof, o.report);
      if (st == AG_OK && !o.quiet) fprintf(out, "charlm: report %s (open in a browser)\n", o.report);
    }
    ag_profiler_destroy(prof);
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
  /* Only parameters of a run that trained, and only finite ones, replace
   * the file at out. */
  if (st == AG_OK && (o.out || zero_out) && !nothing && r.steps_done > start) { /* the same verdict on every rank */
    const char *bad = NULL;
    st = params_finite(&m.params, &bad);
    if (st == AG_OK && bad)
      st = ag_error_set(AG_ERR_STATE,
                        "charlm: parameter '%s' is NaN/Inf after step %lld; the checkpoint %s is not written "
                        "(an existing one is kept)",
                        bad, (long long)r.steps_done, o.out ? o.out : zero_out);
  }
  if (st == AG_OK && o.out && !nothing && r.steps_done > start) {
    st = save_ckpt(o.out, &m, opt, &o, r.steps_done, o.zero_stage != 0);
    if (st == AG_OK && !o.quiet)
      fprintf(out, "charlm: checkpoint %s (step %lld; continue with --resume %s --steps N)\n", o.out,
              (long long)r.steps_done, o.out);
  }
  if (st == AG_OK && zero_out && !nothing && r.steps_done > start) st = ag_ddp_zero_save(ddp, opt, zero_out);
  if (st == AG_OK && trace_st != AG_OK)
    st = ag_error_set(trace_st, "charlm: the trace was not written: %s", trace_err);
  if (st == AG_OK && o.heartbeat) st = heartbeat_write(o.heartbeat, grp ? ag_group_rank(grp) : 0, r.steps_done, "end");
  if (ddp) {
    ag_ddp_stats ds;
    int64_t off = 0;
    if (ag_ddp_stats_get(ddp, &ds) == AG_OK) r.ddp = ds;
    ag_ddp_rows(ddp, &r.ddp_rows, &off);
    ag_ddp_destroy(ddp);
  }
  ag_tensor_release(loss_sum);
  ag_grad_scaler_free(scaler);
  ag_optimizer_free(opt);
  if (have_model) charlm_model_free(&m);
  ag_generator_free(gen);
  dataset_free(&train);
  dataset_free(&val);
  if (res) *res = r;
  return st;
}

int charlm_model_onnx(const charlm_model *m, ag_onnx *g, int x) {
  if (!m || m->kind != CHARLM_MLP) {
    ag_error_set(m ? AG_ERR_UNSUPPORTED : AG_ERR_INVALID, "charlm_model_onnx: %s",
                 m ? "only the MLP model is exported (not the GPT)" : "NULL model");
    return -1;
  }
  int e = ag_onnx_flatten(g, ag_onnx_embedding(g, &m->emb, "emb.", x));
  int h = ag_onnx_unary(g, "tanh", ag_onnx_linear(g, &m->l1, "fc1.", e));
  return ag_onnx_linear(g, &m->l2, "fc2.", h);
}
