/* The elementwise op table: every unary and binary elementwise op, and the
 * backward of each, is one entry here. The enums and names of backend.h,
 * the public wrappers of ops.h, autograd's saved-value rules and backward
 * nodes, the AMP policy, the CPU cost model, every backend's kernel bodies,
 * supports() and the conformance rows are all expanded from these lists, so
 * an op added here is an op on every backend (docs/design/ops.md).
 *
 * This file holds only macros and comments: it is valid C, C++, OpenCL C and
 * GLSL, and the OpenCL backend embeds it in front of its kernel sources.
 *
 * ---- the expression language ----
 * fwd and bwd are expressions in a small C subset that every kernel language
 * accepts: + - * / unary -, comparisons, && ||, c ? a : b (the condition a
 * comparison), parentheses, the operand names below, and these functions,
 * which each kernel language defines in a prelude of its own
 * (backends/cpu/cpu_ops.inc, kernels/gpu/elementwise.cu,
 * kernels/opencl/elementwise.cl):
 *   E_K(c)      the constant c in the compute type (float, or double for f64)
 *   E_EXP E_LOG E_SQRT E_RSQRT E_TANH E_SIGMOID E_ERF E_SIN E_COS E_LOG1P
 *   E_EXPM1 E_FLOOR E_CEIL E_RINT (ties to even) E_ABS      one argument
 *   E_POW(a, b) E_ATAN2(a, b) E_FMOD(a, b) (C's fmod: sign of a)
 *   E_DIV(a, b) a / b: every division is written so (never `/`), since
 *               GLSL's division is not correctly rounded and the portable
 *               numerics mode (docs/numerics.md) builds one there
 * Operands: unary fwd reads x, s0, s1 (the call's scalars); unary bwd reads
 * g (the upstream gradient), s0, s1 and the one value the entry saves: x
 * (save X) or y (save Y; the forward's output); save N reads neither, and
 * save NG means the op has no gradient. Binary fwd reads a, b, s0; the
 * partial derivatives da and db read a, b (the node multiplies by g).
 * Expressions are computed in f32 for f32/f16/bf16 data (f64 for f64).
 *
 * ---- unary entries ----
 * AGX(ID, name, api, fwd, save, bwd, amp, ints, cost, dom, gdom, ts0, ts1)
 *   ID    enum suffix: AG_U_<ID>; the backward is the binary op AG_B_<ID>_BWD
 *         (a = g, b = the saved value) unless save is NG
 *   name  public name: ag_<name>() and the op's name in messages
 *   api   A0: ag_<name>(x); A1: ag_<name>(x, s0); A2: ag_<name>(x, s0, s1);
 *         AH: no generated wrapper (ops.c writes the public function)
 *   amp   under autocast: KEEP runs in the input's dtype, F32 casts to f32
 *   ints  FLT: floating dtypes only; INT: also i32, i64, u8 and bool (with the
 *         integer rules of each backend: wrap-around; AFFINE reads its
 *         scalars exactly from the call's i[], kops.h)
 *   cost  relative CPU cost per element (1 an add, 8 a transcendental)
 *   dom   conformance input domain (kind, lo, hi); gdom the same for the
 *         finite-difference gradient check. Kinds: UNI uniform in [lo, hi];
 *         AWAY |x| uniform in [lo, hi] with a random sign; FRAC an integer in
 *         [lo, hi) plus a fraction in [0.1, 0.4] (away from the integers and
 *         halves where step functions jump); NZINT a non-zero integer with
 *         |x| in [lo, hi]
 *   ts0, ts1  the scalars the conformance rows call the op with */
#ifndef ANYGRAD_OPTABLE_H
#define ANYGRAD_OPTABLE_H

/* ---- shared subexpressions of the entries (expanded where used, so they
 * read the entry's x and the kernel language's E_ functions) ---- */
/* e^(-2|v|): in [0, 1], never overflows */
#define AG_OPT_E2(v) E_EXP(E_K(-2) * E_ABS(v))
/* 1 - tanh(v)^2 = sech(v)^2 = 4e / (1 + e)^2 with e = e^(-2|v|): no
 * cancellation, exactly 0 once e underflows (1 - tanh^2 is 1 - 1 or a
 * device tanh's shortfall below 1 there) */
