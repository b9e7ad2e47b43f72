/* The Vulkan backend's recording where a GPU would be slow: barriers only
 * between dependent dispatches (counted through the module's
 * ag_vulkan_debug_counters), with every result checked on the host. Run
 * under the validation layers with synchronization validation
 * (tests/gpu3_vulkan_perf.cmake): any message fails the process.
 *
 * Uniform and normal fills and dropout against the CPU, with f64 (lavapipe)
 * and in f32 (AG_VULKAN_TEST=slow_f64, as on a GPU): the same Philox
 * streams, so uniform fills and dropout (dropped elements x * 0 with their
 * sign) equal the CPU's bit for bit, normal values within the f32
 * rounding of 2 pi u.
 *
 * usage: gpu3_vulkan_perf_test GROUP; GROUP is barriers or random. Skips
 * (77) without vulkan:0. */
#include <dlfcn.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "anygrad/anygrad.h"

static ag_device VK;
static void (*g_counters)(uint64_t *, uint64_t *);

static bool have_vulkan(void) {
  ag_backend_kind k;
  if (ag_backend_find("vulkan", &k) != AG_OK) return false;
  return ag_backend_available(k, NULL) && ag_device_parse("vulkan:0", &VK) == AG_OK;
}

/* The module the core loaded (AG_BACKEND_PATH), for its test counters. */
static void find_counters(void) {
  const char *dir = getenv("AG_BACKEND_PATH");
  char path[4096];
  snprintf(path, sizeof path, "%s/libanygrad-vulkan.so", dir ? dir : ".");
  void *h = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
  if (!h) fail_msg("%s is not loaded: %s", path, dlerror());
  *(void **)&g_counters = dlsym(h, "ag_vulkan_debug_counters");
  if (!g_counters) fail_msg("ag_vulkan_debug_counters: %s", dlerror());
}

#define N 1000

static ag_tensor *up(float v0) {
  float h[N];
  for (int i = 0; i < N; i++) h[i] = v0 + (float)i / N;
  int64_t shape[1] = {N};
  ag_tensor *t = ag_from_host(VK, AG_F32, 1, shape, h);
  assert_non_null(t);
  return t;
}

static void check(ag_tensor *t, double (*f)(double), float v0, int times) {
  float h[N];
  assert_int_equal(ag_to_host(t, h, sizeof h), AG_OK);
  for (int i = 0; i < N; i++) {
    double want = v0 + (double)(float)((float)i / N);
    for (int k = 0; k < times; k++) want = f(want);
    if (fabs(h[i] - want) > 1e-5 * fabs(want) + 1e-6)
      fail_msg("element %d: %.9g, expected %.9g", i, (double)h[i], want);
  }
}

static double one(double x) { (void)x; return 1.0; }

/* dispatches and barriers recorded since the previous call */
static void delta(uint64_t *nd, uint64_t *nb) {
  static uint64_t d0, b0;
  uint64_t d, b;
  g_counters(&d, &b);
  *nd = d - d0;
  *nb = b - b0;
  d0 = d;
  b0 = b;
}

static void test_barriers(void **state) {
  (void)state;
  find_counters();
  ag_tensor *x = up(0.25f), *y = up(0.5f);
  assert_int_equal(ag_device_synchronize(VK), AG_OK);
  uint64_t nd, nb;
  delta(&nd, &nb);

  /* independent ops: they read x and y and write fresh outputs */
  ag_tensor *a[4] = {ag_exp(x), ag_exp(y), ag_sin(x), ag_cos(y)};
  assert_int_equal(ag_device_synchronize(VK), AG_OK);
  delta(&nd, &nb);
  print_message("independent: %llu dispatches, %llu barriers\n", (unsigned long long)nd, (unsigned long long)nb);
  assert_int_equal(nd, 4);
  assert_int_equal(nb, 0);
  check(a[0], exp, 0.25f, 1);
  check(a[1], exp, 0.5f, 1);
  check(a[2], sin, 0.25f, 1);
  check(a[3], cos, 0.5f, 1);

  /* a dependent chain: one barrier per read of the previous output (RAW) */
  ag_tensor *b1 = ag_sin(x), *b2 = ag_sin(b1), *b3 = ag_sin(b2), *b4 = ag_sin(b3);
  assert_int_equal(ag_device_synchronize(VK), AG_OK);
  delta(&nd, &nb);
  print_message("chain: %llu dispatches, %llu barriers\n", (unsigned long long)nd, (unsigned long long)nb);
  assert_int_equal(nd, 4);
  assert_int_equal(nb, 3);
  check(b4, sin, 0.25f, 4);

  /* a write of what an earlier dispatch read (WAR), then a read of it (RAW) */
  ag_tensor *c1 = ag_exp(y);
  assert_int_equal(ag_fill_(y, 1.0), AG_OK);
  ag_tensor *c2 = ag_exp(y);
  assert_int_equal(ag_device_synchronize(VK), AG_OK);
  delta(&nd, &nb);
  print_message("write after read: %llu dispatches, %llu barriers\n", (unsigned long long)nd,
                (unsigned long long)nb);
  assert_int_equal(nd, 3);
  assert_int_equal(nb, 2);
  check(c1, exp, 0.5f, 1);
  check(y, one, 0.0f, 1);
  float h[N];
  assert_int_equal(ag_to_host(c2, h, sizeof h), AG_OK);
  for (int i = 0; i < N; i++) assert_true(fabs(h[i] - exp(1.0)) < 1e-5);

  /* a write after write of the same output (an in-place fill twice) */
  assert_int_equal(ag_fill_(x, 3.0), AG_OK);
  assert_int_equal(ag_fill_(x, 4.0), AG_OK);
  assert_int_equal(ag_device_synchronize(VK), AG_OK);
  delta(&nd, &nb);
  assert_int_equal(nd, 2);
  assert_true(nb >= 1);
  assert_int_equal(ag_to_host(x, h, sizeof h), AG_OK);
  for (int i = 0; i < N; i++) assert_true(h[i] == 4.0f);

  ag_tensor *all[] = {x, y, a[0], a[1], a[2], a[3], b1, b2, b3, b4, c1, c2};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) ag_tensor_release(all[i]);
}

