/* The text task's checkpoints (models/text.c): N steps straight and N/2
 * steps, then a resume to N, give the same last loss, held-out loss and
 * weights bit for bit; a checkpoint that is damaged, of another task, or
 * made from another corpus is refused with a clear error. A small corpus
 * written here, a tiny model on the CPU. */
#define _GNU_SOURCE
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
#include "text.h"

#define TMP AG_TEST_TMPDIR "/text_test"

static const char *corpus(const char *name, int variant) {
  static char path[2][512];
  char *p = path[variant];
  snprintf(p, 512, "%s_%s.txt", TMP, name);
  FILE *f = fopen(p, "wb");
  assert_non_null(f);
  const char *w[] = {"the", "cat", "sat", "on", "a", "mat", "and", "dog", "ran", "to", "its", "bed"};
  for (int i = 0; i < 1500; i++) {
    for (int j = 0; j < 8; j++) fprintf(f, "%s%s", j ? " " : "", w[(i * 7 + j * (5 + variant)) % 12]);
    fputs(".\n", f);
  }
  fclose(f);
  return p;
}

static text_options tiny(const char *data) {
  text_options o = text_defaults();
  o.device = AG_CPU;
  o.data = data;
  o.steps = 12;
  o.batch = 4;
  o.seq = 16;
  o.warmup = 2;
  o.dim = 32;
  o.layers = 2;
  o.heads = 4;
  o.kv_heads = 2;
  o.vocab = 280;
  o.lr = 1e-2;
  o.log_every = 5;
  o.eval_batches = 2;
  o.sample_tokens = 0;
  o.quiet = true;
  o.log = fopen("/dev/null", "w");
  return o;
}

static void *read_all(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  fseek(f, 0, SEEK_END);
  *n = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  void *b = malloc(*n);
  assert_non_null(b);
  assert_int_equal(fread(b, 1, *n, f), *n);
  fclose(f);
  return b;
}

/* every tensor of a against b, bit for bit */
static void same_tensors(const char *a, const char *b) {
  ag_safetensors *fa = NULL, *fb = NULL;
  assert_int_equal(ag_safetensors_open(a, &fa), AG_OK);
  assert_int_equal(ag_safetensors_open(b, &fb), AG_OK);
  assert_int_equal(ag_safetensors_count(fa), ag_safetensors_count(fb));
  for (int i = 0; i < ag_safetensors_count(fa); i++) {
    const char *name = ag_safetensors_name(fa, i);
    ag_tensor *ta = ag_safetensors_get(fa, name, AG_CPU), *tb = ag_safetensors_get(fb, name, AG_CPU);
    assert_non_null(ta);
    assert_non_null(tb);
    size_t n = (size_t)ag_tensor_numel(ta) * ag_dtype_size(ag_tensor_dtype(ta));
    assert_int_equal(n, (size_t)ag_tensor_numel(tb) * ag_dtype_size(ag_tensor_dtype(tb)));
    void *ha = malloc(n + 1), *hb = malloc(n + 1);
    assert_int_equal(ag_to_host(ta, ha, n), AG_OK);
    assert_int_equal(ag_to_host(tb, hb, n), AG_OK);
    if (memcmp(ha, hb, n)) fail_msg("tensor %s differs between %s and %s", name, a, b);
    free(ha);
    free(hb);
    ag_tensor_release(ta);
    ag_tensor_release(tb);
  }
  ag_safetensors_close(fa);
  ag_safetensors_close(fb);
}

