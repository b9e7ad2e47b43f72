/* In-process groups: every collective x dtype x op against a host reference
 * (odd sizes, zero-size), on cpu x2, cpu x3, and mixed backends when built;
 * then the failure paths: a rank that never arrives (timeout), a rank that
 * aborts, ranks that disagree, bad arguments, and asynchronous work. */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "anygrad/anygrad.h"
#include "anygrad/backend.h"

#define MAXR 4

#include "dist_ref.h"

/* ---- running ranks on threads ---- */

typedef struct ctx ctx;
typedef void (*rank_fn)(ctx *c, int rank);
struct ctx {
  int size;
  ag_group *g[MAXR];
  ag_device dev[MAXR];
  rank_fn fn;
  /* results */
  ag_status st[MAXR];
  char msg[MAXR][512];
  char fail[MAXR][256]; /* a check failed on the rank */
  double elapsed_ms[MAXR];
  /* parameters */
  ag_dtype dt;
  size_t n;
  int salt;
};

typedef struct targ {
  ctx *c;
  int rank;
} targ;

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void *thread_main(void *p) {
  targ *a = p;
  double t0 = now_ms();
  a->c->fn(a->c, a->rank);
  a->c->elapsed_ms[a->rank] = now_ms() - t0;
  return NULL;
}

static void run_ranks(ctx *c, rank_fn fn) {
  pthread_t th[MAXR];
  targ a[MAXR];
  c->fn = fn;
  for (int r = 0; r < c->size; r++) {
    c->st[r] = AG_OK;
    c->msg[r][0] = 0;
    c->fail[r][0] = 0;
    a[r] = (targ){c, r};
    assert_int_equal(pthread_create(&th[r], NULL, thread_main, &a[r]), 0);
  }
  for (int r = 0; r < c->size; r++) pthread_join(th[r], NULL);
  for (int r = 0; r < c->size; r++)
    if (c->fail[r][0]) fail_msg("rank %d: %s", r, c->fail[r]);
}

static void record(ctx *c, int r, ag_status st) {
  c->st[r] = st;
  if (st != AG_OK) snprintf(c->msg[r], sizeof c->msg[r], "%s", ag_last_error());
}

static void failf(ctx *c, int r, const char *fmt, ...) {
  if (c->fail[r][0]) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->fail[r], sizeof c->fail[r], fmt, ap);
  va_end(ap);
}

static ag_tensor *upload(ag_device d, ag_dtype dt, size_t n, const void *h) {
  int64_t shape[1] = {(int64_t)n};
  return ag_from_host(d, dt, 1, shape, h);
}

static void compare(ctx *c, int r, const char *what, ag_tensor *t, size_t n, double (*ref)(ctx *, int, size_t)) {
  ag_dtype dt = c->dt;
  void *h = malloc(n * ag_dtype_size(dt) + 1);
  ag_status st = ag_to_host(t, h, n * ag_dtype_size(dt));
  if (st != AG_OK) {
    failf(c, r, "%s: ag_to_host: %s", what, ag_last_error());
  } else {
    for (size_t i = 0; i < n; i++) {
      double want = ref(c, r, i), got = fetch(dt, h, i);
      if (!(want == got)) {
        failf(c, r, "%s %s n=%zu: element %zu is %.9g, want %.9g", what, ag_dtype_name(dt), c->n, i, got, want);
        break;
      }
    }
  }
  free(h);
}

/* ---- collectives against the reference ---- */

static ag_dist_reduce g_op; /* set by the driver before run_ranks */

static double ref_allreduce(ctx *c, int r, size_t i) { return ref_reduce(c->dt, g_op, c->size, i, c->salt, 0); }
static double ref_bcast(ctx *c, int r, size_t i) {
  unsigned char tmp[8];
  store(c->dt, tmp, 0, gen(c->dt, 1 % c->size, i, c->salt));
  return fetch(c->dt, tmp, 0);
}
static double ref_gather(ctx *c, int r, size_t i) {
  unsigned char tmp[8];
  store(c->dt, tmp, 0, gen(c->dt, (int)(i / c->n), i % c->n, c->salt));
  return fetch(c->dt, tmp, 0);
}
static double ref_scatter(ctx *c, int r, size_t i) {
  return ref_reduce(c->dt, g_op, c->size, i, c->salt, (size_t)r * c->n);
}

