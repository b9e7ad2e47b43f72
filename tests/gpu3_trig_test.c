/* Single-precision sin and cos of the GPU kernels (kernels/gpu/trig.cuh),
 * run on gpuemu:0, against the double-precision libm result: at most 2 ulp
 * over a dense sample of every float (every 4099th bit pattern, which meets
 * every exponent), random bit patterns, the floats nearest to multiples of
 * pi/2 (the first 4096 and, for each binade from 1 up, the float nearest
 * to one of them), both sides of the boundary between the two argument
 * reductions, huge arguments, subnormals, zeros (sin keeps the sign), and
 * NaN for infinities and NaN. Forward through the unary kernel and cos
 * also through sin's backward (the binary kernel). The CPU backend keeps
 * libm's sinf and cosf bit for bit.
 *   gpu3_trig_test (AG_BACKEND_PATH names the gpuemu module's folder) */
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "anygrad/anygrad.h"

/* For each binade [2^k, 2^(k+1)), k = 0 .. 127, the float nearest to a
 * multiple of pi/2 (smallest min(|sin x|, |cos x|), found by an exhaustive
 * search with libm's double sin and cos). */
static const float g_hard[] = {
    0x1.921fb6p+0f, 0x1.921fb6p+1f, 0x1.2d97c8p+2f, 0x1.2d97c8p+3f, 0x1.2d97c8p+4f, 0x1.2d97c8p+5f, 0x1.2d97c8p+6f,
    0x1.f9cbe2p+7f, 0x1.f9cbe2p+8f, 0x1.f9cbe2p+9f, 0x1.f9cbe2p+10f, 0x1.17cc5p+11f, 0x1.17cc5p+12f, 0x1.17cc5p+13f,
    0x1.17cc5p+14f, 0x1.9a48dep+15f, 0x1.9a48dep+16f, 0x1.9a48dep+17f, 0x1.04ccbcp+18f, 0x1.04ccbcp+19f, 0x1.04ccbcp+20f,
    0x1.4ac55cp+21f, 0x1.4ac55cp+22f, 0x1.4ac55cp+23f, 0x1.e768f6p+24f, 0x1.4665d2p+25f, 0x1.4665d2p+26f, 0x1.4665d2p+27f,
    0x1.08ecc2p+28f, 0x1.27a94ap+29f, 0x1.27a94ap+30f, 0x1.1ffa28p+31f, 0x1.b7a65ep+32f, 0x1.ffa4e8p+33f, 0x1.47d0fep+34f,
    0x1.47d0fep+35f, 0x1.47d0fep+36f, 0x1.47d0fep+37f, 0x1.47d0fep+38f, 0x1.47d0fep+39f, 0x1.628d4cp+40f, 0x1.628d4cp+41f,
    0x1.628d4cp+42f, 0x1.628d4cp+43f, 0x1.628d4cp+44f, 0x1.f0eaeep+45f, 0x1.f0eaeep+46f, 0x1.f0eaeep+47f, 0x1.705312p+48f,
    0x1.705312p+49f, 0x1.b86d92p+50f, 0x1.dc7ad2p+51f, 0x1.ee8172p+52f, 0x1.f784c2p+53f, 0x1.fc066ap+54f, 0x1.fe473ep+55f,
    0x1.ff67a8p+56f, 0x1.0f79ap+57f, 0x1.0f79ap+58f, 0x1.0f79ap+59f, 0x1.0f79ap+60f, 0x1.0f79ap+61f, 0x1.0f79ap+62f,
    0x1.0f79ap+63f, 0x1.c82258p+64f, 0x1.c82258p+65f, 0x1.5619c2p+66f, 0x1.f8aad6p+67f, 0x1.a7624cp+68f, 0x1.a7624cp+69f,
    0x1.d83694p+70f, 0x1.d83694p+71f, 0x1.cc0182p+72f, 0x1.5c0e66p+73f, 0x1.5c0e66p+74f, 0x1.5c0e66p+75f, 0x1.13093p+76f,
    0x1.13093p+77f, 0x1.13093p+78f, 0x1.13093p+79f, 0x1.13093p+80f, 0x1.13093p+81f, 0x1.13093p+82f, 0x1.8dc776p+83f,
    0x1.8dc776p+84f, 0x1.32ede2p+85f, 0x1.32ede2p+86f, 0x1.32ede2p+87f, 0x1.32ede2p+88f, 0x1.abb4bp+89f, 0x1.abb4bp+90f,
    0x1.40c784p+91f, 0x1.0b50eep+92f, 0x1.0b50eep+93f, 0x1.0b50eep+94f, 0x1.f37c8ap+95f, 0x1.f37c8ap+96f, 0x1.f37c8ap+97f,
    0x1.f37c8ap+98f, 0x1.f37c8ap+99f, 0x1.f37c8ap+100f, 0x1.7f4134p+101f, 0x1.7f4134p+102f, 0x1.7f4134p+103f, 0x1.cc383p+104f,
    0x1.a5bcb2p+105f, 0x1.a5bcb2p+106f, 0x1.df43b8p+107f, 0x1.2928e2p+108f, 0x1.a0f9dp+109f, 0x1.484dd6p+110f, 0x1.b08c4ap+111f,
    0x1.b08c4ap+112f, 0x1.b08c4ap+113f, 0x1.517106p+114f, 0x1.80fea8p+115f, 0x1.80fea8p+116f, 0x1.20befep+117f, 0x1.f99756p+118f,
    0x1.2ceb8p+119f, 0x1.2ceb8p+120f, 0x1.d8660ap+121f, 0x1.fe037ap+122f, 0x1.fe037ap+123f, 0x1.fe037ap+124f, 0x1.fe037ap+125f,
    0x1.7b9b4p+126f, 0x1.7b9b4p+127f,
};

