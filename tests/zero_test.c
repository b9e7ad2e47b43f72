/* Sharded optimizer state (ZeRO stages 1 and 2, include/anygrad/ddp.h) on
 * in-process groups of CPU ranks: the parameters after a few AdamW steps
 * are bitwise those of unsharded DDP on the same ranks (stage 1 also with
 * clipping; stage 2 with clipping within 1e-6: the norm's shard sums of
 * squares are added in another order; also with unequal shares of the
 * batch, as the balance sets them), the optimizer's memory per rank
 * (allocator category "optimizer") is 1/N of the unsharded one (and with
 * stage 2 the gradients kept between steps too), and a
 * checkpoint written by 2 ranks loads into 2 ranks (bitwise the
 * uninterrupted run), 3 ranks and one device without sharding (within
 * f32 summation order of the uninterrupted run: 1e-5 relative). */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "anygrad/anygrad.h"

#define MAXR 3
#define IN 6
#define OUT 5
#define ROWS 24 /* global batch: equal shares for 1, 2 and 3 ranks */
#define CLIP_RTOL 1e-6
#define RESHARD_RTOL 1e-5
#define TMP AG_TEST_TMPDIR "/zero_test"

typedef struct ctx ctx;
typedef void (*rank_fn)(ctx *c, int rank);
struct ctx {
  int size;
  ag_device dev[MAXR];
  ag_group *g[MAXR];
  rank_fn fn;
  char fail[MAXR][512];
  /* the run */
  int stage;
  int hid;          /* hidden width of the MLP */
  int64_t bucket_bytes;
  double clip;      /* 0: none */
  bool uneven;      /* unequal shares of the batch (as the balance sets them): rank r takes 2^(size-1-r) parts */
  int first_step, steps;
  const char *load, *save; /* sharded checkpoint prefixes, or NULL */
  /* results */
  float *params[MAXR];
  int64_t n_params;
  int64_t opt_bytes[MAXR]; /* optimizer category growth while this rank built its optimizer */
  float norm0[MAXR];       /* the first step's gradient norm (with clip) */
  int64_t grad_bytes;      /* the "gradients" category of all ranks between steps */
};

typedef struct targ {
  ctx *c;
  int rank;
} targ;

static void failf(ctx *c, int r, const char *fmt, ...) {
  if (c->fail[r][0]) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->fail[r], sizeof c->fail[r], fmt, ap);
  va_end(ap);
}

#define CHECK_OK(c, r, expr)                                                                            \
  do {                                                                                                  \
    ag_status st_ = (expr);                                                                             \
    if (st_ != AG_OK) {                                                                                 \
      failf(c, r, "%s:%d %s: %s: %s", __FILE__, __LINE__, #expr, ag_status_name(st_), ag_last_error()); \
      goto out;                                                                                         \
    }                                                                                                   \
  } while (0)

static void *thread_main(void *p) {
  targ *a = p;
  a->c->fn(a->c, a->rank);
  if (a->c->fail[a->rank][0]) ag_group_abort(a->c->g[a->rank], a->c->fail[a->rank]);
  return NULL;
}

static void run_ranks(ctx *c, rank_fn fn) {
  for (int r = 0; r < c->size; r++) c->dev[r] = AG_CPU;
  assert_int_equal(ag_group_create_inproc(c->size, c->dev, NULL, c->g), AG_OK);
  pthread_t th[MAXR];
  targ a[MAXR];
  c->fn = fn;
  for (int r = 0; r < c->size; r++) {
    c->fail[r][0] = 0;
    a[r] = (targ){c, r};
    assert_int_equal(pthread_create(&th[r], NULL, thread_main, &a[r]), 0);
  }
  for (int r = 0; r < c->size; r++) pthread_join(th[r], NULL);
  for (int r = 0; r < c->size; r++) ag_group_destroy(c->g[r]);
  for (int r = 0; r < c->size; r++)
    if (c->fail[r][0]) fail_msg("rank %d: %s", r, c->fail[r]);
}

/* ---- model, data ---- */

static ag_status mlp_make(ag_mlp *m, int hid) {
  ag_generator *g = ag_generator_create(11);
  int64_t sizes[4] = {IN, hid, hid, OUT};
  ag_status st = ag_mlp_init(m, AG_CPU, AG_F32, 4, sizes, AG_ACT_TANH, g);
  ag_generator_free(g);
  return st;
}

/* Step `step`'s global batch (fixed by the step alone). */
static void make_batch(int step, float *x, int32_t *y) {
  uint64_t s = (uint64_t)step * 2654435761u + 5;
  for (int i = 0; i < ROWS * IN; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x[i] = (float)((double)(s >> 11) / 9007199254740992.0 * 2 - 1);
  }
  for (int i = 0; i < ROWS; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    y[i] = (int32_t)((s >> 33) % OUT);
  }
}

/* Backward of the mean cross-entropy over rows [off, off + n) of the step's batch. */
static ag_status backward_rows(const ag_mlp *m, int step, int64_t off, int64_t n) {
  float x[ROWS * IN];
  int32_t y[ROWS];
  make_batch(step, x, y);
  int64_t xs[2] = {n, IN}, ys[1] = {n};
  ag_scope_begin();
  ag_tensor *xt = ag_from_host(AG_CPU, AG_F32, 2, xs, x + off * IN);
  ag_tensor *yt = ag_from_host(AG_CPU, AG_I32, 1, ys, y + off);
  ag_tensor *logits = xt && yt ? ag_mlp_forward(m, xt) : NULL;
  ag_tensor *loss = logits ? ag_cross_entropy(logits, yt, AG_REDUCTION_MEAN, -1) : NULL;
  ag_status st = loss ? ag_backward(loss, NULL, false) : ag_last_status();
  ag_status se = ag_scope_end();
  return st == AG_OK ? se : st;
}

static float *params_host(const ag_param_list *l, int64_t *out_n) {
  int64_t n = ag_params_numel(l), at = 0;
  float *h = calloc((size_t)n + 1, sizeof *h);
  for (int i = 0; h && i < l->count; i++) {
    int64_t k = ag_tensor_numel(l->tensors[i]);
    if (ag_to_host(l->tensors[i], h + at, (size_t)k * sizeof *h) != AG_OK) {
      free(h);
      return NULL;
    }
    at += k;
  }
  *out_n = n;
  return h;
}

static double rel_err(const float *a, const float *b, int64_t n) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; i++) {
    num = fmax(num, fabs((double)a[i] - b[i]));
    den = fmax(den, fabs((double)b[i]));
  }
  return den > 0 ? num / den : num;
}

