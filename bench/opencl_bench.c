/* OpenCL backend benchmark through its vtable: per-op throughput (GB/s of
 * operand traffic) on the first OpenCL device, and GEMM GFLOP/s of CLBlast
 * against OpenBLAS on the host CPU. Prints a table, or JSON with --json.
 * Usage: opencl_bench [--json] [--numel N] [--reps R] [--gemm 256,512,...] */
#include <cblas.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "anygrad/backend.h"

static const ag_backend *B;
static ag_bstream *S;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static ag_koperand flat(void *base, ag_dtype dt, int64_t n) {
  ag_koperand o = {.base = base, .dtype = dt, .ndim = 1};
  o.shape[0] = n;
  o.strides[0] = 1;
  return o;
}

/* Median-free but warm: one untimed launch, then reps launches timed
 * between two synchronizations (host time includes the enqueue cost). */
/* A failed launch or synchronization gives -1 and its status here: the
 * row is reported as the status, never as a time. */
static ag_status g_status;
static double time_call(ag_kernel_call *c, int reps) {
  if ((g_status = B->launch(S, c)) != AG_OK || (g_status = B->stream_synchronize(S)) != AG_OK) return -1;
  double t0 = now_s();
  for (int r = 0; r < reps; r++)
    if ((g_status = B->launch(S, c)) != AG_OK) return -1;
  if ((g_status = B->stream_synchronize(S)) != AG_OK) return -1;
  return (now_s() - t0) / reps;
}

/* "unsupported" for a refused kernel (a fact about the device), "error"
 * for any other failure (the run exits 1). */
static int g_rc;
static const char *failed(ag_status st) {
  if (st != AG_ERR_UNSUPPORTED) g_rc = 1;
  return st == AG_ERR_UNSUPPORTED ? "unsupported" : "error";
}

typedef struct row {
  char name[48];
  double seconds, gbs, gflops; /* seconds < 0: not timed, st says why */
  ag_status st;
} row;

