/* The CPU's f32 GEMM engines side by side: oneDNN's sgemm (libdnnl.so.2,
 * opened as backends/cpu/cpu_gemm.c opens it) against CBLAS sgemm
 * (OpenBLAS), one thread each (openblas_set_num_threads(1); oneDNN's
 * OpenMP team size 1, as the pool runs it), on the products of a GPT
 * training step (forward, dX and dW layouts), interleaved rounds (A B A B),
 * median and range of GFLOP/s. Table on stdout, JSON lines to --json FILE.
 * Usage: gemm_bench [--rounds N] [--json FILE] */
#define _GNU_SOURCE
#include <cblas.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "anygrad/anygrad.h"

typedef int (*dnnl_sgemm_fn)(char, char, int64_t, int64_t, int64_t, float, const float *, int64_t, const float *,
                             int64_t, float, float *, int64_t);

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

typedef struct shape {
  const char *what;
  int64_t M, N, K;
  bool ta, tb;
} shape;

/* GPT default (B*T 256 rows, C 256, V 8192) and medium (512 rows, C 512). */
static const shape k_shapes[] = {
    {"qkv fwd      256x256 @ W^T", 256, 768, 256, false, true},
    {"mlp up fwd   256x256 @ W^T", 256, 1024, 256, false, true},
    {"mlp down dX  256x1024 @ W", 256, 256, 1024, false, false},
    {"mlp up dW    dY^T @ X", 1024, 256, 256, true, false},
    {"head fwd     256x256 @ E^T", 256, 8192, 256, false, true},
    {"head dX      dL @ E", 256, 256, 8192, false, false},
    {"head dW      dL^T @ X", 8192, 256, 256, true, false},
    {"medium mlp   512x512 @ W^T", 512, 2048, 512, false, true},
    {"medium head  512x512 @ E^T", 512, 8192, 512, false, true},
};
#define NS (int)(sizeof k_shapes / sizeof k_shapes[0])
#define MAXR 32

int main(int argc, char **argv) {
  int rounds = 7;
  const char *json_path = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--json") && i + 1 < argc) json_path = argv[++i];
    else {
      fprintf(stderr, "usage: gemm_bench [--rounds N] [--json FILE]\n");
      return 2;
    }
  }
  if (rounds < 1 || rounds > MAXR) rounds = 7;
  void *h = dlopen("libdnnl.so.2", RTLD_NOW | RTLD_LOCAL);
  dnnl_sgemm_fn dnnl = h ? (dnnl_sgemm_fn)dlsym(h, "dnnl_sgemm") : NULL;
  void (*omp_set)(int) = h ? (void (*)(int))dlsym(h, "omp_set_num_threads") : NULL;
  if (omp_set) omp_set(1);
  void (*ob_set)(int) = (void (*)(int))dlsym(RTLD_DEFAULT, "openblas_set_num_threads");
  if (ob_set) ob_set(1);
  printf("gemm_bench: f32 GEMM engines, 1 thread each, %d interleaved rounds, GFLOP/s median [min-max]\n", rounds);
  printf("anygrad's engine in this process: %s\n", ag_cpu_gemm_engine());
  if (!dnnl) printf("oneDNN: libdnnl.so.2 not usable (%s): CBLAS only\n", h ? "no dnnl_sgemm" : dlerror());
  FILE *json = json_path ? fopen(json_path, "w") : NULL;
  size_t cap = 0;
  for (int s = 0; s < NS; s++) {
    size_t a = (size_t)(k_shapes[s].M * k_shapes[s].K), b = (size_t)(k_shapes[s].K * k_shapes[s].N),
           c = (size_t)(k_shapes[s].M * k_shapes[s].N);
    if (a > cap) cap = a;
    if (b > cap) cap = b;
    if (c > cap) cap = c;
  }
  float *A = malloc(cap * 4), *B = malloc(cap * 4), *C = malloc(cap * 4);
  if (!A || !B || !C) return 1;
  for (size_t i = 0; i < cap; i++) A[i] = (float)(i % 7) * 0.1f, B[i] = (float)(i % 5) * 0.1f, C[i] = 0;
  printf("%-30s %18s %26s %26s %7s\n", "product", "M x N x K", "oneDNN", "CBLAS", "ratio");
  for (int s = 0; s < NS; s++) {
    const shape *p = &k_shapes[s];
    int64_t lda = p->ta ? p->M : p->K, ldb = p->tb ? p->K : p->N;
    double flop = 2.0 * (double)p->M * (double)p->N * (double)p->K, gd[MAXR], gb[MAXR], rt[MAXR];
    int reps = (int)(2e9 / flop) + 1;
    for (int r = 0; r < rounds; r++) {
      double t0 = now();
      for (int i = 0; i < reps && dnnl; i++)
        dnnl(p->ta ? 'T' : 'N', p->tb ? 'T' : 'N', p->M, p->N, p->K, 1, A, lda, B, ldb, 0, C, p->N);
      gd[r] = dnnl ? flop * reps / (now() - t0) / 1e9 : 0;
      t0 = now();
      for (int i = 0; i < reps; i++)
        cblas_sgemm(CblasRowMajor, p->ta ? CblasTrans : CblasNoTrans, p->tb ? CblasTrans : CblasNoTrans, (int)p->M,
                    (int)p->N, (int)p->K, 1, A, (int)lda, B, (int)ldb, 0, C, (int)p->N);
      gb[r] = flop * reps / (now() - t0) / 1e9;
      rt[r] = gd[r] / gb[r];
    }
    qsort(gd, (size_t)rounds, sizeof(double), cmp);
    qsort(gb, (size_t)rounds, sizeof(double), cmp);
    qsort(rt, (size_t)rounds, sizeof(double), cmp);
    char dims[40];
    snprintf(dims, sizeof dims, "%lldx%lldx%lld", (long long)p->M, (long long)p->N, (long long)p->K);
    printf("%-30s %18s %8.1f [%6.1f-%6.1f] %8.1f [%6.1f-%6.1f] %7.2f\n", p->what, dims, gd[rounds / 2], gd[0],
           gd[rounds - 1], gb[rounds / 2], gb[0], gb[rounds - 1], rt[rounds / 2]);
    if (json)
      fprintf(json,
              "{\"bench\": \"gemm\", \"product\": \"%s\", \"M\": %lld, \"N\": %lld, \"K\": %lld, "
              "\"onednn_gflops\": %.2f, \"cblas_gflops\": %.2f, \"ratio\": %.3f}\n",
              p->what, (long long)p->M, (long long)p->N, (long long)p->K, gd[rounds / 2], gb[rounds / 2],
              rt[rounds / 2]);
  }
  if (json) fclose(json);
  free(A), free(B), free(C);
  return 0;
}
