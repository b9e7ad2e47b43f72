/* Philox 4x32-10 and the random tensors built on it: the Random123 known
 * answer, agreement with an independent implementation, same seed -> same
 * bits, distinct offsets -> distinct bits, and uniform/normal moments. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "anygrad/anygrad.h"
#include "anygrad/backend.h"
#include "conformance.h"

#define N 65536

static void known_answer(void **state) {
  uint32_t out[4];
  ag_philox4x32(0, 0, out); /* Random123 kat_vectors: philox4x32_10, ctr 0, key 0 */
  assert_int_equal(out[0], 0x6627e8d5u);
  assert_int_equal(out[1], 0xe169c58du);
  assert_int_equal(out[2], 0xbc57ac4cu);
  assert_int_equal(out[3], 0x9b00dbd8u);
  uint64_t x = 0x243f6a8885a308d3ull;
  for (int i = 0; i < 1000; i++) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    uint64_t ctr = x, seed = x * 0x9E3779B97F4A7C15ull;
    uint32_t a[4], b[4];
    ag_philox4x32(ctr, seed, a);
    ag_conf_philox(ctr, seed, b);
    assert_memory_equal(a, b, sizeof a);
  }
}

static void draw(ag_dtype dt, bool normal, uint64_t seed, uint64_t off, void *out) {
  int64_t s[1] = {N};
  ag_generator *g = ag_generator_create(seed);
  ag_generator_set_state(g, seed, off);
  ag_tensor *t = normal ? ag_randn(AG_CPU, dt, 1, s, 0, 1, g) : ag_rand(AG_CPU, dt, 1, s, 0, 1, g);
  assert_non_null(t);
  assert_int_equal(ag_to_host(t, out, (size_t)N * ag_dtype_size(dt)), AG_OK);
  ag_tensor_release(t);
  ag_generator_free(g);
}

static void same_seed_same_bits(void **state) {
  static float a[N], b[N];
  for (int normal = 0; normal < 2; normal++) {
    draw(AG_F32, normal, 42, 0, a);
    draw(AG_F32, normal, 42, 0, b);
    assert_memory_equal(a, b, sizeof a);
    draw(AG_F32, normal, 43, 0, b);
    assert_memory_not_equal(a, b, sizeof a);
    draw(AG_F32, normal, 42, 1000, b);
    assert_memory_not_equal(a, b, sizeof a);
    /* offset o+1 is the stream shifted by one block (4 uniforms, 2 normals) */
    draw(AG_F32, normal, 42, 1, b);
    int shift = normal ? 2 : 4;
    assert_memory_equal(a + shift, b, sizeof(float) * (N - shift));
  }
}

static void generator_advances(void **state) {
  int64_t s[1] = {1000};
  ag_generator *g = ag_generator_create(7);
  uint64_t seed, o0, o1;
  ag_generator_get_state(g, &seed, &o0);
  assert_int_equal(seed, 7);
  ag_tensor *a = ag_rand(AG_CPU, AG_F32, 1, s, 0, 1, g);
  ag_generator_get_state(g, &seed, &o1);
  assert_true(o1 >= o0 + 250); /* 1000 uniforms use 250 blocks */
  ag_tensor *b = ag_rand(AG_CPU, AG_F32, 1, s, 0, 1, g);
  static float x[1000], y[1000];
  ag_to_host(a, x, sizeof x);
  ag_to_host(b, y, sizeof y);
  assert_memory_not_equal(x, y, sizeof x);
  ag_generator_set_state(g, 7, o0);
  ag_tensor *c = ag_rand(AG_CPU, AG_F32, 1, s, 0, 1, g);
  ag_to_host(c, y, sizeof y);
  assert_memory_equal(x, y, sizeof x);
  /* the default generator follows ag_manual_seed */
  ag_manual_seed(11);
  ag_tensor *d1 = ag_rand(AG_CPU, AG_F32, 1, s, 0, 1, NULL);
  ag_manual_seed(11);
  ag_tensor *d2 = ag_rand(AG_CPU, AG_F32, 1, s, 0, 1, NULL);
  ag_to_host(d1, x, sizeof x);
  ag_to_host(d2, y, sizeof y);
  assert_memory_equal(x, y, sizeof x);
  ag_tensor_release(a);
  ag_tensor_release(b);
  ag_tensor_release(c);
  ag_tensor_release(d1);
  ag_tensor_release(d2);
  ag_generator_free(g);
}

static void moments(const double *v, double *m, double *sd) {
  double s = 0, q = 0;
  for (int i = 0; i < N; i++) s += v[i];
  *m = s / N;
  for (int i = 0; i < N; i++) q += (v[i] - *m) * (v[i] - *m);
  *sd = sqrt(q / (N - 1));
}

static void uniform_and_normal_moments(void **state) {
  static double v[N];
  for (int normal = 0; normal < 2; normal++) {
    draw(AG_F64, normal, 1234, 0, v);
    double m, sd;
    moments(v, &m, &sd);
    double want_sd = normal ? 1 : 1 / sqrt(12.0), want_m = normal ? 0 : 0.5;
    assert_true(fabs(m - want_m) < 5 * want_sd / sqrt(N));
    assert_true(fabs(sd / want_sd - 1) < 0.02);
    if (!normal) {
      int bins[10] = {0};
      for (int i = 0; i < N; i++) {
        assert_true(v[i] >= 0 && v[i] < 1);
        bins[(int)(v[i] * 10)]++;
      }
      double chi = 0, e = N / 10.0;
      for (int b = 0; b < 10; b++) chi += (bins[b] - e) * (bins[b] - e) / e;
      assert_true(chi < 27.9); /* chi-square, 9 dof, p = 0.001 */
    } else {
      int in1 = 0, in2 = 0;
      for (int i = 0; i < N; i++) in1 += fabs(v[i]) < 1, in2 += fabs(v[i]) < 2;
      assert_true(fabs(in1 / (double)N - 0.682689) < 0.01);
      assert_true(fabs(in2 / (double)N - 0.954500) < 0.005);
    }
  }
}

static void half_types_follow_f32(void **state) {
  /* f16/bf16 draws are the f32 draw rounded (tensor.h: computed in f32, stored in dtype) */
  static float a[N];
  static uint16_t h[N];
  draw(AG_F32, false, 5, 0, a);
  draw(AG_F16, false, 5, 0, h);
  for (int i = 0; i < N; i++) assert_int_equal(h[i], ag_conf_f16_bits(a[i]));
  draw(AG_BF16, false, 5, 0, h);
  for (int i = 0; i < N; i++) assert_int_equal(h[i], ag_conf_bf16_bits(a[i]));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(known_answer),
      cmocka_unit_test(same_seed_same_bits),
      cmocka_unit_test(generator_advances),
      cmocka_unit_test(uniform_and_normal_moments),
      cmocka_unit_test(half_types_follow_f32),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
