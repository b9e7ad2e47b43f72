/* The main job's library entry (models/charlm.c) and the checkpoint writer
 * under hostile input: sizes that would overflow, non-finite
 * hyper-parameters, a planted symlink at a temp-file name, a FIFO. */
#include <fcntl.h>
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "charlm.h"

#define TMP AG_TEST_TMPDIR "/charlm_test"

static char *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *s = malloc((size_t)len + 1);
  if (s && fread(s, 1, (size_t)len, f) != (size_t)len) {
    free(s);
    s = NULL;
  }
  fclose(f);
  if (s) s[len] = 0;
  *n = (size_t)len;
  return s;
}

static void write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
}

static charlm_options quiet_options(void) {
  charlm_options o = charlm_defaults(CHARLM_MLP);
  o.device = AG_CPU;
  o.quiet = true;
  o.samples = 0;
  o.eval_batches = 0;
  o.out = NULL;
  o.steps = 1;
  return o;
}

/* A batch whose size product wraps int64 used to reach malloc as a tiny
 * size and then write far past it. */
static void huge_batch_is_refused(void **state) {
  (void)state;
  int64_t sizes[] = {INT64_C(1) << 62, INT64_C(4611686018427387904) + 1, INT64_MAX, CHARLM_MAX_BATCH + 1, 0, -5};
  for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
    charlm_options o = quiet_options();
    o.batch = sizes[i];
    assert_int_equal(charlm_train(&o, NULL), AG_ERR_INVALID);
    assert_non_null(strstr(ag_last_error(), "batch"));
  }
}

/* NaN or infinite hyper-parameters are refused before anything runs, and a
 * checkpoint at out is left as it was. */
static void nonfinite_hyperparameters_are_refused(void **state) {
  (void)state;
  const char *out = TMP "_keep.st";
  write_text(out, "previous checkpoint");
  for (int k = 0; k < 5; k++) {
    charlm_options o = quiet_options();
    o.out = out;
    if (k == 0) o.lr = NAN;
    if (k == 1) o.lr = INFINITY;
    if (k == 2) o.weight_decay = NAN;
    if (k == 3) o.clip = -INFINITY;
    if (k == 4) o.log_every = 0;
    assert_int_equal(charlm_train(&o, NULL), AG_ERR_INVALID);
  }
  size_t n;
  char *s = slurp(out, &n);
  assert_non_null(s);
  assert_string_equal(s, "previous checkpoint");
  free(s);
  unlink(out);
}

/* The temp file of a save is created fresh (O_EXCL|O_NOFOLLOW, a name that
 * cannot be guessed): a symlink planted at the old predictable name
 * "<path>.tmp.<pid>" is neither followed nor truncated. */
static void save_does_not_follow_a_planted_symlink(void **state) {
  (void)state;
  const char *path = TMP "_sym.st", *victim = TMP "_victim.txt";
  char planted[512];
  snprintf(planted, sizeof planted, "%s.tmp.%ld", path, (long)getpid());
  unlink(planted);
  unlink(path);
  write_text(victim, "must survive");
  assert_int_equal(symlink(victim, planted), 0);
  int64_t shape[1] = {4};
  ag_tensor *t = ag_ones(AG_CPU, AG_F32, 1, shape);
  ag_param_list l = {0};
  assert_int_equal(ag_params_add(&l, "w", t), AG_OK);
  assert_int_equal(ag_safetensors_save(path, &l, 0, NULL, NULL), AG_OK);
  size_t n;
  char *s = slurp(victim, &n);
  assert_non_null(s);
  assert_string_equal(s, "must survive");
  free(s);
  struct stat sb;
  assert_int_equal(lstat(path, &sb), 0);
  assert_true(S_ISREG(sb.st_mode));
  ag_safetensors *f = NULL;
  assert_int_equal(ag_safetensors_open(path, &f), AG_OK);
  assert_int_equal(ag_safetensors_count(f), 1);
  ag_safetensors_close(f);
  ag_params_free(&l);
  ag_tensor_release(t);
  unlink(planted);
  unlink(victim);
  unlink(path);
}

static void on_alarm(int sig) {
  (void)sig;
  static const char msg[] = "ag_safetensors_open blocked on a FIFO\n";
  (void)!write(2, msg, sizeof msg - 1);
  _exit(1);
}

/* Opening a FIFO must not wait for a writer. */
static void open_of_a_fifo_does_not_block(void **state) {
  (void)state;
  const char *fifo = TMP "_fifo";
  unlink(fifo);
  assert_int_equal(mkfifo(fifo, 0600), 0);
  signal(SIGALRM, on_alarm);
  alarm(20);
  ag_safetensors *f = NULL;
  assert_int_equal(ag_safetensors_open(fifo, &f), AG_ERR_IO);
  alarm(0);
  assert_null(f);
  assert_non_null(strstr(ag_last_error(), "regular file"));
  unlink(fifo);
}

