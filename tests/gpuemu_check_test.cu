/* The emulator as a checker: one small defective kernel per defect class
 * (shared-memory race, uninitialised shared read, shared out of bounds,
 * global access outside a tensor inside a cached segment, global access
 * outside every live allocation: past the end of a segment, before an
 * allocation, into a freed one; global read-modify-write race between
 * blocks). Compiled like the check module:
 * kernels instrumented, the emulator built with AGEMU_CHECK.
 *   gpuemu_check_test check   (AG_GPUEMU_CHECK=1): each launch fails, and
 *                             the message names the class and the kernel;
 *                             a correct kernel passes
 *   gpuemu_check_test plain   (no AG_GPUEMU_CHECK): each passes, silently
 *                             wrong; AG_GPUEMU_SCHED orders threads and blocks
 *   gpuemu_check_test sms N   AG_GPUEMU_SMS=N is the multiprocessor count
 *   gpuemu_check_test badenv  a malformed knob makes the emulator refuse */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include <cmocka.h>
}

#include "emu/emu_internal.h"

/* ---- the defects ---- */

/* (a) reads the upper neighbour's slot with no barrier after the writes */
__global__ void k_race_shared(float *out) {
  __shared__ float s[128];
  int t = (int)threadIdx.x, n = (int)blockDim.x;
  s[t] = 0.f;
  __syncthreads();
  s[t] = (float)(t + 1);
  out[t] = s[(t + 1) % n];
}
/* (b) half of the slots are never written */
__global__ void k_uninit_shared(float *out) {
  __shared__ float s[64];
  int t = (int)threadIdx.x;
  if (t < 32) s[t] = 1.f;
  __syncthreads();
  out[t] = s[t];
}
/* (c) thread 31 reads s[32] (shift comes from the host: 1) */
__global__ void k_oob_shared(float *out, int shift) {
  __shared__ float s[32];
  int t = (int)threadIdx.x;
  s[t] = (float)t;
  __syncthreads();
  out[t] = s[t + shift];
}
/* (d) writes n + 1 elements of an n-element tensor */
__global__ void k_oob_global(float *y, int n) {
  for (int i = (int)threadIdx.x; i <= n; i += (int)blockDim.x) y[i] = 1.f;
}
/* (f) reads the element before x */
__global__ void k_oob_before(const float *x, float *out) {
  if (threadIdx.x == 0) out[0] = x[-1];
}
/* (g) reads x[i] of an allocation that is gone */
__global__ void k_use_after_free(const float *x, float *out) { out[threadIdx.x] = x[threadIdx.x]; }
/* (e) every block adds one to a counter without an atomic */
__global__ void k_rmw_global(int *counter) {
  if (threadIdx.x == 0) *counter = *counter + 1;
}
/* correct: a barrier between the writes and the reads, an atomic counter */
__global__ void k_clean(float *out, int *counter) {
  __shared__ float s[128];
  int t = (int)threadIdx.x, n = (int)blockDim.x;
  s[t] = (float)(t + 1);
  __syncthreads();
  out[blockIdx.x * n + t] = s[(t + 1) % n];
  if (t == 0) atomicAdd(counter, 1);
}
/* which thread and block ran first */
__global__ void k_order(int *out, int *counter) {
  out[blockIdx.x * blockDim.x + threadIdx.x] = atomicAdd(counter, 1);
}

/* ---- helpers ---- */

static gpuStream_t g_s;

static void *dev_alloc(size_t bytes) {
  void *p = NULL;
  assert_int_equal(gpuMalloc(&p, bytes), gpuSuccess);
  assert_int_equal(gpuMemsetAsync(p, 0, bytes, g_s), gpuSuccess);
  return p;
}

