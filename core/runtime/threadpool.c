/* The host thread pool, a core runtime service (threadpool.h): the thread
 * count (ag_set_num_threads / AG_NUM_THREADS, the default from the CPUs this
 * process may use) and the blocking fork/join pool that every CPU kernel
 * (elementwise, reductions, optimizers, GEMM panels) runs on. Idle workers
 * sleep on a condition variable, never spin (docs/performance.md). */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "anygrad/checks.h"
#include "anygrad/threads.h"
#include "runtime/threadpool.h"

/* ---- thread count ---- */

static atomic_int g_threads; /* 0: not resolved yet */

/* cgroup v2 quota ("max 100000" or "150000 100000") rounded up, or 0. */
static int cgroup_cpus(void) {
  FILE *f = fopen("/sys/fs/cgroup/cpu.max", "r");
  if (!f) return 0;
  char q[32] = {0};
  long period = 0;
  int n = fscanf(f, "%31s %ld", q, &period);
  fclose(f);
  if (n != 2 || period <= 0 || strcmp(q, "max") == 0) return 0;
  long quota = strtol(q, NULL, 10);
  if (quota <= 0) return 0;
  return (int)((quota + period - 1) / period);
}

int ag__pool_default_threads(void) {
  int n = 1;
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) n = CPU_COUNT(&set);
  if (n < 1) n = 1;
  int q = cgroup_cpus();
  if (q > 0 && q < n) n = q;
  return n < AG_MAX_THREADS ? n : AG_MAX_THREADS;
}

static int resolve_threads(void) {
  int n = atomic_load(&g_threads);
  if (n > 0) return n;
  n = ag__pool_default_threads();
  const char *env = getenv("AG_NUM_THREADS");
  int64_t v;
  /* A bad value keeps the default here; the first device open reports it
   * (ag__env_check). */
  if (env && ag_parse_i64(env, 1, AG_MAX_THREADS, &v)) n = (int)v;
  int zero = 0;
  atomic_compare_exchange_strong(&g_threads, &zero, n);
  return atomic_load(&g_threads);
}

ag_status ag_set_num_threads(int n) {
  if (n < 0 || n > AG_MAX_THREADS)
    return ag_error_set(AG_ERR_INVALID, "ag_set_num_threads: n = %d, expected 0 (the default) .. %d", n,
                        AG_MAX_THREADS);
  atomic_store(&g_threads, n == 0 ? 0 : n);
  if (n == 0) resolve_threads();
  return AG_OK;
}

int ag_get_num_threads(void) { return resolve_threads(); }

/* ---- the pool ---- */

typedef struct pool {
  pthread_mutex_t mu;
  pthread_cond_t wake, done;
  pthread_t th[AG_MAX_THREADS];
  int nworkers;
  uint64_t gen;      /* bumped per job */
  int want;          /* workers with id < want join the current job */
  ag_range_fn fn;
  void *ctx;
  int64_t n, nchunks;
  /* The job's generation (high 32 bits) and its next chunk (low 32): a
   * worker takes a chunk only of the job it joined, so one that wakes after
   * its job ended takes nothing, and the next job need not wait for it (on
   * a loaded machine a late wake-up is a scheduler slice, milliseconds). */
  atomic_ullong next;
  atomic_llong finished;
} pool;

static pool g_pool = {.mu = PTHREAD_MUTEX_INITIALIZER,
                      .wake = PTHREAD_COND_INITIALIZER,
                      .done = PTHREAD_COND_INITIALIZER};
static atomic_flag g_busy = ATOMIC_FLAG_INIT; /* one job at a time */

static void run_chunks(pool *p, uint32_t gen, ag_range_fn fn, void *ctx, int64_t n, int64_t nchunks) {
  unsigned long long cur = atomic_load(&p->next);
  for (;;) {
    if ((uint32_t)(cur >> 32) != gen || (int64_t)(cur & 0xffffffffu) >= nchunks) return;
    if (!atomic_compare_exchange_weak(&p->next, &cur, cur + 1)) continue; /* cur reloaded */
    int64_t k = (int64_t)(cur & 0xffffffffu);
    cur++;
    int64_t a = n * k / nchunks, b = n * (k + 1) / nchunks;
    if (a < b) fn(ctx, a, b);
    if (atomic_fetch_add(&p->finished, 1) + 1 == nchunks) {
      pthread_mutex_lock(&p->mu);
      pthread_cond_broadcast(&p->done);
      pthread_mutex_unlock(&p->mu);
    }
  }
}

