/* The same ops and the same training step on several devices (default
 * cpu, vulkan:0, opencl:0), as ratios to the first, from one interleaved
 * run: rounds of A B C A B C ..., median and range of each number over the
 * rounds. Ops are tools/cmd_bench.c's (f32, large case synchronized); the
 * step is an MLP 256-512-512-10, batch 64, AdamW (forward, backward,
 * update). Prints a table and writes JSON (--json FILE, or - for stdout).
 * On Mesa's lavapipe or PoCL the "devices" are the host's cores, shared
 * with the cpu backend: the ratios compare implementations on one CPU and
 * say nothing about GPU speed.
 * Usage: backends_bench [--devices cpu,vulkan:0,opencl:0] [--rounds R]
 *                       [--numel N] [--matmul N] [--reps R] [--ops a,b]
 *                       [--steps N] [--threads N] [--json FILE|-] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "anygrad/anygrad.h"
#include "conformance.h"

#define MAXD 4
#define MAXR 16
#define MAXO 32

/* Milliseconds per training step, synchronizing only at the end; -1 on an
 * error, -2 when the device refused an op of the step (printed). */
static double step_ms(ag_device d, const char *name, int steps) {
  const int64_t sizes[4] = {256, 512, 512, 10}, batch = 64;
  ag_generator *g = ag_generator_create(1);
  ag_mlp m;
  ag_status ist = g ? ag_mlp_init(&m, d, AG_F32, 4, sizes, AG_ACT_RELU, g) : ag_last_status();
  if (ist != AG_OK) {
    fprintf(stderr, "backends_bench: step on %s: %s\n", name, ag_last_error());
    ag_generator_free(g);
    return ist == AG_ERR_UNSUPPORTED ? -2 : -1;
  }
  ag_adamw_options ao = ag_adamw_defaults();
  ag_optimizer *opt = ag_adamw_create(&m.params, &ao);
  int64_t xs[2] = {batch, sizes[0]};
  ag_tensor *x = ag_randn(d, AG_F32, 2, xs, 0, 1, g);
  int32_t yh[64];
  for (int64_t i = 0; i < batch; i++) yh[i] = (int32_t)(i % sizes[3]);
  ag_tensor *y = ag_from_host(d, AG_I32, 1, &batch, yh);
  ag_status st = opt && x && y ? AG_OK : AG_ERR_INVALID;
  double t0 = 0;
  const int warm = 3;
  for (int s = 0; s < warm + steps && st == AG_OK; s++) {
    if (s == warm) {
      st = ag_device_synchronize(d);
      t0 = ag_bench_now_ns();
    }
    ag_scope_begin();
    ag_tensor *loss = ag_cross_entropy(ag_mlp_forward(&m, x), y, AG_REDUCTION_MEAN, -1);
    st = ag_backward(loss, NULL, false);
    if (st == AG_OK) st = ag_optimizer_step(opt);
    ag_optimizer_zero_grad(opt);
    ag_scope_end();
  }
  if (st == AG_OK) st = ag_device_synchronize(d);
  double ms = (ag_bench_now_ns() - t0) * 1e-6 / steps;
  if (st != AG_OK) {
    fprintf(stderr, "backends_bench: step on %s: %s\n", name, ag_last_error());
    ms = st == AG_ERR_UNSUPPORTED ? -2 : -1;
  }
  ag_tensor_release(x);
  ag_tensor_release(y);
  ag_optimizer_free(opt);
  ag_mlp_free(&m);
  ag_generator_free(g);
  return ms;
}