static float from_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static float *g_x;
static int64_t g_n;

static void push(float v) {
  g_x[g_n++] = v;
  g_x[g_n++] = -v;
}

static int setup(void **state) {
  (void)state;
  const uint32_t stride = 4099;
  int64_t cap = 2 * ((int64_t)(0x100000000ull / stride) + 1 + 65536 + 3 * 4096 + 64 +
                     (int64_t)(sizeof g_hard / sizeof g_hard[0]));
  g_x = malloc((size_t)cap * sizeof *g_x);
  assert_non_null(g_x);
  for (uint64_t u = 0; u < 0x100000000ull; u += stride) g_x[g_n++] = from_bits((uint32_t)u);
  uint64_t r = 0x9e3779b97f4a7c15ull;
  for (int i = 0; i < 65536; i++) {
    r ^= r << 13;
    r ^= r >> 7;
    r ^= r << 17;
    g_x[g_n++] = from_bits((uint32_t)(r >> 16));
  }
  for (int k = 1; k <= 4096; k++) {
    float v = (float)(k * 1.5707963267948966);
    push(v);
    push(nextafterf(v, 0.0f));
    push(nextafterf(v, INFINITY));
  }
  for (size_t i = 0; i < sizeof g_hard / sizeof g_hard[0]; i++) push(g_hard[i]);
  /* the two reductions meet at 105615 */
  float edge = 105615.0f;
  for (int i = 0; i < 4; i++) {
    push(edge);
    edge = nextafterf(edge, INFINITY);
  }
  push(nextafterf(105615.0f, 0.0f));
  const float special[] = {0.0f, 1e30f, 3.4e38f, FLT_MAX, FLT_MIN, 0x1p-149f, 0x1.fffffep-127f, 0x1p-130f, 1e-20f,
                           INFINITY, NAN, 0x1p23f, 0x1p24f, 0x1p64f, 0x1p100f, 0x1p127f, 1.5707964f, 3.1415927f,
                           4.712389f, 6.2831855f,
                           /* the largest errors over all floats (docs/gpu.md) */
                           0x1.8e0abap+121f, 0x1.29a27ep+16f};
  for (size_t i = 0; i < sizeof special / sizeof special[0]; i++) push(special[i]);
  assert_true(g_n <= cap);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  free(g_x);
  return 0;
}

