#version 450
/* f64 kernels, used only on devices with shaderFloat64 (the other modules
 * carry no double, so they run where it is absent): casts into and out of
 * f64, the op table's unary and binary ops in double (ops64.glsl), fills,
 * arange, reductions, variance, cumsum, softmax and its gradient, gather
 * and the embedding gradient. Double scalars come as the bits of a double
 * in n[46], n[47]. Loops walk a line in order, one invocation per output
 * (the CPU's summation order); the host refuses lines past the driver's
 * loop limit. */
#extension GL_ARB_gpu_shader_int64 : require
#include "common.glsl"
#include "ops64.glsl"
/* SignedZeroInfNanPreserve for f64 as well: glslang keeps one
 * spirv_execution_mode per mode (common.glsl's, for f32), so the build step
 * after glslc (backends/vulkan/vk_spirv_modes.c) adds it to every module
 * with Float64; the host removes it where the device lacks
 * shaderSignedZeroInfNanPreserveFloat64. */
layout(local_size_x = WG) in;

layout(buffer_reference, std430, buffer_reference_align = 8) buffer BF64 { double v; };
#define PD(a, i) BF64((a) + uint64_t(i) * 8ul).v

#define NUMEL pc.a.n[40]
#define ND int(pc.a.n[41])
#define S0 int64BitsToDouble(pc.a.n[46])
#define S1 int64BitsToDouble(pc.a.n[47])

/* Any dtype as double; double stored as any dtype: floats through f32 (as
 * the CPU converts), integers truncated and saturated (NaN 0), bool v != 0. */
double ldd(uint64_t a, int64_t i, int dt) {
  if (dt == AG_F64) return PD(a, i);
  if (is_int_dt(dt)) return double(ldl(a, i, dt));
  return double(ldf(a, i, dt));
}
void std_(uint64_t a, int64_t i, int dt, double v) {
  if (dt == AG_F64) PD(a, i) = v;
  else if (dt == AG_BOOL) PB(a, i) = uint8_t(v != 0.0LF ? 1u : 0u);
  else if (dt == AG_I32) PI(a, i) = ag_isnan(v) ? 0 : v >= 2147483648.0LF ? INT_MAX : v <= -2147483648.0LF ? INT_MIN : int(v);
  else if (dt == AG_I64)
    PL(a, i) = ag_isnan(v) ? 0l : v >= 9223372036854775808.0LF ? LONG_MAX : v <= -9223372036854775808.0LF ? LONG_MIN : int64_t(v);
  else if (dt == AG_U8) PB(a, i) = uint8_t(ag_isnan(v) || v <= 0.0LF ? 0u : v >= 255.0LF ? 255u : uint(v));
  else stf(a, i, dt, float(v));
}

#if defined(K_UNARY_D) || defined(K_BINARY_D) || defined(K_FILL_D)
/* the elementwise layout of ew.comp: shape n[0..7], strides of operand k at
 * n[8 + 8k + d]; nd 0 means contiguous */
void ew_offsets(int64_t i, int nop, out int64_t o[3]) {
  int nd = ND;
  for (int k = 0; k < 3; k++) o[k] = nd == 0 ? i : 0l;
  for (int d = nd - 1; d >= 0; d--) {
    int64_t sz = pc.a.n[d];
    int64_t c = i % sz;
    i /= sz;
    for (int k = 0; k < nop; k++) o[k] += c * pc.a.n[8 + 8 * k + d];
  }
}
#endif

#if defined(K_UNARY_D)
/* p0 out (k0), p1 x (k1): either is f64; COPY between dtypes is a cast */
void main() {
  int64_t i = gid();
  if (i >= NUMEL) return;
  int64_t off[3];
  ew_offsets(i, 2, off);
  double v = ldd(pc.a.p[1], off[1], pc.a.k[1]);
  std_(pc.a.p[0], off[0], pc.a.k[0], OP == AG_U_COPY ? v : unary_d(v, S0, S1));
}
#endif

