/* Fashion-MNIST CNN (see cnn.h). Images are normalised with the training
 * set's mean and std and fed as [B, 1, 28, 28] f32 batches. */
#include "cnn.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *const k_names[CNN_CLASSES] = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                                 "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};
#define NORM_MEAN CNN_NORM_MEAN
#define NORM_STD CNN_NORM_STD

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

cnn_options cnn_defaults(void) {
  cnn_options o;
  memset(&o, 0, sizeof o);
  o.device = AG_CPU;
  o.data_dir = CNN_DATA_DIR;
  o.epochs = 5;
  o.batch = 128;
  o.lr = 3e-3;
  o.weight_decay = 1e-4;
  o.warmup = 100;
  o.seed = 1337;
  o.c1 = 16;
  o.c2 = 32;
  o.workers = 2;
  o.augment = false; /* measured: costs accuracy in a 10-minute budget (docs/vision.md) */
  o.profile = true;
  return o;
}

void cnn_model_free(cnn_model *m) {
  if (!m) return;
  ag_conv2d_layer_free(&m->conv1);
  ag_conv2d_layer_free(&m->conv2);
  ag_batch_norm2d_free(&m->bn1);
  ag_batch_norm2d_free(&m->bn2);
  ag_linear_free(&m->fc);
  ag_params_free(&m->params);
  ag_params_free(&m->buffers);
  memset(m, 0, sizeof *m);
}

ag_status cnn_model_init(cnn_model *m, const cnn_options *o, ag_generator *g) {
  memset(m, 0, sizeof *m);
  ag_conv2d_params p = {{1, 1}, {1, 1}, {1, 1}, 1};
  /* conv bias is redundant before batch norm */
  ag_status st = ag_conv2d_layer_init(&m->conv1, o->device, AG_F32, 1, o->c1, 3, 3, &p, false, g);
  if (st == AG_OK) st = ag_batch_norm2d_init(&m->bn1, o->device, AG_F32, o->c1, 0.1, 1e-5);
  if (st == AG_OK) st = ag_conv2d_layer_init(&m->conv2, o->device, AG_F32, o->c1, o->c2, 3, 3, &p, false, g);
  if (st == AG_OK) st = ag_batch_norm2d_init(&m->bn2, o->device, AG_F32, o->c2, 0.1, 1e-5);
  if (st == AG_OK) st = ag_linear_init(&m->fc, o->device, AG_F32, (int64_t)o->c2 * 7 * 7, CNN_CLASSES, true, g);
  if (st == AG_OK) st = ag_conv2d_layer_params(&m->conv1, "conv1.", &m->params);
  if (st == AG_OK) st = ag_batch_norm2d_params(&m->bn1, "bn1.", &m->params);
  if (st == AG_OK) st = ag_conv2d_layer_params(&m->conv2, "conv2.", &m->params);
  if (st == AG_OK) st = ag_batch_norm2d_params(&m->bn2, "bn2.", &m->params);
  if (st == AG_OK) st = ag_linear_params(&m->fc, "fc.", &m->params);
  if (st == AG_OK) st = ag_batch_norm2d_buffers(&m->bn1, "bn1.", &m->buffers);
  if (st == AG_OK) st = ag_batch_norm2d_buffers(&m->bn2, "bn2.", &m->buffers);
  if (st != AG_OK) cnn_model_free(m);
  return st;
}

static ag_tensor *block(ag_conv2d_layer *c, ag_batch_norm2d *bn, ag_tensor *x, bool train) {
  static const ag_pool2d_params pool = {{2, 2}, {2, 2}, {0, 0}, false};
  ag_tensor *y = ag_conv2d_layer_forward(c, x);
  ag_tensor *z = ag_batch_norm2d_forward(bn, y, train);
  ag_tensor *r = ag_relu(z);
  ag_tensor *p = ag_max_pool2d(r, &pool);
  ag_tensor_release(y);
  ag_tensor_release(z);
  ag_tensor_release(r);
  return p;
}

