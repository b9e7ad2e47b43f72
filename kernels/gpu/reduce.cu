/* Reductions and row-wise kernels: REDUCE (sum/max/min/argmax over the middle
 * dim of [outer, r, inner]), softmax and log-softmax with their backward,
 * cross-entropy fused with log-softmax, layer norm forward/backward and
 * embedding forward/backward. Long reductions with few outputs are split over
 * blocks that write partials into the stream's scratch, combined by a second
 * small kernel, so even a full reduction to a scalar fills the device. */
#include "common.cuh"

/* ---------------- REDUCE ---------------- */

template <typename A> struct agk_pair { A v; long long i; };

template <typename A> AGK_DEV agk_pair<A> red_ident(int op) {
  agk_pair<A> p;
  p.i = 0x7fffffffffffffffLL;
  p.v = op == AG_R_SUM ? (A)0 : op == AG_R_MIN ? (A)INFINITY : (A)-INFINITY;
  return p;
}
/* Integers (i64, u8, bool) reduce exactly in i64. */
template <> AGK_DEV agk_pair<long long> red_ident<long long>(int op) {
  agk_pair<long long> p;
  p.i = 0x7fffffffffffffffLL;
  p.v = op == AG_R_SUM ? 0 : op == AG_R_MIN ? 0x7fffffffffffffffLL : (-0x7fffffffffffffffLL - 1);
  return p;
}
/* The CPU backend's rules (backends/cpu/cpu_kernels.c, as torch): max and
 * min propagate NaN; argmax orders NaN above everything and takes the first
 * index among equals, so it is the first NaN, else the first maximum. The
 * identity's index (INT64_MAX) loses every tie and is never stored. */
/* Sums of i64 wrap in two's complement (an intermediate partial sum may
 * leave the range even when the total does not): add through unsigned,
 * where C++ defines the wrap. */
template <typename A> AGK_DEV A red_add(A a, A b) { return a + b; }
template <> AGK_DEV long long red_add<long long>(long long a, long long b) {
  return (long long)((unsigned long long)a + (unsigned long long)b);
}
template <typename A> AGK_DEV agk_pair<A> red_comb(int op, agk_pair<A> a, agk_pair<A> b) {
  switch (op) {
    case AG_R_SUM: a.v = red_add(a.v, b.v); return a;
    case AG_R_MAX: a.v = b.v > a.v || b.v != b.v ? b.v : a.v; return a;
    case AG_R_MIN: a.v = b.v < a.v || b.v != b.v ? b.v : a.v; return a;
    default: {
      bool bn = b.v != b.v, an = a.v != a.v;
      if ((bn && !an) || b.v > a.v || ((b.v == a.v || (bn && an)) && b.i < a.i)) return b;
      return a;
    }
  }
}
/* argmax of an empty row is 0, as on the CPU */
AGK_DEV int32_t red_index(long long i) { return i == 0x7fffffffffffffffLL ? 0 : (int32_t)i; }
template <typename A> AGK_DEV agk_pair<A> red_shfl(agk_pair<A> p, int m) {
  agk_pair<A> q;
  q.v = AGK_SHFL_XOR(p.v, m, AGK_WARP);
  q.i = AGK_SHFL_XOR(p.i, m, AGK_WARP);
  return q;
}
/* Reduce over the whole block (blockDim.x * blockDim.y threads, linear id
 * tid); result valid in thread 0. */
template <typename A> AGK_DEV agk_pair<A> red_block(int op, agk_pair<A> p, int tid, int nthreads) {
  __shared__ agk_pair<A> sh[32];
  for (int m = AGK_WARP / 2; m > 0; m >>= 1) p = red_comb(op, p, red_shfl(p, m));
  int lane = tid % AGK_WARP, w = tid / AGK_WARP, nw = (nthreads + AGK_WARP - 1) / AGK_WARP;
  if (lane == 0) sh[w] = p;
  __syncthreads();
  if (tid == 0)
    for (int i = 1; i < nw; i++) p = red_comb(op, p, sh[i]);
  return p;
}

template <typename T, typename A> AGK_DEV void red_store(T *out, long long j, agk_pair<A> p, int op, double scale) {
  if (op == AG_R_ARGMAX)
    ((int32_t *)out)[j] = red_index(p.i);
  else if (op == AG_R_SUM)
    out[j] = agk_fromf<T>((agk_c<T>)(p.v * (A)scale));
  else
    out[j] = agk_fromf<T>((agk_c<T>)p.v);
}
template <typename A> AGK_DEV void red_store_i32(int32_t *out, long long j, agk_pair<A> p, int op, double scale) {
  /* a sum beyond the i32 range saturates, as the CPU stores it */
  if (op == AG_R_ARGMAX) out[j] = red_index(p.i);
  else if (op == AG_R_SUM) out[j] = agk_sat_i32((double)p.v * scale);
  else out[j] = (int32_t)p.v;
}
template <typename T, typename A> struct red_out {
  static AGK_DEV void st(void *o, long long j, agk_pair<A> p, int op, double s) { red_store<T, A>((T *)o, j, p, op, s); }
};
template <typename A> struct red_out<int32_t, A> {
  static AGK_DEV void st(void *o, long long j, agk_pair<A> p, int op, double s) { red_store_i32<A>((int32_t *)o, j, p, op, s); }
};

template <typename T> AGK_DEV double red_val(const T *p) { return (double)agk_tof(*p); }
template <> AGK_DEV double red_val<int32_t>(const int32_t *p) { return (double)*p; }
template <typename A, typename T> AGK_DEV A red_get(const T *p) { return (A)red_val(p); }
template <> AGK_DEV long long red_get<long long, int64_t>(const int64_t *p) { return *p; }
template <> AGK_DEV long long red_get<long long, uint8_t>(const uint8_t *p) { return *p; }
template <> AGK_DEV long long red_get<long long, agk_bool>(const agk_bool *p) { return p->x; }

template <typename T> AGK_DEV void red_store_l(T *out, long long j, agk_pair<long long> p, int op) {
  if (op == AG_R_ARGMAX) ((int32_t *)out)[j] = red_index(p.i);
  else out[j] = agk_fromi<T>(p.v);
}
template <> struct red_out<int64_t, long long> {
  static AGK_DEV void st(void *o, long long j, agk_pair<long long> p, int op, double) { red_store_l<int64_t>((int64_t *)o, j, p, op); }
};
template <> struct red_out<uint8_t, long long> {
  static AGK_DEV void st(void *o, long long j, agk_pair<long long> p, int op, double) { red_store_l<uint8_t>((uint8_t *)o, j, p, op); }
};
template <> struct red_out<agk_bool, long long> {
  static AGK_DEV void st(void *o, long long j, agk_pair<long long> p, int op, double) { red_store_l<agk_bool>((agk_bool *)o, j, p, op); }
};

/* inner == 1, rows of at most AGK_SHORT_ROW elements: one thread per row;
 * a block per row would leave most of its threads idle. */
