/* The caching device allocator: one per device, backend-neutral. Raw segments
 * come from the backend; blocks are carved from them, cached on free and
 * reused in stream order, as PyTorch's CUDA caching allocator does. See
 * docs/allocator.md for the policy and the measured reasons behind it. */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(__linux__)
#include <linux/futex.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif
#include "anygrad/checks.h"
#include "memory/alloc_internal.h"
#include "runtime/devstate.h"
#include "memory/block.h"

#define K_MIN_BLOCK ((size_t)512)            /* all sizes are multiples */
#define K_SMALL_SIZE ((size_t)1 << 20)       /* largest small-pool request */
#define K_SMALL_BUFFER ((size_t)2 << 20)     /* small-pool segment size */
#define K_LARGE_BUFFER ((size_t)20 << 20)    /* segment for 1..10 MiB requests */
#define K_MIN_LARGE_ALLOC ((size_t)10 << 20) /* beyond: segment = request */
#define K_ROUND_LARGE ((size_t)2 << 20)      /* large segments are multiples */
/* AG_ALLOC_TRACE=OFF (CMake) builds without the event ring: nothing is
 * recorded and trace_max_entries above 0 is refused. */
#ifndef AG_ALLOC_TRACE
#define AG_ALLOC_TRACE 1
#endif
#define K_TRACE_DEFAULT (AG_ALLOC_TRACE ? 4096 : 0)
#define CAT_DEPTH 16

enum { POOL_SMALL = 0, POOL_LARGE = 1 };
enum { B_FREE = 0, B_ALLOC = 1, B_PENDING = 2 };
enum {
  T_ALLOC, T_FREE, T_FREE_REQUESTED, T_FREE_COMPLETED, T_SEGMENT_ALLOC, T_SEGMENT_FREE, T_SEGMENT_MAP,
  T_SEGMENT_UNMAP, T_OOM, T_EMPTY_CACHE
};
static const char *const k_trace_names[] = {"alloc", "free", "free_requested", "free_completed",
                                            "segment_alloc", "segment_free", "segment_map",
                                            "segment_unmap", "oom",          "empty_cache"};

typedef struct seg seg;

/* The allocator's lock. A cached alloc+free pair takes it twice, and
 * glibc's mutex calls (owner and user-count bookkeeping) were a fifth of the
 * pair: on Linux an inline futex lock (Drepper's three-state mutex: 0 free,
 * 1 held, 2 held with waiters) costs one atomic each way when uncontended
 * and blocks in the kernel, never spins, when contended. */
