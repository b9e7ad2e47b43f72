/* Overlap efficiency of the staging pipeline: a loader whose batch costs L ms
 * of host work (a sleep: I/O-like latency) and a step that costs C ms of
 * device work (a chain of matmuls on a threaded CPU stream) followed by one
 * read of the loss, as a logging loop does. Serial time is L+C; perfect
 * overlap is max(L, C), and with W workers max(L/W, C). Reports step time /
 * max(L, C) and / max(L/W, C) for several L/C and worker counts, and the same
 * loop loading on the main thread. C is also measured inside every run by the
 * step profiler (device_ms: timing events from the batch's arrival to the end
 * of the step), so a busy machine shifts both sides of the ratio alike.
 * Usage: overlap_bench [out.json] [steps]. Prints a table, writes JSON. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "anygrad/anygrad.h"
#include "bench_util.h"
#include "anygrad/cpu.h"
#include "anygrad/loader.h"

#define ROWS 64
#define DIM 256

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void sleep_ms(double ms) {
  struct timespec ts = {(time_t)(ms / 1e3), (long)(fmod(ms, 1e3) * 1e6)};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

static void fill_host(float *x, int64_t index) {
  for (int i = 0; i < ROWS * DIM; i++) x[i] = (float)((index + i) % 7) * 0.01f;
}

typedef struct work {
  double load_ms;
} work;

static ag_status fill(void *user, int64_t epoch, int64_t index, const int64_t *samples, int64_t rows,
                      ag_loader_batch *b) {
  sleep_ms(((work *)user)->load_ms);
  fill_host(ag_loader_batch_data(b, 0), index);
  return AG_OK;
}

static ag_tensor *g_w;
static int g_chain; /* matmuls per step */

/* The step: C ms of device work on x, then one read of the loss. */
static void step(ag_tensor *x) {
  ag_scope_begin();
  ag_tensor *h = x;
  for (int k = 0; k < g_chain; k++) h = ag_matmul(h, g_w);
  ag_tensor *loss = ag_mean(h, 0, NULL, false);
  bench_result("overlap_bench", loss, "step");
  double v = ag_item(loss); /* NaN with a status on a failed read: no time for that run */
  if (isnan(v)) bench_check("overlap_bench", ag_last_status(), "step");
  ag_scope_end();
}

/* Mean device time per step measured by the profiler during the run. */
static double profiled_device_ms(ag_profiler *p, int steps) {
  bench_sync("overlap_bench", AG_CPU, "synchronize");
  double sum = 0;
  int n = 0;
  for (int i = 0; i < steps; i++) {
    ag_step_stats st;
    if (ag_profiler_step_stats(p, i, &st) == AG_OK && st.device_ms >= 0) {
      sum += st.device_ms;
      n++;
    }
  }
  return n ? sum / n : NAN;
}

static double run_pipeline(double L, int workers, int steps, double *out_dev) {
  work w = {L};
  ag_loader_config c = {0};
  c.device = AG_CPU;
  c.num_samples = (int64_t)(steps + 4) * ROWS;
  c.batch_size = ROWS;
  c.num_workers = workers;
  c.n_fields = 1;
  c.fields[0] = (ag_loader_field){.dtype = AG_F32, .ndim = 2, .shape = {0, DIM}};
  c.fill = fill;
  c.user = &w;
  ag_profiler_config pc = {.window = 1000};
  ag_profiler *p = ag_profiler_create(AG_CPU, &pc);
  c.profiler = p;
  ag_loader *l = ag_loader_create(&c);
  if (!l) {
    fprintf(stderr, "overlap_bench: %s\n", ag_last_error());
    exit(1);
  }
  ag_tensor *t[1];
  ag_loader_batch_info info;
  /* Warm-up: let the workers fill the prefetch queue, as they do during a
   * long run, and touch the allocator. */
  for (int i = 0; i < 4; i++) {
    bench_check("overlap_bench", ag_loader_next(l, t, &info), "ag_loader_next");
    step(t[0]);
    ag_tensor_release(t[0]);
  }
  double t0 = now_ms();
  for (int i = 0; i < steps; i++) {
    ag_profiler_step_begin(p);
    if (ag_loader_next(l, t, &info) != AG_OK) {
      fprintf(stderr, "overlap_bench: %s\n", ag_last_error());
      exit(1);
    }
    step(t[0]);
    ag_tensor_release(t[0]);
    ag_profiler_step_end(p);
  }
  bench_sync("overlap_bench", AG_CPU, "synchronize");
  double dt = (now_ms() - t0) / steps;
  *out_dev = profiled_device_ms(p, steps);
  ag_loader_destroy(l);
  ag_profiler_destroy(p);
  return dt;
}

