/* The backend registry: the built-in CPU backend plus run-time modules
 * (libanygrad-<name>.so) found on AG_BACKEND_PATH, beside libanygrad.so (the
 * build tree) or in anygrad/ beside it (the installed <libdir>/anygrad/).
 * Loaded once (pthread_once); device states are created lazily under a
 * mutex and live until exit. This is the process's only global registry. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../backends/cpu/cpu_backend.h"
#include "internal.h"

typedef struct backend_slot {
  const ag_backend *be;
  void *dl;
  int count;
  char reason[512];
  ag_devstate *dev[AG_MAX_DEVICES];
} backend_slot;

static const char *const k_names[AG_BACKEND_COUNT] = {"cpu", "cuda", "hip", "opencl", "gpuemu"};
static backend_slot g_slots[AG_BACKEND_COUNT];
static pthread_once_t g_once[AG_BACKEND_COUNT] = {PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT,
                                                   PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT};
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static _Thread_local ag_stream *tl_current[AG_BACKEND_COUNT][AG_MAX_DEVICES];

const char *ag_backend_name(ag_backend_kind kind) {
  return (kind >= 0 && kind < AG_BACKEND_COUNT) ? k_names[kind] : "?";
}

/* AG_BACKENDS="cpu,opencl" restricts which modules are loaded. */
static bool backend_enabled(const char *name) {
  const char *env = getenv("AG_BACKENDS");
  if (!env || !*env) return true;
  size_t n = strlen(name);
  for (const char *p = env; *p;) {
    const char *e = strchr(p, ',');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    if (len == n && strncmp(p, name, n) == 0) return true;
    if (!e) break;
    p = e + 1;
  }
  return false;
}

static void *try_open(const char *dir, const char *file, char *err, size_t errlen) {
  char path[PATH_MAX];
  int n = snprintf(path, sizeof path, "%s/%s", dir, file);
  if (n < 0 || (size_t)n >= sizeof path) {
    if (!err[0]) snprintf(err, errlen, "module path too long");
    return NULL;
  }
  if (access(path, F_OK) != 0) {
    if (!err[0]) snprintf(err, errlen, "not found in %.340s (backend not built)", dir);
    return NULL;
  }
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char *m = dlerror();
    /* Prefer a message about a present-but-broken module over "not found". */
    if (m) snprintf(err, errlen, "failed to load: %s", m);
  }
  return h;
}

void *ag__module_open(const char *file, char *err, size_t errlen) {
  void *h = NULL;
  err[0] = 0;
  const char *env = getenv("AG_BACKEND_PATH");
  if (env && *env) {
    char buf[PATH_MAX];
    snprintf(buf, sizeof buf, "%s", env);
    for (char *save = NULL, *d = strtok_r(buf, ":", &save); d && !h; d = strtok_r(NULL, ":", &save))
      h = try_open(d, file, err, errlen);
  }
  if (!h) {
    Dl_info info;
    if (dladdr((void *)&ag_backend_name, &info) && info.dli_fname) {
      char self[PATH_MAX], real[PATH_MAX];
      snprintf(self, sizeof self, "%s", realpath(info.dli_fname, real) ? real : info.dli_fname);
      const char *dir = dirname(self);
      h = try_open(dir, file, err, errlen);
      if (!h) {
        char sub[PATH_MAX];
        snprintf(sub, sizeof sub, "%s/anygrad", dir);
        h = try_open(sub, file, err, errlen);
        /* a "failed to load" from either place is kept over "not found" */
        if (!h && strncmp(err, "not found", 9) == 0)
          snprintf(err, errlen, "not found in %.170s or %.170s/anygrad (module not built)", dir, dir);
      }
    }
  }
  return h;
}

static void load_module(ag_backend_kind kind) {
  backend_slot *sl = &g_slots[kind];
  const char *name = k_names[kind];
  if (!backend_enabled(name)) {
    snprintf(sl->reason, sizeof sl->reason, "disabled by AG_BACKENDS");
    return;
  }
  char file[64];
  snprintf(file, sizeof file, "libanygrad-%s.so", name);
  char err[400] = "";
  void *h = ag__module_open(file, err, sizeof err);
  if (!h) {
    snprintf(sl->reason, sizeof sl->reason, "%s %s", file, err[0] ? err : "not found (backend not built)");
    return;
  }
  ag_backend_module_get_fn get = (ag_backend_module_get_fn)dlsym(h, AG_BACKEND_MODULE_SYMBOL);
  const ag_backend *be = get ? get() : NULL;
  if (!be) {
    snprintf(sl->reason, sizeof sl->reason, "%s: no %s symbol", file, AG_BACKEND_MODULE_SYMBOL);
    dlclose(h);
    return;
  }
  if (be->abi_version != AG_BACKEND_ABI_VERSION) {
    snprintf(sl->reason, sizeof sl->reason, "%s: backend ABI %u, core expects %u", file,
             be->abi_version, AG_BACKEND_ABI_VERSION);
    dlclose(h);
    return;
  }
  sl->dl = h;
  sl->be = be;
}

