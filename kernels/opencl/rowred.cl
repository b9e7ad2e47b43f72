/* Default-mode reductions over rows as work-group trees: each work-group
 * reduces a contiguous chunk with 4-wide loads and a local-memory tree; a
 * row longer than one group's chunk is split across groups and a second
 * pass reduces the partials. The tree's shape depends only on the sizes and
 * the launch (fixed per device), so results repeat run to run. Helpers
 * ld4/st4 serve the row kernels of nn.cl too. The portable program has its
 * own (portable.cl). */
#ifndef AG_PORTABLE

/* Elements e..e+3 of a float-dtype buffer as f32 (loads need element
 * alignment only). */
float4 ld4(const gbuf *b, ulong off, long e, int dt) {
  const gbuf *p = b + off;
  if (dt == DT_F32) return vload4(0, (const __global float *)p + e);
  if (dt == DT_F16) return vload_half4(0, (const __global half *)p + e);
  return (float4)(ldf(b, off, e, dt), ldf(b, off, e + 1, dt), ldf(b, off, e + 2, dt), ldf(b, off, e + 3, dt));
}

void st4(gbuf *b, ulong off, long e, int dt, float4 v) {
  gbuf *p = b + off;
  if (dt == DT_F32) {
    vstore4(v, 0, (__global float *)p + e);
  } else if (dt == DT_F16) {
    vstore_half4_rte(v, 0, (__global half *)p + e);
  } else {
    stf(b, off, e, dt, v.x);
    stf(b, off, e + 1, dt, v.y);
    stf(b, off, e + 2, dt, v.z);
    stf(b, off, e + 3, dt, v.w);
  }
}

float red_id(int op) { return op == AG_R_SUM ? 0.0f : op == AG_R_MIN ? INFINITY : -INFINITY; }

/* red_f lane by lane (NaN wins and stays) */
float4 red_f4(int op, float4 a, float4 v) {
  if (op == AG_R_SUM) return a + v;
  int4 t = op == AG_R_MIN ? v < a : v > a;
  return select(a, v, (t | isnan(v)) & ~isnan(a));
}

float fold4(int op, float4 a) { return red_f(op, red_f(op, a.x, a.y), red_f(op, a.z, a.w)); }

/* Tree over the work-group (a power of two); every work-item calls it. */
float wg_red(int op, float v, __local float *sh) {
  int l = get_local_id(0);
  sh[l] = v;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int s = get_local_size(0) / 2; s > 0; s >>= 1) {
    if (l < s) sh[l] = red_f(op, sh[l], sh[l + s]);
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  float r = sh[0];
  barrier(CLK_LOCAL_MEM_FENCE);
  return r;
}

/* This work-item's share of elements [start, start + len): 4-wide loads
 * strided by the group, then the tail. */
float chunk_red(int op, const gbuf *x, ulong xo, int dt, long start, long len) {
  int l = get_local_id(0), L = get_local_size(0);
  float4 acc = (float4)(red_id(op));
  long n4 = len / 4;
  float a;
  if (op == AG_R_SUM) {
    for (long q = l; q < n4; q += L) acc += ld4(x, xo, start + 4 * q, dt);
    a = (acc.x + acc.y) + (acc.z + acc.w);
  } else {
    /* compare-and-select and a NaN flag: plain vector min/max (fmax on
     * PoCL is a call per element), NaN still wins */
    int4 nan = (int4)(0);
    for (long q = l; q < n4; q += L) {
      float4 v = ld4(x, xo, start + 4 * q, dt);
      nan |= v != v; /* isnan(v) */
      acc = select(acc, v, op == AG_R_MIN ? v < acc : v > acc);
    }
    a = any(nan) ? NAN : fold4(op, acc);
  }
  for (long j = n4 * 4 + l; j < len; j += L) a = red_f(op, a, ldf(x, xo, start + j, dt));
  return a;
}

/* SUM (times scale), MAX or MIN of float rows of r: group g reduces chunk
 * g % nb of row g / nb into o[g]. With nb > 1, o is the f32 partials
 * [rows, nb] of a first pass, reduced by a second launch (r = chunk = nb). */
__kernel void ag_red_rows(gbuf *o, ulong oo, int odt, const gbuf *x, ulong xo, int dt, int op, float scale,
                          long r, long chunk, long nb) {
  __local float sh[AG_WG];
  long g = get_group_id(0), row = g / nb, b = g % nb, start = b * chunk;
  long len = min(chunk, r - start);
  float a = wg_red(op, chunk_red(op, x, xo, dt, row * r + start, len), sh);
  if (get_local_id(0) == 0) stf(o, oo, g, odt, op == AG_R_SUM ? a * scale : a);
}

/* argmax: (b, ib) into (a, ia), the winner of the two: the first NaN, else
 * the larger, the lower index on ties; INT_MAX is no element. */
void am_merge(float *a, int *ia, float b, int ib) {
  if (ib == INT_MAX) return;
  bool same = *a == b || (isnan(*a) && isnan(b));
  if (*ia == INT_MAX || (same ? ib < *ia : am_takes(*a, b))) {
    *a = b;
    *ia = ib;
  }
}

