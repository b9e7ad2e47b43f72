/* The MPI group, run by mpirun with 2 or 4 processes (tests/dist.cmake).
 * Default mode: every collective x dtype x op against the host reference,
 * odd and zero sizes, queued work. Failure modes, checked by
 * tests/dist_mpi_fail.sh from the output and exit status:
 *   never-arrive  rank 1 skips a collective: the others report AG_ERR_TIMEOUT
 *   kill          rank 1 dies (SIGKILL) mid-run: the others fail within the
 *                 timeout with a clear message, or are ended by mpirun;
 *                 nobody hangs. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "dist_ref.h"

static ag_group *g_group;
static int g_rank, g_size;
static ag_device g_dev = {AG_BACKEND_CPU, 0}; /* AG_DIST_TEST_DEVICE: a staged (non-CPU) device */

static ag_tensor *upload(ag_dtype dt, size_t n, const void *h) {
  int64_t shape[1] = {(int64_t)n};
  return ag_from_host(g_dev, dt, 1, shape, h);
}

typedef struct refarg {
  ag_dist_reduce op;
  int salt;
  size_t n, base;
} refarg;

static void expect(ag_tensor *t, ag_dtype dt, size_t n, const char *what, double (*ref)(ag_dtype, size_t, void *),
                   void *arg) {
  refarg *a = arg;
  void *h = malloc(n * ag_dtype_size(dt) + 1);
  assert_int_equal(ag_to_host(t, h, n * ag_dtype_size(dt)), AG_OK);
  for (size_t i = 0; i < n; i++) {
    double want = ref(dt, i, arg), got = fetch(dt, h, i);
    /* MPI sums in its own order, f32 for f32 and widened halves: allow
     * that rounding, scaled by the inputs' magnitude */
    double tol = ref_eps(dt) * (fabs(want) + ref_sumabs(dt, g_size, i, a->salt, a->base));
    if (!(want == got) && !(fabs(want - got) <= tol))
      fail_msg("rank %d: %s %s n=%zu: element %zu is %.9g, want %.9g", g_rank, what, ag_dtype_name(dt), n, i, got,
               want);
  }
  free(h);
}

/* MPI reduces in its own order (f32 in f32, halves widened to f32): the
 * comparison above allows the rounding of a different order. */
static double r_reduce(ag_dtype dt, size_t i, void *p) {
  refarg *a = p;
  return ref_reduce(dt, a->op, g_size, i, a->salt, a->base);
}
static double r_bcast(ag_dtype dt, size_t i, void *p) {
  refarg *a = p;
  unsigned char tmp[8];
  store(dt, tmp, 0, gen(dt, g_size - 1, i, a->salt));
  return fetch(dt, tmp, 0);
}
static double r_gather(ag_dtype dt, size_t i, void *p) {
  refarg *a = p;
  unsigned char tmp[8];
  store(dt, tmp, 0, gen(dt, (int)(i / a->n), i % a->n, a->salt));
  return fetch(dt, tmp, 0);
}

static void one(ag_dtype dt, size_t n, int salt) {
  void *h = make_input(dt, g_rank, n, salt);
  for (int op = AG_DIST_SUM; op <= AG_DIST_MIN; op++) {
    if (op == AG_DIST_AVG && dt == AG_I32) continue;
    refarg a = {(ag_dist_reduce)op, salt, n, 0};
    ag_tensor *t = upload(dt, n, h);
    assert_int_equal(ag_all_reduce(g_group, t, (ag_dist_reduce)op, NULL), AG_OK);
    expect(t, dt, n, "all_reduce", r_reduce, &a);
    ag_tensor_release(t);
  }
  refarg a = {AG_DIST_SUM, salt, n, 0};
  ag_tensor *t = upload(dt, n, h);
  assert_int_equal(ag_broadcast(g_group, t, g_size - 1, NULL), AG_OK);
  expect(t, dt, n, "broadcast", r_bcast, &a);
  ag_tensor_release(t);

  ag_tensor *in = upload(dt, n, h);
  int64_t shape[1] = {(int64_t)(n * (size_t)g_size)};
  ag_tensor *out = ag_zeros(g_dev, dt, 1, shape);
  assert_int_equal(ag_all_gather(g_group, in, out, NULL), AG_OK);
  expect(out, dt, n * (size_t)g_size, "all_gather", r_gather, &a);
  ag_tensor_release(in);
  ag_tensor_release(out);
  free(h);

  /* reduce-scatter: rank r's input is the concatenation, chunk r reduced */
  void *hb = make_input(dt, g_rank, n * (size_t)g_size, salt);
  in = upload(dt, n * (size_t)g_size, hb);
  shape[0] = (int64_t)n;
  out = ag_zeros(g_dev, dt, 1, shape);
  ag_dist_reduce op = dt == AG_I32 ? AG_DIST_MAX : AG_DIST_AVG;
  assert_int_equal(ag_reduce_scatter(g_group, in, out, op, NULL), AG_OK);
  refarg b = {op, salt, n, (size_t)g_rank * n};
  expect(out, dt, n, "reduce_scatter", r_reduce, &b);
  ag_tensor_release(in);
  ag_tensor_release(out);
  free(hb);
}

