/* AG_K_SORT on Vulkan (kernels/vulkan/sort.comp): an invocation per element
 * of x [o, r, in]; f32, f16, bf16, and f64 (sort_d) on devices with
 * shaderFloat64. */
#include "vk_kops.h"

ag_status vk_k_sort(ag_bstream *s, const ag_k_sort *a) {
  int64_t O = a->o, R = a->r, I = a->in;
  if (O * R * I == 0) return AG_OK;
  ag_status st = vkb_kloop_ok(s, a->call->name, R);
  if (st != AG_OK) return st;
  vkb_args k = {0};
  k.p[0] = vkb_kaddr(a->values);
  k.p[1] = vkb_kaddr(a->x);
  k.p[2] = vkb_kaddr(a->indices);
  k.k[0] = a->x->dtype;
  k.k[1] = a->x->dtype == AG_F32 ? 4 : 2;
  k.k[2] = a->variant == AG_KV_SORT_DESCENDING;
  k.n[0] = O;
  k.n[1] = R;
  k.n[2] = I;
  return vkb_dispatch1(s, a->x->dtype == AG_F64 ? VKS_SORT_D : VKS_SORT, 0, &k, O * R * I);
}