#define AGK_SHORT_ROW 32
template <typename T, typename A>
__global__ void k_reduce_rows_short(const T *x, void *out, long long outer, long long r, int op, double scale) {
  long long stride = (long long)gridDim.x * blockDim.x;
  for (long long row = (long long)blockIdx.x * blockDim.x + threadIdx.x; row < outer; row += stride) {
    const T *xr = x + row * r;
    agk_pair<A> acc = red_ident<A>(op);
    for (long long i = 0; i < r; i++) {
      agk_pair<A> q;
      q.v = red_get<A>(xr + i);
      q.i = i;
      acc = red_comb(op, acc, q);
    }
    red_out<T, A>::st(out, row, acc, op, scale);
  }
}

/* inner == 1: work item b is chunk (b % P) of row (b / P); blocks take work
 * items in a grid-stride loop. */
template <typename T, typename A>
__global__ void k_reduce_rows(const T *x, void *out, agk_pair<A> *part, long long outer, long long r,
                              int P, long long chunk, int op, double scale) {
  for (long long b = blockIdx.x; b < outer * P; b += gridDim.x) {
    long long row = b / P;
    int pc = (int)(b % P);
    long long lo = pc * chunk, hi = lo + chunk < r ? lo + chunk : r;
    const T *xr = x + row * r;
    agk_pair<A> acc = red_ident<A>(op);
    long long i = lo + threadIdx.x;
    for (; i + 3 * blockDim.x < hi; i += 4 * blockDim.x) {
      A v0 = red_get<A>(xr + i), v1 = red_get<A>(xr + i + blockDim.x);
      A v2 = red_get<A>(xr + i + 2 * blockDim.x), v3 = red_get<A>(xr + i + 3 * blockDim.x);
      agk_pair<A> q;
      q.v = v0; q.i = i; acc = red_comb(op, acc, q);
      q.v = v1; q.i = i + blockDim.x; acc = red_comb(op, acc, q);
      q.v = v2; q.i = i + 2 * blockDim.x; acc = red_comb(op, acc, q);
      q.v = v3; q.i = i + 3 * blockDim.x; acc = red_comb(op, acc, q);
    }
    for (; i < hi; i += blockDim.x) {
      agk_pair<A> q;
      q.v = red_get<A>(xr + i);
      q.i = i;
      acc = red_comb(op, acc, q);
    }
    acc = red_block(op, acc, threadIdx.x, blockDim.x);
    if (threadIdx.x == 0) {
      if (P == 1) red_out<T, A>::st(out, row, acc, op, scale);
      else part[row * P + pc] = acc;
    }
    __syncthreads(); /* red_block's shared memory is reused by the next item */
  }
}

/* inner > 1: block (32, 8) covers 32 inner positions of one outer index and
 * one chunk of r; work items ordered (chunk, outer, tile), grid-stride. */
template <typename T, typename A>
__global__ void k_reduce_cols(const T *x, void *out, agk_pair<A> *part, long long outer, long long r,
                              long long inner, int P, long long chunk, int op, double scale) {
  __shared__ agk_pair<A> sh[8][33];
  long long tiles = (inner + 31) / 32;
  for (long long b = blockIdx.x; b < tiles * outer * P; b += gridDim.x) {
    long long tile = b % tiles, o = (b / tiles) % outer;
    int pc = (int)(b / (tiles * outer));
    long long col = tile * 32 + threadIdx.x;
    long long lo = pc * chunk, hi = lo + chunk < r ? lo + chunk : r;
    agk_pair<A> acc = red_ident<A>(op);
    if (col < inner) {
      const T *xo = x + o * r * inner + col;
      for (long long i = lo + threadIdx.y; i < hi; i += blockDim.y) {
        agk_pair<A> q;
        q.v = red_get<A>(xo + i * inner);
        q.i = i;
        acc = red_comb(op, acc, q);
      }
    }
    sh[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0) {
      for (int k = 1; k < (int)blockDim.y; k++) acc = red_comb(op, acc, sh[k][threadIdx.x]);
      if (col < inner) {
        long long j = o * inner + col;
        if (P == 1) red_out<T, A>::st(out, j, acc, op, scale);
        else part[j * P + pc] = acc;
      }
    }
    __syncthreads(); /* sh is rewritten by the next item */
  }
}

template <typename T, typename A>
__global__ void k_reduce_final(const agk_pair<A> *part, void *out, long long n, int P, int op, double scale) {
  long long stride = (long long)gridDim.x * blockDim.x;
  for (long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x; j < n; j += stride) {
    agk_pair<A> acc = part[j * P];
    for (int k = 1; k < P; k++) acc = red_comb(op, acc, part[j * P + k]);
    red_out<T, A>::st(out, j, acc, op, scale);
  }
}

/* Split factor over r: enough blocks to fill the device, each still reading
 * a worthwhile run, and all partials inside the scratch. */
static long long reduce_split(long long base, long long r, long long min_run, long long cap, long long want) {
  long long P = (want + base - 1) / base, maxp = (r + min_run - 1) / min_run;
  if (P > maxp) P = maxp;
  if (P > cap) P = cap;
  if (P > 1024) P = 1024;
  return P < 1 ? 1 : P;
}

template <typename T, typename A> static gpuError_t reduce_go(const agk_env *env, const ag_k_reduce *a) {
  long long outer = a->outer, r = a->r, inner = a->inner, nout = outer * inner;
  const T *x = (const T *)agk_ptr(a->x);
  void *out = agk_ptr(a->out);
  int op = a->variant;
  double scale = a->scale;
  if (nout == 0) return gpuSuccess;
  long long want = (long long)(env->sm_count > 0 ? env->sm_count : 80) * 4;
  long long cap = (long long)(env->scratch_bytes / sizeof(agk_pair<A>)) / nout;
  agk_pair<A> *part = (agk_pair<A> *)env->scratch;
  long long P;
  if (inner == 1 && r <= AGK_SHORT_ROW) {
    P = 1;
    agk_launch(k_reduce_rows_short<T, A>, agk_blocks(outer, 256, 256, agk_wave(env, 256)), 256, 0, env->stream, x, out,
               outer, r, op, scale);
  } else if (inner == 1) {
    P = reduce_split(outer, r, 4096, cap, want);
    long long chunk = (r + P - 1) / P;
    int threads = r >= 1024 ? 256 : r > 256 ? 128 : 64;
    agk_launch(k_reduce_rows<T, A>, agk_blocks(outer * P, 1, threads, agk_wave(env, threads)), threads, 0,
               env->stream, x, out, part, outer, r, (int)P, chunk < 1 ? 1 : chunk, op, scale);
  } else {
    long long base = (inner + 31) / 32 * outer;
    P = reduce_split(base, r, 64, cap, want);
    long long chunk = (r + P - 1) / P;
    dim3 blk(32, 8);
    agk_launch(k_reduce_cols<T, A>, agk_blocks(base * P, 1, 256, agk_wave(env, 256)), blk, 0, env->stream, x, out,
               part, outer, r, inner, (int)P, chunk < 1 ? 1 : chunk, op, scale);
  }
  if (P > 1)
    agk_launch(k_reduce_final<T, A>, agk_blocks(nout, 256, 256, agk_wave(env, 256)), 256, 0, env->stream, part, out,
               nout, (int)P, op, scale);
  return gpuGetLastError();
}

