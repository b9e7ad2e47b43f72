/* The caching device allocator: configuration, statistics, memory categories.
 * One backend-neutral allocator per device serves every tensor. */
#ifndef ANYGRAD_ALLOC_H
#define ANYGRAD_ALLOC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "anygrad/device.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What a block of device memory holds. The runtime sets it where it knows
 * (optimizer state, gradients, tensors saved for backward); user code sets
 * it for a region with ag_mem_category_push/pop. */
typedef enum ag_mem_category {
  AG_MEM_OTHER = 0,
  AG_MEM_PARAMETERS,
  AG_MEM_GRADIENTS,
  AG_MEM_OPTIMIZER,
  AG_MEM_ACTIVATIONS,
  AG_MEM_WORKSPACE,
  AG_MEM_STAGING,
  AG_MEM_CATEGORY_COUNT
} ag_mem_category;

AG_API const char *ag_mem_category_name(ag_mem_category c);

/* Category for allocations made by this thread until the matching pop.
 * Nestable (depth 16); pop without push is ignored. */
AG_API void ag_mem_category_push(ag_mem_category c);
AG_API void ag_mem_category_pop(void);
AG_API ag_mem_category ag_mem_category_current(void);

#ifdef __cplusplus
}
#endif
#endif
