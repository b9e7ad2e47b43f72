/* The GPU emulator's own semantics, with kernels written in the dialect of
 * kernels/gpu and compiled by the host compiler against kernels/gpu/emu:
 * shuffles (widths, masks, directions) on both warp sizes, barriers over
 * live threads, divergent barriers and shuffles reported as errors, a shuffle
 * reading an exited lane, per-block shared memory, real atomics, each
 * flavour's launch limits, and, with AG_GPUEMU_DEFERRED=1 (argument
 * "deferred"), that a pinned buffer reused before its copy ran is caught. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

extern "C" {
#include <cmocka.h>
}

#include "emu/emu_internal.h"

static int *dev_ints(size_t n) {
  void *p = NULL;
  assert_int_equal(gpuMalloc(&p, n * sizeof(int)), gpuSuccess);
  return (int *)p;
}
static void to_host(int *h, const int *d, size_t n, gpuStream_t s) {
  assert_int_equal(gpuMemcpyAsync(h, d, n * sizeof(int), gpuMemcpyDeviceToHost, s), gpuSuccess);
  assert_int_equal(gpuStreamSynchronize(s), gpuSuccess);
}

/* ---- shuffles ---- */

__global__ void k_shfl(int *out, int kind, int arg, int width) {
  int lane = (int)(threadIdx.x % AGK_WARP), v = lane * 10 + 1, r;
  switch (kind) {
    case 0: r = __shfl_xor_sync(0xffffffffffffffffull, v, arg, width); break;
    case 1: r = __shfl_down_sync(0xffffffffffffffffull, v, arg, width); break;
    case 2: r = __shfl_up_sync(0xffffffffffffffffull, v, arg, width); break;
    default: r = __shfl_sync(0xffffffffffffffffull, v, arg, width); break;
  }
  out[blockIdx.x * blockDim.x + threadIdx.x] = r;
}

/* CUDA's rule: lanes form groups of width; a source outside the caller's
 * group (later for xor/down, earlier for up) gives the caller's own value. */
static int ref_shfl(int kind, int lane, int arg, int width) {
  int seg = lane / width * width, src;
  switch (kind) {
    case 0: src = lane ^ arg; if (src >= seg + width) src = lane; break;
    case 1: src = lane + arg; if (src >= seg + width) src = lane; break;
    case 2: src = lane - arg; if (src < seg) src = lane; break;
    default: src = seg + arg % width; break;
  }
  return src * 10 + 1;
}

static void test_shuffles(void **state) {
  (void)state;
  for (int dev = 0; dev < 2; dev++) {
    assert_int_equal(gpuSetDevice(dev), gpuSuccess);
    gpuStream_t s;
    assert_int_equal(gpuStreamCreateWithFlags(&s, gpuStreamNonBlocking), gpuSuccess);
    int W = dev == 0 ? 32 : 64, n = 2 * 128;
    int *d = dev_ints(n), h[256];
    for (int kind = 0; kind < 4; kind++)
      for (int width = 2; width <= W; width *= 2)
        for (int arg = 0; arg < width; arg += (arg < 3 ? 1 : 5)) {
          agk_launch(k_shfl, 2, 128, 0, s, d, kind, arg, width);
          assert_int_equal(gpuGetLastError(), gpuSuccess);
          to_host(h, d, n, s);
          for (int i = 0; i < n; i++)
            if (h[i] != ref_shfl(kind, i % 128 % W, arg, width))
              fail_msg("dev %d kind %d width %d arg %d: thread %d got %d, want %d", dev, kind, width, arg, i, h[i],
                       ref_shfl(kind, i % 128 % W, arg, width));
        }
    assert_int_equal(gpuFree(d), gpuSuccess);
    assert_int_equal(gpuStreamDestroy(s), gpuSuccess);
  }
}

/* ---- barriers ---- */

/* A block-wide sum through shared memory: every thread must see all the
 * writes of the phase before the barrier. */
