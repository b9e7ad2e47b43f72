/* The Vulkan backend's layout for discrete GPUs, on lavapipe:
 *
 * - args: the argument blocks of the dispatches in device-local memory,
 *   copied there from a staging buffer at the start of each batch
 *   (AG_VULKAN_TEST=device_local_args) or written through a device-local
 *   host-visible mapping (AG_VULKAN_TEST=mapped_args), as on a discrete GPU.
 *   The process runs itself once per path ("dump" below: elementwise ops,
 *   reductions, matmul, softmax, fused attention forward and backward, two
 *   AdamW steps, and 600 chained dispatches that fill several batches) and
 *   the outputs must equal the default path's bit for bit. Each run is
 *   under the validation layers with synchronization validation
 *   (tests/gpu3_vulkan_perf2.cmake): a message makes the run exit 97.
 * - sdpa_wg SPV...: the attention modules run work-groups of at least 64
 *   invocations (their LocalSize execution mode).
 *
 * usage: gpu3_vulkan_perf2_test args | dump FILE | sdpa_wg SPV...
 * Skips (77) without vulkan:0. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "anygrad/anygrad.h"

static ag_device VK;
static const char *g_self;
static char **g_spv;
static int g_nspv;

static bool have_vulkan(void) {
  ag_backend_kind k;
  if (ag_backend_find("vulkan", &k) != AG_OK) return false;
  return ag_backend_available(k, NULL) && ag_device_parse("vulkan:0", &VK) == AG_OK;
}

/* ---- dump: the representative ops, their outputs written to a file ---- */

static uint32_t g_rng = 12345u;
static float rnd(void) {
  g_rng = g_rng * 1664525u + 1013904223u;
  return (float)(g_rng >> 8) / 16777216.0f * 2.0f - 1.0f;
}

static ag_tensor *randt(int nd, const int64_t *shape) {
  int64_t n = 1;
  for (int i = 0; i < nd; i++) n *= shape[i];
  float *h = malloc((size_t)n * sizeof *h);
  if (!h) return NULL;
  for (int64_t i = 0; i < n; i++) h[i] = rnd();
  ag_tensor *t = ag_from_host(VK, AG_F32, nd, shape, h);
  free(h);
  return t;
}

static int put(FILE *f, ag_tensor *t) {
  if (!t) return 1;
  size_t bytes = (size_t)ag_tensor_numel(t) * sizeof(float);
  float *h = malloc(bytes ? bytes : 1);
  int bad = !h || ag_to_host(t, h, bytes) != AG_OK || fwrite(h, 1, bytes, f) != bytes;
  free(h);
  return bad;
}

static int dump(const char *path) {
  FILE *f = fopen(path, "wb");
  if (!f) {
    fprintf(stderr, "cannot create %s\n", path);
    return 1;
  }
  int bad = 0;
  ag_scope_begin();
  int64_t s1[1] = {3001}, s2[2] = {37, 81}, sa[2] = {70, 96}, sb[2] = {96, 50};
  ag_tensor *x = randt(1, s1), *y = randt(1, s1), *m = randt(2, s2);
  bad |= put(f, ag_add(x, y));
  bad |= put(f, ag_exp(x));
  bad |= put(f, ag_gelu(y));
  int d1[1] = {1}, d0[1] = {0};
  bad |= put(f, ag_sum(m, 1, d1, false));
  bad |= put(f, ag_mean(m, 1, d0, true));
  bad |= put(f, ag_softmax(m, 1));
  bad |= put(f, ag_matmul(randt(2, sa), randt(2, sb)));
  /* a chain of 600 dependent dispatches: more than two batches of 256 */
  ag_tensor *c = x;
  for (int i = 0; i < 600; i++) c = ag_add(c, y);
  bad |= put(f, c);
  /* fused attention, causal, grouped heads, forward and backward */
  int64_t sq[4] = {2, 4, 70, 32}, sk[4] = {2, 2, 70, 32};
  ag_tensor *q = randt(4, sq), *k = randt(4, sk), *v = randt(4, sk);
  bad |= !q || !k || !v;
  if (!bad) {
    ag_tensor_set_requires_grad(q, true);
    ag_tensor_set_requires_grad(k, true);
    ag_tensor_set_requires_grad(v, true);
    ag_tensor *o = ag_scaled_dot_product_attention(q, k, v, NULL, true, 1.0 / sqrt(32.0), 0.0, NULL);
    bad |= put(f, o);
    bad |= !o || ag_backward(ag_sum(ag_mul(o, o), 0, NULL, false), NULL, false) != AG_OK;
    bad |= put(f, ag_tensor_grad(q)) | put(f, ag_tensor_grad(k)) | put(f, ag_tensor_grad(v));
  }
  /* two AdamW steps of a linear layer's weight */
  int64_t sw[2] = {96, 50};
  ag_tensor *w = randt(2, sw), *in = randt(2, sa);
  bad |= !w || !in;
  if (!bad) {
    ag_tensor_set_requires_grad(w, true);
    ag_param_list pl = {0};
    ag_params_add(&pl, "w", w);
    ag_adamw_options ao = ag_adamw_defaults();
    ag_optimizer *opt = ag_adamw_create(&pl, &ao);
    bad |= !opt;
    for (int step = 0; step < 2 && !bad; step++) {
      ag_optimizer_zero_grad(opt);
      ag_tensor *out = ag_matmul(in, w);
      bad |= !out || ag_backward(ag_mean(ag_mul(out, out), 0, NULL, false), NULL, false) != AG_OK;
      bad |= !bad && ag_optimizer_step(opt) != AG_OK;
    }
    bad |= put(f, w);
    ag_optimizer_free(opt);
    ag_params_free(&pl);
  }
  bad |= ag_scope_end() != AG_OK;
  bad |= ag_device_synchronize(VK) != AG_OK;
  bad |= fclose(f) != 0;
  if (bad) fprintf(stderr, "dump: %s\n", ag_last_error());
  return bad;
}

