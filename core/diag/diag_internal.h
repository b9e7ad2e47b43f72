/* Internal interface between the staging pipeline and the diagnostics:
 * the trace recorder (trace.c), sync-site resolution (sync.c), profiler hooks
 * the loader calls (profiler.c). Never installed. */
#ifndef AG_CORE_DIAG_INTERNAL_H
#define AG_CORE_DIAG_INTERNAL_H

#include <stdio.h>

#include "anygrad/diag.h"
#include "runtime/devstate.h"

/* CLOCK_MONOTONIC in nanoseconds: the one host clock of every measurement. */
AG_HIDDEN uint64_t ag__now_ns(void);

/* ---- trace recorder (trace.c): one process-wide, mutex-guarded event list,
 * recording while at least one tracing profiler lives. Names and categories
 * are borrowed and must outlive the recorder (literals or interned). ---- */
AG_HIDDEN void ag__trace_acquire(void);
AG_HIDDEN void ag__trace_release(void);
AG_HIDDEN bool ag__trace_on(void);
/* A range on the calling thread's lane. */
AG_HIDDEN void ag__trace_host(const char *cat, const char *name, uint64_t t0, uint64_t t1,
                              const char *arg_name, int64_t arg);
/* A range on a stream's lane (device process in the trace). */
AG_HIDDEN void ag__trace_stream(const char *cat, const char *name, const ag_stream *s,
                                uint64_t t0, uint64_t t1, const char *arg_name, int64_t arg);
/* A counter sample ("allocated bytes"). */
AG_HIDDEN void ag__trace_counter(const char *name, uint64_t t, int64_t value);
/* Name the calling thread's lane (borrowed). */
AG_HIDDEN void ag__trace_thread_name(const char *name);
/* Name a stream's lane (copied). */
AG_HIDDEN void ag__trace_stream_name(const ag_stream *s, const char *name);
/* Write every recorded event since `since_ns` (and allocator events of ds from
 * its snapshot ring) as Chrome trace JSON; with p, the profiler's report data
 * as otherData.anygrad_report. */
AG_HIDDEN ag_status ag__trace_write(const char *path, ag_devstate *ds, uint64_t since_ns, ag_profiler *p);

/* ---- run report (profiler.c, report.c) ---- */
/* The profiler's report data as one JSON object (format "anygrad-report"):
 * device properties, info, per-step statistics, verdicts, scalars, sync
 * sites and allocator snapshots at the peak and now. Errors: AG_ERR_IO. */
AG_HIDDEN ag_status ag__profiler_json(ag_profiler *p, FILE *f);

/* ---- sync sites (sync.c) ---- */
/* Resolve sites while > 0 (profilers hold a count). */
AG_HIDDEN void ag__sync_sites_track(int delta);
/* Host time spent blocked in syncs since start, counted while sites are
 * tracked or sync-debug mode is on. */
AG_HIDDEN uint64_t ag__sync_wait_ns(void);

/* ---- profiler hooks (profiler.c), callable from any thread ---- */
AG_HIDDEN void ag__prof_data_wait(ag_profiler *p, uint64_t ns);
/* ag_loader_next found the end of the data: the open step, if any, ran no
 * step and is not counted when it ends. */
AG_HIDDEN void ag__prof_data_end(ag_profiler *p);
/* Called on the compute stream's thread after the stream waits for a batch:
 * the device part of the step starts no earlier than this point. */
AG_HIDDEN void ag__prof_data_ready(ag_profiler *p, ag_stream *compute);
/* A finished copy: the profiler takes ownership of both timing events. */
AG_HIDDEN void ag__prof_copy(ag_profiler *p, ag_stream *copy, ag_event *start, ag_event *end,
                             size_t bytes);

#endif
