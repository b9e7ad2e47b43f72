/* Scaled dot-product attention: validation, the fused kernel launch
 * (AG_K_SDPA, flash style: only a log-sum-exp per query row is kept for
 * backward) and the unfused composition (matmul, mask, softmax, dropout,
 * matmul), which is the reference and runs wherever a backend declines the
 * fused kernel. The backward of the fused node is in
 * core/autograd/grad_attention.c. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "anygrad/autograd.h"
#include "anygrad/ops.h"
#include "runtime/devstate.h"
#include "tensor/ops_internal.h"

typedef struct sdpa_dims {
  int64_t B, H, Hkv, T, S, D, Dv;
  double scale;
} sdpa_dims;

static bool sdpa_check(const char *name, ag_tensor *q, ag_tensor *k, ag_tensor *v, ag_tensor *mask, double scale,
                       double p, sdpa_dims *d) {
  ag_tensor *in[4] = {q, k, v, mask};
  for (int i = 0; i < 3; i++)
    if (!in[i]) {
      if (ag_last_status() == AG_OK) ag_error_set(AG_ERR_INVALID, "%s: argument %d is NULL", name, i + 1);
      return false;
    }
  if (!ag__same_device(name, mask ? 4 : 3, in)) return false;
  char b1[96], b2[96], b3[96];
  if (!ag_dtype_is_float(q->dtype) || k->dtype != q->dtype || v->dtype != q->dtype ||
      (mask && mask->dtype != q->dtype)) {
    ag_error_set(AG_ERR_DTYPE, "%s: q, k, v%s must share one floating dtype, got %s, %s, %s%s%s", name,
                 mask ? " and mask" : "", ag_dtype_name(q->dtype), ag_dtype_name(k->dtype), ag_dtype_name(v->dtype),
                 mask ? ", " : "", mask ? ag_dtype_name(mask->dtype) : "");
    return false;
  }
  if (q->ndim != 4 || k->ndim != 4 || v->ndim != 4 || k->shape[0] != q->shape[0] || v->shape[0] != q->shape[0] ||
      v->shape[1] != k->shape[1] || v->shape[2] != k->shape[2] || k->shape[3] != q->shape[3] || k->shape[1] == 0 ||
      q->shape[1] % k->shape[1] != 0) {
    ag_error_set(AG_ERR_SHAPE,
                 "%s: q %s, k %s, v %s must be [B, H, T, D], [B, Hkv, S, D], [B, Hkv, S, Dv] with H %% Hkv == 0",
                 name, ag_tensor_describe(q, b1, sizeof b1), ag_tensor_describe(k, b2, sizeof b2),
                 ag_tensor_describe(v, b3, sizeof b3));
    return false;
  }
  d->B = q->shape[0];
  d->H = q->shape[1];
  d->T = q->shape[2];
  d->D = q->shape[3];
  d->Hkv = k->shape[1];
  d->S = k->shape[2];
  d->Dv = v->shape[3];
  if (mask) {
    const int64_t full[4] = {d->B, d->H, d->T, d->S};
    bool ok = mask->ndim <= 4;
    for (int i = 0; ok && i < mask->ndim; i++) {
      int64_t m = mask->shape[mask->ndim - 1 - i];
      ok = m == 1 || m == full[3 - i];
    }
    if (!ok) {
      ag_error_set(AG_ERR_SHAPE, "%s: mask %s does not broadcast to the scores [%lld, %lld, %lld, %lld]", name,
                   ag_tensor_describe(mask, b1, sizeof b1), (long long)d->B, (long long)d->H, (long long)d->T,
                   (long long)d->S);
      return false;
    }
  }
  if (!(p >= 0 && p < 1)) {
    ag_error_set(AG_ERR_INVALID, "%s: dropout_p must be in [0, 1), got %g", name, p);
    return false;
  }
  if (!isfinite(scale)) {
    ag_error_set(AG_ERR_INVALID, "%s: scale must be finite, got %g", name, scale);
    return false;
  }
  d->scale = scale != 0 ? scale : (d->D ? 1.0 / sqrt((double)d->D) : 1.0);
  return true;
}

/* k or v [B, Hkv, S, X] repeated to [B, H, S, X] (head h reads h / G). */
static ag_tensor *repeat_heads(ag_tensor *t, int64_t H) {
  const int64_t B = t->shape[0], Hkv = t->shape[1], S = t->shape[2], X = t->shape[3];
  if (Hkv == H) return ag_tensor_retain(t);
  ag_tensor *u = ag_reshape(t, 5, (int64_t[]){B, Hkv, 1, S, X});
  ag_tensor *e = ag_expand(u, 5, (int64_t[]){B, Hkv, H / Hkv, S, X});
  ag_tensor *r = ag_reshape(e, 4, (int64_t[]){B, H, S, X});
  ag_tensor_release(u);
  ag_tensor_release(e);
  return r;
}

