/* Elementwise kernels: fill, arange, Philox random, unary (with casts),
 * binary, where and dropout. Shapes are collapsed on the host (size-1 dims
 * dropped, dims contiguous in every operand merged); when every operand is
 * then contiguous and 16-byte aligned, threads move 16 bytes per load,
 * otherwise one element at a time through strides (32-bit index math when
 * the element count allows). */
#include "common.cuh"
#include "trig.cuh"

#define AGK_EW_MAXOPS 4
#define AGK_EW_THREADS 256

typedef struct agk_ew {
  int ndim, nops, i32idx;
  long long numel;
  long long shape[AG_MAX_DIMS];
  long long st[AGK_EW_MAXOPS][AG_MAX_DIMS];
  char *p[AGK_EW_MAXOPS];
} agk_ew;

/* Collapse the operands ops[0 .. nops) (the first gives the shape) into d.
 * Returns true when every operand is contiguous after collapsing. */
static bool ew_build(const ag_koperand *const *ops, int nops, agk_ew *d) {
  const ag_koperand *o0 = ops[0];
  int nd = 0;
  long long numel = 1;
  for (int k = 0; k < nops; k++) d->p[k] = agk_ptr(ops[k]);
  /* innermost first, then reversed */
  long long sh[AG_MAX_DIMS], st[AGK_EW_MAXOPS][AG_MAX_DIMS];
  for (int i = o0->ndim - 1; i >= 0; i--) {
    long long n = o0->shape[i];
    numel *= n;
    if (n == 1) continue;
    bool merge = nd > 0;
    for (int k = 0; k < nops && merge; k++)
      merge = ops[k]->strides[i] == st[k][nd - 1] * sh[nd - 1];
    if (merge) {
      sh[nd - 1] *= n;
    } else {
      sh[nd] = n;
      for (int k = 0; k < nops; k++) st[k][nd] = ops[k]->strides[i];
      nd++;
    }
  }
  d->ndim = nd;
  d->nops = nops;
  d->numel = numel;
  for (int i = 0; i < nd; i++) {
    d->shape[i] = sh[nd - 1 - i];
    for (int k = 0; k < nops; k++) d->st[k][i] = st[k][nd - 1 - i];
  }
  d->i32idx = numel < 0x7fffffffLL;
  if (nd == 0) return true;
  if (nd > 1) return false;
  for (int k = 0; k < nops; k++)
    if (d->st[k][0] != 1) return false;
  return true;
}

static bool aligned(const agk_ew *d, int nops, size_t align) {
  for (int k = 0; k < nops; k++)
    if ((uintptr_t)d->p[k] % align) return false;
  return true;
}

static unsigned ew_grid(const agk_env *env, long long work) {
  long long cap = (long long)(env->sm_count > 0 ? env->sm_count : 80) * 16;
  long long b = (work + AGK_EW_THREADS - 1) / AGK_EW_THREADS;
  if (b > cap) b = cap;
  return b < 1 ? 1 : (unsigned)b;
}

/* Element offsets of linear index i for every operand. */
AGK_DEV void ew_offsets(const agk_ew &d, long long i, long long *off) {
  for (int k = 0; k < AGK_EW_MAXOPS; k++) off[k] = 0;
  if (d.i32idx) {
    unsigned r = (unsigned)i;
    for (int dim = d.ndim - 1; dim >= 0; dim--) {
      unsigned n = (unsigned)d.shape[dim], q = r / n, x = r - q * n;
      r = q;
      for (int k = 0; k < AGK_EW_MAXOPS; k++)
        if (k < d.nops) off[k] += (long long)x * d.st[k][dim];
    }
  } else {
    long long r = i;
    for (int dim = d.ndim - 1; dim >= 0; dim--) {
      long long n = d.shape[dim], q = r / n, x = r - q * n;
      r = q;
      for (int k = 0; k < AGK_EW_MAXOPS; k++)
        if (k < d.nops) off[k] += x * d.st[k][dim];
    }
  }
}

template <typename T, int V> struct alignas(sizeof(T) * V) agk_pack { T v[V]; };

/* ---- ops ---- */

/* The op table's expression language (include/anygrad/optable.h) in CUDA/HIP
 * C++ for compute type C: single precision (f32, f16, bf16) or double (f64),
 * each function overloaded on the two. Single-precision sin and cos are
 * trig.cuh's: the vendors' sinf/cosf put a stack frame in every kernel of
 * the op switch. */
#define AGK_E1(name, f32, f64)                                 \
  AGK_DEV float name(float v) { return f32; }                  \
  AGK_DEV double name(double v) { return f64; }
