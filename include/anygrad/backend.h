/* The backend contract: a table of function pointers that a backend module
 * fills in. The core owns policy (validation, caching, autograd, scheduling);
 * a backend owns mechanism (raw memory, queues, kernels). Backends never
 * validate user input: every call they receive has been checked by the core.
 *
 * A run-time module (libanygrad-<name>.so) exports one symbol,
 * ag_backend_module_get (see AG_BACKEND_MODULE_SYMBOL), and keeps every other
 * symbol hidden so several modules can share one process. How to write one:
 * docs/design/backends.md ("How to add a backend"). */
#ifndef ANYGRAD_BACKEND_H
#define ANYGRAD_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "anygrad/device.h"
#include "anygrad/kops.h"
#include "anygrad/optable.h"
#include "anygrad/status.h"
#include "anygrad/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- ABI versions ----
 * The vtable (ag_backend, below) is versioned as OpenXLA's PJRT C API is:
 * struct_size comes first, and within one major version entries are only
 * appended. The core loads a module whose major equals its own and whose
 * struct_size covers at least the major's first minor; every entry at or
 * beyond the module's struct_size is treated as absent (NULL pointers, zero
 * properties: see each entry's "absent" meaning). Any other module is refused,
 * and the reason (shown by `anygrad info`) names both versions.
 *
 * Change log
 *   1    the first vtable (versions 1-3 were matched exactly)
 *   2    ag_kernel_call.flags (AG_KF_DETERMINISTIC)
 *   3    dtypes i64, bool, u8; comparisons write bool; AG_B_NE/LE/GE; i64
 *        indices and targets (embedding, cross-entropy)
 *   4.0  struct_size, abi_major and abi_minor replace abi_version (the
 *        32-bit word that held abi_version now holds struct_size, so a
 *        version-3 module reads as struct_size 3 and is refused as such);
 *        the entries of 3 follow unchanged; the elementwise sub-ops, the
 *        reductions and pooling ops are numbered by the op table
 *        (optable.h), which adds sub-ops (sin ... remainder, each unary
 *        op's _BWD, binary partial derivatives); binary ops read s[1]
 *   4.1  registry properties, so the core decides nothing by backend name:
 *        flags (AG_BACKEND_F_*), dlpack_device, collective, priority,
 *        device_priority, description
 *   4.2  ag_kernel_call.workspace: device memory for the duration of a
 *        launch from the core's caching allocator (AG_KF_WORKSPACE says the
 *        core filled it; a 4.2 module must check, since a 4.1 core leaves
 *        the call shorter); the vtable is 4.1's
 *   4.3  AG_U_AFFINE on integer dtypes reads its scalars exactly from
 *        ag_kernel_call.i[0] and i[1] and wraps in the output's width
 *        (kops.h); a 4.2 module computed it from s[] through f64 and
 *        saturated; the vtable and the call are 4.2's
 *   4.4  thread_device: the calling thread's current device, for a library
 *        given device memory on a thread of the core's (CUDA-aware MPI)
 *   5.0  the op tables are part of the ABI: ag_backend.tables names every
 *        entry of the lists whose positions are codes (AG_BACKEND_TABLES:
 *        kernel ops, now the list AG_KOPS, and the elementwise, reduction
 *        and pooling sub-ops, dtypes, the call's array bounds), and the
 *        core binds a module's codes by those names (4.1 modules ran
 *        renumbered sub-ops: ffd11fb moved every _BWD sub-op up by two);
 *        ag_kernel_call.struct_size comes first, set by the core, checked
 *        by the module (ag_kernel_call_check); the vtable is 4.4's with
 *        tables before name. Entries are appended from here (5.x).
 *   5.1  the kernel-op table is typed (kops.h: each op's operands, scalars
 *        and variants named, AG_KV_* for the variant numbers; kargs.h: the
 *        argument structs, decoders and backend generators); the checksum
 *        covers each op's argument list, so a moved slot or renumbered
 *        variant stops the build. Codes and slots are 5.0's; appended:
 *        LOGSUMEXP, NORM, SORT, SCATTER_ADD, GROUP_NORM(_BWD), PAD(_BWD),
 *        INTERPOLATE(_BWD), ONE_HOT
 *   5.2  portable numerics (docs/numerics.md): the call flag
 *        AG_KF_PORTABLE and the vtable entries portable_check and
 *        supports_portable; a module without them (before 5.2, or bound by
 *        name to other op tables) refuses the mode. Tables are 5.1's
 *   5.3  the binary op SWIGLU (silu(a) * b) and its partials SWIGLU_DA,
 *        SWIGLU_DB appended to the elementwise table (every _BWD code moves
 *        up by one; older modules bind by name and lack it)
 * A change to a table is an ABI change: a new entry is a minor version (an
 * older module binds by name and lacks it), a changed meaning a major one;
 * the core does not compile until AG_BACKEND_TABLES_ENTRIES and
 * AG_BACKEND_TABLES_CHECKSUM below are set to the new tables' values. */
