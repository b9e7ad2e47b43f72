/* The CPU backend's vtable: host memory (aligned heap segments, mmap-based
 * virtual memory, locked staging pages), streams and events in two modes
 * (inline on the caller's thread, or one worker thread per stream), copies,
 * and the launch path into the kernels of cpu_kernels.c. */
#include "anygrad/checks.h"
#include "anygrad/dlpack.h"
#include "cpu_backend.h"
#include "cpu_portable.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "anygrad/cpu.h"
#include "tensor/half.h"

/* ---- stream mode: the one process-wide setting of this backend. It is
 * guarded by g_mode_mu and frozen once the first stream exists, because
 * inline and threaded streams cannot wait on each other's events. ---- */

static pthread_mutex_t g_mode_mu = PTHREAD_MUTEX_INITIALIZER;
static ag_cpu_stream_mode g_mode = AG_CPU_STREAMS_INLINE;
static bool g_mode_explicit; /* set by the API: the environment no longer applies */
static bool g_mode_frozen;   /* a stream exists */

ag_status ag_cpu_set_stream_mode(ag_cpu_stream_mode mode) {
  if (mode != AG_CPU_STREAMS_INLINE && mode != AG_CPU_STREAMS_THREADED)
    return ag_error_set(AG_ERR_INVALID, "ag_cpu_set_stream_mode: unknown mode %d", (int)mode);
  ag_status st = AG_OK;
  pthread_mutex_lock(&g_mode_mu);
  if (g_mode_frozen && mode != g_mode)
    st = ag_error_set(AG_ERR_STATE,
                      "ag_cpu_set_stream_mode: CPU streams already exist (mode is %s)",
                      g_mode == AG_CPU_STREAMS_INLINE ? "inline" : "threaded");
  else {
    g_mode = mode;
    g_mode_explicit = true;
  }
  pthread_mutex_unlock(&g_mode_mu);
  return st;
}

ag_cpu_stream_mode ag_cpu_stream_mode_get(void) {
  pthread_mutex_lock(&g_mode_mu);
  ag_cpu_stream_mode m = g_mode;
  pthread_mutex_unlock(&g_mode_mu);
  return m;
}

/* ---- device ---- */

static ag_status cpu_init(int *out_device_count, char *reason, size_t reason_len) {
  const char *env = getenv("AG_CPU_STREAMS");
  pthread_mutex_lock(&g_mode_mu);
  ag_status st = AG_OK;
  if (env && *env && !g_mode_explicit && !g_mode_frozen) {
    if (strcmp(env, "inline") == 0)
      g_mode = AG_CPU_STREAMS_INLINE;
    else if (strcmp(env, "threaded") == 0)
      g_mode = AG_CPU_STREAMS_THREADED;
    else {
      char shown[64]; /* escaped: no raw control sequences in the reason */
      snprintf(reason, reason_len, "AG_CPU_STREAMS='%s': expected 'inline' or 'threaded'",
               ag_escape(env, shown, sizeof shown));
      st = AG_ERR_UNAVAILABLE;
    }
  }
  pthread_mutex_unlock(&g_mode_mu);
  /* read when the first GEMM runs (cpu_gemm.c); a typo is refused here */
  const char *gemm = getenv("AG_CPU_GEMM");
  if (st == AG_OK && gemm && *gemm && strcmp(gemm, "onednn") && strcmp(gemm, "openblas") && strcmp(gemm, "blas")) {
    char shown[64];
    snprintf(reason, reason_len, "AG_CPU_GEMM='%s': expected onednn, openblas or blas",
             ag_escape(gemm, shown, sizeof shown));
    st = AG_ERR_UNAVAILABLE;
  }
  if (st != AG_OK) return ag_error_set(st, "cpu backend: %s", reason);
  *out_device_count = 1;
  return AG_OK;
}

/* Value of "key : value" from a /proc text file, or false. */
static bool proc_field(const char *path, const char *key, char *out, size_t len) {
  FILE *f = fopen(path, "r");
  if (!f) return false;
  char line[512];
  size_t klen = strlen(key);
  bool found = false;
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, key, klen) != 0) continue;
    const char *p = line + klen;
    while (*p == ' ' || *p == '\t' || *p == ':') p++;
    snprintf(out, len, "%s", p);
    out[strcspn(out, "\n")] = 0;
    found = true;
    break;
  }
  fclose(f);
  return found;
}