static void rank_allreduce(ctx *c, int r) {
  void *h = make_input(c->dt, r, c->n, c->salt);
  ag_tensor *t = upload(c->dev[r], c->dt, c->n, h);
  free(h);
  ag_status st = t ? ag_all_reduce(c->g[r], t, g_op, NULL) : ag_last_status();
  record(c, r, st);
  if (st == AG_OK) compare(c, r, "all_reduce", t, c->n, ref_allreduce);
  ag_tensor_release(t);
}

static void rank_bcast(ctx *c, int r) {
  void *h = make_input(c->dt, r, c->n, c->salt);
  ag_tensor *t = upload(c->dev[r], c->dt, c->n, h);
  free(h);
  ag_status st = t ? ag_broadcast(c->g[r], t, 1 % c->size, NULL) : ag_last_status();
  record(c, r, st);
  if (st == AG_OK) compare(c, r, "broadcast", t, c->n, ref_bcast);
  ag_tensor_release(t);
}

static void rank_gather(ctx *c, int r) {
  void *h = make_input(c->dt, r, c->n, c->salt);
  ag_tensor *in = upload(c->dev[r], c->dt, c->n, h);
  free(h);
  int64_t shape[2] = {c->size, (int64_t)c->n};
  ag_tensor *out = ag_zeros(c->dev[r], c->dt, 2, shape);
  ag_status st = in && out ? ag_all_gather(c->g[r], in, out, NULL) : ag_last_status();
  record(c, r, st);
  if (st == AG_OK) compare(c, r, "all_gather", out, c->n * (size_t)c->size, ref_gather);
  ag_tensor_release(in);
  ag_tensor_release(out);
}

static void rank_scatter(ctx *c, int r) {
  size_t total = c->n * (size_t)c->size;
  void *h = make_input(c->dt, r, total, c->salt);
  ag_tensor *in = upload(c->dev[r], c->dt, total, h);
  free(h);
  int64_t shape[1] = {(int64_t)c->n};
  ag_tensor *out = ag_zeros(c->dev[r], c->dt, 1, shape);
  ag_status st = in && out ? ag_reduce_scatter(c->g[r], in, out, g_op, NULL) : ag_last_status();
  record(c, r, st);
  if (st == AG_OK) compare(c, r, "reduce_scatter", out, c->n, ref_scatter);
  ag_tensor_release(in);
  ag_tensor_release(out);
}

static void rank_barrier(ctx *c, int r) { record(c, r, ag_group_barrier(c->g[r], NULL)); }

static void check_all_ok(ctx *c, const char *what) {
  for (int r = 0; r < c->size; r++)
    if (c->st[r] != AG_OK)
      fail_msg("%s %s n=%zu rank %d: %s: %s", what, ag_dtype_name(c->dt), c->n, r, ag_status_name(c->st[r]),
               c->msg[r]);
}

static bool make_group(ctx *c, int size, const ag_device *devs, int64_t timeout_ms) {
  memset(c, 0, sizeof *c);
  c->size = size;
  for (int r = 0; r < size; r++) c->dev[r] = devs[r];
  ag_group_options o;
  ag_group_options_default(&o);
  o.timeout_ms = timeout_ms;
  ag_status st = ag_group_create_inproc(size, devs, &o, c->g);
  if (st != AG_OK) fail_msg("ag_group_create_inproc: %s", ag_last_error());
  return true;
}

static void destroy_group(ctx *c) {
  for (int r = 0; r < c->size; r++) ag_group_destroy(c->g[r]);
}

static void matrix(const ag_device *devs, int size, bool big) {
  ctx c;
  make_group(&c, size, devs, 20000);
  for (int r = 0; r < size; r++) {
    assert_int_equal(ag_group_rank(c.g[r]), r);
    assert_int_equal(ag_group_size(c.g[r]), size);
    assert_true(ag_device_eq(ag_group_device(c.g[r]), devs[r]));
    assert_int_equal(ag_group_kind(c.g[r]), AG_DIST_INPROC);
  }
  static const size_t sizes[] = {0, 1, 7, 1000};
  int salt = 1;
  for (int d = 0; d < NDT; d++) {
    c.dt = k_dtypes[d];
    bool everywhere = true; /* f64 is a CPU dtype */
    for (int r = 0; r < size; r++) everywhere &= c.dt != AG_F64 || devs[r].backend == AG_BACKEND_CPU;
    if (!everywhere) continue;
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
      c.n = sizes[k];
      for (int op = AG_DIST_SUM; op <= AG_DIST_MIN; op++) {
        if (op == AG_DIST_AVG && c.dt == AG_I32) continue;
        g_op = (ag_dist_reduce)op;
        c.salt = salt++;
        run_ranks(&c, rank_allreduce);
        check_all_ok(&c, "all_reduce");
        run_ranks(&c, rank_scatter);
        check_all_ok(&c, "reduce_scatter");
      }
      c.salt = salt++;
      run_ranks(&c, rank_bcast);
      check_all_ok(&c, "broadcast");
      run_ranks(&c, rank_gather);
      check_all_ok(&c, "all_gather");
    }
    if (big) {
      /* an odd, large size: chunks of unequal length per rank */
      c.n = 1000003;
      g_op = AG_DIST_SUM;
      c.salt = salt++;
      run_ranks(&c, rank_allreduce);
      check_all_ok(&c, "all_reduce");
      if (c.dt == AG_F32 || c.dt == AG_BF16) {
        g_op = AG_DIST_AVG;
        run_ranks(&c, rank_scatter);
        check_all_ok(&c, "reduce_scatter");
        run_ranks(&c, rank_gather);
        check_all_ok(&c, "all_gather");
      }
    }
  }
  run_ranks(&c, rank_barrier);
  check_all_ok(&c, "barrier");
  destroy_group(&c);
}

