/* Sharded optimizer state (ZeRO stages 1 and 2, include/anygrad/ddp.h) on
 * in-process groups of CPU replicas, the charlm MLP of ddp_bench (hidden
 * 1024, emb 32, AdamW, global batch 1024, equal shares):
 *   memory  the allocator's "optimizer" category per replica, unsharded
 *           (stage 0) and with stages 1 and 2, for 2 and 3 replicas. The
 *           replicas share the CPU's allocator, so the figure is the
 *           category's peak over the run divided by the replica count
 *           (every replica holds its optimizer through the whole run; the
 *           shards are equal up to one chunk's 16-element padding), next to
 *           one device alone (charlm_result.optimizer_bytes).
 *   time    step time of 2 replicas (the slower one's, steps 61-120 of
 *           120: after allocator growth and GEMM code generation) for
 *           stages 0, 1, 2, and each sharded stage's ratio to stage 0.
 * Rounds are interleaved (every configuration once per round: A B C A B C
 * ...); the median and range over rounds are reported. Each replica's
 * kernels use 1 thread (ag_set_num_threads(1)): 2 replicas = 2 cores.
 * Usage: zero_bench [out.json] [rounds]. Prints a table, writes JSON. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "charlm.h"
#include "anygrad/anygrad.h"

#define MAXROUNDS 32
#define MAXR 3

typedef struct run {
  charlm_options o[MAXR];
  charlm_result r[MAXR];
  ag_status st[MAXR];
  ag_group *g[MAXR];
} run;

typedef struct targ {
  run *ru;
  int i;
} targ;

static void *thread_main(void *p) {
  targ *a = p;
  a->ru->st[a->i] = charlm_train(&a->ru->o[a->i], &a->ru->r[a->i]);
  if (a->ru->st[a->i] != AG_OK) fprintf(stderr, "zero_bench: replica %d: %s\n", a->i, ag_last_error());
  return NULL;
}

static charlm_options base_options(void) {
  charlm_options o = charlm_defaults(CHARLM_MLP);
  o.device = AG_CPU;
  o.quiet = true;
  o.samples = 0;
  o.eval_batches = 0;
  o.out = NULL;
  o.hidden = 1024;
  o.emb = 32;
  o.batch = 1024;
  o.warmup = 5;
  o.seed = 3;
  o.seed_set = true;
  o.balance = false;
  return o;
}

/* n replicas of one in-process group (n 1: no group), stage `zero`; the
 * optimizer category's peak over the run in *out_peak. */
static bool go(run *ru, int n, int zero, int64_t *out_peak) {
  ag_device d[MAXR] = {AG_CPU, AG_CPU, AG_CPU};
  if (n > 1 && ag_group_create_inproc(n, d, NULL, ru->g) != AG_OK) {
    fprintf(stderr, "zero_bench: %s\n", ag_last_error());
    return false;
  }
  ag_memory_reset_peak(AG_CPU);
  pthread_t th[MAXR];
  targ a[MAXR];
  for (int i = 0; i < n; i++) {
    ru->o[i].group = n > 1 ? ru->g[i] : NULL;
    ru->o[i].zero_stage = zero;
    a[i] = (targ){ru, i};
    pthread_create(&th[i], NULL, thread_main, &a[i]);
  }
  for (int i = 0; i < n; i++) pthread_join(th[i], NULL);
  ag_memory_stats s;
  *out_peak = ag_memory_stats_get(AG_CPU, &s) == AG_OK ? s.category_bytes[AG_MEM_OPTIMIZER].peak : -1;
  if (n > 1)
    for (int i = 0; i < n; i++) ag_group_destroy(ru->g[i]);
  for (int i = 0; i < n; i++)
    if (ru->st[i] != AG_OK) return false;
  return true;
}

static double step_ms(const charlm_result *r) {
  double per_step = r->steps_done > 0 ? r->examples_per_s * r->seconds / (double)r->steps_done : 0;
  return r->recent_examples_per_s > 0 ? per_step / r->recent_examples_per_s * 1e3 : -1;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

typedef struct stat3 {
  double med, lo, hi;
} stat3;

static stat3 summarize(const double *v, int n) {
  double s[MAXROUNDS];
  memcpy(s, v, (size_t)n * sizeof *s);
  qsort(s, (size_t)n, sizeof *s, cmp);
  stat3 r = {n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]), s[0], s[n - 1]};
  return r;
}

enum { T0, T1, T2, R1, R2, NTIME };
static const char *const k_time[NTIME] = {"time.stage0_step_ms", "time.stage1_step_ms", "time.stage2_step_ms",
                                          "time.stage1_ratio", "time.stage2_ratio"};