typedef struct { int id; } worker_arg;
static worker_arg g_args[AG_MAX_THREADS];

static void *worker(void *arg) {
  const int id = ((worker_arg *)arg)->id;
  pool *p = &g_pool;
  uint64_t seen = 0;
  pthread_mutex_lock(&p->mu);
  for (;;) {
    while (p->gen == seen) pthread_cond_wait(&p->wake, &p->mu);
    seen = p->gen;
    if (id >= p->want) continue;
    ag_range_fn fn = p->fn;
    void *ctx = p->ctx;
    int64_t n = p->n, nchunks = p->nchunks;
    pthread_mutex_unlock(&p->mu);
    run_chunks(p, (uint32_t)seen, fn, ctx, n, nchunks);
    pthread_mutex_lock(&p->mu);
  }
  return NULL;
}

/* A forked child has none of the parent's workers: start afresh (its
 * caller then runs every chunk itself until it starts its own). */
static void after_fork_child(void) {
  pthread_mutex_init(&g_pool.mu, NULL);
  pthread_cond_init(&g_pool.wake, NULL);
  pthread_cond_init(&g_pool.done, NULL);
  g_pool.nworkers = 0;
  atomic_flag_clear(&g_busy);
}

/* Start workers up to `want` (caller holds mu). Returns how many exist. */
static int grow(pool *p, int want) {
  static bool atfork;
  if (!atfork && p->nworkers < want) atfork = pthread_atfork(NULL, NULL, after_fork_child) == 0;
  while (p->nworkers < want) {
    int id = p->nworkers;
    g_args[id].id = id;
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    int rc = pthread_create(&p->th[id], &at, worker, &g_args[id]);
    pthread_attr_destroy(&at);
    if (rc != 0) break; /* fewer threads, same results */
    p->nworkers++;
  }
  return p->nworkers < want ? p->nworkers : want;
}

void ag__pool_for(int64_t n, int64_t work, ag_range_fn fn, void *ctx) {
  if (n <= 0) return;
  int nt = resolve_threads();
  if (work < AG_POOL_MIN_WORK || n < 2 || nt < 2 || atomic_flag_test_and_set(&g_busy)) {
    /* small work, one thread, or the pool is already running a job (a
     * second stream, a nested call): stay on this thread. */
    fn(ctx, 0, n);
    return;
  }
  pool *p = &g_pool;
  /* A few chunks per thread: a worker descheduled by another process
   * delays the join by one chunk at most, and the caller takes the rest. */
  int64_t nchunks = (int64_t)nt * 4;
  int64_t by_work = work / (AG_POOL_MIN_WORK / 4);
  if (nchunks > by_work) nchunks = by_work;
  if (nchunks < nt) nchunks = nt;
  if (nchunks > n) nchunks = n;
  pthread_mutex_lock(&p->mu);
  int workers = grow(p, nt - 1);
  p->fn = fn;
  p->ctx = ctx;
  p->n = n;
  p->nchunks = nchunks;
  p->want = workers;
  p->gen++;
  const uint32_t gen = (uint32_t)p->gen;
  atomic_store(&p->finished, 0); /* every chunk-taker of the last job has finished: it was joined */
  atomic_store(&p->next, (unsigned long long)gen << 32);
  if (workers > 0) pthread_cond_broadcast(&p->wake);
  pthread_mutex_unlock(&p->mu);
  run_chunks(p, gen, fn, ctx, n, nchunks);
  if (atomic_load(&p->finished) < nchunks) {
    pthread_mutex_lock(&p->mu);
    while (atomic_load(&p->finished) < nchunks) pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
  }
  atomic_flag_clear(&g_busy);
}
