/* Training steps on a busy machine: the GPT step (vocab 8192, T 64, 4 layers,
 * 4 heads, n_embd 256, batch 4) and the MLP step (784-1024-1024-10, batch
 * 128), AdamW, with 1 and 2 threads, idle and beside two CPU-burning child
 * processes this program starts and stops, against PyTorch on the same
 * shapes in the same run (a persistent python process, so rounds interleave:
 * anygrad 1T, torch 1T, anygrad 2T, torch 2T, next case, next round).
 * Prints a table (median and range over rounds) and writes JSON (--json).
 * Goals: busy, 2 threads <= 1.3x the 1-thread step; idle, 2 threads < 1.
 * Also the medium GPT (T 128, 6 layers, 8 heads, n_embd 512, batch 4) with
 * --cases; --max-threads 1 times only the 1-thread step.
 * Usage: contention_bench [--rounds N] [--json PATH] [--torch PATH] [--no-busy]
 *                         [--cases gpt,mlp,gpt-medium] [--max-threads 1|2] */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "anygrad/anygrad.h"

#define MAXR 64
enum { GPT, MLP, GPTM, NCASE };
static const char *k_case[NCASE] = {"gpt", "mlp", "gpt-medium"};
static const int k_steps[NCASE] = {2, 3, 1};
/* GPT shapes: vocab, T, layers, heads, n_embd, batch (GPT-2 tied head) */
static const int64_t k_gpt[2][6] = {{8192, 64, 4, 4, 256, 4}, {8192, 128, 6, 8, 512, 4}};

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

typedef struct model {
  int kind;
  ag_gpt gpt;
  ag_mlp mlp;
  ag_optimizer *opt;
  ag_tensor *x, *y;
  ag_generator *g;
} model;

static int model_init(model *m, int kind) {
  memset(m, 0, sizeof *m);
  m->kind = kind;
  m->g = ag_generator_create(1);
  ag_param_list *pl;
  if (kind != MLP) {
    const int64_t *k = k_gpt[kind == GPTM], V = k[0], T = k[1], B = k[5];
    ag_gpt_config c = {.vocab_size = V, .block_size = T, .n_layer = k[2], .n_embd = k[4], .n_head = (int)k[3]};
    if (ag_gpt_init(&m->gpt, &c, AG_CPU, AG_F32, m->g) != AG_OK) return -1;
    pl = &m->gpt.params;
    int32_t ix[4 * 128], iy[4 * 128];
    for (int64_t i = 0; i < B * T; i++) ix[i] = (int32_t)((i * 7919) % V), iy[i] = (int32_t)((i * 104729) % V);
    const int64_t xs[2] = {B, T}, ys[1] = {B * T};
    m->x = ag_from_host(AG_CPU, AG_I32, 2, xs, ix);
    m->y = ag_from_host(AG_CPU, AG_I32, 1, ys, iy);
  } else {
    const int64_t sz[4] = {784, 1024, 1024, 10};
    if (ag_mlp_init(&m->mlp, AG_CPU, AG_F32, 4, sz, AG_ACT_RELU, m->g) != AG_OK) return -1;
    pl = &m->mlp.params;
    const int64_t xs[2] = {128, 784}, b = 128;
    m->x = ag_randn(AG_CPU, AG_F32, 2, xs, 0, 1, m->g);
    int32_t yh[128];
    for (int i = 0; i < 128; i++) yh[i] = i % 10;
    m->y = ag_from_host(AG_CPU, AG_I32, 1, &b, yh);
  }
  ag_adamw_options o = ag_adamw_defaults();
  o.lr = 1e-4;
  m->opt = ag_adamw_create(pl, &o);
  return m->opt && m->x && m->y ? 0 : -1;
}

static ag_status step(model *m) {
  ag_scope_begin();
  ag_tensor *logits;
  if (m->kind != MLP) {
    const int64_t *k = k_gpt[m->kind == GPTM], s2[2] = {k[5] * k[1], k[0]};
    logits = ag_reshape(ag_gpt_forward(&m->gpt, m->x, true, m->g), 2, s2);
  } else {
    logits = ag_mlp_forward(&m->mlp, m->x);
  }
  ag_status st = ag_backward(ag_cross_entropy(logits, m->y, AG_REDUCTION_MEAN, -1), NULL, false);
  if (st == AG_OK) st = ag_optimizer_step(m->opt);
  ag_optimizer_zero_grad(m->opt);
  ag_scope_end();
  return st;
}

static double cpu_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* ms per step; *cpus: this process's CPU time over the wall time (all its
 * threads): what the scheduler gave it, so a 2-thread run near 1.0 (or an
 * "idle" run well below 1.0) says the machine was not idle. */
/* A step that failed: its message was printed, and no time is (main
 * returns 1 once the spinning children are stopped). */
static bool g_failed;

static double step_failed(ag_status st) {
  fprintf(stderr, "contention_bench: training step: %s (%s); no time reported\n", ag_status_name(st),
          ag_last_error());
  g_failed = true;
  return -1;
}

