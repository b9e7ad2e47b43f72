/* Portable numerics (docs/numerics.md) across a checkpoint: a run trained
 * for some steps on one backend, saved (parameters, AdamW state, counters)
 * and resumed on another, ends with the same bits as the uninterrupted run:
 * the same losses at every step and the same final parameters. The MLP and
 * a small GPT (embedding, layer norm, attention composed from matmul and
 * softmax, gelu, cross-entropy), from the CPU to every other device present
 * and back. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "anygrad/anygrad.h"

#define STEPS 6
#define SPLIT 3
#define TMP AG_TEST_TMPDIR "/portable_resume.safetensors"

enum { MLP, GPT };

typedef struct run {
  int kind;
  ag_device dev;
  ag_mlp mlp;
  ag_gpt gpt;
  ag_param_list *params;
  ag_optimizer *opt;
  float loss[STEPS];
} run;

static void run_init(run *r, int kind, ag_device d) {
  memset(r, 0, sizeof *r);
  r->kind = kind;
  r->dev = d;
  ag_generator *g = ag_generator_create(7);
  ag_status st;
  if (kind == MLP) {
    const int64_t sz[4] = {12, 32, 32, 5};
    st = ag_mlp_init(&r->mlp, d, AG_F32, 4, sz, AG_ACT_TANH, g);
    r->params = &r->mlp.params;
  } else {
    ag_gpt_config c = {.vocab_size = 32, .block_size = 16, .n_layer = 2, .n_embd = 32, .n_head = 2};
    st = ag_gpt_init(&r->gpt, &c, d, AG_F32, g);
    r->params = &r->gpt.params;
  }
  ag_generator_free(g);
  assert_int_equal(st, AG_OK);
  ag_adamw_options o = ag_adamw_defaults();
  o.lr = 3e-3;
  r->opt = ag_adamw_create(r->params, &o);
  assert_non_null(r->opt);
}

static void run_free(run *r) {
  ag_optimizer_free(r->opt);
  if (r->kind == MLP) ag_mlp_free(&r->mlp);
  else ag_gpt_free(&r->gpt);
}

/* One AdamW step on the batch of step s (host data, the same bits on every
 * device); the loss read back. */
static void run_step(run *r, int s) {
  ag_scope_begin();
  ag_tensor *loss;
  if (r->kind == MLP) {
    float x[8 * 12];
    int32_t y[8];
    for (int i = 0; i < 8 * 12; i++) x[i] = (float)sin(0.37 * (i + 1) * (s + 1));
    for (int i = 0; i < 8; i++) y[i] = (i * 3 + s) % 5;
    const int64_t xs[2] = {8, 12}, ys[1] = {8};
    loss = ag_cross_entropy(ag_mlp_forward(&r->mlp, ag_from_host(r->dev, AG_F32, 2, xs, x)),
                            ag_from_host(r->dev, AG_I32, 1, ys, y), AG_REDUCTION_MEAN, -1);
  } else {
    int32_t x[2 * 16], y[2 * 16];
    for (int i = 0; i < 2 * 16; i++) x[i] = (i * 7 + s * 3) % 32, y[i] = (i * 11 + s) % 32;
    const int64_t xs[2] = {2, 16}, ys[1] = {2 * 16}, ls[2] = {2 * 16, 32};
    ag_tensor *logits = ag_reshape(ag_gpt_forward(&r->gpt, ag_from_host(r->dev, AG_I32, 2, xs, x), true, NULL), 2, ls);
    loss = ag_cross_entropy(logits, ag_from_host(r->dev, AG_I32, 1, ys, y), AG_REDUCTION_MEAN, -1);
  }
  if (!loss) fail_msg("step %d: %s", s, ag_last_error());
  r->loss[s] = (float)ag_item(loss);
  ag_status st = ag_backward(loss, NULL, false);
  if (st == AG_OK) st = ag_optimizer_step(r->opt);
  if (st != AG_OK) fail_msg("step %d: %s", s, ag_last_error());
  ag_optimizer_zero_grad(r->opt);
  ag_scope_end();
}