/* ---- args: the dump under each path, compared ---- */

static void run_dump(const char *sw, const char *path) {
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    if (sw) setenv("AG_VULKAN_TEST", sw, 1);
    else unsetenv("AG_VULKAN_TEST");
    execl(g_self, g_self, "dump", path, (char *)NULL);
    _exit(126);
  }
  int status = 0;
  assert_true(waitpid(pid, &status, 0) == pid);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    fail_msg("the run with AG_VULKAN_TEST=%s failed (status %d; 97: validation messages)", sw ? sw : "",
             WIFEXITED(status) ? WEXITSTATUS(status) : -1);
}

static unsigned char *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) fail_msg("cannot open %s", path);
  fseek(f, 0, SEEK_END);
  long bytes = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *p = malloc((size_t)bytes + 1);
  assert_non_null(p);
  assert_int_equal(fread(p, 1, (size_t)bytes, f), (size_t)bytes);
  fclose(f);
  *n = (size_t)bytes;
  return p;
}

static void test_args(void **state) {
  (void)state;
  char dir[] = "/tmp/gpu3_vulkan_perf2_XXXXXX";
  assert_non_null(mkdtemp(dir));
  const char *sws[3] = {NULL, "device_local_args", "mapped_args"};
  char path[3][64];
  for (int i = 0; i < 3; i++) {
    snprintf(path[i], sizeof path[i], "%s/%d.bin", dir, i);
    run_dump(sws[i], path[i]);
  }
  size_t n0 = 0;
  unsigned char *ref = slurp(path[0], &n0);
  assert_true(n0 > 100000);
  for (int i = 1; i < 3; i++) {
    size_t n = 0;
    unsigned char *got = slurp(path[i], &n);
    assert_int_equal(n, n0);
    for (size_t b = 0; b < n; b++)
      if (got[b] != ref[b]) fail_msg("AG_VULKAN_TEST=%s: byte %zu differs from the default path's", sws[i], b);
    free(got);
  }
  free(ref);
  for (int i = 0; i < 3; i++) remove(path[i]);
  rmdir(dir);
}

/* ---- sdpa_wg: work-groups of the attention modules ---- */

enum { SPV_OP_EXECUTION_MODE = 16, SPV_MODE_LOCAL_SIZE = 17 };

static void test_sdpa_wg(void **state) {
  (void)state;
  int seen = 0;
  for (int f = 0; f < g_nspv; f++) {
    if (!strstr(g_spv[f], "sdpa")) continue;
    seen++;
    FILE *fp = fopen(g_spv[f], "rb");
    if (!fp) fail_msg("cannot open %s", g_spv[f]);
    fseek(fp, 0, SEEK_END);
    long bytes = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    assert_true(bytes > 20 && bytes % 4 == 0);
    uint32_t *w = malloc((size_t)bytes);
    assert_non_null(w);
    assert_int_equal(fread(w, 1, (size_t)bytes, fp), (size_t)bytes);
    fclose(fp);
    size_t nw = (size_t)bytes / 4;
    uint64_t inv = 0;
    for (size_t i = 5; i < nw;) {
      uint32_t len = w[i] >> 16, op = w[i] & 0xffffu;
      if (len == 0 || i + len > nw) fail_msg("%s: malformed instruction at word %zu", g_spv[f], i);
      if (op == SPV_OP_EXECUTION_MODE && len == 6 && w[i + 2] == SPV_MODE_LOCAL_SIZE)
        inv = (uint64_t)w[i + 3] * w[i + 4] * w[i + 5];
      i += len;
    }
    free(w);
    if (inv < 64) fail_msg("%s: work-groups of %llu invocations (64 or more wanted)", g_spv[f], (unsigned long long)inv);
  }
  assert_int_equal(seen, 3);
}

int main(int argc, char **argv) {
  const char *group = argc > 1 ? argv[1] : "args";
  g_self = argv[0];
  if (!strcmp(group, "sdpa_wg")) {
    g_spv = argv + 2;
    g_nspv = argc - 2;
    const struct CMUnitTest t[] = {cmocka_unit_test(test_sdpa_wg)};
    return cmocka_run_group_tests_name("gpu3_vulkan_sdpa_wg", t, NULL, NULL);
  }
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
  if (!strcmp(group, "dump") && argc == 3) return dump(argv[2]);
  if (!strcmp(group, "args")) {
    const struct CMUnitTest t[] = {cmocka_unit_test(test_args)};
    return cmocka_run_group_tests_name("gpu3_vulkan_device_local_args", t, NULL, NULL);
  }
  fprintf(stderr, "usage: gpu3_vulkan_perf2_test args | dump FILE | sdpa_wg SPV...\n");
  return 2;
}
