/* The launch workspace service (ag_kernel_call.workspace, backend ABI 4.2):
 * the CPU device's table is wrapped so every elementwise launch first asks
 * the core for a workspace, as the CUDA module does for cuDNN. The block must
 * come from the caching allocator (category workspace while the launch runs,
 * returned after it), a full device must answer AG_ERR_OOM and count it, and
 * after the backend's fallback (the plain launch) the op is still right and
 * the next request succeeds. Linked statically: it swaps the device's table
 * in the core's device state. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "anygrad/anygrad.h"
#include "anygrad/backend.h"
#include "runtime/devstate.h"

#define WS_BYTES ((size_t)8 << 20)

static const ag_backend *g_real;
static struct {
  int asked, granted, ooms, fallbacks, bad_flags;
  int64_t during; /* workspace-category bytes seen while the launch ran */
  ag_status last;
  char msg[256];
} g;

static ag_status wrapped_launch(ag_bstream *s, const ag_kernel_call *c) {
  if (c->op == AG_K_BINARY) {
    if (!(c->flags & AG_KF_WORKSPACE) || !c->workspace) {
      g.bad_flags++;
      return g_real->launch(s, c);
    }
    g.asked++;
    void *base = NULL;
    size_t off = 0;
    ag_status st = c->workspace(c->workspace_ctx, WS_BYTES, &base, &off);
    g.last = st;
    if (st == AG_OK) {
      g.granted++;
      assert_non_null(base);
      ag_memory_stats ms;
      assert_int_equal(ag_memory_stats_get(AG_CPU, &ms), AG_OK);
      g.during = ms.category_bytes[AG_MEM_WORKSPACE].current;
    } else {
      snprintf(g.msg, sizeof g.msg, "%s", ag_last_error());
      if (st == AG_ERR_OOM) g.ooms++;
      g.fallbacks++; /* the path that needs no workspace */
      ag_error_clear();
    }
  }
  return g_real->launch(s, c);
}

static ag_backend g_wrapped;

static int wrap(void **state) {
  (void)state;
  ag_devstate *ds = ag__devstate(AG_CPU);
  if (!ds) return -1;
  g_real = ds->be;
  g_wrapped = *g_real;
  g_wrapped.launch = wrapped_launch;
  ds->be = &g_wrapped;
  return 0;
}

static int unwrap(void **state) {
  (void)state;
  ag__devstate(AG_CPU)->be = g_real;
  return 0;
}

/* a + a for a = 1..n, checked */
static void add_once(int64_t n) {
  float v[64];
  for (int64_t i = 0; i < n; i++) v[i] = (float)i + 1;
  ag_tensor *a = ag_from_host(AG_CPU, AG_F32, 1, &n, v);
  assert_non_null(a);
  ag_tensor *b = ag_add(a, a);
  if (!b) fail_msg("%s", ag_last_error());
  float out[64];
  assert_int_equal(ag_to_host(b, out, sizeof(float) * (size_t)n), AG_OK);
  for (int64_t i = 0; i < n; i++) assert_float_equal(out[i], 2 * v[i], 0);
  ag_tensor_release(a);
  ag_tensor_release(b);
}

static void workspace_in_stats(void **state) {
  (void)state;
  memset(&g, 0, sizeof g);
  assert_int_equal(ag_memory_reset_peak(AG_CPU), AG_OK);
  add_once(16);
  assert_int_equal(g.bad_flags, 0);
  assert_int_equal(g.asked, 1);
  assert_int_equal(g.granted, 1);
  assert_true(g.during >= (int64_t)WS_BYTES);
  ag_memory_stats ms;
  assert_int_equal(ag_memory_stats_get(AG_CPU, &ms), AG_OK);
  assert_int_equal(ms.category_bytes[AG_MEM_WORKSPACE].current, 0); /* returned with the launch */
  assert_true(ms.category_bytes[AG_MEM_WORKSPACE].peak >= (int64_t)WS_BYTES);
  /* cached: the next launch reuses the block without a new segment */
  int64_t segs = ms.num_device_alloc;
  add_once(16);
  assert_int_equal(ag_memory_stats_get(AG_CPU, &ms), AG_OK);
  assert_int_equal(ms.num_device_alloc, segs);
}

static void oom_recovers(void **state) {
  (void)state;
  memset(&g, 0, sizeof g);
  ag_memory_stats ms;
  assert_int_equal(ag_memory_stats_get(AG_CPU, &ms), AG_OK);
  int64_t ooms = ms.num_ooms;
  /* a device smaller than the workspace: the tensors fit, the workspace not
   * (the block cached by the test above goes back first) */
  assert_int_equal(ag_memory_empty_cache(AG_CPU), AG_OK);
  assert_int_equal(ag_memory_set_cap(AG_CPU, (size_t)6 << 20), AG_OK);
  add_once(16);
  assert_int_equal(g.asked, 1);
  assert_int_equal(g.granted, 0);
  assert_int_equal(g.last, AG_ERR_OOM);
  assert_int_equal(g.fallbacks, 1);
  if (!strstr(g.msg, "workspace")) fail_msg("message: %s", g.msg);
  assert_int_equal(ag_memory_stats_get(AG_CPU, &ms), AG_OK);
  assert_true(ms.num_ooms > ooms);
  assert_int_equal(ms.category_bytes[AG_MEM_WORKSPACE].current, 0);
  /* room again: granted */
  assert_int_equal(ag_memory_set_cap(AG_CPU, 0), AG_OK);
  add_once(16);
  assert_int_equal(g.asked, 2);
  assert_int_equal(g.granted, 1);
  assert_int_equal(ag_last_status(), AG_OK);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(workspace_in_stats), cmocka_unit_test(oom_recovers)};
  return cmocka_run_group_tests(tests, wrap, unwrap);
}
