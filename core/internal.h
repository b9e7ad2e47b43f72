/* Core-internal structures shared by the core's translation units: device
 * state, streams, tensors and storage, the allocator's internal interface and
 * the autograd recording hook. Never installed. */
#ifndef AG_CORE_INTERNAL_H
#define AG_CORE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "anygrad/alloc.h"
#include "anygrad/backend.h"
#include "anygrad/device.h"
#include "anygrad/ops.h"
#include "anygrad/status.h"
#include "anygrad/tensor.h"

#include "hidden.h"

struct ag_allocator; /* core/memory/alloc.c */

/* Per-device state, created once by the registry (registry.c) and never freed
 * before exit. */
typedef struct ag_devstate {
  ag_device dev;
  const ag_backend *be;
  int ord;
  ag_stream *default_stream;
  struct ag_allocator *alloc;
  char label[24]; /* "cuda:0" */
  pthread_mutex_t lock;     /* guards the stream list */
  struct ag_stream *streams; /* every stream of the device, default first */
  uint32_t next_stream_id;
} ag_devstate;

struct ag_stream {
  ag_devstate *ds;
  ag_bstream *bs;
  bool is_default;
  uint32_t id; /* unique per device, 0 = default stream */
  struct ag_stream *next; /* in ds->streams */
};

struct ag_event {
  ag_devstate *ds;
  ag_bevent *be;
  bool timing;
  bool recorded;
};

/* ---- registry (registry.c) ---- */

/* Device state for d, loading backends on first use. NULL with the error set
 * if the backend is unavailable or the ordinal is out of range. */
AG_HIDDEN ag_devstate *ag__devstate(ag_device d);
AG_HIDDEN ag_stream *ag__current_stream(ag_devstate *ds);
/* dlopen a run-time module (libanygrad-<name>.so) from AG_BACKEND_PATH,
 * beside libanygrad.so or in anygrad/ beside it. NULL with err filled. */
AG_HIDDEN void *ag__module_open(const char *file, char *err, size_t errlen);
/* The backend whose memory has DLPack device type dlpack_device (loading the
 * modules found); AG_ERR_UNAVAILABLE (error not set) when none has it. */
AG_HIDDEN ag_status ag__backend_by_dlpack(int dlpack_device, ag_backend_kind *out_kind);
/* Whether file (libanygrad-<name>.so) is a communication module rather than
 * a backend (core/dist/modules.c), so the registry's scan skips it. */
AG_HIDDEN bool ag__dist_module_file(const char *file);

/* ---- files (io/files.c; the public half is anygrad/checks.h) ---- */

/* Remove "<path>.tmp.<pid>.*" files left by writers of path whose process
 * is gone. */
AG_HIDDEN void ag__temp_remove_stale(const char *path);
/* Create a new "<path>.tmp.<pid>.<random>" (O_EXCL|O_NOFOLLOW) into tmp;
 * the descriptor, or -1 with errno. */
AG_HIDDEN int ag__temp_create(const char *path, char *tmp, size_t len);
/* fsync the directory holding path (best effort: makes a rename durable). */
AG_HIDDEN void ag__dir_fsync(const char *path);
/* AG_ERR_IO when path exists and is not a regular file. */
AG_HIDDEN ag_status ag__output_target_ok(const char *path, const char *what);

/* ---- host syncs (sync.c): every host<->device synchronization goes through
 * here so sync-debug mode and counters see it. `what` names the public call. */
AG_HIDDEN ag_status ag__sync_stream(ag_stream *s, const char *what);
/* The refusal of sync-debug error mode, checked before a device->host copy
 * is queued: a copy queued into caller memory must not be left in flight
 * by a sync that is then refused (it would land in a dead stack frame or a
 * freed buffer). AG_OK when the sync would be allowed. */
AG_HIDDEN ag_status ag__sync_refused(ag_devstate *ds, const char *what);
AG_HIDDEN ag_status ag__sync_device(ag_devstate *ds, const char *what);
AG_HIDDEN ag_status ag__sync_event(ag_event *e, const char *what);
/* AG_OK unless AG_SYNC_DEBUG is set to a value that is not a mode
 * (AG_ERR_INVALID naming it): checked where a device opens, as a bad
 * AG_ALLOC_CONF is, so a misspelt mode is never silently "off". */
AG_HIDDEN ag_status ag__sync_debug_env_check(void);
/* Every AG_* variable of the core (runtime/env.c), checked when a device
 * opens: AG_ERR_INVALID naming the first bad one. */