static uint64_t params_hash(const run *r) {
  uint64_t h = 14695981039346656037ull;
  for (int i = 0; i < r->params->count; i++) {
    int64_t n = ag_tensor_numel(r->params->tensors[i]);
    float *v = malloc((size_t)n * sizeof *v);
    assert_int_equal(ag_to_host(r->params->tensors[i], v, (size_t)n * sizeof *v), AG_OK);
    const unsigned char *b = (const unsigned char *)v;
    for (size_t k = 0; k < (size_t)n * sizeof *v; k++) h = (h ^ b[k]) * 1099511628211ull;
    free(v);
  }
  return h;
}

/* The checkpoint: parameters, AdamW state and counters in one file. */
static ag_param_list ckpt_list(run *r) {
  ag_param_list l = {0};
  assert_int_equal(ag_params_extend(&l, NULL, r->params), AG_OK);
  assert_int_equal(ag_optimizer_state(r->opt, &l), AG_OK);
  assert_int_equal(ag_optimizer_counters(r->opt, &l), AG_OK);
  return l;
}

static void resume_case(int kind, ag_device a, ag_device b) {
  char na[32], nb[32];
  ag_device_str(a, na, sizeof na);
  ag_device_str(b, nb, sizeof nb);
  run whole, first, second;
  run_init(&whole, kind, a);
  for (int s = 0; s < STEPS; s++) run_step(&whole, s);
  const uint64_t h_whole = params_hash(&whole);

  run_init(&first, kind, a);
  for (int s = 0; s < SPLIT; s++) run_step(&first, s);
  ag_param_list l = ckpt_list(&first);
  assert_int_equal(ag_safetensors_save(TMP, &l, 0, NULL, NULL), AG_OK);
  ag_params_free(&l);

  run_init(&second, kind, b);
  /* a step's worth of state must exist before loading into it */
  l = ckpt_list(&second);
  ag_safetensors *f;
  assert_int_equal(ag_safetensors_open(TMP, &f), AG_OK);
  assert_int_equal(ag_safetensors_load_into(f, &l), AG_OK);
  ag_safetensors_close(f);
  ag_params_free(&l);
  memcpy(second.loss, first.loss, sizeof first.loss);
  for (int s = SPLIT; s < STEPS; s++) run_step(&second, s);
  const uint64_t h_resumed = params_hash(&second);
  for (int s = 0; s < STEPS; s++)
    if (memcmp(&whole.loss[s], &second.loss[s], sizeof(float)))
      fail_msg("%s %s -> %s: step %d loss %.9g uninterrupted, %.9g resumed", kind == MLP ? "mlp" : "gpt", na, nb, s,
               whole.loss[s], second.loss[s]);
  if (h_whole != h_resumed)
    fail_msg("%s %s -> %s: final parameters differ from the uninterrupted run", kind == MLP ? "mlp" : "gpt", na, nb);
  printf("# %s: %d steps on %s, resumed on %s for %d: losses and parameters identical (hash %016llx)\n",
         kind == MLP ? "mlp" : "gpt", SPLIT, na, nb, STEPS - SPLIT, (unsigned long long)h_resumed);
  run_free(&whole);
  run_free(&first);
  run_free(&second);
  unlink(TMP);
}

/* Every device present besides the CPU; each must honour the mode. */
static int others(ag_device *out) {
  const char *names[] = {"opencl:0", "vulkan:0", "gpuemu:0"};
  int n = 0;
  for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
    ag_device d;
    ag_device_props p;
    if (ag_device_parse(names[i], &d) != AG_OK || ag_device_props_get(d, &p) != AG_OK) {
      ag_error_clear();
      printf("# %s: not present\n", names[i]);
      continue;
    }
    assert_int_equal(ag_device_numerics_check(d, AG_NUMERICS_PORTABLE), AG_OK);
    out[n++] = d;
  }
  return n;
}

static void test_resume(int kind) {
  assert_int_equal(ag_set_numerics(AG_NUMERICS_PORTABLE), AG_OK);
  ag_device o[4];
  int n = others(o);
  resume_case(kind, AG_CPU, AG_CPU);
  for (int i = 0; i < n; i++) {
    resume_case(kind, AG_CPU, o[i]);
    resume_case(kind, o[i], i + 1 < n ? o[i + 1] : AG_CPU);
  }
  ag_set_numerics(AG_NUMERICS_DEFAULT);
}

static void test_mlp(void **state) {
  (void)state;
  test_resume(MLP);
}
static void test_gpt(void **state) {
  (void)state;
  test_resume(GPT);
}

int main(void) {
  ag_set_num_threads(2);
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_mlp), cmocka_unit_test(test_gpt)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