#define AG_BACKEND_ABI_MAJOR 5u
#define AG_BACKEND_ABI_MINOR 3u
/* The tables of this version (AG_TABLES_ENTRIES_NOW and
 * AG_TABLES_CHECKSUM_NOW, below); core/runtime/registry.c asserts them. */
#define AG_BACKEND_TABLES_ENTRIES 184
#define AG_BACKEND_TABLES_CHECKSUM 335053

/* ---- kernel calls ----
 * The kernel ops (ag_kop) and their operands are described in
 * anygrad/kops.h, which OpenCL kernels include too. */

/* ---- elementwise sub-ops, expanded from the op table (optable.h) ----
 * AG_K_UNARY: o0 = f(o1) for sub = ag_unary_op; o0, o1 dtypes may differ
 * for COPY (a cast). AG_K_BINARY: o0 = f(o1, o2) for sub = ag_binary_op:
 * first the table's binary ops, then AG_B_<ID>_BWD for each unary op with a
 * gradient (a = upstream gradient, b = the saved x or y; returns the input
 * gradient), then AG_B_<ID>_DA and AG_B_<ID>_DB for binary ops whose
 * gradient is generated (the partial derivatives in a and b). CMP ops write
 * bool and compute in the inputs' dtype, which supports() is asked for.
 * Scalars: s[0], s[1] as the table's s0, s1. */
/* What the table says of a sub-op, for the core and the backends. */
typedef enum ag_opt_save { AG_SAVE_NG, AG_SAVE_N, AG_SAVE_X, AG_SAVE_Y } ag_opt_save;
typedef enum ag_opt_dtypes { AG_OPT_FLT, AG_OPT_INT } ag_opt_dtypes;
typedef struct ag_unary_info {
  const char *name;   /* "exp": the public op is ag_exp */
  ag_opt_save save;   /* what the backward reads */
  bool amp_f32;       /* autocast runs the op in f32 */
  ag_opt_dtypes ints; /* FLT: floating dtypes only */
  int cost;           /* relative CPU cost per element */
} ag_unary_info;
typedef struct ag_binary_info {
  const char *name;   /* "atan2", or "gelu backward", "atan2 da" */
  bool compare;       /* bool output */
  bool part;          /* gradient from the generated _DA/_DB ops */
  ag_opt_dtypes ints;
  int cost;
} ag_binary_info;

