/* The step profiler: per-step host, input, copy, device, sync and memory
 * measurements (device times from timing events read without blocking), a
 * verdict per window naming the bottleneck, and the leak detector. */
#define _GNU_SOURCE /* open_memstream */
#include <inttypes.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "memory/alloc_internal.h"
#include "anygrad/autograd.h"
#include "anygrad/report.h"
#include "diag/diag_internal.h"
#include "runtime/devstate.h"
#include "tensor/tensor_internal.h"

#define KEEP 4096     /* step records kept (a ring) */
#define MAX_PEND 1024 /* unresolved event pairs; beyond, timings are dropped */
#define TOP_SITES 64
/* input-bound needs at least this much data wait per step (ms) */
#define AG_PROF_MIN_DATA_WAIT_MS 0.5

typedef struct rec {
  ag_step_stats st;
  int64_t cat[AG_MEM_CATEGORY_COUNT]; /* category bytes at step end */
  int64_t nodes, tensors;             /* live autograd nodes / tensors at step end */
  int64_t reserved, peak;             /* reserved bytes at step end; allocated peak so far */
  uint64_t end_ns;                    /* host clock at step end */
  uint64_t dev_end_ns;                /* device time the step's work ended; 0 unknown */
} rec;

typedef enum { P_STEP, P_COPY } pkind;

typedef struct pend {
  pkind kind;
  int64_t step;
  ag_event *a, *b;
  const ag_stream *stream;
  size_t bytes;
} pend;

typedef struct site_count {
  const char *text, *call;
  uint64_t count;
} site_count;

#define MAX_SERIES 16
#define MAX_INFO 64
#define MAX_POINTS (1 << 20)

typedef struct scalar_pt {
  int series;
  int64_t step;
  double value;
} scalar_pt;

typedef struct window_rec {
  int64_t first;
  const char *top_site, *top_call;
  uint64_t top_count;
} window_rec;

struct ag_profiler {
  ag_devstate *ds;
  ag_stream *stream;
  int window, leak_k;
  bool trace;
  uint64_t created_ns;
  ag_event *anchor;
  uint64_t anchor_ns;
  /* the step in progress (driving thread) */
  bool in_step;
  bool step_void; /* the open step only found the end of the data */
  atomic_int batches_in_step; /* batches an attached loader handed out in the open step */
  int64_t step; /* index of the next step */
  uint64_t t_begin, syncs0, wait0;
  int64_t alloc0;
  ag_event *ev_begin, *ev_ready;
  atomic_uint_fast64_t data_wait_ns;
  /* shared with hooks on other threads */
  pthread_mutex_t mu;
  pend pend[MAX_PEND];
  int n_pend;
  ag_event *spare[64];
  int n_spare;
  rec *recs; /* KEEP entries */
  int64_t n_done;
  /* sync sites at the last window boundary */
  site_count sites0[TOP_SITES];
  int n_sites0;
  window_rec *wins;
  int64_t n_wins, cap_wins;
  /* leak detector */
  int streak;
  rec streak_base;
  bool leak;
  int64_t leak_step;
  char leak_text[640];
  /* report data (ag_profiler_log_scalar, ag_profiler_set_info) */
  char *series[MAX_SERIES];
  int n_series;
  scalar_pt *pts;
  int64_t n_pts, cap_pts;
  char *info_k[MAX_INFO], *info_v[MAX_INFO];
  int n_info;
  /* the allocator's snapshot at the allocated peak (the segments a report
   * shows), taken by the allocator inside the allocation that reached it
   * (ag__alloc_peak_capture); the step it was taken in, or after (between
   * steps: snap_peak_in_step false; -1: before the first), and the
   * allocated bytes then */
  bool pk_on, snap_peak_in_step;
  uint64_t snap_seen;
  char *snap_peak;
  int64_t snap_peak_step, snap_peak_bytes;
};

/* ---- events ---- */

static ag_event *ev_get(ag_profiler *p) {
  if (p->n_spare) return p->spare[--p->n_spare];
  return ag_event_create(p->ds->dev, true);
}

static void ev_put(ag_profiler *p, ag_event *e) {
  if (!e) return;
  if (p->n_spare < 64)
    p->spare[p->n_spare++] = e;
  else
    ag_event_destroy(e);
}

static bool dev_time(ag_profiler *p, ag_event *e, uint64_t *out_ns) {
  float ms;
  if (ag_event_elapsed_ms(p->anchor, e, &ms) != AG_OK) {
    ag_error_clear();
    return false;
  }
  *out_ns = p->anchor_ns + (uint64_t)llround((double)ms * 1e6 > 0 ? (double)ms * 1e6 : 0);
  return true;
}

static rec *rec_of(ag_profiler *p, int64_t step) {
  int64_t limit = p->in_step ? p->step + 1 : p->n_done; /* the open step too */
  if (step < 0 || step >= limit || step <= limit - KEEP) return NULL;
  return &p->recs[step % KEEP];
}

/* Resolve finished event pairs without blocking. p->mu held. */
static void resolve(ag_profiler *p) {
  int w = 0;
  for (int i = 0; i < p->n_pend; i++) {
    pend *q = &p->pend[i];
    if (!ag_event_query(q->a) || !ag_event_query(q->b)) {
      p->pend[w++] = *q;
      continue;
    }
    float ms = 0;
    bool ok = ag_event_elapsed_ms(q->a, q->b, &ms) == AG_OK;
    if (!ok) ag_error_clear();
    uint64_t t0 = 0, t1 = 0;
    bool abs_ok = dev_time(p, q->a, &t0) && dev_time(p, q->b, &t1);
    rec *r = rec_of(p, q->step);
    if (q->kind == P_STEP) {
      if (r && ok) {
        r->st.device_ms = ms;
        if (abs_ok) r->dev_end_ns = t1;
        rec *prev = rec_of(p, q->step - 1);
        if (prev && prev->dev_end_ns && r->dev_end_ns)
          r->st.device_period_ms = (double)(r->dev_end_ns - prev->dev_end_ns) / 1e6;
        rec *next = rec_of(p, q->step + 1);
        if (next && next->dev_end_ns && r->dev_end_ns)
          next->st.device_period_ms = (double)(next->dev_end_ns - r->dev_end_ns) / 1e6;
      }
      if (abs_ok) ag__trace_stream("device", "step", q->stream, t0, t1, "step", q->step);
    } else {
      if (r && ok) {
        r->st.copy_ms += ms;
      }
      if (abs_ok) ag__trace_stream("copy", "H2D copy", q->stream, t0, t1, "bytes", (int64_t)q->bytes);
    }
    ev_put(p, q->a);
    ev_put(p, q->b);
  }
  p->n_pend = w;
}

