/* The op tables are part of the backend ABI: a module built against other
 * tables is refused or bound by name, never run under another op's number.
 * The modules are tests/extbackend/minihost.c (exp, sqrt and their backward
 * among its few ops) built from older headers (tests/gpu3_abi.cmake):
 *   abi41      every header from dfcea3c (ABI 4.1), where the binary
 *              sub-op 16 was sqrt's backward; ffd11fb made it exp's
 *   oldtables  today's headers but dfcea3c's op table, as a module built
 *              against an older minor's tables
 *   badtables  tables of another call layout, which no name can bind
 *   kcallnew   a newer minor whose kernel call is longer than the core's
 * Either the module is unavailable with the reason, or the core's exp and
 * sqrt backward reach the module's own codes for them: the gradients are
 * right. */
#include <math.h>
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
  if (ag_backend_find(name, &k) != AG_OK) fail_msg("ag_backend_find(%s): %s", name, ag_last_error());
  return k;
}

static void assert_has(const char *s, const char *part) {
  if (!strstr(s, part)) fail_msg("'%s' does not contain '%s'", s, part);
}

/* d(sum(f(x)))/dx on device d for f = exp (sqrt = false) or sqrt, against
 * the CPU's numbers: the backward sub-op the module ran is the right one. */
static void check_backward(ag_device d, bool sqrt_op) {
  const float xs[4] = {0.25f, 1.0f, 2.25f, 4.0f};
  int64_t shape[1] = {4};
  ag_tensor *x = ag_from_host(d, AG_F32, 1, shape, xs);
  assert_non_null(x);
  assert_int_equal(ag_tensor_set_requires_grad(x, true), AG_OK);
  ag_tensor *y = sqrt_op ? ag_sqrt(x) : ag_exp(x);
  ag_tensor *s = ag_sum(y, 0, NULL, false);
  if (!s) fail_msg("%s forward: %s", sqrt_op ? "sqrt" : "exp", ag_last_error());
  if (ag_backward(s, NULL, false) != AG_OK) fail_msg("backward: %s", ag_last_error());
  ag_tensor *g = ag_tensor_grad(x);
  assert_non_null(g);
  float out[4];
  assert_int_equal(ag_to_host(g, out, sizeof out), AG_OK);
  for (int i = 0; i < 4; i++) {
    float want = sqrt_op ? 0.5f / sqrtf(xs[i]) : expf(xs[i]);
    if (fabsf(out[i] - want) > 1e-5f * fabsf(want))
      fail_msg("%s backward at x = %g gave %g, not %g: the module ran another sub-op", sqrt_op ? "sqrt" : "exp",
               (double)xs[i], (double)out[i], (double)want);
  }
  ag_tensor_release(s);
  ag_tensor_release(y);
  ag_tensor_release(x);
}

/* A module built from the 4.1 headers: refused, naming both versions. */
static void module_of_41_headers_refused(void **state) {
  (void)state;
  ag_backend_kind k = find("abi41");
  const char *why = NULL;
  if (ag_backend_available(k, &why)) {
    ag_device d;
    assert_int_equal(ag_device_parse("abi41:0", &d), AG_OK);
    check_backward(d, false);
    check_backward(d, true);
    fail_msg("a module of the 4.1 headers loaded (its gradients happened to be right)");
  }
  assert_has(why, "libanygrad-abi41.so");
  assert_has(why, "backend ABI 4.1");
  char core[32];
  snprintf(core, sizeof core, "anygrad's is %u.%u", AG_BACKEND_ABI_MAJOR, AG_BACKEND_ABI_MINOR);
  assert_has(why, core);
  ag_device d;
  assert_int_equal(ag_device_parse("abi41:0", &d), AG_ERR_UNAVAILABLE);
  assert_has(ag_last_error(), "backend ABI 4.1");
}

/* Today's ABI with dfcea3c's op table: its binary sub-ops are numbered
 * two lower from NEG_BWD on, and it lacks selu and the other ops ffd11fb
 * added. */
