/* The cost of portable numerics (docs/numerics.md): training-step time in
 * the default mode and in the portable mode on one device, interleaved
 * (default 1T, portable 1T, default 2T, portable 2T, next case, next round),
 * median and range over rounds, thread counts set explicitly
 * (ag_set_num_threads; other devices run their own threads and the setting
 * only moves the host's). Cases: the GPT step (vocab 256, T 64, 4 layers, 4
 * heads, n_embd 128, batch 8), the medium GPT (vocab 8192, T 128, 6 layers,
 * 8 heads, n_embd 512, batch 4), the CNN of models/cnn.c (batch 64) and the
 * MLP step (784-1024-1024-10, batch 128), AdamW. A case the device refuses in
 * portable mode is reported with the error, never as a time.
 * Goal on the CPU: portable at most 1.5x the default mode's time.
 * Usage: numerics_bench [--device D] [--rounds N] [--cases gpt,gpt-medium,cnn,mlp]
 *                       [--max-threads 1|2] [--json PATH] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "anygrad/anygrad.h"

#define MAXR 32
enum { GPT, GPTM, CNN, MLP, NCASE };
static const char *k_case[NCASE] = {"gpt", "gpt-medium", "cnn", "mlp"};
static const int k_steps[NCASE] = {3, 1, 2, 3};
/* vocab, T, layers, heads, n_embd, batch */
static const int64_t k_gpt[2][6] = {{256, 64, 4, 4, 128, 8}, {8192, 128, 6, 8, 512, 4}};

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

typedef struct model {
  int kind;
  ag_device dev;
  ag_gpt gpt;
  ag_mlp mlp;
  ag_conv2d_layer c1, c2;
  ag_batch_norm2d b1, b2;
  ag_linear fc;
  ag_param_list cnn_params;
  ag_optimizer *opt;
  ag_tensor *x, *y;
  ag_generator *g;
} model;

static ag_status cnn_init(model *m) {
  ag_conv2d_params p = {{1, 1}, {1, 1}, {1, 1}, 1};
  ag_device d = m->dev;
  ag_status st = ag_conv2d_layer_init(&m->c1, d, AG_F32, 1, 16, 3, 3, &p, false, m->g);
  if (st == AG_OK) st = ag_batch_norm2d_init(&m->b1, d, AG_F32, 16, 0.1, 1e-5);
  if (st == AG_OK) st = ag_conv2d_layer_init(&m->c2, d, AG_F32, 16, 32, 3, 3, &p, false, m->g);
  if (st == AG_OK) st = ag_batch_norm2d_init(&m->b2, d, AG_F32, 32, 0.1, 1e-5);
  if (st == AG_OK) st = ag_linear_init(&m->fc, d, AG_F32, 32 * 7 * 7, 10, true, m->g);
  if (st == AG_OK) st = ag_conv2d_layer_params(&m->c1, "c1.", &m->cnn_params);
  if (st == AG_OK) st = ag_batch_norm2d_params(&m->b1, "b1.", &m->cnn_params);
  if (st == AG_OK) st = ag_conv2d_layer_params(&m->c2, "c2.", &m->cnn_params);
  if (st == AG_OK) st = ag_batch_norm2d_params(&m->b2, "b2.", &m->cnn_params);
  if (st == AG_OK) st = ag_linear_params(&m->fc, "fc.", &m->cnn_params);
  return st;
}

static ag_tensor *cnn_forward(model *m) {
  static const ag_pool2d_params pool = {{2, 2}, {2, 2}, {0, 0}, false};
  ag_tensor *a = ag_max_pool2d(
      ag_relu(ag_batch_norm2d_forward(&m->b1, ag_conv2d_layer_forward(&m->c1, m->x), true)), &pool);
  ag_tensor *b =
      ag_max_pool2d(ag_relu(ag_batch_norm2d_forward(&m->b2, ag_conv2d_layer_forward(&m->c2, a), true)), &pool);
  int64_t s[2] = {ag_tensor_shape(m->x)[0], 32 * 7 * 7};
  return ag_linear_forward(&m->fc, ag_reshape(b, 2, s));
}

