/* Conformance cases of the elementwise ops: the generated unary and binary
 * table rows, the scalar forms, pow exponents, where and masked_fill, each
 * against a double-precision host reference. */
#include "conformance_internal.h"

/* ---- elementwise ---- */

/* The generator kind of a table domain. */
static int gkind(ag_ref_kind k) {
  switch (k) {
    case AG_REF_AWAY: return G_AWAY;
    case AG_REF_FRAC: return G_FRAC;
    case AG_REF_NZINT: return G_NZINT;
    case AG_REF_UNI: break;
  }
  return G_UNI;
}

/* The public function of a table op (the rows below exist for entries with
 * a generated wrapper only). */
#define CONF_BCALL_B(name) return ag_##name(a, b);
#define CONF_BCALL_BH(name) return NULL;
#define CONF_BCALL(ID, name, api, ...) \
  case AG_B_##ID: CONF_BCALL_##api(name)
ag_tensor *ag__conf_call_binary(int op, ag_tensor *a, ag_tensor *b) {
  switch (op) {
    AG_BINARY_OPS(CONF_BCALL)
  }
  return NULL;
}
#define CONF_UCALL_A0(name) return ag_##name(a);
#define CONF_UCALL_A1(name) return ag_##name(a, s0);
#define CONF_UCALL_A2(name) return ag_##name(a, s0, s1);
#define CONF_UCALL_AH(name) return NULL;
#define CONF_UCALL(ID, name, api, ...) \
  case AG_U_##ID: CONF_UCALL_##api(name)
ag_tensor *ag__conf_call_table_unary(int op, ag_tensor *a, double s0, double s1) {
  switch (op) {
    AG_UNARY_OPS(CONF_UCALL)
  }
  return NULL;
}


static const bcase BCASES[] = {
    {"contiguous [37]", 1, {37}, L_C, 1, {37}, L_C},
    {"broadcast [4,1,6] [5,1]", 3, {4, 1, 6}, L_C, 2, {5, 1}, L_C},
    {"transposed x stepped [6,5]", 2, {6, 5}, L_T, 2, {6, 5}, L_S},
    {"expanded [7,9] x [9]", 2, {7, 9}, L_E, 1, {9}, L_C},
    {"scalar [] x [3,4]", 0, {0}, L_C, 2, {3, 4}, L_C},
    {"large [129,257] x stepped", 2, {129, 257}, L_C, 2, {129, 257}, L_S},
    {"empty [0,4] x [4]", 2, {0, 4}, L_C, 1, {4}, L_C},
};

