/* The collectives' internal interface: one vtable per group implementation
 * (in-process in the core; MPI and NCCL/RCCL in run-time modules), the host
 * reduction kernels (the one place that knows dtypes), and the module loader.
 * Never installed; the modules are built from this tree against it. */
#ifndef AG_CORE_DIST_INTERNAL_H
#define AG_CORE_DIST_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "anygrad/dist.h"

#ifndef AG_HIDDEN
#define AG_HIDDEN __attribute__((visibility("hidden")))
#endif

#define AG_DIST_MODULE_ABI 2u /* 2: ag_dist_create_args.dev_dlpack */
#define AG_DIST_MAX_RANKS 64
#define AG_DIST_ID_BYTES 128 /* NCCL's unique id */

typedef enum ag_coll_kind {
  AG_COLL_ALL_REDUCE = 0,
  AG_COLL_BROADCAST = 1,
  AG_COLL_ALL_GATHER = 2,
  AG_COLL_REDUCE_SCATTER = 3,
  AG_COLL_BARRIER = 4,
} ag_coll_kind;

/* One collective as an implementation runs it. Buffers are host memory, or
 * device addresses when the implementation declared device_buffers. */
typedef struct ag_coll {
  ag_coll_kind kind;
  ag_dtype dtype;   /* f16/bf16 arrive widened to f32 unless native_half; sums
                       and averages on device buffers even then, unless
                       AG_DIST_HALF_REDUCE=native */
  ag_dist_reduce op;  /* AVG only when native_avg */
  int root;
  void *buf;        /* all-reduce, broadcast: in/out; gather/scatter: input */
  void *out;        /* all-gather: size*count; reduce-scatter: count */
  size_t count;     /* elements per rank: of buf (reduce-scatter: of out) */
  uint64_t seq;     /* 1, 2, ... per group: for messages */
} ag_coll;

typedef struct ag_dist_impl ag_dist_impl; /* per-rank state of one implementation */

/* What an implementation did at creation. */
typedef struct ag_dist_caps {
  bool device_buffers; /* run() takes device addresses (CUDA-aware MPI, NCCL) */
  bool native_avg;     /* run() does AG_DIST_AVG itself */
  bool native_half;    /* run() reduces f16/bf16 itself */
} ag_dist_caps;

typedef struct ag_dist_create_args {
  int rank, size;          /* in: in-process, NCCL; out: MPI */
  int dev_backend, dev_index;
  int64_t timeout_ms;
  unsigned char id[AG_DIST_ID_BYTES]; /* NCCL unique id (from get_id on rank 0) */
  int dev_dlpack;          /* the device memory's DLDeviceType (0: none), as its
                              backend reports it: kDLCUDA for CUDA-aware MPI */
} ag_dist_create_args;

/* Every entry returns AG_OK or a status with ag_error_set called (on the
 * calling thread). */
typedef struct ag_dist_module {
  uint32_t abi; /* AG_DIST_MODULE_ABI */
  const char *name;
  /* Load the vendor library; true if usable. why: version or reason. */
  bool (*probe)(char *why, size_t n);
  /* NCCL only: a fresh unique id (AG_DIST_ID_BYTES) to hand to every rank. */
  ag_status (*get_id)(unsigned char *out_id);
  ag_status (*create)(ag_dist_create_args *a, ag_dist_impl **out_impl, ag_dist_caps *out_caps);
  /* Run one collective to completion on the calling (worker) thread, giving
   * up with AG_ERR_TIMEOUT at deadline_ns (CLOCK_MONOTONIC). Complete means
   * the result is in c's buffers and nothing of the implementation uses them
   * any more: the group then casts back and frees its staging blocks. */
  ag_status (*run)(ag_dist_impl *im, const ag_coll *c, int64_t deadline_ns);
  /* Break the group from any thread: waiting and later runs fail. */
  void (*abort)(ag_dist_impl *im, ag_status st, const char *why);
  /* AG_OK, or the status that broke the group with its message. Optional. */
  ag_status (*broken)(ag_dist_impl *im, char *msg, size_t n);
  void (*destroy)(ag_dist_impl *im);
} ag_dist_module;

/* The one symbol a communication module exports: the module of `kind`
 * (ag_dist_kind), or NULL if it does not implement that kind. */
#define AG_DIST_MODULE_SYMBOL "ag_dist_module_get"
typedef const ag_dist_module *(*ag_dist_module_get_fn)(int kind);

/* ---- host reductions (reduce.c): every dtype rule lives there ---- */

/* Whether collectives accept dt. */
AG_HIDDEN bool ag__dist_dtype_ok(ag_dtype dt);
/* dsts[j][off..off+n) = op over srcs[k][off..off+n), k = 0..nsrc-1 in order,
 * accumulated in double and rounded once (AVG divides the sum by nsrc). A
 * dst may be one of the srcs. */
AG_HIDDEN void ag__dist_reduce(ag_dtype dt, ag_dist_reduce op, int nsrc, void *const *srcs, int ndst,
                               void *const *dsts, size_t off, size_t n);
/* The dtype an implementation without native_half receives for dt (f32 for
 * f16/bf16, dt itself otherwise), and the conversions to and from it. */
AG_HIDDEN ag_dtype ag__dist_wire_dtype(ag_dtype dt);
AG_HIDDEN void ag__dist_widen(ag_dtype dt, const void *src, float *dst, size_t n);
AG_HIDDEN void ag__dist_narrow(ag_dtype dt, const float *src, void *dst, size_t n);
/* buf[i] /= div, in buf's dtype (float dtypes). */
AG_HIDDEN void ag__dist_divide(ag_dtype dt, void *buf, size_t n, double div);

/* ---- implementations ---- */
AG_HIDDEN const ag_dist_module *ag__dist_inproc_module(void);
/* n ranks sharing one rendezvous: out_impls[i] for rank i. */
AG_HIDDEN ag_status ag__dist_inproc_create_all(int n, int64_t timeout_ms, ag_dist_impl **out_impls);
/* The loaded module of a kind (MPI, NCCL, RCCL), or NULL with why filled. */
AG_HIDDEN const ag_dist_module *ag__dist_module(ag_dist_kind kind, char *why, size_t n);

/* For tests: a group over mod (not loaded from a file; reported as kind
 * MPI) on device, with device_buffers as mod declares it even on a
 * host-memory device, so the device path (and its f16/bf16 widening) runs
 * on the CPU or gpuemu. a as ag_group_create_mpi fills it for create. */
AG_HIDDEN ag_status ag__group_create_with_module(const ag_dist_module *mod, ag_device device, int64_t timeout_ms,
                                                 ag_dist_create_args *a, ag_group **out_group);
/* AG_OK unless AG_DIST_HALF_REDUCE is set to neither f32 nor native. */
AG_HIDDEN ag_status ag__dist_half_reduce_env_check(void);

/* ---- time: deadlines are CLOCK_MONOTONIC nanoseconds ---- */
#include <time.h>
static inline int64_t ag__dist_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* now + ms, saturating at INT64_MAX (timeouts are validated to at most
 * AG_DIST_MAX_TIMEOUT_MS; this keeps any other caller from wrapping). */
static inline int64_t ag__dist_deadline_ns(int64_t ms) {
  int64_t ns, at;
  if (ms < 0) ms = 0;
  if (__builtin_mul_overflow(ms, (int64_t)1000000, &ns) || __builtin_add_overflow(ag__dist_now_ns(), ns, &at))
    return INT64_MAX;
  return at;
}

#endif
