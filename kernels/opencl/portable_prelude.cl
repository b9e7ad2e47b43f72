/* Front of the portable-numerics program (docs/numerics.md): the host puts
 * this, include/anygrad/pmath.h and portable_vocab.cl in front of the
 * kernel sources and builds them with -DAG_PORTABLE (plus
 * -cl-fp32-correctly-rounded-divide-sqrt -DAGP_NATIVE_DIVSQRT where the
 * device reports CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT), never a fast-math
 * option. Every a*b + c stays two roundings. */
#pragma OPENCL FP_CONTRACT OFF
