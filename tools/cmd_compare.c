/* `anygrad compare`: the character-level training job of models/charlm.c run
 * on several devices in lockstep, from identical parameters and batches, with
 * the per-step divergence of loss and parameters against the first device.
 * Exit status: 0 within tolerance, 1 diverged, 2 error (see docs/compare.md). */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "anygrad/llama.h"
#include "anygrad/optrace.h"
#include "charlm.h"
#include "cli.h"
#include "cnn.h"
#include "conformance_html.h"
#include "ulp.h"

#define CMP_MAX_DEV 8

/* ---------------- options ---------------- */

typedef struct cmp_options {
  int n_dev;
  ag_device dev[CMP_MAX_DEV];
  char name[CMP_MAX_DEV][32];
  int64_t steps, log_every, check_every;
  double tol, loss_tol; /* parameters, loss */
  const char *json;
  const char *report;   /* --report FILE.html */
  bool cnn;             /* --model cnn: models/cnn.c on 28x28 images */
  bool llama;           /* --model llama: anygrad/llama.h on the gpt model's batches */
  const char *data;     /* its image directory, or "synthetic" */
  bool bisect;          /* --bisect or --bisect-step */
  int64_t bisect_step;  /* 1-based; 0: the first step over tolerance */
  int64_t bisect_top;   /* ops listed per device */
  FILE *out; /* the human report: stdout, or stderr when the JSON goes to stdout */
  charlm_options job; /* model sizes and hyperparameters of `anygrad train` (the CNN's
                         batch, lr, weight decay and warmup are kept here too) */
} cmp_options;

static const char *model_name(const cmp_options *o) {
  return o->cnn ? "cnn" : o->llama ? "llama" : o->job.model == CHARLM_MLP ? "mlp" : "gpt";
}

static void usage(void) {
  printf(
      "usage: anygrad compare --devices D1,D2[,...] [options]\n"
      "Train one model on several devices in lockstep (same initial parameters,\n"
      "same batches) and report how far each device drifts from the first.\n\n"
      "  --devices LIST   comma-separated devices, the first is the reference\n"
      "                   (e.g. cpu,opencl:0; cpu,cpu must agree exactly)\n"
      "  --steps N        optimizer steps (default 20)\n"
      "  --model mlp|gpt|cnn|llama  model of `anygrad train` (default mlp; cnn: the\n"
      "                   network of --task fashion-mnist; llama: a small Llama-style\n"
      "                   decoder on the gpt model's words)\n"
      "  --seed S         seed of initial parameters and batches (default 1337)\n"
      "  --tol T          relative tolerance of parameters and loss (default:\n"
      "                   1e-2 for parameters, 1e-5 for the loss; see docs/compare.md);\n"
      "                   0: bit for bit (NaN equals NaN, +0 and -0 differ), as the\n"
      "                   portable numerics promise (--numerics portable)\n"
      "  --loss-tol T     relative tolerance of the loss alone (after --tol)\n"
      "  --batch N        examples (mlp), words (gpt, llama) or images (cnn) per step\n"
      "                   (default as train)\n"
      "  --check-every N  compare parameters every N steps (default 1)\n"
      "  --log-every N    print every N-th step (default: about 25 rows)\n"
      "  --words PATH     word list (default /usr/share/dict/words)\n"
      "  --data DIR       --model cnn: Fashion-MNIST idx files (default\n"
      "                   " CNN_DATA_DIR "), or 'synthetic'\n"
      "  --json PATH      write the per-step report as JSON ('-': stdout)\n"
      "  --report FILE    write a self-contained HTML page: divergence curves and\n"
      "                   the bisection table\n"
      "  --bisect         stop at the first step over tolerance and replay it op by op\n"
      "                   on each device from the reference's inputs, ranking the ops\n"
      "                   (forward and backward) by the error each adds\n"
      "  --bisect-step N  bisect step N whatever the divergence (implies --bisect)\n"
      "  --bisect-top N   ops listed per device (default 10; 0: all)\n" AG_CLI_THREADS_HELP AG_CLI_NUMERICS_HELP "\n"
      "Exit status: 0 within tolerance, 1 diverged, 2 error or unavailable device.\n");
}

/* A device from a list entry, with the backend's reason when it is absent. */
static int parse_device(const char *s, ag_device *d) {
  if (ag_device_parse(s, d) == AG_OK) return 0;
  ag_status st = ag_last_status();
  char msg[1024];
  snprintf(msg, sizeof msg, "%s", ag_last_error());
  fprintf(stderr, "anygrad compare: device '%s' is not usable: %s: %s\n", s, ag_status_name(st), msg);
  return -1;
}

