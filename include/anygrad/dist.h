/* Collective communication: process groups and the collectives data-parallel
 * training is built on (all-reduce, broadcast, all-gather, reduce-scatter,
 * barrier), on tensors of any backend. See docs/distributed.md.
 *
 * A group has `size` ranks; each rank is one device driven by one host thread
 * (an ag_group handle per rank). Four implementations sit behind one API:
 *   AG_DIST_INPROC  several devices in one process, one thread per rank
 *                   (ag_group_create_inproc); data meets in pinned host memory,
 *                   so any mix of backends works (cpu + opencl:0, cuda:0 + hip:0).
 *   AG_DIST_MPI     one rank per process (MPI_COMM_WORLD), run-time module
 *                   libanygrad-mpi.so; staged through pinned host buffers unless
 *                   the MPI library reports device (CUDA-aware) support.
 *   AG_DIST_NCCL    CUDA devices through libnccl.so.2, loaded at run time.
 *   AG_DIST_RCCL    HIP devices through librccl.so.1, loaded at run time.
 * An implementation absent on the machine is reported by ag_dist_available
 * with its reason, like the backends.
 *
 * Ordering and streams. A collective is queued, in the order the rank calls
 * them, on the rank's communication worker; every rank of a group must call
 * the same collectives in the same order with matching dtypes and sizes (a
 * mismatch the group can see is an AG_ERR_INVALID on every rank). A collective
 * starts after the work already queued on the calling thread's current stream
 * of the tensor's device (an event is recorded there at the call), so the
 * caller never synchronizes to launch one. The result is ordered for later
 * work by ag_work_wait (host) or ag_work_stream_wait (a stream). Tensors must
 * be contiguous and on the group's device, and must stay alive and unwritten
 * until the work completes (the group holds a reference, so releasing them
 * early is safe; writing them is a race).
 *
 * Errors and timeouts. Nothing here hangs or aborts the process: every wait
 * is bounded by the group's timeout (ag_group_options.timeout_ms, else the
 * AG_DIST_TIMEOUT_MS environment variable, else 300000 ms). A rank that does
 * not arrive makes every waiting peer fail with AG_ERR_TIMEOUT naming the
 * missing ranks; a failed collective (timeout, bad argument, device error,
 * ag_group_abort) marks the group broken and the peers fail fast with
 * AG_ERR_ABORTED carrying the first failure's message. A broken group stays
 * broken: every later call fails at once; destroy it and make a new one.
 *
 * Threading. One ag_group handle belongs to its rank: collectives on it are
 * called from one thread at a time (normally the rank's own thread). ag_work
 * handles may be waited on, tested and released from any thread.
 * ag_group_abort may be called from any thread at any time. */
#ifndef ANYGRAD_DIST_H
#define ANYGRAD_DIST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "anygrad/device.h"
#include "anygrad/status.h"
#include "anygrad/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ag_dist_kind {
  AG_DIST_INPROC = 0,
  AG_DIST_MPI = 1,
  AG_DIST_NCCL = 2,
  AG_DIST_RCCL = 3,
  AG_DIST_KIND_COUNT = 4,
} ag_dist_kind;

typedef enum ag_dist_reduce {
  AG_DIST_SUM = 0,
  AG_DIST_AVG = 1, /* sum / size; float dtypes only (AG_ERR_DTYPE for i32) */
  AG_DIST_MAX = 2,
  AG_DIST_MIN = 3,
} ag_dist_reduce;

/* One rank's handle on a group. Opaque; owned by whoever created it
 * (ag_group_destroy). */
typedef struct ag_group ag_group;

/* One queued collective. Owned by the caller: ag_work_release. */
typedef struct ag_work ag_work;

/* The longest timeout a group takes: 7 days, in milliseconds (deadlines
 * in nanoseconds stay far from overflowing). */
#define AG_DIST_MAX_TIMEOUT_MS INT64_C(604800000)

typedef struct ag_group_options {
  /* Bound on every wait of the group (arrival of the peers, completion of a
   * collective, ag_work_wait). 0 means AG_DIST_TIMEOUT_MS if set, else
   * 300000 ms. Must be in 0..AG_DIST_MAX_TIMEOUT_MS (as must the variable:
   * garbage, overflow or a value out of range is AG_ERR_INVALID). */
  int64_t timeout_ms;
} ag_group_options;

/* Name of a kind ("inproc", "mpi", "nccl", "rccl"); "?" if out of range. */
AG_API const char *ag_dist_kind_name(ag_dist_kind kind);

