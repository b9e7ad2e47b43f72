/* The kernel ops that live in their own files (vk_sort.c, ...): each fills
 * its shader's argument block (vkb_args, Args in common.glsl) from its
 * decoded arguments. */
#ifndef AG_VK_KOPS_H
#define AG_VK_KOPS_H

#include "vk_internal.h"

/* The device address of an operand, 0 when absent. */
static inline uint64_t vkb_kaddr(const ag_koperand *o) {
  return o && o->base ? ((const vkb_mem *)o->base)->addr + o->offset : 0;
}
/* Refuses a kernel whose invocations loop `trips` times in sequence where
 * the driver cuts loops short (lavapipe), rather than return a wrong
 * result. */
static inline ag_status vkb_kloop_ok(ag_bstream *s, const char *name, int64_t trips) {
  if (trips <= s->d->loop_limit) return AG_OK;
  return ag_error_set(AG_ERR_UNSUPPORTED,
                      "%s: a line of %lld sequential steps exceeds the loop limit of the Vulkan driver %s on "
                      "vulkan:%d (%lld iterations per invocation)",
                      name ? name : "vulkan", (long long)trips, s->d->driver, s->dev, (long long)s->d->loop_limit);
}

VKB_HIDDEN ag_status vk_k_sort(ag_bstream *s, const ag_k_sort *a);
VKB_HIDDEN ag_status vk_k_scatter_add(ag_bstream *s, const ag_k_scatter_add *a);
VKB_HIDDEN ag_status vk_k_pad(ag_bstream *s, const ag_k_pad *a);
VKB_HIDDEN ag_status vk_k_pad_bwd(ag_bstream *s, const ag_k_pad_bwd *a);

#endif