static void add_pend(ag_profiler *p, pkind kind, int64_t step, ag_event *a, ag_event *b,
                     const ag_stream *s, size_t bytes) {
  if (p->n_pend == MAX_PEND) resolve(p);
  if (p->n_pend == MAX_PEND) { /* the host is far ahead: drop this timing */
    ev_put(p, a);
    ev_put(p, b);
    return;
  }
  p->pend[p->n_pend++] = (pend){kind, step, a, b, s, bytes};
}

/* ---- hooks from loaders ---- */

void ag__prof_data_wait(ag_profiler *p, uint64_t ns) {
  if (!p) return;
  atomic_fetch_add(&p->data_wait_ns, ns);
  atomic_fetch_add(&p->batches_in_step, 1);
}

void ag__prof_data_end(ag_profiler *p) {
  if (!p) return;
  pthread_mutex_lock(&p->mu);
  /* A step that got a batch before reaching the end ran (a loop that
   * fetches the next batch at the end of its step). */
  if (p->in_step && atomic_load(&p->batches_in_step) == 0) p->step_void = true;
  pthread_mutex_unlock(&p->mu);
}

void ag__prof_data_ready(ag_profiler *p, ag_stream *compute) {
  if (!p || compute != p->stream) return;
  pthread_mutex_lock(&p->mu);
  if (p->in_step && !p->ev_ready) {
    p->ev_ready = ev_get(p);
    if (p->ev_ready && ag_event_record(p->ev_ready, compute) != AG_OK) {
      ag_event_destroy(p->ev_ready);
      p->ev_ready = NULL;
    }
  }
  pthread_mutex_unlock(&p->mu);
}

void ag__prof_copy(ag_profiler *p, ag_stream *copy, ag_event *start, ag_event *end, size_t bytes) {
  if (!p) {
    ag_event_destroy(start);
    ag_event_destroy(end);
    return;
  }
  pthread_mutex_lock(&p->mu);
  /* Attributed to the step that consumes the batch (the one open now). */
  int64_t step = p->in_step ? p->step : p->step - 1;
  add_pend(p, P_COPY, step, start, end, copy, bytes);
  pthread_mutex_unlock(&p->mu);
}

/* ---- sync sites ---- */

static int read_sites(site_count *out) {
  ag_sync_site_info info[TOP_SITES];
  int n = ag_sync_sites(info, TOP_SITES);
  for (int i = 0; i < n; i++) out[i] = (site_count){info[i].site, info[i].call, info[i].count};
  return n;
}

/* The site whose count grew most since the last boundary. */
static void top_site_since(ag_profiler *p, window_rec *w) {
  site_count now[TOP_SITES];
  int n = read_sites(now);
  w->top_site = w->top_call = NULL;
  w->top_count = 0;
  for (int i = 0; i < n; i++) {
    uint64_t before = 0;
    for (int j = 0; j < p->n_sites0; j++)
      if (p->sites0[j].text == now[i].text && p->sites0[j].call == now[i].call) before = p->sites0[j].count;
    if (now[i].count - before > w->top_count) {
      w->top_count = now[i].count - before;
      w->top_site = now[i].text;
      w->top_call = now[i].call;
    }
  }
}

/* ---- lifetime ---- */

ag_profiler *ag_profiler_create(ag_device d, const ag_profiler_config *cfg) {
  ag_devstate *ds = ag__devstate(d);
  if (!ds) return NULL;
  ag_profiler_config c = cfg ? *cfg : (ag_profiler_config){0};
  if (c.window < 0 || c.leak_steps < 0) {
    ag_error_set(AG_ERR_INVALID, "ag_profiler_create: window and leak_steps must be >= 0");
    return NULL;
  }
  if (c.stream && c.stream->ds != ds) {
    ag_error_set(AG_ERR_DEVICE, "ag_profiler_create: stream of %s for a profiler of %s", c.stream->ds->label,
                 ds->label);
    return NULL;
  }
  ag_profiler *p = calloc(1, sizeof *p);
  rec *recs = calloc(KEEP, sizeof *recs);
  if (!p || !recs) {
    free(p);
    free(recs);
    ag_error_set(AG_ERR_OOM, "ag_profiler_create: out of host memory");
    return NULL;
  }
  p->ds = ds;
  p->recs = recs;
  p->stream = c.stream ? c.stream : ag__current_stream(ds);
  p->window = c.window ? c.window : 20;
  p->leak_k = c.leak_steps ? c.leak_steps : 5;
  pthread_mutex_init(&p->mu, NULL);
  p->anchor = ag_event_create(d, true);
  if (!p->anchor) {
    ag_profiler_destroy(p);
    return NULL;
  }
  p->trace = c.trace;
  /* Anchor device time to the host clock: an event recorded on an idle
   * stream completes at once; on a busy one wait for it (one counted sync). */
  bool idle = ag_stream_query(p->stream);
  ag_event_record(p->anchor, p->stream);
  if (!idle && ag__sync_event(p->anchor, "ag_profiler_create (timeline anchor)") != AG_OK) ag_error_clear();
  p->anchor_ns = ag__now_ns();
  p->created_ns = p->anchor_ns;
  if (p->trace) {
    ag__trace_acquire();
    ag__trace_thread_name("main");
    ag__trace_stream_name(p->stream, p->stream->is_default ? "default stream" : "compute stream");
  }
  ag__sync_sites_track(1);
  p->n_sites0 = read_sites(p->sites0);
  if (ds->alloc) {
    ag__alloc_peak_capture(ds->alloc, true);
    p->pk_on = true;
  }
  return p;
}

