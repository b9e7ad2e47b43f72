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

/* "parameters", "activations", ...; "?" for a value out of range (never
 * NULL, no error set). Static: lives until exit; do not free. */
AG_API const char *ag_mem_category_name(ag_mem_category c);

/* Category for allocations made by this thread until the matching pop.
 * Nestable (depth 16); pop without push is ignored. */
AG_API void ag_mem_category_push(ag_mem_category c);
AG_API void ag_mem_category_pop(void);
AG_API ag_mem_category ag_mem_category_current(void);

/* ---- statistics (names and meaning as PyTorch's memory_stats) ---- */

/* Index of the per-pool arrays below: all pools, the small pool (requests of
 * at most 1 MiB, carved from 2 MiB segments) and the large pool. */
typedef enum ag_mem_pool {
  AG_POOL_ALL = 0,
  AG_POOL_SMALL = 1,
  AG_POOL_LARGE = 2,
  AG_POOL_COUNT = 3
} ag_mem_pool;

/* One statistic: value now, highest value since the last reset_peak, and the
 * accumulated increases (allocated) and decreases (freed). */
typedef struct ag_mem_stat {
  int64_t current, peak, allocated, freed;
} ag_mem_stat;

typedef struct ag_memory_stats {
  /* counts */
  ag_mem_stat allocation[AG_POOL_COUNT];     /* blocks handed out, not yet freed */
  ag_mem_stat segment[AG_POOL_COUNT];        /* raw segments held from the backend */
  ag_mem_stat active[AG_POOL_COUNT];         /* allocated or freed-awaiting-events */
  ag_mem_stat inactive_split[AG_POOL_COUNT]; /* free blocks inside split segments */
  /* bytes */
  ag_mem_stat allocated_bytes[AG_POOL_COUNT]; /* rounded sizes of allocations */
  ag_mem_stat reserved_bytes[AG_POOL_COUNT];  /* held from the backend (mapped) */
  ag_mem_stat active_bytes[AG_POOL_COUNT];
  ag_mem_stat inactive_split_bytes[AG_POOL_COUNT];
  ag_mem_stat requested_bytes[AG_POOL_COUNT]; /* sizes as asked, before rounding */
  ag_mem_stat oversize_allocations;           /* allocations >= max_split_size */
  ag_mem_stat oversize_segments;
  /* allocated bytes by what they hold (beyond PyTorch) */
  ag_mem_stat category_bytes[AG_MEM_CATEGORY_COUNT];
  int64_t num_alloc_retries;     /* cache flushed and allocation retried */
  int64_t num_ooms;              /* AG_ERR_OOM returned */
  int64_t num_syncs_all_streams; /* device syncs done by the allocator */
  int64_t num_device_alloc;      /* raw segment allocations and vm maps */
  int64_t num_device_free;       /* raw segment frees and vm unmaps */
  int64_t num_pending_events;    /* events not yet seen complete */
  int64_t max_split_size;        /* bytes; -1 when unlimited */
  int64_t cap_bytes;             /* per-device cap; 0 when none */
  int64_t largest_free_block;    /* bytes, over all streams */
  bool caching;                  /* false under caching:0 */
  bool expandable_segments;      /* requested and supported by the backend */
} ag_memory_stats;

/* Statistics of device d's allocator (a consistent copy). Errors:
 * AG_ERR_INVALID (NULL out), AG_ERR_DEVICE, AG_ERR_UNAVAILABLE. */
AG_API ag_status ag_memory_stats_get(ag_device d, ag_memory_stats *out_stats);

/* Set every peak to its current value. Errors: AG_ERR_DEVICE,
 * AG_ERR_UNAVAILABLE for a device that does not exist or did not start. */
AG_API ag_status ag_memory_reset_peak(ag_device d);

/* Return every cached segment (and the unused tail of every expandable
 * segment) to the backend. Synchronizes the device once (counted) when there
 * is something to return, because queued work may still read freed blocks.
 * Errors: device errors, AG_ERR_SYNC when sync-debug mode refuses the sync
 * (nothing is released then). */
AG_API ag_status ag_memory_empty_cache(ag_device d);

/* Per-device cap on reserved memory, in bytes (0 removes it) or as a fraction
 * of the device's total memory (0 < fraction <= 1; 0 removes it). Reaching
 * the cap behaves exactly like a full device, so out-of-memory handling can be
 * tested on any machine. Memory already reserved above a new cap stays until
 * freed. Errors: AG_ERR_INVALID for a fraction outside [0, 1]. */
AG_API ag_status ag_memory_set_cap(ag_device d, size_t bytes);
AG_API ag_status ag_memory_set_fraction(ag_device d, double fraction);

/* Configure device d's allocator with a string in AG_ALLOC_CONF syntax
 * ("key:value,key:value"; see docs/allocator.md). Every allocator starts
 * from AG_ALLOC_CONF; this changes one device. Keys: max_split_size_mb (> 20),
 * roundup_power2_divisions (power of two, 1..64), expandable_segments
 * (0/1/true/false), caching (0/1), memory_fraction, memory_cap_mb,
 * trace_max_entries. The string is applied all or nothing. Errors:
 * AG_ERR_INVALID naming the bad key or value (an unknown key is an error). */
AG_API ag_status ag_alloc_configure(ag_device d, const char *conf);

/* Human-readable table of the statistics (like PyTorch's memory_summary),
 * written into buf (always NUL-terminated, truncated to len). Errors:
 * AG_ERR_INVALID (NULL buf or len 0), device errors. */
AG_API ag_status ag_memory_summary(ag_device d, char *buf, size_t len);

/* Write a JSON snapshot of device d's allocator to path: configuration,
 * statistics, every segment with its blocks (offset, size, requested size,
 * stream, category, state) and the trace ring of recent events (allocs,
 * frees, segment allocs/frees/maps/unmaps, OOMs). Errors: AG_ERR_IO. */
AG_API ag_status ag_memory_snapshot_json(ag_device d, const char *path);

/* Fault injection for tests: the nth raw device allocation from now
 * (segment allocation or expandable-segment map; nth >= 1) fails as if the
 * device were full, and so do the following count-1 ones (count < 0: every
 * one after it). nth == 0 turns injection off. Errors: AG_ERR_INVALID for
 * nth < 0, device errors. */
AG_API ag_status ag_alloc_inject_failure(ag_device d, int nth, int count);

#ifdef __cplusplus
}
#endif
#endif