#if defined(K_BINARY_D)
/* p0 out, p1 a, p2 b (f64); comparisons write bool */
void main() {
  int64_t i = gid();
  if (i >= NUMEL) return;
  int64_t off[3];
  ew_offsets(i, 3, off);
  double x = PD(pc.a.p[1], off[1]), y = PD(pc.a.p[2], off[2]);
  if (cmp_op()) {
    bool r = OP == AG_B_EQ ? x == y : OP == AG_B_NE ? x != y : OP == AG_B_GT ? x > y
           : OP == AG_B_GE ? x >= y : OP == AG_B_LT ? x < y : x <= y;
    PB(pc.a.p[0], off[0]) = uint8_t(r ? 1u : 0u);
  } else {
    PD(pc.a.p[0], off[0]) = binary_d(x, y, S0, S1);
  }
}
#endif

#if defined(K_FILL_D)
void main() {
  int64_t i = gid();
  if (i >= NUMEL) return;
  int64_t off[3];
  ew_offsets(i, 1, off);
  PD(pc.a.p[0], off[0]) = S0;
}
#endif

#if defined(K_ARANGE_D)
/* start + i * step in double */
void main() {
  int64_t i = gid();
  if (i < NUMEL) {
    precise double v = S0 + double(i) * S1;
    PD(pc.a.p[0], i) = v;
  }
}
#endif

#if defined(K_REDUCE_D)
/* p0 out (k0), p1 x over [n0 outer, n1 r, n2 inner]: sum times the scale
 * S0, max/min propagating NaN, argmax (k0 an integer dtype) the first NaN,
 * else the first maximum, 0 for an empty row */
void main() {
  int64_t t = gid(), outer = pc.a.n[0], r = pc.a.n[1], inner = pc.a.n[2];
  if (t >= outer * inner) return;
  int64_t base = (t / inner) * r * inner + t % inner;
  double acc = OP == AG_R_SUM ? 0.0LF : OP == AG_R_MIN ? D_INF : -D_INF;
  int64_t idx = 0;
  for (int64_t j = 0; j < r; j++) {
    double v = PD(pc.a.p[1], base + j * inner);
    if (OP == AG_R_SUM) acc += v;
    else if (OP == AG_R_ARGMAX) {
      if (j == 0 || (!ag_isnan(acc) && (ag_isnan(v) || v > acc))) {
        acc = v;
        idx = j;
      }
    } else if (OP == AG_R_MIN) acc = (v < acc || ag_isnan(v)) ? v : acc;
    else acc = (v > acc || ag_isnan(v)) ? v : acc;
  }
  if (OP == AG_R_ARGMAX) stl(pc.a.p[0], t, pc.a.k[0], idx);
  else PD(pc.a.p[0], t) = OP == AG_R_SUM ? acc * S0 : acc;
}
#endif

#if defined(K_VAR_D)
/* variance (k6 AG_KV_STD: the standard deviation) over [outer, r, inner]: the mean,
 * then centred squares, divided by S0 = r - correction */
void main() {
  int64_t t = gid(), outer = pc.a.n[0], r = pc.a.n[1], inner = pc.a.n[2];
  if (t >= outer * inner) return;
  int64_t base = (t / inner) * r * inner + t % inner;
  double s = 0.0LF;
  for (int64_t k = 0; k < r; k++) s += PD(pc.a.p[1], base + k * inner);
  double mu = s / double(r), v = 0.0LF;
  for (int64_t k = 0; k < r; k++) {
    double d = PD(pc.a.p[1], base + k * inner) - mu;
    v += d * d;
  }
  v /= S0;
  PD(pc.a.p[0], t) = pc.a.k[6] == AG_KV_STD ? sqrt(v) : v;
}
#endif