/* The memory estimate (two probe steps at small batches, activations scaled
 * linearly) against the peak a real run at the batch reaches: within 10%,
 * for the total and for activations. */
static void estimate_case(charlm_model_kind kind, int64_t batch) {
  charlm_options o = quiet_options();
  charlm_options d = charlm_defaults(kind);
  o.model = kind;
  o.n_layer = d.n_layer;
  o.n_head = d.n_head;
  o.n_embd = d.n_embd;
  o.batch = batch;
  o.profile = false;
  o.estimate_memory = true;
  charlm_result r;
  assert_int_equal(charlm_train(&o, &r), AG_OK);
  assert_int_equal(r.steps_done, 0); /* an estimate trains nothing */
  const charlm_memory_estimate est = r.estimate, *e = &est;
  assert_true(e->peak_bytes > 0);
  o.estimate_memory = false;
  o.steps = 3;
  assert_int_equal(ag_memory_reset_peak(o.device), AG_OK);
  ag_memory_stats s0, s1;
  assert_int_equal(ag_memory_stats_get(o.device, &s0), AG_OK);
  assert_int_equal(charlm_train(&o, &r), AG_OK);
  assert_int_equal(ag_memory_stats_get(o.device, &s1), AG_OK);
  double peak = (double)(s1.allocated_bytes[AG_POOL_ALL].peak - s0.allocated_bytes[AG_POOL_ALL].current);
  double act = (double)s1.category_bytes[AG_MEM_ACTIVATIONS].peak;
  printf("%s batch %lld: predicted peak %.0f, measured %.0f (%.1f%%); activations %.0f vs %.0f\n",
         kind == CHARLM_GPT ? "gpt" : "mlp", (long long)batch, e->peak_bytes, peak,
         100 * (e->peak_bytes - peak) / peak, e->category_peak[AG_MEM_ACTIVATIONS], act);
  assert_true(fabs(e->peak_bytes - peak) <= 0.10 * peak);
  assert_true(fabs(e->category_peak[AG_MEM_ACTIVATIONS] - act) <= 0.10 * act);
}

static void memory_estimate_matches_the_run(void **state) {
  (void)state;
  estimate_case(CHARLM_GPT, 32);
  estimate_case(CHARLM_MLP, 512);
}

/* --batch auto under a cap: out-of-memory errors are caught and recovered,
 * allocated bytes are back where they were, and the chosen batch trains.
 * On cpu, and on opencl:0 and the emulated GPU where they are available. */
static void batch_auto_on(ag_device dev, const char *name, unsigned cap_mb) {
  charlm_options o = quiet_options();
  charlm_options d = charlm_defaults(CHARLM_GPT);
  o.device = dev;
  o.model = CHARLM_GPT;
  o.n_layer = d.n_layer;
  o.n_head = d.n_head;
  o.n_embd = d.n_embd;
  o.profile = false;
  o.batch_auto = true;
  charlm_result r;
  assert_int_equal(ag_memory_empty_cache(o.device), AG_OK);
  assert_int_equal(ag_memory_set_cap(o.device, (size_t)cap_mb << 20), AG_OK);
  int64_t tensors0 = ag_live_tensors(), nodes0 = ag_live_nodes();
  ag_memory_stats m0, m1;
  assert_int_equal(ag_memory_stats_get(o.device, &m0), AG_OK);
  ag_status st = charlm_train(&o, &r);
  assert_int_equal(ag_memory_set_cap(o.device, 0), AG_OK);
  assert_int_equal(st, AG_OK);
  /* Nothing of the failed probes outlives the run either. */
  assert_int_equal(ag_memory_stats_get(o.device, &m1), AG_OK);
  assert_int_equal(ag_live_tensors(), tensors0);
  assert_int_equal(ag_live_nodes(), nodes0);
  assert_int_equal(m1.allocated_bytes[AG_POOL_ALL].current, m0.allocated_bytes[AG_POOL_ALL].current);
  const charlm_batch_search *b = &r.batch_search;
  printf("%s: batch auto under %u MiB: predicted %lld, largest fit %lld, chosen %lld, %d tries, %d OOMs, "
         "allocated %lld -> %lld\n",
         name, cap_mb, (long long)b->predicted, (long long)b->largest_fit, (long long)b->chosen, b->tries, b->ooms,
         (long long)b->allocated_before, (long long)b->allocated_after);
  assert_true(b->ooms >= 1);
  assert_true(b->largest_fit > 1);
  assert_int_equal(b->chosen, b->largest_fit - b->largest_fit / 10);
  assert_int_equal(b->allocated_after, b->allocated_before);
  assert_int_equal(r.steps_done, 1);
}

