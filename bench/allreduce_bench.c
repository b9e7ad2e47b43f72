/* All-reduce bus bandwidth of anygrad's groups.
 *   mpirun -np N allreduce_bench [--json F]   anygrad's MPI group against raw
 *       MPI_Allreduce on the same buffers, interleaved rounds (A B A B ...),
 *       median and range per size, 4 KiB to 64 MiB of f32 (--max-bytes),
 *       about --traffic bytes (64 MiB) per timed round, --rounds (7).
 *   allreduce_bench --inproc N [--device D]   the in-process group, N threads.
 *   allreduce_bench --nccl                    a 1-rank NCCL group on cuda:0:
 *       correctness of the result and the bandwidth line (scripts/gpu_check.sh).
 * Bus bandwidth = bytes * 2 (n-1) / n / time, the all-reduce convention
 * (nccl-tests), so it compares across rank counts; a 1-rank group reports
 * algorithm bandwidth (bytes / time). */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "anygrad/anygrad.h"
#ifdef AG_BENCH_MPI
#include <mpi.h>
#endif

#define MAX_ROUNDS 7
static int g_rounds = MAX_ROUNDS;                 /* --rounds */
static size_t g_max_bytes = (size_t)64 << 20;     /* --max-bytes */
static size_t g_traffic = (size_t)64 << 20;       /* --traffic: bytes per timed round */
#define MAX_SIZES 16

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  double s[MAX_ROUNDS];
  memcpy(s, v, sizeof(double) * (size_t)n);
  qsort(s, (size_t)n, sizeof(double), cmp_d);
  return s[n / 2];
}

static double minv(const double *v, int n) {
  double m = v[0];
  for (int i = 1; i < n; i++) m = v[i] < m ? v[i] : m;
  return m;
}
static double maxv(const double *v, int n) {
  double m = v[0];
  for (int i = 1; i < n; i++) m = v[i] > m ? v[i] : m;
  return m;
}

/* iterations per timed round: about --traffic bytes (64 MiB), at least 3 */
static int iters_for(size_t bytes) {
  size_t it = g_traffic / bytes;
  return it < 3 ? 3 : it > 200 ? 200 : (int)it;
}

static double busbw(size_t bytes, int n, double secs) {
  double f = n > 1 ? 2.0 * (n - 1) / n : 1.0;
  return bytes * f / secs / 1e9;
}

static void die(const char *what) {
  fprintf(stderr, "allreduce_bench: %s: %s\n", what, ag_last_error());
  exit(1);
}

/* ---- in-process ---- */

typedef struct ip_arg {
  ag_group *g;
  ag_device dev;
  size_t n;
  int iters;
  double secs;
  ag_status st;
} ip_arg;

static void *ip_rank(void *p) {
  ip_arg *a = p;
  int64_t shape[1] = {(int64_t)a->n};
  ag_tensor *t = ag_ones(a->dev, AG_F32, 1, shape);
  a->st = ag_all_reduce(a->g, t, AG_DIST_AVG, NULL); /* warm-up */
  if (a->st == AG_OK) a->st = ag_group_barrier(a->g, NULL);
  double t0 = now();
  for (int i = 0; i < a->iters && a->st == AG_OK; i++) a->st = ag_all_reduce(a->g, t, AG_DIST_AVG, NULL);
  if (a->st == AG_OK) a->st = ag_device_synchronize(a->dev);
  a->secs = (now() - t0) / a->iters;
  ag_tensor_release(t);
  return NULL;
}

static int run_inproc(int n, ag_device dev, FILE *json) {
  ag_device devs[16];
  for (int i = 0; i < n; i++) devs[i] = dev;
  ag_group *g[16];
  if (ag_group_create_inproc(n, devs, NULL, g) != AG_OK) die("ag_group_create_inproc");
  char dl[32];
  ag_device_str(dev, dl, sizeof dl);
  printf("in-process group: %d ranks on %s, f32 AVG all-reduce, %d rounds\n", n, dl, g_rounds);
  printf("%10s %8s %14s %20s\n", "bytes", "iters", "busbw GB/s", "range");
  for (size_t bytes = 4096; bytes <= g_max_bytes; bytes *= 4) {
    double bw[MAX_ROUNDS] = {0};
    int iters = iters_for(bytes);
    for (int r = 0; r < g_rounds; r++) {
      pthread_t th[16];
      ip_arg a[16];
      for (int i = 0; i < n; i++) {
        a[i] = (ip_arg){g[i], dev, bytes / 4, iters, 0, AG_OK};
        pthread_create(&th[i], NULL, ip_rank, &a[i]);
      }
      double worst = 0;
      for (int i = 0; i < n; i++) {
        pthread_join(th[i], NULL);
        if (a[i].st != AG_OK) die("all_reduce");
        worst = a[i].secs > worst ? a[i].secs : worst;
      }
      bw[r] = busbw(bytes, n, worst);
    }
    printf("%10zu %8d %14.2f %9.2f - %-9.2f\n", bytes, iters, median(bw, g_rounds), minv(bw, g_rounds),
           maxv(bw, g_rounds));
    if (json)
      fprintf(json,
              "{\"bench\": \"allreduce_inproc\", \"ranks\": %d, \"device\": \"%s\", \"bytes\": %zu, "
              "\"busbw_gbps\": %.4f, \"min\": %.4f, \"max\": %.4f}\n",
              n, dl, bytes, median(bw, g_rounds), minv(bw, g_rounds), maxv(bw, g_rounds));
  }
  for (int i = 0; i < n; i++) ag_group_destroy(g[i]);
  return 0;
}