AG_HIDDEN ag_status ag__env_check(void);
/* Non-blocking: turn a kernel error word left on s into a status. */
AG_HIDDEN ag_status ag__kernel_error_check(ag_stream *s);

/* ---- allocator internal interface (alloc.c) ---- */

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

/* ---- tensors ---- */

typedef struct ag_storage {
  atomic_int refcount;
  ag_devstate *ds;
  ag_block *block;
  void *base;    /* segment base handle (copy of the block's) */
  size_t offset; /* bytes from base */
  size_t nbytes;
  /* Bumped by every in-place write to any tensor over this storage (views
   * share it, as PyTorch's views share a version counter); autograd compares
   * it with the value recorded when a tensor was saved for backward. */
  atomic_uint version;
  /* Memory the user owns (ag_from_blob, DLPack import): block is NULL and
   * ext_free(ext_data, ext_ctx) runs after the last reference, once the
   * device is synchronized. */
  bool external;
  void (*ext_free)(void *data, void *ctx);
  void *ext_data;
  void *ext_ctx;
} ag_storage;

struct ag_node;
typedef struct ag_grad_hooks ag_grad_hooks; /* autograd.c */
struct ag_scope;

struct ag_tensor {
  atomic_int refcount;
  ag_dtype dtype;
  int ndim;
  int64_t numel;
  int64_t shape[AG_MAX_DIMS];
  int64_t strides[AG_MAX_DIMS];
  int64_t offset; /* elements from the storage start */
  ag_storage *st;
  /* autograd (autograd.c) */
  bool requires_grad;
  ag_tensor *grad;
  struct ag_node *grad_fn; /* owned reference */
  int out_index;
  uint32_t saved_version; /* st->version when autograd saved this header */
  /* gradient-ready hooks (autograd.c): owned list, NULL when none */
  struct ag_grad_hooks *hooks;
  /* scratch of the backward passes running on this leaf (autograd.c): edges
   * still to be processed, and whether a gradient arrived */
  int32_t bw_pending;
  bool bw_got;
  /* scope ownership */
  struct ag_scope *scope;
  int32_t scope_slot;
};

/* New tensor with fresh contiguous storage on ds (registered in the current
 * scope). */
AG_HIDDEN ag_tensor *ag__tensor_new(ag_devstate *ds, ag_dtype dt, int ndim, const int64_t *shape);
/* New tensor over memory the caller owns (base handle `data`, `nbytes`
 * long), with the given strides (elements); free_fn(data, ctx) runs when the
 * last reference goes. NULL with the error set (free_fn not called). */
AG_HIDDEN ag_tensor *ag__tensor_wrap(ag_devstate *ds, ag_dtype dt, int ndim, const int64_t *shape,
                                     const int64_t *strides, void *data, size_t byte_offset,
                                     size_t nbytes, void (*free_fn)(void *, void *), void *ctx);
/* New tensor header sharing t's storage with the given layout. */
AG_HIDDEN ag_tensor *ag__tensor_view(ag_tensor *t, int ndim, const int64_t *shape,
                                     const int64_t *strides, int64_t offset);
/* A header over t's storage and layout that no scope owns and that is off
 * the tape: what long-lived holders (autograd nodes, optimizers, loaders)
 * keep, so a caller releasing or a scope ending never pulls memory from under
 * them. Owned by the caller (ag_tensor_release). */
AG_HIDDEN ag_tensor *ag__private_ref(ag_tensor *t);
/* Take t out of its scope: the scope's reference becomes the caller's. */
AG_HIDDEN ag_tensor *ag__scope_detach(ag_tensor *t);
/* New reference viewing all of t (identity view on the tape). */
AG_HIDDEN ag_tensor *ag__alias(ag_tensor *t);
/* x @ wt + bias (a Linear forward; wt the transposed weight, bias 1-D or
 * NULL) as one matmul node whose GEMM adds the bias (beta = 1 over the
 * broadcast bias), where the dtype is f32/f64 and autocast is off; else
 * matmul then add. Owned by the caller; NULL with the error set. */
AG_HIDDEN ag_tensor *ag__linear_addmm(ag_tensor *x, ag_tensor *wt, ag_tensor *bias);
/* Check a shape: no negative size, and the product of the sizes (0 counted
 * as 1) times dt's size fits in int64_t (so numel, every contiguous stride
 * and the byte size are exact). AG_ERR_SHAPE naming op otherwise. */