__global__ void k_block_sum(int *out) {
  __shared__ int sh[1024];
  int t = (int)threadIdx.x;
  sh[t] = t + (int)blockIdx.x;
  __syncthreads();
  for (int stride = (int)blockDim.x / 2; stride > 0; stride /= 2) {
    if (t < stride) sh[t] += sh[t + stride];
    __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = sh[0];
}

/* Half the threads exit before the barrier: it waits for live threads only. */
__global__ void k_exit_then_sync(int *out) {
  __shared__ int sh[64];
  if (threadIdx.x >= 32) return;
  sh[threadIdx.x] = (int)threadIdx.x;
  __syncthreads();
  out[threadIdx.x] = sh[31 - threadIdx.x];
}

__global__ void k_divergent_barrier(int *out) {
  if (threadIdx.x < 16) {
    __syncthreads();
  } else {
    __syncthreads();
  }
  out[threadIdx.x] = 1;
}

__global__ void k_divergent_shuffle(int *out) {
  int v = (int)threadIdx.x;
  if (threadIdx.x % 32 < 8) v = __shfl_xor_sync(0xffffffffu, v, 1, 32);
  else __syncthreads();
  out[threadIdx.x] = v;
}

/* Lanes 16.. exit, then lane 0 reads lane 16 under a full mask. */
__global__ void k_read_exited(int *out) {
  if (threadIdx.x >= 16) return;
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, (int)threadIdx.x, 16, 32);
}

static void expect_error(gpuStream_t s, const char *needle) {
  gpuError_t e = gpuStreamSynchronize(s);
  const char *detail = agemu_error_detail();
  if (e != gpuErrorLaunchFailure || !strstr(detail, needle))
    fail_msg("want launch failure mentioning '%s', got %d: %s", needle, e, detail);
  agemu_error_detail_clear();
  assert_int_equal(gpuGetLastError(), gpuErrorLaunchFailure); /* also the thread's last error */
  assert_int_equal(gpuStreamSynchronize(s), gpuSuccess);     /* taken once */
}

static void test_barriers(void **state) {
  (void)state;
  for (int dev = 0; dev < 2; dev++) {
    assert_int_equal(gpuSetDevice(dev), gpuSuccess);
    gpuStream_t s;
    assert_int_equal(gpuStreamCreateWithFlags(&s, gpuStreamNonBlocking), gpuSuccess);
    int *d = dev_ints(1024), h[1024];
    for (int bs = 64; bs <= 1024; bs *= 4) {
      agk_launch(k_block_sum, 3, bs, 0, s, d);
      to_host(h, d, 3, s);
      for (int b = 0; b < 3; b++) assert_int_equal(h[b], bs * (bs - 1) / 2 + b * bs);
    }
    agk_launch(k_exit_then_sync, 1, 64, 0, s, d);
    to_host(h, d, 32, s);
    for (int i = 0; i < 32; i++) assert_int_equal(h[i], 31 - i);

    agk_launch(k_divergent_barrier, 2, 64, 0, s, d);
    expect_error(s, "divergent __syncthreads");
    agk_launch(k_divergent_shuffle, 1, 64, 0, s, d);
    expect_error(s, "divergent warp shuffle");
    agk_launch(k_read_exited, 1, 32, 0, s, d);
    expect_error(s, "has exited");
    assert_int_equal(gpuFree(d), gpuSuccess);
    assert_int_equal(gpuStreamDestroy(s), gpuSuccess);
  }
}

/* ---- atomics, launch limits ---- */

__global__ void k_atomic(float *acc) { atomicAdd(acc, 1.0f); }
__global__ void k_nop(int *out) { (void)out; }