AGK_E1(e_exp, expf(v), exp(v))
AGK_E1(e_log, logf(v), log(v))
AGK_E1(e_sqrt, sqrtf(v), sqrt(v))
AGK_E1(e_rsqrt, 1.0f / sqrtf(v), 1.0 / sqrt(v))
AGK_E1(e_tanh, tanhf(v), tanh(v))
AGK_E1(e_sigmoid, 1.0f / (1.0f + expf(-v)), 1.0 / (1.0 + exp(-v)))
AGK_E1(e_erf, erff(v), erf(v))
AGK_E1(e_sin, agk_sinf(v), sin(v))
AGK_E1(e_cos, agk_cosf(v), cos(v))
AGK_E1(e_log1p, log1pf(v), log1p(v))
AGK_E1(e_expm1, expm1f(v), expm1(v))
AGK_E1(e_floor, floorf(v), floor(v))
AGK_E1(e_ceil, ceilf(v), ceil(v))
AGK_E1(e_rint, rintf(v), rint(v))
AGK_E1(e_abs, fabsf(v), fabs(v))
#undef AGK_E1
AGK_DEV float e_pow(float u, float v) { return powf(u, v); }
AGK_DEV double e_pow(double u, double v) { return pow(u, v); }
AGK_DEV float e_atan2(float u, float v) { return atan2f(u, v); }
AGK_DEV double e_atan2(double u, double v) { return atan2(u, v); }
AGK_DEV float e_fmod(float u, float v) { return fmodf(u, v); }
AGK_DEV double e_fmod(double u, double v) { return fmod(u, v); }
#define E_K(c) ((C)(c))
#define E_EXP(v) e_exp((C)(v))
#define E_LOG(v) e_log((C)(v))
#define E_SQRT(v) e_sqrt((C)(v))
#define E_RSQRT(v) e_rsqrt((C)(v))
#define E_TANH(v) e_tanh((C)(v))
#define E_SIGMOID(v) e_sigmoid((C)(v))
#define E_ERF(v) e_erf((C)(v))
#define E_SIN(v) e_sin((C)(v))
#define E_COS(v) e_cos((C)(v))
#define E_LOG1P(v) e_log1p((C)(v))
#define E_EXPM1(v) e_expm1((C)(v))
#define E_FLOOR(v) e_floor((C)(v))
#define E_CEIL(v) e_ceil((C)(v))
#define E_RINT(v) e_rint((C)(v))
#define E_ABS(v) e_abs((C)(v))
#define E_POW(u, v) e_pow((C)(u), (C)(v))
#define E_ATAN2(u, v) e_atan2((C)(u), (C)(v))
#define E_FMOD(u, v) e_fmod((C)(u), (C)(v))
#define E_DIV(u, v) ((C)(u) / (C)(v))
#define GPU_SAVE_NG(v)
#define GPU_SAVE_N(v)
#define GPU_SAVE_X(v) const C x = v;
#define GPU_SAVE_Y(v) const C y = v;
#define GPU_UNARY_CASE(ID, name, api, fwd, ...) \
  case AG_U_##ID: return (fwd);
#define GPU_BINARY_CASE(ID, name, api, fwd, ...) \
  case AG_B_##ID: return (fwd);
#define GPU_BWD_CASE(ID, name, api, fwd, save, bwd, ...)                                    \
  AG_OPT_IF(AG_OPT_HAS_BWD_##save)(case AG_B_##ID##_BWD: {                                  \
    const C g = a;                                                                           \
    GPU_SAVE_##save(b)(void) g;                                                              \
    return (bwd);                                                                            \
  })