#if defined(K_CUMSUM_D)
/* an invocation per line, in order; k6 AG_KV_CUMSUM_SUFFIX: from the end */
void main() {
  int64_t t = gid(), outer = pc.a.n[0], r = pc.a.n[1], inner = pc.a.n[2];
  if (t >= outer * inner) return;
  int64_t base = (t / inner) * r * inner + t % inner;
  double s = 0.0LF;
  for (int64_t k = 0; k < r; k++) {
    int64_t p = base + (pc.a.k[6] == AG_KV_CUMSUM_SUFFIX ? r - 1 - k : k) * inner;
    s += PD(pc.a.p[1], p);
    PD(pc.a.p[0], p) = s;
  }
}
#endif

#if defined(K_SOFTMAX_D)
/* p0 y, p1 x, n0 rows, n1 cols, k6 the variant: an invocation per row */
void main() {
  int64_t row = gid(), C = pc.a.n[1];
  if (row >= pc.a.n[0]) return;
  int64_t b = row * C;
  double m = -D_INF, s = 0.0LF;
  for (int64_t j = 0; j < C; j++) {
    double v = PD(pc.a.p[1], b + j);
    m = (v > m || ag_isnan(v)) ? v : m;
  }
  for (int64_t j = 0; j < C; j++) s += d_exp(PD(pc.a.p[1], b + j) - m);
  double ls = d_log(s);
  for (int64_t j = 0; j < C; j++) {
    double v = PD(pc.a.p[1], b + j) - m;
    PD(pc.a.p[0], b + j) = pc.a.k[6] == AG_KV_LOG_SOFTMAX ? v - ls : d_exp(v) / s;
  }
}
#endif

#if defined(K_SOFTMAX_BWD_D)
/* p0 dx, p1 dy, p2 y: softmax dx = y (dy - sum(dy y)); log: dy - exp(y) sum(dy) */
void main() {
  int64_t row = gid(), C = pc.a.n[1];
  if (row >= pc.a.n[0]) return;
  int64_t b = row * C;
  bool lg = pc.a.k[6] == AG_KV_LOG_SOFTMAX;
  double s = 0.0LF;
  for (int64_t j = 0; j < C; j++) {
    double g = PD(pc.a.p[1], b + j);
    s += lg ? g : g * PD(pc.a.p[2], b + j);
  }
  for (int64_t j = 0; j < C; j++) {
    double g = PD(pc.a.p[1], b + j), y = PD(pc.a.p[2], b + j);
    PD(pc.a.p[0], b + j) = lg ? g - d_exp(y) * s : y * (g - s);
  }
}
#endif

#if defined(K_GATHER_D) || defined(K_GATHER_BWD_D)
/* nn.comp's layout: p0 out / dx, p1 x / dout, p2 index (k3) with strides
 * n4 n5 n6; n0 O, n1 K, n2 I, n3 X; p7 error word */
int64_t gidx(int64_t o, int64_t k, int64_t i) {
  return ld_index(pc.a.p[2], o * pc.a.n[4] + k * pc.a.n[5] + i * pc.a.n[6], pc.a.k[3]);
}
#endif

#if defined(K_GATHER_D)
void main() {
  int64_t t = gid(), O = pc.a.n[0], K = pc.a.n[1], I = pc.a.n[2], X = pc.a.n[3];
  if (t >= O * K * I) return;
  int64_t i = t % I, ok = t / I, k = ok % K, o = ok / K;
  int64_t j = gidx(o, k, i);
  if (j < 0 || j >= X) {
    PD(pc.a.p[0], t) = 0.0LF;
    set_error(pc.a.p[7], AG_ERR_INDEX, AG_K_GATHER, j, X);
  } else {
    PD(pc.a.p[0], t) = PD(pc.a.p[1], (o * X + j) * I + i);
  }
}
#endif

#if defined(K_GATHER_BWD_D)
/* an invocation per (o, i) line: zeroed, then dout added in order of k */
void main() {
  int64_t t = gid(), O = pc.a.n[0], K = pc.a.n[1], I = pc.a.n[2], X = pc.a.n[3];
  if (t >= O * I) return;
  int64_t o = t / I, i = t % I, base = o * X * I + i;
  for (int64_t j = 0; j < X; j++) PD(pc.a.p[0], base + j * I) = 0.0LF;
  for (int64_t k = 0; k < K; k++) {
    int64_t j = gidx(o, k, i);
    if (j >= 0 && j < X) PD(pc.a.p[0], base + j * I) += PD(pc.a.p[1], (o * K + k) * I + i);
  }
}
#endif

