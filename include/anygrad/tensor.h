/* Tensors: creation, views, copies, lifetimes (reference counts and scopes).
 *
 * Ownership: every function that returns an ag_tensor* returns a new
 * reference. Outside any scope the caller owns it and calls
 * ag_tensor_release. Inside a scope (ag_scope_begin) the innermost scope owns
 * it and releases it at ag_scope_end, unless ag_tensor_keep moved it out.
 * Functions given a NULL tensor return NULL (or an error status) without
 * replacing the thread's error message; when no error is pending they set
 * AG_ERR_INVALID ("<function>: NULL tensor"), so a NULL is never silent.
 *
 * Long-lived tensors (parameters, optimizer state, anything a parameter list
 * or optimizer holds) are created outside any scope, or moved out with
 * ag_tensor_keep, and released by their owner: releasing by hand a tensor
 * that a scope still owns while something else holds it would let the scope
 * drop a reference that is not its own.
 *
 * Released tensors: every function given a tensor that was released (its
 * last reference dropped, or the scope owning it ended) fails as for a NULL
 * tensor but with AG_ERR_STATE, naming the call and the release (the
 * file:line with -DAG_SYNC_SITES, diag.h); it never reads the freed memory.
 * Property accessors return their NULL value and set that error; releasing
 * a released tensor sets it and does nothing else. A handle is recognised as
 * released until 4096 more tensors have been released on the releasing
 * thread (docs/design/core.md, "Released handles"). */
#ifndef ANYGRAD_TENSOR_H
#define ANYGRAD_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "anygrad/device.h"
#include "anygrad/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define AG_MAX_DIMS 8

typedef enum ag_dtype {
  AG_F32 = 0,
  AG_F16 = 1,
  AG_BF16 = 2,
  AG_I32 = 3,
  AG_F64 = 4,  /* CPU only: gradient checks and references */
  AG_I64 = 5,  /* indices and targets (PyTorch's default integer dtype) */
  AG_BOOL = 6, /* one byte holding 0 or 1: comparison results and masks */
  AG_U8 = 7,   /* bytes (images, raw data) */
  AG_DTYPE_COUNT = 8,
} ag_dtype;
/* Integer dtypes (i32, i64, u8, bool) hold exact integers: arithmetic wraps
 * around in the dtype's width as in two's complement; casts from floating
 * types truncate toward zero and saturate (NaN gives 0); a cast to bool is
 * x != 0 (NaN is true), a cast from bool gives 0 or 1. Which ops each dtype
 * takes is in ops.h and docs/conformance.md. */

typedef struct ag_tensor ag_tensor;

/* "f32", "bf16", ...; "?" for a value that is no dtype (never NULL, no
 * error set). A static string: lives until exit, do not free. */
AG_API const char *ag_dtype_name(ag_dtype dt);
AG_API size_t ag_dtype_size(ag_dtype dt);      /* bytes; 0 if bad */
/* f32, f16, bf16, f64; false for any other value. Never fails. */
AG_API bool ag_dtype_is_float(ag_dtype dt);
/* i32, i64, u8 and bool (bool counts as an integer dtype). */
AG_API bool ag_dtype_is_int(ag_dtype dt);
/* Parse "f32", "f16", "bf16", "i32", "f64", "i64", "bool", "u8". */
AG_API ag_status ag_dtype_parse(const char *s, ag_dtype *out_dtype);

/* Whether device d runs kernel op `op` (an ag_kop of anygrad/kops.h) with
 * sub-op or variant `sub` for dtype dt, as its backend declares it (the
 * supports() data of its kernel-op list): what the conformance check walks
 * the kernel-op table with. False without an error for an op, sub or dtype
 * out of range; false with AG_ERR_DEVICE or AG_ERR_UNAVAILABLE for a device
 * that does not exist or did not start. */
AG_API bool ag_device_supports(ag_device d, int op, int sub, ag_dtype dt);

/* ---- creation (asynchronous on the device's current stream) ---- */

/* Shapes. Every shape a tensor can have, given by the caller or computed
 * by an op (broadcast, expand, concat, matmul batch), obeys one rule: no
 * negative size, and the product of all sizes (a size 0 counted as 1) times
 * the element size fits in int64_t. Then the element count, every
 * contiguous stride and the byte size are exact; a shape that breaks the
 * rule is refused with AG_ERR_SHAPE ("... is too large") instead of
 * wrapping. This holds for views too (an expanded [2^62, 8] is refused
 * although it would need no memory). */

/* Uninitialised tensor. ndim 0 is a scalar. Errors: AG_ERR_SHAPE for a
 * negative dim, ndim > AG_MAX_DIMS or a shape that overflows (above),
 * AG_ERR_DTYPE, AG_ERR_OOM. */