static double time_steps(model *m, int threads, int n, double *cpus) {
  ag_status st;
  if (g_failed) return -1;
  ag_set_num_threads(threads);
  if ((st = step(m)) != AG_OK) return step_failed(st); /* warm at this thread count */
  if ((st = ag_device_synchronize(AG_CPU)) != AG_OK) return step_failed(st);
  double t0 = now_ms(), c0 = cpu_ms();
  for (int i = 0; i < n; i++)
    if ((st = step(m)) != AG_OK) return step_failed(st);
  if ((st = ag_device_synchronize(AG_CPU)) != AG_OK) return step_failed(st);
  double wall = now_ms() - t0;
  *cpus = wall > 0 ? (cpu_ms() - c0) / wall : 0;
  return wall / n;
}

/* ---- PyTorch coprocess ---- */
static FILE *g_to, *g_from;
static pid_t g_torch;

static int torch_start(const char *script) {
  int a[2], b[2];
  if (pipe(a) || pipe(b)) return -1;
  g_torch = fork();
  if (g_torch < 0) return -1;
  if (g_torch == 0) {
    dup2(a[0], 0);
    dup2(b[1], 1);
    close(a[1]);
    close(b[0]);
    const char *py = getenv("AG_PYTHON");
    execl(py && *py ? py : "/usr/bin/python3", "python3", script, (char *)NULL);
    _exit(127);
  }
  close(a[0]);
  close(b[1]);
  g_to = fdopen(a[1], "w");
  g_from = fdopen(b[0], "r");
  return 0;
}

static double torch_time(int c, int threads, int n) {
  if (!g_to) return -1;
  fprintf(g_to, "%s %d %d\n", k_case[c], threads, n);
  fflush(g_to);
  char line[64];
  if (!fgets(line, sizeof line, g_from)) return -1;
  return atof(line);
}

/* ---- burners ---- */
static pid_t g_burn[2];
static void burners(bool on) {
  for (int i = 0; i < 2; i++) {
    if (on) {
      g_burn[i] = fork();
      if (g_burn[i] == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive the benchmark */
        volatile unsigned long x = 0;
        for (;;) x++;
      }
    } else if (g_burn[i] > 0) {
      kill(g_burn[i], SIGKILL);
      waitpid(g_burn[i], NULL, 0);
      g_burn[i] = 0;
    }
  }
}

static int cmpd(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}
typedef struct { double med, lo, hi; } stat3;
static stat3 stats(const double *v, int n) {
  double s[MAXR];
  memcpy(s, v, sizeof(double) * (size_t)n);
  qsort(s, (size_t)n, sizeof *s, cmpd);
  return (stat3){n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2, s[0], s[n - 1]};
}