/* A binary table op (c->arg) on every layout case, against op_ref.h. */
void ag__conf_op_table_binary(ctx *c) {
  const int op = c->arg;
  const ag_binary_info *bi = ag_binary_info_of(op);
  char fname[48];
  snprintf(fname, sizeof fname, "ag_%s", bi->name);
  /* comparisons give bool; they and maximum/minimum are exact */
  bool cmp = bi->compare || op == AG_B_MAX || op == AG_B_MIN;
  const ag_dtype odt = bi->compare ? AG_BOOL : c->dt;
  const bool integer = ag_dtype_is_int(c->dt);
  const ag_ref_dom da = ag_ref_binary_dom(op, 0), db = ag_ref_binary_dom(op, 1);
  for (size_t k = 0; k < sizeof BCASES / sizeof BCASES[0]; k++) {
    const bcase *bc = &BCASES[k];
    ag__conf_case_begin(c, bc->name);
    hbuf *ha, *hb;
    double lo = c->dt == AG_I32 ? -1000 : -2, hi = -lo;
    ag__conf_int_range(c->dt, &lo, &hi);
    int ka = cmp ? G_SMALLINT : integer ? G_UNI : gkind(da.kind), kb = cmp ? G_SMALLINT : integer ? G_UNI : gkind(db.kind);
    ag_tensor *a = ag__conf_mk(c, &ha, bc->la, bc->na, bc->sa, ka, integer ? lo : da.lo, integer ? hi : da.hi);
    ag_tensor *b = ag__conf_mk(c, &hb, bc->lb, bc->nb, bc->sb, kb, integer ? lo : db.lo, integer ? hi : db.hi);
    if (a && b) {
      int64_t os[AG_MAX_DIMS], idx[AG_MAX_DIMS];
      int on = ag__conf_bshape(ha->ndim, ha->shape, hb->ndim, hb->shape, os);
      int64_t n = ag__conf_prod(on, os);
      guard g;
      ag__conf_guard_begin(c, &g, odt, n);
      ag_tensor *o = ag__conf_call_binary(op, a, b);
      if (!o) ag__conf_on_null(c, fname);
      else {
        double *ref = ag__conf_cx_alloc(c, (size_t)n * sizeof(double));
        for (int64_t i = 0; ref && i < n; i++) {
          ag__conf_unravel(i, on, os, idx);
          ref[i] = ag__conf_wrap_int(odt, ag_ref_binary(op, ha->v[ag__conf_bidx(ha, on, idx)], hb->v[ag__conf_bidx(hb, on, idx)], 1, 0));
        }
        if (ref) ag__conf_check(c, o, on, os, odt, ref, cmp ? EXACT : DEF);
        ag__conf_guard_end(c, &g);
      }
    }
    ag__conf_case_end(c);
  }
  if ((op == AG_B_REMAINDER || op == AG_B_FMOD) && c->acc && ag_dtype_is_float(c->dt)) {
    /* quotients past 2^24 and 2^53 (the result is exact: a - trunc(a/b)*b
     * gave 0 for fmod(2^30, 3)), both signs, the largest values, zeros,
     * infinities and NaN; each rounded to the dtype */
    ag__conf_case_begin(c, "adversarial");
    c->adv = true;
    static const double av[] = {0x1p30, -0x1p30, 0x1p30, -0x1p30, 0x1p25 + 1, 0x1p60, -0x1p60, 0x1p100, 3e38, -1e30,
                                1e300, -1e300, 5.5, -5.5, 0.0, -0.0, INFINITY, 3, -3, NAN, 3, 1e-30, -1e-30};
    static const double bv[] = {3, 3, -3, -3, 3, 3, 3, -3, 7, 3.3, 7, 0.3, 2, -2, 3, 3, 3, INFINITY, INFINITY, 3,
                                0.0, 3, 3};
    int64_t s[1] = {(int64_t)(sizeof av / sizeof av[0])};
    hbuf *ha, *hb;
    ag_tensor *a = ag__conf_mk_vals(c, c->dt, &ha, 1, s, av), *b = ag__conf_mk_vals(c, c->dt, &hb, 1, s, bv);
    if (a && b) {
      ag_tensor *o = ag__conf_call_binary(op, a, b);
      double ref[sizeof av / sizeof av[0]];
      for (int64_t i = 0; i < s[0]; i++) ref[i] = ag_conf_round(c->dt, ag_ref_binary(op, ha->v[i], hb->v[i], 1, 0));
      if (!o) ag__conf_on_null(c, fname);
      else ag__conf_check(c, o, 1, s, c->dt, ref, DEF);
    }
    ag__conf_case_end(c);
  }
  if (op == AG_B_DIV && !ag_dtype_is_int(c->dt)) {
    ag__conf_case_begin(c, "special x/0 and 0/0");
    static const double av[4] = {1, -1, 0, 2}, bv[4] = {0, 0, 0, 4};
    int64_t s[1] = {4};
    hbuf *ha, *hb;
    ag_tensor *a = ag__conf_mk_vals(c, c->dt, &ha, 1, s, av), *b = ag__conf_mk_vals(c, c->dt, &hb, 1, s, bv);
    if (a && b) {
      ag_tensor *o = ag__conf_call_binary(op, a, b);
      double ref[4] = {INFINITY, -INFINITY, NAN, 0.5};
      if (!o) ag__conf_on_null(c, fname);
      else ag__conf_check(c, o, 1, s, c->dt, ref, DEF);
    }
    ag__conf_case_end(c);
  }
}

/* The scalar forms of the affine op (the table's AFFINE has no wrapper of
 * its own). */
enum { U_ADDS, U_SUBS, U_RSUBS, U_MULS, U_DIVS };

static double ref_scalar(int op, double x, double s) {
  switch (op) {
    case U_ADDS: return x + s;
    case U_SUBS: return x - s;
    case U_RSUBS: return s - x;
    case U_MULS: return x * s;
    default: return x / s;
  }
}

static ag_tensor *call_scalar(int op, ag_tensor *a, double s) {
  switch (op) {
    case U_ADDS: return ag_add_scalar(a, s);
    case U_SUBS: return ag_sub_scalar(a, s);
    case U_RSUBS: return ag_rsub_scalar(a, s);
    case U_MULS: return ag_mul_scalar(a, s);
    default: return ag_div_scalar(a, s);
  }
}

typedef struct ucase {
  const char *name;
  int n;
  int64_t s[3];
  int l;
} ucase;

