/* The one place where the host waits for a device. Counting and sync-debug
 * mode live here, so "how many syncs does my step do, and where" has one
 * answer. A sync also collects kernel index errors from the stream. While
 * sync-debug mode is on or a profiler is live, each sync is attributed to
 * the caller's site (see ag_sync_sites in diag.h). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <execinfo.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "anygrad/diag.h"
#include "runtime/tracerec.h"
#include "runtime/devstate.h"

static atomic_int g_mode = -1; /* -1: not read from the environment yet */
static atomic_uint_fast64_t g_syncs;

/* The mode AG_SYNC_DEBUG names, or -1 for a value that names none. */
static int env_mode(const char *e) {
  if (!e || !*e || !strcmp(e, "off") || !strcmp(e, "0")) return AG_SYNC_DEBUG_OFF;
  if (!strcmp(e, "warn") || !strcmp(e, "1")) return AG_SYNC_DEBUG_WARN;
  if (!strcmp(e, "error") || !strcmp(e, "2")) return AG_SYNC_DEBUG_ERROR;
  return -1;
}

ag_status ag__sync_debug_env_check(void) {
  const char *e = getenv("AG_SYNC_DEBUG");
  if (env_mode(e) >= 0) return AG_OK;
  char shown[40];
  size_t k = 0;
  for (; e[k] && k + 1 < sizeof shown; k++) shown[k] = (e[k] >= 0x20 && e[k] < 0x7f) ? e[k] : '?';
  shown[k] = 0;
  return ag_error_set(AG_ERR_INVALID, "AG_SYNC_DEBUG='%s%s' is not off, warn or error (or 0, 1, 2)", shown,
                      e[k] ? "..." : "");
}

static ag_sync_debug mode_now(void) {
  int m = atomic_load_explicit(&g_mode, memory_order_relaxed);
  if (AG_LIKELY(m >= 0)) return (ag_sync_debug)m;
  /* A bad value never gets this far: no device opens with it
   * (ag__sync_debug_env_check). */
  m = env_mode(getenv("AG_SYNC_DEBUG"));
  if (m < 0) m = AG_SYNC_DEBUG_OFF;
  int expect = -1;
  atomic_compare_exchange_strong(&g_mode, &expect, m);
  return (ag_sync_debug)atomic_load(&g_mode);
}

void ag_set_sync_debug(ag_sync_debug mode) { atomic_store(&g_mode, (int)mode); }
ag_sync_debug ag_get_sync_debug(void) { return mode_now(); }
uint64_t ag_sync_count(void) { return atomic_load(&g_syncs); }

/* Call sites. A site is a marked source position (AG_SYNC_SITES macros) or
 * the return address of the first frame outside the library; each is
 * resolved to text once and kept until exit, so its text can name trace
 * events and be handed out borrowed. The table is fixed: sites beyond it
 * share one "other sites" entry. */
#define MAX_SITES 256

typedef struct site {
  const char *call;   /* public call that synced */
  const char *file;   /* marked site, or NULL */
  int line;
  const void *addr;   /* unmarked: return address in the caller */
  char text[160];     /* "train.c:88 (train_step)" / "train_step+0x4c" */
  char label[208];    /* "ag_item at <text>" */
  uint64_t count;
  bool warned;
} site;

static site g_sites[MAX_SITES];
static int g_nsites;
static pthread_mutex_t g_site_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_int g_track; /* profilers that want per-site counts */
static atomic_uint_fast64_t g_wait_ns; /* host time blocked in syncs, while tracked */

static _Thread_local struct {
  const char *file, *func;
  int line;
} tl_mark;

void ag__sync_sites_track(int delta) { atomic_fetch_add(&g_track, delta); }
uint64_t ag__sync_wait_ns(void) { return atomic_load(&g_wait_ns); }

void ag_sync_site_mark(const char *file, int line, const char *func) {
  tl_mark.file = file;
  tl_mark.line = line;
  tl_mark.func = func;
}
double ag_sync_site_done_d(double v) {
  tl_mark.file = NULL;
  return v;
}
ag_status ag_sync_site_done_s(ag_status s) {
  tl_mark.file = NULL;
  return s;
}

