/* The NCCL group (comm/nccl, libanygrad-nccl.so) on a real GPU, two
 * communicators at once (scripts/gpu_check.sh; CI drives the module through
 * a stub, tests/gpu3_nccl_test.c). NCCL refuses two ranks of one
 * communicator on one device ("Duplicate GPU detected", ncclInvalidUsage),
 * so on one GPU:
 *   1. two 1-rank communicators on cuda:0, each driven by its own thread on
 *      its own stream, concurrently: every collective (all-reduce f32, f16
 *      and bf16 sums, widened to f32 unless AG_DIST_HALF_REDUCE=native,
 *      broadcast, all-gather, reduce-scatter) is checked element by element
 *      on the caller's stream right after the blocking call returns (a run
 *      that returned before NCCL enqueued the collective, the non-blocking
 *      communicator's ncclInProgress, would show stale data), then timed;
 *   2. with two devices or more, a 2-rank communicator on cuda:0 and cuda:1,
 *      the same collectives with both ranks' data;
 *   3. a 2-rank communicator with both ranks on cuda:0: refused (both ranks
 *      return an error within the timeout; no hang) or, where NCCL allows it,
 *      checked like 2.
 * The module creates every communicator non-blocking (config.blocking = 0,
 * NCCL 2.14 on), so ncclInProgress is met for real on each init. Plain C
 * (no test library on the GPU machine); exit 0 passed, 1 failed, 77 NCCL
 * or CUDA unavailable.
 *   gpu3_nccl_two [--mib N] [--iters K] [--json FILE] */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "anygrad/anygrad.h"

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_failures;

#define FAIL(...)                                        \
  do {                                                   \
    pthread_mutex_lock(&g_mu);                           \
    fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
    fprintf(stderr, __VA_ARGS__);                        \
    fputc('\n', stderr);                                 \
    g_failures++;                                        \
    pthread_mutex_unlock(&g_mu);                         \
  } while (0)

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int64_t g_n = 1 << 20; /* elements per rank in the checked collectives */
static int g_iters = 20;

/* A tensor of dtype dt on d from f32 host values. */
static ag_tensor *make(ag_device d, ag_dtype dt, const float *h, int64_t n) {
  ag_tensor *f = ag_from_host(d, AG_F32, 1, &n, h);
  if (!f || dt == AG_F32) return f;
  ag_tensor *t = ag_cast(f, dt);
  ag_tensor_release(f);
  return t;
}

/* t's values as f32 on the host, read on the caller's current stream. */
static bool read_back(ag_tensor *t, float *h, int64_t n) {
  ag_tensor *f = ag_tensor_dtype(t) == AG_F32 ? t : ag_cast(t, AG_F32);
  bool ok = f && ag_to_host(f, h, (size_t)n * sizeof *h) == AG_OK;
  if (f != t) ag_tensor_release(f);
  return ok;
}

/* Compare; report the first difference. */
static void expect(const char *what, int rank, const float *got, const float *want, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    if (got[i] != want[i]) {
      FAIL("%s, rank %d: element %lld of %lld is %g (expected %g) when the call returned", what, rank, (long long)i,
           (long long)n, (double)got[i], (double)want[i]);
      return;
    }
}

typedef struct rank_ctx {
  ag_group *g;
  ag_device dev;
  int rank, size;
  const char *label;
  pthread_barrier_t *start;
  double ms_all_reduce, ms_all_gather; /* per call, 64 MiB class */
  size_t timed_bytes;
} rank_ctx;

