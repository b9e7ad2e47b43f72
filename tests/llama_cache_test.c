/* The key/value cache of the Llama-style model (ag_llama_forward_cached):
 * greedy generation through the cache equals generation by a full forward
 * over the whole sequence at every step, token for token, with the logits
 * of each step within 1e-5; a prompt filled in one call and in pieces
 * agrees too; overflowing the cache and mismatched inputs are errors. On
 * the CPU and on each device named in AG_LLAMA_CACHE_DEVICES (comma
 * separated) that is available. */
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

enum { V = 97, L = 40, P = 5 };

static void init_model(ag_llama *m, ag_device d, bool untied) {
  ag_generator *g = ag_generator_create(7);
  ag_llama_config c = {.vocab_size = V, .dim = 32, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2,
                       .multiple_of = 16, .max_seq_len = L, .untied_head = untied};
  assert_int_equal(ag_llama_init(m, &c, d, AG_F32, g), AG_OK);
  /* larger weights than the init's 0.02 so the logits are not all alike */
  ag_no_grad_begin();
  for (int i = 0; i < m->params.count; i++) {
    ag_tensor *t = m->params.tensors[i];
    if (ag_tensor_ndim(t) == 2) {
      ag_tensor *r = ag_randn(d, AG_F32, 2, ag_tensor_shape(t), 0.0, 0.15, g);
      assert_non_null(r);
      assert_int_equal(ag_copy_(t, r), AG_OK);
      ag_tensor_release(r);
    }
  }
  ag_grad_mode_end();
  ag_generator_free(g);
}

static int argmax_row(const float *row) {
  int best = 0;
  for (int v = 1; v < V; v++)
    if (row[v] > row[best]) best = v;
  return best;
}

static void logits_host(ag_tensor *t, float *out, size_t n) {
  assert_non_null(t);
  assert_int_equal(ag_to_host(t, out, n * sizeof *out), AG_OK);
}

static void check_device(ag_device d, bool untied) {
  ag_llama m;
  init_model(&m, d, untied);
  int32_t ids_full[L], ids_cache[L];
  const int32_t prompt[P] = {3, 14, 15, 92, 65};
  memcpy(ids_full, prompt, sizeof prompt);
  memcpy(ids_cache, prompt, sizeof prompt);
  float *full = malloc((size_t)L * V * sizeof *full), *step = malloc((size_t)L * V * sizeof *step);
  assert_non_null(full);
  assert_non_null(step);
  ag_llama_cache *c = ag_llama_cache_create(&m, 1, L);
  assert_non_null(c);
  ag_inference_mode_begin();
  double worst = 0;
  int n_diff_tokens = 0;
  for (int n = P; n < L; n++) {
    ag_scope_begin();
    /* the reference: the whole sequence so far */
    int64_t sf[2] = {1, n};
    ag_tensor *xf = ag_from_host(d, AG_I32, 2, sf, ids_full);
    logits_host(ag_llama_forward(&m, xf, false, NULL), full, (size_t)n * V);
    /* the cache: the prompt in one call, then one token per step */
    int64_t first = n == P ? 0 : n - 1, T = n - first;
    int64_t sc[2] = {1, T};
    ag_tensor *xc = ag_from_host(d, AG_I32, 2, sc, ids_cache + first);
    logits_host(ag_llama_forward_cached(&m, c, xc), step, (size_t)T * V);
    assert_int_equal(ag_llama_cache_length(c), n);
    ag_scope_end();
    for (int64_t t = 0; t < T; t++)
      for (int v = 0; v < V; v++) {
        double e = fabs((double)full[(first + t) * V + v] - step[t * V + v]);
        worst = e > worst ? e : worst;
      }
    ids_full[n] = argmax_row(full + (size_t)(n - 1) * V);
    ids_cache[n] = argmax_row(step + (size_t)(T - 1) * V);
    n_diff_tokens += ids_full[n] != ids_cache[n];
  }
  char dn[32];
  printf("llama_cache: %s %s: %d tokens, largest logit difference %.3g\n", ag_device_str(d, dn, sizeof dn),
         untied ? "untied" : "tied", L - P, worst);
  assert_int_equal(n_diff_tokens, 0);
  assert_memory_equal(ids_full, ids_cache, sizeof ids_full);
  assert_true(worst <= 1e-5);
  /* the generated text is not one token repeated: the test can tell */
  int distinct = 0;
  for (int i = P + 1; i < L; i++) distinct += ids_full[i] != ids_full[P];
  assert_true(distinct > 0);

  /* the last position fits; a full cache then refuses one more, and stays
   * as it was */
  ag_scope_begin();
  int64_t s1[2] = {1, 1};
  ag_tensor *x1 = ag_from_host(d, AG_I32, 2, s1, ids_full);
  assert_int_equal(ag_llama_cache_length(c), L - 1);
  assert_non_null(ag_llama_forward_cached(&m, c, x1));
  assert_null(ag_llama_forward_cached(&m, c, x1));
  assert_int_equal(ag_last_status(), AG_ERR_SHAPE);
  assert_non_null(strstr(ag_last_error(), "max_len"));
  assert_int_equal(ag_llama_cache_length(c), L);
  ag_scope_end();

  /* after reset, the prompt in pieces (3 + 2 positions, the second with
   * the offset mask) gives the one-call logits */
  ag_llama_cache_reset(c);
  assert_int_equal(ag_llama_cache_length(c), 0);
  ag_scope_begin();
  int64_t s3[2] = {1, 3}, s2[2] = {1, 2};
  ag_tensor *a = ag_from_host(d, AG_I32, 2, s3, prompt), *b = ag_from_host(d, AG_I32, 2, s2, prompt + 3);
  assert_non_null(ag_llama_forward_cached(&m, c, a));
  logits_host(ag_llama_forward_cached(&m, c, b), step, 2 * V);
  int64_t sp[2] = {1, P};
  ag_tensor *xp = ag_from_host(d, AG_I32, 2, sp, prompt);
  logits_host(ag_llama_forward(&m, xp, false, NULL), full, (size_t)P * V);
  for (int v = 0; v < 2 * V; v++) assert_true(fabs((double)full[3 * V + v] - step[v]) <= 1e-5);
  /* a batch other than the cache's is a shape error */
  int64_t s21[2] = {2, 1};
  int32_t two[2] = {1, 2};
  ag_tensor *x2 = ag_from_host(d, AG_I32, 2, s21, two);
  assert_null(ag_llama_forward_cached(&m, c, x2));
  assert_int_equal(ag_last_status(), AG_ERR_SHAPE);
  assert_int_equal(ag_llama_cache_length(c), P);
  ag_scope_end();
  ag_grad_mode_end();
  ag_llama_cache_free(c);
  free(full);
  free(step);
  ag_llama_free(&m);
}