#define GPU_PART_CASE(ID, name, api, fwd, kind, grad, da, db, ...) \
  AG_OPT_IF(AG_OPT_PART_##grad)(case AG_B_##ID##_DA: return (da); case AG_B_##ID##_DB: return (db);)

/* Every unary sub-op of the table; NaN for one outside it (the core
 * refuses those before launch). */
template <typename C> AGK_DEV C unary_f(int op, C x, C s0, C s1) {
  switch (op) {
    AG_UNARY_OPS(GPU_UNARY_CASE)
  }
  return NAN;
}
/* Every binary sub-op: forward, unary backward, partial derivatives. */
template <typename C> AGK_DEV C binary_f(int op, C a, C b, C s0, C s1) {
  (void)s1;
  switch (op) {
    AG_BINARY_OPS(GPU_BINARY_CASE)
    AG_UNARY_OPS(GPU_BWD_CASE)
    AG_BINARY_OPS(GPU_PART_CASE)
  }
  return NAN;
}
/* The integer rules of the table's INT entries; a sub-op outside them
 * gives 0 (never reached: supports() refuses it). */
static_assert(AG_UNARY_INT_COUNT == 4, "unary_i/unary_l implement COPY, NEG, ABS, AFFINE");
static_assert(AG_BINARY_INT_COUNT == 11, "binary_i/binary_l and k_compare implement ADD..MIN and the comparisons");

/* i32: two's complement wrap-around, in unsigned arithmetic; AFFINE from
 * the call's exact integer scalars i0, i1 (kops.h) */
AGK_DEV int32_t unary_i(int op, int32_t x, long long i0, long long i1) {
  switch (op) {
    case AG_U_COPY: return x;
    case AG_U_NEG: return (int32_t)(0u - (uint32_t)x);
    case AG_U_ABS: return x < 0 ? (int32_t)(0u - (uint32_t)x) : x;
    case AG_U_AFFINE: return (int32_t)((uint32_t)x * (uint32_t)i0 + (uint32_t)i1);
  }
  return 0;
}

AGK_DEV int32_t binary_i(int op, int32_t a, int32_t b, double s0) {
  switch (op) {
    case AG_B_ADD:
      if (s0 == (double)(int32_t)s0) return (int32_t)((uint32_t)a + (uint32_t)(int32_t)s0 * (uint32_t)b);
      return agk_sat_i32((double)a + s0 * (double)b);
    case AG_B_SUB: return (int32_t)((uint32_t)a - (uint32_t)b);
    case AG_B_MUL: return (int32_t)((uint32_t)a * (uint32_t)b);
    case AG_B_MAX: return a > b ? a : b;
    case AG_B_MIN: return a < b ? a : b;
    case AG_B_EQ: return a == b;
    case AG_B_GT: return a > b;
    case AG_B_LT: return a < b;
  }
  return 0;
}

/* i64 compute for i64/u8/bool storage: wrap-around in the storage width,
 * AFFINE from the exact integer scalars i0, i1 */
template <typename T> AGK_DEV T unary_l(int op, T xs, long long i0, long long i1) {
  long long x = agk_toi(xs);
  switch (op) {
    case AG_U_COPY: return xs;
    case AG_U_NEG: return agk_fromi<T>((long long)(0ull - (unsigned long long)x));
    case AG_U_ABS: return agk_fromi<T>(x < 0 ? (long long)(0ull - (unsigned long long)x) : x);
    case AG_U_AFFINE:
      return agk_fromi<T>((long long)((unsigned long long)x * (unsigned long long)i0 + (unsigned long long)i1));
  }
  return agk_fromi<T>(0);
}
template <typename T> AGK_DEV T binary_l(int op, T as, T bs, double s0) {
  long long a = agk_toi(as), b = agk_toi(bs);
  unsigned long long ua = (unsigned long long)a, ub = (unsigned long long)b;
  switch (op) {
    case AG_B_ADD:
      if (s0 == (double)(int32_t)s0) return agk_fromi<T>((long long)(ua + (unsigned long long)(long long)(int32_t)s0 * ub));
      return agk_sat<T>((double)a + s0 * (double)b);
    case AG_B_SUB: return agk_fromi<T>((long long)(ua - ub));
    case AG_B_MUL: return agk_fromi<T>((long long)(ua * ub));
    case AG_B_MAX: return a > b ? as : bs;
    case AG_B_MIN: return a < b ? as : bs;
  }
  return agk_fromi<T>(0);
}

/* Functors: apply(out, in...) on one element, all pointer-typed. */
template <typename TO, typename TI> struct UnaryOp {
  int op;
  float s0, s1;
  double d0, d1;
  long long i0, i1; /* integer AFFINE's exact scalars (the i32 specialisation's) */
  /* the compute type's scalars: (float)d0 is s0 */
  AGK_DEV TO operator()(TI x) const {
    typedef agk_c<TI> C;
    return agk_fromf<TO>(unary_f<C>(op, agk_tof(x), (C)d0, (C)d1));
  }
};
template <> struct UnaryOp<int32_t, int32_t> {
  int op;
  float s0, s1;
  double d0, d1;
  long long i0, i1;
  AGK_DEV int32_t operator()(int32_t x) const { return unary_i(op, x, i0, i1); }
};
template <typename T> struct UnaryOpL {
  int op;
  long long i0, i1;
  AGK_DEV T operator()(T x) const { return unary_l<T>(op, x, i0, i1); }
};
template <typename T> struct BinaryOpL {
  int op;
  double d0;
  AGK_DEV T operator()(T a, T b) const { return binary_l<T>(op, a, b, d0); }
};
template <typename T> struct BinaryOp {
  int op;
  float s0, s1;
  double d0, d1;
  AGK_DEV T operator()(T a, T b) const {
    typedef agk_c<T> C;
    return agk_fromf<T>(binary_f<C>(op, agk_tof(a), agk_tof(b), (C)d0, (C)d1));
  }
};
template <> struct BinaryOp<int32_t> {
  int op;
  float s0, s1;
  double d0, d1;
  AGK_DEV int32_t operator()(int32_t a, int32_t b) const { return binary_i(op, a, b, d0); }
};

/* ---- unary ---- */
/* Casts: integers through i64 (exact between integer dtypes), floats
 * through f32, f64 through f64 (saturating into integers; bool is x != 0). */
template <typename TO, typename TI> struct CastOp {
  AGK_DEV TO operator()(TI x) const { return agk_narrow<TO>(agk_widen(x)); }
};
/* Same-dtype COPY moves the storage bits unchanged. */
template <typename T> struct RawCopy {
  AGK_DEV T operator()(T x) const { return x; }
};

template <typename TO, typename TI, int V, typename F>
__global__ void k_unary_vec(TO *o, const TI *a, long long n, F f) {
  long long nv = n / V, stride = (long long)gridDim.x * blockDim.x;
  long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  for (long long i = t; i < nv; i += stride) {
    agk_pack<TI, V> x = ((const agk_pack<TI, V> *)a)[i];
    agk_pack<TO, V> y;
#pragma unroll
    for (int j = 0; j < V; j++) y.v[j] = f(x.v[j]);
    ((agk_pack<TO, V> *)o)[i] = y;
  }
  for (long long i = nv * V + t; i < n; i += stride) o[i] = f(a[i]);
}
template <typename TO, typename TI, typename F>
__global__ void k_unary_strided(agk_ew d, F f) {
  long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < d.numel; i += stride) {
    long long off[AGK_EW_MAXOPS];
    ew_offsets(d, i, off);
    ((TO *)d.p[0])[off[0]] = f(((const TI *)d.p[1])[off[1]]);
  }
}

