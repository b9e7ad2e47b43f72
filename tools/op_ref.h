/* Double-precision references for every entry of the elementwise op table
 * (include/anygrad/optable.h), written apart from the table's expressions:
 * the conformance engine and the kernel tests compare each backend with
 * these. Every entry needs its CREF_ macros here; a missing one is a build
 * error (an undeclared function). Header-only, C11. */
#ifndef ANYGRAD_TOOLS_OP_REF_H
#define ANYGRAD_TOOLS_OP_REF_H

#include <math.h>

#include "anygrad/backend.h"

#define CREF_PI 3.14159265358979323846

/* ---- unary forward: CREF_U_<ID>(x, s0, s1) ---- */
#define CREF_U_COPY(x, s0, s1) (x)
#define CREF_U_NEG(x, s0, s1) (-(x))
#define CREF_U_EXP(x, s0, s1) exp(x)
#define CREF_U_LOG(x, s0, s1) log(x)
#define CREF_U_SQRT(x, s0, s1) sqrt(x)
#define CREF_U_RSQRT(x, s0, s1) (1 / sqrt(x))
#define CREF_U_ABS(x, s0, s1) fabs(x)
#define CREF_U_RELU(x, s0, s1) ((x) < 0 ? 0 : (x))
#define CREF_U_GELU(x, s0, s1) (0.5 * (x) * (1 + tanh(sqrt(2 / CREF_PI) * ((x) + 0.044715 * (x) * (x) * (x)))))
#define CREF_U_SILU(x, s0, s1) ((x) / (1 + exp(-(x))))
#define CREF_U_SIGMOID(x, s0, s1) (1 / (1 + exp(-(x))))
#define CREF_U_TANH(x, s0, s1) tanh(x)
#define CREF_U_POW(x, s0, s1) pow(x, s0)
#define CREF_U_AFFINE(x, s0, s1) ((x) * (s0) + (s1))
#define CREF_U_RSUB_DIV(x, s0, s1) ((s0) / (x))
#define CREF_U_SQUARE(x, s0, s1) ((x) * (x))
#define CREF_U_SIN(x, s0, s1) sin(x)
#define CREF_U_COS(x, s0, s1) cos(x)
#define CREF_U_ERF(x, s0, s1) erf(x)
#define CREF_U_GELU_ERF(x, s0, s1) ((x) * 0.5 * erfc(-(x) / sqrt(2.0)))
#define CREF_U_SOFTPLUS(x, s0, s1) ((x) * (s0) > (s1) ? (x) : log1p(exp((x) * (s0))) / (s0))
#define CREF_U_LEAKY_RELU(x, s0, s1) ((x) > 0 ? (x) : (x) * (s0))
#define CREF_U_ELU(x, s0, s1) ((x) > 0 ? (x) : (s0) * expm1(x))
#define CREF_U_HARDSWISH(x, s0, s1) ((x) * fmin(fmax((x) + 3, 0), 6) / 6)
#define CREF_U_HARDSIGMOID(x, s0, s1) (fmin(fmax((x) + 3, 0), 6) / 6)
#define CREF_U_MISH(x, s0, s1) ((x) * tanh(log1p(exp(x))))
#define CREF_U_CLAMP(x, s0, s1) (isnan(x) ? (x) : fmin(fmax(x, s0), s1))
#define CREF_U_FLOOR(x, s0, s1) floor(x)
#define CREF_U_CEIL(x, s0, s1) ceil(x)
#define CREF_U_ROUND(x, s0, s1) nearbyint(x)
#define CREF_U_SIGN(x, s0, s1) ((double)(((x) > 0) - ((x) < 0)))
#define CREF_U_RECIPROCAL(x, s0, s1) (1 / (x))
#define CREF_U_LOG1P(x, s0, s1) log1p(x)
#define CREF_U_EXPM1(x, s0, s1) expm1(x)
#define CREF_U_SELU(x, s0, s1) (1.0507009873554804934 * ((x) > 0 ? (x) : 1.6732632423543772848 * expm1(x)))
#define CREF_U_CELU(x, s0, s1) (fmax(0, x) + fmin(0, (s0) * (exp((x) / (s0)) - 1)))
#define CREF_U_SOFTSIGN(x, s0, s1) ((x) / (1 + fabs(x)))
#define CREF_U_TANHSHRINK(x, s0, s1) ((x) - tanh(x))
#define CREF_U_LOGSIGMOID(x, s0, s1) (-log1p(exp(-(x))))
#define CREF_U_RELU6(x, s0, s1) fmin(fmax(x, 0), 6)
#define CREF_U_TRUNC(x, s0, s1) trunc(x)
#define CREF_U_FRAC(x, s0, s1) ((x) - trunc(x))
#define CREF_U_SINH(x, s0, s1) sinh(x)
#define CREF_U_COSH(x, s0, s1) cosh(x)
#define CREF_U_EXP2(x, s0, s1) exp2(x)

