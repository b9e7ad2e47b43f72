/* conv2d around CLBlast's GEMM (im2col, col2im, bias), pooling and batch
 * norm, f32 NCHW.
 * The column matrix of a chunk of nb samples starting at n0 is laid out
 * [G][K][nb][P] (K = C/G*kh*kw, P = Ho*Wo), so each group's block is one
 * [K, nb*P] matrix for the weight gradient and each sample's slice a
 * [K, P] submatrix (ld nb*P) for the forward and input-gradient GEMMs.
 * col2im and pooling backward gather, so every sum has a fixed order. */

/* Matches clb_conv_meta in backends/opencl/cl_launch.c. */
typedef struct conv_meta {
  long N, C, H, W, Co, Ho, Wo, kh, kw, sh, sw, ph, pw, dh, dw, G;
} conv_meta;

#define F32P(b, o) ((__global float *)((b) + (o)))

__kernel void ag_im2col(gbuf *colb, ulong colo, const gbuf *xb, ulong xo, long n0, long nb, conv_meta m) {
  long e = get_global_id(0);
  const long Cg = m.C / m.G, khw = m.kh * m.kw, K = Cg * khw, P = m.Ho * m.Wo;
  if (e >= m.G * K * nb * P) return;
  long p = e % P, t = e / P, nl = t % nb;
  t /= nb;
  long k = t % K, g = t / K;
  long c = k / khw, r = k - c * khw, i = r / m.kw, j = r - i * m.kw;
  long oh = p / m.Wo, ow = p - oh * m.Wo;
  long ih = oh * m.sh - m.ph + i * m.dh, iw = ow * m.sw - m.pw + j * m.dw;
  float v = 0.0f;
  if (ih >= 0 && ih < m.H && iw >= 0 && iw < m.W)
    v = F32P(xb, xo)[(((n0 + nl) * m.C + g * Cg + c) * m.H + ih) * m.W + iw];
  F32P(colb, colo)[e] = v;
}

/* dx of samples n0..n0+nb-1: each element adds the column entries of its
 * taps in (i, j) order, as the CPU's col2im does. */
__kernel void ag_col2im(gbuf *dxb, ulong dxo, const gbuf *colb, ulong colo, long n0, long nb, conv_meta m) {
  long e = get_global_id(0);
  const long Cg = m.C / m.G, K = Cg * m.kh * m.kw, P = m.Ho * m.Wo;
  if (e >= nb * m.C * m.H * m.W) return;
  long w = e % m.W, t = e / m.W, h = t % m.H;
  t /= m.H;
  long c = t % m.C, nl = t / m.C, g = c / Cg, cl = c - g * Cg;
  const __global float *col = F32P(colb, colo);
  float acc = 0.0f;
  for (long i = 0; i < m.kh; i++) {
    long th = h + m.ph - i * m.dh;
    if (th < 0 || th % m.sh) continue;
    long oh = th / m.sh;
    if (oh >= m.Ho) continue;
    for (long j = 0; j < m.kw; j++) {
      long tw = w + m.pw - j * m.dw;
      if (tw < 0 || tw % m.sw) continue;
      long ow = tw / m.sw;
      if (ow >= m.Wo) continue;
      long k = (cl * m.kh + i) * m.kw + j;
      acc += col[((g * K + k) * nb + nl) * P + oh * m.Wo + ow];
    }
  }
  F32P(dxb, dxo)[((n0 + nl) * m.C + c) * m.H * m.W + h * m.W + w] = acc;
}

/* y[n, co, p] += bias[co] */
__kernel void ag_conv_bias(gbuf *yb, ulong yo, const gbuf *bb, ulong bo, long n, long Co, long P) {
  long e = get_global_id(0);
  if (e >= n) return;
  F32P(yb, yo)[e] += F32P(bb, bo)[(e / P) % Co];
}

/* Matches clb_pool_meta in backends/opencl/cl_launch.c. */
typedef struct pool_meta {
  long planes, H, W, Ho, Wo, sh, sw, ph, pw, kh, kw;
  int op, count_pad; /* an ag_pool_op */
} pool_meta;

/* The window of output (oh, ow) clipped to the input, and its divisor (the
 * CPU backend's rule). */
