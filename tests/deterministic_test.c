/* Deterministic mode (device.h): the switch and its environment default,
 * and that it reaches the kernels: embedding backward on the emulated GPU
 * (when the gpuemu module is built) then equals the CPU's gradient bit for
 * bit, because the deterministic kernel adds rows in the CPU's order. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "anygrad/anygrad.h"

static int setup(void **state) {
  (void)state;
  ag_scope_begin();
  ag_error_clear();
  return 0;
}
static int teardown(void **state) {
  (void)state;
  ag_set_deterministic(false);
  ag_scope_end();
  return 0;
}

/* Registered twice in CTest: with AG_DETERMINISTIC unset and set to 1. */
static void environment_default(void **state) {
  (void)state;
  const char *e = getenv("AG_DETERMINISTIC");
  bool want = e && strcmp(e, "1") == 0;
  assert_int_equal(ag_get_deterministic(), want);
}

static void set_and_get(void **state) {
  (void)state;
  ag_set_deterministic(true);
  assert_true(ag_get_deterministic());
  ag_set_deterministic(false);
  assert_false(ag_get_deterministic());
}

/* The gradient of an embedding table [V, D] from N rows of upstream grad. */
static void table_grad(ag_device d, const float *tab, const int32_t *idx, const float *g, int64_t N, int64_t D,
                       int64_t V, float *out) {
  ag_tensor *t = ag_from_host(d, AG_F32, 2, (int64_t[]){V, D}, tab);
  ag_tensor *ix = ag_from_host(d, AG_I32, 1, (int64_t[]){N}, idx);
  ag_tensor *gt = ag_from_host(d, AG_F32, 2, (int64_t[]){N, D}, g);
  assert_non_null(t);
  assert_int_equal(ag_tensor_set_requires_grad(t, true), AG_OK);
  ag_tensor *y = ag_embedding(t, ix);
  assert_non_null(y);
  assert_int_equal(ag_backward(y, gt, false), AG_OK);
  ag_tensor *gr = ag_tensor_grad(t);
  assert_non_null(gr);
  assert_int_equal(ag_to_host(gr, out, (size_t)(V * D) * 4), AG_OK);
}

static void embedding_backward_matches_cpu(void **state) {
  (void)state;
  if (!ag_backend_available(AG_BACKEND_GPUEMU, NULL)) skip();
  ag_device emu;
  assert_int_equal(ag_device_parse("gpuemu:0", &emu), AG_OK);
  enum { N = 3000, D = 40, V = 23 };
  float *tab = malloc(sizeof(float) * V * D), *g = malloc(sizeof(float) * N * D);
  float *a = malloc(sizeof(float) * V * D), *b = malloc(sizeof(float) * V * D);
  int32_t *idx = malloc(sizeof(int32_t) * N);
  uint32_t r = 12345;
  for (int i = 0; i < V * D; i++) tab[i] = 0.f;
  for (int i = 0; i < N * D; i++) {
    r = r * 1664525u + 1013904223u;
    g[i] = (float)(r >> 8) * (1.0f / 16777216.0f) * 2.f - 1.f;
  }
  for (int i = 0; i < N; i++) {
    r = r * 1664525u + 1013904223u;
    idx[i] = (int32_t)((r >> 8) % V);
  }
  ag_set_deterministic(true);
  table_grad(AG_CPU, tab, idx, g, N, D, V, a);
  table_grad(emu, tab, idx, g, N, D, V, b);
  assert_memory_equal(a, b, sizeof(float) * V * D);
  free(tab), free(g), free(a), free(b), free(idx);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(environment_default, setup, teardown),
      cmocka_unit_test_setup_teardown(set_and_get, setup, teardown),
      cmocka_unit_test_setup_teardown(embedding_backward_matches_cpu, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
