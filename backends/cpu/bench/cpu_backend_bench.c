/* CPU backend measurements: launch overhead through the vtable and through
 * the public API, small-op chains, and throughput of the main kernels.
 * Run with AG_CPU_STREAMS=inline and =threaded to compare the modes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "anygrad/cpu.h"
#include "anygrad/ops.h"
#include "cpu_backend.h"

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static ag_koperand flat(void *p, ag_dtype dt, int64_t n) {
  ag_koperand o;
  memset(&o, 0, sizeof o);
  o.base = p;
  o.dtype = dt;
  o.ndim = 1;
  o.shape[0] = n;
  o.strides[0] = 1;
  return o;
}

/* The bench writes calls as the core does, each argument at the slot the
 * kernel-op table names (kops.h): O_<ID>("a") is operand a's slot in o[],
 * S_<ID>("alpha") a double's (or window integer's) in s[], I_<ID>("r") an
 * int64's in i[]. */
static int slot_found(int slot, const char *op, const char *nm) {
  if (slot < 0) {
    fprintf(stderr, "cpu_backend_bench: kernel op %s has no argument %s\n", op, nm);
    exit(1);
  }
  return slot;
}
#define BENCH_O(slot, nm, role, dt) if (!strcmp(want, #nm)) return slot;
#define BENCH_X(slot, nm) if (!strcmp(want, #nm)) return slot;
#define BENCH_NONE(...)
#define BENCH_SLOTS(ID)                                                                         \
  __attribute__((unused)) static int O_##ID(const char *want) {                                \
    AGK_ARGS_##ID(BENCH_O, BENCH_NONE, BENCH_NONE, BENCH_NONE, BENCH_NONE, BENCH_NONE)          \
    return slot_found(-1, #ID, want);                                                           \
  }                                                                                             \
  __attribute__((unused)) static int S_##ID(const char *want) {                                \
    AGK_ARGS_##ID(BENCH_NONE, BENCH_X, BENCH_NONE, BENCH_X, BENCH_NONE, BENCH_NONE)             \
    return slot_found(-1, #ID, want);                                                           \
  }                                                                                             \
  __attribute__((unused)) static int I_##ID(const char *want) {                                \
    AGK_ARGS_##ID(BENCH_NONE, BENCH_NONE, BENCH_X, BENCH_NONE, BENCH_NONE, BENCH_NONE)          \
    return slot_found(-1, #ID, want);                                                           \
  }
BENCH_SLOTS(UNARY)
BENCH_SLOTS(BINARY)
BENCH_SLOTS(REDUCE)
BENCH_SLOTS(MATMUL)

static ag_kernel_call call_of(ag_kop op, int sub, int n_operands) {
  ag_kernel_call c;
  memset(&c, 0, sizeof c);
  c.struct_size = (uint32_t)sizeof c;
  c.op = op;
  c.sub = sub;
  c.n_operands = n_operands;
  return c;
}

static ag_kernel_call binop(void *o, void *a, void *b, ag_dtype dt, int64_t n) {
  ag_kernel_call c = call_of(AG_K_BINARY, AG_B_ADD, 3);
  c.s[S_BINARY("s0")] = 1; /* ADD: out = a + s0 * b */
  c.o[O_BINARY("out")] = flat(o, dt, n);
  c.o[O_BINARY("a")] = flat(a, dt, n);
  c.o[O_BINARY("b")] = flat(b, dt, n);
  return c;
}