void pool_window(const pool_meta *g, long oh, long ow, long *h0, long *h1, long *w0, long *w1, long *div) {
  if (g->op == AG_P_ADAPTIVE_AVG) {
    *h0 = oh * g->H / g->Ho;
    *h1 = ((oh + 1) * g->H + g->Ho - 1) / g->Ho;
    *w0 = ow * g->W / g->Wo;
    *w1 = ((ow + 1) * g->W + g->Wo - 1) / g->Wo;
    *div = (*h1 - *h0) * (*w1 - *w0);
    return;
  }
  long a0 = oh * g->sh - g->ph, a1 = a0 + g->kh, b0 = ow * g->sw - g->pw, b1 = b0 + g->kw;
  long hp = a1 < g->H + g->ph ? a1 : g->H + g->ph, wp = b1 < g->W + g->pw ? b1 : g->W + g->pw;
  long d = (hp - a0) * (wp - b0);
  if (a0 < 0) a0 = 0;
  if (b0 < 0) b0 = 0;
  if (a1 > g->H) a1 = g->H;
  if (b1 > g->W) b1 = g->W;
  if (!g->count_pad) d = (a1 - a0) * (b1 - b0);
  *h0 = a0;
  *h1 = a1;
  *w0 = b0;
  *w1 = b1;
  *div = d;
}

__kernel void ag_pool(gbuf *yb, ulong yo, gbuf *ib, ulong io, const gbuf *xb, ulong xo, pool_meta g) {
  long o = get_global_id(0);
  if (o >= g.planes * g.Ho * g.Wo) return;
  long q = o / (g.Ho * g.Wo), r = o - q * g.Ho * g.Wo, oh = r / g.Wo, ow = r - oh * g.Wo;
  long h0, h1, w0, w1, div;
  pool_window(&g, oh, ow, &h0, &h1, &w0, &w1, &div);
  const __global float *xp = F32P(xb, xo) + q * g.H * g.W;
  if (g.op == AG_P_MAX) {
    /* first maximum in row-major window order; a NaN wins at once */
    float best = -INFINITY;
    long bi = h0 * g.W + w0;
    bool done = false;
    for (long i = h0; i < h1 && !done; i++)
      for (long j = w0; j < w1; j++) {
        float v = xp[i * g.W + j];
        if (v > best || isnan(v)) {
          best = v;
          bi = i * g.W + j;
          if (isnan(v)) {
            done = true;
            break;
          }
        }
      }
    F32P(yb, yo)[o] = best;
    ((__global int *)(ib + io))[o] = (int)bi;
  } else {
    float acc = 0.0f;
    for (long i = h0; i < h1; i++)
      for (long j = w0; j < w1; j++) acc += xp[i * g.W + j];
    F32P(yb, yo)[o] = div > 0 ? E_DIV(acc, (float)div) : 0.0f;
  }
}

/* dx[h, w] sums the outputs whose window holds (h, w) (for max: whose saved
 * index is (h, w)) in ascending output order, the CPU's order. */
__kernel void ag_pool_bwd(gbuf *dxb, ulong dxo, const gbuf *dyb, ulong dyo, const gbuf *ib, ulong io,
                          pool_meta g) {
  long e = get_global_id(0);
  if (e >= g.planes * g.H * g.W) return;
  long q = e / (g.H * g.W), hw = e - q * g.H * g.W, h = hw / g.W, w = hw - h * g.W;
  long oh0, oh1, ow0, ow1;
  if (g.op == AG_P_ADAPTIVE_AVG) {
    oh0 = h * g.Ho / g.H;
    oh1 = ((h + 1) * g.Ho + g.H - 1) / g.H;
    ow0 = w * g.Wo / g.W;
    ow1 = ((w + 1) * g.Wo + g.W - 1) / g.W;
  } else {
    long lh = h + g.ph - g.kh + 1, lw = w + g.pw - g.kw + 1;
    oh0 = lh <= 0 ? 0 : (lh + g.sh - 1) / g.sh;
    ow0 = lw <= 0 ? 0 : (lw + g.sw - 1) / g.sw;
    oh1 = (h + g.ph) / g.sh + 1;
    ow1 = (w + g.pw) / g.sw + 1;
  }
  if (oh1 > g.Ho) oh1 = g.Ho;
  if (ow1 > g.Wo) ow1 = g.Wo;
  const __global float *dy = F32P(dyb, dyo);
  const __global int *idx = (const __global int *)(ib + io);
  const long ob = q * g.Ho * g.Wo;
  float acc = 0.0f;
  for (long oh = oh0; oh < oh1; oh++)
    for (long ow = ow0; ow < ow1; ow++) {
      long o = ob + oh * g.Wo + ow;
      if (g.op == AG_P_MAX) {
        if (idx[o] == hw) acc += dy[o];
        continue;
      }
      long h0, h1, w0, w1, div;
      pool_window(&g, oh, ow, &h0, &h1, &w0, &w1, &div);
      if (div > 0 && h >= h0 && h < h1 && w >= w0 && w < w1) acc += E_DIV(dy[o], (float)div);
    }
  F32P(dxb, dxo)[e] = acc;
}