/* Returns 0, 1 after --help, -1 after a message on stderr. */
static int parse_args(int argc, char **argv, cmp_options *o) {
  const char *C = "compare";
  enum { O_DEVICES = 256, O_MODEL, O_STEPS, O_SEED, O_TOL, O_LOSS_TOL, O_BATCH, O_CHECK_EVERY, O_LOG_EVERY,
         O_WORDS, O_JSON, O_BISECT, O_BISECT_STEP, O_BISECT_TOP, O_REPORT, O_DATA, O_HELP };
  static const struct option opts[] = {
      {"devices", required_argument, NULL, O_DEVICES},   {"model", required_argument, NULL, O_MODEL},
      {"steps", required_argument, NULL, O_STEPS},       {"seed", required_argument, NULL, O_SEED},
      {"tol", required_argument, NULL, O_TOL},           {"loss-tol", required_argument, NULL, O_LOSS_TOL},
      {"batch", required_argument, NULL, O_BATCH},       {"check-every", required_argument, NULL, O_CHECK_EVERY},
      {"log-every", required_argument, NULL, O_LOG_EVERY}, {"words", required_argument, NULL, O_WORDS},
      {"json", required_argument, NULL, O_JSON},         {"help", no_argument, NULL, O_HELP},
      {"bisect", no_argument, NULL, O_BISECT},           {"bisect-step", required_argument, NULL, O_BISECT_STEP},
      {"bisect-top", required_argument, NULL, O_BISECT_TOP}, {"report", required_argument, NULL, O_REPORT},
      {"data", required_argument, NULL, O_DATA},         AG_CLI_THREADS_OPT,
      AG_CLI_NUMERICS_OPT,                               {NULL, 0, NULL, 0}};
  /* The model picks the defaults the other options then override. */
  charlm_model_kind kind = CHARLM_MLP;
  bool cnn = false, llama = false;
  for (int c = ag_cli_next(C, argc, argv, opts, true); c != -1; c = ag_cli_next(C, argc, argv, opts, false)) {
    if (c == '?') return -1;
    if (c == O_HELP) {
      usage();
      return 1;
    }
    if (c == O_MODEL) {
      const char *v = ag_cli_arg();
      if (strcmp(v, "mlp") && strcmp(v, "gpt") && strcmp(v, "cnn") && strcmp(v, "llama")) {
        fprintf(stderr, "anygrad compare: --model must be mlp, gpt, cnn or llama, got '%s'\n", v);
        return -1;
      }
      /* llama takes the gpt model's batches and hyperparameters */
      kind = !strcmp(v, "gpt") || !strcmp(v, "llama") ? CHARLM_GPT : CHARLM_MLP;
      cnn = !strcmp(v, "cnn");
      llama = !strcmp(v, "llama");
    }
  }
  memset(o, 0, sizeof *o);
  o->job = charlm_defaults(kind);
  o->cnn = cnn;
  o->llama = llama;
  o->data = CNN_DATA_DIR;
  if (cnn) { /* cnn_train's hyperparameters; it does not clip gradients */
    cnn_options co = cnn_defaults();
    o->job.batch = co.batch;
    o->job.lr = co.lr;
    o->job.weight_decay = co.weight_decay;
    o->job.warmup = co.warmup;
    o->job.clip = 0;
  }
  o->job.seed = 1337;
  o->steps = 20;
  o->check_every = 1;
  o->bisect_top = 10;
  double tol_all = 0, tol_loss = 0;
  bool have_tol = false, have_loss_tol = false, ok = true;
  const char *devices = NULL;
  for (int c = ag_cli_next(C, argc, argv, opts, true); ok && c != -1; c = ag_cli_next(C, argc, argv, opts, false)) {
    const char *v = ag_cli_arg();
    switch (c) {
      case O_DEVICES: devices = v; break;
      case AG_CLI_THREADS: ok = ag_cli_threads(C, v); break;
      case AG_CLI_NUMERICS: ok = ag_cli_numerics(C, v); break;
      case O_MODEL: break;
      case O_STEPS: ok = ag_cli_i64(C, "steps", v, 1, CHARLM_MAX_STEPS, &o->steps); break;
      case O_SEED: ok = ag_cli_u64(C, "seed", v, &o->job.seed); break;
      case O_TOL:
        ok = ag_cli_f64(C, "tol", v, 0, 1e300, &tol_all);
        have_tol = true;
        break;
      case O_LOSS_TOL:
        ok = ag_cli_f64(C, "loss-tol", v, 0, 1e300, &tol_loss);
        have_loss_tol = true;
        break;
      case O_BATCH: ok = ag_cli_i64(C, "batch", v, 1, CHARLM_MAX_BATCH, &o->job.batch); break;
      case O_CHECK_EVERY: ok = ag_cli_i64(C, "check-every", v, 1, CHARLM_MAX_STEPS, &o->check_every); break;
      case O_LOG_EVERY: ok = ag_cli_i64(C, "log-every", v, 0, CHARLM_MAX_STEPS, &o->log_every); break;
      case O_WORDS: o->job.words_path = v; break;
      case O_JSON: o->json = v; break;
      case O_REPORT: o->report = v; break;
      case O_DATA: o->data = v; break;
      case O_BISECT: o->bisect = true; break;
      case O_BISECT_STEP:
        ok = ag_cli_i64(C, "bisect-step", v, 1, CHARLM_MAX_STEPS, &o->bisect_step);
        o->bisect = true;
        break;
      case O_BISECT_TOP: ok = ag_cli_i64(C, "bisect-top", v, 0, 1000000, &o->bisect_top); break;
      default: ok = false; break;
    }
  }
  if (!ok) return -1;
  /* No output may replace an input (the word list, --model cnn's IDX files)
   * or another output, checked before anything runs. */
  char pi[4096], pl[4096];
  int ni = snprintf(pi, sizeof pi, "%s/train-images-idx3-ubyte.gz", o->data);
  int nl = snprintf(pl, sizeof pl, "%s/train-labels-idx1-ubyte.gz", o->data);
  bool idx = o->cnn && strcmp(o->data, "synthetic") && ni > 0 && nl > 0 && (size_t)ni < sizeof pi &&
             (size_t)nl < sizeof pl;
  ag_cli_file ins[] = {{"--words", o->cnn ? NULL : o->job.words_path},
                       {"--data", idx ? pi : NULL},
                       {"--data", idx ? pl : NULL}},
              outs[] = {{"--json", o->json}, {"--report", o->report}};
  if (!ag_cli_outputs_distinct(C, ins, 3, outs, 2)) return -1;
  /* Rounding moves the loss (a mean over the batch) far less than single
   * parameters, so the default loss tolerance is the tighter one. */
  o->tol = have_tol ? tol_all : 1e-2;
  o->loss_tol = have_loss_tol ? tol_loss : have_tol ? tol_all : 1e-5;
  if (o->steps < 1 || o->job.batch < 1 || o->check_every < 1 || o->log_every < 0 || !(o->tol >= 0) ||
      !(o->loss_tol >= 0)) {
    fprintf(stderr, "anygrad compare: --steps, --batch, --check-every must be >= 1, tolerances >= 0\n");
    return -1;
  }
  if (o->cnn && o->job.batch > CNN_MAX_BATCH) {
    fprintf(stderr, "anygrad compare: --batch of --model cnn must be at most %d\n", CNN_MAX_BATCH);
    return -1;
  }
  if (!devices) {
    fprintf(stderr, "anygrad compare: --devices is required (e.g. --devices cpu,opencl:0)\n");
    return -1;
  }
  char dbuf[1024], *items[CMP_MAX_DEV];
  int n = ag_cli_list(C, "devices", devices, dbuf, sizeof dbuf, items, CMP_MAX_DEV);
  if (n < 0) return -1;
  for (int i = 0; i < n; i++) {
    if (parse_device(items[i], &o->dev[o->n_dev]) != 0) return -1;
    ag_device_str(o->dev[o->n_dev], o->name[o->n_dev], sizeof o->name[0]);
    o->n_dev++;
  }
  if (o->n_dev < 2) {
    fprintf(stderr, "anygrad compare: --devices needs at least two devices (a device may repeat: cpu,cpu)\n");
    return -1;
  }
  if (o->bisect_step > o->steps) {
    fprintf(stderr, "anygrad compare: --bisect-step %lld is after the last step (--steps %lld)\n",
            (long long)o->bisect_step, (long long)o->steps);
    return -1;
  }
  o->out = o->json && !strcmp(o->json, "-") ? stderr : stdout;
  if (!o->log_every) o->log_every = o->steps <= 30 ? 1 : (o->steps + 24) / 25;
  o->job.steps = o->steps;
  /* Short comparisons still leave warmup and see the schedule decay. */
  if (o->job.warmup > o->steps / 10) o->job.warmup = o->steps / 10;
  return 0;
}

/* ---------------- data (the word list, as `anygrad train` prepares it) ---------------- */

/* The training words (models/words.c, as `anygrad train` loads them); the
 * held-out tenth is not used here. */
typedef struct words {
  int n, n_all; /* training words; all loaded */
  char **w;
} words;

static void words_free(words *d) {
  charlm_words_free(d->w, d->n_all);
  memset(d, 0, sizeof *d);
}

static ag_status words_load(const char *path, uint64_t seed, words *out) {
  ag_status st = charlm_words_load(path, seed, "compare", &out->w, &out->n_all);
  out->n = out->n_all - charlm_words_val(out->n_all);
  return st;
}

/* --model cnn: the training images of --data (as `anygrad train --task
 * fashion-mnist` reads them), or none for --data synthetic. */
static ag_status images_load(const cmp_options *o, ag_image_set *set) {
  memset(set, 0, sizeof *set);
  if (!strcmp(o->data, "synthetic")) return AG_OK;
  char pi[1024], pl[1024];
  snprintf(pi, sizeof pi, "%s/train-images-idx3-ubyte.gz", o->data);
  snprintf(pl, sizeof pl, "%s/train-labels-idx1-ubyte.gz", o->data);
  ag_status st = ag_image_set_load(pi, pl, set);
  if (st == AG_OK && (set->height != 28 || set->width != 28 || set->num_classes > CNN_CLASSES || set->count < 1))
    st = ag_error_set(AG_ERR_CORRUPT, "compare: %s: expected 28x28 images in at most %d classes", pi, CNN_CLASSES);
  return st;
}

/* One CNN batch on the host: [B, 1, 28, 28] normalised images and [B]
 * labels, drawn from (seed, step). Synthetic images are class-dependent
 * stripes with noise, so the task is learnable and every pixel varies. */
static void make_image_batch(const cmp_options *o, const ag_image_set *set, int64_t step, float *img, int32_t *y) {
  uint64_t rng = o->job.seed * 0x100000001b3ull + (uint64_t)step;
  for (int64_t b = 0; b < o->job.batch; b++) {
    float *dst = img + b * 784;
    if (set->count) {
      int64_t i = (int64_t)(charlm_splitmix(&rng) % (uint64_t)set->count);
      const uint8_t *src = set->pixels + i * 784;
      for (int k = 0; k < 784; k++) dst[k] = (float)((src[k] / 255.0 - CNN_NORM_MEAN) / CNN_NORM_STD);
      y[b] = set->labels[i];
    } else {
      int c = (int)(charlm_splitmix(&rng) % CNN_CLASSES);
      for (int k = 0; k < 784; k++) {
        int r = k / 28, q = k % 28;
        int v = ((r * (c % 5 + 1) + q * (c / 5 + 1)) % 8 < 4 ? 200 : 30) + (int)(charlm_splitmix(&rng) % 40);
        dst[k] = (float)((v / 255.0 - CNN_NORM_MEAN) / CNN_NORM_STD);
      }
      y[b] = c;
    }
  }
}

/* One step's batch on the host: MLP [B, context] contexts of a random position
 * of a random word and [B] next characters; GPT [B, T] padded words and [B*T]
 * shifted targets (-1 past the end, ignored by the loss). */
static void make_batch(const cmp_options *o, const words *d, int64_t step, int32_t *x, int32_t *y) {
  uint64_t rng = o->job.seed * 0x100000001b3ull + (uint64_t)step;
  int T = CHARLM_MAX_WORD + 2, C = o->job.context;
  for (int64_t b = 0; b < o->job.batch; b++) {
    const char *w = d->w[charlm_splitmix(&rng) % (uint64_t)d->n];
    int len = (int)strlen(w);
    if (o->job.model == CHARLM_MLP) {
      int p = (int)(charlm_splitmix(&rng) % (uint64_t)(len + 1));
      for (int k = 0; k < C; k++) {
        int q = p - C + k;
        x[b * C + k] = q < 0 ? 0 : charlm_char_id(w[q]);
      }
      y[b] = p < len ? charlm_char_id(w[p]) : 0;
    } else {
      for (int p = 0; p < T; p++) {
        x[b * T + p] = p == 0 ? 0 : (p <= len ? charlm_char_id(w[p - 1]) : 0);
        y[b * T + p] = p < len ? charlm_char_id(w[p]) : (p == len ? 0 : -1);
      }
    }
  }
}

