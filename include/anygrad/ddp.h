/* Data parallelism over a process group (dist.h): one replica of the model
 * per rank, parameters broadcast from rank 0 at creation, gradients reduced
 * in buckets launched from autograd's gradient-ready hooks (autograd.h) as
 * soon as each bucket's gradients are complete, so communication overlaps
 * the rest of backward; heterogeneous balance of the global batch across
 * replicas of unequal speed. See docs/distributed.md.
 *
 * A training step on every rank (each rank its own thread or process):
 *   ag_ddp_step_begin(d);                  shares of the global batch are fixed here
 *   ag_ddp_rows(d, &rows, &offset);        this rank's rows of the global batch
 *   loss = mean loss over those rows; ag_backward(loss, ...);
 *   ag_ddp_finish(d);                      wait for the reductions, copy back
 *   clip / grad scaler / optimizer step as on one device.
 * After ag_ddp_finish every rank holds the same gradient: the sum over ranks
 * of weight_r * grad_r, with weight_r = rows_r / global rows (1/size without
 * balance), i.e. the gradient of the mean loss over the global batch - the
 * update equals full-batch training up to f32 rounding order.
 *
 * Gradient accumulation: backward passes between ag_ddp_no_sync_begin and
 * ag_ddp_no_sync_end only accumulate locally (no communication); the first
 * backward after it reduces the accumulated gradients.
 *
 * Mixed precision and clipping: reduce the scaled gradients (backward of
 * ag_grad_scaler_scale's output), then after ag_ddp_finish unscale, clip and
 * step. The reduced gradients are bitwise the same on every rank (the
 * group's reductions are in a fixed order, the same result to all ranks), so
 * the scaler's inf/nan check takes the same skip decision on every rank
 * (an inf on one rank is an inf or nan in the sum everywhere) and the
 * clipping norm is the same everywhere.
 *
 * Threading: an ag_ddp belongs to its rank, like its ag_group handle: called
 * from the rank's thread (the one running its backward) only. */
#ifndef ANYGRAD_DDP_H
#define ANYGRAD_DDP_H

#include <stdbool.h>
#include <stdint.h>

#include "anygrad/dist.h"
#include "anygrad/nn.h"
#include "anygrad/optim.h"
#include "anygrad/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* PyTorch's DistributedDataParallel bucket_cap_mb default: 25 MiB. */
#define AG_DDP_DEFAULT_BUCKET_BYTES ((int64_t)25 << 20)

typedef struct ag_ddp ag_ddp;

typedef struct ag_ddp_options {
  /* Bucket capacity in bytes (0: AG_DDP_DEFAULT_BUCKET_BYTES). Buckets take
   * the parameters in reverse list order (the order backward finishes them)
   * and close when the next parameter would exceed the capacity or has
   * another dtype; a parameter larger than the capacity is a bucket alone. */
  int64_t bucket_bytes;
  /* Skip the broadcast from rank 0 at creation (the caller guarantees equal
   * parameters, or broadcasts later with ag_ddp_broadcast). */
  bool no_broadcast;
  /* Sharded optimizer state (DeepSpeed ZeRO; see "Sharded optimizer state"
   * below): 0 off (every rank steps every parameter), 1 optimizer state
   * sharded (gradients all-reduced), 2 optimizer state and gradients
   * sharded (gradients reduce-scattered per bucket). */
  int zero_stage;
} ag_ddp_options;

/* Defaults: 25 MiB buckets, broadcast at creation. */
AG_API void ag_ddp_options_default(ag_ddp_options *out_opts);

/* A data-parallel wrapper for this rank: params (every entry a leaf that
 * requires grad, contiguous, on the group's device) are broadcast from rank 0
 * (a collective: every rank of g calls ag_ddp_create with lists of the same
 * shapes and dtypes), buckets are laid out and a gradient-ready hook is
 * registered on every parameter. d borrows g and the parameters (retained
 * until ag_ddp_destroy); the list itself is not kept. opts may be NULL.
 * Owned by the caller: ag_ddp_destroy. Errors: AG_ERR_INVALID (NULL group,
 * params or out, an empty list, negative bucket_bytes, a parameter that is
 * not a leaf requiring grad, or not contiguous), AG_ERR_DEVICE (a parameter
 * off the group's device), the group's errors (AG_ERR_TIMEOUT, ...),
 * AG_ERR_OOM. Nothing is kept on failure. */
AG_API ag_status ag_ddp_create(ag_group *g, const ag_param_list *params, const ag_ddp_options *opts,
                               ag_ddp **out_ddp);

