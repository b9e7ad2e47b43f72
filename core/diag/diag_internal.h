/* Internal interface between the staging pipeline and the diagnostics:
 * the trace recorder (trace.c), sync-site resolution (sync.c), profiler hooks
 * the loader calls (profiler.c). Never installed. */
#ifndef AG_CORE_DIAG_INTERNAL_H
#define AG_CORE_DIAG_INTERNAL_H

#include <stdio.h>

#include "anygrad/diag.h"
#include "runtime/devstate.h"
#include "runtime/tracerec.h"

/* The recorder (ag__now_ns, ag__trace_*) is runtime/tracerec.h. */
/* Write every recorded event since `since_ns` (and allocator events of ds from
 * its snapshot ring) as Chrome trace JSON; with p, the profiler's report data
 * as otherData.anygrad_report. */
AG_HIDDEN ag_status ag__trace_write(const char *path, ag_devstate *ds, uint64_t since_ns, ag_profiler *p);

/* ---- run report (profiler.c, report.c) ---- */
/* The profiler's report data as one JSON object (format "anygrad-report"):
 * device properties, info, per-step statistics, verdicts, scalars, sync
 * sites and allocator snapshots at the peak and now. Errors: AG_ERR_IO. */
AG_HIDDEN ag_status ag__profiler_json(ag_profiler *p, FILE *f);

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
