/* Helpers shared by every anygrad Vulkan compute shader: the argument block,
 * typed access to device addresses (buffer device address, so no descriptor
 * sets and no maxStorageBufferRange limit), dtype loads and stores (half
 * types are storage only, compute is f32), Philox and the error word.
 * The host (backends/vulkan/vk_launch.c) fills vkb_args with the layout of
 * Args below; enum names come from ag_enums.glsl, generated from the C
 * headers at build time. */
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
#extension GL_EXT_shader_8bit_storage : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_int8 : require
#extension GL_EXT_shader_explicit_arithmetic_types_int16 : require
#extension GL_EXT_spirv_intrinsics : require

/* NaN, infinities and the sign of zero are data here (NaN propagates
 * through max, an overflow must be seen by the AMP check, attention masks
 * with -inf): every module declares SPIR-V's SignedZeroInfNanPreserve
 * execution mode (capability 4466, mode 4461; Vulkan 1.2 float controls)
 * for f32, so no driver may assume them away in arithmetic and
 * comparisons. The host removes the declaration on a device without
 * shaderSignedZeroInfNanPreserveFloat32, where only the explicit tests
 * below hold. f64.comp declares it for f64 too. */
spirv_execution_mode(capabilities = [4466], 4461, 32);

#include "ag_enums.glsl"

/* Work-group size of 1-D and row kernels (the host's VKB_WG). */
#define WG 256

/* One argument block per dispatch, written by the host into the batch's
 * host-visible arena; its address is the only push constant. */
layout(buffer_reference, std430, buffer_reference_align = 16) readonly buffer Args {
  uint64_t p[8];  /* operand addresses (base + offset), 0 when absent */
  int64_t n[64];  /* sizes, strides and integer scalars */
  float f[16];    /* float scalars */
  int k[16];      /* dtypes and flags */
};
layout(push_constant) uniform PC { Args a; } pc;

