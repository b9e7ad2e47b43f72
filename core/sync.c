/* The one place where the host waits for a device. Counting and sync-debug
 * mode live here, so "how many syncs does my step do, and where" has one
 * answer. A sync also collects kernel index errors from the stream. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "anygrad/diag.h"
#include "internal.h"

static atomic_int g_mode = -1; /* -1: not read from the environment yet */
static atomic_uint_fast64_t g_syncs;

/* Sites already warned about (by name); a small fixed table is enough since
 * the set of syncing public calls is small. */
#define MAX_SITES 64
static const char *g_warned[MAX_SITES];
static pthread_mutex_t g_warn_lock = PTHREAD_MUTEX_INITIALIZER;

static ag_sync_debug mode_now(void) {
  int m = atomic_load_explicit(&g_mode, memory_order_relaxed);
  if (AG_LIKELY(m >= 0)) return (ag_sync_debug)m;
  const char *e = getenv("AG_SYNC_DEBUG");
  m = AG_SYNC_DEBUG_OFF;
  if (e && (!strcmp(e, "warn") || !strcmp(e, "1"))) m = AG_SYNC_DEBUG_WARN;
  if (e && (!strcmp(e, "error") || !strcmp(e, "2"))) m = AG_SYNC_DEBUG_ERROR;
  int expect = -1;
  atomic_compare_exchange_strong(&g_mode, &expect, m);
  return (ag_sync_debug)atomic_load(&g_mode);
}

void ag_set_sync_debug(ag_sync_debug mode) { atomic_store(&g_mode, (int)mode); }
ag_sync_debug ag_get_sync_debug(void) { return mode_now(); }
uint64_t ag_sync_count(void) { return atomic_load(&g_syncs); }

static ag_status before_sync(ag_devstate *ds, const char *what) {
  ag_sync_debug m = mode_now();
  if (AG_LIKELY(m == AG_SYNC_DEBUG_OFF)) return AG_OK;
  if (m == AG_SYNC_DEBUG_ERROR)
    return ag_error_set(AG_ERR_SYNC, "%s: host sync on %s refused (sync-debug mode is error)", what,
                        ds->label);
  pthread_mutex_lock(&g_warn_lock);
  bool seen = false;
  int i = 0;
  for (; i < MAX_SITES && g_warned[i]; i++)
    if (!strcmp(g_warned[i], what)) seen = true;
  if (!seen && i < MAX_SITES) g_warned[i] = what;
  pthread_mutex_unlock(&g_warn_lock);
  if (!seen) fprintf(stderr, "anygrad: warning: host sync in %s on %s\n", what, ds->label);
  return AG_OK;
}

static const char *kop_public_name(int kop) {
  switch (kop) {
    case AG_K_EMBEDDING: return "ag_embedding: index";
    case AG_K_EMBEDDING_BWD: return "ag_embedding backward: index";
    case AG_K_CROSS_ENTROPY: return "ag_cross_entropy: target";
    case AG_K_CROSS_ENTROPY_BWD: return "ag_cross_entropy backward: target";
    default: return "kernel: index";
  }
}

/* Turn a kernel error word into a status. Called after syncs and launches. */
static ag_status collect_kernel_error(ag_stream *s) {
  if (!s->ds->be->take_kernel_error) return AG_OK;
  ag_kernel_error ke = {0};
  if (s->ds->be->take_kernel_error(s->bs, &ke) != AG_OK || ke.code == 0) return AG_OK;
  return ag_error_set((ag_status)ke.code, "%s %lld out of range [0, %lld) on %s",
                      kop_public_name(ke.kop), (long long)ke.index, (long long)ke.limit,
                      s->ds->label);
}

AG_HIDDEN ag_status ag__kernel_error_check(ag_stream *s) { return collect_kernel_error(s); }

ag_status ag__sync_stream(ag_stream *s, const char *what) {
  ag_status st = before_sync(s->ds, what);
  if (st != AG_OK) return st;
  atomic_fetch_add_explicit(&g_syncs, 1, memory_order_relaxed);
  st = s->ds->be->stream_synchronize(s->bs);
  if (st != AG_OK) return st;
  return collect_kernel_error(s);
}

ag_status ag__sync_device(ag_devstate *ds, const char *what) {
  ag_status st = before_sync(ds, what);
  if (st != AG_OK) return st;
  atomic_fetch_add_explicit(&g_syncs, 1, memory_order_relaxed);
  pthread_mutex_lock(&ds->lock);
  ag_status first = AG_OK;
  for (ag_stream *s = ds->streams; s; s = s->next) {
    st = ds->be->stream_synchronize(s->bs);
    if (st == AG_OK) st = collect_kernel_error(s);
    if (st != AG_OK && first == AG_OK) first = st;
  }
  pthread_mutex_unlock(&ds->lock);
  return first;
}

ag_status ag__sync_event(ag_event *e, const char *what) {
  ag_status st = before_sync(e->ds, what);
  if (st != AG_OK) return st;
  atomic_fetch_add_explicit(&g_syncs, 1, memory_order_relaxed);
  return e->ds->be->event_synchronize(e->be);
}
