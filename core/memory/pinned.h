/* What the pinned host pool (pinned.c) offers the rest of the core beyond
 * anygrad/loader.h. Never installed. */
#ifndef AG_CORE_PINNED_H
#define AG_CORE_PINNED_H

#include <stdbool.h>
#include <stddef.h>

#include "anygrad/device.h"

#include "hidden.h"

/* True if ptr lies inside a live pinned block of any device (the whole range
 * [ptr, ptr+bytes) must fit). */
AG_HIDDEN bool ag__pinned_contains(const void *ptr, size_t bytes);
/* Count one pageable source staged through d's pool (num_staged_copies). */
AG_HIDDEN void ag__pinned_staged_copy(ag_device d);

#endif