static void exact_resume(void **state) {
  (void)state;
  const char *data = corpus("a", 0);
  text_options o = tiny(data);
  text_result straight, half, rest;
  o.out = TMP "_straight.st";
  assert_int_equal(text_train(&o, &straight), AG_OK);
  assert_int_equal(straight.steps_done, 12);

  o.out = TMP "_split.st";
  o.stop_at = 6; /* interrupted after 6 steps of the 12-step schedule */
  assert_int_equal(text_train(&o, &half), AG_OK);
  assert_int_equal(half.steps_done, 6);
  o.stop_at = 0;
  o.resume = TMP "_split.st";
  o.out = TMP "_rest.st";
  assert_int_equal(text_train(&o, &rest), AG_OK);
  assert_int_equal(rest.steps_done, 12);
  printf("text: last loss straight %.9g, resumed %.9g; held-out %.9g, %.9g\n", straight.last_loss, rest.last_loss,
         straight.val_loss, rest.val_loss);
  assert_memory_equal(&straight.last_loss, &rest.last_loss, sizeof(double));
  assert_memory_equal(&straight.train_loss, &rest.train_loss, sizeof(double));
  assert_memory_equal(&straight.val_loss, &rest.val_loss, sizeof(double));
  assert_memory_equal(&straight.first_loss, &rest.first_loss, sizeof(double));
  same_tensors(TMP "_straight.st", TMP "_rest.st");

  /* the weights file is also an HF-named Llama checkpoint */
  ag_llama m;
  ag_llama_config c = {.vocab_size = 280, .dim = 32, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2,
                       .max_seq_len = 16};
  assert_int_equal(ag_llama_init(&m, &c, AG_CPU, AG_F32, NULL), AG_OK);
  assert_int_equal(ag_llama_load(&m, TMP "_rest.st"), AG_OK);
  ag_llama_free(&m);

  /* a different seed on resume gives other batches: another result */
  o.seed = 99;
  o.seed_set = true;
  o.out = TMP "_other.st";
  text_result other;
  assert_int_equal(text_train(&o, &other), AG_OK);
  assert_true(other.last_loss != straight.last_loss);
  fclose(o.log);
}

static void bad_checkpoints(void **state) {
  (void)state;
  const char *data = corpus("b", 0);
  text_options o = tiny(data);
  o.steps = 2;
  o.out = TMP "_good.st";
  text_result r;
  assert_int_equal(text_train(&o, &r), AG_OK);
  o.steps = 4;
  o.out = TMP "_out.st";

  /* another corpus */
  text_options o2 = o;
  o2.data = corpus("c", 1);
  o2.resume = TMP "_good.st";
  assert_int_equal(text_train(&o2, &r), AG_ERR_INVALID);
  assert_non_null(strstr(ag_last_error(), "another corpus"));

  /* truncated */
  size_t n = 0;
  char *b = read_all(TMP "_good.st", &n);
  FILE *f = fopen(TMP "_trunc.st", "wb");
  fwrite(b, 1, n / 2, f);
  fclose(f);
  o.resume = TMP "_trunc.st";
  ag_status st = text_train(&o, &r);
  assert_int_not_equal(st, AG_OK);
  assert_non_null(strstr(ag_last_error(), "_trunc.st"));

  /* a tensor's bytes intact but the metadata of another task */
  char *p = memmem(b, n, "text-1", 6);
  assert_non_null(p);
  p[0] = 'T';
  f = fopen(TMP "_other_task.st", "wb");
  fwrite(b, 1, n, f);
  fclose(f);
  o.resume = TMP "_other_task.st";
  assert_int_equal(text_train(&o, &r), AG_ERR_CORRUPT);
  assert_non_null(strstr(ag_last_error(), "not a checkpoint of anygrad train --task text"));
  p[0] = 't';

  /* a malformed step */
  p = memmem(b, n, "\"step\"", 6);
  assert_non_null(p);
  p = strchr(p + 6, '2');
  assert_non_null(p);
  *p = 'x';
  f = fopen(TMP "_bad_step.st", "wb");
  fwrite(b, 1, n, f);
  fclose(f);
  o.resume = TMP "_bad_step.st";
  assert_int_equal(text_train(&o, &r), AG_ERR_CORRUPT);
  assert_non_null(strstr(ag_last_error(), "'step'"));
  free(b);

  /* no file at all */
  o.resume = TMP "_missing.st";
  assert_int_not_equal(text_train(&o, &r), AG_OK);
  fclose(o.log);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(exact_resume), cmocka_unit_test(bad_checkpoints)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
