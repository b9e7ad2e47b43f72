/* A stand-in for libnccl.so.2 / librccl.so.1 and the CUDA / HIP runtime
 * (also loaded as libcudart.so, libcuda.so.1 and libamdhip64.so through
 * links), so the NCCL module's threading runs without a GPU. One
 * communicator; "device memory" is host memory, and a collective's kernel
 * writes its result (every rank holding the same data) when a stream query
 * finds it finished. A call on an aborted (freed) communicator is counted
 * instead of crashing.
 *
 * By default a collective is enqueued at once and never finishes (its peers
 * never come), and after an abort the stream stays busy for a few
 * milliseconds, as kernels winding down do. nccl_stub_set() models the rest
 * of what a non-blocking communicator may do:
 *   enqueue            0: enqueued before the call returns ncclSuccess;
 *                      1: the call returns ncclInProgress and NCCL enqueues
 *                      on the enqueue_polls-th ncclCommGetAsyncError poll;
 *                      2: ... and enqueues from another thread after
 *                      enqueue_delay_us. Until then ncclCommGetAsyncError
 *                      says ncclInProgress, the stream is idle, and any other
 *                      call on the communicator is ncclInvalidUsage (counted).
 *   run_us             how long an enqueued kernel runs (-1: for good)
 *   min_not_ready      stream queries that say not ready per kernel, at least
 *   async_error        reported by ncclCommGetAsyncError once a collective
 *                      is enqueued (its kernel then never finishes)
 *   release_polls      ncclCommAbort / ncclCommDestroy return ncclInProgress
 *                      and finish on this many-th ncclCommGetAsyncError poll
 *   release_error      what they end with (returned, or the last poll's state)
 * The HIP runtime records hipErrorNotReady from hipStreamQuery as the
 * thread's last error (hipGetLastError returns and clears it), as ROCm does;
 * the CUDA runtime does not.
 * With NCCL_STUB_INIT=never a peer never joins: ncclCommInitRank blocks for
 * good and a nonblocking init stays in progress. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define EXPORT __attribute__((visibility("default")))

enum { LIVE = 1, FREED = 2, JOINING = 3, RELEASING = 4 };
enum { SUCCESS = 0, SYSTEM_ERROR = 2, INVALID_ARGUMENT = 4, INVALID_USAGE = 5, IN_PROGRESS = 7 };
enum { NOT_READY = 600 };
enum { K_ALL_REDUCE, K_BROADCAST, K_ALL_GATHER, K_REDUCE_SCATTER };
enum { DT_I32 = 2, DT_F32 = 7, DT_F64 = 8 };
enum { OP_SUM = 0, OP_AVG = 4 };

static int init_never(void) {
  const char *v = getenv("NCCL_STUB_INIT");
  return v && strcmp(v, "never") == 0;
}
static atomic_int g_comm_state; /* the one communicator */
static atomic_int g_used_after_free, g_aborts, g_destroys, g_invalid_usage;
static atomic_llong g_abort_ns;

/* knobs (nccl_stub_set), read at each call */
static atomic_llong k_enqueue, k_enqueue_polls = 3, k_enqueue_delay_us = 2000, k_run_us = -1, k_min_not_ready,
                    k_async_error, k_release_polls, k_release_error;

typedef struct op {
  int kind, dt, redop;
  const void *src;
  void *dst;
  size_t count;
  long long end_ns; /* -1: never */
  int not_ready_left;
} op;

/* Everything below is guarded by g_mu. */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv; /* on CLOCK_MONOTONIC: wakes the enqueuing thread */
static pthread_once_t g_cv_once = PTHREAD_ONCE_INIT;
static int g_nranks = 1;
static bool g_pending;      /* a call returned ncclInProgress, not enqueued yet */
static op g_pending_op;
static long long g_pending_polls;
static int g_async_err;     /* the communicator's asynchronous error */
static long long g_release_left;
static op g_queue[16];      /* the stream: kernels in order */
static int g_queue_n;
static pthread_t g_enqueuer;
static bool g_enqueuer_live;

