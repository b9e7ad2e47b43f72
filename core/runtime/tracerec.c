/* The trace recorder: one process-wide event list (host ranges per thread,
 * stream ranges, counters) guarded by one mutex, recording only while a
 * tracing profiler lives (diag/profiler.c), and the host clock of every
 * measurement. Here, below every layer, so that any layer records without
 * calling up; the Chrome trace writer is diag/trace.c. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/tracerec.h"

uint64_t ag__now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

typedef ag_trace_ev tev;

/* A bound on memory: a long run keeps its first events and counts the rest. */
#define MAX_EVENTS (1u << 20)
#define MAX_LANES AG_TRACE_MAX_LANES

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
  tev e = {t0, t1 > t0 ? t1 : t0, cat, name, arg_name, arg, my_lane(), AG_TRACE_EV_RANGE, 0};
  push(&e);
}

void ag__trace_stream(const char *cat, const char *name, const ag_stream *s, uint64_t t0,
                      uint64_t t1, const char *arg_name, int64_t arg) {
  if (!ag__trace_on() || !s) return;
  tev e = {t0, t1 > t0 ? t1 : t0, cat, name, arg_name, arg, s->id, AG_TRACE_EV_RANGE, 1};
  push(&e);
}

void ag__trace_counter(const char *name, uint64_t t, int64_t value) {
  if (!ag__trace_on()) return;
  tev e = {t, t, "memory", name, "bytes", value, 0, AG_TRACE_EV_COUNTER, 0};
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

ag_trace_events ag__trace_lock(void) {
  pthread_mutex_lock(&g_mu);
  return (ag_trace_events){g_ev, g_n, g_dropped, g_lane_name, (const char(*)[48])g_stream_name};
}

void ag__trace_unlock(void) { pthread_mutex_unlock(&g_mu); }