/* argmax of float rows (the first NaN, else the first maximum; 0 for an
 * empty row), chunked as ag_red_rows: group g writes the value and row index
 * of its chunk's winner to pv[g] and o[g] (i32) where pv is given, else the
 * index alone. A second pass reads the partials' values with their indices
 * xi. Each lane of a work-item scans its elements in row order, keeping the
 * first of equal values; lanes and the tree merge with am_merge. */
__kernel void ag_argmax_rows(gbuf *o, ulong oo, gbuf *pv, ulong pvo, const gbuf *x, ulong xo, int dt,
                             const gbuf *xi, ulong xio, long r, long chunk, long nb) {
  __local float sf[AG_WG];
  __local int sx[AG_WG];
  long g = get_group_id(0), row = g / nb, start = (g % nb) * chunk, base = row * r + start;
  long len = min(chunk, r - start), n4 = len / 4;
  int l = get_local_id(0), L = get_local_size(0);
  const __global int *ix = xi ? (const __global int *)(xi + xio) : NULL;
  /* per lane the first maximum and the quad it came from (a lane that
   * saw only -inf keeps its first quad, below); NaN only raises a flag
   * here and a rescan of this item's quads, taken by rows holding a NaN
   * alone, finds the first */
  float4 a4 = (float4)(-INFINITY);
  int4 q4 = (int4)(INT_MAX), nan = (int4)(0);
  for (long q = l; q < n4; q += L) {
    float4 v = ld4(x, xo, base + 4 * q, dt);
    int4 take = v > a4;
    nan |= v != v;
    a4 = select(a4, v, take);
    q4 = select(q4, (int4)((int)q), take);
  }
  if (l < n4) q4 = select(q4, (int4)(l), q4 == (int4)(INT_MAX));
  int4 i4 = (int4)(INT_MAX);
  for (int k = 0; k < 4; k++) {
    int qk = k == 0 ? q4.x : k == 1 ? q4.y : k == 2 ? q4.z : q4.w;
    if (qk == INT_MAX) continue;
    int at = ix ? ix[base + 4 * qk + k] : (int)(start + 4 * qk + k);
    if (k == 0) i4.x = at;
    else if (k == 1) i4.y = at;
    else if (k == 2) i4.z = at;
    else i4.w = at;
  }
  if (any(nan)) {
    a4 = (float4)(-INFINITY);
    i4 = (int4)(INT_MAX);
    for (long q = l; q < n4 && a4.x == -INFINITY; q += L) {
      float4 v = ld4(x, xo, base + 4 * q, dt);
      int4 isn = v != v;
      if (!any(isn)) continue;
      int k = isn.x ? 0 : isn.y ? 1 : isn.z ? 2 : 3;
      a4.x = NAN;
      i4.x = ix ? ix[base + 4 * q + k] : (int)(start + 4 * q + k);
    }
  }
  float a = a4.x;
  int ia = i4.x;
  am_merge(&a, &ia, a4.y, i4.y);
  am_merge(&a, &ia, a4.z, i4.z);
  am_merge(&a, &ia, a4.w, i4.w);
  for (long j = n4 * 4 + l; j < len; j += L) /* after every quad of this item's */
    am_merge(&a, &ia, ldf(x, xo, base + j, dt), ix ? ix[base + j] : (int)(start + j));
  sf[l] = a;
  sx[l] = ia;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int s = L / 2; s > 0; s >>= 1) {
    if (l < s) {
      float t = sf[l];
      int it = sx[l];
      am_merge(&t, &it, sf[l + s], sx[l + s]);
      sf[l] = t;
      sx[l] = it;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (l == 0) {
    if (pv) ((__global float *)(pv + pvo))[g] = sf[0];
    sti(o, oo, g, pv || sx[0] != INT_MAX ? sx[0] : 0);
  }
}

/* The same over the middle dim of [outer, r, inner] with inner % 4 == 0:
 * a work-item per 4 neighbouring outputs walks rows [b * chunk, + chunk) of
 * its column block; nb > 1 writes f32 partials [nb, outer * inner] that a
 * second launch (outer = 1, r = nb) reduces in order. */
__kernel void ag_red_cols4(gbuf *o, ulong oo, int odt, const gbuf *x, ulong xo, int dt, int op, float scale,
                           long outer, long r, long inner, long chunk, long nb) {
  long i = get_global_id(0), n4 = outer * inner / 4;
  if (i >= n4 * nb) return;
  long b = i / n4, t = (i % n4) * 4, ou = t / inner, in = t % inner;
  long j0 = b * chunk, j1 = min(r, j0 + chunk);
  float4 acc = (float4)(red_id(op));
  for (long j = j0; j < j1; j++) acc = red_f4(op, acc, ld4(x, xo, (ou * r + j) * inner + in, dt));
  if (op == AG_R_SUM) acc *= scale;
  st4(o, oo, b * outer * inner + t, odt, acc);
}

#endif