ag_tensor *cnn_model_logits(cnn_model *m, ag_tensor *x, bool train) {
  ag_tensor *a = block(&m->conv1, &m->bn1, x, train);
  ag_tensor *b = block(&m->conv2, &m->bn2, a, train);
  int64_t s[2] = {b ? ag_tensor_shape(b)[0] : 0, (int64_t)m->conv2.out * 49};
  ag_tensor *f = ag_reshape(b, 2, s);
  ag_tensor *y = ag_linear_forward(&m->fc, f);
  ag_tensor_release(a);
  ag_tensor_release(b);
  ag_tensor_release(f);
  return y;
}

static uint64_t splitmix(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Batch rows idx[0..n) of set into a normalised f32 tensor and i32 labels. */
static ag_status make_batch(const ag_image_set *set, const int32_t *idx, int64_t n, ag_device d, float *xbuf,
                            int32_t *ybuf, ag_tensor **x, ag_tensor **y) {
  const int64_t px = set->height * set->width;
  for (int64_t i = 0; i < n; i++) {
    const uint8_t *src = set->pixels + (int64_t)idx[i] * px;
    for (int64_t k = 0; k < px; k++) xbuf[i * px + k] = (float)((src[k] / 255.0 - NORM_MEAN) / NORM_STD);
    ybuf[i] = set->labels[idx[i]];
  }
  int64_t xs[4] = {n, 1, set->height, set->width};
  *x = ag_from_host(d, AG_F32, 4, xs, xbuf);
  *y = *x ? ag_from_host(d, AG_I32, 1, &n, ybuf) : NULL;
  return *y ? AG_OK : ag_last_status();
}

/* ---------------- the input pipeline ---------------- */

typedef struct fill_ctx {
  const ag_image_set *set;
  const cnn_options *o;
  int epoch; /* absolute, for the augmentation's random numbers */
} fill_ctx;

/* One image: optional random crop from the image padded by 4 (zeros) and
 * horizontal flip, then normalisation. The random numbers depend only on
 * (seed, epoch, sample), not on which worker runs it. */
static void decode_one(const fill_ctx *c, int64_t sample, float *dst) {
  const uint8_t *src = c->set->pixels + sample * 28 * 28;
  int dy = 0, dx = 0;
  bool flip = false;
  if (c->o->augment) {
    uint64_t r = c->o->seed ^ ((uint64_t)c->epoch << 40) ^ (uint64_t)sample * 0x9e3779b97f4a7c15ull;
    uint64_t v = splitmix(&r);
    dy = (int)(v % 9) - 4;
    dx = (int)((v >> 8) % 9) - 4;
    flip = (v >> 16) & 1;
  }
  const float zero = (float)((0 - NORM_MEAN) / NORM_STD);
  for (int y = 0; y < 28; y++)
    for (int x = 0; x < 28; x++) {
      int sy = y + dy, sx = (flip ? 27 - x : x) + dx;
      dst[y * 28 + x] = (sy < 0 || sy >= 28 || sx < 0 || sx >= 28)
                            ? zero
                            : (float)((src[sy * 28 + sx] / 255.0 - NORM_MEAN) / NORM_STD);
    }
  if (c->o->augment_delay_us > 0) {
    struct timespec ts = {0, (long)c->o->augment_delay_us * 1000L};
    nanosleep(&ts, NULL);
  }
}

static ag_status fill_batch(void *user, int64_t epoch, int64_t batch_index, const int64_t *samples, int64_t rows,
                            ag_loader_batch *b) {
  const fill_ctx *c = user;
  float *x = ag_loader_batch_data(b, 0);
  int32_t *y = ag_loader_batch_data(b, 1);
  if (!x || !y) return ag_error_set(AG_ERR_INTERNAL, "cnn: loader batch without buffers");
  for (int64_t i = 0; i < rows; i++) {
    decode_one(c, samples[i], x + i * 28 * 28);
    y[i] = c->set->labels[samples[i]];
  }
  return AG_OK;
}

/* Accuracy on the test set, filling conf[true][pred]. */
static ag_status evaluate(cnn_model *m, const ag_image_set *test, int64_t limit, ag_device d, double *acc,
                          int64_t conf[CNN_CLASSES][CNN_CLASSES]) {
  const int64_t n = limit > 0 && limit < test->count ? limit : test->count, B = 500;
  memset(conf, 0, sizeof(int64_t) * CNN_CLASSES * CNN_CLASSES);
  float *xb = malloc(sizeof(float) * (size_t)(B * test->height * test->width));
  int32_t *yb = malloc(sizeof(int32_t) * (size_t)B), *idx = malloc(sizeof(int32_t) * (size_t)B),
          *pred = malloc(sizeof(int32_t) * (size_t)B);
  ag_status st = (xb && yb && idx && pred) ? AG_OK : ag_error_set(AG_ERR_OOM, "cnn: out of host memory");
  int64_t right = 0;
  ag_no_grad_begin();
  for (int64_t i0 = 0; st == AG_OK && i0 < n; i0 += B) {
    int64_t nb = n - i0 < B ? n - i0 : B;
    for (int64_t i = 0; i < nb; i++) idx[i] = (int32_t)(i0 + i);
    ag_scope_begin();
    ag_tensor *x, *y;
    st = make_batch(test, idx, nb, d, xb, yb, &x, &y);
    ag_tensor *logits = st == AG_OK ? cnn_model_logits(m, x, false) : NULL;
    ag_tensor *am = logits ? ag_argmax(logits, 1, false) : NULL; /* i64 */
    if (am) am = ag_cast(am, AG_I32);
    if (st == AG_OK) st = am ? ag_to_host(am, pred, sizeof(int32_t) * (size_t)nb) : ag_last_status();
    ag_scope_end();
    for (int64_t i = 0; st == AG_OK && i < nb; i++) {
      int t = yb[i], p = pred[i];
      if (p >= 0 && p < CNN_CLASSES && t < CNN_CLASSES) conf[t][p]++;
      right += t == p;
    }
  }
  ag_grad_mode_end();
  free(xb);
  free(yb);
  free(idx);
  free(pred);
  *acc = n ? (double)right / (double)n : 0;
  return st;
}

static void confusion_summary(FILE *out, int64_t conf[CNN_CLASSES][CNN_CLASSES]) {
  fprintf(out, "cnn: per-class test accuracy (and the class each is most often mistaken for):\n");
  for (int t = 0; t < CNN_CLASSES; t++) {
    int64_t tot = 0, worst = -1;
    int wi = -1;
    for (int p = 0; p < CNN_CLASSES; p++) {
      tot += conf[t][p];
      if (p != t && conf[t][p] > worst) worst = conf[t][p], wi = p;
    }
    fprintf(out, "  %-11s %5.1f%%   -> %-11s %4lld\n", k_names[t], tot ? 100.0 * conf[t][t] / tot : 0.0,
            wi >= 0 ? k_names[wi] : "-", (long long)worst);
  }
}

/* ---------------- checkpoints ---------------- */

static ag_status ckpt_lists(const cnn_model *m, ag_optimizer *opt, ag_param_list *all) {
  ag_param_list st_list = {0};
  ag_status st = ag_params_extend(all, "model.", &m->params);
  if (st == AG_OK) st = ag_params_extend(all, "buffers.", &m->buffers);
  if (st == AG_OK) st = ag_optimizer_state(opt, &st_list);
  if (st == AG_OK) st = ag_params_extend(all, "optim.", &st_list);
  ag_params_free(&st_list);
  return st;
}

static ag_status save_ckpt(const char *path, const cnn_model *m, ag_optimizer *opt, const cnn_options *o, int epoch,
                           int64_t step) {
  ag_param_list all = {0};
  ag_status st = ckpt_lists(m, opt, &all);
  char v[5][32];
  snprintf(v[0], 32, "%d", epoch);
  snprintf(v[1], 32, "%lld", (long long)step);
  snprintf(v[2], 32, "%d", o->c1);
  snprintf(v[3], 32, "%d", o->c2);
  snprintf(v[4], 32, "%llu", (unsigned long long)o->seed);
  const char *keys[] = {"format", "epoch", "step", "c1", "c2", "seed"};
  const char *vals[] = {"anygrad-cnn-1", v[0], v[1], v[2], v[3], v[4]};
  if (st == AG_OK) st = ag_safetensors_save(path, &all, 6, keys, vals);
  ag_params_free(&all);
  return st;
}

/* Metadata key k as a decimal integer in [lo, hi] (the whole value: no sign,
 * blank or hex); a missing or malformed value is AG_ERR_CORRUPT naming the
 * key (values are printed escaped). */
static ag_status meta_u64(const ag_safetensors *f, const char *path, const char *k, uint64_t lo, uint64_t hi,
                          uint64_t *out) {
  const char *v = ag_safetensors_meta(f, k);
  if (!v) return ag_error_set(AG_ERR_CORRUPT, "%s: not a cnn checkpoint (metadata '%s' missing)", path, k);
  bool digits = *v != 0;
  for (const char *p = v; digits && *p; p++) digits = *p >= '0' && *p <= '9';
  uint64_t x = 0;
  if (!digits || !ag_parse_u64(v, &x) || x < lo || x > hi) {
    char vb[64];
    return ag_error_set(AG_ERR_CORRUPT, "%s: metadata '%s' is '%s', expected an integer in %llu..%llu", path, k,
                        ag_escape(v, vb, sizeof vb), (unsigned long long)lo, (unsigned long long)hi);
  }
  *out = x;
  return AG_OK;
}

/* Architecture, seed and position recorded in a checkpoint; every key is
 * validated, and an error names the first bad one. */
static ag_status ckpt_config(const char *path, cnn_options *o, ag_safetensors **out, int *epoch, int64_t *step) {
  ag_status st = ag_safetensors_open(path, out);
  if (st != AG_OK) return st;
  const char *fmt = ag_safetensors_meta(*out, "format");
  uint64_t e = 0, s = 0, c1 = 0, c2 = 0, seed = 0;
  if (!fmt || strcmp(fmt, "anygrad-cnn-1"))
    st = ag_error_set(AG_ERR_CORRUPT, "%s: not a cnn checkpoint (metadata 'format' is not anygrad-cnn-1)", path);
  if (st == AG_OK) st = meta_u64(*out, path, "epoch", 0, CNN_MAX_EPOCHS, &e);
  if (st == AG_OK) st = meta_u64(*out, path, "step", 0, CNN_MAX_STEPS, &s);
  if (st == AG_OK) st = meta_u64(*out, path, "c1", 1, CNN_MAX_WIDTH, &c1);
  if (st == AG_OK) st = meta_u64(*out, path, "c2", 1, CNN_MAX_WIDTH, &c2);
  if (st == AG_OK) st = meta_u64(*out, path, "seed", 0, UINT64_MAX, &seed);
  if (st != AG_OK) {
    ag_safetensors_close(*out);
    *out = NULL;
    return st;
  }
  o->c1 = (int)c1;
  o->c2 = (int)c2;
  if (!o->seed_set) o->seed = seed;
  *epoch = (int)e;
  *step = (int64_t)s;
  return AG_OK;
}

static ag_status validate(const cnn_options *o) {
  if (o->epochs < 0 || o->epochs > CNN_MAX_EPOCHS || o->batch < 1 || o->batch > CNN_MAX_BATCH || o->c1 < 1 ||
      o->c1 > CNN_MAX_WIDTH || o->c2 < 1 || o->c2 > CNN_MAX_WIDTH || !(o->lr > 0 && o->lr <= 10) ||
      !(o->weight_decay >= 0 && o->weight_decay <= 1) || o->warmup < 0 || o->train_limit < 0 || o->test_limit < 0 ||
      o->workers < 0 || o->workers > 64 || o->augment_delay_us < 0 || o->augment_delay_us > 1000000 ||
      o->bucket_bytes < 0 || o->bn_shards < 0 || o->bn_shards > CNN_MAX_BATCH || (o->group && o->bn_shards > 1))
    return ag_error_set(AG_ERR_INVALID, "cnn: an option is outside its limits (epochs 0..%d, batch 1..%d, "
                        "widths 1..%d, 0 < lr <= 10, 0 <= weight decay <= 1, workers 0..64, bucket bytes >= 0, "
                        "bn shards 0..%d and not with a group)", CNN_MAX_EPOCHS, CNN_MAX_BATCH, CNN_MAX_WIDTH,
                        CNN_MAX_BATCH);
  return AG_OK;
}

/* Logits of rows [lo, hi) of x, or with shards > 1 the concatenation of
 * each shard's logits (batch statistics per shard). */
static ag_tensor *shard_logits(cnn_model *m, ag_tensor *x, int64_t lo, int64_t hi, int shards) {
  if (shards <= 1) {
    if (lo == 0 && hi == ag_tensor_shape(x)[0]) return cnn_model_logits(m, x, true);
    ag_tensor *xs = ag_slice(x, 0, lo, hi, 1);
    ag_tensor *l = xs ? cnn_model_logits(m, xs, true) : NULL;
    ag_tensor_release(xs);
    return l;
  }
  ag_tensor *parts[64];
  ag_tensor **ps = shards <= 64 ? parts : malloc(sizeof(ag_tensor *) * (size_t)shards);
  if (!ps) {
    ag_error_set(AG_ERR_OOM, "cnn: out of host memory");
    return NULL;
  }
  int k = 0;
  bool ok = true;
  for (int i = 0; ok && i < shards; i++) {
    int64_t a = lo + (hi - lo) * i / shards, b = lo + (hi - lo) * (i + 1) / shards;
    if (b == a) continue;
    ps[k] = shard_logits(m, x, a, b, 1);
    ok = ps[k++] != NULL;
  }
  ag_tensor *l = ok ? ag_concat(k, ps, 0) : NULL;
  for (int i = 0; i < k; i++) ag_tensor_release(ps[i]);
  if (ps != parts) free(ps);
  return l;
}

/* Running statistics: the mean over the replicas (each updated them with
 * its own rows). */
static ag_status average_buffers(ag_group *g, const ag_param_list *buffers) {
  ag_status st = AG_OK;
  for (int i = 0; st == AG_OK && i < buffers->count; i++)
    if (ag_tensor_dtype(buffers->tensors[i]) == AG_F32)
      st = ag_all_reduce(g, buffers->tensors[i], AG_DIST_AVG, NULL);
  return st;
}

ag_status cnn_train(const cnn_options *opts, cnn_result *res) {
  cnn_options o = *opts;
  cnn_result r;
  memset(&r, 0, sizeof r);
  /* Replicas: rank 0 alone prints, evaluates and writes the checkpoint. */
  const int rank = o.group ? ag_group_rank(o.group) : 0, nrank = o.group ? ag_group_size(o.group) : 1;
  const bool lead = rank == 0;
  if (!lead) {
    o.quiet = true;
    o.out = NULL;
  }
  FILE *out = o.log ? o.log : stdout;
  ag_safetensors *ck = NULL;
  int start_epoch = 0;
  int64_t step = 0;
  ag_status st = validate(&o);
  if (st == AG_OK && o.resume) st = ckpt_config(o.resume, &o, &ck, &start_epoch, &step);
  /* Checked before any work: a regular file or nothing at the path, and a
   * directory a file can be created in (nothing is left behind). */
  if (st == AG_OK && o.out) {
    st = ag_output_check(o.out, "checkpoint");
    if (st != AG_OK) {
      char msg[512];
      snprintf(msg, sizeof msg, "%s", ag_last_error());
      st = ag_error_set(st, "cnn: %s", msg);
    }
  }
  ag_image_set train = {0}, test = {0};
  char pi[1024], pl[1024];
  if (st == AG_OK) {
    snprintf(pi, sizeof pi, "%s/train-images-idx3-ubyte.gz", o.data_dir);
    snprintf(pl, sizeof pl, "%s/train-labels-idx1-ubyte.gz", o.data_dir);
    st = ag_image_set_load(pi, pl, &train);
  }
  if (st == AG_OK) {
    snprintf(pi, sizeof pi, "%s/t10k-images-idx3-ubyte.gz", o.data_dir);
    snprintf(pl, sizeof pl, "%s/t10k-labels-idx1-ubyte.gz", o.data_dir);
    st = ag_image_set_load(pi, pl, &test);
  }
  if (st == AG_OK && (train.height != 28 || train.width != 28 || test.height != 28 || test.width != 28 ||
                      train.num_classes > CNN_CLASSES || test.num_classes > CNN_CLASSES))
    st = ag_error_set(AG_ERR_CORRUPT, "cnn: expected 28x28 images in at most %d classes", CNN_CLASSES);
  const int64_t n_train = o.train_limit > 0 && o.train_limit < train.count ? o.train_limit : train.count;
  const int64_t steps_per_epoch = o.batch > 0 ? (n_train + o.batch - 1) / o.batch : 0;
  const int64_t total = steps_per_epoch * o.epochs;

  ag_generator *gen = ag_generator_create(o.seed);
  cnn_model m;
  bool have_model = false;
  if (st == AG_OK) {
    st = cnn_model_init(&m, &o, gen);
    have_model = st == AG_OK;
  }
  ag_optimizer *opt = NULL;
  if (st == AG_OK) {
    ag_adamw_options ao = ag_adamw_defaults();
    ao.lr = o.lr;
    ao.weight_decay = o.weight_decay;
    opt = ag_adamw_create(&m.params, &ao);
    if (!opt) st = ag_last_status();
  }
  if (st == AG_OK && ck) {
    ag_param_list all = {0};
    st = ckpt_lists(&m, opt, &all);
    if (st == AG_OK) st = ag_safetensors_load_into(ck, &all);
    if (st == AG_OK) ag_optimizer_set_steps(opt, step);
    ag_params_free(&all);
  }
  ag_safetensors_close(ck);
  /* Data parallelism: parameters, running statistics and a resumed
   * optimizer state from rank 0. */
  ag_ddp *ddp = NULL;
  if (st == AG_OK && o.group) {
    ag_ddp_options dopt;
    ag_ddp_options_default(&dopt);
    if (o.bucket_bytes > 0) dopt.bucket_bytes = o.bucket_bytes;
    st = ag_ddp_create(o.group, &m.params, &dopt, &ddp);
    if (st == AG_OK) st = ag_ddp_broadcast(ddp, &m.buffers, 0);
    if (st == AG_OK && o.resume) {
      ag_param_list sl = {0};
      st = ag_optimizer_state(opt, &sl);
      if (st == AG_OK) st = ag_ddp_broadcast(ddp, &sl, 0);
      ag_params_free(&sl);
    }
  }
  char dname[32];
  ag_device_str(o.device, dname, sizeof dname);
  if (st == AG_OK && !o.quiet)
    fprintf(out, "cnn: fashion-mnist, %lld train / %lld test images, %lld parameters, conv %d-%d, batch %lld, "
                 "%d loader worker%s%s, device %s%s\n",
            (long long)n_train, (long long)(o.test_limit > 0 && o.test_limit < test.count ? o.test_limit : test.count),
            (long long)ag_params_numel(&m.params), o.c1, o.c2, (long long)o.batch, o.workers,
            o.workers == 1 ? "" : "s", o.augment ? ", augmented (crop, flip)" : "", dname,
            start_epoch ? " (resumed)" : "");
  if (st == AG_OK && start_epoch >= o.epochs && !o.quiet)
    fprintf(out, "cnn: the checkpoint is at epoch %d and --epochs is %d: nothing to train\n", start_epoch, o.epochs);

  ag_profiler *prof = NULL;
  if (st == AG_OK && o.profile && start_epoch < o.epochs) {
    ag_profiler_config pc = {.window = o.profile_window > 0 ? o.profile_window : 100};
    prof = ag_profiler_create(o.device, &pc);
    if (!prof) st = ag_last_status();
  }
  double t0 = now_s();
  r.epochs_done = start_epoch;
  for (int epoch = start_epoch; st == AG_OK && epoch < o.epochs; epoch++) {
    /* The order depends only on (seed, epoch): a resumed run sees the same data. */
    fill_ctx fc = {&train, &o, epoch};
    ag_loader_config lc;
    memset(&lc, 0, sizeof lc);
    lc.device = o.device;
    lc.num_samples = n_train;
    lc.batch_size = o.batch;
    lc.shuffle = true;
    lc.seed = o.seed * 0x100000001b3ull + (uint64_t)epoch;
    lc.epochs = 1;
    lc.num_workers = o.workers;
    lc.fill_on_caller = o.workers == 0;
    lc.n_fields = 2;
    lc.fields[0] = (ag_loader_field){.dtype = AG_F32, .ndim = 4, .shape = {0, 1, 28, 28}};
    lc.fields[1] = (ag_loader_field){.dtype = AG_I32, .ndim = 1};
    lc.fill = fill_batch;
    lc.user = &fc;
    lc.profiler = prof;
    ag_loader *ld = ag_loader_create(&lc);
    if (!ld) st = ag_last_status();
    double te = now_s(), loss_sum = 0;
    int64_t loss_n = 0;
    for (int64_t s = 0; st == AG_OK && s < steps_per_epoch; s++, step++) {
      ag_optimizer_set_lr(opt, ag_lr_cosine(step, o.warmup, total, o.lr, o.lr * 0.01));
      if (prof) ag_profiler_step_begin(prof);
      ag_scope_begin();
      ag_tensor *xy[2] = {NULL, NULL};
      ag_loader_batch_info info;
      st = ag_loader_next(ld, xy, &info);
      if (st == AG_OK && info.end) st = ag_error_set(AG_ERR_INTERNAL, "cnn: the loader ended early");
      /* This rank's rows of the batch (all of them on one device). */
      const int64_t b = st == AG_OK ? info.rows : 0, lo = b * rank / nrank, hi = b * (rank + 1) / nrank;
      if (st == AG_OK && ddp) st = ag_ddp_step_begin(ddp);
      if (st == AG_OK && ddp) st = ag_ddp_set_weight(ddp, b ? (double)(hi - lo) / (double)b : 0);
      ag_tensor *loss = NULL;
      if (st == AG_OK && hi > lo) { /* a replica without rows only joins the reduction */
        ag_tensor *ys = ddp ? ag_slice(xy[1], 0, lo, hi, 1) : xy[1];
        ag_tensor *logits = ys ? shard_logits(&m, xy[0], lo, hi, o.bn_shards) : NULL;
        loss = logits ? ag_cross_entropy(logits, ys, AG_REDUCTION_MEAN, -100) : NULL;
        st = loss ? ag_backward(loss, NULL, false) : ag_last_status();
      }
      if (st == AG_OK && ddp) st = ag_ddp_finish(ddp);
      if (st == AG_OK) st = ag_optimizer_step(opt);
      ag_optimizer_zero_grad(opt);
      const bool first = r.steps == 0, last = s + 1 == steps_per_epoch && epoch + 1 == o.epochs;
      /* With replicas, the whole batch's loss is the sum over ranks of each
       * one's loss times its weight (read at the progress lines). */
      if (st == AG_OK && ddp && (s % 50 == 0 || s + 1 == steps_per_epoch || first)) {
        int64_t one[1] = {1};
        ag_tensor *dl = loss ? ag_detach(loss) : NULL;
        ag_tensor *lw = dl ? ag_mul_scalar(dl, (double)(hi - lo) / (double)b) : ag_zeros(o.device, AG_F32, 0, one);
        st = lw ? ag_all_reduce(o.group, lw, AG_DIST_SUM, NULL) : ag_last_status();
        loss = lw;
      }
      r.steps++;
      if (st == AG_OK && (s % 50 == 0 || s + 1 == steps_per_epoch || first)) {
        double l = ag_item(loss);
        if (first) r.first_loss = l;
        if (last) r.last_loss = l;
        if (!isfinite(l))
          st = ag_error_set(AG_ERR_STATE, "cnn: training diverged: the loss became %g at step %lld", l,
                            (long long)step + 1);
        loss_sum += l;
        loss_n++;
        if (st == AG_OK && !o.quiet && isatty(fileno(out)))
          fprintf(out, "\rcnn: epoch %d/%d step %lld/%lld loss %.4f", epoch + 1, o.epochs, (long long)s + 1,
                  (long long)steps_per_epoch, l);
      }
      ag_scope_end();
      if (prof) ag_profiler_step_end(prof);
    }
    ag_loader_destroy(ld);
    if (st != AG_OK) break;
    double t_train = now_s() - te;
    if (ddp) st = average_buffers(o.group, &m.buffers);
    if (st == AG_OK && lead) st = evaluate(&m, &test, o.test_limit, o.device, &r.test_accuracy, r.confusion);
    if (st != AG_OK) break;
    r.epochs_done = epoch + 1;
    if (!o.quiet) {
      if (isatty(fileno(out))) fputc('\r', out);
      fprintf(out, "cnn: epoch %d/%d: train loss %.4f (sampled), test accuracy %.2f%%, %.1f s (%.0f images/s), "
                   "%.1f s total\n",
              epoch + 1, o.epochs, loss_n ? loss_sum / loss_n : NAN, 100 * r.test_accuracy, t_train,
              t_train > 0 ? n_train / t_train : 0, now_s() - t0);
      fflush(out);
    }
    if (o.out) {
      st = save_ckpt(o.out, &m, opt, &o, epoch + 1, step);
      if (st == AG_OK && !o.quiet && epoch + 1 == o.epochs)
        fprintf(out, "cnn: checkpoint %s (epoch %d; continue with --resume %s --epochs N)\n", o.out, epoch + 1,
                o.out);
    }
  }
  r.seconds = now_s() - t0;
  if (st == AG_OK && r.epochs_done == start_epoch && start_epoch > 0 && lead)
    st = evaluate(&m, &test, o.test_limit, o.device, &r.test_accuracy, r.confusion);
  if (st == AG_OK && !o.quiet && r.epochs_done > 0) {
    fprintf(out, "cnn: test accuracy %.2f%% after %d epochs (%.1f s)\n", 100 * r.test_accuracy, r.epochs_done,
            r.seconds);
    confusion_summary(out, r.confusion);
  }
  if (prof) {
    ag_profiler_verdict v;
    if (ag_profiler_verdict_get(prof, &v) == AG_OK) {
      r.input_bound = v.input_bound;
      snprintf(r.verdict, sizeof r.verdict, "%s", v.text);
    }
    if (st == AG_OK && !o.quiet) ag_profiler_report(prof, out);
    ag_profiler_destroy(prof);
  }
  if (st != AG_OK && o.group) ag_group_abort(o.group, ag_last_error()); /* the others stop at once */
  ag_ddp_destroy(ddp);
  ag_optimizer_free(opt);
  if (have_model) cnn_model_free(&m);
  ag_generator_free(gen);
  ag_image_set_free(&train);
  ag_image_set_free(&test);
  if (res) *res = r;
  return st;
}

int cnn_model_onnx(const cnn_model *m, ag_onnx *g, int x) {
  if (!m) {
    ag_error_set(AG_ERR_INVALID, "cnn_model_onnx: NULL model");
    return -1;
  }
  static const ag_pool2d_params pool = {{2, 2}, {2, 2}, {0, 0}, false};
  const ag_conv2d_layer *conv[2] = {&m->conv1, &m->conv2};
  const ag_batch_norm2d *bn[2] = {&m->bn1, &m->bn2};
  const char *names[2][2] = {{"conv1.", "bn1."}, {"conv2.", "bn2."}};
  for (int i = 0; i < 2; i++) {
    x = ag_onnx_batch_norm2d(g, bn[i], names[i][1], ag_onnx_conv2d(g, conv[i], names[i][0], x));
    x = ag_onnx_max_pool2d(g, &pool, ag_onnx_unary(g, "relu", x));
  }
  return ag_onnx_linear(g, &m->fc, "fc.", ag_onnx_flatten(g, x));
}