void ag_profiler_destroy(ag_profiler *p) {
  if (!p) return;
  if (p->trace) ag__trace_release();
  if (p->anchor) ag__sync_sites_track(-1);
  for (int i = 0; i < p->n_pend; i++) {
    ag_event_destroy(p->pend[i].a);
    ag_event_destroy(p->pend[i].b);
  }
  for (int i = 0; i < p->n_spare; i++) ag_event_destroy(p->spare[i]);
  ag_event_destroy(p->ev_begin);
  ag_event_destroy(p->ev_ready);
  ag_event_destroy(p->anchor);
  pthread_mutex_destroy(&p->mu);
  for (int i = 0; i < p->n_series; i++) free(p->series[i]);
  for (int i = 0; i < p->n_info; i++) {
    free(p->info_k[i]);
    free(p->info_v[i]);
  }
  free(p->pts);
  free(p->snap_peak);
  if (p->pk_on) ag__alloc_peak_capture(p->ds->alloc, false);
  free(p->wins);
  free(p->recs);
  free(p);
}

/* ---- steps ---- */

static void mem_now(ag_profiler *p, int64_t *alloc, int64_t *cat, int64_t *reserved, int64_t *peak) {
  ag_memory_stats ms;
  if (ag_memory_stats_get(p->ds->dev, &ms) != AG_OK) {
    ag_error_clear();
    memset(&ms, 0, sizeof ms);
  }
  *alloc = ms.allocated_bytes[AG_POOL_ALL].current;
  if (cat)
    for (int c = 0; c < AG_MEM_CATEGORY_COUNT; c++) cat[c] = ms.category_bytes[c].current;
  if (reserved) *reserved = ms.reserved_bytes[AG_POOL_ALL].current;
  if (peak) *peak = ms.allocated_bytes[AG_POOL_ALL].peak;
}

/* Take the allocator's newer snapshot at the peak, if any, as taken during
 * `step` (in_step) or after it. */
static void peak_collect(ag_profiler *p, int64_t step, bool in_step) {
  int64_t bytes = 0;
  char *snap = p->pk_on ? ag__alloc_peak_snapshot(p->ds->alloc, &p->snap_seen, &bytes) : NULL;
  if (!snap) return;
  pthread_mutex_lock(&p->mu);
  free(p->snap_peak);
  p->snap_peak = snap;
  p->snap_peak_step = step;
  p->snap_peak_in_step = in_step;
  p->snap_peak_bytes = bytes;
  pthread_mutex_unlock(&p->mu);
}

/* The allocator's JSON snapshot as a string (owned by the caller), or NULL. */
static char *snapshot_string(ag_devstate *ds) {
  char *buf = NULL;
  size_t len = 0;
  FILE *m = ds->alloc ? open_memstream(&buf, &len) : NULL;
  if (!m) return NULL;
  ag_status st = ag__alloc_snapshot(ds->alloc, m);
  fclose(m);
  if (st != AG_OK) {
    ag_error_clear();
    free(buf);
    return NULL;
  }
  return buf;
}

ag_status ag_profiler_step_begin(ag_profiler *p) {
  if (!p) return ag_error_set(AG_ERR_INVALID, "ag_profiler_step_begin: NULL profiler");
  if (p->in_step) return ag_error_set(AG_ERR_STATE, "ag_profiler_step_begin: step %" PRId64 " is open", p->step);
  peak_collect(p, p->step - 1, false); /* reached between steps */
  pthread_mutex_lock(&p->mu);
  rec *r = &p->recs[p->step % KEEP];
  memset(r, 0, sizeof *r);
  r->st.step = p->step;
  r->st.device_ms = r->st.device_period_ms = -1;
  p->ev_begin = ev_get(p);
  if (p->ev_begin && ag_event_record(p->ev_begin, p->stream) != AG_OK) {
    ag_event_destroy(p->ev_begin);
    p->ev_begin = NULL;
    ag_error_clear();
  }
  p->in_step = true;
  p->step_void = false;
  pthread_mutex_unlock(&p->mu);
  atomic_store(&p->data_wait_ns, 0);
  atomic_store(&p->batches_in_step, 0);
  mem_now(p, &p->alloc0, NULL, NULL, NULL);
  p->syncs0 = ag_sync_count();
  p->wait0 = ag__sync_wait_ns();
  p->t_begin = ag__now_ns();
  return AG_OK;
}

static void fmt_bytes(char *buf, size_t len, double b) {
  double a = fabs(b);
  if (a >= 1048576.0)
    snprintf(buf, len, "%.1f MiB", b / 1048576.0);
  else if (a >= 1024.0)
    snprintf(buf, len, "%.1f KiB", b / 1024.0);
  else
    snprintf(buf, len, "%.0f B", b);
}

/* Leak detector: allocated bytes at step end grew in K consecutive steps. */
static void leak_check(ag_profiler *p, const rec *r, const rec *prev) {
  if (r->st.allocated_delta <= 0) {
    p->streak = 0;
    return;
  }
  if (p->streak == 0) {
    if (prev)
      p->streak_base = *prev;
    else { /* the first step: its begin state */
      memset(&p->streak_base, 0, sizeof p->streak_base);
      p->streak_base.st.allocated_bytes = r->st.allocated_bytes - r->st.allocated_delta;
      memcpy(p->streak_base.cat, r->cat, sizeof r->cat);
      p->streak_base.nodes = r->nodes;
      p->streak_base.tensors = r->tensors;
    }
  }
  p->streak++;
  if (p->streak < p->leak_k || p->leak) return;
  p->leak = true;
  p->leak_step = r->st.step;
  const rec *b = &p->streak_base;
  double grown = (double)(r->st.allocated_bytes - b->st.allocated_bytes);
  char tot[32], per[32];
  fmt_bytes(tot, sizeof tot, grown);
  fmt_bytes(per, sizeof per, grown / p->streak);
  int n = snprintf(p->leak_text, sizeof p->leak_text,
                   "leak: allocated bytes grew in each of the %d steps up to step %" PRId64 " (+%s, %s/step); grew:",
                   p->streak, r->st.step, tot, per);
  for (int c = 0; c < AG_MEM_CATEGORY_COUNT && n < (int)sizeof p->leak_text; c++) {
    int64_t d = r->cat[c] - b->cat[c];
    if (d <= 0) continue;
    char db[32];
    fmt_bytes(db, sizeof db, (double)d);
    n += snprintf(p->leak_text + n, sizeof p->leak_text - (size_t)n, " %s +%s", ag_mem_category_name(c), db);
  }
  int64_t dn = r->nodes - b->nodes, dt = r->tensors - b->tensors;
  if (n < (int)sizeof p->leak_text)
    snprintf(p->leak_text + n, sizeof p->leak_text - (size_t)n, "; live tensors %+" PRId64 ", autograd nodes %+" PRId64 "%s",
             dt, dn, dn > 0 ? ": a tensor holding a graph is kept across steps" : ": tensors are kept across steps");
}