static void init_slot(ag_backend_kind kind) {
  backend_slot *sl = &g_slots[kind];
  if (kind == AG_BACKEND_CPU) sl->be = ag__cpu_backend();
  else load_module(kind);
  if (!sl->be) return;
  int n = 0;
  char reason[400] = "";
  ag_status st = sl->be->init(&n, reason, sizeof reason);
  if (st != AG_OK || n <= 0) {
    snprintf(sl->reason, sizeof sl->reason, "%s: %s", k_names[kind],
             reason[0] ? reason : (st != AG_OK ? ag_last_error() : "no devices"));
    sl->be = NULL;
    sl->count = 0;
    ag_error_clear();
    return;
  }
  sl->count = n > AG_MAX_DEVICES ? AG_MAX_DEVICES : n;
}

/* Each backend loads on its first use, so a CPU-only program never pays for
 * starting GPU runtimes (about 0.6 s for the CUDA, HIP and OpenCL modules). */
static void init_cpu(void) { init_slot(AG_BACKEND_CPU); }
static void init_cuda(void) { init_slot(AG_BACKEND_CUDA); }
static void init_hip(void) { init_slot(AG_BACKEND_HIP); }
static void init_opencl(void) { init_slot(AG_BACKEND_OPENCL); }
static void init_gpuemu(void) { init_slot(AG_BACKEND_GPUEMU); }
static void (*const k_init[AG_BACKEND_COUNT])(void) = {init_cpu, init_cuda, init_hip, init_opencl, init_gpuemu};

static inline void ensure_init(int kind) { pthread_once(&g_once[kind], k_init[kind]); }

bool ag_backend_available(ag_backend_kind kind, const char **out_reason) {
  if (kind < 0 || kind >= AG_BACKEND_COUNT) {
    if (out_reason) *out_reason = "unknown backend";
    return false;
  }
  ensure_init(kind);
  if (out_reason) *out_reason = g_slots[kind].be ? "" : g_slots[kind].reason;
  return g_slots[kind].be != NULL;
}

int ag_backend_device_count(ag_backend_kind kind) {
  if (kind < 0 || kind >= AG_BACKEND_COUNT) return 0;
  ensure_init(kind);
  return g_slots[kind].count;
}

