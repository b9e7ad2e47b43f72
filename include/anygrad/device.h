/* Devices, backends, streams and events.
 * A device is a (backend, ordinal) value. Backends other than the CPU are
 * run-time modules (libanygrad-<name>.so) found by name; an absent or
 * refused one is listed as unavailable with its reason. */
#ifndef ANYGRAD_DEVICE_H
#define ANYGRAD_DEVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "anygrad/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A backend's number in this process. The named values are fixed (source
 * compatibility); any other backend module gets a kind >= AG_BACKEND_COUNT
 * when the registry first meets its name (ag_backend_find, ag_device_parse,
 * ag_backend_count), so such a kind is not stable between processes: keep
 * the name, not the number. */
typedef enum ag_backend_kind {
  AG_BACKEND_CPU = 0,
  AG_BACKEND_CUDA = 1,
  AG_BACKEND_HIP = 2,
  AG_BACKEND_OPENCL = 3,
  /* The GPU kernel source run on the CPU by an emulator (libanygrad-gpuemu.so),
   * for testing and debugging: gpuemu:0 has CUDA's warp and launch limits,
   * gpuemu:1 HIP's. Never chosen by ag_device_best(). */
  AG_BACKEND_GPUEMU = 4,
  AG_BACKEND_COUNT = 5, /* the named kinds; the first dynamic kind */
} ag_backend_kind;

#define AG_MAX_DEVICES 16
#define AG_MAX_BACKENDS 32 /* kinds, named and dynamic, in one process */

/* A device: plain value, no ownership. */
typedef struct ag_device {
  int16_t backend; /* ag_backend_kind */
  int16_t index;   /* ordinal within the backend */
} ag_device;

#ifdef __cplusplus
#define AG_CPU (ag_device{AG_BACKEND_CPU, 0})
#else
#define AG_CPU ((ag_device){AG_BACKEND_CPU, 0})
#endif

typedef struct ag_device_props {
  char name[128];
  char vendor[64];
  char arch[64];          /* "sm_90", "gfx90a", OpenCL version, CPU ISA */
  size_t total_memory;    /* bytes */
  int compute_units;      /* SMs, CUs, cores */
  bool native_f16;        /* half arithmetic (not only storage) */
  bool native_bf16;
  bool virtual_memory;    /* can back expandable segments */
  bool unified_memory;    /* device memory is host memory (CPU, PoCL) */
} ag_device_props;

/* What a backend's module reports about itself (ABI 4.1 properties). */
typedef struct ag_backend_info {
  const char *name;        /* borrowed, lives until exit */
  const char *path;        /* the module file, or "" for the built-in cpu */
  const char *description; /* "" when the module gives none */
  unsigned abi_major, abi_minor; /* the module's */
  bool host_memory;        /* device memory is host memory */
  bool addressable;        /* device memory has addresses (data_ptr, DLPack) */
  int dlpack_device;       /* DLDeviceType, 0 = none */
  int priority;            /* for ag_device_best; < 0 never chosen */
  const char *collective;  /* "nccl", "rccl" or "" */
} ag_backend_info;

/* ---- the backend registry ----
 * One process-wide, thread-safe registry (core/runtime/registry.c) maps
 * names to kinds and kinds to loaded modules. It searches, in order, the
 * folders of AG_BACKEND_PATH (':'-separated), the folder of libanygrad.so and
 * its anygrad/ subfolder; AG_BACKENDS="cpu,opencl" restricts which backends
 * load. A module is loaded (and its ABI checked) on first use of its kind,
 * and started (devices counted) at the same time; kinds and names are never
 * removed. */

/* Name of a backend kind ("cpu", "cuda", ..., or a module's name); "?" if no
 * backend has that kind (never NULL, no error set). Borrowed, static: lives
 * until exit; do not free. */
AG_API const char *ag_backend_name(ag_backend_kind kind);

/* Number of kinds the registry knows: the named kinds plus every module
 * found in the search folders (they are scanned on the first call). Kinds
 * run from 0 to the count - 1; a later ag_backend_find may add more. */
AG_API int ag_backend_count(void);

/* The kind of the backend called name ("cuda", "vulkan"), registering it if
 * a module libanygrad-<name>.so is in a search folder. A registered backend
 * may still be unavailable (ag_backend_available says why). Errors:
 * AG_ERR_INVALID for a NULL or malformed name, or a name no backend or
 * module has (the message lists the known names and the folders searched);
 * AG_ERR_UNAVAILABLE when AG_MAX_BACKENDS kinds are taken. */
AG_API ag_status ag_backend_find(const char *name, ag_backend_kind *out_kind);