static void cv_init(void) {
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&g_cv, &ca);
  pthread_condattr_destroy(&ca);
}
static long long now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}
static void use(void *comm) {
  if (comm != (void *)&g_comm_state || atomic_load(&g_comm_state) != LIVE) atomic_fetch_add(&g_used_after_free, 1);
}

/* What the test reads back and sets. */
EXPORT int nccl_stub_used_after_free(void) { return atomic_load(&g_used_after_free); }
EXPORT int nccl_stub_aborts(void) { return atomic_load(&g_aborts); }
EXPORT int nccl_stub_destroys(void) { return atomic_load(&g_destroys); }
/* calls on the communicator while a call was still in progress */
EXPORT int nccl_stub_invalid_usage(void) { return atomic_load(&g_invalid_usage); }
/* kernels still on the stream */
EXPORT int nccl_stub_queued(void) {
  pthread_mutex_lock(&g_mu);
  int n = g_queue_n;
  pthread_mutex_unlock(&g_mu);
  return n;
}
/* an abort or destroy still in progress */
EXPORT int nccl_stub_releasing(void) { return atomic_load(&g_comm_state) == RELEASING; }
EXPORT int nccl_stub_set(const char *name, long long v) {
  static const struct {
    const char *name;
    atomic_llong *k;
  } knobs[] = {{"enqueue", &k_enqueue},         {"enqueue_polls", &k_enqueue_polls},
               {"enqueue_delay_us", &k_enqueue_delay_us}, {"run_us", &k_run_us},
               {"min_not_ready", &k_min_not_ready}, {"async_error", &k_async_error},
               {"release_polls", &k_release_polls}, {"release_error", &k_release_error}};
  for (size_t i = 0; i < sizeof knobs / sizeof knobs[0]; i++)
    if (strcmp(name, knobs[i].name) == 0) {
      atomic_store(knobs[i].k, v);
      return 0;
    }
  return -1;
}
static void join_enqueuer(void) {
  pthread_mutex_lock(&g_mu);
  bool live = g_enqueuer_live;
  pthread_t t = g_enqueuer;
  g_enqueuer_live = false;
  pthread_mutex_unlock(&g_mu);
  if (live) pthread_join(t, NULL);
}
/* Defaults back, counters to 0, the stream emptied. */
EXPORT void nccl_stub_reset(void) {
  pthread_once(&g_cv_once, cv_init);
  pthread_mutex_lock(&g_mu);
  g_pending = false;
  pthread_cond_broadcast(&g_cv);
  pthread_mutex_unlock(&g_mu);
  join_enqueuer();
  atomic_store(&k_enqueue, 0);
  atomic_store(&k_enqueue_polls, 3);
  atomic_store(&k_enqueue_delay_us, 2000);
  atomic_store(&k_run_us, -1);
  atomic_store(&k_min_not_ready, 0);
  atomic_store(&k_async_error, 0);
  atomic_store(&k_release_polls, 0);
  atomic_store(&k_release_error, 0);
  atomic_store(&g_used_after_free, 0);
  atomic_store(&g_aborts, 0);
  atomic_store(&g_destroys, 0);
  atomic_store(&g_invalid_usage, 0);
  pthread_mutex_lock(&g_mu);
  g_pending = false;
  g_queue_n = 0;
  g_async_err = 0;
  pthread_mutex_unlock(&g_mu);
}

/* Put o on the stream (g_mu held): it starts when the kernels before it end. */
static void enqueue_locked(op o) {
  long long start = now_ns(), run = atomic_load(&k_run_us);
  if (g_queue_n > 0) {
    long long prev = g_queue[g_queue_n - 1].end_ns;
    start = prev < 0 ? -1 : prev > start ? prev : start;
  }
  o.end_ns = start < 0 || run < 0 ? -1 : start + run * 1000;
  o.not_ready_left = (int)atomic_load(&k_min_not_ready);
  if (g_queue_n < (int)(sizeof g_queue / sizeof g_queue[0])) g_queue[g_queue_n++] = o;
  g_async_err = (int)atomic_load(&k_async_error);
  if (g_async_err)
    for (int i = 0; i < g_queue_n; i++) g_queue[i].end_ns = -1; /* waits for the failed peer */
}