gpuError_t agk_reduce(const agk_env *env, const ag_k_reduce *a) {
  switch (a->x->dtype) {
    case AG_F32: return reduce_go<float, float>(env, a);
    case AG_F64: return reduce_go<double, double>(env, a);
    case AG_F16: return reduce_go<agk_f16, float>(env, a);
    case AG_BF16: return reduce_go<agk_bf16, float>(env, a);
    case AG_I32: return reduce_go<int32_t, double>(env, a);
    case AG_I64: return reduce_go<int64_t, long long>(env, a);
    case AG_U8: return reduce_go<uint8_t, long long>(env, a); /* max/min/argmax */
    case AG_BOOL: return reduce_go<agk_bool, long long>(env, a);
    default: return gpuErrorNotSupported;
  }
}

/* ---------------- row kernels ---------------- */
/* A row is handled by TPR threads: a sub-warp group (TPR <= 32, several rows
 * per block) or the whole block (TPR == blockDim.x). */

template <int TPR, typename C> AGK_DEV C row_sum(C v, C *sh) {
  if (TPR <= 32) return agk_warp_sum(v, TPR);
  return agk_block_sum(v, sh);
}
/* (m, s) pairs of the online softmax: s = sum(exp(x - m)). Combining never
 * evaluates exp(-inf - -inf). The f32 row kernels use the fast __expf: its
 * error grows with |x| (CUDA: 2 + 1.17|x| ulp) but x = logit - max <= 0 and
 * a term with large |x| is a negligible share of the row; docs/gpu.md
 * bounds the effect on probabilities and the loss. f64 uses exp. */
template <typename C> AGK_DEV void ms_comb(C &m, C &s, C m2, C s2) {
  if (m2 == -INFINITY) return;
  if (m == -INFINITY) { m = m2; s = s2; return; }
  C mm = agk_fmax(m, m2);
  s = s * agk_fexp(m - mm) + s2 * agk_fexp(m2 - mm);
  m = mm;
}
/* sh holds 16 warps' (m, s): at most 512 threads per row group, which
 * ROW_LAUNCH's launch bounds guarantee. */
template <int TPR, typename C> AGK_DEV void row_ms(C &m, C &s, C *sh) {
  static_assert(TPR <= 512, "row_ms keeps 16 warps' pairs in 32 shared slots");
  const int w = TPR <= 32 ? TPR : AGK_WARP;
  for (int k = w / 2; k > 0; k >>= 1) {
    C m2 = AGK_SHFL_XOR(m, k, w), s2 = AGK_SHFL_XOR(s, k, w);
    ms_comb(m, s, m2, s2);
  }
  if (TPR <= 32) return;
  int lane = threadIdx.x % AGK_WARP, wi = threadIdx.x / AGK_WARP, nw = (blockDim.x + AGK_WARP - 1) / AGK_WARP;
  __syncthreads();
  if (lane == 0) { sh[wi] = m; sh[16 + wi] = s; }
  __syncthreads();
  m = -INFINITY;
  s = 0;
  for (int i = 0; i < nw; i++) ms_comb(m, s, sh[i], sh[16 + i]);
}
/* Max and sum of exp of a row in one pass over memory (online softmax):
 * sum(exp(x - m)) = s. */
template <int TPR, typename T>
AGK_DEV void row_stats(const T *x, long long C, int lane, agk_c<T> *sh, agk_c<T> *out_m, agk_c<T> *out_s) {
  typedef agk_c<T> Tc;
  Tc m = -INFINITY, s = 0;
  for (long long j = lane; j < C; j += TPR) {
    Tc v = agk_tof(x[j]);
    if (v == -INFINITY) continue;
    if (v > m) {
      s = (m == -INFINITY ? (Tc)0 : s * agk_fexp(m - v)) + 1;
      m = v;
    } else {
      s += agk_fexp(v - m);
    }
  }
  row_ms<TPR>(m, s, sh);
  *out_m = m;
  *out_s = s;
}

/* The block size of a row kernel (ROW_LAUNCH): 256 threads for sub-warp
 * rows, TPR for whole-block rows, at most 512 (row_ms's shared pairs). */
#define AGK_ROW_BOUNDS(TPR) __launch_bounds__((TPR) <= 32 ? 256 : (TPR))

/* Rows in a grid-stride loop (the grid is bounded, agk_blocks): a group of
 * TPR <= 32 lanes (blockDim.x / TPR rows per block) or the whole block
 * (TPR == blockDim.x, uniform over the block) takes a row per iteration. */
#define ROW_LOOP(TPR)                                                                              \
  __shared__ agk_c<T> sh[32];                                                                     \
  int lane = (TPR) <= 32 ? threadIdx.x % (TPR) : threadIdx.x;                                     \
  long long rpb = (TPR) <= 32 ? blockDim.x / (TPR) : 1;                                           \
  for (long long row = (long long)blockIdx.x * rpb + ((TPR) <= 32 ? threadIdx.x / (TPR) : 0); row < R; \
       row += (long long)gridDim.x * rpb)