static int64_t optimizer_bytes(void) {
  ag_memory_stats s;
  if (ag_memory_stats_get(AG_CPU, &s) != AG_OK) return -1;
  return s.category_bytes[AG_MEM_OPTIMIZER].current;
}

/* ---- one rank's run ---- */

static void rank_train(ctx *c, int r) {
  ag_mlp m;
  bool have_m = false;
  ag_ddp *d = NULL;
  ag_optimizer *opt = NULL;
  ag_param_list shard = {0};
  CHECK_OK(c, r, mlp_make(&m, c->hid));
  have_m = true;
  ag_ddp_options o;
  ag_ddp_options_default(&o);
  o.bucket_bytes = c->bucket_bytes;
  o.zero_stage = c->stage;
  CHECK_OK(c, r, ag_ddp_create(c->g[r], &m.params, &o, &d));
  if (c->stage) CHECK_OK(c, r, ag_ddp_zero_params(d, NULL, &shard));
  /* One rank at a time builds its optimizer (the ranks share the CPU's
   * allocator): the category's growth meanwhile is this rank's state. */
  ag_adamw_options ao = ag_adamw_defaults();
  ao.lr = 0.02;
  ao.weight_decay = 0.1;
  for (int k = 0; k < c->size; k++) {
    CHECK_OK(c, r, ag_group_barrier(c->g[r], NULL));
    if (k != r) continue;
    int64_t before = optimizer_bytes();
    opt = ag_adamw_create(c->stage ? &shard : &m.params, &ao);
    c->opt_bytes[r] = optimizer_bytes() - before;
    CHECK_OK(c, r, opt ? AG_OK : ag_last_status());
  }
  CHECK_OK(c, r, ag_group_barrier(c->g[r], NULL));
  if (c->load) CHECK_OK(c, r, ag_ddp_zero_load(d, opt, c->load));
  int64_t rows = ROWS / c->size, off = rows * r;
  if (c->uneven) { /* 2 ranks: 16 + 8 rows; 3 ranks: 12 + 6 + 6 */
    rows = c->size == 2 ? (r == 0 ? 16 : 8) : (r == 0 ? 12 : 6);
    off = r == 0 ? 0 : ROWS - (int64_t)(c->size - r) * rows;
  }
  for (int s = c->first_step; s < c->first_step + c->steps; s++) {
    CHECK_OK(c, r, ag_ddp_set_weight(d, (double)rows / ROWS));
    CHECK_OK(c, r, backward_rows(&m, s, off, rows));
    CHECK_OK(c, r, ag_ddp_finish(d));
    if (c->clip > 0) {
      ag_tensor *norm = c->stage ? ag_ddp_clip_grad_norm(d, c->clip) : ag_clip_grad_norm(&m.params, c->clip);
      CHECK_OK(c, r, norm ? AG_OK : ag_last_status());
      if (s == c->first_step) CHECK_OK(c, r, ag_to_host(norm, &c->norm0[r], sizeof(float)));
      ag_tensor_release(norm);
    }
    CHECK_OK(c, r, ag_optimizer_step(opt));
    if (c->stage) CHECK_OK(c, r, ag_ddp_gather_params(d));
    else ag_optimizer_zero_grad(opt);
  }
  /* between steps, every rank alive: what the ranks keep for gradients */
  CHECK_OK(c, r, ag_group_barrier(c->g[r], NULL));
  if (r == 0) {
    ag_memory_stats ms;
    CHECK_OK(c, r, ag_memory_stats_get(AG_CPU, &ms));
    c->grad_bytes = ms.category_bytes[AG_MEM_GRADIENTS].current;
  }
  CHECK_OK(c, r, ag_group_barrier(c->g[r], NULL));
  if (c->save) CHECK_OK(c, r, ag_ddp_zero_save(d, opt, c->save));
  int64_t n = 0;
  c->params[r] = params_host(&m.params, &n);
  if (r == 0) c->n_params = n; /* the same on every rank */
  if (!c->params[r]) failf(c, r, "parameters to host: %s", ag_last_error());
out:
  ag_optimizer_free(opt);
  ag_params_free(&shard);
  ag_ddp_destroy(d);
  if (have_m) ag_mlp_free(&m);
}

