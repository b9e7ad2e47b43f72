/* The backend registry: names found as modules get kinds, device strings
 * with those names parse, the named kinds keep their numbers, and the ABI
 * check refuses another major, naming both versions. The modules are
 * tests/extbackend/minihost.c built under several names and versions
 * (tests/registry.cmake), found on AG_BACKEND_PATH; older minors, older
 * headers and other op tables: tests/gpu3_abi_test.c. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "anygrad/anygrad.h"
#include "anygrad/backend.h"

static ag_backend_kind find(const char *name) {
  ag_backend_kind k = (ag_backend_kind)-1;
  ag_status st = ag_backend_find(name, &k);
  if (st != AG_OK) fail_msg("ag_backend_find(%s): %s", name, ag_last_error());
  return k;
}

static void assert_has(const char *s, const char *part) {
  if (!strstr(s, part)) fail_msg("'%s' does not contain '%s'", s, part);
}

static void named_kinds_keep_their_numbers(void **state) {
  (void)state;
  assert_int_equal(find("cpu"), AG_BACKEND_CPU);
  assert_int_equal(find("cuda"), AG_BACKEND_CUDA);
  assert_int_equal(find("hip"), AG_BACKEND_HIP);
  assert_int_equal(find("opencl"), AG_BACKEND_OPENCL);
  assert_int_equal(find("gpuemu"), AG_BACKEND_GPUEMU);
  assert_string_equal(ag_backend_name(AG_BACKEND_GPUEMU), "gpuemu");
  assert_string_equal(ag_backend_name((ag_backend_kind)AG_MAX_BACKENDS), "?");
  ag_backend_info bi;
  assert_int_equal(ag_backend_info_get(AG_BACKEND_CPU, &bi), AG_OK);
  assert_string_equal(bi.name, "cpu");
  assert_string_equal(bi.path, ""); /* built in */
  assert_true(bi.host_memory && bi.addressable);
  assert_int_equal(bi.dlpack_device, kDLCPU);
  assert_int_equal(bi.abi_major, AG_BACKEND_ABI_MAJOR);
  assert_int_equal(bi.abi_minor, AG_BACKEND_ABI_MINOR);
}

static void module_found_by_name(void **state) {
  (void)state;
  ag_backend_kind k = find("minihost");
  assert_true(k >= AG_BACKEND_COUNT);
  assert_int_equal(find("minihost"), k); /* registered once */
  assert_string_equal(ag_backend_name(k), "minihost");
  assert_true(ag_backend_available(k, NULL));
  assert_int_equal(ag_backend_device_count(k), 1);
  ag_backend_info bi;
  assert_int_equal(ag_backend_info_get(k, &bi), AG_OK);
  assert_has(bi.path, "libanygrad-minihost.so");
  assert_true(bi.host_memory);
  assert_int_equal(bi.priority, -1);
  assert_has(bi.description, "out-of-tree");

  ag_device d;
  assert_int_equal(ag_device_parse("minihost:0", &d), AG_OK);
  assert_int_equal(d.backend, k);
  assert_int_equal(d.index, 0);
  assert_int_equal(ag_device_parse("minihost", &d), AG_OK);
  char buf[32];
  assert_string_equal(ag_device_str(d, buf, sizeof buf), "minihost:0");
  assert_int_equal(ag_device_parse("minihost:1", &d), AG_ERR_DEVICE);
  assert_has(ag_last_error(), "minihost has 1 device");

  /* its ops run; what it lacks is a clear AG_ERR_UNSUPPORTED */
  ag_device_parse("minihost:0", &d);
  int64_t shape[1] = {5};
  ag_tensor *a = ag_full(d, AG_F32, 1, shape, 2.0), *b = ag_arange(AG_CPU, AG_F32, 0, 5, 1);
  ag_tensor *bd = ag_to_device(b, d);
  ag_tensor *c = ag_add(a, bd), *cb = ag_mul(c, bd), *m = ag_neg(cb);
  assert_non_null(m);
  float out[5];
  assert_int_equal(ag_to_host(m, out, sizeof out), AG_OK);
  for (int i = 0; i < 5; i++) assert_float_equal(out[i], -(2.0f + i) * i, 0);
  ag_tensor *s = ag_sum(m, 0, NULL, false);
  assert_non_null(s);
  assert_float_equal(ag_item(s), -(0 + 3 + 8 + 15 + 24), 0);
  ag_error_clear();
  assert_null(ag_log(a));
  assert_int_equal(ag_last_status(), AG_ERR_UNSUPPORTED);
  assert_has(ag_last_error(), "minihost");
  ag_tensor *all[] = {a, b, bd, c, cb, m, s};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) ag_tensor_release(all[i]);
  /* never chosen: priority < 0 */
  assert_int_not_equal(ag_device_best().backend, k);
}