#define AG_OPT_SECH2(v) E_DIV(E_K(4) * AG_OPT_E2(v), (E_K(1) + AG_OPT_E2(v)) * (E_K(1) + AG_OPT_E2(v)))
/* gelu's tanh argument sqrt(2/pi) (x + 0.044715 x^3) */
#define AG_OPT_GELU_U(x) (E_K(0.7978845608028654) * ((x) + E_K(0.044715) * (x) * (x) * (x)))

#define AG_UNARY_OPS(AGX)                                                                          \
  /* COPY also casts between dtypes; same-dtype copies move bits */                                 \
  AGX(COPY, copy, AH, x, NG, g, KEEP, INT, 1, (UNI, -3, 3), (UNI, -2, 2), 0, 0)                      \
  AGX(NEG, neg, A0, -x, N, -g, KEEP, INT, 1, (UNI, -3, 3), (UNI, -2, 2), 0, 0)                       \
  AGX(EXP, exp, A0, E_EXP(x), Y, g * y, F32, FLT, 8, (UNI, -3, 3), (UNI, -2, 2), 0, 0)               \
  AGX(LOG, log, A0, E_LOG(x), X, E_DIV(g, x), F32, FLT, 8, (UNI, 0.1, 3), (UNI, 0.5, 2), 0, 0)             \
  AGX(SQRT, sqrt, A0, E_SQRT(x), Y, E_DIV(g * E_K(0.5), y), KEEP, FLT, 8, (UNI, 0.1, 3), (UNI, 0.5, 2), 0, \
      0)                                                                                           \
  AGX(RSQRT, rsqrt, A0, E_RSQRT(x), Y, g * E_K(-0.5) * y * y * y, F32, FLT, 8, (UNI, 0.1, 3),       \
      (UNI, 0.5, 2), 0, 0)                                                                         \
  /* the gradient of |x| at 0 is 0, as PyTorch's sign(x) */                                         \
  AGX(ABS, abs, A0, E_ABS(x), X, x > E_K(0) ? g : x < E_K(0) ? -g : E_K(0), KEEP, INT, 1,           \
      (UNI, -3, 3), (AWAY, 0.1, 2), 0, 0)                                                          \
  /* x < 0 ? 0 : x lets NaN through, as torch.relu does */                                          \
  AGX(RELU, relu, A0, x < E_K(0) ? E_K(0) : x, X, x > E_K(0) ? g : E_K(0), KEEP, FLT, 1,           \
      (UNI, -3, 3), (AWAY, 0.1, 2), 0, 0)                                                          \
  /* tanh approximation: 0.5x(1 + tanh(u)) == x * sigmoid(2u) */                                    \
  /* tanh approximation: 0.5x(1 + tanh(u)) == x * sigmoid(2u); the         \
   * backward is sigmoid(2u) + 0.5x sech^2(u) u' with both terms from       \
   * e^(-2|u|) (AG_OPT_SECH2), so it tends to 1 and 0 where 1 - tanh^2 was   \
   * a device tanh's shortfall below 1 times x^3 (7.38 at x = 1000); 1 and   \
   * 0 beyond |x| = 1e6, where u' x^2 may overflow */                       \
  AGX(GELU, gelu, A0, x * E_SIGMOID(E_K(1.5957691216057308) * (x + E_K(0.044715) * x * x * x)), X, \
      x > E_K(1e6) ? g : x < E_K(-1e6) ? g * E_K(0) :                                              \
      g * (E_DIV(x < E_K(0) ? AG_OPT_E2(AG_OPT_GELU_U(x)) : E_K(1), E_K(1) + AG_OPT_E2(AG_OPT_GELU_U(x))) + \
           E_K(0.5) * x * AG_OPT_SECH2(AG_OPT_GELU_U(x)) * E_K(0.7978845608028654) *               \
               (E_K(1) + E_K(0.134145) * x * x)),                                                  \
      KEEP, FLT, 8, (UNI, -3, 3), (UNI, -3, 3), 0, 0)                                              \
  AGX(SILU, silu, A0, x * E_SIGMOID(x), X,                                                         \
      g * E_SIGMOID(x) * (E_K(1) + x * (E_K(1) - E_SIGMOID(x))), KEEP, FLT, 8, (UNI, -3, 3),        \
      (UNI, -3, 3), 0, 0)                                                                          \
  AGX(SIGMOID, sigmoid, A0, E_SIGMOID(x), Y, g * y * (E_K(1) - y), KEEP, FLT, 8, (UNI, -3, 3),      \
      (UNI, -3, 3), 0, 0)                                                                          \
  AGX(TANH, tanh, A0, E_TANH(x), Y, g * (E_K(1) - y * y), KEEP, FLT, 8, (UNI, -3, 3), (UNI, -2, 2), \
      0, 0)                                                                                        \
  /* x^s0 */                                                                                       \
  AGX(POW, pow_scalar, A1, E_POW(x, s0), X, g * s0 * E_POW(x, s0 - E_K(1)), F32, FLT, 8,            \
      (UNI, 0.1, 3), (UNI, 0.5, 2), 2.5, 0)                                                        \
  /* x*s0 + s1: the scalar add/sub/mul/div of ops.h */                                             \
  AGX(AFFINE, affine, AH, x * s0 + s1, N, g * s0, KEEP, INT, 1, (UNI, -3, 3), (UNI, -2, 2), 1.5,     \
      -0.5)                                                                                        \
  /* s0 / x */                                                                                     \
  AGX(RSUB_DIV, scalar_div, AH, E_DIV(s0, x), X, E_DIV(-g * s0, x * x), KEEP, FLT, 1, (AWAY, 0.5, 2),        \
      (AWAY, 0.5, 2), 2, 0)                                                                        \
  AGX(SQUARE, square, A0, x * x, X, g * E_K(2) * x, KEEP, FLT, 1, (UNI, -3, 3), (UNI, -2, 2), 0, 0) \
  AGX(SIN, sin, A0, E_SIN(x), X, g * E_COS(x), KEEP, FLT, 8, (UNI, -4, 4), (UNI, -3, 3), 0, 0)      \
  AGX(COS, cos, A0, E_COS(x), X, -g * E_SIN(x), KEEP, FLT, 8, (UNI, -4, 4), (UNI, -3, 3), 0, 0)     \
  AGX(ERF, erf, A0, E_ERF(x), X, g * E_K(1.1283791670955126) * E_EXP(-x * x), KEEP, FLT, 8,        \
      (UNI, -3, 3), (UNI, -2, 2), 0, 0)                                                            \
  /* PyTorch's default gelu: 0.5x(1 + erf(x/sqrt 2)) */                                            \
  AGX(GELU_ERF, gelu_erf, A0, E_K(0.5) * x * (E_K(1) + E_ERF(x * E_K(0.7071067811865476))), X,      \
      g * (E_K(0.5) * (E_K(1) + E_ERF(x * E_K(0.7071067811865476))) +                               \
           x * E_K(0.3989422804014327) * E_EXP(E_K(-0.5) * x * x)),                                \
      KEEP, FLT, 8, (UNI, -3, 3), (UNI, -3, 3), 0, 0)                                              \
  /* log(1 + e^(s0 x)) / s0 (s0 = beta), x where s0 x > s1 (threshold), as     \
   * torch.nn.functional.softplus */                                                               \
  AGX(SOFTPLUS, softplus, A2, x * s0 > s1 ? x : E_DIV(E_LOG1P(E_EXP(x * s0)), s0), X,                    \
      x * s0 > s1 ? g : g * E_SIGMOID(x * s0), F32, FLT, 8, (UNI, -4, 4), (UNI, -3, 3), 1, 20)      \
  /* s0: the slope for x < 0 */                                                                    \
  AGX(LEAKY_RELU, leaky_relu, A1, x > E_K(0) ? x : x * s0, X, x > E_K(0) ? g : g * s0, KEEP, FLT, 1, \
      (UNI, -3, 3), (AWAY, 0.1, 2), 0.01, 0)                                                       \
  /* s0: alpha */                                                                                  \
  AGX(ELU, elu, A1, x > E_K(0) ? x : s0 * E_EXPM1(x), X, x > E_K(0) ? g : g * s0 * E_EXP(x), KEEP,   \
      FLT, 8, (UNI, -3, 3), (AWAY, 0.1, 2), 1, 0)                                                  \
  AGX(HARDSWISH, hardswish, A0,                                                                    \
      x <= E_K(-3) ? E_K(0) : x >= E_K(3) ? x : E_DIV(x * (x + E_K(3)), E_K(6)), X,                  \
      x < E_K(-3) ? E_K(0) : x <= E_K(3) ? g * (E_DIV(x, E_K(3)) + E_K(0.5)) : g, KEEP, FLT, 1,           \
      (UNI, -4, 4), (FRAC, -3, 3), 0, 0)                                                           \
  AGX(HARDSIGMOID, hardsigmoid, A0,                                                                \
      x <= E_K(-3) ? E_K(0) : x >= E_K(3) ? E_K(1) : E_DIV(x, E_K(6)) + E_K(0.5), X,                 \
      x > E_K(-3) && x < E_K(3) ? E_DIV(g, E_K(6)) : E_K(0), KEEP, FLT, 1, (UNI, -4, 4), (FRAC, -3, 3),  \
      0, 0)                                                                                        \
  /* x tanh(softplus(x)); the backward's 1 - tanh^2 is AG_OPT_SECH2 (it    \
   * was x times a device tanh's shortfall below 1 for large x); 1 and 0     \
   * beyond |x| = 1e6, where x * 0 would be NaN at the infinities */          \
  AGX(MISH, mish, A0, x * E_TANH(x > E_K(20) ? x : E_LOG1P(E_EXP(x))), X,                           \
      x > E_K(1e6) ? g : x < E_K(-1e6) ? g * E_K(0) :                                              \
      g * (E_TANH(x > E_K(20) ? x : E_LOG1P(E_EXP(x))) +                                            \
           x * E_SIGMOID(x) * AG_OPT_SECH2(x > E_K(20) ? x : E_LOG1P(E_EXP(x)))),                   \
      KEEP, FLT, 8, (UNI, -4, 4), (UNI, -3, 3), 0, 0)                                              \
  /* min(max(x, s0), s1) (s1 when s0 > s1); NaN passes; the gradient flows  \
   * where s0 <= x <= s1, as torch.clamp */                    \
  AGX(CLAMP, clamp, A2, x > s1 ? s1 : x < s0 ? (s0 > s1 ? s1 : s0) : x, X, x >= s0 && x <= s1 ? g : E_K(0), KEEP,    \
      FLT, 1, (UNI, -3, 3), (FRAC, -2, 2), -0.5, 1.5)                                              \
  AGX(FLOOR, floor, A0, E_FLOOR(x), N, E_K(0), KEEP, FLT, 1, (UNI, -3, 3), (FRAC, -2, 2), 0, 0)  \
  AGX(CEIL, ceil, A0, E_CEIL(x), N, E_K(0), KEEP, FLT, 1, (UNI, -3, 3), (FRAC, -2, 2), 0, 0)     \
  /* halves to even, as torch.round */                                                             \
  AGX(ROUND, round, A0, E_RINT(x), N, E_K(0), KEEP, FLT, 1, (UNI, -3, 3), (FRAC, -2, 2), 0, 0)   \
  /* 1, -1, or 0 (for 0 and NaN, as torch.sign) */                                                 \
  AGX(SIGN, sign, A0, x > E_K(0) ? E_K(1) : x < E_K(0) ? E_K(-1) : E_K(0), N, E_K(0), KEEP, FLT, \
      1, (UNI, -3, 3), (FRAC, -2, 2), 0, 0)                                                        \
  AGX(RECIPROCAL, reciprocal, A0, E_DIV(E_K(1), x), Y, -g * y * y, F32, FLT, 1, (AWAY, 0.2, 3),          \
      (AWAY, 0.5, 2), 0, 0)                                                                        \
  AGX(LOG1P, log1p, A0, E_LOG1P(x), X, E_DIV(g, E_K(1) + x), F32, FLT, 8, (UNI, -0.9, 3),               \
      (UNI, -0.5, 2), 0, 0)                                                                        \
  AGX(EXPM1, expm1, A0, E_EXPM1(x), Y, g * (y + E_K(1)), F32, FLT, 8, (UNI, -3, 3), (UNI, -2, 2), 0, \
      0)                                                                                           \
  /* scale * (x > 0 ? x : alpha * (e^x - 1)), PyTorch's constants */                              \
  AGX(SELU, selu, A0,                                                                              \
      E_K(1.0507009873554805) * (x > E_K(0) ? x : E_K(1.6732632423543772) * E_EXPM1(x)), X,        \
      x > E_K(0) ? g * E_K(1.0507009873554805)                                                     \
                 : g * E_K(1.7580993408473766) * E_EXP(x),                                         \
      KEEP, FLT, 8, (UNI, -3, 3), (AWAY, 0.1, 2), 0, 0)                                           \
  /* s0: alpha; x > 0 ? x : alpha * (e^(x/alpha) - 1) */                                           \
  AGX(CELU, celu, A1, x > E_K(0) ? x : s0 * E_EXPM1(E_DIV(x, s0)), X, x > E_K(0) ? g : g * E_EXP(E_DIV(x, s0)), \
      KEEP, FLT, 8, (UNI, -3, 3), (AWAY, 0.1, 2), 1.5, 0)                                         \
  AGX(SOFTSIGN, softsign, A0, E_DIV(x, E_K(1) + E_ABS(x)), X,                                          \
      E_DIV(g, (E_K(1) + E_ABS(x)) * (E_K(1) + E_ABS(x))), KEEP, FLT, 1, (UNI, -3, 3), (AWAY, 0.1, 2),  \
      0, 0)                                                                                        \
  AGX(TANHSHRINK, tanhshrink, A0, x - E_TANH(x), X, g * E_TANH(x) * E_TANH(x), KEEP, FLT, 8,       \
      (UNI, -3, 3), (UNI, -2, 2), 0, 0)                                                            \
  /* log(sigmoid(x)) = min(x, 0) - log1p(e^-|x|) */                                                \
  AGX(LOGSIGMOID, logsigmoid, A0, (x < E_K(0) ? x : E_K(0)) - E_LOG1P(E_EXP(-E_ABS(x))), X,        \
      g * E_SIGMOID(-x), F32, FLT, 8, (UNI, -3, 3), (UNI, -3, 3), 0, 0)                            \
  /* min(max(x, 0), 6); NaN passes */                                                              \
  AGX(RELU6, relu6, A0, x < E_K(0) ? E_K(0) : x > E_K(6) ? E_K(6) : x, X,                          \
      x > E_K(0) && x < E_K(6) ? g : E_K(0), KEEP, FLT, 1, (UNI, -2, 8), (FRAC, -2, 8), 0, 0)       \
  /* towards zero */                                                                               \
  AGX(TRUNC, trunc, A0, x < E_K(0) ? E_CEIL(x) : E_FLOOR(x), N, E_K(0), KEEP, FLT, 1, (UNI, -3, 3),  \
      (FRAC, -2, 2), 0, 0)                                                                         \
  /* x - trunc(x) */                                                                               \
  AGX(FRAC, frac, A0, x - (x < E_K(0) ? E_CEIL(x) : E_FLOOR(x)), N, g, KEEP, FLT, 1, (UNI, -3, 3),   \
      (FRAC, -2, 2), 0, 0)                                                                         \
  AGX(SINH, sinh, A0, E_K(0.5) * (E_EXPM1(x) - E_EXPM1(-x)), X,                                    \
      g * E_K(0.5) * (E_EXP(x) + E_EXP(-x)), F32, FLT, 8, (UNI, -3, 3), (UNI, -2, 2), 0, 0)         \
  AGX(COSH, cosh, A0, E_K(0.5) * (E_EXP(x) + E_EXP(-x)), X,                                        \
      g * E_K(0.5) * (E_EXPM1(x) - E_EXPM1(-x)), F32, FLT, 8, (UNI, -3, 3), (UNI, -2, 2), 0, 0)     \
  AGX(EXP2, exp2, A0, E_POW(E_K(2), x), Y, g * y * E_K(0.6931471805599453), F32, FLT, 8,           \
      (UNI, -3, 3), (UNI, -2, 2), 0, 0)