static const ucase UCASES[] = {
    {"contiguous [37]", 1, {37}, L_C},        {"transposed [33,17]", 2, {33, 17}, L_T},
    {"stepped [8,9]", 2, {8, 9}, L_S},        {"expanded [5,6]", 2, {5, 6}, L_E},
    {"scalar []", 0, {0}, L_C},               {"large [300,111]", 2, {300, 111}, L_C},
    {"empty [0]", 1, {0}, L_C},
};

/* The adversarial inputs of an elementwise op in dtype dt (rounded to dt
 * when uploaded): signed zeros, infinities, NaN, subnormals, the largest
 * values, points where a function is ill-conditioned or an implementation
 * cancels (near 1 for log, near -1 for log1p, multiples of pi and large
 * arguments for sin/cos, tiny arguments for expm1/log1p/tanh/erf), the
 * overflow thresholds of exp and the saturation of tanh and sigmoid, the
 * edges of expm1 and log1p (85 and 88 below expm1's overflow, 3e38, 1e-6,
 * -5e-8) and +-1000 (gelu and mish backward). Shared with the gradient
 * rows (conformance_grad.c). */
int ag__conf_adv_values(ag_dtype dt, double *v) {
  const double tiny = dt == AG_F16 ? 0x1p-24 : dt == AG_BF16 ? 0x1p-133 : dt == AG_F32 ? 0x1p-149 : 0x1p-1074;
  const double minn = dt == AG_F16 ? 0x1p-14 : dt == AG_F64 ? 0x1p-1022 : 0x1p-126;
  const double maxv = dt == AG_F16 ? 65504 : dt == AG_BF16 ? 0x1.fep127 : dt == AG_F32 ? 0x1.fffffep127 : 0x1.fffffffffffffp1023;
  const double eps = dt == AG_F16 ? 0x1p-10 : dt == AG_BF16 ? 0x1p-7 : dt == AG_F32 ? 0x1p-23 : 0x1p-52;
  const double list[] = {0, -0.0, INFINITY, -INFINITY, NAN, tiny, -tiny, 16 * tiny, minn / 2, -minn / 2, minn, -minn,
                         maxv, -maxv, maxv / 3, 1e4, -1e4, 1e6, -1e6, 1e10, 1 + eps, 1 - eps / 2, 1 + 4 * eps,
                         -1 + eps / 2, 1e-3, -1e-3, 1e-5, 1e-8, -1e-8, CREF_PI, 2 * CREF_PI, CREF_PI / 2,
                         100 * CREF_PI, 1e4 * CREF_PI, 88.72, 709.78, 11.09, -87.3, -103.5, 0.5, -0.5, 3, -3,
                         10, -10, 20, -20, 1000, -1000, 85, 88, 3e38, 1e-6, -5e-8};
  int n = (int)(sizeof list / sizeof list[0]);
  for (int i = 0; i < n; i++) v[i] = list[i];
  return n;
}

/* A unary op on every layout case: table op top (>= 0; scalars s0, s1)
 * against op_ref.h, or the scalar form sop of affine (scalar s0). */