AG_API ag_tensor *ag_empty(ag_device d, ag_dtype dt, int ndim, const int64_t *shape);
AG_API ag_tensor *ag_zeros(ag_device d, ag_dtype dt, int ndim, const int64_t *shape);
AG_API ag_tensor *ag_ones(ag_device d, ag_dtype dt, int ndim, const int64_t *shape);
AG_API ag_tensor *ag_full(ag_device d, ag_dtype dt, int ndim, const int64_t *shape,
                          double value);
AG_API ag_tensor *ag_scalar(ag_device d, ag_dtype dt, double value); /* 0-dim */
/* 1-D [start, start+step, ...) with n = ceil((end-start)/step) elements. */
AG_API ag_tensor *ag_arange(ag_device d, ag_dtype dt, double start, double end,
                            double step);
/* Like t (same device, dtype, shape), contiguous. */
AG_API ag_tensor *ag_empty_like(const ag_tensor *t);
AG_API ag_tensor *ag_zeros_like(const ag_tensor *t);

/* ---- random numbers (Philox 4x32-10, counter based) ----
 * Element i of a tensor filled with seed s and offset o uses Philox block
 * (o + i/4) lane i%4 for uniform; uniform = (bits >> 8) * 2^-24 in [0, 1).
 * The same seed and offset give the same bits on every backend. Normal uses
 * Box-Muller on block (o + i/2), lanes 2*(i%2) and 2*(i%2)+1: equal on every
 * backend up to the rounding of log/cos (a few ulp). */
typedef struct ag_generator ag_generator;

/* A generator with a seed; its offset advances with every use so successive
 * draws differ. Owned by the caller: ag_generator_free. */
AG_API ag_generator *ag_generator_create(uint64_t seed);
AG_API void ag_generator_free(ag_generator *g);
AG_API void ag_generator_set_state(ag_generator *g, uint64_t seed, uint64_t offset);
AG_API void ag_generator_get_state(const ag_generator *g, uint64_t *out_seed,
                                   uint64_t *out_offset);
/* The process default generator (seed 0 until ag_manual_seed). Thread-safe
 * use; borrowed. */
AG_API ag_generator *ag_default_generator(void);
AG_API void ag_manual_seed(uint64_t seed);

/* g NULL means the default generator. */
AG_API ag_tensor *ag_rand(ag_device d, ag_dtype dt, int ndim, const int64_t *shape,
                          double low, double high, ag_generator *g);
AG_API ag_tensor *ag_randn(ag_device d, ag_dtype dt, int ndim, const int64_t *shape,
                           double mean, double std, ag_generator *g);

/* ---- host data ---- */

/* New tensor holding a copy of `n_bytes = numel*dtype_size` bytes at host
 * pointer `data` (row-major). The host buffer may be reused as soon as this
 * returns. Errors: AG_ERR_INVALID if data is NULL. */
AG_API ag_tensor *ag_from_host(ag_device d, ag_dtype dt, int ndim, const int64_t *shape,
                               const void *data);

/* Copy t (any layout) into host buffer `out` of `n_bytes` bytes in row-major
 * order and t's dtype. Synchronizes (a counted host sync).
 * Errors: AG_ERR_INVALID if n_bytes != numel * dtype size. */
AG_API ag_status ag_to_host(const ag_tensor *t, void *out, size_t n_bytes);

/* Value of a one-element tensor as double. Synchronizes. Returns NAN and
 * sets the error if t is NULL or has more than one element. An i64 value
 * beyond 2^53 is rounded: ag_item_scalar gives it exactly. */
AG_API double ag_item(const ag_tensor *t);

/* A one-element tensor's value with its dtype, in one call: `f` holds a
 * floating value (f16/bf16/f32 widened to double, f64 as stored), `i` an
 * integer or bool value exactly (bool as 0/1, every i64 value included);
 * the other field is the same value converted. */
typedef struct ag_item_value {
  ag_dtype dtype;
  int32_t is_floating; /* 1 for f16/bf16/f32/f64: read f; 0: read i */
  double f;
  int64_t i;
} ag_item_value;

/* Fill *out with the value of one-element tensor t. Synchronizes, like
 * ag_item (a counted host sync). Nothing is owned by the caller.
 * Errors: AG_ERR_INVALID (t or out NULL), AG_ERR_STATE (t released),
 * AG_ERR_SHAPE (t has other than one element), the device's status if the
 * copy fails; *out is left unchanged on error. */
AG_API ag_status ag_item_scalar(const ag_tensor *t, ag_item_value *out);