/* ---- binary entries ----
 * AGX(ID, name, api, fwd, kind, grad, da, db, ints, cost, doma, domb)
 *   kind  ARITH: the output has the inputs' dtype; CMP: the output is bool
 *         (1 or 0) and the inputs may be any dtype the backend compares
 *   grad  CORE: the backward is written in core/autograd/grad_ops.c (the
 *         arithmetic that reuses the forward ops); NG: no gradient; PART:
 *         the node computes g * da and g * db with the generated ops
 *         AG_B_<ID>_DA and AG_B_<ID>_DB (da, db in a and b)
 *   ints  as for unary entries; CMP entries also take bool inputs
 *   api   B: a generated ag_<name>(a, b); BH: ops.c writes it
 * Other fields as for unary entries. */
#define AG_BINARY_OPS(AGX)                                                                         \
  /* a + s0*b (the core passes s0 = 1 for plain add) */                                             \
  AGX(ADD, add, B, a + s0 * b, ARITH, CORE, E_K(1), s0, INT, 1, (UNI, -2, 2), (UNI, -2, 2))          \
  AGX(SUB, sub, B, a - b, ARITH, CORE, E_K(1), E_K(-1), INT, 1, (UNI, -2, 2), (UNI, -2, 2))          \
  AGX(MUL, mul, B, a * b, ARITH, CORE, b, a, INT, 1, (UNI, -2, 2), (UNI, -2, 2))                     \
  AGX(DIV, div, B, E_DIV(a, b), ARITH, CORE, E_DIV(E_K(1), b), E_DIV(-a, b * b), FLT, 1, (UNI, -2, 2),              \
      (AWAY, 0.5, 2))                                                                              \
  /* NaN in either operand propagates; ties split the gradient evenly      \
   * (torch.maximum/minimum) */                                   \
  AGX(MAX, maximum, B, a > b || a != a ? a : b, ARITH, PART,                                       \
      a > b ? E_K(1) : a == b ? E_K(0.5) : E_K(0), a < b ? E_K(1) : a == b ? E_K(0.5) : E_K(0), INT,   \
      1, (UNI, -2, 2), (UNI, -2, 2))                                                               \
  AGX(MIN, minimum, B, a < b || a != a ? a : b, ARITH, PART,                                       \
      a < b ? E_K(1) : a == b ? E_K(0.5) : E_K(0), a > b ? E_K(1) : a == b ? E_K(0.5) : E_K(0), INT,   \
      1, (UNI, -2, 2), (UNI, -2, 2))                                                               \
  AGX(EQ, eq, B, a == b ? E_K(1) : E_K(0), CMP, NG, E_K(0), E_K(0), INT, 1, (UNI, -2, 2),            \
      (UNI, -2, 2))                                                                                \
  AGX(GT, gt, B, a > b ? E_K(1) : E_K(0), CMP, NG, E_K(0), E_K(0), INT, 1, (UNI, -2, 2),             \
      (UNI, -2, 2))                                                                                \
  AGX(LT, lt, B, a < b ? E_K(1) : E_K(0), CMP, NG, E_K(0), E_K(0), INT, 1, (UNI, -2, 2),             \
      (UNI, -2, 2))                                                                                \
  AGX(NE, ne, B, a != b ? E_K(1) : E_K(0), CMP, NG, E_K(0), E_K(0), INT, 1, (UNI, -2, 2),            \
      (UNI, -2, 2))                                                                                \
  AGX(LE, le, B, a <= b ? E_K(1) : E_K(0), CMP, NG, E_K(0), E_K(0), INT, 1, (UNI, -2, 2),            \
      (UNI, -2, 2))                                                                                \
  AGX(GE, ge, B, a >= b ? E_K(1) : E_K(0), CMP, NG, E_K(0), E_K(0), INT, 1, (UNI, -2, 2),            \
      (UNI, -2, 2))                                                                                \
  /* atan(a/b) in the quadrant of (b, a), as torch.atan2 */                                        \
  AGX(ATAN2, atan2, B, E_ATAN2(a, b), ARITH, PART, E_DIV(b, a * a + b * b), E_DIV(-a, a * a + b * b), FLT, 8, \
      (UNI, -2, 2), (AWAY, 0.3, 2))                                                                \
  /* a - floor(a/b)*b with the sign of b (Python's and torch.remainder's rule) */                  \
  AGX(REMAINDER, remainder, B,                                                                     \
      E_FMOD(a, b) != E_K(0) && (E_FMOD(a, b) < E_K(0)) != (b < E_K(0)) ? E_FMOD(a, b) + b          \
                                                                        : E_FMOD(a, b),            \
      ARITH, PART, E_K(1), -E_FLOOR(E_DIV(a, b)), FLT, 1, (FRAC, -3, 3), (NZINT, 1, 3))                 \
  /* sqrt(a^2 + b^2) */                                                                            \
  AGX(HYPOT, hypot, B, E_SQRT(a * a + b * b), ARITH, PART, E_DIV(a, E_SQRT(a * a + b * b)),              \
      E_DIV(b, E_SQRT(a * a + b * b)), FLT, 8, (AWAY, 0.3, 2), (AWAY, 0.3, 2))                           \
  /* C's fmod: a - trunc(a/b)*b, the sign of a (torch.fmod) */                                     \
  AGX(FMOD, fmod, B, E_FMOD(a, b), ARITH, PART, E_K(1),                                            \
      E_DIV(a, b) < E_K(0) ? -E_CEIL(E_DIV(a, b)) : -E_FLOOR(E_DIV(a, b)), FLT, 1, (FRAC, -3, 3), (NZINT, 1, 3)) \
  /* silu(a) * b, the gated unit of a SwiGLU MLP in one pass (and its        \
   * backward in two, without the silu(a) tensor) */                        \
  AGX(SWIGLU, swiglu, B, a * E_SIGMOID(a) * b, ARITH, PART,                                        \
      b * E_SIGMOID(a) * (E_K(1) + a * (E_K(1) - E_SIGMOID(a))), a * E_SIGMOID(a), FLT, 8,          \
      (UNI, -3, 3), (UNI, -2, 2))

