/* The caching allocator as the rest of the core uses it: blocks of device
 * memory in stream order (core/memory/alloc.c). The allocator's object-level
 * interface, for its statistics and white-box tests, is alloc_internal.h.
 * Never installed. */
#ifndef AG_CORE_BLOCK_H
#define AG_CORE_BLOCK_H

#include <stddef.h>

#include "anygrad/alloc.h"
#include "anygrad/status.h"

#include "hidden.h"
#include "runtime/devstate.h"

typedef struct ag_block ag_block; /* opaque; owned by the allocator */

/* Allocate `bytes` of device memory usable on stream s, tagged with the
 * thread's current category (or `cat` when cat != AG_MEM_OTHER). */
AG_HIDDEN ag_status ag__alloc(ag_devstate *ds, size_t bytes, ag_stream *s, ag_mem_category cat,
                              ag_block **out_block);
/* Return a block; reusable in stream order on its allocation stream. */
AG_HIDDEN void ag__free(ag_block *b);
/* Mark that b is used by work on stream s (record-stream). */
AG_HIDDEN void ag__block_record_stream(ag_block *b, ag_stream *s);
AG_HIDDEN void *ag__block_base(const ag_block *b);
AG_HIDDEN size_t ag__block_offset(const ag_block *b);
AG_HIDDEN void ag__block_set_category(ag_block *b, ag_mem_category cat);
AG_HIDDEN struct ag_allocator *ag__allocator_create(ag_devstate *ds);
/* AG_OK unless AG_ALLOC_CONF is set and does not parse (AG_ERR_INVALID
 * naming the variable and the bad key or value); opens nothing. */
AG_HIDDEN ag_status ag__alloc_env_check(void);

#endif