layout(buffer_reference, std430, buffer_reference_align = 4) buffer BF32 { float v; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer BI32 { int v; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer BU32 { uint v; };
layout(buffer_reference, std430, buffer_reference_align = 8) buffer BI64 { int64_t v; };
layout(buffer_reference, std430, buffer_reference_align = 2) buffer BU16 { uint16_t v; };
layout(buffer_reference, std430, buffer_reference_align = 1) buffer BU8 { uint8_t v; };
/* The error word (ag_kernel_error): code, kop, index, limit. */
layout(buffer_reference, std430, buffer_reference_align = 8) buffer BErr {
  int code;
  int kop;
  int64_t index;
  int64_t limit;
};

#define PF(a, i) BF32((a) + uint64_t(i) * 4ul).v
#define PI(a, i) BI32((a) + uint64_t(i) * 4ul).v
#define PU(a, i) BU32((a) + uint64_t(i) * 4ul).v
#define PL(a, i) BI64((a) + uint64_t(i) * 8ul).v
#define PH(a, i) BU16((a) + uint64_t(i) * 2ul).v
#define PB(a, i) BU8((a) + uint64_t(i)).v

/* Linear id of a 1-D launch over a 2-D grid (the host splits large counts
 * across y, since x is limited to 65535 groups on some devices). */
int64_t gid() {
  return (int64_t(gl_WorkGroupID.y) * int64_t(gl_NumWorkGroups.x) + int64_t(gl_WorkGroupID.x)) * WG +
         int64_t(gl_LocalInvocationID.x);
}
int64_t group_id() { return int64_t(gl_WorkGroupID.y) * int64_t(gl_NumWorkGroups.x) + int64_t(gl_WorkGroupID.x); }

bool is_int_dt(int dt) { return dt == AG_I32 || dt == AG_I64 || dt == AG_BOOL || dt == AG_U8; }

#define F_INF uintBitsToFloat(0x7f800000u)
#define F_NAN uintBitsToFloat(0x7fc00000u)
#define F_NEG_ZERO uintBitsToFloat(0x80000000u)

/* NaN and infinity tests on the bits: integer operations that no
 * floating-point assumption of a compiler can fold away (GLSL's isnan and
 * isinf, or x != x, may be folded to false where NaN is not preserved). */
bool ag_isnan(float x) { return (floatBitsToUint(x) & 0x7fffffffu) > 0x7f800000u; }
bool ag_isinf(float x) { return (floatBitsToUint(x) & 0x7fffffffu) == 0x7f800000u; }
bool ag_isfinite(float x) { return (floatBitsToUint(x) & 0x7f800000u) != 0x7f800000u; }
bool ag_is_neg_inf(float x) { return floatBitsToUint(x) == 0xff800000u; }
bool ag_signbit(float x) { return (floatBitsToUint(x) & 0x80000000u) != 0u; }
/* |x| with the sign of s */
float ag_copysign(float x, float s) {
  return uintBitsToFloat((floatBitsToUint(x) & 0x7fffffffu) | (floatBitsToUint(s) & 0x80000000u));
}
/* The larger of a and b, a NaN ignored unless both are (C's fmax; GLSL's
 * max is undefined for NaN): the row maximum of softmax and attention,
 * where a NaN reaches the output through the arithmetic, as on the CPU. */
float ag_fmax(float a, float b) { return ag_isnan(b) ? a : ag_isnan(a) || b > a ? b : a; }
const int INT_MAX = 2147483647;
const int INT_MIN = -2147483647 - 1;
const int64_t LONG_MAX = 9223372036854775807l;
const int64_t LONG_MIN = -9223372036854775807l - 1l;

float bf16_to_f(uint b) { return uintBitsToFloat(b << 16); }
/* Round to nearest even; NaN stays NaN (quiet bit forced). */
uint f_to_bf16(float f) {
  uint u = floatBitsToUint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (u >> 16) | 0x40u;
  u += 0x7fffu + ((u >> 16) & 1u);
  return u >> 16;
}
/* The core's ag_f32_to_f16 / ag_f16_to_f32 (core/tensor/half.c), bit for
 * bit, independent of the device's denormal handling. */
uint f_to_f16(float f) {
  uint x = floatBitsToUint(f);
  uint sign = (x >> 16) & 0x8000u;
  uint ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) return sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u | ((ax >> 13) & 0x3ffu) : 0u);
  if (ax >= 0x477ff000u) return sign | 0x7c00u;
  if (ax < 0x38800000u) {
    if (ax < 0x33000000u) return sign;
    uint e = ax >> 23;
    uint m = (ax & 0x7fffffu) | 0x800000u;
    uint shift = 126u - e;
    uint q = m >> shift;
    uint rem = m & ((1u << shift) - 1u);
    uint hf = 1u << (shift - 1u);
    if (rem > hf || (rem == hf && (q & 1u) != 0u)) q++;
    return sign | q;
  }
  uint odd = (ax >> 13) & 1u;
  ax += 0xc8000fffu + odd;
  return (sign | (ax >> 13)) & 0xffffu;
}
float f16_to_f(uint h) {
  uint sign = (h & 0x8000u) << 16;
  uint e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0u) {
    if (m == 0u) return uintBitsToFloat(sign);
    /* subnormal: m * 2^-24, exact in f32 */
    float v = float(m) * 5.9604644775390625e-8;
    return sign != 0u ? -v : v;
  }
  if (e == 31u) return uintBitsToFloat(sign | 0x7f800000u | (m << 13));
  return uintBitsToFloat(sign | ((e + 112u) << 23) | (m << 13));
}

/* Truncating, saturating conversions (NaN 0), as OpenCL's *_sat_rtz. */
int sat_f2i(float v) {
  if (ag_isnan(v)) return 0;
  if (v >= 2147483648.0) return INT_MAX;
  if (v <= -2147483648.0) return INT_MIN;
  return int(v);
}
int64_t sat_f2l(float v) {
  if (ag_isnan(v)) return 0l;
  if (v >= 9223372036854775808.0) return LONG_MAX;
  if (v <= -9223372036854775808.0) return LONG_MIN;
  return int64_t(v);
}
uint sat_f2u8(float v) {
  if (ag_isnan(v) || v <= 0.0) return 0u;
  if (v >= 255.0) return 255u;
  return uint(v);
}

float ldf(uint64_t a, int64_t i, int dt) {
  if (dt == AG_F16) return f16_to_f(uint(PH(a, i)));
  if (dt == AG_BF16) return bf16_to_f(uint(PH(a, i)));
  if (dt == AG_I32) return float(PI(a, i));
  if (dt == AG_I64) return float(PL(a, i));
  if (dt == AG_BOOL || dt == AG_U8) return float(uint(PB(a, i)));
  return PF(a, i);
}

