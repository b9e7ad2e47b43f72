/* Typed kernel-op arguments, generated from the kernel-op table (kops.h).
 *
 * For every op AGK(ID, name, ...) this header defines
 *   typedef struct ag_k_<name> { ... } ag_k_<name>;   its operands, scalars
 *   ag_status ag_k_<name>_decode(const ag_kernel_call *c, ag_k_<name> *a);
 * A backend implements an op as one C function taking `const ag_k_<name> *`
 * and reads a->x, a->eps, a->variant, never o[1] or s[0]: the positions
 * live in the table only. Operand fields point into the call (borrowed for
 * the launch); an OPT or SAVED operand that is absent (base NULL, or a slot
 * past n_operands) is a NULL pointer. Multi-tensor entries: AGK_MULTI.
 *
 * The decoder checks the op and that every required operand is present
 * (AG_ERR_INVALID naming the op and the operand); builds without NDEBUG (and
 * with AG_KCHECK) also check each operand's dtype against its rule (T, ACC,
 * IDX, ...) and the variant against the op's list. Decoding copies ~20 words:
 * it costs nothing next to a launch.
 *
 * The generators at the end give a backend its dispatch and supports() data
 * from one list of what it implements (AGK_DEFINE_DISPATCH,
 * AGK_DEFINE_SUPPORTS). Host code only (C and C++, CUDA and HIP host and
 * gpuemu sources); included by backend.h. */
#ifndef ANYGRAD_KARGS_H
#define ANYGRAD_KARGS_H

#ifndef ANYGRAD_BACKEND_H
#error "include anygrad/backend.h, which includes this header"
#endif

/* ---- operand roles and dtype rules (the words of kops.h) ---- */
enum { AGK_R_IN, AGK_R_OPT, AGK_R_OUT, AGK_R_INOUT, AGK_R_SAVED };
enum { AGK_D_T, AGK_D_ACC, AGK_D_IDX, AGK_D_I32, AGK_D_I64, AGK_D_F32, AGK_D_ANY };

/* ---- the argument structs ---- */
#define AGK__SO(slot, nm, role, dt) const ag_koperand *nm;
#define AGK__SF(slot, nm) double nm;
#define AGK__SI(slot, nm) int64_t nm;
#define AGK__SM(slot, nm) int m_##nm;
#define AGK__STRUCT(ID, nm, ...)                                                                    \
  typedef struct ag_k_##nm {                                                                       \
    const ag_kernel_call *call; /* seed, offset, name, flags, workspace */                         \
    ag_dtype dtype;             /* T: the dtype supports() was asked for */                        \
    int variant;                /* AG_KV_* (VAR ops) or the sub-op code */                         \
    const ag_kmulti *multi;     /* NULL when the call has none */                                  \
    int mgroup;                 /* entries per group of multi (0: the op has none) */              \
    AGK_ARGS_##ID(AGK__SO, AGK__SF, AGK__SI, AGK__SI, AGK__NO, AGK__SM)                            \
  } ag_k_##nm;
AG_KOPS(AGK__STRUCT)

/* Tensor `nm` of group k of a's multi list (an ag_kmulti_entry):
 * AGK_MULTI(a, k, param).base. Groups: AGK_MULTI_GROUPS(a). */
#define AGK_MULTI(a, k, nm) ((a)->multi->t[(int64_t)(k) * (a)->mgroup + (a)->m_##nm])
#define AGK_MULTI_GROUPS(a) ((a)->multi && (a)->mgroup ? (a)->multi->count / (a)->mgroup : 0)

/* ---- decoding ---- */
#if !defined(NDEBUG) || defined(AG_KCHECK)
#define AGK_CHECKED 1
#else
#define AGK_CHECKED 0
#endif

static inline ag_status ag_k__fail(const ag_kernel_call *c, const char *op, const char *what, const char *nm) {
  return ag_error_set(AG_ERR_INVALID, "%s: kernel op %s: %s %s", c->name ? c->name : "launch", op, what, nm);
}

