/* Bulk f16/bf16 <-> f32 conversion used by host-side kernels (CPU backend).
 * Same rounding as the scalar helpers of backend.h (round-to-nearest-even,
 * NaN kept quiet, subnormals exact); x86-64 uses F16C when the CPU has it. */
#ifndef AG_CORE_HALF_H
#define AG_CORE_HALF_H

#include <stddef.h>
#include <stdint.h>

#include <stdbool.h>

#include "anygrad/backend.h" /* the exported scalar conversions */
#include "hidden.h"

/* n elements from src to dst; buffers must not overlap. Never fail. */
AG_HIDDEN void ag__f16_to_f32_n(const uint16_t *src, float *dst, size_t n);
AG_HIDDEN void ag__f32_to_f16_n(const float *src, uint16_t *dst, size_t n);
AG_HIDDEN void ag__bf16_to_f32_n(const uint16_t *src, float *dst, size_t n);
AG_HIDDEN void ag__f32_to_bf16_n(const float *src, uint16_t *dst, size_t n);

/* Whether this x86-64 CPU and OS can run F16C (with the AVX register state
 * it needs). Asked through cpuid/xgetbv rather than
 * __builtin_cpu_supports("f16c"), which clang 14 does not know. Always false
 * off x86. Thread-safe; the answer is computed once. */
AG_HIDDEN bool ag__cpu_has_f16c(void);

/* The Philox4x32-10 block function with a full 128-bit counter and 64-bit
 * key (Random123 layout); ag_philox4x32 is this with ctr = (lo, hi, 0, 0). */
AG_HIDDEN void ag__philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);

#endif
