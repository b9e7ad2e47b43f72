/* Portable numerics on Vulkan (docs/numerics.md): the device probe behind
 * portable_check, and the canonical sum S of REDUCE in passes (portable.comp,
 * K_P_SUM). The portable modules are built from the same GLSL with
 * -DAG_PORTABLE -DAG_GLSL (pmath.h for the vocabulary, every float
 * precise); they are created on first use, so the default mode pays
 * nothing for them. */
#include <math.h>
#include <string.h>

#include "vk_internal.h"

/* The probe's inputs and what IEEE binary32 with gradual underflow and no
 * contraction gives for them (computed here, in C, where float arithmetic
 * is IEEE: the module is built with -ffp-contract=off where it matters,
 * and these are single operations). */
#define VKP_PROBE_N 7
static void probe_expect(const float *in, float *out) {
  volatile float a = in[0], b = in[1], c = in[2], d = in[3], e = in[4], g = in[5], h = in[6];
  volatile float gg = g * g;
  out[0] = a * b;
  out[1] = c + c;
  out[2] = c * d;
  out[3] = a - e;
  out[4] = c * b;
  out[5] = gg - h;
  out[6] = g / h;
}

ag_status vkb_portable_check(int dev) {
  vkb_device *d = vkb_dev_open(dev);
  if (!d) return ag_last_status();
  /* without SignedZeroInfNanPreserve a driver may fold x + 0 to x or x * 0
   * to 0, which moves the sign of zeros and loses NaN: no probe can show
   * it never does */
  if (!d->szinp32)
    return ag_error_set(AG_ERR_UNSUPPORTED,
                        "vulkan:%d refuses portable numerics: %s lacks shaderSignedZeroInfNanPreserveFloat32, so "
                        "signed zeros, infinities and NaN may be optimized away",
                        dev, d->props.deviceName);
  /* a = 1.5 * 2^-126, b = 0.5, c = 3 * 2^-149, d = 2^20, e = 2^-126,
   * g = 1 + 2^-12, h = g * g rounded (1 + 2^-11) */
  const float in[VKP_PROBE_N] = {ldexpf(1.5f, -126), 0.5f, ldexpf(3.0f, -149), ldexpf(1.0f, 20), ldexpf(1.0f, -126),
                                 1.0f + ldexpf(1.0f, -12), 1.0f + ldexpf(1.0f, -11)};
  float want[VKP_PROBE_N], got[VKP_PROBE_N];
  probe_expect(in, want);
  ag_bstream *s = NULL;
  vkb_mem m = {0};
  ag_status st = vkb_stream_create(dev, &s);
  if (st == AG_OK) st = vkb_mem_alloc(d, 64, VKB_MEM_HOST, &m);
  if (st == AG_OK) {
    vkb_args a = {0};
    a.p[0] = m.addr;
    memcpy(a.f, in, sizeof in);
    memset(m.map, 0xff, 64);
    st = vkb_mem_flush(d, &m, 0, 64);
    if (st == AG_OK) {
      pthread_mutex_lock(&s->lock);
      st = vkb_dispatch(s, VKS_P_PROBE, 0, &a, 1, 1, 1);
      pthread_mutex_unlock(&s->lock);
    }
    if (st == AG_OK) st = vkb_stream_synchronize(s);
    if (st == AG_OK) st = vkb_mem_invalidate(d, &m, 0, 64);
    if (st == AG_OK) memcpy(got, m.map, sizeof got);
  }
  if (m.buf) vkb_mem_free(d, &m);
  if (s) vkb_stream_destroy(s);
  if (st != AG_OK) return st;
  static const char *what[VKP_PROBE_N] = {"a subnormal product",
                                          "a sum of subnormals",
                                          "a product of a subnormal into the normal range",
                                          "a difference into the subnormal range",
                                          "a subnormal product rounded to even",
                                          "a * b - c without contraction",
                                          "pmath's division"};
  for (int k = 0; k < VKP_PROBE_N; k++) {
    uint32_t gb, wb;
    memcpy(&gb, &got[k], 4);
    memcpy(&wb, &want[k], 4);
    if (gb != wb)
      return ag_error_set(AG_ERR_UNSUPPORTED,
                          "vulkan:%d refuses portable numerics: %s gave 0x%08x where IEEE binary32 gives 0x%08x "
                          "(%s: subnormals flushed or operations fused)",
                          dev, what[k], (unsigned)gb, (unsigned)wb, d->props.deviceName);
  }
  return AG_OK;
}

/* Floats of scratch the levels of S over Q lines of r terms take. */
static int64_t sum_scratch(int64_t Q, int64_t r) {
  int64_t nb0 = r > VKB_WG ? (r + VKB_WG - 1) / VKB_WG : 1;
  int64_t nb1 = nb0 > VKB_WG ? (nb0 + VKB_WG - 1) / VKB_WG : 1;
  return nb0 > 1 ? Q * (nb0 + nb1) : 0;
}

/* S over x viewed as [outer, r, inner] for each (o, i) (of the squares
 * of x when square), times scale when scale != 1 (docs/numerics.md, REDUCE
 * SUM): level 0 reads x, each further level the f32 block sums of the
 * previous one from scr (sum_scratch floats), until one block is left;
 * that level writes the output. */
