/* Diagnostics: host-synchronization accounting and sync-debug mode, call
 * sites of syncs, the step profiler (input/sync/memory verdicts, leak
 * detector) and the Chrome trace export. See docs/diagnostics.md. */
#ifndef ANYGRAD_DIAG_H
#define ANYGRAD_DIAG_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "anygrad/device.h"
#include "anygrad/status.h"
#include "anygrad/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ag_sync_debug {
  AG_SYNC_DEBUG_OFF = 0,
  AG_SYNC_DEBUG_WARN = 1,  /* print each syncing call once to stderr */
  AG_SYNC_DEBUG_ERROR = 2, /* refuse the sync: the call returns AG_ERR_SYNC */
} ag_sync_debug;

/* Process-wide mode; initial value from AG_SYNC_DEBUG=off|warn|error (or
 * 0|1|2). Any other value makes opening a device fail (AG_ERR_INVALID). */
AG_API void ag_set_sync_debug(ag_sync_debug mode);
AG_API ag_sync_debug ag_get_sync_debug(void);

/* Host<->device synchronizations performed by anygrad in this process
 * (item, to-host copies, explicit synchronizes, allocator retries). */
AG_API uint64_t ag_sync_count(void);

/* ---- sync call sites ----
 * Every sync is attributed to a call site: the file:line marked by the
 * AG_SYNC_SITES macros below when the caller compiled with them, otherwise
 * the first stack frame outside libanygrad ("train_step+0x4c" or
 * "mlp_words+0x1f3c", an offset addr2line resolves). Sites are resolved only
 * while sync-debug mode is on or a profiler is live, so the default path
 * costs nothing. Warn mode prints each (call, site) pair once. */

typedef struct ag_sync_site_info {
  const char *site;  /* "train.c:88 (train_step)"; borrowed, lives until exit */
  const char *call;  /* the syncing public call ("ag_item") */
  uint64_t count;    /* syncs seen at this site while sites were resolved */
} ag_sync_site_info;

/* Copy up to max known sites (most frequent first) into out; returns how many
 * were written. Thread-safe. */
AG_API int ag_sync_sites(ag_sync_site_info *out, int max);

/* Used by the macros below: mark the calling thread's next sync with a source
 * position (file and func must be string literals or otherwise outlive the
 * process), and clear the mark after the call, passing its result through.
 * They never fail and set no error: the status a done_s gets is the status it
 * returns. */
AG_API void ag_sync_site_mark(const char *file, int line, const char *func);
AG_API double ag_sync_site_done_d(double v);
AG_API ag_status ag_sync_site_done_s(ag_status s);

/* Compile user code with -DAG_SYNC_SITES (before including anygrad) to have
 * warn mode and the profiler name the exact file:line of each syncing call,
 * and released-tensor errors the file:line of the release. */
#ifdef AG_SYNC_SITES
#define AG__SITE() ag_sync_site_mark(__FILE__, __LINE__, __func__)
#define ag_item(t) (AG__SITE(), ag_sync_site_done_d((ag_item)(t)))
#define ag_item_scalar(t, out) (AG__SITE(), ag_sync_site_done_s((ag_item_scalar)((t), (out))))
#define ag_to_host(t, out, n) (AG__SITE(), ag_sync_site_done_s((ag_to_host)((t), (out), (n))))
#define ag_stream_synchronize(s) (AG__SITE(), ag_sync_site_done_s((ag_stream_synchronize)(s)))
#define ag_device_synchronize(d) (AG__SITE(), ag_sync_site_done_s((ag_device_synchronize)(d)))
#define ag_event_synchronize(e) (AG__SITE(), ag_sync_site_done_s((ag_event_synchronize)(e)))
/* Releases record their site too: a call given a released tensor then names
 * the file:line of the ag_scope_end or ag_tensor_release that released it. */
#define ag_scope_end() (AG__SITE(), ag_sync_site_done_s((ag_scope_end)()))
#define ag_tensor_release(t) ((void)(AG__SITE(), (ag_tensor_release)(t), ag_sync_site_done_s(AG_OK)))
/* Mode regions record their site too: ag_scope_end names the file:line of
 * a region left open inside the scope. */
#include "anygrad/amp.h"
#include "anygrad/autograd.h"
#define ag_no_grad_begin() ((void)(AG__SITE(), (ag_no_grad_begin)(), ag_sync_site_done_s(AG_OK)))
#define ag_inference_mode_begin() ((void)(AG__SITE(), (ag_inference_mode_begin)(), ag_sync_site_done_s(AG_OK)))
#define ag_enable_grad_begin() ((void)(AG__SITE(), (ag_enable_grad_begin)(), ag_sync_site_done_s(AG_OK)))
#define ag_autocast_begin(dt) (AG__SITE(), ag_sync_site_done_s((ag_autocast_begin)(dt)))
#endif

/* ---- trace ranges ----
 * Named host ranges for the Chrome trace (nestable per thread, depth 32).
 * `name` is borrowed and must outlive the trace (a string literal). No-ops
 * while no profiler records a trace. */