/* ---- unary backward: CREF_BWD_<ID>(g, v, s0, s1), v the value the table
 * saves (x, or y the output; ignored for ops that save nothing) ---- */
#define CREF_BWD_NEG(g, v, s0, s1) (-(g))
#define CREF_BWD_EXP(g, y, s0, s1) ((g) * (y))
#define CREF_BWD_LOG(g, x, s0, s1) ((g) / (x))
#define CREF_BWD_SQRT(g, y, s0, s1) ((g) / (2 * (y)))
#define CREF_BWD_RSQRT(g, y, s0, s1) (-0.5 * (g) * pow(y, 3))
#define CREF_BWD_ABS(g, x, s0, s1) ((g) * (double)(((x) > 0) - ((x) < 0)))
#define CREF_BWD_RELU(g, x, s0, s1) ((x) > 0 ? (g) : 0)
#define CREF_BWD_GELU(g, x, s0, s1) ((g) * cref_gelu_d(x))
#define CREF_BWD_SILU(g, x, s0, s1) ((g) * cref_silu_d(x))
#define CREF_BWD_SIGMOID(g, y, s0, s1) ((g) * (y) * (1 - (y)))
#define CREF_BWD_TANH(g, y, s0, s1) ((g) * (1 - (y) * (y)))
#define CREF_BWD_POW(g, x, s0, s1) ((g) * (s0) * pow(x, (s0) - 1))
#define CREF_BWD_AFFINE(g, v, s0, s1) ((g) * (s0))
#define CREF_BWD_RSUB_DIV(g, x, s0, s1) (-(g) * (s0) / ((x) * (x)))
#define CREF_BWD_SQUARE(g, x, s0, s1) (2 * (g) * (x))
#define CREF_BWD_SIN(g, x, s0, s1) ((g) * cos(x))
#define CREF_BWD_COS(g, x, s0, s1) (-(g) * sin(x))
#define CREF_BWD_ERF(g, x, s0, s1) ((g) * 2 / sqrt(CREF_PI) * exp(-(x) * (x)))
#define CREF_BWD_GELU_ERF(g, x, s0, s1) \
  ((g) * (0.5 * erfc(-(x) / sqrt(2.0)) + (x) * exp(-0.5 * (x) * (x)) / sqrt(2 * CREF_PI)))
#define CREF_BWD_SOFTPLUS(g, x, s0, s1) ((x) * (s0) > (s1) ? (g) : (g) / (1 + exp(-(x) * (s0))))
#define CREF_BWD_LEAKY_RELU(g, x, s0, s1) ((x) > 0 ? (g) : (g) * (s0))
#define CREF_BWD_ELU(g, x, s0, s1) ((x) > 0 ? (g) : (g) * (s0) * exp(x))
#define CREF_BWD_HARDSWISH(g, x, s0, s1) ((x) < -3 ? 0 : (x) <= 3 ? (g) * (2 * (x) + 3) / 6 : (g))
#define CREF_BWD_HARDSIGMOID(g, x, s0, s1) ((x) > -3 && (x) < 3 ? (g) / 6 : 0)
#define CREF_BWD_MISH(g, x, s0, s1) ((g) * cref_mish_d(x))
#define CREF_BWD_CLAMP(g, x, s0, s1) ((x) >= (s0) && (x) <= (s1) ? (g) : 0)
#define CREF_BWD_FLOOR(g, v, s0, s1) 0.0
#define CREF_BWD_CEIL(g, v, s0, s1) 0.0
#define CREF_BWD_ROUND(g, v, s0, s1) 0.0
#define CREF_BWD_SIGN(g, v, s0, s1) 0.0
#define CREF_BWD_RECIPROCAL(g, y, s0, s1) (-(g) * (y) * (y))
#define CREF_BWD_LOG1P(g, x, s0, s1) ((g) / (1 + (x)))
#define CREF_BWD_EXPM1(g, y, s0, s1) ((g) * ((y) + 1))
#define CREF_BWD_SELU(g, x, s0, s1) \
  ((g) * 1.0507009873554804934 * ((x) > 0 ? 1 : 1.6732632423543772848 * exp(x)))