/* ---- list helpers ----
 * AG_OPT_SAVE_IS_<save> / AG_OPT_GRAD_IS_<grad> expand to 0 or 1, so a
 * consumer can select entries with token pasting. */
#define AG_OPT_HAS_BWD_NG 0
#define AG_OPT_HAS_BWD_N 1
#define AG_OPT_HAS_BWD_X 1
#define AG_OPT_HAS_BWD_Y 1
#define AG_OPT_PART_CORE 0
#define AG_OPT_PART_NG 0
#define AG_OPT_PART_PART 1

/* ---- the enums (C, C++ and OpenCL C; GLSL has no enums or variadic
 * macros, and a GLSL consumer expands the lists with its own macros) ---- */
#ifndef VULKAN
#define AG_OPT_CAT_(a, b) a##b
#define AG_OPT_CAT(a, b) AG_OPT_CAT_(a, b)
#define AG_OPT_IF_0(...)
#define AG_OPT_IF_1(...) __VA_ARGS__
/* AG_OPT_IF(cond)(tokens): the tokens when cond expands to 1 */
#define AG_OPT_IF(c) AG_OPT_CAT(AG_OPT_IF_, c)

#define AG_OPT_U_ENUM(ID, ...) AG_U_##ID,
#define AG_OPT_B_ENUM(ID, ...) AG_B_##ID,
#define AG_OPT_BWD_ENUM(ID, n, api, f, save, ...) AG_OPT_IF(AG_OPT_HAS_BWD_##save)(AG_B_##ID##_BWD, )
#define AG_OPT_PART_ENUM(ID, n, api, f, kind, grad, ...) \
  AG_OPT_IF(AG_OPT_PART_##grad)(AG_B_##ID##_DA, AG_B_##ID##_DB, )

#define AG_OPT_ONE(...) +1
typedef enum ag_unary_op { AG_UNARY_OPS(AG_OPT_U_ENUM) AG_UNARY_COUNT } ag_unary_op;

typedef enum ag_binary_op {
  AG_BINARY_OPS(AG_OPT_B_ENUM)
  AG_UNARY_OPS(AG_OPT_BWD_ENUM)
  AG_BINARY_OPS(AG_OPT_PART_ENUM)
  AG_BINARY_COUNT
} ag_binary_op;
/* The forward binary ops are the first AG_BINARY_FWD_COUNT. */
enum { AG_BINARY_FWD_COUNT = 0 AG_BINARY_OPS(AG_OPT_ONE) };

/* The sub-ops of the other kernel ops that kernels select by name. */
typedef enum ag_reduce_op { AG_R_SUM, AG_R_MAX, AG_R_MIN, AG_R_ARGMAX, AG_REDUCE_COUNT } ag_reduce_op;
typedef enum ag_pool_op { AG_P_MAX, AG_P_AVG, AG_P_ADAPTIVE_AVG, AG_POOL_OP_COUNT } ag_pool_op;

#endif

#endif