/* The module's properties. Loads the module (without starting it). Errors:
 * AG_ERR_INVALID for an unknown kind, AG_ERR_UNAVAILABLE with the reason
 * when the module is absent or refused. */
AG_API ag_status ag_backend_info_get(ag_backend_kind kind, ag_backend_info *out_info);

/* Whether the backend loaded and has at least one device. If not and
 * out_reason is given, it receives a borrowed, static description
 * ("libanygrad-cuda.so: cudaGetDeviceCount: no CUDA-capable device").
 * Never fails; loads the backend modules on first use. */
AG_API bool ag_backend_available(ag_backend_kind kind, const char **out_reason);

/* Number of devices of a backend (0 if unavailable). */
AG_API int ag_backend_device_count(ag_backend_kind kind);

/* Parse "<name>" or "<name>:N" for any backend name ag_backend_find knows:
 * "cpu", "cpu:0", "cuda:1", "hip:0", "opencl:0", "gpuemu:1", "vulkan:0".
 * Errors: AG_ERR_INVALID for a malformed string or an unknown backend name,
 * AG_ERR_UNAVAILABLE for a backend that is absent, refused or has no device,
 * AG_ERR_DEVICE for an ordinal beyond the device count. */
AG_API ag_status ag_device_parse(const char *s, ag_device *out_device);

/* Write "cuda:0" etc. into buf (always NUL-terminated, truncated to len);
 * returns buf, which the caller owns. Never fails (no error set); len 0
 * writes nothing. */
AG_API char *ag_device_str(ag_device d, char *buf, size_t len);

/* The best available device: the highest priority its module reports
 * (cuda:0, then hip:0, then an OpenCL GPU, then cpu; gpuemu never). */
AG_API ag_device ag_device_best(void);

/* Same backend and ordinal. Never fails. */
AG_API bool ag_device_eq(ag_device a, ag_device b);

/* Properties of a device. Errors: AG_ERR_DEVICE, AG_ERR_UNAVAILABLE. */
AG_API ag_status ag_device_props_get(ag_device d, ag_device_props *out_props);

/* Free and total device memory as the backend reports them, in bytes.
 * Backends that cannot query free memory report total minus what anygrad
 * reserved. Errors: AG_ERR_DEVICE or AG_ERR_UNAVAILABLE for a device that
 * does not exist or did not start; the backend's error when its query
 * fails (out_* are then unchanged). */
AG_API ag_status ag_device_mem_info(ag_device d, size_t *out_free, size_t *out_total);

/* Block until all work queued on every stream of the device has finished.
 * This is a host sync (counted, reported by sync-debug mode). Errors:
 * AG_ERR_DEVICE/AG_ERR_UNAVAILABLE for a bad device, AG_ERR_SYNC when
 * sync-debug mode is error, or the first error of the queued work. */
AG_API ag_status ag_device_synchronize(ag_device d);

/* ---- streams and events ---- */

typedef struct ag_stream ag_stream;
typedef struct ag_event ag_event;

/* The device's default stream. Borrowed; lives until process exit.
 * Returns NULL (and sets the error) for an unavailable device. */
AG_API ag_stream *ag_stream_default(ag_device d);

/* A new stream on the device. Owned by the caller: ag_stream_destroy.
 * Returns NULL and sets the error for a bad or unavailable device
 * (AG_ERR_DEVICE, AG_ERR_UNAVAILABLE), AG_ERR_OOM, or the backend's error
 * when it cannot create a queue. */
AG_API ag_stream *ag_stream_create(ag_device d);

/* Waits for the stream's work, then releases it. NULL is ignored.
 * The default stream is never destroyed (ignored). */
AG_API void ag_stream_destroy(ag_stream *s);

/* The device of s (AG_CPU for NULL). Never fails. */
AG_API ag_device ag_stream_device(const ag_stream *s);

/* The stream ops on device d run on, for this thread (default stream unless
 * set). Borrowed: valid until it is destroyed (the default stream lives
 * until exit). NULL, with the error set, for a bad or unavailable device. */
AG_API ag_stream *ag_stream_current(ag_device d);

/* Make s the current stream of its device for this thread; NULL restores the
 * default. Returns the previous current stream of that device (borrowed). */
AG_API ag_stream *ag_stream_set_current(ag_device d, ag_stream *s);

/* Block the host until all work queued on s has finished (a host sync).
 * Errors: AG_ERR_INVALID for NULL, AG_ERR_SYNC when sync-debug mode is
 * error, or the first error of the queued work. */
AG_API ag_status ag_stream_synchronize(ag_stream *s);

/* True if all work queued on s has finished. Never blocks. */
AG_API bool ag_stream_query(ag_stream *s);

