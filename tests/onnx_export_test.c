/* ONNX export's C API (anygrad/onnx.h): NULL arguments, bad values and
 * paths, the refusal of an op with no ONNX form (named in the message), the
 * first error kept through a chain, training-mode models refused, and a
 * failed save that replaces nothing and leaves no temp file. Numeric
 * agreement with ONNX Runtime is tests/onnx_check.py's. Without protobuf-c
 * the API must say that it was built without ONNX. */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "anygrad/anygrad.h"

static char g_dir[] = "/tmp/ag_onnx_test_XXXXXX";
static const char *g_samples_dir; /* argv[1]: where test_sequential_samples writes */

static void path_of(char *buf, size_t n, const char *name) { snprintf(buf, n, "%s/%s", g_dir, name); }

static void expect_msg(const char *part) {
  const char *m = ag_last_error();
  if (!strstr(m, part)) fail_msg("error '%s' lacks '%s'", m, part);
}

/* Files in the test folder whose name holds ".tmp." (ag_output's temps). */
static int temps_left(void) {
  DIR *d = opendir(g_dir);
  int n = 0;
  for (struct dirent *e; d && (e = readdir(d));) n += strstr(e->d_name, ".tmp.") != NULL;
  if (d) closedir(d);
  return n;
}

static char *slurp(const char *p, size_t *n) {
  FILE *f = fopen(p, "rb");
  if (!f) return NULL;
  char *b = malloc(1 << 20);
  *n = fread(b, 1, 1 << 20, f);
  fclose(f);
  return b;
}

/* A small graph: x [batch, 4] -> linear(4, 3) -> tanh -> "y". */
static ag_onnx *small_graph(ag_linear *lin, const char *op) {
  assert_int_equal(ag_linear_init(lin, AG_CPU, AG_F32, 4, 3, true, NULL), AG_OK);
  ag_onnx *g = ag_onnx_create("t");
  assert_non_null(g);
  int64_t in[2] = {-1, 4}, out[2] = {-1, 3};
  const char *names[2] = {"batch", NULL};
  int x = ag_onnx_input(g, "x", AG_F32, 2, in, names);
  assert_true(x >= 0);
  int y = ag_onnx_unary(g, op, ag_onnx_linear(g, lin, "0.", x));
  ag_onnx_output(g, y, "y", AG_F32, 2, out, names);
  return g;
}

static void test_without_onnx(void **state) {
  (void)state;
  if (ag_onnx_available()) skip();
  ag_error_clear();
  assert_null(ag_onnx_create(NULL));
  assert_int_equal(ag_last_status(), AG_ERR_UNSUPPORTED);
  expect_msg("built without ONNX");
}

static void test_null_arguments(void **state) {
  (void)state;
  if (!ag_onnx_available()) skip();
  ag_error_clear();
  assert_int_equal(ag_onnx_save(NULL, "x.onnx"), AG_ERR_INVALID);
  assert_int_equal(ag_onnx_status(NULL), AG_ERR_INVALID);
  ag_error_clear();
  assert_int_equal(ag_onnx_linear(NULL, NULL, NULL, 0), -1);
  assert_int_equal(ag_last_status(), AG_ERR_INVALID);
  ag_onnx_free(NULL);
  ag_onnx *g = ag_onnx_create(NULL);
  assert_non_null(g);
  assert_int_equal(ag_onnx_save(g, "x.onnx"), AG_ERR_INVALID); /* no outputs */
  expect_msg("no outputs");
  int64_t d[1] = {-1};
  assert_int_equal(ag_onnx_input(g, NULL, AG_F32, 1, d, NULL), -1);
  assert_int_equal(ag_last_status(), AG_ERR_INVALID);
  ag_onnx_free(g);
  /* a dynamic dimension needs a name; a module must not be NULL */
  g = ag_onnx_create(NULL);
  assert_int_equal(ag_onnx_input(g, "x", AG_F32, 1, d, NULL), -1);
  expect_msg("needs a name");
  ag_onnx_free(g);
  g = ag_onnx_create(NULL);
  int x = ag_onnx_input(g, "x", AG_F32, 1, (const int64_t[]){4}, NULL);
  assert_true(x >= 0);
  assert_int_equal(ag_onnx_input(g, "x", AG_F32, 1, (const int64_t[]){4}, NULL), -1);
  expect_msg("used twice");
  ag_onnx_free(g);
  g = ag_onnx_create(NULL);
  x = ag_onnx_input(g, "x", AG_I64, 2, (const int64_t[]){2, 3}, NULL);
  assert_int_equal(ag_onnx_llama(g, NULL, x), -1);
  assert_int_equal(ag_onnx_status(g), AG_ERR_INVALID);
  assert_int_equal(ag_onnx_save(g, "never.onnx"), AG_ERR_INVALID);
  ag_onnx_free(g);
  g = ag_onnx_create(NULL);
  assert_int_equal(ag_onnx_input(g, "x", AG_F16, 1, (const int64_t[]){4}, NULL), -1);
  assert_int_equal(ag_last_status(), AG_ERR_DTYPE);
  ag_onnx_free(g);
}