/* The launch's outcome: "" or the error detail. */
static char g_detail[2048];
static const char *finish(void) {
  assert_int_equal(gpuGetLastError(), gpuSuccess); /* the configuration was valid */
  gpuError_t e = gpuStreamSynchronize(g_s);
  snprintf(g_detail, sizeof g_detail, "%s", e == gpuSuccess ? "" : agemu_error_detail());
  (void)gpuGetLastError(); /* the execution error was returned: clear it */
  agemu_error_detail_clear();
  return g_detail;
}

static bool g_check;

static void expect(const char *detail, const char *cls, const char *kernel) {
  if (!g_check) {
    if (*detail) fail_msg("without AG_GPUEMU_CHECK the launch failed: %s", detail);
    return;
  }
  if (!strstr(detail, cls) || !strstr(detail, kernel) || !strstr(detail, "block (") || !strstr(detail, "thread ("))
    fail_msg("want a %s error naming %s, its block and thread; got \"%s\"", cls, kernel, detail);
  printf("  %s\n", detail);
}

/* ---- tests ---- */

static void test_race_shared(void **state) {
  (void)state;
  float *out = (float *)dev_alloc(128 * sizeof(float));
  agk_launch(k_race_shared, 1, 128, 0, g_s, out);
  expect(finish(), "racecheck: shared-memory data race", "k_race_shared");
  assert_int_equal(gpuFree(out), gpuSuccess);
}

static void test_uninit_shared(void **state) {
  (void)state;
  float *out = (float *)dev_alloc(64 * sizeof(float));
  agk_launch(k_uninit_shared, 1, 64, 0, g_s, out);
  expect(finish(), "initcheck: uninitialised shared-memory read", "k_uninit_shared");
  assert_int_equal(gpuFree(out), gpuSuccess);
}

static void test_oob_shared(void **state) {
  (void)state;
  float *out = (float *)dev_alloc(32 * sizeof(float));
  agk_launch(k_oob_shared, 1, 32, 0, g_s, out, 1);
  expect(finish(), "memcheck: shared-memory access out of bounds", "k_oob_shared");
  if (g_check) assert_non_null(strstr(g_detail, "k_oob_shared(float*, int)::s"));
  assert_int_equal(gpuFree(out), gpuSuccess);
}

/* A 2 MiB segment of the caching allocator holds a 64-element tensor at
 * offset 512, rounded to 512 bytes as the allocator rounds: the write one
 * past its end lands in the rounding slack. */
static void test_oob_global(void **state) {
  (void)state;
  char *seg = (char *)dev_alloc((size_t)2 << 20);
  agemu_check_segment(seg, true);
  agemu::extent e = {(uintptr_t)(seg + 512), (uintptr_t)(seg + 512 + 64 * sizeof(float)), 0};
  agemu_check_call(&e, 1, true);
  agk_launch(k_oob_global, 1, 32, 0, g_s, (float *)(seg + 512), 64);
  agemu_check_call(NULL, 0, false);
  expect(finish(), "memcheck: invalid global write", "k_oob_global");
  if (g_check) assert_non_null(strstr(g_detail, "cached allocator segment"));
  agemu_check_segment(seg, false);
  assert_int_equal(gpuFree(seg), gpuSuccess);
}

/* Past the end of a segment: outside every allocation, where the checker
 * used to see host memory and let the write pass. Without the checker the
 * write would corrupt the host heap, so these run only in checking mode. */
static void oob_segment_end(size_t seg_bytes, size_t tensor_off, int n) {
  char *seg = (char *)dev_alloc(seg_bytes);
  agemu_check_segment(seg, true);
  agemu::extent e = {(uintptr_t)(seg + tensor_off), (uintptr_t)(seg + tensor_off + n * sizeof(float)), 0};
  assert_true(e.hi == (uintptr_t)(seg + seg_bytes)); /* the tensor ends the segment */
  agemu_check_call(&e, 1, true);
  agk_launch(k_oob_global, 1, 32, 0, g_s, (float *)(seg + tensor_off), n);
  agemu_check_call(NULL, 0, false);
  expect(finish(), "memcheck: invalid global write", "k_oob_global");
  char want[160];
  snprintf(want, sizeof want, "0 bytes past the end of the cached allocator segment [%p, %p)", (void *)seg,
           (void *)(seg + seg_bytes));
  if (!strstr(g_detail, "outside every live allocation of gpuemu:0") || !strstr(g_detail, want))
    fail_msg("want \"%s\" in \"%s\"", want, g_detail);
  agemu_check_segment(seg, false);
  assert_int_equal(gpuFree(seg), gpuSuccess);
}