/* Built in the default mode (initialisation is not timed). */
static int model_init(model *m, int kind, ag_device d) {
  memset(m, 0, sizeof *m);
  m->kind = kind;
  m->dev = d;
  m->g = ag_generator_create(1);
  ag_param_list *pl = NULL;
  if (kind == GPT || kind == GPTM) {
    const int64_t *k = k_gpt[kind == GPTM], V = k[0], T = k[1], B = k[5];
    ag_gpt_config c = {.vocab_size = V, .block_size = T, .n_layer = k[2], .n_embd = k[4], .n_head = (int)k[3]};
    if (ag_gpt_init(&m->gpt, &c, d, AG_F32, m->g) != AG_OK) return -1;
    pl = &m->gpt.params;
    int32_t *ix = malloc((size_t)(B * T) * sizeof *ix), *iy = malloc((size_t)(B * T) * sizeof *iy);
    for (int64_t i = 0; i < B * T; i++) ix[i] = (int32_t)((i * 7919) % V), iy[i] = (int32_t)((i * 104729) % V);
    const int64_t xs[2] = {B, T}, ys[1] = {B * T};
    m->x = ag_from_host(d, AG_I32, 2, xs, ix);
    m->y = ag_from_host(d, AG_I32, 1, ys, iy);
    free(ix);
    free(iy);
  } else if (kind == CNN) {
    if (cnn_init(m) != AG_OK) return -1;
    pl = &m->cnn_params;
    int64_t xs[4] = {64, 1, 28, 28}, b = 64;
    m->x = ag_randn(d, AG_F32, 4, xs, 0, 1, m->g);
    int32_t yh[64];
    for (int i = 0; i < 64; i++) yh[i] = (i * 7) % 10;
    m->y = ag_from_host(d, AG_I32, 1, &b, yh);
  } else {
    const int64_t sz[4] = {784, 1024, 1024, 10};
    if (ag_mlp_init(&m->mlp, d, AG_F32, 4, sz, AG_ACT_RELU, m->g) != AG_OK) return -1;
    pl = &m->mlp.params;
    const int64_t xs[2] = {128, 784}, b = 128;
    m->x = ag_randn(d, AG_F32, 2, xs, 0, 1, m->g);
    int32_t yh[128];
    for (int i = 0; i < 128; i++) yh[i] = i % 10;
    m->y = ag_from_host(d, AG_I32, 1, &b, yh);
  }
  ag_adamw_options o = ag_adamw_defaults();
  o.lr = 1e-4;
  m->opt = ag_adamw_create(pl, &o);
  return m->opt && m->x && m->y ? 0 : -1;
}

static ag_status step(model *m) {
  ag_scope_begin();
  ag_tensor *logits;
  if (m->kind == GPT || m->kind == GPTM) {
    const int64_t *k = k_gpt[m->kind == GPTM], s2[2] = {k[5] * k[1], k[0]};
    logits = ag_reshape(ag_gpt_forward(&m->gpt, m->x, true, m->g), 2, s2);
  } else if (m->kind == CNN) {
    logits = cnn_forward(m);
  } else {
    logits = ag_mlp_forward(&m->mlp, m->x);
  }
  ag_status st = ag_backward(ag_cross_entropy(logits, m->y, AG_REDUCTION_MEAN, -1), NULL, false);
  if (st == AG_OK) st = ag_optimizer_step(m->opt);
  ag_optimizer_zero_grad(m->opt);
  ag_scope_end();
  if (st == AG_OK) st = ag_device_synchronize(m->dev);
  return st;
}

/* ms per step in mode at threads, or -1 with err filled and *refused set
 * when the mode was refused (AG_ERR_UNSUPPORTED: a fact about the device,
 * not a failure of the run). */
static double time_steps(model *m, ag_numerics mode, int threads, int n, char *err, size_t errlen, bool *refused) {
  ag_set_num_threads(threads);
  ag_set_numerics(mode);
  double ms = -1;
  ag_status st = step(m); /* warm in this mode and thread count */
  if (st == AG_OK) {
    double t0 = now_ms();
    for (int i = 0; i < n && st == AG_OK; i++) st = step(m);
    if (st == AG_OK) ms = (now_ms() - t0) / n;
  }
  if (ms < 0) {
    snprintf(err, errlen, "%s", ag_last_error());
    *refused = st == AG_ERR_UNSUPPORTED;
  }
  ag_set_numerics(AG_NUMERICS_DEFAULT);
  return ms;
}

static int cmpd(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}
static void stats(const double *in, int n, double out[3]) {
  double v[MAXR];
  memcpy(v, in, (size_t)n * sizeof *v);
  qsort(v, (size_t)n, sizeof *v, cmpd);
  out[0] = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
  out[1] = v[0];
  out[2] = v[n - 1];
}