/* Every collective once, checked: small integers, exact in f16 and bf16. */
static void suite(rank_ctx *c) {
  const int64_t n = g_n;
  const int r = c->rank, S = c->size;
  float *h = malloc((size_t)(n * S) * sizeof *h), *want = malloc((size_t)(n * S) * sizeof *want),
        *got = malloc((size_t)(n * S) * sizeof *got);
  if (!h || !want || !got) {
    FAIL("out of host memory");
    goto done;
  }
  const float ranks_sum = (float)(S * (S + 1) / 2);
  char what[96];
  static const ag_dtype dts[3] = {AG_F32, AG_F16, AG_BF16};
  for (int k = 0; k < 3; k++) {
    for (int64_t i = 0; i < n; i++) {
      h[i] = (float)((r + 1) * (int)(i % 13));
      want[i] = ranks_sum * (float)(i % 13);
    }
    ag_tensor *t = make(c->dev, dts[k], h, n);
    snprintf(what, sizeof what, "%s all-reduce sum %s", c->label, ag_dtype_name(dts[k]));
    if (!t || ag_all_reduce(c->g, t, AG_DIST_SUM, NULL) != AG_OK) FAIL("%s: %s", what, ag_last_error());
    else if (!read_back(t, got, n)) FAIL("%s: read back: %s", what, ag_last_error());
    else expect(what, r, got, want, n);
    ag_tensor_release(t);
  }
  /* broadcast from the last rank */
  for (int64_t i = 0; i < n; i++) {
    h[i] = (float)(r * 1000 + (int)(i % 13));
    want[i] = (float)((S - 1) * 1000 + (int)(i % 13));
  }
  ag_tensor *t = make(c->dev, AG_F32, h, n);
  snprintf(what, sizeof what, "%s broadcast f32", c->label);
  if (!t || ag_broadcast(c->g, t, S - 1, NULL) != AG_OK) FAIL("%s: %s", what, ag_last_error());
  else if (!read_back(t, got, n)) FAIL("%s: read back: %s", what, ag_last_error());
  else expect(what, r, got, want, n);
  ag_tensor_release(t);
  /* all-gather: out = every rank's in, rank order */
  for (int64_t i = 0; i < n; i++) h[i] = (float)(r * 100 + (int)(i % 13));
  for (int q = 0; q < S; q++)
    for (int64_t i = 0; i < n; i++) want[q * n + i] = (float)(q * 100 + (int)(i % 13));
  int64_t nS = n * S;
  ag_tensor *in = make(c->dev, AG_F32, h, n), *out = ag_zeros(c->dev, AG_F32, 1, &nS);
  snprintf(what, sizeof what, "%s all-gather f32", c->label);
  if (!in || !out || ag_all_gather(c->g, in, out, NULL) != AG_OK) FAIL("%s: %s", what, ag_last_error());
  else if (!read_back(out, got, nS)) FAIL("%s: read back: %s", what, ag_last_error());
  else expect(what, r, got, want, nS);
  ag_tensor_release(in);
  ag_tensor_release(out);
  /* reduce-scatter: out = sum over ranks of chunk r of in */
  for (int64_t j = 0; j < nS; j++) h[j] = (float)((r + 1) * (int)(j % 13));
  for (int64_t i = 0; i < n; i++) want[i] = ranks_sum * (float)((r * n + i) % 13);
  in = make(c->dev, AG_F32, h, nS);
  out = ag_zeros(c->dev, AG_F32, 1, &n);
  snprintf(what, sizeof what, "%s reduce-scatter sum f32", c->label);
  if (!in || !out || ag_reduce_scatter(c->g, in, out, AG_DIST_SUM, NULL) != AG_OK)
    FAIL("%s: %s", what, ag_last_error());
  else if (!read_back(out, got, n)) FAIL("%s: read back: %s", what, ag_last_error());
  else expect(what, r, got, want, n);
  ag_tensor_release(in);
  ag_tensor_release(out);
done:
  free(h);
  free(want);
  free(got);
}

/* Blocking calls back to back on 64 MiB: time per call (host clock). */
static void timed(rank_ctx *c) {
  int64_t n = 16 << 20;
  int64_t nS = n * c->size;
  ag_tensor *x = ag_zeros(c->dev, AG_F32, 1, &n), *y = ag_zeros(c->dev, AG_F32, 1, &nS);
  if (!x || !y) {
    FAIL("%s: 64 MiB tensors: %s", c->label, ag_last_error());
    goto done;
  }
  c->timed_bytes = (size_t)n * 4;
  for (int w = 0; w < 2; w++)
    if (ag_all_reduce(c->g, x, AG_DIST_SUM, NULL) != AG_OK || ag_all_gather(c->g, x, y, NULL) != AG_OK) {
      FAIL("%s: warm-up: %s", c->label, ag_last_error());
      goto done;
    }
  double t0 = now_s();
  for (int i = 0; i < g_iters; i++)
    if (ag_all_reduce(c->g, x, AG_DIST_SUM, NULL) != AG_OK) {
      FAIL("%s: timed all-reduce: %s", c->label, ag_last_error());
      goto done;
    }
  if (ag_device_synchronize(c->dev) != AG_OK) FAIL("%s: synchronize: %s", c->label, ag_last_error());
  c->ms_all_reduce = (now_s() - t0) * 1e3 / g_iters;
  t0 = now_s();
  for (int i = 0; i < g_iters; i++)
    if (ag_all_gather(c->g, x, y, NULL) != AG_OK) {
      FAIL("%s: timed all-gather: %s", c->label, ag_last_error());
      goto done;
    }
  if (ag_device_synchronize(c->dev) != AG_OK) FAIL("%s: synchronize: %s", c->label, ag_last_error());
  c->ms_all_gather = (now_s() - t0) * 1e3 / g_iters;
done:
  ag_tensor_release(x);
  ag_tensor_release(y);
}

