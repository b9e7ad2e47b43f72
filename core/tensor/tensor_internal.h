/* Tensors and storage as the core builds them: headers over allocator
 * blocks or user memory, views, in-place version counters, kernel operands
 * and launches. Never installed. */
#ifndef AG_CORE_TENSOR_INTERNAL_H
#define AG_CORE_TENSOR_INTERNAL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "anygrad/backend.h"
#include "anygrad/ops.h"
#include "anygrad/tensor.h"

#include "hidden.h"
#include "memory/block.h"
#include "runtime/devstate.h"

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

/* Header states (docs/design/core.md, "Released handles"): a header is
 * never handed back to malloc; a released one keeps AG__T_DEAD and where it
 * was released until the pool reuses it. */
#define AG__T_LIVE 0x4556494cu /* "LIVE" */
#define AG__T_DEAD 0x44414544u /* "DEAD" */

struct ag_tensor {
  uint32_t magic; /* AG__T_LIVE while the handle is valid */
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
  /* the pass's gradient held back for the leaf's pre-hooks until its last
   * edge is done (owned, out of any scope; autograd.c) */
  ag_tensor *bw_buf;
  /* scope ownership */
  struct ag_scope *scope;
  int32_t scope_slot;
  /* release record (AG__T_DEAD headers): the releasing call, its caller's
   * return address or marked file:line, the device label; pool link */
  const char *rel_call;
  const void *rel_addr;
  const char *rel_file;
  int rel_line;
  const char *rel_dev;
  struct ag_tensor *pool_next;
};

/* Sets the error for a tensor argument that cannot be used: NULL
 * (AG_ERR_INVALID unless an error is pending, so a chain keeps its first
 * failure) or released (AG_ERR_STATE naming fn and the release). Returns
 * true. */
AG_HIDDEN bool ag__tensor_unusable(const ag_tensor *t, const char *fn);
/* The entry check of every public call taking a tensor: false for a live
 * tensor, else ag__tensor_unusable. One load and compare on the fast path. */
static inline bool ag__bad_tensor(const ag_tensor *t, const char *fn) {
  if (AG_LIKELY(t && t->magic == AG__T_LIVE)) return false;
  return ag__tensor_unusable(t, fn);
}

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
/* Run code with no scope open (callbacks into code that owns every tensor
 * it creates): returns the thread's current scope, which resume restores. */
AG_HIDDEN void *ag__scope_suspend(void);
AG_HIDDEN void ag__scope_resume(void *scope);
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
/* How src (broadcast to dst's shape) meets dst's memory, by ag_copy_'s
 * rule: 0 apart, 1 every element of src is the dst element at its position
 * (src is dst, or a view of the same elements), 2 otherwise (a partial
 * overlap, or src does not broadcast to dst's shape). Both live, on one
 * device. */
AG_HIDDEN int ag__write_overlap(const ag_tensor *dst, const ag_tensor *src);
static inline void ag__version_bump(ag_tensor *t) {
  if (t && t->st) atomic_fetch_add_explicit(&t->st->version, 1, memory_order_relaxed);
}
static inline uint32_t ag__version(const ag_tensor *t) {
  return atomic_load_explicit(&t->st->version, memory_order_relaxed);
}

/* ---- kernel calls: one builder for every launch of the core (ops,
 * autograd, nn, optimizers) ----
 *   ag_kernel_call c;
 *   ag__kcall_init(&c, AG_K_SOFTMAX_BWD, log, "ag_softmax backward", 3,
 *                  (ag_tensor *[]){dx, g, y});
 *   c.i[0] = rows;
 *   st = ag__launch(ag__ds(dx), &c);
 * Operand k views ts[k] with its own layout (ag__operand); a NULL entry (or
 * ts NULL), and every operand at n and beyond, is absent (base NULL, offset
 * 0, dtype f32, ndim 0): an absent optional input, or one the caller lays
 * out itself (a broadcast, a 3-D matmul view). Every scalar, integer, Philox
 * word, flag and the multi list start at zero. `name` is the public call
 * the backend's messages name; it is borrowed (a literal). struct_size is
 * this build's (ag__launch sets it again for calls made otherwise). */