static void run(ctx *c) {
  run_ranks(c, rank_train);
  for (int r = 1; r < c->size; r++)
    if (memcmp(c->params[r], c->params[0], (size_t)c->n_params * sizeof(float)))
      fail_msg("stage %d, %d ranks: rank %d's parameters differ from rank 0's", c->stage, c->size, r);
}

static void done(ctx *c) {
  for (int r = 0; r < c->size; r++) free(c->params[r]);
}

static int first_diff(const float *a, const float *b, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    if (memcmp(&a[i], &b[i], sizeof *a)) return (int)i;
  return -1;
}

/* ---- equality with unsharded DDP ---- */

static void equal_case(int size, int stage, double clip, bool uneven) {
  ctx base = {.size = size, .stage = 0, .hid = 13, .bucket_bytes = 256, .clip = clip, .steps = 4, .uneven = uneven};
  ctx z = base;
  z.stage = stage;
  run(&base);
  run(&z);
  assert_int_equal(base.n_params, z.n_params);
  int at = first_diff(z.params[0], base.params[0], z.n_params);
  double e = rel_err(z.params[0], base.params[0], z.n_params);
  printf("# %d ranks%s, stage %d, clip %g: %s (relative difference %.3g; first norm %.9g, unsharded %.9g)\n", size,
         uneven ? " (unequal shares)" : "", stage, clip, at < 0 ? "bitwise equal" : "differs", e, z.norm0[0],
         base.norm0[0]);
  if (clip > 0 && !(base.norm0[0] > clip)) fail_msg("the norm %g does not reach the clip %g", base.norm0[0], clip);
  if (stage == 2 && clip > 0) {
    if (!(e <= CLIP_RTOL)) fail_msg("stage 2 with clipping: relative difference %.3g > %g", e, CLIP_RTOL);
  } else if (at >= 0) {
    fail_msg("stage %d, %d ranks: parameter element %d is %.9g, unsharded %.9g", stage, size, at, z.params[0][at],
             base.params[0][at]);
  }
  done(&base);
  done(&z);
}

static void test_equal_stage1(void **state) {
  (void)state;
  equal_case(2, 1, 0, false);
  equal_case(3, 1, 0, false);
  equal_case(2, 1, 0.05, false);
  equal_case(3, 1, 0, true);
}

static void test_equal_stage2(void **state) {
  (void)state;
  equal_case(2, 2, 0, false);
  equal_case(3, 2, 0, false);
  equal_case(3, 2, 0.05, false);
  equal_case(2, 2, 0.05, true);
}

/* ---- optimizer memory per rank ---- */