/* A tensor drawn by make on dev from a generator seeded 42, as floats. */
static void draw(ag_device dev, int kind, float *out, int64_t n) {
  ag_generator *g = ag_generator_create(42);
  assert_non_null(g);
  int64_t shape[1] = {n};
  ag_tensor *t = NULL;
  if (kind == 0) t = ag_rand(dev, AG_F32, 1, shape, -1.0, 3.0, g);
  else if (kind == 1) t = ag_randn(dev, AG_F32, 1, shape, 0.5, 2.0, g);
  else {
    float *h = malloc((size_t)n * sizeof *h);
    for (int64_t i = 0; i < n; i++) h[i] = 0.001f * (float)(i % 2000) - 1.0f;
    ag_tensor *x = ag_from_host(dev, AG_F32, 1, shape, h);
    free(h);
    assert_non_null(x);
    t = ag_dropout(x, 0.3, true, g);
    ag_tensor_release(x);
  }
  if (!t) fail_msg("draw %d: %s", kind, ag_last_error());
  assert_int_equal(ag_to_host(t, out, (size_t)n * sizeof *out), AG_OK);
  ag_tensor_release(t);
  ag_generator_free(g);
}

static void test_random(void **state) {
  (void)state;
  enum { M = 100003 };
  float *a = malloc(M * sizeof *a), *b = malloc(M * sizeof *b);
  assert_true(a && b);
  ag_device cpu;
  assert_int_equal(ag_device_parse("cpu", &cpu), AG_OK);
  for (int kind = 0; kind < 3; kind++) {
    draw(cpu, kind, a, M);
    draw(VK, kind, b, M);
    double worst = 0;
    for (int64_t i = 0; i < M; i++) {
      if (kind == 0 || (kind == 2 && (a[i] == 0 || b[i] == 0))) {
        if (memcmp(&a[i], &b[i], sizeof a[i]))
          fail_msg("kind %d element %lld: cpu %.9g vulkan %.9g", kind, (long long)i, (double)a[i], (double)b[i]);
        continue;
      }
      double e = fabs((double)a[i] - b[i]) / (fabs((double)a[i]) + 1.0);
      if (e > worst) worst = e;
    }
    print_message("kind %d: worst relative difference %.3g\n", kind, worst);
    assert_true(worst < (kind == 1 ? 2e-5 : 1.2e-7));
  }
  free(a);
  free(b);
}

int main(int argc, char **argv) {
  const char *group = argc > 1 ? argv[1] : "barriers";
  if (!have_vulkan()) {
    ag_backend_kind k;
    const char *why = NULL;
    if (ag_backend_find("vulkan", &k) == AG_OK && !ag_backend_available(k, &why) && why &&
        strstr(why, "AG_VULKAN_TEST")) {
      fprintf(stderr, "vulkan: %s\n", why);
      return 1;
    }
    fprintf(stderr, "vulkan:0 unavailable: skipped\n");
    return 77;
  }
  if (!strcmp(group, "random")) {
    const struct CMUnitTest t[] = {cmocka_unit_test(test_random)};
    return cmocka_run_group_tests_name("gpu3_vulkan_random", t, NULL, NULL);
  }
  if (!strcmp(group, "barriers")) {
    const struct CMUnitTest t[] = {cmocka_unit_test(test_barriers)};
    return cmocka_run_group_tests_name("gpu3_vulkan_barriers", t, NULL, NULL);
  }
  fprintf(stderr, "unknown group %s\n", group);
  return 2;
}
