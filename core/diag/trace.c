/* The trace recorder behind ag_profiler_write_trace: a process-wide event
 * list (host ranges per thread, stream ranges, counters) guarded by one mutex,
 * recording only while a tracing profiler lives, and its Chrome trace JSON
 * writer, which also replays the allocator's event ring. */
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

uint64_t ag__now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

typedef enum { EV_RANGE, EV_COUNTER } ev_kind;

typedef struct tev {
  uint64_t t0, t1;
  const char *cat, *name, *arg_name;
  int64_t arg;
  uint32_t lane;   /* host thread lane, or stream id for device events */
  uint8_t kind;
  uint8_t device;  /* 1: lane is a stream id */
} tev;

/* A bound on memory: a long run keeps its first events and counts the rest. */
#define MAX_EVENTS (1u << 20)
#define MAX_LANES 256

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static atomic_int g_users;
static tev *g_ev;
static size_t g_n, g_cap, g_dropped;
static const char *g_lane_name[MAX_LANES];
static char g_stream_name[MAX_LANES][48];
static atomic_uint g_next_lane;
static _Thread_local uint32_t tl_lane;

void ag__trace_acquire(void) { atomic_fetch_add(&g_users, 1); }
void ag__trace_release(void) {
  if (atomic_fetch_sub(&g_users, 1) == 1) {
    pthread_mutex_lock(&g_mu);
    if (atomic_load(&g_users) == 0) {
      free(g_ev);
      g_ev = NULL;
      g_n = g_cap = g_dropped = 0;
    }
    pthread_mutex_unlock(&g_mu);
  }
}
bool ag__trace_on(void) { return atomic_load_explicit(&g_users, memory_order_relaxed) > 0; }

static uint32_t my_lane(void) {
  if (!tl_lane) tl_lane = atomic_fetch_add(&g_next_lane, 1) + 1;
  return tl_lane;
}

static void push(const tev *e) {
  pthread_mutex_lock(&g_mu);
  if (g_n == g_cap) {
    size_t nc = g_cap ? g_cap * 2 : 4096;
    tev *nv = nc <= MAX_EVENTS ? realloc(g_ev, nc * sizeof *nv) : NULL;
    if (!nv) {
      g_dropped++;
      pthread_mutex_unlock(&g_mu);
      return;
    }
    g_ev = nv;
    g_cap = nc;
  }
  g_ev[g_n++] = *e;
  pthread_mutex_unlock(&g_mu);
}

void ag__trace_host(const char *cat, const char *name, uint64_t t0, uint64_t t1,
                    const char *arg_name, int64_t arg) {
  if (!ag__trace_on()) return;
  tev e = {t0, t1 > t0 ? t1 : t0, cat, name, arg_name, arg, my_lane(), EV_RANGE, 0};
  push(&e);
}

void ag__trace_stream(const char *cat, const char *name, const ag_stream *s, uint64_t t0,
                      uint64_t t1, const char *arg_name, int64_t arg) {
  if (!ag__trace_on() || !s) return;
  tev e = {t0, t1 > t0 ? t1 : t0, cat, name, arg_name, arg, s->id, EV_RANGE, 1};
  push(&e);
}

void ag__trace_counter(const char *name, uint64_t t, int64_t value) {
  if (!ag__trace_on()) return;
  tev e = {t, t, "memory", name, "bytes", value, 0, EV_COUNTER, 0};
  push(&e);
}

void ag__trace_thread_name(const char *name) {
  uint32_t l = my_lane();
  if (l < MAX_LANES) {
    pthread_mutex_lock(&g_mu);
    g_lane_name[l] = name;
    pthread_mutex_unlock(&g_mu);
  }
}

void ag__trace_stream_name(const ag_stream *s, const char *name) {
  if (!s || s->id >= MAX_LANES) return;
  pthread_mutex_lock(&g_mu);
  snprintf(g_stream_name[s->id], sizeof g_stream_name[s->id], "%s", name);
  pthread_mutex_unlock(&g_mu);
}

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
  pthread_mutex_lock(&g_mu);
  for (uint32_t l = 1; l < MAX_LANES; l++)
    if (g_lane_name[l]) {
      fprintf(f, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":%u,\"args\":{\"name\":", l);
      put_str(f, g_lane_name[l]);
      fprintf(f, "}}");
    }
  for (uint32_t l = 0; l < MAX_LANES; l++)
    if (g_stream_name[l][0]) {
      fprintf(f, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":2,\"tid\":%u,\"args\":{\"name\":", l);
      put_str(f, g_stream_name[l]);
      fprintf(f, "}}");
    }
  for (size_t i = 0; i < g_n; i++) {
    const tev *e = &g_ev[i];
    if (e->t0 < base) continue;
    fprintf(f, ",\n{\"name\":");
    put_str(f, e->name);
    if (e->kind == EV_COUNTER) {
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
  size_t dropped = g_dropped;
  pthread_mutex_unlock(&g_mu);
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
