/* The caching allocator as its parts share it (alloc.c: the pool, alloc_stats.c:
 * statistics, summary and snapshots, alloc_conf.c: configuration and the public
 * API): constants, the lock, blocks, segments, the allocator object and the
 * helpers of the hot path. Never installed. */
#ifndef AG_CORE_ALLOC_POOL_H
#define AG_CORE_ALLOC_POOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>
#if defined(__linux__)
#include <linux/futex.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif
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
static inline void alock_init(alock *l) { atomic_init(&l->v, 0); }
static inline void alock_destroy(alock *l) { (void)l; }
static inline void alock_wait(alock *l, int c) {
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
static inline void alock_init(alock *l) { pthread_mutex_init(l, NULL); }
static inline void alock_destroy(alock *l) { pthread_mutex_destroy(l); }
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

static inline uint64_t now_ns(void) {
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

/* alloc_conf.c */
AG_HIDDEN void ag__alloc_conf_default(alloc_conf *c);
AG_HIDDEN ag_status ag__alloc_conf_parse(const char *s, alloc_conf *c, const char *who);
/* alloc.c */
AG_HIDDEN size_t ag__alloc_largest_free(const ag_allocator *a);
AG_HIDDEN void ag__alloc_fmt_bytes(char *buf, size_t len, double b);
/* alloc_stats.c: with a->mu held, after an allocation (grew: it reserved memory). */
AG_HIDDEN void ag__alloc_peak_check(ag_allocator *a, bool grew);

#endif