#if defined(K_EMB_BWD_D)
/* p0 dtable (+=), p1 dout, p2 index (k3); n0 n, n1 d, n2 v; rows n3 ..
 * n3 + n4: an invocation per column walks the rows in order */
void main() {
  int64_t col = gid(), d = pc.a.n[1], v = pc.a.n[2];
  if (col >= d) return;
  for (int64_t r = pc.a.n[3]; r < pc.a.n[3] + pc.a.n[4]; r++) {
    int64_t t = ld_index(pc.a.p[2], r, pc.a.k[3]);
    if (t >= 0 && t < v) PD(pc.a.p[0], t * d + col) += PD(pc.a.p[1], r * d + col);
    else if (col == 0) set_error(pc.a.p[7], AG_ERR_INDEX, AG_K_EMBEDDING_BWD, t, v);
  }
}
#endif

#if defined(K_GEMM_D)
/* o[b] = S0 * x[b] @ y[b] + S1 * o[b] (o not read where S1 == 0): an
 * invocation per output, K in order. n0 M, n1 N, n2 K; x strides n3 (batch,
 * 0 when shared) n4 n5, y's n6 n7 n8; o contiguous [B, M, N]. */
void main() {
  int64_t t = gid(), M = pc.a.n[0], N = pc.a.n[1], K = pc.a.n[2];
  if (t >= pc.a.n[9] * M * N) return;
  int64_t j = t % N, i = (t / N) % M, b = t / (M * N);
  int64_t xo = b * pc.a.n[3] + i * pc.a.n[4], yo = b * pc.a.n[6] + j * pc.a.n[8];
  double acc = 0.0LF;
  for (int64_t k = 0; k < K; k++) acc += PD(pc.a.p[1], xo + k * pc.a.n[5]) * PD(pc.a.p[2], yo + k * pc.a.n[7]);
  double r = S0 * acc;
  if (S1 != 0.0LF) r += S1 * PD(pc.a.p[0], t);
  PD(pc.a.p[0], t) = r;
}
#endif

/* Layer and RMS norm of f64 rows (nn.comp's layouts, eps S0, mean and rstd
 * f64): an invocation per row; the weight gradients an invocation per
 * column over rows n2 .. n2 + n3, continuing the sums after the first
 * chunk. */
#if defined(K_LN_D)
void main() {
  int64_t row = gid(), C = pc.a.n[1], b = row * C;
  if (row >= pc.a.n[0]) return;
  uint64_t x = pc.a.p[1], w = pc.a.p[2], bi = pc.a.p[3];
  double s = 0.0LF;
  for (int64_t j = 0; j < C; j++) s += PD(x, b + j);
  double mu = s / double(C), v = 0.0LF;
  for (int64_t j = 0; j < C; j++) {
    double d = PD(x, b + j) - mu;
    v += d * d;
  }
  double rs = 1.0LF / sqrt(v / double(C) + S0);
  for (int64_t j = 0; j < C; j++) {
    double o = (PD(x, b + j) - mu) * rs;
    if (w != 0ul) o *= PD(w, j);
    if (bi != 0ul) o += PD(bi, j);
    PD(pc.a.p[0], b + j) = o;
  }
  if (pc.a.p[4] != 0ul) PD(pc.a.p[4], row) = mu;
  if (pc.a.p[5] != 0ul) PD(pc.a.p[5], row) = rs;
}
#endif

