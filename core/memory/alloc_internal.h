/* The caching allocator's object-level interface: what the public wrappers in
 * alloc_conf.c call after looking up a device, and what white-box tests call on an
 * allocator built over a fake backend. Never installed. */
#ifndef AG_CORE_ALLOC_INTERNAL_H
#define AG_CORE_ALLOC_INTERNAL_H

#include <stdio.h>

#include "runtime/devstate.h"
#include "memory/block.h"

typedef struct ag_allocator ag_allocator;

/* Release everything the allocator holds back to the backend and free it.
 * Blocks still allocated become invalid. Only for tests and teardown. */
AG_HIDDEN void ag__allocator_destroy(ag_allocator *a);

AG_HIDDEN void ag__alloc_stats(ag_allocator *a, ag_memory_stats *out);
AG_HIDDEN void ag__alloc_reset_peak(ag_allocator *a);
AG_HIDDEN ag_status ag__alloc_empty_cache(ag_allocator *a);
AG_HIDDEN ag_status ag__alloc_set_cap(ag_allocator *a, size_t bytes);
AG_HIDDEN ag_status ag__alloc_set_fraction(ag_allocator *a, double fraction);
AG_HIDDEN ag_status ag__alloc_configure(ag_allocator *a, const char *conf);
AG_HIDDEN void ag__alloc_summary(ag_allocator *a, char *buf, size_t len);
AG_HIDDEN ag_status ag__alloc_snapshot(ag_allocator *a, FILE *f);
AG_HIDDEN ag_status ag__alloc_inject(ag_allocator *a, int nth, int count);

/* Segments at the peak. While at least one user has switched capture on,
 * the allocation that raises allocated bytes to a new high takes a JSON
 * snapshot (as ag__alloc_snapshot, with an empty trace) when the high has
 * moved by >= 1/16 since the last snapshot or the allocation reserved
 * memory; ag__alloc_peak_arm asks for one more when allocated bytes next
 * reach the current peak, if the last snapshot was below it (a repeating
 * step then shows its exact peak). ag_memory_reset_peak starts over.
 * on=false drops one user; the last one frees the snapshot. */
AG_HIDDEN void ag__alloc_peak_capture(ag_allocator *a, bool on);
AG_HIDDEN void ag__alloc_peak_arm(ag_allocator *a);
/* A copy (owned by the caller) of the snapshot when it is newer than *seen
 * (updated, with the allocated bytes it was taken at in *out_bytes), else
 * NULL (also when out of host memory). */
AG_HIDDEN char *ag__alloc_peak_snapshot(ag_allocator *a, uint64_t *seen, int64_t *out_bytes);

/* To be called by ag_stream_destroy after the stream's work has finished and
 * before it is freed: forgets s in record-stream lists (its work is done, so
 * no event is needed) and returns the fully free segments cached for s, which
 * could never be reused since stream ids are not recycled. Never blocks. */
AG_HIDDEN void ag__alloc_stream_destroyed(ag_devstate *ds, ag_stream *s);

/* Block accessors for tests and diagnostics. */
AG_HIDDEN size_t ag__block_size(const ag_block *b);
AG_HIDDEN size_t ag__block_requested(const ag_block *b);
AG_HIDDEN ag_mem_category ag__block_category(const ag_block *b);

#endif