static size_t dt_size(int dt) { return dt == DT_F64 ? 8 : 4; }
static double load(int dt, const void *p, size_t i) {
  if (dt == DT_F64) return ((const double *)p)[i];
  if (dt == DT_F32) return ((const float *)p)[i];
  return ((const int32_t *)p)[i];
}
static void store(int dt, void *p, size_t i, double v) {
  if (dt == DT_F64) ((double *)p)[i] = v;
  else if (dt == DT_F32) ((float *)p)[i] = (float)v;
  else ((int32_t *)p)[i] = (int32_t)v;
}
/* The result on rank 0 when every rank holds what this one holds. */
static void complete(const op *o) {
  int n = g_nranks;
  double mul = o->redop == OP_SUM ? n : 1;
  switch (o->kind) {
    case K_ALL_REDUCE:
      for (size_t i = 0; i < o->count; i++) store(o->dt, o->dst, i, load(o->dt, o->src, i) * mul);
      break;
    case K_REDUCE_SCATTER:
      for (size_t i = 0; i < o->count; i++) store(o->dt, o->dst, i, load(o->dt, o->src, i) * mul);
      break;
    case K_ALL_GATHER:
      for (int r = 0; r < n; r++) memmove((char *)o->dst + (size_t)r * o->count * dt_size(o->dt), o->src,
                                          o->count * dt_size(o->dt));
      break;
    default: break; /* broadcast from rank 0: in place */
  }
}

/* NCCL's own thread: enqueues the pending call after the delay, unless an
 * abort dropped it first (which wakes it). */
static void *enqueuer_main(void *arg) {
  (void)arg;
  long long at = now_ns() + atomic_load(&k_enqueue_delay_us) * 1000;
  struct timespec ts = {(time_t)(at / 1000000000), (long)(at % 1000000000)};
  pthread_mutex_lock(&g_mu);
  while (g_pending && now_ns() < at) pthread_cond_timedwait(&g_cv, &g_mu, &ts);
  if (g_pending && atomic_load(&g_comm_state) == LIVE) {
    g_pending = false;
    enqueue_locked(g_pending_op);
  }
  pthread_mutex_unlock(&g_mu);
  return NULL;
}

static int collective(void *comm, int kind, const void *s, void *r, size_t n, int dt, int redop) {
  if (dt != DT_I32 && dt != DT_F32 && dt != DT_F64) return INVALID_ARGUMENT;
  use(comm);
  pthread_mutex_lock(&g_mu);
  bool pending = g_pending;
  pthread_mutex_unlock(&g_mu);
  if (pending) { /* NCCL: no call before the previous one left ncclInProgress */
    atomic_fetch_add(&g_invalid_usage, 1);
    return INVALID_USAGE;
  }
  join_enqueuer(); /* done with the previous call */
  pthread_mutex_lock(&g_mu);
  op o = {.kind = kind, .dt = dt, .redop = redop, .src = s, .dst = r, .count = n};
  long long mode = atomic_load(&k_enqueue);
  int rc = SUCCESS;
  if (mode == 0) {
    enqueue_locked(o);
  } else {
    g_pending = true;
    g_pending_op = o;
    g_pending_polls = atomic_load(&k_enqueue_polls);
    rc = IN_PROGRESS;
    pthread_once(&g_cv_once, cv_init);
    if (mode == 2 && pthread_create(&g_enqueuer, NULL, enqueuer_main, NULL) == 0) g_enqueuer_live = true;
  }
  pthread_mutex_unlock(&g_mu);
  return rc;
}

