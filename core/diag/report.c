/* The HTML run report: the template of core/diag/report.html (embedded through
 * the generated core/diag/report_html.inc) with the profiler's report data, or a
 * saved trace and snapshot, inlined as JSON. The page draws itself. */
#define _GNU_SOURCE /* open_memstream */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "anygrad/checks.h"
#include "anygrad/report.h"
#include "diag/diag_internal.h"
#include "report_html.inc"

/* JSON inside <script>: every '<' (only ever inside JSON strings) becomes
 * \u003c, so no "</script>" or "<!--" in the data can end the element. */
static void put_json_inline(FILE *f, const char *s, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (s[i] == '<')
      fputs("\\u003c", f);
    else
      fputc(s[i], f);
  }
}

static ag_status write_page(const char *fn, const char *path, const char *json_a, size_t na, const char *mid,
                            const char *json_b, size_t nb, const char *end) {
  /* Atomic: a failed write (a full disk) leaves the previous page intact. */
  ag_output *o = NULL;
  ag_status st = ag_output_open(path, "report", &o);
  if (st != AG_OK) {
    char msg[512];
    snprintf(msg, sizeof msg, "%s", ag_last_error());
    return ag_error_set(st, "%s: %s", fn, msg);
  }
  FILE *f = ag_output_file(o);
  fputs(k_report_head, f);
  if (mid) fputs(mid, f);
  put_json_inline(f, json_a, na);
  if (json_b) {
    fputs(",\"snapshot\":", f);
    put_json_inline(f, json_b, nb);
  }
  if (end) fputs(end, f);
  fputs(k_report_tail, f);
  st = ag_output_commit(o);
  if (st != AG_OK) {
    char msg[512];
    snprintf(msg, sizeof msg, "%s", ag_last_error());
    return ag_error_set(st, "%s: %s", fn, msg);
  }
  return AG_OK;
}

ag_status ag_report_write(ag_profiler *p, const char *path) {
  if (!p || !path) return ag_error_set(AG_ERR_INVALID, "ag_report_write: NULL argument");
  ag_step_stats last;
  if (ag_profiler_step_stats(p, -1, &last) != AG_OK)
    return ag_error_set(AG_ERR_STATE, "ag_report_write: no step has finished");
  char *buf = NULL;
  size_t len = 0;
  FILE *m = open_memstream(&buf, &len);
  if (!m) return ag_error_set(AG_ERR_OOM, "ag_report_write: out of host memory");
  ag_status st = ag__profiler_json(p, m);
  if (fclose(m) != 0 && st == AG_OK) st = ag_error_set(AG_ERR_OOM, "ag_report_write: out of host memory");
  if (st == AG_OK) st = write_page("ag_report_write", path, buf, len, NULL, NULL, 0, NULL);
  free(buf);
  return st;
}

/* Inputs of a report: traces of long runs are large, but not without end. */
#define REPORT_MAX_INPUT ((uint64_t)1 << 30)

/* The whole regular file, NUL-terminated (owned by the caller), or NULL
 * with the error set (a FIFO or device is refused, never read). */
static char *slurp(const char *fn, const char *what, const char *path, size_t *out_len) {
  char *buf = NULL;
  ag_status st = ag_file_read_all(path, what, REPORT_MAX_INPUT, &buf, out_len);
  if (st != AG_OK) {
    char msg[512];
    snprintf(msg, sizeof msg, "%s", ag_last_error());
    ag_error_set(st, "%s: %s", fn, msg);
    return NULL;
  }
  return buf;
}

/* The shape of a JSON object whose top level has `key` (a cheap check: the
 * page parses it for real and says so if it is broken). */
static bool looks_like(const char *s, size_t n, const char *key) {
  size_t i = 0;
  if (n >= 3 && !memcmp(s, "\xef\xbb\xbf", 3)) i = 3;
  while (i < n && (s[i] == ' ' || s[i] == '\n' || s[i] == '\r' || s[i] == '\t')) i++;
  if (i == n || s[i] != '{' || memchr(s, 0, n)) return false;
  size_t j = n;
  while (j > i && (s[j - 1] == ' ' || s[j - 1] == '\n' || s[j - 1] == '\r' || s[j - 1] == '\t')) j--;
  return j > i && s[j - 1] == '}' && strstr(s, key) != NULL;
}

ag_status ag_report_from_trace(const char *trace_path, const char *snapshot_path, const char *out_path) {
  const char *fn = "ag_report_from_trace";
  if (!trace_path || !out_path) return ag_error_set(AG_ERR_INVALID, "%s: NULL path", fn);
  if (ag_file_same(trace_path, out_path) || (snapshot_path && ag_file_same(snapshot_path, out_path)))
    return ag_error_set(AG_ERR_INVALID, "%s: the output '%s' is the input '%s'; refusing to overwrite it", fn,
                        out_path, ag_file_same(trace_path, out_path) ? trace_path : snapshot_path);
  size_t nt = 0, ns = 0;
  char *tr = slurp(fn, "trace", trace_path, &nt);
  if (!tr) return ag_last_status();
  ag_status st = AG_OK;
  if (!looks_like(tr, nt, "\"traceEvents\""))
    st = ag_error_set(AG_ERR_CORRUPT, "%s: '%s' is not a Chrome trace JSON object (no traceEvents)", fn, trace_path);
  char *sn = NULL;
  if (st == AG_OK && snapshot_path) {
    sn = slurp(fn, "allocator snapshot", snapshot_path, &ns);
    if (!sn)
      st = ag_last_status();
    else if (!looks_like(sn, ns, "\"segments\""))
      st = ag_error_set(AG_ERR_CORRUPT, "%s: '%s' is not an allocator snapshot (ag_memory_snapshot_json)", fn,
                        snapshot_path);
  }
  if (st == AG_OK) st = write_page(fn, out_path, tr, nt, "{\"trace\":", sn, ns, "}");
  free(tr);
  free(sn);
  return st;
}