#if defined(__linux__)
typedef struct alock {
  _Atomic int v;
} alock;
static void alock_init(alock *l) { atomic_init(&l->v, 0); }
static void alock_destroy(alock *l) { (void)l; }
static void alock_wait(alock *l, int c) {
  if (c != 2) c = atomic_exchange_explicit(&l->v, 2, memory_order_acquire);
  while (c != 0) {
    syscall(SYS_futex, &l->v, FUTEX_WAIT_PRIVATE, 2, NULL, NULL, 0);
    c = atomic_exchange_explicit(&l->v, 2, memory_order_acquire);
  }
}
static inline void alock_lock(alock *l) {
  int c = 0;
  if (!atomic_compare_exchange_strong_explicit(&l->v, &c, 1, memory_order_acquire, memory_order_relaxed))
    alock_wait(l, c);
}
static inline void alock_unlock(alock *l) {
  if (atomic_exchange_explicit(&l->v, 0, memory_order_release) == 2)
    syscall(SYS_futex, &l->v, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}
#else
typedef pthread_mutex_t alock;
static void alock_init(alock *l) { pthread_mutex_init(l, NULL); }
static void alock_destroy(alock *l) { pthread_mutex_destroy(l); }
static inline void alock_lock(alock *l) { pthread_mutex_lock(l); }
static inline void alock_unlock(alock *l) { pthread_mutex_unlock(l); }
#endif

struct ag_block {
  seg *seg;
  size_t offset, size, requested;
  ag_block *prev, *next; /* address-order neighbours in the segment */
  uint32_t sid; /* allocation stream's id, shared by every block of a segment; an id,
                   not a pointer, because a stream may die while its blocks are cached */
  uint8_t state;
  uint8_t category;
  bool split_counted; /* counted in inactive_split while in the free set */
  bool oversize;      /* counted in oversize_allocations */
  int events;         /* outstanding events while B_PENDING */
  int n_uses, cap_uses;
  ag_stream **uses; /* other streams recorded with record_stream */
};

struct seg {
  ag_allocator *a;
  uint64_t id;
  void *base;
  size_t size;     /* bytes backed by memory (mapped part of an expandable one) */
  size_t reserved; /* address range of an expandable segment */
  uint8_t pool;
  bool expandable, bypass;
  bool oversize; /* counted in oversize_segments */
  uint32_t sid;
  ag_block *first, *last;
  seg *prev, *next;
};

typedef struct {
  ag_block **v;
  size_t n, cap;
} free_set;

typedef struct {
  ag_bevent *ev;
  ag_block *b;
} pending_ev;

typedef struct {
  uint64_t seq, t_ns;
  uint64_t seg_id;
  size_t offset, size;
  uint32_t stream;
  uint8_t action, category;
} trace_ev;

typedef struct {
  size_t max_split; /* SIZE_MAX: unlimited */
  int rp2_div;      /* 0/1: off */
  bool expandable;
  bool caching;
  size_t trace_entries;
  double fraction; /* cap as a fraction (0 none) */
  size_t cap_bytes;
  bool has_fraction, has_cap;
} alloc_conf;

typedef struct {
  ag_mem_stat allocation[AG_POOL_COUNT], segment[AG_POOL_COUNT], active[AG_POOL_COUNT],
      inactive_split[AG_POOL_COUNT];
  ag_mem_stat allocated_bytes[AG_POOL_COUNT], reserved_bytes[AG_POOL_COUNT],
      active_bytes[AG_POOL_COUNT], inactive_split_bytes[AG_POOL_COUNT],
      requested_bytes[AG_POOL_COUNT];
  ag_mem_stat oversize_allocations, oversize_segments;
  ag_mem_stat category_bytes[AG_MEM_CATEGORY_COUNT];
  int64_t num_alloc_retries, num_ooms, num_syncs_all_streams, num_device_alloc, num_device_free;
} alloc_stats;

struct ag_allocator {
  alock mu;
  ag_devstate *ds;
  alloc_conf cfg;
  size_t cap; /* bytes, 0 none */
  bool vm_ok; /* backend has every vm_* entry */
  size_t gran;
  free_set pools[2];
  seg *segs;
  uint64_t next_seg_id;
  pending_ev *pend;
  size_t n_pend, cap_pend;
  ag_bevent **evpool;
  size_t n_evpool, cap_evpool;
  ag_block *spare; /* recycled block structs, linked through next */
  alloc_stats st;
  uint64_t raw_attempts, inj_at;
  int inj_count;
  trace_ev *ring;
  size_t ring_cap, ring_head, ring_n;
  uint64_t seq;
  uint64_t stamp0, ns0; /* reference point for trace timestamps */
  char be_msg[256]; /* the backend's message for the last failed raw allocation */
  /* Segments at the peak (ag__alloc_peak_capture): a snapshot taken inside
   * the allocation that raised allocated bytes to a new high, when the high
   * moved by >= 1/16 since the last one or the allocation reserved memory,
   * or when allocated bytes reach pk_target (an earlier peak the last
   * snapshot missed by less than 1/16). */
  int pk_users;
  char *pk_buf;      /* the JSON snapshot, or NULL */
  int64_t pk_bytes;  /* allocated bytes when pk_buf was taken; -1: none since the peak was reset */
  int64_t pk_target; /* 0: none */
  uint64_t pk_gen;   /* counts snapshots taken */
};

/* ---- memory categories (thread-local) ---- */

static _Thread_local ag_mem_category tl_cat[CAT_DEPTH];
static _Thread_local int tl_depth;

const char *ag_mem_category_name(ag_mem_category c) {
  static const char *const names[] = {"other",       "parameters", "gradients", "optimizer",
                                      "activations", "workspace",  "staging"};
  return (c >= 0 && c < AG_MEM_CATEGORY_COUNT) ? names[c] : "?";
}

void ag_mem_category_push(ag_mem_category c) {
  if (c < 0 || c >= AG_MEM_CATEGORY_COUNT) c = AG_MEM_OTHER;
  /* Pushes beyond the depth are counted but not stored, so pops still pair. */
  if (tl_depth < CAT_DEPTH) tl_cat[tl_depth] = c;
  tl_depth++;
}

void ag_mem_category_pop(void) {
  if (tl_depth > 0) tl_depth--;
}

ag_mem_category ag_mem_category_current(void) {
  if (tl_depth == 0) return AG_MEM_OTHER;
  return tl_cat[(tl_depth < CAT_DEPTH ? tl_depth : CAT_DEPTH) - 1];
}

/* ---- configuration ---- */

static void conf_default(alloc_conf *c) {
  memset(c, 0, sizeof *c);
  c->max_split = SIZE_MAX;
  c->caching = true;
  c->trace_entries = K_TRACE_DEFAULT;
}

static bool parse_bool(const char *v, bool *out) {
  if (!strcmp(v, "1") || !strcmp(v, "True") || !strcmp(v, "true")) return *out = true, true;
  if (!strcmp(v, "0") || !strcmp(v, "False") || !strcmp(v, "false")) return *out = false, true;
  return false;
}

/* A decimal integer, the whole string (the strict parser of every AG_*
 * number: no sign, blank or overflow). */
static bool parse_u64(const char *v, uint64_t *out) {
  int64_t x;
  if (!ag_parse_i64(v, 0, INT64_MAX, &x) || v[0] == '-') return false;
  *out = (uint64_t)x;
  return true;
}

/* Parse PyTorch's "key:value,key:value" into c (which holds the starting
 * values); all or nothing. */
static ag_status conf_parse(const char *s, alloc_conf *c, const char *who) {
  alloc_conf n = *c;
  char buf[512], vb[64]; /* values in messages are escaped: no raw control sequences */
  if (strlen(s) >= sizeof buf) return ag_error_set(AG_ERR_INVALID, "%s: string too long", who);
  strcpy(buf, s);
  char *save = NULL;
  for (char *item = strtok_r(buf, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
    while (*item == ' ') item++;
    char *end = item + strlen(item);
    while (end > item && end[-1] == ' ') *--end = 0;
    if (!*item) continue;
    char *colon = strchr(item, ':');
    if (!colon)
      return ag_error_set(AG_ERR_INVALID, "%s: '%s' is not key:value", who, ag_escape(item, vb, sizeof vb));
    *colon = 0;
    const char *k = item, *v = colon + 1;
    while (*v == ' ') v++;
    uint64_t u;
    bool b;
    if (!strcmp(k, "max_split_size_mb")) {
      if (!parse_u64(v, &u) || u <= 20 || u > ((uint64_t)1 << 40))
        return ag_error_set(AG_ERR_INVALID,
                            "%s: max_split_size_mb must be an integer > 20 (MiB), got '%s'", who, ag_escape(v, vb, sizeof vb));
      n.max_split = (size_t)u << 20;
    } else if (!strcmp(k, "roundup_power2_divisions")) {
      if (!parse_u64(v, &u) || u < 1 || u > 64 || (u & (u - 1)))
        return ag_error_set(AG_ERR_INVALID,
                            "%s: roundup_power2_divisions must be a power of two in 1..64, got '%s'"
                            " (the per-interval list form is not supported)",
                            who, ag_escape(v, vb, sizeof vb));
      n.rp2_div = (int)u;
    } else if (!strcmp(k, "expandable_segments")) {
      if (!parse_bool(v, &b))
        return ag_error_set(AG_ERR_INVALID, "%s: expandable_segments must be 0/1/True/False, got '%s'",
                            who, ag_escape(v, vb, sizeof vb));
      n.expandable = b;
    } else if (!strcmp(k, "caching")) {
      if (!parse_bool(v, &b))
        return ag_error_set(AG_ERR_INVALID, "%s: caching must be 0/1, got '%s'", who, ag_escape(v, vb, sizeof vb));
      n.caching = b;
    } else if (!strcmp(k, "trace_max_entries")) {
      if (!parse_u64(v, &u) || u > (1u << 24))
        return ag_error_set(AG_ERR_INVALID, "%s: trace_max_entries must be 0..16777216, got '%s'",
                            who, ag_escape(v, vb, sizeof vb));
      if (u && !AG_ALLOC_TRACE)
        return ag_error_set(AG_ERR_UNSUPPORTED,
                            "%s: trace_max_entries %s: this build has no allocator event ring (built with "
                            "AG_ALLOC_TRACE=OFF)", who, ag_escape(v, vb, sizeof vb));
      n.trace_entries = (size_t)u;
    } else if (!strcmp(k, "memory_fraction")) {
      double f;
      if (!ag_parse_f64(v, 0.0, 1.0, &f))
        return ag_error_set(AG_ERR_INVALID, "%s: memory_fraction must be in [0, 1], got '%s'", who, ag_escape(v, vb, sizeof vb));
      n.fraction = f;
      n.has_fraction = true;
      n.has_cap = false;
    } else if (!strcmp(k, "memory_cap_mb")) {
      if (!parse_u64(v, &u) || u > ((uint64_t)1 << 40))
        return ag_error_set(AG_ERR_INVALID, "%s: memory_cap_mb must be an integer, got '%s'", who, ag_escape(v, vb, sizeof vb));
      n.cap_bytes = (size_t)u << 20;
      n.has_cap = true;
      n.has_fraction = false;
    } else {
      return ag_error_set(AG_ERR_INVALID,
                          "%s: unknown key '%s' (known: max_split_size_mb, roundup_power2_divisions, "
                          "expandable_segments, caching, memory_fraction, memory_cap_mb, "
                          "trace_max_entries)",
                          who, ag_escape(k, vb, sizeof vb));
    }
  }
  *c = n;
  return AG_OK;
}

/* ---- small helpers ---- */

static inline void stat_add(ag_mem_stat *s, int64_t d) {
  s->current += d;
  if (d > 0) {
    s->allocated += d;
    if (s->current > s->peak) s->peak = s->current;
  } else {
    s->freed -= d;
  }
}

static inline void stat_pool(ag_mem_stat *arr, int pool, int64_t d) {
  stat_add(&arr[AG_POOL_ALL], d);
  stat_add(&arr[pool == POOL_SMALL ? AG_POOL_SMALL : AG_POOL_LARGE], d);
}

static inline size_t round_up(size_t n, size_t m) { return (n + m - 1) / m * m; }

static size_t round_size(const alloc_conf *c, size_t n) {
  if (n < K_MIN_BLOCK) return K_MIN_BLOCK;
  if (c->rp2_div > 1 && n > K_MIN_BLOCK * (size_t)c->rp2_div) {
    if ((n & (n - 1)) == 0) return n;
    size_t floor2 = (size_t)1 << (63 - __builtin_clzll((unsigned long long)n));
    size_t step = floor2 / (size_t)c->rp2_div;
    if (step == 0) return floor2 << 1;
    size_t lo = n & ~(step - 1);
    return lo == n ? n : lo + step;
  }
  return round_up(n, K_MIN_BLOCK);
}

static size_t segment_size_for(int pool, size_t size) {
  if (pool == POOL_SMALL) return K_SMALL_BUFFER;
  if (size < K_MIN_LARGE_ALLOC) return K_LARGE_BUFFER;
  return round_up(size, K_ROUND_LARGE);
}

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Trace timestamps: a clock read per event would double the cost of a cached
 * alloc+free pair, so x86 records the cycle counter and the snapshot maps it
 * to CLOCK_MONOTONIC nanoseconds by two reference points. */
#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
static inline uint64_t stamp(void) { return __rdtsc(); }
#define AG_STAMP_IS_TSC 1
#else
static inline uint64_t stamp(void) { return now_ns(); }
#define AG_STAMP_IS_TSC 0
#endif

static inline void trace(ag_allocator *a, int action, const seg *sg, size_t offset, size_t size,
                         uint32_t sid, int cat) {
  if (!AG_ALLOC_TRACE || !a->ring_cap) return;
  trace_ev *e = &a->ring[a->ring_head];
  e->seq = a->seq++;
  e->t_ns = stamp();
  e->seg_id = sg ? sg->id : 0;
  e->offset = offset;
  e->size = size;
  e->stream = sid;
  e->action = (uint8_t)action;
  e->category = (uint8_t)cat;
  if (++a->ring_head == a->ring_cap) a->ring_head = 0; /* no divide on the fast path */
  if (a->ring_n < a->ring_cap) a->ring_n++;
}

static ag_status ring_resize(ag_allocator *a, size_t n) {
  trace_ev *r = NULL;
  if (n) {
    r = calloc(n, sizeof *r);
    if (!r) return ag_error_set(AG_ERR_OOM, "allocator trace ring: out of host memory");
  }
  free(a->ring);
  a->ring = r;
  a->ring_cap = n;
  a->ring_head = a->ring_n = 0;
  return AG_OK;
}

static ag_block *block_new(ag_allocator *a) {
  ag_block *b = a->spare;
  if (b) {
    a->spare = b->next;
  } else {
    b = malloc(sizeof *b);
    if (!b) return NULL;
  }
  memset(b, 0, sizeof *b);
  return b;
}

static void block_recycle(ag_allocator *a, ag_block *b) {
  free(b->uses);
  b->uses = NULL;
  b->next = a->spare;
  a->spare = b;
}

/* ---- free sets: sorted by (stream id, size, segment id, offset) ----
 * A sorted array with binary search: free blocks per pool number in the tens
 * to hundreds, so a memmove beats a balanced tree on both speed and code. */

static inline int block_cmp(const ag_block *x, uint32_t sid, size_t size, uint64_t segid,
                            size_t off) {
  uint32_t xs = x->sid;
  if (xs != sid) return xs < sid ? -1 : 1;
  if (x->size != size) return x->size < size ? -1 : 1;
  if (x->seg->id != segid) return x->seg->id < segid ? -1 : 1;
  if (x->offset != off) return x->offset < off ? -1 : 1;
  return 0;
}

static size_t fs_lower(const free_set *fs, uint32_t sid, size_t size, uint64_t segid, size_t off) {
  size_t lo = 0, hi = fs->n;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (block_cmp(fs->v[mid], sid, size, segid, off) < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

static inline bool counts_as_split(const ag_block *b) { return b->prev || b->next; }

static bool fs_insert(ag_allocator *a, ag_block *b) {
  free_set *fs = &a->pools[b->seg->pool];
  if (fs->n == fs->cap) {
    size_t nc = fs->cap ? fs->cap * 2 : 64;
    ag_block **nv = realloc(fs->v, nc * sizeof *nv);
    if (!nv) return false;
    fs->v = nv;
    fs->cap = nc;
  }
  size_t i = fs_lower(fs, b->sid, b->size, b->seg->id, b->offset);
  memmove(&fs->v[i + 1], &fs->v[i], (fs->n - i) * sizeof *fs->v);
  fs->v[i] = b;
  fs->n++;
  b->state = B_FREE;
  b->split_counted = counts_as_split(b) && !b->seg->bypass;
  if (b->split_counted) {
    stat_pool(a->st.inactive_split, b->seg->pool, 1);
    stat_pool(a->st.inactive_split_bytes, b->seg->pool, (int64_t)b->size);
  }
  return true;
}

static void fs_remove_at(ag_allocator *a, free_set *fs, size_t i) {
  ag_block *b = fs->v[i];
  memmove(&fs->v[i], &fs->v[i + 1], (fs->n - i - 1) * sizeof *fs->v);
  fs->n--;
  if (b->split_counted) {
    stat_pool(a->st.inactive_split, b->seg->pool, -1);
    stat_pool(a->st.inactive_split_bytes, b->seg->pool, -(int64_t)b->size);
    b->split_counted = false;
  }
}

/* Whether nb may take slot i of fs (the slot's block leaving) without
 * breaking the order: the common case when a block splits or merges with a
 * neighbour, so the set changes by one store instead of a search and two
 * memmoves. */
static bool fs_fits_at(const free_set *fs, size_t i, const ag_block *nb) {
  uint64_t id = nb->seg->id;
  if (i > 0 && block_cmp(fs->v[i - 1], nb->sid, nb->size, id, nb->offset) >= 0) return false;
  return i + 1 >= fs->n || block_cmp(fs->v[i + 1], nb->sid, nb->size, id, nb->offset) > 0;
}

/* Slot i's block leaves the set (with its size at `old_size`, as counted)
 * and nb takes the slot, as fs_remove_at + fs_insert would. */
static void fs_replace_at(ag_allocator *a, free_set *fs, size_t i, size_t old_size, ag_block *nb) {
  ag_block *o = fs->v[i];
  if (o->split_counted) {
    stat_pool(a->st.inactive_split, o->seg->pool, -1);
    stat_pool(a->st.inactive_split_bytes, o->seg->pool, -(int64_t)old_size);
    o->split_counted = false;
  }
  fs->v[i] = nb;
  nb->state = B_FREE;
  nb->split_counted = counts_as_split(nb) && !nb->seg->bypass;
  if (nb->split_counted) {
    stat_pool(a->st.inactive_split, nb->seg->pool, 1);
    stat_pool(a->st.inactive_split_bytes, nb->seg->pool, (int64_t)nb->size);
  }
}

static void fs_remove(ag_allocator *a, ag_block *b) {
  free_set *fs = &a->pools[b->seg->pool];
  size_t i = fs_lower(fs, b->sid, b->size, b->seg->id, b->offset);
  if (i < fs->n && fs->v[i] == b) fs_remove_at(a, fs, i);
}

/* Best fit on the stream, with PyTorch's max_split_size rules: a request
 * below the limit never takes an oversize block (it would be chopped up), and
 * an oversize request takes an oversize block only if the waste stays below
 * one large buffer. */
static ag_block *find_free(ag_allocator *a, int pool, ag_stream *s, size_t size, size_t *slot) {
  free_set *fs = &a->pools[pool];
  size_t i = fs_lower(fs, s->id, size, 0, 0);
  if (i == fs->n) return NULL;
  ag_block *b = fs->v[i];
  if (b->sid != s->id) return NULL;
  size_t ms = a->cfg.max_split;
  if (ms != SIZE_MAX && !b->seg->expandable) {
    if (size < ms && b->size >= ms) return NULL;
    if (size >= ms && b->size >= size + K_LARGE_BUFFER) return NULL;
  }
  *slot = i; /* still in the set: the caller takes it out (take_found) */
  return b;
}

/* ---- segments ---- */

static void seg_link(ag_allocator *a, seg *sg) {
  sg->next = a->segs;
  if (a->segs) a->segs->prev = sg;
  a->segs = sg;
}

static void seg_unlink(ag_allocator *a, seg *sg) {
  if (sg->prev) sg->prev->next = sg->next;
  else a->segs = sg->next;
  if (sg->next) sg->next->prev = sg->prev;
}

static size_t reserved_total(const ag_allocator *a) {
  return (size_t)a->st.reserved_bytes[AG_POOL_ALL].current;
}

/* A raw allocation is about to happen: apply the cap and fault injection.
 * Returns false (with a reason) when it must fail without asking the backend. */
static bool raw_permitted(ag_allocator *a, size_t bytes, const char **why) {
  a->raw_attempts++;
  if (a->inj_at && a->raw_attempts >= a->inj_at &&
      (a->inj_count < 0 || a->raw_attempts < a->inj_at + (uint64_t)a->inj_count)) {
    *why = "injected failure";
    return false;
  }
  if (a->cap && reserved_total(a) + bytes > a->cap) {
    *why = "memory cap reached";
    return false;
  }
  return true;
}

static void seg_account(ag_allocator *a, seg *sg, int64_t bytes, int64_t count) {
  stat_pool(a->st.reserved_bytes, sg->pool, bytes);
  if (count) stat_pool(a->st.segment, sg->pool, count);
}

/* A fresh non-expandable segment holding one free block (not in the set). */
static ag_block *seg_new(ag_allocator *a, int pool, ag_stream *s, size_t alloc_size, bool bypass,
                         const char **why) {
  if (!raw_permitted(a, alloc_size, why)) return NULL;
  seg *sg = calloc(1, sizeof *sg);
  ag_block *b = block_new(a);
  void *base = NULL;
  if (!sg || !b) {
    free(sg);
    if (b) block_recycle(a, b);
    *why = "out of host memory";
    return NULL;
  }
  const ag_backend *be = a->ds->be;
  if (be->segment_alloc(a->ds->ord, alloc_size, &base) != AG_OK) {
    free(sg);
    block_recycle(a, b);
    *why = "the backend could not allocate";
    snprintf(a->be_msg, sizeof a->be_msg, "%s", ag_last_error());
    return NULL;
  }
  a->st.num_device_alloc++;
  sg->a = a;
  sg->id = ++a->next_seg_id;
  sg->base = base;
  sg->size = alloc_size;
  sg->pool = (uint8_t)pool;
  sg->bypass = bypass;
  sg->sid = s->id;
  sg->first = sg->last = b;
  seg_link(a, sg);
  seg_account(a, sg, (int64_t)alloc_size, 1);
  sg->oversize = alloc_size >= a->cfg.max_split && !bypass;
  if (sg->oversize) stat_add(&a->st.oversize_segments, 1);
  b->seg = sg;
  b->size = alloc_size;
  b->sid = s->id;
  trace(a, T_SEGMENT_ALLOC, sg, 0, alloc_size, s->id, 0);
  return b;
}

static void seg_release(ag_allocator *a, seg *sg) {
  const ag_backend *be = a->ds->be;
  if (sg->expandable) {
    if (sg->size) {
      be->vm_unmap(a->ds->ord, sg->base, 0, sg->size);
      a->st.num_device_free++;
      trace(a, T_SEGMENT_UNMAP, sg, 0, sg->size, sg->sid, 0);
    }
    be->vm_release(a->ds->ord, sg->base, sg->reserved);
  } else {
    be->segment_free(a->ds->ord, sg->base);
    a->st.num_device_free++;
    trace(a, T_SEGMENT_FREE, sg, 0, sg->size, sg->sid, 0);
    if (sg->oversize) stat_add(&a->st.oversize_segments, -1);
  }
  seg_account(a, sg, -(int64_t)sg->size, -1);
  seg_unlink(a, sg);
  for (ag_block *b = sg->first, *n; b; b = n) {
    n = b->next;
    block_recycle(a, b);
  }
  free(sg);
}

/* Grow the stream's expandable segment of this pool so that its free tail
 * holds `size` bytes; returns that tail (not in the free set). */
static ag_block *expandable_grow(ag_allocator *a, int pool, ag_stream *s, size_t size,
                                 const char **why) {
  const ag_backend *be = a->ds->be;
  int ord = a->ds->ord;
  seg *sg = NULL;
  for (seg *x = a->segs; x; x = x->next)
    if (x->expandable && x->pool == pool && x->sid == s->id && x->size < x->reserved) {
      sg = x;
      break;
    }
  ag_block *tail = sg && sg->last && sg->last->state == B_FREE ? sg->last : NULL;
  size_t have = tail ? tail->size : 0;
  size_t grow = round_up(size - have, a->gran);
  if (sg && sg->size + grow > sg->reserved) sg = NULL, tail = NULL, have = 0;
  if (!sg) {
    /* Reserve address space for the whole device (or the cap): the segment
     * then never has to move, whatever the program's peak. */
    size_t fr = 0, total = 0;
    if (be->mem_info(ord, &fr, &total) != AG_OK || total == 0) total = (size_t)64 << 30;
    size_t want = a->cap && a->cap < total ? a->cap : total;
    if (want < size) want = size;
    want = round_up(want, a->gran);
    sg = calloc(1, sizeof *sg);
    void *base = NULL;
    if (!sg) return *why = "out of host memory", NULL;
    if (be->vm_reserve(ord, want, &base) != AG_OK) {
      free(sg);
      *why = "the backend could not reserve address space";
      return NULL;
    }
    sg->a = a;
    sg->id = ++a->next_seg_id;
    sg->base = base;
    sg->reserved = want;
    sg->pool = (uint8_t)pool;
    sg->expandable = true;
    sg->sid = s->id;
    seg_link(a, sg);
    stat_pool(a->st.segment, pool, 1);
    grow = round_up(size, a->gran);
  }
  if (!raw_permitted(a, grow, why) ||
      (be->vm_map(ord, sg->base, sg->size, grow) != AG_OK && (*why = "the backend could not map") &&
       snprintf(a->be_msg, sizeof a->be_msg, "%s", ag_last_error()) >= 0)) {
    if (!sg->first) { /* a segment created just now */
      stat_pool(a->st.segment, pool, -1);
      be->vm_release(ord, sg->base, sg->reserved);
      seg_unlink(a, sg);
      free(sg);
    }
    return NULL;
  }
  a->st.num_device_alloc++;
  trace(a, T_SEGMENT_MAP, sg, sg->size, grow, s->id, 0);
  if (tail) {
    fs_remove(a, tail);
    tail->size += grow;
  } else {
    ag_block *b = block_new(a);
    if (!b) { /* keep the mapping; it shows up as reserved and is released by empty_cache */
      be->vm_unmap(ord, sg->base, sg->size, grow);
      *why = "out of host memory";
      return NULL;
    }
    b->seg = sg;
    b->sid = s->id;
    b->offset = sg->size;
    b->size = grow;
    b->prev = sg->last;
    if (sg->last) sg->last->next = b;
    else sg->first = b;
    sg->last = b;
    tail = b;
  }
  sg->size += grow;
  seg_account(a, sg, (int64_t)grow, 0);
  return tail;
}

/* ---- blocks ---- */

static bool should_split(const ag_allocator *a, const ag_block *b, size_t size) {
  size_t rem = b->size - size;
  if (b->seg->pool == POOL_SMALL || b->seg->expandable) return rem >= K_MIN_BLOCK;
  return size < a->cfg.max_split && rem > K_SMALL_SIZE;
}

/* b, found at `slot` of its pool's set (NO_SLOT: in no set), leaves the
 * set; split to `size` when do_split, the remainder taking b's slot when the
 * order allows. */
#define NO_SLOT SIZE_MAX
static void split(ag_allocator *a, ag_block *b, size_t size);
static void take_found(ag_allocator *a, ag_block *b, size_t slot, size_t size, bool do_split) {
  free_set *fs = &a->pools[b->seg->pool];
  if (slot != NO_SLOT && do_split) {
    ag_block *r = block_new(a);
    if (r) {
      size_t old = b->size;
      r->seg = b->seg;
      r->sid = b->sid;
      r->offset = b->offset + size;
      r->size = b->size - size;
      if (fs_fits_at(fs, slot, r)) {
        r->prev = b;
        r->next = b->next;
        if (b->next) b->next->prev = r;
        else b->seg->last = r;
        b->next = r;
        b->size = size;
        fs_replace_at(a, fs, slot, old, r);
        return;
      }
      block_recycle(a, r);
    }
  }
  if (slot != NO_SLOT) fs_remove_at(a, fs, slot);
  if (do_split) split(a, b, size);
}

static void split(ag_allocator *a, ag_block *b, size_t size) {
  ag_block *r = block_new(a);
  if (!r) return; /* no host memory: hand out the whole block */
  r->seg = b->seg;
  r->sid = b->sid;
  r->offset = b->offset + size;
  r->size = b->size - size;
  r->prev = b;
  r->next = b->next;
  if (b->next) b->next->prev = r;
  else b->seg->last = r;
  b->next = r;
  b->size = size;
  if (!fs_insert(a, r)) { /* undo: keep the remainder attached to b */
    b->size += r->size;
    b->next = r->next;
    if (r->next) r->next->prev = b;
    else b->seg->last = b;
    block_recycle(a, r);
  }
}

/* b (allocated or pending, not in any set) becomes free: merge with free
 * neighbours and cache it. */
static void free_block(ag_allocator *a, ag_block *b) {
  stat_pool(a->st.active, b->seg->pool, -1);
  stat_pool(a->st.active_bytes, b->seg->pool, -(int64_t)b->size);
  b->n_uses = 0;
  ag_block *p = b->prev;
  if (p && p->state == B_FREE) {
    fs_remove(a, p);
    p->size += b->size;
    p->next = b->next;
    if (b->next) b->next->prev = p;
    else p->seg->last = p;
    block_recycle(a, b);
    b = p;
  }
  ag_block *n = b->next;
  if (n && n->state == B_FREE && b->state != B_FREE) {
    /* Only the next block is free (a block freed before its split-off
     * remainder is reused): the merged block usually takes n's slot. */
    free_set *fs = &a->pools[n->seg->pool];
    size_t i = fs_lower(fs, n->sid, n->size, n->seg->id, n->offset);
    if (i < fs->n && fs->v[i] == n) {
      size_t nsize = n->size;
      b->size += nsize;
      if (fs_fits_at(fs, i, b)) {
        b->next = n->next;
        if (n->next) n->next->prev = b;
        else b->seg->last = b;
        fs_replace_at(a, fs, i, nsize, b);
        block_recycle(a, n);
        return;
      }
      b->size -= nsize;
    }
  }
  if (n && n->state == B_FREE) {
    fs_remove(a, n);
    b->size += n->size;
    b->next = n->next;
    if (n->next) n->next->prev = b;
    else b->seg->last = b;
    block_recycle(a, n);
  }
  if (!fs_insert(a, b)) b->state = B_FREE; /* out of host memory: leaks until empty_cache */
}

static ag_bevent *event_get(ag_allocator *a) {
  if (a->n_evpool) return a->evpool[--a->n_evpool];
  ag_bevent *e = NULL;
  if (a->ds->be->event_create(a->ds->ord, false, &e) != AG_OK) return NULL;
  return e;
}

static void event_put(ag_allocator *a, ag_bevent *e) {
  if (a->n_evpool == a->cap_evpool) {
    size_t nc = a->cap_evpool ? a->cap_evpool * 2 : 16;
    ag_bevent **nv = realloc(a->evpool, nc * sizeof *nv);
    if (!nv) {
      a->ds->be->event_destroy(e);
      return;
    }
    a->evpool = nv;
    a->cap_evpool = nc;
  }
  a->evpool[a->n_evpool++] = e;
}

static void pend_done(ag_allocator *a, size_t i) {
  pending_ev pe = a->pend[i];
  a->pend[i] = a->pend[--a->n_pend];
  event_put(a, pe.ev);
  if (--pe.b->events == 0) {
    trace(a, T_FREE_COMPLETED, pe.b->seg, pe.b->offset, pe.b->size, pe.b->sid, pe.b->category);
    free_block(a, pe.b);
  }
}

/* Cache blocks whose events have completed. Never blocks. */
static void process_events(ag_allocator *a) {
  const ag_backend *be = a->ds->be;
  for (size_t i = 0; i < a->n_pend;) {
    bool done = false;
    if (be->event_query(a->pend[i].ev, &done) == AG_OK && done)
      pend_done(a, i);
    else
      i++;
  }
}

/* Free with record-stream uses: an event on each using stream; the block is
 * cached when all have completed. */
static void free_with_events(ag_allocator *a, ag_block *b) {
  const ag_backend *be = a->ds->be;
  b->state = B_PENDING;
  b->events = 1; /* held while recording so an early completion cannot free it */
  for (int i = 0; i < b->n_uses; i++) {
    ag_stream *s = b->uses[i];
    ag_bevent *e = event_get(a);
    bool ok = false;
    if (e && be->event_record(e, s->bs) == AG_OK) {
      if (a->n_pend == a->cap_pend) {
        size_t nc = a->cap_pend ? a->cap_pend * 2 : 16;
        pending_ev *nv = realloc(a->pend, nc * sizeof *nv);
        if (nv) a->pend = nv, a->cap_pend = nc;
      }
      if (a->n_pend < a->cap_pend) {
        a->pend[a->n_pend++] = (pending_ev){e, b};
        b->events++;
        ok = true;
      }
    }
    if (!ok) {
      /* No event: the only safe way to know the stream is done with b. */
      if (e) event_put(a, e);
      a->st.num_syncs_all_streams++;
      ag__sync_stream(s, "allocator free (event unavailable)");
    }
  }
  if (--b->events == 0) free_block(a, b);
}

/* Return every fully free segment (and free expandable tails) to the backend
 * after one device sync. Returns whether anything was released. */
static bool release_cached(ag_allocator *a, ag_status *out_st) {
  *out_st = AG_OK;
  bool any = a->n_pend > 0;
  for (seg *sg = a->segs; sg && !any; sg = sg->next) {
    if (sg->bypass) continue;
    if (sg->expandable)
      any = !sg->first || (sg->last->state == B_FREE &&
                           round_up(sg->last->offset, a->gran) < sg->size);
    else
      any = sg->first->state == B_FREE && !sg->first->next;
  }
  if (!any) return false;
  /* Queued work may still touch blocks already cached in stream order. */
  a->st.num_syncs_all_streams++;
  ag_status st = ag__sync_device(a->ds, "allocator: release cached memory");
  if (st != AG_OK) {
    *out_st = st;
    return false;
  }
  while (a->n_pend) pend_done(a, a->n_pend - 1);
  const ag_backend *be = a->ds->be;
  bool released = false;
  for (seg *sg = a->segs, *nx; sg; sg = nx) {
    nx = sg->next;
    if (sg->bypass) continue;
    if (!sg->expandable) {
      if (sg->first->state == B_FREE && !sg->first->next) {
        fs_remove(a, sg->first);
        seg_release(a, sg);
        released = true;
      }
      continue;
    }
    ag_block *t = sg->last;
    if (!t) {
      seg_release(a, sg);
      continue;
    }
    if (t->state != B_FREE) continue;
    size_t cut = round_up(t->offset, a->gran);
    if (cut >= sg->size) continue;
    size_t n = sg->size - cut;
    fs_remove(a, t);
    if (be->vm_unmap(a->ds->ord, sg->base, cut, n) != AG_OK) {
      fs_insert(a, t);
      continue;
    }
    a->st.num_device_free++;
    trace(a, T_SEGMENT_UNMAP, sg, cut, n, sg->sid, 0);
    seg_account(a, sg, -(int64_t)n, 0);
    sg->size = cut;
    released = true;
    if (cut == t->offset) {
      sg->last = t->prev;
      if (t->prev) t->prev->next = NULL;
      else sg->first = NULL;
      block_recycle(a, t);
    } else {
      t->size = cut - t->offset;
      fs_insert(a, t);
    }
    if (!sg->first) seg_release(a, sg);
  }
  return released;
}

static size_t largest_free(const ag_allocator *a) {
  size_t m = 0;
  for (int p = 0; p < 2; p++)
    for (size_t i = 0; i < a->pools[p].n; i++)
      if (a->pools[p].v[i]->size > m) m = a->pools[p].v[i]->size;
  return m;
}

static void fmt_bytes(char *buf, size_t len, double b) {
  const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int i = 0;
  while (b >= 1024.0 && i < 4) b /= 1024.0, i++;
  if (i == 0) snprintf(buf, len, "%.0f %s", b, u[i]);
  else snprintf(buf, len, "%.2f %s", b, u[i]);
}

static ag_status oom_error(ag_allocator *a, size_t bytes, const char *why, const char *be_msg) {
  size_t fr = 0, total = 0;
  a->ds->be->mem_info(a->ds->ord, &fr, &total);
  size_t alloc = (size_t)a->st.allocated_bytes[AG_POOL_ALL].current;
  size_t resv = reserved_total(a);
  char s_req[32], s_tot[32], s_free[32], s_al[32], s_ru[32], s_lf[32], s_cap[48] = "";
  fmt_bytes(s_req, sizeof s_req, (double)bytes);
  fmt_bytes(s_tot, sizeof s_tot, (double)total);
  fmt_bytes(s_free, sizeof s_free, (double)fr);
  fmt_bytes(s_al, sizeof s_al, (double)alloc);
  fmt_bytes(s_ru, sizeof s_ru, (double)(resv - alloc));
  fmt_bytes(s_lf, sizeof s_lf, (double)largest_free(a));
  if (a->cap) {
    char c[32];
    fmt_bytes(c, sizeof c, (double)a->cap);
    snprintf(s_cap, sizeof s_cap, " (capped at %s)", c);
  }
  /* Fragmentation is the likely cause when the cached but unusable memory
   * alone would have held the request. */
  const char *hint = resv - alloc >= bytes
                         ? (a->cfg.expandable || !a->vm_ok
                                ? "memory is fragmented: free tensors or reduce the batch size"
                                : "memory is fragmented: try AG_ALLOC_CONF=expandable_segments:1, "
                                  "or reduce the batch size")
                         : "reduce the batch size or the model size";
  return ag_error_set(AG_ERR_OOM,
                      "out of memory on %s: tried to allocate %s (%s%s%s); device capacity %s%s, "
                      "%s free; anygrad holds %s allocated and %s reserved but unallocated; "
                      "largest free block %s. Hint: %s",
                      a->ds->label, s_req, why, be_msg && *be_msg ? ": " : "",
                      be_msg ? be_msg : "", s_tot, s_cap, s_free, s_al, s_ru, s_lf, hint);
}

/* ---- the internal interface ---- */

ag_status ag__alloc_env_check(void) {
  const char *env = getenv("AG_ALLOC_CONF");
  alloc_conf c;
  conf_default(&c);
  return env ? conf_parse(env, &c, "AG_ALLOC_CONF") : AG_OK;
}

struct ag_allocator *ag__allocator_create(ag_devstate *ds) {
  ag_allocator *a = calloc(1, sizeof *a);
  if (!a) {
    ag_error_set(AG_ERR_OOM, "allocator for %s: out of host memory", ds->label);
    return NULL;
  }
  a->ds = ds;
  conf_default(&a->cfg);
  const char *env = getenv("AG_ALLOC_CONF");
  if (env && conf_parse(env, &a->cfg, "AG_ALLOC_CONF") != AG_OK) {
    free(a);
    return NULL;
  }
  const ag_backend *be = ds->be;
  a->vm_ok = be->vm_granularity && be->vm_reserve && be->vm_map && be->vm_unmap && be->vm_release;
  if (a->vm_ok && be->device_props) {
    /* A module may fill the vm_* slots for a runtime that turns out to lack
     * them (HIP before 5.3); the device properties have the last word. */
    ag_device_props props;
    memset(&props, 0, sizeof props);
    if (be->device_props(ds->ord, &props) != AG_OK || !props.virtual_memory) a->vm_ok = false;
  }
  if (a->vm_ok) {
    a->gran = be->vm_granularity(ds->ord);
    if (a->gran == 0 || (a->gran & (a->gran - 1))) a->vm_ok = false;
  }
  if (a->ring_cap != a->cfg.trace_entries && ring_resize(a, a->cfg.trace_entries) != AG_OK) {
    free(a);
    return NULL;
  }
  if (a->cfg.has_fraction || a->cfg.has_cap) {
    if (a->cfg.has_cap) {
      a->cap = a->cfg.cap_bytes;
    } else {
      size_t fr = 0, total = 0;
      if (be->mem_info(ds->ord, &fr, &total) == AG_OK) a->cap = (size_t)(a->cfg.fraction * (double)total);
    }
  }
  a->stamp0 = stamp();
  a->ns0 = now_ns();
  alock_init(&a->mu);
  return a;
}

void ag__allocator_destroy(ag_allocator *a) {
  if (!a) return;
  alock_lock(&a->mu);
  while (a->n_pend) {
    pending_ev pe = a->pend[--a->n_pend];
    a->ds->be->event_destroy(pe.ev);
  }
  while (a->segs) seg_release(a, a->segs);
  for (size_t i = 0; i < a->n_evpool; i++) a->ds->be->event_destroy(a->evpool[i]);
  while (a->spare) {
    ag_block *b = a->spare;
    a->spare = b->next;
    free(b);
  }
  alock_unlock(&a->mu);
  alock_destroy(&a->mu);
  free(a->pools[0].v);
  free(a->pools[1].v);
  free(a->pend);
  free(a->evpool);
  free(a->ring);
  free(a->pk_buf);
  free(a);
}

static void mark_allocated(ag_allocator *a, ag_block *b, size_t bytes, ag_mem_category cat) {
  int pool = b->seg->pool;
  b->state = B_ALLOC;
  b->requested = bytes;
  b->category = (uint8_t)cat;
  b->n_uses = 0;
  stat_pool(a->st.allocation, pool, 1);
  stat_pool(a->st.allocated_bytes, pool, (int64_t)b->size);
  stat_pool(a->st.requested_bytes, pool, (int64_t)bytes);
  stat_pool(a->st.active, pool, 1);
  stat_pool(a->st.active_bytes, pool, (int64_t)b->size);
  stat_add(&a->st.category_bytes[cat], (int64_t)b->size);
  b->oversize = b->size >= a->cfg.max_split && !b->seg->bypass;
  if (b->oversize) stat_add(&a->st.oversize_allocations, 1);
  trace(a, T_ALLOC, b->seg, b->offset, b->size, b->sid, cat);
}

static void peak_check(ag_allocator *a, bool grew);

ag_status ag__alloc(ag_devstate *ds, size_t bytes, ag_stream *s, ag_mem_category cat,
                    ag_block **out_block) {
  ag_allocator *a = ds->alloc;
  if (AG_UNLIKELY(!out_block || !s)) return ag_error_set(AG_ERR_INVALID, "ag__alloc: NULL argument");
  *out_block = NULL;
  if (cat <= AG_MEM_OTHER || cat >= AG_MEM_CATEGORY_COUNT) cat = ag_mem_category_current();
  if (AG_UNLIKELY(bytes > ((size_t)1 << 56))) {
    alock_lock(&a->mu);
    a->st.num_ooms++;
    ag_status st = oom_error(a, bytes, "request larger than any device", NULL);
    alock_unlock(&a->mu);
    return st;
  }
  alock_lock(&a->mu);
  int64_t reserved0 = a->st.reserved_bytes[AG_POOL_ALL].current;
  size_t size = round_size(&a->cfg, bytes ? bytes : 1);
  int pool = size <= K_SMALL_SIZE ? POOL_SMALL : POOL_LARGE;
  const char *why = "no memory left";
  ag_block *b = NULL;
  size_t slot = NO_SLOT; /* where find_free found b */
  if (AG_UNLIKELY(!a->cfg.caching)) {
    b = seg_new(a, pool, s, size, true, &why);
  } else {
    if (a->n_pend) process_events(a);
    b = find_free(a, pool, s, size, &slot);
    bool expandable = a->cfg.expandable && a->vm_ok;
    for (int attempt = 0; !b && attempt < 2; attempt++) {
      if (attempt == 1) {
        ag_status st;
        /* One retry after returning the cache (syncs once, counted, when
         * there is something to return); a transient failure retries too. */
        release_cached(a, &st);
        if (st != AG_OK) {
          why = "the cache could not be released: its host sync was refused";
          break;
        }
        a->st.num_alloc_retries++;
        b = find_free(a, pool, s, size, &slot);
        if (b) break;
      }
      if (expandable) b = expandable_grow(a, pool, s, size, &why);
      if (!b) b = seg_new(a, pool, s, segment_size_for(pool, size), false, &why);
    }
    if (b) take_found(a, b, slot, size, should_split(a, b, size));
  }
  if (AG_UNLIKELY(!b)) {
    a->st.num_ooms++;
    trace(a, T_OOM, NULL, 0, size, s->id, cat);
    ag_status st = oom_error(a, bytes, why, strncmp(why, "the backend", 11) ? NULL : a->be_msg);
    alock_unlock(&a->mu);
    return st;
  }
  mark_allocated(a, b, bytes, cat);
  if (AG_UNLIKELY(a->pk_users)) peak_check(a, a->st.reserved_bytes[AG_POOL_ALL].current > reserved0);
  alock_unlock(&a->mu);
  *out_block = b;
  return AG_OK;
}

void ag__free(ag_block *b) {
  if (!b) return;
  ag_allocator *a = b->seg->a;
  if (AG_UNLIKELY(b->seg->bypass)) {
    /* Without a cache the memory goes back at once, so every stream that
     * used it must be finished first (the device: the allocation stream may
     * be gone already). */
    ag__sync_device(b->seg->a->ds, "allocator free (caching:0)");
  }
  alock_lock(&a->mu);
  int pool = b->seg->pool;
  stat_pool(a->st.allocation, pool, -1);
  stat_pool(a->st.allocated_bytes, pool, -(int64_t)b->size);
  stat_pool(a->st.requested_bytes, pool, -(int64_t)b->requested);
  stat_add(&a->st.category_bytes[b->category], -(int64_t)b->size);
  if (b->oversize) stat_add(&a->st.oversize_allocations, -1);
  if (b->seg->bypass) {
    trace(a, T_FREE, b->seg, b->offset, b->size, b->sid, b->category);
    stat_pool(a->st.active, pool, -1);
    stat_pool(a->st.active_bytes, pool, -(int64_t)b->size);
    b->seg->first = b; /* seg_release recycles the block */
    seg_release(a, b->seg);
  } else if (b->n_uses) {
    trace(a, T_FREE_REQUESTED, b->seg, b->offset, b->size, b->sid, b->category);
    free_with_events(a, b);
  } else {
    trace(a, T_FREE, b->seg, b->offset, b->size, b->sid, b->category);
    free_block(a, b);
  }
  alock_unlock(&a->mu);
}

void ag__block_record_stream(ag_block *b, ag_stream *s) {
  if (!b || !s || s->id == b->sid) return;
  ag_allocator *a = b->seg->a;
  alock_lock(&a->mu);
  bool seen = false;
  for (int i = 0; i < b->n_uses && !seen; i++) seen = b->uses[i] == s;
  if (!seen) {
    if (b->n_uses == b->cap_uses) {
      int nc = b->cap_uses ? b->cap_uses * 2 : 2;
      ag_stream **nv = realloc(b->uses, (size_t)nc * sizeof *nv);
      if (!nv) {
        /* Cannot remember the use: wait for s now instead (rare). */
        alock_unlock(&a->mu);
        ag__sync_stream(s, "allocator record_stream (out of host memory)");
        return;
      }
      b->uses = nv;
      b->cap_uses = nc;
    }
    b->uses[b->n_uses++] = s;
  }
  alock_unlock(&a->mu);
}

void ag__alloc_stream_destroyed(ag_devstate *ds, ag_stream *s) {
  ag_allocator *a = ds ? ds->alloc : NULL;
  if (!a || !s) return;
  alock_lock(&a->mu);
  for (seg *sg = a->segs, *nx; sg; sg = nx) {
    nx = sg->next;
    for (ag_block *b = sg->first; b; b = b->next)
      for (int i = 0; i < b->n_uses; i++)
        if (b->uses[i] == s) b->uses[i--] = b->uses[--b->n_uses];
    if (sg->sid != s->id || sg->bypass) continue;
    ag_block *f = sg->first;
    if (f && (f->state != B_FREE || f->next)) continue;
    if (f) fs_remove(a, f);
    seg_release(a, sg);
  }
  alock_unlock(&a->mu);
}

void *ag__block_base(const ag_block *b) { return b->seg->base; }
size_t ag__block_offset(const ag_block *b) { return b->offset; }
size_t ag__block_size(const ag_block *b) { return b->size; }
size_t ag__block_requested(const ag_block *b) { return b->requested; }
ag_mem_category ag__block_category(const ag_block *b) { return (ag_mem_category)b->category; }

void ag__block_set_category(ag_block *b, ag_mem_category cat) {
  if (!b || cat < 0 || cat >= AG_MEM_CATEGORY_COUNT) return;
  ag_allocator *a = b->seg->a;
  alock_lock(&a->mu);
  if (b->state == B_ALLOC && b->category != cat) {
    stat_add(&a->st.category_bytes[b->category], -(int64_t)b->size);
    stat_add(&a->st.category_bytes[cat], (int64_t)b->size);
    b->category = (uint8_t)cat;
  }
  alock_unlock(&a->mu);
}

/* ---- object-level operations ---- */

static void stats_fill(ag_allocator *a, ag_memory_stats *o) {
  memset(o, 0, sizeof *o);
  const alloc_stats *s = &a->st;
  memcpy(o->allocation, s->allocation, sizeof o->allocation);
  memcpy(o->segment, s->segment, sizeof o->segment);
  memcpy(o->active, s->active, sizeof o->active);
  memcpy(o->inactive_split, s->inactive_split, sizeof o->inactive_split);
  memcpy(o->allocated_bytes, s->allocated_bytes, sizeof o->allocated_bytes);
  memcpy(o->reserved_bytes, s->reserved_bytes, sizeof o->reserved_bytes);
  memcpy(o->active_bytes, s->active_bytes, sizeof o->active_bytes);
  memcpy(o->inactive_split_bytes, s->inactive_split_bytes, sizeof o->inactive_split_bytes);
  memcpy(o->requested_bytes, s->requested_bytes, sizeof o->requested_bytes);
  memcpy(o->category_bytes, s->category_bytes, sizeof o->category_bytes);
  o->oversize_allocations = s->oversize_allocations;
  o->oversize_segments = s->oversize_segments;
  o->num_alloc_retries = s->num_alloc_retries;
  o->num_ooms = s->num_ooms;
  o->num_syncs_all_streams = s->num_syncs_all_streams;
  o->num_device_alloc = s->num_device_alloc;
  o->num_device_free = s->num_device_free;
  o->num_pending_events = (int64_t)a->n_pend;
  o->max_split_size = a->cfg.max_split == SIZE_MAX ? -1 : (int64_t)a->cfg.max_split;
  o->cap_bytes = (int64_t)a->cap;
  o->largest_free_block = (int64_t)largest_free(a);
  o->caching = a->cfg.caching;
  o->expandable_segments = a->cfg.expandable && a->vm_ok;
}

void ag__alloc_stats(ag_allocator *a, ag_memory_stats *o) {
  alock_lock(&a->mu);
  stats_fill(a, o);
  alock_unlock(&a->mu);
}

static void peak_reset(ag_mem_stat *s, size_t n) {
  for (size_t i = 0; i < n; i++) s[i].peak = s[i].current;
}

void ag__alloc_reset_peak(ag_allocator *a) {
  alock_lock(&a->mu);
  alloc_stats *s = &a->st;
  /* alloc_stats is a run of ag_mem_stat followed by counters. */
  peak_reset((ag_mem_stat *)s, offsetof(alloc_stats, num_alloc_retries) / sizeof(ag_mem_stat));
  a->pk_bytes = -1; /* the next high is a new peak; the last snapshot stays until then */
  a->pk_target = 0;
  alock_unlock(&a->mu);
}

ag_status ag__alloc_empty_cache(ag_allocator *a) {
  alock_lock(&a->mu);
  ag_status st;
  trace(a, T_EMPTY_CACHE, NULL, 0, 0, 0, 0);
  release_cached(a, &st);
  alock_unlock(&a->mu);
  return st;
}

ag_status ag__alloc_set_cap(ag_allocator *a, size_t bytes) {
  alock_lock(&a->mu);
  a->cap = bytes;
  alock_unlock(&a->mu);
  return AG_OK;
}

ag_status ag__alloc_set_fraction(ag_allocator *a, double fraction) {
  if (!(fraction >= 0.0 && fraction <= 1.0))
    return ag_error_set(AG_ERR_INVALID, "ag_memory_set_fraction: fraction %g is not in [0, 1]",
                        fraction);
  size_t fr = 0, total = 0;
  ag_status st = a->ds->be->mem_info(a->ds->ord, &fr, &total);
  if (st != AG_OK) return st;
  return ag__alloc_set_cap(a, (size_t)(fraction * (double)total));
}

ag_status ag__alloc_configure(ag_allocator *a, const char *conf) {
  if (!conf) return ag_error_set(AG_ERR_INVALID, "ag_alloc_configure: NULL string");
  alock_lock(&a->mu);
  alloc_conf c = a->cfg;
  c.has_cap = c.has_fraction = false;
  ag_status st = conf_parse(conf, &c, "ag_alloc_configure");
  if (st == AG_OK && c.trace_entries != a->ring_cap) st = ring_resize(a, c.trace_entries);
  if (st == AG_OK) {
    bool fr = c.has_fraction, cp = c.has_cap;
    a->cfg = c;
    if (cp) a->cap = c.cap_bytes;
    alock_unlock(&a->mu);
    if (fr) st = ag__alloc_set_fraction(a, c.fraction);
    return st;
  }
  alock_unlock(&a->mu);
  return st;
}

ag_status ag__alloc_inject(ag_allocator *a, int nth, int count) {
  if (nth < 0) return ag_error_set(AG_ERR_INVALID, "ag_alloc_inject_failure: nth %d < 0", nth);
  alock_lock(&a->mu);
  a->inj_at = nth ? a->raw_attempts + (uint64_t)nth : 0;
  a->inj_count = count == 0 ? 1 : count;
  alock_unlock(&a->mu);
  return AG_OK;
}

/* ---- text summary ---- */

typedef struct {
  char *p;
  size_t left;
} sbuf;

__attribute__((format(printf, 2, 3))) static void sb_printf(sbuf *b, const char *fmt, ...) {
  if (b->left <= 1) return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(b->p, b->left, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  size_t w = (size_t)n < b->left ? (size_t)n : b->left - 1;
  b->p += w;
  b->left -= w;
}

/* A free-form row padded to the table's width. */
__attribute__((format(printf, 2, 3))) static void sb_row(sbuf *b, const char *fmt, ...) {
  char line[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  sb_printf(b, "| %-84s |\n", line);
}

static void sum_row_bytes(sbuf *b, const char *name, const ag_mem_stat *s) {
  static const char *const sub[] = {"", "  from small pool", "  from large pool"};
  for (int p = 0; p < AG_POOL_COUNT; p++) {
    char c[32], pk[32], al[32], fr[32];
    fmt_bytes(c, sizeof c, (double)s[p].current);
    fmt_bytes(pk, sizeof pk, (double)s[p].peak);
    fmt_bytes(al, sizeof al, (double)s[p].allocated);
    fmt_bytes(fr, sizeof fr, (double)s[p].freed);
    sb_printf(b, "| %-26s | %12s | %12s | %12s | %12s |\n", p ? sub[p] : name, c, pk, al, fr);
  }
}

static void sum_row_count(sbuf *b, const char *name, const ag_mem_stat *s, int n) {
  static const char *const sub[] = {"", "  from small pool", "  from large pool"};
  for (int p = 0; p < n; p++)
    sb_printf(b, "| %-26s | %12" PRId64 " | %12" PRId64 " | %12" PRId64 " | %12" PRId64 " |\n",
              p ? sub[p] : name, s[p].current, s[p].peak, s[p].allocated, s[p].freed);
}

void ag__alloc_summary(ag_allocator *a, char *buf, size_t len) {
  if (!buf || !len) return;
  buf[0] = 0;
  ag_memory_stats s;
  ag__alloc_stats(a, &s);
  sbuf b = {buf, len};
  const char *rule =
      "|============================================================================="
      "=========|\n";
  sb_printf(&b, "%s", rule);
  sb_row(&b, "anygrad memory summary: %s", a->ds->label);
  char ms[32] = "unlimited", cap[32] = "none";
  if (s.max_split_size >= 0) fmt_bytes(ms, sizeof ms, (double)s.max_split_size);
  if (s.cap_bytes) fmt_bytes(cap, sizeof cap, (double)s.cap_bytes);
  sb_row(&b, "caching: %s  expandable segments: %s  max_split_size: %s  cap: %s",
         s.caching ? "on" : "off", s.expandable_segments ? "on" : "off", ms, cap);
  sb_printf(&b, "%s| %-26s | %12s | %12s | %12s | %12s |\n%s", rule, "Metric", "Cur Usage",
            "Peak Usage", "Tot Alloc", "Tot Freed", rule);
  sum_row_bytes(&b, "Allocated memory", s.allocated_bytes);
  sum_row_bytes(&b, "Active memory", s.active_bytes);
  sum_row_bytes(&b, "Requested memory", s.requested_bytes);
  sum_row_bytes(&b, "Reserved memory", s.reserved_bytes);
  sum_row_bytes(&b, "Non-releasable memory", s.inactive_split_bytes);
  sb_printf(&b, "%s", rule);
  sum_row_count(&b, "Allocations", s.allocation, AG_POOL_COUNT);
  sum_row_count(&b, "Active allocs", s.active, AG_POOL_COUNT);
  sum_row_count(&b, "Reserved segments", s.segment, AG_POOL_COUNT);
  sum_row_count(&b, "Non-releasable allocs", s.inactive_split, AG_POOL_COUNT);
  sb_printf(&b, "%s", rule);
  sum_row_count(&b, "Oversize allocations", &s.oversize_allocations, 1);
  sum_row_count(&b, "Oversize segments", &s.oversize_segments, 1);
  sb_printf(&b, "%s| %-26s | %12s | %12s | %12s | %12s |\n%s", rule, "Allocated by category",
            "Cur Usage", "Peak Usage", "Tot Alloc", "Tot Freed", rule);
  for (int c = 0; c < AG_MEM_CATEGORY_COUNT; c++) {
    char name[40];
    snprintf(name, sizeof name, "  %s", ag_mem_category_name((ag_mem_category)c));
    ag_mem_stat one[1] = {s.category_bytes[c]};
    char cu[32], pk[32], al[32], fr[32];
    fmt_bytes(cu, sizeof cu, (double)one[0].current);
    fmt_bytes(pk, sizeof pk, (double)one[0].peak);
    fmt_bytes(al, sizeof al, (double)one[0].allocated);
    fmt_bytes(fr, sizeof fr, (double)one[0].freed);
    sb_printf(&b, "| %-26s | %12s | %12s | %12s | %12s |\n", name, cu, pk, al, fr);
  }
  char lf[32];
  fmt_bytes(lf, sizeof lf, (double)s.largest_free_block);
  sb_printf(&b, "%s", rule);
  sb_row(&b, "retries: %" PRId64 "  OOMs: %" PRId64 "  allocator syncs: %" PRId64
             "  largest free block: %s",
         s.num_alloc_retries, s.num_ooms, s.num_syncs_all_streams, lf);
  sb_row(&b, "raw allocs: %" PRId64 "  raw frees: %" PRId64 "  pending events: %" PRId64,
         s.num_device_alloc, s.num_device_free, s.num_pending_events);
  sb_printf(&b, "%s", rule);
}

/* ---- JSON snapshot ---- */

static void json_stat(FILE *f, const char *name, const ag_mem_stat *s, int n, bool comma) {
  static const char *const pools[] = {"all", "small_pool", "large_pool"};
  fprintf(f, "\"%s\":{", name);
  for (int p = 0; p < n; p++)
    fprintf(f, "%s\"%s\":{\"current\":%" PRId64 ",\"peak\":%" PRId64 ",\"allocated\":%" PRId64
               ",\"freed\":%" PRId64 "}",
            p ? "," : "", n == 1 ? "all" : pools[p], s[p].current, s[p].peak, s[p].allocated,
            s[p].freed);
  fprintf(f, "}%s\n", comma ? "," : "");
}

/* The JSON snapshot, with a->mu held; without the trace ring its
 * "trace" is empty. */
static void snapshot_write(ag_allocator *a, FILE *f, bool with_trace) {
  ag_memory_stats s;
  stats_fill(a, &s);
  fprintf(f, "{\"device\":\"%s\",\n\"config\":{\"caching\":%s,\"expandable_segments\":%s,"
             "\"expandable_supported\":%s,\"max_split_size\":%" PRId64
             ",\"roundup_power2_divisions\":%d,\"cap_bytes\":%zu,\"trace_max_entries\":%zu},\n",
          a->ds->label, a->cfg.caching ? "true" : "false", a->cfg.expandable ? "true" : "false",
          a->vm_ok ? "true" : "false", s.max_split_size, a->cfg.rp2_div, a->cap, a->ring_cap);
  fprintf(f, "\"stats\":{\n");
  json_stat(f, "allocation", s.allocation, AG_POOL_COUNT, true);
  json_stat(f, "segment", s.segment, AG_POOL_COUNT, true);
  json_stat(f, "active", s.active, AG_POOL_COUNT, true);
  json_stat(f, "inactive_split", s.inactive_split, AG_POOL_COUNT, true);
  json_stat(f, "allocated_bytes", s.allocated_bytes, AG_POOL_COUNT, true);
  json_stat(f, "reserved_bytes", s.reserved_bytes, AG_POOL_COUNT, true);
  json_stat(f, "active_bytes", s.active_bytes, AG_POOL_COUNT, true);
  json_stat(f, "inactive_split_bytes", s.inactive_split_bytes, AG_POOL_COUNT, true);
  json_stat(f, "requested_bytes", s.requested_bytes, AG_POOL_COUNT, true);
  json_stat(f, "oversize_allocations", &s.oversize_allocations, 1, true);
  json_stat(f, "oversize_segments", &s.oversize_segments, 1, true);
  fprintf(f, "\"category_bytes\":{");
  for (int c = 0; c < AG_MEM_CATEGORY_COUNT; c++)
    fprintf(f, "%s\"%s\":{\"current\":%" PRId64 ",\"peak\":%" PRId64 "}", c ? "," : "",
            ag_mem_category_name((ag_mem_category)c), s.category_bytes[c].current,
            s.category_bytes[c].peak);
  fprintf(f, "},\n\"num_alloc_retries\":%" PRId64 ",\"num_ooms\":%" PRId64
             ",\"num_syncs_all_streams\":%" PRId64 ",\"num_device_alloc\":%" PRId64
             ",\"num_device_free\":%" PRId64 ",\"largest_free_block\":%" PRId64 "},\n",
          s.num_alloc_retries, s.num_ooms, s.num_syncs_all_streams, s.num_device_alloc,
          s.num_device_free, s.largest_free_block);
  static const char *const states[] = {"inactive", "active_allocated", "active_pending_free"};
  fprintf(f, "\"segments\":[");
  for (seg *sg = a->segs; sg; sg = sg->next) {
    fprintf(f, "%s\n{\"id\":%" PRIu64 ",\"address\":\"%p\",\"total_size\":%zu,\"reserved_size\":%zu,"
               "\"stream\":%u,\"pool\":\"%s\",\"expandable\":%s,\"blocks\":[",
            sg == a->segs ? "" : ",", sg->id, sg->base, sg->size,
            sg->expandable ? sg->reserved : sg->size, sg->sid,
            sg->pool == POOL_SMALL ? "small" : "large", sg->expandable ? "true" : "false");
    for (ag_block *b = sg->first; b; b = b->next)
      fprintf(f, "%s{\"offset\":%zu,\"size\":%zu,\"requested_size\":%zu,\"stream\":%u,"
                 "\"category\":\"%s\",\"state\":\"%s\"}",
              b == sg->first ? "" : ",", b->offset, b->size,
              b->state == B_FREE ? (size_t)0 : b->requested, b->sid,
              ag_mem_category_name((ag_mem_category)b->category), states[b->state]);
    fprintf(f, "]}");
  }
  fprintf(f, "],\n\"trace\":[");
  if (!with_trace) {
    fprintf(f, "]}\n");
    return;
  }
  /* Map recorded stamps to nanoseconds of CLOCK_MONOTONIC. */
  uint64_t st1 = stamp(), ns1 = now_ns();
  double per = st1 > a->stamp0 ? (double)(ns1 - a->ns0) / (double)(st1 - a->stamp0) : 1.0;
  if (!AG_STAMP_IS_TSC) per = 1.0;
  size_t start = (a->ring_head + a->ring_cap - a->ring_n) % (a->ring_cap ? a->ring_cap : 1);
  for (size_t k = 0; k < a->ring_n; k++) {
    const trace_ev *e = &a->ring[(start + k) % a->ring_cap];
    fprintf(f, "%s\n{\"seq\":%" PRIu64 ",\"time_ns\":%" PRIu64 ",\"action\":\"%s\",\"segment\":%" PRIu64
               ",\"offset\":%zu,\"size\":%zu,\"stream\":%u,\"category\":\"%s\"}",
            k ? "," : "", e->seq,
            AG_STAMP_IS_TSC ? a->ns0 + (uint64_t)((double)(int64_t)(e->t_ns - a->stamp0) * per)
                            : e->t_ns,
            k_trace_names[e->action], e->seg_id, e->offset, e->size,
            e->stream, ag_mem_category_name((ag_mem_category)e->category));
  }
  fprintf(f, "]}\n");
}

ag_status ag__alloc_snapshot(ag_allocator *a, FILE *f) {
  alock_lock(&a->mu);
  snapshot_write(a, f, true);
  alock_unlock(&a->mu);
  return ferror(f) ? ag_error_set(AG_ERR_IO, "memory snapshot: write error") : AG_OK;
}

/* ---- segments at the peak ---- */

/* With a->mu held, after an allocation (grew: it reserved memory). The
 * common case costs two comparisons; a snapshot is taken a bounded number
 * of times: each 1/16 rise of the peak, each reservation at a new high, and
 * once per ag__alloc_peak_arm. */
static void peak_check(ag_allocator *a, bool grew) {
  int64_t cur = a->st.allocated_bytes[AG_POOL_ALL].current;
  bool high = cur >= a->st.allocated_bytes[AG_POOL_ALL].peak;
  bool take = (a->pk_target > 0 && cur >= a->pk_target) ||
              (high && (a->pk_bytes < 0 || grew || cur - a->pk_bytes >= a->pk_bytes / 16));
  if (!take) return;
  char *buf = NULL;
  size_t len = 0;
  FILE *m = open_memstream(&buf, &len);
  if (!m) return; /* out of host memory: the last snapshot stays */
  snapshot_write(a, m, false);
  bool bad = ferror(m) != 0;
  if (fclose(m) != 0 || bad || !buf) {
    free(buf);
    return;
  }
  free(a->pk_buf);
  a->pk_buf = buf;
  a->pk_bytes = cur;
  a->pk_target = 0;
  a->pk_gen++;
}

void ag__alloc_peak_capture(ag_allocator *a, bool on) {
  alock_lock(&a->mu);
  if (on && a->pk_users++ == 0) {
    a->pk_bytes = -1;
    a->pk_target = 0;
  } else if (!on && a->pk_users > 0 && --a->pk_users == 0) {
    free(a->pk_buf);
    a->pk_buf = NULL;
  }
  alock_unlock(&a->mu);
}

char *ag__alloc_peak_snapshot(ag_allocator *a, uint64_t *seen, int64_t *out_bytes) {
  char *r = NULL;
  alock_lock(&a->mu);
  if (a->pk_buf && a->pk_gen != *seen) {
    r = strdup(a->pk_buf);
    if (r) {
      *seen = a->pk_gen;
      *out_bytes = a->pk_bytes;
    }
  }
  alock_unlock(&a->mu);
  return r;
}

void ag__alloc_peak_arm(ag_allocator *a) {
  alock_lock(&a->mu);
  int64_t peak = a->st.allocated_bytes[AG_POOL_ALL].peak;
  if (a->pk_users && a->pk_bytes >= 0 && a->pk_bytes < peak) a->pk_target = peak;
  alock_unlock(&a->mu);
}

/* ---- public API: look up the device, then act on its allocator ---- */

static ag_allocator *dev_alloc(ag_device d) {
  ag_devstate *ds = ag__devstate(d);
  return ds ? ds->alloc : NULL;
}

ag_status ag_memory_stats_get(ag_device d, ag_memory_stats *out_stats) {
  if (!out_stats) return ag_error_set(AG_ERR_INVALID, "ag_memory_stats_get: NULL out_stats");
  ag_allocator *a = dev_alloc(d);
  if (!a) return ag_last_status();
  ag__alloc_stats(a, out_stats);
  return AG_OK;
}

ag_status ag_memory_reset_peak(ag_device d) {
  ag_allocator *a = dev_alloc(d);
  if (!a) return ag_last_status();
  ag__alloc_reset_peak(a);
  return AG_OK;
}

ag_status ag_memory_empty_cache(ag_device d) {
  ag_allocator *a = dev_alloc(d);
  return a ? ag__alloc_empty_cache(a) : ag_last_status();
}

ag_status ag_memory_set_cap(ag_device d, size_t bytes) {
  ag_allocator *a = dev_alloc(d);
  return a ? ag__alloc_set_cap(a, bytes) : ag_last_status();
}

ag_status ag_memory_set_fraction(ag_device d, double fraction) {
  ag_allocator *a = dev_alloc(d);
  return a ? ag__alloc_set_fraction(a, fraction) : ag_last_status();
}

ag_status ag_alloc_configure(ag_device d, const char *conf) {
  ag_allocator *a = dev_alloc(d);
  return a ? ag__alloc_configure(a, conf) : ag_last_status();
}

ag_status ag_memory_summary(ag_device d, char *buf, size_t len) {
  if (!buf || !len) return ag_error_set(AG_ERR_INVALID, "ag_memory_summary: empty buffer");
  buf[0] = 0;
  ag_allocator *a = dev_alloc(d);
  if (!a) return ag_last_status();
  ag__alloc_summary(a, buf, len);
  return AG_OK;
}

ag_status ag_memory_snapshot_json(ag_device d, const char *path) {
  if (!path) return ag_error_set(AG_ERR_INVALID, "ag_memory_snapshot_json: NULL path");
  ag_allocator *a = dev_alloc(d);
  if (!a) return ag_last_status();
  ag_output *o = NULL;
  ag_status st = ag_output_open(path, "allocator snapshot", &o);
  if (st == AG_OK) st = ag__alloc_snapshot(a, ag_output_file(o));
  if (st == AG_OK) st = ag_output_commit(o);
  else ag_output_abort(o);
  if (st != AG_OK) {
    char msg[512];
    snprintf(msg, sizeof msg, "%s", ag_last_error());
    st = ag_error_set(st, "ag_memory_snapshot_json: %s", msg);
  }
  return st;
}

ag_status ag_alloc_inject_failure(ag_device d, int nth, int count) {
  ag_allocator *a = dev_alloc(d);
  return a ? ag__alloc_inject(a, nth, count) : ag_last_status();
}
