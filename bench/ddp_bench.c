/* Data parallelism (include/anygrad/ddp.h) on an in-process group of two CPU
 * replicas, the charlm MLP made compute-heavy (hidden 1024):
 *   overlap  step time of 2 replicas reducing gradients in 256 KiB buckets
 *            from the gradient-ready hooks / step time of the same 2 threads
 *            training their halves with no communication (goal <= 1.1); also
 *            one 25 MiB bucket (reduced only after backward: no overlap).
 *            Step times are those of steps 61-120 of each 120-step run (the
 *            slower replica's): the first steps grow the allocator, fault
 *            pages in and generate GEMM code, the same for every run.
 *   balance  a pair where replica 1 is 2x slower (ag_ddp_set_slowdown: it
 *            sleeps as long again as its compute), balanced by throughput:
 *            its examples/s / (solo fast + solo slow examples/s) (goal >=
 *            0.9); and the same pair with equal shares. The solo
 *            throughputs are measured twice: as two independent jobs that
 *            run at the same time (the ratio's baseline: the two "devices"
 *            here are the two cores of one CPU, which share its caches and
 *            memory bus, so a device alone on the machine runs faster than
 *            it can while the other one works; separate devices do not
 *            share that), and each alone (ratio_vs_alone). Throughputs
 *            are those of steps 51-100 (after warm-up and first re-balances).
 * Rounds are interleaved (every configuration once per round); the median
 * and range over rounds are reported. Each replica's CPU kernels use 1
 * thread (ag_set_num_threads(1)): 2 replicas = 2 cores.
 * Usage: ddp_bench [out.json] [rounds]. Prints a table, writes JSON. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "charlm.h"
#include "anygrad/anygrad.h"

#define MAXROUNDS 32

typedef struct run {
  charlm_options o[2];
  charlm_result r[2];
  ag_status st[2];
  ag_group *g[2];
} run;

typedef struct targ {
  run *ru;
  int i;
} targ;

static void *thread_main(void *p) {
  targ *a = p;
  a->ru->st[a->i] = charlm_train(&a->ru->o[a->i], &a->ru->r[a->i]);
  if (a->ru->st[a->i] != AG_OK) fprintf(stderr, "ddp_bench: replica %d: %s\n", a->i, ag_last_error());
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
  o.steps = 20;
  o.warmup = 5;
  o.log_every = 1000;
  o.seed = 3;
  o.seed_set = true;
  return o;
}

enum { NO_GROUP, ONE_GROUP, OWN_GROUPS };

/* n threads (1 or 2) running o[i]: without a group, as replicas of one
 * in-process group, or each in a group of its own (independent jobs that
 * run at the same time). Returns false on failure. */
static bool go(run *ru, int n, int how) {
  ag_device d[2] = {AG_CPU, AG_CPU};
  bool group = how != NO_GROUP;
  for (int i = 0; i < (how == OWN_GROUPS ? n : 1) && group; i++)
    if (ag_group_create_inproc(how == OWN_GROUPS ? 1 : n, d, NULL, ru->g + i) != AG_OK) {
      for (int j = 0; j < i; j++) ag_group_destroy(ru->g[j]);
      fprintf(stderr, "ddp_bench: %s\n", ag_last_error());
      return false;
    }
  pthread_t th[2];
  targ a[2];
  for (int i = 0; i < n; i++) {
    ru->o[i].group = group ? ru->g[i] : NULL;
    a[i] = (targ){ru, i};
    pthread_create(&th[i], NULL, thread_main, &a[i]);
  }
  for (int i = 0; i < n; i++) pthread_join(th[i], NULL);
  if (group)
    for (int i = 0; i < n; i++) ag_group_destroy(ru->g[i]);
  for (int i = 0; i < n; i++)
    if (ru->st[i] != AG_OK) return false;
  return true;
}

/* ms per step over the run's last log_every steps (steady state: after the
 * first steps' allocator growth, page faults and GEMM code generation) */
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

enum { OV_DDP, OV_ONE_BUCKET, OV_NOCOMM, OV_RATIO, OV_RATIO_ONE, BAL_FAST, BAL_SLOW, BAL_FAST_CONC, BAL_SLOW_CONC,
       BAL_PAIR, BAL_EQUAL, BAL_RATIO, BAL_RATIO_ALONE, BAL_RATIO_EQUAL, BAL_SHARE, NMETRIC };
static const char *const k_names[NMETRIC] = {
    "overlap.ddp_step_ms", "overlap.one_bucket_step_ms", "overlap.no_comm_step_ms", "overlap.ratio",
    "overlap.ratio_one_bucket", "balance.solo_fast_alone_ex_s", "balance.solo_slow_alone_ex_s",
    "balance.solo_fast_ex_s", "balance.solo_slow_ex_s", "balance.pair_ex_s", "balance.equal_pair_ex_s",
    "balance.ratio", "balance.ratio_vs_alone", "balance.ratio_equal", "balance.slow_share"};