static void run_unary(ctx *c, int top, int sop, const char *fname, double s0, double s1) {
  ag_ref_dom dom = top >= 0 ? ag_ref_unary_dom(top, 0) : (ag_ref_dom){AG_REF_UNI, -3, 3};
  double lo = dom.lo, hi = dom.hi;
  int kind = gkind(dom.kind);
  if (ag_dtype_is_int(c->dt)) kind = G_UNI, lo = c->dt == AG_I32 ? -1000 : -3, hi = -lo;
  ag__conf_int_range(c->dt, &lo, &hi);
  bool exact = top == AG_U_NEG || top == AG_U_ABS || top == AG_U_RELU;
  for (size_t k = 0; k < sizeof UCASES / sizeof UCASES[0]; k++) {
    const ucase *u = &UCASES[k];
    ag__conf_case_begin(c, u->name);
    hbuf *h;
    ag_tensor *a = ag__conf_mk(c, &h, u->l, u->n, u->s, kind, lo, hi);
    if (a) {
      guard g;
      ag__conf_guard_begin(c, &g, c->dt, h->n);
      ag_tensor *o = top >= 0 ? ag__conf_call_table_unary(top, a, s0, s1) : call_scalar(sop, a, s0);
      if (!o) ag__conf_on_null(c, fname);
      else {
        double *ref = ag__conf_cx_alloc(c, (size_t)h->n * sizeof(double));
        for (int64_t i = 0; ref && i < h->n; i++)
          ref[i] = ag__conf_wrap_int(c->dt, top >= 0 ? ag_ref_unary(top, h->v[i], s0, s1) : ref_scalar(sop, h->v[i], s0));
        c->din = h;
        snprintf(c->dinfo, sizeof c->dinfo, "\"s0\": %.17g, \"s1\": %.17g", s0, s1);
        if (ref) ag__conf_check(c, o, h->ndim, h->shape, c->dt, ref, exact ? EXACT : DEF);
        ag__conf_guard_end(c, &g);
      }
    }
    ag__conf_case_end(c);
  }
  if (!ag_dtype_is_int(c->dt) && (top == AG_U_EXP || top == AG_U_LOG || top == AG_U_SQRT || top == AG_U_RSQRT)) {
    ag__conf_case_begin(c, "special values");
    static const double v[6] = {0, 100, -100, 1, -1, 4};
    int64_t sh[1] = {6};
    hbuf *h;
    ag_tensor *a = ag__conf_mk_vals(c, c->dt, &h, 1, sh, v);
    if (a) {
      ag_tensor *o = ag__conf_call_table_unary(top, a, s0, s1);
      double ref[6];
      for (int i = 0; i < 6; i++) ref[i] = ag_ref_unary(top, h->v[i], s0, s1);
      if (!o) ag__conf_on_null(c, fname);
      else ag__conf_check(c, o, 1, sh, c->dt, ref, DEF);
    }
    ag__conf_case_end(c);
  }
  if (c->acc && ag_dtype_is_float(c->dt)) {
    ag__conf_case_begin(c, "adversarial");
    c->adv = true;
    double v[ADV_MAX];
    int64_t sh[1] = {ag__conf_adv_values(c->dt, v)};
    hbuf *h;
    ag_tensor *a = ag__conf_mk_vals(c, c->dt, &h, 1, sh, v);
    if (a) {
      ag_tensor *o = top >= 0 ? ag__conf_call_table_unary(top, a, s0, s1) : call_scalar(sop, a, s0);
      double ref[ADV_MAX];
      for (int i = 0; i < sh[0]; i++)
        ref[i] = top >= 0 ? ag_ref_unary(top, h->v[i], s0, s1) : ref_scalar(sop, h->v[i], s0);
      c->din = h;
      snprintf(c->dinfo, sizeof c->dinfo, "\"s0\": %.17g, \"s1\": %.17g", s0, s1);
      if (!o) ag__conf_on_null(c, fname);
      else ag__conf_check(c, o, 1, sh, c->dt, ref, DEF);
    }
    ag__conf_case_end(c);
  }
}

/* A unary table op (c->arg) with the table's test scalars. */
void ag__conf_op_table_unary(ctx *c) {
  double s0, s1;
  ag_ref_unary_scalars(c->arg, &s0, &s1);
  char fname[48];
  snprintf(fname, sizeof fname, "ag_%s", ag_unary_info_of(c->arg)->name);
  run_unary(c, c->arg, -1, fname, s0, s1);
}
void ag__conf_op_add_scalar(ctx *c) { run_unary(c, -1, U_ADDS, "ag_add_scalar", 1.5, 0); }
void ag__conf_op_sub_scalar(ctx *c) { run_unary(c, -1, U_SUBS, "ag_sub_scalar", 0.75, 0); }
void ag__conf_op_rsub_scalar(ctx *c) { run_unary(c, -1, U_RSUBS, "ag_rsub_scalar", 2.0, 0); }
void ag__conf_op_mul_scalar(ctx *c) { run_unary(c, -1, U_MULS, "ag_mul_scalar", -1.25, 0); }
void ag__conf_op_div_scalar(ctx *c) { run_unary(c, -1, U_DIVS, "ag_div_scalar", 3.0, 0); }
/* exponents beside the table's: 2 (the CPU's squaring path), 0.5, -1.5 */
void ag__conf_op_pow_exponents(ctx *c) {
  run_unary(c, AG_U_POW, -1, "ag_pow_scalar", 2.0, 0);
  run_unary(c, AG_U_POW, -1, "ag_pow_scalar", 0.5, 0);
  run_unary(c, AG_U_POW, -1, "ag_pow_scalar", -1.5, 0);
}