static const char *base_name(const char *path) {
  const char *b = path ? strrchr(path, '/') : NULL;
  return b ? b + 1 : (path ? path : "?");
}

/* The first return address outside the library. With the shared library the
 * object file tells them apart; linked statically, the frame after the
 * outermost public ag_ function is the caller's. */
static const void *caller_address(void) {
  void *fr[32];
  int n = backtrace(fr, 32);
  Dl_info self, in;
  if (!dladdr((void *)ag_sync_count, &self)) return NULL;
  const void *after_public = NULL;
  bool in_public = false;
  for (int i = 1; i < n; i++) {
    if (!dladdr(fr[i], &in)) continue;
    if (in.dli_fname && self.dli_fname && strcmp(in.dli_fname, self.dli_fname) != 0)
      return fr[i];
    bool pub = in.dli_sname && !strncmp(in.dli_sname, "ag_", 3) && strncmp(in.dli_sname, "ag__", 4);
    if (pub)
      in_public = true;
    else if (in_public && !after_public)
      after_public = fr[i];
  }
  return after_public;
}

static void describe_address(const void *a, char *out, size_t len) {
  Dl_info in;
  /* A return address points after the call; step back into it so the
   * offset names the calling line for addr2line. */
  const char *pc = (const char *)a - 1;
  if (!a || !dladdr(pc, &in)) {
    snprintf(out, len, "unknown site");
  } else if (in.dli_sname) {
    snprintf(out, len, "%s+0x%tx", in.dli_sname, pc - (const char *)in.dli_saddr);
  } else {
    snprintf(out, len, "%s+0x%tx", base_name(in.dli_fname), pc - (const char *)in.dli_fbase);
  }
}

void ag__describe_address(const void *addr, char *out, size_t len) { describe_address(addr, out, len); }

const char *ag__site_marked(int *out_line) {
  *out_line = tl_mark.line;
  return tl_mark.file;
}

/* The site of the current sync; counted. Caller holds nothing. */
static site *site_of(const char *what) {
  const char *file = tl_mark.file;
  int line = tl_mark.line;
  const char *func = tl_mark.func;
  const void *addr = file ? NULL : caller_address();
  pthread_mutex_lock(&g_site_lock);
  site *s = NULL;
  for (int i = 0; i < g_nsites && !s; i++) {
    site *c = &g_sites[i];
    if (c->call != what && strcmp(c->call, what)) continue;
    if (file ? (c->file && c->line == line && !strcmp(c->file, file)) : (!c->file && c->addr == addr))
      s = c;
  }
  if (!s && g_nsites < MAX_SITES - 1) {
    s = &g_sites[g_nsites++];
    s->call = what;
    s->file = file;
    s->line = line;
    s->addr = addr;
    if (file)
      snprintf(s->text, sizeof s->text, "%s:%d (%s)", base_name(file), line, func ? func : "?");
    else
      describe_address(addr, s->text, sizeof s->text);
    char text[sizeof s->text];
    memcpy(text, s->text, sizeof text);
    snprintf(s->label, sizeof s->label, "%s at %s", what, text);
  } else if (!s) {
    /* Full: one shared entry counts every further site. */
    s = &g_sites[MAX_SITES - 1];
    if (g_nsites < MAX_SITES) {
      g_nsites = MAX_SITES;
      s->call = "sync";
      snprintf(s->text, sizeof s->text, "other sites");
      snprintf(s->label, sizeof s->label, "sync at other sites");
    }
  }
  s->count++;
  pthread_mutex_unlock(&g_site_lock);
  return s;
}

static int by_count_desc(const void *a, const void *b) {
  uint64_t x = ((const ag_sync_site_info *)a)->count, y = ((const ag_sync_site_info *)b)->count;
  return x < y ? 1 : x > y ? -1 : 0;
}