/* ---------------- model (models/charlm.c's, one per device) ---------------- */

/* One step's batch on the host, for either task. */
typedef struct host_batch {
  int32_t *x, *y; /* character ids and targets; CNN: y the labels */
  float *img;     /* CNN images */
} host_batch;

typedef struct replica {
  ag_device dev;
  bool cnn, llama;
  charlm_model m;
  cnn_model c;
  ag_llama l;
  ag_param_list *params; /* &m.params, &c.params or &l.params */
  ag_optimizer *opt;
} replica;

static void replica_free(replica *r) {
  ag_optimizer_free(r->opt);
  if (r->cnn) cnn_model_free(&r->c);
  else if (r->llama) ag_llama_free(&r->l);
  else charlm_model_free(&r->m);
  memset(r, 0, sizeof *r);
}

static ag_status replica_init(replica *r, const cmp_options *co, ag_device dev, ag_generator *g) {
  const charlm_options *o = &co->job;
  memset(r, 0, sizeof *r);
  r->dev = dev;
  r->cnn = co->cnn;
  r->llama = co->llama;
  ag_status st;
  if (r->llama) {
    /* Small enough for emulated devices: one sequence is a padded word. */
    ag_llama_config lc = {.vocab_size = CHARLM_VOCAB, .dim = 32, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2,
                          .multiple_of = 16, .max_seq_len = CHARLM_MAX_WORD + 2};
    st = ag_llama_init(&r->l, &lc, dev, AG_F32, g);
    r->params = &r->l.params;
  } else if (r->cnn) {
    cnn_options cn = cnn_defaults();
    cn.device = dev;
    st = cnn_model_init(&r->c, &cn, g);
    r->params = &r->c.params;
  } else {
    st = charlm_model_init(&r->m, o, dev, g);
    r->params = &r->m.params;
  }
  if (st != AG_OK) {
    memset(r, 0, sizeof *r);
    return st;
  }
  ag_adamw_options ao = ag_adamw_defaults();
  ao.lr = o->lr;
  ao.weight_decay = o->weight_decay;
  r->opt = ag_adamw_create(r->params, &ao);
  if (!r->opt) {
    st = ag_last_status();
    replica_free(r);
  }
  return st;
}

/* Llama logits [B, T, V] as the [B*T, V] rows of the shifted targets. */
static ag_tensor *llama_logits(replica *r, ag_tensor *x) {
  ag_tensor *l = ag_llama_forward(&r->l, x, true, NULL);
  if (!l) return NULL;
  int64_t s[2] = {ag_tensor_numel(x), r->l.cfg.vocab_size};
  ag_tensor *f = ag_reshape(l, 2, s);
  ag_tensor_release(l);
  return f;
}

static ag_tensor *replica_loss(replica *r, ag_tensor *x, ag_tensor *y) {
  ag_tensor *logits = r->cnn     ? cnn_model_logits(&r->c, x, true)
                      : r->llama ? llama_logits(r, x)
                                 : charlm_model_logits(&r->m, x);
  ag_tensor *loss = ag_cross_entropy(logits, y, AG_REDUCTION_MEAN, -1);
  ag_tensor_release(logits);
  return loss;
}

/* One optimizer step on the replica's device; returns the loss read to the
 * host (the step's one sync, which also makes the wall time the device's). */
/* The batch on r's device (in the current scope). */
static void replica_inputs(const replica *r, const cmp_options *o, const host_batch *hb, ag_tensor **x,
                           ag_tensor **y) {
  int64_t B = o->job.batch;
  if (r->cnn) {
    int64_t si[4] = {B, 1, 28, 28};
    *x = ag_from_host(r->dev, AG_F32, 4, si, hb->img);
    *y = ag_from_host(r->dev, AG_I32, 1, &B, hb->y);
    return;
  }
  bool mlp = !r->llama && r->m.kind == CHARLM_MLP;
  int64_t cols = mlp ? o->job.context : CHARLM_MAX_WORD + 2;
  int64_t sx[2] = {B, cols}, sy[1] = {mlp ? B : B * cols};
  *x = ag_from_host(r->dev, AG_I32, 2, sx, hb->x);
  *y = ag_from_host(r->dev, AG_I32, 1, sy, hb->y);
}

static ag_status replica_step(replica *r, const cmp_options *o, int64_t step, const host_batch *hb,
                              double *out_loss) {
  /* the schedules of `anygrad train`: the CNN decays to 1%, the char models to 10% */
  double lr_min = o->job.lr * (r->cnn ? 0.01 : 0.1);
  ag_optimizer_set_lr(r->opt, ag_lr_cosine(step, o->job.warmup, o->steps, o->job.lr, lr_min));
  ag_scope_begin();
  ag_tensor *x, *y;
  replica_inputs(r, o, hb, &x, &y);
  ag_tensor *loss = x && y ? replica_loss(r, x, y) : NULL;
  ag_status st = loss ? ag_backward(loss, NULL, false) : ag_last_status();
  if (st == AG_OK && o->job.clip > 0 && !ag_clip_grad_norm(r->params, o->job.clip)) st = ag_last_status();
  if (st == AG_OK) st = ag_optimizer_step(r->opt);
  ag_optimizer_zero_grad(r->opt);
  if (st == AG_OK) {
    ag_error_clear(); /* so a NaN loss is told apart from a failed read */
    *out_loss = ag_item(loss);
    if (isnan(*out_loss) && ag_last_status() != AG_OK) st = ag_last_status();
  }
  ag_scope_end();
  return st;
}

/* ---------------- divergence ---------------- */

/* NaN-propagating maximum: a NaN divergence must never look small. */
static double worst(double a, double b) { return isnan(a) || isnan(b) ? NAN : (a > b ? a : b); }

static bool exceeds(double div, double tol) { return !(div <= tol); }

/* A tolerance of 0 is bit for bit (docs/numerics.md): NaN equals NaN, every
 * other value by its bits. Values that differ only in the sign of a zero
 * have a relative distance of 0, so they get the smallest double instead. */
#define SIGNED_ZERO_DIV 0x1p-1074

static bool same_f32(float a, float b) { return isnan(a) ? isnan(b) : !memcmp(&a, &b, sizeof a); }

static double loss_divergence(double ref, double other, bool bitwise) {
  if (bitwise) {
    if (isnan(ref) ? isnan(other) : !memcmp(&ref, &other, sizeof ref)) return 0;
    if (ref == other) return SIGNED_ZERO_DIV;
  }
  if (ref == other) return 0; /* also two equal infinities */
  double d = fabs(ref - other), s = fabs(ref);
  return s > 0 ? d / s : (d > 0 ? INFINITY : NAN);
}

/* max over parameters of ||p_ref - p|| / ||p_ref||, accumulated in double. */
static ag_status param_divergence(const ag_param_list *ref, const ag_param_list *other, bool bitwise, float **buf,
                                  size_t *cap, double *out, int *out_worst) {
  double div = 0;
  int at = 0;
  for (int i = 0; i < ref->count; i++) {
    size_t n = (size_t)ag_tensor_numel(ref->tensors[i]);
    if (n > *cap) {
      float *nb = realloc(*buf, 2 * n * sizeof **buf);
      if (!nb) return ag_error_set(AG_ERR_OOM, "compare: out of host memory");
      *buf = nb;
      *cap = n;
    }
    float *a = *buf, *b = *buf + n;
    ag_status st = ag_to_host(ref->tensors[i], a, n * sizeof *a);
    if (st == AG_OK) st = ag_to_host(other->tensors[i], b, n * sizeof *b);
    if (st != AG_OK) return st;
    double na = 0, nd = 0;
    size_t nbits = 0; /* elements that differ bit for bit */
    for (size_t k = 0; k < n; k++) {
      double d = (double)a[k] - (double)b[k];
      na += (double)a[k] * a[k];
      nd += d * d;
      nbits += !same_f32(a[k], b[k]);
    }
    double r = nd == 0 ? (isnan(na) ? NAN : 0) : (na > 0 ? sqrt(nd) / sqrt(na) : INFINITY);
    if (isnan(nd)) r = NAN;
    if (bitwise) r = !nbits ? 0 : isnan(r) || r > 0 ? r : SIGNED_ZERO_DIV;
    if (!isnan(div) && (isnan(r) || r > div)) at = i;
    div = worst(div, r);
  }
  *out = div;
  if (out_worst) *out_worst = at;
  return AG_OK;
}