static void test_cpu2(void **state) {
  ag_device d[2] = {AG_CPU, AG_CPU};
  matrix(d, 2, true);
}

static void test_cpu3(void **state) {
  ag_device d[3] = {AG_CPU, AG_CPU, AG_CPU};
  matrix(d, 3, true);
}

static void test_mixed(void **state) {
  ag_backend_kind kinds[2] = {AG_BACKEND_OPENCL, AG_BACKEND_GPUEMU};
  int ran = 0;
  for (int k = 0; k < 2; k++) {
    const char *why = NULL;
    if (!ag_backend_available(kinds[k], &why)) {
      printf("# %s not available: %s\n", ag_backend_name(kinds[k]), why);
      continue;
    }
    ag_device d[3] = {{(int16_t)kinds[k], 0}, AG_CPU, {(int16_t)kinds[k], 0}};
    matrix(d, 3, false); /* the device twice, the CPU between */
    ran++;
  }
  if (!ran) skip();
}

/* ---- failures ---- */

static void rank_only0(ctx *c, int r) {
  if (r != 0) return; /* rank 1 never calls */
  int64_t shape[1] = {16};
  ag_tensor *t = ag_ones(c->dev[r], AG_F32, 1, shape);
  record(c, r, ag_all_reduce(c->g[r], t, AG_DIST_SUM, NULL));
  /* broken from now on: fails at once */
  double t0 = now_ms();
  ag_status st = ag_all_reduce(c->g[r], t, AG_DIST_SUM, NULL);
  if (st == AG_OK || now_ms() - t0 > 100) failf(c, r, "second collective after a timeout: %s", ag_status_name(st));
  ag_tensor_release(t);
}

static void test_timeout(void **state) {
  ag_device d[2] = {AG_CPU, AG_CPU};
  ctx c;
  make_group(&c, 2, d, 300);
  assert_int_equal(ag_group_timeout_ms(c.g[0]), 300);
  run_ranks(&c, rank_only0);
  assert_int_equal(c.st[0], AG_ERR_TIMEOUT);
  assert_non_null(strstr(c.msg[0], "rank 1"));
  assert_non_null(strstr(c.msg[0], "all_reduce"));
  assert_true(c.elapsed_ms[0] >= 290 && c.elapsed_ms[0] < 5000);
  assert_int_equal(ag_group_status(c.g[1]), AG_ERR_TIMEOUT);
  destroy_group(&c);
}

/* Rank 2 of 3 aborts while 0 and 1 wait: they fail at once, long before the
 * 20 s timeout, with the abort's reason. */
static void rank_abort(ctx *c, int r) {
  if (r == 2) {
    struct timespec ts = {0, 50 * 1000000};
    nanosleep(&ts, NULL);
    ag_group_abort(c->g[r], "rank 2 lost its device");
    return;
  }
  int64_t shape[1] = {5};
  ag_tensor *t = ag_ones(c->dev[r], AG_F32, 1, shape);
  record(c, r, ag_all_reduce(c->g[r], t, AG_DIST_SUM, NULL));
  ag_tensor_release(t);
}

static void test_abort(void **state) {
  ag_device d[3] = {AG_CPU, AG_CPU, AG_CPU};
  ctx c;
  make_group(&c, 3, d, 20000);
  run_ranks(&c, rank_abort);
  for (int r = 0; r < 2; r++) {
    assert_int_equal(c.st[r], AG_ERR_ABORTED);
    assert_non_null(strstr(c.msg[r], "lost its device"));
    assert_true(c.elapsed_ms[r] < 5000);
  }
  destroy_group(&c);
}

