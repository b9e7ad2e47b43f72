/* The pinned host caching allocator: backend-neutral policy (power-of-two
 * rounding, a free cache with a byte cap, reuse only after the copies that
 * read a block have completed) over each backend's pinned_alloc/free. The
 * asynchronous host->device copy that stages through it is a tensor op
 * (core/tensor/host_copy.c). */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "anygrad/checks.h"
#include "anygrad/loader.h"
#include "runtime/tracerec.h"
#include "runtime/devstate.h"
#include "memory/block.h"
#include "memory/pinned.h"

#define MIN_BLOCK 4096u

typedef enum { B_USED, B_PENDING, B_CACHED } bstate;

typedef struct pblock {
  void *ptr;
  size_t size, requested;
  bstate state;
  ag_event **ev; /* events recorded by record_stream since the last alloc */
  int n_ev, cap_ev;
  uint64_t freed_seq; /* order of entering the cache: oldest leave first */
  struct pblock *next;
} pblock;

typedef struct pool {
  ag_devstate *ds;
  pthread_mutex_t mu;
  pblock *blocks;         /* every block the pool holds */
  ag_event **spare;       /* completed events kept for reuse */
  int n_spare, cap_spare;
  size_t cap;             /* on cached bytes */
  uint64_t seq;
  ag_pinned_stats st;
} pool;

/* Registry of pools, one per device, created on first use and kept until
 * exit like the device states they belong to. */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static pool *g_pools[AG_MAX_BACKENDS][AG_MAX_DEVICES];

static size_t round_size(size_t n) {
  size_t r = MIN_BLOCK;
  while (r < n && r < ((size_t)1 << 62)) r <<= 1;
  return r;
}