template <typename TO, typename TI, typename F>
static gpuError_t unary_run(const agk_env *env, const ag_k_unary *a, F f) {
  const ag_koperand *ops[2] = {a->y, a->x};
  agk_ew d;
  bool contig = ew_build(ops, 2, &d);
  if (d.numel == 0) return gpuSuccess;
  const int V = 16 / (sizeof(TO) > sizeof(TI) ? sizeof(TO) : sizeof(TI));
  if (contig && aligned(&d, 1, sizeof(TO) * V) && (uintptr_t)d.p[1] % (sizeof(TI) * V) == 0) {
    agk_launch(k_unary_vec<TO, TI, V, F>, ew_grid(env, d.numel / V + 1), AGK_EW_THREADS, 0, env->stream, 
        (TO *)d.p[0], (const TI *)d.p[1], d.numel, f);
  } else {
    agk_launch(k_unary_strided<TO, TI, F>, ew_grid(env, d.numel), AGK_EW_THREADS, 0, env->stream, d, f);
  }
  return gpuGetLastError();
}
/* Casts that involve i64, u8 or bool: the strided kernel only (it covers
 * contiguous operands as one dim). Half the instantiations of the 42 cast
 * pairs; these casts are not on any hot path. */
template <typename TO, typename TI> static gpuError_t cast_strided(const agk_env *env, const ag_k_unary *a) {
  const ag_koperand *ops[2] = {a->y, a->x};
  agk_ew d;
  ew_build(ops, 2, &d);
  if (d.numel == 0) return gpuSuccess;
  agk_launch(k_unary_strided<TO, TI, CastOp<TO, TI> >, ew_grid(env, d.numel), AGK_EW_THREADS, 0, env->stream, d,
             CastOp<TO, TI>());
  return gpuGetLastError();
}
template <typename T> static gpuError_t unary_l_go(const agk_env *env, const ag_k_unary *a) {
  UnaryOpL<T> f;
  f.op = a->variant;
  f.i0 = a->i0;
  f.i1 = a->i1;
  return unary_run<T, T>(env, a, f);
}
template <typename TO, typename TI> static gpuError_t unary_go(const agk_env *env, const ag_k_unary *a) {
  UnaryOp<TO, TI> f;
  f.op = a->variant;
  f.s0 = (float)a->s0;
  f.s1 = (float)a->s1;
  f.d0 = a->s0;
  f.d1 = a->s1;
  f.i0 = a->i0;
  f.i1 = a->i1;
  return unary_run<TO, TI>(env, a, f);
}