ag_devstate *ag__devstate(ag_device d) {
  if (AG_UNLIKELY(d.backend < 0 || d.backend >= AG_BACKEND_COUNT)) {
    ag_error_set(AG_ERR_DEVICE, "invalid device (backend %d)", d.backend);
    return NULL;
  }
  backend_slot *sl = &g_slots[d.backend];
  if (AG_LIKELY(d.index >= 0 && d.index < AG_MAX_DEVICES)) {
    ag_devstate *ds = __atomic_load_n(&sl->dev[d.index], __ATOMIC_ACQUIRE);
    if (AG_LIKELY(ds != NULL)) return ds;
  }
  ensure_init(d.backend);
  if (!sl->be) {
    ag_error_set(AG_ERR_UNAVAILABLE, "backend %s is unavailable: %s", k_names[d.backend],
                 sl->reason);
    return NULL;
  }
  if (d.index < 0 || d.index >= sl->count) {
    ag_error_set(AG_ERR_DEVICE, "device %s:%d does not exist (%d device%s)", k_names[d.backend],
                 d.index, sl->count, sl->count == 1 ? "" : "s");
    return NULL;
  }
  pthread_mutex_lock(&g_lock);
  ag_devstate *ds = sl->dev[d.index];
  if (!ds) {
    ds = calloc(1, sizeof *ds);
    ag_stream *s = calloc(1, sizeof *s);
    ag_bstream *bs = NULL;
    if (!ds || !s || sl->be->stream_create(d.index, &bs) != AG_OK) {
      free(ds);
      free(s);
      pthread_mutex_unlock(&g_lock);
      if (ag_last_status() == AG_OK) ag_error_set(AG_ERR_OOM, "out of host memory");
      return NULL;
    }
    ds->dev = d;
    ds->be = sl->be;
    ds->ord = d.index;
    snprintf(ds->label, sizeof ds->label, "%s:%d", k_names[d.backend], d.index);
    s->ds = ds;
    s->bs = bs;
    s->is_default = true;
    s->id = 0;
    ds->default_stream = s;
    pthread_mutex_init(&ds->lock, NULL);
    ds->streams = s;
    ds->next_stream_id = 1;
    ds->alloc = ag__sync_debug_env_check() == AG_OK ? ag__allocator_create(ds) : NULL;
    if (!ds->alloc) {
      sl->be->stream_destroy(bs);
      free(s);
      free(ds);
      pthread_mutex_unlock(&g_lock);
      return NULL;
    }
    __atomic_store_n(&sl->dev[d.index], ds, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&g_lock);
  return ds;
}

ag_stream *ag__current_stream(ag_devstate *ds) {
  ag_stream *s = tl_current[ds->dev.backend][ds->ord];
  return s ? s : ds->default_stream;
}

ag_stream *ag_stream_current(ag_device d) {
  ag_devstate *ds = ag__devstate(d);
  return ds ? ag__current_stream(ds) : NULL;
}

ag_stream *ag_stream_set_current(ag_device d, ag_stream *s) {
  ag_devstate *ds = ag__devstate(d);
  if (!ds) return NULL;
  if (s && s->ds != ds) {
    ag_error_set(AG_ERR_DEVICE, "ag_stream_set_current: stream belongs to %s, not %s",
                 s->ds->label, ds->label);
    return NULL;
  }
  ag_stream *prev = ag__current_stream(ds);
  tl_current[d.backend][d.index] = (s && !s->is_default) ? s : NULL;
  return prev;
}

ag_status ag_device_parse(const char *s, ag_device *out_device) {
  if (!s || !out_device)
    return ag_error_set(AG_ERR_INVALID, "ag_device_parse: NULL argument");
  const char *colon = strchr(s, ':');
  size_t n = colon ? (size_t)(colon - s) : strlen(s);
  int kind = -1;
  for (int k = 0; k < AG_BACKEND_COUNT; k++)
    if (strlen(k_names[k]) == n && strncmp(s, k_names[k], n) == 0) kind = k;
  long idx = 0;
  if (colon) {
    char *end = NULL;
    idx = strtol(colon + 1, &end, 10);
    if (end == colon + 1 || *end != 0 || idx < 0) kind = -2;
  }
  if (kind < 0)
    return ag_error_set(AG_ERR_INVALID,
                        "ag_device_parse: '%s' is not a device (expected cpu, cuda:N, hip:N, "
                        "opencl:N or gpuemu:N)", s);
  ensure_init(kind);
  backend_slot *sl = &g_slots[kind];
  if (!sl->be)
    return ag_error_set(AG_ERR_UNAVAILABLE, "ag_device_parse: backend %s is unavailable: %s",
                        k_names[kind], sl->reason);
  if (idx >= sl->count)
    return ag_error_set(AG_ERR_DEVICE, "ag_device_parse: %s has %d device%s, no index %ld",
                        k_names[kind], sl->count, sl->count == 1 ? "" : "s", idx);
  out_device->backend = (int16_t)kind;
  out_device->index = (int16_t)idx;
  return AG_OK;
}

char *ag_device_str(ag_device d, char *buf, size_t len) {
  if (buf && len) snprintf(buf, len, "%s:%d", ag_backend_name((ag_backend_kind)d.backend), d.index);
  return buf;
}

bool ag_device_eq(ag_device a, ag_device b) {
  return a.backend == b.backend && a.index == b.index;
}

ag_device ag_device_best(void) {
  /* the emulator is a testing device: never chosen, not even loaded here */
  for (int k = 0; k < AG_BACKEND_COUNT; k++)
    if (k != AG_BACKEND_GPUEMU) ensure_init(k);
  if (g_slots[AG_BACKEND_CUDA].count > 0) return (ag_device){AG_BACKEND_CUDA, 0};
  if (g_slots[AG_BACKEND_HIP].count > 0) return (ag_device){AG_BACKEND_HIP, 0};
  backend_slot *ocl = &g_slots[AG_BACKEND_OPENCL];
  for (int i = 0; i < ocl->count; i++) {
    ag_device_props p;
    /* A CPU OpenCL device (PoCL) is no faster than the native backend. */
    if (ocl->be->device_props(i, &p) == AG_OK && !p.unified_memory)
      return (ag_device){AG_BACKEND_OPENCL, (int16_t)i};
  }
  return AG_CPU;
}

ag_status ag_device_props_get(ag_device d, ag_device_props *out_props) {
  if (!out_props) return ag_error_set(AG_ERR_INVALID, "ag_device_props_get: NULL out_props");
  ag_devstate *ds = ag__devstate(d);
  if (!ds) return ag_last_status();
  memset(out_props, 0, sizeof *out_props);
  return ds->be->device_props(ds->ord, out_props);
}

ag_status ag_device_mem_info(ag_device d, size_t *out_free, size_t *out_total) {
  ag_devstate *ds = ag__devstate(d);
  if (!ds) return ag_last_status();
  size_t f = 0, t = 0;
  ag_status st = ds->be->mem_info(ds->ord, &f, &t);
  if (out_free) *out_free = f;
  if (out_total) *out_total = t;
  return st;
}

ag_status ag_device_synchronize(ag_device d) {
  ag_devstate *ds = ag__devstate(d);
  if (!ds) return ag_last_status();
  return ag__sync_device(ds, "ag_device_synchronize");
}
