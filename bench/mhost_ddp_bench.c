/* Overlap of backward with bucketed gradient reduction across processes
 * (hosts): run under mpirun, one rank per host (scripts/mhost_bench.sh runs
 * it on network-namespace hosts over TCP). Every rank trains the charlm MLP
 * made compute-heavy (hidden 1024, emb 32: 0.9 MB of f32 gradients) as one
 * replica of an MPI group, global batch 256 x ranks, three ways per round
 * (rounds interleaved):
 *   bucketed    256 KiB buckets launched from the gradient-ready hooks
 *   one bucket  one 25 MiB bucket, reduced after backward (no overlap)
 *   no comm     each rank trains its 256 rows alone (no group)
 * Step time = the slowest rank's ms per step over the last 20 of 40 steps.
 * overlap = 1 - (bucketed - no comm) / (one bucket - no comm): the part of
 * the communication that backward hid (1: all of it, 0: none).
 * Each rank's kernels use 1 thread.
 * Usage: mpirun -np N mhost_ddp_bench [out.json] [rounds]: a table on rank
 * 0's stdout and one JSON object appended to out.json. */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "charlm.h"
#include "anygrad/anygrad.h"

#define MAXROUNDS 16

static charlm_options base_options(int ranks) {
  charlm_options o = charlm_defaults(CHARLM_MLP);
  o.device = AG_CPU;
  o.quiet = true;
  o.samples = 0;
  o.eval_batches = 0;
  o.out = NULL;
  o.hidden = 1024;
  o.emb = 32;
  o.batch = 256 * ranks;
  o.steps = 40;
  o.warmup = 5;
  o.log_every = 20;
  o.seed = 3;
  o.seed_set = true;
  o.balance = false;
  o.profile = false;
  return o;
}

/* ms per step over the run's last log_every steps */
static double step_ms(const charlm_result *r) {
  double per_step = r->steps_done > 0 ? r->examples_per_s * r->seconds / (double)r->steps_done : 0;
  return r->recent_examples_per_s > 0 ? per_step / r->recent_examples_per_s * 1e3 : -1;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static void stat3(const double *v, int n, double out[3]) {
  double s[MAXROUNDS];
  memcpy(s, v, (size_t)n * sizeof *s);
  qsort(s, (size_t)n, sizeof *s, cmp);
  out[0] = n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
  out[1] = s[0];
  out[2] = s[n - 1];
}

enum { BUCKETED, ONE_BUCKET, NO_COMM, NCONF };
static const char *const k_conf[NCONF] = {"bucketed_step_ms", "one_bucket_step_ms", "no_comm_step_ms"};

int main(int argc, char **argv) {
  const char *out = argc > 1 ? argv[1] : "mhost_ddp.json";
  int rounds = argc > 2 ? atoi(argv[2]) : 5;
  if (rounds < 1 || rounds > MAXROUNDS) rounds = 5;
  ag_set_num_threads(1);
  ag_group *g = NULL;
  if (ag_group_create_mpi(AG_CPU, NULL, &g) != AG_OK) {
    fprintf(stderr, "mhost_ddp_bench: %s\n", ag_last_error());
    return 1;
  }
  int rank = ag_group_rank(g), n = ag_group_size(g);
  double v[NCONF][MAXROUNDS], ov[MAXROUNDS], wait[2][MAXROUNDS];
  for (int k = 0; k < rounds; k++) {
    for (int c = 0; c < NCONF; c++) {
      charlm_options o = base_options(n);
      if (c == BUCKETED) o.bucket_bytes = 256 << 10;
      if (c == ONE_BUCKET) o.bucket_bytes = 25 << 20;
      if (c == NO_COMM) o.batch = 256;
      o.group = c == NO_COMM ? NULL : g;
      charlm_result r;
      MPI_Barrier(MPI_COMM_WORLD);
      if (charlm_train(&o, &r) != AG_OK) {
        fprintf(stderr, "mhost_ddp_bench: rank %d: %s\n", rank, ag_last_error());
        MPI_Abort(MPI_COMM_WORLD, 1);
      }
      double ms = step_ms(&r), worst = 0;
      MPI_Allreduce(&ms, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      v[c][k] = worst;
      if (c != NO_COMM) { /* host time waiting in ag_ddp_finish per step, slowest rank */
        double w = r.ddp.steps > 0 ? r.ddp.finish_wait_ms / (double)r.ddp.steps : 0, wm = 0;
        MPI_Allreduce(&w, &wm, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        wait[c][k] = wm;
      }
    }
    double comm = v[ONE_BUCKET][k] - v[NO_COMM][k];
    ov[k] = comm > 0 ? 1.0 - (v[BUCKETED][k] - v[NO_COMM][k]) / comm : NAN;
    if (rank == 0)
      printf("round %d: bucketed %.2f ms, one bucket %.2f ms, no comm %.2f ms, overlap %.2f\n", k + 1,
             v[BUCKETED][k], v[ONE_BUCKET][k], v[NO_COMM][k], ov[k]);
  }
  if (rank == 0) {
    FILE *f = fopen(out, "a");
    printf("%d ranks, %d rounds, median [range]:\n", n, rounds);
    if (f) fprintf(f, "{\"bench\": \"mhost_ddp\", \"ranks\": %d, \"rounds\": %d", n, rounds);
    for (int c = 0; c <= NCONF; c++) {
      double s[3];
      const char *name = c < NCONF ? k_conf[c] : "overlap";
      stat3(c < NCONF ? v[c] : ov, rounds, s);
      printf("  %-20s %8.3f [%.3f - %.3f]\n", name, s[0], s[1], s[2]);
      if (f) fprintf(f, ", \"%s\": {\"median\": %.4f, \"min\": %.4f, \"max\": %.4f}", name, s[0], s[1], s[2]);
    }
    for (int c = 0; c < 2; c++) {
      double s[3];
      stat3(wait[c], rounds, s);
      const char *name = c == BUCKETED ? "bucketed_finish_wait_ms" : "one_bucket_finish_wait_ms";
      printf("  %-20s %8.3f [%.3f - %.3f]\n", name, s[0], s[1], s[2]);
      if (f) fprintf(f, ", \"%s\": {\"median\": %.4f, \"min\": %.4f, \"max\": %.4f}", name, s[0], s[1], s[2]);
    }
    if (f) {
      fprintf(f, "}\n");
      fclose(f);
    }
  }
  ag_group_destroy(g);
  return 0;
}