gpuError_t agk_unary(const agk_env *env, const ag_k_unary *a) {
  ag_dtype to = a->y->dtype, ti = a->x->dtype;
  if (to != ti && a->variant != AG_U_COPY) return gpuErrorNotSupported;
  if (to == ti && a->variant == AG_U_COPY) {
    if (to == AG_F32 || to == AG_I32) return unary_run<uint32_t, uint32_t>(env, a, RawCopy<uint32_t>());
    if (to == AG_F16 || to == AG_BF16) return unary_run<uint16_t, uint16_t>(env, a, RawCopy<uint16_t>());
    if (to == AG_I64 || to == AG_F64) return unary_run<uint64_t, uint64_t>(env, a, RawCopy<uint64_t>());
    if (to == AG_U8 || to == AG_BOOL) return unary_run<uint8_t, uint8_t>(env, a, RawCopy<uint8_t>());
  }
  /* the op switch is instantiated per dtype only; casts get a lean functor */
  if (to == ti && (to == AG_I64 || to == AG_U8 || to == AG_BOOL)) {
    AGK_DISPATCH_INT64(to, T, return unary_l_go<T>(env, a));
  }
  if (to == ti) {
    AGK_DISPATCH_ALL(to, T, return unary_go<T, T>(env, a));
  }
  if (ti == AG_I64 || ti == AG_U8 || ti == AG_BOOL) {
    AGK_DISPATCH_EVERY(to, TO, AGK_DISPATCH_INT64(ti, TI, return cast_strided<TO, TI>(env, a)));
  }
  if (to == AG_I64 || to == AG_U8 || to == AG_BOOL) {
    AGK_DISPATCH_INT64(to, TO, AGK_DISPATCH_ALL(ti, TI, return cast_strided<TO, TI>(env, a)));
  }
  AGK_DISPATCH_ALL(to, TO, AGK_DISPATCH_ALL(ti, TI, return unary_run<TO, TI>(env, a, CastOp<TO, TI>())));
  return gpuErrorNotSupported;
}

/* ---- binary ---- */
template <typename T, int V, typename F>
__global__ void k_binary_vec(T *o, const T *a, const T *b, long long n, F f) {
  long long nv = n / V, stride = (long long)gridDim.x * blockDim.x;
  long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  for (long long i = t; i < nv; i += stride) {
    agk_pack<T, V> x = ((const agk_pack<T, V> *)a)[i], y = ((const agk_pack<T, V> *)b)[i], z;
#pragma unroll
    for (int j = 0; j < V; j++) z.v[j] = f(x.v[j], y.v[j]);
    ((agk_pack<T, V> *)o)[i] = z;
  }
  for (long long i = nv * V + t; i < n; i += stride) o[i] = f(a[i], b[i]);
}
template <typename T, typename F> __global__ void k_binary_strided(agk_ew d, F f) {
  long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < d.numel; i += stride) {
    long long off[AGK_EW_MAXOPS];
    ew_offsets(d, i, off);
    ((T *)d.p[0])[off[0]] = f(((const T *)d.p[1])[off[1]], ((const T *)d.p[2])[off[2]]);
  }
}
template <typename T, typename F> static gpuError_t binary_run(const agk_env *env, const ag_k_binary *a, F f) {
  const ag_koperand *ops[3] = {a->out, a->a, a->b};
  agk_ew d;
  bool contig = ew_build(ops, 3, &d);
  if (d.numel == 0) return gpuSuccess;
  const int V = 16 / sizeof(T);
  if (contig && aligned(&d, 3, 16)) {
    agk_launch(k_binary_vec<T, V, F>, ew_grid(env, d.numel / V + 1), AGK_EW_THREADS, 0, env->stream, 
        (T *)d.p[0], (const T *)d.p[1], (const T *)d.p[2], d.numel, f);
  } else {
    agk_launch(k_binary_strided<T, F>, ew_grid(env, d.numel), AGK_EW_THREADS, 0, env->stream, d, f);
  }
  return gpuGetLastError();
}
template <typename T> static gpuError_t binary_go(const agk_env *env, const ag_k_binary *a) {
  BinaryOp<T> f;
  f.op = a->variant;
  f.s0 = (float)a->s0;
  f.s1 = (float)a->s1;
  f.d0 = a->s0;
  f.d1 = a->s1;
  return binary_run<T>(env, a, f);
}
template <typename T> static gpuError_t binary_l_go(const agk_env *env, const ag_k_binary *a) {
  BinaryOpL<T> f;
  f.op = a->variant;
  f.d0 = a->s0;
  return binary_run<T>(env, a, f);
}

/* Comparisons: inputs of any dtype compared in their compute type (f32 for
 * f32/f16/bf16, f64 for f64, i64 for integers), output bool. */