/* 0 where key j is visible to query i (j <= i), -inf above: [T, S]. */
static ag_tensor *causal_mask(ag_device dev, ag_dtype dt, int64_t T, int64_t S) {
  float *h = malloc(sizeof(float) * (size_t)(T * S > 0 ? T * S : 1));
  if (!h) {
    ag_error_set(AG_ERR_OOM, "ag_scaled_dot_product_attention: no host memory for a %lldx%lld causal mask",
                 (long long)T, (long long)S);
    return NULL;
  }
  for (int64_t i = 0; i < T; i++)
    for (int64_t j = 0; j < S; j++) h[i * S + j] = j <= i ? 0.0f : -INFINITY;
  ag_tensor *m32 = ag_from_host(dev, AG_F32, 2, (int64_t[]){T, S}, h);
  free(h);
  ag_tensor *m = dt == AG_F32 ? m32 : ag_cast(m32, dt);
  if (m != m32) ag_tensor_release(m32);
  return m;
}

static ag_tensor *unfused(const sdpa_dims *d, ag_tensor *q, ag_tensor *k, ag_tensor *v, ag_tensor *mask,
                          bool causal, double p, ag_generator *g) {
  ag_tensor *kr = repeat_heads(k, d->H), *vr = repeat_heads(v, d->H);
  ag_tensor *kt = kr ? ag_transpose(kr, 2, 3) : NULL;
  ag_tensor *s0 = kt ? ag_matmul(q, kt) : NULL;
  ag_tensor *s = s0 ? ag_mul_scalar(s0, d->scale) : NULL;
  ag_tensor *sm = NULL, *sc = NULL, *cm = NULL, *pr = NULL, *pd = NULL, *out = NULL;
  if (s && mask) sm = ag_add(s, mask);
  ag_tensor *cur = mask ? sm : s;
  if (cur && causal) {
    cm = causal_mask(ag_tensor_device(q), q->dtype, d->T, d->S);
    sc = cm ? ag_add(cur, cm) : NULL;
    cur = sc;
  }
  if (cur) pr = ag_softmax(cur, -1);
  if (pr) pd = ag_dropout(pr, p, p > 0, g);
  if (pd && vr) out = ag_matmul(pd, vr);
  ag_tensor *rel[] = {kr, vr, kt, s0, s, sm, sc, cm, pr, pd};
  for (size_t i = 0; i < sizeof rel / sizeof *rel; i++) ag_tensor_release(rel[i]);
  return out;
}

ag_tensor *ag_scaled_dot_product_attention_unfused(ag_tensor *q, ag_tensor *k, ag_tensor *v, ag_tensor *mask,
                                                   bool causal, double scale, double dropout_p, ag_generator *g) {
  sdpa_dims d;
  if (!sdpa_check("ag_scaled_dot_product_attention_unfused", q, k, v, mask, scale, dropout_p, &d)) return NULL;
  return unfused(&d, q, k, v, mask, causal, dropout_p, g);
}