static inline void ag__kcall_init(ag_kernel_call *c, ag_kop op, int sub, const char *name, int n,
                                  ag_tensor *const *ts) {
  /* Field by field, inline: the operands' shapes are most of the struct
   * and are read only up to ndim (this runs once per launch). */
  c->struct_size = (uint32_t)sizeof *c;
  c->op = op;
  c->sub = sub;
  c->n_operands = n;
  memset(c->s, 0, sizeof c->s);
  memset(c->i, 0, sizeof c->i);
  c->seed = c->offset = 0;
  c->multi = NULL;
  c->name = name;
  c->flags = 0;
  c->workspace = NULL; /* filled by ag__launch */
  c->workspace_ctx = NULL;
  for (int k = 0; k < AG_KMAX_OPERANDS; k++) {
    if (k < n && ts && ts[k]) {
      ag__operand(&c->o[k], ts[k]);
    } else { /* absent, or laid out by the caller */
      c->o[k].base = NULL;
      c->o[k].offset = 0;
      c->o[k].dtype = AG_F32;
      c->o[k].ndim = 0;
    }
  }
}

/* Entry k of a multi-tensor list: contiguous t (NULL: an absent entry,
 * base NULL); count becomes at least k + 1. */
AG_HIDDEN void ag__kmulti_set(ag_kmulti *m, int k, const ag_tensor *t);
/* Launch on the current stream of ds; checks backend support first. */
AG_HIDDEN ag_status ag__launch(ag_devstate *ds, ag_kernel_call *c);

/* ---- the launch hook: op traces and AG_FAULT (core/diag/optrace.c) ----
 * A layer above observes launches through one registered function. While
 * its users count (ag__launch_hook_use) is nonzero, ag__launch hands the
 * prepared call to the hook instead of launching it, and the hook launches
 * it with ag__launch_backend; otherwise a launch pays one relaxed load.
 * Registration is an atomic store of the pointer (thread-safe; diag does
 * it from a constructor); with no hook registered, launches go straight to
 * the backend whatever the count. */
typedef ag_status (*ag_launch_hook_fn)(ag_devstate *ds, ag_stream *s, ag_kernel_call *c);
AG_HIDDEN void ag__launch_hook_set(ag_launch_hook_fn fn);
/* +1 when a user of the hook starts (a trace begins, AG_FAULT is set), -1
 * when it stops. Thread-safe. */
AG_HIDDEN void ag__launch_hook_use(int delta);
/* Whether any user of the hook is counted (one relaxed load). */
AG_HIDDEN bool ag__launch_hook_active(void);
/* The backend's launch of c on s, then the device error word of the ops
 * that validate indices there: what ag__launch does without a hook. */
AG_HIDDEN ag_status ag__launch_backend(ag_devstate *ds, ag_stream *s, const ag_kernel_call *c);
/* The autograd node whose backward launches next on this thread (name NULL:
 * none), set by the tape while a hook is in use and read by the hook. The
 * name is borrowed (a literal or the table's). */
AG_HIDDEN void ag__launch_node_set(const char *name, int index);
AG_HIDDEN const char *ag__launch_node(int *out_index);
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
/* The gradient of ag_scatter_add's src (sel false: g gathered at the
 * index, in zeros of src's shape where the index is smaller) or of
 * ag_index_add's source (sel true: index_select of g times alpha). */
AG_HIDDEN ag_tensor *ag__scatter_add_src_grad(ag_tensor *g, ag_tensor *index, int d, bool sel, double alpha,
                                              int src_ndim, const int64_t *src_shape);
/* The gradient of one step of ag_pad (x of xndim/xshape padded at dim dh,
 * top and left the amounts before; mode an ag_pad_mode): g's padded region
 * back in x's shape, reflected copies summed in a fixed order. */
AG_HIDDEN ag_tensor *ag__pad_backward(ag_tensor *g, int xndim, const int64_t *xshape, int dh, int64_t top,
                                      int64_t left, int mode);

/* ---- operands, devices, random streams ---- */
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