ag_status ag_profiler_step_end(ag_profiler *p) {
  if (!p) return ag_error_set(AG_ERR_INVALID, "ag_profiler_step_end: NULL profiler");
  if (!p->in_step) return ag_error_set(AG_ERR_STATE, "ag_profiler_step_end: no step is open");
  pthread_mutex_lock(&p->mu);
  if (p->step_void) {
    /* The loop's last ag_loader_next found the end of the data: that pass
     * ran no step, so it is closed without being counted (312 batches are
     * 312 steps). */
    ev_put(p, p->ev_begin);
    ev_put(p, p->ev_ready);
    p->ev_begin = p->ev_ready = NULL;
    p->in_step = p->step_void = false;
    pthread_mutex_unlock(&p->mu);
    return AG_OK;
  }
  pthread_mutex_unlock(&p->mu);
  uint64_t t_end = ag__now_ns();
  uint64_t syncs = ag_sync_count() - p->syncs0;
  uint64_t sync_wait = ag__sync_wait_ns() - p->wait0;
  int64_t alloc, cat[AG_MEM_CATEGORY_COUNT], reserved, peak;
  mem_now(p, &alloc, cat, &reserved, &peak);
  /* Segments at the peak: the allocator took them when it got there; if
   * its last snapshot is below the peak, it takes one more when allocated
   * bytes next reach it (the same point of the next step, in a loop). */
  peak_collect(p, p->step, true);
  if (p->pk_on) ag__alloc_peak_arm(p->ds->alloc);
  pthread_mutex_lock(&p->mu);
  ag_event *ev_end = ev_get(p);
  if (ev_end && ag_event_record(ev_end, p->stream) != AG_OK) {
    ag_event_destroy(ev_end);
    ev_end = NULL;
    ag_error_clear();
  }
  rec *r = &p->recs[p->step % KEEP];
  r->st.wall_ms = (double)(t_end - p->t_begin) / 1e6;
  r->st.data_wait_ms = (double)atomic_load(&p->data_wait_ns) / 1e6;
  r->st.syncs = syncs;
  r->st.sync_wait_ms = (double)sync_wait / 1e6;
  r->st.allocated_bytes = alloc;
  rec *prev = p->step > 0 ? rec_of(p, p->step - 1) : NULL;
  r->st.allocated_delta = alloc - (prev ? prev->st.allocated_bytes : p->alloc0);
  memcpy(r->cat, cat, sizeof cat);
  r->reserved = reserved;
  r->peak = peak;
  r->end_ns = t_end;
  r->nodes = ag_live_nodes();
  r->tensors = ag_live_tensors();
  /* The device part starts when its input is there (ready), else at begin. */
  ag_event *start = p->ev_ready ? p->ev_ready : p->ev_begin;
  if (p->ev_ready) ev_put(p, p->ev_begin);
  p->ev_begin = p->ev_ready = NULL;
  if (start && ev_end)
    add_pend(p, P_STEP, p->step, start, ev_end, p->stream, 0);
  else {
    ev_put(p, start);
    ev_put(p, ev_end);
  }
  p->n_done = p->step + 1;
  p->in_step = false;
  leak_check(p, r, prev);
  int64_t step = p->step++;
  resolve(p);
  pthread_mutex_unlock(&p->mu);
  ag__trace_host("step", "step", p->t_begin, t_end, "step", step);
  ag__trace_counter("allocated bytes", t_end, alloc);
  if ((step + 1) % p->window == 0) {
    if (p->n_wins == p->cap_wins) {
      int64_t nc = p->cap_wins ? p->cap_wins * 2 : 16;
      window_rec *nv = realloc(p->wins, (size_t)nc * sizeof *nv);
      if (!nv) return ag_error_set(AG_ERR_OOM, "ag_profiler_step_end: out of host memory");
      p->wins = nv;
      p->cap_wins = nc;
    }
    window_rec *w = &p->wins[p->n_wins++];
    w->first = step + 1 - p->window;
    top_site_since(p, w);
    p->n_sites0 = read_sites(p->sites0);
  }
  return AG_OK;
}

ag_status ag_profiler_step_stats(ag_profiler *p, int64_t step, ag_step_stats *out) {
  if (!p || !out) return ag_error_set(AG_ERR_INVALID, "ag_profiler_step_stats: NULL argument");
  pthread_mutex_lock(&p->mu);
  resolve(p);
  if (step < 0) step = p->n_done - 1;
  rec *r = step < p->n_done ? rec_of(p, step) : NULL;
  if (r) *out = r->st;
  pthread_mutex_unlock(&p->mu);
  if (!r)
    return ag_error_set(AG_ERR_INDEX, "ag_profiler_step_stats: step %" PRId64 " is not finished or no longer kept", step);
  return AG_OK;
}

bool ag_profiler_leak(ag_profiler *p, const char **out_text) {
  if (!p) return false;
  if (out_text) *out_text = p->leak ? p->leak_text : "";
  return p->leak;
}

/* ---- verdicts ---- */