/* |y - ref| in units in the last place of ref rounded to float. */
static double ulp_error(float y, double ref) {
  double a = fabs((double)(float)ref), u;
  if (a < 0x1p-126) {
    u = 0x1p-149;
  } else {
    int e;
    frexp(a, &e);
    u = ldexp(1.0, e - 24);
  }
  return fabs((double)y - ref) / u;
}

/* y[i] = f(x[i]) within 2 ulp for finite x, NaN for the others; sin keeps
 * the sign of zero. Returns the largest error. */
static double check(const char *what, const float *y, double (*f)(double), bool is_sin) {
  double worst = 0;
  float at = 0;
  for (int64_t i = 0; i < g_n; i++) {
    float x = g_x[i];
    if (!isfinite(x)) {
      if (!isnan(y[i])) fail_msg("%s(%a) = %a, not NaN", what, x, y[i]);
      continue;
    }
    if (x == 0.0f && is_sin && (y[i] != 0.0f || signbit(y[i]) != signbit(x)))
      fail_msg("%s(%a) = %a", what, x, y[i]);
    double e = ulp_error(y[i], f((double)x));
    if (!(e <= 2.0)) fail_msg("%s(%a) = %a, %.3f ulp from %a", what, x, y[i], e, f((double)x));
    if (e > worst) {
      worst = e;
      at = x;
    }
  }
  print_message("%s: %lld inputs, at most %.3f ulp (at %a)\n", what, (long long)g_n, worst, at);
  return worst;
}

static ag_tensor *upload(const char *dev) {
  ag_device d;
  if (ag_device_parse(dev, &d) != AG_OK) return NULL;
  return ag_from_host(d, AG_F32, 1, &g_n, g_x);
}

static void download(ag_tensor *t, float *out) {
  assert_non_null(t);
  if (ag_to_host(t, out, (size_t)g_n * sizeof *out) != AG_OK) fail_msg("ag_to_host: %s", ag_last_error());
}

static void gpuemu_within_2ulp(void **state) {
  (void)state;
  ag_tensor *x = upload("gpuemu:0");
  if (!x) {
    print_message("gpuemu:0: %s: skipped\n", ag_last_error());
    skip();
  }
  float *y = malloc((size_t)g_n * sizeof *y);
  assert_non_null(y);
  ag_tensor *s = ag_sin(x);
  download(s, y);
  check("gpuemu sin", y, sin, true);
  ag_tensor *c = ag_cos(x);
  download(c, y);
  check("gpuemu cos", y, cos, false);
  /* d sin(x)/dx = 1 * cos(x), through the binary kernel */
  assert_int_equal(ag_tensor_set_requires_grad(x, true), AG_OK);
  ag_tensor *loss = ag_sum(ag_sin(x), 0, NULL, false);
  assert_non_null(loss);
  if (ag_backward(loss, NULL, false) != AG_OK) fail_msg("ag_backward: %s", ag_last_error());
  download(ag_tensor_grad(x), y);
  check("gpuemu sin backward (cos)", y, cos, false);
  ag_tensor_release(loss);
  ag_tensor_release(c);
  ag_tensor_release(s);
  ag_tensor_release(x);
  free(y);
}

static void cpu_keeps_libm(void **state) {
  (void)state;
  ag_tensor *x = upload("cpu");
  assert_non_null(x);
  float *y = malloc((size_t)g_n * sizeof *y);
  assert_non_null(y);
  for (int op = 0; op < 2; op++) {
    ag_tensor *t = op ? ag_cos(x) : ag_sin(x);
    download(t, y);
    for (int64_t i = 0; i < g_n; i++) {
      float want = op ? cosf(g_x[i]) : sinf(g_x[i]);
      if (isnan(want) ? !isnan(y[i]) : memcmp(&want, &y[i], sizeof want) != 0)
        fail_msg("cpu %s(%a) = %a, libm %a", op ? "cos" : "sin", g_x[i], y[i], want);
    }
    ag_tensor_release(t);
  }
  ag_tensor_release(x);
  free(y);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(gpuemu_within_2ulp), cmocka_unit_test(cpu_keeps_libm)};
  return cmocka_run_group_tests(tests, setup, teardown);
}