static void memory_case(int size, int stage) {
  ctx base = {.size = size, .stage = 0, .hid = 256, .bucket_bytes = 64 << 10, .steps = 1};
  ctx z = base;
  z.stage = stage;
  run(&base);
  run(&z);
  int64_t full = base.opt_bytes[0], sum = 0;
  for (int r = 0; r < size; r++) {
    /* every bucket's chunk is rounded up to 16 elements, and each state
     * tensor to the allocator's 512-byte blocks */
    double ideal = (double)full / size;
    printf("# %d ranks, stage %d: rank %d optimizer bytes %lld, unsharded %lld (ratio %.4f)\n", size, stage, r,
           (long long)z.opt_bytes[r], (long long)full, (double)z.opt_bytes[r] / (double)full);
    if (!(fabs((double)z.opt_bytes[r] - ideal) <= 0.02 * ideal + 16384))
      fail_msg("rank %d: optimizer memory %lld, expected about %.0f (1/%d of %lld)", r, (long long)z.opt_bytes[r],
               ideal, size, (long long)full);
    if (base.opt_bytes[r] != full) fail_msg("unsharded ranks differ: %lld vs %lld", (long long)base.opt_bytes[r],
                                            (long long)full);
    sum += z.opt_bytes[r];
  }
  assert_true(full > 500000); /* two f32 states of 70k parameters */
  /* stage 2 keeps only the gradient shard between steps (the ranks share
   * the allocator: all ranks' gradients together, 1/N of unsharded DDP's) */
  printf("# %d ranks, stage %d: gradient bytes between steps %lld, unsharded %lld\n", size, stage,
         (long long)z.grad_bytes, (long long)base.grad_bytes);
  if (stage == 2 && !((double)z.grad_bytes <= 1.05 * (double)base.grad_bytes / size + 16384))
    fail_msg("stage 2 keeps %lld bytes of gradients between steps, unsharded %lld (expected 1/%d)",
             (long long)z.grad_bytes, (long long)base.grad_bytes, size);
  if (stage == 1 && z.grad_bytes < base.grad_bytes)
    fail_msg("stage 1 keeps less gradient memory than unsharded DDP: %lld < %lld", (long long)z.grad_bytes,
             (long long)base.grad_bytes);
  done(&base);
  done(&z);
  (void)sum;
}

static void test_memory(void **state) {
  (void)state;
  memory_case(2, 1);
  memory_case(3, 2);
}

/* ---- checkpoints with another rank count ---- */

/* One device, no sharding: `steps` steps from first_step on the full
 * batch, after loading `load` (sharded) when given. */
static float *single_run(int first_step, int steps, const char *load, bool fresh_state, int64_t *n) {
  ag_mlp m;
  assert_int_equal(mlp_make(&m, 13), AG_OK);
  ag_adamw_options ao = ag_adamw_defaults();
  ao.lr = 0.02;
  ao.weight_decay = 0.1;
  ag_optimizer *opt = ag_adamw_create(&m.params, &ao);
  assert_non_null(opt);
  if (load) {
    ag_status st = ag_zero_load_unsharded(load, &m.params, opt);
    if (st != AG_OK) fail_msg("ag_zero_load_unsharded: %s", ag_last_error());
    assert_int_equal(ag_optimizer_steps(opt), first_step);
    if (fresh_state) { /* the parameters alone: a new optimizer at the same step */
      ag_optimizer_free(opt);
      opt = ag_adamw_create(&m.params, &ao);
      assert_non_null(opt);
      ag_optimizer_set_steps(opt, first_step);
    }
  }
  for (int s = first_step; s < first_step + steps; s++) {
    assert_int_equal(backward_rows(&m, s, 0, ROWS), AG_OK);
    assert_int_equal(ag_optimizer_step(opt), AG_OK);
    ag_optimizer_zero_grad(opt);
  }
  float *h = params_host(&m.params, n);
  ag_optimizer_free(opt);
  ag_mlp_free(&m);
  return h;
}