/* Whether an implementation can be used in this process. Never fails. When
 * `why` is given (n bytes, always NUL-terminated) it receives, if available,
 * a description ("Open MPI v4.1.4, CUDA-aware: no"), else the reason
 * ("libanygrad-mpi.so not found in ... (module not built)",
 * "libnccl.so.2: cannot open shared object file"). Loads the run-time module
 * on first use (thread-safe; the result is cached for the process). */
AG_API bool ag_dist_available(ag_dist_kind kind, char *why, size_t n);

/* Options filled with their defaults (timeout_ms 0: from the environment). */
AG_API void ag_group_options_default(ag_group_options *out_opts);

/* This process's local rank: its index among the processes of its job on
 * this host, as the launcher sets it in the environment, the first of
 * OMPI_COMM_WORLD_LOCAL_RANK (Open MPI's mpirun), MPI_LOCALRANKID (MPICH's
 * and Intel MPI's Hydra), MV2_COMM_WORLD_LOCAL_RANK (MVAPICH), SLURM_LOCALID
 * (srun) and LOCAL_RANK (torchrun) that is set. With several devices per
 * host, local rank r takes device r % count (PyTorch's LOCAL_RANK
 * convention; `anygrad train --dist mpi --device cuda` does so). *out_source
 * (may be NULL) receives the variable's name, borrowed and static. Reads the
 * environment on every call. Errors: AG_ERR_INVALID (NULL out_local_rank, or
 * a value that is not a decimal integer in 0..1048575: naming the variable
 * and its value), AG_ERR_UNAVAILABLE (none is set: not started by such a
 * launcher; the message lists them). */
AG_API ag_status ag_dist_local_rank(int *out_local_rank, const char **out_source);

/* ---- constructors ---- */

/* An in-process group of n ranks, rank i on devices[i] (devices may repeat
 * and may be of different backends). out_groups (n entries) receives one
 * handle per rank, each owned by the caller (ag_group_destroy each); hand
 * out_groups[i] to the thread that drives rank i. opts may be NULL.
 * Errors: AG_ERR_INVALID (n < 1, n > 64, NULL arrays, negative timeout,
 * bad AG_DIST_TIMEOUT_MS), AG_ERR_UNAVAILABLE / AG_ERR_DEVICE for a device
 * that cannot be opened, AG_ERR_OOM. Nothing is created on failure. */
AG_API ag_status ag_group_create_inproc(int n, const ag_device *devices,
                                        const ag_group_options *opts,
                                        ag_group **out_groups);

/* This process's rank in an MPI group over MPI_COMM_WORLD, using `device`
 * for staging. Initializes MPI (MPI_Init_thread) if the program has not;
 * collective over all processes, like MPI_Init. MPI errors are returned, not
 * fatal (MPI_ERRORS_RETURN on anygrad's duplicate of the communicator).
 * Owned by the caller: ag_group_destroy. Errors: AG_ERR_UNAVAILABLE
 * (libanygrad-mpi.so or libmpi absent: the reason as ag_dist_available
 * gives it), AG_ERR_BACKEND (an MPI call failed), AG_ERR_STATE (MPI already
 * finalized), AG_ERR_DEVICE. */
AG_API ag_status ag_group_create_mpi(ag_device device, const ag_group_options *opts,
                                     ag_group **out_group);

/* This rank's handle on an NCCL group (device a cuda device) or an RCCL
 * group (device a hip device) with the same rank and size as `bootstrap`,
 * an in-process or MPI group used once to exchange the unique id (a
 * collective over bootstrap). The new group does not keep bootstrap.
 * Owned by the caller: ag_group_destroy. Errors: AG_ERR_UNAVAILABLE (library
 * absent: reason as ag_dist_available; returned before bootstrap is used, so
 * it stays usable as a fallback), AG_ERR_DEVICE (device of the wrong
 * backend), AG_ERR_BACKEND (an NCCL call failed, with ncclGetErrorString's
 * text), any bootstrap error. */
AG_API ag_status ag_group_create_nccl(ag_group *bootstrap, ag_device device,
                                      const ag_group_options *opts, ag_group **out_group);

/* Wait for the rank's queued collectives (each bounded by the timeout),
 * then release the handle. NULL is ignored. Work handles still held stay
 * valid (they report their outcome). Destroying a rank while peers still
 * call collectives makes them fail with AG_ERR_ABORTED or AG_ERR_TIMEOUT. */
AG_API void ag_group_destroy(ag_group *g);

