/* Every (sub-op, dtype) of the elementwise op table through one device's
 * backend (AG_TEST_DEVICE, the CPU when unset): each call either matches the
 * double-precision reference of tools/op_ref.h or is refused with
 * AG_ERR_UNSUPPORTED, and supports() says which beforehand. A backend that
 * answers with an identity or garbage result for a sub-op it lacks fails
 * here. Kernel calls go through the core's launch path (ag__launch), so the
 * backward and partial-derivative sub-ops are covered too. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "runtime/devstate.h"
#include "tensor/tensor_internal.h"
#include "op_ref.h"
#include "tensor/half.h"
#include "test_device.h"

enum { N = 67 }; /* odd: vector bodies and their tails */

static const ag_dtype DTS[] = {AG_F32, AG_F16, AG_BF16, AG_F64, AG_I32, AG_I64, AG_U8, AG_BOOL};

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static double urand(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (double)(rng >> 11) * 0x1p-53;
}

static void put(ag_dtype dt, void *buf, int i, double v) {
  switch (dt) {
    case AG_F32: ((float *)buf)[i] = (float)v; break;
    case AG_F16: ((uint16_t *)buf)[i] = ag_f32_to_f16((float)v); break;
    case AG_BF16: ((uint16_t *)buf)[i] = ag_f32_to_bf16((float)v); break;
    case AG_F64: ((double *)buf)[i] = v; break;
    case AG_I32: ((int32_t *)buf)[i] = (int32_t)v; break;
    case AG_I64: ((int64_t *)buf)[i] = (int64_t)v; break;
    case AG_U8: ((uint8_t *)buf)[i] = (uint8_t)v; break;
    default: ((uint8_t *)buf)[i] = v != 0; break;
  }
}

static double get(ag_dtype dt, const void *buf, int i) {
  switch (dt) {
    case AG_F32: return ((const float *)buf)[i];
    case AG_F16: return ag_f16_to_f32(((const uint16_t *)buf)[i]);
    case AG_BF16: return ag_bf16_to_f32(((const uint16_t *)buf)[i]);
    case AG_F64: return ((const double *)buf)[i];
    case AG_I32: return ((const int32_t *)buf)[i];
    case AG_I64: return (double)((const int64_t *)buf)[i];
    default: return ((const uint8_t *)buf)[i];
  }
}

/* An exact integer result stored in integer dtype dt (two's complement;
 * bool is v != 0); a float result rounded into dt. */
static double store(ag_dtype dt, double v) {
  char b[8];
  if (dt == AG_BOOL) return v != 0;
  if (dt == AG_U8) return (double)(uint8_t)(int64_t)v;
  if (dt == AG_I32) return (double)(int32_t)(uint32_t)(uint64_t)(int64_t)v;
  put(dt, b, 0, v);
  return get(dt, b, 0);
}

static double tolerance(ag_dtype dt) {
  switch (dt) {
    case AG_F64: return 1e-12;
    case AG_F32: return 2e-5;
    case AG_F16: return 2e-3;
    case AG_BF16: return 1.6e-2;
    default: return 0;
  }
}

/* Inputs for operand k of the call: the table's domain for floats, small
 * integers for integer dtypes (results stay exact). */
static void fill(ag_dtype dt, ag_ref_dom dom, void *buf) {
  for (int i = 0; i < N; i++) {
    double v;
    if (dt == AG_BOOL) v = urand() < 0.5;
    else if (dt == AG_U8) v = floor(urand() * 16);
    else if (!ag_dtype_is_float(dt)) v = floor(urand() * 41) - 20;
    else v = ag_ref_draw(dom, urand(), urand());
    put(dt, buf, i, v);
  }
}

typedef struct tally {
  int pass, unsup;
} tally;