/* An op with no ONNX form is refused by name; the error stays the graph's
 * first, through later calls and the save, and nothing is written. */
static void test_unsupported_op(void **state) {
  (void)state;
  if (!ag_onnx_available()) skip();
  ag_linear lin;
  ag_onnx *g = small_graph(&lin, "frac");
  assert_int_equal(ag_onnx_status(g), AG_ERR_UNSUPPORTED);
  expect_msg("'frac'");
  expect_msg("no ONNX form");
  assert_int_equal(ag_onnx_unary(g, "tanh", 0), -1); /* later calls keep the first error */
  char p[400];
  path_of(p, sizeof p, "frac.onnx");
  assert_int_equal(ag_onnx_save(g, p), AG_ERR_UNSUPPORTED);
  struct stat sb;
  assert_int_not_equal(stat(p, &sb), 0);
  assert_int_equal(temps_left(), 0);
  ag_onnx_free(g);
  ag_linear_free(&lin);
  /* the refusal is the op's, whatever comes after it */
  g = ag_onnx_create(NULL);
  int x = ag_onnx_input(g, "x", AG_F32, 1, (const int64_t[]){4}, NULL);
  assert_int_equal(ag_onnx_unary(g, "expm1", x), -1);
  assert_int_equal(ag_last_status(), AG_ERR_UNSUPPORTED);
  expect_msg("expm1");
  assert_int_equal(ag_onnx_unary(g, NULL, x), -1);
  assert_int_equal(ag_onnx_status(g), AG_ERR_UNSUPPORTED);
  ag_onnx_free(g);
}

/* Bad paths fail with AG_ERR_IO; an existing file survives any failed
 * save; no temp file is left. */
static void test_paths(void **state) {
  (void)state;
  if (!ag_onnx_available()) skip();
  ag_linear lin;
  ag_onnx *g = small_graph(&lin, "tanh");
  assert_int_equal(ag_onnx_status(g), AG_OK);
  char p[400], q[400];
  assert_int_equal(ag_onnx_save(g, NULL), AG_ERR_INVALID);
  path_of(p, sizeof p, "no/such/dir/m.onnx");
  assert_int_equal(ag_onnx_save(g, p), AG_ERR_IO);
  path_of(p, sizeof p, "adir");
  assert_int_equal(mkdir(p, 0777), 0);
  assert_int_equal(ag_onnx_save(g, p), AG_ERR_IO); /* a folder is never replaced */
  assert_int_equal(rmdir(p), 0);
  /* a good save, then a failing graph at the same path: the file stays */
  path_of(q, sizeof q, "m.onnx");
  assert_int_equal(ag_onnx_save(g, q), AG_OK);
  size_t n0, n1;
  char *before = slurp(q, &n0);
  assert_non_null(before);
  assert_true(n0 > 100);
  ag_linear lin2;
  ag_onnx *bad = small_graph(&lin2, "frac");
  assert_int_equal(ag_onnx_save(bad, q), AG_ERR_UNSUPPORTED);
  char *after = slurp(q, &n1);
  assert_int_equal(n0, n1);
  assert_memory_equal(before, after, n0);
  assert_int_equal(temps_left(), 0);
  free(before);
  free(after);
  ag_onnx_free(bad);
  ag_onnx_free(g);
  ag_linear_free(&lin);
  ag_linear_free(&lin2);
}

static void test_sequential(void **state) {
  (void)state;
  if (!ag_onnx_available()) skip();
  ag_layer_spec specs[4] = {{.kind = AG_LAYER_LINEAR, .in = 4, .out = 8, .bias = true},
                            {.kind = AG_LAYER_ACTIVATION, .act = AG_ACT_GELU},
                            {.kind = AG_LAYER_DROPOUT, .p = 0.5},
                            {.kind = AG_LAYER_LINEAR, .in = 8, .out = 2, .bias = true}};
  ag_sequential m;
  assert_int_equal(ag_sequential_init(&m, AG_CPU, AG_F32, 4, specs, NULL), AG_OK);
  ag_onnx *g = ag_onnx_create(NULL);
  int x = ag_onnx_input(g, "x", AG_F32, 2, (const int64_t[]){-1, 4}, (const char *const[]){"batch", NULL});
  ag_error_clear();
  assert_int_equal(ag_onnx_sequential(g, &m, x), -1); /* training mode */
  assert_int_equal(ag_last_status(), AG_ERR_STATE);
  expect_msg("training mode");
  assert_int_equal(ag_onnx_sequential(g, NULL, x), -1);
  assert_int_equal(ag_last_status(), AG_ERR_INVALID);
  ag_sequential_set_train(&m, false);
  int y = ag_onnx_sequential(g, &m, x);
  assert_true(y >= 0);
  assert_int_equal(ag_onnx_output(g, y, "y", AG_F32, 2, (const int64_t[]){-1, 2},
                                  (const char *const[]){"batch", NULL}),
                   AG_OK);
  char p[400];
  path_of(p, sizeof p, "seq.onnx");
  assert_int_equal(ag_onnx_save(g, p), AG_OK);
  ag_onnx_free(g);
  ag_sequential_free(&m);
  unlink(p);
}

