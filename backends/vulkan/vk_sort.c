/* AG_K_SORT on Vulkan (kernels/vulkan/sort.comp): a bottom-up merge sort of
 * each line of x [o, r, in] in ceil(log2 r) passes (one when r == 1), each
 * one dispatch of an invocation per element (a binary search of O(log r)
 * steps); the passes ping-pong between the outputs and the stream's scratch
 * buffer (keys, then int64 positions), arranged so that the last one writes
 * the outputs. f32, f16, bf16, and f64 (sort_d) on devices with
 * shaderFloat64. */
#include "vk_kops.h"

ag_status vk_k_sort(ag_bstream *s, const ag_k_sort *a) {
  int64_t O = a->o, R = a->r, I = a->in, n = O * R * I;
  if (n == 0) return AG_OK;
  const int esz = a->x->dtype == AG_F64 ? 8 : a->x->dtype == AG_F32 ? 4 : 2;
  int passes = 1;
  while (((int64_t)1 << passes) < R) passes++;
  uint64_t out_k = vkb_kaddr(a->values), out_i = vkb_kaddr(a->indices), tmp_k = 0, tmp_i = 0;
  if (passes > 1) {
    size_t kbytes = ((size_t)n * (size_t)esz + 15) & ~(size_t)15;
    ag_status st = vkb_scratch(s, kbytes + (size_t)n * 8, &tmp_k);
    if (st != AG_OK) return st;
    tmp_i = tmp_k + kbytes;
  }
  vkb_args k = {0};
  k.k[0] = a->x->dtype;
  k.k[1] = esz;
  k.k[2] = a->variant == AG_KV_SORT_DESCENDING;
  k.n[0] = O;
  k.n[1] = R;
  k.n[2] = I;
  uint64_t src_k = vkb_kaddr(a->x), src_i = 0;
  for (int p = 0; p < passes; p++) {
    /* the last pass writes the outputs, the one before the scratch, ... */
    bool to_out = (passes - 1 - p) % 2 == 0;
    uint64_t dst_k = to_out ? out_k : tmp_k, dst_i = to_out ? out_i : tmp_i;
    k.p[0] = dst_k;
    k.p[1] = src_k;
    k.p[2] = dst_i;
    k.p[3] = src_i;
    k.n[3] = (int64_t)1 << p;
    ag_status st = vkb_dispatch1(s, a->x->dtype == AG_F64 ? VKS_SORT_D : VKS_SORT, 0, &k, n);
    if (st != AG_OK) return st;
    src_k = dst_k;
    src_i = dst_i;
  }
  return AG_OK;
}