EXPORT int ncclGetVersion(int *v) {
  *v = 22305;
  return 0;
}
EXPORT int ncclGetUniqueId(void *id) {
  memset(id, 0, 128);
  return 0;
}
EXPORT int ncclCommInitRank(void **comm, int n, char id[128], int rank) {
  (void)id;
  (void)rank;
  while (init_never()) {
    struct timespec ts = {1, 0};
    nanosleep(&ts, NULL);
  }
  pthread_mutex_lock(&g_mu);
  g_nranks = n;
  pthread_mutex_unlock(&g_mu);
  atomic_store(&g_comm_state, LIVE);
  *comm = &g_comm_state;
  return 0;
}
/* Nonblocking (the config's blocking is 0): in progress until peers join. */
EXPORT int ncclCommInitRankConfig(void **comm, int n, char id[128], int rank, void *config) {
  (void)id;
  (void)rank;
  (void)config;
  pthread_mutex_lock(&g_mu);
  g_nranks = n;
  g_async_err = 0;
  pthread_mutex_unlock(&g_mu);
  atomic_store(&g_comm_state, init_never() ? JOINING : LIVE);
  *comm = &g_comm_state;
  return init_never() ? IN_PROGRESS : SUCCESS;
}
/* Abort and destroy free the communicator, at once or (release_polls) when
 * a later ncclCommGetAsyncError poll says they are done. */
static int release(void *comm, bool abort) {
  pthread_mutex_lock(&g_mu);
  if (abort) {
    atomic_fetch_add(&g_aborts, 1);
    atomic_store(&g_abort_ns, now_ns());
    g_pending = false; /* what was never enqueued never runs */
    pthread_once(&g_cv_once, cv_init);
    pthread_cond_broadcast(&g_cv);
  } else {
    atomic_fetch_add(&g_destroys, 1);
  }
  int rc = (int)atomic_load(&k_release_error);
  g_release_left = atomic_load(&k_release_polls);
  if (g_release_left > 0) {
    atomic_store(&g_comm_state, RELEASING);
    rc = IN_PROGRESS;
  } else {
    atomic_store(&g_comm_state, FREED);
  }
  pthread_mutex_unlock(&g_mu);
  (void)comm;
  return rc;
}
EXPORT int ncclCommAbort(void *comm) {
  int s = atomic_load(&g_comm_state);
  if (s != JOINING) use(comm);
  int rc = release(comm, true);
  join_enqueuer();
  return rc;
}
EXPORT int ncclCommDestroy(void *comm) {
  use(comm);
  join_enqueuer();
  return release(comm, false);
}
EXPORT int ncclCommGetAsyncError(void *comm, int *err) {
  int s = atomic_load(&g_comm_state);
  if (s == JOINING) {
    *err = IN_PROGRESS;
    return 0;
  }
  pthread_mutex_lock(&g_mu);
  if (s == RELEASING && comm == (void *)&g_comm_state) {
    if (--g_release_left > 0) {
      *err = IN_PROGRESS;
    } else {
      *err = (int)atomic_load(&k_release_error);
      atomic_store(&g_comm_state, FREED);
    }
    pthread_mutex_unlock(&g_mu);
    return 0;
  }
  use(comm);
  if (g_pending && atomic_load(&k_enqueue) == 1 && --g_pending_polls <= 0) {
    g_pending = false;
    enqueue_locked(g_pending_op);
  }
  *err = g_pending ? IN_PROGRESS : g_async_err;
  pthread_mutex_unlock(&g_mu);
  return 0;
}
EXPORT const char *ncclGetErrorString(int r) {
  switch (r) {
    case SUCCESS: return "no error";
    case SYSTEM_ERROR: return "unhandled system error (stub)";
    case INVALID_ARGUMENT: return "invalid argument (stub)";
    case INVALID_USAGE: return "invalid usage (stub)";
    case IN_PROGRESS: return "NCCL operation in progress (stub)";
    default: return "stub error";
  }
}
EXPORT int ncclAllReduce(const void *s, void *r, size_t n, int dt, int op, void *comm, void *st) {
  (void)st;
  return collective(comm, K_ALL_REDUCE, s, r, n, dt, op);
}
EXPORT int ncclBroadcast(const void *s, void *r, size_t n, int dt, int root, void *comm, void *st) {
  (void)root, (void)st;
  return collective(comm, K_BROADCAST, s, r, n, dt, OP_SUM);
}
EXPORT int ncclAllGather(const void *s, void *r, size_t n, int dt, void *comm, void *st) {
  (void)st;
  return collective(comm, K_ALL_GATHER, s, r, n, dt, OP_SUM);
}
EXPORT int ncclReduceScatter(const void *s, void *r, size_t n, int dt, int op, void *comm, void *st) {
  (void)st;
  return collective(comm, K_REDUCE_SCATTER, s, r, n, dt, op);
}
EXPORT int ncclGroupStart(void) { return 0; }
EXPORT int ncclGroupEnd(void) { return 0; }