/* Remove the hooks, wait for reductions still in flight (bounded by the
 * group's timeout), release the buffers. NULL ignored. */
AG_API void ag_ddp_destroy(ag_ddp *d);

/* Broadcast every tensor of l (on the group's device, contiguous) from rank
 * root, in list order, blocking: parameters after a load on one rank,
 * optimizer state (ag_optimizer_state), buffers. A collective over the
 * group. Errors: AG_ERR_INVALID (NULL, root out of range, non-contiguous
 * tensor), AG_ERR_DEVICE, the group's errors. */
AG_API ag_status ag_ddp_broadcast(ag_ddp *d, const ag_param_list *l, int root);

/* This rank's gradient weight for the reductions that follow (default
 * 1/size; balance sets rows/global rows at each ag_ddp_step_begin). The
 * weights of all ranks should sum to 1. Errors: AG_ERR_INVALID for a
 * non-finite or negative w; AG_ERR_STATE while a step's reduction has
 * started (some bucket launched and not finished). */
AG_API ag_status ag_ddp_set_weight(ag_ddp *d, double w);
AG_API double ag_ddp_weight(const ag_ddp *d);

/* Gradient accumulation micro-steps: backward passes inside the region do
 * not communicate. Errors: AG_ERR_STATE for a nested begin, an end without
 * begin, or a begin while a step's reduction has started. */
AG_API ag_status ag_ddp_no_sync_begin(ag_ddp *d);
AG_API ag_status ag_ddp_no_sync_end(ag_ddp *d);

/* Complete the step's reduction: launch the buckets that are not launched
 * yet (parameters that got no gradient on this rank count as zeros and
 * receive the reduced gradient), wait for all (the wait is ordered on the
 * current stream of the group's device; in-process and MPI groups wait on
 * the host for their host phase), and write the reduced gradients back into
 * every parameter's .grad (ZeRO stage 2: into the shard's, see below; the
 * parameters' .grad are released). Then the next step may begin. With balance, also
 * measures this rank's compute time (one host sync of the device) and every
 * `interval` steps exchanges the measurements (a small all-gather).
 * Errors: AG_ERR_STATE inside no_sync; the group's errors (AG_ERR_TIMEOUT,
 * AG_ERR_ABORTED: the gradients are then unspecified); launch errors. */
AG_API ag_status ag_ddp_finish(ag_ddp *d);

/* ---- heterogeneous balance ----
 * Replicas on unequal devices get unequal shares of a global batch of
 * global_rows rows. The first warmup_steps steps use equal shares and are
 * not measured (caches, allocator, compilation); after that each rank
 * measures its throughput over every `interval` steps (rows / compute
 * seconds, from ag_ddp_step_begin to the end of its backward), smooths it
 * across intervals (exponential moving average), and all ranks exchange it
 * and compute the same new shares, proportional to throughput (at least
 * min_rows each, summing to global_rows). Hysteresis: the shares change only
 * when they would shorten the predicted step (the slowest rank's rows /
 * throughput) by more than `hysteresis` of it, so noise does not reshuffle
 * them every interval; drift beyond it does. */
typedef struct ag_ddp_balance_options {
  int64_t global_rows; /* rows of the global batch (>= size * min_rows) */
  int warmup_steps;    /* 3 */
  int interval;        /* 5 */
  double smoothing;    /* 0.5: weight of the newest interval in the average */
  double hysteresis;   /* 0.03: least predicted step-time gain that moves the shares */
  int64_t min_rows;    /* 1 */
  bool fixed;          /* false; true: equal shares, never measured or changed */
} ag_ddp_balance_options;

/* Defaults above, global_rows 0 (to be set). */
AG_API void ag_ddp_balance_options_default(ag_ddp_balance_options *out_opts);

/* Turn balance on. Every rank must pass the same options (the ranks
 * compute the shares independently from the exchanged throughputs; other
 * options on one rank would give it other shares). Shares start equal.
 * Errors: AG_ERR_INVALID (NULL, bad options: global_rows < size * min_rows,
 * interval < 1, smoothing outside (0, 1], hysteresis < 0, warmup < 0, or a
 * group of more than 64 ranks), AG_ERR_OOM. */
AG_API ag_status ag_ddp_balance_enable(ag_ddp *d, const ag_ddp_balance_options *opts);

