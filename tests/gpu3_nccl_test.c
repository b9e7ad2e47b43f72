/* When the NCCL/RCCL module (comm/nccl) reports a collective complete,
 * against the stub NCCL, RCCL and runtimes of tests/nccl_stub set to do what
 * a non-blocking communicator may do: return ncclInProgress and enqueue the
 * collective later (on a later ncclCommGetAsyncError poll, or from another
 * thread), fail asynchronously, be aborted while a collective is still being
 * enqueued, take several polls to abort or destroy. A run must return only
 * when the result is in the buffer; the RCCL path must leave no
 * hipErrorNotReady behind for the thread's next launch. The last test drives
 * the module through a group on the CPU device (device buffers forced on),
 * so an f16 sum goes through the f32 staging blocks. Argument: the module
 * file. Linked statically (for the core's test entry) with its symbols
 * exported, so the module's errors land in this copy of the core. Labelled
 * "threads" for the TSan stage. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "anygrad/anygrad.h"
#include "dist/dist_internal.h"

static const char *g_module_file;

/* the stub's controls */
static int (*stub_set)(const char *, long long);
static void (*stub_reset)(void);
static int (*stub_used_after_free)(void), (*stub_aborts)(void), (*stub_destroys)(void), (*stub_invalid_usage)(void),
    (*stub_queued)(void), (*stub_releasing)(void);
static int (*hip_peek)(void), (*hip_get_last)(void);

static const ag_dist_module *module(int kind) {
  void *h = dlopen(g_module_file, RTLD_NOW | RTLD_LOCAL);
  if (!h) fail_msg("%s", dlerror());
  ag_dist_module_get_fn get = (ag_dist_module_get_fn)dlsym(h, AG_DIST_MODULE_SYMBOL);
  assert_non_null(get);
  const ag_dist_module *m = get(kind);
  assert_non_null(m);
  char why[512];
  if (!m->probe(why, sizeof why)) fail_msg("the stub %s did not load: %s", m->name, why);
  void *stub = dlopen("libnccl.so.2", RTLD_NOW | RTLD_NOLOAD);
  assert_non_null(stub);
#define LOOK(var, name)                                 \
  do {                                                  \
    *(void **)&var = dlsym(stub, name);                 \
    if (!var) fail_msg("the stub lacks %s", name);      \
  } while (0)
  LOOK(stub_set, "nccl_stub_set");
  LOOK(stub_reset, "nccl_stub_reset");
  LOOK(stub_used_after_free, "nccl_stub_used_after_free");
  LOOK(stub_aborts, "nccl_stub_aborts");
  LOOK(stub_destroys, "nccl_stub_destroys");
  LOOK(stub_invalid_usage, "nccl_stub_invalid_usage");
  LOOK(stub_queued, "nccl_stub_queued");
  LOOK(stub_releasing, "nccl_stub_releasing");
  LOOK(hip_peek, "hipPeekAtLastError");
  LOOK(hip_get_last, "hipGetLastError");
#undef LOOK
  stub_reset();
  return m;
}

static void set(const char *name, long long v) {
  if (stub_set(name, v) != 0) fail_msg("the stub has no knob %s", name);
}

/* A 2-rank communicator whose peer contributes what this rank does. */
static ag_dist_impl *create(const ag_dist_module *m, int64_t timeout_ms) {
  ag_dist_create_args a = {.rank = 0, .size = 2, .dev_index = 0, .timeout_ms = timeout_ms};
  assert_int_equal(m->get_id(a.id), AG_OK);
  ag_dist_impl *im = NULL;
  ag_dist_caps caps;
  if (m->create(&a, &im, &caps) != AG_OK) fail_msg("create: %s", ag_last_error());
  return im;
}

static ag_status all_reduce(const ag_dist_module *m, ag_dist_impl *im, float *x, size_t n, uint64_t seq,
                            int64_t timeout_ms) {
  ag_coll c = {.kind = AG_COLL_ALL_REDUCE, .dtype = AG_F32, .op = AG_DIST_SUM, .buf = x, .count = n, .seq = seq};
  return m->run(im, &c, ag__dist_deadline_ns(timeout_ms));
}

/* Two all-reduces in a row with NCCL enqueueing as `mode` says: each run
 * returns with the sum in the buffer, and the second is not refused as a
 * call made while the first was still in progress. */