/* One rank's thread: its own stream current, the checks, the timing. */
static void *rank_main(void *p) {
  rank_ctx *c = p;
  ag_stream *s = ag_stream_create(c->dev);
  if (!s) {
    FAIL("%s rank %d: ag_stream_create: %s", c->label, c->rank, ag_last_error());
    return NULL;
  }
  ag_stream *prev = ag_stream_set_current(c->dev, s);
  if (c->start) pthread_barrier_wait(c->start);
  suite(c);
  timed(c);
  ag_stream_set_current(c->dev, prev);
  ag_stream_destroy(s);
  return NULL;
}

/* ---- creating NCCL groups from in-process bootstraps, one thread per rank ---- */
typedef struct create_ctx {
  ag_group *boot, *g;
  ag_device dev;
  ag_status st;
  char msg[512];
  double secs;
} create_ctx;

static void *create_main(void *p) {
  create_ctx *c = p;
  ag_group_options o;
  ag_group_options_default(&o);
  o.timeout_ms = 30000;
  double t0 = now_s();
  c->st = ag_group_create_nccl(c->boot, c->dev, &o, &c->g);
  c->secs = now_s() - t0;
  if (c->st != AG_OK) snprintf(c->msg, sizeof c->msg, "%s", ag_last_error());
  return NULL;
}

/* n ranks of one NCCL communicator on devs[]; false with *refused set when
 * every rank got an error. */
static bool create_clique(int n, const ag_device *devs, ag_group **out, char *refused, size_t rn) {
  ag_group *boot[2] = {NULL, NULL};
  if (ag_group_create_inproc(n, devs, NULL, boot) != AG_OK) {
    FAIL("ag_group_create_inproc: %s", ag_last_error());
    return false;
  }
  create_ctx cc[2];
  memset(cc, 0, sizeof cc);
  pthread_t th[2];
  for (int i = 0; i < n; i++) {
    cc[i] = (create_ctx){.boot = boot[i], .dev = devs[i]};
    if (pthread_create(&th[i], NULL, create_main, &cc[i]) != 0) FAIL("pthread_create");
  }
  int ok = 0;
  for (int i = 0; i < n; i++) {
    pthread_join(th[i], NULL);
    ag_group_destroy(boot[i]);
    if (cc[i].st == AG_OK) ok++;
    if (cc[i].secs > 35) FAIL("rank %d took %.1f s to create (timeout 30 s)", i, cc[i].secs);
  }
  if (ok == n) {
    for (int i = 0; i < n; i++) out[i] = cc[i].g;
    return true;
  }
  for (int i = 0; i < n; i++) ag_group_destroy(cc[i].g);
  snprintf(refused, rn, "rank 0: %s [%s, %.1f s]; rank 1: %s [%s, %.1f s]", cc[0].st ? cc[0].msg : "ok",
           ag_status_name(cc[0].st), cc[0].secs, n > 1 ? (cc[1].st ? cc[1].msg : "ok") : "-",
           n > 1 ? ag_status_name(cc[1].st) : "-", n > 1 ? cc[1].secs : 0.0);
  if (ok) FAIL("the ranks disagree: %s", refused);
  return false;
}

/* Run rank_main on n threads at once over the groups, print timing. */
static void run_ranks(int n, ag_group **g, const ag_device *devs, int size, const char *label, FILE *json) {
  rank_ctx rc[2];
  pthread_t th[2];
  pthread_barrier_t start;
  pthread_barrier_init(&start, NULL, (unsigned)n);
  for (int i = 0; i < n; i++) {
    rc[i] = (rank_ctx){.g = g[i], .dev = devs[i], .rank = ag_group_rank(g[i]), .size = size, .label = label,
                       .start = &start};
    if (pthread_create(&th[i], NULL, rank_main, &rc[i]) != 0) FAIL("pthread_create");
  }
  for (int i = 0; i < n; i++) pthread_join(th[i], NULL);
  pthread_barrier_destroy(&start);
  for (int i = 0; i < n; i++) {
    double ar = rc[i].ms_all_reduce, ag = rc[i].ms_all_gather;
    printf("%s, thread %d (rank %d of %d on %s:%d): all-reduce 64 MiB %.3f ms/call, all-gather %.3f ms/call "
           "(%.1f GB/s of output)\n",
           label, i, rc[i].rank, size, "cuda", devs[i].index, ar, ag,
           ag > 0 ? (double)rc[i].timed_bytes * size / (ag * 1e-3) / 1e9 : 0.0);
    if (json)
      fprintf(json, "{\"bench\": \"nccl_%s_t%d\", \"ranks\": %d, \"bytes\": %zu, \"allreduce_ms\": %.4f, "
              "\"allgather_ms\": %.4f}\n", label, i, size, rc[i].timed_bytes, ar, ag);
  }
}

