/* The NCCL module (comm/nccl) against a stub NCCL and CUDA runtime
 * (tests/nccl_stub): a group aborted from another thread while a collective
 * polls must not use the communicator after ncclCommAbort freed it, and the
 * collective must fail rather than report success; joining a communicator
 * whose peer never comes ends at the group's timeout. Argument: the module
 * file. Labelled "threads" for the TSan stage. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <cmocka.h>

#include "anygrad/anygrad.h"
#include "dist/dist_internal.h"

static const char *g_module_file;

typedef struct run_arg {
  const ag_dist_module *m;
  ag_dist_impl *im;
  ag_status st;
} run_arg;

static void *run_one(void *p) {
  run_arg *r = p;
  float x = 1;
  ag_coll c = {.kind = AG_COLL_ALL_REDUCE, .dtype = AG_F32, .op = AG_DIST_SUM, .buf = &x, .count = 1, .seq = 1};
  r->st = r->m->run(r->im, &c, ag__dist_now_ns() + 20 * 1000000000LL);
  return NULL;
}

static void abort_while_polling(void **state) {
  (void)state;
  void *h = dlopen(g_module_file, RTLD_NOW | RTLD_LOCAL);
  if (!h) fail_msg("%s", dlerror());
  ag_dist_module_get_fn get = (ag_dist_module_get_fn)dlsym(h, AG_DIST_MODULE_SYMBOL);
  assert_non_null(get);
  const ag_dist_module *m = get(AG_DIST_NCCL);
  assert_non_null(m);
  char why[512];
  if (!m->probe(why, sizeof why)) fail_msg("the stub NCCL did not load: %s", why);
  void *stub = dlopen("libnccl.so.2", RTLD_NOW | RTLD_NOLOAD);
  assert_non_null(stub);
  int (*used_after_free)(void) = (int (*)(void))dlsym(stub, "nccl_stub_used_after_free");
  int (*aborts)(void) = (int (*)(void))dlsym(stub, "nccl_stub_aborts");
  assert_non_null(used_after_free);
  assert_non_null(aborts);

  for (int round = 0; round < 3; round++) {
    ag_dist_create_args a = {.rank = 0, .size = 1, .dev_index = 0, .timeout_ms = 20000};
    assert_int_equal(m->get_id(a.id), AG_OK);
    ag_dist_impl *im = NULL;
    ag_dist_caps caps;
    assert_int_equal(m->create(&a, &im, &caps), AG_OK);
    run_arg r = {.m = m, .im = im, .st = AG_OK};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, run_one, &r), 0);
    struct timespec ts = {0, 2000000 * (round + 1)};
    nanosleep(&ts, NULL); /* the collective is polling by now */
    m->abort(im, AG_ERR_ABORTED, "aborted by the test");
    pthread_join(t, NULL);
    if (used_after_free()) fail_msg("round %d: the communicator was used %d times after ncclCommAbort", round,
                                    used_after_free());
    assert_int_not_equal(r.st, AG_OK); /* an aborted collective does not succeed */
    char msg[256];
    assert_int_equal(m->broken(im, msg, sizeof msg), AG_ERR_ABORTED);
    m->destroy(im);
    assert_int_equal(aborts(), round + 1);
    assert_int_equal(used_after_free(), 0);
  }
  /* aborted with no collective running: at once, on the aborting thread */
  ag_dist_create_args a = {.rank = 0, .size = 1, .dev_index = 0, .timeout_ms = 20000};
  ag_dist_impl *im = NULL;
  ag_dist_caps caps;
  assert_int_equal(m->create(&a, &im, &caps), AG_OK);
  m->abort(im, AG_ERR_ABORTED, "idle abort");
  assert_int_equal(aborts(), 4);
  run_arg r = {.m = m, .im = im, .st = AG_OK};
  run_one(&r);
  assert_int_equal(r.st, AG_ERR_ABORTED); /* later runs fail */
  m->destroy(im);
  assert_int_equal(used_after_free(), 0);
}

typedef struct create_arg {
  const ag_dist_module *m;
  ag_dist_create_args a;
  ag_dist_impl *im;
  ag_status st;
  atomic_int done;
} create_arg;

static void *create_one(void *p) {
  create_arg *c = p;
  ag_dist_caps caps;
  c->st = c->m->create(&c->a, &c->im, &caps);
  atomic_store(&c->done, 1);
  return NULL;
}

static void init_deadline(void **state) {
  (void)state;
  void *h = dlopen(g_module_file, RTLD_NOW | RTLD_LOCAL);
  if (!h) fail_msg("%s", dlerror());
  const ag_dist_module *m = ((ag_dist_module_get_fn)dlsym(h, AG_DIST_MODULE_SYMBOL))(AG_DIST_NCCL);
  char why[512];
  if (!m->probe(why, sizeof why)) fail_msg("the stub NCCL did not load: %s", why);
  setenv("NCCL_STUB_INIT", "never", 1);
  static create_arg c;
  c.m = m;
  c.a = (ag_dist_create_args){.rank = 0, .size = 2, .dev_index = 0, .timeout_ms = 200};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, create_one, &c), 0);
  for (int i = 0; i < 500 && !atomic_load(&c.done); i++) {
    struct timespec ts = {0, 10000000};
    nanosleep(&ts, NULL);
  }
  if (!atomic_load(&c.done)) fail_msg("creating a group whose peer never joins did not end at its 200 ms timeout");
  pthread_join(t, NULL);
  unsetenv("NCCL_STUB_INIT");
  assert_int_equal(c.st, AG_ERR_TIMEOUT);
  assert_null(c.im);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: nccl_abort_test libanygrad-nccl.so\n");
    return 2;
  }
  g_module_file = argv[1];
  const struct CMUnitTest tests[] = {cmocka_unit_test(abort_while_polling), cmocka_unit_test(init_deadline)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
