/* The host-staging pipeline: a caching allocator of pinned (page-locked) host
 * memory, asynchronous host->device copies from it, and ag_loader, which runs
 * a user callback on worker threads to fill batches in pinned buffers and
 * delivers them as device tensors without blocking the host on the device.
 * See docs/pipeline.md. */
#ifndef ANYGRAD_LOADER_H
#define ANYGRAD_LOADER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "anygrad/device.h"
#include "anygrad/diag.h"
#include "anygrad/status.h"
#include "anygrad/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- pinned host memory ----
 * One caching pool per device over the backend's pinned_alloc/free. Requests
 * round up to a power of two (at least 4 KiB) so that a training loop reuses
 * the same blocks; a freed block returns to the cache but is handed out again
 * only after every event recorded on it (ag_pinned_record_stream: the copies
 * that read it) has completed, checked with a non-blocking query. On the CPU
 * backend pinned memory is page-aligned and mlock-ed when the limit allows. */

typedef struct ag_pinned_stats {
  int64_t allocated_bytes;      /* rounded bytes handed out, not yet freed */
  int64_t peak_allocated_bytes;
  int64_t cached_bytes;         /* free blocks ready for reuse */
  int64_t pending_bytes;        /* freed blocks whose copies are still running */
  int64_t requested_bytes;      /* sizes as asked, of blocks handed out */
  int64_t num_allocs;           /* ag_pinned_alloc calls that succeeded */
  int64_t num_cache_hits;       /* ... served from the cache */
  int64_t num_raw_allocs;       /* backend pinned_alloc calls */
  int64_t num_raw_frees;        /* backend pinned_free calls */
  double raw_alloc_ms;          /* total time spent in backend pinned_alloc */
  int64_t num_staged_copies;    /* pageable sources staged by ag_copy_from_host_async */
  int64_t cache_cap_bytes;      /* cap on cached_bytes; -1: none */
} ag_pinned_stats;

/* `bytes` of pinned host memory usable for asynchronous copies to device d.
 * Owned by the caller: ag_pinned_free. Errors: AG_ERR_INVALID (NULL out,
 * bytes 0), device errors, AG_ERR_OOM after the cache was released and the
 * allocation retried once. Thread-safe. */
AG_API ag_status ag_pinned_alloc(ag_device d, size_t bytes, void **out_ptr);

/* Return a block from ag_pinned_alloc (NULL ignored). It is reused only after
 * the events of the streams recorded on it complete. Errors: AG_ERR_INVALID
 * for a pointer the pool did not hand out. Thread-safe. */
AG_API ag_status ag_pinned_free(void *ptr);

/* Record that work queued on s up to now reads (or writes) the block holding
 * ptr, so the block is not reused before that work finishes. Errors:
 * AG_ERR_INVALID for an unknown pointer, AG_ERR_DEVICE for a stream of
 * another device. */
AG_API ag_status ag_pinned_record_stream(void *ptr, ag_stream *s);

/* The pinned host pool's statistics of device d. Errors: AG_ERR_INVALID
 * for NULL out_stats, AG_ERR_DEVICE/AG_ERR_UNAVAILABLE for a bad device. */
AG_API ag_status ag_pinned_stats_get(ag_device d, ag_pinned_stats *out_stats);

/* Give every cached (free, copy-complete) block back to the backend. Blocks
 * whose copies are still running stay; never synchronizes. Errors:
 * AG_ERR_DEVICE/AG_ERR_UNAVAILABLE for a bad device. */
AG_API ag_status ag_pinned_empty_cache(ag_device d);

/* Cap on cached bytes (free blocks kept for reuse); beyond it, freed blocks
 * go back to the backend once their copies complete. SIZE_MAX: no cap (the
 * default, or AG_PINNED_CACHE_MB from the environment). Errors:
 * AG_ERR_DEVICE/AG_ERR_UNAVAILABLE for a bad device. */
AG_API ag_status ag_pinned_set_cache_cap(ag_device d, size_t bytes);

/* Enqueue a host->device copy of `bytes` from host `src` into dst (which must
 * be contiguous and hold exactly `bytes`) on stream s, without blocking the
 * host. When src lies in a pinned block the device reads it directly and the
 * block is recorded on s (free it whenever convenient). A pageable src is
 * staged: copied into a pinned block on the calling thread, which is freed
 * once the copy completes; src may be reused when this returns. Errors:
 * AG_ERR_INVALID (NULL, size mismatch, non-contiguous dst), AG_ERR_DEVICE,
 * AG_ERR_OOM. */
AG_API ag_status ag_copy_from_host_async(ag_tensor *dst, const void *src, size_t bytes,
                                         ag_stream *s);

/* ---- loader ---- */

#define AG_LOADER_MAX_FIELDS 8
#define AG_LOADER_MAX_BUCKETS 16

/* One tensor of a batch. Its first dim is the batch (rows), the rest the
 * sample shape. A field with a variable dim (var_dim >= 1) is padded, per
 * batch, to the smallest bucket length that fits the batch's longest sample,
 * so device allocations repeat exactly from step to step. */