AG_API void ag_trace_range_push(const char *name);
AG_API void ag_trace_range_pop(void);

/* ---- step profiler ----
 * Marks step boundaries on one device and measures, per step: host wall time,
 * host time blocked waiting for input (ag_loader_next), host->device copy
 * time and device busy time (timing events, read without blocking), host
 * syncs and the change of allocated bytes. Every `window` steps it forms a
 * verdict; a leak detector watches allocated bytes at step ends. One thread
 * drives a profiler (step_begin/step_end/report); loaders attached to it
 * report from their own threads. */

typedef struct ag_profiler ag_profiler;

typedef struct ag_profiler_config {
  int window;        /* steps per verdict window; 0: 20 */
  int leak_steps;    /* K: allocated bytes growing over K consecutive steps is
                        a leak; 0: 5 */
  bool trace;        /* record a Chrome trace (host ranges, stream ranges,
                        copies, syncs, allocator events) */
  ag_stream *stream; /* compute stream to time; NULL: the device's current
                        stream of the creating thread */
} ag_profiler_config;

typedef struct ag_step_stats {
  int64_t step;           /* 0-based */
  double wall_ms;         /* host time from step_begin to step_end */
  double data_wait_ms;    /* host time blocked in ag_loader_next */
  double copy_ms;         /* host->device copy time of the step's batches on the
                             copy stream, as far as resolved */
  double device_ms;       /* device busy time of the step, -1 unknown yet */
  double device_period_ms;/* device time since the previous step ended, -1 unknown */
  uint64_t syncs;         /* host syncs during the step */
  double sync_wait_ms;    /* host time blocked in those syncs */
  int64_t allocated_bytes;/* device allocated bytes at step end */
  int64_t allocated_delta;/* change since the previous step end (first: since begin) */
} ag_step_stats;

typedef struct ag_profiler_verdict {
  int64_t first_step, steps; /* the window */
  double device_idle_frac;   /* idle share of the device timeline; -1 unknown */
  double sync_stall_frac;    /* share of host time with the device queue drained
                                by a sync (host outside syncs and data waits),
                                when syncs happen; an upper bound of the device
                                idle time the syncs cause */
  double data_wait_frac;     /* share of host wall time blocked on input */
  double syncs_per_step;
  double growth_bytes_per_step;
  bool input_bound, sync_bound, memory_growing, leak;
  char text[1024];           /* one line per finding, "compute-bound ..." if none;
                                lines separated by '\n', no trailing newline */
} ag_profiler_verdict;

/* A profiler for device d. cfg NULL: defaults. Owned by the caller:
 * ag_profiler_destroy. May perform one counted host sync when the stream is
 * busy (to anchor device times to the host clock). Errors: device errors,
 * AG_ERR_OOM. */
AG_API ag_profiler *ag_profiler_create(ag_device d, const ag_profiler_config *cfg);
/* NULL ignored. Does not synchronize; events still in flight are dropped. */
AG_API void ag_profiler_destroy(ag_profiler *p);

/* Step boundaries. Never block the host on the device. A step in which an
 * attached loader's ag_loader_next found the end of the data (info.end)
 * before handing out any batch ran no step: step_end closes it without
 * counting it, so the loop
 *   for (;;) { step_begin; next; if (info.end) { step_end; break; } ...; step_end; }
 * over 312 batches records 312 steps. Errors: AG_ERR_STATE for begin
 * inside a step or end outside one, AG_ERR_INVALID (NULL p). */
AG_API ag_status ag_profiler_step_begin(ag_profiler *p);
AG_API ag_status ag_profiler_step_end(ag_profiler *p);

/* Statistics of a finished step (step < 0: the last one). Device fields may
 * still be -1 when the device has not reached that step. Errors:
 * AG_ERR_INDEX for a step not finished or no longer kept (the last 4096 are). */
AG_API ag_status ag_profiler_step_stats(ag_profiler *p, int64_t step, ag_step_stats *out);

/* Verdict over the last window of finished steps (fewer if fewer ran).
 * Errors: AG_ERR_STATE when no step has finished. */
AG_API ag_status ag_profiler_verdict_get(ag_profiler *p, ag_profiler_verdict *out);

/* True once the leak detector fired; out_text (optional, borrowed until the
 * next step_end) names the growth and the categories that grew. */
AG_API bool ag_profiler_leak(ag_profiler *p, const char **out_text);

/* Write a summary to f: step-time table, one verdict per window, leak
 * reports, top sync sites. Errors: AG_ERR_INVALID, AG_ERR_STATE (no steps). */
AG_API ag_status ag_profiler_report(ag_profiler *p, FILE *f);

/* Write the Chrome trace JSON (chrome://tracing, Perfetto) recorded since the
 * profiler was created with cfg.trace. Device ranges not yet complete are
 * omitted (no sync is made). Errors: AG_ERR_STATE when tracing is off,
 * AG_ERR_IO. */
AG_API ag_status ag_profiler_write_trace(ag_profiler *p, const char *path);

#ifdef __cplusplus
}
#endif
#endif
