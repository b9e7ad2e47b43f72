#version 450
// Every function of include/anygrad/pmath.h compiled as GLSL, run by
// tests/pmath_vulkan_test.c on the Vulkan device (lavapipe here): case f of
// the switch is the f-th function of that test's list.
#extension GL_GOOGLE_include_directive : require
#define AG_GLSL 1
#include "anygrad/pmath.h"

layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Xs { float xs[]; };
layout(std430, binding = 1) readonly buffer Ys { float ys[]; };
layout(std430, binding = 2) writeonly buffer Out { float outv[]; };
layout(push_constant) uniform Pc {
  int f;
  int n;
} pc;

void main() {
  int i = int(gl_GlobalInvocationID.x);
  if (i >= pc.n) return;
  float x = xs[i];
  float y = ys[i];
  precise float r = 0.0;
  switch (pc.f) {
  case 0: r = agp_exp(x); break;
  case 1: r = agp_exp2(x); break;
  case 2: r = agp_expm1(x); break;
  case 3: r = agp_log(x); break;
  case 4: r = agp_log1p(x); break;
  case 5: r = agp_tanh(x); break;
  case 6: r = agp_sigmoid(x); break;
  case 7: r = agp_erf(x); break;
  case 8: r = agp_sin(x); break;
  case 9: r = agp_cos(x); break;
  case 10: r = agp_sinh(x); break;
  case 11: r = agp_cosh(x); break;
  case 12: r = agp_sqrt(x); break;
  case 13: r = agp_rsqrt(x); break;
  case 14: r = agp_div(x, y); break;
  case 15: r = agp_pow(x, y); break;
  case 16: r = agp_atan2(x, y); break;
  case 17: r = agp_fmod(x, y); break;
  case 18: r = agp_div_built(x, y); break;
  case 19: r = agp_sqrt_built(x); break;
  case 20: r = agp_floor(x); break;
  case 21: r = agp_rint(x); break;
  case 22: r = agp_f16_bits_to_f32(agp_f32_to_f16_bits(x)); break;
  case 23: r = agp_bf16_bits_to_f32(agp_f32_to_bf16_bits(x)); break;
  }
  outv[i] = r;
}