typedef struct ag_loader_field {
  ag_dtype dtype;
  int ndim;                               /* including the batch dim */
  int64_t shape[AG_MAX_DIMS];             /* shape[0] ignored (batch size);
                                             shape[var_dim] ignored (bucket) */
  int var_dim;                            /* 0: none, else the padded dim */
  int n_buckets;                          /* ascending lengths for var_dim */
  int64_t buckets[AG_LOADER_MAX_BUCKETS];
  double pad_value;                       /* written where samples are shorter */
} ag_loader_field;

typedef struct ag_loader_batch ag_loader_batch; /* the batch being filled */

/* Fill a batch on a worker thread: rows = number of samples (batch_size, or
 * fewer for a short last batch), samples = their dataset indices (after
 * shuffling), batch = the buffers (ag_loader_batch_* below). Return AG_OK, or
 * an error status after ag_error_set(...): ag_loader_next returns that status
 * and message when it reaches this batch. May run concurrently with itself on
 * other batches; must not call ag_loader_* of its own loader except the
 * batch accessors. */
typedef ag_status (*ag_loader_fill_fn)(void *user, int64_t epoch, int64_t batch_index,
                                       const int64_t *samples, int64_t rows,
                                       ag_loader_batch *batch);

/* Buffer of field k, row-major for ag_loader_batch_shape(batch, k), in
 * pinned memory. Borrowed for the duration of the fill call. For a field
 * with a variable dim, call ag_loader_batch_set_length first: it fixes the
 * layout and pre-fills padding. NULL for a bad field. */
AG_API void *ag_loader_batch_data(ag_loader_batch *b, int field);
AG_API const int64_t *ag_loader_batch_shape(ag_loader_batch *b, int field);
/* Choose the bucket for the batch's longest sample length (in var_dim) and
 * fill the field with pad_value. *out_bucket (optional) receives the padded
 * length. Errors: AG_ERR_INVALID (field without a variable dim, bad index),
 * AG_ERR_SHAPE when length exceeds the largest bucket. */
AG_API ag_status ag_loader_batch_set_length(ag_loader_batch *b, int field, int64_t length,
                                            int64_t *out_bucket);

typedef struct ag_loader_config {
  ag_device device;
  int64_t num_samples;       /* dataset size (> 0) */
  int64_t batch_size;        /* > 0 */
  bool shuffle;              /* permutation by (seed, epoch) */
  uint64_t seed;
  bool drop_last;            /* drop a short last batch */
  int64_t epochs;            /* epochs to deliver; 0: 1 */
  int num_workers;           /* threads running fill; 0: 2, or 1 when ag_get_num_threads() is 1 */
  bool fill_on_caller;       /* no workers: ag_loader_next runs fill on the
                                calling thread (PyTorch's num_workers=0), and
                                the profiler counts that time as data wait;
                                num_workers and prefetch are ignored */
  int prefetch;              /* batches filled ahead of next(); 0: 2*num_workers */
  int copy_ahead;            /* filled batches whose copies next() issues ahead
                                of the one it returns; 0: 1, < 0: none */
  int n_fields;              /* 1..AG_LOADER_MAX_FIELDS */
  ag_loader_field fields[AG_LOADER_MAX_FIELDS];
  ag_loader_fill_fn fill;
  void *user;                /* passed to fill; borrowed */
  ag_profiler *profiler;     /* optional: receives data waits and copy times;
                                borrowed, must outlive the loader */
} ag_loader_config;

typedef struct ag_loader ag_loader;

typedef struct ag_loader_batch_info {
  bool end;                  /* all epochs delivered: no tensors */
  int64_t epoch, index;      /* batch index within the epoch */
  int64_t rows;
  int64_t bucket[AG_LOADER_MAX_FIELDS]; /* padded length of variable fields, else 0 */
} ag_loader_batch_info;

/* Start a loader: workers begin filling at once. Owned by the caller:
 * ag_loader_destroy. Errors: AG_ERR_INVALID naming the bad config field,
 * device errors, AG_ERR_OOM. */
AG_API ag_loader *ag_loader_create(const ag_loader_config *cfg);

/* The next batch, in order (epoch by epoch, batch by batch) whatever the
 * workers' timing. Writes cfg.n_fields new references into out_fields (owned
 * as tensor.h says: by the innermost open scope, else by the caller) on the
 * loader's device; their copies run on the loader's copy stream and the
 * calling thread's current stream waits for them through an event, so this
 * blocks only while the batch is not yet filled on the host. At the end,
 * returns AG_OK with out_info->end set and out_fields NULL. Errors: the fill
 * callback's status and message ("ag_loader: batch 7 of epoch 0: <message>"),
 * after which the loader is finished (every later call returns AG_ERR_STATE);
 * device errors; AG_ERR_INVALID. Call from one thread at a time. */
AG_API ag_status ag_loader_next(ag_loader *l, ag_tensor **out_fields,
                                ag_loader_batch_info *out_info);

/* Batches per epoch after drop_last. */
AG_API int64_t ag_loader_batches_per_epoch(const ag_loader *l);

/* Stop the workers (a fill in progress finishes first), release every
 * buffer and undelivered batch, and free the loader. Safe mid-epoch. NULL
 * ignored. Tensors already returned stay valid. */
AG_API void ag_loader_destroy(ag_loader *l);

#ifdef __cplusplus
}
#endif
#endif
