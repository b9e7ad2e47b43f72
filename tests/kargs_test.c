/* The typed kernel-op table (anygrad/kops.h, kargs.h): the table is
 * consistent (slots within the call's arrays, none used twice, names
 * unique), the decoders map named fields to the slots the table gives and
 * refuse calls that break it (checks on: AG_KCHECK), and the generated
 * dispatch and supports() data route and answer as their list says. */
#define AG_KCHECK 1
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "anygrad/anygrad.h"
#include "anygrad/backend.h"

/* ---- the table ---- */

typedef struct slots {
  unsigned o, s, i, m; /* bit masks of the slots used */
  int dup;             /* a slot listed twice */
  int range;           /* a slot past the call's arrays */
  int nv;              /* variants listed */
} slots;

#define T_MARK(mask, slot, lim) \
  do { \
    if ((slot) < 0 || (slot) >= (lim)) u.range++; \
    else if (u.mask & (1u << (slot))) u.dup++; \
    else u.mask |= 1u << (slot); \
  } while (0);
#define T_O(slot, nm, role, dt) T_MARK(o, slot, AG_KMAX_OPERANDS)
#define T_F(slot, nm) T_MARK(s, slot, 8)
#define T_I(slot, nm) T_MARK(i, slot, 4)
#define T_M(slot, nm) T_MARK(m, slot, 32)
#define T_V(NM) u.nv++;
#define T_OP(ID, nm, ...)                                                       \
  {                                                                             \
    slots u = {0, 0, 0, 0, 0, 0, 0};                                            \
    AGK_ARGS_##ID(T_O, T_F, T_I, T_F, T_V, T_M);                                \
    assert_int_equal(u.dup, 0);                                                 \
    assert_int_equal(u.range, 0);                                               \
    /* the M slots of a group are 0..n-1 */                                     \
    assert_true((u.m & (u.m + 1)) == 0);                                        \
    assert_string_equal(ag_kop_name(AG_K_##ID), #nm);                           \
    checked++;                                                                  \
  }

static void table_consistent(void **state) {
  (void)state;
  int checked = 0;
  AG_KOPS(T_OP)
  assert_int_equal(checked, AG_KOP_COUNT);
  for (int a = 0; a < AG_KOP_COUNT; a++)
    for (int b = a + 1; b < AG_KOP_COUNT; b++) assert_string_not_equal(ag_kop_name((ag_kop)a), ag_kop_name((ag_kop)b));
  assert_string_equal(ag_kop_name(AG_KOP_COUNT), "?");
  assert_null(ag_kop_info_of((ag_kop)-1));
  assert_true(ag_kop_info_of(AG_K_MATMUL)->deterministic);
  assert_int_equal(ag_kop_info_of(AG_K_MATMUL)->cost, AGK_COST_GEMM);
}

/* ---- decoding ---- */

static void operand(ag_koperand *o, void *base, ag_dtype dt) {
  memset(o, 0, sizeof *o);
  o->base = base;
  o->dtype = dt;
  o->ndim = 1;
  o->shape[0] = 4;
  o->strides[0] = 1;
}

static char mem[6];

static ag_kernel_call layernorm_call(ag_dtype x, ag_dtype stats) {
  ag_kernel_call c;
  memset(&c, 0, sizeof c);
  c.struct_size = (uint32_t)sizeof c;
  c.op = AG_K_LAYERNORM;
  c.n_operands = 6;
  c.name = "ag_layer_norm";
  operand(&c.o[0], &mem[0], x);
  operand(&c.o[1], &mem[1], x);
  operand(&c.o[2], NULL, x); /* no weight */
  operand(&c.o[3], &mem[3], x);
  operand(&c.o[4], &mem[4], stats);
  operand(&c.o[5], &mem[5], stats);
  c.i[0] = 3;
  c.i[1] = 4;
  c.s[0] = 1e-5;
  return c;
}

static void decode_named_fields(void **state) {
  (void)state;
  ag_kernel_call c = layernorm_call(AG_F16, AG_F32);
  ag_k_layernorm a;
  assert_int_equal(ag_k_layernorm_decode(&c, &a), AG_OK);
  assert_ptr_equal(a.y, &c.o[0]);
  assert_ptr_equal(a.x, &c.o[1]);
  assert_null(a.weight); /* absent OPT operand */
  assert_ptr_equal(a.bias, &c.o[3]);
  assert_ptr_equal(a.mean, &c.o[4]);
  assert_ptr_equal(a.rstd, &c.o[5]);
  assert_int_equal(a.n, 3);
  assert_int_equal(a.d, 4);
  assert_true(a.eps == 1e-5);
  assert_int_equal(a.dtype, AG_F16);
  assert_ptr_equal(a.call, &c);
  assert_int_equal(a.mgroup, 0);
  /* f64 data keeps f64 statistics */
  c = layernorm_call(AG_F64, AG_F64);
  assert_int_equal(ag_k_layernorm_decode(&c, &a), AG_OK);
  assert_int_equal(a.dtype, AG_F64);
}

static void decode_refuses(void **state) {
  (void)state;
  ag_k_layernorm a;
  /* statistics of the wrong dtype (ACC: f32 for f16 data) */
  ag_kernel_call c = layernorm_call(AG_F16, AG_F16);
  assert_int_equal(ag_k_layernorm_decode(&c, &a), AG_ERR_INVALID);
  assert_non_null(strstr(ag_last_error(), "layernorm"));
  assert_non_null(strstr(ag_last_error(), "mean"));
  /* a required operand missing */
  c = layernorm_call(AG_F32, AG_F32);
  c.n_operands = 1;
  assert_int_equal(ag_k_layernorm_decode(&c, &a), AG_ERR_INVALID);
  assert_non_null(strstr(ag_last_error(), "lacks operand x"));
  /* a call of another op */
  c = layernorm_call(AG_F32, AG_F32);
  c.op = AG_K_RMSNORM;
  assert_int_equal(ag_k_layernorm_decode(&c, &a), AG_ERR_INVALID);
  /* an op without variants runs sub 0 only */
  c = layernorm_call(AG_F32, AG_F32);
  c.sub = 1;
  assert_int_equal(ag_k_layernorm_decode(&c, &a), AG_ERR_INVALID);
  assert_non_null(strstr(ag_last_error(), "variant"));
}

static void decode_variants(void **state) {
  (void)state;
  ag_kernel_call c;
  memset(&c, 0, sizeof c);
  c.op = AG_K_SOFTMAX;
  c.n_operands = 2;
  operand(&c.o[0], &mem[0], AG_F32);
  operand(&c.o[1], &mem[1], AG_F32);
  ag_k_softmax a;
  c.sub = AG_KV_LOG_SOFTMAX;
  assert_int_equal(ag_k_softmax_decode(&c, &a), AG_OK);
  assert_int_equal(a.variant, AG_KV_LOG_SOFTMAX);
  c.sub = 2;
  assert_int_equal(ag_k_softmax_decode(&c, &a), AG_ERR_INVALID);
  /* i64 indices: the IDX rule takes i32 and i64, nothing else */
  memset(&c, 0, sizeof c);
  c.op = AG_K_EMBEDDING;
  c.n_operands = 3;
  operand(&c.o[0], &mem[0], AG_BF16);
  operand(&c.o[1], &mem[1], AG_BF16);
  operand(&c.o[2], &mem[2], AG_I64);
  ag_k_embedding e;
  assert_int_equal(ag_k_embedding_decode(&c, &e), AG_OK);
  assert_ptr_equal(e.indices, &c.o[2]);
  c.o[2].dtype = AG_F32;
  assert_int_equal(ag_k_embedding_decode(&c, &e), AG_ERR_INVALID);
}

static void decode_multi(void **state) {
  (void)state;
  static ag_kmulti m;
  memset(&m, 0, sizeof m);
  m.count = 8; /* two groups of param, grad, exp_avg, exp_avg_sq */
  for (int k = 0; k < 8; k++) m.t[k].numel = 100 + k;
  ag_kernel_call c;
  memset(&c, 0, sizeof c);
  c.op = AG_K_ADAMW;
  c.n_operands = 2;
  operand(&c.o[0], NULL, AG_F32);
  operand(&c.o[1], &mem[1], AG_F32);
  c.multi = &m;
  c.s[0] = 0.1;
  c.s[6] = 0.5;
  ag_k_adamw a;
  assert_int_equal(ag_k_adamw_decode(&c, &a), AG_OK);
  assert_null(a.inv_scale);
  assert_ptr_equal(a.found_inf, &c.o[1]);
  assert_true(a.lr == 0.1 && a.bias_correction2 == 0.5);
  assert_int_equal(a.mgroup, 4);
  assert_int_equal(AGK_MULTI_GROUPS(&a), 2);
  assert_int_equal(AGK_MULTI(&a, 0, param).numel, 100);
  assert_int_equal(AGK_MULTI(&a, 1, grad).numel, 105);
  assert_int_equal(AGK_MULTI(&a, 1, exp_avg_sq).numel, 107);
}

/* ---- the generators ---- */

typedef struct tctx {
  int ran;
} tctx;
#define AGK_IMPL(nm) t_k_##nm
#define AGK_CTX tctx *
static ag_status t_k_fill(tctx *t, const ag_k_fill *a) {
  t->ran = (int)a->value;
  return AG_OK;
}
static ag_status t_k_softmax(tctx *t, const ag_k_softmax *a) {
  t->ran = a->variant == AG_KV_LOG_SOFTMAX ? 20 : 10;
  return AG_OK;
}
#define T_KOPS(X)                                                       \
  X(FILL, fill, AGK_DTS_ALL, AGK_VNONE)                                 \
  X(SOFTMAX, softmax, AGK_DT(F32) | AGK_DT(F64), AGK_VBIT(AG_KV_SOFTMAX) | AGK_VBIT(AG_KV_LOG_SOFTMAX))
AGK_DEFINE_DISPATCH(t_dispatch, T_KOPS, "test")
AGK_DEFINE_SUPPORTS(t_supports, T_KOPS)

static void generated_dispatch(void **state) {
  (void)state;
  tctx t = {0};
  ag_kernel_call c;
  memset(&c, 0, sizeof c);
  c.op = AG_K_FILL;
  c.n_operands = 1;
  operand(&c.o[0], &mem[0], AG_I32);
  c.s[0] = 7;
  assert_int_equal(t_dispatch(&t, &c), AG_OK);
  assert_int_equal(t.ran, 7);
  c.op = AG_K_SOFTMAX;
  c.n_operands = 2;
  operand(&c.o[0], &mem[0], AG_F32);
  operand(&c.o[1], &mem[1], AG_F32);
  c.sub = AG_KV_LOG_SOFTMAX;
  assert_int_equal(t_dispatch(&t, &c), AG_OK);
  assert_int_equal(t.ran, 20);
  c.op = AG_K_TOPK; /* not in the list */
  c.name = "ag_topk";
  assert_int_equal(t_dispatch(&t, &c), AG_ERR_UNSUPPORTED);
  assert_non_null(strstr(ag_last_error(), "topk"));
  assert_non_null(strstr(ag_last_error(), "test"));

  assert_true(t_supports(AG_K_FILL, 0, AG_BOOL));
  assert_false(t_supports(AG_K_FILL, 1, AG_F32));
  assert_true(t_supports(AG_K_SOFTMAX, AG_KV_LOG_SOFTMAX, AG_F64));
  assert_false(t_supports(AG_K_SOFTMAX, AG_KV_LOG_SOFTMAX, AG_F16));
  assert_false(t_supports(AG_K_SOFTMAX, 2, AG_F32));
  assert_false(t_supports(AG_K_TOPK, 0, AG_F32));
  assert_false(t_supports(AG_K_FILL, 0, (ag_dtype)40));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(table_consistent), cmocka_unit_test(decode_named_fields), cmocka_unit_test(decode_refuses),
      cmocka_unit_test(decode_variants),  cmocka_unit_test(decode_multi),        cmocka_unit_test(generated_dispatch),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