#ifdef __cplusplus
#define AG_OPT_STATIC_ASSERT static_assert
#else
#define AG_OPT_STATIC_ASSERT _Static_assert
#endif
#define AG_OPT_SAVE_NG AG_SAVE_NG
#define AG_OPT_SAVE_N AG_SAVE_N
#define AG_OPT_SAVE_X AG_SAVE_X
#define AG_OPT_SAVE_Y AG_SAVE_Y
#define AG_OPT_AMP_KEEP false
#define AG_OPT_AMP_F32 true
#define AG_OPT_INTS_FLT AG_OPT_FLT
#define AG_OPT_INTS_INT AG_OPT_INT
#define AG_OPT_CMP_ARITH false
#define AG_OPT_CMP_CMP true
#define AG_OPT_U_INFO(ID, name, api, f, save, b, amp, ints, cost, ...) \
  {#name, AG_OPT_SAVE_##save, AG_OPT_AMP_##amp, AG_OPT_INTS_##ints, cost},
#define AG_OPT_B_INFO(ID, name, api, f, kind, grad, da, db, ints, cost, ...) \
  {#name, AG_OPT_CMP_##kind, AG_OPT_PART_##grad, AG_OPT_INTS_##ints, cost},
#define AG_OPT_BWD_INFO(ID, name, api, f, save, b, amp, ints, cost, ...) \
  AG_OPT_IF(AG_OPT_HAS_BWD_##save)({#name " backward", false, false, AG_OPT_FLT, cost}, )
#define AG_OPT_PART_INFO(ID, name, api, f, kind, grad, da, db, ints, cost, ...) \
  AG_OPT_IF(AG_OPT_PART_##grad)({#name " da", false, false, AG_OPT_FLT, cost},      \
                                {#name " db", false, false, AG_OPT_FLT, cost}, )

#define AG_OPT_BWD_CASE(ID, n, api, f, save, ...) \
  AG_OPT_IF(AG_OPT_HAS_BWD_##save)(case AG_U_##ID: return AG_B_##ID##_BWD;)
#define AG_OPT_PART_CASE(ID, n, api, f, kind, grad, ...) \
  AG_OPT_IF(AG_OPT_PART_##grad)(case AG_B_##ID: return k == 0 ? AG_B_##ID##_DA : AG_B_##ID##_DB;)

/* How many entries claim an integer rule (INT): each backend's integer
 * functions pin these with a static assertion, so an entry that gains one
 * is a build error until every backend implements it. */
#define AG_OPT_INT_ONE_INT +1
#define AG_OPT_INT_ONE_FLT
#define AG_OPT_U_INT(ID, n, api, f, save, bwd, amp, ints, ...) AG_OPT_INT_ONE_##ints
#define AG_OPT_B_INT(ID, n, api, f, kind, grad, da, db, ints, ...) AG_OPT_INT_ONE_##ints
enum { AG_UNARY_INT_COUNT = 0 AG_UNARY_OPS(AG_OPT_U_INT), AG_BINARY_INT_COUNT = 0 AG_BINARY_OPS(AG_OPT_B_INT) };

/* The binary sub-op that computes unary op's input gradient (AG_B_<ID>_BWD),
 * or -1 when the op has no gradient. */
static inline int ag_unary_bwd_op(int op) {
  switch (op) {
    AG_UNARY_OPS(AG_OPT_BWD_CASE)
    default: return -1;
  }
}
/* The binary sub-op computing d(a op b)/da (k = 0) or d/db (k = 1) for a
 * binary op whose gradient is generated, or -1. */
static inline int ag_binary_part_op(int op, int k) {
  switch (op) {
    AG_BINARY_OPS(AG_OPT_PART_CASE)
    default: return -1;
  }
}

/* The table's facts of unary sub-op op, or NULL when op is out of range. */
static inline const ag_unary_info *ag_unary_info_of(int op) {
  static const ag_unary_info t[] = {AG_UNARY_OPS(AG_OPT_U_INFO)};
  AG_OPT_STATIC_ASSERT(sizeof t / sizeof t[0] == AG_UNARY_COUNT, "unary table and enum differ");
  return op >= 0 && op < AG_UNARY_COUNT ? &t[op] : NULL;
}
/* The same for binary sub-ops (forward, unary backward, partials). */
static inline const ag_binary_info *ag_binary_info_of(int op) {
  static const ag_binary_info t[] = {AG_BINARY_OPS(AG_OPT_B_INFO) AG_UNARY_OPS(AG_OPT_BWD_INFO)
                                         AG_BINARY_OPS(AG_OPT_PART_INFO)};
  AG_OPT_STATIC_ASSERT(sizeof t / sizeof t[0] == AG_BINARY_COUNT, "binary table and enum differ");
  return op >= 0 && op < AG_BINARY_COUNT ? &t[op] : NULL;
}

/* ag_reduce_op (AG_K_REDUCE) and ag_pool_op (AG_K_POOL2D) are defined in
 * optable.h, so OpenCL kernels select them by name too. AG_R_ARGMAX writes
 * i32: the index of the first maximum. For every reduction the input dtype
 * is the one supports() is asked for; SUM of bool/u8 is never launched (the
 * core sums them as i64). */

typedef struct ag_koperand {
  void *base;      /* segment base handle; NULL means "absent" where allowed */
  size_t offset;   /* bytes from the segment base */
  ag_dtype dtype;
  int ndim;
  int64_t shape[AG_MAX_DIMS];
  int64_t strides[AG_MAX_DIMS]; /* elements */
} ag_koperand;

#define AG_KMAX_OPERANDS 6
#define AG_KMAX_MULTI 512

/* One tensor of a multi list: a named type, so a decoded op's entries
 * (kargs.h AGK_MULTI) are the list's own elements, not a cast of them. */
typedef struct ag_kmulti_entry {
  void *base;
  size_t offset;
  ag_dtype dtype;
  int64_t numel;
} ag_kmulti_entry;

/* A list of contiguous tensors for multi-tensor kernels. */
typedef struct ag_kmulti {
  int count;
  ag_kmulti_entry t[AG_KMAX_MULTI];
} ag_kmulti;

typedef struct ag_kernel_call {
  /* sizeof(ag_kernel_call) as the core was built: set by the core for
   * every launch (AG_KERNEL_CALL_HEADER for calls built elsewhere). A
   * module reads only fields within it: ag_kernel_call_check. */
  uint32_t struct_size;
  ag_kop op;
  int sub;                 /* ag_unary_op / ag_binary_op / ag_reduce_op / variant */
  int n_operands;
  ag_koperand o[AG_KMAX_OPERANDS];
  double s[8];             /* scalar parameters (meaning per op) */
  int64_t i[4];            /* integer parameters (meaning per op) */
  uint64_t seed, offset;   /* Philox key and counter offset */
  const ag_kmulti *multi;  /* multi-tensor list, or NULL. Borrowed for the call:
                              a backend that runs the call later copies it. */
  const char *name;        /* the public op for messages ("ag_embedding") */
  uint32_t flags;          /* AG_KF_*; set by the core for every launch */
  /* ---- read only when flags has AG_KF_WORKSPACE ----
   * Scratch device memory for the work this launch enqueues on its stream
   * (a vendor library's workspace): workspace(workspace_ctx, bytes,
   * &base, &offset) takes `bytes` from the core's caching allocator (shown
   * in its statistics as category "workspace"), at most AG_KMAX_WORKSPACE
   * times per launch; base + offset as in ag_koperand. The core frees the
   * blocks when launch returns, reusable only in the stream's order, so
   * the enqueued work may use them; the backend frees nothing. Errors:
   * AG_ERR_OOM (set, and counted as an OOM) when the device is full even
   * after the cache was released: the backend may then run a path that
   * needs none (ag_error_clear first) or return it; AG_ERR_INVALID past
   * the limit or for 0 bytes. Only during launch, on the launching thread. */
  ag_status (*workspace)(void *workspace_ctx, size_t bytes, void **out_base, size_t *out_offset);
  void *workspace_ctx;
} ag_kernel_call;

#define AG_KMAX_WORKSPACE 4

/* For a call built outside the core (a test, a module's own sub-launch):
 *   ag_kernel_call c = {AG_KERNEL_CALL_HEADER, .op = AG_K_FILL, ...}; */
#define AG_KERNEL_CALL_HEADER .struct_size = (uint32_t)sizeof(ag_kernel_call)

/* A module's launch starts with this: AG_OK when the call holds the `need`
 * bytes the module reads (sizeof(ag_kernel_call) as the module was built),
 * else AG_ERR_UNSUPPORTED naming both sizes. A call from a newer core is
 * longer: the module reads its prefix. One from an older core (a module
 * built against a newer minor) or one whose builder forgot struct_size is
 * shorter: refused, never read past its end. */
static inline ag_status ag_kernel_call_check(const ag_kernel_call *c, size_t need, const char *backend) {
  if (c->struct_size >= need) return AG_OK;
  return ag_error_set(AG_ERR_UNSUPPORTED,
                      "%s: %s: a kernel call of %u bytes, the module reads %zu (built against a newer anygrad "
                      "than the one running it, or a call without struct_size)",
                      backend, c->name ? c->name : "launch", (unsigned)c->struct_size, need);
}

/* ag_kernel_call.flags */
/* Deterministic mode (ag_set_deterministic): ops that would sum floats with
 * atomics in a scheduling-dependent order (EMBEDDING_BWD, LAYERNORM_BWD's
 * dw/db, SUMSQ) use a fixed order, so results repeat bit for bit on one
 * device. A backend whose kernels are always deterministic ignores it. */
#define AG_KF_DETERMINISTIC 1u
/* The core filled ag_kernel_call.workspace (ag__launch does; a call built
 * elsewhere has no workspace service). */
#define AG_KF_WORKSPACE 2u
/* Portable numerics (ag_set_numerics, docs/numerics.md): compute the op as
 * the spec fixes it, bit for bit the same on every backend, or refuse it
 * (AG_ERR_UNSUPPORTED: ag_k__not_portable) when the backend has no such
 * kernel for the op, variant or dtype. Never run it the default way. */
#define AG_KF_PORTABLE 4u

/* Index errors found by kernels (embedding index, cross-entropy target) are
 * not fatal: the kernel writes a safe value and stores the op and the bad
 * index in the stream's error word, which the core reads at the next host
 * sync (see docs/design/errors.md). */
typedef struct ag_kernel_error {
  int32_t code;   /* 0 none, else ag_status (AG_ERR_INDEX) */
  int32_t kop;    /* ag_kop that failed */
  int64_t index;  /* offending value */
  int64_t limit;  /* valid range is [0, limit) */
} ag_kernel_error;

/* The geometry of a conv2d op: x [N, C, H, W], y [N, Co, Ho, Wo], w [Co,
 * C/G, kh, kw], stride sh/sw, padding ph/pw, dilation dh/dw, G groups.
 * AG_CONV_GEOM(a, x, y, w) builds it from any of the three decoded conv2d
 * argument structs (kargs.h), which name the same window. */
typedef struct ag_conv_geom {
  int64_t N, C, H, W, Co, Ho, Wo, kh, kw, sh, sw, ph, pw, dh, dw, G;
} ag_conv_geom;
#define AG_CONV_GEOM(a, x, y, w)                                                                    \
  ag_conv_geom_make((x), (y), (w), (a)->stride_h, (a)->stride_w, (a)->pad_h, (a)->pad_w, (a)->dilation_h, \
                    (a)->dilation_w, (a)->groups)
static inline ag_conv_geom ag_conv_geom_make(const ag_koperand *x, const ag_koperand *y, const ag_koperand *w,
                                             int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t dh, int64_t dw,
                                             int64_t groups) {
  ag_conv_geom g = {x->shape[0], x->shape[1], x->shape[2], x->shape[3], y->shape[1], y->shape[2],
                    y->shape[3], w->shape[2], w->shape[3], sh,          sw,          ph,
                    pw,          dh,          dw,          groups};
  return g;
}

/* ---- the op tables in the ABI ----
 * Kernel-op and sub-op codes are positions in lists (kops.h, optable.h), so
 * a module states the lists it was built against: ag_backend.tables =
 * AG_BACKEND_TABLES, the names of every entry in order. Sections are
 * separated by ';', each a name and its entries separated by spaces:
 *   anygrad-tables 1;layout dims=8 operands=6 multi=512;dtype F32 ... U8;
 *   kop FILL ... SDPA_BWD;unary COPY ...;binary ADD ... NEG_BWD ...
 *   MAX_DA MAX_DB ...;reduce SUM ...;pool MAX AVG ADAPTIVE_AVG
 * The core compares them with its own when it loads the module: the first
 * three sections must be equal (refused otherwise, naming the first entry
 * that differs); kernel ops and sub-ops are bound by name, so a module
 * built against other tables runs each op under its own code for it, and
 * an op its tables lack is unsupported (docs/design/backends.md). */
#define AG_TBL_STR_(x) #x
#define AG_TBL_STR(x) AG_TBL_STR_(x)
#define AG_TBL_KOP(ID, ...) " " #ID
#define AG_TBL_U(ID, ...) " " #ID
#define AG_TBL_B(ID, ...) " " #ID
#define AG_TBL_BWD(ID, n, api, f, save, ...) AG_OPT_IF(AG_OPT_HAS_BWD_##save)(" " #ID "_BWD")
#define AG_TBL_PART(ID, n, api, f, kind, grad, ...) AG_OPT_IF(AG_OPT_PART_##grad)(" " #ID "_DA " #ID "_DB")
#define AG_BACKEND_TABLES                                                                          \
  "anygrad-tables 1;layout dims=" AG_TBL_STR(AG_MAX_DIMS) " operands=" AG_TBL_STR(AG_KMAX_OPERANDS) \
  " multi=" AG_TBL_STR(AG_KMAX_MULTI) ";dtype F32 F16 BF16 I32 F64 I64 BOOL U8;kop" AG_KOPS(AG_TBL_KOP) \
  ";unary" AG_UNARY_OPS(AG_TBL_U) ";binary" AG_BINARY_OPS(AG_TBL_B) AG_UNARY_OPS(AG_TBL_BWD)           \
  AG_BINARY_OPS(AG_TBL_PART) ";reduce SUM MAX MIN ARGMAX;pool MAX AVG ADAPTIVE_AVG"
/* The dtype, reduction and pooling lists are short enums with their own
 * numbers, written out above: pinned to them here. */
AG_OPT_STATIC_ASSERT(AG_F32 == 0 && AG_F16 == 1 && AG_BF16 == 2 && AG_I32 == 3 && AG_F64 == 4 && AG_I64 == 5 &&
                         AG_BOOL == 6 && AG_U8 == 7 && AG_DTYPE_COUNT == 8,
                     "the dtype codes changed: list them in AG_BACKEND_TABLES (backend.h)");
AG_OPT_STATIC_ASSERT(AG_R_SUM == 0 && AG_R_MAX == 1 && AG_R_MIN == 2 && AG_R_ARGMAX == 3 && AG_REDUCE_COUNT == 4 &&
                         AG_P_MAX == 0 && AG_P_AVG == 1 && AG_P_ADAPTIVE_AVG == 2 && AG_POOL_OP_COUNT == 3,
                     "the reduction or pooling codes changed: list them in AG_BACKEND_TABLES (backend.h)");

/* What the core pins (AG_BACKEND_TABLES_ENTRIES, _CHECKSUM above): the
 * number of entries, and a checksum of the tables' length and of each
 * name's length weighted by its position, as integer constants (C has no
 * compile-time string hash). It sees every entry added, removed or moved
 * past a name of another length; the comparison of the names at load sees
 * the rest. */
#define AG_TBL_CK(code, name) +((int)(code) + 1) * (int)sizeof(name)
#define AG_TBL_CK_KOP(ID, ...) AG_TBL_CK(AG_K_##ID, #ID)
/* Each op's argument list (kops.h): its slots and variant values, weighted
 * by the length of their names, so a moved operand or scalar, or a
 * renumbered variant, changes the checksum too. */
#define AG_TBL_CK_O(slot, nm, role, dt) AG_TBL_CK(slot, #nm #role #dt)
#define AG_TBL_CK_S(slot, nm) AG_TBL_CK(slot, #nm)
#define AG_TBL_CK_V(NM) AG_TBL_CK(AG_KV_##NM, #NM)
#define AG_TBL_CK_ARGS(ID, ...) \
  AGK_ARGS_##ID(AG_TBL_CK_O, AG_TBL_CK_S, AG_TBL_CK_S, AG_TBL_CK_S, AG_TBL_CK_V, AG_TBL_CK_S)
#define AG_TBL_CK_U(ID, ...) AG_TBL_CK(AG_U_##ID, #ID)
#define AG_TBL_CK_B(ID, ...) AG_TBL_CK(AG_B_##ID, #ID)
#define AG_TBL_CK_BWD(ID, n, api, f, save, ...) \
  AG_OPT_IF(AG_OPT_HAS_BWD_##save)(AG_TBL_CK(AG_B_##ID##_BWD, #ID "_BWD"))
#define AG_TBL_CK_PART(ID, n, api, f, kind, grad, ...) \
  AG_OPT_IF(AG_OPT_PART_##grad)(AG_TBL_CK(AG_B_##ID##_DA, #ID "_DA") AG_TBL_CK(AG_B_##ID##_DB, #ID "_DB"))
enum {
  AG_TABLES_ENTRIES_NOW = (int)AG_KOP_COUNT + (int)AG_UNARY_COUNT + (int)AG_BINARY_COUNT + (int)AG_REDUCE_COUNT +
                          (int)AG_POOL_OP_COUNT + (int)AG_DTYPE_COUNT,
  AG_TABLES_CHECKSUM_NOW = (int)sizeof(AG_BACKEND_TABLES) + 3 * (0 AG_KOPS(AG_TBL_CK_KOP)) +
                           11 * (0 AG_KOPS(AG_TBL_CK_ARGS)) +
                           5 * (0 AG_UNARY_OPS(AG_TBL_CK_U)) +
                           7 * (0 AG_BINARY_OPS(AG_TBL_CK_B) AG_UNARY_OPS(AG_TBL_CK_BWD) AG_BINARY_OPS(AG_TBL_CK_PART))
};

/* FNV-1a (64 bits) of a tables string: how messages name a set of tables. */
static inline uint64_t ag_tables_hash(const char *tables) {
  uint64_t h = 14695981039346656037ull;
  for (const unsigned char *p = (const unsigned char *)tables; *p; p++) h = (h ^ *p) * 1099511628211ull;
  return h;
}

/* Opaque backend objects. */
typedef struct ag_bstream ag_bstream;
typedef struct ag_bevent ag_bevent;

/* ag_backend.flags */
/* Segment base handles are host pointers the host may read and write once
 * the device's queued work is done (cpu, gpuemu): the core copies between
 * such a device and another one without a staging buffer. */
#define AG_BACKEND_F_HOST_MEMORY 1u
/* A segment base handle plus a byte offset is an address in the device's
 * own address space (a CUDA or HIP device pointer, a host pointer), so
 * ag_tensor_data_ptr and DLPack hand it out and DLPack imports wrap one. An
 * OpenCL cl_mem is a handle: the flag is clear. */
#define AG_BACKEND_F_ADDRESSABLE 2u

/* ---- the vtable ----
 * Every function returns AG_OK or an error status with ag_error_set called.
 * `dev` is the ordinal within the backend. Functions not marked optional are
 * required (the core refuses a module that leaves one NULL). Thread safety:
 * every entry may be called from any thread; calls on one stream are
 * serialised by the core. A module fills the table with designated
 * initializers, so what it does not name is zero (absent). */
typedef struct ag_backend {
  /* ---- 5.0 ---- */
  uint32_t struct_size;   /* sizeof(ag_backend) as the module was built */
  uint16_t abi_major;     /* AG_BACKEND_ABI_MAJOR */
  uint16_t abi_minor;     /* AG_BACKEND_ABI_MINOR */
  /* The op tables the module was built against: AG_BACKEND_TABLES (static
   * storage; AG_BACKEND_HEADER fills it, ahead of name for C++'s designated
   * initializers, which keep declaration order). */
  const char *tables;
  /* The registered name: libanygrad-<name>.so, devices "<name>:N". Lower-case
   * letters, digits and '_'. */
  const char *name;

  /* Load the vendor runtime and count devices. On failure, write a reason
   * into reason (reason_len bytes) and return AG_ERR_UNAVAILABLE. */
  ag_status (*init)(int *out_device_count, char *reason, size_t reason_len);
  void (*shutdown)(void); /* optional */

  ag_status (*device_props)(int dev, ag_device_props *out);
  ag_status (*mem_info)(int dev, size_t *out_free, size_t *out_total);

  /* raw device memory; only the caching allocator calls these. *out_base is
   * the segment base handle passed back in ag_koperand.base. */
  ag_status (*segment_alloc)(int dev, size_t bytes, void **out_base);
  void (*segment_free)(int dev, void *base);

  /* optional virtual memory for expandable segments (all NULL if absent):
   * reserve an address range, map/unmap granule-aligned physical chunks. */
  size_t (*vm_granularity)(int dev);
  ag_status (*vm_reserve)(int dev, size_t bytes, void **out_base);
  ag_status (*vm_map)(int dev, void *base, size_t offset, size_t bytes);
  ag_status (*vm_unmap)(int dev, void *base, size_t offset, size_t bytes);
  void (*vm_release)(int dev, void *base, size_t bytes);

  /* page-locked host memory usable for async copies; only the host caching
   * allocator calls these. */
  ag_status (*pinned_alloc)(int dev, size_t bytes, void **out_ptr);
  void (*pinned_free)(int dev, void *ptr);

  /* streams: in-order queues */
  ag_status (*stream_create)(int dev, ag_bstream **out);
  void (*stream_destroy)(ag_bstream *s);
  ag_status (*stream_synchronize)(ag_bstream *s);
  ag_status (*stream_query)(ag_bstream *s, bool *out_done);

  /* events */
  ag_status (*event_create)(int dev, bool timing, ag_bevent **out);
  void (*event_destroy)(ag_bevent *e);
  ag_status (*event_record)(ag_bevent *e, ag_bstream *s);
  ag_status (*stream_wait_event)(ag_bstream *s, ag_bevent *e);
  ag_status (*event_query)(ag_bevent *e, bool *out_done);
  ag_status (*event_synchronize)(ag_bevent *e);
  ag_status (*event_elapsed_ms)(ag_bevent *start, ag_bevent *end, float *out_ms);

  /* copies, enqueued on s. For copy_h2d with src_pinned == false the backend
   * must have consumed src before returning (src may be reused at once).
   * copy_d2h into pageable memory may complete before returning; the core
   * synchronizes the stream before reading dst either way. */
  ag_status (*copy_h2d)(ag_bstream *s, void *dst_base, size_t dst_off, const void *src,
                        size_t bytes, bool src_pinned);
  ag_status (*copy_d2h)(ag_bstream *s, void *dst, const void *src_base, size_t src_off,
                        size_t bytes);
  ag_status (*copy_d2d)(ag_bstream *s, void *dst_base, size_t dst_off, const void *src_base,
                        size_t src_off, size_t bytes);

  /* Enqueue a kernel on s. `call` is borrowed for the duration of this call. */
  ag_status (*launch)(ag_bstream *s, const ag_kernel_call *call);
  /* Whether launch implements op (sub variant) for dtype (the output's, or
   * for casts the input's). Must be cheap and never fail. */
  bool (*supports)(int dev, ag_kop op, int sub, ag_dtype dtype);

  /* Read and clear the stream's kernel error word (ag_kernel_error). Called
   * by the core after a stream synchronize; must not block. */
  ag_status (*take_kernel_error)(ag_bstream *s, ag_kernel_error *out);

  /* ---- what the core would otherwise decide by backend name (4.1) ---- */
  uint32_t flags;         /* AG_BACKEND_F_*; absent: 0 (opaque handles) */
  /* The DLDeviceType (anygrad/dlpack.h) of the device memory, or 0 (absent:
   * no DLPack form; tensors neither export nor import). kDLCPU exports device
   * id 0; other types the ordinal. An import of the type is wrapped on this
   * backend when it is also AG_BACKEND_F_ADDRESSABLE. */
  int32_t dlpack_device;
  /* Priority in ag_device_best(): the available device with the highest
   * wins, ties going to the lower kind, then ordinal (cpu 0, opencl 100,
   * hip 200, cuda 300). < 0: never chosen (the core does not even start the
   * backend to look). Absent: 0 (never above the cpu). */
  int32_t priority;
  /* Optional: the priority of one device (an OpenCL device on the host
   * ranks below the cpu); NULL: priority for every device. Never fails. */
  int32_t (*device_priority)(int dev);
  /* The communication library that reduces this device's memory in place
   * ("nccl", "rccl"; an ag_dist_kind name), or NULL (absent: collectives
   * stage through host memory). */
  const char *collective;
  /* Optional one line for `anygrad info` ("for testing: ..."), or NULL. */
  const char *description;

  /* ---- appended in 4.4, one of 5.0's entries ---- */
  /* Optional: make device dev current on the calling thread, as the vendor
   * runtime keeps it per thread (cudaSetDevice, hipSetDevice), so that a
   * library handed this device's memory on this thread (a CUDA-aware MPI)
   * works in its context. *out_prev receives the device that was current
   * before (-1: unknown), which a second call restores; dev < 0 changes
   * nothing and only reads it. Absent (NULL): the backend keeps no such
   * per-thread state (cpu, opencl, vulkan) and the core calls nothing. */
  ag_status (*thread_device)(int dev, int *out_prev);

  /* ---- appended in 5.2: portable numerics (docs/numerics.md) ---- */
  /* Optional: AG_OK when device dev computes as the spec requires (IEEE f32
   * + - * correctly rounded, subnormals preserved, the flags that switch
   * contraction off honoured: a backend may probe the device), else
   * AG_ERR_UNSUPPORTED with ag_error_set naming the device and the reason.
   * Called once per device, the first time the core launches on it in
   * portable mode (and by ag_device_numerics_check). Absent: the mode is
   * refused on the backend's devices. */
  ag_status (*portable_check)(int dev);
  /* Optional: whether launch, with AG_KF_PORTABLE set, computes op (sub)
   * for dtype as the spec fixes it. Implies supports(). Must be cheap and
   * never fail. Absent: nothing is portable. */
  bool (*supports_portable)(int dev, ag_kop op, int sub, ag_dtype dtype);
} ag_backend;

/* The smallest struct_size the core accepts: the end of 5.0's entries. */
#define AG_BACKEND_STRUCT_SIZE_5_0 (offsetof(ag_backend, description) + sizeof(const char *))

/* The one symbol a backend module exports: its table (static storage, lives
 * as long as the module is loaded; borrowed by the core). */
#define AG_BACKEND_MODULE_SYMBOL "ag_backend_module_get"
typedef const ag_backend *(*ag_backend_module_get_fn)(void);

/* Fills the version header of a module's table, the op tables included:
 *   static const ag_backend g = {AG_BACKEND_HEADER, .name = "mine", ...}; */
#define AG_BACKEND_HEADER                                                                                  \
  .struct_size = (uint32_t)sizeof(ag_backend), .abi_major = AG_BACKEND_ABI_MAJOR, .abi_minor = AG_BACKEND_ABI_MINOR, \
  .tables = AG_BACKEND_TABLES

/* ---- helpers the core exports for backends ---- */

/* f32 <-> f16/bf16 with round-to-nearest-even, NaN preserved. */
AG_API uint16_t ag_f32_to_f16(float f);
AG_API float ag_f16_to_f32(uint16_t h);
AG_API uint16_t ag_f32_to_bf16(float f);
AG_API float ag_bf16_to_f32(uint16_t b);

/* Philox 4x32-10: fills out[4] for counter (ctr_lo, ctr_hi, 0, 0) and key
 * (seed low, seed high). The reference every backend must match. */
AG_API void ag_philox4x32(uint64_t counter, uint64_t seed, uint32_t out[4]);

/* The typed arguments of each kernel op, and the backend generators. */
#include "anygrad/kargs.h"

#ifdef __cplusplus
}
#endif
#endif