int main(int argc, char **argv) {
  const char *out = argc > 1 ? argv[1] : "zero_bench.json";
  int rounds = argc > 2 ? atoi(argv[2]) : 5;
  if (rounds < 1 || rounds > MAXROUNDS) rounds = 5;
  ag_set_num_threads(1);
  double load0 = -1;
  FILE *la = fopen("/proc/loadavg", "r");
  if (la) {
    if (fscanf(la, "%lf", &load0) != 1) load0 = -1;
    fclose(la);
  }
  /* memory: one device alone, then 2 and 3 replicas at stages 0, 1, 2 */
  run ru;
  int64_t peak = 0, single = 0, mem[2][3];
  memset(&ru, 0, sizeof ru);
  ru.o[0] = base_options();
  ru.o[0].steps = 2;
  if (!go(&ru, 1, 0, &peak)) return 1;
  single = ru.r[0].optimizer_bytes;
  for (int n = 2; n <= 3; n++)
    for (int z = 0; z <= 2; z++) {
      memset(&ru, 0, sizeof ru);
      for (int i = 0; i < n; i++) {
        ru.o[i] = base_options();
        ru.o[i].steps = 2;
      }
      if (!go(&ru, n, z, &peak)) return 1;
      mem[n - 2][z] = peak / n;
    }
  /* time: 2 replicas, stages interleaved per round */
  double v[NTIME][MAXROUNDS];
  for (int k = 0; k < rounds; k++) {
    for (int z = 0; z <= 2; z++) {
      memset(&ru, 0, sizeof ru);
      for (int i = 0; i < 2; i++) {
        ru.o[i] = base_options();
        ru.o[i].steps = 120;
        ru.o[i].log_every = 60; /* timed: steps 61-120 */
        ru.o[i].bucket_bytes = 256 << 10;
      }
      if (!go(&ru, 2, z, &peak)) return 1;
      v[T0 + z][k] = fmax(step_ms(&ru.r[0]), step_ms(&ru.r[1]));
    }
    v[R1][k] = v[T1][k] / v[T0][k];
    v[R2][k] = v[T2][k] / v[T0][k];
    fprintf(stderr, "zero_bench: round %d/%d: stage 0 %.2f ms, stage 1 %.2f ms, stage 2 %.2f ms\n", k + 1, rounds,
            v[T0][k], v[T1][k], v[T2][k]);
  }
  double load1 = -1;
  la = fopen("/proc/loadavg", "r");
  if (la) {
    if (fscanf(la, "%lf", &load1) != 1) load1 = -1;
    fclose(la);
  }
  stat3 s[NTIME];
  for (int m = 0; m < NTIME; m++) s[m] = summarize(v[m], rounds);
  printf("zero_bench: in-process CPU replicas, 1 kernel thread each, charlm MLP hidden 1024, AdamW, global batch "
         "1024, %d interleaved rounds (load average %.1f before, %.1f after)\n", rounds, load0, load1);
  printf("optimizer bytes per replica: one device %lld\n", (long long)single);
  printf("%-10s %14s %14s %14s\n", "replicas", "stage 0", "stage 1", "stage 2");
  for (int n = 2; n <= 3; n++)
    printf("%-10d %14lld %14lld %14lld\n", n, (long long)mem[n - 2][0], (long long)mem[n - 2][1],
           (long long)mem[n - 2][2]);
  printf("%-24s %12s %12s %12s\n", "metric", "median", "min", "max");
  for (int m = 0; m < NTIME; m++) printf("%-24s %12.4g %12.4g %12.4g\n", k_time[m], s[m].med, s[m].lo, s[m].hi);
  FILE *f = fopen(out, "w");
  if (!f) {
    fprintf(stderr, "zero_bench: cannot write %s\n", out);
    return 1;
  }
  char date[32] = "?";
  time_t now = time(NULL);
  struct tm tmv;
  if (gmtime_r(&now, &tmv)) strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", &tmv);
  fprintf(f, "{\n  \"bench\": \"zero\",\n  \"devices\": \"cpu\",\n  \"threads_per_replica\": 1,\n  \"rounds\": %d,\n"
             "  \"date\": \"%s\",\n  \"load_before\": %.2f,\n  \"load_after\": %.2f,\n"
             "  \"model\": \"charlm mlp hidden 1024 emb 32, AdamW\",\n  \"global_batch\": 1024,\n",
          rounds, date, load0, load1);
  fprintf(f, "  \"memory\": {\n    \"single_device_bytes\": %lld,\n", (long long)single);
  for (int n = 2; n <= 3; n++) {
    fprintf(f, "    \"r%d\": {", n);
    for (int z = 0; z <= 2; z++)
      fprintf(f, "\"stage%d_bytes\": %lld, \"stage%d_fraction\": %.4f%s", z, (long long)mem[n - 2][z], z,
              (double)mem[n - 2][z] / (double)mem[n - 2][0], z < 2 ? ", " : "");
    fprintf(f, "}%s\n", n < 3 ? "," : "");
  }
  fprintf(f, "  },\n  \"metrics\": {\n");
  for (int m = 0; m < NTIME; m++)
    fprintf(f, "    \"%s\": {\"median\": %.6g, \"min\": %.6g, \"max\": %.6g}%s\n", k_time[m], s[m].med, s[m].lo,
            s[m].hi, m + 1 < NTIME ? "," : "");
  fprintf(f, "  }\n}\n");
  fclose(f);
  return 0;
}