int main(int argc, char **argv) {
  int rounds = 5, maxth = 2;
  bool busy_too = true, on[NCASE] = {true, true, false};
  const char *json = NULL, *torch = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--json") && i + 1 < argc) json = argv[++i];
    else if (!strcmp(argv[i], "--torch") && i + 1 < argc) torch = argv[++i];
    else if (!strcmp(argv[i], "--no-busy")) busy_too = false;
    else if (!strcmp(argv[i], "--max-threads") && i + 1 < argc) maxth = atoi(argv[++i]) >= 2 ? 2 : 1;
    else if (!strcmp(argv[i], "--cases") && i + 1 < argc) {
      const char *l = argv[++i];
      for (int c = 0; c < NCASE; c++) {
        size_t n = strlen(k_case[c]);
        const char *h = strstr(l, k_case[c]);
        while (h && ((h > l && h[-1] != ',') || (h[n] && h[n] != ','))) h = strstr(h + 1, k_case[c]);
        on[c] = h != NULL;
      }
    } else {
      fprintf(stderr, "usage: contention_bench [--rounds N] [--json PATH] [--torch PATH] [--no-busy] "
                      "[--cases gpt,mlp,gpt-medium] [--max-threads 1|2]\n");
      return 2;
    }
  }
  if (rounds < 1) rounds = 1;
  if (rounds > MAXR) rounds = MAXR;
  const int def_threads = ag_get_num_threads();
  model m[NCASE];
  memset(m, 0, sizeof m);
  for (int c = 0; c < NCASE; c++)
    if (on[c] && model_init(&m[c], c)) {
      fprintf(stderr, "contention_bench: %s\n", ag_last_error());
      return 1;
    }
  if (torch && torch_start(torch)) torch = NULL;
  /* t[load][case][threads-1][impl][round] */
  static double t[2][NCASE][2][2][MAXR], u[2][NCASE][2][MAXR];
  for (int load = 0; load < (busy_too ? 2 : 1); load++) {
    burners(load == 1);
    for (int r = 0; r < rounds; r++)
      for (int c = 0; c < NCASE; c++)
        for (int th = 1; th <= maxth && on[c]; th++) {
          t[load][c][th - 1][0][r] = time_steps(&m[c], th, k_steps[c], &u[load][c][th - 1][r]);
          t[load][c][th - 1][1][r] = torch ? torch_time(c, th, k_steps[c]) : -1;
          fprintf(stderr, "round %d %s %s %dT: anygrad %.1f ms, torch %.1f ms\n", r, load ? "busy" : "idle",
                  k_case[c], th, t[load][c][th - 1][0][r], t[load][c][th - 1][1][r]);
        }
    burners(false);
  }
  ag_set_num_threads(0);
  if (g_to) fclose(g_to);
  if (g_torch > 0) waitpid(g_torch, NULL, 0);
  if (g_failed) return 1;

  printf("contention_bench: %d interleaved rounds; ms per step, median [min-max]; AdamW, f32\n", rounds);
  printf("anygrad: ag_set_num_threads(1%s) (default here %d; one blocking pool, GEMM 1 thread/call: %s)\n",
         maxth > 1 ? "|2" : "", def_threads, ag_cpu_gemm_engine());
  printf("torch: torch.set_num_threads(1%s) and openblas_set_num_threads (the same count), glibc malloc keeping "
         "freed memory (bench/torch_setup.py); busy = 2 spinning children\n",
         maxth > 1 ? "|2" : "");
  printf("GPT cases: GPT-2 tied head in both; gpt = V 8192 T 64 L 4 H 4 C 256 B 4, gpt-medium = V 8192 T 128 L 6 "
         "H 8 C 512 B 4\n");
  printf("ag cpus: anygrad's CPU time / wall time in its timed steps (median): what the scheduler gave it\n");
  printf("ag/torch: ratio of the medians; per round: median [min-max] of each round's adjacent pair\n");
  printf("%-5s %-10s %-3s %26s %26s %8s %20s %7s\n", "load", "case", "thr", "anygrad ms", "torch ms", "ag/torch",
         "per round", "ag cpus");
  FILE *f = json ? fopen(json, "w") : NULL;
  if (f) fprintf(f, "{\"rounds\": %d, \"default_threads\": %d, \"rows\": [", rounds, def_threads);
  bool first = true;
  double ratio21[2][NCASE] = {{-1, -1, -1}, {-1, -1, -1}};
  for (int load = 0; load < (busy_too ? 2 : 1); load++)
    for (int c = 0; c < NCASE; c++) {
      if (!on[c]) continue;
      for (int th = 1; th <= maxth; th++) {
        stat3 a = stats(t[load][c][th - 1][0], rounds), b = stats(t[load][c][th - 1][1], rounds);
        stat3 cu = stats(u[load][c][th - 1], rounds);
        double q[MAXR];
        for (int r = 0; r < rounds; r++)
          q[r] = t[load][c][th - 1][1][r] > 0 ? t[load][c][th - 1][0][r] / t[load][c][th - 1][1][r] : -1;
        stat3 pr = stats(q, rounds);
        printf("%-5s %-10s %-3d %9.1f [%6.1f-%6.1f] %9.1f [%6.1f-%6.1f] %8.2f %6.2f [%5.2f-%5.2f] %7.2f\n",
               load ? "busy" : "idle", k_case[c], th, a.med, a.lo, a.hi, b.med, b.lo, b.hi,
               b.med > 0 ? a.med / b.med : -1, pr.med, pr.lo, pr.hi, cu.med);
        if (f)
          fprintf(f,
                  "%s{\"load\": \"%s\", \"case\": \"%s\", \"threads\": %d, \"anygrad_ms\": [%.3f, %.3f, %.3f], "
                  "\"torch_ms\": [%.3f, %.3f, %.3f], \"ratio_per_round\": [%.3f, %.3f, %.3f], "
                  "\"anygrad_cpus\": %.3f}",
                  first ? "" : ", ", load ? "busy" : "idle", k_case[c], th, a.med, a.lo, a.hi, b.med, b.lo, b.hi,
                  pr.med, pr.lo, pr.hi, cu.med);
        first = false;
      }
      ratio21[load][c] = maxth > 1 ? stats(t[load][c][1][0], rounds).med / stats(t[load][c][0][0], rounds).med : -1;
    }
  if (maxth > 1) printf("anygrad 2-thread / 1-thread step (median): ");
  for (int load = 0; load < (busy_too ? 2 : 1) && maxth > 1; load++)
    for (int c = 0; c < NCASE; c++)
      if (on[c]) printf("%s %s %.2f (goal %s)  ", load ? "busy" : "idle", k_case[c], ratio21[load][c], load ? "<= 1.3" : "< 1");
  if (maxth > 1) printf("\n");
  if (f) {
    fprintf(f, "], \"ratio_2t_1t\": {\"idle_gpt\": %.3f, \"idle_mlp\": %.3f", ratio21[0][GPT], ratio21[0][MLP]);
    if (busy_too) fprintf(f, ", \"busy_gpt\": %.3f, \"busy_mlp\": %.3f", ratio21[1][GPT], ratio21[1][MLP]);
    fprintf(f, "}}\n");
    fclose(f);
  }
  for (int c = 0; c < NCASE; c++) {
    if (!on[c]) continue;
    ag_optimizer_free(m[c].opt);
    ag_tensor_release(m[c].x);
    ag_tensor_release(m[c].y);
    if (c != MLP) ag_gpt_free(&m[c].gpt);
    else ag_mlp_free(&m[c].mlp);
    ag_generator_free(m[c].g);
  }
  return 0;
}