/* A tensor that fills its segment exactly (a large tensor, a segment of its
 * own): one element past it. */
static void test_oob_segment_filled(void **state) {
  (void)state;
  if (!g_check) return;
  oob_segment_end(64 * sizeof(float), 0, 64);
}

/* The last block of a 2 MiB segment: one element past it. */
static void test_oob_segment_last_block(void **state) {
  (void)state;
  if (!g_check) return;
  oob_segment_end((size_t)2 << 20, ((size_t)2 << 20) - 512, 128);
}

/* A read one element before an allocation of the runtime's own (scratch). */
static void test_oob_before(void **state) {
  (void)state;
  if (!g_check) return;
  float *x = (float *)dev_alloc(256), *out = (float *)dev_alloc(256);
  agk_launch(k_oob_before, 1, 32, 0, g_s, (const float *)x, out);
  expect(finish(), "memcheck: invalid global read", "k_oob_before");
  if (!strstr(g_detail, "outside every live allocation") || !strstr(g_detail, "4 bytes before the start of"))
    fail_msg("want a read 4 bytes before the allocation; got \"%s\"", g_detail);
  assert_int_equal(gpuFree(x), gpuSuccess);
  assert_int_equal(gpuFree(out), gpuSuccess);
}

/* A launch given a pointer to memory freed before it ran. */
static void test_use_after_free(void **state) {
  (void)state;
  if (!g_check) return;
  float *x = (float *)dev_alloc(256), *out = (float *)dev_alloc(256);
  assert_int_equal(gpuFree(x), gpuSuccess);
  agk_launch(k_use_after_free, 1, 32, 0, g_s, (const float *)x, out);
  expect(finish(), "memcheck: invalid global read", "k_use_after_free");
  if (!strstr(g_detail, "freed before the launch ran")) fail_msg("want a use after free; got \"%s\"", g_detail);
  assert_int_equal(gpuFree(out), gpuSuccess);
}

static void test_rmw_global(void **state) {
  (void)state;
  int *counter = (int *)dev_alloc(sizeof(int));
  agk_launch(k_rmw_global, 64, 32, 0, g_s, counter);
  expect(finish(), "racecheck: global-memory data race between blocks", "k_rmw_global");
  if (!g_check) {
    int h = 0;
    assert_int_equal(gpuMemcpyAsync(&h, counter, sizeof h, gpuMemcpyDeviceToHost, g_s), gpuSuccess);
    assert_int_equal(gpuStreamSynchronize(g_s), gpuSuccess);
    assert_int_equal(h, 64); /* blocks never overlap here: silently "right" */
  }
  assert_int_equal(gpuFree(counter), gpuSuccess);
}

static void test_clean(void **state) {
  (void)state;
  gpuStream_t s0 = g_s;
  for (int dev = 0; dev < 2; dev++) {
    assert_int_equal(gpuSetDevice(dev), gpuSuccess);
    assert_int_equal(gpuStreamCreateWithFlags(&g_s, gpuStreamNonBlocking), gpuSuccess);
    float *out = (float *)dev_alloc(8 * 128 * sizeof(float));
    int *counter = (int *)dev_alloc(sizeof(int));
    agk_launch(k_clean, 8, 128, 0, g_s, out, counter);
    const char *d = finish();
    if (*d) fail_msg("a correct kernel failed on device %d: %s", dev, d);
    int h = 0;
    assert_int_equal(gpuMemcpyAsync(&h, counter, sizeof h, gpuMemcpyDeviceToHost, g_s), gpuSuccess);
    assert_int_equal(gpuStreamSynchronize(g_s), gpuSuccess);
    assert_int_equal(h, 8);
    assert_int_equal(gpuFree(out), gpuSuccess);
    assert_int_equal(gpuFree(counter), gpuSuccess);
    assert_int_equal(gpuStreamDestroy(g_s), gpuSuccess);
  }
  g_s = s0;
  assert_int_equal(gpuSetDevice(0), gpuSuccess);
}

