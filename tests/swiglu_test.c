/* The fused SwiGLU op (ag_swiglu, optable.h's SWIGLU: silu(a) * b) against
 * the composition ag_mul(ag_silu(a), b) it replaces in the Llama MLP: the
 * output and both gradients, contiguous, broadcast and strided operands, in
 * f32 (tolerance 1e-6 relative to 1 + max |reference|: the two differ only
 * by rounding the silu(a) intermediate) and f64 (1e-13). anygrad check runs
 * the op and its gradient against a double reference on every backend. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "anygrad/anygrad.h"

static double *host(ag_tensor *t) {
  ag_tensor *d = ag_cast(t, AG_F64);
  ag_tensor *c = d ? ag_contiguous(d) : NULL;
  assert_non_null(c);
  int64_t n = ag_tensor_numel(c);
  double *h = malloc(sizeof(double) * (size_t)(n ? n : 1));
  assert_int_equal(ag_to_host(c, h, sizeof(double) * (size_t)n), AG_OK);
  ag_tensor_release(d);
  ag_tensor_release(c);
  return h;
}

/* max |a - b| / (1 + max |b|); NaN wins */
static double rel_err(ag_tensor *a, ag_tensor *b) {
  assert_int_equal(ag_tensor_numel(a), ag_tensor_numel(b));
  double *x = host(a), *y = host(b), e = 0, m = 0;
  for (int64_t i = 0; i < ag_tensor_numel(a); i++) {
    double d = fabs(x[i] - y[i]);
    if (!(d <= e)) e = d;
    if (fabs(y[i]) > m) m = fabs(y[i]);
  }
  free(x);
  free(y);
  return e / (1 + m);
}

/* out = f(a, b) (fused or composed) of the leaves a0, b0 (their
 * transposes when tr), loss = sum(out * w); out and the gradients of a0
 * and b0, new references. */
static void run(ag_tensor *a0, ag_tensor *b0, bool tr, ag_tensor *w, bool fused, ag_tensor **r) {
  ag_tensor_zero_grad(a0);
  ag_tensor_zero_grad(b0);
  ag_tensor *a = tr ? ag_transpose(a0, 0, 1) : ag_tensor_retain(a0);
  ag_tensor *b = tr ? ag_transpose(b0, 0, 1) : ag_tensor_retain(b0);
  ag_tensor *s = fused ? NULL : ag_silu(a);
  ag_tensor *o = fused ? ag_swiglu(a, b) : ag_mul(s, b);
  if (!o) fail_msg("%s", ag_last_error());
  ag_tensor *ow = ag_mul(o, w), *l = ag_sum(ow, 0, NULL, false);
  if (ag_backward(l, NULL, false) != AG_OK) fail_msg("%s", ag_last_error());
  r[0] = ag_detach(o);
  r[1] = ag_detach(ag_tensor_grad(a0));
  r[2] = ag_detach(ag_tensor_grad(b0));
  assert_non_null(r[1]);
  assert_non_null(r[2]);
  ag_tensor *rel[] = {a, b, s, o, ow, l};
  for (size_t i = 0; i < sizeof rel / sizeof *rel; i++) ag_tensor_release(rel[i]);
}

static void test_fused_vs_composition(void **state) {
  (void)state;
  /* shapes of a and b: equal; b broadcast over rows; a a transposed view */
  static const int64_t sa[3][2] = {{33, 70}, {16, 9}, {24, 17}}, sb[3][2] = {{33, 70}, {1, 9}, {24, 17}};
  for (int dbl = 0; dbl < 2; dbl++)
    for (int c = 0; c < 3; c++) {
      const ag_dtype dt = dbl ? AG_F64 : AG_F32;
      ag_generator *g = ag_generator_create(11 + (uint64_t)c);
      ag_tensor *a0 = ag_randn(AG_CPU, dt, 2, sa[c], 0, 3, g), *b0 = ag_randn(AG_CPU, dt, 2, sb[c], 0, 1, g);
      assert_int_equal(ag_tensor_set_requires_grad(a0, true), AG_OK);
      assert_int_equal(ag_tensor_set_requires_grad(b0, true), AG_OK);
      const int64_t so[2] = {c == 2 ? sa[c][1] : sa[c][0], c == 2 ? sa[c][0] : sa[c][1]};
      ag_tensor *w = ag_randn(AG_CPU, dt, 2, so, 0, 1, g);
      assert_non_null(w);
      ag_tensor *rf[3], *rc[3];
      run(a0, b0, c == 2, w, true, rf);
      run(a0, b0, c == 2, w, false, rc);
      const double tol = dbl ? 1e-13 : 1e-6;
      double e[3] = {rel_err(rf[0], rc[0]), rel_err(rf[1], rc[1]), rel_err(rf[2], rc[2])};
      for (int i = 0; i < 3; i++)
        if (!(e[i] <= tol))
          fail_msg("%s case %d: %s error %g > %g", ag_dtype_name(dt), c, (const char *[]){"out", "da", "db"}[i],
                   e[i], tol);
      ag_tensor *rel[] = {a0, b0, w, rf[0], rf[1], rf[2], rc[0], rc[1], rc[2]};
      for (size_t i = 0; i < sizeof rel / sizeof *rel; i++) ag_tensor_release(rel[i]);
      ag_generator_free(g);
    }
}

static void test_errors(void **state) {
  (void)state;
  ag_tensor *a = ag_zeros(AG_CPU, AG_F32, 2, (int64_t[]){3, 4}), *b = ag_zeros(AG_CPU, AG_F32, 2, (int64_t[]){3, 5});
  ag_tensor *i = ag_zeros(AG_CPU, AG_I32, 2, (int64_t[]){3, 4});
  assert_null(ag_swiglu(a, b));
  assert_int_equal(ag_last_status(), AG_ERR_SHAPE);
  assert_null(ag_swiglu(a, NULL));
  assert_null(ag_swiglu(i, i));
  assert_int_equal(ag_last_status(), AG_ERR_DTYPE);
  ag_tensor_release(a);
  ag_tensor_release(b);
  ag_tensor_release(i);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_fused_vs_composition), cmocka_unit_test(test_errors)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
