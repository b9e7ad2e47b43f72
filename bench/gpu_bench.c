/* gpu_bench: op throughput of a GPU backend module on device 0, timed with
 * the backend's own events, against the device-to-device copy bandwidth it
 * measures first, and GEMM against cuBLAS called directly (dlopened, so
 * this program needs no CUDA headers). One JSON object per line on stdout:
 *   {"bench":"add_f32","ms":..,"gbps":..,"frac_copy":..}
 *   {"bench":"gemm_bf16_4096","ms":..,"tflops":..,"vs_cublas":..}
 * usage: gpu_bench <libanygrad-cuda.so|libanygrad-hip.so> [--quick] */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "anygrad/backend.h"

static const ag_backend *B;
static ag_bstream *S;
static ag_bevent *E0, *E1;
static double copy_gbps;
static int reps = 20;

/* The run ends with an error record instead of a time (the backend's
 * message on stderr). */
static void die(const char *what) {
  printf("{\"bench\":\"error\",\"what\":\"%s\"}\n", what);
  fprintf(stderr, "gpu_bench: %s: %s; no time reported\n", what, ag_last_error());
  exit(1);
}

static void *dalloc(size_t bytes) {
  void *p = NULL;
  if (B->segment_alloc(0, bytes, &p) != AG_OK) die("segment_alloc");
  return p;
}

static size_t dsz(ag_dtype dt) { return dt == AG_F16 || dt == AG_BF16 ? 2 : 4; }
static const char *dname(ag_dtype dt) { return dt == AG_F32 ? "f32" : dt == AG_F16 ? "f16" : dt == AG_BF16 ? "bf16" : "i32"; }

static void contig(ag_koperand *o, void *base, ag_dtype dt, int nd, const int64_t *sh) {
  memset(o, 0, sizeof *o);
  o->base = base;
  o->dtype = dt;
  o->ndim = nd;
  int64_t st = 1;
  for (int d = nd - 1; d >= 0; d--) {
    o->shape[d] = sh[d];
    o->strides[d] = st;
    st *= sh[d];
  }
}

/* Median-free but warm: 3 launches, then `reps` timed between two events. */
static double time_call(const ag_kernel_call *c) {
  for (int i = 0; i < 3; i++)
    if (B->launch(S, c) != AG_OK) die(c->name ? c->name : "launch");
  /* every launch's status is checked (no synchronization added): a refused
   * or failed launch ends the run instead of timing nothing */
  if (B->event_record(E0, S) != AG_OK) die("event_record");
  for (int i = 0; i < reps; i++)
    if (B->launch(S, c) != AG_OK) die(c->name ? c->name : "launch");
  if (B->event_record(E1, S) != AG_OK) die("event_record");
  if (B->event_synchronize(E1) != AG_OK) die("event_synchronize");
  float ms = 0;
  if (B->event_elapsed_ms(E0, E1, &ms) != AG_OK) die("event_elapsed_ms");
  return ms / reps;
}

static void emit_bw(const char *name, double ms, double bytes) {
  double gbps = bytes / (ms * 1e-3) / 1e9;
  printf("{\"bench\":\"%s\",\"ms\":%.5f,\"gbps\":%.1f,\"frac_copy\":%.3f}\n", name, ms, gbps,
         copy_gbps > 0 ? gbps / copy_gbps : 0);
  fflush(stdout);
}

static void bench_copy(size_t bytes) {
  void *a = dalloc(bytes), *b = dalloc(bytes);
  for (int i = 0; i < 3; i++)
    if (B->copy_d2d(S, b, 0, a, 0, bytes) != AG_OK) die("copy_d2d");
  if (B->event_record(E0, S) != AG_OK) die("event_record");
  for (int i = 0; i < reps; i++)
    if (B->copy_d2d(S, b, 0, a, 0, bytes) != AG_OK) die("copy_d2d");
  if (B->event_record(E1, S) != AG_OK) die("event_record");
  if (B->event_synchronize(E1) != AG_OK) die("event_synchronize");
  float ms = 0;
  if (B->event_elapsed_ms(E0, E1, &ms) != AG_OK) die("event_elapsed_ms");
  ms /= reps;
  copy_gbps = 2.0 * bytes / (ms * 1e-3) / 1e9; /* read + write */
  printf("{\"bench\":\"copy_d2d\",\"ms\":%.5f,\"gbps\":%.1f,\"frac_copy\":1.0}\n", ms, copy_gbps);
  B->segment_free(0, a);
  B->segment_free(0, b);
}

