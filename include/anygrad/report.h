/* The run report: one self-contained HTML file (styles, script and data
 * inline; plots drawn as SVG by the file itself, no network) showing what a
 * step profiler saw: loss curves, step time split with the verdicts, memory
 * by category over time, the allocator's segments at the peak, host sync
 * sites, the run's configuration and the device. See docs/report.md. */
#ifndef ANYGRAD_REPORT_H
#define ANYGRAD_REPORT_H

#include <stdint.h>

#include "anygrad/diag.h"
#include "anygrad/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Record one point of a named scalar series ("loss", "held-out loss") at a
 * step, for the report's curves (and the trace's report data). The name is
 * copied. At most 16 series and 2^20 points per profiler. Non-finite values
 * are kept and drawn as gaps. Thread-safe. Errors: AG_ERR_INVALID (NULL
 * profiler, empty name, too many series or points), AG_ERR_OOM. */
AG_API ag_status ag_profiler_log_scalar(ag_profiler *p, const char *series, int64_t step, double value);

/* Set a configuration entry shown in the report ("batch" = "64"); setting a
 * key again replaces its value. Both strings are copied. At most 64 keys.
 * Errors: AG_ERR_INVALID (NULL or empty key, NULL value, too many keys),
 * AG_ERR_OOM. */
AG_API ag_status ag_profiler_set_info(ag_profiler *p, const char *key, const char *value);

/* Write the HTML run report of everything p has seen so far to path. Does
 * not synchronize (device times not yet known are shown as unknown). The
 * same data also goes into ag_profiler_write_trace's file (otherData), so a
 * saved trace can become a report later (ag_report_from_trace). Errors:
 * AG_ERR_INVALID, AG_ERR_STATE (no step finished), AG_ERR_IO. */
AG_API ag_status ag_report_write(ag_profiler *p, const char *path);

/* Build the report from a Chrome trace written by ag_profiler_write_trace
 * (trace_path) and, optionally, an allocator snapshot written by
 * ag_memory_snapshot_json (snapshot_path, or NULL), which then replaces the
 * trace's own snapshots. A trace without report data (written by another
 * tool) still gives step times from its "step" ranges. Errors:
 * AG_ERR_INVALID (NULL path), AG_ERR_IO (unreadable input, unwritable
 * output), AG_ERR_CORRUPT (an input that is not such a JSON file). */
AG_API ag_status ag_report_from_trace(const char *trace_path, const char *snapshot_path, const char *out_path);

#ifdef __cplusplus
}
#endif
#endif