/* AG_GPUEMU_SCHED: forward runs thread 0 and block 0 first, reverse the
 * last ones first, random:SEED a permutation that repeats for the seed. */
static void test_schedule(void **state) {
  (void)state;
  const char *v = getenv("AG_GPUEMU_SCHED");
  enum { B = 4, T = 64 };
  int *out = (int *)dev_alloc(B * T * sizeof(int)), *counter = (int *)dev_alloc(sizeof(int));
  agk_launch(k_order, B, T, 0, g_s, out, counter);
  assert_string_equal(finish(), "");
  int h[B * T];
  assert_int_equal(gpuMemcpyAsync(h, out, sizeof h, gpuMemcpyDeviceToHost, g_s), gpuSuccess);
  assert_int_equal(gpuStreamSynchronize(g_s), gpuSuccess);
  bool fwd = true, rev = true, seen[B * T] = {false};
  for (int i = 0; i < B * T; i++) {
    fwd &= h[i] == i;
    rev &= h[i] == B * T - 1 - i;
    assert_true(h[i] >= 0 && h[i] < B * T && !seen[h[i]]);
    seen[h[i]] = true;
  }
  if (!v || !strcmp(v, "forward")) assert_true(fwd);
  else if (!strcmp(v, "reverse")) assert_true(rev);
  else assert_true(!fwd && !rev);
  assert_int_equal(gpuFree(out), gpuSuccess);
  assert_int_equal(gpuFree(counter), gpuSuccess);
}

static int run_sms(const char *want) {
  gpuDeviceProp p;
  if (gpuGetDeviceProperties(&p, 1) != gpuSuccess || *agemu_config_error()) return 1;
  printf("multiProcessorCount %d\n", p.multiProcessorCount);
  return p.multiProcessorCount == atoi(want) ? 0 : 1;
}

static int run_badenv(void) {
  const char *why = agemu_config_error();
  printf("%s\n", why);
  return *why ? 0 : 1;
}

int main(int argc, char **argv) {
  if (argc > 2 && !strcmp(argv[1], "sms")) return run_sms(argv[2]);
  if (argc > 1 && !strcmp(argv[1], "badenv")) return run_badenv();
  g_check = argc > 1 && !strcmp(argv[1], "check");
  if (g_check != (agemu_checking() != 0)) {
    fprintf(stderr, "mode %s but AG_GPUEMU_CHECK is %s\n", g_check ? "check" : "plain",
            agemu_checking() ? "on" : "off");
    return 1;
  }
  if (gpuStreamCreateWithFlags(&g_s, gpuStreamNonBlocking) != gpuSuccess) return 1;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_race_shared), cmocka_unit_test(test_uninit_shared), cmocka_unit_test(test_oob_shared),
      cmocka_unit_test(test_oob_global),  cmocka_unit_test(test_oob_segment_filled),
      cmocka_unit_test(test_oob_segment_last_block), cmocka_unit_test(test_oob_before),
      cmocka_unit_test(test_use_after_free), cmocka_unit_test(test_rmw_global),    cmocka_unit_test(test_clean),
      cmocka_unit_test(test_schedule),
  };
  int r = cmocka_run_group_tests(tests, NULL, NULL);
  gpuStreamDestroy(g_s);
  return r;
}
