/* Generation with and without the key/value cache of the Llama-style model
 * (ag_llama_forward_cached vs ag_llama_forward over the whole sequence):
 * the time of one new token at sequence length n. With the cache a token
 * costs one position's work plus attention over n keys, so the time is
 * nearly flat in n; the full recompute grows with n. The model is the text
 * task's default (dim 128, 4 layers, 4 heads, 2 key/value heads, vocabulary
 * 512), f32 on the CPU with the threads given (default 2). Each round runs
 * every length in both modes in turn (interleaved); the table gives the
 * median and range over rounds of the mean of 8 tokens.
 * Usage: llama_gen_bench [rounds (3)] [threads (2)] [lengths (64,256,1024)]
 * Prints a table, then one JSON line. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <anygrad/anygrad.h>

enum { K = 8, MAX_ROUNDS = 50, MAX_LENS = 8, V = 512 };

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static int die(const char *what) {
  fprintf(stderr, "llama_gen_bench: %s: %s\n", what, ag_last_error());
  return 1;
}

int main(int argc, char **argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 3, threads = argc > 2 ? atoi(argv[2]) : 2;
  if (rounds < 1 || rounds > MAX_ROUNDS || threads < 1) {
    fprintf(stderr, "usage: llama_gen_bench [rounds 1..%d] [threads >= 1] [lengths]\n", MAX_ROUNDS);
    return 2;
  }
  char list[256];
  snprintf(list, sizeof list, "%s", argc > 3 ? argv[3] : "64,256,1024");
  int64_t lens[MAX_LENS], maxn = 0;
  int nl = 0;
  for (char *t = strtok(list, ","); t && nl < MAX_LENS; t = strtok(NULL, ",")) {
    lens[nl] = atoll(t);
    if (lens[nl] < 1) return fprintf(stderr, "llama_gen_bench: bad length '%s'\n", t), 2;
    maxn = lens[nl] > maxn ? lens[nl] : maxn;
    nl++;
  }
  if (ag_set_num_threads(threads) != AG_OK) return die("threads");
  ag_llama_config c = {.vocab_size = V, .dim = 128, .n_layers = 4, .n_heads = 4, .n_kv_heads = 2,
                       .max_seq_len = maxn + K};
  ag_generator *g = ag_generator_create(1);
  ag_llama m;
  if (ag_llama_init(&m, &c, AG_CPU, AG_F32, g) != AG_OK) return die("init");
  int32_t *ids = malloc((size_t)(maxn + K) * sizeof *ids);
  for (int64_t i = 0; i < maxn + K; i++) ids[i] = (int32_t)((i * 7919) % V);
  ag_llama_cache *kv = ag_llama_cache_create(&m, 1, maxn + K);
  if (!kv) return die("cache");
  static double t_cache[MAX_LENS][MAX_ROUNDS], t_full[MAX_LENS][MAX_ROUNDS];
  ag_inference_mode_begin();
  for (int r = 0; r < rounds; r++)
    for (int li = 0; li < nl; li++) {
      int64_t n = lens[li];
      /* cached: the first n - 1 tokens filled (not timed), then K tokens one by one */
      ag_llama_cache_reset(kv);
      ag_scope_begin();
      if (n > 1) {
        int64_t sp[2] = {1, n - 1};
        ag_tensor *lg = ag_llama_forward_cached(&m, kv, ag_from_host(AG_CPU, AG_I32, 2, sp, ids));
        if (!lg || ag_device_synchronize(AG_CPU) != AG_OK) return die("prefill");
      }
      ag_scope_end();
      double t0 = now_s();
      for (int k = 0; k < K; k++) {
        ag_scope_begin();
        int64_t s1[2] = {1, 1};
        ag_tensor *lg = ag_llama_forward_cached(&m, kv, ag_from_host(AG_CPU, AG_I32, 2, s1, ids + n - 1 + k));
        float x;
        ag_tensor *one = lg ? ag_slice(lg, 2, 0, 1, 1) : NULL;
        if (!one || ag_to_host(one, &x, sizeof x) != AG_OK) return die("cached step");
        ag_scope_end();
      }
      t_cache[li][r] = (now_s() - t0) / K;
      /* full recompute: the whole sequence of n + k tokens for each new one */
      t0 = now_s();
      for (int k = 0; k < K; k++) {
        ag_scope_begin();
        int64_t sf[2] = {1, n + k};
        ag_tensor *lg = ag_llama_forward(&m, ag_from_host(AG_CPU, AG_I32, 2, sf, ids), false, NULL);
        float x;
        ag_tensor *one = lg ? ag_slice(lg, 1, n + k - 1, n + k, 1) : NULL;
        ag_tensor *e = one ? ag_slice(one, 2, 0, 1, 1) : NULL;
        if (!e || ag_to_host(e, &x, sizeof x) != AG_OK) return die("full step");
        ag_scope_end();
      }
      t_full[li][r] = (now_s() - t0) / K;
    }
  ag_grad_mode_end();
  printf("Llama generation, one token at length n: dim 128, 4 layers, 4 heads (2 key/value), vocab 512, f32, cpu, "
         "%d threads, %d rounds (median [min, max], ms per token)\n", threads, rounds);
  printf("%-7s %-26s %-26s %8s\n", "n", "key/value cache", "full recompute", "ratio");
  char json[4096];
  size_t jk = (size_t)snprintf(json, sizeof json,
                               "{\"bench\": \"llama_gen\", \"threads\": %d, \"rounds\": %d, \"tokens\": %d, \"rows\": [",
                               threads, rounds, K);
  for (int li = 0; li < nl; li++) {
    qsort(t_cache[li], (size_t)rounds, sizeof(double), cmp_d);
    qsort(t_full[li], (size_t)rounds, sizeof(double), cmp_d);
    double mc = 1e3 * t_cache[li][rounds / 2], mf = 1e3 * t_full[li][rounds / 2];
    char a[64], b[64];
    snprintf(a, sizeof a, "%.3g [%.3g, %.3g]", mc, 1e3 * t_cache[li][0], 1e3 * t_cache[li][rounds - 1]);
    snprintf(b, sizeof b, "%.3g [%.3g, %.3g]", mf, 1e3 * t_full[li][0], 1e3 * t_full[li][rounds - 1]);
    printf("%-7lld %-26s %-26s %7.1fx\n", (long long)lens[li], a, b, mf / mc);
    jk += (size_t)snprintf(json + jk, sizeof json - jk, "%s{\"n\": %lld, \"cached_ms\": %.4g, \"full_ms\": %.4g}",
                           li ? ", " : "", (long long)lens[li], mc, mf);
  }
  printf("%s]}\n", json);
  ag_llama_cache_free(kv);
  ag_llama_free(&m);
  ag_generator_free(g);
  free(ids);
  return 0;
}