static ag_status cpu_mem_info(int dev, size_t *out_free, size_t *out_total) {
  char v[64];
  long page = sysconf(_SC_PAGESIZE);
  size_t total = (size_t)sysconf(_SC_PHYS_PAGES) * (size_t)page;
  size_t avail = (size_t)sysconf(_SC_AVPHYS_PAGES) * (size_t)page;
  if (proc_field("/proc/meminfo", "MemTotal", v, sizeof v)) total = strtoull(v, NULL, 10) * 1024u;
  if (proc_field("/proc/meminfo", "MemAvailable", v, sizeof v))
    avail = strtoull(v, NULL, 10) * 1024u;
  if (out_free) *out_free = avail;
  if (out_total) *out_total = total;
  return AG_OK;
}

static ag_status cpu_device_props(int dev, ag_device_props *out) {
  memset(out, 0, sizeof *out);
  if (!proc_field("/proc/cpuinfo", "model name", out->name, sizeof out->name))
    snprintf(out->name, sizeof out->name, "CPU");
  if (!proc_field("/proc/cpuinfo", "vendor_id", out->vendor, sizeof out->vendor))
    snprintf(out->vendor, sizeof out->vendor, "unknown");
#if defined(AG_X86)
  snprintf(out->arch, sizeof out->arch, "x86-64%s%s%s",
           __builtin_cpu_supports("avx2") ? " avx2" : "",
           __builtin_cpu_supports("avx512f") ? " avx512f" : "",
           ag__cpu_has_f16c() ? " f16c" : "");
#elif defined(__aarch64__)
  snprintf(out->arch, sizeof out->arch, "aarch64");
#else
  snprintf(out->arch, sizeof out->arch, "cpu");
#endif
  cpu_mem_info(dev, NULL, &out->total_memory);
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  out->compute_units = n > 0 ? (int)n : 1;
  out->native_f16 = false; /* half is a storage type here: math runs in f32 */
  out->native_bf16 = false;
  out->virtual_memory = true;
  out->unified_memory = true;
  return AG_OK;
}

/* ---- memory ---- */

static ag_status cpu_segment_alloc(int dev, size_t bytes, void **out_base) {
  void *p = NULL;
  size_t align = bytes >= ((size_t)1 << 20) ? 4096 : 64; /* page-align big blocks */
  if (posix_memalign(&p, align, bytes ? bytes : 64) != 0)
    return ag_error_set(AG_ERR_OOM, "cpu: cannot allocate %zu bytes of host memory", bytes);
  *out_base = p;
  return AG_OK;
}

static void cpu_segment_free(int dev, void *base) { free(base); }

/* 2 MiB like CUDA's granularity and x86 huge pages, so expandable segments
 * grow in the same steps on every backend. */
static size_t cpu_vm_granularity(int dev) { return (size_t)2 << 20; }

static ag_status cpu_vm_reserve(int dev, size_t bytes, void **out_base) {
  void *p = mmap(NULL, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED)
    return ag_error_set(AG_ERR_OOM, "cpu: cannot reserve %zu bytes of address space: %s", bytes,
                        strerror(errno));
  *out_base = p;
  return AG_OK;
}

static ag_status cpu_vm_map(int dev, void *base, size_t offset, size_t bytes) {
  if (mprotect((char *)base + offset, bytes, PROT_READ | PROT_WRITE) != 0)
    return ag_error_set(errno == ENOMEM ? AG_ERR_OOM : AG_ERR_BACKEND,
                        "cpu: cannot commit %zu bytes at offset %zu: %s", bytes, offset,
                        strerror(errno));
  return AG_OK;
}

static ag_status cpu_vm_unmap(int dev, void *base, size_t offset, size_t bytes) {
  char *p = (char *)base + offset;
  /* Return the pages to the OS first, then make stray accesses fault. */
  if (madvise(p, bytes, MADV_DONTNEED) != 0 || mprotect(p, bytes, PROT_NONE) != 0)
    return ag_error_set(AG_ERR_BACKEND, "cpu: cannot decommit %zu bytes at offset %zu: %s",
                        bytes, offset, strerror(errno));
  return AG_OK;
}

static void cpu_vm_release(int dev, void *base, size_t bytes) { munmap(base, bytes); }

/* Pinned blocks carry their length in a header page so pinned_free can
 * munlock and unmap without being told the size. */