/* Operand `slot` of c for role `role`: NULL when absent (and an error in
 * *st when the role requires it). */
static inline const ag_koperand *ag_k__operand(const ag_kernel_call *c, int slot, int role, const char *op,
                                               const char *nm, ag_status *st) {
  const bool here = slot < c->n_operands;
  if (role == AGK_R_OPT || role == AGK_R_SAVED) return here && c->o[slot].base ? &c->o[slot] : NULL;
  if (!here && *st == AG_OK) *st = ag_k__fail(c, op, "lacks operand", nm);
  return here ? &c->o[slot] : NULL;
}

static inline bool ag_k__dtype_ok(ag_dtype dt, int rule, ag_dtype t) {
  switch (rule) {
    case AGK_D_T: return dt == t;
    case AGK_D_ACC: return dt == (t == AG_F64 ? AG_F64 : AG_F32);
    case AGK_D_IDX: return dt == AG_I32 || dt == AG_I64;
    case AGK_D_I32: return dt == AG_I32;
    case AGK_D_I64: return dt == AG_I64;
    case AGK_D_F32: return dt == AG_F32;
    default: return true;
  }
}

#define AGK__DO(slot, nm, role, dt) a->nm = ag_k__operand(c, slot, AGK_R_##role, op_, #nm, &st_);
#define AGK__DT(slot, nm, role, dt) \
  if (AGK_D_##dt == AGK_D_T && a->nm && !t_seen_) a->dtype = a->nm->dtype, t_seen_ = true;
#define AGK__DC(slot, nm, role, dt) \
  if (st_ == AG_OK && a->nm && !ag_k__dtype_ok(a->nm->dtype, AGK_D_##dt, a->dtype)) st_ = ag_k__fail(c, op_, "dtype rule broken by", #nm);
#define AGK__DF(slot, nm) a->nm = c->s[slot];
#define AGK__DN(slot, nm) a->nm = (int64_t)c->s[slot];
#define AGK__DI(slot, nm) a->nm = c->i[slot];
#define AGK__DM(slot, nm) a->m_##nm = slot, a->mgroup++;
/* An op without V entries runs sub 0 only. */
#define AGK__VCHECK_VAR 1
#define AGK__VCHECK_UNARY 0
#define AGK__VCHECK_BINARY 0
#define AGK__VCHECK_REDUCE 0
#define AGK__VCHECK_POOL 0
#define AGK__V1(NM) +1
#define AGK__DV(NM) || c->sub == AG_KV_##NM
#define AGK__DECODE(ID, nm, kind, ...)                                                               \
  static inline ag_status ag_k_##nm##_decode(const ag_kernel_call *c, ag_k_##nm *a) {             \
    static const char op_[] = #nm;                                                                 \
    ag_status st_ = AG_OK;                                                                         \
    bool t_seen_ = false;                                                                          \
    (void)t_seen_;                                                                                 \
    a->call = c;                                                                                   \
    a->dtype = AG_F32;                                                                             \
    a->variant = c->sub;                                                                           \
    a->multi = c->multi;                                                                           \
    a->mgroup = 0;                                                                                 \
    if (c->op != AG_K_##ID) return ag_k__fail(c, op_, "decoded from a call of another op:", "");  \
    AGK_ARGS_##ID(AGK__DO, AGK__DF, AGK__DI, AGK__DN, AGK__NO, AGK__DM)                            \
    AGK_ARGS_##ID(AGK__DT, AGK__NO, AGK__NO, AGK__NO, AGK__NO, AGK__NO)                            \
    if (AGK_CHECKED) {                                                                             \
      AGK_ARGS_##ID(AGK__DC, AGK__NO, AGK__NO, AGK__NO, AGK__NO, AGK__NO)                          \
      if (st_ == AG_OK && AGK__VCHECK_##kind &&                                                  \
          !((0 AGK_ARGS_##ID(AGK__NO, AGK__NO, AGK__NO, AGK__NO, AGK__V1, AGK__NO)) == 0 ? c->sub == 0 \
            : (0 AGK_ARGS_##ID(AGK__NO, AGK__NO, AGK__NO, AGK__NO, AGK__DV, AGK__NO))))               \
        st_ = ag_k__fail(c, op_, "has no such variant:", "sub");                                    \
    }                                                                                              \
    return st_;                                                                                    \
  }
AG_KOPS(AGK__DECODE)

/* ---- what the table says of an op ---- */
typedef enum ag_kcost { AGK_COST_ELEM, AGK_COST_ROW, AGK_COST_GEMM, AGK_COST_CONV, AGK_COST_ATTN,
                        AGK_COST_MULTI, AGK_COST_RAND } ag_kcost;
typedef struct ag_kop_info {
  const char *name;    /* "layernorm" */
  bool deterministic;  /* a fixed order on every backend */
  ag_kcost cost;
} ag_kop_info;
#define AGK__DET_DET true
#define AGK__DET_NONDET false
#define AGK__INFO(ID, nm, sub, det, cost) {#nm, AGK__DET_##det, AGK_COST_##cost},
/* The info of op (NULL past the table: a code from a newer core). */
static inline const ag_kop_info *ag_kop_info_of(ag_kop op) {
  static const ag_kop_info info[AG_KOP_COUNT] = {AG_KOPS(AGK__INFO)};
  return (unsigned)op < (unsigned)AG_KOP_COUNT ? &info[op] : NULL;
}
/* The op's name ("layernorm"), "?" for a code past the table. */
static inline const char *ag_kop_name(ag_kop op) {
  const ag_kop_info *i = ag_kop_info_of(op);
  return i ? i->name : "?";
}

/* ---- a backend's dispatch and supports() data ----
 * A backend lists the ops it implements, each with the dtypes and variants
 * it runs (dtype masks AGK_DT(F32) | ..., variant masks AGK_VBIT(AG_KV_x),
 * AGK_VNONE for an op without variants, AGK_VANY where sub is a sub-op code
 * the backend checks itself):
 *   #define CPU_KOPS(X) X(FILL, fill, AGK_DTS_ALL, AGK_VNONE) ...
 * and, with AGK_IMPL(name) naming its function for an op and AGK_CTX the
 * type of its first argument defined first,
 *   #define AGK_IMPL(name) cpu_k_##name
 *   #define AGK_CTX cpu_launch_ctx *
 *   AGK_DEFINE_DISPATCH(cpu_dispatch, CPU_KOPS)   // ag_status cpu_dispatch(AGK_CTX, const ag_kernel_call *)
 *   AGK_DEFINE_SUPPORTS(cpu_supports_data, CPU_KOPS) // bool (ag_kop, int sub, ag_dtype)
 * The functions are `ag_status AGK_IMPL(name)(AGK_CTX ctx, const ag_k_<name> *a)`.
 * An op not listed is unsupported (AG_ERR_UNSUPPORTED from the dispatch). */
#define AGK_DT(x) (1u << AG_##x)
#define AGK_DTS_FLOAT (AGK_DT(F32) | AGK_DT(F16) | AGK_DT(BF16))
#define AGK_DTS_FLOAT64 (AGK_DTS_FLOAT | AGK_DT(F64))
#define AGK_DTS_INT (AGK_DT(I32) | AGK_DT(I64) | AGK_DT(BOOL) | AGK_DT(U8))
#define AGK_DTS_ALL (AGK_DTS_FLOAT64 | AGK_DTS_INT)
#define AGK_VBIT(v) (1u << (v))
#define AGK_VNONE AGK_VBIT(0)
#define AGK_VANY 0xffffffffu

static inline bool ag_k__variant_ok(uint32_t vs, int sub) {
  return vs == AGK_VANY || (sub >= 0 && sub < 32 && ((vs >> sub) & 1u));
}
static inline ag_status ag_k__unsupported(const ag_kernel_call *c, const char *backend) {
  return ag_error_set(AG_ERR_UNSUPPORTED, "%s: %s does not implement kernel op %s (sub %d)", c->name ? c->name : "launch",
                      backend, ag_kop_name(c->op), c->sub);
}
#define AGK__DCASE(ID, nm, dts, vs)                                                                  \
  case AG_K_##ID: {                                                                                \
    ag_k_##nm a_;                                                                                  \
    ag_status st_ = ag_k_##nm##_decode(c, &a_);                                                    \
    return st_ != AG_OK ? st_ : AGK_IMPL(nm)(ctx, &a_);                                            \
  }
#define AGK_DEFINE_DISPATCH(fn, LIST, backend)                                                      \
  static ag_status fn(AGK_CTX ctx, const ag_kernel_call *c) {                                      \
    switch (c->op) {                                                                               \
      LIST(AGK__DCASE)                                                                             \
      default: break;                                                                              \
    }                                                                                              \
    return ag_k__unsupported(c, backend);                                                          \
  }
/* The same with portable numerics: PLIST lists the ops (dtypes, variants)
 * the backend computes as docs/numerics.md fixes them; a call with
 * AG_KF_PORTABLE of an op, variant or dtype (the decoded one) outside it is
 * refused by the dispatch. The op's function runs its portable path when
 * a->call->flags has AG_KF_PORTABLE (ops exact by nature need none). Also
 * defines `bool fn##_portable(ag_kop, int sub, ag_dtype)` from PLIST (the
 * data of supports_portable). */
static inline ag_status ag_k__not_portable(const ag_kernel_call *c, const char *backend, ag_dtype dt) {
  return ag_error_set(AG_ERR_UNSUPPORTED,
                      "%s: %s has no portable-numerics kernel for %s (sub %d) on %s: refused rather than "
                      "run with the default numerics (docs/numerics.md)",
                      c->name ? c->name : "launch", backend, ag_kop_name(c->op), c->sub, ag_dtype_name(dt));
}
#define AGK__PDCASE(ID, nm, dts, vs)                                                                 \
  case AG_K_##ID: {                                                                                \
    ag_k_##nm a_;                                                                                  \
    ag_status st_ = ag_k_##nm##_decode(c, &a_);                                                    \
    if (st_ != AG_OK) return st_;                                                                  \
    if ((c->flags & AG_KF_PORTABLE) && !pfn(c->op, c->sub, a_.dtype))                              \
      return ag_k__not_portable(c, pbackend, a_.dtype);                                            \
    return AGK_IMPL(nm)(ctx, &a_);                                                                 \
  }
#define AGK_DEFINE_DISPATCH_PORTABLE(fn, LIST, PLIST, backend)                                      \
  AGK_DEFINE_SUPPORTS(fn##_portable, PLIST)                                                        \
  static ag_status fn(AGK_CTX ctx, const ag_kernel_call *c) {                                      \
    bool (*const pfn)(ag_kop, int, ag_dtype) = fn##_portable;                                      \
    const char *const pbackend = backend; /* the cases are expanded after the parameters */         \
    switch (c->op) {                                                                               \
      LIST(AGK__PDCASE)                                                                            \
      default: break;                                                                              \
    }                                                                                              \
    return ag_k__unsupported(c, backend);                                                          \
  }
#define AGK__SCASE(ID, nm, dts, vs) \
  case AG_K_##ID: return (((uint32_t)(dts) >> (unsigned)dt) & 1u) && ag_k__variant_ok((uint32_t)(vs), sub);
#define AGK_DEFINE_SUPPORTS(fn, LIST)                                                               \
  static bool fn(ag_kop op, int sub, ag_dtype dt) {                                                \
    if ((unsigned)dt >= 32u) return false;                                                         \
    switch (op) {                                                                                  \
      LIST(AGK__SCASE)                                                                             \
      default: return false;                                                                       \
    }                                                                                              \
  }

#endif