int main(int argc, char **argv) {
  bool json = false;
  int64_t n = 1 << 22;
  int reps = 10;
  char gemm_list[128] = "256,512,1024";
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--json")) json = true;
    else if (!strcmp(argv[i], "--numel") && i + 1 < argc) n = atoll(argv[++i]);
    else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--gemm") && i + 1 < argc) snprintf(gemm_list, sizeof gemm_list, "%s", argv[++i]);
    else {
      fprintf(stderr, "usage: %s [--json] [--numel N] [--reps R] [--gemm 256,512]\n", argv[0]);
      return 2;
    }
  }
  void *h = dlopen(AG_OPENCL_MODULE, RTLD_NOW | RTLD_LOCAL);
  ag_backend_module_get_fn get = h ? (ag_backend_module_get_fn)dlsym(h, AG_BACKEND_MODULE_SYMBOL) : NULL;
  int ndev = 0;
  char reason[256] = "module not loadable";
  if (!get || (B = get())->init(&ndev, reason, sizeof reason) != AG_OK || !ndev) {
    fprintf(stderr, "opencl_bench: no OpenCL device: %s\n", reason);
    return 0;
  }
  ag_device_props props;
  B->device_props(0, &props);
  if (B->stream_create(0, &S) != AG_OK) return 1;

  row rows[64];
  int nr = 0;
  void *a, *b, *o;
  if (B->segment_alloc(0, (size_t)n * 4, &a) || B->segment_alloc(0, (size_t)n * 4, &b) ||
      B->segment_alloc(0, (size_t)n * 4, &o)) {
    fprintf(stderr, "opencl_bench: %s\n", ag_last_error());
    return 1;
  }
  ag_kernel_call fill = {AG_KERNEL_CALL_HEADER, .op = AG_K_FILL, .n_operands = 1, .s = {0.5}};
  fill.o[0] = flat(a, AG_F32, n);
  B->launch(S, &fill);
  fill.o[0] = flat(b, AG_F32, n);
  B->launch(S, &fill);

  struct {
    const char *name;
    ag_kop op;
    int sub, nops;
    ag_dtype dt;
    double bytes_per_elem;
  } ew[] = {
      {"add f32", AG_K_BINARY, AG_B_ADD, 3, AG_F32, 12},
      {"mul f32", AG_K_BINARY, AG_B_MUL, 3, AG_F32, 12},
      {"exp f32", AG_K_UNARY, AG_U_EXP, 2, AG_F32, 8},
      {"gelu f32", AG_K_UNARY, AG_U_GELU, 2, AG_F32, 8},
      {"cast f32->f16", AG_K_UNARY, AG_U_COPY, 2, AG_F16, 6},
      {"fill f32", AG_K_FILL, 0, 1, AG_F32, 4},
      {"rand uniform f32", AG_K_RAND_UNIFORM, 0, 1, AG_F32, 4},
  };
  for (size_t k = 0; k < sizeof ew / sizeof *ew; k++) {
    ag_kernel_call c = {AG_KERNEL_CALL_HEADER, .op = ew[k].op, .sub = ew[k].sub, .n_operands = ew[k].nops, .s = {1, 1}};
    c.o[0] = flat(o, ew[k].dt, n);
    c.o[1] = flat(a, AG_F32, n);
    c.o[2] = flat(b, AG_F32, n);
    double t = time_call(&c, reps);
    row *r = &rows[nr++];
    snprintf(r->name, sizeof r->name, "%s", ew[k].name);
    r->seconds = t;
    r->st = t < 0 ? g_status : AG_OK;
    r->gbs = t > 0 ? ew[k].bytes_per_elem * (double)n / t * 1e-9 : 0;
    r->gflops = 0;
  }
  /* transposed copy: strided reads through the 8-dim index path */
  {
    int64_t side = 1;
    while ((side * 2) * (side * 2) <= n) side *= 2;
    ag_kernel_call c = {AG_KERNEL_CALL_HEADER, .op = AG_K_UNARY, .sub = AG_U_COPY, .n_operands = 2};
    c.o[0] = flat(o, AG_F32, side * side);
    c.o[0].ndim = c.o[1].ndim = 2;
    c.o[0].shape[0] = c.o[0].shape[1] = side;
    c.o[0].strides[0] = side;
    c.o[0].strides[1] = 1;
    c.o[1] = c.o[0];
    c.o[1].base = a;
    c.o[1].strides[0] = 1;
    c.o[1].strides[1] = side;
    double t = time_call(&c, reps);
    row *r = &rows[nr++];
    snprintf(r->name, sizeof r->name, "transpose copy f32");
    r->seconds = t;
    r->st = t < 0 ? g_status : AG_OK;
    r->gbs = t > 0 ? 8.0 * (double)(side * side) / t * 1e-9 : 0;
  }
  /* row kernels on [n/1024, 1024] */
  {
    int64_t cols = 1024, rws = n / cols;
    ag_kernel_call sm = {AG_KERNEL_CALL_HEADER, .op = AG_K_SOFTMAX, .n_operands = 2, .i = {rws, cols}};
    sm.o[0] = flat(o, AG_F32, rws * cols);
    sm.o[1] = flat(a, AG_F32, rws * cols);
    ag_kernel_call red = {AG_KERNEL_CALL_HEADER, .op = AG_K_REDUCE, .sub = AG_R_SUM, .n_operands = 2, .s = {1},
                          .i = {1, n, 1}};
    red.o[0] = flat(o, AG_F32, 1);
    red.o[1] = flat(a, AG_F32, n);
    ag_kernel_call redr = red;
    redr.i[0] = rws;
    redr.i[1] = cols;
    redr.o[0] = flat(o, AG_F32, rws);
    ag_kernel_call ln = {AG_KERNEL_CALL_HEADER, .op = AG_K_LAYERNORM, .n_operands = 6, .s = {1e-5}, .i = {rws, cols}};
    ln.o[0] = flat(o, AG_F32, n);
    ln.o[1] = flat(a, AG_F32, n);
    ln.o[4] = flat(b, AG_F32, rws);
    ln.o[5] = flat(b, AG_F32, rws);
    ln.o[5].offset = (size_t)rws * 4;
    struct {
      const char *name;
      ag_kernel_call *c;
      double bytes;
    } rk[] = {{"softmax f32 rows 1024", &sm, 8.0 * n},
              {"sum f32 (all)", &red, 4.0 * n},
              {"sum f32 rows 1024", &redr, 4.0 * n},
              {"layer_norm f32 1024", &ln, 8.0 * n}};
    for (size_t k = 0; k < sizeof rk / sizeof *rk; k++) {
      double t = time_call(rk[k].c, reps);
      row *r = &rows[nr++];
      snprintf(r->name, sizeof r->name, "%s", rk[k].name);
      r->seconds = t;
      r->st = t < 0 ? g_status : AG_OK;
      r->gbs = t > 0 ? rk[k].bytes / t * 1e-9 : 0;
    }
  }
  B->segment_free(0, a);
  B->segment_free(0, b);
  B->segment_free(0, o);

  /* GEMM: CLBlast through the backend vs OpenBLAS on the host */
  typedef struct grow {
    int n;
    double clblast, clblast_f16, openblas; /* GFLOP/s; -1: not timed, st says why */
    ag_status st[2];
  } grow;
  grow gr[8];
  int ng = 0;
  for (char *tok = strtok(gemm_list, ","); tok && ng < 8; tok = strtok(NULL, ",")) {
    int m = atoi(tok);
    if (m <= 0) continue;
    size_t bytes = (size_t)m * m * 4;
    void *x, *y, *z;
    if (B->segment_alloc(0, bytes, &x) || B->segment_alloc(0, bytes, &y) ||
        B->segment_alloc(0, bytes, &z))
      break;
    double flops = 2.0 * m * m * m;
    grow *g = &gr[ng++];
    g->n = m;
    for (int half = 0; half < 2; half++) {
      ag_dtype dt = half ? AG_F16 : AG_F32;
      ag_kernel_call f = {AG_KERNEL_CALL_HEADER, .op = AG_K_FILL, .n_operands = 1, .s = {0.25}};
      f.o[0] = flat(x, dt, (int64_t)m * m);
      ag_status fs = B->launch(S, &f);
      f.o[0] = flat(y, dt, (int64_t)m * m);
      if (fs == AG_OK) fs = B->launch(S, &f);
      ag_kernel_call c = {AG_KERNEL_CALL_HEADER, .op = AG_K_MATMUL, .n_operands = 3, .s = {1, 0}};
      void *bases[3] = {z, x, y};
      for (int k = 0; k < 3; k++) {
        c.o[k] = (ag_koperand){.base = bases[k], .dtype = dt, .ndim = 3};
        c.o[k].shape[0] = 1;
        c.o[k].shape[1] = c.o[k].shape[2] = m;
        c.o[k].strides[0] = (int64_t)m * m;
        c.o[k].strides[1] = m;
        c.o[k].strides[2] = 1;
      }
      int r = m >= 1024 ? 2 : 5;
      double t = fs == AG_OK ? time_call(&c, r) : -1;
      g->st[half] = fs != AG_OK ? fs : t < 0 ? g_status : AG_OK;
      *(half ? &g->clblast_f16 : &g->clblast) = t > 0 ? flops / t * 1e-9 : -1;
    }
    float *ha = malloc(bytes), *hb = malloc(bytes), *hc = malloc(bytes);
    for (size_t i = 0; i < (size_t)m * m; i++) ha[i] = hb[i] = 0.25f;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, m, m, 1, ha, m, hb, m, 0, hc, m);
    int r = m >= 1024 ? 3 : 10;
    double t0 = now_s();
    for (int k = 0; k < r; k++)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, m, m, 1, ha, m, hb, m, 0, hc, m);
    g->openblas = flops / ((now_s() - t0) / r) * 1e-9;
    free(ha);
    free(hb);
    free(hc);
    B->segment_free(0, x);
    B->segment_free(0, y);
    B->segment_free(0, z);
  }

  if (json) {
    printf("{\"device\": \"%s\", \"numel\": %lld, \"ops\": [", props.name, (long long)n);
    for (int i = 0; i < nr; i++)
      if (rows[i].st != AG_OK)
        printf("%s{\"op\": \"%s\", \"status\": \"%s\", \"error\": \"%s\", \"ms\": null, \"gb_per_s\": null}",
               i ? ", " : "", rows[i].name, failed(rows[i].st), ag_status_name(rows[i].st));
      else
        printf("%s{\"op\": \"%s\", \"status\": \"ok\", \"ms\": %.4f, \"gb_per_s\": %.3f}", i ? ", " : "",
               rows[i].name, rows[i].seconds * 1e3, rows[i].gbs);
    printf("], \"gemm\": [");
    for (int i = 0; i < ng; i++) {
      printf("%s{\"n\": %d", i ? ", " : "", gr[i].n);
      for (int h = 0; h < 2; h++) {
        double v = h ? gr[i].clblast_f16 : gr[i].clblast;
        if (gr[i].st[h] != AG_OK) printf(", \"clblast_%s_gflops\": null, \"clblast_%s_status\": \"%s\"",
                                         h ? "f16" : "f32", h ? "f16" : "f32", failed(gr[i].st[h]));
        else printf(", \"clblast_%s_gflops\": %.2f", h ? "f16" : "f32", v);
      }
      printf(", \"openblas_f32_gflops\": %.2f}", gr[i].openblas);
    }
    printf("]}\n");
  } else {
    printf("OpenCL device: %s (%s), %lld elements per op\n\n", props.name, props.arch, (long long)n);
    printf("%-24s %10s %10s\n", "op", "ms", "GB/s");
    for (int i = 0; i < nr; i++)
      if (rows[i].st != AG_OK)
        printf("%-24s %10s  %s\n", rows[i].name, failed(rows[i].st), ag_status_name(rows[i].st));
      else
        printf("%-24s %10.3f %10.2f\n", rows[i].name, rows[i].seconds * 1e3, rows[i].gbs);
    printf("\n%-8s %18s %18s %18s\n", "GEMM n", "CLBlast f32 GF/s", "CLBlast f16* GF/s", "OpenBLAS f32 GF/s");
    for (int i = 0; i < ng; i++) {
      printf("%-8d", gr[i].n);
      for (int h = 0; h < 2; h++)
        if (gr[i].st[h] != AG_OK) printf(" %18s", failed(gr[i].st[h]));
        else printf(" %18.2f", h ? gr[i].clblast_f16 : gr[i].clblast);
      printf(" %18.2f\n", gr[i].openblas);
    }
    printf("* f16 is converted to f32 scratch by our kernels, multiplied by CLBlast Sgemm, converted back.\n");
  }
  B->stream_destroy(S);
  B->shutdown();
  return g_rc;
}