static void test_atomics_and_limits(void **state) {
  (void)state;
  for (int dev = 0; dev < 2; dev++) {
    assert_int_equal(gpuSetDevice(dev), gpuSuccess);
    gpuStream_t s;
    assert_int_equal(gpuStreamCreateWithFlags(&s, gpuStreamNonBlocking), gpuSuccess);
    void *p;
    assert_int_equal(gpuMalloc(&p, 4), gpuSuccess);
    float zero = 0.f, got = -1.f;
    assert_int_equal(gpuMemcpyAsync(p, &zero, 4, gpuMemcpyHostToDevice, s), gpuSuccess);
    agk_launch(k_atomic, 64, 256, 0, s, (float *)p);
    assert_int_equal(gpuMemcpyAsync(&got, p, 4, gpuMemcpyDeviceToHost, s), gpuSuccess);
    assert_int_equal(gpuStreamSynchronize(s), gpuSuccess);
    assert_true(got == 64.f * 256.f);

    /* more than 1024 threads: both refuse */
    agk_launch(k_nop, 1, 1025, 0, s, (int *)p);
    assert_int_equal(gpuGetLastError(), gpuErrorInvalidConfiguration);
    /* gridDim.y 65536: over CUDA's limit, within HIP's work-item limit */
    agk_launch(k_nop, dim3(1, 65536), 1, 0, s, (int *)p);
    assert_int_equal(gpuGetLastError(), dev == 0 ? gpuErrorInvalidConfiguration : gpuSuccess);
    /* 2^23 blocks of 1024: 2^33 work-items, over HIP's 2^32; CUDA takes
     * it (not run here: the configuration is checked first) */
    if (dev == 1) {
      agk_launch(k_nop, 1u << 23, 1024, 0, s, (int *)p);
      assert_int_equal(gpuGetLastError(), gpuErrorInvalidConfiguration);
      assert_non_null(strstr(agemu_error_detail(), "HIP"));
    }
    agk_launch(k_nop, 1, 64, 1 << 20, s, (int *)p); /* 1 MiB shared */
    assert_int_equal(gpuGetLastError(), gpuErrorInvalidConfiguration);
    assert_int_equal(gpuFree(p), gpuSuccess);
    assert_int_equal(gpuFree(p), gpuErrorInvalidValue); /* double free */
    (void)gpuGetLastError();
    assert_int_equal(gpuStreamDestroy(s), gpuSuccess);
  }
}

/* ---- memory: capacity, non-device operands, virtual memory ---- */

static void test_memory(void **state) {
  (void)state;
  assert_int_equal(gpuSetDevice(0), gpuSuccess);
  size_t fr, tot;
  assert_int_equal(gpuMemGetInfo(&fr, &tot), gpuSuccess);
  void *p = NULL;
  assert_int_equal(gpuMalloc(&p, tot + 1), gpuErrorMemoryAllocation);
  assert_int_equal(gpuGetLastError(), gpuErrorMemoryAllocation);
  int host[4] = {0};
  gpuStream_t s;
  assert_int_equal(gpuStreamCreateWithFlags(&s, gpuStreamNonBlocking), gpuSuccess);
  /* a host pointer where device memory is expected */
  assert_int_equal(gpuMemcpyAsync(host, host + 2, 8, gpuMemcpyDeviceToDevice, s), gpuErrorInvalidValue);
  (void)gpuGetLastError();
  /* virtual memory: one map per call; unmapping part of one is refused */
  size_t g = agemu_vm_granularity(0);
  void *base;
  assert_int_equal(agemu_vm_reserve(0, 4 * g, &base), gpuSuccess);
  assert_int_equal(agemu_vm_map(0, base, 2 * g), gpuSuccess);
  assert_int_equal(agemu_vm_map(0, (char *)base + 2 * g, g), gpuSuccess);
  ((char *)base)[3 * g - 1] = 7; /* mapped: writable */
  assert_int_equal(agemu_vm_unmap(0, base, g), gpuErrorInvalidValue); /* half of the first */
  assert_int_equal(agemu_vm_release(0, base, 4 * g), gpuErrorInvalidValue); /* still mapped */
  assert_int_equal(agemu_vm_unmap(0, base, 3 * g), gpuSuccess);
  assert_int_equal(agemu_vm_release(0, base, 4 * g), gpuSuccess);
  (void)gpuGetLastError();
  assert_int_equal(gpuStreamDestroy(s), gpuSuccess);
}

/* ---- deferred streams ---- */

/* With AG_GPUEMU_DEFERRED=1 and a delay, a copy from pinned memory reads the
 * source when the stream gets to it: host code that rewrites the buffer
 * before the copy's event completed is caught by reading a wrong value. */