void stf(uint64_t a, int64_t i, int dt, float v) {
  if (dt == AG_F16) PH(a, i) = uint16_t(f_to_f16(v));
  else if (dt == AG_BF16) PH(a, i) = uint16_t(f_to_bf16(v));
  else if (dt == AG_I32) PI(a, i) = sat_f2i(v);
  else if (dt == AG_I64) PL(a, i) = sat_f2l(v);
  else if (dt == AG_U8) PB(a, i) = uint8_t(sat_f2u8(v));
  else if (dt == AG_BOOL) PB(a, i) = uint8_t(v != 0.0 ? 1u : 0u);
  else PF(a, i) = v;
}

/* Integer dtypes in the i64 compute type: loads widen, stores keep the low
 * bits (two's complement wrap), bool stores v != 0. Floating sources load
 * truncated and saturated. */
int64_t ldl(uint64_t a, int64_t i, int dt) {
  if (dt == AG_I32) return int64_t(PI(a, i));
  if (dt == AG_I64) return PL(a, i);
  if (dt == AG_BOOL || dt == AG_U8) return int64_t(uint(PB(a, i)));
  return sat_f2l(ldf(a, i, dt));
}

void stl(uint64_t a, int64_t i, int dt, int64_t v) {
  if (dt == AG_I32) PI(a, i) = int(v);
  else if (dt == AG_I64) PL(a, i) = v;
  else if (dt == AG_U8) PB(a, i) = uint8_t(uint(v & 255l));
  else if (dt == AG_BOOL) PB(a, i) = uint8_t(v != 0l ? 1u : 0u);
  else stf(a, i, dt, float(v));
}

int64_t sat_dt(int64_t v, int dt) {
  if (dt == AG_I32) return v > int64_t(INT_MAX) ? int64_t(INT_MAX) : v < int64_t(INT_MIN) ? int64_t(INT_MIN) : v;
  if (dt == AG_U8) return v > 255l ? 255l : v < 0l ? 0l : v;
  if (dt == AG_BOOL) return v != 0l ? 1l : 0l;
  return v;
}

/* An index operand (i32 or i64) as i64. */
int64_t ld_index(uint64_t a, int64_t i, int dt) { return dt == AG_I64 ? PL(a, i) : int64_t(PI(a, i)); }

/* First error wins; the host reads the word after a stream sync. */
void set_error(uint64_t err, int code, int kop, int64_t index, int64_t limit) {
  if (err == 0ul) return;
  BErr e = BErr(err);
  if (atomicCompSwap(e.code, 0, code) == 0) {
    e.kop = kop;
    e.index = index;
    e.limit = limit;
  }
}

/* Philox 4x32-10 on counter (ctr lo, ctr hi, 0, 0), key (seed lo, seed hi):
 * core/tensor/philox.c. */
uvec4 philox(uint64_t ctr, uint64_t seed) {
  uint c0 = uint(ctr), c1 = uint(ctr >> 32), c2 = 0u, c3 = 0u;
  uint k0 = uint(seed), k1 = uint(seed >> 32);
  for (int r = 0; r < 10; r++) {
    uint hi0, lo0, hi1, lo1;
    umulExtended(0xD2511F53u, c0, hi0, lo0);
    umulExtended(0xCD9E8D57u, c2, hi1, lo1);
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return uvec4(c0, c1, c2, c3);
}

/* Work-group reductions over WG invocations; all must call them. */
shared float sh_f[WG];
float wg_sum(float v) {
  uint l = gl_LocalInvocationID.x;
  sh_f[l] = v;
  barrier();
  for (uint s = WG / 2; s > 0u; s >>= 1) {
    if (l < s) sh_f[l] += sh_f[l + s];
    barrier();
  }
  float r = sh_f[0];
  barrier();
  return r;
}
/* NaN ignored unless every value is NaN (ag_fmax) */
float wg_max(float v) {
  uint l = gl_LocalInvocationID.x;
  sh_f[l] = v;
  barrier();
  for (uint s = WG / 2; s > 0u; s >>= 1) {
    if (l < s) sh_f[l] = ag_fmax(sh_f[l], sh_f[l + s]);
    barrier();
  }
  float r = sh_f[0];
  barrier();
  return r;
}