static void verdict_over(ag_profiler *p, int64_t first, int64_t n, const window_rec *w,
                         ag_profiler_verdict *v) {
  memset(v, 0, sizeof *v);
  v->first_step = first;
  v->steps = n;
  double wall = 0, wait = 0, busy = 0, period = 0, swait = 0;
  uint64_t syncs = 0;
  int grew = 0;
  int64_t known = 0;
  for (int64_t s = first; s < first + n; s++) {
    rec *r = rec_of(p, s);
    if (!r) continue;
    wall += r->st.wall_ms;
    wait += r->st.data_wait_ms;
    syncs += r->st.syncs;
    swait += r->st.sync_wait_ms;
    if (r->st.allocated_delta > 0) grew++;
    if (r->st.device_ms >= 0 && r->st.device_period_ms > 0) {
      busy += fmin(r->st.device_ms, r->st.device_period_ms);
      period += r->st.device_period_ms;
      known++;
    }
  }
  rec *a = rec_of(p, first), *b = rec_of(p, first + n - 1);
  int64_t base = a ? a->st.allocated_bytes - a->st.allocated_delta : 0;
  v->growth_bytes_per_step = a && b ? (double)(b->st.allocated_bytes - base) / (double)n : 0;
  v->device_idle_frac = known ? 1.0 - busy / period : -1;
  v->data_wait_frac = wall > 0 ? wait / wall : 0;
  v->syncs_per_step = (double)syncs / (double)n;
  v->sync_stall_frac = syncs && wall > 0 ? fmax(0.0, (wall - swait - wait) / wall) : 0;
  double idle = v->device_idle_frac >= 0 ? v->device_idle_frac : v->data_wait_frac;
  /* A wait of a fraction of a millisecond per step is no reason to add
   * workers, however short the step: below AG_PROF_MIN_DATA_WAIT_MS per
   * step the input is not what limits it. */
  v->input_bound = v->data_wait_frac >= 0.10 && idle >= 0.05 && wait / (double)n >= AG_PROF_MIN_DATA_WAIT_MS;
  /* After a sync the device queue is empty: it runs only what the host
   * enqueues until the host waits again. A step that spends a quarter of
   * its host time outside syncs with the queue drained is bound by them. */
  v->sync_bound = v->syncs_per_step >= 1.0 && v->sync_stall_frac >= 0.25 && !v->input_bound;
  v->memory_growing = n >= 2 && v->growth_bytes_per_step > 0 && grew * 5 >= n * 4;
  v->leak = p->leak;
  int k = 0;
  size_t cap = sizeof v->text;
  if (v->input_bound)
    k += snprintf(v->text + k, cap - (size_t)k,
                  "input-bound: device idle %.0f%% waiting for data (host blocked %.0f%% of the step in ag_loader_next); raise workers\n",
                  idle * 100, v->data_wait_frac * 100);
  if (v->syncs_per_step >= 1.0 && (size_t)k < cap) {
    const char *where = w && w->top_site ? w->top_site : "an unknown site";
    const char *call = w && w->top_call ? w->top_call : "sync";
    double at = w && w->top_count ? (double)w->top_count / (double)n : v->syncs_per_step;
    if (v->sync_bound)
      k += snprintf(v->text + k, cap - (size_t)k,
                    "sync-bound: %.0f host syncs per step in %s at %s; the device queue is drained for %.0f%% of the step\n",
                    at, call, where, v->sync_stall_frac * 100);
    else
      k += snprintf(v->text + k, cap - (size_t)k, "note: %.0f host syncs per step in %s at %s\n", at, call, where);
  }
  if (v->memory_growing && (size_t)k < cap) {
    char per[32];
    fmt_bytes(per, sizeof per, v->growth_bytes_per_step);
    int64_t dn = a && b ? (b->nodes - a->nodes) : 0;
    k += snprintf(v->text + k, cap - (size_t)k, "memory growing %s/step: %s\n", per,
                  dn > 0 ? "a tensor holding a graph is kept across steps" : "tensors are kept across steps");
  }
  if (k == 0) {
    if (v->device_idle_frac >= 0.2)
      snprintf(v->text, cap,
               "host-bound: device idle %.0f%%: the host does not queue work fast enough (small ops or host work between launches)\n",
               v->device_idle_frac * 100);
    else if (v->device_idle_frac >= 0)
      snprintf(v->text, cap, "compute-bound: device busy %.0f%%\n", (1 - v->device_idle_frac) * 100);
    else
      snprintf(v->text, cap, "compute-bound (device times not yet known)\n");
  }
  /* lines are separated by newlines; the text has no trailing one */
  size_t len = strlen(v->text);
  while (len && v->text[len - 1] == '\n') v->text[--len] = 0;
}

