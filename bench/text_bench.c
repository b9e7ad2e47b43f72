/* One training step of the default `anygrad train --task text` model
 * (text_defaults(): dim 128, 4 layers, 4 heads, 2 key/value heads,
 * sequence 128, batch 8, vocabulary 512, tied embeddings, f32) on the CPU,
 * as models/text.c runs it: forward, cross-entropy, backward, gradient
 * norm clipped at 1, AdamW (lr from the cosine schedule, weight decay 0.1),
 * zero_grad. Tokens are uniform random ids (the step's time does not
 * depend on them). After --warmup untimed steps, --rounds rounds of --steps
 * steps each are timed; prints ms per step for each round and one JSON line
 * (bench/text_torch.py interleaves it with the same model in PyTorch).
 * --clock cpu times the process's CPU time (all threads) instead of the
 * wall clock: on a shared machine it leaves out the waits for a core.
 *   text_bench [--threads 2] [--steps 10] [--warmup 3] [--rounds 1] [--clock wall|cpu] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "anygrad/anygrad.h"
#include "text.h"

static bool g_cpu_time; /* --clock cpu: set once by main before any timing */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(g_cpu_time ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void die(const char *what) {
  fprintf(stderr, "text_bench: %s: %s\n", what, ag_last_error());
  exit(1);
}

static uint64_t lcg(uint64_t *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return *s >> 33;
}

int main(int argc, char **argv) {
  int threads = 2, steps = 10, warmup = 3, rounds = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    const char *a = argv[i];
    int v = atoi(argv[i + 1]);
    if (!strcmp(a, "--threads")) threads = v;
    else if (!strcmp(a, "--steps")) steps = v;
    else if (!strcmp(a, "--warmup")) warmup = v;
    else if (!strcmp(a, "--rounds")) rounds = v;
    else if (!strcmp(a, "--clock") && (!strcmp(argv[i + 1], "cpu") || !strcmp(argv[i + 1], "wall")))
      g_cpu_time = !strcmp(argv[i + 1], "cpu");
    else {
      fprintf(stderr, "text_bench: unknown option %s\n", a);
      return 2;
    }
  }
  if (argc % 2 == 0) {
    fprintf(stderr, "text_bench: %s needs a value\n", argv[argc - 1]);
    return 2;
  }
  if (steps < 1 || rounds < 1 || warmup < 0 || rounds > 1000) {
    fprintf(stderr, "text_bench: --steps and --rounds must be at least 1\n");
    return 2;
  }
  if (ag_set_num_threads(threads) != AG_OK) die("ag_set_num_threads");
  const text_options o = text_defaults();
  ag_generator *gen = ag_generator_create(o.seed);
  ag_llama m;
  ag_llama_config c = {.vocab_size = o.vocab, .dim = o.dim, .n_layers = o.layers, .n_heads = o.heads,
                       .n_kv_heads = o.kv_heads, .max_seq_len = o.seq};
  if (ag_llama_init(&m, &c, AG_CPU, AG_F32, gen) != AG_OK) die("ag_llama_init");
  ag_adamw_options ao = ag_adamw_defaults();
  ao.lr = o.lr;
  ao.weight_decay = o.weight_decay;
  ag_optimizer *opt = ag_adamw_create(&m.params, &ao);
  if (!opt) die("ag_adamw_create");
  const int64_t B = o.batch, T = o.seq, total = warmup + (int64_t)rounds * steps;
  int32_t *hx = malloc((size_t)(B * T) * sizeof *hx), *hy = malloc((size_t)(B * T) * sizeof *hy);
  if (!hx || !hy) return 1;
  uint64_t rng = o.seed;
  double ms[1000], last = 0;
  printf("text_bench: cpu f32, llama dim %d, %d layers, %d heads (%d key/value), vocabulary %d, sequence %lld, "
         "batch %lld, %lld parameters, %d threads, %d warm-up steps, %d rounds of %d steps, %s time\n",
         o.dim, o.layers, o.heads, o.kv_heads, o.vocab, (long long)T, (long long)B,
         (long long)ag_params_numel(&m.params), ag_get_num_threads(), warmup, rounds, steps,
         g_cpu_time ? "process CPU" : "wall");
  double t0 = 0;
  for (int64_t step = 0; step < total; step++) {
    if (step >= warmup && (step - warmup) % steps == 0) t0 = now_s();
    ag_optimizer_set_lr(opt, ag_lr_cosine(step, o.warmup, o.steps, o.lr, o.lr * 0.1));
    for (int64_t i = 0; i < B * T; i++) {
      hx[i] = (int32_t)(lcg(&rng) % (uint64_t)o.vocab);
      hy[i] = (int32_t)(lcg(&rng) % (uint64_t)o.vocab);
    }
    ag_scope_begin();
    int64_t sx[2] = {B, T}, sy[1] = {B * T}, s2[2] = {B * T, o.vocab};
    ag_tensor *x = ag_from_host(AG_CPU, AG_I32, 2, sx, hx), *y = ag_from_host(AG_CPU, AG_I32, 1, sy, hy);
    ag_tensor *logits = x && y ? ag_llama_forward(&m, x, true, NULL) : NULL;
    ag_tensor *flat = logits ? ag_reshape(logits, 2, s2) : NULL;
    ag_tensor *loss = flat ? ag_cross_entropy(flat, y, AG_REDUCTION_MEAN, -1) : NULL;
    if (!loss) die("forward");
    if (ag_backward(loss, NULL, false) != AG_OK) die("ag_backward");
    if (o.clip > 0 && !ag_clip_grad_norm(&m.params, o.clip)) die("ag_clip_grad_norm");
    if (ag_optimizer_step(opt) != AG_OK) die("ag_optimizer_step");
    ag_optimizer_zero_grad(opt);
    last = ag_item(loss);
    if (isnan(last) && ag_last_status() != AG_OK) die("ag_item"); /* a failed step has no time */
    ag_scope_end();
    if (step >= warmup && (step - warmup + 1) % steps == 0) {
      int r = (int)((step - warmup) / steps);
      ms[r] = (now_s() - t0) * 1e3 / steps;
      printf("round %d: %.3f ms/step\n", r + 1, ms[r]);
    }
  }
  printf("{\"bench\": \"text\", \"threads\": %d, \"steps\": %d, \"warmup\": %d, \"params\": %lld, \"last_loss\": %.6f, "
         "\"clock\": \"%s\", \"ms_per_step\": [",
         ag_get_num_threads(), steps, warmup, (long long)ag_params_numel(&m.params), last, g_cpu_time ? "cpu" : "wall");
  for (int r = 0; r < rounds; r++) printf("%s%.4f", r ? ", " : "", ms[r]);
  printf("]}\n");
  free(hx);
  free(hy);
  ag_optimizer_free(opt);
  ag_llama_free(&m);
  ag_generator_free(gen);
  return 0;
}