static void bad_names(void **state) {
  (void)state;
  ag_backend_kind k;
  const char *bad[] = {"", "Cuda", "a/b", "x:0", "../x", "name_that_is_much_too_long_for_a_backend"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    if (ag_backend_find(bad[i], &k) != AG_ERR_INVALID) fail_msg("'%s' accepted", bad[i]);
    assert_has(ag_last_error(), "not a backend name");
  }
  assert_int_equal(ag_backend_find(NULL, &k), AG_ERR_INVALID);
  assert_int_equal(ag_backend_find("nosuch", &k), AG_ERR_INVALID);
  assert_has(ag_last_error(), "no backend 'nosuch'");
  assert_has(ag_last_error(), "libanygrad-nosuch.so");
  assert_has(ag_last_error(), "minihost"); /* the known names are listed */
  assert_int_equal(ag_backend_find("mpi", &k), AG_ERR_INVALID);
  assert_has(ag_last_error(), "communication module");
  ag_device d;
  assert_int_equal(ag_device_parse("nosuch:0", &d), AG_ERR_INVALID);
  assert_has(ag_last_error(), "not a device");
  assert_has(ag_last_error(), "nosuch");
  ag_backend_info bi;
  assert_int_equal(ag_backend_info_get((ag_backend_kind)-1, &bi), AG_ERR_INVALID);
  assert_null(ag_zeros((ag_device){AG_MAX_BACKENDS - 1, 0}, AG_F32, 1, (int64_t[]){1}));
  assert_int_equal(ag_last_status(), AG_ERR_DEVICE);
}

/* Refused: the reason names the module's version and anygrad's. */
static void refused(const char *name, const char *want1, const char *want2) {
  ag_backend_kind k = find(name);
  const char *why = NULL;
  assert_false(ag_backend_available(k, &why));
  assert_has(why, want1);
  assert_has(why, want2);
  assert_has(why, name);
  ag_device d;
  char s[32];
  snprintf(s, sizeof s, "%s:0", name);
  assert_int_equal(ag_device_parse(s, &d), AG_ERR_UNAVAILABLE);
  assert_has(ag_last_error(), want1);
  ag_backend_info bi;
  assert_int_equal(ag_backend_info_get(k, &bi), AG_ERR_UNAVAILABLE);
}

static void abi_other_major_refused(void **state) {
  (void)state;
  char mod[32], core[32];
  snprintf(mod, sizeof mod, "backend ABI %u.0", AG_BACKEND_ABI_MAJOR + 1);
  snprintf(core, sizeof core, "anygrad's is %u.%u", AG_BACKEND_ABI_MAJOR, AG_BACKEND_ABI_MINOR);
  refused("abinext", mod, core);
  /* a module of the exact-match era (abi_version 3 where struct_size is) */
  refused("abi3", "backend ABI 3,", core);
  /* the right major with a table shorter than the major's first minor */
  char first[32];
  snprintf(first, sizeof first, "%u.0", AG_BACKEND_ABI_MAJOR);
  refused("abishort", "64-byte table", first);
}

static void count_lists_every_module(void **state) {
  (void)state;
  int n = ag_backend_count();
  assert_true(n >= AG_BACKEND_COUNT + 4);
  const char *want[] = {"minihost", "abinext", "abi3", "abishort"};
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    bool seen = false;
    for (int k = 0; k < n; k++) seen |= strcmp(ag_backend_name((ag_backend_kind)k), want[i]) == 0;
    if (!seen) fail_msg("%s not listed", want[i]);
  }
  for (int k = 0; k < n; k++) {
    assert_string_not_equal(ag_backend_name((ag_backend_kind)k), "mpi");
    assert_string_not_equal(ag_backend_name((ag_backend_kind)k), "nccl");
  }
}

static void *racer(void *arg) {
  const char *names[] = {"minihost", "abi3", "cpu", "gpuemu", "abinext"};
  long id = (long)arg;
  for (int i = 0; i < 200; i++) {
    ag_backend_kind k;
    const char *nm = names[(id + i) % 5];
    if (ag_backend_find(nm, &k) != AG_OK || strcmp(ag_backend_name(k), nm) != 0) return (void *)1;
    (void)ag_backend_available(k, NULL);
    (void)ag_backend_count();
  }
  return NULL;
}

static void threads_agree(void **state) {
  (void)state;
  pthread_t t[8];
  for (long i = 0; i < 8; i++) assert_int_equal(pthread_create(&t[i], NULL, racer, (void *)i), 0);
  for (int i = 0; i < 8; i++) {
    void *r;
    pthread_join(t[i], &r);
    assert_null(r);
  }
}

int main(void) {
  /* threads first, while nothing is registered yet */
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(threads_agree),
      cmocka_unit_test(named_kinds_keep_their_numbers),
      cmocka_unit_test(module_found_by_name),
      cmocka_unit_test(bad_names),
      cmocka_unit_test(abi_other_major_refused),
      cmocka_unit_test(count_lists_every_module),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