ag_status ag_profiler_verdict_get(ag_profiler *p, ag_profiler_verdict *out) {
  if (!p || !out) return ag_error_set(AG_ERR_INVALID, "ag_profiler_verdict_get: NULL argument");
  pthread_mutex_lock(&p->mu);
  resolve(p);
  int64_t n = p->n_done < p->window ? p->n_done : p->window;
  pthread_mutex_unlock(&p->mu);
  if (n == 0) return ag_error_set(AG_ERR_STATE, "ag_profiler_verdict_get: no step has finished");
  window_rec w = {0};
  if (p->n_done % p->window == 0 && p->n_wins)
    w = p->wins[p->n_wins - 1];
  else
    top_site_since(p, &w);
  pthread_mutex_lock(&p->mu);
  verdict_over(p, p->n_done - n, n, &w, out);
  pthread_mutex_unlock(&p->mu);
  return AG_OK;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* The kind of a verdict, ignoring its numbers: windows of one kind in a row
 * are reported as one range. */
static int verdict_kind(const ag_profiler_verdict *v) {
  int k = (v->input_bound ? 1 : 0) | (v->sync_bound ? 2 : 0) | (v->syncs_per_step >= 1.0 ? 4 : 0) |
          (v->memory_growing ? 8 : 0);
  if (k == 0) k = v->device_idle_frac >= 0.2 ? 16 : v->device_idle_frac >= 0 ? 32 : 64;
  return k;
}

/* Sites named "object+0xOFFSET" (an object without exported symbols) or
 * "symbol+0xOFFSET": say once how to turn them into function and line. */
static void print_site_hint(FILE *f, const ag_sync_site_info *sites, int ns) {
  char exe[512];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  exe[n > 0 ? n : 0] = 0;
  const char *base = strrchr(exe, '/') ? strrchr(exe, '/') + 1 : exe;
  for (int i = 0; i < ns; i++) {
    const char *plus = strstr(sites[i].site, "+0x");
    if (!plus) continue;
    size_t len = (size_t)(plus - sites[i].site);
    if (*base && strlen(base) == len && !strncmp(sites[i].site, base, len))
      fprintf(f, "  (function and line of a site: addr2line -f -C -e %s %s, for a binary built with -g;\n"
                 "   or compile the calling code with -DAG_SYNC_SITES to have file:line here)\n",
              exe, plus + 1);
    else
      fprintf(f, "  (function and line of a site NAME+0xOFF: gdb -batch -ex 'info line *(NAME+0xOFF)' OBJECT,\n"
                 "   or addr2line -f -C -e OBJECT 0xOFF when NAME is the object; or compile the calling code\n"
                 "   with -DAG_SYNC_SITES to have file:line here)\n");
    return;
  }
}

ag_status ag_profiler_report(ag_profiler *p, FILE *f) {
  if (!p || !f) return ag_error_set(AG_ERR_INVALID, "ag_profiler_report: NULL argument");
  if (p->n_done == 0) return ag_error_set(AG_ERR_STATE, "ag_profiler_report: no step has finished");
  pthread_mutex_lock(&p->mu);
  resolve(p);
  int64_t first = p->n_done > KEEP ? p->n_done - KEEP : 0, n = p->n_done - first;
  double *walls = malloc((size_t)n * sizeof *walls);
  double wait = 0, copy = 0, busy = 0, period = 0, syncs = 0;
  int64_t nbusy = 0;
  for (int64_t s = first; s < p->n_done; s++) {
    rec *r = rec_of(p, s);
    if (walls) walls[s - first] = r->st.wall_ms;
    wait += r->st.data_wait_ms;
    copy += r->st.copy_ms > 0 ? r->st.copy_ms : 0;
    syncs += (double)r->st.syncs;
    if (r->st.device_ms >= 0 && r->st.device_period_ms > 0) {
      busy += fmin(r->st.device_ms, r->st.device_period_ms);
      period += r->st.device_period_ms;
      nbusy++;
    }
  }
  double mean = 0;
  for (int64_t i = 0; walls && i < n; i++) mean += walls[i];
  mean /= (double)n;
  if (walls) qsort(walls, (size_t)n, sizeof *walls, cmp_double);
  fprintf(f, "anygrad profiler: %" PRId64 " steps on %s\n", p->n_done, p->ds->label);
  fprintf(f, "  step time   mean %.2f ms  p50 %.2f ms  max %.2f ms\n", mean, walls ? walls[n / 2] : 0,
          walls ? walls[n - 1] : 0);
  fprintf(f, "  data wait   %.2f ms/step (%.0f%% of host time)\n", wait / (double)n, mean > 0 ? 100 * wait / (double)n / mean : 0);
  fprintf(f, "  copies      %.2f ms/step\n", copy / (double)n);
  if (nbusy)
    fprintf(f, "  device      busy %.2f ms/step, idle %.0f%%\n", busy / (double)nbusy, 100 * (1 - busy / period));
  else
    fprintf(f, "  device      timings not yet complete\n");
  fprintf(f, "  host syncs  %.2f per step\n", syncs / (double)n);
  free(walls);
  fprintf(f, "verdicts:\n");
  /* Windows in order (full ones, then the partial tail); a run of windows
   * with the same kind of verdict is printed once, over its whole range. */
  int64_t tail = p->n_done % p->window, nw = 0;
  int64_t *wfirst = malloc((size_t)(p->n_wins + 1) * sizeof *wfirst), *wlen = malloc((size_t)(p->n_wins + 1) * sizeof *wlen);
  window_rec *wrec = malloc((size_t)(p->n_wins + 1) * sizeof *wrec);
  if (!wfirst || !wlen || !wrec) {
    pthread_mutex_unlock(&p->mu);
    free(wfirst);
    free(wlen);
    free(wrec);
    return ag_error_set(AG_ERR_OOM, "ag_profiler_report: out of host memory");
  }
  for (int64_t w = 0; w < p->n_wins; w++) {
    if (p->wins[w].first < first) continue;
    wfirst[nw] = p->wins[w].first;
    wlen[nw] = p->window;
    wrec[nw++] = p->wins[w];
  }
  if (tail && p->n_done - tail >= first) {
    pthread_mutex_unlock(&p->mu);
    top_site_since(p, &wrec[nw]);
    pthread_mutex_lock(&p->mu);
    wfirst[nw] = p->n_done - tail;
    wlen[nw++] = tail;
  }
  for (int64_t i = 0; i < nw;) {
    ag_profiler_verdict v;
    verdict_over(p, wfirst[i], wlen[i], &wrec[i], &v);
    int key = verdict_kind(&v);
    int64_t j = i + 1, steps = wlen[i];
    window_rec run = wrec[i];
    for (; j < nw; j++) {
      ag_profiler_verdict u;
      verdict_over(p, wfirst[j], wlen[j], &wrec[j], &u);
      /* a verdict naming a sync site is the same only at the same site */
      bool same_site = wrec[j].top_site == run.top_site && wrec[j].top_call == run.top_call;
      if (verdict_kind(&u) != key || ((key & 6) && !same_site)) break;
      steps += wlen[j];
      if (same_site) run.top_count += wrec[j].top_count;
    }
    if (j > i + 1) verdict_over(p, wfirst[i], steps, &run, &v);
    fprintf(f, "  steps %" PRId64 "-%" PRId64 ": ", wfirst[i], wfirst[i] + steps - 1);
    for (char *line = v.text; *line;) {
      char *nl = strchr(line, '\n');
      fprintf(f, "%s%.*s\n", line == v.text ? "" : "    ", (int)(nl ? nl - line : (long)strlen(line)), line);
      line = nl ? nl + 1 : line + strlen(line);
    }
    i = j;
  }
  free(wfirst);
  free(wlen);
  free(wrec);
  if (p->leak) fprintf(f, "%s\n", p->leak_text);
  pthread_mutex_unlock(&p->mu);
  ag_sync_site_info sites[5];
  int ns = ag_sync_sites(sites, 5);
  if (ns) fprintf(f, "sync sites (process total):\n");
  bool unresolved = false;
  for (int i = 0; i < ns; i++) {
    fprintf(f, "  %8" PRIu64 "  %s at %s\n", sites[i].count, sites[i].call, sites[i].site);
    unresolved = unresolved || strstr(sites[i].site, "+0x") != NULL;
  }
  if (unresolved) print_site_hint(f, sites, ns);
  return ferror(f) ? ag_error_set(AG_ERR_IO, "ag_profiler_report: write error") : AG_OK;
}

ag_status ag_profiler_write_trace(ag_profiler *p, const char *path) {
  if (!p || !path) return ag_error_set(AG_ERR_INVALID, "ag_profiler_write_trace: NULL argument");
  if (!p->trace) return ag_error_set(AG_ERR_STATE, "ag_profiler_write_trace: the profiler was created without trace");
  pthread_mutex_lock(&p->mu);
  resolve(p);
  pthread_mutex_unlock(&p->mu);
  return ag__trace_write(path, p->ds, p->created_ns, p);
}

/* ---- report data ---- */

static char *dup_str(const char *s) {
  size_t n = strlen(s) + 1;
  char *d = malloc(n);
  if (d) memcpy(d, s, n);
  return d;
}

ag_status ag_profiler_log_scalar(ag_profiler *p, const char *series, int64_t step, double value) {
  if (!p || !series || !*series)
    return ag_error_set(AG_ERR_INVALID, "ag_profiler_log_scalar: NULL profiler or empty series name");
  pthread_mutex_lock(&p->mu);
  ag_status st = AG_OK;
  int k = 0;
  while (k < p->n_series && strcmp(p->series[k], series)) k++;
  if (k == p->n_series) {
    if (k == MAX_SERIES)
      st = ag_error_set(AG_ERR_INVALID, "ag_profiler_log_scalar: more than %d series ('%s')", MAX_SERIES, series);
    else if (!(p->series[k] = dup_str(series)))
      st = ag_error_set(AG_ERR_OOM, "ag_profiler_log_scalar: out of host memory");
    else
      p->n_series++;
  }
  if (st == AG_OK && p->n_pts == p->cap_pts) {
    int64_t nc = p->cap_pts ? p->cap_pts * 2 : 256;
    scalar_pt *nv = nc <= MAX_POINTS ? realloc(p->pts, (size_t)nc * sizeof *nv) : NULL;
    if (!nv)
      st = nc > MAX_POINTS ? ag_error_set(AG_ERR_INVALID, "ag_profiler_log_scalar: more than %d points", MAX_POINTS)
                           : ag_error_set(AG_ERR_OOM, "ag_profiler_log_scalar: out of host memory");
    else {
      p->pts = nv;
      p->cap_pts = nc;
    }
  }
  if (st == AG_OK) p->pts[p->n_pts++] = (scalar_pt){k, step, value};
  pthread_mutex_unlock(&p->mu);
  return st;
}

ag_status ag_profiler_set_info(ag_profiler *p, const char *key, const char *value) {
  if (!p || !key || !*key || !value)
    return ag_error_set(AG_ERR_INVALID, "ag_profiler_set_info: NULL profiler, key or value, or empty key");
  pthread_mutex_lock(&p->mu);
  ag_status st = AG_OK;
  int k = 0;
  while (k < p->n_info && strcmp(p->info_k[k], key)) k++;
  char *v = dup_str(value), *kk = k == p->n_info ? dup_str(key) : NULL;
  if (k == MAX_INFO)
    st = ag_error_set(AG_ERR_INVALID, "ag_profiler_set_info: more than %d keys ('%s')", MAX_INFO, key);
  else if (!v || (k == p->n_info && !kk))
    st = ag_error_set(AG_ERR_OOM, "ag_profiler_set_info: out of host memory");
  if (st != AG_OK) {
    free(v);
    free(kk);
  } else {
    if (k == p->n_info) {
      p->info_k[k] = kk;
      p->info_v[k] = NULL;
      p->n_info++;
    }
    free(p->info_v[k]);
    p->info_v[k] = v;
  }
  pthread_mutex_unlock(&p->mu);
  return st;
}

static void put_json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (const unsigned char *c = (const unsigned char *)(s ? s : ""); *c; c++) {
    if (*c == '"' || *c == '\\')
      fprintf(f, "\\%c", *c);
    else if (*c < 0x20)
      fprintf(f, "\\u%04x", *c);
    else
      fputc(*c, f);
  }
  fputc('"', f);
}