/* Start a step: fixes this step's shares (applying a rebalance decided at
 * the last ag_ddp_finish), sets the weight to rows/global rows when balance
 * is on, and starts this rank's compute timer. Errors: AG_ERR_STATE when
 * the previous step's reduction was started and not finished. */
AG_API ag_status ag_ddp_step_begin(ag_ddp *d);

/* This rank's share of the global batch for the current step: rows and the
 * offset of its first row (ranks take consecutive row ranges in rank order).
 * Errors: AG_ERR_INVALID for NULL, AG_ERR_STATE when balance was never
 * enabled (there is no global batch to share). */
AG_API ag_status ag_ddp_rows(const ag_ddp *d, int64_t *out_rows, int64_t *out_offset);

/* Every rank's current share (size entries). Errors: AG_ERR_STATE without
 * balance, AG_ERR_INVALID for NULL. */
AG_API ag_status ag_ddp_shares(const ag_ddp *d, int64_t *out_rows);

/* Artificial slowdown for tests and benchmarks: ag_ddp_finish sleeps
 * (factor - 1) x this step's measured compute time before measuring, so the
 * rank behaves like a device `factor` times slower. 1 (default) is off.
 * Errors: AG_ERR_INVALID for factor < 1 or non-finite. */
AG_API ag_status ag_ddp_set_slowdown(ag_ddp *d, double factor);

/* ---- sharded optimizer state (ZeRO stages 1 and 2) ----
 * With zero_stage 1 or 2 every bucket's flat buffer is padded to size x
 * chunk elements (chunk = ceil(numel / size) rounded up to 16 elements, 64
 * bytes of f32) and rank r owns chunk r of every bucket: a contiguous,
 * balanced 1/size of the flattened parameters. The optimizer is created
 * over this rank's shard only (ag_ddp_zero_params), so its state is 1/size
 * of the unsharded one (allocator category "optimizer"). A step:
 *   ag_ddp_step_begin / forward / ag_backward / ag_ddp_finish   as before
 *   ag_ddp_clip_grad_norm(d, max_norm)      optional, instead of ag_clip_grad_norm
 *   ag_optimizer_step(shard_optimizer)      steps this rank's shard only
 *   ag_ddp_gather_params(d)                 all-gather the updated shards
 * Stage 1: ag_ddp_finish all-reduces the buckets and writes the reduced
 * gradients to every parameter's .grad as without sharding; the shard's
 * gradients view this rank's chunks. Stage 2: each bucket is
 * reduce-scattered (half the traffic of an all-reduce) into a gradient
 * shard as soon as it is complete, and its members' .grad and its flat
 * buffer are released right after (a gradient-ready hook registered after
 * ag_ddp_create's sees no .grad): between steps a rank keeps only its
 * gradient shard; read the shard's gradients (ag_ddp_zero_params). Equality: the update is elementwise, so with the same
 * reduced gradients the parameters after ag_ddp_gather_params are bitwise
 * those of the unsharded run (the in-process group gives the same sums to
 * all-reduce and reduce-scatter). Clipping: stage 1 takes the norm over
 * the full reduced gradients (bitwise the unsharded norm); stage 2 sums
 * the shards' sums of squares over the group (f32 summation order: the
 * norm agrees to about 1e-6 relative). Mixed precision's grad scaler is
 * not supported with sharding (its inf check would see one shard). */

/* Append this rank's shard of the parameters to out: for each parameter of
 * `subset` (NULL: every parameter given to ag_ddp_create; else entries of
 * that list, by tensor) that overlaps this rank's chunks, one 1-D leaf
 * tensor viewing the overlapping elements of the parameter, under the
 * parameter's name (so ag_optimizer_state names "<name>.exp_avg" as
 * without sharding). Pass the result (or several, for parameter groups:
 * one subset per group) to the optimizer's constructor. Their .grad is
 * set by ag_ddp_finish to the reduced gradient's shard. out retains what
 * it gets; the tensors live while d does. Errors: AG_ERR_INVALID (NULL d
 * or out, an entry of subset that d does not hold), AG_ERR_STATE (d was
 * created with zero_stage 0), AG_ERR_OOM; entries added before an error
 * stay in out. */
AG_API ag_status ag_ddp_zero_params(const ag_ddp *d, const ag_param_list *subset, ag_param_list *out);

/* The stage (0, 1, 2) d was created with; -1 for NULL. */
AG_API int ag_ddp_zero_stage(const ag_ddp *d);