/* ---- accessors (never fail for a non-NULL group; -1 / AG_CPU for NULL) ---- */
AG_API int ag_group_rank(const ag_group *g);
AG_API int ag_group_size(const ag_group *g);
AG_API ag_device ag_group_device(const ag_group *g);
AG_API ag_dist_kind ag_group_kind(const ag_group *g);
AG_API int64_t ag_group_timeout_ms(const ag_group *g);

/* Mark the group broken with `reason` (may be NULL): queued and future
 * collectives on every rank fail with AG_ERR_ABORTED, peers blocked in a
 * collective return at once (in-process) or within the timeout (MPI, NCCL:
 * ncclCommAbort). Thread-safe; any thread; idempotent (the first reason is
 * kept). */
AG_API void ag_group_abort(ag_group *g, const char *reason);

/* AG_OK while the group works; else the status that broke it, with its
 * message set on this thread. Never blocks. */
AG_API ag_status ag_group_status(const ag_group *g);

/* ---- collectives ----
 * Each queues one collective and returns without waiting for it. With
 * out_work non-NULL the caller receives the handle (owned: ag_work_release)
 * and the call's status says only whether it was queued. With out_work NULL
 * the call blocks until the collective completed, orders its result before
 * later work on the calling thread's current stream, and returns its status.
 * A call that fails to queue (bad argument, broken group) also breaks the
 * group, so that peers never wait for a collective that will not come.
 * Errors at the call: AG_ERR_INVALID (NULL, non-contiguous tensor, bad op
 * or root), AG_ERR_DEVICE (tensor not on the group's device), AG_ERR_SHAPE
 * (sizes do not fit), AG_ERR_DTYPE, AG_ERR_ABORTED (group broken); from the
 * work: AG_ERR_TIMEOUT, AG_ERR_ABORTED, AG_ERR_INVALID (peers disagree on
 * the collective), AG_ERR_BACKEND, AG_ERR_OOM.
 *
 * Numerics: the in-process group accumulates every dtype in double in rank
 * order (0, 1, ...) and rounds once, so its result is the same on every run
 * and on every rank. Staged MPI widens f16/bf16 to f32 and lets MPI reduce
 * (f32, f64, i32 natively; MPI's order). AG_DIST_AVG is the sum divided by
 * size. */

/* t <- op over all ranks' t (in place). Every rank's t has the same dtype
 * and element count. */
AG_API ag_status ag_all_reduce(ag_group *g, ag_tensor *t, ag_dist_reduce op, ag_work **out_work);

/* t <- root's t on every rank (in place). */
AG_API ag_status ag_broadcast(ag_group *g, ag_tensor *t, int root, ag_work **out_work);

/* out <- concatenation of every rank's in, rank order: out has size * numel(in)
 * elements (any shape), same dtype. in and out must not overlap. */
AG_API ag_status ag_all_gather(ag_group *g, ag_tensor *in, ag_tensor *out, ag_work **out_work);

/* out <- op over all ranks of chunk `rank` of in, where in has size *
 * numel(out) elements split in rank order. in and out must not overlap. */
AG_API ag_status ag_reduce_scatter(ag_group *g, ag_tensor *in, ag_tensor *out, ag_dist_reduce op,
                                   ag_work **out_work);

/* Returns (or completes the work) when every rank has arrived. Waits for no
 * device work. */
AG_API ag_status ag_group_barrier(ag_group *g, ag_work **out_work);

/* ---- work handles ---- */

/* Block the host until the collective completed (its results are in the
 * tensors and later work on any stream sees them); returns its status. The
 * worker bounds each collective by the group's timeout, so this returns
 * within about one timeout (AG_ERR_TIMEOUT from the collective). A counted
 * host sync. May be called again; returns the same status. */
AG_API ag_status ag_work_wait(ag_work *w);

/* True when the work has completed (successfully or not). Never blocks. */
AG_API bool ag_work_test(const ag_work *w);

/* Order the result before all work queued on s after this call (s may be on
 * any device of the rank: the group's device normally). Does not block on
 * device work; an implementation that reduces on the host (in-process,
 * staged MPI) first waits on the host for that host phase (bounded by the
 * timeout). Returns the collective's status if it is known to have failed. */
AG_API ag_status ag_work_stream_wait(ag_work *w, ag_stream *s);

/* Release a handle (NULL ignored). Releasing an unfinished work does not
 * cancel it. */
AG_API void ag_work_release(ag_work *w);

#ifdef __cplusplus
}
#endif
#endif