AG_HIDDEN bool ag__shape_check(const char *op, int ndim, const int64_t *shape, ag_dtype dt,
                               int64_t *out_numel);
AG_HIDDEN void ag__contiguous_strides(int ndim, const int64_t *shape, int64_t *out_strides);
AG_HIDDEN void ag__operand(ag_koperand *o, const ag_tensor *t);
static inline ag_devstate *ag__ds(const ag_tensor *t) { return t->st->ds; }

/* In-place writes (docs/autograd.md, "In-place writes"). Every write into an
 * existing tensor checks first (AG_ERR_INVALID while grad mode is on and dst
 * requires grad: the write would not be on the tape) and bumps the storage
 * version after it is enqueued. fn names the public call. */
AG_HIDDEN ag_status ag__inplace_check(const ag_tensor *dst, const char *fn);
static inline void ag__version_bump(ag_tensor *t) {
  if (t && t->st) atomic_fetch_add_explicit(&t->st->version, 1, memory_order_relaxed);
}
static inline uint32_t ag__version(const ag_tensor *t) {
  return atomic_load_explicit(&t->st->version, memory_order_relaxed);
}

/* Launch on the current stream of ds; checks backend support first. */
AG_HIDDEN ag_status ag__launch(ag_devstate *ds, ag_kernel_call *c);
/* Contiguous index operand (embedding indices, cross-entropy targets) for
 * kernel op `op` with data dtype dt: i64 stays i64 where the backend takes
 * it (supports(op, 1, dt)), else it is clamped to the i32 range and cast
 * (an out-of-range index stays out of range). New reference. */
AG_HIDDEN ag_tensor *ag__index_operand(ag_devstate *ds, ag_kop op, ag_dtype dt, ag_tensor *idx);
AG_HIDDEN bool ag__supported(ag_devstate *ds, ag_kop op, int sub, ag_dtype dt, const char *name);
/* ag_cumsum, or with reverse the suffix sums (its gradient); recorded. */
AG_HIDDEN ag_tensor *ag__cumsum(ag_tensor *a, int dim, bool reverse);
/* The gradient of ag_gather (sel false) or ag_index_select (sel true) along
 * dim d: g scattered into zeros of x's shape, in f32 (f64 for f64 x). */
AG_HIDDEN ag_tensor *ag__gather_backward(ag_tensor *g, ag_tensor *index, int d, bool sel, int xndim,
                                         const int64_t *xshape, ag_dtype xdt);

/* ---- autograd recording hook (autograd.c) ---- */

typedef enum ag_gop {
  AG_G_ADD, AG_G_SUB, AG_G_MUL, AG_G_DIV,
  AG_G_UNARY,       /* a unary op of the table (optable.h): p->i[0] the
                       ag_unary_op, p->s[0..1] its scalars; what it saves
                       (x or the output) is the table's */
  AG_G_BINARY,      /* a binary op of the table whose gradient is generated
                       (PART): p->i[0] the ag_binary_op; saves a and b */
  AG_G_WHERE,       /* inputs cond, a, b (cond not differentiable) */
  AG_G_SUM, AG_G_MEAN, AG_G_MAX, AG_G_MIN, /* dims in p, keepdim in p */
  AG_G_MATMUL,
  AG_G_SOFTMAX, AG_G_LOG_SOFTMAX, /* dim in p->i[0] */
  AG_G_CROSS_ENTROPY, /* inputs logits, targets; p->i[0] reduction, i[1] ignore */
  AG_G_MSE,
  AG_G_LAYER_NORM,  /* inputs x, weight, bias (NULL allowed); saved mean, rstd */
  AG_G_EMBEDDING,   /* inputs table, indices */
  AG_G_CONCAT,      /* n inputs; dim in p->i[0] */
  AG_G_DROPOUT,     /* saved mask */
  AG_G_VIEW,        /* reshape/view/flatten/squeeze/unsqueeze: input shape in p */
  AG_G_PERMUTE,     /* dims in p */
  AG_G_SLICE,       /* p->i: dim, start, end, step */
  AG_G_EXPAND,      /* input shape in p */
  AG_G_CAST,        /* input dtype in p->i[0] */
  AG_G_TO_DEVICE,
  AG_G_CHECKPOINT,  /* ag_checkpoint: inputs saved, the block re-run in backward */
  AG_G_CONV2D,      /* inputs x, w, bias (NULL allowed); p->dims[0..6] stride,
                       padding, dilation (h, w each), groups */
  AG_G_BATCH_NORM,  /* inputs x, weight, bias (NULL allowed); saved mean, rstd
                       [C]; p->i[0] training (the statistics depend on x) */
  AG_G_POOL2D,      /* input x; p->i[0] ag_pool_op; p->dims[0..6] as the
                       kernel call's s[0..6]; MAX saves the i32 indices */
  AG_G_RMS_NORM,    /* inputs x, weight (NULL allowed); saved contiguous x,
                       rstd */
  AG_G_VAR,         /* var (p->i[0] 0) or std (1): dims, keepdim, keepdim
                       shape in p as AG_G_SUM; p->s[0] = max(0, N -
                       correction); std saves its output (keepdim shape) */
  AG_G_CUMSUM,      /* p->i[0] dim, p->i[1] reverse (suffix sums) */
  AG_G_GATHER,      /* inputs x, index; p->i[0] dim, p->i[1] 1 for index_select */
  AG_GOP_COUNT
} ag_gop;