#if defined(K_LN_BWD_D)
void main() {
  int64_t row = gid(), C = pc.a.n[1], b = row * C;
  if (row >= pc.a.n[0]) return;
  uint64_t w = pc.a.p[5];
  double mu = PD(pc.a.p[3], row), rs = PD(pc.a.p[4], row), s1 = 0.0LF, s2 = 0.0LF;
  for (int64_t j = 0; j < C; j++) {
    double g = PD(pc.a.p[1], b + j) * (w != 0ul ? PD(w, j) : 1.0LF);
    s1 += g;
    s2 += g * (PD(pc.a.p[2], b + j) - mu) * rs;
  }
  s1 /= double(C);
  s2 /= double(C);
  for (int64_t j = 0; j < C; j++) {
    double g = PD(pc.a.p[1], b + j) * (w != 0ul ? PD(w, j) : 1.0LF);
    double xh = (PD(pc.a.p[2], b + j) - mu) * rs;
    PD(pc.a.p[0], b + j) = rs * (g - s1 - xh * s2);
  }
}
#endif

#if defined(K_LN_BWD_WB_D)
void main() {
  int64_t j = gid(), C = pc.a.n[1];
  if (j >= C) return;
  bool cont = pc.a.n[2] > 0;
  double sw = cont && pc.a.p[0] != 0ul ? PD(pc.a.p[0], j) : 0.0LF;
  double sb = cont && pc.a.p[1] != 0ul ? PD(pc.a.p[1], j) : 0.0LF;
  for (int64_t r = pc.a.n[2]; r < pc.a.n[2] + pc.a.n[3]; r++) {
    double g = PD(pc.a.p[2], r * C + j);
    sw += g * (PD(pc.a.p[3], r * C + j) - PD(pc.a.p[4], r)) * PD(pc.a.p[5], r);
    sb += g;
  }
  if (pc.a.p[0] != 0ul) PD(pc.a.p[0], j) = sw;
  if (pc.a.p[1] != 0ul) PD(pc.a.p[1], j) = sb;
}
#endif

#if defined(K_RMS_D)
void main() {
  int64_t row = gid(), C = pc.a.n[1], b = row * C;
  if (row >= pc.a.n[0]) return;
  uint64_t x = pc.a.p[1], w = pc.a.p[2];
  double s = 0.0LF;
  for (int64_t j = 0; j < C; j++) s += PD(x, b + j) * PD(x, b + j);
  double rs = 1.0LF / sqrt(s / double(C) + S0);
  for (int64_t j = 0; j < C; j++) {
    double o = PD(x, b + j) * rs;
    if (w != 0ul) o *= PD(w, j);
    PD(pc.a.p[0], b + j) = o;
  }
  if (pc.a.p[3] != 0ul) PD(pc.a.p[3], row) = rs;
}
#endif

#if defined(K_RMS_BWD_D)
void main() {
  int64_t row = gid(), C = pc.a.n[1], b = row * C;
  if (row >= pc.a.n[0]) return;
  uint64_t w = pc.a.p[4];
  double rs = PD(pc.a.p[3], row), s = 0.0LF;
  for (int64_t j = 0; j < C; j++) s += PD(pc.a.p[1], b + j) * (w != 0ul ? PD(w, j) : 1.0LF) * PD(pc.a.p[2], b + j);
  s = s / double(C) * rs * rs;
  for (int64_t j = 0; j < C; j++) {
    double g = PD(pc.a.p[1], b + j) * (w != 0ul ? PD(w, j) : 1.0LF);
    PD(pc.a.p[0], b + j) = rs * (g - PD(pc.a.p[2], b + j) * s);
  }
}
#endif

#if defined(K_RMS_BWD_W_D)
void main() {
  int64_t j = gid(), C = pc.a.n[1];
  if (j >= C) return;
  double sw = pc.a.n[2] > 0 ? PD(pc.a.p[0], j) : 0.0LF;
  for (int64_t r = pc.a.n[2]; r < pc.a.n[2] + pc.a.n[3]; r++)
    sw += PD(pc.a.p[1], r * C + j) * PD(pc.a.p[2], r * C + j) * PD(pc.a.p[3], r);
  PD(pc.a.p[0], j) = sw;
}
#endif
