/* The CPU's prelude to the portable math library (include/anygrad/pmath.h):
 * C's / and sqrtf are correctly rounded on every host anygrad builds for,
 * so pmath uses them natively. Included by the portable kernels and by the
 * test that checks them against its own references. */
#ifndef AG_CPU_PMATH_H
#define AG_CPU_PMATH_H

#define AGP_NATIVE_DIVSQRT 1
#include "anygrad/pmath.h"

#endif