int main(int argc, char **argv) {
  const char *out = argc > 1 ? argv[1] : "ddp_bench.json";
  int rounds = argc > 2 ? atoi(argv[2]) : 5;
  if (rounds < 1 || rounds > MAXROUNDS) rounds = 5;
  ag_set_num_threads(1);
  double v[NMETRIC][MAXROUNDS];
  for (int k = 0; k < rounds; k++) {
    charlm_options b = base_options();
    b.steps = 120;
    b.log_every = 60; /* timed: steps 61-120 */
    run ru;
    /* overlap: DDP with small buckets, with one bucket, and no communication */
    memset(&ru, 0, sizeof ru);
    ru.o[0] = ru.o[1] = b;
    ru.o[0].bucket_bytes = ru.o[1].bucket_bytes = 256 << 10;
    if (!go(&ru, 2, ONE_GROUP)) return 1;
    v[OV_DDP][k] = fmax(step_ms(&ru.r[0]), step_ms(&ru.r[1]));
    memset(&ru, 0, sizeof ru);
    ru.o[0] = ru.o[1] = b;
    if (!go(&ru, 2, ONE_GROUP)) return 1;
    v[OV_ONE_BUCKET][k] = fmax(step_ms(&ru.r[0]), step_ms(&ru.r[1]));
    memset(&ru, 0, sizeof ru);
    ru.o[0] = ru.o[1] = b;
    ru.o[0].batch = ru.o[1].batch = b.batch / 2;
    ru.o[1].seed = b.seed + 1;
    if (!go(&ru, 2, NO_GROUP)) return 1;
    v[OV_NOCOMM][k] = fmax(step_ms(&ru.r[0]), step_ms(&ru.r[1]));
    v[OV_RATIO][k] = v[OV_DDP][k] / v[OV_NOCOMM][k];
    v[OV_RATIO_ONE][k] = v[OV_ONE_BUCKET][k] / v[OV_NOCOMM][k];
    /* balance: solo fast, solo 2x slow (one-rank groups), the balanced and
     * the equal pair */
    /* throughput over steps 51-100: after the warm-up (3 steps) and
     * the first re-balances (every 5 steps) */
    charlm_options bb = base_options();
    bb.steps = 100;
    bb.log_every = 50;
    /* which: 0 solo fast, 1 solo slow (each alone on the machine), 2 the
     * balanced pair, 3 the equal pair, 4 both solos at once (independent
     * jobs: each device's throughput while the other one works too) */
    for (int which = 0; which < 5; which++) {
      memset(&ru, 0, sizeof ru);
      ru.o[0] = ru.o[1] = bb;
      int n = which < 2 ? 1 : 2;
      if (which == 1) ru.o[0].slowdown = 2.0;
      if (which >= 2) ru.o[1].slowdown = 2.0;
      ru.o[0].balance = ru.o[1].balance = which != 3;
      if (!go(&ru, n, which == 4 ? OWN_GROUPS : ONE_GROUP)) return 1;
      double ex = ru.r[0].recent_examples_per_s;
      if (which == 4) {
        v[BAL_FAST_CONC][k] = ex;
        v[BAL_SLOW_CONC][k] = ru.r[1].recent_examples_per_s;
        continue;
      }
      v[which == 0 ? BAL_FAST : which == 1 ? BAL_SLOW : which == 2 ? BAL_PAIR : BAL_EQUAL][k] = ex;
      if (which == 2) v[BAL_SHARE][k] = (double)ru.r[1].ddp_rows / (double)bb.batch;
    }
    v[BAL_RATIO][k] = v[BAL_PAIR][k] / (v[BAL_FAST_CONC][k] + v[BAL_SLOW_CONC][k]);
    v[BAL_RATIO_ALONE][k] = v[BAL_PAIR][k] / (v[BAL_FAST][k] + v[BAL_SLOW][k]);
    v[BAL_RATIO_EQUAL][k] = v[BAL_EQUAL][k] / (v[BAL_FAST_CONC][k] + v[BAL_SLOW_CONC][k]);
    fprintf(stderr, "ddp_bench: round %d/%d: overlap ratio %.3f, balance ratio %.3f\n", k + 1, rounds,
            v[OV_RATIO][k], v[BAL_RATIO][k]);
  }
  stat3 s[NMETRIC];
  for (int m = 0; m < NMETRIC; m++) s[m] = summarize(v[m], rounds);
  printf("ddp_bench: 2 in-process CPU replicas, 1 kernel thread each, charlm MLP hidden 1024, global batch 1024, "
         "%d interleaved rounds\n", rounds);
  printf("%-28s %12s %12s %12s\n", "metric", "median", "min", "max");
  for (int m = 0; m < NMETRIC; m++) printf("%-28s %12.4g %12.4g %12.4g\n", k_names[m], s[m].med, s[m].lo, s[m].hi);
  printf("overlap goal <= 1.1: %s; balance goal >= 0.9: %s\n", s[OV_RATIO].med <= 1.1 ? "met" : "NOT met",
         s[BAL_RATIO].med >= 0.9 ? "met" : "NOT met");
  FILE *f = fopen(out, "w");
  if (!f) {
    fprintf(stderr, "ddp_bench: cannot write %s\n", out);
    return 1;
  }
  fprintf(f, "{\n  \"bench\": \"ddp\",\n  \"replicas\": 2,\n  \"devices\": [\"cpu\", \"cpu\"],\n"
             "  \"threads_per_replica\": 1,\n  \"rounds\": %d,\n  \"model\": \"charlm mlp hidden 1024 emb 32\",\n"
             "  \"global_batch\": 1024,\n  \"metrics\": {\n", rounds);
  for (int m = 0; m < NMETRIC; m++)
    fprintf(f, "    \"%s\": {\"median\": %.6g, \"min\": %.6g, \"max\": %.6g}%s\n", k_names[m], s[m].med, s[m].lo,
            s[m].hi, m + 1 < NMETRIC ? "," : "");
  fprintf(f, "  }\n}\n");
  fclose(f);
  return 0;
}