static int cmpd(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* median of the positive values of v[0..n) (sorted in place), range in
 * lo/hi; -1 when none */
static double med(double *v, int n, double *lo, double *hi) {
  int k = 0;
  for (int i = 0; i < n; i++)
    if (v[i] > 0) v[k++] = v[i];
  if (!k) {
    *lo = *hi = -1;
    return -1;
  }
  qsort(v, (size_t)k, sizeof *v, cmpd);
  *lo = v[0];
  *hi = v[k - 1];
  return k % 2 ? v[k / 2] : (v[k / 2 - 1] + v[k / 2]) / 2;
}

static const char *env_or(const char *name, const char *dflt) {
  const char *v = getenv(name);
  return v && *v ? v : dflt;
}

int main(int argc, char **argv) {
  ag_bench_opts o = ag_bench_default_opts();
  o.large_numel = 1 << 20;
  o.matmul_n = 256;
  o.reps = 5;
  int rounds = 3, steps = 10;
  char devlist[256] = "cpu,vulkan:0,opencl:0";
  const char *json = NULL;
  for (int i = 1; i < argc; i++) {
    bool has = i + 1 < argc;
    if (!strcmp(argv[i], "--devices") && has) snprintf(devlist, sizeof devlist, "%s", argv[++i]);
    else if (!strcmp(argv[i], "--rounds") && has) rounds = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--numel") && has) o.large_numel = strtoll(argv[++i], NULL, 0);
    else if (!strcmp(argv[i], "--matmul") && has) o.matmul_n = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--reps") && has) o.reps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--ops") && has) o.ops = argv[++i];
    else if (!strcmp(argv[i], "--steps") && has) steps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--json") && has) json = argv[++i];
    else if (!strcmp(argv[i], "--threads") && has) {
      if (ag_set_num_threads(atoi(argv[++i])) != AG_OK) {
        fprintf(stderr, "backends_bench: %s\n", ag_last_error());
        return 2;
      }
    } else {
      fprintf(stderr,
              "usage: backends_bench [--devices cpu,vulkan:0,opencl:0] [--rounds R] [--numel N] [--matmul N]\n"
              "                      [--reps R] [--ops a,b] [--steps N] [--threads N] [--json FILE|-]\n");
      return 2;
    }
  }
  if (rounds < 1) rounds = 1;
  if (rounds > MAXR) rounds = MAXR;
  if (steps < 1 || o.reps < 1 || o.large_numel < 1 || o.matmul_n < 1) {
    fprintf(stderr, "backends_bench: --steps, --reps, --numel and --matmul must be positive\n");
    return 2;
  }
  /* the devices present, in the order given; an absent one is skipped */
  ag_device dev[MAXD];
  char dname[MAXD][32];
  int nd = 0;
  for (char *save = NULL, *t = strtok_r(devlist, ",", &save); t && nd < MAXD; t = strtok_r(NULL, ",", &save)) {
    if (ag_device_parse(t, &dev[nd]) != AG_OK) {
      fprintf(stderr, "backends_bench: skipping %s: %s\n", t, ag_last_error());
      continue;
    }
    snprintf(dname[nd], sizeof dname[nd], "%s", t);
    nd++;
  }
  if (!nd) return 1;

  /* interleaved rounds: every device's ops and step, then the next round */
  static ag_bench_row rr[MAXR][MAXD][MAXO];
  static double sm[MAXD][MAXR];
  int nrow[MAXD] = {0};
  for (int r = 0; r < rounds; r++)
    for (int k = 0; k < nd; k++) {
      int n = ag_bench_device(dev[k], &o, rr[r][k], MAXO);
      if (n < 0) {
        fprintf(stderr, "backends_bench: %s: %s\n", dname[k], ag_last_error());
        return 1;
      }
      nrow[k] = n;
      sm[k][r] = step_ms(dev[k], dname[k], steps);
    }

  /* medians; rows matched by op name to the first device's */
  static double ms[MAXD][MAXO], lo[MAXD][MAXO], hi[MAXD][MAXO];
  static ag_bench_status cst[MAXD][MAXO];
  bool s_ok[MAXD];
  ag_bench_status s_st[MAXD];
  int rc = 0;
  double col[MAXR], s_med[MAXD], s_lo[MAXD], s_hi[MAXD];
  for (int k = 0; k < nd; k++) {
    for (int i = 0; i < nrow[0]; i++) {
      int j = -1;
      for (int q = 0; q < nrow[k] && j < 0; q++)
        if (!strcmp(rr[0][k][q].op, rr[0][0][i].op)) j = q;
      /* timed only when every round timed it (ag_bench_device checked each
       * result and status); otherwise the first round's verdict */
      cst[k][i] = j < 0 ? AG_BENCH_UNSUPPORTED : AG_BENCH_OK;
      for (int r = 0; r < rounds && cst[k][i] == AG_BENCH_OK; r++)
        if (rr[r][k][j].status != AG_BENCH_OK) {
          cst[k][i] = rr[r][k][j].status;
          fprintf(stderr, "backends_bench: %s on %s: %s: %s\n", rr[r][k][j].op, dname[k],
                  ag_bench_status_name(rr[r][k][j].status), rr[r][k][j].error);
        }
      for (int r = 0; r < rounds; r++) col[r] = j < 0 ? -1 : rr[r][k][j].large_ms;
      ms[k][i] = cst[k][i] == AG_BENCH_OK ? med(col, rounds, &lo[k][i], &hi[k][i]) : -1;
      if (cst[k][i] == AG_BENCH_ERROR) rc = 1;
    }
    s_st[k] = AG_BENCH_OK; /* step_ms printed what went wrong */
    for (int r = 0; r < rounds; r++) {
      col[r] = sm[k][r];
      if (sm[k][r] == -1) s_st[k] = AG_BENCH_ERROR;
      else if (sm[k][r] < 0 && s_st[k] == AG_BENCH_OK) s_st[k] = AG_BENCH_UNSUPPORTED;
    }
    s_ok[k] = s_st[k] == AG_BENCH_OK;
    s_med[k] = s_ok[k] ? med(col, rounds, &s_lo[k], &s_hi[k]) : -1;
    if (s_st[k] == AG_BENCH_ERROR) rc = 1;
  }

  int threads = ag_get_num_threads();
  const char *lp = env_or("LP_NUM_THREADS", "unset (lavapipe: one per core)");
  const char *pocl = env_or("POCL_CPU_MAX_CU_NUM", "unset (PoCL: one per core)");
  printf("backends_bench: %d interleaved rounds of", rounds);
  for (int k = 0; k < nd; k++) printf(" %s", dname[k]);
  printf("; medians [range], ratio = time / %s's time (below 1: faster)\n", dname[0]);
  printf("threads: cpu backend %d, LP_NUM_THREADS %s, POCL_CPU_MAX_CU_NUM %s\n", threads, lp, pocl);
  printf("ops: f32, %lld elements (matmul %dx%d), %d reps; step: MLP 256-512-512-10, batch 64, AdamW, %d steps\n",
         (long long)o.large_numel, o.matmul_n, o.matmul_n, o.reps, steps);
  printf("on lavapipe and PoCL these run on the host's CPU cores: they say nothing about GPU speed\n");
  printf("%-12s", "op (ms)");
  for (int k = 0; k < nd; k++) printf(" %26s", dname[k]);
  for (int k = 1; k < nd; k++) printf(" %9s", "ratio");
  printf("\n");
  for (int i = 0; i <= nrow[0]; i++) {
    bool step = i == nrow[0];
    printf("%-12s", step ? "train step" : rr[0][0][i].op);
    for (int k = 0; k < nd; k++) {
      double m = step ? s_med[k] : ms[k][i], l = step ? s_lo[k] : lo[k][i], h = step ? s_hi[k] : hi[k][i];
      if (step ? !s_ok[k] : cst[k][i] != AG_BENCH_OK)
        printf(" %26s", ag_bench_status_name(step ? s_st[k] : cst[k][i]));
      else printf(" %9.3f [%6.3f-%7.3f]", m, l, h);
    }
    for (int k = 1; k < nd; k++) {
      double a = step ? s_med[k] : ms[k][i], b = step ? s_med[0] : ms[0][i];
      if (a > 0 && b > 0) printf(" %9.2f", a / b);
      else printf(" %9s", "-");
    }
    printf("\n");
  }

  FILE *jf = json ? (!strcmp(json, "-") ? stdout : fopen(json, "w")) : NULL;
  if (json && !jf) {
    fprintf(stderr, "backends_bench: cannot write %s\n", json);
    return 1;
  }
  if (jf) {
    fprintf(jf,
            "{\"rounds\": %d, \"numel\": %lld, \"matmul\": %d, \"steps\": %d, \"threads\": %d, "
            "\"lp_num_threads\": \"%s\", \"pocl_cpu_max_cu_num\": \"%s\", \"baseline\": \"%s\", \"rows\": [\n",
            rounds, (long long)o.large_numel, o.matmul_n, steps, threads, lp, pocl, dname[0]);
    for (int i = 0; i <= nrow[0]; i++) {
      bool step = i == nrow[0];
      fprintf(jf, "  {\"name\": \"%s\", \"devices\": [", step ? "train_step" : rr[0][0][i].op);
      for (int k = 0; k < nd; k++) {
        double m = step ? s_med[k] : ms[k][i], l = step ? s_lo[k] : lo[k][i], h = step ? s_hi[k] : hi[k][i];
        double b = step ? s_med[0] : ms[0][i];
        ag_bench_status cs = step ? s_st[k] : cst[k][i];
        if (cs != AG_BENCH_OK)
          fprintf(jf, "%s{\"device\": \"%s\", \"status\": \"%s\", \"ms\": null}", k ? ", " : "", dname[k],
                  ag_bench_status_name(cs));
        else
          fprintf(jf,
                  "%s{\"device\": \"%s\", \"status\": \"ok\", \"ms\": %.6g, \"min\": %.6g, \"max\": %.6g, "
                  "\"ratio\": %.6g}",
                  k ? ", " : "", dname[k], m, l, h, m > 0 && b > 0 ? m / b : -1.0);
      }
      fprintf(jf, "]}%s\n", i < nrow[0] ? "," : "");
    }
    fprintf(jf, "]}\n");
    if (jf != stdout) fclose(jf);
  }
  return rc;
}
