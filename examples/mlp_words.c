/* A complete training loop in a page: a next-character MLP on the word list,
 * written the way a PyTorch loop reads. Build: part of the anygrad build
 * (build/bin/mlp_words); by hand, from the source tree after a build in build/:
 * `cc -std=c11 examples/mlp_words.c -Iinclude -Lbuild/lib -Wl,-rpath,"$PWD/build/lib" -lanygrad -lm -o mlp_words`
 * Usage: mlp_words [device] [steps] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <anygrad/anygrad.h>

#define CTX 3
#define V 27

static int load(const char *path, int32_t **ctx, int32_t **tgt) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  char w[64];
  int n = 0, cap = 1 << 16;
  *ctx = malloc((size_t)cap * CTX * sizeof(int32_t));
  *tgt = malloc((size_t)cap * sizeof(int32_t));
  while (*ctx && *tgt && fgets(w, sizeof w, f)) {
    size_t len = strcspn(w, "\n");
    int ok = len > 0;
    for (size_t i = 0; i < len; i++) ok &= w[i] >= 'a' && w[i] <= 'z';
    if (!ok) continue;
    int32_t win[CTX] = {0};
    for (size_t p = 0; p <= len; p++) {
      if (n == cap) {
        cap *= 2;
        *ctx = realloc(*ctx, (size_t)cap * CTX * sizeof(int32_t));
        *tgt = realloc(*tgt, (size_t)cap * sizeof(int32_t));
        if (!*ctx || !*tgt) break;
      }
      int32_t c = p < len ? w[p] - 'a' + 1 : 0;
      memcpy(*ctx + (size_t)n * CTX, win, sizeof win);
      (*tgt)[n++] = c;
      memmove(win, win + 1, (CTX - 1) * sizeof(int32_t));
      win[CTX - 1] = c;
    }
  }
  fclose(f);
  return n;
}

int main(int argc, char **argv) {
  ag_device dev = ag_device_best();
  if (argc > 1 && ag_device_parse(argv[1], &dev) != AG_OK) {
    fprintf(stderr, "%s\n", ag_last_error());
    return 1;
  }
  int steps = argc > 2 ? atoi(argv[2]) : 2000;
  int32_t *ctx, *tgt;
  int n = load("/usr/share/dict/words", &ctx, &tgt);
  if (n <= 0) {
    fprintf(stderr, "cannot read /usr/share/dict/words\n");
    return 1;
  }

  /* model: embedding -> linear -> tanh -> linear */
  ag_generator *g = ag_generator_create(42);
  ag_embedding_layer emb;
  ag_linear fc1, fc2;
  ag_param_list params = {0};
  if (ag_embedding_init(&emb, dev, AG_F32, V, 16, g) || ag_linear_init(&fc1, dev, AG_F32, CTX * 16, 128, true, g) ||
      ag_linear_init(&fc2, dev, AG_F32, 128, V, true, g)) {
    fprintf(stderr, "%s\n", ag_last_error());
    return 1;
  }
  ag_embedding_params(&emb, "emb.", &params);
  ag_linear_params(&fc1, "fc1.", &params);
  ag_linear_params(&fc2, "fc2.", &params);
  ag_sgd_options so = {.lr = 0.1, .momentum = 0.9};
  ag_optimizer *opt = ag_sgd_create(&params, &so);

  enum { B = 64 };
  int32_t bx[B * CTX], by[B];
  uint64_t s = 1;
  for (int step = 0; step < steps; step++) {
    for (int b = 0; b < B; b++) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      int i = (int)((s >> 33) % (uint64_t)n);
      memcpy(bx + b * CTX, ctx + (size_t)i * CTX, sizeof(int32_t) * CTX);
      by[b] = tgt[i];
    }
    ag_scope_begin(); /* every tensor of the step is released at its end */
    int64_t sx[2] = {B, CTX}, sy[1] = {B}, flat[2] = {B, CTX * 16};
    ag_tensor *x = ag_from_host(dev, AG_I32, 2, sx, bx), *y = ag_from_host(dev, AG_I32, 1, sy, by);
    ag_tensor *h = ag_tanh(ag_linear_forward(&fc1, ag_reshape(ag_embedding_forward(&emb, x), 2, flat)));
    ag_tensor *loss = ag_cross_entropy(ag_linear_forward(&fc2, h), y, AG_REDUCTION_MEAN, -1);
    ag_optimizer_set_lr(opt, ag_lr_cosine(step, 50, steps, 0.1, 0.01));
    if (ag_backward(loss, NULL, false) != AG_OK || ag_optimizer_step(opt) != AG_OK) {
      fprintf(stderr, "step %d: %s\n", step, ag_last_error());
      return 1;
    }
    ag_optimizer_zero_grad(opt);
    if (step % 200 == 0 || step == steps - 1) printf("step %5d  loss %.4f\n", step, ag_item(loss));
    ag_scope_end();
  }

  ag_optimizer_free(opt);
  ag_params_free(&params);
  ag_embedding_free(&emb);
  ag_linear_free(&fc1);
  ag_linear_free(&fc2);
  ag_generator_free(g);
  free(ctx);
  free(tgt);
  return 0;
}