static void batch_auto_under_a_cap(void **state) {
  (void)state;
  /* no cap on a host-memory device: refused, nothing run */
  charlm_options o = quiet_options();
  o.batch_auto = true;
  o.profile = false;
  charlm_result r;
  assert_int_equal(ag_memory_set_cap(o.device, 0), AG_OK);
  assert_int_equal(charlm_train(&o, &r), AG_ERR_INVALID);
  assert_non_null(strstr(ag_last_error(), "memory_cap_mb"));
  ag_error_clear();
  batch_auto_on(AG_CPU, "cpu", 40);
  /* The other devices: AG_CHARLM_TEST_DEVICES (comma-separated), default
   * opencl:0,gpuemu:0 (CTest runs OpenCL as its own test, see cli.cmake).
   * The emulated GPU runs kernels 10x slower (50x under ASan): a smaller cap
   * keeps its batches small. */
  const char *env = getenv("AG_CHARLM_TEST_DEVICES");
  char list[256];
  snprintf(list, sizeof list, "%s", env ? env : "opencl:0,gpuemu:0");
  for (char *save = NULL, *dn = strtok_r(list, ",", &save); dn; dn = strtok_r(NULL, ",", &save)) {
    ag_device dev;
    if (ag_device_parse(dn, &dev) != AG_OK) {
      printf("%s: unavailable, skipped (%s)\n", dn, ag_last_error());
      ag_error_clear();
      continue;
    }
    batch_auto_on(dev, dn, strncmp(dn, "gpuemu", 6) == 0 ? 16 : 40);
  }
}

/* Whether a checkpoint has tensor `name`. */
static bool ckpt_has(const char *path, const char *name) {
  ag_safetensors *f;
  assert_int_equal(ag_safetensors_open(path, &f), AG_OK);
  bool has = false;
  for (int i = 0; i < ag_safetensors_count(f); i++) has = has || !strcmp(ag_safetensors_name(f, i), name);
  ag_safetensors_close(f);
  return has;
}

/* GPT-2 weight tying in the job's checkpoints: a tied run stores the shared
 * tensor once (no model.head.weight); a checkpoint with a separate head (as
 * written before tying) resumes untied, read from the file, and stays so. */
static void gpt_tying_in_checkpoints(void **state) {
  (void)state;
  const char *tied = TMP "_tied.st", *untied = TMP "_untied.st";
  charlm_options o = quiet_options();
  o.model = CHARLM_GPT;
  o.n_layer = 1;
  o.n_head = 2;
  o.n_embd = 16;
  o.batch = 8;
  o.profile = false;
  o.out = tied;
  charlm_result r;
  assert_int_equal(charlm_train(&o, &r), AG_OK);
  assert_true(ckpt_has(tied, "model.wte.weight"));
  assert_false(ckpt_has(tied, "model.head.weight"));
  o.untied_head = true;
  o.out = untied;
  assert_int_equal(charlm_train(&o, &r), AG_OK);
  assert_true(ckpt_has(untied, "model.head.weight"));
  charlm_options c = quiet_options(); /* defaults: tied; the file decides */
  c.resume = untied;
  c.out = untied;
  c.steps = 2;
  c.profile = false;
  assert_int_equal(charlm_train(&c, &r), AG_OK);
  assert_int_equal(r.steps_done, 2); /* resumed at step 1, trained to 2 */
  assert_true(ckpt_has(untied, "model.head.weight"));
  c.resume = tied;
  c.out = tied;
  assert_int_equal(charlm_train(&c, &r), AG_OK);
  assert_false(ckpt_has(tied, "model.head.weight"));
  remove(tied);
  remove(untied);
}

int main(void) {
  /* AG_TEST_FILTER: run only the tests whose names match (cmocka's pattern) */
  const char *filter = getenv("AG_TEST_FILTER");
  if (filter && *filter) cmocka_set_test_filter(filter);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(gpt_tying_in_checkpoints),
      cmocka_unit_test(batch_auto_under_a_cap),
      cmocka_unit_test(memory_estimate_matches_the_run),
      cmocka_unit_test(huge_batch_is_refused),
      cmocka_unit_test(nonfinite_hyperparameters_are_refused),
      cmocka_unit_test(save_does_not_follow_a_planted_symlink),
      cmocka_unit_test(open_of_a_fifo_does_not_block),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
