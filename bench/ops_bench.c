/* Per-op host overhead (16-element ops, ns per launch, median of batches) and
 * large-tensor throughput on one device, beside the memcpy bandwidth measured
 * in the same run and, with --torch, PyTorch's numbers for the same ops and
 * their ratio, in interleaved rounds (--rounds R: median and range). Prints a
 * table and writes JSON (--json FILE, or - for stdout). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "anygrad/anygrad.h"
#include "conformance.h"

#ifndef AG_OPS_TORCH_SCRIPT
#define AG_OPS_TORCH_SCRIPT "bench/ops_torch.py"
#endif

typedef struct torch_row {
  char op[24];
  double overhead_ns, large_ms, rate;
} torch_row;

static double memcpy_gbps(int64_t bytes, int reps) {
  char *a = malloc((size_t)bytes), *b = malloc((size_t)bytes);
  if (!a || !b) {
    free(a);
    free(b);
    return 0;
  }
  memset(a, 1, (size_t)bytes);
  memset(b, 2, (size_t)bytes);
  double best = 1e30;
  for (int r = 0; r < reps + 1; r++) {
    double t0 = ag_bench_now_ns();
    memcpy(b, a, (size_t)bytes);
    double t = ag_bench_now_ns() - t0;
    if (r && t < best) best = t;
  }
  volatile char sink = b[bytes / 2];
  (void)sink;
  free(a);
  free(b);
  return 2.0 * (double)bytes / best; /* read + write, bytes/ns = GB/s */
}

static int run_torch(const ag_bench_opts *o, int threads, torch_row *rows, int max) {
  const char *py = getenv("AG_PYTHON") ? getenv("AG_PYTHON") : "/usr/bin/python3";
  if (access(AG_OPS_TORCH_SCRIPT, R_OK) != 0 || access(py, X_OK) != 0) return -1;
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "%s %s --numel %lld --small %lld --matmul %d --reps %d --threads %d", py,
           AG_OPS_TORCH_SCRIPT, (long long)o->large_numel, (long long)o->small_numel, o->matmul_n,
           o->reps, threads);
  FILE *p = popen(cmd, "r");
  if (!p) return -1;
  int n = 0;
  char line[256];
  while (n < max && fgets(line, sizeof line, p))
    if (sscanf(line, "%23s %lf %lf %lf", rows[n].op, &rows[n].overhead_ns, &rows[n].large_ms, &rows[n].rate) == 4) n++;
  return pclose(p) == 0 ? n : -1;
}