static void test_collectives(void **state) {
  /* all-reduces of up to 64 KiB by recursive doubling, 20000 f32/i32 as a
   * ring; 1000-4096 elements around the eager pieces (4000 bytes, for
   * messages of up to 16 KiB) */
  static const size_t sizes[] = {0, 1, 7, 1000, 1001, 3001, 4096, 20000};
  int salt = 1;
  for (int d = 0; d < NDT; d++) {
    if (k_dtypes[d] == AG_F64 && g_dev.backend != AG_BACKEND_CPU) continue; /* a CPU dtype */
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) one(k_dtypes[d], sizes[k], salt++);
  }
  if (g_size <= 2) { /* the large size once: CI runs 4 ranks on 2 cores */
    one(AG_F32, 1000003, salt++);
    one(AG_BF16, 1000003, salt++);
  }
  assert_int_equal(ag_group_barrier(g_group, NULL), AG_OK);
}

static void test_async(void **state) {
  enum { K = 5 };
  int64_t shape[1] = {333};
  ag_tensor *t[K];
  ag_work *w[K];
  for (int k = 0; k < K; k++) {
    t[k] = ag_full(g_dev, AG_F32, 1, shape, (double)(g_rank + 1) * (k + 1));
    assert_int_equal(ag_all_reduce(g_group, t[k], AG_DIST_SUM, &w[k]), AG_OK);
  }
  for (int k = K - 1; k >= 0; k--) {
    assert_int_equal(k % 2 ? ag_work_wait(w[k]) : ag_work_stream_wait(w[k], ag_stream_current(g_dev)), AG_OK);
    float v[333];
    assert_int_equal(ag_to_host(t[k], v, sizeof v), AG_OK);
    double want = (double)g_size * (g_size + 1) / 2 * (k + 1);
    assert_float_equal(v[332], want, 1e-3);
    ag_work_release(w[k]);
    ag_tensor_release(t[k]);
  }
}

static void test_identity(void **state) {
  assert_int_equal(ag_group_kind(g_group), AG_DIST_MPI);
  assert_true(g_size >= 2);
  assert_true(g_rank >= 0 && g_rank < g_size);
  /* rank and size agree with what all ranks see */
  int64_t shape[1] = {1};
  ag_tensor *t = ag_full(g_dev, AG_I32, 1, shape, 1);
  assert_int_equal(ag_all_reduce(g_group, t, AG_DIST_SUM, NULL), AG_OK);
  assert_int_equal((int)ag_item(t), g_size);
  ag_tensor_release(t);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Failure modes: print what each rank saw; the script checks it. */
static int failure_mode(const char *mode) {
  int64_t shape[1] = {1024};
  ag_tensor *t = ag_ones(AG_CPU, AG_F32, 1, shape);
  /* one good collective first: everyone is connected */
  ag_status st = ag_all_reduce(g_group, t, AG_DIST_SUM, NULL);
  if (st != AG_OK) {
    printf("rank %d: first all_reduce failed: %s\n", g_rank, ag_last_error());
    return 2;
  }
  if (g_rank == 1) {
    if (!strcmp(mode, "kill")) {
      fflush(stdout);
      raise(SIGKILL);
    }
    /* never-arrive: skip the collective, then leave without finalizing */
    printf("rank 1: skipping the collective\n");
    fflush(stdout);
    sleep(30); /* outlive the others' timeout; ended by mpirun or the test */
    return 3;
  }
  double t0 = now_s();
  st = ag_all_reduce(g_group, t, AG_DIST_SUM, NULL);
  printf("rank %d: all_reduce -> %s after %.2f s: %s\n", g_rank, ag_status_name(st), now_s() - t0,
         st == AG_OK ? "" : ag_last_error());
  fflush(stdout);
  return st == AG_OK ? 0 : 1;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "collectives";
  ag_group_options o;
  ag_group_options_default(&o);
  if (strcmp(mode, "collectives") != 0) o.timeout_ms = 2000;
  const char *dev = getenv("AG_DIST_TEST_DEVICE");
  if (dev && *dev && ag_device_parse(dev, &g_dev) != AG_OK) {
    fprintf(stderr, "AG_DIST_TEST_DEVICE: %s\n", ag_last_error());
    return 1;
  }
  if (ag_group_create_mpi(g_dev, &o, &g_group) != AG_OK) {
    fprintf(stderr, "ag_group_create_mpi: %s\n", ag_last_error());
    return 1;
  }
  g_rank = ag_group_rank(g_group);
  g_size = ag_group_size(g_group);
  if (strcmp(mode, "collectives") != 0) {
    int rc = failure_mode(mode);
    /* A broken group cannot finalize MPI (a peer is gone): exit directly,
     * with the failure in the status. */
    if (rc != 0) _exit(rc);
    ag_group_destroy(g_group);
    return 0;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_identity),
      cmocka_unit_test(test_collectives),
      cmocka_unit_test(test_async),
  };
  char name[32];
  snprintf(name, sizeof name, "dist_mpi rank %d/%d", g_rank, g_size);
  int rc = cmocka_run_group_tests_name(name, tests, NULL, NULL);
  ag_group_destroy(g_group); /* finalizes MPI (anygrad initialized it) */
  return rc;
}