template <typename V> AGK_DEV bool cmp_v(int op, V a, V b) {
  switch (op) {
    case AG_B_EQ: return a == b;
    case AG_B_NE: return a != b;
    case AG_B_GT: return a > b;
    case AG_B_GE: return a >= b;
    case AG_B_LT: return a < b;
    case AG_B_LE: return a <= b;
  }
  return false;
}
template <typename T> __global__ void k_compare(agk_ew d, int op) {
  long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < d.numel; i += stride) {
    long long off[AGK_EW_MAXOPS];
    ew_offsets(d, i, off);
    ((uint8_t *)d.p[0])[off[0]] =
        cmp_v(op, agk_widen(((const T *)d.p[1])[off[1]]), agk_widen(((const T *)d.p[2])[off[2]])) ? 1 : 0;
  }
}
static bool is_compare(int op) {
  const ag_binary_info *b = ag_binary_info_of(op);
  return b && b->compare;
}

gpuError_t agk_binary(const agk_env *env, const ag_k_binary *a) {
  if (is_compare(a->variant)) {
    const ag_koperand *ops[3] = {a->out, a->a, a->b};
    agk_ew d;
    ew_build(ops, 3, &d);
    if (d.numel == 0) return gpuSuccess;
    AGK_DISPATCH_EVERY(a->a->dtype, T,
                       agk_launch(k_compare<T>, ew_grid(env, d.numel), AGK_EW_THREADS, 0, env->stream, d, a->variant));
    return gpuGetLastError();
  }
  ag_dtype dt = a->out->dtype;
  if (dt == AG_I64 || dt == AG_U8 || dt == AG_BOOL) {
    AGK_DISPATCH_INT64(dt, T, return binary_l_go<T>(env, a));
  }
  AGK_DISPATCH_ALL(dt, T, return binary_go<T>(env, a));
  return gpuErrorNotSupported;
}

/* ---- where ---- */
template <typename T, typename TC> __global__ void k_where(agk_ew d) {
  long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < d.numel; i += stride) {
    long long off[AGK_EW_MAXOPS];
    ew_offsets(d, i, off);
    bool cond = agk_widen(((const TC *)d.p[1])[off[1]]) != 0;
    ((T *)d.p[0])[off[0]] = cond ? ((const T *)d.p[2])[off[2]] : ((const T *)d.p[3])[off[3]];
  }
}
gpuError_t agk_where(const agk_env *env, const ag_k_where *a) {
  const ag_koperand *ops[4] = {a->out, a->cond, a->a, a->b};
  agk_ew d;
  ew_build(ops, 4, &d);
  if (d.numel == 0) return gpuSuccess;
  /* Only the element size matters when selecting, so storage is moved as
   * same-sized integers; the condition is read in its own dtype. */
  unsigned g = ew_grid(env, d.numel);
  ag_dtype dt = a->out->dtype;
  size_t es = dt == AG_F32 || dt == AG_I32 ? 4 : dt == AG_I64 || dt == AG_F64 ? 8 : dt == AG_U8 || dt == AG_BOOL ? 1 : 2;
  AGK_DISPATCH_EVERY(a->cond->dtype, TC,
                   if (es == 4) agk_launch(k_where<int32_t, TC>, g, AGK_EW_THREADS, 0, env->stream, d);
                   else if (es == 8) agk_launch(k_where<uint64_t, TC>, g, AGK_EW_THREADS, 0, env->stream, d);
                   else if (es == 1) agk_launch(k_where<uint8_t, TC>, g, AGK_EW_THREADS, 0, env->stream, d);
                   else agk_launch(k_where<uint16_t, TC>, g, AGK_EW_THREADS, 0, env->stream, d));
  return gpuGetLastError();
}

/* ---- fill, arange ---- */
template <typename T> __global__ void k_fill(agk_ew d, T v) {
  long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < d.numel; i += stride) {
    long long off[AGK_EW_MAXOPS];
    ew_offsets(d, i, off);
    ((T *)d.p[0])[off[0]] = v;
  }
}
template <typename T, int V> __global__ void k_fill_vec(T *o, long long n, T v) {
  long long nv = n / V, stride = (long long)gridDim.x * blockDim.x;
  long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  agk_pack<T, V> pk;
#pragma unroll
  for (int j = 0; j < V; j++) pk.v[j] = v;
  for (long long i = t; i < nv; i += stride) ((agk_pack<T, V> *)o)[i] = pk;
  for (long long i = nv * V + t; i < n; i += stride) o[i] = v;
}
/* The value's storage bits are computed once on the host, rounding to
 * nearest even like every kernel's stores. */
