/* AG_K_SCATTER_ADD: out [o, xlen, in] += src [o, k, in] at the index along
 * xlen. A work-item per output element walks k in order and adds the
 * entries that name it in f32, then stores once: no atomics, deterministic,
 * the CPU's and the GPU kernels' order. The work-item of element 0 of each
 * line reports out-of-range entries. The index is i32 or i64 (idx64), with
 * element strides s0, s1, s2. */
long sc_index(const gbuf *ix, ulong xo, int idx64, long p) {
  return idx64 ? ((const __global long *)(ix + xo))[p] : (long)((const __global int *)(ix + xo))[p];
}
__kernel void ag_scatter_add(gbuf *out, ulong oo, const gbuf *src, ulong so, int dt, const gbuf *ix, ulong xo,
                             int idx64, long s0, long s1, long s2, long O, long K, long I, long X,
                             __global int *err) {
  long t = get_global_id(0);
  if (t >= O * X * I) return;
  long i = t % I, oj = t / I, j = oj % X, o = oj / X;
  float acc = ldf(out, oo, t, dt);
  for (long k = 0; k < K; k++) {
    long q = sc_index(ix, xo, idx64, o * s0 + k * s1 + i * s2);
    if (q == j) acc += ldf(src, so, (o * K + k) * I + i, dt);
    else if (j == 0 && (q < 0 || q >= X)) set_error(err, ERR_INDEX, AG_K_SCATTER_ADD, q, X);
  }
  stf(out, oo, t, dt, acc);
}
#ifdef AG_FP64
/* f64 (cl_khr_fp64): the same walk, accumulated in double. */
__kernel void ag_scatter_add_d(gbuf *out, ulong oo, const gbuf *src, ulong so, const gbuf *ix, ulong xo, int idx64,
                               long s0, long s1, long s2, long O, long K, long I, long X, __global int *err) {
  long t = get_global_id(0);
  if (t >= O * X * I) return;
  long i = t % I, oj = t / I, j = oj % X, o = oj / X;
  __global double *od = (__global double *)(out + oo);
  const __global double *sd = (const __global double *)(src + so);
  double acc = od[t];
  for (long k = 0; k < K; k++) {
    long q = sc_index(ix, xo, idx64, o * s0 + k * s1 + i * s2);
    if (q == j) acc += sd[(o * K + k) * I + i];
    else if (j == 0 && (q < 0 || q >= X)) set_error(err, ERR_INDEX, AG_K_SCATTER_ADD, q, X);
  }
  od[t] = acc;
}
#endif