static void enqueued_later(int kind, int mode) {
  const ag_dist_module *m = module(kind);
  set("enqueue", mode);
  set("enqueue_polls", 4);
  set("enqueue_delay_us", 3000);
  set("run_us", 1000);
  ag_dist_impl *im = create(m, 20000);
  float x[3] = {1, 2, 3};
  char report[1024] = "";
  bool bad = false;
  for (int i = 0; i < 2; i++) {
    ag_status st = all_reduce(m, im, x, 3, (uint64_t)i + 1, 20000);
    float want = (float)(2 << i);
    size_t len = strlen(report);
    if (st != AG_OK) {
      snprintf(report + len, sizeof report - len, "; run %d -> %s", i + 1, ag_last_error());
      bad = true;
      break;
    }
    snprintf(report + len, sizeof report - len, "; run %d -> AG_OK; buffer when run returned: %g (expected %g)",
             i + 1, (double)x[0], (double)want);
    if (x[0] != want || x[2] != 3 * want) bad = true;
  }
  if (bad) fail_msg("%s, enqueue mode %d%s", m->name, mode, report);
  assert_int_equal(stub_queued(), 0);
  assert_int_equal(stub_invalid_usage(), 0);
  m->destroy(im);
  assert_int_equal(stub_destroys(), 1);
  assert_int_equal(stub_used_after_free(), 0);
}

static void nccl_enqueued_on_poll(void **state) {
  (void)state;
  enqueued_later(AG_DIST_NCCL, 1);
}
static void nccl_enqueued_by_thread(void **state) {
  (void)state;
  enqueued_later(AG_DIST_NCCL, 2);
}
static void rccl_enqueued_on_poll(void **state) {
  (void)state;
  enqueued_later(AG_DIST_RCCL, 1);
}

/* All-gather and reduce-scatter write a separate output. */
static void gather_scatter_enqueued_later(void **state) {
  (void)state;
  const ag_dist_module *m = module(AG_DIST_NCCL);
  set("enqueue", 1);
  set("run_us", 500);
  ag_dist_impl *im = create(m, 20000);
  float in[4] = {1, 2, 3, 4}, out[8] = {0};
  ag_coll g = {.kind = AG_COLL_ALL_GATHER, .dtype = AG_F32, .buf = in, .out = out, .count = 4, .seq = 1};
  if (m->run(im, &g, ag__dist_deadline_ns(20000)) != AG_OK) fail_msg("all-gather: %s", ag_last_error());
  assert_true(out[0] == 1 && out[3] == 4 && out[4] == 1 && out[7] == 4);
  float rs[2] = {0};
  ag_coll r = {.kind = AG_COLL_REDUCE_SCATTER, .dtype = AG_F32, .op = AG_DIST_SUM, .buf = in, .out = rs, .count = 2,
               .seq = 2};
  if (m->run(im, &r, ag__dist_deadline_ns(20000)) != AG_OK) fail_msg("reduce-scatter: %s", ag_last_error());
  assert_true(rs[0] == 2 && rs[1] == 4);
  ag_coll b = {.kind = AG_COLL_BARRIER, .seq = 3};
  if (m->run(im, &b, ag__dist_deadline_ns(20000)) != AG_OK) fail_msg("barrier: %s", ag_last_error());
  assert_int_equal(stub_invalid_usage(), 0);
  m->destroy(im);
  assert_int_equal(stub_used_after_free(), 0);
}

/* A peer fails after NCCL enqueued the collective: the run fails with the
 * asynchronous error, the communicator is aborted, and the run returns only
 * once the aborted kernel left the stream (nothing writes the buffer after). */
static void async_error_after_enqueue(void **state) {
  (void)state;
  const ag_dist_module *m = module(AG_DIST_NCCL);
  set("enqueue", 1);
  set("async_error", 2); /* ncclSystemError */
  ag_dist_impl *im = create(m, 20000);
  float x = 1;
  ag_status st = all_reduce(m, im, &x, 1, 1, 20000);
  assert_int_equal(st, AG_ERR_BACKEND);
  assert_non_null(strstr(ag_last_error(), "asynchronous error"));
  assert_int_equal(stub_aborts(), 1);
  assert_int_equal(stub_queued(), 0);
  assert_true(x == 1);
  char msg[512];
  assert_int_equal(m->broken(im, msg, sizeof msg), AG_ERR_BACKEND);
  m->destroy(im);
  assert_int_equal(stub_destroys(), 0); /* aborted: nothing left to destroy */
  assert_int_equal(stub_used_after_free(), 0);
}