template <typename T> static gpuError_t fill_go(const agk_env *env, const ag_k_fill *a, T v) {
  agk_ew d;
  bool contig = ew_build(&a->out, 1, &d);
  if (d.numel == 0) return gpuSuccess;
  const int V = 16 / sizeof(T);
  if (contig && aligned(&d, 1, 16))
    agk_launch(k_fill_vec<T, V>, ew_grid(env, d.numel / V + 1), AGK_EW_THREADS, 0, env->stream, (T *)d.p[0], d.numel, v);
  else
    agk_launch(k_fill<T>, ew_grid(env, d.numel), AGK_EW_THREADS, 0, env->stream, d, v);
  return gpuGetLastError();
}
static uint16_t host_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}
static uint16_t host_f16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
  x &= 0x7fffffffu;
  if (x > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((x >> 13) & 0x3ffu));
  if (x >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds to inf */
  if (x < 0x38800000u) {                                    /* half subnormal */
    if (x <= 0x33000000u) return sign;
    uint32_t e = x >> 23, mant = (x & 0x7fffffu) | 0x800000u, shift = 126 - e;
    uint32_t r = mant >> shift, rem = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1u))) r++;
    return (uint16_t)(sign | r);
  }
  uint32_t r = (x - 0x38000000u) >> 13, rem = x & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) r++;
  return (uint16_t)(sign | r);
}
gpuError_t agk_fill(const agk_env *env, const ag_k_fill *a) {
  float f = (float)a->value;
  switch (a->out->dtype) {
    case AG_F32: return fill_go<float>(env, a, f);
    case AG_F64: return fill_go<double>(env, a, a->value);
    case AG_I32: return fill_go<int32_t>(env, a, (int32_t)a->value);
    /* saturated as a cast from a floating value (host copies of agk_sat) */
    case AG_I64: {
      double v = a->value;
      int64_t x = !(v == v) ? 0 : v >= 9223372036854775807.0 ? INT64_MAX : v <= -9223372036854775808.0 ? INT64_MIN : (int64_t)v;
      return fill_go<int64_t>(env, a, x);
    }
    case AG_U8: {
      double v = a->value;
      return fill_go<uint8_t>(env, a, (uint8_t)(!(v > 0) ? 0 : v >= 255 ? 255 : (int)v));
    }
    case AG_BOOL: return fill_go<uint8_t>(env, a, (uint8_t)(a->value != 0));
    case AG_BF16: {
      agk_bf16 v;
      v.x = host_bf16(f);
      return fill_go<agk_bf16>(env, a, v);
    }
    case AG_F16: {
      agk_f16 v;
      v.x = host_f16(f);
      return fill_go<agk_f16>(env, a, v);
    }
    default: return gpuErrorNotSupported;
  }
}

template <typename T> __global__ void k_arange(T *o, long long n, double start, double step) {
  long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    o[i] = agk_narrow<T>((float)(start + (double)i * step));
}
template <> __global__ void k_arange<double>(double *o, long long n, double start, double step) {
  long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) o[i] = start + (double)i * step;
}
template <> __global__ void k_arange<int32_t>(int32_t *o, long long n, double start, double step) {
  long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    o[i] = (int32_t)(start + (double)i * step);
}
template <> __global__ void k_arange<int64_t>(int64_t *o, long long n, double start, double step) {
  long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    o[i] = agk_sat<int64_t>(start + (double)i * step);
}
gpuError_t agk_arange(const agk_env *env, const ag_k_arange *a) {
  long long n = a->out->ndim ? a->out->shape[0] : 1;
  if (n == 0) return gpuSuccess;
  AGK_DISPATCH_EVERY(a->out->dtype, T,
                     agk_launch(k_arange<T>, agk_blocks(n, 256, 256, agk_wave(env, 256)), 256, 0, env->stream,
                                (T *)agk_ptr(a->out), n, a->start, a->step));
  return gpuGetLastError();
}

/* ---- random ---- */
/* Box-Muller on one pair of 32-bit lanes; mirrors the CPU reference. */
AGK_DEV float agk_normal(uint32_t a, uint32_t b) {
  float u1 = ((float)(a >> 8) + 1.0f) * (1.0f / 16777216.0f); /* (0, 1] */
  float u2 = (float)(b >> 8) * (1.0f / 16777216.0f);
  return __fmul_rn(sqrtf(-2.0f * logf(u1)), cosf(__fmul_rn(6.2831855f, u2)));
}

/* f64: the same f32 uniforms, scaled and transformed in f64 (as the CPU) */
AGK_DEV double agk_normal_d(uint32_t a, uint32_t b) {
  float u1 = ((float)(a >> 8) + 1.0f) * (1.0f / 16777216.0f);
  float u2 = (float)(b >> 8) * (1.0f / 16777216.0f);
  return sqrt(-2.0 * log((double)u1)) * cos(6.283185307179586 * (double)u2);
}
__global__ void k_rand_f64(double *o, long long n, uint64_t seed, uint64_t offset, int normal, double lo, double scale) {
  int per = normal ? 2 : 4;
  long long stride = (long long)gridDim.x * blockDim.x;
  for (long long b = (long long)blockIdx.x * blockDim.x + threadIdx.x; b * per < n; b += stride) {
    long long first = b * per;
    uint4 r = agk_philox(offset + (uint64_t)b, seed);
    for (int j = 0; j < per && first + j < n; j++)
      o[first + j] = normal ? agk_normal_d(agk_lane(r, 2 * j), agk_lane(r, 2 * j + 1)) * scale + lo
                            : (double)agk_u01(agk_lane(r, j)) * scale + lo;
  }
}