static void bench_elementwise(int64_t n) {
  static const ag_dtype dts[] = {AG_F32, AG_BF16};
  for (size_t k = 0; k < 2; k++) {
    ag_dtype dt = dts[k];
    size_t es = dsz(dt);
    void *x = dalloc(n * es), *y = dalloc(n * es), *z = dalloc(n * es);
    int64_t sh[1] = {n};
    ag_kernel_call c;
    char name[64];
    memset(&c, 0, sizeof c);
    c.struct_size = (uint32_t)sizeof c;
    c.op = AG_K_FILL;
    c.n_operands = 1;
    contig(&c.o[0], x, dt, 1, sh);
    c.s[0] = 0.5;
    snprintf(name, sizeof name, "fill_%s", dname(dt));
    emit_bw(name, time_call(&c), n * es);
    memset(&c, 0, sizeof c);
    c.struct_size = (uint32_t)sizeof c;
    c.op = AG_K_BINARY;
    c.sub = AG_B_ADD;
    c.s[0] = 1;
    c.n_operands = 3;
    contig(&c.o[0], z, dt, 1, sh);
    contig(&c.o[1], x, dt, 1, sh);
    contig(&c.o[2], y, dt, 1, sh);
    snprintf(name, sizeof name, "add_%s", dname(dt));
    emit_bw(name, time_call(&c), 3.0 * n * es);
    /* bias add: [n/1024, 1024] + [1024] through the strided path */
    int64_t sh2[2] = {n / 1024, 1024};
    contig(&c.o[0], z, dt, 2, sh2);
    contig(&c.o[1], x, dt, 2, sh2);
    contig(&c.o[2], y, dt, 2, sh2);
    c.o[2].strides[0] = 0;
    snprintf(name, sizeof name, "bias_add_%s", dname(dt));
    emit_bw(name, time_call(&c), 2.0 * n * es);
    memset(&c, 0, sizeof c);
    c.struct_size = (uint32_t)sizeof c;
    c.op = AG_K_UNARY;
    c.sub = AG_U_GELU;
    c.n_operands = 2;
    contig(&c.o[0], z, dt, 1, sh);
    contig(&c.o[1], x, dt, 1, sh);
    snprintf(name, sizeof name, "gelu_%s", dname(dt));
    emit_bw(name, time_call(&c), 2.0 * n * es);
    /* transpose copy [4096, n/4096] read through strides */
    int64_t r = 4096, cl = n / 4096, tsh[2] = {cl, r};
    c.sub = AG_U_COPY;
    contig(&c.o[0], z, dt, 2, tsh);
    contig(&c.o[1], x, dt, 2, tsh);
    c.o[1].strides[0] = 1;
    c.o[1].strides[1] = cl;
    snprintf(name, sizeof name, "transpose_copy_%s", dname(dt));
    emit_bw(name, time_call(&c), 2.0 * n * es);
    if (dt == AG_F32) {
      contig(&c.o[0], z, AG_BF16, 1, sh);
      contig(&c.o[1], x, AG_F32, 1, sh);
      emit_bw("cast_f32_bf16", time_call(&c), 6.0 * n);
    }
    /* reductions: all, rows of 4096, columns of [n/1024, 1024] */
    memset(&c, 0, sizeof c);
    c.struct_size = (uint32_t)sizeof c;
    c.op = AG_K_REDUCE;
    c.sub = AG_R_SUM;
    c.s[0] = 1;
    c.n_operands = 2;
    int64_t one[2] = {1, 1}, in3[3] = {1, n, 1};
    contig(&c.o[0], z, dt, 2, one);
    contig(&c.o[1], x, dt, 3, in3);
    c.i[0] = 1, c.i[1] = n, c.i[2] = 1;
    snprintf(name, sizeof name, "sum_all_%s", dname(dt));
    emit_bw(name, time_call(&c), (double)n * es);
    int64_t rows[2] = {n / 4096, 1}, in3r[3] = {n / 4096, 4096, 1};
    contig(&c.o[0], z, dt, 2, rows);
    contig(&c.o[1], x, dt, 3, in3r);
    c.i[0] = n / 4096, c.i[1] = 4096, c.i[2] = 1;
    snprintf(name, sizeof name, "sum_rows4096_%s", dname(dt));
    emit_bw(name, time_call(&c), (double)n * es);
    int64_t cols[2] = {1, 1024}, in3c[3] = {1, n / 1024, 1024};
    contig(&c.o[0], z, dt, 2, cols);
    contig(&c.o[1], x, dt, 3, in3c);
    c.i[0] = 1, c.i[1] = n / 1024, c.i[2] = 1024;
    snprintf(name, sizeof name, "sum_cols1024_%s", dname(dt));
    emit_bw(name, time_call(&c), (double)n * es);
    /* softmax rows of 4096 and 50304 (vocabulary-sized) */
    memset(&c, 0, sizeof c);
    c.struct_size = (uint32_t)sizeof c;
    c.op = AG_K_SOFTMAX;
    c.n_operands = 2;
    int64_t cw[2] = {4096, 50304};
    for (int w = 0; w < 2; w++) {
      int64_t ssh[2] = {n / cw[w], cw[w]};
      contig(&c.o[0], z, dt, 2, ssh);
      contig(&c.o[1], x, dt, 2, ssh);
      c.i[0] = ssh[0], c.i[1] = ssh[1];
      snprintf(name, sizeof name, "softmax_%lld_%s", (long long)cw[w], dname(dt));
      emit_bw(name, time_call(&c), 2.0 * ssh[0] * ssh[1] * es);
    }
    /* layer norm rows of 1024 */
    memset(&c, 0, sizeof c);
    c.struct_size = (uint32_t)sizeof c;
    c.op = AG_K_LAYERNORM;
    c.n_operands = 6;
    int64_t lsh[2] = {n / 1024, 1024}, lw[1] = {1024}, lr[1] = {n / 1024};
    contig(&c.o[0], z, dt, 2, lsh);
    contig(&c.o[1], x, dt, 2, lsh);
    contig(&c.o[2], y, dt, 1, lw);
    contig(&c.o[3], (char *)y + 4096 * es, dt, 1, lw);
    contig(&c.o[4], (char *)y + 8192 * es, AG_F32, 1, lr);
    contig(&c.o[5], (char *)y + 8192 * es + lr[0] * 4, AG_F32, 1, lr);
    c.i[0] = lsh[0], c.i[1] = 1024;
    c.s[0] = 1e-5;
    snprintf(name, sizeof name, "layernorm_1024_%s", dname(dt));
    emit_bw(name, time_call(&c), 2.0 * n * es);
    B->segment_free(0, x);
    B->segment_free(0, y);
    B->segment_free(0, z);
  }
}