/* The same loop without the pipeline: load on the main thread. */
static double run_serial(double L, int steps, double *out_dev) {
  static float x[ROWS * DIM];
  int64_t shape[2] = {ROWS, DIM};
  double t0 = 0;
  ag_profiler_config pc = {.window = 1000};
  ag_profiler *p = NULL;
  for (int i = -2; i < steps; i++) {
    if (i == 0) {
      p = ag_profiler_create(AG_CPU, &pc);
      t0 = now_ms();
    }
    if (p) ag_profiler_step_begin(p);
    sleep_ms(L);
    fill_host(x, i);
    ag_tensor *b = ag_from_host(AG_CPU, AG_F32, 2, shape, x);
    step(b);
    ag_tensor_release(b);
    if (p) ag_profiler_step_end(p);
  }
  bench_sync("overlap_bench", AG_CPU, "synchronize");
  double dt = (now_ms() - t0) / steps;
  *out_dev = profiled_device_ms(p, steps);
  ag_profiler_destroy(p);
  return dt;
}

/* Device time of one step with `chain` matmuls (no loading): the fastest of
 * several short runs, which a busy machine disturbs least. */
static double device_ms(int chain, int reps) {
  int64_t shape[2] = {ROWS, DIM};
  ag_tensor *x = ag_ones(AG_CPU, AG_F32, 2, shape);
  g_chain = chain;
  step(x);
  double best = INFINITY;
  for (int r = 0; r < 5; r++) {
    double t0 = now_ms();
    for (int i = 0; i < reps; i++) step(x);
    best = fmin(best, (now_ms() - t0) / reps);
  }
  ag_tensor_release(x);
  return best;
}

int main(int argc, char **argv) {
  const char *out = argc > 1 ? argv[1] : "overlap_bench.json";
  int steps = argc > 2 ? atoi(argv[2]) : 40;
  /* One core for the compute stream: the other runs the host side. */
  setenv("OPENBLAS_NUM_THREADS", "1", 1);
  setenv("OMP_NUM_THREADS", "1", 1);
  if (ag_cpu_set_stream_mode(AG_CPU_STREAMS_THREADED) != AG_OK) {
    fprintf(stderr, "overlap_bench: %s\n", ag_last_error());
    return 1;
  }
  int64_t ws[2] = {DIM, DIM};
  g_w = ag_full(AG_CPU, AG_F32, 2, ws, 1.0 / DIM);
  /* Calibrate the chain length giving C = 6 ms of device work. */
  const double C = 6.0;
  double unit = (device_ms(32, 4) - device_ms(0, 4)) / 32;
  int chain = (int)lround(C / (unit > 1e-3 ? unit : 1e-3));
  if (chain < 1) chain = 1;
  double c_ms = device_ms(chain, 4);
  printf("device work: %d matmuls [%d,%d]x[%d,%d] per step = %.2f ms (target %.1f)\n", chain, ROWS, DIM,
         DIM, DIM, c_ms, C);
  FILE *jf = fopen(out, "w");
  if (!jf) {
    fprintf(stderr, "overlap_bench: cannot write %s\n", out);
    return 1;
  }
  fprintf(jf, "{\"device_ms\":%.3f,\"steps\":%d,\"results\":[", c_ms, steps);
  printf("%6s %7s | %9s %7s %8s | %8s %7s %8s %9s %7s\n", "L ms", "workers", "serial ms", "C ms",
         "ser/max", "pipe ms", "C ms", "pipe/max", "pipe/ideal", "suffice");
  const double loads[] = {2.0, 6.0, 12.0, 24.0};
  const int workers[] = {1, 2, 4, 8};
  bool first = true;
  for (size_t i = 0; i < sizeof loads / sizeof loads[0]; i++) {
    double L = loads[i];
    double c_ser;
    double ser = run_serial(L, steps, &c_ser);
    c_ser = device_ms(chain, 4); /* the serial loop has no arrival event to split L from C */
    for (size_t k = 0; k < sizeof workers / sizeof workers[0]; k++) {
      int W = workers[k];
      double c_run;
      double pipe = run_pipeline(L, W, steps, &c_run);
      double best = fmax(L, c_run), ideal = fmax(L / W, c_run);
      /* W workers fill W batches per L ms: they keep up when L/W <= C. */
      bool suffice = L / W <= c_run;
      printf("%6.1f %7d | %9.2f %7.2f %8.3f | %8.2f %7.2f %8.3f %9.3f %7s\n", L, W, ser, c_ser,
             ser / fmax(L, c_ser), pipe, c_run, pipe / best, pipe / ideal, suffice ? "yes" : "no");
      fprintf(jf,
              "%s\n{\"load_ms\":%.1f,\"workers\":%d,\"serial_ms\":%.3f,\"serial_device_ms\":%.3f,"
              "\"serial_ratio\":%.4f,\"pipeline_ms\":%.3f,\"pipeline_device_ms\":%.3f,\"pipeline_ratio\":%.4f,"
              "\"pipeline_ideal_ratio\":%.4f,\"workers_suffice\":%s}",
              first ? "" : ",", L, W, ser, c_ser, ser / fmax(L, c_ser), pipe, c_run, pipe / best, pipe / ideal,
              suffice ? "true" : "false");
      first = false;
    }
  }
  fprintf(jf, "\n]}\n");
  fclose(jf);
  ag_tensor_release(g_w);
  printf("wrote %s\n", out);
  return 0;
}