#define CREF_BWD_CELU(g, x, s0, s1) ((x) > 0 ? (g) : (g) * exp((x) / (s0)))
#define CREF_BWD_SOFTSIGN(g, x, s0, s1) ((g) / pow(1 + fabs(x), 2))
#define CREF_BWD_TANHSHRINK(g, x, s0, s1) ((g) * pow(tanh(x), 2))
#define CREF_BWD_LOGSIGMOID(g, x, s0, s1) ((g) / (1 + exp(x)))
#define CREF_BWD_RELU6(g, x, s0, s1) ((x) > 0 && (x) < 6 ? (g) : 0)
#define CREF_BWD_TRUNC(g, v, s0, s1) 0.0
#define CREF_BWD_FRAC(g, v, s0, s1) (g)
#define CREF_BWD_SINH(g, x, s0, s1) ((g) * cosh(x))
#define CREF_BWD_COSH(g, x, s0, s1) ((g) * sinh(x))
#define CREF_BWD_EXP2(g, y, s0, s1) ((g) * (y) * log(2.0))

/* ---- binary forward: CREF_B_<ID>(a, b, s0); comparisons give 0 or 1 ---- */
#define CREF_B_ADD(a, b, s0) ((a) + (s0) * (b))
#define CREF_B_SUB(a, b, s0) ((a) - (b))
#define CREF_B_MUL(a, b, s0) ((a) * (b))
#define CREF_B_DIV(a, b, s0) ((a) / (b))
#define CREF_B_MAX(a, b, s0) (isnan(a) || isnan(b) ? NAN : fmax(a, b))
#define CREF_B_MIN(a, b, s0) (isnan(a) || isnan(b) ? NAN : fmin(a, b))
#define CREF_B_EQ(a, b, s0) ((double)((a) == (b)))
#define CREF_B_GT(a, b, s0) ((double)((a) > (b)))
#define CREF_B_LT(a, b, s0) ((double)((a) < (b)))
#define CREF_B_NE(a, b, s0) ((double)((a) != (b)))
#define CREF_B_LE(a, b, s0) ((double)((a) <= (b)))
#define CREF_B_GE(a, b, s0) ((double)((a) >= (b)))
#define CREF_B_ATAN2(a, b, s0) atan2(a, b)
#define CREF_B_REMAINDER(a, b, s0) cref_remainder(a, b)
#define CREF_B_HYPOT(a, b, s0) hypot(a, b)
#define CREF_B_FMOD(a, b, s0) fmod(a, b)
#define CREF_B_SWIGLU(a, b, s0) ((a) / (1 + exp(-(a))) * (b))

/* ---- binary partial derivatives: CREF_DA_<ID>(a, b), CREF_DB_<ID>(a, b) ---- */
#define CREF_DA_MAX(a, b) ((a) > (b) ? 1 : (a) == (b) ? 0.5 : 0)
#define CREF_DB_MAX(a, b) ((b) > (a) ? 1 : (a) == (b) ? 0.5 : 0)
#define CREF_DA_MIN(a, b) ((a) < (b) ? 1 : (a) == (b) ? 0.5 : 0)
#define CREF_DB_MIN(a, b) ((b) < (a) ? 1 : (a) == (b) ? 0.5 : 0)
#define CREF_DA_ATAN2(a, b) ((b) / ((a) * (a) + (b) * (b)))
#define CREF_DB_ATAN2(a, b) (-(a) / ((a) * (a) + (b) * (b)))
#define CREF_DA_REMAINDER(a, b) 1.0
#define CREF_DB_REMAINDER(a, b) (-floor((a) / (b)))
#define CREF_DA_HYPOT(a, b) ((a) / hypot(a, b))
#define CREF_DB_HYPOT(a, b) ((b) / hypot(a, b))
#define CREF_DA_FMOD(a, b) 1.0
#define CREF_DB_FMOD(a, b) (-trunc((a) / (b)))
#define CREF_DA_SWIGLU(a, b) ((b) * cref_silu_d(a))
#define CREF_DB_SWIGLU(a, b) ((a) / (1 + exp(-(a))))

/* PyTorch's remainder from C's exact fmod (a - floor(a/b)*b loses the
 * quotient past 2^53): plus b where the signs differ */