int main(int argc, char **argv) {
  const char *json_path = NULL;
  for (int i = 1; i < argc; i++) {
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(argv[i], "--mib") && v) g_n = (int64_t)atoi(argv[++i]) << 18;
    else if (!strcmp(argv[i], "--iters") && v) g_iters = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--json") && v) json_path = argv[++i];
    else {
      fprintf(stderr, "usage: gpu3_nccl_two [--mib N] [--iters K] [--json FILE]\n");
      return 2;
    }
  }
  if (g_n < 1 || g_iters < 1) {
    fprintf(stderr, "gpu3_nccl_two: --mib and --iters must be positive\n");
    return 2;
  }
  char why[512];
  if (!ag_dist_available(AG_DIST_NCCL, why, sizeof why)) {
    printf("nccl unavailable: %s\n", why);
    return 77;
  }
  printf("nccl: %s\n", why);
  ag_backend_kind kind;
  const char *reason = NULL;
  if (ag_backend_find("cuda", &kind) != AG_OK || !ag_backend_available(kind, &reason)) {
    printf("cuda unavailable: %s\n", reason ? reason : ag_last_error());
    return 77;
  }
  int count = ag_backend_device_count(kind);
  FILE *json = json_path ? fopen(json_path, "a") : NULL;
  ag_device d0, d1;
  if (ag_device_parse("cuda:0", &d0) != AG_OK) return 1;
  d1 = d0;
  if (count > 1) d1.index = 1;

  /* 1. two 1-rank communicators on cuda:0 at once */
  {
    ag_device devs[2] = {d0, d0};
    ag_group *g[2] = {NULL, NULL};
    char refused[1200] = "";
    bool ok = create_clique(1, devs, &g[0], refused, sizeof refused) &&
              create_clique(1, devs, &g[1], refused, sizeof refused);
    if (!ok) FAIL("a 1-rank NCCL communicator on cuda:0: %s", refused);
    else run_ranks(2, g, devs, 1, "two_1rank_comms_cuda0", json);
    ag_group_destroy(g[0]);
    ag_group_destroy(g[1]);
    printf("1. two 1-rank communicators on cuda:0, concurrently: %s\n", g_failures ? "FAILED" : "ok");
  }
  /* 2. a 2-rank communicator over two devices */
  if (count > 1) {
    int before = g_failures;
    ag_device devs[2] = {d0, d1};
    ag_group *g[2] = {NULL, NULL};
    char refused[1200] = "";
    if (!create_clique(2, devs, g, refused, sizeof refused)) FAIL("2 ranks on cuda:0 and cuda:1: %s", refused);
    else run_ranks(2, g, devs, 2, "2rank_cuda0_cuda1", json);
    ag_group_destroy(g[0]);
    ag_group_destroy(g[1]);
    printf("2. one 2-rank communicator on cuda:0 and cuda:1: %s\n", g_failures > before ? "FAILED" : "ok");
  } else {
    printf("2. one 2-rank communicator over two devices: skipped (one device)\n");
  }
  /* 3. two ranks of one communicator on one device */
  {
    int before = g_failures;
    ag_device devs[2] = {d0, d0};
    ag_group *g[2] = {NULL, NULL};
    char refused[1200] = "";
    if (create_clique(2, devs, g, refused, sizeof refused)) {
      run_ranks(2, g, devs, 2, "2rank_same_cuda0", json);
      printf("3. two ranks of one communicator on cuda:0: accepted by this NCCL; %s\n",
             g_failures > before ? "FAILED" : "ok");
    } else {
      printf("3. two ranks of one communicator on cuda:0: refused (%s): %s\n", refused,
             g_failures > before ? "FAILED" : "ok");
    }
    ag_group_destroy(g[0]);
    ag_group_destroy(g[1]);
  }
  if (json) fclose(json);
  printf("gpu3_nccl_two: %s (%d failure%s)\n", g_failures ? "FAILED" : "passed", g_failures,
         g_failures == 1 ? "" : "s");
  return g_failures ? 1 : 0;
}