int main(int argc, char **argv) {
  const ag_backend *be = ag__cpu_backend();
  int nd;
  char reason[128];
  if (be->init(&nd, reason, sizeof reason) != AG_OK) return 1;
  ag_bstream *s;
  be->stream_create(0, &s);
  const char *mode = ag_cpu_stream_mode_get() == AG_CPU_STREAMS_INLINE ? "inline" : "threaded";
  printf("mode %s\n", mode);

  /* 1. vtable launch of a 16-element f32 add */
  float a[16], b[16], o[16];
  for (int i = 0; i < 16; i++) a[i] = b[i] = (float)i;
  ag_kernel_call c = binop(o, a, b, AG_F32, 16);
  const int R = 2000000;
  double t = now();
  for (int i = 0; i < R; i++) be->launch(s, &c);
  be->stream_synchronize(s);
  printf("launch add f32[16] via vtable (+sync at end): %.1f ns/op\n", (now() - t) / R * 1e9);

  /* 2. the same with a synchronize after every op (round trip) */
  const int R2 = 200000;
  t = now();
  for (int i = 0; i < R2; i++) {
    be->launch(s, &c);
    be->stream_synchronize(s);
  }
  printf("launch + stream sync, f32[16]: %.1f ns/op\n", (now() - t) / R2 * 1e9);

  /* 3. public API: ag_add on 16-element tensors (allocation, validation, launch) */
  int64_t sh[1] = {16};
  ag_tensor *x = ag_from_host(AG_CPU, AG_F32, 1, sh, a), *y = ag_from_host(AG_CPU, AG_F32, 1, sh, b);
  if (x && y) {
    for (int i = 0; i < 1000; i++) ag_tensor_release(ag_add(x, y));
    const int R3 = 500000;
    t = now();
    for (int i = 0; i < R3; i++) ag_tensor_release(ag_add(x, y));
    ag_device_synchronize(AG_CPU);
    printf("ag_add f32[16] (public API, result released): %.1f ns/op\n", (now() - t) / R3 * 1e9);
  } else {
    printf("public API unavailable: %s\n", ag_last_error());
  }
  ag_tensor_release(x);
  ag_tensor_release(y);

  /* 4. throughput */
  const int64_t N = 1 << 22;
  float *A = malloc(N * 4), *B = malloc(N * 4), *O = malloc(N * 4);
  for (int64_t i = 0; i < N; i++) A[i] = B[i] = (float)(i % 100) * 0.01f;
  c = binop(O, A, B, AG_F32, N);
  be->launch(s, &c);
  be->stream_synchronize(s);
  t = now();
  for (int i = 0; i < 20; i++) be->launch(s, &c);
  be->stream_synchronize(s);
  double dt = (now() - t) / 20;
  printf("add f32[4M]: %.3f ms (%.1f GB/s)\n", dt * 1e3, 12.0 * N / dt / 1e9);
  c = call_of(AG_K_UNARY, AG_U_GELU, 2);
  c.s[S_UNARY("s0")] = 1;
  c.o[O_UNARY("y")] = flat(O, AG_F32, N);
  c.o[O_UNARY("x")] = flat(A, AG_F32, N);
  t = now();
  for (int i = 0; i < 5; i++) be->launch(s, &c);
  be->stream_synchronize(s);
  printf("gelu f32[4M]: %.3f ms\n", (now() - t) / 5 * 1e3);
  c = call_of(AG_K_REDUCE, AG_R_SUM, 2);
  c.s[S_REDUCE("scale")] = 1;
  c.i[I_REDUCE("outer")] = 1;
  c.i[I_REDUCE("r")] = N;
  c.i[I_REDUCE("inner")] = 1;
  c.o[O_REDUCE("out")] = flat(O, AG_F32, 1);
  c.o[O_REDUCE("x")] = flat(A, AG_F32, N);
  t = now();
  for (int i = 0; i < 10; i++) be->launch(s, &c);
  be->stream_synchronize(s);
  dt = (now() - t) / 10;
  printf("sum f32[4M] (f64 accumulation): %.3f ms (%.1f GB/s)\n", dt * 1e3, 4.0 * N / dt / 1e9);
  for (int d = 0; d < 2; d++) {
    const int64_t M = 512;
    ag_dtype dtp = d ? AG_F16 : AG_F32;
    c = call_of(AG_K_MATMUL, 0, 3);
    c.s[S_MATMUL("alpha")] = 1;
    ag_koperand *ops[3] = {&c.o[O_MATMUL("c")], &c.o[O_MATMUL("a")], &c.o[O_MATMUL("b")]};
    void *ptr[3] = {O, A, B};
    for (int k = 0; k < 3; k++) {
      *ops[k] = flat(ptr[k], dtp, 0);
      ops[k]->ndim = 2;
      ops[k]->shape[0] = ops[k]->shape[1] = M;
      ops[k]->strides[0] = M;
      ops[k]->strides[1] = 1;
    }
    be->launch(s, &c);
    be->stream_synchronize(s);
    t = now();
    for (int i = 0; i < 5; i++) be->launch(s, &c);
    be->stream_synchronize(s);
    dt = (now() - t) / 5;
    printf("matmul %s 512^3: %.3f ms (%.1f GFLOP/s)\n", d ? "f16" : "f32", dt * 1e3,
           2.0 * M * M * M / dt / 1e9);
  }

  /* 5. overlap: a chain of medium ops interleaved with host work (data
   * loading stand-in). Inline mode serialises the two; threaded mode can
   * overlap them when a core is free. */
  const int64_t Nm = 1 << 16;
  const int R5 = 500;
  c = binop(O, A, B, AG_F32, Nm);
  volatile double sink = 0;
  t = now();
  for (int i = 0; i < R5; i++) be->launch(s, &c);
  be->stream_synchronize(s);
  double t_ops = now() - t;
  t = now();
  for (int i = 0; i < R5; i++)
    for (int k = 0; k < 20000; k++) sink += k * 1e-9;
  double t_host = now() - t;
  t = now();
  for (int i = 0; i < R5; i++) {
    be->launch(s, &c);
    for (int k = 0; k < 20000; k++) sink += k * 1e-9;
  }
  be->stream_synchronize(s);
  printf("%d x add f32[64K]: ops alone %.1f ms, host work alone %.1f ms, interleaved %.1f ms\n",
         R5, t_ops * 1e3, t_host * 1e3, (now() - t) * 1e3);
  (void)sink; /* the host work exists only for its time */
  (void)argc;
  (void)argv;
  be->stream_destroy(s);
  return 0;
}