/* Ranks disagree on the size: every rank gets AG_ERR_INVALID. */
static void rank_mismatch(ctx *c, int r) {
  int64_t shape[1] = {4 + r};
  ag_tensor *t = ag_ones(c->dev[r], AG_F32, 1, shape);
  record(c, r, ag_all_reduce(c->g[r], t, AG_DIST_SUM, NULL));
  ag_tensor_release(t);
}

static void test_mismatch(void **state) {
  ag_device d[2] = {AG_CPU, AG_CPU};
  ctx c;
  make_group(&c, 2, d, 20000);
  run_ranks(&c, rank_mismatch);
  for (int r = 0; r < 2; r++) {
    assert_int_equal(c.st[r], AG_ERR_INVALID);
    assert_non_null(strstr(c.msg[r], "differs between ranks"));
  }
  destroy_group(&c);
}

/* Rank 1 passes a bad argument: it gets the error at the call, and rank 0,
 * waiting in the collective, fails fast instead of timing out. */
static void rank_badarg(ctx *c, int r) {
  int64_t shape[2] = {4, 6};
  ag_tensor *t = ag_ones(c->dev[r], AG_I32, 2, shape);
  if (r == 1) {
    ag_tensor *tt = ag_transpose(t, 0, 1);
    ag_status st = ag_all_reduce(c->g[r], tt, AG_DIST_SUM, NULL);
    if (st != AG_ERR_INVALID || !strstr(ag_last_error(), "contiguous"))
      failf(c, r, "non-contiguous: %s %s", ag_status_name(st), ag_last_error());
    ag_tensor_release(tt);
    record(c, r, ag_all_reduce(c->g[r], t, AG_DIST_AVG, NULL));
  } else {
    record(c, r, ag_all_reduce(c->g[r], t, AG_DIST_SUM, NULL));
  }
  ag_tensor_release(t);
}

static void test_bad_args(void **state) {
  assert_int_equal(ag_all_reduce(NULL, NULL, AG_DIST_SUM, NULL), AG_ERR_INVALID);
  ag_group *g[2];
  ag_device d[2] = {AG_CPU, AG_CPU};
  assert_int_equal(ag_group_create_inproc(0, d, NULL, g), AG_ERR_INVALID);
  ag_group_options o = {.timeout_ms = -1};
  assert_int_equal(ag_group_create_inproc(2, d, &o, g), AG_ERR_INVALID);
  ag_device bad[2] = {AG_CPU, {AG_BACKEND_CPU, 9}};
  assert_int_equal(ag_group_create_inproc(2, bad, NULL, g), AG_ERR_DEVICE);
  setenv("AG_DIST_TIMEOUT_MS", "soon", 1);
  assert_int_equal(ag_group_create_inproc(2, d, NULL, g), AG_ERR_INVALID);
  assert_non_null(strstr(ag_last_error(), "AG_DIST_TIMEOUT_MS"));
  setenv("AG_DIST_TIMEOUT_MS", "1234", 1);
  assert_int_equal(ag_group_create_inproc(2, d, NULL, g), AG_OK);
  assert_int_equal(ag_group_timeout_ms(g[0]), 1234);
  ag_group_destroy(g[0]);
  ag_group_destroy(g[1]);
  unsetenv("AG_DIST_TIMEOUT_MS");

  ctx c;
  make_group(&c, 2, d, 20000);
  run_ranks(&c, rank_badarg);
  assert_int_equal(c.st[1], AG_ERR_ABORTED); /* broken by its own bad call */
  assert_int_equal(c.st[0], AG_ERR_ABORTED);
  assert_non_null(strstr(c.msg[0], "contiguous"));
  assert_true(c.elapsed_ms[0] < 5000);
  destroy_group(&c);
}

/* Several collectives in flight, waited out of order; the result feeds
 * later work on the stream. */