static ag_status cpu_pinned_alloc(int dev, size_t bytes, void **out_ptr) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  size_t len = page + ((bytes + page - 1) / page) * page;
  char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    return ag_error_set(AG_ERR_OOM, "cpu: cannot allocate %zu bytes of pinned memory", bytes);
  memcpy(p, &len, sizeof len);
  (void)mlock(p + page, len - page); /* best effort: RLIMIT_MEMLOCK may refuse */
  *out_ptr = p + page;
  return AG_OK;
}

static void cpu_pinned_free(int dev, void *ptr) {
  if (!ptr) return;
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  char *p = (char *)ptr - page;
  size_t len;
  memcpy(&len, p, sizeof len);
  munlock(ptr, len - page);
  munmap(p, len);
}

/* ---- events ---- */

struct ag_bevent {
  bool timing;
  atomic_int refs; /* the owner plus each queued record/wait item */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  uint64_t recorded; /* generation of the latest record */
  uint64_t done;     /* latest completed generation */
  struct timespec when;
};

static void event_unref(ag_bevent *e) {
  if (atomic_fetch_sub_explicit(&e->refs, 1, memory_order_acq_rel) == 1) {
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
    free(e);
  }
}

static void event_complete(ag_bevent *e, uint64_t gen) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  pthread_mutex_lock(&e->mu);
  if (gen > e->done) {
    e->done = gen;
    e->when = now;
  }
  pthread_cond_broadcast(&e->cv);
  pthread_mutex_unlock(&e->mu);
}

static void event_wait_gen(ag_bevent *e, uint64_t gen) {
  pthread_mutex_lock(&e->mu);
  while (e->done < gen) pthread_cond_wait(&e->cv, &e->mu);
  pthread_mutex_unlock(&e->mu);
}

static ag_status cpu_event_create(int dev, bool timing, ag_bevent **out) {
  ag_bevent *e = calloc(1, sizeof *e);
  if (!e) return ag_error_set(AG_ERR_OOM, "cpu: cannot allocate an event");
  e->timing = timing;
  atomic_init(&e->refs, 1);
  pthread_mutex_init(&e->mu, NULL);
  pthread_cond_init(&e->cv, NULL);
  *out = e;
  return AG_OK;
}

static void cpu_event_destroy(ag_bevent *e) {
  if (e) event_unref(e);
}

static ag_status cpu_event_query(ag_bevent *e, bool *out_done) {
  pthread_mutex_lock(&e->mu);
  *out_done = e->done >= e->recorded;
  pthread_mutex_unlock(&e->mu);
  return AG_OK;
}

static ag_status cpu_event_synchronize(ag_bevent *e) {
  pthread_mutex_lock(&e->mu);
  uint64_t gen = e->recorded;
  pthread_mutex_unlock(&e->mu);
  event_wait_gen(e, gen);
  return AG_OK;
}

static ag_status cpu_event_elapsed_ms(ag_bevent *a, ag_bevent *b, float *out_ms) {
  if (!a->timing || !b->timing)
    return ag_error_set(AG_ERR_INVALID, "ag_event_elapsed_ms: event created without timing");
  struct timespec ta, tb;
  bool ok = true;
  pthread_mutex_lock(&a->mu);
  ok = ok && a->recorded > 0 && a->done >= a->recorded;
  ta = a->when;
  pthread_mutex_unlock(&a->mu);
  pthread_mutex_lock(&b->mu);
  ok = ok && b->recorded > 0 && b->done >= b->recorded;
  tb = b->when;
  pthread_mutex_unlock(&b->mu);
  if (!ok)
    return ag_error_set(AG_ERR_STATE, "ag_event_elapsed_ms: event not recorded or not complete");
  *out_ms = (float)((double)(tb.tv_sec - ta.tv_sec) * 1e3 + (double)(tb.tv_nsec - ta.tv_nsec) * 1e-6);
  return AG_OK;
}

/* ---- streams ---- */

typedef enum { IT_KERNEL, IT_COPY, IT_RECORD, IT_WAIT } item_kind;

typedef struct item {
  item_kind kind;
  ag_kernel_call call;  /* IT_KERNEL; call.multi points at `multi` */
  ag_kmulti *multi;     /* owned copy, or NULL */
  void *dst;            /* IT_COPY */
  const void *src;
  size_t bytes;
  void *owned;          /* staged copy of pageable source, freed after */
  ag_bevent *event;     /* IT_RECORD / IT_WAIT (a reference is held) */
  uint64_t gen;
} item;

/* Bounded queue: a host that runs far ahead blocks, as a GPU launch queue
 * does, instead of growing memory without limit. */