typedef struct run_arg {
  const ag_dist_module *m;
  ag_dist_impl *im;
  ag_status st;
  float x;
  int64_t took_ns;
} run_arg;

static void *run_thread(void *p) {
  run_arg *r = p;
  int64_t t0 = ag__dist_now_ns();
  r->st = all_reduce(r->m, r->im, &r->x, 1, 1, 20000);
  r->took_ns = ag__dist_now_ns() - t0;
  return NULL;
}

/* The group is aborted from another thread while NCCL is still enqueueing
 * (ncclInProgress for 2 s): the run fails at its next poll, well before the
 * enqueue would have happened, and nothing touches the freed communicator. */
static void abort_while_enqueueing(void **state) {
  (void)state;
  const ag_dist_module *m = module(AG_DIST_NCCL);
  set("enqueue", 2);
  set("enqueue_delay_us", 2000000);
  ag_dist_impl *im = create(m, 20000);
  run_arg r = {.m = m, .im = im, .x = 1};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, run_thread, &r), 0);
  struct timespec ts = {0, 20000000};
  nanosleep(&ts, NULL);
  m->abort(im, AG_ERR_ABORTED, "aborted by the test");
  pthread_join(t, NULL);
  if (r.st == AG_OK) fail_msg("a collective aborted while NCCL was still enqueueing it returned AG_OK");
  assert_int_equal(r.st, AG_ERR_ABORTED);
  assert_true(r.took_ns < 1500000000LL);
  assert_int_equal(stub_aborts(), 1);
  m->destroy(im);
  assert_int_equal(stub_used_after_free(), 0);
  assert_int_equal(stub_invalid_usage(), 0);
}

/* NCCL never leaves ncclInProgress: the run ends at its deadline, saying the
 * collective was never enqueued, and the communicator is aborted. */
static void in_progress_until_deadline(void **state) {
  (void)state;
  const ag_dist_module *m = module(AG_DIST_NCCL);
  set("enqueue", 1);
  set("enqueue_polls", 1000000000);
  ag_dist_impl *im = create(m, 20000);
  float x = 1;
  ag_status st = all_reduce(m, im, &x, 1, 7, 150);
  assert_int_equal(st, AG_ERR_TIMEOUT);
  if (!strstr(ag_last_error(), "in progress")) fail_msg("message: %s", ag_last_error());
  assert_int_equal(stub_aborts(), 1);
  m->destroy(im);
  assert_int_equal(stub_used_after_free(), 0);
}

/* ROCm records hipErrorNotReady from hipStreamQuery as the thread's last
 * error: after a run that polled a busy stream, the thread's next launch
 * check (hipGetLastError after a kernel, as the glue does) must see
 * hipSuccess. */
static void rccl_not_ready_cleared(void **state) {
  (void)state;
  const ag_dist_module *m = module(AG_DIST_RCCL);
  set("run_us", 0);
  set("min_not_ready", 3);
  ag_dist_impl *im = create(m, 20000);
  float x = 1;
  if (all_reduce(m, im, &x, 1, 1, 20000) != AG_OK) fail_msg("%s", ag_last_error());
  assert_true(x == 2);
  int last = hip_peek();
  if (last != 0) fail_msg("after an RCCL all-reduce the thread's last HIP error is %d (hipErrorNotReady left by "
                          "hipStreamQuery): the next launch check fails", last);
  assert_int_equal(hip_get_last(), 0);
  m->destroy(im);
  assert_int_equal(stub_used_after_free(), 0);
}

/* ncclCommAbort and ncclCommDestroy return ncclInProgress on a non-blocking
 * communicator (the stub finishes them on the third ncclCommGetAsyncError
 * poll): polled until done, and the communicator is not used after. A
 * release that fails is reported: an abort in the group's message, a
 * destroy as a warning on stderr. */