/* ---- the runtimes: one device, one stream that runs the kernels ---- */
static char g_dev_mem[64];
static _Thread_local int t_last_error;

/* 0 idle, 600 not ready. The head kernel finishes (and writes its result)
 * when its time has come; an abort ends every kernel 5 ms later, unwritten. */
static int stream_query(void) {
  pthread_mutex_lock(&g_mu);
  int rc = SUCCESS;
  while (g_queue_n > 0) {
    op *o = &g_queue[0];
    int s = atomic_load(&g_comm_state);
    bool aborted = (s == FREED || s == RELEASING) && atomic_load(&g_aborts) > 0 &&
                   now_ns() - atomic_load(&g_abort_ns) > 5000000;
    if (aborted) {
      g_queue_n = 0;
      break;
    }
    if (o->not_ready_left > 0) {
      o->not_ready_left--;
      rc = NOT_READY;
      break;
    }
    if (o->end_ns < 0 || now_ns() < o->end_ns) {
      rc = NOT_READY;
      break;
    }
    complete(o);
    memmove(g_queue, g_queue + 1, sizeof g_queue[0] * (size_t)--g_queue_n);
  }
  pthread_mutex_unlock(&g_mu);
  return rc;
}
static int set_device(int d) { return d == 0 ? 0 : 101; }
static int device_count(int *n) {
  *n = 1;
  return 0;
}
static int stream_create(void **s) {
  *s = (void *)1;
  return 0;
}
static int dev_malloc(void **p) {
  *p = g_dev_mem;
  return 0;
}
static const char *error_string(int e) { return e == NOT_READY ? "not ready (stub)" : e ? "stub runtime error" : "no error"; }
static int get_last_error(void) {
  int e = t_last_error;
  t_last_error = 0;
  return e;
}

EXPORT int cudaSetDevice(int d) { return set_device(d); }
EXPORT int cudaGetDeviceCount(int *n) { return device_count(n); }
EXPORT int cudaStreamCreateWithFlags(void **s, unsigned f) {
  (void)f;
  return stream_create(s);
}
EXPORT int cudaStreamQuery(void *s) { /* CUDA does not record cudaErrorNotReady */
  (void)s;
  return stream_query();
}
EXPORT int cudaStreamDestroy(void *s) {
  (void)s;
  return 0;
}
EXPORT int cudaMalloc(void **p, size_t n) {
  (void)n;
  return dev_malloc(p);
}
EXPORT int cudaFree(void *p) {
  (void)p;
  return 0;
}
EXPORT const char *cudaGetErrorString(int e) { return error_string(e); }
EXPORT int cudaGetLastError(void) { return get_last_error(); }
EXPORT int cudaPeekAtLastError(void) { return t_last_error; }

EXPORT int hipSetDevice(int d) { return set_device(d); }
EXPORT int hipGetDeviceCount(int *n) { return device_count(n); }
EXPORT int hipStreamCreateWithFlags(void **s, unsigned f) {
  (void)f;
  return stream_create(s);
}
EXPORT int hipStreamQuery(void *s) { /* ROCm records hipErrorNotReady as the last error */
  (void)s;
  int rc = stream_query();
  if (rc != 0) t_last_error = rc;
  return rc;
}
EXPORT int hipStreamDestroy(void *s) {
  (void)s;
  return 0;
}
EXPORT int hipMalloc(void **p, size_t n) {
  (void)n;
  return dev_malloc(p);
}
EXPORT int hipFree(void *p) {
  (void)p;
  return 0;
}
EXPORT const char *hipGetErrorString(int e) { return error_string(e); }
EXPORT int hipGetLastError(void) { return get_last_error(); }
EXPORT int hipPeekAtLastError(void) { return t_last_error; }