void ag__sdpa_call_args(ag_kernel_call *c, ag_tensor *mask, const int64_t bhts[4], double scale, bool causal,
                        double p, uint64_t seed, uint64_t offset) {
  if (mask) ag__broadcast_operand(&c->o[4], mask, 4, bhts);
  c->s[0] = scale;
  c->s[1] = p;
  c->i[0] = causal ? 1 : 0;
  c->seed = seed;
  c->offset = offset;
}

ag_tensor *ag_scaled_dot_product_attention(ag_tensor *q, ag_tensor *k, ag_tensor *v, ag_tensor *mask, bool causal,
                                           double scale, double dropout_p, ag_generator *g) {
  static const char name[] = "ag_scaled_dot_product_attention";
  sdpa_dims d;
  if (!sdpa_check(name, q, k, v, mask, scale, dropout_p, &d)) return NULL;
  ag_devstate *ds = ag__ds(q);
  ag_tensor *in[3] = {q, k, v};
  const bool grad = ag__grad_needed(3, in);
  /* The fused path needs the backward kernel too when the op is recorded:
   * a node must never find its backward missing. */
  if (!ag__supports(ds, AG_K_SDPA, 0, q->dtype) ||
      (grad && !ag__supports(ds, AG_K_SDPA_BWD, 0, q->dtype)))
    return unfused(&d, q, k, v, mask, causal, dropout_p, g);
  ag_no_grad_begin();
  ag_tensor *qc = ag_contiguous(q), *kc = ag_contiguous(k), *vc = ag_contiguous(v);
  ag_grad_mode_end();
  const ag_dtype ldt = q->dtype == AG_F64 ? AG_F64 : AG_F32;
  ag_tensor *out = qc && kc && vc ? ag__tensor_new(ds, q->dtype, 4, (int64_t[]){d.B, d.H, d.T, d.Dv}) : NULL;
  ag_tensor *lse = out ? ag__tensor_new(ds, ldt, 3, (int64_t[]){d.B, d.H, d.T}) : NULL;
  ag_status st = lse ? AG_OK : ag_last_status();
  uint64_t seed = 0, offset = 0;
  if (st == AG_OK && dropout_p > 0)
    ag__generator_take(g, ((uint64_t)(d.B * d.H * d.T * d.S) + 3) / 4, &seed, &offset);
  if (st == AG_OK && d.B * d.H * d.T * d.Dv > 0) {
    ag_kernel_call c;
    ag__kcall_init(&c, AG_K_SDPA, 0, name, 6, (ag_tensor *[]){out, qc, kc, vc, NULL, lse});
    ag__sdpa_call_args(&c, mask, (const int64_t[]){d.B, d.H, d.T, d.S}, d.scale, causal, dropout_p, seed, offset);
    st = ag__launch(ds, &c);
    if (st == AG_ERR_UNSUPPORTED) {
      /* the kernel declined these shapes (a head too large for it): the
       * unfused composition runs instead, with the same Philox blocks */
      ag_error_clear();
      ag_tensor *rel[] = {qc, kc, vc, lse, out};
      for (size_t i = 0; i < sizeof rel / sizeof *rel; i++) ag_tensor_release(rel[i]);
      if (dropout_p > 0) ag_generator_set_state(g ? g : ag_default_generator(), seed, offset);
      return unfused(&d, q, k, v, mask, causal, dropout_p, g);
    }
  }
  if (st == AG_OK && grad) {
    ag_gparams gp;
    memset(&gp, 0, sizeof gp);
    gp.s[0] = d.scale;
    gp.s[1] = dropout_p;
    gp.i[0] = causal;
    gp.i[1] = (int64_t)seed;
    gp.i[2] = (int64_t)offset;
    ag_tensor *sv[6] = {qc, kc, vc, out, lse, mask};
    st = ag__grad_record(out, AG_G_SDPA, 3, in, 6, sv, &gp);
  }
  ag_tensor *rel[] = {qc, kc, vc, lse};
  for (size_t i = 0; i < sizeof rel / sizeof *rel; i++) ag_tensor_release(rel[i]);
  if (st != AG_OK) {
    ag_tensor_release(out);
    return NULL;
  }
  return out;
}