/* ---- printing values (docs/training.md, "Printing tensors") ----
 *
 * The text is laid out as torch 1.13's str(tensor) with its default print
 * options: "tensor([[ 0.1234, -1.0000], ...])", one width and notation per
 * tensor (fixed with 4 decimals, "1." for integral floats, or 4-digit
 * scientific when the magnitudes span more than 1000x, exceed 1e8 or go
 * below 1e-4), nan/inf as Python spells them, True/False for bool;
 * past 1000 elements each dim longer than 6 shows its first and last 3
 * entries around "..."; lines wrap at 80 columns. Suffixes as PyTorch's:
 * "device='opencl:0'" off the CPU, "dtype=float16" (PyTorch's dtype names
 * without "torch.") unless f32, i64 or bool, "size=(0, 3)" for an empty
 * tensor that is not 1-d, "requires_grad=True" for any tensor that requires
 * grad (PyTorch prints grad_fn for non-leaves). f16/bf16 values print as
 * their exact f32 value, as PyTorch's do.
 *
 * Any device and layout: the values are copied to the host (ag_to_host,
 * every element, one counted host sync: an explicit read). The tensor is not
 * changed and no autograd node is recorded.
 *
 * Errors (every call): a NULL or released t (tensor.h rules; AG_ERR_STATE
 * for released), ag_to_host's errors (AG_ERR_DEVICE, ...), AG_ERR_OOM when
 * the host copy or the text cannot be allocated. */

/* snprintf semantics: writes at most size-1 characters and a NUL into buf
 * (nothing when size is 0; buf may then be NULL) and returns the length of
 * the whole text, without the NUL, so a return >= size means it was cut:
 * call again with a buffer of return + 1 bytes. buf is the caller's. Returns
 * -1 with the error set on failure (AG_ERR_INVALID for a NULL buf with
 * size > 0); buf is then unchanged. */
AG_API int64_t ag_tensor_format(const ag_tensor *t, char *buf, size_t size);
/* The whole text as a new NUL-terminated string from malloc: the caller
 * frees it with free(). NULL with the error set on failure. */
AG_API char *ag_tensor_format_alloc(const ag_tensor *t);
/* Write the text and a newline to f (ag_print: stdout). Errors: as above,
 * AG_ERR_INVALID for a NULL f, AG_ERR_IO when the write fails. */
AG_API ag_status ag_fprint(FILE *f, const ag_tensor *t);
AG_API ag_status ag_print(const ag_tensor *t);

/* ---- properties (borrowed, never fail for a non-NULL tensor, except
 * ag_tensor_dim with a dim out of range) ---- */
AG_API int ag_tensor_ndim(const ag_tensor *t);
AG_API const int64_t *ag_tensor_shape(const ag_tensor *t);
AG_API const int64_t *ag_tensor_strides(const ag_tensor *t); /* in elements */
/* Size of dim (negative dims count from the end). Returns -1 (never a
 * size) and sets AG_ERR_SHAPE when dim is out of range, or AG_ERR_INVALID
 * for a NULL t unless an error is already pending. */
AG_API int64_t ag_tensor_dim(const ag_tensor *t, int dim);
AG_API int64_t ag_tensor_numel(const ag_tensor *t);
AG_API ag_dtype ag_tensor_dtype(const ag_tensor *t);
AG_API ag_device ag_tensor_device(const ag_tensor *t);
/* Row-major contiguous: every dim of size > 1 has the stride of the dims
 * after it. A tensor with no elements is contiguous whatever its strides
 * (as in PyTorch); NULL is not. */
AG_API bool ag_tensor_is_contiguous(const ag_tensor *t);
/* Writes "f32[2,3] cpu" into buf; returns buf. */
AG_API char *ag_tensor_describe(const ag_tensor *t, char *buf, size_t len);

/* ---- lifetime ---- */

/* Add a reference; returns t. The caller owns the new reference (it is not
 * placed in any scope) and drops it with ag_tensor_release, normally after
 * the scope that owns t has ended (to hold t beyond its scope; ag_tensor_keep
 * is the simpler way). */
AG_API ag_tensor *ag_tensor_retain(ag_tensor *t);
/* Drop a reference (NULL ignored). For a tensor a scope owns, this drops the
 * scope's reference early and removes it from the scope: library code can
 * free intermediates as it goes even when its caller has a scope open. */
AG_API void ag_tensor_release(ag_tensor *t);

/* Open a scope on this thread. Scopes nest. The scope also records the
 * thread's mode regions (no-grad, inference, enable-grad, autocast) open at
 * this point: regions opened inside it close with it. Errors: AG_ERR_OOM
 * (last error; no scope is opened). */
AG_API void ag_scope_begin(void);
/* Close the innermost scope: release every reference it owns. Mode regions
 * opened inside the scope and still open are closed first, so an early
 * return past ag_grad_mode_end or ag_autocast_end does not leave the thread
 * in that mode; the tensors are still released and the call then returns
 * AG_ERR_STATE naming the outermost such region and where it was opened
 * (the caller's address, or file:line with -DAG_SYNC_SITES). Errors:
 * AG_ERR_STATE if no scope is open or a region was left open. */
