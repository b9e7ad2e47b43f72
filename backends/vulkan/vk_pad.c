/* AG_K_PAD and AG_K_PAD_BWD on Vulkan (kernels/vulkan/pad.comp): an
 * invocation per output element; f32, f16, bf16, and f64 (pad_d, pad_bwd_d)
 * on devices with shaderFloat64. */
#include "vk_kops.h"

#include <string.h>

/* The argument block shared by both: out the written tensor, in the read
 * one, each [B, H, W] or [B, Ho, Wo]. */
static vkb_args pad_args(const ag_koperand *out, const ag_koperand *in, const ag_koperand *small,
                         const ag_koperand *big, int64_t top, int64_t left, bool reflect) {
  vkb_args k = {0};
  k.p[0] = vkb_kaddr(out);
  k.p[1] = vkb_kaddr(in);
  k.k[0] = in->dtype;
  k.k[1] = in->dtype == AG_F32 ? 4 : 2;
  k.k[2] = reflect;
  k.n[0] = small->shape[0];
  k.n[1] = small->shape[1];
  k.n[2] = small->shape[2];
  k.n[3] = big->shape[1];
  k.n[4] = big->shape[2];
  k.n[5] = top;
  k.n[6] = left;
  return k;
}

ag_status vk_k_pad(ag_bstream *s, const ag_k_pad *a) {
  int64_t n = a->out->shape[0] * a->out->shape[1] * a->out->shape[2];
  if (n == 0) return AG_OK;
  vkb_args k = pad_args(a->out, a->x, a->x, a->out, a->top, a->left, a->variant == AG_KV_PAD_REFLECT);
  k.f[0] = (float)a->value;
  memcpy(&k.n[7], &a->value, sizeof k.n[7]); /* pad_d reads the double's bits */
  return vkb_dispatch1(s, a->x->dtype == AG_F64 ? VKS_PAD_D : VKS_PAD, 0, &k, n);
}

ag_status vk_k_pad_bwd(ag_bstream *s, const ag_k_pad_bwd *a) {
  int64_t n = a->dx->shape[0] * a->dx->shape[1] * a->dx->shape[2];
  if (n == 0) return AG_OK;
  vkb_args k = pad_args(a->dx, a->dy, a->dx, a->dy, a->top, a->left, a->variant == AG_KV_PAD_REFLECT);
  return vkb_dispatch1(s, a->dx->dtype == AG_F64 ? VKS_PAD_BWD_D : VKS_PAD_BWD, 0, &k, n);
}