static void test_cpu(void **state) {
  (void)state;
  check_device(AG_CPU, false);
  check_device(AG_CPU, true);
}

static void test_devices(void **state) {
  (void)state;
  const char *env = getenv("AG_LLAMA_CACHE_DEVICES");
  if (!env || !*env) skip();
  char buf[256];
  snprintf(buf, sizeof buf, "%s", env);
  int ran = 0;
  for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
    ag_device d;
    if (ag_device_parse(tok, &d) != AG_OK || !ag_backend_available((ag_backend_kind)d.backend, NULL)) continue;
    check_device(d, false);
    ran++;
  }
  if (!ran) skip();
}

static void test_bad_args(void **state) {
  (void)state;
  ag_llama m;
  init_model(&m, AG_CPU, false);
  assert_null(ag_llama_cache_create(NULL, 1, 4));
  assert_int_equal(ag_last_status(), AG_ERR_INVALID);
  assert_null(ag_llama_cache_create(&m, 1, L + 1));
  assert_int_equal(ag_last_status(), AG_ERR_SHAPE);
  assert_null(ag_llama_cache_create(&m, 0, 4));
  assert_int_equal(ag_last_status(), AG_ERR_SHAPE);
  ag_llama_cache *c = ag_llama_cache_create(&m, 1, 4);
  assert_non_null(c);
  assert_null(ag_llama_forward_cached(&m, c, NULL));
  assert_null(ag_llama_forward_cached(NULL, c, NULL));
  assert_int_equal(ag_last_status(), AG_ERR_INVALID);
  ag_scope_begin();
  int64_t s5[2] = {1, 5};
  int32_t ids[5] = {0};
  ag_tensor *x = ag_from_host(AG_CPU, AG_I32, 2, s5, ids);
  assert_null(ag_llama_forward_cached(&m, c, x)); /* 5 positions into a cache of 4 */
  assert_int_equal(ag_last_status(), AG_ERR_SHAPE);
  ag_scope_end();
  ag_llama_cache_free(c);
  ag_llama_cache_free(NULL);
  ag_llama_cache_reset(NULL);
  assert_int_equal(ag_llama_cache_length(NULL), 0);
  ag_llama_free(&m);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_cpu), cmocka_unit_test(test_devices),
                                     cmocka_unit_test(test_bad_args)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
