/* include/anygrad/pmath.h compiled as CUDA device code (tests/pmath.cmake,
 * with the CUDA backend): every function of the portable math library
 * called once. */
#define AGP_NATIVE_DIVSQRT 1
#include "anygrad/pmath.h"

__global__ void pmath_check(float *v) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  float x = v[2 * i], y = v[2 * i + 1];
  float r = agp_exp(x) + agp_exp2(x) + agp_expm1(x) + agp_log(x) + agp_log1p(x) + agp_tanh(x) +
            agp_sigmoid(x) + agp_erf(x) + agp_sin(x) + agp_cos(x) + agp_sinh(x) + agp_cosh(x) + agp_sqrt(x) +
            agp_rsqrt(x) + agp_div(x, y) + agp_div_built(x, y) + agp_sqrt_built(y) + agp_pow(x, y) +
            agp_atan2(x, y) + agp_fmod(x, y) + agp_floor(x) + agp_ceil(x) + agp_trunc(x) + agp_rint(x) +
            agp_abs(x) + agp_f16_bits_to_f32(agp_f32_to_f16_bits(x)) + agp_bf16_bits_to_f32(agp_f32_to_bf16_bits(y));
  v[2 * i] = r;
}