template <int TPR, typename T> __global__ void AGK_ROW_BOUNDS(TPR) k_softmax(T *y, const T *x, long long R, long long C, int log) {
  ROW_LOOP(TPR) {
    agk_c<T> m, s;
    row_stats<TPR>(x + row * C, C, lane, sh, &m, &s);
    agk_c<T> ls = agk_log(s);
    agk_c<T> inv = 1.f / s;
    for (long long j = lane; j < C; j += TPR) {
      agk_c<T> v = agk_tof(x[row * C + j]) - m;
      y[row * C + j] = agk_fromf<T>(log ? v - ls : agk_fexp(v) * inv);
    }
  }
}
template <int TPR, typename T>
__global__ void AGK_ROW_BOUNDS(TPR) k_softmax_bwd(T *dx, const T *dy, const T *y, long long R, long long C, int log) {
  ROW_LOOP(TPR) {
    const T *dyr = dy + row * C, *yr = y + row * C;
    agk_c<T> s = 0.f;
    for (long long j = lane; j < C; j += TPR) s += log ? agk_tof(dyr[j]) : agk_tof(dyr[j]) * agk_tof(yr[j]);
    s = row_sum<TPR>(s, sh);
    for (long long j = lane; j < C; j += TPR) {
      agk_c<T> g = agk_tof(dyr[j]), v = agk_tof(yr[j]);
      dx[row * C + j] = agk_fromf<T>(log ? g - agk_fexp(v) * s : v * (g - s));
    }
  }
}
template <int TPR, typename T>
__global__ void AGK_ROW_BOUNDS(TPR) k_xent(agk_c<T> *loss, const T *x, const void *t, int t64, long long R, long long C, long long ignore,
                       ag_kernel_error *err) {
  ROW_LOOP(TPR) {
    long long tg = agk_idx(t, t64, row);
    if (tg == ignore) {
      if (lane == 0) loss[row] = 0.f;
      continue;
    }
    if (tg < 0 || tg >= C) {
      if (lane == 0) {
        loss[row] = NAN;
        agk_report(err, AG_K_CROSS_ENTROPY, tg, C);
      }
      continue;
    }
    agk_c<T> m, s;
    row_stats<TPR>(x + row * C, C, lane, sh, &m, &s);
    if (lane == 0) loss[row] = agk_log(s) + m - agk_tof(x[row * C + tg]);
  }
}
template <int TPR, typename T>
__global__ void AGK_ROW_BOUNDS(TPR) k_xent_bwd(T *dl, const T *x, const void *t, int t64, const agk_c<T> *g, long long gs, long long R,
                           long long C, long long ignore) {
  ROW_LOOP(TPR) {
    long long tg = agk_idx(t, t64, row);
    T *d = dl + row * C;
    if (tg == ignore || tg < 0 || tg >= C) {
      for (long long j = lane; j < C; j += TPR) d[j] = agk_fromf<T>(0.f);
      continue;
    }
    agk_c<T> m, s;
    row_stats<TPR>(x + row * C, C, lane, sh, &m, &s);
    agk_c<T> gr = g[row * gs], inv = 1.f / s;
    for (long long j = lane; j < C; j += TPR) {
      agk_c<T> p = agk_fexp(agk_tof(x[row * C + j]) - m) * inv;
      d[j] = agk_fromf<T>((p - (j == tg ? 1.f : 0.f)) * gr);
    }
  }
}
template <int TPR, typename T>
__global__ void AGK_ROW_BOUNDS(TPR) k_layernorm(T *y, agk_c<T> *mean, agk_c<T> *rstd, const T *x, const T *w, const T *b, long long R,
                            long long D, agk_c<T> eps) {
  ROW_LOOP(TPR) {
    const T *xr = x + row * D;
    agk_c<T> s = 0.f;
    for (long long j = lane; j < D; j += TPR) s += agk_tof(xr[j]);
    agk_c<T> mu = row_sum<TPR>(s, sh) / (agk_c<T>)D;
    agk_c<T> v = 0.f;
    for (long long j = lane; j < D; j += TPR) {
      agk_c<T> d = agk_tof(xr[j]) - mu;
      v += d * d;
    }
    agk_c<T> rs = 1.f / agk_sqrt(row_sum<TPR>(v, sh) / (agk_c<T>)D + eps);
    for (long long j = lane; j < D; j += TPR) {
      agk_c<T> h = (agk_tof(xr[j]) - mu) * rs;
      if (w) h *= agk_tof(w[j]);
      if (b) h += agk_tof(b[j]);
      y[row * D + j] = agk_fromf<T>(h);
    }
    if (lane == 0) {
      if (mean) mean[row] = mu;
      if (rstd) rstd[row] = rs;
    }
  }
}
template <int TPR, typename T>
__global__ void AGK_ROW_BOUNDS(TPR) k_layernorm_bwd(T *dx, const T *dy, const T *x, const agk_c<T> *mean, const agk_c<T> *rstd, const T *w,
                                long long R, long long D) {
  ROW_LOOP(TPR) {
    const T *dyr = dy + row * D, *xr = x + row * D;
    agk_c<T> mu = mean[row], rs = rstd[row];
    agk_c<T> a = 0.f, bsum = 0.f;
    for (long long j = lane; j < D; j += TPR) {
      agk_c<T> g = agk_tof(dyr[j]) * (w ? agk_tof(w[j]) : 1.f);
      a += g;
      bsum += g * (agk_tof(xr[j]) - mu) * rs;
    }
    a = row_sum<TPR>(a, sh) / (agk_c<T>)D;
    bsum = row_sum<TPR>(bsum, sh) / (agk_c<T>)D;
    for (long long j = lane; j < D; j += TPR) {
      agk_c<T> g = agk_tof(dyr[j]) * (w ? agk_tof(w[j]) : 1.f);
      agk_c<T> h = (agk_tof(xr[j]) - mu) * rs;
      dx[row * D + j] = agk_fromf<T>(rs * (g - a - h * bsum));
    }
  }
}
/* RMS norm: rstd = 1/sqrt(mean(x^2) + eps), y = x * rstd * w. */
template <int TPR, typename T>
__global__ void AGK_ROW_BOUNDS(TPR) k_rmsnorm(T *y, agk_c<T> *rstd, const T *x, const T *w, long long R, long long D, agk_c<T> eps) {
  ROW_LOOP(TPR) {
    const T *xr = x + row * D;
    agk_c<T> s = 0.f;
    for (long long j = lane; j < D; j += TPR) {
      agk_c<T> v = agk_tof(xr[j]);
      s += v * v;
    }
    agk_c<T> rs = 1.f / agk_sqrt(row_sum<TPR>(s, sh) / (agk_c<T>)D + eps);
    for (long long j = lane; j < D; j += TPR) {
      agk_c<T> h = agk_tof(xr[j]) * rs;
      if (w) h *= agk_tof(w[j]);
      y[row * D + j] = agk_fromf<T>(h);
    }
    if (lane == 0 && rstd) rstd[row] = rs;
  }
}
/* dx = rstd * (g - x * rstd^2 * mean(g * x)), g = dy * w. */
template <int TPR, typename T>
__global__ void AGK_ROW_BOUNDS(TPR) k_rmsnorm_bwd(T *dx, const T *dy, const T *x, const agk_c<T> *rstd, const T *w, long long R,
                              long long D) {
  ROW_LOOP(TPR) {
    const T *dyr = dy + row * D, *xr = x + row * D;
    agk_c<T> rs = rstd[row], s = 0.f;
    for (long long j = lane; j < D; j += TPR) s += agk_tof(dyr[j]) * (w ? agk_tof(w[j]) : 1.f) * agk_tof(xr[j]);
    s = row_sum<TPR>(s, sh) / (agk_c<T>)D * rs * rs;
    for (long long j = lane; j < D; j += TPR) {
      agk_c<T> g = agk_tof(dyr[j]) * (w ? agk_tof(w[j]) : 1.f);
      dx[row * D + j] = agk_fromf<T>(rs * (g - agk_tof(xr[j]) * s));
    }
  }
}
/* dw[d] = sum_n dy*xhat, db[d] = sum_n dy: columns over a chunk of rows,
 * accumulated with atomics into zeroed outputs; in deterministic mode (DET)
 * chunk c stores its sums at dw[c * D + d] (partials in scratch, or the
 * outputs when there is one chunk), summed in chunk order by k_chunk_sum. */