static void release_in_progress(void **state) {
  (void)state;
  const ag_dist_module *m = module(AG_DIST_NCCL);
  set("release_polls", 3);
  ag_dist_impl *im = create(m, 20000);
  m->abort(im, AG_ERR_ABORTED, "idle abort");
  assert_int_equal(stub_aborts(), 1);
  if (stub_releasing()) fail_msg("ncclCommAbort returned ncclInProgress and was left in progress");
  char msg[512];
  assert_int_equal(m->broken(im, msg, sizeof msg), AG_ERR_ABORTED);
  if (strstr(msg, "ncclCommAbort")) fail_msg("an abort that completed is reported: %s", msg);
  m->destroy(im);
  im = create(m, 20000);
  m->destroy(im);
  assert_int_equal(stub_destroys(), 1);
  if (stub_releasing()) fail_msg("ncclCommDestroy returned ncclInProgress and was left in progress");
  assert_int_equal(stub_used_after_free(), 0);

  /* failing releases: after polls, and at once */
  set("release_error", 2);
  im = create(m, 20000);
  m->abort(im, AG_ERR_ABORTED, "idle abort");
  assert_int_equal(m->broken(im, msg, sizeof msg), AG_ERR_ABORTED);
  if (!strstr(msg, "ncclCommAbort")) fail_msg("a failed ncclCommAbort is not reported: '%s'", msg);
  m->destroy(im);
  set("release_polls", 0);
  im = create(m, 20000);
  char path[] = "/tmp/gpu3_nccl_stderr_XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  fflush(stderr);
  int saved = dup(2);
  dup2(fd, 2);
  m->destroy(im);
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  char text[512] = "";
  ssize_t got = pread(fd, text, sizeof text - 1, 0);
  close(fd);
  unlink(path);
  if (got <= 0 || !strstr(text, "ncclCommDestroy")) fail_msg("a failed ncclCommDestroy is not reported: '%s'", text);
  assert_int_equal(stub_used_after_free(), 0);
}

/* Through a group: an f16 sum is widened into f32 staging blocks, reduced by
 * NCCL (which enqueues it on a later poll) and cast back; two in a row. */
static void group_half_sum(void **state) {
  (void)state;
  const ag_dist_module *m = module(AG_DIST_NCCL);
  set("enqueue", 1);
  set("run_us", 1000);
  unsetenv("AG_DIST_HALF_REDUCE");
  ag_dist_create_args a = {.rank = 0, .size = 2};
  ag_group *g = NULL;
  if (ag__group_create_with_module(m, AG_CPU, 20000, &a, &g) != AG_OK) fail_msg("group: %s", ag_last_error());
  int64_t n = 5;
  float v[5] = {1, 2, 3, 4, 5}, back[5];
  ag_tensor *f = ag_from_host(AG_CPU, AG_F32, 1, &n, v);
  assert_non_null(f);
  ag_tensor *t = ag_cast(f, AG_F16);
  assert_non_null(t);
  for (int i = 0; i < 2; i++) {
    if (ag_all_reduce(g, t, AG_DIST_SUM, NULL) != AG_OK) fail_msg("f16 all-reduce %d: %s", i + 1, ag_last_error());
    ag_tensor *b = ag_cast(t, AG_F32);
    assert_non_null(b);
    assert_int_equal(ag_to_host(b, back, sizeof back), AG_OK);
    ag_tensor_release(b);
    float want = (float)(2 << i);
    if (back[0] != want || back[4] != 5 * want)
      fail_msg("f16 all-reduce %d through the staging blocks: %g (expected %g)", i + 1, (double)back[0],
               (double)want);
  }
  ag_tensor_release(t);
  ag_tensor_release(f);
  ag_group_destroy(g);
  assert_int_equal(stub_invalid_usage(), 0);
  assert_int_equal(stub_used_after_free(), 0);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: gpu3_nccl_test libanygrad-nccl.so\n");
    return 2;
  }
  g_module_file = argv[1];
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(nccl_enqueued_on_poll),     cmocka_unit_test(nccl_enqueued_by_thread),
      cmocka_unit_test(rccl_enqueued_on_poll),     cmocka_unit_test(gather_scatter_enqueued_later),
      cmocka_unit_test(async_error_after_enqueue), cmocka_unit_test(abort_while_enqueueing),
      cmocka_unit_test(in_progress_until_deadline), cmocka_unit_test(rccl_not_ready_cleared),
      cmocka_unit_test(release_in_progress),       cmocka_unit_test(group_half_sum),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
