/* anygrad's greedy generation from a Hugging Face folder, for
 * bench/gguf_llamacpp_check.py to compare with llama.cpp on the GGUF export
 * of the same model: ag_llama_load_pretrained on the CPU, the prompt through
 * ag_llama_forward_cached in one call, then one token at a time, each the
 * argmax of the last logits (the lowest id among equal maxima).
 * Usage: gguf_greedy DIR N_NEW ID,ID,...   (the prompt's token ids)
 * Prints one JSON object: {"ids": [the N_NEW new ids], "logits": [the
 * logits each new id was chosen from, one list per step]}. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <anygrad/anygrad.h>

static int die(const char *what) {
  fprintf(stderr, "gguf_greedy: %s: %s\n", what, ag_last_error());
  return 1;
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: gguf_greedy DIR N_NEW ID,ID,...\n");
    return 2;
  }
  int64_t n_new = 0;
  if (!ag_parse_i64(argv[2], 1, 100000, &n_new)) {
    fprintf(stderr, "gguf_greedy: N_NEW must be 1..100000\n");
    return 2;
  }
  int64_t prompt[4096];
  int np = 0;
  char *list = strdup(argv[3]);
  for (char *s = strtok(list, ","); s && np < 4096; s = strtok(NULL, ","))
    if (!ag_parse_i64(s, 0, 1 << 30, &prompt[np++])) {
      fprintf(stderr, "gguf_greedy: bad id '%s'\n", s);
      return 2;
    }
  free(list);
  if (!np) return 2;
  ag_llama m;
  if (ag_llama_load_pretrained(argv[1], AG_CPU, &m, NULL) != AG_OK) return die("load");
  int64_t V = m.cfg.vocab_size;
  ag_inference_mode_begin();
  ag_llama_cache *c = ag_llama_cache_create(&m, 1, np + n_new);
  if (!c) return die("cache");
  float *logits = malloc(sizeof(float) * (size_t)V * (size_t)np);
  if (!logits) return 1;
  int64_t *ids = malloc(sizeof(int64_t) * (size_t)n_new);
  printf("{\"logits\": [");
  int64_t *in = prompt, n_in = np;
  for (int64_t step = 0; step < n_new; step++) {
    ag_scope_begin();
    int64_t shape[2] = {1, n_in};
    ag_tensor *idx = ag_from_host(AG_CPU, AG_I64, 2, shape, in);
    ag_tensor *out = ag_llama_forward_cached(&m, c, idx);
    if (!out || ag_to_host(out, logits, sizeof(float) * (size_t)(V * n_in)) != AG_OK) return die("forward");
    ag_scope_end();
    const float *last = logits + (n_in - 1) * V;
    int64_t best = 0;
    for (int64_t v = 1; v < V; v++)
      if (last[v] > last[best]) best = v;
    ids[step] = best;
    printf("%s[", step ? ", " : "");
    for (int64_t v = 0; v < V; v++) printf("%s%.9g", v ? ", " : "", (double)last[v]);
    printf("]");
    in = &ids[step];
    n_in = 1;
  }
  printf("], \"ids\": [");
  for (int64_t i = 0; i < n_new; i++) printf("%s%lld", i ? ", " : "", (long long)ids[i]);
  printf("]}\n");
  free(ids);
  free(logits);
  ag_llama_cache_free(c);
  ag_grad_mode_end();
  ag_llama_free(&m);
  return 0;
}