static void rank_async(ctx *c, int r) {
  enum { K = 6 };
  int64_t shape[1] = {257};
  ag_tensor *t[K];
  ag_work *w[K];
  for (int k = 0; k < K; k++) {
    t[k] = ag_full(c->dev[r], AG_F32, 1, shape, (double)(r + 1) * (k + 1));
    ag_status st = ag_all_reduce(c->g[r], t[k], k % 2 ? AG_DIST_AVG : AG_DIST_SUM, &w[k]);
    if (st != AG_OK) {
      failf(c, r, "queue %d: %s", k, ag_last_error());
      return;
    }
  }
  /* A blocking call behind queued work runs after it, in call order (a
   * different size: run out of order, the ranks would disagree). */
  int64_t shape2[1] = {100};
  ag_tensor *b = ag_full(c->dev[r], AG_F32, 1, shape2, 1.0);
  ag_status bst = ag_all_reduce(c->g[r], b, AG_DIST_SUM, NULL);
  if (bst != AG_OK) failf(c, r, "blocking behind queued: %s", ag_last_error());
  ag_tensor *bs = ag_sum(b, 0, NULL, false);
  if (bst == AG_OK && ag_item(bs) != 100.0 * c->size) failf(c, r, "blocking behind queued: wrong sum");
  ag_tensor_release(bs);
  ag_tensor_release(b);
  for (int k = K - 1; k >= 0; k--) {
    ag_status st = k % 3 ? ag_work_wait(w[k]) : ag_work_stream_wait(w[k], ag_stream_current(c->dev[r]));
    if (st != AG_OK) failf(c, r, "wait %d: %s", k, ag_last_error());
    if (k % 3 && !ag_work_test(w[k])) failf(c, r, "work %d waited but not complete", k);
    double want = 0;
    for (int q = 0; q < c->size; q++) want += (double)(q + 1) * (k + 1);
    if (k % 2) want /= c->size;
    ag_tensor *s = ag_sum(t[k], 0, NULL, false);
    double got = ag_item(s) / 257;
    if (fabs(got - want) > 1e-4 * fabs(want)) failf(c, r, "work %d: %g, want %g", k, got, want);
    ag_tensor_release(s);
    ag_work_release(w[k]);
    ag_tensor_release(t[k]);
  }
}

static void test_async(void **state) {
  ag_device d[3] = {AG_CPU, AG_CPU, AG_CPU};
  ctx c;
  make_group(&c, 3, d, 20000);
  run_ranks(&c, rank_async);
  destroy_group(&c);
}

static void test_available(void **state) {
  char why[512];
  assert_true(ag_dist_available(AG_DIST_INPROC, why, sizeof why));
  for (int k = AG_DIST_MPI; k < AG_DIST_KIND_COUNT; k++) {
    bool ok = ag_dist_available((ag_dist_kind)k, why, sizeof why);
    printf("# %s: %s: %s\n", ag_dist_kind_name((ag_dist_kind)k), ok ? "available" : "unavailable", why);
    assert_true(why[0] != 0);
  }
  assert_false(ag_dist_available((ag_dist_kind)9, why, sizeof why));
  assert_string_equal(ag_status_name(AG_ERR_TIMEOUT), "AG_ERR_TIMEOUT");
  assert_string_equal(ag_status_name(AG_ERR_ABORTED), "AG_ERR_ABORTED");
}

/* NCCL where it cannot run: a clear error, and the bootstrap group stays
 * usable for a fallback. */
static void test_nccl_unavailable(void **state) {
  char why[512];
  if (ag_dist_available(AG_DIST_NCCL, why, sizeof why)) skip();
  ag_group *boot, *g = NULL;
  ag_device cpu = AG_CPU;
  assert_int_equal(ag_group_create_inproc(1, &cpu, NULL, &boot), AG_OK);
  assert_int_equal(ag_group_create_nccl(boot, cpu, NULL, &g), AG_ERR_DEVICE);
  ag_device cuda = {AG_BACKEND_CUDA, 0};
  assert_int_equal(ag_group_create_nccl(boot, cuda, NULL, &g), AG_ERR_UNAVAILABLE);
  /* nccl's reason, or the cuda module's when it is absent (only the module
   * says which library reduces its memory) */
  assert_non_null(strstr(ag_last_error(), "is unavailable"));
  assert_null(g);
  assert_int_equal(ag_group_barrier(boot, NULL), AG_OK);
  ag_group_destroy(boot);
}

/* Runs last: every tensor a collective or work handle held was released. */
static void test_no_leaks(void **state) { assert_int_equal(ag_live_tensors(), 0); }

int main(int argc, char **argv) {
  if (argc > 1) cmocka_set_test_filter(argv[1]);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_available), cmocka_unit_test(test_cpu2),     cmocka_unit_test(test_cpu3),
      cmocka_unit_test(test_mixed),     cmocka_unit_test(test_timeout),  cmocka_unit_test(test_abort),
      cmocka_unit_test(test_mismatch),  cmocka_unit_test(test_bad_args), cmocka_unit_test(test_async),
      cmocka_unit_test(test_nccl_unavailable), cmocka_unit_test(test_no_leaks),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