/* One (kernel op, sub-op, dtype): launch, then compare or accept refusal. */
static void one(ag_devstate *ds, ag_kop kop, int sub, ag_dtype dt, tally *t) {
  const bool unary = kop == AG_K_UNARY;
  const ag_binary_info *bi = unary ? NULL : ag_binary_info_of(sub);
  const ag_dtype odt = bi && bi->compare ? AG_BOOL : dt;
  const char *name = unary ? ag_unary_info_of(sub)->name : bi->name;
  double s0, s1;
  if (unary) ag_ref_unary_scalars(sub, &s0, &s1);
  else ag_ref_binary_scalars(sub, &s0, &s1);
  if (ag_dtype_is_int(dt)) s0 = 3, s1 = -7; /* integral: AFFINE and ADD stay exact */
  if (!unary && sub == AG_B_ADD && !ag_dtype_is_int(dt)) s0 = -0.75;

  _Alignas(8) unsigned char ha[N * 8], hb[N * 8], ho[N * 8];
  fill(dt, unary ? ag_ref_unary_dom(sub, 0) : ag_ref_binary_dom(sub, 0), ha);
  fill(dt, unary ? ag_ref_unary_dom(sub, 0) : ag_ref_binary_dom(sub, 1), hb);
  const int64_t shape[1] = {N};
  ag_device d = ds->dev;
  ag_tensor *a = ag_from_host(d, dt, 1, shape, ha);
  ag_tensor *b = ag_from_host(d, dt, 1, shape, hb);
  ag_tensor *o = ag_empty(d, odt, 1, shape);
  assert_non_null(a);
  assert_non_null(b);
  assert_non_null(o);
  ag_kernel_call c;
  memset(&c, 0, sizeof c);
  c.struct_size = (uint32_t)sizeof c;
  c.op = kop;
  c.sub = sub;
  c.n_operands = unary ? 2 : 3;
  c.s[0] = s0;
  c.s[1] = s1;
  if (ag_dtype_is_int(dt)) { /* integer AFFINE's exact scalars (kops.h) */
    c.i[0] = (int64_t)s0;
    c.i[1] = (int64_t)s1;
  }
  c.name = "optable_test";
  ag__operand(&c.o[0], o);
  ag__operand(&c.o[1], a);
  ag__operand(&c.o[2], b);
  const bool says = ds->be->supports(ds->ord, kop, sub, dt);
  ag_status st = ag__launch(ds, &c);
  if (!says) {
    if (st != AG_ERR_UNSUPPORTED)
      fail_msg("%s %s %s on %s: supports() says no, launch gave %s", unary ? "unary" : "binary", name,
               ag_dtype_name(dt), ds->label, ag_status_name(st));
    assert_non_null(strstr(ag_last_error(), name));
    ag_error_clear();
    t->unsup++;
  } else {
    if (st != AG_OK)
      fail_msg("%s %s %s on %s: %s", unary ? "unary" : "binary", name, ag_dtype_name(dt), ds->label,
               ag_last_error());
    assert_int_equal(ag_to_host(o, ho, N * ag_dtype_size(odt)), AG_OK);
    const double tol = tolerance(odt);
    for (int i = 0; i < N; i++) {
      double x = get(dt, ha, i), y = get(dt, hb, i);
      double want = unary ? ag_ref_unary(sub, x, s0, s1) : ag_ref_binary(sub, x, y, s0, s1);
      /* integer results wrap, AFFINE included (store) */
      want = store(odt, want);
      double got = get(odt, ho, i);
      bool ok = isnan(want) ? isnan(got) : fabs(got - want) <= tol * (1 + fabs(want));
      if (!ok)
        fail_msg("%s %s %s on %s: element %d of (%.9g, %.9g) s=(%g, %g): got %.9g, want %.9g",
                 unary ? "unary" : "binary", name, ag_dtype_name(dt), ds->label, i, x, y, s0, s1, got, want);
    }
    t->pass++;
  }
  ag_tensor_release(a);
  ag_tensor_release(b);
  ag_tensor_release(o);
}

static void test_every_entry(void **state) {
  (void)state;
  ag_devstate *ds = ag__devstate(TEST_DEV);
  if (!ds) {
    fprintf(stderr, "skipped: %s\n", ag_last_error());
    exit(77);
  }
  tally t = {0, 0};
  for (size_t k = 0; k < sizeof DTS / sizeof DTS[0]; k++) {
    for (int u = 0; u < AG_UNARY_COUNT; u++) one(ds, AG_K_UNARY, u, DTS[k], &t);
    for (int b = 0; b < AG_BINARY_COUNT; b++) one(ds, AG_K_BINARY, b, DTS[k], &t);
  }
  printf("%s: %d (sub-op, dtype) pairs match the reference, %d refused as unsupported\n", ds->label, t.pass,
         t.unsup);
  /* floating dtypes are every backend's: at least f32 runs every entry */
  assert_true(t.pass >= AG_UNARY_COUNT + AG_BINARY_COUNT);
}

/* A sub-op outside the table is refused by the core, naming it. */
static void test_out_of_table(void **state) {
  (void)state;
  ag_devstate *ds = ag__devstate(TEST_DEV);
  if (!ds) skip();
  const int64_t shape[1] = {4};
  ag_tensor *a = ag_zeros(ds->dev, AG_F32, 1, shape), *o = ag_zeros(ds->dev, AG_F32, 1, shape);
  assert_non_null(a);
  assert_non_null(o);
  for (int u = 0; u < 2; u++) {
    ag_kernel_call c;
    memset(&c, 0, sizeof c);
    c.struct_size = (uint32_t)sizeof c;
    c.op = u ? AG_K_UNARY : AG_K_BINARY;
    c.sub = u ? AG_UNARY_COUNT : AG_BINARY_COUNT;
    c.n_operands = u ? 2 : 3;
    c.name = "optable_test";
    ag__operand(&c.o[0], o);
    ag__operand(&c.o[1], a);
    ag__operand(&c.o[2], a);
    assert_int_equal(ag__launch(ds, &c), AG_ERR_UNSUPPORTED);
    assert_non_null(strstr(ag_last_error(), "unknown sub-op"));
    ag_error_clear();
  }
  ag_tensor_release(a);
  ag_tensor_release(o);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_every_entry),
      cmocka_unit_test(test_out_of_table),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