#define QCAP 256

struct ag_bstream {
  bool threaded;
  atomic_bool has_err;
  pthread_mutex_t err_mu;
  ag_kernel_error err;
  /* threaded mode */
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv_work, cv_space, cv_idle;
  item *ring;
  unsigned head, count;
  bool stop;
};

static void stream_note_error(ag_bstream *s, const ag_kernel_error *e) {
  pthread_mutex_lock(&s->err_mu);
  if (s->err.code == 0) {
    s->err = *e;
    atomic_store(&s->has_err, true);
  }
  pthread_mutex_unlock(&s->err_mu);
}

static void run_item(ag_bstream *s, item *it) {
  switch (it->kind) {
    case IT_KERNEL: {
      ag_kernel_error e = {0};
      if (ag__cpu_run(&it->call, &e) != AG_OK && e.code == 0) {
        /* Only scratch OOM fails here; it has no caller on this thread, so
         * it travels like an index error through the error word. */
        e.code = AG_ERR_OOM;
        e.kop = it->call.op;
      }
      if (e.code) stream_note_error(s, &e);
      free(it->multi);
      it->multi = NULL;
      break;
    }
    case IT_COPY:
      memmove(it->dst, it->src, it->bytes);
      free(it->owned);
      it->owned = NULL;
      break;
    case IT_RECORD:
      event_complete(it->event, it->gen);
      event_unref(it->event);
      break;
    case IT_WAIT:
      event_wait_gen(it->event, it->gen);
      event_unref(it->event);
      break;
  }
}

static void *stream_worker(void *arg) {
  ag_bstream *s = arg;
  pthread_mutex_lock(&s->mu);
  for (;;) {
    while (s->count == 0 && !s->stop) pthread_cond_wait(&s->cv_work, &s->mu);
    if (s->count == 0) break;
    item *it = &s->ring[s->head];
    pthread_mutex_unlock(&s->mu);
    run_item(s, it); /* the slot stays counted until done, so sync waits for it */
    pthread_mutex_lock(&s->mu);
    s->head = (s->head + 1) % QCAP;
    s->count--;
    pthread_cond_signal(&s->cv_space);
    if (s->count == 0) pthread_cond_broadcast(&s->cv_idle);
  }
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

/* Reserve the next slot (blocking while the queue is full); the caller fills
 * it and calls enqueue_commit. Returns with s->mu held. */
static item *enqueue_begin(ag_bstream *s) {
  pthread_mutex_lock(&s->mu);
  while (s->count == QCAP) pthread_cond_wait(&s->cv_space, &s->mu);
  return &s->ring[(s->head + s->count) % QCAP];
}

static void enqueue_commit(ag_bstream *s) {
  s->count++;
  pthread_cond_signal(&s->cv_work);
  pthread_mutex_unlock(&s->mu);
}

static ag_status cpu_stream_create(int dev, ag_bstream **out) {
  ag_bstream *s = calloc(1, sizeof *s);
  if (!s) return ag_error_set(AG_ERR_OOM, "cpu: cannot allocate a stream");
  pthread_mutex_init(&s->err_mu, NULL);
  atomic_init(&s->has_err, false);
  pthread_mutex_lock(&g_mode_mu);
  g_mode_frozen = true;
  s->threaded = g_mode == AG_CPU_STREAMS_THREADED;
  pthread_mutex_unlock(&g_mode_mu);
  if (s->threaded) {
    s->ring = calloc(QCAP, sizeof *s->ring);
    if (!s->ring) {
      free(s);
      return ag_error_set(AG_ERR_OOM, "cpu: cannot allocate a stream queue");
    }
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv_work, NULL);
    pthread_cond_init(&s->cv_space, NULL);
    pthread_cond_init(&s->cv_idle, NULL);
    int rc = pthread_create(&s->thread, NULL, stream_worker, s);
    if (rc != 0) {
      free(s->ring);
      free(s);
      return ag_error_set(AG_ERR_BACKEND, "cpu: cannot start a stream thread: %s", strerror(rc));
    }
  }
  *out = s;
  return AG_OK;
}

static ag_status cpu_stream_synchronize(ag_bstream *s) {
  if (!s->threaded) return AG_OK;
  pthread_mutex_lock(&s->mu);
  while (s->count > 0) pthread_cond_wait(&s->cv_idle, &s->mu);
  pthread_mutex_unlock(&s->mu);
  return AG_OK;
}