static void module_of_old_tables_bound_by_name(void **state) {
  (void)state;
  ag_backend_kind k = find("oldtables");
  const char *why = NULL;
  if (!ag_backend_available(k, &why)) fail_msg("oldtables refused: %s", why);
  ag_device d;
  assert_int_equal(ag_device_parse("oldtables:0", &d), AG_OK);
  check_backward(d, false);
  check_backward(d, true);
  /* an op its tables lack is unsupported, whatever its number */
  int64_t shape[1] = {2};
  ag_tensor *x = ag_full(d, AG_F32, 1, shape, 0.5);
  assert_non_null(x);
  ag_error_clear();
  assert_null(ag_selu(x));
  assert_int_equal(ag_last_status(), AG_ERR_UNSUPPORTED);
  assert_has(ag_last_error(), "oldtables");
  ag_error_clear();
  ag_tensor_release(x);
}

/* Tables that differ where nothing binds by name (the call's layout): the
 * reason names both tables' hashes and the first entry that differs. */
static void module_of_other_layout_refused(void **state) {
  (void)state;
  ag_backend_kind k = find("badtables");
  const char *why = NULL;
  assert_false(ag_backend_available(k, &why));
  char hashes[96];
  snprintf(hashes, sizeof hashes, "anygrad's %016llx", (unsigned long long)ag_tables_hash(AG_BACKEND_TABLES));
  assert_has(why, hashes);
  assert_has(why, "the module's op tables ");
  assert_has(why, "layout entry 0 is 'dims=16' in the module, 'dims=8' in anygrad");
  ag_device d;
  assert_int_equal(ag_device_parse("badtables:0", &d), AG_ERR_UNAVAILABLE);
  assert_has(ag_last_error(), "dims=16");
}

/* A newer minor loads (its longer table's extra entries ignored) and
 * refuses the core's shorter kernel call cleanly, naming both sizes, instead
 * of reading past its end. */
static void newer_module_refuses_a_shorter_call(void **state) {
  (void)state;
  ag_backend_kind k = find("kcallnew");
  const char *why = NULL;
  if (!ag_backend_available(k, &why)) fail_msg("kcallnew refused: %s", why);
  ag_backend_info bi;
  assert_int_equal(ag_backend_info_get(k, &bi), AG_OK);
  assert_int_equal(bi.abi_minor, AG_BACKEND_ABI_MINOR + 1);
  ag_device d;
  assert_int_equal(ag_device_parse("kcallnew:0", &d), AG_OK);
  int64_t shape[1] = {3};
  ag_error_clear();
  ag_tensor *a = ag_full(d, AG_F32, 1, shape, 1.0);
  assert_null(a);
  assert_int_equal(ag_last_status(), AG_ERR_UNSUPPORTED);
  char sizes[96];
  snprintf(sizes, sizeof sizes, "a kernel call of %zu bytes, the module reads %zu", sizeof(ag_kernel_call),
           sizeof(ag_kernel_call) + 8);
  assert_has(ag_last_error(), sizes);
  assert_has(ag_last_error(), "kcallnew");
  ag_error_clear();
}

/* The in-tree backends carry the core's tables: the CPU loads unbound. */
static void tables_of_this_build(void **state) {
  (void)state;
  const char *t = AG_BACKEND_TABLES;
  assert_has(t, ";binary ADD SUB ");
  assert_has(t, " HYPOT FMOD SWIGLU NEG_BWD EXP_BWD LOG_BWD SQRT_BWD ");
  assert_has(t, ";kop FILL ARANGE ");
  assert_true(ag_backend_available(AG_BACKEND_CPU, NULL));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(module_of_41_headers_refused),
      cmocka_unit_test(module_of_old_tables_bound_by_name),
      cmocka_unit_test(module_of_other_layout_refused),
      cmocka_unit_test(newer_module_refuses_a_shorter_call),
      cmocka_unit_test(tables_of_this_build),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