/* Every ag_sequential layer kind and activation, with weights, norm
 * parameters and running statistics drawn away from their initial values,
 * exported with anygrad's outputs for batches of 2 and 5: the CTest
 * onnx_export_sequential checks them with ONNX Runtime (tests/onnx_check.py). */
static void test_sequential_samples(void **state) {
  (void)state;
  if (!ag_onnx_available() || !g_samples_dir) skip();
  ag_layer_spec specs[] = {
      {.kind = AG_LAYER_CONV2D, .in = 2, .out = 4, .kernel = 3, .bias = true, .conv = {{1, 1}, {1, 1}, {1, 1}, 1}},
      {.kind = AG_LAYER_BATCH_NORM2D, .in = 4},
      {.kind = AG_LAYER_ACTIVATION, .act = AG_ACT_RELU},
      {.kind = AG_LAYER_CONV2D, .in = 4, .out = 4, .kernel = 3, .bias = false, .conv = {{2, 2}, {0, 0}, {1, 1}, 2}},
      {.kind = AG_LAYER_FLATTEN},
      {.kind = AG_LAYER_LINEAR, .in = 16, .out = 12, .bias = true},
      {.kind = AG_LAYER_LAYER_NORM, .in = 12, .eps = 1e-3},
      {.kind = AG_LAYER_ACTIVATION, .act = AG_ACT_GELU},
      {.kind = AG_LAYER_DROPOUT, .p = 0.3},
      {.kind = AG_LAYER_LINEAR, .in = 12, .out = 8, .bias = true},
      {.kind = AG_LAYER_ACTIVATION, .act = AG_ACT_SILU},
      {.kind = AG_LAYER_LINEAR, .in = 8, .out = 8, .bias = false},
      {.kind = AG_LAYER_ACTIVATION, .act = AG_ACT_TANH},
      {.kind = AG_LAYER_LINEAR, .in = 8, .out = 5, .bias = true},
      {.kind = AG_LAYER_ACTIVATION, .act = AG_ACT_SIGMOID},
  };
  const int n = (int)(sizeof specs / sizeof specs[0]);
  ag_generator *gen = ag_generator_create(11);
  ag_sequential m;
  assert_int_equal(ag_sequential_init(&m, AG_CPU, AG_F32, n, specs, gen), AG_OK);
  for (int i = 0; i < m.params.count; i++)
    assert_int_equal(ag_init_uniform_(m.params.tensors[i], -0.8, 0.8, gen), AG_OK);
  for (int i = 0; i < m.buffers.count; i++) /* running mean in [-0.5, 0.5), variance in [0.5, 1.5) */
    assert_int_equal(ag_init_uniform_(m.buffers.tensors[i], (i % 2) ? 0.5 : -0.5, (i % 2) ? 1.5 : 0.5, gen),
                     AG_OK);
  ag_sequential_set_train(&m, false);
  ag_onnx *g = ag_onnx_create("sequential");
  const char *const dyn[4] = {"batch", NULL, NULL, NULL};
  int x = ag_onnx_input(g, "x", AG_F32, 4, (const int64_t[]){-1, 2, 5, 5}, dyn);
  assert_int_equal(ag_onnx_output(g, ag_onnx_sequential(g, &m, x), "y", AG_F32, 2, (const int64_t[]){-1, 5}, dyn),
                   AG_OK);
  char p[600];
  snprintf(p, sizeof p, "%s/sequential.onnx", g_samples_dir);
  assert_int_equal(ag_onnx_save(g, p), AG_OK);
  ag_onnx_free(g);
  ag_param_list l = {0};
  const int64_t batches[2] = {2, 5};
  for (int i = 0; i < 2; i++) {
    ag_tensor *in = ag_randn(AG_CPU, AG_F32, 4, (const int64_t[]){batches[i], 2, 5, 5}, 0.0, 1.0, gen);
    ag_tensor *out = ag_sequential_forward(&m, in);
    assert_non_null(out);
    char name[32];
    snprintf(name, sizeof name, "input.%d", i);
    assert_int_equal(ag_params_add(&l, name, in), AG_OK);
    snprintf(name, sizeof name, "output.%d", i);
    assert_int_equal(ag_params_add(&l, name, out), AG_OK);
    ag_tensor_release(in);
    ag_tensor_release(out);
  }
  snprintf(p, sizeof p, "%s/sequential_samples.safetensors", g_samples_dir);
  assert_int_equal(ag_safetensors_save(p, &l, 0, NULL, NULL), AG_OK);
  ag_params_free(&l);
  ag_sequential_free(&m);
  ag_generator_free(gen);
}