/* A finite number, or null (JSON has no NaN). */
static void put_num(FILE *f, double v) {
  if (isfinite(v))
    fprintf(f, "%.6g", v);
  else
    fputs("null", f);
}

ag_status ag__profiler_json(ag_profiler *p, FILE *f) {
  if (!p || !f) return ag_error_set(AG_ERR_INVALID, "profiler report data: NULL argument");
  ag_device_props pr;
  memset(&pr, 0, sizeof pr);
  if (ag_device_props_get(p->ds->dev, &pr) != AG_OK) ag_error_clear();
  char *snap_end = snapshot_string(p->ds);
  peak_collect(p, p->in_step ? p->step : p->step - 1, p->in_step);
  ag_sync_site_info sites[TOP_SITES];
  int ns = ag_sync_sites(sites, TOP_SITES);
  pthread_mutex_lock(&p->mu);
  resolve(p);
  fprintf(f, "{\"format\":\"anygrad-report\",\"version\":1,\n\"device\":{\"label\":");
  put_json_str(f, p->ds->label);
  fprintf(f, ",\"name\":");
  put_json_str(f, pr.name);
  fprintf(f, ",\"vendor\":");
  put_json_str(f, pr.vendor);
  fprintf(f, ",\"arch\":");
  put_json_str(f, pr.arch);
  fprintf(f, ",\"total_memory\":%zu,\"compute_units\":%d,\"native_f16\":%s,\"native_bf16\":%s,"
             "\"virtual_memory\":%s,\"unified_memory\":%s},\n\"info\":[",
          pr.total_memory, pr.compute_units, pr.native_f16 ? "true" : "false", pr.native_bf16 ? "true" : "false",
          pr.virtual_memory ? "true" : "false", pr.unified_memory ? "true" : "false");
  for (int i = 0; i < p->n_info; i++) {
    fprintf(f, "%s[", i ? "," : "");
    put_json_str(f, p->info_k[i]);
    fputc(',', f);
    put_json_str(f, p->info_v[i]);
    fputc(']', f);
  }
  fprintf(f, "],\n\"categories\":[");
  for (int c = 0; c < AG_MEM_CATEGORY_COUNT; c++)
    fprintf(f, "%s\"%s\"", c ? "," : "", ag_mem_category_name((ag_mem_category)c));
  /* steps: [step, wall, data_wait, copy, device, period, syncs, sync_wait,
   * allocated, reserved, peak, [cat...], end_ns (host CLOCK_MONOTONIC, the
   * clock of the snapshot's time_ns)] */
  fprintf(f, "],\n\"step_fields\":[\"step\",\"wall_ms\",\"data_wait_ms\",\"copy_ms\",\"device_ms\","
             "\"device_period_ms\",\"syncs\",\"sync_wait_ms\",\"allocated\",\"reserved\",\"peak\",\"categories\",\"end_ns\"],"
             "\n\"steps\":[");
  int64_t first = p->n_done > KEEP ? p->n_done - KEEP : 0;
  for (int64_t s = first; s < p->n_done; s++) {
    const rec *r = rec_of(p, s);
    fprintf(f, "%s\n[%" PRId64 ",", s > first ? "," : "", s);
    put_num(f, r->st.wall_ms);
    fputc(',', f);
    put_num(f, r->st.data_wait_ms);
    fputc(',', f);
    put_num(f, r->st.copy_ms);
    fputc(',', f);
    put_num(f, r->st.device_ms);
    fputc(',', f);
    put_num(f, r->st.device_period_ms);
    fprintf(f, ",%" PRIu64 ",", r->st.syncs);
    put_num(f, r->st.sync_wait_ms);
    fprintf(f, ",%" PRId64 ",%" PRId64 ",%" PRId64 ",[", r->st.allocated_bytes, r->reserved, r->peak);
    for (int c = 0; c < AG_MEM_CATEGORY_COUNT; c++) fprintf(f, "%s%" PRId64, c ? "," : "", r->cat[c]);
    fprintf(f, "],%" PRIu64 "]", r->end_ns);
  }
  /* One verdict per window (the windows' sync sites as recorded then). */
  fprintf(f, "],\n\"verdicts\":[");
  int64_t tail = p->n_done % p->window;
  bool any = false;
  for (int64_t w = 0; w <= p->n_wins; w++) {
    window_rec wr = {0};
    int64_t wf, wl;
    if (w < p->n_wins) {
      wr = p->wins[w];
      wf = wr.first;
      wl = p->window;
    } else {
      if (!tail) break;
      wf = p->n_done - tail;
      wl = tail;
    }
    if (wf < first) continue;
    ag_profiler_verdict v;
    verdict_over(p, wf, wl, &wr, &v);
    fprintf(f, "%s\n{\"first\":%" PRId64 ",\"steps\":%" PRId64 ",\"kind\":%d,\"input_bound\":%s,\"sync_bound\":%s,"
               "\"memory_growing\":%s,\"device_idle_frac\":",
            any ? "," : "", wf, wl, verdict_kind(&v), v.input_bound ? "true" : "false",
            v.sync_bound ? "true" : "false", v.memory_growing ? "true" : "false");
    put_num(f, v.device_idle_frac);
    fprintf(f, ",\"data_wait_frac\":");
    put_num(f, v.data_wait_frac);
    fprintf(f, ",\"syncs_per_step\":");
    put_num(f, v.syncs_per_step);
    fprintf(f, ",\"text\":");
    put_json_str(f, v.text);
    fputc('}', f);
    any = true;
  }
  fprintf(f, "],\n\"leak\":");
  if (p->leak)
    put_json_str(f, p->leak_text);
  else
    fputs("null", f);
  fprintf(f, ",\n\"scalars\":{");
  for (int k = 0; k < p->n_series; k++) {
    fprintf(f, "%s\n", k ? "," : "");
    put_json_str(f, p->series[k]);
    fprintf(f, ":[");
    bool first_pt = true;
    for (int64_t i = 0; i < p->n_pts; i++) {
      if (p->pts[i].series != k) continue;
      fprintf(f, "%s[%" PRId64 ",", first_pt ? "" : ",", p->pts[i].step);
      put_num(f, p->pts[i].value);
      fputc(']', f);
      first_pt = false;
    }
    fputc(']', f);
  }
  fprintf(f, "},\n\"sync_sites\":[");
  for (int i = 0; i < ns; i++) {
    fprintf(f, "%s\n{\"call\":", i ? "," : "");
    put_json_str(f, sites[i].call);
    fprintf(f, ",\"site\":");
    put_json_str(f, sites[i].site);
    fprintf(f, ",\"count\":%" PRIu64 "}", sites[i].count);
  }
  fprintf(f, "],\n\"snapshot_peak_in_step\":%s,\n\"snapshot_peak_step\":%" PRId64
             ",\n\"snapshot_peak\":%s,\n\"snapshot_end\":%s}\n",
          p->snap_peak && p->snap_peak_in_step ? "true" : "false", p->snap_peak ? p->snap_peak_step : -1,
          p->snap_peak ? p->snap_peak : "null", snap_end ? snap_end : "null");
  pthread_mutex_unlock(&p->mu);
  free(snap_end);
  return ferror(f) ? ag_error_set(AG_ERR_IO, "profiler report data: write error") : AG_OK;
}
