/* ns per element of each function of include/anygrad/pmath.h in a plain C
 * loop over 4096 floats (the loops a CPU backend's portable kernels run),
 * against glibc's float function on the same inputs; best of 9 runs.
 * Built with -ffp-contract=off (required) and -fno-math-errno
 * -fno-trapping-math (value-safe; they let gcc vectorise the selects).
 *   pmath_bench */
#include <math.h>
#include <stdio.h>
#include <time.h>

#define AGP_NATIVE_DIVSQRT 1
#include "anygrad/pmath.h"

#define N 4096
static float g_x[N], g_y[N], g_out[N];

static double now(void) {
  struct timespec t;
  timespec_get(&t, TIME_UTC);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* x in [-3, 3) (log, log1p, sqrt, pow: |x| + 0.1), y in [-4, 4) */
#define LOOP(fname, expr)                                                                  \
  __attribute__((noinline)) static void fname(const float *xs, const float *ys, float *o) { \
    for (int i = 0; i < N; i++) {                                                          \
      float x = xs[i], y = ys[i], ax = fabsf(x) + 0.1f;                                    \
      (void)y;                                                                             \
      (void)ax;                                                                            \
      o[i] = (expr);                                                                       \
    }                                                                                      \
  }
#define FUNCS(X)                                                      \
  X(exp, agp_exp(x), expf(x))                                         \
  X(exp2, agp_exp2(x), exp2f(x))                                      \
  X(expm1, agp_expm1(x), expm1f(x))                                   \
  X(log, agp_log(ax), logf(ax))                                       \
  X(log1p, agp_log1p(ax), log1pf(ax))                                 \
  X(tanh, agp_tanh(x), tanhf(x))                                      \
  X(sigmoid, agp_sigmoid(x), 1.0f / (1.0f + expf(-x)))                \
  X(erf, agp_erf(x), erff(x))                                         \
  X(sin, agp_sin(x), sinf(x))                                         \
  X(cos, agp_cos(x), cosf(x))                                         \
  X(sinh, agp_sinh(x), sinhf(x))                                      \
  X(cosh, agp_cosh(x), coshf(x))                                      \
  X(pow, agp_pow(ax, y), powf(ax, y))                                 \
  X(atan2, agp_atan2(x, y), atan2f(x, y))                             \
  X(fmod, agp_fmod(x, y), fmodf(x, y))                                \
  X(rsqrt, agp_rsqrt(ax), 1.0f / sqrtf(ax))                           \
  X(div_built, agp_div_built(x, y), x / y)                            \
  X(sqrt_built, agp_sqrt_built(ax), sqrtf(ax))
#define DEF(name, mine, ref) LOOP(p_##name, mine) LOOP(r_##name, ref)
FUNCS(DEF)

typedef void (*loop_fn)(const float *, const float *, float *);
static double best_ns(loop_fn f) {
  double best = 1e30;
  for (int rep = 0; rep < 9; rep++) {
    double t0 = now();
    for (int it = 0; it < 50; it++) f(g_x, g_y, g_out);
    double t = (now() - t0) / (50.0 * N) * 1e9;
    if (t < best) best = t;
  }
  return best;
}

int main(void) {
  unsigned s = 12345;
  for (int i = 0; i < N; i++) {
    s = s * 1664525u + 1013904223u;
    g_x[i] = (float)(s >> 8) * 0x1p-24f * 6.0f - 3.0f;
    s = s * 1664525u + 1013904223u;
    g_y[i] = (float)(s >> 8) * 0x1p-24f * 8.0f - 4.0f;
  }
  printf("%-11s %10s %10s\n", "function", "pmath ns", "glibc ns");
#define RUN(name, mine, ref) printf("%-11s %10.2f %10.2f\n", #name, best_ns(p_##name), best_ns(r_##name));
  FUNCS(RUN)
  return 0;
}