int main(int argc, char **argv) {
  const char *dev_s = "cpu", *json = NULL, *cases = "gpt,gpt-medium,cnn,mlp";
  int rounds = 5, max_threads = 2;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--device") && i + 1 < argc) dev_s = argv[++i];
    else if (!strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--cases") && i + 1 < argc) cases = argv[++i];
    else if (!strcmp(argv[i], "--max-threads") && i + 1 < argc) max_threads = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--json") && i + 1 < argc) json = argv[++i];
    else {
      fprintf(stderr,
              "usage: numerics_bench [--device D] [--rounds N] [--cases gpt,gpt-medium,cnn,mlp] "
              "[--max-threads 1|2] [--json PATH]\n");
      return 2;
    }
  }
  if (rounds < 1 || rounds > MAXR || max_threads < 1 || max_threads > 2) {
    fprintf(stderr, "numerics_bench: --rounds 1..%d, --max-threads 1 or 2\n", MAXR);
    return 2;
  }
  ag_device d;
  if (ag_device_parse(dev_s, &d) != AG_OK) {
    fprintf(stderr, "numerics_bench: %s\n", ag_last_error());
    return 1;
  }
  bool on[NCASE] = {false};
  for (int c = 0; c < NCASE; c++) {
    const char *p = strstr(cases, k_case[c]);
    size_t l = strlen(k_case[c]);
    /* a whole item of the comma list ("gpt" is not "gpt-medium") */
    while (p && ((p != cases && p[-1] != ',') || (p[l] && p[l] != ','))) p = strstr(p + 1, k_case[c]);
    on[c] = p != NULL;
  }
  static double t[NCASE][2][2][MAXR]; /* case, threads-1, mode */
  static char err[NCASE][2][2][256];
  static bool refused[NCASE][2][2];
  int rc = 0;
  model m[NCASE];
  bool ok[NCASE] = {false};
  for (int c = 0; c < NCASE; c++)
    if (on[c]) {
      ok[c] = model_init(&m[c], c, d) == 0;
      if (!ok[c]) fprintf(stderr, "numerics_bench: %s: %s\n", k_case[c], ag_last_error());
    }
  for (int r = 0; r < rounds; r++)
    for (int c = 0; c < NCASE; c++) {
      if (!ok[c]) continue;
      for (int th = 1; th <= max_threads; th++)
        for (int mode = 0; mode < 2; mode++) {
          double ms = err[c][th - 1][mode][0] ? -1
                                             : time_steps(&m[c], mode ? AG_NUMERICS_PORTABLE : AG_NUMERICS_DEFAULT,
                                                          th, k_steps[c], err[c][th - 1][mode],
                                                          sizeof err[c][th - 1][mode], &refused[c][th - 1][mode]);
          t[c][th - 1][mode][r] = ms;
        }
    }
  printf("numerics_bench on %s, %d rounds (interleaved default/portable), AdamW steps, threads set explicitly\n",
         dev_s, rounds);
  printf("%-11s %3s %22s %22s %8s\n", "case", "thr", "default ms (min-max)", "portable ms (min-max)", "ratio");
  FILE *jf = json ? fopen(json, "w") : NULL;
  if (jf) fprintf(jf, "{\"device\": \"%s\", \"rounds\": %d, \"cases\": [", dev_s, rounds);
  bool first = true;
  for (int c = 0; c < NCASE; c++) {
    if (!ok[c]) continue;
    for (int th = 1; th <= max_threads; th++) {
      double s[2][3];
      bool fail[2];
      for (int mode = 0; mode < 2; mode++) {
        fail[mode] = err[c][th - 1][mode][0] != 0;
        if (fail[mode] && !refused[c][th - 1][mode]) rc = 1; /* a failed step: no time, and the run fails */
        if (!fail[mode]) stats(t[c][th - 1][mode], rounds, s[mode]);
      }
      char a[2][64];
      for (int mode = 0; mode < 2; mode++)
        if (fail[mode]) snprintf(a[mode], sizeof a[mode], "%s", refused[c][th - 1][mode] ? "refused" : "error");
        else snprintf(a[mode], sizeof a[mode], "%.1f (%.1f-%.1f)", s[mode][0], s[mode][1], s[mode][2]);
      double ratio = !fail[0] && !fail[1] ? s[1][0] / s[0][0] : -1;
      printf("%-11s %3d %22s %22s ", k_case[c], th, a[0], a[1]);
      if (ratio > 0) printf("%7.2fx\n", ratio);
      else printf("%8s\n", "-");
      for (int mode = 0; mode < 2; mode++)
        if (fail[mode]) printf("  %s %s: %s\n", k_case[c], mode ? "portable" : "default", err[c][th - 1][mode]);
      if (jf) {
        fprintf(jf, "%s\n  {\"case\": \"%s\", \"threads\": %d", first ? "" : ",", k_case[c], th);
        for (int mode = 0; mode < 2; mode++) {
          const char *nm = mode ? "portable" : "default";
          if (fail[mode]) {
            fprintf(jf, ", \"%s_error\": \"", nm);
            for (const char *p = err[c][th - 1][mode]; *p; p++)
              if (*p == '"' || *p == '\\') fprintf(jf, "\\%c", *p);
              else if ((unsigned char)*p >= 32) fputc(*p, jf);
            fputc('"', jf);
          } else {
            fprintf(jf, ", \"%s_ms\": {\"median\": %.3f, \"min\": %.3f, \"max\": %.3f}", nm, s[mode][0], s[mode][1],
                    s[mode][2]);
          }
        }
        if (ratio > 0) fprintf(jf, ", \"ratio\": %.3f", ratio);
        fprintf(jf, "}");
      }
      first = false;
    }
  }
  if (jf) {
    fprintf(jf, "\n]}\n");
    fclose(jf);
  }
  return rc;
}