/* Overwrite every parameter of r with the master copy (no autograd record). */
static ag_status copy_params(replica *r, const ag_param_list *master) {
  ag_status st = AG_OK;
  ag_no_grad_begin();
  for (int i = 0; i < master->count && st == AG_OK; i++) st = ag_copy_(r->params->tensors[i], master->tensors[i]);
  ag_grad_mode_end();
  if (st == AG_OK) st = ag_device_synchronize(r->dev);
  return st;
}

/* FNV-1a 64 of every parameter tensor's bytes on every device, read once
 * the run ends. A NaN is hashed as the canonical quiet NaN 0x7fc00000 (f32):
 * its payload is no part of the result (docs/numerics.md), as in the bitwise
 * comparison. */
static ag_status weights_hash(replica *reps, int n_dev, uint64_t *out) {
  int nt = reps[0].params->count;
  ag_status st = AG_OK;
  for (int d = 0; d < n_dev && st == AG_OK; d++)
    for (int i = 0; i < nt && st == AG_OK; i++) {
      const ag_tensor *t = reps[d].params->tensors[i];
      size_t es = ag_dtype_size(ag_tensor_dtype(t)), nb = (size_t)ag_tensor_numel(t) * es;
      unsigned char *b = malloc(nb ? nb : 1);
      if (!b) return ag_error_set(AG_ERR_OOM, "compare: out of host memory");
      st = ag_to_host(t, b, nb);
      if (st == AG_OK && ag_tensor_dtype(t) == AG_F32)
        for (size_t k = 0; k < nb; k += 4) {
          float f;
          memcpy(&f, b + k, 4);
          if (isnan(f)) memcpy(b + k, &(uint32_t){0x7fc00000u}, 4);
        }
      uint64_t h = 0xcbf29ce484222325ull;
      for (size_t k = 0; k < nb; k++) h = (h ^ b[k]) * 0x100000001b3ull;
      out[(size_t)d * (size_t)nt + (size_t)i] = h;
      free(b);
    }
  return st;
}

/* ---------------- report ---------------- */

typedef struct report {
  int n_dev;
  int64_t steps;
  double *loss, *ms, *dloss, *dparam; /* [steps][n_dev]; column 0 (the reference) holds 0 divergence */
  double init_div[CMP_MAX_DEV];       /* each device's own generator vs the CPU */
  int64_t first_exceed[CMP_MAX_DEV];  /* 1-based step, 0 = never */
  int64_t nparams;
  double max_param[CMP_MAX_DEV];     /* with the parameter that reached it */
  char worst_name[CMP_MAX_DEV][64];
  char exceed_name[CMP_MAX_DEV][64]; /* the worst parameter at the first step over tolerance */
  /* at the end: FNV-1a 64 of every parameter tensor, [device][tensor] */
  uint64_t *whash;
  int nweights;
  const ag_param_list *wlist; /* the reference's, for the names */
} report;

/* Parameters are compared every --check-every steps; other steps hold this. */
#define NOT_CHECKED (-1.0)
#define AT(a, s, d) ((a)[(size_t)(s) * (size_t)rep->n_dev + (size_t)(d)])

static void fmt_div(double v, char *buf, size_t n) {
  if (isnan(v)) snprintf(buf, n, "nan");
  else if (v == 0) snprintf(buf, n, "0");
  else snprintf(buf, n, "%.2e", v);
}

/* Columns: the loss on every device, loss and parameter divergence of every
 * other device against the reference, the step time on every device. */
static void print_header(const cmp_options *o) {
  char l[64];
  fprintf(o->out, "%6s", "step");
  for (int d = 0; d < o->n_dev; d++) fprintf(o->out, " %12.12s", o->name[d]);
  for (int d = 1; d < o->n_dev; d++) {
    snprintf(l, sizeof l, "dloss %s", o->name[d]);
    fprintf(o->out, "  %15.15s", l);
    snprintf(l, sizeof l, "dparam %s", o->name[d]);
    fprintf(o->out, " %15.15s", l);
  }
  for (int d = 0; d < o->n_dev; d++) {
    snprintf(l, sizeof l, "ms %s", o->name[d]);
    fprintf(o->out, " %12.12s", l);
  }
  fprintf(o->out, "\n");
}

static void print_row(const cmp_options *o, const report *rep, int64_t s) {
  bool over = false;
  fprintf(o->out, "%6lld", (long long)s + 1);
  for (int d = 0; d < o->n_dev; d++) fprintf(o->out, " %12.6f", AT(rep->loss, s, d));
  for (int d = 1; d < o->n_dev; d++) {
    char a[32], b[32] = "-";
    fmt_div(AT(rep->dloss, s, d), a, sizeof a);
    if (AT(rep->dparam, s, d) != NOT_CHECKED) fmt_div(AT(rep->dparam, s, d), b, sizeof b);
    over = over || exceeds(AT(rep->dloss, s, d), o->loss_tol) ||
           (AT(rep->dparam, s, d) != NOT_CHECKED && exceeds(AT(rep->dparam, s, d), o->tol));
    fprintf(o->out, "  %15s %15s", a, b);
  }
  for (int d = 0; d < o->n_dev; d++) fprintf(o->out, " %12.2f", AT(rep->ms, s, d));
  fprintf(o->out, "%s\n", over ? "  > tol" : "");
}

static void json_num(FILE *f, double v) {
  if (isfinite(v)) fprintf(f, "%.9g", v);
  else fprintf(f, "null");
}

static double mean_ms(const report *rep, int d) {
  /* Step 1 includes kernel compilation and first-touch allocation; leave it
   * out when there is more than one step. */
  int64_t s0 = rep->steps > 1 ? 1 : 0;
  double sum = 0;
  for (int64_t s = s0; s < rep->steps; s++) sum += AT(rep->ms, s, d);
  return sum / (double)(rep->steps - s0);
}

static void max_divs(const report *rep, int d, double *ml, double *mp) {
  *ml = 0;
  *mp = 0;
  for (int64_t s = 0; s < rep->steps; s++) {
    *ml = worst(*ml, AT(rep->dloss, s, d));
    if (AT(rep->dparam, s, d) != NOT_CHECKED) *mp = worst(*mp, AT(rep->dparam, s, d));
  }
}

/* ---------------- bisect: one step replayed op by op ---------------- */

/* The host copy of a replica's parameters before a step, so the step can be
 * run again under an op trace once it turns out to be the one to bisect. */
typedef struct param_snap {
  int count;
  void **data;
} param_snap;

static void snap_free(param_snap *p) {
  for (int i = 0; p->data && i < p->count; i++) free(p->data[i]);
  free(p->data);
  memset(p, 0, sizeof *p);
}

static ag_status snap_take(param_snap *p, const ag_param_list *pl) {
  if (!p->data) {
    p->data = calloc((size_t)pl->count, sizeof *p->data);
    if (!p->data) return ag_error_set(AG_ERR_OOM, "compare: out of host memory");
    p->count = pl->count;
  }
  for (int i = 0; i < pl->count; i++) {
    size_t bytes = (size_t)ag_tensor_numel(pl->tensors[i]) * ag_dtype_size(ag_tensor_dtype(pl->tensors[i]));
    if (!p->data[i] && !(p->data[i] = malloc(bytes ? bytes : 1)))
      return ag_error_set(AG_ERR_OOM, "compare: out of host memory");
    ag_status st = ag_to_host(pl->tensors[i], p->data[i], bytes);
    if (st != AG_OK) return st;
  }
  return AG_OK;
}

static ag_status snap_restore(const param_snap *p, const ag_param_list *pl) {
  ag_status st = AG_OK;
  ag_no_grad_begin();
  for (int i = 0; i < pl->count && st == AG_OK; i++) {
    ag_tensor *t = pl->tensors[i];
    ag_tensor *h = ag_from_host(ag_tensor_device(t), ag_tensor_dtype(t), ag_tensor_ndim(t), ag_tensor_shape(t),
                                p->data[i]);
    st = h ? ag_copy_(t, h) : ag_last_status();
    ag_tensor_release(h);
  }
  ag_grad_mode_end();
  return st;
}

/* Forward and backward of one step on r's device, recorded launch by launch;
 * the gradients are cleared afterwards and no optimizer step is taken. */
static ag_status traced_step(replica *r, const cmp_options *o, const host_batch *hb, ag_optrace **out) {
  ag_scope_begin();
  ag_tensor *x, *y;
  replica_inputs(r, o, hb, &x, &y);
  ag_status st = x && y ? AG_OK : ag_last_status();
  ag_optrace *t = st == AG_OK ? ag_optrace_begin() : NULL;
  if (st == AG_OK && !t) st = ag_last_status();
  if (st == AG_OK) {
    ag_optrace_phase(t, "forward");
    ag_tensor *loss = replica_loss(r, x, y);
    ag_optrace_phase(t, "backward");
    st = loss ? ag_backward(loss, NULL, false) : ag_last_status();
    ag_status e = ag_optrace_end(t);
    if (st == AG_OK) st = e;
  }
  ag_optimizer_zero_grad(r->opt);
  ag_scope_end();
  if (st != AG_OK) {
    ag_optrace_free(t);
    t = NULL;
  }
  *out = t;
  return st;
}

