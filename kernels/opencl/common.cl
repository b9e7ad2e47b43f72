/* Helpers shared by every anygrad OpenCL kernel: dtype loads and stores
 * (half types are storage only, compute is f32), bf16 rounding, Philox and
 * the per-stream error word. The host joins all .cl files into one program. */

#ifdef AG_FP64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif

/* No fused multiply-add behind our back: results stay equal to the CPU
 * backend's, which compiles without contraction on baseline x86-64. */
#pragma OPENCL FP_CONTRACT OFF

#define DT_F32 0
#define DT_F16 1
#define DT_BF16 2
#define DT_I32 3
#define DT_F64 4 /* only with AG_FP64 (cl_khr_fp64): f64.cl */
#define DT_I64 5
#define DT_BOOL 6
#define DT_U8 7

bool is_int_dt(int dt) { return dt == DT_I32 || dt == DT_I64 || dt == DT_BOOL || dt == DT_U8; }

/* Must equal the host's local size for row kernels (a power of two). */
#ifndef AG_WG
#define AG_WG 256
#endif

typedef __global uchar gbuf;

/* Matches the host struct in backends/opencl/cl_internal.h. */
typedef struct ew_meta {
  long shape[8];
  long st[4][8];
} ew_meta;

float bf16_to_f(ushort b) { return as_float(((uint)b) << 16); }

/* Round to nearest even; NaN stays NaN (quiet bit forced). */
ushort f_to_bf16(float f) {
  uint u = as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (ushort)((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (ushort)(u >> 16);
}

float ldf(const gbuf *b, ulong off, long i, int dt) {
  const gbuf *p = b + off;
  switch (dt) {
    case DT_F16: return vload_half((size_t)i, (const __global half *)p);
    case DT_BF16: return bf16_to_f(((const __global ushort *)p)[i]);
    case DT_I32: return (float)((const __global int *)p)[i];
    case DT_I64: return (float)((const __global long *)p)[i];
    case DT_BOOL:
    case DT_U8: return (float)((const __global uchar *)p)[i];
#ifdef AG_FP64
    case DT_F64: return (float)((const __global double *)p)[i];
#endif
    default: return ((const __global float *)p)[i];
  }
}

void stf(gbuf *b, ulong off, long i, int dt, float v) {
  gbuf *p = b + off;
  switch (dt) {
    case DT_F16: vstore_half_rte(v, (size_t)i, (__global half *)p); break;
    case DT_BF16: ((__global ushort *)p)[i] = f_to_bf16(v); break;
    case DT_I32: ((__global int *)p)[i] = convert_int_sat_rtz(v); break;
    /* saturating conversions give 0 for NaN; bool is v != 0 (NaN true) */
    case DT_I64: ((__global long *)p)[i] = convert_long_sat_rtz(v); break;
    case DT_U8: ((__global uchar *)p)[i] = convert_uchar_sat_rtz(v); break;
    case DT_BOOL: ((__global uchar *)p)[i] = v != 0.0f; break;
    default: ((__global float *)p)[i] = v; break;
  }
}

/* Integer dtypes in the i64 compute type: loads widen, stores keep the low
 * bits (two's complement wrap), bool stores v != 0. Floating sources load
 * truncated and saturated. */
long ldl(const gbuf *b, ulong off, long i, int dt) {
  const gbuf *p = b + off;
  switch (dt) {
    case DT_I32: return ((const __global int *)p)[i];
    case DT_I64: return ((const __global long *)p)[i];
    case DT_BOOL:
    case DT_U8: return ((const __global uchar *)p)[i];
    default: return convert_long_sat_rtz(ldf(b, off, i, dt));
  }
}

void stl(gbuf *b, ulong off, long i, int dt, long v) {
  gbuf *p = b + off;
  switch (dt) {
    case DT_I32: ((__global int *)p)[i] = (int)v; break;
    case DT_I64: ((__global long *)p)[i] = v; break;
    case DT_U8: ((__global uchar *)p)[i] = (uchar)v; break;
    case DT_BOOL: ((__global uchar *)p)[i] = v != 0; break;
    default: stf(b, off, i, dt, (float)v); break;
  }
}

/* v saturated into integer dtype dt's range (bool: v != 0). */
long sat_dt(long v, int dt) {
  switch (dt) {
    case DT_I32: return v > INT_MAX ? INT_MAX : v < INT_MIN ? INT_MIN : v;
    case DT_U8: return v > 255 ? 255 : v < 0 ? 0 : v;
    case DT_BOOL: return v != 0;
    default: return v;
  }
}

int ldi(const gbuf *b, ulong off, long i, int dt) {
  if (dt == DT_I32) return ((const __global int *)(b + off))[i];
  return convert_int_sat_rtz(ldf(b, off, i, dt));
}

void sti(gbuf *b, ulong off, long i, int v) { ((__global int *)(b + off))[i] = v; }

/* Element offsets of operands 0..nop-1 for flat index i; nd == 0 means all
 * operands are contiguous (the host collapsed them). */
void ew_offsets(long i, int nd, const ew_meta *m, int nop, long *o) {
  for (int k = 0; k < nop; k++) o[k] = nd == 0 ? i : 0;
  for (int d = nd - 1; d >= 0; d--) {
    long c = i % m->shape[d];
    i /= m->shape[d];
    for (int k = 0; k < nop; k++) o[k] += c * m->st[k][d];
  }
}

/* First error wins; the host reads the word after a stream sync. Layout of
 * ag_kernel_error: int code, int kop, long index, long limit. ERR_INDEX is
 * AG_ERR_INDEX (status.h, pinned in cl_launch.c). */
#define ERR_INDEX 8
void set_error(__global int *err, int code, int kop, long index, long limit) {
  if (err && atomic_cmpxchg(err, 0, code) == 0) {
    err[1] = kop;
    ((__global long *)(err + 2))[0] = index;
    ((__global long *)(err + 2))[1] = limit;
  }
}

/* Philox 4x32-10 on counter (ctr lo, ctr hi, 0, 0), key (seed lo, seed hi). */
uint4 philox(ulong ctr, ulong seed) {
  uint c0 = (uint)ctr, c1 = (uint)(ctr >> 32), c2 = 0, c3 = 0;
  uint k0 = (uint)seed, k1 = (uint)(seed >> 32);
  for (int r = 0; r < 10; r++) {
    uint hi0 = mul_hi(0xD2511F53u, c0), lo0 = 0xD2511F53u * c0;
    uint hi1 = mul_hi(0xCD9E8D57u, c2), lo1 = 0xCD9E8D57u * c2;
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return (uint4)(c0, c1, c2, c3);
}

uint lane4(uint4 v, int l) { return l == 0 ? v.x : l == 1 ? v.y : l == 2 ? v.z : v.w; }

/* Work-group reductions; every work-item of the group must call them. */
float wg_sum(float v, __local float *sh) {
  int l = get_local_id(0);
  sh[l] = v;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int s = get_local_size(0) / 2; s > 0; s >>= 1) {
    if (l < s) sh[l] += sh[l + s];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  float r = sh[0];
  barrier(CLK_LOCAL_MEM_FENCE);
  return r;
}

float wg_max(float v, __local float *sh) {
  int l = get_local_id(0);
  sh[l] = v;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int s = get_local_size(0) / 2; s > 0; s >>= 1) {
    if (l < s) sh[l] = fmax(sh[l], sh[l + s]);
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  float r = sh[0];
  barrier(CLK_LOCAL_MEM_FENCE);
  return r;
}
