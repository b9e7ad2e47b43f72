/* The Chrome trace JSON writer behind ag_profiler_write_trace: the events of
 * the recorder (runtime/tracerec.c), and the allocator's event ring. */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "anygrad/checks.h"
#include "memory/alloc_internal.h"
#include "diag/diag_internal.h"


/* ---- user ranges ---- */

#define RANGE_DEPTH 32
static _Thread_local struct {
  const char *name;
  uint64_t t0;
} tl_range[RANGE_DEPTH];
static _Thread_local int tl_depth;

void ag_trace_range_push(const char *name) {
  if (tl_depth < RANGE_DEPTH) {
    tl_range[tl_depth].name = name ? name : "range";
    tl_range[tl_depth].t0 = ag__now_ns();
  }
  tl_depth++;
}

void ag_trace_range_pop(void) {
  if (tl_depth <= 0) return;
  tl_depth--;
  if (tl_depth < RANGE_DEPTH)
    ag__trace_host("user", tl_range[tl_depth].name, tl_range[tl_depth].t0, ag__now_ns(), NULL, 0);
}

/* ---- JSON ---- */

static void put_str(FILE *f, const char *s) {
  fputc('"', f);
  for (; s && *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\')
      fprintf(f, "\\%c", c);
    else if (c < 0x20)
      fprintf(f, "\\u%04x", c);
    else
      fputc(c, f);
  }
  fputc('"', f);
}

static double us(uint64_t t, uint64_t base) { return t >= base ? (double)(t - base) / 1e3 : 0.0; }

/* Replay the allocator's event ring from its snapshot as instant events. */
static void write_alloc_events(FILE *f, ag_devstate *ds, uint64_t base, bool *first) {
  if (!ds || !ds->alloc) return;
  char *buf = NULL;
  size_t len = 0;
  FILE *m = open_memstream(&buf, &len);
  if (!m) return;
  ag_status st = ag__alloc_snapshot(ds->alloc, m);
  fclose(m);
  if (st != AG_OK || !buf) {
    free(buf);
    return;
  }
  char *tr = strstr(buf, "\"trace\":[");
  for (char *line = tr; line; line = strchr(line + 1, '\n')) {
    uint64_t seq, t, segid;
    size_t off, size;
    unsigned sid;
    char action[32], cat[32];
    if (sscanf(line + 1, "{\"seq\":%" SCNu64 ",\"time_ns\":%" SCNu64 ",\"action\":\"%31[^\"]\",\"segment\":%" SCNu64
                         ",\"offset\":%zu,\"size\":%zu,\"stream\":%u,\"category\":\"%31[^\"]\"}",
               &seq, &t, action, &segid, &off, &size, &sid, cat) != 8)
      continue;
    if (t < base) continue;
    fprintf(f, "%s\n{\"name\":", *first ? "" : ",");
    put_str(f, action);
    fprintf(f, ",\"cat\":\"allocator\",\"ph\":\"i\",\"s\":\"t\",\"ts\":%.3f,\"pid\":3,\"tid\":%u,"
               "\"args\":{\"size\":%zu,\"segment\":%" PRIu64 ",\"offset\":%zu,\"category\":",
            us(t, base), sid, size, segid, off);
    put_str(f, cat);
    fprintf(f, "}}");
    *first = false;
  }
  free(buf);
}

ag_status ag__trace_write(const char *path, ag_devstate *ds, uint64_t base, ag_profiler *p) {
  ag_output *o = NULL;
  ag_status ost = ag_output_open(path, "trace", &o);
  if (ost != AG_OK) {
    char msg[512];
    snprintf(msg, sizeof msg, "%s", ag_last_error());
    return ag_error_set(ost, "ag_profiler_write_trace: %s", msg);
  }
  FILE *f = ag_output_file(o);
  fprintf(f, "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[");
  bool first = true;
  fprintf(f, "\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":1,\"args\":{\"name\":\"host\"}},");
  fprintf(f, "\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":2,\"args\":{\"name\":");
  put_str(f, ds ? ds->label : "device");
  fprintf(f, "}},\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":3,\"args\":{\"name\":\"allocator\"}}");
  first = false;
  ag_trace_events t = ag__trace_lock();
  for (uint32_t l = 1; l < AG_TRACE_MAX_LANES; l++)
    if (t.lane_name[l]) {
      fprintf(f, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":%u,\"args\":{\"name\":", l);
      put_str(f, t.lane_name[l]);
      fprintf(f, "}}");
    }
  for (uint32_t l = 0; l < AG_TRACE_MAX_LANES; l++)
    if (t.stream_name[l][0]) {
      fprintf(f, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":2,\"tid\":%u,\"args\":{\"name\":", l);
      put_str(f, t.stream_name[l]);
      fprintf(f, "}}");
    }
  for (size_t i = 0; i < t.n; i++) {
    const ag_trace_ev *e = &t.ev[i];
    if (e->t0 < base) continue;
    fprintf(f, ",\n{\"name\":");
    put_str(f, e->name);
    if (e->kind == AG_TRACE_EV_COUNTER) {
      fprintf(f, ",\"ph\":\"C\",\"ts\":%.3f,\"pid\":1,\"args\":{\"bytes\":%" PRId64 "}}", us(e->t0, base),
              e->arg);
      continue;
    }
    fprintf(f, ",\"cat\":");
    put_str(f, e->cat);
    fprintf(f, ",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":%d,\"tid\":%u", us(e->t0, base),
            (double)(e->t1 - e->t0) / 1e3, e->device ? 2 : 1, e->lane);
    if (e->arg_name) {
      fprintf(f, ",\"args\":{");
      put_str(f, e->arg_name);
      fprintf(f, ":%" PRId64 "}", e->arg);
    }
    fputc('}', f);
  }
  size_t dropped = t.dropped;
  ag__trace_unlock();
  write_alloc_events(f, ds, base, &first);
  fprintf(f, "\n],\"otherData\":{\"dropped_events\":%zu", dropped);
  /* What `anygrad report` turns into the HTML run report. */
  ag_status st = AG_OK;
  if (p) {
    fprintf(f, ",\n\"anygrad_report\":");
    st = ag__profiler_json(p, f);
  }
  fprintf(f, "}}\n");
  if (st != AG_OK) {
    ag_output_abort(o);
    return st;
  }
  st = ag_output_commit(o);
  if (st != AG_OK) {
    char msg[512];
    snprintf(msg, sizeof msg, "%s", ag_last_error());
    return ag_error_set(st, "ag_profiler_write_trace: %s", msg);
  }
  return AG_OK;
}