/* How far b is from the reference a over the n values of an operand of
 * dtype dt: max |a-b| / max |a| (an absolute error where a is all zero),
 * and the largest distance in units in the last place of dt (integers:
 * the largest difference). */
typedef struct op_err {
  double rel;
  int64_t ulp;
} op_err;

static void err_merge(op_err *e, op_err x) {
  if (isnan(x.rel) || x.rel > e->rel || isnan(e->rel)) e->rel = isnan(e->rel) ? e->rel : x.rel;
  if (x.ulp > e->ulp) e->ulp = x.ulp;
}

static op_err values_err(ag_dtype dt, const double *a, const double *b, int64_t n) {
  double md = 0, ma = 0;
  int64_t ulp = 0;
  bool nan = false;
  for (int64_t i = 0; i < n; i++) {
    if (a[i] == b[i]) continue;
    int64_t u;
    if (dt == AG_F64) u = ag_ulp_distance_f64(a[i], b[i]);
    else if (dt == AG_F32 || dt == AG_F16 || dt == AG_BF16) u = ag_ulp_distance_f32((float)a[i], (float)b[i]);
    else u = (int64_t)fabs(a[i] - b[i]);
    if (u > ulp) ulp = u;
    double d = fabs(a[i] - b[i]);
    if (isnan(d)) nan = true;
    else if (d > md) md = d;
  }
  for (int64_t i = 0; i < n; i++)
    if (fabs(a[i]) > ma) ma = fabs(a[i]);
  op_err e = {nan ? NAN : (ma > 0 ? md / ma : md), ulp};
  return e;
}

/* The error of every operand the reference launch k wrote, between the
 * reference trace and trace `other` (its record ko). */
static ag_status record_err(const ag_optrace *ref, int64_t k, const ag_optrace *other, int64_t ko, op_err *out) {
  ag_optrace_op op;
  ag_status st = ag_optrace_get(ref, k, &op);
  op_err e = {0, 0};
  double *a = NULL, *b = NULL;
  for (int j = 0; st == AG_OK && j < op.n_operands; j++) {
    ag_optrace_operand od, oo;
    st = ag_optrace_get_operand(ref, k, j, &od);
    if (st == AG_OK) st = ag_optrace_get_operand(other, ko, j, &oo);
    if (st != AG_OK || !od.written) continue;
    if (oo.numel != od.numel) {
      e.rel = NAN;
      continue;
    }
    double *na = realloc(a, (size_t)od.numel * sizeof *a), *nb = NULL;
    if (na) a = na;
    if (na) nb = realloc(b, (size_t)od.numel * sizeof *b);
    if (nb) b = nb;
    if (!na || !nb) {
      st = ag_error_set(AG_ERR_OOM, "compare: out of host memory");
      break;
    }
    st = ag_optrace_values(ref, k, j, true, a, od.numel);
    if (st == AG_OK) st = ag_optrace_values(other, ko, j, true, b, od.numel);
    if (st == AG_OK) err_merge(&e, values_err(od.dtype, a, b, od.numel));
  }
  free(a);
  free(b);
  *out = e;
  return st;
}

/* Whether two records are the same launch: op, kernel and operand shapes. */
static bool same_launch(const ag_optrace *a, int64_t ka, const ag_optrace *b, int64_t kb) {
  ag_optrace_op x, y;
  if (ag_optrace_get(a, ka, &x) != AG_OK || ag_optrace_get(b, kb, &y) != AG_OK) return false;
  if (strcmp(x.name, y.name) || strcmp(x.kop, y.kop) || x.n_operands != y.n_operands) return false;
  for (int j = 0; j < x.n_operands; j++) {
    ag_optrace_operand p, q;
    if (ag_optrace_get_operand(a, ka, j, &p) != AG_OK || ag_optrace_get_operand(b, kb, j, &q) != AG_OK) return false;
    if (p.dtype != q.dtype || p.ndim != q.ndim || memcmp(p.shape, q.shape, (size_t)p.ndim * sizeof *p.shape))
      return false;
  }
  return true;
}

typedef struct bisect_op {
  int64_t k;        /* record of the reference trace */
  op_err added;     /* replayed on the device from the reference's inputs */
  op_err own;       /* in the device's own run (inputs its own) */
  bool have_own;
  char what[48];    /* "forward #12" or "backward: mul (node 7)" */
  char shapes[160]; /* output <- inputs */
  char dtype[8];
  char name[64], kop[48], phase[16];
} bisect_op;

typedef struct bisect_result {
  int64_t step; /* 1-based; 0 none */
  int n_dev;
  int64_t n_ops[CMP_MAX_DEV];
  bisect_op *ops[CMP_MAX_DEV]; /* ranked, worst first; [0] unused */
  int64_t unmatched[CMP_MAX_DEV]; /* reference launches with no counterpart in the device's own run */
} bisect_result;

static void bisect_free(bisect_result *b) {
  for (int d = 0; d < CMP_MAX_DEV; d++) free(b->ops[d]);
  memset(b, 0, sizeof *b);
}

static int cmp_ops(const void *pa, const void *pb) {
  const bisect_op *a = pa, *b = pb;
  double x = isnan(a->added.rel) ? INFINITY : a->added.rel, y = isnan(b->added.rel) ? INFINITY : b->added.rel;
  if (x != y) return x < y ? 1 : -1;
  if (a->added.ulp != b->added.ulp) return a->added.ulp < b->added.ulp ? 1 : -1;
  return a->k < b->k ? -1 : a->k > b->k;
}

static void describe(const ag_optrace *t, int64_t k, int64_t fwd_pos, bisect_op *b) {
  ag_optrace_op op;
  if (ag_optrace_get(t, k, &op) != AG_OK) return;
  snprintf(b->name, sizeof b->name, "%s", op.name);
  snprintf(b->kop, sizeof b->kop, "%s", op.kop);
  snprintf(b->phase, sizeof b->phase, "%s", op.phase);
  if (op.node[0]) snprintf(b->what, sizeof b->what, "node %d %s", op.node_index, op.node);
  else if (!strcmp(op.phase, "forward")) snprintf(b->what, sizeof b->what, "forward #%lld", (long long)fwd_pos);
  else snprintf(b->what, sizeof b->what, "%s (accumulate)", op.phase);
  size_t n = 0;
  b->shapes[0] = 0;
  b->dtype[0] = 0;
  /* Outputs first, then "<-" and the inputs. */
  for (int pass = 0; pass < 2; pass++) {
    bool first = true;
    for (int j = 0; j < op.n_operands; j++) {
      ag_optrace_operand od;
      if (ag_optrace_get_operand(t, k, j, &od) != AG_OK || od.written != (pass == 0)) continue;
      if (pass == 0 && !b->dtype[0]) snprintf(b->dtype, sizeof b->dtype, "%s", ag_dtype_name(od.dtype));
      n += (size_t)snprintf(b->shapes + n, n < sizeof b->shapes ? sizeof b->shapes - n : 0, "%s[", first ? "" : ",");
      for (int d = 0; d < od.ndim && n < sizeof b->shapes; d++)
        n += (size_t)snprintf(b->shapes + n, sizeof b->shapes - n, "%s%lld", d ? "x" : "", (long long)od.shape[d]);
      if (n < sizeof b->shapes) n += (size_t)snprintf(b->shapes + n, sizeof b->shapes - n, "]");
      first = false;
    }
    if (pass == 0 && n < sizeof b->shapes) n += (size_t)snprintf(b->shapes + n, sizeof b->shapes - n, " <- ");
  }
}