void ag__conf_op_where(ctx *c) {
  static const struct {
    const char *name;
    int nc, na, nb;
    int64_t sc[3], sa[3], sb[3];
    int lc, la, lb;
    bool cond_i32;
  } W[] = {
      {"broadcast [4,1] [1,5] [4,5]", 2, 2, 2, {4, 1}, {1, 5}, {4, 5}, L_C, L_C, L_C, false},
      {"stepped/transposed [6,7]", 2, 2, 2, {6, 7}, {6, 7}, {6, 7}, L_S, L_T, L_E, false},
      {"i32 condition [3,4]", 2, 2, 1, {3, 4}, {3, 4}, {4}, L_C, L_S, L_C, true},
      {"bool condition [5,3] transposed", 2, 2, 2, {5, 3}, {5, 3}, {1, 3}, L_T, L_C, L_C, false},
  };
  for (size_t k = 0; k < sizeof W / sizeof W[0]; k++) {
    ag__conf_case_begin(c, W[k].name);
    hbuf *hc, *ha, *hb;
    ag_dtype cdt = W[k].cond_i32 ? AG_I32 : k == 3 ? AG_BOOL : c->dt;
    double lo = -5, hi = 5;
    ag__conf_int_range(c->dt, &lo, &hi);
    ag_tensor *tc = ag__conf_mk_dt(c, cdt, &hc, W[k].lc, W[k].nc, W[k].sc, G_BOOL, 0, 1);
    ag_tensor *ta = ag__conf_mk(c, &ha, W[k].la, W[k].na, W[k].sa, G_UNI, lo, hi);
    ag_tensor *tb = ag__conf_mk(c, &hb, W[k].lb, W[k].nb, W[k].sb, G_UNI, lo, hi);
    if (tc && ta && tb) {
      int64_t s1[AG_MAX_DIMS], os[AG_MAX_DIMS], idx[AG_MAX_DIMS];
      int n1 = ag__conf_bshape(hc->ndim, hc->shape, ha->ndim, ha->shape, s1);
      int on = ag__conf_bshape(n1, s1, hb->ndim, hb->shape, os);
      int64_t n = ag__conf_prod(on, os);
      ag_tensor *o = ag_where(tc, ta, tb);
      if (!o) ag__conf_on_null(c, "ag_where");
      else {
        double *ref = ag__conf_cx_alloc(c, (size_t)n * sizeof(double));
        for (int64_t i = 0; ref && i < n; i++) {
          ag__conf_unravel(i, on, os, idx);
          ref[i] = hc->v[ag__conf_bidx(hc, on, idx)] != 0 ? ha->v[ag__conf_bidx(ha, on, idx)] : hb->v[ag__conf_bidx(hb, on, idx)];
        }
        if (ref) ag__conf_check(c, o, on, os, c->dt, ref, EXACT);
      }
    }
    ag__conf_case_end(c);
  }
}

void ag__conf_op_masked_fill(ctx *c) {
  static const struct {
    const char *name;
    int na, nm;
    int64_t sa[3], sm[3];
    int la;
    bool m_i32;
  } M[] = {
      {"broadcast mask [5]", 2, 1, {4, 5}, {5}, L_C, false},
      {"i32 mask [4,1], transposed", 2, 2, {4, 5}, {4, 1}, L_T, true},
      {"bool mask [4,5]", 2, 2, {4, 5}, {4, 5}, L_S, false},
  };
  double value = ag_dtype_is_int(c->dt) ? 7 : 0.1, lo = -5, hi = 5;
  ag__conf_int_range(c->dt, &lo, &hi);
  for (size_t k = 0; k < sizeof M / sizeof M[0]; k++) {
    ag__conf_case_begin(c, M[k].name);
    hbuf *ha, *hm;
    ag_tensor *a = ag__conf_mk(c, &ha, M[k].la, M[k].na, M[k].sa, G_UNI, lo, hi);
    ag_tensor *m = ag__conf_mk_dt(c, M[k].m_i32 ? AG_I32 : k == 2 ? AG_BOOL : c->dt, &hm, L_C, M[k].nm, M[k].sm, G_BOOL, 0, 1);
    if (a && m) {
      int64_t idx[AG_MAX_DIMS];
      ag_tensor *o = ag_masked_fill(a, m, value);
      if (!o) ag__conf_on_null(c, "ag_masked_fill");
      else {
        double *ref = ag__conf_cx_alloc(c, (size_t)ha->n * sizeof(double));
        for (int64_t i = 0; ref && i < ha->n; i++) {
          ag__conf_unravel(i, ha->ndim, ha->shape, idx);
          ref[i] = hm->v[ag__conf_bidx(hm, ha->ndim, idx)] != 0 ? ag_conf_round(c->dt, value) : ha->v[i];
        }
        if (ref) ag__conf_check(c, o, ha->ndim, ha->shape, c->dt, ref, EXACT);
      }
    }
    ag__conf_case_end(c);
  }
}