static ag_status sum_levels(ag_bstream *s, uint64_t out, ag_dtype odt, uint64_t x, ag_dtype xdt, int64_t outer,
                            int64_t r, int64_t inner, double scale, bool square, uint64_t scr) {
  int64_t Q = outer * inner;
  if (Q <= 0) return AG_OK;
  int64_t nb0 = r > VKB_WG ? (r + VKB_WG - 1) / VKB_WG : 1;
  uint64_t buf[2] = {scr, scr + (uint64_t)(Q * nb0) * sizeof(float)};
  uint64_t src = x;
  int sdt = xdt;
  int64_t len = r, inn = inner, lvl = 0;
  for (;;) {
    int64_t nb = len > VKB_WG ? (len + VKB_WG - 1) / VKB_WG : 1;
    vkb_args a = {0};
    bool last = nb == 1;
    a.p[0] = last ? out : buf[lvl & 1];
    a.p[1] = src;
    a.k[0] = last ? (int)odt : AG_F32;
    a.k[1] = sdt;
    a.k[2] = last;
    a.k[3] = last && scale != 1.0;
    a.k[4] = square && lvl == 0;
    a.f[0] = (float)scale;
    a.n[0] = Q;
    a.n[1] = len;
    a.n[2] = inn;
    a.n[3] = nb;
    /* the last level: an invocation per output (psum1) */
    a.k[5] = last;
    ag_status st = vkb_dispatch1(s, VKS_P_SUM, 0, &a, last ? Q : Q * ((nb + 15) / 16) * VKB_WG);
    if (st != AG_OK || last) return st;
    src = buf[lvl & 1];
    sdt = AG_F32;
    len = nb;
    inn = 1;
    lvl++;
  }
}

ag_status vkb_portable_sum(ag_bstream *s, uint64_t out, ag_dtype odt, uint64_t x, ag_dtype xdt, int64_t outer,
                           int64_t r, int64_t inner, double scale) {
  int64_t Q = outer * inner, need = sum_scratch(Q, r);
  uint64_t scr = 0;
  ag_status st = need ? vkb_scratch(s, (size_t)need * sizeof(float), &scr) : AG_OK;
  return st != AG_OK ? st : sum_levels(s, out, odt, x, xdt, outer, r, inner, scale, false, scr);
}

/* s_t = S(x_i * x_i) of each tensor into scratch, then S(s_0 .. s_{T-1}). */
ag_status vkb_portable_sumsq(ag_bstream *s, const ag_k_sumsq *a) {
  int T = AGK_MULTI_GROUPS(a);
  int64_t most = 0;
  for (int k = 0; k < T; k++) {
    int64_t need = sum_scratch(1, AGK_MULTI(a, k, x).numel);
    most = need > most ? need : most;
  }
  int64_t parts = T > 0 ? T : 1, tail = sum_scratch(1, T);
  uint64_t scr;
  ag_status st = vkb_scratch(s, (size_t)(parts + (most > tail ? most : tail)) * sizeof(float), &scr);
  if (st != AG_OK) return st;
  uint64_t lv = scr + (uint64_t)parts * sizeof(float);
  for (int k = 0; k < T && st == AG_OK; k++) {
    const ag_kmulti_entry *x = &AGK_MULTI(a, k, x);
    if (x->dtype == AG_F64) return ag_error_set(AG_ERR_UNSUPPORTED, "%s: f64 has no portable numerics on vulkan",
                                                a->call->name ? a->call->name : "sumsq");
    uint64_t xa = x->base ? ((const vkb_mem *)x->base)->addr + x->offset : 0;
    st = sum_levels(s, scr + (uint64_t)k * sizeof(float), AG_F32, xa, x->dtype, 1, x->numel, 1, 1.0, true, lv);
  }
  if (st != AG_OK) return st;
  const ag_koperand *o = a->out;
  return sum_levels(s, ((const vkb_mem *)o->base)->addr + o->offset, o->dtype, scr, AG_F32, 1, T, 1, 1.0, false, lv);
}

/* A work-group (an invocation for lines of one block) per output of
 * [outer, r, inner] (portable.comp: K_P_LSE, K_P_NORM). */
static ag_status lines(ag_bstream *s, const ag_kernel_call *c, vkb_shader sh, const ag_koperand *out,
                       const ag_koperand *x, int64_t outer, int64_t r, int64_t inner, int variant) {
  int64_t Q = outer * inner;
  if (Q <= 0) return AG_OK;
  if (r > ((int64_t)1 << 24) || 16 * ((r + VKB_WG - 1) / VKB_WG) + 64 > s->d->loop_limit)
    return ag_error_set(AG_ERR_UNSUPPORTED, "%s: lines of %lld elements are too long for the portable sums on vulkan:%d",
                        c->name ? c->name : "vulkan", (long long)r, s->dev);
  vkb_args v = {0};
  v.p[0] = ((const vkb_mem *)out->base)->addr + out->offset;
  v.p[1] = ((const vkb_mem *)x->base)->addr + x->offset;
  v.k[0] = out->dtype;
  v.k[1] = x->dtype;
  v.k[6] = variant;
  v.n[0] = outer;
  v.n[1] = r;
  v.n[2] = inner;
  v.k[5] = r <= VKB_WG; /* lines of one block: an invocation each */
  return vkb_dispatch1(s, sh, 0, &v, v.k[5] ? Q : Q * VKB_WG);
}

ag_status vkb_portable_lse(ag_bstream *s, const ag_k_logsumexp *a) {
  return lines(s, a->call, VKS_P_LSE, a->out, a->x, a->outer, a->r, a->inner, 0);
}

ag_status vkb_portable_norm(ag_bstream *s, const ag_k_norm *a) {
  return lines(s, a->call, VKS_P_NORM, a->out, a->x, a->outer, a->r, a->inner, a->variant);
}