/* Replay every launch of the reference trace on device d and compare. */
static ag_status bisect_device(const cmp_options *o, const ag_optrace *ref, const ag_optrace *own, int d,
                               bisect_result *res) {
  int64_t n = ag_optrace_count(ref), no = ag_optrace_count(own), ko = 0, fwd = 0;
  bisect_op *ops = calloc((size_t)(n ? n : 1), sizeof *ops);
  if (!ops) return ag_error_set(AG_ERR_OOM, "compare: out of host memory");
  ag_status st = AG_OK;
  int64_t m = 0;
  for (int64_t k = 0; k < n && st == AG_OK; k++) {
    ag_optrace_op op;
    st = ag_optrace_get(ref, k, &op);
    if (st != AG_OK) break;
    bool forward = !strcmp(op.phase, "forward");
    bisect_op *b = &ops[m];
    b->k = k;
    describe(ref, k, fwd, b);
    if (forward) fwd++;
    ag_optrace *rp = ag_optrace_replay(ref, k, o->dev[d]);
    if (!rp) {
      char msg[512];
      snprintf(msg, sizeof msg, "%s", ag_last_error());
      st = ag_error_set(ag_last_status(), "bisect: replaying %s (%s) on %s: %s", b->name, b->kop, o->name[d], msg);
      break;
    }
    st = record_err(ref, k, rp, 0, &b->added);
    ag_optrace_free(rp);
    /* The device's own launch: the next record of its trace that matches. */
    for (int64_t q = ko; st == AG_OK && q < no && q < ko + 64; q++)
      if (same_launch(ref, k, own, q)) {
        st = record_err(ref, k, own, q, &b->own);
        b->have_own = true;
        ko = q + 1;
        break;
      }
    if (!b->have_own) res->unmatched[d]++;
    m++;
  }
  if (st != AG_OK) {
    free(ops);
    return st;
  }
  qsort(ops, (size_t)m, sizeof *ops, cmp_ops);
  res->ops[d] = ops;
  res->n_ops[d] = m;
  return AG_OK;
}

static void fmt_err(op_err e, char *rel, size_t nr, char *ulp, size_t nu) {
  fmt_div(e.rel, rel, nr);
  if (e.ulp == INT64_MAX) snprintf(ulp, nu, "inf");
  else snprintf(ulp, nu, "%lld", (long long)e.ulp);
}

static void print_bisect(const cmp_options *o, const bisect_result *b) {
  fprintf(o->out,
          "\nbisect: step %lld replayed op by op: each launch of the reference %s re-run on the device\n"
          "from the reference's inputs (\"added\": the error of that op alone), and the same launch in the\n"
          "device's own run (\"own\": with the error of every op before it); worst first\n",
          (long long)b->step, o->name[0]);
  for (int d = 1; d < b->n_dev; d++) {
    int64_t top = o->bisect_top && o->bisect_top < b->n_ops[d] ? o->bisect_top : b->n_ops[d];
    fprintf(o->out, "\n%s against %s: %lld launches", o->name[d], o->name[0], (long long)b->n_ops[d]);
    if (b->unmatched[d]) fprintf(o->out, " (%lld without a counterpart in its own run)", (long long)b->unmatched[d]);
    fprintf(o->out, "\n%4s %-26s %-20s %-22s %-5s %-44s %9s %6s %9s %6s\n", "rank", "op", "kernel", "where", "dtype",
            "shapes (out <- in)", "added", "ulp", "own", "ulp");
    for (int64_t i = 0; i < top; i++) {
      const bisect_op *x = &b->ops[d][i];
      char r1[32], u1[32], r2[32] = "-", u2[32] = "-";
      fmt_err(x->added, r1, sizeof r1, u1, sizeof u1);
      if (x->have_own) fmt_err(x->own, r2, sizeof r2, u2, sizeof u2);
      fprintf(o->out, "%4lld %-26.26s %-20.20s %-22.22s %-5s %-44.44s %9s %6s %9s %6s\n", (long long)i + 1, x->name,
              x->kop, x->what, x->dtype, x->shapes, r1, u1, r2, u2);
    }
    if (top && b->n_ops[d] && b->ops[d][0].added.rel == 0 && b->ops[d][0].added.ulp == 0)
      fprintf(o->out, "every op agrees exactly when given the reference's inputs\n");
  }
}

static void json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    if (*s == '"' || *s == '\\') fputc('\\', f);
    if ((unsigned char)*s >= 0x20) fputc(*s, f);
  }
  fputc('"', f);
}

static void json_bisect(FILE *f, const cmp_options *o, const bisect_result *b) {
  fprintf(f, "  \"bisect\": ");
  if (!b->step) {
    fprintf(f, "null,\n");
    return;
  }
  fprintf(f, "{\"step\": %lld, \"reference\": \"%s\", \"devices\": [\n", (long long)b->step, o->name[0]);
  for (int d = 1; d < b->n_dev; d++) {
    fprintf(f, "    {\"device\": \"%s\", \"launches\": %lld, \"unmatched\": %lld, \"ops\": [\n", o->name[d],
            (long long)b->n_ops[d], (long long)b->unmatched[d]);
    for (int64_t i = 0; i < b->n_ops[d]; i++) {
      const bisect_op *x = &b->ops[d][i];
      fprintf(f, "      {\"rank\": %lld, \"launch\": %lld, \"op\": ", (long long)i + 1, (long long)x->k);
      json_str(f, x->name);
      fprintf(f, ", \"kernel\": ");
      json_str(f, x->kop);
      fprintf(f, ", \"phase\": ");
      json_str(f, x->phase);
      fprintf(f, ", \"where\": ");
      json_str(f, x->what);
      fprintf(f, ", \"dtype\": ");
      json_str(f, x->dtype);
      fprintf(f, ", \"shapes\": ");
      json_str(f, x->shapes);
      fprintf(f, ", \"added_rel\": ");
      json_num(f, x->added.rel);
      fprintf(f, ", \"added_ulp\": ");
      if (x->added.ulp == INT64_MAX) fprintf(f, "null");
      else fprintf(f, "%lld", (long long)x->added.ulp);
      fprintf(f, ", \"own_rel\": ");
      if (x->have_own) json_num(f, x->own.rel);
      else fprintf(f, "null");
      fprintf(f, ", \"own_ulp\": ");
      if (x->have_own && x->own.ulp != INT64_MAX) fprintf(f, "%lld", (long long)x->own.ulp);
      else fprintf(f, "null");
      fprintf(f, "}%s\n", i + 1 < b->n_ops[d] ? "," : "");
    }
    fprintf(f, "    ]}%s\n", d + 1 < b->n_dev ? "," : "");
  }
  fprintf(f, "  ]},\n");
}

/* Tensor i's hash on device d. */
#define WH(rep, d, i) ((rep)->whash[(size_t)(d) * (size_t)(rep)->nweights + (size_t)(i)])

static bool weights_same(const report *rep, int d, int i) { return WH(rep, d, i) == WH(rep, 0, i); }

/* The hash of every parameter tensor per device and the verdict line. */
static void print_weights(const cmp_options *o, const report *rep) {
  if (!rep->whash) return;
  int w = 9;
  for (int i = 0; i < rep->nweights; i++) {
    int l = (int)strlen(rep->wlist->names[i]);
    w = l > w ? l : w;
  }
  fprintf(o->out, "\nweights: FNV-1a 64 of each parameter tensor's bytes at the end (a NaN as 0x7fc00000)\n%-*s", w,
          "parameter");
  for (int d = 0; d < o->n_dev; d++) fprintf(o->out, " %-16.16s", o->name[d]);
  fprintf(o->out, "\n");
  for (int i = 0; i < rep->nweights; i++) {
    fprintf(o->out, "%-*s", w, rep->wlist->names[i]);
    for (int d = 0; d < o->n_dev; d++)
      fprintf(o->out, " %016llx%s", (unsigned long long)WH(rep, d, i), weights_same(rep, d, i) ? "" : "*");
    fprintf(o->out, "\n");
  }
  bool all = true;
  for (int d = 1; d < o->n_dev; d++) {
    int nd = 0;
    char list[512];
    size_t len = 0;
    list[0] = 0;
    for (int i = 0; i < rep->nweights; i++)
      if (!weights_same(rep, d, i)) {
        if (nd++ < 6 && len < sizeof list)
          len += (size_t)snprintf(list + len, sizeof list - len, "%s%s", nd > 1 ? ", " : "", rep->wlist->names[i]);
      }
    if (!nd) continue;
    all = false;
    fprintf(o->out, "weights differ on %s from %s: %d of %d tensors (%s%s)\n", o->name[d], o->name[0], nd,
            rep->nweights, list, nd > 6 ? ", ..." : "");
  }
  if (all) fprintf(o->out, "weights identical on %d devices\n", o->n_dev);
}

static void json_weights(FILE *f, const cmp_options *o, const report *rep) {
  if (!rep->whash) return;
  bool all = true;
  for (int d = 1; d < o->n_dev; d++)
    for (int i = 0; i < rep->nweights; i++) all = all && weights_same(rep, d, i);
  fprintf(f, "  \"weights_identical\": %s, \"weights_fnv1a64\": [\n", all ? "true" : "false");
  for (int i = 0; i < rep->nweights; i++) {
    fprintf(f, "    {\"name\": ");
    json_str(f, rep->wlist->names[i]);
    fprintf(f, ", \"hash\": [");
    for (int d = 0; d < o->n_dev; d++) fprintf(f, "%s\"%016llx\"", d ? ", " : "", (unsigned long long)WH(rep, d, i));
    fprintf(f, "]}%s\n", i + 1 < rep->nweights ? "," : "");
  }
  fprintf(f, "  ],\n");
}

