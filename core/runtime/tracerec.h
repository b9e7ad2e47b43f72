/* The trace recorder (tracerec.c): the host clock and one process-wide,
 * mutex-guarded event list, recording while at least one tracing profiler
 * lives. Every layer records into it; diag/trace.c writes it out. Names and
 * categories are borrowed and must outlive the recorder (literals or
 * interned). Never installed. */
#ifndef AG_CORE_TRACEREC_H
#define AG_CORE_TRACEREC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/devstate.h"

/* CLOCK_MONOTONIC in nanoseconds: the one host clock of every measurement. */
AG_HIDDEN uint64_t ag__now_ns(void);

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

/* ---- for the writer ---- */
#define AG_TRACE_MAX_LANES 256
enum { AG_TRACE_EV_RANGE, AG_TRACE_EV_COUNTER };
typedef struct ag_trace_ev {
  uint64_t t0, t1;
  const char *cat, *name, *arg_name;
  int64_t arg;
  uint32_t lane;   /* host thread lane, or stream id for device events */
  uint8_t kind;    /* AG_TRACE_EV_* */
  uint8_t device;  /* 1: lane is a stream id */
} ag_trace_ev;
typedef struct ag_trace_events {
  const ag_trace_ev *ev;
  size_t n, dropped;
  const char *const *lane_name;   /* [AG_TRACE_MAX_LANES], NULL: unnamed */
  const char (*stream_name)[48];  /* [AG_TRACE_MAX_LANES], "": unnamed */
} ag_trace_events;
/* The recorded events, valid until ag__trace_unlock; recording waits. */
AG_HIDDEN ag_trace_events ag__trace_lock(void);
AG_HIDDEN void ag__trace_unlock(void);

#endif
