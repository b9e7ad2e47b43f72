/* Backward of the fused attention node (AG_G_SDPA, recorded by
 * core/tensor/attention.c): one AG_K_SDPA_BWD call writes dq, dk and dv. */
#include "anygrad/ops.h"
#include "autograd/grad_internal.h"
#include "tensor/ops_internal.h"

/* Backward of the fused node: one kernel call writes dq, dk and dv,
 * recomputing the scores from q, k and the saved log-sum-exp. */
ag_status ag__sdpa_backward(ag_node *n, ag_tensor *g, ag_tensor **gin) {
  ag_tensor *qc = n->saved[0], *kc = n->saved[1], *vc = n->saved[2], *out = n->out_val, *lse = n->saved[4];
  ag_tensor *mask = n->saved[5];
  if (!qc || !kc || !vc || !out || !lse)
    return ag_error_set(AG_ERR_INTERNAL, "ag_scaled_dot_product_attention backward: inputs not saved");
  /* q [B, H, T, D], k [B, Hkv, S, D], v [B, Hkv, S, Dv] (the forward checked them) */
  const int64_t B = qc->shape[0], H = qc->shape[1], T = qc->shape[2], S = kc->shape[2], D = qc->shape[3],
                Dv = vc->shape[3];
  ag_tensor *gc = ag_contiguous(g);
  ag_tensor *dq = ag_empty_like(qc), *dk = ag_empty_like(kc), *dv = ag_empty_like(vc);
  ag_status st = gc && dq && dk && dv ? AG_OK : ag_last_status();
  if (st == AG_OK && gc->dtype != qc->dtype)
    st = ag_error_set(AG_ERR_DTYPE, "ag_scaled_dot_product_attention backward: gradient is %s, output %s",
                      ag_dtype_name(gc->dtype), ag_dtype_name(qc->dtype));
  if (st == AG_OK && (T == 0 || S == 0 || D == 0 || Dv == 0)) {
    /* nothing to recompute: empty sums are zero */
    st = ag_fill_(dq, 0);
    if (st == AG_OK) st = ag_fill_(dk, 0);
    if (st == AG_OK) st = ag_fill_(dv, 0);
  } else if (st == AG_OK && B * H > 0) {
    ag_kmulti m;
    m.count = 0;
    ag__kmulti_set(&m, 0, dq);
    ag__kmulti_set(&m, 1, dk);
    ag__kmulti_set(&m, 2, dv);
    ag__kmulti_set(&m, 3, out);
    ag_kernel_call c;
    ag__kcall_init(&c, AG_K_SDPA_BWD, 0, "ag_scaled_dot_product_attention backward", 6,
                   (ag_tensor *[]){gc, qc, kc, vc, NULL, lse});
    ag__sdpa_call_args(&c, mask, (const int64_t[]){B, H, T, S}, n->p.s[0], n->p.i[0] != 0, n->p.s[1],
                       (uint64_t)n->p.i[1], (uint64_t)n->p.i[2]);
    c.multi = &m;
    st = ag__launch(ag__ds(qc), &c);
  }
  ag_tensor *gs[3] = {dq, dk, dv};
  for (int i = 0; i < 3; i++) {
    if (st == AG_OK && (n->e[i].fn || n->e[i].leaf)) gin[i] = gs[i]; /* the reference moves to gin */
    else ag_tensor_release(gs[i]);
  }
  ag_tensor_release(gc);
  return st;
}