static int cmpd(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* median of v[0..n) (sorted in place); lo/hi get the range */
static double med(double *v, int n, double *lo, double *hi) {
  qsort(v, (size_t)n, sizeof *v, cmpd);
  if (lo) *lo = v[0];
  if (hi) *hi = v[n - 1];
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

#define MAXR 16

int main(int argc, char **argv) {
  ag_bench_opts o = ag_bench_default_opts();
  int rounds = 3;
  const char *dev_s = "cpu", *json = NULL;
  bool torch = false;
  for (int i = 1; i < argc; i++) {
    bool has = i + 1 < argc;
    if (!strcmp(argv[i], "--device") && has) dev_s = argv[++i];
    else if (!strcmp(argv[i], "--json") && has) json = argv[++i];
    else if (!strcmp(argv[i], "--numel") && has) o.large_numel = strtoll(argv[++i], NULL, 0);
    else if (!strcmp(argv[i], "--matmul") && has) o.matmul_n = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--reps") && has) o.reps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--ops") && has) o.ops = argv[++i];
    else if (!strcmp(argv[i], "--torch")) torch = true;
    else if (!strcmp(argv[i], "--rounds") && has) rounds = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--threads") && has) {
      if (ag_set_num_threads(atoi(argv[++i])) != AG_OK) {
        fprintf(stderr, "ops_bench: %s\n", ag_last_error());
        return 2;
      }
    }
    else {
      fprintf(stderr,
              "usage: ops_bench [--device cpu] [--numel N] [--matmul N] [--reps R] [--ops a,b]\n"
              "                 [--torch] [--rounds R] [--threads N] [--json FILE|-]\n");
      return 2;
    }
  }
  if (rounds < 1 || rounds > MAXR) rounds = rounds < 1 ? 1 : MAXR;
  if (o.reps < 1 || o.large_numel < 1 || o.matmul_n < 1) {
    fprintf(stderr, "ops_bench: --reps, --numel and --matmul must be positive\n");
    return 2;
  }
  ag_device d;
  if (ag_device_parse(dev_s, &d) != AG_OK) {
    fprintf(stderr, "ops_bench: %s\n", ag_last_error());
    return 1;
  }
  /* PyTorch gets anygrad's thread count (ag_get_num_threads). */
  int threads = ag_get_num_threads();
  /* Interleaved rounds: anygrad's set, PyTorch's set, anygrad's, ... then
   * the median of each number and its range over the rounds. */
  static ag_bench_row rr[MAXR][32];
  static torch_row trr[MAXR][32];
  ag_bench_row rows[32];
  torch_row tr[32];
  double bwr[MAXR];
  int n = 0, nt = 0;
  for (int r = 0; r < rounds; r++) {
    n = ag_bench_device(d, &o, rr[r], 32);
    if (n < 0) {
      fprintf(stderr, "ops_bench: %s\n", ag_last_error());
      return 1;
    }
    bwr[r] = memcpy_gbps(o.large_numel * 4, o.reps);
    if (torch) {
      int k = run_torch(&o, threads, trr[r], 32);
      if (k < 0) {
        fprintf(stderr, "ops_bench: PyTorch run failed or %s absent; no ratios\n", AG_OPS_TORCH_SCRIPT);
        torch = false;
        nt = 0;
      } else {
        nt = k;
      }
    }
  }
  double ov_lo[32], ov_hi[32], t_lo[32], t_hi[32], col[MAXR];
  int rc = 0;
  for (int i = 0; i < n; i++) {
    rows[i] = rr[0][i];
    /* a row is timed only when every round timed it: the first round that
     * refused or failed it gives its status and message */
    for (int r = 0; r < rounds && rows[i].status == AG_BENCH_OK; r++)
      if (rr[r][i].status != AG_BENCH_OK) rows[i] = rr[r][i];
    if (rows[i].status == AG_BENCH_ERROR) rc = 1;
    if (rows[i].status != AG_BENCH_OK) continue;
    for (int r = 0; r < rounds; r++) col[r] = rr[r][i].overhead_ns;
    rows[i].overhead_ns = med(col, rounds, &ov_lo[i], &ov_hi[i]);
    for (int r = 0; r < rounds; r++) col[r] = rr[r][i].large_ms;
    rows[i].large_ms = med(col, rounds, NULL, NULL);
    for (int r = 0; r < rounds; r++) col[r] = rr[r][i].gbps;
    rows[i].gbps = med(col, rounds, NULL, NULL);
    for (int r = 0; r < rounds; r++) col[r] = rr[r][i].gflops;
    rows[i].gflops = med(col, rounds, NULL, NULL);
  }
  for (int j = 0; j < nt; j++) {
    tr[j] = trr[0][j];
    for (int r = 0; r < rounds; r++) col[r] = trr[r][j].overhead_ns;
    tr[j].overhead_ns = med(col, rounds, &t_lo[j], &t_hi[j]);
    for (int r = 0; r < rounds; r++) col[r] = trr[r][j].large_ms;
    tr[j].large_ms = med(col, rounds, NULL, NULL);
    for (int r = 0; r < rounds; r++) col[r] = trr[r][j].rate;
    tr[j].rate = med(col, rounds, NULL, NULL);
  }
  double bw = med(bwr, rounds, NULL, NULL);
  (void)t_lo;
  (void)t_hi;

  printf("device %s, %lld elements (f32), memcpy %.2f GB/s; threads: anygrad ag_get_num_threads() = %d, torch %d\n"
         "%d interleaved rounds (anygrad, PyTorch, ...): medians; launch ns range in brackets\n",
         dev_s, (long long)o.large_numel, bw, threads, threads, rounds);
  printf("%-15s %10s %13s %10s %9s %8s", "op", "launch ns", "[range]", "large ms", "GB/s", "of bw");
  if (nt > 0) printf(" %10s %9s %9s", "torch ns", "ns ratio", "tp ratio");
  printf("\n");
  for (int i = 0; i < n; i++) {
    ag_bench_row *r = &rows[i];
    if (r->status != AG_BENCH_OK) {
      printf("%-15s %s: %s\n", r->op, ag_bench_status_name(r->status), r->error);
      continue;
    }
    double rate = r->gflops > 0 ? r->gflops : r->gbps;
    printf("%-15s %10.0f [%5.0f-%5.0f] %10.3f %9.2f", r->op, r->overhead_ns, ov_lo[i], ov_hi[i], r->large_ms, rate);
    if (r->gflops > 0) printf(" %8s", "GFLOP/s");
    else printf(" %7.0f%%", 100 * r->gbps / bw);
    for (int j = 0; j < (nt > 0 ? nt : 0); j++)
      if (!strcmp(tr[j].op, r->op))
        printf(" %10.0f %9.3f %9.2f", tr[j].overhead_ns, r->overhead_ns / tr[j].overhead_ns, rate / tr[j].rate);
    printf("\n");
  }
  if (nt > 0)
    printf("ns ratio = anygrad/PyTorch launch time (goal <= 0.25); tp ratio = anygrad/PyTorch throughput\n"
           "(GB/s, GFLOP/s for matmul); 'of bw' = share of the memcpy bandwidth.\n");

  FILE *jf = json ? (!strcmp(json, "-") ? stdout : fopen(json, "w")) : NULL;
  if (json && !jf) {
    fprintf(stderr, "ops_bench: cannot write %s\n", json);
    return 1;
  }
  if (jf) {
    fprintf(jf, "{\"device\": \"%s\", \"numel\": %lld, \"threads\": %d, \"rounds\": %d, \"memcpy_gbps\": %.3f, \"ops\": [\n",
            dev_s, (long long)o.large_numel, threads, rounds, bw);
    for (int i = 0; i < n; i++) {
      ag_bench_row *r = &rows[i];
      if (r->status != AG_BENCH_OK) {
        /* no times for a row that was not timed; the message without quotes or backslashes */
        char msg[sizeof r->error];
        snprintf(msg, sizeof msg, "%s", r->error);
        for (char *c = msg; *c; c++)
          if (*c == '"' || *c == '\\' || (unsigned char)*c < 0x20) *c = '\'';
        fprintf(jf, "  {\"op\": \"%s\", \"status\": \"%s\", \"error\": \"%s\"}%s\n", r->op,
                ag_bench_status_name(r->status), msg, i + 1 < n ? "," : "");
        continue;
      }
      fprintf(jf, "  {\"op\": \"%s\", \"status\": \"ok\", \"overhead_ns\": %.1f, \"overhead_ns_range\": [%.1f, %.1f], \"large_ms\": %.4f, \"gbps\": %.3f, \"gflops\": %.3f",
              r->op, r->overhead_ns, ov_lo[i], ov_hi[i], r->large_ms, r->gbps, r->gflops);
      for (int j = 0; j < (nt > 0 ? nt : 0); j++)
        if (!strcmp(tr[j].op, r->op))
          fprintf(jf, ", \"torch_overhead_ns\": %.1f, \"torch_large_ms\": %.4f, \"torch_rate\": %.3f", tr[j].overhead_ns,
                  tr[j].large_ms, tr[j].rate);
      fprintf(jf, "}%s\n", i + 1 < n ? "," : "");
    }
    fprintf(jf, "]}\n");
    if (jf != stdout) fclose(jf);
  }
  for (int i = 0; i < n; i++)
    if (rows[i].status == AG_BENCH_ERROR) fprintf(stderr, "ops_bench: %s: %s\n", rows[i].op, rows[i].error);
  return rc;
}