/* Clip the reduced gradients of the shard (after ag_ddp_finish) so that the
 * global norm over all parameters is at most max_norm, as ag_clip_grad_norm
 * over the unsharded model (stage 1: bitwise; stage 2: the shards' sums of
 * squares all-reduced, a collective). Returns the norm before clipping, a
 * new f32 scalar on the group's device (owned by the caller), or NULL:
 * AG_ERR_INVALID (NULL d, max_norm not > 0), AG_ERR_STATE (zero_stage 0),
 * the group's errors. */
AG_API ag_tensor *ag_ddp_clip_grad_norm(ag_ddp *d, double max_norm);

/* After the shard's optimizer step: all-gather every bucket's updated
 * chunks (one all-gather per bucket, all queued before the first wait) and
 * copy them into the parameters, so every rank holds the whole updated
 * model; the parameters' gradients (stage 1) are released. A collective.
 * Errors: AG_ERR_INVALID (NULL), AG_ERR_STATE (zero_stage 0, or a step's
 * reduction started and not finished), the group's errors. */
AG_API ag_status ag_ddp_gather_params(ag_ddp *d);

/* Write this rank's shard checkpoint "<prefix>.rank<r>.safetensors": the
 * shard's parameter elements (under the parameters' names), opt's state
 * (ag_optimizer_state names) and counters (ag_optimizer_counters), and
 * metadata "zero.rank", "zero.world_size", "zero.stage" and, per
 * parameter, "zero.offset.<name>": the flat offset of the shard's first
 * element in that parameter. Every rank calls it (each writes its own
 * file; no communication). opt must be built over ag_ddp_zero_params's
 * tensors. Errors: AG_ERR_INVALID (NULL argument, an optimizer tensor that
 * is not one of d's shard tensors), AG_ERR_STATE (zero_stage 0), AG_ERR_IO,
 * AG_ERR_OOM. */
AG_API ag_status ag_ddp_zero_save(ag_ddp *d, ag_optimizer *opt, const char *prefix);

/* Load a sharded checkpoint written by ag_ddp_zero_save with any number of
 * ranks (the world size is read from "<prefix>.rank0.safetensors") into
 * this rank: the whole parameters (all shards) and this rank's shard of
 * opt's state and its counters. Every rank reads the files it needs; no
 * communication. Errors: AG_ERR_INVALID (NULL argument, optimizer tensors
 * not d's shard), AG_ERR_STATE (zero_stage 0), AG_ERR_IO (a shard file
 * missing), AG_ERR_CORRUPT (bad or inconsistent metadata, elements of a
 * tensor no shard holds), AG_ERR_SHAPE (a parameter larger than the
 * checkpoint's), the reader's errors. On failure the parameters or state
 * may be partly loaded. */
AG_API ag_status ag_ddp_zero_load(ag_ddp *d, ag_optimizer *opt, const char *prefix);

/* The same for a run without sharding (one device, or DDP with
 * zero_stage 0): the whole parameters `params` and the whole state of opt
 * (built over params) from a sharded checkpoint of any world size. Errors
 * as ag_ddp_zero_load (AG_ERR_INVALID for NULL). */
AG_API ag_status ag_zero_load_unsharded(const char *prefix, const ag_param_list *params, ag_optimizer *opt);

/* ---- introspection ---- */

typedef struct ag_ddp_stats {
  int n_buckets;
  int64_t bucket_bytes;      /* the capacity in use */
  int64_t steps;             /* completed ag_ddp_finish calls that reduced */
  int64_t launched_in_hooks; /* buckets launched from a gradient-ready hook */
  int64_t launched_at_finish;/* buckets launched by ag_ddp_finish (not ready before) */
  int64_t rebalances;        /* times the shares changed */
  double finish_wait_ms;     /* host time spent waiting in ag_ddp_finish, total */
  double last_throughput;    /* this rank's smoothed rows/s (balance), else 0 */
} ag_ddp_stats;

/* Errors: AG_ERR_INVALID for NULL. */
AG_API ag_status ag_ddp_stats_get(const ag_ddp *d, ag_ddp_stats *out_stats);

/* The bucket holding parameter i of the list given to ag_ddp_create (0 is
 * reduced first), or -1 with AG_ERR_INVALID for an index out of range. */
AG_API int ag_ddp_bucket_of(const ag_ddp *d, int param_index);

/* The group the DDP object reduces over: borrowed, valid while d is (the
 * caller still owns the group it passed to ag_ddp_create). NULL for NULL d. */
AG_API ag_group *ag_ddp_group(const ag_ddp *d);

#ifdef __cplusplus
}
#endif
#endif
