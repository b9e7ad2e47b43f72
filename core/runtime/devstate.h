/* Per-device state, streams and events as the core sees them, the
 * registry that creates them, and the host syncs that every blocking call
 * goes through. Never installed. */
#ifndef AG_CORE_DEVSTATE_H
#define AG_CORE_DEVSTATE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "anygrad/backend.h"
#include "anygrad/device.h"
#include "anygrad/status.h"

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
  /* portable numerics on this device (numerics.c): 0 not asked yet, 1
   * honoured, -1 refused with portable_reason */
  _Atomic int portable_state;
  char portable_reason[256];
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

/* ---- host syncs (sync.c): every host<->device synchronization goes through
 * here so sync-debug mode and counters see it. `what` names the public call. */
AG_HIDDEN ag_status ag__sync_stream(ag_stream *s, const char *what);
/* The refusal of sync-debug error mode, checked before a device->host copy
 * is queued: a copy queued into caller memory must not be left in flight
 * by a sync that is then refused (it would land in a dead stack frame or a
 * freed buffer). AG_OK when the sync would be allowed. */
AG_HIDDEN ag_status ag__sync_refused(ag_devstate *ds, const char *what);
AG_HIDDEN ag_status ag__sync_device(ag_devstate *ds, const char *what);
/* "main+0x4c" for a return address (dladdr; "unknown site" when it fails). */
AG_HIDDEN void ag__describe_address(const void *addr, char *out, size_t len);
/* The file:line the calling thread marked for its current public call
 * (AG_SYNC_SITES macros), or NULL. */
AG_HIDDEN const char *ag__site_marked(int *out_line);
AG_HIDDEN ag_status ag__sync_event(ag_event *e, const char *what);
/* AG_OK unless AG_SYNC_DEBUG is set to a value that is not a mode
 * (AG_ERR_INVALID naming it): checked where a device opens, as a bad
 * AG_ALLOC_CONF is, so a misspelt mode is never silently "off". */
AG_HIDDEN ag_status ag__sync_debug_env_check(void);
/* Resolve sync sites while > 0 (profilers hold a count). */
AG_HIDDEN void ag__sync_sites_track(int delta);
/* Host time spent blocked in syncs since start, counted while sites are
 * tracked or sync-debug mode is on. */
AG_HIDDEN uint64_t ag__sync_wait_ns(void);
/* Every AG_* variable of the core (runtime/env.c), checked when a device
 * opens: AG_ERR_INVALID naming the first bad one. */
AG_HIDDEN ag_status ag__env_check(void);
/* AG_NUMERICS holds default or portable (numerics.c). */
AG_HIDDEN ag_status ag__env_numerics_check(void);
/* Portable numerics on ds: AG_OK once its backend's portable_check passed;
 * AG_ERR_UNSUPPORTED with the reason otherwise (asked once per device). */
AG_HIDDEN ag_status ag__portable_open(ag_devstate *ds);
/* supports() in the current numerics mode: the backend's supports_portable
 * in portable mode (false without one), supports otherwise. The core asks
 * this, never be->supports directly, so composite fallbacks (attention,
 * batch norm) are taken where a backend has no portable kernel. */
static inline bool ag__supports(const ag_devstate *ds, ag_kop op, int sub, ag_dtype dt) {
  if (ag_get_numerics() == AG_NUMERICS_PORTABLE)
    return ds->be->supports_portable && ds->be->supports_portable(ds->ord, op, sub, dt);
  return ds->be->supports(ds->ord, op, sub, dt);
}
/* ---- calls up (env.c): the layers above runtime/ reach it only through
 * these, which they fill from a constructor of the file that implements them
 * (so only when that file is linked in, and before any device opens). ---- */
/* An AG_* variable that a higher layer reads, checked with the core's own when
 * a device opens: AG_OK, or AG_ERR_INVALID with the error set naming it. */
typedef ag_status (*ag_env_check_fn)(void);
/* Adds fn to the checks ag__env_check runs, after the core's own, in the
 * order added. Only from a constructor: not thread-safe. */
AG_HIDDEN void ag__env_check_add(ag_env_check_fn fn);
/* What a device state asks of memory/ (alloc.c). Without it (no allocator
 * linked in) a device opens with no allocator: nothing can then allocate. */
typedef struct ag_memory_hooks {
  /* The caching allocator of a new device state; NULL with the error set. */
  struct ag_allocator *(*allocator_create)(ag_devstate *ds);
  /* s is being destroyed (after its last sync): retire its cached blocks. */
  void (*stream_destroyed)(ag_devstate *ds, ag_stream *s);
} ag_memory_hooks;
AG_HIDDEN extern ag_memory_hooks ag__memory_hooks;

/* Non-blocking: turn a kernel error word left on s into a status. */
AG_HIDDEN ag_status ag__kernel_error_check(ag_stream *s);

#endif