/* The head of the CUDA/HIP modules' ag_bstream (kernels/gpu/gpu.h): the
 * vendor stream handle follows the device ordinal. */
typedef struct bstream_head {
  int dev;
  void *stream;
} bstream_head;

/* cuBLAS, dlopened: column-major C = A B with f32 compute. */
typedef int (*cublasCreate_fn)(void **);
typedef int (*cublasSetStream_fn)(void *, void *);
typedef int (*cublasGemmEx_fn)(void *, int, int, int, int, int, const void *, const void *, int, int, const void *,
                               int, int, const void *, void *, int, int, int, int);
enum { CUDA_R_32F = 0, CUDA_R_16F = 2, CUDA_R_16BF = 14, CUBLAS_COMPUTE_32F = 68, CUBLAS_GEMM_DEFAULT = -1 };

static void bench_gemm(int quick) {
  void *lib = dlopen("libcublas.so", RTLD_NOW | RTLD_LOCAL);
  if (!lib) lib = dlopen("libcublas.so.13", RTLD_NOW | RTLD_LOCAL);
  if (!lib) lib = dlopen("libcublas.so.12", RTLD_NOW | RTLD_LOCAL);
  cublasCreate_fn create = lib ? (cublasCreate_fn)dlsym(lib, "cublasCreate_v2") : NULL;
  cublasGemmEx_fn gemm = lib ? (cublasGemmEx_fn)dlsym(lib, "cublasGemmEx") : NULL;
  void *h = NULL;
  if (create && gemm && create(&h) != 0) h = NULL;
  static const int sizes[] = {1024, 4096, 8192};
  static const ag_dtype dts[] = {AG_F32, AG_BF16, AG_F16};
  for (int si = 0; si < (quick ? 2 : 3); si++)
    for (int di = 0; di < 3; di++) {
      int64_t n = sizes[si];
      ag_dtype dt = dts[di];
      size_t es = dsz(dt);
      void *a = dalloc(n * n * es), *b = dalloc(n * n * es), *o = dalloc(n * n * es);
      ag_kernel_call c;
      memset(&c, 0, sizeof c);
      c.struct_size = (uint32_t)sizeof c;
      c.op = AG_K_MATMUL;
      c.n_operands = 3;
      c.s[0] = 1;
      int64_t sh[3] = {1, n, n};
      contig(&c.o[0], o, dt, 3, sh);
      contig(&c.o[1], a, dt, 3, sh);
      contig(&c.o[2], b, dt, 3, sh);
      c.name = "gemm";
      double ms = time_call(&c), flops = 2.0 * n * n * n;
      double ref_ms = 0;
      if (h) {
        int t = dt == AG_F32 ? CUDA_R_32F : dt == AG_F16 ? CUDA_R_16F : CUDA_R_16BF;
        float alpha = 1, beta = 0;
        /* cuBLAS on the backend's own stream, so the backend's events time
         * both the same way */
        cublasSetStream_fn ss = (cublasSetStream_fn)dlsym(lib, "cublasSetStream_v2");
        if (ss) ss(h, ((const bstream_head *)S)->stream);
        for (int i = 0; i < 3; i++)
          if (gemm(h, 0, 0, (int)n, (int)n, (int)n, &alpha, b, t, (int)n, a, t, (int)n, &beta, o, t, (int)n,
                   CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) != 0)
            die("cublasGemmEx");
        if (B->event_record(E0, S) != AG_OK) die("event_record");
        for (int i = 0; i < reps; i++)
          if (gemm(h, 0, 0, (int)n, (int)n, (int)n, &alpha, b, t, (int)n, a, t, (int)n, &beta, o, t, (int)n,
                   CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) != 0)
            die("cublasGemmEx");
        if (B->event_record(E1, S) != AG_OK) die("event_record");
        if (B->event_synchronize(E1) != AG_OK) die("event_synchronize");
        float fms = 0;
        if (B->event_elapsed_ms(E0, E1, &fms) != AG_OK) die("event_elapsed_ms");
        ref_ms = fms / reps;
      }
      printf("{\"bench\":\"gemm_%s_%lld\",\"ms\":%.5f,\"tflops\":%.2f,\"cublas_ms\":%.5f,\"vs_cublas\":%.3f}\n",
             dname(dt), (long long)n, ms, flops / (ms * 1e-3) / 1e12, ref_ms, ref_ms > 0 ? ref_ms / ms : 0);
      fflush(stdout);
      B->segment_free(0, a);
      B->segment_free(0, b);
      B->segment_free(0, o);
    }
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: gpu_bench <module.so> [--quick]\n");
    return 1;
  }
  int quick = argc > 2 && strcmp(argv[2], "--quick") == 0;
  void *h = dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL);
  if (!h) {
    printf("{\"bench\":\"unavailable\",\"what\":\"%s\"}\n", dlerror());
    return 2;
  }
  ag_backend_module_get_fn get = (ag_backend_module_get_fn)dlsym(h, AG_BACKEND_MODULE_SYMBOL);
  B = get ? get() : NULL;
  char reason[256] = "";
  int n = 0;
  if (!B || B->init(&n, reason, sizeof reason) != AG_OK || n < 1) {
    printf("{\"bench\":\"unavailable\",\"what\":\"%s\"}\n", reason);
    return 2;
  }
  if (B->stream_create(0, &S) != AG_OK || B->event_create(0, true, &E0) != AG_OK ||
      B->event_create(0, true, &E1) != AG_OK)
    die("stream/event");
  ag_device_props p;
  B->device_props(0, &p);
  printf("{\"bench\":\"device\",\"name\":\"%s\",\"arch\":\"%s\",\"units\":%d,\"gemm\":\"%s\"}\n", p.name, p.arch,
         p.compute_units, getenv("AG_GPU_GEMM") ? getenv("AG_GPU_GEMM") : "blas");
  int64_t numel = quick ? (int64_t)1 << 24 : (int64_t)1 << 28; /* 1 GiB of f32 */
  bench_copy((size_t)numel * 4);
  if (!getenv("AG_BENCH_GEMM_ONLY")) bench_elementwise(numel);
  bench_gemm(quick);
  return 0;
}