template <typename T, bool DET>
__global__ void k_layernorm_dwdb(agk_c<T> *dw, agk_c<T> *db, const T *dy, const T *x, const agk_c<T> *mean,
                                 const agk_c<T> *rstd, long long R, long long D, long long rows_per) {
  long long col = (long long)blockIdx.x * 32 + threadIdx.x;
  long long lo = (long long)blockIdx.y * rows_per, hi = lo + rows_per < R ? lo + rows_per : R;
  agk_c<T> sw = 0.f, sb = 0.f;
  if (col < D)
    for (long long n = lo + threadIdx.y; n < hi; n += blockDim.y) {
      agk_c<T> g = agk_tof(dy[n * D + col]);
      sw += g * (agk_tof(x[n * D + col]) - (mean ? mean[n] : 0.f)) * rstd[n];
      sb += g;
    }
  __shared__ agk_c<T> shw[8][33], shb[8][33];
  shw[threadIdx.y][threadIdx.x] = sw;
  shb[threadIdx.y][threadIdx.x] = sb;
  __syncthreads();
  if (threadIdx.y == 0 && col < D) {
    for (int k = 1; k < (int)blockDim.y; k++) {
      sw += shw[k][threadIdx.x];
      sb += shb[k][threadIdx.x];
    }
    if (DET) {
      if (dw) dw[blockIdx.y * D + col] = sw;
      if (db) db[blockIdx.y * D + col] = sb;
    } else {
      if (dw) atomicAdd(dw + col, sw);
      if (db) atomicAdd(db + col, sb);
    }
  }
}
/* out[j] = sum over c < chunks of part[c * n + j], in chunk order. */
template <typename F> __global__ void k_chunk_sum(F *out, const F *part, long long n, long long chunks) {
  long long stride = (long long)gridDim.x * blockDim.x;
  for (long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x; j < n; j += stride) {
    F s = part[j];
    for (long long c = 1; c < chunks; c++) s += part[c * n + j];
    out[j] = s;
  }
}

/* Launch a row kernel with 32 threads per row for short rows and a whole
 * block per row for long ones; rows beyond the grid are looped over. */
#define ROW_LAUNCH(KERNEL, T, R, C, ...)                                                                     \
  do {                                                                                                      \
    if ((C) <= 1024) {                                                                                      \
      agk_launch(KERNEL<32, T>, agk_blocks((R), 8, 256, agk_wave(env, 256)), 256, 0, env->stream, __VA_ARGS__); \
    } else {                                                                                                \
      agk_launch(KERNEL<512, T>, agk_blocks((R), 1, 512, agk_wave(env, 512)), 512, 0, env->stream, __VA_ARGS__); \
    }                                                                                                       \
  } while (0)

template <typename T> static gpuError_t softmax_go(const agk_env *env, const ag_k_softmax *a) {
  long long R = a->rows, C = a->cols;
  if (R == 0 || C == 0) return gpuSuccess;
  ROW_LAUNCH(k_softmax, T, R, C, (T *)agk_ptr(a->y), (const T *)agk_ptr(a->x), R, C,
             a->variant == AG_KV_LOG_SOFTMAX);
  return gpuGetLastError();
}
gpuError_t agk_softmax(const agk_env *env, const ag_k_softmax *a) {
  AGK_DISPATCH_FLOAT(a->dtype, T, return softmax_go<T>(env, a));
  return gpuErrorNotSupported;
}
template <typename T> static gpuError_t softmax_bwd_go(const agk_env *env, const ag_k_softmax_bwd *a) {
  long long R = a->rows, C = a->cols;
  if (R == 0 || C == 0) return gpuSuccess;
  ROW_LAUNCH(k_softmax_bwd, T, R, C, (T *)agk_ptr(a->dx), (const T *)agk_ptr(a->dy), (const T *)agk_ptr(a->y), R, C,
             a->variant == AG_KV_LOG_SOFTMAX);
  return gpuGetLastError();
}
gpuError_t agk_softmax_bwd(const agk_env *env, const ag_k_softmax_bwd *a) {
  AGK_DISPATCH_FLOAT(a->dtype, T, return softmax_bwd_go<T>(env, a));
  return gpuErrorNotSupported;
}
template <typename T> static gpuError_t xent_go(const agk_env *env, const ag_k_cross_entropy *a) {
  long long R = a->n, C = a->c;
  if (R == 0) return gpuSuccess;
  ROW_LAUNCH(k_xent, T, R, C, (agk_c<T> *)agk_ptr(a->loss), (const T *)agk_ptr(a->logits), agk_ptr(a->targets),
             a->targets->dtype == AG_I64, R, C, a->ignore_index, env->err);
  return gpuGetLastError();
}
gpuError_t agk_cross_entropy(const agk_env *env, const ag_k_cross_entropy *a) {
  AGK_DISPATCH_FLOAT(a->logits->dtype, T, return xent_go<T>(env, a));
  return gpuErrorNotSupported;
}
template <typename T> static gpuError_t xent_bwd_go(const agk_env *env, const ag_k_cross_entropy_bwd *a) {
  long long R = a->n, C = a->c;
  if (R == 0 || C == 0) return gpuSuccess;
  long long gs = a->grad->ndim > 0 ? a->grad->strides[0] : 0;
  ROW_LAUNCH(k_xent_bwd, T, R, C, (T *)agk_ptr(a->dlogits), (const T *)agk_ptr(a->logits), agk_ptr(a->targets),
             a->targets->dtype == AG_I64, (const agk_c<T> *)agk_ptr(a->grad), gs, R, C, a->ignore_index);
  return gpuGetLastError();
}
gpuError_t agk_cross_entropy_bwd(const agk_env *env, const ag_k_cross_entropy_bwd *a) {
  AGK_DISPATCH_FLOAT(a->dlogits->dtype, T, return xent_bwd_go<T>(env, a));
  return gpuErrorNotSupported;
}
template <typename T> static gpuError_t layernorm_go(const agk_env *env, const ag_k_layernorm *a) {
  long long R = a->n, D = a->d;
  if (R == 0 || D == 0) return gpuSuccess;
  ROW_LAUNCH(k_layernorm, T, R, D, (T *)agk_ptr(a->y), (agk_c<T> *)agk_optr(a->mean), (agk_c<T> *)agk_optr(a->rstd),
             (const T *)agk_ptr(a->x), (const T *)agk_optr(a->weight), (const T *)agk_optr(a->bias), R, D,
             (agk_c<T>)a->eps);
  return gpuGetLastError();
}
gpuError_t agk_layernorm(const agk_env *env, const ag_k_layernorm *a) {
  AGK_DISPATCH_FLOAT(a->y->dtype, T, return layernorm_go<T>(env, a));
  return gpuErrorNotSupported;
}
/* dw (and db) over the rows: atomics into zeroed outputs, or chunk
 * partials summed in chunk order in deterministic mode. mean NULL: rms norm
 * (xhat = x * rstd). */