/* ---- NCCL, one rank (gpu_check) ---- */

static int run_nccl(FILE *json) {
  char why[512];
  if (!ag_dist_available(AG_DIST_NCCL, why, sizeof why)) {
    printf("nccl unavailable: %s\n", why);
    return 2;
  }
  printf("nccl: %s\n", why);
  ag_device dev = {AG_BACKEND_CUDA, 0};
  ag_group *boot, *g;
  if (ag_group_create_inproc(1, &dev, NULL, &boot) != AG_OK) die("bootstrap group");
  if (ag_group_create_nccl(boot, dev, NULL, &g) != AG_OK) die("ag_group_create_nccl");
  ag_group_destroy(boot);
  /* correctness: a 1-rank sum is the identity (odd size, values 0..n-1) */
  enum { N = 1000003 };
  ag_tensor *x = ag_arange(dev, AG_F32, 0, N, 1);
  if (!x || ag_all_reduce(g, x, AG_DIST_SUM, NULL) != AG_OK) die("nccl all_reduce");
  float *h = malloc(sizeof(float) * N);
  if (ag_to_host(x, h, sizeof(float) * N) != AG_OK) die("to_host");
  int ok = 1;
  for (int i = 0; i < N; i++) ok &= h[i] == (float)i;
  printf("nccl 1-rank all_reduce check: %s\n", ok ? "ok" : "WRONG");
  free(h);
  ag_tensor_release(x);
  size_t bytes = (size_t)64 << 20;
  int64_t sh[1] = {(int64_t)(bytes / 4)};
  ag_tensor *t = ag_ones(dev, AG_F32, 1, sh);
  if (ag_all_reduce(g, t, AG_DIST_SUM, NULL) != AG_OK) die("warm-up");
  if (ag_device_synchronize(dev) != AG_OK) die("synchronize");
  int iters = 20;
  double t0 = now();
  for (int i = 0; i < iters; i++)
    if (ag_all_reduce(g, t, AG_DIST_SUM, NULL) != AG_OK) die("nccl all_reduce");
  if (ag_device_synchronize(dev) != AG_OK) die("synchronize");
  double secs = (now() - t0) / iters;
  printf("nccl 1-rank all_reduce 64 MiB: %.3f ms, %.1f GB/s (algorithm bandwidth)\n", secs * 1e3,
         bytes / secs / 1e9);
  if (json)
    fprintf(json, "{\"bench\": \"allreduce_nccl_1rank\", \"bytes\": %zu, \"ms\": %.4f, \"algbw_gbps\": %.3f, "
                  "\"check\": %s}\n", bytes, secs * 1e3, bytes / secs / 1e9, ok ? "true" : "false");
  ag_tensor_release(t);
  ag_group_destroy(g);
  return ok ? 0 : 1;
}

/* ---- MPI: anygrad's group against raw MPI_Allreduce ---- */

