/* Mixed precision: step time and peak activation memory of a GPT training
 * step (AdamW, f32 master weights) in f32, f16 (autocast + loss scaling) and
 * bf16 (autocast) on every available backend. Activation memory is the
 * allocator's AG_MEM_ACTIVATIONS category (tensors saved for backward) at its
 * peak over one step. Step time: wall time of `steps` steps after warmup,
 * with one device sync at the end (no per-step sync, as in training).
 * Usage: amp_bench [out.json] [steps] [small|large|auto] [cpu|opencl|cuda|hip].
 * auto (default): small on CPU and OpenCL, large on CUDA and HIP. A backend
 * name runs that backend alone. Prints a table, writes JSON. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "anygrad/anygrad.h"

typedef struct model_size {
  const char *name;
  int64_t n_layer, n_embd, T, B;
  int n_head;
} model_size;

static const model_size k_small = {"small", 2, 128, 64, 16, 4};
static const model_size k_large = {"large", 6, 768, 256, 32, 12};

typedef struct result {
  char device[32];
  const char *precision;
  const char *size;
  double step_ms, loss, scale;
  int64_t act_peak, alloc_peak, skipped;
  char error[256];
} result;

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* One training step on (x, y); *loss_out keeps the loss tensor (device). */
static ag_status step(ag_gpt *m, ag_optimizer *opt, ag_grad_scaler *sc, ag_dtype prec, ag_tensor *x, ag_tensor *y,
                      double *loss_out) {
  ag_scope_begin();
  ag_status st = AG_OK;
  bool amp = prec != AG_F32;
  if (amp) st = ag_autocast_begin(prec);
  ag_tensor *logits = st == AG_OK ? ag_gpt_forward(m, x, true, NULL) : NULL;
  ag_tensor *flat = logits ? ag_reshape(logits, 2, (int64_t[]){-1, m->cfg.vocab_size}) : NULL;
  ag_tensor *loss = flat ? ag_cross_entropy(flat, y, AG_REDUCTION_MEAN, -1) : NULL;
  if (amp && st == AG_OK) ag_autocast_end();
  ag_tensor *scaled = ag_grad_scaler_scale(sc, loss);
  if (st == AG_OK) st = scaled ? ag_backward(scaled, NULL, false) : ag_last_status();
  if (st == AG_OK) st = ag_grad_scaler_step(sc, opt);
  if (st == AG_OK) st = ag_grad_scaler_update(sc);
  ag_optimizer_zero_grad(opt);
  if (st == AG_OK && loss_out) *loss_out = ag_item(loss);
  ag_scope_end();
  return st;
}

static void run(ag_device d, ag_dtype prec, const model_size *ms, int steps, result *r) {
  memset(r, 0, sizeof *r);
  ag_device_str(d, r->device, sizeof r->device);
  r->precision = ag_dtype_name(prec);
  r->size = ms->name;
  ag_gpt m;
  ag_gpt_config cfg = {.vocab_size = 256, .block_size = ms->T, .n_layer = ms->n_layer, .n_embd = ms->n_embd,
                       .n_head = ms->n_head, .dropout = 0.0};
  ag_generator *g = ag_generator_create(1);
  ag_optimizer *opt = NULL;
  ag_grad_scaler *sc = NULL;
  ag_tensor *x = NULL, *y = NULL;
  ag_status st = ag_gpt_init(&m, &cfg, d, AG_F32, g);
  bool have_model = st == AG_OK;
  if (st == AG_OK) {
    opt = ag_adamw_create(&m.params, NULL);
    ag_grad_scaler_options so = ag_grad_scaler_defaults();
    so.enabled = prec == AG_F16;
    sc = opt ? ag_grad_scaler_create(d, &so) : NULL;
    if (!sc) st = ag_last_status();
  }
  if (st == AG_OK) {
    /* a fixed batch of byte-like tokens, targets = inputs shifted */
    int64_t n = ms->B * ms->T;
    int32_t *h = malloc((size_t)(n + 1) * sizeof *h);
    if (!h) st = ag_error_set(AG_ERR_OOM, "amp_bench: out of host memory");
    for (int64_t i = 0; st == AG_OK && i <= n; i++) h[i] = (int32_t)((i * 2654435761u >> 7) % 256);
    if (st == AG_OK) {
      x = ag_from_host(d, AG_I32, 2, (int64_t[]){ms->B, ms->T}, h);
      y = ag_from_host(d, AG_I32, 1, (int64_t[]){n}, h + 1);
      if (!x || !y) st = ag_last_status();
    }
    free(h);
  }
  /* warmup: kernel compilation, allocator segments, scaler settling */
  for (int i = 0; st == AG_OK && i < 3; i++) st = step(&m, opt, sc, prec, x, y, NULL);
  if (st == AG_OK) st = ag_device_synchronize(d);
  if (st == AG_OK) st = ag_memory_reset_peak(d);
  /* the measured step for memory: peaks over exactly one step */
  if (st == AG_OK) st = step(&m, opt, sc, prec, x, y, NULL);
  ag_memory_stats mst;
  if (st == AG_OK) st = ag_memory_stats_get(d, &mst);
  if (st == AG_OK) {
    r->act_peak = mst.category_bytes[AG_MEM_ACTIVATIONS].peak;
    r->alloc_peak = mst.allocated_bytes[AG_POOL_ALL].peak;
  }
  if (st == AG_OK) st = ag_device_synchronize(d);
  double t0 = now_ms();
  for (int i = 0; st == AG_OK && i < steps; i++) st = step(&m, opt, sc, prec, x, y, i + 1 == steps ? &r->loss : NULL);
  if (st == AG_OK) st = ag_device_synchronize(d);
  r->step_ms = (now_ms() - t0) / (steps > 0 ? steps : 1);
  if (st == AG_OK) {
    r->scale = ag_grad_scaler_get_scale(sc);
    r->skipped = ag_grad_scaler_skipped_steps(sc);
  }
  if (st != AG_OK) snprintf(r->error, sizeof r->error, "%s: %s", ag_status_name(st), ag_last_error());
  ag_tensor_release(x);
  ag_tensor_release(y);
  ag_grad_scaler_free(sc);
  ag_optimizer_free(opt);
  if (have_model) ag_gpt_free(&m);
  ag_generator_free(g);
  ag_memory_empty_cache(d);
}