AG_API ag_status ag_scope_end(void);
/* Move t's scope-owned reference to the enclosing scope (or to the caller
 * when the innermost scope is the outermost). Returns t. A tensor not owned
 * by a scope is returned unchanged. */
AG_API ag_tensor *ag_tensor_keep(ag_tensor *t);

/* Declare that work on stream s (not the stream t was allocated on) uses
 * t's memory, so the allocator reuses it only after that work completes
 * (PyTorch's record_stream). Errors: AG_ERR_DEVICE if s is on another device. */
AG_API ag_status ag_tensor_record_stream(ag_tensor *t, ag_stream *s);

/* Number of live tensors in the process (for leak tests). */
AG_API int64_t ag_live_tensors(void);

/* ---- views: share storage, no copy ---- */

/* One dim may be -1. Copies only when t's layout cannot be viewed. */
AG_API ag_tensor *ag_reshape(ag_tensor *t, int ndim, const int64_t *shape);
AG_API ag_tensor *ag_view(ag_tensor *t, int ndim, const int64_t *shape); /* never copies: AG_ERR_SHAPE */
AG_API ag_tensor *ag_flatten(ag_tensor *t);
AG_API ag_tensor *ag_transpose(ag_tensor *t, int dim0, int dim1);
AG_API ag_tensor *ag_permute(ag_tensor *t, const int *dims);
/* Elements [start, end) with step along dim; negative start/end count from
 * the end. Any int64 start and end are clamped to [0, size] as PyTorch does
 * (a[0:3:INT64_MAX] is a[0:1]; an empty range gives size 0, never a
 * negative size). Errors: AG_ERR_SHAPE for a bad dim, AG_ERR_INVALID for
 * step <= 0. */
AG_API ag_tensor *ag_slice(ag_tensor *t, int dim, int64_t start, int64_t end, int64_t step);
/* Broadcast size-1 dims (and add leading dims) to shape. */
AG_API ag_tensor *ag_expand(ag_tensor *t, int ndim, const int64_t *shape);
AG_API ag_tensor *ag_unsqueeze(ag_tensor *t, int dim);
AG_API ag_tensor *ag_squeeze(ag_tensor *t, int dim);
/* A contiguous tensor with t's values: a view of t when t is already
 * contiguous, else a copy. Always a new reference. */
AG_API ag_tensor *ag_contiguous(ag_tensor *t);
/* A new contiguous tensor on t's device with t's dtype and values, bit for
 * bit (-0.0 and NaN payloads kept), never a view; autograd passes the
 * gradient through unchanged. Returns a new reference owned by the caller,
 * or NULL with AG_ERR_INVALID for a NULL or released t, AG_ERR_OOM when the
 * device memory is exhausted (t is unchanged either way). */
AG_API ag_tensor *ag_clone(ag_tensor *t);

/* ---- copies ---- */

/* New tensor of dtype dt (round-to-nearest-even into f16/bf16; integer and
 * bool rules above); a view of t when dt is t's dtype. Any dtype casts to
 * any other where the device has both. */
AG_API ag_tensor *ag_cast(ag_tensor *t, ag_dtype dt);
/* New tensor on device d (a contiguous copy); a view of t when d is t's
 * device. Asynchronous on both devices' current streams except when the
 * host must stage the data (documented in docs/streams.md). */
AG_API ag_tensor *ag_to_device(ag_tensor *t, ag_device d);
/* Copy src into dst (same shape after broadcasting src; dtypes may differ;
 * dst may be a view). Errors: AG_ERR_SHAPE if src does not broadcast to
 * dst; AG_ERR_INVALID if dst has overlapping elements (a stride-0 dim of
 * size > 1, as ag_expand makes), if src and dst share memory other than
 * element for element (a transposed or shifted view of dst: the result
 * would depend on the order of the writes; PyTorch refuses it too), or for
 * the in-place rules below. src being exactly dst's view is a no-op; views
 * that interleave without sharing a byte (u[0::2], u[1::2]) are fine. */
AG_API ag_status ag_copy_(ag_tensor *dst, ag_tensor *src);
/* Fill dst (may be a view) with a value.
 *
 * In-place rules (ag_copy_ and ag_fill_; docs/autograd.md): while grad mode
 * is on, a dst that requires grad (a leaf parameter, or a tensor with a
 * graph) is refused with AG_ERR_INVALID; write it under ag_no_grad_begin().
 * Every write bumps the version of dst's storage, and a backward that needs
 * a tensor saved before the write fails with AG_ERR_STATE instead of using
 * the new values. */
AG_API ag_status ag_fill_(ag_tensor *dst, double value);

#ifdef __cplusplus
}
#endif
#endif
