/* PyTorch's type promotion: ag_result_type / ag_result_type_scalar and the
 * dtype that ag_add, ag_mul, ag_eq, ag_where and the scalar ops return, for
 * every pair of the eight dtypes (dimensioned, 0-dim, Python-style int and
 * float scalars), against the table tests/promotion_table.py takes from
 * torch.result_type (tests/data/promotion_torch.txt, the path is argv[1]).
 * Then values and gradients through a promoted op, and ag_argmax's i64. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "anygrad/anygrad.h"

static int g_failed;

#define CHECK(cond)                                                                           \
  do {                                                                                        \
    if (!(cond)) {                                                                            \
      fprintf(stderr, "%s:%d: check failed: %s (last error: %s)\n", __FILE__, __LINE__, #cond, \
              ag_last_error());                                                               \
      g_failed = 1;                                                                           \
    }                                                                                         \
  } while (0)

static ag_dtype parse(const char *s) {
  ag_dtype d = AG_F32;
  if (ag_dtype_parse(s, &d) != AG_OK) {
    fprintf(stderr, "bad dtype '%s' in the table\n", s);
    exit(1);
  }
  return d;
}

static void expect_dtype(const char *what, const char *line, ag_tensor *t, ag_dtype want) {
  if (!t) {
    fprintf(stderr, "%s for '%s' failed: %s\n", what, line, ag_last_error());
    g_failed = 1;
  } else if (ag_tensor_dtype(t) != want) {
    fprintf(stderr, "%s for '%s' gave %s\n", what, line, ag_dtype_name(ag_tensor_dtype(t)));
    g_failed = 1;
  }
  ag_error_clear();
}

static int check_table(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) {
    fprintf(stderr, "cannot open %s\n", path);
    return 1;
  }
  char line[128];
  int n = 0;
  while (fgets(line, sizeof line, f)) {
    if (line[0] == '#') continue;
    line[strcspn(line, "\n")] = 0;
    char kind[8], sa[8], sb[8], sr[8];
    if (sscanf(line, "%7s %7s %7s %7s", kind, sa, sb, sr) != 4) continue;
    ag_dtype da = parse(sa), r = parse(sr);
    ag_scope_begin();
    ag_tensor *a = ag_ones(AG_CPU, da, 1, (int64_t[]){2});
    ag_tensor *cond = ag_ones(AG_CPU, AG_BOOL, 1, (int64_t[]){2});
    if (!strcmp(kind, "dim") || !strcmp(kind, "zero")) {
      ag_dtype db = parse(sb);
      ag_tensor *b = !strcmp(kind, "dim") ? ag_ones(AG_CPU, db, 1, (int64_t[]){2}) : ag_scalar(AG_CPU, db, 1);
      if (ag_result_type(a, b) != r) {
        fprintf(stderr, "ag_result_type for '%s' gave %s\n", line, ag_dtype_name(ag_result_type(a, b)));
        g_failed = 1;
      }
      if (r != AG_BOOL) { /* bool + bool is logical or in PyTorch; not an add here */
        expect_dtype("ag_add", line, ag_add(a, b), r);
        expect_dtype("ag_mul", line, ag_mul(a, b), r);
      }
      expect_dtype("ag_eq", line, ag_eq(a, b), AG_BOOL);
      expect_dtype("ag_lt", line, ag_lt(b, a), AG_BOOL);
      expect_dtype("ag_where", line, ag_where(cond, a, b), r);
    } else {
      double s = !strcmp(kind, "int") ? 2.0 : 0.5;
      if (ag_result_type_scalar(a, s) != r) {
        fprintf(stderr, "ag_result_type_scalar for '%s' gave %s\n", line,
                ag_dtype_name(ag_result_type_scalar(a, s)));
        g_failed = 1;
      }
      expect_dtype("ag_mul_scalar", line, ag_mul_scalar(a, s), r);
      expect_dtype("ag_add_scalar", line, ag_add_scalar(a, s), r);
    }
    ag_scope_end();
    n++;
  }
  fclose(f);
  if (n != 144) {
    fprintf(stderr, "%s: %d entries, expected 144\n", path, n);
    return 1;
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: promotion_test tests/data/promotion_torch.txt\n");
    return 2;
  }
  if (check_table(argv[1])) g_failed = 1;

  ag_scope_begin();
  /* values: f32 + i32 computes in f32 */
  ag_tensor *x = ag_from_host(AG_CPU, AG_F32, 1, (int64_t[]){2}, (float[]){1.5f, 2.5f});
  ag_tensor *k = ag_from_host(AG_CPU, AG_I32, 1, (int64_t[]){2}, (int32_t[]){1, 2});
  ag_tensor_set_requires_grad(x, true);
  ag_tensor *y = ag_add(x, k);
  CHECK(y && ag_tensor_dtype(y) == AG_F32);
  float v[2] = {0, 0};
  CHECK(ag_to_host(y, v, sizeof v) == AG_OK && v[0] == 2.5f && v[1] == 4.5f);
  /* the gradient reaches the f32 operand through the promoted op */
  CHECK(ag_backward(ag_sum(ag_mul(y, k), 0, NULL, false), NULL, false) == AG_OK);
  CHECK(ag_to_host(ag_tensor_grad(x), v, sizeof v) == AG_OK && v[0] == 1.0f && v[1] == 2.0f);
  /* integer true division by a scalar gives f32 */
  ag_tensor *h = ag_div_scalar(k, 2.0);
  CHECK(h && ag_tensor_dtype(h) == AG_F32 && ag_to_host(h, v, sizeof v) == AG_OK && v[0] == 0.5f);
  /* argmax is i64 and compares with i64 labels without a cast */
  ag_tensor *logits = ag_from_host(AG_CPU, AG_F32, 2, (int64_t[]){2, 3},
                                   (float[]){0.1f, 0.7f, 0.2f, 0.9f, 0.05f, 0.05f});
  ag_tensor *am = ag_argmax(logits, 1, false);
  CHECK(am && ag_tensor_dtype(am) == AG_I64);
  ag_tensor *labels = ag_from_host(AG_CPU, AG_I64, 1, (int64_t[]){2}, (int64_t[]){1, 2});
  ag_tensor *hit = ag_eq(am, labels);
  CHECK(hit && ag_item(ag_sum(hit, 0, NULL, false)) == 1.0);
  /* mse_loss broadcasts [4,1] against [4] to [4,4] as PyTorch does */
  ag_tensor *ma = ag_from_host(AG_CPU, AG_F32, 2, (int64_t[]){4, 1}, (float[]){1, 2, 3, 4});
  ag_tensor *mb = ag_from_host(AG_CPU, AG_F32, 1, (int64_t[]){4}, (float[]){0, 0, 0, 1});
  ag_tensor_set_requires_grad(ma, true);
  ag_tensor *ml = ag_mse_loss(ma, mb, AG_REDUCTION_MEAN);
  CHECK(ml && fabs(ag_item(ml) - 6.5) < 1e-6);
  CHECK(ag_backward(ml, NULL, false) == AG_OK);
  float mg[4] = {0};
  CHECK(ag_to_host(ag_tensor_grad(ma), mg, sizeof mg) == AG_OK && fabsf(mg[0] - 0.375f) < 1e-6f);
  ag_tensor *ms = ag_mse_loss(ma, mb, AG_REDUCTION_SUM);
  CHECK(ms && fabs(ag_item(ms) - 104.0) < 1e-5);
  ag_tensor *mn = ag_mse_loss(ma, mb, AG_REDUCTION_NONE);
  CHECK(mn && ag_tensor_ndim(mn) == 2 && ag_tensor_shape(mn)[0] == 4 && ag_tensor_shape(mn)[1] == 4);
  ag_scope_end();
  if (g_failed) return 1;
  printf("promotion: all checks passed\n");
  return 0;
}