static inline double cref_remainder(double a, double b) {
  double r = fmod(a, b);
  return r != 0 && (r < 0) != (b < 0) ? r + b : r;
}
/* In long double, 1 - tanh^2 as 1 / cosh^2: exact limits (1 and 0) for
 * large |x|, where 1 - tanh^2 in double is 0 times x^3 (NaN past 1e102) */
static inline double cref_gelu_d(double xd) {
  if (isinf(xd)) return xd > 0 ? 1 : 0;
  long double x = xd, k = 0.79788456080286535587989211986876373695L, u = k * (x + 0.044715L * x * x * x),
              c = coshl(u);
  long double sech2 = isinf(c) ? 0 : 1 / (c * c);
  return (double)(1 / (1 + expl(-2 * u)) + 0.5L * x * sech2 * k * (1 + 3 * 0.044715L * x * x));
}
static inline double cref_silu_d(double x) {
  double s = 1 / (1 + exp(-x));
  return s + x * s * (1 - s);
}
static inline double cref_mish_d(double xd) {
  if (isinf(xd)) return xd > 0 ? 1 : 0;
  long double x = xd, sp = log1pl(expl(x)), c = coshl(sp);
  long double sech2 = isinf(c) ? 0 : 1 / (c * c);
  return (double)(tanhl(sp) + x * sech2 / (1 + expl(-x)));
}

#define CREF_U_CASE(ID, ...) \
  case AG_U_##ID: return CREF_U_##ID(x, s0, s1);
#define CREF_B_CASE(ID, ...) \
  case AG_B_##ID: return CREF_B_##ID(a, b, s0);
#define CREF_BWD_CASE(ID, name, api, f, save, ...) \
  AG_OPT_IF(AG_OPT_HAS_BWD_##save)(case AG_B_##ID##_BWD: return CREF_BWD_##ID(a, b, s0, s1);)
#define CREF_PART_CASE(ID, name, api, f, kind, grad, ...)                                   \
  AG_OPT_IF(AG_OPT_PART_##grad)(case AG_B_##ID##_DA: return CREF_DA_##ID(a, b);            \
                                case AG_B_##ID##_DB: return CREF_DB_##ID(a, b);)

/* The derivative of unary op op at x (upstream gradient 1), from its
 * CREF_BWD_ with the value the table saves (x, or the forward's y);
 * NAN for an op without a gradient. */
#define CREF_GV_X(ID, x, s0, s1) (x)
#define CREF_GV_Y(ID, x, s0, s1) CREF_U_##ID(x, s0, s1)
#define CREF_GV_N(ID, x, s0, s1) 0.0
#define CREF_GRAD_CASE(ID, name, api, f, save, ...) \
  AG_OPT_IF(AG_OPT_HAS_BWD_##save)(case AG_U_##ID: return CREF_BWD_##ID(1.0, CREF_GV_##save(ID, x, s0, s1), s0, s1);)
static inline double ag_ref_unary_grad(int op, double x, double s0, double s1) {
  (void)s0, (void)s1;
  switch (op) {
    AG_UNARY_OPS(CREF_GRAD_CASE)
  }
  return NAN;
}

/* ---- the table's test domains and scalars ---- */
typedef enum ag_ref_kind { AG_REF_UNI, AG_REF_AWAY, AG_REF_FRAC, AG_REF_NZINT } ag_ref_kind;
typedef struct ag_ref_dom {
  ag_ref_kind kind;
  double lo, hi;
} ag_ref_dom;
#define CREF_DOM_(k, lo, hi) {AG_REF_##k, lo, hi}
#define CREF_DOM(d) CREF_DOM_ d
#define CREF_UDOM_CASE(ID, name, api, f, save, b, amp, ints, cost, dom, gdom, ts0, ts1) \
  case AG_U_##ID: {                                                                     \
    const ag_ref_dom d[2] = {CREF_DOM(dom), CREF_DOM(gdom)};                             \
    return d[grad];                                                                      \
  }
#define CREF_BDOM_CASE(ID, name, api, f, kind, grad, da, db, ints, cost, doma, domb) \
  case AG_B_##ID: {                                                                  \
    const ag_ref_dom d[2] = {CREF_DOM(doma), CREF_DOM(domb)};                         \
    return d[k];                                                                      \
  }
#define CREF_BWDDOM_CASE(ID, name, api, f, save, b, amp, ints, cost, dom, gdom, ts0, ts1) \
  AG_OPT_IF(AG_OPT_HAS_BWD_##save)(case AG_B_##ID##_BWD: {                                 \
    const ag_ref_dom d[2] = {{AG_REF_UNI, -2, 2}, CREF_DOM(gdom)};                          \
    return d[k];                                                                            \
  })