static void test_deferred_pinned_reuse(void **state) {
  (void)state;
  if (!agemu_deferred()) skip();
  assert_int_equal(gpuSetDevice(0), gpuSuccess);
  gpuStream_t s;
  gpuEvent_t done;
  assert_int_equal(gpuStreamCreateWithFlags(&s, gpuStreamNonBlocking), gpuSuccess);
  assert_int_equal(gpuEventCreateWithFlags(&done, gpuEventDisableTiming), gpuSuccess);
  int *pin, *d = dev_ints(1), got = 0;
  assert_int_equal(gpuHostAlloc((void **)&pin, sizeof(int), gpuHostAllocPortable), gpuSuccess);
  /* wrong: reuse at once */
  *pin = 1;
  assert_int_equal(gpuMemcpyAsync(d, pin, sizeof(int), gpuMemcpyHostToDevice, s), gpuSuccess);
  assert_int_equal(gpuEventRecord(done, s), gpuSuccess);
  assert_int_equal(gpuEventQuery(done), gpuErrorNotReady);
  *pin = 2;
  to_host(&got, d, 1, s);
  assert_int_equal(got, 2); /* the hazard is visible */
  /* right: wait for the copy's event before reuse */
  *pin = 3;
  assert_int_equal(gpuMemcpyAsync(d, pin, sizeof(int), gpuMemcpyHostToDevice, s), gpuSuccess);
  assert_int_equal(gpuEventRecord(done, s), gpuSuccess);
  assert_int_equal(gpuEventSynchronize(done), gpuSuccess);
  *pin = 4;
  to_host(&got, d, 1, s);
  assert_int_equal(got, 3);
  /* a pageable source is staged before the call returns */
  int pageable = 5;
  assert_int_equal(gpuMemcpyAsync(d, &pageable, sizeof(int), gpuMemcpyHostToDevice, s), gpuSuccess);
  pageable = 6;
  to_host(&got, d, 1, s);
  assert_int_equal(got, 5);
  /* a second stream ordered after the first by an event */
  gpuStream_t s2;
  assert_int_equal(gpuStreamCreateWithFlags(&s2, gpuStreamNonBlocking), gpuSuccess);
  *pin = 7;
  assert_int_equal(gpuMemcpyAsync(d, pin, sizeof(int), gpuMemcpyHostToDevice, s), gpuSuccess);
  assert_int_equal(gpuEventRecord(done, s), gpuSuccess);
  assert_int_equal(gpuStreamWaitEvent(s2, done, 0), gpuSuccess);
  to_host(&got, d, 1, s2);
  assert_int_equal(got, 7);
  assert_int_equal(gpuStreamDestroy(s2), gpuSuccess);
  assert_int_equal(gpuFreeHost(pin), gpuSuccess);
  assert_int_equal(gpuFree(d), gpuSuccess);
  assert_int_equal(gpuEventDestroy(done), gpuSuccess);
  assert_int_equal(gpuStreamDestroy(s), gpuSuccess);
}

/* ---- sanitizers: an out-of-bounds read inside a kernel ---- */

__global__ void k_oob_read(int *out, const int *in, int n) {
  int i = (int)(blockIdx.x * blockDim.x + threadIdx.x);
  out[i % n] = in[i]; /* reads past in[n - 1] */
}

/* Argument "oob": under ASan the read past a 64-int device buffer is
 * reported with k_oob_read on the stack (the test expects that report). */
static int run_oob(void) {
  gpuStream_t s;
  if (gpuSetDevice(0) != gpuSuccess || gpuStreamCreateWithFlags(&s, gpuStreamNonBlocking) != gpuSuccess) return 1;
  void *in, *out;
  if (gpuMalloc(&in, 64 * sizeof(int)) != gpuSuccess || gpuMalloc(&out, 64 * sizeof(int)) != gpuSuccess) return 1;
  agk_launch(k_oob_read, 1, 128, 0, s, (int *)out, (const int *)in, 64);
  (void)gpuStreamSynchronize(s);
  printf("no out-of-bounds report\n");
  return 1;
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "oob") == 0) return run_oob();
  const struct CMUnitTest deferred[] = {cmocka_unit_test(test_deferred_pinned_reuse)};
  if (argc > 1 && strcmp(argv[1], "deferred") == 0) return cmocka_run_group_tests(deferred, NULL, NULL);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_shuffles),
      cmocka_unit_test(test_barriers),
      cmocka_unit_test(test_atomics_and_limits),
      cmocka_unit_test(test_memory),
      cmocka_unit_test(test_deferred_pinned_reuse),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