template <typename T>
static gpuError_t dwdb_go(const agk_env *env, const ag_kernel_call *c, agk_c<T> *dw, agk_c<T> *db, const T *dy, const T *x,
                          const agk_c<T> *mean, const agk_c<T> *rstd, long long R, long long D) {
  bool det = (c->flags & AG_KF_DETERMINISTIC) != 0;
  gpuError_t e;
  if (!(det && R > 0)) {
    if (dw && (e = gpuMemsetAsync(dw, 0, (size_t)D * sizeof *dw, env->stream)) != gpuSuccess) return e;
    if (db && (e = gpuMemsetAsync(db, 0, (size_t)D * sizeof *db, env->stream)) != gpuSuccess) return e;
  }
  if (R > 0 && (dw || db)) {
    long long tiles = (D + 31) / 32, want = (long long)(env->sm_count > 0 ? env->sm_count : 80) * 8;
    long long chunks = (want + tiles - 1) / tiles, maxc = (R + 31) / 32;
    if (chunks > maxc) chunks = maxc;
    if (chunks > 65535) chunks = 65535;
    /* deterministic: both partial arrays [chunks, D] fit in the scratch */
    const long long per = (long long)(env->scratch_bytes / (2 * sizeof(agk_c<T>))) / D;
    if (det && chunks > per) chunks = per;
    if (chunks < 1) chunks = 1;
    long long rows_per = (R + chunks - 1) / chunks;
    chunks = (R + rows_per - 1) / rows_per;
    dim3 grid((unsigned)tiles, (unsigned)chunks), blk(32, 8);
    if (!det) {
      agk_launch(k_layernorm_dwdb<T, false>, grid, blk, 0, env->stream, dw, db, dy, x, mean, rstd, R, D, rows_per);
    } else if (chunks == 1) {
      agk_launch(k_layernorm_dwdb<T, true>, grid, blk, 0, env->stream, dw, db, dy, x, mean, rstd, R, D, rows_per);
    } else {
      agk_c<T> *pw = dw ? (agk_c<T> *)env->scratch : (agk_c<T> *)0, *pb = db ? (agk_c<T> *)env->scratch + chunks * D : (agk_c<T> *)0;
      agk_launch(k_layernorm_dwdb<T, true>, grid, blk, 0, env->stream, pw, pb, dy, x, mean, rstd, R, D, rows_per);
      unsigned g = agk_blocks(D, 256, 256, agk_wave(env, 256));
      if (dw) agk_launch(k_chunk_sum<agk_c<T> >, g, 256, 0, env->stream, dw, (const agk_c<T> *)pw, D, chunks);
      if (db) agk_launch(k_chunk_sum<agk_c<T> >, g, 256, 0, env->stream, db, (const agk_c<T> *)pb, D, chunks);
    }
  }
  return gpuSuccess;
}
template <typename T> static gpuError_t layernorm_bwd_go(const agk_env *env, const ag_k_layernorm_bwd *a) {
  long long R = a->n, D = a->d;
  if (D == 0) return gpuSuccess;
  const T *dy = (const T *)agk_ptr(a->dy), *x = (const T *)agk_ptr(a->x);
  const agk_c<T> *mean = (const agk_c<T> *)agk_ptr(a->mean), *rstd = (const agk_c<T> *)agk_ptr(a->rstd);
  if (R > 0)
    ROW_LAUNCH(k_layernorm_bwd, T, R, D, (T *)agk_ptr(a->dx), dy, x, mean, rstd, (const T *)agk_optr(a->weight), R, D);
  if (a->multi && a->multi->count >= 1) {
    agk_c<T> *dw = (agk_c<T> *)AGK_MULTI_PTR(a, 0, dw), *db = (agk_c<T> *)AGK_MULTI_PTR(a, 0, db);
    gpuError_t e = dwdb_go<T>(env, a->call, dw, db, dy, x, mean, rstd, R, D);
    if (e != gpuSuccess) return e;
  }
  return gpuGetLastError();
}
gpuError_t agk_layernorm_bwd(const agk_env *env, const ag_k_layernorm_bwd *a) {
  AGK_DISPATCH_FLOAT(a->dx->dtype, T, return layernorm_bwd_go<T>(env, a));
  return gpuErrorNotSupported;
}

template <typename T> static gpuError_t rmsnorm_go(const agk_env *env, const ag_k_rmsnorm *a) {
  long long R = a->n, D = a->d;
  if (R == 0 || D == 0) return gpuSuccess;
  ROW_LAUNCH(k_rmsnorm, T, R, D, (T *)agk_ptr(a->y), (agk_c<T> *)agk_optr(a->rstd), (const T *)agk_ptr(a->x),
             (const T *)agk_optr(a->weight), R, D, (agk_c<T>)a->eps);
  return gpuGetLastError();
}
gpuError_t agk_rmsnorm(const agk_env *env, const ag_k_rmsnorm *a) {
  AGK_DISPATCH_FLOAT(a->y->dtype, T, return rmsnorm_go<T>(env, a));
  return gpuErrorNotSupported;
}
template <typename T> static gpuError_t rmsnorm_bwd_go(const agk_env *env, const ag_k_rmsnorm_bwd *a) {
  long long R = a->n, D = a->d;
  if (D == 0) return gpuSuccess;
  const T *dy = (const T *)agk_ptr(a->dy), *x = (const T *)agk_ptr(a->x);
  const agk_c<T> *rstd = (const agk_c<T> *)agk_ptr(a->rstd);
  if (R > 0)
    ROW_LAUNCH(k_rmsnorm_bwd, T, R, D, (T *)agk_ptr(a->dx), dy, x, rstd, (const T *)agk_optr(a->weight), R, D);
  agk_c<T> *dw = (agk_c<T> *)AGK_MULTI_PTR(a, 0, dw);
  if (dw) {
    gpuError_t e = dwdb_go<T>(env, a->call, dw, (agk_c<T> *)0, dy, x, (const agk_c<T> *)0, rstd, R, D);
    if (e != gpuSuccess) return e;
  }
  return gpuGetLastError();
}
gpuError_t agk_rmsnorm_bwd(const agk_env *env, const ag_k_rmsnorm_bwd *a) {
  AGK_DISPATCH_FLOAT(a->dx->dtype, T, return rmsnorm_bwd_go<T>(env, a));
  return gpuErrorNotSupported;
}

/* ---------------- var / std ---------------- */
/* Rows (inner == 1): a lane group or block per row, two passes (mean, then
 * the centred sum of squares), in the compute type (f32, f64 for f64). */