static pool *pool_get(ag_device d) {
  ag_devstate *ds = ag__devstate(d);
  if (!ds) return NULL;
  pool *p = __atomic_load_n(&g_pools[d.backend][d.index], __ATOMIC_ACQUIRE);
  if (p) return p;
  pthread_mutex_lock(&g_lock);
  p = g_pools[d.backend][d.index];
  if (!p) {
    p = calloc(1, sizeof *p);
    if (!p) {
      pthread_mutex_unlock(&g_lock);
      ag_error_set(AG_ERR_OOM, "pinned pool: out of host memory");
      return NULL;
    }
    p->ds = ds;
    pthread_mutex_init(&p->mu, NULL);
    p->cap = SIZE_MAX;
    const char *e = getenv("AG_PINNED_CACHE_MB");
    double mb;
    /* Strict and bounded (the device open has refused a bad value already). */
    if (e && ag_parse_f64(e, 0, 1 << 30, &mb)) p->cap = (size_t)(mb * 1048576.0);
    p->st.cache_cap_bytes = p->cap == SIZE_MAX ? -1 : (int64_t)p->cap;
    __atomic_store_n(&g_pools[d.backend][d.index], p, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&g_lock);
  return p;
}

/* The pool and block holding [ptr, ptr+bytes); pool locked on success. */
static pblock *find_block(const void *ptr, size_t bytes, pool **out_pool, bool exact) {
  for (int b = 0; b < AG_MAX_BACKENDS; b++)
    for (int i = 0; i < AG_MAX_DEVICES; i++) {
      pool *p = __atomic_load_n(&g_pools[b][i], __ATOMIC_ACQUIRE);
      if (!p) continue;
      pthread_mutex_lock(&p->mu);
      for (pblock *k = p->blocks; k; k = k->next) {
        const char *s = k->ptr, *q = ptr;
        bool hit = exact ? q == s : (q >= s && q + bytes <= s + k->size);
        if (hit && k->state == B_USED) {
          *out_pool = p;
          return k;
        }
      }
      pthread_mutex_unlock(&p->mu);
    }
  return NULL;
}

bool ag__pinned_contains(const void *ptr, size_t bytes) {
  pool *p;
  pblock *k = find_block(ptr, bytes, &p, false);
  if (k) pthread_mutex_unlock(&p->mu);
  return k != NULL;
}

static void spare_event(pool *p, ag_event *e) {
  if (p->n_spare == p->cap_spare) {
    int nc = p->cap_spare ? p->cap_spare * 2 : 8;
    ag_event **nv = realloc(p->spare, (size_t)nc * sizeof *nv);
    if (!nv) {
      ag_event_destroy(e);
      return;
    }
    p->spare = nv;
    p->cap_spare = nc;
  }
  p->spare[p->n_spare++] = e;
}

static void raw_free(pool *p, pblock *k) {
  p->ds->be->pinned_free(p->ds->ord, k->ptr);
  p->st.num_raw_frees++;
  free(k->ev);
  free(k);
}

/* Drop cached blocks, oldest first, until cached bytes fit `limit`.
 * Pool locked. */
static void trim(pool *p, size_t limit) {
  while ((size_t)p->st.cached_bytes > limit) {
    pblock **oldest = NULL;
    for (pblock **k = &p->blocks; *k; k = &(*k)->next)
      if ((*k)->state == B_CACHED && (!oldest || (*k)->freed_seq < (*oldest)->freed_seq)) oldest = k;
    if (!oldest) break;
    pblock *k = *oldest;
    *oldest = k->next;
    p->st.cached_bytes -= (int64_t)k->size;
    raw_free(p, k);
  }
}

/* Move pending blocks whose events have all completed into the cache,
 * querying without blocking. Pool locked. */
static void reap(pool *p) {
  for (pblock *k = p->blocks; k; k = k->next) {
    if (k->state != B_PENDING) continue;
    int i = 0;
    while (i < k->n_ev && ag_event_query(k->ev[i])) i++;
    if (i < k->n_ev) continue;
    for (int j = 0; j < k->n_ev; j++) spare_event(p, k->ev[j]);
    k->n_ev = 0;
    k->state = B_CACHED;
    k->freed_seq = p->seq++;
    p->st.pending_bytes -= (int64_t)k->size;
    p->st.cached_bytes += (int64_t)k->size;
  }
  if (p->cap != SIZE_MAX) trim(p, p->cap);
}

static void hand_out(pool *p, pblock *k, size_t bytes) {
  k->state = B_USED;
  k->requested = bytes;
  p->st.allocated_bytes += (int64_t)k->size;
  p->st.requested_bytes += (int64_t)bytes;
  if (p->st.allocated_bytes > p->st.peak_allocated_bytes)
    p->st.peak_allocated_bytes = p->st.allocated_bytes;
  p->st.num_allocs++;
}

ag_status ag_pinned_alloc(ag_device d, size_t bytes, void **out_ptr) {
  if (!out_ptr || bytes == 0)
    return ag_error_set(AG_ERR_INVALID, "ag_pinned_alloc: %s", out_ptr ? "0 bytes" : "NULL out_ptr");
  *out_ptr = NULL;
  pool *p = pool_get(d);
  if (!p) return ag_last_status();
  size_t size = round_size(bytes);
  pthread_mutex_lock(&p->mu);
  reap(p);
  for (pblock *k = p->blocks; k; k = k->next)
    if (k->state == B_CACHED && k->size == size) {
      p->st.cached_bytes -= (int64_t)size;
      p->st.num_cache_hits++;
      hand_out(p, k, bytes);
      pthread_mutex_unlock(&p->mu);
      *out_ptr = k->ptr;
      return AG_OK;
    }
  pthread_mutex_unlock(&p->mu);

  pblock *k = calloc(1, sizeof *k);
  if (!k) return ag_error_set(AG_ERR_OOM, "ag_pinned_alloc: out of host memory");
  /* A raw pinned allocation can take milliseconds (page locking): made
   * outside the lock so other threads keep hitting the cache. */
  uint64_t t0 = ag__now_ns();
  ag_status st = p->ds->be->pinned_alloc(p->ds->ord, size, &k->ptr);
  if (st != AG_OK) {
    pthread_mutex_lock(&p->mu);
    trim(p, 0); /* give the cache back and retry once */
    pthread_mutex_unlock(&p->mu);
    ag_error_clear();
    st = p->ds->be->pinned_alloc(p->ds->ord, size, &k->ptr);
  }
  uint64_t t1 = ag__now_ns();
  if (st != AG_OK) {
    free(k);
    return ag_error_set(AG_ERR_OOM, "ag_pinned_alloc: cannot allocate %zu bytes of pinned memory on %s",
                        size, p->ds->label);
  }
  ag__trace_host("pinned", "pinned_alloc (raw)", t0, t1, "bytes", (int64_t)size);
  k->size = size;
  pthread_mutex_lock(&p->mu);
  p->st.num_raw_allocs++;
  p->st.raw_alloc_ms += (double)(t1 - t0) / 1e6;
  k->next = p->blocks;
  p->blocks = k;
  hand_out(p, k, bytes);
  pthread_mutex_unlock(&p->mu);
  *out_ptr = k->ptr;
  return AG_OK;
}

ag_status ag_pinned_free(void *ptr) {
  if (!ptr) return AG_OK;
  pool *p;
  pblock *k = find_block(ptr, 0, &p, true);
  if (!k) return ag_error_set(AG_ERR_INVALID, "ag_pinned_free: %p is not a live pinned block", ptr);
  p->st.allocated_bytes -= (int64_t)k->size;
  p->st.requested_bytes -= (int64_t)k->requested;
  k->state = B_PENDING;
  p->st.pending_bytes += (int64_t)k->size;
  reap(p); /* no events: cached at once */
  pthread_mutex_unlock(&p->mu);
  return AG_OK;
}

ag_status ag_pinned_record_stream(void *ptr, ag_stream *s) {
  if (!ptr || !s) return ag_error_set(AG_ERR_INVALID, "ag_pinned_record_stream: NULL argument");
  pool *p;
  pblock *k = find_block(ptr, 0, &p, false);
  if (!k) return ag_error_set(AG_ERR_INVALID, "ag_pinned_record_stream: %p is not in a live pinned block", ptr);
  ag_status st = AG_OK;
  if (s->ds != p->ds) {
    st = ag_error_set(AG_ERR_DEVICE, "ag_pinned_record_stream: block of %s, stream of %s", p->ds->label,
                      s->ds->label);
    goto out;
  }
  ag_event *e = p->n_spare ? p->spare[--p->n_spare] : ag_event_create(p->ds->dev, false);
  if (!e) {
    st = ag_last_status();
    goto out;
  }
  if (k->n_ev == k->cap_ev) {
    int nc = k->cap_ev ? k->cap_ev * 2 : 2;
    ag_event **nv = realloc(k->ev, (size_t)nc * sizeof *nv);
    if (!nv) {
      spare_event(p, e);
      st = ag_error_set(AG_ERR_OOM, "ag_pinned_record_stream: out of host memory");
      goto out;
    }
    k->ev = nv;
    k->cap_ev = nc;
  }
  st = ag_event_record(e, s);
  if (st != AG_OK) {
    spare_event(p, e);
    goto out;
  }
  k->ev[k->n_ev++] = e;
out:
  pthread_mutex_unlock(&p->mu);
  return st;
}

ag_status ag_pinned_stats_get(ag_device d, ag_pinned_stats *out) {
  if (!out) return ag_error_set(AG_ERR_INVALID, "ag_pinned_stats_get: NULL out_stats");
  pool *p = pool_get(d);
  if (!p) return ag_last_status();
  pthread_mutex_lock(&p->mu);
  reap(p);
  *out = p->st;
  pthread_mutex_unlock(&p->mu);
  return AG_OK;
}

ag_status ag_pinned_empty_cache(ag_device d) {
  pool *p = pool_get(d);
  if (!p) return ag_last_status();
  pthread_mutex_lock(&p->mu);
  reap(p);
  trim(p, 0);
  pthread_mutex_unlock(&p->mu);
  return AG_OK;
}

ag_status ag_pinned_set_cache_cap(ag_device d, size_t bytes) {
  pool *p = pool_get(d);
  if (!p) return ag_last_status();
  pthread_mutex_lock(&p->mu);
  p->cap = bytes;
  p->st.cache_cap_bytes = bytes == SIZE_MAX ? -1 : (int64_t)bytes;
  reap(p);
  trim(p, bytes);
  pthread_mutex_unlock(&p->mu);
  return AG_OK;
}

void ag__pinned_staged_copy(ag_device d) {
  pool *p = pool_get(d);
  if (!p) return;
  pthread_mutex_lock(&p->mu);
  p->st.num_staged_copies++;
  pthread_mutex_unlock(&p->mu);
}