template <typename T>
__global__ void k_rand(T *o, long long n, uint64_t seed, uint64_t offset, int normal, float lo, float scale) {
  /* explicit roundings: no fused multiply-add, so uniform bits equal the
   * CPU's (core/tensor/philox.c gives the mapping) */
  /* one thread per Philox block: 4 uniforms or 2 normals */
  int per = normal ? 2 : 4;
  long long stride = (long long)gridDim.x * blockDim.x;
  for (long long b = (long long)blockIdx.x * blockDim.x + threadIdx.x; b * per < n; b += stride) {
    long long first = b * per;
    uint4 r = agk_philox(offset + (uint64_t)b, seed);
    for (int j = 0; j < per && first + j < n; j++) {
      float v;
      if (normal)
        v = __fadd_rn(__fmul_rn(agk_normal(agk_lane(r, 2 * j), agk_lane(r, 2 * j + 1)), scale), lo);
      else
        v = __fadd_rn(__fmul_rn(agk_u01(agk_lane(r, j)), scale), lo);
      o[first + j] = agk_fromf<T>(v);
    }
  }
}
/* uniform: u*(hi-lo)+lo, with scale = hi - lo; normal: n*std+mean */
static gpuError_t rand_go(const agk_env *env, const ag_kernel_call *c, const ag_koperand *out, int normal, double lo,
                          double scale_d, float scale_f) {
  long long n = 1;
  for (int i = 0; i < out->ndim; i++) n *= out->shape[i];
  if (n == 0) return gpuSuccess;
  long long blocks = (n + (normal ? 1 : 3)) / (normal ? 2 : 4);
  if (out->dtype == AG_F64) {
    agk_launch(k_rand_f64, agk_blocks(blocks, 256, 256, agk_wave(env, 256)), 256, 0, env->stream,
               (double *)agk_ptr(out), n, c->seed, c->offset, normal, lo, scale_d);
    return gpuGetLastError();
  }
  AGK_DISPATCH_FLOAT(out->dtype, T,
                     agk_launch(k_rand<T>, agk_blocks(blocks, 256, 256, agk_wave(env, 256)), 256, 0, env->stream, 
                         (T *)agk_ptr(out), n, c->seed, c->offset, normal, (float)lo, scale_f));
  return gpuGetLastError();
}
gpuError_t agk_rand_uniform(const agk_env *env, const ag_k_rand_uniform *a) {
  return rand_go(env, a->call, a->out, 0, a->lo, a->hi - a->lo, (float)(a->hi - a->lo));
}
gpuError_t agk_rand_normal(const agk_env *env, const ag_k_rand_normal *a) {
  return rand_go(env, a->call, a->out, 1, a->mean, a->std, (float)a->std);
}

template <typename T>
__global__ void k_dropout(T *o, const T *x, T *m, long long n, uint64_t seed, uint64_t offset, float p, double scale) {
  long long stride = (long long)gridDim.x * blockDim.x;
  for (long long b = (long long)blockIdx.x * blockDim.x + threadIdx.x; b * 4 < n; b += stride) {
    long long first = b * 4;
    uint4 r = agk_philox(offset + (uint64_t)b, seed);
    for (int j = 0; j < 4 && first + j < n; j++) {
      /* the product in f64 as the CPU reference computes it */
      double keep = agk_u01(agk_lane(r, j)) >= p ? scale : 0.0;
      o[first + j] = agk_narrow<T>((double)agk_tof(x[first + j]) * keep);
      if (m) m[first + j] = agk_narrow<T>(keep);
    }
  }
}
gpuError_t agk_dropout(const agk_env *env, const ag_k_dropout *a) {
  long long n = 1;
  for (int i = 0; i < a->y->ndim; i++) n *= a->y->shape[i];
  if (n == 0) return gpuSuccess;
  float p = (float)a->p;
  double scale = a->p < 1.0 ? 1.0 / (1.0 - a->p) : 0.0;
  AGK_DISPATCH_FLOAT(a->dtype, T,
                     agk_launch(k_dropout<T>, agk_blocks((n + 3) / 4, 256, 256, agk_wave(env, 256)), 256, 0, env->stream, 
                         (T *)agk_ptr(a->y), (const T *)agk_ptr(a->x), (T *)agk_optr(a->mask), n, a->call->seed,
                         a->call->offset, p, scale));
  return gpuGetLastError();
}
