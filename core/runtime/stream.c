/* Streams and events: thin wrappers that check arguments and call through
 * the backend vtable. Streams are listed on their device so a device-wide
 * synchronize reaches every one of them. */
#include <stdlib.h>

#include "runtime/devstate.h"

ag_stream *ag_stream_default(ag_device d) {
  ag_devstate *ds = ag__devstate(d);
  return ds ? ds->default_stream : NULL;
}

ag_stream *ag_stream_create(ag_device d) {
  ag_devstate *ds = ag__devstate(d);
  if (!ds) return NULL;
  ag_stream *s = calloc(1, sizeof *s);
  if (!s) {
    ag_error_set(AG_ERR_OOM, "ag_stream_create: out of host memory");
    return NULL;
  }
  if (ds->be->stream_create(ds->ord, &s->bs) != AG_OK) {
    free(s);
    return NULL;
  }
  s->ds = ds;
  pthread_mutex_lock(&ds->lock);
  s->id = ds->next_stream_id++;
  s->next = ds->streams->next;
  ds->streams->next = s;
  pthread_mutex_unlock(&ds->lock);
  return s;
}

void ag_stream_destroy(ag_stream *s) {
  if (!s || s->is_default) return;
  ag_devstate *ds = s->ds;
  ag__sync_stream(s, "ag_stream_destroy");
  pthread_mutex_lock(&ds->lock);
  for (ag_stream **p = &ds->streams; *p; p = &(*p)->next)
    if (*p == s) {
      *p = s->next;
      break;
    }
  pthread_mutex_unlock(&ds->lock);
  /* A thread that made s current falls back to the default stream. */
  if (ag__current_stream(ds) == s) ag_stream_set_current(ds->dev, NULL);
  if (ag__memory_hooks.stream_destroyed) ag__memory_hooks.stream_destroyed(ds, s);
  ds->be->stream_destroy(s->bs);
  free(s);
}

ag_device ag_stream_device(const ag_stream *s) { return s ? s->ds->dev : AG_CPU; }

ag_status ag_stream_synchronize(ag_stream *s) {
  if (!s) return ag_error_set(AG_ERR_INVALID, "ag_stream_synchronize: NULL stream");
  return ag__sync_stream(s, "ag_stream_synchronize");
}

bool ag_stream_query(ag_stream *s) {
  if (!s) return true;
  bool done = false;
  if (s->ds->be->stream_query(s->bs, &done) != AG_OK) return false;
  return done;
}

ag_event *ag_event_create(ag_device d, bool timing) {
  ag_devstate *ds = ag__devstate(d);
  if (!ds) return NULL;
  ag_event *e = calloc(1, sizeof *e);
  if (!e) {
    ag_error_set(AG_ERR_OOM, "ag_event_create: out of host memory");
    return NULL;
  }
  if (ds->be->event_create(ds->ord, timing, &e->be) != AG_OK) {
    free(e);
    return NULL;
  }
  e->ds = ds;
  e->timing = timing;
  return e;
}

void ag_event_destroy(ag_event *e) {
  if (!e) return;
  e->ds->be->event_destroy(e->be);
  free(e);
}

ag_status ag_event_record(ag_event *e, ag_stream *s) {
  if (!e || !s) return ag_error_set(AG_ERR_INVALID, "ag_event_record: NULL argument");
  if (e->ds != s->ds)
    return ag_error_set(AG_ERR_DEVICE, "ag_event_record: event on %s, stream on %s", e->ds->label,
                        s->ds->label);
  ag_status st = e->ds->be->event_record(e->be, s->bs);
  if (st == AG_OK) e->recorded = true;
  return st;
}

ag_status ag_stream_wait_event(ag_stream *s, ag_event *e) {
  if (!e || !s) return ag_error_set(AG_ERR_INVALID, "ag_stream_wait_event: NULL argument");
  if (e->ds != s->ds)
    return ag_error_set(AG_ERR_DEVICE, "ag_stream_wait_event: event on %s, stream on %s",
                        e->ds->label, s->ds->label);
  if (!e->recorded) return AG_OK;
  return s->ds->be->stream_wait_event(s->bs, e->be);
}

bool ag_event_query(ag_event *e) {
  if (!e || !e->recorded) return true;
  bool done = false;
  if (e->ds->be->event_query(e->be, &done) != AG_OK) return false;
  return done;
}

ag_status ag_event_synchronize(ag_event *e) {
  if (!e) return ag_error_set(AG_ERR_INVALID, "ag_event_synchronize: NULL event");
  if (!e->recorded) return AG_OK;
  return ag__sync_event(e, "ag_event_synchronize");
}

ag_status ag_event_elapsed_ms(ag_event *start, ag_event *end, float *out_ms) {
  if (!start || !end || !out_ms)
    return ag_error_set(AG_ERR_INVALID, "ag_event_elapsed_ms: NULL argument");
  if (!start->timing || !end->timing)
    return ag_error_set(AG_ERR_INVALID, "ag_event_elapsed_ms: events were created without timing");
  if (!start->recorded || !end->recorded)
    return ag_error_set(AG_ERR_STATE, "ag_event_elapsed_ms: event not recorded");
  if (start->ds != end->ds)
    return ag_error_set(AG_ERR_DEVICE, "ag_event_elapsed_ms: events on %s and %s",
                        start->ds->label, end->ds->label);
  if (!ag_event_query(start) || !ag_event_query(end))
    return ag_error_set(AG_ERR_STATE, "ag_event_elapsed_ms: events have not completed");
  return start->ds->be->event_elapsed_ms(start->be, end->be, out_ms);
}