static void cpu_stream_destroy(ag_bstream *s) {
  if (!s) return;
  if (s->threaded) {
    pthread_mutex_lock(&s->mu);
    s->stop = true;
    pthread_cond_signal(&s->cv_work);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL); /* the worker drains the queue first */
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv_work);
    pthread_cond_destroy(&s->cv_space);
    pthread_cond_destroy(&s->cv_idle);
    free(s->ring);
  }
  pthread_mutex_destroy(&s->err_mu);
  free(s);
}

static ag_status cpu_stream_query(ag_bstream *s, bool *out_done) {
  if (!s->threaded) {
    *out_done = true;
    return AG_OK;
  }
  pthread_mutex_lock(&s->mu);
  *out_done = s->count == 0;
  pthread_mutex_unlock(&s->mu);
  return AG_OK;
}

static ag_status cpu_event_record(ag_bevent *e, ag_bstream *s) {
  pthread_mutex_lock(&e->mu);
  uint64_t gen = ++e->recorded;
  pthread_mutex_unlock(&e->mu);
  if (!s->threaded) {
    event_complete(e, gen);
    return AG_OK;
  }
  atomic_fetch_add(&e->refs, 1);
  item *it = enqueue_begin(s);
  it->kind = IT_RECORD;
  it->event = e;
  it->gen = gen;
  enqueue_commit(s);
  return AG_OK;
}

static ag_status cpu_stream_wait_event(ag_bstream *s, ag_bevent *e) {
  pthread_mutex_lock(&e->mu);
  uint64_t gen = e->recorded;
  bool done = e->done >= gen;
  pthread_mutex_unlock(&e->mu);
  if (done) return AG_OK;
  if (!s->threaded) {
    /* Only reachable if the event lives on a threaded stream: the inline
     * stream's "queue" is the caller, so it must wait here. */
    event_wait_gen(e, gen);
    return AG_OK;
  }
  atomic_fetch_add(&e->refs, 1);
  item *it = enqueue_begin(s);
  it->kind = IT_WAIT;
  it->event = e;
  it->gen = gen;
  enqueue_commit(s);
  return AG_OK;
}

/* ---- copies ---- */

static ag_status enqueue_copy(ag_bstream *s, void *dst, const void *src, size_t bytes,
                              void *owned) {
  item *it = enqueue_begin(s);
  it->kind = IT_COPY;
  it->dst = dst;
  it->src = src;
  it->bytes = bytes;
  it->owned = owned;
  enqueue_commit(s);
  return AG_OK;
}

static ag_status cpu_copy_h2d(ag_bstream *s, void *dst_base, size_t dst_off, const void *src,
                              size_t bytes, bool src_pinned) {
  char *dst = (char *)dst_base + dst_off;
  if (!s->threaded || bytes == 0) {
    memcpy(dst, src, bytes);
    return AG_OK;
  }
  if (src_pinned) return enqueue_copy(s, dst, src, bytes, NULL);
  /* The caller may reuse a pageable source at once: stage it. */
  void *stage = malloc(bytes);
  if (!stage) {
    cpu_stream_synchronize(s);
    memcpy(dst, src, bytes);
    return AG_OK;
  }
  memcpy(stage, src, bytes);
  return enqueue_copy(s, dst, stage, bytes, stage);
}

static ag_status cpu_copy_d2h(ag_bstream *s, void *dst, const void *src_base, size_t src_off,
                              size_t bytes) {
  const char *src = (const char *)src_base + src_off;
  if (!s->threaded) {
    memcpy(dst, src, bytes);
    return AG_OK;
  }
  return enqueue_copy(s, dst, src, bytes, NULL);
}

static ag_status cpu_copy_d2d(ag_bstream *s, void *dst_base, size_t dst_off,
                              const void *src_base, size_t src_off, size_t bytes) {
  char *dst = (char *)dst_base + dst_off;
  const char *src = (const char *)src_base + src_off;
  if (!s->threaded) {
    memmove(dst, src, bytes);
    return AG_OK;
  }
  return enqueue_copy(s, dst, src, bytes, NULL);
}

/* ---- kernels ---- */