/* f was opened before training, so a bad path fails before the run. */
static ag_status write_json(FILE *f, const char *path, const cmp_options *o, const report *rep, bool diverged,
                            const bisect_result *br) {
  fprintf(f, "{\n  \"model\": \"%s\", \"parameters\": %lld, \"seed\": %llu, \"steps\": %lld, \"batch\": %lld,\n",
          model_name(o), (long long)rep->nparams, (unsigned long long)o->job.seed,
          (long long)o->steps, (long long)o->job.batch);
  fprintf(f, "  \"tolerance\": ");
  json_num(f, o->tol);
  fprintf(f, ", \"loss_tolerance\": ");
  json_num(f, o->loss_tol);
  fprintf(f, ", \"check_every\": %lld, \"reference\": \"%s\",\n  \"devices\": [\n", (long long)o->check_every,
          o->name[0]);
  for (int d = 0; d < o->n_dev; d++) {
    double ml, mp;
    max_divs(rep, d, &ml, &mp);
    fprintf(f, "    {\"device\": \"%s\", \"first_loss\": ", o->name[d]);
    json_num(f, AT(rep->loss, 0, d));
    fprintf(f, ", \"final_loss\": ");
    json_num(f, AT(rep->loss, rep->steps - 1, d));
    fprintf(f, ", \"max_loss_divergence\": ");
    json_num(f, ml);
    fprintf(f, ", \"max_param_divergence\": ");
    json_num(f, mp);
    if (rep->worst_name[d][0]) fprintf(f, ", \"worst_param\": \"%s\"", rep->worst_name[d]);
    else fprintf(f, ", \"worst_param\": null"); /* no parameter differed */
    fprintf(f, ", \"init_divergence\": ");
    json_num(f, rep->init_div[d]);
    fprintf(f, ", \"first_exceed_step\": ");
    if (rep->first_exceed[d]) fprintf(f, "%lld", (long long)rep->first_exceed[d]);
    else fprintf(f, "null");
    fprintf(f, ", \"mean_step_ms\": ");
    json_num(f, mean_ms(rep, d));
    fprintf(f, "}%s\n", d + 1 < o->n_dev ? "," : "");
  }
  int64_t first = 0;
  for (int d = 1; d < o->n_dev; d++)
    if (rep->first_exceed[d] && (!first || rep->first_exceed[d] < first)) first = rep->first_exceed[d];
  fprintf(f, "  ],\n  \"diverged\": %s, \"first_exceed_step\": ", diverged ? "true" : "false");
  if (first) fprintf(f, "%lld", (long long)first);
  else fprintf(f, "null");
  fprintf(f, ",\n");
  if (o->bisect) json_bisect(f, o, br);
  json_weights(f, o, rep);
  fprintf(f, "  \"per_step\": [\n");
  for (int64_t s = 0; s < rep->steps; s++) {
    fprintf(f, "    {\"step\": %lld", (long long)s + 1);
    const char *keys[4] = {"loss", "loss_divergence", "param_divergence", "step_ms"};
    double *arrs[4] = {rep->loss, rep->dloss, rep->dparam, rep->ms};
    for (int k = 0; k < 4; k++) {
      fprintf(f, ", \"%s\": [", keys[k]);
      for (int d = 0; d < o->n_dev; d++) {
        double v = AT(arrs[k], s, d);
        if (d) fputs(", ", f);
        if (k == 2 && v == NOT_CHECKED) fputs("null", f);
        else json_num(f, v);
      }
      fputc(']', f);
    }
    fprintf(f, "}%s\n", s + 1 < rep->steps ? "," : "");
  }
  fprintf(f, "  ]\n}\n");
  fflush(f);
  return ferror(f) ? ag_error_set(AG_ERR_IO, "compare: cannot write %s", path) : AG_OK;
}

/* --report: the JSON document (as --json writes it) in the HTML page of
 * tools/conformance_html.c, which draws the curves and the table. */
static ag_status write_report(ag_output *out, const char *path, const cmp_options *o, const report *rep,
                              bool diverged, const bisect_result *br) {
  FILE *t = tmpfile();
  if (!t) return ag_error_set(AG_ERR_IO, "compare: cannot create a temporary file for --report");
  ag_status st = write_json(t, "a temporary file", o, rep, diverged, br);
  long n = st == AG_OK ? ftell(t) : -1;
  char *doc = n >= 0 ? malloc((size_t)n + 1) : NULL;
  if (st == AG_OK && !doc) st = ag_error_set(AG_ERR_OOM, "compare: out of host memory");
  if (st == AG_OK) {
    rewind(t);
    size_t got = fread(doc, 1, (size_t)n, t);
    doc[got] = 0;
    FILE *f = ag_output_file(out);
    ag_compare_html_put(f, doc);
    fflush(f);
    if (ferror(f)) st = ag_error_set(AG_ERR_IO, "compare: cannot write %s", path);
  }
  free(doc);
  fclose(t);
  return st;
}

static void print_summary(const cmp_options *o, const report *rep, bool diverged) {
  char span[48] = "step 1";
  if (rep->steps > 1) snprintf(span, sizeof span, "steps 2..%lld", (long long)rep->steps);
  fprintf(o->out, "\nsummary: reference %s; divergences are relative to it; ms/step is the mean wall time\n"
         "of %s on each device, including the loss read that ends the step\n",
         o->name[0], span);
  fprintf(o->out, "%-12s %11s %11s %10s %10s %12s %9s  %s\n", "device", "first loss", "final loss", "max dloss",
         "init diff", "first > tol", "ms/step", "max dparam (parameter)");
  for (int d = 0; d < o->n_dev; d++) {
    double ml, mp;
    max_divs(rep, d, &ml, &mp);
    char a[32] = "-", b[128] = "-", c[32], e[32] = "-";
    if (d) {
      fmt_div(ml, a, sizeof a);
      fmt_div(mp, b, sizeof b);
      if (rep->first_exceed[d]) snprintf(e, sizeof e, "step %lld", (long long)rep->first_exceed[d]);
    }
    if (d && rep->worst_name[d][0]) snprintf(b + strlen(b), sizeof b - strlen(b), " %s", rep->worst_name[d]);
    fmt_div(rep->init_div[d], c, sizeof c);
    fprintf(o->out, "%-12s %11.6f %11.6f %10s %10s %12s %9.2f  %s\n", o->name[d], AT(rep->loss, 0, d),
           AT(rep->loss, rep->steps - 1, d), a, c, e, mean_ms(rep, d), b);
  }
  if (!diverged) {
    if (o->tol == 0 && o->loss_tol == 0)
      fprintf(o->out, "result: bit for bit identical (tolerance 0) for all %lld steps\n", (long long)rep->steps);
    else
      fprintf(o->out, "result: within tolerance (parameters %g, loss %g) for all %lld steps\n", o->tol, o->loss_tol,
              (long long)rep->steps);
    return;
  }
  for (int d = 1; d < o->n_dev; d++) {
    if (!rep->first_exceed[d]) continue;
    int64_t s = rep->first_exceed[d] - 1;
    char a[32], b[32] = "-";
    fmt_div(AT(rep->dloss, s, d), a, sizeof a);
    if (AT(rep->dparam, s, d) != NOT_CHECKED) fmt_div(AT(rep->dparam, s, d), b, sizeof b);
    fprintf(o->out,
            "result: DIVERGED: %s exceeds tolerance (parameters %g, loss %g) first at step %lld "
            "(loss %s, parameters %s%s%s)\n",
            o->name[d], o->tol, o->loss_tol, (long long)s + 1, a, b, rep->exceed_name[d][0] ? " in " : "",
            rep->exceed_name[d]);
  }
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return 1e3 * (double)ts.tv_sec + 1e-6 * (double)ts.tv_nsec;
}