/* A new event on device d. timing=true allows ag_event_elapsed_ms.
 * Owned by the caller: ag_event_destroy (NULL ignored). Returns NULL and
 * sets the error for a bad or unavailable device, AG_ERR_OOM, or the
 * backend's error. */
AG_API ag_event *ag_event_create(ag_device d, bool timing);
AG_API void ag_event_destroy(ag_event *e);

/* Record e at the current end of s's queue.
 * Errors: AG_ERR_INVALID for a NULL argument, AG_ERR_DEVICE when e and s
 * are on different devices, or the backend's error. */
AG_API ag_status ag_event_record(ag_event *e, ag_stream *s);

/* Make all work queued on s after this call wait for e. Does not block the
 * host. Both must be on the same device. An event never recorded is
 * complete (AG_OK). Errors: AG_ERR_INVALID for a NULL argument,
 * AG_ERR_DEVICE for different devices, or the backend's error. */
AG_API ag_status ag_stream_wait_event(ag_stream *s, ag_event *e);

/* True if e's recorded work has completed (or e was never recorded). */
AG_API bool ag_event_query(ag_event *e);

/* Block the host until e completes (a host sync; an event never recorded
 * returns at once). Errors: AG_ERR_INVALID for NULL, AG_ERR_SYNC when
 * sync-debug mode is error, or the first error of the work before it. */
AG_API ag_status ag_event_synchronize(ag_event *e);

/* Milliseconds between two completed timing events. Errors: AG_ERR_STATE if
 * either is not recorded or not complete, AG_ERR_INVALID if not timing. */
AG_API ag_status ag_event_elapsed_ms(ag_event *start, ag_event *end, float *out_ms);

/* ---- deterministic mode ----
 * When on, GPU kernels that would accumulate floats with atomics in an order
 * that depends on scheduling (embedding backward, layer-norm weight and bias
 * gradients, the sum of squares behind gradient-norm clipping) use
 * fixed-order variants, so a run repeats bit for bit on the same device and
 * build; they are somewhat slower. The CPU and OpenCL backends are always
 * deterministic. Process-wide: the initial value comes from
 * AG_DETERMINISTIC=1 (read once, at the first launch or query); setting it
 * is thread-safe and affects kernels launched afterwards. */
AG_API void ag_set_deterministic(bool on);
AG_API bool ag_get_deterministic(void);

/* ---- numerics mode (docs/numerics.md) ----
 * AG_NUMERICS_DEFAULT: each backend computes as fast as it can within the
 * accuracy the conformance tool checks (vendor math, vendor BLAS, the
 * device's reduction trees), so two backends agree closely but not to the
 * bit. AG_NUMERICS_PORTABLE: every op that runs gives the same bits for the
 * same inputs on every backend and device, whatever the thread count,
 * work-group or warp size: elementwise math from one library of correctly
 * rounded + - * (anygrad/pmath.h), no contraction, subnormals preserved,
 * reductions with a fixed block size and tree, matmul and conv with a fixed
 * order of the inner dimension, no vendor library. An op or dtype a backend
 * has no portable kernel for is refused (AG_ERR_UNSUPPORTED naming it),
 * never run in the default way; a device that cannot honour the mode at all
 * refuses every launch with the reason (ag_device_numerics_check).
 * Process-wide, like deterministic mode: the initial value comes from
 * AG_NUMERICS=default|portable (read once, at the first launch or query; any
 * other value stops the first device open); setting it is thread-safe and
 * affects kernels launched afterwards. Switch it between steps, not while
 * another thread launches the ops of one computation. */
typedef enum ag_numerics { AG_NUMERICS_DEFAULT = 0, AG_NUMERICS_PORTABLE = 1 } ag_numerics;
/* Errors: AG_ERR_INVALID for a value outside the enum (the mode is kept). */
AG_API ag_status ag_set_numerics(ag_numerics mode);
AG_API ag_numerics ag_get_numerics(void);
/* "default", "portable"; "?" for a value outside the enum. Static storage. */
AG_API const char *ag_numerics_name(ag_numerics mode);
/* "default" or "portable" into *out. Errors: AG_ERR_INVALID (NULL, or
 * another word; *out untouched). */
AG_API ag_status ag_numerics_parse(const char *s, ag_numerics *out);
/* AG_OK when device d runs kernels in mode (every device runs the default);
 * AG_ERR_UNSUPPORTED with the reason when it cannot (a backend without the
 * portable kernels, a device whose arithmetic the mode cannot rely on), or
 * the open's error. Does not change the mode. */
AG_API ag_status ag_device_numerics_check(ag_device d, ag_numerics mode);

#ifdef __cplusplus
}
#endif
#endif