static void json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    if (*s == '"' || *s == '\\') fputc('\\', f);
    if ((unsigned char)*s >= 0x20) fputc(*s, f);
  }
  fputc('"', f);
}

int main(int argc, char **argv) {
  const char *out = argc > 1 ? argv[1] : "amp_bench.json";
  int steps = argc > 2 ? atoi(argv[2]) : 10;
  const char *force = argc > 3 && strcmp(argv[3], "auto") ? argv[3] : NULL;
  const char *only = argc > 4 ? argv[4] : NULL;
  if (steps < 1) steps = 1;
  const ag_backend_kind kinds[] = {AG_BACKEND_CPU, AG_BACKEND_OPENCL, AG_BACKEND_CUDA, AG_BACKEND_HIP};
  const char *const names[] = {"cpu", "opencl", "cuda", "hip"};
  const ag_dtype precs[] = {AG_F32, AG_F16, AG_BF16};
  result res[12];
  int n = 0;
  for (int k = 0; k < 4; k++) {
    const char *why = NULL;
    if (only && strcmp(only, names[k])) continue;
    if (!ag_backend_available(kinds[k], &why)) {
      fprintf(stderr, "amp_bench: %s unavailable: %s\n", names[k], why ? why : "?");
      continue;
    }
    ag_device d = {kinds[k], 0};
    bool gpu = kinds[k] == AG_BACKEND_CUDA || kinds[k] == AG_BACKEND_HIP;
    const model_size *ms = force ? (!strcmp(force, "large") ? &k_large : &k_small) : gpu ? &k_large : &k_small;
    for (int p = 0; p < 3; p++) {
      run(d, precs[p], ms, steps, &res[n]);
      fprintf(stderr, "  %s %s done\n", res[n].device, res[n].precision);
      n++;
    }
  }
  printf("%-10s %-6s %-5s %10s %14s %8s %14s %9s %8s %7s\n", "device", "model", "prec", "step ms", "act peak MiB",
         "vs f32", "alloc peak MiB", "loss", "scale", "skipped");
  for (int i = 0; i < n; i++) {
    const result *r = &res[i], *base = &res[i - i % 3];
    if (r->error[0]) {
      printf("%-10s %-6s %-5s error: %s\n", r->device, r->size, r->precision, r->error);
      continue;
    }
    printf("%-10s %-6s %-5s %10.2f %14.2f %7.2fx %14.2f %9.4f %8.0f %7lld\n", r->device, r->size, r->precision,
           r->step_ms, r->act_peak / 1048576.0, base->act_peak ? (double)r->act_peak / base->act_peak : 0,
           r->alloc_peak / 1048576.0, r->loss, r->scale, (long long)r->skipped);
  }
  FILE *f = fopen(out, "w");
  if (!f) {
    fprintf(stderr, "amp_bench: cannot write %s\n", out);
    return 1;
  }
  fprintf(f, "{\n  \"steps\": %d,\n  \"models\": {\"small\": {\"n_layer\": %lld, \"n_embd\": %lld, \"T\": %lld, "
             "\"B\": %lld}, \"large\": {\"n_layer\": %lld, \"n_embd\": %lld, \"T\": %lld, \"B\": %lld}},\n"
             "  \"results\": [\n",
          steps, (long long)k_small.n_layer, (long long)k_small.n_embd, (long long)k_small.T, (long long)k_small.B,
          (long long)k_large.n_layer, (long long)k_large.n_embd, (long long)k_large.T, (long long)k_large.B);
  for (int i = 0; i < n; i++) {
    const result *r = &res[i];
    fprintf(f, "    {\"device\": ");
    json_str(f, r->device);
    fprintf(f, ", \"model\": \"%s\", \"precision\": \"%s\"", r->size, r->precision);
    if (r->error[0]) {
      fprintf(f, ", \"error\": ");
      json_str(f, r->error);
    } else {
      fprintf(f,
              ", \"step_ms\": %.4f, \"peak_activation_bytes\": %lld, \"peak_allocated_bytes\": %lld, "
              "\"loss\": %.6f, \"scale\": %.1f, \"skipped_steps\": %lld",
              r->step_ms, (long long)r->act_peak, (long long)r->alloc_peak, isfinite(r->loss) ? r->loss : -1.0,
              r->scale, (long long)r->skipped);
    }
    fprintf(f, "}%s\n", i + 1 < n ? "," : "");
  }
  fprintf(f, "  ]\n}\n");
  fclose(f);
  printf("wrote %s\n", out);
  /* a row that failed has no time; the run as a whole fails with it */
  for (int i = 0; i < n; i++)
    if (res[i].error[0]) return 1;
  return 0;
}