int ag_cmd_compare(int argc, char **argv) {
  cmp_options o;
  int rc = parse_args(argc, argv, &o);
  if (rc) return rc > 0 ? 0 : 2;

  words data = {0};
  ag_image_set images = {0};
  replica master, reps[CMP_MAX_DEV];
  bool have_master = false;
  int n_ready = 0;
  param_snap snaps[CMP_MAX_DEV];
  memset(snaps, 0, sizeof snaps);
  bisect_result br;
  memset(&br, 0, sizeof br);
  br.n_dev = o.n_dev;
  report rp = {.n_dev = o.n_dev, .steps = o.steps}, *rep = &rp;
  float *buf = NULL;
  size_t cap = 0;
  int64_t T = CHARLM_MAX_WORD + 2, cells = o.steps * o.n_dev;
  int32_t *hx = malloc((size_t)(o.job.batch * T) * sizeof *hx), *hy = malloc((size_t)(o.job.batch * T) * sizeof *hy);
  float *himg = o.cnn ? malloc((size_t)o.job.batch * 784 * sizeof *himg) : NULL;
  host_batch hb = {hx, hy, himg};
  rep->loss = calloc((size_t)cells, sizeof(double));
  rep->ms = calloc((size_t)cells, sizeof(double));
  rep->dloss = calloc((size_t)cells, sizeof(double));
  rep->dparam = calloc((size_t)cells, sizeof(double));
  ag_status st = AG_OK;
  if (!hx || !hy || (o.cnn && !himg) || !rep->loss || !rep->ms || !rep->dloss || !rep->dparam)
    st = ag_error_set(AG_ERR_OOM, "compare: out of host memory");
  FILE *json = NULL;
  ag_output *json_out = NULL; /* --json FILE: written atomically at the end */
  if (st == AG_OK && o.json) {
    if (!strcmp(o.json, "-")) json = stdout;
    else if ((st = ag_output_open(o.json, "--json output", &json_out)) == AG_OK) json = ag_output_file(json_out);
  }
  ag_output *report_out = NULL; /* --report FILE: also checked before training */
  if (st == AG_OK && o.report) st = ag_output_open(o.report, "--report output", &report_out);
  if (st == AG_OK) st = o.cnn ? images_load(&o, &images) : words_load(o.job.words_path, o.job.seed, &data);

  /* The initial parameters are drawn once on the CPU and copied to every
   * device, so the comparison starts from identical bits. Each device also
   * draws its own from the same seed first: how far those are from the CPU's
   * shows whether the generator agrees across backends. */
  ag_generator *g = ag_generator_create(o.job.seed);
  if (st == AG_OK && !g) st = ag_last_status();
  if (st == AG_OK) {
    st = replica_init(&master, &o, AG_CPU, g);
    have_master = st == AG_OK;
  }
  for (int d = 0; st == AG_OK && d < o.n_dev; d++) {
    ag_generator_set_state(g, o.job.seed, 0);
    st = replica_init(&reps[d], &o, o.dev[d], g);
    if (st != AG_OK) break;
    n_ready++;
    st = param_divergence(master.params, reps[d].params, false, &buf, &cap, &rep->init_div[d], NULL);
    if (st == AG_OK) st = copy_params(&reps[d], master.params);
  }
  ag_generator_free(g);
  if (have_master) {
    rep->nparams = ag_params_numel(master.params);
    replica_free(&master);
  }

  if (st == AG_OK) {
    fprintf(o.out,
            "anygrad compare: %s model, %lld parameters, seed %llu, %lld steps of batch %lld, "
            "tolerance %g (loss %g)\n",
           model_name(&o), (long long)rep->nparams, (unsigned long long)o.job.seed,
           (long long)o.steps, (long long)o.job.batch, o.tol, o.loss_tol);
    fprintf(o.out, "devices:");
    for (int d = 0; d < o.n_dev; d++) {
      ag_device_props p;
      bool named = ag_device_props_get(o.dev[d], &p) == AG_OK;
      fprintf(o.out, "%s %s%s%s%s%s", d ? "," : "", o.name[d], named ? " (" : "", named ? p.name : "", named ? ")" : "",
             d ? "" : " [reference]");
    }
    fprintf(o.out, "\n\n");
    print_header(&o);
  }
  for (int64_t s = 0; st == AG_OK && s < o.steps; s++) {
    if (o.cnn) make_image_batch(&o, &images, s, himg, hy);
    else make_batch(&o, &data, s, hx, hy);
    for (int d = 0; st == AG_OK && o.bisect && d < o.n_dev; d++) st = snap_take(&snaps[d], reps[d].params);
    for (int d = 0; st == AG_OK && d < o.n_dev; d++) {
      double t0 = now_ms();
      st = replica_step(&reps[d], &o, s, &hb, &AT(rep->loss, s, d));
      AT(rep->ms, s, d) = now_ms() - t0;
      if (st != AG_OK) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", ag_last_error());
        st = ag_error_set(st, "step %lld on %s: %s", (long long)s + 1, o.name[d], msg);
      }
    }
    bool check = (s + 1) % o.check_every == 0 || s + 1 == o.steps, fresh = false;
    for (int d = 1; st == AG_OK && d < o.n_dev; d++) {
      AT(rep->dloss, s, d) = loss_divergence(AT(rep->loss, s, 0), AT(rep->loss, s, d), o.loss_tol == 0);
      AT(rep->dparam, s, d) = NOT_CHECKED;
      int w = 0;
      if (check)
        st = param_divergence(reps[0].params, reps[d].params, o.tol == 0, &buf, &cap, &AT(rep->dparam, s, d), &w);
      double v = check ? AT(rep->dparam, s, d) : 0;
      if (check && (isnan(v) ? !isnan(rep->max_param[d]) : v > rep->max_param[d])) {
        rep->max_param[d] = v;
        snprintf(rep->worst_name[d], sizeof rep->worst_name[d], "%s", reps[d].params->names[w]);
      }
      bool over = exceeds(AT(rep->dloss, s, d), o.loss_tol) || (check && exceeds(AT(rep->dparam, s, d), o.tol));
      if (st == AG_OK && over && !rep->first_exceed[d]) {
        rep->first_exceed[d] = s + 1;
        if (check) snprintf(rep->exceed_name[d], sizeof rep->exceed_name[d], "%s", reps[d].params->names[w]);
        fresh = true;
      }
    }
    bool bisect_now = st == AG_OK && o.bisect && (o.bisect_step ? s + 1 == o.bisect_step : fresh);
    if (st == AG_OK && (s == 0 || fresh || bisect_now || (s + 1) % o.log_every == 0 || s + 1 == o.steps))
      print_row(&o, rep, s);
    if (bisect_now) {
      /* The step again from the parameters it started with, traced on every
       * device; then each reference launch replayed on the others. */
      ag_optrace *tr[CMP_MAX_DEV] = {0};
      for (int d = 0; st == AG_OK && d < o.n_dev; d++) {
        st = snap_restore(&snaps[d], reps[d].params);
        if (st == AG_OK) st = traced_step(&reps[d], &o, &hb, &tr[d]);
        if (st != AG_OK) {
          char msg[1024];
          snprintf(msg, sizeof msg, "%s", ag_last_error());
          st = ag_error_set(st, "bisect: tracing step %lld on %s: %s", (long long)s + 1, o.name[d], msg);
        }
      }
      for (int d = 1; st == AG_OK && d < o.n_dev; d++) st = bisect_device(&o, tr[0], tr[d], d, &br);
      for (int d = 0; d < o.n_dev; d++) ag_optrace_free(tr[d]);
      br.step = s + 1;
      rep->steps = s + 1; /* the run ends at the bisected step */
      break;
    }
  }

  /* what every device holds at the end, hashed */
  if (st == AG_OK && n_ready == o.n_dev && reps[0].params->count > 0) {
    rep->nweights = reps[0].params->count;
    rep->wlist = reps[0].params;
    rep->whash = calloc((size_t)o.n_dev * (size_t)rep->nweights, sizeof *rep->whash);
    st = rep->whash ? weights_hash(reps, o.n_dev, rep->whash) : ag_error_set(AG_ERR_OOM, "compare: out of host memory");
  }
  bool diverged = false;
  for (int d = 1; d < o.n_dev; d++) diverged = diverged || rep->first_exceed[d] != 0;
  if (st == AG_OK) print_summary(&o, rep, diverged);
  if (st == AG_OK && o.bisect && br.step) print_bisect(&o, &br);
  else if (st == AG_OK && o.bisect)
    fprintf(o.out, "\nbisect: no step went over tolerance, nothing to bisect (--bisect-step N names a step)\n");
  if (st == AG_OK) print_weights(&o, rep);
  if (st == AG_OK && json) st = write_json(json, o.json, &o, rep, diverged, &br);
  if (st == AG_OK && report_out) st = write_report(report_out, o.report, &o, rep, diverged, &br);
  if (json_out && st == AG_OK) st = ag_output_commit(json_out);
  else ag_output_abort(json_out);
  if (report_out && st == AG_OK) st = ag_output_commit(report_out);
  else ag_output_abort(report_out);
  if (st != AG_OK) fprintf(stderr, "anygrad compare: %s: %s\n", ag_status_name(st), ag_last_error());
  fflush(stdout);

  for (int d = 0; d < n_ready; d++) replica_free(&reps[d]);
  for (int d = 0; d < CMP_MAX_DEV; d++) snap_free(&snaps[d]);
  bisect_free(&br);
  words_free(&data);
  ag_image_set_free(&images);
  free(himg);
  free(buf);
  free(hx);
  free(hy);
  free(rep->loss);
  free(rep->ms);
  free(rep->dloss);
  free(rep->dparam);
  free(rep->whash);
  return st != AG_OK ? 2 : diverged ? 1 : 0;
}