int ag_sync_sites(ag_sync_site_info *out, int max) {
  if (!out || max <= 0) return 0;
  ag_sync_site_info all[MAX_SITES];
  pthread_mutex_lock(&g_site_lock);
  int n = g_nsites;
  for (int i = 0; i < n; i++)
    all[i] = (ag_sync_site_info){g_sites[i].text, g_sites[i].call, g_sites[i].count};
  pthread_mutex_unlock(&g_site_lock);
  qsort(all, (size_t)n, sizeof all[0], by_count_desc);
  if (n > max) n = max;
  memcpy(out, all, (size_t)n * sizeof all[0]);
  return n;
}

typedef struct sync_ctx {
  site *site;
  uint64_t t0;
} sync_ctx;

static ag_status before_sync(ag_devstate *ds, const char *what, sync_ctx *cx) {
  ag_sync_debug m = mode_now();
  cx->site = NULL;
  cx->t0 = 0;
  bool tracing = ag__trace_on();
  if (AG_LIKELY(m == AG_SYNC_DEBUG_OFF && !tracing &&
                atomic_load_explicit(&g_track, memory_order_relaxed) == 0))
    return AG_OK;
  site *s = site_of(what);
  cx->site = s;
  if (m == AG_SYNC_DEBUG_ERROR)
    return ag_error_set(AG_ERR_SYNC, "%s: host sync on %s at %s refused (sync-debug mode is error)",
                        what, ds->label, s->text);
  if (m == AG_SYNC_DEBUG_WARN) {
    pthread_mutex_lock(&g_site_lock);
    bool first = !s->warned;
    s->warned = true;
    pthread_mutex_unlock(&g_site_lock);
    if (first) fprintf(stderr, "anygrad: warning: host sync in %s on %s\n", s->label, ds->label);
  }
  cx->t0 = ag__now_ns();
  return AG_OK;
}

static void after_sync(const sync_ctx *cx) {
  if (!cx->t0) return;
  uint64_t t1 = ag__now_ns();
  atomic_fetch_add_explicit(&g_wait_ns, t1 - cx->t0, memory_order_relaxed);
  ag__trace_host("sync", cx->site->label, cx->t0, t1, NULL, 0);
}

static const char *kop_public_name(int kop) {
  switch (kop) {
    case AG_K_EMBEDDING: return "ag_embedding: index";
    case AG_K_EMBEDDING_BWD: return "ag_embedding backward: index";
    case AG_K_CROSS_ENTROPY: return "ag_cross_entropy: target";
    case AG_K_CROSS_ENTROPY_BWD: return "ag_cross_entropy backward: target";
    case AG_K_GATHER: return "ag_gather/ag_index_select: index";
    case AG_K_ONE_HOT: return "ag_one_hot: index";
    case AG_K_SCATTER_ADD: return "ag_scatter_add/ag_index_add: index";
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

ag_status ag__sync_refused(ag_devstate *ds, const char *what) {
  if (AG_LIKELY(mode_now() != AG_SYNC_DEBUG_ERROR)) return AG_OK;
  sync_ctx cx;
  return before_sync(ds, what, &cx);
}

ag_status ag__sync_stream(ag_stream *s, const char *what) {
  sync_ctx cx;
  ag_status st = before_sync(s->ds, what, &cx);
  if (st != AG_OK) return st;
  atomic_fetch_add_explicit(&g_syncs, 1, memory_order_relaxed);
  st = s->ds->be->stream_synchronize(s->bs);
  after_sync(&cx);
  if (st != AG_OK) return st;
  return collect_kernel_error(s);
}

ag_status ag__sync_device(ag_devstate *ds, const char *what) {
  sync_ctx cx;
  ag_status st = before_sync(ds, what, &cx);
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
  after_sync(&cx);
  return first;
}

ag_status ag__sync_event(ag_event *e, const char *what) {
  sync_ctx cx;
  ag_status st = before_sync(e->ds, what, &cx);
  if (st != AG_OK) return st;
  atomic_fetch_add_explicit(&g_syncs, 1, memory_order_relaxed);
  st = e->ds->be->event_synchronize(e->be);
  after_sync(&cx);
  return st;
}