/* Batch norm over contiguous [N, C, HW] (AG_K_BN_STATS, AG_K_BN_APPLY).
 * ag_bn_stats runs one work-group per channel: each work-item sums its
 * strided share of the channel's N*HW elements in f32 (consecutive items
 * read consecutive elements of a plane), then wg_sum adds the shares in a
 * fixed tree order. No atomics: the result depends only on the shape and
 * the work-group size. BN_MEAN_VAR (sums 0; b, m unused): o[c] = mean, then
 * a second pass o[C + c] = mean of (a - mean)^2; BN_SUMS (sums 1): o[c] =
 * sum of a, o[C + c] = sum of a * (b - m[c]). */
#ifndef AG_PORTABLE /* portable.cl has its own */
__kernel void ag_bn_stats(gbuf *ob, ulong oo, const gbuf *ab, ulong ao, const gbuf *bb, ulong bo, const gbuf *mb,
                          ulong mo, long N, long C, long HW, int sums) {
  __local float sh[AG_WG];
  const long ch = get_group_id(0), hw = HW > 0 ? HW : 1, cnt = N * HW;
  const int l = get_local_id(0), L = get_local_size(0);
  /* element k = n*HW + i of the channel; k advances by L = Lq*HW + Lr */
  const long Lq = L / hw, Lr = L % hw, n0 = l / hw, i0 = l % hw;
  const __global float *a = F32P(ab, ao);
  float s0 = 0.0f, s1 = 0.0f;
  if (!sums) {
    for (long k = l, n = n0, i = i0; k < cnt; k += L) {
      s0 += a[(n * C + ch) * HW + i];
      n += Lq;
      i += Lr;
      if (i >= HW) i -= HW, n++;
    }
    const float mean = wg_sum(s0, sh) / (float)cnt;
    for (long k = l, n = n0, i = i0; k < cnt; k += L) {
      const float d = a[(n * C + ch) * HW + i] - mean;
      s1 += d * d;
      n += Lq;
      i += Lr;
      if (i >= HW) i -= HW, n++;
    }
    const float var = wg_sum(s1, sh) / (float)cnt;
    if (l == 0) {
      F32P(ob, oo)[ch] = mean;
      F32P(ob, oo)[C + ch] = var;
    }
    return;
  }
  const __global float *b = F32P(bb, bo);
  const float m = F32P(mb, mo)[ch];
  for (long k = l, n = n0, i = i0; k < cnt; k += L) {
    const long e = (n * C + ch) * HW + i;
    const float v = a[e];
    s0 += v;
    s1 += v * (b[e] - m);
    n += Lq;
    i += Lr;
    if (i >= HW) i -= HW, n++;
  }
  s0 = wg_sum(s0, sh);
  s1 = wg_sum(s1, sh);
  if (l == 0) {
    F32P(ob, oo)[ch] = s0;
    F32P(ob, oo)[C + ch] = s1;
  }
}
#endif

/* y = a*p[c] + q[c] (+ (b - mu[c])*r[c] when b is given), coef rows p, q, r,
 * mu; the CPU's evaluation order, so results equal its bit for bit. */
__kernel void ag_bn_apply(gbuf *yb, ulong yo, const gbuf *ab, ulong ao, const gbuf *cb, ulong co, const gbuf *bb,
                          ulong bo, long n, long C, long HW) {
  long e = get_global_id(0);
  if (e >= n) return;
  const long ch = (e / HW) % C;
  const __global float *coef = F32P(cb, co);
  float v = F32P(ab, ao)[e] * coef[ch] + coef[C + ch];
  if (bb) v = v + (F32P(bb, bo)[e] - coef[3 * C + ch]) * coef[2 * C + ch];
  F32P(yb, yo)[e] = v;
}