/* Every elementwise op the exporter maps, one graph output per op, with
 * anygrad's results for batches of 3 and 6: onnx_export_sequential checks
 * them too. Ops defined for positive inputs only get their own graph. */
typedef struct unary_case {
  const char *name;
  ag_tensor *(*fn)(ag_tensor *);
} unary_case;

static void write_unary(const char *file, const unary_case *ops, int n, double lo, double hi, ag_generator *gen) {
  ag_onnx *g = ag_onnx_create("unary");
  const char *const dyn[2] = {"batch", NULL};
  int x = ag_onnx_input(g, "x", AG_F32, 2, (const int64_t[]){-1, 7}, dyn);
  for (int k = 0; k < n; k++)
    assert_int_equal(ag_onnx_output(g, ag_onnx_unary(g, ops[k].name, x), ops[k].name, AG_F32, 2,
                                    (const int64_t[]){-1, 7}, dyn),
                     AG_OK);
  char p[600];
  snprintf(p, sizeof p, "%s/%s.onnx", g_samples_dir, file);
  assert_int_equal(ag_onnx_save(g, p), AG_OK);
  ag_onnx_free(g);
  ag_param_list l = {0};
  for (int i = 0; i < 2; i++) {
    ag_tensor *in = ag_rand(AG_CPU, AG_F32, 2, (const int64_t[]){3 + 3 * i, 7}, lo, hi, gen);
    char name[64];
    snprintf(name, sizeof name, "input.%d", i);
    assert_int_equal(ag_params_add(&l, name, in), AG_OK);
    for (int k = 0; k < n; k++) {
      ag_tensor *y = ops[k].fn(in);
      assert_non_null(y);
      snprintf(name, sizeof name, "%s.%d", ops[k].name, i);
      assert_int_equal(ag_params_add(&l, name, y), AG_OK);
      ag_tensor_release(y);
    }
    ag_tensor_release(in);
  }
  snprintf(p, sizeof p, "%s/%s_samples.safetensors", g_samples_dir, file);
  assert_int_equal(ag_safetensors_save(p, &l, 0, NULL, NULL), AG_OK);
  ag_params_free(&l);
}

static void test_unary_samples(void **state) {
  (void)state;
  if (!ag_onnx_available() || !g_samples_dir) skip();
  static const unary_case all[] = {
      {"neg", ag_neg},     {"exp", ag_exp},         {"abs", ag_abs},         {"relu", ag_relu},
      {"sigmoid", ag_sigmoid}, {"tanh", ag_tanh},   {"sin", ag_sin},         {"cos", ag_cos},
      {"erf", ag_erf},     {"floor", ag_floor},     {"ceil", ag_ceil},       {"round", ag_round},
      {"sign", ag_sign},   {"selu", ag_selu},       {"softsign", ag_softsign}, {"sinh", ag_sinh},
      {"cosh", ag_cosh},   {"hardswish", ag_hardswish}, {"silu", ag_silu},   {"square", ag_square},
      {"gelu", ag_gelu},   {"gelu_erf", ag_gelu_erf},
  };
  static const unary_case pos[] = {
      {"log", ag_log}, {"sqrt", ag_sqrt}, {"rsqrt", ag_rsqrt}, {"reciprocal", ag_reciprocal}};
  ag_generator *gen = ag_generator_create(12);
  write_unary("unary", all, (int)(sizeof all / sizeof all[0]), -3.0, 3.0, gen);
  write_unary("unary_pos", pos, (int)(sizeof pos / sizeof pos[0]), 0.25, 2.5, gen);
  ag_generator_free(gen);
}

static int setup(void **state) {
  (void)state;
  return mkdtemp(g_dir) ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  char p[400];
  path_of(p, sizeof p, "m.onnx");
  unlink(p);
  return rmdir(g_dir);
}

int main(int argc, char **argv) {
  if (argc > 1) {
    g_samples_dir = argv[1];
    mkdir(g_samples_dir, 0777);
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_without_onnx), cmocka_unit_test(test_null_arguments),
      cmocka_unit_test(test_unsupported_op), cmocka_unit_test(test_paths),
      cmocka_unit_test(test_sequential),  cmocka_unit_test(test_sequential_samples),
      cmocka_unit_test(test_unary_samples),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