#define CREF_PARTDOM_CASE(ID, name, api, f, kind, grad, da, db, ints, cost, doma, domb) \
  AG_OPT_IF(AG_OPT_PART_##grad)(case AG_B_##ID##_DA: case AG_B_##ID##_DB: {             \
    const ag_ref_dom d[2] = {CREF_DOM(doma), CREF_DOM(domb)};                            \
    return d[k];                                                                         \
  })
#define CREF_BWDSCAL_CASE(ID, name, api, f, save, b, amp, ints, cost, dom, gdom, ts0, ts1) \
  AG_OPT_IF(AG_OPT_HAS_BWD_##save)(case AG_B_##ID##_BWD: *s0 = ts0; *s1 = ts1; return;)
#define CREF_USCAL_CASE(ID, name, api, f, save, b, amp, ints, cost, dom, gdom, ts0, ts1) \
  case AG_U_##ID:                                                                        \
    *s0 = ts0;                                                                           \
    *s1 = ts1;                                                                           \
    return;

/* Where unary op's inputs are drawn: its forward domain, or (grad) its
 * finite-difference one; UNI [-3, 3] for an unknown op. */
static inline ag_ref_dom ag_ref_unary_dom(int op, int grad) {
  switch (op) {
    AG_UNARY_OPS(CREF_UDOM_CASE)
  }
  const ag_ref_dom u = {AG_REF_UNI, -3, 3};
  return u;
}
/* Where binary op's operand k (0: a, 1: b) is drawn: a unary op's _BWD
 * takes the gradient from [-2, 2] and the saved value from the op's
 * finite-difference domain; partial derivatives the forward's domains. */
static inline ag_ref_dom ag_ref_binary_dom(int op, int k) {
  switch (op) {
    AG_BINARY_OPS(CREF_BDOM_CASE)
    AG_UNARY_OPS(CREF_BWDDOM_CASE)
    AG_BINARY_OPS(CREF_PARTDOM_CASE)
  }
  const ag_ref_dom u = {AG_REF_UNI, -3, 3};
  return u;
}
/* The scalars the table's tests call unary op with. */
static inline void ag_ref_unary_scalars(int op, double *s0, double *s1) {
  *s0 = *s1 = 0;
  switch (op) {
    AG_UNARY_OPS(CREF_USCAL_CASE)
  }
}
/* The scalars binary op is tested with: the unary op's for a _BWD, else
 * s0 = 1 (ADD's b coefficient), s1 = 0. */
static inline void ag_ref_binary_scalars(int op, double *s0, double *s1) {
  *s0 = 1;
  *s1 = 0;
  switch (op) {
    AG_UNARY_OPS(CREF_BWDSCAL_CASE)
  }
}
/* A value of domain d from two uniforms in [0, 1). */
static inline double ag_ref_draw(ag_ref_dom d, double u, double v) {
  switch (d.kind) {
    case AG_REF_AWAY: return (v < 0.5 ? -1 : 1) * (d.lo + u * (d.hi - d.lo));
    case AG_REF_FRAC: return floor(d.lo + u * (d.hi - d.lo)) + 0.1 + 0.3 * v;
    case AG_REF_NZINT: return (v < 0.5 ? -1 : 1) * floor(d.lo + u * (d.hi - d.lo + 1));
    case AG_REF_UNI: break;
  }
  return d.lo + u * (d.hi - d.lo);
}

/* Unary sub-op op of x with scalars s0, s1; NAN for an unknown op. */
static inline double ag_ref_unary(int op, double x, double s0, double s1) {
  (void)s0, (void)s1;
  switch (op) {
    AG_UNARY_OPS(CREF_U_CASE)
  }
  return NAN;
}

/* Binary sub-op op: forward ops of a and b; a unary op's _BWD with a the
 * upstream gradient and b the saved value; partial derivatives. */
static inline double ag_ref_binary(int op, double a, double b, double s0, double s1) {
  (void)s0, (void)s1;
  switch (op) {
    AG_BINARY_OPS(CREF_B_CASE)
    AG_UNARY_OPS(CREF_BWD_CASE)
    AG_BINARY_OPS(CREF_PART_CASE)
  }
  return NAN;
}

#endif