static ag_status cpu_launch(ag_bstream *s, const ag_kernel_call *c) {
  if (AG_UNLIKELY(c->struct_size < sizeof *c)) return ag_kernel_call_check(c, sizeof *c, "cpu");
  if (AG_LIKELY(!s->threaded)) {
    ag_kernel_error e;
    e.code = 0;
    ag_status st = ag__cpu_run(c, &e);
    if (AG_UNLIKELY(e.code)) stream_note_error(s, &e);
    return st;
  }
  ag_kmulti *m = NULL;
  if (c->multi) {
    size_t n = (size_t)(c->multi->count > 0 ? c->multi->count : 0);
    size_t sz = offsetof(ag_kmulti, t) + n * sizeof(ag_kmulti_entry);
    m = malloc(sz);
    if (!m) return ag_error_set(AG_ERR_OOM, "%s: cannot queue the tensor list", c->name ? c->name : "cpu");
    memcpy(m, c->multi, sz);
  }
  item *it = enqueue_begin(s);
  it->kind = IT_KERNEL;
  it->call = *c;
  it->call.multi = m;
  it->multi = m;
  enqueue_commit(s);
  return AG_OK;
}

static bool cpu_supports(int dev, ag_kop op, int sub, ag_dtype dtype) {
  return ag__cpu_supports(op, sub, dtype);
}

/* Portable numerics (docs/numerics.md): this CPU unless it flushes
 * subnormals or the build fuses products (a probe, cpu_portable.c). */
static ag_status cpu_portable_check(int dev) {
  (void)dev;
  return ag__cpu_portable_check();
}

static bool cpu_supports_portable(int dev, ag_kop op, int sub, ag_dtype dtype) {
  (void)dev;
  return ag__cpu_supports_portable(op, sub, dtype);
}

static ag_status cpu_take_kernel_error(ag_bstream *s, ag_kernel_error *out) {
  memset(out, 0, sizeof *out);
  if (!atomic_load_explicit(&s->has_err, memory_order_acquire)) return AG_OK;
  pthread_mutex_lock(&s->err_mu);
  *out = s->err;
  memset(&s->err, 0, sizeof s->err);
  atomic_store(&s->has_err, false);
  pthread_mutex_unlock(&s->err_mu);
  return AG_OK;
}

/* The description `anygrad info` prints (ag_backend_info.description): the
 * f32 GEMM engine, which only this backend knows. Filled once, before the
 * registry first copies the table. */
static char g_description[96];

static ag_backend cpu_backend = {
    AG_BACKEND_HEADER,
    .name = "cpu",
    .init = cpu_init,
    .shutdown = NULL,
    .device_props = cpu_device_props,
    .mem_info = cpu_mem_info,
    .segment_alloc = cpu_segment_alloc,
    .segment_free = cpu_segment_free,
    .vm_granularity = cpu_vm_granularity,
    .vm_reserve = cpu_vm_reserve,
    .vm_map = cpu_vm_map,
    .vm_unmap = cpu_vm_unmap,
    .vm_release = cpu_vm_release,
    .pinned_alloc = cpu_pinned_alloc,
    .pinned_free = cpu_pinned_free,
    .stream_create = cpu_stream_create,
    .stream_destroy = cpu_stream_destroy,
    .stream_synchronize = cpu_stream_synchronize,
    .stream_query = cpu_stream_query,
    .event_create = cpu_event_create,
    .event_destroy = cpu_event_destroy,
    .event_record = cpu_event_record,
    .stream_wait_event = cpu_stream_wait_event,
    .event_query = cpu_event_query,
    .event_synchronize = cpu_event_synchronize,
    .event_elapsed_ms = cpu_event_elapsed_ms,
    .copy_h2d = cpu_copy_h2d,
    .copy_d2h = cpu_copy_d2h,
    .copy_d2d = cpu_copy_d2d,
    .launch = cpu_launch,
    .supports = cpu_supports,
    .take_kernel_error = cpu_take_kernel_error,
    .portable_check = cpu_portable_check,
    .supports_portable = cpu_supports_portable,
    .flags = AG_BACKEND_F_HOST_MEMORY | AG_BACKEND_F_ADDRESSABLE,
    .dlpack_device = kDLCPU,
    .priority = 0,
    .description = g_description,
};

/* The built-in module's getter: the registry's table of built-in modules
 * names it (core/runtime/registry.c). */
static pthread_once_t g_description_once = PTHREAD_ONCE_INIT;
static void description_init(void) {
  snprintf(g_description, sizeof g_description, "f32 matmul: %s", ag_cpu_gemm_engine());
}

const ag_backend *ag__cpu_backend(void) {
  pthread_once(&g_description_once, description_init);
  return &cpu_backend;
}
