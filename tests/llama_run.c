/* Trains a tiny ag_llama for tests/llama_torch.py: writes the initial
 * weights (init.safetensors, Hugging Face names), the token batches
 * (data.safetensors, i32 "tokens" [steps, B, T + 1]), one f32 loss per
 * AdamW step (losses.txt) and the final weights (final.safetensors) into
 * OUTDIR. Also checks that ag_llama_load gives back the saved weights.
 *
 * usage: llama_run OUTDIR STEPS [tied|untied] [checkpoint] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <anygrad/anygrad.h>

enum { B = 4, T = 32, V = 256 };

static int fail(const char *what) {
  fprintf(stderr, "llama_run: %s: %s\n", what, ag_last_error());
  return 1;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: llama_run OUTDIR STEPS [tied|untied] [checkpoint]\n");
    return 2;
  }
  const char *dir = argv[1];
  int steps = atoi(argv[2]);
  bool untied = argc > 3 && !strcmp(argv[3], "untied");
  bool ck = argc > 4 && !strcmp(argv[4], "checkpoint");
  if (steps < 1) return fprintf(stderr, "llama_run: STEPS must be >= 1\n"), 2;
  ag_device cpu = AG_CPU;
  ag_generator *g = ag_generator_create(1234);
  ag_llama_config c = {.vocab_size = V, .dim = 64, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2,
                       .multiple_of = 32, .max_seq_len = T, .rope_theta = 10000.0, .norm_eps = 1e-5,
                       .untied_head = untied, .checkpoint = ck};
  ag_llama m;
  if (!g || ag_llama_init(&m, &c, cpu, AG_F32, g) != AG_OK) return fail("init");
  /* Bad configurations and inputs are errors, never crashes. */
  {
    ag_llama bad;
    ag_llama_config b1 = c, b2 = c, b3 = c;
    b1.n_heads = 3;    /* dim 64 does not split into 3 heads */
    b2.n_kv_heads = 3; /* 4 query heads do not split into 3 groups */
    b3.max_seq_len = 0;
    if (ag_llama_init(&bad, &b1, cpu, AG_F32, g) != AG_ERR_SHAPE || ag_llama_init(&bad, &b2, cpu, AG_F32, g) != AG_ERR_SHAPE ||
        ag_llama_init(&bad, &b3, cpu, AG_F32, g) != AG_ERR_SHAPE || ag_llama_init(NULL, &c, cpu, AG_F32, g) != AG_ERR_INVALID)
      return fprintf(stderr, "llama_run: a bad configuration was accepted\n"), 1;
    int64_t ls[2] = {1, T + 1};
    ag_tensor *longx = ag_zeros(cpu, AG_I32, 2, ls);
    ag_tensor *r = ag_llama_forward(&m, longx, false, NULL);
    if (r || ag_last_status() != AG_ERR_SHAPE) return fprintf(stderr, "llama_run: T > max_seq_len accepted\n"), 1;
    if (ag_llama_forward(NULL, longx, false, NULL) || ag_last_status() != AG_ERR_INVALID)
      return fprintf(stderr, "llama_run: NULL model accepted\n"), 1;
    ag_tensor_release(longx);
    ag_error_clear();
  }
  char path[4096];
  snprintf(path, sizeof path, "%s/init.safetensors", dir);
  if (ag_llama_save(&m, path) != AG_OK) return fail("save");

  /* Token batches from a fixed LCG over a small Markov chain (learnable). */
  int32_t *tok = malloc((size_t)steps * B * (T + 1) * sizeof *tok);
  if (!tok) return 1;
  uint64_t s = 42;
  for (int64_t i = 0; i < (int64_t)steps * B * (T + 1); i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    uint32_t r = (uint32_t)(s >> 33);
    tok[i] = (i % (T + 1) == 0 || r % 4 == 0) ? (int32_t)(r % V) : (int32_t)((tok[i - 1] * 7 + 3) % V);
  }
  int64_t ts[3] = {steps, B, T + 1};
  ag_tensor *all = ag_from_host(cpu, AG_I32, 3, ts, tok);
  ag_param_list dl = {0};
  snprintf(path, sizeof path, "%s/data.safetensors", dir);
  if (!all || ag_params_add(&dl, "tokens", all) != AG_OK || ag_safetensors_save(path, &dl, 0, NULL, NULL) != AG_OK)
    return fail("data");
  ag_params_free(&dl);

  ag_adamw_options o = ag_adamw_defaults();
  o.lr = 3e-3;
  o.weight_decay = 0.1;
  ag_optimizer *opt = ag_adamw_create(&m.params, &o);
  if (!opt) return fail("adamw");
  snprintf(path, sizeof path, "%s/losses.txt", dir);
  FILE *lf = fopen(path, "w");
  if (!lf) return 1;
  for (int step = 0; step < steps; step++) {
    ag_scope_begin();
    ag_tensor *b = ag_slice(all, 0, step, step + 1, 1);
    int64_t bs[2] = {B, T + 1};
    ag_tensor *bb = ag_reshape(b, 2, bs);
    ag_tensor *x = ag_slice(bb, 1, 0, T, 1), *y = ag_slice(bb, 1, 1, T + 1, 1);
    ag_tensor *logits = ag_llama_forward(&m, x, true, NULL);
    int64_t ls[2] = {B * T, V}, ys = B * T;
    ag_tensor *loss = ag_cross_entropy(ag_reshape(logits, 2, ls), ag_reshape(y, 1, &ys), AG_REDUCTION_MEAN, -100);
    if (!loss || ag_backward(loss, NULL, false) != AG_OK) return fail("step");
    fprintf(lf, "%.9g\n", ag_item(loss));
    if (ag_optimizer_step(opt) != AG_OK) return fail("optimizer");
    ag_optimizer_zero_grad(opt);
    ag_scope_end();
  }
  fclose(lf);
  snprintf(path, sizeof path, "%s/final.safetensors", dir);
  if (ag_llama_save(&m, path) != AG_OK) return fail("save");

  /* Round trip: a fresh model loads the final weights bit for bit. */
  ag_llama m2;
  if (ag_llama_init(&m2, &c, cpu, AG_F32, g) != AG_OK || ag_llama_load(&m2, path) != AG_OK) return fail("load");
  for (int i = 0; i < m.params.count; i++) {
    ag_tensor *d = ag_sub(m.params.tensors[i], m2.params.tensors[i]);
    ag_tensor *a = ag_abs(d);
    ag_tensor *mx = ag_max(a, 0, NULL, false);
    double e = ag_item(mx);
    ag_tensor_release(d);
    ag_tensor_release(a);
    ag_tensor_release(mx);
    if (e != 0.0) return fprintf(stderr, "llama_run: %s differs after load\n", m.params.names[i]), 1;
  }
  /* The other tying is refused with a clear error. */
  ag_llama m3;
  ag_llama_config c3 = c;
  c3.untied_head = !untied;
  if (ag_llama_init(&m3, &c3, cpu, AG_F32, g) != AG_OK) return fail("init");
  if (ag_llama_load(&m3, path) != AG_ERR_CORRUPT) return fprintf(stderr, "llama_run: tying mismatch loaded\n"), 1;
  long long numel = (long long)ag_params_numel(&m2.params);
  ag_llama_free(&m3);
  ag_llama_free(&m2);
  ag_optimizer_free(opt);
  ag_llama_free(&m);
  ag_tensor_release(all);
  ag_generator_free(g);
  free(tok);
  printf("llama_run: %d steps, %s%s, %lld parameters\n", steps, untied ? "untied" : "tied",
         ck ? ", checkpointed" : "", numel);
  return 0;
}
