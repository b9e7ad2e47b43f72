/* Speed of the GPU emulator's execution model: fiber switches per second for
 * a barrier-heavy and a shuffle-heavy kernel, beside a bare ucontext
 * swapcontext ping-pong in the same run (the mechanism the emulator avoids),
 * interleaved over rounds; median and range. Single-threaded (one OS thread
 * runs a launch), so no thread setting applies.
 * usage: gpuemu_bench [rounds] [--json]. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <ucontext.h>

#include <algorithm>
#include <vector>

#include "emu/emu_internal.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

#define NBAR 200
__global__ void k_barriers(int *out) {
  int acc = 0;
  for (int i = 0; i < NBAR; i++) {
    acc += (int)threadIdx.x;
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = acc;
}
__global__ void k_shuffles(float *out) {
  float v = (float)threadIdx.x;
  for (int i = 0; i < NBAR / 5; i++)
    for (int m = 16; m > 0; m >>= 1) v += __shfl_xor_sync(0xffffffffu, v, m, 32);
  if (threadIdx.x == 0) out[blockIdx.x] = v;
}

/* ucontext ping-pong: the cost of the mechanism the emulator does not use */
static ucontext_t uc_main, uc_fib;
static volatile long uc_left;
static void uc_body(void) {
  while (uc_left > 0) {
    uc_left--;
    swapcontext(&uc_fib, &uc_main);
  }
}
static double ucontext_rate(long n) {
  static char stack[64 << 10];
  getcontext(&uc_fib);
  uc_fib.uc_stack.ss_sp = stack;
  uc_fib.uc_stack.ss_size = sizeof stack;
  uc_fib.uc_link = &uc_main;
  makecontext(&uc_fib, uc_body, 0);
  uc_left = n;
  double t = now_s();
  while (uc_left > 0) swapcontext(&uc_main, &uc_fib);
  t = now_s() - t;
  return 2.0 * (double)n / t; /* two switches per round trip */
}

static double kernel_rate(int which, gpuStream_t s, void *buf) {
  const int blocks = 8, threads = 256;
  double t = now_s();
  if (which == 0) agk_launch(k_barriers, blocks, threads, 0, s, (int *)buf);
  else agk_launch(k_shuffles, blocks, threads, 0, s, (float *)buf);
  if (gpuStreamSynchronize(s) != gpuSuccess) {
    fprintf(stderr, "gpuemu_bench: %s\n", agemu_error_detail());
    exit(1);
  }
  t = now_s() - t;
  /* each wait is a switch out and one back in; plus start and finish */
  double waits = which == 0 ? NBAR : (NBAR / 5) * 5;
  return 2.0 * (waits + 1) * blocks * threads / t;
}

static void stats(std::vector<double> v, double *med, double *lo, double *hi) {
  std::sort(v.begin(), v.end());
  *med = v[v.size() / 2];
  *lo = v.front();
  *hi = v.back();
}

int main(int argc, char **argv) {
  int rounds = 5;
  bool json = false;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--json")) json = true;
    else rounds = atoi(argv[i]) > 0 ? atoi(argv[i]) : rounds;
  }
  gpuSetDevice(0);
  gpuStream_t s;
  void *buf;
  gpuStreamCreateWithFlags(&s, gpuStreamNonBlocking);
  gpuMalloc(&buf, 4096);
  std::vector<double> r[3];
  for (int k = 0; k < rounds; k++) { /* interleaved: A B C A B C ... */
    r[0].push_back(kernel_rate(0, s, buf));
    r[1].push_back(kernel_rate(1, s, buf));
    r[2].push_back(ucontext_rate(400000));
  }
  const char *names[3] = {"emulator, __syncthreads kernel", "emulator, warp-shuffle kernel",
                          "ucontext swapcontext ping-pong"};
  printf("%-34s %14s %22s %10s\n", "mechanism", "M switches/s", "range", "ns/switch");
  double med[3], lo[3], hi[3];
  for (int i = 0; i < 3; i++) {
    stats(r[i], &med[i], &lo[i], &hi[i]);
    printf("%-34s %14.1f %10.1f - %-9.1f %10.1f\n", names[i], med[i] / 1e6, lo[i] / 1e6, hi[i] / 1e6, 1e9 / med[i]);
  }
  printf("(median of %d interleaved rounds; 8 blocks x 256 threads, %d waits per thread)\n", rounds, NBAR);
  if (json) {
    printf("{\"bench\":\"gpuemu\",\"rounds\":%d,\"results\":[", rounds);
    for (int i = 0; i < 3; i++)
      printf("%s{\"name\":\"%s\",\"switches_per_s_median\":%.0f,\"min\":%.0f,\"max\":%.0f}", i ? "," : "", names[i],
             med[i], lo[i], hi[i]);
    printf("]}\n");
  }
  gpuFree(buf);
  gpuStreamDestroy(s);
  return 0;
}
