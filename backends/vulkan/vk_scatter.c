/* AG_K_SCATTER_ADD on Vulkan (kernels/vulkan/scatter.comp): an invocation
 * per element of out [o, xlen, in]; f32, f16, bf16, and f64 (scatter_add_d,
 * summed in double) on devices with shaderFloat64; i32 or i64 index. */
#include "vk_kops.h"

ag_status vk_k_scatter_add(ag_bstream *s, const ag_k_scatter_add *a) {
  int64_t O = a->o, K = a->k, I = a->in, X = a->xlen;
  if (O * X * I == 0 || K == 0) return AG_OK;
  ag_status st = vkb_kloop_ok(s, a->call->name, K);
  if (st != AG_OK) return st;
  vkb_args k = {0};
  k.p[0] = vkb_kaddr(a->out);
  k.p[1] = vkb_kaddr(a->src);
  k.p[2] = vkb_kaddr(a->index);
  k.p[7] = s->err.addr;
  s->err_armed = true;
  k.k[0] = a->out->dtype;
  k.k[1] = a->index->dtype;
  k.n[0] = O;
  k.n[1] = K;
  k.n[2] = I;
  k.n[3] = X;
  k.n[4] = a->index->strides[0];
  k.n[5] = a->index->strides[1];
  k.n[6] = a->index->strides[2];
  return vkb_dispatch1(s, a->out->dtype == AG_F64 ? VKS_SCATTER_ADD_D : VKS_SCATTER_ADD, 0, &k, O * X * I);
}
