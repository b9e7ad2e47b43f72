/* A stand-in for libnccl.so.2 and the CUDA runtime (also loaded as
 * libcudart.so and libcuda.so.1 through links), so the NCCL module's
 * threading runs without a GPU: one communicator, collectives that never
 * finish by themselves, and an abort after which the stream stays busy for a
 * few milliseconds, as kernels winding down do. A call on an aborted (freed)
 * communicator is counted instead of crashing. With NCCL_STUB_INIT=never a
 * peer never joins: ncclCommInitRank blocks for good and a nonblocking
 * init stays in progress. */
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define EXPORT __attribute__((visibility("default")))

enum { LIVE = 1, FREED = 2, JOINING = 3 };
static int init_never(void) {
  const char *v = getenv("NCCL_STUB_INIT");
  return v && strcmp(v, "never") == 0;
}
static atomic_int g_comm_state; /* the one communicator */
static atomic_int g_used_after_free, g_aborts, g_inflight;
static atomic_llong g_abort_ns;

static long long now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}
static void use(void *comm) {
  if (comm != (void *)&g_comm_state || atomic_load(&g_comm_state) != LIVE) atomic_fetch_add(&g_used_after_free, 1);
}

/* What the test reads back. */
EXPORT int nccl_stub_used_after_free(void) { return atomic_load(&g_used_after_free); }
EXPORT int nccl_stub_aborts(void) { return atomic_load(&g_aborts); }

EXPORT int ncclGetVersion(int *v) {
  *v = 22305;
  return 0;
}
EXPORT int ncclGetUniqueId(void *id) {
  memset(id, 0, 128);
  return 0;
}
EXPORT int ncclCommInitRank(void **comm, int n, char id[128], int rank) {
  (void)n;
  (void)id;
  (void)rank;
  while (init_never()) {
    struct timespec ts = {1, 0};
    nanosleep(&ts, NULL);
  }
  atomic_store(&g_comm_state, LIVE);
  *comm = &g_comm_state;
  return 0;
}
/* Nonblocking (the config's blocking is 0): in progress until peers join. */
EXPORT int ncclCommInitRankConfig(void **comm, int n, char id[128], int rank, void *config) {
  (void)n;
  (void)id;
  (void)rank;
  (void)config;
  atomic_store(&g_comm_state, init_never() ? JOINING : LIVE);
  *comm = &g_comm_state;
  return init_never() ? 7 : 0;
}
EXPORT int ncclCommAbort(void *comm) {
  if (atomic_load(&g_comm_state) != JOINING) use(comm);
  atomic_fetch_add(&g_aborts, 1);
  atomic_store(&g_abort_ns, now_ns());
  atomic_store(&g_comm_state, FREED);
  return 0;
}
EXPORT int ncclCommDestroy(void *comm) {
  use(comm);
  atomic_store(&g_comm_state, FREED);
  return 0;
}
EXPORT int ncclCommGetAsyncError(void *comm, int *err) {
  if (atomic_load(&g_comm_state) == JOINING) {
    *err = 7; /* ncclInProgress */
    return 0;
  }
  use(comm);
  *err = 0;
  return 0;
}
EXPORT const char *ncclGetErrorString(int r) { return r ? "stub error" : "no error"; }
static int enqueue(void *comm) {
  use(comm);
  atomic_store(&g_inflight, 1);
  return 0;
}
EXPORT int ncclAllReduce(const void *s, void *r, size_t n, int dt, int op, void *comm, void *st) {
  (void)s, (void)r, (void)n, (void)dt, (void)op, (void)st;
  return enqueue(comm);
}
EXPORT int ncclBroadcast(const void *s, void *r, size_t n, int dt, int root, void *comm, void *st) {
  (void)s, (void)r, (void)n, (void)dt, (void)root, (void)st;
  return enqueue(comm);
}
EXPORT int ncclAllGather(const void *s, void *r, size_t n, int dt, void *comm, void *st) {
  (void)s, (void)r, (void)n, (void)dt, (void)st;
  return enqueue(comm);
}
EXPORT int ncclReduceScatter(const void *s, void *r, size_t n, int dt, int op, void *comm, void *st) {
  (void)s, (void)r, (void)n, (void)dt, (void)op, (void)st;
  return enqueue(comm);
}
EXPORT int ncclGroupStart(void) { return 0; }
EXPORT int ncclGroupEnd(void) { return 0; }

/* ---- the runtime: one device, streams that report the collective ---- */
static char g_dev_mem[64];
EXPORT int cudaSetDevice(int d) { return d == 0 ? 0 : 101; }
EXPORT int cudaGetDeviceCount(int *n) {
  *n = 1;
  return 0;
}
EXPORT int cudaStreamCreateWithFlags(void **s, unsigned f) {
  (void)f;
  *s = (void *)1;
  return 0;
}
EXPORT int cudaStreamQuery(void *s) {
  (void)s;
  if (!atomic_load(&g_inflight)) return 0;
  if (atomic_load(&g_comm_state) == FREED && now_ns() - atomic_load(&g_abort_ns) > 5000000) {
    atomic_store(&g_inflight, 0);
    return 0;
  }
  return 600; /* not ready: the collective waits for peers that never come */
}
EXPORT int cudaStreamDestroy(void *s) {
  (void)s;
  return 0;
}
EXPORT int cudaMalloc(void **p, size_t n) {
  (void)n;
  *p = g_dev_mem;
  return 0;
}
EXPORT int cudaFree(void *p) {
  (void)p;
  return 0;
}
EXPORT const char *cudaGetErrorString(int e) { return e ? "stub runtime error" : "no error"; }