template <int TPR, typename T>
__global__ void AGK_ROW_BOUNDS(TPR) k_var_rows(T *y, const T *x, long long R, long long C, agk_c<T> den, int sq) {
  ROW_LOOP(TPR) {
    const T *xr = x + row * C;
    agk_c<T> s = 0.f;
    for (long long j = lane; j < C; j += TPR) s += agk_tof(xr[j]);
    agk_c<T> mu = row_sum<TPR>(s, sh) / (agk_c<T>)C;
    agk_c<T> v = 0.f;
    for (long long j = lane; j < C; j += TPR) {
      agk_c<T> d = agk_tof(xr[j]) - mu;
      v += d * d;
    }
    v = row_sum<TPR>(v, sh) / den;
    if (lane == 0) y[row] = agk_fromf<T>(sq ? agk_sqrt(v) : v);
  }
}
/* inner > 1: a thread per output, reading down the r dim (coalesced over
 * inner). */
template <typename T>
__global__ void k_var_cols(T *y, const T *x, long long O, long long R, long long I, agk_c<T> den, int sq) {
  long long stride = (long long)gridDim.x * blockDim.x;
  for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < O * I; t += stride) {
    long long o = t / I, i = t - o * I;
    const T *p = x + o * R * I + i;
    agk_c<T> s = 0.f;
    for (long long k = 0; k < R; k++) s += agk_tof(p[k * I]);
    agk_c<T> mu = s / (agk_c<T>)R, v = 0.f;
    for (long long k = 0; k < R; k++) {
      agk_c<T> d = agk_tof(p[k * I]) - mu;
      v += d * d;
    }
    v /= den;
    y[t] = agk_fromf<T>(sq ? agk_sqrt(v) : v);
  }
}
template <typename T> static gpuError_t var_go(const agk_env *env, const ag_k_var *a) {
  long long O = a->outer, R = a->r, I = a->inner;
  if (O == 0 || I == 0) return gpuSuccess;
  double d = (double)R - a->correction;
  agk_c<T> den = d > 0 ? (agk_c<T>)d : 0.f;
  T *y = (T *)agk_ptr(a->out);
  const T *x = (const T *)agk_ptr(a->x);
  const int sq = a->variant == AG_KV_STD;
  if (I == 1 && R > 0) {
    ROW_LAUNCH(k_var_rows, T, O, R, y, x, O, R, den, sq);
  } else {
    agk_launch(k_var_cols<T>, agk_blocks(O * I, 256, 256, agk_wave(env, 256)), 256, 0, env->stream, y, x, O, R, I,
               den, sq);
  }
  return gpuGetLastError();
}
gpuError_t agk_var(const agk_env *env, const ag_k_var *a) {
  AGK_DISPATCH_FLOAT(a->out->dtype, T, return var_go<T>(env, a));
  return gpuErrorNotSupported;
}

/* ---------------- cumsum ---------------- */
/* A thread per line of the scanned dim, in order (deterministic), f32
 * accumulation (f64 for f64); lines are coalesced over inner. */
template <typename T>
__global__ void k_cumsum(T *y, const T *x, long long O, long long R, long long I, int rev) {
  long long stride = (long long)gridDim.x * blockDim.x;
  for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < O * I; t += stride) {
    long long o = t / I, i = t - o * I, base = o * R * I + i;
    agk_c<T> s = 0.f;
    for (long long k = 0; k < R; k++) {
      long long p = base + (rev ? R - 1 - k : k) * I;
      s += agk_tof(x[p]);
      y[p] = agk_fromf<T>(s);
    }
  }
}
template <typename T> static gpuError_t cumsum_go(const agk_env *env, const ag_k_cumsum *a) {
  long long O = a->outer, R = a->r, I = a->inner;
  if (O == 0 || R == 0 || I == 0) return gpuSuccess;
  agk_launch(k_cumsum<T>, agk_blocks(O * I, 256, 256, agk_wave(env, 256)), 256, 0, env->stream,
             (T *)agk_ptr(a->out), (const T *)agk_ptr(a->x), O, R, I, a->variant == AG_KV_CUMSUM_SUFFIX);
  return gpuGetLastError();
}
gpuError_t agk_cumsum(const agk_env *env, const ag_k_cumsum *a) {
  AGK_DISPATCH_FLOAT(a->out->dtype, T, return cumsum_go<T>(env, a));
  return gpuErrorNotSupported;
}

/* ---------------- gather ---------------- */
struct agk_gix {
  const void *p;
  int i64;
  long long s0, s1, s2;
};
AGK_DEV long long gix_at(agk_gix ix, long long o, long long k, long long i) {
  return agk_idx(ix.p, ix.i64, o * ix.s0 + k * ix.s1 + i * ix.s2);
}
template <typename T>
__global__ void k_gather(T *y, const T *x, agk_gix ix, long long O, long long K, long long I, long long X,
                         ag_kernel_error *err) {
  long long stride = (long long)gridDim.x * blockDim.x;
  for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < O * K * I; t += stride) {
    long long i = t % I, ok = t / I, k = ok % K, o = ok / K, j = gix_at(ix, o, k, i);
    if (j < 0 || j >= X) {
      y[t] = agk_fromf<T>(0.f);
      agk_report(err, AG_K_GATHER, j, X);
    } else {
      y[t] = x[(o * X + j) * I + i];
    }
  }
}
/* A thread per (o, i) line: zero it, then add dout in order of k, so the
 * sums repeat bit for bit with no atomics. */
template <typename T>
__global__ void k_gather_bwd(agk_c<T> *dx, const T *g, agk_gix ix, long long O, long long K, long long I, long long X) {
  long long stride = (long long)gridDim.x * blockDim.x;
  for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < O * I; t += stride) {
    long long o = t / I, i = t - o * I;
    agk_c<T> *d = dx + o * X * I + i;
    for (long long j = 0; j < X; j++) d[j * I] = 0.f;
    for (long long k = 0; k < K; k++) {
      long long j = gix_at(ix, o, k, i);
      if (j >= 0 && j < X) d[j * I] += agk_tof(g[(o * K + k) * I + i]);
    }
  }
}
static agk_gix gix_of(const ag_koperand *o) {
  agk_gix ix;
  ix.p = agk_ptr(o);
  ix.i64 = o->dtype == AG_I64;
  ix.s0 = o->strides[0];
  ix.s1 = o->strides[1];
  ix.s2 = o->strides[2];
  return ix;
}
gpuError_t agk_gather(const agk_env *env, const ag_k_gather *a) {
  long long O = a->o, K = a->k, I = a->in, X = a->xlen;
  if (O * K * I == 0) return gpuSuccess;
  unsigned g = agk_blocks(O * K * I, 256, 256, agk_wave(env, 256));
  AGK_DISPATCH_FLOAT(a->out->dtype, T,
                     agk_launch(k_gather<T>, g, 256, 0, env->stream, (T *)agk_ptr(a->out), (const T *)agk_ptr(a->x),
                                gix_of(a->index), O, K, I, X, env->err));
  return gpuGetLastError();
}
gpuError_t agk_gather_bwd(const agk_env *env, const ag_k_gather_bwd *a) {
  long long O = a->o, K = a->k, I = a->in, X = a->xlen;
  if (O * I * X == 0) return gpuSuccess;
  unsigned g = agk_blocks(O * I, 256, 256, agk_wave(env, 256));
  AGK_DISPATCH_FLOAT(a->dout->dtype, T,
                     agk_launch(k_gather_bwd<T>, g, 256, 0, env->stream, (agk_c<T> *)agk_ptr(a->dx),
                                (const T *)agk_ptr(a->dout), gix_of(a->index), O, K, I, X));
  return gpuGetLastError();
}