typedef struct ag_gparams {
  double s[4];
  int64_t i[4];
  int n_dims;
  int dims[AG_MAX_DIMS];
  bool keepdim;
  int ndim; /* an input shape the backward needs */
  int64_t shape[AG_MAX_DIMS];
} ag_gparams;

/* Saved tensors passed by the forward ops (core/tensor/ops.c, core/tensor/tensor.c):
 *   MUL, DIV, BINARY: the inputs a, b as given;  UNARY: the table's choice
 *   (x, the output, or nothing);  ADD/SUB: none
 *   WHERE: saved cond;  MAX/MIN reductions: saved x, out (keepdim=true
 *   shape view of out);  MATMUL: saved a, b (inputs as given; a third input
 *   is a bias the GEMM added, ag__linear_addmm)
 *   SOFTMAX, LOG_SOFTMAX: saved out;  CROSS_ENTROPY: saved logits as [N, C]
 *   contiguous, targets [N] contiguous i32, and for MEAN the scalar count
 *   of non-ignored targets (f32; f64 for f64 logits);  MSE: saved diff =
 *   a - b;  LAYER_NORM: saved x as [N, D] contiguous, mean [N], rstd [N]
 *   (f32; f64 for f64 x);  EMBEDDING: saved
 *   indices contiguous i32;  DROPOUT: saved mask (out = x * mask)
 * The node's output is `out` (its shape is out's); inputs are the forward
 * op's tensor arguments in order. */
/* True when grad mode is on and any non-NULL input requires grad. */
AG_HIDDEN bool ag__grad_needed(int n, ag_tensor *const *inputs);
/* Attach a backward node to out. inputs may hold NULLs (absent optional
 * inputs); saved tensors are retained by the node until it is freed. */
AG_HIDDEN ag_status ag__grad_record(ag_tensor *out, ag_gop op, int n_inputs,
                                    ag_tensor *const *inputs, int n_saved,
                                    ag_tensor *const *saved, const ag_gparams *p);
/* Release t's autograd fields when t is destroyed. */
AG_HIDDEN void ag__grad_tensor_free(ag_tensor *t);

/* ---- autocast (amp.c) ---- */
/* New reference to t in dtype dt (a view when it already is; non-float
 * tensors pass unchanged); parameter casts are cached per region. */
AG_HIDDEN ag_tensor *ag__autocast_to(ag_tensor *t, ag_dtype dt);
/* Widest float dtype among ts (NULLs and non-floats skipped), or -1. */
AG_HIDDEN ag_dtype ag__autocast_widest(int n, ag_tensor *const *ts);
/* While suspended, ag_autocast_enabled() is false (ops doing their own casts). */
AG_HIDDEN void ag__autocast_suspend(void);
AG_HIDDEN void ag__autocast_resume(void);

/* ---- misc ---- */
/* Reserve `blocks` Philox blocks of generator g (NULL: default). */
AG_HIDDEN void ag__generator_take(ag_generator *g, uint64_t blocks, uint64_t *seed, uint64_t *offset);
/* Operand viewing t broadcast to ndim/shape (zero strides); false if the
 * shapes do not broadcast. */
AG_HIDDEN bool ag__broadcast_operand(ag_koperand *o, const ag_tensor *t, int ndim, const int64_t *shape);
AG_HIDDEN const char *ag__devlabel(const ag_tensor *t);
/* The common device of n tensors (NULLs skipped), or an AG_ERR_DEVICE error
 * naming the op. NULL on error. */
AG_HIDDEN ag_devstate *ag__same_device(const char *op, int n, ag_tensor *const *ts);

#endif