static void test_reshard(void **state) {
  (void)state;
  const char *prefix = TMP "_ckpt";
  ctx whole = {.size = 2, .stage = 2, .hid = 13, .bucket_bytes = 256, .steps = 6};
  run(&whole);
  ctx first = whole;
  first.steps = 3;
  first.save = prefix;
  run(&first);
  done(&first);
  /* 2 -> 2: the uninterrupted run, bitwise */
  ctx same = whole;
  same.first_step = 3;
  same.steps = 3;
  same.load = prefix;
  run(&same);
  int at = first_diff(same.params[0], whole.params[0], whole.n_params);
  if (at >= 0) fail_msg("2 -> 2 ranks: element %d is %.9g, uninterrupted %.9g", at, same.params[0][at],
                        whole.params[0][at]);
  done(&same);
  /* 2 -> 3 (stage 1): the gradients are summed in other groups of rows */
  ctx three = same;
  three.size = 3;
  three.stage = 1;
  run(&three);
  double e3 = rel_err(three.params[0], whole.params[0], whole.n_params);
  /* 2 -> 1 without sharding */
  int64_t n1 = 0;
  float *one = single_run(3, 3, prefix, false, &n1);
  assert_int_equal(n1, whole.n_params);
  double e1 = rel_err(one, whole.params[0], n1);
  printf("# resumed from 2 ranks: 3 ranks %.3g, one device %.3g relative to the uninterrupted run\n", e3, e1);
  if (!(e3 <= RESHARD_RTOL)) fail_msg("2 -> 3 ranks: relative difference %.3g", e3);
  if (!(e1 <= RESHARD_RTOL)) fail_msg("2 -> 1 device: relative difference %.3g", e1);
  /* the loaded optimizer state matters: a fresh one over the
   * checkpoint's parameters ends elsewhere */
  int64_t nf = 0;
  float *fresh = single_run(3, 3, prefix, true, &nf);
  double ef = rel_err(fresh, whole.params[0], nf);
  printf("# the same with a fresh optimizer state: %.3g\n", ef);
  if (!(ef > 100 * RESHARD_RTOL)) fail_msg("a fresh optimizer state ends as close as %.3g: the test sees no state", ef);
  free(fresh);
  free(one);
  done(&three);
  done(&whole);
}

/* ---- misuse ---- */

static void test_misuse(void **state) {
  (void)state;
  ag_group *g;
  ag_device dv = AG_CPU;
  assert_int_equal(ag_group_create_inproc(1, &dv, NULL, &g), AG_OK);
  ag_mlp m;
  assert_int_equal(mlp_make(&m, 13), AG_OK);
  ag_ddp_options o;
  ag_ddp_options_default(&o);
  o.zero_stage = 3;
  ag_ddp *d = NULL;
  assert_int_equal(ag_ddp_create(g, &m.params, &o, &d), AG_ERR_INVALID);
  assert_null(d);
  o.zero_stage = 0;
  assert_int_equal(ag_ddp_create(g, &m.params, &o, &d), AG_OK);
  ag_param_list l = {0};
  assert_int_equal(ag_ddp_zero_params(d, NULL, &l), AG_ERR_STATE);
  assert_int_equal(ag_ddp_gather_params(d), AG_ERR_STATE);
  assert_null(ag_ddp_clip_grad_norm(d, 1.0));
  assert_int_equal(ag_ddp_zero_stage(d), 0);
  ag_ddp_destroy(d);
  o.zero_stage = 1;
  assert_int_equal(ag_ddp_create(g, &m.params, &o, &d), AG_OK);
  assert_int_equal(ag_ddp_zero_stage(d), 1);
  /* a list that is not d's */
  ag_param_list other = {0};
  int64_t sh = 4;
  ag_tensor *t = ag_zeros(AG_CPU, AG_F32, 1, &sh);
  ag_params_add(&other, "stranger", t);
  assert_int_equal(ag_ddp_zero_params(d, &other, &l), AG_ERR_INVALID);
  assert_non_null(strstr(ag_last_error(), "stranger"));
  /* one rank: the shard is everything */
  assert_int_equal(ag_ddp_zero_params(d, NULL, &l), AG_OK);
  assert_int_equal(ag_params_numel(&l), ag_params_numel(&m.params));
  ag_optimizer *opt = ag_adamw_create(&l, NULL);
  assert_non_null(opt);
  assert_int_equal(ag_ddp_zero_load(d, opt, TMP "_absent"), AG_ERR_IO);
  /* an optimizer over the full parameters is not d's shard */
  ag_optimizer *full = ag_adamw_create(&m.params, NULL);
  assert_int_equal(ag_ddp_zero_save(d, full, TMP "_bad"), AG_ERR_INVALID);
  /* a plain checkpoint is not a sharded one */
  assert_int_equal(ag_safetensors_save(TMP "_plain.rank0.safetensors", &m.params, 0, NULL, NULL), AG_OK);
  assert_int_equal(ag_ddp_zero_load(d, opt, TMP "_plain"), AG_ERR_CORRUPT);
  assert_non_null(strstr(ag_last_error(), "zero.world_size"));
  ag_optimizer_free(full);
  ag_optimizer_free(opt);
  ag_params_free(&l);
  ag_params_free(&other);
  ag_tensor_release(t);
  ag_ddp_destroy(d);
  ag_mlp_free(&m);
  ag_group_destroy(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_misuse),        cmocka_unit_test(test_equal_stage1), cmocka_unit_test(test_equal_stage2),
      cmocka_unit_test(test_memory),        cmocka_unit_test(test_reshard),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