#ifdef AG_BENCH_MPI
static int run_mpi(FILE *json) {
  ag_group *g;
  if (ag_group_create_mpi(AG_CPU, NULL, &g) != AG_OK) die("ag_group_create_mpi");
  int rank = ag_group_rank(g), n = ag_group_size(g);
  if (rank == 0) {
    char why[512];
    ag_dist_available(AG_DIST_MPI, why, sizeof why);
    printf("MPI group vs MPI_Allreduce: %d ranks, f32 SUM, same buffers, %d interleaved rounds (A B A B)\n%s\n",
           n, g_rounds, why);
    printf("(C: raw MPI_Iallreduce + MPI_Test loop, the non-blocking call anygrad polls to honour its timeout)\n");
    printf("%10s %6s %14s %20s %14s %20s %7s %9s\n", "bytes", "iters", "anygrad GB/s", "range", "MPI GB/s", "range",
           "ratio", "C GB/s");
  }
  for (size_t bytes = 4096; bytes <= g_max_bytes; bytes *= 4) {
    size_t cnt = bytes / 4;
    int64_t shape[1] = {(int64_t)cnt};
    ag_tensor *t = ag_ones(AG_CPU, AG_F32, 1, shape);
    float *buf = ag_tensor_data_ptr(t); /* the same memory for both */
    int iters = iters_for(bytes);
    double a[MAX_ROUNDS] = {0}, b[MAX_ROUNDS] = {0}, c[MAX_ROUNDS] = {0};
    /* warm both paths */
    if (ag_all_reduce(g, t, AG_DIST_SUM, NULL) != AG_OK) die("all_reduce");
    MPI_Allreduce(MPI_IN_PLACE, buf, (int)cnt, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    for (int r = 0; r < g_rounds; r++) {
      for (int which = 0; which < 3; which++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = now();
        for (int i = 0; i < iters; i++) {
          if (which == 0) {
            if (ag_all_reduce(g, t, AG_DIST_SUM, NULL) != AG_OK) die("all_reduce");
          } else if (which == 1) {
            MPI_Allreduce(MPI_IN_PLACE, buf, (int)cnt, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
          } else {
            MPI_Request rq;
            int done = 0;
            MPI_Iallreduce(MPI_IN_PLACE, buf, (int)cnt, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &rq);
            while (!done) MPI_Test(&rq, &done, MPI_STATUS_IGNORE);
          }
        }
        double s = (now() - t0) / iters, smax = 0;
        MPI_Allreduce(&s, &smax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD); /* the slowest rank */
        (which == 0 ? a : which == 1 ? b : c)[r] = busbw(bytes, n, smax);
      }
    }
    /* values stay finite: sums of ones grow, reset between sizes */
    ag_tensor_release(t);
    if (rank == 0) {
      double ma = median(a, g_rounds), mb = median(b, g_rounds);
      printf("%10zu %6d %14.2f %9.2f - %-9.2f %14.2f %9.2f - %-9.2f %7.2f %9.2f\n", bytes, iters, ma,
             minv(a, g_rounds), maxv(a, g_rounds), mb, minv(b, g_rounds), maxv(b, g_rounds), ma / mb, median(c, g_rounds));
      if (json)
        fprintf(json,
                "{\"bench\": \"allreduce_mpi\", \"ranks\": %d, \"bytes\": %zu, \"anygrad_busbw_gbps\": %.4f, "
                "\"anygrad_min\": %.4f, \"anygrad_max\": %.4f, \"mpi_busbw_gbps\": %.4f, \"mpi_min\": %.4f, "
                "\"mpi_max\": %.4f, \"ratio\": %.4f, \"mpi_iallreduce_busbw_gbps\": %.4f, "
                "\"mpi_iallreduce_min\": %.4f, \"mpi_iallreduce_max\": %.4f, \"rounds\": %d}\n",
                n, bytes, ma, minv(a, g_rounds), maxv(a, g_rounds), mb, minv(b, g_rounds), maxv(b, g_rounds), ma / mb,
                median(c, g_rounds), minv(c, g_rounds), maxv(c, g_rounds), g_rounds);
    }
  }
  ag_group_destroy(g);
  return 0;
}
#endif

int main(int argc, char **argv) {
  const char *json_path = NULL;
  int inproc = 0;
  size_t max_bytes = (size_t)64 << 20;
  bool nccl = false;
  ag_device dev = AG_CPU;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--json") && i + 1 < argc) json_path = argv[++i];
    else if (!strcmp(argv[i], "--inproc") && i + 1 < argc) inproc = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--device") && i + 1 < argc) {
      if (ag_device_parse(argv[++i], &dev) != AG_OK) die("--device");
    } else if (!strcmp(argv[i], "--nccl")) nccl = true;
    else if (!strcmp(argv[i], "--max-bytes") && i + 1 < argc) max_bytes = (size_t)atoll(argv[++i]);
    else if (!strcmp(argv[i], "--traffic") && i + 1 < argc) g_traffic = (size_t)atoll(argv[++i]);
    else if (!strcmp(argv[i], "--rounds") && i + 1 < argc) g_rounds = atoi(argv[++i]);
    else {
      fprintf(stderr, "usage: allreduce_bench [--inproc N [--device D] | --nccl] [--max-bytes B] [--traffic B] "
                      "[--rounds 1..%d] [--json FILE]\n", MAX_ROUNDS);
      return 2;
    }
  }
  g_max_bytes = max_bytes;
  if (g_rounds < 1 || g_rounds > MAX_ROUNDS || g_traffic < 4096) {
    fprintf(stderr, "allreduce_bench: --rounds must be 1..%d and --traffic >= 4096\n", MAX_ROUNDS);
    return 2;
  }
  FILE *json = json_path ? fopen(json_path, "a") : NULL;
  int rc;
  if (nccl) rc = run_nccl(json);
  else if (inproc > 0 && inproc <= 16) rc = run_inproc(inproc, dev, json);
  else {
#ifdef AG_BENCH_MPI
    rc = run_mpi(json);
#else
    fprintf(stderr, "allreduce_bench: built without MPI; use --inproc N or --nccl\n");
    rc = 2;
#endif
  }
  if (json) fclose(json);
  return rc;
}
