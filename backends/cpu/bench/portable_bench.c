/* Portable numerics against the default mode on the CPU, kernel by kernel
 * (not a test): matmul 512^3 (and the MLP's shapes), softmax and layer norm
 * rows, each as the median of several runs on 1 and 2 threads, the
 * default call and the AG_KF_PORTABLE call interleaved.
 * Usage: portable_bench [runs] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "anygrad/anygrad.h"
#include "cpu_backend.h"

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static ag_koperand opnd(void *base, int ndim, const int64_t *shape, const int64_t *strides) {
  ag_koperand o;
  memset(&o, 0, sizeof o);
  o.base = base;
  o.dtype = AG_F32;
  o.ndim = ndim;
  int64_t s = 1;
  for (int d = ndim - 1; d >= 0; d--) {
    o.shape[d] = shape[d];
    o.strides[d] = strides ? strides[d] : s;
    s *= shape[d];
  }
  return o;
}

static float *fvec(int64_t n) {
  float *v = malloc(sizeof(float) * (size_t)n);
  uint32_t r = 7;
  for (int64_t i = 0; i < n; i++) {
    r = r * 1664525u + 1013904223u;
    v[i] = (float)(r >> 8) * (1.0f / 16777216.0f) * 2.f - 1.f;
  }
  return v;
}

static int cmpd(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* median ms of `runs` calls of c with and without the portable flag */
static void measure(const char *name, ag_kernel_call *c, int runs) {
  for (int thr = 1; thr <= 2; thr++) {
    ag_set_num_threads(thr);
    double t[2][64];
    for (int r = 0; r < runs; r++)
      for (int p = 0; p < 2; p++) {
        c->flags = p ? AG_KF_PORTABLE : 0;
        ag_kernel_error e;
        memset(&e, 0, sizeof e);
        double t0 = now_ms();
        if (ag__cpu_run(c, &e) != AG_OK) {
          printf("%s: %s\n", name, ag_last_error());
          return;
        }
        t[p][r] = now_ms() - t0;
      }
    qsort(t[0], (size_t)runs, sizeof(double), cmpd);
    qsort(t[1], (size_t)runs, sizeof(double), cmpd);
    double d = t[0][runs / 2], q = t[1][runs / 2];
    printf("%-28s %dT  default %8.3f ms  portable %8.3f ms  ratio %5.2fx\n", name, thr, d, q, q / d);
  }
}

static void bench_matmul(const char *name, int64_t M, int64_t N, int64_t K, bool tb, int runs) {
  float *a = fvec(M * K), *b = fvec(K * N), *c = fvec(M * N);
  ag_kernel_call cl;
  memset(&cl, 0, sizeof cl);
  cl.struct_size = (uint32_t)sizeof cl;
  cl.op = AG_K_MATMUL;
  cl.name = name;
  cl.n_operands = 3;
  cl.o[0] = opnd(c, 2, (int64_t[]){M, N}, NULL);
  cl.o[1] = opnd(a, 2, (int64_t[]){M, K}, NULL);
  cl.o[2] = opnd(b, 2, (int64_t[]){K, N}, tb ? (int64_t[]){1, K} : NULL);
  cl.s[0] = 1;
  measure(name, &cl, runs);
  free(a), free(b), free(c);
}

int main(int argc, char **argv) {
  int runs = argc > 1 ? atoi(argv[1]) : 7;
  if (runs < 1) runs = 1;
  if (runs > 64) runs = 64;
  bench_matmul("matmul 512^3", 512, 512, 512, false, runs);
  bench_matmul("matmul 512^3 b^T", 512, 512, 512, true, runs);
  bench_matmul("matmul 128x1024x784 (mlp)", 128, 1024, 784, false, runs);
  bench_matmul("matmul 128x1024x1024 b^T", 128, 1024, 1024, true, runs);
  {
    const int64_t R = 2048, C = 1024;
    float *x = fvec(R * C), *y = fvec(R * C);
    ag_kernel_call c;
    memset(&c, 0, sizeof c);
    c.struct_size = (uint32_t)sizeof c;
    c.op = AG_K_SOFTMAX;
    c.sub = AG_KV_SOFTMAX;
    c.n_operands = 2;
    c.o[0] = opnd(y, 2, (int64_t[]){R, C}, NULL);
    c.o[1] = opnd(x, 2, (int64_t[]){R, C}, NULL);
    c.i[0] = R, c.i[1] = C;
    measure("softmax 2048x1024", &c, runs);
    float *w = fvec(C), *b = fvec(C), *mean = fvec(R), *rstd = fvec(R);
    memset(&c, 0, sizeof c);
    c.struct_size = (uint32_t)sizeof c;
    c.op = AG_K_LAYERNORM;
    c.n_operands = 6;
    c.o[0] = opnd(y, 2, (int64_t[]){R, C}, NULL);
    c.o[1] = opnd(x, 2, (int64_t[]){R, C}, NULL);
    c.o[2] = opnd(w, 1, (int64_t[]){C}, NULL);
    c.o[3] = opnd(b, 1, (int64_t[]){C}, NULL);
    c.o[4] = opnd(mean, 1, (int64_t[]){R}, NULL);
    c.o[5] = opnd(rstd, 1, (int64_t[]){R}, NULL);
    c.i[0] = R, c.i[1] = C, c.s[0] = 1e-5;
    measure("layernorm 2048x1024", &c, runs);
    memset(&c, 0, sizeof c);
    c.struct_size = (uint32_t)sizeof c;
    c.op = AG_K_UNARY;
    c.sub = AG_U_GELU;
    c.n_operands = 2;
    c.o[0] = opnd(y, 1, (int64_t[]){R * C}, NULL);
    c.o[1] = opnd(x, 1, (int64_t[]){R * C}, NULL);
    c.s[0] = 1;
    measure("gelu 2M", &c, runs);
    c.sub = AG_U_EXP;
    measure("exp 2M", &c, runs);
    memset(&c, 0, sizeof c);
    c.struct_size = (uint32_t)sizeof c;
    c.op = AG_K_REDUCE;
    c.sub = AG_R_SUM;
    c.n_operands = 2;
    c.o[0] = opnd(y, 1, (int64_t[]){C}, NULL);
    c.o[1] = opnd(x, 3, (int64_t[]){1, R, C}, NULL);
    c.i[0] = 1, c.i[1] = R, c.i[2] = C, c.s[0] = 1;
    measure("sum over rows 2048x1024", &c, runs);
    free(x), free(y), free(w), free(b), free(mean), free(rstd);
  }
  return 0;
}