/* ---------------- topk ---------------- */
/* torch's order: NaN above every number, ties by lower index first. */
template <typename F> AGK_DEV bool topk_before(F a, long long ia, F b, long long ib, int smallest) {
  bool an = a != a, bn = b != b;
  if (an != bn) return smallest ? bn : an;
  if (!an && a != b) return smallest ? a < b : a > b;
  return ia < ib;
}
/* A thread per element: its rank in the line is the number of elements
 * ordered before it; ranks below k are written. O(R) work per element, no
 * scratch, the same result on every device. */
template <typename T>
__global__ void k_topk(T *val, long long *idx, const T *x, long long O, long long R, long long I, long long K,
                       int smallest) {
  long long stride = (long long)gridDim.x * blockDim.x;
  for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < O * R * I; t += stride) {
    long long i = t % I, oj = t / I, j = oj % R, o = oj / R;
    const T *line = x + o * R * I + i;
    agk_c<T> v = agk_tof(line[j * I]);
    long long rank = 0;
    for (long long q = 0; q < R && rank < K; q++)
      if (topk_before(agk_tof(line[q * I]), q, v, j, smallest)) rank++;
    if (rank < K) {
      val[(o * K + rank) * I + i] = line[j * I];
      idx[(o * K + rank) * I + i] = j;
    }
  }
}
gpuError_t agk_topk(const agk_env *env, const ag_k_topk *a) {
  long long O = a->o, R = a->r, I = a->in, K = a->k;
  if (O * R * I == 0 || K == 0) return gpuSuccess;
  unsigned g = agk_blocks(O * R * I, 256, 256, agk_wave(env, 256));
  AGK_DISPATCH_FLOAT(a->x->dtype, T,
                     agk_launch(k_topk<T>, g, 256, 0, env->stream, (T *)agk_ptr(a->values),
                                (long long *)agk_ptr(a->indices), (const T *)agk_ptr(a->x), O, R, I, K,
                                a->variant == AG_KV_TOPK_SMALLEST));
  return gpuGetLastError();
}

/* ---------------- embedding ---------------- */
template <typename T>
__global__ void k_embedding(T *o, const T *tab, const void *idx, int idx64, long long N, long long D, long long V,
                            ag_kernel_error *err) {
  long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < N * D; i += stride) {
    long long n = i / D, d = i - n * D, k = agk_idx(idx, idx64, n);
    if (k < 0 || k >= V) {
      o[i] = agk_fromf<T>(0.f);
      if (d == 0) agk_report(err, AG_K_EMBEDDING, k, V);
    } else {
      o[i] = tab[k * D + d];
    }
  }
}
template <typename T>
__global__ void k_embedding_bwd(agk_c<T> *dt, const T *dout, const void *idx, int idx64, long long N, long long D, long long V) {
  long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < N * D; i += stride) {
    long long n = i / D, d = i - n * D, k = agk_idx(idx, idx64, n);
    if (k >= 0 && k < V) atomicAdd(dt + k * D + d, agk_tof(dout[i]));
  }
}
/* Deterministic variant: thread t owns column d = t % D of the table rows
 * in vocabulary slice t / D and adds the rows of dout that index it in
 * order n = 0, 1, ..: the CPU's order, so the sums equal the CPU's bit for
 * bit. Every thread scans all N indices (a broadcast load per warp). */
template <typename T>
__global__ void k_embedding_bwd_det(agk_c<T> *dt, const T *dout, const void *idx, int idx64, long long N, long long D,
                                    long long V, long long slice, long long nthreads) {
  long long stride = (long long)gridDim.x * blockDim.x;
  for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < nthreads; t += stride) {
    long long d = t % D, v0 = (t / D) * slice, v1 = v0 + slice < V ? v0 + slice : V;
    for (long long n = 0; n < N; n++) {
      long long k = agk_idx(idx, idx64, n);
      if (k >= v0 && k < v1) dt[k * D + d] += agk_tof(dout[n * D + d]);
    }
  }
}
gpuError_t agk_embedding(const agk_env *env, const ag_k_embedding *a) {
  long long N = a->n, D = a->d, V = a->v;
  if (N * D == 0) return gpuSuccess;
  unsigned g = agk_blocks(N * D, 256, 256, agk_wave(env, 256));
  AGK_DISPATCH_EVERY(a->out->dtype, T,
                     agk_launch(k_embedding<T>, g, 256, 0, env->stream, (T *)agk_ptr(a->out),
                                (const T *)agk_ptr(a->table), agk_ptr(a->indices), a->indices->dtype == AG_I64, N, D, V,
                                env->err));
  return gpuGetLastError();
}
gpuError_t agk_embedding_bwd(const agk_env *env, const ag_k_embedding_bwd *a) {
  long long N = a->n, D = a->d, V = a->v;
  if (N * D == 0) return gpuSuccess;
  if (V <= 0) V = a->dtable->ndim > 0 ? a->dtable->shape[0] : 0;
  if (V <= 0) return gpuSuccess;
  if (a->call->flags & AG_KF_DETERMINISTIC) {
    /* enough (column, slice) threads to fill the device, slices of at
     * least one row */
    long long want = agk_wave(env, 256) * 256, slices = (want + D - 1) / D;
    if (slices > V) slices = V;
    long long slice = (V + slices - 1) / slices;
    slices = (V + slice - 1) / slice;
    AGK_DISPATCH_FLOAT(a->dout->dtype, T,
                       agk_launch(k_embedding_bwd_det<T>, agk_blocks(D * slices, 256, 256, 0), 256, 0, env->stream,
                                  (agk_c<T> *)agk_ptr(a->dtable), (const T *)agk_ptr(a->dout), agk_ptr(a->indices),
                                  a->indices->dtype == AG_I64, N, D, V, slice, D * slices));
    return gpuGetLastError();
  }
  unsigned g = agk_blocks(N * D, 256, 256, agk_wave(env, 256));
  AGK_DISPATCH_FLOAT(a->dout->dtype, T,
                     agk_launch(k_embedding_bwd<T>, g, 256, 0, env->stream, (agk_c<T> *)agk_ptr(a->dtable),
                                (const T *)agk_ptr(a->dout), agk_ptr(a->indices), a->indices->dtype == AG_I64, N, D,
                                V));
  return gpuGetLastError();
}
